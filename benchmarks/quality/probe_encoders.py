#!/usr/bin/env python
"""Linear-probe exported encoders on the mini tasks with the study's protocol, outside a study.

    python benchmarks/quality/probe_encoders.py default=runs/pt/encoder random=/tmp/init --logmel \
        --out benchmarks/quality/probe.json [run.py probe flags, e.g. --probe_seeds 0 1 2 --tasks pitch]

Each NAME=FOLDER is an `AaspModel` folder (`save_pretrained`), or `NAME=FOLDER:teacher` for the EMA teacher of a
pre-training checkpoint whose FOLDER holds `config.json` (an exported encoder of the same run) and
`full_state.safetensors` (that checkpoint's `model.safetensors`, with `teacher.*` keys). Probing is
`run.Study.probe_encoder`: paper features [CLS ; time-mean per frequency row], train-only standardisation, the
linear-head lr chosen on a seeded 10 % validation split of train, whole clips (no truncation). Results are cached
by weights, config and probe protocol (tasks, probe flags, data) under `--output_dir`/`probe_encoders/evals`, so
probing an encoder again the same way costs nothing.
"""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

import run  # benchmarks/quality/run.py: this script's folder is on the import path


def teacher_folder(folder: Path, dest: Path) -> Path:
    """An AaspModel folder holding the `teacher.*` weights of `folder/full_state.safetensors`."""
    from aasp_hf import AaspFeatureExtractor, AaspModel

    model = AaspModel.from_pretrained(folder)
    state = load_file(folder / "full_state.safetensors")
    teacher = {key.removeprefix("teacher."): value for key, value in state.items() if key.startswith("teacher.")}
    missing, unexpected = model.load_state_dict(teacher, strict=False)
    persistent = {name for name, _ in model.named_parameters()} - set(teacher)
    if unexpected or persistent:
        raise ValueError(
            f"{folder}: teacher keys do not match the encoder (missing {sorted(persistent)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )
    model.save_pretrained(dest)
    AaspFeatureExtractor.from_pretrained(folder).save_pretrained(dest)
    return dest


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    pairs = [a for a in argv if "=" in a and not a.startswith("--")]
    rest = [a for a in argv if a not in pairs]
    logmel = "--logmel" in rest
    out = None
    if "--out" in rest:
        out = Path(rest[rest.index("--out") + 1])
        del rest[rest.index("--out") : rest.index("--out") + 2]
    rest = [a for a in rest if a != "--logmel"]
    args = run.parse_args(["--study", "probe_encoders", "--variants", "logmel", *rest])
    settings = run.resolve_settings(args)
    study = run.Study(args, settings, run.load_variants(args))
    study.dir.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp, run.torch_threads(1):
        if logmel:
            results["logmel"] = study.probe_logmel()
            report("logmel", results["logmel"], out, results)
        for pair in pairs:
            name, folder = pair.split("=", 1)
            folder, _, which = folder.partition(":")
            folder = Path(folder)
            if which == "teacher":
                folder = teacher_folder(folder, Path(tmp) / name)
            results[name] = study.probe_encoder(folder)
            report(name, results[name], out, results)
    return results


def report(name, result, out, results):
    """Print one line per probed encoder and rewrite `out` (all results so far)."""
    accuracy = {t: r["accuracy"] for t, r in result["tasks"].items()}
    print(
        json.dumps(
            {
                "name": name,
                **{t: round(a, 4) for t, a in accuracy.items()},
                "average": round(float(np.mean(list(accuracy.values()))), 4),
            }
        ),
        flush=True,
    )
    if out is not None:
        out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
