"""Pre-training batches: random crops -> batched log-mel -> M inverse-block-masked views per clip (SPEC_NOTES §4).

The collator owns its ``torch.Generator``; its ``state_dict`` / ``load_state_dict`` save and restore it, so a resumed
run draws exactly the crops and masks the uninterrupted run would have drawn. ``examples/pretrain.py`` calls it in
the training loop (the DataLoader workers only decode audio), so its state advances once per micro-batch consumed,
independent of DataLoader prefetching and worker processes.
"""

import numpy as np
import torch

from .masking import sample_query_indices, sample_view_masks, visible_indices


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

    Each example is a 1-D float waveform (numpy array or tensor) or a dict holding one under ``"waveform"`` — or,
    from a precomputed cache (``aasp_hf.data.cache.LogMelCache``), a dict with an unnormalised ``"log_mel"`` (T_i, F),
    cropped in the frame domain instead (same generator, one draw per long clip, then the masks).
    Returns ``input_values`` float32 (B, T, F), ``visible_indices`` int64 (B, M, V), ``query_indices`` int64 (B, M, Q).
    """

    def __init__(self, feature_extractor, config, crop_seconds: float = 6.0, generator=None, device=None):
        if crop_seconds <= 0:
            raise ValueError(f"crop_seconds must be positive, got {crop_seconds}")
        self.feature_extractor = feature_extractor
        self.config = config
        self.sampling_rate = feature_extractor.sampling_rate
        self.crop_samples = int(round(crop_seconds * self.sampling_rate))
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
        start = int(torch.randint(excess + 1, (1,), generator=self.generator))
        return waveform[start : start + self.crop_samples]

    def __call__(self, examples, device=None) -> dict:
        device = device if device is not None else self.device
        if examples and isinstance(examples[0], dict) and "log_mel" in examples[0]:
            features = self.cropped_log_mel(examples)  # (B, T, F)
            if device is not None:
                features = features.to(device)
        else:
            features = self.waveform_features(examples, device)  # (B, T, F)
        c = self.config

        # 2. M independent inverse block masks per clip, their visible tokens and the predictor's queries.
        mask = sample_view_masks(
            features.shape[0],
            c.mask_num_views,
            c.num_frequency_patches,
            c.num_time_patches,
            mask_ratio=c.mask_ratio,
            block_sizes=c.mask_block_sizes,
            generator=self.generator,
        )  # (B, M, N), True = hidden from the student
        queries = sample_query_indices(mask, c.mask_query_ratio, generator=self.generator)  # (B, M, Q)
        visible = visible_indices(mask)  # (B, M, V)
        return {
            "input_values": features,
            "visible_indices": visible.to(features.device),
            "query_indices": queries.to(features.device),
        }

    def cropped_log_mel(self, examples) -> torch.Tensor:
        """1. (cache) random crops of cached log-mel in the frame domain, normalised, padded to T: (B, T, F)."""
        from ..data.cache import crop_log_mel_batch

        crop_frames = self.feature_extractor.num_frames(self.crop_samples)
        return crop_log_mel_batch(
            examples, crop_frames, self.generator, self.feature_extractor, target_frames=self.config.num_frames
        )

    def waveform_features(self, examples, device) -> torch.Tensor:
        """1. random waveform crops -> features for the whole batch at once, padded/truncated to T: (B, T, F)."""
        c = self.config
        waveforms = []
        for example in examples:
            waveform = example["waveform"] if isinstance(example, dict) else example
            waveform = torch.as_tensor(np.asarray(waveform, dtype=np.float32) if not torch.is_tensor(waveform)
                                       else waveform.float())
            if waveform.dim() != 1:
                raise ValueError(f"each example must be a 1-D waveform, got shape {tuple(waveform.shape)}")
            waveforms.append(self.random_crop(waveform))

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
