# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""AaSP audio spectrogram transformer: the SPE/AaPE patch embedding, the ViT encoder and its classification head.

Paper: "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers".
Symbols -> names: Λ = α + jβ -> (decay, frequency); Δ -> sblu_step; K -> sblu_kernel_size; H -> sblu_hidden_size;
C -> sblu_output_size; B̄ -> input_projection; C̄ -> output_projection; Γ -> sblu_gamma.

Dimensions: B batch, T frames, F mel bins, F̃/T̃ frequency/time patches, N = T̃·F̃ tokens (time-major: token
t·F̃ + f), D hidden size, H SBLU hidden channels, C SBLU output channels, C̃ = C/F̃, K SBLU taps.

This file is shipped to the Hub as remote code: it imports only torch, transformers, numpy and its sibling files
(`configuration_aasp.py`, `transformer_block_aasp.py`, the ViT block of the encoder and the Lambda encoder, and
`sblu.py`). The SBLU branch of AaPE (`AaspSBLU`) lives beside its operator in `sblu.py`;
pre-training (predictors, contrastive head, `AaspForPreTraining`) in `modeling_aasp_pretraining.py`, which only a
pre-training checkpoint ships.
"""

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.conversion_mapping import register_checkpoint_conversion_mapping
from transformers.core_model_loading import WeightRenaming
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_aasp import _LOADED_AS_REMOTE_CODE, AaspConfig
from .sblu import AaspSBLU, sblu_decay_min, sblu_frequency_range
from .transformer_block_aasp import AaspLambdaEncoderLayer, AaspLayer


# ----------------------------------------------------------------------------------------------- outputs
@dataclass
class AaspModelOutput(ModelOutput):
    """
    last_hidden_state (`torch.FloatTensor` of shape `(B, 1 + N, D)`): CLS token then the N patch tokens (time-major).
    hidden_states (`tuple(torch.FloatTensor)`, *optional*): embedding output and each layer's output, each `(B, 1 + N, D)`.
    attentions (`tuple(torch.FloatTensor)`, *optional*): each layer's attention weights `(B, heads, 1 + N, 1 + N)`.
    token_mask (`torch.LongTensor` of shape `(B, 1 + N)`, *optional*): 1 for real tokens (CLS and patches that hold
        at least one real frame), 0 for padding, like an attention mask; None when no attention mask was given (all
        tokens real).
    ffn_outputs (`tuple(torch.FloatTensor)`, *optional*): with `output_ffn_outputs=True`, each layer's FFN output
        before the residual add (and, post-norm, before the second LayerNorm), each `(B, 1 + N, D)`.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    token_mask: torch.LongTensor | None = None
    ffn_outputs: tuple[torch.FloatTensor, ...] | None = None


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


def _frame_mask_to_token_mask(frame_mask: torch.Tensor, time_patch_size: int, num_frequency_patches: int):
    """(B, T) frame mask -> (B, N) token mask: a patch is real when any of its frames is real."""
    batch_size, num_frames = frame_mask.shape
    patch_mask = frame_mask.reshape(batch_size, num_frames // time_patch_size, time_patch_size).any(-1)  # (B, T̃)
    return patch_mask.repeat_interleave(num_frequency_patches, dim=1)  # (B, T̃) -> (B, N), time-major


# ----------------------------------------------------------------------------------------------- AaPE parts
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
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )  # the form config._attn_implementation takes: (B, 1, N, N) for eager/SDPA, None when nothing is padded
        for layer in self.layers:
            hidden_states, _, _ = layer(hidden_states, attention_mask)
        lambdas = self.output_projection(self.norm(hidden_states)).float()  # (B, N, 2H/F̃)
        decay, frequency = lambdas.chunk(2, dim=-1)  # (B, N, H/F̃) each
        decay = F.softplus(decay) + self.decay_min
        frequency = (self.frequency_max - self.frequency_min) * torch.sigmoid(frequency) + self.frequency_min
        return decay, frequency


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


# ----------------------------------------------------------------------------------------------- models
class AaspPreTrainedModel(PreTrainedModel):
    config_class = AaspConfig
    config: AaspConfig
    base_model_prefix = "aasp"
    main_input_name = "input_values"
    input_modalities = ("audio",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["AaspEmbeddings", "AaspLayer"]
    _keep_in_fp32_modules_strict = ["sblu"]  # the SBLU branch's small convs and norm stay float32 in bf16/fp16 checkpoints
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
        "ffn_outputs": OutputRecorder(AaspLayer, index=2, capture_initial_hidden_state=False),
    }

    @torch.no_grad()
    def _init_weights(self, module):
        """Draw a new model's weights as `config.initialization` says ("trunc_normal" or EAT's "eat"; the two schemes
        and where EAT's comes from: docs/model.md, "Initialisation") and recompute the fixed tensors."""
        std = self.config.initializer_range
        eat = self.config.initialization == "eat"
        if isinstance(module, nn.Linear) and eat:
            init.normal_(module.weight, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            init.trunc_normal_(module.weight, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, (nn.LayerNorm, nn.GroupNorm)):
            init.ones_(module.weight)
            init.zeros_(module.bias)
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
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act", "qkv_bias",
        "layer_norm_first", "num_mel_bins", "num_frames", "frequency_patch_size", "time_patch_size",
        "patch_embedding", "sblu_kernel_size", "sblu_hidden_size", "sblu_output_size", "sblu_epsilon", "sblu_step",
        "sblu_adaptive", "sblu_phase", "sblu_highpass_num_taps", "lambda_encoder_reduction",
        "lambda_encoder_num_layers", "lambda_encoder_num_attention_heads", "lambda_encoder_mlp_ratio",
    )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, config=None, **kwargs):
        """As transformers', and an explicit `config=` (an `AaspConfig`) that disagrees with the checkpoint's own
        config on a field of `_checkpoint_fields` raises a ValueError naming the field, before any weight is read
        (transformers alone reports only tensor shapes, or loads an SPE config over AaPE weights with a warning).
        `ignore_mismatched_sizes=True` skips the check (deliberate re-initialisation)."""
        if isinstance(config, AaspConfig) and not kwargs.get("ignore_mismatched_sizes", False):
            saved = cls._saved_config_dict(pretrained_model_name_or_path, kwargs)
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
        hub_kwargs = {k: kwargs[k] for k in ("cache_dir", "force_download", "local_files_only", "token", "revision",
                                             "subfolder", "proxies") if k in kwargs}
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
            # channels of the files it decodes. The relative import makes save_pretrained ship pipeline_aasp.py too.
            from .pipeline_aasp import CUSTOM_PIPELINES

            self.config.custom_pipelines = CUSTOM_PIPELINES
        try:
            return super().save_pretrained(save_directory, *args, **kwargs)
        finally:  # the installed package's configs never hold the entry (see AaspConfig): only the saved file does
            if not _LOADED_AS_REMOTE_CODE and hasattr(self.config, "custom_pipelines"):
                del self.config.custom_pipelines

    def layer_id(self, parameter_name: str) -> int:
        """Depth of a parameter for layer-wise learning-rate decay: 0 = patch embedding (SPE/AaPE), CLS and the
        embedding norm; i + 1 = encoder block i; num_hidden_layers + 1 = everything after the blocks (heads)."""
        name = parameter_name.removeprefix(f"{self.base_model_prefix}.")
        if name.startswith(("embeddings.", "cls_token", "embedding_norm.")):
            return 0
        if name.startswith("layers."):
            return int(name.split(".")[1]) + 1
        return self.config.num_hidden_layers + 1

    def no_weight_decay(self) -> set[str]:
        """Parameter names excluded from weight decay besides biases and norms: CLS and positions (MAE's convention)."""
        return {name for name, _ in self.named_parameters() if "cls_token" in name or "position_embeddings" in name}


class AaspModel(AaspPreTrainedModel):
    """AaSP encoder: patch embedding (SPE/AaPE) -> prepend CLS -> LayerNorm -> ViT blocks (EAT's layout, which the
    paper follows: fixed 2-D sin-cos positions, CLS without position, post-norm ViT-B blocks)."""

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
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.layer_norm_first else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.projection

    def _check_views(self, input_values, attention_mask, visible_indices):
        c = self.config
        if attention_mask is not None:
            raise ValueError("visible_indices (masked pre-training) cannot be combined with attention_mask.")
        if input_values.ndim == 3 and input_values.shape[1] % c.time_patch_size:
            raise ValueError(
                f"With visible_indices the input length must be a multiple of {c.time_patch_size} frames, "
                f"got {input_values.shape[1]}: pad or crop the clips (pre-training uses {c.num_frames} frames)."
            )
        if visible_indices.ndim != 3 or visible_indices.shape[0] != input_values.shape[0]:
            raise ValueError(
                f"visible_indices must have shape (batch, views, visible tokens) with batch={input_values.shape[0]}, "
                f"got {tuple(visible_indices.shape)}."
            )

    def _check_and_pad(self, input_values, attention_mask):
        """Validates (B, T, F) input and pads T to a multiple of P_time. Returns input and a bool frame mask or None."""
        c = self.config
        if input_values.ndim != 3 or input_values.shape[-1] != c.num_mel_bins:
            raise ValueError(
                f"AaspModel expects input_values of shape (batch, frames, {c.num_mel_bins}) (log-mel from "
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
        remainder = num_frames % c.time_patch_size
        if remainder:
            pad = c.time_patch_size - remainder
            input_values = F.pad(input_values, (0, 0, 0, pad))  # (B, T, F) -> (B, T + pad, F), zeros
            if frame_mask is None:
                frame_mask = torch.ones(batch_size, num_frames, dtype=torch.bool, device=input_values.device)
            frame_mask = F.pad(frame_mask, (0, pad), value=False)
        return input_values, frame_mask

    @capture_outputs(tie_last_hidden_states=False)
    def forward(
        self,
        input_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        visible_indices: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        **kwargs,
    ) -> AaspModelOutput:
        r"""
        input_values (`torch.FloatTensor` of shape `(B, T, F)`): normalised log-mel from `AaspFeatureExtractor`.
            T need not be a multiple of 16: the input is zero-padded and the padding masked out.
        attention_mask (`torch.LongTensor` of shape `(B, T)`, *optional*): 1 for real frames, 0 for padding.
        visible_indices (`torch.LongTensor` of shape `(B, M, V)`, *optional*): masked pre-training — encode only
            these patch tokens (time-major indices) of M views of each clip; the output batch is then B·M and
            `last_hidden_state` is `(B·M, 1 + V, D)`. Not combinable with `attention_mask`.
        output_attentions (`bool`, *optional*): return each block's attention weights (computed eagerly).
        output_hidden_states (`bool`, *optional*): return the embedding output and each block's output.
        output_ffn_outputs (`bool`, *optional*, False): return each block's FFN output (`ffn_outputs`), the teacher
            targets of `config.target_layer="ffn"`.
        The three `output_*` flags are recorded by transformers' `capture_outputs` (see `_can_record_outputs`).
        """
        c = self.config
        output_attentions = output_attentions if output_attentions is not None else c.output_attentions
        if visible_indices is not None:
            self._check_views(input_values, attention_mask, visible_indices)
        input_values, frame_mask = self._check_and_pad(input_values, attention_mask)
        input_values = input_values.to(self.embeddings.projection.weight.dtype)

        patch_mask = token_mask = None
        if frame_mask is not None:
            patch_mask = _frame_mask_to_token_mask(frame_mask, c.time_patch_size, c.num_frequency_patches)  # (B, N)
            token_mask = F.pad(patch_mask, (1, 0), value=True)  # CLS first: (B, N) -> (B, 1 + N)

        patches = self.embeddings(input_values, frame_mask, patch_mask, visible_indices)  # (B, N, D) or (B·M, V, D)
        cls = self.cls_token.expand(patches.shape[0], -1, -1).to(patches.dtype)  # (B, 1, D), no position
        hidden_states = self.embedding_dropout(self.embedding_norm(torch.cat([cls, patches], dim=1)))  # (B, 1 + N, D)

        attn_mask = create_bidirectional_mask(config=c, inputs_embeds=hidden_states, attention_mask=token_mask)
        for layer in self.layers:
            hidden_states, _, _ = layer(hidden_states, attn_mask, output_attentions)
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


class AaspForAudioClassification(AaspPreTrainedModel):
    """AaSP encoder with LayerNorm + Linear on the CLS token (or the mean of the real patch tokens)."""

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
        if self.config.classifier_pooling == "cls":
            return last_hidden_state[:, 0]
        patches = last_hidden_state[:, 1:]  # (B, N, D)
        if token_mask is None:
            return patches.mean(dim=1)
        weight = token_mask[:, 1:, None].to(patches.dtype)  # (B, N, 1)
        return (patches * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1.0)

    @can_return_tuple
    def forward(
        self,
        input_values: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput:
        r"""
        labels (`torch.LongTensor` of shape `(B,)` or `torch.FloatTensor` of shape `(B, num_labels)`, *optional*):
            class indices (cross-entropy), multi-hot / soft targets (BCE with logits), or values (MSE, 1 label).
            The loss follows `config.problem_type`; when unset it is inferred as in transformers.
        `output_attentions` / `output_hidden_states` are passed to the encoder (`AaspModel.forward`).
        """
        outputs = self.aasp(input_values, attention_mask=attention_mask, **kwargs)
        pooled = self.pool(outputs.last_hidden_state, outputs.token_mask)  # (B, D)
        logits = self.classifier(pooled)  # (B, num_labels)

        loss = None
        if labels is not None:
            loss = self.classification_loss(logits, labels)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )

    def classification_loss(self, logits, labels):
        """Cross-entropy for single-label, BCE-with-logits for multi-label (and mixup targets), MSE for regression."""
        problem_type = self.config.problem_type
        if problem_type is None:
            if self.num_labels == 1:
                problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                problem_type = "single_label_classification"
            else:
                problem_type = "multi_label_classification"
        if problem_type == "regression":
            return F.mse_loss(logits.squeeze(-1).float(), labels.float())
        if problem_type == "single_label_classification":
            return F.cross_entropy(logits.float(), labels.long())
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


# Checkpoints saved before the classification head was one module (AaspClassificationHead) name its LayerNorm
# `classifier_norm` and its Linear `classifier`. transformers renames them on loading and back on saving (its
# `save_original_format`), so checkpoints on disk keep the names every released version reads.
register_checkpoint_conversion_mapping(
    "AaspForAudioClassification",
    [
        WeightRenaming(source_patterns=r"^classifier_norm\.", target_patterns="classifier.layernorm."),
        WeightRenaming(source_patterns=r"^classifier\.weight", target_patterns="classifier.dense.weight"),
        WeightRenaming(source_patterns=r"^classifier\.bias", target_patterns="classifier.dense.bias"),
    ],
    overwrite=True,  # a checkpoint's remote code may import this file again under another module name
)


__all__ = [
    "AaspModel",
    "AaspForAudioClassification",
    "AaspPreTrainedModel",
    "AaspModelOutput",
    "AaspClassificationHead",
]
