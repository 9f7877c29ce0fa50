# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Mean and standard deviation of the raw log-mel over a dataset, for `AaspFeatureExtractor(mean=, std=)`."""

import copy
import logging

import numpy as np

from ._common import SAMPLING_RATE
from .decoding import SafeAudioDecoder, for_safe_decoding


logger = logging.getLogger(__name__)


def compute_mel_statistics(dataset, feature_extractor=None, audio_column="audio", max_clips=None, batch_size=16,
                           decoder=None):
    """(mean, std) of the unnormalised log-mel over every real frame and mel bin of the dataset's clips.

    Uses `feature_extractor` (default `AaspFeatureExtractor()`, the M2D front end) with `do_normalize=False`;
    padding frames are excluded with the attention mask. Sums run in float64. Clips that fail to decode are
    skipped and counted (`decoder.num_failures`). `max_clips` takes the first clips only (M2D uses a sample).
    Returns `(mean, std, num_frames)`.
    """
    if feature_extractor is None:
        from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor

        feature_extractor = AaspFeatureExtractor()
    raw = copy.deepcopy(feature_extractor)
    raw.do_normalize = False
    decoder = decoder or SafeAudioDecoder()
    dataset = for_safe_decoding(dataset, audio_column)
    total, total_sq, count = 0.0, 0.0, 0
    batch = []

    def flush():
        nonlocal total, total_sq, count
        features = raw(batch, sampling_rate=SAMPLING_RATE, return_tensors="np")
        mask = features["attention_mask"].astype(bool)  # (B, T)
        values = features["input_values"][mask].astype(np.float64)  # (frames, F)
        total += values.sum()
        total_sq += np.square(values).sum()
        count += values.size
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
    if count == 0:
        raise ValueError("No clip could be decoded: cannot compute statistics.")
    mean = total / count
    std = float(np.sqrt(max(total_sq / count - mean**2, 0.0)))
    if decoder.num_failures:
        logger.warning(f"compute_mel_statistics skipped {decoder.num_failures} clips that failed to decode.")
    return float(mean), std, count // raw.feature_size
