"""AdamW parameter groups: weight decay on matrices only (none on biases, norms, CLS, positions: the paper's
Table hyperparams 1 gives only wd 0.05; MAE's and timm's ViT convention), a
per-prefix lr scale (`param_groups`), layer-wise lr decay for fine-tuning (`layer_decay_param_groups`), and the
scheduled lr applied to every group by its scale (`set_learning_rates`).

Which parameters skip weight decay (`no_weight_decay`) and how deep each one sits (`layer_id`) are told from the
parameters' names here, not by methods of the model classes: transformers' models carry no optimiser metadata (its
Trainer too picks the no-decay parameters by name), and a plain function works the same on any AaSP checkpoint,
whichever version of the modeling code it was loaded with."""

import torch

from ..utils.schedules import learning_rate


def no_weight_decay(model: torch.nn.Module) -> set[str]:
    """Parameter names excluded from weight decay besides biases and norms: CLS and positions (MAE's convention)."""
    return {name for name, _ in model.named_parameters() if "cls_token" in name or "position_embeddings" in name}


def layer_id(model: torch.nn.Module, parameter_name: str) -> int:
    """Depth of an AaSP model's parameter for layer-wise learning-rate decay: 0 = patch embedding (SPE/AaPE), CLS and
    the embedding norm; i + 1 = encoder block i; num_hidden_layers + 1 = everything after the blocks (heads).
    `parameter_name` is as `model.named_parameters()` gives it (the encoder's under `model.base_model_prefix`)."""
    name = parameter_name.removeprefix(f"{model.base_model_prefix}.")
    if name.startswith(("embeddings.", "cls_token", "embedding_norm.")):
        return 0
    if name.startswith("layers."):
        return int(name.split(".")[1]) + 1
    return model.config.num_hidden_layers + 1


def param_groups(model: torch.nn.Module, weight_decay: float, lr_scales: dict[str, float] | None = None) -> list[dict]:
    """Two groups for ``torch.optim.AdamW``: ``{"params": decay, "weight_decay": wd}``, ``{"params": rest, 0.0}``.

    No decay for biases, every parameter with fewer than 2 dimensions (LayerNorm/GroupNorm scales, SBLU static
    parameters) and the names ``no_weight_decay(model)`` gives (CLS token, position tables). Only parameters with
    ``requires_grad`` are included, so the frozen EMA teacher never enters the optimiser. Each group carries a
    ``"names"`` list (ignored by torch's optimisers; useful for checks and logs) and an ``"lr_scale"`` (1.0): the
    trainer sets each group's lr to ``lr_scale`` × the scheduled lr.

    ``lr_scales`` maps a parameter-name prefix to its lr scale (e.g. ``{"aasp.embeddings.": 0.1}``, a slower patch
    embedding); its parameters get groups of their own, decay and no decay, after the two above.
    """
    skip = no_weight_decay(model)
    lr_scales = lr_scales or {}
    groups = {}  # (lr scale, decayed?) -> group, in order of first use
    for scale in [1.0, *lr_scales.values()]:
        for decayed in (True, False):
            groups.setdefault(
                (scale, decayed),
                {"params": [], "weight_decay": weight_decay if decayed else 0.0, "names": [], "lr_scale": scale},
            )
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
    norms, CLS and positions), then per ``layer_id(model, name)`` with ``lr_scale = layer_decay ** (L + 1 - layer_id)``
    (BEiT's layer decay: the head gets the full lr, the patch embedding the smallest). Each group also carries its
    ``"layer_id"``; groups come in order of (depth, weight decay)."""
    num_layers = model.config.num_hidden_layers
    groups = {}
    for base in param_groups(model, weight_decay):
        for name, param in zip(base["names"], base["params"]):
            depth = layer_id(model, name)
            key = (depth, base["weight_decay"])
            group = groups.setdefault(
                key,
                {
                    "params": [],
                    "names": [],
                    "weight_decay": base["weight_decay"],
                    "layer_id": depth,
                    "lr_scale": layer_decay ** (num_layers + 1 - depth),
                },
            )
            group["params"].append(param)
            group["names"].append(name)
    return [groups[k] for k in sorted(groups)]


def pretraining_optimizer(model: torch.nn.Module, args) -> torch.optim.AdamW:
    """Pre-training's AdamW (`examples/pretrain.py`'s step 4): no decay on biases, norms, CLS and positions; the
    teacher is frozen and not in it. lr and momentum are pure functions of the step (set by hand each step; no
    scheduler object). --patch_embedding_lr_scale: 0 freezes the stem (student and teacher then share it for the
    whole run), another value gives the stem's parameters groups of their own with that lr scale."""
    if args.patch_embedding_lr_scale == 0:
        model.aasp.embeddings.requires_grad_(False)
    lr_scales = {} if args.patch_embedding_lr_scale in (0, 1) else {"aasp.embeddings.": args.patch_embedding_lr_scale}
    return torch.optim.AdamW(
        param_groups(model, args.weight_decay, lr_scales),
        lr=learning_rate(0, args.max_steps, args.warmup_steps, args.learning_rate, args.min_learning_rate),
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        fused=True,  # one kernel per device and dtype; it skips a non-finite step on the device (training.step)
    )


def finetuning_optimizer(model: torch.nn.Module, args) -> torch.optim.AdamW:
    """Fine-tuning's AdamW: `layer_decay_param_groups` with --weight_decay and --layer_decay, the arguments' betas and
    epsilon; the learning rate is set each step (`set_learning_rates`)."""
    return torch.optim.AdamW(
        layer_decay_param_groups(model, args.weight_decay, args.layer_decay),
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
    )


def set_learning_rates(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Sets each parameter group's lr to its ``"lr_scale"`` × `lr` (the scheduled lr of this step)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"]
