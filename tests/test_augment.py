"""Fine-tuning augmentations (aasp_hf.training.augment): mixup, SpecAugment (and its own frequency-mask width, through
`step.augmented_inputs`), VTLP and the random equaliser as pure functions of a generator, each against an oracle of
its own: numpy's interpolation for VTLP, the extractor's filter banks for the mel axis, a gain applied to the waveform
for the dB units."""

import math

import numpy as np
import pytest
import torch
from transformers.audio_utils import hertz_to_mel

from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor
from aasp_hf.training.augment import (
    LogMelAugmentation,
    db_to_log_mel_units,
    mel_bin_frequencies,
    mixup,
    random_eq,
    sample_eq_curves_db,
    sample_mask_bounds,
    spec_augment,
    vtlp,
    vtlp_warp,
)
from aasp_hf.training.step import augmented_inputs


def test_mixup_draws_lambda_from_beta_and_mixes_inputs_and_labels_alike():
    x = torch.randn(6, 16, 8)
    y = torch.nn.functional.one_hot(torch.arange(6) % 3, 3).float()
    mask = torch.ones(6, 16, dtype=torch.long)
    mask[2, 10:] = 0
    mixed, targets, mixed_mask, lam, perm = mixup(x, y, 0.8, np.random.default_rng(5), mask)
    oracle = np.random.default_rng(5)  # the same draws, in the documented order: λ, then the permutation
    assert lam == pytest.approx(oracle.beta(0.8, 0.8))
    assert perm.tolist() == oracle.permutation(6).tolist()
    torch.testing.assert_close(mixed, lam * x + (1 - lam) * x[perm])
    torch.testing.assert_close(targets, lam * y + (1 - lam) * y[perm])
    torch.testing.assert_close(targets.sum(1), torch.ones(6))  # still a distribution per clip
    assert torch.equal(mixed_mask, mask | mask[perm])
    again = mixup(x, y, 0.8, np.random.default_rng(5), mask)
    assert torch.equal(again[0], mixed) and again[3] == lam
    other = mixup(x, y, 0.8, np.random.default_rng(6), mask)
    assert other[3] != lam


def test_mixup_lambda_distribution_and_alpha_zero():
    rng = np.random.default_rng(0)
    x, y = torch.randn(4, 3, 2), torch.eye(4)
    lams = np.array([mixup(x, y, 0.8, rng)[3] for _ in range(2000)])
    assert 0 < lams.min() and lams.max() < 1
    assert lams.mean() == pytest.approx(0.5, abs=0.03)  # Beta(a, a): mean 1/2, var 1/(4(2a+1)) = 0.0962
    assert lams.var() == pytest.approx(1 / (4 * (2 * 0.8 + 1)), rel=0.1)
    mixed, targets, _, lam, _ = mixup(x, y, 0.0, rng)
    assert lam == 1.0 and torch.equal(mixed, x) and torch.equal(targets, y)


def test_spec_augment_masks_are_at_most_one_fifth_and_exactly_where_reported():
    x = torch.randn(300, 50, 40) + 5.0  # no natural zeros
    out, time_bounds, freq_bounds = spec_augment(x, np.random.default_rng(1))
    time_widths, freq_widths = np.diff(time_bounds, axis=1)[:, 0], np.diff(freq_bounds, axis=1)[:, 0]
    assert time_widths.max() == 50 // 5 and freq_widths.max() == 40 // 5  # the bound is reached, never passed
    assert time_widths.min() == 0 and freq_widths.min() == 0
    assert (time_bounds[:, 1] <= 50).all() and (freq_bounds[:, 1] <= 40).all()
    for b in range(300):
        expected = torch.zeros(50, 40, dtype=torch.bool)
        expected[time_bounds[b, 0] : time_bounds[b, 1]] = True
        expected[:, freq_bounds[b, 0] : freq_bounds[b, 1]] = True
        assert torch.equal(out[b] == 0, expected)
        assert torch.equal(out[b][~expected], x[b][~expected])
    assert not (x == 0).any()  # the input was not modified


def test_spec_augment_is_deterministic_given_the_generator():
    x = torch.randn(4, 32, 16)
    a = spec_augment(x, np.random.default_rng(3), 0.25, 0.5, mask_value=-1.0)
    b = spec_augment(x, np.random.default_rng(3), 0.25, 0.5, mask_value=-1.0)
    c = spec_augment(x, np.random.default_rng(4), 0.25, 0.5, mask_value=-1.0)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    assert np.diff(a[1], axis=1).max() <= 8 and np.diff(a[2], axis=1).max() <= 8
    with pytest.raises(ValueError, match="B, T, F"):
        spec_augment(torch.randn(32, 16), np.random.default_rng(0))


def test_mask_bounds_start_is_uniform_over_valid_positions():
    bounds = sample_mask_bounds(20000, 10, 2, np.random.default_rng(0))
    assert set(np.diff(bounds, axis=1)[:, 0]) == {0, 1, 2}
    assert bounds[:, 0].min() == 0 and bounds[:, 1].max() == 10


def test_augmented_inputs_freq_mask_fraction_widens_only_the_frequency_mask():
    """Unset, the frequency mask is as wide as the time mask's fraction (the draws as before); set, only the
    frequency mask's bound moves."""
    batch = {
        "input_values": torch.randn(400, 50, 40) + 5.0,
        "attention_mask": torch.ones(400, 50, dtype=torch.long),
        "labels": torch.zeros(400, dtype=torch.long),
    }
    default = augmented_inputs(batch, 3, False, 0.0, 0.2, np.random.default_rng(0))[0]
    same = augmented_inputs(batch, 3, False, 0.0, 0.2, np.random.default_rng(0), freq_mask_fraction=0.2)[0]
    direct = spec_augment(batch["input_values"], np.random.default_rng(0), 0.2, 0.2)[0]
    assert torch.equal(default, direct) and torch.equal(same, direct)
    wide = augmented_inputs(batch, 3, False, 0.0, 0.2, np.random.default_rng(0), freq_mask_fraction=0.5)[0]
    masked_bins = (wide == 0).all(dim=1).sum(dim=1)  # (B,) bins masked in every frame
    masked_frames = (wide == 0).all(dim=2).sum(dim=1)  # (B,) frames masked in every bin
    assert masked_bins.max() == 40 // 2 and masked_frames.max() == 50 // 5


# ----------------------------------------------------------------------------------------------- VTLP
MEL_SCALE = {"m2d": "slaney", "kaldi": "kaldi"}  # each front end's filters


@pytest.mark.parametrize("mode", ["m2d", "kaldi"])
def test_mel_bin_frequencies_are_the_centres_of_the_extractor_s_filters(mode):
    """The mel axis VTLP warps is the extractor's: each filter of its bank peaks within one FFT bin of the centre."""
    extractor = AaspFeatureExtractor(mode=mode)
    filters = extractor._front_end().mel_filters()  # (K, F)
    fft_hz = np.arange(filters.shape[0]) * extractor.sampling_rate / extractor.n_fft
    centres = mel_bin_frequencies(extractor.feature_size, extractor.f_min, extractor.f_max, MEL_SCALE[mode])
    peaks = fft_hz[filters.argmax(axis=0)]  # (F,)
    resolution = extractor.sampling_rate / extractor.n_fft
    used = filters.max(axis=0) > 0  # kaldi's lowest filters may fall between FFT bins
    assert np.abs(peaks - centres)[used].max() <= resolution


def test_vtlp_warp_is_the_papers_piecewise_linear_map_with_the_top_fixed():
    f = np.linspace(0, 8000, 8001)
    for alpha in (0.9, 1.0, 1.1):
        warped = vtlp_warp(f, alpha, 8000.0)
        knee = 4800 * min(alpha, 1) / alpha
        np.testing.assert_allclose(warped[f <= knee], alpha * f[f <= knee])
        assert warped[-1] == pytest.approx(8000.0) and (np.diff(warped) > 0).all()  # monotone, top fixed
        assert warped[f > knee][0] == pytest.approx(alpha * knee, abs=2 * alpha)  # continuous at the knee
        assert warped.max() <= 8000.0 + 1e-9
    np.testing.assert_array_equal(vtlp_warp(f, 1.0, 8000.0), f)


@pytest.mark.parametrize("mode", ["m2d", "kaldi"])
def test_vtlp_matches_numpy_interpolation_and_alpha_one_is_the_identity(mode):
    extractor = AaspFeatureExtractor(mode=mode)
    scale = MEL_SCALE[mode]
    x = torch.randn(3, 20, 128)
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, 15:] = 0
    x[1, 15:] = 0.0  # padding frames
    alphas = np.array([0.9, 1.0, 1.13])
    out = vtlp(x, alphas, extractor.f_min, extractor.f_max, scale, attention_mask=mask)
    assert torch.equal(out[1], x[1])  # α = 1: exactly the input (padding included)
    centres = mel_bin_frequencies(128, extractor.f_min, extractor.f_max, scale)
    for clip, alpha in enumerate(alphas):
        source = hertz_to_mel(vtlp_warp(centres, alpha, extractor.f_max), scale)  # (F,) mel read by each bin
        for frame in range(20):  # np.interp clamps outside the range: edge clamping
            expected = np.interp(source, hertz_to_mel(centres, scale), x[clip, frame].double().numpy())
            np.testing.assert_allclose(out[clip, frame].numpy(), expected, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="positive warp factors"):
        vtlp(x, [1.0, 0.0, 1.0])


@pytest.mark.parametrize("alpha", [0.9, 1.1])
def test_vtlp_moves_a_one_bin_peak_to_the_bin_of_its_frequency_over_alpha(alpha):
    """A peak at bin k (centre f_k, below the knee) comes out at the bin whose centre is nearest f_k / α on the mel
    axis: α > 1 moves it down, α < 1 up."""
    centres = mel_bin_frequencies(128, 50.0, 8000.0)
    k = int(np.searchsorted(centres, 1000.0))
    x = torch.zeros(1, 4, 128)
    x[..., k] = 1.0
    out = vtlp(x, [alpha], 50.0, 8000.0)
    expected = int(np.argmin(np.abs(hertz_to_mel(centres, "slaney") - hertz_to_mel(centres[k] / alpha, "slaney"))))
    assert int(out[0, 0].argmax()) == expected and (expected < k) == (alpha > 1)
    assert abs(expected - k) >= 3  # about 10 % in frequency is several bins at 1 kHz


# ----------------------------------------------------------------------------------------------- random EQ
def test_random_eq_curves_stay_within_d_db_and_d_zero_is_the_identity():
    curves = sample_eq_curves_db(3000, 128, 6.0, np.random.default_rng(0))
    assert curves.shape == (3000, 128) and np.abs(curves).max() <= 6.0
    assert np.abs(curves).max() > 4.5  # the range is used
    assert np.abs(np.diff(curves, axis=1)).max() < 6.0 * 0.2  # smooth: no jump between neighbouring bins
    tilt_only = curves[:, -1] - curves[:, 0]  # the ends differ (a tilt), in both directions
    assert (tilt_only > 1).any() and (tilt_only < -1).any()
    x = torch.randn(2, 7, 128)
    zero = sample_eq_curves_db(2, 128, 0.0, np.random.default_rng(1))
    assert (zero == 0).all() and torch.equal(random_eq(x, zero, 4.1), x)


def test_random_eq_converts_db_to_the_extractor_s_natural_log_normalised_units():
    """Oracle: a gain of g on the waveform is 20 log10(g) dB on the power of every mel bin; the extractor's features
    move by exactly what `db_to_log_mel_units` gives for that many dB (away from the eps floor)."""
    rng = np.random.default_rng(0)
    wave = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    for extractor in (
        AaspFeatureExtractor(),
        AaspFeatureExtractor(mode="kaldi"),
        AaspFeatureExtractor(do_normalize=False),
    ):
        std = extractor.std if extractor.do_normalize else 1.0
        quiet, loud = (extractor(w, sampling_rate=16000, return_tensors="pt") for w in (wave, 2 * wave))
        real = quiet["attention_mask"].bool()  # (1, T): m2d's 101 frames, kaldi's 98
        shifted = random_eq(quiet["input_values"], np.full((1, 128), 20 * math.log10(2.0)), std)[real]  # (T, F)
        expected, quiet = loud["input_values"][real], quiet["input_values"][real]
        mean = extractor.mean if extractor.do_normalize else 0.0
        above_floor = quiet * std + mean > math.log(torch.finfo(torch.float32).eps) + 5  # not kaldi's empty filter
        assert above_floor.float().mean() > 0.95
        torch.testing.assert_close(shifted[above_floor], expected[above_floor], atol=2e-3, rtol=0)
    assert db_to_log_mel_units(10.0) == pytest.approx(math.log(10.0))
    assert db_to_log_mel_units(1.0, 4.1) == pytest.approx(0.0562, abs=1e-4)


def test_random_eq_leaves_padding_frames_and_log_mel_augmentation_draws_in_order():
    x = torch.randn(2, 10, 32)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[0, 6:] = 0
    out = random_eq(x, np.full((2, 32), 3.0), 1.0, attention_mask=mask)
    assert torch.equal(out[0, 6:], x[0, 6:]) and not torch.equal(out[0, :6], x[0, :6])
    extractor = AaspFeatureExtractor(feature_size=32)
    assert LogMelAugmentation.for_extractor(extractor) is None  # both off: no augmentation, no draw
    both = LogMelAugmentation.for_extractor(extractor, (0.9, 1.1), 4.0)
    augmented = both(x, mask, np.random.default_rng(3))
    oracle = np.random.default_rng(3)  # the documented draws: B warp factors, then B × 4 for the curves
    alphas = oracle.uniform(0.9, 1.1, size=2)
    expected = vtlp(x, alphas, 50.0, 8000.0, "slaney", mask)
    expected = random_eq(expected, sample_eq_curves_db(2, 32, 4.0, oracle), 4.1, mask)
    assert torch.equal(augmented, expected)
    assert torch.equal(both(x, mask, np.random.default_rng(3)), augmented)  # reproducible from the generator
