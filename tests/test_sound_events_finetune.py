"""examples/finetune.py on strong labels (DCASE's TSV layout): frame targets of a training window, a real run of the
frame classifier with the per-frame log-mel baseline beside it, its thresholds chosen on validation and saved in the
config, its test score recomputed independently from the saved model, and the trained window in the saved feature
extractor."""

import json

import numpy as np
import pytest
import torch

from conftest import tiny_config_kwargs

import finetune  # examples/finetune.py (pytest's pythonpath)

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel
from aasp_hf.data.frame_targets import AaspFrameTargetsCollator, frame_targets
from aasp_hf.data.synthetic import write_soundscapes

TINY_128 = tiny_config_kwargs(num_mel_bins=128, num_hidden_layers=1, patch_embedding="spe")


def test_frame_targets_are_the_covered_fraction_of_each_column():
    # columns of 0.16 s from 1.0 s: [1.00, 1.16), [1.16, 1.32), [1.32, 1.48), [1.48, 1.64)
    events = [(1.08, 1.40, 0), (1.20, 1.30, 1), (1.25, 1.35, 1), (5.0, 6.0, 0)]
    targets = frame_targets(events, 1.0, 4, 0.16, 2)
    expected = np.zeros((4, 2))
    expected[:, 0] = [0.08 / 0.16, 1.0, 0.08 / 0.16, 0.0]
    expected[1, 1] = 0.10 / 0.16 + 0.07 / 0.16  # two events of one label overlapping: their sum, capped at 1 ...
    expected[2, 1] = 0.03 / 0.16
    expected = np.minimum(expected, 1.0)  # ... (0.625 + 0.4375 -> 1)
    np.testing.assert_allclose(targets, expected, atol=1e-6)


def test_the_collator_cuts_the_window_its_targets_describe():
    rate, seconds = 16000, 4.0
    audio = np.zeros(int(seconds * rate), dtype=np.float32)
    audio[int(2.0 * rate) : int(2.5 * rate)] = 0.5 * np.random.default_rng(0).standard_normal(rate // 2)  # [2, 2.5) s
    example = {"audio": {"array": audio, "sampling_rate": rate}, "events": [{"onset": 2.0, "offset": 2.5, "label": 0}]}
    extractor = AaspFeatureExtractor()
    collator = AaspFrameTargetsCollator(extractor, clip_seconds=1.0, num_labels=1, split="train", seed=3)
    for _ in range(5):
        state = collator.rng.bit_generator.state
        batch = collator([example])
        replay = np.random.default_rng(0)
        replay.bit_generator.state = state  # the collator's own draw, repeated
        start = int(replay.integers(0, len(audio) - rate + 1)) / rate
        assert batch["labels"].shape == (1, batch["input_values"].shape[1] // 16, 1)
        np.testing.assert_allclose(
            batch["labels"][0].numpy(), frame_targets([(2.0, 2.5, 0)], start, batch["labels"].shape[1], 0.16, 1)
        )
        # the window's loud frames are where its targets are
        loud = batch["input_values"][0, :, :].mean(-1).numpy()[:100] > 0.0
        column_of_frame = np.arange(100) // 16
        targets = batch["labels"][0, :, 0].numpy()
        assert (targets[column_of_frame[loud]] > 0).all()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One real fine-tuning run on synthetic soundscapes in DCASE's layout (a tiny encoder, 40 steps)."""
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("soundscapes")
    reference = write_soundscapes(root, {"train": 10, "validation": 4, "test": 4}, seconds=4.0, seed=1)
    encoder = tmp_path_factory.mktemp("encoder")
    AaspModel(AaspConfig(**TINY_128)).save_pretrained(encoder)
    AaspFeatureExtractor().save_pretrained(encoder)
    output = tmp_path_factory.mktemp("run")
    args = ["--dataset", "sound_events", "--data_root", str(root), "--model_name_or_path", str(encoder)]
    args += ["--output_dir", str(output), "--clip_seconds", "2.0", "--max_steps", "40", "--eval_steps", "40"]
    args += ["--per_device_train_batch_size", "8", "--learning_rate", "3e-3", "--warmup_steps", "4"]
    args += ["--select_on", "validation", "--logging_steps", "10"]
    summary = finetune.main(args)
    return root, reference, output, summary


def test_a_sound_event_run_reports_detection_scores_beside_the_frame_baseline(trained):
    _, _, output, summary = trained
    saved = json.loads((output / "all_results.json").read_text())
    assert saved["metric"] == "event_f1"
    test = saved["sound_events"]
    for key in ("event_f1", "event_f1_micro", "segment_f1", "segment_f1_micro"):
        assert 0.0 <= test[key][0] <= 1.0
    assert saved["test_mean"] == pytest.approx(test["event_f1"][0])
    baseline = saved["baseline"]
    assert baseline["name"].startswith("per-frame log-mel") and 0.0 <= baseline["test_mean"] <= 1.0
    assert saved["baseline_verdict"].split()[0] in ("below", "equal", "above")
    markdown = (output / "results.md").read_text()
    assert "## Sound events" in markdown and "segment_f1" in markdown


def test_the_saved_frame_classifier_keeps_its_thresholds_and_window(trained):
    root, _, output, summary = trained
    config = json.loads((output / "config.json").read_text())
    assert config["architectures"] == ["AaspForAudioFrameClassification"]
    thresholds = config["event_thresholds"]
    assert len(thresholds) == 2 and all(0.0 < t < 1.0 for t in thresholds)
    assert thresholds == summary["runs"][0]["sound_events"]["thresholds"]
    extractor = json.loads((output / "preprocessor_config.json").read_text())
    assert extractor["max_frames"] == 208  # 2-s windows: 201 frames, rounded up to 13 whole patches


def test_the_tagger_writes_events_that_sed_eval_scores_as_the_run_reported(trained, tmp_path):
    """The documented path: `python -m aasp_hf.tag --events` on the test folder with the saved model alone, then sed_eval
    on the events file as written against the dataset's own test.tsv: the run's reported test event F1."""
    import csv

    import sed_eval

    from aasp_hf.cli import tag

    root, _, output, summary = trained
    events_path = tmp_path / "events.tsv"
    code = tag.main(
        [
            "--model",
            str(output),
            "--output",
            str(tmp_path / "tags.csv"),
            "--events",
            str(events_path),
            str(root / "test"),
        ]
    )
    assert code == 0

    def read(path):
        with open(path, newline="") as file:
            rows = list(csv.DictReader(file, delimiter="\t"))
        return [{**r, "onset": float(r["onset"]), "offset": float(r["offset"])} for r in rows if r["event_label"]]

    estimated, reference = read(events_path), read(root / "test.tsv")
    config = json.loads((output / "config.json").read_text())
    labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    metric = sed_eval.sound_event.EventBasedMetrics(event_label_list=labels, t_collar=0.2, percentage_of_length=0.2)
    for path in sorted((root / "test").glob("*.wav")):
        metric.evaluate(
            reference_event_list=[e for e in reference if e["filename"] == path.name],
            estimated_event_list=[e for e in estimated if e["filename"] == path.name],
        )
    class_wise = metric.results_class_wise_metrics()
    # DCASE's scripts score a class the system never outputs as 0 (our default); sed_eval's own mean skips it
    f1 = [class_wise[label]["f_measure"]["f_measure"] for label in labels]
    expected = float(np.mean([0.0 if np.isnan(f) else f for f in f1]))
    assert summary["test_mean"] == pytest.approx(expected, abs=1e-9)
    assert len(estimated) > 0  # the check compares events, not two empty lists
