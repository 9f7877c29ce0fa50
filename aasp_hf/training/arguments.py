"""Command-line parsing shared by the example scripts: flags, one JSON file, or a JSON preset plus overrides."""

import json
import os
import sys
from pathlib import Path

from transformers import HfArgumentParser


def parse_arguments(dataclass_types, argv=None) -> tuple:
    """Parses `argv` (default `sys.argv[1:]`) into instances of `dataclass_types`, in order.

    Three forms: command-line flags only; a single `preset.json` argument; or `--config preset.json` followed by
    flags that override the preset's values.
    """
    parser = HfArgumentParser(dataclass_types)
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(os.path.abspath(argv[0]))
    if "--config" in argv:
        i = argv.index("--config")
        parser.set_defaults(**json.loads(Path(argv[i + 1]).read_text()))
        argv = argv[:i] + argv[i + 2 :]
    return parser.parse_args_into_dataclasses(args=argv)
