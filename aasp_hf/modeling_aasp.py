# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""AaSP audio spectrogram transformer: the encoder `AaspModel`, the classifier `AaspForAudioClassification` with its
head, and their base class `AaspPreTrainedModel` (initialisation, the checks on loading, the saved `auto_map`).

Paper: "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers". The encoder is EAT's
layout, which the paper follows: patch embedding (SPE or AaPE, `AaspEmbeddings`) -> prepend CLS -> LayerNorm -> ViT
blocks (`AaspLayer`).

Dimensions: B batch, T frames, F mel bins, F̃/T̃ frequency/time patches, N = T̃·F̃ tokens (time-major: token
t·F̃ + f), D hidden size.

This file is shipped to the Hub as remote code: it imports only torch, transformers, numpy and its sibling files
`configuration_aasp.py`, `patch_embedding_aasp.py` (the SPE/AaPE stem: positions, Lambda encoder, SBLU branch, patch
fusion; the SBLU operator it uses is in `sblu.py`) and `transformer_block_aasp.py` (the ViT block of the encoder and
of the Lambda encoder). Pre-training (predictors, contrastive head, `AaspForPreTraining`) is in
`modeling_aasp_pretraining.py`, which only a pre-training checkpoint ships.
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
from transformers.utils import __version__ as transformers_version
from transformers.utils.generic import can_return_tuple

try:  # transformers >= 5.2: output recording by forward hooks
    from transformers.utils.output_capturing import OutputRecorder, capture_outputs
except ImportError:  # transformers 5.0 and 5.1: the same recording, by patching the recorded blocks' forward per call
    from transformers.utils.generic import OutputRecorder
    from transformers.utils.generic import check_model_inputs as capture_outputs

from .configuration_aasp import _LOADED_AS_REMOTE_CODE, AaspConfig
from .patch_embedding_aasp import AaspEmbeddings, AaspSBLU

# transformers 5.0 to 5.9 copy a local checkpoint's remote code into their module cache only as deep as the files
# the loaded module imports itself (5.10.1 follows every relative import), so a file that a sibling imports is
# imported here too: without it AutoModel.from_pretrained(folder, trust_remote_code=True) found no sblu.py in the cache
from .sblu import compute_dtype  # noqa: F401
from .transformer_block_aasp import AaspLayer


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


# ----------------------------------------------------------------------------------------------- token mask
def _frame_mask_to_token_mask(frame_mask: torch.Tensor, time_patch_size: int, num_frequency_patches: int):
    """(B, T) frame mask -> (B, N) token mask: a patch is real when any of its frames is real."""
    batch_size, num_frames = frame_mask.shape
    patch_mask = frame_mask.reshape(batch_size, num_frames // time_patch_size, time_patch_size).any(-1)  # (B, T̃)
    return patch_mask.repeat_interleave(num_frequency_patches, dim=1)  # (B, T̃) -> (B, N), time-major


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
        "ffn_outputs": OutputRecorder(AaspLayer, index=2),
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

        # by position: transformers 5.0 names the embeddings input_embeds, later releases inputs_embeds
        attn_mask = create_bidirectional_mask(c, hidden_states, token_mask)
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
# `save_original_format`), so checkpoints on disk keep the names every released version reads. The patterns are
# regexes without escapes: transformers 5.0 writes a reversed renaming's pattern as the saved key itself (it saved
# `classifier\.weight` for `^classifier\.weight`); an unescaped "." matches the dot just the same.
def _head_renamings() -> list:
    return [
        WeightRenaming(source_patterns="^classifier_norm.", target_patterns="classifier.layernorm."),
        WeightRenaming(source_patterns="^classifier.weight", target_patterns="classifier.dense.weight"),
        WeightRenaming(source_patterns="^classifier.bias", target_patterns="classifier.dense.bias"),
    ]


# overwrite: a checkpoint's remote code may import this file again under another module name
register_checkpoint_conversion_mapping("AaspForAudioClassification", _head_renamings(), overwrite=True)
# transformers 5.0 to 5.8 look a model's conversions up by its config's model_type only (5.9 added the class name), so
# there the renamings are registered for "aasp" too; they match only the head's keys, which AaspModel and
# AaspForPreTraining (the same model_type) do not have. Without this, 5.0 saved the head as `classifier.dense.*`.
if tuple(int(part) for part in transformers_version.split(".")[:2]) < (5, 9):
    register_checkpoint_conversion_mapping(AaspConfig.model_type, _head_renamings(), overwrite=True)


__all__ = [
    "AaspModel",
    "AaspForAudioClassification",
    "AaspPreTrainedModel",
    "AaspModelOutput",
    "AaspClassificationHead",
]
