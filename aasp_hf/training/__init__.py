"""Training-side helpers that the example scripts use around the model (pre-training and fine-tuning).

Re-exported here: crash-safe checkpoints (`checkpointing`) and AdamW parameter groups (`optim`). The other modules
are imported by name: `arguments` (the scripts' command-line parsing), `pretraining_arguments` and
`finetuning_arguments` (the scripts' argument dataclasses), `augment` (fine-tuning augmentations), `data_order` (the
seeded, resumable order of micro-batches over a map-style dataset), `failed_clips` (the share of clips that fail to
decode, which stops a run whose data vanishes), `model_ema` (the pre-training teacher's EMA update and the weight
EMA for evaluation), `monitors` (pre-training health monitors) and `pretraining_monitors` (when and on what
pre-training runs them), `resume` (what defines a run, its comparison with the checkpoint a resume continues, what
an allowed change does), `run_lock` (one run per output folder, also on NFS), `run_log` (log_history.jsonl),
`saved_models` (the exported encoder, the fine-tuned best model, their model cards), `step` (one pre-training step
and one fine-tuning step: the scripts' and `--plan_measure`'s), `stopping` (a stop signal: save the step, exit 75)
and from `optim` the fine-tuning helpers `layer_decay_param_groups` and `set_learning_rates`.
The two training loops hold the scripts' plumbing: `pretraining_loop` (`examples/pretrain.py`'s loop, its micro-batches,
resumed states and results), `finetuning_loop` (`examples/finetune.py`'s loop, its resume and one run's results) and
`finetuning_summary` (the summary of a fine-tuning sweep over seeds and folds).

Not here: the pre-training collator and its mask samplers live in `aasp_hf.data` (`collators`, `masking`) and the
learning-rate / teacher-momentum schedules in `aasp_hf.utils.schedules`, below this package, since data, evaluation and
training all use them.

None of them imports the model classes (they take a model object), and the model files shipped to the Hub never
import this package.
"""

from .checkpointing import find_latest_checkpoint, save_checkpoint
from .optim import param_groups

__all__ = [
    "find_latest_checkpoint",
    "param_groups",
    "save_checkpoint",
]
