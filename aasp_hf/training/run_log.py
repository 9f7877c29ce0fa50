"""A run's log: log_history.jsonl (one JSON line per record, beside TensorBoard's events through accelerate's
trackers), written by the main process only, and what a resumed run reads back from it."""

import hashlib
import json
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
