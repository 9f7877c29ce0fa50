"""Learning-rate and teacher-momentum schedules as pure functions of the optimiser step (paper Table
hyperparams 1: cosine with linear warm-up; Sec. Training Setup: DINOv2's cosine teacher momentum).

Nothing is stateful: resuming at step s needs only s. ``step`` is the 0-based index of the optimiser step about to
be taken (the value used for step s is the one the s-th update uses).

Pure math (imports only ``math``), below the packages that use it: the pre-training and fine-tuning scripts and the
linear-evaluation heads (`aasp_hf.evaluation.linear_heads`).
"""

import math


def learning_rate(step: int, total_steps: int, warmup_steps: int, peak: float, final: float = 0.0) -> float:
    """Linear warm-up from 0 to ``peak`` over ``warmup_steps``, then cosine decay to ``final`` at ``total_steps``.

        step < W:   peak · (step + 1) / W          (the first update already uses a non-zero lr)
        step >= W:  final + (peak - final) · (1 + cos(π · (step - W) / (S - W))) / 2

    Steps past ``total_steps`` stay at ``final``. Paper: peak 5e-4, W = 80k, S = 600k, final 0.
    """
    if total_steps <= 0 or warmup_steps < 0 or warmup_steps > total_steps:
        raise ValueError(
            f"need 0 <= warmup_steps <= total_steps and total_steps > 0, got {warmup_steps} and {total_steps}"
        )
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    if total_steps == warmup_steps:
        return peak
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def teacher_momentum(step: int, total_steps: int, base: float = 0.994, final: float = 1.0) -> float:
    """DINOv2 cosine schedule of the EMA momentum: ``final - (final - base) · (cos(π · step / S) + 1) / 2``.

    ``base`` at step 0, ``final`` at step S (and after). Paper: 0.994 -> 1.0 over all 600k steps.
    """
    if total_steps <= 0:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    progress = min(1.0, step / total_steps)
    return final - (final - base) * (math.cos(math.pi * progress) + 1.0) / 2.0
