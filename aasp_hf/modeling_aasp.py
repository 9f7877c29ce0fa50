# Copyright 2026 The aasp_hf authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""PyTorch AaSP model: the encoder `AaspModel` (SPE or AaPE patch embedding, then EAT's ViT blocks), the classifier
`AaspForAudioClassification` and the pre-training model `AaspForPreTraining` (student, EMA teacher, predictor, losses).

Paper: "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers". Derivations and where
each detail comes from: docs/model.md. This file ships to the Hub as remote code, so it imports only torch,
transformers, numpy and its sibling `configuration_aasp.py`.
"""

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.conversion_mapping import register_checkpoint_conversion_mapping
from transformers.core_model_loading import WeightRenaming
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, auto_docstring
from transformers.utils import __version__ as transformers_version
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs, maybe_install_capturing_hooks

from .configuration_aasp import _LOADED_AS_REMOTE_CODE, CHOICES, AaspConfig


# The input checks compare shapes with these fields (a wrong shape is refused with its sizes); no checkpoint takes
# another path on them, so they need no `# CODEPATH:` note:
# trf-ignore: TRF041 time_patch_size, num_mel_bins, num_patches


@auto_docstring(custom_intro="Output of `AaspModel`: the encoded tokens, CLS first, and what the flags asked for.")
@dataclass
class AaspModelOutput(ModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(B, 1 + N, D)`):
        CLS token then the N patch tokens (time-major).
    hidden_states (`tuple(torch.FloatTensor)`, *optional*):
        Embedding output and each layer's output, each `(B, 1 + N, D)`.
    attentions (`tuple(torch.FloatTensor)`, *optional*):
        Each layer's attention weights `(B, heads, 1 + N, 1 + N)`.
    token_mask (`torch.LongTensor` of shape `(B, 1 + N)`, *optional*):
        1 for real tokens (CLS and patches that hold at least one real frame), 0 for padding, like an attention mask;
        None when no attention mask was given (all tokens real).
    ffn_outputs (`tuple(torch.FloatTensor)`, *optional*):
        With `output_ffn_outputs=True`, each layer's FFN output before the residual add (and, post-norm, before the
        second LayerNorm), each `(B, 1 + N, D)`.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    token_mask: torch.LongTensor | None = None
    ffn_outputs: tuple[torch.FloatTensor, ...] | None = None


@auto_docstring(custom_intro="Output of `AaspForPreTraining`: the three losses, their sum, predictions and targets.")
@dataclass
class AaspForPreTrainingOutput(ModelOutput):
    r"""
    loss (`torch.FloatTensor`, scalar):
        L = L_m + η_u·L_u + η_c·L_c.
    masked_prediction_loss (`torch.FloatTensor`, scalar):
        L_m, mean squared error over query tokens and dimensions (`config.loss_scaling="eat"`: × √D, EAT's per-token
        sum over D / √D averaged over the query tokens).
    clip_loss (`torch.FloatTensor`, scalar):
        L_u, mean squared error between each view's CLS and the clip target (`config.loss_scaling="eat"`: × B·M·√D,
        EAT's per-view sum over D / √D summed over the views).
    contrastive_loss (`torch.FloatTensor`, scalar):
        L_c, the multi-positive InfoNCE over views (mean over anchors).
    predictions (`torch.FloatTensor` of shape `(B, M, Q, D)`):
        Predictor outputs at the query tokens.
    targets (`torch.FloatTensor` of shape `(B, N, D)`):
        The pooled, normalised teacher targets.
    hidden_states (`tuple(torch.FloatTensor)`, *optional*):
        With `output_hidden_states=True`: the student encoder's embedding output and each layer's output on the
        visible tokens of every view, each `(B·M, 1 + V, D)` (as `AaspModel` returns them with `visible_indices`).
    attentions (`tuple(torch.FloatTensor)`, *optional*):
        With `output_attentions=True`: each student encoder layer's attention weights `(B·M, heads, 1 + V, 1 + V)`.
    """

    loss: torch.FloatTensor | None = None
    masked_prediction_loss: torch.FloatTensor | None = None
    clip_loss: torch.FloatTensor | None = None
    contrastive_loss: torch.FloatTensor | None = None
    predictions: torch.FloatTensor | None = None
    targets: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


SBLU_PHASES = CHOICES["sblu_phase"]


def _check_step(step: float) -> None:
    if not step > 0:
        raise ValueError(f"step must be > 0 (seconds per frame), got step={step!r}")


def _check_kernel_size(kernel_size: int) -> None:
    is_integer = isinstance(kernel_size, (int, np.integer)) and not isinstance(kernel_size, bool)
    if not is_integer or kernel_size < 3 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be an odd integer > 1, got kernel_size={kernel_size!r}")


def _check_phase(phase: str) -> None:
    if phase not in SBLU_PHASES:
        raise ValueError(f"phase must be one of {SBLU_PHASES}, got phase={phase!r}")


def _check_sblu_inputs(values, decay, frequency, step, kernel_size, phase) -> None:
    _check_phase(phase)
    _check_kernel_size(kernel_size)
    _check_step(step)
    if values.dim() != 3:
        raise ValueError(f"values must have shape (B, H, T), got values.shape={tuple(values.shape)}")
    if decay.shape != values.shape or frequency.shape != values.shape:
        raise ValueError(
            "values, decay and frequency must have the same shape (B, H, T) (expand the per-frame parameters first), "
            f"got values.shape={tuple(values.shape)}, decay.shape={tuple(decay.shape)}, "
            f"frequency.shape={tuple(frequency.shape)}"
        )


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float32 for half/bfloat16/float32 inputs, float64 if any input is float64."""
    dtype = torch.float32
    for tensor in tensors:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def sblu_decay_min(epsilon: float, step: float, kernel_size: int) -> float:
    """α_min = −2·ln(ε) / (Δ·(K−1)), the smallest decay whose window edge exp(−Δα(K−1)/2) is at most ε.

    Defaults of the paper (ε = 0.01, Δ = 0.01 s, K = 63) give 14.855 1/s.
    """
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must lie in (0, 1) (window edge attenuation), got epsilon={epsilon!r}")
    _check_step(step)
    _check_kernel_size(kernel_size)
    return -2.0 * math.log(epsilon) / (step * (kernel_size - 1))


def sblu_frequency_range(step: float, time_patch_size: int) -> tuple[float, float]:
    """(β_min, β_max) = (π/(Δ·S_time), π/Δ): the post- and pre-patching modulation Nyquist limits in rad/s.

    Defaults (Δ = 0.01 s, S_time = P_time = 16) give (19.635, 314.159).
    """
    _check_step(step)
    if isinstance(time_patch_size, bool) or not isinstance(time_patch_size, int) or time_patch_size < 2:
        raise ValueError(f"time_patch_size must be an integer >= 2, got time_patch_size={time_patch_size!r}")
    return math.pi / (step * time_patch_size), math.pi / step


def sblu_gamma(decay: torch.Tensor, frequency: torch.Tensor, step: float) -> torch.Tensor:
    """γ = |λ⁻¹·sinh(Δλ/2)| with λ = α + jβ, Eq. (4) / Appendix B. Elementwise, any (broadcastable) shapes.

    The paper writes γ = sqrt((cosh²(Δα/2) − cos²(Δβ/2)) / (α² + β²)); we evaluate the identical
    sqrt((sinh²(Δα/2) + sin²(Δβ/2)) / (α² + β²)), which has no cancellation for small Δα and Δβ.
    Computed in float32 for half/bfloat16/float32 inputs and in float64 for float64 inputs.
    """
    _check_step(step)
    dtype = compute_dtype(decay, frequency)
    decay, frequency = decay.to(dtype), frequency.to(dtype)
    numerator = torch.sinh(0.5 * step * decay).square() + torch.sin(0.5 * step * frequency).square()
    return torch.sqrt(numerator / (decay.square() + frequency.square()))


def highpass_fir_taps(num_taps: int, cutoff_hz: float, sample_rate_hz: float) -> np.ndarray:
    """Hamming-window FIR high-pass taps (float64, length ``num_taps``), unit gain at Nyquist.

    Equal to ``scipy.signal.firwin(num_taps, cutoff_hz, window="hamming", pass_zero=False, fs=sample_rate_hz)``:
    an ideal high-pass (sinc at Nyquist minus sinc at the cutoff) times a symmetric Hamming window, then scaled
    so that the response at Nyquist is exactly 1. ``num_taps`` must be odd (a high-pass needs a tap at the centre).
    In AaPE the cutoff is β_min/(2π) = 3.125 Hz at a 100 Hz frame rate, with 63 taps.
    """
    if isinstance(num_taps, bool) or not isinstance(num_taps, int) or num_taps < 3 or num_taps % 2 == 0:
        raise ValueError(f"num_taps must be an odd integer >= 3 for a high-pass FIR, got num_taps={num_taps!r}")
    nyquist_hz = 0.5 * sample_rate_hz
    if not 0 < cutoff_hz < nyquist_hz:
        raise ValueError(
            f"cutoff_hz must lie in (0, sample_rate_hz/2) = (0, {nyquist_hz!r}), got cutoff_hz={cutoff_hz!r}"
        )
    cutoff = cutoff_hz / nyquist_hz  # in units of Nyquist
    m = np.arange(num_taps, dtype=np.float64) - 0.5 * (num_taps - 1)  # tap offsets from the centre
    taps = np.sinc(m) - cutoff * np.sinc(cutoff * m)  # ideal high-pass = all-pass minus low-pass at the cutoff
    window = 0.54 + 0.46 * np.cos(np.linspace(-np.pi, np.pi, num_taps))  # symmetric Hamming, as scipy builds it
    taps = taps * window
    nyquist_gain = np.sum(taps * np.cos(np.pi * m))  # response at Nyquist
    return taps / nyquist_gain


def zero_phase_kernel(taps: np.ndarray) -> np.ndarray:
    """The centred kernel equivalent to forward–backward (filtfilt) filtering with ``taps``.

    Filtering forward with h and then backward with h equals one convolution with h ⋆ h[::-1], which is symmetric
    (zero phase) and has length 2·len(taps) − 1.
    """
    taps = np.asarray(taps, dtype=np.float64)
    if taps.ndim != 1 or taps.size == 0:
        raise ValueError(f"taps must be a non-empty 1-D array, got taps.shape={taps.shape}")
    return np.convolve(taps, taps[::-1])


def zero_phase_highpass(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Filter every row of ``x`` (B, C, T) along time with the centred zero-phase ``kernel`` (odd length L).

    ``kernel`` is ``zero_phase_kernel(highpass_fir_taps(...))`` as a tensor. Output (B, C, T): out[..., n] =
    Σ_i kernel[i] · x[..., n + L//2 − i], i.e. ``np.convolve(row, kernel, "full")[L//2 : L//2 + T]``.

    Edges: the signal is ZERO-padded at both ends (not the odd extension of ``scipy.signal.filtfilt``). This is
    deliberate: the model pads clips with zeros, so a zero-padded clip filters exactly like the unpadded one.
    At least L//2 = num_taps − 1 frames away from both edges the result equals ``filtfilt(taps, [1], x)``.
    Works for any T >= 1, also T < L. Arithmetic in float32 (float64 for float64 input), autocast disabled.

    Computed as one FFT convolution of every row (length ≥ T + L − 1, so there is no wrap-around): the 125-tap
    kernel makes a direct conv1d about 7–10× slower on the CPU.
    """
    if x.dim() != 3:
        raise ValueError(f"x must have shape (B, C, T), got x.shape={tuple(x.shape)}")
    if kernel.dim() != 1 or kernel.shape[0] % 2 == 0:
        raise ValueError(f"kernel must be 1-D with an odd length, got kernel.shape={tuple(kernel.shape)}")
    frames, length = x.shape[-1], kernel.shape[0]
    dtype = compute_dtype(x)
    if torch.compiler.is_exporting():  # torch.export/ONNX: a direct convolution keeps the length dynamic
        with torch.autocast(device_type=x.device.type, enabled=False):
            weight = kernel.to(device=x.device, dtype=dtype).flip(0).view(1, 1, -1)  # (L,) -> (1, 1, L)
            rows = x.to(dtype).reshape(-1, 1, frames)  # (B, C, T) -> (B·C, 1, T)
            out = F.conv1d(rows, weight, padding=length // 2)  # (B·C, 1, T), zero padding
        return out.reshape(x.shape)  # (B·C, 1, T) -> (B, C, T)
    needed = frames + length - 1  # T + L − 1: no wrap-around
    power_of_two = 1 << (needed - 1).bit_length()  # the smallest 2^k >= needed
    three_times_power_of_two = 3 << (-(-needed // 3) - 1).bit_length()  # the smallest 3·2^k >= needed
    fft_size = min(power_of_two, three_times_power_of_two)  # as fast per point: 768 instead of 1024 for 608 frames
    with torch.autocast(device_type=x.device.type, enabled=False):
        spectrum = torch.fft.rfft(x.to(dtype), n=fft_size)  # (B, C, T) -> (B, C, S/2 + 1)
        response = torch.fft.rfft(kernel.to(device=x.device, dtype=dtype), n=fft_size)  # (S/2 + 1,)
        full = torch.fft.irfft(spectrum * response, n=fft_size)  # (B, C, S): the full linear convolution
    return full[..., length // 2 : length // 2 + frames]  # centred: (B, C, S) -> (B, C, T)


def _sblu_base(decay: torch.Tensor, frequency: torch.Tensor, step: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(Re z, Im z) of z = exp(−Δ(α + jβ)), each (B, H, T)."""
    magnitude = torch.exp(-step * decay)
    angle = step * frequency
    return magnitude * torch.cos(angle), -magnitude * torch.sin(angle)


def _complex_mul_(a_re, a_im, b_re, b_im, scratch, conjugate=False) -> None:
    """(a_re, a_im) ← a·b (or a·conj(b)) in place, with a = a_re + j a_im, b = b_re + j b_im; ``scratch`` is clobbered."""
    torch.mul(a_re, b_im, out=scratch)  # Re a · Im b
    a_re.mul_(b_re).addcmul_(a_im, b_im, value=1 if conjugate else -1)  # Re a·Re b ∓ Im a·Im b
    a_im.mul_(b_re)  # Im a·Re b ...
    if conjugate:
        a_im.sub_(scratch)  # ... − Re a·Im b
    else:
        a_im.add_(scratch)  # ... + Re a·Im b


# On the CPU (outside torch.compile/export) the work is done in blocks of rows whose padded width fits in
# _SBLU_BLOCK_ELEMENTS: every temporary of the tap loops is then block-sized, so the peak memory is little more than
# inputs, outputs and gradients, the blocks stay in cache, and — the size being ATen's parallel grain (32768) —
# every op runs on the calling thread: no OpenMP region per op, which on a shared (oversubscribed) machine would
# each cost a scheduler time slice. On one core this is ~3× faster than the former whole-tensor passes, and still
# faster than those on two cores (spreading the blocks over Python threads was tried: slower, GIL-bound).
_SBLU_BLOCK_ELEMENTS = 1 << 15


def _row_blocks(shape, width):
    """Index tuples that cut a (B, H, T) tensor into blocks of at most _SBLU_BLOCK_ELEMENTS // width rows (at least
    one), ``width`` = the padded row length T + 2c: (slice of clips, all rows) when whole clips fit, else
    (clip, slice of rows)."""
    batch, rows, _ = shape
    per_block = max(1, _SBLU_BLOCK_ELEMENTS // max(width, 1))
    if per_block >= rows:  # several whole clips per block (few ops for small inputs)
        clips = per_block // rows
        for start in range(0, batch, clips):
            yield slice(start, min(start + clips, batch)), slice(None)
        return
    for b in range(batch):
        for start in range(0, rows, per_block):
            yield b, slice(start, min(start + per_block, rows))


def _blocks(values, half, whole_tensor_pass=False):
    """The blocks of the eager CPU path, or one whole-tensor block (accelerators, torch.compile / torch.export, or
    `whole_tensor_pass=True`: no Python loop over blocks in a traced graph, no thousands of tiny kernels on a GPU)."""
    traced = torch.compiler.is_compiling() or torch.compiler.is_exporting()
    if traced or whole_tensor_pass or values.device.type != "cpu":
        return [(Ellipsis,)]
    return _row_blocks(values.shape, values.shape[-1] + 2 * half)


def _sblu_forward_block(values, decay, frequency, step, half, analytic, out_re, out_im, out_magnitude):
    """Re r, Im r and |r| of one block (..., T) into the given (..., T) tensors; temporaries are block-sized."""
    frames = values.shape[-1]
    padded = F.pad(values, (half, half))  # (..., T) -> (..., T + 2c), zero padding
    z_re, z_im = _sblu_base(decay, frequency, step)
    power_re, power_im = z_re.clone(), z_im.clone()  # p = z^d, here d = 1
    pair, scratch = torch.empty_like(z_re), torch.empty_like(z_re)
    out_re.copy_(values)  # d = 0 tap: 2·v[n] − v[n] = v[n]
    out_im.zero_()
    for d in range(1, half + 1):
        ahead = padded[..., half + d : half + d + frames]  # v[n+d]
        behind = padded[..., half - d : half - d + frames]  # v[n−d]
        torch.add(ahead, behind, out=pair)
        out_re.addcmul_(power_re, pair)  # Re r += Re p·(a + b)
        if analytic:
            torch.sub(ahead, behind, out=pair)
        out_im.addcmul_(power_im, pair)  # Im r += Im p·(a ± b)
        if d < half:
            _complex_mul_(power_re, power_im, z_re, z_im, scratch)  # p ← p·z
    torch.mul(out_re, out_re, out=out_magnitude).addcmul_(out_im, out_im).sqrt_()  # |r| (hypot has no ONNX export)


def _sblu_backward_block(
    grad_magnitude,
    values,
    decay,
    frequency,
    response_re,
    response_im,
    step,
    half,
    analytic,
    grad_values,
    grad_decay,
    grad_frequency,
):
    """∂L/∂v, ∂L/∂α, ∂L/∂β of one block (..., T) into the given tensors (see the derivation above).

    The running products q = Gc·z_f^d and s = Gc·z_b^d (s = q in the symmetric phase) carry every tap's weight:
    frame n sends Re q to v[n+d] and Re s to v[n−d], and
        ∂L/∂α = −Δ Σ_d d (v[n+d] Re q + v[n−d] Re s),   ∂L/∂β = Δ Σ_d d (v[n+d] Im q ± v[n−d] Im s)
    (+ symmetric, − analytic), since Re(Gc·(D_f + D_b)) and Im(Gc·(D_f ± D_b)) expand to exactly these sums.
    """
    frames = values.shape[-1]
    tiny = torch.finfo(response_re.dtype).tiny
    q_re, q_im = torch.empty_like(response_re), torch.empty_like(response_re)
    torch.mul(response_re, response_re, out=q_re).addcmul_(response_im, response_im).sqrt_().clamp_min_(tiny)  # |r|
    torch.div(grad_magnitude, q_re, out=q_re)  # g/|r|
    torch.mul(q_re, response_im, out=q_im).neg_()  # Im Gc = −g·Im r/|r|
    q_re.mul_(response_re)  # Re Gc = g·Re r/|r|;  q = Gc·z^0

    padded = F.pad(values, (half, half))  # (..., T) -> (..., T + 2c)
    grad_padded = torch.zeros_like(padded)  # ∂L/∂v on the padded grid
    grad_padded[..., half : half + frames] = q_re  # d = 0 tap: Re(Gc·1), counted once
    z_re, z_im = _sblu_base(decay, frequency, step)
    scratch = torch.empty_like(q_re)
    if analytic:
        s_re, s_im = q_re.clone(), q_im.clone()
    else:
        s_re, s_im = q_re, q_im
        pair = torch.empty_like(q_re)
    grad_decay.zero_()
    grad_frequency.zero_()
    for d in range(1, half + 1):
        ahead = padded[..., half + d : half + d + frames]  # v[n+d]
        behind = padded[..., half - d : half - d + frames]  # v[n−d]
        _complex_mul_(q_re, q_im, z_re, z_im, scratch)  # q = Gc·z^d
        grad_padded[..., half + d : half + d + frames].add_(q_re)  # Re(Gc·z_f^d) to v[n+d]
        if analytic:
            _complex_mul_(s_re, s_im, z_re, z_im, scratch, conjugate=True)  # s = Gc·conj(z)^d
            grad_padded[..., half - d : half - d + frames].add_(s_re)  # Re(Gc·z_b^d) to v[n−d]
            grad_decay.addcmul_(ahead, q_re, value=d).addcmul_(behind, s_re, value=d)
            grad_frequency.addcmul_(ahead, q_im, value=d).addcmul_(behind, s_im, value=-d)
        else:
            grad_padded[..., half - d : half - d + frames].add_(q_re)
            torch.add(ahead, behind, out=pair)
            grad_decay.addcmul_(pair, q_re, value=d)
            grad_frequency.addcmul_(pair, q_im, value=d)
    grad_values.copy_(grad_padded[..., half : half + frames])
    grad_decay.mul_(-step)
    grad_frequency.mul_(step)


class SbluMagnitudeFunction(torch.autograd.Function):
    """|r| of Eq. (3) with taps generated on the fly; saves only v, α, β, Re r, Im r (each (B, H, T)).

    Eager CPU calls work block by block (rows of ≤ _SBLU_BLOCK_ELEMENTS padded elements), so besides the saved
    tensors, the output and the gradients only block-sized temporaries are alive; accelerators and
    torch.compile/export run one whole-tensor pass of the same code.
    """

    @staticmethod
    def forward(ctx, values, decay, frequency, step, kernel_size, phase, whole_tensor_pass=False):
        analytic = phase == "analytic"
        half = (kernel_size - 1) // 2  # c
        response_re = torch.empty(values.shape, dtype=values.dtype, device=values.device)
        response_im, magnitude = torch.empty_like(response_re), torch.empty_like(response_re)
        for index in _blocks(values, half, whole_tensor_pass):
            _sblu_forward_block(
                values[index],
                decay[index],
                frequency[index],
                step,
                half,
                analytic,
                response_re[index],
                response_im[index],
                magnitude[index],
            )
        ctx.save_for_backward(values, decay, frequency, response_re, response_im)
        ctx.step, ctx.kernel_size, ctx.analytic, ctx.whole_tensor_pass = step, kernel_size, analytic, whole_tensor_pass
        return magnitude

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_magnitude):
        values, decay, frequency, response_re, response_im = ctx.saved_tensors
        half = (ctx.kernel_size - 1) // 2
        with torch.autocast(device_type=values.device.type, enabled=False):
            grad_magnitude = grad_magnitude.to(response_re.dtype)
            grads = [torch.empty(values.shape, dtype=values.dtype, device=values.device) for _ in range(3)]
            for index in _blocks(values, half, ctx.whole_tensor_pass):
                _sblu_backward_block(
                    grad_magnitude[index],
                    values[index],
                    decay[index],
                    frequency[index],
                    response_re[index],
                    response_im[index],
                    ctx.step,
                    half,
                    ctx.analytic,
                    *(grad[index] for grad in grads),
                )
        return (*grads, None, None, None, None)


def sblu_magnitude(
    values: torch.Tensor,
    decay: torch.Tensor,
    frequency: torch.Tensor,
    step: float,
    kernel_size: int,
    phase: str = "symmetric",
    whole_tensor_pass: bool = False,
) -> torch.Tensor:
    """|r| of Eq. (3): the magnitude of the adaptive bilateral complex-sinusoid convolution (AaPE (c)).

    Args:
        values: v (B, H, T), the high-passed subband signals after B̄.
        decay: α (B, H, T) in 1/s, the decay of OUTPUT frame n's kernel (Re λ; expanded views are fine).
        frequency: β (B, H, T) in rad/s, the frequency of OUTPUT frame n's kernel (Im λ).
        step: Δ in seconds.
        kernel_size: K, odd and > 1; centre c = (K−1)/2.
        phase: ``"symmetric"`` — the paper's Eq. (3) as written, r[n] = Σ_k exp(−Δ(α_n + jβ_n)|k−c|)·v[n+k−c];
            ``"analytic"`` — r[n] = Σ_k exp(−Δα_n|k−c|)·exp(−jΔβ_n(k−c))·v[n+k−c], the one-sided-phase kernel
            of the paper's window analysis (steady envelope on a pure modulation: |r| varies ≈ 0.005 std/mean
            at K = 63, α = α_min, against ≈ 0.55 for "symmetric", whose |r| swings with the input phase).

    Returns:
        |r| (B, H, T), float32 (float64 when any input is float64). v is zero outside [0, T).

    The Γ and 2·C̄ factors of Eq. (3) are applied by the caller (see ``sblu_gamma``). Memory: autograd keeps
    v, α, β, Re r, Im r — O(B·H·T) — and the backward pass regenerates the taps; no (B, H, T, K) tensor is ever
    built. Under ``torch.autocast`` the inputs are cast to float32 and autocast is disabled inside.
    """
    _check_sblu_inputs(values, decay, frequency, step, kernel_size, phase)
    dtype = compute_dtype(values, decay, frequency)
    with torch.autocast(device_type=values.device.type, enabled=False):
        return SbluMagnitudeFunction.apply(
            values.to(dtype), decay.to(dtype), frequency.to(dtype), float(step), kernel_size, phase, whole_tensor_pass
        )


def sblu_token_magnitude(
    windows: torch.Tensor,
    decay: torch.Tensor,
    frequency: torch.Tensor,
    step: float,
    kernel_size: int,
    phase: str = "symmetric",
) -> torch.Tensor:
    """|r| of Eq. (3) for rows whose (α, β) stay constant over the output frames (masked pre-training, per token).

    Args:
        windows: (G, P + K − 1) — row g holds v[n0 − c .. n0 + P − 1 + c] (zeros outside the clip) around the P output
            frames n0 .. n0 + P − 1 it is asked for.
        decay, frequency: (G,) — the one (α, β) of row g (a token's Lambda-encoder output for one hidden channel).
        step, kernel_size, phase: as in ``sblu_magnitude``.

    Returns:
        |r| (G, P), float32 (float64 for float64 inputs): exactly ``sblu_magnitude`` at those P frames.

    A token's (α, β) do not change within its P_time frames, so each row needs one K-tap complex kernel: the kernel
    (G, K) is built tap by tap as in Eq. (3) (O(G·K) memory, not O(G·P·K)) and applied as depthwise conv1d (Re and
    Im kernels); plain autograd differentiates it. |r| is clamped away from 0 under the square
    root so that an all-zero window has a zero (not NaN) gradient, as in ``SbluMagnitudeFunction``.
    """
    _check_phase(phase)
    _check_kernel_size(kernel_size)
    _check_step(step)
    if windows.dim() != 2 or windows.shape[-1] < kernel_size:
        raise ValueError(
            f"windows must have shape (G, P + K − 1) with P >= 1, got windows.shape={tuple(windows.shape)} "
            f"for kernel_size={kernel_size}"
        )
    if decay.shape != windows.shape[:1] or frequency.shape != windows.shape[:1]:
        raise ValueError(
            f"decay and frequency must have shape (G,) = ({windows.shape[0]},), got decay.shape={tuple(decay.shape)}, "
            f"frequency.shape={tuple(frequency.shape)}"
        )
    dtype = compute_dtype(windows, decay, frequency)
    with torch.autocast(device_type=windows.device.type, enabled=False):
        windows, decay, frequency = windows.to(dtype), decay.to(dtype), frequency.to(dtype)
        center = (kernel_size - 1) // 2
        offset = torch.arange(kernel_size, device=windows.device, dtype=dtype) - center  # k − c, (K,)
        signed = offset.abs() if phase == "symmetric" else offset
        envelope = torch.exp(-step * decay[:, None] * offset.abs())  # exp(−Δα|k−c|), (G, K)
        angle = step * frequency[:, None] * signed  # Δβ|k−c| or Δβ(k−c), (G, K)
        kernel_re = (envelope * torch.cos(angle))[:, None]  # (G, 1, K)
        kernel_im = (-envelope * torch.sin(angle))[:, None]  # (G, 1, K)
        rows = windows.shape[0]
        # Σ_k w[k]·v[n + k − c], (1, G, P + K − 1) -> (1, G, P) for Re and Im; two depthwise convs (one output
        # channel per group) run about 2× faster on the CPU than one conv with two output channels per group
        response_re = F.conv1d(windows[None], kernel_re, groups=rows)[0]  # (G, P)
        response_im = F.conv1d(windows[None], kernel_im, groups=rows)[0]  # (G, P)
        power = response_re.square() + response_im.square()  # |r|², (G, P)
        return power.clamp_min(torch.finfo(dtype).tiny).sqrt()


def sincos_position_embeddings(hidden_size: int, num_frequency_patches: int, num_time_patches: int) -> torch.Tensor:
    """Fixed 2-D sin-cos positions (MAE/EAT), float64 `(N, D)` in time-major token order.

    The first D/2 dimensions encode the frequency-patch index, the last D/2 the time-patch index (as EAT does);
    each half is [sin(p·ω), cos(p·ω)] with ω_i = 10000^(−i/(D/4)).
    """
    quarter = hidden_size // 4
    omega = 1.0 / 10000 ** (np.arange(quarter, dtype=np.float64) / quarter)  # (D/4,)

    def one_axis(positions):
        angles = np.outer(positions, omega)  # (P, D/4)
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (P, D/2)

    time_index, freq_index = np.meshgrid(
        np.arange(num_time_patches), np.arange(num_frequency_patches), indexing="ij"
    )  # each (T̃, F̃)
    table = np.concatenate([one_axis(freq_index.reshape(-1)), one_axis(time_index.reshape(-1))], axis=1)  # (N, D)
    return torch.from_numpy(table)


class AaspLambdaEncoder(nn.Module):
    """Lambda encoder (paper Sec. AaPE (1)): estimates the SBLU decay α and frequency β for every token.

    X_spec + positions -> Linear(D -> D/r) -> L pre-norm ViT blocks -> LayerNorm -> Linear(D/r -> 2H/F̃), split into
    α, β (H/F̃ each per token), bounded as α = softplus(·) + α_min, β = (β_max − β_min)·σ(·) + β_min.
    Attention is restricted to the real tokens given by `attention_mask`, so in masked pre-training it attends
    only among visible tokens.
    """

    def __init__(self, config: AaspConfig):
        super().__init__()
        width = config.hidden_size // config.lambda_encoder_reduction  # D/r (`config.lambda_encoder_hidden_size`)
        self.input_projection = nn.Linear(config.hidden_size, width)
        self.layers = nn.ModuleList(
            [
                AaspLambdaEncoderLayer(
                    config,
                    width,
                    config.lambda_encoder_num_attention_heads,
                    int(width * config.lambda_encoder_mlp_ratio),
                    layer_norm_first=True,
                    drop_path=0.0,
                )
                for _ in range(config.lambda_encoder_num_layers)
            ]
        )
        self.config = config
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.output_projection = nn.Linear(width, 2 * config.sblu_hidden_size // config.num_frequency_patches)
        self.decay_min = sblu_decay_min(config.sblu_epsilon, config.sblu_step, config.sblu_kernel_size)
        self.frequency_min, self.frequency_max = sblu_frequency_range(config.sblu_step, config.time_patch_size)

    def forward(self, tokens, attention_mask=None):
        """tokens: (B, N, D) with positions; attention_mask: (B, N) token mask (1 = real patch) or None.
        Returns decay α and frequency β, each float32 (B, N, H/F̃)."""
        hidden_states = self.input_projection(tokens)  # (B, N, D) -> (B, N, D/r)
        # the form config._attn_implementation takes: (B, 1, N, N) for eager/SDPA, None when nothing is padded
        attention_mask = create_bidirectional_mask(self.config, hidden_states, attention_mask)
        for layer in self.layers:
            hidden_states, _, _ = layer(hidden_states, attention_mask)
        lambdas = self.output_projection(self.norm(hidden_states)).float()  # (B, N, 2H/F̃)
        decay, frequency = lambdas.chunk(2, dim=-1)  # (B, N, H/F̃) each
        decay = F.softplus(decay) + self.decay_min
        frequency = (self.frequency_max - self.frequency_min) * torch.sigmoid(frequency) + self.frequency_min
        return decay, frequency


def _masked_group_norm(x, norm: nn.GroupNorm, visibility):
    """GroupNorm whose statistics cover only the visible frames of each group (``AaspMaskedGroupNorm``'s dense path).

    x: (B, C, T); visibility: float (B, G or 1, T) with G = norm.num_groups, 1 = real/visible, or None (plain GroupNorm).
    """
    if visibility is None:
        return norm(x)
    dtype = torch.promote_types(x.dtype, torch.float32)  # statistics in float32 also under autocast
    batch_size, channels, num_frames = x.shape
    groups = x.to(dtype).reshape(
        batch_size, norm.num_groups, channels // norm.num_groups, num_frames
    )  # -> (B, G, C/G, T)
    weight = visibility[:, :, None, :].to(dtype)  # (B, G|1, 1, T)
    count = weight.sum(-1, keepdim=True).clamp(min=1.0) * groups.shape[2]  # (B, G|1, 1, 1)
    mean = (groups * weight).sum((2, 3), keepdim=True) / count
    var = ((groups - mean).square() * weight).sum((2, 3), keepdim=True) / count
    groups = (groups - mean) * torch.rsqrt(var + norm.eps)
    x = groups.reshape(batch_size, channels, num_frames)  # (B, G, C/G, T) -> (B, C, T)
    return x * norm.weight.to(dtype)[:, None] + norm.bias.to(dtype)[:, None]


def _per_group(table, group_index):
    """A per-group table (F̃, ...) -> each token's row (B·M, V, ...) for group indices (B·M, V). F.embedding is an
    exact gather whose backward is a fast segment sum (plain indexing's backward is a slow scatter-add on the CPU)."""
    rows = F.embedding(group_index, table.reshape(table.shape[0], -1))  # (F̃, X) -> (B·M, V, X)
    return rows.reshape(*group_index.shape, *table.shape[1:])  # (B·M, V, X) -> (B·M, V, ...)


# The layers of the SBLU branch are modules whose own forward does all the arithmetic with their weights, dense or at
# the visible tokens of masked pre-training (given ``group_index``, each token's frequency group f, (B·M, V)), so
# whatever wraps a module sees every use of its weights: accelerate's offload hooks (which load a module's weights
# only while its forward runs), forward hooks, adapters. On the visible-token path a token meets only its own group's
# block of a grouped layer's weights, gathered per token (_per_group); the numbers are those of the dense layer at
# the token's frames.


class AaspGroupedProjection(nn.Conv1d):
    """B̄ (F -> H) or C̄ (H -> C): a 1×1 convolution with F̃ groups, in its input's dtype (the caller chooses it).

    Dense: x (B, C_in, T) -> (B, C_out, T). Visible tokens: x (B·M, V, C_in/F̃, L), the channels of each token's group
    over L frames, -> (B·M, V, C_out/F̃, L). nn.Conv1d's constructor, so tools that build a layer like it
    (``type(layer)(in_channels, out_channels, kernel_size, ...)``, as PEFT's LoRA does) get a working one.
    """

    def forward(self, x, group_index=None):
        weight = self.weight.to(x.dtype)  # (C_out, C_in/F̃, 1)
        bias = None if self.bias is None else self.bias.to(x.dtype)  # (C_out,)
        if group_index is None:
            return self._conv_forward(x, weight, bias)  # (B, C_in, T) -> (B, C_out, T)
        if self.kernel_size != (1,) or bias is None:
            raise ValueError("the visible-token path needs a 1×1 convolution with a bias")
        outputs = self.out_channels // self.groups  # C_out/F̃
        weight = _per_group(weight.reshape(self.groups, outputs, -1), group_index)  # (B·M, V, C_out/F̃, C_in/F̃)
        bias = _per_group(bias.reshape(self.groups, outputs, 1), group_index)  # (B·M, V, C_out/F̃, 1)
        return weight @ x + bias  # (B·M, V, C_in/F̃, L) -> (B·M, V, C_out/F̃, L)


class AaspMaskedGroupNorm(nn.GroupNorm):
    """GroupNorm (F̃ groups, AaPE (d)) whose statistics cover only the real and visible frames or tokens of a group.

    Dense: x (B, C, T) and ``visibility`` float (B, F̃ or 1, T), 1 where a group's frame counts, or None (plain
    GroupNorm) -> (B, C, T); statistics in float32 also under autocast.
    Visible tokens: x (B·M, V, C̃, P), each token's group's C̃ channels over its P frames, -> (B·M, V, C̃, P), with
    each (view, group)'s statistics over its visible tokens' C̃·P values (biased variance), in x's dtype.
    """

    def forward(self, x, visibility=None, group_index=None):
        if group_index is None:
            if visibility is not None:
                return _masked_group_norm(x, self, visibility)
            dtype = torch.promote_types(x.dtype, torch.float32)  # float32 also from the weights of a .half() model
            return F.group_norm(x.to(dtype), self.num_groups, self.weight.to(dtype), self.bias.to(dtype), self.eps)
        batch_views, num_visible, channels, patch = x.shape
        group_id = (torch.arange(batch_views, device=x.device)[:, None] * self.num_groups + group_index).flatten()
        # group_id: (B·M·V,), the (view, group) of each token
        count = x.new_zeros(batch_views * self.num_groups)  # (B·M·F̃,) values per (view, group)
        count = count.index_add(0, group_id, x.new_ones(group_id.shape)).clamp(min=1.0) * (channels * patch)
        mean = x.new_zeros(count.shape).index_add(0, group_id, x.sum((2, 3)).flatten()) / count
        centred = x - mean[group_id].reshape(batch_views, num_visible, 1, 1)  # (B·M, V, C̃, P)
        variance = x.new_zeros(count.shape).index_add(0, group_id, centred.square().sum((2, 3)).flatten())
        scale = torch.rsqrt(variance / count + self.eps)[group_id]  # (B·M·F̃,) -> (B·M·V,)
        scale = scale.reshape(batch_views, num_visible, 1, 1)  # (B·M·V,) -> (B·M, V, 1, 1)
        gamma = self.weight.to(x.dtype).reshape(self.num_groups, channels, 1)  # (C,) -> (F̃, C̃, 1)
        beta = self.bias.to(x.dtype).reshape(self.num_groups, channels, 1)  # (C,) -> (F̃, C̃, 1)
        gamma, beta = _per_group(gamma, group_index), _per_group(beta, group_index)  # (B·M, V, C̃, 1) each
        return torch.addcmul(beta, centred, scale * gamma)  # γ·x̂ + b: (B·M, V, C̃, P)


class AaspTimePatchify(nn.Conv1d):
    """The time patchifier of AaPE (d): a depthwise convolution over C channels with kernel = stride = P_time.

    Dense: x (B, C, T) -> (B, C, T̃). Visible tokens: x (B·M, V, C̃, P), each token's group's C̃ channels over its P
    frames, -> (B·M, V, C̃), in x's dtype. nn.Conv1d's constructor (see AaspGroupedProjection).
    """

    def forward(self, x, group_index=None):
        if group_index is None:
            return self._conv_forward(x, self.weight.to(x.dtype), self.bias.to(x.dtype))  # (B, C, T) -> (B, C, T̃)
        channels = x.shape[2]  # C̃
        num_groups = self.out_channels // channels  # F̃
        weight = self.weight.to(x.dtype).reshape(num_groups, channels, -1)  # (C, 1, P) -> (F̃, C̃, P)
        bias = self.bias.to(x.dtype).reshape(num_groups, channels)  # (C,) -> (F̃, C̃)
        weight, bias = _per_group(weight, group_index), _per_group(bias, group_index)  # (B·M, V, C̃, P), (B·M, V, C̃)
        return (x * weight).sum(-1) + bias  # (B·M, V, C̃, P) -> (B·M, V, C̃)


class AaspSBLU(nn.Module):
    """Adaptive SBLU branch (paper Sec. SBLU, Eq. 3–4, and Sec. AaPE (2) a–d): log-mel -> X_alias tokens.

    (a) zero-phase FIR high-pass along time (cut-off β_min), (b) B̄: grouped 1×1 conv F -> H (F̃ groups),
    (c) y = 2·Γ·|Σ_k exp(−ΔΛ|k−c|) v[n+k−c]| with per-frame Λ = α + jβ (taps generated on the fly),
    then C̄: grouped 1×1 conv H -> C, (d) GroupNorm (F̃ groups), depthwise time conv (kernel = stride = P_time),
    reshape to C̃ features per (time, frequency) patch. Non-adaptive: Λ is a learnable static (α, β) per channel.
    """

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.config = config
        # Float32 however the model is built (`_keep_in_fp32_modules_strict = ["sblu"]`): transformers keeps the
        # branch float32 when it loads a checkpoint, and a model built under a half default dtype (`_from_config` or
        # `from_config` with `dtype`, torch.set_default_dtype) must hardcode it. A float64 model stays float64.
        dtype = torch.promote_types(torch.get_default_dtype(), torch.float32)
        groups = config.num_frequency_patches
        self.step = config.sblu_step
        self.kernel_size = config.sblu_kernel_size
        self.phase = config.sblu_phase
        # On the CPU |r| runs in cache-sized blocks; True runs the accelerators' single whole-tensor pass (same
        # arithmetic, larger temporaries). Set by the caller on the instance, e.g. the run planner while it measures.
        self.whole_tensor_pass = False
        hidden_size, output_size = config.sblu_hidden_size, config.sblu_output_size  # H, C
        mel_bins = config.num_mel_bins
        self.input_projection = AaspGroupedProjection(mel_bins, hidden_size, 1, groups=groups, dtype=dtype)  # B̄
        self.output_projection = AaspGroupedProjection(hidden_size, output_size, 1, groups=groups, dtype=dtype)  # C̄
        self.norm = AaspMaskedGroupNorm(groups, output_size, dtype=dtype)
        patch = config.time_patch_size  # depthwise, kernel = stride = P_time
        self.time_patchify = AaspTimePatchify(
            output_size, output_size, patch, stride=patch, groups=output_size, dtype=dtype
        )
        self.register_buffer("highpass_kernel", self.compute_highpass_kernel(config).to(dtype), persistent=False)
        self.decay_min = sblu_decay_min(config.sblu_epsilon, config.sblu_step, config.sblu_kernel_size)
        self.frequency_min, self.frequency_max = sblu_frequency_range(config.sblu_step, config.time_patch_size)
        # CODEPATH: AaSP checkpoints (the paper's AaPE) take the adaptive path, (α, β) from the Lambda encoder; the
        # SBLU-adaptivity ablation (`sblu_adaptive=False`) learns one static (α, β) per hidden channel.
        if config.sblu_adaptive:
            self.static_decay = self.static_frequency = None
        else:  # unbounded parameters, mapped like the Lambda encoder's outputs
            self.static_decay = nn.Parameter(torch.zeros(config.sblu_hidden_size, dtype=dtype))
            self.static_frequency = nn.Parameter(torch.zeros(config.sblu_hidden_size, dtype=dtype))

    @staticmethod
    def compute_highpass_kernel(config) -> torch.Tensor:
        """Combined forward–backward (zero-phase) kernel of the 63-tap Hamming high-pass at β_min, float32 (2K'−1,)."""
        frame_rate = 1.0 / config.sblu_step
        cutoff_hz = frame_rate / (2.0 * config.time_patch_size)  # β_min / 2π = 1/(2·Δ·S_time)
        taps = highpass_fir_taps(config.sblu_highpass_num_taps, cutoff_hz, frame_rate)
        return torch.from_numpy(zero_phase_kernel(taps)).float()

    def stem_dtype(self, mel):
        """The dtype of the high-pass, B̄ and |r|: float32 for half/bfloat16/float32 models and inputs, float64 when
        the model or the input is float64 (so a float64 model is float64 end to end)."""
        return compute_dtype(mel, self.input_projection.weight)

    def static_parameters(self):
        """Bounded static (α, β), each (H,), for the non-adaptive SBLU; float32 (float64 in a float64 model)."""
        dtype = torch.promote_types(self.static_decay.dtype, torch.float32)
        decay = F.softplus(self.static_decay.to(dtype)) + self.decay_min
        frequency = (self.frequency_max - self.frequency_min) * torch.sigmoid(self.static_frequency.to(dtype))
        return decay, frequency + self.frequency_min

    def forward(self, mel, decay=None, frequency=None, visibility=None, visible_indices=None):
        """X_alias tokens of a log-mel, densely (fine-tuning, inference) or at each view's visible tokens only (masked
        pre-training, ``visible_indices`` given).

        mel: (B, F, T). decay, frequency: the SBLU's (α, β), or None for the non-adaptive SBLU (its static Λ):
            dense: float32 (B, H, T), one (α, β) per hidden channel and frame;
            visible tokens: float32 (B·M, V, H/F̃), one (α, β) per visible token and channel of its group.
        visibility: dense only, float (B, F̃ or 1, T) or None — 1 where a frequency group's frame is real and visible.
        visible_indices: (B·M, V) visible token indices (time-major, t·F̃ + f) of M views per clip, or None.
        Returns X_alias tokens: dense (B, N, C̃); visible tokens float32 (B·M, V, C̃) (float64 in a float64 model).

        Dense: hidden or padded (group, frame) positions are zeroed at the input and after B̄, exactly like the zero
        padding at a clip's end, and left out of the GroupNorm statistics: a padded clip gives the same features as
        the unpadded one, and with per-group visibility a visible token's features carry nothing from hidden patches.

        Visible tokens (``config.student_stem_input="masked"``, the default): the dense result on each view's mel with
        per-group visibility, taken at the visible tokens (a test checks this in float64). Only the high-pass runs on
        the whole masked view (one FFT, no gradient); from there on everything is token-local: B̄ on a window of ±c
        frames around the token's P_time frames, |r| at those P_time frames (sblu_token_magnitude, one kernel per
        token and hidden channel), C̄ with the token's group weights, GroupNorm statistics gathered over each
        (view, group)'s visible tokens, and the time patchifier. Hidden tokens cost nothing past the high-pass: with
        80 % masking, about a fifth of the dense stem per view. All of it runs with autocast off: B̄, |r|, C̄ and the
        statistics in float32 (float64 in a float64 model).

        ``config.student_stem_input="full"`` (EAT's order): the high-pass runs once per clip on the unmasked mel,
        shared by its M views, and the windows keep the real hidden frames (only frames outside the clip are zero),
        so a visible token sees its hidden neighbours; the rest is the same token-local path. The result is the
        dense stem on the unmasked clip, with the visible tokens' (α, β) and GroupNorm statistics over each
        (view, group)'s visible tokens (the hidden tokens' features are never computed), taken at the visible
        tokens (a test checks this against a float64 dense computation).

        Token-path steps (methods below): the visibility of every (view, group, frame); (a) high-pass and the
        windows of ±c frames around each visible token; (c) 2Γ|r|. B̄ (b), C̄ and GroupNorm and the time patchifier
        (d) are the dense path's modules, called with each token's frequency group.
        """
        if visible_indices is not None:
            if visibility is not None:
                raise ValueError("give visibility (dense) or visible_indices (visible tokens only), not both")
            return self._forward_visible_tokens(mel, visible_indices, decay, frequency)
        batch_size, _, num_frames = mel.shape
        if decay is None:
            static_decay, static_frequency = self.static_parameters()
            decay = static_decay[None, :, None].expand(batch_size, -1, num_frames)  # (H,) -> (B, H, T)
            frequency = static_frequency[None, :, None].expand(batch_size, -1, num_frames)  # (H,) -> (B, H, T)

        # The SBLU itself stays in float32 under autocast and in a bf16/fp16 model: its recurrence kernel decays to
        # ε over K taps, which bf16's 8-bit mantissa cannot resolve. A float64 model computes it in float64.
        dtype = self.stem_dtype(mel)
        with torch.autocast(device_type=mel.device.type, enabled=False):
            mel = mel.to(dtype)
            if visibility is not None:
                visibility = visibility.to(dtype)
                bins_per_group = self.config.frequency_patch_size if visibility.shape[1] > 1 else 1
                mel = mel * visibility.repeat_interleave(bins_per_group, dim=1)  # (B, F̃|1, T) -> (B, F|1, T)
            highpassed = zero_phase_highpass(mel, self.highpass_kernel)  # (a) (B, F, T)
            values = self.input_projection(highpassed)  # (b) B̄, float32 also in a bf16 model: (B, F, T) -> (B, H, T)
            if visibility is not None:
                channels_per_group = (
                    self.config.sblu_hidden_size // self.config.num_frequency_patches if visibility.shape[1] > 1 else 1
                )
                values = values * visibility.repeat_interleave(channels_per_group, dim=1)  # -> (B, H|1, T)
            magnitude = sblu_magnitude(
                values, decay, frequency, self.step, self.kernel_size, self.phase, self.whole_tensor_pass
            )  # (c)
            response = 2.0 * sblu_gamma(decay, frequency, self.step) * magnitude  # 2Γ|r|, (B, H, T)

        # C̄, the GroupNorm and the time patchifier compute in float32 also when a plain .half() cast their weights
        response = response.to(torch.promote_types(self.output_projection.weight.dtype, torch.float32))
        features = self.output_projection(response)  # C̄: (B, H, T) -> (B, C, T)
        features = self.norm(features, visibility)  # (d)
        features = self.time_patchify(features)  # (B, C, T) -> (B, C, T̃)
        num_groups = self.config.num_frequency_patches
        num_time_patches = features.shape[-1]
        features = features.reshape(batch_size, num_groups, -1, num_time_patches)  # (B, C, T̃) -> (B, F̃, C̃, T̃)
        features = features.permute(0, 3, 1, 2)  # (B, F̃, C̃, T̃) -> (B, T̃, F̃, C̃)
        return features.reshape(batch_size, num_time_patches * num_groups, -1)  # (B, T̃, F̃, C̃) -> (B, N, C̃)

    def _forward_visible_tokens(self, mel, views, decay=None, frequency=None):
        """The visible-token path of ``forward`` (see there): views (B·M, V) -> (B·M, V, C̃)."""
        num_groups = self.config.num_frequency_patches
        group_index = views % num_groups  # (B·M, V): each token's frequency group f
        visibility = self._view_visibility(views, mel.shape[-1])  # (B·M, F̃, T)

        with torch.autocast(device_type=mel.device.type, enabled=False):
            if decay is None:  # non-adaptive: the static (α, β) of each token's group channels
                static_decay, static_frequency = self.static_parameters()
                decay = _per_group(static_decay.reshape(num_groups, -1), group_index)  # (H,) -> (B·M, V, H/F̃)
                frequency = _per_group(static_frequency.reshape(num_groups, -1), group_index)  # (B·M, V, H/F̃)
            windows, window_visible = self._token_windows(mel, views, visibility)  # (a)
            values = self.input_projection(windows, group_index)  # (b) B̄: -> (B·M, V, H/F̃, P + 2c)
            values = values * window_visible[:, :, None]  # v: frames that do not count (_token_windows) zeroed
            response = self._token_response(values, decay, frequency)  # (c) 2Γ|r|: (B·M, V, H/F̃, P)
            response = response.to(torch.promote_types(self.output_projection.weight.dtype, torch.float32))
            features = self.output_projection(response, group_index)  # C̄: (B·M, V, H/F̃, P) -> (B·M, V, C̃, P)
            features = self.norm(features, group_index=group_index)  # (d) (B·M, V, C̃, P)
            return self.time_patchify(features, group_index)  # (B·M, V, C̃, P) -> (B·M, V, C̃)

    def _view_visibility(self, views, num_frames):
        """1 where a (view, frequency group, frame) belongs to a visible token: float (B·M, F̃, T)."""
        batch_views = views.shape[0]
        num_time_patches = num_frames // self.config.time_patch_size
        token_visible = views.new_zeros(
            batch_views, num_time_patches * self.config.num_frequency_patches, dtype=torch.bool
        )
        token_visible = token_visible.scatter(1, views, True)  # (B·M, N)
        token_visible = token_visible.reshape(batch_views, num_time_patches, -1)  # (B·M, N) -> (B·M, T̃, F̃)
        return (
            token_visible.transpose(1, 2).repeat_interleave(self.config.time_patch_size, dim=-1).float()
        )  # -> (B·M, F̃, T)

    def _token_windows(self, mel, views, visibility):
        """(a) The high-passed mel around each visible token: its group's F/F̃ bins on the token's P_time frames and
        ±c frames either side (zeros outside the clip), and which of those frames count (hidden ones do not under
        "masked"). mel (B, F, T), views (B·M, V), visibility (B·M, F̃, T) ->
        windows float32 or float64 (stem_dtype) (B·M, V, F/F̃, P + 2c), window_visible (B·M, V, P + 2c)."""
        num_groups = self.config.num_frequency_patches
        bins = self.config.frequency_patch_size  # F/F̃ mel bins per frequency group
        half = (self.kernel_size - 1) // 2  # c
        width = self.config.time_patch_size + 2 * half  # window length P + 2c
        batch_views = views.shape[0]
        num_frames = mel.shape[-1]
        num_views = batch_views // mel.shape[0]
        dtype = self.stem_dtype(mel)
        time_index, group_index = views // num_groups, views % num_groups  # (B·M, V) each
        rows = torch.arange(batch_views, device=views.device)[:, None, None]  # (B·M, 1, 1)
        # CODEPATH: AaSP pre-training (default "masked") runs the stem on each view's visible frames; "full" is EAT's
        # order (the stem on the unmasked clip, then masked), a fidelity option of pre-training only.
        if self.config.student_stem_input == "full":
            # the unmasked clip high-passed once and shared by its M views; windows keep the hidden frames
            highpassed = zero_phase_highpass(mel.to(dtype), self.highpass_kernel)  # (B, F, T); no gradient needed
            source_rows = rows // num_views  # view b·M + m reads clip b, (B·M, 1, 1)
            window_visible = torch.ones_like(visibility)  # (B·M, F̃, T): every frame of the clip counts
        else:
            # each view's mel with its hidden patches zeroed, high-passed along time
            mel = mel.to(dtype).repeat_interleave(num_views, dim=0)  # (B, F, T) -> (B·M, F, T)
            mel = mel.reshape(batch_views, num_groups, bins, num_frames)  # -> (B·M, F̃, F/F̃, T)
            mel = (mel * visibility[:, :, None, :]).reshape(batch_views, -1, num_frames)  # -> (B·M, F, T)
            highpassed = zero_phase_highpass(mel, self.highpass_kernel)  # (B·M, F, T); no gradient needed
            source_rows = rows
            window_visible = visibility  # (B·M, F̃, T)

        frames = time_index[..., None] * self.config.time_patch_size + torch.arange(
            width, device=views.device
        )  # (B·M, V, P+2c)
        padded = F.pad(highpassed, (half, half))  # (B|B·M, F, T) -> (B|B·M, F, T + 2c)
        padded = padded.reshape(padded.shape[0], num_groups, bins, -1).transpose(2, 3)
        # (B|B·M, F, T + 2c) -> (B|B·M, F̃, F/F̃, T + 2c) -> (B|B·M, F̃, T + 2c, F/F̃)
        windows = padded[source_rows, group_index[..., None], frames].transpose(-1, -2)  # (B·M, V, F/F̃, P + 2c)
        window_visible = F.pad(window_visible, (half, half))[rows, group_index[..., None], frames]  # (B·M, V, P + 2c)
        return windows, window_visible

    def _token_response(self, values, decay, frequency):
        """(c) 2Γ|r| at each token's P_time frames, one kernel per (token, hidden channel).
        values (B·M, V, H/F̃, P + 2c); decay, frequency (B·M, V, H/F̃) -> float32 (B·M, V, H/F̃, P)."""
        batch_views, num_visible, channels, width = values.shape
        windows = values.reshape(-1, width)  # (B·M, V, H/F̃, P + 2c) -> (B·M·V·H/F̃, P + 2c)
        decay, frequency = decay.reshape(-1), frequency.reshape(-1)  # (B·M, V, H/F̃) -> (B·M·V·H/F̃,)
        magnitude = sblu_token_magnitude(windows, decay, frequency, self.step, self.kernel_size, self.phase)
        response = 2.0 * sblu_gamma(decay, frequency, self.step)[:, None] * magnitude  # (B·M·V·H/F̃, P)
        return response.reshape(batch_views, num_visible, channels, -1)  # (B·M·V·H/F̃, P) -> (B·M, V, H/F̃, P)


class AaspEmbeddings(nn.Module):
    """Patch embedding stage: SPE (16×16 conv + fixed positions) or AaPE (SPE + Lambda encoder + SBLU + fusion).

    Input (B, T, F) normalised log-mel; output (B, N, D) patch tokens with positions, time-major.
    The position table covers `num_frames` (608); shorter inputs truncate it, longer ones interpolate it linearly
    along time only (paper Sec. Training Setup).
    """

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.config = config
        # X_spec: the input is (B, 1, T, F), so the kernel is (P_time, P_freq) as in EAT.
        self.projection = nn.Conv2d(
            1,
            config.hidden_size,
            kernel_size=(config.time_patch_size, config.frequency_patch_size),
            stride=(config.time_patch_size, config.frequency_patch_size),
        )
        # Fixed sin-cos positions with a zero row for CLS, a non-trainable parameter as in AudioMAE.
        self.position_embeddings = nn.Parameter(
            torch.zeros(1, 1 + config.num_patches, config.hidden_size), requires_grad=False
        )
        # CODEPATH: AaSP checkpoints (the paper's AaPE) build the Lambda encoder and the SBLU branch; converted EAT
        # checkpoints and the SPE baseline (`patch_embedding="spe"`) have the patch projection only. Within AaPE the
        # SBLU-adaptivity ablation (`sblu_adaptive=False`) has no Lambda encoder.
        if config.patch_embedding == "aape":
            # CODEPATH: AaSP checkpoints have a Lambda encoder; the SBLU-adaptivity ablation has none.
            self.lambda_encoder = AaspLambdaEncoder(config) if config.sblu_adaptive else None
            self.sblu = AaspSBLU(config)
            alias_size = config.sblu_output_size // config.num_frequency_patches  # C̃
            self.spec_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.alias_norm = nn.LayerNorm(alias_size, eps=config.layer_norm_eps)
            self.fusion = nn.Linear(config.hidden_size + alias_size, config.hidden_size)  # f_fuse

    def compute_position_embeddings(self) -> torch.Tensor:
        """Float32 (1, 1 + N, D): zero row for CLS, then the sin-cos table."""
        table = sincos_position_embeddings(
            self.config.hidden_size, self.config.num_frequency_patches, self.config.num_time_patches
        )  # (N, D)
        return torch.cat([torch.zeros(1, self.config.hidden_size, dtype=table.dtype), table])[None].float()

    def patch_positions(self, num_time_patches: int, valid_time_patches: torch.Tensor | None = None) -> torch.Tensor:
        """Positions (B or 1, T̃'·F̃, D) for an input with T̃' time patches.

        Each clip uses its own length (`valid_time_patches`, (B,), default T̃'): a clip that fits the table takes its
        first rows; a longer clip gets the table linearly interpolated along time (F.interpolate's "linear",
        align_corners=False, mapping). Per-clip lengths make a padded batch give every clip the positions it gets
        alone. Rows past a clip's length (padding) are clamped copies.
        """
        table = self.position_embeddings[0, 1:].reshape(self.config.num_time_patches, -1)  # (N, D) -> (T̃, F̃·D)
        target = torch.arange(num_time_patches, device=table.device, dtype=torch.float32)[None]  # (1, T̃')
        if valid_time_patches is None:
            length = torch.full((1, 1), num_time_patches, device=table.device, dtype=torch.float32)
        else:
            length = valid_time_patches.to(device=table.device, dtype=torch.float32)[:, None]  # (B, 1)
        stretched = (target + 0.5) * (self.config.num_time_patches / length) - 0.5
        source = torch.where(length > self.config.num_time_patches, stretched, target).clamp(
            0, self.config.num_time_patches - 1
        )
        low = source.floor().long()  # (B, T̃')
        high = (low + 1).clamp(max=self.config.num_time_patches - 1)
        weight = (source - low)[..., None].to(table.dtype)  # (B, T̃', 1)
        rows = table[low] * (1 - weight) + table[high] * weight  # (B, T̃', F̃·D)
        return rows.reshape(rows.shape[0], -1, self.config.hidden_size)  # (B, T̃', F̃·D) -> (B, T̃'·F̃, D)

    def forward(self, input_values, frame_mask=None, attention_mask=None, visible_indices=None):
        """input_values: (B, T, F), T a multiple of P_time; frame_mask: (B, T) bool or None;
        attention_mask: (B, N) token mask for the Lambda encoder (1 = real patch) or None;
        visible_indices: (B, M, V) long or None — masked pre-training: embed only the V visible tokens of each of
        M views per clip (the Lambda encoder attends among them only).
        Returns (B, N, D) patch tokens with positions, or (B·M, V, D) with `visible_indices`."""
        batch_size, num_frames, _ = input_values.shape
        num_time_patches = num_frames // self.config.time_patch_size
        valid_time_patches = None
        if frame_mask is not None:  # (B, T) -> (B, T̃, P_time) -> (B,)
            valid_time_patches = frame_mask.reshape(batch_size, num_time_patches, -1).any(-1).sum(-1)
        positions = self.patch_positions(num_time_patches, valid_time_patches).to(input_values.dtype)  # (B|1, N, D)
        positions = positions.expand(batch_size, -1, -1)  # (B, N, D)

        spec = self.projection(input_values.unsqueeze(1))  # (B, T, F) -> (B, 1, T, F) -> (B, D, T̃, F̃)
        spec = spec.flatten(2).transpose(1, 2)  # (B, D, T̃, F̃) -> (B, N, D), time-major
        mel = input_values.transpose(1, 2)  # (B, T, F) -> (B, F, T)
        visibility = None if frame_mask is None else frame_mask[:, None, :]  # (B, 1, T)

        views = None
        if visible_indices is not None:
            num_views = visible_indices.shape[1]
            views = visible_indices.reshape(batch_size * num_views, -1)  # (B, M, V) -> (B·M, V)
            spec = self._take(spec.repeat_interleave(num_views, dim=0), views)  # (B·M, V, D)
            positions = self._take(positions.repeat_interleave(num_views, dim=0), views)  # (B·M, V, D)
        # CODEPATH: converted EAT checkpoints and the SPE baseline stop here; AaSP checkpoints (AaPE) fuse the SBLU branch.
        if self.config.patch_embedding == "spe":
            return spec + positions

        decay = frequency = None
        if self.lambda_encoder is not None:
            decay, frequency = self.lambda_encoder(spec + positions, attention_mask)  # (B', N|V, H/F̃) each
        if views is not None:  # masked pre-training: only the visible tokens' SBLU features are computed
            alias = self.sblu(mel, decay, frequency, visible_indices=views)  # (B·M, V, C̃)
        else:
            if decay is not None:
                decay = self._lambda_to_frames(decay)  # (B, N, H/F̃) -> (B, H, T)
                frequency = self._lambda_to_frames(frequency)  # (B, H, T)
            alias = self.sblu(mel, decay, frequency, visibility)  # (B, N, C̃)
        fused = self.fusion(torch.cat([self.spec_norm(spec), self.alias_norm(alias.to(spec.dtype))], dim=-1))
        return fused + positions  # (B', N|V, D)

    @staticmethod
    def _take(tokens, indices):
        """(B', N, X) gathered at (B', V) token indices -> (B', V, X)."""
        return tokens.gather(1, indices[..., None].expand(-1, -1, tokens.shape[-1]))

    def _lambda_to_frames(self, per_token):
        """(B, N, H/F̃) per-token parameters -> (B, H, T): token (t, f) drives hidden channels f·H/F̃ ... (f+1)·H/F̃−1
        (the channels B̄ fills from frequency patch f) for the P_time frames of time patch t."""
        batch_size, num_tokens, per_group = per_token.shape
        num_time_patches = num_tokens // self.config.num_frequency_patches
        grid = per_token.reshape(
            batch_size, num_time_patches, self.config.num_frequency_patches, per_group
        )  # (B, T̃, F̃, H/F̃)
        grid = grid.permute(0, 2, 3, 1)  # (B, T̃, F̃, H/F̃) -> (B, F̃, H/F̃, T̃)
        grid = grid.reshape(
            batch_size, self.config.num_frequency_patches * per_group, num_time_patches
        )  # -> (B, H, T̃)
        return grid.repeat_interleave(self.config.time_patch_size, dim=-1)  # (B, H, T̃) -> (B, H, T)

def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Reference attention. query/key/value: (B, heads, N, d); attention_mask: None, or as transformers'
    `create_bidirectional_mask` builds it for "eager": additive float (B, 1, N, N), 0 = attend, dtype min = padding
    (a bool mask, True = attend, is accepted too)."""
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, heads, N, N)
    if attention_mask is not None and attention_mask.ndim == 2:  # a (B, N) padding mask, 1 = real (flash's form)
        attention_mask = attention_mask.bool()[:, None, None, :]  # (B, N) -> (B, 1, 1, N)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
    elif attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()  # (B, N, heads, d)
    return attn_output, attn_weights


class AaspSelfAttention(nn.Module):
    """Multi-head self-attention through transformers' attention interface: `config._attn_implementation` (SDPA by
    default; eager, flex; `model.set_attn_implementation(...)` switches it at run time). Attention weights are only
    computed by the eager path, so `output_attentions=True` (passed down by the encoder's forward with the other
    keyword arguments) runs this call eagerly."""

    # Sizes as arguments: one class serves the encoder (D wide), the Lambda encoder (D/r wide, its own heads) and,
    # for the MLP, the predictor (P wide); the config gives what they share (attention implementation, dropout, eps).
    # trf-ignore: TRF029
    def __init__(self, config: AaspConfig, hidden_size: int, num_heads: int):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_probs_dropout_prob
        self.is_causal = False
        self.query = nn.Linear(hidden_size, hidden_size, bias=config.qkv_bias)
        self.key = nn.Linear(hidden_size, hidden_size, bias=config.qkv_bias)
        self.value = nn.Linear(hidden_size, hidden_size, bias=config.qkv_bias)
        self.output = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, attention_mask=None, **kwargs: Unpack[TransformersKwargs]):
        batch_size, seq_len, _ = hidden_states.shape
        head_shape = (batch_size, seq_len, self.num_heads, self.head_dim)
        query = self.query(hidden_states).view(head_shape).transpose(1, 2)  # (B, N, D) -> (B, heads, N, d)
        key = self.key(hidden_states).view(head_shape).transpose(1, 2)  # (B, N, D) -> (B, heads, N, d)
        value = self.value(hidden_states).view(head_shape).transpose(1, 2)  # (B, N, D) -> (B, heads, N, d)

        attention_interface: Callable = eager_attention_forward
        if not kwargs.get("output_attentions", False):
            attention_interface = attention_function(self)
        attn_output, attn_weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            is_causal=False,
        )
        attn_output = attn_output.reshape(batch_size, seq_len, -1)  # (B, N, heads, d) -> (B, N, D)
        return self.output(attn_output), attn_weights


def attention_function(self: nn.Module) -> Callable:
    """The attention function transformers registers for the attention module's `self.config._attn_implementation`
    ("sdpa", "flex_attention", "flash_attention_2", ...), `eager_attention_forward` for "eager" or None, through the
    registry's `get_interface`, which refuses a name it does not hold.

    Spelled as transformers' own attention classes spell it, with `self` the attention module: transformers lets
    `set_attn_implementation` switch a model at run time only when its modeling file holds
    `ALL_ATTENTION_FUNCTIONS.get_interface(`: it reads the file's source to tell whether the attention classes look the
    function up per call."""
    return ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)


class AaspMLP(nn.Module):
    # Sizes as arguments: one class serves the encoder (D wide), the Lambda encoder (D/r wide, its own heads) and,
    # for the MLP, the predictor (P wide); the config gives what they share (attention implementation, dropout, eps).
    # trf-ignore: TRF029
    def __init__(self, config: AaspConfig, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size)
        self.act = ACT2FN[config.hidden_act]
        self.fc2 = nn.Linear(intermediate_size, hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states):
        return self.dropout(self.fc2(self.dropout(self.act(self.fc1(hidden_states)))))


class AaspDropPath(nn.Module):
    """Stochastic depth per sample (identity at eval or rate 0)."""

    def __init__(self, drop_prob: float):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1.0 - self.drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class AaspBlock(GradientCheckpointingLayer):
    """A ViT block. `layer_norm_first=False` is EAT's post-norm block (x = LN(x + attn(x)); x = LN(x + mlp(x)));
    True is the pre-norm ViT block (x = x + attn(LN(x)); x = x + mlp(LN(x))).

    Returns the block output, the attention weights (None unless asked for) and the FFN output `mlp(·)` before
    drop path, the residual add and (post-norm) the second LayerNorm: data2vec 2.0 / EAT's `ffn_targets` (the `t`
    of AltBlock), used for `config.target_layer="ffn"`. `AaspLayer` (the encoder's blocks) and
    `AaspLambdaEncoderLayer` are this block under two names, so that transformers' output recording
    (`_can_record_outputs`) takes hidden states and attentions from the encoder's blocks only.
    """

    # Sizes as arguments: one class serves the encoder (D wide), the Lambda encoder (D/r wide, its own heads) and,
    # for the MLP, the predictor (P wide); the config gives what they share (attention implementation, dropout, eps).
    # trf-ignore: TRF029
    def __init__(self, config, hidden_size, num_heads, intermediate_size, layer_norm_first, drop_path):
        super().__init__()
        self.layer_norm_first = layer_norm_first
        self.attention = AaspSelfAttention(config, hidden_size, num_heads)
        self.norm1 = nn.LayerNorm(hidden_size, eps=config.layer_norm_eps)
        self.mlp = AaspMLP(config, hidden_size, intermediate_size)
        self.norm2 = nn.LayerNorm(hidden_size, eps=config.layer_norm_eps)
        self.drop_path = AaspDropPath(drop_path)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask=None, **kwargs: Unpack[TransformersKwargs]):
        if self.layer_norm_first:
            attn_output, attn_weights = self.attention(self.norm1(hidden_states), attention_mask, **kwargs)
            hidden_states = hidden_states + self.drop_path(self.dropout(attn_output))
            ffn_output = self.mlp(self.norm2(hidden_states))
            hidden_states = hidden_states + self.drop_path(ffn_output)
        else:
            attn_output, attn_weights = self.attention(hidden_states, attention_mask, **kwargs)
            hidden_states = self.norm1(hidden_states + self.drop_path(self.dropout(attn_output)))
            ffn_output = self.mlp(hidden_states)
            hidden_states = self.norm2(hidden_states + self.drop_path(ffn_output))
        return hidden_states, attn_weights, ffn_output


class AaspLayer(AaspBlock):
    """A block of the encoder (EAT's post-norm ViT-B block in the paper's configuration)."""


class AaspLambdaEncoderLayer(AaspBlock):
    """A pre-norm block of the Lambda encoder (paper Sec. AaPE (1))."""


def _frame_mask_to_token_mask(frame_mask: torch.Tensor, time_patch_size: int, num_frequency_patches: int):
    """(B, T) frame mask -> (B, N) token mask: a patch is real when any of its frames is real."""
    batch_size, num_frames = frame_mask.shape
    patch_mask = frame_mask.reshape(batch_size, num_frames // time_patch_size, time_patch_size).any(-1)  # (B, T̃)
    return patch_mask.repeat_interleave(num_frequency_patches, dim=1)  # (B, T̃) -> (B, N), time-major


@auto_docstring
class AaspPreTrainedModel(PreTrainedModel):
    config_class = AaspConfig
    config: AaspConfig
    base_model_prefix = "aasp"
    main_input_name = "input_values"
    input_modalities = ("audio",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["AaspEmbeddings", "AaspLayer"]
    _keep_in_fp32_modules_strict = [
        "sblu"
    ]  # the SBLU branch's small convs and norm stay float32 in bf16/fp16 checkpoints
    # Attention implementations: every block attends bidirectionally with a key-padding mask only (padded patches;
    # none in masked pre-training, where the student encodes only visible tokens), which eager, SDPA, flex and
    # flash attention all express through transformers' `create_bidirectional_mask`. Flash attention is declared
    # for that reason (its padded path drops the padded tokens' queries, whose outputs no head reads) and is not
    # tested here: it needs a CUDA GPU.
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    # transformers' output recording (`capture_outputs` on AaspModel.forward): hidden states (the embedding output,
    # then each encoder block's output), attention weights and FFN outputs are read from the encoder blocks.
    _can_record_outputs = {
        "hidden_states": OutputRecorder(AaspLayer, index=0),
        "attentions": OutputRecorder(AaspLayer, index=1),
        "ffn_outputs": OutputRecorder(AaspLayer, index=2),
    }

    @torch.no_grad()
    def _init_weights(self, module):
        """Draw a new model's weights as `config.initialization` says ("trunc_normal" or EAT's "eat"; the two schemes
        and where EAT's comes from: docs/model.md, "Initialisation") and recompute the fixed tensors."""
        std = self.config.initializer_range
        # CODEPATH: a new model draws its weights as `config.initialization` says ("trunc_normal", every measurement
        # here, or EAT's "eat"); a loaded checkpoint's weights replace them.
        eat = self.config.initialization == "eat"
        if isinstance(module, nn.Linear) and eat:
            init.normal_(module.weight, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            init.trunc_normal_(module.weight, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        else:  # transformers' own: LayerNorm and GroupNorm weight 1, bias 0 (no random draw, so the stream is unchanged)
            super()._init_weights(module)
        if isinstance(module, AaspEmbeddings):  # fixed tensors are recomputed (models are built on meta devices)
            init.copy_(module.position_embeddings, module.compute_position_embeddings())
            if eat:  # Xavier-uniform on the kernel flattened to (D, P_time·P_freq); PyTorch's default bias
                fan_out, fan_in = module.projection.weight.shape[0], module.projection.weight[0].numel()
                bound = (6.0 / (fan_in + fan_out)) ** 0.5
                init.uniform_(module.projection.weight, -bound, bound)
                init.uniform_(module.projection.bias, -(fan_in**-0.5), fan_in**-0.5)
        elif isinstance(module, AaspSBLU):
            init.copy_(module.highpass_kernel, module.compute_highpass_kernel(self.config))
            if module.static_decay is not None:
                init.zeros_(module.static_decay)
                # spread the static frequencies over the alias-prone band within each frequency group
                per_group = self.config.sblu_hidden_size // self.config.num_frequency_patches
                targets = torch.linspace(0.05, 0.95, per_group).repeat(self.config.num_frequency_patches)
                init.copy_(module.static_frequency, torch.logit(targets))
        elif isinstance(module, AaspModel):
            if eat:
                init.normal_(module.cls_token, std=1.0)
            else:
                init.trunc_normal_(module.cls_token, std=std)

    # Fields that define the trained network (its weights' shapes or what they compute). An explicit `config=`
    # passed to `from_pretrained` must agree with the checkpoint on these; heads, dropout and pooling may differ.
    # Why transformers' own loading cannot carry this: it compares only tensor shapes, and several of these fields
    # change what the same tensors compute (sblu_phase, sblu_step, sblu_epsilon, frequency_patch_size with the same
    # products, layer_norm_first, hidden_act), so a wrong config would load silently.
    _checkpoint_fields = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_act",
        "qkv_bias",
        "layer_norm_first",
        "num_mel_bins",
        "num_frames",
        "frequency_patch_size",
        "time_patch_size",
        "patch_embedding",
        "sblu_kernel_size",
        "sblu_hidden_size",
        "sblu_output_size",
        "sblu_epsilon",
        "sblu_step",
        "sblu_adaptive",
        "sblu_phase",
        "sblu_highpass_num_taps",
        "lambda_encoder_reduction",
        "lambda_encoder_num_layers",
        "lambda_encoder_num_attention_heads",
        "lambda_encoder_mlp_ratio",
    )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        """As transformers', and an explicit `config=` (an `AaspConfig`) that disagrees with the checkpoint's own
        config on a field of `_checkpoint_fields` raises a ValueError naming the field, before any weight is read
        (transformers alone reports only tensor shapes, or loads an SPE config over AaPE weights with a warning).
        `ignore_mismatched_sizes=True` skips the check (deliberate re-initialisation)."""
        if isinstance(config, AaspConfig) and not kwargs.get("ignore_mismatched_sizes", False):
            saved = cls._saved_config_dict(pretrained_model_name_or_path, kwargs)
            # CODEPATH: every AaSP checkpoint is compared field by field; a folder of another model type is left to
            # transformers' own loading, which reports the mismatch.
            if saved.get("model_type") == config.model_type:
                saved = AaspConfig.from_dict(saved)
                differ = [
                    f"{name}={getattr(config, name)!r} (checkpoint: {getattr(saved, name)!r})"
                    for name in cls._checkpoint_fields
                    if getattr(config, name) != getattr(saved, name)
                ]
                if differ:
                    raise ValueError(
                        f"The config passed to {cls.__name__}.from_pretrained does not match the checkpoint "
                        f"{pretrained_model_name_or_path}: {', '.join(differ)}. Leave out `config=` to use the "
                        f"checkpoint's own, or set these fields to the checkpoint's values; pass "
                        f"ignore_mismatched_sizes=True only to re-initialise the mismatching weights on purpose."
                    )
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *model_args, config=config, **kwargs)
        except Exception as error:  # safetensors' own message ("incomplete metadata") names neither file nor cause
            if type(error).__name__ != "SafetensorError":
                raise
            raise OSError(
                f"Could not read the weights of {pretrained_model_name_or_path} ({error}): its model.safetensors is "
                f"truncated or corrupt, e.g. an interrupted copy or download. Copy, download or save it again."
            ) from error

    @staticmethod
    def _saved_config_dict(pretrained_model_name_or_path, kwargs) -> dict:
        """The config.json next to the weights being loaded, for the cross-check of `from_pretrained`, or {} when
        there is none to compare with. It reads only what it was given: nothing for None (weights from a
        `state_dict=`), the folder's own config.json for a local folder (never the network, whatever the name looks
        like), and the Hub only for a repository id, whose weights `from_pretrained` fetches from there anyway."""
        if pretrained_model_name_or_path is None:
            return {}
        path = os.path.join(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "")
        if os.path.isdir(path):
            config_file = os.path.join(path, "config.json")
            if not os.path.isfile(config_file):
                return {}
            try:
                return AaspConfig._dict_from_json_file(config_file)
            except (OSError, ValueError):  # an unreadable config.json: transformers' own loading reports it
                return {}
        if os.path.exists(str(pretrained_model_name_or_path)):  # a single weights file: no config beside it to read
            return {}
        hub_kwargs = {
            k: kwargs[k]
            for k in ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder", "proxies")
            if k in kwargs
        }
        try:
            saved, _ = AaspConfig.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)
        except (OSError, ValueError, TypeError):  # no config.json next to the weights: nothing to compare with
            return {}
        return saved

    def save_pretrained(self, save_directory, *args, **kwargs):
        """As transformers', and when the code ships with the weights (`auto_map`), every checkpoint maps `AutoModel`
        to the bare encoder and `AutoModelForAudioClassification` to the classifier (a pre-training checkpoint also
        keeps its `AutoModelForPreTraining`), so `AutoModelForAudioClassification.from_pretrained(encoder,
        trust_remote_code=True)` fine-tunes an exported encoder (transformers' own audio-classification script)."""
        # Why not register_for_auto_class alone: it maps only the saving class, and an encoder exported by
        # pre-training must also load as AutoModelForAudioClassification for transformers' own fine-tuning script.
        if self._auto_class is not None:
            auto_map = dict(getattr(self.config, "auto_map", None) or {})
            module = AaspModel.__module__.split(".")[-1]
            auto_map.setdefault("AutoModel", f"{module}.{AaspModel.__name__}")
            auto_map.setdefault("AutoModelForAudioClassification", f"{module}.{AaspForAudioClassification.__name__}")
            self.config.auto_map = auto_map
            # transformers' own audio-classification pipeline downmixes a stereo file to (L + R) / sqrt(2) (ffmpeg's
            # -ac 1), the feature extractor to (L + R) / 2; the checkpoint names its own pipeline, which averages the
            # channels of the files it decodes. The relative import makes save_pretrained ship pipeline_aasp.py too;
            # it is made here, not at the top, so that a checkpoint loaded as remote code does not import
            # transformers' pipelines.
            from .pipeline_aasp import CUSTOM_PIPELINES

            self.config.custom_pipelines = CUSTOM_PIPELINES
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:  # the installed package's configs never hold the entry (see AaspConfig): only the saved file does
            if not _LOADED_AS_REMOTE_CODE and hasattr(self.config, "custom_pipelines"):
                del self.config.custom_pipelines


@auto_docstring(
    custom_intro="""
    AaSP encoder: patch embedding (SPE/AaPE) -> prepend CLS -> LayerNorm -> ViT blocks (EAT's layout, which the
    paper follows: fixed 2-D sin-cos positions, CLS without position, post-norm ViT-B blocks).
    """
)
class AaspModel(AaspPreTrainedModel):
    def __init__(self, config: AaspConfig):
        super().__init__(config)
        self.config = config
        self.embeddings = AaspEmbeddings(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.embedding_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.embedding_dropout = nn.Dropout(config.hidden_dropout_prob)
        drop_path_rates = np.linspace(0.0, config.drop_path_rate, config.num_hidden_layers).tolist()
        self.layers = nn.ModuleList(
            [
                AaspLayer(
                    config,
                    config.hidden_size,
                    config.num_attention_heads,
                    config.intermediate_size,
                    config.layer_norm_first,
                    drop_path_rates[i],
                )
                for i in range(config.num_hidden_layers)
            ]
        )
        # CODEPATH: AaSP and converted EAT checkpoints use EAT's post-norm blocks (no final norm); `layer_norm_first=True`
        # (pre-norm blocks with a final LayerNorm) is for models trained that way.
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.layer_norm_first else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.projection

    def _check_views(self, input_values, attention_mask, visible_indices):
        if attention_mask is not None:
            raise ValueError("visible_indices (masked pre-training) cannot be combined with attention_mask.")
        if input_values.ndim == 3 and input_values.shape[1] % self.config.time_patch_size:
            raise ValueError(
                f"With visible_indices the input length must be a multiple of {self.config.time_patch_size} frames, "
                f"got {input_values.shape[1]}: pad or crop the clips (pre-training uses {self.config.num_frames} frames)."
            )
        if visible_indices.ndim != 3 or visible_indices.shape[0] != input_values.shape[0]:
            raise ValueError(
                f"visible_indices must have shape (batch, views, visible tokens) with batch={input_values.shape[0]}, "
                f"got {tuple(visible_indices.shape)}."
            )

    def _check_and_pad(self, input_values, attention_mask):
        """Validates (B, T, F) input and pads T to a multiple of P_time. Returns input and a bool frame mask or None."""
        if input_values.ndim != 3 or input_values.shape[-1] != self.config.num_mel_bins:
            raise ValueError(
                f"AaspModel expects input_values of shape (batch, frames, {self.config.num_mel_bins}) (log-mel from "
                f"AaspFeatureExtractor), got {tuple(input_values.shape)}."
            )
        batch_size, num_frames, _ = input_values.shape
        if num_frames < 1:
            raise ValueError("AaspModel got input_values with 0 frames; the clip is empty.")
        frame_mask = None
        if attention_mask is not None:
            if attention_mask.shape != (batch_size, num_frames):
                raise ValueError(
                    f"attention_mask must have shape (batch, frames) = {(batch_size, num_frames)}, "
                    f"got {tuple(attention_mask.shape)}."
                )
            frame_mask = attention_mask.bool()
        remainder = num_frames % self.config.time_patch_size
        if remainder:
            pad = self.config.time_patch_size - remainder
            input_values = F.pad(input_values, (0, 0, 0, pad))  # (B, T, F) -> (B, T + pad, F), zeros
            if frame_mask is None:
                frame_mask = torch.ones(batch_size, num_frames, dtype=torch.bool, device=input_values.device)
            frame_mask = F.pad(frame_mask, (0, pad), value=False)
        return input_values, frame_mask

    @capture_outputs(tie_last_hidden_states=False)
    @auto_docstring
    def forward(
        self,
        input_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        visible_indices: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> AaspModelOutput:
        r"""
        input_values (`torch.FloatTensor` of shape `(B, T, F)`):
            Normalised log-mel from `AaspFeatureExtractor`. T need not be a multiple of 16: the input is zero-padded
            and the padding masked out.
        attention_mask (`torch.LongTensor` of shape `(B, T)`, *optional*):
            1 for real frames, 0 for padding.
        visible_indices (`torch.LongTensor` of shape `(B, M, V)`, *optional*):
            Masked pre-training: encode only these patch tokens (time-major indices) of M views of each clip; the
            output batch is then B·M and `last_hidden_state` is `(B·M, 1 + V, D)`. Not combinable with
            `attention_mask`.

        transformers' `capture_outputs` records the outputs that keyword flags ask for (see `_can_record_outputs`):
        `output_hidden_states=True` the embedding output and each block's output, `output_attentions=True` each
        block's attention weights (computed eagerly for that call), `output_ffn_outputs=True` each block's FFN output
        (`ffn_outputs`, the teacher targets of `config.target_layer="ffn"`).
        """
        # attention weights exist only on the eager path: the blocks read the flag to take it for this call
        kwargs["output_attentions"] = kwargs.get("output_attentions", self.config.output_attentions)
        if visible_indices is not None:
            self._check_views(input_values, attention_mask, visible_indices)
        input_values, frame_mask = self._check_and_pad(input_values, attention_mask)
        input_values = input_values.to(self.embeddings.projection.weight.dtype)

        patch_mask = token_mask = None
        if frame_mask is not None:
            patch_mask = _frame_mask_to_token_mask(
                frame_mask, self.config.time_patch_size, self.config.num_frequency_patches
            )  # (B, N)
            token_mask = F.pad(patch_mask, (1, 0), value=True)  # CLS first: (B, N) -> (B, 1 + N)

        patches = self.embeddings(input_values, frame_mask, patch_mask, visible_indices)  # (B, N, D) or (B·M, V, D)
        cls = self.cls_token.expand(patches.shape[0], -1, -1).to(patches.dtype)  # (B, 1, D), no position
        hidden_states = self.embedding_dropout(self.embedding_norm(torch.cat([cls, patches], dim=1)))  # (B, 1 + N, D)

        attn_mask = create_bidirectional_mask(self.config, hidden_states, token_mask)
        for layer in self.layers:
            hidden_states, _, _ = layer(hidden_states, attn_mask, **kwargs)
        if self.norm is not None:
            hidden_states = self.norm(hidden_states)

        return AaspModelOutput(
            last_hidden_state=hidden_states,
            token_mask=None if token_mask is None else token_mask.long(),
        )


class AaspClassificationHead(nn.Module):
    """LayerNorm then Linear on the pooled encoder output, as AST's MLP head: (B, D) -> (B, num_labels)."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dense = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pooled):
        return self.dense(self.layernorm(pooled))


@auto_docstring(
    custom_intro="""
    AaSP encoder with LayerNorm + Linear on the CLS token (or the mean of the real patch tokens).
    """
)
class AaspForAudioClassification(AaspPreTrainedModel):
    def __init__(self, config: AaspConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.aasp = AaspModel(config)
        self.classifier = AaspClassificationHead(config)
        self.post_init()

    def freeze_feature_encoder(self):
        """Freezes the patch-embedding stem (SPE/AaPE), as `run_audio_classification.py`-style scripts expect."""
        for parameter in self.aasp.embeddings.parameters():
            parameter.requires_grad = False

    def pool(self, last_hidden_state, token_mask=None):
        """(B, 1 + N, D) -> (B, D): the CLS token, or the mean of the real patch tokens (token_mask (B, 1 + N),
        1 = real, or None)."""
        # CODEPATH: fine-tuned AaSP classifiers pool the CLS token (default, EAT's); `classifier_pooling="mean"` averages
        # the real patch tokens.
        if self.config.classifier_pooling == "cls":
            return last_hidden_state[:, 0]
        patches = last_hidden_state[:, 1:]  # (B, N, D)
        if token_mask is None:
            return patches.mean(dim=1)
        weight = token_mask[:, 1:, None].to(patches.dtype)  # (B, N, 1)
        return (patches * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1.0)

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput:
        r"""
        input_values (`torch.FloatTensor` of shape `(B, T, F)`):
            Normalised log-mel from `AaspFeatureExtractor`.
        attention_mask (`torch.LongTensor` of shape `(B, T)`, *optional*):
            1 for real frames, 0 for padding.
        labels (`torch.LongTensor` of shape `(B,)` or `torch.FloatTensor` of shape `(B, num_labels)`, *optional*):
            Class indices (cross-entropy), multi-hot / soft targets (BCE with logits), or values (MSE, 1 label). The
            loss follows `config.problem_type`; when unset it is inferred as in transformers. The `output_*` flags
            are passed to the encoder (`AaspModel.forward`).
        """
        outputs = self.aasp(input_values, attention_mask=attention_mask, **kwargs)
        pooled = self.pool(outputs.last_hidden_state, outputs.token_mask)  # (B, D)
        logits = self.classifier(pooled)  # (B, num_labels)

        loss = None
        if labels is not None:
            # transformers' loss for classifiers (`ForAudioClassification` -> ForSequenceClassificationLoss): MSE,
            # cross-entropy or BCE with logits by `config.problem_type`, which it sets from the labels on the first
            # call when unset (integer labels: single-label; float, e.g. multi-hot or mixup targets: multi-label). The
            # logits go in as float32, so that a half-precision model's loss is not reduced in half precision.
            loss = self.loss_function(labels, logits.float(), self.config)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


# Checkpoints saved before the classification head was one module (AaspClassificationHead) name its LayerNorm
# `classifier_norm` and its Linear `classifier`. transformers renames them on loading and back on saving (its
# `save_original_format`), so checkpoints on disk keep the names every released version reads.
def _head_renamings() -> list:
    return [
        WeightRenaming(source_patterns=r"^classifier_norm\.", target_patterns="classifier.layernorm."),
        WeightRenaming(source_patterns=r"^classifier\.weight", target_patterns="classifier.dense.weight"),
        WeightRenaming(source_patterns=r"^classifier\.bias", target_patterns="classifier.dense.bias"),
    ]


# overwrite: a checkpoint's remote code may import this file again under another module name
register_checkpoint_conversion_mapping("AaspForAudioClassification", _head_renamings(), overwrite=True)
# transformers 5.4 to 5.8 look a model's conversions up by its config's model_type only (5.9 added the class name), so
# there the renamings are registered for "aasp" too; they match only the head's keys, which AaspModel and
# AaspForPreTraining (the same model_type) do not have. Without this, those releases save the head as
# `classifier.dense.*`.
if tuple(int(part) for part in transformers_version.split(".")[:2]) < (5, 9):
    register_checkpoint_conversion_mapping(AaspConfig.model_type, _head_renamings(), overwrite=True)


TARGET_NORM_AXES = CHOICES["target_norm_axis"]
LOSS_SCALINGS = CHOICES["loss_scaling"]


def _check_scaling(scaling: str) -> None:
    if scaling not in LOSS_SCALINGS:
        raise ValueError(f"scaling must be one of {LOSS_SCALINGS}, got scaling={scaling!r}")




def _no_autocast(tensor: torch.Tensor):
    """A context that disables autocast on ``tensor``'s device, so matrix products really run in float32."""
    return torch.autocast(device_type=tensor.device.type, enabled=False)


def is_distributed() -> bool:
    """True when torch.distributed is initialised with more than one process."""
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0 whose backward hands every process the summed gradient of its own slice.

    forward:  x (B, ...) on each of W processes -> (W·B, ...), identical on every process
    backward: g (W·B, ...) on each process -> Σ_processes g[rank·B:(rank+1)·B]   (all_reduce, then own slice)

    Written out instead of ``torch.distributed.nn.functional.all_gather`` because that one is deprecated (it warns on
    every call in recent torch); this uses only the public all_gather / all_reduce and works on every backend.
    """

    @staticmethod
    def forward(ctx, tensor):
        world_size = torch.distributed.get_world_size()
        tensor = tensor.contiguous()
        pieces = [torch.empty_like(tensor) for _ in range(world_size)]
        torch.distributed.all_gather(pieces, tensor)
        ctx.rank, ctx.local_size = torch.distributed.get_rank(), tensor.shape[0]
        return torch.cat(pieces, dim=0)  # W x (B, ...) -> (W·B, ...)

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.contiguous().clone()
        torch.distributed.all_reduce(grad, op=torch.distributed.ReduceOp.SUM)
        start = ctx.rank * ctx.local_size
        return grad[start : start + ctx.local_size]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` (B, ...) from all processes along dim 0, keeping gradients -> (W·B, ...).

    Identity when torch.distributed is not initialised or has one process. Every process must hold the same shape
    (checked, ValueError otherwise); this process's rows start at ``contrastive_offset(B)`` = rank·B. The gradient
    that reaches ``tensor`` is the sum over processes of the gradients of their gathered copies, so with each
    process's loss a mean over its own anchors, DDP's averaging of parameter gradients gives the gradient of the
    mean over all processes' anchors.
    """
    if not is_distributed():
        return tensor
    if not torch.compiler.is_compiling():  # the check reads other processes' shapes back to the host: a compiled
        # graph cannot (data-dependent), and its all-gather already fails on a shape that differs
        world_size = torch.distributed.get_world_size()
        shape = torch.tensor(tensor.shape, dtype=torch.long, device=tensor.device)
        shapes = [torch.empty_like(shape) for _ in range(world_size)]
        torch.distributed.all_gather(shapes, shape)
        shapes = [tuple(s.tolist()) for s in shapes]
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"gather_with_grad needs the same tensor shape on every process, got shapes {shapes}")
    return _GatherWithGrad.apply(tensor)


def contrastive_offset(local_size: int) -> int:
    """Index of this process's first row in ``gather_with_grad``'s output: rank·local_size (0 when not distributed)."""
    return torch.distributed.get_rank() * local_size if is_distributed() else 0




def teacher_targets(layer_outputs, norm_axis: str = "tokens") -> torch.Tensor:
    """Pooled teacher targets y (B, N, D) from the output of every teacher block (paper: "teacher pooled tokens").

    Args:
        layer_outputs: list/tuple of L tensors (B, N, D), one per teacher block, patch tokens only (no CLS).
        norm_axis: the axis of the per-layer instance normalisation (no affine, eps 1e-5):
            ``"tokens"`` (default, EAT's code): each channel is normalised across the N tokens of its clip
            (``F.instance_norm`` on (B, D, N));
            ``"channels"`` (the paper's text, "per token ... across the embedding dimension"): each token is
            normalised across its D channels.

    Returns:
        y = LayerNorm_D( (1/L) Σ_l InstanceNorm(h_l) ), LayerNorm over D without affine (eps 1e-5), (B, N, D),
        float32 (float64 for float64 inputs). The clip-level target of L_u is ``y.mean(1)``.
    """
    if not isinstance(layer_outputs, (list, tuple)) or len(layer_outputs) == 0:
        raise ValueError(
            f"layer_outputs must be a non-empty list or tuple of (B, N, D) tensors, got {layer_outputs!r}"
        )
    if norm_axis not in TARGET_NORM_AXES:
        raise ValueError(f"norm_axis must be one of {TARGET_NORM_AXES}, got norm_axis={norm_axis!r}")
    shape = tuple(layer_outputs[0].shape)
    shapes = [tuple(h.shape) for h in layer_outputs]
    if len(shape) != 3 or any(s != shape for s in shapes):
        raise ValueError(f"layer_outputs must all have the same shape (B, N, D), got shapes {shapes}")
    if norm_axis == "tokens" and shape[1] < 2:
        raise ValueError(f"norm_axis='tokens' normalises across tokens and needs N >= 2, got layer shape {shape}")

    dtype = compute_dtype(layer_outputs[0])
    with _no_autocast(layer_outputs[0]):
        total = None
        for hidden in layer_outputs:
            hidden = hidden.to(dtype)
            if norm_axis == "tokens":
                # (B, N, D) -> (B, D, N): instance_norm normalises each (clip, channel) row across the N tokens
                normed = F.instance_norm(hidden.transpose(1, 2)).transpose(1, 2)  # -> (B, N, D)
            else:
                # each (clip, token) across its D channels: a LayerNorm over D without affine
                normed = F.layer_norm(hidden, hidden.shape[-1:])
            total = normed if total is None else total + normed
        average = total / len(layer_outputs)  # (B, N, D)
        return F.layer_norm(average, average.shape[-1:])




def masked_prediction_loss(predictions: torch.Tensor, targets: torch.Tensor, scaling: str = "mean") -> torch.Tensor:
    """L_m: squared error between the predictor's outputs at the query tokens and the teacher targets there.

    Args:
        predictions: (..., Q, D) predictor outputs at the query positions (e.g. (B, M, Q, D) or (B·M, Q, D)).
        targets: the same shape, the pooled teacher targets gathered at the same positions (stop-gradient: detached).
        scaling: ``"mean"`` or ``"eat"`` (module docstring).

    Returns:
        scalar: ``"mean"``, the mean over all query tokens and all D dimensions of (prediction − target)²;
        ``"eat"``, each token's Σ_d (prediction − target)² / √D averaged over the query tokens (√D × the mean).
    """
    if predictions.shape != targets.shape or predictions.ndim < 2 or predictions.numel() == 0:
        raise ValueError(
            "predictions and targets must have the same non-empty shape (..., Q, D), "
            f"got predictions {tuple(predictions.shape)} and targets {tuple(targets.shape)}"
        )
    _check_scaling(scaling)
    dtype = compute_dtype(predictions)
    with _no_autocast(predictions):
        error = predictions.to(dtype) - targets.detach().to(dtype)
        if scaling == "eat":  # EAT's d2v_loss summed per token, divided by sample_size = the number of tokens
            return (error.square().sum(dim=-1) / math.sqrt(error.shape[-1])).mean()  # (..., Q, D) -> (..., Q) -> ()
        return error.square().mean()


def clip_loss(student_cls: torch.Tensor, targets: torch.Tensor, scaling: str = "mean") -> torch.Tensor:
    """L_u: squared error between the student CLS of each view and the teacher's clip-level target.

    Args:
        student_cls: (B, M, D), the student's CLS token for each of the M masked views of each clip.
        targets: (B, N, D), the clip's pooled teacher targets (``teacher_targets``; stop-gradient: detached).
        scaling: ``"mean"`` or ``"eat"`` (module docstring).

    Returns:
        scalar: ``"mean"``, the mean over clips, views and D of (cls − ȳ)², with ȳ = targets.mean(1) (B, D) the clip
        target (mean over the teacher pooled tokens), shared by the M views; ``"eat"``, each view's
        Σ_d (cls − ȳ)² / √D summed over the B·M views (B·M·√D × the mean).
    """
    if (
        student_cls.ndim != 3
        or targets.ndim != 3
        or student_cls.shape[0] != targets.shape[0]
        or student_cls.shape[2] != targets.shape[2]
    ):
        raise ValueError(
            "student_cls must be (B, M, D) and targets (B, N, D) with the same B and D, "
            f"got student_cls {tuple(student_cls.shape)} and targets {tuple(targets.shape)}"
        )
    _check_scaling(scaling)
    dtype = compute_dtype(student_cls)
    with _no_autocast(student_cls):
        clip_target = targets.detach().to(dtype).mean(dim=1, keepdim=True)  # (B, N, D) -> (B, 1, D), broadcast over M
        error = student_cls.to(dtype) - clip_target  # (B, M, D)
        if scaling == "eat":  # EAT's d2v_loss × sample_size, summed, then divided by sample_size: a sum over views
            return (error.square().sum(dim=-1) / math.sqrt(error.shape[-1])).sum()  # (B, M, D) -> (B, M) -> ()
        return error.square().mean()




def multi_view_contrastive_loss(
    embeddings: torch.Tensor, temperature: float = 0.2, gather: bool = False
) -> torch.Tensor:
    """L_c, Eq. (5): multi-positive InfoNCE over the M masked views of each clip.

        L_c = −(1/N_vis) Σ_i (1/|P(i)|) Σ_{p∈P(i)} log( exp(z̃_i·z̃_p/τ) / Σ_{a∈A(i)} exp(z̃_i·z̃_a/τ) )

    z̃_i: L2-normalised embedding of view i; P(i): the other M−1 views of the same clip; A(i): P(i) and every view
    of every other clip (the anchor itself excluded). With B = 1 and no gathering there are no negatives and A(i)
    is P(i). Computed with one matrix product of all normalised embeddings and a masked logsumexp.

    Args:
        embeddings: (B, M, E), the projection of each view's mean visible token (the caller applies the MLP);
            L2-normalised here, so the loss does not depend on their scale.
        temperature: τ > 0 (0.2 in the paper).
        gather: if True and torch.distributed runs W > 1 processes, the candidates (positives and negatives) are
            the embeddings of all processes (``gather_with_grad``, which keeps gradients; every process must hold
            the same B and M); the anchors stay this process's B·M views and the loss is their mean.

    Returns:
        scalar L_c, float32 (float64 for float64 inputs).
    """
    if embeddings.ndim != 3 or embeddings.shape[1] < 2 or embeddings.shape[0] < 1 or embeddings.shape[2] < 1:
        raise ValueError(
            "embeddings must be (B, M, E) with B >= 1, M >= 2 views per clip and E >= 1, "
            f"got embeddings {tuple(embeddings.shape)}"
        )
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got temperature={temperature!r}")
    batch_size, num_views, embed_size = embeddings.shape
    num_anchors = batch_size * num_views

    dtype = compute_dtype(embeddings)
    with _no_autocast(embeddings):
        anchors = embeddings.to(dtype).reshape(num_anchors, embed_size)  # (B, M, E) -> (B·M, E)
        anchors = F.normalize(anchors, dim=-1)  # z̃_i
        offset = 0
        candidates = anchors  # (C, E), C = B·M
        if gather and is_distributed():
            candidates = gather_with_grad(anchors)  # (W·B·M, E), this process's rows start at offset
            offset = contrastive_offset(num_anchors)

        logits = anchors @ candidates.T / temperature  # (B·M, C): z̃_i·z̃_a/τ

        # view index -> clip index; views of a clip are contiguous (row b·M + m is view m of clip b)
        anchor_index = torch.arange(num_anchors, device=logits.device) + offset  # (B·M,) global index of anchor i
        candidate_index = torch.arange(candidates.shape[0], device=logits.device)  # (C,)
        is_self = anchor_index[:, None] == candidate_index[None, :]  # (B·M, C)
        same_clip = (anchor_index[:, None] // num_views) == (candidate_index[None, :] // num_views)
        is_positive = same_clip & ~is_self  # P(i), |P(i)| = M − 1

        # A(i) = every candidate but the anchor itself: P(i) ∪ all views of the other clips
        log_denominator = torch.logsumexp(logits.masked_fill(is_self, -math.inf), dim=1, keepdim=True)  # (B·M, 1)
        log_prob = logits - log_denominator  # (B·M, C), finite everywhere
        positive_log_prob = log_prob.masked_fill(~is_positive, 0.0).sum(dim=1) / (num_views - 1)  # (B·M,)
        return -positive_log_prob.mean()

class AaspPredictorCrossAttention(nn.Module):
    """Cross-attention of the predictor: queries (mask tokens) attend to the student's outputs only; no attention
    among queries (CrossMAE). Keys and values are projected straight from the D-wide encoder output."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.config = config
        width = config.predictor_hidden_size
        self.num_heads = config.predictor_num_attention_heads
        self.head_dim = width // self.num_heads
        self.scaling = self.head_dim**-0.5
        self.is_causal = False
        self.query = nn.Linear(width, width, bias=config.qkv_bias)
        self.key_value = nn.Linear(config.hidden_size, 2 * width, bias=config.qkv_bias)
        self.output = nn.Linear(width, width)

    def forward(self, queries, context):
        """queries: (B', Q, P); context: (B', L, D). Returns (B', Q, P)."""
        batch_size, num_queries, width = queries.shape
        query = self.query(queries).view(batch_size, num_queries, self.num_heads, self.head_dim).transpose(1, 2)
        # (B', Q, P) -> (B', heads, Q, d)
        key_value = self.key_value(context).view(batch_size, context.shape[1], 2, self.num_heads, self.head_dim)
        key, value = key_value.permute(2, 0, 3, 1, 4)  # (B', L, 2, heads, d) -> 2 × (B', heads, L, d)
        attention_interface = attention_function(self)
        attn_output, _ = attention_interface(self, query, key, value, None, scaling=self.scaling, is_causal=False)
        return self.output(attn_output.reshape(batch_size, num_queries, width))  # (B', Q, heads, d) -> (B', Q, P)


class AaspPredictorLayer(GradientCheckpointingLayer):
    """Pre-norm CrossMAE block: x = x + cross_attn(LN(x), z); x = x + mlp(LN(x))."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        width = config.predictor_hidden_size
        self.norm1 = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.cross_attention = AaspPredictorCrossAttention(config)
        self.norm2 = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.mlp = AaspMLP(config, width, int(width * config.predictor_mlp_ratio))

    def forward(self, queries, context):
        queries = queries + self.cross_attention(self.norm1(queries), context)
        return queries + self.mlp(self.norm2(queries))


class AaspPredictor(nn.Module):
    """Cross-attention predictor (paper Sec. Predictor): a mask token plus the query's fixed sin-cos position
    (at predictor width) attends to the student's CLS and visible tokens through 3 blocks; LayerNorm; Linear P -> D."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.config = config
        width = config.predictor_hidden_size
        self.mask_token = nn.Parameter(torch.zeros(1, 1, width))
        self.register_buffer("position_embeddings", self.compute_position_embeddings(config), persistent=False)
        self.layers = nn.ModuleList([AaspPredictorLayer(config) for _ in range(config.predictor_num_layers)])
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.output_projection = nn.Linear(width, config.hidden_size)

    @staticmethod
    def compute_position_embeddings(config) -> torch.Tensor:
        """Float32 (N, P) sin-cos table of the pre-training grid at predictor width."""
        return sincos_position_embeddings(
            config.predictor_hidden_size, config.num_frequency_patches, config.num_time_patches
        ).float()

    def forward(self, encoder_output, visible_indices, query_indices):
        """encoder_output: (B', 1 + V, D) student output (CLS first); visible_indices: (B', V) (unused: keys carry
        their own positions); query_indices: (B', Q) token indices. Returns (B', Q, D)."""
        # Query indices come from the collator, which draws them on the (T̃, F̃) grid of `num_frames`; their range is
        # not checked here, because reading their maximum back would stall a GPU step (an index past the grid fails
        # in the gather below).
        positions = self.position_embeddings[query_indices].to(encoder_output.dtype)  # (B', Q, P)
        queries = self.mask_token.to(encoder_output.dtype) + positions
        for layer in self.layers:
            queries = layer(queries, encoder_output)
        return self.output_projection(self.norm(queries))  # (B', Q, P) -> (B', Q, D)


class AaspCNNPredictor(nn.Module):
    """EAT's CNN predictor (data2vec 2.0's 2-D decoder, `Decoder2d` in EAT models/modules.py), for the paper's
    predictor ablation.

    Input (EAT models/base.py `ModalitySpecificEncoder.decoder_input`): the student's visible tokens (CLS dropped)
    are put back on the (T̃, F̃) grid and every hidden position is filled with N(0, σ²) noise,
    σ = `predictor_cnn_mask_noise_std` (EAT's `mask_noise_std` = 0.01; 0 gives zeros). Then
    `predictor_cnn_num_layers` blocks of [grouped k×k Conv2d -> LayerNorm over channels (no affine) -> GELU], each
    followed by the residual add of `Decoder2d.forward` / `DecoderBase.add_residual`: the block's input is added
    whenever it has the block's width, so the first block adds the grid itself when `predictor_cnn_hidden_size`
    equals D (EAT's 768-wide decoder does) and every later block adds the previous block's output. Then Linear -> D;
    the outputs at the query positions are returned.

    The noise is drawn with torch's global RNG in every forward (EAT draws it in train and eval mode alike), like
    dropout: `examples/pretrain.py` seeds that RNG (`accelerate.utils.set_seed`) and every checkpoint saves and
    restores its state, so a run and its resumption draw the same noise. Pass `mask_noise` to inject it.
    """

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.config = config
        width, kernel = config.predictor_cnn_hidden_size, config.predictor_cnn_kernel_size
        self.convs = nn.ModuleList(
            [
                nn.Conv2d(
                    config.hidden_size if i == 0 else width,
                    width,
                    kernel_size=kernel,
                    padding=kernel // 2,
                    groups=config.predictor_cnn_groups,
                )
                for i in range(config.predictor_cnn_num_layers)
            ]
        )
        self.output_projection = nn.Linear(width, config.hidden_size)

    def forward(self, encoder_output, visible_indices, query_indices, mask_noise=None):
        """encoder_output: (B', 1 + V, D); visible_indices: (B', V); query_indices: (B', Q); mask_noise (optional):
        (B', N, D), the fill of the hidden positions (default: N(0, σ²) from the global RNG; its values at visible
        positions are ignored). Returns (B', Q, D)."""
        batch_size, _, hidden = encoder_output.shape
        if mask_noise is None:
            mask_noise = torch.randn(
                batch_size, self.config.num_patches, hidden, device=encoder_output.device, dtype=encoder_output.dtype
            )  # (B', N, D)
            mask_noise = mask_noise * self.config.predictor_cnn_mask_noise_std
        elif mask_noise.shape != (batch_size, self.config.num_patches, hidden):
            raise ValueError(
                f"mask_noise must have shape (B', N, D) = ({batch_size}, {self.config.num_patches}, {hidden}), "
                f"got {tuple(mask_noise.shape)}."
            )
        grid = mask_noise.to(encoder_output.dtype)  # (B', N, D), the noise stays at hidden tokens
        grid = grid.scatter(1, visible_indices[..., None].expand(-1, -1, hidden), encoder_output[:, 1:])
        x = grid.transpose(1, 2).reshape(
            batch_size, hidden, self.config.num_time_patches, self.config.num_frequency_patches
        )
        # (B', N, D) -> (B', D, T̃, F̃), time-major tokens
        residual = x
        for conv in self.convs:
            x = conv(x)
            x = F.layer_norm(x.permute(0, 2, 3, 1), x.shape[1:2]).permute(0, 3, 1, 2)  # norm over channels
            x = F.gelu(x)
            if residual.shape[1] == x.shape[1]:  # the first block's input is the D-wide grid
                x = x + residual
            residual = x
        x = x.flatten(2).transpose(1, 2)  # (B', C, T̃, F̃) -> (B', N, C)
        predictions = self.output_projection(x)  # (B', N, D)
        return predictions.gather(1, query_indices[..., None].expand(-1, -1, hidden))  # (B', Q, D)


class AaspContrastiveHead(nn.Module):
    """Projection for L_c: Linear(D, D/2) -> GELU -> Linear(D/2, D/2) on each view's mean visible token."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        width = config.hidden_size // 2
        self.fc1 = nn.Linear(config.hidden_size, width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(width, width)

    def forward(self, pooled):
        return self.fc2(self.act(self.fc1(pooled)))


@auto_docstring(
    custom_intro="""
    AaSP pre-training (paper Sec. Predictor and Pre-training Objectives; Sec. Training Setup, Pre-training Setup).

    `aasp` is the student; `teacher` an EMA copy of the whole student encoder (AaPE included) that never receives
    gradients, stays in eval mode and sees each unmasked clip once. The trainer updates it in plain sight right after
    `optimizer.step()`: θ_teacher ← m·θ_teacher + (1 − m)·θ_student over `teacher` and `aasp` (aasp_hf's
    `update_teacher_`). The predictor and the contrastive head are student-side only.
    Losses (reductions as in the pre-training objectives section): L = L_m + η_u·L_u + η_c·L_c.
    Fidelity options (see `AaspConfig`): `target_layer` (teacher block outputs or FFN outputs), `loss_scaling`
    (plain means or EAT's effective weights), `student_stem_input` (the student's AaPE stem on each masked view or
    on the full clip, EAT's order).
    """
)
class AaspForPreTraining(AaspPreTrainedModel):
    def __init__(self, config: AaspConfig):
        super().__init__(config)
        self.aasp = AaspModel(config)
        self.teacher = AaspModel(config)
        self.teacher.requires_grad_(False)
        # CODEPATH: AaSP pre-training checkpoints use the CrossMAE cross-attention predictor (the paper's); "cnn" is
        # EAT's CNN predictor, for the predictor ablation.
        if config.predictor_type == "cross_attention":
            self.predictor = AaspPredictor(config)
        else:
            self.predictor = AaspCNNPredictor(config)
        self.contrastive_head = AaspContrastiveHead(config)
        self.post_init()
        with torch.no_grad():  # the teacher starts as an exact copy of the student (from_pretrained then loads both)
            for teacher_param, student_param in zip(self.teacher.parameters(), self.aasp.parameters()):
                teacher_param.copy_(student_param)
        self.teacher.eval()
        # The teacher's targets are recorded by transformers' output hooks (`_can_record_outputs`), which it installs
        # the first time they are asked for; installed here, before any torch.compile, the compiled step traces them
        # instead of breaking its graph on the installation.
        maybe_install_capturing_hooks(self.teacher)

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, AaspPredictor):  # fixed positions are recomputed (models are built on meta devices)
            init.copy_(module.position_embeddings, module.compute_position_embeddings(self.config))
            init.trunc_normal_(module.mask_token, std=self.config.initializer_range)
        cnn = self.predictor if isinstance(getattr(self, "predictor", None), AaspCNNPredictor) else None
        # CODEPATH: only a new model with EAT's initialisation (`initialization="eat"`) and EAT's CNN predictor resets
        # the predictor to PyTorch's defaults; a loaded checkpoint's weights replace whatever was drawn.
        if cnn is not None and self.config.initialization == "eat" and module in (*cnn.convs, cnn.output_projection):
            # EAT resets its decoder to PyTorch's defaults (models/images.py `ImageEncoder.reset_parameters` ->
            # models/modules.py `DecoderBase.reset_parameters`; the convolutions are never re-initialised):
            # weights kaiming_uniform_(a=√5), i.e. U(±1/sqrt(fan_in)), biases U(±1/sqrt(fan_in)). Matched layer by
            # layer: transformers skips a container without parameters of its own (the predictor) in custom code.
            fan_in = module.weight[0].numel()
            init.kaiming_uniform_(module.weight, a=5**0.5)
            init.uniform_(module.bias, -(fan_in**-0.5), fan_in**-0.5)

    def train(self, mode: bool = True):
        # The teacher's targets must not depend on the mode the trainer (transformers' Trainer, accelerate, a loop of
        # one's own) puts the model in: it never uses dropout or drop path. LeViT overrides `train` in transformers too.
        super().train(mode)
        self.teacher.eval()
        return self

    def _check_masks(self, input_values, visible_indices, query_indices):
        """The masks must be the ones the config describes (the collator draws them from these fields with
        `aasp_hf.data.masking.sample_batch_masks`): M = `mask_num_views` views, V = round((1 − `mask_ratio`)·N)
        visible and Q = round(`mask_query_ratio`·(N − V)) query tokens per view, N the input's tokens. Shapes only,
        so nothing is read back from the device. (`mask_block_sizes`, the shapes of the hidden blocks, cannot be
        told from the indices: only the sampler reads it.)"""
        num_tokens = input_values.shape[1] // self.config.time_patch_size * self.config.num_frequency_patches  # N
        num_visible = int(round((1.0 - self.config.mask_ratio) * num_tokens))  # V
        num_queries = int(round(self.config.mask_query_ratio * (num_tokens - num_visible)))  # Q
        expected = (self.config.mask_num_views, num_visible, num_queries)
        actual = (visible_indices.shape[1], visible_indices.shape[2], query_indices.shape[2])
        if actual != expected:
            raise ValueError(
                f"The masks do not match the config: (views, visible, queries) = {actual}, the config's mask_num_views="
                f"{self.config.mask_num_views}, mask_ratio={self.config.mask_ratio} and mask_query_ratio="
                f"{self.config.mask_query_ratio} give {expected} for {num_tokens} tokens. Draw the masks with "
                f"aasp_hf.data.masking.sample_batch_masks(config, batch_size) for this model's config."
            )

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_values: torch.Tensor,
        visible_indices: torch.Tensor,
        query_indices: torch.Tensor,
        student_input_values: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> AaspForPreTrainingOutput:
        r"""
        input_values (`torch.FloatTensor` of shape `(B, T, F)`):
            Normalised log-mel crops (T = `num_frames`).
        visible_indices (`torch.LongTensor` of shape `(B, M, V)`):
            Visible tokens of each view (see `aasp_hf.data.masking`).
        query_indices (`torch.LongTensor` of shape `(B, M, Q)`):
            Masked tokens each view's predictor reconstructs.
        student_input_values (`torch.FloatTensor` of shape `(B, T, F)`, *optional*):
            The student's view of the same clips (e.g. re-coloured by the collator's `student_eq_strength`); default
            `input_values`. The teacher always sees `input_values`.

        The `output_*` flags are passed to the student encoder (`AaspModel.forward`, whose `capture_outputs` records
        them): `hidden_states` and `attentions` are the student's, on the visible tokens of each view. The teacher
        records only its targets, whatever the flags or the config ask for.
        """
        batch_size, num_views = visible_indices.shape[:2]
        if query_indices.shape[:2] != (batch_size, num_views):
            raise ValueError(
                f"query_indices must have shape (batch, views, queries) = ({batch_size}, {num_views}, Q), "
                f"got {tuple(query_indices.shape)}."
            )
        self._check_masks(input_values, visible_indices, query_indices)
        if student_input_values is None:
            student_input_values = input_values
        elif student_input_values.shape != input_values.shape:
            raise ValueError(
                f"student_input_values must have the shape of input_values {tuple(input_values.shape)}, "
                f"got {tuple(student_input_values.shape)}: it is the student's view of the same clips."
            )

        # Teacher: the unmasked clip, once per clip; targets from every block (no CLS): each block's output, or its
        # FFN output before the residual add (EAT, target_layer="ffn").
        with torch.no_grad():
            ffn_targets = self.config.target_layer == "ffn"
            teacher_output = self.teacher(
                input_values,
                output_hidden_states=not ffn_targets,
                output_attentions=False,
                output_ffn_outputs=ffn_targets,
            )
            layer_outputs = teacher_output.ffn_outputs if ffn_targets else teacher_output.hidden_states[1:]
            layer_outputs = [hidden[:, 1:] for hidden in layer_outputs]  # L × (B, 1 + N, D) -> L × (B, N, D)
            targets = teacher_targets(layer_outputs, self.config.target_norm_axis)  # (B, N, D), float32

        # Student: only the visible tokens of each view.
        student_output = self.aasp(student_input_values, visible_indices=visible_indices, **kwargs)
        student = student_output.last_hidden_state  # (B·M, 1 + V, D)
        queries = query_indices.reshape(batch_size * num_views, -1)  # (B, M, Q) -> (B·M, Q)
        visible = visible_indices.reshape(batch_size * num_views, -1)  # (B, M, V) -> (B·M, V)
        predictions = self.predictor(student, visible, queries)  # (B·M, Q, D)
        view_targets = targets.repeat_interleave(num_views, dim=0)  # (B, N, D) -> (B·M, N, D)
        query_targets = view_targets.gather(1, queries[..., None].expand(-1, -1, targets.shape[-1]))  # (B·M, Q, D)

        loss_masked = masked_prediction_loss(predictions, query_targets, scaling=self.config.loss_scaling)
        student_cls = student[:, 0].reshape(batch_size, num_views, -1)  # (B·M, D) -> (B, M, D)
        loss_clip = clip_loss(student_cls, targets, scaling=self.config.loss_scaling)
        view_embeddings = self.contrastive_head(student[:, 1:].mean(dim=1))  # (B·M, D/2)
        view_embeddings = view_embeddings.reshape(batch_size, num_views, -1)  # (B·M, D/2) -> (B, M, D/2)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        loss_contrastive = multi_view_contrastive_loss(
            view_embeddings, self.config.contrastive_temperature, gather=distributed
        )
        loss = (
            loss_masked
            + self.config.clip_loss_weight * loss_clip
            + self.config.contrastive_loss_weight * loss_contrastive
        )

        return AaspForPreTrainingOutput(
            loss=loss,
            masked_prediction_loss=loss_masked.detach(),
            clip_loss=loss_clip.detach(),
            contrastive_loss=loss_contrastive.detach(),
            predictions=predictions.reshape(batch_size, num_views, *predictions.shape[1:]),  # (B, M, Q, D)
            targets=targets,
            hidden_states=student_output.hidden_states,
            attentions=student_output.attentions,
        )


__all__ = ["AaspPreTrainedModel", "AaspModel", "AaspForAudioClassification", "AaspForPreTraining"]
