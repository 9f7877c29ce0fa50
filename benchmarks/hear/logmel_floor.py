"""The floor for `make hear-check`: a HEAR 2021 module with no weights, a 16 kHz log-mel spectrogram.

What any learned representation should beat on a task: a timestamp embedding is one log-mel frame (128 mel bins,
64 ms window, 40 ms hop, the hop of `aasp_hf.hear`'s default), a scene embedding is the time average of the frames.
HEAR's tools import it by name, as they import `aasp_hf.hear`, with benchmarks/hear on the import path (in the venv
`make hear-check` builds):

    PYTHONPATH=benchmarks/hear .venv-hear/bin/hear-validator logmel_floor
    PYTHONPATH=benchmarks/hear .venv-hear/bin/python -m heareval.embeddings.runner logmel_floor --tasks-dir TASKS
"""

import torch
import torchaudio
from torch import nn

SAMPLE_RATE = 16000
N_FFT = 1024  # 64 ms
HOP = 640  # 40 ms
N_MELS = 128


class LogMel(nn.Module):
    sample_rate = SAMPLE_RATE
    scene_embedding_size = N_MELS
    timestamp_embedding_size = N_MELS

    def __init__(self):
        super().__init__()
        self.melspec = torchaudio.transforms.MelSpectrogram(
            sample_rate=SAMPLE_RATE, n_fft=N_FFT, hop_length=HOP, n_mels=N_MELS, center=True
        )

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """(n_sounds, n_samples) -> log-mel (n_sounds, n_frames, N_MELS); frame k is centred at k·HOP samples."""
        return torch.log(self.melspec(audio) + 1e-6).transpose(1, 2)


def load_model(model_file_path: str = "") -> LogMel:
    if model_file_path:
        raise ValueError(f"the log-mel floor has no weights: pass no model file (got {model_file_path!r})")
    return LogMel()


def get_timestamp_embeddings(audio: torch.Tensor, model: LogMel) -> tuple[torch.Tensor, torch.Tensor]:
    """(n_sounds, n_samples) -> (embeddings (n_sounds, n_frames, N_MELS), timestamps (n_sounds, n_frames) in ms)."""
    with torch.no_grad():
        embeddings = model(audio)
    frames = torch.arange(embeddings.shape[1], dtype=torch.float32, device=audio.device)
    timestamps = frames * (1000 * HOP / SAMPLE_RATE)  # frame k is centred at k·HOP samples
    return embeddings, timestamps.expand(audio.shape[0], -1)


def get_scene_embeddings(audio: torch.Tensor, model: LogMel) -> torch.Tensor:
    """(n_sounds, n_samples) -> the time average of the log-mel frames (n_sounds, N_MELS)."""
    with torch.no_grad():
        return model(audio).mean(dim=1)
