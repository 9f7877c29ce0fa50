"""Command-line parsing shared by the example scripts: flags, one JSON file, or a JSON preset plus overrides; the
gradient accumulation that makes up a preset's global batch on any number of processes."""

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from transformers import HfArgumentParser


logger = logging.getLogger(__name__)


def parse_arguments(dataclass_types, argv=None, exclusive=()) -> tuple:
    """Parses `argv` (default `sys.argv[1:]`) into instances of `dataclass_types`, in order.

    Three forms: command-line flags only; a single `preset.json` argument; or `--config preset.json` followed by
    flags that override the preset's values. `exclusive`: field names of which a run takes one (the data sources);
    when the command line gives one of them, the preset's values for all of them are dropped, so that
    `--config preset.json --train_dir DIR` reads DIR instead of failing on the preset's own data source.

    Every dataclass with `max_steps` and `warmup_steps` must have no more warm-up steps than steps; this is checked
    here, before any data or model is loaded.
    """
    parser = HfArgumentParser(dataclass_types)
    for action in parser._actions:  # HfArgumentParser gives `--no_x` the help of `--x`; say what it does instead
        if any(option.startswith("--no_") for option in action.option_strings):
            action.help = f"turns --{action.dest} off"
    parser.add_argument(  # handled below; declared so that --help lists it (absent from the parsed namespace)
        "--config", default=argparse.SUPPRESS, metavar="PRESET.json",
        help="a JSON preset of these arguments; the flags that follow --config override its values",
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        return _check(parser.parse_json_file(os.path.abspath(argv[0])))
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise ValueError("--config needs a JSON file: --config preset.json [overriding flags]")
        preset = json.loads(Path(argv[i + 1]).read_text())
        argv = argv[:i] + argv[i + 2 :]
        given = {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")}
        if given & set(exclusive):  # the command line chose among them: the preset's choice goes
            preset = {key: value for key, value in preset.items() if key not in exclusive}
        parser.set_defaults(**preset)
    return _check(parser.parse_args_into_dataclasses(args=argv))


def _check(parsed: tuple) -> tuple:
    for arguments in parsed:
        max_steps, warmup = getattr(arguments, "max_steps", None), getattr(arguments, "warmup_steps", None)
        if max_steps is not None and warmup is not None and warmup > max_steps:
            raise ValueError(
                f"--warmup_steps {warmup} must be at most --max_steps {max_steps}: lower --warmup_steps "
                f"(e.g. --warmup_steps {max(0, max_steps // 10)}) or raise --max_steps."
            )
        scale = getattr(arguments, "patch_embedding_lr_scale", None)
        if scale is not None and not scale >= 0:
            raise ValueError(f"--patch_embedding_lr_scale must be >= 0 (0 freezes the patch embedding), got {scale}")
        strength = getattr(arguments, "student_eq_strength", None)
        if strength is not None and not strength >= 0:
            raise ValueError(f"--student_eq_strength must be >= 0 (0 = off), got {strength}")
    return parsed


def gradient_accumulation_for(total_train_batch_size, per_device_train_batch_size: int, num_processes: int,
                              gradient_accumulation_steps: int = 1) -> int:
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
        logger.warning(f"Global batch {total_train_batch_size} on {num_processes} process(es) of "
                       f"{per_device_train_batch_size}: {derived} gradient-accumulation micro-batches per step.")
    return derived
