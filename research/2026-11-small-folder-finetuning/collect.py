"""Collects the study's runs into results.json: for every run folder <runs>/<group>_s<seed>/ (all_results.json,
log_history.jsonl, and <runs>/<group>_s<seed>.log from run_one.sh) the test accuracy, the last logged training loss,
the seconds it took and the settings it resolved; per group, mean ± std over its seeds (sample std, ddof=1, as the
scripts' mean_std).

    python research/2026-11-small-folder-finetuning/collect.py --runs /tmp/sf/runs \
        --output research/2026-11-small-folder-finetuning/results.json
"""

import argparse
import json
import re
from pathlib import Path

import numpy as np

SETTINGS = ("learning_rate", "ema_decay", "warmup_steps", "per_device_train_batch_size", "layer_decay", "max_steps")

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    groups = {}
    for folder in sorted(p for p in args.runs.iterdir() if (p / "all_results.json").is_file()):
        match = re.fullmatch(r"(.+)_s(\d+)", folder.name)
        group, seed = (match.group(1), int(match.group(2))) if match else (folder.name, 0)
        result = json.loads((folder / "all_results.json").read_text())
        seconds = Path(f"{folder}.log").read_text().split("seconds ")[-1].split()[0]
        groups.setdefault(group, []).append({
            "seed": seed, "test_accuracy": result["test_score"],
            "final_train_loss": json.loads((folder / "log_history.jsonl").read_text().splitlines()[-1])["loss"],
            "seconds": int(seconds), "settings": {k: result["arguments"][k] for k in SETTINGS}})
    table = {}
    for group, runs in groups.items():
        scores = [r["test_accuracy"] for r in runs]
        table[group] = {"mean": float(np.mean(scores)),
                        "std": float(np.std(scores, ddof=1)) if len(scores) > 1 else None, "runs": runs}
        print(f"{group}: {100 * np.mean(scores):.1f}"
              f"{f' ± {100 * np.std(scores, ddof=1):.1f}' if len(scores) > 1 else ''} "
              f"({', '.join(f'{100 * s:.1f}' for s in scores)}); loss "
              f"{np.mean([r['final_train_loss'] for r in runs]):.2f}; {sum(r['seconds'] for r in runs)} s")
    args.output.write_text(json.dumps({"chance": 0.1, "classes": 10, "train_clips": 99, "validation_clips": 11,
                                       "test_clips": 40, "groups": table}, indent=2) + "\n")
