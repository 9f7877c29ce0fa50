"""Every parametrised computation of the model runs in its module's forward, so whatever wraps a module sees it:
accelerate's offload hooks (`from_pretrained(..., device_map=..., offload_folder=...)`, which load a module's
weights only while that module's forward runs) and forward hooks, on the dense path and on the visible-token path
of masked pre-training."""

import accelerate
import pytest
import torch
import transformers

from aasp_hf import AaspConfig, AaspForAudioClassification, AaspModel
from conftest import tiny_config_kwargs

NUM_FRAMES, NUM_MEL_BINS = 64, 32  # the tiny config's clip: 4 time patches × 2 frequency patches
STEM_MODULES = ["input_projection", "output_projection", "norm", "time_patchify"]  # B̄, C̄, GroupNorm, patchifier


def model_inputs(kind):
    """Keyword inputs of AaspModel: one unpadded batch ("clips"), the same with the second clip padded after 40
    frames ("padded"), or two views of 3 visible tokens per clip ("views", masked pre-training)."""
    g = torch.Generator().manual_seed(0)
    inputs = {"input_values": torch.randn(2, NUM_FRAMES, NUM_MEL_BINS, generator=g)}
    if kind == "padded":
        attention_mask = torch.ones(2, NUM_FRAMES, dtype=torch.long)
        attention_mask[1, 40:] = 0
        inputs["attention_mask"] = attention_mask
    elif kind == "views":
        inputs["visible_indices"] = torch.rand(2, 2, 8, generator=g).argsort(-1)[..., :3]  # (B, M, V) of N = 8
    return inputs


def model_output(model, inputs):
    with torch.no_grad():
        output = model(**inputs)
    return output.logits if isinstance(model, AaspForAudioClassification) else output.last_hidden_state


def split_device_map(model):
    """Half the model offloaded to disk, the stem split across the CPU and the disk: the SBLU, the Lambda encoder
    and the alias LayerNorm on disk, the rest of the embeddings (patch projection, positions, fusion) and the CLS
    token on the CPU, the encoder layers alternately on disk and the CPU, a head's own modules on disk."""
    encoder = model if isinstance(model, AaspModel) else model.aasp
    prefix = "" if encoder is model else f"{model.base_model_prefix}."
    stem = f"{prefix}embeddings."
    on_disk = {"sblu", "lambda_encoder", "alias_norm"}
    device_map = {f"{prefix}{name}": "cpu" for name, _ in encoder.named_parameters(recurse=False)}  # CLS token
    device_map |= {f"{stem}{name}": "cpu" for name, _ in encoder.embeddings.named_parameters(recurse=False)}
    device_map |= {
        f"{stem}{name}": "disk" if name in on_disk else "cpu" for name, _ in encoder.embeddings.named_children()
    }
    device_map |= {f"{prefix}layers.{i}": "disk" if i % 2 == 0 else "cpu" for i in range(len(encoder.layers))}
    device_map |= {
        f"{prefix}{name}": "cpu" for name, _ in encoder.named_children() if name not in ("embeddings", "layers")
    }
    if encoder is not model:
        device_map |= {name: "disk" for name, child in model.named_children() if child is not encoder}
    return device_map


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """{(model class, sblu_adaptive): (the model in eval mode, the folder it was saved to)}, built once."""
    saved = {}
    for model_class in (AaspModel, AaspForAudioClassification):
        for adaptive in (True, False):
            torch.manual_seed(0)
            config = AaspConfig(**tiny_config_kwargs(num_labels=3, sblu_adaptive=adaptive))
            assert config.patch_embedding == "aape"  # the default stem: SPE + Lambda encoder + SBLU + fusion
            model = model_class(config).eval()
            folder = tmp_path_factory.mktemp(f"{model_class.__name__}-{'adaptive' if adaptive else 'static'}")
            model.save_pretrained(folder)
            saved[model_class, adaptive] = model, folder
    return saved


# The whole model on disk ({"": "disk"}) is offloaded only from transformers 5.13 (earlier from_pretrained dispatches
# only a map with two devices or more) with accelerate 1.15 (earlier dispatch_model refuses a disk-only map: "use the
# `disk_offload` function instead"), as their sources read; the lowest set (transformers 5.4.0, accelerate 1.3.0) runs
# the split placement, which offloads half the model to disk
ALL_ON_DISK = pytest.mark.skipif(
    tuple(int(part) for part in transformers.__version__.split(".")[:2]) < (5, 13)
    or tuple(int(part) for part in accelerate.__version__.split(".")[:2]) < (1, 15),
    reason="a disk-only device map needs transformers >= 5.13 and accelerate >= 1.15",
)


@pytest.mark.parametrize("placement", ["split", pytest.param("all_on_disk", marks=ALL_ON_DISK)])
@pytest.mark.parametrize("model_class", [AaspModel, AaspForAudioClassification])
@pytest.mark.parametrize("adaptive", [True, False], ids=["adaptive_sblu", "static_sblu"])
def test_cpu_and_disk_offload_gives_the_one_device_output(saved_models, tmp_path, placement, model_class, adaptive):
    model, folder = saved_models[model_class, adaptive]
    device_map = split_device_map(model) if placement == "split" else {"": "disk"}
    offloaded = model_class.from_pretrained(folder, device_map=device_map, offload_folder=tmp_path).eval()
    assert "disk" in offloaded.hf_device_map.values()
    stem_parameters = dict(offloaded.named_parameters())
    assert any(
        name.endswith("embeddings.sblu.input_projection.weight") and parameter.device.type == "meta"
        for name, parameter in stem_parameters.items()
    ), "the SBLU's weights should be on disk (meta until its forward loads them)"
    kinds = ["clips", "padded"] + (["views"] if model_class is AaspModel else [])
    for kind in kinds:
        inputs = model_inputs(kind)
        torch.testing.assert_close(model_output(offloaded, inputs), model_output(model, inputs), msg=kind)


@pytest.mark.parametrize("kind", ["clips", "padded", "views"])
def test_forward_hooks_on_the_sblu_modules_fire_and_change_the_output(saved_models, kind):
    """A hook that only records leaves the output as it is; one that perturbs a module's output changes it (the
    perturbation varies across channels, so the LayerNorm after the SBLU cannot cancel it)."""
    model = saved_models[AaspModel, True][0]
    inputs = model_inputs(kind)
    reference = model_output(model, inputs)
    for name in STEM_MODULES:
        module = getattr(model.embeddings.sblu, name)
        calls = []
        handle = module.register_forward_hook(lambda module, args, output: calls.append(output.shape))
        try:
            torch.testing.assert_close(model_output(model, inputs), reference)
        finally:
            handle.remove()
        assert calls, f"sblu.{name}'s forward did not run on the {kind} path"

        g = torch.Generator().manual_seed(1)
        handle = module.register_forward_hook(
            lambda module, args, output: output + torch.randn(output.shape, generator=g, dtype=output.dtype)
        )
        try:
            perturbed = model_output(model, inputs)
        finally:
            handle.remove()
        assert (perturbed - reference).abs().max() > 1e-3, f"perturbing sblu.{name} did not change the {kind} output"


def test_a_lora_adapter_on_the_sblu_input_projection_changes_the_output(saved_models):
    """PEFT wraps B̄ (a grouped 1×1 Conv1d) in its LoRA layer: with the adapter's weights nonzero the encoder's output
    changes; with the adapter disabled it is the base model's again."""
    peft = pytest.importorskip("peft")
    model, folder = saved_models[AaspModel, True]
    base = AaspModel.from_pretrained(folder).eval()
    inputs = model_inputs("padded")
    reference = model_output(model, inputs)
    config = peft.LoraConfig(r=4, target_modules=["embeddings.sblu.input_projection"], init_lora_weights=False)
    with pytest.warns(UserWarning, match="groups > 1"):  # PEFT cannot merge a grouped convolution's adapter
        adapted = peft.get_peft_model(base, config).eval()
    assert isinstance(adapted.base_model.model.embeddings.sblu.input_projection, peft.tuners.lora.LoraLayer)
    with torch.no_grad():
        output = adapted(**inputs).last_hidden_state
        with adapted.disable_adapter():
            disabled = adapted(**inputs).last_hidden_state
    assert (output - reference).abs().max() > 1e-2
    torch.testing.assert_close(disabled, reference)


def test_each_sblu_module_per_token_equals_its_dense_forward():
    """The visible-token forward of B̄ / C̄, the GroupNorm and the time patchifier, given every token of a clip, is the
    dense forward of the same module cut into tokens (float64): B̄ and C̄ at each token's group block, the GroupNorm
    with each group's statistics over all its tokens, the patchifier on each token's P frames."""
    from aasp_hf.modeling_aasp import AaspSBLU

    torch.manual_seed(0)
    config = AaspConfig(**tiny_config_kwargs())
    sblu = AaspSBLU(config).double()
    for parameter in sblu.parameters():
        torch.nn.init.normal_(parameter)  # non-trivial γ and b as well
    groups, patch = config.num_frequency_patches, config.time_patch_size  # F̃, P
    num_time_patches = NUM_FRAMES // patch  # T̃
    tokens = torch.arange(num_time_patches * groups).repeat(2, 1)  # (B, N): every token of two clips, time-major
    group_index = tokens % groups  # (B, N)
    time_index = tokens // groups  # (B, N)

    def per_token(dense):
        """(B, C, T) -> (B, N, C/F̃, P): each token's group's channels over its P frames."""
        blocks = dense.reshape(2, groups, -1, num_time_patches, patch)  # (B, F̃, C/F̃, T̃, P)
        rows = torch.arange(2)[:, None]
        return blocks.permute(0, 1, 3, 2, 4)[rows, group_index, time_index]  # (B, N, C/F̃, P)

    g = torch.Generator().manual_seed(1)
    for module, in_channels in [(sblu.input_projection, NUM_MEL_BINS), (sblu.output_projection, 8)]:
        x = torch.randn(2, in_channels, NUM_FRAMES, generator=g, dtype=torch.float64)
        torch.testing.assert_close(module(per_token(x), group_index), per_token(module(x)))
    x = 3.0 + torch.randn(2, config.sblu_output_size, NUM_FRAMES, generator=g, dtype=torch.float64)
    torch.testing.assert_close(sblu.norm(per_token(x), group_index=group_index), per_token(sblu.norm(x)))
    dense = sblu.time_patchify(x)  # (B, C, T̃)
    expected = dense.reshape(2, groups, -1, num_time_patches).permute(0, 1, 3, 2)  # (B, F̃, T̃, C̃)
    expected = expected[torch.arange(2)[:, None], group_index, time_index]  # (B, N, C̃)
    torch.testing.assert_close(sblu.time_patchify(per_token(x), group_index), expected)


@pytest.mark.parametrize("model_class", [AaspModel, AaspForAudioClassification])
def test_device_map_auto_with_cpu_and_disk_offload_gives_the_one_device_output(saved_models, tmp_path, model_class):
    """`device_map="auto"` with a CPU budget of about half the model: accelerate puts what does not fit on disk, at
    the granularity of `_no_split_modules` (the stem, the blocks), and the output is the one-device one."""
    model, folder = saved_models[model_class, True]
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    offloaded = model_class.from_pretrained(
        folder, device_map="auto", max_memory={"cpu": size // 2}, offload_folder=tmp_path
    ).eval()
    placements = set(offloaded.hf_device_map.values())
    assert placements == {"cpu", "disk"}, offloaded.hf_device_map
    for kind in ["clips", "padded"]:
        inputs = model_inputs(kind)
        torch.testing.assert_close(model_output(offloaded, inputs), model_output(model, inputs), msg=kind)
