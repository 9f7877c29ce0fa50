"""`--plan_measure N` (aasp_hf.plan.measure): the plan's figures beside N real optimiser steps of the same run, on the
tiny preset in one process and in two real gloo processes; the one-line refusals; and the GPU acceptance check's CPU
dry run (benchmarks/gpu_acceptance.py --dry_run)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import free_port

import pretrain
from aasp_hf import AaspConfig, AaspForPreTraining
from aasp_hf.utils.errors import UsageError
from aasp_hf.plan.report import _bytes, _duration

ROOT = Path(__file__).resolve().parents[1]
PRESET = str(ROOT / "examples" / "configs" / "pretrain_tiny_cpu.json")
ENV = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
TWO_PROCESSES = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
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
STEPS = 2
BATCH = 4


def measure_args(output_dir, *extra):
    return [
        "--config",
        PRESET,
        "--plan_measure",
        str(STEPS),
        "--plan_data_clips",
        "0",
        "--synthetic_clips",
        "32",
        "--per_device_train_batch_size",
        str(BATCH),
        "--output_dir",
        str(output_dir),
        *extra,
    ]


def plan_row(plan_text: str, label: str) -> str:
    return next(line for line in plan_text.splitlines() if line.strip().startswith(label))


def check_report(report: dict, plan_text: str, num_processes: int, memory_band=(0.85, 1.15)):
    """What every report holds: measured beside predicted, the predictions the plan's own table printed."""
    figures = report["figures"]
    step = figures["step_seconds"]
    assert report["steps"] == STEPS and len(report["samples"]["step_seconds"]) == STEPS
    assert report["num_processes"] == num_processes and report["device"].startswith("cpu")
    assert report["predicted_for"] == "H100 SXM" and report["comparable_time"] is False
    assert report["warmup_steps"] == 1 and report["first_step_seconds"] > 0
    assert 0 < step["spread"]["min"] <= step["measured"] <= step["spread"]["max"]
    assert step["measured"] == step["spread"]["median"]
    # the predictions are the plan's: its printed step time and peak memory
    assert _duration(step["predicted"]) in plan_row(plan_text, "step time (the larger of the two)")
    assert _bytes(figures["peak_memory_bytes"]["predicted"]) in plan_row(plan_text, "total (without CUDA context")
    clips = figures["clips_per_second_per_device"]
    assert clips["predicted"] == pytest.approx(BATCH / step["predicted"])
    assert clips["measured"] == pytest.approx(BATCH / step["measured"])
    # a CPU step is not an H100 step: the time figures are shown, not judged
    assert step["within_15_percent"] is None and "not comparable: measured on cpu" in step["note"]
    assert figures["mfu"] == {"measured": None, "predicted": 0.4}
    assert figures["achieved_flops_per_second"] > 0
    # memory is judged on any device: the CPU step's weights, optimiser state and allocator peak against the plan
    memory = figures["peak_memory_bytes"]
    assert memory["measured"] > report["static_bytes"] > 0
    assert memory_band[0] <= memory["ratio"] <= memory_band[1], memory
    assert memory["within_15_percent"] == (abs(memory["ratio"] - 1) <= 0.15)
    assert memory["within_15_percent"] or memory["note"].startswith(
        ("allocations the fake step does not see", "on the CPU the SBLU works block by block")
    )
    wait = figures["data_wait_seconds"]
    assert 0 < wait["measured"] < step["measured"] and wait["predicted"] == 0.0
    assert wait["fraction_of_step"] == pytest.approx(wait["measured"] / step["measured"])
    assert wait["within_limit"] == (wait["fraction_of_step"] <= 0.05)


def test_plan_measure_one_process(tmp_path, capsys):
    """`pretrain.py --plan_measure 2` (no --plan: it implies it) prints the plan, then the measured table, and writes
    plan.txt and plan_measured.json to --output_dir and nothing else: no checkpoint, log or encoder."""
    output_dir = tmp_path / "run"
    result = pretrain.main(measure_args(output_dir))
    out = capsys.readouterr().out
    assert out.index("Plan of a pre-training run") < out.index("Measured on this machine: 2 steps on 1 × cpu")
    for line in (
        "step time (median)",
        "spread: min / max / interquartile",
        "clips/s per device",
        "MFU (the plan's FLOPs per step)",
        "peak memory per device",
        "data wait per step (median)",
    ):
        assert line in out, line
    assert "gradient all-reduce (" not in out  # one process: nothing is all-reduced
    assert sorted(p.name for p in output_dir.iterdir()) == ["plan.txt", "plan_measured.json"]
    report = json.loads((output_dir / "plan_measured.json").read_text())
    assert report == json.loads(json.dumps(result["measured"]))
    plan_text = (output_dir / "plan.txt").read_text()
    assert plan_text.startswith("Plan of a pre-training run") and "Measured on this machine" in plan_text
    check_report(report, plan_text, 1)
    assert "allreduce_seconds" not in report["figures"]
    assert report["precision"] == "no" and report["torch_compile"] is False


@pytest.mark.slow  # a two-process launch
def test_plan_measure_two_processes(tmp_path):
    """Two real gloo processes (accelerate launch): both run the steps under DDP, the main one reports, with the
    gradient all-reduce measured beside the plan's ring formula for 2 processes."""
    output_dir = tmp_path / "run"
    command = [
        *TWO_PROCESSES,
        "--main_process_port",
        str(free_port()),
        str(ROOT / "examples" / "pretrain.py"),
        *measure_args(output_dir),
    ]
    done = subprocess.run(command, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.count("Measured on this machine: 2 steps on 2 × cpu") == 1  # printed by the main process
    assert sorted(p.name for p in output_dir.iterdir()) == ["plan.txt", "plan_measured.json"]
    report = json.loads((output_dir / "plan_measured.json").read_text())
    plan_text = (output_dir / "plan.txt").read_text()
    assert f"{BATCH} clips per device × 2 process(es)" in plan_text
    check_report(report, plan_text, 2)
    allreduce = report["figures"]["allreduce_seconds"]
    model = AaspForPreTraining(AaspConfig(**json.loads(Path(PRESET).read_text())["model_config"]))
    gradient_bytes = 4 * sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert allreduce["predicted"] == pytest.approx(2 * (2 - 1) / 2 * gradient_bytes / 450e9)  # NVLink 4, each way
    assert allreduce["measured"] > 0 and "not comparable" in allreduce["note"]
    assert "gradient all-reduce (2 processes)" in plan_text


def test_plan_measure_refusals(tmp_path):
    """A plan for other processes than the ones launched, or a negative count: one line each, nothing written."""
    output_dir = tmp_path / "run"
    with pytest.raises(
        SystemExit,
        match=r"--plan_measure measures the 1 process\(es\) launched, not "
        r"--plan_num_processes 4: drop --plan_num_processes or launch",
    ):
        pretrain.main(measure_args(output_dir, "--plan_num_processes", "4"))
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "pretrain.py"),
            "--config",
            PRESET,
            "--plan_measure",
            "-1",
            "--output_dir",
            str(output_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "plan_measure" in done.stderr.strip().splitlines()[-1]
    assert not output_dir.exists()


def test_plan_measure_finetune(tmp_path, capsys):
    """`finetune.py --plan_measure 2` on synthetic clips: the plan of the fine-tuning run, then 2 of its steps (the
    classifier loaded from the encoder folder, SpecAugment, layer-decay AdamW, the weight EMA); only the report is
    written, and its memory is the classifier's, weight EMA included, within ±15 % of the plan."""
    import finetune
    from conftest import finetune_argv, save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    output_dir = tmp_path / "run"
    result = finetune.main(
        finetune_argv(encoder, output_dir, max_steps=10, warmup_steps=None, ema_decay=0.999, plan_measure=STEPS)
    )
    out = capsys.readouterr().out
    assert out.index("Plan of a fine-tuning run") < out.index("Measured on this machine: 2 steps on 1 × cpu")
    assert sorted(p.name for p in output_dir.iterdir()) == ["plan.txt", "plan_measured.json"]
    report = json.loads((output_dir / "plan_measured.json").read_text())
    assert report == json.loads(json.dumps(result["measured"]))
    plan_text = (output_dir / "plan.txt").read_text()
    assert "weight EMA (float32)" in plan_text
    # measured here: 1.18x the plan for this 1-layer, 0.5-s model (0.34 MB of weights, EMA and AdamW state as
    # planned; the step's allocator peak above the fake step's live bytes); the paper-size step is what the plan is for
    check_report(report, plan_text, 1, memory_band=(0.85, 1.35))


def _acceptance():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "benchmarks" / "gpu_acceptance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # three fresh interpreters (pytest, two pretrain.py runs): about 80 s on two busy cores
def test_gpu_acceptance_dry_run(tmp_path):
    """`benchmarks/gpu_acceptance.py --dry_run`: the GPU check's four steps on the CPU with the tiny preset (CUDA-only
    tests, --plan --plan_measure with the AaPE and the SPE stem, attention implementations on a padded batch), its
    report written where it is told, benchmarks/results_cuda.md untouched, the targets computed but not judged."""
    acceptance = _acceptance()
    results = ROOT / "benchmarks" / "results_cuda.md"
    before = results.read_text() if results.is_file() else None
    report_path = tmp_path / "dry.md"
    outcome = acceptance.main(["--dry_run", "--output", str(report_path)])
    assert outcome["ok"] is True and outcome["output"] == str(report_path)
    assert (results.read_text() if results.is_file() else None) == before
    text = report_path.read_text()
    assert text.startswith("# GPU acceptance check, CPU dry run\n") and "Device: **cpu (dry run)**" in text
    targets = [row["target"] for row in outcome["rows"]]
    assert targets == [
        "CUDA-only tests: none failed, at least one ran",
        "MFU >= 40% at the paper batch",
        "AaPE step <= 1.15 × SPE step",
        "peak memory within 10% of the plan",
        "data wait <= 5% of the step",
        "sdpa (float32) from fp32 eager <= 2 × eager's own error (padded batch, real tokens)",
    ]
    assert text.count("| not judged: a CPU dry run |") == len(targets)
    # step 1: the CUDA-only tests were collected and skipped here, none failed
    tests = outcome["tests"]
    assert tests["failed"] == 0 and tests["skipped"] >= 1 and "tests/test_feature_extraction.py" in tests["command"]
    # steps 2 and 3: the exact commands, and each run's measured table
    for stem in ("aape", "spe"):
        run = outcome[stem]
        assert run["returncode"] == 0
        assert (
            "examples/pretrain.py --config examples/configs/pretrain_tiny_cpu.json --plan --plan_measure 2"
            in run["command"]
            and f"`{run['command']}`" in text
        )
        assert run["report"]["steps"] == 2 and run["report"]["precision"] == "bf16"
    assert '--model_config \'{"patch_embedding": "spe"}\'' in outcome["spe"]["command"]
    assert "AAPE stem" in outcome["aape"]["plan_text"] and "SPE stem" in outcome["spe"]["plan_text"]
    assert text.count("Measured on this machine: 2 steps on 1 × cpu") == 2
    ratio = (
        outcome["aape"]["report"]["figures"]["step_seconds"]["measured"]
        / outcome["spe"]["report"]["figures"]["step_seconds"]["measured"]
    )
    assert f"| AaPE step <= 1.15 × SPE step | {ratio:.3f}× |" in text
    memory = outcome["aape"]["report"]["figures"]["peak_memory_bytes"]["ratio"]
    assert 0.85 <= memory <= 1.15 and f"{memory:.3f}× the plan" in text
    # step 4: SDPA against eager on the real tokens of a padded batch
    attention = outcome["attention"]
    assert attention["padded_clips"] == 2 and set(attention["implementations"]) == {"eager", "sdpa"}
    assert attention["implementations"]["eager"]["max_abs_difference"] == 0.0  # float32 eager is the reference
    assert attention["implementations"]["sdpa"]["max_abs_difference"] < 1e-4 == attention["bound"]
    assert "| sdpa | " in text


def test_gpu_acceptance_refusals(tmp_path):
    """A dry run never writes the GPU's results file; without --dry_run a machine without CUDA is told what to do."""
    acceptance = _acceptance()
    with pytest.raises(UsageError, match="--dry_run writes CPU figures: not to benchmarks/results_cuda.md"):
        acceptance.main(["--dry_run", "--output", str(ROOT / "benchmarks" / "results_cuda.md")])
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="no CUDA device here: run it on a GPU machine, or pass --dry_run"):
            acceptance.main([])


def test_cuda_device_names_map_to_the_plan_accelerators():
    """MFU and step time are judged only on the plan's accelerator: the CUDA device name decides which it is."""
    from aasp_hf.plan.measure import accelerator_of

    names = {
        "NVIDIA H100 80GB HBM3": "H100 SXM",
        "NVIDIA H100 PCIe": "H100 PCIe",
        "NVIDIA H200": "H200",
        "NVIDIA A100-SXM4-80GB": "A100 80GB",
        "NVIDIA L4": "L4",
        "NVIDIA L40S": None,
        "Tesla V100-SXM2-32GB": None,
    }
    assert {name: accelerator_of(name) for name in names} == names
