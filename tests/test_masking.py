"""Tests for aasp_hf/data/masking.py: inverse block masking of the student views and the predictor's query sampling.

Grid convention: F̃ frequency patches x T̃ time patches, tokens time-major (index t·F̃ + f); block sizes (f x t).
"""

import random

import pytest
import torch
import torch.nn.functional as F

from aasp_hf import AaspConfig
from aasp_hf.data.masking import (
    build_batch_masks,
    draw_batch_masks,
    num_visible_tokens,
    sample_batch_masks,
    sample_query_indices,
    sample_view_masks,
    visible_indices,
)


PAPER_GRID = (8, 38)  # F̃ x T̃ of a 608-frame, 128-mel spectrogram with 16 x 16 patches: N = 304


def _generator(seed):
    return torch.Generator().manual_seed(seed)


def _ratio_for(num_visible, num_tokens):
    """A mask ratio whose round((1 - ratio)·N) is exactly ``num_visible``."""
    ratio = 1.0 - num_visible / num_tokens
    assert num_visible_tokens(num_tokens, ratio) == num_visible
    return ratio


def _visible_grid(mask, num_f, num_t):
    """(B, M, N) mask -> float (B·M, F̃, T̃) grid, 1 = visible."""
    visible = (~mask).reshape(-1, num_t, num_f).float()  # (B, M, N) -> (R, T̃, F̃), time-major tokens
    return visible.transpose(1, 2)  # (R, F̃, T̃)


def _contains_full_rectangle(mask, num_f, num_t, block_f, block_t):
    """(R,) bool: the view's visible set contains a full block_f x block_t (frequency x time) rectangle."""
    grid = _visible_grid(mask, num_f, num_t)[:, None]  # (R, 1, F̃, T̃)
    window_sums = F.conv2d(grid, torch.ones(1, 1, block_f, block_t))  # (R, 1, F̃ - f_b + 1, T̃ - t_b + 1)
    return (window_sums == block_f * block_t).flatten(1).any(-1)


def _fraction_with_visible_neighbour(mask, num_f, num_t):
    """Fraction of visible tokens that have at least one visible 4-neighbour on the F̃ x T̃ grid."""
    grid = _visible_grid(mask, num_f, num_t)  # (R, F̃, T̃)
    padded = F.pad(grid, (1, 1, 1, 1))  # (R, F̃ + 2, T̃ + 2)
    neighbours = padded[:, :-2, 1:-1] + padded[:, 2:, 1:-1] + padded[:, 1:-1, :-2] + padded[:, 1:-1, 2:]
    return float(((neighbours > 0).float() * grid).sum() / grid.sum())


def _reference_masks(num_views, num_f, num_t, mask_ratio, block_sizes, rng):
    """Literal, one-view-at-a-time implementation of the sampling rule (oracle for the vectorised sampler)."""
    num_tokens = num_f * num_t
    num_visible = round((1 - mask_ratio) * num_tokens)
    masks = torch.ones(num_views, num_tokens, dtype=torch.bool)
    for view in range(num_views):
        block_f, block_t = rng.choice(block_sizes)
        block_f, block_t = min(block_f, num_f), min(block_t, num_t)
        visible, first = set(), True
        while len(visible) < num_visible:
            f0, t0 = rng.randrange(num_f - block_f + 1), rng.randrange(num_t - block_t + 1)
            block = {(t0 + dt) * num_f + f0 + df for dt in range(block_t) for df in range(block_f)}
            if len(visible | block) > num_visible:
                if first:
                    visible = set(rng.sample(sorted(block), num_visible))
                break
            visible, first = visible | block, False
        visible |= set(rng.sample(sorted(set(range(num_tokens)) - visible), num_visible - len(visible)))
        masks[view, sorted(visible)] = False
    return masks


# ----------------------------------------------------------------------------------------------------------------------
# 1. shape, dtype, exact visible count
@pytest.mark.parametrize(
    "num_f, num_t, mask_ratio",
    [(8, 38, 0.8), (2, 4, 0.8), (8, 38, 0.5), (8, 38, 0.95), (3, 5, 0.6), (8, 64, 0.8), (4, 6, 0.5)],
)
def test_shape_dtype_and_exact_visible_count(num_f, num_t, mask_ratio):
    mask = sample_view_masks(6, 4, num_f, num_t, mask_ratio=mask_ratio, generator=_generator(0))
    num_tokens = num_f * num_t
    assert mask.shape == (6, 4, num_tokens)
    assert mask.dtype == torch.bool
    expected = round((1 - mask_ratio) * num_tokens)
    assert num_visible_tokens(num_tokens, mask_ratio) == expected
    assert ((~mask).sum(-1) == expected).all()


def test_paper_grid_leaves_61_of_304_visible():
    assert num_visible_tokens(304, 0.8) == 61
    mask = sample_view_masks(3, 4, *PAPER_GRID, generator=_generator(0))
    assert ((~mask).sum(-1) == 61).all()


def test_device_argument():
    mask = sample_view_masks(2, 2, *PAPER_GRID, generator=_generator(0), device="cpu")
    assert mask.device.type == "cpu"
    mask = sample_view_masks(2, 2, *PAPER_GRID, device="cpu")  # global RNG
    assert ((~mask).sum(-1) == 61).all()


# ----------------------------------------------------------------------------------------------------------------------
# 2. determinism and independence
def test_seeded_generator_is_deterministic():
    first = sample_view_masks(8, 4, *PAPER_GRID, generator=_generator(123))
    second = sample_view_masks(8, 4, *PAPER_GRID, generator=_generator(123))
    other = sample_view_masks(8, 4, *PAPER_GRID, generator=_generator(124))
    assert torch.equal(first, second)
    assert not torch.equal(first, other)


def test_views_and_clips_are_sampled_independently():
    mask = sample_view_masks(16, 4, *PAPER_GRID, generator=_generator(0))
    flat = mask.reshape(64, -1)  # (B·M, N)
    # No two views in the batch coincide (the chance of a collision is astronomically small).
    assert len({tuple(row.tolist()) for row in flat}) == 64
    # Views of one clip share no more than random views of different clips: mean overlap of the visible sets.
    visible = (~mask).float()  # (B, M, N)
    within = torch.einsum("bmn,bkn->bmk", visible, visible)  # (B, M, M)
    off_diagonal = within[:, ~torch.eye(4, dtype=torch.bool)].mean()
    across = torch.einsum("bmn,cmn->bcm", visible, visible)  # (B, B, M) same view index, different clips
    across = across[~torch.eye(16, dtype=torch.bool)].mean()
    assert abs(float(off_diagonal - across)) < 3.0


# ----------------------------------------------------------------------------------------------------------------------
# 3. block structure
def test_visible_set_is_made_of_blocks_not_scattered_tokens():
    mask = sample_view_masks(500, 4, *PAPER_GRID, generator=_generator(0))
    block = _fraction_with_visible_neighbour(mask, *PAPER_GRID)
    # Uniform random masking at the same ratio, as the baseline.
    num_tokens, num_visible = 304, 61
    scores = torch.rand(2000, num_tokens, generator=_generator(1))
    uniform = torch.ones(2000, num_tokens, dtype=torch.bool)
    uniform.scatter_(1, scores.topk(num_visible, dim=-1).indices, False)
    baseline = _fraction_with_visible_neighbour(uniform, *PAPER_GRID)
    assert baseline < 0.65  # ≈ 1 - 0.8^4 away from the edges
    assert block > baseline + 0.2  # ≈ 0.87 with blocks


def test_every_view_contains_a_full_block():
    mask = sample_view_masks(200, 4, *PAPER_GRID, block_sizes=((3, 8),), generator=_generator(0))
    assert _contains_full_rectangle(mask, *PAPER_GRID, 3, 8).all()
    # The transposed rectangle does not fit by chance: the orientation (frequency x time) is respected.
    assert _contains_full_rectangle(mask, *PAPER_GRID, 8, 3).float().mean() < 0.05

    mask = sample_view_masks(200, 4, *PAPER_GRID, generator=_generator(1))  # paper block sizes
    contains = torch.stack([_contains_full_rectangle(mask, *PAPER_GRID, f, t) for f, t in ((3, 8), (4, 6), (5, 5))])
    assert contains.any(0).all()


def test_block_size_is_chosen_uniformly_per_view():
    # Three shapes of area 6 and V = 6: each view shows exactly its first block, so its shape is observable.
    num_f, num_t = PAPER_GRID
    shapes = ((1, 6), (6, 1), (2, 3))
    mask = sample_view_masks(
        300, 4, num_f, num_t, mask_ratio=_ratio_for(6, 304), block_sizes=shapes, generator=_generator(0)
    )
    grid = _visible_grid(mask, num_f, num_t)  # (R, F̃, T̃)
    rows = grid.any(2).sum(-1)  # (R,) frequency extent of the visible set
    cols = grid.any(1).sum(-1)  # (R,) time extent
    observed = torch.stack([(rows == f) & (cols == t) for f, t in shapes])  # (3, R)
    assert observed.sum(0).eq(1).all()  # every view is exactly one of the shapes
    fractions = observed.float().mean(1)
    assert (fractions - 1 / 3).abs().max() < 0.06  # 1200 views: std ≈ 0.014


def test_block_larger_than_grid_is_clipped():
    # 5 x 2 block on a 3 x 10 grid -> a full-height 3 x 2 block, which is exactly V = 6 tokens.
    mask = sample_view_masks(50, 4, 3, 10, mask_ratio=_ratio_for(6, 30), block_sizes=((5, 2),), generator=_generator(0))
    assert _contains_full_rectangle(mask, 3, 10, 3, 2).all()


def test_first_block_larger_than_budget_keeps_a_random_subset_of_it():
    # V = 10 < 25 = area of the 5 x 5 block: the visible tokens are a random 10 of one 5 x 5 block.
    num_f, num_t = PAPER_GRID
    mask = sample_view_masks(
        100, 4, num_f, num_t, mask_ratio=_ratio_for(10, 304), block_sizes=((5, 5),), generator=_generator(0)
    )
    patterns = set()
    for view in _visible_grid(mask, num_f, num_t):  # (F̃, T̃) per view
        f_idx, t_idx = view.nonzero(as_tuple=True)
        assert int(f_idx.max() - f_idx.min()) < 5 and int(t_idx.max() - t_idx.min()) < 5
        patterns.add(tuple(((f_idx - f_idx.min()) * 5 + t_idx - t_idx.min()).tolist()))
    # ... and a random subset of the block, not a fixed pattern inside it (C(25, 10) patterns are possible).
    assert len(patterns) > 350


# ----------------------------------------------------------------------------------------------------------------------
# 4. grid orientation: time-major tokens, (frequency x time) blocks
def test_one_by_four_block_is_one_frequency_row_of_four_consecutive_time_patches():
    num_f, num_t = PAPER_GRID
    mask = sample_view_masks(
        50, 4, num_f, num_t, mask_ratio=_ratio_for(4, 304), block_sizes=((1, 4),), generator=_generator(0)
    )
    tokens = visible_indices(mask).reshape(-1, 4)  # (R, 4)
    f, t = tokens % num_f, tokens // num_f  # token index = t·F̃ + f
    assert (f == f[:, :1]).all()
    assert (t - t[:, :1] == torch.arange(4)).all()
    assert len(set(f[:, 0].tolist())) > 4 and len(set(t[:, 0].tolist())) > 10  # positions vary


# ----------------------------------------------------------------------------------------------------------------------
# 5. marginal visibility frequency
def test_marginal_visibility_matches_the_reference_rule_and_has_no_extra_bias():
    num_f, num_t = PAPER_GRID
    mask = sample_view_masks(5000, 4, num_f, num_t, generator=_generator(0))
    frequency = _visible_grid(mask, num_f, num_t).mean(0)  # (F̃, T̃) visibility frequency per token
    assert abs(float(frequency.mean()) - 61 / 304) < 1e-6
    # Only in-grid block placement makes edges rarer (≈ 0.18 min/max for the paper grid); nothing more.
    assert float(frequency.min() / frequency.max()) > 0.1
    # Block placement is symmetric in frequency and time: the map must be too (catches off-by-one positions).
    assert (frequency - frequency.flip(0)).abs().max() < 0.03
    assert (frequency - frequency.flip(1)).abs().max() < 0.03
    # Away from the time edges (beyond the longest block), every time column is equally likely.
    interior = frequency[:, 8:-8].mean(0)  # (T̃ - 16,)
    assert float(interior.min() / interior.max()) > 0.9

    # Same per-frequency-row and per-time-column marginals as the literal one-view-at-a-time rule.
    reference = _reference_masks(4000, num_f, num_t, 0.8, ((3, 8), (4, 6), (5, 5)), random.Random(0))
    reference = _visible_grid(reference[:, None], num_f, num_t).mean(0)  # (F̃, T̃)
    assert (frequency.mean(1) - reference.mean(1)).abs().max() < 0.01  # per frequency row
    assert (frequency.mean(0) - reference.mean(0)).abs().max() < 0.02  # per time column


def test_neighbour_statistic_matches_the_reference_rule():
    # The shape of the visible set (not only its marginals) follows the rule: blocks + random single tokens.
    num_f, num_t = PAPER_GRID
    mask = sample_view_masks(1000, 4, num_f, num_t, generator=_generator(2))
    reference = _reference_masks(4000, num_f, num_t, 0.8, ((3, 8), (4, 6), (5, 5)), random.Random(1))
    ours = _fraction_with_visible_neighbour(mask, num_f, num_t)
    theirs = _fraction_with_visible_neighbour(reference[:, None], num_f, num_t)
    assert abs(ours - theirs) < 0.01


# ----------------------------------------------------------------------------------------------------------------------
# 6. predictor queries
def test_query_indices_are_a_sorted_subset_of_the_masked_tokens():
    mask = sample_view_masks(8, 4, *PAPER_GRID, generator=_generator(0))
    queries = sample_query_indices(mask, 0.75, generator=_generator(1))
    num_masked = 304 - 61
    assert queries.shape == (8, 4, round(0.75 * num_masked)) == (8, 4, 182)
    assert queries.dtype == torch.long
    assert mask.gather(-1, queries).all()  # every query is a masked token
    assert (queries[..., 1:] > queries[..., :-1]).all()  # sorted and without duplicates
    assert torch.equal(queries, sample_query_indices(mask, 0.75, generator=_generator(1)))
    assert not torch.equal(queries, sample_query_indices(mask, 0.75, generator=_generator(2)))
    # All masked tokens with query_ratio = 1.
    everything = sample_query_indices(mask, 1.0, generator=_generator(1))
    assert torch.equal(everything, mask.nonzero()[:, 2].reshape(8, 4, num_masked))


def test_query_indices_are_uniform_over_the_masked_tokens():
    # One fixed mask, many query draws: every masked token is chosen with probability ≈ 0.75.
    mask = sample_view_masks(1, 1, *PAPER_GRID, generator=_generator(0)).expand(2000, 1, 304)
    queries = sample_query_indices(mask, 0.75, generator=_generator(3))
    counts = torch.zeros(304).index_add_(0, queries.flatten(), torch.ones(queries.numel())) / 2000
    masked = mask[0, 0]
    assert (counts[~masked] == 0).all()
    assert (counts[masked] - 182 / 243).abs().max() < 0.05


# ----------------------------------------------------------------------------------------------------------------------
# 7. visible indices
def test_visible_indices_matches_nonzero():
    mask = sample_view_masks(5, 3, *PAPER_GRID, generator=_generator(0))
    indices = visible_indices(mask)
    assert indices.shape == (5, 3, 61) and indices.dtype == torch.long
    expected = (~mask).nonzero()[:, 2].reshape(5, 3, 61)  # row-major nonzero: ascending per view
    assert torch.equal(indices, expected)
    rebuilt = torch.ones_like(mask).scatter_(-1, indices, False)
    assert torch.equal(rebuilt, mask)


def test_visible_and_query_indices_reject_ragged_masks():
    mask = torch.zeros(1, 2, 10, dtype=torch.bool)
    mask[0, 0, :3] = True
    mask[0, 1, :4] = True
    with pytest.raises(ValueError, match="same number"):
        visible_indices(mask)
    with pytest.raises(ValueError, match="same number"):
        sample_query_indices(mask)
    with pytest.raises(ValueError, match="shape"):
        visible_indices(mask[0])


# ----------------------------------------------------------------------------------------------------------------------
# 9. argument validation
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mask_ratio=0.0), "mask_ratio.*0.0"),
        (dict(mask_ratio=1.0), "mask_ratio.*1.0"),
        (dict(mask_ratio=-0.2), "mask_ratio.*-0.2"),
        (dict(block_sizes=()), "block_sizes"),
        (dict(block_sizes=((0, 3),)), "block_sizes"),
        (dict(num_frequency_patches=0), "grid.*0 x 38"),
        (dict(num_time_patches=-1), "grid.*8 x -1"),
        (dict(num_frequency_patches=1, num_time_patches=2, mask_ratio=0.9), "visible"),  # V = 0
    ],
)
def test_sample_view_masks_rejects_bad_arguments(kwargs, message):
    arguments = dict(batch_size=2, num_views=4, num_frequency_patches=8, num_time_patches=38)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        sample_view_masks(**arguments)


@pytest.mark.parametrize("query_ratio", [0.0, -0.5, 1.5])
def test_sample_query_indices_rejects_bad_ratio(query_ratio):
    mask = sample_view_masks(1, 2, *PAPER_GRID, generator=_generator(0))
    with pytest.raises(ValueError, match=str(query_ratio)):
        sample_query_indices(mask, query_ratio)


# ----------------------------------------------------------------------------------------------- draws, then build
def test_batch_masks_are_their_draws_built():
    """`sample_batch_masks` = `build_batch_masks(draw_batch_masks(...))`, drawing the same numbers from the generator
    as the view masks, then the queries, drawn one after the other."""
    config = AaspConfig(mask_num_views=3, mask_ratio=0.7, mask_query_ratio=0.5)
    sampled = sample_batch_masks(config, 5, generator=torch.Generator().manual_seed(4))
    built = build_batch_masks(config, draw_batch_masks(config, 5, generator=torch.Generator().manual_seed(4)))
    g = torch.Generator().manual_seed(4)
    mask = sample_view_masks(
        5,
        3,
        config.num_frequency_patches,
        config.num_time_patches,
        mask_ratio=0.7,
        block_sizes=config.mask_block_sizes,
        generator=g,
    )
    queries = sample_query_indices(mask, 0.5, generator=g)
    for masks in (sampled, built):
        assert torch.equal(masks["mask"], mask) and torch.equal(masks["query_indices"], queries)
        assert torch.equal(masks["visible_indices"], visible_indices(mask))


def test_clips_drawn_one_by_one_build_the_masks_each_gets_alone():
    """Each clip's draws from its own seed, concatenated and built in one pass, give every clip the masks it gets
    when sampled alone: the rows of the build do not interact."""
    config = AaspConfig()
    seeds = [7, 123, 0, 99999]
    alone = [sample_batch_masks(config, 1, generator=torch.Generator().manual_seed(s)) for s in seeds]
    draws = [draw_batch_masks(config, 1, generator=torch.Generator().manual_seed(s)) for s in seeds]
    built = build_batch_masks(config, {key: torch.cat([d[key] for d in draws]) for key in draws[0]})
    for key in ("mask", "visible_indices", "query_indices"):
        assert torch.equal(built[key], torch.cat([a[key] for a in alone])), key
    assert built["mask"].shape == (4, config.mask_num_views, config.num_patches)
