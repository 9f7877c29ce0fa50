# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Sound event detection scored over whole recordings, as DCASE scores it, and its log-mel baseline.

- `frame_scores`: a frame classifier's sigmoid scores over every output frame of every recording of a split, by the
  detection pipeline itself (windows of the trained length on one grid of `time_patch_size` spectrogram frames, 0.16 s
  at the paper's 10-ms hop and 16-frame patches), so that a run's scores are what the pipeline and the tagger give.
- `detection_scores`: those scores post-processed into events (`pipeline_aasp.frame_events`: median filter,
  per-label thresholds, gap merging, minimum length: the settings the model's config saves) and scored against the
  split's reference events with `sound_events`' metrics: event-based F1 (200-ms onset collar, offset collar
  max(200 ms, 20 % of the event)) and segment-based F1 (1-s segments), each overall (micro) and class-wise
  (macro), plus the threshold-free PSDS. The primary score of a run is the class-wise event-based F1 (DCASE's
  ranking metric for domestic sound event detection before PSDS).
- `frame_log_mel_baseline`: the reference shown beside the model's score, on the same recordings: per output
  frame, the mean log-mel of the frame and of its two neighbours on each side (5 × 128 values), z-scored with the
  training statistics, one logistic regression per label trained on every frame of the training recordings,
  then the same post-processing and scores.
"""

import copy
import logging
import time

import numpy as np
import torch

from ..data.collators import trained_max_frames
from ..data.decoding import SAMPLING_RATE, SafeAudioDecoder
from ..data.frame_targets import event_list, frame_targets
from ..pipeline_aasp import frame_events
from . import sound_events as metrics

logger = logging.getLogger(__name__)

METRIC = "event_f1"  # the primary score: class-wise (macro) event-based F1
BASELINE_NAME = "per-frame log-mel (±2 frames) + logistic regression"
BASELINE_CONTEXT = 2  # output frames on each side in the baseline's features
BASELINE_C = 1.0  # inverse L2 strength of the baseline's logistic regressions
BASELINE_MAX_FRAMES = 100_000  # training frames the baseline fits on at most (a random subset, seed 0)


def frame_seconds(config, feature_extractor) -> float:
    """The duration of one output frame: `time_patch_size` spectrogram frames of the extractor's hop."""
    return config.time_patch_size * feature_extractor.hop_length / feature_extractor.sampling_rate


def postprocessing_settings(config) -> dict:
    """The post-processing a frame classifier's config saves, as `frame_events` keywords."""
    return {
        "thresholds": config.event_thresholds,
        "median_filter": config.event_median_filter,
        "min_duration": config.event_min_duration,
        "merge_gap": config.event_merge_gap,
    }


# ----------------------------------------------------------------------------------------------- model scores
def recording_log_mel(waveform: np.ndarray, feature_extractor) -> tuple[torch.Tensor, int]:
    """(T, F) log-mel of a whole recording (T rounded up to whole patches) and its number of real frames."""
    batch = feature_extractor(
        [waveform], sampling_rate=SAMPLING_RATE, return_tensors="pt", truncation=False
    )  # input_values (1, T, F)
    return batch["input_values"][0], int(batch["attention_mask"][0].sum())


def frame_scores(model, rows, feature_extractor, window_seconds: float, batch_size: int, accelerator=None) -> dict:
    """{filename: (T', C) scores} of every recording of `rows` that decodes, computed by the detection pipeline
    (`pipeline_aasp.AaspSoundEventDetectionPipeline` with the extractor as the saved model keeps it: the trained window
    `window_seconds` as `max_frames`, read in whole output frames), so that a run reports what the pipeline and `python -m aasp_hf.tag` give on the same recordings. Each
    process takes every W-th recording; the results are gathered on every process."""
    from ..pipeline_aasp import AaspSoundEventDetectionPipeline

    was_training = model.training
    model.eval()
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    device = accelerator.device if accelerator else next(model.parameters()).device
    # the extractor as the saved model keeps it: the trained window as max_frames, the pipeline's default window
    extractor = copy.copy(feature_extractor)
    extractor.max_frames = trained_max_frames(feature_extractor, window_seconds)
    detector = AaspSoundEventDetectionPipeline(model=model, feature_extractor=extractor, device=device)
    decoder, scores = SafeAudioDecoder(), {}
    for index in range(rank, len(rows), world):
        row = rows[index]
        waveform = decoder(row["audio"])
        if waveform is None:
            continue
        detected = detector(
            {"raw": waveform, "sampling_rate": SAMPLING_RATE}, batch_size=batch_size, return_frame_scores=True
        )
        scores[row["filename"]] = np.asarray(detected["frame_scores"], dtype=np.float32)
    model.train(was_training)
    if world > 1:
        from accelerate.utils import gather_object

        scores = {k: v for part in gather_object([scores]) for k, v in part.items()}
    return scores


# ----------------------------------------------------------------------------------------------- scores
def reference_events(rows, label_names) -> list[dict]:
    """The split's events as DCASE rows {filename, onset, offset, event_label} (read from the event column only)."""
    reference = []
    for index in range(len(rows)):
        row = rows[index]
        for onset, offset, label in event_list(row):
            reference.append(
                {"filename": row["filename"], "onset": onset, "offset": offset, "event_label": label_names[label]}
            )
    return reference


def estimated_events(scores: dict, label_names, frame_seconds: float, settings: dict, durations=None) -> list[dict]:
    """Every recording's post-processed events as DCASE rows."""
    estimated = []
    for filename, file_scores in scores.items():
        duration = None if durations is None else durations.get(filename)
        events = frame_events(file_scores, frame_seconds, list(label_names), duration=duration, **settings)
        estimated.extend(metrics.events_to_rows(events, filename))
    return estimated


def merged_reference(reference: list[dict]) -> list[dict]:
    """`reference` with overlapping events of one label in one file merged into one (PSDS counts coverage of the
    reference by the detections and refuses overlapping events of one label)."""
    merged, key = [], lambda e: (e["filename"], e["event_label"], e["onset"])  # noqa: E731
    for event in sorted(reference, key=key):
        last = merged[-1] if merged else None
        if last and (last["filename"], last["event_label"]) == (event["filename"], event["event_label"]):
            if event["onset"] < last["offset"]:
                last["offset"] = max(last["offset"], event["offset"])
                continue
        merged.append(dict(event))
    return merged


def detection_scores(scores: dict, rows, label_names, frame_seconds: float, settings: dict, with_psds=True) -> dict:
    """Event-based and segment-based F1 (micro and macro), their error rates and (`with_psds`) PSDS of `scores`
    ({filename: (T', C)}) against the reference events of `rows`; recordings that failed to decode are left out of
    both sides. PSDS sweeps 50 thresholds: the evaluations during training leave it out."""
    reference = [e for e in reference_events(rows, label_names) if e["filename"] in scores]
    estimated = estimated_events(scores, label_names, frame_seconds, settings)
    labels, files = list(label_names), list(scores)
    event = metrics.event_based_scores(reference, estimated, labels=labels, filenames=files)
    segment = metrics.segment_based_scores(reference, estimated, labels=labels, filenames=files)
    result = {
        "event_f1": event["class_wise_f_measure"],
        "event_f1_micro": event["f_measure"],
        "event_error_rate": event["error_rate"],
        "segment_f1": segment["class_wise_f_measure"],
        "segment_f1_micro": segment["f_measure"],
        "segment_error_rate": segment["error_rate"],
        "num_recordings": len(scores),
        "num_reference_events": len(reference),
        "num_estimated_events": len(estimated),
    }
    if not with_psds:
        return result
    try:
        others = {k: v for k, v in settings.items() if k != "thresholds"}
        result["psds"] = metrics.psds_from_scores(scores, merged_reference(reference), frame_seconds, labels, **others)
    except Exception as error:  # noqa: BLE001  (a threshold-free extra must not cost the run its F1 scores)
        logger.warning(f"PSDS could not be computed ({type(error).__name__}: {error})")
    return result


def choose_thresholds(scores: dict, rows, label_names, frame_seconds: float, settings: dict) -> list[float]:
    """Per label, the threshold that maximises its event-based F1 on these (validation) recordings."""
    reference = [e for e in reference_events(rows, label_names) if e["filename"] in scores]
    others = {k: v for k, v in settings.items() if k != "thresholds"}
    return [float(t) for t in metrics.choose_thresholds(scores, reference, frame_seconds, list(label_names), **others)]


# ----------------------------------------------------------------------------------------------- baseline
def _column_features(log_mel: np.ndarray, num_real: int, patch: int) -> np.ndarray:
    """(T, F) log-mel -> (ceil(num_real / patch), (2·BASELINE_CONTEXT + 1)·F): each output frame's mean log-mel
    and its neighbours' (edges repeated)."""
    num_columns = -(-num_real // patch)
    frames = log_mel[: num_columns * patch]
    if len(frames) < num_columns * patch:
        frames = np.pad(frames, ((0, num_columns * patch - len(frames)), (0, 0)), mode="edge")
    columns = frames.reshape(num_columns, patch, -1).mean(axis=1)  # (T, F) -> (T', P, F) -> (T', F)
    padded = np.pad(columns, ((BASELINE_CONTEXT, BASELINE_CONTEXT), (0, 0)), mode="edge")
    width = 2 * BASELINE_CONTEXT + 1
    return np.concatenate([padded[i : i + num_columns] for i in range(width)], axis=1)


def _split_features(rows, feature_extractor, patch: int, num_labels: int, frame_seconds: float):
    """{filename: features (T', K)} and {filename: targets (T', C)} of the recordings of `rows` that decode."""
    decoder, features, targets = SafeAudioDecoder(), {}, {}
    for index in range(len(rows)):
        row = rows[index]
        waveform = decoder(row["audio"])
        if waveform is None:
            continue
        log_mel, num_real = recording_log_mel(waveform, feature_extractor)
        features[row["filename"]] = _column_features(log_mel.numpy(), num_real, patch)
        num_columns = len(features[row["filename"]])
        targets[row["filename"]] = frame_targets(event_list(row), 0.0, num_columns, frame_seconds, num_labels)
    return features, targets


def frame_log_mel_baseline(splits: dict, label_names, frame_seconds: float, patch: int, settings: dict, log=print):
    """The baseline on a run's splits ({split: rows}): fitted on the training recordings' frames, thresholds chosen
    on validation when there is one (else the model's `settings`), scored on test as the model is."""
    from sklearn.linear_model import LogisticRegression

    from .baseline import baseline_feature_extractor

    started = time.time()
    extractor = baseline_feature_extractor()
    train_x, train_y = _split_features(splits["train"], extractor, patch, len(label_names), frame_seconds)
    x = np.concatenate(list(train_x.values()))
    y = np.concatenate(list(train_y.values())) >= 0.5  # a frame is an event's when the event covers half of it
    if len(x) > BASELINE_MAX_FRAMES:
        keep = np.sort(np.random.default_rng(0).choice(len(x), BASELINE_MAX_FRAMES, replace=False))
        x, y = x[keep], y[keep]
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-8
    classifiers = []
    for label in range(len(label_names)):
        if y[:, label].all() or not y[:, label].any():  # one class only: a constant score
            classifiers.append(float(y[:, label].mean()))
            continue
        fitted = LogisticRegression(C=BASELINE_C, max_iter=1000)
        classifiers.append(fitted.fit((x - mean) / std, y[:, label]))

    def scores_of(rows):
        features, _ = _split_features(rows, extractor, patch, len(label_names), frame_seconds)
        out = {}
        for name, f in features.items():
            z = (f - mean) / std
            columns = [np.full(len(z), c) if isinstance(c, float) else c.predict_proba(z)[:, 1] for c in classifiers]
            out[name] = np.stack(columns, axis=1).astype(np.float32)  # (T', C)
        return out

    settings = dict(settings)
    if "validation" in splits:
        settings["thresholds"] = choose_thresholds(
            scores_of(splits["validation"]), splits["validation"], label_names, frame_seconds, settings
        )
    test = detection_scores(scores_of(splits["test"]), splits["test"], label_names, frame_seconds, settings)
    record = {
        "name": BASELINE_NAME,
        "test_mean": test[METRIC],
        "test": test,
        "thresholds": settings["thresholds"],
        "train_frames": int(len(x)),
        "seconds": round(time.time() - started, 2),
    }
    log(f"   baseline: {METRIC} {100 * test[METRIC]:.2f}, segment_f1 {100 * test['segment_f1']:.2f}")
    return record


# ----------------------------------------------------------------------------------------------- reporting
REPORTED = ("event_f1", "event_f1_micro", "segment_f1", "segment_f1_micro", "psds", "event_error_rate")
ANCHOR = "docs/downstream.md#sound-events"


def mean_scores(runs: list[dict]) -> dict:
    """{score: [mean, std (ddof 1; 0 for one run)]} over the runs' test detection scores."""
    from .results import mean_std

    tests = [run["sound_events"]["test"] for run in runs if "sound_events" in run]
    return {key: list(mean_std([t[key] for t in tests])) for key in REPORTED if tests and all(key in t for t in tests)}


def with_frame_baseline(summary: dict, write, choice: str, parts: dict, label_names, log=print) -> dict:
    """`summary` with the per-frame log-mel baseline on the same recordings beside it (its one part: sound-event
    tasks have one), the verdict line, written again; `choice` "none" skips it. A failure is recorded, never raised."""
    from .baseline import attach

    if choice == "none" or "sound_events" not in summary["runs"][0]:  # none asked for, or the run is not finished
        return summary
    log(f"baseline: {BASELINE_NAME} on the same recordings (--baseline none skips it)")
    run = summary["runs"][0]["sound_events"]
    settings = {**run["postprocessing"], "thresholds": None}
    (splits,) = parts.values()
    try:
        baseline = frame_log_mel_baseline(
            splits, label_names, run["frame_seconds"], run.get("patch", 16), settings, log
        )
        baseline["anchor"] = ANCHOR
    except Exception as error:  # noqa: BLE001  (a reference must never cost the run its result)
        logger.warning(f"the log-mel baseline failed ({type(error).__name__}: {error}); the results stay without it")
        baseline = {"name": BASELINE_NAME, "error": f"{type(error).__name__}: {error}"}
    summary = attach(summary, baseline)
    write(summary)
    if summary.get("baseline_verdict"):
        log(f"   the model is {summary['baseline_verdict']}")
    return summary


def sound_events_markdown(summary: dict) -> list[str]:
    """results.md's sound-event section: every score of the model (mean ± std over runs) beside the baseline's."""
    scores, baseline = summary["sound_events"], summary.get("baseline") or {}
    run = summary["runs"][0].get("sound_events", {})
    lines = [
        "## Sound events",
        "",
        f"Test recordings scored whole, one output frame every {run.get('frame_seconds', float('nan')):.3f} s, "
        f"thresholds chosen on {run.get('thresholds_chosen_on', '?')}; post-processing {run.get('postprocessing')}. "
        "Event-based: 200-ms onset collar, offset collar max(200 ms, 20 % of the event); segment-based: 1-s "
        "segments; macro = class-wise mean, micro = overall (as sed_eval computes them).",
        "",
        "| score (×100) | model | " + (f"baseline: {baseline['name']} |" if "test" in baseline else ""),
        "|---|---|" + ("---|" if "test" in baseline else ""),
    ]
    for key, (mean, std) in scores.items():
        row = f"| {key} | {100 * mean:.2f} ± {100 * std:.2f} |"
        if "test" in baseline and key in baseline["test"]:
            row += f" {100 * baseline['test'][key]:.2f} |"
        lines.append(row)
    lines.append("")
    if summary.get("baseline_verdict"):
        lines += [f"**The model is {summary['baseline_verdict']}.**", ""]
    if "error" in baseline:
        lines += [f"The baseline was not computed: {baseline['error']}.", ""]
    return lines
