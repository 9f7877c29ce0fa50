"""One run per output folder: a hold file that works on a shared network file system, and the launch check
(`check_launch`: a launcher's processes that did not join one run would each write the same folder).

A training script takes the hold of its ``--output_dir`` before it builds anything (`hold_run_folder`) and gives it
back when it ends, normally or with an error. A second run into a held folder (fresh or ``--resume``) is refused in
one line naming the holder: its host, process id and start time. The hold is the file ``run.lock`` in the folder::

    {"host": "node17", "pid": 41233, "started": "2026-11-28T06:40:12+00:00", "token": "…", ...}

How it is taken, and why it works on NFS (where ``fcntl``/``flock`` locks depend on the server's lock manager and
are often not honoured across clients): the holder's record is written to a private file ``run.lock.<token>``, then
hard-linked to ``run.lock`` with ``os.link``. Creating a name is atomic on NFS (v3 and v4) as on a local disk: of two
runs that link at the same moment exactly one succeeds, the other gets ``EEXIST``; and since the record was complete
before the link, a reader never sees a half-written hold (``O_CREAT|O_EXCL`` then a write would show an empty file for
a moment). The same-folder check therefore needs nothing but a file system that all the run's hosts see.

While it trains, the holder refreshes the file's modification time every `HEARTBEAT_SECONDS` (a daemon thread, so a
long step or checkpoint does not delay it; ``os.utime(path, None)`` asks an NFS server to stamp its own time). A hold
is stale, and is taken over with one line saying whose it was, when

- its host is this host, in the same PID namespace, and its process is gone (no such pid, or the pid now belongs to a
  process started at another time, read from ``/proc/<pid>/stat``): a crash, ``kill -9``, a lost node's restart;
- otherwise (another host, a container with its own PID namespace, a record without a process id, a file that is
  not a record at all) when its heartbeat is older than
  `STALE_SECONDS` (5 minutes: ten missed beats, well beyond NFS's attribute cache of at most 60 s and a few seconds of
  clock skew between hosts).

Taking over renames the stale file aside (``os.rename`` is atomic: one of two runs that both found it stale wins)
and checks that the renamed file is the record it judged; a fresh hold renamed by mistake is linked back.

With several processes (``accelerate launch``) only the main process takes the hold; the others receive its outcome
(`hold_run_folder` broadcasts it) and leave quietly when it was refused.
"""

import contextlib
import errno
import json
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from ..utils.errors import UsageError

HOLD = "run.lock"
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 300.0


def _process_start(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat); None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after "(comm)" start at field 3


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _record() -> dict:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": _process_start(os.getpid()),
        "pid_namespace": _pid_namespace(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "token": uuid.uuid4().hex,
        "heartbeat_seconds": HEARTBEAT_SECONDS,
        "stale_seconds": STALE_SECONDS,
    }


def _read(path: Path) -> tuple[dict | None, float | None]:
    """(the holder's record or None when unreadable, the file's mtime or None when it is gone)."""
    try:
        mtime = path.stat().st_mtime
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError):
        return None, mtime
    return (record if isinstance(record, dict) else None), mtime


def describe(record: dict | None) -> str:
    if record is None:
        return "a run whose hold file cannot be read"
    return f"process {record.get('pid')} on {record.get('host')} (since {record.get('started')})"


def stale_reason(record: dict | None, mtime: float, now: float | None = None) -> str | None:
    """Why the hold `record` (its file last touched at `mtime`) is stale; None while its run may be alive."""
    age = (time.time() if now is None else now) - mtime
    same_machine = (
        record is not None
        and record.get("host") == socket.gethostname()
        and record.get("pid_namespace") == _pid_namespace()
    )
    pid = record.get("pid") if record is not None else None
    if same_machine and isinstance(pid, int) and pid > 0:  # the process itself tells (a record without one: its age)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "its process is gone"
        except PermissionError:
            pass
        else:
            started = record.get("pid_start")
            if started is not None and _process_start(pid) not in (None, started):
                return "its process is gone (the pid now belongs to another process)"
        return None
    if age > STALE_SECONDS:
        return f"its heartbeat stopped {age:.0f} s ago (stale after {STALE_SECONDS:.0f} s)"
    return None


class RunHold:
    """The hold of one output folder by this process: `acquire`, then `release` (also as a context manager).

    `hold` names the hold file in the folder; `held` is what messages call held (default the folder) and `option` the
    command-line option that chose it: the tagger holds one output file, `RunHold(out.parent, f"{out.name}.lock",
    held=out, option="--output")`, so that two outputs in one folder are tagged side by side."""

    def __init__(self, output_dir, hold: str = HOLD, held=None, option: str = "--output_dir"):
        self.output_dir = Path(output_dir)
        self.path = self.output_dir / hold
        self.held, self.option = Path(held) if held is not None else self.output_dir, option
        self.record = None
        self._created_dir = False
        self._stop = threading.Event()
        self._thread = None

    def acquire(self, say=print) -> "RunHold":
        """Takes the hold or raises a one-line UsageError naming the live holder (or an unwritable folder, or a path
        that is, or lies under, a file)."""
        existing = next(path for path in (self.output_dir, *self.output_dir.parents) if path.exists())
        if not existing.is_dir():
            where = "is a file" if existing == self.held else f"lies under {existing}, which is a file"
            raise UsageError(
                f"{self.option} {self.held} {where}, not a folder: choose another {self.option}"
                f"{' (a new or existing folder)' if self.held == self.output_dir else ''}. Nothing was started."
            )
        try:
            if not self.output_dir.is_dir():
                self.output_dir.mkdir(parents=True)
                self._created_dir = True
            self.record = _record()
            private = self.path.with_name(f"{self.path.name}.{self.record['token']}")
            private.write_text(json.dumps(self.record, indent=2) + "\n")
            try:
                for _ in range(3):
                    try:
                        os.link(private, self.path)
                        break
                    except FileExistsError:
                        self._take_over_if_stale(say)
                else:
                    raise UsageError(
                        f"could not take the hold of {self.held} ({self.path} keeps reappearing): "
                        f"another run is starting there; choose another {self.option}"
                    )
            finally:
                private.unlink(missing_ok=True)
        except OSError as error:
            self._remove_created_dir()
            reason = error.strerror or str(error)
            hint = (
                f"choose an {self.option} on a writable disk"
                if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
                else f"free space or choose another {self.option}"
            )
            raise UsageError(
                f"{self.option} {self.held} cannot be written ({reason}: "
                f"{error.filename or self.output_dir}); {hint}. Nothing was started."
            ) from None
        except BaseException:
            self._remove_created_dir()
            raise
        self._thread = threading.Thread(target=self._beat, name="run-hold-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _take_over_if_stale(self, say):
        record, mtime = _read(self.path)
        if mtime is None:  # released in the meantime: link again
            return
        reason = stale_reason(record, mtime)
        if reason is None and record is None:  # a file that is not a hold record, but fresh: leave it to its writer
            age = time.time() - mtime
            raise UsageError(
                f"{self.held} is in use: {self.path} exists but is not a hold record (a run may be "
                f"starting there, or the file was damaged); it is taken over once {STALE_SECONDS:.0f} s "
                f"old (in {max(STALE_SECONDS - age, 0):.0f} s). Wait, choose another {self.option}, or, if "
                f"no run uses the folder, delete {self.path}."
            )
        if reason is None:
            raise UsageError(
                f"{self.held} is in use by another run: {describe(record)}, holding {self.path} (heartbeat "
                f"{time.time() - mtime:.0f} s ago). Wait for it to finish, stop it, or choose another {self.option}. "
                f"If that run is gone, the hold is taken over once it is stale (same host: at once; another "
                f"host: {STALE_SECONDS:.0f} s after its last heartbeat), or delete {self.path}."
            )
        aside = self.path.with_name(f"{self.path.name}.stale-{self.record['token']}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:  # another run took it over first: try again
            return
        moved, _ = _read(aside)
        if record is not None and (moved or {}).get("token") != record.get("token"):
            with contextlib.suppress(FileExistsError):  # we moved a fresh hold: put it back
                os.link(aside, self.path)
            aside.unlink(missing_ok=True)
            return
        aside.unlink(missing_ok=True)
        say(f"taking over {self.held} from {describe(record)}: {reason}")

    def _beat(self):
        while not self._stop.wait(HEARTBEAT_SECONDS):
            record, _ = _read(self.path)
            if record is None or record.get("token") != self.record["token"]:
                print(
                    f"warning: the hold of {self.held} was taken over by {describe(record)}; this run goes on "
                    "but no longer holds the folder",
                    flush=True,
                )
                return
            with contextlib.suppress(OSError):
                os.utime(self.path, None)

    def release(self):
        """Gives the hold back (only when the file is still this run's)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.record is not None:
            record, _ = _read(self.path)
            if record is not None and record.get("token") == self.record["token"]:
                with contextlib.suppress(OSError):
                    self.path.unlink()
            self.record = None
        self._remove_created_dir()

    def _remove_created_dir(self):
        """A folder this run created and left empty (a refused start) is removed again."""
        if self._created_dir:
            with contextlib.suppress(OSError):
                self.output_dir.rmdir()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


@contextlib.contextmanager
def hold_run_folder(output_dir, say=print):
    """The run's hold of `output_dir` for the `with` block: taken by the main process (`RunHold.acquire`), its
    outcome broadcast to the others; a refusal is a UsageError on the main process and a quiet exit (code 2) on the
    others. Released when the block ends, normally or with an error."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list, parse_flag_from_env

    # the process group the script's Accelerator then joins; on CPU as AcceleratorState starts it
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    hold, refusal = None, None
    if state.is_main_process:
        try:
            hold = RunHold(output_dir).acquire(say)
        except UsageError as error:
            refusal = str(error)
    if state.num_processes > 1:
        box = [refusal]
        broadcast_object_list(box, from_process=0)
        refusal = box[0]
    if refusal is not None:
        if state.is_main_process:
            raise UsageError(refusal)
        raise SystemExit(2)
    try:
        yield hold
    finally:
        if hold is not None:
            hold.release()


# --------------------------------------------------------------------------------------------------- one run per launch
# # Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
# """The launch check: a launcher that started several processes whose Accelerator sees one refuses in one line.
#
# torchrun, `accelerate launch`, mpirun and srun tell each process how many there are in the environment. accelerate
# joins them into one run only when it recognises the setup: on a CPU-only machine it does so only with
# `ACCELERATE_USE_CPU=1` (or `accelerate launch --cpu`'s config); otherwise each process trains alone, as if it were the
# only one, and every one of them writes the same output folder (the log twice, each step once per process, and
# `num_processes: 1` in the results). `check_launch` refuses that before anything is written.
#
# The variables launchers set to the number of processes: those accelerate reads itself (torchrun / accelerate
# launch, MPICH and Intel MPI, Open MPI, MVAPICH), and srun's task count, which accelerate does not read.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")


def launched_processes(environ=None) -> tuple[str, int] | None:
    """(variable, number) of the first of `WORLD_SIZE_VARIABLES` in `environ` (default `os.environ`) that says more
    than one process was started, else None."""
    environ = os.environ if environ is None else environ
    for name in WORLD_SIZE_VARIABLES:
        try:
            number = int(environ.get(name, ""))
        except ValueError:
            continue
        if number > 1:
            return name, number
    return None


def launch_mismatch_message(num_processes: int, script: str, environ=None, one_process: bool = False) -> str | None:
    """Why the launch is split, in one line, or None when it is not.

    `num_processes` is what the script's Accelerator sees (`accelerator.num_processes`); `one_process=True` for a
    script that runs in one process only (linear_eval.py), where any launch of several is refused."""
    launched = launched_processes(environ)
    if launched is None or (num_processes > 1 and not one_process):
        return None
    name, number = launched
    if one_process:
        return (
            f"{name}={number}: the launcher started {number} processes, but {script} runs in one process (each "
            f"would do the whole work into the same output folder): start it with `python {script}`"
        )
    if name == "SLURM_STEP_NUM_TASKS":
        return (
            f"{name}={number}: srun started {number} tasks of {script}, but accelerate sees 1 process, so each "
            f"would train alone into the same output folder: run one task per node that starts torchrun or "
            f'`accelerate launch` (docs/pretraining.md, "Several processes and machines")'
        )
    return (
        f"{name}={number}: the launcher started {number} processes, but accelerate sees 1, so each would train "
        f"alone into the same output folder: on CPU set ACCELERATE_USE_CPU=1 for the launch "
        f"(`ACCELERATE_USE_CPU=1 torchrun ...`, `ACCELERATE_USE_CPU=1 accelerate launch ...`)"
    )


def check_launch(num_processes: int, script: str, environ=None, one_process: bool = False) -> None:
    """A `UsageError` with `launch_mismatch_message` when the environment says several processes were launched and
    the script's Accelerator sees one (or, with `one_process=True`, when several were launched at all). Call it right
    after building the Accelerator, before anything is written."""
    message = launch_mismatch_message(num_processes, script, environ, one_process)
    if message is not None:
        raise UsageError(message)
