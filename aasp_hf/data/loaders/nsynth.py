# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""NSynth (11 instrument families, official train/valid/test splits)."""

import json
from pathlib import Path

from datasets import ClassLabel, Value

from .layout import audio_features, build_dataset_dict, check_audio_files, check_labels, require_file


NSYNTH_FAMILIES = [
    "bass",
    "brass",
    "flute",
    "guitar",
    "keyboard",
    "mallet",
    "organ",
    "reed",
    "string",
    "synth_lead",
    "vocal",
]  # instrument_family 0..10
NSYNTH_SOURCE = (
    "It ships inside nsynth-{split}.jsonwav.tar.gz (https://magenta.tensorflow.org/datasets/nsynth): a JSON object "
    "note_str -> {{note_str, instrument_family_str, pitch, velocity, ...}}; "
    "audio in nsynth-{split}/audio/<note_str>.wav."
)


def load_nsynth(root, *, streaming=False, num_shards=None):
    """NSynth, 11 instrument families: {"train", "validation", "test"} from nsynth-{train,valid,test}/examples.json
    (official splits of 305,979 notes: 289,205 / 12,678 / 4,096).

    Columns: audio, label (instrument_family_str), pitch (MIDI 0-127), velocity, instrument_source_str, note_str.
    """
    root = Path(root)
    features = audio_features(
        label=ClassLabel(names=NSYNTH_FAMILIES),
        pitch=Value("int32"),
        velocity=Value("int32"),
        instrument_source_str=Value("string"),
        note_str=Value("string"),
    )
    splits = {}
    for split, folder in (("train", "nsynth-train"), ("validation", "nsynth-valid"), ("test", "nsynth-test")):
        meta = require_file(
            root / folder / "examples.json", f"NSynth {folder}/examples.json", NSYNTH_SOURCE.format(split=folder[7:])
        )
        with open(meta, encoding="utf-8") as f:
            examples = json.load(f)
        notes = sorted(examples)
        check_labels({examples[n]["instrument_family_str"] for n in notes}, NSYNTH_FAMILIES, str(meta))
        paths = [str(root / folder / "audio" / f"{n}.wav") for n in notes]
        check_audio_files(paths, meta, root / folder / "audio")
        splits[split] = {
            "audio": paths,
            "label": [NSYNTH_FAMILIES.index(examples[n]["instrument_family_str"]) for n in notes],
            "pitch": [int(examples[n]["pitch"]) for n in notes],
            "velocity": [int(examples[n]["velocity"]) for n in notes],
            "instrument_source_str": [examples[n].get("instrument_source_str", "") for n in notes],
            "note_str": notes,
        }
    return build_dataset_dict(splits, features, streaming, num_shards)
