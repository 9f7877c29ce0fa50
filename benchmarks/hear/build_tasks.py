"""Two small tasks in HEAR's on-disk format from the package's synthetic audio, for `make hear-check`: HEAR's own
runners (heareval 2021.1.3) embed and score them, unmodified, as they do HEAR's 19 tasks.

- `synthetic-scene`: multiclass, one label per 1 s clip: the five classes of `aasp_hf.data.synthetic` (a steady tone,
  4 Hz and 30 Hz amplitude modulation, a chirp, noise bursts), scored by top-1 accuracy (`top1_acc`).
- `synthetic-event`: 3 s clips of quiet noise, each with one event of 0.4-1.0 s (a tone, a 30 Hz-modulated tone or a
  chirp) at a random onset, labels with start and end in ms, scored by onset F-measure within 200 ms
  (`event_onset_200ms_fms`, as HEAR scores DCASE 2016 task 2).

These are a smoke test of the whole path (module, embeddings on disk, heareval's probes and scores), not evidence of
quality: a handful of clips, separable by their spectra alone.

    python benchmarks/hear/build_tasks.py TASKS_DIR [--seed 0]

Layout (what heareval.embeddings.runner reads): TASK/task_metadata.json, TASK/labelvocabulary.csv (idx,label),
TASK/{train,valid,test}.json ({file name: labels}; for events a list of {"label", "start", "end"} in ms) and
TASK/16000/{train,valid,test}/FILE.wav. A task folder that already exists is left alone (delete it to rebuild).
"""

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from aasp_hf.data.synthetic import LABELS, synth_clip
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import parse_command_line

SAMPLING_RATE = 16000
SPLITS = ("train", "valid", "test")
SCENE_SECONDS = 1.0
SCENE_CLIPS_PER_CLASS = {"train": 8, "valid": 4, "test": 4}
EVENT_SECONDS = 3.0
EVENT_LABELS = ["tone", "am_30hz", "chirp"]
EVENT_CLIPS_PER_CLASS = {"train": 8, "valid": 4, "test": 4}
EVENT_MIN_SECONDS, EVENT_MAX_SECONDS = 0.4, 1.0


def write_task(folder: Path, metadata: dict, labels: list[str], splits: dict[str, list[tuple]]) -> None:
    """Writes one task: `splits` maps a split to (file name, float32 audio, labels) rows."""
    folder.mkdir(parents=True)
    (folder / "task_metadata.json").write_text(json.dumps(metadata, indent=2))
    with open(folder / "labelvocabulary.csv", "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["idx", "label"])
        writer.writerows(enumerate(labels))
    for split, rows in splits.items():
        audio_dir = folder / str(SAMPLING_RATE) / split
        audio_dir.mkdir(parents=True)
        for name, audio, _ in rows:
            sf.write(audio_dir / name, audio, SAMPLING_RATE, subtype="FLOAT")
        (folder / f"{split}.json").write_text(json.dumps({name: target for name, _, target in rows}, indent=1))


def metadata(task_name: str, embedding_type: str, prediction_type: str, seconds: float, score: str) -> dict:
    return {
        "task_name": task_name,
        "version": "synthetic",
        "embedding_type": embedding_type,
        "prediction_type": prediction_type,
        "split_mode": "trainvaltest",
        "sample_duration": seconds,
        "evaluation": [score],
        "splits": list(SPLITS),
    }


def scene_rows(rng: np.random.Generator) -> dict[str, list[tuple]]:
    splits = {}
    for split in SPLITS:
        rows = [
            (label, synth_clip(label, rng, SCENE_SECONDS))
            for label in LABELS
            for _ in range(SCENE_CLIPS_PER_CLASS[split])
        ]
        splits[split] = [(f"{split}-{i:03d}.wav", audio, [label]) for i, (label, audio) in enumerate(rows)]
    return splits


def event_rows(rng: np.random.Generator) -> dict[str, list[tuple]]:
    splits = {}
    length = int(EVENT_SECONDS * SAMPLING_RATE)
    for split in SPLITS:
        rows = []
        for label in EVENT_LABELS:
            for _ in range(EVENT_CLIPS_PER_CLASS[split]):
                seconds = rng.uniform(EVENT_MIN_SECONDS, EVENT_MAX_SECONDS)
                event = synth_clip(label, rng, seconds)
                start = int(rng.integers(0, length - event.size))
                audio = (rng.uniform(0.001, 0.01) * rng.standard_normal(length)).astype(np.float32)
                audio[start : start + event.size] += event
                target = [
                    {
                        "label": label,
                        "start": 1000 * start / SAMPLING_RATE,
                        "end": 1000 * (start + event.size) / SAMPLING_RATE,
                    }
                ]
                rows.append((audio, target))
        splits[split] = [(f"{split}-{i:03d}.wav", audio, target) for i, (audio, target) in enumerate(rows)]
    return splits


def build(tasks_dir: Path, seed: int = 0) -> list[Path]:
    """Writes both tasks under `tasks_dir` (skipping a task folder that exists); returns their folders."""
    rng = np.random.default_rng(seed)
    scene, event = scene_rows(rng), event_rows(rng)
    tasks = [
        (
            tasks_dir / "synthetic-scene",
            metadata("synthetic-scene", "scene", "multiclass", SCENE_SECONDS, "top1_acc"),
            LABELS,
            scene,
        ),
        (
            tasks_dir / "synthetic-event",
            metadata("synthetic-event", "event", "multilabel", EVENT_SECONDS, "event_onset_200ms_fms"),
            EVENT_LABELS,
            event,
        ),
    ]
    for folder, task_metadata, labels, splits in tasks:
        if folder.exists():
            print(f"{folder} exists: kept (delete it to rebuild)")
            continue
        write_task(folder, task_metadata, labels, splits)
        print(f"{folder}: " + ", ".join(f"{split} {len(rows)} clips" for split, rows in splits.items()))
    return [folder for folder, *_ in tasks]


def main(argv=None) -> list[Path]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tasks_dir", type=Path, help="folder to write the two task folders into")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_command_line(parser, argv)
    return build(args.tasks_dir, args.seed)


if __name__ == "__main__":
    run_script(main, "build_tasks.py")
