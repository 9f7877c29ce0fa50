# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The two log-mel front ends of `AaspFeatureExtractor`: batched waveforms (B, L) -> log-mel (B, T, F).

- ``"m2d"`` (the default, the paper's front end; Sec. 4.2 fixes 16 kHz, Hann 400, hop 160, n_fft 1024, 128 mel bins
  and the standardisation (-7.1, 4.1), and what it leaves open follows M2D, see docs/paper_to_code.md): centred STFT
  with reflect padding, periodic Hann window of 400 samples inside a 1024-point FFT, hop 160, power 2, 128 Slaney mel
  bins (Slaney norm) from 50 Hz to 8 kHz, ``log(x + eps_float32)``, then ``(x - (-7.1)) / 4.1``.
- ``"kaldi"`` (for converted EAT checkpoints): EAT's front end, i.e. the waveform minus its own mean, then
  ``torchaudio.compliance.kaldi.fbank(wav, htk_compat=True, sample_frequency=16000, use_energy=False,
  window_type="hanning", num_mel_bins=128, dither=0.0, frame_shift=10)`` reimplemented in torch, then
  ``(x - (-4.268)) / (2 * 4.569)``.

Both run batched in torch (no per-clip loop in the compute) and give every clip of a batch the frames that clip gives
alone. `LogMelFrontEnd` holds one mode's settings, its frame arithmetic and its filter bank and window (built once per
device); the kernels (`m2d_log_mel`, `kaldi_log_fbank` and their steps) are plain functions below it.

Shipped with a checkpoint as remote code (feature_extraction_aasp.py imports it relatively): it imports only numpy,
torch and transformers. Dimension legend: B clips, L samples, T frames, F mel bins, K FFT bins, W window samples.
"""

import numpy as np
import torch

from transformers.audio_utils import mel_filter_bank


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
            return m2d_log_mel(waveforms, lengths, window, bands, self.n_fft, self.hop_length, self.num_mel_bins,
                               min_frames=min_frames, mean=mean, std=std)
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


def m2d_log_mel(waveforms, lengths, window, bands, n_fft, hop_length, num_mel_bins, min_frames=0, mean=None,
                std=None):
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


__all__ = ["LogMelFrontEnd", "MODE_DEFAULTS"]
