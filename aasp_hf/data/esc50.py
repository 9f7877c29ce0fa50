# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""ESC-50 (5 official folds) and UrbanSound8K (10 official folds) from their official layouts."""

from pathlib import Path

from datasets import ClassLabel, Value

from ._common import (
    audio_features,
    build_dataset_dict,
    check_audio_files,
    fold_split,
    names_from_index,
    read_csv_rows,
    require_file,
    to_streaming,
)


ESC50_SOURCE = (
    "It ships with ESC-50 (https://github.com/karolpiczak/ESC-50: meta/esc50.csv with columns "
    "filename,fold,target,category,esc10,src_file,take; audio/<filename>)."
)
US8K_SOURCE = (
    "It ships with UrbanSound8K (https://urbansounddataset.weebly.com/urbansound8k.html: metadata/UrbanSound8K.csv "
    "with columns slice_file_name,fsID,start,end,salience,fold,classID,class; audio/fold<fold>/<slice_file_name>)."
)


def _finish(splits, features, test_fold, valid_fold, streaming, num_shards):
    dataset = build_dataset_dict(splits, features)
    if test_fold is not None:
        dataset = fold_split(dataset, test_fold, valid_fold)
    elif valid_fold is not None:
        raise ValueError("valid_fold needs test_fold.")
    if streaming:
        dataset = to_streaming(dataset, num_shards)
    return dataset


def load_esc50(root, *, test_fold=None, valid_fold=None, streaming=False, num_shards=None):
    """ESC-50: 2,000 clips of 5 s, 50 classes, 5 folds (evaluate by 5-fold cross-validation).

    Returns a DatasetDict with one "train" split holding every clip and its `fold` (1-5); with `test_fold`
    (and optionally `valid_fold`), the cross-validation split {"train", ["validation",] "test"} instead.
    Columns: audio (16 kHz), label (ClassLabel of the 50 categories, ordered by `target`), fold, filename, esc10.
    """
    root = Path(root)
    meta = require_file(root / "meta" / "esc50.csv", "ESC-50 metadata file meta/esc50.csv", ESC50_SOURCE)
    rows = read_csv_rows(meta, ["filename", "fold", "target", "category", "esc10"], "ESC-50 metadata")
    names = names_from_index([(r["target"], r["category"]) for r in rows], str(meta))
    paths = [str(root / "audio" / r["filename"]) for r in rows]
    check_audio_files(paths, meta, root / "audio")
    features = audio_features(
        label=ClassLabel(names=names), fold=Value("int32"), filename=Value("string"), esc10=Value("bool")
    )
    columns = {
        "audio": paths,
        "label": [int(r["target"]) for r in rows],
        "fold": [int(r["fold"]) for r in rows],
        "filename": [r["filename"] for r in rows],
        "esc10": [r["esc10"].strip().lower() == "true" for r in rows],
    }
    return _finish({"train": columns}, features, test_fold, valid_fold, streaming, num_shards)


def load_urbansound8k(root, *, test_fold=None, valid_fold=None, streaming=False, num_shards=None):
    """UrbanSound8K: 8,732 clips up to 4 s, 10 classes, 10 folds (evaluate by 10-fold cross-validation).

    Returns one "train" split with every clip and its `fold` (1-10), or with `test_fold` the cross-validation
    split. Columns: audio, label (ClassLabel ordered by `classID`), fold, slice_file_name, fsID, salience.
    """
    root = Path(root)
    meta = require_file(
        root / "metadata" / "UrbanSound8K.csv", "UrbanSound8K metadata file metadata/UrbanSound8K.csv", US8K_SOURCE
    )
    rows = read_csv_rows(meta, ["slice_file_name", "fsID", "salience", "fold", "classID", "class"], "US8K metadata")
    names = names_from_index([(r["classID"], r["class"]) for r in rows], str(meta))
    paths = [str(root / "audio" / f"fold{int(r['fold'])}" / r["slice_file_name"]) for r in rows]
    check_audio_files(paths, meta, root / "audio")
    features = audio_features(
        label=ClassLabel(names=names),
        fold=Value("int32"),
        slice_file_name=Value("string"),
        fsID=Value("string"),
        salience=Value("int32"),
    )
    columns = {
        "audio": paths,
        "label": [int(r["classID"]) for r in rows],
        "fold": [int(r["fold"]) for r in rows],
        "slice_file_name": [r["slice_file_name"] for r in rows],
        "fsID": [r["fsID"] for r in rows],
        "salience": [int(r["salience"]) for r in rows],
    }
    return _finish({"train": columns}, features, test_fold, valid_fold, streaming, num_shards)
