"""EAT -> AaSP conversion and pre-training state -> Hub encoder folder.

EAT's own code (fairseq) cannot run here, so the oracle is an independent forward pass written below from EAT's
architecture (fairseq `ImageEncoder` + `AltBlock`/`AltAttention`): Conv2d 16×16 on (B, 1, T, F), flattened
time-major, + the MAE/EAT sin-cos table (built with EAT's own meshgrid(w, h) recipe), CLS prepended, LayerNorm,
post-norm blocks with fused qkv, no final norm.
"""

import argparse
import json
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForPreTraining, AaspModel
from aasp_hf.training.model_ema import update_teacher_
from conftest import tiny_config_kwargs

import convert_eat_checkpoint as eat_conv
import convert_pretraining_checkpoint as pt_conv

D, LAYERS, HEADS, MLP, MELS, FRAMES = 32, 2, 2, 64, 32, 64  # grid: 4 time × 2 frequency patches
EPS = 1e-6
PREFIX = "modality_encoders.IMAGE."


# ----------------------------------------------------------------------------------------------- EAT oracle
def eat_sincos_positions(embed_dim, grid_h, grid_w):
    """get_2d_sincos_pos_embed_flexible as in MAE/EAT: meshgrid(w, h), first half encodes w (frequency)."""

    def one_d(dim, pos):
        omega = np.arange(dim // 2, dtype=np.float64) / (dim / 2.0)
        omega = 1.0 / 10000**omega
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    grid = np.meshgrid(np.arange(grid_w, dtype=np.float32), np.arange(grid_h, dtype=np.float32))
    grid = np.stack(grid, axis=0).reshape(2, 1, grid_h, grid_w)
    emb = np.concatenate([one_d(embed_dim // 2, grid[0]), one_d(embed_dim // 2, grid[1])], axis=1)
    return torch.from_numpy(emb).float()[None]  # (1, H·W, D)


def eat_encoder_state(generator, blocks="blocks"):
    def rand(*shape, scale=0.2):
        return torch.randn(*shape, generator=generator) * scale

    state = {
        PREFIX + "local_encoder.proj.weight": rand(D, 1, 16, 16, scale=0.05),
        PREFIX + "local_encoder.proj.bias": rand(D),
        PREFIX + "extra_tokens": rand(1, 1, D),
        PREFIX + "fixed_positional_encoder.positions": eat_sincos_positions(D, FRAMES // 16, MELS // 16),
        PREFIX + "context_encoder.norm.weight": 1 + rand(D),
        PREFIX + "context_encoder.norm.bias": rand(D),
    }
    for i in range(LAYERS):
        b = f"{blocks}.{i}."
        state.update(
            {
                b + "norm1.weight": 1 + rand(D),
                b + "norm1.bias": rand(D),
                b + "attn.qkv.weight": rand(3 * D, D),
                b + "attn.qkv.bias": rand(3 * D),
                b + "attn.proj.weight": rand(D, D),
                b + "attn.proj.bias": rand(D),
                b + "norm2.weight": 1 + rand(D),
                b + "norm2.bias": rand(D),
                b + "mlp.fc1.weight": rand(MLP, D),
                b + "mlp.fc1.bias": rand(MLP),
                b + "mlp.fc2.weight": rand(D, MLP),
                b + "mlp.fc2.bias": rand(D),
            }
        )
    return state


def eat_pretraining_state(seed=0):
    """Student + nested `_ema` teacher + pre-training-only modules, as EAT's Data2VecMultiModel saves them."""
    g = torch.Generator().manual_seed(seed)
    state = eat_encoder_state(g)
    teacher = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in eat_encoder_state(g).items()}
    teacher[PREFIX + "fixed_positional_encoder.positions"] = state[PREFIX + "fixed_positional_encoder.positions"]
    state["_ema"] = teacher
    state.update(
        {
            PREFIX + "decoder.blocks.0.0.weight": torch.randn(D, D, 3, 3, generator=g),
            PREFIX + "decoder.proj.weight": torch.randn(D, D, generator=g),
            "recon_proj.weight": torch.randn(D // 3, D, generator=g),
            "recon_proj.bias": torch.zeros(D // 3),
        }
    )
    return state


def eat_finetuned_state(num_classes=5, seed=1):
    """MaeImageClassificationModel: the encoder under `model.`, then fc_norm and head."""
    g = torch.Generator().manual_seed(seed)
    state = {f"model.{k}": v for k, v in eat_encoder_state(g).items()}
    state.update(
        {
            "fc_norm.weight": 1 + 0.2 * torch.randn(D, generator=g),
            "fc_norm.bias": 0.2 * torch.randn(D, generator=g),
            "head.weight": 0.2 * torch.randn(num_classes, D, generator=g),
            "head.bias": 0.2 * torch.randn(num_classes, generator=g),
        }
    )
    return state


def eat_forward(state, x, heads=HEADS, blocks="blocks"):
    """Independent EAT encoder forward. x: (B, 1, T, F). Returns (B, 1 + N, D)."""

    def ln(t, name):
        return F.layer_norm(t, (t.shape[-1],), state[name + ".weight"], state[name + ".bias"], EPS)

    h = F.conv2d(x, state[PREFIX + "local_encoder.proj.weight"], state[PREFIX + "local_encoder.proj.bias"], stride=16)
    h = h.flatten(2).transpose(1, 2)  # (B, D, T', F') -> (B, T'·F', D), time-major as PatchEmbed
    h = h + state[PREFIX + "fixed_positional_encoder.positions"][:, : h.shape[1]]
    h = torch.cat([state[PREFIX + "extra_tokens"].expand(h.shape[0], -1, -1), h], dim=1)
    h = ln(h, PREFIX + "context_encoder.norm")
    batch, tokens, dim = h.shape
    for i in range(LAYERS):
        b = f"{blocks}.{i}."
        qkv = F.linear(h, state[b + "attn.qkv.weight"], state[b + "attn.qkv.bias"])
        qkv = qkv.reshape(batch, tokens, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q * (dim // heads) ** -0.5) @ k.transpose(-2, -1)).softmax(-1)
        a = (attn @ v).transpose(1, 2).reshape(batch, tokens, dim)
        a = F.linear(a, state[b + "attn.proj.weight"], state[b + "attn.proj.bias"])
        h = r = ln(h + a, b + "norm1")
        m = F.linear(
            F.gelu(F.linear(h, state[b + "mlp.fc1.weight"], state[b + "mlp.fc1.bias"])),
            state[b + "mlp.fc2.weight"],
            state[b + "mlp.fc2.bias"],
        )
        h = ln(r + m, b + "norm2")
    return h


def convert(state, **kwargs):
    kwargs.setdefault("num_mel_bins", MELS)
    kwargs.setdefault("num_attention_heads", HEADS)
    return eat_conv.convert(state, **kwargs)


@pytest.fixture(scope="module")
def spectrogram():
    return torch.randn(3, FRAMES, MELS, generator=torch.Generator().manual_seed(7))  # (B, T, F)


# ----------------------------------------------------------------------------------------------- EAT conversion
def test_pretrained_student_matches_independent_eat_forward(spectrogram):
    state = eat_pretraining_state()
    model, report = convert(state, return_report=True)
    assert type(model) is AaspModel
    c = model.config
    assert (c.patch_embedding, c.layer_norm_first, c.num_frames) == ("spe", False, FRAMES)
    assert (c.hidden_size, c.num_hidden_layers, c.intermediate_size) == (D, LAYERS, MLP)
    with torch.no_grad():
        ours = model(spectrogram).last_hidden_state
    expected = eat_forward(state, spectrogram[:, None])
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)
    assert any(k.startswith("modality_encoders.IMAGE.decoder") for k in report.dropped)
    assert "_ema" in report.dropped and "recon_proj.weight" in report.dropped


def test_ema_selects_the_teacher(spectrogram):
    state = eat_pretraining_state()
    model, report = convert(state, ema=True, return_report=True)
    teacher = {**state, **state["_ema"]}
    with torch.no_grad():
        ours = model(spectrogram).last_hidden_state
    torch.testing.assert_close(ours, eat_forward(teacher, spectrogram[:, None]), atol=1e-5, rtol=0)
    assert (ours - eat_forward(state, spectrogram[:, None])).abs().max() > 1e-2  # not the student
    assert report.from_student == []
    torch.testing.assert_close(model.cls_token, state["_ema"][PREFIX + "extra_tokens"])


def test_qkv_is_split_into_query_key_value_thirds():
    state = eat_pretraining_state()
    model = convert(state)
    for i in range(LAYERS):
        weight, bias = state[f"blocks.{i}.attn.qkv.weight"], state[f"blocks.{i}.attn.qkv.bias"]
        attention = model.layers[i].attention
        for j, projection in enumerate((attention.query, attention.key, attention.value)):
            torch.testing.assert_close(projection.weight, weight[j * D : (j + 1) * D], atol=0, rtol=0)
            torch.testing.assert_close(projection.bias, bias[j * D : (j + 1) * D], atol=0, rtol=0)


def test_finetuned_head_maps_to_classifier(spectrogram):
    state = eat_finetuned_state(num_classes=5)
    labels = {i: f"class_{i}" for i in range(5)}
    model = convert(state, id2label=labels)
    assert model.config.num_labels == 5 and model.config.id2label[3] == "class_3"
    encoder_state = {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")}
    cls = eat_forward(encoder_state, spectrogram[:, None])[:, 0]
    expected = F.linear(
        F.layer_norm(cls, (D,), state["fc_norm.weight"], state["fc_norm.bias"], EPS),
        state["head.weight"],
        state["head.bias"],
    )
    with torch.no_grad():
        logits = model(spectrogram).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)
    base = convert(state, task="base")  # the head is dropped by name, the encoder is the same
    torch.testing.assert_close(base.layers[0].mlp.fc1.weight, model.aasp.layers[0].mlp.fc1.weight)


HUB_PORT_RENAMES = {  # the port's `EAT` module (wrapped as `EATModel.model`) against fairseq's fine-tuned layout
    "model.modality_encoders.IMAGE.local_encoder.": "model.local_encoder.",
    "model.modality_encoders.IMAGE.extra_tokens": "model.extra_tokens",
    "model.modality_encoders.IMAGE.fixed_positional_encoder.": "model.fixed_positional_encoder.",
    "model.modality_encoders.IMAGE.context_encoder.norm.": "model.pre_norm.",
    "fc_norm.": "model.fc_norm.",
    "head.": "model.head.",
}


def hub_port_state(fairseq):
    hub = {}
    for key, value in fairseq.items():
        for old, new in HUB_PORT_RENAMES.items():
            if key.startswith(old):
                key = new + key[len(old) :]
                break
        hub[key] = value
    return hub


def test_hub_port_layout_gives_the_same_model(spectrogram):
    """The Hub-port key table (names checked against the port's published code, not against a downloaded file) on
    a synthetic dict renamed from the fairseq layout."""
    fairseq = eat_finetuned_state()
    with torch.no_grad():
        expected = convert(fairseq)(spectrogram).logits
        got = convert(hub_port_state(fairseq))(spectrogram).logits
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)  # two models' outputs: never bit-exact


def test_hub_port_folder_config_gives_heads_mel_bins_and_input_length(spectrogram, tmp_path):
    """A port folder: config.json (EATConfig) supplies num_heads (D/64 would give 1 here), mel_bins, norm_eps and
    img_size[0] as the input length, although its position table is longer (max_length time patches)."""
    fairseq = eat_finetuned_state()
    hub = hub_port_state(fairseq)
    hub["model.fixed_positional_encoder.positions"] = eat_sincos_positions(D, 6, MELS // 16)  # max_length = 6
    folder, out = tmp_path / "port", tmp_path / "converted"
    folder.mkdir()
    save_file(hub, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "eat",
                "embed_dim": D,
                "depth": LAYERS,
                "num_heads": HEADS,
                "mel_bins": MELS,
                "max_length": 6,
                "img_size": [FRAMES, MELS],
                "norm_eps": EPS,
                "model_variant": "finetune",
                "num_classes": 5,
                "layer_norm_first": False,
            }
        )
    )
    eat_conv.main([str(folder), str(out)])
    from transformers import AutoModelForAudioClassification

    loaded = AutoModelForAudioClassification.from_pretrained(out).eval()
    assert (loaded.config.num_attention_heads, loaded.config.num_mel_bins, loaded.config.num_frames) == (
        HEADS,
        MELS,
        FRAMES,
    )
    with torch.no_grad():
        torch.testing.assert_close(loaded(spectrogram).logits, convert(fairseq)(spectrogram).logits, atol=1e-6, rtol=0)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "layer_norm_first": True}))
    with pytest.raises(eat_conv.ConversionError, match="layer_norm_first=true"):
        eat_conv.main([str(folder), str(tmp_path / "refused")])


def test_unknown_key_raises_with_its_name():
    state = eat_pretraining_state()
    state["modality_encoders.IMAGE.mystery.weight"] = torch.zeros(3)
    with pytest.raises(eat_conv.ConversionError, match="mystery"):
        convert(state)


def test_wrong_shape_raises_naming_the_key():
    state = eat_pretraining_state()
    state["blocks.1.mlp.fc1.weight"] = torch.zeros(MLP + 1, D)
    with pytest.raises(eat_conv.ConversionError, match=r"blocks\.1\.mlp\.fc1\.weight.*\(65, 32\)"):
        convert(state)
    state = eat_pretraining_state()
    state["blocks.0.attn.qkv.weight"] = torch.zeros(2 * D, D)
    with pytest.raises(eat_conv.ConversionError, match=r"blocks\.0\.attn\.qkv\.weight"):
        convert(state)


def test_non_sincos_positions_raise():
    state = eat_pretraining_state()
    key = PREFIX + "fixed_positional_encoder.positions"
    state[key] = state[key].flip(1)  # frequency-major order: not EAT's table
    with pytest.raises(eat_conv.ConversionError, match="sin-cos"):
        convert(state)


def test_saved_folder_loads_with_auto_model_and_cli_reads_pickled_fairseq(tmp_path, spectrogram):
    """The CLI on a fairseq-style .pt: weights_only refuses its argparse `args`, --trust-pickle reads it."""
    state = eat_pretraining_state()
    path = tmp_path / "eat.pt"
    torch.save({"args": argparse.Namespace(arch="data2vec_multi"), "model": state}, path)
    with pytest.raises(eat_conv.ConversionError, match="--trust-pickle"):
        eat_conv.load_checkpoint(path)
    out = tmp_path / "converted"
    eat_conv.main(
        [str(path), str(out), "--trust-pickle", "--num-mel-bins", str(MELS), "--num-attention-heads", str(HEADS)]
    )

    from transformers import AutoFeatureExtractor, AutoModel

    loaded = AutoModel.from_pretrained(out).eval()
    with torch.no_grad():
        ours = loaded(spectrogram).last_hidden_state
    torch.testing.assert_close(ours, eat_forward(state, spectrogram[:, None]), atol=1e-5, rtol=0)
    fe = AutoFeatureExtractor.from_pretrained(out)
    assert fe.mode == "kaldi" and fe.feature_size == MELS and fe.max_frames == FRAMES
    assert json.loads((out / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_aasp.AaspModel"
    assert (out / "README.md").exists() and (out / "modeling_aasp.py").exists()


def test_weights_only_state_dict_loads_without_trust(tmp_path):
    path = tmp_path / "plain.pt"
    torch.save({"model": eat_finetuned_state()}, path)
    assert "head.weight" in eat_conv.load_checkpoint(path)


# ----------------------------------------------------------------------------------------------- pre-training state
@pytest.fixture(scope="module")
def pretraining_model():
    torch.manual_seed(0)
    config = AaspConfig(**tiny_config_kwargs(num_mel_bins=128, sblu_hidden_size=16, sblu_output_size=64))
    model = AaspForPreTraining(config)
    update_teacher_(model.teacher, model.aasp, 0.0)  # teacher == student
    with torch.no_grad():  # then make them differ so the test can tell which one was exported
        for name, p in model.teacher.named_parameters():
            if "position_embeddings" not in name:
                p.add_(0.01 * torch.randn_like(p))
    return model.eval()


def _assert_encoder_equals(folder, encoder, spectrogram_128):
    loaded = AaspModel.from_pretrained(folder).eval()
    saved, source = load_file(Path(folder) / "model.safetensors"), encoder.state_dict()
    assert saved and all(torch.equal(loaded.state_dict()[k], source[k]) for k in saved)  # weights are copies: exact
    with torch.no_grad():  # the outputs are two computations: bit-exactness depends on the CPU's kernels
        expected = encoder(spectrogram_128).last_hidden_state
        torch.testing.assert_close(loaded(spectrogram_128).last_hidden_state, expected, atol=1e-6, rtol=1e-5)


def test_pretraining_folder_to_encoder_student_and_teacher(tmp_path, pretraining_model):
    source = tmp_path / "pretrain"
    pretraining_model.save_pretrained(source)
    AaspFeatureExtractor().save_pretrained(source)
    x = torch.randn(2, 64, 128, generator=torch.Generator().manual_seed(3))
    for which, encoder in (("student", pretraining_model.aasp), ("teacher", pretraining_model.teacher)):
        out = pt_conv.main([str(source), str(tmp_path / which), "--which", which])
        _assert_encoder_equals(out, encoder, x)
        config = json.loads((out / "config.json").read_text())
        assert config["architectures"] == ["AaspModel"]
        # every encoder folder maps the classification head too; no AutoModelForPreTraining left over
        assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForAudioClassification"}
    with torch.no_grad():
        student, teacher = pretraining_model.aasp(x), pretraining_model.teacher(x)
        assert (student.last_hidden_state - teacher.last_hidden_state).abs().max() > 1e-4


def test_raw_accelerate_safetensors_and_push(tmp_path, pretraining_model):
    """A `checkpoint-*/model.safetensors` (keys as accelerate saves them, here behind torch.compile's prefix),
    config from --config; --push-to-hub goes through aasp_hf.utils.hub.push_folder (network mocked)."""
    checkpoint = tmp_path / "run" / "checkpoint-100"
    checkpoint.mkdir(parents=True)
    state = {f"_orig_mod.{k}": v.contiguous() for k, v in pretraining_model.state_dict().items()}
    save_file(state, checkpoint / "model.safetensors")
    pretraining_model.config.to_json_file(tmp_path / "run" / "config.json")
    x = torch.randn(1, 48, 128, generator=torch.Generator().manual_seed(4))
    with mock.patch("aasp_hf.utils.hub.push_folder") as push:
        out = pt_conv.main([str(checkpoint), str(tmp_path / "enc"), "--which", "teacher", "--push-to-hub", "me/aasp"])
    push.assert_called_once()
    assert push.call_args.args[:2] == (out, "me/aasp")
    _assert_encoder_equals(out, pretraining_model.teacher, x)
    assert AaspFeatureExtractor.from_pretrained(out).mode == "m2d"


def test_pretraining_unknown_key_raises(tmp_path, pretraining_model):
    state = {k: v.contiguous() for k, v in pretraining_model.state_dict().items()}
    state["extra_head.weight"] = torch.zeros(2)
    with pytest.raises(ValueError, match="extra_head.weight"):
        pt_conv.convert(state, pretraining_model.config, which="student")
