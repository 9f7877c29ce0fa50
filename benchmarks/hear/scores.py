"""Prints the test scores heareval's prediction runner wrote, one row per task and one column per module.

    python benchmarks/hear/scores.py EMBEDDINGS_DIR

EMBEDDINGS_DIR/MODULE/TASK/test.predicted-scores.json is what `python -m heareval.predictions.runner` writes for
the embeddings `python -m heareval.embeddings.runner MODULE --embeddings-dir EMBEDDINGS_DIR` wrote; a task's score is
the first of its `evaluation` list in task_metadata.json (top1_acc, event_onset_200ms_fms, ...), on its test split.
"""

import argparse
import json
import sys
from pathlib import Path


def test_scores(embeddings_dir: Path) -> dict[str, dict[str, float]]:
    """{task (score name): {module: test score}} for every scored task under `embeddings_dir`."""
    table = {}
    for path in sorted(embeddings_dir.glob("*/*/test.predicted-scores.json")):
        task_dir, module = path.parent, path.parent.parent.name
        score = json.loads((task_dir / "task_metadata.json").read_text())["evaluation"][0]
        results = json.loads(path.read_text())
        table.setdefault(f"{task_dir.name} ({score})", {})[module] = results["test"][f"test_{score}"]
    return table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("embeddings_dir", type=Path)
    args = parser.parse_args(argv)
    table = test_scores(args.embeddings_dir)
    if not table:
        sys.exit(
            f"scores.py: error: no test.predicted-scores.json under {args.embeddings_dir}/MODULE/TASK: run "
            f"heareval's embedding and prediction runners first"
        )
    modules = sorted({module for row in table.values() for module in row})
    width = max(len(task) for task in table)
    print(f"{'task (score)':<{width}}  " + "  ".join(f"{module:>14}" for module in modules))
    for task, row in table.items():
        cells = [f"{row[module]:>14.3f}" if module in row else f"{'-':>14}" for module in modules]
        print(f"{task:<{width}}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
