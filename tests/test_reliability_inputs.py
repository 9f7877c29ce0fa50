"""Property tests (hypothesis) of AaspFeatureExtractor and AaspModel on odd input: any length from 1 sample to
longer than the position table, int16/int32 PCM and float64, channels, NaN/inf, silence, clipping, wrong sampling
rates. Each case either works (shape, finite output, batched == unbatched) or raises a ValueError that says what to
do. The matrix is in docs/reliability.md."""

import math

import numpy as np
import pytest
import torch
from conftest import tiny_config_kwargs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

SR = 16000
F = 32  # tiny mel bins, as the tiny model
PROPERTY = settings(
    max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
FEW = settings(PROPERTY, max_examples=10)

EXTRACTORS = {mode: AaspFeatureExtractor(feature_size=F, mode=mode) for mode in ("m2d", "kaldi")}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return AaspModel(AaspConfig(**tiny_config_kwargs())).eval()  # position table: 64 frames (4 time patches)


def waveform(seed, length, dtype):
    """A clip of `length` samples in [-1, 1) (noise + a tone), in `dtype` (integer PCM at full scale)."""
    rng = np.random.default_rng(seed)
    x = 0.3 * rng.standard_normal(length) + 0.5 * np.sin(2 * np.pi * 440 * np.arange(length) / SR)
    x = np.clip(x, -1, 1 - 2**-15)
    if dtype == "int16":
        return np.round(x * 32768).astype(np.int16)
    if dtype == "int32":
        return np.round(x * 2**31).astype(np.int64).clip(-(2**31), 2**31 - 1).astype(np.int32)
    return x.astype(dtype)


def as_float(x):
    scale = {np.dtype(np.int16): 32768.0, np.dtype(np.int32): 2.0**31}.get(x.dtype, 1.0)
    return (x.astype(np.float64) / scale).astype(np.float32)


def featurise(extractor, x, **kwargs):
    return extractor(x, sampling_rate=SR, return_tensors="pt", **kwargs)


# ----------------------------------------------------------------------------------------------- lengths and dtypes
@PROPERTY
@given(
    length=st.one_of(st.integers(1, 3), st.integers(1, 2000), st.integers(2000, 40000)),  # 1 sample .. 2.5 s
    dtype=st.sampled_from(["float32", "float64", "int16", "int32"]),
    mode=st.sampled_from(["m2d", "kaldi"]),
    seed=st.integers(0, 2**16),
)
def test_any_length_and_dtype_gives_finite_features_of_the_right_shape(length, dtype, mode, seed):
    extractor = EXTRACTORS[mode]
    x = waveform(seed, length, dtype)
    if mode == "kaldi" and length < extractor.win_length:
        with pytest.raises(ValueError, match=r"at least win_length=400.*Pad it with zeros or drop it"):
            featurise(extractor, x)
        return
    out = featurise(extractor, x)
    frames = extractor.num_frames(length)
    expected_frames = 1 + length // 160 if mode == "m2d" else 1 + (length - 400) // 160  # independent formula
    assert frames == expected_frames
    assert out["input_values"].shape == (1, math.ceil(frames / 16) * 16, F)
    assert out["input_values"].dtype == torch.float32 and torch.isfinite(out["input_values"]).all()
    assert out["attention_mask"].sum().item() == frames and out["attention_mask"][0, :frames].all()
    # integer PCM is scaled to [-1, 1) and float64 is cast: the same features as the float32 clip
    reference = featurise(extractor, as_float(x))["input_values"]
    torch.testing.assert_close(out["input_values"], reference, atol=2e-4, rtol=1e-4)


@PROPERTY
@given(
    lengths=st.lists(st.integers(400, 12000), min_size=2, max_size=4),
    mode=st.sampled_from(["m2d", "kaldi"]),
    seed=st.integers(0, 2**16),
)
def test_batched_equals_unbatched(lengths, mode, seed):
    extractor = EXTRACTORS[mode]
    clips = [waveform(seed + i, n, "float32") for i, n in enumerate(lengths)]
    batch = featurise(extractor, clips)
    for i, clip in enumerate(clips):
        alone = featurise(extractor, clip)
        frames = extractor.num_frames(len(clip))
        torch.testing.assert_close(
            batch["input_values"][i, :frames], alone["input_values"][0, :frames], atol=1e-4, rtol=1e-4
        )
        assert batch["attention_mask"][i].sum().item() == frames
        assert (batch["input_values"][i, frames:] == extractor.padding_value).all()  # padding stays padding


def test_zero_samples_and_empty_batches_raise_a_clear_error():
    extractor = EXTRACTORS["m2d"]
    for bad in (np.zeros(0, np.float32), [np.ones(800, np.float32), np.zeros(0, np.float32)], torch.zeros(2, 0)):
        with pytest.raises(ValueError, match=r"empty \(0 samples\): drop it"):
            featurise(extractor, bad)
    with pytest.raises(ValueError, match="empty list of clips"):
        featurise(extractor, [])
    with pytest.raises(ValueError, match="dtype"):
        featurise(extractor, np.ones(800, np.complex64))
    with pytest.raises(ValueError, match="dimensions"):
        featurise(extractor, np.ones((2, 2, 800), np.float32))


# ----------------------------------------------------------------------------------------------- values
@PROPERTY
@given(
    length=st.integers(400, 8000),
    position=st.floats(0, 1, exclude_max=True),
    value=st.sampled_from([float("nan"), float("inf"), -float("inf")]),
    dtype=st.sampled_from(["float32", "float64"]),
    as_tensor=st.booleans(),
)
def test_nan_or_inf_anywhere_raises_naming_the_clip(length, position, value, dtype, as_tensor):
    good = waveform(1, 1200, dtype)
    bad = waveform(2, length, dtype)
    bad[int(position * length)] = value
    batch = [good, bad]
    if as_tensor:
        batch = [torch.from_numpy(c) for c in batch]
    with pytest.raises(ValueError, match=r"Clip\(s\) \[1\] contain NaN or inf.*clean or drop them"):
        featurise(EXTRACTORS["m2d"], batch)


@FEW
@given(length=st.integers(1, 20000), level=st.sampled_from([0.0, 1e-30, 1e-8]), mode=st.sampled_from(["m2d", "kaldi"]))
def test_silence_gives_the_floor_not_minus_infinity(length, level, mode):
    extractor = EXTRACTORS[mode]
    length = max(length, 400) if mode == "kaldi" else length
    out = featurise(extractor, np.full(length, level, np.float32))["input_values"]
    assert torch.isfinite(out).all()
    frames = extractor.num_frames(length)
    floor = (math.log(torch.finfo(torch.float32).eps) - extractor.mean) / extractor.std
    if level == 0.0:  # log(0 + eps) normalised: every real frame is exactly the floor
        torch.testing.assert_close(out[0, :frames], torch.full((frames, F), floor), atol=1e-5, rtol=0)
    assert out[0, :frames].min() >= floor - 1e-5


@FEW
@given(
    amplitude=st.sampled_from([1.0, 8.0, 1e4, 3e8]),
    dtype=st.sampled_from(["float32", "int16", "int32"]),
    length=st.integers(400, 8000),
)
def test_clipped_and_out_of_range_audio_stays_finite(amplitude, dtype, length):
    """A clipped square wave at full scale (int16/int32 extremes), and float audio far outside [-1, 1]."""
    square = np.sign(np.sin(2 * np.pi * 300 * np.arange(length) / SR))
    if dtype == "int16":
        x = np.where(square >= 0, 32767, -32768).astype(np.int16)
    elif dtype == "int32":
        x = np.where(square >= 0, 2**31 - 1, -(2**31)).astype(np.int32)
    else:
        x = (amplitude * square).astype(np.float32)
    for extractor in EXTRACTORS.values():
        out = featurise(extractor, x)["input_values"]
        assert torch.isfinite(out).all()
    if dtype != "float32":  # full-scale PCM: the same features as its float value (no wrap-around at the extremes)
        torch.testing.assert_close(out, featurise(extractor, as_float(x))["input_values"], atol=2e-4, rtol=1e-4)


def test_sum_overflow_is_reported_not_propagated():
    """Samples so large that float32 sums overflow are caught by the same check as NaN/inf."""
    x = np.full(4000, 3e35, np.float32)
    with pytest.raises(ValueError, match=r"so large that their sum overflows"):
        featurise(EXTRACTORS["m2d"], x)


# ----------------------------------------------------------------------------------------------- rates, channels
@FEW
@given(rate=st.sampled_from([8000, 11025, 22050, 24000, 32000, 44100, 48000, 96000, 16001, 15999]))
def test_a_wrong_sampling_rate_raises_and_says_how_to_resample(rate):
    with pytest.raises(ValueError, match=rf"sampling_rate={rate} Hz.*expects 16000 Hz.*Resample it first"):
        EXTRACTORS["m2d"](np.zeros(1600, np.float32), sampling_rate=rate)


def test_a_missing_sampling_rate_raises():
    with pytest.raises(ValueError, match=r"no `sampling_rate` was passed.*sampling_rate=16000"):
        EXTRACTORS["m2d"](np.zeros(1600, np.float32))


@FEW
@given(
    channels=st.integers(2, 6),
    length=st.integers(800, 8000),
    layout=st.sampled_from(["CL", "LC"]),
    dtype=st.sampled_from(["float32", "int16"]),
)
def test_multichannel_audio_is_rejected_or_downmixed_on_request(channels, length, layout, dtype):
    extractor = EXTRACTORS["m2d"]
    stereo = np.stack([waveform(c, length, dtype) for c in range(channels)])  # (C, L)
    clip = stereo if layout == "CL" else stereo.T
    mono = as_float(stereo).mean(axis=0)
    expected = featurise(extractor, mono)["input_values"]
    torch.testing.assert_close(featurise(extractor, clip, mono=True)["input_values"], expected, atol=2e-4, rtol=1e-4)
    torch.testing.assert_close(featurise(extractor, [clip], mono=True)["input_values"], expected, atol=2e-4, rtol=1e-4)
    with pytest.raises(ValueError, match=r"mono=True"):
        featurise(extractor, [clip])  # a 2-D list element is never silently read as a batch
    if layout == "LC":  # (samples, channels): rejected instead of being read as `length` clips of C samples
        with pytest.raises(ValueError, match=r"\(samples, channels\).*pass mono=True"):
            featurise(extractor, clip)


# ----------------------------------------------------------------------------------------------- the model
@FEW
@given(num_samples=st.integers(1, 48000), seed=st.integers(0, 2**16))
def test_model_takes_any_length_including_beyond_its_position_table(model, num_samples, seed):
    """1 sample (1 frame, less than one 16-frame patch) .. 3 s (301 frames, ~5x the 64-frame position table)."""
    inputs = featurise(EXTRACTORS["m2d"], waveform(seed, num_samples, "float32"))
    with torch.no_grad():
        hidden = model(**inputs).last_hidden_state
    time_patches = inputs["input_values"].shape[1] // 16
    assert hidden.shape == (1, 1 + time_patches * (F // 16), model.config.hidden_size)
    assert torch.isfinite(hidden).all()


@FEW
@given(lengths=st.lists(st.integers(1, 24000), min_size=2, max_size=3), seed=st.integers(0, 2**16))
def test_model_batched_equals_unbatched(model, lengths, seed):
    extractor = EXTRACTORS["m2d"]
    clips = [waveform(seed + i, n, "float32") for i, n in enumerate(lengths)]
    with torch.no_grad():
        batched = model(**featurise(extractor, clips)).last_hidden_state
        for i, clip in enumerate(clips):
            alone = model(**featurise(extractor, clip)).last_hidden_state[0]  # (1 + N_i, D): CLS then patches
            grid = extractor.num_frames(len(clip))
            num_tokens = 1 + math.ceil(grid / 16) * (F // 16)
            assert alone.shape[0] == num_tokens
            torch.testing.assert_close(batched[i, :num_tokens], alone, atol=1e-4, rtol=1e-4)


def test_model_input_errors_say_what_to_pass(model):
    with pytest.raises(ValueError, match="0 frames"):
        model(torch.zeros(1, 0, F))
    with pytest.raises(ValueError, match=r"\(batch, frames, 32\).*AaspFeatureExtractor.*got \(1, 64, 16\)"):
        model(torch.zeros(1, 64, 16))
    with pytest.raises(ValueError, match=r"\(batch, frames, 32\).*got \(64, 32\)"):
        model(torch.zeros(64, F))


def test_a_nonfinite_clip_does_not_leak_into_the_rest_of_the_batch(model):
    """The model does not check values (a host sync per call); the extractor is the gate. If NaN features reach it
    anyway, only that clip's outputs are NaN: the other clips of the batch are exactly as computed alone."""
    features = featurise(EXTRACTORS["m2d"], [waveform(0, 8000, "float32"), waveform(1, 8000, "float32")])
    poisoned = features["input_values"].clone()
    poisoned[0, 10, 3] = float("nan")
    with torch.no_grad():
        out = model(input_values=poisoned, attention_mask=features["attention_mask"]).last_hidden_state
        clean = model(**features).last_hidden_state
    assert not torch.isfinite(out[0]).all()
    torch.testing.assert_close(out[1], clean[1], atol=1e-5, rtol=1e-5)
