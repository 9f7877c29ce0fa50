# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Datasets that are not in an official layout: a Hub dataset id, a local dataset path, or an audiofolder."""

import os

from datasets import Audio, DatasetDict, IterableDatasetDict, load_dataset

from ..decoding import SAMPLING_RATE


def _audio_columns(features) -> list:
    return [name for name, feature in (features or {}).items() if isinstance(feature, Audio)]


def load_audio_dataset(path_or_id, *, audio_column=None, streaming=False, **load_kwargs):
    """`datasets.load_dataset` for a Hub id, a local dataset folder or an `audiofolder` directory, at 16 kHz.

    A directory without a loading script or data files of a known format is read as an `audiofolder`
    (class sub-folders become `label`; a `metadata.csv` adds columns, see the datasets docs). The audio column
    (`audio_column`, or the only `Audio` column) is cast to `Audio(sampling_rate=16000)`.
    """
    if os.path.isdir(path_or_id) and not load_kwargs.get("data_files"):
        dataset = load_dataset("audiofolder", data_dir=path_or_id, streaming=streaming, **load_kwargs)
    else:
        dataset = load_dataset(path_or_id, streaming=streaming, **load_kwargs)
    splits = dataset if isinstance(dataset, (DatasetDict, IterableDatasetDict)) else {"train": dataset}
    for name, split in list(splits.items()):
        columns = [audio_column] if audio_column else _audio_columns(split.features)
        if len(columns) != 1:
            raise ValueError(
                f"{path_or_id} split {name!r}: found audio column(s) {columns} ({list(split.features or {})}); "
                f"pass audio_column= the one to use."
            )
        splits[name] = split.cast_column(columns[0], Audio(sampling_rate=SAMPLING_RATE))
    if isinstance(dataset, (DatasetDict, IterableDatasetDict)):
        return dataset
    return DatasetDict(splits)


def load_audiofolder(root, **load_kwargs):
    """An audiofolder at `root` (one sub-folder of clips per class): `load_audio_dataset` of that folder, which reads
    a directory as an audiofolder."""
    return load_audio_dataset(str(root), **load_kwargs)
