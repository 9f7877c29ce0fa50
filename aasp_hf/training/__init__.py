"""Training-side helpers that the example scripts use around the model (pre-training and fine-tuning).

Re-exported here: crash-safe checkpoints (`checkpointing`), the pre-training collator (`PretrainingCollator`, which
lives with the other collators in `aasp_hf.data.collators` and draws the views' masks with `masking`), AdamW
parameter groups (`optim`) and the learning-rate / teacher-momentum schedules (`schedules`). The other modules are
imported by name: `arguments` (the scripts' command-line parsing), `augment` (fine-tuning augmentations),
`data_order` (the seeded, resumable order of micro-batches over a map-style dataset), `masking` (the mask samplers),
`model_ema` (weight EMA for evaluation), `monitors` (pre-training health monitors), and from `optim` the fine-tuning
helpers `layer_decay_param_groups` and `set_learning_rates`.

None of them imports the model classes (they take a model object), and the model files shipped to the Hub never
import this package.
"""

from .checkpointing import find_latest_checkpoint, save_checkpoint
from ..data.collators import PretrainingCollator
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
