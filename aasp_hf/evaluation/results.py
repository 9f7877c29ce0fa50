# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Scores and summaries of the downstream scripts (paper Sec. Training Setup).

- `classification_score`: accuracy / mAP for model selection in the loop (mAP by the function of the shipped
  `evaluate` module, `aasp_hf.metrics.average_precision.mean_average_precision`, which reports the final scores).
- `mean_std`, `write_finetune_markdown`, `write_linear_eval_markdown`: the scripts' summaries over seeds and parts
  (mean ± std with ddof=1) and their `results.md` tables (written whole or not at all), each followed by the log-mel baseline's section
  (`baseline_markdown`; the baseline itself: `aasp_hf.evaluation.baseline`).
"""

from pathlib import Path

import numpy as np

from ..utils.files import write_text_atomically
from ..metrics.average_precision import mean_average_precision


def classification_score(logits: np.ndarray, labels: np.ndarray, multi_label: bool) -> float:
    """Accuracy (single-label, labels (N,)) or macro mAP over classes with positives (multi-label, (N, C))."""
    if not multi_label:
        return float((logits.argmax(-1) == labels).mean())
    return mean_average_precision(logits, labels)


def mean_std(values, single_std: float = 0.0) -> tuple[float, float]:
    """(mean, sample std with ddof=1) of the per-seed scores; the std of a single value is `single_std` (0, or NaN
    where a table should show it as undefined)."""
    values = np.asarray(values, dtype=np.float64)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else single_std


def write_finetune_markdown(path: Path, summary: dict):
    """examples/finetune.py's `results.md`: one row per (part, seed) sub-run, then the test mean ± std (×100)."""
    metric = summary["metric"]
    lines = [
        f"# Fine-tuning: {summary['task']} ({summary['model_name_or_path']})",
        "",
        f"{metric} (×100) on test within {summary['max_steps']} steps; mean ± std over seeds "
        f"{summary['seeds']} of the mean over parts {summary['parts']}.",
        "",
        f"Model selection (`--select_on {summary['select_on']}`): {summary['selection_rule']}.",
        "",
        "| part | seed | selected step | valid | test |",
        "|---|---|---|---|---|",
    ]
    for r in summary["runs"]:
        valid = f"{100 * r['best_valid_score']:.2f}" if r.get("select_on", "validation") == "validation" else "–"
        lines.append(f"| {r['part']} | {r['seed']} | {r['best_step']} | {valid} | {100 * r['test_score']:.2f} |")
    lines += [
        "",
        f"**{summary['task']} {metric}: {100 * summary['test_mean']:.2f} ± {100 * summary['test_std']:.2f}**",
        "",
    ]
    if "sound_events" in summary:  # every detection score, and the per-frame baseline's beside them
        from .frame_detection import sound_events_markdown

        lines += sound_events_markdown(summary)
        write_text_atomically(path, "\n".join(lines))
        return
    write_text_atomically(path, "\n".join(lines + baseline_markdown(summary)))


def write_linear_eval_markdown(path: Path, results: dict):
    """examples/linear_eval.py's `results.md`: one row per (part, seed) with the chosen lr, then mean ± std (×100)."""
    metric = results["metric"]
    lines = [
        f"# Linear evaluation: {results['task']} ({results['model_name_or_path']})",
        "",
        f"{metric} (×100), mean ± std over seeds {results['seeds']}; per seed the mean over parts "
        f"{results['parts']}. Learning rates {results['learning_rates']}, {results['max_steps']} steps.",
        "",
        f"Validation: {results['validation_rule']}.",
        "",
        "| part | seed | chosen lr | best step | valid | test |",
        "|---|---|---|---|---|---|",
    ]
    for run in results["runs"]:
        lines.append(
            f"| {run['part']} | {run['seed']} | {run['chosen_learning_rate']:g} | "
            f"{run['best_steps'][run['chosen_index']]} | {100 * run['valid_score']:.2f} | "
            f"{100 * run['test_score']:.2f} |"
        )
    lines += [
        "",
        f"**{results['task']} {metric}: {100 * results['test_mean']:.2f} ± {100 * results['test_std']:.2f}**",
        "",
    ]
    write_text_atomically(path, "\n".join(lines + baseline_markdown(results)))


def baseline_markdown(summary: dict) -> list[str]:
    """The lines after a `results.md` score: the verdict (the model is below, equal to or above the log-mel
    baseline), then the baseline's section (its settings, one row per part, its mean over parts); none without a
    baseline."""
    baseline = summary.get("baseline")
    if not baseline:
        return []
    lines = [f"**The model is {summary['baseline_verdict']}.**", ""] if summary.get("baseline_verdict") else []
    if summary.get("unseen_sources_warning"):
        lines += [f"**{summary['unseen_sources_warning']}**", ""]
    lines += [f"## Baseline: {baseline['name']}", ""]
    if "error" in baseline:
        return lines + [f"Not computed: {baseline['error']}.", ""]
    s = baseline["settings"]
    cut = f"cut here: {', '.join(baseline['capped'])}" if baseline["capped"] else "no split was cut"
    lines += [
        f"{s['front_end']}; {s['features']}; {s['probe']}; C from {s['C_grid']} chosen on the validation "
        f"split (without one: on 10 % of the train clips held out, seed 0, then refitted on all). The same "
        f"parts, clips and crops as the model; deterministic, so the same for every seed. At most "
        f"{s['max_clips_per_split'] or 'all'} clips per split ({cut}); {baseline['seconds']:.1f} s.",
        "",
        "| part | C | train clips | valid | test |",
        "|---|---|---|---|---|",
    ]
    for part, p in baseline["parts"].items():
        train = p["clips"]["train"]
        lines.append(
            f"| {part} | {p['C']:g} | {train['used']} of {train['of']} | {100 * p['valid_score']:.2f} | "
            f"{100 * p['test_score']:.2f} |"
        )
    lines += [
        "",
        f"**baseline {summary['metric']}: {100 * baseline['test_mean']:.2f}** (mean over parts; the model: "
        f"{100 * summary['test_mean']:.2f})",
        "",
    ]
    return lines
