"""The GPU acceptance check: what to run first on a new GPU machine, one command, nothing downloaded.

    timeout 330 python3 benchmarks/gpu_acceptance.py           # one CUDA GPU -> benchmarks/results_cuda.md
    python benchmarks/gpu_acceptance.py --dry_run              # the same sequence on the CPU, tiny preset, temp file

Expected duration on one H100 or H200: not yet measured; planned at about 4 minutes, at most 5 (docs/gpus.md gives
the estimate and the one command for the GPU machine). Each step has its own time limit (`LIMITS`, `--time_limits`):
a step that runs past it is stopped (a command with every process it started) and reported as timed out, and the
next step runs. It imports nothing that the GPU machine's image lacks (no datasets, soundfile, torchcodec, evaluate;
tests/test_gpu_image.py). The sequence, each step's exact command written to the report:
1. the CUDA-only tests: `pytest -m gpu` over the test files that hold `gpu`-marked tests;
2. `examples/pretrain.py --config examples/configs/pretrain_paper.json --plan --plan_measure N` from synthetic 10-s
   clips at the paper's per-GPU batch (128), bf16, `--torch_compile`, planned for the accelerator this GPU is
   (`aasp_hf.plan.measure.accelerator_of`), the host's data path timed on 64 clips;
3. the same with the SPE stem (`--model_config '{"patch_embedding": "spe"}'`): the AaPE step against the SPE step;
4. eager, SDPA and flash attention (where `flash_attn` is installed) in bf16 against eager attention in float32 on a
   padded batch (half of the clips padded to 60 % of their frames): the largest difference on the real tokens, and
   each forward's time.
Targets (pass/fail in the report): MFU >= 40 % at the paper batch, AaPE step <= 1.15 × SPE step, peak memory within
10 % of the plan, data wait <= 5 % of the step, every CUDA test passed, each attention implementation no further
from float32 eager than 2 × bf16 eager's own difference.

`--dry_run` runs the same four steps on the CPU with the tiny preset (examples/configs/pretrain_tiny_cpu.json), 2
timed steps, batch 4, no compilation, and writes the report to a temporary folder (never benchmarks/results_cuda.md);
its targets are computed but not judged (a CPU is not the plan's accelerator), and its time limits are the CPU's
(`DRY_RUN_LIMITS`). The test suite runs it (tests/test_plan_measure.py). Exit status: 0 when every step ran and, on a
GPU, every target passed; 1 otherwise.
"""

import argparse
import datetime
import importlib.util
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from aasp_hf import AaspConfig, AaspModel
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import UsageError, parse_command_line
from aasp_hf.plan.measure import accelerator_of

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results_cuda.md"
TARGETS = {"mfu": 0.40, "aape_over_spe": 1.15, "memory_within": 0.10, "data_wait": 0.05}
ATTENTION_SLACK, ATTENTION_FLOOR = 2.0, 1e-4  # an attention kernel may be at most 2x eager's own rounding error
GPU_RUN = {
    "config": "examples/configs/pretrain_paper.json",
    "synthetic_clips": 256,
    "synthetic_seconds": 10,
    "steps": 20,
    "extra": ["--torch_compile", "--mixed_precision", "bf16", "--plan_data_clips", "64"],
}
DRY_RUN = {
    "config": "examples/configs/pretrain_tiny_cpu.json",
    "synthetic_clips": 32,
    "synthetic_seconds": 1,
    "steps": 2,
    "extra": ["--per_device_train_batch_size", "4", "--plan_data_clips", "0", "--mixed_precision", "bf16"],
}
# Seconds each step may run on the GPU. The estimate behind them (docs/gpus.md; nothing here was measured on a GPU): a
# fresh interpreter imports torch, transformers and accelerate in about 10 s; the CUDA-only tests are two small
# feature-extraction comparisons; each --plan_measure run is the plan (fake-tensor FLOP count, the host's data path on
# 64 clips: under 30 s), the compilation of the paper model's training step (fullgraph, forward and backward of the
# student, teacher and predictor: the bulk, about a minute, less for the second stem, whose kernels the first one's
# Triton cache partly holds), then 2 + 20 + 2 steps of about 0.07 s (the plan's step at 40 % MFU) to 0.35 s (the
# paper's own rate); the attention check is 19 forwards of ViT-B on 32 clips. Together about 4 minutes, at most 5.
LIMITS = {"tests": 45, "aape": 120, "spe": 100, "attention": 30}
DRY_RUN_LIMITS = {"tests": 300, "aape": 600, "spe": 600, "attention": 300}  # a shared 2-core CPU, no compilation


def gpu_test_files() -> list[str]:
    """The test files that hold CUDA-only (`gpu`-marked) tests."""
    return sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py") if "pytest.mark.gpu" in p.read_text()
    )


RUNNING = []  # the command running now (`stop` ends it with this process)


def run_command(command: list[str], timeout: float) -> dict:
    """Runs `command` in the repository root, at most `timeout` seconds; {"command", "returncode", "seconds",
    "output"}. Past the limit the command and every process it started (its process group: torch.compile's workers,
    DataLoader workers) are killed, and the returncode is "timeout"."""
    started = time.perf_counter()
    # a process group of its own, in this session (where a machine's cleanup of the session still finds it)
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **group)
    RUNNING.append(process)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        returncode, output = process.returncode, stdout + stderr
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        returncode, output = "timeout", f"{stdout}{stderr}\ntimed out after {timeout:g} s (its time limit)"
    finally:
        RUNNING.remove(process)
    return {
        "command": shlex.join(command),
        "returncode": returncode,
        "seconds": time.perf_counter() - started,
        "output": output,
    }


def within(seconds: float, function, *args):
    """`function(*args)` in this process, stopped with TimeoutError after `seconds` (SIGALRM: the main thread)."""

    def expire(signum, frame):
        raise TimeoutError(f"timed out after {seconds:g} s (its time limit)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return function(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cuda_tests(timeout: float) -> dict:
    """Step 1: `pytest -m gpu` over the files with gpu-marked tests; the counts from pytest's last line."""
    result = run_command(
        [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *gpu_test_files()], timeout
    )
    last = result["output"].strip().splitlines()[-1] if result["output"].strip() else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", last)}
    return {
        **result,
        "summary": last,
        "passed": counts.get("passed", 0),
        "skipped": counts.get("skipped", 0),
        "failed": counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0),
    }


def measure_run(settings: dict, output_dir: Path, accelerator: str | None, stem: str, timeout: float) -> dict:
    """Steps 2 and 3: `pretrain.py --plan --plan_measure` with one stem; the run's plan_measured.json and plan.txt."""
    command = [
        sys.executable,
        "examples/pretrain.py",
        "--config",
        settings["config"],
        "--plan",
        "--plan_measure",
        str(settings["steps"]),
        "--synthetic_clips",
        str(settings["synthetic_clips"]),
        "--synthetic_seconds",
        str(settings["synthetic_seconds"]),
        "--report_to",
        "none",
        "--output_dir",
        str(output_dir / stem),
        *settings["extra"],
    ]
    if accelerator is not None:
        command += ["--plan_accelerator", accelerator]
    if stem == "spe":
        command += ["--model_config", json.dumps({"patch_embedding": "spe"})]
    result = run_command(command, timeout)
    report_path = output_dir / stem / "plan_measured.json"
    if result["returncode"] == 0 and report_path.is_file():
        result["report"] = json.loads(report_path.read_text())
        result["plan_text"] = (output_dir / stem / "plan.txt").read_text()
    return result


def attention_check(dry_run: bool, device: torch.device, repeats: int = 5) -> dict:
    """Step 4: each attention implementation on one padded batch (bf16 on CUDA, float32 on the CPU) against eager
    attention in float32 (the reference): the largest absolute difference of `last_hidden_state` on the real tokens,
    and the median forward time. An implementation passes when it is no further from the reference than
    ATTENTION_SLACK × eager's own error in the same dtype (at least ATTENTION_FLOOR): fused kernels round differently,
    not worse."""
    if dry_run:
        config = AaspConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            num_mel_bins=128,
            num_frames=64,
            sblu_hidden_size=16,
            sblu_output_size=64,
            lambda_encoder_reduction=4,
            lambda_encoder_num_layers=1,
            lambda_encoder_num_attention_heads=2,
        )
        batch = 4
    else:
        config, batch = AaspConfig(), 32  # the paper's ViT-B, 608 frames
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    model = AaspModel(config).to(device=device).eval()
    frames = config.num_frames
    values = torch.randn(batch, frames, config.num_mel_bins, device=device)  # (B, T, F)
    mask = torch.ones(batch, frames, dtype=torch.long, device=device)  # (B, T)
    mask[batch // 2 :, int(0.6 * frames) :] = 0  # half of the clips padded to 60 % of their frames
    with torch.no_grad():
        model.set_attn_implementation("eager")
        out = model(values, attention_mask=mask)  # float32 eager: the reference
        real = out.token_mask.bool()  # (B, 1 + N): CLS and the tokens of real frames
        reference = out.last_hidden_state[real]
    model.to(dtype)
    implementations = ["eager", "sdpa"]
    flash_installed = importlib.util.find_spec("flash_attn") is not None
    if flash_installed and device.type == "cuda":
        implementations.append("flash_attention_2")
    results = {}
    for name in implementations:
        model.set_attn_implementation(name)
        times = []
        with torch.no_grad():
            for _ in range(repeats + 1):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                started = time.perf_counter()
                out = model(values.to(dtype), attention_mask=mask)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - started)
        error = float((out.last_hidden_state[real].float() - reference).abs().max())
        results[name] = {"max_abs_difference": error, "forward_seconds": statistics.median(times[1:])}
    bound = max(ATTENTION_SLACK * results["eager"]["max_abs_difference"], ATTENTION_FLOOR)
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "batch": batch,
        "frames": frames,
        "padded_clips": batch - batch // 2,
        "implementations": results,
        "flash_attn_installed": flash_installed,
        "bound": bound,
    }


def verdicts(tests: dict, aape: dict, spe: dict, attention: dict) -> list[dict]:
    """The targets, each {"target", "value", "passed"} (passed None when it could not be computed)."""
    rows = []
    report = aape.get("report")
    figures = report["figures"] if report else {}
    rows.append(
        {
            "target": "CUDA-only tests: none failed, at least one ran",
            "value": f"{tests['passed']} passed, {tests['skipped']} skipped, {tests['failed']} failed",
            "passed": tests["failed"] == 0 and tests["passed"] > 0 and tests["returncode"] == 0,
        }
    )
    mfu = figures.get("mfu", {}).get("measured")
    rows.append(
        {
            "target": f"MFU >= {TARGETS['mfu']:.0%} at the paper batch",
            "value": "-" if mfu is None else f"{mfu:.1%}",
            "passed": None if mfu is None else mfu >= TARGETS["mfu"],
        }
    )
    ratio = None
    if report and spe.get("report"):
        ratio = figures["step_seconds"]["measured"] / spe["report"]["figures"]["step_seconds"]["measured"]
    rows.append(
        {
            "target": f"AaPE step <= {TARGETS['aape_over_spe']} × SPE step",
            "value": "-" if ratio is None else f"{ratio:.3f}×",
            "passed": None if ratio is None else ratio <= TARGETS["aape_over_spe"],
        }
    )
    memory = figures.get("peak_memory_bytes", {}).get("ratio")
    rows.append(
        {
            "target": f"peak memory within {TARGETS['memory_within']:.0%} of the plan",
            "value": "-" if memory is None else f"{memory:.3f}× the plan",
            "passed": None if memory is None else abs(memory - 1) <= TARGETS["memory_within"],
        }
    )
    wait = figures.get("data_wait_seconds", {}).get("fraction_of_step")
    rows.append(
        {
            "target": f"data wait <= {TARGETS['data_wait']:.0%} of the step",
            "value": "-" if wait is None else f"{wait:.1%}",
            "passed": None if wait is None else wait <= TARGETS["data_wait"],
        }
    )
    if "error" in attention:
        rows.append(
            {"target": "attention implementations on a padded batch", "value": attention["error"], "passed": False}
        )
    for name, entry in attention["implementations"].items():
        if name != "eager":
            rows.append(
                {
                    "target": f"{name} ({attention['dtype']}) from fp32 eager <= {ATTENTION_SLACK:g} × eager's "
                    "own error (padded batch, real tokens)",
                    "value": f"{entry['max_abs_difference']:.2e} (bound {attention['bound']:.2e})",
                    "passed": entry["max_abs_difference"] <= attention["bound"],
                }
            )
    return rows


def markdown(
    title: str,
    device: str,
    started: str,
    tests: dict,
    aape: dict,
    spe: dict,
    attention: dict,
    rows: list[dict],
    dry_run: bool,
) -> str:
    try:  # the GPU machine gets a copy of the working tree: maybe no .git, maybe no git
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    judged = "not judged: a CPU dry run" if dry_run else None
    lines = [
        f"# {title}",
        "",
        f"Device: **{device}**; torch {torch.__version__}; commit `{commit or 'unknown'}`; started {started} UTC.",
        "Every figure below comes from the commands listed with it, run by `benchmarks/gpu_acceptance.py`"
        + (" --dry_run (the tiny preset on the CPU: not a GPU figure)." if dry_run else "."),
        "",
        "## Targets",
        "",
        "| target | value | verdict |",
        "|---|---|---|",
    ]
    for row in rows:
        verdict = judged or ("n/a" if row["passed"] is None else "pass" if row["passed"] else "FAIL")
        lines.append(f"| {row['target']} | {row['value']} | {verdict} |")
    lines += ["", "## Commands", ""]
    for name, step in (("CUDA-only tests", tests), ("AaPE (paper stem)", aape), ("SPE", spe)):
        lines.append(f"- {name} ({step['seconds']:.0f} s, exit {step['returncode']}): `{step['command']}`")
    lines += [
        "- attention: in-process, `attention_check` of benchmarks/gpu_acceptance.py",
        "",
        "## CUDA-only tests",
        "",
        f"`{tests['summary']}`",
        "",
    ]
    for name, step in (("AaPE", aape), ("SPE", spe)):
        lines += [f"## {name}: measured beside the plan", ""]
        if "plan_text" in step:
            measured = step["plan_text"][step["plan_text"].index("Measured on this machine") :]
            lines += ["```", measured.rstrip(), "```", ""]
        else:
            lines += ["The run failed; the end of its output:", "", "```", step["output"][-3000:].rstrip(), "```", ""]
    lines += ["## Attention on a padded batch", ""]
    if "error" in attention:
        return "\n".join(lines + [f"Not finished: {attention['error']}."]) + "\n"
    lines += [
        f"{attention['batch']} clips of {attention['frames']} frames, {attention['padded_clips']} padded to "
        f"60 %, {attention['dtype']}; flash_attn installed: {attention['flash_attn_installed']}.",
        "",
        "| implementation | max abs difference to fp32 eager (real tokens) | forward |",
        "|---|---|---|",
    ]
    for name, entry in attention["implementations"].items():
        lines.append(f"| {name} | {entry['max_abs_difference']:.2e} | {entry['forward_seconds'] * 1e3:.1f} ms |")
    return "\n".join(lines) + "\n"


def time_limits(text: str, defaults: dict) -> dict:
    """`defaults` with the seconds of `--time_limits` ("step=seconds,..."); a one-line UsageError for anything else."""
    limits = dict(defaults)
    for item in filter(None, text.split(",")):
        step, _, seconds = (part.strip() for part in item.partition("="))
        try:
            value = float(seconds)
        except ValueError:
            value = 0.0
        if step not in limits or not value > 0:
            raise UsageError(
                f"--time_limits {text!r}: give step=seconds pairs, seconds > 0, for the steps "
                f"{', '.join(limits)} (e.g. 'aape=240,spe=200')"
            )
        limits[step] = value
    return limits


def finished(step: dict) -> str:
    """How a command ended, for the progress lines: "exit 0 after 70 s" or "timed out after 120 s"."""
    ended = "timed out" if step["returncode"] == "timeout" else f"exit {step['returncode']}"
    return f"{ended} after {step['seconds']:.0f} s"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="gpu_acceptance.py", description=__doc__.split("\n")[0])
    parser.add_argument("--dry_run", action="store_true", help="the same sequence on the CPU, tiny preset")
    parser.add_argument(
        "--output",
        default=None,
        help="the report (default: benchmarks/results_cuda.md; with "
        "--dry_run a temporary folder's results_cuda_dry_run.md)",
    )
    parser.add_argument(
        "--time_limits",
        default="",
        help="seconds per step instead of the defaults, e.g. "
        f"'aape=240,spe=200' (steps: {', '.join(LIMITS)}; defaults {LIMITS} on a GPU, "
        f"{DRY_RUN_LIMITS} with --dry_run)",
    )
    args = parse_command_line(parser, argv)
    limits = time_limits(args.time_limits, DRY_RUN_LIMITS if args.dry_run else LIMITS)
    if not args.dry_run and not torch.cuda.is_available():
        raise UsageError("no CUDA device here: run it on a GPU machine, or pass --dry_run for the CPU sequence")
    if args.dry_run and args.output is not None and Path(args.output).resolve() == RESULTS:
        raise UsageError(f"--dry_run writes CPU figures: not to {RESULTS.relative_to(ROOT)}, which holds a GPU's")
    work = Path(tempfile.mkdtemp(prefix="gpu_acceptance_"))
    output = Path(args.output) if args.output else (work / "results_cuda_dry_run.md" if args.dry_run else RESULTS)
    device = torch.device("cuda" if not args.dry_run else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)"
    accelerator = accelerator_of(name) if device.type == "cuda" else None
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    settings = DRY_RUN if args.dry_run else GPU_RUN

    print(f"1/4 CUDA-only tests ({', '.join(gpu_test_files())}; at most {limits['tests']:g} s)", flush=True)
    tests = cuda_tests(limits["tests"])
    print(f"    {tests['summary']} ({finished(tests)})", flush=True)
    print(f"2/4 --plan --plan_measure, AaPE stem (at most {limits['aape']:g} s)", flush=True)
    aape = measure_run(settings, work, accelerator, "aape", limits["aape"])
    print(f"    {finished(aape)}", flush=True)
    print(f"3/4 --plan --plan_measure, SPE stem (at most {limits['spe']:g} s)", flush=True)
    spe = measure_run(settings, work, accelerator, "spe", limits["spe"])
    print(f"    {finished(spe)}", flush=True)
    print(f"4/4 attention implementations on a padded batch (at most {limits['attention']:g} s)", flush=True)
    try:
        attention = within(limits["attention"], attention_check, args.dry_run, device)
    except TimeoutError as error:
        attention = {"error": str(error), "implementations": {}}
    rows = verdicts(tests, aape, spe, attention)
    title = "GPU acceptance check, CPU dry run" if args.dry_run else f"GPU acceptance check on {name}"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(markdown(title, name, started, tests, aape, spe, attention, rows, args.dry_run))
    print(f"report: {output}", flush=True)
    ran = all(step["returncode"] == 0 and "report" in step for step in (aape, spe))
    ran = ran and tests["returncode"] in (0, 5) and "error" not in attention  # 5: pytest collected no test
    ok = ran and (args.dry_run or all(row["passed"] is not False for row in rows))
    for row in rows:
        print(
            f"  {row['target']}: {row['value']}"
            + ("" if args.dry_run else f" -> {'pass' if row['passed'] else 'FAIL'}")
        )
    if not ok:
        failed = [s["command"] for s in (tests, aape, spe) if s["returncode"] not in (0, 5)]
        failed += ["attention check: " + attention["error"]] if "error" in attention else []
        print("not accepted" + (f"; failed: {failed}" if failed else ""), flush=True)
    return {
        "ok": ok,
        "output": str(output),
        "rows": rows,
        "tests": tests,
        "aape": aape,
        "spe": spe,
        "attention": attention,
    }


def stop(signum, frame):
    """SIGTERM (an outer `timeout`) or SIGHUP: the command running now ends with this process, with every process it
    started, instead of running on in its own process group."""
    for process in RUNNING:
        os.killpg(process.pid, signal.SIGKILL)
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    sys.exit(0 if run_script(main, "gpu_acceptance.py")["ok"] else 1)
