"""Sound event detection: `frame_events` by hand and its median filter against scipy; the event-based and
segment-based scores against sed_eval 0.2.1, PSDS against psds_eval 0.5.3, both run on the same random event lists."""

import math

import numpy as np
import pandas as pd
import psds_eval
import pytest
import sed_eval
from scipy.ndimage import median_filter

from aasp_hf.evaluation.sound_events import (
    choose_thresholds,
    event_based_scores,
    events_to_rows,
    psds,
    psds_from_scores,
    segment_based_scores,
)
from aasp_hf.pipeline_aasp import frame_events, median_filter_frames


LABELS = ["alarm", "bird", "car", "dog"]
FRAME = 0.16  # seconds per output frame (one time-patch column)


# ----------------------------------------------------------------------------------------------------------------------
# frame scores -> events
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 3, 5, 9, 15])
def test_median_filter_matches_scipy_nearest(length):
    rng = np.random.default_rng(length)
    for frames in (1, 4, 7, 40):  # 4 and 7: windows longer than the clip, all edge
        scores = rng.random((frames, 3))
        expected = median_filter(scores, size=(length, 1), mode="nearest")
        np.testing.assert_array_equal(median_filter_frames(scores, length), expected)


def test_median_of_scores_then_threshold_equals_threshold_then_median():
    """frame_events filters the scores; DCASE 2021's baseline filtered the thresholded decisions: the same frames."""
    rng = np.random.default_rng(0)
    scores = rng.random((200, 4))
    for length in (3, 7):
        for threshold in (0.3, 0.5, scores[17, 2]):  # the last one is a score exactly at the threshold
            decisions = median_filter((scores >= threshold).astype(np.int8), size=(length, 1), mode="nearest")
            np.testing.assert_array_equal(median_filter_frames(scores, length) >= threshold, decisions.astype(bool))


def test_frame_events_hand_worked():
    speech = [0.1, 0.6, 0.7, 0.2, 0.8, 0.5, 0.1, 0.1, 0.1, 0.9, 0.95, 0.3]
    dog = [0.0] * 8 + [0.7] * 4
    # speech >= 0.5: frames 1-2, 4-5 (0.5 counts: >=) and 9-10. The gap of one frame (0.16 s <= merge_gap) joins the
    # first two into frames 1-5 = [0.16, 0.96) s; frames 9-10 (0.32 s) are shorter than min_duration and dropped.
    # dog >= 0.6: frames 8-11 = [1.28, 1.92) s, its offset clipped to the clip's 1.85 s.
    events = frame_events(
        np.array([speech, dog]).T,
        FRAME,
        ["speech", "dog"],
        thresholds=[0.5, 0.6],
        merge_gap=0.16,
        min_duration=0.4,
        duration=1.85,
    )
    expected = [
        {"onset": 0.16, "offset": 0.96, "label": "speech", "score": 0.8},
        {"onset": 1.28, "offset": 1.85, "label": "dog", "score": 0.7},
    ]
    assert events == [pytest.approx(event) for event in expected]
    assert all(isinstance(event[key], float) for event in events for key in ("onset", "offset", "score"))

    # without the merge, the minimum duration and the clip: every run, sorted by onset then label
    events = frame_events(np.array([speech, dog]).T, FRAME, ["speech", "dog"], thresholds=[0.5, 0.6])
    runs = [(e["label"], round(e["onset"] / FRAME), round(e["offset"] / FRAME)) for e in events]
    assert runs == [("speech", 1, 3), ("speech", 4, 6), ("dog", 8, 12), ("speech", 9, 11)]


def test_frame_events_median_filter_removes_a_spike_and_fills_a_dip():
    scores = np.array([[0.1, 0.9, 0.1, 0.1, 0.8, 0.8, 0.2, 0.8, 0.8, 0.1]]).T
    assert len(frame_events(scores, 0.5, ["x"])) == 3
    (event,) = frame_events(scores, 0.5, ["x"], median_filter=3)  # filtered: 0.1 x4, 0.8 x5, 0.1
    assert event == {"onset": 2.0, "offset": 4.5, "label": "x", "score": 0.8}


def test_frame_events_merge_gap_is_exact_despite_rounding():
    scores = np.zeros((12, 1))
    scores[[0, 1, 5, 6]] = 1.0  # runs [0, 2) and [5, 7): a gap of 3 frames, 3 * 0.16 = 0.48000000000000004 s
    assert len(frame_events(scores, FRAME, ["x"], merge_gap=0.48)) == 1
    assert len(frame_events(scores, FRAME, ["x"], merge_gap=0.47)) == 2
    assert len(frame_events(scores, FRAME, ["x"], min_duration=0.32)) == 2  # 2 frames = 0.32 s is not shorter


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"scores": np.zeros((5, 3))}, "labels"),
        ({"thresholds": [0.5, 0.5, 0.5]}, "one per label"),
        ({"scores": np.full((5, 2), np.nan)}, "NaN"),
        ({"scores": np.full((5, 2), 2.0)}, "sigmoid"),
        ({"median_filter": 4}, "odd"),
        ({"median_filter": 0}, "odd"),
        ({"min_duration": -0.1}, "min_duration"),
        ({"merge_gap": -1.0}, "merge_gap"),
        ({"duration": -2.0}, "duration"),
        ({"frame_seconds": 0.0}, "frame_seconds"),
    ],
)
def test_frame_events_refuses_wrong_arguments(arguments, message):
    call = {"scores": np.full((5, 2), 0.7), "frame_seconds": FRAME, "labels": ["a", "b"], **arguments}
    with pytest.raises(ValueError, match=message):
        frame_events(**call)


def test_events_to_rows():
    events = frame_events(np.array([[0.9, 0.9, 0.1]]).T, FRAME, ["dog"])
    assert events_to_rows(events, "a.wav") == [
        {"filename": "a.wav", "onset": 0.0, "offset": pytest.approx(0.32), "event_label": "dog"}
    ]


# ----------------------------------------------------------------------------------------------------------------------
# event-based and segment-based scores against sed_eval
# ----------------------------------------------------------------------------------------------------------------------


def random_event_lists(rng, step=None, num_files=6):
    """Several files with overlapping events of several labels; file0 has no reference events, file1 no estimated
    ones; some events of one label touch; the estimates are jittered copies (some relabelled: substitutions) and
    random insertions, in a shuffled order. `step`: times on a grid, so that collars are met exactly."""

    def event(name, onset, offset, label):
        if step is not None:
            onset, offset = round(onset / step) * step, max(round(offset / step), round(onset / step) + 1) * step
        return {"filename": name, "onset": onset, "offset": offset, "event_label": label}

    reference, estimated = [], []
    for f in range(num_files):
        name = f"file{f}.wav"
        events = []
        for _ in range(0 if f == 0 else rng.integers(1, 12)):
            onset = rng.uniform(0, 9)
            events.append(event(name, onset, onset + rng.uniform(0.05, 3.0), str(rng.choice(LABELS))))
        if events and rng.random() < 0.5:
            first = events[0]
            events.append({**first, "onset": first["offset"], "offset": first["offset"] + 0.5})
        reference += events
        if f == 1:
            continue
        for copied in events:
            if rng.random() < 0.75:
                onset = max(0.0, copied["onset"] + rng.normal(0, 0.2))
                offset = max(onset + 0.01, copied["offset"] + rng.normal(0, 0.3))
                label = copied["event_label"] if rng.random() < 0.8 else str(rng.choice(LABELS))
                estimated.append(event(name, onset, offset, label))
        for _ in range(rng.integers(0, 4)):
            onset = rng.uniform(0, 10)
            estimated.append(event(name, onset, onset + rng.uniform(0.05, 2), str(rng.choice(LABELS))))
    return reference, [estimated[i] for i in rng.permutation(len(estimated))]


def sed_eval_run(metric, reference, estimated, filenames):
    """DCASE's evaluation scripts: one `evaluate` per file."""
    for name in filenames:
        metric.evaluate(
            [row for row in reference if row["filename"] == name], [row for row in estimated if row["filename"] == name]
        )
    return metric


def sed_eval_pairs(ours, metric):
    """(ours, sed_eval's) for every score both report."""
    overall, class_wise = metric.results_overall_metrics(), metric.results_class_wise_metrics()
    average = metric.results_class_wise_average_metrics()
    pairs = [(ours[key], overall["f_measure"][key]) for key in ("f_measure", "precision", "recall")]
    pairs += [(ours[key], overall["error_rate"][key]) for key in overall["error_rate"]]
    pairs += [(ours[f"class_wise_{key}"], average["f_measure"][key]) for key in ("f_measure", "precision", "recall")]
    pairs.append((ours["class_wise_error_rate"], average["error_rate"]["error_rate"]))
    for label, theirs in class_wise.items():
        pairs += [(ours["class_wise"][label][key], theirs["f_measure"][key]) for key in theirs["f_measure"]]
        pairs += [(ours["class_wise"][label][key], theirs["error_rate"][key]) for key in theirs["error_rate"]]
        pairs += [(ours["class_wise"][label]["n_ref"], theirs["count"]["Nref"])]
    return pairs


def assert_same(pairs):
    """Equal to 1e-9 relative to max(1, |value|) (a class without reference events has an error rate of ~1e15), NaN
    where sed_eval's is NaN. Returns the largest difference."""
    worst = 0.0
    for ours, theirs in pairs:
        assert math.isnan(ours) == math.isnan(theirs), (ours, theirs)
        if not math.isnan(theirs):
            difference = abs(ours - theirs) / max(1.0, abs(theirs))
            assert difference <= 1e-9, (ours, theirs)
            worst = max(worst, difference)
    return worst


def test_event_and_segment_based_scores_match_sed_eval():
    """150 random lists: collars met exactly (times on a grid) or not, onset/offset-only variants, both empty-output
    rules. A maximum matching other than sed_eval's own leaves other events unmatched and changes the substitutions
    (and so the error rate) of some of these lists, so the pairs chosen are tested too, not only their number."""
    worst = 0.0
    for seed in range(150):
        rng = np.random.default_rng(seed)
        reference, estimated = random_event_lists(rng, step=[None, FRAME, 0.1][seed % 3])
        filenames = sorted({row["filename"] for row in reference + estimated})
        labels = sorted({row["event_label"] for row in reference + estimated})
        handling = [None, "zero_score"][seed % 2]
        options = {
            "t_collar": 0.2,
            "percentage_of_length": [0.2, 0.5, 0.0][seed % 3],
            "evaluate_onset": seed % 4 != 1,
            "evaluate_offset": seed % 4 != 2,
        }
        ours = event_based_scores(reference, estimated, empty_system_output_handling=handling, **options)
        metric = sed_eval.sound_event.EventBasedMetrics(labels, empty_system_output_handling=handling, **options)
        worst = max(worst, assert_same(sed_eval_pairs(ours, sed_eval_run(metric, reference, estimated, filenames))))

        resolution = [1.0, FRAME, 0.5][seed % 3]
        ours = segment_based_scores(reference, estimated, resolution, empty_system_output_handling=handling)
        metric = sed_eval.sound_event.SegmentBasedMetrics(labels, time_resolution=resolution)
        metric.empty_system_output_handling = handling  # its constructor does not take it; its scores read it
        worst = max(worst, assert_same(sed_eval_pairs(ours, sed_eval_run(metric, reference, estimated, filenames))))
    assert worst < 1e-12


@pytest.mark.parametrize("handling", [None, "zero_score"])
def test_empty_estimate_matches_sed_eval(handling):
    reference, _ = random_event_lists(np.random.default_rng(7))
    filenames = sorted({row["filename"] for row in reference})
    labels = sorted({row["event_label"] for row in reference})
    for ours, metric in (
        (
            event_based_scores(reference, [], filenames=filenames, empty_system_output_handling=handling),
            sed_eval.sound_event.EventBasedMetrics(
                labels, percentage_of_length=0.2, empty_system_output_handling=handling
            ),
        ),
        (
            segment_based_scores(reference, [], filenames=filenames, empty_system_output_handling=handling),
            sed_eval.sound_event.SegmentBasedMetrics(labels),
        ),
    ):
        metric.empty_system_output_handling = handling
        assert_same(sed_eval_pairs(ours, sed_eval_run(metric, reference, [], filenames)))
        assert ours["error_rate"] == pytest.approx(1.0) and ours["recall"] == 0.0
        assert math.isnan(ours["precision"]) if handling is None else ours["f_measure"] == 0.0


def test_event_based_hand_worked():
    """a.wav: a dog found within the collars; the second dog's offset is 0.5 s late, beyond max(0.2, 0.2 x 1 s): a
    deletion and an insertion, not a substitution (that needs the timing right). b.wav: a cat estimated as a dog with
    the right timing: a substitution. c.wav has no reference events: its estimate is an insertion."""
    reference = [
        {"filename": "a.wav", "onset": 1.0, "offset": 3.0, "event_label": "dog"},
        {"filename": "a.wav", "onset": 5.0, "offset": 6.0, "event_label": "dog"},
        {"filename": "b.wav", "onset": 0.0, "offset": 1.0, "event_label": "cat"},
    ]
    estimated = [
        {"filename": "a.wav", "onset": 1.1, "offset": 3.3, "event_label": "dog"},  # 0.3 <= 0.2 x 2 s: correct
        {"filename": "a.wav", "onset": 5.0, "offset": 6.5, "event_label": "dog"},
        {"filename": "b.wav", "onset": 0.1, "offset": 1.1, "event_label": "dog"},
        {"filename": "c.wav", "onset": 2.0, "offset": 3.0, "event_label": "cat"},
    ]
    scores = event_based_scores(reference, estimated)
    assert scores["n_correct"] == 1 and scores["precision"] == 0.25 and scores["recall"] == pytest.approx(1 / 3)
    # S = 1, D = 3 - 1 - 1 = 1, I = 4 - 1 - 1 = 2: ER = 4 / 3
    assert scores["error_rate"] == pytest.approx(4 / 3) and scores["substitution_rate"] == pytest.approx(1 / 3)
    assert scores["class_wise"]["dog"]["f_measure"] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert scores["class_wise"]["cat"]["f_measure"] == 0.0  # no cat found: precision 0/1, recall 0/1
    assert scores["class_wise_f_measure"] == pytest.approx(0.2)


def test_metrics_refuse_wrong_events():
    row = {"filename": "a.wav", "onset": 1.0, "offset": 2.0, "event_label": "dog"}
    with pytest.raises(ValueError, match="labels outside"):
        event_based_scores([row], [], labels=["cat"])
    with pytest.raises(ValueError, match="onset <= offset"):
        segment_based_scores([{**row, "offset": 0.5}], [])
    with pytest.raises(ValueError, match="event_label"):
        event_based_scores([{"filename": "a.wav", "onset": 1.0, "offset": 2.0}], [])


# ----------------------------------------------------------------------------------------------------------------------
# PSDS against psds_eval
# ----------------------------------------------------------------------------------------------------------------------


class PSDSEvalOnCurrentLibraries(psds_eval.PSDSEval):
    """psds_eval 0.5.3 as released, but for two lines that today's pandas and numpy refuse: `step_curve`'s
    `fillna(method="ffill")` (removed in pandas 3.0; `.ffill()` is the same fill) and `_auc`'s `int()` of a (1, 1)
    array (refused by numpy 2.4; its one element is taken). Everything that counts and scores is its own code."""

    @staticmethod
    def step_curve(x, xp, yp):
        roc = pd.DataFrame({"x": xp, "y": yp}).groupby("x").agg("max").reset_index().sort_values(by="x")
        roc.y = roc.y.cummax()
        return pd.merge(pd.Series(x, name="x"), roc, how="outer", on="x").ffill().fillna(value=0).y.values

    @staticmethod
    def _auc(x, y, max_x=None, decreasing_y=False):
        x, y = np.array(x), np.array(y)
        if max_x not in x:
            x = np.sort(np.concatenate([x, [max_x]]))
            max_i = int(np.argwhere(x == max_x)[0, 0])
            y = np.concatenate([y[:max_i], [y[max_i - 1]], y[max_i:]])
        valid = x <= max_x
        return np.sum(np.diff(x[valid]) * np.array(y[valid])[:-1])


def random_detection_task(rng, num_files=5, frames=60, labels=("a", "b", "c")):
    """Reference events (not overlapping within a class, off the frame grid) in all but file f0, and frame scores that
    follow them with noise; durations a little short of frames x FRAME (the last offsets get clipped)."""
    reference, scores, durations = [], {}, {}
    for f in range(num_files):
        name = f"f{f}"
        active = np.zeros((frames, len(labels)))
        for c, label in enumerate(labels):
            t = int(rng.integers(0, 8))
            while t < frames:
                length = int(rng.integers(2, 15))
                if f and rng.random() < 0.5:
                    active[t : t + length, c] = 1
                    onset = t * FRAME + (rng.uniform(-0.05, 0.05) if t else 0.0)
                    offset = min(t + length, frames) * FRAME - rng.uniform(0, 0.05)
                    reference.append({"filename": name, "onset": onset, "offset": offset, "event_label": label})
                t += length + int(rng.integers(1, 10))
        noisy = 0.6 * active + rng.uniform(0, 0.5, active.shape) + 0.15 * rng.normal(size=active.shape)
        scores[name] = np.clip(noisy, 0.0, 1.0)
        durations[name] = frames * FRAME - rng.uniform(0, 0.1)
    return reference, scores, durations, list(labels)


def psds_eval_score(reference, operating_points, durations, dtc, gtc, cttc, alpha_ct, alpha_st, max_efpr):
    evaluation = PSDSEvalOnCurrentLibraries(
        dtc,
        gtc,
        cttc,
        ground_truth=pd.DataFrame(reference),
        metadata=pd.DataFrame({"filename": list(durations), "duration": list(durations.values())}),
    )
    for i, rows in enumerate(operating_points):
        detections = pd.DataFrame(rows, columns=["filename", "onset", "offset", "event_label"])
        evaluation.add_operating_point(detections, info={"operating_point": i})
    return float(evaluation.psds(alpha_ct, alpha_st, max_efpr).value)


SCENARIO_1 = {"dtc": 0.7, "gtc": 0.7, "cttc": 0.3, "alpha_ct": 0.0, "alpha_st": 1.0, "max_efpr": 100.0}
SCENARIO_2 = {"dtc": 0.1, "gtc": 0.1, "cttc": 0.3, "alpha_ct": 0.5, "alpha_st": 1.0, "max_efpr": 100.0}
# 48 s of audio: one false positive is 75 per hour, so within 100 per hour no cross-trigger weighs; up to 2,000 they do
WIDE = {"dtc": 0.5, "gtc": 0.5, "cttc": 0.3, "alpha_ct": 1.0, "alpha_st": 0.5, "max_efpr": 2000.0}


@pytest.mark.parametrize("seed, criteria", [(0, SCENARIO_1), (1, SCENARIO_2), (2, WIDE)])
def test_psds_matches_psds_eval(seed, criteria):
    """DCASE 2021 task 4's two scenarios, and one where cross-triggers count, on operating points made by
    frame_events (one of them empty)."""
    rng = np.random.default_rng(seed)
    reference, scores, durations, labels = random_detection_task(rng)
    operating_points = [[]]
    for threshold in np.linspace(0.1, 0.9, 8):
        rows = []
        for name, file_scores in scores.items():
            events = frame_events(file_scores, FRAME, labels, threshold, median_filter=3, duration=durations[name])
            rows += events_to_rows(events, name)
        operating_points.append(rows)
    theirs = psds_eval_score(reference, operating_points, durations, **criteria)
    ours = psds(
        reference,
        operating_points,
        durations,
        dtc_threshold=criteria["dtc"],
        gtc_threshold=criteria["gtc"],
        cttc_threshold=criteria["cttc"],
        alpha_ct=criteria["alpha_ct"],
        alpha_st=criteria["alpha_st"],
        max_efpr=criteria["max_efpr"],
    )
    assert 0.05 < theirs < 0.95  # neither trivial end
    assert ours == pytest.approx(theirs, abs=1e-9)
    if criteria is WIDE:  # the cross-triggers weigh in: without them the score differs
        without = psds(
            reference, operating_points, durations, 0.5, 0.5, 0.3, alpha_ct=0.0, alpha_st=0.5, max_efpr=2000.0
        )
        assert without - ours > 1e-3


def test_psds_of_a_perfect_detector_is_one_and_refuses_overlaps():
    scores = {"x": np.zeros((50, 2)), "y": np.zeros((30, 2))}
    scores["x"][10:20, 0] = scores["x"][15:40, 1] = scores["y"][0:5, 1] = 1.0
    reference = [
        {"filename": "x", "onset": 10 * FRAME, "offset": 20 * FRAME, "event_label": "a"},
        {"filename": "x", "onset": 15 * FRAME, "offset": 40 * FRAME, "event_label": "b"},
        {"filename": "y", "onset": 0.0, "offset": 5 * FRAME, "event_label": "b"},
    ]
    assert psds_from_scores(scores, reference, FRAME, ["a", "b"]) == pytest.approx(1.0, abs=1e-12)
    overlapping = [*reference, {"filename": "x", "onset": 1.0, "offset": 2.0, "event_label": "a"}]
    with pytest.raises(ValueError, match="overlap"):
        psds(overlapping, [[]], {"x": 8.0, "y": 4.8})


# ----------------------------------------------------------------------------------------------------------------------
# threshold choice
# ----------------------------------------------------------------------------------------------------------------------


def test_choose_thresholds_by_hand():
    """alarm: an event scored 0.9 and a false bump of 0.58, so F1 = 1 for thresholds in (0.58, 0.9], nearest 0.5: 0.6.
    bird: no reference event: 0.5. car: an event scored 0.32 and nothing else: F1 = 1 up to 0.32, nearest 0.5: 0.3."""
    scores = np.zeros((50, 3))
    scores[10:20, 0], scores[30:34, 0] = 0.9, 0.58
    scores[:, 1] = 0.7
    scores[5:15, 2] = 0.32
    reference = [
        {"filename": "v.wav", "onset": 10 * FRAME, "offset": 20 * FRAME, "event_label": "alarm"},
        {"filename": "v.wav", "onset": 5 * FRAME, "offset": 15 * FRAME, "event_label": "car"},
        {"filename": "other.wav", "onset": 0.0, "offset": 1.0, "event_label": "bird"},  # not a scored file: ignored
    ]
    chosen = choose_thresholds({"v.wav": scores}, reference, FRAME, ["alarm", "bird", "car"])
    assert chosen == [0.6, 0.5, 0.3]
    # a false bump on a second file that only 0.8 and above remove
    second = np.zeros((20, 3))
    second[2:6, 0] = 0.75
    chosen = choose_thresholds({"v.wav": scores, "w.wav": second}, reference, FRAME, ["alarm", "bird", "car"])
    assert chosen == [0.8, 0.5, 0.3]
