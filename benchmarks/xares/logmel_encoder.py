"""The log-mel baseline for `make xares-check`: an X-ARES encoder with no weights, 128 log-mel bins every 40 ms.

What any learned representation should beat on a task, scored by X-ARES's own probes beside the checkpoint: frame i
is the log-mel frame centred at i·40 ms (a centred STFT, 64 ms window), the convention of X-ARES's frame labels and
of `aasp_hf.integrations.xares`. X-ARES's runner imports it by name, as it imports `aasp_hf.integrations.xares`:

    python -m xares.run benchmarks.xares.logmel_encoder TASK [TASK ...] --max-jobs 0
"""

import math

import torch
import torchaudio
from torch import nn

SAMPLING_RATE = 16000
HOP_MS = 40
N_MELS = 128


class LogMelEncoder(nn.Module):
    sampling_rate = SAMPLING_RATE
    hop_size_in_ms = HOP_MS
    output_dim = N_MELS

    def __init__(self):
        super().__init__()
        self.melspec = torchaudio.transforms.MelSpectrogram(
            sample_rate=SAMPLING_RATE, n_fft=1024, hop_length=SAMPLING_RATE * HOP_MS // 1000, n_mels=N_MELS, center=True
        )

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """(batch, samples) -> (batch, ceil(samples / hop), N_MELS); frame i centred at i·HOP_MS ms."""
        frames = max(1, math.ceil(audio.shape[-1] / self.melspec.hop_length))
        return torch.log(self.melspec(audio) + 1e-6).transpose(1, 2)[:, :frames]
