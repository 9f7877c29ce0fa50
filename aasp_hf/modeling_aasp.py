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
"""PyTorch AaSP model: the encoder `AaspModel` (SPE or AaPE patch embedding, then EAT's ViT blocks), the classifiers
`AaspForAudioClassification` (per clip) and `AaspForAudioFrameClassification` (per time patch: sound event detection)
and the pre-training model `AaspForPreTraining` (student, EMA teacher, predictor, losses).

Paper: "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers"; derivations and sources
in docs/model.md. Shapes: `batch_views` = batch_size * num_views (masked pre-training), `per_group` = sblu_hidden_size
// num_frequency_patches. Shipped to the Hub as remote code: imports only torch, transformers, numpy, the config.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

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

from .configuration_aasp import _LOADED_AS_REMOTE_CODE, AaspConfig, LossScaling, SbluPhase, TargetNormAxis


# The input checks compare shapes with these fields; no checkpoint takes another path on them.
# trf-ignore: TRF041 time_patch_size, num_mel_bins, num_patches


@auto_docstring(custom_intro="Output of `AaspModel`: the encoded tokens, CLS first, and what the flags asked for.")
@dataclass
class AaspModelOutput(ModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch_size, 1 + num_patches, hidden_size)`):
        The CLS token, then the patch tokens in time-major order.
    token_mask (`torch.LongTensor` of shape `(batch_size, 1 + num_patches)`, *optional*):
        1 for real tokens (CLS, patches with a real frame), 0 for padding; `None` without an `attention_mask`.
    ffn_outputs (`tuple(torch.FloatTensor)`, *optional*, returned when `output_ffn_outputs=True`):
        Each layer's MLP output before the residual add, each `(batch_size, 1 + num_patches, hidden_size)`.
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
    loss (`torch.FloatTensor` of shape `()`):
        `masked_prediction_loss + clip_loss_weight * clip_loss + contrastive_loss_weight * contrastive_loss`.
    masked_prediction_loss (`torch.FloatTensor` of shape `()`):
        L_m, the squared error of the predictions at the query tokens (reduction: `config.loss_scaling`).
    clip_loss (`torch.FloatTensor` of shape `()`):
        L_u, the squared error between each view's CLS token and the clip target (reduction: `config.loss_scaling`).
    contrastive_loss (`torch.FloatTensor` of shape `()`):
        L_c, the multi-positive InfoNCE over the views of each clip (Eq. 5).
    predictions (`torch.FloatTensor` of shape `(batch_size, num_views, num_queries, hidden_size)`):
        Predictor outputs at the query tokens.
    targets (`torch.FloatTensor` of shape `(batch_size, num_patches, hidden_size)`):
        The pooled, normalised teacher targets.
    """

    loss: torch.FloatTensor | None = None
    masked_prediction_loss: torch.FloatTensor | None = None
    clip_loss: torch.FloatTensor | None = None
    contrastive_loss: torch.FloatTensor | None = None
    predictions: torch.FloatTensor | None = None
    targets: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


@auto_docstring(
    custom_intro="Output of `AaspForAudioFrameClassification`: logits per output frame (time patch column) and label."
)
@dataclass
class AaspAudioFrameClassifierOutput(ModelOutput):
    r"""
    loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `labels` is given):
        The frame classification loss over the real output frames (`config.problem_type`): binary cross-entropy averaged
        over real frames and labels, or cross-entropy averaged over real frames whose label is not -100.
    logits (`torch.FloatTensor` of shape `(batch_size, num_time_patches, num_labels)`):
        One row per output frame: the time patch column t covers input frames [t * time_patch_size, (t + 1) *
        time_patch_size), `config.frame_duration` seconds. Rows where `frame_mask` is 0 are padding and mean nothing.
    frame_mask (`torch.LongTensor` of shape `(batch_size, num_time_patches)`):
        1 for output frames with at least one real input frame (per `attention_mask`; the frames added to reach a whole
        time patch are not real), 0 for padding. All ones without an `attention_mask`.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    frame_mask: torch.LongTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


SBLU_PHASES = get_args(SbluPhase)


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
        raise ValueError(
            f"values must have shape (batch_size, sblu_hidden_size, num_frames), got values.shape={tuple(values.shape)}"
        )
    if decay.shape != values.shape or frequency.shape != values.shape:
        raise ValueError(
            "values, decay and frequency must have the same shape (batch_size, sblu_hidden_size, num_frames) (expand the "
            "per-frame parameters first), "
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
    """α_min = −2·ln(ε) / (Δ·(K − 1)), the smallest decay whose window edge is at most ε (14.855 1/s by default)."""
    if not 0 < epsilon < 1:
        raise ValueError(f"epsilon must lie in (0, 1) (window edge attenuation), got epsilon={epsilon!r}")
    _check_step(step)
    _check_kernel_size(kernel_size)
    return -2.0 * math.log(epsilon) / (step * (kernel_size - 1))


def sblu_frequency_range(step: float, time_patch_size: int) -> tuple[float, float]:
    """(β_min, β_max) = (π/(Δ·P_time), π/Δ) in rad/s, the post- and pre-patching Nyquist limits (19.635, 314.159)."""
    _check_step(step)
    if isinstance(time_patch_size, bool) or not isinstance(time_patch_size, int) or time_patch_size < 2:
        raise ValueError(f"time_patch_size must be an integer >= 2, got time_patch_size={time_patch_size!r}")
    return math.pi / (step * time_patch_size), math.pi / step


def sblu_gamma(decay: torch.Tensor, frequency: torch.Tensor, step: float) -> torch.Tensor:
    """γ = |λ⁻¹·sinh(Δλ/2)|, λ = α + jβ (Eq. 4), elementwise; float32, or float64 for float64 inputs.

    Evaluated as sqrt((sinh²(Δα/2) + sin²(Δβ/2)) / (α² + β²)), equal to the paper's cosh² − cos² form without its
    cancellation."""
    _check_step(step)
    dtype = compute_dtype(decay, frequency)
    decay, frequency = decay.to(dtype), frequency.to(dtype)
    numerator = torch.sinh(0.5 * step * decay).square() + torch.sin(0.5 * step * frequency).square()
    return torch.sqrt(numerator / (decay.square() + frequency.square()))


def highpass_fir_taps(num_taps: int, cutoff_hz: float, sample_rate_hz: float) -> np.ndarray:
    """Hamming-window FIR high-pass taps (float64, odd `num_taps`), unit gain at Nyquist: equal to
    `scipy.signal.firwin(num_taps, cutoff_hz, window="hamming", pass_zero=False, fs=sample_rate_hz)`."""
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
    """The centred kernel `h ⋆ h[::-1]` (length 2·len(taps) − 1) of forward-backward (filtfilt) filtering."""
    taps = np.asarray(taps, dtype=np.float64)
    if taps.ndim != 1 or taps.size == 0:
        raise ValueError(f"taps must be a non-empty 1-D array, got taps.shape={taps.shape}")
    return np.convolve(taps, taps[::-1])


def zero_phase_highpass(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Filters `x` of shape `(batch_size, channels, num_frames)` along time with the centred odd-length `kernel`.

    Zero padding at both ends (not filtfilt's odd extension), so a zero-padded clip filters like the unpadded one;
    one FFT convolution per row, float32 (float64 for float64 input), autocast off. Returns the shape of `x`."""
    if x.dim() != 3:
        raise ValueError(f"x must have shape (batch_size, channels, num_frames), got x.shape={tuple(x.shape)}")
    if kernel.dim() != 1 or kernel.shape[0] % 2 == 0:
        raise ValueError(f"kernel must be 1-D with an odd length, got kernel.shape={tuple(kernel.shape)}")
    frames, length = x.shape[-1], kernel.shape[0]
    dtype = compute_dtype(x)
    if torch.compiler.is_exporting():  # torch.export/ONNX: a direct convolution keeps the length dynamic
        with torch.autocast(device_type=x.device.type, enabled=False):
            weight = kernel.to(device=x.device, dtype=dtype).flip(0).view(1, 1, -1)  # (1, 1, kernel_length)
            rows = x.to(dtype).reshape(-1, 1, frames)  # (batch_size * channels, 1, num_frames)
            out = F.conv1d(rows, weight, padding=length // 2)  # (batch_size * channels, 1, num_frames), zero padding
        return out.reshape(x.shape)  # (batch_size * channels, 1, num_frames) -> (batch_size, channels, num_frames)
    needed = frames + length - 1  # no wrap-around
    power_of_two = 1 << (needed - 1).bit_length()  # the smallest 2^k >= needed
    three_times_power_of_two = 3 << (-(-needed // 3) - 1).bit_length()  # the smallest 3·2^k >= needed
    fft_size = min(power_of_two, three_times_power_of_two)  # as fast per point: 768 instead of 1024 for 608 frames
    with torch.autocast(device_type=x.device.type, enabled=False):
        spectrum = torch.fft.rfft(x.to(dtype), n=fft_size)  # (batch_size, channels, fft_size // 2 + 1)
        response = torch.fft.rfft(kernel.to(device=x.device, dtype=dtype), n=fft_size)  # (fft_size // 2 + 1,)
        full = torch.fft.irfft(spectrum * response, n=fft_size)  # (batch_size, channels, fft_size)
    return full[..., length // 2 : length // 2 + frames]  # centred: (batch_size, channels, num_frames)


def _sblu_base(decay: torch.Tensor, frequency: torch.Tensor, step: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(Re z, Im z) of z = exp(−Δ(α + jβ)), each of the shape of `decay`."""
    magnitude = torch.exp(-step * decay)
    angle = step * frequency
    return magnitude * torch.cos(angle), -magnitude * torch.sin(angle)


def _complex_mul_(a_re, a_im, b_re, b_im, scratch, conjugate=False) -> None:
    """(a_re, a_im) ← a·b (or a·conj(b)) in place, a = a_re + j·a_im, b = b_re + j·b_im; `scratch` is clobbered."""
    torch.mul(a_re, b_im, out=scratch)  # Re a · Im b
    a_re.mul_(b_re).addcmul_(a_im, b_im, value=1 if conjugate else -1)  # Re a·Re b ∓ Im a·Im b
    a_im.mul_(b_re)  # Im a·Re b ...
    if conjugate:
        a_im.sub_(scratch)  # ... − Re a·Im b
    else:
        a_im.add_(scratch)  # ... + Re a·Im b


# CPU blocks of at most this many padded elements (ATen's parallel grain): cache-sized temporaries, no OpenMP
# region per op (docs/model.md, "SBLU operator").
_SBLU_BLOCK_ELEMENTS = 1 << 15


def _row_blocks(shape, width):
    """Index tuples cutting a `(batch_size, channels, num_frames)` tensor into blocks of at most
    `_SBLU_BLOCK_ELEMENTS // width` rows: whole clips when they fit, else row ranges of one clip."""
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
    padded = F.pad(values, (half, half))  # (..., num_frames) -> (..., num_frames + 2c), zero padding
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
    grad_magnitude, values, decay, frequency, response_re, response_im, step, half, analytic, grads
):
    """∂L/∂v, ∂L/∂α, ∂L/∂β of one block into `grads` (derivation: docs/model.md, "SBLU operator")."""
    grad_values, grad_decay, grad_frequency = grads
    frames = values.shape[-1]
    tiny = torch.finfo(response_re.dtype).tiny
    q_re, q_im = torch.empty_like(response_re), torch.empty_like(response_re)
    torch.mul(response_re, response_re, out=q_re).addcmul_(response_im, response_im).sqrt_().clamp_min_(tiny)  # |r|
    torch.div(grad_magnitude, q_re, out=q_re)  # g/|r|
    torch.mul(q_re, response_im, out=q_im).neg_()  # Im Gc = −g·Im r/|r|
    q_re.mul_(response_re)  # Re Gc = g·Re r/|r|;  q = Gc·z^0

    padded = F.pad(values, (half, half))  # (..., num_frames) -> (..., num_frames + 2c)
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
    """|r| of Eq. (3) with the taps generated on the fly; saves only v, α, β, Re r and Im r.

    Eager CPU calls run block by block (`_row_blocks`); accelerators, torch.compile/export and `whole_tensor_pass=True`
    run one whole-tensor pass of the same arithmetic."""

    @staticmethod
    def forward(ctx, values, decay, frequency, step, kernel_size, phase, whole_tensor_pass=False):
        analytic = phase == "analytic"
        half = (kernel_size - 1) // 2  # c
        response_re = torch.empty(values.shape, dtype=values.dtype, device=values.device)
        response_im, magnitude = torch.empty_like(response_re), torch.empty_like(response_re)
        for index in _blocks(values, half, whole_tensor_pass):
            outputs = (response_re[index], response_im[index], magnitude[index])
            _sblu_forward_block(values[index], decay[index], frequency[index], step, half, analytic, *outputs)
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
                saved = (grad_magnitude, values, decay, frequency, response_re, response_im)
                inputs = [tensor[index] for tensor in saved]
                _sblu_backward_block(*inputs, ctx.step, half, ctx.analytic, [grad[index] for grad in grads])
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
    """|r| of Eq. (3) (AaPE (c)) for v = `values` `(batch_size, sblu_hidden_size, num_frames)`, the high-passed signals
    after B̄, with each output frame's α = `decay` (1/s) and β = `frequency` (rad/s), of the same shape; Δ = `step` in
    seconds, K = `kernel_size` taps (odd), `phase` as `AaspConfig.sblu_phase`. `whole_tensor_pass=True` makes the CPU
    take one pass instead of cache-sized blocks. Returns the shape of `values`, float32 (float64 for float64 inputs),
    autocast off; the caller applies 2·Γ."""
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
    """`sblu_magnitude` for rows whose (α, β) are constant over their output frames (one token, masked pre-training).

    `windows` of shape `(num_rows, patch_frames + kernel_size − 1)` holds each row's frames with c = (K − 1)/2 either
    side; `decay` and `frequency` have shape `(num_rows,)`. Returns `(num_rows, patch_frames)`, float32 (float64 for
    float64 inputs), equal to `sblu_magnitude` at those frames; plain autograd differentiates it."""
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
        offset = torch.arange(kernel_size, device=windows.device, dtype=dtype) - center  # k − c, (kernel_size,)
        signed = offset.abs() if phase == "symmetric" else offset
        envelope = torch.exp(-step * decay[:, None] * offset.abs())  # exp(−Δα|k−c|), (num_rows, kernel_size)
        angle = step * frequency[:, None] * signed  # Δβ|k−c| or Δβ(k−c), (num_rows, kernel_size)
        kernel_re = (envelope * torch.cos(angle))[:, None]  # (num_rows, 1, kernel_size)
        kernel_im = (-envelope * torch.sin(angle))[:, None]  # (num_rows, 1, kernel_size)
        rows = windows.shape[0]
        # Σ_k w[k]·v[n + k − c], Re and Im: (1, num_rows, width) -> (1, num_rows, patch_frames)
        response_re = F.conv1d(windows[None], kernel_re, groups=rows)[0]  # (num_rows, patch_frames)
        response_im = F.conv1d(windows[None], kernel_im, groups=rows)[0]  # (num_rows, patch_frames)
        power = response_re.square() + response_im.square()  # |r|², (num_rows, patch_frames)
        return power.clamp_min(torch.finfo(dtype).tiny).sqrt()


def sincos_position_embeddings(hidden_size: int, num_frequency_patches: int, num_time_patches: int) -> torch.Tensor:
    """Fixed 2-D sin-cos positions (MAE/EAT), float64 `(num_patches, hidden_size)` in time-major order: the first half
    encodes the frequency-patch index, the second the time-patch index."""
    quarter = hidden_size // 4
    omega = 1.0 / 10000 ** (np.arange(quarter, dtype=np.float64) / quarter)  # (hidden_size // 4,)

    def one_axis(positions):
        angles = np.outer(positions, omega)  # (num_positions, hidden_size // 4)
        return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # (num_positions, hidden_size // 2)

    time_index, freq_index = np.meshgrid(
        np.arange(num_time_patches), np.arange(num_frequency_patches), indexing="ij"
    )  # each (num_time_patches, num_frequency_patches)
    table = np.concatenate([one_axis(freq_index.reshape(-1)), one_axis(time_index.reshape(-1))], axis=1)
    return torch.from_numpy(table)


class AaspLambdaEncoder(nn.Module):
    """The Lambda encoder (AaPE (1)): the SBLU's decay α ≥ α_min and frequency β ∈ [β_min, β_max] for every token."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        width = config.lambda_encoder_hidden_size  # D / r
        self.input_projection = nn.Linear(config.hidden_size, width)
        self.layers = nn.ModuleList([AaspLambdaEncoderLayer(config) for _ in range(config.lambda_encoder_num_layers)])
        self.config = config
        self.norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.output_projection = nn.Linear(width, 2 * config.sblu_hidden_size // config.num_frequency_patches)
        self.decay_min = sblu_decay_min(config.sblu_epsilon, config.sblu_step, config.sblu_kernel_size)
        self.frequency_min, self.frequency_max = sblu_frequency_range(config.sblu_step, config.time_patch_size)

    def forward(self, tokens, attention_mask=None):
        """`tokens` `(batch_size, num_patches, hidden_size)` with positions, `attention_mask`
        `(batch_size, num_patches)` -> (decay, frequency), each float32
        `(batch_size, num_patches, sblu_hidden_size // num_frequency_patches)`."""
        hidden_states = self.input_projection(tokens)  # (batch_size, num_patches, lambda_hidden_size)
        attention_mask = create_bidirectional_mask(self.config, hidden_states, attention_mask)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask)
        lambdas = self.output_projection(self.norm(hidden_states)).float()  # (batch_size, num_patches, 2 * per_group)
        decay, frequency = lambdas.chunk(2, dim=-1)  # (batch_size, num_patches, per_group) each
        decay = F.softplus(decay) + self.decay_min
        frequency = (self.frequency_max - self.frequency_min) * torch.sigmoid(frequency) + self.frequency_min
        return decay, frequency


def _masked_group_norm(x, norm: nn.GroupNorm, visibility):
    """GroupNorm of `x` `(batch_size, channels, num_frames)` whose statistics cover only the frames where `visibility`
    `(batch_size, num_groups or 1, num_frames)` is 1."""
    if visibility is None:
        return norm(x)
    dtype = torch.promote_types(x.dtype, torch.float32)  # statistics in float32 also under autocast
    batch_size, channels, num_frames = x.shape
    groups = x.to(dtype).reshape(
        batch_size, norm.num_groups, channels // norm.num_groups, num_frames
    )  # -> (batch_size, num_groups, channels // num_groups, num_frames)
    weight = visibility[:, :, None, :].to(dtype)  # (batch_size, num_groups or 1, 1, num_frames)
    count = weight.sum(-1, keepdim=True).clamp(min=1.0) * groups.shape[2]  # (batch_size, num_groups or 1, 1, 1)
    mean = (groups * weight).sum((2, 3), keepdim=True) / count
    var = ((groups - mean).square() * weight).sum((2, 3), keepdim=True) / count
    groups = (groups - mean) * torch.rsqrt(var + norm.eps)
    x = groups.reshape(batch_size, channels, num_frames)  # (batch_size, output_size, num_frames)
    return x * norm.weight.to(dtype)[:, None] + norm.bias.to(dtype)[:, None]


def _per_group(table, group_index):
    """A per-group table `(num_groups, ...)` -> each token's row `(batch_size * num_views, num_visible, ...)`;
    F.embedding is an exact gather with a fast backward."""
    rows = F.embedding(group_index, table.reshape(table.shape[0], -1))  # (batch_views, num_visible, channels)
    return rows.reshape(*group_index.shape, *table.shape[1:])  # (batch_views, num_visible, ...)


class AaspGroupedProjection(nn.Conv1d):
    """B̄ or C̄: a grouped 1×1 convolution (one group per frequency patch), in its input's dtype.

    Dense: `(batch_size, in_channels, num_frames)` -> `(batch_size, out_channels, num_frames)`. With `group_index`
    (each visible token's frequency group): `(batch_size * num_views, num_visible, in_channels // groups, length)` ->
    `(batch_size * num_views, num_visible, out_channels // groups, length)`."""

    def forward(self, x, group_index=None):
        weight = self.weight.to(x.dtype)  # (out_channels, in_per_group, 1)
        bias = None if self.bias is None else self.bias.to(x.dtype)  # (out_channels,)
        if group_index is None:
            return self._conv_forward(x, weight, bias)  # (batch_size, out_channels, num_frames)
        if self.kernel_size != (1,) or bias is None:
            raise ValueError("the visible-token path needs a 1×1 convolution with a bias")
        outputs = self.out_channels // self.groups  # out_per_group
        weight = _per_group(weight.reshape(self.groups, outputs, -1), group_index)
        bias = _per_group(bias.reshape(self.groups, outputs, 1), group_index)
        return weight @ x + bias  # (batch_views, num_visible, out_per_group, length)


class AaspMaskedGroupNorm(nn.GroupNorm):
    """GroupNorm (one group per frequency patch, AaPE (d)) over the real and visible frames or tokens only.

    Dense: `x` `(batch_size, channels, num_frames)`, `visibility` as in `_masked_group_norm`. With `group_index`:
    `x` `(batch_size * num_views, num_visible, channels // groups, time_patch_size)`, statistics per (view, group)."""

    def forward(self, x, visibility=None, group_index=None):
        if group_index is None:
            if visibility is not None:
                return _masked_group_norm(x, self, visibility)
            dtype = torch.promote_types(x.dtype, torch.float32)  # float32 also from the weights of a .half() model
            return F.group_norm(x.to(dtype), self.num_groups, self.weight.to(dtype), self.bias.to(dtype), self.eps)
        batch_views, num_visible, channels, patch = x.shape
        group_id = (torch.arange(batch_views, device=x.device)[:, None] * self.num_groups + group_index).flatten()
        # (batch_size * num_views * num_visible,): the (view, group) of each token
        count = x.new_zeros(batch_views * self.num_groups)  # (batch_views * num_groups,) values per (view, group)
        count = count.index_add(0, group_id, x.new_ones(group_id.shape)).clamp(min=1.0) * (channels * patch)
        mean = x.new_zeros(count.shape).index_add(0, group_id, x.sum((2, 3)).flatten()) / count
        centred = x - mean[group_id].reshape(batch_views, num_visible, 1, 1)
        variance = x.new_zeros(count.shape).index_add(0, group_id, centred.square().sum((2, 3)).flatten())
        scale = torch.rsqrt(variance / count + self.eps)[group_id]  # (batch_views * num_visible,)
        scale = scale.reshape(batch_views, num_visible, 1, 1)  # (batch_views, num_visible, 1, 1)
        gamma = self.weight.to(x.dtype).reshape(self.num_groups, channels, 1)  # (num_groups, alias_size, 1)
        beta = self.bias.to(x.dtype).reshape(self.num_groups, channels, 1)  # (num_groups, alias_size, 1)
        gamma, beta = _per_group(gamma, group_index), _per_group(beta, group_index)
        return torch.addcmul(beta, centred, scale * gamma)  # γ·x̂ + b: (batch_views, num_visible, alias_size, patch)


class AaspTimePatchify(nn.Conv1d):
    """The time patchifier of AaPE (d): a depthwise convolution with kernel = stride = `time_patch_size`.

    Dense: `(batch_size, channels, num_frames)` -> `(batch_size, channels, num_time_patches)`. With `group_index`:
    `(batch_size * num_views, num_visible, channels // groups, time_patch_size)` -> `(..., channels // groups)`."""

    def forward(self, x, group_index=None):
        if group_index is None:
            return self._conv_forward(x, self.weight.to(x.dtype), self.bias.to(x.dtype))
        channels = x.shape[2]  # C̃
        num_groups = self.out_channels // channels  # num_frequency_patches
        weight = self.weight.to(x.dtype).reshape(num_groups, channels, -1)  # (num_groups, alias_size, patch)
        bias = self.bias.to(x.dtype).reshape(num_groups, channels)  # (output_size,) -> (num_groups, alias_size)
        weight, bias = _per_group(weight, group_index), _per_group(bias, group_index)
        return (x * weight).sum(-1) + bias  # (batch_views, num_visible, alias_size)


class AaspSBLU(nn.Module):
    """The SBLU branch of AaPE (Sec. SBLU, Eq. 3-4; AaPE (2) a-d), log-mel -> X_alias tokens: (a) zero-phase high-pass
    along time, (b) B̄, (c) 2·Γ·|r| with per-frame λ = α + jβ, then C̄, (d) GroupNorm and the time patchifier. With
    `sblu_adaptive=False`, λ is a learnable static (α, β) per channel."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.config = config
        # Float32 however the model is built (`_keep_in_fp32_modules_strict`); a float64 model stays float64.
        dtype = torch.promote_types(torch.get_default_dtype(), torch.float32)
        groups = config.num_frequency_patches
        self.step = config.sblu_step
        self.kernel_size = config.sblu_kernel_size
        self.phase = config.sblu_phase
        # True: one whole-tensor pass on the CPU too (as on an accelerator); set by the caller on the instance.
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
        # CODEPATH: AaSP checkpoints take λ from the Lambda encoder; `sblu_adaptive=False` learns a static λ.
        if config.sblu_adaptive:
            self.static_decay = self.static_frequency = None
        else:  # unbounded parameters, mapped like the Lambda encoder's outputs
            self.static_decay = nn.Parameter(torch.zeros(config.sblu_hidden_size, dtype=dtype))
            self.static_frequency = nn.Parameter(torch.zeros(config.sblu_hidden_size, dtype=dtype))

    @staticmethod
    def compute_highpass_kernel(config) -> torch.Tensor:
        """Zero-phase kernel of the Hamming high-pass at β_min/(2π), float32."""
        frame_rate = 1.0 / config.sblu_step
        cutoff_hz = frame_rate / (2.0 * config.time_patch_size)  # β_min / 2π = 1/(2·Δ·S_time)
        taps = highpass_fir_taps(config.sblu_highpass_num_taps, cutoff_hz, frame_rate)
        return torch.from_numpy(zero_phase_kernel(taps)).float()

    def stem_dtype(self, mel):
        """float32 for half, bfloat16 and float32 models and inputs; float64 if either is float64."""
        return compute_dtype(mel, self.input_projection.weight)

    def static_parameters(self):
        """The bounded static (α, β) of the non-adaptive SBLU, each `(sblu_hidden_size,)`."""
        dtype = torch.promote_types(self.static_decay.dtype, torch.float32)
        decay = F.softplus(self.static_decay.to(dtype)) + self.decay_min
        frequency = (self.frequency_max - self.frequency_min) * torch.sigmoid(self.static_frequency.to(dtype))
        return decay, frequency + self.frequency_min

    def forward(self, mel, decay=None, frequency=None, visibility=None, visible_indices=None):
        """X_alias tokens of `mel` `(batch_size, num_mel_bins, num_frames)`, dense or at the visible tokens only.

        Dense: `decay` and `frequency` `(batch_size, sblu_hidden_size, num_frames)` (None: the static λ),
        `visibility` `(batch_size, num_frequency_patches or 1, num_frames)` or None (hidden or padded frames are
        zeroed and left out of the statistics) ->
        `(batch_size, num_patches, sblu_output_size // num_frequency_patches)`.
        Visible tokens: `visible_indices` `(batch_size * num_views, num_visible)`, `decay` and `frequency`
        `(batch_size * num_views, num_visible, sblu_hidden_size // num_frequency_patches)` ->
        `(batch_size * num_views, num_visible, sblu_output_size // num_frequency_patches)`, equal to the dense result at
        those tokens (docs/model.md, "The student's stem under masking")."""
        if visible_indices is not None:
            if visibility is not None:
                raise ValueError("give visibility (dense) or visible_indices (visible tokens only), not both")
            return self._forward_visible_tokens(mel, visible_indices, decay, frequency)
        batch_size, _, num_frames = mel.shape
        if decay is None:
            static_decay, static_frequency = self.static_parameters()
            decay = static_decay[None, :, None].expand(batch_size, -1, num_frames)
            frequency = static_frequency[None, :, None].expand(batch_size, -1, num_frames)

        # float32 under autocast and in half models: the taps decay to ε over K taps, which bf16 cannot resolve
        dtype = self.stem_dtype(mel)
        with torch.autocast(device_type=mel.device.type, enabled=False):
            mel = mel.to(dtype)
            if visibility is not None:
                visibility = visibility.to(dtype)
                bins_per_group = self.config.frequency_patch_size if visibility.shape[1] > 1 else 1
                mel = mel * visibility.repeat_interleave(bins_per_group, dim=1)
            highpassed = zero_phase_highpass(mel, self.highpass_kernel)  # (a) (batch_size, mel_bins, num_frames)
            values = self.input_projection(highpassed)  # (b) B̄: (batch_size, hidden_size, num_frames)
            if visibility is not None:
                channels_per_group = (
                    self.config.sblu_hidden_size // self.config.num_frequency_patches if visibility.shape[1] > 1 else 1
                )
                values = values * visibility.repeat_interleave(channels_per_group, dim=1)
            magnitude = sblu_magnitude(
                values, decay, frequency, self.step, self.kernel_size, self.phase, self.whole_tensor_pass
            )  # (c)
            response = 2.0 * sblu_gamma(decay, frequency, self.step) * magnitude  # 2Γ|r|

        # C̄, GroupNorm and the patchifier in float32 also after a plain .half()
        response = response.to(torch.promote_types(self.output_projection.weight.dtype, torch.float32))
        features = self.output_projection(response)  # C̄: (batch_size, output_size, num_frames)
        features = self.norm(features, visibility)  # (d)
        features = self.time_patchify(features)  # (batch_size, output_size, num_time_patches)
        num_groups = self.config.num_frequency_patches
        num_time_patches = features.shape[-1]
        # (batch_size, num_groups, alias_size, num_time_patches)
        features = features.reshape(batch_size, num_groups, -1, num_time_patches)
        features = features.permute(0, 3, 1, 2)  # (batch_size, num_time_patches, num_groups, alias_size)
        return features.reshape(batch_size, num_time_patches * num_groups, -1)  # (batch_size, num_patches, alias_size)

    def _forward_visible_tokens(self, mel, views, decay=None, frequency=None):
        """The visible-token path of `forward`."""
        num_groups = self.config.num_frequency_patches
        group_index = views % num_groups  # (batch_views, num_visible): each token's frequency group f
        visibility = self._view_visibility(views, mel.shape[-1])  # (batch_views, num_groups, num_frames)

        with torch.autocast(device_type=mel.device.type, enabled=False):
            if decay is None:  # non-adaptive: the static (α, β) of each token's group channels
                static_decay, static_frequency = self.static_parameters()
                decay = _per_group(static_decay.reshape(num_groups, -1), group_index)
                frequency = _per_group(static_frequency.reshape(num_groups, -1), group_index)
            windows, window_visible = self._token_windows(mel, views, visibility)  # (a)
            values = self.input_projection(windows, group_index)  # (b) B̄: (batch_views, num_visible, per_group, width)
            values = values * window_visible[:, :, None]  # v: frames that do not count (_token_windows) zeroed
            response = self._token_response(values, decay, frequency)  # (c) 2Γ|r|
            response = response.to(torch.promote_types(self.output_projection.weight.dtype, torch.float32))
            features = self.output_projection(response, group_index)  # (batch_views, num_visible, alias_size, patch)
            features = self.norm(features, group_index=group_index)  # (d) same shape as before the norm
            return self.time_patchify(features, group_index)  # (batch_views, num_visible, alias_size)

    def _view_visibility(self, views, num_frames):
        """1 where a frame is in a visible token, float `(batch_size * num_views, num_frequency_patches, num_frames)`"""
        batch_views = views.shape[0]
        num_time_patches = num_frames // self.config.time_patch_size
        token_visible = views.new_zeros(
            batch_views, num_time_patches * self.config.num_frequency_patches, dtype=torch.bool
        )
        token_visible = token_visible.scatter(1, views, True)  # (batch_views, num_patches)
        # (batch_views, num_time_patches, num_groups)
        token_visible = token_visible.reshape(batch_views, num_time_patches, -1)
        return (
            token_visible.transpose(1, 2).repeat_interleave(self.config.time_patch_size, dim=-1).float()
        )  # -> (batch_views, num_groups, num_frames)

    def _token_windows(self, mel, views, visibility):
        """(a) The high-passed mel around each visible token, its group's bins on its frames and c frames either side,
        `(batch_size * num_views, num_visible, frequency_patch_size, time_patch_size + 2c)`, and which frames count."""
        num_groups = self.config.num_frequency_patches
        bins = self.config.frequency_patch_size  # mel bins per frequency group
        half = (self.kernel_size - 1) // 2  # c
        width = self.config.time_patch_size + 2 * half  # window length time_patch_size + 2c
        batch_views = views.shape[0]
        num_frames = mel.shape[-1]
        num_views = batch_views // mel.shape[0]
        dtype = self.stem_dtype(mel)
        time_index, group_index = views // num_groups, views % num_groups  # (batch_views, num_visible) each
        rows = torch.arange(batch_views, device=views.device)[:, None, None]  # (batch_views, 1, 1)
        # CODEPATH: AaSP pre-training runs the stem on each masked view; "full" is EAT's order (unmasked clip).
        if self.config.student_stem_input == "full":
            # high-passed once per clip, shared by its views; windows keep the hidden frames
            highpassed = zero_phase_highpass(mel.to(dtype), self.highpass_kernel)  # (batch_size, mel_bins, num_frames)
            source_rows = rows // num_views  # view b·M + m reads clip b, (batch_views, 1, 1)
            window_visible = torch.ones_like(visibility)  # (batch_views, num_groups, num_frames)
        else:
            # each view's mel with its hidden patches zeroed
            mel = mel.to(dtype).repeat_interleave(num_views, dim=0)  # (batch_views, mel_bins, num_frames)
            mel = mel.reshape(batch_views, num_groups, bins, num_frames)  # (batch_views, num_groups, bins, num_frames)
            # (batch_views, mel_bins, num_frames)
            mel = (mel * visibility[:, :, None, :]).reshape(batch_views, -1, num_frames)
            highpassed = zero_phase_highpass(mel, self.highpass_kernel)  # (batch_views, mel_bins, num_frames)
            source_rows = rows
            window_visible = visibility  # (batch_views, num_groups, num_frames)

        frames = time_index[..., None] * self.config.time_patch_size + torch.arange(
            width, device=views.device
        )  # (batch_views, num_visible, width)
        padded = F.pad(highpassed, (half, half))  # (batch_size or batch_views, mel_bins, num_frames + 2c)
        padded = padded.reshape(padded.shape[0], num_groups, bins, -1).transpose(2, 3)
        # (batch_size or batch_views, num_groups, num_frames + 2c, bins)
        windows = padded[source_rows, group_index[..., None], frames].transpose(-1, -2)
        window_visible = F.pad(window_visible, (half, half))[rows, group_index[..., None], frames]
        return windows, window_visible

    def _token_response(self, values, decay, frequency):
        """(c) 2·Γ·|r| at each token's frames: `(..., time_patch_size + 2c)` -> `(..., time_patch_size)`."""
        batch_views, num_visible, channels, width = values.shape
        windows = values.reshape(-1, width)  # (batch_views, num_visible, per_group, width) -> (num_rows, width)
        decay, frequency = decay.reshape(-1), frequency.reshape(-1)  # (num_rows,)
        magnitude = sblu_token_magnitude(windows, decay, frequency, self.step, self.kernel_size, self.phase)
        response = 2.0 * sblu_gamma(decay, frequency, self.step)[:, None] * magnitude  # (num_rows, patch)
        return response.reshape(batch_views, num_visible, channels, -1)  # (batch_views, num_visible, per_group, patch)


class AaspEmbeddings(nn.Module):
    """SPE (a strided convolution and fixed positions) or AaPE (SPE, Lambda encoder, SBLU branch and fusion); a clip
    longer than `num_frames` gets the positions interpolated along time (Sec. Training Setup)."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.config = config
        # X_spec: kernel (time_patch_size, frequency_patch_size) on (batch_size, 1, num_frames, num_mel_bins), as EAT
        self.projection = nn.Conv2d(
            1,
            config.hidden_size,
            kernel_size=(config.time_patch_size, config.frequency_patch_size),
            stride=(config.time_patch_size, config.frequency_patch_size),
        )
        # fixed sin-cos positions, a zero row for CLS (non-trainable, as AudioMAE)
        self.position_embeddings = nn.Parameter(
            torch.zeros(1, 1 + config.num_patches, config.hidden_size), requires_grad=False
        )
        # CODEPATH: AaSP checkpoints (AaPE) add the Lambda encoder and the SBLU branch; EAT and SPE checkpoints do not.
        if config.patch_embedding == "aape":
            # CODEPATH: the SBLU-adaptivity ablation (`sblu_adaptive=False`) has no Lambda encoder.
            self.lambda_encoder = AaspLambdaEncoder(config) if config.sblu_adaptive else None
            self.sblu = AaspSBLU(config)
            alias_size = config.sblu_output_size // config.num_frequency_patches  # C̃
            self.spec_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.alias_norm = nn.LayerNorm(alias_size, eps=config.layer_norm_eps)
            self.fusion = nn.Linear(config.hidden_size + alias_size, config.hidden_size)  # f_fuse

    def compute_position_embeddings(self) -> torch.Tensor:
        """Float32 `(1, 1 + num_patches, hidden_size)`: a zero row for CLS, then the sin-cos table."""
        table = sincos_position_embeddings(
            self.config.hidden_size, self.config.num_frequency_patches, self.config.num_time_patches
        )  # (num_patches, hidden_size)
        return torch.cat([torch.zeros(1, self.config.hidden_size, dtype=table.dtype), table])[None].float()

    def patch_positions(self, num_time_patches: int, valid_time_patches: torch.Tensor | None = None) -> torch.Tensor:
        """Positions `(batch_size or 1, num_time_patches * num_frequency_patches, hidden_size)`; a clip longer than the
        table (`valid_time_patches`, per clip) gets it linearly interpolated along time, so padding changes nothing."""
        # (num_time_patches, num_frequency_patches * hidden_size)
        table = self.position_embeddings[0, 1:].reshape(self.config.num_time_patches, -1)
        target = torch.arange(num_time_patches, device=table.device, dtype=torch.float32)[None]  # (1, time_patches)
        if valid_time_patches is None:
            length = torch.full((1, 1), num_time_patches, device=table.device, dtype=torch.float32)
        else:
            length = valid_time_patches.to(device=table.device, dtype=torch.float32)[:, None]  # (batch_size, 1)
        stretched = (target + 0.5) * (self.config.num_time_patches / length) - 0.5
        source = torch.where(length > self.config.num_time_patches, stretched, target).clamp(
            0, self.config.num_time_patches - 1
        )
        low = source.floor().long()  # (batch_size, num_time_patches)
        high = (low + 1).clamp(max=self.config.num_time_patches - 1)
        weight = (source - low)[..., None].to(table.dtype)  # (batch_size, num_time_patches, 1)
        rows = table[low] * (1 - weight) + table[high] * weight
        return rows.reshape(rows.shape[0], -1, self.config.hidden_size)  # (batch_size, num_patches, hidden_size)

    def forward(self, input_values, frame_mask=None, attention_mask=None, visible_indices=None):
        """`input_values` `(batch_size, num_frames, num_mel_bins)` -> `(batch_size, num_patches, hidden_size)`, or
        with `visible_indices` `(batch_size, num_views, num_visible)` ->
        `(batch_size * num_views, num_visible, hidden_size)`."""
        batch_size, num_frames, _ = input_values.shape
        num_time_patches = num_frames // self.config.time_patch_size
        valid_time_patches = None
        if frame_mask is not None:  # (batch_size,)
            valid_time_patches = frame_mask.reshape(batch_size, num_time_patches, -1).any(-1).sum(-1)
        positions = self.patch_positions(num_time_patches, valid_time_patches).to(input_values.dtype)
        positions = positions.expand(batch_size, -1, -1)  # (batch_size, num_patches, hidden_size)
        # (batch_size, hidden_size, num_time_patches, num_frequency_patches)
        spec = self.projection(input_values.unsqueeze(1))
        spec = spec.flatten(2).transpose(1, 2)  # (batch_size, num_patches, hidden_size), time-major
        mel = input_values.transpose(1, 2)  # (batch_size, num_mel_bins, num_frames)
        visibility = None if frame_mask is None else frame_mask[:, None, :]  # (batch_size, 1, num_frames)

        views = None
        if visible_indices is not None:
            num_views = visible_indices.shape[1]
            views = visible_indices.reshape(batch_size * num_views, -1)  # (batch_views, num_visible)
            spec = self._take(spec.repeat_interleave(num_views, dim=0), views)
            positions = self._take(positions.repeat_interleave(num_views, dim=0), views)
        # CODEPATH: EAT and SPE checkpoints stop here; AaSP checkpoints (AaPE) fuse the SBLU branch.
        if self.config.patch_embedding == "spe":
            return spec + positions

        decay = frequency = None
        if self.lambda_encoder is not None:
            decay, frequency = self.lambda_encoder(spec + positions, attention_mask)
        if views is not None:  # masked pre-training: only the visible tokens' SBLU features are computed
            alias = self.sblu(mel, decay, frequency, visible_indices=views)  # (batch_views, num_visible, alias_size)
        else:
            if decay is not None:
                decay = self._lambda_to_frames(decay)  # (batch_size, sblu_hidden_size, num_frames)
                frequency = self._lambda_to_frames(frequency)  # (batch_size, sblu_hidden_size, num_frames)
            alias = self.sblu(mel, decay, frequency, visibility)  # (batch_size, num_patches, alias_size)
        fused = self.fusion(torch.cat([self.spec_norm(spec), self.alias_norm(alias.to(spec.dtype))], dim=-1))
        return fused + positions  # (batch_views, num_patches or num_visible, hidden_size)

    @staticmethod
    def _take(tokens, indices):
        """Gathers `(batch, num_patches, channels)` at `(batch, num_visible)` indices."""
        return tokens.gather(1, indices[..., None].expand(-1, -1, tokens.shape[-1]))

    def _lambda_to_frames(self, per_token):
        """Per token `(batch_size, num_patches, per_group)` -> per frame `(batch_size, sblu_hidden_size, num_frames)`"""
        batch_size, num_tokens, per_group = per_token.shape
        num_time_patches = num_tokens // self.config.num_frequency_patches
        grid = per_token.reshape(
            batch_size, num_time_patches, self.config.num_frequency_patches, per_group
        )  # (batch_size, num_time_patches, num_frequency_patches, per_group)
        grid = grid.permute(0, 2, 3, 1)  # (batch_size, num_frequency_patches, per_group, num_time_patches)
        grid = grid.reshape(
            batch_size, self.config.num_frequency_patches * per_group, num_time_patches
        )  # -> (batch_size, sblu_hidden_size, num_time_patches)
        return grid.repeat_interleave(self.config.time_patch_size, dim=-1)  # (batch_size, sblu_hidden_size, frames)


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Attention in plain torch; `attention_mask` as `create_bidirectional_mask` builds it, or a bool mask."""
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling  # (batch_size, num_heads, seq_len, seq_len)
    if attention_mask is not None and attention_mask.ndim == 2:
        attention_mask = attention_mask.bool()[:, None, None, :]  # (batch_size, seq_len) -> (batch_size, 1, 1, seq)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
    elif attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    # (batch_size, seq_len, num_heads, head_dim)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


class AaspSelfAttention(nn.Module):
    """Multi-head self-attention through transformers' attention interface (`config._attn_implementation`); weights
    are returned only by the eager path, which `output_attentions=True` takes."""

    # Sizes as arguments: shared by the encoder, the Lambda encoder and the predictor (docs/model.md).
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
        query = self.query(hidden_states).view(head_shape).transpose(1, 2)  # (batch_size, heads, seq_len, head_dim)
        key = self.key(hidden_states).view(head_shape).transpose(1, 2)  # (batch_size, heads, seq_len, head_dim)
        value = self.value(hidden_states).view(head_shape).transpose(1, 2)  # (batch_size, heads, seq_len, head_dim)
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
        attn_output = attn_output.reshape(batch_size, seq_len, -1)  # (batch_size, seq_len, hidden_size)
        return self.output(attn_output), attn_weights


def attention_function(self: nn.Module) -> Callable:
    """The attention function registered for `self.config._attn_implementation` (eager: `eager_attention_forward`).
    Spelled as transformers spells it: `set_attn_implementation` looks for `ALL_ATTENTION_FUNCTIONS.get_interface(`."""
    return ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)


class AaspMLP(nn.Module):
    # Sizes as arguments: shared by the encoder, the Lambda encoder and the predictor (docs/model.md).
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
    """Stochastic depth per sample (identity in eval mode)."""

    def __init__(self, drop_prob: float):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1.0 - self.drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class AaspLayer(GradientCheckpointingLayer):
    """A block of the encoder: EAT's post-norm ViT-B block, or pre-norm with `config.layer_norm_first=True`.

    Returns the output, the attention weights (None unless asked for) and the MLP output before the residual add
    (EAT's FFN targets, `config.target_layer="ffn"`)."""

    def __init__(self, config: AaspConfig, layer_idx: int = 0):
        super().__init__()
        self.layer_norm_first = config.layer_norm_first
        self.attention = AaspSelfAttention(config, config.hidden_size, config.num_attention_heads)
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = AaspMLP(config, config.hidden_size, config.intermediate_size)
        self.norm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        drop_path_rates = np.linspace(0.0, config.drop_path_rate, config.num_hidden_layers).tolist()  # grows per block
        self.drop_path = AaspDropPath(drop_path_rates[layer_idx])
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


class AaspLambdaEncoderLayer(GradientCheckpointingLayer):
    """A pre-norm block of the Lambda encoder (AaPE (1)), D / r wide; a class of its own, not recorded as `AaspLayer`."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        width = config.lambda_encoder_hidden_size
        self.attention = AaspSelfAttention(config, width, config.lambda_encoder_num_attention_heads)
        self.norm1 = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.mlp = AaspMLP(config, width, int(width * config.lambda_encoder_mlp_ratio))
        self.norm2 = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask=None, **kwargs: Unpack[TransformersKwargs]):
        attn_output, _ = self.attention(self.norm1(hidden_states), attention_mask, **kwargs)
        hidden_states = hidden_states + self.dropout(attn_output)
        return hidden_states + self.mlp(self.norm2(hidden_states))


def _frame_mask_to_token_mask(frame_mask: torch.Tensor, time_patch_size: int, num_frequency_patches: int):
    """`(batch_size, num_frames)` -> `(batch_size, num_patches)`: a patch is real when any of its frames is."""
    batch_size, num_frames = frame_mask.shape
    # (batch_size, num_time_patches)
    patch_mask = frame_mask.reshape(batch_size, num_frames // time_patch_size, time_patch_size).any(-1)
    return patch_mask.repeat_interleave(num_frequency_patches, dim=1)  # (batch_size, num_patches), time-major


@auto_docstring
class AaspPreTrainedModel(PreTrainedModel):
    config_class = AaspConfig
    config: AaspConfig
    base_model_prefix = "aasp"
    main_input_name = "input_values"
    input_modalities = ("audio",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["AaspEmbeddings", "AaspLayer"]
    _keep_in_fp32_modules_strict = ["sblu"]  # the SBLU branch stays float32 in bf16/fp16 checkpoints
    # Bidirectional attention with a key-padding mask only (`create_bidirectional_mask`); flash attention is untested
    # here (it needs a CUDA GPU).
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_record_outputs = {
        "hidden_states": OutputRecorder(AaspLayer, index=0),
        "attentions": OutputRecorder(AaspLayer, index=1),
        "ffn_outputs": OutputRecorder(AaspLayer, index=2),
    }

    @torch.no_grad()
    def _init_weights(self, module):
        """Draws a new model's weights as `config.initialization` says (docs/model.md, "Initialisation")."""
        std = self.config.initializer_range
        # CODEPATH: a new model draws as `config.initialization` says; a checkpoint's weights replace them.
        eat = self.config.initialization == "eat"
        if isinstance(module, nn.Linear) and eat:
            init.normal_(module.weight, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            init.trunc_normal_(module.weight, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        else:  # transformers' own: norms weight 1, bias 0 (no random draw, so the RNG stream is unchanged)
            super()._init_weights(module)
        if isinstance(module, AaspEmbeddings):  # fixed tensors are recomputed (models are built on meta devices)
            init.copy_(module.position_embeddings, module.compute_position_embeddings())
            if eat:  # Xavier-uniform on the kernel as (hidden_size, patch area); PyTorch's default bias
                fan_out, fan_in = module.projection.weight.shape[0], module.projection.weight[0].numel()
                bound = (6.0 / (fan_in + fan_out)) ** 0.5
                init.uniform_(module.projection.weight, -bound, bound)
                init.uniform_(module.projection.bias, -(fan_in**-0.5), fan_in**-0.5)
        elif isinstance(module, AaspSBLU):
            init.copy_(module.highpass_kernel, module.compute_highpass_kernel(self.config))
            if module.static_decay is not None:
                init.zeros_(module.static_decay)
                # static frequencies spread over the alias-prone band of each frequency group
                per_group = self.config.sblu_hidden_size // self.config.num_frequency_patches
                targets = torch.linspace(0.05, 0.95, per_group).repeat(self.config.num_frequency_patches)
                init.copy_(module.static_frequency, torch.logit(targets))
        elif isinstance(module, AaspModel):
            if eat:
                init.normal_(module.cls_token, std=1.0)
            else:
                init.trunc_normal_(module.cls_token, std=std)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """As transformers', plus two entries of config.json that transformers has no hook for. With the code shipped
        (`auto_map`), `register_for_auto_class` maps only the saving class, so every checkpoint also maps `AutoModel`
        and `AutoModelForAudioClassification`; and it names its own pipeline (`custom_pipelines`: audio
        classification, or sound event detection for a frame classifier), which transformers writes only when a
        registered pipeline object is saved."""
        if self._auto_class is not None:
            auto_map = dict(getattr(self.config, "auto_map", None) or {})
            module = AaspModel.__module__.split(".")[-1]
            auto_map.setdefault("AutoModel", f"{module}.{AaspModel.__name__}")
            auto_map.setdefault("AutoModelForAudioClassification", f"{module}.{AaspForAudioClassification.__name__}")
            self.config.auto_map = auto_map
            # the checkpoint names its own pipeline (channels averaged as the feature extractor does); imported here so
            # that remote code loading does not import transformers' pipelines
            from .pipeline_aasp import CUSTOM_PIPELINES, SOUND_EVENT_PIPELINES

            frames = isinstance(self, AaspForAudioFrameClassification)
            self.config.custom_pipelines = SOUND_EVENT_PIPELINES if frames else CUSTOM_PIPELINES
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:  # the installed package's configs never hold the entry (see AaspConfig): only the saved file does
            if not _LOADED_AS_REMOTE_CODE and hasattr(self.config, "custom_pipelines"):
                del self.config.custom_pipelines


@auto_docstring(custom_intro="The AaSP encoder (EAT's layout): SPE or AaPE patch embedding, CLS, ViT blocks.")
class AaspModel(AaspPreTrainedModel):
    def __init__(self, config: AaspConfig):
        super().__init__(config)
        self.config = config
        self.embeddings = AaspEmbeddings(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.embedding_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.embedding_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layers = nn.ModuleList([AaspLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers)])
        # CODEPATH: AaSP and EAT checkpoints are post-norm (no final norm); `layer_norm_first=True` adds one.
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
        """Checks the input and pads it to whole time patches; returns it and a bool frame mask or None."""
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
            input_values = F.pad(input_values, (0, 0, 0, pad))  # (batch_size, num_frames + pad, num_mel_bins), zeros
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
        input_values (`torch.FloatTensor` of shape `(batch_size, num_frames, num_mel_bins)`):
            Normalised log-mel from `AaspFeatureExtractor`; `num_frames` is padded to a multiple of `time_patch_size`.
        attention_mask (`torch.LongTensor` of shape `(batch_size, num_frames)`, *optional*):
            1 for real frames, 0 for padding.
        visible_indices (`torch.LongTensor` of shape `(batch_size, num_views, num_visible)`, *optional*):
            Masked pre-training: encode only these patch tokens of each view; the output then has shape
            `(batch_size * num_views, 1 + num_visible, hidden_size)`. Not combinable with `attention_mask`.

        Example:

        ```python
        >>> import torch
        >>> from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

        >>> feature_extractor = AaspFeatureExtractor()
        >>> model = AaspModel(AaspConfig())
        >>> audio = torch.randn(16000).numpy()  # 1 s at 16 kHz
        >>> inputs = feature_extractor(audio, sampling_rate=16000, return_tensors="pt")
        >>> model(**inputs).last_hidden_state.shape  # (batch_size, 1 + num_patches, hidden_size)
        torch.Size([1, 57, 768])
        ```
        """
        # attention weights exist only on the eager path, which the blocks take for this flag
        kwargs["output_attentions"] = kwargs.get("output_attentions", self.config.output_attentions)
        if visible_indices is not None:
            self._check_views(input_values, attention_mask, visible_indices)
        input_values, frame_mask = self._check_and_pad(input_values, attention_mask)
        input_values = input_values.to(self.embeddings.projection.weight.dtype)

        patch_mask = token_mask = None
        if frame_mask is not None:
            patch_mask = _frame_mask_to_token_mask(
                frame_mask, self.config.time_patch_size, self.config.num_frequency_patches
            )  # (batch_size, num_patches)
            token_mask = F.pad(patch_mask, (1, 0), value=True)  # CLS first: (batch_size, 1 + num_patches)

        patches = self.embeddings(input_values, frame_mask, patch_mask, visible_indices)
        cls = self.cls_token.expand(patches.shape[0], -1, -1).to(patches.dtype)  # (batch_size, 1, hidden_size)
        hidden_states = self.embedding_dropout(self.embedding_norm(torch.cat([cls, patches], dim=1)))

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
    """LayerNorm and Linear, as AST's head: `(..., hidden_size)` -> `(..., num_labels)` (per clip, or per frame)."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dense = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pooled):
        return self.dense(self.layernorm(pooled))


@auto_docstring(custom_intro="AaSP encoder with LayerNorm + Linear on the CLS token or the mean patch token.")
class AaspForAudioClassification(AaspPreTrainedModel):
    def __init__(self, config: AaspConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.aasp = AaspModel(config)
        self.classifier = AaspClassificationHead(config)
        self.post_init()

    def freeze_feature_encoder(self):
        """Freezes the patch embedding (SPE or AaPE)."""
        for parameter in self.aasp.embeddings.parameters():
            parameter.requires_grad = False

    def pool(self, last_hidden_state, token_mask=None):
        """`(batch_size, 1 + num_patches, hidden_size)` -> `(batch_size, hidden_size)`: the CLS token, or the mean of
        the real patch tokens."""
        # CODEPATH: AaSP classifiers pool the CLS token (EAT's); `classifier_pooling="mean"` the real patch tokens.
        if self.config.classifier_pooling == "cls":
            return last_hidden_state[:, 0]
        patches = last_hidden_state[:, 1:]  # (batch_size, num_patches, hidden_size)
        if token_mask is None:
            return patches.mean(dim=1)
        weight = token_mask[:, 1:, None].to(patches.dtype)  # (batch_size, num_patches, 1)
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
        input_values (`torch.FloatTensor` of shape `(batch_size, num_frames, num_mel_bins)`):
            Normalised log-mel from `AaspFeatureExtractor`.
        attention_mask (`torch.LongTensor` of shape `(batch_size, num_frames)`, *optional*):
            1 for real frames, 0 for padding.
        labels (`torch.Tensor` of shape `(batch_size,)` or `(batch_size, num_labels)`, *optional*):
            Class indices, multi-hot or soft targets, or regression values; the loss follows `config.problem_type`.

        Example:

        ```python
        >>> import torch
        >>> from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification

        >>> feature_extractor = AaspFeatureExtractor()
        >>> model = AaspForAudioClassification(AaspConfig(num_labels=3))
        >>> audio = torch.randn(16000).numpy()
        >>> inputs = feature_extractor(audio, sampling_rate=16000, return_tensors="pt")
        >>> outputs = model(**inputs, labels=torch.tensor([1]))
        >>> outputs.logits.shape  # (batch_size, num_labels)
        torch.Size([1, 3])
        ```
        """
        outputs = self.aasp(input_values, attention_mask=attention_mask, **kwargs)
        pooled = self.pool(outputs.last_hidden_state, outputs.token_mask)  # (batch_size, hidden_size)
        logits = self.classifier(pooled)  # (batch_size, num_labels)
        loss = None
        if labels is not None:
            # transformers' classification loss by `config.problem_type`, on float32 logits
            loss = self.loss_function(labels, logits.float(), self.config)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring(
    custom_intro="""
    AaSP encoder with a frame-level head for sound event detection: the patch tokens of each time column averaged over
    frequency, then LayerNorm + Linear, giving logits per output frame of `config.frame_duration` seconds (one time
    patch, 0.16 s for the defaults).
    """
)
class AaspForAudioFrameClassification(AaspPreTrainedModel):
    def __init__(self, config: AaspConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.aasp = AaspModel(config)
        self.classifier = AaspClassificationHead(config)
        self.post_init()

    def freeze_feature_encoder(self):
        """Freezes the patch embedding (SPE or AaPE)."""
        for parameter in self.aasp.embeddings.parameters():
            parameter.requires_grad = False

    def pool_frames(self, last_hidden_state, token_mask=None):
        """`(batch_size, 1 + num_patches, hidden_size)` -> the time columns averaged over frequency,
        `(batch_size, num_time_patches, hidden_size)`, and the frame mask `(batch_size, num_time_patches)` (long, 1 =
        real). The tokens of a column share their mask (a patch is real when one of its input frames is)."""
        batch_size, num_tokens, hidden_size = last_hidden_state.shape
        num_frequency_patches = self.config.num_frequency_patches
        num_time_patches = (num_tokens - 1) // num_frequency_patches
        # time-major tokens, frequency fastest: (B, N, D) -> (B, T', F', D)
        patches = last_hidden_state[:, 1:].reshape(batch_size, num_time_patches, num_frequency_patches, hidden_size)
        columns = patches.mean(dim=2)  # (batch_size, num_time_patches, hidden_size)
        if token_mask is None:
            frame_mask = torch.ones(batch_size, num_time_patches, dtype=torch.long, device=columns.device)
        else:
            # (B, N) -> (B, T', F') -> (B, T'): a column's first frequency patch
            frame_mask = token_mask[:, 1:].reshape(batch_size, num_time_patches, num_frequency_patches)[..., 0].long()
        return columns, frame_mask

    def frame_loss(self, logits, labels, frame_mask, num_frames):
        """The loss of `logits` `(batch_size, num_time_patches, num_labels)` against `labels` over the real output
        frames (`frame_mask` 1), by `config.problem_type`; labels at padded frames are ignored, whatever they hold. An
        unset problem_type is multi-label: events overlap, and a frame with no event is silence, not a class."""
        batch_size, num_time_patches, num_labels = logits.shape
        problem_type = self.config.problem_type or "multi_label_classification"
        where = (
            f"for input_values of {num_frames} frames ({num_time_patches} output frames of "
            f"{self.config.time_patch_size} input frames)"
        )
        real = frame_mask.bool()  # (batch_size, num_time_patches)
        logits = logits.float()  # reduced in float32, also for a half-precision model
        if problem_type == "multi_label_classification":
            expected = (batch_size, num_time_patches, num_labels)
            if tuple(labels.shape) != expected:
                hint = (
                    "; class indices per frame need config.problem_type='single_label_classification'"
                    if tuple(labels.shape) == expected[:2]
                    else ""
                )
                raise ValueError(
                    f"labels must have shape (batch, num_frames', num_labels) = {expected} {where}: one row of targets "
                    f"in [0, 1] per output frame, got {tuple(labels.shape)}{hint}."
                )
            targets = labels.float().masked_fill(~real[..., None], 0.0)  # padded frames' labels may hold anything
            per_target = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")  # (B, T', C)
            per_target = per_target.masked_fill(~real[..., None], 0.0)
            return per_target.sum() / (real.sum() * num_labels).clamp(min=1)
        if problem_type == "single_label_classification":
            expected = (batch_size, num_time_patches)
            if tuple(labels.shape) != expected or labels.is_floating_point():
                raise ValueError(
                    f"labels must be class indices (an integer tensor, -100 to ignore a frame) of shape "
                    f"(batch, num_frames') = {expected} {where}, got a {labels.dtype} tensor of shape "
                    f"{tuple(labels.shape)}."
                )
            targets = labels.long().masked_fill(~real, -100)
            total = F.cross_entropy(logits.reshape(-1, num_labels), targets.reshape(-1), reduction="sum")
            return total / (targets != -100).sum().clamp(min=1)
        raise ValueError(
            f"AaspForAudioFrameClassification computes a loss for problem_type 'multi_label_classification' or "
            f"'single_label_classification', got config.problem_type={problem_type!r}."
        )

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> AaspAudioFrameClassifierOutput:
        r"""
        input_values (`torch.FloatTensor` of shape `(batch_size, num_frames, num_mel_bins)`):
            Normalised log-mel from `AaspFeatureExtractor`; padded to whole time patches, so there are
            `num_time_patches = ceil(num_frames / time_patch_size)` output frames.
        attention_mask (`torch.LongTensor` of shape `(batch_size, num_frames)`, *optional*):
            1 for real frames, 0 for padding.
        labels (`torch.Tensor` of shape `(batch_size, num_time_patches[, num_labels])`, *optional*):
            By `config.problem_type`: `"multi_label_classification"` (the default), float targets in [0, 1] per output
            frame and label (soft targets allowed, e.g. the fraction of the frame an event covers; all zeros: silence);
            `"single_label_classification"`, a class index per output frame, -100 to ignore one. Padded output frames
            (`frame_mask` 0) never count.

        Example:

        ```python
        >>> import torch
        >>> from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioFrameClassification

        >>> feature_extractor = AaspFeatureExtractor()
        >>> model = AaspForAudioFrameClassification(AaspConfig(num_labels=3))
        >>> audio = torch.randn(16000).numpy()  # 1 s at 16 kHz: 7 output frames of 0.16 s
        >>> inputs = feature_extractor(audio, sampling_rate=16000, return_tensors="pt")
        >>> outputs = model(**inputs, labels=torch.zeros(1, 7, 3))
        >>> outputs.logits.shape  # (batch_size, num_time_patches, num_labels)
        torch.Size([1, 7, 3])
        ```
        """
        outputs = self.aasp(input_values, attention_mask=attention_mask, **kwargs)
        columns, frame_mask = self.pool_frames(outputs.last_hidden_state, outputs.token_mask)
        logits = self.classifier(columns)  # (batch_size, num_time_patches, num_labels)
        loss = None
        if labels is not None:
            loss = self.frame_loss(logits, labels, frame_mask, num_frames=input_values.shape[1])
        return AaspAudioFrameClassifierOutput(
            loss=loss,
            logits=logits,
            frame_mask=frame_mask,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# Older checkpoints name the head `classifier_norm.*` and `classifier.*`: renamed on loading and back on saving.
def _head_renamings() -> list:
    return [
        WeightRenaming(source_patterns=r"^classifier_norm\.", target_patterns="classifier.layernorm."),
        WeightRenaming(source_patterns=r"^classifier\.weight", target_patterns="classifier.dense.weight"),
        WeightRenaming(source_patterns=r"^classifier\.bias", target_patterns="classifier.dense.bias"),
    ]


# overwrite: remote code may import this file again under another module name
register_checkpoint_conversion_mapping("AaspForAudioClassification", _head_renamings(), overwrite=True)
# transformers 5.4 to 5.8 look conversions up by model_type only
if tuple(int(part) for part in transformers_version.split(".")[:2]) < (5, 9):
    register_checkpoint_conversion_mapping(AaspConfig.model_type, _head_renamings(), overwrite=True)


TARGET_NORM_AXES = get_args(TargetNormAxis)
LOSS_SCALINGS = get_args(LossScaling)


def _check_scaling(scaling: str) -> None:
    if scaling not in LOSS_SCALINGS:
        raise ValueError(f"scaling must be one of {LOSS_SCALINGS}, got scaling={scaling!r}")


def _no_autocast(tensor: torch.Tensor):
    """Autocast off on `tensor`'s device, so matrix products run in float32."""
    return torch.autocast(device_type=tensor.device.type, enabled=False)


def is_distributed() -> bool:
    """True when torch.distributed runs more than one process."""
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0 whose backward gives each process the summed gradient of its own slice (the public
    collectives only; `torch.distributed.nn.functional.all_gather` warns on every call)."""

    @staticmethod
    def forward(ctx, tensor):
        world_size = torch.distributed.get_world_size()
        tensor = tensor.contiguous()
        pieces = [torch.empty_like(tensor) for _ in range(world_size)]
        torch.distributed.all_gather(pieces, tensor)
        ctx.rank, ctx.local_size = torch.distributed.get_rank(), tensor.shape[0]
        return torch.cat(pieces, dim=0)  # W x (batch_size, ...) -> (world_size * batch_size, ...)

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.contiguous().clone()
        torch.distributed.all_reduce(grad, op=torch.distributed.ReduceOp.SUM)
        start = ctx.rank * ctx.local_size
        return grad[start : start + ctx.local_size]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` `(batch, ...)` of every process concatenated along dim 0, with gradients; identity without
    distribution. Every process must hold the same shape; this process's rows start at `contrastive_offset(batch)`."""
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
    """This process's first row in `gather_with_grad`'s output (0 when not distributed)."""
    return torch.distributed.get_rank() * local_size if is_distributed() else 0


def gather_across_processes(anchors: torch.Tensor) -> tuple[torch.Tensor, int]:
    """`multi_view_contrastive_loss`'s `gather` under torch.distributed: every process's anchors, and this one's offset."""
    return gather_with_grad(anchors), contrastive_offset(anchors.shape[0])


def teacher_targets(layer_outputs, norm_axis: str = "tokens") -> torch.Tensor:
    """The pooled teacher targets `(batch_size, num_patches, hidden_size)` from each teacher block's patch tokens.

    y = LayerNorm(mean over layers of InstanceNorm(h_l)), without affine; `norm_axis="tokens"` normalises each channel
    across the tokens (EAT's code), `"channels"` each token across its channels (the paper's text). Float32 (float64
    for float64 inputs)."""
    if not isinstance(layer_outputs, (list, tuple)) or len(layer_outputs) == 0:
        raise ValueError(
            f"layer_outputs must be a non-empty list of (batch_size, num_patches, hidden_size), got {layer_outputs!r}"
        )
    if norm_axis not in TARGET_NORM_AXES:
        raise ValueError(f"norm_axis must be one of {TARGET_NORM_AXES}, got norm_axis={norm_axis!r}")
    shape = tuple(layer_outputs[0].shape)
    shapes = [tuple(h.shape) for h in layer_outputs]
    if len(shape) != 3 or any(s != shape for s in shapes):
        raise ValueError(
            f"layer_outputs must all have the same shape (batch_size, num_patches, hidden_size), got shapes {shapes}"
        )
    if norm_axis == "tokens" and shape[1] < 2:
        raise ValueError(
            f"norm_axis='tokens' normalises across tokens and needs num_patches >= 2, got layer shape {shape}"
        )

    dtype = compute_dtype(layer_outputs[0])
    with _no_autocast(layer_outputs[0]):
        total = None
        for hidden in layer_outputs:
            hidden = hidden.to(dtype)
            if norm_axis == "tokens":
                # each (clip, channel) across the tokens: instance_norm on (batch_size, hidden_size, num_patches)
                normed = F.instance_norm(hidden.transpose(1, 2)).transpose(1, 2)
            else:
                # each (clip, token) across its channels: a LayerNorm without affine
                normed = F.layer_norm(hidden, hidden.shape[-1:])
            total = normed if total is None else total + normed
        average = total / len(layer_outputs)  # (batch_size, num_patches, hidden_size)
        return F.layer_norm(average, average.shape[-1:])


def masked_prediction_loss(predictions: torch.Tensor, targets: torch.Tensor, scaling: str = "mean") -> torch.Tensor:
    """L_m between `predictions` and `targets` of shape `(..., num_queries, hidden_size)` (targets detached).

    `scaling="mean"`: the mean squared error; `"eat"`: EAT's weight, √hidden_size times it (docs/model.md, "EAT's loss
    scaling")."""
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
            return (error.square().sum(dim=-1) / math.sqrt(error.shape[-1])).mean()  # ()
        return error.square().mean()


def clip_loss(student_cls: torch.Tensor, targets: torch.Tensor, scaling: str = "mean") -> torch.Tensor:
    """L_u between `student_cls` `(batch_size, num_views, hidden_size)` and the clip target `targets.mean(1)`.

    `scaling="mean"`: the mean squared error; `"eat"`: EAT's weight, batch_size·num_views·√hidden_size times it
    (docs/model.md, "EAT's loss scaling")."""
    if (
        student_cls.ndim != 3
        or targets.ndim != 3
        or student_cls.shape[0] != targets.shape[0]
        or student_cls.shape[2] != targets.shape[2]
    ):
        raise ValueError(
            "student_cls must be (batch_size, num_views, hidden_size) and targets (batch_size, num_patches, hidden_size) "
            "with the same batch_size and hidden_size, "
            f"got student_cls {tuple(student_cls.shape)} and targets {tuple(targets.shape)}"
        )
    _check_scaling(scaling)
    dtype = compute_dtype(student_cls)
    with _no_autocast(student_cls):
        clip_target = targets.detach().to(dtype).mean(dim=1, keepdim=True)
        error = student_cls.to(dtype) - clip_target  # (batch_size, num_views, hidden_size)
        if scaling == "eat":  # EAT's d2v_loss × sample_size, summed, then divided by sample_size: a sum over views
            return (error.square().sum(dim=-1) / math.sqrt(error.shape[-1])).sum()  # ()
        return error.square().mean()


def multi_view_contrastive_loss(
    embeddings: torch.Tensor, temperature: float = 0.2, gather: Callable | None = None
) -> torch.Tensor:
    """L_c of Eq. (5): multi-positive InfoNCE over the views of each clip, the mean over the anchors.

    `embeddings` `(batch_size, num_views, embed_size)` are L2-normalised here; each view's positives are the other views
    of its clip, its negatives every view of the other clips. `gather` (e.g. `gather_across_processes`) maps the local
    anchors to the candidates of every process and this process's first row among them; None: this process's views
    only. The anchors stay local. Float32 (float64 for float64 inputs)."""
    if embeddings.ndim != 3 or embeddings.shape[1] < 2 or embeddings.shape[0] < 1 or embeddings.shape[2] < 1:
        raise ValueError(
            "embeddings must be (batch_size, num_views, embed_size) with batch_size >= 1, num_views >= 2 views per clip "
            "and embed_size >= 1, "
            f"got embeddings {tuple(embeddings.shape)}"
        )
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got temperature={temperature!r}")
    batch_size, num_views, embed_size = embeddings.shape
    num_anchors = batch_size * num_views

    dtype = compute_dtype(embeddings)
    with _no_autocast(embeddings):
        anchors = embeddings.to(dtype).reshape(num_anchors, embed_size)  # (batch_views, embed_size)
        anchors = F.normalize(anchors, dim=-1)  # z̃_i
        offset = 0
        candidates = anchors  # (num_candidates, embed_size), here num_candidates = batch_views
        if gather is not None:
            candidates, offset = gather(anchors)  # (world_size * batch_views, embed_size)
        logits = anchors @ candidates.T / temperature  # (batch_views, num_candidates): z̃_i·z̃_a/τ
        # row b·num_views + m is view m of clip b
        anchor_index = torch.arange(num_anchors, device=logits.device) + offset  # (batch_views,)
        candidate_index = torch.arange(candidates.shape[0], device=logits.device)  # (num_candidates,)
        is_self = anchor_index[:, None] == candidate_index[None, :]  # (batch_views, num_candidates)
        same_clip = (anchor_index[:, None] // num_views) == (candidate_index[None, :] // num_views)
        is_positive = same_clip & ~is_self  # P(i), |P(i)| = M − 1

        # A(i): every candidate but the anchor itself
        log_denominator = torch.logsumexp(logits.masked_fill(is_self, -math.inf), dim=1, keepdim=True)
        log_prob = logits - log_denominator  # (batch_views, num_candidates), finite everywhere
        positive_log_prob = log_prob.masked_fill(~is_positive, 0.0).sum(dim=1) / (num_views - 1)  # (batch_views,)
        return -positive_log_prob.mean()


class AaspPredictorCrossAttention(nn.Module):
    """CrossMAE cross-attention: the queries attend to the student's outputs only, never to each other."""

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
        """`queries` `(batch, num_queries, predictor_hidden_size)`, `context` `(batch, 1 + num_visible, hidden_size)`"""
        batch_size, num_queries, width = queries.shape
        query = self.query(queries).view(batch_size, num_queries, self.num_heads, self.head_dim).transpose(1, 2)
        # (batch_views, num_queries, predictor_hidden_size) -> (batch_views, num_heads, num_queries, head_dim)
        key_value = self.key_value(context).view(batch_size, context.shape[1], 2, self.num_heads, self.head_dim)
        key, value = key_value.permute(2, 0, 3, 1, 4)  # 2 × (batch_views, num_heads, 1 + num_visible, head_dim)
        attention_interface = attention_function(self)
        attn_output, _ = attention_interface(self, query, key, value, None, scaling=self.scaling, is_causal=False)
        # (batch_views, num_queries, predictor_hidden_size)
        return self.output(attn_output.reshape(batch_size, num_queries, width))


class AaspPredictorLayer(GradientCheckpointingLayer):
    """Pre-norm CrossMAE block."""

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
    """The cross-attention predictor (Sec. Predictor): a mask token plus each query's sin-cos position attends to the
    student's CLS and visible tokens, then LayerNorm and a projection to `hidden_size`."""

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
        """Float32 `(num_patches, predictor_hidden_size)` sin-cos table."""
        return sincos_position_embeddings(
            config.predictor_hidden_size, config.num_frequency_patches, config.num_time_patches
        ).float()

    def forward(self, encoder_output, visible_indices, query_indices):
        """`encoder_output` `(batch, 1 + num_visible, hidden_size)`, `query_indices` `(batch, num_queries)` ->
        `(batch, num_queries, hidden_size)`; `visible_indices` is unused (the keys carry their positions)."""
        # query indices are not range-checked: reading their maximum back would stall a GPU step
        positions = self.position_embeddings[query_indices].to(encoder_output.dtype)
        queries = self.mask_token.to(encoder_output.dtype) + positions
        for layer in self.layers:
            queries = layer(queries, encoder_output)
        return self.output_projection(self.norm(queries))  # (batch_views, num_queries, hidden_size)


class AaspCNNPredictor(nn.Module):
    """EAT's CNN predictor (data2vec 2.0's `Decoder2d`), for the predictor ablation (docs/model.md, "EAT's CNN
    predictor"): the visible tokens back on the grid, N(0, σ²) noise at hidden ones, then convolution blocks.

    The noise comes from torch's global RNG in every forward, like dropout; pass `mask_noise` to inject it."""

    def __init__(self, config: AaspConfig):
        super().__init__()
        self.config = config
        width, kernel = config.predictor_cnn_hidden_size, config.predictor_cnn_kernel_size
        groups = config.predictor_cnn_groups
        self.convs = nn.ModuleList(
            [
                nn.Conv2d(config.hidden_size if i == 0 else width, width, kernel, padding=kernel // 2, groups=groups)
                for i in range(config.predictor_cnn_num_layers)
            ]
        )
        self.output_projection = nn.Linear(width, config.hidden_size)

    def forward(self, encoder_output, visible_indices, query_indices, mask_noise=None):
        """`encoder_output` `(batch, 1 + num_visible, hidden_size)`, `visible_indices` `(batch, num_visible)`,
        `query_indices` `(batch, num_queries)`, `mask_noise` `(batch, num_patches, hidden_size)` or None ->
        `(batch, num_queries, hidden_size)`."""
        batch_size, _, hidden = encoder_output.shape
        if mask_noise is None:
            mask_noise = torch.randn(
                batch_size, self.config.num_patches, hidden, device=encoder_output.device, dtype=encoder_output.dtype
            )  # (batch_views, num_patches, hidden_size)
            mask_noise = mask_noise * self.config.predictor_cnn_mask_noise_std
        elif mask_noise.shape != (batch_size, self.config.num_patches, hidden):
            raise ValueError(
                f"mask_noise must have shape (B', N, D) = ({batch_size}, {self.config.num_patches}, {hidden}), "
                f"got {tuple(mask_noise.shape)}."
            )
        grid = mask_noise.to(encoder_output.dtype)  # (batch_views, num_patches, hidden_size)
        grid = grid.scatter(1, visible_indices[..., None].expand(-1, -1, hidden), encoder_output[:, 1:])
        x = grid.transpose(1, 2).reshape(
            batch_size, hidden, self.config.num_time_patches, self.config.num_frequency_patches
        )
        # (batch_views, hidden_size, num_time_patches, num_frequency_patches), time-major tokens
        residual = x
        for conv in self.convs:
            x = conv(x)
            x = F.layer_norm(x.permute(0, 2, 3, 1), x.shape[1:2]).permute(0, 3, 1, 2)  # norm over channels
            x = F.gelu(x)
            if residual.shape[1] == x.shape[1]:  # the first block's input is the hidden_size-wide grid
                x = x + residual
            residual = x
        x = x.flatten(2).transpose(1, 2)  # (batch_views, num_patches, channels)
        predictions = self.output_projection(x)  # (batch_views, num_patches, hidden_size)
        return predictions.gather(1, query_indices[..., None].expand(-1, -1, hidden))


class AaspContrastiveHead(nn.Module):
    """The projection of L_c: Linear, GELU, Linear on each view's mean visible token."""

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
    AaSP pre-training (Sec. Predictor and Pre-training Objectives): the student `aasp`, the predictor and the
    contrastive head, and `teacher`, an EMA copy of the student encoder that never receives gradients and stays in
    eval mode. The model does not update the teacher: the training loop does, after each `optimizer.step()`,
    θ_teacher ← m·θ_teacher + (1 − m)·θ_student (`aasp_hf.training.model_ema.update_teacher_`).
    """
)
class AaspForPreTraining(AaspPreTrainedModel):
    def __init__(self, config: AaspConfig):
        super().__init__(config)
        self.aasp = AaspModel(config)
        self.teacher = AaspModel(config)
        self.teacher.requires_grad_(False)
        # CODEPATH: AaSP uses the CrossMAE cross-attention predictor; "cnn" is EAT's, for the predictor ablation.
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
        # installed before any torch.compile, so that a compiled step traces the teacher's output hooks
        maybe_install_capturing_hooks(self.teacher)

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        if isinstance(module, AaspPredictor):  # fixed positions are recomputed (models are built on meta devices)
            init.copy_(module.position_embeddings, module.compute_position_embeddings(self.config))
            init.trunc_normal_(module.mask_token, std=self.config.initializer_range)
        cnn = self.predictor if isinstance(getattr(self, "predictor", None), AaspCNNPredictor) else None
        # CODEPATH: only `initialization="eat"` with EAT's CNN predictor resets it to PyTorch's defaults.
        if cnn is not None and self.config.initialization == "eat" and module in (*cnn.convs, cnn.output_projection):
            # EAT's decoder reset, layer by layer (docs/model.md, "Initialisation")
            fan_in = module.weight[0].numel()
            init.kaiming_uniform_(module.weight, a=5**0.5)
            init.uniform_(module.bias, -(fan_in**-0.5), fan_in**-0.5)

    def train(self, mode: bool = True):
        # the teacher never uses dropout or drop path, whatever mode the trainer sets (as LeViT does)
        super().train(mode)
        self.teacher.eval()
        return self

    def _check_masks(self, input_values, visible_indices, query_indices):
        """The masks must have the shapes the config's `mask_*` fields give (shapes only: no device sync)."""
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
        contrastive_gather: Callable | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> AaspForPreTrainingOutput:
        r"""
        input_values (`torch.FloatTensor` of shape `(batch_size, num_frames, num_mel_bins)`):
            Normalised log-mel crops; the teacher sees them unmasked.
        visible_indices (`torch.LongTensor` of shape `(batch_size, num_views, num_visible)`):
            The visible tokens of each view (`aasp_hf.data.masking.sample_batch_masks`).
        query_indices (`torch.LongTensor` of shape `(batch_size, num_views, num_queries)`):
            The masked tokens each view's predictor reconstructs.
        student_input_values (`torch.FloatTensor` of shape `(batch_size, num_frames, num_mel_bins)`, *optional*):
            The student's view of the same clips; defaults to `input_values`.
        contrastive_gather (`Callable`, *optional*):
            The contrastive loss's candidates from every process (`gather_across_processes` under torch.distributed);
            None: this process's views only.

        Example:

        ```python
        >>> import torch
        >>> from aasp_hf import AaspConfig, AaspForPreTraining
        >>> from aasp_hf.data.masking import sample_batch_masks

        >>> config = AaspConfig()
        >>> model = AaspForPreTraining(config)
        >>> input_values = torch.randn(2, config.num_frames, config.num_mel_bins)
        >>> masks = sample_batch_masks(config, batch_size=2)
        >>> outputs = model(input_values, masks["visible_indices"], masks["query_indices"])
        >>> outputs.loss.backward()
        ```
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

        # teacher: the unmasked clip; targets from every block's output, or its FFN output (`target_layer="ffn"`)
        with torch.no_grad():
            ffn_targets = self.config.target_layer == "ffn"
            teacher_output = self.teacher(
                input_values,
                output_hidden_states=not ffn_targets,
                output_attentions=False,
                output_ffn_outputs=ffn_targets,
            )
            layer_outputs = teacher_output.ffn_outputs if ffn_targets else teacher_output.hidden_states[1:]
            layer_outputs = [hidden[:, 1:] for hidden in layer_outputs]  # L × (batch_size, num_patches, hidden_size)
            targets = teacher_targets(layer_outputs, self.config.target_norm_axis)

        # student: only the visible tokens of each view
        student_output = self.aasp(student_input_values, visible_indices=visible_indices, **kwargs)
        student = student_output.last_hidden_state  # (batch_views, 1 + num_visible, hidden_size)
        queries = query_indices.reshape(batch_size * num_views, -1)  # (batch_views, num_queries)
        visible = visible_indices.reshape(batch_size * num_views, -1)  # (batch_views, num_visible)
        predictions = self.predictor(student, visible, queries)  # (batch_views, num_queries, hidden_size)
        view_targets = targets.repeat_interleave(num_views, dim=0)  # (batch_views, num_patches, hidden_size)
        query_targets = view_targets.gather(1, queries[..., None].expand(-1, -1, targets.shape[-1]))

        loss_masked = masked_prediction_loss(predictions, query_targets, scaling=self.config.loss_scaling)
        student_cls = student[:, 0].reshape(batch_size, num_views, -1)  # (batch_size, num_views, hidden_size)
        loss_clip = clip_loss(student_cls, targets, scaling=self.config.loss_scaling)
        view_embeddings = self.contrastive_head(student[:, 1:].mean(dim=1))  # (batch_views, hidden_size // 2)
        # (batch_size, num_views, hidden_size // 2)
        view_embeddings = view_embeddings.reshape(batch_size, num_views, -1)
        loss_contrastive = multi_view_contrastive_loss(
            view_embeddings, self.config.contrastive_temperature, gather=contrastive_gather
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
            # (batch_size, num_views, num_queries, hidden_size)
            predictions=predictions.reshape(batch_size, num_views, *predictions.shape[1:]),
            targets=targets,
            hidden_states=student_output.hidden_states,
            attentions=student_output.attentions,
        )


__all__ = [
    "AaspPreTrainedModel",
    "AaspModel",
    "AaspForAudioClassification",
    "AaspForAudioFrameClassification",
    "AaspForPreTraining",
]
