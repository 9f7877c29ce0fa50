"""aasp_hf.evaluation.baseline, the log-mel reference beside every downstream result: the statistics against numpy
on a known array, the clips and crops the model's collator gives, the probe on an easy task and on shuffled labels
(single- and multi-label), the cap on the clips, the comparison line, and a failure that leaves the model's results.
The scripts' results with the baseline: tests/test_finetune.py and tests/test_linear_eval.py."""

import numpy as np
import pytest

from aasp_hf import AaspFeatureExtractor
from aasp_hf.data.collators import crop_or_pad
from aasp_hf.data.synthetic import LABELS, synthetic_splits
from aasp_hf.utils.errors import UsageError
from aasp_hf.evaluation import baseline
from aasp_hf.evaluation.results import baseline_markdown


def test_statistics_are_mean_std_max_and_step_rms_per_bin_over_real_frames():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 7, 4))  # (B, T, F)
    mask = np.ones((3, 7))
    mask[1, 5:] = 0  # clip 1: 5 real frames
    mask[2, 1:] = 0  # clip 2: 1 real frame (no pair of frames: step RMS 0)
    x[1, 5:] = 1e6  # padding values that must not leak
    got = baseline.log_mel_statistics(x, mask)
    assert got.shape == (3, 16) and got.dtype == np.float32
    for b, frames in enumerate((7, 5, 1)):
        real = x[b, :frames]  # (T_b, F)
        steps = np.diff(real, axis=0)
        expected = np.concatenate(
            [real.mean(0), real.std(0), real.max(0), np.sqrt((steps**2).mean(0)) if frames > 1 else np.zeros(4)]
        )
        np.testing.assert_allclose(got[b], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(baseline.log_mel_statistics(x[:1]), got[:1], rtol=1e-6)  # no mask: all frames real
    with pytest.raises(ValueError, match="at least one real frame"):
        baseline.log_mel_statistics(x, np.zeros((3, 7)))


def test_clip_features_are_the_statistics_of_the_model_s_test_crops():
    """Test clips: the first `clip_seconds` of each clip (padded when shorter), the package's 128-bin log-mel."""
    rows = synthetic_splits(2, seed=3, seconds=0.8)["test"]
    features, labels = baseline.clip_features(rows, 0.5, "test")
    extractor = AaspFeatureExtractor()
    for i, row in enumerate(rows):
        clip = crop_or_pad(row["audio"]["array"], 8000, random_crop=False)
        alone = extractor(clip, sampling_rate=16000, return_tensors="np")
        np.testing.assert_allclose(
            features[i], baseline.log_mel_statistics(alone["input_values"], alone["attention_mask"])[0], atol=1e-4
        )
    assert features.shape == (len(rows), 4 * baseline.N_MELS) and labels.tolist() == [r["label"] for r in rows]


def gaussian_classes(seed, n, num_classes=4, dim=12, shift=3.0):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(0, shift, (num_classes, dim))
    y = rng.integers(0, num_classes, n)
    return (centres[y] + rng.normal(0, 1, (n, dim))).astype(np.float32), y


def test_probe_separates_an_easy_task_and_is_at_chance_on_shuffled_labels():
    train, valid, test = gaussian_classes(0, 400), gaussian_classes(1, 100), gaussian_classes(2, 2000)
    fitted = baseline.fit_probe(train, valid, 4, multi_label=False)
    assert baseline.evaluate(fitted, test, 4, False) > 0.95
    assert len(fitted["valid_scores"]) == len(baseline.C_GRID) and fitted["C"] in baseline.C_GRID
    assert fitted["valid_score"] == max(fitted["valid_scores"])
    shuffled = np.random.default_rng(5).permutation(train[1])
    chance = baseline.fit_probe((train[0], shuffled), None, 4, multi_label=False)  # C on a held-out 10 % of train
    assert "held out" in chance["c_chosen_on"]
    assert abs(baseline.evaluate(chance, test, 4, False) - 0.25) < 0.05  # 2,000 test clips: chance ± 2.2 std


def test_multi_label_probe_is_one_vs_rest_scored_by_map():
    rng = np.random.default_rng(0)

    def split(n):
        y = (rng.random((n, 5)) < 0.3).astype(np.float32)
        return (y.repeat(2, axis=1) + rng.normal(0, 0.4, (n, 10))).astype(np.float32), y

    train, valid, test = split(300), split(60), split(1000)
    fitted = baseline.fit_probe(train, valid, 5, multi_label=True)
    assert baseline.evaluate(fitted, test, 5, True) > 0.95
    shuffled = (train[0], train[1][np.random.default_rng(1).permutation(len(train[1]))])
    chance = baseline.evaluate(baseline.fit_probe(shuffled, valid, 5, multi_label=True), test, 5, True)
    assert abs(chance - test[1].mean()) < 0.06  # AP of a random ranking = the positives' share (0.3)


def test_a_class_missing_from_train_scores_minus_infinity():
    x, y = gaussian_classes(0, 200, num_classes=3)
    fitted = baseline.fit_probe((x[y != 1], y[y != 1]), None, 3, multi_label=False)
    scores = baseline.probe_scores(fitted["model"], x, 3, False)
    assert scores.shape == (200, 3) and np.all(scores[:, 1] == -np.inf) and np.isfinite(scores[:, [0, 2]]).all()


def test_baseline_on_parts_with_a_cap_and_the_comparison_line():
    parts = {"synthetic": synthetic_splits(4, seed=0)}  # 20 train, 10 validation, 10 test clips of 1.25 s
    record = baseline.log_mel_baseline(parts, 1.0, False, len(LABELS), max_clips=8, log=lambda line: None)
    clips = record["parts"]["synthetic"]["clips"]
    assert clips == {
        "train": {"used": 8, "of": 20},
        "validation": {"used": 8, "of": 10},
        "test": {"used": 8, "of": 10},
    } and record["capped"] == ["test", "train", "validation"]
    assert (
        baseline.capped_indices(20, 8) == baseline.capped_indices(20, 8)
        and baseline.capped_indices(5, 8) == [0, 1, 2, 3, 4]
        and baseline.capped_indices(20, 0) == list(range(20))
    )
    assert record["test_mean"] == record["parts"]["synthetic"]["test_score"]
    assert record["settings"]["max_clips_per_split"] == 8 and record["settings"]["crop_seeds"]["test"] == 2

    summary = {"metric": "accuracy", "test_mean": record["test_mean"] - 0.1}
    below = baseline.attach(summary, record)
    assert below["below_baseline"].startswith(
        f"below the log-mel baseline: {100 * summary['test_mean']:.1f} vs {100 * record['test_mean']:.1f} %"
    )
    assert baseline.ANCHOR in below["below_baseline"]
    lines = "\n".join(baseline_markdown(below))
    assert below["below_baseline"] in lines and "| synthetic |" in lines and "8 of 20" in lines
    assert below["baseline_verdict"] == below["below_baseline"]
    for offset, verdict in ((0.0, "equal to"), (1e-12, "equal to"), (0.1, "above")):  # within 1e-9 is equal
        other = baseline.attach({"metric": "accuracy", "test_mean": record["test_mean"] + offset}, record)
        assert (
            other["baseline_verdict"].startswith(f"{verdict} the log-mel baseline: ") and "below_baseline" not in other
        )
        markdown = "\n".join(baseline_markdown(other))
        assert f"**The model is {other['baseline_verdict']}.**" in markdown and "below" not in markdown.lower()
    assert baseline.attach(summary, None) is summary


def test_a_failing_baseline_is_recorded_and_never_raises():
    bad = [{"audio": {"bytes": b"not audio", "path": "x.wav"}, "label": 0}] * 3
    record = baseline.safe_log_mel_baseline("logmel", {"p": {"train": bad, "test": bad}}, 1.0, False, 2, 10, 0)
    assert record["name"] == baseline.NAME and "could be decoded" in record["error"]
    summary = baseline.attach({"metric": "accuracy", "test_mean": 0.5}, record)
    assert "below_baseline" not in summary and "Not computed" in "\n".join(baseline_markdown(summary))
    assert baseline.safe_log_mel_baseline("none", {}, 1.0, False, 2, 10, 0) is None
    with pytest.raises(UsageError, match="--baseline 'lgmel'"):
        baseline.check_choice("lgmel", 10)
    with pytest.raises(UsageError, match="--baseline_max_clips -1"):
        baseline.check_choice("logmel", -1)


def test_the_scripts_refuse_an_unknown_baseline_in_one_line():
    import finetune
    import linear_eval

    for script in (finetune, linear_eval):
        with pytest.raises(UsageError, match="--baseline 'logmell': use one of logmel, none"):
            script.parse_args(["--model_name_or_path", "x", "--baseline", "logmell"])
        args = script.parse_args(["--model_name_or_path", "x", "--baseline", "none", "--baseline_max_clips", "7"])
        assert (args.baseline, args.baseline_max_clips) == ("none", 7)
    assert finetune.parse_args(["--model_name_or_path", "x"]).baseline_max_clips == baseline.DEFAULT_MAX_CLIPS


@pytest.mark.parametrize(
    "seeds, scores, group_by, baseline_score, warned",
    [
        ([0], [0.333], "^([a-z0-9-]+)_", 0.735, True),  # one seed: the baseline 40 points ahead
        ([0], [0.70], "^([a-z0-9-]+)_", 0.72, False),  # one seed, 2 points: within the stated 3
        ([0], [0.333], None, 0.735, False),  # sources not held out: the sentence is about unseen sources
        ([0, 1, 2], [0.60, 0.62, 0.64], "speaker", 0.65, True),  # 3 points ahead, seeds' std 2
        ([0, 1, 2], [0.55, 0.62, 0.69], "speaker", 0.65, False),  # 3 points ahead, seeds' std 7
    ],
)
def test_the_baseline_winning_on_unseen_sources_is_one_sentence_in_the_summary_and_results_md(
    seeds, scores, group_by, baseline_score, warned
):
    mean, std = float(np.mean(scores)), float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0
    summary = {
        "task": "audiofolder",
        "metric": "accuracy",
        "seeds": seeds,
        "test_mean": mean,
        "test_std": std,
        "arguments": {"group_by": group_by},
    }
    block = {"name": baseline.NAME, "test_mean": baseline_score, "error": "not computed here"}
    attached = baseline.attach(summary, block)
    sentence = attached.get("unseen_sources_warning")
    assert (sentence is not None) == warned
    if warned:
        lead = 100 * (baseline_score - mean)
        assert f"beats the model by {lead:.1f} points of accuracy" in sentence
        assert "use the baseline's predictions, start from a pre-trained encoder, or add sources" in sentence
        assert f"**{sentence}**" in "\n".join(baseline_markdown(attached))


def test_the_sentence_is_the_summary_s_last_line_and_goes_into_every_model_card(tmp_path, monkeypatch):
    from aasp_hf.training.finetuning_loop import warn_in_model_cards

    summary = {"task": "t", "metric": "accuracy", "seeds": [0], "test_mean": 0.3, "test_std": 0.0}
    summary["arguments"] = {"group_by": "speaker"}
    lines = []
    parts = {"official": {"train": [], "test": []}}
    block = {"name": baseline.NAME, "test_mean": 0.7, "seconds": 0.1}
    monkeypatch.setattr(baseline, "safe_log_mel_baseline", lambda *args, **kwargs: block)  # its fit: tested above
    result = baseline.with_baseline(summary, lambda s: None, "logmel", parts, 1.0, False, 2, 0, 0, lines.append)
    assert lines[-1] == result["unseen_sources_warning"]
    for folder in (tmp_path, tmp_path / "official_seed0", tmp_path / "official_seed1"):
        folder.mkdir(exist_ok=True)
        (folder / "README.md").write_text("# AaSP audio classifier\n\nscores\n")
    warn_in_model_cards(tmp_path, result["unseen_sources_warning"])
    warn_in_model_cards(tmp_path, result["unseen_sources_warning"])  # a rerun adds nothing twice
    for folder in (tmp_path, tmp_path / "official_seed0", tmp_path / "official_seed1"):
        card = (folder / "README.md").read_text()
        assert card.count(result["unseen_sources_warning"]) == 1 and "## On sources training never heard" in card
