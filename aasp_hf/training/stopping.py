# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""What stops a training run before its last step: a stop signal (finish the step, save it, say how to resume, exit
with `STOPPED_EXIT_CODE`), and data that vanishes while the run reads it (`FailedClipShare`, below).

The training scripts run under `aasp_hf.utils.entry_points.run_stoppable`, which installs the process-wide stop request
(`STOP`): SIGTERM, SIGUSR1 and SIGINT only set a flag (why, and the exit status: `aasp_hf.utils.entry_points`). Here is
the training loop's side of it: the loop reads the flag at the step boundary, where every process agrees on it
(`StopAgreement`, `stop_agreed`), saves a checkpoint of the step it has just finished through the usual atomic path
(`checkpointing.save_checkpoint`), and `exit_stopped` prints one line naming it and the command that resumes and
exits with `STOPPED_EXIT_CODE`. A second signal while the run is saving only prints that the save is going on: the
handler never interrupts the save (and an interrupted save never replaces the last complete checkpoint anyway).
"""

import shlex
import signal
import sys

import torch

from ..utils.entry_points import STOP, STOPPED_EXIT_CODE, StopSignals


class StopAgreement:
    """Whether every process stops after this step: each step, every process adds its own request (`local`) to a
    collective the step already runs (pretrain.py: the all-reduce of the non-finite-loss flag), and passes the summed
    flag to `agreed`. All processes then stop after the same step, whichever of them the signal reached.

    Reading the flag back makes the host wait for the device. On the CPU that costs nothing and the flag is read at
    once (`lag` 0: the run stops after the step in which the signal arrived). On an accelerator the flag of the
    previous step is read instead (`lag` 1), once this step is queued, so the device always has a step of work
    while the host waits; the run then stops one step later, on every process alike."""

    def __init__(self, device: torch.device, request: StopSignals = STOP, lag: int | None = None):
        self.device, self.request = device, request
        self.lag = (0 if device.type == "cpu" else 1) if lag is None else lag
        self._pending = []

    def local(self) -> torch.Tensor:
        """This process's request as a 0-d float tensor on the device (a fill, not a copy from the host)."""
        return torch.full((), float(self.request.requested), device=self.device)

    def agreed(self, summed: torch.Tensor) -> bool:
        """`summed`: this step's requests summed over the processes. True when the run stops after this step."""
        self._pending.append(summed)
        if len(self._pending) <= self.lag:
            return False
        return bool(self._pending.pop(0) > 0)


def stop_agreed(accelerator, request: StopSignals = STOP) -> bool:
    """Whether every process stops after this step, for a loop that has no per-step collective to fold the request
    into (finetune.py, which reads its loss back each micro-batch anyway): one process decides alone; several sum
    their requests in one all-reduce of a single number."""
    if accelerator.num_processes == 1:
        return request.requested
    local = torch.full((), float(request.requested), device=accelerator.device)
    return bool(accelerator.reduce(local, reduction="sum") > 0)


def exit_stopped(accelerator, checkpoint, step: int, script: str, request: StopSignals = STOP):
    """After the stop checkpoint: one line (main process) that names it and the command that resumes, then
    `SystemExit(STOPPED_EXIT_CODE)` on every process."""
    name = signal.Signals(request.signal).name if request.signal is not None else "a signal on another process"
    argv = sys.argv[1:] + ([] if "--resume" in sys.argv else ["--resume"])
    command = (
        shlex.join(["python", sys.argv[0], *argv])
        if accelerator.num_processes == 1
        else "the same launch command with --resume"
    )
    accelerator.print(
        f"{script}: stopped by {name} after step {step}; saved {checkpoint}; continue with: {command} "
        f"(exit status {STOPPED_EXIT_CODE})",
        flush=True,
    )
    accelerator.wait_for_everyone()
    accelerator.end_training()  # the trackers' files are flushed
    raise SystemExit(STOPPED_EXIT_CODE)


# ------------------------------------------------------------------------------------------------------- vanishing data
# Vanishing data stops the run: the share of clips that fail to decode, judged over windows of clips read.
#
# A clip that fails to decode is replaced (pre-training: by a copy of another clip of its micro-batch, so every
# process keeps its batch shape) or dropped (fine-tuning). A few bad files in a large dataset are harmless; a folder
# that is deleted, unmounted or cut short while the run reads it is not: the run would go on training on copies of the
# clips that are left. `FailedClipShare` counts the clips read and the clips that failed in every process; at the
# steps that every process shares (logging, checkpoints) the counts are summed over the processes and, once a window
# holds at least `min_clips` clips, the share that failed in it is compared with ``--max_failed_clip_share`` and the
# window starts over. Past it, the script saves a checkpoint and stops with one line; ``--resume`` continues once the
# data is back. A clip read twice (a later epoch) counts twice, so the share is that of the batches' clips that were
# copies (or dropped) — what a vanishing folder costs the training — in the recent window, not over the whole run.
DEFAULT_MAX_SHARE = 0.1
MIN_CLIPS = 100  # a window's clips over all processes: 1 bad file in a small folder must not stop a run by chance


class FailedClipShare:
    """Counts of clips read and failed since the window started (this process), judged by `check`."""

    def __init__(self, max_share: float = DEFAULT_MAX_SHARE, min_clips: int = MIN_CLIPS):
        if not 0 <= max_share <= 1:
            raise ValueError(f"max_share={max_share}: a share between 0 and 1")
        self.max_share, self.min_clips = max_share, min_clips
        self.read, self.failed = 0, 0

    def add(self, read: int, failed: int):
        self.read += read
        self.failed += failed

    def check(self, accelerator) -> str | None:
        """Every process calls it at the same step (a sum over processes). None while the share is within bounds or
        the window is still short; else what went wrong, in words, for the stop message."""
        counts = torch.tensor([self.read, self.failed], dtype=torch.long, device=accelerator.device)
        read, failed = (int(v) for v in accelerator.reduce(counts, reduction="sum").cpu())
        if read < self.min_clips:
            return None
        self.read, self.failed = 0, 0
        if failed <= self.max_share * read:
            return None
        return (
            f"{failed} of the last {read} clips read ({100 * failed / read:.0f} %) failed to decode, more than "
            f"--max_failed_clip_share {self.max_share:g}: the data is vanishing or damaged while the run reads it"
        )
