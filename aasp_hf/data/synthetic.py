# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Synthetic audio that needs no download: the demo's five classes, for the examples' `--synthetic_*` options and the
tests.

The classes differ in modulation and spectral content: a steady tone, the same carrier amplitude-modulated at 4 Hz
and at 30 Hz (30 Hz lies in the alias-prone band, 3.125–50 Hz at a 10 ms hop and 16-frame patches, that a 16×16
patch embedding folds down), a chirp and noise bursts. Every clip is a pure function of its label and of the numpy
generator it draws from, so a seed fixes a whole data set.

- `synth_clip(label, rng, seconds)`: one float32 clip at 16 kHz.
- `labelled_clips(num_per_class, rng)`: (clips, labels) of every class, shuffled (examples/demo.py).
- `unlabelled_clips(num_clips, seed, seconds)`: the classes in turn, for pre-training and shift consistency.
- `synthetic_splits(per_class, seed, ...)`: {"train", "validation", "test"} rows in the layout of `data.load`'s
  datasets (`{"audio": {"array", "sampling_rate"}, "label" | "labels"}`), for fine-tuning and linear evaluation.
"""

import math

import numpy as np

from .decoding import SAMPLING_RATE


LABELS = ["tone", "am_4hz", "am_30hz", "chirp", "noise_bursts"]


def synth_clip(label: str, rng: np.random.Generator, seconds: float = 1.0) -> np.ndarray:
    """One float32 clip of `label` at 16 kHz with random carrier, level and background noise."""
    t = np.arange(int(seconds * SAMPLING_RATE)) / SAMPLING_RATE
    carrier = rng.uniform(300.0, 3000.0)
    phase = rng.uniform(0, 2 * math.pi)
    if label == "tone":
        x = np.sin(2 * math.pi * carrier * t + phase)
    elif label.startswith("am_"):
        rate = float(label[3:-2]) * rng.uniform(0.9, 1.1)
        envelope = 0.5 * (1 + np.sin(2 * math.pi * rate * t + rng.uniform(0, 2 * math.pi)))
        x = envelope * np.sin(2 * math.pi * carrier * t + phase)
    elif label == "chirp":
        f0, f1 = sorted(rng.uniform(200.0, 4000.0, size=2))
        if rng.random() < 0.5:
            f0, f1 = f1, f0
        x = np.sin(2 * math.pi * (f0 * t + 0.5 * (f1 - f0) / seconds * t**2) + phase)
    elif label == "noise_bursts":
        gate = np.zeros_like(t)
        for start in rng.uniform(0, seconds - 0.1, size=rng.integers(2, 5)):
            gate[(t >= start) & (t < start + rng.uniform(0.03, 0.1))] = 1.0
        x = gate * rng.standard_normal(t.shape)
    else:
        raise ValueError(f"unknown label {label!r}: use one of {LABELS}")
    x = rng.uniform(0.1, 0.8) * x / (np.abs(x).max() + 1e-8)
    x = x + rng.uniform(0.001, 0.02) * rng.standard_normal(t.shape)
    return x.astype(np.float32)


def labelled_clips(num_per_class: int, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """(clips, label ids (N,)): `num_per_class` 1-s clips of every class, in a random order drawn from `rng`."""
    clips, labels = [], []
    for label_id, label in enumerate(LABELS):
        for _ in range(num_per_class):
            clips.append(synth_clip(label, rng))
            labels.append(label_id)
    order = rng.permutation(len(clips))
    return [clips[i] for i in order], np.asarray(labels)[order]


def unlabelled_clips(num_clips: int, seed: int, seconds: float = 1.0) -> list[np.ndarray]:
    """`num_clips` clips of the classes in turn (tone, am_4hz, ...), drawn from `numpy.random.default_rng(seed)`."""
    rng = np.random.default_rng(seed)
    return [synth_clip(LABELS[i % len(LABELS)], rng, seconds) for i in range(num_clips)]


def synthetic_splits(
    per_class: int, seed: int, *, seconds: float = 1.25, test_seconds: float | None = None, multi_label: bool = False
) -> dict:
    """{split: rows {"audio": {"array", "sampling_rate"}, "label" | "labels"}}: `per_class` train clips per class and
    max(2, per_class // 2) validation and test clips, each split in a random order.

    Clips last `seconds` (test clips `test_seconds`, default the same). Multi-label rows carry `labels`, the sorted ids
    of one or two classes whose clips are averaged. All draws come from one `numpy.random.default_rng(seed)`, split
    after split, class after class.
    """
    rng = np.random.default_rng(seed)
    counts = {"train": per_class, "validation": max(2, per_class // 2), "test": max(2, per_class // 2)}
    splits = {}
    for split, count in counts.items():
        length = test_seconds if split == "test" and test_seconds is not None else seconds
        rows = []
        for label_id, label in enumerate(LABELS):
            for _ in range(count):
                if not multi_label:
                    audio = synth_clip(label, rng, length)
                    rows.append({"audio": {"array": audio, "sampling_rate": SAMPLING_RATE}, "label": label_id})
                    continue
                ids = sorted({label_id, int(rng.integers(len(LABELS)))})
                audio = sum(synth_clip(LABELS[i], rng, length) for i in ids) / len(ids)
                rows.append(
                    {"audio": {"array": audio.astype(np.float32), "sampling_rate": SAMPLING_RATE}, "labels": ids}
                )
        splits[split] = [rows[i] for i in rng.permutation(len(rows))]
    return splits


def write_soundscapes(root, files_per_split=None, seconds: float = 6.0, labels=("tone", "chirp"), seed=0):
    """Writes a folder of synthetic soundscapes in DCASE's layout for sound event detection: `root/<split>/*.wav`
    (16 kHz) and `root/<split>.tsv` (`filename  onset  offset  event_label`, tab-separated, a header line). Each
    recording is quiet noise with 0 to 2 events of `labels` (synth clips of 0.5 to 1.5 s) at random times, events of
    one label never overlapping; a recording with no event has no row. Returns {split: [(filename, onset, offset, label), ...]}."""
    import soundfile as sf
    from pathlib import Path

    files_per_split = files_per_split or {"train": 12, "validation": 4, "test": 4}
    rng, root, written = np.random.default_rng(seed), Path(root), {}
    for split, count in files_per_split.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        rows = []
        for index in range(count):
            name = f"soundscape_{split}_{index:03d}.wav"
            audio = 0.003 * rng.standard_normal(int(seconds * SAMPLING_RATE)).astype(np.float32)
            taken = []  # (onset, offset, label) placed so far: events of one label do not overlap
            for _ in range(int(rng.integers(0, 3))):
                label = str(rng.choice(list(labels)))
                length = float(rng.uniform(0.5, 1.5))
                onset = round(float(rng.uniform(0.0, seconds - length)), 3)
                if any(c == label and onset < b and a < onset + length for a, b, c in taken):
                    continue
                taken.append((onset, onset + length, label))
                start = int(round(onset * SAMPLING_RATE))
                event = synth_clip(label, rng, length)
                audio[start : start + len(event)] += event
                rows.append((name, onset, round(onset + len(event) / SAMPLING_RATE, 3), label))
            sf.write(root / split / name, np.clip(audio, -1, 1), SAMPLING_RATE)
        lines = ["filename\tonset\toffset\tevent_label"] + [f"{n}\t{a:.3f}\t{b:.3f}\t{c}" for n, a, b, c in rows]
        (root / f"{split}.tsv").write_text("\n".join(lines) + "\n")
        written[split] = rows
    return written
