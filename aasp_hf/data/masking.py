"""Mask samplers for AaSP pre-training: inverse block masking of the student views and predictor queries.

Paper: "Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers", Sec. "Training Setup",
"Pre-training Setup" paragraph:

    "We apply inverse block masking [EAT] with an 80% token mask ratio and a multi-mask scheme with M = 4 masks
    (views) per input [...]. For each view, we sample a block size uniformly from {3x8, 4x6, 5x5} in
    (frequency x time) patches; the remaining tokens required to reach the 80% mask ratio are selected via non-block
    random masking. Block locations and the residual random masks are sampled independently for each of the M views."

    "Queries are randomly selected from masked tokens; we use 75% of the masked tokens as queries [CrossMAE]."

Token grid: F̃ frequency patches x T̃ time patches, N = F̃·T̃ tokens in TIME-MAJOR order (token index t·F̃ + f), the
order the encoder flattens its patches in. Block sizes are (frequency x time) in patches.

Dimensions: B clips, M views per clip, N tokens, V visible tokens per view, Q queries per view, P candidate blocks
per view, R = B·M views.

What lives here (pure functions; all randomness comes from the ``generator`` argument, so a seeded generator
reproduces the masks exactly):

    num_visible_tokens     V = round((1 - mask_ratio)·N)
    sample_view_masks      bool (B, M, N), True = masked (hidden from the student); exactly V visible per view
    sample_query_indices   (B, M, Q) masked tokens used as predictor queries, Q = round(query_ratio · (N - V))
    visible_indices        (B, M, V) indices of the visible tokens, ascending
    sample_batch_masks     the three above for one pre-training batch, with the config's ``mask_*`` settings
    draw_batch_masks       its random numbers alone, in its order (clips drawn one by one concatenate to a batch)
    build_batch_masks      its masks from those random numbers, for a whole batch at once (no random draw)

``PretrainingCollator`` (``data/collators.py``) draws the masks of each pre-training batch with
``sample_batch_masks``; so do ``aasp_hf.plan`` and the speed benchmark for their stand-in batches. The model (the
Hub-shipped files) only receives the index tensors. Imports only ``math`` and ``torch``.
"""

import math

import torch


DEFAULT_BLOCK_SIZES = ((3, 8), (4, 6), (5, 5))  # (frequency x time) patches, Sec. "Pre-training Setup"


# ----------------------------------------------------------------------------------------------------------------------
def num_visible_tokens(num_tokens: int, mask_ratio: float) -> int:
    """V = round((1 - mask_ratio)·N): the number of tokens each view leaves visible to the student."""
    return int(round((1.0 - mask_ratio) * num_tokens))


def _random_device(generator, device):
    """Random numbers are drawn on the generator's device (a CPU generator cannot fill a CUDA tensor)."""
    if generator is not None:
        return generator.device
    return torch.device(device) if device is not None else torch.device("cpu")


def _uniform_int(u: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Uniforms ``u`` (R, P) in [0, 1) -> integers uniform in [0, high) with a per-row ``high`` (R,)."""
    return torch.minimum((u * high[:, None]).long(), high[:, None] - 1)  # clamp guards float rounding up to high


# ----------------------------------------------------------------------------------------------------------------------
def sample_view_masks(
    batch_size: int,
    num_views: int,
    num_frequency_patches: int,
    num_time_patches: int,
    mask_ratio: float = 0.8,
    block_sizes=DEFAULT_BLOCK_SIZES,
    generator: torch.Generator | None = None,
    device=None,
) -> torch.BoolTensor:
    """Inverse block masks for M independent views of each of B clips (EAT's inverse block masking, AaSP settings).

    For every view, independently:

    1. choose a block size (f_b x t_b) uniformly from ``block_sizes``; a block larger than the grid is clipped to it;
    2. place VISIBLE blocks of that size at uniformly random positions, each lying inside the F̃ x T̃ grid;
    3. keep the longest prefix of placed blocks whose union has at most V = round((1 - mask_ratio)·N) tokens (at least
       the first block; if the first block alone exceeds V, a uniformly random subset of V of its tokens is kept);
    4. reveal uniformly random single extra tokens until exactly V tokens are visible (the paper's "non-block random
       masking" of the remaining tokens).

    Vectorised over all R = B·M views: P candidate blocks are placed per view at once, with P large enough that the
    union of P blocks almost always exceeds V even with overlaps (P = 2·ceil(V / smallest block area) + 2). If it
    does not, all P blocks are kept and step 4 fills the rest, so the count is still exactly V.

    Note on placement: a block always lies inside the grid, so tokens at the grid's edges are covered by fewer
    block positions than interior ones and are visible somewhat less often (step 4 is uniform over the grid).

    Args:
        batch_size (`int`): B, clips in the batch.
        num_views (`int`): M, views per clip (4 in the paper).
        num_frequency_patches (`int`): F̃, patches along frequency (8 in the paper).
        num_time_patches (`int`): T̃, patches along time (38 in the paper).
        mask_ratio (`float`): fraction of tokens hidden from the student, in (0, 1) (0.8 in the paper).
        block_sizes (sequence of `(int, int)`): candidate visible-block sizes, (frequency x time) in patches.
        generator (`torch.Generator`, *optional*): source of all randomness; random numbers are drawn on its device.
        device (*optional*): device of the returned mask (default: the generator's device, else CPU).

    Returns:
        `torch.BoolTensor` of shape `(B, M, N)`, N = F̃·T̃ time-major (token t·F̃ + f); True = masked (hidden from the
        student), False = visible. Every view has exactly V visible tokens.
    """
    block_sizes, num_visible = _check_view_masks(
        batch_size, num_views, num_frequency_patches, num_time_patches, mask_ratio, block_sizes
    )
    rand_device = _random_device(generator, device)
    out_device = torch.device(device) if device is not None else rand_device
    draws = _draw_view_masks(
        batch_size * num_views,
        num_frequency_patches,
        num_time_patches,
        num_visible,
        block_sizes,
        generator,
        rand_device,
    )
    mask = _view_masks_from_draws(draws, num_frequency_patches, num_time_patches, num_visible, block_sizes)  # (R, N)
    return mask.reshape(batch_size, num_views, mask.shape[-1]).to(out_device)  # (R, N) -> (B, M, N)


def _check_view_masks(batch_size, num_views, num_f, num_t, mask_ratio, block_sizes) -> tuple[tuple, int]:
    """`sample_view_masks`'s arguments checked: (the block sizes as a tuple of (frequency, time) pairs, V)."""
    if not 0.0 < mask_ratio < 1.0:
        raise ValueError(f"mask_ratio must be in (0, 1), got {mask_ratio}")
    if batch_size < 0 or num_views < 1:
        raise ValueError(f"batch_size must be >= 0 and num_views >= 1, got {batch_size} and {num_views}")
    if num_f < 1 or num_t < 1:
        raise ValueError(f"the patch grid must be positive, got {num_f} x {num_t} (frequency x time)")
    block_sizes = tuple(tuple(int(s) for s in size) for size in block_sizes)
    if len(block_sizes) == 0:
        raise ValueError("block_sizes must hold at least one (frequency, time) block size, got an empty sequence")
    if any(len(size) != 2 or min(size) < 1 for size in block_sizes):
        raise ValueError(f"block_sizes must be positive (frequency, time) pairs, got {block_sizes}")
    num_tokens = num_f * num_t
    num_visible = num_visible_tokens(num_tokens, mask_ratio)
    if not 0 < num_visible < num_tokens:
        raise ValueError(
            f"mask_ratio={mask_ratio} leaves {num_visible} of {num_tokens} tokens visible; need at least one visible "
            "and one masked token"
        )
    return block_sizes, num_visible


def _block_sizes(block_sizes, num_f: int, num_t: int, device) -> torch.Tensor:
    """(S, 2) block sizes (frequency, time), each clipped to the F̃ x T̃ grid."""
    sizes = torch.tensor(block_sizes, dtype=torch.long, device=device)  # (S, 2)
    return torch.minimum(sizes, torch.tensor([num_f, num_t], device=device))


def _draw_view_masks(num_rows, num_f, num_t, num_visible, block_sizes, generator, device) -> dict:
    """Every random number of R views' masks, in the order they are drawn: each view's block size ("choice" (R,)),
    the corners of its P candidate blocks as uniforms ("corner_f", "corner_t" (R, P)) and its tokens' scores for
    step 4 ("score" (R, N)). Drawn for R = M views of one clip at a time and concatenated along the first dimension,
    they are what `_view_masks_from_draws` needs for the batch."""
    smallest_area = min(min(f, num_f) * min(t, num_t) for f, t in block_sizes)  # of the blocks clipped to the grid
    num_candidates = 2 * math.ceil(num_visible / smallest_area) + 2  # P
    return {
        "choice": torch.randint(len(block_sizes), (num_rows,), generator=generator, device=device),  # (R,)
        "corner_f": torch.rand((num_rows, num_candidates), generator=generator, device=device),  # (R, P)
        "corner_t": torch.rand((num_rows, num_candidates), generator=generator, device=device),  # (R, P)
        "score": torch.rand(num_rows, num_f * num_t, generator=generator, device=device),  # (R, N)
    }


def _view_masks_from_draws(draws: dict, num_f, num_t, num_visible, block_sizes) -> torch.BoolTensor:
    """Steps 1-4 of `sample_view_masks` on the random numbers of `_draw_view_masks`: (R, N), True = masked. No random
    draw; each view (row) depends only on its own draws."""
    device = draws["choice"].device
    num_rows, num_candidates = draws["corner_f"].shape  # R, P
    num_tokens = num_f * num_t

    # 1. One block size per view, clipped to the grid.
    block_f, block_t = _block_sizes(block_sizes, num_f, num_t, device)[draws["choice"]].unbind(-1)  # (R,), (R,)

    # 2. P candidate blocks per view at uniformly random in-grid positions (top-left corner f0, t0).
    f0 = _uniform_int(draws["corner_f"], num_f - block_f + 1)  # (R, P)
    t0 = _uniform_int(draws["corner_t"], num_t - block_t + 1)  # (R, P)
    f = torch.arange(num_f, device=device)
    t = torch.arange(num_t, device=device)
    in_f = (f >= f0[..., None]) & (f < (f0 + block_f[:, None])[..., None])  # (R, P, F̃)
    in_t = (t >= t0[..., None]) & (t < (t0 + block_t[:, None])[..., None])  # (R, P, T̃)
    member = in_t[..., :, None] & in_f[..., None, :]  # (R, P, T̃, F̃)
    member = member.reshape(num_rows, num_candidates, num_tokens)  # (R, P, T̃, F̃) -> (R, P, N), token t·F̃ + f

    # 3. The longest prefix of blocks whose union has at most V tokens (at least the first block). A short loop over
    #    the P candidates (not over views): the running union is a cumulative OR, its size is non-decreasing in p, so
    #    the last union that still fits is the one to keep.
    blocks = member[:, 0]  # (R, N) visible from blocks
    union = blocks
    for p in range(1, num_candidates):
        union = union | member[:, p]  # (R, N) union of blocks 0..p
        fits = union.sum(-1, dtype=torch.int32) <= num_visible  # (R,)
        blocks = torch.where(fits[:, None], union, blocks)

    # 4. Exactly V visible: rank tokens by a random score lifted by 1 inside the kept blocks and take the top V. With
    #    fewer than V block tokens this keeps all of them plus uniformly random others; with more (first block > V)
    #    it keeps a uniformly random V of the block.
    score = draws["score"] + blocks  # (R, N)
    visible = score.topk(num_visible, dim=-1, sorted=False).indices  # (R, V), in no particular order
    mask = torch.ones(num_rows, num_tokens, dtype=torch.bool, device=device)
    mask.scatter_(1, visible, False)
    return mask


# ----------------------------------------------------------------------------------------------------------------------
def sample_query_indices(
    mask: torch.BoolTensor, query_ratio: float = 0.75, generator: torch.Generator | None = None
) -> torch.LongTensor:
    """Masked tokens used as the predictor's queries (CrossMAE partial reconstruction; 75 % in the paper).

    Per view, Q = round(query_ratio · num_masked) tokens are drawn uniformly without replacement from the view's
    masked tokens and returned in ascending order.

    Args:
        mask (`torch.BoolTensor` of shape `(B, M, N)`): True = masked; every view must mask the same number of tokens.
        query_ratio (`float`): fraction of the masked tokens used as queries, in (0, 1].
        generator (`torch.Generator`, *optional*): source of randomness; random numbers are drawn on its device.

    Returns:
        `torch.LongTensor` of shape `(B, M, Q)` on ``mask.device``: token indices (time-major), ascending per view.
    """
    _check_query_ratio(query_ratio)
    if mask.dim() != 3 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor of shape (B, M, N), got {mask.dtype} {tuple(mask.shape)}")
    score = torch.rand(mask.shape, generator=generator, device=_random_device(generator, mask.device))  # (B, M, N)
    return _queries_from_scores(mask, score, query_ratio)


def _check_query_ratio(query_ratio: float) -> None:
    if not 0.0 < query_ratio <= 1.0:
        raise ValueError(f"query_ratio must be in (0, 1], got {query_ratio}")


def _queries_from_scores(mask: torch.BoolTensor, score: torch.Tensor, query_ratio: float) -> torch.LongTensor:
    """`sample_query_indices` on its uniform scores (B, M, N): the Q masked tokens with the largest scores."""
    num_masked = mask.sum(-1)  # (B, M)
    if num_masked.numel() and not bool((num_masked == num_masked.flatten()[0]).all()):
        raise ValueError(f"every view must mask the same number of tokens, got counts {num_masked.unique().tolist()}")
    num_masked = int(num_masked.flatten()[0]) if num_masked.numel() else 0
    num_queries = int(round(query_ratio * num_masked))  # Q

    # A uniformly random subset of the masked tokens: the Q largest of iid uniform scores, visible tokens scored -1.
    score = score.to(mask.device).masked_fill(~mask, -1.0)
    queries = score.topk(num_queries, dim=-1).indices  # (B, M, Q)
    return queries.sort(dim=-1).values


def visible_indices(mask: torch.BoolTensor) -> torch.LongTensor:
    """Indices of the visible (False) tokens of each view, ascending: the tokens the student encodes.

    Args:
        mask (`torch.BoolTensor` of shape `(B, M, N)`): True = masked; every view must leave the same number V visible.

    Returns:
        `torch.LongTensor` of shape `(B, M, V)` on ``mask.device``, ascending per view.
    """
    if mask.dim() != 3 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor of shape (B, M, N), got {mask.dtype} {tuple(mask.shape)}")
    num_visible = (~mask).sum(-1)  # (B, M)
    if num_visible.numel() and not bool((num_visible == num_visible.flatten()[0]).all()):
        raise ValueError(f"every view must have the same number of visible tokens, got {num_visible.unique().tolist()}")
    num_visible = int(num_visible.flatten()[0]) if num_visible.numel() else 0
    # A stable sort of the 0/1 mask puts the visible (0) tokens first, in their original (ascending) order.
    order = mask.to(torch.uint8).sort(dim=-1, stable=True).indices  # (B, M, N)
    return order[..., :num_visible]  # (B, M, V)


# ----------------------------------------------------------------------------------------------------------------------
def sample_batch_masks(config, batch_size: int, generator: torch.Generator | None = None) -> dict:
    """The masks of one pre-training batch as ``PretrainingCollator`` draws them: M inverse block masks per clip
    (`sample_view_masks`), then each view's queries (`sample_query_indices`) from the same ``generator``, in that
    order, and each view's visible tokens (`visible_indices`, no random draw). The same as
    ``build_batch_masks(config, draw_batch_masks(config, batch_size, generator))``.

    Args:
        config: any object with the ``AaspConfig`` fields ``mask_num_views`` (M), ``num_frequency_patches`` (F̃),
            ``num_time_patches`` (T̃), ``mask_ratio``, ``mask_block_sizes`` and ``mask_query_ratio``.
        batch_size (`int`): B, clips in the batch.
        generator (`torch.Generator`, *optional*): source of all randomness; random numbers are drawn on its device.

    Returns:
        `dict` with ``mask`` bool (B, M, N) (True = hidden from the student), ``visible_indices`` int64 (B, M, V) and
        ``query_indices`` int64 (B, M, Q), on the generator's device (CPU without one).
    """
    return build_batch_masks(config, draw_batch_masks(config, batch_size, generator))


def draw_batch_masks(config, batch_size: int, generator: torch.Generator | None = None) -> dict:
    """Every random number of `sample_batch_masks`, in its order (the views' block sizes, block corners and token
    scores, then the queries' scores), and nothing else. Clips drawn one at a time, each from its own seed, and
    concatenated along the first dimension give the draws of their batch, so ``build_batch_masks`` makes the
    batch's masks in one pass: ``PretrainingCollator.collate_seeded`` does this.

    Returns:
        `dict` of tensors, each with B·M rows ("choice" (B·M,), "corner_f", "corner_t" (B·M, P), "score" (B·M, N))
        or B rows ("query_score" (B, M, N)).
    """
    c = config
    block_sizes, num_visible = _check_view_masks(
        batch_size, c.mask_num_views, c.num_frequency_patches, c.num_time_patches, c.mask_ratio, c.mask_block_sizes
    )
    _check_query_ratio(c.mask_query_ratio)
    device = _random_device(generator, None)
    draws = _draw_view_masks(
        batch_size * c.mask_num_views,
        c.num_frequency_patches,
        c.num_time_patches,
        num_visible,
        block_sizes,
        generator,
        device,
    )
    num_tokens = c.num_frequency_patches * c.num_time_patches
    draws["query_score"] = torch.rand((batch_size, c.mask_num_views, num_tokens), generator=generator, device=device)
    return draws


def build_batch_masks(config, draws: dict) -> dict:
    """`sample_batch_masks`'s masks from the random numbers of `draw_batch_masks` (no random draw): ``mask``
    (B, M, N), ``visible_indices`` (B, M, V) and ``query_indices`` (B, M, Q)."""
    c = config
    block_sizes, num_visible = _check_view_masks(
        draws["query_score"].shape[0],
        c.mask_num_views,
        c.num_frequency_patches,
        c.num_time_patches,
        c.mask_ratio,
        c.mask_block_sizes,
    )
    view_masks = _view_masks_from_draws(draws, c.num_frequency_patches, c.num_time_patches, num_visible, block_sizes)
    mask = view_masks.reshape(draws["query_score"].shape)  # (B·M, N) -> (B, M, N), True = hidden from the student
    queries = _queries_from_scores(mask, draws["query_score"], c.mask_query_ratio)  # (B, M, Q)
    visible = visible_indices(mask)  # (B, M, V)
    return {"mask": mask, "visible_indices": visible, "query_indices": queries}
