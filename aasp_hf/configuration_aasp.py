# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""AaSP model configuration.

Defaults are the paper's (ViT-B encoder, AaPE stem; Sec. "Aliasing-aware Patch Embedding" and "Training Setup"):
ViT-B (768, 12 layers, 12 heads, 3072), 128 mel bins, 608 frames, 16×16 patches, SBLU K=63, H=128,
C=1024, ε=0.01, Δ=0.01, Lambda encoder r=6, L=3.
"""

import difflib
import inspect

from transformers import PreTrainedConfig

# P_time, the time patch size of the paper's models: `AaspConfig.time_patch_size` defaults to it, and so does the
# frame multiple of `AaspFeatureExtractor` (its frame counts are rounded up to whole time patches).
TIME_PATCH_SIZE = 16
# The fields that take one of a few named values, and those values (validated in one loop in __init__). The one
# definition of each set: sblu.py and objectives.py check their arguments against it too.
CHOICES = {
    "hidden_act": ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu"),
    "patch_embedding": ("aape", "spe"),
    "classifier_pooling": ("cls", "mean"),
    "sblu_phase": ("symmetric", "analytic"),
    "predictor_type": ("cross_attention", "cnn"),
    "target_norm_axis": ("tokens", "channels"),
    "target_layer": ("block", "ffn"),
    "loss_scaling": ("mean", "eat"),
    "student_stem_input": ("masked", "full"),
    "initialization": ("trunc_normal", "eat"),
}


def init_arguments(cls) -> set:
    """The names of `cls.__init__`'s own arguments: the keywords a user may pass it (not `self`, not `**kwargs`)."""
    return set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}


def unknown_keys_message(unknown, valid, what: str, where: str) -> str:
    """The one message for keys of `what` that are not among `valid`: each unknown key with its closest valid one (a
    misspelling), and where the valid keys are listed. Shared by the feature extractor and the scripts' checks."""
    valid = sorted(valid)
    parts = []
    for key in sorted(unknown):
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
        parts.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (f"unknown key{'s' if len(parts) > 1 else ''} in {what}: {', '.join(parts)}. The valid keys are listed in "
            f"{where}.")


# True when transformers imported this file as a checkpoint's remote code (its module then lives under
# `transformers_modules`), False for the installed package.
_LOADED_AS_REMOTE_CODE = __name__.split(".")[0] != "aasp_hf"


class AaspConfig(PreTrainedConfig):
    r"""Configuration of an AaSP audio spectrogram transformer (`AaspModel` and its heads).

    Encoder (ViT-B by default):
        hidden_size (`int`, 768): D, width of the encoder.
        num_hidden_layers (`int`, 12), num_attention_heads (`int`, 12), intermediate_size (`int`, 3072).
        hidden_act (`str`, "gelu"), hidden_dropout_prob (`float`, 0.0), attention_probs_dropout_prob (`float`, 0.0).
        drop_path_rate (`float`, 0.0): stochastic depth, increasing linearly over the layers up to this value.
        layer_norm_eps (`float`, 1e-6), initializer_range (`float`, 0.02), qkv_bias (`bool`, True).
        initialization (`str`, "trunc_normal"): how a new model's weights are drawn (loaded weights are untouched).
            "trunc_normal": every Linear and Conv weight and the CLS token from N(0, `initializer_range`²)
            truncated at ±2 (absolute), biases zero. "eat": EAT's initialisation, as its code does it: Linear weights
            N(0, `initializer_range`²) (fairseq's `init_bert_params`), the conv patch stem Xavier-uniform on its
            kernel flattened to (D, P_time·P_freq) with PyTorch's default bias (EAT models/images.py
            `ImageEncoder`), the CLS token N(0, 1) (models/base.py, `init_extra_token_zero: false`), and the CNN
            predictor at PyTorch's default (EAT resets its decoder with `reset_parameters`); AaPE's own
            convolutions, which EAT lacks, keep the trunc_normal draw. The default stays "trunc_normal": the paper
            does not state an initialisation, and every measurement in this repository was made with it; choose
            "eat" to reproduce EAT's set-up. The CLS token passes through the embedding LayerNorm before the first
            block, so its scale (N(0, 1) against std 0.02) changes its effective step size under AdamW, not the
            initial forward.
        layer_norm_first (`bool`, False): False = EAT's post-norm blocks without a final norm;
            True = pre-norm ViT blocks with a final LayerNorm.

    Input grid:
        num_mel_bins (`int`, 128): F. num_frames (`int`, 608): T at pre-training (6 s), the length of the
        position table. frequency_patch_size / time_patch_size (`int`, 16): P_freq, P_time (non-overlapping).

    Patch embedding (paper Sec. AaPE):
        patch_embedding (`str`, "aape"): "aape" (aliasing-aware) or "spe" (standard 16×16 conv).
        sblu_kernel_size (`int`, 63): K, odd. sblu_hidden_size (`int`, 128): H. sblu_output_size (`int`, 1024): C.
        sblu_epsilon (`float`, 0.01): ε, edge attenuation that sets α_min. sblu_step (`float`, 0.01): Δ in seconds.
        sblu_adaptive (`bool`, True): Lambda-encoder-driven (α, β) per frame; False = learnable static (α, β)
            per hidden channel. sblu_phase (`str`, "symmetric"): kernel phase, "symmetric" (Eq. 3 as written)
            or "analytic" (one-sided phase). sblu_highpass_num_taps (`int`, 63): taps of the zero-phase FIR.
        lambda_encoder_reduction (`int`, 6): r, width D/r. lambda_encoder_num_layers (`int`, 3): L.
        lambda_encoder_num_attention_heads (`int`, 2). lambda_encoder_mlp_ratio (`float`, 4.0).

    Classification head:
        classifier_pooling (`str`, "cls"): "cls" or "mean" (mean of the valid patch tokens).

    Pre-training (`AaspForPreTraining`, paper Sec. Predictor and Pre-training Objectives, and Training Setup):
        predictor_type (`str`, "cross_attention"): the paper's CrossMAE predictor, or "cnn" (EAT's, for the ablation).
        predictor_hidden_size (`int`, 512), predictor_num_layers (`int`, 3), predictor_num_attention_heads (`int`, 16),
        predictor_mlp_ratio (`float`, 4.0): the CrossMAE cross-attention predictor.
        predictor_cnn_hidden_size (`int`, 768), predictor_cnn_num_layers (`int`, 6), predictor_cnn_kernel_size
        (`int`, 3), predictor_cnn_groups (`int`, 16): EAT's CNN predictor (EAT config/pretraining_AS2M.yaml,
        `decoder`). Each block adds its input when the widths match, the first block included (data2vec 2.0's
        `Decoder2d`), so at the default width 768 = D the first block is residual too.
        predictor_cnn_mask_noise_std (`float`, 0.01): σ of the N(0, σ²) noise that fills the hidden positions of
            the CNN predictor's input grid (EAT's `mask_noise_std`, models/base.py `decoder_input`); 0 fills them
            with zeros. Drawn with torch's global RNG in each forward (seeded and checkpointed by
            `examples/pretrain.py`, as dropout is). Unused by the cross-attention predictor.
        mask_ratio (`float`, 0.8), mask_num_views (`int`, 4): M, mask_query_ratio (`float`, 0.75),
        mask_block_sizes (`list`, [[3, 8], [4, 6], [5, 5]]): inverse block masking, (frequency × time) patches.
        target_norm_axis (`str`, "tokens"): instance norm of each teacher layer across tokens per channel (EAT)
            or "channels" (per token across the embedding, the paper's wording).
        target_layer (`str`, "ffn"): which output of each teacher block enters the targets.
            "block": the block's final output (`hidden_states[1:]`). The small presets
            (`examples/configs/pretrain_tiny_cpu.json`, `pretrain_tiny_quality.json`, `pretrain_small_quality.json`)
            keep it because their published figures (the CPU quality benchmark, `make demo`) were measured with it.
            The one measurement of the choice is within seed noise: the small preset at 1,000 steps probes 63.3 ± 0.7
            with "ffn" against 64.9 ± 0.9 with "block" (two seeds each, research/2026-11-cpu-learning-study/
            findings.md); "ffn" alone was not measured on the tiny presets.
            "ffn" (the default: the paper's Sec. "Predictor and Pre-training Objectives" trains "following EAT"):
            EAT / data2vec 2.0
            (`end_of_block_targets: false` in EAT's config/pretraining_AS2M.yaml): the block's FFN (MLP) output
            before the residual add and, in the post-norm block, before the second LayerNorm. EAT's block
            (AltBlock in EAT models/modules.py, the same in fairseq
            examples/data2vec/models/modalities/modules.py) returns `(x, t)` with, post-norm,
            `r = x = norm1(x + attn(x)); x = mlp(x); t = x; x = norm2(r + drop_path(post_mlp_dropout(x)))`, and
            `ffn_targets = not end_of_block_targets`; EAT_pretraining.py averages `lr[:, extra_tokens:]` (the `t`
            of every teacher block, CLS dropped). Pre-norm blocks (`layer_norm_first=True`) take `mlp(norm2(x))`,
            also before the residual add. The teacher runs in eval mode, so drop path and dropout are off.
        loss_scaling (`str`, "mean"): the reductions of L_m and L_u (L_c is a mean over anchors in both).
            "mean": L_m is the mean of the squared error over query tokens and D, L_u over views and D.
            "eat": EAT's effective loss. EAT's `d2v_loss` is the element-wise squared error times 1/√D
            (reduction "none"); the CLS term is multiplied by `sample_size` = the number of predicted (masked)
            tokens of the batch; fairseq's `model` criterion sums every element and the trainer divides the
            gradient by `sample_size`. So L_m = Σ_tokens Σ_d e²/√D / (number of query tokens) = √D × the "mean"
            L_m, and L_u = Σ_views Σ_d e²/√D = B·M·√D × the "mean" L_u, with B·M the views of this process's
            batch (EAT: 12 clips × 16 clones per GPU, so its clip term weighs 192× its per-token term per
            element). The clip factor grows with the batch. η_u and η_c apply on top as usual.
        student_stem_input (`str`, "masked"): what the student's AaPE branch (high-pass, B̄, SBLU) sees in
            masked pre-training. The Lambda encoder attends among the visible tokens in both modes and the SBLU
            GroupNorm statistics cover each view's visible tokens in both modes.
            "masked": each view's hidden patches are zeroed before the high-pass and after B̄, so nothing of the
            hidden patches reaches a visible token (the high-pass sees step edges at the patch borders).
            "full": EAT's order: the stem runs on the unmasked clip (the high-pass once per clip, shared by the M
            views; the SBLU windows see the real neighbouring frames) and only the visible tokens are kept. This
            leaks hidden context into visible tokens: through the SBLU's ±(K−1)/2 taps (±31 frames, about ±2
            patches) and the zero-phase high-pass's ±(K'−1) frames (K' = `sblu_highpass_num_taps`, ±62 frames,
            most of its weight near the centre), so a visible frame depends on frames up to
            ±((K−1)/2 + K'−1) away (±93 frames, about ±6 patches at the defaults).
        clip_loss_weight (`float`, 1.0): η_u. contrastive_loss_weight (`float`, 0.1): η_c.
        contrastive_temperature (`float`, 0.2): τ.
    """

    model_type = "aasp"

    def __init__(
        self,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        drop_path_rate=0.0,
        layer_norm_eps=1e-6,
        initializer_range=0.02,
        qkv_bias=True,
        layer_norm_first=False,
        initialization="trunc_normal",
        num_mel_bins=128,
        num_frames=608,
        frequency_patch_size=16,
        time_patch_size=TIME_PATCH_SIZE,
        patch_embedding="aape",
        sblu_kernel_size=63,
        sblu_hidden_size=128,
        sblu_output_size=1024,
        sblu_epsilon=0.01,
        sblu_step=0.01,
        sblu_adaptive=True,
        sblu_phase="symmetric",
        sblu_highpass_num_taps=63,
        lambda_encoder_reduction=6,
        lambda_encoder_num_layers=3,
        lambda_encoder_num_attention_heads=2,
        lambda_encoder_mlp_ratio=4.0,
        classifier_pooling="cls",
        predictor_type="cross_attention",
        predictor_hidden_size=512,
        predictor_num_layers=3,
        predictor_num_attention_heads=16,
        predictor_mlp_ratio=4.0,
        predictor_cnn_hidden_size=768,
        predictor_cnn_num_layers=6,
        predictor_cnn_kernel_size=3,
        predictor_cnn_groups=16,
        predictor_cnn_mask_noise_std=0.01,
        mask_ratio=0.8,
        mask_num_views=4,
        mask_query_ratio=0.75,
        mask_block_sizes=((3, 8), (4, 6), (5, 5)),
        target_norm_axis="tokens",
        target_layer="ffn",
        loss_scaling="mean",
        student_stem_input="masked",
        clip_loss_weight=1.0,
        contrastive_loss_weight=0.1,
        contrastive_temperature=0.2,
        **kwargs,
    ):
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.drop_path_rate = drop_path_rate
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.qkv_bias = qkv_bias
        self.layer_norm_first = layer_norm_first
        self.initialization = initialization
        self.num_mel_bins = num_mel_bins
        self.num_frames = num_frames
        self.frequency_patch_size = frequency_patch_size
        self.time_patch_size = time_patch_size
        self.patch_embedding = patch_embedding
        self.sblu_kernel_size = sblu_kernel_size
        self.sblu_hidden_size = sblu_hidden_size
        self.sblu_output_size = sblu_output_size
        self.sblu_epsilon = sblu_epsilon
        self.sblu_step = sblu_step
        self.sblu_adaptive = sblu_adaptive
        self.sblu_phase = sblu_phase
        self.sblu_highpass_num_taps = sblu_highpass_num_taps
        self.lambda_encoder_reduction = lambda_encoder_reduction
        self.lambda_encoder_num_layers = lambda_encoder_num_layers
        self.lambda_encoder_num_attention_heads = lambda_encoder_num_attention_heads
        self.lambda_encoder_mlp_ratio = lambda_encoder_mlp_ratio
        self.classifier_pooling = classifier_pooling
        self.predictor_type = predictor_type
        self.predictor_hidden_size = predictor_hidden_size
        self.predictor_num_layers = predictor_num_layers
        self.predictor_num_attention_heads = predictor_num_attention_heads
        self.predictor_mlp_ratio = predictor_mlp_ratio
        self.predictor_cnn_hidden_size = predictor_cnn_hidden_size
        self.predictor_cnn_num_layers = predictor_cnn_num_layers
        self.predictor_cnn_kernel_size = predictor_cnn_kernel_size
        self.predictor_cnn_groups = predictor_cnn_groups
        self.predictor_cnn_mask_noise_std = predictor_cnn_mask_noise_std
        self.mask_ratio = mask_ratio
        self.mask_num_views = mask_num_views
        self.mask_query_ratio = mask_query_ratio
        self.mask_block_sizes = [list(size) for size in mask_block_sizes]
        self.target_norm_axis = target_norm_axis
        self.target_layer = target_layer
        self.loss_scaling = loss_scaling
        self.student_stem_input = student_stem_input
        self.clip_loss_weight = clip_loss_weight
        self.contrastive_loss_weight = contrastive_loss_weight
        self.contrastive_temperature = contrastive_temperature
        if not _LOADED_AS_REMOTE_CODE:
            # A checkpoint names its own pipeline class (pipeline_aasp.py) in `custom_pipelines`, and transformers
            # builds a pipeline from such an entry only with trust_remote_code=True. Where this package is installed
            # and the config is read by its registered class (no remote code), the entry is left out, so that
            # pipeline("audio-classification", model=folder) works without the flag, as for any installed model
            # (with transformers' pipeline class; `pipeline_class=AaspAudioClassificationPipeline` gives ours).
            # Loaded as the checkpoint's own code (trust_remote_code=True), the entry stays and builds ours.
            kwargs.pop("custom_pipelines", None)
        super().__init__(**kwargs)
        self._validate()

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

    # ------------------------------------------------------------------ validation
    def _validate(self):
        def fail(field, message):
            raise ValueError(f"AaspConfig.{field}={getattr(self, field)!r}: {message}")

        for field in (
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
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                fail(field, "must be a positive integer")
        for field in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                fail(field, "must be a probability in [0, 1)")
        for field in (
            "layer_norm_eps",
            "initializer_range",
            "sblu_step",
            "lambda_encoder_mlp_ratio",
            "predictor_mlp_ratio",
            "contrastive_temperature",
        ):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or not value > 0:
                fail(field, "must be a positive number")
        for field in ("qkv_bias", "layer_norm_first", "sblu_adaptive"):
            if not isinstance(getattr(self, field), bool):
                fail(field, "must be True or False")

        for field, allowed in CHOICES.items():
            if getattr(self, field) not in allowed:
                fail(field, f"must be one of {allowed}")
        if self.hidden_size % 4:
            fail("hidden_size", "must be a multiple of 4 (2-D sin-cos positions use D/4 frequencies per axis)")
        if self.hidden_size % self.num_attention_heads:
            fail("num_attention_heads", f"must divide hidden_size={self.hidden_size}")
        if self.num_mel_bins % self.frequency_patch_size:
            fail("frequency_patch_size", f"must divide num_mel_bins={self.num_mel_bins}")
        if self.num_frames % self.time_patch_size:
            fail("num_frames", f"must be a multiple of time_patch_size={self.time_patch_size}")

        k = self.sblu_kernel_size
        if isinstance(k, bool) or not isinstance(k, int) or k < 3 or k % 2 == 0:
            fail("sblu_kernel_size", "must be an odd integer >= 3 (the kernel is centred)")
        if self.sblu_highpass_num_taps % 2 == 0:
            fail("sblu_highpass_num_taps", "must be odd (a type-I linear-phase high-pass FIR)")
        if not isinstance(self.sblu_epsilon, (int, float)) or not 0.0 < self.sblu_epsilon < 1.0:
            fail("sblu_epsilon", "must be in (0, 1): the window's edge attenuation")
        f_groups = self.num_frequency_patches
        if self.sblu_hidden_size % f_groups:
            fail("sblu_hidden_size", f"must be a multiple of the number of frequency patches ({f_groups})")
        if self.sblu_output_size % f_groups:
            fail("sblu_output_size", f"must be a multiple of the number of frequency patches ({f_groups})")
        if self.predictor_type == "cnn" and self.predictor_cnn_kernel_size % 2 == 0:
            fail("predictor_cnn_kernel_size", "must be odd (same-size padding)")
        if self.predictor_type == "cnn" and (
            self.predictor_cnn_hidden_size % self.predictor_cnn_groups or self.hidden_size % self.predictor_cnn_groups
        ):
            fail("predictor_cnn_groups", "must divide predictor_cnn_hidden_size and hidden_size")
        if self.predictor_hidden_size % self.predictor_num_attention_heads:
            fail("predictor_num_attention_heads", f"must divide predictor_hidden_size={self.predictor_hidden_size}")
        for field in ("mask_ratio", "mask_query_ratio"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
                fail(field, "must be in (0, 1)")
        if self.mask_num_views < 2 and self.contrastive_loss_weight > 0:
            fail("mask_num_views", "must be >= 2 for the multi-view contrastive loss (or set contrastive_loss_weight=0)")
        if not self.mask_block_sizes or any(
            len(size) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in size)
            for size in self.mask_block_sizes
        ):
            fail("mask_block_sizes", "must be a non-empty list of (frequency, time) pairs of positive integers")
        for field in ("clip_loss_weight", "contrastive_loss_weight", "predictor_cnn_mask_noise_std"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                fail(field, "must be a non-negative number")
        if self.hidden_size % self.lambda_encoder_reduction:
            fail("lambda_encoder_reduction", f"must divide hidden_size={self.hidden_size}")
        if self.lambda_encoder_hidden_size % self.lambda_encoder_num_attention_heads:
            fail(
                "lambda_encoder_num_attention_heads",
                f"must divide the Lambda encoder width hidden_size/reduction={self.lambda_encoder_hidden_size}",
            )


__all__ = ["AaspConfig"]
