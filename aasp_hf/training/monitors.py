"""Learning-health monitors for self-supervised pre-training: is the run alive, collapsing, or learning features?

Three kinds of numbers, cheap enough to log every few steps (``examples/pretrain.py --monitor_steps``):

- collapse statistics of a batch of vectors (`collapse_statistics`): the per-dimension std across rows (its mean
  and minimum) and the effective rank (`effective_rank`, Roy & Vetterli 2007) of the row-centred matrix — for the
  student CLS of the current batch (one masked view per clip) and for the teacher targets, per token and
  token-averaged per clip (the clip target ȳ of L_u, measured nearly constant across clips in
  small CPU runs: per-dimension std 0.03–0.09 across 64 clips against ≈ 1 for the token targets);
- the SBLU's (α, β) = (decay, frequency) (`sblu_lambdas`, `lambda_statistics`): mean, std and the fraction of
  values pinned at the bounds α_min, β_min, β_max;
- a frozen-feature probe (`FrozenFeatureProbe`) on a small fixed labelled subset: k-NN (`knn_probe_accuracy`) and
  closed-form ridge (`ridge_probe_accuracy`) accuracy of the paper's linear-evaluation feature
  (`aasp_hf.evaluation.pool_features`), standardised with train statistics.

All of it runs without gradients, in eval mode and without drawing random numbers, so switching monitors on does
not change what the run trains. Dimensions: n rows, d features, B clips, M views, N tokens, D hidden size.
"""

import logging
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from ..data.decoding import decode_audio
from ..evaluation import pool_features, standardization_stats, standardize

logger = logging.getLogger(__name__)

AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aiff", ".aif")


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
    return {f"{name}_{key}": value for name, x in parts.items() if x.shape[0] >= 2
            for key, value in collapse_statistics(x, max_rows).items()}


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


def lambda_statistics(decay: torch.Tensor, frequency: torch.Tensor, decay_min: float, frequency_min: float,
                      frequency_max: float, rtol: float = 0.01) -> dict:
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
def pretraining_health(model, batch: dict, targets: torch.Tensor, monitor_inputs: torch.Tensor | None = None,
                       autocast=nullcontext) -> dict:
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
            monitor_inputs is not None or student.embeddings.lambda_encoder is None):
        with autocast():
            decay, frequency = sblu_lambdas(student, monitor_inputs)
        sblu = student.embeddings.sblu
        stats.update({f"sblu_{key}": value for key, value in lambda_statistics(
            decay, frequency, sblu.decay_min, sblu.frequency_min, sblu.frequency_max).items()})
    return stats


# ----------------------------------------------------------------------------------------------- probes
def _check_probe_inputs(train_x, train_y, test_x, test_y):
    train_x, test_x = np.asarray(train_x, dtype=np.float64), np.asarray(test_x, dtype=np.float64)
    train_y, test_y = np.asarray(train_y, dtype=np.int64), np.asarray(test_y, dtype=np.int64)
    if train_x.ndim != 2 or test_x.ndim != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(f"features must be (n, d) with the same d, got {train_x.shape} and {test_x.shape}")
    if train_y.shape != (len(train_x),) or test_y.shape != (len(test_x),):
        raise ValueError(f"labels must be (n,) class indices, got {train_y.shape} for {len(train_x)} train and "
                         f"{test_y.shape} for {len(test_x)} test rows")
    if len(train_x) == 0 or len(test_x) == 0 or min(train_y.min(), test_y.min()) < 0:
        raise ValueError("need at least one train and one test row, and labels >= 0")
    return train_x, train_y, test_x, test_y


def knn_probe_accuracy(train_x, train_y, test_x, test_y, k: int = 10) -> float:
    """Accuracy of a k-nearest-neighbour classifier with cosine similarity (n_train, d), (n_train,) int labels ->
    (n_test, d), (n_test,). Each test row takes the majority label of its k most similar train rows (similarity
    ties: the lower train index is nearer); a tie between labels goes to the label of the nearest neighbour among
    them. Deterministic; float64.
    """
    train_x, train_y, test_x, test_y = _check_probe_inputs(train_x, train_y, test_x, test_y)
    k = min(k, len(train_x))
    train_x = train_x / np.maximum(np.linalg.norm(train_x, axis=1, keepdims=True), 1e-12)
    test_x = test_x / np.maximum(np.linalg.norm(test_x, axis=1, keepdims=True), 1e-12)
    similarity = test_x @ train_x.T  # (n_test, n_train)
    nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :k]  # (n_test, k), most similar first
    neighbour_labels = train_y[nearest]  # (n_test, k)
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    rows = np.arange(len(test_x))[:, None]
    votes = np.zeros((len(test_x), num_classes))
    np.add.at(votes, (np.broadcast_to(rows, nearest.shape), neighbour_labels), 1.0)
    first_rank = np.full((len(test_x), num_classes), np.inf)  # rank of each label's nearest neighbour
    for rank in reversed(range(k)):
        first_rank[rows[:, 0], neighbour_labels[:, rank]] = rank
    score = votes + 0.5 / (1.0 + first_rank)  # the bonus (< 1, decreasing in rank) only breaks ties in votes
    return float((score.argmax(axis=1) == test_y).mean())


def ridge_probe_accuracy(train_x, train_y, test_x, test_y, alpha: float = 1.0) -> float:
    """Accuracy of a closed-form one-vs-rest ridge classifier (scikit-learn's `RidgeClassifier`): least squares to
    ±1 targets per class with an intercept (centred features and targets) and penalty `alpha`·‖W‖², then argmax.
    Solved in the primal (d ≤ n) or dual (d > n) form, float64. Labels are class indices (n,).
    """
    train_x, train_y, test_x, test_y = _check_probe_inputs(train_x, train_y, test_x, test_y)
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    targets = -np.ones((len(train_x), num_classes))
    targets[np.arange(len(train_x)), train_y] = 1.0  # (n, C), ±1
    x_mean, y_mean = train_x.mean(axis=0), targets.mean(axis=0)
    x, y = train_x - x_mean, targets - y_mean
    n, d = x.shape
    if d <= n:
        weights = np.linalg.solve(x.T @ x + alpha * np.eye(d), x.T @ y)  # (d, C)
    else:
        weights = x.T @ np.linalg.solve(x @ x.T + alpha * np.eye(n), y)  # (d, n) @ (n, C)
    scores = (test_x - x_mean) @ weights + y_mean  # (n_test, C)
    return float((scores.argmax(axis=1) == test_y).mean())


def probe_accuracies(train_x, train_y, test_x, test_y, k: int = 10, ridge: float = 1.0) -> dict:
    """Standardise with the TRAIN statistics (`aasp_hf.evaluation.standardize`), then ``knn_accuracy``
    (`knn_probe_accuracy`, `k`) and ``ridge_accuracy`` (`ridge_probe_accuracy`, alpha = `ridge` · d: on
    standardised features d is the mean eigenvalue of the train Gram matrix, so `ridge` is scale-free)."""
    mean, std = standardization_stats(np.asarray(train_x, dtype=np.float32))
    train_x, test_x = standardize(train_x, mean, std), standardize(test_x, mean, std)
    return {
        "knn_accuracy": knn_probe_accuracy(train_x, train_y, test_x, test_y, k),
        "ridge_accuracy": ridge_probe_accuracy(train_x, train_y, test_x, test_y, ridge * train_x.shape[1]),
    }


def list_audiofolder(root, split: str, max_clips: int | None = None, classes: list[str] | None = None):
    """Files of an audiofolder split `root/split/<label>/<file>` -> (paths, labels as indices into `classes`,
    classes). `classes` defaults to the sorted label folders of the split; files of other labels are left out.
    With `max_clips`, the files are taken round-robin over the classes in sorted file order (balanced, fixed).
    """
    split_dir = Path(root) / split
    if not split_dir.is_dir():
        raise ValueError(f"{split_dir} is not a folder: the probe dataset needs {root}/{{train,test}}/<label>/*.wav")
    folders = {p.name: p for p in sorted(split_dir.iterdir()) if p.is_dir()}
    classes = sorted(folders) if classes is None else list(classes)
    per_class = [sorted(f for f in folders[name].rglob("*") if f.suffix.lower() in AUDIO_EXTENSIONS)
                 if name in folders else [] for name in classes]
    paths, labels = [], []
    for rank in range(max((len(files) for files in per_class), default=0)):
        for label, files in enumerate(per_class):
            if rank < len(files) and (max_clips is None or len(paths) < max_clips):
                paths.append(files[rank])
                labels.append(label)
    return paths, np.asarray(labels, dtype=np.int64), classes


class FrozenFeatureProbe:
    """k-NN and ridge probe accuracy of frozen encoders on a fixed subset of an audiofolder dataset.

    `root/train/<label>/*.wav` and `root/test/<label>/*.wav` (or `validation`): at most `max_clips` clips per split,
    round-robin over the train split's classes (`list_audiofolder`). The log-mel of every clip (the first
    `num_frames` frames, padded with an attention mask) is computed once here and kept on the CPU; each call then
    costs one no-grad eval-mode forward of the encoder per clip. Features: `pool_features` (the paper's
    linear-evaluation feature [CLS ; per-frequency-row time means]); scores: `probe_accuracies`.
    """

    def __init__(self, root, feature_extractor, num_frames: int, max_clips: int | None = 200, k: int = 10,
                 ridge: float = 1.0, batch_size: int = 32):
        self.k, self.ridge, self.batch_size = k, ridge, batch_size
        self.splits, self.num_skipped, classes = {}, 0, None
        test_split = "test" if (Path(root) / "test").is_dir() else "validation"
        for split in ("train", test_split):
            paths, labels, classes = list_audiofolder(root, split, max_clips, classes)
            waveforms, kept = [], []
            for path, label in zip(paths, labels):
                try:
                    waveforms.append(decode_audio(str(path), feature_extractor.sampling_rate))
                    kept.append(label)
                except Exception as error:  # noqa: BLE001 - a bad probe clip is left out, not fatal
                    logger.warning(f"probe: cannot decode {path} ({error}); left out")
                    self.num_skipped += 1
            if not waveforms:
                raise ValueError(f"no decodable audio files in {Path(root) / split}")
            inputs = feature_extractor(waveforms, sampling_rate=feature_extractor.sampling_rate, return_tensors="pt",
                                       padding="max_length", max_frames=num_frames, truncation=True,
                                       return_attention_mask=True)
            self.splits[split] = (inputs["input_values"], inputs["attention_mask"], np.asarray(kept, dtype=np.int64))
        self.split_names = ("train", test_split)
        self.classes = classes

    @torch.no_grad()
    def features(self, encoder, split: str, autocast=nullcontext) -> np.ndarray:
        """float32 (n, D + F̃·D) pooled features of a split's clips from `encoder` (an `AaspModel`), in eval mode
        (its training mode is restored); `autocast`: a context-manager factory (e.g. `accelerator.autocast`)."""
        input_values, attention_mask, _ = self.splits[split]
        device = next(encoder.parameters()).device
        was_training = encoder.training
        encoder.eval()
        try:
            pooled = []
            for start in range(0, len(input_values), self.batch_size):
                batch = slice(start, start + self.batch_size)
                with autocast():
                    out = encoder(input_values[batch].to(device), attention_mask=attention_mask[batch].to(device))
                pooled.append(pool_features(out.last_hidden_state.float(), out.token_mask,
                                            encoder.config.num_frequency_patches).cpu().numpy())
        finally:
            encoder.train(was_training)
        return np.concatenate(pooled)

    def __call__(self, encoder, autocast=nullcontext) -> dict:
        """``knn_accuracy`` and ``ridge_accuracy`` of `encoder` on the test clips (see `probe_accuracies`)."""
        train, test = self.split_names
        return probe_accuracies(self.features(encoder, train, autocast), self.splits[train][2],
                                self.features(encoder, test, autocast), self.splits[test][2], self.k, self.ridge)

    def chance_accuracy(self) -> float:
        """Test accuracy of always answering the train split's most frequent class (the floor to beat)."""
        train, test = self.split_names
        majority = np.bincount(self.splits[train][2]).argmax()
        return float((self.splits[test][2] == majority).mean())


__all__ = [
    "FrozenFeatureProbe",
    "collapse_statistics",
    "effective_rank",
    "knn_probe_accuracy",
    "lambda_statistics",
    "list_audiofolder",
    "pretraining_collapse_statistics",
    "pretraining_health",
    "probe_accuracies",
    "ridge_probe_accuracy",
    "sblu_lambdas",
]
