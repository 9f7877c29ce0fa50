# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Accuracy as a local `evaluate` metric module (evaluate cannot fetch its Hub metrics offline).

metric = evaluate.load("<path to this folder>")   # or aasp_hf.metrics.load_metric("accuracy")
metric.compute(predictions=[0, 1, 1], references=[0, 1, 0])  # {"accuracy": 0.666...}
"""

import datasets
import evaluate
from sklearn.metrics import accuracy_score


_DESCRIPTION = "Accuracy: the fraction of predictions equal to the references (sklearn.metrics.accuracy_score)."

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `int`): predicted class indices, (N,).
    references (`list` of `int`): true class indices, (N,).
    normalize (`bool`, defaults to `True`): False returns the number of correct predictions.
    sample_weight (`list` of `float`, *optional*): per-example weights.
Returns:
    accuracy (`float`): in [0, 1] (or a count with normalize=False).
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
            reference_urls=["https://scikit-learn.org/stable/modules/generated/sklearn.metrics.accuracy_score.html"],
        )

    def _compute(self, predictions, references, normalize=True, sample_weight=None):
        return {
            "accuracy": float(accuracy_score(references, predictions, normalize=normalize, sample_weight=sample_weight))
        }
