# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Frozen-encoder evaluation helpers shared by the examples (paper Sec. Training Setup, Linear Evaluation
Setup; Sec. Shift-Consistency Analysis).

- `pool_features`/`extract_features`: the linear-evaluation feature [CLS ; time-averaged patch tokens concatenated
  over the F̃ frequency rows] = D + F̃·D values per clip (768 + 8·768 = 6912 for ViT-B), averaging only the real
  (non-padding) tokens given by `token_mask`.
- `standardize`: z-scoring with statistics of the TRAIN features only.
- `circular_shift`, `representation_drift`: the shift-consistency measure 1 − cos(z(x), z(x_δ)).
- `classification_score`: accuracy / mAP for model selection in the loop (the same numbers as the shipped
  `evaluate` modules in `aasp_hf.metrics`, which report the final scores).
- `mean_std`, `write_finetune_markdown`, `write_linear_eval_markdown`: the scripts' summaries over seeds and parts
  (mean ± std with ddof=1) and their `results.md` tables.

Imported by name: `linear_protocol` (linear evaluation's arguments, evaluation parts and cached features) and
`linear_heads` (its grid of heads, one per lr, trained in one pass).

Dimensions: B batch, N = T̃·F̃ patch tokens (time-major: token t·F̃ + f), D hidden size.
"""

import logging
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import average_precision_score

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


def classification_score(logits: np.ndarray, labels: np.ndarray, multi_label: bool) -> float:
    """Accuracy (single-label, labels (N,)) or macro mAP over classes with positives (multi-label, (N, C))."""
    if not multi_label:
        return float((logits.argmax(-1) == labels).mean())
    with_positives = np.flatnonzero(labels.sum(0) > 0)
    return float(np.mean([average_precision_score(labels[:, c], logits[:, c]) for c in with_positives]))


# ----------------------------------------------------------------------------------------------- shift consistency
def circular_shift(waveform: np.ndarray, shift_ms: float, sampling_rate: int = 16000) -> np.ndarray:
    """x_δ: the waveform rotated right by δ = shift_ms (np.roll, so nothing is lost or padded)."""
    return np.roll(waveform, int(round(shift_ms * sampling_rate / 1000.0)), axis=-1)


def representation_drift(z: torch.Tensor, z_shifted: torch.Tensor) -> torch.Tensor:
    """1 − cos(z, z_δ) per row: (B, D), (B, D) -> (B,), in [0, 2]. Computed in float64."""
    z, z_shifted = z.double(), z_shifted.double()
    cosine = torch.nn.functional.cosine_similarity(z, z_shifted, dim=-1, eps=1e-12)
    return (1.0 - cosine).clamp(0.0, 2.0)


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


# ----------------------------------------------------------------------------------------------- results over seeds
def mean_std(values, single_std: float = 0.0) -> tuple[float, float]:
    """(mean, sample std with ddof=1) of the per-seed scores; the std of a single value is `single_std` (0, or NaN
    where a table should show it as undefined)."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else single_std


def write_finetune_markdown(path: Path, summary: dict):
    """examples/finetune.py's `results.md`: one row per (part, seed) sub-run, then the test mean ± std (×100)."""
    metric = summary["metric"]
    lines = [f"# Fine-tuning: {summary['task']} ({summary['model_name_or_path']})", "",
             f"{metric} (×100) on test within {summary['max_steps']} steps; mean ± std over seeds "
             f"{summary['seeds']} of the mean over parts {summary['parts']}.", "",
             f"Model selection (`--select_on {summary['select_on']}`): {summary['selection_rule']}.", "",
             "| part | seed | selected step | valid | test |", "|---|---|---|---|---|"]
    for r in summary["runs"]:
        valid = f"{100 * r['best_valid_score']:.2f}" if r.get("select_on", "validation") == "validation" else "–"
        lines.append(f"| {r['part']} | {r['seed']} | {r['best_step']} | {valid} | {100 * r['test_score']:.2f} |")
    lines += ["", f"**{summary['task']} {metric}: {100 * summary['test_mean']:.2f} ± {100 * summary['test_std']:.2f}**",
              ""]
    Path(path).write_text("\n".join(lines))


def write_linear_eval_markdown(path: Path, results: dict):
    """examples/linear_eval.py's `results.md`: one row per (part, seed) with the chosen lr, then mean ± std (×100)."""
    metric = results["metric"]
    lines = [
        f"# Linear evaluation: {results['task']} ({results['model_name_or_path']})",
        "",
        f"{metric} (×100), mean ± std over seeds {results['seeds']}; per seed the mean over parts "
        f"{results['parts']}. Learning rates {results['learning_rates']}, {results['max_steps']} steps.",
        "",
        f"Validation: {results['validation_rule']}.",
        "",
        "| part | seed | chosen lr | best step | valid | test |",
        "|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        lines.append(f"| {run['part']} | {run['seed']} | {run['chosen_learning_rate']:g} | "
                     f"{run['best_steps'][run['chosen_index']]} | {100 * run['valid_score']:.2f} | "
                     f"{100 * run['test_score']:.2f} |")
    lines += ["", f"**{results['task']} {metric}: {100 * results['test_mean']:.2f} ± {100 * results['test_std']:.2f}**",
              ""]
    Path(path).write_text("\n".join(lines))


__all__ = [
    "circular_shift",
    "classification_score",
    "cls_embeddings",
    "extract_features",
    "load_frozen_encoder",
    "mean_std",
    "pool_features",
    "representation_drift",
    "standardization_stats",
    "standardize",
    "without_truncation",
    "write_finetune_markdown",
    "write_linear_eval_markdown",
]


def load_frozen_encoder(model_name_or_path, device="cpu"):
    """(encoder in eval mode without gradients, feature extractor) from a saved model folder or Hub id.

    Falls back to `AaspFeatureExtractor()` (the paper's front end) with a warning when none was saved with the model.
    """
    from transformers import AutoFeatureExtractor, AutoModel

    from ..feature_extraction_aasp import AaspFeatureExtractor
    from ..hub import check_model_folder

    check_model_folder(model_name_or_path)  # a checkpoint-<step>/ folder: say what to load instead
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

    Encoders exported by earlier versions of examples/pretrain.py saved `max_frames` = the pre-training crop (64
    frames for the tiny preset, 608 for the paper's), which silently cut every later input to that length; the
    model itself takes any length (its position table is interpolated)."""
    if getattr(feature_extractor, "max_frames", None) is not None:
        logger.warning(
            f"The feature extractor saved with {source} truncates inputs to max_frames={feature_extractor.max_frames} "
            f"frames; using whole clips instead (save it again to remove the limit)."
        )
        feature_extractor.max_frames = None
    return feature_extractor

