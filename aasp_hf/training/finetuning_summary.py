"""The results of `examples/finetune.py`'s sweep over parts (the test folds of a K-fold task, or the one split) ×
seeds: `sweep_summary` gathers the sub-runs' results with the test score's mean ± std over seeds of the mean over
parts (the paper's protocol: 3 seeds) and the protocol that produced them; `write_summary` writes it
(all_results.json, results.md), prints its line and adds the log-mel baseline on the same parts and clips beside it
(`aasp_hf.evaluation.baseline`, docs/downstream.md#the-log-mel-baseline)."""

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..evaluation import baseline as logmel_baseline
from ..evaluation import mean_std, write_finetune_markdown
from ..utils.files import write_text_atomically
from .finetuning_loop import EVAL_CROP_SEED

# what the summary of a single run (one part, one seed) repeats from that run's results
SINGLE_RUN_FIELDS = (
    "best_valid_score",
    "best_step",
    "test_score",
    "step",
    "finished",
    "decode_failures",
    "gradient_accumulation_steps",
    "total_train_batch_size",
    "eval_history",
)


def sweep_summary(
    args, runs: list[dict], task: str, num_classes: int, clip_seconds: float, parts, selection_rule: str, kfold: bool
) -> dict:
    """The sweep's results: `runs` (one dict per (part, seed) sub-run, with its "part" and "seed"), the test score
    per seed (the mean over parts) and its mean ± std over seeds (ddof=1), the task and the model selection."""
    seeds = args.seeds or [args.seed]
    per_seed = [float(np.mean([r["test_score"] for r in runs if r["seed"] == s])) for s in seeds]
    test_mean, test_std = mean_std(per_seed)
    single = len(parts) == 1 and len(seeds) == 1
    return {
        "task": task,
        "model_name_or_path": str(args.model_name_or_path),
        "metric": runs[0]["metric"],
        "num_classes": num_classes,
        "clip_seconds": clip_seconds,
        "parts": list(parts),
        "seeds": seeds,
        "max_steps": args.max_steps,
        "select_on": args.select_on,
        "selection_rule": selection_rule,
        "kfold_validation": args.kfold_validation if kfold and args.select_on == "validation" else None,
        "test_per_seed": dict(zip(map(str, seeds), per_seed)),
        "test_mean": test_mean,
        "test_std": test_std,
        "runs": runs,
        **({k: runs[0][k] for k in SINGLE_RUN_FIELDS} if single else {}),
        "arguments": asdict(args),
    }


def write_summary(summary: dict, args, parts: dict, multi_label: bool, event_labels: list | None = None) -> dict:
    """On the main process: `summary` written to --output_dir (all_results.json, results.md) and its line printed,
    then the log-mel baseline on the same parts and clips computed and written beside it (its crops from the
    evaluation's seeds, EVAL_CROP_SEED + the split's index). Returns the summary, with the baseline."""
    if int(os.environ.get("RANK", "0")) != 0:
        return summary
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    def write(summary):
        write_text_atomically(output_dir / "all_results.json", json.dumps(summary, indent=2))
        write_finetune_markdown(output_dir / "results.md", summary)

    write(summary)
    print(
        f"{summary['task']} {summary['metric']}: {100 * summary['test_mean']:.2f} ± {100 * summary['test_std']:.2f} "
        f"-> {output_dir}/results.md"
    )
    if event_labels is not None:  # sound events: every score's mean over runs, the per-frame log-mel baseline
        from ..evaluation import frame_detection

        summary = {**summary, "sound_events": frame_detection.mean_scores(summary["runs"])}
        write(summary)
        return frame_detection.with_frame_baseline(summary, write, args.baseline, parts, event_labels)
    summary = logmel_baseline.with_baseline(
        summary,
        write,
        args.baseline,
        parts,
        summary["clip_seconds"],
        multi_label,
        summary["num_classes"],
        args.baseline_max_clips,
        crop_seed=EVAL_CROP_SEED,
    )
    if summary.get("unseen_sources_warning"):
        warn_in_model_cards(output_dir, summary["unseen_sources_warning"])
    return summary


def warn_in_model_cards(output_dir: Path, sentence: str):
    """`sentence` added to the model card of the run (README.md in --output_dir) and of each sub-run of a sweep
    (<part>_seed<k>/README.md), so that a model shared from any of them says it."""
    for card in [output_dir / "README.md", *sorted(output_dir.glob("*_seed*/README.md"))]:
        if card.is_file() and sentence not in (text := card.read_text()):
            write_text_atomically(card, f"{text.rstrip()}\n\n## On sources training never heard\n\n**{sentence}**\n")
