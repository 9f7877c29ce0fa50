# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Frozen-feature probes: is a pre-training run learning features? (``examples/pretrain.py --probe_dataset``.)

A frozen-feature probe (`FrozenFeatureProbe`) on a small fixed labelled subset of an audiofolder
(`aasp_hf.data.audiofolder.list_audiofolder`): k-NN (`knn_probe_accuracy`) and closed-form ridge
(`ridge_probe_accuracy`) accuracy of the paper's linear-evaluation feature (`pool_features`, Sec. Linear Evaluation
Setup), standardised with train statistics (`probe_accuracies`). It runs without gradients, in eval mode and
without drawing random numbers, so probing does not change what the run trains, as the health monitors do not
(`aasp_hf.training.monitors`). Dimensions: n rows, d features, D hidden size, F̃ frequency patches.
"""

import logging
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from ..data.audiofolder import list_audiofolder
from ..data.decoding import decode_audio
from .features import pool_features, standardization_stats, standardize

logger = logging.getLogger(__name__)


def _check_probe_inputs(train_x, train_y, test_x, test_y):
    train_x, test_x = np.asarray(train_x, dtype=np.float64), np.asarray(test_x, dtype=np.float64)
    train_y, test_y = np.asarray(train_y, dtype=np.int64), np.asarray(test_y, dtype=np.int64)
    if train_x.ndim != 2 or test_x.ndim != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(f"features must be (n, d) with the same d, got {train_x.shape} and {test_x.shape}")
    if train_y.shape != (len(train_x),) or test_y.shape != (len(test_x),):
        raise ValueError(
            f"labels must be (n,) class indices, got {train_y.shape} for {len(train_x)} train and "
            f"{test_y.shape} for {len(test_x)} test rows"
        )
    if len(train_x) == 0 or len(test_x) == 0 or min(train_y.min(), test_y.min()) < 0:
        raise ValueError("need at least one train and one test row, and labels >= 0")
    return train_x, train_y, test_x, test_y


def knn_probe_accuracy(train_x, train_y, test_x, test_y, k: int = 10) -> float:
    """Accuracy of a k-nearest-neighbour classifier with cosine similarity (n_train, d), (n_train,) int labels ->
    (n_test, d), (n_test,). Each test row takes the majority label of its k most similar train rows (similarity
    ties: the lower train index is nearer); a tie between labels goes to the label of the nearest neighbour among
    them. Deterministic; float64.
    """
    train_x, train_y, test_x, test_y = _check_probe_inputs(train_x, train_y, test_x, test_y)
    k = min(k, len(train_x))
    train_x = train_x / np.maximum(np.linalg.norm(train_x, axis=1, keepdims=True), 1e-12)
    test_x = test_x / np.maximum(np.linalg.norm(test_x, axis=1, keepdims=True), 1e-12)
    similarity = test_x @ train_x.T  # (n_test, n_train)
    nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :k]  # (n_test, k), most similar first
    neighbour_labels = train_y[nearest]  # (n_test, k)
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    rows = np.arange(len(test_x))[:, None]
    votes = np.zeros((len(test_x), num_classes))
    np.add.at(votes, (np.broadcast_to(rows, nearest.shape), neighbour_labels), 1.0)
    first_rank = np.full((len(test_x), num_classes), np.inf)  # rank of each label's nearest neighbour
    for rank in reversed(range(k)):
        first_rank[rows[:, 0], neighbour_labels[:, rank]] = rank
    score = votes + 0.5 / (1.0 + first_rank)  # the bonus (< 1, decreasing in rank) only breaks ties in votes
    return float((score.argmax(axis=1) == test_y).mean())


def ridge_probe_accuracy(train_x, train_y, test_x, test_y, alpha: float = 1.0) -> float:
    """Accuracy of a closed-form one-vs-rest ridge classifier (scikit-learn's `RidgeClassifier`): least squares to
    ±1 targets per class with an intercept (centred features and targets) and penalty `alpha`·‖W‖², then argmax.
    Solved in the primal (d ≤ n) or dual (d > n) form, float64. Labels are class indices (n,).
    """
    train_x, train_y, test_x, test_y = _check_probe_inputs(train_x, train_y, test_x, test_y)
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    targets = -np.ones((len(train_x), num_classes))
    targets[np.arange(len(train_x)), train_y] = 1.0  # (n, C), ±1
    x_mean, y_mean = train_x.mean(axis=0), targets.mean(axis=0)
    x, y = train_x - x_mean, targets - y_mean
    n, d = x.shape
    if d <= n:
        weights = np.linalg.solve(x.T @ x + alpha * np.eye(d), x.T @ y)  # (d, C)
    else:
        weights = x.T @ np.linalg.solve(x @ x.T + alpha * np.eye(n), y)  # (d, n) @ (n, C)
    scores = (test_x - x_mean) @ weights + y_mean  # (n_test, C)
    return float((scores.argmax(axis=1) == test_y).mean())


def probe_accuracies(train_x, train_y, test_x, test_y, k: int = 10, ridge: float = 1.0) -> dict:
    """Standardise with the TRAIN statistics (`aasp_hf.evaluation.standardize`), then ``knn_accuracy``
    (`knn_probe_accuracy`, `k`) and ``ridge_accuracy`` (`ridge_probe_accuracy`, alpha = `ridge` · d: on
    standardised features d is the mean eigenvalue of the train Gram matrix, so `ridge` is scale-free)."""
    mean, std = standardization_stats(np.asarray(train_x, dtype=np.float32))
    train_x, test_x = standardize(train_x, mean, std), standardize(test_x, mean, std)
    return {
        "knn_accuracy": knn_probe_accuracy(train_x, train_y, test_x, test_y, k),
        "ridge_accuracy": ridge_probe_accuracy(train_x, train_y, test_x, test_y, ridge * train_x.shape[1]),
    }


class FrozenFeatureProbe:
    """k-NN and ridge probe accuracy of frozen encoders on a fixed subset of an audiofolder dataset.

    `root/train/<label>/*.wav` and `root/test/<label>/*.wav` (or `validation`): at most `max_clips` clips per split,
    round-robin over the train split's classes (`list_audiofolder`). The log-mel of every clip (the first
    `num_frames` frames, padded with an attention mask) is computed once here and kept on the CPU; each call then
    costs one no-grad eval-mode forward of the encoder per clip. Features: `pool_features` (the paper's
    linear-evaluation feature [CLS ; per-frequency-row time means]); scores: `probe_accuracies`.
    """

    def __init__(
        self,
        root,
        feature_extractor,
        num_frames: int,
        max_clips: int | None = 200,
        k: int = 10,
        ridge: float = 1.0,
        batch_size: int = 32,
    ):
        self.k, self.ridge, self.batch_size = k, ridge, batch_size
        self.splits, self.num_skipped, classes = {}, 0, None
        test_split = "test" if (Path(root) / "test").is_dir() else "validation"
        for split in ("train", test_split):
            paths, labels, classes = list_audiofolder(root, split, max_clips, classes)
            waveforms, kept = [], []
            for path, label in zip(paths, labels):
                try:
                    waveforms.append(decode_audio(str(path), feature_extractor.sampling_rate))
                    kept.append(label)
                except Exception as error:  # noqa: BLE001 - a bad probe clip is left out, not fatal
                    logger.warning(f"probe: cannot decode {path} ({error}); left out")
                    self.num_skipped += 1
            if not waveforms:
                raise ValueError(f"no decodable audio files in {Path(root) / split}")
            inputs = feature_extractor(
                waveforms,
                sampling_rate=feature_extractor.sampling_rate,
                return_tensors="pt",
                padding="max_length",
                max_frames=num_frames,
                truncation=True,
                return_attention_mask=True,
            )
            self.splits[split] = (inputs["input_values"], inputs["attention_mask"], np.asarray(kept, dtype=np.int64))
        self.split_names = ("train", test_split)
        self.classes = classes

    @torch.no_grad()
    def features(self, encoder, split: str, autocast=nullcontext) -> np.ndarray:
        """float32 (n, D + F̃·D) pooled features of a split's clips from `encoder` (an `AaspModel`), in eval mode
        (its training mode is restored); `autocast`: a context-manager factory (e.g. `accelerator.autocast`)."""
        input_values, attention_mask, _ = self.splits[split]
        device = next(encoder.parameters()).device
        was_training = encoder.training
        encoder.eval()
        try:
            pooled = []
            for start in range(0, len(input_values), self.batch_size):
                batch = slice(start, start + self.batch_size)
                with autocast():
                    out = encoder(input_values[batch].to(device), attention_mask=attention_mask[batch].to(device))
                pooled.append(
                    pool_features(out.last_hidden_state.float(), out.token_mask, encoder.config.num_frequency_patches)
                    .cpu()
                    .numpy()
                )
        finally:
            encoder.train(was_training)
        return np.concatenate(pooled)

    def __call__(self, encoder, autocast=nullcontext) -> dict:
        """``knn_accuracy`` and ``ridge_accuracy`` of `encoder` on the test clips (see `probe_accuracies`)."""
        train, test = self.split_names
        return probe_accuracies(
            self.features(encoder, train, autocast),
            self.splits[train][2],
            self.features(encoder, test, autocast),
            self.splits[test][2],
            self.k,
            self.ridge,
        )

    def chance_accuracy(self) -> float:
        """Test accuracy of always answering the train split's most frequent class (the floor to beat)."""
        train, test = self.split_names
        majority = np.bincount(self.splits[train][2]).argmax()
        return float((self.splits[test][2] == majority).mean())


__all__ = ["FrozenFeatureProbe", "knn_probe_accuracy", "probe_accuracies", "ridge_probe_accuracy"]
