# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Collators: a list of examples -> one batch.

Pre-training (`PretrainingCollator`; `crop_log_mel`, `crop_log_mel_batch` for cached log-mel; `random_eq_curves`):
random crops -> batched log-mel -> M inverse-block-masked views per clip, drawn by `masking.draw_batch_masks` and
built by `masking.build_batch_masks` (paper Sec. Training Setup, Pre-training Setup: 6-s crops padded or truncated to
608 frames, M = 4 views at 80 %).

The collator owns its ``torch.Generator``; its ``state_dict`` / ``load_state_dict`` save and restore it.
``examples/pretrain.py`` draws every clip from its own seed instead (`PretrainingCollator.collate_seeded`: the seed
is the clip's place in the data order), so the draws depend neither on the process nor on the DataLoader worker that
collates the clip: the loader workers decode and collate whole micro-batches, and the training process only moves
them to the device. With the log-mel on the accelerator, a worker does everything but the log-mel
(`PretrainingCollator.draw_seeded`) and the training process finishes the batch (`PretrainingCollator.finish`).

Clips come as waveforms (cropped in samples, `PretrainingCollator.random_crop`) or as cached unnormalised log-mel
(`aasp_hf.data.cache.LogMelCache`, cropped in frames by `crop_log_mel`); both crops draw the start the same way
(`_crop_start`: one draw per clip longer than the crop, none otherwise), so both paths consume the generator alike.

Fine-tuning and linear evaluation (`AaspFineTuningCollator`, `crop_or_pad`): decode (skipping bad clips), crop or pad
to the task's EVAR clip length, featurise. The training split may change each clip's voice and channel first: its
speed (`speed_perturb`, on the waveform) and, through a log-mel augmentation it is given, e.g. its vocal tract length
and equalisation, all drawn from the collator's generator.
"""

import logging
import math

import numpy as np
import torch

from ..feature_extraction_aasp import AaspFeatureExtractor
from .decoding import SAMPLING_RATE, SafeAudioDecoder
from .masking import build_batch_masks, draw_batch_masks

logger = logging.getLogger(__name__)
# How a fine-tuning clip shorter than the crop is brought to its length: "zeros" appends zeros to the waveform (EVAR's
# unit-length clips; the model sees them as silent audio), "masked" pads its frames and marks them as padding in the
# attention mask, so that the encoder's attention and the head's mean pooling skip them.
CLIP_PADDING = ("zeros", "masked")


# ----------------------------------------------------------------------------------------------- pre-training
def _crop_start(excess: int, generator=None) -> int:
    """Start of a uniformly placed crop of a clip `excess` > 0 frames or samples longer than the crop: one draw."""
    return int(torch.randint(excess + 1, (1,), generator=generator))


def crop_log_mel(log_mel, num_frames: int, generator=None, feature_extractor=None, target_frames=None):
    """Random crop / padding of an unnormalised log-mel (T, F) in the frame domain, then normalisation.

    1. T > num_frames: a uniformly placed window of `num_frames` frames (one `_crop_start` draw from `generator`
       per such clip, as `PretrainingCollator.random_crop` draws one per long waveform); else the whole clip.
    2. `feature_extractor.normalize` (when its `do_normalize` is set), then, when its `per_clip_normalization` is
       set, `feature_extractor.normalize_per_clip` over the crop's frames.
    3. `feature_extractor.pad_frames` to `target_frames` (default `num_frames`; e.g. crop 601 frames, pad to 608):
       frames padded with the extractor's `padding_value` (0.0: zeros in the normalised domain) or truncated.

    With `num_frames = extractor.num_frames(N)` this equals featurising the N-sample waveform crop that starts on
    frame boundary `start * hop_length`, up to float16 rounding, except (m2d mode) the first and last
    ceil((win_length / 2) / hop_length) = 2 frames of a crop that does not start or end at the clip's own edge:
    their centred windows see the neighbouring audio instead of the crop's reflect padding. (Kaldi mode frames
    never reach past the crop, so every frame agrees.)

    Returns float32 (target_frames, F) on the device of `log_mel`.
    """
    if feature_extractor is None:
        feature_extractor = AaspFeatureExtractor()
    log_mel = torch.as_tensor(log_mel).float()  # (T, F)
    if log_mel.dim() != 2:
        raise ValueError(f"log_mel must be (T, F), got shape {tuple(log_mel.shape)}")
    num_frames = int(num_frames)
    if num_frames <= 0:
        raise ValueError(f"num_frames={num_frames} must be positive")
    target_frames = num_frames if target_frames is None else int(target_frames)
    excess = log_mel.shape[0] - num_frames
    if excess > 0:
        start = _crop_start(excess, generator)
        log_mel = log_mel[start : start + num_frames]  # (T, F) -> (num_frames, F)
    if feature_extractor.do_normalize:
        log_mel = feature_extractor.normalize(log_mel)
    if getattr(feature_extractor, "per_clip_normalization", False):
        log_mel = feature_extractor.normalize_per_clip(log_mel[None], [log_mel.shape[0]])[0]  # (1, T, F) -> (T, F)
    return feature_extractor.pad_frames(log_mel, target_frames)  # (target_frames, F)


def crop_log_mel_batch(examples, num_frames: int, generator=None, feature_extractor=None, target_frames=None):
    """`crop_log_mel` over a list of (T_i, F) arrays or `LogMelCache` items -> float32 (B, target_frames, F)."""
    return torch.stack(
        [
            crop_log_mel(
                e["log_mel"] if isinstance(e, dict) else e, num_frames, generator, feature_extractor, target_frames
            )
            for e in examples
        ]
    )


def random_eq_curves(batch_size: int, num_bins: int, strength: float, generator=None, num_terms: int = 4):
    """(B, F) smooth random equaliser curves in normalised log-mel units: Σ_{k=1..K} a_k · cos(π k (f + ½) / F),
    a_k ~ U(−strength, strength) drawn from `generator` (K = num_terms; no k = 0 term, so no overall gain)."""
    coefficients = (torch.rand(batch_size, num_terms, generator=generator, dtype=torch.float64) * 2 - 1) * strength
    k = torch.arange(1, num_terms + 1, dtype=torch.float64)  # (K,)
    f = torch.arange(num_bins, dtype=torch.float64) + 0.5  # (F,)
    basis = torch.cos(torch.pi * k[:, None] * f[None, :] / num_bins)  # (K, F)
    return (coefficients @ basis).float()  # (B, K) @ (K, F) -> (B, F)


def as_waveform(example) -> torch.Tensor:
    """A float32 1-D tensor from a waveform (numpy array or tensor) or a dict holding one under ``"waveform"``."""
    waveform = example["waveform"] if isinstance(example, dict) else example
    waveform = torch.as_tensor(
        np.asarray(waveform, dtype=np.float32) if not torch.is_tensor(waveform) else waveform.float()
    )
    if waveform.dim() != 1:
        raise ValueError(f"each example must be a 1-D waveform, got shape {tuple(waveform.shape)}")
    return waveform


class PretrainingCollator:
    """Turns a list of examples into ``{"input_values", "visible_indices", "query_indices"}`` for AaspForPreTraining.

    Args:
        feature_extractor (`AaspFeatureExtractor`): waveform (16 kHz) -> normalised log-mel (B, T, F).
        config (`AaspConfig`): ``num_frames`` (T, padding/truncation length), the patch grid and the ``mask_*``
            fields (M = ``mask_num_views`` views, ``mask_ratio``, ``mask_block_sizes``, ``mask_query_ratio``).
        crop_seconds (`float`): length of the random crop taken from each clip (clips shorter are used whole and
            padded to T frames). 6 s in the paper (601 frames, padded to 608).
        generator (`torch.Generator`, *optional*): source of all randomness (crops, masks, queries); a CPU generator
            seeded with 0 when omitted.
        device (*optional*): where features are computed and tensors returned (e.g. the GPU); CPU by default.
        student_eq_strength (`float`, 0): s > 0 adds ``student_input_values``, the student's view of each clip under a
            random smooth equaliser (not in the paper; an option of this project's small-scale recipe): the
            normalised log-mel plus ``Σ_{k=1..4} a_k · cos(π k (f + ½) / F)`` over mel bins f, one curve per clip,
            ``a_k ~ U(−s, s)`` (see `random_eq_curves`). The teacher keeps the clean clip, so the student learns to
            predict clean-clip targets from a re-coloured one. Drawn after the masks: s = 0 leaves every other draw
            as it was.

    Each example is a 1-D float waveform (numpy array or tensor) or a dict holding one under ``"waveform"`` — or,
    from a precomputed cache (``aasp_hf.data.cache.LogMelCache``), a dict with an unnormalised ``"log_mel"`` (T_i, F),
    cropped in the frame domain instead (same generator, one draw per long clip, then the masks).
    Returns ``input_values`` float32 (B, T, F), ``visible_indices`` int64 (B, M, V), ``query_indices`` int64 (B, M, Q)
    and, with ``student_eq_strength`` > 0, ``student_input_values`` float32 (B, T, F).
    """

    def __init__(
        self,
        feature_extractor,
        config,
        crop_seconds: float = 6.0,
        generator=None,
        device=None,
        student_eq_strength: float = 0.0,
    ):
        if crop_seconds <= 0:
            raise ValueError(f"crop_seconds must be positive, got {crop_seconds}")
        if not student_eq_strength >= 0:
            raise ValueError(f"student_eq_strength must be >= 0 (0 = off), got {student_eq_strength}")
        self.student_eq_strength = float(student_eq_strength)
        self.feature_extractor = feature_extractor
        self.config = config
        self.sampling_rate = feature_extractor.sampling_rate
        self.crop_samples = int(round(crop_seconds * self.sampling_rate))  # noqa: RUF046 - numpy 1's round: a float
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.device = device

    # ---------------------------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict):
        self.generator.set_state(state["generator"])

    # ---------------------------------------------------------------------------------------------- call
    def random_crop(self, waveform: torch.Tensor) -> torch.Tensor:
        """A uniformly placed crop of ``crop_samples`` samples (the whole clip when it is not longer)."""
        excess = waveform.shape[0] - self.crop_samples
        if excess <= 0:
            return waveform
        start = _crop_start(excess, self.generator)
        return waveform[start : start + self.crop_samples]

    def __call__(self, examples, device=None) -> dict:
        features = self.features(examples, device)  # 1. (B, T, F)
        draws = draw_batch_masks(self.config, features.shape[0], generator=self.generator)  # 2.
        curves = self.eq_curves(features.shape[0], features.shape[-1])  # 3. (B, F) or None
        return self.assemble(features, draws, curves)

    def collate_seeded(self, examples, seeds) -> dict:
        """`self(examples)` with each clip's random draws (crop, masks, queries, equaliser) from its own seed instead
        of the collator's running stream, so that they depend neither on the process that collates the clip nor on the
        rest of its batch (examples/pretrain.py seeds a clip by its position in the global order). Each clip is
        cropped, featurised and drawn for alone; the masks of all of them are then built in one pass from their draws
        (`masking.build_batch_masks`), which gives each clip the masks it gets alone."""
        features, draws, curves = [], [], []
        for example, seed in zip(examples, seeds):
            self.generator.manual_seed(seed)
            features.append(self.features([example]))  # 1. (1, T, F)
            draws.append(draw_batch_masks(self.config, 1, generator=self.generator))  # 2.
            curves.append(self.eq_curves(1, features[-1].shape[-1]))  # 3. (1, F) or None
        return self.assemble(
            torch.cat(features),  # B × (1, T, F) -> (B, T, F)
            {key: torch.cat([draw[key] for draw in draws]) for key in draws[0]},  # B × (M, ...) -> (B·M, ...)
            None if curves[0] is None else torch.cat(curves),  # B × (1, F) -> (B, F)
        )

    def draw_seeded(self, examples, seeds) -> dict:
        """`collate_seeded` but the log-mel of waveforms, for a loader worker when the log-mel runs on the accelerator
        (`finish` computes it there): each clip's crop, masks, queries and equaliser from its seed, drawn exactly as
        `collate_seeded` draws them. Returns ``waveforms`` float32 (B, L), the crops zero-padded to the longest,
        ``waveform_lengths`` int64 (B,), ``visible_indices``, ``query_indices`` and, with an equaliser,
        ``eq_curves`` (B, F). Cached log-mel has no log-mel left to compute: its batch is `collate_seeded`'s."""
        if examples and isinstance(examples[0], dict) and "log_mel" in examples[0]:
            return self.collate_seeded(examples, seeds)
        crops, draws, curves = [], [], []
        for example, seed in zip(examples, seeds):
            self.generator.manual_seed(seed)
            crops.append(self.random_crop(as_waveform(example)))  # 1. the crop's draw; its log-mel comes later
            draws.append(draw_batch_masks(self.config, 1, generator=self.generator))  # 2.
            curves.append(self.eq_curves(1, self.feature_extractor.feature_size))  # 3. (1, F) or None
        lengths = torch.tensor([crop.shape[0] for crop in crops], dtype=torch.long)  # (B,)
        masks = build_batch_masks(self.config, {key: torch.cat([d[key] for d in draws]) for key in draws[0]})
        parts = {
            "waveforms": torch.nn.utils.rnn.pad_sequence(crops, batch_first=True),  # B × (L_i,) -> (B, L)
            "waveform_lengths": lengths,
            "visible_indices": masks["visible_indices"],
            "query_indices": masks["query_indices"],
        }
        if curves[0] is not None:
            parts["eq_curves"] = torch.cat(curves)  # B × (1, F) -> (B, F)
        return parts

    def finish(self, parts) -> dict:
        """The batch from `draw_seeded`'s parts: the log-mel of the crops on the collator's device, in one call for the
        micro-batch, and the student's re-coloured view; what `collate_seeded` returns for the same seeds. A finished
        batch (no ``waveforms``) is returned as it is."""
        if "waveforms" not in parts:
            return parts
        device = self.device if self.device is not None else parts["waveforms"].device
        waveforms = parts["waveforms"].to(device, non_blocking=True)  # (B, L)
        crops = [waveforms[i, :n] for i, n in enumerate(parts["waveform_lengths"].tolist())]  # views, no copies
        features = self.waveform_features(crops, device)  # (B, T, F); cropped already, so no draw
        return self.batch(features, parts, parts.get("eq_curves"))

    def features(self, examples, device=None) -> torch.Tensor:
        """1. Random crops, normalised log-mel padded to T frames: (B, T, F), on ``device`` (default: the collator's)."""
        device = device if device is not None else self.device
        if examples and isinstance(examples[0], dict) and "log_mel" in examples[0]:
            features = self.cropped_log_mel(examples)  # (B, T, F)
            return features.to(device) if device is not None else features
        return self.waveform_features(examples, device)  # (B, T, F)

    def eq_curves(self, batch_size: int, num_mel_bins: int):
        """3. (optional) one random equaliser curve per clip (B, F) for the student's re-coloured view, or None when
        ``student_eq_strength`` is 0 (no draw)."""
        if self.student_eq_strength == 0:
            return None
        return random_eq_curves(batch_size, num_mel_bins, self.student_eq_strength, self.generator)

    def assemble(self, features, draws, curves) -> dict:
        """The batch from its features (B, T, F), its mask draws and its equaliser curves: 2. the M inverse block masks
        per clip, their visible tokens and the predictor's queries (`masking.build_batch_masks`, no random draw);
        3. the student's re-coloured view when there are curves (the teacher keeps ``input_values``)."""
        return self.batch(features, build_batch_masks(self.config, draws), curves)

    @staticmethod
    def batch(features, masks, curves) -> dict:
        """The model's inputs on the features' device: the features (B, T, F), the built masks' visible tokens and
        queries, and, when there are equaliser curves (B, F), the student's re-coloured view (the teacher keeps
        ``input_values``)."""
        batch = {
            "input_values": features,
            "visible_indices": masks["visible_indices"].to(features.device, non_blocking=True),  # (B, M, V)
            "query_indices": masks["query_indices"].to(features.device, non_blocking=True),  # (B, M, Q)
        }
        if curves is not None:
            batch["student_input_values"] = features + curves.to(features)[:, None, :]  # (B, F) -> (B, 1, F)
        return batch

    def cropped_log_mel(self, examples) -> torch.Tensor:
        """1. (cache) random crops of cached log-mel in the frame domain, normalised, padded to T: (B, T, F)."""
        crop_frames = self.feature_extractor.num_frames(self.crop_samples)
        return crop_log_mel_batch(
            examples, crop_frames, self.generator, self.feature_extractor, target_frames=self.config.num_frames
        )

    def waveform_features(self, examples, device) -> torch.Tensor:
        """1. random waveform crops -> features for the whole batch at once, padded/truncated to T: (B, T, F)."""
        c = self.config
        waveforms = [self.random_crop(as_waveform(example)) for example in examples]

        return self.feature_extractor(
            waveforms,
            sampling_rate=self.sampling_rate,
            return_tensors="pt",
            padding="max_length",
            max_frames=c.num_frames,
            truncation=True,
            return_attention_mask=False,
            device=device,
        )["input_values"]


# ----------------------------------------------------------------------------------------------- fine-tuning
def trained_max_frames(feature_extractor, clip_seconds: float) -> int:
    """The frames of every fine-tuning batch: a crop of `clip_seconds` featurised, rounded up to whole time patches,
    as the fine-tuning collators pad it; a fine-tuned model's feature extractor saves it as `max_frames`, the window of
    the pipelines and the tagger."""
    samples = round(clip_seconds * feature_extractor.sampling_rate)
    return feature_extractor.round_up_frames(feature_extractor.num_frames(samples))


def crop_or_pad(waveform: np.ndarray, num_samples: int, random_crop: bool, rng: np.random.Generator = None):
    """(L,) -> (num_samples,): a random window (random_crop) or the first one of a longer clip; zeros appended
    to a shorter one (EVAR's unit-length clips)."""
    length = waveform.shape[0]
    if length > num_samples:
        start = int(rng.integers(0, length - num_samples + 1)) if random_crop else 0
        return waveform[start : start + num_samples]
    return np.pad(waveform, (0, num_samples - length))


def speed_perturb(waveform, factor: float, lowpass_filter_width: int = 6, rolloff: float = 0.99) -> np.ndarray:
    """The waveform played `factor` times as fast: tempo and pitch change together, as Kaldi's and ESPnet's speed
    perturbation (Ko et al. 2015, "Audio augmentation for speech recognition": sox `speed`) makes them.

    (L,) -> (round(L / factor),) float32: output sample m is the band-limited interpolation of the input at time
    m · factor (in input samples), ``Σ_k x[k] h(m · factor − k)`` with zeros outside the clip and h a Hann-windowed
    sinc of cutoff ``c = rolloff · min(1, 1 / factor)`` of the input's Nyquist frequency (a low-pass before a speed-up,
    so that what would pass the Nyquist frequency is attenuated rather than folded back),
    ``h(τ) = c · sinc(c τ) · cos²(π c τ / (2 W))`` for |c τ| <= W = `lowpass_filter_width` zero crossings: the kernel
    of `torchaudio.functional.resample`'s default ("sinc_interp_hann", width 6, rolloff 0.99), which
    `torchaudio.functional.speed` uses, for a continuous ratio, so a uniform draw needs no rational approximation. Its
    transition band is wide (a 7.9-kHz tone sped up by 1.1 keeps -11 dB of alias; width 32 gives -54 dB at five times
    the cost). Factor 1 returns the clip unchanged (no low-pass). About 3 ms per second of audio on one CPU thread.
    """
    if not factor > 0:
        raise ValueError(f"speed perturbation factor {factor} must be positive")
    x = torch.as_tensor(np.asarray(waveform, dtype=np.float32))
    if x.dim() != 1:
        raise ValueError(f"speed_perturb takes a 1-D waveform, got shape {tuple(x.shape)}")
    if factor == 1:
        return x.numpy().copy()
    out_length = max(1, round(x.shape[0] / factor))
    cutoff = rolloff * min(1.0, 1.0 / factor)
    half = math.ceil(lowpass_filter_width / cutoff)  # input samples each side that the kernel reaches
    times = torch.arange(out_length, dtype=torch.float64) * factor  # (M,) input positions of the output samples
    first = times.floor()  # (M,)
    offsets = torch.arange(-half + 1, half + 1)  # (K,) = (2·half,) taps around each position
    tau = cutoff * ((times - first).float()[:, None] - offsets[None, :].float())  # (M, K), in kernel zero crossings
    kernel = cutoff * torch.sinc(tau) * torch.cos(tau * (math.pi / (2 * lowpass_filter_width))) ** 2  # (M, K)
    kernel = torch.where(tau.abs() <= lowpass_filter_width, kernel, 0.0)
    padded = torch.nn.functional.pad(x, (half, half + 2))  # zeros outside the clip: (L,) -> (L + 2·half + 2,)
    taps = first.long()[:, None] + offsets[None, :] + half  # (M, K) indices into `padded`
    return (padded[taps] * kernel).sum(dim=1).numpy()  # (M, K) -> (M,)


class AaspFineTuningCollator:
    """Examples {audio, label|labels} -> {input_values (B, T, F), attention_mask (B, T), labels}.

    Args:
        feature_extractor: an `AaspFeatureExtractor`.
        task: a key of `EVAR_CLIP_SECONDS` (e.g. "esc50") or a dataset name or alias of one (e.g. "as20k"), or pass
            `clip_seconds`.
        split: "train"/"validation" (random crop) or "test" (first segment).
        num_labels: with it, labels are multi-hot float (B, num_labels) (AudioSet); else int64 (B,).
        seed: seeds the crop positions (and the augmentations below).
        speed_perturbation: (low, high) for the training split only: each decoded clip is played at a speed factor
            drawn uniformly in [low, high] (`speed_perturb`), before it is cropped or padded; None: off.
        log_mel_augmentation: for the training split only, a function ``(input_values (B, T, F), attention_mask
            (B, T), rng) -> (B, T, F)`` applied to each batch's log-mel before the extractor's per-clip normalisation
            (when it has one), e.g. `aasp_hf.training.augment.LogMelAugmentation`; None: off.

    Every random draw (crop starts, speed factors, the log-mel augmentation's) comes from one numpy generator,
    `rng`, that the fine-tuning loop keeps in its checkpoints; an augmentation that is off draws nothing, so the crops
    are those of a run without it.

    Clips that fail to decode are dropped (counted in `num_skipped`, see `decoder.failures`); a batch where
    every clip failed gives None, which the training loop skips. Feed it a dataset prepared with
    `for_safe_decoding` so that a corrupt file reaches the collator instead of raising in the DataLoader.
    """

    def __init__(
        self,
        feature_extractor,
        task=None,
        clip_seconds=None,
        split="train",
        num_labels=None,
        label_column=None,
        audio_column="audio",
        seed=0,
        decoder=None,
        padding="zeros",
        speed_perturbation=None,
        log_mel_augmentation=None,
    ):
        if padding not in CLIP_PADDING:
            raise ValueError(f"padding={padding!r}: use one of {CLIP_PADDING}.")
        if (speed_perturbation is not None or log_mel_augmentation is not None) and split != "train":
            raise ValueError(f"split={split!r}: augmentations are for the training split only.")
        if speed_perturbation is not None:
            low, high = (float(v) for v in speed_perturbation)
            if not 0 < low <= high:
                raise ValueError(f"speed_perturbation={speed_perturbation}: need 0 < low <= high.")
            speed_perturbation = (low, high)
        if clip_seconds is None:
            # here: protocol imports datasets, pre-training needs none
            from .protocol import EVAR_CLIP_SECONDS, published_clip_seconds

            # a dataset name or alias gives its task's length, as load_downstream gives it ("as20k": AudioSet's)
            clip_seconds = published_clip_seconds(task) if isinstance(task, str) else None
            if clip_seconds is None:
                raise ValueError(f"task={task!r}: pass clip_seconds= or one of {sorted(EVAR_CLIP_SECONDS)}.")
        if split not in ("train", "validation", "valid", "test"):
            raise ValueError(f"split={split!r}: use 'train', 'validation' or 'test'.")
        self.feature_extractor = feature_extractor
        self.clip_seconds = clip_seconds
        self.num_samples = int(round(clip_seconds * SAMPLING_RATE))  # noqa: RUF046 - numpy 1's round: a float
        self.random_crop = split != "test"
        self.num_labels = num_labels
        self.label_column = label_column
        self.audio_column = audio_column
        self.rng = np.random.default_rng(seed)
        self.decoder = decoder or SafeAudioDecoder()
        self.padding = padding
        self.speed_perturbation = speed_perturbation
        self.log_mel_augmentation = log_mel_augmentation

    @property
    def num_skipped(self) -> int:
        return self.decoder.num_failures

    def _label_of(self, example):
        column = self.label_column or ("labels" if "labels" in example else "label")
        return example[column]

    def __call__(self, examples):
        waveforms, labels = [], []
        for example in examples:
            waveform = self.decoder(example[self.audio_column])
            if waveform is None:
                continue
            if self.speed_perturbation is not None:  # one draw per decoded clip, before its crop's draw
                waveform = speed_perturb(waveform, float(self.rng.uniform(*self.speed_perturbation)))
            if self.padding == "masked" and waveform.shape[0] < self.num_samples:
                waveforms.append(waveform)  # padded in frames below, marked as padding in the attention mask
            else:
                waveforms.append(crop_or_pad(waveform, self.num_samples, self.random_crop, self.rng))
            labels.append(self._label_of(example))
        if not waveforms:
            logger.warning(f"Every clip of a batch of {len(examples)} failed to decode; the batch is skipped.")
            return None
        extractor = self.feature_extractor
        # with a log-mel augmentation, the extractor's per-clip normalisation comes after it (below)
        per_clip = self.log_mel_augmentation is not None and getattr(extractor, "per_clip_normalization", False)
        options = {"per_clip_normalization": False} if per_clip else {}
        if self.padding == "masked":  # every batch as many frames as a whole crop: (B, T, F), T = the crop's
            frames = trained_max_frames(extractor, self.clip_seconds)
            batch = extractor(
                waveforms,
                sampling_rate=SAMPLING_RATE,
                return_tensors="pt",
                padding="max_length",
                max_frames=frames,
                **options,
            )
        else:
            batch = extractor(waveforms, sampling_rate=SAMPLING_RATE, return_tensors="pt", **options)  # B clips
        if self.log_mel_augmentation is not None:  # the clip's voice and channel changed, then its own statistics
            features = self.log_mel_augmentation(batch["input_values"], batch["attention_mask"], self.rng)
            if per_clip:
                features = extractor.normalize_per_clip(features, batch["attention_mask"].sum(dim=1))
            batch["input_values"] = features  # (B, T, F)
        if self.num_labels is None:
            batch["labels"] = torch.tensor(labels, dtype=torch.long)  # (B,)
        else:
            multi_hot = torch.zeros(len(labels), self.num_labels)  # (B, C)
            for row, clip_labels in enumerate(labels):
                clip_labels = [clip_labels] if isinstance(clip_labels, int) else list(clip_labels)
                multi_hot[row, clip_labels] = 1.0
            batch["labels"] = multi_hot
        return batch
