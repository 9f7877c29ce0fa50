"""Training-side helpers for AaSP pre-training (schedules, optimiser groups, collator, checkpoints).

These import the model; the model (the files shipped to the Hub) never imports them.
"""

from .checkpointing import find_latest_checkpoint, save_checkpoint
from .collators import PretrainingCollator
from .optim import param_groups
from .schedules import learning_rate, teacher_momentum

__all__ = [
    "PretrainingCollator",
    "find_latest_checkpoint",
    "learning_rate",
    "param_groups",
    "save_checkpoint",
    "teacher_momentum",
]
