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
Arrays and dicts go to transformers' pipeline unchanged. Its scores follow the checkpoint's `problem_type` (a sigmoid
for a multi-label checkpoint) on every transformers 5.x, through `ProblemTypeAudioClassificationPipeline`.
"""

import io
import warnings
from types import SimpleNamespace

from transformers.pipelines.audio_classification import AudioClassificationPipeline


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


class ProblemTypeAudioClassificationPipeline(AudioClassificationPipeline):
    """transformers' audio-classification pipeline whose scores follow the checkpoint's `problem_type` when the
    caller names no `function_to_apply`: a sigmoid for "multi_label_classification" (independent labels, e.g.
    AudioSet's), none for "regression", a softmax otherwise. transformers' own class does this from 5.23 on; from 5.4
    to 5.22 it applies a softmax to every checkpoint, so a multi-label classifier's scores summed to 1. A function
    named when the pipeline is built holds for the calls that name none."""

    def _sanitize_parameters(self, top_k=None, function_to_apply=None, **kwargs):
        preprocess_params, forward_params, postprocess_params = super()._sanitize_parameters(
            top_k=top_k, function_to_apply=function_to_apply, **kwargs
        )
        if function_to_apply is None:
            built_with = getattr(self, "_postprocess_params", {}).get("function_to_apply")  # None while building
            postprocess_params["function_to_apply"] = built_with or default_function_to_apply(self.model.config)
        return preprocess_params, forward_params, postprocess_params


class AaspAudioClassificationPipeline(ProblemTypeAudioClassificationPipeline):
    """`AudioClassificationPipeline` whose file decoding averages the channels, (L + R) / 2.

    Takes what transformers' pipeline takes: a path (a `str` or `pathlib.Path`), a URL (torchcodec opens it), a file's
    bytes, a 1-D float array at 16 kHz, a `{"raw" or "array", "sampling_rate"}` dict; and a torchcodec `AudioDecoder`
    (a `datasets` audio cell), whose channels are averaged too rather than refused.
    """

    def preprocess(self, inputs):
        if isinstance(inputs, (str, bytes)) or hasattr(inputs, "__fspath__"):
            inputs = decode_clip(inputs, self.feature_extractor.sampling_rate)  # (L,) float32, the channel mean
        elif AudioDecoder is not None and isinstance(inputs, AudioDecoder):
            samples = inputs.get_all_samples()
            waveform = samples.data.mean(dim=0).numpy()  # (C, L) -> (L,)
            inputs = {"array": waveform, "sampling_rate": samples.sample_rate}
        return super().preprocess(inputs)


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
    """Where transformers' own audio-classification pipeline applies a softmax to every checkpoint, make
    `pipeline("audio-classification", ...)` build `ProblemTypeAudioClassificationPipeline` (the same class with the
    score function chosen by `problem_type`, as transformers chooses it from 5.23 on), so that a multi-label
    checkpoint gives sigmoid scores however the pipeline is made. Other checkpoints' scores, and the decoding, are
    transformers' own. Returns whether it replaced the task's class."""
    from transformers.pipelines import PIPELINE_REGISTRY

    task = PIPELINE_REGISTRY.supported_tasks.get("audio-classification")
    if task is None or transformers_scores_by_problem_type() or task["impl"] is not AudioClassificationPipeline:
        return False  # a newer transformers, or a class someone else registered: left as it is
    PIPELINE_REGISTRY.supported_tasks["audio-classification"] = {
        **task,
        "impl": ProblemTypeAudioClassificationPipeline,
    }
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
        samples = AudioDecoder(source, sample_rate=sampling_rate).get_all_samples()
    except Exception as error:  # noqa: BLE001 - torchcodec's message does not name the file
        raise ValueError(
            f"Could not decode {name} as audio ({type(error).__name__}: {error}). Is it an audio file (wav, flac, "
            f"mp3, ogg, ...) that is complete?"
        ) from error
    return samples.data.mean(dim=0).numpy()  # (C, L) -> (L,)


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
