"""The study's table from its runs (runs.py's folders, /tmp/uw/runs/<task>/<lever>/seed<k>): per task and lever the
test accuracy on the held-out voices, mean ± std over seeds (ddof 1), the paired difference to the preset's run of the
same seed, the log-mel baseline each run printed beside it, and the model / baseline ratio.

    python research/2026-12-unseen-words/collect.py --output research/2026-12-unseen-words/results.json
"""

import argparse
import json
from pathlib import Path

import numpy as np

RUNS = Path("/tmp/uw/runs")


def read(folder: Path) -> dict | None:
    path = folder / "all_results.json"
    if not path.is_file():
        return None
    results = json.loads(path.read_text())
    return {
        "test": results["test_mean"],
        "baseline": results.get("baseline", {}).get("test_mean"),
        "warning": results.get("unseen_sources_warning"),
    }


def mean_std(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    table = {}
    for task_dir in sorted(p for p in RUNS.iterdir() if p.is_dir()):
        preset = {s.name: read(s) for s in (task_dir / "preset").glob("seed*")}
        for lever_dir in sorted(p for p in task_dir.iterdir() if p.is_dir()):
            runs = {s.name: read(s) for s in sorted(lever_dir.glob("seed*")) if s.is_dir()}
            runs = {seed: r for seed, r in runs.items() if r is not None}
            if not runs:
                continue
            tests = [r["test"] for r in runs.values()]
            baselines = [r["baseline"] for r in runs.values() if r["baseline"] is not None]
            paired = [r["test"] - preset[s]["test"] for s, r in runs.items() if preset.get(s)]
            entry = {
                "seeds": sorted(runs),
                "test": mean_std(tests),
                "baseline": mean_std(baselines) if baselines else None,
                "ratio_to_baseline": float(np.mean(tests) / np.mean(baselines)) if baselines else None,
                "paired_to_preset": mean_std(paired) if paired else None,
                "warned": sum(r["warning"] is not None for r in runs.values()),
            }
            table.setdefault(task_dir.name, {})[lever_dir.name] = entry
            paired = entry["paired_to_preset"]
            paired_text = f"{100 * paired[0]:+.1f} ± {100 * paired[1]:.1f}" if paired else "(no preset run)"
            print(
                f"{task_dir.name:8s} {lever_dir.name:16s} {100 * entry['test'][0]:5.1f} ± {100 * entry['test'][1]:4.1f}"
                f"  paired {paired_text:>13s}  baseline {100 * (entry['baseline'] or (0, 0))[0]:5.1f}"
                f"  ratio {entry['ratio_to_baseline'] or 0:.2f}  warned {entry['warned']}/{len(runs)}"
            )
    args.output.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
