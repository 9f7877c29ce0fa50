# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""An optional precomputed log-mel cache for input-bound pre-training (as M2D does).

Decoding and featurising a 10 s clip costs a few CPU milliseconds; on a fast GPU with few CPU cores per GPU that,
not the model, can set the step time. `build_log_mel_cache` decodes every clip once and stores its UNNORMALISED
log-mel (the extractor with `do_normalize=False`) as one float16 ``.npy`` of shape (T, F) per clip, so the
normalisation statistics can still change afterwards (M2D stores its log-mel the same way). Training then reads
(T, F) arrays with `LogMelCache` and `aasp_hf.data.collators.crop_log_mel` takes the random crop in the frame
domain and normalises (the pre-training collator does so for cached items).

Layout of ``cache_dir``::

    index.json            settings of the front end, clip ids -> files and frame counts, failed clips
    ab/ab12...ef.npy      float16 (T, F), one per clip; the name is the SHA-1 of the clip id (its path)

Building is resumable (a valid existing file is kept unless ``overwrite=True``) and every file is written to a
temporary name and moved into place with ``os.replace``, so an interrupted build never leaves a partial file.
Dimension legend: T frames, F mel bins, B clips.
"""

import copy
import hashlib
import json
import logging
import os
import uuid
from pathlib import Path

import numpy as np
import torch

from ..feature_extraction_aasp import AaspFeatureExtractor
from .decoding import SafeAudioDecoder, for_safe_decoding
from .statistics import MelMoments


logger = logging.getLogger(__name__)

INDEX_FILE = "index.json"
FORMAT_VERSION = 1
# The extractor fields that determine the unnormalised log-mel: a cache is refused when one of them differs.
# (mean, std, do_normalize, per_clip_normalization, padding_value, frame_multiple and max_frames act after the cache
# and may change.)
FRONTEND_FIELDS = ("mode", "feature_size", "sampling_rate", "n_fft", "win_length", "hop_length", "f_min", "f_max")


def frontend_settings(feature_extractor) -> dict:
    """The fields of `feature_extractor` that determine the unnormalised log-mel (`FRONTEND_FIELDS`)."""
    return {name: getattr(feature_extractor, name) for name in FRONTEND_FIELDS}


def _atomic_write_bytes(path: Path, write):
    """`write(file)` into a temporary file next to `path`, then `os.replace` it onto `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _write_index(cache_dir: Path, index: dict):
    _atomic_write_bytes(cache_dir / INDEX_FILE, lambda f: f.write(json.dumps(index, indent=1).encode("utf-8")))


def _read_index(cache_dir: Path) -> dict:
    path = Path(cache_dir) / INDEX_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: {cache_dir} is not a log-mel cache (build it with "
            f"aasp_hf.data.cache.build_log_mel_cache)."
        )
    with open(path, encoding="utf-8") as f:
        index = json.load(f)
    if index.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path} has format_version={index.get('format_version')!r}; this code reads "
            f"{FORMAT_VERSION}. Rebuild the cache with overwrite=True."
        )
    return index


def _settings_mismatch(cached: dict, expected: dict) -> list:
    return [f"{k}: cache {cached.get(k)!r} != extractor {v!r}" for k, v in expected.items() if cached.get(k) != v]


def _valid_file(path: Path, num_bins: int):
    """Frame count of a readable float16 (T, num_bins) .npy (reads the header only), else None."""
    try:
        array = np.load(path, mmap_mode="r")  # raises when the file is shorter than its header says
    except Exception:  # noqa: BLE001 - any unreadable file is rebuilt
        return None
    if array.dtype != np.float16 or array.ndim != 2 or array.shape[1] != num_bins or array.shape[0] == 0:
        return None
    return int(array.shape[0])


def _clip_id(example, audio, row: int, id_column):
    if id_column is not None:
        return str(example[id_column])
    if isinstance(audio, (str, os.PathLike)):
        return str(audio)
    if isinstance(audio, dict) and audio.get("path"):
        return str(audio["path"])
    return f"row-{row}"


def _relative_file(clip_id: str) -> str:
    digest = hashlib.sha1(clip_id.encode("utf-8")).hexdigest()
    return f"{digest[:2]}/{digest}.npy"


class _CacheWriter(torch.utils.data.Dataset):
    """Item `row`: decode + featurise + write that clip's file (in a DataLoader worker when num_workers > 0).

    Returns a small dict {row, id, file, num_frames, status} with status "kept", "written" or "failed".
    """

    def __init__(self, source, cache_dir, feature_extractor, audio_column, id_column, overwrite):
        self.source = source
        self.cache_dir = Path(cache_dir)
        raw = copy.deepcopy(feature_extractor)
        raw.do_normalize = False
        raw.per_clip_normalization = False
        raw.max_frames = None  # whole clips, no truncation
        self.raw = raw
        self.audio_column = audio_column
        self.id_column = id_column
        self.overwrite = overwrite
        self.decoder = SafeAudioDecoder(sampling_rate=raw.sampling_rate)

    def __len__(self):
        return len(self.source)

    def __getitem__(self, row):
        result = {"row": row, "id": f"row-{row}", "file": None, "num_frames": 0, "status": "failed", "error": None}
        try:
            example = self.source[row]
            audio = (
                example[self.audio_column] if isinstance(example, dict) and self.audio_column in example else example
            )
            clip_id = _clip_id(example, audio, row, self.id_column)
            relative = _relative_file(clip_id)
            result.update(id=clip_id, file=relative)
            path = self.cache_dir / relative
            if not self.overwrite and path.is_file():
                frames = _valid_file(path, self.raw.feature_size)
                if frames is not None:
                    result.update(num_frames=frames, status="kept")
                    return result
            waveform = self.decoder(audio)  # None (logged) when the clip fails to decode
            if waveform is None:
                result["error"] = "failed to decode"
                return result
            frames = self.raw.num_frames(waveform.shape[0])
            features = self.raw(
                waveform,
                sampling_rate=self.raw.sampling_rate,
                return_tensors="np",
                truncation=False,  # whole clips: the collator cuts its crops from the cached log-mel
                return_attention_mask=False,
            )["input_values"][0, :frames]  # (T_padded, F) -> (T, F)
            log_mel = features.astype(np.float16)  # (T, F)
            if not np.isfinite(log_mel).all():
                raise ValueError("log-mel is not finite in float16")
            path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write_bytes(path, lambda f: np.save(f, log_mel))
            result.update(num_frames=frames, status="written")
        except Exception as error:  # noqa: BLE001 - a bad clip is counted, never fatal
            result["error"] = f"{type(error).__name__}: {error}"
            logger.warning(f"log-mel cache: skipping row {row} ({result['id']}): {result['error']}")
        return result


def _identity(item):
    return item


def build_log_mel_cache(
    dataset,
    cache_dir,
    feature_extractor=None,
    audio_column: str = "audio",
    num_workers: int = 0,
    overwrite: bool = False,
    id_column=None,
) -> dict:
    """Write the unnormalised float16 log-mel (T, F) of every clip of `dataset` under `cache_dir`, plus index.json.

    Args:
        dataset: a map-style `datasets.Dataset` with an audio column (cast to `Audio(decode=False)` here, so a
            corrupt file is counted instead of raising), or a list of audio cells (paths, `{"path"|"bytes"}` or
            `{"array", "sampling_rate"}` dicts) or of dicts holding one under `audio_column`.
        cache_dir: the folder (created if needed).
        feature_extractor: an `AaspFeatureExtractor` (default: the M2D front end, 128 bins). Only its front-end
            fields (`FRONTEND_FIELDS`) matter: the stored log-mel is unnormalised and never padded or truncated.
        num_workers: DataLoader worker processes that decode, featurise and write (0: this process).
        overwrite: rewrite every file; otherwise a valid existing file is kept (resume) and clips that failed
            before are tried again. A cache built with other front-end settings raises unless overwrite=True.
        id_column: a column naming each clip (default: its audio path, else `row-<i>`); it names the file, so a
            resumed build finds the files of the same clips even when the dataset's order changed.

    Returns a summary `{"cache_dir", "num_clips", "num_written", "num_kept", "num_failed", "failed"}` (the
    same counts are in index.json; `failed` lists `{"row", "id", "error"}`).
    """
    if feature_extractor is None:
        feature_extractor = AaspFeatureExtractor()
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise TypeError(
            f"build_log_mel_cache needs a map-style dataset (len and indexing), got {type(dataset)}; "
            f"an IterableDataset can be materialised first (e.g. a list of paths)."
        )
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    settings = frontend_settings(feature_extractor)
    if (cache_dir / INDEX_FILE).is_file() and not overwrite:
        try:
            previous = _read_index(cache_dir)
        except (ValueError, json.JSONDecodeError) as error:
            raise ValueError(f"{cache_dir / INDEX_FILE} cannot be read ({error}); pass overwrite=True to rebuild.")
        mismatch = _settings_mismatch(previous.get("settings", {}), settings)
        if mismatch:
            raise ValueError(
                f"{cache_dir} holds a log-mel cache built with other front-end settings "
                f"({'; '.join(mismatch)}); pass overwrite=True to rebuild it or use another cache_dir."
            )
    from datasets import Dataset  # here: reading a cache (LogMelCache) never needs datasets

    if isinstance(dataset, Dataset):
        dataset = for_safe_decoding(dataset, audio_column)

    index = {
        "format_version": FORMAT_VERSION,
        "complete": False,  # written first, so a resumed build always knows the settings of existing files
        "settings": settings,
        "feature_extractor": feature_extractor.to_dict(),
        "dtype": "float16",
        "normalized": False,
    }
    _write_index(cache_dir, index)

    writer = _CacheWriter(dataset, cache_dir, feature_extractor, audio_column, id_column, overwrite)
    loader = torch.utils.data.DataLoader(
        writer, batch_size=None, shuffle=False, num_workers=num_workers, collate_fn=_identity
    )
    ids, files, frames, rows, failed = [], [], [], [], []
    counts = {"written": 0, "kept": 0, "failed": 0}
    for result in loader:
        counts[result["status"]] += 1
        if result["status"] == "failed":
            failed.append({"row": result["row"], "id": result["id"], "error": result["error"]})
            continue
        ids.append(result["id"])
        files.append(result["file"])
        frames.append(result["num_frames"])
        rows.append(result["row"])
    if counts["failed"]:
        logger.warning(f"log-mel cache: {counts['failed']} of {len(writer)} clips failed and were skipped.")
    index.update(
        complete=True,
        num_clips=len(ids),
        num_failed=counts["failed"],
        clips={"id": ids, "file": files, "num_frames": frames, "row": rows},  # columns, one entry per cached clip
        failed=failed,
    )
    _write_index(cache_dir, index)
    return {
        "cache_dir": str(cache_dir),
        "num_clips": len(ids),
        "num_written": counts["written"],
        "num_kept": counts["kept"],
        "num_failed": counts["failed"],
        "failed": failed,
    }


class LogMelCache(torch.utils.data.Dataset):
    """The clips of a cache built by `build_log_mel_cache`: item i -> {"log_mel": (T, F) float32, "index": i, "row"}.

    `log_mel` is unnormalised (crop and normalise with `aasp_hf.data.collators.crop_log_mel`); `row` is the
    clip's row in the dataset the cache was built from (failed clips are not in the cache, so `row` can differ from
    `index`).

    Args:
        cache_dir: the cache folder.
        feature_extractor (*optional*): when given, a cache whose front-end settings (`FRONTEND_FIELDS`) differ
            from it raises a ValueError naming the differences (mean/std may differ: they act after the cache).

    Attributes: `num_frames` (list of T per clip), `ids`, `rows`, `settings`, `failed`.
    """

    def __init__(self, cache_dir, feature_extractor=None):
        self.cache_dir = Path(cache_dir)
        index = _read_index(self.cache_dir)
        if not index.get("complete"):
            raise ValueError(
                f"{self.cache_dir} is an incomplete log-mel cache (its build was interrupted): run "
                f"build_log_mel_cache again on the same dataset to finish it."
            )
        self.settings = index["settings"]
        if feature_extractor is not None:
            mismatch = _settings_mismatch(self.settings, frontend_settings(feature_extractor))
            if mismatch:
                raise ValueError(
                    f"The log-mel cache {self.cache_dir} was built with other front-end settings than "
                    f"the given feature extractor: {'; '.join(mismatch)}. Rebuild it with this extractor."
                )
        clips = index["clips"]
        self.ids, self.files = clips["id"], clips["file"]
        self.num_frames, self.rows = clips["num_frames"], clips["row"]
        self.failed = index.get("failed", [])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        log_mel = np.load(self.cache_dir / self.files[index])  # float16 (T, F)
        return {"log_mel": torch.from_numpy(log_mel.astype(np.float32)), "index": index, "row": self.rows[index]}

    def mel_statistics(self, max_clips=None):
        """(mean, std, num_frames) of the cached unnormalised log-mel (float64 sums), like `compute_mel_statistics`
        but without decoding: new statistics for `AaspFeatureExtractor(mean=..., std=...)` at file-read speed."""
        moments = MelMoments(self.settings["feature_size"])
        for index in range(len(self) if max_clips is None else min(max_clips, len(self))):
            moments.add(np.load(self.cache_dir / self.files[index]))  # float16 (T, F), summed in float64
        if moments.count == 0:
            raise ValueError(f"{self.cache_dir} holds no clips.")
        return moments.result()


__all__ = [
    "FRONTEND_FIELDS",
    "LogMelCache",
    "build_log_mel_cache",
    "frontend_settings",
]
