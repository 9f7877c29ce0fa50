"""One training step on fake tensors: the model built on the meta device with fake parameters (`fake_model`), the
inputs shaped as the collator makes them (`pretraining_inputs`), the forward and backward (`run_step`) on the
accelerator's code path (`accelerator_code_path`), measured for peak live bytes and FLOPs (`measure_fake_step`)."""

from contextlib import contextmanager, nullcontext

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ..data.masking import sample_batch_masks
from ..modeling_aasp import AaspForAudioClassification, AaspForPreTraining, AaspSBLU
from .counting import flop_counter
from .memory import LiveTensorBytes


@contextmanager
def accelerator_code_path(model):
    """Runs `model`'s SBLU as on an accelerator: one whole-tensor pass (`AaspSBLU.whole_tensor_pass`, set on each
    SBLU module of the model and restored after; on the CPU it otherwise cuts the tensors into cache-sized blocks,
    whose temporaries an accelerator does not have). The arithmetic is the same; only the size of the temporaries
    differs."""

    modules = [module for module in model.modules() if isinstance(module, AaspSBLU)]
    before = [module.whole_tensor_pass for module in modules]
    for module in modules:
        module.whole_tensor_pass = True
    try:
        yield
    finally:
        for module, value in zip(modules, before):
            module.whole_tensor_pass = value


def fake_model(config, kind: str):
    """(model, fake_mode): `AaspForPreTraining` ("pretraining") or `AaspForAudioClassification` ("classification")
    built on the meta device (instant; no initialiser runs on data), its parameters and buffers then made fake CPU
    tensors of the same shapes and dtypes. In training mode."""

    model_class = AaspForPreTraining if kind == "pretraining" else AaspForAudioClassification
    with torch.device("meta"):
        model = model_class(config)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with fake_mode:
        model.to_empty(device="cpu")
    return model.train(), fake_mode


def pretraining_inputs(config, batch_size: int, seed: int = 0) -> dict:
    """Real index tensors as `PretrainingCollator` makes them (M views, V visible and Q query tokens per view, drawn
    by `aasp_hf.data.masking.sample_batch_masks`) and the shape of `input_values`; the log-mel itself is made where it
    is used."""

    masks = sample_batch_masks(config, batch_size, generator=torch.Generator().manual_seed(seed))
    return {
        "input_values": (batch_size, config.num_frames, config.num_mel_bins),
        "visible_indices": masks["visible_indices"],  # (B, M, V)
        "query_indices": masks["query_indices"],
    }  # (B, M, Q)


def _autocast(precision: str):
    if precision == "no":
        return nullcontext()
    return torch.autocast("cpu", dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def run_step(model, kind: str, inputs: dict, precision: str):
    """One forward (under autocast for bf16/fp16, as accelerate runs it) and backward of the loss, on the tensors
    `inputs` describes: `input_values` a shape (made here, inside whatever modes are on, so that it is counted),
    the rest tensors."""
    values = torch.randn(inputs["input_values"])  # (B, T, F)
    with _autocast(precision):
        if kind == "pretraining":
            loss = model(values, inputs["visible_indices"], inputs["query_indices"]).loss
        else:
            mask = torch.ones(values.shape[:2], dtype=torch.long)  # (B, T)
            logits = model(input_values=values, attention_mask=mask).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), inputs["labels"])
    loss.backward()


def _static_tensors(model):
    return [*model.parameters(), *model.buffers()]


def measure_fake_step(model, fake_mode, kind, inputs, precision, count_flops=False):
    """(peak dynamic bytes, FlopCounterMode or None) of one fake step; gradients are cleared before and after."""
    model.zero_grad(set_to_none=True)
    counter = flop_counter() if count_flops else nullcontext()
    live = LiveTensorBytes(ignore=_static_tensors(model))
    with accelerator_code_path(model), fake_mode, counter, live:
        run_step(model, kind, inputs, precision)
    model.zero_grad(set_to_none=True)
    return live.peak, (counter if count_flops else None)


def set_gradient_checkpointing(model, enabled: bool):
    """As `examples/pretrain.py` turns it on (transformers >= 5 renamed the method)."""
    if enabled:
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    else:
        getattr(model, "activation_checkpointing_disable", model.gradient_checkpointing_disable)()
