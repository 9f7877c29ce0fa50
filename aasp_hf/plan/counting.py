"""The FLOP count of a fake step: `flop_counter` (FlopCounterMode with the grouped-convolution weight gradient and
the CPU attention kernel counted right) and the analytic FLOPs of what FlopCounterMode does not see (the dense SBLU
taps, the zero-phase high-pass)."""

import math

import torch


def sblu_tap_flops(config, num_sequences: int) -> int:
    """FLOPs of the dense SBLU arithmetic that FlopCounterMode does not see (it counts matmuls/convolutions only),
    forward, for `num_sequences` clips of `config.num_frames` frames.

    Counted from the implementation (the forward of modeling_aasp.py's SBLU operator, and AaspSBLU.forward for
    2·Γ·|r|): per (sequence, hidden channel, frame) element, with c = (K−1)/2 taps per side, every tap d = 1..c costs a + b (1) and
    two addcmul (2 each) [analytic phase: + a − b (1)], and every d < c the running power p ← p·z, one complex multiply
    (6 real FLOPs); set-up z = exp(−Δα)·(cos, −sin)(Δβ) ≈ 8 (transcendentals counted as 1), |r| = sqrt(re² + im²) 4,
    2·Γ·|r| with Γ of Eq. (6) ≈ 14.
    In masked pre-training the student's taps are a depthwise conv1d per visible token, which the counter does see.
    """
    return sblu_tap_flops_per_element(config) * num_sequences * config.sblu_hidden_size * config.num_frames


def sblu_tap_flops_per_element(config) -> int:
    """FLOPs per (sequence, hidden channel, frame) element of the dense SBLU (see `sblu_tap_flops`)."""
    half = (config.sblu_kernel_size - 1) // 2
    per_tap = 6 if config.sblu_phase == "analytic" else 5
    return per_tap * half + 6 * (half - 1) + 8 + 4 + 14


def highpass_flops(config, num_sequences: int, num_frames: int | None = None) -> int:
    """The zero-phase high-pass is an FFT convolution; counted as its direct equivalent, 2·L per output sample
    (L = 2·taps − 1, the forward–backward kernel), over F mel bins and T frames of `num_sequences` sequences."""
    frames = config.num_frames if num_frames is None else num_frames
    return 2 * (2 * config.sblu_highpass_num_taps - 1) * num_sequences * config.num_mel_bins * frames


def _forward_conv_flops(x_shape, w_shape, out_shape, transposed: bool) -> int:
    """2 · batch · output positions · C_out · (C_in / groups) · kernel: the weight shape (C_out, C_in/groups, *k)
    already carries the groups; for a transposed convolution the input plays the output's role."""
    batch = x_shape[0]
    positions = math.prod(x_shape[2:] if transposed else out_shape[2:])
    return 2 * batch * positions * math.prod(w_shape)


def conv_backward_flop(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    _groups,
    output_mask,
    out_shape,
    **kwargs,
) -> int:
    """`aten.convolution_backward`: each requested gradient (input, weight) costs what the forward costs.

    Replaces FlopCounterMode's formula, whose weight-gradient term treats a grouped convolution as dense (it
    multiplies the batch by the whole transposed input and gradient, G× too much for G groups)."""
    forward = _forward_conv_flops(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def cpu_attention_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """`aten._scaled_dot_product_flash_attention_for_cpu` (what SDPA runs on CPU tensors, fake ones included): the
    formula FlopCounterMode uses for the CUDA flash / efficient kernels (4·B·h·S_q·S_k·d), which it does not apply to
    the CPU kernel (it would count no attention at all)."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def cpu_attention_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    """The backward of `cpu_attention_flop`'s kernel, with FlopCounterMode's formula for the CUDA kernels'."""
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def flop_counter():
    """FlopCounterMode with the grouped-convolution fix (`conv_backward_flop`) and the CPU attention kernel counted
    (`cpu_attention_flop`): the fake step runs on the CPU's operators, a GPU step on the CUDA ones."""
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    return FlopCounterMode(
        display=False,
        custom_mapping={  # each formula receives shapes (FlopCounterMode wraps it)
            aten.convolution_backward: conv_backward_flop,
            aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention_flop,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_attention_backward_flop,
        },
    )
