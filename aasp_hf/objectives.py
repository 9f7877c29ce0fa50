"""AaSP pre-training objectives: the pooled teacher targets and the three losses L_m, L_u and L_c.

Paper: "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers",
Sec. "Predictor and Pre-training Objectives" (Eq. 5) and Sec. "Training Setup".

    L_total = L_m + η_u·L_u + η_c·L_c          (η_u = 1, η_c = 0.1 in the paper; the caller weights the terms)

Dimensions: B clips (local to this process), M views per clip, N patch tokens (no CLS), Q query tokens per view,
D hidden size, E contrastive embedding size, W processes (world size).

Reductions, ``scaling="mean"`` (the default, ``AaspConfig.loss_scaling``):

    L_m  ``masked_prediction_loss``      mean of the squared error over all query tokens (of all views and clips)
                                         and all D dimensions
    L_u  ``clip_loss``                   mean of the squared error over clips, views and D dimensions
    L_c  ``multi_view_contrastive_loss`` mean over the (local) anchors, i.e. the 1/N_vis of the equation; with
                                         ``gather=True`` the mean over this process's anchors, so that DDP's
                                         gradient averaging over processes yields the gradient of the global mean

``scaling="eat"`` gives L_m and L_u the weights EAT's optimiser sees (L_c has no EAT counterpart and stays a mean):

    L_m  Σ_tokens Σ_d e²/√D / (number of query tokens)      = √D × the "mean" L_m
    L_u  Σ_views Σ_d e²/√D  (summed over this batch's B·M)   = B·M·√D × the "mean" L_u

Where this comes from (EAT, github.com/cwx-worst-one/EAT, models/EAT_pretraining.py; fairseq 0.12):
  - ``d2v_loss`` (l. 760–776): ``F.mse_loss(x, y, reduction="none")`` times ``scale = 1 / math.sqrt(x.size(-1))``
    (``loss_scale`` unset, ``loss_beta`` 0): an element-wise (tokens, D) tensor, not yet reduced.
  - ``sample_size = masked.sum().long()`` (l. 642) with ``masked = encoder_mask.mask.unsqueeze(-1)`` (l. 632): the
    number of masked tokens of the B·clone_batch views, i.e. of the tokens the regression is computed on (EAT
    regresses every masked token; here the query tokens play that role). Not multiplied by D.
  - the regression term is ``d2v_loss(x, y) * cfg.d2v_loss`` (l. 705–707, weight 1); the CLS term is
    ``d2v_loss(cls_pred, cls_target) * (cfg.cls_loss * sample_size)`` (l. 659–660; cls_pred the student CLS of each
    clone view, cls_target the token mean of the targets repeated over the clone views, cls_loss = 1).
  - fairseq's ``model`` criterion (fairseq/criterions/model_criterion.py l. 76) sums each loss tensor completely,
    ``coef * p.float().sum()``, adds the terms and returns ``sample_size`` (l. 81, 116); the trainer
    (fairseq/trainer.py l. 941–946) multiplies the summed gradients by world_size / Σ_processes sample_size.
  So per process the optimiser sees [Σ_tok,d e²/√D + sample_size·Σ_views,d e_cls²/√D] / sample_size: the first term
  is √D × the per-element mean, the second B·M·√D × the per-element mean with B·M the views of one process's batch
  (12 clips × 16 clones per GPU in EAT). DDP's averaging over processes matches fairseq's division by the summed
  sample_size when every process holds the same number of masked tokens (fixed-count masking).

Precision: every function computes in float32 (float64 inputs stay float64) with autocast disabled, so bfloat16 /
float16 inputs under mixed precision give float32 targets and losses. Teacher targets are a stop-gradient sg(·)
in the paper: ``masked_prediction_loss`` and ``clip_loss`` detach ``targets``; run the teacher under
``torch.no_grad()`` anyway to save memory.

This file ships to the Hub as remote code with pre-training checkpoints only (``modeling_aasp_pretraining.py``
imports it; encoder and classifier checkpoints do not ship it): it imports ``math``, ``torch`` and two siblings that
every checkpoint ships, ``configuration_aasp.py`` (the allowed values, ``CHOICES``) and ``sblu.py`` (``compute_dtype``).
"""

import math

import torch
import torch.nn.functional as F

from .configuration_aasp import CHOICES
from .sblu import compute_dtype


TARGET_NORM_AXES = CHOICES["target_norm_axis"]
LOSS_SCALINGS = CHOICES["loss_scaling"]


def _check_scaling(scaling: str) -> None:
    if scaling not in LOSS_SCALINGS:
        raise ValueError(f"scaling must be one of {LOSS_SCALINGS}, got scaling={scaling!r}")


# ----------------------------------------------------------------------------------------------------------------------
# Precision and distributed helpers
# ----------------------------------------------------------------------------------------------------------------------


def _no_autocast(tensor: torch.Tensor):
    """A context that disables autocast on ``tensor``'s device, so matrix products really run in float32."""
    return torch.autocast(device_type=tensor.device.type, enabled=False)


def is_distributed() -> bool:
    """True when torch.distributed is initialised with more than one process."""
    return (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )


class _GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0 whose backward hands every process the summed gradient of its own slice.

    forward:  x (B, ...) on each of W processes -> (W·B, ...), identical on every process
    backward: g (W·B, ...) on each process -> Σ_processes g[rank·B:(rank+1)·B]   (all_reduce, then own slice)

    Written out instead of ``torch.distributed.nn.functional.all_gather`` because that one is deprecated (it warns on
    every call in recent torch); this uses only the public all_gather / all_reduce and works on every backend.
    """

    @staticmethod
    def forward(ctx, tensor):
        world_size = torch.distributed.get_world_size()
        tensor = tensor.contiguous()
        pieces = [torch.empty_like(tensor) for _ in range(world_size)]
        torch.distributed.all_gather(pieces, tensor)
        ctx.rank, ctx.local_size = torch.distributed.get_rank(), tensor.shape[0]
        return torch.cat(pieces, dim=0)  # W x (B, ...) -> (W·B, ...)

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.contiguous().clone()
        torch.distributed.all_reduce(grad, op=torch.distributed.ReduceOp.SUM)
        start = ctx.rank * ctx.local_size
        return grad[start : start + ctx.local_size]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` (B, ...) from all processes along dim 0, keeping gradients -> (W·B, ...).

    Identity when torch.distributed is not initialised or has one process. Every process must hold the same shape
    (checked, ValueError otherwise); this process's rows start at ``contrastive_offset(B)`` = rank·B. The gradient
    that reaches ``tensor`` is the sum over processes of the gradients of their gathered copies, so with each
    process's loss a mean over its own anchors, DDP's averaging of parameter gradients gives the gradient of the
    mean over all processes' anchors.
    """
    if not is_distributed():
        return tensor
    if not torch.compiler.is_compiling():  # the check reads other processes' shapes back to the host: a compiled
        # graph cannot (data-dependent), and its all-gather already fails on a shape that differs
        world_size = torch.distributed.get_world_size()
        shape = torch.tensor(tensor.shape, dtype=torch.long, device=tensor.device)
        shapes = [torch.empty_like(shape) for _ in range(world_size)]
        torch.distributed.all_gather(shapes, shape)
        shapes = [tuple(s.tolist()) for s in shapes]
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"gather_with_grad needs the same tensor shape on every process, got shapes {shapes}")
    return _GatherWithGrad.apply(tensor)


def contrastive_offset(local_size: int) -> int:
    """Index of this process's first row in ``gather_with_grad``'s output: rank·local_size (0 when not distributed)."""
    return torch.distributed.get_rank() * local_size if is_distributed() else 0


# ----------------------------------------------------------------------------------------------------------------------
# Teacher targets
# ----------------------------------------------------------------------------------------------------------------------


def teacher_targets(layer_outputs, norm_axis: str = "tokens") -> torch.Tensor:
    """Pooled teacher targets y (B, N, D) from the output of every teacher block (paper: "teacher pooled tokens").

    Args:
        layer_outputs: list/tuple of L tensors (B, N, D), one per teacher block, patch tokens only (no CLS).
        norm_axis: the axis of the per-layer instance normalisation (no affine, eps 1e-5):
            ``"tokens"`` (default, EAT's code): each channel is normalised across the N tokens of its clip
            (``F.instance_norm`` on (B, D, N));
            ``"channels"`` (the paper's text, "per token ... across the embedding dimension"): each token is
            normalised across its D channels.

    Returns:
        y = LayerNorm_D( (1/L) Σ_l InstanceNorm(h_l) ), LayerNorm over D without affine (eps 1e-5), (B, N, D),
        float32 (float64 for float64 inputs). The clip-level target of L_u is ``y.mean(1)``.
    """
    if not isinstance(layer_outputs, (list, tuple)) or len(layer_outputs) == 0:
        raise ValueError(f"layer_outputs must be a non-empty list or tuple of (B, N, D) tensors, got {layer_outputs!r}")
    if norm_axis not in TARGET_NORM_AXES:
        raise ValueError(f"norm_axis must be one of {TARGET_NORM_AXES}, got norm_axis={norm_axis!r}")
    shape = tuple(layer_outputs[0].shape)
    shapes = [tuple(h.shape) for h in layer_outputs]
    if len(shape) != 3 or any(s != shape for s in shapes):
        raise ValueError(f"layer_outputs must all have the same shape (B, N, D), got shapes {shapes}")
    if norm_axis == "tokens" and shape[1] < 2:
        raise ValueError(f"norm_axis='tokens' normalises across tokens and needs N >= 2, got layer shape {shape}")

    dtype = compute_dtype(layer_outputs[0])
    with _no_autocast(layer_outputs[0]):
        total = None
        for hidden in layer_outputs:
            hidden = hidden.to(dtype)
            if norm_axis == "tokens":
                # (B, N, D) -> (B, D, N): instance_norm normalises each (clip, channel) row across the N tokens
                normed = F.instance_norm(hidden.transpose(1, 2)).transpose(1, 2)  # -> (B, N, D)
            else:
                # each (clip, token) across its D channels: a LayerNorm over D without affine
                normed = F.layer_norm(hidden, hidden.shape[-1:])
            total = normed if total is None else total + normed
        average = total / len(layer_outputs)  # (B, N, D)
        return F.layer_norm(average, average.shape[-1:])


# ----------------------------------------------------------------------------------------------------------------------
# L_m and L_u
# ----------------------------------------------------------------------------------------------------------------------


def masked_prediction_loss(predictions: torch.Tensor, targets: torch.Tensor, scaling: str = "mean") -> torch.Tensor:
    """L_m: squared error between the predictor's outputs at the query tokens and the teacher targets there.

    Args:
        predictions: (..., Q, D) predictor outputs at the query positions (e.g. (B, M, Q, D) or (B·M, Q, D)).
        targets: the same shape, the pooled teacher targets gathered at the same positions (stop-gradient: detached).
        scaling: ``"mean"`` or ``"eat"`` (module docstring).

    Returns:
        scalar: ``"mean"``, the mean over all query tokens and all D dimensions of (prediction − target)²;
        ``"eat"``, each token's Σ_d (prediction − target)² / √D averaged over the query tokens (√D × the mean).
    """
    if predictions.shape != targets.shape or predictions.ndim < 2 or predictions.numel() == 0:
        raise ValueError(
            "predictions and targets must have the same non-empty shape (..., Q, D), "
            f"got predictions {tuple(predictions.shape)} and targets {tuple(targets.shape)}"
        )
    _check_scaling(scaling)
    dtype = compute_dtype(predictions)
    with _no_autocast(predictions):
        error = predictions.to(dtype) - targets.detach().to(dtype)
        if scaling == "eat":  # EAT's d2v_loss summed per token, divided by sample_size = the number of tokens
            return (error.square().sum(dim=-1) / math.sqrt(error.shape[-1])).mean()  # (..., Q, D) -> (..., Q) -> ()
        return error.square().mean()


def clip_loss(student_cls: torch.Tensor, targets: torch.Tensor, scaling: str = "mean") -> torch.Tensor:
    """L_u: squared error between the student CLS of each view and the teacher's clip-level target.

    Args:
        student_cls: (B, M, D), the student's CLS token for each of the M masked views of each clip.
        targets: (B, N, D), the clip's pooled teacher targets (``teacher_targets``; stop-gradient: detached).
        scaling: ``"mean"`` or ``"eat"`` (module docstring).

    Returns:
        scalar: ``"mean"``, the mean over clips, views and D of (cls − ȳ)², with ȳ = targets.mean(1) (B, D) the clip
        target (mean over the teacher pooled tokens), shared by the M views; ``"eat"``, each view's
        Σ_d (cls − ȳ)² / √D summed over the B·M views (B·M·√D × the mean).
    """
    if (
        student_cls.ndim != 3
        or targets.ndim != 3
        or student_cls.shape[0] != targets.shape[0]
        or student_cls.shape[2] != targets.shape[2]
    ):
        raise ValueError(
            "student_cls must be (B, M, D) and targets (B, N, D) with the same B and D, "
            f"got student_cls {tuple(student_cls.shape)} and targets {tuple(targets.shape)}"
        )
    _check_scaling(scaling)
    dtype = compute_dtype(student_cls)
    with _no_autocast(student_cls):
        clip_target = targets.detach().to(dtype).mean(dim=1, keepdim=True)  # (B, N, D) -> (B, 1, D), broadcast over M
        error = student_cls.to(dtype) - clip_target  # (B, M, D)
        if scaling == "eat":  # EAT's d2v_loss × sample_size, summed, then divided by sample_size: a sum over views
            return (error.square().sum(dim=-1) / math.sqrt(error.shape[-1])).sum()  # (B, M, D) -> (B, M) -> ()
        return error.square().mean()


# ----------------------------------------------------------------------------------------------------------------------
# L_c
# ----------------------------------------------------------------------------------------------------------------------


def multi_view_contrastive_loss(
    embeddings: torch.Tensor, temperature: float = 0.2, gather: bool = False
) -> torch.Tensor:
    """L_c, Eq. (5): multi-positive InfoNCE over the M masked views of each clip.

        L_c = −(1/N_vis) Σ_i (1/|P(i)|) Σ_{p∈P(i)} log( exp(z̃_i·z̃_p/τ) / Σ_{a∈A(i)} exp(z̃_i·z̃_a/τ) )

    z̃_i: L2-normalised embedding of view i; P(i): the other M−1 views of the same clip; A(i): P(i) and every view
    of every other clip (the anchor itself excluded). With B = 1 and no gathering there are no negatives and A(i)
    is P(i). Computed with one matrix product of all normalised embeddings and a masked logsumexp.

    Args:
        embeddings: (B, M, E), the projection of each view's mean visible token (the caller applies the MLP);
            L2-normalised here, so the loss does not depend on their scale.
        temperature: τ > 0 (0.2 in the paper).
        gather: if True and torch.distributed runs W > 1 processes, the candidates (positives and negatives) are
            the embeddings of all processes (``gather_with_grad``, which keeps gradients; every process must hold
            the same B and M); the anchors stay this process's B·M views and the loss is their mean.

    Returns:
        scalar L_c, float32 (float64 for float64 inputs).
    """
    if embeddings.ndim != 3 or embeddings.shape[1] < 2 or embeddings.shape[0] < 1 or embeddings.shape[2] < 1:
        raise ValueError(
            "embeddings must be (B, M, E) with B >= 1, M >= 2 views per clip and E >= 1, "
            f"got embeddings {tuple(embeddings.shape)}"
        )
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0, got temperature={temperature!r}")
    batch_size, num_views, embed_size = embeddings.shape
    num_anchors = batch_size * num_views

    dtype = compute_dtype(embeddings)
    with _no_autocast(embeddings):
        anchors = embeddings.to(dtype).reshape(num_anchors, embed_size)  # (B, M, E) -> (B·M, E)
        anchors = F.normalize(anchors, dim=-1)  # z̃_i
        offset = 0
        candidates = anchors  # (C, E), C = B·M
        if gather and is_distributed():
            candidates = gather_with_grad(anchors)  # (W·B·M, E), this process's rows start at offset
            offset = contrastive_offset(num_anchors)

        logits = anchors @ candidates.T / temperature  # (B·M, C): z̃_i·z̃_a/τ

        # view index -> clip index; views of a clip are contiguous (row b·M + m is view m of clip b)
        anchor_index = torch.arange(num_anchors, device=logits.device) + offset  # (B·M,) global index of anchor i
        candidate_index = torch.arange(candidates.shape[0], device=logits.device)  # (C,)
        is_self = anchor_index[:, None] == candidate_index[None, :]  # (B·M, C)
        same_clip = (anchor_index[:, None] // num_views) == (candidate_index[None, :] // num_views)
        is_positive = same_clip & ~is_self  # P(i), |P(i)| = M − 1

        # A(i) = every candidate but the anchor itself: P(i) ∪ all views of the other clips
        log_denominator = torch.logsumexp(logits.masked_fill(is_self, -math.inf), dim=1, keepdim=True)  # (B·M, 1)
        log_prob = logits - log_denominator  # (B·M, C), finite everywhere
        positive_log_prob = log_prob.masked_fill(~is_positive, 0.0).sum(dim=1) / (num_views - 1)  # (B·M,)
        return -positive_log_prob.mean()
