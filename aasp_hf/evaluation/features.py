# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Frozen-encoder features (paper Sec. Training Setup, Linear Evaluation Setup; Sec. Shift-Consistency Analysis).

- `pool_features`/`extract_features`: the linear-evaluation feature [CLS ; time-averaged patch tokens concatenated
  over the F̃ frequency rows] = D + F̃·D values per clip (768 + 8·768 = 6912 for ViT-B), averaging only the real
  (non-padding) tokens given by `token_mask`.
- `standardization_stats`, `standardize`: z-scoring with statistics of the TRAIN features only.
- `cls_embeddings`: the frozen CLS z(x) of a list of waveforms (the shift-consistency measure's representation).
- `load_frozen_encoder`, `without_truncation`: a saved encoder and its feature extractor, set to featurise whole clips.

Dimensions: B batch, N = T̃·F̃ patch tokens (time-major: token t·F̃ + f), D hidden size.
"""

import logging

import numpy as np
import torch
from transformers import AutoFeatureExtractor, AutoModel

from ..feature_extraction_aasp import AaspFeatureExtractor
from ..utils.hub import check_model_path

logger = logging.getLogger(__name__)


def pool_features(last_hidden_state: torch.Tensor, token_mask, num_frequency_patches: int) -> torch.Tensor:
    """(B, 1 + N, D) encoder output -> (B, D + F̃·D): [CLS ; mean over real time patches of each frequency row].

    token_mask: (B, 1 + N), 1 (or True) = real token, CLS first, as `AaspModelOutput.token_mask`; or None (all real).
    """
    batch_size, num_tokens, hidden_size = last_hidden_state.shape
    num_patches = num_tokens - 1
    if num_patches % num_frequency_patches:
        raise ValueError(f"{num_patches} patch tokens are not a whole number of rows of {num_frequency_patches}.")
    cls = last_hidden_state[:, 0]  # (B, D)
    grid = last_hidden_state[:, 1:].reshape(batch_size, -1, num_frequency_patches, hidden_size)  # (B, T̃, F̃, D)
    if token_mask is None:
        pooled = grid.mean(dim=1)  # (B, F̃, D)
    else:
        real = token_mask[:, 1:].reshape(batch_size, -1, num_frequency_patches)  # (B, N) -> (B, T̃, F̃)
        weight = real[..., None].to(grid.dtype)  # (B, T̃, F̃, 1)
        pooled = (grid * weight).sum(1) / weight.sum(1).clamp(min=1.0)  # (B, F̃, D)
    return torch.cat([cls, pooled.reshape(batch_size, -1)], dim=-1)  # (B, D + F̃·D)


@torch.no_grad()
def extract_features(model, batches, device=None, progress=None):
    """Frozen features of every clip: `model` an `AaspModel` (put in eval mode here), `batches` an iterable of
    dicts with `input_values` (B, T, F), optional `attention_mask` (B, T) and optional `labels`.

    Returns (features float32 (N, D + F̃·D), labels (N,) or (N, C) or None). Batches that are None (every clip
    failed to decode, see `AaspFineTuningCollator`) are skipped. `progress`: an optional tqdm to update by B.
    """
    model.eval()
    device = device or next(model.parameters()).device
    num_frequency_patches = model.config.num_frequency_patches
    features, labels = [], []
    for batch in batches:
        if batch is None:
            continue
        mask = batch.get("attention_mask")
        outputs = model(
            input_values=batch["input_values"].to(device),
            attention_mask=None if mask is None else mask.to(device),
        )
        pooled = pool_features(outputs.last_hidden_state, outputs.token_mask, num_frequency_patches)
        features.append(pooled.float().cpu().numpy())
        if batch.get("labels") is not None:
            labels.append(np.asarray(batch["labels"]))
        if progress is not None:
            progress.update(len(pooled))
    if not features:
        raise ValueError("extract_features got no clips (every batch was empty or failed to decode).")
    return np.concatenate(features), (np.concatenate(labels) if labels else None)


def standardization_stats(train_features: np.ndarray, eps: float = 1e-8):
    """Per-dimension mean and std (N, d) -> (d,), (d,) of the TRAIN features; constant dimensions get std 1."""
    mean = train_features.mean(axis=0, dtype=np.float64)
    std = train_features.std(axis=0, dtype=np.float64)
    std = np.where(std < eps, 1.0, std)
    return mean.astype(np.float32), std.astype(np.float32)


def standardize(features: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """(features − train mean) / train std, float32."""
    return ((features - mean) / std).astype(np.float32)


@torch.no_grad()
def cls_embeddings(model, feature_extractor, waveforms, sampling_rate: int = 16000, device=None) -> torch.Tensor:
    """Frozen CLS z(x) of a list of waveforms: (B, D) float32 on the CPU. An array or tensor goes to the feature
    extractor as it is, so a (2, samples) stereo clip is refused there instead of becoming two clips."""
    model.eval()
    device = device or next(model.parameters()).device
    clips = waveforms if isinstance(waveforms, (np.ndarray, torch.Tensor)) else list(waveforms)
    inputs = feature_extractor(clips, sampling_rate=sampling_rate, return_tensors="pt")
    outputs = model(input_values=inputs["input_values"].to(device), attention_mask=inputs["attention_mask"].to(device))
    return outputs.last_hidden_state[:, 0].float().cpu()  # (B, 1 + N, D) -> (B, D)


def load_frozen_encoder(model_name_or_path, device="cpu"):
    """(encoder in eval mode without gradients, feature extractor) from a saved model folder or Hub id.

    Falls back to `AaspFeatureExtractor()` (the paper's front end) with a warning when none was saved with the model.
    """
    check_model_path(model_name_or_path)  # a checkpoint, a run's folder, a misspelt path: say what to load
    model = AutoModel.from_pretrained(model_name_or_path).to(device).eval().requires_grad_(False)
    try:
        feature_extractor = AutoFeatureExtractor.from_pretrained(model_name_or_path)
    except (OSError, ValueError):
        logger.warning(
            f"No feature extractor saved with {model_name_or_path}: using AaspFeatureExtractor() (the paper's m2d "
            "front end, mean -7.1, std 4.1). Save yours with the model to be sure."
        )
        feature_extractor = AaspFeatureExtractor()
    return model, without_truncation(feature_extractor, model_name_or_path)


def without_truncation(feature_extractor, source=None):
    """The extractor with its stored `max_frames` dropped (with a warning), so that whole clips are featurised.

    A fine-tuned classifier saves `max_frames` = its trained crop, the window of the pipeline and the tagger; encoders
    exported by earlier versions of examples/pretrain.py saved the pre-training crop (64 frames for the tiny preset,
    608 for the paper's). Either would cut every input here to that length; the model itself takes any length (its
    position table is interpolated)."""
    if getattr(feature_extractor, "max_frames", None) is not None:
        logger.warning(
            f"The feature extractor saved with {source} keeps max_frames={feature_extractor.max_frames} (the window of "
            f"the pipeline and the tagger); whole clips are featurised here instead."
        )
        feature_extractor.max_frames = None
    return feature_extractor
