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
presets copy Table hyperparams 1 column by column (their global batch, `total_train_batch_size`, made up with
gradient accumulation on fewer processes); `small_folder.json` is ours, for a few hundred clips
(docs/downstream.md#a-small-folder-of-your-own-clips).

Steps: 1. data (`aasp_hf.data.load_downstream`: one test fold of a K-fold task, or synthetic demo clips), 2. model
(`AaspForAudioClassification`: LayerNorm + Linear on CLS over the pre-trained encoder, drop path), 3. crops and
features in the collator, 4. AdamW with layer-wise lr decay, 5. `accelerator.prepare`, 6. exact `--resume`, 7. the
loop (`aasp_hf.training.finetuning_loop`: mixup, SpecAugment, gradient clipping, the weight EMA; 7a. evaluation with
the EMA weights and the model selection of `--select_on`, 7b. atomic checkpoints), 8. the selected model saved for
`pipeline("audio-classification", model=output_dir, trust_remote_code=True)` and `all_results.json`. `--seeds 0 1 2`
and `--all_folds` run one sub-run per (fold, seed) and report mean ± std over seeds of the mean over folds in
`results.md`, beside the log-mel baseline (`aasp_hf.training.finetuning_loop`). Each step, the data order and the
model selection in full: docs/downstream.md#fine-tuning-step-by-step.
"""

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
from accelerate import Accelerator
from accelerate.utils import set_seed
from transformers import AutoFeatureExtractor

import aasp_hf  # noqa: F401  (registers the Auto* classes)
from aasp_hf import AaspFeatureExtractor, AaspForAudioClassification, AaspForAudioFrameClassification
from aasp_hf.utils.entry_points import run_stoppable
from aasp_hf.utils.errors import UsageError
from aasp_hf.evaluation import without_truncation
from aasp_hf.utils.hub import check_model_path
from aasp_hf.training.arguments import DEFAULT_BATCH_SIZE, gradient_accumulation_for, parse_arguments
from aasp_hf.training.checkpointing import RUN_ARTEFACTS, check_output_dir, read_results, remove_artefacts
from aasp_hf.training.finetuning_arguments import FinetuneArguments, checked_arguments, scale_batch_to_data
from aasp_hf.training.finetuning_loop import (
    FineTuningData,
    FineTuningLoop,
    resume_finetuning,
    sweep_summary,
    training_collator,
    write_run_results,
    write_summary,
)
from aasp_hf.training.model_ema import create_ema
from aasp_hf.training.optim import finetuning_optimizer
from aasp_hf.training.resume import finished_finetuning
from aasp_hf.training.run_lock import check_launch, hold_run_folder
from aasp_hf.training.run_log import describe_new_head, loading_quietly, quiet_libraries

logger = logging.getLogger(__name__)
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
def load_parts(args):
    """-> `data.DownstreamTask` (parts {part: {split: rows}}, task, labels, clip length, whether its test was held out
    of train): the arguments mapped onto `data.load_downstream` (the protocol linear_eval.py uses too). A K-fold
    dataset gives one part: the test fold `--test_fold` (default the first), or every fold with `--all_folds`. The validation draws are seeded with
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
        return data.DownstreamTask(
            "synthetic", {"synthetic": splits}, args.synthetic_multi_label, list(LABELS), clip_seconds
        )
    if args.dataset is None:
        raise ValueError("Pass --dataset (with --data_root) or --synthetic_per_class N.")
    return data.load_downstream(
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


# ----------------------------------------------------------------------------------------------- model (step 2)
def load_classifier(accelerator, args, names: list[str], multi_label: bool, frame_level: bool = False):
    """(model, feature extractor): `AaspForAudioClassification` (or, for sound events, `AaspForAudioFrameClassification`)
    on the pre-trained encoder (its head new, said in one line) and the encoder's feature extractor, which takes whole
    clips; with --per_clip_normalization it normalises each clip on its own (training, evaluation and the saved model
    alike). Without the flag the extractor keeps what it was saved with (off for an encoder)."""
    model_class = AaspForAudioFrameClassification if frame_level else AaspForAudioClassification
    with loading_quietly():  # transformers' report would list the new head as MISSING: one line of ours instead
        model, loading_info = model_class.from_pretrained(
            args.model_name_or_path,
            num_labels=len(names),
            id2label=dict(enumerate(names)),
            label2id={n: i for i, n in enumerate(names)},
            problem_type="multi_label_classification" if multi_label else "single_label_classification",
            drop_path_rate=args.drop_path_rate,
            output_loading_info=True,
            **({"classifier_pooling": args.classifier_pooling} if args.classifier_pooling else {}),
            **(event_settings(args, len(names)) if frame_level else {}),
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
    if args.per_clip_normalization:
        feature_extractor.per_clip_normalization = True
    return model, feature_extractor


def event_settings(args, num_labels: int) -> dict:
    """The frame classifier's post-processing from the arguments, as config fields (one threshold given: each
    label's)."""
    thresholds = args.event_thresholds
    if thresholds is not None and len(thresholds) == 1:
        thresholds = thresholds * num_labels
    if thresholds is not None and len(thresholds) != num_labels:
        raise UsageError(
            f"--event_thresholds has {len(thresholds)} values for {num_labels} labels: give one, or one per label"
        )
    return {
        "event_thresholds": thresholds,
        "event_median_filter": args.event_median_filter,
        "event_min_duration": args.event_min_duration,
        "event_merge_gap": args.event_merge_gap,
    }


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
    quiet_libraries()  # other libraries' start-up and bookkeeping lines (aasp_hf/training/run_log.py)
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

    # 1. Data: the parts (test folds) and their splits, first, so that a data mistake is said before the model loads.
    downstream = load_parts(args)
    parts, multi_label, names = downstream.parts, downstream.multi_label, downstream.label_names
    clip_seconds, task = downstream.clip_seconds, downstream.task
    args = scale_batch_to_data(args, parts, world)
    from aasp_hf.data import describe_protocol, is_kfold

    kfold = is_kfold(parts)
    selection_rule = describe_protocol(
        args.select_on,
        kfold,
        args.kfold_validation,
        args.validation_fraction,
        SPLIT_SEED,
        args.group_by,
        downstream.test_held_out,
    )
    seeds = args.seeds or [args.seed]
    single = len(parts) == 1 and len(seeds) == 1
    if downstream.frame_level and args.class_balanced_sampling:
        raise UsageError(
            "--class_balanced_sampling draws clips by their labels; sound-event recordings have timed "
            "events, not clip labels: leave it out"
        )
    voice = [f"--{name}" for name in ("speed_perturbation", "vtlp", "random_eq_db") if getattr(args, name)]
    if downstream.frame_level and voice:
        raise UsageError(
            f"{', '.join(voice)}: the per-clip changes of voice and channel are for clip classification (the "
            "sound-event collator does not apply them): leave them out"
        )
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
    # 2.-8. One run per (part, seed); a finished sub-run of an interrupted sweep is kept.
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
                    frame_level=downstream.frame_level,
                )
            runs.append({"part": part, "seed": seed, **{k: v for k, v in result.items() if k != "arguments"}})

    # Mean ± std over seeds of the mean over parts -> all_results.json, results.md; the log-mel baseline beside them.
    summary = sweep_summary(args, runs, task, len(names), clip_seconds, parts, selection_rule, kfold)
    return write_summary(summary, args, parts, multi_label, names if downstream.frame_level else None)


# ----------------------------------------------------------------------------------------------- one run
def run(
    args: FinetuneArguments,
    splits: dict,
    multi_label: bool,
    names: list[str],
    clip_seconds: float,
    selection_rule: str | None = None,
    frame_level: bool = False,
) -> dict:
    """Fine-tunes once (one seed, one test fold) into `args.output_dir`; returns its results. `selection_rule`: the
    sentence that the results and the model card give for the model selection (default: from `args.select_on`)."""
    from aasp_hf.data import describe_protocol

    if selection_rule is None:
        selection_rule = describe_protocol(
            args.select_on, False, args.kfold_validation, args.validation_fraction, SPLIT_SEED, args.group_by
        )

    accelerator = Accelerator(mixed_precision=args.mixed_precision, project_dir=str(Path(args.output_dir)))
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
    model, feature_extractor = load_classifier(accelerator, args, names, multi_label, frame_level)
    ema = create_ema(model) if args.ema_decay > 0 else None
    set_seed(args.seed, device_specific=True)  # dropout / drop path: one stream per process

    # 3. Data: crops and features in the collator (called in the loop, so its generator is checkpointed).
    data = FineTuningData(splits, multi_label, len(names), clip_seconds, frame_level, label_names=list(names))
    collator = training_collator(feature_extractor, args, data, rank)
    augment_rng = np.random.default_rng(args.seed * 1000 + 2 + rank)

    # 4. Optimiser: layer-wise lr decay on top of the decay / no-decay split; lr a pure function of the step.
    optimizer = finetuning_optimizer(model, args)

    # 5. Distribute.
    model, optimizer = accelerator.prepare(model, optimizer)
    if ema is not None:
        ema.to(accelerator.device)

    # 6. Resume: model, optimiser and RNG states, generators, EMA weights, data position and best-so-far.
    position = resume_finetuning(accelerator, optimizer, collator, augment_rng, ema, args, accum)

    # 7. Training loop, 8. the best model and the results.
    loop = FineTuningLoop(
        accelerator, model, optimizer, ema, collator, augment_rng, feature_extractor, args, accum, data, position
    )
    loop.run()
    return write_run_results(loop, selection_rule)


if __name__ == "__main__":
    run_stoppable(main, "finetune.py")  # SIGTERM/SIGUSR1/SIGINT: save the step, exit 75 (docs/reliability.md)
