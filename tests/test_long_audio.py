"""Long clips through the audio-classification pipeline: windows of the trained length, their timestamps, the
aggregation of their scores, block decoding of files, and memory that does not grow with a file's length."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import soundfile as sf
import torch
from transformers import pipeline

from aasp_hf import AaspAudioClassificationPipeline, AaspConfig, AaspFeatureExtractor, AaspForAudioClassification
from aasp_hf.pipeline_aasp import decode_blocks, decode_clip, iter_windows, trained_window_samples
from aasp_hf.training.saved_models import save_best_model
from conftest import run_without_aasp_hf, tiny_config_kwargs

LABELS = ["bird", "car", "rain"]
RATE = 16000


def noisy_tones(seconds, seed=0):
    """A clip whose content changes every half second (so windows differ): tones of random pitch and loudness plus
    noise."""
    rng = np.random.default_rng(seed)
    pieces = []
    for _ in range(int(np.ceil(seconds * 2))):
        t = np.arange(RATE // 2) / RATE
        tone = rng.uniform(0.01, 0.8) * np.sin(2 * np.pi * rng.uniform(200, 4000) * t)
        pieces.append(tone + rng.uniform(0.001, 0.1) * rng.standard_normal(t.shape))
    return np.concatenate(pieces)[: int(seconds * RATE)].astype(np.float32)


def save_classifier(path, problem_type="single_label_classification", **overrides):
    """A tiny classifier of trained length 64 frames (0.63-s windows) and three labels, saved with its extractor.
    Weights drawn wider than the default (initializer_range 0.5) so that different windows score visibly apart."""
    torch.manual_seed(0)
    config = AaspConfig(
        **tiny_config_kwargs(
            num_mel_bins=128, sblu_hidden_size=16, sblu_output_size=64, initializer_range=0.5, **overrides
        ),
        num_labels=3,
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
        problem_type=problem_type,
    )
    AaspForAudioClassification(config).eval().save_pretrained(path)
    AaspFeatureExtractor().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory):
    return save_classifier(tmp_path_factory.mktemp("single"))


def as_dict(predictions):
    return {p["label"]: p["score"] for p in predictions}


def test_the_default_window_is_the_trained_length():
    """max_frames (fine-tuning's clip length) when the extractor has one, else the config's num_frames; the window's
    log-mel fills those frames and one more hop would not fit."""
    config = AaspConfig(**tiny_config_kwargs())  # num_frames 64
    for extractor, frames in ((AaspFeatureExtractor(), 64), (AaspFeatureExtractor(max_frames=1008), 1008)):
        samples = trained_window_samples(extractor, config)
        assert extractor.num_frames(samples) == frames
        assert extractor.num_frames(samples + extractor.hop_length) > frames
    kaldi = AaspFeatureExtractor(mode="kaldi", max_frames=1008)
    samples = trained_window_samples(kaldi, config)
    assert kaldi.num_frames(samples) <= 1008 < kaldi.num_frames(samples + kaldi.hop_length)


@pytest.mark.parametrize("window,hop", [(10, 10), (10, 4), (7, 7), (50, 50)])
def test_iter_windows_over_blocks_cut_anywhere(window, hop):
    """Whatever the block sizes, the windows are the clip's samples at their starts; starts step by the hop; every
    window but a short clip's is whole; together they cover the clip."""
    rng = np.random.default_rng(window * 100 + hop)
    for total in (1, 9, 10, 11, 23, 40, 97):
        clip = rng.standard_normal(total).astype(np.float32)
        cuts = np.sort(rng.choice(np.arange(1, total), size=min(total - 1, 5), replace=False)) if total > 1 else []
        windows = list(iter_windows(iter(np.split(clip, cuts)), window, hop))
        starts = [start for start, _ in windows]
        for start, samples in windows:
            np.testing.assert_array_equal(samples, clip[start : start + window])
            assert len(samples) == min(window, total)
        assert starts[0] == 0 and starts[-1] + len(windows[-1][1]) == total
        assert all(0 < b - a <= hop for a, b in zip(starts, starts[1:]))
        assert len(windows) == 1 + max(0, int(np.ceil((total - window) / hop)))


@pytest.mark.parametrize("window,hop,align", [(12, 12, 4), (12, 4, 4), (8, 8, 8)])
def test_iter_windows_on_a_grid_start_every_window_on_it(window, hop, align):
    """With `align` (a frame classifier's output frame), every start is a multiple of it: the last window ends at the
    clip's end, starting on the grid at or after `window` samples before it (so it may be shorter), and the windows
    still cover the clip with no gap."""
    rng = np.random.default_rng(window + hop + align)
    for total in (1, 5, 12, 13, 17, 30, 41):
        clip = rng.standard_normal(total).astype(np.float32)
        cuts = np.sort(rng.choice(np.arange(1, total), size=min(total - 1, 4), replace=False)) if total > 1 else []
        windows = list(iter_windows(iter(np.split(clip, cuts)), window, hop, align=align))
        for start, samples in windows:
            assert start % align == 0 and 0 < len(samples) <= window
            np.testing.assert_array_equal(samples, clip[start : start + len(samples)])
        ends = [start + len(samples) for start, samples in windows]
        assert windows[0][0] == 0 and ends[-1] == total
        assert all(b <= end for (b, _), end in zip(windows[1:], ends))  # no gap
        last_start = windows[-1][0]
        assert total - window <= last_start < max(total - window, 0) + align


def test_each_window_scores_as_its_samples_alone_and_the_clip_mean_aggregates_them(classifier_folder):
    """A 3.3-s clip, 0.63-s windows overlapping by half: each window's start, end and scores are those of its samples
    classified alone; the clip's scores are the mean of the windows' (single-label)."""
    classifier = pipeline(
        "audio-classification", model=str(classifier_folder), pipeline_class=AaspAudioClassificationPipeline
    )
    audio = noisy_tones(3.3)
    window = trained_window_samples(classifier.feature_extractor, classifier.model.config)
    hop_s = window / 2 / RATE
    result = classifier(audio, top_k=None, chunk_hop_s=hop_s, return_timestamps=True)
    windows = result["windows"]
    assert len(windows) == 1 + int(np.ceil((len(audio) - window) / (window // 2)))
    assert windows[-1]["end"] == pytest.approx(len(audio) / RATE)
    for item in windows:
        start, end = round(item["start"] * RATE), round(item["end"] * RATE)
        assert end - start == window
        alone = as_dict(classifier(audio[start:end], top_k=None))
        assert as_dict(item["scores"]) == pytest.approx(alone, abs=1e-5)
    window_scores = np.array([[as_dict(item["scores"])[name] for name in LABELS] for item in windows])
    assert np.ptp(window_scores, axis=0).max() > 0.01  # the windows differ, so the mean is a real test
    assert as_dict(result["scores"]) == pytest.approx(dict(zip(LABELS, window_scores.mean(axis=0))), abs=1e-6)
    # without timestamps: the same clip scores, the plain list
    assert as_dict(classifier(audio, top_k=None, chunk_hop_s=hop_s)) == pytest.approx(as_dict(result["scores"]))


def test_batched_windows_equal_one_at_a_time(classifier_folder):
    """batch_size batches windows of one clip and of several clips (the last windows padded and masked)."""
    classifier = pipeline(
        "audio-classification", model=str(classifier_folder), pipeline_class=AaspAudioClassificationPipeline
    )
    clips = [noisy_tones(2.1), noisy_tones(0.4, seed=1), noisy_tones(1.3, seed=2)]
    batched = classifier(clips, top_k=None, batch_size=4, return_timestamps=True)
    for clip, result in zip(clips, batched):
        single = classifier(clip, top_k=None, return_timestamps=True)
        assert [(w["start"], w["end"]) for w in result["windows"]] == [
            (w["start"], w["end"]) for w in single["windows"]
        ]
        assert as_dict(result["scores"]) == pytest.approx(as_dict(single["scores"]), abs=1e-5)


def test_multi_label_takes_the_max_over_windows_and_aggregation_can_be_named(tmp_path):
    folder = save_classifier(tmp_path, problem_type="multi_label_classification", patch_embedding="spe")
    classifier = pipeline("audio-classification", model=str(folder), pipeline_class=AaspAudioClassificationPipeline)
    audio = noisy_tones(2.5, seed=3)
    result = classifier(audio, top_k=None, return_timestamps=True)
    window_scores = np.array([[as_dict(w["scores"])[name] for name in LABELS] for w in result["windows"]])
    assert as_dict(result["scores"]) == pytest.approx(dict(zip(LABELS, window_scores.max(axis=0))), abs=1e-6)
    mean = as_dict(classifier(audio, top_k=None, aggregation="mean"))
    assert mean == pytest.approx(dict(zip(LABELS, window_scores.mean(axis=0))), abs=1e-6)
    assert mean != pytest.approx(as_dict(result["scores"]), abs=1e-4)


def test_options_refused_with_what_to_do(classifier_folder):
    classifier = pipeline(
        "audio-classification", model=str(classifier_folder), pipeline_class=AaspAudioClassificationPipeline
    )
    audio = noisy_tones(2.0)
    with pytest.raises(ValueError, match="chunk_hop_s=1.5 must be at most the window"):
        classifier(audio, chunk_length_s=1.0, chunk_hop_s=1.5)
    with pytest.raises(ValueError, match="'mean' averages"):
        classifier(audio, aggregation="median")
    with pytest.raises(ValueError, match="chunk_length_s=0 must be a positive, finite number of seconds"):
        classifier(audio, chunk_length_s=0)
    with pytest.raises(ValueError, match="no audio"):
        classifier(np.zeros(0, np.float32))


def test_max_length_s_reads_the_first_seconds_and_says_so(classifier_folder, caplog):
    classifier = pipeline(
        "audio-classification", model=str(classifier_folder), pipeline_class=AaspAudioClassificationPipeline
    )
    audio = noisy_tones(3.0)
    limited = classifier(audio, top_k=None, max_length_s=1.2, return_timestamps=True)
    assert limited["windows"][-1]["end"] == pytest.approx(1.2)
    assert as_dict(limited["scores"]) == pytest.approx(as_dict(classifier(audio[: int(1.2 * RATE)], top_k=None)))
    assert "classified its first 1.2 s (max_length_s)" in caplog.text


@pytest.mark.parametrize("fmt", ["WAV", "FLAC"])
def test_a_file_decoded_in_blocks_is_the_file_decoded_at_once(tmp_path, fmt):
    """Stereo 44.1 kHz, resampled to 16 kHz: blocks of 0.7 s (boundaries off the sample grid of both rates) concatenate
    to the whole file's decoding, sample for sample."""
    rng = np.random.default_rng(0)
    path = tmp_path / f"clip.{fmt.lower()}"
    sf.write(
        path, (0.2 * rng.standard_normal((int(44100 * 3.3), 2))).astype(np.float32), 44100, format=fmt, subtype="PCM_16"
    )
    blocks = list(decode_blocks(str(path), RATE, block_s=0.7))
    assert len(blocks) == 5
    np.testing.assert_array_equal(np.concatenate(blocks), decode_clip(str(path), RATE))


def test_a_long_file_is_classified_window_by_window_in_a_fresh_process_without_the_package(classifier_folder, tmp_path):
    """The checkpoint's own pipeline (remote code, `aasp_hf` unimportable) gives the in-process windows and scores."""
    audio = noisy_tones(2.2, seed=4)
    wav = tmp_path / "long.wav"
    sf.write(wav, audio, RATE, subtype="FLOAT")
    result = run_without_aasp_hf(
        f"""
        import json
        from transformers import pipeline
        classifier = pipeline("audio-classification", model={str(classifier_folder)!r}, trust_remote_code=True)
        print(json.dumps(classifier({str(wav)!r}, top_k=None, return_timestamps=True)))
        """,
        tmp_path,
    )
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    local = pipeline(
        "audio-classification", model=str(classifier_folder), pipeline_class=AaspAudioClassificationPipeline
    )(str(wav), top_k=None, return_timestamps=True)
    assert len(remote["windows"]) == len(local["windows"]) == 4
    for remote_window, local_window in zip(remote["windows"], local["windows"]):
        assert (remote_window["start"], remote_window["end"]) == (local_window["start"], local_window["end"])
        assert as_dict(remote_window["scores"]) == pytest.approx(as_dict(local_window["scores"]), abs=1e-5)


PEAK_MEMORY_SCRIPT = """
import csv, sys
import numpy as np, soundfile as sf
import torch
from transformers import pipeline
from aasp_hf import AaspAudioClassificationPipeline
from aasp_hf.cli.tag import main as tag

def peak_mib():  # this process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent)
    return int([line for line in open("/proc/self/status") if line.startswith("VmHWM")][0].split()[1]) / 1024

folder, path, seconds, how = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
block = (0.1 * np.random.default_rng(0).standard_normal(16000 * 60)).astype(np.float32)
with sf.SoundFile(path, "w", samplerate=16000, channels=1, subtype="PCM_16") as file:  # one 60-s block, repeated
    for start in range(0, int(seconds), 60):
        file.write(block)
classifier = pipeline("audio-classification", model=folder, pipeline_class=AaspAudioClassificationPipeline)
before = peak_mib()
if how == "pipeline":
    windows = classifier(path, top_k=1, chunk_length_s=30.0, return_timestamps=True)["windows"]
    ends = [w["end"] for w in windows]
else:  # the tag command, decoding in this process (--num_workers 0)
    assert tag(["--model", folder, "--output", path + ".csv", "--timestamps", "--top_k", "1", "--chunk_length_s",
                "30", "--num_workers", "0", path]) == 0
    ends = [float(row["end"]) for row in csv.DictReader(open(path + ".csv"))]
print(len(ends), ends[-1], peak_mib() - before)
"""


@pytest.mark.slow  # ~90 s on two cores: writing, decoding and featurising two hours of audio, twice
@pytest.mark.parametrize("how", ["pipeline", "tag"])
def test_a_two_hour_file_in_the_memory_of_a_one_minute_file(tmp_path, how):
    """A 2-hour 16-kHz WAV (its waveform alone would be 440 MiB as float32) is decoded in blocks and classified in
    30-s windows by a tiny SPE classifier, through the pipeline and through the tag command: the process's peak memory
    grows by no more than for a 1-minute file, plus a margin far below the whole waveform's size; the windows reach
    the file's end, 30 s apart."""
    folder = save_classifier(tmp_path / "spe", patch_embedding="spe", num_hidden_layers=1)
    growth = {}
    for seconds in (60, 7200):
        run = subprocess.run(
            [
                sys.executable,
                "-c",
                textwrap.dedent(PEAK_MEMORY_SCRIPT),
                str(folder),
                str(tmp_path / f"{seconds}.wav"),
                str(seconds),
                how,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        num_windows, end, growth[seconds] = run.stdout.split()
        assert int(num_windows) == seconds // 30 and float(end) == pytest.approx(seconds)
        growth[seconds] = float(growth[seconds])
        (tmp_path / f"{seconds}.wav").unlink()
    assert 0 < growth[60] and growth[7200] < growth[60] + 100, growth  # MiB; the whole decoded file would add ~440


def test_transformers_own_pipeline_says_what_it_read_of_a_long_clip(tmp_path, caplog):
    """transformers' own pipeline class (the plain `pipeline(...)` after `import aasp_hf`) featurises the whole clip
    at once, and a fine-tuned classifier's extractor keeps its trained length: the cut is said in one warning, with
    the way to classify the whole recording."""
    import logging

    folder = save_classifier(tmp_path / "clf")
    model = AaspForAudioClassification.from_pretrained(folder)
    save_best_model(model, AaspFeatureExtractor(), folder, clip_seconds=0.5)  # as finetune.py saves 0.5-s crops
    assert json.loads((folder / "preprocessor_config.json").read_text())["max_frames"] == 64
    classifier = pipeline("audio-classification", model=str(folder))
    assert not isinstance(classifier, AaspAudioClassificationPipeline)
    with caplog.at_level(logging.WARNING, logger="aasp_hf.feature_extraction_aasp"):
        classifier({"raw": noisy_tones(3.0), "sampling_rate": RATE})
    (message,) = [r.getMessage() for r in caplog.records if r.name == "aasp_hf.feature_extraction_aasp"]
    assert (
        message.startswith("Read the first 0.66 s of a 3.00 s clip: this feature extractor keeps max_frames=64 frames")
        and "AaspAudioClassificationPipeline" in message
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aasp_hf.feature_extraction_aasp"):  # windows: nothing cut
        AaspAudioClassificationPipeline(model=classifier.model, feature_extractor=classifier.feature_extractor)(
            {"raw": noisy_tones(3.0), "sampling_rate": RATE}
        )
    assert not [r for r in caplog.records if r.name == "aasp_hf.feature_extraction_aasp"]
