# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Splits and shards of loaded datasets, shared by the loaders, the downstream protocol and training.

- `fold_split`: the cross-validation split of a dataset with a fold column (ESC-50, UrbanSound8K).
- `hold_out_test`: a seeded `test_fraction` of train held out when a dataset has no test split.
- `to_streaming`, `split_for_node`: a DatasetDict as an IterableDatasetDict of shards, and one rank's part of it.
"""

import logging

from datasets import DatasetDict, IterableDatasetDict
from datasets.distributed import split_dataset_by_node


logger = logging.getLogger(__name__)


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
