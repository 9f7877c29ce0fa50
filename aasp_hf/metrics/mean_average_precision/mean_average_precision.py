# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""AudioSet's multi-label metrics as a local `evaluate` metric module: mAP, mean ROC-AUC and d-prime.

    metric = evaluate.load("<path to this folder>")   # or aasp_hf.metrics.load_metric("mean_average_precision")
    metric.compute(predictions=scores, references=multi_hot)   # scores (N, C) float, multi_hot (N, C) {0, 1}

- mAP: the macro average over classes of sklearn's `average_precision_score` (area under the precision-recall
  curve, per class), as AudioSet reports it: `aasp_hf.metrics.average_precision.mean_average_precision`, the
  function model selection scores with (`aasp_hf.evaluation.results.classification_score`).
- Classes with no positive example among the references have no defined AP (nor AUC) and are SKIPPED: the
  means are over the classes with at least one positive (and, for the AUC, at least one negative). The result
  says how many classes were used and how many were skipped.
- d-prime from the mean ROC-AUC: d' = √2 · Φ⁻¹(AUC), Φ⁻¹ the standard normal quantile function.
"""

import datasets
import evaluate
import numpy as np
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from aasp_hf.metrics.average_precision import classes_with_positives, mean_average_precision


_DESCRIPTION = (
    "Multi-label metrics of AudioSet: macro mean average precision (mAP), mean ROC-AUC and d-prime = "
    "sqrt(2) * norm.ppf(mean AUC). Classes without positives are skipped."
)

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `list` of `float`): scores (logits or probabilities), (N, C).
    references (`list` of `list` of `int`): multi-hot targets in {0, 1}, (N, C).
Returns:
    mAP (`float`): mean over the used classes of the per-class average precision.
    mean_auc (`float`): mean over the classes with positives and negatives of the per-class ROC-AUC (NaN if none).
    d_prime (`float`): sqrt(2) * Φ⁻¹(mean_auc).
    num_classes (`int`): classes whose AP was averaged; num_skipped_classes (`int`): classes without positives.
"""


def d_prime(auc: float) -> float:
    """d' = √2 · Φ⁻¹(AUC) (the separation of two unit-variance Gaussians with that ROC-AUC)."""
    return float(np.sqrt(2.0) * norm.ppf(auc))


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MeanAveragePrecision(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("float32")),
                    "references": datasets.Sequence(datasets.Value("int32")),
                }
            ),
            reference_urls=["https://research.google.com/audioset/"],
        )

    def _compute(self, predictions, references):
        scores = np.asarray(predictions, dtype=np.float64)  # (N, C)
        targets = np.asarray(references)  # (N, C)
        if scores.ndim != 2 or scores.shape != targets.shape:
            raise ValueError(f"predictions and references must both be (N, C), got {scores.shape} and {targets.shape}.")
        positives = targets.sum(axis=0)  # (C,)
        with_positives = classes_with_positives(targets)
        if len(with_positives) == 0:
            raise ValueError("No class has a positive example in the references: mAP is undefined.")
        with_both = [c for c in with_positives if positives[c] < len(targets)]
        aucs = [roc_auc_score(targets[:, c], scores[:, c]) for c in with_both]
        mean_auc = float(np.mean(aucs)) if aucs else float("nan")
        return {
            "mAP": mean_average_precision(scores, targets),
            "mean_auc": mean_auc,
            "d_prime": d_prime(mean_auc) if aucs else float("nan"),
            "num_classes": int(len(with_positives)),
            "num_skipped_classes": int(targets.shape[1] - len(with_positives)),
        }
