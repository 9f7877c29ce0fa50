"""The length a classifier was trained on travels with it: a real `examples/finetune.py` run saves the feature
extractor with `max_frames` = the frames of its training crop (rounded up to whole time patches), and the pipeline and
`python -m aasp_hf.tag` then cut windows of that length, not of the pre-training crop (`config.num_frames`)."""

import csv
import json
import logging

import numpy as np
import pytest
import soundfile as sf
from transformers import pipeline

import finetune  # examples/finetune.py (pytest's pythonpath)

from aasp_hf import AaspAudioClassificationPipeline, AaspFeatureExtractor
from aasp_hf.pipeline_aasp import trained_window_samples
from aasp_hf.cli.tag import main as tag
from aasp_hf.data.collators import trained_max_frames
from conftest import finetune_argv, save_tiny_encoder
from test_long_audio import RATE, noisy_tones

CLIP_SECONDS = 1.0  # 101 frames -> 112 (7 time patches); the encoder's pre-training crop is 64 frames


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("trained_window")
    encoder = save_tiny_encoder(root / "encoder")  # num_frames 64, no max_frames
    out = root / "classifier"
    finetune.main(
        finetune_argv(
            encoder,
            out,
            warmup_steps=None,
            eval_steps=2,
            clip_seconds=CLIP_SECONDS,
            per_device_train_batch_size=10,
            baseline="none",
        )
    )
    return out


def test_the_saved_extractor_keeps_the_trained_crop_in_whole_patches(classifier_folder):
    saved = json.loads((classifier_folder / "preprocessor_config.json").read_text())
    assert json.loads((classifier_folder / "config.json").read_text())["num_frames"] == 64
    extractor = AaspFeatureExtractor()
    frames = extractor.num_frames(round(CLIP_SECONDS * RATE))  # what the collator featurised: 101 frames
    assert frames == 101 and trained_max_frames(extractor, CLIP_SECONDS) == 112
    assert saved["max_frames"] == 112 and saved["max_frames"] % saved["frame_multiple"] == 0
    assert json.loads((classifier_folder / "best_model" / "preprocessor_config.json").read_text())["max_frames"] == 112


def test_the_pipeline_and_the_tagger_cut_windows_of_the_trained_length(classifier_folder, tmp_path):
    """Default windows of 1.11 s (the longest clip whose log-mel fits 112 frames), not 0.63 s (64 frames)."""
    classifier = pipeline(
        "audio-classification", model=str(classifier_folder), pipeline_class=AaspAudioClassificationPipeline
    )
    window = trained_window_samples(classifier.feature_extractor, classifier.model.config)
    extractor = classifier.feature_extractor
    assert extractor.num_frames(window) == 112 < extractor.num_frames(window + extractor.hop_length)
    assert classifier.window_lengths() == (window, window) and window / RATE == pytest.approx(1.11)
    audio = noisy_tones(3.0)
    windows = classifier(audio, return_timestamps=True)["windows"]
    assert [round((w["end"] - w["start"]) * RATE) for w in windows] == [window] * 3
    assert windows[-1]["end"] == pytest.approx(3.0)
    wav, out = tmp_path / "clip.wav", tmp_path / "windows.csv"
    sf.write(wav, audio, RATE, subtype="FLOAT")
    arguments = ["--model", str(classifier_folder), "--output", str(out), "--timestamps", "--num_workers", "0"]
    assert tag([*arguments, str(wav)]) == 0  # in this process, decoding too
    with open(out, newline="") as file:
        tagged = sorted({(float(row["start"]), float(row["end"])) for row in csv.DictReader(file)})
    assert tagged == [pytest.approx((w["start"], w["end"])) for w in windows]


def test_a_plain_extractor_call_reads_the_trained_length_and_says_so(classifier_folder, caplog):
    """transformers' own pipeline and a direct call read the first 112 frames of a longer clip, with one warning;
    `truncation=False` reads the whole clip (the model interpolates its positions)."""
    extractor = AaspFeatureExtractor.from_pretrained(classifier_folder)
    audio = noisy_tones(3.0)
    with caplog.at_level(logging.WARNING, logger="aasp_hf.feature_extraction_aasp"):
        cut = extractor(audio, sampling_rate=RATE)
    assert cut["attention_mask"].sum() == 112 and "Read the first 1.14 s of a 3.00 s clip" in caplog.text
    whole = extractor(audio, sampling_rate=RATE, truncation=False)
    assert whole["attention_mask"].sum() == extractor.num_frames(len(audio)) == 301
    np.testing.assert_allclose(whole["input_values"][0, :100], cut["input_values"][0, :100], atol=1e-5)


def test_transformers_own_pipeline_warns_once_when_it_reads_a_long_recording_whole(tmp_path, caplog):
    """Without max_frames (a checkpoint not saved by finetune.py), transformers' audio-classification pipeline reads
    a 61-s recording as one input and drops chunk_length_s: the extractor says so, once, and points to the windows."""
    from aasp_hf import AaspConfig, AaspForAudioClassification
    from aasp_hf.feature_extraction_aasp import LONG_CLIP_SECONDS
    from conftest import tiny_config_kwargs

    folder = tmp_path / "classifier"
    AaspForAudioClassification(AaspConfig(**tiny_config_kwargs(num_labels=3, num_mel_bins=128))).save_pretrained(folder)
    AaspFeatureExtractor().save_pretrained(folder)
    classifier = pipeline("audio-classification", model=str(folder))
    assert type(classifier).__module__.startswith("transformers.")  # transformers' own class, not ours
    logging.Logger.warning_once.cache_clear()  # transformers' once-only cache is per process
    audio = noisy_tones(LONG_CLIP_SECONDS + 1.0)
    with caplog.at_level(logging.WARNING, logger="aasp_hf.feature_extraction_aasp"):
        classifier(audio, chunk_length_s=5)
        classifier(audio)
    warned = [r.getMessage() for r in caplog.records if "as one input" in r.getMessage()]
    assert len(warned) == 1 and "AaspAudioClassificationPipeline with chunk_length_s" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aasp_hf.feature_extraction_aasp"):
        logging.Logger.warning_once.cache_clear()
        classifier.feature_extractor(audio, sampling_rate=RATE, truncation=False)  # asked for the whole clip
        classifier.feature_extractor(audio[: int((LONG_CLIP_SECONDS - 1) * RATE)], sampling_rate=RATE)  # 59 s
    assert "as one input" not in caplog.text
