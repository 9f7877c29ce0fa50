"""Test-only oracles: slow, literal evaluations of the paper's equations that the model's fast code is checked against."""

import torch
import torch.nn.functional as F

from aasp_hf.modeling_aasp import _check_sblu_inputs


def sblu_magnitude_reference(
    values: torch.Tensor,
    decay: torch.Tensor,
    frequency: torch.Tensor,
    step: float,
    kernel_size: int,
    phase: str = "symmetric",
) -> torch.Tensor:
    """float64 oracle for `sblu_magnitude`: Eq. (3) evaluated literally, tap by tap.

    Each tap k builds its complex weight directly, w = exp(−Δα|k−c|)·(cos(Δβ s) − j·sin(Δβ s)) with s = |k−c|
    (symmetric) or s = k−c (analytic), and multiplies it with the zero-padded, shifted v[n+k−c]. Same arguments
    and result as `sblu_magnitude`; plain autograd differentiates it.
    """
    _check_sblu_inputs(values, decay, frequency, step, kernel_size, phase)
    values, decay, frequency = values.double(), decay.double(), frequency.double()
    center = (kernel_size - 1) // 2
    frames = values.shape[-1]
    padded = F.pad(values, (center, center))  # (batch_size, channels, frames + 2c), zero padding
    response = torch.zeros(values.shape, dtype=torch.complex128, device=values.device)
    for k in range(kernel_size):
        offset = k - center
        distance = abs(offset)
        signed = distance if phase == "symmetric" else offset
        weight = torch.exp(-step * decay * distance) * torch.complex(
            torch.cos(step * frequency * signed), -torch.sin(step * frequency * signed)
        )  # (batch_size, channels, frames) complex
        response = response + weight * padded[..., k : k + frames]  # v[n+k−c]
    return response.abs()
