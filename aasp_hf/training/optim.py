"""AdamW parameter groups: weight decay on matrices only (none on biases, norms, CLS, positions: the paper's
Table hyperparams 1 gives only wd 0.05; MAE's and timm's ViT convention), a
per-prefix lr scale (`param_groups`), layer-wise lr decay for fine-tuning (`layer_decay_param_groups`), and the
scheduled lr applied to every group by its scale (`set_learning_rates`)."""

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


def layer_decay_param_groups(model: torch.nn.Module, weight_decay: float, layer_decay: float) -> list[dict]:
    """AdamW groups per (depth, decay / no decay) for fine-tuning: `param_groups`' split (no weight decay on biases,
    norms, CLS and positions), then per ``model.layer_id(name)`` with ``lr_scale = layer_decay ** (L + 1 - layer_id)``
    (BEiT's layer decay: the head gets the full lr, the patch embedding the smallest). Each group also carries its
    ``"layer_id"``; groups come in order of (depth, weight decay)."""
    num_layers = model.config.num_hidden_layers
    groups = {}
    for base in param_groups(model, weight_decay):
        for name, param in zip(base["names"], base["params"]):
            depth = model.layer_id(name)
            key = (depth, base["weight_decay"])
            group = groups.setdefault(key, {"params": [], "names": [], "weight_decay": base["weight_decay"],
                                            "layer_id": depth, "lr_scale": layer_decay ** (num_layers + 1 - depth)})
            group["params"].append(param)
            group["names"].append(name)
    return [groups[k] for k in sorted(groups)]


def set_learning_rates(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Sets each parameter group's lr to its ``"lr_scale"`` × `lr` (the scheduled lr of this step)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"]
