"""Tests for the pre-training objectives of aasp_hf/modeling_aasp.py: teacher targets, L_m, L_u and L_c (incl. a real two-process gloo run).

The oracles are written independently of the module: explicit means and variances in float64 for the targets,
direct formulas for L_m / L_u, and a double loop over anchors and positives with explicit denominator sets for
Eq. (5).
"""

import math
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

from aasp_hf.modeling_aasp import (
    clip_loss,
    gather_across_processes,
    gather_with_grad,
    masked_prediction_loss,
    multi_view_contrastive_loss,
    teacher_targets,
)


EPS = 1e-5


# ----------------------------------------------------------------------------------------------------------------------
# Oracles
# ----------------------------------------------------------------------------------------------------------------------


def teacher_targets_oracle(layers, norm_axis):
    """float64: per-layer standardisation with explicit mean / biased variance, layer average, then over D."""
    axis = 1 if norm_axis == "tokens" else 2  # tokens: each channel across N; channels: each token across D
    total = 0
    for hidden in layers:
        hidden = hidden.double()
        mean = hidden.mean(dim=axis, keepdim=True)
        var = ((hidden - mean) ** 2).mean(dim=axis, keepdim=True)
        total = total + (hidden - mean) / torch.sqrt(var + EPS)
    average = total / len(layers)
    mean = average.mean(dim=2, keepdim=True)
    var = ((average - mean) ** 2).mean(dim=2, keepdim=True)
    return (average - mean) / torch.sqrt(var + EPS)


def contrastive_oracle(embeddings, temperature, anchors=None):
    """Eq. (5) as a double loop. embeddings (B, M, E); anchors: global view indices (default all).

    View i = b·M + m belongs to clip b. P(i): the other views of clip b. A(i): P(i) plus all views of other clips.
    """
    _, num_views, _ = embeddings.shape
    z = embeddings.reshape(-1, embeddings.shape[-1])
    z = z / z.norm(dim=1, keepdim=True)
    n = z.shape[0]
    clip = [i // num_views for i in range(n)]
    anchors = range(n) if anchors is None else anchors
    total = 0
    for i in anchors:
        positives = [p for p in range(n) if p != i and clip[p] == clip[i]]
        others = [a for a in range(n) if clip[a] != clip[i]]
        denominator = sum(torch.exp(z[i] @ z[a] / temperature) for a in positives + others)
        term = 0
        for p in positives:
            term = term + torch.log(torch.exp(z[i] @ z[p] / temperature) / denominator)
        total = total + term / len(positives)
    return -total / len(anchors)


# ----------------------------------------------------------------------------------------------------------------------
# 1. Teacher targets
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_axis", ["tokens", "channels"])
def test_teacher_targets_match_float64_oracle(norm_axis):
    generator = torch.Generator().manual_seed(0)
    # layers with different per-channel and per-token offsets and scales, so both axes matter
    layers = [
        torch.randn(2, 7, 12, generator=generator) * (1 + 3 * torch.rand(1, 7, 12, generator=generator))
        + 5 * torch.randn(1, 1, 12, generator=generator)
        + 2 * torch.randn(1, 7, 1, generator=generator)
        for _ in range(3)
    ]
    targets = teacher_targets(layers, norm_axis=norm_axis)
    assert targets.shape == (2, 7, 12) and targets.dtype == torch.float32
    torch.testing.assert_close(targets.double(), teacher_targets_oracle(layers, norm_axis), atol=2e-5, rtol=0)
    # final LayerNorm: zero mean and unit (biased) variance over D for every token
    torch.testing.assert_close(targets.mean(-1), torch.zeros(2, 7), atol=1e-5, rtol=0)
    torch.testing.assert_close(targets.var(-1, unbiased=False), torch.ones(2, 7), atol=1e-3, rtol=0)


def test_teacher_targets_axes_differ_and_default_is_tokens():
    generator = torch.Generator().manual_seed(1)
    layers = [torch.randn(2, 6, 8, generator=generator) for _ in range(2)]
    per_channel = [
        h * (1 + torch.rand(1, 1, 8, generator=generator)) + torch.randn(1, 1, 8, generator=generator) for h in layers
    ]  # channel d scaled and shifted, the same for all tokens
    per_token = [
        h * (1 + torch.rand(2, 6, 1, generator=generator)) + torch.randn(2, 6, 1, generator=generator) for h in layers
    ]  # token n scaled and shifted, the same for all channels

    tokens = teacher_targets(layers)  # default
    torch.testing.assert_close(tokens, teacher_targets(layers, norm_axis="tokens"), atol=0, rtol=0)
    # "tokens": each channel is standardised across the tokens, so per-channel affine changes cancel ...
    torch.testing.assert_close(teacher_targets(per_channel), tokens, atol=1e-4, rtol=0)
    # ... but per-token ones do not
    assert (teacher_targets(per_token) - tokens).abs().max() > 0.1

    channels = teacher_targets(layers, norm_axis="channels")
    torch.testing.assert_close(teacher_targets(per_token, norm_axis="channels"), channels, atol=1e-4, rtol=0)
    assert (teacher_targets(per_channel, norm_axis="channels") - channels).abs().max() > 0.1
    assert (tokens - channels).abs().max() > 0.1


def test_teacher_targets_half_precision_input_gives_float32():
    generator = torch.Generator().manual_seed(2)
    layers = [torch.randn(2, 5, 8, generator=generator).bfloat16() for _ in range(2)]
    targets = teacher_targets(layers)
    assert targets.dtype == torch.float32
    torch.testing.assert_close(targets, teacher_targets([h.float() for h in layers]), atol=0, rtol=0)


# ----------------------------------------------------------------------------------------------------------------------
# 2. L_m and L_u
# ----------------------------------------------------------------------------------------------------------------------


def test_masked_prediction_loss_is_mean_squared_error():
    generator = torch.Generator().manual_seed(3)
    predictions = torch.randn(2, 3, 5, 8, generator=generator, requires_grad=True)  # (B, M, Q, D)
    targets = torch.randn(2, 3, 5, 8, generator=generator, requires_grad=True)
    loss = masked_prediction_loss(predictions, targets)
    pairs = zip(predictions.detach().flatten().tolist(), targets.detach().flatten().tolist())
    expected = sum((p - t) ** 2 for p, t in pairs) / (2 * 3 * 5 * 8)
    assert loss.dtype == torch.float32
    assert abs(loss.item() - expected) < 1e-6
    loss.backward()
    torch.testing.assert_close(predictions.grad, 2 * (predictions - targets).detach() / predictions.numel())
    assert targets.grad is None  # stop-gradient on the teacher side

    low = masked_prediction_loss(predictions.detach().bfloat16(), targets.detach().bfloat16())
    assert low.dtype == torch.float32
    torch.testing.assert_close(
        low, masked_prediction_loss(predictions.detach().bfloat16().float(), targets.detach().bfloat16().float())
    )


def test_clip_loss_broadcasts_clip_target_over_views():
    generator = torch.Generator().manual_seed(4)
    batch, views, tokens, dim = 3, 4, 6, 5
    student_cls = torch.randn(batch, views, dim, generator=generator, requires_grad=True)
    targets = torch.randn(batch, tokens, dim, generator=generator, requires_grad=True)
    loss = clip_loss(student_cls, targets)

    cls_values, target_values = student_cls.detach().tolist(), targets.detach().tolist()
    expected = 0.0
    for b in range(batch):
        for m in range(views):
            for d in range(dim):
                clip_target = sum(target_values[b][n][d] for n in range(tokens)) / tokens
                expected += (cls_values[b][m][d] - clip_target) ** 2
    expected /= batch * views * dim
    assert abs(loss.item() - expected) < 1e-6
    # the same clip target for every view: the loss against targets.mean(1) expanded over M
    expanded = targets.mean(1, keepdim=True).expand(batch, views, dim)
    torch.testing.assert_close(loss, masked_prediction_loss(student_cls, expanded))
    loss.backward()
    assert targets.grad is None
    # a view-dependent error (e.g. broadcasting over the wrong axis) would move the loss
    assert abs(clip_loss(student_cls, targets.roll(1, dims=0)).item() - expected) > 1e-3


# ----------------------------------------------------------------------------------------------------------------------
# 3. L_c against the double loop
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch, views", [(1, 2), (1, 4), (3, 2), (2, 4), (4, 3)])
def test_contrastive_loss_matches_double_loop(batch, views):
    generator = torch.Generator().manual_seed(10 * batch + views)
    base = torch.randn(batch, views, 6, generator=generator, dtype=torch.float64)
    temperature = 0.2

    embeddings = base.float().requires_grad_(True)
    loss = multi_view_contrastive_loss(embeddings, temperature)
    loss.backward()

    reference = base.clone().requires_grad_(True)
    expected = contrastive_oracle(reference, temperature)
    expected.backward()

    assert loss.dtype == torch.float32
    assert abs(loss.item() - expected.item()) < 1e-6
    torch.testing.assert_close(embeddings.grad.double(), reference.grad, atol=1e-6, rtol=1e-5)

    # float64 inputs stay float64 and agree to round-off
    exact = base.clone().requires_grad_(True)
    loss64 = multi_view_contrastive_loss(exact, temperature)
    loss64.backward()
    assert loss64.dtype == torch.float64
    torch.testing.assert_close(loss64, expected.detach(), atol=1e-12, rtol=0)
    torch.testing.assert_close(exact.grad, reference.grad, atol=1e-12, rtol=0)


def test_contrastive_loss_single_clip_has_only_positives_in_denominator():
    # B = 1, M = 2: A(i) = P(i) = {the other view}, so every log term is log(1) = 0
    embeddings = torch.randn(1, 2, 5, generator=torch.Generator().manual_seed(5))
    assert abs(multi_view_contrastive_loss(embeddings).item()) < 1e-6


def test_contrastive_loss_temperature_and_autocast():
    generator = torch.Generator().manual_seed(6)
    base = torch.randn(3, 4, 8, generator=generator, dtype=torch.float64)
    loss = multi_view_contrastive_loss(base.float(), temperature=0.5)
    assert abs(loss.item() - contrastive_oracle(base, 0.5).item()) < 1e-6
    # computed in float32 even inside a bfloat16 autocast region (the matmul would otherwise run in bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = multi_view_contrastive_loss(base.float(), temperature=0.5)
    assert inside.dtype == torch.float32
    torch.testing.assert_close(inside, loss, atol=1e-6, rtol=0)
    low = multi_view_contrastive_loss(base.bfloat16())
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, multi_view_contrastive_loss(base.bfloat16().float()), atol=0, rtol=0)


def test_contrastive_gather_without_distributed_is_local():
    embeddings = torch.randn(3, 2, 4, generator=torch.Generator().manual_seed(7))
    assert gather_with_grad(embeddings) is embeddings
    assert gather_across_processes(embeddings) == (embeddings, 0)
    local = multi_view_contrastive_loss(embeddings)
    torch.testing.assert_close(
        multi_view_contrastive_loss(embeddings, gather=gather_across_processes), local, atol=0, rtol=0
    )


# ----------------------------------------------------------------------------------------------------------------------
# 4. Sanity
# ----------------------------------------------------------------------------------------------------------------------


def test_contrastive_loss_sanity():
    batch, views, dim, temperature = 4, 4, 8, 0.2
    # identical views per clip, orthogonal clips: the optimum the loss pulls towards
    aligned = torch.eye(dim)[:batch, None, :].expand(batch, views, dim)  # (B, M, E), clip b = e_b
    aligned_loss = multi_view_contrastive_loss(aligned, temperature).item()
    # closed form: −log( e^{1/τ} / ((M−1)·e^{1/τ} + (B−1)·M·e^0) )
    closed = -math.log(math.exp(1 / temperature) / ((views - 1) * math.exp(1 / temperature) + (batch - 1) * views))
    assert abs(aligned_loss - closed) < 1e-5

    random = torch.randn(batch, views, dim, generator=torch.Generator().manual_seed(8))
    random_loss = multi_view_contrastive_loss(random, temperature).item()
    assert aligned_loss < random_loss - 0.5
    # invariant to the embeddings' scale (they are L2-normalised), per view
    scales = torch.rand(batch, views, 1, generator=torch.Generator().manual_seed(9)) * 10 + 0.1
    torch.testing.assert_close(
        multi_view_contrastive_loss(random * scales, temperature).item(), random_loss, atol=1e-6, rtol=0
    )


# ----------------------------------------------------------------------------------------------------------------------
# 5. Two real processes (gloo, CPU)
# ----------------------------------------------------------------------------------------------------------------------

DISTRIBUTED_HELPER = """
import os, sys
import torch
import torch.distributed as dist

from aasp_hf import modeling_aasp as objectives

batch, views, in_size, embed_size, temperature = {batch}, {views}, {in_size}, {embed_size}, {temperature}
out_dir = sys.argv[1]
dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)

weight = torch.randn(in_size, embed_size, generator=torch.Generator().manual_seed(0)).requires_grad_(True)  # shared
inputs = torch.randn(batch, views, in_size, generator=torch.Generator().manual_seed(100 + rank))  # per rank
embeddings = inputs @ weight  # (B, M, E)
embeddings.retain_grad()
gathered = objectives.gather_with_grad(embeddings.detach())
loss = objectives.multi_view_contrastive_loss(embeddings, temperature, gather=objectives.gather_across_processes)
local_loss = objectives.multi_view_contrastive_loss(embeddings.detach(), temperature)
loss.backward()
weight_grad_local = weight.grad.clone()
dist.all_reduce(weight.grad)  # what DDP does: average the parameter gradients over processes
weight.grad /= world_size

try:  # unequal shapes across processes must be refused on every process (no hang)
    objectives.gather_with_grad(torch.zeros(1 + rank, 2))
    unequal_error = ""
except ValueError as error:
    unequal_error = str(error)

torch.save(
    dict(rank=rank, world_size=world_size, inputs=inputs, weight=weight.detach(), loss=loss.detach(),
         local_loss=local_loss, embeddings=embeddings.detach(), embeddings_grad=embeddings.grad,
         weight_grad_local=weight_grad_local, weight_grad_ddp=weight.grad, gathered=gathered,
         unequal_error=unequal_error),
    os.path.join(out_dir, f"rank{{rank}}.pt"),
)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_contrastive_loss_gathers_across_two_gloo_processes(tmp_path):
    batch, views, in_size, embed_size, temperature, world_size = 2, 3, 6, 5, 0.2, 2
    script = tmp_path / "helper.py"
    script.write_text(
        textwrap.dedent(DISTRIBUTED_HELPER).format(
            batch=batch, views=views, in_size=in_size, embed_size=embed_size, temperature=temperature
        )
    )
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",
    )
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path)],
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world_size)
    ]
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=60)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
    results = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(world_size)]

    # the processes really exchanged data: each gathered tensor holds both ranks' embeddings, in rank order
    all_embeddings = torch.cat([r["embeddings"] for r in results])  # (W·B, M, E)
    assert not torch.allclose(results[0]["embeddings"], results[1]["embeddings"])
    for r in results:
        assert r["world_size"] == world_size
        torch.testing.assert_close(r["gathered"], all_embeddings, atol=0, rtol=0)
        assert "same tensor shape" in r["unequal_error"] and "(1, 2)" in r["unequal_error"]

    # single-process oracle over ALL ranks' embeddings, same shared weight
    weight = results[0]["weight"].double().requires_grad_(True)
    inputs = torch.cat([r["inputs"] for r in results]).double()  # (W·B, M, in)
    embeddings = inputs @ weight
    embeddings.retain_grad()
    local = batch * views
    for r in results:
        anchors = range(r["rank"] * local, (r["rank"] + 1) * local)
        expected = contrastive_oracle(embeddings.detach(), temperature, anchors=anchors)
        assert abs(r["loss"].item() - expected.item()) < 1e-6
        # the negatives from the other rank matter: the ungathered loss is different
        assert abs(r["local_loss"].item() - expected.item()) > 1e-3

    global_mean = contrastive_oracle(embeddings, temperature)  # mean over all W·B·M anchors
    global_mean.backward()
    for r in results:
        # DDP-averaged parameter gradient == gradient of the global mean loss
        torch.testing.assert_close(r["weight_grad_ddp"].double(), weight.grad, atol=1e-6, rtol=1e-5)
        # each rank alone does not have it (its gradient only covers its own anchors' loss)
        assert (r["weight_grad_local"].double() - weight.grad).abs().max() > 1e-4
        # the embedding gradient on rank r sums all ranks' losses: W · ∂(global mean)/∂e_r
        rows = slice(r["rank"] * batch, (r["rank"] + 1) * batch)
        torch.testing.assert_close(
            r["embeddings_grad"].double(), world_size * embeddings.grad[rows], atol=1e-6, rtol=1e-5
        )


# ----------------------------------------------------------------------------------------------------------------------
# 6. Argument checks and remote-code imports
# ----------------------------------------------------------------------------------------------------------------------


def test_argument_errors_name_argument_and_shapes():
    with pytest.raises(ValueError, match=r"num_views >= 2.*\(3, 1, 4\)"):
        multi_view_contrastive_loss(torch.randn(3, 1, 4))
    with pytest.raises(ValueError, match=r"embeddings.*\(3, 4\)"):
        multi_view_contrastive_loss(torch.randn(3, 4))
    for bad in (0.0, -0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            multi_view_contrastive_loss(torch.randn(2, 2, 4), temperature=bad)
    with pytest.raises(ValueError, match=r"predictions \(2, 3, 4\) and targets \(2, 3, 5\)"):
        masked_prediction_loss(torch.randn(2, 3, 4), torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"student_cls \(2, 4, 8\) and targets \(3, 6, 8\)"):
        clip_loss(torch.randn(2, 4, 8), torch.randn(3, 6, 8))
    with pytest.raises(ValueError, match=r"student_cls \(2, 4, 8\) and targets \(2, 6, 7\)"):
        clip_loss(torch.randn(2, 4, 8), torch.randn(2, 6, 7))
    with pytest.raises(ValueError, match=r"layer_outputs.*\[\(2, 5, 8\), \(2, 6, 8\)\]"):
        teacher_targets([torch.randn(2, 5, 8), torch.randn(2, 6, 8)])
    with pytest.raises(ValueError, match="layer_outputs"):
        teacher_targets([])
    with pytest.raises(ValueError, match="norm_axis"):
        teacher_targets([torch.randn(2, 5, 8)], norm_axis="time")
    with pytest.raises(ValueError, match=r"num_patches >= 2.*\(2, 1, 8\)"):
        teacher_targets([torch.randn(2, 1, 8)])
