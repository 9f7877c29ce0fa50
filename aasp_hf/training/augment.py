"""Fine-tuning augmentations as pure functions of their inputs and a seeded ``numpy.random.Generator``.

Both act on normalised log-mel features ``input_values`` (B, T, F) (paper Sec. Training Setup, Fine-tuning Setup):

- ``mixup``: one λ ~ Beta(α, α) per batch (timm / AudioMAE / EAT "batch" mode); each clip is mixed with a randomly
  permuted partner, and its (one-hot or multi-hot) targets the same way, so the loss becomes BCE on soft targets.
- ``spec_augment``: one time mask and one frequency mask per clip, each of width uniform in [0, max_width], with
  ``max_width = size // 5`` by default ("mask size of one-fifth the input spectrogram size"); masked bins are set to
  ``mask_value`` (0 = the dataset mean after standardisation).

The generator is the only source of randomness, so a run is reproducible and resumable from its state
(``generator.bit_generator.state``).
"""

import numpy as np
import torch


def sample_mixup_lambda(alpha: float, generator: np.random.Generator) -> float:
    """λ ~ Beta(α, α); 1.0 (no mixing) when α <= 0."""
    return float(generator.beta(alpha, alpha)) if alpha > 0 else 1.0


def mixup(
    input_values: torch.Tensor,
    targets: torch.Tensor,
    alpha: float,
    generator: np.random.Generator,
    attention_mask: torch.Tensor | None = None,
):
    """Mixes a batch with a permutation of itself.

    Args:
        input_values: (B, T, F) features.
        targets: (B, C) float one-hot / multi-hot targets.
        alpha: the Beta parameter (paper: 0.8).
        generator: draws λ, then the permutation.
        attention_mask: optional (B, T) frame mask; the mixed clip keeps the frames real in either clip.

    Returns: (mixed inputs (B, T, F), mixed targets (B, C), mixed attention mask or None, λ, permutation (B,)).
        mixed = λ·x + (1 − λ)·x[perm], and the same for the targets.
    """
    if input_values.shape[0] != targets.shape[0]:
        raise ValueError(f"input_values has {input_values.shape[0]} clips but targets {targets.shape[0]}")
    lam = sample_mixup_lambda(alpha, generator)
    perm = torch.from_numpy(generator.permutation(input_values.shape[0])).to(input_values.device)
    mixed = lam * input_values + (1.0 - lam) * input_values[perm]
    mixed_targets = lam * targets + (1.0 - lam) * targets[perm]
    mixed_mask = None if attention_mask is None else attention_mask | attention_mask[perm]
    return mixed, mixed_targets, mixed_mask, lam, perm


def sample_mask_bounds(batch_size: int, size: int, max_width: int, generator: np.random.Generator) -> np.ndarray:
    """(B, 2) int [start, end) of one mask per clip: width ~ U{0..max_width}, start ~ U{0..size − width}."""
    max_width = min(max_width, size)
    widths = generator.integers(0, max_width + 1, size=batch_size)
    starts = generator.integers(0, size - widths + 1)  # per-clip upper bounds
    return np.stack([starts, starts + widths], axis=1)


def spec_augment(
    input_values: torch.Tensor,
    generator: np.random.Generator,
    time_fraction: float = 0.2,
    freq_fraction: float = 0.2,
    mask_value: float = 0.0,
):
    """One time and one frequency mask per clip on (B, T, F) features (a new tensor; the input is untouched).

    The maximum widths are ``int(T · time_fraction)`` frames and ``int(F · freq_fraction)`` mel bins.
    Returns (augmented (B, T, F), time bounds (B, 2), frequency bounds (B, 2)).
    """
    if input_values.ndim != 3:
        raise ValueError(f"spec_augment expects (B, T, F) features, got shape {tuple(input_values.shape)}")
    batch_size, num_frames, num_bins = input_values.shape
    time_bounds = sample_mask_bounds(batch_size, num_frames, int(num_frames * time_fraction), generator)
    freq_bounds = sample_mask_bounds(batch_size, num_bins, int(num_bins * freq_fraction), generator)
    t = torch.arange(num_frames, device=input_values.device)[None]  # (1, T)
    f = torch.arange(num_bins, device=input_values.device)[None]  # (1, F)
    tb, fb = (torch.as_tensor(b, device=input_values.device) for b in (time_bounds, freq_bounds))
    time_masked = (t >= tb[:, :1]) & (t < tb[:, 1:])  # (B, T)
    freq_masked = (f >= fb[:, :1]) & (f < fb[:, 1:])  # (B, F)
    masked = time_masked[:, :, None] | freq_masked[:, None, :]  # (B, T, 1) | (B, 1, F) -> (B, T, F)
    return input_values.masked_fill(masked, mask_value), time_bounds, freq_bounds
