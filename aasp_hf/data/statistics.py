# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Mean and standard deviation of the raw log-mel over a dataset, for `AaspFeatureExtractor(mean=, std=)`.

`MelMoments` is the one accumulator: `compute_mel_statistics` feeds it decoded and featurised clips,
`LogMelCache.mel_statistics` (data.cache) the cached log-mel.
"""

import copy
import logging

import numpy as np

from ..feature_extraction_aasp import AaspFeatureExtractor
from .decoding import SAMPLING_RATE, SafeAudioDecoder, for_safe_decoding


logger = logging.getLogger(__name__)


class MelMoments:
    """Running float64 sum and sum of squares of log-mel values (every real frame and mel bin).

    `add(values)` takes an array of F-bin frames (..., F); `result()` gives `(mean, std, num_frames)` with the
    population standard deviation `sqrt(E[x^2] - E[x]^2)` and `num_frames = values seen // F`.
    """

    def __init__(self, num_mel_bins: int):
        self.num_mel_bins = int(num_mel_bins)
        self.total, self.total_sq, self.count = 0.0, 0.0, 0

    def add(self, values):
        values = np.asarray(values, dtype=np.float64)  # (..., F)
        self.total += values.sum()
        self.total_sq += np.square(values).sum()
        self.count += values.size

    def result(self) -> tuple[float, float, int]:
        if self.count == 0:
            raise ValueError("MelMoments.result() before any value was added.")
        mean = self.total / self.count
        std = float(np.sqrt(max(self.total_sq / self.count - mean**2, 0.0)))
        return float(mean), std, self.count // self.num_mel_bins


def compute_mel_statistics(
    dataset, feature_extractor=None, audio_column="audio", max_clips=None, batch_size=16, decoder=None
):
    """(mean, std) of the unnormalised log-mel over every real frame and mel bin of the dataset's clips.

    Uses `feature_extractor` (default `AaspFeatureExtractor()`, the M2D front end) with `do_normalize=False` and
    without per-clip normalisation;
    padding frames are excluded with the attention mask. Sums run in float64. Clips that fail to decode are
    skipped and counted (`decoder.num_failures`). `max_clips` takes the first clips only (M2D uses a sample).
    Returns `(mean, std, num_frames)`.
    """
    if feature_extractor is None:
        feature_extractor = AaspFeatureExtractor()
    raw = copy.deepcopy(feature_extractor)
    raw.do_normalize = False
    raw.per_clip_normalization = False
    decoder = decoder or SafeAudioDecoder()
    dataset = for_safe_decoding(dataset, audio_column)
    moments = MelMoments(raw.feature_size)
    batch = []

    def flush():
        features = raw(batch, sampling_rate=SAMPLING_RATE, return_tensors="np")
        mask = features["attention_mask"].astype(bool)  # (B, T)
        moments.add(features["input_values"][mask])  # (B, T, F) -> (real frames, F)
        batch.clear()

    for index, example in enumerate(dataset):
        if max_clips is not None and index >= max_clips:
            break
        waveform = decoder(example[audio_column])
        if waveform is not None:
            batch.append(waveform)
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()
    if moments.count == 0:
        raise ValueError("No clip could be decoded: cannot compute statistics.")
    if decoder.num_failures:
        logger.warning(f"compute_mel_statistics skipped {decoder.num_failures} clips that failed to decode.")
    return moments.result()
