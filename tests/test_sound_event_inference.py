"""Sound events from a frame classifier: `pipeline("sound-event-detection")` against `frame_events` applied to direct
model calls on the same windows (non-overlapping, and overlapping with the frame scores averaged), the checkpoint's own
pipeline as remote code, and `python -m aasp_hf.tag` (its events file read back as a DCASE event list, its rows) against
the pipeline. A tiny random frame classifier whose head bias makes one label always active, one never, and leaves the
third to the audio (its threshold, saved in the config, the median of its scores)."""

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sed_eval
import soundfile as sf
import torch
from transformers import pipeline

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioFrameClassification
from aasp_hf.pipeline_aasp import (
    AaspSoundEventDetectionPipeline,
    frame_events,
    iter_windows,
    register_sound_event_detection,
    trained_window_samples,
)
from conftest import run_without_aasp_hf, tiny_config_kwargs
from test_long_audio import RATE, noisy_tones

ROOT = Path(__file__).resolve().parents[1]
LABELS = ["speech", "dog", "alarm"]
FRAME = 2560  # samples per output frame: 16 spectrogram frames of 160 samples, 0.16 s
EVENT_SETTINGS = {"event_median_filter": 3, "event_merge_gap": 0.16, "event_min_duration": 0.3}


def direct_frame_scores(model, extractor, audio, starts_and_lengths):
    """An oracle: each window featurised and scored alone, its real frames that start before its end placed at
    window start / FRAME + k, overlapping scores averaged (float64)."""
    total = len(audio)
    sums, counts = np.zeros((math.ceil(total / FRAME), len(LABELS))), np.zeros(math.ceil(total / FRAME))
    for start, length in starts_and_lengths:
        features = extractor(audio[start : start + length], sampling_rate=RATE, return_tensors="pt", truncation=False)
        with torch.no_grad():
            output = model(**features)
        scores = output.logits[0].sigmoid().double().numpy()  # (T', labels)
        for k in range(math.ceil(length / FRAME)):
            if output.frame_mask[0, k]:
                sums[start // FRAME + k] += scores[k]
                counts[start // FRAME + k] += 1
    assert counts.all()
    return sums / counts[:, None]


def assert_same_events(got, expected):
    """Event lists equal up to float32 rounding of times and scores."""
    assert [e["label"] for e in got] == [e["label"] for e in expected]
    for name in ("onset", "offset", "score"):
        assert [e[name] for e in got] == pytest.approx([e[name] for e in expected], abs=1e-5)


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """The frame classifier (trained length 64 spectrogram frames: windows of 3 output frames, 0.48 s), saved with
    its extractor and event settings."""
    torch.manual_seed(0)
    config = AaspConfig(
        **tiny_config_kwargs(num_mel_bins=128, sblu_hidden_size=16, sblu_output_size=64, initializer_range=0.5),
        num_labels=3,
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
        problem_type="multi_label_classification",
        **EVENT_SETTINGS,
    )
    model = AaspForAudioFrameClassification(config).eval()
    with torch.no_grad():
        model.classifier.dense.bias.copy_(torch.tensor([30.0, 0.0, -30.0]))  # speech always, alarm never, dog: audio
    extractor = AaspFeatureExtractor()
    audio = noisy_tones(2.4, seed=7)
    dog = direct_frame_scores(model, extractor, audio, [(s, 7680) for s in range(0, len(audio), 7680)])[:, 1]
    middle = np.sort(dog)[len(dog) // 2 - 1 : len(dog) // 2 + 1].mean()  # between two scores: no frame at it
    model.config.event_thresholds = [0.5, float(middle), 0.5]
    folder = tmp_path_factory.mktemp("detector")
    model.save_pretrained(folder)
    extractor.save_pretrained(folder)
    return {"folder": folder, "model": model, "extractor": extractor, "audio": audio}


def test_the_pipeline_is_frame_events_of_the_window_scores_joined(detector):
    """2.4 s = 5 whole windows of 0.48 s (no overlap): the pipeline's frame scores are the windows' frames side by side,
    and its events `frame_events` of them with the config's thresholds, median filter, gap and minimum duration: the
    always-active label is one event over the whole clip, the never-active one none."""
    assert register_sound_event_detection()  # `import aasp_hf` registered the task; asking again changes nothing
    detect = pipeline("sound-event-detection", model=str(detector["folder"]))
    assert isinstance(detect, AaspSoundEventDetectionPipeline)
    model, extractor, audio = detector["model"], detector["extractor"], detector["audio"]
    window = trained_window_samples(extractor, model.config)  # 10080 samples: 64 spectrogram frames
    assert detect.window_lengths() == (3 * FRAME, 3 * FRAME) and window // FRAME == 3

    result = detect(audio, return_frame_scores=True)
    expected = direct_frame_scores(model, extractor, audio, [(s, 3 * FRAME) for s in range(0, len(audio), 3 * FRAME)])
    assert result["frame_seconds"] == pytest.approx(0.16) and result["labels"] == LABELS
    np.testing.assert_allclose(result["frame_scores"], expected, atol=1e-5)
    events = frame_events(expected, 0.16, LABELS, model.config.event_thresholds, 3, 0.3, 0.16, duration=2.4)
    assert_same_events(result["events"], events)
    assert_same_events(detect(audio), events)
    assert [(e["onset"], e["offset"]) for e in events if e["label"] == "speech"] == [pytest.approx((0.0, 2.4))]
    assert not [e for e in events if e["label"] == "alarm"]
    assert [e for e in events if e["label"] == "dog"]  # the median threshold leaves some frames, not all
    assert [e["onset"] for e in events] == sorted(e["onset"] for e in events)
    # the call overrides the saved settings: no median filter, no minimum: more, shorter events
    raw = detect(audio, median_filter=1, min_duration=0.0, merge_gap=0.0)
    assert_same_events(raw, frame_events(expected, 0.16, LABELS, model.config.event_thresholds, duration=2.4))
    assert len(raw) > len(events)


def test_overlapping_windows_average_the_frame_scores_batched_or_not(detector):
    """Windows every frame (0.16 s) over a 2.5-s clip, the last ending at the clip's end on the frame grid: a frame's
    score is the mean of the windows that cover it; the 16th frame, past 2.4 s, is clipped to 2.5 s."""
    detect = pipeline("sound-event-detection", model=str(detector["folder"]))
    audio = noisy_tones(2.5, seed=3)
    starts = [start for start, _ in iter_windows(iter([audio]), 3 * FRAME, FRAME, align=FRAME)]
    assert starts == list(range(0, 14 * FRAME, FRAME)) and len(audio) - starts[-1] == 40000 - 13 * FRAME
    windows = [(start, min(3 * FRAME, len(audio) - start)) for start in starts]
    expected = direct_frame_scores(detector["model"], detector["extractor"], audio, windows)
    for batch_size in (1, 4):
        result = detect(audio, chunk_hop_s=0.16, return_frame_scores=True, batch_size=batch_size)
        assert result["frame_scores"].shape == (16, 3)
        np.testing.assert_allclose(result["frame_scores"], expected, atol=1e-5)
    events = frame_events(expected, 0.16, LABELS, detector["model"].config.event_thresholds, 3, 0.3, 0.16, 2.5)
    assert_same_events(result["events"], events)
    assert [(e["onset"], e["offset"]) for e in events if e["label"] == "speech"] == [pytest.approx((0.0, 2.5))]


def test_the_checkpoint_names_its_pipeline_and_runs_it_without_the_package(detector, tmp_path):
    """config.json names only the sound-event-detection pipeline, so `pipeline(model=folder, trust_remote_code=True)`
    finds the task; in a process where `aasp_hf` cannot be imported it gives the in-process events of a file."""
    config = json.loads((detector["folder"] / "config.json").read_text())
    assert list(config["custom_pipelines"]) == ["sound-event-detection"]
    assert config["auto_map"]["AutoModelForAudioFrameClassification"] == "modeling_aasp.AaspForAudioFrameClassification"
    wav = tmp_path / "clip.wav"
    sf.write(wav, detector["audio"], RATE, subtype="FLOAT")
    result = run_without_aasp_hf(
        f"""
        import json
        from transformers import pipeline
        detect = pipeline(model={str(detector["folder"])!r}, trust_remote_code=True)
        print(type(detect).__module__.split(".")[0], json.dumps(detect({str(wav)!r})))
        """,
        tmp_path,
    )
    module, remote = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module == "transformers_modules"
    local = pipeline("sound-event-detection", model=str(detector["folder"]))(str(wav))
    assert local and assert_same_events(json.loads(remote), local) is None


def test_the_tagger_writes_the_pipelines_events_as_dcase_lists_and_frame_rows(detector, tmp_path):
    """One `python -m aasp_hf.tag --events --timestamps` run over a folder: the events file, read as DCASE's scorers
    read it, holds each file's pipeline events under its name in the folder; the rows are the pipeline's frame scores,
    one row per output frame and label at or above its saved threshold; and, in this process, the rows per file are
    each label's highest frame score."""
    audio_dir = tmp_path / "audio"
    (audio_dir / "sub").mkdir(parents=True)
    clips = {"a.wav": detector["audio"], "sub/b.wav": noisy_tones(1.3, seed=11)}
    for name, audio in clips.items():
        sf.write(audio_dir / name, audio, RATE, subtype="FLOAT")
    out, events = tmp_path / "frames.csv", tmp_path / "events.tsv"
    arguments = ["--model", detector["folder"], "--events", events, "--batch_size", 3]
    process = subprocess.run(
        [sys.executable, "-m", "aasp_hf.tag", *map(str, arguments), "--output", str(out), "--timestamps", audio_dir],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.returncode == 0, process.stderr[-3000:]
    detect = pipeline("sound-event-detection", model=str(detector["folder"]))
    expected = {name: detect(str(audio_dir / name), return_frame_scores=True) for name in clips}

    with open(events, newline="") as file:
        reader = csv.DictReader(file, delimiter="\t")  # as sed_eval / dcase_util read a DCASE event list
        got = [(row["filename"], float(row["onset"]), float(row["offset"]), row["event_label"]) for row in reader]
    assert reader.fieldnames == ["filename", "onset", "offset", "event_label"]
    wanted = [(name, e["onset"], e["offset"], e["label"]) for name, r in expected.items() for e in r["events"]]
    assert len(got) == len(wanted) and {name for name, *_ in got} == set(clips)
    for (name, onset, offset, label), want in zip(got, wanted):
        assert (name, label) == (want[0], want[3]) and (onset, offset) == pytest.approx(want[1:3], abs=1e-6)
    # scored as DCASE's scripts score a system, file by file of the reference (named relative to its folder)
    metric = sed_eval.sound_event.EventBasedMetrics(event_label_list=LABELS, t_collar=0.2)
    for name in clips:
        reference = [dict(zip(("filename", "onset", "offset", "event_label"), event)) for event in wanted]
        estimated = [dict(zip(("filename", "onset", "offset", "event_label"), event)) for event in got]
        metric.evaluate(
            [e for e in reference if e["filename"] == name], [e for e in estimated if e["filename"] == name]
        )
    assert metric.results_overall_metrics()["f_measure"]["f_measure"] == 1.0

    with open(out, newline="") as file:
        rows = list(csv.DictReader(file))
    thresholds = detector["model"].config.event_thresholds
    for name, result in expected.items():
        mine = [row for row in rows if row["file"] == str(audio_dir / name)]
        scores = result["frame_scores"]
        chosen = [
            (round(0.16 * t, 6), label, scores[t, c])
            for t in range(len(scores))
            for c, label in sorted(enumerate(LABELS), key=lambda item: -scores[t, item[0]])
            if scores[t, c] >= thresholds[c]
        ]
        assert [(float(r["start"]), r["label"]) for r in mine] == [(pytest.approx(s), label) for s, label, _ in chosen]
        assert [float(r["score"]) for r in mine] == pytest.approx([score for *_, score in chosen], abs=1e-5)
        assert float(mine[-1]["end"]) == pytest.approx(len(clips[name]) / RATE)

    from aasp_hf.cli.tag import main as tag

    per_file = tmp_path / "files.csv"
    assert tag([*map(str, arguments[:2]), "--output", str(per_file), "--num_workers", "0", str(audio_dir)]) == 0
    with open(per_file, newline="") as file:
        rows = list(csv.DictReader(file))
    for name, result in expected.items():
        best = result["frame_scores"].max(axis=0)
        kept = {LABELS[c]: best[c] for c in np.argsort(-best, kind="stable") if best[c] >= thresholds[c]}
        mine = {row["label"]: float(row["score"]) for row in rows if row["file"] == str(audio_dir / name)}
        assert mine == pytest.approx(kept, abs=1e-5) and "alarm" not in mine
