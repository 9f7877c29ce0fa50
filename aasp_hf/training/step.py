"""One pre-training optimiser step without a host synchronisation: the update is skipped on the device.

`examples/pretrain.py` runs each step as
    forward + backward (per micro-batch)  ->  `apply_update`: clip, skip flag, AdamW, EMA teacher
and reads scalars back (losses, grad norm, skipped steps) only on logging, monitoring and checkpoint steps.

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

import torch

from .model_ema import update_teacher_


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


def apply_update(accelerator, optimizer, model, step_finite, max_norm: float, momentum, update_teacher=None,
                 stop=None):
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
            raise ValueError("apply_update skips a step on the device through fused AdamW's found_inf: build the "
                             "optimizer with torch.optim.AdamW(..., fused=True)")
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

