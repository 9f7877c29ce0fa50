"""`examples/finetune.py`'s arguments (`FinetuneArguments`): the encoder, the data and its protocol (splits, folds,
model selection, clip length and padding), the model's head, the optimisation of Table hyperparams 1, augmentation,
the weight EMA, evaluation, logging, checkpoints and the log-mel baseline. The data and protocol fields linear
evaluation shares are those of `evaluation.linear_protocol.DownstreamArguments`; the run fields pre-training shares
(optimiser, clipping, precision, logging, checkpoints, resuming) those of `arguments.TrainingRunArguments`. The
defaults that depend on the run's length or the data's size (lr, weight EMA, warm-up, batch) are left unset and
derived, one printed line each (`aasp_hf.training.arguments`): from the run's length by `checked_arguments`, which
also refuses a choice out of its list, and the batch from the data by `scale_batch_to_data`; the presets set them,
so they keep the paper's values. `--plan` reads them too."""

import math
from dataclasses import dataclass, field, replace

from ..utils.errors import UsageError
from ..evaluation import baseline as logmel_baseline
from ..evaluation.linear_protocol import DownstreamArguments
from .arguments import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_WARMUP_STEPS,
    PAPER_EMA_DECAY,
    PAPER_LEARNING_RATE,
    PlanArguments,
    TrainingRunArguments,
    batch_size_for,
    ema_decay_for,
    learning_rate_for,
    script_default,
    warmup_steps_for,
)
from .resume import FINETUNING_RUN_ARGUMENTS, allowed_resume_changes, resumed_run_arguments


@dataclass
class FinetuneArguments(TrainingRunArguments, DownstreamArguments, PlanArguments):
    # the run fields pre-training shares are TrainingRunArguments'; these four with fine-tuning's defaults
    output_dir: str = script_default("output_dir", "finetune_output")
    min_learning_rate: float = script_default("min_learning_rate", 1e-7)
    logging_steps: int = script_default("logging_steps", 50)
    save_total_limit: int | None = script_default("save_total_limit", 2)
    model_name_or_path: str = field(metadata={"help": "a pre-trained AaspModel encoder (or a saved classifier)"})
    # data
    synthetic_multi_label: bool = field(default=False, metadata={"help": "synthetic clips = sums of 1-2 classes"})
    test_fold: int | None = field(default=None, metadata={"help": "K-fold task: the test fold; unset: the first"})
    all_folds: bool = field(default=False, metadata={"help": "K-fold task: one run per test fold, averaged"})
    select_on: str = field(
        default="validation",
        metadata={
            "help": "model selection: 'validation' (held out of train when the dataset has none), 'test' (EAT: train on "
            "the whole training set, best test score within the budget) or 'last' (whole training set, last step)"
        },
    )
    clip_padding: str = field(
        default="zeros",
        metadata={
            "help": "a clip shorter than the clip length: 'zeros' (appended to the waveform, EVAR's) or 'masked' (its "
            "frames padded and marked as padding, which the encoder's attention and mean pooling skip)"
        },
    )
    dataloader_num_workers: int = field(default=0, metadata={"help": "worker processes that load the clips"})
    # model
    drop_path_rate: float = field(default=0.1, metadata={"help": "stochastic depth of the encoder blocks"})
    classifier_pooling: str | None = field(
        default=None,
        metadata={
            "help": "what the head reads: 'cls' (the paper's: the class token, which pre-training trains) or 'mean' (the "
            "mean of the patch tokens: for an encoder whose class token was never trained, e.g. a fresh one); "
            "unset: the encoder's config (cls)"
        },
    )
    freeze_feature_encoder: bool = field(default=False, metadata={"help": "freeze the SPE/AaPE patch embedding"})
    # sound events (--dataset sound_events): how frame scores become events, saved in the model's config
    event_thresholds: list[float] | None = field(
        default=None,
        metadata={
            "help": "sound events: one threshold per label on the frame scores (or one for all); unset: chosen per "
            "label on the validation recordings (the best event-based F1), 0.5 without a validation split"
        },
    )
    event_median_filter: int = field(
        default=1, metadata={"help": "sound events: median filter over this many output frames (odd; 1 = none)"}
    )
    event_min_duration: float = field(
        default=0.0, metadata={"help": "sound events: events shorter than this (seconds) are dropped"}
    )
    event_merge_gap: float = field(
        default=0.0, metadata={"help": "sound events: events of one label this close (seconds) are merged"}
    )
    # optimisation (Table hyperparams 1)
    seeds: list[int] | None = field(default=None, metadata={"help": "several seeds: one sub-run each, mean ± std"})
    per_device_train_batch_size: int | None = field(
        default=None,
        metadata={
            "help": f"clips per process per micro-batch; unset: {DEFAULT_BATCH_SIZE}, or as many as the training clips "
            f"when they are fewer (a line says so)"
        },
    )
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "clips per process when evaluating"})
    total_train_batch_size: int | None = field(
        default=None,
        metadata={"help": "the global batch per optimiser step: accumulation = total / (per-device batch × processes)"},
    )
    warmup_steps: int | None = field(
        default=None,
        metadata={
            "help": f"linear warm-up steps (at most --max_steps); unset: {DEFAULT_WARMUP_STEPS}, or 10 %% of --max_steps "
            f"when that is fewer"
        },
    )
    learning_rate: float | None = field(
        default=None,
        metadata={
            "help": f"peak lr (of the head; layer l gets lr·decay^(L+1-l)); unset: the paper's {PAPER_LEARNING_RATE:g} "
            f"from 8,000 steps on, for a shorter run the same lr × steps, at most 2e-3 (a line says so)"
        },
    )
    layer_decay: float = field(default=0.65, metadata={"help": "layer-wise lr decay factor (1: none)"})
    # augmentation, sampling, EMA
    mixup_alpha: float = field(default=0.0, metadata={"help": "Beta(α, α) mixup; 0 disables (then CE if single-label)"})
    spec_augment: bool = field(default=True, metadata={"help": "one time + one frequency mask per clip"})
    spec_augment_fraction: float = field(default=0.2, metadata={"help": "maximum mask size / input size (1/5)"})
    freq_mask_fraction: float | None = field(
        default=None,
        metadata={"help": "maximum frequency-mask size / mel bins; unset: --spec_augment_fraction (the time mask's)"},
    )
    # the training clips' voice and channel, each drawn per clip (off by default; docs/downstream.md)
    speed_perturbation: list[float] | None = field(
        default=None,
        metadata={
            "help": "LOW HIGH (e.g. 0.9 1.1): each training clip's waveform played at a speed drawn uniformly in "
            "[LOW, HIGH] (tempo and pitch together, Kaldi's speed perturbation), before its crop"
        },
    )
    vtlp: list[float] | None = field(
        default=None,
        metadata={
            "help": "LOW HIGH (e.g. 0.9 1.1): vocal-tract-length perturbation, each training clip's mel axis warped "
            "by a factor drawn uniformly in [LOW, HIGH] (Jaitly & Hinton 2013's piecewise-linear warp)"
        },
    )
    random_eq_db: float = field(
        default=0.0,
        metadata={"help": "D > 0: each training clip re-coloured by a random tilt plus one bell, within ±D dB; 0: off"},
    )
    per_clip_normalization: bool = field(
        default=False,
        metadata={
            "help": "each clip's log-mel brought to mean 0 and std 1 per mel bin over its real frames (CMVN), in "
            "training, evaluation and the saved feature extractor (so the pipeline applies it too)"
        },
    )
    class_balanced_sampling: bool = field(default=False, metadata={"help": "AS-2M: weighted draws with replacement"})
    samples_per_epoch: int = field(default=200_000, metadata={"help": "draws per epoch of class-balanced sampling"})
    ema_decay: float | None = field(
        default=None,
        metadata={
            "help": f"weight EMA for evaluation; 0 disables (ESC-50); unset: the paper's {PAPER_EMA_DECAY:g}, or for a "
            f"run under 2,000 steps the decay whose horizon 1/(1-d) is a tenth of --max_steps (a line says so)"
        },
    )
    # evaluation (logging and checkpoints: TrainingRunArguments)
    eval_steps: int = field(default=500, metadata={"help": "validate every N steps (and at the last step)"})


def checked_arguments(args: FinetuneArguments) -> FinetuneArguments:
    """`args` as the script runs them: the old spelling `--kfold_validation test` read as `--select_on test`, a
    choice out of its list refused, the unset lr, EMA decay and warm-up derived from the run's length (a resumed run
    keeps its own; one printed line each), a `checkpoint-<step>/` folder as the model refused, the batch of `--plan`
    (no data to scale it to) and `--resume_allow_changes` checked."""
    from ..data import CLIP_PADDING, KFOLD_VALIDATION, SELECT_ON

    if args.kfold_validation == "test":  # the old spelling of EAT's rule
        if args.select_on not in ("validation", "test"):
            raise ValueError(f"kfold_validation='test' means --select_on test, not {args.select_on!r}")
        args = replace(args, kfold_validation="evar", select_on="test")
    if args.kfold_validation not in KFOLD_VALIDATION:
        raise ValueError(f"kfold_validation={args.kfold_validation!r}: use one of {KFOLD_VALIDATION}")
    if args.select_on not in SELECT_ON:
        raise ValueError(f"select_on={args.select_on!r}: use one of {SELECT_ON}")
    logmel_baseline.check_choice(args.baseline, args.baseline_max_clips)
    if args.classifier_pooling not in (None, "cls", "mean"):
        raise UsageError(
            f"--classifier_pooling {args.classifier_pooling}: use cls (the class token) or mean (the "
            "mean of the patch tokens)"
        )
    if args.clip_padding not in CLIP_PADDING:
        raise UsageError(
            f"--clip_padding {args.clip_padding}: use zeros (appended to the waveform) or masked (padded "
            "frames marked as padding)"
        )
    for name in ("speed_perturbation", "vtlp"):
        check_factor_range(name, getattr(args, name))
    args = with_run_length_defaults(args)
    from ..utils.hub import check_model_folder

    check_model_folder(args.model_name_or_path)  # a checkpoint-<step>/ folder: say what to load instead
    if args.per_device_train_batch_size is None and args.plan:  # no data to scale it to
        args = replace(args, per_device_train_batch_size=DEFAULT_BATCH_SIZE)
    if args.resume_allow_changes:
        names = allowed_resume_changes(args.resume_allow_changes, args.resume, FINETUNING_RUN_ARGUMENTS)
        args = replace(args, resume_allow_changes=names)
    return args


def check_factor_range(name: str, values) -> None:
    """`--name LOW HIGH`, a range of factors to draw from uniformly: unset, or two finite numbers with
    0 < LOW <= HIGH; a UsageError of one line otherwise."""
    if values is None:
        return
    shown = " ".join(f"{v:g}" for v in values)
    if len(values) != 2:
        raise UsageError(f"--{name} {shown}: give two factors, LOW HIGH (e.g. --{name} 0.9 1.1)")
    low, high = values
    if not (0 < low <= high < math.inf):
        raise UsageError(f"--{name} {shown}: need 0 < LOW <= HIGH (e.g. --{name} 0.9 1.1)")


def with_run_length_defaults(args: FinetuneArguments) -> FinetuneArguments:
    """`args` with the unset `--learning_rate`, `--ema_decay` and `--warmup_steps` derived from `--max_steps`
    (`arguments.learning_rate_for`, ...), one printed line each; a resumed run that derived other values from its own `--max_steps` keeps
    them."""
    resumed = resumed_run_arguments(args.output_dir) if args.resume else {}
    for name, rule in (
        ("learning_rate", learning_rate_for),
        ("ema_decay", ema_decay_for),
        ("warmup_steps", warmup_steps_for),
    ):  # unset: derived from the run's length, said in a line
        if getattr(args, name) is None:
            value, line = rule(args.max_steps)
            if resumed.get(name) is not None and resumed[name] != value:  # a longer resumed run keeps its own values
                value, line = (
                    resumed[name],
                    (
                        f"--{name} {resumed[name]:g}: the value the resumed run derived from its "
                        f"--max_steps {resumed['max_steps']} (pass --{name} to choose)"
                    ),
                )
            args = replace(args, **{name: value})
            if line:
                print(line)
    return args


def scale_batch_to_data(args: FinetuneArguments, parts: dict, world: int) -> FinetuneArguments:
    """`args` with the unset `--per_device_train_batch_size` resolved: DEFAULT_BATCH_SIZE, or the training clips per
    process of the smallest part when they are fewer (printed; `arguments.batch_size_for`). A batch that was set and
    is too large stays an error (in the script's `run`). Class-balanced sampling draws with replacement: any batch
    fits."""
    if args.per_device_train_batch_size is not None:
        return args
    batch, line = DEFAULT_BATCH_SIZE, None
    if not args.class_balanced_sampling:
        batch, line = batch_size_for(min(len(splits["train"]) for splits in parts.values()), world)
    if line:
        print(line)
    return replace(args, per_device_train_batch_size=batch)
