"""Crash-safe checkpoints around ``accelerator.save_state``.

Layout of ``output_dir``::

    checkpoint-<step>/          a complete ``accelerator.save_state`` + ``manifest.json`` + ``trainer_state.json``
                                (+ per-process files)
    checkpoint-<step>.tmp/      a save in progress (or a crash mid-save): never read
    latest                      text file naming the last complete checkpoint directory

A save writes into ``checkpoint-<step>.tmp``, then renames it atomically (``os.replace``) to ``checkpoint-<step>``,
then rewrites ``latest`` through a temporary file and ``os.replace``. A crash at any point leaves the previous
``latest`` pointing to a complete checkpoint. Multi-process runs need ``output_dir`` on a filesystem all processes
see (the main process renames; every process writes its own RNG / collator state into the ``.tmp`` directory).

``manifest.json`` lists every file of the checkpoint with its size and a SHA-256 content hash as written, so that a
checkpoint damaged after the save (a file deleted, a copy cut short, a full disk during a copy, bytes overwritten in
place) is recognised before it is loaded: `checkpoint_problem` names what is wrong and `latest_checkpoint` falls back
to the newest checkpoint that verifies. SHA-256: on the checkpoint files of the paper preset it hashed faster than
BLAKE2b, SHA-1 and MD5 (benchmarks/speed, `checkpoint_hash`; CPUs with SHA extensions compute it in hardware); the
files are hashed in parallel threads (hashlib releases the GIL), so the cost is about one re-read of the largest file.
Checkpoints written before hashes (a manifest of sizes) or before manifests still resume, checked as far as they can be.

A save that fails (a full disk, a quota, a read-only or vanished file system) removes what it had written and raises a
`StorageError` of one line naming the path, what was being written, the space it needed and had, and the checkpoint that
is intact. `write_text_atomically` (`aasp_hf.utils.files`, imported here) and `replace_directory` write results and exports
the same way: into a temporary sibling, then ``os.replace``, so a reader never sees a half-written file.
"""

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..utils.errors import UsageError
from ..utils.files import write_text_atomically

LATEST = "latest"
TRAINER_STATE = "trainer_state.json"
MANIFEST = "manifest.json"
HASH = "sha256"  # the manifest's content hash (hashlib name)
CHECKPOINT_FORMAT = 2  # trainer_state.json's "checkpoint_format": 2 = the manifest holds sizes and hashes
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
UNFINISHED = f"it holds no {TRAINER_STATE}: no save finished there"


class StorageError(UsageError):
    """A write the file system refused (full, over quota, read-only, gone): one line naming the path, what was being
    written, the space needed and free, and what is intact. A UsageError: the user frees space or picks another
    folder; the scripts print it as one line."""


def _megabytes(num_bytes: float) -> str:
    return f"{num_bytes / 1e6:.1f} MB"


def storage_error(
    error: BaseException, path, what: str, needed: int | None = None, intact: str | None = None, free: int | None = None
) -> StorageError:
    """The one-line `StorageError` for `error` raised while writing `what` to `path`. `free`: the bytes free when the
    write failed (measured now when not given); `needed`: the bytes the write needs; `intact`: what is still whole
    (e.g. the last complete checkpoint)."""
    path = Path(path)
    where = path
    while not where.exists() and where != where.parent:  # disk_usage needs an existing path
        where = where.parent
    try:
        usage = shutil.disk_usage(where)
        free = usage.free if free is None else free
        space = f"{_megabytes(free)} free of {_megabytes(usage.total)}"
    except OSError:
        space = "free space unknown"
    if isinstance(error, OSError) and error.strerror:
        reason = error.strerror
    elif "os error 28" in str(error) or (needed is not None and free is not None and free < needed):
        # torch's zip writer reports a full disk as "unexpected pos" / "failed writing file", safetensors as a
        # SafetensorError ("... (os error 28)")
        reason = os.strerror(errno.ENOSPC)
    else:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
    need = f"needs about {_megabytes(needed)}, " if needed is not None else ""
    kept = f"; {intact}" if intact else ""
    return StorageError(
        f"cannot write {what} to {path}: {reason}; it {need}the file system has {space}{kept}. "
        "Free space (or choose another --output_dir on a writable disk), then run the same command "
        "with --resume."
    )


def file_hash(path, chunk: int = 1 << 22) -> str:
    """The manifest's content hash of a file (SHA-256, hex), read in 4-MiB chunks."""
    digest = hashlib.new(HASH)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_hashes(paths) -> list[str]:
    """`file_hash` of each path, in parallel threads (at most 8)."""
    from concurrent.futures import ThreadPoolExecutor

    paths = list(paths)
    if len(paths) <= 1:
        return [file_hash(path) for path in paths]
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1, 8)) as pool:
        return list(pool.map(file_hash, paths))


_atomic_write_text = write_text_atomically


@contextlib.contextmanager
def replace_directory(path):
    """Yields a temporary sibling of the directory `path` to write into; on success it replaces `path` (the old one is
    moved aside, the new one renamed in, the old one deleted), on failure it is deleted and the error raised. A reader
    never finds `path` half written: it is the old folder, the new one, or (for an instant) absent."""
    path = Path(path)
    tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
    for leftover in (tmp, old):
        if leftover.exists():
            shutil.rmtree(leftover)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def is_refused_write(error: BaseException, free: int | None, needed: int) -> bool:
    """Whether `error`, raised while writing `needed` more bytes with `free` bytes free, is the file system refusing
    the write: an OSError, or another library's error (torch's zip writer: a RuntimeError "unexpected pos";
    safetensors: a SafetensorError) raised while less space was free than the write needed (1 MiB of slack for
    block rounding)."""
    return isinstance(error, OSError) or "os error 28" in str(error) or (free is not None and free < needed + (1 << 20))


def free_bytes(path) -> int | None:
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


@contextlib.contextmanager
def refused_writes(path, what: str, needed: int, intact=None):
    """Turns a write that the file system refuses inside the block (`is_refused_write`) into the one-line
    `StorageError` (`storage_error`); other errors pass unchanged. Clean up partial files inside the block.
    `intact`: what is still whole, or a function that says it (called only on a failure: finding the last complete
    checkpoint reads it)."""
    try:
        yield
    except StorageError:
        raise
    except Exception as error:
        free = free_bytes(path)
        if not is_refused_write(error, free, needed):
            raise
        intact = intact() if callable(intact) else intact
        raise storage_error(error, path, what, needed=needed, intact=intact, free=free) from None


def state_bytes(accelerator) -> int:
    """The bytes of the tensors `save_state` writes (models and optimiser states): what a checkpoint needs on disk."""
    import torch

    total = 0
    for model in accelerator._models:
        total += sum(t.numel() * t.element_size() for t in model.state_dict().values())
    for optimizer in accelerator._optimizers:
        for state in optimizer.state_dict()["state"].values():
            total += sum(t.numel() * t.element_size() for t in state.values() if isinstance(t, torch.Tensor))
    return total


def directory_bytes(folder) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) if Path(folder).is_dir() else 0


def list_checkpoints(output_dir) -> list[Path]:
    """Complete checkpoint directories (``checkpoint-<step>``, no ``.tmp``), oldest first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in output_dir.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def save_checkpoint(
    accelerator,
    output_dir,
    state: "RunState",
    process_state: dict | None = None,
    save_total_limit: int | None = None,
) -> Path:
    """Save the training state at optimiser step ``state.step``; every process must call this.

    Args:
        accelerator: the run's ``Accelerator`` (model, optimiser and RNG states go through ``save_state``).
        output_dir: the run directory.
        state: where the run stands (`RunState`: the step, the data position, ...) -> ``trainer_state.json``.
        process_state: this process's picklable state (`PROCESS_STATE_KEYS`: the collator's generator, ...) ->
            ``process_state_<rank>.pt``; returned by ``load_process_state``.
        save_total_limit: keep only the newest K complete checkpoints (None keeps all).

    Returns: the final checkpoint directory.
    """
    import torch

    output_dir, step = Path(output_dir), state.step
    final = output_dir / f"checkpoint-{step}"
    tmp = output_dir / f"checkpoint-{step}.tmp"
    try:
        if accelerator.is_main_process:
            output_dir.mkdir(parents=True, exist_ok=True)
            if tmp.exists():  # leftover of a crash mid-save
                shutil.rmtree(tmp)
        accelerator.wait_for_everyone()
        accelerator.save_state(str(tmp))
        if process_state is not None:
            torch.save(process_state, tmp / f"process_state_{accelerator.process_index}.pt")
        accelerator.wait_for_everyone()  # every process's files are in `tmp` before the main process lists them
        if accelerator.is_main_process:
            paths = [path for path in sorted(tmp.rglob("*")) if path.is_file()]
            files = {
                path.relative_to(tmp).as_posix(): {"size": path.stat().st_size, HASH: digest}
                for path, digest in zip(paths, file_hashes(paths))
            }
            # trainer_state.json (the step, the data position) is written last, as the mark of a finished save, but
            # hashed in the manifest like every other file: an edited step is a damaged checkpoint, not a resume
            # at a step that was never trained
            trainer_state = {
                "step": step,
                "checkpoint_format": CHECKPOINT_FORMAT,
                "torch_threads": torch.get_num_threads(),
                **state.saved(),
            }
            state_text = json.dumps(trainer_state, indent=2)  # ASCII (json's default): its bytes are what is hashed
            files[TRAINER_STATE] = {"size": len(state_text), HASH: hashlib.new(HASH, state_text.encode()).hexdigest()}
            write_text_atomically(tmp / MANIFEST, json.dumps(files, indent=2))
            write_text_atomically(tmp / TRAINER_STATE, state_text)  # last: the save is complete
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            if final.exists():  # re-saving the same step (e.g. the final save): replace the old one
                shutil.rmtree(final)
            os.replace(tmp, final)
            write_text_atomically(output_dir / LATEST, final.name + "\n")
            if save_total_limit is not None and save_total_limit > 0:
                finished = [p for p in list_checkpoints(output_dir) if (p / TRAINER_STATE).is_file()]
                for old in finished[:-save_total_limit]:  # a folder where no save finished is not counted
                    if old != final:
                        shutil.rmtree(old, ignore_errors=True)
    except Exception as error:
        free, written, needed = free_bytes(output_dir), directory_bytes(tmp), state_bytes(accelerator)
        if not is_refused_write(error, free, needed - written):
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # nothing partial left holding space
        intact = [p for p in list_checkpoints(output_dir) if p != final]
        kept = (
            f"the last complete checkpoint, {intact[-1]}, is intact"
            if intact
            else "there is no complete checkpoint yet"
        )
        raise storage_error(
            error, tmp, f"checkpoint-{step}", needed=max(needed, written), intact=kept, free=free
        ) from None
    accelerator.wait_for_everyone()
    return final


def checkpoint_problem(checkpoint) -> str | None:
    """What makes `checkpoint` unusable, in a few words (e.g. "model.safetensors is missing"); None when complete.

    Complete: ``trainer_state.json`` is there (the save finished), every file ``manifest.json`` lists is there with the
    size and the content hash it was written with (a hash reads every byte: bytes overwritten in place, a copy cut
    short). A checkpoint whose manifest holds sizes only (written before hashes) is checked as before: each
    ``.safetensors`` file has its written size and a readable header that covers the whole file, and a pickled state
    (accelerate's ``optimizer.bin``, ``random_states_<rank>.pkl``, our ``process_state_<rank>.pt``) that is no longer a
    whole zip archive (``torch.save``'s format; truncation cuts its directory off the end) has its written size. A
    checkpoint written with a manifest (``trainer_state.json`` says so) whose manifest is gone is damaged; one from
    before manifests must hold the files every save writes (weights, ``optimizer.bin``, ``random_states_0.pkl``)."""
    import zipfile

    from safetensors import safe_open

    checkpoint = Path(checkpoint)
    if not (checkpoint / TRAINER_STATE).is_file():
        return f"{TRAINER_STATE} is missing (the save did not finish)"
    try:
        state = json.loads((checkpoint / TRAINER_STATE).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{TRAINER_STATE} is not valid JSON"
    try:
        written = json.loads((checkpoint / MANIFEST).read_text()) if (checkpoint / MANIFEST).is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{MANIFEST} is not valid JSON"
    if not isinstance(state, dict) or "step" not in state:
        return f"{TRAINER_STATE} holds no step"
    if written is None:
        if state.get("checkpoint_format", 1) >= 2:
            return f"{MANIFEST} is missing (the save wrote one)"
        # a checkpoint written before manifests: the files every save writes
        weights = [p for pattern in ("*.safetensors", "pytorch_model*") for p in checkpoint.glob(pattern)]
        if not weights:
            return "model.safetensors is missing"
        for pattern, name in (("optimizer*.bin", "optimizer.bin"), ("random_states_*.pkl", "random_states_0.pkl")):
            if not any(checkpoint.glob(pattern)):
                return f"{name} is missing"
        written = {}
    hashed = {}
    for name, entry in written.items():
        size, digest = (entry, None) if isinstance(entry, int) else (entry.get("size"), entry.get(HASH))
        path = checkpoint / name
        if not path.is_file():
            return f"{name} is missing"
        actual = path.stat().st_size
        if digest is not None:  # a hashed manifest: every byte as written (hashed below, in parallel)
            if actual != size:
                return f"{name} has {actual} bytes, {size} were written"
            hashed[name] = digest
            continue
        if name.endswith(".safetensors") and actual != size:
            return f"{name} has {actual} bytes, {size} were written"
        if not name.endswith((".safetensors", ".json")) and actual != size and not zipfile.is_zipfile(path):
            return f"{name} has {actual} bytes, {size} were written"
    for (name, digest), found in zip(hashed.items(), file_hashes(checkpoint / name for name in hashed)):
        if found != digest:
            return f"{name} differs from what was written: {HASH} {found[:12]}… instead of {digest[:12]}…"
    for path in sorted(checkpoint.glob("*.safetensors")):
        try:
            with safe_open(path, "pt"):
                pass
        except Exception as error:  # safetensors' own error type varies between versions
            return f"{path.name} cannot be read ({str(error).strip().splitlines()[0][:120]})"
    return None


def verify_checkpoints(output_dir) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The checkpoint to resume from, and each checkpoint passed over on the way with what is wrong with it.

    The checkpoint that ``latest`` names when it is complete (`checkpoint_problem`), else the newest complete
    ``checkpoint-<step>``; ``.tmp`` directories (saves in progress) are never considered. A ``latest`` that names a
    checkpoint that is not there is passed over too (the first entry, with "latest names it"). A ``checkpoint-<step>``
    folder without ``trainer_state.json`` (no save finished there: saves are renamed into place whole, so it was made
    or emptied by hand or by a copy) is listed first, whatever ``latest`` says, and never resumed from. (None, []) when
    there is no checkpoint; (None, [...]) when every checkpoint is damaged.
    """
    output_dir = Path(output_dir)
    candidates = list(reversed(list_checkpoints(output_dir)))
    damaged = [(path, UNFINISHED) for path in candidates if not (path / TRAINER_STATE).is_file()]
    candidates = [path for path in candidates if (path, UNFINISHED) not in damaged]
    pointer = output_dir / LATEST
    if pointer.is_file():
        try:
            name = pointer.read_text().strip()
        except (OSError, UnicodeDecodeError):
            name = ""
        if _CHECKPOINT_RE.match(name) and output_dir / name in candidates:
            candidates.remove(output_dir / name)
            candidates.insert(0, output_dir / name)
        elif candidates and (output_dir / name, UNFINISHED) not in damaged:  # (that one is named already)
            damaged.append(
                (
                    output_dir / (name or LATEST),
                    f"{pointer} names {name!r}, which is not there" if name else f"{pointer} is empty",
                )
            )
    for candidate in candidates:
        problem = checkpoint_problem(candidate)
        if problem is None:
            return candidate, damaged
        damaged.append((candidate, problem))
    return None, damaged


def latest_checkpoint(output_dir, warn=None) -> Path | None:
    """The checkpoint a run in `output_dir` resumes from (`verify_checkpoints`): the one ``latest`` names, or the newest
    complete one when that is missing or damaged; None when there is nothing to resume from. ``.tmp`` directories are
    never returned.

    `warn` (a print function) is for ``--resume``: each damaged checkpoint passed over is named in one line with what
    is wrong and which checkpoint the run resumes from instead, and a folder whose checkpoints are all damaged is a
    UsageError (starting afresh there would silently drop them). Without it nothing is said and such a folder gives
    None."""
    checkpoint, damaged = verify_checkpoints(output_dir)
    if warn is None:
        return checkpoint
    if checkpoint is None and damaged:
        names = "; ".join(f"{path.name}: {problem}" for path, problem in damaged)
        raise UsageError(
            f"--resume: no complete checkpoint in {output_dir} ({names}). Restore the missing files, or "
            "start over with --overwrite_output_dir."
        )
    for path, problem in damaged:
        if problem == UNFINISHED:
            warn(
                f"warning: {path} is not a checkpoint ({problem}): ignored, neither resumed from nor counted by "
                "--save_total_limit; delete it"
            )
        elif problem.startswith(str(path.parent / LATEST)):  # the pointer, not a checkpoint
            warn(f"warning: {problem}; resuming from {checkpoint.name}, the newest complete checkpoint")
        else:
            warn(
                f"warning: {path} is damaged ({problem}); resuming from {checkpoint.name}, the newest complete "
                "checkpoint"
            )
    return checkpoint


def load_trainer_state(checkpoint_dir) -> dict:
    return json.loads((Path(checkpoint_dir) / TRAINER_STATE).read_text())


def thread_count_note(checkpoint, state: dict, device_type: str) -> str | None:
    """One line when a CPU run resumes with another number of torch threads than the run that wrote `checkpoint`
    (``trainer_state.json``'s "torch_threads"); None otherwise. CPU kernels split their sums by thread (LayerNorm's
    weight gradient, oneDNN's convolutions), so a resumed run equals the uninterrupted one bit for bit only with the
    same count; with another it agrees to float rounding (on an AMD EPYC, a tiny fine-tuning run with 1 and with 2
    threads ended 1.3e-6 apart)."""
    import torch

    saved, now = state.get("torch_threads"), torch.get_num_threads()
    if device_type != "cpu" or saved is None or saved == now:
        return None
    return (
        f"note: {Path(checkpoint).name} was written by a run with {saved} torch threads, this one has {now}: CPU "
        f"kernels split their sums by thread, so the result matches an uninterrupted run to float rounding, not "
        f"bit for bit (OMP_NUM_THREADS={saved} resumes exactly)"
    )


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
        raise ValueError(
            f"{path} does not hold accelerate's RNG states (no 'torch_manual_seed'): the checkpoint is "
            "corrupt; resume from an earlier checkpoint (delete this one) or start afresh."
        )


# ----------------------------------------------------------------------------------------------- the run's state
@dataclass
class RunState:
    """Where a run stands: what both training loops start from (a fresh run's by default) and what each checkpoint
    stores of it. `save_checkpoint` writes the saved fields to ``trainer_state.json`` after the step, in this order,
    leaving out the ones a loop does not keep (None): pre-training keeps the steps skipped for a non-finite loss or
    gradient, fine-tuning the best-so-far and its evaluation history. `last_logs` (the last logged training record,
    what the results report when no step is logged after it) is read back from log_history.jsonl and
    `decode_failures` (this process's clips that failed to decode so far, where the loop counts them) from the
    process's own state."""

    step: int = 0
    micro_batches: int = 0  # of the seeded data order consumed (pre-training: the step × the accumulation)
    num_processes: int = 1
    nonfinite_steps: int | None = None
    best: dict | None = None
    history: list | None = None
    run_arguments: dict | None = None  # what defines the run (resume.PRETRAINING_RUN_ARGUMENTS, ...)
    last_logs: dict = field(default_factory=dict)
    decode_failures: int = 0

    SAVED = ("micro_batches", "num_processes", "nonfinite_steps", "best", "history", "run_arguments")

    def saved(self) -> dict:
        """The fields ``trainer_state.json`` holds beside the step (the ones this loop keeps)."""
        return {name: getattr(self, name) for name in self.SAVED if getattr(self, name) is not None}

    @classmethod
    def from_checkpoint(cls, trainer_state: dict, process_state: dict, last_logs: dict) -> "RunState":
        """The state a checkpoint stored (``trainer_state.json`` and this process's state)."""
        return cls(
            step=trainer_state["step"],
            last_logs=last_logs,
            decode_failures=process_state.get("decode_failures", 0),
            **{name: trainer_state.get(name, getattr(cls, name, None)) for name in cls.SAVED},
        )


# What each process saves of itself (``process_state_<rank>.pt``), under the same keys in both loops: the
# generator of its training collator, the fine-tuning augmentation's generator, its clips that failed to decode,
# a --streaming run's position in its shard, and (process 0) the fine-tuning weight EMA.
COLLATOR, AUGMENT_RNG, DECODE_FAILURES, STREAM, EMA = "collator", "augment_rng", "decode_failures", "stream", "ema"
OLD_COLLATOR_KEY = (
    "collator_rng"  # the collator's generator in fine-tuning checkpoints written before the keys were one
)


def collator_state(process_state: dict):
    """The collator generator's state a checkpoint stored (None when it holds none): under `COLLATOR`, or in an
    older fine-tuning checkpoint under `OLD_COLLATOR_KEY`."""
    return process_state.get(COLLATOR, process_state.get(OLD_COLLATOR_KEY))


# ----------------------------------------------------------------------------------------------- the run folder
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


def read_results(path, warn=print) -> dict | None:
    """The dict of a run's `all_results.json`; None when there is none. A file that is empty or not a JSON object (a
    disk that filled up while an older version wrote it) is named in one line through `warn` and treated as absent:
    it never stops a --resume (the run writes it again at its end)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        results = error
    if isinstance(results, dict):
        return results
    warn(
        f"warning: {path} is damaged ({'empty' if path.stat().st_size == 0 else 'not a JSON object'}); its results "
        "are left out and the file is written again when this run ends"
    )
    return None


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
