"""One run per folder, full and read-only disks, vanishing data: examples/pretrain.py as a real process.

- a run into a folder that a live run holds is refused in one line naming it (host, pid, since when); the hold of a
  run that was killed is taken over with a line; a hold from another host is taken over once its heartbeat is stale;
  the hold is given back when a run ends with an error;
- a read-only --output_dir is refused in one line before the model is built;
- a full disk (a 6-MB tmpfs mounted here) while a checkpoint is written, then (remounted with room for one more
  checkpoint only) while the encoder is exported, is one line each that names the space and the intact checkpoint
  and leaves nothing partial; after freeing space --resume ends where the uninterrupted run ends;
- a third of an audio folder truncated: the run saves a checkpoint and stops in one line.
Mounting needs root (tests skip with the reason otherwise)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import SAME_THREADS, assert_states_close, finetune_argv, tiny_preset_argv
from safetensors.torch import load_file
from test_reliability_training import logged_steps

import pretrain
from aasp_hf.utils.errors import UsageError
from aasp_hf.training import run_lock
from aasp_hf.training.checkpointing import checkpoint_problem

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, **SAME_THREADS, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def argv(output_dir, *extra, max_steps=12, save_steps=4):
    """The tiny preset's command (conftest.py) on 16 clips: 12 steps, a checkpoint every 4 (the newest 2 kept), a log
    line every 4."""
    return tiny_preset_argv(
        output_dir,
        *extra,
        synthetic_clips=16,
        max_steps=max_steps,
        save_steps=save_steps,
        logging_steps=4,
        save_total_limit=2,
    )


def start(output_dir, *extra, **options):
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "pretrain.py"), *argv(output_dir, *extra, **options)],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def error_lines(stderr: str) -> list[str]:
    """The script's error lines (tqdm's bar may share the terminal line, so split on carriage returns too)."""
    lines = stderr.replace("\r", "\n").splitlines()
    assert not any(line.startswith("Traceback") for line in lines), stderr[-3000:]
    return [line for line in lines if "error:" in line]


def wait_for(condition, timeout=120.0, poll=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll)
    return False


def mount_tmpfs(folder: Path, options: str) -> Path:
    """A tmpfs mounted with `options` at `folder` (made here); the test is skipped where mounting is not allowed."""
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) here ({mounted.stderr.strip() or 'mount failed'}): needs root")
    return folder


@pytest.fixture
def tmpfs(tmp_path):
    """A 6-MB tmpfs at tmp_path/disk (unmounted at the end); `resize(mb)` remounts it larger."""
    disk = mount_tmpfs(tmp_path / "disk", "size=6m")

    def resize(size):
        subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)

    yield disk, resize
    subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run (12 steps): its last checkpoint's weights."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert pretrain.main(argv(out))["step"] == 12
    return load_file(out / "checkpoint-12" / "model.safetensors")


# ----------------------------------------------------------------------------------------------- one run per folder
def test_a_held_folder_is_refused_in_one_line_and_a_dead_holders_hold_is_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    first = start(out, max_steps=100_000, save_steps=100_000)
    try:
        assert wait_for(lambda: (out / run_lock.HOLD).is_file() or first.poll() is not None), "no hold taken"
        holder = json.loads((out / run_lock.HOLD).read_text())
        assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()
        for extra in ((), ("--resume",)):  # a fresh run and a resume alike
            with pytest.raises(UsageError) as refused:
                pretrain.main(argv(out, *extra))
            message = str(refused.value)
            assert "\n" not in message
            assert message.startswith(
                f"{out} is in use by another run: process {first.pid} on "
                f"{socket.gethostname()} (since {holder['started']}), holding {out / 'run.lock'}"
            )
            assert "model:" not in capsys.readouterr().out  # refused before the model was built
        assert first.poll() is None  # the first run was not disturbed
    finally:
        first.kill()
        first.communicate()
    results = pretrain.main(argv(out, "--overwrite_output_dir", max_steps=2))
    out_lines = capsys.readouterr().out.splitlines()
    assert (
        f"taking over {out} from process {first.pid} on {socket.gethostname()} (since "
        f"{holder['started']}): its process is gone"
    ) in out_lines
    assert results["step"] == 2 and not (out / run_lock.HOLD).exists()  # given back at the end


def hold_file(folder, host, age_seconds):
    record = {"host": host, "pid": 1, "started": "2026-01-01T00:00:00+00:00", "token": "elsewhere"}
    path = folder / run_lock.HOLD
    path.write_text(json.dumps(record))
    os.utime(path, (time.time() - age_seconds,) * 2)


def test_a_hold_from_another_host_is_kept_while_it_beats_and_taken_over_when_stale(tmp_path):
    hold_file(tmp_path, "node-b", age_seconds=60)
    with pytest.raises(
        UsageError,
        match=r"in use by another run: process 1 on node-b \(since 2026-01-01T00:00:00"
        r"\+00:00\).*heartbeat 60 s ago",
    ):
        run_lock.RunHold(tmp_path).acquire()
    hold_file(tmp_path, "node-b", age_seconds=run_lock.STALE_SECONDS + 60)
    said = []
    hold = run_lock.RunHold(tmp_path).acquire(said.append)
    assert said == [
        f"taking over {tmp_path} from process 1 on node-b (since 2026-01-01T00:00:00+00:00): its "
        f"heartbeat stopped {run_lock.STALE_SECONDS + 60:.0f} s ago (stale after "
        f"{run_lock.STALE_SECONDS:.0f} s)"
    ]
    assert json.loads((tmp_path / run_lock.HOLD).read_text())["pid"] == os.getpid()
    hold.release()
    assert not (tmp_path / run_lock.HOLD).exists()


def test_a_hold_of_this_host_without_a_process_id_is_taken_over_once_its_heartbeat_is_stale(tmp_path):
    """A record from this host whose pid is null cannot be checked against /proc: its age decides, as for another
    host's (it used to be refused for ever, although the message said a dead holder here is taken over at once)."""
    record = {"host": socket.gethostname(), "pid": None, "started": "2026-01-01T00:00:00+00:00", "token": "x"}
    path = tmp_path / run_lock.HOLD
    path.write_text(json.dumps(record))
    os.utime(path, (time.time() - 60,) * 2)
    with pytest.raises(
        UsageError,
        match=rf"in use by another run: process None on {socket.gethostname()} .*"
        rf"heartbeat 60 s ago\).*or delete {path}\.$",
    ):
        run_lock.RunHold(tmp_path).acquire()
    os.utime(path, (time.time() - 4000,) * 2)
    said = []
    run_lock.RunHold(tmp_path).acquire(said.append).release()
    assert said == [
        f"taking over {tmp_path} from process None on {socket.gethostname()} (since "
        "2026-01-01T00:00:00+00:00): its heartbeat stopped 4000 s ago (stale after 300 s)"
    ]


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]"])
def test_a_hold_file_that_is_not_a_record_says_when_it_is_taken_over_and_how_to_clear_it(tmp_path, content):
    path = tmp_path / run_lock.HOLD
    path.write_text(content)
    os.utime(path, (time.time() - 100,) * 2)
    with pytest.raises(UsageError) as refused:
        run_lock.RunHold(tmp_path).acquire()
    assert str(refused.value) == (
        f"{tmp_path} is in use: {path} exists but is not a hold record (a run may be "
        "starting there, or the file was damaged); it is taken over once 300 s old (in "
        f"200 s). Wait, choose another --output_dir, or, if no run uses the folder, delete "
        f"{path}."
    )
    os.utime(path, (time.time() - 400,) * 2)
    said = []
    run_lock.RunHold(tmp_path).acquire(said.append).release()
    assert len(said) == 1 and said[0].startswith(
        f"taking over {tmp_path} from a run whose hold file cannot be read: its heartbeat stopped 400 s ago"
    )


def test_a_run_killed_before_its_first_checkpoint_leaves_no_steps_in_the_log_of_the_run_that_resumes(tmp_path):
    """--resume with no checkpoint starts from scratch; the killed run's logged steps belong to no weights, so the
    log holds the new run's steps only (it used to keep both: 34 lines for 24 steps)."""
    out = tmp_path / "run"
    proc = start(out, max_steps=12, save_steps=100)
    try:
        assert wait_for(lambda: 4 in logged_steps(out) or proc.poll() is not None), "no step logged"
    finally:
        proc.kill()
        proc.communicate()
    assert 4 in logged_steps(out) and not list(out.glob("checkpoint-*"))
    assert pretrain.main(argv(out, "--resume", max_steps=12, save_steps=100))["step"] == 12
    assert logged_steps(out) == [4, 8, 12]


def test_the_hold_is_given_back_when_a_run_ends_with_an_error(tmp_path):
    (tmp_path / "checkpoint-1").mkdir()  # a folder that holds a run: refused without --resume
    with pytest.raises(UsageError, match="already holds a run"):
        pretrain.main(argv(tmp_path))
    assert not (tmp_path / run_lock.HOLD).exists()


def test_a_read_only_output_dir_is_refused_before_the_model_is_built(tmp_path, capsys):
    disk = mount_tmpfs(tmp_path / "ro", "ro,size=1m")
    try:
        with pytest.raises(UsageError) as refused:
            pretrain.main(argv(disk / "run"))
        assert str(refused.value) == (
            f"--output_dir {disk / 'run'} cannot be written (Read-only file system: "
            f"{disk / 'run'}); choose an --output_dir on a writable disk. Nothing was "
            "started."
        )
        assert "model:" not in capsys.readouterr().out
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# ----------------------------------------------------------------------------------------------- a full disk
def allocated(folder) -> int:
    """The bytes `folder`'s files take on a tmpfs (whole 4-KiB pages)."""
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in Path(folder).rglob("*") if p.is_file())


@pytest.mark.slow  # pretrain.py processes on a full tmpfs, then resumed
def test_a_full_disk_is_one_line_at_a_checkpoint_and_at_the_export_and_resume_is_exact(tmpfs, reference):
    disk, resize = tmpfs
    out = disk / "run"
    # 1. Checkpoints of ~2.3 MB, all kept: two fit in 6 MB, the third one's save does not.
    run = start(out, "--save_total_limit", "0")
    _, stderr = run.communicate(timeout=600)
    assert run.returncode == 2
    (line,) = error_lines(stderr)
    assert line.startswith(
        f"pretrain.py: error: cannot write checkpoint-12 to {out / 'checkpoint-12.tmp'}: No space "
        "left on device; it needs about "
    )
    assert f"the last complete checkpoint, {out / 'checkpoint-8'}, is intact" in line
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint-4", "checkpoint-8"]
    assert checkpoint_problem(out / "checkpoint-8") is None and not (out / run_lock.HOLD).exists()

    # 2. Room for one more checkpoint and 256 KiB: the resumed run writes checkpoint-12, and its export (the encoder's
    #    weights alone are 0.4 MB) meets the full disk.
    resize(f"{(shutil.disk_usage(disk).used + allocated(out / 'checkpoint-8')) // 1024 + 256}k")
    run = start(out, "--save_total_limit", "0", "--resume")
    _, stderr = run.communicate(timeout=600)
    assert run.returncode == 2
    (line,) = error_lines(stderr)
    assert line.startswith(
        f"pretrain.py: error: cannot write the encoder and results to {out}: No space left on device; it needs about "
    )
    assert f"{out / 'checkpoint-12'} is intact and --resume exports from it" in line
    assert checkpoint_problem(out / "checkpoint-12") is None
    left = {p.name for p in out.iterdir()}
    assert not left & {"encoder", "encoder.tmp", "all_results.json", "all_results.json.tmp"}, left

    # 3. Space freed: --resume exports, and the state is the uninterrupted run's.
    resize("32m")
    results = pretrain.main(argv(out, "--save_total_limit", "0", "--resume"))
    assert results["step"] == 12 and (out / "encoder" / "model.safetensors").is_file()
    assert_states_close(load_file(out / "checkpoint-12" / "model.safetensors"), reference)


# ----------------------------------------------------------------------------------------------- vanishing data
def test_a_third_of_the_audio_failing_to_decode_saves_a_checkpoint_and_stops(tmp_path):
    audio = tmp_path / "audio"
    audio.mkdir()
    rng = np.random.default_rng(0)
    for i in range(30):
        sf.write(
            audio / f"clip{i:02d}.wav", (0.1 * rng.standard_normal(16000)).astype(np.float32), 16000, subtype="PCM_16"
        )
    for i in range(0, 30, 3):  # a third cut short, as a copy or a sync that is still running leaves them
        path = audio / f"clip{i:02d}.wav"
        path.write_bytes(path.read_bytes()[:20])  # the header cut
    command = tiny_preset_argv(
        tmp_path / "run",
        synthetic_clips=None,
        train_dir=audio,
        per_device_train_batch_size=10,
        max_steps=40,
        save_steps=100,
    )
    with pytest.raises(UsageError) as stopped:
        pretrain.main(command)
    message = str(stopped.value)
    # the first window of at least 100 clips closes at step 10 (10 clips a step, judged every step)
    assert message.startswith("stopping at step 10: ") and "\n" not in message
    assert "of the last 100 clips read" in message and "more than --max_failed_clip_share 0.1" in message
    assert checkpoint_problem(tmp_path / "run" / "checkpoint-10") is None
    assert not (tmp_path / "run" / "encoder").exists()


@pytest.mark.slow  # a pretrain.py process on a folder cut mid-run
def test_an_audio_folder_cut_mid_run_so_that_whole_micro_batches_fail_stops_with_a_checkpoint(tmp_path):
    """Every file cut once the run is under way: every micro-batch from then on fails whole. Such a micro-batch takes
    copies of an earlier one's clips, its failures counted, so the run stops where --max_failed_clip_share is judged,
    with a checkpoint and one line (it used to end in a RuntimeError traceback, "none of the 4 clips of a
    micro-batch could be decoded", with no checkpoint)."""
    audio = tmp_path / "audio"
    audio.mkdir()
    rng = np.random.default_rng(0)
    for i in range(40):
        sf.write(
            audio / f"clip{i:02d}.wav", (0.1 * rng.standard_normal(16000)).astype(np.float32), 16000, subtype="PCM_16"
        )
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "examples" / "pretrain.py"),
            *tiny_preset_argv(out, synthetic_clips=None, train_dir=audio, max_steps=400, save_steps=1000),
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_for(lambda: 2 in logged_steps(out) or proc.poll() is not None), "no step logged"
        for path in audio.iterdir():  # the header cut, as a copy or a sync that is still running leaves them
            path.write_bytes(path.read_bytes()[:20])
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 2, stderr[-3000:]
    (line,) = error_lines(stderr)
    step = int(line.split("stopping at step ")[1].split(":")[0])
    assert "failed to decode, more than --max_failed_clip_share 0.1" in line and step < 400
    assert checkpoint_problem(out / f"checkpoint-{step}") is None and not (out / "encoder").exists()


# ----------------------------------------------------------------------------------------------- fine-tuning's disk
def finetune_command(encoder, output_dir, *extra):
    """examples/finetune.py as a process: the short fine-tuning command (conftest.py) for 4 steps, evaluated at the
    end, a log line every 2, no checkpoint before the end."""
    command = finetune_argv(encoder, output_dir, *extra, max_steps=4, eval_steps=4, save_steps=100, logging_steps=2)
    return [sys.executable, str(ROOT / "examples" / "finetune.py"), *command]


@pytest.mark.slow  # finetune.py processes on a full tmpfs
def test_finetune_on_a_full_disk_writes_its_model_whole_or_not_at_all(tmp_path, tmpfs):
    """The final export copies best_model/ to the top of --output_dir: on a full disk it used to leave 5 of the 7
    model files there (no modeling code, so loading raised OSError); now it is written whole or not at all. A full
    disk at the best model's save, before any checkpoint, says that --resume starts over (it said "the last complete
    checkpoint is None")."""
    from conftest import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    # the same run on an ample disk: what it writes, and which of its files the export adds at the top
    ample = tmp_path / "ample"
    subprocess.run(finetune_command(encoder, ample), cwd=ROOT, env=ENV, check=True, capture_output=True)
    model_files = sorted(p.name for p in (ample / "best_model").iterdir())
    assert {"model.safetensors", "config.json", "modeling_aasp.py"} <= set(model_files)
    export = sum(allocated_file(ample / name) for name in model_files)
    disk, resize = tmpfs

    # 1. room for everything but half the export
    resize(f"{(allocated(ample) - export + export // 2) // 1024}k")
    out = disk / "run"
    run = subprocess.run(finetune_command(encoder, out), cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert run.returncode == 2, run.stderr[-3000:]
    (line,) = error_lines(run.stderr)
    assert line.startswith(
        f"finetune.py: error: cannot write the best model and results to {out}: No space left on device"
    ), line
    assert not {p.name for p in out.iterdir()} & {*model_files, "export.tmp"}, sorted(p.name for p in out.iterdir())
    resize("32m")
    assert (
        subprocess.run(finetune_command(encoder, out, "--resume"), cwd=ROOT, env=ENV, capture_output=True).returncode
        == 0
    )
    assert all((out / name).read_bytes() == (out / "best_model" / name).read_bytes() for name in model_files)

    # 2. a disk that fills at the first best model, before any checkpoint
    shutil.rmtree(out)
    resize(f"{(allocated_file(ample / 'log_history.jsonl') + 3 * 4096) // 1024}k")
    run = subprocess.run(finetune_command(encoder, out), cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert run.returncode == 2, run.stderr[-3000:]
    (line,) = error_lines(run.stderr)
    assert (
        "the best model" in line
        and (
            "there is no checkpoint yet, so --resume starts the run again from step 0 "
            "(--save_steps keeps the progress of a long run)"
        )
        in line
    ), line


def allocated_file(path) -> int:
    return -(-Path(path).stat().st_size // 4096) * 4096
