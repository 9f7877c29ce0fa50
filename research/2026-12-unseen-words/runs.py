"""Runs the study: the documented small-folder command (examples/configs/finetune/small_folder.json, `--group_by` on
the voice, the study's fresh tiny encoder) on each task, once per lever and seed, two runs at a time on one thread
each; a run whose all_results.json exists is skipped, so the script goes on where it stopped. Then `collect.py`.

    python research/2026-12-unseen-words/runs.py --task words --levers preset speed vtlp eq cmvn freqmask mixup \
        shallow droppath --seeds 0 1 2
"""

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = Path("/tmp/uw/runs")
ENCODERS = {"tiny": Path("/tmp/prec/enc"), "shallow": Path("/tmp/uw/enc_shallow")}
TASKS = {  # name -> (data root, --group_by)
    "words": (Path("/tmp/words"), "^([a-z0-9-]+)_"),
    "kinds": (Path("/tmp/prec/voices/fold0"), "^([a-z0-9-]+)_"),
    "phrases": (Path("/tmp/hwp"), r"^(.+)\.wav$"),
}
LEVERS = {  # name -> extra finetune.py flags (the encoder is the tiny one unless the lever names another)
    "preset": [],
    "speed": ["--speed_perturbation", "0.9", "1.1"],
    "vtlp": ["--vtlp", "0.9", "1.1"],
    "eq": ["--random_eq_db", "6"],
    "cmvn": ["--per_clip_normalization"],
    "freqmask": ["--freq_mask_fraction", "0.4"],
    "mixup": ["--mixup_alpha", "0.5"],
    "shallow": [],
    "droppath": ["--drop_path_rate", "0.3"],
    "speed+vtlp": ["--speed_perturbation", "0.9", "1.1", "--vtlp", "0.9", "1.1"],
    "speed+vtlp+cmvn": ["--speed_perturbation", "0.9", "1.1", "--vtlp", "0.9", "1.1", "--per_clip_normalization"],
}


def command(task: str, lever: str, seed: int, out: Path) -> list[str]:
    root, group_by = TASKS[task]
    encoder = ENCODERS["shallow" if lever == "shallow" else "tiny"]
    return [
        sys.executable,
        "examples/finetune.py",
        "--config",
        "examples/configs/finetune/small_folder.json",
        "--model_name_or_path",
        str(encoder),
        "--dataset",
        "audiofolder",
        "--data_root",
        str(root),
        "--group_by",
        group_by,
        "--seed",
        str(seed),
        "--output_dir",
        str(out),
        *LEVERS[lever],
    ]


def run(task: str, lever: str, seed: int) -> str:
    out = RUNS / task / lever / f"seed{seed}"
    if (out / "all_results.json").is_file():
        return f"{task} {lever} seed {seed}: done before"
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(f"{out}.log", "w") as log:
        process = subprocess.run(
            command(task, lever, seed, out),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    return f"{task} {lever} seed {seed}: exit {process.returncode} in {time.time() - start:.0f} s"


def shallow_encoder():
    """The tiny encoder with one block instead of two, initialised from seed 0 as the study's encoder is."""
    if (ENCODERS["shallow"] / "config.json").is_file():
        return
    import torch

    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

    config = AaspConfig.from_pretrained(ENCODERS["tiny"])
    config.num_hidden_layers = 1
    torch.manual_seed(0)
    AaspModel(config).save_pretrained(ENCODERS["shallow"])
    AaspFeatureExtractor.from_pretrained(ENCODERS["tiny"]).save_pretrained(ENCODERS["shallow"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=TASKS, required=True)
    parser.add_argument("--levers", nargs="+", choices=LEVERS, required=True)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args()
    shallow_encoder()
    jobs = [(args.task, lever, seed) for seed in args.seeds for lever in args.levers]
    with ThreadPoolExecutor(args.parallel) as pool:
        for line in pool.map(lambda job: run(*job), jobs):
            print(line, flush=True)


if __name__ == "__main__":
    main()
