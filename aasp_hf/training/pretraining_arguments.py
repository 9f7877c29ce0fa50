"""`examples/pretrain.py`'s arguments: the data source and its clips (`DataArguments`), the model to train
(`ModelArguments`) and the run (`PretrainingArguments`: schedules, optimiser, precision, logging, checkpoints,
monitors). The script parses them with `aasp_hf.training.arguments.parse_arguments`: on the command line, from one
JSON file, or from `--config preset.json` followed by command-line overrides; `--plan` reads them too.
`check_pretraining_arguments` refuses what the fields cannot say alone."""

from dataclasses import dataclass, field

from ..configuration_aasp import AaspConfig, init_arguments
from ..utils.errors import UsageError
from .arguments import PlanArguments
from .failed_clips import DEFAULT_MAX_SHARE
from .resume import PRETRAINING_RUN_ARGUMENTS, allowed_resume_changes

# the data sources, of which a run reads one
DATA_SOURCES = ("dataset", "train_dir", "train_manifest", "dataset_name", "synthetic_clips", "log_mel_cache")


@dataclass
class DataArguments:
    dataset: str | None = field(
        default=None, metadata={"help": "a name for aasp_hf.data.load (as2m, as20k, esc50, ...) with --data_root"}
    )
    data_root: str | None = field(default=None, metadata={"help": "that dataset's folder in its official layout"})
    train_dir: str | None = field(default=None, metadata={"help": "folder of audio files (datasets' audiofolder)"})
    train_manifest: str | None = field(
        default=None,
        metadata={
            "help": "a fairseq manifest (wav2vec/data2vec/EAT/BEATs `train.tsv`: the root folder, "
            "then `relative/path<TAB>num_samples` per clip); a listed file missing on disk is "
            "skipped and counted"
        },
    )
    dataset_name: str | None = field(default=None, metadata={"help": "any `datasets.load_dataset` name or path"})
    dataset_config: str | None = field(default=None, metadata={"help": "its configuration name"})
    dataset_split: str = field(default="train")
    audio_column: str = field(default="audio")
    synthetic_clips: int = field(default=0, metadata={"help": "N > 0: synthesise N clips (no files needed)"})
    synthetic_seconds: float = field(default=2.0, metadata={"help": "length of each synthetic clip"})
    log_mel_cache: str | None = field(
        default=None, metadata={"help": "a cache from aasp_hf.data.cache.build_log_mel_cache (no audio decoding)"}
    )
    crop_seconds: float = field(default=6.0, metadata={"help": "random crop per clip (6 s = 601 frames -> 608)"})
    dataloader_num_workers: int = field(
        default=0,
        metadata={
            "help": "worker processes that decode and collate whole micro-batches (0: the training process does it)"
        },
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": "read the dataset as a stream (datasets' IterableDataset): each process its "
            "shard, reshuffled per epoch in a buffer, decoded in --dataloader_num_workers workers"
        },
    )
    shuffle_buffer_size: int = field(default=1000, metadata={"help": "--streaming: examples in the shuffle buffer"})
    features_on_device: bool = field(default=False, metadata={"help": "log-mel on the accelerator, not the CPU"})
    student_eq_strength: float = field(
        default=0.0,
        metadata={
            "help": "s > 0: the student sees each clip under a random smooth equaliser (4 cosine "
            "terms over mel bins, each ~ U(-s, s) in normalised log-mel units), the teacher the "
            "clean clip; not in the paper (PretrainingCollator)"
        },
    )


@dataclass
class ModelArguments:
    model_config: str | None = field(
        default=None,
        metadata={
            "help": "AaspConfig fields: a JSON file, an inline JSON object, or (in a JSON preset) an object; "
            "unset fields keep the paper's defaults"
        },
    )
    init_from: str | None = field(
        default=None, metadata={"help": "a saved AaspForPreTraining, or an AaspModel encoder (student and teacher)"}
    )


@dataclass
class PretrainingArguments(PlanArguments):
    output_dir: str = field(default="pretrain_output", metadata={"help": "checkpoints, log, results and encoder/"})
    seed: int = field(default=0, metadata={"help": "seeds the model, the data order and the masks"})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "clips per process per micro-batch"})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimiser step"})
    max_steps: int = field(default=1000, metadata={"help": "total optimiser steps (sets the schedules)"})
    stop_after_steps: int | None = field(
        default=None, metadata={"help": "leave after this many steps in total (time-limited jobs; go on with --resume)"}
    )
    warmup_steps: int = field(default=0, metadata={"help": "linear warm-up steps (at most --max_steps)"})
    learning_rate: float = field(default=5e-4, metadata={"help": "peak learning rate"})
    min_learning_rate: float = field(default=0.0, metadata={"help": "end of the cosine decay"})
    patch_embedding_lr_scale: float = field(
        default=1.0,
        metadata={
            "help": "lr of the patch embedding (SPE/AaPE stem) as a fraction of the scheduled lr; "
            "0 freezes it at its initialisation (MoCo v3's frozen random patch projection)"
        },
    )
    weight_decay: float = field(
        default=0.05, metadata={"help": "AdamW weight decay (not on biases, norms, CLS, positions)"}
    )
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW β1"})
    adam_beta2: float = field(default=0.95, metadata={"help": "AdamW β2"})
    adam_epsilon: float = field(default=1e-8, metadata={"help": "AdamW ε"})
    max_grad_norm: float = field(default=4.0, metadata={"help": "gradient clipping (EAT's 4.0); <= 0 disables"})
    max_nonfinite_steps: int = field(
        default=10,
        metadata={
            "help": "steps with a NaN/inf loss (or gradient) are skipped and counted; one more than this stops the run"
        },
    )
    max_failed_clip_share: float = field(
        default=DEFAULT_MAX_SHARE,
        metadata={
            "help": "when more than this share of the clips read (over windows of "
            "at least 100) fail to decode, the run saves a checkpoint and stops "
            "instead of training on copies of the others (1 disables)"
        },
    )
    teacher_momentum_base: float = field(default=0.994, metadata={"help": "EMA teacher momentum at step 0"})
    teacher_momentum_final: float = field(default=1.0, metadata={"help": "teacher momentum at --max_steps (cosine)"})
    mixed_precision: str | None = field(
        default=None, metadata={"help": "'no' | 'bf16' | 'fp16'; unset: what `accelerate launch` was given"}
    )
    torch_compile: bool = field(default=False, metadata={"help": "torch.compile the model"})
    ddp_bucket_cap_mb: float | None = field(
        default=None,
        metadata={
            "help": "DDP's gradient buckets in MiB (unset: PyTorch's 25); each bucket's all-reduce "
            "starts when its gradients are ready, and --torch_compile splits the graph at them"
        },
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward"})
    logging_steps: int = field(default=10, metadata={"help": "log every N steps"})
    save_steps: int = field(default=1000, metadata={"help": "checkpoint every N steps (and at the last step)"})
    save_total_limit: int | None = field(default=3, metadata={"help": "checkpoints kept (older ones deleted)"})
    resume: bool = field(
        default=False,
        metadata={
            "help": "continue from output_dir's newest complete checkpoint with the arguments "
            "it was written with (a finished run is left as it is)"
        },
    )
    resume_allow_changes: list[str] | None = field(
        default=None,
        metadata={
            "help": "--resume: the run-defining arguments this command may change (e.g. "
            "max_steps to train a finished run on; model_config for all its keys, or "
            "model_config.KEY); the others must equal the checkpoint's"
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "start over in an output_dir that holds a run (its checkpoints, log and "
            "exports are deleted first); without it or --resume such a folder is refused"
        },
    )
    export_teacher: bool = field(default=False, metadata={"help": "also export the EMA teacher encoder"})
    export_with_checkpoints: bool = field(default=False, metadata={"help": "export the encoder at every checkpoint"})
    report_to: str = field(default="tensorboard", metadata={"help": "accelerate tracker ('none' to disable)"})
    monitor_steps: int | None = field(
        default=None,
        metadata={
            "help": "every N steps (and the last) log learning-health statistics (monitor/...): "
            "collapse statistics of the student CLS and the teacher targets of the batch, the "
            "SBLU's (α, β) on a fixed batch; unset: every --logging_steps; 0: off"
        },
    )
    monitor_clips: int = field(default=8, metadata={"help": "clips in the fixed batch for the (α, β) statistics"})
    probe_dataset: str | None = field(
        default=None,
        metadata={
            "help": "an audiofolder DIR/{train,test}/<label>/*.wav: every --probe_steps, k-NN and "
            "ridge accuracy of frozen features of --probe_encoders (probe/...)"
        },
    )
    probe_steps: int | None = field(
        default=None,
        metadata={"help": "probe every N steps, at step 0 of a fresh run and at the last; unset: every --save_steps"},
    )
    probe_max_clips: int = field(default=200, metadata={"help": "at most N probe clips per split, balanced"})
    probe_encoders: str = field(default="student,teacher", metadata={"help": "which encoders the probe scores"})
    probe_k: int = field(default=10, metadata={"help": "neighbours of the cosine k-NN probe"})
    probe_ridge: float = field(default=1.0, metadata={"help": "ridge probe penalty per standardised feature"})


def check_pretraining_arguments(args: PretrainingArguments) -> None:
    """A `UsageError` of one line for values that do not go together: --ddp_bucket_cap_mb below 1 with
    --torch_compile, --resume_allow_changes without --resume or naming what no checkpoint stores. Splits the names
    of --resume_allow_changes at commas (`a,b` as `a b`)."""
    if args.torch_compile and args.ddp_bucket_cap_mb is not None and args.ddp_bucket_cap_mb < 1:
        raise UsageError(
            f"--ddp_bucket_cap_mb {args.ddp_bucket_cap_mb:g} with --torch_compile: DDP's first bucket "
            "holds 1 MiB and dynamo's DDP optimiser needs the others at least as large; pass 1 or more"
        )
    if args.resume_allow_changes:
        valid = [
            *PRETRAINING_RUN_ARGUMENTS,
            "num_processes",
            "model_config",
            *(f"model_config.{k}" for k in init_arguments(AaspConfig)),
        ]
        args.resume_allow_changes = allowed_resume_changes(args.resume_allow_changes, args.resume, valid)
