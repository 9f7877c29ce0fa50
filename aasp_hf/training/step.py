"""One optimiser step of pre-training and of fine-tuning, the one place each is written.

`pretraining_step` (`examples/pretrain.py` and `--plan_measure`) runs
    forward + backward (per micro-batch)  ->  `apply_update`: clip, skip flag, AdamW, EMA teacher
without a host synchronisation: the update is skipped on the device; the script reads scalars back (losses, grad
norm, skipped steps) only on logging, monitoring and checkpoint steps.
`finetuning_step` (`examples/finetune.py` and `--plan_measure`) runs
    forward + loss + backward (per micro-batch, on the micro-batches `augmented_inputs` makes)  ->  clip, AdamW,
    weight EMA
and reads each micro-batch's loss back, as the fine-tuning script always has.
Each takes a function that returns the next micro-batch, so that the script (which counts failed clips, the data
position and what was seen) and the measurement (which times the data wait) get their batches their own way.

Why no host sync: on a GPU, reading a value back (`.item()`, `bool(t)`, `float(t)`) makes the CPU wait until the
device has finished everything queued so far, so the next step's kernels cannot be queued while this one runs. The
only decision in the step that depends on a value is whether to skip the update after a NaN/inf loss or gradient
(paper Sec. Training Setup trains in bf16 for 600k steps; a rare non-finite step must not end or corrupt the run).
That decision stays on the device:
- AdamW is PyTorch's fused AdamW, which takes the skip flag as `found_inf` (the mechanism `torch.amp.GradScaler`
  uses): when it is 1 the kernel leaves the parameters, both moments and the step count untouched.
- The EMA teacher moves with momentum `where(skipped, 1, m)`: a lerp with weight 0 leaves it exactly unchanged.
- The logged loss sums add `where(skipped, 0, loss)`, and the number of good steps since the last log is a tensor.

Under fp16 the gradient scaler owns `found_inf` (it skips steps whose gradients overflow); the flag is not set then.
Mask sampling, visible/query index building and every shape that depends on data happen in the collator
(`PretrainingCollator`), so the step sees fixed shapes.
"""

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..modeling_aasp import gather_across_processes
from .augment import mixup, spec_augment
from .model_ema import ema_update_, update_teacher_
from .optim import set_learning_rates

# the loss parts of AaspForPreTraining's output that a pre-training step sums over its micro-batches
PRETRAINING_LOSSES = ("loss", "masked_prediction_loss", "clip_loss", "contrastive_loss")


def skip_flag(accelerator, step_finite: torch.Tensor, grad_norm: torch.Tensor, stop: torch.Tensor | None = None):
    """Bool 0-d tensor, the same on every process: True when any process saw a non-finite loss in this step, or (without
    a gradient scaler) the gradient norm is not finite. A sum all-reduce on the device; nothing is read back.

    With `stop` (this process's stop request, a 0-d float tensor: `aasp_hf.training.stopping.StopAgreement.local`)
    the request rides in the same all-reduce, as a second number; returns (skip flag, stop requests summed over the
    processes) then."""
    flags = (~step_finite).float().reshape(1)
    if stop is not None:
        flags = torch.cat([flags, stop.float().reshape(1)])
    summed = accelerator.reduce(flags, reduction="sum")
    any_bad = summed[0] > 0
    if accelerator.scaler is None:
        any_bad = any_bad | ~torch.isfinite(torch.as_tensor(grad_norm, device=any_bad.device))
    return any_bad if stop is None else (any_bad, summed[1])


def apply_update(accelerator, optimizer, model, step_finite, max_norm: float, momentum, update_teacher=None, stop=None):
    """After the backward passes of a step: clip, decide the skip on the device, AdamW step, EMA teacher update.

    accelerator: the run's `accelerate.Accelerator`; optimizer: the prepared fused AdamW; model: the prepared model
    (its parameters are clipped); step_finite: bool 0-d tensor, every micro-batch's loss finite on this process;
    momentum: float or 0-d tensor, this step's teacher momentum m; update_teacher: a function of m that updates
    the teacher (default `model_ema.update_teacher_` on the unwrapped model's `teacher` and `aasp`; the scripts pass
    a compiled one); stop: this process's stop request (`skip_flag`), or None.
    Returns (grad_norm, skipped): 0-d tensors on the device; with `stop`, (grad_norm, skipped, the stop requests
    summed over the processes).
    """
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_norm)
    skipped = skip_flag(accelerator, step_finite, grad_norm, stop)
    if stop is not None:
        skipped, stops = skipped
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps the torch one
    if accelerator.scaler is None:
        if not inner.defaults.get("fused"):
            raise ValueError(
                "apply_update skips a step on the device through fused AdamW's found_inf: build the "
                "optimizer with torch.optim.AdamW(..., fused=True)"
            )
        inner.found_inf = skipped.float()  # fused AdamW: 1 leaves parameters, moments and step count unchanged
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    momentum = torch.as_tensor(momentum, dtype=torch.float64, device=skipped.device)
    # θ_teacher ← m·θ_teacher + (1 − m)·θ_student; m = 1 on a skipped step leaves the teacher exactly as it was
    momentum = torch.where(skipped, 1.0, momentum)
    if update_teacher is None:
        unwrapped = accelerator.unwrap_model(model)
        update_teacher_(unwrapped.teacher, unwrapped.aasp, momentum)
    else:
        update_teacher(momentum)
    return (grad_norm, skipped) if stop is None else (grad_norm, skipped, stops)


@dataclass
class PretrainingStep:
    """What `pretraining_step` leaves: the last micro-batch and the model's outputs on it (the monitors read them),
    each loss part's mean over the micro-batches (0-d tensors on the device), the gradient norm, whether the update
    was skipped, and the stop requests summed over the processes (None without `stop`)."""

    batch: dict
    outputs: object
    losses: dict
    grad_norm: torch.Tensor
    skipped: torch.Tensor
    stops: torch.Tensor | None = None


def pretraining_step(
    accelerator,
    model,
    optimizer,
    next_batch,
    accumulation: int,
    lr: float,
    max_grad_norm: float,
    momentum: float,
    update_teacher=None,
    stop=None,
) -> PretrainingStep:
    """One pre-training optimiser step: the learning rate `lr` (× each group's scale), then `accumulation`
    micro-batches of forward and backward (`next_batch()` returns each one, on the device), then `apply_update`
    (clip at `max_grad_norm`, <= 0: no clipping; the skip decision on the device; AdamW; the EMA teacher with
    `momentum`). No value is read back to the host."""
    set_learning_rates(optimizer, lr)  # each group's lr_scale × lr
    device = accelerator.device
    losses, step_finite = {}, torch.ones((), dtype=torch.bool, device=device)
    for micro in range(accumulation):
        batch = next_batch()
        # no gradient all-reduce until the last micro-batch of the step
        with accelerator.no_sync(model) if micro < accumulation - 1 else nullcontext():
            outputs = model(**batch, contrastive_gather=gather_across_processes)
            # backward runs even on a non-finite loss, so that every process joins the gradient all-reduce
            accelerator.backward(outputs.loss / accumulation)
        step_finite = step_finite & torch.isfinite(outputs.loss.detach())  # on the device: nothing read back
        for name in PRETRAINING_LOSSES:
            losses[name] = losses.get(name, 0.0) + getattr(outputs, name).detach().float() / accumulation
    max_norm = max_grad_norm if max_grad_norm > 0 else float("inf")
    updated = apply_update(
        accelerator,
        optimizer,
        model,
        step_finite,
        max_norm,
        torch.tensor(momentum, dtype=torch.float64, device=device),
        update_teacher,
        stop=stop,
    )
    return PretrainingStep(batch, outputs, losses, *updated)


def augmented_inputs(
    batch: dict,
    num_labels: int,
    soft: bool,
    mixup_alpha: float,
    spec_augment_fraction,
    rng: np.random.Generator,
    freq_mask_fraction: float | None = None,
) -> tuple:
    """A fine-tuning collator's micro-batch as the model trains on it: (inputs, attention mask, targets) on the CPU.
    `soft`: one-hot (or multi-hot) float targets for the BCE loss, else class ids for cross-entropy; mixup with
    Beta(α, α) when `mixup_alpha` > 0; SpecAugment (one time mask of at most `spec_augment_fraction` of the frames
    and one frequency mask of at most `freq_mask_fraction` of the mel bins, by default the same fraction) unless
    `spec_augment_fraction` is None. Both draw from `rng`. (The per-clip changes of voice and channel came before, in
    the collator.)"""
    inputs, mask, labels = batch["input_values"], batch["attention_mask"], batch["labels"]
    targets = (F.one_hot(labels, num_labels).float() if labels.ndim == 1 else labels.float()) if soft else labels
    if mixup_alpha > 0:
        inputs, targets, mask, _, _ = mixup(inputs, targets, mixup_alpha, rng, mask)
    if spec_augment_fraction is not None:
        freq_fraction = spec_augment_fraction if freq_mask_fraction is None else freq_mask_fraction
        inputs, _, _ = spec_augment(inputs, rng, spec_augment_fraction, freq_fraction)
    return inputs, mask, targets


def finetuning_step(
    accelerator,
    model,
    optimizer,
    next_batch,
    accumulation: int,
    lr: float,
    max_grad_norm: float,
    soft: bool,
    ema=None,
    ema_decay: float = 0.0,
) -> tuple[list[float], torch.Tensor]:
    """One fine-tuning optimiser step: the learning rate `lr` (× each group's layer-decay scale), then `accumulation`
    micro-batches (`next_batch()` returns (inputs, attention mask, targets) on the device) of forward, loss (BCE on
    soft targets when `soft`, else cross-entropy, in float32) and backward, then gradient clipping at
    `max_grad_norm` (<= 0: none), AdamW and the weight EMA `ema` (θ_ema ← d·θ_ema + (1 − d)·θ) right after it.
    Returns each micro-batch's loss (read back, one host sync per micro-batch) and the gradient norm."""
    set_learning_rates(optimizer, lr)
    losses = []
    for micro in range(accumulation):
        inputs, mask, targets = next_batch()
        with accelerator.no_sync(model) if micro < accumulation - 1 else nullcontext():
            logits = model(input_values=inputs, attention_mask=mask).logits
            if soft:
                loss = F.binary_cross_entropy_with_logits(logits.float(), targets)
            else:
                loss = F.cross_entropy(logits.float(), targets)
            accelerator.backward(loss / accumulation)
        losses.append(loss.detach().float().item())
    max_norm = max_grad_norm if max_grad_norm > 0 else float("inf")
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if ema is not None:
        ema_update_(ema, accelerator.unwrap_model(model), ema_decay)
    return losses, grad_norm
