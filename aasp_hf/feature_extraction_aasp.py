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
"""AaSP feature extractor: 16 kHz waveforms -> normalised log-mel `input_values` (B, T, F) and a frame
`attention_mask` (B, T), T a multiple of the model's time patch size.

Two sections: the log-mel front ends it runs (`LogMelFrontEnd`: the paper's M2D log-mel, `mode="m2d"`, and EAT's
Kaldi fbank, `mode="kaldi"`, with their kernels as plain functions), then `AaspFeatureExtractor`, which holds the
settings, turns the accepted inputs into clips (`unpack_audio_rows`, `audio_to_clips`) and pads the output
(`pad_frames`).

Shipped to the Hub as remote code with its sibling `configuration_aasp.py` (for `TIME_PATCH_SIZE`), which it imports
relatively; otherwise it imports only the standard library, numpy, torch and transformers. Dimension legend: B clips,
L samples, T frames, F mel bins, K FFT bins, W window samples.
"""

import copy
import math

import numpy as np
import torch
from transformers.audio_utils import mel_filter_bank
from transformers.feature_extraction_sequence_utils import SequenceFeatureExtractor
from transformers.feature_extraction_utils import BatchFeature
from transformers.utils import PaddingStrategy, TensorType, logging

from .configuration_aasp import TIME_PATCH_SIZE, init_arguments, unknown_keys_message


# ====================================================================================================================
# Log-mel front ends
# ====================================================================================================================
# The two log-mel front ends of `AaspFeatureExtractor`: batched waveforms (B, L) -> log-mel (B, T, F).
#
# - ``"m2d"`` (the default, the paper's front end; Sec. 4.2 fixes 16 kHz, Hann 400, hop 160, n_fft 1024, 128 mel bins
#   and the standardisation (-7.1, 4.1), and what it leaves open follows M2D, see docs/paper_to_code.md): centred STFT
#   with reflect padding, periodic Hann window of 400 samples inside a 1024-point FFT, hop 160, power 2, 128 Slaney mel
#   bins (Slaney norm) from 50 Hz to 8 kHz, ``log(x + eps_float32)``, then ``(x - (-7.1)) / 4.1``.
# - ``"kaldi"`` (for converted EAT checkpoints): EAT's front end, i.e. the waveform minus its own mean, then
#   ``torchaudio.compliance.kaldi.fbank(wav, htk_compat=True, sample_frequency=16000, use_energy=False,
#   window_type="hanning", num_mel_bins=128, dither=0.0, frame_shift=10)`` reimplemented in torch, then
#   ``(x - (-4.268)) / (2 * 4.569)``.
#
# Both run batched in torch (no per-clip loop in the compute) and give every clip of a batch the frames that clip gives
# alone. `LogMelFrontEnd` holds one mode's settings, its frame arithmetic and its filter bank and window (built once per
# device); the kernels (`m2d_log_mel`, `kaldi_log_fbank` and their steps) are plain functions below it.


# Each mode's defaults for the settings that depend on it; the feature extractor resolves a `None` argument to these.
MODE_DEFAULTS = {
    # M2D: Slaney mel 50 Hz - 8 kHz inside a 1024-point FFT; statistics (-7.1, 4.1).
    "m2d": {"n_fft": 1024, "f_min": 50.0, "f_max": 8000.0, "mean": -7.1, "std": 4.1},
    # EAT / Kaldi fbank: FFT of the next power of two above the window (512), mel 20 Hz - Nyquist
    # (f_max None -> sampling_rate / 2); EAT normalises with (x + 4.268) / (2 * 4.569).
    "kaldi": {"n_fft": 512, "f_min": 20.0, "f_max": None, "mean": -4.268, "std": 2 * 4.569},
}
_KALDI_PREEMPHASIS = 0.97  # torchaudio.compliance.kaldi.fbank default
_MEL_GROUP = 32  # filters per band of the sparse mel projection (`mel_bands`)
_CPU_BLOCK_FRAMES = 2048  # frames per block of the CPU m2d path: its spectrum (~8 MiB) stays in (L2/L3) cache


class LogMelFrontEnd:
    """One front end (``mode`` "m2d" or "kaldi") at fixed settings: its frame counts and its batched kernel.

    The mel filter bank and the window are built on first use on a device and kept.
    """

    def __init__(self, mode, sampling_rate, num_mel_bins, n_fft, win_length, hop_length, f_min, f_max):
        self.settings = (mode, sampling_rate, num_mel_bins, n_fft, win_length, hop_length, f_min, f_max)
        self.mode, self.sampling_rate, self.num_mel_bins = mode, sampling_rate, num_mel_bins
        self.n_fft, self.win_length, self.hop_length = n_fft, win_length, hop_length
        self.f_min, self.f_max = f_min, f_max
        self._tensors = {}  # device -> (window, mel bands)

    def num_frames(self, num_samples: int) -> int:
        """Frames of one clip of `num_samples` samples, before truncation, rounding and padding.

        m2d: centred frames, ``1 + (L + 2 * (n_fft // 2) - n_fft) // hop`` (= ``1 + L // hop`` for even n_fft).
        kaldi: frames that fit entirely (snip_edges), ``1 + (L - win_length) // hop``.
        """
        num_samples = int(num_samples)
        if num_samples <= 0:
            raise ValueError(f"num_samples={num_samples}: a clip needs at least one sample.")
        if self.mode == "kaldi":
            if num_samples < self.win_length:
                raise ValueError(
                    f"num_samples={num_samples}: kaldi mode needs at least win_length={self.win_length} samples "
                    f"({1000 * self.win_length / self.sampling_rate:g} ms)."
                )
            return 1 + (num_samples - self.win_length) // self.hop_length
        return 1 + (num_samples + 2 * (self.n_fft // 2) - self.n_fft) // self.hop_length

    def samples_for_frames(self, num_frames: int) -> int:
        """Fewest leading samples from which the first `num_frames` frames come out as from the whole clip."""
        if self.mode == "kaldi":
            return (num_frames - 1) * self.hop_length + self.win_length
        # Frame t reads padded samples [t*hop, t*hop + n_fft), i.e. original samples < t*hop + n_fft - n_fft//2.
        return (num_frames - 1) * self.hop_length + self.n_fft - self.n_fft // 2

    def mel_filters(self) -> np.ndarray:
        """This mode's mel filters, float64 (K, F) with K = n_fft // 2 + 1."""
        filters = slaney_mel_filters if self.mode == "m2d" else kaldi_mel_filters
        return filters(self.n_fft, self.num_mel_bins, self.f_min, self.f_max, self.sampling_rate)

    def window_and_bands(self, device):
        """The window (m2d: periodic Hann, torch.stft's; kaldi: symmetric Hann, Kaldi's "hanning"), float32 (W,),
        and `mel_bands` of the mel filters, both on `device`; built once per device."""
        key = str(device)
        if key not in self._tensors:
            window = torch.hann_window(self.win_length, periodic=self.mode == "m2d").to(device)
            bands = [(*band[:4], band[4].to(device)) for band in mel_bands(self.mel_filters())]
            self._tensors[key] = window, bands
        return self._tensors[key]

    def __call__(self, waveforms, lengths, min_frames=0, mean=None, std=None):
        """Log-mel of a zero-padded batch: (B, L_max) with B `lengths` -> (B, T, F), normalised with `mean`/`std` when
        given. m2d: T = max(T_max, `min_frames`), frames past T_max left uninitialised; kaldi: T = T_max (the kaldi
        caller subtracts each clip's mean first, `subtract_clip_means`, over the whole clip)."""
        window, bands = self.window_and_bands(waveforms.device)
        if self.mode == "m2d":
            return m2d_log_mel(
                waveforms,
                lengths,
                window,
                bands,
                self.n_fft,
                self.hop_length,
                self.num_mel_bins,
                min_frames=min_frames,
                mean=mean,
                std=std,
            )
        return kaldi_log_fbank(waveforms, window, bands, self.n_fft, self.hop_length, self.num_mel_bins, mean, std)


# ----------------------------------------------------------------------------------------------------
# Numerical kernels: plain functions of tensors and settings, batched over clips.
# ----------------------------------------------------------------------------------------------------


def normalize_log_mel(log_mel, mean: float, std: float, inplace: bool = False):
    """``(log_mel - mean) / std`` for a tensor or numpy array of any shape; ``inplace`` (tensors only) reuses it."""
    if inplace:
        return log_mel.sub_(mean).div_(std)
    return (log_mel - mean) / std


def slaney_mel_filters(n_fft, num_mel_bins, f_min, f_max, sampling_rate) -> np.ndarray:
    """M2D filters: Slaney-scale, Slaney-normalised triangles, float64 (K, F) with K = n_fft // 2 + 1."""
    return mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1,
        num_mel_filters=num_mel_bins,
        min_frequency=f_min,
        max_frequency=f_max,
        sampling_rate=sampling_rate,
        norm="slaney",
        mel_scale="slaney",
    )


def kaldi_mel_filters(n_fft, num_mel_bins, f_min, f_max, sampling_rate) -> np.ndarray:
    """Kaldi's filters (torchaudio.compliance.kaldi.get_mel_banks without VTLN), float64 (K, F).

    Triangles equally spaced on mel = 1127 ln(1 + f / 700) between f_min and f_max, evaluated at FFT bins
    0 .. n_fft/2 - 1; the Nyquist bin gets weight 0.
    """
    mel = lambda f: 1127.0 * np.log1p(np.asarray(f, dtype=np.float64) / 700.0)  # noqa: E731
    mel_low, mel_high = mel(f_min), mel(f_max)
    delta = (mel_high - mel_low) / (num_mel_bins + 1)
    edges = mel_low + delta * np.arange(num_mel_bins + 2)  # (F + 2,): left, centre, right mels
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # (F, 1) each
    bin_mel = mel(sampling_rate / n_fft * np.arange(n_fft // 2))[None, :]  # (1, K - 1)
    up = (bin_mel - left) / (centre - left)
    down = (right - bin_mel) / (right - centre)
    banks = np.maximum(0.0, np.minimum(up, down))  # (F, K - 1)
    banks = np.pad(banks, ((0, 0), (0, 1)))  # Nyquist column = 0: (F, K - 1) -> (F, K)
    return banks.T  # (K, F)


def mel_bands(filters: np.ndarray) -> list:
    """A filter bank (K, F) as bands of consecutive filters, for a sparse |X|^2 -> mel product (`power_to_mel`).

    Each FFT bin feeds at most two triangular filters, so instead of one dense (2K, F) matmul the projection
    is done per group of ``_MEL_GROUP`` consecutive filters over only the rows their triangles cover:
    ``(lo, hi, first, last, weights)`` with ``weights`` float32 = interleaved rows ``[lo, hi)`` of filters
    ``[first, last)``, about 1/8 of the dense multiply-adds for the M2D filters. Groups whose filters are all
    zero are left out (their outputs are 0). CPU tensors.
    """
    stacked = torch.from_numpy(filters).float().repeat_interleave(2, dim=0)  # (K, F) -> (2K, F): rows Re², Im²
    bands = []
    for first in range(0, stacked.shape[1], _MEL_GROUP):
        last = min(first + _MEL_GROUP, stacked.shape[1])
        rows = stacked[:, first:last].ne(0).any(dim=1).nonzero().flatten()  # rows these filters read
        if rows.numel():
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            bands.append((lo, hi, first, last, stacked[lo:hi, first:last].contiguous()))
    return bands


def power_to_mel(spectrum, bands, num_mel_bins: int, out=None):
    """|X|^2 @ M for a complex spectrum (B, T, K) and filters M (K, F) given as `mel_bands` -> (B, T, F).

    Computed as [Re^2, Im^2] @ [M; M] (rows interleaved), i.e. one in-place square of the freshly made
    spectrum (which it overwrites) and no separate |X|^2 pass, and with M banded: one small matmul per group
    of filters over only the FFT bins that group reads. ``out``: an optional (B·T, F) tensor (rows may be
    strided) to write into.
    """
    batch, frames, bins = spectrum.shape
    squares = torch.view_as_real(spectrum).square_().reshape(batch * frames, 2 * bins)  # (B·T, 2K), no copy
    if out is None:
        out = squares.new_empty(batch * frames, num_mel_bins)  # (B·T, F)
    covered = 0
    for lo, hi, first, last, weights in bands:
        if first > covered:
            out[:, covered:first] = 0.0  # filters that read no bin at all
        torch.mm(squares[:, lo:hi], weights, out=out[:, first:last])  # (B·T, hi-lo) @ (hi-lo, g)
        covered = last
    if covered < num_mel_bins:
        out[:, covered:] = 0.0
    return out.view(batch, frames, num_mel_bins)  # (B·T, F) -> (B, T, F)


def reflect_pad(waveforms, lengths, pad: int):
    """Centre padding as torch.stft(center=True, pad_mode="reflect") does, but at each clip's own edges.

    Clip i (length L_i, zero beyond) becomes ``reflect(clip_i)`` of length L_i + 2P (P = ``pad``, n_fft // 2),
    then zeros up to L_max + 2P. Out-of-range sample positions j fold into [0, L_i) with period 2(L_i - 1)
    (repeated reflection, so clips shorter than P + 1 also work; L_i = 1 repeats its one sample).
    (B, L_max) -> (B, L_max + 2P).
    """
    batch = waveforms.shape[0]
    lengths = lengths[:, None]  # (B,) -> (B, 1)
    period = (2 * (lengths - 1)).clamp(min=1)  # (B, 1)

    def fold(j):  # j: (B, P) sample positions, possibly outside [0, L_i) -> indices inside
        j = torch.remainder(j, period)
        return torch.where(j < lengths, j, period - j).clamp(min=0)

    offsets = torch.arange(pad, device=waveforms.device)[None, :]  # (1, P)
    left = torch.gather(waveforms, 1, fold(offsets - pad).expand(batch, pad))  # samples -P .. -1: (B, P)
    right = torch.gather(waveforms, 1, fold(lengths + offsets))  # samples L_i .. L_i + P - 1: (B, P)
    padded = torch.cat([left, waveforms, waveforms.new_zeros(batch, pad)], dim=1)  # (B, L_max + 2P)
    return padded.scatter_(1, pad + lengths + offsets, right)  # right edge of clip i at P + L_i + k


def m2d_log_mel(waveforms, lengths, window, bands, n_fft, hop_length, num_mel_bins, min_frames=0, mean=None, std=None):
    """M2D log-mel: (B, L_max) -> (B, T_max, F), T_max = frames of the longest clip.

    1. reflect-pad each clip at its own edges; 2. STFT (``window`` of win_length centred in n_fft, hop);
    3. power |X|^2; 4. mel filters (``bands``, a banded matmul); 5. log(x + eps); 6. with ``mean``/``std``,
    (x - mean) / std.
    On the CPU, steps 2-6 run block by block (one clip and up to ``_CPU_BLOCK_FRAMES`` of its frames, or
    several whole short clips), so that a block's frames, spectrum and squares stay in cache: about twice
    as fast as whole-batch passes, and the same frames (every frame is computed on its own either way).
    The result has max(T_max, min_frames) frames; frames past T_max are left uninitialised for the caller.
    """
    padded = reflect_pad(waveforms, lengths, n_fft // 2)  # (B, L_max) -> (B, L_max + 2P)
    batch = padded.shape[0]
    total = 1 + (padded.shape[1] - n_fft) // hop_length  # T_max
    out = padded.new_empty(batch, max(total, min_frames), num_mel_bins)  # (B, T, F)
    block_frames = _CPU_BLOCK_FRAMES  # read at call time (tests vary it)
    if padded.device.type != "cpu":
        blocks = [(0, batch, 0, total)]  # one pass on accelerators
    elif total >= block_frames // 2:  # long clips: one clip, a range of its frames
        blocks = [
            (clip, clip + 1, start, min(start + block_frames, total))
            for clip in range(batch)
            for start in range(0, total, block_frames)
        ]
    else:  # short clips: several whole clips
        step = block_frames // total
        blocks = [(first, min(first + step, batch), 0, total) for first in range(0, batch, step)]
    for first, last, start, stop in blocks:
        spectrum = torch.stft(
            padded[first:last, start * hop_length : (stop - 1) * hop_length + n_fft],
            n_fft=n_fft,
            hop_length=hop_length,
            win_length=window.shape[0],
            window=window,
            center=False,
            return_complex=True,
        ).transpose(1, 2)  # (b, K, t) -> (b, t, K), stft's own (contiguous) layout
        target = out[first, start:stop] if last == first + 1 else None  # (t, F) rows of `out`, written in place
        mel = power_to_mel(spectrum, bands, num_mel_bins, out=target)  # (b, t, F)
        mel.add_(torch.finfo(torch.float32).eps).log_()
        if mean is not None:
            normalize_log_mel(mel, mean, std, inplace=True)
        if target is None:
            out[first:last, start:stop] = mel
    return out


def subtract_clip_means(waveforms, lengths):
    """Subtract each clip's mean over its own L_i samples; padding stays zero. (B, L_max) -> (B, L_max).

    The sum runs in float64 so that the mean does not depend on the batch's padded length: kaldi features
    are sensitive to it (a one-ulp change of a 0.2 DC offset moves low mel bins by ~2e-5).
    """
    accumulate = torch.float32 if waveforms.device.type == "mps" else torch.float64  # MPS has no float64
    means = (waveforms.to(accumulate).sum(dim=1) / lengths).to(waveforms.dtype)  # (B,)
    valid = torch.arange(waveforms.shape[1], device=waveforms.device)[None, :] < lengths[:, None]  # (B, L_max)
    return torch.where(valid, waveforms - means[:, None], 0.0)


def kaldi_log_fbank(waveforms, window, bands, n_fft, hop_length, num_mel_bins, mean=None, std=None):
    """Kaldi fbank (torchaudio.compliance.kaldi.fbank with EAT's options): (B, L_max) -> (B, T_max, F).

    1. frames of win_length (``window``'s length) every hop that fit entirely (snip_edges); 2. remove each
    frame's mean; 3. pre-emphasis x[n] - 0.97 x[n-1] (first sample replicated); 4. ``window`` (Kaldi's
    symmetric Hann); 5. zero-pad to n_fft, power |rfft|^2; 6. mel filters (``bands``); 7. log(max(x, eps));
    8. with ``mean``/``std``, (x - mean) / std.
    """
    frames = waveforms.unfold(1, window.shape[0], hop_length)  # (B, L_max) -> (B, T_max, W)
    frames = frames - frames.mean(dim=-1, keepdim=True)  # (B, T_max, W)
    emphasised = torch.empty_like(frames)  # (B, T_max, W), filled in place (no concatenated copy)
    emphasised[..., 0] = frames[..., 0] - _KALDI_PREEMPHASIS * frames[..., 0]  # x[-1] := x[0]
    torch.mul(frames[..., :-1], _KALDI_PREEMPHASIS, out=emphasised[..., 1:])  # 0.97 x[n-1], n >= 1
    torch.sub(frames[..., 1:], emphasised[..., 1:], out=emphasised[..., 1:])  # x[n] - 0.97 x[n-1]
    frames = emphasised.mul_(window)  # (B, T_max, W)
    spectrum = torch.fft.rfft(frames, n=n_fft)  # zero-pad W -> n_fft: (B, T_max, W) -> (B, T_max, K) complex
    mel = power_to_mel(spectrum, bands, num_mel_bins)  # (B, T_max, F)
    log_mel = torch.log(mel.clamp(min=torch.finfo(torch.float32).eps))
    return log_mel if mean is None else normalize_log_mel(log_mel, mean, std, inplace=True)


# ====================================================================================================================
# Feature extractor
# ====================================================================================================================


logger = logging.get_logger(__name__)

_PCM_SCALE = {  # integer PCM -> float in [-1, 1): (x - offset) / scale
    torch.int16: (0.0, 32768.0),
    torch.int32: (0.0, 2147483648.0),
    torch.uint8: (128.0, 128.0),
    torch.int8: (0.0, 128.0),
}
# Keys besides the constructor's own that transformers passes back to `__init__` when it loads a saved
# preprocessor_config.json (`from_dict`): written by `to_dict`, `register_for_auto_class` and processors.
SAVED_KEYS = ("feature_extractor_type", "auto_map", "processor_class", "padding_side")
# `normalize_per_clip`: the smallest standard deviation a bin is divided by (in normalised units, where a bin's spread
# over a clip is of order 1), so that a bin constant over a clip becomes 0 instead of 0 / 0.
_PER_CLIP_STD_FLOOR = 1e-5
# A clip longer than this, read whole by default (no max_frames, truncation=True), is warned about once: a long
# recording is meant to be read in windows.
LONG_CLIP_SECONDS = 60.0


class AaspFeatureExtractor(SequenceFeatureExtractor):
    r"""
    Turns raw 16 kHz mono audio into the normalised log-mel spectrogram an AaSP model takes.

    Args:
        feature_size (`int`, *optional*, defaults to 128):
            Number of mel bins F.
        sampling_rate (`int`, *optional*, defaults to 16000):
            The rate audio must have; other rates raise an error.
        padding_value (`float`, *optional*, defaults to 0.0):
            Value of padding frames, in the normalised domain.
        mode (`str`, *optional*, defaults to `"m2d"`):
            `"m2d"` (the paper's front end) or `"kaldi"` (EAT's front end, for converted EAT checkpoints); see
            `LogMelFrontEnd` above.
        n_fft (`int`, *optional*):
            FFT size. Default 1024 (m2d) or 512 (kaldi).
        win_length (`int`, *optional*, defaults to 400):
            Window length in samples (25 ms).
        hop_length (`int`, *optional*, defaults to 160):
            Hop in samples (10 ms, the step Δ of the paper).
        f_min (`float`, *optional*):
            Lower edge of the mel range in Hz. Default 50 (m2d) or 20 (kaldi).
        f_max (`float`, *optional*):
            Upper edge of the mel range in Hz. Default 8000 (m2d) or the Nyquist frequency, `sampling_rate / 2`
            (kaldi).
        mean (`float`, *optional*):
            The mean of the normalisation `(x - mean) / std`. Default -7.1 (m2d) or -4.268 (kaldi, EAT's
            `(x + 4.268) / (2 * 4.569)`). Stored resolved.
        std (`float`, *optional*):
            The standard deviation of the normalisation `(x - mean) / std`. Default 4.1 (m2d) or 9.138 (kaldi, EAT's
            `2 * 4.569`). Stored resolved.
        do_normalize (`bool`, *optional*, defaults to `True`):
            Whether to apply the normalisation above.
        frame_multiple (`int`, *optional*, defaults to 16):
            Output frame counts are rounded up to a multiple of this. The default is
            `configuration_aasp.TIME_PATCH_SIZE`, which is also `AaspConfig.time_patch_size`'s default.
        max_frames (`int`, *optional*):
            Default for `__call__(max_frames=...)`; a multiple of `frame_multiple`.
        return_attention_mask (`bool`, *optional*, defaults to `True`):
            Whether to return the frame-level attention mask.
        per_clip_normalization (`bool`, *optional*, defaults to `False`):
            Cepstral mean and variance normalisation (CMVN) of each clip on its own, after the normalisation above:
            every mel bin of a clip is brought to mean 0 and standard deviation 1 over the clip's real frames
            (`normalize_per_clip`; padding frames are not counted and stay `padding_value`). It removes any fixed
            gain or equalisation of a recording (a constant per bin of the log-mel), and with it the clip's
            overall level and colour. A model trained with it must be fed with it: it is saved in
            preprocessor_config.json, so the pipeline and the tagger apply it; an extractor saved without the key
            loads with it off.

    Any other keyword is refused with a ValueError that names it and the closest valid one (a misspelt setting would
    otherwise be kept as an inert attribute), except the keys a saved preprocessor_config.json holds (`SAVED_KEYS`).
    The inputs `__call__` accepts are listed in its docstring.
    """

    model_input_names = ["input_values", "attention_mask"]

    def __init__(
        self,
        feature_size=128,
        sampling_rate=16000,
        padding_value=0.0,
        mode="m2d",
        n_fft=None,
        win_length=400,
        hop_length=160,
        f_min=None,
        f_max=None,
        mean=None,
        std=None,
        do_normalize=True,
        frame_multiple=TIME_PATCH_SIZE,
        max_frames=None,
        return_attention_mask=True,
        per_clip_normalization=False,
        **kwargs,
    ):
        unknown = set(kwargs) - set(SAVED_KEYS)
        if unknown:
            raise ValueError(
                unknown_keys_message(
                    unknown,
                    init_arguments(AaspFeatureExtractor),
                    "AaspFeatureExtractor's arguments",
                    "AaspFeatureExtractor's docstring",
                )
            )
        super().__init__(
            feature_size=feature_size,
            sampling_rate=sampling_rate,
            padding_value=padding_value,
            return_attention_mask=return_attention_mask,
            **kwargs,
        )
        if mode not in MODE_DEFAULTS:
            raise ValueError(f"mode={mode!r} is not supported: use 'm2d' (the paper's front end) or 'kaldi' (EAT's).")
        defaults = MODE_DEFAULTS[mode]
        self.mode = mode
        self.n_fft = int(defaults["n_fft"] if n_fft is None else n_fft)
        self.win_length = int(win_length)
        self.hop_length = int(hop_length)
        self.f_min = float(defaults["f_min"] if f_min is None else f_min)
        f_max = defaults["f_max"] if f_max is None else f_max
        self.f_max = float(sampling_rate / 2 if f_max is None else f_max)
        self.mean = float(defaults["mean"] if mean is None else mean)
        self.std = float(defaults["std"] if std is None else std)
        self.do_normalize = bool(do_normalize)
        self.frame_multiple = int(frame_multiple)
        self.max_frames = max_frames
        self.per_clip_normalization = bool(per_clip_normalization)
        self._validate_fields()
        self.max_frames = None if max_frames is None else int(max_frames)  # numpy int -> int, for the JSON

    def _validate_fields(self):
        """Raise a ValueError naming the first field that cannot work."""
        if self.padding_side != "right":
            raise ValueError(f"padding_side={self.padding_side!r}: only 'right' padding is supported.")
        if not (0 < self.win_length <= self.n_fft):
            raise ValueError(f"win_length={self.win_length} must be in [1, n_fft={self.n_fft}].")
        if self.hop_length <= 0:
            raise ValueError(f"hop_length={self.hop_length} must be positive.")
        if self.mode == "kaldi" and self.n_fft % 2:
            raise ValueError(f"n_fft={self.n_fft} must be even in kaldi mode.")
        if not (0.0 <= self.f_min < self.f_max <= self.sampling_rate / 2):
            raise ValueError(
                f"f_min={self.f_min}, f_max={self.f_max}: need 0 <= f_min < f_max <= sampling_rate / 2 "
                f"= {self.sampling_rate / 2}."
            )
        if self.std <= 0:
            raise ValueError(f"std={self.std} must be positive.")
        if self.frame_multiple <= 0:
            raise ValueError(f"frame_multiple={self.frame_multiple} must be a positive integer.")
        self._check_max_frames(self.max_frames, "max_frames")

    def _check_max_frames(self, max_frames, where):
        if max_frames is None:
            return
        if isinstance(max_frames, bool) or not isinstance(max_frames, (int, np.integer)) or max_frames <= 0:
            raise ValueError(f"{where}={max_frames!r} must be a positive integer (a number of frames).")
        if max_frames % self.frame_multiple:
            raise ValueError(
                f"{where}={max_frames} must be a multiple of frame_multiple={self.frame_multiple} (the patch size), "
                f"e.g. {self.round_up_frames(max_frames)}."
            )

    def to_dict(self):
        """The constructor arguments only: the cached front end (a private attribute) is dropped, and so is
        `per_clip_normalization` while it is off, so that such an extractor saves the preprocessor_config.json it saved
        before the option existed (which versions of this file that predate it still load), while one with it on is
        refused by them (their list of arguments lacks it) instead of being read without it."""
        output = {k: copy.deepcopy(v) for k, v in self.__dict__.items() if not k.startswith("_")}
        if not output.get("per_clip_normalization"):
            output.pop("per_clip_normalization", None)
        output["feature_extractor_type"] = self.__class__.__name__
        return output

    def _front_end(self) -> LogMelFrontEnd:
        """The front end of the current settings; kept (with its filter banks and windows) until a setting changes."""
        settings = (
            self.mode,
            self.sampling_rate,
            self.feature_size,
            self.n_fft,
            self.win_length,
            self.hop_length,
            self.f_min,
            self.f_max,
        )
        front_end = getattr(self, "_front_end_cache", None)
        if front_end is None or front_end.settings != settings:
            front_end = self._front_end_cache = LogMelFrontEnd(*settings)
        return front_end

    def num_frames(self, num_samples: int) -> int:
        """Frames of one clip of `num_samples` samples, before truncation, rounding and padding
        (`LogMelFrontEnd.num_frames`: m2d ``1 + L // hop`` for even n_fft, kaldi ``1 + (L - win_length) // hop``)."""
        return self._front_end().num_frames(num_samples)

    def round_up_frames(self, num_frames: int) -> int:
        """`num_frames` rounded up to a multiple of `frame_multiple` (whole time patches): the frames a batch is padded
        to."""
        return math.ceil(num_frames / self.frame_multiple) * self.frame_multiple

    def normalize(self, log_mel):
        """``(log_mel - mean) / std``: this extractor's normalisation of an unnormalised log-mel (..., F), a tensor
        or numpy array; returns a new one of the same kind. `__call__` applies it when `do_normalize` is set."""
        return normalize_log_mel(log_mel, self.mean, self.std)

    def normalize_per_clip(self, features, lengths):
        """Each clip of `features` (B, T, F) normalised per mel bin over its own real frames, its first `lengths[i]`:
        ``(x - mean) / max(std, 1e-5)``, mean and (population) std of that bin over those frames, computed in two
        passes in float64 (float32 on MPS, which has no float64), so that a bin constant over the clip (digital
        silence, an empty filter) becomes exactly 0. Frames from `lengths[i]` on are `padding_value` in the result.
        `__call__` applies it last when `per_clip_normalization` is set. A tensor or numpy array in, a new one of the
        same kind and dtype out."""
        as_numpy = isinstance(features, np.ndarray)
        x = torch.from_numpy(features) if as_numpy else features
        if x.dim() != 3 or len(lengths) != x.shape[0]:
            raise ValueError(
                f"normalize_per_clip takes (B, T, F) features with B lengths; got shape {tuple(x.shape)} and "
                f"{len(lengths)} lengths."
            )
        accumulate = torch.float32 if x.device.type == "mps" else torch.float64
        lengths = torch.as_tensor(lengths, device=x.device).reshape(-1, 1)  # (B, 1)
        real = (torch.arange(x.shape[1], device=x.device)[None, :] < lengths)[..., None]  # (B, T, 1)
        count = lengths.clamp(min=1)[..., None].to(accumulate)  # (B, 1, 1)
        wide = x.to(accumulate)  # (B, T, F)
        mean = torch.where(real, wide, 0.0).sum(dim=1, keepdim=True) / count  # (B, 1, F)
        centred = torch.where(real, wide - mean, 0.0)  # (B, T, F)
        std = (centred.square().sum(dim=1, keepdim=True) / count).sqrt()  # (B, 1, F)
        normalised = (centred / std.clamp(min=_PER_CLIP_STD_FLOOR)).to(x.dtype)  # (B, T, F)
        out = torch.where(real, normalised, self.padding_value)  # (B, T, F)
        return out.numpy() if as_numpy else out

    def pad_frames(self, features, num_frames=None, lengths=None):
        """Bring the frame axis of `features` (T, F) or (B, T, F) to `num_frames` frames, as `__call__` pads.

        Frames past `num_frames` are dropped; missing ones are `padding_value`. `num_frames` defaults to T rounded
        up to a multiple of `frame_multiple`. With `lengths` (B frame counts, for (B, T, F)), frames of clip i
        from `lengths[i]` on are `padding_value` too. A tensor or numpy array in, a new one of the same kind out.
        """
        as_numpy = isinstance(features, np.ndarray)
        x = torch.from_numpy(features) if as_numpy else features
        if x.dim() not in (2, 3) or (lengths is not None and (x.dim() != 3 or len(lengths) != x.shape[0])):
            raise ValueError(
                f"pad_frames takes (T, F) or (B, T, F) features with B lengths; got shape {tuple(x.shape)} and "
                f"{'no' if lengths is None else len(lengths)} lengths."
            )
        frames = x.shape[-2]
        if num_frames is None:
            num_frames = self.round_up_frames(frames)
        positions = torch.arange(num_frames, device=x.device)  # (T,)
        keep = positions < frames  # (T,)
        if lengths is not None:
            keep = keep & (positions < torch.as_tensor(lengths, device=x.device)[:, None])  # (B, T)
        x = x[..., :num_frames, :]  # (..., min(T_in, T), F)
        if frames < num_frames:
            x = torch.nn.functional.pad(x, (0, 0, 0, num_frames - frames))  # (..., T, F); zeros, replaced below
        out = torch.where(keep[..., None], x, self.padding_value)  # (..., T, F)
        return out.numpy() if as_numpy else out

    def __call__(
        self,
        raw_speech,
        sampling_rate=None,
        return_tensors=None,
        padding="longest",
        max_frames=None,
        truncation=True,
        return_attention_mask=None,
        device=None,
        mono=False,
        batched=False,
        per_clip_normalization=None,
        **kwargs,
    ) -> BatchFeature:
        r"""
        Featurise one clip or a batch of clips.

        Args:
            raw_speech: the audio, in one of these forms (`audio_to_clips`, `unpack_audio_rows`):
                - a 1-D numpy array, torch tensor or list of floats: one clip;
                - a list or tuple of 1-D arrays / tensors: a batch of clips of any lengths;
                - a 2-D `(batch, samples)` array / tensor: a batch of equal-length clips. Two shapes that look like
                  ONE multi-channel clip are refused unless `batched=True`: `(2, samples)`, the stereo clip
                  `torchaudio.load` returns, and `(samples, C <= 8)`, as soundfile reads a file. `(1, samples)` is
                  one clip either way;
                - with `mono=True`, a 2-D array / tensor (or each 2-D list element) is one multi-channel clip;
                - a dict `{"array": waveform, "sampling_rate": rate}` (a datasets Audio cell; `"raw"` for `"array"`,
                  as the pipeline takes it), or a list of them: brings its own rate; a multi-channel array is one
                  clip.
                Integer PCM (int8, int16, int32, uint8) is scaled to [-1, 1); float64 is cast to float32. Channels
                are averaged, (L + R) / 2 for stereo.
            sampling_rate (`int`): the rate of `raw_speech`; must equal `self.sampling_rate` (16000).
            return_tensors (`str`, *optional*): `"pt"` for torch tensors (left on the compute device),
                `"np"` or `None` for numpy arrays.
            padding (`str`, defaults to `"longest"`): `"longest"` pads to the longest clip of the batch,
                `"max_length"` to `max_frames`. The frame count is then rounded up to a multiple of
                `frame_multiple`.
            max_frames (`int`, *optional*): defaults to `self.max_frames`; a multiple of `frame_multiple`.
            truncation (`bool`, defaults to `True`): with `max_frames`, keep only the first `max_frames` frames
                of longer clips (the frames the whole clip would give; kaldi mode still removes the mean of
                the whole clip).
            return_attention_mask (`bool`, *optional*): defaults to `self.return_attention_mask`.
            device (`str` or `torch.device`, *optional*): compute there (e.g. `"cuda"`); by default the device
                of the input tensors (CPU for numpy).
            mono (`bool`, defaults to `False`): a 2-D input is one multi-channel clip, averaged over its smaller
                axis (the channels).
            batched (`bool`, defaults to `False`): a 2-D input is a `(batch, samples)` batch whatever its shape.
            per_clip_normalization (`bool`, *optional*): defaults to `self.per_clip_normalization`; False leaves it
                out of this call (a training collator that augments the log-mel first, then applies
                `normalize_per_clip` itself).

        Returns:
            [`BatchFeature`] with `input_values` float32 `(B, T, F)` and `attention_mask` int64 `(B, T)`
            (1 = real frame, 0 = padding), T a multiple of `frame_multiple`.
        """
        if mono and batched:
            raise ValueError(
                "mono=True (one multi-channel clip) and batched=True (a batch of clips) exclude each other."
            )
        raw_speech, sampling_rate, mono = unpack_audio_rows(raw_speech, sampling_rate, mono)
        self._check_sampling_rate(sampling_rate)
        if kwargs:
            logger.warning(f"AaspFeatureExtractor ignores unknown arguments: {sorted(kwargs)}")
        pad_to_max = padding_to_max_length(padding)
        saved_limit = max_frames is None and self.max_frames is not None  # the saved length, not the caller's crop
        max_frames = self.max_frames if max_frames is None else max_frames
        self._check_max_frames(max_frames, "max_frames")
        if pad_to_max and max_frames is None:
            raise ValueError("padding='max_length' needs max_frames (pass it here or to the constructor).")
        return_type = resolve_return_tensors(return_tensors)
        if return_attention_mask is None:
            return_attention_mask = self.return_attention_mask

        waveforms, lengths = self._stack_clips(audio_to_clips(raw_speech, mono, batched), device)  # (B, L), B
        front_end = self._front_end()
        if self.mode == "kaldi":  # EAT removes each clip's mean over the whole clip, before any truncation
            waveforms = subtract_clip_means(waveforms, lengths)
        clip_frames = [front_end.num_frames(length) for length in lengths.tolist()]
        if max_frames is not None and truncation:  # keep only the samples the first max_frames frames read
            clip_frames = [min(frames, max_frames) for frames in clip_frames]
            keep = front_end.samples_for_frames(max_frames)
            if saved_limit and waveforms.shape[1] > keep:  # nothing cut silently: say what was read
                read, given = keep / self.sampling_rate, waveforms.shape[1] / self.sampling_rate
                logger.warning(
                    f"Read the first {read:.2f} s of a {given:.2f} s clip: this feature extractor keeps "
                    f"max_frames={max_frames} frames, the length its model was "
                    "trained on. To classify the whole recording in windows, use AaspAudioClassificationPipeline "
                    "(pipeline(..., trust_remote_code=True), or pipeline_class= with aasp_hf installed)."
                )
            if waveforms.shape[1] > keep:
                waveforms, lengths = waveforms[:, :keep], lengths.clamp(max=keep)  # (B, L) -> (B, keep)
        elif truncation and waveforms.shape[1] > LONG_CLIP_SECONDS * self.sampling_rate:
            # transformers' pipeline("audio-classification") calls here with the whole recording and drops
            # chunk_length_s and return_timestamps without a word; one attention over minutes of tokens is far from
            # any clip the model was trained on (paper Sec. 4: 10-s clips), and its cost grows with the square
            logger.warning_once(
                f"Read a clip longer than {LONG_CLIP_SECONDS:.0f} s as one input: this feature extractor has no "
                "max_frames (the fine-tuning length, which finetune.py saves), so nothing is cut. To classify a long "
                "recording in windows, use AaspAudioClassificationPipeline with chunk_length_s (transformers' "
                "audio-classification pipeline ignores chunk_length_s and return_timestamps) or "
                "`python -m aasp_hf.tag`; pass truncation=False to read whole clips without this warning."
            )
        num_frames = max(clip_frames + ([max_frames] if pad_to_max else []))
        num_frames = self.round_up_frames(num_frames)
        mean, std = (self.mean, self.std) if self.do_normalize else (None, None)  # normalised inside, in place
        features = front_end(waveforms, lengths, min_frames=num_frames, mean=mean, std=std)  # (B, L) -> (B, T', F)
        features = self.pad_frames(features, num_frames, lengths=clip_frames)  # (B, T', F) -> (B, T, F)
        if self.per_clip_normalization if per_clip_normalization is None else per_clip_normalization:
            features = self.normalize_per_clip(features, clip_frames)  # (B, T, F), padding kept

        data = {"input_values": features}
        if return_attention_mask:
            frames = torch.tensor(clip_frames, device=features.device)  # (B,)
            data["attention_mask"] = (torch.arange(num_frames, device=features.device) < frames[:, None]).long()
        if return_type != "pt":
            data = {key: value.cpu().numpy() for key, value in data.items()}
        return BatchFeature(data, tensor_type=return_type)

    def _stack_clips(self, clips, device):
        """1-D float32 clips -> a zero-padded (B, L_max) batch on `device` (default: the first clip's) and the B
        lengths (int64 tensor on that device); refuses clips too short for kaldi mode and NaN / inf samples."""
        device = clips[0].device if device is None else device
        lengths = [int(clip.shape[0]) for clip in clips]
        for index, length in enumerate(lengths):
            if self.mode == "kaldi" and length < self.win_length:
                raise ValueError(
                    f"Clip {index} has {length} samples; kaldi mode needs at least win_length={self.win_length} "
                    f"({1000 * self.win_length / self.sampling_rate:g} ms). Pad it with zeros or drop it."
                )
        waveforms = torch.nn.utils.rnn.pad_sequence([clip.to(device) for clip in clips], batch_first=True)
        finite = torch.isfinite(waveforms.sum(dim=1))  # NaN/inf in a clip make its sum non-finite: (B,)
        if not finite.all():
            bad = (~finite).nonzero().flatten().tolist()
            raise ValueError(
                f"Clip(s) {bad} contain NaN or inf samples (or values so large that their sum overflows float32); "
                f"clean or drop them before featurising."
            )
        return waveforms, torch.tensor(lengths, device=device)

    def _check_sampling_rate(self, sampling_rate):
        sr = self.sampling_rate
        if sampling_rate is None:
            raise ValueError(
                f"AaspFeatureExtractor expects audio sampled at {sr} Hz, but no `sampling_rate` was passed. "
                f"Resample your audio to {sr} Hz and call the extractor with sampling_rate={sr}, so that "
                f"audio at another rate is caught instead of silently giving wrong features."
            )
        if int(sampling_rate) != sr:
            raise ValueError(
                f"The audio was passed with sampling_rate={sampling_rate} Hz, but this feature extractor expects "
                f"{sr} Hz. Resample it first, e.g. `torchaudio.functional.resample(x, {sampling_rate}, {sr})`, or "
                f"with datasets `ds = ds.cast_column('audio', Audio(sampling_rate={sr}))`. The audio-classification "
                f"pipeline resamples a 1-D float array given as {{'raw': x, 'sampling_rate': {sampling_rate}}}: convert "
                f"integer PCM to float first (`x.astype(np.float32) / 32768` for int16) and downmix multi-channel "
                f"audio (`x.mean(axis=1)` for (samples, channels))."
            )


# ----------------------------------------------------------------------------------------------------
# Call options and accepted inputs (the forms `AaspFeatureExtractor.__call__` lists)
# ----------------------------------------------------------------------------------------------------


def padding_to_max_length(padding) -> bool:
    """True for 'max_length', False for 'longest' (or True); anything else is an error."""
    value = padding.value if isinstance(padding, PaddingStrategy) else padding
    if value is True or value == "longest":
        return False
    if value == "max_length":
        return True
    raise ValueError(
        f"padding={padding!r} is not supported: use 'longest' (pad to the longest clip) or 'max_length' "
        f"(pad to max_frames). A batch is always padded, to a multiple of frame_multiple frames."
    )


def resolve_return_tensors(return_tensors):
    """'pt', 'np' or None (a `TensorType` as its value); anything else is an error."""
    if return_tensors is None:
        return None
    value = return_tensors.value if isinstance(return_tensors, TensorType) else return_tensors
    if value not in ("pt", "np"):
        raise ValueError(f"return_tensors={return_tensors!r} is not supported: use 'pt', 'np' or None.")
    return value


def unpack_audio_rows(raw_speech, sampling_rate, mono):
    """A dict {"array" or "raw": waveform, "sampling_rate": rate} (a datasets Audio cell, the pipeline's input form),
    or a list of them -> (the waveform(s), their common rate, mono=True); any other input is returned unchanged."""
    rows = raw_speech if isinstance(raw_speech, (list, tuple)) else [raw_speech]
    if not rows or not all(isinstance(row, dict) for row in rows):
        return raw_speech, sampling_rate, mono
    arrays, rates = [], set()
    for index, row in enumerate(rows):
        array = row.get("array", row.get("raw"))
        if array is None or row.get("sampling_rate") is None:
            raise ValueError(
                f"Clip {index} is a dict with the keys {sorted(row)}: pass {{'array': waveform, "
                f"'sampling_rate': rate}} (a datasets Audio cell) or {{'raw': waveform, 'sampling_rate': rate}}."
            )
        arrays.append(array)
        rates.add(int(row["sampling_rate"]))
    if len(rates) > 1:
        raise ValueError(f"The clips have different sampling rates {sorted(rates)}: resample them to one rate.")
    rate = rates.pop()
    if sampling_rate is not None and int(sampling_rate) != rate:
        raise ValueError(f"sampling_rate={sampling_rate} was passed, but the clips say sampling_rate={rate}.")
    return (arrays if isinstance(raw_speech, (list, tuple)) else arrays[0]), rate, True


def audio_to_clips(raw_speech, mono=False, batched=False) -> list:
    """The audio forms `AaspFeatureExtractor.__call__` accepts -> a list of non-empty 1-D float32 tensors.

    - a 1-D array / tensor or a list of numbers: one clip;
    - a list / tuple of arrays / tensors: one clip each (a 2-D element needs `mono=True`, which averages it);
    - a 2-D array / tensor: with `mono=True` one multi-channel clip, averaged; else a (B, L) batch, except that
      without `batched=True` the shapes of one multi-channel clip, (2, L > 8) and (L, C <= 8), are refused.
    """
    if isinstance(raw_speech, (list, tuple)):
        if len(raw_speech) == 0:
            raise ValueError("Got an empty list of clips: pass at least one waveform.")
        if all(isinstance(x, (int, float, np.number)) for x in raw_speech):
            raw_speech = [np.asarray(raw_speech, dtype=np.float32)]  # a single clip given as a list of numbers
        clips = [_float_waveform(x, index) for index, x in enumerate(raw_speech)]
        for index, clip in enumerate(clips):
            if clip.ndim == 2 and mono:
                clips[index] = _downmix(clip)
            elif clip.ndim == 2:
                raise ValueError(
                    f"Clip {index} is 2-D (shape {tuple(clip.shape)}): pass mono=True to average its channels, or "
                    f"downmix it yourself (`x.mean(axis=1)` for (samples, channels))."
                )
            elif clip.ndim != 1:
                raise ValueError(f"Clip {index} has {clip.ndim} dimensions (shape {tuple(clip.shape)}): expected 1-D.")
            _check_not_empty(clips[index], index)
        return clips
    else:
        array = _float_waveform(raw_speech, 0)
        if array.ndim == 1:
            clips = [array]
        elif array.ndim == 2 and mono:
            clips = [_downmix(array)]
        elif array.ndim == 2:
            rows, cols = array.shape
            if not batched and rows == 2 and cols > 8:  # (2, L): torchaudio.load's stereo clip, or two clips?
                raise ValueError(
                    f"Got a 2-D input of shape {tuple(array.shape)}: one stereo clip (channels, samples), as "
                    f"torchaudio.load returns it, or a batch of two clips? For one stereo clip, downmix it "
                    f"(`x.mean(0)`) or pass mono=True; for two clips, pass a list of 1-D waveforms (`list(x)`) "
                    f"or batched=True."
                )
            if not batched and 0 < cols <= 8 and cols < rows:  # (B, 0): empty clips, reported below
                raise ValueError(
                    f"Got a 2-D input of shape {tuple(array.shape)}, which looks like (samples, channels) "
                    f"multi-channel audio. Downmix it first (`x.mean(axis=1)`) or pass mono=True. "
                    f"If it is a (batch, samples) batch of short clips, pass batched=True."
                )
            clips = list(array)  # (B, L) -> B x (L,)
        else:
            raise ValueError(
                f"Got an input with {array.ndim} dimensions (shape {tuple(array.shape)}): pass a 1-D waveform, "
                f"a (batch, samples) array, or a list of 1-D waveforms."
            )
    for index, clip in enumerate(clips):
        _check_not_empty(clip, index)
    return clips


def _check_not_empty(clip, index):
    if clip.numel() == 0:
        raise ValueError(f"Clip {index} is empty (0 samples): drop it or pass audio.")


def _downmix(array):
    """Average a 2-D multi-channel clip over its smaller axis (the channels): (C, L) or (L, C) -> (L,)."""
    channel_axis = 0 if array.shape[0] <= array.shape[1] else 1
    return array.mean(dim=channel_axis)


def _float_waveform(x, index):
    """numpy / torch / list -> float32 tensor (same device for torch); integer PCM is scaled to [-1, 1)."""
    if isinstance(x, (list, tuple)):
        x = np.asarray(x, dtype=np.float32)
    elif isinstance(x, np.generic):
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        if x.dtype == np.uint8 or x.dtype == np.int8 or x.dtype == np.int16 or x.dtype == np.int32:
            x = torch.tensor(x)  # copy: keeps the caller's array untouched (and allows read-only arrays)
        elif np.issubdtype(x.dtype, np.floating):
            x = torch.tensor(x.astype(np.float32, copy=False))
        else:
            message = f"Clip {index} has dtype {x.dtype}: pass float audio in [-1, 1] or int16/int32/uint8 PCM."
            raise ValueError(message)
    elif not isinstance(x, torch.Tensor):
        raise ValueError(
            f"Clip {index} is a {type(x).__name__}: pass decoded audio (numpy array, torch tensor or list of "
            f"floats), e.g. from soundfile.read or a datasets Audio column."
        )
    if x.dtype in _PCM_SCALE:
        offset, scale = _PCM_SCALE[x.dtype]
        return (x.float() - offset) / scale
    if x.is_floating_point():
        return x.float()
    raise ValueError(f"Clip {index} has dtype {x.dtype}: pass float audio in [-1, 1] or int16/int32/uint8 PCM.")


__all__ = ["AaspFeatureExtractor"]
