"""Command-line parsing shared by the example scripts: flags, one JSON file, or a JSON preset plus overrides; the
fields both training scripts share (`TrainingRunArguments`) and those of `--plan` (`PlanArguments`); the
checks that turn a user's mistake into one clear line before anything is built (unknown keys, numbers out of
range); the gradient accumulation that makes up a preset's global batch on any number of processes; the defaults
that depend on the run's length or the data's size (`learning_rate_for`, `ema_decay_for`, `warmup_steps_for`,
`fit_warmup`, `batch_size_for`)."""

import argparse
import dataclasses
import inspect
import json
import logging
import math
import os
import sys
import types
import typing
from pathlib import Path

from huggingface_hub.errors import StrictDataclassError
from transformers import HfArgumentParser

from ..configuration_aasp import init_arguments
from ..utils.errors import UsageError, check_flags, check_keys, one_line_errors
from .stopping import DEFAULT_MAX_SHARE

logger = logging.getLogger(__name__)


@dataclasses.dataclass(kw_only=True)  # keyword-only: a script's own required fields may follow these defaults
class PlanArguments:
    """`--plan` and its settings, shared by examples/pretrain.py and examples/finetune.py (aasp_hf.plan)."""

    plan: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "print what the run will cost (parameters, FLOPs, peak memory per device, "
            "largest batch, step time, GPU-hours; aasp_hf.plan) and exit; no GPU, data "
            "or output folder needed (fine-tuning reads the encoder's config.json)"
        },
    )
    plan_memory_gb: float = dataclasses.field(
        default=80, metadata={"help": "--plan: memory per device (GiB) for the largest batch"}
    )
    plan_accelerator: str = dataclasses.field(
        default="H100 SXM", metadata={"help": "--plan: H100 SXM, H100 PCIe, H200, A100 80GB or L4 (datasheet figures)"}
    )
    plan_mfu: float = dataclasses.field(
        default=0.4, metadata={"help": "--plan: ASSUMED model-FLOPs utilisation for the step time"}
    )
    plan_num_processes: int | None = dataclasses.field(
        default=None, metadata={"help": "--plan: processes (GPUs) to plan for; unset: what `accelerate launch` gives"}
    )
    plan_data_clips: int = dataclasses.field(
        default=256,
        metadata={
            "help": "--plan of pretrain.py: clips to decode, crop and collate on this host to time "
            "the data path (0: skip it)"
        },
    )
    plan_measure: int = dataclasses.field(
        default=0,
        metadata={
            "help": "N > 0 (implies --plan): after the plan, run N optimiser steps of "
            "this run here after an untimed warm-up and print measured beside predicted (step time, "
            "clips/s, MFU, peak memory, data wait, all-reduce); writes only plan.txt and "
            "plan_measured.json to --output_dir"
        },
    )

    def __post_init__(self):
        if self.plan_measure:  # measuring is checking a plan: it prints the plan first
            self.plan = True


@dataclasses.dataclass(kw_only=True)  # keyword-only: a script's own required fields may follow these defaults
class TrainingRunArguments:
    """The run arguments that examples/pretrain.py (`PretrainingArguments`) and examples/finetune.py
    (`FinetuneArguments`) share with one meaning: the output folder, the seed, the step budget, AdamW and gradient
    clipping, precision, logging, checkpoints and resuming; one field and one help text each.

    Where the scripts' defaults differ (`output_dir`, `min_learning_rate`, `logging_steps`, `save_total_limit`) the
    field here has none, and each script's dataclass gives its own with `script_default`. Fields that share a name
    but not a type or a meaning stay in each script's dataclass: fine-tuning's `learning_rate`, `warmup_steps` and
    `per_device_train_batch_size` may be unset (then derived from the run's length or the data), pre-training's may
    not; pre-training's `dataloader_num_workers` is a setting of its data path (`DataArguments`)."""

    output_dir: str = dataclasses.field(
        metadata={
            "help": "where the checkpoints, the log, the results and the trained model go (pre-training: encoder/; "
            "fine-tuning: the best model)"
        }
    )
    seed: int = dataclasses.field(
        default=0,
        metadata={
            "help": "seeds the new weights (pre-training: the model; fine-tuning: the head), the data order and the "
            "random draws (pre-training: the masks; fine-tuning: the augmentation)"
        },
    )
    gradient_accumulation_steps: int = dataclasses.field(
        default=1, metadata={"help": "micro-batches per optimiser step"}
    )
    max_steps: int = dataclasses.field(default=1000, metadata={"help": "total optimiser steps (sets the schedules)"})
    stop_after_steps: int | None = dataclasses.field(
        default=None, metadata={"help": "leave after this many steps in total (time-limited jobs; go on with --resume)"}
    )
    min_learning_rate: float = dataclasses.field(metadata={"help": "end of the cosine decay"})
    weight_decay: float = dataclasses.field(
        default=0.05, metadata={"help": "AdamW weight decay (not on biases, norms, CLS, positions)"}
    )
    adam_beta1: float = dataclasses.field(default=0.9, metadata={"help": "AdamW β1"})
    adam_beta2: float = dataclasses.field(default=0.95, metadata={"help": "AdamW β2"})
    adam_epsilon: float = dataclasses.field(default=1e-8, metadata={"help": "AdamW ε"})
    max_grad_norm: float = dataclasses.field(
        default=4.0, metadata={"help": "gradient clipping (EAT's 4.0); <= 0 disables"}
    )
    max_failed_clip_share: float = dataclasses.field(
        default=DEFAULT_MAX_SHARE,
        metadata={
            "help": "when more than this share of the training clips read (over windows of at least 100) fail to "
            "decode, the run saves a checkpoint and stops instead of training on the others (1 disables)"
        },
    )
    mixed_precision: str | None = dataclasses.field(
        default=None, metadata={"help": "'no' | 'bf16' | 'fp16'; unset: what `accelerate launch` was given"}
    )
    logging_steps: int = dataclasses.field(metadata={"help": "log every N steps"})
    save_steps: int = dataclasses.field(
        default=1000, metadata={"help": "checkpoint every N steps (and at the last step)"}
    )
    save_total_limit: int | None = dataclasses.field(metadata={"help": "checkpoints kept (older ones deleted)"})
    resume: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "continue from output_dir's newest complete checkpoint with the arguments "
            "it was written with (a finished run is left as it is)"
        },
    )
    resume_allow_changes: list[str] | None = dataclasses.field(
        default=None,
        metadata={
            "help": "--resume: the run-defining arguments this command may change (e.g. max_steps to train a "
            "finished run on; pre-training also model_config for all its keys, or model_config.KEY); the others "
            "must equal the checkpoint's"
        },
    )
    overwrite_output_dir: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "start over in an output_dir that holds a run (its checkpoints, log, results and saved models "
            "are deleted first); without it or --resume such a folder is refused"
        },
    )


def script_default(name: str, default) -> dataclasses.Field:
    """The field `name` of `TrainingRunArguments` with one script's default and the same help text, for a
    subclass: `output_dir: str = script_default("output_dir", "finetune_output")`. Keyword-only like the base's
    field, so that a script's own required field (fine-tuning's `model_name_or_path`) may follow it: a field given
    again keeps the base's place among the fields."""
    shared = TrainingRunArguments.__dataclass_fields__[name]
    return dataclasses.field(default=default, kw_only=True, metadata=shared.metadata)


def parse_arguments(dataclass_types, argv=None, exclusive=()) -> tuple:
    """Parses `argv` (default `sys.argv[1:]`) into instances of `dataclass_types`, in order.

    Three forms: command-line flags only; a single `preset.json` argument; or `--config preset.json` followed by
    flags that override the preset's values. `exclusive`: field names of which a run takes one (the data sources);
    when the command line gives one of them, the preset's values for all of them are dropped, so that
    `--config preset.json --train_dir DIR` reads DIR instead of failing on the preset's own data source.

    Every dataclass with `max_steps` and `warmup_steps` must have no more warm-up steps than steps; this is checked
    here, before any data or model is loaded. A warm-up typed on the command line that is longer than the run is
    refused; one from a preset or a default is cut to 10 % of the run and a line says so (`fit_warmup`),
    so `--config preset.json --max_steps 3` runs in every script.
    """
    parser = HfArgumentParser(dataclass_types)
    for action in parser._actions:  # HfArgumentParser gives `--no_x` the help of `--x`; say what it does instead
        if any(option.startswith("--no_") for option in action.option_strings):
            action.help = f"turns --{action.dest} off"
    parser.add_argument(  # handled below; declared so that --help lists it (absent from the parsed namespace)
        "--config",
        default=argparse.SUPPRESS,
        metavar="PRESET.json",
        help="a JSON preset of these arguments; the flags that follow --config override its values",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    check_flags(parser, argv)  # a misspelt flag: one line with the closest flag, not HfArgumentParser's traceback
    one_line_errors(parser)  # argparse's own refusals (a required argument missing, a bad number): one line too
    classes = dataclass_types if isinstance(dataclass_types, (list, tuple)) else (dataclass_types,)
    valid = [field.name for cls in classes for field in dataclasses.fields(cls)]
    if len(argv) == 1 and argv[0].endswith(".json"):
        preset = _read_preset(argv[0])
        check_keys(preset, valid, f"the preset {argv[0]}", "the script's --help")
        check_preset_types(preset, classes, f"the preset {argv[0]}")
        return _check(parser.parse_json_file(os.path.abspath(argv[0])), typed=set(), preset=set(preset))
    preset = {}
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise UsageError("--config needs a JSON file: --config preset.json [overriding flags]")
        preset = _read_preset(argv[i + 1])
        check_keys(preset, valid, f"the preset {argv[i + 1]}", "the script's --help")
        check_preset_types(preset, classes, f"the preset {argv[i + 1]}")
        argv = argv[:i] + argv[i + 2 :]
        given = {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")}
        if given & set(exclusive):  # the command line chose among them: the preset's choice goes
            preset = {key: value for key, value in preset.items() if key not in exclusive}
        argv = merge_json_objects(preset, argv)  # --model_config '{...}' overrides the preset's keys, not all of them
        parser.set_defaults(**preset)
    *parsed, stray = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if stray:
        raise UsageError(
            f"unexpected argument{'s' if len(stray) > 1 else ''} {' '.join(stray)}: every value follows "
            f"its --flag (see the script's --help)"
        )
    return _check(tuple(parsed), typed=typed_names(parser, argv), preset=set(preset))


def typed_names(parser, argv) -> set:
    """The argument names that `argv` gives, each flag resolved as argparse resolves it (a unique prefix such as
    `--warmup` names `warmup_steps`; `--no_x` names `x`)."""
    options = {option: action.dest for action in parser._actions for option in action.option_strings}
    names = set()
    for arg in argv:
        if not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        matches = (
            {options[flag]}
            if flag in options
            else {dest for option, dest in options.items() if option.startswith(flag)}
        )
        if len(matches) == 1:
            names |= matches
    return names


def json_object(value) -> dict | None:
    """`value` as a dict when it is one, an inline JSON object or the path of a `.json` file holding one; else None."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        return None
    try:
        if value.lstrip().startswith("{"):
            parsed = json.loads(value)
        elif value.endswith(".json") and Path(value).is_file():
            parsed = json.loads(Path(value).read_text())
        else:
            return None
    except (OSError, ValueError):
        return None
    return parsed if isinstance(parsed, dict) else None


def merge_json_objects(preset: dict, argv: list) -> list:
    """`argv` with the value of each `--key VALUE` (or `--key=VALUE`) whose preset value is a JSON object merged key by
    key over that object: built-in defaults < preset < command line, per key. So `--config pretrain_tiny_cpu.json
    --model_config '{"num_hidden_layers": 1}'` is the tiny model with one layer, not the default model with one layer.
    A value that is not a JSON object (or a `.json` file of one) is left as it is, for the script's own check."""
    merged = list(argv)
    for i, arg in enumerate(merged):
        if not arg.startswith("--"):
            continue
        key, eq, inline = arg[2:].partition("=")
        if key not in preset or (not eq and i + 1 >= len(merged)):
            continue
        base, given = json_object(preset[key]), json_object(inline if eq else merged[i + 1])
        if base is None or given is None:
            continue
        value = json.dumps({**base, **given})
        if eq:
            merged[i] = f"--{key}={value}"
        else:
            merged[i + 1] = value
    return merged


def _read_preset(path) -> dict:
    """A JSON preset as a dict, or a UsageError that names the file and what is wrong with it."""
    try:
        preset = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UsageError(f"the preset {path} does not exist") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"the preset {path} is not valid JSON: {error}") from None
    if not isinstance(preset, dict):
        raise UsageError(f"the preset {path} must hold a JSON object of arguments, got a {type(preset).__name__}")
    return preset


# What each argument type is called in the one-line error for a preset value of another type: (one, several).
_TYPE_NAMES = {
    bool: ("true or false", "true/false values"),
    int: ("a whole number", "whole numbers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
}


def _fits(value, annotation) -> bool:
    """Whether a JSON value fits an argument annotated `annotation` (int, float, str, bool, list[...], X | None).
    A JSON object fits a string: JSON-valued arguments (`model_config`, `dataset_kwargs`) are given as objects in a
    preset. An int fits a float, as on the command line; a bool fits only a bool. A string fits a number or a bool:
    argparse parses a string default (`set_defaults`) with the argument's type, as a value typed on the command
    line, so "3" is 3 and "3.7" for a whole number is refused by argparse."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation) or (object,)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if isinstance(value, str) and annotation in (bool, int, float):
        return True  # argparse converts a string default as it converts the command line's, and refuses it the same
    if annotation is bool:
        return isinstance(value, bool)
    if annotation in (int, float):
        return isinstance(value, int if annotation is int else (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, (str, dict))
    return True  # a type this check does not know: left to the script


def _type_name(annotation) -> str:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(
            "null" if option is type(None) else _type_name(option) for option in typing.get_args(annotation)
        )
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation) or (object,)
        return f"a list of {_TYPE_NAMES.get(item, ('', 'values'))[1]}"
    return _TYPE_NAMES.get(annotation, (getattr(annotation, "__name__", str(annotation)),))[0]


def check_preset_types(preset: dict, classes, where: str) -> None:
    """A UsageError for the first value of `preset` whose JSON type does not fit its argument's type in the
    dataclasses `classes`, as argparse refuses the same value typed on the command line: HfArgumentParser takes a
    preset's values as they are, so `"max_steps": 3.7` trained 4 steps and reported 3.7, and `null` or `[0, 1]`
    for a number ended in a TypeError after the run had begun."""
    annotations = {}
    for cls in classes:
        annotations.update(typing.get_type_hints(cls))
    for key, value in preset.items():
        if key in annotations and not _fits(value, annotations[key]):
            raise UsageError(f"{where}: {key} must be {_type_name(annotations[key])}, got {json.dumps(value)}")


# The ranges of the numeric arguments the scripts share, checked by name before anything is built. An argument
# that is None (unset) is not checked; NaN fails every range.
POSITIVE = (
    "learning_rate",
    "per_device_train_batch_size",
    "per_device_eval_batch_size",
    "batch_size",
    "max_steps",
    "gradient_accumulation_steps",
    "total_train_batch_size",
    "logging_steps",
    "save_steps",
    "eval_steps",
    "crop_seconds",
    "clip_seconds",
    "synthetic_seconds",
    "seconds",
    "adam_epsilon",
    "shuffle_buffer_size",
    "monitor_clips",
    "probe_max_clips",
    "probe_k",
    "probe_steps",
    "num_views",
    "samples_per_epoch",
    "max_clips",
    "stop_after_steps",
    "layer_decay",
)
NON_NEGATIVE = (
    "warmup_steps",
    "min_learning_rate",
    "weight_decay",
    "max_nonfinite_steps",
    "synthetic_clips",
    "dataloader_num_workers",
    "patch_embedding_lr_scale",
    "student_eq_strength",
    "random_eq_db",
    "save_total_limit",
    "seed",
    "monitor_steps",
    "probe_ridge",
    "mixup_alpha",
    "drop_path_rate",
    "synthetic_per_class",
    "plan_measure",
)
UNIT_INTERVAL = (  # [0, 1]
    "teacher_momentum_base",
    "teacher_momentum_final",
    "ema_decay",
    "spec_augment_fraction",
    "freq_mask_fraction",
    "test_fraction",
    "validation_fraction",
    "max_failed_clip_share",
)
BELOW_ONE = ("adam_beta1", "adam_beta2")  # [0, 1)


def _check(parsed: tuple, typed: set = frozenset(), preset: set = frozenset()) -> tuple:
    """Every numeric argument in its range (POSITIVE, NON_NEGATIVE, UNIT_INTERVAL, BELOW_ONE), warm-up within the
    steps, the lr floor under the peak: a UsageError naming the argument and the fix, before any data or model.
    `typed`: the names the command line gave, `preset`: those the preset gave; a warm-up the command line did not give
    (the preset's or the script's default) that is longer than the run is cut to 10 % of it, with a line that says
    so."""
    parsed = list(parsed)
    for i, arguments in enumerate(parsed):
        for name, value in vars(arguments).items():
            if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if name in POSITIVE and not value > 0:
                raise UsageError(f"--{name} must be > 0, got {value}")
            if name in NON_NEGATIVE and not value >= 0:
                raise UsageError(f"--{name} must be >= 0, got {value}")
            if name in UNIT_INTERVAL and not 0 <= value <= 1:
                raise UsageError(f"--{name} must be in [0, 1], got {value}")
            if name in BELOW_ONE and not 0 <= value < 1:
                raise UsageError(f"--{name} must be in [0, 1), got {value}")
            if isinstance(value, float) and math.isinf(value) and name in POSITIVE + NON_NEGATIVE:
                raise UsageError(f"--{name} must be finite, got {value}")
        max_steps, warmup = getattr(arguments, "max_steps", None), getattr(arguments, "warmup_steps", None)
        if max_steps is not None and warmup is not None and warmup > max_steps and "warmup_steps" not in typed:
            warmup, line = fit_warmup(warmup, max_steps, "the preset's" if "warmup_steps" in preset else "the default")
            print(line)
            parsed[i] = arguments = dataclasses.replace(arguments, warmup_steps=warmup)
        if max_steps is not None and warmup is not None and warmup > max_steps:
            raise UsageError(
                f"--warmup_steps {warmup} must be at most --max_steps {max_steps}: lower --warmup_steps "
                f"(e.g. --warmup_steps {max(0, max_steps // 10)}) or raise --max_steps."
            )
        peak, floor = getattr(arguments, "learning_rate", None), getattr(arguments, "min_learning_rate", None)
        if peak is not None and floor is not None and floor > peak:
            raise UsageError(f"--min_learning_rate {floor} must be at most --learning_rate {peak}")
    return tuple(parsed)


def config_keys(config_class) -> set:
    """The keys a user may give a config class as a dict (e.g. `model_config`): its own `__init__` arguments and the
    label fields every transformers config has."""
    return init_arguments(config_class) | {"id2label", "label2id", "num_labels", "problem_type"}


def check_model_config(fields, config_class) -> dict:
    """`model_config` as given (a dict, an inline JSON object or a JSON file) -> a dict of its fields, or a UsageError
    for a file that is missing or not JSON, and for every key `config_class` does not know (with the closest one).
    transformers' configs accept any key silently, so a typo would otherwise train the default model."""
    if fields is None:
        return {}
    if isinstance(fields, str) and fields.lstrip().startswith("{"):
        try:
            fields = json.loads(fields)
        except json.JSONDecodeError as error:
            raise UsageError(f"model_config is not a valid JSON object: {error}") from None
    elif isinstance(fields, str):
        fields = _read_preset(fields)
    if not isinstance(fields, dict):
        raise UsageError(f"model_config must be a JSON object of {config_class.__name__} fields, got {fields!r}")
    where = f"{config_class.__name__}'s docstring ({inspect.getmodule(config_class).__name__})"
    check_keys(fields, config_keys(config_class), "model_config", where)
    return fields


def config_from_fields(config_class, fields: dict):
    """`config_class(**fields)`, where a value the config refuses (its `@strict` type checks and its
    `validate_architecture`: a wrong type, a size that does not divide another) is a UsageError with the config's own
    one-line reason, which names the field, instead of a traceback."""
    try:
        return config_class(**fields)
    except StrictDataclassError as error:
        raise UsageError(f"model_config: {error.__cause__ or error}") from None


def gradient_accumulation_for(
    total_train_batch_size, per_device_train_batch_size: int, num_processes: int, gradient_accumulation_steps: int = 1
) -> int:
    """Micro-batches per optimiser step such that per_device × num_processes × accumulation = total_train_batch_size.

    A preset states the paper's global batch (`total_train_batch_size`, e.g. 128 = 32 per device × 4 GPUs for
    AudioSet); on fewer processes the accumulation makes up the difference (1 process: 4 micro-batches of 32), so
    the optimiser sees the preset's batch whatever the machine. `total_train_batch_size=None` keeps
    `gradient_accumulation_steps`. A total that the micro-batches cannot make up exactly, or an explicit
    `gradient_accumulation_steps` (other than 1) that disagrees with it, is a ValueError.
    """
    if total_train_batch_size is None:
        return gradient_accumulation_steps
    per_micro_batch = per_device_train_batch_size * num_processes
    if total_train_batch_size % per_micro_batch:
        raise ValueError(
            f"--total_train_batch_size {total_train_batch_size} is not a multiple of --per_device_train_batch_size "
            f"{per_device_train_batch_size} × {num_processes} process(es) = {per_micro_batch}: choose a per-device "
            f"batch B such that B × {num_processes} divides {total_train_batch_size}."
        )
    derived = total_train_batch_size // per_micro_batch
    if gradient_accumulation_steps not in (1, derived):
        raise ValueError(
            f"--gradient_accumulation_steps {gradient_accumulation_steps} contradicts --total_train_batch_size "
            f"{total_train_batch_size} = {per_device_train_batch_size} per device × {num_processes} process(es) × "
            f"{derived}: give one of them."
        )
    if derived > 1:
        logger.warning(
            f"Global batch {total_train_batch_size} on {num_processes} process(es) of "
            f"{per_device_train_batch_size}: {derived} gradient-accumulation micro-batches per step."
        )
    return derived


# -------------------------------------------------------------------------------------------------- run-length defaults
# The training defaults that depend on the run's length or the data's size, chosen from them when the user leaves
# them unset; each choice is said in one line.
#
# The paper's fine-tuning (Table hyperparams 1) runs 8,000 to 443,000 steps on thousands of clips: peak lr 5e-5,
# evaluation on a weight EMA of decay 0.995 (horizon 1 / (1 - 0.995) = 200 steps), warm-up 10 % of the steps, batch
# 128. Kept for `--max_steps 200` on a folder of a hundred clips, the lr is too small to move the weights in so few
# steps and the EMA still holds a third of the initial weights at the end (0.995^200 = 0.37): the run scores chance. So
# an unset value is derived from the run:
#
# - learning rate: the paper's 5e-5 for a run as long as its shortest schedule (8,000 steps, ESC-50 and CREMA-D) or
#   longer; a shorter run gets the same total lr · steps (5e-5 · 8,000 / S), at most SHORT_RUN_MAX_LR;
# - weight-EMA decay: the paper's 0.995, or for a shorter run the largest decay whose horizon 1 / (1 - d) is a tenth of
#   the run (off below 20 steps, where that horizon is under 2 steps);
# - warm-up: DEFAULT_WARMUP_STEPS, or 10 % of a shorter run (the presets' ratio);
# - batch: DEFAULT_BATCH_SIZE clips, or all the training clips when they are fewer (for a fixed number of steps a
#   larger batch sees more clips: on the study's 99 clips, 200 steps of 99 ended at loss 1.81, of 32 at 2.08).
#
# A value given on the command line or in a preset is used as given: the presets keep the paper's numbers. One rule
# covers a warm-up from a preset (or a script's default) that is longer than a shorter `--max_steps` given on the
# command line: it becomes 10 % of the run, and a line says so; a warm-up typed on the command line that does not fit
# is refused (`arguments.parse_arguments`). The measurements behind the numbers:
# research/2026-11-small-folder-finetuning/.
#
# Every function returns (value, line): the line is None when the default was kept.
PAPER_LEARNING_RATE = 5e-5  # Table hyperparams 1, fine-tuning, every dataset
PAPER_EMA_DECAY = 0.995  # Sec. Fine-tuning Setup (not for ESC-50)
SHORTEST_PAPER_SCHEDULE = 8000  # steps of the ESC-50 and CREMA-D presets, the paper's shortest fine-tuning
SHORT_RUN_MAX_LR = 2e-3  # the largest lr a short run gets (measured: research/2026-11-small-folder-finetuning/)
EMA_HORIZON_FRACTION = 0.1  # the EMA's horizon 1 / (1 - d), at most this fraction of the run
WARMUP_FRACTION = 0.1  # the presets' warm-up: 10 % of the steps
DEFAULT_WARMUP_STEPS = 100
DEFAULT_BATCH_SIZE = 128


def learning_rate_for(max_steps: int) -> tuple[float, str | None]:
    """The peak lr of an S-step fine-tuning run: 5e-5 for S >= 8,000, else min(5e-5 · 8,000 / S, 2e-3)."""
    if max_steps >= SHORTEST_PAPER_SCHEDULE:
        return PAPER_LEARNING_RATE, None
    same_total = float(f"{PAPER_LEARNING_RATE * SHORTEST_PAPER_SCHEDULE / max_steps:.3g}")
    lr = min(SHORT_RUN_MAX_LR, same_total)
    return lr, (
        f"--learning_rate {lr:g}: the paper's {PAPER_LEARNING_RATE:g} × {SHORTEST_PAPER_SCHEDULE:,} steps (its "
        f"shortest schedule) spread over --max_steps {max_steps}"
        f"{f', at most {SHORT_RUN_MAX_LR:g}' if same_total > SHORT_RUN_MAX_LR else ''} "
        "(pass --learning_rate to choose)"
    )


def ema_decay_for(max_steps: int) -> tuple[float, str | None]:
    """The weight-EMA decay of an S-step run: 0.995, or 1 - 10 / S when that horizon is longer than S / 10, 0 (off)
    when S < 20."""
    decay = round(max(0.0, 1.0 - 1.0 / (EMA_HORIZON_FRACTION * max_steps)), 4)
    if decay < 0.5:
        decay = 0.0
    if decay >= PAPER_EMA_DECAY:
        return PAPER_EMA_DECAY, None
    if decay == 0:
        return 0.0, (
            f"--ema_decay 0 (no weight EMA): --max_steps {max_steps} is too short for one (the paper's "
            f"{PAPER_EMA_DECAY:g} averages over {1 / (1 - PAPER_EMA_DECAY):.0f} steps; pass --ema_decay to "
            "choose)"
        )
    return decay, (
        f"--ema_decay {decay:g}: its horizon 1/(1-d) = {1 / (1 - decay):.0f} steps is a tenth of "
        f"--max_steps {max_steps} (the paper's {PAPER_EMA_DECAY:g} averages over "
        f"{1 / (1 - PAPER_EMA_DECAY):.0f}; pass --ema_decay to choose)"
    )


def warmup_steps_for(max_steps: int, default: int = DEFAULT_WARMUP_STEPS) -> tuple[int, str | None]:
    """The warm-up of an S-step run when none is given: `default`, or 10 % of S when that is fewer."""
    warmup = min(default, int(max_steps * WARMUP_FRACTION))
    if warmup == default:
        return warmup, None
    return warmup, (
        f"--warmup_steps {warmup}: 10 % of --max_steps {max_steps} (the default {default} is more than "
        "that; pass --warmup_steps to choose)"
    )


def fit_warmup(warmup_steps: int, max_steps: int, source: str) -> tuple[int, str | None]:
    """A warm-up that the command line did not give (`source`: "the preset's", "the default") cut to 10 % of a run it
    does not fit in; one that fits is kept."""
    if warmup_steps <= max_steps:
        return warmup_steps, None
    warmup = int(max_steps * WARMUP_FRACTION)
    return warmup, (
        f"--warmup_steps {warmup}: 10 % of --max_steps {max_steps} ({source} {warmup_steps} is more than "
        "the run; pass --warmup_steps to choose)"
    )


def batch_size_for(num_clips: int, num_processes: int = 1, default: int = DEFAULT_BATCH_SIZE) -> tuple[int, str | None]:
    """Clips per process per micro-batch when none is given: `default`, or the training clips (shared by the
    processes) when they are fewer; at least 1."""
    batch = max(1, min(default, num_clips // num_processes))
    if batch == default:
        return batch, None
    over = f" over {num_processes} processes" if num_processes > 1 else ""
    return batch, (
        f"--per_device_train_batch_size {batch}: the {num_clips} training clips{over} (the default "
        f"{default} is more than that; pass --per_device_train_batch_size to choose)"
    )
