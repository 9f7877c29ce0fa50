"""Weight EMA of a fine-tuned model for evaluation (paper: decay 0.995, not for ESC-50; timm's ModelEmaV3 style).

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
