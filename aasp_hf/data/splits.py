# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Splits and shards of loaded datasets, shared by the loaders, the downstream protocol and training.

- `split_by_folds`: the cross-validation split of a dataset with a fold column (ESC-50, UrbanSound8K), the folds as
  they are (the downstream protocol's part of one test fold, with its validation rule, is `protocol.kfold_part`).
- `with_test_split`: the splits with a "test" split, a seeded `test_fraction` of train held out when a dataset has
  none (the test rows a downstream run reports on are `protocol.reported_test_split`).
- `source_groups`, `hold_out_groups`: each clip's source (speaker, site, device; `--group_by`), and a seeded share of
  the clips held out as whole sources, so that validation and test hold voices or places training never heard.
- `to_streaming`, `split_for_node`: a DatasetDict as an IterableDatasetDict of shards, and one rank's part of it.
"""

import collections
import logging
import re
from pathlib import Path

import numpy as np
from datasets import ClassLabel, DatasetDict, IterableDatasetDict
from datasets.distributed import split_dataset_by_node

from ..utils.errors import UsageError

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


def split_by_folds(dataset, test_fold: int, valid_fold=None, fold_column: str = "fold") -> DatasetDict:
    """Cross-validation split of a dataset with a fold column: {"train", ["validation",] "test"}.

    `dataset` is a Dataset or a DatasetDict holding one split (as `load("esc50")` returns).
    """
    if isinstance(dataset, DatasetDict):
        if len(dataset) != 1:
            raise ValueError(f"split_by_folds needs one split with a {fold_column!r} column, got {list(dataset)}.")
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


def source_groups(dataset, group_by: str, audio_column: str = "audio") -> list[str]:
    """Each row's source, the unit that validation and test hold out whole: the value of the column `group_by` when
    the dataset has one (a speaker or site column of its metadata), else the first group of the regular expression
    `group_by` searched in the file's name (the whole match when it has no group): `^(\\d+)_` takes "23" from
    "23_yes_0.wav". A name it does not match, a name it matches without its first group (an optional group, or one in
    an alternative that did not match: `_(george)_|_[a-z]+_` on "1_bob_0.wav"), or a pattern that is not a regular
    expression, is a UsageError."""
    if group_by in dataset.column_names:
        return [str(value) for value in dataset[group_by]]  # one column: no audio is decoded
    try:
        pattern = re.compile(group_by)
    except re.error as error:
        raise UsageError(
            f"--group_by {group_by!r} is neither a column of the data ({', '.join(dataset.column_names)}) "
            f"nor a regular expression ({error})"
        ) from None
    feature = dataset.features.get(audio_column)
    if getattr(feature, "decode", False):  # the files' names, not their audio
        dataset = dataset.cast_column(audio_column, type(feature)(sampling_rate=feature.sampling_rate, decode=False))
    groups = []
    for cell in dataset[audio_column]:
        name = Path(cell["path"] if isinstance(cell, dict) else str(cell)).name
        found = pattern.search(name)
        if found is None:
            raise UsageError(
                f"--group_by {group_by!r} does not match the file name {name!r}: give a regular "
                "expression whose first group is the source (e.g. '^(\\d+)_' for 23_yes_0.wav) or a "
                f"column of the data ({', '.join(dataset.column_names)})"
            )
        source = found.group(1) if pattern.groups else found.group(0)
        if source is None:
            raise UsageError(
                f"--group_by {group_by!r} matches the file name {name!r} ({found.group(0)!r}) but its first group "
                "does not take part in that match, so the file has no source: make the first group take part in "
                "every match (e.g. '_(george|[a-z]+)_' rather than '_(george)_|_[a-z]+_')"
            )
        groups.append(source)
    return groups


def hold_out_groups(groups: list[str], fraction: float, seed: int, what: str) -> np.ndarray:
    """A boolean mask of the rows held out: whole groups, drawn in a seeded order (`numpy.random.default_rng(seed)`)
    until they hold at least `fraction` of the rows; at least one group is held out and one kept. `what` names the
    held-out split in the error when there are fewer than two groups."""
    names = sorted(set(groups))
    if len(names) < 2:
        raise UsageError(
            f"--group_by found {len(names)} source ({', '.join(names)}) where the {what} must hold out "
            "whole sources: it needs two or more (check the pattern against the file names)"
        )
    counts = collections.Counter(groups)
    held, total = set(), 0
    for i in np.random.default_rng(seed).permutation(len(names)):
        if total >= fraction * len(groups) or len(held) == len(names) - 1:
            break
        held.add(names[i])
        total += counts[names[i]]
    return np.array([group in held for group in groups])


def split_by_groups(dataset, groups: list[str], fraction: float, seed: int, what: str, label_column: str = "label"):
    """(kept, held out) of `dataset`, its `groups` split by `hold_out_groups`; both keep the dataset's order. A
    warning line when the sources look like the classes themselves (`classes_held_out_whole`)."""
    held = hold_out_groups(groups, fraction, seed, what)
    if label_column in dataset.column_names:
        labels = list(dataset[label_column])  # one column: no audio is decoded
        if isinstance(dataset.features.get(label_column), ClassLabel):
            labels = dataset.features[label_column].int2str(labels)
        message = classes_held_out_whole(groups, labels, held, what)
        if message:
            logger.warning(message)
    return dataset.select(np.flatnonzero(~held)), dataset.select(np.flatnonzero(held))


def classes_held_out_whole(groups: list[str], labels: list, held: np.ndarray, what: str) -> str | None:
    """One line when every source held out holds one class and some of those classes are in no kept row: the
    pattern took the class rather than the source (`^(\\d)_` on "3_jackson_0.wav" of spoken digits), so the held-out
    rows are classes the model never trains on and score 0. None otherwise, and for labels that are not one value
    per row (multi-label lists)."""
    if not labels or not all(isinstance(label, (int, str, np.integer)) for label in labels):
        return None
    classes = collections.defaultdict(set)  # source -> its classes
    for group, label in zip(groups, labels):
        classes[group].add(label)
    held_sources = sorted({group for group, is_held in zip(groups, held) if is_held})
    kept_classes = {label for label, is_held in zip(labels, held) if not is_held}
    unseen = sorted({label for source in held_sources for label in classes[source]} - kept_classes, key=str)
    if not unseen or any(len(classes[source]) > 1 for source in held_sources):
        return None
    unseen_classes = "that class" if len(unseen) == 1 else f"{len(unseen)} of those classes"
    return (
        f"--group_by: every source held out as {what} ({len(held_sources)}: {', '.join(held_sources[:5])}"
        f"{', ...' if len(held_sources) > 5 else ''}) holds one class, and no training clip has {unseen_classes} "
        f"({', '.join(map(str, unseen[:5]))}{', ...' if len(unseen) > 5 else ''}), so the {what} scores classes the "
        f"model never learns: the pattern seems to take the class, not the source (a speaker, a site)."
    )


def with_test_split(
    splits: dict, test_fraction: float, seed: int = 0, label_column: str = "label", group_by: str | None = None
) -> dict:
    """`splits` with a "test" split: the dataset's own, or else `test_fraction` of "train" held out.

    The rule for a dataset without a test split (an audiofolder of class sub-folders without train/test folders,
    a Hub dataset with only "train"): a seeded draw (`seed`) of `test_fraction` of the train clips, stratified by
    `label_column` when it is a `ClassLabel` and every class can be represented (else a plain random draw). With
    `group_by`, whole sources are held out instead (`split_by_groups`).
    """
    splits = dict(splits)
    if "test" in splits:
        return splits
    if "train" not in splits:
        raise ValueError(
            f"The dataset has the splits {sorted(splits)}: it needs a 'train' split (and optionally "
            f"'validation' and 'test'), e.g. an audiofolder with train/ and test/ sub-folders."
        )
    if not 0 < test_fraction < 1:
        raise ValueError(
            f"test_fraction={test_fraction}: the dataset has no test split, so a fraction in (0, 1) of "
            f"its train split is held out as test."
        )
    from datasets import ClassLabel

    train = splits["train"]
    if group_by is not None:
        splits["train"], splits["test"] = split_by_groups(
            train, source_groups(train, group_by), test_fraction, seed, "test", label_column
        )
        logger.info(
            f"No test split: {len(splits['test'])} of {len(train)} train clips, whole sources of --group_by "
            f"{group_by!r} (seed {seed}), are held out as test."
        )
        return splits
    feature = (train.features or {}).get(label_column)
    held = None
    if isinstance(feature, ClassLabel):
        try:
            held = train.train_test_split(test_size=test_fraction, seed=seed, stratify_by_column=label_column)
        except ValueError:  # too few clips in a class to stratify
            held = None
    if held is None:
        held = train.train_test_split(test_size=test_fraction, seed=seed)
    logger.info(
        f"No test split: {len(held['test'])} of {len(train)} train clips ({test_fraction:.0%}, seed {seed}) "
        f"are held out as test."
    )
    splits["train"], splits["test"] = held["train"], held["test"]
    return splits
