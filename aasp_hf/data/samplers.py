# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Class-balanced weighted sampling for AS-2M fine-tuning (paper Sec. Datasets: weighted sampling size 200K per epoch).

As in PANNs/AST/M2D: each class c gets the weight 1000 / (n_c + 0.01), n_c its number of clips, and a
clip the sum of the weights of its labels; clips are drawn with replacement proportionally to that.
"""

import torch
from torch.utils.data import Sampler


def class_balanced_weights(labels, num_classes: int) -> torch.Tensor:
    """Per-clip weights (N,) float64 from per-clip label lists (ints in [0, num_classes)).

    A clip without labels gets weight 0 (it is never drawn).
    """
    counts = torch.zeros(num_classes, dtype=torch.float64)
    for clip_labels in labels:
        for c in clip_labels:
            counts[c] += 1
    class_weight = 1000.0 / (counts + 0.01)  # (C,)
    return torch.tensor([float(class_weight[list(l)].sum()) if len(l) else 0.0 for l in labels], dtype=torch.float64)


class ClassBalancedSampler(Sampler):
    """Draws `num_samples` clip indices per epoch with replacement, weighted by `class_balanced_weights`.

    Seeded: epoch e uses `torch.Generator().manual_seed(seed + e)`; call `set_epoch(e)` each epoch. With
    `num_replicas > 1` every rank draws the same sequence and keeps indices rank, rank + num_replicas, ...
    (so the ranks together draw `num_samples` clips).

    Args:
        labels: per-clip label lists, or a Dataset with a `labels` (multi-label) or `label` column.
        num_classes: defaults to the dataset's ClassLabel size.
    """

    def __init__(
        self, labels, num_classes=None, num_samples: int = 200_000, seed: int = 0, num_replicas: int = 1, rank: int = 0
    ):
        if hasattr(labels, "features"):  # a datasets.Dataset: read one column (no audio decoding)
            column = "labels" if "labels" in labels.features else "label"
            feature = labels.features[column]
            if num_classes is None:
                num_classes = (feature.feature if hasattr(feature, "feature") else feature).num_classes
            labels = labels.data.column(column).to_pylist()
            if column == "label":
                labels = [[l] for l in labels]
        if num_classes is None:
            raise ValueError("num_classes is needed when labels is a list.")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas}).")
        self.weights = class_balanced_weights(labels, num_classes)
        if not self.weights.sum() > 0:
            raise ValueError("No clip has a label: nothing to sample.")
        self.num_samples, self.seed, self.num_replicas, self.rank = int(num_samples), int(seed), num_replicas, rank
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        draws = torch.multinomial(self.weights, self.num_samples, replacement=True, generator=generator)
        return iter(draws[self.rank :: self.num_replicas].tolist())

    def __len__(self) -> int:
        return len(range(self.rank, self.num_samples, self.num_replicas))
