"""Fine-tuning augmentations as pure functions of their inputs and a seeded ``numpy.random.Generator``.

Both act on normalised log-mel features ``input_values`` (B, T, F) (paper Sec. Training Setup, Fine-tuning Setup):

- ``mixup``: one λ ~ Beta(α, α) per batch (timm / AudioMAE / EAT "batch" mode); each clip is mixed with a randomly
  permuted partner, and its (one-hot or multi-hot) targets the same way, so the loss becomes BCE on soft targets.
- ``spec_augment``: one time mask and one frequency mask per clip, each of width uniform in [0, max_width], with
  ``max_width = size // 5`` by default ("mask size of one-fifth the input spectrogram size"); masked bins are set to
  ``mask_value`` (0 = the dataset mean after standardisation).

Per-clip changes of voice and channel, opt-in (``examples/finetune.py``: ``--vtlp``, ``--random_eq_db``), drawn by the
training split's collator from its own generator and applied to each clip's log-mel before the extractor's
per-clip normalisation (`LogMelAugmentation`; the collator's waveform speed perturbation is
`aasp_hf.data.collators.speed_perturb`):

- ``vtlp``: vocal-tract-length perturbation (Jaitly & Hinton 2013, "Vocal Tract Length Perturbation (VTLP) improves
  speech recognition"): the mel axis warped by a factor α per clip with the paper's piecewise-linear map.
- ``random_eq``: a random smooth equaliser per clip, a tilt plus one bell, within ±D dB.

The generator is the only source of randomness, so a run is reproducible and resumable from its state
(``generator.bit_generator.state``).
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
from transformers.audio_utils import hertz_to_mel, mel_to_hertz


def sample_mixup_lambda(alpha: float, generator: np.random.Generator) -> float:
    """λ ~ Beta(α, α); 1.0 (no mixing) when α <= 0."""
    return float(generator.beta(alpha, alpha)) if alpha > 0 else 1.0


def mixup(
    input_values: torch.Tensor,
    targets: torch.Tensor,
    alpha: float,
    generator: np.random.Generator,
    attention_mask: torch.Tensor | None = None,
):
    """Mixes a batch with a permutation of itself.

    Args:
        input_values: (B, T, F) features.
        targets: (B, C) float one-hot / multi-hot targets.
        alpha: the Beta parameter (paper: 0.8).
        generator: draws λ, then the permutation.
        attention_mask: optional (B, T) frame mask; the mixed clip keeps the frames real in either clip.

    Returns: (mixed inputs (B, T, F), mixed targets (B, C), mixed attention mask or None, λ, permutation (B,)).
        mixed = λ·x + (1 − λ)·x[perm], and the same for the targets.
    """
    if input_values.shape[0] != targets.shape[0]:
        raise ValueError(f"input_values has {input_values.shape[0]} clips but targets {targets.shape[0]}")
    lam = sample_mixup_lambda(alpha, generator)
    perm = torch.from_numpy(generator.permutation(input_values.shape[0])).to(input_values.device)
    mixed = lam * input_values + (1.0 - lam) * input_values[perm]
    mixed_targets = lam * targets + (1.0 - lam) * targets[perm]
    mixed_mask = None if attention_mask is None else attention_mask | attention_mask[perm]
    return mixed, mixed_targets, mixed_mask, lam, perm


def sample_mask_bounds(batch_size: int, size: int, max_width: int, generator: np.random.Generator) -> np.ndarray:
    """(B, 2) int [start, end) of one mask per clip: width ~ U{0..max_width}, start ~ U{0..size − width}."""
    max_width = min(max_width, size)
    widths = generator.integers(0, max_width + 1, size=batch_size)
    starts = generator.integers(0, size - widths + 1)  # per-clip upper bounds
    return np.stack([starts, starts + widths], axis=1)


def spec_augment(
    input_values: torch.Tensor,
    generator: np.random.Generator,
    time_fraction: float = 0.2,
    freq_fraction: float = 0.2,
    mask_value: float = 0.0,
):
    """One time and one frequency mask per clip on (B, T, F) features (a new tensor; the input is untouched).

    The maximum widths are ``int(T · time_fraction)`` frames and ``int(F · freq_fraction)`` mel bins.
    Returns (augmented (B, T, F), time bounds (B, 2), frequency bounds (B, 2)).
    """
    if input_values.ndim != 3:
        raise ValueError(f"spec_augment expects (B, T, F) features, got shape {tuple(input_values.shape)}")
    batch_size, num_frames, num_bins = input_values.shape
    time_bounds = sample_mask_bounds(batch_size, num_frames, int(num_frames * time_fraction), generator)
    freq_bounds = sample_mask_bounds(batch_size, num_bins, int(num_bins * freq_fraction), generator)
    t = torch.arange(num_frames, device=input_values.device)[None]  # (1, T)
    f = torch.arange(num_bins, device=input_values.device)[None]  # (1, F)
    tb, fb = (torch.as_tensor(b, device=input_values.device) for b in (time_bounds, freq_bounds))
    time_masked = (t >= tb[:, :1]) & (t < tb[:, 1:])  # (B, T)
    freq_masked = (f >= fb[:, :1]) & (f < fb[:, 1:])  # (B, F)
    masked = time_masked[:, :, None] | freq_masked[:, None, :]  # (B, T, 1) | (B, 1, F) -> (B, T, F)
    return input_values.masked_fill(masked, mask_value), time_bounds, freq_bounds


# ----------------------------------------------------------------------------------------------- voice and channel
# The boundary frequency F_hi of the VTLP warp: below F_hi · min(α, 1) / α frequencies scale by α, above it the map is
# the line that ends at the top of the mel range (Jaitly & Hinton 2013: 4800 Hz, for 16-kHz audio).
VTLP_BOUNDARY_HZ = 4800.0
# The extractor's front ends and their mel scales: m2d's Slaney filters, kaldi's 1127 ln(1 + f / 700).
MEL_SCALES = {"m2d": "slaney", "kaldi": "kaldi"}


def mel_bin_frequencies(num_bins: int, f_min: float, f_max: float, mel_scale: str = "slaney") -> np.ndarray:
    """(F,) float64 centre frequencies in Hz of F triangular mel filters equally spaced on `mel_scale` between
    `f_min` and `f_max` (F + 2 edges, the centres are the inner ones), as the extractor's filter banks place them."""
    edges = np.linspace(hertz_to_mel(f_min, mel_scale), hertz_to_mel(f_max, mel_scale), num_bins + 2)  # (F + 2,)
    return mel_to_hertz(edges[1:-1], mel_scale)  # (F,)


def vtlp_warp(frequencies, alpha: float, f_max: float, boundary_hz: float = VTLP_BOUNDARY_HZ) -> np.ndarray:
    """The VTLP frequency map w_α (Jaitly & Hinton 2013, their warp of the filter-bank frequencies) with the upper
    end fixed: f ↦ α f up to f_0 = F_hi · min(α, 1) / α, then the line from (f_0, α f_0) to (f_max, f_max), so the
    top of the range stays in place and nothing is pushed past it (the paper's S/2 is `f_max`, the top of the mel
    range: 8 kHz, the Nyquist frequency of 16-kHz audio, for both front ends). α = 1 is the identity. float64 array of
    `frequencies`' shape."""
    f = np.asarray(frequencies, dtype=np.float64)
    knee = boundary_hz * min(alpha, 1.0) / alpha
    upper = f_max - (f_max - boundary_hz * min(alpha, 1.0)) / (f_max - knee) * (f_max - f)
    return np.where(f <= knee, alpha * f, upper)


def vtlp(
    input_values: torch.Tensor,
    alphas,
    f_min: float = 50.0,
    f_max: float = 8000.0,
    mel_scale: str = "slaney",
    attention_mask: torch.Tensor | None = None,
    boundary_hz: float = VTLP_BOUNDARY_HZ,
) -> torch.Tensor:
    """Vocal-tract-length perturbation of log-mel features (B, T, F), one warp factor per clip (`alphas`, (B,)).

    Jaitly & Hinton (2013) warp the centre frequencies of the mel filters by `vtlp_warp`; here the filters
    are those of the features (F bins equally spaced on `mel_scale` from `f_min` to `f_max`, `mel_bin_frequencies`)
    and moving filter j to w_α(f_j) is approximated on the log-mel itself: output bin j takes the input's value at the
    (fractional) bin of w_α(f_j), interpolated linearly between the two neighbouring bins along the mel axis, and
    clamped to the first or last bin where w_α(f_j) falls outside the range (α < 1 at the bottom, α > 1 just below the
    top). The filters keep their widths. With α > 1 a formant at frequency p moves down to about p / α (a longer vocal
    tract), with α < 1 up. α = 1 gives the input back exactly. Frames outside `attention_mask` (B, T) are left as
    they are. Returns a new tensor (B, T, F).
    """
    if input_values.ndim != 3:
        raise ValueError(f"vtlp expects (B, T, F) features, got shape {tuple(input_values.shape)}")
    batch_size, _, num_bins = input_values.shape
    alphas = np.asarray(alphas, dtype=np.float64).reshape(-1)
    if alphas.shape[0] != batch_size or not (alphas > 0).all():
        raise ValueError(f"vtlp needs {batch_size} positive warp factors, got {alphas.tolist()}")
    centres = mel_bin_frequencies(num_bins, f_min, f_max, mel_scale)  # (F,)
    spacing = (hertz_to_mel(f_max, mel_scale) - hertz_to_mel(f_min, mel_scale)) / (num_bins + 1)  # mel per bin
    warped = np.stack([vtlp_warp(centres, alpha, f_max, boundary_hz) for alpha in alphas])  # (B, F) Hz
    # fractional source bin: j + (mel(w(f_j)) - mel(f_j)) / spacing, exactly j where w(f_j) = f_j (α = 1)
    position = np.arange(num_bins) + (hertz_to_mel(warped, mel_scale) - hertz_to_mel(centres, mel_scale)) / spacing
    position = np.clip(position, 0, num_bins - 1)  # (B, F), edge clamping
    low = np.floor(position).astype(np.int64)  # (B, F)
    high = np.minimum(low + 1, num_bins - 1)
    weight = torch.as_tensor(position - low, dtype=input_values.dtype, device=input_values.device)[:, None, :]

    def gathered(bins):  # (B, F) source bins -> the input's values there, (B, T, F)
        bins = torch.as_tensor(bins, device=input_values.device)[:, None, :]  # (B, F) -> (B, 1, F)
        return input_values.gather(-1, bins.expand_as(input_values))  # (B, 1, F) -> (B, T, F)

    below, above = gathered(low), gathered(high)  # (B, T, F) each
    out = torch.where(weight == 0, below, below + weight * (above - below))  # exact where nothing is interpolated
    return _on_real_frames(out, input_values, attention_mask)


def sample_eq_curves_db(batch_size: int, num_bins: int, max_db: float, generator: np.random.Generator) -> np.ndarray:
    """(B, F) float64 random equaliser curves in dB over F mel bins, each within ±`max_db`: with x = (f + ½) / F the
    bin's place on the mel axis, ``t · (2x − 1) + g · exp(−½ ((x − c) / w)²)``: a first-order tilt whose ends move
    by t ~ U(−D/2, D/2) dB, plus one bell of gain g ~ U(−D/2, D/2) dB centred at c ~ U(0, 1) with width
    w ~ U(0.05, 0.25) of the axis, so that |curve| <= D. One draw of B × 4 uniforms (t, g, c, w) from `generator`."""
    draws = generator.uniform(size=(batch_size, 4))  # (B, 4): t, g, c, w in [0, 1)
    tilt, gain = (draws[:, 0:1] - 0.5) * max_db, (draws[:, 1:2] - 0.5) * max_db  # (B, 1) each, in [−D/2, D/2)
    centre, width = draws[:, 2:3], 0.05 + 0.2 * draws[:, 3:4]  # (B, 1) each
    x = (np.arange(num_bins) + 0.5)[None, :] / num_bins  # (1, F)
    return tilt * (2 * x - 1) + gain * np.exp(-0.5 * ((x - centre) / width) ** 2)  # (B, F)


def db_to_log_mel_units(db, std: float = 1.0):
    """A power gain of `db` decibels in the units of the extractor's log-mel: its log is the natural log of power,
    so 10^(db/10) adds db · ln(10) / 10 (0.230 per dB), then divided by the normalisation's `std` (1 for an
    unnormalised log-mel; 4.1 for the paper's m2d features: 0.0562 per dB)."""
    return db * (math.log(10.0) / 10.0) / std


def random_eq(
    input_values: torch.Tensor, curves_db, std: float = 1.0, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Each clip of log-mel features (B, T, F) re-coloured by its equaliser curve `curves_db` (B, F) in dB (e.g.
    `sample_eq_curves_db`): the curve, converted with `db_to_log_mel_units` for features normalised with `std`, added
    to every real frame (`attention_mask` (B, T); padding frames are left as they are). A zero curve gives the input
    back. (The extractor's log of power + eps makes this the gain's exact effect above the eps floor only.) Returns a
    new tensor."""
    curves = torch.as_tensor(db_to_log_mel_units(np.asarray(curves_db, dtype=np.float64), std))
    out = input_values + curves.to(input_values)[:, None, :]  # (B, F) -> (B, 1, F), broadcast over T
    return _on_real_frames(out, input_values, attention_mask)


def _on_real_frames(augmented, original, attention_mask):
    """`augmented` on the real frames of `attention_mask` (B, T), `original` on the padding; all of `augmented`
    without a mask."""
    if attention_mask is None:
        return augmented
    return torch.where(attention_mask.bool()[..., None], augmented, original)  # (B, T, 1) over (B, T, F)


@dataclass(frozen=True)
class LogMelAugmentation:
    """The per-clip log-mel augmentations of a fine-tuning run's training split, as the collator calls them:
    ``augmentation(input_values (B, T, F), attention_mask (B, T), generator) -> (B, T, F)``. In order: `vtlp` with
    α ~ U(low, high) per clip (`vtlp_range`; one draw of B uniforms), then `random_eq` with a curve of at most
    ±`random_eq_db` dB per clip (one draw of B × 4). An augmentation that is off draws nothing. The mel axis and the
    units are the extractor's (`for_extractor`)."""

    vtlp_range: tuple | None = None
    random_eq_db: float = 0.0
    f_min: float = 50.0
    f_max: float = 8000.0
    mel_scale: str = "slaney"
    std: float = 1.0

    @classmethod
    def for_extractor(cls, feature_extractor, vtlp_range=None, random_eq_db: float = 0.0):
        """The augmentation on `feature_extractor`'s features (its mel range and scale, its normalisation's std),
        or None when both are off."""
        if vtlp_range is None and not random_eq_db:
            return None
        return cls(
            vtlp_range=None if vtlp_range is None else tuple(float(v) for v in vtlp_range),
            random_eq_db=float(random_eq_db),
            f_min=feature_extractor.f_min,
            f_max=feature_extractor.f_max,
            mel_scale=MEL_SCALES[feature_extractor.mode],
            std=feature_extractor.std if feature_extractor.do_normalize else 1.0,
        )

    def __call__(self, input_values, attention_mask, generator: np.random.Generator):
        batch_size, _, num_bins = input_values.shape
        if self.vtlp_range is not None:
            alphas = generator.uniform(*self.vtlp_range, size=batch_size)  # (B,)
            input_values = vtlp(input_values, alphas, self.f_min, self.f_max, self.mel_scale, attention_mask)
        if self.random_eq_db:
            curves = sample_eq_curves_db(batch_size, num_bins, self.random_eq_db, generator)  # (B, F)
            input_values = random_eq(input_values, curves, self.std, attention_mask)
        return input_values
