# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The ViT block of AaSP: multi-head self-attention, MLP and stochastic depth, post-norm (EAT) or pre-norm.

Paper: "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers". One block class serves
the encoder (`AaspLayer`, EAT's post-norm ViT-B block; `modeling_aasp.py`) and the Lambda encoder of AaPE
(`AaspLambdaEncoderLayer`, pre-norm; `patch_embedding_aasp.py`), so it lives apart from both. The pre-training
predictor (`modeling_aasp_pretraining.py`) reuses the MLP and the eager attention function.

Dimensions: B batch, N tokens, D width, heads attention heads of width d = D / heads.

This file is shipped to the Hub as remote code: it imports only torch, transformers and its sibling
`configuration_aasp.py`.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .configuration_aasp import AaspConfig


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
    computed by the eager path, so `output_attentions=True` runs this call eagerly."""

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

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, **kwargs):
        batch_size, seq_len, _ = hidden_states.shape
        head_shape = (batch_size, seq_len, self.num_heads, self.head_dim)
        query = self.query(hidden_states).view(head_shape).transpose(1, 2)  # (B, N, D) -> (B, heads, N, d)
        key = self.key(hidden_states).view(head_shape).transpose(1, 2)  # (B, N, D) -> (B, heads, N, d)
        value = self.value(hidden_states).view(head_shape).transpose(1, 2)  # (B, N, D) -> (B, heads, N, d)

        attention_interface: Callable = eager_attention_forward
        if not output_attentions:
            attention_interface = attention_function(self.config._attn_implementation)
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


def attention_function(implementation: str | None) -> Callable:
    """The attention function transformers registers for `config._attn_implementation` ("sdpa", "flex_attention",
    "flash_attention_2", ...), `eager_attention_forward` for "eager" or None. Through the registry's `get_interface`,
    which also refuses a name it does not hold, where the installed transformers has it; transformers 5.0 and 5.1 have
    only the registry's mapping, read here with the same refusal."""
    get_interface = getattr(ALL_ATTENTION_FUNCTIONS, "get_interface", None)
    if get_interface is not None:
        return get_interface(implementation, eager_attention_forward)
    if implementation is None or implementation == "eager":
        return eager_attention_forward
    if implementation not in ALL_ATTENTION_FUNCTIONS:
        raise KeyError(f"`{implementation}` is not an attention implementation transformers registers")
    return ALL_ATTENTION_FUNCTIONS[implementation]


class AaspMLP(nn.Module):
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

    def __init__(self, config, hidden_size, num_heads, intermediate_size, layer_norm_first, drop_path):
        super().__init__()
        self.layer_norm_first = layer_norm_first
        self.attention = AaspSelfAttention(config, hidden_size, num_heads)
        self.norm1 = nn.LayerNorm(hidden_size, eps=config.layer_norm_eps)
        self.mlp = AaspMLP(config, hidden_size, intermediate_size)
        self.norm2 = nn.LayerNorm(hidden_size, eps=config.layer_norm_eps)
        self.drop_path = AaspDropPath(drop_path)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, **kwargs):
        if self.layer_norm_first:
            attn_output, attn_weights = self.attention(self.norm1(hidden_states), attention_mask, output_attentions)
            hidden_states = hidden_states + self.drop_path(self.dropout(attn_output))
            ffn_output = self.mlp(self.norm2(hidden_states))
            hidden_states = hidden_states + self.drop_path(ffn_output)
        else:
            attn_output, attn_weights = self.attention(hidden_states, attention_mask, output_attentions)
            hidden_states = self.norm1(hidden_states + self.drop_path(self.dropout(attn_output)))
            ffn_output = self.mlp(hidden_states)
            hidden_states = self.norm2(hidden_states + self.drop_path(ffn_output))
        return hidden_states, attn_weights, ffn_output


class AaspLayer(AaspBlock):
    """A block of the encoder (EAT's post-norm ViT-B block in the paper's configuration)."""


class AaspLambdaEncoderLayer(AaspBlock):
    """A pre-norm block of the Lambda encoder (paper Sec. AaPE (1))."""

