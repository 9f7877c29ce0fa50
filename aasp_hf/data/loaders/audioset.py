# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""AudioSet (AS-20K / AS-2M) from the official segment CSVs, class_labels_indices.csv and an audio folder.

The audio folder is listed once (one directory walk, no audio read) and each segment is matched to a file by a dict
lookup on its YouTube id (11 characters), under each naming the field's pipelines use, where every time in the name
agrees with the segment CSV's:

==================================  =====================================================================
``<YTID>.wav``                      plain id
``Y<YTID>.wav``                     PANNs-style mirrors
``<YTID>_<start>_<end>.wav``        ``--PJHxphWEs_30.000_40.000.wav``, ``_30.0_40.0``, ``_30_40``
``<YTID>_<start>.wav``              M2D's file list (``_30.000``), public downloaders (``_30``)
``Y<YTID>_<start>_<end>.wav``       the two above with the ``Y`` prefix
``Y<YTID>_<start>.wav``
==================================  =====================================================================

each also ``.flac``, ``.mp3``, ``.ogg`` or ``.m4a``, in any sub-folder. A time agrees when it equals the CSV's to
1 ms; a time written without a decimal point (``_30``) also when it is the CSV's start or end truncated or rounded
to whole seconds. A file whose times disagree (``<YTID>_40.000.wav`` for the segment at 30 s) is not a match.

A real copy always misses clips (videos taken down): segments without a file are left out, counted in the log per
split and listed in the returned dict's ``missing_clips`` attribute (split -> list of YTIDs). A split with no
match, or with matches for under ``min_coverage`` (half) of its segments, is an error that shows what the files found
look like: a naming this loader does not read is far more likely than half of AudioSet gone.
"""

import csv
import logging
import math
import os
import sys
from pathlib import Path

from datasets import ClassLabel, Sequence, Value

from ..audiofolder import AUDIO_EXTENSIONS
from .layout import audio_features, build_dataset_dict, check_labels, default_audio_dir, require_dir, require_file


logger = logging.getLogger(__name__)

AUDIOSET_SOURCE = (
    "Download it from https://research.google.com/audioset/download.html (class_labels_indices.csv and the segment "
    "CSVs balanced_train_segments.csv, unbalanced_train_segments.csv, eval_segments.csv)."
)
SEGMENT_FILES = {
    "balanced_train": "balanced_train_segments.csv",
    "unbalanced_train": "unbalanced_train_segments.csv",
    "eval": "eval_segments.csv",
}
VARIANTS = {"as20k": ("balanced_train",), "as2m": ("balanced_train", "unbalanced_train")}
YTID_LENGTH = 11


def read_class_labels(path) -> tuple:
    """class_labels_indices.csv (index,mid,display_name) -> (mids, display names), both ordered by index."""
    path = require_file(path, "AudioSet class_labels_indices.csv", AUDIOSET_SOURCE)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or not {"index", "mid", "display_name"} <= set(rows[0]):
        raise ValueError(f"{path} must have the header index,mid,display_name (AudioSet's class_labels_indices.csv).")
    rows.sort(key=lambda r: int(r["index"]))
    if [int(r["index"]) for r in rows] != list(range(len(rows))):
        raise ValueError(f"{path}: the index column must run 0..{len(rows) - 1}.")
    return [r["mid"] for r in rows], [r["display_name"] for r in rows]


def read_segments(path) -> list:
    """A segment CSV -> [(ytid, start_seconds, end_seconds, [mid, ...])], skipping the '#' header lines.

    Rows are ``YTID, start_seconds, end_seconds, "mid,mid,..."``; spaces after either kind of comma are ignored."""
    segments = []
    with open(path, newline="", encoding="utf-8") as f:
        for line_number, row in enumerate(csv.reader(f, skipinitialspace=True), start=1):
            if not row or row[0].startswith("#"):
                continue
            if len(row) != 4:
                raise ValueError(
                    f"{path}, line {line_number}: expected 'YTID, start_seconds, end_seconds, \"mid,mid,...\"', "
                    f"got {row}."
                )
            ytid, start, end, labels = row
            segments.append((ytid, float(start), float(end), [m.strip() for m in labels.split(",") if m.strip()]))
    return segments


def _is_seconds(text: str) -> bool:
    head, _, tail = text.partition(".")
    return head.isdigit() and (tail == "" or tail.isdigit())


def parse_clip_name(stem: str) -> list:
    """A file stem -> the (ytid, start, end) readings it allows under the naming schemes of the module docstring;
    start/end are the texts of the name (None where the name has no time).

    YTIDs may hold ``_``, ``-`` and digits, so a stem can be read several ways; a reading whose id has the 11
    characters of a YTID (after dropping a ``Y`` prefix from 12) wins, and the others are kept only when none does
    (ids of other lengths, as in hand-made test layouts)."""
    if len(stem) == YTID_LENGTH:  # fast path (AS-2M: 2 M names): no other reading has an 11-character id
        return [(stem, None, None)]
    readings = [(stem, None, None)]
    parts = stem.rsplit("_", 2)
    if len(parts) == 3 and _is_seconds(parts[1]) and _is_seconds(parts[2]):
        readings.append((parts[0], parts[1], parts[2]))
    parts = stem.rsplit("_", 1)
    if len(parts) == 2 and _is_seconds(parts[1]):
        readings.append((parts[0], parts[1], None))
    readings = [
        (ytid[1:] if len(ytid) == YTID_LENGTH + 1 and ytid.startswith("Y") else ytid, start, end)
        for ytid, start, end in readings
    ]
    exact = [r for r in readings if len(r[0]) == YTID_LENGTH]
    return exact or readings


def index_audio_folder(audio_dir) -> dict:
    """Walk `audio_dir` once (sorted, so the result does not depend on the file system's order):
    YTID -> [(path, start text or None, end text or None), ...] of its audio files. No file is opened."""
    index = {}
    for folder, subfolders, files in os.walk(audio_dir):
        subfolders.sort()
        for name in sorted(files):
            stem, ext = os.path.splitext(name)
            if ext.lower() not in AUDIO_EXTENSIONS:
                continue
            path = os.path.join(folder, name)
            for ytid, start, end in parse_clip_name(stem):  # times interned: AS-2M repeats a few hundred texts
                entry = (path, start and sys.intern(start), end and sys.intern(end))
                index.setdefault(ytid, []).append(entry)
    return index


def _agrees(text, seconds: float) -> bool:
    """Whether a time written in a file name (None: not written) agrees with the CSV's `seconds`."""
    if text is None:
        return True
    value = float(text)
    if abs(value - seconds) < 1e-3:
        return True
    return "." not in text and value in (math.floor(seconds), round(seconds))


def find_clip(index: dict, ytid: str, start: float, end: float):
    """The first file of `index` for this segment whose times agree with the CSV's, or None."""
    for path, file_start, file_end in index.get(ytid, ()):
        if _agrees(file_start, start) and _agrees(file_end, end):
            return path
    return None


def _sample_names(audio_dir, limit: int = 5) -> list:
    """A few file names under `audio_dir` (any extension), to show what the files found look like."""
    names = []
    for folder, subfolders, files in os.walk(audio_dir):
        subfolders.sort()
        names += [os.path.relpath(os.path.join(folder, f), audio_dir) for f in sorted(files)[: limit - len(names)]]
        if len(names) >= limit:
            break
    return names


def _no_match_error(variant, split, matched, total, segment, csv_names, audio_dir, num_files, min_coverage):
    ytid, start, end, _ = segment
    expected = (
        f"{ytid}.wav, Y{ytid}.wav, {ytid}_{start:.3f}_{end:.3f}.wav, {ytid}_{start:.3f}.wav or {ytid}_{int(start)}.wav"
    )
    found = _sample_names(audio_dir)
    return ValueError(
        f"AudioSet {variant} {split}: {matched:,} of {total:,} segments of {' + '.join(csv_names)} have an audio "
        f"file under {audio_dir} (under {min_coverage:.0%}). Found {num_files:,} audio file(s) named like {found}; "
        f"expected, for the segment {ytid} ({start:.3f}-{end:.3f} s), a file such as {expected} (also .flac/.mp3/"
        f".ogg/.m4a, in any sub-folder; see docs/datasets.md). Rename the files, or point audio_dir= at them."
    )


def load_audioset(
    root,
    *,
    variant: str = "as20k",
    audio_dir=None,
    metadata_dir=None,
    min_coverage: float = 0.5,
    streaming=False,
    num_shards=None,
):
    """AudioSet, 527 classes, multi-label: {"train", "test"}.

    Args:
        root: folder holding the metadata CSVs and (by default) the audio.
        variant: "as20k" (train = balanced_train, ~20K clips) or "as2m" (train = balanced + unbalanced, ~2M).
        audio_dir: where the clips are (searched recursively); defaults to `root/audio` if it exists, else `root`.
        metadata_dir: where the CSVs are; defaults to `root`.
        min_coverage: the share of a split's segments that must have a file (default: half), else a ValueError
            that shows the file names found; 0 accepts any split that is not empty.

    Columns: audio, labels (Sequence of ClassLabel with the 527 display names), ytid, start_seconds, end_seconds.
    The returned DatasetDict has a `missing_clips` attribute: {split: [YTID, ...]} of segments without audio.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}: use 'as20k' (balanced train) or 'as2m' (balanced + unbalanced).")
    root = Path(root)
    metadata_dir = Path(metadata_dir) if metadata_dir is not None else root
    audio_dir = require_dir(
        default_audio_dir(root, audio_dir), "AudioSet audio folder", "Pass audio_dir= the folder holding the clips."
    )
    mids, display_names = read_class_labels(metadata_dir / "class_labels_indices.csv")
    mid_index = {mid: i for i, mid in enumerate(mids)}
    files = index_audio_folder(audio_dir)

    features = audio_features(
        labels=Sequence(ClassLabel(names=display_names)),
        ytid=Value("string"),
        start_seconds=Value("float32"),
        end_seconds=Value("float32"),
    )
    splits, missing_clips = {}, {}
    for split, subsets in (("train", VARIANTS[variant]), ("test", ("eval",))):
        columns = {"audio": [], "labels": [], "ytid": [], "start_seconds": [], "end_seconds": []}
        missing, first_segment = [], None
        for subset in subsets:
            path = require_file(
                metadata_dir / SEGMENT_FILES[subset], f"AudioSet segment list {SEGMENT_FILES[subset]}", AUDIOSET_SOURCE
            )
            segments = read_segments(path)
            check_labels({m for s in segments for m in s[3]}, mid_index, f"{path} (not in class_labels_indices.csv)")
            first_segment = first_segment or (segments[0] if segments else None)
            for ytid, start, end, labels in segments:
                file = find_clip(files, ytid, start, end)
                if file is None:
                    missing.append(ytid)
                    continue
                columns["audio"].append(file)
                columns["labels"].append([mid_index[m] for m in labels])
                columns["ytid"].append(ytid)
                columns["start_seconds"].append(start)
                columns["end_seconds"].append(end)
        matched = len(columns["ytid"])
        total = matched + len(missing)
        csv_names = [SEGMENT_FILES[s] for s in subsets]
        if total == 0:
            raise ValueError(
                f"AudioSet {variant} {split}: {' + '.join(csv_names)} list no segments; use the "
                f"official CSVs (https://research.google.com/audioset/download.html)."
            )
        if matched == 0 or matched < min_coverage * total:
            num_files = len({path for entries in files.values() for path, _, _ in entries})
            raise _no_match_error(
                variant, split, matched, total, first_segment, csv_names, audio_dir, num_files, min_coverage
            )
        if missing:
            logger.warning(
                f"AudioSet {variant} {split}: {len(missing):,} of {total:,} segments missing (no audio file "
                f"under {audio_dir}, e.g. {missing[:3]}) and left out; see the `missing_clips` attribute."
            )
        else:
            logger.info(f"AudioSet {variant} {split}: 0 of {total:,} segments missing.")
        splits[split], missing_clips[split] = columns, missing
    dataset = build_dataset_dict(splits, features, streaming, num_shards)
    dataset.missing_clips = missing_clips
    return dataset
