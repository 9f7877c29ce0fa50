"""What a training run prints and logs.

- The log: log_history.jsonl (one JSON line per record, beside TensorBoard's events through accelerate's trackers),
  written by the main process only (`write_logs`), what a resumed run reads back from it (`last_training_logs`), and
  the per-process summaries that check the processes stayed in sync (`checksum`, `write_rank_summary`).
- What a training script prints: its own story (what it will do, progress, what it wrote), not the start-up and
  bookkeeping lines of the libraries under it: `quiet_libraries()` silences the lines a user cannot act on, once at
  the start of a script; `describe_new_head(loading_info, source)` is the one line that replaces transformers'
  loading report when an encoder is loaded into a classifier (a new head is expected; anything else the checkpoint
  did not fit is named); `loading_quietly()` is a block in which transformers' loading report is not logged.
"""

import contextlib
import hashlib
import json
import logging
import sys
import types
from pathlib import Path

import torch

from ..utils.files import write_text_atomically


def last_training_logs(history_path: Path, step: int) -> dict:
    """The last training record (loss parts, lr, ...) of log_history.jsonl at or before `step`, without its step; {}
    when there is none. A resumed run that trains no step (its checkpoint is the last) reports these."""
    if not history_path.is_file():
        return {}
    last = {}
    for line in history_path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("step", step + 1) <= step and "train/loss" in record:
            last = {k: v for k, v in record.items() if k != "step"}
    return last


def write_logs(accelerator, history_path: Path, step: int, logs: dict):
    """TensorBoard (accelerate's trackers) and one line of log_history.jsonl (main process)."""
    accelerator.log(logs, step=step)
    if accelerator.is_main_process:
        history_path.parent.mkdir(parents=True, exist_ok=True)
        with open(history_path, "a") as f:
            f.write(json.dumps({"step": step, **logs}) + "\n")


def checksum(module: torch.nn.Module) -> str:
    """sha256 of `module`'s state (names and float32 values): equal on every process of a run in sync."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def write_rank_summary(output_dir: Path, rank: int, model, data_checksum: str):
    """ranks/rank<r>.json: this process's parameter checksums (student, teacher) and the checksum of the data it saw,
    which every process of a run in sync shares."""
    ranks_dir = output_dir / "ranks"
    ranks_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomically(
        ranks_dir / f"rank{rank}.json",
        json.dumps(
            {
                "student_checksum": checksum(model.aasp),
                "teacher_checksum": checksum(model.teacher),
                "data_checksum": data_checksum,
            }
        ),
    )


# ----------------------------------------------------------------------------------------------- what the script prints
NEW_HEAD_PREFIX = "classifier."  # AaspForAudioClassification's head: what an encoder checkpoint does not hold


def quiet_libraries() -> None:
    """Silences, for the whole process:

    - TensorFlow's start-up lines (absl's "All log messages before absl::InitializeLog()", oneDNN, cudart), printed
      when TensorFlow is installed because tensorboard's event writer imports it. `tensorboard.compat.notf` is
      tensorboard's own switch to its TF-free implementation, which writes the same event files (and saves the
      seconds TensorFlow takes to import);
    - transformers' progress bars ("Loading weights", "Writing model shards" at every saved model), which nest inside
      the run's own bar;
    - accelerate's four INFO lines per checkpoint ("Saving current state to …", "… saved in …"): the run says in one
      line which checkpoint it saved.

    transformers' and accelerate's warnings stay."""
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    logging.getLogger("accelerate").setLevel(logging.WARNING)


@contextlib.contextmanager
def loading_quietly():
    """transformers' loading report (a table with ANSI escapes that lists a new head's weights as MISSING) is not
    logged inside the block; call `from_pretrained(..., output_loading_info=True)` and `describe_new_head`."""
    from transformers.utils import logging as transformers_logging

    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(verbosity)


def describe_new_head(loading_info: dict, source) -> str:
    """One line for `from_pretrained(..., output_loading_info=True)`'s `loading_info` of a classifier loaded from the
    encoder at `source`: the head's tensors initialised (expected), and, as a warning, any other tensor the checkpoint
    lacked, held beyond the model or held in another shape."""
    missing = sorted(loading_info.get("missing_keys") or [])
    head = [key for key in missing if key.startswith(NEW_HEAD_PREFIX)]
    others = {
        "missing": [key for key in missing if not key.startswith(NEW_HEAD_PREFIX)],
        "unexpected": sorted(loading_info.get("unexpected_keys") or []),
        "of another shape": sorted(
            str(entry[0]) if isinstance(entry, (tuple, list)) else str(entry)
            for entry in loading_info.get("mismatched_keys") or []
        ),
    }
    if any(others.values()):
        listed = "; ".join(
            f"{what}: {', '.join(keys[:5])}{' …' if len(keys) > 5 else ''}" for what, keys in others.items() if keys
        )
        return (
            f"warning: {source} does not fit this classifier beyond its new head ({listed}); is it an AaSP "
            "encoder of this architecture? Those tensors were initialised afresh."
        )
    modules = sorted({key.rsplit(".", 1)[0] for key in head})
    if not head:
        return f"loaded the classifier from {source}, head included"
    return (
        f"loaded the encoder from {source}; the classification head ({', '.join(modules)}: {len(head)} tensors) "
        "is new, initialised for this task"
    )
