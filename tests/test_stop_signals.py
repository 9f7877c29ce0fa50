"""A run that a cluster or a person stops saves its step: SIGTERM, SIGUSR1 and SIGINT sent with os.kill to real
processes of examples/pretrain.py and examples/finetune.py (one process, two gloo processes with the signal on one
rank only, PID 1 of a PID namespace, the child of a single-process `accelerate launch` whose launcher is killed).
Each stop must leave a complete checkpoint of the step the run stopped after, print one line naming it, exit with
`STOPPED_EXIT_CODE` without a traceback, and `--resume` from it must give the uninterrupted run's weights (the
reference run of tests/test_reliability_training.py, shared). docs/reliability.md, "Stopping, requeueing and
resuming"."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import SAME_THREADS, assert_states_close, finetune_argv, free_port
from safetensors.torch import load_file
from test_distributed import ENV, TWO_PROCESSES, run_args
from test_reliability_training import MAX_STEPS, argv, assert_same_state, logged_steps, reference  # noqa: F401

import pretrain
from aasp_hf.training.checkpointing import checkpoint_problem, list_checkpoints, load_trainer_state
from aasp_hf.utils.entry_points import STOPPED_EXIT_CODE, StopSignals
from aasp_hf.training.stopping import StopAgreement

ROOT = Path(__file__).resolve().parents[1]
PRETRAIN = [sys.executable, str(ROOT / "examples" / "pretrain.py")]
QUIET = {**SAME_THREADS, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def start(command, log_path, **popen):
    log = open(log_path, "w")
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, **QUIET, **popen.pop("env", {})},
        stdout=log,
        stderr=subprocess.STDOUT,
        **popen,
    )


def signal_when(pid_of, proc, condition, sig, timeout=120.0, repeat=True, group=False):
    """Once `condition()` holds, send `sig` to the process `pid_of()` names (`group`: to its process group), and
    (`repeat`) again every 20 ms until `proc` exits, so that later signals land while the stop's checkpoint is
    written. Returns `proc`'s exit status."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before the moment to signal it"
        time.sleep(0.005)
    sent = False
    while proc.poll() is None:
        assert time.monotonic() < deadline, "the run did not stop"
        if repeat or not sent:
            try:
                (os.killpg if group else os.kill)(pid_of(), sig)
                sent = True
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    return proc.returncode


def stop_checkpoint(output_dir) -> tuple[Path, int]:
    """The run's only checkpoint, complete, and its step."""
    checkpoints = list_checkpoints(output_dir)
    assert len(checkpoints) == 1, checkpoints
    assert checkpoint_problem(checkpoints[0]) is None
    assert not list(Path(output_dir).glob("checkpoint-*.tmp"))
    return checkpoints[0], load_trainer_state(checkpoints[0])["step"]


def assert_one_stop_line(output: str, script: str, checkpoint: Path, step: int, signal_name: str):
    lines = [line for line in output.splitlines() if f"{script}: stopped by" in line]
    assert len(lines) == 1, output[-3000:]
    assert lines == [
        f"{script}: stopped by {signal_name} after step {step}; saved {checkpoint}; continue with: "
        + lines[0].split("continue with: ")[1]
    ], output[-3000:]
    assert "--resume" in lines[0] and f"(exit status {STOPPED_EXIT_CODE})" in lines[0]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_a_signal_saves_the_step_exits_75_and_resume_gives_the_uninterrupted_run(tmp_path, reference, sig):
    """The signal again every 20 ms until the process exits (a second signal lands during the save). SIGTERM goes to
    the whole process group, a DataLoader worker included, as a terminal's Ctrl-C or a cluster sends it (before, the
    worker died and the run failed on its next batch). One resume here (SIGINT); the SLURM script's test resumes a
    SIGTERM stop, test_finetune_saves_the_step... a finetune.py one."""
    out = tmp_path / "run"
    out.mkdir()
    group = sig == signal.SIGTERM
    # no periodic checkpoint before the end: all that is saved mid-run is the stop's
    proc = start(
        [*PRETRAIN, *argv(out, save_steps=100, dataloader_num_workers=1 if group else 0)],
        tmp_path / "run.log",
        start_new_session=True,
    )
    status = signal_when(lambda: proc.pid, proc, lambda: 2 in logged_steps(out), sig, group=group)
    output = (tmp_path / "run.log").read_text()
    assert status == STOPPED_EXIT_CODE, output[-3000:]
    checkpoint, step = stop_checkpoint(out)
    assert 2 <= step < MAX_STEPS and logged_steps(out)[-1] == step  # the step it finished was logged and saved
    assert_one_stop_line(output, "pretrain.py", checkpoint, step, sig.name)
    if sig != signal.SIGINT:  # the same stop as SIGINT's; its resume is tested once
        return
    results = pretrain.main(argv(out, save_steps=100, resume=True))
    assert results["start_step"] == step and results["step"] == MAX_STEPS
    assert_same_state(reference, out)


def rank_pid(launcher_pid: int, rank: int) -> int:
    """The training process of `rank` among the descendants of `launcher_pid` (its RANK in its environment)."""
    for path in Path("/proc").iterdir():
        if not path.name.isdigit():
            continue
        try:
            parent = int((path / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (path / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if parent == launcher_pid and f"RANK={rank}".encode() in environ and b"LOCAL_RANK=" in b"".join(environ):
            return int(path.name)
    raise LookupError(f"no rank {rank} under {launcher_pid}")


@pytest.mark.slow  # a two-process launch, stopped
def test_two_processes_with_the_signal_on_one_rank_save_the_same_step(tmp_path):
    out = tmp_path / "run"
    command = [
        *TWO_PROCESSES,
        "--main_process_port",
        str(free_port()),
        str(ROOT / "examples" / "pretrain.py"),
        "--config",
        "examples/configs/pretrain_tiny_cpu.json",
        *run_args(out, max_steps=40, save_steps=100, save_total_limit=1),
    ]
    proc = start(command, tmp_path / "run.log", env=ENV, start_new_session=True)
    try:
        rank1 = None

        def rank_one():
            nonlocal rank1
            rank1 = rank1 or rank_pid(proc.pid, 1)
            return rank1

        # rank 0 writes the log; the signal goes to rank 1 alone, which must tell rank 0 at the step boundary
        signal_when(rank_one, proc, lambda: 2 in logged_steps(out), signal.SIGUSR1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = (tmp_path / "run.log").read_text()
    checkpoint, step = stop_checkpoint(out)
    assert 2 <= step < 40, output[-3000:]
    names = {p.name for p in checkpoint.iterdir()}
    assert {"random_states_0.pkl", "random_states_1.pkl", "process_state_0.pt", "process_state_1.pt"} <= names
    assert load_trainer_state(checkpoint)["num_processes"] == 2
    # torchrun (under accelerate launch) reports any non-zero exit as a failure of the launch, with a traceback of
    # its own: every rank exited with the stop's status, and nothing before that report is a traceback
    ours, report = output.split("torch.distributed.elastic.multiprocessing.errors.ChildFailedError", 1)
    assert report.count(f"exitcode  : {STOPPED_EXIT_CODE} ") == 2, report
    assert_one_stop_line(ours.rsplit("Traceback", 1)[0], "pretrain.py", checkpoint, step, "a signal on another process")


def test_finetune_saves_the_step_and_resume_gives_the_uninterrupted_run(tmp_path):
    import finetune
    from conftest import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    steps = 8

    def command(out, *extra):
        return finetune_argv(
            encoder,
            out,
            *extra,
            per_device_eval_batch_size=32,
            max_steps=steps,
            eval_steps=steps,
            save_steps=100,
            logging_steps=1,
        )

    straight = finetune.main(command(tmp_path / "straight"))
    out = tmp_path / "run"
    proc = start([sys.executable, str(ROOT / "examples" / "finetune.py"), *command(out)], tmp_path / "run.log")
    status = signal_when(lambda: proc.pid, proc, lambda: 2 in logged_steps(out), signal.SIGTERM)
    output = (tmp_path / "run.log").read_text()
    assert status == STOPPED_EXIT_CODE, output[-3000:]
    checkpoint, step = stop_checkpoint(out)
    assert 2 <= step < steps
    assert_one_stop_line(output, "finetune.py", checkpoint, step, "SIGTERM")
    resumed = finetune.main(command(out, "--resume"))
    assert resumed["step"] == steps and resumed["test_score"] == straight["test_score"]
    assert_states_close(
        load_file(out / f"checkpoint-{steps}" / "model.safetensors"),
        load_file(tmp_path / "straight" / f"checkpoint-{steps}" / "model.safetensors"),
    )


def unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def child_of(pid: int, timeout=60.0) -> int:
    """The child of `pid` that runs pretrain.py (its argv[1]): a launcher may start other, short-lived children first,
    and a forked child shows the launcher's own command line until it execs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in Path("/proc").iterdir():
            try:
                if path.name.isdigit() and int((path / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    argv = (path / "cmdline").read_bytes().split(b"\0")
                    if len(argv) > 1 and argv[1].endswith(b"pretrain.py"):
                        return int(path.name)
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.05)
    raise LookupError(f"no child of {pid} runs pretrain.py")


@pytest.mark.skipif(not unshare_works(), reason="`unshare --pid --fork` is not permitted here (needs CAP_SYS_ADMIN)")
def test_sigterm_stops_the_run_when_it_is_pid_1_of_a_pid_namespace(tmp_path):
    """The kernel drops a signal to a namespace's PID 1 whose disposition is the default (before: it trained on)."""
    out = tmp_path / "run"
    out.mkdir()
    proc = start(
        ["unshare", "--pid", "--fork", *PRETRAIN, *argv(out, save_steps=100, max_steps=40)], tmp_path / "run.log"
    )
    trainer = child_of(proc.pid)  # PID 1 inside the namespace
    status = signal_when(lambda: trainer, proc, lambda: 2 in logged_steps(out), signal.SIGTERM)
    output = (tmp_path / "run.log").read_text()
    assert status == STOPPED_EXIT_CODE, output[-3000:]
    checkpoint, step = stop_checkpoint(out)
    assert_one_stop_line(output, "pretrain.py", checkpoint, step, "SIGTERM")


def gone(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie
    except OSError:
        return True


@pytest.mark.slow  # an accelerate launch killed and its training process awaited
def test_killing_a_single_process_accelerate_launch_stops_its_training_process(tmp_path):
    """accelerate's single-process launcher (subprocess.Popen + wait) forwards no signal: killed by SIGTERM it left
    the training process training on, orphaned; the training process now follows its launcher (PR_SET_PDEATHSIG)."""
    out = tmp_path / "run"
    out.mkdir()
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "1",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(ROOT / "examples" / "pretrain.py"),
    ]
    proc = start(
        [*launch, *argv(out, save_steps=100, max_steps=40)], tmp_path / "run.log", env={"ACCELERATE_USE_CPU": "1"}
    )
    trainer = child_of(proc.pid)
    try:
        deadline = time.monotonic() + 120
        while 2 not in logged_steps(out):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)  # the launcher alone
        assert proc.wait(timeout=30) == -signal.SIGTERM  # accelerate launch itself dies of it
        while not gone(trainer):
            assert time.monotonic() < deadline, "the orphaned training process trains on"
            time.sleep(0.05)
    finally:
        if not gone(trainer):
            os.kill(trainer, signal.SIGKILL)
    output = (tmp_path / "run.log").read_text()
    checkpoint, step = stop_checkpoint(out)
    assert step < 40
    assert_one_stop_line(output, "pretrain.py", checkpoint, step, "SIGTERM")


def test_the_stop_agreement_reads_the_flag_one_step_late_on_an_accelerator():
    """lag 1 (accelerators): the flag summed in step s is acted on after step s + 1, on every process alike."""
    request = StopSignals()
    with request:
        agreement = StopAgreement(torch.device("cpu"), request, lag=1)
        assert agreement.local().item() == 0.0
        os.kill(os.getpid(), signal.SIGUSR1)  # a real signal: the handler sets the request, nothing else happens
        assert request.requested and request.signal == signal.SIGUSR1
        assert agreement.local().item() == 1.0
    assert signal.getsignal(signal.SIGUSR1) is not request._handle  # restored
    decisions = [agreement.agreed(torch.tensor(v)) for v in (0.0, 0.0, 2.0, 0.0)]
    assert decisions == [False, False, False, True]
    at_once = StopAgreement(torch.device("cpu"), request)  # lag 0 on the CPU
    assert at_once.lag == 0 and [at_once.agreed(torch.tensor(v)) for v in (0.0, 1.0)] == [False, True]


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.slow  # the batch script's launch, stopped and requeued
def test_the_slurm_script_stops_the_run_on_usr1_requeues_it_and_the_requeued_run_resumes(
    tmp_path, reference, processes
):
    """examples/slurm/pretrain.sbatch without SLURM: SIGUSR1 to the batch shell alone (what `--signal=B:USR1@T`
    does), the launcher given as LAUNCH (python; torchrun with two gloo processes) and `scontrol requeue` as REQUEUE.
    The run saves its step, the script requeues it, and the script run again (the requeued job) resumes and ends."""
    out, requeued = tmp_path / "run", tmp_path / "requeued"
    out.mkdir()
    launch = (
        [sys.executable]
        if processes == 1
        else [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    )
    env = {"LAUNCH": " ".join(launch), "REQUEUE": f"touch {requeued}", "ACCELERATE_USE_CPU": "1"}
    script = ["bash", str(ROOT / "examples" / "slurm" / "pretrain.sbatch"), *argv(out, save_steps=100)]
    proc = start(script, tmp_path / "first.log", env=env)
    status = signal_when(lambda: proc.pid, proc, lambda: 2 in logged_steps(out), signal.SIGUSR1, repeat=False)
    output = (tmp_path / "first.log").read_text()
    assert status == 0 and requeued.exists(), output[-3000:]
    checkpoint, step = stop_checkpoint(out)
    assert 2 <= step < MAX_STEPS
    assert "training stopped with a checkpoint" in output and f"saved {checkpoint}" in output

    requeued.unlink()
    proc = start(script, tmp_path / "second.log", env=env)
    proc.wait(timeout=300)
    assert proc.returncode == 0 and not requeued.exists(), (tmp_path / "second.log").read_text()[-3000:]
    results = json.loads((out / "all_results.json").read_text())
    assert results["start_step"] == step and results["step"] == MAX_STEPS and results["num_processes"] == processes
    if processes == 1:
        assert_same_state(reference, out)
