# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Training-side audio decoding: a clip that fails to decode is logged, counted and skipped, not fatal.

With datasets 5.x an `Audio(decode=True)` column opens the file when the row is read, so a corrupt clip
raises inside the DataLoader before any collator sees it. For training, cast the column to
`Audio(decode=False)` with `for_safe_decoding(ds)` (rows then carry only `{"path", "bytes"}`) and let the
collator decode with a `SafeAudioDecoder`, which returns None for a bad clip and counts it.

One downmix rule everywhere: multi-channel audio becomes the mean of its channels, (L + R) / 2 for stereo, as
`x.mean(0)`, the feature extractor's `mono=True` and the checkpoint's pipeline (`pipeline_aasp.py`) give. (ffmpeg's
`-ac 1`, which transformers' own pipeline uses for a file path, and torchcodec's `num_channels=1` give
(L + R) / sqrt(2) instead, 3 dB louder.)
"""

import io
import logging
import math
import os
import re

import numpy as np
import torch

from ..pipeline_aasp import wav_truncation


logger = logging.getLogger(__name__)

SAMPLING_RATE = 16000  # every clip is decoded to 16 kHz mono, the rate the model's front end takes
_WARNED_TRUNCATED = set()  # files whose truncation was logged already: one warning per file and process
_REPORTED_FAILURES = set()  # files named as failed already (SafeAudioDecoder): one line per file and process


def for_safe_decoding(dataset, audio_column: str = "audio"):
    """Cast `audio_column` to `Audio(sampling_rate=16000, decode=False)` (paths only) on a (Iterable)Dataset(Dict)."""
    from datasets import Audio, DatasetDict, IterableDatasetDict  # here: the in-memory data paths never need datasets

    feature = Audio(sampling_rate=SAMPLING_RATE, decode=False)
    if isinstance(dataset, (DatasetDict, IterableDatasetDict)):
        return type(dataset)({k: v.cast_column(audio_column, feature) for k, v in dataset.items()})
    return dataset.cast_column(audio_column, feature)


def _resample(array: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    if orig_sr == target_sr:
        return array
    from scipy.signal import resample_poly

    g = math.gcd(int(orig_sr), int(target_sr))
    return resample_poly(array, target_sr // g, orig_sr // g).astype(np.float32)


def decode_audio(audio, sampling_rate: int = SAMPLING_RATE) -> np.ndarray:
    """Any form an `audio` cell takes -> mono float32 waveform (L,) at `sampling_rate`. Raises on failure.

    Accepts a torchcodec `AudioDecoder` (datasets' decoded cell), a `{"array" (or "raw"), "sampling_rate"}` dict
    (float, or integer PCM scaled to [-1, 1); (C, L) or (L, C) channels averaged), a `{"path", "bytes"}` dict
    (`Audio(decode=False)`) or a path. Its output is what `pipeline("audio-classification")` takes at 16 kHz, which
    itself resamples only 1-D float arrays and rejects integer PCM at other rates and multi-channel arrays. Files give
    the samples the checkpoint's pipeline (torchcodec) gives for a path: WAV and FLAC at `sampling_rate` read by
    soundfile bit for bit, OGG/Vorbis and MP3 within float rounding, everything else (other rates: resampled) by
    torchcodec itself (`_decode_file`); when torchcodec is not importable, soundfile + scipy's polyphase resampler.
    Channels are always averaged, (L + R) / 2. A WAV whose header promises more frames than the file holds decodes
    to the whole frames it holds, with a warning that names the file. A file that cannot be decoded, or holds no
    samples (0 bytes, or a header alone), raises `UndecodableAudio` (a ValueError) with the file and a short reason.
    """
    if hasattr(audio, "get_all_samples"):  # torchcodec AudioDecoder
        encoded = getattr(audio, "_hf_encoded", None) or {}  # a datasets cell keeps its {"path", "bytes"} here
        if _wav_truncation(encoded.get("bytes") or encoded.get("path")) is None:
            try:
                samples = audio.get_all_samples()
            except Exception as error:  # noqa: BLE001 - torchcodec's message does not name the file
                raise _undecodable(audio, error, encoded.get("bytes") or encoded.get("path")) from error
            array, sr = samples.data.mean(dim=0).numpy(), samples.sample_rate  # (C, L) -> (L,)
            return _resample(array.astype(np.float32, copy=False), sr, sampling_rate)
        audio = encoded  # a truncated WAV: decoded from its file below, with a warning
    if isinstance(audio, dict) and (audio.get("array") is not None or audio.get("raw") is not None):
        array = audio["array"] if audio.get("array") is not None else audio["raw"]
        array = np.asarray(array.numpy() if hasattr(array, "numpy") else array)
        if np.issubdtype(array.dtype, np.integer):  # integer PCM -> [-1, 1)
            info = np.iinfo(array.dtype)
            offset = (int(info.max) + 1) // 2 if info.min == 0 else 0  # unsigned (uint8): centred on 128
            array = (array.astype(np.float64) - offset) / (int(info.max) + 1 - offset)
        array = array.astype(np.float32)
        if array.ndim == 2:  # (C, L) or (L, C): channels are the shorter axis -> (L,)
            array = array.mean(axis=0 if array.shape[0] <= array.shape[1] else 1)
        return _resample(array, audio["sampling_rate"], sampling_rate)
    if isinstance(audio, dict):
        source = audio.get("bytes") or audio.get("path")
    else:
        source = audio
    if source is None:
        raise ValueError(f"Nothing to decode in {audio!r}: no array, bytes or path.")
    truncation = _wav_truncation(source)
    name = _describe(audio)
    if truncation is not None:
        if truncation[2] == 0:
            raise UndecodableAudio(name, NO_SAMPLES)  # nothing to decode (torchcodec would raise)
        if name not in _WARNED_TRUNCATED:
            _WARNED_TRUNCATED.add(name)
            logger.warning(f"{name}: {truncation[0]}; using the audio it holds.")
        source = truncation[1]  # the header and the whole frames: a partial last frame would fail to decode
    try:
        array = _decode_file(source, sampling_rate)
    except Exception as error:  # the decoders' own messages may not name the file (soundfile: "Malformed ...")
        raise _undecodable(audio, error, source) from error
    if array.size == 0:
        raise UndecodableAudio(name, NO_SAMPLES)
    return array


NO_SAMPLES = "a header and no audio samples"


class UndecodableAudio(ValueError):
    """A clip that cannot be used as audio. `source`: its file (or what was passed); `reason`: why, short and on one
    line (the decoder's own message without its C++ source location), which the training scripts log once per file:
    `skipped a clip that failed to decode: <source>: <reason>`. The message adds what to check."""

    def __init__(self, source: str, reason: str):
        self.source, self.reason = source, reason
        super().__init__(
            f"Could not decode {source} as audio ({reason}). Is it an audio file (wav, flac, mp3, ogg, "
            f"...) that is complete? ffmpeg must be installed to decode compressed formats."
        )


def _undecodable(audio, error, source=None) -> UndecodableAudio:
    """The error for a clip whose decoder raised `error`: an empty file and a header without samples are said so;
    anything else gets the decoder's message, shortened."""
    return UndecodableAudio(_describe(audio), _empty_file_reason(source) or short_reason(error))


def _empty_file_reason(source) -> str | None:
    """ "an empty file (0 bytes)" or `NO_SAMPLES` for such a file (a path or its bytes), else None."""
    try:
        if isinstance(source, (bytes, bytearray)):
            size = len(source)
        elif source is not None:
            size = os.path.getsize(source)
        else:
            return None
        if size == 0:
            return "an empty file (0 bytes)"
        import soundfile as sf

        with sf.SoundFile(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source) as file:
            return NO_SAMPLES if file.frames == 0 else None
    except Exception:  # noqa: BLE001 - not a file soundfile opens: the decoder's message says why
        return None


_CPP_LOCATION = re.compile(r"^\w+, \S+\.(?:cpp|h|cc):\d+, ")  # torchcodec's "SingleStreamDecoder, /.../x.cpp:41, "


def short_reason(error) -> str:
    """The decoder's error in one short line: its type and message, without torchcodec's C++ source location, at most
    200 characters."""
    if isinstance(error, UndecodableAudio):
        return error.reason
    message = _CPP_LOCATION.sub("", " ".join(str(error).split()))
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= 200 else text[:199] + "…"


# What libsndfile (through soundfile) decodes to the same samples as torchcodec (ffmpeg), so that training and the
# checkpoint's pipeline see the same clip: {major format: subtypes}. Opening a file with torchcodec costs ~40 ms (it
# probes the container), more than decoding a 10-s clip; soundfile opens one in well under a millisecond.
# - Bit for bit (PCM and float in WAV, integer PCM in FLAC: both decoders scale integers by a power of two).
SOUNDFILE_EXACT = {
    "WAV": {"PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"},
    "WAVEX": {"PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE"},
    "FLAC": {"PCM_S8", "PCM_16", "PCM_24"},
}
# - Same length, samples within float rounding (lossy codecs: libvorbis / mpg123 against ffmpeg's own decoders, which
#   round their inverse transforms differently; tests/test_data_path_speed.py bounds the difference).
SOUNDFILE_LOSSY = {"OGG": {"VORBIS"}, "MP3": {"MPEG_LAYER_III"}}


def _decode_file(source, sampling_rate: int) -> np.ndarray:
    """A path or the bytes of a file -> mono float32 (L,) at `sampling_rate`: the channel mean.

    A file at `sampling_rate` in a format of `SOUNDFILE_EXACT` or `SOUNDFILE_LOSSY` is read by soundfile; any other
    (another rate, format or codec, or one soundfile cannot open) by torchcodec, which resamples it as the
    checkpoint's pipeline does. Without torchcodec, soundfile reads everything and scipy's polyphase filter resamples.
    The channels are averaged here (torch's mean over the channel axis, as for torchcodec's samples) rather than by
    torchcodec's `num_channels=1`, whose downmix is (L + R) / sqrt(2).
    """
    channels = _read_with_soundfile(source, sampling_rate)
    if channels is None:
        try:
            from torchcodec.decoders import AudioDecoder
        except ImportError:
            return _decode_with_soundfile(source, sampling_rate)
        channels = AudioDecoder(source, sample_rate=sampling_rate).get_all_samples().data
    return channels.mean(dim=0).numpy().astype(np.float32, copy=False)  # (C, L) -> (L,)


def _read_with_soundfile(source, sampling_rate: int):
    """float32 (C, L) tensor of a file that soundfile decodes as torchcodec does (`SOUNDFILE_EXACT` /
    `SOUNDFILE_LOSSY`) at `sampling_rate`; None for any other file (or when soundfile is missing or fails)."""
    try:
        import soundfile as sf
    except ImportError:
        return None
    try:
        with sf.SoundFile(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source) as file:
            subtypes = SOUNDFILE_EXACT.get(file.format, set()) | SOUNDFILE_LOSSY.get(file.format, set())
            if file.samplerate != sampling_rate or file.subtype not in subtypes:
                return None
            frames = file.read(dtype="float32", always_2d=True)  # (L, C)
    except Exception:  # noqa: BLE001 - not a file soundfile reads: torchcodec decodes it or says what is wrong
        return None
    return torch.from_numpy(np.ascontiguousarray(frames.T))  # (L, C) -> (C, L), laid out as torchcodec's


def _decode_with_soundfile(source, sampling_rate: int) -> np.ndarray:
    import soundfile as sf

    data, sr = sf.read(io.BytesIO(source) if isinstance(source, bytes) else source, dtype="float32", always_2d=True)
    return _resample(data.mean(axis=1), sr, sampling_rate)  # (L, C) -> (L,)


def _wav_truncation(source) -> tuple[str, bytes, int] | None:
    """`pipeline_aasp.wav_truncation`, and None also for no source or a file that cannot be opened (the decoder then
    says why)."""
    if source is None:
        return None
    try:
        return wav_truncation(source)
    except (OSError, TypeError, ValueError):
        return None


def _describe(audio) -> str:
    if isinstance(audio, (bytes, bytearray)):
        return f"<{len(audio)} bytes of a file>"
    if isinstance(audio, dict):
        return str(audio.get("path") or "<bytes>")
    if hasattr(audio, "metadata"):
        return str(getattr(audio.metadata, "path", None) or "<AudioDecoder>")
    return str(audio)


class SafeAudioDecoder:
    """Callable: audio cell -> waveform (L,) at 16 kHz, or None when it fails to decode (counted, and named once).

    Each file that fails is named in one line, `skipped a clip that failed to decode: <file>: <reason>` (the line
    pre-training's `FailureLog` writes), the first time it fails in this process: a fine-tuning run that evaluates
    every few steps, or reads a small folder every few micro-batches, names it once, not at every reading.

    Attributes:
        num_failures (`int`): clips that failed so far.
        failures (`list[str]`): their paths (the first `keep` of them).
    """

    def __init__(self, sampling_rate: int = SAMPLING_RATE, max_logged: int = 20, keep: int = 1000):
        self.sampling_rate = sampling_rate
        self.max_logged = max_logged
        self.keep = keep
        self.num_failures = 0
        self.num_named = 0  # files this decoder named first (each file is named once per process)
        self.failures = []

    def __call__(self, audio):
        try:
            array = decode_audio(audio, self.sampling_rate)
            if array.size == 0:
                raise ValueError("no audio samples")  # an empty array (a file without samples raised above)
            if not np.isfinite(array).all():
                bad = int((~np.isfinite(array)).sum())
                raise ValueError(f"{bad} of its {array.size} samples are NaN or infinite")
            return array
        except Exception as error:  # any decoder error: skip the clip, keep training
            self.num_failures += 1
            name = _describe(audio)
            if len(self.failures) < self.keep:
                self.failures.append(name)
            if name not in _REPORTED_FAILURES:
                _REPORTED_FAILURES.add(name)
                self.num_named += 1
                if self.num_named <= self.max_logged:
                    reason = str(error) if type(error) is ValueError else short_reason(error)  # ours: plain words
                    logger.warning(f"skipped a clip that failed to decode: {name}: {reason}")
            return None


def filter_decodable(dataset, audio_column: str = "audio", num_proc=None, decoder: SafeAudioDecoder = None):
    """Drop rows whose audio fails to decode (reads every clip: for small datasets, before evaluation).

    Returns `(filtered_dataset, num_dropped)`. Works on a Dataset with a decoded or undecoded audio column.
    """
    undecoded = for_safe_decoding(dataset, audio_column)
    decoder = decoder or SafeAudioDecoder()
    keep = undecoded.map(
        lambda example: {"_ok": decoder(example[audio_column]) is not None},
        num_proc=num_proc,
        desc="checking audio",
        load_from_cache_file=False,
    )["_ok"]
    indices = [i for i, ok in enumerate(keep) if ok]
    dropped = len(keep) - len(indices)
    if dropped:
        logger.warning(f"filter_decodable dropped {dropped} of {len(keep)} clips that failed to decode.")
    return dataset.select(indices), dropped
