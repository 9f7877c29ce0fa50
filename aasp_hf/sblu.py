"""The Structured Bilateral Laplace Unit (SBLU) operator of AaSP, and the helpers around it.

Paper: "Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers", Sec. "Structured
Bilateral Laplace Unit (SBLU)", Sec. "Aliasing-aware Patch Embedding (AaPE)" (a)-(c), Appendices A-C.

Symbols and names used throughout this file:

    Δ  -> ``step``          spectrogram hop in seconds (0.01 s in the paper)
    α  -> ``decay``         real part of λ = α + jβ, in 1/s (window decay), bounded below by ``sblu_decay_min``
    β  -> ``frequency``     imaginary part of λ, angular modulation frequency in rad/s, see ``sblu_frequency_range``
    K  -> ``kernel_size``   number of taps k = 0..K-1 (odd, > 1); centre c = (K-1)/2
    v  -> ``values``        the high-passed, B̄-projected subband signals (B, H, T)
    r  ->                   the complex SBLU response of Eq. (3); the model uses |r|

Shapes: B batch, H SBLU hidden channels, T frames, C channels of ``zero_phase_highpass`` (mel bins).

What lives here: the operator and its helpers. The layers built around it (B̄, C̄, the masked GroupNorm, the time
patchifier and the SBLU branch of AaPE, ``AaspSBLU``) are in ``patch_embedding_aasp.py``.

    sblu_decay_min, sblu_frequency_range   band and stability bounds (Sec. SBLU, "Band focusing")
    sblu_gamma                             γ of Eq. (4), the per-channel normalisation Γ
    highpass_fir_taps, zero_phase_kernel,  the zero-phase high-pass filter of AaPE (a)
    zero_phase_highpass
    sblu_magnitude                         |r| of Eq. (3): memory-efficient custom autograd Function (AaPE (c))
    sblu_token_magnitude                   |r| of Eq. (3) at one token's frames, (α, β) fixed per row (pre-training)
    sblu_magnitude_reference               float64 oracle that evaluates Eq. (3) literally (for tests)

This file ships to the Hub as remote code: it imports only ``math``, ``numpy``, ``torch`` and its sibling
``configuration_aasp.py``.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .configuration_aasp import CHOICES


SBLU_PHASES = CHOICES["sblu_phase"]


# ----------------------------------------------------------------------------------------------------------------------
# Argument checks (ValueError naming the argument and its value)
# ----------------------------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------------------------
# Band and stability bounds (Sec. SBLU, "Band focusing and stability constraints")
# ----------------------------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------------------------
# Zero-phase high-pass filter (AaPE (a))
# ----------------------------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------------------------
# SBLU response magnitude |r| (Eq. 3, AaPE (c)) — memory-efficient autograd Function
# ----------------------------------------------------------------------------------------------------------------------
#
# r[n] = Σ_k w_n[k−c] · v[n+k−c] with the per-frame kernel (α_n, β_n belong to OUTPUT frame n, zero padding)
#     symmetric (Eq. 3 as written):  w_n[j] = exp(−Δ(α_n + jβ_n)|j|)
#     analytic (one-sided phase):    w_n[j] = exp(−Δα_n|j|) · exp(−jΔβ_n j)
# With z_n = exp(−Δ(α_n + jβ_n)) and the distance d = |j| = 0..c, split the sum at the centre:
#     r[n] = Σ_d z_f[n]^d v[n+d] + Σ_d z_b[n]^d v[n−d] − v[n],   z_f = z;  z_b = z (symmetric) or conj(z) (analytic).
# With a = v[n+d], b = v[n−d] and p = z^d = p_re + j p_im this is, in real arithmetic,
#     Re r = Σ_d p_re (a + b) − v,     Im r = Σ_d p_im (a + b)  [symmetric]   or   Σ_d p_im (a − b)  [analytic].
# The powers p = z^d are kept as a running product (one complex multiply per tap instead of exp/cos/sin), so forward
# and backward are c+1 passes over (B, H, T) slices and never hold a (B, H, T, K) kernel. In eager mode both run
# block by block over rows (b, h-range) with in-place/out= arithmetic, so the temporaries are block-sized.
#
# Backward, upstream g = ∂L/∂|r| (real, (B, H, T)); Gc = g·conj(r)/|r| (|r| clamped away from 0), so dL = Re(Gc·dr):
#     ∂L/∂v[m] = Σ_d Re(Gc[m−d] z_f[m−d]^d) + Σ_d Re(Gc[m+d] z_b[m+d]^d) − Re(Gc[m])  (shifted accumulation)
#     D_f = Σ_d d z_f^d v[n+d],  D_b = Σ_d d z_b^d v[n−d]
#     ∂r/∂α = −Δ(D_f + D_b),   ∂r/∂β = −jΔ(D_f + D_b) [symmetric]  or  −jΔ(D_f − D_b) [analytic]
#     ∂L/∂α = −Δ·Re(Gc·(D_f + D_b)),   ∂L/∂β = Δ·Im(Gc·(D_f ± D_b)).
# In real arithmetic D_f + D_b = Σ d p_re (a+b) + j Σ d p_im (a±b) and, for the analytic phase,
# D_f − D_b = Σ d p_re (a−b) + j Σ d p_im (a+b): the same tap sums serve both parameter gradients (Appendix C).


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


# On the CPU the operator works in cache-sized blocks, an accelerator in one whole-tensor pass; True makes the CPU take
# the accelerator's single pass too (same arithmetic), so that a step measured on the CPU has an accelerator's
# temporaries: the run planner (`aasp_hf.plan`) sets it while it measures.
WHOLE_TENSOR_PASS = False


def _blocks(values, half):
    """The blocks of the eager CPU path, or one whole-tensor block (accelerators, torch.compile / torch.export:
    no Python loop over blocks in a traced graph, and no thousands of tiny kernels on a GPU; `WHOLE_TENSOR_PASS`)."""
    traced = torch.compiler.is_compiling() or torch.compiler.is_exporting()
    if traced or WHOLE_TENSOR_PASS or values.device.type != "cpu":
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


def _sblu_backward_block(grad_magnitude, values, decay, frequency, response_re, response_im, step, half, analytic,
                         grad_values, grad_decay, grad_frequency):
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
    def forward(ctx, values, decay, frequency, step, kernel_size, phase):
        analytic = phase == "analytic"
        half = (kernel_size - 1) // 2  # c
        response_re = torch.empty(values.shape, dtype=values.dtype, device=values.device)
        response_im, magnitude = torch.empty_like(response_re), torch.empty_like(response_re)
        for index in _blocks(values, half):
            _sblu_forward_block(values[index], decay[index], frequency[index], step, half, analytic,
                                response_re[index], response_im[index], magnitude[index])
        ctx.save_for_backward(values, decay, frequency, response_re, response_im)
        ctx.step, ctx.kernel_size, ctx.analytic = step, kernel_size, analytic
        return magnitude

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_magnitude):
        values, decay, frequency, response_re, response_im = ctx.saved_tensors
        half = (ctx.kernel_size - 1) // 2
        with torch.autocast(device_type=values.device.type, enabled=False):
            grad_magnitude = grad_magnitude.to(response_re.dtype)
            grads = [torch.empty(values.shape, dtype=values.dtype, device=values.device) for _ in range(3)]
            for index in _blocks(values, half):
                _sblu_backward_block(
                    grad_magnitude[index], values[index], decay[index], frequency[index], response_re[index],
                    response_im[index], ctx.step, half, ctx.analytic, *(grad[index] for grad in grads)
                )
        return (*grads, None, None, None)


def sblu_magnitude(
    values: torch.Tensor,
    decay: torch.Tensor,
    frequency: torch.Tensor,
    step: float,
    kernel_size: int,
    phase: str = "symmetric",
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
            values.to(dtype), decay.to(dtype), frequency.to(dtype), float(step), kernel_size, phase
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


def sblu_magnitude_reference(
    values: torch.Tensor,
    decay: torch.Tensor,
    frequency: torch.Tensor,
    step: float,
    kernel_size: int,
    phase: str = "symmetric",
) -> torch.Tensor:
    """float64 oracle for ``sblu_magnitude``: Eq. (3) evaluated literally, tap by tap (tests only).

    Each tap k builds its complex weight directly, w = exp(−Δα|k−c|)·(cos(Δβ s) − j·sin(Δβ s)) with s = |k−c|
    (symmetric) or s = k−c (analytic), and multiplies it with the zero-padded, shifted v[n+k−c]. Same arguments
    and result as ``sblu_magnitude``; plain autograd differentiates it.
    """
    _check_sblu_inputs(values, decay, frequency, step, kernel_size, phase)
    values, decay, frequency = values.double(), decay.double(), frequency.double()
    center = (kernel_size - 1) // 2
    frames = values.shape[-1]
    padded = F.pad(values, (center, center))  # (B, H, T) -> (B, H, T + 2c), zero padding
    response = torch.zeros(values.shape, dtype=torch.complex128, device=values.device)
    for k in range(kernel_size):
        offset = k - center
        distance = abs(offset)
        signed = distance if phase == "symmetric" else offset
        weight = torch.exp(-step * decay * distance) * torch.complex(
            torch.cos(step * frequency * signed), -torch.sin(step * frequency * signed)
        )  # (B, H, T) complex
        response = response + weight * padded[..., k : k + frames]  # v[n+k−c], (B, H, T)
    return response.abs()
