# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""UrbanSound8K (10 official folds) from its official layout."""

from pathlib import Path

from datasets import ClassLabel, Value

from .layout import (
    audio_features,
    build_fold_dataset_dict,
    check_audio_files,
    names_from_index,
    read_csv_rows,
    require_file,
)


US8K_SOURCE = (
    "It ships with UrbanSound8K (https://urbansounddataset.weebly.com/urbansound8k.html: metadata/UrbanSound8K.csv "
    "with columns slice_file_name,fsID,start,end,salience,fold,classID,class; audio/fold<fold>/<slice_file_name>)."
)


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
    return build_fold_dataset_dict({"train": columns}, features, test_fold, valid_fold, streaming, num_shards)
