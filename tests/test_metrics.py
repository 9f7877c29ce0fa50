"""The shipped `evaluate` metric modules (loaded by path, offline) against sklearn / scipy computed directly."""

import math

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.metrics import accuracy_score, average_precision_score, roc_auc_score

from aasp_hf.evaluation import classification_score
from aasp_hf.metrics import load_metric, metric_path


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    targets = (rng.random((60, 6)) < 0.3).astype(int)  # (N, C) multi-hot
    targets[:, 4] = 0  # a class without positives
    targets[0, 5], targets[1:, 5] = 1, 0  # a class with one positive
    scores = targets * 0.8 + rng.normal(0, 0.6, targets.shape)  # informative but imperfect
    return scores, targets


def test_accuracy_matches_sklearn():
    metric = load_metric("accuracy")
    rng = np.random.default_rng(1)
    predictions, references = rng.integers(0, 5, 200), rng.integers(0, 5, 200)
    result = metric.compute(predictions=predictions.tolist(), references=references.tolist())
    assert result["accuracy"] == pytest.approx(accuracy_score(references, predictions), abs=1e-12)
    assert metric.compute(predictions=[1, 2, 3], references=[1, 2, 0])["accuracy"] == pytest.approx(2 / 3)


def test_map_skips_classes_without_positives_and_matches_sklearn(data):
    scores, targets = data
    result = load_metric("mean_average_precision").compute(predictions=scores.tolist(), references=targets.tolist())
    used = [c for c in range(targets.shape[1]) if targets[:, c].sum() > 0]
    assert 4 not in used and result["num_classes"] == 5 and result["num_skipped_classes"] == 1
    expected_map = np.mean([average_precision_score(targets[:, c], scores[:, c]) for c in used])
    assert result["mAP"] == pytest.approx(expected_map, abs=1e-6)
    # sklearn's macro AP over all classes would count class 4 as 0 (with a warning): ours must be higher
    assert result["mAP"] > np.mean(
        [average_precision_score(targets[:, c], scores[:, c]) if c in used else 0.0 for c in range(targets.shape[1])]
    )
    assert classification_score(scores, targets, multi_label=True) == pytest.approx(result["mAP"], abs=1e-6)


def test_d_prime_from_mean_auc_matches_scipy(data):
    scores, targets = data
    result = load_metric("mean_average_precision").compute(predictions=scores.tolist(), references=targets.tolist())
    aucs = [roc_auc_score(targets[:, c], scores[:, c]) for c in range(targets.shape[1]) if targets[:, c].sum() > 0]
    assert result["mean_auc"] == pytest.approx(np.mean(aucs), abs=1e-6)
    assert result["d_prime"] == pytest.approx(math.sqrt(2) * norm.ppf(np.mean(aucs)), abs=1e-5)
    # the definition: two unit Gaussians d apart have AUC Φ(d/√2); d' recovers d
    rng = np.random.default_rng(2)
    n = 20000
    separated = np.concatenate([rng.normal(0, 1, n), rng.normal(1.5, 1, n)])
    labels = np.concatenate([np.zeros(n, int), np.ones(n, int)])
    two = load_metric("mean_average_precision").compute(
        predictions=separated[:, None].tolist(), references=labels[:, None].tolist()
    )
    assert two["d_prime"] == pytest.approx(1.5, abs=0.05)


def test_metric_path_rejects_unknown_names():
    with pytest.raises(ValueError, match="shipped metrics"):
        metric_path("f1")
