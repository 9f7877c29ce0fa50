"""Reads the study's run folders (finetune.py's all_results.json; the command and its seconds from the runner's logs)
and the seed-0 runs of research/2026-11-unseen-voices/results.json into results.json, and prints the README's tables.

    python research/2026-11-what-transfers/collect.py --runs /tmp/s60b/runs --logs /tmp/s60b/logs \
        --output research/2026-11-what-transfers/results.json

Run names: <recipe>_fold<k>_s<seed>. Every recipe but `groupval` keeps the last step (`--select_on last`), so that
a recipe is compared without the noise of a validation of two voices choosing its step.
"""

import argparse
import json
import re
from pathlib import Path

import numpy as np

KEPT = (
    "data_root",
    "model_name_or_path",
    "seed",
    "max_steps",
    "learning_rate",
    "ema_decay",
    "spec_augment",
    "spec_augment_fraction",
    "mixup_alpha",
    "classifier_pooling",
    "group_by",
    "validation_fraction",
    "select_on",
)
EARLIER = Path(__file__).resolve().parents[1] / "2026-11-unseen-voices" / "results.json"
EARLIER_NAMES = {"last": "last_fold{k}_none_s0", "groupval": "preset_fold{k}_groupval_s0"}
# Each recipe's runs are paired with the reference recipe's run of the same fold and seed: `last` but for the
# voices-seen reference, whose test is half of each fold's test clips (`seen` against `half`, the same clips).
REFERENCE = {"seen": "half", "half": None, "last": None}


def collect(runs: Path, logs: Path) -> dict:
    result = {}
    for path in sorted(runs.glob("*/all_results.json")):
        name = path.parent.name
        run = json.loads(path.read_text())
        log = (logs / f"{name}.log").read_text(errors="replace") if (logs / f"{name}.log").exists() else ""
        seconds = re.search(r"seconds=(\d+) start_load ([\d. ]+) end_load ([\d. ]+)", log)
        baseline = run["baseline"]["parts"]["official"]
        result[name] = {
            "command": (logs / f"{name}.cmd").read_text().strip() if (logs / f"{name}.cmd").exists() else None,
            "seconds": int(seconds.group(1)) if seconds else None,
            "test_accuracy": run["test_score"],
            "best_valid_accuracy": run["best_valid_score"],
            "best_step": run["best_step"],
            "eval_history": run["eval_history"],
            "baseline_test_accuracy": baseline["test_score"],
            "clips": baseline["clips"],
            "settings": {k: run["arguments"].get(k) for k in KEPT},
        }
    return result


def runs_of(result: dict, earlier: dict, recipe: str) -> dict:
    """{(fold, seed): run} of one recipe, with the earlier study's seed-0 run where this study has none."""
    found = {}
    for name, run in result.items():
        match = re.fullmatch(rf"{recipe}_fold(\d)_s(\d+)", name)
        if match:
            found[int(match.group(1)), int(match.group(2))] = run
    for k in range(4):
        if recipe in EARLIER_NAMES and (k, 0) not in found and EARLIER_NAMES[recipe].format(k=k) in earlier:
            found[k, 0] = earlier[EARLIER_NAMES[recipe].format(k=k)]
    return found


def pct(values) -> str:
    values = 100 * np.asarray(values, dtype=float)
    spread = f" ± {np.std(values, ddof=1):.1f}" if len(values) > 1 else ""
    return f"{values.mean():.1f}{spread}"


def table(result: dict, earlier: dict) -> str:
    """One row per recipe; its difference to its reference (`REFERENCE`, else `last`) is paired: the same fold and
    seed, only where both ran."""
    recipes = sorted({re.sub(r"_fold\d_s\d+$", "", name) for name in result if "_fold" in name} | set(EARLIER_NAMES))
    header = "| recipe | runs | test accuracy | per fold (seed 0) | − reference, same fold and seed | baseline | model / baseline |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    for recipe in recipes:
        runs = runs_of(result, earlier, recipe)
        if not runs:
            continue
        test = [r["test_accuracy"] for r in runs.values()]
        base = [r["baseline_test_accuracy"] for r in runs.values()]
        seed0 = {k: r["test_accuracy"] for (k, s), r in runs.items() if s == 0}
        reference = REFERENCE.get(recipe, "last")
        other = runs_of(result, earlier, reference) if reference else {}
        paired = [r["test_accuracy"] - other[key]["test_accuracy"] for key, r in sorted(runs.items()) if key in other]
        lines.append(
            f"| {recipe} | {len(runs)} (folds {sorted({k for k, _ in runs})}, seeds {sorted({s for _, s in runs})}) "
            f"| {pct(test)} | {', '.join(f'{100 * seed0[k]:.1f}' for k in sorted(seed0))} "
            f"| {f'{pct(paired)} ({len(paired)} pairs with `{reference}`)' if paired else '–'} | {pct(base)} "
            f"| {np.mean(test) / np.mean(base):.2f} |"
        )
    return "\n".join(lines)


def listed(runs: list) -> str:
    accuracies = [r["test_accuracy"] for r in runs]
    return f"{pct(accuracies)} ({', '.join(f'{100 * a:.1f}' for a in accuracies)})"


def same_voices(result: dict, earlier: dict) -> str:
    """The random split of every voice (finetune.py's own 20 % test): the preset's validation against the last step."""
    preset = [earlier[f"preset_all_random_s{s}"] for s in range(3)]
    last = [result[f"lastall_all_s{s}"] for s in range(3) if f"lastall_all_s{s}" in result]
    return f"same voices, seeds 0-2: random validation {listed(preset)}; last step {listed(last) if last else '–'}"


def validation_gaps(result: dict, earlier: dict) -> str:
    runs = runs_of(result, earlier, "groupval")
    gaps = [r["best_valid_accuracy"] - r["test_accuracy"] for r in runs.values()]
    within = sum(abs(g) <= 0.10 for g in gaps)
    return (
        f"groupval: {len(gaps)} runs, validation − test {pct(gaps)} points, within 10 points in {within} of "
        f"{len(gaps)}; per run {', '.join(f'{100 * g:+.1f}' for g in gaps)}"
    )


def seed_spread(result: dict, earlier: dict, recipe: str = "last") -> str:
    """The yardstick of a one-seed difference: the std over seeds within each fold, and what each paired difference
    of two seeds of the same recipe is."""
    runs = runs_of(result, earlier, recipe)
    folds = sorted({k for k, _ in runs})
    stds = [np.std([100 * r["test_accuracy"] for (k, _), r in runs.items() if k == fold], ddof=1) for fold in folds]
    seeds = sorted({s for _, s in runs})
    pairs = [
        100 * (runs[k, b]["test_accuracy"] - runs[k, a]["test_accuracy"])
        for k in folds
        for i, a in enumerate(seeds)
        for b in seeds[i + 1 :]
        if (k, a) in runs and (k, b) in runs
    ]
    return (
        f"{recipe}: std over seeds within a fold {', '.join(f'{v:.1f}' for v in stds)} (mean {np.mean(stds):.1f}); "
        f"seed-to-seed differences {np.mean(np.abs(pairs)):.1f} on average, at most {np.max(np.abs(pairs)):.1f}"
    )


def steps_curve(result: dict, earlier: dict) -> str:
    """The test accuracy at each evaluation of the `last` runs (every 250 steps of the one 1,500-step schedule)."""
    by_step = {}
    for run in runs_of(result, earlier, "last").values():
        for entry in run["eval_history"]:
            if entry.get("test_score") is not None:
                by_step.setdefault(entry["step"], []).append(entry["test_score"])
    return "last, test by step: " + "; ".join(f"{step}: {pct(v)} ({len(v)})" for step, v in sorted(by_step.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    result = collect(args.runs, args.logs)
    earlier = json.loads(EARLIER.read_text())
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result, earlier))
    print(validation_gaps(result, earlier))
    print(steps_curve(result, earlier))
    print(seed_spread(result, earlier))
    print(same_voices(result, earlier))
    for name, run in result.items():  # the runs on the 8-kHz voices of research/2026-11-small-data-recipe
        if name.startswith("v8"):
            print(f"{name}: test {100 * run['test_accuracy']:.1f}, baseline {100 * run['baseline_test_accuracy']:.1f}")
