# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Fine-tuning collator: decode (skipping bad clips), crop/pad to the task's EVAR clip length, featurise.

(The pre-training crop collator lives in `aasp_hf.training`.)
"""

import logging

import numpy as np
import torch

from ._common import EVAR_CLIP_SECONDS, SAMPLING_RATE
from .decoding import SafeAudioDecoder


logger = logging.getLogger(__name__)


def crop_or_pad(waveform: np.ndarray, num_samples: int, random_crop: bool, rng: np.random.Generator = None):
    """(L,) -> (num_samples,): a random window (random_crop) or the first one of a longer clip; zeros appended
    to a shorter one (EVAR's unit-length clips)."""
    length = waveform.shape[0]
    if length > num_samples:
        start = int(rng.integers(0, length - num_samples + 1)) if random_crop else 0
        return waveform[start : start + num_samples]
    return np.pad(waveform, (0, num_samples - length))


class AaspFineTuningCollator:
    """Examples {audio, label|labels} -> {input_values (B, T, F), attention_mask (B, T), labels}.

    Args:
        feature_extractor: an `AaspFeatureExtractor`.
        task: a key of `EVAR_CLIP_SECONDS` (e.g. "esc50") or pass `clip_seconds`.
        split: "train"/"validation" (random crop) or "test" (first segment).
        num_labels: with it, labels are multi-hot float (B, num_labels) (AudioSet); else int64 (B,).
        seed: seeds the crop positions.

    Clips that fail to decode are dropped (counted in `num_skipped`, see `decoder.failures`); a batch where
    every clip failed gives None, which the training loop skips. Feed it a dataset prepared with
    `for_safe_decoding` so that a corrupt file reaches the collator instead of raising in the DataLoader.
    """

    def __init__(self, feature_extractor, task=None, clip_seconds=None, split="train", num_labels=None,
                 label_column=None, audio_column="audio", seed=0, decoder=None):
        if clip_seconds is None:
            if task not in EVAR_CLIP_SECONDS:
                raise ValueError(f"task={task!r}: pass clip_seconds= or one of {sorted(EVAR_CLIP_SECONDS)}.")
            clip_seconds = EVAR_CLIP_SECONDS[task]
        if split not in ("train", "validation", "valid", "test"):
            raise ValueError(f"split={split!r}: use 'train', 'validation' or 'test'.")
        self.feature_extractor = feature_extractor
        self.num_samples = int(round(clip_seconds * SAMPLING_RATE))
        self.random_crop = split != "test"
        self.num_labels = num_labels
        self.label_column = label_column
        self.audio_column = audio_column
        self.rng = np.random.default_rng(seed)
        self.decoder = decoder or SafeAudioDecoder()

    @property
    def num_skipped(self) -> int:
        return self.decoder.num_failures

    def _label_of(self, example):
        column = self.label_column or ("labels" if "labels" in example else "label")
        return example[column]

    def __call__(self, examples):
        waveforms, labels = [], []
        for example in examples:
            waveform = self.decoder(example[self.audio_column])
            if waveform is None:
                continue
            waveforms.append(crop_or_pad(waveform, self.num_samples, self.random_crop, self.rng))
            labels.append(self._label_of(example))
        if not waveforms:
            logger.warning(f"Every clip of a batch of {len(examples)} failed to decode; the batch is skipped.")
            return None
        batch = self.feature_extractor(waveforms, sampling_rate=SAMPLING_RATE, return_tensors="pt")  # a list: B clips
        if self.num_labels is None:
            batch["labels"] = torch.tensor(labels, dtype=torch.long)  # (B,)
        else:
            multi_hot = torch.zeros(len(labels), self.num_labels)  # (B, C)
            for row, clip_labels in enumerate(labels):
                clip_labels = [clip_labels] if isinstance(clip_labels, int) else list(clip_labels)
                multi_hot[row, clip_labels] = 1.0
            batch["labels"] = multi_hot
        return batch
