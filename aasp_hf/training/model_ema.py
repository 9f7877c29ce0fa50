"""The two exponential moving averages of training, each called by the loop in plain sight right after the optimiser
step: the pre-training teacher (`update_teacher_`) and the weight EMA of a fine-tuned model (`create_ema`,
`ema_update_`).

Pre-training: `AaspForPreTraining` holds its teacher (`model.teacher`, a frozen copy of the student encoder
`model.aasp`, saved with the checkpoint); the update is a function of the two encoders and m, not a method of the
model (transformers' models carry no training steps), so resuming needs only the step counter:

    optimizer.step()
    update_teacher_(model.teacher, model.aasp, teacher_momentum(step, total_steps))

Fine-tuning: weight EMA for evaluation (paper: decay 0.995, not for ESC-50; timm's ModelEmaV3 style).

    ema = create_ema(model)                  # a frozen copy in eval mode
    ...
    optimizer.step()
    ema_update_(ema, model, decay=0.995)     # in plain sight, right after the optimiser step

θ_ema ← decay · θ_ema + (1 − decay) · θ  for every floating-point parameter and buffer (one fused
``torch._foreach_lerp_``); integer buffers are copied. The decay is an argument, so resuming needs only the EMA's
state dict (saved with the checkpoint).
"""

import copy

import torch


@torch.no_grad()
def update_teacher_(teacher: torch.nn.Module, student: torch.nn.Module, momentum: float | torch.Tensor) -> None:
    """θ_teacher ← m·θ_teacher + (1 − m)·θ_student over the parameters, in place (paper Sec. Training Setup);
    `teacher` and `student` are `AaspForPreTraining`'s `teacher` and `aasp` (of the unwrapped, not DDP, model).

    `momentum` may be a 0-d tensor on the parameters' device (the trainer passes `where(skipped, 1, m)`): the lerp
    weight 1 − m then stays on the device, nothing is read back, and a compiled step does not recompile as m
    changes. m = 1 leaves the teacher exactly unchanged, m = 0 copies the student exactly."""
    teacher_params = list(teacher.parameters())
    student_params = list(student.parameters())
    if isinstance(momentum, torch.Tensor):  # one 0-d weight per parameter (a single tensor weight is read back)
        weight = (1.0 - momentum).to(device=teacher_params[0].device, dtype=teacher_params[0].dtype)
        torch._foreach_lerp_(teacher_params, student_params, [weight] * len(teacher_params))
    else:
        torch._foreach_lerp_(teacher_params, student_params, 1.0 - momentum)


def create_ema(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``model`` in eval mode with ``requires_grad=False`` (never in an optimiser)."""
    ema = copy.deepcopy(model).eval()
    ema.requires_grad_(False)
    return ema


def _floating_and_other(module: torch.nn.Module):
    tensors = [*module.parameters(), *module.buffers()]
    return [t for t in tensors if t.is_floating_point()], [t for t in tensors if not t.is_floating_point()]


@torch.no_grad()
def ema_update_(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """θ_ema ← decay·θ_ema + (1 − decay)·θ in place; ``model`` is the unwrapped (not DDP) module."""
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be in [0, 1], got {decay}")
    ema_float, ema_other = _floating_and_other(ema)
    model_float, model_other = _floating_and_other(model)
    if len(ema_float) != len(model_float) or len(ema_other) != len(model_other):
        raise ValueError("the EMA and the model have different parameters / buffers")
    torch._foreach_lerp_(ema_float, [t.detach().to(e.dtype) for e, t in zip(ema_float, model_float)], 1.0 - decay)
    for e, t in zip(ema_other, model_other):
        e.copy_(t)
