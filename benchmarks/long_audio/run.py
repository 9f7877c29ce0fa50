"""Speed of tagging long recordings: `python -m aasp_hf.tag` with the paper-size classifiers (AaPE and SPE), as ratios
measured in one run.

    python benchmarks/long_audio/run.py [--minutes 60] [--memory_minutes 120] [--threads 2] [--repeats 5]
        [--precisions fp32 bf16 int8] [--skip window memory workers]

Everything is timed in this one process, one thing after another, so the ratios hold when the machine's load drifts:
- `command`: the tag command's own `main` on `--minutes` of audio (16-kHz 16-bit WAV files of up to 10 minutes, noise
  and tones) in each of `--precisions`, with the command's default decode workers, the model in this process on
  `--threads` threads, batches of 8 windows of 10.07 s (a classifier saved with `max_frames` = 1008, as finetune.py
  saves one): `real_time_factor` = seconds of audio per second of wall time.
- `parts`: the same work done serially, each part timed on its own over the same audio: `decode` (torchcodec, in
  60-s blocks), `features` (the log-mel of each window, on one thread as the command computes it), `model` (the
  classifier loaded as the command loads it in that precision, on the windows, batches of 8), `writing` (the CSV rows
  with --timestamps). `not_model_share` = (decode + features + writing) / their sum.
- `flop_limit_share`: the model part's GFLOP/s (`window_gflop`, torch's FlopCounterMode on one window, times the
  windows, over the model's seconds) over `matmul_peak` of the same precision and threads.
- `workers`: the command with `--num_workers` 0 and 1 (SPE, the fastest precision); `startup_s`: a fresh process
  importing the command, then loading the classifier and tagging a 0.5-s file.
- `window_batch1_1thread`: one 10.07-s window (1008 frames, 504 tokens), batch 1, one thread, interleaved medians:
  the AaPE and SPE classifiers and transformers' `ASTModel` with non-overlapping 16x16 patches (the same 504 tokens).
- `memory`: peak RSS growth (VmHWM) of a fresh process running the tag command (SPE, --num_workers 0, batches of 4
  windows, so that the 1-minute file's 6 windows fill whole batches too) on a 1-minute file and on a
  `--memory_minutes` file.
Weights are random: the speed does not depend on them. Writes results.json and results.md here.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import parse_command_line
from aasp_hf.pipeline_aasp import decode_blocks, iter_windows, trained_window_samples
from aasp_hf.cli.tag import (
    RowWriter,
    choose_labels,
    cpu_flags,
    default_num_workers,
    load_weights,
    one_thread,
    quantize_dynamic,
)
from aasp_hf.cli.tag import main as tag_main

HERE = Path(__file__).resolve().parent
RATE = 16000
MAX_FRAMES = 1008  # finetune.py's 10-s clips, in whole time patches
BATCH_SIZE = 8


def write_audio(folder: Path, minutes: float, file_minutes: float = 10.0) -> list[str]:
    """`minutes` of noise and tones as 16-kHz 16-bit WAV files of up to `file_minutes`, written in 60-s blocks."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    t = np.arange(60 * RATE) / RATE
    block = (0.3 * np.sin(2 * np.pi * 440 * t) * (t % 2 < 1) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)
    files, left = [], minutes * 60
    while left > 0:
        seconds = min(left, file_minutes * 60)
        path = folder / f"recording_{len(files):03d}.wav"
        with sf.SoundFile(path, "w", samplerate=RATE, channels=1, subtype="PCM_16") as file:
            for start in range(0, int(seconds), 60):
                file.write(block[: int(min(60, seconds - start) * RATE)])
        files.append(str(path))
        left -= seconds
    return files


def save_classifier(folder: Path, stem: str) -> Path:
    """The paper-size classifier (ViT-B; `stem` "aape" or "spe"), 527 AudioSet-like labels, multi-label, random."""
    torch.manual_seed(0)
    config = AaspConfig(patch_embedding=stem, num_labels=527, problem_type="multi_label_classification")
    AaspForAudioClassification(config).eval().save_pretrained(folder)
    AaspFeatureExtractor(max_frames=MAX_FRAMES).save_pretrained(folder)
    return folder


def bench_command(model: Path, files: list[str], out: Path, threads: int, precision: str, num_workers=None) -> float:
    """Wall seconds of the tag command on `files` (`num_workers` None: the command's default)."""
    torch.set_num_threads(threads)
    workers = [] if num_workers is None else ["--num_workers", str(num_workers)]
    arguments = ["--model", str(model), "--output", str(out), "--timestamps", "--batch_size", str(BATCH_SIZE)]
    start = time.perf_counter()
    assert tag_main([*arguments, "--precision", precision, *workers, *files]) == 0
    return time.perf_counter() - start


def window_gflop(model_folder: Path) -> float:
    """GFLOP of one 10.07-s window (1008 frames) through the float32 classifier, counted by torch's FlopCounterMode
    (matrix products and convolutions, 2 per multiply-add)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = AaspForAudioClassification.from_pretrained(model_folder).eval()
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model(torch.randn(1, MAX_FRAMES, 128))
    return counter.get_total_flops() / 1e9


def matmul_peak(precision: str, threads: int, repeats: int = 10) -> float:
    """GFLOP/s of the model's largest product (a batch of 8 windows, 4032 tokens, through the 768 -> 3072 MLP layer)
    in `precision` on `threads` threads: fp32 and bf16 a plain matrix product, int8 torch's dynamic int8 linear layer
    (quantising its input on each call, as the command's int8 model does). The best of `repeats`."""
    torch.set_num_threads(threads)
    linear = torch.nn.Linear(768, 3072).eval()
    x = torch.randn(BATCH_SIZE * 504, 768)
    if precision == "bf16":
        linear, x = linear.to(torch.bfloat16), x.to(torch.bfloat16)
    elif precision == "int8":
        linear = quantize_dynamic()(torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8)
    best = float("inf")
    with torch.inference_mode():
        linear(x)
        for _ in range(repeats):
            start = time.perf_counter()
            linear(x)
            best = min(best, time.perf_counter() - start)
    return 2 * x.shape[0] * 768 * 3072 / best / 1e9


STARTUP_SCRIPT = """
import sys, time
start = time.perf_counter()
import aasp_hf.cli.tag
imported = time.perf_counter()
assert aasp_hf.cli.tag.main(["--model", sys.argv[1], "--output", sys.argv[2], "--num_workers", "0", sys.argv[3]]) == 0
print(imported - start, time.perf_counter() - imported)
"""


def bench_startup(model: Path, folder: Path, threads: int) -> dict:
    """Seconds a fresh process spends importing the command and then tagging a 0.5-s file (loading the model,
    checking, one short window: what a run pays before its first file), the best of three."""
    folder.mkdir(parents=True, exist_ok=True)
    path = str(folder / "short.wav")
    sf.write(path, 0.1 * np.random.default_rng(0).standard_normal(RATE // 2).astype(np.float32), RATE)
    runs = []
    for attempt in range(3):
        out = folder / f"startup_{attempt}.csv"
        run = subprocess.run(
            [sys.executable, "-c", STARTUP_SCRIPT, str(model), str(out), path],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        )
        runs.append([float(value) for value in run.stdout.split()[-2:]])
    imports, tagging = min(runs, key=sum)
    return {"import_s": imports, "load_and_first_file_s": tagging}


def bench_parts(model_folder: Path, files: list[str], out: Path, threads: int, precision: str = "fp32") -> dict:
    """Seconds of each part of the command's work over `files`, done serially in this process, the model loaded as
    the command loads it in `precision`."""
    torch.set_num_threads(threads)
    extractor = AaspFeatureExtractor.from_pretrained(model_folder)
    config = AaspForAudioClassification.config_class.from_pretrained(model_folder)
    model = load_weights(AaspForAudioClassification, model_folder, config, "cpu", precision)
    input_dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    window = trained_window_samples(extractor, model.config)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    seconds, num_windows = dict.fromkeys(("decode", "features", "model", "writing"), 0.0), 0
    writer = RowWriter(out, ["file", "start", "end", "label", "score"])
    for name in files:
        clock = time.perf_counter()
        blocks = list(decode_blocks(name, RATE))
        seconds["decode"] += time.perf_counter() - clock

        clock = time.perf_counter()
        windows = list(iter_windows(iter(blocks), window, window))
        num_windows += len(windows)
        with one_thread():  # as the command featurises in its process (and its workers do)
            features = [
                extractor(samples, sampling_rate=RATE, return_tensors="pt", truncation=False) for _, samples in windows
            ]
        seconds["features"] += time.perf_counter() - clock

        clock = time.perf_counter()
        scores = []
        with torch.inference_mode():
            for first in range(0, len(features), BATCH_SIZE):
                batch = features[first : first + BATCH_SIZE]
                num_frames = max(f["input_values"].shape[1] for f in batch)
                input_values = torch.cat(
                    [
                        torch.nn.functional.pad(f["input_values"], (0, 0, 0, num_frames - f["input_values"].shape[1]))
                        for f in batch
                    ]
                )  # B × (1, T_i, F) -> (B, T, F)
                attention_mask = torch.cat(
                    [
                        torch.nn.functional.pad(f["attention_mask"], (0, num_frames - f["attention_mask"].shape[1]))
                        for f in batch
                    ]
                )  # B × (1, T_i) -> (B, T)
                logits = model(input_values.to(input_dtype), attention_mask=attention_mask).logits
                scores.append(logits.float().sigmoid().numpy())
        seconds["model"] += time.perf_counter() - clock

        clock = time.perf_counter()
        rows = [
            (name, start / RATE, (start + len(samples)) / RATE, label, score)
            for (start, samples), window_scores in zip(windows, np.concatenate(scores))
            for label, score in choose_labels(window_scores, labels, len(labels), 0.5)
        ]
        writer.write_file(rows)
        seconds["writing"] += time.perf_counter() - clock
    writer.close()
    return seconds, num_windows


def bench_window(folders: dict, repeats: int) -> dict:
    """Median ms of one 10.07-s window at batch 1 on one thread: AaPE, SPE and transformers' ASTModel (16x16 patches,
    no overlap: 63 x 8 = 504 tokens, ours 504 too), interleaved."""
    from transformers import ASTConfig, ASTForAudioClassification

    torch.set_num_threads(1)
    models = {stem: AaspForAudioClassification.from_pretrained(folder).eval() for stem, folder in folders.items()}
    models["transformers_AST_16x16"] = ASTForAudioClassification(
        ASTConfig(max_length=MAX_FRAMES, frequency_stride=16, time_stride=16, num_labels=527)
    ).eval()
    x = torch.randn(1, MAX_FRAMES, 128)
    samples = {name: [] for name in models}
    with torch.inference_mode():
        for model in models.values():
            model(x)  # warm-up
        for _ in range(repeats):
            for name, model in models.items():
                start = time.perf_counter()
                model(x)
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


MEMORY_SCRIPT = """
import sys, torch
from aasp_hf.cli.tag import main
def peak_mib():  # this process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent)
    return int([line for line in open("/proc/self/status") if line.startswith("VmHWM")][0].split()[1]) / 1024
torch.set_num_threads(int(sys.argv[3]))
before = peak_mib()
assert main(["--model", sys.argv[1], "--output", sys.argv[2] + ".csv", "--timestamps", "--num_workers", "0",
             "--batch_size", "4", sys.argv[2]]) == 0
print(peak_mib() - before)
"""


def bench_memory(model: Path, folder: Path, minutes: float, threads: int) -> dict:
    """Peak RSS growth (MiB) of the tag command in a fresh process: a 1-minute file and a `minutes` file."""
    growth = {}
    for length in (1.0, minutes):
        [path] = write_audio(folder / f"{length:g}min", length, file_minutes=length)
        run = subprocess.run(
            [sys.executable, "-c", MEMORY_SCRIPT, str(model), path, str(threads)],
            capture_output=True,
            text=True,
            check=True,
        )
        growth[f"{length:g}_min"] = float(run.stdout.split()[-1])
        Path(path).unlink()
    return growth


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as file:
            return next(line.split(":", 1)[1].strip() for line in file if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def to_markdown(results: dict) -> str:
    cpu = results["cpu"]
    lines = [
        f"# Tagging long recordings: measured {results['when']} on {results['machine']}",
        "",
        f"CPU: {cpu['name']}; native bf16 matrix products: {', '.join(cpu['bf16_flags']) or 'none'} "
        f"(AMX: {'yes' if 'amx_bf16' in cpu['bf16_flags'] else 'no'}). Command: `{results['command']}`. "
        f"Audio: {results['minutes']:g} min (WAV, 16 kHz). Ratios come from one run.",
        "",
        "| classifier | precision | command real-time factor | vs fp32 | decode | features | model | writing "
        "| not-model share | model GFLOP/s | FLOP limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for stem, precisions in results["classifiers"].items():
        for precision, entry in precisions.items():
            parts = entry["parts_s"]
            speedup = entry["real_time_factor"] / precisions["fp32"]["real_time_factor"] if "fp32" in precisions else 0
            lines.append(
                f"| {stem} | {precision} | {entry['real_time_factor']:.1f}x | {speedup:.2f}x | {parts['decode']:.1f} s"
                f" | {parts['features']:.1f} s | {parts['model']:.1f} s | {parts['writing']:.2f} s"
                f" | {entry['not_model_share']:.1%} | {entry['model_gflops_per_s']:.0f} | {entry['flop_limit_share']:.0%} |"
            )
    peaks = results["matmul_peak_gflops"]
    lines += [
        "",
        "FLOP limit: the model part's achieved GFLOP/s (FlopCounterMode's "
        + ", ".join(f"{stem} {g:.1f}" for stem, g in results["window_gflop"].items())
        + " GFLOP per window, times the windows, over the model's seconds) divided by the GFLOP/s of the model's "
        f"largest product (4032 x 768 @ 768 x 3072) in the same precision on the same {results['threads']} threads: "
        + ", ".join(f"{precision} {g:.0f}" for precision, g in peaks.items())
        + ".",
    ]
    workers = results.get("workers")
    if workers:
        lines += [
            "",
            f"Decode workers ({workers['classifier']}, {workers['precision']}): real-time factor "
            + ", ".join(f"--num_workers {n}: {rtf:.1f}x" for n, rtf in workers["real_time_factor"].items())
            + f"; the command's default on this machine: {workers['default']}.",
        ]
    startup = results["startup_s"]
    lines += [
        "",
        f"Start-up (a fresh process, SPE, a 0.5-s file, best of 3): importing the command {startup['import_s']:.1f} s,"
        f" then loading the model and tagging the file {startup['load_and_first_file_s']:.1f} s.",
    ]
    window = results.get("window_batch1_1thread_ms")
    if window:
        lines += [
            "",
            "One 10.07-s window (504 tokens), batch 1, one thread, median ms: "
            + ", ".join(f"{name} {ms:.0f}" for name, ms in window.items())
            + f"; SPE / AST {window['spe'] / window['transformers_AST_16x16']:.2f}, AaPE / SPE "
            f"{window['aape'] / window['spe']:.2f}.",
        ]
    memory = results.get("memory_growth_mib")
    if memory:
        lines += [
            "",
            "Peak memory growth of the command (SPE, in one process, batches of 4 windows): "
            + ", ".join(f"{name.replace('_', ' ')} {mib:.0f} MiB" for name, mib in memory.items())
            + ".",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="audio tagged per classifier (default 60)")
    parser.add_argument("--memory_minutes", type=float, default=120.0, help="the long file of the memory check")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the model (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the one-window timing (default 5)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"], choices=["fp32", "bf16", "int8"])
    parser.add_argument("--skip", nargs="*", default=[], choices=["window", "memory", "workers"], help="parts left out")
    args = parse_command_line(parser, argv)
    if "fp32" not in args.precisions:
        args.precisions.insert(0, "fp32")  # every ratio is against it
    results = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads available",
        "cpu": {"name": cpu_name(), "bf16_flags": sorted({"amx_bf16", "avx512_bf16"} & cpu_flags())},
        "command": "python benchmarks/long_audio/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "minutes": args.minutes,
        "threads": args.threads,
        "classifiers": {},
    }
    results["matmul_peak_gflops"] = {precision: matmul_peak(precision, args.threads) for precision in args.precisions}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = write_audio(tmp / "audio", args.minutes)
        folders = {stem: save_classifier(tmp / stem, stem) for stem in ("aape", "spe")}
        results["window_gflop"] = {stem: window_gflop(folder) for stem, folder in folders.items()}
        for stem, folder in folders.items():
            results["classifiers"][stem] = {}
            for precision in args.precisions:
                out = tmp / f"{stem}_{precision}"
                command_s = bench_command(folder, files, out.with_suffix(".command.csv"), args.threads, precision)
                parts, windows = bench_parts(folder, files, out.with_suffix(".parts.csv"), args.threads, precision)
                not_model = parts["decode"] + parts["features"] + parts["writing"]
                achieved = results["window_gflop"][stem] * windows / parts["model"]
                results["classifiers"][stem][precision] = {
                    "command_s": command_s,
                    "real_time_factor": args.minutes * 60 / command_s,
                    "parts_s": parts,
                    "not_model_share": not_model / (not_model + parts["model"]),
                    "model_gflops_per_s": achieved,
                    "flop_limit_share": achieved / results["matmul_peak_gflops"][precision],
                }
                print(stem, precision, json.dumps(results["classifiers"][stem][precision]), file=sys.stderr)
        if "workers" not in args.skip:
            fastest = max(args.precisions, key=lambda p: results["classifiers"]["spe"][p]["real_time_factor"])
            rtf = {
                n: args.minutes * 60 / bench_command(folders["spe"], files, tmp / f"w{n}.csv", args.threads, fastest, n)
                for n in (0, 1)
            }
            results["workers"] = {
                "classifier": "spe",
                "precision": fastest,
                "real_time_factor": rtf,
                "default": default_num_workers(),
            }
        results["startup_s"] = bench_startup(folders["spe"], tmp / "startup", args.threads)
        if "window" not in args.skip:
            results["window_batch1_1thread_ms"] = bench_window(folders, args.repeats)
        if "memory" not in args.skip:
            results["memory_growth_mib"] = bench_memory(
                folders["spe"], tmp / "memory", args.memory_minutes, args.threads
            )
    (HERE / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (HERE / "results.md").write_text(to_markdown(results))
    print(to_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main, "benchmarks/long_audio/run.py"))
