# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Stopping a training run on a signal: finish the step, save it, say how to resume, exit with `STOPPED_EXIT_CODE`.

A cluster ends a job with a signal (SLURM: SIGTERM at the time limit, or the signal `--signal` asks for some time
before it; Kubernetes: SIGTERM on eviction), a person with Ctrl-C (SIGINT). By default each of them kills Python at
once and every step since the last periodic checkpoint is lost. With `STOP` installed (the scripts' entry point,
`run_stoppable`), SIGTERM, SIGUSR1 and SIGINT only set a flag; the training loop reads it at the step boundary, where
every process agrees on it (`StopAgreement`), saves a checkpoint of the step it has just finished through the usual
atomic path (`checkpointing.save_checkpoint`), prints one line naming it and the command that resumes, and exits
with `STOPPED_EXIT_CODE`. A second signal while the run is saving only prints that the save is going on: the
handler never interrupts the save (and an interrupted save never replaces the last complete checkpoint anyway).

The exit status: 75 is `EX_TEMPFAIL` of sysexits.h, "a temporary failure; the user is invited to retry". It differs
from 0 (the run finished: nothing to requeue), 1 (a Python error), 2 (a usage error, `aasp_hf.errors`) and
128 + n (what a shell reports for a process killed by signal n, with no checkpoint written), so a requeue script
can resubmit exactly the runs that saved their step: `examples/slurm/pretrain.sbatch`.

Two facts of Linux the handler also fixes:
- A process that is PID 1 of its PID namespace (a container's entry point, `unshare --pid --fork`) never receives a
  signal whose disposition is the default: SIGTERM was ignored and the run trained on until SIGKILL. A handler
  makes the kernel deliver it.
- `accelerate launch` with one process (its `simple_launcher`: `subprocess.Popen` then `wait`) installs no handler:
  a SIGTERM kills the launcher and leaves the training process running, orphaned. `follow_launcher` asks the kernel
  (`prctl(PR_SET_PDEATHSIG, SIGTERM)`) to send this process SIGTERM when its launcher dies, which then stops it here.
A cluster's signal (and Ctrl-C's SIGINT) reaches the DataLoader workers too; they leave it to the training process
(`aasp_hf.data.clips.leave_stop_signals_to_the_training_process`).

A script with no training state (examples/linear_eval.py: its feature cache and each finished head are files written
whole, which the same command reuses) has nothing to save at a boundary: `run_interruptible` ends it where the signal
lands, with one line and the same `STOPPED_EXIT_CODE`.
"""

import os
import shlex
import signal
import sys

import torch

STOPPED_EXIT_CODE = 75  # os.EX_TEMPFAIL: the run saved its step and can go on with --resume
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class StopSignals:
    """The process-wide stop request: `install` makes SIGTERM, SIGUSR1 and SIGINT set it instead of ending the
    process; `restore` puts the previous handlers back. `signal` is the first stop signal received (None before)."""

    def __init__(self):
        self.signal = None
        self._previous = {}
        self._owner = None  # the process that installed the handlers (forked DataLoader workers inherit them)

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def install(self, signals=STOP_SIGNALS):
        self._owner = os.getpid()
        for number in signals:
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def restore(self):
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous = {}

    def _handle(self, number, frame):
        # A process forked from this one (a DataLoader worker, until its worker_init_fn replaces the handlers:
        # `aasp_hf.data.clips.leave_stop_signals_to_the_training_process`) inherits this handler: it does nothing
        # there. Only os.write here: a print could re-enter a print that the signal interrupted.
        if os.getpid() != self._owner:
            return
        name = signal.Signals(number).name
        if self.signal is None:
            self.signal = number
            message = f"received {name}: finishing this step, then saving a checkpoint and exiting\n"
        else:
            message = f"received {name}: already stopping, the checkpoint is being written\n"
        os.write(sys.stderr.fileno(), message.encode())

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.restore()


STOP = StopSignals()


def follow_launcher(environ=None) -> bool:
    """When this process was started by a launcher (`accelerate launch`, torchrun), ask the kernel to send it SIGTERM
    when the launcher dies, so that a launcher killed by a signal it does not forward (accelerate's single-process
    launcher forwards none) stops this run with a checkpoint instead of leaving it orphaned. Linux only; returns
    whether it was set. A process started from a shell is left alone: `nohup python pretrain.py &` must outlive it."""
    environ = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or not launched_by_launcher(os.getppid(), environ):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0


def launched_by_launcher(parent_pid: int, environ) -> bool:
    """Whether the parent process is `accelerate launch` (its command line) or a torchrun agent (which sets
    TORCHELASTIC_RUN_ID in its workers' environment)."""
    if "TORCHELASTIC_RUN_ID" in environ:
        return True
    try:
        with open(f"/proc/{parent_pid}/cmdline", "rb") as f:
            words = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    names = [os.path.basename(word) for word in words]
    return ("accelerate" in names and "launch" in names) or "accelerate.commands.launch" in words


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
    command = (shlex.join(["python", sys.argv[0], *argv]) if accelerator.num_processes == 1 else
               "the same launch command with --resume")
    accelerator.print(f"{script}: stopped by {name} after step {step}; saved {checkpoint}; continue with: {command} "
                      f"(exit status {STOPPED_EXIT_CODE})", flush=True)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # the trackers' files are flushed
    raise SystemExit(STOPPED_EXIT_CODE)


def run_stoppable(main, prog: str):
    """The scripts' entry point: `main()` under `errors.run_script`, with `STOP` installed and the launcher followed
    (`follow_launcher`). Once `main` has returned or raised, the stop signals are ignored: Python's finalisation
    puts a handled signal back to its default (so a cluster's repeated SIGTERM, or a second Ctrl-C, arriving while the
    interpreter shuts down would turn the stop's exit status into 128 + n), but leaves an ignored one ignored."""
    from ..errors import run_script

    STOP.install()
    follow_launcher()
    try:
        return run_script(main, prog)
    finally:
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)


class Stopped(BaseException):
    """A stop signal, raised where it lands by `run_interruptible`'s handler. A BaseException, as KeyboardInterrupt
    is, so that an `except Exception` on the way (a baseline that must never cost the run its result) lets it pass."""


def run_interruptible(main, prog: str, kept: str, then: str):
    """The entry point of a script that has nothing to save when it stops (examples/linear_eval.py): every file it
    writes is written whole (through a temporary file and `os.replace`) and reused by the same command run again, so
    SIGTERM, SIGUSR1 and SIGINT end it at once instead of at a step boundary, which a long feature extraction or
    baseline would make minutes away. The first of them raises `Stopped` where it lands and ignores the rest; the
    script's `with` blocks give back what they hold (the run folder's hold); then one line names the signal, `kept`
    (what the rerun reuses) and the command that goes on, and the process exits with `STOPPED_EXIT_CODE`, as a
    stopped training run does. `main()` runs under `errors.run_script`, whose message for a refused write ends with
    `then` (what the rerun does); the launcher is followed as by `run_stoppable`."""
    from ..errors import close_progress_bars, run_script

    def stop(number, frame):
        for each in STOP_SIGNALS:  # the signals that follow (a cluster repeats SIGTERM) must not interrupt the exit
            signal.signal(each, signal.SIG_IGN)
        raise Stopped(number)

    for number in STOP_SIGNALS:
        signal.signal(number, stop)
    follow_launcher()
    try:
        return run_script(main, prog, then)
    except Stopped as stopped:
        close_progress_bars()
        command = shlex.join(["python", sys.argv[0], *sys.argv[1:]])
        print(f"{prog}: stopped by {signal.Signals(stopped.args[0]).name}; {kept}; continue with: {command} (exit "
              f"status {STOPPED_EXIT_CODE})", flush=True)
        raise SystemExit(STOPPED_EXIT_CODE) from None
    finally:
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)
