"""The log-mel baseline that finetune.py writes beside its results (aasp_hf.evaluation.baseline, on finetune.py's own
parts of a split and its evaluation crops, seed 7) at the clip length finetune.py derives (the mean length of the
training clips: 1.07 s on voices_random, 1.06 s on voices_unseen), at 2.0 s and at 4.0 s (the longest clip): what
the derived crop costs the reference.

    python research/2026-11-small-data-recipe/baseline_clip.py voices_random --data /tmp/study/data \
        --output /tmp/smalldata/baseline_clip/voices_random.json
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import finetune  # noqa: E402  (examples/finetune.py: the script's own parts and clip length)

from aasp_hf.evaluation import baseline  # noqa: E402

CLIP_SECONDS = (None, 2.0, 4.0)  # None: derived

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("split")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    result = {}
    for seconds in CLIP_SECONDS:
        run = finetune.parse_args(["--model_name_or_path", "unused", "--dataset", "audiofolder", "--data_root",
                                   str(args.data / args.split)] + (["--clip_seconds", str(seconds)] if seconds else []))
        parts, multi_label, names, clip_seconds, _ = finetune.load_parts(run)
        seconds = clip_seconds
        record = baseline.log_mel_baseline(parts, clip_seconds, multi_label, len(names), crop_seed=7,
                                           log=lambda *_: None)
        result[str(seconds)] = {"test_accuracy": record["test_mean"], "C": record["parts"]["official"]["C"],
                                "seconds": record["seconds"]}
        print(args.split, seconds, result[str(seconds)], flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
