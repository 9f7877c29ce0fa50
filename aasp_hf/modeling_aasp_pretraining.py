# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""AaSP pre-training: the predictors, the contrastive head and `AaspForPreTraining` (student, EMA teacher, losses).

Paper: "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers", Sec. "Predictor" and
"Pre-training Objectives". The encoder (`AaspModel`) and its classification head live in `modeling_aasp.py`.

Dimensions as in `modeling_aasp.py` (B batch, T frames, N tokens, D hidden), and M views per clip, V visible tokens
per view, Q query tokens per view, B' = B·M views, P predictor width, L context tokens (CLS + V).

This file is shipped to the Hub as remote code with pre-training checkpoints only (`AutoModelForPreTraining`): it
imports only torch, transformers and its sibling files (`modeling_aasp.py`, `transformer_block_aasp.py`,
`patch_embedding_aasp.py`, `objectives.py`, `configuration_aasp.py`).
Encoder and classifier checkpoints ship neither this file nor `objectives.py`.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from .configuration_aasp import AaspConfig
from .modeling_aasp import AaspModel, AaspPreTrainedModel
from .objectives import clip_loss, masked_prediction_loss, multi_view_contrastive_loss, teacher_targets
from .patch_embedding_aasp import sincos_position_embeddings
from .transformer_block_aasp import AaspMLP, attention_function
from .sblu import compute_dtype  # noqa: F401 - for transformers 5.0's copy of remote code (see modeling_aasp.py)

# The same copy (transformers 5.0 to 5.9, see modeling_aasp.py) left out pipeline_aasp.py, which modeling_aasp.py
# imports only inside save_pretrained: a pre-training folder loaded with trust_remote_code failed with "No such file
# ... pipeline_aasp.py". Named here it is one of this file's own imports; under TYPE_CHECKING it stays unimported at
# run time, so that loading the model does not import transformers' pipelines.
if TYPE_CHECKING:
    from .pipeline_aasp import CUSTOM_PIPELINES  # noqa: F401


try:  # transformers >= 5.2 records outputs by forward hooks, installed once per model
    from transformers.utils.output_capturing import maybe_install_capturing_hooks
except ImportError:  # transformers 5.0 and 5.1 patch the recorded blocks during each call: nothing to install

    def maybe_install_capturing_hooks(model):
        return None


# ----------------------------------------------------------------------------------------------- outputs
@dataclass
class AaspForPreTrainingOutput(ModelOutput):
    """
    loss (`torch.FloatTensor`, scalar): L = L_m + η_u·L_u + η_c·L_c.
    masked_prediction_loss (`torch.FloatTensor`, scalar): L_m, mean squared error over query tokens and dimensions
        (`config.loss_scaling="eat"`: × √D, EAT's per-token sum over D / √D averaged over the query tokens).
    clip_loss (`torch.FloatTensor`, scalar): L_u, mean squared error between each view's CLS and the clip target
        (`config.loss_scaling="eat"`: × B·M·√D, EAT's per-view sum over D / √D summed over the views).
    contrastive_loss (`torch.FloatTensor`, scalar): L_c, the multi-positive InfoNCE over views (mean over anchors).
    predictions (`torch.FloatTensor` of shape `(B, M, Q, D)`): predictor outputs at the query tokens.
    targets (`torch.FloatTensor` of shape `(B, N, D)`): the pooled, normalised teacher targets.
    """

    loss: torch.FloatTensor | None = None
    masked_prediction_loss: torch.FloatTensor | None = None
    clip_loss: torch.FloatTensor | None = None
    contrastive_loss: torch.FloatTensor | None = None
    predictions: torch.FloatTensor | None = None
    targets: torch.FloatTensor | None = None


# ----------------------------------------------------------------------------------------------- pre-training
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
        attention_interface = attention_function(self.config._attn_implementation)
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
        c = config
        return sincos_position_embeddings(c.predictor_hidden_size, c.num_frequency_patches, c.num_time_patches).float()

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
        c = self.config
        batch_size, _, hidden = encoder_output.shape
        if mask_noise is None:
            mask_noise = torch.randn(
                batch_size, c.num_patches, hidden, device=encoder_output.device, dtype=encoder_output.dtype
            )  # (B', N, D)
            mask_noise = mask_noise * c.predictor_cnn_mask_noise_std
        elif mask_noise.shape != (batch_size, c.num_patches, hidden):
            raise ValueError(
                f"mask_noise must have shape (B', N, D) = ({batch_size}, {c.num_patches}, {hidden}), "
                f"got {tuple(mask_noise.shape)}."
            )
        grid = mask_noise.to(encoder_output.dtype)  # (B', N, D), the noise stays at hidden tokens
        grid = grid.scatter(1, visible_indices[..., None].expand(-1, -1, hidden), encoder_output[:, 1:])
        x = grid.transpose(1, 2).reshape(batch_size, hidden, c.num_time_patches, c.num_frequency_patches)
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


class AaspForPreTraining(AaspPreTrainedModel):
    """AaSP pre-training (paper Sec. Predictor and Pre-training Objectives; Sec. Training Setup, Pre-training Setup).

    `aasp` is the student; `teacher` an EMA copy of the whole student encoder (AaPE included) that never receives
    gradients, stays in eval mode and sees each unmasked clip once. The trainer calls `update_teacher(momentum)`
    right after `optimizer.step()`. The predictor and the contrastive head are student-side only.
    Losses (reductions as in `objectives.py`): L = L_m + η_u·L_u + η_c·L_c.
    Fidelity options (see `AaspConfig`): `target_layer` (teacher block outputs or FFN outputs), `loss_scaling`
    (plain means or EAT's effective weights), `student_stem_input` (the student's AaPE stem on each masked view or
    on the full clip, EAT's order).
    """

    def __init__(self, config: AaspConfig):
        super().__init__(config)
        self.aasp = AaspModel(config)
        self.teacher = AaspModel(config)
        self.teacher.requires_grad_(False)
        self.predictor = AaspPredictor(config) if config.predictor_type == "cross_attention" else AaspCNNPredictor(config)
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
        if cnn is not None and self.config.initialization == "eat" and module in (*cnn.convs, cnn.output_projection):
            # EAT resets its decoder to PyTorch's defaults (models/images.py `ImageEncoder.reset_parameters` ->
            # models/modules.py `DecoderBase.reset_parameters`; the convolutions are never re-initialised):
            # weights kaiming_uniform_(a=√5), i.e. U(±1/sqrt(fan_in)), biases U(±1/sqrt(fan_in)). Matched layer by
            # layer: transformers skips a container without parameters of its own (the predictor) in custom code.
            fan_in = module.weight[0].numel()
            init.kaiming_uniform_(module.weight, a=5**0.5)
            init.uniform_(module.bias, -(fan_in**-0.5), fan_in**-0.5)

    def train(self, mode: bool = True):
        super().train(mode)
        self.teacher.eval()  # the teacher never uses dropout or drop path
        return self

    @torch.no_grad()
    def update_teacher(self, momentum: float | torch.Tensor):
        """θ_teacher ← m·θ_teacher + (1 − m)·θ_student (paper Sec. Training Setup).

        `momentum` may be a 0-d tensor on the parameters' device (the trainer passes `where(skipped, 1, m)`): the lerp
        weight 1 − m then stays on the device, nothing is read back, and a compiled step does not recompile as m
        changes. m = 1 leaves the teacher exactly unchanged, m = 0 copies the student exactly."""
        teacher_params = list(self.teacher.parameters())
        student_params = list(self.aasp.parameters())
        if isinstance(momentum, torch.Tensor):  # one 0-d weight per parameter (a single tensor weight is read back)
            weight = (1.0 - momentum).to(device=teacher_params[0].device, dtype=teacher_params[0].dtype)
            torch._foreach_lerp_(teacher_params, student_params, [weight] * len(teacher_params))
        else:
            torch._foreach_lerp_(teacher_params, student_params, 1.0 - momentum)

    @can_return_tuple
    def forward(
        self,
        input_values: torch.Tensor,
        visible_indices: torch.Tensor,
        query_indices: torch.Tensor,
        student_input_values: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> AaspForPreTrainingOutput:
        r"""
        input_values (`torch.FloatTensor` of shape `(B, T, F)`): normalised log-mel crops (T = `num_frames`).
        visible_indices (`torch.LongTensor` of shape `(B, M, V)`): visible tokens of each view (see
            `aasp_hf.data.masking`).
        query_indices (`torch.LongTensor` of shape `(B, M, Q)`): masked tokens each view's predictor reconstructs.
        student_input_values (`torch.FloatTensor` of shape `(B, T, F)`, *optional*): the student's view of the same
            clips (e.g. re-coloured by the collator's `student_eq_strength`); default `input_values`. The teacher
            always sees `input_values`.
        """
        c = self.config
        batch_size, num_views = visible_indices.shape[:2]
        if query_indices.shape[:2] != (batch_size, num_views):
            raise ValueError(
                f"query_indices must have shape (batch, views, queries) = ({batch_size}, {num_views}, Q), "
                f"got {tuple(query_indices.shape)}."
            )
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
            ffn_targets = c.target_layer == "ffn"
            teacher_output = self.teacher(
                input_values, output_hidden_states=not ffn_targets, output_ffn_outputs=ffn_targets
            )
            layer_outputs = teacher_output.ffn_outputs if ffn_targets else teacher_output.hidden_states[1:]
            layer_outputs = [hidden[:, 1:] for hidden in layer_outputs]  # L × (B, 1 + N, D) -> L × (B, N, D)
            targets = teacher_targets(layer_outputs, c.target_norm_axis)  # (B, N, D), float32

        # Student: only the visible tokens of each view.
        student = self.aasp(student_input_values, visible_indices=visible_indices).last_hidden_state  # (B·M, 1 + V, D)
        queries = query_indices.reshape(batch_size * num_views, -1)  # (B, M, Q) -> (B·M, Q)
        visible = visible_indices.reshape(batch_size * num_views, -1)  # (B, M, V) -> (B·M, V)
        predictions = self.predictor(student, visible, queries)  # (B·M, Q, D)
        view_targets = targets.repeat_interleave(num_views, dim=0)  # (B, N, D) -> (B·M, N, D)
        query_targets = view_targets.gather(1, queries[..., None].expand(-1, -1, targets.shape[-1]))  # (B·M, Q, D)

        loss_masked = masked_prediction_loss(predictions, query_targets, scaling=c.loss_scaling)
        student_cls = student[:, 0].reshape(batch_size, num_views, -1)  # (B·M, D) -> (B, M, D)
        loss_clip = clip_loss(student_cls, targets, scaling=c.loss_scaling)
        view_embeddings = self.contrastive_head(student[:, 1:].mean(dim=1))  # (B·M, D/2)
        view_embeddings = view_embeddings.reshape(batch_size, num_views, -1)  # (B·M, D/2) -> (B, M, D/2)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        loss_contrastive = multi_view_contrastive_loss(view_embeddings, c.contrastive_temperature, gather=distributed)
        loss = loss_masked + c.clip_loss_weight * loss_clip + c.contrastive_loss_weight * loss_contrastive

        return AaspForPreTrainingOutput(
            loss=loss,
            masked_prediction_loss=loss_masked.detach(),
            clip_loss=loss_clip.detach(),
            contrastive_loss=loss_contrastive.detach(),
            predictions=predictions.reshape(batch_size, num_views, *predictions.shape[1:]),  # (B, M, Q, D)
            targets=targets,
        )


__all__ = [
    "AaspCNNPredictor",
    "AaspContrastiveHead",
    "AaspForPreTraining",
    "AaspForPreTrainingOutput",
    "AaspPredictor",
]
