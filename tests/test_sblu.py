"""Tests for the SBLU operator of aasp_hf/modeling_aasp.py: every formula against an independent oracle (scipy, numpy complex128, a literal
float64 loop over Eq. (3)), gradients, memory held for backward, autocast, and argument checks."""

import math

import numpy as np
import pytest
import scipy.signal
import torch

from aasp_hf.modeling_aasp import (
    highpass_fir_taps,
    sblu_decay_min,
    sblu_frequency_range,
    sblu_gamma,
    sblu_magnitude,
    sblu_token_magnitude,
    zero_phase_highpass,
    zero_phase_kernel,
)
from oracles import sblu_magnitude_reference


STEP = 0.01
PHASES = ("symmetric", "analytic")
ALPHA_MIN = -2.0 * math.log(0.01) / (STEP * 62)  # K = 63
BETA_MIN, BETA_MAX = math.pi / (STEP * 16), math.pi / STEP


def random_sblu_inputs(shape, kernel_size, dtype=torch.float64, seed=0, requires_grad=False):
    """v ~ N(0, 1); per-frame α in [α_min(K), α_min(K) + 200]; β in [β_min, β_max]."""
    generator = torch.Generator().manual_seed(seed)
    decay_min = sblu_decay_min(0.01, STEP, kernel_size)
    values = torch.randn(shape, generator=generator, dtype=torch.float64)
    decay = decay_min + 200.0 * torch.rand(shape, generator=generator, dtype=torch.float64)
    frequency = BETA_MIN + (BETA_MAX - BETA_MIN) * torch.rand(shape, generator=generator, dtype=torch.float64)
    return [t.to(dtype).requires_grad_(requires_grad) for t in (values, decay, frequency)]


# ---------------------------------------------------------------------------------------------------------------------
# 1. bounds
# ---------------------------------------------------------------------------------------------------------------------


def test_bounds_match_formula_and_spec_numbers():
    assert sblu_decay_min(0.01, 0.01, 63) == pytest.approx(-2 * math.log(0.01) / (0.01 * 62), rel=1e-12)
    assert sblu_decay_min(0.01, 0.01, 63) == pytest.approx(14.855, abs=5e-4)  # −2·ln ε / (Δ·(K−1)), Sec. SBLU
    assert sblu_decay_min(0.1, 0.02, 15) == pytest.approx(-2 * math.log(0.1) / (0.02 * 14), rel=1e-12)
    beta_min, beta_max = sblu_frequency_range(0.01, 16)
    assert (beta_min, beta_max) == pytest.approx((math.pi / 0.16, math.pi / 0.01), rel=1e-12)
    assert (beta_min, beta_max) == pytest.approx((19.635, 314.159), abs=5e-4)
    assert sblu_frequency_range(0.02, 8) == pytest.approx((math.pi / 0.16, math.pi / 0.02), rel=1e-12)


# ---------------------------------------------------------------------------------------------------------------------
# 2-3. zero-phase high-pass filter
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "num_taps, cutoff_hz, sample_rate_hz", [(63, 3.125, 100.0), (31, 10.0, 100.0), (101, 0.3, 16.0)]
)
def test_highpass_taps_equal_scipy_firwin(num_taps, cutoff_hz, sample_rate_hz):
    taps = highpass_fir_taps(num_taps, cutoff_hz, sample_rate_hz)
    expected = scipy.signal.firwin(num_taps, cutoff_hz, window="hamming", pass_zero=False, fs=sample_rate_hz)
    assert taps.dtype == np.float64 and taps.shape == (num_taps,)
    np.testing.assert_allclose(taps, expected, rtol=0, atol=1e-12)


def test_zero_phase_kernel_is_autocorrelation_of_taps():
    taps = highpass_fir_taps(63, 3.125, 100.0)
    kernel = zero_phase_kernel(taps)
    assert kernel.shape == (125,)
    np.testing.assert_allclose(kernel, kernel[::-1], rtol=0, atol=1e-15)  # zero phase: symmetric
    # the centre tap equals Σ h² and the response at Nyquist is |H(π)|² = 1
    assert kernel[62] == pytest.approx(np.sum(taps**2), rel=1e-12)
    assert np.sum(kernel * np.cos(np.pi * np.arange(-62, 63))) == pytest.approx(1.0, rel=1e-12)


def test_zero_phase_highpass_equals_filtfilt_inside_and_zero_padding_at_edges():
    num_taps = 63
    taps = highpass_fir_taps(num_taps, 3.125, 100.0)
    kernel = zero_phase_kernel(taps)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 400))
    out = zero_phase_highpass(torch.from_numpy(x), torch.from_numpy(kernel)).numpy()
    assert out.shape == x.shape and out.dtype == np.float64

    # filtfilt's output at n sees x[n − (num_taps−1) .. n + (num_taps−1)]: beyond that its odd-extension edge
    # handling cannot reach, so frames [num_taps − 1, T − num_taps] must agree exactly
    margin = num_taps - 1
    expected = scipy.signal.filtfilt(taps, [1.0], x, axis=-1)
    np.testing.assert_allclose(out[..., margin:-margin], expected[..., margin:-margin], rtol=0, atol=1e-10)
    assert np.abs(out[..., :10] - expected[..., :10]).max() > 1e-3  # the edges do differ from filtfilt...
    for row_out, row_in in zip(out.reshape(-1, 400), x.reshape(-1, 400)):  # ...and equal zero padding everywhere
        np.testing.assert_allclose(row_out, np.convolve(row_in, kernel, mode="same"), rtol=0, atol=1e-12)


def test_zero_phase_highpass_short_input_and_float32():
    kernel = zero_phase_kernel(highpass_fir_taps(63, 3.125, 100.0))  # length 125 > T
    half = len(kernel) // 2
    for frames in (1, 10):
        x = np.random.default_rng(frames).standard_normal((1, 2, frames))
        out = zero_phase_highpass(torch.from_numpy(x), torch.from_numpy(kernel)).numpy()
        assert out.shape == (1, 2, frames)
        for row_out, row_in in zip(out[0], x[0]):
            np.testing.assert_allclose(row_out, np.convolve(row_in, kernel)[half : half + frames], atol=1e-12)
    x = torch.randn(2, 4, 64)
    out32 = zero_phase_highpass(x, torch.from_numpy(kernel).float())
    out64 = zero_phase_highpass(x.double(), torch.from_numpy(kernel))
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), out64, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------------
# 4. γ
# ---------------------------------------------------------------------------------------------------------------------


def test_gamma_equals_abs_inverse_lambda_sinh():
    decay = np.linspace(ALPHA_MIN, 2000.0, 41)[:, None]
    frequency = np.linspace(BETA_MIN, BETA_MAX, 37)[None, :]
    lam = decay + 1j * frequency  # complex128, (41, 37)
    expected = np.abs(np.sinh(STEP * lam / 2) / lam)
    gamma = sblu_gamma(torch.from_numpy(decay), torch.from_numpy(frequency), STEP)
    assert gamma.shape == (41, 37) and gamma.dtype == torch.float64
    np.testing.assert_allclose(gamma.numpy(), expected, rtol=1e-12, atol=0)
    # the paper's cosh² − cos² form agrees (same value, written with cancellation)
    paper = np.sqrt((np.cosh(STEP * decay / 2) ** 2 - np.cos(STEP * frequency / 2) ** 2) / (decay**2 + frequency**2))
    np.testing.assert_allclose(gamma.numpy(), paper, rtol=1e-9)


# ---------------------------------------------------------------------------------------------------------------------
# 5-7. SBLU forward and gradients against the literal Eq. (3) loop
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("shape, kernel_size", [((2, 3, 50), 63), ((2, 3, 10), 63), ((2, 3, 50), 7)])
def test_magnitude_equals_reference(phase, shape, kernel_size):
    values, decay, frequency = random_sblu_inputs(shape, kernel_size)
    expected = sblu_magnitude_reference(values, decay, frequency, STEP, kernel_size, phase)
    out64 = sblu_magnitude(values, decay, frequency, STEP, kernel_size, phase)
    assert out64.shape == shape and out64.dtype == torch.float64
    torch.testing.assert_close(out64, expected, rtol=0, atol=1e-10)

    out32 = sblu_magnitude(values.float(), decay.float(), frequency.float(), STEP, kernel_size, phase)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), expected, rtol=1e-4, atol=1e-4 * expected.abs().max().item())


@pytest.mark.parametrize("phase", PHASES)
def test_magnitude_accepts_expanded_parameters(phase):
    """The model expands per-(channel, frame) parameters over the batch: same result, gradients summed."""
    values, decay, frequency = random_sblu_inputs((3, 4, 40), 15)
    decay_small = decay[:1].clone().requires_grad_()
    frequency_small = frequency[:1].clone().requires_grad_()
    out = sblu_magnitude(values, decay_small.expand(3, -1, -1), frequency_small.expand(3, -1, -1), STEP, 15, phase)
    expected = sblu_magnitude_reference(
        values, decay[:1].expand(3, -1, -1), frequency[:1].expand(3, -1, -1), STEP, 15, phase
    )
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    out.sum().backward()
    decay_ref = decay[:1].clone().requires_grad_()
    sblu_magnitude_reference(
        values, decay_ref.expand(3, -1, -1), frequency[:1].expand(3, -1, -1), STEP, 15, phase
    ).sum().backward()
    torch.testing.assert_close(decay_small.grad, decay_ref.grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("kernel_size", [7, 15])
def test_gradcheck(phase, kernel_size):
    inputs = random_sblu_inputs((1, 2, 24), kernel_size, seed=kernel_size, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda v, a, b: sblu_magnitude(v, a, b, STEP, kernel_size, phase), inputs, eps=1e-6, atol=1e-7
    )


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("shape, kernel_size", [((2, 3, 40), 63), ((2, 3, 40), 9)])
def test_gradients_equal_reference_autograd(phase, shape, kernel_size):
    inputs = random_sblu_inputs(shape, kernel_size, seed=1, requires_grad=True)
    reference_inputs = [t.detach().clone().requires_grad_() for t in inputs]
    upstream = torch.randn(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    grads = torch.autograd.grad(sblu_magnitude(*inputs, STEP, kernel_size, phase), inputs, upstream)
    expected = torch.autograd.grad(
        sblu_magnitude_reference(*reference_inputs, STEP, kernel_size, phase), reference_inputs, upstream
    )
    for name, grad, reference in zip(("values", "decay", "frequency"), grads, expected):
        scale = reference.abs().max().item()
        assert (grad - reference).abs().max().item() <= 1e-10 * max(scale, 1.0), name


# ---------------------------------------------------------------------------------------------------------------------
# 8. frequency response on a pure modulation
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("modulation_hz", [12.0, 30.0])
def test_frequency_response_peaks_at_the_modulation(modulation_hz):
    frames, kernel_size, half = 400, 63, 31
    betas = torch.linspace(BETA_MIN, BETA_MAX, 1201, dtype=torch.float64)  # (G,), 0.25 rad/s apart
    n = torch.arange(frames, dtype=torch.float64)
    values = torch.cos(2 * math.pi * modulation_hz * n * STEP).expand(1, len(betas), frames)  # (1, G, T)
    decay = torch.full_like(values, ALPHA_MIN)
    frequency = betas.view(1, -1, 1).expand_as(values)  # (G,) -> (1, G, T)
    target = 2 * math.pi * modulation_hz
    at_target = int((betas - target).abs().argmin())
    envelope_spread = {}
    for phase, tolerance in (("symmetric", 0.03), ("analytic", 0.005)):
        magnitude = sblu_magnitude(values, decay, frequency, STEP, kernel_size, phase)[0, :, half:-half]  # (G, T−2c)
        peak = betas[magnitude.mean(-1).argmax()].item()
        assert abs(peak / target - 1) < tolerance, (phase, peak, target)
        envelope = magnitude[at_target]
        envelope_spread[phase] = (envelope.std() / envelope.mean()).item()
    assert envelope_spread["analytic"] < 0.05, envelope_spread  # steady envelope (≈ 0.005 on a pure tone at α_min)
    assert envelope_spread["symmetric"] > 0.3, envelope_spread  # swings with the input phase (≈ 0.5)


# ---------------------------------------------------------------------------------------------------------------------
# 9-11. memory, autocast, zeros
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", PHASES)
def test_saved_tensors_are_linear_in_frames(phase):
    shape, kernel_size = (2, 4, 128), 63
    inputs = random_sblu_inputs(shape, kernel_size, dtype=torch.float32, requires_grad=True)
    saved_numels = []

    def pack(tensor):
        saved_numels.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = sblu_magnitude(*inputs, STEP, kernel_size, phase)
    out.sum().backward()
    assert saved_numels, "nothing saved for backward?"
    limit = 2 * math.prod(shape)
    assert max(saved_numels) <= limit, saved_numels
    assert sum(saved_numels) <= 5 * math.prod(shape), saved_numels  # v, α, β, Re r, Im r


@pytest.mark.parametrize("phase", PHASES)
def test_autocast_keeps_float32(phase):
    values, decay, frequency = random_sblu_inputs((2, 3, 40), 15, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sblu_magnitude(values, decay, frequency, STEP, 15, phase)
    expected = sblu_magnitude(values.float(), decay.float(), frequency.float(), STEP, 15, phase)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    # and backward under autocast reaches the bf16 leaves
    leaves = [t.clone().requires_grad_() for t in (values, decay, frequency)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sblu_magnitude(*leaves, STEP, 15, phase).sum().backward()
    assert all(t.grad is not None and t.grad.dtype == torch.bfloat16 and t.grad.isfinite().all() for t in leaves)


@pytest.mark.parametrize("phase", PHASES)
def test_zero_input_gives_zero_output_and_zero_gradients(phase):
    _, decay, frequency = random_sblu_inputs((2, 3, 30), 15, dtype=torch.float32)
    values = torch.zeros(2, 3, 30, requires_grad=True)
    decay.requires_grad_()
    frequency.requires_grad_()
    out = sblu_magnitude(values, decay, frequency, STEP, 15, phase)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    for grad in (values.grad, decay.grad, frequency.grad):
        assert torch.isfinite(grad).all() and torch.equal(grad, torch.zeros_like(grad))


# ---------------------------------------------------------------------------------------------------------------------
# 12. argument checks
# ---------------------------------------------------------------------------------------------------------------------


def test_bad_arguments_raise_value_error_naming_the_argument():
    v, a, b = random_sblu_inputs((1, 2, 16), 7)
    with pytest.raises(ValueError, match="phase='causal'"):
        sblu_magnitude(v, a, b, STEP, 7, phase="causal")
    for bad in (8, 1, 7.0):
        with pytest.raises(ValueError, match=f"kernel_size={bad!r}"):
            sblu_magnitude(v, a, b, STEP, bad)
    with pytest.raises(ValueError, match="step=0"):
        sblu_magnitude(v, a, b, 0.0, 7)
    with pytest.raises(ValueError, match=r"decay.shape=\(1, 2, 15\)"):
        sblu_magnitude(v, a[..., :15], b, STEP, 7)
    with pytest.raises(ValueError, match=r"values.shape=\(2, 16\)"):
        sblu_magnitude(v[0], a[0], b[0], STEP, 7)
    with pytest.raises(ValueError, match="kernel_size=4"):
        sblu_magnitude_reference(v, a, b, STEP, 4)
    with pytest.raises(ValueError, match="epsilon=1.5"):
        sblu_decay_min(1.5, STEP, 63)
    with pytest.raises(ValueError, match="time_patch_size=0"):
        sblu_frequency_range(STEP, 0)
    with pytest.raises(ValueError, match="num_taps=62"):
        highpass_fir_taps(62, 3.125, 100.0)
    with pytest.raises(ValueError, match="cutoff_hz=60.0"):
        highpass_fir_taps(63, 60.0, 100.0)
    with pytest.raises(ValueError, match=r"kernel.shape=\(124,\)"):
        zero_phase_highpass(torch.zeros(1, 2, 10), torch.zeros(124))


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("blocks", ["small", "two_clips", "whole"])
def test_blockwise_evaluation_matches_reference(phase, blocks, monkeypatch):
    """Eager CPU calls run block by block over (batch, channel-range) rows: many small blocks (and blocks that cut
    through the channels unevenly) give the reference values and gradients, with expanded parameters too; so does
    the one whole-tensor block that accelerators and torch.compile/export use."""
    import aasp_hf.modeling_aasp as sblu_module

    if blocks == "small":  # 2 padded rows (37 + 2·7 frames) per block, H = 5
        monkeypatch.setattr(sblu_module, "_SBLU_BLOCK_ELEMENTS", 2 * (37 + 14))
    elif blocks == "two_clips":  # whole clips, two per block: clips 0-1, then clip 2
        monkeypatch.setattr(sblu_module, "_SBLU_BLOCK_ELEMENTS", 2 * 5 * (37 + 14))
        assert list(sblu_module._row_blocks((3, 5, 37), 37 + 14)) == [
            (slice(0, 2), slice(None)),
            (slice(2, 3), slice(None)),
        ]
    values, decay, frequency = random_sblu_inputs((3, 5, 37), 15, seed=4)
    decay_small = decay[:1].clone().requires_grad_()
    leaves = [values.clone().requires_grad_(), decay_small, frequency.clone().requires_grad_()]
    inputs = (leaves[0], decay_small.expand(3, -1, -1), leaves[2])
    reference_leaves = [t.detach().clone().requires_grad_() for t in leaves]
    reference_inputs = (reference_leaves[0], reference_leaves[1].expand(3, -1, -1), reference_leaves[2])
    upstream = torch.randn(3, 5, 37, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    out = sblu_magnitude(*inputs, STEP, 15, phase, whole_tensor_pass=blocks == "whole")
    expected = sblu_magnitude_reference(*reference_inputs, STEP, 15, phase)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    grads = torch.autograd.grad(out, leaves, upstream)
    expected_grads = torch.autograd.grad(expected, reference_leaves, upstream)
    for grad, reference in zip(grads, expected_grads):
        torch.testing.assert_close(grad, reference, rtol=1e-9, atol=1e-10 * max(reference.abs().max().item(), 1.0))


# ---------------------------------------------------------------------------------------------------------------------
# 13. the per-token form used in masked pre-training (α, β fixed along each row)
# ---------------------------------------------------------------------------------------------------------------------


def random_token_inputs(rows, outputs, kernel_size, seed=0, requires_grad=False):
    """windows (G, P + K − 1) ~ N(0, 1) and one (α, β) per row, float64."""
    values, decay, frequency = random_sblu_inputs((1, rows, outputs + kernel_size - 1), kernel_size, seed=seed)
    return [t.requires_grad_(requires_grad) for t in (values[0], decay[0, :, 0].clone(), frequency[0, :, 0].clone())]


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("rows, outputs, kernel_size", [(6, 16, 63), (5, 3, 7)])
def test_token_magnitude_equals_reference_at_the_window_centre(phase, rows, outputs, kernel_size):
    """Row g: the reference on the whole window with α, β constant along it, read at the P frames whose ±c taps lie
    inside the window — values and gradients (plain autograd through the literal loop)."""
    windows, decay, frequency = random_token_inputs(rows, outputs, kernel_size, seed=outputs, requires_grad=True)
    half = (kernel_size - 1) // 2
    width = windows.shape[-1]
    leaves = [t.detach().clone().requires_grad_() for t in (windows, decay, frequency)]
    expected = sblu_magnitude_reference(
        leaves[0][None],
        leaves[1][None, :, None].expand(1, rows, width),
        leaves[2][None, :, None].expand(1, rows, width),
        STEP,
        kernel_size,
        phase,
    )[0, :, half : half + outputs]  # (G, P)
    out = sblu_token_magnitude(windows, decay, frequency, STEP, kernel_size, phase)
    assert out.shape == (rows, outputs) and out.dtype == torch.float64
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    upstream = torch.randn(rows, outputs, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    grads = torch.autograd.grad(out, [windows, decay, frequency], upstream)
    expected_grads = torch.autograd.grad(expected, leaves, upstream)
    for name, grad, reference in zip(("windows", "decay", "frequency"), grads, expected_grads):
        assert (grad - reference).abs().max().item() <= 1e-10 * max(reference.abs().max().item(), 1.0), name


@pytest.mark.parametrize("phase", PHASES)
def test_token_magnitude_gradcheck_and_zero_windows(phase):
    inputs = random_token_inputs(3, 4, 7, seed=7, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda w, a, b: sblu_token_magnitude(w, a, b, STEP, 7, phase), inputs, eps=1e-6, atol=1e-7
    )
    windows = torch.zeros(3, 10, requires_grad=True)  # all-zero windows: |r| = 0 (to 1e-19), finite zero gradients
    _, decay, frequency = random_token_inputs(3, 4, 7, seed=8, requires_grad=True)
    out = sblu_token_magnitude(windows, decay.float(), frequency.float(), STEP, 7, phase)
    assert out.dtype == torch.float32 and out.max().item() < 1e-18
    out.sum().backward()
    assert torch.equal(windows.grad, torch.zeros_like(windows))


def test_token_magnitude_bad_shapes_name_them():
    windows, decay, frequency = random_token_inputs(3, 4, 7)
    with pytest.raises(ValueError, match=r"windows.shape=\(3, 6\)"):
        sblu_token_magnitude(windows[:, :6], decay, frequency, STEP, 7)
    with pytest.raises(ValueError, match=r"decay.shape=\(2,\)"):
        sblu_token_magnitude(windows, decay[:2], frequency, STEP, 7)
    with pytest.raises(ValueError, match="phase='causal'"):
        sblu_token_magnitude(windows, decay, frequency, STEP, 7, "causal")


def test_whole_tensor_pass_is_an_attribute_of_the_module(tiny_config, monkeypatch):
    """`AaspSBLU.whole_tensor_pass`, set on the module by its caller (as `aasp_hf.plan.accelerator_code_path` does
    and restores), makes the CPU take the single whole-tensor pass; by default the CPU works in blocks."""
    import aasp_hf.modeling_aasp as modeling
    from aasp_hf import AaspModel
    from aasp_hf.plan import accelerator_code_path

    calls = []
    row_blocks = modeling._row_blocks
    monkeypatch.setattr(modeling, "_row_blocks", lambda *args: calls.append(args) or row_blocks(*args))
    model = AaspModel(tiny_config()).eval()
    sblu_modules = [module for module in model.modules() if isinstance(module, modeling.AaspSBLU)]
    assert sblu_modules and not any(module.whole_tensor_pass for module in sblu_modules)
    input_values = torch.randn(1, 64, 32, generator=torch.Generator().manual_seed(0))
    blockwise = model(input_values).last_hidden_state
    assert calls  # the CPU default: cache-sized blocks
    calls.clear()
    with accelerator_code_path(model):
        assert all(module.whole_tensor_pass for module in sblu_modules)
        whole = model(input_values).last_hidden_state
    assert not calls
    assert not any(module.whole_tensor_pass for module in sblu_modules)
    torch.testing.assert_close(whole, blockwise, rtol=0, atol=0)  # the same arithmetic
