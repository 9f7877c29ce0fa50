"""AaspConfig, the SPE/AaPE stem and the encoder: parameter counts, shapes, masks, gradients, round trips."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from huggingface_hub.errors import StrictDataclassError

from aasp_hf import AaspConfig, AaspForAudioClassification, AaspModel
from aasp_hf.modeling_aasp import AaspEmbeddings, sincos_position_embeddings


def count(module):
    return sum(p.numel() for p in module.parameters())


def paper_model(**overrides):
    with torch.device("meta"):  # counts only: no memory, no init cost
        return AaspModel(AaspConfig(**overrides))


# ----------------------------------------------------------------------------------------------- parameter counts
@pytest.mark.parametrize(
    "overrides, part, expected",
    [
        ({}, "encoder", 86.9e6),  # ViT-B 85.06 M + AaPE stem 1.86 M (paper: 87 M)
        ({"patch_embedding": "spe"}, "stem", 0.43e6),
        ({}, "stem", 1.86e6),
        ({"sblu_adaptive": False}, "stem", 1.16e6),
    ],
)
def test_parameter_counts_match_the_paper(overrides, part, expected):
    model = paper_model(**overrides)
    n = count(model) if part == "encoder" else count(model.embeddings)
    assert abs(n - expected) / expected < 0.01, f"{part} {overrides}: {n:,} parameters, paper {expected:,.0f}"


def test_aape_stem_breakdown():
    """The AaPE stem's 1.86 M beyond SPE (paper Sec. AaPE): Lambda encoder (768→128, 3 blocks at width 128, 128→32)
    ≈0.70 M, fusion Linear(768+128→768) ≈0.69 M, SBLU grouped B̄/C̄, GroupNorm and time conv ≈0.04 M."""
    stem = paper_model().embeddings
    assert abs(count(stem.lambda_encoder) - 0.70e6) < 0.01e6
    assert abs(count(stem.fusion) - 0.69e6) < 0.01e6
    assert abs(count(stem.sblu) - 0.04e6) < 0.005e6
    assert not stem.position_embeddings.requires_grad
    assert stem.position_embeddings.shape == (1, 305, 768)


# ----------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "field, value",
    [
        ("patch_embedding", "conv"),
        ("sblu_phase", "causal"),
        ("sblu_kernel_size", 64),
        ("sblu_epsilon", 0.0),
        ("num_attention_heads", 5),
        ("num_frames", 600),
        ("frequency_patch_size", 12),
        ("sblu_hidden_size", 100),
        ("drop_path_rate", 1.5),
        ("classifier_pooling", "max"),
        ("lambda_encoder_reduction", 5),
        ("hidden_size", -8),
        ("layer_norm_first", "yes"),
    ],
)
def test_config_rejects_bad_fields_naming_them(field, value):
    # `@strict` checks the field types on assignment and runs `validate_architecture` (the ranges and divisibilities)
    # after `__init__`; it raises its own errors, naming the field, as for transformers' configs
    with pytest.raises(StrictDataclassError, match=field):
        AaspConfig(**{field: value})


def test_config_defaults_and_round_trip(tmp_path):
    config = AaspConfig()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.intermediate_size) == (
        768,
        12,
        12,
        3072,
    )
    assert (config.num_frequency_patches, config.num_time_patches, config.num_patches) == (8, 38, 304)
    assert config.lambda_encoder_hidden_size == 128
    config.save_pretrained(tmp_path)
    again = AaspConfig.from_pretrained(tmp_path)
    assert again.to_dict() == config.to_dict()


# ----------------------------------------------------------------------------------------------- positions
def test_sincos_positions_against_an_independent_formula():
    table = sincos_position_embeddings(16, 3, 5).numpy()  # (N = 15, D = 16)
    omega = 1.0 / 10000 ** (np.arange(4) / 4)
    for t in range(5):
        for f in range(3):
            row = table[t * 3 + f]  # time-major tokens
            np.testing.assert_allclose(row[:4], np.sin(f * omega), atol=1e-12)  # frequency in the first half
            np.testing.assert_allclose(row[4:8], np.cos(f * omega), atol=1e-12)
            np.testing.assert_allclose(row[8:12], np.sin(t * omega), atol=1e-12)
            np.testing.assert_allclose(row[12:], np.cos(t * omega), atol=1e-12)


def test_positions_truncate_and_interpolate_along_time_only(tiny_config):
    config = tiny_config()
    emb = AaspEmbeddings(config)
    emb.position_embeddings.data.copy_(emb.compute_position_embeddings())
    table = emb.position_embeddings[0, 1:].reshape(4, 2, 32).numpy()  # (T̃, F̃, D)
    short = emb.patch_positions(3).reshape(3, 2, 32).numpy()
    np.testing.assert_allclose(short, table[:3], rtol=0, atol=1e-7)
    long = emb.patch_positions(10).reshape(10, 2, 32).numpy()
    source = np.clip((np.arange(10) + 0.5) * 4 / 10 - 0.5, 0, 3)  # linear, align_corners=False
    for f in range(2):
        for d in range(0, 32, 7):
            np.testing.assert_allclose(long[:, f, d], np.interp(source, np.arange(4), table[:, f, d]), atol=1e-6)
    # the interpolation equals torch's own linear resampling of the table along time
    grid = torch.from_numpy(table).permute(1, 2, 0).reshape(1, 64, 4)  # (T̃, F̃, D) -> (1, F̃·D, T̃)
    resampled = F.interpolate(grid, size=10, mode="linear", align_corners=False).reshape(2, 32, 10).permute(2, 0, 1)
    np.testing.assert_allclose(long, resampled.numpy(), atol=1e-6)
    # in a padded batch every clip gets the positions of its own length
    batch = emb.patch_positions(10, torch.tensor([10, 3])).reshape(2, 10, 2, 32).numpy()
    np.testing.assert_allclose(batch[0], long, atol=1e-6)
    np.testing.assert_allclose(batch[1, :3], table[:3], rtol=0, atol=1e-7)


# ----------------------------------------------------------------------------------------------- forward
STEMS = [
    dict(patch_embedding="spe"),
    dict(patch_embedding="aape"),
    dict(patch_embedding="aape", sblu_adaptive=False),
    dict(patch_embedding="aape", sblu_phase="analytic", layer_norm_first=True),
]


@pytest.mark.parametrize("overrides", STEMS)
def test_forward_shapes_and_outputs(tiny_config, overrides):
    torch.manual_seed(0)
    model = AaspModel(tiny_config(**overrides)).eval()
    x = torch.randn(2, 64, 32)
    out = model(x, output_hidden_states=True, output_attentions=True)
    assert out.last_hidden_state.shape == (2, 1 + 8, 32)
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2
    assert out.attentions[0].shape == (2, 2, 9, 9)
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(2, 2, 9))
    assert torch.isfinite(out.last_hidden_state).all()
    as_tuple = model(x, return_dict=False)
    torch.testing.assert_close(as_tuple[0], out.last_hidden_state)


@pytest.mark.parametrize("overrides", STEMS)
def test_every_trainable_parameter_gets_a_gradient(tiny_config, overrides):
    torch.manual_seed(0)
    model = AaspForAudioClassification(tiny_config(num_labels=3, **overrides)).train()
    out = model(torch.randn(3, 64, 32), labels=torch.tensor([0, 1, 2]))
    out.loss.backward()
    missing = [
        n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or p.grad.abs().sum() == 0)
    ]
    assert not missing, f"no gradient reaches {missing}"
    assert not model.aasp.embeddings.position_embeddings.requires_grad


def test_sdpa_equals_eager(tiny_config):
    torch.manual_seed(0)
    x, mask = torch.randn(2, 64, 32), torch.ones(2, 64, dtype=torch.long)
    mask[1, 40:] = 0
    eager = AaspModel(tiny_config(attn_implementation="eager")).eval()
    sdpa = AaspModel(tiny_config(attn_implementation="sdpa")).eval()
    sdpa.load_state_dict(eager.state_dict())
    torch.testing.assert_close(sdpa(x, mask).last_hidden_state, eager(x, mask).last_hidden_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("overrides", STEMS[:3])
def test_padded_batch_equals_one_by_one(tiny_config, overrides):
    """Padding + attention mask gives the same real-token outputs as the unpadded clip (incl. the SBLU branch)."""
    torch.manual_seed(0)
    model = AaspModel(tiny_config(**overrides)).eval()
    # the long clip exceeds the 64-frame position table (interpolated), the short one does not (truncated)
    short, long = torch.randn(1, 32, 32), torch.randn(1, 96, 32)
    batch = torch.cat([F.pad(short, (0, 0, 0, 64)), long])  # (2, 96, 32)
    mask = torch.ones(2, 96, dtype=torch.long)
    mask[0, 32:] = 0
    out = model(batch, mask)
    alone_short = model(short, torch.ones(1, 32, dtype=torch.long)).last_hidden_state
    alone_long = model(long).last_hidden_state
    torch.testing.assert_close(out.last_hidden_state[0, : 1 + 2 * 2], alone_short[0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(out.last_hidden_state[1], alone_long[0], atol=2e-5, rtol=1e-4)
    assert out.token_mask[0].sum() == 1 + 2 * 2


def test_input_not_a_multiple_of_16_is_padded_and_masked(tiny_config):
    torch.manual_seed(0)
    model = AaspModel(tiny_config()).eval()
    x = torch.randn(1, 50, 32)
    out = model(x)
    padded = F.pad(x, (0, 0, 0, 14))
    mask = torch.ones(1, 64, dtype=torch.long)
    mask[:, 50:] = 0
    torch.testing.assert_close(out.last_hidden_state, model(padded, mask).last_hidden_state)
    assert out.last_hidden_state.shape == (1, 1 + 4 * 2, 32)


def test_longer_and_shorter_inputs_than_the_position_table(tiny_config):
    model = AaspModel(tiny_config()).eval()
    assert model(torch.randn(1, 160, 32)).last_hidden_state.shape == (1, 1 + 10 * 2, 32)
    assert model(torch.randn(1, 16, 32)).last_hidden_state.shape == (1, 1 + 2, 32)


@pytest.mark.parametrize(
    "shape, match",
    [((2, 64, 31), "input_values of shape"), ((64, 32), "input_values of shape"), ((2, 0, 32), "0 frames")],
)
def test_bad_input_shapes_raise(tiny_config, shape, match):
    model = AaspModel(tiny_config()).eval()
    with pytest.raises(ValueError, match=match):
        model(torch.randn(*shape))


def test_bad_attention_mask_shape_raises(tiny_config):
    with pytest.raises(ValueError, match="attention_mask"):
        AaspModel(tiny_config())(torch.randn(2, 64, 32), torch.ones(2, 63))


def test_lambda_parameters_drive_their_frequency_group_and_time_patch(tiny_config):
    """Token (t, f)'s H/F̃ pairs drive hidden channels f·H/F̃ + i for the 16 frames of time patch t."""
    emb = AaspEmbeddings(tiny_config())
    per_token = torch.arange(2 * 8 * 4, dtype=torch.float32).reshape(2, 8, 4)  # (B, N = 4·2, H/F̃ = 4)
    frames = emb._lambda_to_frames(per_token)  # (B, H = 8, T = 64)
    assert frames.shape == (2, 8, 64)
    for b in range(2):
        for h in range(8):
            for t in range(0, 64, 5):
                assert frames[b, h, t] == per_token[b, (t // 16) * 2 + h // 4, h % 4]


def test_adaptive_frequency_estimates_are_bounded(tiny_config):
    model = AaspModel(tiny_config()).eval()
    emb = model.embeddings
    spec = emb.projection(torch.randn(2, 1, 64, 32) * 50).flatten(2).transpose(1, 2)
    decay, frequency = emb.lambda_encoder(spec)
    assert (decay >= -2 * np.log(0.01) / (0.01 * (15 - 1)) - 1e-4).all()  # α_min for K = 15
    assert (frequency >= np.pi / (0.01 * 16) - 1e-4).all() and (frequency <= np.pi / 0.01 + 1e-4).all()


def test_sblu_branch_runs_in_float32_under_bf16_autocast(tiny_config):
    torch.manual_seed(0)
    model = AaspModel(tiny_config()).eval()
    seen = {}

    def record_input_dtype(module, inputs, output):
        seen["dtype"] = inputs[0].dtype

    model.embeddings.sblu.output_projection.register_forward_hook(record_input_dtype)
    x = torch.randn(2, 64, 32)
    reference = model(x).last_hidden_state
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x).last_hidden_state
    assert seen["dtype"] == torch.float32  # 2Γ|r| leaves the SBLU in float32
    assert torch.isfinite(out).all()
    assert (out.float() - reference).abs().max() < 0.2  # bf16 matmuls elsewhere


def test_gradient_checkpointing_gives_the_same_gradients(tiny_config):
    torch.manual_seed(0)
    model = AaspForAudioClassification(tiny_config(num_labels=2)).train()
    x, y = torch.randn(2, 64, 32), torch.tensor([0, 1])
    model(x, labels=y).loss.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    # activation_checkpointing_enable: transformers' later name of gradient_checkpointing_enable (examples/pretrain.py
    # calls whichever the installed release has, as here)
    getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    assert model.aasp.layers[0].gradient_checkpointing
    model(x, labels=y).loss.backward()
    for name, grad in reference.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, msg=name)


# ----------------------------------------------------------------------------------------------- classification head
def test_classification_losses_follow_problem_type(tiny_config):
    torch.manual_seed(0)
    x = torch.randn(2, 64, 32)
    model = AaspForAudioClassification(tiny_config(num_labels=3)).eval()
    out = model(x, labels=torch.tensor([2, 0]))
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, torch.tensor([2, 0])))
    assert model.config.problem_type == "single_label_classification"  # set from the labels, as transformers does
    multi = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    model.config.problem_type = "multi_label_classification"
    out = model(x, labels=multi)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, multi))
    # float targets (multi-hot, mixup) on a config without problem_type: BCE with logits, and the config says so
    model = AaspForAudioClassification(tiny_config(num_labels=3)).eval()
    out = model(x, labels=multi)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, multi))
    assert model.config.problem_type == "multi_label_classification"
    # one output: regression
    model = AaspForAudioClassification(tiny_config(num_labels=1)).eval()
    target = torch.tensor([0.5, -1.0])
    out = model(x, labels=target)
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits.squeeze(-1), target))


def test_a_half_precision_classifier_reduces_its_loss_in_float32(tiny_config):
    torch.manual_seed(0)
    model = AaspForAudioClassification(tiny_config(num_labels=3)).eval().to(torch.bfloat16)
    labels = torch.tensor([2, 0])
    out = model(torch.randn(2, 64, 32, dtype=torch.bfloat16), labels=labels)
    assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits.float(), labels))


def test_mean_pooling_ignores_padding(tiny_config):
    torch.manual_seed(0)
    model = AaspForAudioClassification(tiny_config(num_labels=2, classifier_pooling="mean")).eval()
    x = torch.randn(1, 32, 32)
    padded, mask = F.pad(x, (0, 0, 0, 32)), torch.zeros(1, 64, dtype=torch.long)
    mask[:, :32] = 1
    torch.testing.assert_close(model(padded, mask).logits, model(x).logits, atol=2e-5, rtol=1e-4)


def test_freeze_feature_encoder_freezes_only_the_stem(tiny_config):
    model = AaspForAudioClassification(tiny_config(num_labels=2))
    model.freeze_feature_encoder()
    assert not any(p.requires_grad for p in model.aasp.embeddings.parameters())
    assert all(p.requires_grad for p in model.aasp.layers.parameters())
    assert model.classifier.dense.weight.requires_grad


def test_save_and_load_round_trip_keeps_outputs_and_fixed_tensors(tiny_config, tmp_path):
    torch.manual_seed(0)
    model = AaspForAudioClassification(tiny_config(num_labels=2)).eval()
    x = torch.randn(2, 64, 32)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists() and not list(tmp_path.glob("*.bin"))
    again = AaspForAudioClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(again(x).logits, model(x).logits)
    emb = again.aasp.embeddings
    torch.testing.assert_close(emb.position_embeddings.data, emb.compute_position_embeddings())
    torch.testing.assert_close(emb.sblu.highpass_kernel, emb.sblu.compute_highpass_kernel(again.config))
    # a base checkpoint loads into the head (encoder under `aasp`)
    base = AaspModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(base(x).last_hidden_state, model.aasp(x).last_hidden_state)


# ----------------------------------------------------------------------------------------------- masked views
def random_views(batch_size, num_views, num_tokens, num_visible, seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(batch_size, num_views, num_tokens, generator=g)
    return scores.argsort(-1)[..., :num_visible].sort(-1).values  # (B, M, V)


@pytest.mark.parametrize("overrides", STEMS[:3])
def test_all_tokens_visible_equals_the_plain_forward(tiny_config, overrides):
    torch.manual_seed(0)
    model = AaspModel(tiny_config(**overrides)).eval()
    x = torch.randn(2, 64, 32)
    every = torch.arange(8).expand(2, 1, 8)  # (B, M = 1, V = N)
    torch.testing.assert_close(model(x, visible_indices=every).last_hidden_state, model(x).last_hidden_state)


@pytest.mark.parametrize("overrides", STEMS[:3])
def test_hidden_patches_do_not_leak_into_visible_tokens(tiny_config, overrides):
    """Changing the content of hidden patches leaves every view's outputs unchanged (incl. the SBLU's ±c taps)."""
    torch.manual_seed(0)
    config = tiny_config(**overrides)
    model = AaspModel(config).eval()
    x = torch.randn(1, 64, 32)
    views = torch.tensor([[[0, 3, 5]]])  # tokens (t, f) = (0, 0), (1, 1), (2, 1)
    changed = x.clone()
    for token in set(range(8)) - {0, 3, 5}:
        t, f = divmod(token, 2)
        changed[0, t * 16 : (t + 1) * 16, f * 16 : (f + 1) * 16] = 10 * torch.randn(16, 16)
    out = model(x, visible_indices=views).last_hidden_state
    torch.testing.assert_close(model(changed, visible_indices=views).last_hidden_state, out, atol=1e-5, rtol=1e-5)
    assert out.shape == (1, 1 + 3, 32)


@pytest.mark.parametrize("adaptive", [True, False])
@pytest.mark.parametrize("phase", ["symmetric", "analytic"])
def test_visible_token_path_equals_the_dense_masked_view(phase, adaptive):
    """AaspSBLU.forward on visible tokens (token-local, pre-training) against its dense path run on each view with
    per-group visibility and taken at the visible tokens: float64 values and gradients for every SBLU parameter and
    the per-token (α, β). Paper-size groups (128 mel bins, F̃ = 8, K = 63), 8 time patches, 3 views per clip."""
    torch.manual_seed(0)
    config = AaspConfig(
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_frames=128,
        lambda_encoder_reduction=4,
        sblu_phase=phase,
        sblu_adaptive=adaptive,
    )
    sblu = AaspModel(config).double().embeddings.sblu
    with torch.no_grad():
        for parameter in sblu.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))  # non-trivial GroupNorm affine, biases, statics
    batch_size, num_views, groups, channels = 2, 3, 8, 16
    mel = torch.randn(batch_size, 128, 128, dtype=torch.float64)  # (B, F, T)
    views = random_views(batch_size, num_views, 64, 13).reshape(batch_size * num_views, 13)  # (B·M, V)
    if adaptive:
        decay = (15.0 + 100.0 * torch.rand(6, 13, channels, dtype=torch.float64)).requires_grad_()  # (B·M, V, H/F̃)
        frequency = (20.0 + 290.0 * torch.rand(6, 13, channels, dtype=torch.float64)).requires_grad_()
    else:
        decay = frequency = None

    def dense():
        visible = torch.zeros(6, 64, dtype=torch.bool).scatter(1, views, True).reshape(6, 8, groups)  # (B·M, T̃, F̃)
        visibility = visible.transpose(1, 2).repeat_interleave(16, dim=-1)  # (B·M, F̃, T)
        frames = None, None
        if adaptive:  # per-token (α, β) -> (B·M, H, T); hidden tokens get placeholders their outputs never use

            def to_frames(per_token, fill):
                grid = per_token.new_full((6, 64, channels), fill).scatter(
                    1, views[..., None].expand(-1, -1, channels), per_token
                )  # (B·M, N, H/F̃)
                grid = grid.reshape(6, 8, groups, channels).permute(0, 2, 3, 1).reshape(6, groups * channels, 8)
                return grid.repeat_interleave(16, dim=-1)  # (B·M, H, T̃) -> (B·M, H, T)

            frames = to_frames(decay, 100.0), to_frames(frequency, 50.0)
        out = sblu(mel.repeat_interleave(num_views, dim=0), *frames, visibility)  # (B·M, N, C̃)
        return out.gather(1, views[..., None].expand(-1, -1, out.shape[-1]))  # (B·M, V, C̃)

    leaves = list(sblu.parameters()) + ([decay, frequency] if adaptive else [])
    expected = dense()
    out = sblu(mel, decay, frequency, visible_indices=views)
    assert out.shape == expected.shape == (6, 13, 128)
    # Both paths are float64 end to end (a float64 model runs its stem in float64) and differ only in summation
    # order: the dense path convolves whole rows, the token path sums each token's window. The longest chain of
    # accumulations is the GroupNorm statistics over a (view, group)'s visible values, at most T̃·C̃·P = 8·16·16 =
    # 2048 terms, after dot products of K = 63 taps and 16 channels: n ≈ 2¹² terms, so a rounding error of n·u
    # (u = 2⁻⁵³) relative to the largest value bounds the difference.
    rounding = 2**12 * torch.finfo(torch.float64).eps / 2
    assert (out - expected).abs().max() <= rounding * expected.abs().max()
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, upstream)
    expected_grads = torch.autograd.grad(expected, leaves, upstream)
    names = [name for name, _ in sblu.named_parameters()] + ["decay", "frequency"]
    for name, grad, reference in zip(names, grads, expected_grads):
        # a gradient sums over every token of the batch as well: B·M·V = 78 more terms than the forward
        assert (grad - reference).abs().max() <= 2**7 * rounding * reference.abs().max(), name


def test_visible_token_path_and_masked_group_norm_keep_float32_under_bf16_autocast(tiny_config):
    """The visible-token path runs with autocast off (the same float32 result as without autocast, to float tolerance); the padded dense
    path's masked GroupNorm computes its statistics in float32 from a bf16 input."""
    from aasp_hf.modeling_aasp import _masked_group_norm

    torch.manual_seed(0)
    sblu = AaspModel(tiny_config()).embeddings.sblu
    mel = torch.randn(2, 32, 64)  # (B, F, T)
    views = random_views(2, 2, 8, 3).reshape(4, 3)  # (B·M, V)
    decay, frequency = 20.0 + 50.0 * torch.rand(4, 3, 4), 30.0 + 200.0 * torch.rand(4, 3, 4)  # (B·M, V, H/F̃)
    reference = sblu(mel, decay, frequency, visible_indices=views)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sblu(mel, decay, frequency, visible_indices=views)
    assert out.dtype == torch.float32  # autocast is off inside: float32 arithmetic, not bf16 (which errs ~1e-2)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-6)

    x = (3.0 + torch.randn(2, 16, 64)).bfloat16()  # (B, C, T), bf16 as a C̄ output under autocast
    visibility = (torch.rand(2, 2, 64) > 0.3).float()  # (B, G, T)
    expected = _masked_group_norm(x.float(), sblu.norm, visibility)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        normed = _masked_group_norm(x, sblu.norm, visibility)
    assert normed.dtype == torch.float32
    torch.testing.assert_close(normed, expected, rtol=1e-6, atol=1e-6)


def test_views_are_encoded_independently(tiny_config):
    torch.manual_seed(0)
    model = AaspModel(tiny_config()).eval()
    x = torch.randn(2, 64, 32)
    views = random_views(2, 3, 8, 4)
    together = model(x, visible_indices=views).last_hidden_state  # (B·M, 1 + V, D)
    assert together.shape == (6, 5, 32)
    for b in range(2):
        for m in range(3):
            alone = model(x[b : b + 1], visible_indices=views[b : b + 1, m : m + 1]).last_hidden_state
            torch.testing.assert_close(together[b * 3 + m], alone[0], atol=1e-5, rtol=1e-5)


def test_visible_indices_input_errors(tiny_config):
    model = AaspModel(tiny_config())
    views = random_views(2, 2, 8, 4)
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.randn(2, 64, 32), torch.ones(2, 64), visible_indices=views)
    with pytest.raises(ValueError, match="multiple of 16"):
        model(torch.randn(2, 60, 32), visible_indices=views)
    with pytest.raises(ValueError, match="visible_indices must have shape"):
        model(torch.randn(3, 64, 32), visible_indices=views)


def test_bf16_models_run_and_keep_the_sblu_branch_in_float32(tiny_config, tmp_path):
    torch.manual_seed(0)
    model = AaspForAudioClassification(tiny_config(num_labels=2)).eval()
    model.save_pretrained(tmp_path)
    x = torch.randn(2, 64, 32)
    reference = model(x).logits
    loaded = AaspForAudioClassification.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    sblu_dtypes = {p.dtype for n, p in loaded.named_parameters() if ".sblu." in n}
    assert sblu_dtypes == {torch.float32}
    assert loaded.classifier.dense.weight.dtype == torch.bfloat16
    assert (loaded(x).logits.float() - reference).abs().max() < 0.1
    cast = model.to(torch.bfloat16)  # a plain .to() casts everything; the branch computes in float32 anyway
    assert (cast(x).logits.float() - reference).abs().max() < 0.1


def test_encoder_traces_without_graph_breaks(tiny_config):
    """torch.compile readiness: dynamo captures the whole forward (SBLU autograd Function included) in one graph."""
    model = AaspModel(tiny_config()).eval()
    mask = torch.ones(2, 64)
    mask[1, 40:] = 0
    explanation = torch._dynamo.explain(model)(torch.randn(2, 64, 32), mask)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("other", [{"mask_num_views": 2}, {"mask_ratio": 0.5}, {"mask_query_ratio": 0.5}])
def test_pretraining_refuses_masks_drawn_for_another_config(other):
    """AaspForPreTraining reads mask_num_views, mask_ratio and mask_query_ratio: masks whose views, visible or query
    counts another config gives are refused with both shapes named; the model's own config's masks are taken."""
    from aasp_hf import AaspForPreTraining
    from aasp_hf.data.masking import sample_batch_masks
    from conftest import tiny_pretraining_config

    config = tiny_pretraining_config()
    model = AaspForPreTraining(config).eval()
    x = torch.randn(2, config.num_frames, config.num_mel_bins)
    g = torch.Generator().manual_seed(0)
    masks = sample_batch_masks(tiny_pretraining_config(**other), 2, generator=g)
    with pytest.raises(ValueError, match=r"do not match the config: \(views, visible, queries\)"):
        model(x, visible_indices=masks["visible_indices"], query_indices=masks["query_indices"])
    own = sample_batch_masks(config, 2, generator=g)
    with torch.no_grad():
        assert torch.isfinite(model(x, visible_indices=own["visible_indices"], query_indices=own["query_indices"]).loss)
