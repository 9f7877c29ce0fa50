# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""AudioSet's mAP, the one implementation: the shipped `evaluate` module (`mean_average_precision/`) reports it, and
model selection in the downstream loops (`aasp_hf.evaluation.results.classification_score`) scores with it.

The macro average over classes of sklearn's `average_precision_score` (the area under the precision-recall curve of
one class), as AudioSet reports it. A class with no positive among the targets has no defined AP and is skipped: the
mean is over the classes with at least one positive (NaN, with numpy's warning, when there is none).
"""

import numpy as np
from sklearn.metrics import average_precision_score


def classes_with_positives(targets: np.ndarray) -> np.ndarray:
    """The indices of the classes (columns of multi-hot `targets`, (N, C)) that have at least one positive."""
    return np.flatnonzero(targets.sum(0) > 0)


def mean_average_precision(scores: np.ndarray, targets: np.ndarray) -> float:
    """The mean over `classes_with_positives` of the per-class average precision of `scores` (N, C) against the
    multi-hot `targets` (N, C)."""
    with_positives = classes_with_positives(targets)
    return float(np.mean([average_precision_score(targets[:, c], scores[:, c]) for c in with_positives]))
