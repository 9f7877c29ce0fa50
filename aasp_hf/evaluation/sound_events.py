# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Sound event detection scores, computed as DCASE computes them, in numpy.

Events are dicts with DCASE's column names, `{"filename", "onset", "offset", "event_label"}` (seconds);
`events_to_rows` makes them from `frame_events`' output (aasp_hf/pipeline_aasp.py).

- `event_based_scores` and `segment_based_scores`: the counts and scores of `sed_eval.sound_event.EventBasedMetrics`
  and `SegmentBasedMetrics` (sed_eval 0.2.1, the DCASE challenges' toolbox), evaluated file by file as DCASE's
  evaluation scripts do.
- `psds`: the polyphonic sound detection score (Bilen et al., ICASSP 2020) of a set of operating points, as
  `psds_eval.PSDSEval` 0.5.3 computes it; the defaults are DCASE 2021 task 4's scenario 1. `psds_from_scores` makes
  the operating points from frame scores, one per threshold, as that task's baseline did.
- `choose_thresholds`: per class, the threshold of a grid that maximises the class's event-based F1 on validation
  files.

tests/test_sound_event_metrics.py checks each against sed_eval and psds_eval on random event lists.
"""

import math

import numpy as np

from ..pipeline_aasp import frame_events


# sed_eval adds numpy.spacing(1) to the reference count under every error rate: a class without reference events
# then has an error rate of (its insertions) / 2.2e-16, which reads as infinite, rather than a division by zero
EPS = float(np.spacing(1))
SECONDS_PER_UNIT = {"minute": 60, "hour": 3600, "day": 24 * 3600, "month": 30 * 24 * 3600, "year": 365 * 24 * 3600}
EMPTY_OUTPUT_HANDLING = (None, "zero_score")
DCASE_2021_THRESHOLDS = tuple(np.linspace(0.01, 0.99, 50).tolist())  # task 4's baseline: its PSDS operating points
THRESHOLD_GRID = tuple(np.linspace(0.05, 0.95, 19).tolist())  # `choose_thresholds`' candidates


def events_to_rows(events: list[dict], filename: str) -> list[dict]:
    """`frame_events`' events of one file -> metric rows `{"filename", "onset", "offset", "event_label"}`."""
    return [
        {"filename": filename, "onset": event["onset"], "offset": event["offset"], "event_label": event["label"]}
        for event in events
    ]


# ----------------------------------------------------------------------------------------------------------------------
# Event-based and segment-based scores (sed_eval)
# ----------------------------------------------------------------------------------------------------------------------


def event_based_scores(
    reference: list[dict],
    estimated: list[dict],
    t_collar: float = 0.2,
    percentage_of_length: float = 0.2,
    evaluate_onset: bool = True,
    evaluate_offset: bool = True,
    labels=None,
    filenames=None,
    empty_system_output_handling: str | None = "zero_score",
) -> dict:
    """Event-based precision, recall, F1 and error rate (Mesaros et al., 2016), as sed_eval's EventBasedMetrics.

    An estimated event is correct when its label is a reference event's, its onset is within `t_collar` seconds of
    that event's and its offset within max(`t_collar`, `percentage_of_length` x the reference event's length) of its
    offset (each condition only when `evaluate_onset` / `evaluate_offset`). Per file, the correct pairs are a maximum
    one-to-one matching of reference and estimated events (sed_eval's "optimal" matching, which 0.2.1 uses by default);
    among the events left unmatched, a reference event and an estimated one that meet the timing conditions but not
    the label are a substitution (paired greedily, in the order the events were given), which only the overall error
    rate reads: ER = (S + D + I) / N_ref. The counts are summed over the files, then turned into scores (micro); the
    class-wise scores are per label, and `class_wise_*` their mean over the labels whose score is defined.

    Args:
        reference, estimated: event rows (see the module docstring); the order within a file matters only to which
            unmatched pairs count as substitutions, as in sed_eval.
        labels: the classes scored class-wise; None = the labels of `reference` and `estimated`, sorted (DCASE task 4's
            scripts pass their union). A class without reference events has an undefined recall (NaN) and so an
            undefined F1, which `class_wise_f_measure` skips: its mean covers the classes present in the reference.
        filenames: the files evaluated; None = every file named in `reference` or `estimated`, so an estimated event
            in a file without reference events is an insertion. Events of other files are ignored.
        empty_system_output_handling: "zero_score" (DCASE task 4's choice, and ours): the precision of a class, or of
            the whole output, that estimated no event is 0, so a class the system never outputs counts with an F1 of 0
            in the class-wise mean. None: sed_eval's default, NaN, and such a class is left out of the mean.

    Returns:
        A dict of plain floats: "f_measure", "precision", "recall", "error_rate", "substitution_rate",
        "deletion_rate", "insertion_rate", "n_ref", "n_sys", "n_correct"; "class_wise_f_measure",
        "class_wise_precision", "class_wise_recall", "class_wise_error_rate"; and "class_wise", {label: {"f_measure",
        "precision", "recall", "error_rate", "deletion_rate", "insertion_rate", "n_ref", "n_sys", "n_correct"}}.
    """
    if not t_collar > 0:
        raise ValueError(f"t_collar must be > 0 seconds, got {t_collar!r}")
    if not 0.0 <= percentage_of_length <= 1.0:
        raise ValueError(f"percentage_of_length must be in [0, 1], got {percentage_of_length!r}")
    if not (evaluate_onset or evaluate_offset):
        raise ValueError("evaluate_onset and evaluate_offset cannot both be False")
    reference_by_file, estimated_by_file, labels, filenames = _prepare(reference, estimated, labels, filenames)
    _check_handling(empty_system_output_handling)

    overall = {"n_ref": 0, "n_sys": 0, "n_correct": 0, "n_substitutions": 0}
    counts = {label: {"n_ref": 0, "n_sys": 0, "n_correct": 0} for label in labels}
    for filename in filenames:
        ref, est = reference_by_file.get(filename, _EMPTY), estimated_by_file.get(filename, _EMPTY)
        timing = np.ones((len(ref[0]), len(est[0])), dtype=bool)  # (N_ref, N_est)
        if evaluate_onset:
            timing &= np.abs(ref[0][:, None] - est[0][None, :]) <= t_collar
        if evaluate_offset:
            collar = np.maximum(t_collar, percentage_of_length * (ref[1] - ref[0]))  # (N_ref,)
            timing &= np.abs(ref[1][:, None] - est[1][None, :]) <= collar[:, None]
        matching = _maximum_matching(timing & (ref[2][:, None] == est[2][None, :]))  # {reference: estimated}

        # substitutions: unmatched pairs that meet the timing, first come first served in the given order
        matched_est = set(matching.values())
        unmatched_est = [i for i in range(len(est[0])) if i not in matched_est]
        substitutions = 0
        for j in range(len(ref[0])):
            if j in matching:
                continue
            for i in unmatched_est:
                if timing[j, i]:
                    unmatched_est.remove(i)
                    substitutions += 1
                    break

        overall["n_ref"] += len(ref[0])
        overall["n_sys"] += len(est[0])
        overall["n_correct"] += len(matching)
        overall["n_substitutions"] += substitutions
        # a maximum matching of the file is, label by label, a maximum matching of that label's events
        matched_labels = [ref[2][j] for j in matching]
        for label in labels:
            counts[label]["n_ref"] += int(np.sum(ref[2] == label))
            counts[label]["n_sys"] += int(np.sum(est[2] == label))
            counts[label]["n_correct"] += matched_labels.count(label)

    n_ref, n_sys, n_correct, n_subs = (overall[k] for k in ("n_ref", "n_sys", "n_correct", "n_substitutions"))
    return _scores(
        n_ref=n_ref,
        n_sys=n_sys,
        n_correct=n_correct,
        substitutions=n_subs,
        deletions=n_ref - n_correct - n_subs,
        insertions=n_sys - n_correct - n_subs,
        class_counts=counts,
        handling=empty_system_output_handling,
    )


def segment_based_scores(
    reference: list[dict],
    estimated: list[dict],
    time_resolution: float = 1.0,
    labels=None,
    filenames=None,
    empty_system_output_handling: str | None = "zero_score",
) -> dict:
    """Segment-based precision, recall, F1 and error rate (Mesaros et al., 2016), as sed_eval's SegmentBasedMetrics.

    Each file is cut into segments of `time_resolution` seconds from 0 to the last offset of its reference and
    estimated events together (sed_eval reads no file length): ceil(that / time_resolution) segments. An event makes
    its label active in segments floor(onset / time_resolution) to ceil(offset / time_resolution) - 1. Per segment,
    with N_ref and N_sys active labels of which N_tp in both: S = min(N_ref, N_sys) - N_tp, D = max(0, N_ref - N_sys),
    I = max(0, N_sys - N_ref); class-wise, a false positive is an insertion and a false negative a deletion. Counts
    are summed over segments and files. `labels`, `filenames`, `empty_system_output_handling` and the returned dict
    are as in `event_based_scores` ("n_correct" counts true-positive (segment, label) pairs).
    """
    if not time_resolution > 0:
        raise ValueError(f"time_resolution must be > 0 seconds, got {time_resolution!r}")
    reference_by_file, estimated_by_file, labels, filenames = _prepare(reference, estimated, labels, filenames)
    _check_handling(empty_system_output_handling)
    index = {label: c for c, label in enumerate(labels)}

    totals = dict.fromkeys(("n_ref", "n_sys", "n_correct", "substitutions", "deletions", "insertions"), 0)
    ref_active, sys_active, both_active = (np.zeros(len(labels), dtype=np.int64) for _ in range(3))
    for filename in filenames:
        ref, est = reference_by_file.get(filename, _EMPTY), estimated_by_file.get(filename, _EMPTY)
        length = max([0.0, *ref[1].tolist(), *est[1].tolist()])
        num_segments = int(math.ceil(length / time_resolution))
        rolls = []
        for onsets, offsets, event_labels in (ref, est):
            roll = np.zeros((num_segments, len(labels)), dtype=bool)  # (segments, C)
            for onset, offset, label in zip(onsets.tolist(), offsets.tolist(), event_labels.tolist()):
                start, stop = int(math.floor(onset / time_resolution)), int(math.ceil(offset / time_resolution))
                roll[start:stop, index[label]] = True
            rolls.append(roll)
        ref_roll, sys_roll = rolls
        n_ref, n_sys = ref_roll.sum(axis=1), sys_roll.sum(axis=1)  # (segments,)
        n_tp = (ref_roll & sys_roll).sum(axis=1)
        totals["n_ref"] += int(n_ref.sum())
        totals["n_sys"] += int(n_sys.sum())
        totals["n_correct"] += int(n_tp.sum())
        totals["substitutions"] += int((np.minimum(n_ref, n_sys) - n_tp).sum())
        totals["deletions"] += int(np.maximum(0, n_ref - n_sys).sum())
        totals["insertions"] += int(np.maximum(0, n_sys - n_ref).sum())
        ref_active += ref_roll.sum(axis=0)
        sys_active += sys_roll.sum(axis=0)
        both_active += (ref_roll & sys_roll).sum(axis=0)

    counts = {
        label: {"n_ref": int(ref_active[c]), "n_sys": int(sys_active[c]), "n_correct": int(both_active[c])}
        for c, label in enumerate(labels)
    }
    return _scores(**totals, class_counts=counts, handling=empty_system_output_handling)


_EMPTY = (np.zeros(0), np.zeros(0), np.zeros(0, dtype=object))


def _prepare(reference, estimated, labels, filenames):
    """Rows -> ({filename: (onsets, offsets, labels)} for each side, the labels scored, the files evaluated). Each
    file keeps its events in the given order."""
    by_file = [_rows_by_file(reference, "reference"), _rows_by_file(estimated, "estimated")]
    if labels is None:
        labels = sorted({label for rows in by_file for events in rows.values() for label in events[2]})
    labels = list(labels)
    if filenames is None:
        filenames = sorted(set(by_file[0]) | set(by_file[1]))
    unknown = {label for rows in by_file for events in rows.values() for label in events[2]} - set(labels)
    if unknown:
        raise ValueError(f"events have labels outside `labels`: {sorted(unknown)}")
    return by_file[0], by_file[1], labels, list(filenames)


def _rows_by_file(rows, name) -> dict:
    grouped = {}
    for row in rows:
        try:
            filename, onset, offset, label = row["filename"], row["onset"], row["offset"], row["event_label"]
        except KeyError as missing:
            raise ValueError(
                f"{name} events need filename, onset, offset and event_label; one lacks {missing}"
            ) from None
        onset, offset = float(onset), float(offset)
        if not 0.0 <= onset <= offset < math.inf:
            raise ValueError(f"{name} event {dict(row)} must have 0 <= onset <= offset (seconds)")
        grouped.setdefault(filename, []).append((onset, offset, label))
    return {
        filename: (
            np.array([event[0] for event in events]),
            np.array([event[1] for event in events]),
            np.array([event[2] for event in events], dtype=object),
        )
        for filename, events in grouped.items()
    }


def _check_handling(handling):
    if handling not in EMPTY_OUTPUT_HANDLING:
        raise ValueError(f"empty_system_output_handling must be one of {EMPTY_OUTPUT_HANDLING}, got {handling!r}")


def _maximum_matching(hits: np.ndarray) -> dict:
    """A maximum one-to-one matching of a bool (N_ref, N_est) hit matrix -> {reference index: estimated index}.

    Hopcroft-Karp, visiting the vertices in the order of sed_eval's `bipartite_match` (the one of mir_eval and of
    Eppstein's original): every maximum matching has as many pairs, but which events stay unmatched decides the
    substitutions, so the same pairs are chosen. Estimated events are the searching side, in the order they first
    appear in the row-major hits; each lists its reference events in increasing order."""
    graph = {}  # estimated -> [reference]
    for j, i in zip(*np.nonzero(hits)):
        graph.setdefault(int(i), []).append(int(j))
    match = {}  # reference -> estimated
    for i, candidates in graph.items():  # a greedy start
        for j in candidates:
            if j not in match:
                match[j] = i
                break
    while True:
        # breadth-first layers from the unmatched estimated events until a layer reaches an unmatched reference event
        free_refs = []  # also the mark of a layer's roots in `reached_from`
        reached_from = {i: free_refs for i in graph}  # estimated -> the reference event that reached it
        for i in match.values():
            del reached_from[i]
        layer = list(reached_from)
        predecessors = {}  # reference -> the estimated events of the previous layer that reach it
        while layer and not free_refs:
            new_layer = {}
            for i in layer:
                for j in graph[i]:
                    if j not in predecessors:
                        new_layer.setdefault(j, []).append(i)
            layer = []
            for j, sources in new_layer.items():
                predecessors[j] = sources
                if j in match:
                    layer.append(match[j])
                    reached_from[match[j]] = j
                else:
                    free_refs.append(j)
        if not free_refs:
            return match

        def augment(j):
            """Walk back from reference event j along the layers, flipping the path into the matching."""
            for i in predecessors.pop(j, ()):
                if i in reached_from:
                    previous = reached_from.pop(i)
                    if previous is free_refs or augment(previous):
                        match[j] = i
                        return True
            return False

        for j in free_refs:
            augment(j)


def _scores(n_ref, n_sys, n_correct, substitutions, deletions, insertions, class_counts, handling) -> dict:
    """Summed counts -> sed_eval's scores, with its NaN rules: precision NaN without estimates (0 with "zero_score"),
    recall NaN without references, F1 0 when both are 0 and NaN when either is NaN."""
    result = _f_measure(n_correct, n_sys, n_ref, handling)
    result.update(
        substitution_rate=substitutions / (n_ref + EPS),
        deletion_rate=deletions / (n_ref + EPS),
        insertion_rate=insertions / (n_ref + EPS),
    )
    result["error_rate"] = result["substitution_rate"] + result["deletion_rate"] + result["insertion_rate"]
    result.update(n_ref=float(n_ref), n_sys=float(n_sys), n_correct=float(n_correct))

    class_wise = {}
    for label, counts in class_counts.items():
        scores = _f_measure(counts["n_correct"], counts["n_sys"], counts["n_ref"], handling)
        scores["deletion_rate"] = (counts["n_ref"] - counts["n_correct"]) / (counts["n_ref"] + EPS)
        scores["insertion_rate"] = (counts["n_sys"] - counts["n_correct"]) / (counts["n_ref"] + EPS)
        scores["error_rate"] = scores["deletion_rate"] + scores["insertion_rate"]
        scores.update({key: float(value) for key, value in counts.items()})
        class_wise[label] = scores
    for key in ("f_measure", "precision", "recall", "error_rate"):
        result[f"class_wise_{key}"] = _nanmean([scores[key] for scores in class_wise.values()])
    result["class_wise"] = class_wise
    return result


def _f_measure(n_correct, n_sys, n_ref, handling) -> dict:
    if n_sys == 0:
        precision = 0.0 if handling == "zero_score" else math.nan
    else:
        precision = n_correct / n_sys
    recall = n_correct / n_ref if n_ref else math.nan
    if precision == 0 and recall == 0:
        f_measure = 0.0
    else:
        f_measure = 2.0 * precision * recall / (precision + recall)  # NaN when either is
    return {"f_measure": f_measure, "precision": precision, "recall": recall}


def _nanmean(values) -> float:
    defined = [value for value in values if not math.isnan(value)]
    return float(np.mean(defined)) if defined else math.nan


# ----------------------------------------------------------------------------------------------------------------------
# PSDS (psds_eval)
# ----------------------------------------------------------------------------------------------------------------------


def psds(
    reference: list[dict],
    operating_points: list[list[dict]],
    durations: dict,
    dtc_threshold: float = 0.7,
    gtc_threshold: float = 0.7,
    cttc_threshold: float = 0.3,
    alpha_ct: float = 0.0,
    alpha_st: float = 1.0,
    max_efpr: float = 100.0,
    duration_unit: str = "hour",
) -> float:
    """The polyphonic sound detection score of a system, as psds_eval 0.5.3 computes it (its staircase PSD-ROC, not the
    linear interpolation). The defaults are DCASE 2021 task 4's scenario 1; scenario 2 is dtc = gtc = 0.1, cttc = 0.3,
    alpha_ct = 0.5, alpha_st = 1.

    Per operating point (the system's events at one setting, usually one threshold) and class:
    - a detection passes the DTC when the fraction of it that overlaps reference events of its class is >=
      `dtc_threshold`;
    - a reference event is a true positive when detections of its class that pass the DTC cover a fraction >=
      `gtc_threshold` of it; TPR = true positives / reference events of the class;
    - a detection that fails the DTC is a false positive when it overlaps its file ([0, duration]); FPR = false
      positives per `duration_unit` of audio (the durations summed). It is also a cross-trigger on class k when the
      fraction of it that overlaps reference events of k is >= `cttc_threshold`; CTR = cross-triggers per
      `duration_unit` of k's reference events;
    - eFPR = FPR + `alpha_ct` x the mean of its CTRs over the other classes.
    Each class's PSD-ROC is its best TPR at an eFPR up to x, over the operating points and (0, 0); the PSD-ROC is
    their mean over the classes less `alpha_st` x their standard deviation (clipped at 0), and PSDS its area from 0 to
    `max_efpr`, normalised by `max_efpr`, the curve being a staircase between the eFPRs of the operating points.

    Args:
        reference: reference event rows; the classes are its labels (detections of other labels are ignored), and
            events of one class may not overlap in a file (psds_eval refuses them too), nor may detections.
        operating_points: one list of detection rows per operating point.
        durations: {filename: seconds} of every evaluated file, files without reference events included; every file of
            `reference` and of the detections must be in it.
        alpha_ct: with one class there is no other class to cross-trigger, and the CTR term is 0 (psds_eval's mean
            over no classes is NaN).

    Returns:
        PSDS in [0, 1], a float.
    """
    for name, value in (("dtc_threshold", dtc_threshold), ("gtc_threshold", gtc_threshold)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    if not 0.0 <= cttc_threshold <= 1.0 or not 0.0 <= alpha_ct <= 1.0:
        raise ValueError(f"cttc_threshold and alpha_ct must be in [0, 1], got {cttc_threshold!r}, {alpha_ct!r}")
    if not alpha_st >= 0 or not max_efpr > 0:
        raise ValueError(f"alpha_st must be >= 0 and max_efpr > 0, got {alpha_st!r}, {max_efpr!r}")
    if duration_unit not in SECONDS_PER_UNIT:
        raise ValueError(f"duration_unit must be one of {sorted(SECONDS_PER_UNIT)}, got {duration_unit!r}")
    if not operating_points:
        raise ValueError("psds needs at least one operating point")
    if any(not value >= 0 for value in durations.values()):
        raise ValueError("durations must be >= 0 seconds")
    unit = SECONDS_PER_UNIT[duration_unit]
    ground_truth = _psds_events(reference, durations, "reference")
    labels = sorted({label for events in ground_truth.values() for label in events[2]})
    if not labels:
        raise ValueError("psds needs reference events")
    index = {label: c for c, label in enumerate(labels)}
    gt_class = {
        filename: np.array([index[label] for label in events[2]], dtype=np.int64)
        for filename, events in ground_truth.items()
    }
    gt_count = np.zeros(len(labels))
    gt_seconds = np.zeros(len(labels))
    for filename, (onsets, offsets, _) in ground_truth.items():
        np.add.at(gt_count, gt_class[filename], 1)
        np.add.at(gt_seconds, gt_class[filename], offsets - onsets)
    total_seconds = float(sum(durations.values()))

    tpr, fpr, ctr = [], [], []  # per operating point: (C,), (C,), (C, C)
    for detections in operating_points:
        true_positives, false_positives, cross_triggers = _psds_counts(
            ground_truth,
            gt_class,
            _psds_events(detections, durations, "detection"),
            durations,
            index,
            dtc_threshold,
            gtc_threshold,
            cttc_threshold,
        )
        tpr.append(true_positives / gt_count)
        fpr.append(false_positives * unit / total_seconds)
        rates = cross_triggers * unit / gt_seconds[None, :]
        np.fill_diagonal(rates, np.nan)
        ctr.append(rates)
    tpr = np.stack([*tpr, np.zeros(len(labels))], axis=1)  # (C, operating points + the origin)
    fpr = np.stack([*fpr, np.zeros(len(labels))], axis=1)
    if alpha_ct > 0 and len(labels) > 1:
        ctr = np.stack([*ctr, np.zeros((len(labels), len(labels)))], axis=2)  # (C, C, operating points + 1)
        efpr = fpr + alpha_ct * np.nanmean(ctr, axis=1)
    else:
        efpr = fpr

    # each class's staircase: its best TPR at an eFPR <= x, on the union of every class's eFPRs
    points = np.unique(efpr)  # sorted; 0 is one of them
    reached = efpr[:, None, :] <= points[None, :, None]  # (C, points, operating points + 1)
    curves = np.where(reached, tpr[:, None, :], -np.inf).max(axis=2)  # (C, points)
    etpr = np.maximum(curves.mean(axis=0) - alpha_st * curves.std(axis=0), 0.0)  # (points,)
    inside = points <= max_efpr
    x = np.append(points[inside], max_efpr)  # the last step runs on to max_efpr
    return float(np.sum(np.diff(x) * etpr[inside]) / max_efpr)


def _psds_events(rows, durations, name) -> dict:
    """Rows -> {filename: (onsets, offsets, labels)}, zero-length events dropped (as psds_eval drops them), after
    checking that events of one label do not overlap and that every file has a duration."""
    by_file = _rows_by_file(rows, name)
    unknown = set(by_file) - set(durations)
    if unknown:
        raise ValueError(f"{name} events in files without a duration: {sorted(unknown)[:5]}")
    for filename, (onsets, offsets, labels) in by_file.items():
        for label in set(labels):
            order = np.argsort(onsets[labels == label], kind="stable")
            starts, ends = onsets[labels == label][order], offsets[labels == label][order]
            if np.any(starts[1:] < ends[:-1]):
                raise ValueError(f"{name} events of label {label!r} overlap in file {filename!r}")
    return {
        filename: (onsets[keep], offsets[keep], labels[keep])
        for filename, (onsets, offsets, labels) in by_file.items()
        for keep in [offsets > onsets]
    }


def _psds_counts(ground_truth, gt_class, detections, durations, index, dtc, gtc, cttc):
    """One operating point -> true positives (C,), false positives (C,), cross-triggers (C, C) (detected class, reference
    class), summed over the files."""
    num_classes = len(index)
    true_positives, false_positives = np.zeros(num_classes), np.zeros(num_classes)
    cross_triggers = np.zeros((num_classes, num_classes))
    for filename, (det_on, det_off, det_labels) in detections.items():
        known = np.array([label in index for label in det_labels], dtype=bool)
        det_on, det_off = det_on[known], det_off[known]
        det_class = np.array([index[label] for label in det_labels[known]], dtype=np.int64)
        gt_on, gt_off, _ = ground_truth.get(filename, _EMPTY)
        gt_cls = gt_class.get(filename, np.zeros(0, dtype=np.int64))

        overlap = np.minimum(det_off[:, None], gt_off[None, :]) - np.maximum(det_on[:, None], gt_on[None, :])
        intersects = (det_on[:, None] < gt_off[None, :]) & (gt_on[None, :] < det_off[:, None])  # (N_det, N_gt)
        overlap = np.where(intersects, overlap, 0.0)
        det_share = overlap / (det_off - det_on)[:, None]  # of each detection, the fraction in each reference event
        gt_share = overlap / (gt_off - gt_on)[None, :]
        same = intersects & (det_class[:, None] == gt_cls[None, :])

        passes_dtc = same.any(axis=1) & (np.where(same, det_share, 0.0).sum(axis=1) >= dtc)  # (N_det,)
        by_dtc = same & passes_dtc[:, None]
        covered = by_dtc.any(axis=0) & (np.where(by_dtc, gt_share, 0.0).sum(axis=0) >= gtc)  # (N_gt,)
        np.add.at(true_positives, gt_cls[covered], 1)

        # the rest: a false positive wherever it lies in the file, and a cross-trigger on the classes it overlaps
        rest = ~passes_dtc
        in_file = (det_on < durations[filename]) & (det_off > 0.0)
        np.add.at(false_positives, det_class[rest & in_file], 1)
        for k in range(num_classes):
            other = intersects & (gt_cls[None, :] == k) & (det_class[:, None] != k)
            triggers = rest & other.any(axis=1) & (np.where(other, det_share, 0.0).sum(axis=1) >= cttc)
            np.add.at(cross_triggers[:, k], det_class[triggers], 1)
    return true_positives, false_positives, cross_triggers


def psds_from_scores(
    scores_per_file: dict,
    reference: list[dict],
    frame_seconds: float,
    labels,
    thresholds=DCASE_2021_THRESHOLDS,
    durations: dict | None = None,
    psds_arguments: dict | None = None,
    **postprocessing,
) -> float:
    """PSDS of a frame classifier: one operating point per threshold (the same for every class; DCASE 2021 task 4's
    baseline used these 50), its events made by `frame_events` with `postprocessing` (median_filter, min_duration,
    merge_gap). `scores_per_file`: {filename: (T, C) probabilities}; `durations`: {filename: seconds}, None = T x
    frame_seconds; `psds_arguments`: `psds`' criteria (default scenario 1)."""
    durations = _durations(scores_per_file, frame_seconds, durations)
    operating_points = [
        _detect(scores_per_file, frame_seconds, labels, float(threshold), durations, postprocessing)
        for threshold in thresholds
    ]
    return psds(reference, operating_points, durations, **(psds_arguments or {}))


# ----------------------------------------------------------------------------------------------------------------------
# Threshold choice
# ----------------------------------------------------------------------------------------------------------------------


def choose_thresholds(
    scores_per_file: dict,
    reference: list[dict],
    frame_seconds: float,
    labels,
    grid=THRESHOLD_GRID,
    durations: dict | None = None,
    t_collar: float = 0.2,
    percentage_of_length: float = 0.2,
    **postprocessing,
) -> list[float]:
    """Per class, the threshold of `grid` that maximises its event-based F1 (`event_based_scores`, DCASE's collars) on
    the files of `scores_per_file` ({filename: (T, C) probabilities}, validation files: choosing on the test files
    overestimates the test score), events made by `frame_events` with `postprocessing` (median_filter, min_duration,
    merge_gap). Ties go to the threshold nearest 0.5 (then the lower); a class without reference events in these
    files keeps 0.5. The result is `frame_events`' `thresholds`, in the order of `labels`.

    The classes do not interact (`frame_events` thresholds and merges each on its own), so one pass over the grid with
    a shared threshold scores every class at every threshold."""
    labels = list(labels)
    durations = _durations(scores_per_file, frame_seconds, durations)
    grid = [round(float(value), 12) for value in grid]  # np.linspace's 0.7999999999999999 -> 0.8
    reference = [row for row in reference if row["filename"] in scores_per_file]
    f1 = np.zeros((len(grid), len(labels)))  # (thresholds, C)
    for g, threshold in enumerate(grid):
        estimated = _detect(scores_per_file, frame_seconds, labels, threshold, durations, postprocessing)
        class_wise = event_based_scores(
            reference,
            estimated,
            t_collar=t_collar,
            percentage_of_length=percentage_of_length,
            labels=labels,
            filenames=list(scores_per_file),
        )["class_wise"]
        f1[g] = [class_wise[label]["f_measure"] for label in labels]
    present = {row["event_label"] for row in reference}
    distance = [round(abs(threshold - 0.5), 12) for threshold in grid]  # 0.45 and 0.55 equally near
    chosen = []
    for c, label in enumerate(labels):
        if label not in present:
            chosen.append(0.5)
            continue
        best = np.nanmax(f1[:, c])
        ties = [g for g in range(len(grid)) if math.isclose(f1[g, c], best, rel_tol=1e-12, abs_tol=1e-15)]
        chosen.append(grid[min(ties, key=lambda g: (distance[g], grid[g]))])
    return chosen


def _durations(scores_per_file, frame_seconds, durations) -> dict:
    if durations is None:
        return {filename: len(scores) * frame_seconds for filename, scores in scores_per_file.items()}
    missing = set(scores_per_file) - set(durations)
    if missing:
        raise ValueError(f"durations lack files that have scores: {sorted(missing)[:5]}")
    return durations


def _detect(scores_per_file, frame_seconds, labels, threshold, durations, postprocessing) -> list[dict]:
    """Every file's events at one threshold, as metric rows."""
    if "thresholds" in postprocessing or "duration" in postprocessing:
        raise ValueError("thresholds and durations are set here, not through the post-processing arguments")
    rows = []
    for filename, scores in scores_per_file.items():
        events = frame_events(
            scores, frame_seconds, labels, thresholds=threshold, duration=durations[filename], **postprocessing
        )
        rows += events_to_rows(events, filename)
    return rows
