# Copyright 2026 The aasp_hf authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""transformers' audio-classification pipeline with one downmix rule: the channels of a clip are averaged.

Shipped next to the weights: a saved checkpoint's `config.json` names this class in `custom_pipelines`, so
`pipeline("audio-classification", model=checkpoint, trust_remote_code=True)` builds it, with or without `aasp_hf`
installed. Why it exists: transformers' own pipeline decodes a file path with ffmpeg's `-ac 1`, whose downmix for float
output is (L + R) / sqrt(2), 3 dB louder than (L + R) / 2, while the same audio given as an
array, or read by `aasp_hf.data.decode_audio`, the feature extractor's `mono=True` and the training collators, is the
channel mean. Here a file is decoded by torchcodec (the decoder `datasets` uses), resampled by it to 16 kHz with every
channel kept, and the channels are then averaged: sample for sample what `decode_audio` gives. A WAV whose header
promises more frames than the file holds is classified on the whole frames it holds, with a warning naming the file.
Arrays and dicts are converted as transformers' pipeline converts them. Its scores follow the checkpoint's
`problem_type` (a sigmoid for a multi-label checkpoint) on every transformers 5.x, through
`ProblemTypeAudioClassificationPipeline`.

The whole clip is classified: a clip longer than the length the classifier was trained on (the feature extractor's
`max_frames`, else `config.num_frames`) is cut into windows of that length (`chunk_length_s`, `chunk_hop_s`), each
classified as if it were a clip of its own, and the clip's scores aggregate the windows' (`aggregation`). A file is
decoded in blocks of `DECODE_BLOCK_S` seconds, so memory does not grow with its length. `return_timestamps=True`
adds each window's start, end and scores.

Sound events: `AaspSoundEventDetectionPipeline` (the task "sound-event-detection", registered by `import aasp_hf`, and
named in a frame classifier's `custom_pipelines`) reads a recording in the same windows, in whole output frames of an
`AaspForAudioFrameClassification`, joins their frame scores into the recording's, and turns them into events with
`frame_events` and the settings saved in the config.
"""

import io
import itertools
import math
import warnings
from types import SimpleNamespace

import numpy as np
import torch
from transformers.pipelines.audio_classification import AudioClassificationPipeline
from transformers.pipelines.base import ChunkPipeline
from transformers.utils import logging


logger = logging.get_logger(__name__)

DECODE_BLOCK_S = 60.0  # seconds of audio decoded at a time from a file
AGGREGATIONS = ("mean", "max")
LONG_WINDOW_FACTOR = 2  # a window longer than this many trained lengths is said in one warning


try:
    from torchcodec.decoders import AudioDecoder
except ImportError:  # only decoding a file needs it; the error then says how to install it
    AudioDecoder = None

# The `custom_pipelines` entry of config.json: transformers.pipeline reads the class ("impl", a file of the checkpoint)
# and the Auto classes that load the model for it ("pt").
CUSTOM_PIPELINES = {
    "audio-classification": {
        "impl": "pipeline_aasp.AaspAudioClassificationPipeline",
        "pt": ["AutoModelForAudioClassification"],
        "type": "audio",
    }
}
# A frame classifier's entry (its only one, so that `pipeline(model=folder, trust_remote_code=True)` finds the task).
SOUND_EVENT_DETECTION = "sound-event-detection"
SOUND_EVENT_PIPELINES = {
    SOUND_EVENT_DETECTION: {
        "impl": "pipeline_aasp.AaspSoundEventDetectionPipeline",
        "pt": ["AutoModelForAudioFrameClassification"],
        "type": "audio",
    }
}


class ProblemTypeAudioClassificationPipeline(AudioClassificationPipeline):
    """transformers' audio-classification pipeline whose scores follow the checkpoint's `problem_type` when the
    caller names no `function_to_apply`: a sigmoid for "multi_label_classification" (independent labels, e.g.
    AudioSet's), none for "regression", a softmax otherwise. transformers' own class does this from 5.23 on; from 5.4
    to 5.22 it applies a softmax to every checkpoint, so a multi-label classifier's scores summed to 1. A function
    named when the pipeline is built holds for the calls that name none."""

    def _sanitize_parameters(self, top_k=None, function_to_apply=None, **kwargs):
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k={top_k!r} must be a whole number of labels, at least 1 (None: every label).")
        preprocess_params, forward_params, postprocess_params = super()._sanitize_parameters(
            top_k=top_k, function_to_apply=function_to_apply, **kwargs
        )
        if function_to_apply is None:
            built_with = getattr(self, "_postprocess_params", {}).get("function_to_apply")  # None while building
            postprocess_params["function_to_apply"] = built_with or default_function_to_apply(self.model.config)
        return preprocess_params, forward_params, postprocess_params


class AaspScoresAudioClassificationPipeline(ProblemTypeAudioClassificationPipeline):
    """transformers' audio-classification pipeline, where transformers 5.4 to 5.22 apply a softmax to every
    checkpoint: an AaSP checkpoint's scores follow its `problem_type` (`ProblemTypeAudioClassificationPipeline`);
    every other model's parameters are transformers' own, untouched."""

    def _sanitize_parameters(self, top_k=None, function_to_apply=None, **kwargs):
        if getattr(self.model.config, "model_type", None) != "aasp":
            return AudioClassificationPipeline._sanitize_parameters(
                self, top_k=top_k, function_to_apply=function_to_apply, **kwargs
            )
        return super()._sanitize_parameters(top_k=top_k, function_to_apply=function_to_apply, **kwargs)


class AaspAudioWindows:
    """The windows of a clip, for the pipelines of this file (`ChunkPipeline`s: `preprocess` yields one window's model
    inputs at a time). `window_lengths` gives (window, hop) in samples from the call's `chunk_length_s` and
    `chunk_hop_s` (default: the length the model was trained on, `trained_window_samples`, and no overlap);
    `iter_windows` cuts the clip, the last window ending at the clip's end with its start on a multiple of
    `window_align` samples; each window is featurised as a clip of its own."""

    window_align = 1  # samples; a frame classifier's is its output frame, so that every window's frames share a grid

    @staticmethod
    def window_seconds(chunk_length_s=None, chunk_hop_s=None, max_length_s=None, spelling="{name}={value!r}") -> dict:
        """The call's window options that are set, as floats; a ValueError naming one that is not a positive, finite
        number (`spelling` writes an option in the message: the tagger's is `--{name} {value}`)."""
        given = {"chunk_length_s": chunk_length_s, "chunk_hop_s": chunk_hop_s, "max_length_s": max_length_s}
        for name, value in given.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                option = spelling.format(name=name, value=value)
                raise ValueError(f"{option} must be a positive, finite number of seconds.")
        return {name: float(value) for name, value in given.items() if value is not None}

    def window_lengths(self, chunk_length_s=None, chunk_hop_s=None) -> tuple[int, int]:
        """(window, hop) in samples, from the call's options or the model's trained length (`window_samples`)."""
        return window_samples(self.feature_extractor, self.model.config, chunk_length_s, chunk_hop_s)

    def preprocess(self, inputs, chunk_length_s=None, chunk_hop_s=None, max_length_s=None):
        rate = self.feature_extractor.sampling_rate
        window, hop = self.window_lengths(chunk_length_s, chunk_hop_s)
        trained = trained_window_samples(self.feature_extractor, self.model.config)
        if window > LONG_WINDOW_FACTOR * trained:
            logger.warning_once(
                f"chunk_length_s={window / rate:g} s is {window / trained:.1f}x the {trained / rate:g}-s window the "
                f"model was trained on: it never saw windows that long, and its scores on them are untested. The "
                f"default (chunk_length_s unset) is the trained length."
            )
        blocks = audio_blocks(inputs, rate)  # 1-D arrays at `rate` whose concatenation is the clip
        if max_length_s is not None:
            blocks = first_samples(blocks, round(max_length_s * rate), rate, describe_input(inputs))
        windows = iter_windows(blocks, window, hop, align=self.window_align)
        empty = f"{describe_input(inputs)} holds no audio (0 samples): there is nothing to classify."
        for start, samples, is_last in mark_last(windows, empty):
            yield self.window_features(start, samples, is_last=is_last)

    def window_features(self, start: int, samples, is_last: bool) -> dict:
        """One window's model inputs (`input_values` (1, T, F), `attention_mask` (1, T)), its start and end in
        seconds, and whether it is the clip's last. Featurised as a clip of its own, and never truncated: a window
        longer than `max_frames` keeps all its frames."""
        rate = self.feature_extractor.sampling_rate
        features = self.feature_extractor(samples, sampling_rate=rate, return_tensors="pt", truncation=False)
        if self.dtype is not None:
            features = features.to(dtype=self.dtype)
        return {**features, "start": start / rate, "end": (start + len(samples)) / rate, "is_last": is_last}


class AaspAudioClassificationPipeline(AaspAudioWindows, ProblemTypeAudioClassificationPipeline, ChunkPipeline):
    """`AudioClassificationPipeline` that classifies the whole clip, window by window, and decodes files averaging the
    channels, (L + R) / 2.

    Takes what transformers' pipeline takes: a path (a `str` or `pathlib.Path`), a URL (torchcodec opens it), a file's
    bytes, a 1-D float array at 16 kHz, a `{"raw" or "array", "sampling_rate"}` dict; and a torchcodec `AudioDecoder`
    (a `datasets` audio cell), whose channels are averaged too rather than refused.

    Windows: a clip is cut into windows of `chunk_length_s` seconds (default: the length the classifier was trained
    on, `trained_window_samples`) starting every `chunk_hop_s` seconds (default `chunk_length_s`: no overlap); the
    last window ends at the clip's end, so every window of a clip longer than one window is whole (it may overlap
    the one before). A clip no longer than a window is one window, classified exactly as before. Each window is
    featurised and classified as a clip of its own, so its scores are those of its samples classified alone. As a
    `ChunkPipeline`, `batch_size=` batches windows, of one clip or of several.

    Call options, besides transformers' `top_k` and `function_to_apply`:
        chunk_length_s (`float`): seconds per window.
        chunk_hop_s (`float`): seconds between window starts, at most `chunk_length_s`.
        aggregation (`str`): how the windows' scores make the clip's: `"mean"` of the window probabilities (the
            default for single-label classifiers: the clip's class distribution, each window counted once) or `"max"`
            over the windows (the default for multi-label classifiers: a label is present in the clip when it is
            present in some window, as AudioSet taggers are evaluated).
        return_timestamps (`bool`): return `{"scores": [...], "windows": [{"start", "end", "scores"}, ...]}`, start
            and end in seconds, instead of the list of the clip's scores.
        max_length_s (`float`): classify only the first `max_length_s` seconds; when the clip is longer, one
            warning line says what was read.
    """

    def _sanitize_parameters(
        self,
        top_k=None,
        function_to_apply=None,
        chunk_length_s=None,
        chunk_hop_s=None,
        max_length_s=None,
        aggregation=None,
        return_timestamps=None,
        **kwargs,
    ):
        preprocess_params, forward_params, postprocess_params = super()._sanitize_parameters(
            top_k=top_k, function_to_apply=function_to_apply, **kwargs
        )
        preprocess_params.update(self.window_seconds(chunk_length_s, chunk_hop_s, max_length_s))
        if aggregation is not None:
            if aggregation not in AGGREGATIONS:
                raise ValueError(
                    f"aggregation={aggregation!r} is not one of {AGGREGATIONS}: 'mean' averages the windows' "
                    f"probabilities (single-label), 'max' takes each label's highest window score (multi-label)."
                )
            postprocess_params["aggregation"] = aggregation
        if return_timestamps is not None:
            postprocess_params["return_timestamps"] = bool(return_timestamps)
        return preprocess_params, forward_params, postprocess_params

    def _forward(self, model_inputs):
        window = {key: model_inputs.pop(key) for key in ("start", "end", "is_last")}
        return {"logits": self.model(**model_inputs).logits, **window}

    def postprocess(self, model_outputs, top_k=5, function_to_apply=None, aggregation=None, return_timestamps=False):
        logits = torch.cat([output["logits"] for output in model_outputs]).float()  # W × (1, labels) -> (W, labels)
        function_to_apply = function_to_apply or default_function_to_apply(self.model.config)
        scores = apply_score_function(logits, function_to_apply)  # (W, labels)
        aggregation = aggregation or default_aggregation(self.model.config)
        clip_scores = aggregate_windows(scores, aggregation)  # (W, labels) -> (labels,)
        result = self.top_labels(clip_scores, top_k)
        if not return_timestamps:
            return result
        windows = [
            {"start": output["start"], "end": output["end"], "scores": self.top_labels(window_scores, top_k)}
            for output, window_scores in zip(model_outputs, scores)
        ]
        return {"scores": result, "windows": windows}

    def top_labels(self, scores, top_k):
        """(labels,) scores -> the `top_k` highest as `[{"score", "label"}, ...]`, highest first."""
        values, ids = scores.topk(min(top_k, scores.shape[-1]))
        labels = self.model.config.id2label
        return [{"score": value, "label": labels[i]} for value, i in zip(values.tolist(), ids.tolist())]


class AaspSoundEventDetectionPipeline(AaspAudioWindows, ChunkPipeline):
    """Sound events of a recording from an `AaspForAudioFrameClassification` (the task "sound-event-detection"):
    `[{"onset", "offset", "label", "score"}, ...]` in seconds, sorted by onset.

    Takes what `AaspAudioClassificationPipeline` takes (a path, a URL, a file's bytes, a 1-D float array at 16 kHz, a
    `{"raw" or "array", "sampling_rate"}` dict, a torchcodec `AudioDecoder`), decoded the same way, and cuts it into
    the same windows (`AaspAudioWindows`), in whole output frames (`config.time_patch_size` spectrogram frames, 0.16 s
    for the defaults): the window, by default the trained length rounded down to whole frames (9.92 s for 1008
    frames), and the hop are rounded to whole frames, and the last window starts on the frame grid (`iter_windows`'s
    `align`). Each window is featurised and scored as a clip of its own; output frame k of a window starting at
    frame s is frame s + k of the recording (a window's frames past its last sample are dropped). By default the
    windows do not overlap, except the last, which ends at the recording's end; where windows overlap (the last one,
    or all with `chunk_hop_s` < `chunk_length_s`), a frame's score is the mean of the windows' scores for it. The
    recording's frame scores (a sigmoid per label; a softmax for a single-label checkpoint) go through
    `frame_events` with the checkpoint's `event_thresholds`, `event_median_filter`, `event_min_duration` and
    `event_merge_gap`, which the call can override. `batch_size=` batches windows.

    Call options:
        chunk_length_s (`float`), chunk_hop_s (`float`), max_length_s (`float`): as for
            `AaspAudioClassificationPipeline`; the window and the hop rounded to whole output frames.
        thresholds (`float` or a list of one per label), median_filter (`int`, odd, in output frames), min_duration
            (`float`, seconds), merge_gap (`float`, seconds): `frame_events`' settings, instead of the config's.
        return_frame_scores (`bool`): return `{"events": [...], "frame_seconds": float, "labels": [...],
            "frame_scores": (frames, labels) numpy array}` instead of the list of events.
    """

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = True
    _load_tokenizer = False

    EVENT_SETTINGS = {  # call option -> the config field that holds its default
        "thresholds": "event_thresholds",
        "median_filter": "event_median_filter",
        "min_duration": "event_min_duration",
        "merge_gap": "event_merge_gap",
    }

    @property
    def frame_samples(self) -> int:
        """Samples per output frame: `time_patch_size` hops of the front end."""
        return self.model.config.time_patch_size * self.feature_extractor.hop_length

    @property
    def window_align(self) -> int:
        return self.frame_samples

    def _sanitize_parameters(
        self, chunk_length_s=None, chunk_hop_s=None, max_length_s=None, return_frame_scores=None, **kwargs
    ):
        preprocess_params, postprocess_params = {}, {}
        preprocess_params.update(self.window_seconds(chunk_length_s, chunk_hop_s, max_length_s))
        unknown = set(kwargs) - set(self.EVENT_SETTINGS)
        if unknown:
            raise ValueError(
                f"{self.__class__.__name__} takes no option {', '.join(sorted(unknown))}: its options are "
                f"chunk_length_s, chunk_hop_s, max_length_s, return_frame_scores, {', '.join(self.EVENT_SETTINGS)}."
            )
        postprocess_params.update({name: value for name, value in kwargs.items() if value is not None})
        if return_frame_scores is not None:
            postprocess_params["return_frame_scores"] = bool(return_frame_scores)
        return preprocess_params, {}, postprocess_params

    def window_lengths(self, chunk_length_s=None, chunk_hop_s=None) -> tuple[int, int]:
        """(window, hop) in samples, in whole output frames (`window_samples`, `frame_window_lengths`)."""
        return window_samples(self.feature_extractor, self.model.config, chunk_length_s, chunk_hop_s, frame=True)

    def _forward(self, model_inputs):
        window = {key: model_inputs.pop(key) for key in ("start", "end", "is_last")}
        outputs = self.model(**model_inputs)
        return {"logits": outputs.logits, "frame_mask": outputs.frame_mask, **window}

    def postprocess(self, model_outputs, return_frame_scores=False, **settings):
        config, rate = self.model.config, self.feature_extractor.sampling_rate
        function_to_apply = frame_score_function(config)
        windows = [
            (
                round(output["start"] * rate),  # the window's first sample
                round((output["end"] - output["start"]) * rate),  # its length in samples
                apply_score_function(output["logits"][0].float(), function_to_apply).numpy(),  # (T', labels)
                output["frame_mask"][0].numpy(),  # (T',)
            )
            for output in model_outputs
        ]
        scores = file_frame_scores(windows, self.frame_samples)  # (frames, labels)
        labels = [config.id2label[i] for i in range(config.num_labels)]
        settings = {name: settings.get(name, getattr(config, field)) for name, field in self.EVENT_SETTINGS.items()}
        frame_seconds = self.frame_samples / rate
        duration = model_outputs[-1]["end"]
        events = frame_events(scores, frame_seconds, labels, duration=duration, **settings)
        if not return_frame_scores:
            return events
        return {"events": events, "frame_seconds": frame_seconds, "labels": labels, "frame_scores": scores}


def window_samples(
    feature_extractor, config, chunk_length_s=None, chunk_hop_s=None, frame=False, spelling="{name}={value!r}"
) -> tuple[int, int]:
    """(window, hop) in samples: `chunk_length_s` (default: the trained length, `trained_window_samples`) and
    `chunk_hop_s` (default: the window), checked by `AaspAudioWindows.window_seconds`; `frame=True` (a frame
    classifier) rounds both to whole output frames (`frame_window_lengths`). The one windowing of the pipelines and of
    the tagger (`python -m aasp_hf.tag`). A ValueError naming the option (written by `spelling`) refuses a window
    shorter than one output frame (`time_patch_size` spectrogram hops, the model's smallest step in time: 0.16 s
    for the defaults), a hop shorter than one spectrogram hop (10 ms; a hop that rounds to 0 samples would never
    move) and a hop longer than the window."""
    AaspAudioWindows.window_seconds(chunk_length_s, chunk_hop_s, spelling=spelling)
    rate, step = feature_extractor.sampling_rate, feature_extractor.hop_length
    shortest = config.time_patch_size * step  # samples of one output frame
    if chunk_length_s is None:
        window = trained_window_samples(feature_extractor, config)
    else:
        window = round(chunk_length_s * rate)
        if window < shortest:
            raise ValueError(
                f"{spelling.format(name='chunk_length_s', value=chunk_length_s)} is shorter than the model's "
                f"smallest step in time, one output frame of {shortest / rate:g} s ({config.time_patch_size} "
                f"spectrogram frames): give at least {shortest / rate:g} s."
            )
    hop = window if chunk_hop_s is None else round(chunk_hop_s * rate)
    if chunk_hop_s is not None and hop < step:
        raise ValueError(
            f"{spelling.format(name='chunk_hop_s', value=chunk_hop_s)} is shorter than one spectrogram hop "
            f"({step / rate:g} s): windows that far apart differ by no frame; give at least {step / rate:g} s."
        )
    if hop > window:
        raise ValueError(
            f"{spelling.format(name='chunk_hop_s', value=chunk_hop_s)} must be at most the window ({window / rate:g} "
            f"s): a longer hop would leave the audio between windows unclassified."
        )
    return frame_window_lengths(window, hop, shortest) if frame else (window, hop)


def frame_window_lengths(window: int, hop: int, frame: int) -> tuple[int, int]:
    """(window, hop) in samples -> in whole output frames of `frame` samples: the window rounded down (at least one
    frame: a window's frame past its last sample would read padding), the hop to the nearest frame (at least one,
    at most the window)."""
    window = max(window // frame, 1) * frame
    hop = min(max(round(hop / frame), 1) * frame, window)
    return window, hop


def file_frame_scores(windows, frame: int) -> np.ndarray:
    """A recording's frame scores from its windows' `(start sample, num_samples, scores (T', labels), frame_mask
    (T',))`, every start a multiple of `frame` samples: window frame k is recording frame start / frame + k, for the
    frames that start before the window's end and are real (`frame_mask`); where windows overlap, the mean of their
    scores. -> (frames, labels), frames = the recording's samples / `frame` rounded up (fewer when its last frames
    hold no real spectrogram frame)."""
    total = max(start + length for start, length, _, _ in windows)
    num_labels = windows[0][2].shape[-1]
    sums, counts = np.zeros((math.ceil(total / frame), num_labels)), np.zeros(math.ceil(total / frame))
    for start, length, scores, frame_mask in windows:
        if start % frame:
            raise ValueError(f"a window starts at sample {start}, not on the grid of {frame}-sample output frames")
        first, count = start // frame, min(math.ceil(length / frame), len(scores))
        real = frame_mask[:count].astype(bool)  # (count,)
        sums[first : first + count][real] += scores[:count][real]
        counts[first : first + count][real] += 1
    last = np.flatnonzero(counts)[-1] + 1  # a last frame of no real spectrogram frame (kaldi's 25-ms window) is cut
    return sums[:last] / np.maximum(counts[:last, None], 1)


def frame_score_function(config) -> str:
    """A frame classifier's score function: "softmax" for a single-label checkpoint (one class per frame), "sigmoid"
    otherwise (events overlap, and a frame with none is silence; an unset problem_type trains as multi-label)."""
    return "softmax" if config.problem_type == "single_label_classification" else "sigmoid"


def register_sound_event_detection() -> bool:
    """Make `pipeline("sound-event-detection", model=folder)` build `AaspSoundEventDetectionPipeline` for a frame
    classifier (a task of this package's: transformers has none by that name; another class registered under it is
    left as it is). Returns whether the task is ours."""
    from transformers import AutoModelForAudioFrameClassification
    from transformers.pipelines import PIPELINE_REGISTRY

    task = PIPELINE_REGISTRY.supported_tasks.get(SOUND_EVENT_DETECTION)
    if task is None:
        PIPELINE_REGISTRY.register_pipeline(
            SOUND_EVENT_DETECTION,
            pipeline_class=AaspSoundEventDetectionPipeline,
            pt_model=AutoModelForAudioFrameClassification,
            type="audio",
        )
        return True
    return task["impl"] is AaspSoundEventDetectionPipeline


def trained_window_samples(feature_extractor, config) -> int:
    """The window the classifier was trained on, in samples: the longest clip, in whole hops of the front end, whose
    log-mel fits the trained frames, i.e. the feature extractor's `max_frames` (fine-tuning saves its clip length
    there), else `config.num_frames` (pre-training's). 1008 frames at the 10-ms hop: 10.07 s (m2d), 10.1 s (kaldi)."""
    frames = feature_extractor.max_frames or config.num_frames
    hop = feature_extractor.hop_length
    samples = math.ceil((frames * hop + feature_extractor.n_fft) / hop) * hop  # more than `frames` frames read
    while samples > hop and feature_extractor.num_frames(samples) > frames:
        samples -= hop
    return samples


def aggregate_windows(scores, aggregation: str):
    """A clip's scores from its windows': (W, labels) -> (labels,), their "mean" or their "max" (torch or numpy, as
    given). The pipeline and the tag command aggregate here."""
    if aggregation == "mean":
        return scores.mean(0)
    return scores.amax(0) if isinstance(scores, torch.Tensor) else scores.max(axis=0)


def default_aggregation(config) -> str:
    """ "max" over the windows for a multi-label classifier, "mean" of the windows' scores otherwise."""
    return "max" if config.problem_type == "multi_label_classification" else "mean"


def apply_score_function(logits, function_to_apply: str):
    """(..., labels) logits -> scores: "softmax", "sigmoid" or "none" (the logits)."""
    if function_to_apply == "softmax":
        return logits.softmax(dim=-1)
    if function_to_apply == "sigmoid":
        return logits.sigmoid()
    return logits


def iter_windows(blocks, window: int, hop: int, align: int = 1):
    """`(start, samples)` of each window over a clip given as consecutive 1-D blocks, holding at most about one
    window and one block at a time. Windows start at 0, hop, 2·hop, ... while a whole window fits; then, if samples
    remain that no window covered, one last window ends at the clip's end, starting `window` samples before it
    rounded up to a multiple of `align` (so with `align` > 1 it may be shorter than a window; with `window` and `hop`
    multiples of `align` every start is one), or at 0 for a clip shorter than a window. Yields nothing for an empty
    clip."""

    def last_start(total):  # where a last window ending at sample `total` starts
        return max(-(-(total - window) // align) * align, 0)

    buffer, buffer_start = None, 0  # the samples kept, and the clip index of buffer[0]
    next_start, covered, total = 0, 0, 0  # the next window's start, the end of the last window, samples so far
    for block in blocks:
        buffer = block if buffer is None else np.concatenate([buffer, block])
        total += len(block)
        while next_start + window <= total:
            offset = next_start - buffer_start
            yield next_start, buffer[offset : offset + window]
            covered, next_start = next_start + window, next_start + hop
        keep_from = max(buffer_start, min(next_start, last_start(total)))  # the next window, or the clip's last
        buffer, buffer_start = buffer[keep_from - buffer_start :], keep_from
    if covered < total:
        start = last_start(total)
        yield start, buffer[start - buffer_start :]


def mark_last(windows, empty_message: str):
    """`(start, samples)` windows -> `(start, samples, is_last)`, reading one window ahead to know the last; no window
    at all (an empty clip) is a ValueError with `empty_message`. The pipelines and the tag command mark windows here."""
    current = next(windows, None)
    if current is None:
        raise ValueError(empty_message)
    for following in windows:
        yield *current, False
        current = following
    yield *current, True


def first_samples(blocks, limit: int, sampling_rate: int, name: str):
    """The blocks up to `limit` samples; when the clip holds more, one warning line says what was read."""
    taken = 0
    for block in blocks:
        if taken + len(block) > limit:
            yield block[: limit - taken]
            logger.warning(
                f"{name}: classified its first {limit / sampling_rate:g} s (max_length_s); the rest was not read."
            )
            return
        taken += len(block)
        yield block


def describe_input(inputs) -> str:
    """The pipeline's input in a few words, for messages."""
    if isinstance(inputs, bytes):
        return f"<{len(inputs)} bytes of a file>"
    if isinstance(inputs, str) or hasattr(inputs, "__fspath__"):
        return str(inputs)
    return f"the {type(inputs).__name__} input"


def audio_blocks(inputs, sampling_rate: int, block_s: float = DECODE_BLOCK_S):
    """The pipeline's input -> an iterator of mono 1-D numpy blocks at `sampling_rate` whose concatenation is the
    clip. A path or a file's bytes is decoded block by block (`decode_blocks`); an `AudioDecoder` (a `datasets`
    audio cell), an array or a dict is one block, converted as transformers' pipeline converts it."""
    if isinstance(inputs, (str, bytes)) or hasattr(inputs, "__fspath__"):
        return decode_blocks(inputs, sampling_rate, block_s)
    if AudioDecoder is not None and isinstance(inputs, AudioDecoder):
        samples = inputs.get_all_samples()
        inputs = {"array": samples.data.mean(dim=0), "sampling_rate": samples.sample_rate}  # (C, L) -> (L,)
    return iter([waveform_array(inputs, sampling_rate)])


def waveform_array(inputs, sampling_rate: int) -> np.ndarray:
    """An array, a tensor or a `{"raw" or "array", "sampling_rate"}` dict -> a 1-D numpy array at `sampling_rate`
    (resampled by torchaudio, as transformers' pipeline does). Integer PCM is left to the feature extractor."""
    if isinstance(inputs, dict):
        if not ("sampling_rate" in inputs and ("raw" in inputs or "array" in inputs)):
            raise ValueError(
                "When passing a dictionary to AudioClassificationPipeline, the dict needs to contain a "
                '"raw" key containing the numpy array or torch tensor representing the audio and a "sampling_rate" '
                "key, containing the sampling_rate associated with that array"
            )
        waveform = inputs["raw"] if inputs.get("raw") is not None else inputs["array"]
        if inputs["sampling_rate"] != sampling_rate:
            from torchaudio import functional  # transformers' pipeline resamples with it too

            waveform = torch.from_numpy(waveform) if isinstance(waveform, np.ndarray) else waveform
            waveform = functional.resample(waveform, inputs["sampling_rate"], sampling_rate)
        inputs = waveform
    if isinstance(inputs, torch.Tensor):
        inputs = inputs.cpu().numpy()
    if not isinstance(inputs, np.ndarray):
        raise TypeError("We expect a numpy ndarray or torch tensor as input")
    if inputs.ndim != 1:
        raise ValueError("We expect a single channel audio input for AudioClassificationPipeline")
    return inputs


def transformers_scores_by_problem_type() -> bool:
    """Whether transformers' own `AudioClassificationPipeline` leaves the score function to the checkpoint's
    `problem_type` when the caller names none (its parameters then carry no `function_to_apply`) rather than applying
    a softmax to every checkpoint. Asked of the class's own parameter handling, not of its version number."""
    config = SimpleNamespace(num_labels=2, problem_type="multi_label_classification")
    try:
        _, _, postprocess_params = AudioClassificationPipeline._sanitize_parameters(
            SimpleNamespace(model=SimpleNamespace(config=config))
        )
    except (AttributeError, TypeError):  # the handling reads more than this stub holds: assume the old default
        return False
    return postprocess_params.get("function_to_apply") in (None, "sigmoid")


def score_audio_classification_by_problem_type() -> bool:
    """Where transformers' own audio-classification pipeline applies a softmax to every checkpoint (5.4 to 5.22), make
    `pipeline("audio-classification", ...)` build `AaspScoresAudioClassificationPipeline`: for an AaSP checkpoint the
    score function follows `problem_type`, as transformers chooses it from 5.23 on, so that a multi-label checkpoint
    gives sigmoid scores however the pipeline is made; every other model's scores, and the decoding, are transformers'
    own. `pipeline()` takes the task's class from this table before it loads the model, so no step of our model's
    loading could choose it. Returns whether it replaced the task's class."""
    from transformers.pipelines import PIPELINE_REGISTRY

    task = PIPELINE_REGISTRY.supported_tasks.get("audio-classification")
    own = (AudioClassificationPipeline, f"{AudioClassificationPipeline.__module__}.AudioClassificationPipeline")
    if task is None or transformers_scores_by_problem_type() or task["impl"] not in own:
        return False  # a newer transformers, or a class someone else registered: left as it is
    PIPELINE_REGISTRY.supported_tasks["audio-classification"] = {**task, "impl": AaspScoresAudioClassificationPipeline}
    return True


def default_function_to_apply(config) -> str:
    """The function that turns a checkpoint's logits into its scores: "sigmoid" for multi-label classification,
    "none" for regression, "softmax" for single-label classification."""
    if config.problem_type == "multi_label_classification":
        return "sigmoid"
    if config.problem_type == "regression":
        return "none"
    return "softmax"


def decode_clip(source, sampling_rate: int):
    """A path or a file's bytes -> mono float32 numpy array (L,) at `sampling_rate`: torchcodec decodes and resamples
    every channel, then the channels are averaged. A truncated WAV gives its whole frames and a warning."""
    name, decoder = open_decoder(source, sampling_rate)
    try:
        samples = decoder.get_all_samples()
    except Exception as error:  # noqa: BLE001 - torchcodec's message does not name the file
        raise decode_error(name, error) from error
    return samples.data.mean(dim=0).numpy()  # (C, L) -> (L,)


def decode_blocks(source, sampling_rate: int, block_s: float = DECODE_BLOCK_S):
    """A path or a file's bytes -> mono float32 numpy blocks (n,) of `block_s` seconds at `sampling_rate`, decoded one
    at a time, so memory does not grow with the file's length. Their concatenation is `decode_clip(source)` sample
    for sample for WAV and FLAC (torchcodec resamples across block boundaries as across the whole file;
    tests/test_long_audio.py checks them); for Opus and MP3 it has as many samples, which differ near a block boundary
    (the decoder restarts at a seek). The file ends where its audio does, not where its header says: an Opus file of a whole
    number of minutes says 6.5 ms more, an MP3's or an AAC's duration is estimated from the bitrate, so the header's
    duration is not read, and a block past the last sample is the end (`ends_before`; tests/test_tag_decoding.py
    checks Opus, MP3, FLAC and Ogg Vorbis of 60 s and of 61.3 s). A truncated WAV gives its whole frames and a
    warning."""
    name, decoder = open_decoder(source, sampling_rate)
    reached = None  # seconds: where the audio decoded so far ends, None before the first block
    for index in itertools.count():
        start = index * block_s
        try:
            samples = decoder.get_samples_played_in_range(start, start + block_s)
        except Exception as error:  # noqa: BLE001 - torchcodec's message does not name the file
            if reached is not None and ends_before(decoder, start, block_s, reached, sampling_rate):
                return
            if reached is None and NO_FRAMES in str(error):  # opened, but not one frame from 0 s on: no audio
                return  # (an empty WAV); the caller says that the file holds no audio
            raise decode_error(name, error) from error
        if samples.data.shape[1] == 0:
            return
        reached = samples.pts_seconds + samples.data.shape[1] / sampling_rate
        yield samples.data.mean(dim=0).numpy()  # (C, n) -> (n,)


# torchcodec's words when a range holds no audio frame at all
NO_FRAMES = "No audio frames were decoded"


def ends_before(decoder, start: float, block_s: float, reached: float, sampling_rate: int) -> bool:
    """Whether a file whose block [start, start + block_s) failed to decode ends at or before `start` (torchcodec
    refuses a range that starts past the last frame): the block before ended at `reached` seconds, before `start`
    (the audio ended inside it), or the same range begun up to a second earlier holds only the audio before `start`
    (the audio ends exactly at `start`, e.g. a 60-s FLAC file read in 60-s blocks; torchcodec refuses a range of the
    last sample alone, hence not one sample earlier). Otherwise the failure is the file's, and the caller raises it."""
    if reached < start - 0.5 / sampling_rate:
        return True
    before = min(1.0, block_s)  # seconds: the block before was whole, so this much audio precedes `start`
    try:
        tail = decoder.get_samples_played_in_range(start - before, start + block_s)
    except Exception:  # noqa: BLE001 - decoding on from before `start` fails too: a damaged file
        return False
    return tail.data.shape[1] <= round(before * sampling_rate)


def open_decoder(source, sampling_rate: int):
    """A path or a file's bytes -> (its name for messages, a torchcodec `AudioDecoder` resampling to
    `sampling_rate`). A WAV whose header promises more frames than the file holds is opened on the whole frames it
    holds, with a warning naming it."""
    name = f"<{len(source)} bytes of a file>" if isinstance(source, bytes) else str(source)
    if AudioDecoder is None:
        raise ImportError(
            f"Decoding {name} needs torchcodec (`pip install torchcodec`, which uses ffmpeg's libraries). Or pass the "
            f"decoded waveform: {{'raw': array, 'sampling_rate': rate}}."
        )
    # a URL goes to torchcodec as it is; a missing file: open's error names it
    truncation = wav_truncation(source) if isinstance(source, bytes) or "://" not in name else None
    if truncation is not None:
        warnings.warn(f"{name}: {truncation[0]}; using the audio it holds.", stacklevel=3)
        source = truncation[1]  # the header and the whole frames: a partial frame fails to decode
    try:
        return name, AudioDecoder(source, sample_rate=sampling_rate)
    except Exception as error:  # noqa: BLE001 - torchcodec's message does not name the file
        raise decode_error(name, error) from error


def decode_error(name: str, error: Exception) -> ValueError:
    return ValueError(
        f"Could not decode {name} as audio ({type(error).__name__}: {error}). Is it an audio file (wav, flac, "
        f"mp3, ogg, ...) that is complete?"
    )


def wav_truncation(source):
    """A path or a file's bytes -> for a RIFF/WAVE file whose data chunk promises more frames than the file holds,
    `(what is wrong in words, the bytes of its header and of the whole frames it holds, the number of those frames)`;
    None for a complete WAV or another format. Reads only the chunk headers of a file that is not truncated."""
    with io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else open(source, "rb") as file:
        return _wav_truncation(file)


def _wav_truncation(file):
    head = file.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    size = file.seek(0, io.SEEK_END)
    file.seek(12)
    rate = block_align = None
    while True:
        chunk = file.read(8)
        if len(chunk) < 8:
            return None
        chunk_id, chunk_size, start = chunk[:4], int.from_bytes(chunk[4:], "little"), file.tell()
        if chunk_id == b"fmt ":
            fmt = file.read(16)
            if len(fmt) < 16:
                return None
            rate, block_align = int.from_bytes(fmt[4:8], "little"), int.from_bytes(fmt[12:14], "little")
        elif chunk_id == b"data":
            if not rate or not block_align or chunk_size == 0xFFFFFFFF:  # 0xFFFFFFFF: streamed, size unknown
                return None
            promised, held = chunk_size // block_align, max(size - start, 0) // block_align
            if held >= promised:
                return None
            message = (
                f"the WAV header promises {promised} frames ({promised / rate:.3f} s at {rate} Hz) but the file "
                f"holds {held} ({held / rate:.3f} s): it is truncated (an interrupted copy or download?)"
            )
            file.seek(0)
            return message, file.read(start + held * block_align), held
        file.seek(start + chunk_size + (chunk_size & 1))  # chunks are padded to an even size


# ----------------------------------------------------------------------------------------------------------------------
# Sound events: frame scores -> events
#
# A frame classifier scores every output frame (one time-patch column, `AaspConfig.frame_duration`: 0.16 s for the
# defaults) with an independent sigmoid per class. `frame_events` turns a clip's (frames, classes) scores into the event
# list that sound-event-detection metrics read (aasp_hf.evaluation.sound_events scores such lists as DCASE does); its
# settings are the config's `event_thresholds`, `event_median_filter`, `event_min_duration` and `event_merge_gap`.
# numpy only: this section travels with the checkpoints.
# ----------------------------------------------------------------------------------------------------------------------


def median_filter_frames(scores: np.ndarray, length: int) -> np.ndarray:
    """A running median of `length` frames along time, one per class: (T, C) -> (T, C). `length` is odd; 1 returns a
    copy. The window is centred and the edges repeat the first and last frames, as
    `scipy.ndimage.median_filter(scores, size=(length, 1), mode="nearest")` does."""
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores must be (frames, classes), got shape {scores.shape}")
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1 or length % 2 == 0:
        raise ValueError(f"the median filter's length must be a positive odd number of frames, got {length!r}")
    if length == 1 or scores.shape[0] == 0:
        return scores.copy()
    half = length // 2
    padded = np.pad(scores, ((half, half), (0, 0)), mode="edge")  # (T + length - 1, C)
    windows = np.lib.stride_tricks.sliding_window_view(padded, length, axis=0)  # (T, C, length)
    return np.median(windows, axis=-1)  # odd length: the middle value itself, no averaging


def frame_events(
    scores: np.ndarray,
    frame_seconds: float,
    labels,
    thresholds=None,
    median_filter: int = 1,
    min_duration: float = 0.0,
    merge_gap: float = 0.0,
    duration: float | None = None,
) -> list[dict]:
    """A clip's frame scores -> its sound events.

    Args:
        scores: (T, C) probabilities in [0, 1], frame t covering [t, t + 1) * frame_seconds.
        frame_seconds: the hop between frames in seconds (0.16 for one patch column of the released front end).
        labels: the C class names, in the order of the columns.
        thresholds: None (0.5 for every class), one float for all, or a sequence of C floats. A frame is active for a
            class when its (filtered) score is >= the class's threshold: a threshold is the lowest score that counts,
            so 0 makes every frame active and a frame scored exactly 0.5 is active at the default.
        median_filter: the length in frames of the running median applied to each class's scores before the threshold
            (`median_filter_frames`); odd, 1 = none. A median commutes with a threshold, so the active frames are those
            of filtering the thresholded decisions instead (as DCASE 2021's baseline did): an active or inactive run of
            at most (length - 1) / 2 frames between longer ones is removed. The events' scores are filtered scores.
        min_duration: events shorter than this many seconds are dropped, after merging and clipping.
        merge_gap: two events of one class separated by at most this many seconds (of inactive frames) become one.
        duration: the clip's length in seconds, when known: offsets are clipped to it (the last frame may reach past
            the end of the audio) and events that start at or after it are dropped.

    Returns:
        One dict per event, `{"onset", "offset", "label", "score"}`, sorted by onset then label: onset = first frame *
        frame_seconds, offset = (last frame + 1) * frame_seconds (clipped to `duration`), score = the highest filtered
        score inside the event. Durations are compared in frames with a tolerance of 1e-9 frame, so that a gap of
        exactly `merge_gap` seconds merges whatever the rounding of `frames * frame_seconds`.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = list(labels)
    if scores.ndim != 2 or scores.shape[1] != len(labels):
        raise ValueError(f"scores must be (frames, {len(labels)} labels), got shape {scores.shape}")
    if np.isnan(scores).any():
        raise ValueError("scores contain NaN")
    if scores.size and (scores.min() < 0.0 or scores.max() > 1.0):
        raise ValueError(
            f"scores must be probabilities in [0, 1] (apply the sigmoid to logits first), got values in "
            f"[{scores.min():.3g}, {scores.max():.3g}]"
        )
    if not frame_seconds > 0:
        raise ValueError(f"frame_seconds must be > 0, got {frame_seconds!r}")
    for name, value in (("min_duration", min_duration), ("merge_gap", merge_gap)):
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    if duration is not None and not duration > 0:
        raise ValueError(f"duration must be > 0 seconds, got {duration!r}")
    thresholds = _class_thresholds(thresholds, len(labels))

    filtered = median_filter_frames(scores, median_filter)
    active = filtered >= thresholds  # (T, C)
    tolerance = 1e-9
    events = []
    for c, label in enumerate(labels):
        padded = np.concatenate([[False], active[:, c], [False]]).astype(np.int8)
        edges = np.diff(padded)
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # run = frames [start, end)
        runs = []
        for start, end in zip(starts.tolist(), ends.tolist()):
            if runs and start - runs[-1][1] <= merge_gap / frame_seconds + tolerance:
                runs[-1][1] = end
            else:
                runs.append([start, end])
        for start, end in runs:
            onset, offset = start * frame_seconds, end * frame_seconds
            if duration is not None:
                if onset >= duration:
                    continue
                offset = min(offset, duration)
            if offset - onset < min_duration - tolerance * frame_seconds:
                continue
            score = float(filtered[start:end, c].max())
            events.append({"onset": float(onset), "offset": float(offset), "label": label, "score": score})
    events.sort(key=lambda event: (event["onset"], event["label"]))
    return events


def _class_thresholds(thresholds, num_classes: int) -> np.ndarray:
    """None, a float or C floats -> (C,) float64, each finite."""
    if thresholds is None:
        return np.full(num_classes, 0.5)
    values = np.asarray(thresholds, dtype=np.float64)
    if values.ndim == 0:
        values = np.full(num_classes, float(values))
    elif values.shape != (num_classes,):
        raise ValueError(f"thresholds must be one float or {num_classes} (one per label), got {values.shape[0]}")
    if not np.isfinite(values).all():
        raise ValueError(f"thresholds must be finite, got {values.tolist()}")
    return values
