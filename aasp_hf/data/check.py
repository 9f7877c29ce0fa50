# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Check a prepared copy of a dataset before training on it: `python -m aasp_hf.data.check NAME --root DIR [...]`.

The check runs the dataset's own loader (the same options: `--metadata_csv`, `--audio_dir`, `--split_file`, ...)
and reports, per split (per fold for ESC-50 and UrbanSound8K), the clip count beside the official one (the
dataset record's `official`; docs/datasets.md gives the source of each number), the files the metadata names that
are missing, the audio files under the audio folder (the record's) that no split names, the sample rates, channels
and formats found in the file headers (soundfile's header reader; torchcodec's stream metadata for mp3/m4a; no audio
is decoded; a seeded sample of `--sample_files` files when there are more), the number of labels, and for AudioSet
each split's coverage (segments with a file / segments in its CSVs).

It exits with 1, after one line per problem, when the loader refuses the copy (a metadata file missing, audio files
the metadata names missing, an unknown label: the loader's own message) or a split is empty; with 0 otherwise.
Counts that differ from the official ones are shown, not refused: a real AudioSet copy always misses clips.
"""

import argparse
import collections
import json
import logging
import os
import random
import re
import sys
from pathlib import Path

import datasets
import pyarrow.compute as pc
import soundfile as sf
from torchcodec.decoders import AudioDecoder

from ..utils.errors import UsageError
from .audiofolder import AUDIO_EXTENSIONS
from .loaders import load
from .loaders.dataset_records import DATASET_RECORDS, find_record
from .loaders.layout import default_audio_dir, recording_missing_files

# The names, aliases, official counts and EVAR tasks that need --metadata_csv, as the dataset records hold them
# (`loaders.dataset_records`, one place for load(), this check and the protocol).
NAMES = tuple(DATASET_RECORDS)
ALIASES = {alias: record.name for record in DATASET_RECORDS.values() for alias in record.aliases}
EVAR_TASKS = tuple(record.name for record in DATASET_RECORDS.values() if record.needs_metadata_csv)
OFFICIAL = {record.name: dict(record.official) for record in DATASET_RECORDS.values()}
_CONTAINER_FORMATS = (".mp3", ".m4a", ".aac")  # headers read by torchcodec (FFmpeg) rather than libsndfile
NUM_EXAMPLES = 3


def canonical_name(name: str) -> str:
    """The record's name of a dataset name or alias (any case, "-" or "_"); a name of no record in lower case, with
    "_" for "-"."""
    record = find_record(name)
    return record.name if record is not None else name.lower().replace("-", "_")


def audio_folder(name: str, root: Path, options: dict):
    """The folder the loader reads the clips from (walked for files that no split names), as the dataset's record
    says: its `audio_dir` under `root`, or the loader's own default where it takes `--audio_dir`; None for an
    audiofolder, where the files are the metadata; `root` for a name of no record."""
    record = find_record(name)
    if record is None:
        return root
    if record.audio_dir is None:
        return None
    if record.audio_dir_option:
        return default_audio_dir(root, options.get("audio_dir"), record.audio_dir)
    return root / record.audio_dir


def audio_files_under(folder: Path, skip_dirs=("_background_noise_",)) -> list:
    """Every audio file below `folder` (by extension), as absolute normalised paths; hidden folders and SCV2's
    background-noise folder (no split reads it) are skipped."""
    found = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skip_dirs)
        found += [_norm(os.path.join(here, f)) for f in sorted(files) if f.lower().endswith(AUDIO_EXTENSIONS)]
    return found


def read_header(path: str) -> tuple:
    """(sample rate, channels, format) from the file's header; nothing is decoded."""
    extension = os.path.splitext(path)[1].lower()
    if extension in _CONTAINER_FORMATS:
        metadata = AudioDecoder(path).metadata
        return metadata.sample_rate, metadata.num_channels, f"{extension[1:].upper()}/{metadata.codec}"
    info = sf.info(path)
    return info.samplerate, info.channels, f"{info.format}/{info.subtype}"


def header_summary(paths: list, sample_files: int, seed: int) -> dict:
    """Sample rates, channels and formats of `paths` (a seeded sample of `sample_files` of them when there are more)."""
    chosen = sorted(random.Random(seed).sample(paths, sample_files)) if len(paths) > sample_files else paths
    rates, channels, formats, unreadable = collections.Counter(), collections.Counter(), collections.Counter(), []
    for path in chosen:
        try:
            rate, num_channels, kind = read_header(path)
        except Exception as error:  # noqa: BLE001 - a header neither reader reads: the clip would fail to decode too
            unreadable.append(f"{path} ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})")
            continue
        rates[rate] += 1
        channels[num_channels] += 1
        formats[kind] += 1
    return {
        "files_read": len(chosen),
        "files_present": len(paths),
        "sampled": len(chosen) < len(paths),
        "seed": seed,
        "sample_rates": dict(sorted(rates.items())),
        "channels": dict(sorted(channels.items())),
        "formats": dict(sorted(formats.items())),
        "unreadable": len(unreadable),
        "unreadable_examples": unreadable[:NUM_EXAMPLES],
    }


def _norm(path) -> str:
    return os.path.normpath(os.path.abspath(path))


def _shown(path: str, root: Path) -> str:
    """`path` relative to `root` when it lies below it (shorter examples), else as it is."""
    relative = os.path.relpath(path, _norm(root))
    return path if relative.startswith("..") else relative


def _paths(split) -> list:
    return [_norm(p) for p in pc.struct_field(split.data.column("audio"), "path").to_pylist()]


def _label_column(split):
    if "events" in split.features:  # sound events: the labels of the events
        return "events"
    return "labels" if "labels" in split.features else "label" if "label" in split.features else None


def _label_values(split, column: str):
    values = split.data.column(column)
    if column == "events":
        return pc.struct_field(pc.list_flatten(values), "label")
    return pc.list_flatten(values) if column == "labels" else values


def _num_classes(feature) -> int:
    if isinstance(getattr(feature, "feature", None), dict):  # sound events: List({"onset", "offset", "label"})
        return feature.feature["label"].num_classes
    return feature.feature.num_classes if hasattr(feature, "feature") else feature.num_classes


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def check_dataset(name: str, root, *, sample_files: int = 200, seed: int = 0, **options) -> dict:
    """The report of one prepared copy: a dict (see `format_report`); `report["errors"]` lists what makes the copy
    unusable (each one line, what to fix), empty when the loader accepts it and no split is empty."""
    name = canonical_name(name)
    root = Path(root)
    options = {key: value for key, value in options.items() if value is not None}
    report = {
        "name": name,
        "root": str(root),
        "options": {k: str(v) for k, v in options.items()},
        "errors": [],
        "notes": [],
        "splits": [],
    }
    logger, collect = logging.getLogger("aasp_hf.data"), _Collect()
    logger.addHandler(collect)
    propagate, level = logger.propagate, logger.level
    logger.propagate = False  # the loader's warnings and counts (INFO) go into the report
    logger.setLevel(logging.INFO)
    try:
        with recording_missing_files() as missing_record:
            dataset = load(name, root=root, **options)
    except (FileNotFoundError, ValueError) as error:  # a loader listing several problems: one line each
        report["errors"] += getattr(error, "problems", None) or [" ".join(str(error).split())]
        return report
    except TypeError as error:  # an option this loader does not take
        option = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        report["errors"].append(
            f"{name} does not take --{option.group(1)}; its options are in the {name} section of docs/datasets.md."
            if option
            else f"{name}: {error}"
        )
        return report
    finally:
        logger.removeHandler(collect)
        logger.propagate = propagate
        logger.setLevel(level)
    report["notes"] = collect.messages
    report["errors"] += [entry["message"] for entry in missing_record]

    # per split (per fold for a dataset with official folds): clips, official, missing files; AudioSet: coverage
    record = find_record(name)
    official = record.official if record is not None else {}
    missing_clips = getattr(dataset, "missing_clips", None) or {}
    named, labels_used, label_feature = set(), set(), None
    parts = []
    for split_name, split in dataset.items():
        paths = _paths(split)
        named.update(paths)
        label_column = _label_column(split)
        if label_column is not None:
            label_feature = split.features[label_column]
            labels_used.update(_label_values(split, label_column).to_pylist())
        if list(dataset) == ["train"] and "fold" in split.features:
            folds = split.data.column("fold").to_pylist()
            numbers = set(folds) | {int(key[5:]) for key in official if key.startswith("fold ")}  # an absent fold too
            parts += [(f"fold {k}", [p for p, f in zip(paths, folds) if f == k]) for k in sorted(numbers)]
            parts.append(("all", paths))
        else:
            parts.append((split_name, paths))
    present = set()
    folder = audio_folder(name, root, options)
    if folder is not None and folder.is_dir():
        present = set(audio_files_under(folder, skip_dirs=record.unread_folders if record is not None else ()))
    missing_files = []
    for part, paths in parts:
        missing = [p for p in paths if p not in present and not os.path.isfile(p)]
        row = {"split": part, "clips": len(paths), "official": official.get(part), "missing": len(missing)}
        if part in missing_clips:  # AudioSet: segments of its CSVs without a file were left out by the loader
            row["segments"] = len(paths) + len(missing_clips[part])
            row["coverage"] = round(len(paths) / row["segments"], 4) if row["segments"] else None
            row["missing_examples"] = [str(y) for y in missing_clips[part][:NUM_EXAMPLES]]
        report["splits"].append(row)
        if part != "all":
            missing_files += missing
    for row in report["splits"]:
        if row["clips"] == 0:
            segments = (
                f" (none of its {row['segments']:,} segments matched a file under {folder})"
                if "segments" in row
                else ""
            )
            report["errors"].append(
                f"split {row['split']!r} has no clips{segments}: check --root and the options "
                f"against the {name} section of docs/datasets.md."
            )
    report["missing_files"] = {
        "count": len(missing_files),
        "examples": [_shown(p, root) for p in missing_files[:NUM_EXAMPLES]],
    }
    unnamed = sorted(present - named)
    report["unnamed_files"] = {
        "folder": str(folder) if folder is not None else None,
        "count": len(unnamed),
        "examples": [_shown(p, root) for p in unnamed[:NUM_EXAMPLES]],
    }
    report["labels"] = {
        "classes": _num_classes(label_feature) if label_feature is not None else None,
        "present": len(labels_used),
    }
    existing = sorted(p for p in named if p in present or os.path.isfile(p))
    report["audio"] = header_summary(existing, sample_files, seed)
    return report


# ------------------------------------------------------------------------------------------------ output
def _count(value) -> str:
    return "—" if value is None else f"{value:,}"


def _files(count: int) -> str:
    return f"{count:,} file" + ("" if count == 1 else "s")


def _tally(counter: dict, unit: str = "") -> str:
    return ", ".join(f"{key}{unit} ({_count(n)})" for key, n in counter.items()) or "—"


def format_report(report: dict) -> str:
    """The report as a readable table and a few lines (the errors are printed apart, one line each)."""
    options = "".join(f" --{k} {v}" for k, v in report["options"].items())
    lines = [f"{report['name']} at {report['root']}{options}"]
    if not report["splits"]:
        return "\n".join(lines)
    audioset = any("segments" in row for row in report["splits"])
    header = ["split", "clips", "official"] + (["segments", "coverage"] if audioset else ["missing"])
    table = [header]
    for row in report["splits"]:
        if audioset:
            coverage = "—" if row.get("coverage") is None else f"{100 * row['coverage']:.1f} %"
            cells = [_count(row.get("segments")), coverage]
        else:
            cells = [_count(row["missing"])]
        flag = "" if row["official"] in (None, row.get("segments", row["clips"])) else " *"
        table.append([row["split"], _count(row["clips"]), _count(row["official"]) + flag, *cells])
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines += [
        "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in table
    ]
    if any(" *" in r[2] for r in table[1:]):
        column = "segments" if audioset else "clips"
        lines.append(f"  * the official count differs from the {column} found (a filtered or partial copy?)")
    if audioset:
        examples = [y for row in report["splits"] for y in row.get("missing_examples", [])][:NUM_EXAMPLES]
        if examples:
            lines.append(f"  segments without a file (left out by the loader), e.g. {', '.join(examples)}")
    labels = report["labels"]
    lines.append(
        "labels: none (no label column)"
        if labels["classes"] is None
        else f"labels: {_count(labels['classes'])} classes, {_count(labels['present'])} of them in the splits"
    )
    missing = report["missing_files"]
    if missing["count"]:
        lines.append(
            f"missing: {_files(missing['count'])} named by the metadata, e.g. {', '.join(missing['examples'])}"
        )
    unnamed = report["unnamed_files"]
    if unnamed["folder"] is not None:
        text = f"in no split: {_files(unnamed['count'])} under {unnamed['folder']}"
        lines.append(text + (f", e.g. {', '.join(unnamed['examples'])}" if unnamed["count"] else ""))
    audio = report["audio"]
    read = (
        f"headers of a seeded sample of {_count(audio['files_read'])} of {_count(audio['files_present'])} files "
        f"(seed {audio['seed']})"
        if audio["sampled"]
        else f"headers of all {_count(audio['files_read'])} files"
    )
    lines.append(f"audio, {read}:")
    lines.append(f"  sample rates: {_tally(audio['sample_rates'], ' Hz')}")
    lines.append(f"  channels: {_tally(audio['channels'])}")
    lines.append(f"  formats: {_tally(audio['formats'])}")
    if audio["unreadable"]:
        lines.append(
            f"  unreadable headers: {_count(audio['unreadable'])}, e.g. {'; '.join(audio['unreadable_examples'])}"
        )
    lines += [f"loader: {note}" for note in report["notes"]]
    return "\n".join(lines)


def sources_by_split(name: str, root, group_by: str, options: dict) -> str:
    """The sources (`--group_by`) of each split that the downstream scripts make of the copy (their defaults: a
    validation of 10 % and a held-out test of 20 % of train where the dataset has none, seed 0), a line per part."""
    from .decoding import for_safe_decoding
    from .protocol import describe_sources, downstream_parts

    loaded = for_safe_decoding(load(name, root=root, **{k: v for k, v in options.items() if v is not None}))
    parts = downstream_parts(loaded, group_by=group_by)
    return "\n".join(f"{part}: {describe_sources(splits, group_by)}" for part, splits in parts.items())


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m aasp_hf.data.check",
        description="Check a prepared copy of a dataset against its loader and the official split sizes "
        "(docs/datasets.md, 'Checking a prepared copy').",
    )
    parser.add_argument(
        "name",
        help=f"the dataset: {', '.join(NAMES)} (or {', '.join(sorted(ALIASES))}; case, '-' and '_' do not matter)",
    )
    parser.add_argument("--root", required=True, help="the folder you would pass to data.load(NAME, root=...)")
    parser.add_argument("--metadata_csv", help="EVAR's metadata CSV (cremad, gtzan, voxforge, surge)")
    parser.add_argument("--audio_dir", help="the audio folder, where it is not the default (AudioSet, VoxCeleb1)")
    parser.add_argument("--metadata_dir", help="AudioSet: the folder of the segment CSVs (default: --root)")
    parser.add_argument("--split_file", help="VoxCeleb1: iden_split.txt (default: ROOT/iden_split.txt)")
    parser.add_argument(
        "--sample_files",
        type=int,
        default=200,
        help="read the headers of at most this many files, a seeded sample (default 200)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of that sample (default 0)")
    parser.add_argument("--json", help="also write the report to this JSON file")
    parser.add_argument(
        "--group_by",
        help="each clip's source (a column, or a regular expression whose first group, "
        "searched in the file name, is the source): also print the sources of each split that "
        "finetune.py and linear_eval.py make with it (their default fractions and seed)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    datasets.disable_progress_bars()  # an audiofolder is built by datasets: its bars would interleave the report
    record = find_record(args.name)
    if record is None:
        print(f"error: unknown dataset {args.name!r}; use one of {', '.join(NAMES)}.", file=sys.stderr)
        return 2
    name = record.name
    if record.needs_metadata_csv and not args.metadata_csv:
        print(f"error: {name} needs --metadata_csv, EVAR's metadata CSV for it (docs/datasets.md).", file=sys.stderr)
        return 2
    if args.sample_files < 1:
        print(f"error: --sample_files must be at least 1, got {args.sample_files}.", file=sys.stderr)
        return 2
    options = {k: getattr(args, k) for k in ("metadata_csv", "audio_dir", "metadata_dir", "split_file")}
    report = check_dataset(name, args.root, sample_files=args.sample_files, seed=args.seed, **options)
    if report["splits"]:
        print(format_report(report))
    if args.group_by is not None and not report["errors"]:
        try:
            print(sources_by_split(name, args.root, args.group_by, options))
        except UsageError as error:
            report["errors"].append(str(error))
    for error in report["errors"]:
        print(f"error: {error}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
