# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""An AaSP checkpoint as an X-ARES encoder: `AaspXaresEncoder`, frame-level embeddings (batch, frames, dim).

X-ARES (eXtensive Audio Representation and Evaluation Suite, `pip install xares`) evaluates an encoder on its tasks
with a linear (MLP) probe and k-NN on its stored frame embeddings. Its runner imports a module by path, takes the
one class whose name ends in `Encoder` and builds it with no arguments; the checkpoint folder therefore comes from
the environment when none is passed:

    AASP_XARES_MODEL=runs/pt/encoder python -m xares.run aasp_hf.integrations.xares TASK [TASK ...] --max-jobs 0
    AASP_XARES_OPTIONS='{"frequency_pooling": "mean"}'   # optional: aasp_hf.integrations.hear.load_model's options, as JSON

From Python, `AaspXaresEncoder("runs/pt/encoder", hop_ms=40)` takes the folder and the options directly.

What X-ARES asks of an encoder, and how this one answers:

- `sampling_rate` 16000; `hop_size_in_ms` the hop of the frames (40 by default); `output_dim` the size of a frame;
  `forward(audio)` float (batch, samples) -> float32 (batch, frames, output_dim).
- Frames are the HEAR module's time columns (`aasp_hf.hear`): a column's frequency patches concatenated (or
  averaged), hops below the 160 ms patch by shifted encoder passes, long clips encoded in chunks of the model's
  position table and stitched. Every option of `aasp_hf.integrations.hear.load_model` applies.
- Times follow X-ARES's convention. Its frame-level tasks label frame i with what sounds at i·hop (an event from s
  to e seconds covers frames ceil(s/hop) .. ceil(e/hop) - 1), so frame i here is the column centred at i·hop ms,
  for i = 0 .. ceil(duration / hop) - 1. The HEAR module's first column is centred 75 ms into the clip (half a
  16-frame patch; 87.5 ms with Kaldi frames), so the clip is zero-padded by that much in front, and by one hop
  behind so that the last frame's column exists; frames near the ends see that silence, as they would see X-ARES's
  own zero padding of shorter clips in a batch.

This module is a user of the model, not part of the remote code a checkpoint ships; it needs neither X-ARES nor
its dependencies (`check` imports X-ARES's own checker when it is installed).
Dimensions: B clips, L samples, J frames, E output_dim.
"""

from __future__ import annotations

import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from . import hear
from ..utils.errors import UsageError

MODEL_VARIABLE = "AASP_XARES_MODEL"
OPTIONS_VARIABLE = "AASP_XARES_OPTIONS"


class AaspXaresEncoder(nn.Module):
    """An AaSP checkpoint folder as an X-ARES encoder (frame embeddings centred every `hop_size_in_ms` from 0 ms).

    Args:
        model_path (`str`, *optional*): a `save_pretrained` folder (an exported encoder, a fine-tuned classifier or
            a converted EAT checkpoint). Without it, the folder is read from `$AASP_XARES_MODEL` and the options
            from `$AASP_XARES_OPTIONS` (a JSON object), as X-ARES's runner builds the class with no arguments.
        **options: `aasp_hf.integrations.hear.load_model`'s options (`layers`, `frequency_pooling`, `hop_ms`,
            `timestamp_method`, `batch_size`; `scene_pooling` does not apply: X-ARES pools frames itself).

    Example:

    ```python
    >>> encoder = AaspXaresEncoder("runs/pt/encoder")
    >>> encoder(torch.randn(2, 50000)).shape  # 3.125 s -> frames centred at 0, 40, ..., 3120 ms
    torch.Size([2, 79, 512])
    ```
    """

    def __init__(self, model_path: str | None = None, **options):
        super().__init__()
        if model_path is None:
            model_path = os.environ.get(MODEL_VARIABLE, "")
            if not model_path:
                raise UsageError(
                    f"AaspXaresEncoder needs a checkpoint folder: pass model_path, or set "
                    f"{MODEL_VARIABLE}=FOLDER (a save_pretrained folder) for X-ARES's runner."
                )
            options = {**_options_from_environment(), **options}
        if "scene_pooling" in options:
            raise UsageError("scene_pooling does not apply to X-ARES (it averages the frames itself): leave it out.")
        self.hear = hear.load_model(model_path, **options)
        self.sampling_rate = self.hear.sample_rate
        self.output_dim = self.hear.timestamp_embedding_size
        self.hop_size_in_ms = self.hear.hop_ms
        self.hop_samples = round(self.hop_size_in_ms * self.sampling_rate / 1000)
        # The HEAR module's first column is centred at frame (P - 1) / 2 of the log-mel (7.5 frames = 75 ms; Kaldi
        # frames add half their window): that much silence in front puts column i at i·hop of the clip.
        first_centre_ms = (self.hear.patch_frames - 1) / 2 * self.hear.frame_ms + self.hear.frame_offset_ms
        self.lead_samples = round(first_centre_ms * self.sampling_rate / 1000)

    def num_frames(self, num_samples: int) -> int:
        """The frames of an L-sample clip: those centred at i·hop with i·hop < L / sampling_rate (at least one)."""
        return max(1, math.ceil(num_samples / self.hop_samples))

    @torch.no_grad()
    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """float (B, L) at `sampling_rate` -> float32 (B, J, output_dim), J = ceil(L / hop), frame i centred at
        i·`hop_size_in_ms` ms of the clip."""
        if not isinstance(audio, torch.Tensor) or audio.ndim != 2 or audio.shape[1] == 0:
            shape = tuple(audio.shape) if isinstance(audio, torch.Tensor) else type(audio).__name__
            raise UsageError(
                f"audio must be a float tensor of shape (batch, samples) at {self.sampling_rate} Hz with "
                f"at least one sample, got {shape}."
            )
        count = self.num_frames(audio.shape[1])  # J
        audio = F.pad(audio, (self.lead_samples, self.hop_samples))  # (B, lead + L + hop)
        embeddings, timestamps = self.hear.timestamp_embeddings(audio)  # (B, J', E), (B, J') ms of the padded clip
        lead_ms = 1000.0 * self.lead_samples / self.sampling_rate
        expected = lead_ms + self.hop_size_in_ms * torch.arange(count, dtype=torch.float64)
        if embeddings.shape[1] < count or not torch.allclose(timestamps[0, :count].double().cpu(), expected):
            raise RuntimeError(
                f"the HEAR module's columns are not centred at i·{self.hop_size_in_ms:g} ms of the "
                f"clip (got {timestamps[0, :3].tolist()} ms with {lead_ms:g} ms in front): a bug"
            )
        return embeddings[:, :count]  # (B, J, E)


def check(encoder: nn.Module) -> bool:
    """X-ARES's own `check_audio_encoder` on `encoder` (it feeds two 50,000-sample clips); needs X-ARES installed."""
    try:
        from xares.audio_encoder_checker import check_audio_encoder
    except ImportError as error:
        raise UsageError(f"X-ARES is not installed here ({error}): pip install 'aasp_hf[xares]'.") from None
    return check_audio_encoder(encoder)


def _options_from_environment() -> dict:
    text = os.environ.get(OPTIONS_VARIABLE, "").strip()
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError:
        options = None
    if not isinstance(options, dict):
        raise UsageError(
            f"{OPTIONS_VARIABLE}={text!r} must be a JSON object of aasp_hf.integrations.hear.load_model's options, "
            f"e.g. '{{\"hop_ms\": 20}}'."
        )
    return options


__all__ = ["AaspXaresEncoder", "check"]
