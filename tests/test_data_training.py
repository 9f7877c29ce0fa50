"""Fine-tuning collator (crop/pad, labels, skipped clips) and mel statistics against a direct computation."""

import numpy as np
import pytest
import soundfile as sf
import torch
from datasets import Audio, ClassLabel, Dataset, Features, Sequence

from aasp_hf.data import AaspFineTuningCollator, compute_mel_statistics, crop_or_pad, for_safe_decoding
from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor


@pytest.fixture
def clips(tmp_path):
    """Three clips of 0.5, 1.5 and 3 s (a ramp, so crop positions are visible) and one corrupt .wav."""
    rng = np.random.default_rng(0)
    paths = []
    for i, seconds in enumerate((0.5, 1.5, 3.0)):
        n = int(seconds * 16000)
        path = str(tmp_path / f"clip{i}.wav")
        sf.write(
            path, (0.1 * rng.standard_normal(n) + np.linspace(0, 0.5, n)).astype(np.float32), 16000, subtype="FLOAT"
        )
        paths.append(path)
    bad = str(tmp_path / "corrupt.wav")
    with open(bad, "wb") as f:
        f.write(rng.bytes(3000))
    return paths, bad


def make_dataset(paths, labels, multi=False):
    label_feature = Sequence(ClassLabel(num_classes=5)) if multi else ClassLabel(num_classes=5)
    column = "labels" if multi else "label"
    return Dataset.from_dict(
        {"audio": paths, column: labels},
        features=Features({"audio": Audio(sampling_rate=16000), column: label_feature}),
    )


def test_crop_or_pad():
    wave = np.arange(10, dtype=np.float32)
    assert np.array_equal(crop_or_pad(wave, 4, random_crop=False), np.arange(4))
    assert np.array_equal(crop_or_pad(wave, 13, random_crop=False), np.r_[np.arange(10), 0, 0, 0])
    starts = {int(crop_or_pad(wave, 4, True, np.random.default_rng(s))[0]) for s in range(50)}
    assert starts == set(range(7))  # every window start 0..L-n is reachable


def test_finetuning_collator_lengths_labels_and_skips(clips):
    paths, bad = clips
    extractor = AaspFeatureExtractor(feature_size=32)
    examples = list(for_safe_decoding(make_dataset(paths + [bad], [0, 3, 4, 1])))
    test_collator = AaspFineTuningCollator(extractor, task="scv2", split="test")  # 1 s clips
    batch = test_collator(examples)
    assert test_collator.num_skipped == 1  # the corrupt clip is dropped, not fatal
    assert batch["labels"].tolist() == [0, 3, 4] and batch["labels"].dtype == torch.long
    frames = extractor.num_frames(16000)  # 101 -> padded to 112
    assert batch["input_values"].shape == (3, 112, 32)
    assert batch["attention_mask"].sum(1).tolist() == [frames] * 3  # padded 0.5 s clip and cropped ones: 1 s
    # test split: the first second; equals featurising the first 16000 samples directly
    first = sf.read(paths[2], dtype="float32")[0][:16000]
    expected = extractor(first, sampling_rate=16000, return_tensors="pt")["input_values"][0]
    torch.testing.assert_close(batch["input_values"][2], expected, atol=1e-4, rtol=1e-4)
    # train split: a random window, reproducible with the seed, different from the first one
    train_batches = [AaspFineTuningCollator(extractor, clip_seconds=1.0, seed=s)(examples[2:3]) for s in (1, 1, 2)]
    torch.testing.assert_close(train_batches[0]["input_values"], train_batches[1]["input_values"])
    assert not torch.allclose(train_batches[0]["input_values"], train_batches[2]["input_values"])
    assert not torch.allclose(train_batches[0]["input_values"][0], expected)
    # all clips bad -> None (the loop skips it)
    assert test_collator(examples[3:]) is None and test_collator.num_skipped == 2


def test_finetuning_collator_masked_padding_marks_a_short_clip_s_frames_as_padding(clips):
    """padding="masked": a clip shorter than the clip length keeps only its own frames real in the attention mask
    (with "zeros" the appended silence counts as real); the batch has the same shape, the real frames equal the
    short clip featurised alone, longer clips are cropped as with "zeros", and the crop draws are the same."""
    paths, _ = clips
    extractor = AaspFeatureExtractor(feature_size=32)
    examples = list(for_safe_decoding(make_dataset(paths, [0, 3, 4])))  # 0.5, 1.5 and 3 s against 1-s crops
    zeros, masked = (
        AaspFineTuningCollator(extractor, clip_seconds=1.0, seed=3, padding=padding)(examples)
        for padding in ("zeros", "masked")
    )
    frames, short = extractor.num_frames(16000), extractor.num_frames(8000)  # 101, 51
    assert zeros["input_values"].shape == masked["input_values"].shape == (3, 112, 32)
    assert zeros["attention_mask"].sum(1).tolist() == [frames] * 3
    assert masked["attention_mask"].sum(1).tolist() == [short, frames, frames]
    alone = extractor(sf.read(paths[0], dtype="float32")[0], sampling_rate=16000, return_tensors="pt")
    torch.testing.assert_close(masked["input_values"][0, :short], alone["input_values"][0, :short])
    torch.testing.assert_close(masked["input_values"][1:], zeros["input_values"][1:])  # the same random crops
    with pytest.raises(ValueError, match="padding='edge'"):
        AaspFineTuningCollator(extractor, clip_seconds=1.0, padding="edge")


def test_finetuning_collator_multi_hot(clips):
    paths, _ = clips
    extractor = AaspFeatureExtractor(feature_size=32)
    examples = list(for_safe_decoding(make_dataset(paths, [[0, 2], [4], []], multi=True)))
    batch = AaspFineTuningCollator(extractor, task="audioset", num_labels=5, split="test")(examples)
    assert batch["labels"].tolist() == [[1, 0, 1, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]]
    assert batch["input_values"].shape[1] == 1008  # 10 s: 1001 frames -> multiple of 16
    with pytest.raises(ValueError, match="task='foo'"):
        AaspFineTuningCollator(extractor, task="foo")


def test_mel_statistics_match_direct_computation(clips):
    paths, bad = clips
    extractor = AaspFeatureExtractor(feature_size=32)
    mean, std, frames = compute_mel_statistics(make_dataset(paths + [bad], [0, 0, 0, 0]), extractor, batch_size=2)
    # oracle: each clip alone, unnormalised log-mel over its real frames, numpy mean/std
    raw = AaspFeatureExtractor(feature_size=32, do_normalize=False)
    values = []
    for path in paths:
        wave = sf.read(path, dtype="float32")[0]
        out = raw(wave, sampling_rate=16000, return_tensors="np")
        values.append(out["input_values"][0][out["attention_mask"][0].astype(bool)])
    values = np.concatenate(values).astype(np.float64)
    assert frames == values.shape[0] == sum(raw.num_frames(int(s * 16000)) for s in (0.5, 1.5, 3.0))
    assert mean == pytest.approx(values.mean(), abs=1e-4) and std == pytest.approx(values.std(), rel=1e-4)
    # an extractor with these statistics normalises the data to zero mean, unit variance
    assert extractor.do_normalize  # the extractor passed in is left untouched
    normed = AaspFeatureExtractor(feature_size=32, mean=mean, std=std)
    out = normed(sf.read(paths[2], dtype="float32")[0], sampling_rate=16000, return_tensors="np")
    np.testing.assert_allclose(
        out["input_values"][0][out["attention_mask"][0].astype(bool)],
        (values[-out["attention_mask"].sum() :] - mean) / std,
        atol=1e-4,
    )
