"""The test scores X-ARES's runner wrote for `make xares-check`, one row per task and probe, one column per encoder.

X-ARES keeps a task's scores in ENV_DIR/TASK/checkpoints/ENCODER_CLASS/{mlp,knn}_score.txt (the score, then the
task's weight); this prints them as a table:

    python benchmarks/xares/scores.py ENV_DIR
"""

import argparse
from pathlib import Path

from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import UsageError, parse_command_line


def test_scores(env_dir: Path) -> dict[str, dict[str, float]]:
    """{"TASK (probe)": {encoder class: score}} from every score file under `env_dir`."""
    table: dict[str, dict[str, float]] = {}
    for path in sorted(Path(env_dir).glob("*/checkpoints/*/*_score.txt")):
        task, encoder, probe = path.parents[2].name, path.parent.name, path.name.removesuffix("_score.txt")
        table.setdefault(f"{task} ({probe})", {})[encoder] = float(path.read_text().split()[0])
    return table


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_dir", type=Path, help="X-ARES's env_root (the folder holding the task folders)")
    args = parse_command_line(parser, argv)
    table = test_scores(args.env_dir)
    if not table:
        raise UsageError(f"no X-ARES score files under {args.env_dir}/*/checkpoints/*/: run X-ARES's runner first.")
    encoders = sorted({encoder for row in table.values() for encoder in row})
    width = max(len(name) for name in table)
    print(f"{'task (probe)':<{width}}" + "".join(f"  {encoder:>18}" for encoder in encoders))
    for name, row in table.items():
        print(f"{name:<{width}}" + "".join(f"  {row[e]:>18.3f}" if e in row else f"  {'-':>18}" for e in encoders))
    return table


if __name__ == "__main__":
    run_script(main, "scores.py")
