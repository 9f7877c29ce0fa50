# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Training windows of strongly labelled recordings, with one target per output frame of the frame classifier.

A sound-event record (`loaders.sound_events`) is a recording of any length with its events (onset, offset, label).
The frame classifier (`AaspForAudioFrameClassification`) gives one output per patch column: `time_patch_size`
spectrogram frames, 0.16 s at the paper's 10-ms hop and 16-frame patches (Sec. 3.1). Training cuts a window of
`clip_seconds` from each recording (at random for training, the first one otherwise) and gives each column of the
window, for each label, the fraction of the column that an event of that label covers: 1 inside an event, 0 in
silence (no label: nothing is happening), between the two where an event starts or ends within the column. The loss
is binary cross-entropy on these soft targets, as for multi-label clips.

Column `t` of a window starting at `start` seconds covers [start + t·d, start + (t+1)·d), d the column's duration:
spectrogram frame n of the window is centred at n·hop, and column t holds frames 16t .. 16t+15.
"""

import logging

import numpy as np
import torch

from .collators import trained_max_frames
from .decoding import SAMPLING_RATE, SafeAudioDecoder

logger = logging.getLogger(__name__)


def event_list(example) -> list[tuple[float, float, int]]:
    """The (onset, offset, label id) of a record's events, from its `events` column: a list of {onset, offset,
    label} dicts or the dict of lists that `datasets` makes of a sequence of dicts."""
    events = example["events"]
    if isinstance(events, dict):  # {"onset": [...], "offset": [...], "label": [...]}
        return [(float(a), float(b), int(c)) for a, b, c in zip(events["onset"], events["offset"], events["label"])]
    return [(float(e["onset"]), float(e["offset"]), int(e["label"])) for e in events]


def frame_targets(events, start: float, num_columns: int, column_seconds: float, num_labels: int) -> np.ndarray:
    """(num_columns, num_labels) float32: the fraction of each column of a window starting at `start` seconds that
    an event of each label covers (overlapping events of one label count once: the covered fraction is capped at
    1). `events`: (onset, offset, label id) in seconds from the recording's start."""
    targets = np.zeros((num_columns, num_labels), dtype=np.float64)
    column_starts = start + column_seconds * np.arange(num_columns)  # (num_columns,)
    for onset, offset, label in events:
        if not 0 <= label < num_labels:
            raise ValueError(f"event label id {label} is outside the {num_labels} labels")
        overlap = np.minimum(offset, column_starts + column_seconds) - np.maximum(onset, column_starts)
        targets[:, label] += np.clip(overlap, 0.0, None) / column_seconds
    return np.minimum(targets, 1.0).astype(np.float32)


class AaspFrameTargetsCollator:
    """Sound-event records {audio, events} -> {input_values (B, T, F), attention_mask (B, T), labels (B, T', C)}.

    Args:
        feature_extractor: an `AaspFeatureExtractor`.
        clip_seconds: the window cut from each recording (a shorter recording is padded with zeros, which are
            silence: no label).
        num_labels: C, the number of event labels.
        time_patch_size: spectrogram frames per output frame (the model's `config.time_patch_size`).
        split: "train" and "validation" cut a random window, "test" the first one.
        seed: seeds the window positions.

    T' = T / time_patch_size output frames. Records that fail to decode are dropped and counted (`num_skipped`); a
    batch where every record failed gives None, which the training loop skips.
    """

    def __init__(
        self, feature_extractor, clip_seconds, num_labels, time_patch_size=16, split="train", seed=0, decoder=None
    ):
        if split not in ("train", "validation", "valid", "test"):
            raise ValueError(f"split={split!r}: use 'train', 'validation' or 'test'.")
        self.feature_extractor = feature_extractor
        self.clip_seconds = clip_seconds
        self.num_samples = int(round(clip_seconds * SAMPLING_RATE))
        self.num_labels = num_labels
        self.time_patch_size = time_patch_size
        self.column_seconds = time_patch_size * feature_extractor.hop_length / SAMPLING_RATE
        self.random_crop = split != "test"
        self.rng = np.random.default_rng(seed)
        self.decoder = decoder or SafeAudioDecoder()

    @property
    def num_skipped(self) -> int:
        return self.decoder.num_failures

    def __call__(self, examples):
        waveforms, targets = [], []
        frames = trained_max_frames(self.feature_extractor, self.clip_seconds)
        num_columns = frames // self.time_patch_size
        for example in examples:
            waveform = self.decoder(example["audio"])
            if waveform is None:
                continue
            start = 0
            if waveform.shape[0] > self.num_samples and self.random_crop:
                start = int(self.rng.integers(0, waveform.shape[0] - self.num_samples + 1))
            window = waveform[start : start + self.num_samples]
            waveforms.append(np.pad(window, (0, self.num_samples - window.shape[0])))  # (num_samples,)
            start_seconds = start / SAMPLING_RATE
            targets.append(
                frame_targets(event_list(example), start_seconds, num_columns, self.column_seconds, self.num_labels)
            )
        if not waveforms:
            logger.warning(f"Every recording of a batch of {len(examples)} failed to decode; the batch is skipped.")
            return None
        batch = self.feature_extractor(
            waveforms, sampling_rate=SAMPLING_RATE, return_tensors="pt", padding="max_length", max_frames=frames
        )  # input_values (B, frames, F)
        batch["labels"] = torch.from_numpy(np.stack(targets))  # (B, T', C)
        return batch
