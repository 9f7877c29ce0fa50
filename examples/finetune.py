"""Fine-tuning of a pre-trained AaSP encoder for audio classification (paper Sec. Training Setup, Fine-tuning Setup;
Table hyperparams 1; datasets, splits and EVAR clip lengths: Sec. Datasets, aasp_hf.data).

    accelerate launch examples/finetune.py --config examples/configs/finetune/as20k.json \
        --model_name_or_path runs/pt/encoder --data_root /data/audioset --output_dir runs/ft_as20k
    python examples/finetune.py --config examples/configs/finetune/esc50.json --model_name_or_path runs/pt/encoder \
        --data_root /data/ESC-50-master --all_folds --seeds 0 1 2 --output_dir runs/ft_esc50
    python examples/finetune.py --model_name_or_path runs/pt/encoder --synthetic_per_class 20 \
        --per_device_train_batch_size 32 --max_steps 100   # synthetic demo clips: 5 classes × 20 train clips

`runs/pt/encoder` is the encoder that `examples/pretrain.py --config examples/configs/pretrain_tiny_cpu.json` saves.

Arguments come from the dataclass `aasp_hf.training.finetuning_arguments.FinetuneArguments`: on the command line, from
one JSON file (`finetune.py preset.json`), or from `--config preset.json` followed by command-line overrides. The
presets copy Table hyperparams 1 column by column; the paper's batch size is the total over its GPUs (4 for AS-2M /
AS-20K), so their per-device batch is 32 and they state the global batch, `total_train_batch_size` 128: on fewer
processes gradient accumulation makes it up (1 process: 4 micro-batches of 32 per step;
`aasp_hf.training.arguments.gradient_accumulation_for`). One preset is not the paper's: `small_folder.json`, for a few
hundred clips from a fresh or barely pre-trained encoder (mean pooling, lr 4e-3 without layer decay, 1,500 steps of 32
clips, masked padding of short clips; measured in research/2026-11-small-data-recipe,
docs/downstream.md#a-small-folder-of-your-own-clips).

Steps: 1. data (`aasp_hf.data.load`, one test fold of a K-fold task, or synthetic demo clips), 2. model
(`AaspForAudioClassification`: LayerNorm + Linear on CLS over a pre-trained encoder, drop path), 3. crops and features
in the collator, 4. AdamW with layer-wise lr decay (lr · decay^(L+1 − layer_id)), no weight decay on biases / norms /
CLS / positions, warm-up + cosine by step (pure functions), 5. `accelerator.prepare`, 6. exact `--resume` (step, RNG
states, data position, EMA weights, best-so-far), 7. loop: mixup (then BCE on soft targets), SpecAugment (one time and
one frequency mask of at most 1/5 of the input), gradient clipping, weight EMA updated right after `optimizer.step()`,
7a. evaluation every `eval_steps` with the EMA weights (accuracy or mAP) on the split that `--select_on` names: the
best validation score within the budget, its step and the test score there (`validation`), the best test score within
the budget (`test`), or the last step's (`last`), 7b. atomic checkpoints, 8. the best model saved with
`save_pretrained` (+ the feature extractor and `id2label`) for
`pipeline("audio-classification", model=output_dir, trust_remote_code=True)`, `all_results.json`, `results.md`.
`--seeds 0 1 2` and `--all_folds` run one sub-run per (fold, seed) and report mean ± std over seeds of the mean over
folds (the paper's protocol: 3 seeds).
Beside the results, the log-mel baseline (`aasp_hf.evaluation.baseline`: log-mel statistics + logistic regression on
the same parts and clips, seconds on a CPU; `--baseline none` skips it, `--baseline_max_clips` caps its clips per split)
and a line when the model is below it (docs/downstream.md#the-log-mel-baseline).

Data order (`aasp_hf.training.data_order`): each epoch is a seeded permutation of train (AS-2M: 200K class-balanced
draws with replacement, seeded by epoch); global micro-batch g of an epoch is positions [g·B·W, (g+1)·B·W), process
r taking its r-th slice of B clips; the incomplete last global batch is dropped. The data position is a pure
function of the number of micro-batches consumed, which the checkpoint stores with the crop and augmentation
generators.

Model selection (`aasp_hf.data.downstream_parts`, the rules linear_eval.py uses too; `all_results.json` and
`results.md` record the rule): `--select_on validation` (default) selects on the dataset's validation split, or on
`validation_fraction` of train held out (seed 0) when it has none, or for K-fold tasks on a random 10 % of the
training folds (`--kfold_validation evar`, EVAR's rule, seed 0; `next`: the fold after the test fold);
`--select_on test` trains on the whole training set (all of AS-20K / AS-2M, all other folds) and selects on the
test split (EAT's rule, "the best result within the budget"; the AudioSet and ESC-50 presets use it; the old
`--kfold_validation test` means the same); `--select_on last` trains on the whole training set and reports the
last step. Other choices the paper leaves open: the validation crop is random but the same at every evaluation;
gradient clipping at `max_grad_norm` (not in the paper; EAT's 4.0 by default).
"""

import json
import logging
import math
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from transformers import AutoFeatureExtractor

import aasp_hf  # noqa: F401  (registers the Auto* classes)
from aasp_hf import AaspFeatureExtractor, AaspForAudioClassification
from aasp_hf.evaluation import classification_score, mean_std, without_truncation, write_finetune_markdown
from aasp_hf.evaluation import baseline as logmel_baseline
from aasp_hf.schedules import learning_rate
from aasp_hf.training import save_checkpoint
from aasp_hf.training.checkpointing import (
    RUN_ARTEFACTS,
    check_output_dir,
    checkpoint_to_resume,
    find_latest_checkpoint,
    load_process_state,
    load_trainer_state,
    read_results,
    refused_writes,
    remove_artefacts,
    thread_count_note,
    truncate_log,
    write_text_atomically,
)
from aasp_hf.training.console import describe_new_head, loading_quietly, quiet_libraries
from aasp_hf.training.data_order import micro_batches
from aasp_hf.training.failed_clips import FailedClipShare
from aasp_hf.training.resume import FINETUNING_RUN_ARGUMENTS as RUN_ARGUMENTS
from aasp_hf.training.resume import (
    compare_run_arguments,
    describe_resume_changes,
    finished_finetuning,
    load_training_state,
)
from aasp_hf.training.run_log import write_logs
from aasp_hf.training.saved_models import install_best_model, save_best_model, write_classifier_card
from aasp_hf.training.run_lock import hold_run_folder
from aasp_hf.training.model_ema import create_ema
from aasp_hf.training.optim import layer_decay_param_groups
from aasp_hf.training.step import augmented_inputs, finetuning_step
from aasp_hf.training.arguments import gradient_accumulation_for, parse_arguments
from aasp_hf.training.finetuning_arguments import FinetuneArguments, checked_arguments, scale_batch_to_data
from aasp_hf.training.short_run import DEFAULT_BATCH_SIZE
from aasp_hf.errors import UsageError
from aasp_hf.hub import check_model_path
from aasp_hf.training.launch import check_launch
from aasp_hf.entry_points import run_stoppable
from aasp_hf.training.stopping import exit_stopped, stop_agreed

logger = logging.getLogger(__name__)
SAMPLE_RATE = 16000
SPLITS = ("train", "validation", "test")
SPLIT_SEED = 0  # the held-out validation / test draws: one split for every seed of a run
# What a run leaves in output_dir (sub-runs of --seeds / --all_folds in <part>_seed<k>/; the best model copied in).
FINETUNE_ARTEFACTS = RUN_ARTEFACTS + (
    "best_model*",
    "results.md",
    "*_seed*",
    "model.safetensors",
    "config.json",
    "preprocessor_config.json",
)
# ----------------------------------------------------------------------------------------------- arguments


def parse_args(argv=None) -> FinetuneArguments:
    """CLI, or one JSON file, or `--config file.json` whose values the remaining CLI arguments override; checked, and
    the defaults that depend on the run's length derived, one printed line each (`checked_arguments`)."""
    (args,) = parse_arguments(FinetuneArguments, argv)
    return checked_arguments(args)


# ----------------------------------------------------------------------------------------------- data (step 1)
def load_parts(args) -> tuple[dict, bool, list[str], float, str]:
    """-> ({part: {split: rows}}, multi_label, class names, clip seconds, task): the arguments mapped onto
    `data.load_downstream` (the protocol linear_eval.py uses too). A K-fold dataset gives one part: the test fold
    `--test_fold` (default the first), or every fold with `--all_folds`. The validation draws are seeded with
    SPLIT_SEED (0), the same split for every `--seeds` entry. The synthetic data keeps its own validation split."""
    from aasp_hf import data

    if args.synthetic_per_class > 0:
        from aasp_hf.data.synthetic import LABELS, synthetic_splits

        # train / validation clips 25 % longer than the crop (random crops); test clips exactly the crop, so the
        # pipeline on a raw test clip sees what the evaluation saw
        clip_seconds = args.clip_seconds or 1.0
        splits = synthetic_splits(
            args.synthetic_per_class,
            1234,
            seconds=1.25 * clip_seconds,
            test_seconds=clip_seconds,
            multi_label=args.synthetic_multi_label,
        )
        if args.select_on != "validation":  # nothing selects on it
            del splits["validation"]
        return {"synthetic": splits}, args.synthetic_multi_label, list(LABELS), clip_seconds, "synthetic"
    if args.dataset is None:
        raise ValueError("Pass --dataset (with --data_root) or --synthetic_per_class N.")
    downstream = data.load_downstream(
        args.dataset,
        root=args.data_root,
        loader_kwargs=json.loads(args.dataset_kwargs) if args.dataset_kwargs else None,
        task=args.task,
        clip_seconds=args.clip_seconds,
        folds=None if args.all_folds or args.test_fold is None else [args.test_fold],
        max_folds=None if args.all_folds else 1,  # one test fold (the first by default) unless --all_folds
        kfold_validation=args.kfold_validation,
        select_on=args.select_on,
        validation_fraction=args.validation_fraction,
        test_fraction=args.test_fraction,
        seed=SPLIT_SEED,
        group_by=args.group_by,
    )
    return (downstream.parts, downstream.multi_label, downstream.label_names, downstream.clip_seconds, downstream.task)


def clip_labels(rows, multi_label: bool) -> list[list[int]]:
    """Per-clip label lists, read from the label column only (no audio decoding)."""
    column = "labels" if multi_label else "label"
    values = rows[column] if hasattr(rows, "column_names") else [row[column] for row in rows]
    return [list(v) if multi_label else [int(v)] for v in values]


# ----------------------------------------------------------------------------------------------- loss, eval (step 7)
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


# ----------------------------------------------------------------------------------------------- resume
# ----------------------------------------------------------------------------------------------- one run
def run(
    args: FinetuneArguments,
    splits: dict,
    multi_label: bool,
    names: list[str],
    clip_seconds: float,
    selection_rule: str | None = None,
) -> dict:
    """Fine-tunes once (one seed, one test fold) into `args.output_dir`; returns its results. `selection_rule`: the
    sentence that the results and the model card give for the model selection (default: from `args.select_on`)."""
    from aasp_hf.data import AaspFineTuningCollator, ClassBalancedSampler, describe_protocol

    if selection_rule is None:
        selection_rule = describe_protocol(
            args.select_on, False, args.kfold_validation, args.validation_fraction, SPLIT_SEED, args.group_by
        )

    output_dir = Path(args.output_dir)
    accelerator = Accelerator(mixed_precision=args.mixed_precision, project_dir=str(output_dir))
    check_launch(accelerator.num_processes, "finetune.py")  # a launcher's processes that did not join: one line
    rank, world = accelerator.process_index, accelerator.num_processes
    accum = gradient_accumulation_for(
        args.total_train_batch_size, args.per_device_train_batch_size, world, args.gradient_accumulation_steps
    )  # the preset's global batch on `world`
    num_clips = len(splits["train"])
    if not args.class_balanced_sampling and args.per_device_train_batch_size * world > num_clips:
        raise UsageError(
            f"--per_device_train_batch_size {args.per_device_train_batch_size} × {world} process"
            f"{'es' if world > 1 else ''} is more than the {num_clips} training clips: pass "
            f"--per_device_train_batch_size {max(1, num_clips // world)} or less"
        )
    set_seed(args.seed)  # the head's initialisation, identical on every process

    # 2. Model: the encoder's weights load under `aasp`; LayerNorm + Linear on CLS are new.
    model, feature_extractor = load_classifier(accelerator, args, names, multi_label)
    ema = create_ema(model) if args.ema_decay > 0 else None
    set_seed(args.seed, device_specific=True)  # dropout / drop path: one stream per process

    # 3. Data: crops and features in the collator (called in the loop, so its generator is checkpointed).
    num_labels = len(names)
    collator = AaspFineTuningCollator(
        feature_extractor,
        clip_seconds=clip_seconds,
        split="train",
        num_labels=num_labels if multi_label else None,
        seed=args.seed * 1000 + 1 + rank,
        padding=args.clip_padding,
    )
    augment_rng = np.random.default_rng(args.seed * 1000 + 2 + rank)
    sampler = None
    if args.class_balanced_sampling:
        sampler = ClassBalancedSampler(
            clip_labels(splits["train"], multi_label),
            num_classes=num_labels,
            num_samples=args.samples_per_epoch,
            seed=0,
        )

    # 4. Optimiser: layer-wise lr decay on top of the decay / no-decay split; lr a pure function of the step.
    optimizer = torch.optim.AdamW(
        layer_decay_param_groups(model, args.weight_decay, args.layer_decay),
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )

    # 5. Distribute.
    model, optimizer = accelerator.prepare(model, optimizer)
    if ema is not None:
        ema.to(accelerator.device)

    # 6. Resume: model, optimiser and RNG states, generators, EMA weights, data position and best-so-far.
    given = {**asdict(args), "gradient_accumulation_steps": accum, "mixed_precision": accelerator.mixed_precision}
    run_arguments = {name: given[name] for name in RUN_ARGUMENTS}
    position = resume_run(accelerator, optimizer, collator, augment_rng, ema, args, run_arguments)

    # 7. Training loop, 8. the best model and the results.
    loop = FineTuningLoop(
        accelerator,
        model,
        optimizer,
        ema,
        collator,
        augment_rng,
        feature_extractor,
        args,
        accum,
        splits,
        multi_label,
        num_labels,
        clip_seconds,
        run_arguments,
        position,
        sampler,
    )
    loop.run()
    return write_run_results(loop, args, splits, multi_label, clip_seconds, selection_rule)


def load_classifier(accelerator, args, names: list[str], multi_label: bool):
    """(model, feature extractor): `AaspForAudioClassification` on the pre-trained encoder (its head new, said in
    one line) and the encoder's feature extractor, which takes whole clips."""
    with loading_quietly():  # transformers' report would list the new head as MISSING: one line of ours instead
        model, loading_info = AaspForAudioClassification.from_pretrained(
            args.model_name_or_path,
            num_labels=len(names),
            id2label=dict(enumerate(names)),
            label2id={n: i for i, n in enumerate(names)},
            problem_type="multi_label_classification" if multi_label else "single_label_classification",
            drop_path_rate=args.drop_path_rate,
            output_loading_info=True,
            **({"classifier_pooling": args.classifier_pooling} if args.classifier_pooling else {}),
        )
    accelerator.print(describe_new_head(loading_info, args.model_name_or_path))
    if args.freeze_feature_encoder:
        model.freeze_feature_encoder()
    try:
        feature_extractor = without_truncation(
            AutoFeatureExtractor.from_pretrained(args.model_name_or_path), args.model_name_or_path
        )  # the saved model takes whole clips
    except (OSError, ValueError):
        logger.warning(
            f"No feature extractor saved with {args.model_name_or_path}: using AaspFeatureExtractor() "
            f"(the paper's m2d front end, mean -7.1, std 4.1)."
        )
        feature_extractor = AaspFeatureExtractor(feature_size=model.config.num_mel_bins)
    return model, feature_extractor


def resume_run(accelerator, optimizer, collator, augment_rng, ema, args, run_arguments: dict) -> dict:
    """--resume: the newest complete checkpoint's states loaded (model, optimiser, RNG, the collator's and the
    augmentation's generators, the EMA weights). Returns the position: step, micro-batches consumed, decode failures
    so far, the best-so-far and the evaluation history (a fresh run's when there is nothing to resume)."""
    output_dir, rank, world = Path(args.output_dir), accelerator.process_index, accelerator.num_processes
    position = {
        "step": 0,
        "micro_batches": 0,
        "decode_failures": 0,
        "history": [],
        "best": {"valid_score": -math.inf, "step": 0, "test_score": float("nan")},
    }
    checkpoint = checkpoint_to_resume(output_dir, accelerator.print) if args.resume else None
    if checkpoint is None:
        if args.resume:
            accelerator.print(f"--resume: no complete checkpoint in {output_dir}, starting from scratch")
            if accelerator.is_main_process:  # a run killed before its first checkpoint logged steps no weights keep
                truncate_log(output_dir / "log_history.jsonl", 0)
        return position
    state = load_trainer_state(checkpoint)
    if state["num_processes"] != world:
        raise ValueError(
            f"{checkpoint} was written by {state['num_processes']} processes; exact resume needs "
            f"the same number, got {world}"
        )
    changes = compare_run_arguments(
        checkpoint,
        state.get("run_arguments"),
        run_arguments,
        args.resume_allow_changes,
        RUN_ARGUMENTS,
        accelerator.mixed_precision,
        state["step"],
        args.max_steps,
    )
    load_training_state(accelerator, optimizer, checkpoint)  # the optimiser's hyper-parameters: the arguments'
    mine = load_process_state(checkpoint, rank)
    collator.rng.bit_generator.state = mine["collator_rng"]
    augment_rng.bit_generator.state = mine["augment_rng"]
    if ema is not None:
        ema.load_state_dict(load_process_state(checkpoint, 0)["ema"])
    position = {
        "step": state["step"],
        "micro_batches": state["micro_batches"],
        "decode_failures": mine["decode_failures"],
        "best": state["best"],
        "history": state["history"],
    }
    accelerator.print(f"resumed from {checkpoint} at step {state['step']}")
    if (note := thread_count_note(checkpoint, state, accelerator.device.type)) is not None:
        accelerator.print(note)
    if changes:
        accelerator.print(
            describe_resume_changes(changes, state["run_arguments"], run_arguments, state["step"], finetuning=True)
        )
    if accelerator.is_main_process:  # the steps after the checkpoint are computed again: log them once
        truncate_log(output_dir / "log_history.jsonl", state["step"])
    return position


class FineTuningLoop:
    """7. The training loop from the resumed step to --max_steps (or --stop_after_steps): per step the update
    (`aasp_hf.training.step.finetuning_step`: mixup then BCE on soft targets, SpecAugment, gradient clipping, the
    weight EMA right after `optimizer.step()`), logging, 7a. evaluation with the EMA weights every --eval_steps and
    the model selection, 7b. atomic checkpoints."""

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
        splits: dict,
        multi_label: bool,
        num_labels: int,
        clip_seconds: float,
        run_arguments: dict,
        position: dict,
        sampler,
    ):
        self.accelerator, self.model, self.optimizer, self.ema = accelerator, model, optimizer, ema
        self.unwrapped = accelerator.unwrap_model(model)
        self.collator, self.augment_rng, self.feature_extractor = collator, augment_rng, feature_extractor
        self.args, self.accum, self.splits, self.multi_label = args, accum, splits, multi_label
        self.num_labels, self.clip_seconds, self.run_arguments = num_labels, clip_seconds, run_arguments
        self.step, self.micro_position = position["step"], position["micro_batches"]
        self.decode_failures_before, self.best, self.history = (
            position["decode_failures"],
            position["best"],
            position["history"],
        )
        self.output_dir = Path(args.output_dir)
        self.stop_step = min(args.max_steps, args.stop_after_steps or args.max_steps)
        rank, world = accelerator.process_index, accelerator.num_processes
        self.batches = micro_batches(
            splits["train"],
            args.per_device_train_batch_size,
            world,
            rank,
            args.seed,
            start=self.micro_position,
            num_workers=args.dataloader_num_workers,
            sampler=sampler,
        )
        self.soft = multi_label or args.mixup_alpha > 0  # BCE (on soft targets with mixup), else cross-entropy
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
            batch, self.num_labels, self.soft, self.args.mixup_alpha, self.spec_augment_fraction, self.augment_rng
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
        """Accuracy or mAP of `model` on `split`, its crops the same at every evaluation (seed 7 + the split's
        index)."""
        from aasp_hf.data import AaspFineTuningCollator

        def make_collator():
            return AaspFineTuningCollator(
                self.feature_extractor,
                clip_seconds=self.clip_seconds,
                split=split,
                num_labels=self.num_labels if self.multi_label else None,
                seed=7 + SPLITS.index(split),
                padding=self.args.clip_padding,
            )

        logits, labels = predict(
            model, self.splits[split], make_collator, self.args.per_device_eval_batch_size, self.accelerator
        )
        return classification_score(logits, labels, self.multi_label)

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
                    save_best_model(evaluated, self.feature_extractor, best_model)
        else:  # "test": the best test score within the budget (EAT); "last": the last step's
            record = {"step": step, "test_score": self.score_on(evaluated, "test")}
            if args.select_on == "last" or record["test_score"] > best["valid_score"]:
                selection = record["test_score"] if args.select_on == "test" else float("nan")
                best = {"valid_score": selection, "step": step, "test_score": record["test_score"]}
                if accelerator.is_main_process and (args.select_on == "test" or step == args.max_steps):
                    save_best_model(evaluated, self.feature_extractor, best_model)
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
            "collator_rng": self.collator.rng.bit_generator.state,
            "augment_rng": self.augment_rng.bit_generator.state,
            "decode_failures": self.decode_failures_before + self.collator.num_skipped,
        }
        if accelerator.process_index == 0 and self.ema is not None:
            process_state["ema"] = self.ema.state_dict()
        return save_checkpoint(
            accelerator,
            self.output_dir,
            self.step,
            process_state=process_state,
            extra_state={
                "micro_batches": self.micro_position,
                "num_processes": accelerator.num_processes,
                "best": self.best,
                "history": self.history,
                "run_arguments": self.run_arguments,
            },
            save_total_limit=self.args.save_total_limit,
        )


def write_run_results(
    loop: FineTuningLoop, args, splits: dict, multi_label: bool, clip_seconds: float, selection_rule: str
) -> dict:
    """8. The best model (EMA weights at the best validation step) for the pipeline and the Hub, its model card, and
    all_results.json; returns the results."""
    accelerator, step, best, output_dir = loop.accelerator, loop.step, loop.best, loop.output_dir
    world, accum = accelerator.num_processes, loop.accum
    decode_failures = loop.decode_failures_before + loop.collator.num_skipped
    decode_failures = int(accelerator.reduce(torch.tensor(decode_failures, device=accelerator.device), "sum"))
    results = {
        "metric": "mAP" if multi_label else "accuracy",
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
    if accelerator.is_main_process:
        needed = sum(p.numel() * p.element_size() for p in loop.unwrapped.state_dict().values())

        def intact():
            return f"{find_latest_checkpoint(output_dir)} is intact and --resume writes the results from it"

        with refused_writes(output_dir, "the best model and results", needed, intact):  # a full disk: one line
            if step >= args.max_steps and (output_dir / "best_model").is_dir():
                install_best_model(output_dir)  # the model's files whole or not at all
                write_classifier_card(
                    output_dir, loop.unwrapped, loop.feature_extractor, args, splits, results, clip_seconds
                )
            write_text_atomically(
                output_dir / "all_results.json", json.dumps({**results, "arguments": asdict(args)}, indent=2)
            )
    accelerator.wait_for_everyone()
    return results


# ----------------------------------------------------------------------------------------------- main
def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.plan:  # what the run will cost, computed on fake tensors; builds nothing else, writes nothing
        from aasp_hf.plan import print_finetuning_plan

        try:
            return print_finetuning_plan(args, load_parts)  # load_parts: the data --plan_measure steps on
        except ValueError as error:
            raise SystemExit(f"finetune.py --plan: error: {error}") from None
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    quiet_libraries()  # other libraries' start-up and bookkeeping lines (aasp_hf/training/console.py)
    with hold_run_folder(args.output_dir):  # one run per folder; an unwritable folder is refused here, before the model
        return finetune(args)


def finetune(args: FinetuneArguments) -> dict:
    """Every (part, seed) sub-run of `args` into --output_dir, then the summary (main, once the folder is held)."""
    output_dir = Path(args.output_dir)
    # a folder holding a run is refused without --resume / --overwrite_output_dir (before anything is written)
    stale = check_output_dir(output_dir, args.resume, args.overwrite_output_dir, FINETUNE_ARTEFACTS)
    if stale and int(os.environ.get("RANK", "0")) == 0:
        remove_artefacts(stale)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    gradient_accumulation_for(
        args.total_train_batch_size,
        args.per_device_train_batch_size or DEFAULT_BATCH_SIZE,
        world,
        args.gradient_accumulation_steps,
    )  # fail early
    check_model_path(args.model_name_or_path)  # a misspelt path or an unreachable Hub id: one line, before the data
    parts, multi_label, names, clip_seconds, task = load_parts(args)
    args = scale_batch_to_data(args, parts, world)
    from aasp_hf.data import describe_protocol, is_kfold

    kfold = is_kfold(parts)
    selection_rule = describe_protocol(
        args.select_on, kfold, args.kfold_validation, args.validation_fraction, SPLIT_SEED, args.group_by
    )
    seeds = args.seeds or [args.seed]
    single = len(parts) == 1 and len(seeds) == 1
    print(
        f"{task}: {len(names)} classes, {'multi' if multi_label else 'single'}-label, clips {clip_seconds} s, "
        f"parts {list(parts)}, seeds {seeds}"
    )
    if args.group_by is not None:
        from aasp_hf.data.protocol import describe_sources

        for part, splits in parts.items():
            print(f"{part}: {describe_sources(splits, args.group_by)}")

    if args.resume and (finished := finished_finetuning(output_dir, args, parts, seeds)) is not None:
        print(
            f"{output_dir} holds a finished run (step {finished['max_steps']} of --max_steps {args.max_steps}); "
            f"nothing was changed. Its results: {output_dir / 'all_results.json'}, {output_dir / 'results.md'}. To "
            "train on, raise --max_steps and pass --resume_allow_changes max_steps."
        )
        return finished
    runs = []
    for part, splits in parts.items():
        for seed in seeds:
            run_dir = output_dir if single else output_dir / f"{part}_seed{seed}"
            done = run_dir / "all_results.json"
            previous = (read_results(done) if args.resume and not single else None) or {}  # damaged: trained again
            if previous.get("finished") and previous.get("max_steps", -1) >= args.max_steps:
                result = previous  # a finished sub-run of an interrupted sweep
            else:
                result = run(
                    replace(args, seed=seed, output_dir=str(run_dir)),
                    splits,
                    multi_label,
                    names,
                    clip_seconds,
                    selection_rule=selection_rule,
                )
            runs.append({"part": part, "seed": seed, **{k: v for k, v in result.items() if k != "arguments"}})

    per_seed = [float(np.mean([r["test_score"] for r in runs if r["seed"] == s])) for s in seeds]
    test_mean, test_std = mean_std(per_seed)
    summary = {
        "task": task,
        "model_name_or_path": str(args.model_name_or_path),
        "metric": runs[0]["metric"],
        "num_classes": len(names),
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
        **(
            {
                k: runs[0][k]
                for k in (
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
            }
            if single
            else {}
        ),
        "arguments": asdict(args),
    }
    if int(os.environ.get("RANK", "0")) == 0:
        output_dir.mkdir(parents=True, exist_ok=True)

        def write(summary):
            write_text_atomically(output_dir / "all_results.json", json.dumps(summary, indent=2))
            write_finetune_markdown(output_dir / "results.md", summary)

        write(summary)
        print(f"{task} {summary['metric']}: {100 * test_mean:.2f} ± {100 * test_std:.2f} -> {output_dir}/results.md")
        # the log-mel baseline on the same parts and clips, its crops from run()'s evaluation seeds (7 + split index)
        summary = logmel_baseline.with_baseline(
            summary,
            write,
            args.baseline,
            parts,
            clip_seconds,
            multi_label,
            len(names),
            args.baseline_max_clips,
            crop_seed=7,
        )
    return summary


if __name__ == "__main__":
    run_stoppable(main, "finetune.py")  # SIGTERM/SIGUSR1/SIGINT: save the step, exit 75 (docs/reliability.md)
