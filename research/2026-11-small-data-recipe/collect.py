"""Reads the study's run folders (finetune.py's all_results.json and log_history.jsonl; the command, its start, the
machine load and its seconds from the runner's files in --logs) into results.json, and prints the README's table.

    python research/2026-11-small-data-recipe/collect.py --runs /tmp/smalldata/runs --logs /tmp/smalldata/logs \
        --baselines /tmp/smalldata/baseline_clip --output research/2026-11-small-data-recipe/results.json

Run names: <recipe>_<split>_s<seed>, split `random` (voices_random) or `unseen` (voices_unseen).
"""

import argparse
import json
import re
from pathlib import Path

KEPT = ("model_name_or_path", "data_root", "seed", "max_steps", "per_device_train_batch_size", "learning_rate",
        "layer_decay", "warmup_steps", "ema_decay", "weight_decay", "drop_path_rate", "spec_augment", "mixup_alpha",
        "classifier_pooling", "clip_padding", "clip_seconds", "eval_steps")


def final_loss(history: list[dict], last_steps: int = 100) -> float:
    """The mean training loss over the last `last_steps` steps (the log holds one mean per logging_steps steps)."""
    end = history[-1]["step"]
    tail = [h["loss"] for h in history if "loss" in h and h["step"] > end - last_steps]
    return sum(tail) / len(tail)


def collect(runs: Path, logs: Path, baselines: Path | None = None) -> dict:
    result = {"runs": {}, "baseline_by_clip_length": {}}
    for path in sorted(baselines.glob("*.json")) if baselines else []:  # baseline_clip.py's files
        result["baseline_by_clip_length"][path.stem] = json.loads(path.read_text())
    for path in sorted(runs.glob("*/all_results.json")):
        name = path.parent.name
        run = json.loads(path.read_text())
        history = [json.loads(line) for line in (path.parent / "log_history.jsonl").read_text().splitlines()]
        command = (logs / f"{name}.cmd").read_text().splitlines() if (logs / f"{name}.cmd").exists() else []
        log = (logs / f"{name}.log").read_text(errors="replace") if (logs / f"{name}.log").exists() else ""
        seconds = re.search(r"seconds=(\d+) end_load ([\d. ]+)", log)
        baseline = run.get("baseline", {})
        result["runs"][name] = {
            "command": command[0] if command else None,
            "started": command[1] if len(command) > 1 else None,  # the code folder, the UTC start and the load then
            "seconds": int(seconds.group(1)) if seconds else None,
            "load_at_end": seconds.group(2).strip() if seconds else None,
            "test_accuracy": run["test_score"], "best_valid_accuracy": run["best_valid_score"],
            "best_step": run["best_step"], "eval_history": run["eval_history"],
            "final_loss": final_loss(history), "loss_log": [(h["step"], round(h["loss"], 4)) for h in history],
            "baseline_test_accuracy": baseline.get("test_mean"),
            "settings": {k: run["arguments"].get(k) for k in KEPT},
        }
    for path in sorted(runs.glob("*/log_history.jsonl")):  # runs stopped before their end: what they logged
        name = path.parent.name
        if name in result["runs"]:
            continue
        history = [json.loads(line) for line in path.read_text().splitlines()]
        command = (logs / f"{name}.cmd").read_text().splitlines()
        log = (logs / f"{name}.log").read_text(errors="replace")
        evaluations = re.findall(r"step (\d+): validation ([\d.]+) \(selected step (\d+), test there ([\d.]+)\)", log)
        seconds = re.search(r"seconds=(\d+) end_load ([\d. ]+)", log)
        result.setdefault("stopped_runs", {})[name] = {
            "command": command[0], "started": command[1], "stopped_after_step": history[-1]["step"],
            "seconds": int(seconds.group(1)) if seconds else None,
            "evaluations": [{"step": int(s), "valid_score": float(v), "selected_step": int(b), "test_there": float(t)}
                            for s, v, b, t in evaluations],
            "loss_log": [(h["step"], round(h["loss"], 4)) for h in history]}
    return result


RECIPES = {  # recipe name -> what the runs did (every one: `tiny` unless said, lr 4e-3, layer decay 1, batch 32)
    "ceil_on": "`tiny`, mean pooling, 1,500 steps, regularisers on (SpecAugment, drop path 0.1, weight decay 0.05, "
               "EMA 0.9933)",
    "ceil_off": "the same, regularisers off (`--spec_augment false --drop_path_rate 0 --weight_decay 0 "
                "--ema_decay 0`)",
    "small_on": "`small` (D = 192, 4 layers), mean pooling, 750 steps, regularisers on",
    "preset": "the documented command: `--config examples/configs/finetune/small_folder.json` (= regularisers on + "
              "`--clip_padding masked`)",
    "preset_clip2": "the same + `--clip_seconds 2.0`",
    "small_lr1e3": "`small` (D = 192, 4 layers), lr 1e-3, 750 steps, regularisers on",
}


# The run of the preset's recipe given as flags before the preset existed: its resolved arguments (all_results.json)
# equal those of the preset's runs but for the seed and the output folder, so it is the preset's seed-0 random run.
ALIASES = {"ceil_on_masked": "preset"}


def table(result: dict) -> str:
    """The README's table: one row per recipe, mean ± std (ddof 1) over seeds per split, final loss per seed."""
    import numpy as np

    rows = {}
    for name, run in result["runs"].items():
        match = re.fullmatch(r"(.+)_(unseen|random)_s(\d+)(?:_\d+)?", name)
        if match:
            rows.setdefault(ALIASES.get(match.group(1), match.group(1)), {}).setdefault(match.group(2), []).append(run)
    lines = ["| recipe | random split: mean ± std (per seed) | final loss | unseen phrases: mean ± std (per seed) | "
             "final loss |", "|---|---|---|---|---|"]
    for recipe, splits in sorted(rows.items(), key=lambda item: list(RECIPES).index(item[0])
                                 if item[0] in RECIPES else len(RECIPES)):
        cells = []
        for split in ("random", "unseen"):
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
    parser.add_argument("--baselines", type=Path, help="baseline_clip.py's output folder")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    result = collect(args.runs, args.logs, args.baselines)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
