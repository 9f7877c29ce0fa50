"""examples/pretrain.py past one process, with real processes on this machine (gloo over the loopback address):
two "machines" train as one two-process launch does, a compiled step under DDP gives the eager DDP numbers, and a run
resumes on another number of processes with the same global batches.

The reference is one `--num_processes 2` launch of the tiny preset for 3 steps (module fixture); each test compares
its own run with it: per-step losses from log_history.jsonl, the weights of checkpoints and exports.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from conftest import free_port

import pretrain
from aasp_hf.utils.errors import UsageError
from aasp_hf.training.resume import check_process_count

ROOT = Path(__file__).resolve().parents[1]
PRESET = "examples/configs/pretrain_tiny_cpu.json"
MULTI_NODE = ROOT / "examples" / "accelerate_configs" / "multi_node.yaml"
ENV = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]
TWO_PROCESSES = [
    *LAUNCH,
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
]
MAX_STEPS = 3


def run_args(output_dir, batch=4, **overrides):
    """The tiny preset, shortened: 3 steps (a checkpoint after each), 32 synthetic clips, no monitors."""
    args = {
        "max_steps": MAX_STEPS,
        "warmup_steps": 1,
        "save_steps": 1,
        "save_total_limit": MAX_STEPS,
        "logging_steps": 1,
        "monitor_steps": 0,
        "synthetic_clips": 32,
        "per_device_train_batch_size": batch,
        "report_to": "none",
        "output_dir": str(output_dir),
        **overrides,
    }
    return [item for key, value in args.items() for item in (f"--{key}", str(value))]


def launch(commands, timeout=150, env=None):
    """Starts the commands at once (each in its own process group, output to a file) and waits for all of them. A
    command that fails, or a run past `timeout` seconds, kills every group still running and fails the test with
    the tail of each output. Returns each command's output."""
    logs = [
        open(f"{os.environ.get('TMPDIR', '/tmp')}/aasp_launch_{os.getpid()}_{i}.log", "w+")
        for i in range(len(commands))
    ]
    procs = [
        subprocess.Popen(
            c, env={**ENV, **(env or {})}, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        for c, log in zip(commands, logs)
    ]
    deadline, failed = time.monotonic() + timeout, None
    try:
        while any(p.poll() is None for p in procs) and failed is None:
            failed = next((p for p in procs if p.poll() not in (None, 0)), None)
            if time.monotonic() > deadline:
                failed = "timeout"
            time.sleep(0.5)
        failed = failed or next((p for p in procs if p.returncode != 0), None)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    if failed is not None:
        tails = []
        for log in logs:
            log.seek(0)
            tails.append(log.read()[-2500:])
        pytest.fail(
            f"launch failed ({'timeout' if failed == 'timeout' else 'exit ' + str(failed.returncode)}):\n"
            + "\n-----\n".join(tails)
        )
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
        os.unlink(log.name)
    return outputs


def losses(output_dir):
    """{step: (loss, masked prediction, clip, contrastive)} from log_history.jsonl."""
    lines = [json.loads(line) for line in (Path(output_dir) / "log_history.jsonl").read_text().splitlines()]
    names = ("loss", "masked_prediction_loss", "clip_loss", "contrastive_loss")
    return {r["step"]: torch.tensor([r[f"train/{n}"] for n in names], dtype=torch.float64) for r in lines}


def weights(path):
    return load_file(str(path))


def assert_losses_close(run, reference, steps, rtol=1e-5, atol=1e-6):
    got, want = losses(run), losses(reference)
    assert sorted(got) == sorted(steps), sorted(got)
    for step in steps:
        torch.testing.assert_close(got[step], want[step], rtol=rtol, atol=atol, msg=f"step {step}")


# AdamW moves a weight by about lr per step whatever the size of its gradient, so a gradient element at the level of
# rounding noise (the attention key biases' true gradient is exactly zero) can move differently by a fraction of lr
# when the reduction order changes: the weights are compared within a tenth of the preset's peak lr (measured: 0.2 %
# of it for another number of processes, 2.3 % compiled; another batch moves most weights by about lr).
PEAK_LR = json.loads((ROOT / PRESET).read_text())["learning_rate"]


def assert_weights_close(path, reference, rtol=1e-5, atol=0.1 * PEAK_LR):
    got, want = weights(path), weights(reference)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=rtol, atol=atol, msg=name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One `--num_processes 2` launch, 4 clips per process, 3 uninterrupted steps."""
    output_dir = tmp_path_factory.mktemp("two_processes")
    launch(
        [
            [
                *TWO_PROCESSES,
                "--main_process_port",
                str(free_port()),
                "examples/pretrain.py",
                "--config",
                PRESET,
                *run_args(output_dir),
            ]
        ]
    )
    return output_dir


def documented_multi_node_command() -> str:
    """The loopback command of multi_node.yaml's comment (its indented lines from `ACCELERATE_USE_CPU=1` on)."""
    lines = MULTI_NODE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#   ACCELERATE_USE_CPU=1 "))
    command = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        command.append(line.removeprefix("#").strip().removesuffix("\\"))
    return " ".join(command)


def multi_node_commands(output_dir, **overrides):
    """The documented command for machine ranks 0 and 1 on one free port, `...` replaced by the run's arguments."""
    text = documented_multi_node_command().replace("$PORT", str(free_port()))
    assert text.endswith(" ...") and text.startswith("ACCELERATE_USE_CPU=1 accelerate launch "), text
    text = text.removeprefix("ACCELERATE_USE_CPU=1 accelerate launch ").removesuffix(" ...")
    return [
        [*LAUNCH, *shlex.split(text.replace("$RANK", str(rank))), *run_args(output_dir, **overrides)] for rank in (0, 1)
    ]


@pytest.mark.slow  # two launchers of two processes, run twice
def test_two_machines_on_loopback_train_as_one_two_process_launch_and_resume(reference, tmp_path):
    """Two `accelerate launch --num_machines 2 --machine_rank 0|1` commands (one process each) stop after 2 steps and
    resume to 3: the same losses, checkpoints and exported encoder as one uninterrupted `--num_processes 2` launch,
    and the same files, so only the global main process wrote the shared ones."""
    launch(multi_node_commands(tmp_path, stop_after_steps=2))
    assert json.loads((tmp_path / "all_results.json").read_text())["step"] == 2
    launch(multi_node_commands(tmp_path, resume="true"))
    assert_losses_close(tmp_path, reference, [1, 2, 3], rtol=0, atol=0)  # the same arithmetic: bit for bit
    for checkpoint in ("checkpoint-1", "checkpoint-2", "checkpoint-3"):
        assert_weights_close(
            tmp_path / checkpoint / "model.safetensors", reference / checkpoint / "model.safetensors", rtol=0, atol=0
        )
    assert_weights_close(
        tmp_path / "encoder" / "model.safetensors", reference / "encoder" / "model.safetensors", rtol=0, atol=0
    )
    results = json.loads((tmp_path / "all_results.json").read_text())
    assert results["step"] == 3 and results["start_step"] == 2 and results["num_processes"] == 2

    def files(folder):
        return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())

    assert files(tmp_path) == files(reference)
    # one line per step: a log written by both machines would hold each step twice
    assert [json.loads(line)["step"] for line in (tmp_path / "log_history.jsonl").read_text().splitlines()] == [1, 2, 3]


@pytest.mark.slow  # two processes, each compiling the DDP step
def test_compiled_ddp_step_equals_eager_ddp(tmp_path):
    """--torch_compile under two processes: the eager DDP losses and weights after 2 steps, within the single-process
    compile test's tolerances (tests/test_compile.py: loss rtol 1e-5, atol 1e-6; the weights take the gradients' rtol
    1e-4, and AdamW's `assert_weights_close` allowance); no graph break. The tiny preset at width 128 (2.1 MiB of
    trainable weights) in 1-MiB buckets, so that dynamo's DDP optimiser splits the step's graph at the buckets'
    boundaries; its own log line gives the number of buckets, so of subgraphs."""
    wider = {
        "model_config": json.dumps({"hidden_size": 128, "intermediate_size": 512}),
        "ddp_bucket_cap_mb": 1,
        "stop_after_steps": 2,
    }
    eager, compiled = tmp_path / "eager", tmp_path / "compiled"
    launch(
        [
            [
                *TWO_PROCESSES,
                "--main_process_port",
                str(free_port()),
                "examples/pretrain.py",
                "--config",
                PRESET,
                *run_args(eager, **wider),
            ]
        ]
    )
    [output] = launch(
        [
            [
                *TWO_PROCESSES,
                "--main_process_port",
                str(free_port()),
                "examples/pretrain.py",
                "--config",
                PRESET,
                *run_args(compiled, torch_compile="true", **wider),
            ]
        ],
        timeout=300,
        env={"TORCH_LOGS": "+torch._dynamo.backends.distributed"},
    )
    buckets = [int(n) for n in re.findall(r"DDPOptimizer used bucket cap \d+ and created (\d+) buckets", output)]
    assert len(buckets) == 2 and min(buckets) > 1, buckets  # each process's forward graph, split
    assert_losses_close(compiled, eager, [1, 2])
    assert_weights_close(
        compiled / "checkpoint-2" / "model.safetensors", eager / "checkpoint-2" / "model.safetensors", rtol=1e-4
    )
    results = json.loads((compiled / "all_results.json").read_text())
    assert results["graph_breaks"] == 0 and results["compiled_graphs"] >= 1
    print(
        f"compiled DDP: {results['compiled_graphs']} dynamo graph(s), the forward split into {buckets[0]} by DDP's "
        f"buckets, {results['compiled_subgraphs']} AOTAutograd compilations"
    )


def test_resume_on_another_number_of_processes_sees_the_same_global_batches(reference, tmp_path):
    """1 process × 8 clips for step 1, then 2 × 4 for step 2, then 1 × 8 for step 3 (two resumes): the losses and
    weights of the uninterrupted two-process run, within reduction-order tolerance (the contrastive loss gathered
    over processes or not, DDP's gradient mean or one batch)."""
    pretrain.main(["--config", PRESET, *run_args(tmp_path, batch=8, stop_after_steps=1)])
    launch(
        [
            [
                *TWO_PROCESSES,
                "--main_process_port",
                str(free_port()),
                "examples/pretrain.py",
                "--config",
                PRESET,
                *run_args(tmp_path, resume="true", stop_after_steps=2),
            ]
        ]
    )
    with pytest.raises(UsageError, match=re.escape("pass --per_device_train_batch_size 8 to keep its micro-batch")):
        pretrain.main(["--config", PRESET, *run_args(tmp_path, resume="true")])  # 1 process × 4 clips
    results = pretrain.main(["--config", PRESET, *run_args(tmp_path, batch=8, resume="true")])
    assert results["start_step"] == 2 and results["step"] == 3 and results["num_processes"] == 1
    assert_losses_close(tmp_path, reference, [1, 2, 3])
    for checkpoint in ("checkpoint-1", "checkpoint-2", "checkpoint-3"):
        assert_weights_close(tmp_path / checkpoint / "model.safetensors", reference / checkpoint / "model.safetensors")
    # the one process drew each clip's crop and masks as the two did: the data each step hashes the same rows
    trainer_state = json.loads((tmp_path / "checkpoint-3" / "trainer_state.json").read_text())
    assert trainer_state["num_processes"] == 1 and trainer_state["run_arguments"]["per_device_train_batch_size"] == 8


def test_what_cannot_carry_over_to_another_number_of_processes_is_refused_in_one_line():
    """A stream's per-process position, a micro-batch that does not split evenly, and dropout's per-process random
    states: one line each, saying what to pass instead."""
    config = pretrain.AaspConfig()
    stored = {"per_device_train_batch_size": 4, "streaming": False}

    def check(world, batch=4, allowed=(), streaming=False, config=config):
        current = {"per_device_train_batch_size": batch, "streaming": streaming}
        return check_process_count("ckpt", 2, world, stored, current, allowed, config)

    def refusal(**kwargs):
        with pytest.raises(UsageError) as error:
            check(**kwargs)
        assert "\n" not in str(error.value)
        return str(error.value)

    assert check(1, batch=8)["per_device_train_batch_size"] == 4  # the same micro-batch: no change of the run
    assert check(2) == {"per_device_train_batch_size": 4, "streaming": False}
    assert "resume it on 2 process(es)" in refusal(world=1, batch=8, streaming=True)
    assert "pass --per_device_train_batch_size 8 to keep its micro-batch of 8 clips" in refusal(world=1)
    assert "resume on a number of processes that divides 8" in refusal(world=3, batch=3)
    assert check(3, batch=3, allowed=["per_device_train_batch_size"])["per_device_train_batch_size"] == 3
    dropout = pretrain.AaspConfig(hidden_dropout_prob=0.1)
    assert re.search(
        r"hidden_dropout_prob 0\.1 .*--resume_allow_changes num_processes", refusal(world=1, batch=8, config=dropout)
    )
    assert check(1, batch=8, allowed=["num_processes"], config=dropout)["per_device_train_batch_size"] == 4


def test_a_global_micro_batch_is_the_same_clips_with_the_same_draws_on_one_process_or_two():
    """The data order's unit: global micro-batch g holds the same rows at the same positions for 2 processes × 4
    clips as for 1 × 8, and `collate_seeded` (each clip's crop and masks from its `clip_seed`) gives the one process's
    batch as the two processes' batches stacked; a per-process generator would not."""
    from aasp_hf import AaspFeatureExtractor
    from aasp_hf.data.collators import PretrainingCollator
    from aasp_hf.training.data_order import clip_seed, micro_batches

    rows = [
        {"index": i, "waveform": torch.randn(16_000, generator=torch.Generator().manual_seed(i))} for i in range(20)
    ]
    one = micro_batches(rows, 8, 1, 0, seed=3, start=1, with_positions=True)
    two = [micro_batches(rows, 4, 2, r, seed=3, start=1, with_positions=True) for r in (0, 1)]
    config = pretrain.AaspConfig(**json.loads((ROOT / PRESET).read_text())["model_config"])
    collator = PretrainingCollator(AaspFeatureExtractor(feature_size=config.num_mel_bins), config, crop_seconds=0.64)
    for _ in range(3):  # across an epoch boundary (2 global micro-batches of 8 per epoch of 20)
        epoch, examples, positions = next(one)
        halves = [next(process) for process in two]
        assert [e["index"] for e in examples] == [e["index"] for h in halves for e in h[1]]
        assert positions == halves[0][2] + halves[1][2] and {h[0] for h in halves} == {epoch}
        whole = collator.collate_seeded(examples, [clip_seed(3, epoch, p) for p in positions])
        parts = [collator.collate_seeded(h[1], [clip_seed(3, epoch, p) for p in h[2]]) for h in halves]
        for key, value in whole.items():
            torch.testing.assert_close(value, torch.cat([part[key] for part in parts]), rtol=0, atol=0, msg=key)
    per_process = [collator(h[1]) for h in halves]  # one generator per process: other masks for the same clips
    assert not torch.equal(torch.cat([p["visible_indices"] for p in per_process]), whole["visible_indices"])
