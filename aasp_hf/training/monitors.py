"""Learning-health monitors for self-supervised pre-training: is the run alive or collapsing?

Two kinds of numbers, cheap enough to log every few steps (``examples/pretrain.py --monitor_steps``):

- collapse statistics of a batch of vectors (`collapse_statistics`): the per-dimension std across rows (its mean
  and minimum) and the effective rank (`effective_rank`, Roy & Vetterli 2007) of the row-centred matrix — for the
  student CLS of the current batch (one masked view per clip) and for the teacher targets, per token and
  token-averaged per clip (the clip target ȳ of L_u, measured nearly constant across clips in
  small CPU runs: per-dimension std 0.03–0.09 across 64 clips against ≈ 1 for the token targets);
- the SBLU's (α, β) = (decay, frequency) (`sblu_lambdas`, `lambda_statistics`): mean, std and the fraction of
  values pinned at the bounds α_min, β_min, β_max.

When and on what `examples/pretrain.py` runs them (`Monitors`, `is_due`): at the end of this module.

Whether it is learning features is the frozen-feature probe's to say (`aasp_hf.evaluation.probes`, on the clips
that `aasp_hf.data.audiofolder.list_audiofolder` lists).

All of it runs without gradients, in eval mode and without drawing random numbers, so switching monitors on does
not change what the run trains. Dimensions: n rows, d features, B clips, M views, N tokens, D hidden size.
"""

import itertools
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..data.clips import decode_clip
from ..data.collators import PretrainingCollator
from ..evaluation.probes import FrozenFeatureProbe


# ----------------------------------------------------------------------------------------------- collapse
def effective_rank(x: torch.Tensor, tol: float | None = None) -> float:
    """Effective rank (Roy & Vetterli 2007) of a matrix (n, d): exp(−Σ_k p_k log p_k), p_k = σ_k / Σ_j σ_j.

    Between 1 (rank one) and min(n, d) (all singular values equal). Singular values ≤ `tol` are treated as zero
    (default: max(n, d) · float32 eps · σ_max, numpy's `matrix_rank` rule at float32 precision); a matrix with no
    singular value above it has effective rank 0. Computed in float64. The matrix is used as given: centre it
    first to measure the spread around the mean (`collapse_statistics` does).
    """
    if x.ndim != 2:
        raise ValueError(f"effective_rank takes a matrix (n, d), got shape {tuple(x.shape)}")
    singular_values = torch.linalg.svdvals(x.detach().double())  # (min(n, d),)
    if singular_values.numel() == 0:
        return 0.0
    if tol is None:
        tol = max(x.shape) * torch.finfo(torch.float32).eps * float(singular_values.max())
    singular_values = singular_values[singular_values > tol]
    if singular_values.numel() == 0:
        return 0.0
    p = singular_values / singular_values.sum()
    return float(torch.exp(-(p * p.log()).sum()))


def collapse_statistics(x: torch.Tensor, max_rows: int | None = 4096) -> dict:
    """Collapse statistics of n vectors (n, d), as plain floats:

    - ``std_mean``, ``std_min``: the std across rows of each dimension (sample std, n − 1), averaged over the d
      dimensions and its minimum — near 0 when every row is the same vector;
    - ``effective_rank``: `effective_rank` of the row-centred matrix, at most min(n − 1, d). Singular values below
      max(n, d) · float32 eps · ‖x‖_F (the scale of the uncentred rows) count as zero, so identical rows give 0
      rather than the rank of float round-off.

    `max_rows`: use at most this many rows, evenly spaced (deterministic), to bound the SVD's cost; None: all.
    """
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"collapse_statistics takes at least 2 rows (n, d), got shape {tuple(x.shape)}")
    x = x.detach().double()
    if max_rows is not None and x.shape[0] > max_rows:
        rows = torch.linspace(0, x.shape[0] - 1, max_rows, device=x.device).round().long()
        x = x[rows]
    std = x.std(dim=0)  # (d,)
    tol = max(x.shape) * torch.finfo(torch.float32).eps * float(torch.linalg.vector_norm(x))
    return {
        "std_mean": float(std.mean()),
        "std_min": float(std.min()),
        "effective_rank": effective_rank(x - x.mean(dim=0), tol=tol),
    }


def pretraining_collapse_statistics(student_cls: torch.Tensor, targets: torch.Tensor, max_rows: int | None = 4096):
    """`collapse_statistics` of what AaSP pre-training regresses, keyed ``<what>_<statistic>``:

    - ``student_cls``: student CLS vectors, (B, D) (or (B, M, D), flattened to (B·M, D));
    - ``target_clip``: the clip target ȳ = targets.mean(1) (token mean per clip), (B, D) — its ``std_*`` is the
      std across clips of L_u's regression target;
    - ``target_token``: every token's target, (B·N, D) (at most `max_rows` of them).

    targets: the teacher targets (B, N, D) (`AaspForPreTrainingOutput.targets`). A part with fewer than two rows
    (one clip per process) has no spread to measure and is left out.
    """
    if targets.ndim != 3:
        raise ValueError(f"targets must have shape (B, N, D), got {tuple(targets.shape)}")
    parts = {
        "student_cls": student_cls.reshape(-1, student_cls.shape[-1]),  # (B, M, D) -> (B·M, D)
        "target_clip": targets.mean(dim=1),  # (B, N, D) -> (B, D)
        "target_token": targets.reshape(-1, targets.shape[-1]),  # (B, N, D) -> (B·N, D)
    }
    return {
        f"{name}_{key}": value
        for name, x in parts.items()
        if x.shape[0] >= 2
        for key, value in collapse_statistics(x, max_rows).items()
    }


# ----------------------------------------------------------------------------------------------- SBLU (α, β)
@torch.no_grad()
def sblu_lambdas(encoder, input_values: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None):
    """The (decay α, frequency β) an AaPE encoder's SBLU uses, or None for an SPE encoder.

    Adaptive AaPE: the Lambda encoder's output, (B, N, H/F̃) each, captured by a forward hook during one full-clip
    forward of `encoder` (an `AaspModel`) on `input_values` (B, T, F) in eval mode (its training mode is restored).
    Non-adaptive: the learnable static parameters after their bounding maps, (H,) each; `input_values` is unused.
    """
    embeddings = encoder.embeddings
    if getattr(embeddings, "sblu", None) is None:
        return None
    if embeddings.lambda_encoder is None:
        return embeddings.sblu.static_parameters()
    if input_values is None:
        raise ValueError("an adaptive AaPE encoder needs input_values to produce its (α, β)")
    captured = []
    handle = embeddings.lambda_encoder.register_forward_hook(lambda module, args, output: captured.append(output))
    was_training = encoder.training
    try:
        encoder.eval()
        encoder(input_values, attention_mask=attention_mask)
    finally:
        handle.remove()
        encoder.train(was_training)
    return captured[0]


def lambda_statistics(
    decay: torch.Tensor,
    frequency: torch.Tensor,
    decay_min: float,
    frequency_min: float,
    frequency_max: float,
    rtol: float = 0.01,
) -> dict:
    """Summaries of the SBLU's α (s⁻¹) and β (rad/s), any shapes, as plain floats:

    ``decay_mean``, ``decay_std``, ``frequency_mean``, ``frequency_std`` (population std over all values), and the
    fractions of values within `rtol` (relative) of a bound: ``decay_at_min`` (α ≤ (1 + rtol)·α_min),
    ``frequency_at_min`` (β ≤ (1 + rtol)·β_min) and ``frequency_at_max`` (β ≥ (1 − rtol)·β_max). α has no upper bound
    (softplus + α_min); large fractions at a bound mean the bounding map is saturated there.
    """
    decay, frequency = decay.detach().double().flatten(), frequency.detach().double().flatten()
    return {
        "decay_mean": float(decay.mean()),
        "decay_std": float(decay.std(correction=0)),
        "decay_at_min": float((decay <= decay_min * (1 + rtol)).double().mean()),
        "frequency_mean": float(frequency.mean()),
        "frequency_std": float(frequency.std(correction=0)),
        "frequency_at_min": float((frequency <= frequency_min * (1 + rtol)).double().mean()),
        "frequency_at_max": float((frequency >= frequency_max * (1 - rtol)).double().mean()),
    }


@torch.no_grad()
def pretraining_health(
    model, batch: dict, targets: torch.Tensor, monitor_inputs: torch.Tensor | None = None, autocast=nullcontext
) -> dict:
    """The learning-health statistics of an `AaspForPreTraining` run, as plain floats (prefix them when logging):

    - `pretraining_collapse_statistics` of the student CLS of the first masked view of each clip of `batch` — one
      no-grad eval-mode forward of `model.aasp` on ``input_values`` and ``visible_indices[:, :1]`` (the student as
      it is now, e.g. after the step's update; one view per clip keeps the cost at about 1/M of a student forward
      and measures the spread across clips, not across views) — and of `targets` (B, N, D), the teacher targets of
      the training forward on that batch;
    - for AaPE, ``sblu_<statistic>``: `lambda_statistics` of the student's (α, β) on `monitor_inputs` (B', T, F), a
      fixed batch (adaptive; `sblu_lambdas`), or of its static parameters (non-adaptive), against the SBLU's bounds.

    `autocast`: a context-manager factory for the forwards (e.g. `accelerator.autocast`).
    """
    student = model.aasp
    was_training = student.training
    student.eval()
    try:
        with autocast():
            first_views = batch["visible_indices"][:, :1]  # (B, M, V) -> (B, 1, V)
            hidden = student(batch["input_values"], visible_indices=first_views).last_hidden_state  # (B, 1 + V, D)
    finally:
        student.train(was_training)
    stats = pretraining_collapse_statistics(hidden[:, 0].float(), targets.float())  # CLS: (B, 1 + V, D) -> (B, D)
    if getattr(student.embeddings, "sblu", None) is not None and (
        monitor_inputs is not None or student.embeddings.lambda_encoder is None
    ):
        with autocast():
            decay, frequency = sblu_lambdas(student, monitor_inputs)
        sblu = student.embeddings.sblu
        stats.update(
            {
                f"sblu_{key}": value
                for key, value in lambda_statistics(
                    decay, frequency, sblu.decay_min, sblu.frequency_min, sblu.frequency_max
                ).items()
            }
        )
    return stats


__all__ = [
    "collapse_statistics",
    "effective_rank",
    "lambda_statistics",
    "pretraining_collapse_statistics",
    "pretraining_health",
    "sblu_lambdas",
]


# ---------------------------------------------------------------------------------------------- pre-training's schedule
# When and on what `examples/pretrain.py` runs its learning-health monitors (`aasp_hf.training.monitors`), on the
# main process only: the fixed batch whose SBLU (α, β) are summarised every --monitor_steps (with the collapse
# statistics of the training batch), and the frozen-feature probe every --probe_steps. No gradients, eval mode, no
# draws from any random stream, so they do not change what the run trains.
def is_due(step: int, every: int, stop_step: int) -> bool:
    """Every `every` steps and at the last step; never when `every` is 0."""
    return every > 0 and (step % every == 0 or step == stop_step)


def monitor_batch(dataset, stream, data_args, config, feature_extractor, seed: int, num_clips: int) -> torch.Tensor:
    """The fixed batch (B', T, F) on which the student's (α, β) are summarised: the first `num_clips` decodable clips
    (map-style rows 0, 1, ...; a stream: its first examples in epoch 0's order), cropped and featurised by a
    collator of its own (seeded with `seed`), so the training collator's random stream is untouched."""
    if stream is not None:
        items = itertools.islice(stream.shard, 4 * num_clips)
        examples = [decode_clip(item, stream.audio_column, i) for i, item in enumerate(items)]
    else:
        examples = [dataset[i] for i in range(min(len(dataset), 4 * num_clips))]
    examples = [e for e in examples if isinstance(e, dict)][:num_clips]  # FailedClips left out
    if not examples:
        raise ValueError("--monitor_steps: none of the first clips of the dataset could be decoded")
    collator = PretrainingCollator(
        feature_extractor, config, crop_seconds=data_args.crop_seconds, generator=torch.Generator().manual_seed(seed)
    )
    return collator(examples)["input_values"]


def probe_logs(probe: FrozenFeatureProbe, model, encoders, autocast) -> dict:
    """probe/<encoder>_knn_accuracy, probe/<encoder>_ridge_accuracy for "student" (model.aasp) and/or "teacher",
    probe/chance_accuracy and probe/seconds."""
    started = time.time()
    logs = {"probe/chance_accuracy": probe.chance_accuracy()}
    for name in encoders:
        scores = probe(model.aasp if name == "student" else model.teacher, autocast)
        logs.update({f"probe/{name}_{key}": value for key, value in scores.items()})
    return {**logs, "probe/seconds": time.time() - started}


@dataclass
class Monitors:
    """3. The learning-health monitors (aasp_hf.training.monitors), on the main process only: the fixed batch whose
    (α, β) are summarised every `monitor_steps` and the frozen-feature probe every `probe_steps` (None elsewhere,
    and when off)."""

    monitor_steps: int
    probe_steps: int
    probe_encoders: list
    inputs: torch.Tensor | None = None
    probe: FrozenFeatureProbe | None = None

    @classmethod
    def build(cls, accelerator, data_args, args, dataset, stream, config, feature_extractor) -> "Monitors":
        monitor_steps = args.logging_steps if args.monitor_steps is None else args.monitor_steps
        probe_steps = args.save_steps if args.probe_steps is None else args.probe_steps
        probe_encoders = [name.strip() for name in args.probe_encoders.split(",") if name.strip()]
        if monitor_steps < 0 or probe_steps <= 0 or not set(probe_encoders) <= {"student", "teacher"}:
            raise ValueError(
                f"need --monitor_steps >= 0, --probe_steps > 0 and --probe_encoders among "
                f"student,teacher; got {monitor_steps}, {probe_steps}, {args.probe_encoders!r}"
            )
        monitors = cls(monitor_steps, probe_steps, probe_encoders)
        if accelerator.is_main_process and monitor_steps > 0:
            monitors.inputs = monitor_batch(
                dataset, stream, data_args, config, feature_extractor, args.seed, args.monitor_clips
            ).to(accelerator.device)
        if accelerator.is_main_process and args.probe_dataset is not None:
            monitors.probe = FrozenFeatureProbe(
                args.probe_dataset,
                feature_extractor,
                config.num_frames,
                args.probe_max_clips,
                args.probe_k,
                args.probe_ridge,
            )
        return monitors

    def probe_logs(self, model, accelerator) -> dict:
        return probe_logs(self.probe, model, self.probe_encoders, accelerator.autocast)
