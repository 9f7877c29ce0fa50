"""Log-mel cache: values vs direct feature extraction, skipped clips, resume, settings checks, frame-domain crops."""

import json
import math
import os

import numpy as np
import pytest
import soundfile as sf
import torch
from datasets import Audio, Dataset, Features, Value

from aasp_hf.data.cache import LogMelCache, build_log_mel_cache
from aasp_hf.data.statistics import MelMoments
from aasp_hf.data.collators import crop_log_mel, crop_log_mel_batch
from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor


SECONDS = (0.5, 1.5, 3.0)


@pytest.fixture
def fake_dataset(tmp_path):
    """Three float WAVs (0.5, 1.5, 3 s; noise + a tone) and one corrupt .wav, as a Dataset with an Audio column."""
    rng = np.random.default_rng(0)
    paths, waveforms = [], []
    for i, seconds in enumerate(SECONDS):
        n = int(seconds * 16000)
        wave = 0.05 * rng.standard_normal(n) + 0.3 * np.sin(2 * np.pi * 440 * (1 + i) * np.arange(n) / 16000)
        wave = wave.astype(np.float32)
        path = str(tmp_path / "audio" / f"clip{i}.wav")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        sf.write(path, wave, 16000, subtype="FLOAT")
        paths.append(path)
        waveforms.append(wave)
    bad = str(tmp_path / "audio" / "corrupt.wav")
    with open(bad, "wb") as f:
        f.write(rng.bytes(3000))
    rows = paths[:2] + [bad] + paths[2:]  # the corrupt clip is row 2
    dataset = Dataset.from_dict(
        {"audio": rows, "name": [f"c{i}" for i in range(4)]},
        features=Features({"audio": Audio(sampling_rate=16000), "name": Value("string")}),
    )
    return dataset, waveforms


def unnormalised(extractor, waveform):
    """Direct extraction: the extractor's unnormalised log-mel of the whole clip, (T, F)."""
    raw = AaspFeatureExtractor(**{**extractor.to_dict(), "do_normalize": False})
    features = raw(waveform, sampling_rate=16000, return_tensors="np")["input_values"][0]
    return features[: raw.num_frames(len(waveform))]


def test_cache_values_match_direct_extraction_and_skip_corrupt(fake_dataset, tmp_path):
    dataset, waveforms = fake_dataset
    extractor = AaspFeatureExtractor()  # the M2D front end, 128 bins
    summary = build_log_mel_cache(dataset, tmp_path / "cache", extractor)
    assert (summary["num_clips"], summary["num_written"], summary["num_kept"], summary["num_failed"]) == (3, 3, 0, 1)
    assert summary["failed"][0]["row"] == 2 and summary["failed"][0]["id"].endswith("corrupt.wav")

    index = json.loads((tmp_path / "cache" / "index.json").read_text())
    assert index["complete"] and index["normalized"] is False and index["dtype"] == "float16"
    assert index["settings"]["hop_length"] == 160 and index["settings"]["feature_size"] == 128
    assert index["feature_extractor"]["mean"] == -7.1  # the full extractor settings are recorded
    assert index["clips"]["row"] == [0, 1, 3] and index["num_failed"] == 1
    assert index["clips"]["num_frames"] == [extractor.num_frames(len(w)) for w in waveforms]  # 51, 151, 301

    cache = LogMelCache(tmp_path / "cache", extractor)
    assert len(cache) == 3 and cache.ids[2].endswith("clip2.wav")
    for i, waveform in enumerate(waveforms):
        item = cache[i]
        assert item["index"] == i and item["row"] == [0, 1, 3][i]
        assert item["log_mel"].dtype == torch.float32 and item["log_mel"].shape == (cache.num_frames[i], 128)
        stored = np.load(tmp_path / "cache" / cache.files[i])
        assert stored.dtype == np.float16
        # unnormalised log-mel, equal to direct extraction up to float16 rounding (relative 2^-11)
        np.testing.assert_allclose(item["log_mel"].numpy(), unnormalised(extractor, waveform), rtol=6e-4, atol=1e-4)

    mean, std, frames = cache.mel_statistics()
    direct = np.concatenate([unnormalised(extractor, w) for w in waveforms]).astype(np.float64)
    assert frames == sum(cache.num_frames)
    assert abs(mean - direct.mean()) < 1e-3 and abs(std - direct.std()) < 1e-3


def test_resume_keeps_existing_files_and_rebuilds_missing_ones(fake_dataset, tmp_path):
    dataset, _ = fake_dataset
    extractor = AaspFeatureExtractor(feature_size=64)
    cache_dir = tmp_path / "cache"
    build_log_mel_cache(dataset, cache_dir, extractor)
    files = [cache_dir / f for f in LogMelCache(cache_dir).files]
    for path in files:  # an old mtime: any rewrite would show
        os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    files[1].unlink()  # lost ...
    files[2].write_bytes(files[2].read_bytes()[:200])  # ... and truncated (not possible with atomic writes, but)
    os.utime(files[2], ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))

    summary = build_log_mel_cache(dataset, cache_dir, extractor)
    assert (summary["num_kept"], summary["num_written"], summary["num_failed"]) == (1, 2, 1)
    assert files[0].stat().st_mtime_ns == 1_000_000_000_000_000_000  # kept as is
    assert files[1].exists() and files[2].stat().st_mtime_ns != 1_000_000_000_000_000_000  # rebuilt
    assert np.load(files[2]).shape == (LogMelCache(cache_dir).num_frames[2], 64)
    assert not list(cache_dir.rglob("*.tmp"))  # no temporary files left

    summary = build_log_mel_cache(dataset, cache_dir, extractor, overwrite=True)
    assert (summary["num_kept"], summary["num_written"]) == (0, 3)
    assert files[0].stat().st_mtime_ns != 1_000_000_000_000_000_000


def test_settings_mismatch_raises(fake_dataset, tmp_path):
    dataset, _ = fake_dataset
    extractor = AaspFeatureExtractor(feature_size=64)
    cache_dir = tmp_path / "cache"
    build_log_mel_cache(dataset.select([0]), cache_dir, extractor)
    with pytest.raises(ValueError, match="hop_length: cache 160 != extractor 320"):
        LogMelCache(cache_dir, AaspFeatureExtractor(feature_size=64, hop_length=320))
    with pytest.raises(ValueError, match="feature_size"):
        LogMelCache(cache_dir, AaspFeatureExtractor())
    with pytest.raises(ValueError, match="overwrite=True"):  # building on top with other settings
        build_log_mel_cache(dataset.select([0]), cache_dir, AaspFeatureExtractor(feature_size=64, mode="kaldi"))
    # statistics and padding act after the cache: other values are accepted
    LogMelCache(cache_dir, AaspFeatureExtractor(feature_size=64, mean=-5.0, std=3.0, max_frames=608))
    # an interrupted build (index written first, complete=False) is refused until resumed
    index = json.loads((cache_dir / "index.json").read_text())
    (cache_dir / "index.json").write_text(json.dumps({**index, "complete": False}))
    with pytest.raises(ValueError, match="incomplete"):
        LogMelCache(cache_dir)
    with pytest.raises(FileNotFoundError, match="not a log-mel cache"):
        LogMelCache(tmp_path)


def test_mel_moments_match_numpy():
    """The one accumulator of LogMelCache.mel_statistics and compute_mel_statistics: chunks of any shape (..., F)."""
    rng = np.random.default_rng(0)
    chunks = [
        rng.normal(-6.0, 3.0, size=shape).astype(dtype)
        for shape, dtype in [((37, 16), np.float16), ((2, 5, 16), np.float32), ((1, 16), np.float64)]
    ]
    moments = MelMoments(16)
    for chunk in chunks:
        moments.add(chunk)
    values = np.concatenate([c.reshape(-1, 16).astype(np.float64) for c in chunks])  # (48, 16)
    mean, std, frames = moments.result()
    assert frames == 48
    np.testing.assert_allclose([mean, std], [values.mean(), values.std()], rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="before any value"):
        MelMoments(16).result()


def test_crop_shapes_padding_and_determinism():
    extractor = AaspFeatureExtractor(feature_size=8)
    log_mel = torch.randn(100, 8) - 7.0
    crops = [crop_log_mel(log_mel, 30, torch.Generator().manual_seed(s), extractor) for s in (0, 0, 1)]
    assert crops[0].shape == (30, 8) and crops[0].dtype == torch.float32
    torch.testing.assert_close(crops[0], crops[1])  # same seed, same crop
    assert not torch.equal(crops[0], crops[2])
    ramp = torch.arange(100.0)[:, None].expand(100, 8)  # frame t holds t: the crop's first value is its start
    starts = set()
    for seed in range(1000):  # every start 0..70 is reachable; the crop is a window, normalised
        crop = crop_log_mel(ramp, 30, torch.Generator().manual_seed(seed), extractor)
        start = round(float(crop[0, 0]) * extractor.std + extractor.mean)
        torch.testing.assert_close(crop, (ramp[start : start + 30] - extractor.mean) / extractor.std)
        starts.add(start)
    assert starts == set(range(71))
    # shorter clip: whole, then padding_value frames; no random draw
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    short = crop_log_mel(log_mel[:20].numpy().astype(np.float16), 30, generator, extractor, target_frames=32)
    assert short.shape == (32, 8) and torch.equal(short[20:], torch.zeros(12, 8))
    assert torch.equal(generator.get_state(), state)
    # target_frames: crop 601 frames then pad to 608 (or truncate)
    assert crop_log_mel(log_mel, 60, None, extractor, target_frames=64).shape == (64, 8)
    assert crop_log_mel(log_mel, 60, None, extractor, target_frames=48).shape == (48, 8)
    raw = AaspFeatureExtractor(feature_size=8, do_normalize=False)
    torch.testing.assert_close(crop_log_mel(log_mel[:10], 10, None, raw), log_mel[:10])
    batch = crop_log_mel_batch([{"log_mel": log_mel}, log_mel[:5]], 16, torch.Generator().manual_seed(0), extractor)
    assert batch.shape == (2, 16, 8)
    with pytest.raises(ValueError, match=r"\(T, F\)"):
        crop_log_mel(log_mel[None], 10, None, extractor)


@pytest.mark.parametrize("mode", ["m2d", "kaldi"])
def test_crop_equals_featurising_the_waveform_crop(fake_dataset, tmp_path, mode):
    """A frame-domain crop starting at frame k = featurising the waveform crop starting at sample k * hop."""
    dataset, waveforms = fake_dataset
    extractor = AaspFeatureExtractor(mode=mode)
    build_log_mel_cache(dataset.select([3]), tmp_path / "cache", extractor)  # the 3 s clip
    log_mel = LogMelCache(tmp_path / "cache", extractor)[0]["log_mel"]
    waveform = waveforms[2]
    crop_samples = 16000  # 1 s
    num_frames = extractor.num_frames(crop_samples)
    # m2d: the centred window spans win_length / 2 samples either side, so 2 frames at each edge of a crop see the
    # crop's reflect padding instead of the neighbouring audio; kaldi frames never reach past the crop.
    edge = math.ceil(extractor.win_length / 2 / extractor.hop_length) if mode == "m2d" else 0
    for seed in range(3):
        crop = crop_log_mel(log_mel, num_frames, torch.Generator().manual_seed(seed), extractor)
        draw = torch.Generator().manual_seed(seed)  # the one draw crop_log_mel makes
        start = int(torch.randint(log_mel.shape[0] - num_frames + 1, (1,), generator=draw))
        assert start > edge  # an interior crop: its edge frames see neighbouring audio
        piece = waveform[start * extractor.hop_length : start * extractor.hop_length + crop_samples]
        expected = extractor(piece, sampling_rate=16000, return_tensors="pt")["input_values"][0, :num_frames]
        inner = slice(edge, num_frames - edge)
        torch.testing.assert_close(crop[inner], expected[inner], atol=3e-3, rtol=0)  # float16 / std
        if edge:  # and the edge frames do differ (the test would not notice a wrong edge otherwise)
            assert (crop[0] - expected[0]).abs().max() > 1e-2
            if start + num_frames < log_mel.shape[0]:  # a crop ending at the clip's end shares its right edge
                assert (crop[-1] - expected[-1]).abs().max() > 1e-2
    # a crop of the clip's start agrees on the left edge too (same reflect padding at the clip's own edge)
    crop = crop_log_mel(log_mel[:num_frames], num_frames, None, extractor)
    expected = extractor(waveform[:crop_samples], sampling_rate=16000, return_tensors="pt")["input_values"][0]
    torch.testing.assert_close(crop[: num_frames - edge], expected[: num_frames - edge], atol=3e-3, rtol=0)


def test_list_input_worker_processes_and_id_column(fake_dataset, tmp_path):
    dataset, waveforms = fake_dataset
    extractor = AaspFeatureExtractor(feature_size=32)
    in_process = build_log_mel_cache(dataset, tmp_path / "a", extractor, id_column="name")
    workers = build_log_mel_cache(dataset, tmp_path / "b", extractor, id_column="name", num_workers=2)
    assert in_process["num_failed"] == workers["num_failed"] == 1
    a, b = LogMelCache(tmp_path / "a"), LogMelCache(tmp_path / "b")
    assert a.ids == b.ids == ["c0", "c1", "c3"]
    for i in range(3):
        # two processes compute it: equal up to one float16 rounding step of the stored values
        torch.testing.assert_close(a[i]["log_mel"].float(), b[i]["log_mel"].float(), rtol=2e-3, atol=1e-3)
    # a plain list of in-memory clips (no paths: ids row-<i>)
    summary = build_log_mel_cache([{"array": w, "sampling_rate": 16000} for w in waveforms], tmp_path / "c", extractor)
    assert summary["num_written"] == 3 and LogMelCache(tmp_path / "c").ids == ["row-0", "row-1", "row-2"]
    torch.testing.assert_close(LogMelCache(tmp_path / "c")[2]["log_mel"], a[2]["log_mel"])
