# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Shared pieces of the dataset loaders: file checks, CSV reading, DatasetDict building, streaming.

Every loader builds its datasets from paths and metadata only; the audio is read later, when a row is
accessed (datasets' `Audio` column, decoded by torchcodec) or by `aasp_hf.data.decoding.SafeAudioDecoder`
in training.
"""

import csv
import logging
import os
from pathlib import Path

from datasets import Audio, Dataset, DatasetDict, Features, IterableDatasetDict
from datasets.distributed import split_dataset_by_node


logger = logging.getLogger(__name__)

SAMPLING_RATE = 16000

# EVAR clip lengths in seconds (`unit_sec` of `_defs` in EVAR's evar/ds_tasks.py; the paper's linear evaluation follows
# EVAR, Sec. Training Setup): fine-tuning crops/pads each clip to this length.
EVAR_CLIP_SECONDS = {
    "audioset": 10.0,
    "esc50": 5.0,
    "us8k": 4.0,
    "scv2": 1.0,
    "nsynth": 4.0,
    "cremad": 2.5,
    "voxceleb1": 8.2,
    "voxforge": 5.8,
    "gtzan": 30.0,
    "surge": 4.0,
}


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


def check_audio_files(paths, listed_in, audio_dir) -> None:
    """Every listed audio file must exist (a stat per file; the audio itself is not read)."""
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(
            f"{len(missing)} of {len(paths)} audio files listed in {listed_in} are missing under {audio_dir}, "
            f"e.g. {missing[:3]}. Check that `root` points at the dataset's top folder in its official layout."
        )


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


def to_streaming(dataset_dict, num_shards=None):
    """DatasetDict -> IterableDatasetDict of `to_iterable_dataset(num_shards)` per split.

    `num_shards` defaults to min(64, len(split)): with a number of shards divisible by the world size,
    `split_dataset_by_node` gives each rank whole shards; otherwise each rank keeps every world_size-th example.
    """
    return IterableDatasetDict(
        {
            name: ds.to_iterable_dataset(num_shards=max(1, min(num_shards or 64, len(ds))))
            for name, ds in dataset_dict.items()
        }
    )


def split_for_node(dataset, rank: int, world_size: int):
    """`datasets.distributed.split_dataset_by_node` on one (Iterable)Dataset or on every split of a dict."""
    if isinstance(dataset, (DatasetDict, IterableDatasetDict)):
        return type(dataset)(
            {k: split_dataset_by_node(v, rank=rank, world_size=world_size) for k, v in dataset.items()}
        )
    return split_dataset_by_node(dataset, rank=rank, world_size=world_size)


def fold_split(dataset, test_fold: int, valid_fold=None, fold_column: str = "fold") -> DatasetDict:
    """Cross-validation split of a dataset with a fold column: {"train", ["validation",] "test"}.

    `dataset` is a Dataset or a DatasetDict holding one split (as `load("esc50")` returns).
    """
    if isinstance(dataset, DatasetDict):
        if len(dataset) != 1:
            raise ValueError(f"fold_split needs one split with a {fold_column!r} column, got {list(dataset)}.")
        dataset = next(iter(dataset.values()))
    folds = dataset[fold_column]  # one column only: no audio is decoded
    available = sorted(set(folds))
    for name, fold in (("test_fold", test_fold), ("valid_fold", valid_fold)):
        if fold is not None and fold not in available:
            raise ValueError(f"{name}={fold} is not one of the dataset's folds {available}.")
    if valid_fold is not None and valid_fold == test_fold:
        raise ValueError(f"valid_fold and test_fold must differ, both are {test_fold}.")
    held_out = {test_fold, valid_fold}
    splits = {"train": [i for i, f in enumerate(folds) if f not in held_out]}
    if valid_fold is not None:
        splits["validation"] = [i for i, f in enumerate(folds) if f == valid_fold]
    splits["test"] = [i for i, f in enumerate(folds) if f == test_fold]
    return DatasetDict({name: dataset.select(indices) for name, indices in splits.items()})


def build_fold_dataset_dict(splits: dict, features: Features, test_fold=None, valid_fold=None, streaming=False,
                             num_shards=None):
    """`build_dataset_dict` for a dataset with official folds (ESC-50, UrbanSound8K): every clip in "train", or with
    `test_fold` (and optionally `valid_fold`) the cross-validation split of `fold_split`."""
    dataset = build_dataset_dict(splits, features)
    if test_fold is not None:
        dataset = fold_split(dataset, test_fold, valid_fold)
    elif valid_fold is not None:
        raise ValueError("valid_fold needs test_fold.")
    if streaming:
        dataset = to_streaming(dataset, num_shards)
    return dataset


def hold_out_test(splits: dict, test_fraction: float, seed: int = 0, label_column: str = "label") -> dict:
    """`splits` with a "test" split: the dataset's own, or else `test_fraction` of "train" held out.

    The rule for a dataset without a test split (an audiofolder of class sub-folders without train/test folders,
    a Hub dataset with only "train"): a seeded draw (`seed`) of `test_fraction` of the train clips, stratified by
    `label_column` when it is a `ClassLabel` and every class can be represented (else a plain random draw).
    """
    splits = dict(splits)
    if "test" in splits:
        return splits
    if "train" not in splits:
        raise ValueError(f"The dataset has the splits {sorted(splits)}: it needs a 'train' split (and optionally "
                         f"'validation' and 'test'), e.g. an audiofolder with train/ and test/ sub-folders.")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction={test_fraction}: the dataset has no test split, so a fraction in (0, 1) of "
                         f"its train split is held out as test.")
    from datasets import ClassLabel

    train = splits["train"]
    feature = (train.features or {}).get(label_column)
    held = None
    if isinstance(feature, ClassLabel):
        try:
            held = train.train_test_split(test_size=test_fraction, seed=seed, stratify_by_column=label_column)
        except ValueError:  # too few clips in a class to stratify
            held = None
    if held is None:
        held = train.train_test_split(test_size=test_fraction, seed=seed)
    logger.info(f"No test split: {len(held['test'])} of {len(train)} train clips ({test_fraction:.0%}, seed {seed}) "
                f"are held out as test.")
    splits["train"], splits["test"] = held["train"], held["test"]
    return splits
