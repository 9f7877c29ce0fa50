"""Fine-tuning augmentations (aasp_hf.training.augment): mixup and SpecAugment as pure functions of a generator."""

import numpy as np
import pytest
import torch

from aasp_hf.training.augment import mixup, sample_mask_bounds, spec_augment


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
