# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""ESC-50 (5 official folds) from its official layout."""

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


ESC50_SOURCE = (
    "It ships with ESC-50 (https://github.com/karolpiczak/ESC-50: meta/esc50.csv with columns "
    "filename,fold,target,category,esc10,src_file,take; audio/<filename>)."
)


def load_esc50(root, *, test_fold=None, valid_fold=None, streaming=False, num_shards=None):
    """ESC-50: 2,000 clips of 5 s, 50 classes, 5 folds of 400 (evaluate by 5-fold cross-validation).

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
    return build_fold_dataset_dict({"train": columns}, features, test_fold, valid_fold, streaming, num_shards)
