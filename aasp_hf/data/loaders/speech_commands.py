# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Speech Commands v2 (35 words, official validation/testing lists)."""

import os
from pathlib import Path

from datasets import ClassLabel, Value

from .layout import (
    audio_features,
    build_dataset_dict,
    check_audio_files,
    check_labels,
    require_dir,
    require_file,
)


SCV2_WORDS = sorted(
    "backward bed bird cat dog down eight five follow forward four go happy house learn left marvin nine no off on "
    "one right seven sheila six stop three tree two up visual wow yes zero".split()
)  # the 35 words of v0.02
SCV2_SOURCE = (
    "It ships inside speech_commands_v0.02.tar.gz (http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz): "
    "one relative path per line, e.g. 'right/bb05582b_nohash_3.wav'."
)


def _read_list(path: Path) -> list:
    with open(path, encoding="utf-8") as f:
        return [line.strip().replace("\\", "/") for line in f if line.strip()]


def load_speech_commands(root, *, streaming=False, num_shards=None):
    """Speech Commands v2, 35 classes: {"train", "validation", "test"} from validation_list.txt / testing_list.txt
    (official split of the 105,829 clips: 84,843 / 9,981 / 11,005).

    Every `<word>/*.wav` not in either list is training data; `_background_noise_` is excluded. The label set is
    the official 35 words (a folder of another name raises a ValueError). Columns: audio, label, speaker_id.
    """
    root = require_dir(root, "Speech Commands v2 root", "Point root at the extracted speech_commands_v0.02 folder.")
    lists = {}
    for split, filename in (("validation", "validation_list.txt"), ("test", "testing_list.txt")):
        lists[split] = _read_list(require_file(root / filename, f"Speech Commands v2 {filename}", SCV2_SOURCE))
    words = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith(("_", ".")))
    check_labels(words, SCV2_WORDS, f"{root} (class folders)")
    all_files = sorted(f"{w}/{f}" for w in words for f in os.listdir(root / w) if f.endswith(".wav"))
    held_out = set(lists["validation"]) | set(lists["test"])
    for split, entries in lists.items():
        check_labels({e.split("/")[0] for e in entries}, SCV2_WORDS, f"{root / (split + '_list.txt')}")
        check_audio_files([str(root / e) for e in entries], f"{split} list", root)
    entries_by_split = {"train": [f for f in all_files if f not in held_out], **lists}
    features = audio_features(label=ClassLabel(names=SCV2_WORDS), speaker_id=Value("string"))
    splits = {
        split: {
            "audio": [str(root / e) for e in entries],
            "label": [SCV2_WORDS.index(e.split("/")[0]) for e in entries],
            "speaker_id": [e.split("/")[1].split("_nohash_")[0] for e in entries],
        }
        for split, entries in entries_by_split.items()
    }
    return build_dataset_dict(splits, features, streaming, num_shards)
