# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The scripts' entry points: how every command of the package, the examples, the conversion tools and the
benchmarks runs its `main`, so that a mistake is one line and a stop signal ends the run the documented way.

- `run_script(main, prog)`: a `UsageError` (`aasp_hf.utils.errors`) or a write the file system refused (full, over quota,
  read-only: `refused_write_message`) becomes `<prog>: error: <message>` on stderr and exit code 2, like argparse's
  `parser.error`, without a traceback. A traceback is kept for bugs.
- `run_stoppable(main, prog)`: the training scripts' entry point, `run_script` with the process-wide stop request
  (`STOP`) installed. A cluster ends a job with a signal (SLURM: SIGTERM at the time limit, or the signal `--signal`
  asks for some time before it; Kubernetes: SIGTERM on eviction), a person with Ctrl-C (SIGINT). By default each of
  them kills Python at once and every step since the last periodic checkpoint is lost. With `STOP` installed,
  SIGTERM, SIGUSR1 and SIGINT only set a flag, which the training loop reads at the step boundary
  (`aasp_hf.training.stopping`: every process agrees on it, saves the step, exits with `STOPPED_EXIT_CODE`).
- `run_interruptible(main, prog, kept, then)`: the entry point of a script with no training state
  (examples/linear_eval.py: its feature cache and each finished head are files written whole, which the same
  command reuses), which has nothing to save at a boundary: the signal ends it where it lands, with one line and
  the same `STOPPED_EXIT_CODE`.

The exit status: 75 is `EX_TEMPFAIL` of sysexits.h, "a temporary failure; the user is invited to retry". It differs
from 0 (the run finished: nothing to requeue), 1 (a Python error), 2 (a usage error) and 128 + n (what a shell
reports for a process killed by signal n, with no checkpoint written), so a requeue script can resubmit exactly the
runs that saved their step: `examples/slurm/pretrain.sbatch`.

Two facts of Linux the stop request also fixes:
- A process that is PID 1 of its PID namespace (a container's entry point, `unshare --pid --fork`) never receives a
  signal whose disposition is the default: SIGTERM was ignored and the run trained on until SIGKILL. A handler
  makes the kernel deliver it.
- `accelerate launch` with one process (its `simple_launcher`: `subprocess.Popen` then `wait`) installs no handler:
  a SIGTERM kills the launcher and leaves the training process running, orphaned. `follow_launcher` asks the kernel
  (`prctl(PR_SET_PDEATHSIG, SIGTERM)`) to send this process SIGTERM when its launcher dies, which then stops it here.
A cluster's signal (and Ctrl-C's SIGINT) reaches the DataLoader workers too; they leave it to the training process
(`aasp_hf.data.clips.leave_stop_signals_to_the_training_process`).
"""

import errno
import os
import shlex
import shutil
import signal
import sys
from pathlib import Path

from .errors import UsageError

STOPPED_EXIT_CODE = 75  # os.EX_TEMPFAIL: the run saved its step and can go on with --resume
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# a write the file system refused: full, over quota, read-only
_REFUSED_WRITES = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}

RESUME = "run the same command with --resume to go on from the last complete checkpoint"
AGAIN = "run the same command again"


# ----------------------------------------------------------------------------------------------- errors as one line
def refused_write_message(error: OSError, then: str = AGAIN) -> str:
    """One line for an OSError of `_REFUSED_WRITES`: the path, the reason, the space free there and, after freeing
    space, `then` (what the script's rerun does: the same command, or the training scripts' `--resume`)."""
    path = Path(error.filename) if error.filename else None
    space = ""
    if path is not None:
        where = path
        while not where.exists() and where != where.parent:
            where = where.parent
        try:
            usage = shutil.disk_usage(where)
            space = f" ({usage.free / 1e6:.1f} MB free of {usage.total / 1e6:.1f} MB)"
        except OSError:
            pass
    return (
        f"cannot write {path or 'a file'}: {error.strerror}{space}. Free space (or choose a writable "
        f"--output_dir), then {then}."
    )


def run_script(main, prog: str, then: str = AGAIN):
    """Runs `main()`; a `UsageError` becomes `prog: error: message` on stderr and exit code 2 (no traceback), and so
    does a write the file system refused (full, over quota, read-only: `refused_write_message`, which ends with
    `then`) wherever it happens."""
    try:
        return main()
    except UsageError as error:
        close_progress_bars()
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as error:
        if error.errno not in _REFUSED_WRITES:
            raise
        close_progress_bars()
        print(f"{prog}: error: {refused_write_message(error, then)}", file=sys.stderr)
        raise SystemExit(2) from None


def close_progress_bars():
    """Ends the line of a progress bar the error interrupted, so the error is a line of its own."""
    if (tqdm := sys.modules.get("tqdm")) is not None:
        for bar in list(getattr(tqdm.tqdm, "_instances", ())):
            bar.close()


# ----------------------------------------------------------------------------------------------- stop signals
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


def run_stoppable(main, prog: str):
    """The training scripts' entry point: `main()` under `run_script`, with `STOP` installed and the launcher followed
    (`follow_launcher`). Once `main` has returned or raised, the stop signals are ignored: Python's finalisation
    puts a handled signal back to its default (so a cluster's repeated SIGTERM, or a second Ctrl-C, arriving while the
    interpreter shuts down would turn the stop's exit status into 128 + n), but leaves an ignored one ignored."""
    STOP.install()
    follow_launcher()
    try:
        return run_script(main, prog, then=RESUME)
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
    stopped training run does. `main()` runs under `run_script`, whose message for a refused write ends with `then`
    (what the rerun does); the launcher is followed as by `run_stoppable`."""

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
        print(
            f"{prog}: stopped by {signal.Signals(stopped.args[0]).name}; {kept}; continue with: {command} (exit "
            f"status {STOPPED_EXIT_CODE})",
            flush=True,
        )
        raise SystemExit(STOPPED_EXIT_CODE) from None
    finally:
        for number in STOP_SIGNALS:
            signal.signal(number, signal.SIG_IGN)


__all__ = [
    "AGAIN",
    "RESUME",
    "STOP",
    "STOPPED_EXIT_CODE",
    "STOP_SIGNALS",
    "StopSignals",
    "Stopped",
    "close_progress_bars",
    "follow_launcher",
    "refused_write_message",
    "run_interruptible",
    "run_script",
    "run_stoppable",
]
