"""Training-side helpers that the example scripts use around the model (pre-training and fine-tuning).

Re-exported here: crash-safe checkpoints (`checkpointing`) and AdamW parameter groups (`optim`). The other modules
are imported by name:

- the scripts' arguments: `arguments` (command-line parsing, its checks, the defaults derived from a run's length),
  `pretraining_arguments` and `finetuning_arguments` (each script's dataclasses);
- the step and what it uses: `step` (one pre-training step and one fine-tuning step: the scripts' and
  `--plan_measure`'s), `optim` (AdamW groups, layer decay), `model_ema` (the pre-training teacher's EMA update and
  the weight EMA for evaluation), `augment` (fine-tuning augmentations), `data_order` (the seeded, resumable order of
  micro-batches over a map-style dataset), `monitors` (pre-training health monitors, and when and on what
  pre-training runs them);
- the run around it: `checkpointing` (the one checkpointer: atomic saves with a hashed manifest, finding and
  verifying the checkpoint to resume, and `RunState`, what both loops save and start from), `resume` (what defines a
  run, the comparison of a resumed run's arguments, `resume_run` for either loop), `run_log` (log_history.jsonl and
  what a script prints), `run_lock` (one run per output folder, also on NFS, and per launch), `stopping` (a stop
  signal: save the step, exit 75; data that vanishes: save and stop), `saved_models` (the exported encoder, the
  fine-tuned best model, their model cards);
- the two training loops: `pretraining_loop` (`examples/pretrain.py`'s loop, its micro-batches and results) and
  `finetuning_loop` (`examples/finetune.py`'s loop, its resume, one run's results and the summary of a sweep over
  seeds and folds).

Not here: the pre-training collator and its mask samplers live in `aasp_hf.data` (`collators`, `masking`) and the
learning-rate / teacher-momentum schedules in `aasp_hf.utils.schedules`, below this package, since data, evaluation and
training all use them.

None of them imports the model classes (they take a model object), and the model files shipped to the Hub never
import this package.
"""

from .checkpointing import latest_checkpoint, save_checkpoint
from .optim import param_groups

__all__ = [
    "latest_checkpoint",
    "param_groups",
    "save_checkpoint",
]
