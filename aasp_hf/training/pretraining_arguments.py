"""`examples/pretrain.py`'s arguments: the data source and its clips (`DataArguments`), the model to train
(`ModelArguments`) and the run (`PretrainingArguments`: schedules, optimiser, precision, logging, checkpoints,
monitors; the run fields fine-tuning shares are those of `arguments.TrainingRunArguments`). The script parses them
with `aasp_hf.training.arguments.parse_arguments`: on the command line, from one JSON file, or from `--config
preset.json` followed by command-line overrides; `--plan` reads them too. `check_pretraining_arguments` refuses what
the fields cannot say alone."""

from dataclasses import dataclass, field

from ..configuration_aasp import AaspConfig, init_arguments
from ..utils.errors import UsageError
from .arguments import PlanArguments, TrainingRunArguments, script_default
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
class PretrainingArguments(TrainingRunArguments, PlanArguments):
    # the run fields fine-tuning shares are TrainingRunArguments'; these four with pre-training's defaults
    output_dir: str = script_default("output_dir", "pretrain_output")
    min_learning_rate: float = script_default("min_learning_rate", 0.0)
    logging_steps: int = script_default("logging_steps", 10)
    save_total_limit: int | None = script_default("save_total_limit", 3)
    per_device_train_batch_size: int = field(default=8, metadata={"help": "clips per process per micro-batch"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warm-up steps (at most --max_steps)"})
    learning_rate: float = field(default=5e-4, metadata={"help": "peak learning rate"})
    patch_embedding_lr_scale: float = field(
        default=1.0,
        metadata={
            "help": "lr of the patch embedding (SPE/AaPE stem) as a fraction of the scheduled lr; "
            "0 freezes it at its initialisation (MoCo v3's frozen random patch projection)"
        },
    )
    max_nonfinite_steps: int = field(
        default=10,
        metadata={
            "help": "steps with a NaN/inf loss (or gradient) are skipped and counted; one more than this stops the run"
        },
    )
    teacher_momentum_base: float = field(default=0.994, metadata={"help": "EMA teacher momentum at step 0"})
    teacher_momentum_final: float = field(default=1.0, metadata={"help": "teacher momentum at --max_steps (cosine)"})
    torch_compile: bool = field(default=False, metadata={"help": "torch.compile the model"})
    ddp_bucket_cap_mb: float | None = field(
        default=None,
        metadata={
            "help": "DDP's gradient buckets in MiB (unset: PyTorch's 25); each bucket's all-reduce "
            "starts when its gradients are ready, and --torch_compile splits the graph at them"
        },
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward"})
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
