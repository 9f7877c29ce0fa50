# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Sound event detection from strong labels: recordings and their events (onset, offset, label) in DCASE's
tab-separated tables, read from our layout or from DESED's.

The table format is DCASE's (task 4 since 2018, as DESED and its DESED_task recipes read it): a header line
``filename<TAB>onset<TAB>offset<TAB>event_label``, then one row per event, times in seconds from the start of the
file. A file without events may be listed by a row whose onset, offset and event_label are empty. DESED's weak
tables (``filename<TAB>event_labels``: which classes occur in a clip, not when) and its unlabelled lists
(``filename``) are not strong labels and are refused by name.

Every audio file in a split's folder is a record, listed or not: a file that no row names has no events (a
recording of background or silence is a valid, unlabelled record). Nothing is decoded; each file's length is read
from its header (soundfile, torchcodec for the formats libsndfile lacks). A file whose header cannot be read, or that
holds no samples, is left out and counted in a warning, as training skips and counts a clip that fails to decode.

Every problem of the tables is found before anything trains and reported at once, one line each
(`SoundEventTableError`): a header other than the four columns, a row naming a file that is not in the folder, an
onset after its offset, a time that is negative or not a number, an offset more than `OFFSET_TOLERANCE` past the end
of its file, a label that occurs once while a close spelling of it is frequent, an empty train split.
"""

import logging
import math
import os
import posixpath
import re
from collections import Counter
from pathlib import Path

from datasets import ClassLabel, List, Value

from ...utils.errors import UsageError, check_keys
from ..audiofolder import AUDIO_EXTENSIONS
from .layout import audio_features, build_dataset_dict


logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
EVENT_COLUMNS = ("filename", "onset", "offset", "event_label")
HEADER = "filename<TAB>onset<TAB>offset<TAB>event_label"
# An offset may pass the end of its file by this much (seconds): annotators round offsets up to the clip's nominal
# 10 s (DESED's validation table gives 10.000 for clips of 9.98 s). Beyond it the row names the wrong file or unit.
OFFSET_TOLERANCE = 0.5
# A label used once is taken for a misspelling of a label used at least this often when their spellings are close.
FREQUENT_LABEL = 3
MAX_EDIT_DISTANCE = 2
MAX_LISTED_PROBLEMS = 20

# DESED's sets (audio/<set>/ beside metadata/<set>.tsv), as DCASE task 4's baseline recipes (DESED_task,
# recipes/dcase2023_task4_baseline/confs/default.yaml) use them for strong labels: training on the strongly labelled
# AudioSet clips and the synthetic soundscapes, model selection on the synthetic validation soundscapes, the score
# on the real validation clips (the recipes' "test" set). Those present are read; `sets=` names others.
DESED_SETS = {
    "train": ("train/strong_label_real", "train/synthetic21_train/soundscapes"),
    "validation": ("validation/synthetic21_validation/soundscapes",),
    "test": ("validation/validation",),
}
# A set whose table is not named after its folder.
DESED_TABLES = {"train/strong_label_real": "train/audioset_strong"}
RESAMPLED_SUFFIX = "_16k"  # the recipes' resampled copy of a set's folder, beside it: its table is the set's

LAYOUTS = (
    "Expected our layout, root/train/ (and optionally root/validation/, root/test/) holding the audio beside "
    f"root/train.tsv (validation.tsv, test.tsv) with the header {HEADER}, file names relative to the split's folder; "
    "or DESED's, root/audio/<split>/<set>/*.wav beside root/metadata/<split>/<set>.tsv "
    "(https://github.com/turpaultn/DESED; docs/datasets.md, 'Sound events')."
)


class SoundEventTableError(UsageError):
    """The problems of a copy's event tables, each one line (`problems`), reported together in one message."""

    def __init__(self, root, problems: list[str]):
        self.problems = list(problems)
        shown = self.problems[:MAX_LISTED_PROBLEMS]
        more = len(self.problems) - len(shown)
        super().__init__(
            f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''} in the sound-event tables of "
            f"{root}:\n" + "\n".join(f"  {line}" for line in shown) + (f"\n  ... and {more} more" if more else "")
        )


def load_sound_events(root, *, sets=None, skip_missing=False, streaming=False, num_shards=None):
    """Recordings and their strongly labelled events: {"train", ["validation",] ["test"]}.

    Our layout: `root/train/` with `root/train.tsv`, and `root/validation/` + `validation.tsv`, `root/test/` +
    `test.tsv` when present; a table's file names are relative to its split's folder (sub-folders allowed).

    DESED's layout (`root/audio/` and `root/metadata/`, the DESED archives merged as its README says): each split
    reads the sets of `DESED_SETS` that are present, a set being `audio/<set>/` with `metadata/<set>.tsv`:
    train = `train/strong_label_real` (table `metadata/train/audioset_strong.tsv`) and
    `train/synthetic21_train/soundscapes`; validation = `validation/synthetic21_validation/soundscapes`; test =
    `validation/validation`, the real clips DCASE's recipes score on. A set's folder with the suffix `_16k` (the
    recipes' resampled copy) is read where the folder itself is absent. `sets` chooses instead, e.g.
    `{"train": ["train/synthetic21_train/soundscapes"], "test": ["eval/public"]}` (the public evaluation set;
    through the scripts: `--dataset_kwargs '{"sets": {...}}'`); a split left out of `sets` is not read.
    `skip_missing`: rows naming a file that is not in its folder are left out and counted instead of refused (real
    DESED copies, downloaded from YouTube, miss a few clips).

    Columns: `audio` (16 kHz `Audio`, read on access), `filename` (string: the name the table gives, relative to the
    split's or set's folder), `events` (`List({"onset": float64, "offset": float64, "label": ClassLabel})`: a list
    of dicts, in the table's row order, seconds from the file's start; empty for a file without events) and
    `duration` (float64: seconds, from the file's header). Labels: the sorted union of every table read.
    Problems in the tables: one `SoundEventTableError` listing them all.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"sound-event dataset not found: {root} is not a directory. {LAYOUTS}")
    problems = []
    if (root / "audio").is_dir() and (root / "metadata").is_dir():
        sources = _desed_sources(root, sets, problems)
    elif sets is not None:
        raise UsageError(f"sets= chooses DESED's sets, and {root} has no audio/ and metadata/ folders. {LAYOUTS}")
    elif (root / "train").is_dir() or (root / "train.tsv").is_file():
        sources = _our_sources(root, problems)
    else:
        raise FileNotFoundError(
            f"no sound-event dataset at {root}: it has neither train/ nor audio/ + metadata/. {LAYOUTS}"
        )

    records, unreadable, missing_rows = {}, [], 0  # records: {split: [(path, filename, events, duration, set)]}
    for split, entries in sources.items():
        records[split] = []
        for name, folder, table in entries:
            found, missing = _set_records(name, folder, table, root, skip_missing, problems, unreadable)
            records[split] += found
            missing_rows += missing
        problems += _repeated_names(split, records[split])
    if unreadable:
        logger.warning(
            f"sound events: left out {len(unreadable)} audio file(s) whose header cannot be read or that hold no "
            f"samples (training would skip them as clips that fail to decode), e.g. {'; '.join(unreadable[:3])}"
        )
    if missing_rows:
        logger.warning(f"sound events: left out {missing_rows} table row(s) naming a file that is not in its folder")
    if "train" in records and not records["train"]:
        problems.append(f"the train split has no readable audio files (in {_describe_sources(sources['train'], root)})")
    label_rows = Counter(e[2] for rows in records.values() for _, _, events, _, _ in rows for e in events)
    if not label_rows and records.get("train") and not problems:  # a refused table is said already
        problems.append("no table holds an event: there is nothing to learn")
    problems += _misspelt_labels(records, label_rows)
    if problems:
        raise SoundEventTableError(root, sorted(problems, key=_by_table_line))

    names = sorted(label_rows)
    index = {label: i for i, label in enumerate(names)}
    features = audio_features(
        filename=Value("string"),
        events=List({"onset": Value("float64"), "offset": Value("float64"), "label": ClassLabel(names=names)}),
        duration=Value("float64"),
    )
    splits = {}
    for split in (split for split in SPLITS if split in records):
        rows = records[split]
        splits[split] = {
            "audio": [row[0] for row in rows],
            "filename": [row[1] for row in rows],
            "events": [[{"onset": a, "offset": b, "label": index[c]} for a, b, c, _ in row[2]] for row in rows],
            "duration": [row[3] for row in rows],
        }
        logger.info(
            f"sound events {split}: {_count(len(rows), 'file')} ({sum(not row[2] for row in rows)} without events), "
            f"{_count(sum(len(row[2]) for row in rows), 'event')}, from {_describe_sources(sources[split], root)}"
        )
    return build_dataset_dict(splits, features, streaming, num_shards)


def _set_records(name, folder: Path, table: Path, root: Path, skip_missing: bool, problems: list, unreadable: list):
    """([(path, filename, events, duration, set name)] of every readable audio file below `folder`, in name order;
    events: [(onset, offset, label, "table line n")]), and the number of rows left out for naming a file that is not
    there (`skip_missing`; else each such file is a problem). Problems go to `problems`, unreadable files to
    `unreadable`."""
    shown = _shown(table, root)
    listed, found = _read_table(table, root, problems), _audio_files(folder)
    missing = 0
    for key, rows in listed.items():
        if key in found:
            continue
        if skip_missing:
            missing += len(rows)
            continue
        more = f" (and {len(rows) - 1} more row{'s' if len(rows) > 2 else ''})" if len(rows) > 1 else ""
        problems.append(f"{shown} line {rows[0][0]}{more}: {rows[0][1]!r} is not in {_shown(folder, root)}/")
    records = []
    for key, path in found.items():
        try:
            duration = _duration(path)
        except Exception as error:  # noqa: BLE001 - any reader's failure: the file is left out and named
            unreadable.append(f"{path} ({str(error).splitlines()[0] if str(error) else type(error).__name__})")
            continue
        rows = listed.get(key, [])
        filename = rows[0][1] if rows else key
        events = []
        for line, _, onset, offset, label in rows:
            if label is None:  # a row that lists the file without events
                continue
            where = f"{shown} line {line}"
            if offset - duration > OFFSET_TOLERANCE:
                problems.append(
                    f"{where}: offset {offset:g} s of {filename!r} is {offset - duration:.3f} s past the end of the "
                    f"file ({duration:.3f} s; at most {OFFSET_TOLERANCE} s is taken for rounding)"
                )
            events.append((onset, offset, label, where))
        records.append((path, filename, events, duration, name))
    return records, missing


def _repeated_names(split: str, records: list) -> list[str]:
    """A line for each file name found twice in a split (two DESED sets holding the same name)."""
    first, lines = {}, []
    for _, filename, _, _, name in records:
        if filename in first:
            lines.append(
                f"{split}: two files named {filename!r}, in {first[filename]} and {name}: a split's file names "
                "must be unique (its recordings are told apart by name)"
            )
        first.setdefault(filename, name)
    return lines


# ------------------------------------------------------------------------------------------------ layouts
def _our_sources(root: Path, problems: list) -> dict:
    """{split: [(set name, audio folder, table)]} of our layout: a split is its folder with its table."""
    sources = {}
    for split in SPLITS:
        folder, table = root / split, root / f"{split}.tsv"
        if not folder.is_dir() and not table.is_file():
            if split == "train":
                problems.append(f"no train split: {root}/train/ and {root}/train.tsv do not exist")
            continue
        if not folder.is_dir():
            problems.append(f"{_shown(table, root)} has no audio folder beside it: {folder}/ does not exist")
            continue
        if not table.is_file():
            problems.append(
                f"{_shown(folder, root)}/ has no table: {table} does not exist (its files' events, header {HEADER}; "
                "a file without events needs no row, but the table must be there)"
            )
            continue
        sources[split] = [(split, folder, table)]
    return sources


def _desed_sources(root: Path, sets, problems: list) -> dict:
    """{split: [(set name, audio folder, table)]} of DESED's layout: the sets of `sets`, or those of `DESED_SETS`
    that are present."""
    if sets is None:
        chosen = {
            split: [name for name in names if _set_folder(root, name) is not None or _set_table(root, name).is_file()]
            for split, names in DESED_SETS.items()
        }
    else:
        if not isinstance(sets, dict):
            raise UsageError(
                f"sets={sets!r}: give a dict {{split: [set, ...]}}, e.g. "
                '{"train": ["train/synthetic21_train/soundscapes"], "test": ["validation/validation"]}'
            )
        check_keys(sets, SPLITS, "sets", "the sound-events section of docs/datasets.md (train, validation, test)")
        chosen = {split: [names] if isinstance(names, str) else list(names) for split, names in sets.items()}
    sources = {}
    for split in SPLITS:
        entries = []
        for name in chosen.get(split) or ():
            name = name.strip("/")
            folder, table = _set_folder(root, name), _set_table(root, name)
            if folder is None:
                problems.append(f"DESED set {name!r} ({split}): {root}/audio/{name}/ does not exist")
            elif not table.is_file():
                problems.append(f"DESED set {name!r} ({split}): its table {table} does not exist")
            else:
                entries.append((name, folder, table))
        if entries:
            sources[split] = entries
    if not chosen.get("train"):
        problems.append(
            f"sets={sets!r} names no train set"
            if sets is not None
            else f"no train set: none of {list(DESED_SETS['train'])} is under {root}/audio/; name the training sets "
            'with sets={"train": [...], ...}'
        )
    return sources


def _set_folder(root: Path, name: str):
    """audio/<name>/, or its resampled copy audio/<name>_16k/; None when neither is a folder."""
    for candidate in (root / "audio" / name, root / "audio" / f"{name}{RESAMPLED_SUFFIX}"):
        if candidate.is_dir():
            return candidate
    return None


def _set_table(root: Path, name: str) -> Path:
    name = name.removesuffix(RESAMPLED_SUFFIX)
    return root / "metadata" / f"{DESED_TABLES.get(name, name)}.tsv"


def _describe_sources(entries, root: Path) -> str:
    return ", ".join(f"{_shown(folder, root)}/" for _, folder, _ in entries)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _by_table_line(problem: str) -> tuple:
    """Sort key of a problem line: those of no table row first, then by table and line number."""
    found = re.match(r"(.+?) line (\d+)\b", problem)
    return (0, "", 0) if found is None else (1, found.group(1), int(found.group(2)))


def _shown(path, root: Path) -> str:
    """`path` relative to `root` when below it (shorter lines), else as it is."""
    relative = os.path.relpath(path, root)
    return str(path) if relative.startswith("..") else relative


# ------------------------------------------------------------------------------------------------ files
def _normalised(name: str) -> str:
    """A table's or the folder's name of a file, as one key: '/' separators, no './' or doubled '/'."""
    return posixpath.normpath(name.replace(os.sep, "/"))


def _audio_files(folder: Path) -> dict:
    """{relative name: path} of every audio file below `folder` (by extension; hidden folders skipped), sorted by
    name."""
    found = {}
    for here, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.lower().endswith(AUDIO_EXTENSIONS) and not name.startswith("."):
                path = os.path.join(here, name)
                found[_normalised(os.path.relpath(path, folder))] = path
    return dict(sorted(found.items()))


def _duration(path: str) -> float:
    """Seconds of audio in `path`, from its header; raises when it cannot be read or holds no samples."""
    import soundfile as sf

    try:
        info = sf.info(path)
        seconds = info.frames / info.samplerate
    except Exception:  # noqa: BLE001 - a format libsndfile lacks (m4a, aac): torchcodec's stream metadata
        from torchcodec.decoders import AudioDecoder

        seconds = AudioDecoder(path).metadata.duration_seconds
        if seconds is None:
            raise ValueError("no duration in its header") from None
    if not seconds > 0:
        raise ValueError("no audio samples")
    return float(seconds)


# ------------------------------------------------------------------------------------------------ tables
def _read_table(table: Path, root: Path, problems: list) -> dict:
    """{normalised file name: [(line number, filename, onset, offset, label or None)]} of a DCASE table; each
    problem is appended to `problems` as one line naming the table and the line."""
    shown = _shown(table, root)
    try:
        text = table.read_text(encoding="utf-8-sig")  # a BOM some editors write is not part of the header
    except UnicodeDecodeError as error:
        problems.append(f"{shown} is not UTF-8 text (byte {error.start}: {error.reason})")
        return {}
    lines = [(number, line.rstrip("\r\n")) for number, line in enumerate(text.splitlines(), start=1)]
    lines = [(number, line) for number, line in lines if line.strip()]
    if not lines:
        problems.append(f"{shown} is empty: expected the header {HEADER}, then one row per event")
        return {}
    header = [field.strip() for field in lines[0][1].split("\t")]
    problem = _header_problem(header)
    if problem is not None:
        problems.append(f"{shown} line {lines[0][0]}: {problem}")
        return {}
    column = {name: header.index(name) for name in EVENT_COLUMNS}
    rows = {}
    for number, line in lines[1:]:
        fields = [field.strip() for field in line.split("\t")]
        where = f"{shown} line {number}"
        if len(fields) > len(header):
            problems.append(f"{where}: {len(fields)} tab-separated fields, the header has {len(header)}")
            continue
        fields += [""] * (len(header) - len(fields))
        filename, onset, offset, label = (fields[column[name]] for name in EVENT_COLUMNS)
        if not filename:
            problems.append(f"{where}: no filename")
            continue
        if not (onset or offset or label):  # the file is listed without events
            rows.setdefault(_normalised(filename), []).append((number, filename, None, None, None))
            continue
        event = _event(onset, offset, label, filename)
        if isinstance(event, str):
            problems.append(f"{where}: {event}")
            continue
        rows.setdefault(_normalised(filename), []).append((number, filename, *event))
    return rows


def _header_problem(header: list[str]):
    """Why `header` is not DCASE's strong-label header (None when it is)."""
    if set(EVENT_COLUMNS) <= set(header) and len(header) == len(set(header)) == len(EVENT_COLUMNS):
        return None
    expected = f"expected the header {HEADER}"
    if "event_labels" in header:
        return (
            f"columns {header} are weak labels (which classes occur in a clip, not when): they are not strong labels "
            f"and cannot train frame-level detection; leave this table out ({expected})"
        )
    if header == ["filename"]:
        return f"it lists files without labels (DESED's unlabelled set): leave it out ({expected})"
    if header[0].lower().endswith(AUDIO_EXTENSIONS):
        return f"no header line: the first line is a row ({'<TAB>'.join(header)}); {expected} first"
    if len(header) == 1 and len(header[0].split()) > 1:
        return f"{header[0]!r} has no tabs (fields separated by spaces?); {expected}"
    missing = [name for name in EVENT_COLUMNS if name not in header]
    unknown = [name for name in header if name not in EVENT_COLUMNS]
    said = [f"missing {missing}" if missing else "", f"unknown {unknown}" if unknown else ""]
    if not missing and not unknown:
        said = ["a column repeated"]
    return f"columns {header}: {', '.join(s for s in said if s)}; {expected}"


def _event(onset: str, offset: str, label: str, filename: str):
    """(onset, offset, label) of a row's fields, or why they are not an event."""
    if not (onset and offset and label):
        return (
            f"{filename!r} has onset {onset!r}, offset {offset!r}, event_label {label!r}: an event needs all three "
            "(a file without events: all three empty, or no row)"
        )
    times = []
    for name, text in (("onset", onset), ("offset", offset)):
        try:
            value = float(text)
        except ValueError:
            return f"{name} {text!r} of {filename!r} is not a number of seconds"
        if not math.isfinite(value) or value < 0:
            return f"{name} {text!r} of {filename!r}: times are seconds from the file's start, 0 or more"
        times.append(value)
    if times[0] > times[1]:
        return f"onset {onset} > offset {offset} of {filename!r} ({label})"
    return times[0], times[1], label


def _misspelt_labels(records: dict, label_rows: Counter) -> list[str]:
    """A line for each label used once whose spelling is close to a frequent label's: the same but for case, spaces,
    '_' and '-', or within `MAX_EDIT_DISTANCE` edits (fewer than half its length, so short names stay apart)."""
    where = {e[2]: e[3] for rows in records.values() for row in rows for e in row[2] if label_rows[e[2]] == 1}
    frequent = [label for label, count in label_rows.items() if count >= FREQUENT_LABEL]
    lines = []
    for label in sorted(where):
        close = [
            other
            for other in frequent
            if _folded(other) == _folded(label)
            or _edit_distance(other, label) <= min(MAX_EDIT_DISTANCE, (len(label) - 1) // 2)
        ]
        if close:
            best = min(close, key=lambda other: (_edit_distance(other, label), -label_rows[other]))
            lines.append(
                f"{where[label]}: label {label!r} occurs only once in all tables; did you mean {best!r} "
                f"({label_rows[best]} rows)?"
            )
    return lines


def _folded(label: str) -> str:
    return "".join(c for c in label.lower() if c not in " _-")


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]
