"""The training defaults that depend on the run's length or the data's size, chosen from them when the user leaves
them unset; each choice is said in one line.

The paper's fine-tuning (Table hyperparams 1) runs 8,000 to 443,000 steps on thousands of clips: peak lr 5e-5,
evaluation on a weight EMA of decay 0.995 (horizon 1 / (1 - 0.995) = 200 steps), warm-up 10 % of the steps, batch
128. Kept for `--max_steps 200` on a folder of a hundred clips, the lr is too small to move the weights in so few
steps and the EMA still holds a third of the initial weights at the end (0.995^200 = 0.37): the run scores chance. So
an unset value is derived from the run:

- learning rate: the paper's 5e-5 for a run as long as its shortest schedule (8,000 steps, ESC-50 and CREMA-D) or
  longer; a shorter run gets the same total lr · steps (5e-5 · 8,000 / S), at most SHORT_RUN_MAX_LR;
- weight-EMA decay: the paper's 0.995, or for a shorter run the largest decay whose horizon 1 / (1 - d) is a tenth of
  the run (off below 20 steps, where that horizon is under 2 steps);
- warm-up: DEFAULT_WARMUP_STEPS, or 10 % of a shorter run (the presets' ratio);
- batch: DEFAULT_BATCH_SIZE clips, or all the training clips when they are fewer (for a fixed number of steps a
  larger batch sees more clips: on the study's 99 clips, 200 steps of 99 ended at loss 1.81, of 32 at 2.08).

A value given on the command line or in a preset is used as given: the presets keep the paper's numbers. One rule
covers a warm-up from a preset (or a script's default) that is longer than a shorter `--max_steps` given on the
command line: it becomes 10 % of the run, and a line says so; a warm-up typed on the command line that does not fit
is refused (`arguments.parse_arguments`). The measurements behind the numbers:
research/2026-11-small-folder-finetuning/.

Every function returns (value, line): the line is None when the default was kept.
"""

PAPER_LEARNING_RATE = 5e-5  # Table hyperparams 1, fine-tuning, every dataset
PAPER_EMA_DECAY = 0.995  # Sec. Fine-tuning Setup (not for ESC-50)
SHORTEST_PAPER_SCHEDULE = 8000  # steps of the ESC-50 and CREMA-D presets, the paper's shortest fine-tuning
SHORT_RUN_MAX_LR = 2e-3  # the largest lr a short run gets (measured: research/2026-11-small-folder-finetuning/)
EMA_HORIZON_FRACTION = 0.1  # the EMA's horizon 1 / (1 - d), at most this fraction of the run
WARMUP_FRACTION = 0.1  # the presets' warm-up: 10 % of the steps
DEFAULT_WARMUP_STEPS = 100
DEFAULT_BATCH_SIZE = 128


def learning_rate_for(max_steps: int) -> tuple[float, str | None]:
    """The peak lr of an S-step fine-tuning run: 5e-5 for S >= 8,000, else min(5e-5 · 8,000 / S, 2e-3)."""
    if max_steps >= SHORTEST_PAPER_SCHEDULE:
        return PAPER_LEARNING_RATE, None
    same_total = float(f"{PAPER_LEARNING_RATE * SHORTEST_PAPER_SCHEDULE / max_steps:.3g}")
    lr = min(SHORT_RUN_MAX_LR, same_total)
    return lr, (
        f"--learning_rate {lr:g}: the paper's {PAPER_LEARNING_RATE:g} × {SHORTEST_PAPER_SCHEDULE:,} steps (its "
        f"shortest schedule) spread over --max_steps {max_steps}"
        f"{f', at most {SHORT_RUN_MAX_LR:g}' if same_total > SHORT_RUN_MAX_LR else ''} "
        "(pass --learning_rate to choose)"
    )


def ema_decay_for(max_steps: int) -> tuple[float, str | None]:
    """The weight-EMA decay of an S-step run: 0.995, or 1 - 10 / S when that horizon is longer than S / 10, 0 (off)
    when S < 20."""
    decay = round(max(0.0, 1.0 - 1.0 / (EMA_HORIZON_FRACTION * max_steps)), 4)
    if decay < 0.5:
        decay = 0.0
    if decay >= PAPER_EMA_DECAY:
        return PAPER_EMA_DECAY, None
    if decay == 0:
        return 0.0, (
            f"--ema_decay 0 (no weight EMA): --max_steps {max_steps} is too short for one (the paper's "
            f"{PAPER_EMA_DECAY:g} averages over {1 / (1 - PAPER_EMA_DECAY):.0f} steps; pass --ema_decay to "
            "choose)"
        )
    return decay, (
        f"--ema_decay {decay:g}: its horizon 1/(1-d) = {1 / (1 - decay):.0f} steps is a tenth of "
        f"--max_steps {max_steps} (the paper's {PAPER_EMA_DECAY:g} averages over "
        f"{1 / (1 - PAPER_EMA_DECAY):.0f}; pass --ema_decay to choose)"
    )


def warmup_steps_for(max_steps: int, default: int = DEFAULT_WARMUP_STEPS) -> tuple[int, str | None]:
    """The warm-up of an S-step run when none is given: `default`, or 10 % of S when that is fewer."""
    warmup = min(default, int(max_steps * WARMUP_FRACTION))
    if warmup == default:
        return warmup, None
    return warmup, (
        f"--warmup_steps {warmup}: 10 % of --max_steps {max_steps} (the default {default} is more than "
        "that; pass --warmup_steps to choose)"
    )


def fit_warmup(warmup_steps: int, max_steps: int, source: str) -> tuple[int, str | None]:
    """A warm-up that the command line did not give (`source`: "the preset's", "the default") cut to 10 % of a run it
    does not fit in; one that fits is kept."""
    if warmup_steps <= max_steps:
        return warmup_steps, None
    warmup = int(max_steps * WARMUP_FRACTION)
    return warmup, (
        f"--warmup_steps {warmup}: 10 % of --max_steps {max_steps} ({source} {warmup_steps} is more than "
        "the run; pass --warmup_steps to choose)"
    )


def batch_size_for(num_clips: int, num_processes: int = 1, default: int = DEFAULT_BATCH_SIZE) -> tuple[int, str | None]:
    """Clips per process per micro-batch when none is given: `default`, or the training clips (shared by the
    processes) when they are fewer; at least 1."""
    batch = max(1, min(default, num_clips // num_processes))
    if batch == default:
        return batch, None
    over = f" over {num_processes} processes" if num_processes > 1 else ""
    return batch, (
        f"--per_device_train_batch_size {batch}: the {num_clips} training clips{over} (the default "
        f"{default} is more than that; pass --per_device_train_batch_size to choose)"
    )
