# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The HEAR 2021 common API for AaSP checkpoints: `load_model`, `get_scene_embeddings`, `get_timestamp_embeddings`.

HEAR (Holistic Evaluation of Audio Representations) imports a module by name and calls these three functions, as
its validator (`hear-validator aasp_hf.hear --model CHECKPOINT_DIR`) and its runner (`heareval`) do:

    from aasp_hf.integrations import hear
    model = hear.load_model("runs/pt/encoder")                      # a save_pretrained folder
    scene = hear.get_scene_embeddings(audio, model)                 # (n, 16 kHz samples) -> (n, scene size)
    frames, timestamps = hear.get_timestamp_embeddings(audio, model)  # (n, n_t, size), (n, n_t) in ms

How an encoder's output becomes embeddings (the choices and their measurements: docs/benchmarks.md):

- Frames. The encoder's patch tokens form a grid, time-major (token t·F̃ + f; CLS first). A timestamp embedding is
  one time column t of that grid, its F̃ frequency patches concatenated (`frequency_pooling="concat"`, F̃·D values,
  the frequency-resolved feature of the paper's linear evaluation) or averaged (`"mean"`, D). The flat token
  sequence is never read as time.
- Hop. A column spans one patch, 16 frames of 10 ms = 160 ms. `hop_ms` (default 40) is reached by shifted passes
  (`timestamp_method="shift"`): pass s encodes the log-mel from frame s·hop_ms/10 on, so its columns are centred
  s·hop_ms later than pass 0's; interleaving the 160/hop_ms passes gives columns every hop_ms, each computed by the
  encoder from the frames it is centred on. `"interpolate"` encodes once and interpolates the 160 ms columns
  linearly to the hop (cheaper, but no finer than the 160 ms columns it mixes).
- Timestamps are the centres of the columns' frames, in milliseconds: frame k of the feature extractor is centred
  at k·10 ms (the paper's centred STFT, "m2d") or k·10 + 12.5 ms (Kaldi frames that start at k·10 ms, "kaldi"), so
  column j (pass j mod S, column j div S) is centred at frame 7.5 + j·hop_ms/10. Columns whose centre lies within
  the clip are kept (a clip shorter than half a patch keeps one, centred on its real frames).
- Long clips. The log-mel of the whole clip is cut into chunks of the model's `num_frames` (the length of its
  position table, 6.08 s for the paper's models), each encoded on its own and the columns stitched in time; the
  tail chunk's padding is masked and its columns dropped. The encoder thus always sees positions it was trained on
  (a longer input would get its position table stretched) and memory stays bounded: at most `batch_size` chunks go
  through the encoder at once.
- Scene. `scene_pooling="cls+mean"` (default): [CLS ; the time average of the timestamp columns], D + F̃·D values
  (the paper's linear-evaluation feature, `aasp_hf.evaluation.pool_features`), over every column of the clip; the
  CLS of a long clip is the average of its chunks' CLS, weighted by their real columns. `"mean"`: the time average
  alone; `"cls"`: CLS alone.
- Layers. `layers` (default -1, the encoder's output): block indices 1..L (negative from the end; 0 is the patch
  embedding after its LayerNorm); several are averaged, as the teacher's targets average the top blocks.

Every clip is featurised, normalised and encoded on its own terms (the feature extractor's fixed statistics, a
Kaldi clip's own mean, per-clip attention masks), so its embeddings do not depend on its batch neighbours. Audio,
features and encoder stay on the encoder's device (`model.to("cuda")` moves all of it).

This module is a user of the model, not part of the remote code a checkpoint ships.
Dimensions: B clips, L samples, T frames, F mel bins, P time patch size (frames), C chunk frames, T̃ columns,
F̃ frequency patches, D hidden size, S shifted passes, J timestamps.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.errors import UsageError, unknown_keys_error
from ..utils.hub import check_model_folder
from ..evaluation import without_truncation
from ..feature_extraction_aasp import AaspFeatureExtractor
from ..modeling_aasp import AaspModel

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
FREQUENCY_POOLINGS = ("concat", "mean")
SCENE_POOLINGS = ("cls+mean", "mean", "cls")
TIMESTAMP_METHODS = ("shift", "interpolate")
DEFAULT_OPTIONS = dict(
    layers=-1,
    frequency_pooling="concat",
    scene_pooling="cls+mean",
    hop_ms=40.0,
    timestamp_method="shift",
    batch_size=32,
)


class AaspHearModel(nn.Module):
    """An AaSP encoder with its feature extractor and the embedding options, as HEAR's `load_model` returns it.

    Attributes HEAR reads: `sample_rate` (16000), `scene_embedding_size`, `timestamp_embedding_size` (ints).
    Build it with `load_model`; the options are described there.
    """

    def __init__(
        self,
        encoder,
        feature_extractor,
        layers=-1,
        frequency_pooling="concat",
        scene_pooling="cls+mean",
        hop_ms=40.0,
        timestamp_method="shift",
        batch_size=32,
    ):
        super().__init__()
        self.encoder = encoder.eval().requires_grad_(False)
        self.feature_extractor = feature_extractor
        config = encoder.config
        self.layers = layers
        self.layer_indices = _resolve_layers(layers, config.num_hidden_layers)
        _check_choice("frequency_pooling", frequency_pooling, FREQUENCY_POOLINGS)
        _check_choice("scene_pooling", scene_pooling, SCENE_POOLINGS)
        _check_choice("timestamp_method", timestamp_method, TIMESTAMP_METHODS)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UsageError(f"batch_size={batch_size!r} must be a positive integer (chunks per encoder call).")
        self.frequency_pooling, self.scene_pooling = frequency_pooling, scene_pooling
        self.timestamp_method, self.batch_size = timestamp_method, batch_size

        self.sample_rate = int(feature_extractor.sampling_rate)
        self.patch_frames = config.time_patch_size  # P
        self.frame_ms = 1000.0 * feature_extractor.hop_length / self.sample_rate  # 10 ms
        # Frame k is centred at k·frame_ms + frame_offset_ms: the centred STFT (m2d) at k·hop, Kaldi's frames (which
        # start at k·hop and span win_length samples) half a window later.
        centred = feature_extractor.mode == "m2d"
        self.frame_offset_ms = 0.0 if centred else 500.0 * feature_extractor.win_length / self.sample_rate
        self.hop_frames = _hop_frames(hop_ms, self.frame_ms, self.patch_frames)
        self.hop_ms = self.hop_frames * self.frame_ms
        # Chunks of the position table's length (a whole number of patches).
        self.chunk_frames = max(self.patch_frames, config.num_frames // self.patch_frames * self.patch_frames)

        per_column = config.hidden_size * (config.num_frequency_patches if frequency_pooling == "concat" else 1)
        self.timestamp_embedding_size = int(per_column)
        self.scene_embedding_size = int(
            {"cls+mean": config.hidden_size + per_column, "mean": per_column, "cls": config.hidden_size}[scene_pooling]
        )

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    def options(self) -> dict:
        """The options this model was built with (`load_model`'s keywords)."""
        return dict(
            layers=self.layers,
            frequency_pooling=self.frequency_pooling,
            scene_pooling=self.scene_pooling,
            hop_ms=self.hop_ms,
            timestamp_method=self.timestamp_method,
            batch_size=self.batch_size,
        )

    # ------------------------------------------------------------------------------------------- features
    def log_mel(self, audio: torch.Tensor) -> torch.Tensor:
        """(B, L) 16 kHz audio -> the feature extractor's normalised log-mel (B, T, F) on the encoder's device, T the
        real frames of an L-sample clip (no padding frames)."""
        if not isinstance(audio, torch.Tensor):
            raise UsageError(
                f"audio must be a torch.Tensor of shape (n_sounds, n_samples), got {type(audio).__name__}."
            )
        if audio.ndim != 2:
            raise UsageError(
                f"audio must have shape (n_sounds, n_samples) at {self.sample_rate} Hz, got {tuple(audio.shape)}."
            )
        if audio.shape[1] == 0:
            raise UsageError("audio has 0 samples per sound: pass at least one sample.")
        if not audio.is_floating_point():
            raise UsageError(f"audio must be floating point in [-1, 1], got {audio.dtype}.")
        audio = audio.to(self.device, torch.float32)
        shortest = self.feature_extractor.win_length if self.feature_extractor.mode == "kaldi" else 1
        if audio.shape[1] < shortest:  # Kaldi frames need one whole window: zero-pad a shorter clip to one
            audio = F.pad(audio, (0, shortest - audio.shape[1]))
        features = self.feature_extractor(
            audio,
            sampling_rate=self.sample_rate,
            return_tensors="pt",
            batched=True,
            truncation=False,  # the whole sound, encoded below in chunks of chunk_frames
            return_attention_mask=False,
        )["input_values"]  # (B, T rounded up, F)
        return features[:, : self.feature_extractor.num_frames(audio.shape[1])]  # (B, T, F)

    # ------------------------------------------------------------------------------------------- encoder
    @torch.no_grad()
    def encode_columns(self, features: torch.Tensor, offsets=(0,)):
        """Encode the log-mel (B, T, F) from each frame offset in `offsets`, in chunks of `chunk_frames`.

        Returns, per offset, (columns (B, T̃, F̃, D), cls (B, D)): the token grid of the chosen layers regrouped by time
        column, for the T̃ = ceil((T - offset) / P) columns that hold a real frame, and the CLS averaged over the
        chunks weighted by their real columns. All chunks of all offsets go through the encoder together, at most
        `batch_size` at a time.
        """
        config = self.encoder.config
        batch, num_frames, num_bins = features.shape
        patch = self.patch_frames
        chunk = min(self.chunk_frames, math.ceil(num_frames / patch) * patch)  # C: no more than the clip needs
        pieces, masks, layout = [], [], []
        for offset in offsets:
            frames = num_frames - offset
            num_chunks = math.ceil(frames / chunk)
            padded = F.pad(features[:, offset:], (0, 0, 0, num_chunks * chunk - frames))  # (B, n·C, F)
            pieces.append(padded.reshape(batch * num_chunks, chunk, num_bins))  # (B, n·C, F) -> (B·n, C, F)
            real = torch.arange(num_chunks * chunk, device=features.device) < frames  # (n·C,)
            masks.append(real.reshape(num_chunks, chunk).repeat(batch, 1))  # (B·n, C), clip-major like pieces
            layout.append((num_chunks, math.ceil(frames / patch)))
        inputs, mask = torch.cat(pieces), torch.cat(masks).long()  # (ΣB·n, C, F), (ΣB·n, C)

        hidden = [
            self._layer_output(inputs[i : i + self.batch_size], mask[i : i + self.batch_size])
            for i in range(0, inputs.shape[0], self.batch_size)
        ]
        hidden = torch.cat(hidden).float()  # (ΣB·n, 1 + N, D)

        out, start = [], 0
        columns_per_chunk = chunk // patch
        for num_chunks, num_columns in layout:
            h = hidden[start : start + batch * num_chunks]  # (B·n, 1 + N, D)
            start += batch * num_chunks
            grid = h[:, 1:].reshape(batch, num_chunks * columns_per_chunk, config.num_frequency_patches, -1)
            # (B·n, T̃c·F̃, D) -> (B, n·T̃c, F̃, D): time-major tokens regrouped by column, chunks stitched in time
            real_columns = torch.arange(num_chunks * columns_per_chunk, device=h.device) < num_columns  # (n·T̃c,)
            weight = real_columns.reshape(num_chunks, columns_per_chunk).sum(1).to(h.dtype)  # (n,) real columns
            cls = h[:, 0].reshape(batch, num_chunks, -1)  # (B·n, D) -> (B, n, D)
            cls = (cls * weight[None, :, None]).sum(1) / weight.sum()  # (B, D)
            out.append((grid[:, :num_columns], cls))
        return out

    def _layer_output(self, input_values, attention_mask):
        """(b, C, F) -> the mean of the chosen layers' outputs (b, 1 + N, D); index L is the encoder's final output
        (after its last LayerNorm in a pre-norm model)."""
        final = self.encoder.config.num_hidden_layers
        needs_states = any(i != final for i in self.layer_indices)  # the final output alone needs no other layer
        output = self.encoder(input_values, attention_mask=attention_mask, output_hidden_states=needs_states)
        if not needs_states:
            return output.last_hidden_state
        states = list(output.hidden_states[:-1]) + [output.last_hidden_state]  # L + 1 entries: embedding, blocks
        return torch.stack([states[i] for i in self.layer_indices]).mean(0)

    def pool_frequency(self, columns: torch.Tensor) -> torch.Tensor:
        """(B, T̃, F̃, D) -> (B, T̃, F̃·D) (concat) or (B, T̃, D) (mean)."""
        if self.frequency_pooling == "mean":
            return columns.mean(2)
        return columns.flatten(2)  # (B, T̃, F̃, D) -> (B, T̃, F̃·D), frequency patch f at [f·D, (f+1)·D)

    # ------------------------------------------------------------------------------------------- embeddings
    def scene_embeddings(self, audio: torch.Tensor) -> torch.Tensor:
        features = self.log_mel(audio)  # (B, T, F)
        [(columns, cls)] = self.encode_columns(features)
        mean = self.pool_frequency(columns).mean(1)  # (B, T̃, E) -> (B, E)
        parts = {"cls+mean": [cls, mean], "mean": [mean], "cls": [cls]}[self.scene_pooling]
        return torch.cat(parts, dim=-1).float()  # (B, scene_embedding_size)

    def timestamp_embeddings(self, audio: torch.Tensor):
        features = self.log_mel(audio)  # (B, T, F)
        num_frames = features.shape[1]
        passes = self.patch_frames // self.hop_frames  # S
        first_centre = (self.patch_frames - 1) / 2  # frame index of column 0's centre (7.5)
        # Column j is centred at frame first_centre + j·hop_frames; keep those centred within the clip's frames.
        count = max(1, math.floor((num_frames - 1 - first_centre) / self.hop_frames) + 1)  # J
        centres = first_centre + self.hop_frames * torch.arange(count, dtype=torch.float64)  # (J,) frames
        if num_frames - 1 < first_centre:  # shorter than half a patch: one column, centred on its real frames
            centres = torch.tensor([(num_frames - 1) / 2], dtype=torch.float64)

        if self.timestamp_method == "shift":
            offsets = [s * self.hop_frames for s in range(passes) if s * self.hop_frames < num_frames]
            encoded = self.encode_columns(features, offsets)
            embeddings = features.new_zeros(
                features.shape[0], math.ceil(count / passes) * passes, self.timestamp_embedding_size
            )  # (B, ceil(J/S)·S, E)
            for s, (columns, _) in enumerate(encoded):  # pass s holds columns j = t·S + s
                wanted = embeddings[:, s::passes].shape[1]
                have = min(wanted, columns.shape[1])
                embeddings[:, s::passes][:, :have] = self.pool_frequency(columns[:, :have])
            embeddings = embeddings[:, :count]  # (B, J, E)
        else:
            [(columns, _)] = self.encode_columns(features)
            columns = self.pool_frequency(columns)  # (B, T̃, E), column t centred at frame first_centre + t·P
            position = ((centres - first_centre) / self.patch_frames).clamp(0, columns.shape[1] - 1)  # (J,)
            low = position.floor().long()
            high = (low + 1).clamp(max=columns.shape[1] - 1)
            weight = (position - low).to(columns.dtype)[None, :, None].to(columns.device)  # (1, J, 1)
            embeddings = columns[:, low] * (1 - weight) + columns[:, high] * weight  # (B, J, E)

        timestamps = (centres * self.frame_ms + self.frame_offset_ms).float().to(embeddings.device)  # (J,) ms
        return embeddings.float(), timestamps[None].expand(features.shape[0], -1).contiguous()  # (B, J, E), (B, J)


# ----------------------------------------------------------------------------------------------- the HEAR API
def load_model(model_file_path: str = "", **options) -> AaspHearModel:
    """An AaSP checkpoint folder (`save_pretrained` output: an exported encoder, a fine-tuned classifier or a
    converted EAT checkpoint) as a HEAR model. Reads only local files.

    Options (keywords; HEAR's runner passes them with `--model-options '{"hop_ms": 20}'`):
        layers (`int` or list of `int`, -1): encoder block(s) whose output is used, 1..L or negative from the end
            (-1: the encoder's final output; 0: the patch embedding). Several are averaged.
        frequency_pooling (`"concat"` or `"mean"`): a time column's F̃ frequency patches concatenated (F̃·D) or
            averaged (D).
        scene_pooling (`"cls+mean"`, `"mean"` or `"cls"`): the scene embedding, [CLS ; time-averaged columns] or one
            of the two.
        hop_ms (`float`, 40): the timestamp hop, a whole number of frames (10 ms) that divides the 160 ms patch:
            10, 20, 40, 80 or 160.
        timestamp_method (`"shift"` or `"interpolate"`): shifted passes (160/hop_ms encoder passes) or one pass
            linearly interpolated to the hop.
        batch_size (`int`, 32): chunks of `num_frames` frames per encoder call (bounds memory for long clips).
    """
    unknown = set(options) - set(DEFAULT_OPTIONS)
    if unknown:
        raise unknown_keys_error(
            unknown, DEFAULT_OPTIONS, "load_model's options", "aasp_hf.integrations.hear.load_model's docstring"
        )
    folder = _checkpoint_folder(model_file_path)
    encoder = AaspModel.from_pretrained(folder, local_files_only=True)
    config = encoder.config
    if (folder / "preprocessor_config.json").is_file():
        feature_extractor = AaspFeatureExtractor.from_pretrained(folder, local_files_only=True)
    else:
        logger.warning(
            f"No preprocessor_config.json in {folder}: using AaspFeatureExtractor(feature_size={config.num_mel_bins}) "
            f"(the paper's m2d front end, mean -7.1, std 4.1). Save the feature extractor with the model to be sure."
        )
        feature_extractor = AaspFeatureExtractor(feature_size=config.num_mel_bins)
    feature_extractor = without_truncation(feature_extractor, folder)
    if feature_extractor.feature_size != config.num_mel_bins or feature_extractor.sampling_rate != SAMPLE_RATE:
        raise UsageError(
            f"{folder}: the feature extractor gives {feature_extractor.feature_size} mel bins at "
            f"{feature_extractor.sampling_rate} Hz, the model takes {config.num_mel_bins} at {SAMPLE_RATE} Hz; save "
            f"the feature extractor the model was trained with next to it."
        )
    return AaspHearModel(encoder, feature_extractor, **{**DEFAULT_OPTIONS, **options})


def get_scene_embeddings(audio: torch.Tensor, model: AaspHearModel) -> torch.Tensor:
    """float32 (n_sounds, n_samples) at 16 kHz -> float32 (n_sounds, model.scene_embedding_size)."""
    return model.scene_embeddings(audio)


def get_timestamp_embeddings(audio: torch.Tensor, model: AaspHearModel):
    """float32 (n_sounds, n_samples) at 16 kHz -> (embeddings float32 (n_sounds, n_timestamps,
    model.timestamp_embedding_size), timestamps float32 (n_sounds, n_timestamps) in milliseconds, evenly spaced by
    `model.hop_ms`, each the centre of the frames its embedding was computed from)."""
    return model.timestamp_embeddings(audio)


# ----------------------------------------------------------------------------------------------- checks
def _checkpoint_folder(model_file_path) -> Path:
    what = (
        "pass the folder of an AaSP checkpoint written by save_pretrained (an exported encoder such as "
        "runs/pt/encoder, a fine-tuned classifier, or a converted EAT checkpoint); nothing is downloaded"
    )
    if not model_file_path:
        raise UsageError(f"aasp_hf.integrations.hear.load_model needs model_file_path: {what}.")
    folder = Path(model_file_path)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder: {what}.")
    config_file = folder / "config.json"
    try:
        model_type = json.loads(config_file.read_text()).get("model_type") if config_file.is_file() else None
    except (OSError, ValueError, AttributeError):
        model_type = None
    if model_type != "aasp" or not any(
        (folder / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")
    ):
        raise UsageError(
            f"{folder} is not an AaSP checkpoint (it needs config.json with model_type 'aasp' and "
            f"model.safetensors): {what}."
        )
    check_model_folder(folder)  # a truncated or corrupt weights file: said in one line before anything loads
    return folder


def _resolve_layers(layers, num_hidden_layers: int) -> tuple[int, ...]:
    """-1 / [..] -> indices into (embedding, block 1, ..., block L)."""
    values = [layers] if isinstance(layers, int) and not isinstance(layers, bool) else layers
    try:
        values = list(values)
    except TypeError:
        values = None
    if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise UsageError(f"layers={layers!r} must be an int or a non-empty list of ints (block indices 0..L).")
    resolved = []
    for value in values:
        index = value + num_hidden_layers + 1 if value < 0 else value
        if not 0 <= index <= num_hidden_layers:
            raise UsageError(
                f"layers={layers!r}: {value} is out of range for a {num_hidden_layers}-block encoder "
                f"(use 0..{num_hidden_layers} or -{num_hidden_layers + 1}..-1)."
            )
        resolved.append(index)
    return tuple(resolved)


def _check_choice(name, value, choices):
    if value not in choices:
        raise UsageError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}.")


def _hop_frames(hop_ms, frame_ms: float, patch_frames: int) -> int:
    """hop_ms -> a whole number of frames that divides the patch, or a UsageError listing the hops that do."""
    valid = [k for k in range(1, patch_frames + 1) if patch_frames % k == 0]
    valid_ms = ", ".join(f"{k * frame_ms:g}" for k in valid)
    try:
        frames = float(hop_ms) / frame_ms
    except (TypeError, ValueError):
        frames = None
    if frames is None or abs(frames - round(frames)) > 1e-6 or round(frames) not in valid:
        raise UsageError(
            f"hop_ms={hop_ms!r} must be a whole number of {frame_ms:g} ms frames that divides the "
            f"{patch_frames * frame_ms:g} ms patch: one of {valid_ms}."
        )
    return int(round(frames))


__all__ = ["AaspHearModel", "load_model", "get_scene_embeddings", "get_timestamp_embeddings"]
