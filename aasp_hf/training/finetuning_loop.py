"""`examples/finetune.py`'s run after its model and optimiser are prepared: `resume_finetuning` (the newest complete
checkpoint's states loaded, the `RunState` returned), `FineTuningLoop` (the steps from there to `--max_steps`: the
update, logging, evaluation with the EMA weights and the model selection, atomic checkpoints, a stop signal's saved
step), `predict` (a split's logits, every process taking every W-th clip) and `write_run_results` (the selected model
installed for the pipeline and the Hub, its model card, all_results.json). One run is one (test fold, seed); the
sweep over them is the script's, its summary `sweep_summary` and `write_summary` here. The data order, the model selection
and the steps in the paper's terms: docs/downstream.md#fine-tuning-step-by-step."""

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..utils.errors import UsageError
from ..evaluation import baseline as logmel_baseline
from ..evaluation import classification_score, frame_detection, mean_std, write_finetune_markdown
from ..utils.files import write_text_atomically
from ..utils.schedules import learning_rate
from .augment import LogMelAugmentation
from .checkpointing import (
    AUGMENT_RNG,
    COLLATOR,
    DECODE_FAILURES,
    EMA,
    RunState,
    collator_state,
    latest_checkpoint,
    load_process_state,
    load_trainer_state,
    refused_writes,
    save_checkpoint,
)
from .data_order import micro_batches
from .resume import FINETUNING_RUN_ARGUMENTS, compare_run_arguments, describe_resume_changes, resume_run
from .run_log import write_logs
from .saved_models import install_best_model, save_best_model, write_classifier_card
from .step import augmented_inputs, finetuning_step
from .stopping import FailedClipShare, exit_stopped, stop_agreed

SPLITS = ("train", "validation", "test")
EVAL_CROP_SEED = 7  # split s is evaluated on the crops of seed 7 + SPLITS.index(s), the same at every evaluation


@dataclass
class FineTuningData:
    """The data of one run: `splits` ({split: rows}), `multi_label`, `num_labels` and `clip_seconds` (the crop).
    `frame_level`: sound-event records (recordings with timed events) for a frame classifier, whose crops get one
    target per output frame (`data.frame_targets`) and whose evaluation covers every frame of every recording
    (`evaluation.frame_detection`); `label_names` name its events."""

    splits: dict
    multi_label: bool
    num_labels: int
    clip_seconds: float
    frame_level: bool = False
    label_names: list = field(default_factory=list)


def fresh_run_state() -> RunState:
    """Where a fresh fine-tuning run starts: step 0, no best model yet, no evaluation."""
    return RunState(best={"valid_score": -math.inf, "step": 0, "test_score": float("nan")}, history=[])


def finetuning_run_arguments(args, accum: int, mixed_precision: str) -> dict:
    """What defines the run (`resume.FINETUNING_RUN_ARGUMENTS`), as each checkpoint stores it: `args` with the
    gradient accumulation and the precision the run resolved."""
    given = {**asdict(args), "gradient_accumulation_steps": accum, "mixed_precision": mixed_precision}
    return {name: given[name] for name in FINETUNING_RUN_ARGUMENTS}


def clip_labels(rows, multi_label: bool) -> list[list[int]]:
    """Per-clip label lists, read from the label column only (no audio decoding)."""
    column = "labels" if multi_label else "label"
    values = rows[column] if hasattr(rows, "column_names") else [row[column] for row in rows]
    return [list(v) if multi_label else [int(v)] for v in values]


# ----------------------------------------------------------------------------------------------- data (step 3)
def split_collator(feature_extractor, args, data: FineTuningData, split: str, seed: int):
    """The collator of `split`: crops of `data.clip_seconds` (random for train and validation, from `seed`), the
    padding of --clip_padding, labels as indices or (multi-label) as multi-hot vectors; the training split's with the
    per-clip changes of voice and channel of --speed_perturbation, --vtlp and --random_eq_db (drawn from its seeded
    generator), never another split's."""
    augment = {}
    if split == "train" and not data.frame_level:
        augment = {
            "speed_perturbation": args.speed_perturbation,
            "log_mel_augmentation": LogMelAugmentation.for_extractor(feature_extractor, args.vtlp, args.random_eq_db),
        }
    if data.frame_level:
        from ..data.frame_targets import AaspFrameTargetsCollator

        patch = getattr(feature_extractor, "frame_multiple", 16)  # = the model's time_patch_size
        return AaspFrameTargetsCollator(feature_extractor, data.clip_seconds, data.num_labels, patch, split, seed)
    from ..data import AaspFineTuningCollator

    return AaspFineTuningCollator(
        feature_extractor,
        clip_seconds=data.clip_seconds,
        split=split,
        num_labels=data.num_labels if data.multi_label else None,
        seed=seed,
        padding=args.clip_padding,
        **augment,
    )


def training_collator(feature_extractor, args, data: FineTuningData, process_index: int):
    """This process's collator of the training split; its generator, seeded by the run's seed and the process, is
    kept in each checkpoint."""
    return split_collator(feature_extractor, args, data, "train", seed=args.seed * 1000 + 1 + process_index)


def training_micro_batches(args, data: FineTuningData, num_processes: int, process_index: int, start: int = 0):
    """This process's micro-batches of the training split from micro-batch `start` of the seeded data order
    (`data_order.micro_batches`); with --class_balanced_sampling the epochs are class-balanced draws (seed 0)."""
    sampler = None
    if args.class_balanced_sampling:
        from ..data import ClassBalancedSampler

        sampler = ClassBalancedSampler(
            clip_labels(data.splits["train"], data.multi_label),
            num_classes=data.num_labels,
            num_samples=args.samples_per_epoch,
            seed=0,
        )
    return micro_batches(
        data.splits["train"],
        args.per_device_train_batch_size,
        num_processes,
        process_index,
        args.seed,
        start=start,
        num_workers=args.dataloader_num_workers,
        sampler=sampler,
    )


# ----------------------------------------------------------------------------------------------- resume (step 6)
def resume_finetuning(accelerator, optimizer, collator, augment_rng, ema, args, accum: int) -> RunState:
    """--resume: the newest complete checkpoint's run arguments compared with these, then its states loaded
    (`resume.resume_run`: model, optimiser, RNG, the collator's and the augmentation's generators, the EMA
    weights). Returns where the run stands (a fresh run's when there is nothing to resume)."""
    output_dir, world = Path(args.output_dir), accelerator.num_processes
    checkpoint = latest_checkpoint(output_dir, accelerator.print) if args.resume else None
    if checkpoint is None:
        if args.resume:
            resume_run(accelerator, optimizer, None, output_dir, restore=None)  # says so, empties the log
        return fresh_run_state()
    state = load_trainer_state(checkpoint)
    if state["num_processes"] != world:
        raise ValueError(
            f"{checkpoint} was written by {state['num_processes']} processes; exact resume needs "
            f"the same number, got {world}"
        )
    run_arguments = finetuning_run_arguments(args, accum, accelerator.mixed_precision)
    changes = compare_run_arguments(
        checkpoint,
        state.get("run_arguments"),
        run_arguments,
        args.resume_allow_changes,
        FINETUNING_RUN_ARGUMENTS,
        accelerator.mixed_precision,
        state["step"],
        args.max_steps,
    )
    changes = (
        describe_resume_changes(changes, state["run_arguments"], run_arguments, state["step"], finetuning=True)
        if changes
        else None
    )

    def restore(process_state: dict):
        collator.rng.bit_generator.state = collator_state(process_state)
        augment_rng.bit_generator.state = process_state[AUGMENT_RNG]
        if ema is not None:  # process 0 saved it
            ema.load_state_dict(load_process_state(checkpoint, 0)[EMA])

    return resume_run(accelerator, optimizer, checkpoint, output_dir, restore, changes)


# ----------------------------------------------------------------------------------------------- evaluation (step 7a)
@torch.no_grad()
def predict(model, rows, make_collator, batch_size, accelerator) -> tuple[np.ndarray, np.ndarray]:
    """Logits (N, C) and labels of `rows` (clips that fail to decode are skipped); each process takes every W-th
    clip and the results are gathered on every process."""
    was_training = model.training
    model.eval()
    collator = make_collator()
    mine = list(range(accelerator.process_index, len(rows), accelerator.num_processes))
    logits, labels = [], []
    for start in range(0, len(mine), batch_size):
        batch = collator([rows[i] for i in mine[start : start + batch_size]])
        if batch is None:
            continue
        with accelerator.autocast():
            out = model(
                input_values=batch["input_values"].to(accelerator.device),
                attention_mask=batch["attention_mask"].to(accelerator.device),
            ).logits
        logits.append(out.float().cpu().numpy())
        labels.append(batch["labels"].numpy())
    model.train(was_training)
    pieces = [(np.concatenate(logits), np.concatenate(labels))] if logits else []
    if accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        pieces = gather_object(pieces)
    return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])


# ----------------------------------------------------------------------------------------------- the loop (step 7)
class FineTuningLoop:
    """7. The training loop from the resumed step to --max_steps (or --stop_after_steps): per step the update
    (`aasp_hf.training.step.finetuning_step`: mixup then BCE on soft targets, SpecAugment, gradient clipping, the
    weight EMA right after `optimizer.step()`), logging, 7a. evaluation with the EMA weights every --eval_steps and
    the model selection, 7b. atomic checkpoints. The micro-batches come in the data order of `data_order` (drawn
    with replacement, class-balanced, with --class_balanced_sampling)."""

    def __init__(
        self,
        accelerator,
        model,
        optimizer,
        ema,
        collator,
        augment_rng,
        feature_extractor,
        args,
        accum: int,
        data: FineTuningData,
        position: RunState,
    ):
        self.accelerator, self.model, self.optimizer, self.ema = accelerator, model, optimizer, ema
        self.unwrapped = accelerator.unwrap_model(model)
        self.collator, self.augment_rng, self.feature_extractor = collator, augment_rng, feature_extractor
        self.args, self.accum, self.data = args, accum, data
        self.run_arguments = finetuning_run_arguments(args, accum, accelerator.mixed_precision)
        self.step, self.micro_position = position.step, position.micro_batches
        self.decode_failures_before, self.best, self.history = position.decode_failures, position.best, position.history
        self.output_dir = Path(args.output_dir)
        self.stop_step = min(args.max_steps, args.stop_after_steps or args.max_steps)
        self.batches = training_micro_batches(
            args, data, accelerator.num_processes, accelerator.process_index, start=self.micro_position
        )
        self.soft = data.multi_label or args.mixup_alpha > 0  # BCE (on soft targets with mixup), else cross-entropy
        self.spec_augment_fraction = args.spec_augment_fraction if args.spec_augment else None

    def next_batch(self) -> tuple:
        """The next micro-batch (a micro-batch where every clip failed to decode is skipped), augmented, on the
        device; its failed clips counted and its position in the data order kept."""
        batch = None
        while batch is None:
            _, rows = next(self.batches)
            skipped_before = self.collator.num_skipped
            batch = self.collator(rows)
            self.failed_share.add(len(rows), self.collator.num_skipped - skipped_before)
            self.micro_position += 1
            if batch is None and self.accelerator.num_processes > 1:
                raise RuntimeError("every clip of a micro-batch failed to decode (multi-process runs stop)")
        inputs = augmented_inputs(
            batch,
            self.data.num_labels,
            self.soft,
            self.args.mixup_alpha,
            self.spec_augment_fraction,
            self.augment_rng,
            self.args.freq_mask_fraction,
        )
        return tuple(t.to(self.accelerator.device) for t in inputs)

    def run(self) -> int:
        """Trains to the stop step; returns it. A stop signal saves the step and exits."""
        accelerator, args, accum = self.accelerator, self.args, self.accum
        history_path = self.output_dir / "log_history.jsonl"
        # smoothing=0: the ETA from the average rate since the start, evaluations included (the default smoothing
        # takes the step after an evaluation for its rate, and the ETA jumped from 3 to 33 minutes)
        self.progress = tqdm(
            total=args.max_steps,
            initial=self.step,
            disable=not accelerator.is_local_main_process,
            desc="finetune",
            smoothing=0,
        )
        self.failed_share = FailedClipShare(args.max_failed_clip_share)  # too many failures stop the run
        loss_sum, num_summed, t_log, step_of_log = 0.0, 0, time.time(), self.step
        self.model.train()
        while self.step < self.stop_step:
            # one step (aasp_hf.training.step.finetuning_step): the micro-batches' forward, loss and backward,
            # clipping, AdamW and the weight EMA right after it
            lr = learning_rate(self.step, args.max_steps, args.warmup_steps, args.learning_rate, args.min_learning_rate)
            losses, grad_norm = finetuning_step(
                accelerator,
                self.model,
                self.optimizer,
                self.next_batch,
                accum,
                lr,
                args.max_grad_norm,
                self.soft,
                self.ema,
                args.ema_decay,
            )
            for value in losses:
                loss_sum += value / accum
            self.step = step = self.step + 1
            num_summed += 1
            self.progress.update(1)
            # SIGTERM / SIGUSR1 / SIGINT on any process (aasp_hf.training.stopping): log and save this step, then exit
            stopping = stop_agreed(accelerator) and step < self.stop_step
            due_log = step % args.logging_steps == 0 or step == self.stop_step or stopping
            data_vanishing = None
            if due_log or step % args.save_steps == 0:
                data_vanishing = self.failed_share.check(accelerator)  # every process: saved below, then it stops
            if due_log:
                now = time.time()
                logs = {
                    "loss": loss_sum / num_summed,
                    "learning_rate": lr,
                    "grad_norm": float(grad_norm),
                    "steps_per_second": (step - step_of_log) / max(now - t_log, 1e-9),
                }
                write_logs(accelerator, history_path, step, logs)
                self.progress.set_postfix(loss=f"{logs['loss']:.4f}", lr=f"{lr:.2e}")
                loss_sum, num_summed, t_log, step_of_log = 0.0, 0, now, step
            if step % args.eval_steps == 0 or step == args.max_steps:
                self.evaluate()
            if step % args.save_steps == 0 or step == self.stop_step or stopping or data_vanishing is not None:
                saved = self.save()
            if data_vanishing is not None:
                raise UsageError(
                    f"stopping at step {step}: {data_vanishing}. Saved "
                    f"{self.output_dir / f'checkpoint-{step}'}. Restore the data, then run the same "
                    "command with --resume (or raise --max_failed_clip_share)."
                )
            if stopping:
                self.progress.close()
                exit_stopped(accelerator, saved, step, "finetune.py")
        self.progress.close()
        return self.step

    def score_on(self, model, split: str) -> float:
        """Accuracy or mAP of `model` on `split`, its crops the same at every evaluation (seed EVAL_CROP_SEED + the
        split's index)."""

        def make_collator():
            seed = EVAL_CROP_SEED + SPLITS.index(split)
            return split_collator(self.feature_extractor, self.args, self.data, split, seed)

        if self.data.frame_level:  # every output frame of every recording, post-processed into events
            return self.detection_scores(model, split, with_psds=False)[frame_detection.METRIC]
        logits, labels = predict(
            model, self.data.splits[split], make_collator, self.args.per_device_eval_batch_size, self.accelerator
        )
        return classification_score(logits, labels, self.data.multi_label)

    def frame_scores(self, model, split: str) -> dict:
        """{filename: (T', C) sigmoid scores} of a frame classifier on every recording of `split`."""
        rows = self.data.splits[split]
        batch_size = self.args.per_device_eval_batch_size
        return frame_detection.frame_scores(
            model, rows, self.feature_extractor, self.data.clip_seconds, batch_size, self.accelerator
        )

    def detection_scores(self, model, split: str, settings: dict | None = None, with_psds: bool = True) -> dict:
        """Event- and segment-based scores of a frame classifier on `split`, post-processed with `settings` (default:
        the model config's)."""
        config = model.config
        settings = frame_detection.postprocessing_settings(config) if settings is None else settings
        return frame_detection.detection_scores(
            self.frame_scores(model, split),
            self.data.splits[split],
            self.data.label_names,
            frame_detection.frame_seconds(config, self.feature_extractor),
            settings,
            with_psds,
        )

    def evaluate(self):
        """7a. Evaluation with the EMA weights (the trained weights when the EMA is off), selection by --select_on:
        the best validation score and the test score at its step, the best test score within the budget (EAT), or
        the last step's; the selected model saved as it is found."""
        args, step, best, accelerator = self.args, self.step, self.best, self.accelerator
        evaluated = self.ema if self.ema is not None else self.unwrapped
        best_model = self.output_dir / "best_model"
        if args.select_on == "validation":
            record = {"step": step, "valid_score": self.score_on(evaluated, "validation")}
            if record["valid_score"] > best["valid_score"]:
                record["test_score"] = self.score_on(evaluated, "test")
                best = {"valid_score": record["valid_score"], "step": step, "test_score": record["test_score"]}
                if accelerator.is_main_process:
                    save_best_model(evaluated, self.feature_extractor, best_model, self.data.clip_seconds)
        else:  # "test": the best test score within the budget (EAT); "last": the last step's
            record = {"step": step, "test_score": self.score_on(evaluated, "test")}
            if args.select_on == "last" or record["test_score"] > best["valid_score"]:
                selection = record["test_score"] if args.select_on == "test" else float("nan")
                best = {"valid_score": selection, "step": step, "test_score": record["test_score"]}
                if accelerator.is_main_process and (args.select_on == "test" or step == args.max_steps):
                    save_best_model(evaluated, self.feature_extractor, best_model, self.data.clip_seconds)
        self.best = best
        self.history.append(record)
        score = record["valid_score"] if args.select_on == "validation" else record["test_score"]
        if accelerator.is_main_process:  # above the bar, not after it on its line
            self.progress.write(
                f"step {step}: {args.select_on} {score:.4f} "
                f"(selected step {best['step']}, test there {best['test_score']:.4f})"
            )

    def save(self):
        """7b. Checkpoint: the states, the data position, the generators, the EMA weights, the best-so-far."""
        accelerator = self.accelerator
        process_state = {
            COLLATOR: self.collator.rng.bit_generator.state,
            AUGMENT_RNG: self.augment_rng.bit_generator.state,
            DECODE_FAILURES: self.decode_failures_before + self.collator.num_skipped,
        }
        if accelerator.process_index == 0 and self.ema is not None:
            process_state[EMA] = self.ema.state_dict()
        state = RunState(
            self.step,
            micro_batches=self.micro_position,
            num_processes=accelerator.num_processes,
            best=self.best,
            history=self.history,
            run_arguments=self.run_arguments,
        )
        return save_checkpoint(accelerator, self.output_dir, state, process_state, self.args.save_total_limit)


# ----------------------------------------------------------------------------------------------- results (step 8)
def write_run_results(loop: FineTuningLoop, selection_rule: str) -> dict:
    """8. The best model (EMA weights at the selected step) for the pipeline and the Hub, its model card, and
    all_results.json; returns the results. `selection_rule`: the sentence the results and the card give for the
    model selection."""
    accelerator, args, step, best, output_dir = loop.accelerator, loop.args, loop.step, loop.best, loop.output_dir
    world, accum, data = accelerator.num_processes, loop.accum, loop.data
    decode_failures = loop.decode_failures_before + loop.collator.num_skipped
    decode_failures = int(accelerator.reduce(torch.tensor(decode_failures, device=accelerator.device), "sum"))
    results = {
        "metric": frame_detection.METRIC if data.frame_level else "mAP" if data.multi_label else "accuracy",
        "best_valid_score": best["valid_score"],
        "best_step": best["step"],
        "test_score": best["test_score"],
        "step": step,
        "max_steps": args.max_steps,
        "finished": step >= args.max_steps,
        "num_processes": world,
        "decode_failures": decode_failures,
        "ema_decay": args.ema_decay,
        "select_on": args.select_on,
        "selection_rule": selection_rule,
        "gradient_accumulation_steps": accum,
        "total_train_batch_size": args.per_device_train_batch_size * world * accum,
        "eval_history": loop.history,
    }
    accelerator.wait_for_everyone()
    if data.frame_level and (output_dir / "best_model").is_dir():
        results.update(sound_event_results(loop, output_dir / "best_model"))
    if accelerator.is_main_process:
        needed = sum(p.numel() * p.element_size() for p in loop.unwrapped.state_dict().values())

        def intact():
            return f"{latest_checkpoint(output_dir)} is intact and --resume writes the results from it"

        with refused_writes(output_dir, "the best model and results", needed, intact):  # a full disk: one line
            if step >= args.max_steps and (output_dir / "best_model").is_dir():
                install_best_model(output_dir)  # the model's files whole or not at all
                write_classifier_card(
                    output_dir, loop.unwrapped, loop.feature_extractor, args, data.splits, results, data.clip_seconds
                )
            write_text_atomically(
                output_dir / "all_results.json", json.dumps({**results, "arguments": asdict(args)}, indent=2)
            )
    accelerator.wait_for_everyone()
    return results


def sound_event_results(loop: FineTuningLoop, best_model: Path) -> dict:
    """8a. A frame classifier's post-processing and final scores: the selected model (`best_model`) scores every
    recording of the validation split, where there is one, and each label's threshold is the one that maximises its
    event-based F1 there (without a validation split the config's thresholds stay: 0.5 unless given); the thresholds
    are saved in the model's config, so that the tagger and the pipeline apply them, and the test split is scored
    with them. Returns the results' fields: `test_score` (class-wise event-based F1) and `sound_events` (every
    score, the thresholds, and where they came from)."""
    model = type(loop.unwrapped).from_pretrained(best_model).to(loop.accelerator.device)  # the frame classifier
    settings = frame_detection.postprocessing_settings(model.config)
    frame_seconds = frame_detection.frame_seconds(model.config, loop.feature_extractor)
    chosen_on = "the config (given, or 0.5 without a validation split)"
    if "validation" in loop.data.splits and loop.args.event_thresholds is None:
        scores = loop.frame_scores(model, "validation")
        settings["thresholds"] = frame_detection.choose_thresholds(
            scores, loop.data.splits["validation"], loop.data.label_names, frame_seconds, settings
        )
        chosen_on = "validation (per label, the best event-based F1)"
        if loop.accelerator.is_main_process:  # the thresholds travel with the model
            config_path = best_model / "config.json"
            config = json.loads(config_path.read_text())
            config["event_thresholds"] = settings["thresholds"]
            write_text_atomically(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
        loop.accelerator.wait_for_everyone()
    test = loop.detection_scores(model, "test", settings)
    return {
        "test_score": test[frame_detection.METRIC],
        "sound_events": {
            "test": test,
            "thresholds": settings["thresholds"],
            "thresholds_chosen_on": chosen_on,
            "frame_seconds": frame_seconds,
            "patch": model.config.time_patch_size,
            "postprocessing": {k: v for k, v in settings.items() if k != "thresholds"},
        },
    }


# -------------------------------------------------------------------------------------------------- the sweep's summary
# The results of `examples/finetune.py`'s sweep over parts (the test folds of a K-fold task, or the one split) ×
# seeds: `sweep_summary` gathers the sub-runs' results with the test score's mean ± std over seeds of the mean over
# parts (the paper's protocol: 3 seeds) and the protocol that produced them; `write_summary` writes it
# (all_results.json, results.md), prints its line and adds the log-mel baseline on the same parts and clips beside it
# (`aasp_hf.evaluation.baseline`, docs/downstream.md#the-log-mel-baseline).
# what the summary of a single run (one part, one seed) repeats from that run's results
SINGLE_RUN_FIELDS = (
    "best_valid_score",
    "best_step",
    "test_score",
    "step",
    "finished",
    "decode_failures",
    "gradient_accumulation_steps",
    "total_train_batch_size",
    "eval_history",
)


def sweep_summary(
    args, runs: list[dict], task: str, num_classes: int, clip_seconds: float, parts, selection_rule: str, kfold: bool
) -> dict:
    """The sweep's results: `runs` (one dict per (part, seed) sub-run, with its "part" and "seed"), the test score
    per seed (the mean over parts) and its mean ± std over seeds (ddof=1), the task and the model selection."""
    seeds = args.seeds or [args.seed]
    per_seed = [float(np.mean([r["test_score"] for r in runs if r["seed"] == s])) for s in seeds]
    test_mean, test_std = mean_std(per_seed)
    single = len(parts) == 1 and len(seeds) == 1
    return {
        "task": task,
        "model_name_or_path": str(args.model_name_or_path),
        "metric": runs[0]["metric"],
        "num_classes": num_classes,
        "clip_seconds": clip_seconds,
        "parts": list(parts),
        "seeds": seeds,
        "max_steps": args.max_steps,
        "select_on": args.select_on,
        "selection_rule": selection_rule,
        "kfold_validation": args.kfold_validation if kfold and args.select_on == "validation" else None,
        "test_per_seed": dict(zip(map(str, seeds), per_seed)),
        "test_mean": test_mean,
        "test_std": test_std,
        "runs": runs,
        **({k: runs[0][k] for k in SINGLE_RUN_FIELDS} if single else {}),
        "arguments": asdict(args),
    }


def write_summary(summary: dict, args, parts: dict, multi_label: bool, event_labels: list | None = None) -> dict:
    """On the main process: `summary` written to --output_dir (all_results.json, results.md) and its line printed,
    then the log-mel baseline on the same parts and clips computed and written beside it (its crops from the
    evaluation's seeds, EVAL_CROP_SEED + the split's index). Returns the summary, with the baseline."""
    if int(os.environ.get("RANK", "0")) != 0:
        return summary
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    def write(summary):
        write_text_atomically(output_dir / "all_results.json", json.dumps(summary, indent=2))
        write_finetune_markdown(output_dir / "results.md", summary)

    write(summary)
    print(
        f"{summary['task']} {summary['metric']}: {100 * summary['test_mean']:.2f} ± {100 * summary['test_std']:.2f} "
        f"-> {output_dir}/results.md"
    )
    if event_labels is not None:  # sound events: every score's mean over runs, the per-frame log-mel baseline
        from ..evaluation import frame_detection

        summary = {**summary, "sound_events": frame_detection.mean_scores(summary["runs"])}
        write(summary)
        return frame_detection.with_frame_baseline(summary, write, args.baseline, parts, event_labels)
    summary = logmel_baseline.with_baseline(
        summary,
        write,
        args.baseline,
        parts,
        summary["clip_seconds"],
        multi_label,
        summary["num_classes"],
        args.baseline_max_clips,
        crop_seed=EVAL_CROP_SEED,
    )
    if summary.get("unseen_sources_warning"):
        warn_in_model_cards(output_dir, summary["unseen_sources_warning"])
    return summary


def warn_in_model_cards(output_dir: Path, sentence: str):
    """`sentence` added to the model card of the run (README.md in --output_dir) and of each sub-run of a sweep
    (<part>_seed<k>/README.md), so that a model shared from any of them says it."""
    for card in [output_dir / "README.md", *sorted(output_dir.glob("*_seed*/README.md"))]:
        if card.is_file() and sentence not in (text := card.read_text()):
            write_text_atomically(card, f"{text.rstrip()}\n\n## On sources training never heard\n\n**{sentence}**\n")
