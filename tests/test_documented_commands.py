"""Every command the documentation shows runs as written.

The commands are read from the Markdown files (fenced shell blocks, with their `\\` continuations, and inline code
spans that name a script, a make target or `python -m aasp_hf...` with its arguments) and from the indented examples
of the scripts' module docstrings. Each is checked in one of three ways, chosen by the table `HOW` below:

- RUN: commands whose data is built in (synthetic audio) run in this process, as written, with a few overrides
  appended (fewer steps and clips, a temporary output folder, the encoder the documented pre-training command made);
- PARSE: commands that need data or hardware this machine lacks (AudioSet, 4 GPUs, hours) are parsed exactly as
  written by the script's own `parse_args` (so every flag must exist and every value pass the range checks), and the
  repository files they name (presets, accelerate configs) must exist; `accelerate launch`'s own flags are parsed by
  accelerate's parser;
- TARGET: `make X` needs the target X in the Makefile, and the scripts its recipe runs are parsed as above.

A stale flag, a renamed preset or a removed make target thus fails here (see the tests of the checker, which feed
it a bad command). The same files' relative links must name existing files and their #anchors existing headings,
docs/README.md must link every page of docs/, and the README's inference example runs as written.
"""

import argparse
import ast
import contextlib
import importlib
import importlib.util
import json
import re
import shlex
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = [
    "README.md",
    "MODEL_CARD.md",
    "docs/*.md",
    "benchmarks/*/README.md",
    "conversion/README.md",
    "examples/accelerate_configs/README.md",
]
DOCSTRINGS = ["examples/*.py", "conversion/*.py", "benchmarks/*/*.py"]  # the module docstring of each
PROGRAMS = ("python", ".venv/bin/python", "accelerate", "torchrun", "make")
SHELL_FENCES = ("", "bash", "sh", "shell", "console")
PLACEHOLDERS = {"R": "0"}  # `--machine_rank R` in a multi-node example
OUTPUT_FLAGS = ("--out", "--output", "--output_dir", "--output-dir", "--results")  # files they name are written

RUN, PARSE, TARGET = "run", "parse", "target"
# Script and its first arguments as documented (launcher stripped) -> how the command is checked; the first row
# that the command starts with wins. RUN rows give the overrides appended ({tmp}: a fresh folder; {encoder}: the
# encoder the pre-training row saved) and the file the run must leave in its output folder.
HOW = [
    (
        "examples/pretrain.py --config examples/configs/pretrain_tiny_cpu.json",
        RUN,
        [
            "--max_steps",
            "2",
            "--warmup_steps",
            "1",
            "--synthetic_clips",
            "8",
            "--per_device_train_batch_size",
            "4",
            "--save_steps",
            "2",
            "--report_to",
            "none",
            "--output_dir",
            "{tmp}/runs/pt",
        ],
        "runs/pt/encoder/config.json",
    ),
    (
        "examples/finetune.py --model_name_or_path runs/pt/encoder --synthetic_per_class",
        RUN,
        [
            "--model_name_or_path",
            "{encoder}",
            "--max_steps",
            "2",
            "--warmup_steps",
            "1",
            "--eval_steps",
            "2",
            "--output_dir",
            "{tmp}",
        ],
        "all_results.json",
    ),
    (
        "examples/linear_eval.py --model_name_or_path runs/pt/encoder --synthetic_per_class",
        RUN,
        ["--model_name_or_path", "{encoder}", "--max_steps", "2", "--eval_steps", "2", "--output_dir", "{tmp}"],
        "all_results.json",
    ),
    (
        "examples/shift_consistency.py --model_name_or_path runs/pt/encoder --synthetic_clips",
        RUN,
        ["--model_name_or_path", "{encoder}", "--synthetic_clips", "4", "--output_dir", "{tmp}"],
        "all_results.json",
    ),
    (
        "examples/visualize_sblu.py --model_name_or_path runs/pt/encoder --synthetic_label",
        RUN,
        ["--model_name_or_path", "{encoder}", "--output_dir", "{tmp}"],
        "all_results.json",
    ),
    ("examples/mask_geometry.py --num_views", RUN, ["--num_views", "20", "--output_dir", "{tmp}"], "mask_geometry.md"),
    # everything else: AudioSet / ESC-50 paths, the base model or hours of training, GPUs, checkpoints to convert
    ("", PARSE, None, None),
]


# ----------------------------------------------------------------------------------------------- extraction
def _is_command(text: str) -> bool:
    words = text.split()
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value before the program
        words = words[1:]
    return bool(words) and words[0] in PROGRAMS and (words[0] != "accelerate" or words[1:2] == ["launch"])


def _joined(lines: list[str], i: int) -> tuple[str, int]:
    """The command starting at lines[i] with its `\\` continuation lines, and the index after it."""
    parts = [lines[i].strip()]
    while parts[-1].endswith("\\") and i + 1 < len(lines):
        parts[-1] = parts[-1][:-1].rstrip()
        i += 1
        parts.append(lines[i].strip())
    return " ".join(parts), i + 1


def _inline(line: str) -> list[str]:
    """Inline code spans that are commands naming a script, a make target or a module with its arguments (`python
    examples/...` and a bare `python -m aasp_hf.data.check` are prose)."""
    return [
        span
        for span in re.findall(r"`([^`]+)`", line)
        if _is_command(span) and (span.lstrip().startswith("make ") or ".py" in span or re.search(r" -m \S+ \S", span))
    ]


def commands_in_markdown(text: str) -> list[tuple[int, str]]:
    """(line number, command) for each command of a fenced shell block and each inline command span."""
    lines, found, fence, i = text.splitlines(), [], None, 0
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith("```"):
            fence = stripped[3:].strip() if fence is None else None
        elif fence is not None:
            if fence in SHELL_FENCES and _is_command(stripped):
                command, following = _joined(lines, i)
                found.append((i + 1, command))
                i = following
                continue
        else:
            found += [(i + 1, span) for span in _inline(lines[i])]
        i += 1
    return found


def commands_in_docstring(text: str) -> list[tuple[int, str]]:
    """(line number in the docstring, command) for each indented example line and each inline command span."""
    lines, found, i = text.splitlines(), [], 0
    while i < len(lines):
        if lines[i].startswith("    ") and _is_command(lines[i].strip()):
            command, following = _joined(lines, i)
            found.append((i + 1, command))
            i = following
            continue
        found += [(i + 1, span) for span in _inline(lines[i])]
        i += 1
    return found


def documented_commands() -> list[tuple[str, str]]:
    """(where, command) for every documented command of the repository."""
    found = []
    for pattern in MARKDOWN:
        for path in sorted(ROOT.glob(pattern)):
            found += [(f"{path.relative_to(ROOT)}:{n}", c) for n, c in commands_in_markdown(path.read_text())]
    for pattern in DOCSTRINGS:
        for path in sorted(ROOT.glob(pattern)):
            body = ast.parse(path.read_text()).body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                first = body[0].value.lineno  # the docstring's first line in the file
                found += [
                    (f"{path.relative_to(ROOT)}:{first + n - 1}", c)
                    for n, c in commands_in_docstring(body[0].value.value)
                ]
    return found


# ----------------------------------------------------------------------------------------------- checking
class StaleCommand(AssertionError):
    """A documented command that no longer works as written."""


def split_command(command: str) -> list[str]:
    """Shell words without comments, leading VAR=value, `...` and bracketed prose; `[--flag value]` (an optional
    part) is kept without its brackets; placeholders get a value of the right type."""
    words = shlex.split(command, comments=True)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words.pop(0)
    out, group = [], None
    for word in words:
        if group is None and word.startswith("["):
            group, word = [], word[1:]
        if group is None:
            out.append(word)
            continue
        closed = word.endswith("]")
        group.append(word[:-1] if closed else word)
        if closed:
            out += group if group and group[0].startswith("-") else []  # optional flags, not prose
            group = None
    return [PLACEHOLDERS.get(w, w) for w in out if w != "..."]


def how(script_argv: list[str]) -> tuple:
    text = " ".join(script_argv)
    return next(row for row in HOW if text == row[0] or text.startswith(row[0] + " ") or not row[0])


def load_script(relative: str):
    """The module of a script (a path ending in .py) or of `python -m NAME`; None for a module of another package
    (its arguments are its own, and it may live in another environment, as heareval's runners in .venv-hear)."""
    if not relative.endswith(".py"):
        if relative.split(".")[0] != "aasp_hf":
            return None
        try:
            return importlib.import_module(relative)
        except ModuleNotFoundError as error:
            if error.name != relative:  # the module exists; something it imports is missing
                raise
            raise StaleCommand(f"python -m {relative}: no such module") from None
    path = ROOT / relative
    if not path.is_file():
        raise StaleCommand(f"{relative} does not exist")
    if path.parent in (ROOT / "examples", ROOT / "conversion", ROOT / "benchmarks" / "quality"):  # pytest's pythonpath
        return importlib.import_module(path.stem)
    name = "documented_" + "_".join(path.relative_to(ROOT).with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Parsed(Exception):
    pass


def parse_script(relative: str, argv: list[str]):
    """The script's own argument parsing of `argv`: its `parse_args`, or for a script that parses inside `main`,
    `main` stopped right after argparse parsed. A refusal becomes a StaleCommand. Abbreviated flags are refused
    (argparse takes `--synthetic_clip` for `--synthetic_clips`, until another flag makes it ambiguous)."""
    module = load_script(relative)
    if module is None:
        return None
    for flag, value in zip(argv, argv[1:]):
        if (
            re.fullmatch(r"(examples|benchmarks|conversion|docs)/\S+\.(json|yaml)", value)
            and flag not in OUTPUT_FLAGS
            and not (ROOT / value).is_file()
        ):
            raise StaleCommand(f"{relative}: {flag} {value}: no such file in the repository")
    original = argparse.ArgumentParser.parse_args

    def stop_after_parsing(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    try:  # in the repository's root, where the documented commands run
        with contextlib.chdir(ROOT), mock.patch.object(argparse.ArgumentParser, "_get_option_tuples", lambda *_: []):
            if hasattr(module, "parse_args"):
                return module.parse_args(argv)
            with mock.patch.object(argparse.ArgumentParser, "parse_args", stop_after_parsing):
                module.main(argv)
    except _Parsed as parsed:
        return parsed.args[0]
    except SystemExit as exit_:  # argparse's refusal (its message went to stderr)
        raise StaleCommand(f"{relative} {' '.join(argv)}: argparse refused it (exit code {exit_.code})") from None
    except ValueError as error:  # UsageError, HfArgumentParser's unused arguments, a config's range check
        raise StaleCommand(f"{relative} {' '.join(argv)}: {error}") from None
    raise StaleCommand(f"{relative}: main() returned without parsing arguments")


def makefile_targets() -> dict[str, list[str]]:
    """{target: recipe lines} of the Makefile."""
    targets, current = {}, []
    for line in (ROOT / "Makefile").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.$()-][^:=\s]*(?:\s+[^:=\s]+)*)\s*:(?!=)", line)
        if match and not line.startswith("\t"):
            current = []
            for name in match.group(1).split():
                targets[name] = current
        elif line.startswith("\t"):
            current.append(line.strip())
    return targets


def check_make(words: list[str]) -> None:
    targets, makefile = makefile_targets(), (ROOT / "Makefile").read_text()
    variables = dict(word.split("=", 1) for word in words[1:] if "=" in word)
    for name in variables:
        if f"$({name})" not in makefile:
            raise StaleCommand(f"make: the Makefile does not use {name}")
    for target in [word for word in words[1:] if "=" not in word]:
        if target not in targets:
            raise StaleCommand(f"make {target}: no such target in the Makefile ({', '.join(sorted(targets))})")
        for line in targets[target]:
            script = re.match(r"\$\(PY\) (\S+\.py)(.*)", line)
            if script:  # the script the recipe runs, with the variables the command sets
                args = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), ""), script.group(2))
                parse_script(script.group(1), shlex.split(args))


def script_and_argv(words: list[str]) -> tuple[str, list[str]]:
    """(script, its arguments) of a `python`, `torchrun` or `accelerate launch` command (for `python -m NAME`, the
    module's name stands for the script); accelerate's and torchrun's flags are parsed by their own parsers and
    accelerate's --config_file must exist."""
    if words[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        try:
            run = get_args_parser().parse_args(words[1:])
        except SystemExit:
            raise StaleCommand(f"torchrun refused {' '.join(words[1:])}") from None
        return run.training_script, list(run.training_script_args)
    if words[0] != "accelerate":
        return (words[2], words[3:]) if words[1:2] == ["-m"] else (words[1], words[2:])
    from accelerate.commands.launch import launch_command_parser

    try:
        launch = launch_command_parser().parse_args(words[2:])
    except SystemExit:
        raise StaleCommand(f"accelerate launch refused {' '.join(words[2:])}") from None
    if launch.config_file and not (ROOT / launch.config_file).is_file():
        raise StaleCommand(f"accelerate launch --config_file {launch.config_file}: no such file")
    return launch.training_script, list(launch.training_script_args)


def check_parses(command: str) -> None:
    """TARGET or PARSE, as `HOW` says for this command."""
    words = split_command(command)
    if words[0] == "make":
        return check_make(words)
    script, argv = script_and_argv(words)
    parse_script(script, argv)


def kind_of(command: str) -> str:
    words = split_command(command)
    if words[0] == "make":
        return TARGET
    script, argv = script_and_argv(words)
    return how([script, *argv])[1]


COMMANDS = documented_commands()
CHECKED = [(where, command) for where, command in COMMANDS if kind_of(command) != RUN]
RUNS = [(where, command) for where, command in COMMANDS if kind_of(command) == RUN]


@pytest.mark.parametrize("where, command", CHECKED, ids=[where for where, _ in CHECKED])
def test_a_documented_command_parses_as_written(where, command):
    check_parses(command)


# ----------------------------------------------------------------------------------------------- running
_RAN = {}  # (script, arguments) -> the file the run left: the same script and arguments under two launchers run once


def run_as_written(command: str, tmp: Path, encoder: Path | None) -> Path:
    """Runs a RUN command's script in this process with its row's overrides; returns the file it must leave."""
    script, argv = script_and_argv(split_command(command))
    if (script, *argv) not in _RAN:
        _, _, overrides, leaves = how([script, *argv])
        fill = {"{tmp}": str(tmp), "{encoder}": str(encoder)}
        overrides = [re.sub(r"\{\w+\}", lambda m: fill[m.group(0)], o) for o in overrides]
        with contextlib.chdir(ROOT):  # the repository's root, where the documented commands run
            load_script(script).main(argv + overrides)
        _RAN[(script, *argv)] = tmp / leaves
    return _RAN[(script, *argv)]


def row_of(command: str) -> tuple:
    script, argv = script_and_argv(split_command(command))
    return how([script, *argv])


@pytest.fixture(scope="module")
def pretrained_encoder(tmp_path_factory) -> Path:
    """The README's pre-training command, run as written (2 steps): the encoder the downstream commands use."""
    where, command = next((w, c) for w, c in RUNS if row_of(c) is HOW[0])
    tmp = tmp_path_factory.mktemp("pretrain")
    config = run_as_written(command, tmp, None)
    assert json.loads(config.read_text())["hidden_size"] == 64, where  # the tiny preset's model
    return config.parent


def test_every_run_row_of_the_table_matches_a_documented_command():
    used = {id(row_of(command)) for _, command in RUNS}
    for row in HOW:
        assert row[1] != RUN or id(row) in used, f"no documented command starts with {row[0]!r}: update HOW"


@pytest.mark.parametrize("where, command", RUNS, ids=[where for where, _ in RUNS])
def test_a_documented_command_on_built_in_data_runs_as_written(where, command, pretrained_encoder, tmp_path):
    left = run_as_written(command, tmp_path, pretrained_encoder)
    assert left.is_file(), f"{where}: {command} left no {left.name}"


# ----------------------------------------------------------------------------------------------- the checker
BAD = """Text, then a block:

```bash
python examples/pretrain.py --synthetic_clipz 8 \\
    --output_dir runs/x   # a comment
make tset
accelerate launch --config_file examples/accelerate_configs/cpu.yaml examples/pretrain.py \\
    --config examples/configs/pretrain_tiny.json
```

and inline `python examples/finetune.py --model_name_or_path m --learning_rate -1` but not `python examples/...`.
"""


def test_the_extractor_and_the_checker_catch_a_stale_command():
    commands = [c for _, c in commands_in_markdown(BAD)]
    assert commands == [
        "python examples/pretrain.py --synthetic_clipz 8 --output_dir runs/x   # a comment",
        "make tset",
        "accelerate launch --config_file examples/accelerate_configs/cpu.yaml examples/pretrain.py --config "
        "examples/configs/pretrain_tiny.json",
        "python examples/finetune.py --model_name_or_path m --learning_rate -1",
    ]
    stale = [
        r"synthetic_clipz",
        r"make tset: no such target",
        r"pretrain_tiny.json: no such file",
        r"--learning_rate must be > 0",
    ]
    for command, message in zip(commands, stale):
        with pytest.raises(StaleCommand, match=message):
            check_parses(command)
    check_parses("python examples/pretrain.py --synthetic_clips 8 --output_dir runs/x")  # the fixed spelling passes
    with pytest.raises(StaleCommand, match="synthetic_clip"):  # an abbreviation works until a flag makes it ambiguous
        check_parses("python examples/pretrain.py --synthetic_clip 8")
    with pytest.raises(StaleCommand, match=r"unknown key in the command line: '--chek' \(did you mean '--check'\?\)"):
        check_parses("python conversion/export_onnx.py MODEL_DIR model.onnx --chek")
    with pytest.raises(StaleCommand, match="no such target"):
        check_make(["make", "study-quik"])
    assert split_command("X=1 python a.py [--flag 3] [prose, e.g. --y] NAME=DIR ... --machine_rank R") == [
        "python",
        "a.py",
        "--flag",
        "3",
        "NAME=DIR",
        "--machine_rank",
        "0",
    ]
    docstring = "Title.\n\n    python examples/demo.py [--seed 0]\n    accelerate launch x.py \\\n        --a 1\n"
    assert commands_in_docstring(docstring) == [
        (3, "python examples/demo.py [--seed 0]"),
        (4, "accelerate launch x.py --a 1"),
    ]


def test_a_module_run_with_python_m_is_parsed_by_its_own_parser():
    """`python -m aasp_hf.data.check ...` in a shell block or an inline span is the module's command, not a script
    named `-m`; a misspelt module or flag is stale; a module of another package is not checked."""
    assert [c for _, c in commands_in_markdown("Run `python -m aasp_hf.data.check esc50 --root /data/ESC-50`.\n")] == [
        "python -m aasp_hf.data.check esc50 --root /data/ESC-50"
    ]
    assert kind_of("python -m aasp_hf.data.check esc50 --root /data/ESC-50") == PARSE
    check_parses("python -m aasp_hf.data.check esc50 --root /data/ESC-50 --json report.json")
    with pytest.raises(StaleCommand, match=r"aasp_hf\.data\.chek: no such module"):
        check_parses("python -m aasp_hf.data.chek esc50 --root /data/ESC-50")
    with pytest.raises(StaleCommand, match=r"aasp_hf\.data\.check esc50 --rot /data: argparse refused it"):
        check_parses("python -m aasp_hf.data.check esc50 --rot /data")
    check_parses("python -m heareval.embeddings.runner MODULE --tasks-dir TASKS")  # another package's: not checked
    assert commands_in_markdown("the module `python -m aasp_hf.data.check` checks a copy\n") == []  # a name: prose


# ----------------------------------------------------------------------------------------------- links
class BrokenLink(AssertionError):
    """A link of the documentation to a file or a heading that does not exist."""


def _outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    kept, fence = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            fence = not fence
        elif not fence:
            kept.append((number, line))
    return kept


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without Markdown (code ticks, emphasis, link targets),
    lowercased, punctuation dropped (letters, digits, '_', '-' and spaces stay), each space a '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](target) -> text
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown file's headings; a repeated one gets -1, -2, ... as on GitHub."""
    found, seen = set(), {}
    for _, line in _outside_fences(text):
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            anchor = github_anchor(heading.group(1))
            found.add(anchor if anchor not in seen else f"{anchor}-{seen[anchor]}")
            seen[anchor] = seen.get(anchor, 0) + 1
    return found


def links_in_markdown(text: str) -> list[tuple[int, str]]:
    """(line number, target) of each `[text](target)` link outside code, web addresses left out."""
    found = []
    for number, line in _outside_fences(text):
        prose = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                found.append((number, target))
    return found


def check_link(source: Path, target: str) -> None:
    """The file (or folder) a relative link names exists, and so does the heading its #anchor names."""
    path_part, _, anchor = target.partition("#")
    path = (source.parent / path_part).resolve() if path_part else source
    if not path.exists():
        raise BrokenLink(f"{target}: no such file ({path.relative_to(ROOT) if path.is_relative_to(ROOT) else path})")
    if anchor and (path.suffix != ".md" or anchor not in anchors(path.read_text())):
        raise BrokenLink(f"{target}: no heading with the anchor #{anchor} in {path.name}")


LINKED = [path for pattern in MARKDOWN for path in sorted(ROOT.glob(pattern))]


@pytest.mark.parametrize("source", LINKED, ids=[str(p.relative_to(ROOT)) for p in LINKED])
def test_every_link_of_the_documentation_resolves(source):
    broken = []
    for number, target in links_in_markdown(source.read_text()):
        try:
            check_link(source, target)
        except BrokenLink as error:
            broken.append(f"{source.relative_to(ROOT)}:{number}: {error}")
    assert not broken, "\n".join(broken)


def test_the_docs_index_names_every_doc():
    """docs/README.md, the index: one line per page of docs/, each a link."""
    index = ROOT / "docs" / "README.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for _, target in links_in_markdown(index.read_text())}
    pages = {path.resolve() for path in (ROOT / "docs").glob("*.md")} - {index.resolve()}
    assert pages <= linked, f"docs/README.md does not link {sorted(p.name for p in pages - linked)}"


def test_the_link_checker_catches_a_missing_file_or_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Top\n\n## Running on GPUs: `--plan`\n\n## Top\n\n```bash\n# not a heading\n```\n"
        "[ok](#running-on-gpus---plan) [twice](#top-1) [code](`x`) `[not](a link)` [web](https://x.y/z)\n"
        "[self](page.md#top) [gone](other.md) [anchor](page.md#not-a-heading) [fence](#not-a-heading)\n"
    )
    assert anchors(page.read_text()) == {"top", "running-on-gpus---plan", "top-1"}
    assert github_anchor("EAT → AaSP (`convert_eat_checkpoint.py`)") == "eat--aasp-convert_eat_checkpointpy"
    assert github_anchor("Does pre-training learn at small scale?") == "does-pre-training-learn-at-small-scale"
    links = links_in_markdown(page.read_text())
    assert links == [
        (10, "#running-on-gpus---plan"),
        (10, "#top-1"),
        (11, "page.md#top"),
        (11, "other.md"),
        (11, "page.md#not-a-heading"),
        (11, "#not-a-heading"),
    ]
    for _, target in links[:3]:
        check_link(page, target)
    with pytest.raises(BrokenLink, match=r"other.md: no such file"):
        check_link(page, "other.md")
    for target in ("page.md#not-a-heading", "#not-a-heading"):
        with pytest.raises(BrokenLink, match=r"no heading with the anchor #not-a-heading in page.md"):
            check_link(page, target)


# ----------------------------------------------------------------------------------------------- Python examples
def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.fixture
def demo_folders(tmp_path, monkeypatch) -> Path:
    """A folder holding what the inference examples read, as `make demo` leaves it: a tiny encoder in
    demo_output/pretrain/encoder, a tiny three-label classifier in demo_output/classifier, and a 1.5-s stereo clip.wav
    at 22.05 kHz; the test runs in it."""
    import numpy as np
    import soundfile as sf
    from conftest import save_tiny_encoder
    from test_hub_integration import tiny_classifier

    from aasp_hf import AaspFeatureExtractor

    save_tiny_encoder(tmp_path / "demo_output" / "pretrain" / "encoder")
    tiny_classifier().save_pretrained(tmp_path / "demo_output" / "classifier")
    AaspFeatureExtractor().save_pretrained(tmp_path / "demo_output" / "classifier")
    sf.write(tmp_path / "clip.wav", 0.1 * np.random.default_rng(0).standard_normal((33075, 2)), 22050)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_python_block(block: str, where: str) -> tuple[dict, list]:
    """Runs a documented Python block as written; returns its variables and the value of each expression statement
    (what a notebook would show)."""
    code = ast.parse(block)
    show = ast.Attribute(ast.Name("shown_", ast.Load()), "append", ast.Load())
    code.body = [
        ast.Expr(ast.Call(show, [node.value], [])) if isinstance(node, ast.Expr) else node for node in code.body
    ]
    scope = {"shown_": []}
    exec(compile(ast.fix_missing_locations(code), where, "exec"), scope)
    return scope, scope.pop("shown_")


def assert_all_labels_best_first(scores: list[dict]) -> None:
    """A pipeline's answer for the three-label classifier with top_k >= 3: every label once, best first."""
    from test_hub_integration import LABELS

    labels, values = [entry["label"] for entry in scores], [entry["score"] for entry in scores]
    assert sorted(labels) == sorted(LABELS) and values == sorted(values, reverse=True), scores
    assert abs(sum(values) - 1) < 1e-5


def test_the_readme_inference_example_runs_on_the_folders_make_demo_writes(demo_folders):
    section = (ROOT / "README.md").read_text().split("\n## Inference\n", 1)[1].split("\n## ", 1)[0]
    [block] = python_blocks(section)
    scope, shown = run_python_block(block, "README.md (Inference)")

    frames, hidden = scope["inputs"]["input_values"].shape[1], scope["model"].config.hidden_size
    assert scope["inputs"]["input_values"].shape == (1, frames, 128) and frames % 16 == 0
    assert scope["tokens"].shape == (1, 1 + frames // 16 * 8, hidden)  # CLS + 8 frequency patches per time patch
    assert type(scope["classifier"]).__name__ == "AaspAudioClassificationPipeline"
    [scores] = shown  # classifier("clip.wav", top_k=3)
    assert_all_labels_best_first(scores)


def test_the_inference_page_examples_run_as_written(demo_folders):
    """docs/inference.md: a file, a float array at 22.05 kHz and integer stereo PCM through decode_audio; then a file
    in windows, with their timestamps."""
    block, long_recordings, sound_events = python_blocks((ROOT / "docs" / "inference.md").read_text())
    _, shown = run_python_block(block, "docs/inference.md")
    assert len(shown) == 3
    for scores in shown:
        assert_all_labels_best_first(scores)
    _, (whole, timed) = run_python_block(long_recordings, "docs/inference.md (Long recordings and folders)")
    assert_all_labels_best_first(whole)
    assert_all_labels_best_first(timed["scores"])
    [window] = timed["windows"]  # the 1.5-s clip.wav is one window of 10 s
    assert (window["start"], window["end"]) == (0.0, pytest.approx(1.5))
    assert window["scores"] == timed["scores"]
    # Sound events: a tiny two-label frame classifier in runs/sed, a 1.5-s street.wav
    import shutil

    from conftest import tiny_config_kwargs

    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioFrameClassification

    labels = {0: "Speech", 1: "Dog"}
    config = AaspConfig(
        **tiny_config_kwargs(num_mel_bins=128),
        num_labels=2,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    AaspForAudioFrameClassification(config).save_pretrained("runs/sed")
    AaspFeatureExtractor().save_pretrained("runs/sed")
    shutil.copy("clip.wav", "street.wav")
    _, (events, detailed) = run_python_block(sound_events, "docs/inference.md (Sound events)")
    assert all(set(event) == {"onset", "offset", "label", "score"} for event in events + detailed["events"])
    assert detailed["frame_scores"].shape == (10, 2)  # 1.5 s in frames of 0.16 s, rounded up
