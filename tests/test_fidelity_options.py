"""The EAT fidelity options of AaspConfig: target_layer, loss_scaling, student_stem_input (where the paper trains
"following EAT" without saying what that fixes, these options reproduce EAT's code; see docs/paper_to_code.md).

Each option is checked against an independent float64 computation (block by block, loop by loop or the dense stem),
and each has a test that would fail if the option were ignored.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from huggingface_hub.errors import StrictDataclassError

from aasp_hf import AaspConfig, AaspForPreTraining, AaspModel
from aasp_hf.modeling_aasp import clip_loss, masked_prediction_loss
from aasp_hf.modeling_aasp import sblu_gamma
from conftest import pretraining_batch, tiny_pretraining_config
from oracles import sblu_magnitude_reference


def same_weights(config_a, config_b, dtype=torch.float32):
    """Two pre-training models with identical weights that differ only in their configs."""
    torch.manual_seed(0)
    a = AaspForPreTraining(config_a).to(dtype).eval()
    b = AaspForPreTraining(config_b).to(dtype).eval()
    b.load_state_dict(a.state_dict())
    return a, b


# ----------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("field", ["target_layer", "loss_scaling", "student_stem_input"])
def test_unknown_values_raise_naming_the_field(field):
    # a `Literal` field: `@strict` names the field, the value and the values it takes
    with pytest.raises(StrictDataclassError, match=rf"Field '{field}' expected one of \(.+\), got bogus"):
        AaspConfig(**{field: "bogus"})


def test_defaults_follow_eat_where_the_evidence_allows_and_survive_a_round_trip():
    # FFN targets (EAT); mean losses and the masked stem (docs/model.md says why)
    config = AaspConfig()
    assert (config.target_layer, config.loss_scaling, config.student_stem_input) == ("ffn", "mean", "masked")
    options = dict(target_layer="block", loss_scaling="eat", student_stem_input="full")
    again = AaspConfig.from_dict(AaspConfig(**options).to_dict())
    assert (again.target_layer, again.loss_scaling, again.student_stem_input) == ("block", "eat", "full")


# ----------------------------------------------------------------------------------------------- target_layer
def _layer_norm(x, weight=None, bias=None, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    x = (x - mean) / torch.sqrt(var + eps)
    return x if weight is None else x * weight + bias


def _linear(x, layer):
    return x @ layer.weight.T + layer.bias


def _oracle_block(layer, h, num_heads, pre_norm, eps):
    """One encoder block in float64 from its weights: returns (block output, FFN output before the residual)."""
    batch_size, length, width = h.shape
    head = width // num_heads

    def attention(x):
        def split(t):
            return t.reshape(batch_size, length, num_heads, head).transpose(1, 2)  # (B, L, D) -> (B, h, L, d)

        q, k, v = (split(_linear(x, p)) for p in (layer.attention.query, layer.attention.key, layer.attention.value))
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head), dim=-1)  # (B, h, L, L)
        out = (weights @ v).transpose(1, 2).reshape(batch_size, length, width)  # (B, h, L, d) -> (B, L, D)
        return _linear(out, layer.attention.output)

    def ffn(x):
        hidden = _linear(x, layer.mlp.fc1)
        return _linear(0.5 * hidden * (1.0 + torch.erf(hidden / math.sqrt(2.0))), layer.mlp.fc2)  # exact GELU

    def norm(x, module):
        return _layer_norm(x, module.weight, module.bias, eps)

    if pre_norm:
        h = h + attention(norm(h, layer.norm1))
        t = ffn(norm(h, layer.norm2))
        return h + t, t
    h = norm(h + attention(h), layer.norm1)
    t = ffn(h)
    return norm(h + t, layer.norm2), t


def _oracle_targets(layer_outputs):
    """EAT's make_targets: instance norm of each layer across tokens, mean over layers, LayerNorm (no affine)."""
    normed = []
    for h in layer_outputs:  # (B, N, D)
        mean = h.mean(1, keepdim=True)
        var = ((h - mean) ** 2).mean(1, keepdim=True)
        normed.append((h - mean) / torch.sqrt(var + 1e-5))
    return _layer_norm(sum(normed) / len(normed))


@pytest.mark.parametrize("layer_norm_first", [False, True])
def test_ffn_targets_match_a_float64_block_by_block_oracle(layer_norm_first):
    config = tiny_pretraining_config(target_layer="ffn", layer_norm_first=layer_norm_first)
    _, model = same_weights(tiny_pretraining_config(layer_norm_first=layer_norm_first), config, torch.float64)
    x, visible, queries = pretraining_batch(config, dtype=torch.float64)
    with torch.no_grad():
        h = model.teacher(x, output_hidden_states=True).hidden_states[0]  # embedding output (B, 1 + N, D)
        block_outputs, ffn_outputs = [], []
        for layer in model.teacher.layers:
            h, t = _oracle_block(layer, h, config.num_attention_heads, layer_norm_first, config.layer_norm_eps)
            block_outputs.append(h[:, 1:])
            ffn_outputs.append(t[:, 1:])
        out = model(x, visible, queries)
    torch.testing.assert_close(out.targets, _oracle_targets(ffn_outputs), rtol=1e-9, atol=1e-9)
    # the oracle's block outputs are the model's hidden states (the oracle itself is right) ...
    hidden = model.teacher(x, output_hidden_states=True).hidden_states[1:]
    for mine, theirs in zip(block_outputs, hidden):
        torch.testing.assert_close(mine, theirs[:, 1:], rtol=1e-9, atol=1e-9)
    # ... and FFN targets are not block targets: the option is not ignored
    assert (out.targets - _oracle_targets(block_outputs)).abs().mean() > 0.1


def test_ffn_targets_differ_from_block_targets_and_ffn_outputs_come_only_when_asked():
    block, ffn = same_weights(
        tiny_pretraining_config(target_layer="block"), tiny_pretraining_config(target_layer="ffn")
    )
    batch = pretraining_batch(block.config)
    with torch.no_grad():
        out_block, out_ffn = block(*batch), ffn(*batch)
        plain = block.teacher(batch[0])
        with_ffn = block.teacher(batch[0], output_ffn_outputs=True)
    assert plain.ffn_outputs is None
    assert len(with_ffn.ffn_outputs) == 2 and with_ffn.ffn_outputs[0].shape == (3, 1 + 8, 32)
    assert (out_block.targets - out_ffn.targets).abs().mean() > 0.1
    assert (out_block.masked_prediction_loss - out_ffn.masked_prediction_loss).abs() > 1e-3


def test_ffn_targets_come_from_a_teacher_without_drop_path():
    """drop_path_rate > 0 in a training student: the teacher (eval mode) still gives the same FFN targets twice."""
    config = tiny_pretraining_config(target_layer="ffn", drop_path_rate=0.5)
    model = AaspForPreTraining(config).train()
    batch = pretraining_batch(config)
    first, second = model(*batch), model(*batch)
    torch.testing.assert_close(first.targets, second.targets)
    assert not torch.allclose(first.predictions, second.predictions)  # the student does drop paths


# ----------------------------------------------------------------------------------------------- loss_scaling
def eat_effective_losses(predictions, targets, student_cls, clip_targets):
    """EAT's loss, as its optimiser sees it, literally and in float64 Python loops.

    predictions, targets: (S, D) the regressed tokens; student_cls: (V, D) each view's CLS; clip_targets: (V, D)
    its clip's token-mean target (EAT: orig_targets.mean(1) repeated over the clone views).
    d2v_loss: element-wise squared error × 1/√D (reduction "none"); sample_size S = number of regressed tokens;
    the CLS term is d2v_loss × (cls_loss · sample_size), cls_loss = 1; fairseq's model criterion sums every element
    of every term; the trainer divides by sample_size. Returns (regression term, CLS term) after that division.
    """
    num_tokens, dim = predictions.shape
    scale = 1.0 / math.sqrt(dim)
    sample_size = num_tokens
    regression = 0.0
    for i in range(num_tokens):
        for d in range(dim):
            regression += (float(predictions[i, d]) - float(targets[i, d])) ** 2 * scale
    cls = 0.0
    for v in range(student_cls.shape[0]):
        for d in range(dim):
            cls += (float(student_cls[v, d]) - float(clip_targets[v, d])) ** 2 * scale * (1.0 * sample_size)
    return regression / sample_size, cls / sample_size


def test_eat_scaling_matches_a_loop_over_eats_formulas():
    g = torch.Generator().manual_seed(0)
    batch_size, num_views, num_queries, num_tokens, dim = 2, 3, 4, 6, 8
    predictions = torch.randn(batch_size, num_views, num_queries, dim, generator=g, dtype=torch.float64)
    query_targets = torch.randn(batch_size, num_views, num_queries, dim, generator=g, dtype=torch.float64)
    student_cls = torch.randn(batch_size, num_views, dim, generator=g, dtype=torch.float64)
    targets = torch.randn(batch_size, num_tokens, dim, generator=g, dtype=torch.float64)

    clip_targets = targets.mean(1).repeat_interleave(num_views, dim=0)  # (B, D) -> (B·M, D), EAT's clone views
    expected_m, expected_u = eat_effective_losses(
        predictions.reshape(-1, dim), query_targets.reshape(-1, dim), student_cls.reshape(-1, dim), clip_targets
    )  # (B, M, Q, D) -> (B·M·Q, D); (B, M, D) -> (B·M, D)
    loss_m = masked_prediction_loss(predictions, query_targets, scaling="eat")
    loss_u = clip_loss(student_cls, targets, scaling="eat")
    assert math.isclose(float(loss_m), expected_m, rel_tol=1e-12)
    assert math.isclose(float(loss_u), expected_u, rel_tol=1e-12)
    # the effective factors relative to plain means: √D and B·M·√D
    mean_m = masked_prediction_loss(predictions, query_targets)
    mean_u = clip_loss(student_cls, targets)
    assert math.isclose(float(loss_m), math.sqrt(dim) * float(mean_m), rel_tol=1e-12)
    assert math.isclose(float(loss_u), batch_size * num_views * math.sqrt(dim) * float(mean_u), rel_tol=1e-12)
    with pytest.raises(ValueError, match="scaling"):
        clip_loss(student_cls, targets, scaling="sum")


def test_eat_scaling_in_the_model_weighs_the_terms_as_eat_does():
    mean, eat = same_weights(
        tiny_pretraining_config(clip_loss_weight=0.7, contrastive_loss_weight=0.3),
        tiny_pretraining_config(clip_loss_weight=0.7, contrastive_loss_weight=0.3, loss_scaling="eat"),
        torch.float64,
    )
    x, visible, queries = pretraining_batch(mean.config, dtype=torch.float64)
    out_mean, out_eat = mean(x, visible, queries), eat(x, visible, queries)
    batch_size, num_views, num_queries = queries.shape
    dim = mean.config.hidden_size

    # L_m against the loop over EAT's formulas, from the model's own predictions and targets
    gathered = torch.stack([out_eat.targets[b, queries[b, m]] for b in range(batch_size) for m in range(num_views)])
    no_views = torch.zeros(0, dim)  # the CLS term is checked through its factor below
    expected_m, _ = eat_effective_losses(
        out_eat.predictions.reshape(-1, dim).detach(), gathered.reshape(-1, dim), no_views, no_views
    )  # (B, M, Q, D) -> (B·M·Q, D); (B·M, Q, D) -> (B·M·Q, D)
    assert math.isclose(float(out_eat.masked_prediction_loss), expected_m, rel_tol=1e-10)
    # factors relative to the plain means; L_c is untouched
    torch.testing.assert_close(out_eat.masked_prediction_loss, math.sqrt(dim) * out_mean.masked_prediction_loss)
    torch.testing.assert_close(out_eat.clip_loss, batch_size * num_views * math.sqrt(dim) * out_mean.clip_loss)
    torch.testing.assert_close(out_eat.contrastive_loss, out_mean.contrastive_loss)
    expected = out_eat.masked_prediction_loss + 0.7 * out_eat.clip_loss + 0.3 * out_eat.contrastive_loss
    torch.testing.assert_close(out_eat.loss, expected)
    assert out_eat.loss > 2 * out_mean.loss  # the option is not ignored


# ----------------------------------------------------------------------------------------------- student_stem_input
def paper_group_config(**overrides):
    """Paper-size stem groups (128 mel bins, F̃ = 8, K = K' = 63, H = 128, C = 1024), 128 frames (8 time patches)."""
    kwargs = dict(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_frames=128,
        lambda_encoder_reduction=4,
    )
    kwargs.update(overrides)
    return AaspConfig(**kwargs)


def random_views(batch_size, num_views, num_tokens, num_visible, seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(batch_size, num_views, num_tokens, generator=g)
    return scores.argsort(-1)[..., :num_visible].sort(-1).values  # (B, M, V)


def dense_full_clip_stem(sblu, mel, views, decay, frequency, num_views):
    """The dense stem on the unmasked clip, in float64 from the weights, taken at each view's visible tokens.

    High-pass: np.convolve with the zero-phase kernel (zero padding); B̄; |r| by the literal float64 loop over
    Eq. (3) (per-frame (α, β): a visible token's (α, β) on its frames, placeholders elsewhere, which never reach a
    visible token's frames); 2Γ|r|; C̄; GroupNorm with statistics over each (view, group)'s visible frames (as
    the visible-token path: the hidden tokens' features are never computed); the time patchifier; gathered at the views.
    """
    config = sblu.config
    groups, patch = config.num_frequency_patches, config.time_patch_size
    batch_size, num_bins, num_frames = mel.shape
    batch_views = views.shape[0]
    channels, outputs = config.sblu_hidden_size // groups, config.sblu_output_size // groups
    num_time_patches = num_frames // patch
    kernel = sblu.highpass_kernel.double().numpy()
    length = kernel.shape[0]
    rows = mel.numpy().reshape(-1, num_frames)  # (B, F, T) -> (B·F, T)
    highpassed = np.stack([np.convolve(row, kernel, "full")[length // 2 : length // 2 + num_frames] for row in rows])
    highpassed = highpassed.reshape(batch_size, num_bins, num_frames)  # (B·F, T) -> (B, F, T)
    highpassed = torch.from_numpy(highpassed).repeat_interleave(num_views, dim=0)  # (B, F, T) -> (B·M, F, T)
    values = F.conv1d(
        highpassed, sblu.input_projection.weight.double(), sblu.input_projection.bias.double(), groups=groups
    )  # (B·M, F, T) -> (B·M, H, T)

    def to_frames(per_token, fill):
        grid = per_token.new_full((batch_views, num_time_patches * groups, channels), fill)
        grid = grid.scatter(1, views[..., None].expand(-1, -1, channels), per_token)  # (B·M, N, H/F̃)
        grid = grid.reshape(batch_views, num_time_patches, groups, channels)  # (B·M, N, H/F̃) -> (B·M, T̃, F̃, H/F̃)
        grid = grid.permute(0, 2, 3, 1)  # (B·M, T̃, F̃, H/F̃) -> (B·M, F̃, H/F̃, T̃)
        grid = grid.reshape(batch_views, groups * channels, num_time_patches)  # -> (B·M, H, T̃)
        return grid.repeat_interleave(patch, dim=-1)  # (B·M, H, T̃) -> (B·M, H, T)

    decay, frequency = to_frames(decay, 100.0), to_frames(frequency, 50.0)
    magnitude = sblu_magnitude_reference(
        values, decay, frequency, config.sblu_step, config.sblu_kernel_size, config.sblu_phase
    )  # (B·M, H, T)
    response = 2.0 * sblu_gamma(decay, frequency, config.sblu_step) * magnitude
    features = F.conv1d(
        response, sblu.output_projection.weight.double(), sblu.output_projection.bias.double(), groups=groups
    )  # (B·M, H, T) -> (B·M, C, T)

    visible = torch.zeros(batch_views, num_time_patches * groups).scatter(1, views, 1.0)  # (B·M, N)
    visible = visible.reshape(batch_views, num_time_patches, groups).transpose(1, 2)  # -> (B·M, F̃, T̃)
    weight = visible.repeat_interleave(patch, dim=-1)[:, :, None, :].double()  # (B·M, F̃, 1, T)
    grouped = features.reshape(batch_views, groups, outputs, num_frames)  # (B·M, C, T) -> (B·M, F̃, C̃, T)
    count = weight.sum((2, 3), keepdim=True) * outputs
    mean = (grouped * weight).sum((2, 3), keepdim=True) / count
    var = ((grouped - mean) ** 2 * weight).sum((2, 3), keepdim=True) / count
    normed = ((grouped - mean) / torch.sqrt(var + sblu.norm.eps)).reshape(batch_views, -1, num_frames)  # (B·M, C, T)
    normed = normed * sblu.norm.weight.double()[:, None] + sblu.norm.bias.double()[:, None]
    patches = F.conv1d(
        normed,
        sblu.time_patchify.weight.double(),
        sblu.time_patchify.bias.double(),
        stride=patch,
        groups=config.sblu_output_size,
    )  # (B·M, C, T) -> (B·M, C, T̃)
    tokens = patches.reshape(batch_views, groups, outputs, num_time_patches).permute(0, 3, 1, 2)
    # (B·M, C, T̃) -> (B·M, F̃, C̃, T̃) -> (B·M, T̃, F̃, C̃)
    tokens = tokens.reshape(batch_views, num_time_patches * groups, outputs)  # -> (B·M, N, C̃)
    return tokens.gather(1, views[..., None].expand(-1, -1, outputs))  # (B·M, V, C̃)


@pytest.mark.parametrize("phase", ["symmetric", "analytic"])
def test_full_stem_input_equals_the_dense_stem_on_the_unmasked_clip(phase):
    torch.manual_seed(0)
    sblu = AaspModel(paper_group_config(sblu_phase=phase, student_stem_input="full")).double().embeddings.sblu
    masked_sblu = AaspModel(paper_group_config(sblu_phase=phase)).double().embeddings.sblu
    with torch.no_grad():
        for parameter in sblu.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))  # non-trivial GroupNorm affine and biases
    masked_sblu.load_state_dict(sblu.state_dict())
    batch_size, num_views, num_visible, channels = 2, 3, 13, 16
    mel = torch.randn(batch_size, 128, 128, dtype=torch.float64)  # (B, F, T)
    views = random_views(batch_size, num_views, 64, num_visible).reshape(-1, num_visible)  # (B, M, V) -> (B·M, V)
    decay = 15.0 + 100.0 * torch.rand(6, num_visible, channels, dtype=torch.float64)  # (B·M, V, H/F̃)
    frequency = 20.0 + 290.0 * torch.rand(6, num_visible, channels, dtype=torch.float64)

    with torch.no_grad():
        out = sblu(mel, decay, frequency, visible_indices=views)  # (B·M, V, C̃)
        expected = dense_full_clip_stem(sblu, mel, views, decay, frequency, num_views)
        masked = masked_sblu(mel, decay, frequency, visible_indices=views)
    assert out.shape == expected.shape == (6, num_visible, 128)
    # A float64 model runs its whole stem in float64, as the oracle does; they differ in summation order only (FFT
    # against np.convolve, windows against whole rows): n·u with n ≈ 2¹² accumulated terms (the GroupNorm statistics
    # over up to 2048 values after 63-tap and 16-channel dot products), relative to the largest feature.
    # Measured: 4.8e-16 relative.
    tolerance = 2**12 * torch.finfo(torch.float64).eps / 2 * float(expected.abs().max())
    torch.testing.assert_close(out, expected, rtol=0, atol=tolerance)
    # "masked" is far outside that tolerance on the same input: the option is not ignored. (The difference is
    # modest, ~1 % of the features: with α >= α_min the SBLU kernel decays to ε at ±c, so most of a token's
    # response comes from its own frames; the hidden neighbours enter through the window edges.)
    assert (masked - expected).abs().max() > 100 * tolerance


def test_full_stem_leaks_hidden_context_only_within_the_documented_reach():
    """A visible token at time patch 0 (frames 0-15) sees hidden frames up to (K−1)/2 + K'−1 = 31 + 62 = 93 frames
    away (frame 108) under "full": changing hidden time patch 1 changes it, changing time patch 7 (frames 112-127)
    does not. Under "masked" neither does."""
    torch.manual_seed(0)
    model = AaspModel(paper_group_config(student_stem_input="full")).eval()
    masked_model = AaspModel(paper_group_config()).eval()
    masked_model.load_state_dict(model.state_dict())
    x = torch.randn(1, 128, 128)  # (B, T, F)
    views = torch.tensor([[[0, 3, 5]]])  # tokens (t, f) = (0, 0), (0, 3), (0, 5)
    near, far = x.clone(), x.clone()
    near[0, 16:32] = 10 * torch.randn(16, 128)  # hidden time patch 1
    far[0, 112:128] = 10 * torch.randn(16, 128)  # hidden time patch 7
    with torch.no_grad():
        out = model(x, visible_indices=views).last_hidden_state
        changed_near = model(near, visible_indices=views).last_hidden_state
        changed_far = model(far, visible_indices=views).last_hidden_state
        torch.testing.assert_close(changed_far, out, rtol=1e-4, atol=1e-4)
        assert (changed_near - out).abs().max() > 1e-2
        masked_out = masked_model(x, visible_indices=views).last_hidden_state
        torch.testing.assert_close(
            masked_model(near, visible_indices=views).last_hidden_state, masked_out, rtol=1e-5, atol=1e-5
        )


def test_full_stem_with_every_token_visible_equals_the_plain_forward(tiny_config):
    """Nothing hidden: the Lambda encoder, the GroupNorm statistics and the stem input are those of the dense pass."""
    torch.manual_seed(0)
    model = AaspModel(tiny_config(student_stem_input="full")).eval()
    x = torch.randn(2, 64, 32)
    every = torch.arange(8).expand(2, 1, 8)  # (B, M = 1, V = N)
    with torch.no_grad():
        torch.testing.assert_close(model(x, visible_indices=every).last_hidden_state, model(x).last_hidden_state)


def test_all_options_together_train_every_student_parameter():
    torch.manual_seed(0)
    config = tiny_pretraining_config(target_layer="ffn", loss_scaling="eat", student_stem_input="full")
    model = AaspForPreTraining(config).train()
    out = model(*pretraining_batch(config))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.abs().sum())]
    assert not missing, missing
    assert all(p.grad is None for p in model.teacher.parameters())
