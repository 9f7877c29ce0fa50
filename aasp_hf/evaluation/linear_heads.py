"""Linear evaluation heads on frozen features (EVAR protocol; paper Sec. Training Setup, Table hyperparams 2), as in
DINOv2's eval/linear.py: a grid of Linear heads, one per learning rate, trained in one pass over the features.

`train_linear_heads` trains them (Adam, cosine lr to a minimum, CE or BCE for multi-label) and selects each head's
step and the learning rate on validation; `final_test_score` reports the chosen head's test logits with the shipped
`evaluate` module. examples/linear_eval.py runs them per (part, seed) on standardised features.
"""

import math

import numpy as np
import torch

from ..utils.schedules import learning_rate
from .results import classification_score


def train_linear_heads(
    train,
    valid,
    test,
    learning_rates,
    *,
    multi_label,
    num_classes,
    max_steps,
    batch_size,
    eval_steps,
    seed,
    min_learning_rate=0.0,
    weight_decay=0.0,
    betas=(0.9, 0.999),
    early_stopping_patience=0,
    device="cpu",
):
    """One Linear layer per learning rate, all trained in one pass over standardised features.

    train/valid/test: (features float32 (N, d), labels (N,) int or (N, C) multi-hot). The heads share their
    initialisation (nn.Linear's, from `seed`) and the batch order; head l has its own Adam parameter group with
    peak lr `learning_rates[l]`, so each head follows exactly the run it would have alone. Returns a dict with,
    per lr, the best validation score, the step it was reached and the test score there; the chosen lr (best
    validation); its test logits at that step; the final weights (L, d, C) and biases (L, C); the steps run.
    """
    generator = torch.Generator().manual_seed(seed)
    to_tensor = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
    train_x, valid_x, test_x = (to_tensor(s[0]).float() for s in (train, valid, test))
    train_y = to_tensor(train[1]).float() if multi_label else to_tensor(train[1]).long()
    num_heads, dim = len(learning_rates), train_x.shape[1]

    bound = 1.0 / math.sqrt(dim)  # nn.Linear's default initialisation, identical for every head
    weight0 = (torch.rand(dim, num_classes, generator=generator) * 2 - 1) * bound  # (d, C)
    bias0 = (torch.rand(num_classes, generator=generator) * 2 - 1) * bound  # (C,)
    weights = [torch.nn.Parameter(weight0.clone().to(device)) for _ in learning_rates]
    biases = [torch.nn.Parameter(bias0.clone().to(device)) for _ in learning_rates]
    optimizer = torch.optim.Adam(
        [{"params": [w, b], "lr": lr} for w, b, lr in zip(weights, biases, learning_rates)],
        betas=betas,
        weight_decay=weight_decay,
    )

    def logits_of(x):  # (N, d) -> (L, N, C)
        return torch.einsum("nd,ldc->lnc", x, torch.stack(weights)) + torch.stack(biases)[:, None]

    def scores_of(x, labels):
        with torch.no_grad():
            logits = logits_of(x).cpu().numpy()
        return [classification_score(logits[l], labels, multi_label) for l in range(num_heads)], logits

    best_valid = [-math.inf] * num_heads
    best_step = [0] * num_heads
    test_at_best = [float("nan")] * num_heads
    best_test_logits = [None] * num_heads
    num_train = len(train_x)
    batch_size = min(batch_size, num_train)
    order, cursor, stale, step = None, num_train, 0, 0
    while step < max_steps:
        if cursor + batch_size > num_train:  # a new seeded epoch permutation; the incomplete tail is dropped
            order, cursor = torch.randperm(num_train, generator=generator).to(device), 0
        index = order[cursor : cursor + batch_size]
        cursor += batch_size
        for group, peak in zip(optimizer.param_groups, learning_rates):
            group["lr"] = learning_rate(step, max_steps, 0, peak, min_learning_rate)  # cosine, no warm-up
        logits = logits_of(train_x[index])  # (L, B, C)
        targets = train_y[index]
        if multi_label:
            losses = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, targets.expand(num_heads, -1, -1), reduction="none"
            ).mean(dim=(1, 2))  # (L,)
        else:
            losses = (
                torch.nn.functional.cross_entropy(
                    logits.reshape(-1, num_classes), targets.repeat(num_heads), reduction="none"
                )
                .reshape(num_heads, -1)
                .mean(1)
            )  # (L,)
        optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()  # heads share nothing, so each gets the gradient of its own loss
        optimizer.step()
        step += 1

        if step % eval_steps == 0 or step == max_steps:
            valid_scores, _ = scores_of(valid_x, valid[1])
            test_scores, test_logits = scores_of(test_x, test[1])
            improved = False
            for l in range(num_heads):
                if valid_scores[l] > best_valid[l]:
                    best_valid[l], best_step[l], test_at_best[l] = valid_scores[l], step, test_scores[l]
                    best_test_logits[l] = test_logits[l]
                    improved = True
            stale = 0 if improved else stale + 1
            if early_stopping_patience and stale >= early_stopping_patience:
                break

    chosen = int(np.argmax(best_valid))
    return {
        "learning_rates": list(learning_rates),
        "valid_scores": best_valid,
        "test_scores": test_at_best,
        "best_steps": best_step,
        "chosen_index": chosen,
        "chosen_learning_rate": learning_rates[chosen],
        "valid_score": best_valid[chosen],
        "test_score": test_at_best[chosen],
        "steps": step,
        "test_logits": best_test_logits[chosen],
        "weights": torch.stack(weights).detach().cpu(),
        "biases": torch.stack(biases).detach().cpu(),
    }


def final_test_score(metric, logits: np.ndarray, labels: np.ndarray, multi_label: bool) -> float:
    """The reported score, by the shipped `evaluate` module: accuracy of argmax, or macro mAP of the logits."""
    if multi_label:
        return metric.compute(predictions=logits.tolist(), references=labels.astype(int).tolist())["mAP"]
    return metric.compute(predictions=logits.argmax(-1).tolist(), references=labels.tolist())["accuracy"]
