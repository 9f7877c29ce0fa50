"""Crash-safe checkpoints around ``accelerator.save_state``.

Layout of ``output_dir``::

    checkpoint-<step>/          a complete ``accelerator.save_state`` + ``trainer_state.json`` (+ per-process files)
    checkpoint-<step>.tmp/      a save in progress (or a crash mid-save): never read
    latest                      text file naming the last complete checkpoint directory

A save writes into ``checkpoint-<step>.tmp``, then renames it atomically (``os.replace``) to ``checkpoint-<step>``,
then rewrites ``latest`` through a temporary file and ``os.replace``. A crash at any point leaves the previous
``latest`` pointing to a complete checkpoint. Multi-process runs need ``output_dir`` on a filesystem all processes
see (the main process renames; every process writes its own RNG / collator state into the ``.tmp`` directory).
"""

import json
import os
import re
import shutil
from pathlib import Path

from ..errors import UsageError

LATEST = "latest"
TRAINER_STATE = "trainer_state.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def _atomic_write_text(path: Path, text: str):
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def list_checkpoints(output_dir) -> list[Path]:
    """Complete checkpoint directories (``checkpoint-<step>``, no ``.tmp``), oldest first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def save_checkpoint(accelerator, output_dir, step: int, extra_state: dict | None = None, process_state=None,
                    save_total_limit: int | None = None) -> Path:
    """Save the training state at optimiser step ``step``; every process must call this.

    Args:
        accelerator: the run's ``Accelerator`` (model, optimiser and RNG states go through ``save_state``).
        output_dir: the run directory.
        step: optimiser steps completed.
        extra_state: JSON-serialisable state of the main process (data position, ...) -> ``trainer_state.json``.
        process_state: optional picklable per-process state (e.g. the collator generator) ->
            ``process_state_<rank>.pt``; returned by ``load_process_state``.
        save_total_limit: keep only the newest K complete checkpoints (None keeps all).

    Returns: the final checkpoint directory.
    """
    import torch

    output_dir = Path(output_dir)
    final = output_dir / f"checkpoint-{step}"
    tmp = output_dir / f"checkpoint-{step}.tmp"
    if accelerator.is_main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
        if tmp.exists():  # leftover of a crash mid-save
            shutil.rmtree(tmp)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    if process_state is not None:
        torch.save(process_state, tmp / f"process_state_{accelerator.process_index}.pt")
    if accelerator.is_main_process:
        state = {"step": step, **(extra_state or {})}
        _atomic_write_text(tmp / TRAINER_STATE, json.dumps(state, indent=2))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        if final.exists():  # re-saving the same step (e.g. the final save): replace the old one
            shutil.rmtree(final)
        os.replace(tmp, final)
        _atomic_write_text(output_dir / LATEST, final.name + "\n")
        if save_total_limit is not None and save_total_limit > 0:
            for old in list_checkpoints(output_dir)[:-save_total_limit]:
                if old != final:
                    shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def find_latest_checkpoint(output_dir) -> Path | None:
    """The checkpoint that ``latest`` names; ``.tmp`` directories are never returned.

    Falls back to the newest complete ``checkpoint-<step>`` holding a ``trainer_state.json`` when ``latest`` is
    missing or names a directory that no longer exists. None when there is nothing to resume from.
    """
    output_dir = Path(output_dir)
    pointer = output_dir / LATEST
    if pointer.is_file():
        name = pointer.read_text().strip()
        candidate = output_dir / name
        if _CHECKPOINT_RE.match(name) and (candidate / TRAINER_STATE).is_file():
            return candidate
    complete = [p for p in list_checkpoints(output_dir) if (p / TRAINER_STATE).is_file()]
    return complete[-1] if complete else None


def load_trainer_state(checkpoint_dir) -> dict:
    return json.loads((Path(checkpoint_dir) / TRAINER_STATE).read_text())


def load_process_state(checkpoint_dir, process_index: int):
    """What ``save_checkpoint(process_state=...)`` stored for this process (None if absent).

    Read with ``weights_only=True``: tensors, dicts, lists and numbers only (generator states, EMA weights, numpy
    bit-generator states), so a checkpoint directory from elsewhere cannot run code when resumed from."""
    import torch

    path = Path(checkpoint_dir) / f"process_state_{process_index}.pt"
    return torch.load(path, weights_only=True) if path.exists() else None


def check_random_states(checkpoint_dir, process_index: int) -> None:
    """Raise a clear error if this process's accelerate RNG file in ``checkpoint_dir`` cannot be read safely.

    ``accelerator.load_state`` reads ``random_states_<rank>.pkl`` with ``torch.load(weights_only=True)`` (a pickled
    payload never runs) but swallows any failure with an info log and trains on with the current RNG state, so
    dropout and drop-path would silently differ from the uninterrupted run. Resuming calls this first."""
    from accelerate.utils import load

    path = Path(checkpoint_dir) / f"random_states_{process_index}.pkl"
    try:
        states = load(path)
    except Exception as error:
        reason = (str(error).strip().splitlines() or [""])[0][:200]
        raise ValueError(
            f"{path} cannot be read with torch.load(weights_only=True) ({type(error).__name__}: {reason}): the "
            "checkpoint is corrupt or was not written by a run of this code. Resume from an earlier checkpoint "
            "(delete this one) or start afresh."
        ) from error
    if not isinstance(states, dict) or "torch_manual_seed" not in states:
        raise ValueError(f"{path} does not hold accelerate's RNG states (no 'torch_manual_seed'): the checkpoint is "
                         "corrupt; resume from an earlier checkpoint (delete this one) or start afresh.")


# What a training script leaves in its output directory; `check_output_dir` looks for these.
RUN_ARTEFACTS = ("checkpoint-*", LATEST, "log_history.jsonl", "all_results.json")
RUN_OUTPUTS = ("all_results.json", "encoder", "teacher_encoder", "model.safetensors")  # what a finished run leaves


def check_output_dir(output_dir, resume: bool, overwrite: bool, artefacts=RUN_ARTEFACTS) -> list[Path]:
    """Refuse to start a run over another one, as transformers' example scripts do.

    Without `resume` and `overwrite`, an `output_dir` that holds a run — a checkpoint, results or an export among
    `artefacts` (glob patterns: checkpoints, the log, results, exports) — raises a UsageError naming `--resume` and
    `--overwrite_output_dir`: starting over there would replace the exports, append duplicate steps to the log and
    leave old checkpoints beside new ones. With `overwrite` (and not `resume`) the artefacts are returned, for the
    main process to delete (`remove_artefacts`); other files in the folder are left alone. A folder whose artefacts
    hold no checkpoint, results or export is what a failed start leaves (a log, tensorboard/): nothing there can be
    resumed, so its artefacts are returned for deletion without `overwrite`, and the retry starts.
    """
    output_dir = Path(output_dir)
    if resume or not output_dir.is_dir():
        return []
    found = sorted({path for pattern in artefacts for path in output_dir.glob(pattern)})
    holds_a_run = any(p.name.startswith("checkpoint-") or p.name in RUN_OUTPUTS for p in found)
    if holds_a_run and not overwrite:
        names = ", ".join(p.name for p in found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(
            f"Output directory {output_dir} already holds a run ({names}). Pass --resume to continue it from its "
            f"latest checkpoint, --overwrite_output_dir to start over (its checkpoints, log and exports are deleted "
            f"first), or choose another --output_dir."
        )
    return found


def remove_artefacts(paths) -> None:
    """Deletes the files and folders `check_output_dir` returned (on the main process only)."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def truncate_log(history_path, step: int) -> int:
    """Cuts a `log_history.jsonl` back to the lines of steps <= `step` (the checkpoint a run resumes from), so the
    steps a crashed run logged after its last checkpoint, which the resumed run computes again, are written once.
    Written atomically. Returns the number of lines removed (0 when the file does not exist)."""
    history_path = Path(history_path)
    if not history_path.is_file():
        return 0
    lines = history_path.read_text().splitlines()
    kept = []
    for line in lines:
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError, TypeError):  # a line cut short by the crash
            continue
    if len(kept) < len(lines):
        tmp = history_path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, history_path)
    return len(lines) - len(kept)
