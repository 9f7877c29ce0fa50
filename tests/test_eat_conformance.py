"""Conformance with EAT and data2vec 2.0 where the paper follows them ("following EAT").

Each test writes the published algorithm once more, here, as a small float64 reference from its formula (no code of
aasp_hf is used to build the reference), and compares it with aasp_hf on random inputs. The first line of each test's
docstring names the file and function it follows in EAT (github.com/cwx-worst-one/EAT) or data2vec 2.0
(github.com/facebookresearch/fairseq, examples/data2vec/).
"""

import math

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

from aasp_hf import AaspConfig
from aasp_hf.modeling_aasp import AaspCNNPredictor
from aasp_hf.training.model_ema import update_teacher_
from conftest import tiny_config_kwargs


# ----------------------------------------------------------------------------------------------- float64 helpers
def gelu(x):
    """Exact GELU, x·Φ(x)."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def layer_norm(x, dim=-1, eps=1e-5):
    """(x − mean) / sqrt(biased variance + eps) along `dim`, no affine."""
    mean = x.mean(dim, keepdim=True)
    var = ((x - mean) ** 2).mean(dim, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps)


def grouped_conv2d_same(x, weight, bias, groups):
    """Σ over the k×k taps and the input channels of each group, zero padding k // 2 (odd k): (B, C_in, H, W) ->
    (B, C_out, H, W). Written as a loop over taps, not with torch's convolution."""
    batch_size, in_channels, height, width = x.shape
    out_channels, in_per_group, kernel, _ = weight.shape
    out_per_group, pad = out_channels // groups, kernel // 2
    padded = x.new_zeros(batch_size, in_channels, height + 2 * pad, width + 2 * pad)
    padded[:, :, pad : pad + height, pad : pad + width] = x
    out = bias.view(1, out_channels, 1, 1).repeat(batch_size, 1, height, width)
    for g in range(groups):
        inputs = padded[:, g * in_per_group : (g + 1) * in_per_group]
        taps = weight[g * out_per_group : (g + 1) * out_per_group]  # (C_out/G, C_in/G, k, k)
        for i in range(kernel):
            for j in range(kernel):
                window = inputs[:, :, i : i + height, j : j + width]  # (B, C_in/G, H, W)
                out[:, g * out_per_group : (g + 1) * out_per_group] += torch.einsum(
                    "bchw,oc->bohw", window, taps[:, :, i, j]
                )
    return out


# ----------------------------------------------------------------------------------------------- CNN predictor
def eat_cnn_decoder(encoder_output, visible, noise, convs, projection, num_time, num_frequency, groups):
    """data2vec 2.0's CNN decoder as EAT runs it, float64 (B', N, C) -> (B', N, D) at every grid position.

    `decoder_input`: the visible tokens (CLS dropped) followed by the noise at the masked tokens, put back in grid
    order with `ids_restore` (the argsort of [visible ids, masked ids]); `Decoder2d.forward`: (B', N, D) ->
    (B', D, H=T̃, W=F̃), then per block conv -> LayerNorm over channels (no affine) -> GELU -> `add_residual` (adds the
    block's input whenever the channel counts match, the first block included), then `proj`."""
    encoder_output, noise = encoder_output.double(), noise.double()
    batch_size, num_tokens, hidden = noise.shape
    is_masked = torch.ones(batch_size, num_tokens, dtype=torch.bool)
    is_masked[torch.arange(batch_size)[:, None], visible] = False
    masked = torch.stack([row.nonzero().flatten() for row in is_masked])  # (B', N − V), ascending
    ids_restore = torch.cat([visible, masked], dim=1).argsort(dim=1)  # (B', N)
    mask_tokens = noise.gather(1, masked[..., None].expand(-1, -1, hidden))  # the noise drawn for the masked tokens
    x = torch.cat([encoder_output[:, 1:], mask_tokens], dim=1).gather(1, ids_restore[..., None].expand(-1, -1, hidden))
    x = x.transpose(1, 2).reshape(batch_size, hidden, num_time, num_frequency)  # (B', N, D) -> (B', D, T̃, F̃)
    residual = x
    for conv in convs:
        x = gelu(layer_norm(grouped_conv2d_same(x, conv.weight.double(), conv.bias.double(), groups), dim=1))
        if residual.shape[1] == x.shape[1]:
            x = x + residual
        residual = x
    x = x.reshape(batch_size, x.shape[1], num_tokens).transpose(1, 2)  # (B', C, T̃, F̃) -> (B', N, C)
    return x @ projection.weight.double().T + projection.bias.double()


def cnn_predictor(width, num_layers=3, kernel=3, groups=4, **overrides):
    config = AaspConfig(
        **tiny_config_kwargs(predictor_type="cnn", predictor_cnn_hidden_size=width, predictor_cnn_num_layers=num_layers,
                             predictor_cnn_kernel_size=kernel, predictor_cnn_groups=groups, **overrides)
    )  # fmt: skip
    torch.manual_seed(0)
    predictor = AaspCNNPredictor(config)
    with torch.no_grad():  # weights large enough that a missing residual or a wrong fill shows at O(1)
        for module in predictor.modules():
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                module.weight.normal_(0, 0.3)
                module.bias.normal_(0, 0.1)
    return config, predictor


def random_views(config, batch_size=3, num_visible=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    visible = torch.stack([torch.randperm(config.num_patches, generator=g)[:num_visible] for _ in range(batch_size)])
    encoder_output = torch.randn(batch_size, 1 + num_visible, config.hidden_size, generator=g)  # CLS first
    noise = 0.01 * torch.randn(batch_size, config.num_patches, config.hidden_size, generator=g)
    return encoder_output, visible, noise


@pytest.mark.parametrize("width", [32, 48])  # 32 = D: the first block is residual too; 48 ≠ D: it is not
def test_cnn_predictor_matches_data2vec_decoder2d_with_the_first_residual(width):
    """EAT models/modules.py Decoder2d.forward + DecoderBase.add_residual, models/base.py decoder_input."""
    config, predictor = cnn_predictor(width)
    encoder_output, visible, noise = random_views(config)
    queries = torch.arange(config.num_patches).expand(3, -1)  # every grid position
    expected = eat_cnn_decoder(encoder_output, visible, noise, predictor.convs, predictor.output_projection,
                               config.num_time_patches, config.num_frequency_patches, groups=4)  # fmt: skip
    with torch.no_grad():
        ours = predictor(encoder_output, visible, queries, mask_noise=noise)
    torch.testing.assert_close(ours.double(), expected, rtol=1e-5, atol=1e-5)
    # the same random queries read the same grid positions
    chosen = torch.tensor([[5, 0, 7], [1, 2, 3], [6, 6, 4]])
    with torch.no_grad():
        picked = predictor(encoder_output, visible, chosen, mask_noise=noise)
    torch.testing.assert_close(picked, ours.gather(1, chosen[..., None].expand(-1, -1, config.hidden_size)))


def test_cnn_predictor_fills_hidden_positions_with_eats_noise_from_the_global_rng():
    """EAT models/base.py ModalitySpecificEncoder.decoder_input (mask_tokens ~ N(0, mask_noise_std²), 0.01)."""
    config, predictor = cnn_predictor(32)
    assert AaspConfig().predictor_cnn_mask_noise_std == 0.01  # EAT config/pretraining_AS2M.yaml mask_noise_std
    encoder_output, visible, _ = random_views(config)
    queries = torch.arange(config.num_patches).expand(3, -1)
    with torch.no_grad():
        torch.manual_seed(7)
        drawn = predictor(encoder_output, visible, queries)
        torch.manual_seed(7)
        noise = 0.01 * torch.randn(3, config.num_patches, config.hidden_size)
        injected = predictor(encoder_output, visible, queries, mask_noise=noise)
        zeros = predictor(encoder_output, visible, queries, mask_noise=torch.zeros_like(noise))
        noise_at_visible = noise.clone()
        noise_at_visible[torch.arange(3)[:, None], visible] = 100.0  # overwritten by the visible tokens
        ignored = predictor(encoder_output, visible, queries, mask_noise=noise_at_visible)
    torch.testing.assert_close(drawn, injected, rtol=0, atol=0)
    torch.testing.assert_close(ignored, injected, rtol=0, atol=0)
    assert (drawn - zeros).abs().max() > 1e-4  # the noise reaches the output
    _, silent = cnn_predictor(32, predictor_cnn_mask_noise_std=0.0)
    with torch.no_grad():
        torch.testing.assert_close(silent(encoder_output, visible, queries), zeros, rtol=0, atol=0)


def test_cnn_predictor_defaults_are_eats_decoder():
    """EAT config/pretraining_AS2M.yaml model.modalities.image.decoder (and mask_noise_std)."""
    c = AaspConfig()
    eat = dict(decoder_dim=768, decoder_layers=6, decoder_kernel=3, decoder_groups=16, mask_noise_std=0.01)
    ours = (c.predictor_cnn_hidden_size, c.predictor_cnn_num_layers, c.predictor_cnn_kernel_size,
            c.predictor_cnn_groups, c.predictor_cnn_mask_noise_std)  # fmt: skip
    assert ours == tuple(eat.values())
    with pytest.raises(StrictDataclassError, match="AaspConfig.predictor_cnn_mask_noise_std=-0.1"):
        AaspConfig(predictor_cnn_mask_noise_std=-0.1)


# ----------------------------------------------------------------------------------------------- initialisation
def test_eat_initialisation_draws_the_stem_cls_and_linears_as_eat_does(tmp_path):
    """EAT models/images.py ImageEncoder.__init__ (xavier_uniform_ on the stem kernel viewed as (D, 256)), models/base.py
    ModalitySpecificEncoder.__init__ (extra_tokens normal_), fairseq init_bert_params (Linear N(0, 0.02²))."""
    from aasp_hf import AaspForPreTraining, AaspModel

    kwargs = tiny_config_kwargs(hidden_size=64, intermediate_size=128, num_mel_bins=64, patch_embedding="spe")
    torch.manual_seed(0)
    eat = AaspModel(AaspConfig(initialization="eat", **kwargs))
    default = AaspModel(AaspConfig(**kwargs))
    assert AaspConfig().initialization == "trunc_normal"

    # stem: U(±a), a = sqrt(6 / (fan_in + fan_out)) with fan_in = 1·16·16 (the flattened kernel), fan_out = D
    stem = eat.embeddings.projection
    bound = math.sqrt(6.0 / (16 * 16 + 64))
    assert stem.weight.abs().max() <= bound and stem.weight.abs().max() > 0.99 * bound
    assert stem.weight.var().item() == pytest.approx(bound**2 / 3, rel=0.05)  # variance of U(±a) = a²/3
    assert stem.bias.abs().max() <= 1 / 16 and stem.bias.abs().max() > 0.5 / 16  # PyTorch's default bias
    assert default.embeddings.projection.weight.std().item() == pytest.approx(0.02, rel=0.05)  # trunc_normal

    # CLS ~ N(0, 1) against std 0.02 by default
    assert 0.6 < eat.cls_token.std() < 1.4 and default.cls_token.std() < 0.05

    # Linear weights N(0, 0.02²), not truncated: ~4.6 % beyond 2σ; biases zero
    weights = torch.cat([m.weight.flatten() for m in eat.modules() if isinstance(m, torch.nn.Linear)])
    assert weights.std().item() == pytest.approx(0.02, rel=0.05)
    assert (weights.abs() > 0.04).float().mean().item() == pytest.approx(0.0455, abs=0.01)
    assert all(not m.bias.any() for m in eat.modules() if isinstance(m, torch.nn.Linear) and m.bias is not None)

    # the CNN predictor at PyTorch's default: U(±1/sqrt(fan_in)) for weights and biases
    config = AaspConfig(**tiny_pretraining_kwargs(initialization="eat", predictor_type="cnn",
                                                  predictor_cnn_hidden_size=32, predictor_cnn_groups=4))  # fmt: skip
    for layer in [*AaspForPreTraining(config).predictor.convs, AaspForPreTraining(config).predictor.output_projection]:
        limit = layer.weight[0].numel() ** -0.5
        assert layer.weight.abs().max() <= limit and layer.weight.abs().max() > 0.9 * limit
        assert layer.bias.abs().max() <= limit and layer.bias.abs().max() > 0.3 * limit

    # loaded weights are never re-drawn (the model is built on the meta device, then the checkpoint fills it)
    eat.save_pretrained(tmp_path)
    again = AaspModel.from_pretrained(tmp_path)
    assert again.config.initialization == "eat"
    for (name, a), b in zip(eat.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), name


def tiny_pretraining_kwargs(**overrides):
    return tiny_config_kwargs(predictor_hidden_size=16, predictor_num_attention_heads=2, predictor_num_layers=2,
                              mask_block_sizes=[[1, 2]], **overrides)  # fmt: skip


# ----------------------------------------------------------------------------------------------- teacher targets
def eat_alt_block_post_norm(layer, x, num_heads, eps):
    """EAT models/modules.py AltBlock.forward, layer_norm_first=False, ffn_targets=True, in float64:
    x = x + attn(x); r = x = norm1(x); x = mlp(x); t = x; x = norm2(r + x). Returns (x, t)."""

    def linear(h, module):
        return h @ module.weight.double().T + module.bias.double()

    def norm(h, module):
        return layer_norm(h, eps=eps) * module.weight.double() + module.bias.double()

    batch_size, length, width = x.shape
    head = width // num_heads
    q, k, v = (
        linear(x, p).reshape(batch_size, length, num_heads, head).transpose(1, 2)
        for p in (layer.attention.query, layer.attention.key, layer.attention.value)
    )  # (B, h, L, d)
    weights = torch.softmax((q * head**-0.5) @ k.transpose(-1, -2), dim=-1)  # AltAttention: q·scale, then q @ kᵀ
    attended = linear((weights @ v).transpose(1, 2).reshape(batch_size, length, width), layer.attention.output)
    x = r = norm(x + attended, layer.norm1)
    t = linear(gelu(linear(x, layer.mlp.fc1)), layer.mlp.fc2)
    return norm(r + t, layer.norm2), t


def eat_make_targets(layer_results):
    """EAT models/EAT_pretraining.py Data2VecMultiModel.make_targets with EAT's config (instance_norm_target_layer,
    layer_norm_targets; average_top_k_layers = all): per layer F.instance_norm over time of (B, C, T), i.e. each
    channel normalised across the tokens (biased variance, eps 1e-5); the mean over layers; LayerNorm over C."""
    normed = [layer_norm(y, dim=1) for y in layer_results]  # (B, N, D), normalised across N per (clip, channel)
    return layer_norm(sum(normed) / len(normed), dim=-1)


def pretraining_model(**overrides):
    from aasp_hf import AaspForPreTraining

    config = AaspConfig(**tiny_pretraining_kwargs(patch_embedding="spe", **overrides))
    torch.manual_seed(0)
    model = AaspForPreTraining(config).double().eval()
    with torch.no_grad():  # a teacher that differs from the student (the fixed position table stays the same)
        for param, student in zip(model.teacher.parameters(), model.aasp.parameters()):
            if student.requires_grad:
                param.add_(0.05 * torch.randn_like(param))
    return config, model


def test_teacher_targets_are_eats_averaged_instance_normed_ffn_outputs():
    """EAT models/EAT_pretraining.py Data2VecMultiModel.forward (teacher `lr[:, extra_tokens:]`) and make_targets."""
    from conftest import pretraining_batch

    config, model = pretraining_model()
    assert (config.target_layer, config.target_norm_axis) == ("ffn", "tokens")  # end_of_block_targets: false
    x, visible, queries = pretraining_batch(config, dtype=torch.float64)
    with torch.no_grad():
        out = model(x, visible, queries)
        h = model.teacher(x, output_hidden_states=True).hidden_states[0]  # the blocks' input: CLS + patches
    layer_results = []
    for layer in model.teacher.layers:
        h, t = eat_alt_block_post_norm(layer, h, config.num_attention_heads, config.layer_norm_eps)
        layer_results.append(t[:, 1:])  # the CLS (extra token) dropped
    torch.testing.assert_close(out.targets, eat_make_targets(layer_results), rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------------------------- losses
def eat_losses(predictions, targets, query_targets, student_cls):
    """EAT models/EAT_pretraining.py forward: d2v_loss(x, y) = (x − y)² / √D per element; the regression term over
    the predicted tokens; the CLS term d2v_loss(cls_pred, y.mean(1) per clone) × sample_size; fairseq's `model`
    criterion sums every element and the trainer divides by sample_size (the number of predicted tokens).
    Returns (regression part, CLS part), each already divided by sample_size."""
    dim = predictions.shape[-1]
    sample_size = predictions.shape[0] * predictions.shape[1] * predictions.shape[2]  # B·M·Q
    regression = ((predictions - query_targets) ** 2 / math.sqrt(dim)).sum()
    cls_target = targets.mean(dim=1)[:, None]  # (B, 1, D), the same for the M clones of a clip
    cls = ((student_cls - cls_target) ** 2 / math.sqrt(dim)).sum() * sample_size
    return regression / sample_size, cls / sample_size


def test_eat_loss_scaling_gives_eats_regression_and_clip_terms():
    """EAT models/EAT_pretraining.py Data2VecMultiModel.d2v_loss and the cls_loss term (orig_targets.mean(dim=1))."""
    from conftest import pretraining_batch

    config, model = pretraining_model(loss_scaling="eat")
    x, visible, queries = pretraining_batch(config, dtype=torch.float64)
    with torch.no_grad():
        out = model(x, visible, queries)
        student_cls = model.aasp(x, visible_indices=visible).last_hidden_state[:, 0]  # (B·M, D)
    batch_size, num_views = visible.shape[:2]
    student_cls = student_cls.reshape(batch_size, num_views, -1)  # (B·M, D) -> (B, M, D)
    query_targets = torch.stack([out.targets[b, queries[b]] for b in range(batch_size)])  # (B, M, Q, D)
    regression, cls = eat_losses(out.predictions, out.targets, query_targets, student_cls)
    torch.testing.assert_close(out.masked_prediction_loss, regression, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(out.clip_loss, cls, rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------------------------- EMA
def test_teacher_update_is_eats_ema_over_the_whole_encoder():
    """fairseq modules/ema_module.py EMAModule._step_internal (ema ← decay·ema + (1 − decay)·param; parameters
    without gradient copied), with EAT's ema_encoder_only: false (the CNN stem is in the teacher too)."""
    config, model = pretraining_model()
    student = {name: p.detach().clone() for name, p in model.aasp.named_parameters()}
    teacher = {name: p.detach().clone() for name, p in model.teacher.named_parameters()}
    assert teacher.keys() == student.keys() and "embeddings.projection.weight" in teacher  # stem included
    decay = 0.9998
    # ours lerps the fixed table too: equal in both, so the same as fairseq's copy
    update_teacher_(model.teacher, model.aasp, decay)
    for name, param in model.teacher.named_parameters():
        trainable = dict(model.aasp.named_parameters())[name].requires_grad
        expected = decay * teacher[name] + (1 - decay) * student[name] if trainable else student[name]
        torch.testing.assert_close(param.detach(), expected, rtol=1e-12, atol=1e-12, msg=name)


# ----------------------------------------------------------------------------------------------- converter key map
def test_converter_maps_every_eat_encoder_key_to_its_aasp_name():
    """EAT models/images.py ImageEncoder + models/modules.py AltBlock/AltAttention parameter names (fairseq layout)."""
    import convert_eat_checkpoint as eat_conv
    from aasp_hf.modeling_aasp import sincos_position_embeddings

    width, layers, mels, frames = 32, 2, 32, 64  # a 4 × 2 (time × frequency) grid
    g = torch.Generator().manual_seed(0)
    prefix = "modality_encoders.IMAGE."
    state = {
        prefix + "local_encoder.proj.weight": torch.randn(width, 1, 16, 16, generator=g),
        prefix + "local_encoder.proj.bias": torch.randn(width, generator=g),
        prefix + "extra_tokens": torch.randn(1, 1, width, generator=g),
        prefix + "fixed_positional_encoder.positions": sincos_position_embeddings(width, 2, 4).float()[None],
        prefix + "context_encoder.norm.weight": torch.randn(width, generator=g),
        prefix + "context_encoder.norm.bias": torch.randn(width, generator=g),
        prefix + "decoder.blocks.0.0.weight": torch.randn(width, 2, 3, 3, generator=g),  # pre-training only: dropped
    }
    expected = {  # AaSP name -> EAT name (and, for q/k/v, the third of the fused qkv rows)
        "embeddings.projection.weight": (prefix + "local_encoder.proj.weight", None),
        "embeddings.projection.bias": (prefix + "local_encoder.proj.bias", None),
        "cls_token": (prefix + "extra_tokens", None),
        "embedding_norm.weight": (prefix + "context_encoder.norm.weight", None),
        "embedding_norm.bias": (prefix + "context_encoder.norm.bias", None),
    }
    for i in range(layers):
        for suffix, shape in (("weight", (width,)), ("bias", (width,))):
            for eat, ours in (("norm1", "norm1"), ("norm2", "norm2")):
                state[f"blocks.{i}.{eat}.{suffix}"] = torch.randn(*shape, generator=g)
                expected[f"layers.{i}.{ours}.{suffix}"] = (f"blocks.{i}.{eat}.{suffix}", None)
        for eat, ours, shape in (("attn.proj", "attention.output", (width, width)), ("mlp.fc1", "mlp.fc1", (64, width)),
                                 ("mlp.fc2", "mlp.fc2", (width, 64))):  # fmt: skip
            state[f"blocks.{i}.{eat}.weight"] = torch.randn(*shape, generator=g)
            state[f"blocks.{i}.{eat}.bias"] = torch.randn(shape[0], generator=g)
            for suffix in ("weight", "bias"):
                expected[f"layers.{i}.{ours}.{suffix}"] = (f"blocks.{i}.{eat}.{suffix}", None)
        state[f"blocks.{i}.attn.qkv.weight"] = torch.randn(3 * width, width, generator=g)
        state[f"blocks.{i}.attn.qkv.bias"] = torch.randn(3 * width, generator=g)
        for third, name in enumerate(("query", "key", "value")):  # AltAttention: reshape(B, N, 3, heads, d)
            for suffix in ("weight", "bias"):
                expected[f"layers.{i}.attention.{name}.{suffix}"] = (f"blocks.{i}.attn.qkv.{suffix}", third)

    model = eat_conv.convert(state, task="base", num_mel_bins=mels, num_attention_heads=2)
    ours = model.state_dict()
    assert model.config.num_frames == frames and model.config.patch_embedding == "spe"
    for name, (source, third) in expected.items():
        tensor = state[source] if third is None else state[source][third * width : (third + 1) * width]
        assert torch.equal(ours[name], tensor), name
    learned = {name for name, p in model.named_parameters() if p.requires_grad}
    assert learned == set(expected)  # every trainable parameter comes from EAT, nothing left at its initialisation


# ----------------------------------------------------------------------------------------------- block-mask statistics
def eat_compute_block_mask_2d(batch_size, grid, mask_prob=0.8, mask_length=5, mask_prob_adjust=0.07, seed=0):
    """EAT utils/data_utils.py compute_block_mask_2d(inverse_mask=True, require_same_masks=True, mask_dropout=0,
    img_shape=grid), step by step as published; torch's global RNG seeded here. float (B, L), 1 = masked."""
    torch.manual_seed(seed)
    num_time, num_frequency = grid
    length = num_time * num_frequency
    mask_prob = 1 - mask_prob  # inverse_mask: the blocks are the visible part
    mask = torch.zeros((batch_size, num_time, num_frequency))
    num_centres = int(length * ((mask_prob + mask_prob_adjust) / mask_length**2))
    mask_inds = torch.randint(0, length, size=(batch_size, num_centres))
    mask.view(batch_size, -1).scatter_(1, mask_inds, 1)
    centres = mask.nonzero(as_tuple=True)
    inds = ([], [], [])
    offset = mask_length // 2
    for i in range(mask_length):
        for j in range(mask_length):
            inds[0].append(centres[0])
            inds[1].append(centres[1] + i - offset)
            inds[2].append(centres[2] + j - offset)
    i0 = torch.cat(inds[0])
    i1 = torch.cat(inds[1]).clamp_(min=0, max=num_time - 1)
    i2 = torch.cat(inds[2]).clamp_(min=0, max=num_frequency - 1)
    mask[(i0, i1, i2)] = 1
    mask = mask.reshape(batch_size, -1)
    final_target_len = int(length * mask_prob)
    for m in mask:
        n = int(m.sum())
        if n > final_target_len:
            m[torch.multinomial(m, n - final_target_len, replacement=False)] = 0
        elif n < final_target_len:
            m[torch.multinomial(1 - m, final_target_len - n, replacement=False)] = 1
    return 1 - mask


@pytest.mark.parametrize("grid", [(64, 8), (13, 8)])  # EAT's 10.24-s grid; the small presets' 2.07-s grid
def test_eat_block_mask_sampler_of_the_geometry_report_matches_eats_statistics(grid):
    """EAT utils/data_utils.py compute_block_mask_2d (inverse block, mask_length 5, mask_prob_adjust 0.07, clamped edges)."""
    from mask_geometry import eat_inverse_block_masks, mask_statistics

    reference = mask_statistics(eat_compute_block_mask_2d(1500, grid).bool(), *grid)
    ours = mask_statistics(eat_inverse_block_masks(1500, *grid, generator=torch.Generator().manual_seed(1)), *grid)
    exact = int(grid[0] * grid[1] * 0.2) / (grid[0] * grid[1])  # int(L·0.2) visible in every view
    assert ours["visible_ratio"] == pytest.approx(exact) and reference["visible_ratio"] == pytest.approx(exact)
    assert ours["regions_mean"] == pytest.approx(reference["regions_mean"], abs=0.25)
    assert ours["blobs_mean"] == pytest.approx(reference["blobs_mean"], abs=0.1)
    for key in ("frequency_row_visibility", "time_visibility"):
        assert max(abs(a - b) for a, b in zip(ours[key], reference[key])) < 0.04, key


def test_mask_geometry_report_shows_one_blob_per_view_on_the_small_grid(tmp_path):
    """Paper Sec. "Training Setup" blocks on the presets' grids, next to EAT's compute_block_mask_2d (a leaf script)."""
    import mask_geometry

    rows = {row["sampler"].split(" (")[0] + " " + row["grid"]: row
            for row in mask_geometry.main(["--num_views", "300", "--output_dir", str(tmp_path)])}  # fmt: skip
    assert (tmp_path / "mask_geometry.md").is_file() and (tmp_path / "mask_geometry.json").is_file()
    paper, small = rows["pretrain_paper 38 × 8"], rows["pretrain_tiny_quality 13 × 8"]
    assert paper["visible_ratio"] == pytest.approx(round(0.2 * 304) / 304)  # exactly V = round(0.2·N) per view
    assert small["visible_ratio"] == pytest.approx(round(0.2 * 104) / 104)
    assert small["one_region_share"] > 0.8 and paper["one_region_share"] < 0.1  # one block > V = 21 on 13 × 8
    scaled = rows["paper blocks, time scaled by 13/38 13 × 8"]
    assert scaled["regions_per_100_visible"] == pytest.approx(paper["regions_per_100_visible"], rel=0.25)
    assert abs(scaled["frequency_row_visibility"][0] - paper["frequency_row_visibility"][0]) < 0.04
