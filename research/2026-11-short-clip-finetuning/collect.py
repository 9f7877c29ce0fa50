"""Reads the study's run folders (finetune.py's all_results.json, log_history.jsonl, the command and its seconds
from the runner's log; linear_eval.py's in runs_le/ beside runs/) and the baseline's JSON files into results.json,
and prints the README's table.

    python research/2026-11-short-clip-finetuning/collect.py --runs /tmp/study/runs --logs /tmp/study/logs \
        --output research/2026-11-short-clip-finetuning/results.json
"""

import argparse
import json
import re
from pathlib import Path

KEPT = ("learning_rate", "layer_decay", "ema_decay", "warmup_steps", "per_device_train_batch_size", "max_steps",
        "seed", "clip_seconds", "spec_augment", "mixup_alpha", "drop_path_rate", "model_name_or_path", "data_root")


def collect(runs: Path, logs: Path) -> dict:
    result = {"runs": {}, "baselines": {}}
    for path in sorted(runs.glob("*/all_results.json")):
        name = path.parent.name
        run = json.loads(path.read_text())
        history = [json.loads(line) for line in (path.parent / "log_history.jsonl").read_text().splitlines()]
        log = (logs / f"{name}.log").read_text() if (logs / f"{name}.log").exists() else ""
        seconds = re.search(r"rc=0 seconds=(\d+)", log)
        clip = re.search(r"clip length ([\d.]+) s", log)
        result["runs"][name] = {
            "command": (logs / f"{name}.cmd").read_text().strip() if (logs / f"{name}.cmd").exists() else None,
            "test_accuracy": run["test_score"], "best_valid_accuracy": run["best_valid_score"],
            "best_step": run["best_step"], "final_loss": history[-1]["loss"],
            "seconds": int(seconds.group(1)) if seconds else None,
            "clip_seconds": float(clip.group(1)) if clip else None,
            "total_train_batch_size": run["total_train_batch_size"],
            "settings": {k: run["arguments"].get(k) for k in KEPT},
        }
    for path in sorted(runs.parent.glob("runs_le/*/all_results.json")):  # linear_eval.py's runs beside runs/
        probe = json.loads(path.read_text())
        result.setdefault("linear_probes", {})[path.parent.name] = {
            "command": (logs / f"{path.parent.name}.cmd").read_text().strip(),
            "test_mean": probe["test_mean"], "test_std": probe["test_std"], "test_per_seed": probe["test_per_seed"],
            "seeds": probe["seeds"]}
    for path in sorted(logs.glob("baseline_*.json")):
        result["baselines"][path.stem] = json.loads(path.read_text())
    return result


RECIPES = {  # run name (without split and seed) -> encoder and the flags added to the documented command
    "doc": "`tiny`, the documented command (200 steps, batch 128, lr 2e-3, layer decay 0.65)",
    "b32_400": "`tiny`, `--per_device_train_batch_size 32 --max_steps 400` (lr 1e-3)",
    "b32_400_ld1": "`tiny`, the same + `--layer_decay 1.0`",
    "b32_400_ld1_mean": "`tiny_mean` (head on the mean of the patch tokens), the same",
    "b32_400_ld1_mean_lr4e3": "`tiny_mean`, the same + `--learning_rate 4e-3`",
    "b32_400_mean_lr4e3": "`tiny_mean`, the same with layer decay 0.65 (the default)",
    "b32_400_ld1_mean_lr4e3_spe": "`tiny_spe_mean` (plain patch embedding), b32, 400 steps, layer decay 1, lr 4e-3",
    "b32_400_ld1_mean_lr4e3_f4k": "`tiny_f4k_mean` (mel bins to 4 kHz), b32, 400 steps, layer decay 1, lr 4e-3",
    "b32_400_ld1_mean_lr4e3_small": "`small_mean` (D = 192, 4 layers), b32, 400 steps, layer decay 1, lr 4e-3",
    "docmean_lr4e3": "`tiny`, the documented command + `--classifier_pooling mean --learning_rate 4e-3`",
}


def table(result: dict) -> str:
    """The README's table: one row per recipe (run name without split and seed), mean ± std (ddof 1) over seeds."""
    import numpy as np

    rows = {}
    for name, run in result["runs"].items():
        match = re.fullmatch(r"v_(.+)_(unseen|random)_s(\d+)", name)
        if match:
            rows.setdefault(match.group(1), {}).setdefault(match.group(2), []).append(run)
    lines = ["| recipe (flags) | unseen phrases: mean ± std (per seed) | final loss | random split: mean ± std (per "
             "seed) | final loss |", "|---|---|---|---|---|"]
    for recipe, splits in rows.items():
        cells = []
        for split in ("unseen", "random"):
            runs = sorted(splits.get(split, []), key=lambda r: r["settings"]["seed"])
            acc = [100 * r["test_accuracy"] for r in runs]
            if not acc:
                cells += ["–", "–"]
                continue
            spread = f" ± {np.std(acc, ddof=1):.1f}" if len(acc) > 1 else ""
            cells += [f"{np.mean(acc):.1f}{spread} ({', '.join(f'{a:.1f}' for a in acc)})",
                      ", ".join(f"{r['final_loss']:.2f}" for r in runs)]
        lines.append(f"| {RECIPES.get(recipe, recipe)} | " + " | ".join(cells) + " |")
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
