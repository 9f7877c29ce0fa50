"""Command-line parsing shared by the example scripts: flags, one JSON file, or a JSON preset plus overrides."""

import argparse
import json
import os
import sys
from pathlib import Path

from transformers import HfArgumentParser


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
    return parsed
