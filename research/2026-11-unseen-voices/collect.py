"""Reads the study's run folders (finetune.py's all_results.json; the command and its seconds from the runner's files
in --logs) into results.json, and prints the README's tables.

    python research/2026-11-unseen-voices/collect.py --runs /tmp/voices/runs --logs /tmp/voices/logs \
        --output research/2026-11-unseen-voices/results.json

Run names: <recipe>_<split>_<validation>_s<seed>: split fold0..fold3 (test = that fold's voices, never heard in
training) or all (finetune.py's own stratified 20 % test: the same voices in training and test); validation
`randomval` (finetune.py's random 10 % of the training clips) or `groupval` (--group_by: whole voices) or `random`
(the random split's own).
"""

import argparse
import json
import re
from pathlib import Path

import numpy as np

KEPT = ("data_root", "seed", "max_steps", "per_device_train_batch_size", "learning_rate", "layer_decay", "ema_decay",
        "spec_augment", "mixup_alpha", "classifier_pooling", "clip_padding", "group_by", "validation_fraction",
        "select_on")


def collect(runs: Path, logs: Path) -> dict:
    result = {}
    for path in sorted(runs.glob("*/all_results.json")):
        name = path.parent.name
        run = json.loads(path.read_text())
        log = (logs / f"{name}.log").read_text(errors="replace") if (logs / f"{name}.log").exists() else ""
        seconds = re.search(r"seconds=(\d+) start_load ([\d. ]+) end_load ([\d. ]+)", log)
        sources = re.search(r"sources \(--group_by [^)]*\): (.*)", log)
        baseline = run["baseline"]["parts"]["official"]
        result[name] = {
            "command": (logs / f"{name}.cmd").read_text().strip() if (logs / f"{name}.cmd").exists() else None,
            "seconds": int(seconds.group(1)) if seconds else None,
            "load": [seconds.group(2).strip(), seconds.group(3).strip()] if seconds else None,
            "test_accuracy": run["test_score"], "best_valid_accuracy": run["best_valid_score"],
            "best_step": run["best_step"], "eval_history": run["eval_history"],
            "baseline_test_accuracy": baseline["test_score"], "baseline_valid_accuracy": baseline["valid_score"],
            "baseline_C": baseline["C"], "baseline_C_chosen_on": baseline.get("C_chosen_on"), "clips": baseline["clips"],
            "sources": sources.group(1) if sources else None,
            "settings": {k: run["arguments"].get(k) for k in KEPT},
        }
    return result


def mean_std(values: list) -> str:
    if not values or any(v is None or v != v for v in values):  # None or NaN: no validation score
        return "–"
    values = [100 * v for v in values]
    spread = f" ± {np.std(values, ddof=1):.1f}" if len(values) > 1 else ""
    return f"{np.mean(values):.1f}{spread} ({', '.join(f'{v:.1f}' for v in values)})"


def table(result: dict) -> str:
    rows = {}
    for name, run in result.items():
        match = re.fullmatch(r"(.+)_(fold\d|all)_(randomval|groupval|random|none)_s(\d+)", name)
        if match:
            recipe, split, validation, seed = match.groups()
            key = (recipe, "unseen voices" if split.startswith("fold") else "same voices", validation)
            rows.setdefault(key, []).append((f"{split} s{seed}", run))
    lines = ["| recipe | test | validation | runs | test accuracy | best validation accuracy | validation − test "
             "| baseline test | model / baseline |", "|---|---|---|---|---|---|---|---|---|"]
    for (recipe, test, validation), runs in sorted(rows.items()):
        runs.sort(key=lambda item: item[0])
        test_acc = [r["test_accuracy"] for _, r in runs]
        valid = [r["best_valid_accuracy"] for _, r in runs]
        base = [r["baseline_test_accuracy"] for _, r in runs]
        gap = [None if v is None or v != v else v - t for v, t in zip(valid, test_acc)]
        ratio = np.mean(test_acc) / np.mean(base)
        lines.append(f"| {recipe} | {test} | {validation} | {', '.join(s for s, _ in runs)} | {mean_std(test_acc)} | "
                     f"{mean_std(valid)} | {mean_std(gap)} | {mean_std(base)} | {ratio:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    result = collect(args.runs, args.logs)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
