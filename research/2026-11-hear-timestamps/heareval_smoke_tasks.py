"""Two tiny tasks in HEAR's on-disk format from synthetic audio, to smoke-test heareval's embedding runner on
aasp_hf.hear: a scene task (tone vs noise, multiclass) and an event task (one tone burst per clip, onsets in ms).

    python research/2026-11-hear-timestamps/heareval_smoke_tasks.py tasks

Layout (what heareval.embeddings.runner reads): TASK/task_metadata.json, TASK/labelvocabulary.csv, TASK/SPLIT.json
({file: labels}; for events a list of {"label", "start", "end"} in ms) and TASK/16000/SPLIT/FILE.wav.
"""

import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

SR = 16000
SECONDS = 2.0
SPLITS = {"train": 12, "valid": 4, "test": 4}


def write_task(root: Path, task: str, embedding_type: str, prediction_type: str, splits: dict, labels: list):
    folder = root / task
    metadata = {"task_name": task, "version": "smoke", "embedding_type": embedding_type,
                "prediction_type": prediction_type, "split_mode": "trainvaltest", "sample_duration": SECONDS,
                "evaluation": ["top1_acc"] if embedding_type == "scene" else ["event_onset_200ms_fms"],
                "splits": list(splits)}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task_metadata.json").write_text(json.dumps(metadata))
    vocabulary = "".join(f"{i},{name}\n" for i, name in enumerate(labels))
    (folder / "labelvocabulary.csv").write_text("idx,label\n" + vocabulary)
    for split, items in splits.items():
        (folder / str(SR) / split).mkdir(parents=True, exist_ok=True)
        table = {}
        for name, audio, label in items:
            sf.write(folder / str(SR) / split / name, audio.astype(np.float32), SR)
            table[name] = label
        (folder / f"{split}.json").write_text(json.dumps(table))


def main(argv=None):
    root = Path((argv if argv is not None else sys.argv[1:])[0])
    rng = np.random.default_rng(0)
    t = np.arange(int(SECONDS * SR)) / SR

    def tone(onset, offset):
        return 0.3 * np.sin(2 * np.pi * rng.uniform(300, 3000) * t) * ((t >= onset) & (t < offset))

    scene, event = {}, {}
    for split, count in SPLITS.items():
        scene[split], event[split] = [], []
        for i in range(count):
            noise = 0.01 * rng.standard_normal(t.size)
            kind = "tone" if i % 2 == 0 else "noise"
            scene[split].append((f"{split}{i}.wav", noise + (tone(0, SECONDS) if kind == "tone" else 0), [kind]))
            onset = rng.uniform(0.2, 1.2)
            offset = onset + rng.uniform(0.3, 0.6)
            event[split].append((f"{split}{i}.wav", noise + tone(onset, offset),
                                 [{"label": "tone", "start": 1000 * onset, "end": 1000 * offset}]))
    write_task(root, "smoke-scene", "scene", "multiclass", scene, ["tone", "noise"])
    write_task(root, "smoke-event", "event", "multilabel", event, ["tone"])


if __name__ == "__main__":
    main()
