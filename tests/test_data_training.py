"""Fine-tuning collator (crop/pad, labels, skipped clips, the training split's speed perturbation and log-mel
augmentation) and mel statistics against a direct computation."""

import numpy as np
import pytest
import soundfile as sf
import torch
from datasets import Audio, ClassLabel, Dataset, Features, Sequence

from aasp_hf.data import AaspFineTuningCollator, compute_mel_statistics, crop_or_pad, for_safe_decoding
from aasp_hf.data.collators import speed_perturb
from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor

SR = 16000


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


# ----------------------------------------------------------------------------------------------- speed perturbation
def test_speed_perturb_factor_one_is_the_identity_and_lengths_are_round_l_over_r():
    wave = np.random.default_rng(0).standard_normal(16001).astype(np.float32)
    assert np.array_equal(speed_perturb(wave, 1.0), wave)
    for factor in (0.9, 0.95, 1.0371, 1.1, 1.25):
        assert speed_perturb(wave, factor).shape == (round(16001 / factor),)
    with pytest.raises(ValueError, match="must be positive"):
        speed_perturb(wave, 0.0)


@pytest.mark.parametrize("factor", [0.9, 1.1, 1.0371])
def test_speed_perturb_plays_a_tone_factor_times_higher_and_removes_what_would_alias(factor):
    """Oracle: sin(2π f n / fs) played `factor` times as fast is sin(2π f·factor m / fs) (away from the clip's edges);
    a tone that a speed-up would push past the Nyquist frequency is filtered out, not folded back (-11 dB with the
    default kernel of torchaudio's width, far more with a wider one)."""
    n = np.arange(16000)
    tone = np.sin(2 * np.pi * 440.0 * n / SR).astype(np.float32)
    out = speed_perturb(tone, factor)
    m = np.arange(out.shape[0])
    expected = np.sin(2 * np.pi * 440.0 * factor * m / SR)
    np.testing.assert_allclose(out[100:-100], expected[100:-100], atol=2e-3)
    if factor == 1.1:
        high = np.sin(2 * np.pi * 7900.0 * n / SR).astype(np.float32)  # 8690 Hz at 1.1: past 8000 Hz

        def level_db(width):  # the alias left, against the tone's rms
            left = speed_perturb(high, factor, lowpass_filter_width=width)[100:-100]
            return 20 * np.log10(np.sqrt(np.mean(left**2)) / np.sqrt(0.5))

        assert level_db(6) < -9 and level_db(32) < -40


@pytest.mark.parametrize("factor, orig, new", [(1.25, 5, 4), (0.8, 4, 5)])
def test_speed_perturb_matches_torchaudio_and_scipy_resampling_at_a_rational_factor(factor, orig, new):
    """Playing at `factor` is resampling from factor · fs to fs: torchaudio's resample (the same Hann-windowed sinc,
    width 6, rolloff 0.99) agrees to float32 rounding; scipy's polyphase resampler (a Kaiser filter) within its
    different pass band, on a signal well inside both."""
    torchaudio = pytest.importorskip("torchaudio")
    signal = pytest.importorskip("scipy.signal")
    rng = np.random.default_rng(1)
    n = np.arange(16000)
    wave = sum(rng.uniform(0.1, 0.3) * np.sin(2 * np.pi * f * n / SR + rng.uniform(0, 6)) for f in (180, 950, 2400))
    wave = wave.astype(np.float32)
    out = speed_perturb(wave, factor)
    reference = torchaudio.functional.resample(torch.from_numpy(wave), orig, new).numpy()
    length = min(out.shape[0], reference.shape[0])
    np.testing.assert_allclose(out[:length], reference[:length], atol=1e-4)
    poly = signal.resample_poly(wave.astype(np.float64), new, orig)
    np.testing.assert_allclose(out[200 : length - 200], poly[200 : length - 200], atol=5e-3)


def test_finetuning_collator_speed_perturbation_draws_each_clip_s_factor_before_its_crop(clips):
    """One uniform draw per decoded clip from the collator's generator, then that clip's crop draw: the batch is the
    extractor's on the clips played at those speeds and cropped, as an oracle with its own generator makes them. Only
    the training split takes augmentations, and a range is 0 < low <= high."""
    paths, bad = clips
    extractor = AaspFeatureExtractor(feature_size=32)
    examples = list(for_safe_decoding(make_dataset(paths + [bad], [0, 1, 2, 3])))
    collator = AaspFineTuningCollator(extractor, clip_seconds=1.0, seed=5, speed_perturbation=(0.9, 1.1))
    batch = collator(examples)
    oracle, waves = np.random.default_rng(5), []
    for path in paths:  # the corrupt clip draws nothing
        wave = sf.read(path, dtype="float32")[0]
        wave = speed_perturb(wave, oracle.uniform(0.9, 1.1))
        waves.append(crop_or_pad(wave, 16000, True, oracle))
    expected = extractor(waves, sampling_rate=16000, return_tensors="pt")
    torch.testing.assert_close(batch["input_values"], expected["input_values"])
    assert collator.rng.bit_generator.state == oracle.bit_generator.state
    plain = AaspFineTuningCollator(extractor, clip_seconds=1.0, seed=5)(examples)
    assert not torch.allclose(plain["input_values"], batch["input_values"])
    with pytest.raises(ValueError, match="training split only"):
        AaspFineTuningCollator(extractor, clip_seconds=1.0, split="validation", speed_perturbation=(0.9, 1.1))
    with pytest.raises(ValueError, match="need 0 < low <= high"):
        AaspFineTuningCollator(extractor, clip_seconds=1.0, speed_perturbation=(1.1, 0.9))


def test_finetuning_collator_log_mel_augmentation_comes_before_the_per_clip_normalization(clips):
    """The augmentation sees the globally normalised log-mel and draws from the collator's generator; the extractor's
    per-clip normalisation follows it. So a random equaliser, a constant per mel bin, is removed again (what the
    model is then fed is the clip without it), while VTLP's warp stays, normalised."""
    from aasp_hf.training.augment import LogMelAugmentation

    paths, _ = clips
    examples = list(for_safe_decoding(make_dataset(paths, [0, 1, 2])))
    cmvn = AaspFeatureExtractor(feature_size=32, per_clip_normalization=True)
    plain = AaspFineTuningCollator(cmvn, clip_seconds=1.0, seed=2)(examples)
    eq = LogMelAugmentation.for_extractor(cmvn, random_eq_db=6.0)
    with_eq = AaspFineTuningCollator(cmvn, clip_seconds=1.0, seed=2, log_mel_augmentation=eq)(examples)
    torch.testing.assert_close(with_eq["input_values"], plain["input_values"], atol=1e-4, rtol=0)
    seen = {}

    def warp(input_values, attention_mask, rng):
        seen["input"] = input_values.clone()
        return LogMelAugmentation.for_extractor(cmvn, vtlp_range=(1.1, 1.1))(input_values, attention_mask, rng)

    warped = AaspFineTuningCollator(cmvn, clip_seconds=1.0, seed=2, log_mel_augmentation=warp)(examples)
    global_only = AaspFeatureExtractor(feature_size=32)
    reference = AaspFineTuningCollator(global_only, clip_seconds=1.0, seed=2)(examples)
    torch.testing.assert_close(seen["input"], reference["input_values"])  # before the per-clip normalisation
    assert not torch.allclose(warped["input_values"], plain["input_values"])
    real = warped["attention_mask"].bool()
    for clip in range(3):
        part = warped["input_values"][clip][real[clip]].double()
        torch.testing.assert_close(part.mean(0), torch.zeros(32, dtype=torch.float64), atol=1e-5, rtol=0)


def test_crop_log_mel_applies_the_extractor_s_per_clip_normalization_as_its_call_does(clips):
    """A cached (unnormalised) log-mel, cropped in frames, comes out as the extractor's call gives the clip: with
    per-clip normalisation too, over the crop's frames."""
    from aasp_hf.data.collators import crop_log_mel

    paths, _ = clips
    wave = sf.read(paths[1], dtype="float32")[0]  # 1.5 s: 151 frames
    cmvn = AaspFeatureExtractor(feature_size=32, per_clip_normalization=True)
    raw = AaspFeatureExtractor(feature_size=32, do_normalize=False)(wave, sampling_rate=16000, return_tensors="pt")
    frames = int(raw["attention_mask"].sum())
    cropped = crop_log_mel(raw["input_values"][0, :frames], frames, feature_extractor=cmvn, target_frames=160)
    expected = cmvn(wave, sampling_rate=16000, return_tensors="pt")["input_values"][0]  # (160, 32)
    torch.testing.assert_close(cropped, expected, atol=1e-4, rtol=0)
