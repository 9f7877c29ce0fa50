"""AaspFeatureExtractor against independent oracles (torchaudio, numpy), and its input contract.

Oracles: torchaudio.transforms.MelSpectrogram (m2d mode), torchaudio.compliance.kaldi.fbank (kaldi mode),
numpy's repeated-reflection padding (clips shorter than n_fft // 2 + 1, where torch's reflect pad refuses).
"""

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchaudio

from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor
from conftest import run_without_aasp_hf


SR = 16000
EPS = torch.finfo(torch.float32).eps
# The extractor's module (its front ends included): it ships with a checkpoint.
MODULE_PATHS = [Path(__file__).resolve().parents[1] / "aasp_hf" / "feature_extraction_aasp.py"]


def make_audio(num_samples, seed=0, dc=0.0):
    """Noise plus two tones (and an optional DC offset), float32 in about [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(num_samples) / SR
    x = (
        0.1 * rng.standard_normal(num_samples)
        + 0.4 * np.sin(2 * np.pi * 440.0 * t)
        + 0.2 * np.sin(2 * np.pi * 3150.0 * t + 0.3)
    )
    return (x + dc).astype(np.float32)


def m2d_oracle(wave, center=True):
    """torchaudio MelSpectrogram + log(x + eps) + M2D normalisation, (T, 128)."""
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=SR,
        n_fft=1024,
        win_length=400,
        hop_length=160,
        f_min=50,
        f_max=8000,
        n_mels=128,
        power=2.0,
        norm="slaney",
        mel_scale="slaney",
        center=center,
        pad_mode="reflect",
    )
    logmel = (mel(torch.as_tensor(wave)) + EPS).log()  # (128, T)
    return ((logmel - (-7.1)) / 4.1).T


def kaldi_oracle(wave):
    """EAT's front end: mean-subtracted waveform, kaldi fbank, (x + 4.268) / (2 * 4.569), (T, 128)."""
    wave = torch.as_tensor(wave)
    wave = wave - wave.mean()
    fbank = torchaudio.compliance.kaldi.fbank(
        wave[None],
        htk_compat=True,
        sample_frequency=SR,
        use_energy=False,
        window_type="hanning",
        num_mel_bins=128,
        dither=0.0,
        frame_shift=10,
    )
    return (fbank - (-4.268)) / (2 * 4.569)


def features(extractor, audio, **kwargs):
    kwargs.setdefault("sampling_rate", SR)
    kwargs.setdefault("return_tensors", "np")
    return extractor(audio, **kwargs)


# ------------------------------------------------------------------------------------------------------
# 1-2. Oracles
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_samples", [48000, 23457])
def test_m2d_matches_torchaudio_melspectrogram(num_samples):
    wave = make_audio(num_samples)
    out = features(AaspFeatureExtractor(), wave)
    ref = m2d_oracle(wave).numpy()
    num = ref.shape[0]
    assert num == 1 + num_samples // 160
    assert out["attention_mask"].sum() == num
    err = np.abs(out["input_values"][0, :num] - ref).max()
    print(f"m2d vs torchaudio MelSpectrogram, L={num_samples}: max abs err {err:.2e}")
    assert err < 1e-4


@pytest.mark.parametrize("num_samples", [300, 1])
def test_m2d_short_clip_matches_repeated_reflection(num_samples):
    # torch's reflect pad needs L > n_fft // 2; numpy's reflect pad reflects repeatedly (L = 1: repeats).
    wave = make_audio(num_samples, seed=3)
    padded = np.pad(wave, 512, mode="reflect")
    ref = m2d_oracle(padded, center=False).numpy()
    out = features(AaspFeatureExtractor(), wave)
    num = 1 + num_samples // 160
    assert ref.shape[0] == num
    np.testing.assert_allclose(out["input_values"][0, :num], ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("dc", [0.0, 0.25, 300.0])
def test_kaldi_matches_torchaudio_fbank(dc):
    # Per-frame DC removal hides the waveform-mean step up to float32 rounding; a large offset (300) makes
    # skipping that step visible (measured 4e-2 without it).
    wave = make_audio(48000 + 77, seed=1, dc=dc)
    extractor = AaspFeatureExtractor(mode="kaldi")
    out = features(extractor, wave)
    ref = kaldi_oracle(wave).numpy()
    num = ref.shape[0]
    assert num == extractor.num_frames(len(wave)) == 1 + (len(wave) - 400) // 160
    assert out["attention_mask"].sum() == num
    err = np.abs(out["input_values"][0, :num] - ref).max()
    print(f"kaldi vs torchaudio kaldi.fbank, dc={dc}: max abs err {err:.2e}")
    assert err < 1e-3


def test_mode_defaults_are_resolved():
    m2d = AaspFeatureExtractor()
    assert (m2d.n_fft, m2d.f_min, m2d.f_max, m2d.mean, m2d.std) == (1024, 50.0, 8000.0, -7.1, 4.1)
    kaldi = AaspFeatureExtractor(mode="kaldi")
    assert (kaldi.n_fft, kaldi.f_min, kaldi.f_max, kaldi.mean) == (512, 20.0, 8000.0, -4.268)
    assert kaldi.std == pytest.approx(2 * 4.569)
    assert AaspFeatureExtractor(mode="kaldi", mean=0.5, std=2.0).mean == 0.5
    assert m2d.num_frames(16000) == 101 and kaldi.num_frames(16000) == 98


# ------------------------------------------------------------------------------------------------------
# 3. Batched equals one by one
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, lengths",
    [
        ("m2d", [4800, 16000, 37920, 300, 1, 2, 513]),
        ("kaldi", [4800, 16000, 37920, 450, 400]),
    ],
)
def test_batched_equals_one_by_one(mode, lengths):
    extractor = AaspFeatureExtractor(mode=mode, padding_value=-3.0)
    clips = [make_audio(n, seed=i, dc=0.1 * i) for i, n in enumerate(lengths)]
    batch = features(extractor, clips)
    values, mask = batch["input_values"], batch["attention_mask"]
    frames = [extractor.num_frames(n) for n in lengths]

    assert values.shape == (len(clips), values.shape[1], 128) and values.dtype == np.float32
    assert mask.dtype == np.int64
    assert values.shape[1] % 16 == 0 and values.shape[1] >= max(frames) > values.shape[1] - 16
    assert mask.sum(axis=1).tolist() == frames
    for i, (clip, num) in enumerate(zip(clips, frames)):
        single = features(extractor, clip)["input_values"][0]
        np.testing.assert_allclose(values[i, :num], single[:num], atol=1e-5, rtol=0)
        assert (mask[i, :num] == 1).all() and (mask[i, num:] == 0).all()
        assert (values[i, num:] == -3.0).all()


def test_equal_length_2d_batch_equals_list():
    extractor = AaspFeatureExtractor()
    batch = np.stack([make_audio(8000, seed=s) for s in range(3)])  # (3, 8000)
    a = features(extractor, batch)["input_values"]
    b = features(extractor, list(batch))["input_values"]
    assert a.shape == (3, 64, 128)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)  # batched vs one by one: not bit-exact


# ------------------------------------------------------------------------------------------------------
# 4. max_frames: padding and truncation
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["m2d", "kaldi"])
def test_max_frames_truncates_to_the_leading_frames(mode):
    extractor = AaspFeatureExtractor(mode=mode)
    wave = make_audio(48000, seed=2, dc=0.3)  # ~300 frames
    full = features(extractor, wave)["input_values"][0]
    cut = features(extractor, [wave, wave[:8000]], max_frames=160)
    assert cut["input_values"].shape == (2, 160, 128)
    assert cut["attention_mask"].sum(axis=1).tolist() == [160, extractor.num_frames(8000)]
    np.testing.assert_allclose(cut["input_values"][0], full[:160], atol=1e-5, rtol=0)
    # Without truncation, the long clip keeps all its frames.
    kept = features(extractor, wave, max_frames=160, truncation=False)
    assert kept["attention_mask"].sum() == extractor.num_frames(48000)


def test_max_frames_padding_and_stored_default():
    extractor = AaspFeatureExtractor()
    wave = make_audio(16000)  # 101 frames
    out = features(extractor, wave, padding="max_length", max_frames=320)
    assert out["input_values"].shape == (1, 320, 128) and out["attention_mask"].sum() == 101
    assert features(extractor, wave)["input_values"].shape == (1, 112, 128)  # "longest": 101 -> 112

    stored = AaspFeatureExtractor(max_frames=64)
    assert features(stored, wave)["input_values"].shape == (1, 64, 128)  # truncated to the stored default
    assert features(stored, wave[:1600], padding="max_length")["input_values"].shape == (1, 64, 128)


def test_frame_multiple_and_time_patch_size_come_from_one_constant():
    from aasp_hf.configuration_aasp import TIME_PATCH_SIZE, AaspConfig

    assert AaspFeatureExtractor().frame_multiple == AaspConfig().time_patch_size == TIME_PATCH_SIZE
    assert AaspFeatureExtractor(mode="kaldi").frame_multiple == TIME_PATCH_SIZE


def test_max_frames_must_be_a_positive_multiple_of_16():
    extractor = AaspFeatureExtractor()
    wave = make_audio(16000)
    for bad in (100, 0, -16, 32.0):
        with pytest.raises(ValueError, match="max_frames"):
            features(extractor, wave, max_frames=bad)
    with pytest.raises(ValueError, match="multiple of frame_multiple=16"):
        AaspFeatureExtractor(max_frames=600)
    with pytest.raises(ValueError, match="max_frames"):
        features(extractor, wave, padding="max_length")


# ------------------------------------------------------------------------------------------------------
# 4b. normalize() and pad_frames(): the public steps __call__ (and the log-mel cache's crops) use
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode, mean, std", [("m2d", None, None), ("kaldi", None, None), ("m2d", -5.5, 3.25)])
def test_normalize_matches_numpy(mode, mean, std):
    extractor = AaspFeatureExtractor(mode=mode, mean=mean, std=std)
    expected_mean, expected_std = {"m2d": (-7.1, 4.1), "kaldi": (-4.268, 2 * 4.569)}[mode]
    if mean is not None:
        expected_mean, expected_std = mean, std
    log_mel = np.random.default_rng(0).normal(-6.0, 3.0, size=(2, 37, 128)).astype(np.float32)
    expected = (log_mel.astype(np.float64) - expected_mean) / expected_std  # float64 oracle
    before = log_mel.copy()

    as_numpy = extractor.normalize(log_mel)
    assert isinstance(as_numpy, np.ndarray) and as_numpy.shape == log_mel.shape
    np.testing.assert_allclose(as_numpy, expected, rtol=0, atol=1e-5)
    as_tensor = extractor.normalize(torch.from_numpy(log_mel))
    assert isinstance(as_tensor, torch.Tensor) and as_tensor.dtype == torch.float32
    np.testing.assert_allclose(as_tensor.numpy(), expected, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(log_mel, before)  # the input is left untouched


@pytest.mark.parametrize("mode", ["m2d", "kaldi"])
def test_normalize_is_what_call_applies(mode):
    wave = make_audio(20000, seed=3, dc=0.1)
    normalised = features(AaspFeatureExtractor(mode=mode), wave, return_tensors="pt")
    raw_extractor = AaspFeatureExtractor(mode=mode, do_normalize=False)
    raw = features(raw_extractor, wave, return_tensors="pt")
    real = raw["attention_mask"][0].bool()  # (T,)
    torch.testing.assert_close(
        raw_extractor.normalize(raw["input_values"][0, real]), normalised["input_values"][0, real], atol=1e-5, rtol=0
    )


def numpy_pad_frames(x, num_frames, padding_value, lengths=None):
    """Oracle: a (B, T, F) array filled with padding_value, then each clip's first min(length, T_in, T) frames."""
    out = np.full((x.shape[0], num_frames, x.shape[2]), padding_value, dtype=x.dtype)
    for i in range(x.shape[0]):
        keep = min(x.shape[1] if lengths is None else lengths[i], x.shape[1], num_frames)
        out[i, :keep] = x[i, :keep]
    return out


@pytest.mark.parametrize(
    "num_frames, lengths",
    [(48, None), (16, None), (None, None), (48, [37, 5, 0]), (32, [37, 20, 33]), (None, [1, 37, 16])],
)
def test_pad_frames_matches_numpy(num_frames, lengths):
    extractor = AaspFeatureExtractor(padding_value=-2.5)
    x = np.random.default_rng(1).standard_normal((3, 37, 8)).astype(np.float32)
    target = 48 if num_frames is None else num_frames  # None: 37 rounded up to a multiple of 16
    expected = numpy_pad_frames(x, target, -2.5, lengths)

    out = extractor.pad_frames(torch.from_numpy(x), num_frames, lengths=lengths)
    assert isinstance(out, torch.Tensor) and out.shape == (3, target, 8)
    np.testing.assert_array_equal(out.numpy(), expected)  # copies and constants only
    out_np = extractor.pad_frames(x, num_frames, lengths=lengths)
    assert isinstance(out_np, np.ndarray)
    np.testing.assert_array_equal(out_np, expected)
    # (T, F): one clip, no lengths
    np.testing.assert_array_equal(
        extractor.pad_frames(x[0], num_frames),
        expected[0] if lengths is None else numpy_pad_frames(x[:1], target, -2.5)[0],
    )


def test_pad_frames_is_what_call_applies():
    extractor = AaspFeatureExtractor(padding_value=-3.0)
    clips = [make_audio(n, seed=i) for i, n in enumerate((16000, 4000))]
    raw = features(extractor, clips, return_tensors="pt", padding="max_length", max_frames=160)
    frames = [extractor.num_frames(16000), extractor.num_frames(4000)]
    # Repadding the call's own output to the same length with its frame counts changes nothing; to 64 it truncates.
    torch.testing.assert_close(extractor.pad_frames(raw["input_values"], 160, lengths=frames), raw["input_values"])
    short = features(extractor, clips, return_tensors="pt", max_frames=64)["input_values"]
    torch.testing.assert_close(extractor.pad_frames(raw["input_values"], 64, lengths=frames), short, atol=1e-5, rtol=0)


def test_pad_frames_shape_errors():
    extractor = AaspFeatureExtractor()
    with pytest.raises(ValueError, match="pad_frames"):
        extractor.pad_frames(torch.zeros(5, 8, 16, 2))
    with pytest.raises(ValueError, match="pad_frames"):
        extractor.pad_frames(torch.zeros(3, 20, 16), lengths=[1, 2])
    with pytest.raises(ValueError, match="pad_frames"):
        extractor.pad_frames(torch.zeros(20, 16), lengths=[1])


# ------------------------------------------------------------------------------------------------------
# 5. Input types
# ------------------------------------------------------------------------------------------------------


def test_integer_pcm_float64_and_torch_inputs_match_float32():
    extractor = AaspFeatureExtractor()
    rng = np.random.default_rng(5)
    pcm16 = (rng.standard_normal(12000) * 6000).clip(-32768, 32767).astype(np.int16)
    ref = features(extractor, (pcm16 / 32768.0).astype(np.float32))["input_values"]

    np.testing.assert_allclose(features(extractor, pcm16)["input_values"], ref, rtol=0, atol=1e-6)
    np.testing.assert_allclose(features(extractor, torch.from_numpy(pcm16))["input_values"], ref, rtol=0, atol=1e-6)
    pcm32 = pcm16.astype(np.int32) * 65536
    np.testing.assert_allclose(features(extractor, pcm32)["input_values"], ref, rtol=0, atol=1e-6)

    pcm8 = (rng.integers(0, 256, 12000)).astype(np.uint8)
    ref8 = features(extractor, ((pcm8.astype(np.float32) - 128) / 128))["input_values"]
    np.testing.assert_allclose(features(extractor, pcm8)["input_values"], ref8, rtol=0, atol=1e-6)

    wave = make_audio(12000)
    ref = features(extractor, wave)["input_values"]
    np.testing.assert_allclose(features(extractor, wave.astype(np.float64))["input_values"], ref, rtol=0, atol=1e-6)
    np.testing.assert_allclose(features(extractor, torch.from_numpy(wave))["input_values"], ref, rtol=0, atol=1e-6)
    np.testing.assert_allclose(features(extractor, wave.tolist())["input_values"], ref, rtol=0, atol=1e-6)
    np.testing.assert_allclose(features(extractor, [torch.from_numpy(wave)])["input_values"], ref, rtol=0, atol=1e-6)


def test_input_is_not_modified():
    wave = make_audio(8000, dc=0.5)
    copy = wave.copy()
    features(AaspFeatureExtractor(mode="kaldi"), wave)
    features(AaspFeatureExtractor(), torch.from_numpy(wave))
    np.testing.assert_array_equal(wave, copy)


# ------------------------------------------------------------------------------------------------------
# 6. Errors say what was wrong and what to do
# ------------------------------------------------------------------------------------------------------


def test_sampling_rate_errors():
    extractor = AaspFeatureExtractor()
    wave = make_audio(8000)
    with pytest.raises(ValueError, match="16000") as missing:
        extractor(wave)
    assert "sampling_rate=16000" in str(missing.value) and "Resample" in str(missing.value)
    with pytest.raises(ValueError) as wrong:
        extractor(wave, sampling_rate=44100)
    message = str(wrong.value)
    for hint in ("44100", "16000", "torchaudio.functional.resample", "cast_column", "pipeline"):
        assert hint in message


def test_shape_errors():
    extractor = AaspFeatureExtractor()
    stereo = np.stack([make_audio(8000), make_audio(8000, seed=1)], axis=1)  # (L, 2)
    with pytest.raises(ValueError, match="mono=True") as err:
        features(extractor, stereo)
    assert "x.mean(axis=1)" in str(err.value)
    with pytest.raises(ValueError, match="3 dimensions"):
        features(extractor, np.zeros((2, 2, 8000), dtype=np.float32))
    with pytest.raises(ValueError, match=r"Clip 1 is 2-D.*mono=True"):
        features(extractor, [make_audio(8000), stereo])
    with pytest.raises(ValueError, match="1-D"):
        features(extractor, [np.zeros((1, 1, 10), dtype=np.float32)])


def test_content_errors_name_the_clip():
    extractor = AaspFeatureExtractor()
    good = make_audio(8000)
    bad = good.copy()
    bad[100] = np.nan
    with pytest.raises(ValueError, match=r"Clip\(s\) \[2\].*NaN or inf"):
        features(extractor, [good, good, bad])
    bad[100] = np.inf
    with pytest.raises(ValueError, match=r"\[0\]"):
        features(extractor, torch.from_numpy(bad))
    with pytest.raises(ValueError, match="Clip 1 is empty"):
        features(extractor, [good, np.zeros(0, dtype=np.float32)])
    with pytest.raises(ValueError, match="empty list"):
        features(extractor, [])
    with pytest.raises(ValueError, match="Clip 1 has 399 samples.*400"):
        features(AaspFeatureExtractor(mode="kaldi"), [good, good[:399]])
    with pytest.raises(ValueError, match="int64"):
        features(extractor, np.zeros(8000, dtype=np.int64))
    with pytest.raises(ValueError, match="str"):
        features(extractor, ["clip.wav"])


def test_option_errors():
    wave = make_audio(8000)
    with pytest.raises(ValueError, match="mode='mel'"):
        AaspFeatureExtractor(mode="mel")
    with pytest.raises(ValueError, match="padding='do_not_pad'"):
        features(AaspFeatureExtractor(), wave, padding="do_not_pad")
    with pytest.raises(ValueError, match="return_tensors"):
        features(AaspFeatureExtractor(), wave, return_tensors="tf")


# ------------------------------------------------------------------------------------------------------
# 7. Downmix
# ------------------------------------------------------------------------------------------------------


def test_mono_downmix_equals_feeding_the_mean():
    extractor = AaspFeatureExtractor()
    channels_first = np.stack([make_audio(12000), make_audio(12000, seed=1)])  # (2, L)
    ref = features(extractor, channels_first.mean(axis=0))["input_values"]
    np.testing.assert_allclose(features(extractor, channels_first, mono=True)["input_values"], ref, atol=1e-6)
    np.testing.assert_allclose(features(extractor, channels_first.T, mono=True)["input_values"], ref, atol=1e-6)
    as_list = features(extractor, [torch.from_numpy(channels_first.T), channels_first[0]], mono=True)
    np.testing.assert_allclose(as_list["input_values"][0], ref[0], atol=1e-6)
    single = features(extractor, channels_first[0])["input_values"][0]
    np.testing.assert_allclose(as_list["input_values"][1], single, atol=1e-6)
    # (2, L) is refused as ambiguous; batched=True makes it a batch of two clips.
    with pytest.raises(ValueError, match=r"one stereo clip .*or batched=True"):
        features(extractor, channels_first)
    assert features(extractor, channels_first, batched=True)["input_values"].shape[0] == 2


# ------------------------------------------------------------------------------------------------------
# 8. save_pretrained / from_pretrained
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["m2d", "kaldi"])
def test_save_and_reload(tmp_path, mode):
    extractor = AaspFeatureExtractor(mode=mode, max_frames=608)
    wave = make_audio(20000)
    before = features(extractor, wave)["input_values"]  # fills the private filter-bank cache
    extractor.save_pretrained(tmp_path)

    path = tmp_path / "preprocessor_config.json"
    assert path.stat().st_size < 4096
    saved = json.loads(path.read_text())
    assert saved["mode"] == mode and saved["max_frames"] == 608
    assert (saved["mean"], saved["std"]) == (extractor.mean, extractor.std)
    assert not any(key.startswith("_") for key in saved)

    reloaded = AaspFeatureExtractor.from_pretrained(tmp_path)
    assert reloaded.to_dict() == extractor.to_dict()
    if mode == "kaldi":
        assert (reloaded.mean, reloaded.std, reloaded.n_fft, reloaded.f_min) == (-4.268, 2 * 4.569, 512, 20.0)
    np.testing.assert_allclose(features(reloaded, wave)["input_values"], before, rtol=0, atol=1e-6)


def test_remote_code_loads_in_a_fresh_process(tmp_path):
    """The shipped file alone (no aasp_hf import) rebuilds the extractor through AutoFeatureExtractor."""
    AaspFeatureExtractor(mode="kaldi", max_frames=1024).save_pretrained(tmp_path / "fe")
    assert (tmp_path / "fe" / "feature_extraction_aasp.py").exists()
    assert (tmp_path / "fe" / "configuration_aasp.py").exists()  # imported relatively, so copied beside it
    result = run_without_aasp_hf(
        "import numpy as np\n"
        "from transformers import AutoFeatureExtractor\n"
        f"fe = AutoFeatureExtractor.from_pretrained({str(tmp_path / 'fe')!r}, trust_remote_code=True)\n"
        "out = fe(np.zeros(16000), sampling_rate=16000)\n"
        "print(type(fe).__module__.split('.')[0], fe.mode, fe.std, out['input_values'].shape)\n",
        tmp_path,
    )
    assert result.stdout.split()[-6:] == ["transformers_modules", "kaldi", "9.138", "(1,", "112,", "128)"]


# ------------------------------------------------------------------------------------------------------
# 9. Hub-shipped code imports nothing beyond numpy / torch / transformers / stdlib
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", MODULE_PATHS, ids=lambda path: path.name)
def test_module_imports_only_numpy_torch_transformers(path):
    tree = ast.parse(path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 or node.module is None or not node.module.startswith("aasp_hf")
            if node.level == 0:
                roots.add(node.module.split(".")[0])
    assert "torchaudio" not in roots and "scipy" not in roots and "aasp_hf" not in roots
    assert roots - set(sys.stdlib_module_names) <= {"numpy", "torch", "transformers"}, roots


# ------------------------------------------------------------------------------------------------------
# 10. Output types and devices
# ------------------------------------------------------------------------------------------------------


def test_return_types():
    extractor = AaspFeatureExtractor()
    wave = make_audio(8000)
    pt = extractor(wave, sampling_rate=SR, return_tensors="pt")
    assert isinstance(pt["input_values"], torch.Tensor) and pt["input_values"].dtype == torch.float32
    assert isinstance(pt["attention_mask"], torch.Tensor) and pt["attention_mask"].dtype == torch.int64
    for return_tensors in ("np", None):
        out = extractor(wave, sampling_rate=SR, return_tensors=return_tensors)
        assert isinstance(out["input_values"], np.ndarray) and isinstance(out["attention_mask"], np.ndarray)
        np.testing.assert_allclose(out["input_values"], pt["input_values"].numpy(), rtol=0, atol=1e-6)
    no_mask = extractor(wave, sampling_rate=SR, return_attention_mask=False)
    assert "attention_mask" not in no_mask


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["m2d", "kaldi"])
def test_cuda_matches_cpu(mode):
    extractor = AaspFeatureExtractor(mode=mode)
    clips = [make_audio(n, seed=n) for n in (4800, 16000, 450)]
    cpu = extractor(clips, sampling_rate=SR, return_tensors="pt")
    gpu = extractor(clips, sampling_rate=SR, return_tensors="pt", device="cuda")
    assert gpu["input_values"].device.type == "cuda" and gpu["attention_mask"].device.type == "cuda"
    torch.testing.assert_close(gpu["input_values"].cpu(), cpu["input_values"], atol=1e-4, rtol=0)
    torch.testing.assert_close(gpu["attention_mask"].cpu(), cpu["attention_mask"])


@pytest.mark.parametrize("block_frames", [7, 64, 300])
def test_m2d_blocks_do_not_change_the_features(block_frames, monkeypatch):
    """The CPU m2d path works in blocks of frames (a range of one clip's frames, or several whole short clips):
    any block size gives the one-block result, for a batch of unequal clips."""
    import aasp_hf.feature_extraction_aasp as module

    waves = [make_audio(n, seed=i) for i, n in enumerate((16000, 23457, 300, 4000))]
    extractor = AaspFeatureExtractor()
    monkeypatch.setattr(module, "_CPU_BLOCK_FRAMES", 10**9)
    whole = extractor(waves, sampling_rate=SR, return_tensors="pt")
    monkeypatch.setattr(module, "_CPU_BLOCK_FRAMES", block_frames)
    blocked = extractor(waves, sampling_rate=SR, return_tensors="pt")
    torch.testing.assert_close(blocked["attention_mask"], whole["attention_mask"])
    torch.testing.assert_close(blocked["input_values"], whole["input_values"], atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------------------
# 11. Per-clip normalisation (CMVN)
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["m2d", "kaldi"])
def test_per_clip_normalization_matches_a_float64_oracle_over_real_frames(mode):
    """Each clip, each mel bin: mean 0 and std 1 over the clip's real frames (0 for a constant bin), as numpy computes
    them in float64 from the globally normalised features; padding frames stay padding_value (-1.5 here, so that
    they are seen)."""
    clips = [make_audio(n, seed=i, dc=0.05 * i) for i, n in enumerate((16000, 5000, 9001))]
    plain = AaspFeatureExtractor(mode=mode, padding_value=-1.5)
    cmvn = AaspFeatureExtractor(mode=mode, padding_value=-1.5, per_clip_normalization=True)
    reference = features(plain, clips, padding="max_length", max_frames=128)
    out = features(cmvn, clips, padding="max_length", max_frames=128)
    assert np.array_equal(out["attention_mask"], reference["attention_mask"])
    for clip in range(3):
        real = reference["attention_mask"][clip].astype(bool)
        x = reference["input_values"][clip][real].astype(np.float64)  # (T_real, F)
        expected = (x - x.mean(axis=0)) / np.maximum(x.std(axis=0), 1e-5)
        np.testing.assert_allclose(out["input_values"][clip][real], expected, rtol=0, atol=2e-5)
        real_part = out["input_values"][clip][real].astype(np.float64)
        np.testing.assert_allclose(real_part.mean(axis=0), 0.0, atol=1e-5)
        varies = x.std(axis=0) > 1e-5  # kaldi mode has an empty filter (bin 3): constant, so 0 after CMVN
        np.testing.assert_allclose(real_part.std(axis=0), np.where(varies, 1.0, 0.0), atol=1e-4)
        assert (~real).any() and (out["input_values"][clip][~real] == -1.5).all()
    # a call may leave it out (a training collator augments first); the method on numpy and on tensors
    np.testing.assert_array_equal(
        features(cmvn, clips, padding="max_length", max_frames=128, per_clip_normalization=False)["input_values"],
        reference["input_values"],
    )
    lengths = reference["attention_mask"].sum(axis=1)
    again = cmvn.normalize_per_clip(reference["input_values"], lengths)
    assert isinstance(again, np.ndarray)
    np.testing.assert_array_equal(again, out["input_values"])
    torch.testing.assert_close(
        cmvn.normalize_per_clip(torch.from_numpy(reference["input_values"]), lengths),
        torch.from_numpy(out["input_values"]),
    )


def test_per_clip_normalization_of_a_constant_bin_is_zero_and_is_saved_only_when_on(tmp_path):
    """Digital silence (every bin constant) becomes 0, not 0 / 0. The option is saved in preprocessor_config.json
    when on and reloads; off, the file is what it was before the option existed, and a saved file without the key
    (tests/fixtures/checkpoints_v1) loads with it off."""
    cmvn = AaspFeatureExtractor(per_clip_normalization=True)
    silent = features(cmvn, np.zeros(8000, dtype=np.float32))["input_values"]
    assert np.isfinite(silent).all() and (silent == 0).all()
    with pytest.raises(ValueError, match="normalize_per_clip takes"):
        cmvn.normalize_per_clip(np.zeros((10, 4), dtype=np.float32), [10])

    cmvn.save_pretrained(tmp_path / "on")
    assert json.loads((tmp_path / "on" / "preprocessor_config.json").read_text())["per_clip_normalization"] is True
    assert AaspFeatureExtractor.from_pretrained(tmp_path / "on").per_clip_normalization is True
    AaspFeatureExtractor().save_pretrained(tmp_path / "off")
    assert "per_clip_normalization" not in json.loads((tmp_path / "off" / "preprocessor_config.json").read_text())
    old = Path(__file__).resolve().parent / "fixtures" / "checkpoints_v1" / "single_label"
    assert "per_clip_normalization" not in json.loads((old / "preprocessor_config.json").read_text())
    loaded = AaspFeatureExtractor.from_pretrained(old)
    assert loaded.per_clip_normalization is False
    wave = make_audio(12000)
    expected = features(AaspFeatureExtractor(feature_size=32), wave)  # the fixture's settings
    np.testing.assert_array_equal(features(loaded, wave)["input_values"], expected["input_values"])
    with pytest.raises(ValueError, match="per_clip_normalisation.*did you mean 'per_clip_normalization'"):
        AaspFeatureExtractor(per_clip_normalisation=True)
