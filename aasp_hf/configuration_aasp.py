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
"""AaSP model configuration.

Defaults are the paper's (ViT-B encoder, AaPE stem; Sec. "Aliasing-aware Patch Embedding" and "Training Setup"):
ViT-B (768, 12 layers, 12 heads, 3072), 128 mel bins, 608 frames, 16×16 patches, SBLU K=63, H=128,
C=1024, ε=0.01, Δ=0.01, Lambda encoder r=6, L=3.
"""

import dataclasses
import difflib
import inspect
from typing import Literal

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig
from transformers.utils import __version__ as transformers_version
from transformers.utils import auto_docstring


# The config is a strict dataclass of typed fields, as transformers' own configs are from 5.4.0 (`PreTrainedConfig`
# makes each subclass a dataclass). Earlier releases' `PreTrainedConfig` is a plain class, which `@strict` refuses
# with a message about dataclasses: say what to do instead, also to a checkpoint's remote code.
if not dataclasses.is_dataclass(PreTrainedConfig):
    raise ImportError(
        f"AaSP needs transformers >= 5.4 (its configs are dataclasses from 5.4.0); this is transformers "
        f"{transformers_version}. Upgrade it: pip install -U 'transformers>=5.4,<6'"
    )

# P_time, the time patch size of the paper's models: `AaspConfig.time_patch_size` defaults to it, and so does the
# frame multiple of `AaspFeatureExtractor` (its frame counts are rounded up to whole time patches).
TIME_PATCH_SIZE = 16
# The values of the fields that take one of a few names: `@strict` refuses any other, naming the field, the value and
# these. The one definition of each set: modeling_aasp.py's SBLU operator and objectives check their arguments against
# them too (`typing.get_args`).
SbluPhase = Literal["symmetric", "analytic"]
TargetNormAxis = Literal["tokens", "channels"]
LossScaling = Literal["mean", "eat"]


def init_arguments(cls) -> set:
    """The keywords a user may pass `cls` of its own: for a config (a dataclass), the fields it adds to
    `PreTrainedConfig`'s; otherwise `cls.__init__`'s arguments but `self` and `**kwargs`."""
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)} - {f.name for f in dataclasses.fields(PreTrainedConfig)}
    return set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}


def unknown_keys_message(unknown, valid, what: str, where: str) -> str:
    """The one message for keys of `what` that are not among `valid`: each unknown key with its closest valid one (a
    misspelling), and where the valid keys are listed. Shared by the feature extractor and the scripts' checks."""
    valid = sorted(valid)
    parts = []
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"unknown key{'s' if len(parts) > 1 else ''} in {what}: {', '.join(parts)}. The valid keys are listed in "
        f"{where}."
    )


# True when transformers imported this file as a checkpoint's remote code (its module then lives under
# `transformers_modules`), False for the installed package.
_LOADED_AS_REMOTE_CODE = __name__.split(".")[0] != "aasp_hf"


@auto_docstring(
    custom_intro="""
    Configuration of an AaSP audio spectrogram transformer: `AaspModel`, `AaspForAudioClassification`,
    `AaspForAudioFrameClassification` and `AaspForPreTraining`. The defaults are the paper's model, a ViT-B encoder with
    the AaPE stem (Sec. 4.2). Why each choice the paper leaves open is made as it is: docs/model.md, docs/pretraining.md
    and docs/paper_to_code.md.
    """
)
@strict
class AaspConfig(PreTrainedConfig):
    r"""
    hidden_size (`int`, *optional*, defaults to 768):
        D, the width of the encoder (ViT-B, Sec. 4.2); a multiple of 4 (2-D sin-cos positions).
    num_hidden_layers (`int`, *optional*, defaults to 12):
        Number of encoder blocks.
    num_attention_heads (`int`, *optional*, defaults to 12):
        Attention heads per encoder block; divides `hidden_size`.
    intermediate_size (`int`, *optional*, defaults to 3072):
        Width of each encoder block's MLP.
    hidden_act (`str`, *optional*, defaults to `"gelu"`):
        Activation of the MLPs: `"gelu"`, `"gelu_new"`, `"gelu_pytorch_tanh"`, `"relu"` or `"silu"`.
    hidden_dropout_prob (`float`, *optional*, defaults to 0.0):
        Dropout on the embeddings, the attention outputs and the MLPs.
    attention_probs_dropout_prob (`float`, *optional*, defaults to 0.0):
        Dropout on the attention weights.
    drop_path_rate (`float`, *optional*, defaults to 0.0):
        Stochastic depth: the drop probability grows linearly over the blocks up to this value.
    layer_norm_eps (`float`, *optional*, defaults to 1e-06):
        Epsilon of the LayerNorms.
    initializer_range (`float`, *optional*, defaults to 0.02):
        Standard deviation of the initial weights.
    qkv_bias (`bool`, *optional*, defaults to `True`):
        Whether the query, key and value projections have a bias.
    layer_norm_first (`bool`, *optional*, defaults to `False`):
        `False`: EAT's post-norm blocks without a final LayerNorm; `True`: pre-norm ViT blocks with a final one.
    initialization (`str`, *optional*, defaults to `"trunc_normal"`):
        How a new model's weights are drawn (loaded weights are untouched): `"trunc_normal"` or `"eat"`, EAT's
        initialisation. The two schemes: docs/model.md, "Initialisation".
    num_mel_bins (`int`, *optional*, defaults to 128):
        F, the mel bins of the input (Sec. 4.2).
    num_frames (`int`, *optional*, defaults to 608):
        T at pre-training (6 s, Sec. 4.2): the length of the position table; a longer input gets its positions
        interpolated along time.
    frequency_patch_size (`int`, *optional*, defaults to 16):
        P_freq, the patch height in mel bins (Sec. 3.3); divides `num_mel_bins`.
    time_patch_size (`int`, *optional*, defaults to 16):
        P_time, the patch width in frames; patches do not overlap, so the stride S_time = P_time (Sec. 3.3).
    patch_embedding (`str`, *optional*, defaults to `"aape"`):
        `"aape"`: the aliasing-aware patch embedding (Sec. 3.3); `"spe"`: the standard strided-conv patch
        embedding alone.
    sblu_kernel_size (`int`, *optional*, defaults to 63):
        K, the odd number of SBLU taps (Sec. 3.2, Eq. 2).
    sblu_hidden_size (`int`, *optional*, defaults to 128):
        H, the SBLU hidden channels (the rows of B̄); a multiple of the number of frequency patches.
    sblu_output_size (`int`, *optional*, defaults to 1024):
        C, the SBLU output channels (the rows of C̄); a multiple of the number of frequency patches.
    sblu_epsilon (`float`, *optional*, defaults to 0.01):
        ε, the window's edge attenuation, which sets the decay's lower bound α_min = −2 log ε / (Δ(K − 1))
        (Sec. 3.2).
    sblu_step (`float`, *optional*, defaults to 0.01):
        Δ, the spectrogram hop in seconds (Sec. 3.2).
    sblu_adaptive (`bool`, *optional*, defaults to `True`):
        `True`: the Lambda encoder predicts (α, β) per frequency group and time patch (Sec. 3.3); `False`: learnable
        static (α, β) per hidden channel (the non-adaptive ablation, Sec. 4.4).
    sblu_phase (`str`, *optional*, defaults to `"symmetric"`):
        The kernel's phase: `"symmetric"` (Eq. 3 as written) or `"analytic"` (one-sided phase).
    sblu_highpass_num_taps (`int`, *optional*, defaults to 63):
        Odd number of taps of the zero-phase high-pass FIR before B̄ (Sec. 3.3 (a)).
    lambda_encoder_reduction (`int`, *optional*, defaults to 6):
        r: the Lambda encoder's width is D / r (Sec. 3.3).
    lambda_encoder_num_layers (`int`, *optional*, defaults to 3):
        L, the Lambda encoder's blocks (Sec. 3.3).
    lambda_encoder_num_attention_heads (`int`, *optional*, defaults to 2):
        Attention heads of the Lambda encoder's blocks; divides D / r.
    lambda_encoder_mlp_ratio (`float`, *optional*, defaults to 4.0):
        MLP width of the Lambda encoder's blocks, as a multiple of D / r.
    classifier_pooling (`str`, *optional*, defaults to `"cls"`):
        What `AaspForAudioClassification` classifies: `"cls"`, the class token (Sec. 4.2, fine-tuning), or
        `"mean"`, the mean of the valid patch tokens.
    predictor_type (`str`, *optional*, defaults to `"cross_attention"`):
        `"cross_attention"`: the paper's CrossMAE predictor (Sec. 3.4); `"cnn"`: EAT's CNN predictor.
    predictor_hidden_size (`int`, *optional*, defaults to 512):
        Width of the cross-attention predictor (Sec. 4.2).
    predictor_num_layers (`int`, *optional*, defaults to 3):
        Cross-attention blocks of the predictor (Sec. 3.4).
    predictor_num_attention_heads (`int`, *optional*, defaults to 16):
        Attention heads of the cross-attention predictor (Sec. 4.2).
    predictor_mlp_ratio (`float`, *optional*, defaults to 4.0):
        MLP width of the cross-attention predictor's blocks, as a multiple of its width.
    predictor_cnn_hidden_size (`int`, *optional*, defaults to 768):
        Channels of the CNN predictor (EAT's `decoder`; docs/model.md, "EAT's CNN predictor").
    predictor_cnn_num_layers (`int`, *optional*, defaults to 6):
        Blocks of the CNN predictor.
    predictor_cnn_kernel_size (`int`, *optional*, defaults to 3):
        Odd kernel size of the CNN predictor's convolutions.
    predictor_cnn_groups (`int`, *optional*, defaults to 16):
        Groups of the CNN predictor's convolutions; divides `predictor_cnn_hidden_size` and `hidden_size`.
    predictor_cnn_mask_noise_std (`float`, *optional*, defaults to 0.01):
        σ of the N(0, σ²) noise that fills the hidden positions of the CNN predictor's input grid (0: zeros),
        drawn from torch's global RNG in each forward. Unused by the cross-attention predictor.
    mask_ratio (`float`, *optional*, defaults to 0.8):
        Fraction of the patch tokens hidden from the student in each view (Sec. 4.2).
    mask_num_views (`int`, *optional*, defaults to 4):
        M, the masked views of each clip (Sec. 3.4); at least 2 when `contrastive_loss_weight` > 0.
    mask_query_ratio (`float`, *optional*, defaults to 0.75):
        Fraction of the hidden tokens the predictor queries (Sec. 4.2).
    mask_block_sizes (`tuple[tuple[int, int], ...]`, *optional*, defaults to `((3, 8), (4, 6), (5, 5))`):
        The (frequency × time) patch blocks of inverse block masking; each view draws one (Sec. 4.2). Any
        sequence of pairs; stored as a list of lists, `[[3, 8], [4, 6], [5, 5]]` by default.
    target_norm_axis (`str`, *optional*, defaults to `"tokens"`):
        The instance norm of each teacher layer before the layers are averaged: `"tokens"`, per channel across
        the tokens (EAT's code), or `"channels"`, per token across the embedding (the paper's wording, Sec. 3.4).
    target_layer (`str`, *optional*, defaults to `"ffn"`):
        Which output of each teacher block enters the targets: `"ffn"`, the block's MLP output before the
        residual add (and, post-norm, before the second LayerNorm), as EAT and data2vec 2.0; `"block"`, the
        block's output (`hidden_states[1:]`). docs/model.md, "Teacher targets".
    loss_scaling (`str`, *optional*, defaults to `"mean"`):
        The reductions of L_m and L_u (Sec. 3.4): `"mean"`, L_m the mean squared error over query tokens and D,
        L_u over views and D; `"eat"`, EAT's effective weights, L_m × √D and L_u × B·M·√D with B·M the views of
        this process's batch (docs/model.md, "EAT's loss scaling"). L_c is a mean over anchors in both.
    student_stem_input (`str`, *optional*, defaults to `"masked"`):
        What the student's AaPE high-pass, B̄ and SBLU see in masked pre-training: `"masked"`, the clip with each
        view's hidden patches zeroed (before the high-pass and after B̄), so nothing of them reaches a visible
        token; `"full"`, the whole clip, keeping only the visible tokens after the stem (EAT's order; hidden
        context then leaks into visible tokens: docs/model.md, "The student's stem under masking").
    clip_loss_weight (`float`, *optional*, defaults to 1.0):
        η_u, the weight of the clip-level loss L_u (Sec. 3.4).
    contrastive_loss_weight (`float`, *optional*, defaults to 0.1):
        η_c, the weight of the contrastive loss L_c (Sec. 3.4, 4.2).
    contrastive_temperature (`float`, *optional*, defaults to 0.2):
        τ of the contrastive loss (Sec. 3.4).
    event_thresholds (`list[float]`, *optional*):
        Sound event detection with `AaspForAudioFrameClassification`: per label, the sigmoid score at or above which an
        output frame counts as active; one threshold in [0, 1] per label. `None`: 0.5 for every label. Read by the
        tagger and the pipeline when they turn frame scores into events, so that they apply the trained settings; the
        model's logits and loss do not depend on it.
    event_median_filter (`int`, *optional*, defaults to 1):
        Sound event detection: the width, in output frames (`frame_duration` each), of the median filter over each
        label's thresholded decisions; it removes active or silent runs of at most (width - 1) / 2 frames. Odd; 1: off.
    event_min_duration (`float`, *optional*, defaults to 0.0):
        Sound event detection: events shorter than this many seconds are dropped (after the median filter and
        `event_merge_gap`'s merge). 0: keep all.
    event_merge_gap (`float`, *optional*, defaults to 0.0):
        Sound event detection: two events of one label separated by a gap of at most this many seconds become one.
        0: merge only touching events.
    """

    model_type = "aasp"

    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: Literal["gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu"] = "gelu"
    hidden_dropout_prob: float | int = 0.0
    attention_probs_dropout_prob: float | int = 0.0
    drop_path_rate: float | int = 0.0
    layer_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    qkv_bias: bool = True
    layer_norm_first: bool = False
    initialization: Literal["trunc_normal", "eat"] = "trunc_normal"
    num_mel_bins: int = 128
    num_frames: int = 608
    frequency_patch_size: int = 16
    time_patch_size: int = TIME_PATCH_SIZE
    patch_embedding: Literal["aape", "spe"] = "aape"
    sblu_kernel_size: int = 63
    sblu_hidden_size: int = 128
    sblu_output_size: int = 1024
    sblu_epsilon: float = 0.01
    sblu_step: float = 0.01
    sblu_adaptive: bool = True
    sblu_phase: SbluPhase = "symmetric"
    sblu_highpass_num_taps: int = 63
    lambda_encoder_reduction: int = 6
    lambda_encoder_num_layers: int = 3
    lambda_encoder_num_attention_heads: int = 2
    lambda_encoder_mlp_ratio: float | int = 4.0
    classifier_pooling: Literal["cls", "mean"] = "cls"
    predictor_type: Literal["cross_attention", "cnn"] = "cross_attention"
    predictor_hidden_size: int = 512
    predictor_num_layers: int = 3
    predictor_num_attention_heads: int = 16
    predictor_mlp_ratio: float | int = 4.0
    predictor_cnn_hidden_size: int = 768
    predictor_cnn_num_layers: int = 6
    predictor_cnn_kernel_size: int = 3
    predictor_cnn_groups: int = 16
    predictor_cnn_mask_noise_std: float | int = 0.01
    mask_ratio: float = 0.8
    mask_num_views: int = 4
    mask_query_ratio: float = 0.75
    mask_block_sizes: list[list[int]] | tuple[tuple[int, int], ...] = ((3, 8), (4, 6), (5, 5))
    target_norm_axis: TargetNormAxis = "tokens"
    target_layer: Literal["block", "ffn"] = "ffn"
    loss_scaling: LossScaling = "mean"
    student_stem_input: Literal["masked", "full"] = "masked"
    clip_loss_weight: float | int = 1.0
    contrastive_loss_weight: float | int = 0.1
    contrastive_temperature: float | int = 0.2
    event_thresholds: list[float | int] | tuple[float | int, ...] | None = None
    event_median_filter: int = 1
    event_min_duration: float | int = 0.0
    event_merge_gap: float | int = 0.0

    def __post_init__(self, **kwargs):
        # Any sequence of (frequency, time) pairs is accepted; it is stored, and saved, as a list of lists.
        self.mask_block_sizes = [list(size) for size in self.mask_block_sizes]
        if self.event_thresholds is not None:  # any sequence of numbers; stored, and saved, as a list of floats
            self.event_thresholds = [
                float(t) if isinstance(t, int) and not isinstance(t, bool) else t for t in self.event_thresholds
            ]
        if not _LOADED_AS_REMOTE_CODE:
            # A checkpoint names its own pipeline class (pipeline_aasp.py) in `custom_pipelines`, and transformers
            # builds a pipeline from such an entry only with trust_remote_code=True. Where this package is installed
            # and the config is read by its registered class (no remote code), the entry is left out, so that
            # pipeline("audio-classification", model=folder) works without the flag, as for any installed model
            # (with transformers' pipeline class; `pipeline_class=AaspAudioClassificationPipeline` gives ours).
            # Loaded as the checkpoint's own code (trust_remote_code=True), the entry stays and builds ours.
            kwargs.pop("custom_pipelines", None)
        super().__post_init__(**kwargs)

    def validate_architecture(self):
        """Part of `@strict`'s validation, run after `__init__` and before saving: a ValueError naming the field, its
        value and what it must be (ranges, and the sizes that must divide each other; the field types and the named
        values of the `Literal` fields are `@strict`'s own checks)."""
        super().validate_architecture()
        _validate_config(self)

    # ------------------------------------------------------------------ derived sizes
    @property
    def num_frequency_patches(self) -> int:
        """F̃ = F / P_freq."""
        return self.num_mel_bins // self.frequency_patch_size

    @property
    def num_time_patches(self) -> int:
        """T̃ = T / P_time at the pre-training length."""
        return self.num_frames // self.time_patch_size

    @property
    def num_patches(self) -> int:
        """N = F̃ · T̃ (304 for the defaults)."""
        return self.num_frequency_patches * self.num_time_patches

    @property
    def lambda_encoder_hidden_size(self) -> int:
        """D / r (128 for the defaults)."""
        return self.hidden_size // self.lambda_encoder_reduction

    @property
    def frame_duration(self) -> float:
        """Seconds per output frame of `AaspForAudioFrameClassification`: one time patch column, P_time spectrogram
        frames of Δ seconds each (0.16 s for the defaults: 16 frames at a 10-ms hop, Sec. 1 and 3.2). Also the unit
        of `event_median_filter`."""
        return self.time_patch_size * self.sblu_step


# The fields `_validate_config` checks by kind: each must be a positive integer, a probability in [0, 1), a
# positive number, or a non-negative number.
POSITIVE_INTEGER_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "num_mel_bins",
    "num_frames",
    "frequency_patch_size",
    "time_patch_size",
    "sblu_hidden_size",
    "sblu_output_size",
    "sblu_highpass_num_taps",
    "lambda_encoder_reduction",
    "lambda_encoder_num_layers",
    "lambda_encoder_num_attention_heads",
    "predictor_hidden_size",
    "predictor_num_layers",
    "predictor_num_attention_heads",
    "predictor_cnn_hidden_size",
    "predictor_cnn_num_layers",
    "predictor_cnn_kernel_size",
    "predictor_cnn_groups",
    "mask_num_views",
)
PROBABILITY_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate")
POSITIVE_NUMBER_FIELDS = (
    "layer_norm_eps",
    "initializer_range",
    "sblu_step",
    "lambda_encoder_mlp_ratio",
    "predictor_mlp_ratio",
    "contrastive_temperature",
)
NON_NEGATIVE_FIELDS = (
    "clip_loss_weight",
    "contrastive_loss_weight",
    "predictor_cnn_mask_noise_std",
    "event_min_duration",
    "event_merge_gap",
)


def _validate_config(config) -> None:
    """The checks on an `AaspConfig`'s values, run by its `validate_architecture`: a ValueError naming the field, its
    value and what it must be (ranges, and the sizes that must divide each other)."""

    def fail(field, message):
        raise ValueError(f"AaspConfig.{field}={getattr(config, field)!r}: {message}")

    for field in POSITIVE_INTEGER_FIELDS:
        value = getattr(config, field)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            fail(field, "must be a positive integer")
    for field in PROBABILITY_FIELDS:
        value = getattr(config, field)
        if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            fail(field, "must be a probability in [0, 1)")
    for field in POSITIVE_NUMBER_FIELDS:
        value = getattr(config, field)
        if not isinstance(value, (int, float)) or not value > 0:
            fail(field, "must be a positive number")
    if config.hidden_size % 4:
        fail("hidden_size", "must be a multiple of 4 (2-D sin-cos positions use D/4 frequencies per axis)")
    if config.hidden_size % config.num_attention_heads:
        fail("num_attention_heads", f"must divide hidden_size={config.hidden_size}")
    if config.num_mel_bins % config.frequency_patch_size:
        fail("frequency_patch_size", f"must divide num_mel_bins={config.num_mel_bins}")
    if config.num_frames % config.time_patch_size:
        fail("num_frames", f"must be a multiple of time_patch_size={config.time_patch_size}")

    k = config.sblu_kernel_size
    if isinstance(k, bool) or not isinstance(k, int) or k < 3 or k % 2 == 0:
        fail("sblu_kernel_size", "must be an odd integer >= 3 (the kernel is centred)")
    if config.sblu_highpass_num_taps % 2 == 0:
        fail("sblu_highpass_num_taps", "must be odd (a type-I linear-phase high-pass FIR)")
    if not isinstance(config.sblu_epsilon, (int, float)) or not 0.0 < config.sblu_epsilon < 1.0:
        fail("sblu_epsilon", "must be in (0, 1): the window's edge attenuation")
    f_groups = config.num_frequency_patches
    if config.sblu_hidden_size % f_groups:
        fail("sblu_hidden_size", f"must be a multiple of the number of frequency patches ({f_groups})")
    if config.sblu_output_size % f_groups:
        fail("sblu_output_size", f"must be a multiple of the number of frequency patches ({f_groups})")
    if config.predictor_type == "cnn" and config.predictor_cnn_kernel_size % 2 == 0:
        fail("predictor_cnn_kernel_size", "must be odd (same-size padding)")
    groups = config.predictor_cnn_groups
    if config.predictor_type == "cnn" and (config.predictor_cnn_hidden_size % groups or config.hidden_size % groups):
        fail("predictor_cnn_groups", "must divide predictor_cnn_hidden_size and hidden_size")
    if config.predictor_hidden_size % config.predictor_num_attention_heads:
        fail("predictor_num_attention_heads", f"must divide predictor_hidden_size={config.predictor_hidden_size}")
    for field in ("mask_ratio", "mask_query_ratio"):
        value = getattr(config, field)
        if not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
            fail(field, "must be in (0, 1)")
    if config.mask_num_views < 2 and config.contrastive_loss_weight > 0:
        fail("mask_num_views", "must be >= 2 for the multi-view contrastive loss (or set contrastive_loss_weight=0)")
    if not config.mask_block_sizes or any(
        len(size) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in size)
        for size in config.mask_block_sizes
    ):
        fail("mask_block_sizes", "must be a non-empty list of (frequency, time) pairs of positive integers")
    for field in NON_NEGATIVE_FIELDS:
        value = getattr(config, field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            fail(field, "must be a non-negative number")
    if config.hidden_size % config.lambda_encoder_reduction:
        fail("lambda_encoder_reduction", f"must divide hidden_size={config.hidden_size}")
    width = config.event_median_filter
    if isinstance(width, bool) or not isinstance(width, int) or width < 1 or width % 2 == 0:
        fail("event_median_filter", "must be an odd positive integer (a centred window of output frames; 1: off)")
    thresholds = config.event_thresholds
    if thresholds is not None:
        if len(thresholds) != config.num_labels:
            fail("event_thresholds", f"must have one threshold per label (num_labels={config.num_labels}), or be None")
        if any(isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 1.0 for t in thresholds):
            fail("event_thresholds", "must hold numbers in [0, 1] (thresholds on sigmoid scores)")
    if config.lambda_encoder_hidden_size % config.lambda_encoder_num_attention_heads:
        fail(
            "lambda_encoder_num_attention_heads",
            f"must divide the Lambda encoder width hidden_size/reduction={config.lambda_encoder_hidden_size}",
        )


__all__ = ["AaspConfig"]
