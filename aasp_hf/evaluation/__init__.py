# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Frozen-encoder evaluation shared by the examples (paper Sec. Training Setup, Linear Evaluation Setup;
Sec. Shift-Consistency Analysis). The package face re-exports the functions of:

- `features`: the linear-evaluation feature [CLS ; time-averaged patch tokens per frequency row] (`pool_features`,
  `extract_features`), train-statistics z-scoring (`standardization_stats`, `standardize`), the frozen CLS
  (`cls_embeddings`) and a saved encoder loaded for featurising whole clips (`load_frozen_encoder`,
  `without_truncation`).
- `shift`: the shift-consistency measure 1 − cos(z(x), z(x_δ)) (`circular_shift`, `representation_drift`).
- `results`: accuracy / mAP for model selection (`classification_score`) and the scripts' summaries over seeds
  (`mean_std`, `write_finetune_markdown`, `write_linear_eval_markdown`).

Imported by name: `linear_protocol` (linear evaluation's arguments, evaluation parts and cached features),
`linear_heads` (its grid of heads, one per lr, trained in one pass), `baseline` (the log-mel baseline) and `probes`
(pre-training's frozen-feature k-NN and ridge probes, `FrozenFeatureProbe`).
"""

from .features import (
    cls_embeddings,
    extract_features,
    load_frozen_encoder,
    pool_features,
    standardization_stats,
    standardize,
    without_truncation,
)
from .results import classification_score, mean_std, write_finetune_markdown, write_linear_eval_markdown
from .shift import circular_shift, representation_drift


__all__ = [
    "circular_shift",
    "classification_score",
    "cls_embeddings",
    "extract_features",
    "load_frozen_encoder",
    "mean_std",
    "pool_features",
    "representation_drift",
    "standardization_stats",
    "standardize",
    "without_truncation",
    "write_finetune_markdown",
    "write_linear_eval_markdown",
]
