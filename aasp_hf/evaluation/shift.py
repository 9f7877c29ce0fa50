# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The shift-consistency measure (paper Sec. Shift-Consistency Analysis): `circular_shift` makes x_δ, and
`representation_drift` is 1 − cos(z(x), z(x_δ)) of two batches of representations (z: `features.cls_embeddings`)."""

import numpy as np
import torch


def circular_shift(waveform: np.ndarray, shift_ms: float, sampling_rate: int = 16000) -> np.ndarray:
    """x_δ: the waveform rotated right by δ = shift_ms (np.roll, so nothing is lost or padded)."""
    return np.roll(waveform, int(round(shift_ms * sampling_rate / 1000.0)), axis=-1)


def representation_drift(z: torch.Tensor, z_shifted: torch.Tensor) -> torch.Tensor:
    """1 − cos(z, z_δ) per row: (B, D), (B, D) -> (B,), in [0, 2]. Computed in float64."""
    z, z_shifted = z.double(), z_shifted.double()
    cosine = torch.nn.functional.cosine_similarity(z, z_shifted, dim=-1, eps=1e-12)
    return (1.0 - cosine).clamp(0.0, 2.0)
