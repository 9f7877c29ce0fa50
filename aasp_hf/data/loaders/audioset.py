# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""AudioSet (AS-20K / AS-2M) from the official segment CSVs, class_labels_indices.csv and an audio folder.

The audio folder is listed once (a directory walk, no audio read) and each segment is matched to a file by
its YouTube id under any of the common naming schemes:
``<YTID>.wav``, ``<YTID>_<start>_<end>.wav`` (e.g. ``--PJHxphWEs_30.000_40.000.wav`` or ``_30_40``), and
``Y<YTID>.wav`` (as in some mirrors), each also as ``.flac`` (or ``.mp3``/``.ogg``/``.m4a``), in any sub-folder.
Segments without a file are dropped, logged with their count, and listed in the returned dict's
``missing_clips`` attribute (split -> list of YTIDs).
"""

import csv
import logging
import os
import re
from pathlib import Path

from datasets import ClassLabel, Sequence, Value

from .layout import audio_features, build_dataset_dict, check_labels, require_dir, require_file


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
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".m4a")
_SEGMENT_SUFFIX = re.compile(r"^(?P<ytid>.+)_(?P<start>\d+(?:\.\d+)?)_(?P<end>\d+(?:\.\d+)?)$")


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
    """A segment CSV -> [(ytid, start_seconds, end_seconds, [mid, ...])], skipping the '#' header lines."""
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


def _ytid_keys(stem: str):
    """File stem -> the YTIDs it may name: the stem without a _<start>_<end> suffix, and without a leading 'Y'."""
    match = _SEGMENT_SUFFIX.match(stem)
    base = match.group("ytid") if match else stem
    keys = [base]
    if base.startswith("Y") and len(base) == 12:  # Y<YTID>, YTIDs have 11 characters
        keys.append(base[1:])
    return keys


def index_audio_folder(audio_dir) -> dict:
    """Walk `audio_dir` once: YTID -> path of its audio file (no file is opened)."""
    index = {}
    for folder, _, files in os.walk(audio_dir):
        for name in files:
            stem, ext = os.path.splitext(name)
            if ext.lower() not in AUDIO_EXTENSIONS:
                continue
            for key in _ytid_keys(stem):
                index.setdefault(key, os.path.join(folder, name))
    return index


def load_audioset(
    root,
    *,
    variant: str = "as20k",
    audio_dir=None,
    metadata_dir=None,
    streaming=False,
    num_shards=None,
):
    """AudioSet, 527 classes, multi-label: {"train", "test"}.

    Args:
        root: folder holding the metadata CSVs and (by default) the audio.
        variant: "as20k" (train = balanced_train, ~20K clips) or "as2m" (train = balanced + unbalanced, ~2M).
        audio_dir: where the clips are (searched recursively); defaults to `root/audio` if it exists, else `root`.
        metadata_dir: where the CSVs are; defaults to `root`.

    Columns: audio, labels (Sequence of ClassLabel with the 527 display names), ytid, start_seconds, end_seconds.
    The returned DatasetDict has a `missing_clips` attribute: {split: [YTID, ...]} of segments without audio.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}: use 'as20k' (balanced train) or 'as2m' (balanced + unbalanced).")
    root = Path(root)
    metadata_dir = Path(metadata_dir) if metadata_dir is not None else root
    if audio_dir is None:
        audio_dir = root / "audio" if (root / "audio").is_dir() else root
    audio_dir = require_dir(audio_dir, "AudioSet audio folder", "Pass audio_dir= the folder holding the clips.")
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
        missing = []
        for subset in subsets:
            path = require_file(
                metadata_dir / SEGMENT_FILES[subset], f"AudioSet segment list {SEGMENT_FILES[subset]}", AUDIOSET_SOURCE
            )
            segments = read_segments(path)
            check_labels({m for s in segments for m in s[3]}, mid_index, f"{path} (not in class_labels_indices.csv)")
            for ytid, start, end, labels in segments:
                file = files.get(ytid)
                if file is None:
                    missing.append(ytid)
                    continue
                columns["audio"].append(file)
                columns["labels"].append([mid_index[m] for m in labels])
                columns["ytid"].append(ytid)
                columns["start_seconds"].append(start)
                columns["end_seconds"].append(end)
        if missing:
            total = len(missing) + len(columns["ytid"])
            logger.warning(
                f"AudioSet {variant} {split}: {len(missing)} of {total} segments have no audio file under "
                f"{audio_dir} and are left out (e.g. {missing[:3]}); see the `missing_clips` attribute."
            )
        splits[split], missing_clips[split] = columns, missing
    dataset = build_dataset_dict(splits, features, streaming, num_shards)
    dataset.missing_clips = missing_clips
    return dataset
