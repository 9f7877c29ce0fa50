# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Data for pre-training and for the paper's downstream protocols (Sec. Datasets, Pre-training Setup, Training Setup).

- `loaders/`: one loader per dataset in its official layout (`load(name, root=...)`, `LOADERS`, `load_esc50`, ...),
  and one record per dataset (`DATASET_RECORDS`, `find_record`: its loader, names, clip length, official counts),
  which `load`, `check` and `protocol` all read.
- `splits`: cross-validation folds, a held-out test split, streaming shards and one rank's part of them.
- `protocol`: the downstream protocol of the fine-tuning and linear-evaluation scripts (`load_downstream`: EVAR task
  key and clip length, label names, test folds and the validation split).
- `clips`: pre-training clips, map-style or streamed; `collators`: pre-training and fine-tuning batches
  (`masking` draws the pre-training masks); `cache`: a cache of log-mel spectrograms.
- `decoding`: audio decoded at 16 kHz with failures skipped; `statistics`: the front end's mel statistics;
  `samplers`: class-balanced sampling; `synthetic`: the demo's synthetic audio (no files); `audiofolder`: the files
  of an audiofolder split listed without `datasets` (`list_audiofolder`, what the frozen-feature probe reads).

See docs/datasets.md. The model files never import this package.
"""

import importlib

# The names are imported on first use (PEP 562), not with the package: pre-training from arrays in memory
# (`--synthetic_clips`, `clips`, `collators`, `masking`) imports neither `datasets` nor `soundfile`, which the loaders,
# `protocol` and `splits` import; the GPU acceptance check runs where only those modules are installed
# (docs/gpus.md).
_NAMES = {
    "audiofolder": ("list_audiofolder",),
    "clips": ("AudioClips", "AudioStream", "FailedClip", "FailureLog", "decode_clip", "load_clips", "replace_failed"),
    "collators": ("AaspFineTuningCollator", "CLIP_PADDING", "PretrainingCollator", "crop_or_pad"),
    "decoding": ("SAMPLING_RATE", "SafeAudioDecoder", "decode_audio", "filter_decodable", "for_safe_decoding"),
    "loaders": (
        "DATASET_RECORDS",
        "DatasetRecord",
        "LOADERS",
        "find_record",
        "load",
        "load_audio_dataset",
        "load_audioset",
        "load_cremad",
        "load_esc50",
        "load_evar_task",
        "load_gtzan",
        "load_nsynth",
        "load_speech_commands",
        "load_surge",
        "load_urbansound8k",
        "load_voxceleb1",
        "load_voxforge",
    ),
    "protocol": (
        "DownstreamTask",
        "EVAR_CLIP_SECONDS",
        "KFOLD_VALIDATION",
        "SELECT_ON",
        "TASK_ALIASES",
        "describe_protocol",
        "downstream_clip_seconds",
        "downstream_parts",
        "evar_clip_seconds",
        "evar_task",
        "is_kfold",
        "kfold_part",
        "label_info",
        "load_downstream",
        "published_clip_seconds",
        "reported_test_split",
    ),
    "samplers": ("ClassBalancedSampler", "class_balanced_weights"),
    "splits": ("split_by_folds", "split_for_node", "to_streaming", "with_test_split"),
    "statistics": ("compute_mel_statistics",),
}
_SUBMODULE_OF = {name: module for module, names in _NAMES.items() for name in names}


def __getattr__(name):
    if name not in _SUBMODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_SUBMODULE_OF[name]}", __name__), name)
    globals()[name] = value  # found once: later lookups do not come here
    return value


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULE_OF))


__all__ = [
    "CLIP_PADDING",
    "DATASET_RECORDS",
    "EVAR_CLIP_SECONDS",
    "KFOLD_VALIDATION",
    "LOADERS",
    "SAMPLING_RATE",
    "SELECT_ON",
    "TASK_ALIASES",
    "AaspFineTuningCollator",
    "AudioClips",
    "AudioStream",
    "ClassBalancedSampler",
    "DatasetRecord",
    "DownstreamTask",
    "FailedClip",
    "FailureLog",
    "PretrainingCollator",
    "SafeAudioDecoder",
    "class_balanced_weights",
    "compute_mel_statistics",
    "crop_or_pad",
    "decode_audio",
    "decode_clip",
    "describe_protocol",
    "downstream_clip_seconds",
    "downstream_parts",
    "evar_clip_seconds",
    "evar_task",
    "filter_decodable",
    "find_record",
    "for_safe_decoding",
    "is_kfold",
    "kfold_part",
    "label_info",
    "list_audiofolder",
    "load",
    "load_audio_dataset",
    "load_audioset",
    "load_clips",
    "load_cremad",
    "load_downstream",
    "load_esc50",
    "load_evar_task",
    "load_gtzan",
    "load_nsynth",
    "load_speech_commands",
    "load_surge",
    "load_urbansound8k",
    "load_voxceleb1",
    "load_voxforge",
    "published_clip_seconds",
    "replace_failed",
    "reported_test_split",
    "split_by_folds",
    "split_for_node",
    "to_streaming",
    "with_test_split",
]
