"""Speed of tagging long recordings: `python -m aasp_hf.tag` with the paper-size classifiers (AaPE and SPE), as ratios
measured in one run.

    python benchmarks/long_audio/run.py [--minutes 60] [--memory_minutes 120] [--threads 2] [--repeats 5]

Everything is timed in this one process, one thing after another, so the ratios hold when the machine's load drifts:
- `command`: the tag command's own `main` on `--minutes` of audio (16-kHz 16-bit WAV files of up to 10 minutes, noise
  and tones), one DataLoader worker decoding and featurising, the model in this process on `--threads` threads,
  batches of 8 windows of 10.07 s (a classifier saved with `max_frames` = 1008, as finetune.py saves one):
  `real_time_factor` = seconds of audio per second of wall time.
- `parts`: the same work done serially, each part timed on its own over the same audio: `decode` (torchcodec, in
  60-s blocks), `features` (the log-mel of each window), `model` (the classifier on the windows, batches of 8),
  `writing` (the CSV rows with --timestamps). `not_model_share` = (decode + features + writing) / their sum.
- `window_batch1_1thread`: one 10.07-s window (1008 frames, 504 tokens), batch 1, one thread, interleaved medians:
  the AaPE and SPE classifiers and transformers' `ASTModel` with non-overlapping 16x16 patches (the same 504 tokens).
- `memory`: peak RSS growth (VmHWM) of a fresh process running the tag command (SPE, --num_workers 0, batches of 4
  windows, so that the 1-minute file's 6 windows fill whole batches too) on a 1-minute file and on a
  `--memory_minutes` file.
Weights are random: the speed does not depend on them. Writes results.json and results.md here.
"""

import argparse
import json
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
from aasp_hf.entry_points import run_script
from aasp_hf.errors import parse_command_line
from aasp_hf.pipeline_aasp import decode_blocks, iter_windows, trained_window_samples
from aasp_hf.tag import RowWriter, choose_labels
from aasp_hf.tag import main as tag_main

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


def bench_command(model: Path, files: list[str], out: Path, threads: int) -> float:
    """Wall seconds of the tag command on `files`."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    assert (
        tag_main(
            [
                "--model",
                str(model),
                "--output",
                str(out),
                "--timestamps",
                "--batch_size",
                str(BATCH_SIZE),
                "--num_workers",
                "1",
                *files,
            ]
        )
        == 0
    )
    return time.perf_counter() - start


def bench_parts(model_folder: Path, files: list[str], out: Path, threads: int) -> dict:
    """Seconds of each part of the command's work over `files`, done serially in this process."""
    torch.set_num_threads(threads)
    model = AaspForAudioClassification.from_pretrained(model_folder).eval()
    extractor = AaspFeatureExtractor.from_pretrained(model_folder)
    window = trained_window_samples(extractor, model.config)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    seconds = dict.fromkeys(("decode", "features", "model", "writing"), 0.0)
    writer = RowWriter(out, ["file", "start", "end", "label", "score"])
    for name in files:
        clock = time.perf_counter()
        blocks = list(decode_blocks(name, RATE))
        seconds["decode"] += time.perf_counter() - clock

        clock = time.perf_counter()
        windows = list(iter_windows(iter(blocks), window, window))
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
                scores.append(model(input_values, attention_mask=attention_mask).logits.sigmoid().numpy())
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
    return seconds


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
from aasp_hf.tag import main
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


def to_markdown(results: dict) -> str:
    lines = [
        f"# Tagging long recordings: measured {results['when']} on {results['machine']}",
        "",
        f"Command: `{results['command']}`. Audio: {results['minutes']:g} min (WAV, 16 kHz). Ratios come from one run.",
        "",
        "| classifier | command real-time factor | decode | features | model | writing | not-model share |",
        "|---|---|---|---|---|---|---|",
    ]
    for stem, entry in results["classifiers"].items():
        parts = entry["parts_s"]
        lines.append(
            f"| {stem} | {entry['real_time_factor']:.1f}x | {parts['decode']:.1f} s | {parts['features']:.1f} s"
            f" | {parts['model']:.1f} s | {parts['writing']:.2f} s | {entry['not_model_share']:.1%} |"
        )
    window = results["window_batch1_1thread_ms"]
    lines += [
        "",
        "One 10.07-s window (504 tokens), batch 1, one thread, median ms: "
        + ", ".join(f"{name} {ms:.0f}" for name, ms in window.items())
        + f"; SPE / AST {window['spe'] / window['transformers_AST_16x16']:.2f}, AaPE / SPE "
        f"{window['aape'] / window['spe']:.2f}.",
        "",
        "Peak memory growth of the command (SPE, in one process, batches of 4 windows): "
        + ", ".join(f"{name.replace('_', ' ')} {mib:.0f} MiB" for name, mib in results["memory_growth_mib"].items())
        + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="audio tagged per classifier (default 60)")
    parser.add_argument("--memory_minutes", type=float, default=120.0, help="the long file of the memory check")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the model (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the one-window timing (default 5)")
    args = parse_command_line(parser, argv)
    results = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads available",
        "command": "python benchmarks/long_audio/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "minutes": args.minutes,
        "classifiers": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = write_audio(tmp / "audio", args.minutes)
        folders = {stem: save_classifier(tmp / stem, stem) for stem in ("aape", "spe")}
        for stem, folder in folders.items():
            command_s = bench_command(folder, files, tmp / f"{stem}_command.csv", args.threads)
            parts = bench_parts(folder, files, tmp / f"{stem}_parts.csv", args.threads)
            not_model = parts["decode"] + parts["features"] + parts["writing"]
            results["classifiers"][stem] = {
                "command_s": command_s,
                "real_time_factor": args.minutes * 60 / command_s,
                "parts_s": parts,
                "not_model_share": not_model / (not_model + parts["model"]),
            }
            print(stem, json.dumps(results["classifiers"][stem]), file=sys.stderr)
        results["window_batch1_1thread_ms"] = bench_window(folders, args.repeats)
        results["memory_growth_mib"] = bench_memory(folders["spe"], tmp / "memory", args.memory_minutes, args.threads)
    (HERE / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (HERE / "results.md").write_text(to_markdown(results))
    print(to_markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main, "benchmarks/long_audio/run.py"))
