# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The reference every downstream result is shown beside: log-mel statistics + logistic regression.

A learned representation is only worth its cost where it beats what a few seconds of CPU give without any training:
the time-averaged log-mel spectrum, its spread, peak and frame-to-frame change over time, fed to a regularised
linear classifier. examples/finetune.py and examples/linear_eval.py compute it on the same parts (folds), the same
train / validation / test clips and the same clip lengths and crops as the model, and write it beside the model's
score (`all_results.json` "baseline", `results.md`), with one line when the model scores below it.
docs/downstream.md#the-log-mel-baseline says how to read it.

- `log_mel_statistics`: (B, T, F) log-mel and its (B, T) frame mask -> (B, 4F): per mel bin over the clip's real
  frames, the mean, the standard deviation (ddof 0), the maximum and the root mean square of the frame-to-frame
  difference.
- `clip_features`: the statistics of every clip of a split, decoded, cut or padded to the task's clip length and
  cropped as the model's evaluation crops them (`data.AaspFineTuningCollator`), with this module's own front end
  (`baseline_feature_extractor`: `AaspFeatureExtractor(feature_size=N_MELS)`, the package's default m2d log-mel with
  128 bins, whatever front end the model was saved with, so that the reference is the same for every model).
- `fit_probe` / `probe_scores`: z-scoring with the TRAIN statistics, then scikit-learn's `LogisticRegression` (lbfgs;
  multi-label: one binary problem per class), the inverse regularisation C chosen from `C_GRID` on the validation
  split (a run without one holds out `HELD_OUT_FRACTION` of the baseline's train clips, seed 0, to choose C and then
  refits on all of them).
- `log_mel_baseline`: the whole reference on a run's parts, capped at `max_clips` clips per split (a random subset,
  seed 0); `safe_log_mel_baseline` returns its error as a record instead of raising, so that a failure here never
  loses the model's result; `compare` / `attach`: the verdict on the model's mean score (below, equal to or above
  the baseline's) and the summary that carries both (`results.baseline_markdown` writes it into `results.md`).

The probe is deterministic (fixed crop seeds, fixed subsets, a convex fit): one value per part, the same for every
seed of the model, so its mean over parts is compared with the model's mean over seeds of its mean over parts.
"""

import copy
import logging
import time

import numpy as np
import torch

from ..data.collators import AaspFineTuningCollator
from ..utils.errors import UsageError
from ..feature_extraction_aasp import AaspFeatureExtractor
from .results import classification_score

logger = logging.getLogger(__name__)

NAME = "log-mel statistics + logistic regression"
N_MELS = 128  # mel bins of the baseline's front end: the package's default (better than 64 in the checks)
C_GRID = (0.01, 0.1, 1.0, 10.0)  # inverse L2 strengths tried, chosen on validation
HELD_OUT_FRACTION = 0.1  # of the baseline's train clips, to choose C when the run has no validation split
MAX_ITER = 1000  # lbfgs iterations per fit
DEFAULT_MAX_CLIPS = 5000  # clips per split the baseline featurises (train, validation, test): seconds to minutes
CHOICES = ("logmel", "none")
SPLITS = ("train", "validation", "test")
ANCHOR = "docs/downstream.md#the-log-mel-baseline"
BASELINE_HELP = (
    "the reference computed beside the model's score on the same splits: 'logmel' (log-mel statistics "
    "per bin + logistic regression, seconds on a CPU; docs/downstream.md#the-log-mel-baseline) or 'none'"
)
MAX_CLIPS_HELP = (
    f"the baseline featurises at most this many clips per split (a random subset, seed 0; the results "
    f"say when a split was cut); 0: all (default {DEFAULT_MAX_CLIPS})"
)


# ----------------------------------------------------------------------------------------------- features
def log_mel_statistics(log_mel, attention_mask=None) -> np.ndarray:
    """(B, T, F) log-mel (tensor or array) and its (B, T) mask (1 = real frame; None: all real) -> float32 (B, 4F),
    per mel bin over the clip's real frames: [mean ; standard deviation (ddof 0) ; maximum ; root mean square of the
    frame-to-frame difference x[t+1] - x[t] (over pairs of real frames)]. The last two were added to the mean and std
    because they were better on each of three small real-speech checks (docs/downstream.md#the-log-mel-baseline)."""
    x = np.asarray(log_mel.cpu() if torch.is_tensor(log_mel) else log_mel, dtype=np.float64)  # (B, T, F)
    if x.ndim != 3:
        raise ValueError(f"log_mel must be (B, T, F), got shape {x.shape}")
    if attention_mask is None:
        real = np.ones(x.shape[:2])
    else:
        real = np.asarray(
            attention_mask.cpu() if torch.is_tensor(attention_mask) else attention_mask, dtype=np.float64
        )  # (B, T)
    if not (real.sum(1) > 0).all():
        raise ValueError("every clip needs at least one real frame")
    weight = real[..., None]  # (B, T, 1)
    count = weight.sum(1)  # (B, 1)
    mean = (x * weight).sum(1) / count  # (B, F)
    std = np.sqrt((((x - mean[:, None, :]) ** 2) * weight).sum(1) / count)  # (B, F)
    maximum = np.where(weight > 0, x, -np.inf).max(1)  # (B, F)
    pairs = weight[:, 1:] * weight[:, :-1]  # (B, T - 1, 1): both frames real
    step = np.sqrt(((np.diff(x, axis=1) ** 2) * pairs).sum(1) / np.maximum(pairs.sum(1), 1.0))  # (B, F)
    return np.concatenate([mean, std, maximum, step], axis=1).astype(np.float32)  # (B, 4F)


def baseline_feature_extractor() -> AaspFeatureExtractor:
    """The baseline's front end: the package's m2d log-mel (25-ms window, 10-ms hop, 50-8000 Hz) with N_MELS bins."""
    return AaspFeatureExtractor(feature_size=N_MELS)


def clip_features(
    rows,
    clip_seconds: float,
    split: str,
    num_labels=None,
    crop_seed: int = 0,
    batch_size: int = 64,
    feature_extractor=None,
):
    """(statistics float32 (N, 4F), labels (N,) or multi-hot (N, C)) of `rows`, each clip cut or padded to
    `clip_seconds` (train / validation: a random window drawn from `crop_seed`; test: the first), as
    `AaspFineTuningCollator` gives the model its clips. Clips that fail to decode are skipped (the collator logs them).
    `num_labels`: multi-label rows (`labels`) -> multi-hot; None: single-label `label`."""
    collator = AaspFineTuningCollator(
        feature_extractor or baseline_feature_extractor(),
        clip_seconds=clip_seconds,
        split=split,
        num_labels=num_labels,
        seed=crop_seed,
    )
    features, labels = [], []
    for start in range(0, len(rows), batch_size):
        batch = collator([rows[i] for i in range(start, min(start + batch_size, len(rows)))])
        if batch is None:
            continue
        features.append(log_mel_statistics(batch["input_values"], batch["attention_mask"]))
        labels.append(batch["labels"].numpy())
    if not features:
        raise ValueError(f"no clip of the {split} split could be decoded")
    return np.concatenate(features), np.concatenate(labels)


def capped_indices(num_rows: int, max_clips: int, seed: int = 0) -> list[int]:
    """All row indices, or (max_clips > 0 and fewer than the rows) a sorted random subset of max_clips, from `seed`."""
    if max_clips <= 0 or num_rows <= max_clips:
        return list(range(num_rows))
    return sorted(np.random.default_rng(seed).choice(num_rows, size=max_clips, replace=False).tolist())


# ----------------------------------------------------------------------------------------------- probe
def _classifier(c: float, multi_label: bool, warm_start: bool = False):
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    probe = LogisticRegression(C=c, max_iter=MAX_ITER, warm_start=warm_start)
    return OneVsRestClassifier(probe) if multi_label else probe


def probe_scores(model, x: np.ndarray, num_classes: int, multi_label: bool) -> np.ndarray:
    """(N, num_classes) scores of a fitted probe: decision values; a class absent from the probe's training labels
    gets -inf (single-label), so that accuracy and mAP are computed over every class of the task."""
    if multi_label:
        return model.decision_function(x).reshape(len(x), -1)
    scores = np.full((len(x), num_classes), -np.inf)
    decision = model.decision_function(x)
    if decision.ndim == 1:  # two classes present: the score of the second
        decision = np.stack([-decision, decision], axis=1)
    scores[:, model.classes_.astype(int)] = decision
    return scores


def fit_probe(train, valid, num_classes: int, multi_label: bool, c_grid=C_GRID, seed: int = 0) -> dict:
    """Logistic regression on z-scored features (train statistics). `train`, `valid`: (features, labels); valid None:
    HELD_OUT_FRACTION of train (seed `seed`) chooses C, then the probe is refitted on all of train with it.

    Returns {"model", "mean", "std", "C", "valid_scores" (one per C of `c_grid`, in increasing order),
    "valid_score", "c_chosen_on"}."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from .features import standardization_stats, standardize

    x_train, y_train = train
    chosen_on = "validation"
    if valid is None:
        order = np.random.default_rng(seed).permutation(len(x_train))
        cut = max(1, int(round(HELD_OUT_FRACTION * len(x_train))))
        held, kept = order[:cut], order[cut:]
        valid, (x_fit, y_fit) = (x_train[held], y_train[held]), (x_train[kept], y_train[kept])
        chosen_on = f"{HELD_OUT_FRACTION:.0%} of the baseline's train clips held out (seed {seed})"
    else:
        x_fit, y_fit = x_train, y_train
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)  # OneVsRest: a class without positives gets a constant score

        def fits(x, y, grid):
            """The probe for each C of `grid` in increasing order, each (single-label) starting from the previous
            solution: the same convex problems, in fewer lbfgs iterations."""
            mean, std = standardization_stats(x)
            z = standardize(x, mean, std)
            model = _classifier(grid[0], multi_label, warm_start=True)
            for c in grid:
                model.set_params(**{("estimator__C" if multi_label else "C"): c})
                yield copy.deepcopy(model.fit(z, y)), mean, std

        def score(fitted, features, labels):
            model, mean, std = fitted
            return classification_score(
                probe_scores(model, standardize(features, mean, std), num_classes, multi_label), labels, multi_label
            )

        grid = sorted(c_grid)
        candidates = list(fits(x_fit, y_fit, grid))
        valid_scores = [score(fitted, *valid) for fitted in candidates]
        best = int(np.argmax(valid_scores))  # the first best: the strongest regularisation among ties
        model, mean, std = (
            candidates[best] if chosen_on == "validation" else next(fits(x_train, y_train, grid[best : best + 1]))
        )
    return {
        "model": model,
        "mean": mean,
        "std": std,
        "C": float(grid[best]),
        "valid_scores": valid_scores,
        "valid_score": float(valid_scores[best]),
        "c_chosen_on": chosen_on,
    }


def evaluate(fitted: dict, test, num_classes: int, multi_label: bool) -> float:
    """The test score (accuracy or mAP, `classification_score`) of a `fit_probe` result."""
    from .features import standardize

    x_test, y_test = test
    scores = probe_scores(fitted["model"], standardize(x_test, fitted["mean"], fitted["std"]), num_classes, multi_label)
    return classification_score(scores, y_test, multi_label)


# ----------------------------------------------------------------------------------------------- a run's baseline
def settings(max_clips: int, crop_seed: int) -> dict:
    """What defines the baseline, recorded with its scores."""
    return {
        "front_end": f"AaspFeatureExtractor(feature_size={N_MELS}): m2d log-mel, 25-ms window, 10-ms hop, "
        f"50-8000 Hz, 16 kHz",
        "features": f"per mel bin over the clip's frames: mean, std, max and the RMS of the frame-to-frame "
        f"difference ({4 * N_MELS} values)",
        "probe": f"z-scored with train statistics, scikit-learn LogisticRegression (lbfgs, L2, max_iter "
        f"{MAX_ITER}; multi-label: one-vs-rest)",
        "C_grid": list(C_GRID),
        "max_clips_per_split": max_clips,
        "subset_seed": 0,
        "crop_seeds": {split: crop_seed + i for i, split in enumerate(SPLITS)},
    }


def log_mel_baseline(
    parts: dict,
    clip_seconds: float,
    multi_label: bool,
    num_classes: int,
    max_clips: int = DEFAULT_MAX_CLIPS,
    crop_seed: int = 0,
    log=print,
) -> dict:
    """The baseline on a run's parts ({part: {split: rows}}, the model's own): per part the probe's C, validation and
    test scores and the clips it used; then the mean over parts. Split `split`'s crops come from crop_seed + its index
    in SPLITS (the seeds of the model's own evaluation crops, passed by the script)."""
    started = time.time()
    record = {"name": NAME, "settings": settings(max_clips, crop_seed), "parts": {}}
    extractor = baseline_feature_extractor()
    for part, splits in parts.items():
        data, clips = {}, {}
        for index, split in enumerate(SPLITS):
            if split not in splits:
                continue
            rows = splits[split]
            keep = capped_indices(len(rows), max_clips)
            subset = rows if len(keep) == len(rows) else _subset(rows, keep)
            data[split] = clip_features(
                subset,
                clip_seconds,
                split,
                num_classes if multi_label else None,
                crop_seed + index,
                feature_extractor=extractor,
            )
            clips[split] = {"used": len(data[split][0]), "of": len(rows)}
        fitted = fit_probe(data["train"], data.get("validation"), num_classes, multi_label)
        test_score = evaluate(fitted, data["test"], num_classes, multi_label)
        record["parts"][part] = {
            "test_score": test_score,
            "valid_score": fitted["valid_score"],
            "C": fitted["C"],
            "valid_scores": fitted["valid_scores"],
            "C_chosen_on": fitted["c_chosen_on"],
            "clips": clips,
        }
        log(
            f"   baseline {part}: test {100 * test_score:.2f} (C {fitted['C']:g}, train clips "
            f"{clips['train']['used']} of {clips['train']['of']})"
        )
    scores = [p["test_score"] for p in record["parts"].values()]
    record["test_mean"] = float(np.mean(scores))
    record["capped"] = sorted(
        {split for p in record["parts"].values() for split, n in p["clips"].items() if n["used"] < n["of"]}
    )
    record["seconds"] = round(time.time() - started, 2)
    return record


def _subset(rows, indices):
    """rows[i] for i in indices: `select` for a datasets.Dataset (keeps its lazy audio decoding), else a list."""
    return rows.select(indices) if hasattr(rows, "select") else [rows[i] for i in indices]


def safe_log_mel_baseline(
    choice: str, parts, clip_seconds, multi_label, num_classes, max_clips, crop_seed, log=print
) -> dict | None:
    """`log_mel_baseline`, or None for `choice` 'none', or {"name", "error"} when it failed: the model's results are
    written whatever happens here."""
    if choice == "none":
        return None
    try:
        return log_mel_baseline(parts, clip_seconds, multi_label, num_classes, max_clips, crop_seed, log)
    except Exception as error:  # noqa: BLE001  (a reference must never cost the run its result)
        logger.warning(
            f"the log-mel baseline failed ({type(error).__name__}: {error}); the model's results are written without it"
        )
        return {"name": NAME, "error": f"{type(error).__name__}: {error}"}


def check_choice(choice: str, max_clips: int):
    """A UsageError naming the flag for an unknown --baseline or a negative --baseline_max_clips."""
    if choice not in CHOICES:
        raise UsageError(f"--baseline {choice!r}: use one of {', '.join(CHOICES)}")
    if max_clips < 0:
        raise UsageError(f"--baseline_max_clips {max_clips}: pass a positive number of clips, or 0 for all")


# ----------------------------------------------------------------------------------------------- reporting
EQUAL_WITHIN = 1e-9  # scores this close are equal: the two means are summed in different orders


def compare(model_score: float, baseline: dict | None, metric: str) -> str | None:
    """The verdict on the model's mean score against the baseline's: a line that begins "below", "equal to" or
    "above the log-mel baseline", with both scores; None when there is no baseline score (none asked for, or it
    failed)."""
    if not baseline or "test_mean" not in baseline:
        return None
    difference = model_score - baseline["test_mean"]
    where = "equal to" if abs(difference) <= EQUAL_WITHIN else "below" if difference < 0 else "above"
    unit = " %" if metric == "accuracy" else ""
    return (
        f"{where} the log-mel baseline: {100 * model_score:.1f} vs {100 * baseline['test_mean']:.1f}{unit} "
        f"{metric} ({baseline.get('name', NAME)} on the same splits); see {baseline.get('anchor', ANCHOR)}"
    )


# With one seed there is no spread to compare with: the baseline must win by this much (of the metric) to be said to
# win on unseen sources. One clip of a 40-clip test moves accuracy by 0.025.
ONE_SEED_MARGIN = 0.03
UNSEEN_SOURCES_ANCHOR = "docs/downstream.md#when-the-baseline-wins-on-unseen-sources"


def unseen_sources_warning(summary: dict, baseline: dict | None) -> str | None:
    """One sentence when the run held out sources (--group_by: the test's voices, sites or devices never heard in
    training) and the log-mel baseline beats the model by more than the seed spread (the std over seeds; with one
    seed, ONE_SEED_MARGIN), saying what to do; None otherwise. A model that learned the sources of its training clips
    more than their classes is what this catches: its validation can look good while unseen sources fail."""
    group_by = (summary.get("arguments") or {}).get("group_by")
    if not group_by or not baseline or "test_mean" not in baseline:
        return None
    several_seeds = len(summary.get("seeds") or []) > 1
    margin = summary["test_std"] if several_seeds else ONE_SEED_MARGIN
    lead = baseline["test_mean"] - summary["test_mean"]
    if lead <= margin:
        return None
    spread = f"the seeds' spread of {100 * margin:.1f}" if several_seeds else f"{100 * ONE_SEED_MARGIN:g} points"
    return (
        f"On sources training never heard (--group_by {group_by!r}) the log-mel baseline beats the model by "
        f"{100 * lead:.1f} points of {summary['metric']}, more than {spread}: use the baseline's predictions, start "
        f"from a pre-trained encoder, or add sources (voices, sites, devices) to training; see {UNSEEN_SOURCES_ANCHOR}."
    )


def attach(summary: dict, baseline: dict | None) -> dict:
    """`summary` with the baseline block, the verdict line (`baseline_verdict`: below, equal to or above it), when
    the model is below it the same line as `below_baseline`, and when the baseline wins on held-out sources the
    sentence of `unseen_sources_warning` (`unseen_sources_warning`)."""
    if baseline is None:
        return summary
    summary = {**summary, "baseline": baseline}
    line = compare(summary["test_mean"], baseline, summary["metric"])
    if line:
        summary["baseline_verdict"] = line
    if line and line.startswith("below"):
        summary["below_baseline"] = line
    warning = unseen_sources_warning(summary, baseline)
    if warning:
        summary["unseen_sources_warning"] = warning
    return summary


def with_baseline(
    summary: dict,
    write,
    choice: str,
    parts,
    clip_seconds,
    multi_label: bool,
    num_classes: int,
    max_clips: int,
    crop_seed: int,
    log=print,
) -> dict:
    """A script's results with the baseline beside them. `write(summary)` has already written the model's results;
    the baseline is computed after that (nothing of the model's is lost if it fails or is interrupted), then the
    summary is written again with the "baseline" block and the verdict line (`attach`), which is also printed."""
    if choice == "none":
        return summary
    log(f"baseline: {NAME} on the same parts and clips (--baseline none skips it)")
    baseline = safe_log_mel_baseline(choice, parts, clip_seconds, multi_label, num_classes, max_clips, crop_seed, log)
    summary = attach(summary, baseline)
    write(summary)
    if "test_mean" in baseline:
        log(f"   baseline {summary['metric']}: {100 * baseline['test_mean']:.2f} in {baseline['seconds']:.1f} s")
    if summary.get("baseline_verdict"):
        log(f"   the model is {summary['baseline_verdict']}")
    if summary.get("unseen_sources_warning"):  # the last line, where a user looks
        log(summary["unseen_sources_warning"])
    return summary
