"""The pre-training step as a GPU runs it, proven on the CPU: no host synchronisation inside a step, a non-finite step
skipped on the device, the forward (student, EMA teacher, predictor, losses) and the EMA update each one graph for
torch.compile (fullgraph), compiled equal to eager, and a bf16-autocast step close to fp32 with fp32 master state."""

import copy

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from conftest import tiny_config_kwargs
from host_sync import HostSyncCounter

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForPreTraining
from aasp_hf.data.collators import PretrainingCollator
from aasp_hf.training import param_groups
from aasp_hf.training.model_ema import update_teacher_
from aasp_hf.training.step import apply_update


def tiny_setup(seed=0, batch_size=3, **overrides):
    """A tiny AaspForPreTraining in train mode and one collated batch of `batch_size` clips (4 views each)."""
    config = AaspConfig(
        **tiny_config_kwargs(
            predictor_hidden_size=32, predictor_num_layers=1, predictor_num_attention_heads=2, **overrides
        )
    )
    torch.manual_seed(seed)
    model = AaspForPreTraining(config).train()
    collator = PretrainingCollator(
        AaspFeatureExtractor(feature_size=config.num_mel_bins),
        config,
        crop_seconds=0.64,
        generator=torch.Generator().manual_seed(seed),
    )
    waveforms = torch.randn(batch_size, 16000, generator=torch.Generator().manual_seed(seed + 1))
    batch = collator([{"waveform": w, "index": i} for i, w in enumerate(waveforms)])
    return model, batch


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    """Each test builds its own Accelerator (precisions differ); accelerate keeps one state per process."""
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def prepared(model, accelerator):
    optimizer = torch.optim.AdamW(param_groups(model, 0.05, {}), lr=1e-3, betas=(0.9, 0.95), fused=True)
    return accelerator.prepare(model, optimizer)


def test_a_whole_pretraining_step_reads_nothing_back_from_the_device():
    """Forward, backward, clipping, the skip decision, fused AdamW and the EMA update: no `.item()`/`bool()`/`float()`
    of a tensor and no data-dependent shape (the CPU stand-in for torch.cuda.set_sync_debug_mode("error"))."""
    accelerator = Accelerator(cpu=True)
    model, batch = tiny_setup()
    model, optimizer = prepared(model, accelerator)
    with HostSyncCounter() as syncs:
        outputs = model(**batch)
        accelerator.backward(outputs.loss)
        grad_norm, skipped = apply_update(
            accelerator,
            optimizer,
            model,
            torch.isfinite(outputs.loss.detach()),
            4.0,
            torch.tensor(0.99, dtype=torch.float64),
        )
    assert syncs.names == []
    with HostSyncCounter() as syncs:  # the guard sees a read-back when there is one
        bool(skipped), float(grad_norm)
    assert syncs.names == ["_local_scalar_dense", "_local_scalar_dense"]


def test_a_nonfinite_step_leaves_student_teacher_and_adamw_state_exactly_unchanged():
    accelerator = Accelerator(cpu=True)
    model, batch = tiny_setup()
    model, optimizer = prepared(model, accelerator)
    outputs = model(**batch)
    accelerator.backward(outputs.loss)
    apply_update(accelerator, optimizer, model, torch.tensor(True), 4.0, torch.tensor(0.9, dtype=torch.float64))
    before = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    outputs = model(**batch)
    accelerator.backward(outputs.loss * float("nan"))
    grad_norm, skipped = apply_update(
        accelerator,
        optimizer,
        model,
        torch.isfinite(outputs.loss * float("nan")),
        4.0,
        torch.tensor(0.9, dtype=torch.float64),
    )
    assert bool(skipped) and not torch.isfinite(grad_norm)
    after = model.state_dict(), optimizer.state_dict()
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])  # student, teacher, predictor
    for index, state in before[1]["state"].items():  # moments and step count
        assert all(torch.equal(value, after[1]["state"][index][key]) for key, value in state.items())
    # and a good step after it moves both the student and the teacher
    outputs = model(**batch)
    accelerator.backward(outputs.loss)
    apply_update(
        accelerator,
        optimizer,
        model,
        torch.isfinite(outputs.loss.detach()),
        4.0,
        torch.tensor(0.9, dtype=torch.float64),
    )
    assert not torch.equal(model.state_dict()["aasp.cls_token"], before[0]["aasp.cls_token"])
    assert not torch.equal(model.state_dict()["teacher.cls_token"], before[0]["teacher.cls_token"])


def test_the_update_teacher_tensor_momentum_is_the_float_one():
    model, _ = tiny_setup()
    with torch.no_grad():
        for parameter in model.aasp.parameters():
            parameter.add_(torch.randn_like(parameter))
    by_tensor, by_float = copy.deepcopy(model), copy.deepcopy(model)
    update_teacher_(by_tensor.teacher, by_tensor.aasp, torch.tensor(0.994, dtype=torch.float64))
    update_teacher_(by_float.teacher, by_float.aasp, 0.994)
    # the same float32 weight 1 − m, through lerp's tensor-weight and scalar-weight kernels (which may round the last
    # bit differently, e.g. with or without a fused multiply-add): one float32 rounding apart at most
    for a, b in zip(by_tensor.teacher.parameters(), by_float.teacher.parameters()):
        torch.testing.assert_close(a, b, rtol=2 * torch.finfo(torch.float32).eps, atol=1e-12)
    before = [p.detach().clone() for p in by_tensor.teacher.parameters()]
    update_teacher_(by_tensor.teacher, by_tensor.aasp, torch.tensor(1.0, dtype=torch.float64))  # m = 1: unchanged
    assert all(torch.equal(a, b) for a, b in zip(by_tensor.teacher.parameters(), before))


@pytest.mark.parametrize("patch_embedding", ["aape", "spe"])
def test_forward_and_ema_update_are_one_graph_each(patch_embedding):
    """torch._dynamo.explain on what the step compiles: the whole pre-training forward (student on the masked views,
    EMA teacher on the clip, predictor, the three losses) and the EMA update — one graph, no break, each."""
    model, batch = tiny_setup(patch_embedding=patch_embedding)
    explained = torch._dynamo.explain(lambda b: model(**b).loss)(batch)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    momentum = torch.tensor(0.99, dtype=torch.float64)
    explained = torch._dynamo.explain(update_teacher_)(model.teacher, model.aasp, momentum)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


@pytest.mark.slow
def test_the_compiled_step_equals_the_eager_step():
    """torch.compile(fullgraph=True) with inductor on the CPU: loss, every gradient and the EMA-updated teacher of one
    step against eager. Tolerance: float32 reassociation by inductor's fused kernels; differences are measured
    relative to the largest gradient of the model (the attention key biases' true gradient is 0, their eager and
    compiled values are rounding noise of ~1e-16)."""
    torch._dynamo.reset()
    eager, batch = tiny_setup()
    compiled_model = copy.deepcopy(eager)
    outputs = eager(**batch)
    outputs.loss.backward()
    compiled = torch.compile(compiled_model, fullgraph=True)
    compiled_outputs = compiled(**batch)
    compiled_outputs.loss.backward()
    torch.testing.assert_close(compiled_outputs.loss, outputs.loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(compiled_outputs.targets, outputs.targets, rtol=1e-4, atol=1e-5)
    grads = {name: p.grad for name, p in eager.named_parameters() if p.grad is not None}
    compiled_grads = {name: p.grad for name, p in compiled_model.named_parameters() if p.grad is not None}
    assert grads.keys() == compiled_grads.keys() and len(grads) > 50
    scale = max(float(g.abs().max()) for g in grads.values())
    for name, grad in grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-5 * scale, msg=name)

    momentum = torch.tensor(0.9, dtype=torch.float64)
    update_teacher_(eager.teacher, eager.aasp, momentum)
    torch.compile(update_teacher_, fullgraph=True)(compiled_model.teacher, compiled_model.aasp, momentum)
    for a, b in zip(compiled_model.teacher.parameters(), eager.teacher.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_a_bf16_autocast_step_is_close_to_fp32_and_keeps_fp32_state():
    """bf16 autocast as accelerate's mixed_precision="bf16" runs it (matmuls in bf16; the SBLU, norms and losses in
    float32): finite losses and gradient norm within 3 % of the fp32 step (measured: losses 3e-5, gradient norm 1 %
    apart on this tiny model), and the parameters, the EMA teacher and AdamW's moments stay
    float32."""
    results = {}
    for precision in ("no", "bf16"):
        AcceleratorState._reset_state(reset_partial_state=True)
        accelerator = Accelerator(cpu=True, mixed_precision=precision)
        model, batch = tiny_setup()
        model, optimizer = prepared(model, accelerator)
        dtypes = []  # what the predictor's last Linear really computed in (accelerate returns float32 outputs)
        accelerator.unwrap_model(model).predictor.output_projection.register_forward_hook(
            lambda module, inputs, output: dtypes.append(output.dtype)
        )
        outputs = model(**batch)  # the prepared model's forward runs under accelerate's autocast, as in pretrain.py
        accelerator.backward(outputs.loss)
        grad_norm, skipped = apply_update(
            accelerator,
            optimizer,
            model,
            torch.isfinite(outputs.loss.detach()),
            4.0,
            torch.tensor(0.9, dtype=torch.float64),
        )
        assert not bool(skipped)
        results[precision] = {
            name: float(getattr(outputs, name).detach())
            for name in ("loss", "masked_prediction_loss", "clip_loss", "contrastive_loss")
        }
        results[precision]["grad_norm"] = float(grad_norm)
        if precision == "bf16":
            assert dtypes == [torch.bfloat16]  # autocast really ran the predictor in bf16
            assert all(p.dtype == torch.float32 for p in model.parameters())  # student, teacher, predictor
            assert all(
                v.dtype == torch.float32
                for state in optimizer.state_dict()["state"].values()
                for k, v in state.items()
                if k in ("exp_avg", "exp_avg_sq")
            )
    for name, value in results["no"].items():
        assert abs(results["bf16"][name] - value) <= 0.03 * abs(value), (name, results)


@pytest.mark.slow
def test_the_sblu_stem_and_fft_highpass_compiled_equal_eager():
    """The dense AaPE stem of fine-tuning and inference (FFT zero-phase high-pass, B̄, the SBLU recurrence as a custom
    autograd function, C̄, GroupNorm, time patchifier) under inductor: output and input gradient against eager."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    from aasp_hf import AaspModel
    from aasp_hf.modeling_aasp import zero_phase_highpass

    sblu = AaspModel(AaspConfig(**tiny_config_kwargs(sblu_adaptive=False))).embeddings.sblu
    mel = torch.randn(2, 32, 64, requires_grad=True)  # (B, F, T)
    eager = sblu(mel, None, None)
    compiled = torch.compile(sblu, fullgraph=True)(mel, None, None)
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5 * float(eager.abs().max()))
    upstream = torch.randn_like(eager)
    (eager_grad,) = torch.autograd.grad(eager, mel, upstream)
    (compiled_grad,) = torch.autograd.grad(compiled, mel, upstream)
    torch.testing.assert_close(compiled_grad, eager_grad, rtol=1e-4, atol=1e-5 * float(eager_grad.abs().max()))
    kernel = sblu.highpass_kernel
    highpassed = torch.compile(zero_phase_highpass, fullgraph=True)(mel.detach(), kernel)
    torch.testing.assert_close(highpassed, zero_phase_highpass(mel.detach(), kernel), rtol=1e-5, atol=1e-6)
