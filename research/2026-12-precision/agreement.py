"""How much does the tag command's `--precision` change what it writes? Every run is `python -m aasp_hf.tag` as a
process, once per classifier and precision, on test recordings that training never heard:

- clip classifiers (single-label): `--timestamps --top_k <all> --threshold 0`, every window's score of every label;
  a file's label is the top one of its windows' mean (what the command writes without --timestamps). Reported:
  top-1 agreement with fp32 over every window and every file, the largest change of any score, and the accuracy
  against the file's folder name (the audiofolder label);
- frame classifiers (sound events): `--timestamps --threshold 0`, every 0.16-s frame's score of every label, and a
  second run with `--events` (the saved thresholds and post-processing). Reported: agreement with fp32 of every
  frame's top label and of every (frame, label) decision at the saved thresholds, the largest score change, and the
  class-wise event-based F1 of the events file against the test's reference (`aasp_hf.evaluation.sound_events`,
  equal to sed_eval's).

    python research/2026-12-precision/agreement.py --clip_runs /tmp/prec/runs/seed{0,1,2} \
        --clip_test /tmp/prec/voices/fold0/test --event_runs /tmp/study/seed{0,1,2} --event_data /tmp/sed_data \
        --output research/2026-12-precision/results.json
"""

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from aasp_hf.evaluation.sound_events import event_based_scores

PRECISIONS = ("fp32", "bf16", "int8")


def tag(model: Path, paths, output: Path, precision: str, *flags) -> float:
    """Runs the command; returns its wall seconds."""
    command = [sys.executable, "-m", "aasp_hf.tag", "--model", str(model), "--output", str(output)]
    command += ["--precision", precision, "--num_workers", "0", *flags, *map(str, paths)]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def read_scores(path: Path) -> dict:
    """{(file, start): {label: score}} of a --timestamps CSV."""
    scores = defaultdict(dict)
    with open(path, newline="") as file:
        for row in csv.DictReader(file):
            scores[(row["file"], float(row["start"]))][row["label"]] = float(row["score"])
    return scores


def as_matrix(scores: dict, labels) -> tuple[list, np.ndarray]:
    keys = sorted(scores)
    return keys, np.array([[scores[key][label] for label in labels] for key in keys])  # (windows, labels)


def clip_run(run: Path, test: Path, work: Path) -> dict:
    config = json.loads((run / "config.json").read_text())
    labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    matrices, seconds = {}, {}
    for precision in PRECISIONS:
        out = work / f"clip_{run.name}_{precision}.csv"
        flags = ("--timestamps", "--top_k", str(len(labels)), "--threshold", "0")
        seconds[precision] = tag(run, [test], out, precision, *flags)
        keys, matrices[precision] = as_matrix(read_scores(out), labels)
    files = sorted({file for file, _ in keys})
    truth = np.array([labels.index(Path(file).parent.name) for file in files])
    rows = [[k for k, key in enumerate(keys) if key[0] == file] for file in files]  # each file's windows
    file_scores = {p: np.array([matrix[r].mean(0) for r in rows]) for p, matrix in matrices.items()}  # (files, labels)
    fp32_files = file_scores["fp32"]
    result = {"windows": len(keys), "files": len(files), "seconds": seconds, "precisions": {}}
    for precision, matrix in matrices.items():
        result["precisions"][precision] = {
            "accuracy": float((file_scores[precision].argmax(1) == truth).mean()),
            "window_top1_agreement": float((matrix.argmax(1) == matrices["fp32"].argmax(1)).mean()),
            "file_top1_agreement": float((file_scores[precision].argmax(1) == fp32_files.argmax(1)).mean()),
            "max_score_change": float(np.abs(matrix - matrices["fp32"]).max()),
        }
    return result


def read_events(path: Path) -> list[dict]:
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file, delimiter="\t"))
    return [{**row, "onset": float(row["onset"]), "offset": float(row["offset"])} for row in rows]


def event_run(run: Path, data: Path, work: Path) -> dict:
    config = json.loads((run / "config.json").read_text())
    labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    thresholds = np.asarray(config.get("event_thresholds") or [0.5] * len(labels))
    reference = read_events(data / "test.tsv")
    matrices, scores, seconds = {}, {}, {}
    for precision in PRECISIONS:
        out, events = work / f"event_{run.name}_{precision}.csv", work / f"event_{run.name}_{precision}.events.tsv"
        seconds[precision] = tag(run, [data / "test"], out, precision, "--timestamps", "--threshold", "0")
        tag(run, [data / "test"], work / f"event_{run.name}_{precision}_events.csv", precision, "--events", str(events))
        keys, matrices[precision] = as_matrix(read_scores(out), labels)
        scores[precision] = event_based_scores(reference, read_events(events), labels=labels)["class_wise_f_measure"]
    result = {"frames": len(keys), "seconds": seconds, "precisions": {}}
    for precision, matrix in matrices.items():
        result["precisions"][precision] = {
            "event_f1": float(scores[precision]),
            "frame_top1_agreement": float((matrix.argmax(1) == matrices["fp32"].argmax(1)).mean()),
            "decision_agreement": float(((matrix >= thresholds) == (matrices["fp32"] >= thresholds)).mean()),
            "max_score_change": float(np.abs(matrix - matrices["fp32"]).max()),
        }
    return result


def summary(runs: dict, score: str) -> dict:
    """Mean ± std (ddof 1) over the runs of `score` per precision, and of its paired difference to fp32."""
    out = {}
    for precision in PRECISIONS:
        values = np.array([run["precisions"][precision][score] for run in runs.values()])
        diffs = values - np.array([run["precisions"]["fp32"][score] for run in runs.values()])
        out[precision] = {
            "mean": float(values.mean()),
            "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            "paired_difference_mean": float(diffs.mean()),
            "paired_difference_max_abs": float(np.abs(diffs).max()),
        }
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clip_runs", type=Path, nargs="*", default=[])
    parser.add_argument("--clip_test", type=Path)
    parser.add_argument("--event_runs", type=Path, nargs="*", default=[])
    parser.add_argument("--event_data", type=Path)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        clip = {str(run): clip_run(run, args.clip_test, Path(work)) for run in args.clip_runs}
        event = {str(run): event_run(run, args.event_data, Path(work)) for run in args.event_runs}
    results = {
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "clip_runs": clip,
        "clip_summary": summary(clip, "accuracy") if clip else None,
        "event_runs": event,
        "event_summary": summary(event, "event_f1") if event else None,
    }
    args.output.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({"clip_summary": results["clip_summary"], "event_summary": results["event_summary"]}, indent=1))


if __name__ == "__main__":
    main()
