"""AdamW parameter groups: weight decay on matrices only (SPEC_NOTES §4: none on biases, norms, CLS, positions)."""

import torch


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Two groups for ``torch.optim.AdamW``: ``{"params": decay, "weight_decay": wd}``, ``{"params": rest, 0.0}``.

    No decay for biases, every parameter with fewer than 2 dimensions (LayerNorm/GroupNorm scales, SBLU static
    parameters) and the names in ``model.no_weight_decay()`` (CLS token, position tables). Only parameters with
    ``requires_grad`` are included, so the frozen EMA teacher never enters the optimiser. Each group carries a
    ``"names"`` list (ignored by torch's optimisers; useful for checks and logs).
    """
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay, decay_names, no_decay_names = [], [], [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim < 2 or name.endswith(".bias") or name in skip:
            no_decay.append(param)
            no_decay_names.append(name)
        else:
            decay.append(param)
            decay_names.append(name)
    return [
        {"params": decay, "weight_decay": weight_decay, "names": decay_names},
        {"params": no_decay, "weight_decay": 0.0, "names": no_decay_names},
    ]
