# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The patch embedding of AaSP (`AaspEmbeddings`): SPE, the standard patch embedding, or AaPE, the aliasing-aware
patch embedding (SPE + Lambda encoder + SBLU branch + patch fusion), with the fixed 2-D sin-cos positions.

Paper: "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers", Sec. "Aliasing-aware
Patch Embedding (AaPE)" (1) the Lambda encoder, (2) the SBLU branch (a)-(d), and "Patch Fusion".

    sincos_position_embeddings          the fixed 2-D sin-cos position table
    AaspLambdaEncoder                   AaPE (1): (α, β) of every token from X_spec + positions
    AaspGroupedProjection,              the SBLU branch's layers (B̄ and C̄; GroupNorm with masked statistics; the
    AaspMaskedGroupNorm,                time patchifier), each computing with its weights in its own forward, dense
    AaspTimePatchify                    or per visible token, so offload hooks, forward hooks and adapters see them
    AaspSBLU                            AaPE (2) (a)-(d): high-pass, B̄, 2Γ|r|, C̄, GroupNorm, time patchifier; one
                                        forward, dense or at each view's visible tokens
    AaspEmbeddings                      the stem: X_spec, the Lambda encoder, the SBLU branch, f_fuse, positions

The SBLU operator itself (|r| of Eq. 3, Γ, the high-pass filter, the parameter bounds) is in `sblu.py`; the ViT block
of the Lambda encoder (the encoder's block, pre-norm) in `transformer_block_aasp.py`.

Symbols -> names: Λ = α + jβ -> (decay, frequency); Δ -> sblu_step; K -> sblu_kernel_size; H -> sblu_hidden_size;
C -> sblu_output_size; B̄ -> input_projection; C̄ -> output_projection; Γ -> sblu_gamma.
Dimensions: B batch, T frames, F mel bins, F̃/T̃ frequency/time patches, N = T̃·F̃ tokens (time-major: token
t·F̃ + f), D hidden size, H SBLU hidden channels, C SBLU output channels, C̃ = C/F̃, K SBLU taps, c = (K−1)/2,
P = P_time; in masked pre-training M views per clip and V visible tokens per view.

This file is shipped to the Hub as remote code: it imports only torch, transformers, numpy and its sibling files
(`configuration_aasp.py`, `sblu.py`, `transformer_block_aasp.py`).
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers.masking_utils import create_bidirectional_mask

from .configuration_aasp import AaspConfig
from .sblu import (
    compute_dtype,
    highpass_fir_taps,
    sblu_decay_min,
    sblu_frequency_range,
    sblu_gamma,
    sblu_magnitude,
    sblu_token_magnitude,
    zero_phase_highpass,
    zero_phase_kernel,
)
from .transformer_block_aasp import AaspLambdaEncoderLayer


# ----------------------------------------------------------------------------------------------- positions
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


# --------------------------------------------------------------------------------------------- AaPE (1): Lambda encoder
class AaspLambdaEncoder(nn.Module):
    """Lambda encoder (paper Sec. AaPE (1)): estimates the SBLU decay α and frequency β for every token.

    X_spec + positions -> Linear(D -> D/r) -> L pre-norm ViT blocks -> LayerNorm -> Linear(D/r -> 2H/F̃), split into
    α, β (H/F̃ each per token), bounded as α = softplus(·) + α_min, β = (β_max − β_min)·σ(·) + β_min.
    Attention is restricted to the real tokens given by `attention_mask`, so in masked pre-training it attends
    only among visible tokens.
    """

    def __init__(self, config: AaspConfig):
        super().__init__()
        width = config.lambda_encoder_hidden_size
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
        # the form config._attn_implementation takes: (B, 1, N, N) for eager/SDPA, None when nothing is padded. The
        # embeddings go by position: transformers 5.0 names that parameter input_embeds, later releases inputs_embeds
        attention_mask = create_bidirectional_mask(self.config, hidden_states, attention_mask)
        for layer in self.layers:
            hidden_states, _, _ = layer(hidden_states, attention_mask)
        lambdas = self.output_projection(self.norm(hidden_states)).float()  # (B, N, 2H/F̃)
        decay, frequency = lambdas.chunk(2, dim=-1)  # (B, N, H/F̃) each
        decay = F.softplus(decay) + self.decay_min
        frequency = (self.frequency_max - self.frequency_min) * torch.sigmoid(frequency) + self.frequency_min
        return decay, frequency


# ----------------------------------------------------------------------------------------------- AaPE (2): SBLU branch
def _masked_group_norm(x, norm: nn.GroupNorm, visibility):
    """GroupNorm whose statistics cover only the visible frames of each group (``AaspMaskedGroupNorm``'s dense path).

    x: (B, C, T); visibility: float (B, G or 1, T) with G = norm.num_groups, 1 = real/visible, or None (plain GroupNorm).
    """
    if visibility is None:
        return norm(x)
    dtype = torch.promote_types(x.dtype, torch.float32)  # statistics in float32 also under autocast
    batch_size, channels, num_frames = x.shape
    groups = x.to(dtype).reshape(batch_size, norm.num_groups, channels // norm.num_groups, num_frames)  # -> (B, G, C/G, T)
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
        hidden_size, output_size = config.sblu_hidden_size, config.sblu_output_size  # H, C
        mel_bins = config.num_mel_bins
        self.input_projection = AaspGroupedProjection(mel_bins, hidden_size, 1, groups=groups, dtype=dtype)  # B̄
        self.output_projection = AaspGroupedProjection(hidden_size, output_size, 1, groups=groups, dtype=dtype)  # C̄
        self.norm = AaspMaskedGroupNorm(groups, output_size, dtype=dtype)
        patch = config.time_patch_size  # depthwise, kernel = stride = P_time
        self.time_patchify = AaspTimePatchify(output_size, output_size, patch, stride=patch, groups=output_size,
                                              dtype=dtype)
        self.register_buffer("highpass_kernel", self.compute_highpass_kernel(config).to(dtype), persistent=False)
        self.decay_min = sblu_decay_min(config.sblu_epsilon, config.sblu_step, config.sblu_kernel_size)
        self.frequency_min, self.frequency_max = sblu_frequency_range(config.sblu_step, config.time_patch_size)
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
        c = self.config
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
                bins_per_group = c.frequency_patch_size if visibility.shape[1] > 1 else 1
                mel = mel * visibility.repeat_interleave(bins_per_group, dim=1)  # (B, F̃|1, T) -> (B, F|1, T)
            highpassed = zero_phase_highpass(mel, self.highpass_kernel)  # (a) (B, F, T)
            values = self.input_projection(highpassed)  # (b) B̄, float32 also in a bf16 model: (B, F, T) -> (B, H, T)
            if visibility is not None:
                channels_per_group = c.sblu_hidden_size // c.num_frequency_patches if visibility.shape[1] > 1 else 1
                values = values * visibility.repeat_interleave(channels_per_group, dim=1)  # -> (B, H|1, T)
            magnitude = sblu_magnitude(values, decay, frequency, self.step, self.kernel_size, self.phase)  # (c)
            response = 2.0 * sblu_gamma(decay, frequency, self.step) * magnitude  # 2Γ|r|, (B, H, T)

        # C̄, the GroupNorm and the time patchifier compute in float32 also when a plain .half() cast their weights
        response = response.to(torch.promote_types(self.output_projection.weight.dtype, torch.float32))
        features = self.output_projection(response)  # C̄: (B, H, T) -> (B, C, T)
        features = self.norm(features, visibility)  # (d)
        features = self.time_patchify(features)  # (B, C, T) -> (B, C, T̃)
        num_groups = c.num_frequency_patches
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
        c = self.config
        batch_views = views.shape[0]
        num_time_patches = num_frames // c.time_patch_size
        token_visible = views.new_zeros(batch_views, num_time_patches * c.num_frequency_patches, dtype=torch.bool)
        token_visible = token_visible.scatter(1, views, True)  # (B·M, N)
        token_visible = token_visible.reshape(batch_views, num_time_patches, -1)  # (B·M, N) -> (B·M, T̃, F̃)
        return token_visible.transpose(1, 2).repeat_interleave(c.time_patch_size, dim=-1).float()  # -> (B·M, F̃, T)

    def _token_windows(self, mel, views, visibility):
        """(a) The high-passed mel around each visible token: its group's F/F̃ bins on the token's P_time frames and
        ±c frames either side (zeros outside the clip), and which of those frames count (hidden ones do not under
        "masked"). mel (B, F, T), views (B·M, V), visibility (B·M, F̃, T) ->
        windows float32 or float64 (stem_dtype) (B·M, V, F/F̃, P + 2c), window_visible (B·M, V, P + 2c)."""
        c = self.config
        num_groups = c.num_frequency_patches
        bins = c.frequency_patch_size  # F/F̃ mel bins per frequency group
        half = (self.kernel_size - 1) // 2  # c
        width = c.time_patch_size + 2 * half  # window length P + 2c
        batch_views = views.shape[0]
        num_frames = mel.shape[-1]
        num_views = batch_views // mel.shape[0]
        dtype = self.stem_dtype(mel)
        time_index, group_index = views // num_groups, views % num_groups  # (B·M, V) each
        rows = torch.arange(batch_views, device=views.device)[:, None, None]  # (B·M, 1, 1)
        if c.student_stem_input == "full":
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

        frames = time_index[..., None] * c.time_patch_size + torch.arange(width, device=views.device)  # (B·M, V, P+2c)
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


# ----------------------------------------------------------------------------- the stem: SPE, or AaPE with patch fusion
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
        if config.patch_embedding == "aape":
            self.lambda_encoder = AaspLambdaEncoder(config) if config.sblu_adaptive else None
            self.sblu = AaspSBLU(config)
            alias_size = config.sblu_output_size // config.num_frequency_patches  # C̃
            self.spec_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.alias_norm = nn.LayerNorm(alias_size, eps=config.layer_norm_eps)
            self.fusion = nn.Linear(config.hidden_size + alias_size, config.hidden_size)  # f_fuse

    def compute_position_embeddings(self) -> torch.Tensor:
        """Float32 (1, 1 + N, D): zero row for CLS, then the sin-cos table."""
        c = self.config
        table = sincos_position_embeddings(c.hidden_size, c.num_frequency_patches, c.num_time_patches)  # (N, D)
        return torch.cat([torch.zeros(1, c.hidden_size, dtype=table.dtype), table])[None].float()

    def patch_positions(self, num_time_patches: int, valid_time_patches: torch.Tensor | None = None) -> torch.Tensor:
        """Positions (B or 1, T̃'·F̃, D) for an input with T̃' time patches.

        Each clip uses its own length (`valid_time_patches`, (B,), default T̃'): a clip that fits the table takes its
        first rows; a longer clip gets the table linearly interpolated along time (F.interpolate's "linear",
        align_corners=False, mapping). Per-clip lengths make a padded batch give every clip the positions it gets
        alone. Rows past a clip's length (padding) are clamped copies.
        """
        c = self.config
        table = self.position_embeddings[0, 1:].reshape(c.num_time_patches, -1)  # (N, D) -> (T̃, F̃·D)
        target = torch.arange(num_time_patches, device=table.device, dtype=torch.float32)[None]  # (1, T̃')
        if valid_time_patches is None:
            length = torch.full((1, 1), num_time_patches, device=table.device, dtype=torch.float32)
        else:
            length = valid_time_patches.to(device=table.device, dtype=torch.float32)[:, None]  # (B, 1)
        stretched = (target + 0.5) * (c.num_time_patches / length) - 0.5
        source = torch.where(length > c.num_time_patches, stretched, target).clamp(0, c.num_time_patches - 1)
        low = source.floor().long()  # (B, T̃')
        high = (low + 1).clamp(max=c.num_time_patches - 1)
        weight = (source - low)[..., None].to(table.dtype)  # (B, T̃', 1)
        rows = table[low] * (1 - weight) + table[high] * weight  # (B, T̃', F̃·D)
        return rows.reshape(rows.shape[0], -1, c.hidden_size)  # (B, T̃', F̃·D) -> (B, T̃'·F̃, D)

    def forward(self, input_values, frame_mask=None, attention_mask=None, visible_indices=None):
        """input_values: (B, T, F), T a multiple of P_time; frame_mask: (B, T) bool or None;
        attention_mask: (B, N) token mask for the Lambda encoder (1 = real patch) or None;
        visible_indices: (B, M, V) long or None — masked pre-training: embed only the V visible tokens of each of
        M views per clip (the Lambda encoder attends among them only).
        Returns (B, N, D) patch tokens with positions, or (B·M, V, D) with `visible_indices`."""
        c = self.config
        batch_size, num_frames, _ = input_values.shape
        num_time_patches = num_frames // c.time_patch_size
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
        if c.patch_embedding == "spe":
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
        c = self.config
        batch_size, num_tokens, per_group = per_token.shape
        num_time_patches = num_tokens // c.num_frequency_patches
        grid = per_token.reshape(batch_size, num_time_patches, c.num_frequency_patches, per_group)  # (B, T̃, F̃, H/F̃)
        grid = grid.permute(0, 2, 3, 1)  # (B, T̃, F̃, H/F̃) -> (B, F̃, H/F̃, T̃)
        grid = grid.reshape(batch_size, c.num_frequency_patches * per_group, num_time_patches)  # -> (B, H, T̃)
        return grid.repeat_interleave(c.time_patch_size, dim=-1)  # (B, H, T̃) -> (B, H, T)

