# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Evaluation metrics shipped as local `evaluate` modules (`evaluate.load("accuracy")` needs the Hub; a path does
not): `load_metric("accuracy")`, `load_metric("mean_average_precision")` (AudioSet mAP, mean AUC, d-prime). The
mAP itself is `average_precision.mean_average_precision`, which model selection in the downstream loops uses too."""

from pathlib import Path

METRICS_DIR = Path(__file__).resolve().parent
METRIC_NAMES = ("accuracy", "mean_average_precision")


def metric_path(name: str) -> str:
    """The folder of a shipped metric module, e.g. for `evaluate.load(metric_path("accuracy"))`."""
    if name not in METRIC_NAMES:
        raise ValueError(f"Unknown metric {name!r}: the shipped metrics are {list(METRIC_NAMES)}.")
    return str(METRICS_DIR / name)


def load_metric(name: str, **kwargs):
    """`evaluate.load` of a shipped metric by its local path (works offline). kwargs go to `evaluate.load`."""
    import evaluate

    return evaluate.load(metric_path(name), **kwargs)


__all__ = ["METRIC_NAMES", "load_metric", "metric_path"]
