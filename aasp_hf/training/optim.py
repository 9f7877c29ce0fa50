"""AdamW parameter groups: weight decay on matrices only (SPEC_NOTES §4: none on biases, norms, CLS, positions)."""

import torch


def param_groups(model: torch.nn.Module, weight_decay: float, lr_scales: dict[str, float] | None = None) -> list[dict]:
    """Two groups for ``torch.optim.AdamW``: ``{"params": decay, "weight_decay": wd}``, ``{"params": rest, 0.0}``.

    No decay for biases, every parameter with fewer than 2 dimensions (LayerNorm/GroupNorm scales, SBLU static
    parameters) and the names in ``model.no_weight_decay()`` (CLS token, position tables). Only parameters with
    ``requires_grad`` are included, so the frozen EMA teacher never enters the optimiser. Each group carries a
    ``"names"`` list (ignored by torch's optimisers; useful for checks and logs) and an ``"lr_scale"`` (1.0): the
    trainer sets each group's lr to ``lr_scale`` × the scheduled lr.

    ``lr_scales`` maps a parameter-name prefix to its lr scale (e.g. ``{"aasp.embeddings.": 0.1}``, a slower patch
    embedding); its parameters get groups of their own, decay and no decay, after the two above.
    """
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    lr_scales = lr_scales or {}
    groups = {}  # (lr scale, decayed?) -> group, in order of first use
    for scale in [1.0, *lr_scales.values()]:
        for decayed in (True, False):
            groups.setdefault((scale, decayed), {"params": [], "weight_decay": weight_decay if decayed else 0.0,
                                                 "names": [], "lr_scale": scale})
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        scale = next((s for prefix, s in lr_scales.items() if name.startswith(prefix)), 1.0)
        decayed = not (param.ndim < 2 or name.endswith(".bias") or name in skip)
        groups[(scale, decayed)]["params"].append(param)
        groups[(scale, decayed)]["names"].append(name)
    first_two = [groups[(1.0, True)], groups[(1.0, False)]]  # always returned, even when empty
    return first_two + [g for key, g in groups.items() if key[0] != 1.0 and g["params"]]
