"""The study's table from its runs: per run (a finetune.py output folder) the test scores it wrote (all_results.json),
and the onset error of its events, measured here from the saved model alone: the test recordings tagged by the
detection pipeline with the saved thresholds, then for each reference event the estimated event of its label in its
file whose onset is nearest (within 1 s); median and mean |onset difference| over the events found, and how many
were found. The log-mel baseline's scores are the ones each run printed beside its own.

    python research/2026-12-sound-events/collect.py --data /tmp/sed_data --runs /tmp/study/seed0 /tmp/study/seed1 \
        --output research/2026-12-sound-events/results.json
"""

import argparse
import json
from pathlib import Path

import numpy as np

from aasp_hf import AaspFeatureExtractor, AaspForAudioFrameClassification
from aasp_hf.data import load_downstream
from aasp_hf.evaluation import frame_detection

SCORES = ("event_f1", "event_f1_micro", "segment_f1", "segment_f1_micro", "psds")


def onset_errors(model, extractor, splits, labels) -> dict:
    """|onset difference| of each reference event of the test recordings to its nearest estimated event (1-s limit)."""
    config = model.config
    scores = frame_detection.frame_scores(model, splits["test"], extractor, extractor.max_frames * 0.01, 16)
    settings = frame_detection.postprocessing_settings(config)
    estimated = frame_detection.estimated_events(scores, labels, config.frame_duration, settings)
    reference = frame_detection.reference_events(splits["test"], labels)
    errors = []
    for event in reference:
        onsets = [
            e["onset"]
            for e in estimated
            if e["filename"] == event["filename"] and e["event_label"] == event["event_label"]
        ]
        nearest = min((abs(o - event["onset"]) for o in onsets), default=None)
        if nearest is not None and nearest <= 1.0:
            errors.append(nearest)
    return {
        "onset_error_median_s": float(np.median(errors)) if errors else None,
        "onset_error_mean_s": float(np.mean(errors)) if errors else None,
        "events_found_within_1s": len(errors),
        "reference_events": len(reference),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--runs", nargs="+", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    task = load_downstream("sound_events", root=args.data, select_on="last")
    splits, labels = task.parts["official"], task.label_names
    rows = []
    for run in map(Path, args.runs):
        results = json.loads((run / "all_results.json").read_text())
        (single,) = results["runs"]
        model = AaspForAudioFrameClassification.from_pretrained(run).eval()
        extractor = AaspFeatureExtractor.from_pretrained(run)
        row = {
            "run": run.name,
            "seed": single["seed"],
            "arguments": {k: results["arguments"][k] for k in ("learning_rate", "max_steps", "seed")},
            "model": {k: single["sound_events"]["test"].get(k) for k in SCORES},
            "baseline": {k: results.get("baseline", {}).get("test", {}).get(k) for k in SCORES},
            "thresholds": single["sound_events"]["thresholds"],
            **onset_errors(model, extractor, splits, labels),
        }
        rows.append(row)
        print(json.dumps(row))
    Path(args.output).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
