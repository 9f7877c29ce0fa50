"""Conformance with EAT and data2vec 2.0 where the paper follows them ("following EAT").

Each test writes the published algorithm once more, here, as a small float64 reference from its formula (no code of
aasp_hf is used to build the reference), and compares it with aasp_hf on random inputs. The first line of each test's
docstring names the file and function it follows in EAT (github.com/cwx-worst-one/EAT) or data2vec 2.0
(github.com/facebookresearch/fairseq, examples/data2vec/).
"""

import math

import pytest
import torch

from aasp_hf import AaspConfig
from aasp_hf.modeling_aasp_pretraining import AaspCNNPredictor
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
                out[:, g * out_per_group : (g + 1) * out_per_group] += torch.einsum("bchw,oc->bohw", window, taps[:, :, i, j])
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
    with pytest.raises(ValueError, match="AaspConfig.predictor_cnn_mask_noise_std=-0.1"):
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
