# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""How the dataset loaders read an official layout: file and column checks, CSV rows, class names by index, the
16 kHz audio features, and the DatasetDict (or its cross-validation folds) built from paths and metadata.

Every loader builds its datasets from paths and metadata only; the audio is read later, when a row is
accessed (datasets' `Audio` column, decoded by torchcodec) or by `aasp_hf.data.decoding.SafeAudioDecoder`
in training.
"""

import contextlib
import contextvars
import csv
import os
import re
from pathlib import Path

from datasets import Audio, Dataset, DatasetDict, Features

from ..decoding import SAMPLING_RATE
from ..splits import split_by_folds, to_streaming


def require_file(path, what: str, source: str) -> Path:
    """Return `path` if it is a file; otherwise a FileNotFoundError saying what it is and where it comes from."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path} does not exist. {source}")
    return path


def require_dir(path, what: str, source: str) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{what} not found: {path} is not a directory. {source}")
    return path


def default_audio_dir(root, audio_dir=None, subfolder: str = "audio") -> Path:
    """Where a loader reads the clips: `audio_dir` when given, else `root/subfolder` when that is a folder (the
    dataset's own layout), else `root` itself."""
    if audio_dir is not None:
        return Path(audio_dir)
    root = Path(root)
    return root / subfolder if (root / subfolder).is_dir() else root


def read_csv_rows(path: Path, required_columns, what: str) -> list:
    """Rows of a CSV file with a header, as dicts; a ValueError names the missing columns."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        header = reader.fieldnames or []
        missing = [c for c in required_columns if c not in header]
        if missing:
            raise ValueError(
                f"{path} ({what}) lacks the column(s) {missing}: its header is {header}, "
                f"expected at least {list(required_columns)}."
            )
        return list(reader)


# Set by `recording_missing_files`: where `check_audio_files` records missing files instead of raising.
_MISSING_FILES_RECORD = contextvars.ContextVar("missing_files_record", default=None)


@contextlib.contextmanager
def recording_missing_files():
    """Within this block `check_audio_files` does not raise: each failed check appends a dict (`listed_in`,
    `audio_dir`, `total`, `missing`: the paths, `message`: what it would have raised) to the yielded list, and the
    loader goes on with the rows of the missing files. `python -m aasp_hf.data.check` uses it to report them all."""
    record = []
    token = _MISSING_FILES_RECORD.set(record)
    try:
        yield record
    finally:
        _MISSING_FILES_RECORD.reset(token)


def check_audio_files(paths, listed_in, audio_dir) -> None:
    """Every listed audio file must exist (a stat per file; the audio itself is not read)."""
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        message = (
            f"{len(missing)} of {len(paths)} audio files listed in {listed_in} are missing under {audio_dir}, "
            f"e.g. {missing[:3]}. Check that `root` points at the dataset's top folder in its official layout."
        )
        record = _MISSING_FILES_RECORD.get()
        if record is None:
            raise FileNotFoundError(message)
        record.append(
            {
                "listed_in": str(listed_in),
                "audio_dir": str(audio_dir),
                "total": len(paths),
                "missing": missing,
                "message": message,
            }
        )


def is_index_column(name: str) -> bool:
    """Whether a CSV header names the unnamed index column that pandas' `DataFrame.to_csv()` writes first: `""`, or
    `Unnamed: 0` once pandas has read and written the file again. It is a row number, not a property of the clip."""
    return name.strip() == "" or re.fullmatch(r"Unnamed: \d+", name.strip()) is not None


def numbers_as_numbers(labels) -> list:
    """The distinct labels in the order `sorted()` gives once pandas has parsed the column: by value when every label
    reads as a number (Surge's MIDI pitches: 21, 60, 100 -- not "100", "21", "60"), else as strings."""
    labels = set(labels)
    try:
        return sorted(labels, key=float)
    except ValueError:
        return sorted(labels)


def check_labels(found, known, where: str) -> None:
    """A ValueError naming the labels of `found` that are not in `known`."""
    unknown = sorted(set(found) - set(known))
    if unknown:
        raise ValueError(
            f"Unknown label(s) {unknown[:10]} in {where}; the known labels are {sorted(known)[:60]}"
            f"{' ...' if len(known) > 60 else ''}."
        )


def names_from_index(pairs, where: str) -> list:
    """Class names ordered by their integer index, from (index, name) pairs; the indices must be 0..C-1."""
    by_index = {}
    for index, name in pairs:
        index = int(index)
        if by_index.setdefault(index, name) != name:
            raise ValueError(f"{where}: class index {index} is given two names, {by_index[index]!r} and {name!r}.")
    if sorted(by_index) != list(range(len(by_index))):
        raise ValueError(f"{where}: class indices must be 0..{len(by_index) - 1}, got {sorted(by_index)[:20]}.")
    return [by_index[i] for i in range(len(by_index))]


def audio_features(**columns) -> Features:
    """Features with the 16 kHz `audio` column first, then `columns` (name -> feature type)."""
    return Features({"audio": Audio(sampling_rate=SAMPLING_RATE), **columns})


def build_dataset_dict(splits: dict, features: Features, streaming: bool = False, num_shards=None):
    """`{split: {column: list}}` -> DatasetDict (or IterableDatasetDict when `streaming`). No audio is read."""
    dataset_dict = DatasetDict(
        {name: Dataset.from_dict(columns, features=features) for name, columns in splits.items()}
    )
    return to_streaming(dataset_dict, num_shards) if streaming else dataset_dict


def build_fold_dataset_dict(
    splits: dict, features: Features, test_fold=None, valid_fold=None, streaming=False, num_shards=None
):
    """`build_dataset_dict` for a dataset with official folds (ESC-50, UrbanSound8K): every clip in "train", or with
    `test_fold` (and optionally `valid_fold`) the cross-validation split of `split_by_folds`."""
    dataset = build_dataset_dict(splits, features)
    if test_fold is not None:
        dataset = split_by_folds(dataset, test_fold, valid_fold)
    elif valid_fold is not None:
        raise ValueError("valid_fold needs test_fold.")
    if streaming:
        dataset = to_streaming(dataset, num_shards)
    return dataset
