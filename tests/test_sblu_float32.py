"""The SBLU branch is float32 however a half-precision model is built (transformers' `_keep_in_fp32_modules_strict`).

transformers keeps a strict float32 module in float32 when it loads a checkpoint (`from_pretrained(dtype=...)`) and
expects the model to hardcode float32 when it builds one (`__init__` under a half default dtype, `_from_config` /
`AutoModel.from_config` with `dtype`); a plain `.half()` / `.to(torch.bfloat16)` casts every parameter, as for any
nn.Module, and the branch then still computes in float32. Its recurrence kernel decays to ε over K taps, which
bfloat16's 8-bit mantissa cannot resolve (docs/model.md, "Precision").
"""

import pytest
import torch
from safetensors import safe_open

from aasp_hf import AaspConfig, AaspForAudioClassification, AaspForPreTraining, AaspModel
from aasp_hf.training.model_ema import update_teacher_
from conftest import tiny_config_kwargs
import transformers
from transformers import AutoModel

HALF = [torch.float16, torch.bfloat16]
TRANSFORMERS_VERSION = tuple(int(part) for part in transformers.__version__.split(".")[:2])
# the SBLU branch's parameters in one encoder: B̄ and C̄ (weight, bias), GroupNorm (weight, bias), time patchifier
SBLU_PARAMETERS = 8
TOLERANCE = 0.1  # on logits, as the bf16 checkpoint test in test_modeling.py


def config(**overrides):
    return AaspConfig(**tiny_config_kwargs(num_labels=2, **overrides))


def sblu_dtypes(model):
    """{name: dtype} of every floating parameter or buffer in the state dict under an `sblu` module."""
    return {k: v.dtype for k, v in model.state_dict().items() if ".sblu." in k and v.is_floating_point()}


def build_under_default_dtype(cls, dtype, model_config):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return cls(model_config)
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("cls, encoders", [(AaspModel, 1), (AaspForAudioClassification, 1), (AaspForPreTraining, 2)])
def test_built_under_a_half_default_dtype_the_sblu_is_float32(cls, encoders, dtype):
    model = build_under_default_dtype(cls, dtype, config())
    dtypes = sblu_dtypes(model)
    assert len(dtypes) == SBLU_PARAMETERS * encoders  # the student's and the EMA teacher's in pre-training
    assert set(dtypes.values()) == {torch.float32}, dtypes
    rest = {p.dtype for n, p in model.named_parameters() if ".sblu." not in n}
    assert rest == {dtype}


def test_the_non_adaptive_static_lambda_is_float32_too():
    model = build_under_default_dtype(AaspModel, torch.bfloat16, config(sblu_adaptive=False))
    dtypes = sblu_dtypes(model)
    assert len(dtypes) == SBLU_PARAMETERS + 2  # + the static (α, β)
    assert dtypes["embeddings.sblu.static_decay"] == dtypes["embeddings.sblu.static_frequency"] == torch.float32
    assert set(dtypes.values()) == {torch.float32}


def test_a_float64_model_stays_float64_end_to_end():
    model = build_under_default_dtype(AaspModel, torch.float64, config())
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    assert model.embeddings.sblu.highpass_kernel.dtype == torch.float64


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_from_config_with_a_half_dtype_keeps_the_sblu_float32(dtype):
    built = {
        "_from_config": AaspForAudioClassification._from_config(config(), dtype=dtype),
        "AutoModel.from_config": AutoModel.from_config(config(), dtype=dtype),
    }
    for how, model in built.items():
        dtypes = sblu_dtypes(model)
        assert len(dtypes) == SBLU_PARAMETERS, how
        assert set(dtypes.values()) == {torch.float32}, (how, dtypes)
        # transformers' _from_config records the dtype on the config from 5.12.0 on (5.4.0 to 5.11.0 leave config.dtype
        # None, as their sources read); save_pretrained writes the weights' own dtype in either case
        if TRANSFORMERS_VERSION >= (5, 12):
            assert model.config.dtype == dtype, how
        assert {p.dtype for n, p in model.named_parameters() if ".sblu." not in n} == {dtype}, how


def test_a_half_built_checkpoint_saves_and_loads_the_sblu_in_float32(tmp_path):
    """from_pretrained(dtype=bf16) keeps the branch float32; the weights a bf16-built model saves are float32 too, so
    a save/load round trip reproduces them exactly (no bfloat16 rounding of B̄, C̄ or the norm on the way)."""
    torch.manual_seed(0)
    model = AaspForAudioClassification._from_config(config(), dtype=torch.bfloat16)
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", framework="pt") as weights:
        saved = {k: weights.get_slice(k).get_dtype() for k in weights.keys() if ".sblu." in k}
    assert len(saved) == SBLU_PARAMETERS
    assert set(saved.values()) == {"F32"}, saved
    loaded = AaspForAudioClassification.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert set(sblu_dtypes(loaded).values()) == {torch.float32}
    assert loaded.classifier.dense.weight.dtype == torch.bfloat16
    for name, value in model.state_dict().items():
        if ".sblu." in name:
            torch.testing.assert_close(loaded.state_dict()[name], value, atol=0, rtol=0)


def record_sblu_layer_inputs(model):
    """Records the dtype of what C̄, the GroupNorm and the time patchifier receive in each forward."""
    seen = {}
    sblu = model.aasp.embeddings.sblu
    for name in ("output_projection", "norm", "time_patchify"):
        getattr(sblu, name).register_forward_hook(
            lambda m, inputs, out, name=name: seen.__setitem__(name, inputs[0].dtype)
        )
    return seen


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_half_built_model_matches_float32(dtype):
    torch.manual_seed(0)
    reference_model = AaspForAudioClassification(config()).eval()
    model = build_under_default_dtype(AaspForAudioClassification, dtype, config()).eval()
    model.load_state_dict(reference_model.state_dict())  # same weights; the SBLU's stay float32
    seen = record_sblu_layer_inputs(model)
    x = torch.randn(2, 64, 32)
    reference = reference_model(x).logits
    logits = model(x.to(dtype)).logits
    assert logits.dtype == dtype
    assert seen == dict.fromkeys(("output_projection", "norm", "time_patchify"), torch.float32)
    assert (logits.float() - reference).abs().max() < TOLERANCE


@pytest.mark.parametrize("cast", ["half", "to_bfloat16"])
def test_a_plain_cast_casts_every_parameter_and_the_sblu_still_computes_in_float32(cast):
    """transformers' contract for `.half()` / `.to(dtype)`: a plain nn.Module cast of every parameter (only loading
    and building keep the strict modules in float32). The branch then computes in float32 from its half weights."""
    torch.manual_seed(0)
    model = AaspForAudioClassification(config()).eval()
    x = torch.randn(2, 64, 32)
    reference = model(x).logits
    dtype = torch.float16 if cast == "half" else torch.bfloat16
    model = model.half() if cast == "half" else model.to(torch.bfloat16)
    assert set(sblu_dtypes(model).values()) == {dtype}
    seen = record_sblu_layer_inputs(model)
    logits = model(x.to(dtype)).logits
    assert seen == dict.fromkeys(("output_projection", "norm", "time_patchify"), torch.float32)
    assert (logits.float() - reference).abs().max() < TOLERANCE


def test_a_bf16_built_pretraining_model_runs_a_step_and_updates_its_teacher():
    """Masked pre-training (the visible-token path) on a bf16-built model: a loss, a gradient on every SBLU parameter
    (float32), and the EMA update of a teacher whose SBLU is float32 beside bfloat16 blocks."""
    torch.manual_seed(0)
    model = build_under_default_dtype(AaspForPreTraining, torch.bfloat16, config())
    # masks of the shapes the config describes (AaspForPreTraining checks views, visible and query counts against it)
    c = model.config
    batch, views, tokens = 2, c.mask_num_views, c.num_patches
    num_visible = round((1 - c.mask_ratio) * tokens)
    num_queries = round(c.mask_query_ratio * (tokens - num_visible))
    visible = torch.stack([torch.randperm(tokens)[:num_visible].sort().values for _ in range(batch * views)])
    visible = visible.view(batch, views, num_visible)
    queries = torch.stack([torch.randperm(tokens)[:num_queries] for _ in range(batch * views)])
    queries = queries.view(batch, views, num_queries)
    loss = model(torch.randn(batch, 64, 32).bfloat16(), visible, queries).loss
    loss.backward()
    grads = {n: p.grad for n, p in model.aasp.named_parameters() if ".sblu." in n}
    assert len(grads) == SBLU_PARAMETERS
    assert all(g is not None and g.dtype == torch.float32 and g.isfinite().all() for g in grads.values())
    student = model.aasp.embeddings.sblu.input_projection.weight
    student.data.add_(1.0)
    update_teacher_(model.teacher, model.aasp, torch.tensor(0.5))
    teacher = model.teacher.embeddings.sblu.input_projection.weight
    assert teacher.dtype == torch.float32
    torch.testing.assert_close(teacher, student - 0.5)
