"""Convert an EAT checkpoint to an AaSP model with the SPE stem (`patch_embedding="spe"`) and EAT's kaldi front end.

Sources (AaSP's SPE encoder is EAT's encoder — the paper trains "following EAT", Sec. Predictor and Pre-training
Objectives, with the same 16×16 conv stem, 2-D sin-cos positions, CLS and post-norm ViT-B blocks — so the conversion is
a renaming plus the qkv split):

- EAT's fairseq checkpoints (https://github.com/cwx-worst-one/EAT): pre-trained (`Data2VecMultiModel`; the EMA teacher
  under `model["_ema"]`, select it with `--ema`) and fine-tuned (`MaeImageClassificationModel`: the encoder under
  `model.`, plus `fc_norm` and `head`).
- The EAT Hub port (`worstchan/EAT-*`, `EATModel` wrapping `EAT` as `self.model`): keys `model.local_encoder.proj.*`,
  `model.extra_tokens`, `model.fixed_positional_encoder.positions`, `model.pre_norm.*`, `model.blocks.N.*`,
  `model.fc_norm.*`, `model.head.*`; a port folder's `config.json` (EATConfig) gives the head count, mel bins,
  LayerNorm eps and input length (`img_size[0]`). The key names were checked against the port's published code
  (`eat_model.py`: `local_encoder`, `extra_tokens`, `fixed_positional_encoder.positions`, `pre_norm`, `blocks` of
  `AltBlock` with `attn.qkv`/`attn.proj`/`norm1`/`norm2`/`mlp.fc1`/`mlp.fc2`, `fc_norm`, `head`), but NOT against a
  downloaded checkpoint (there is no network here); the tests run it on synthetic dicts.

The EAT encoder: Conv2d(1, D, 16, stride 16) on (B, 1, T, F), flattened time-major -> + fixed 2-D sin-cos positions ->
prepend CLS (no position) -> LayerNorm -> post-norm blocks (x = LN1(x + attn(x)); x = LN2(x + mlp(x))) with fused
qkv, no final norm. Every source key is either consumed or dropped by name (`DROPPED_*`); anything else is an error.

    python conversion/convert_eat_checkpoint.py EAT-base_epoch30_ft.pt out/eat-base-as2m --trust-pickle
    python conversion/convert_eat_checkpoint.py EAT-base_epoch30_pt.pt out/eat-base --ema --trust-pickle
"""

from __future__ import annotations

import argparse
import json
import logging
import pickle
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification, AaspModel
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import UsageError, parse_command_line
from aasp_hf.modeling_aasp import sincos_position_embeddings

logger = logging.getLogger(__name__)

PATCH_SIZE = 16  # EAT's conv stem is 16×16 with stride 16
AUDIOSET_NUM_LABELS = 527


# ----------------------------------------------------------------------------------------------- key tables
@dataclass(frozen=True)
class EatLayout:
    """Where each encoder part lives in one EAT checkpoint flavour (names without the `.weight`/`.bias` suffix)."""

    name: str
    patch_projection: str
    cls_token: str
    positions: str
    embedding_norm: str
    blocks: str
    classifier_norm: str
    classifier: str
    dropped_prefixes: tuple[str, ...] = ()  # pre-training-only modules, dropped on purpose
    dropped_keys: tuple[str, ...] = ()


FAIRSEQ = EatLayout(
    name="fairseq",
    patch_projection="modality_encoders.IMAGE.local_encoder.proj",
    cls_token="modality_encoders.IMAGE.extra_tokens",
    positions="modality_encoders.IMAGE.fixed_positional_encoder.positions",
    embedding_norm="modality_encoders.IMAGE.context_encoder.norm",
    blocks="blocks",
    classifier_norm="fc_norm",
    classifier="head",
    dropped_prefixes=(
        "modality_encoders.IMAGE.decoder.",  # EAT's CNN decoder (pre-training only)
        "shared_decoder.",
        "recon_proj.",  # reconstruction-loss projection
        "cls_proj.",  # utterance-level (DINO) experiment
        "_ema.",  # the teacher, when not selected with --ema (flattened form)
    ),
    dropped_keys=(
        "_ema",  # the teacher, when not selected with --ema (nested form, as fairseq saves it)
        "center",  # utterance-level (DINO) experiment
        "modality_encoders.IMAGE.alibi_scale",  # EAT does not use ALiBi
        "modality_encoders.IMAGE.encoder_mask",
    ),
)

# Checked against the port's published `EAT` module (`local_encoder`, `extra_tokens`, `fixed_positional_encoder`,
# `pre_norm`, `blocks`, `fc_norm`, `head`) wrapped as `EATModel.model`; not against a downloaded checkpoint.
HUB_PORT = EatLayout(
    name="hub-port",
    patch_projection="model.local_encoder.proj",
    cls_token="model.extra_tokens",
    positions="model.fixed_positional_encoder.positions",
    embedding_norm="model.pre_norm",
    blocks="model.blocks",
    classifier_norm="model.fc_norm",
    classifier="model.head",
)

# EAT block part -> AaSP layer part; `attn.qkv` is split into attention.{query,key,value}.
BLOCK_PARTS = {
    "norm1": "norm1",
    "attn.proj": "attention.output",
    "norm2": "norm2",
    "mlp.fc1": "mlp.fc1",
    "mlp.fc2": "mlp.fc2",
}


@dataclass
class ConversionReport:
    layout: str
    consumed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    from_student: list[str] = field(default_factory=list)  # --ema: keys the teacher copy lacks, taken from the student
    new_head: bool = False  # a classification head was requested but the checkpoint has none (random init)


class ConversionError(UsageError):
    """A checkpoint this converter cannot read or map (a UsageError: the script prints it as one line)."""


# ----------------------------------------------------------------------------------------------- loading
def _flatten(state: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_checkpoint(path: str | Path, trust_pickle: bool = False) -> dict:
    """A state dict from a fairseq `.pt`, a plain torch state dict, a `.safetensors` file, or a Hub-port folder.

    `.pt` files are read with `weights_only=True`. fairseq checkpoints also pickle their `cfg`/`args` objects, which
    that refuses; only then, and only with `trust_pickle=True`, is the file fully unpickled (it can run code: do this
    only for files from a source you trust)."""
    path = Path(path)
    if path.is_dir():
        for name in ("model.safetensors", "pytorch_model.bin"):
            if (path / name).exists():
                return load_checkpoint(path / name, trust_pickle)
        raise ConversionError(f"{path} holds neither model.safetensors nor pytorch_model.bin")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as error:  # safetensors' own error type: a file that is not safetensors
            raise ConversionError(f"{path} is not a .safetensors file ({str(error).splitlines()[0]})") from error
    with open(path, "rb") as file:
        is_pickle = file.read(1) == b"\x80"  # a pickle (protocol >= 2): torch's legacy format
    if not (is_pickle or zipfile.is_zipfile(path)):  # torch.save writes a zip file
        raise ConversionError(
            f"{path} is not a torch checkpoint (.pt), a .safetensors file or a folder holding model.safetensors"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if not trust_pickle:
            raise ConversionError(
                f"{path} cannot be read with torch.load(weights_only=True): it pickles Python objects besides tensors "
                f"(fairseq checkpoints store their `cfg`/`args` this way). Unpickling can run arbitrary code. If you "
                f"trust where this file comes from, pass --trust-pickle (convert(..., trust_pickle=True)). "
                f"Detail: {str(error).splitlines()[0]}"
            ) from error
        logger.warning("Unpickling %s with weights_only=False (--trust-pickle)", path)
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        except (pickle.UnpicklingError, EOFError, RuntimeError) as error:
            raise ConversionError(f"{path} is not a torch checkpoint ({str(error).splitlines()[0]})") from error
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), dict):
        return checkpoint["model"]  # fairseq: {"cfg", "model", "optimizer_history", ...}
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
        return checkpoint["state_dict"]
    if isinstance(checkpoint, dict):
        return checkpoint
    raise ConversionError(f"{path} holds a {type(checkpoint).__name__}, not a state dict")


def hub_port_settings(path: str | Path) -> dict:
    """`convert` arguments from a Hub-port folder's `config.json` (EAT's `EATConfig`, model_type "eat"): the head
    count, mel bins, LayerNorm eps and input length (`img_size[0]`, EAT's 1024-frame target length) that the weights
    alone do not give. {} for anything else (a file, or a folder without such a config)."""
    config_path = Path(path) / "config.json"
    if not config_path.is_file():
        return {}
    config = json.loads(config_path.read_text())
    if config.get("model_type") != "eat":
        return {}
    if config.get("layer_norm_first", False):
        raise ConversionError(
            f"{config_path}: layer_norm_first=true (pre-norm blocks); EAT's released models are post-norm and that is "
            "the only variant this converter maps."
        )
    settings = {
        "num_attention_heads": config.get("num_heads"),
        "num_mel_bins": config.get("mel_bins"),
        "layer_norm_eps": config.get("norm_eps"),
    }
    img_size = config.get("img_size")
    if isinstance(img_size, (list, tuple)) and img_size:
        settings["num_frames"] = int(img_size[0])
    return {k: v for k, v in settings.items() if v is not None}


# ----------------------------------------------------------------------------------------------- mapping
def detect_layout(state_dict: dict) -> tuple[EatLayout, dict]:
    """Returns the layout and the state dict with a fine-tuned fairseq model's `model.` encoder prefix removed."""
    keys = set(state_dict)
    if any(k.startswith("modality_encoders.") for k in keys):
        return FAIRSEQ, dict(state_dict)
    if any(k.startswith("model.modality_encoders.") for k in keys):  # fine-tuned: MaeImageClassificationModel.model
        return FAIRSEQ, {(k[len("model.") :] if k.startswith("model.") else k): v for k, v in state_dict.items()}
    if HUB_PORT.patch_projection + ".weight" in keys:
        return HUB_PORT, dict(state_dict)
    sample = ", ".join(sorted(keys)[:8])
    raise ConversionError(
        "Not an EAT checkpoint: expected `modality_encoders.IMAGE.local_encoder.proj.weight` (fairseq) or "
        f"`model.local_encoder.proj.weight` (Hub port). First keys: {sample}"
    )


def _select_teacher(state: dict, layout: EatLayout, report: ConversionReport) -> dict:
    """--ema: the teacher's weights replace the student's; encoder keys the teacher copy lacks come from the student."""
    if layout is not FAIRSEQ:
        raise ConversionError("--ema applies to fairseq pre-training checkpoints only (the Hub port holds no teacher).")
    if isinstance(state.get("_ema"), dict):
        teacher = _flatten(state["_ema"])
    else:
        teacher = {k[len("_ema.") :]: v for k, v in state.items() if k.startswith("_ema.")}
    if not teacher:
        raise ConversionError(
            "--ema was given but the checkpoint holds no `_ema` teacher (fine-tuned checkpoints have none)."
        )
    if all(re.match(r"\d+\.", k) for k in teacher):  # ema_encoder_only: the teacher is the block list alone
        teacher = {f"blocks.{k}": v for k, v in teacher.items()}
    student = {k: v for k, v in state.items() if k != "_ema" and not k.startswith("_ema.")}
    unknown = sorted(k for k in teacher if k not in student)
    if unknown:
        raise ConversionError(f"The `_ema` teacher holds keys the student does not: {unknown}")
    report.dropped += sorted(f"{k} (student; replaced by _ema)" for k in teacher)
    return {**student, **teacher}, set(teacher)


def _infer_config(
    state: dict,
    layout: EatLayout,
    num_mel_bins,
    num_frames,
    num_attention_heads,
    layer_norm_eps,
    num_labels,
    id2label,
    problem_type,
) -> AaspConfig:
    def get(key):
        if key not in state:
            raise ConversionError(f"Missing key `{key}` ({layout.name} layout)")
        return state[key]

    projection = get(layout.patch_projection + ".weight")
    if projection.ndim != 4 or tuple(projection.shape[1:]) != (1, PATCH_SIZE, PATCH_SIZE):
        raise ConversionError(
            f"`{layout.patch_projection}.weight` has shape {tuple(projection.shape)}; EAT's stem is "
            f"Conv2d(1, D, {PATCH_SIZE}×{PATCH_SIZE}), i.e. (D, 1, {PATCH_SIZE}, {PATCH_SIZE})."
        )
    hidden_size = projection.shape[0]
    block_ids = {int(m.group(1)) for k in state if (m := re.match(re.escape(layout.blocks) + r"\.(\d+)\.", k))}
    if not block_ids or block_ids != set(range(max(block_ids) + 1)):
        raise ConversionError(f"Block indices under `{layout.blocks}.` are not 0..L-1: {sorted(block_ids)}")
    if "norm.weight" in state and layout is FAIRSEQ:
        raise ConversionError(
            "This checkpoint has a final `norm` (layer_norm_first=True, pre-norm blocks); EAT's released models are "
            "post-norm and that is the only variant this converter maps."
        )
    intermediate_size = get(f"{layout.blocks}.0.mlp.fc1.weight").shape[0]
    num_attention_heads = num_attention_heads or max(hidden_size // 64, 1)  # ViT-B 768/12, ViT-L 1024/16
    num_frequency_patches = num_mel_bins // PATCH_SIZE
    positions = get(layout.positions)
    rows = positions.shape[-2]
    if num_mel_bins % PATCH_SIZE or rows % num_frequency_patches:
        raise ConversionError(
            f"`{layout.positions}` has {rows} rows, not a multiple of {num_frequency_patches} frequency patches "
            f"(num_mel_bins={num_mel_bins}): pass the checkpoint's --num-mel-bins."
        )
    if num_frames is None:
        num_frames = rows // num_frequency_patches * PATCH_SIZE  # EAT's target_length
    kwargs = dict(
        hidden_size=hidden_size,
        num_hidden_layers=len(block_ids),
        num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size,
        hidden_act="gelu",
        layer_norm_eps=layer_norm_eps,
        qkv_bias=f"{layout.blocks}.0.attn.qkv.bias" in state,
        layer_norm_first=False,
        num_mel_bins=num_mel_bins,
        num_frames=num_frames,
        frequency_patch_size=PATCH_SIZE,
        time_patch_size=PATCH_SIZE,
        patch_embedding="spe",
        # AaPE-only fields, unused by the SPE stem; the config still validates them against D.
        lambda_encoder_reduction=6 if hidden_size % 12 == 0 else 1,
    )
    if num_labels is not None:
        kwargs["num_labels"] = num_labels
        if id2label is not None:
            if len(id2label) != num_labels:
                raise ConversionError(f"id2label has {len(id2label)} labels but the head has {num_labels} outputs")
            kwargs["id2label"] = {int(i): name for i, name in id2label.items()}
            kwargs["label2id"] = {name: int(i) for i, name in id2label.items()}
        if problem_type is None and num_labels == AUDIOSET_NUM_LABELS:
            problem_type = "multi_label_classification"  # AudioSet: sigmoid in the pipeline
        if problem_type is not None:
            kwargs["problem_type"] = problem_type
    return AaspConfig(**kwargs)


def _check_positions(source: torch.Tensor, config: AaspConfig, key: str):
    """EAT's positions are fixed sin-cos (not trained): check they equal ours for the same grid, then drop them."""
    source = source.reshape(-1, source.shape[-1]).double()  # (1, N, D) -> (N, D)
    time_patches = source.shape[0] // config.num_frequency_patches
    expected = sincos_position_embeddings(config.hidden_size, config.num_frequency_patches, time_patches)  # (N, D)
    error = (source - expected).abs().max().item()
    if error > 1e-4:
        raise ConversionError(
            f"`{key}` differs from AaSP's fixed 2-D sin-cos table for a {time_patches}×{config.num_frequency_patches} "
            f"(time × frequency) grid by up to {error:.3g}: the checkpoint's positions are not the standard EAT table "
            "(different grid, token order or trained positions), so they cannot be dropped safely."
        )


def map_state_dict(state: dict, layout: EatLayout, config: AaspConfig, with_head: bool, report: ConversionReport):
    """EAT keys -> AaspModel keys (prefixed `aasp.` when `with_head`). Consumes from `state` (a copy) as it goes.
    Returns (mapped tensors, target key -> source key)."""
    prefix = "aasp." if with_head else ""
    mapped, sources = {}, {}

    def take(source_key, target_key):
        if source_key not in state:
            raise ConversionError(f"Missing key `{source_key}` ({layout.name} layout)")
        mapped[target_key] = state.pop(source_key)
        sources[target_key] = source_key
        report.consumed.append(source_key)

    for suffix in ("weight", "bias"):
        take(f"{layout.patch_projection}.{suffix}", f"{prefix}embeddings.projection.{suffix}")
        take(f"{layout.embedding_norm}.{suffix}", f"{prefix}embedding_norm.{suffix}")
    take(layout.cls_token, f"{prefix}cls_token")
    _check_positions(state.pop(layout.positions), config, layout.positions)
    report.dropped.append(f"{layout.positions} (fixed sin-cos, recomputed; checked equal)")

    d = config.hidden_size
    for i in range(config.num_hidden_layers):
        source, target = f"{layout.blocks}.{i}", f"{prefix}layers.{i}"
        for eat_part, our_part in BLOCK_PARTS.items():
            for suffix in ("weight", "bias"):
                take(f"{source}.{eat_part}.{suffix}", f"{target}.{our_part}.{suffix}")
        # Fused qkv: rows [0, D) query, [D, 2D) key, [2D, 3D) value, each head-contiguous (AltAttention's
        # reshape(B, N, 3, heads, d)), the same head layout as our separate projections.
        for suffix in ("weight", "bias") if config.qkv_bias else ("weight",):
            key = f"{source}.attn.qkv.{suffix}"
            if key not in state:
                raise ConversionError(f"Missing key `{key}` ({layout.name} layout)")
            qkv = state.pop(key)
            if qkv.shape[0] != 3 * d:
                raise ConversionError(f"`{key}` has shape {tuple(qkv.shape)}; expected {3 * d} rows (3 × D={d})")
            for name, part in zip(("query", "key", "value"), qkv.split(d, dim=0)):
                mapped[f"{target}.attention.{name}.{suffix}"] = part.clone()
                sources[f"{target}.attention.{name}.{suffix}"] = f"{key} ({name} third)"
            report.consumed.append(key)

    head_keys = [f"{layout.classifier_norm}.{s}" for s in ("weight", "bias")] + [
        f"{layout.classifier}.{s}" for s in ("weight", "bias")
    ]
    if with_head and all(k in state for k in head_keys):
        for suffix in ("weight", "bias"):
            take(f"{layout.classifier_norm}.{suffix}", f"classifier.layernorm.{suffix}")  # AaspClassificationHead
            take(f"{layout.classifier}.{suffix}", f"classifier.dense.{suffix}")
    else:
        for key in head_keys:
            if key in state:
                state.pop(key)
                report.dropped.append(f"{key} (head; --task base)")
        report.new_head = with_head

    for key in list(state):
        if key in layout.dropped_keys or key.startswith(layout.dropped_prefixes):
            state.pop(key)
            report.dropped.append(key)
    if state:
        raise ConversionError(
            f"{len(state)} source key(s) are neither mapped nor on the drop list ({layout.name} layout): "
            f"{sorted(state)}. Extend the tables in conversion/convert_eat_checkpoint.py if they are safe to drop."
        )
    return mapped, sources


def _check_shapes(mapped: dict, model: torch.nn.Module, renamed_from: dict):
    expected = model.state_dict()
    for key, tensor in mapped.items():
        if key not in expected:
            raise RuntimeError(f"Internal: mapped key `{key}` is not a parameter of {type(model).__name__}")
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise ConversionError(
                f"Shape mismatch for `{renamed_from.get(key, key)}` -> `{key}`: checkpoint {tuple(tensor.shape)}, "
                f"model {tuple(expected[key].shape)}"
            )


def convert(
    state_dict: dict,
    *,
    ema: bool = False,
    task: str = "auto",
    num_mel_bins: int = 128,
    num_frames: int | None = None,
    num_attention_heads: int | None = None,
    layer_norm_eps: float = 1e-6,
    num_labels: int | None = None,
    id2label: dict | None = None,
    problem_type: str | None = None,
    return_report: bool = False,
):
    """EAT state dict -> `AaspModel` (task "base") or `AaspForAudioClassification` ("classification"; "auto" picks
    classification when the checkpoint has `fc_norm` and `head`). The model is in eval mode.

    num_frames: the position-table length (default: EAT's, from its `positions`, e.g. 1024 frames for 512 rows).
    num_attention_heads: not recoverable from the weights; default D/64 (12 for ViT-B).
    num_labels: for a checkpoint without a head, builds a new randomly initialised one of this size.
    """
    if task not in ("auto", "base", "classification"):
        raise ValueError(f"task={task!r}: use 'auto', 'base' or 'classification'")
    layout, state = detect_layout(state_dict)
    report = ConversionReport(layout=layout.name)
    teacher_keys = None
    if ema:
        state, teacher_keys = _select_teacher(state, layout, report)
    state = {k: v for k, v in state.items()}
    has_head = all(f"{p}.{s}" in state for p in (layout.classifier_norm, layout.classifier) for s in ("weight", "bias"))
    with_head = task == "classification" or (task == "auto" and (has_head or num_labels is not None))
    if with_head and has_head:
        head_labels = state[f"{layout.classifier}.weight"].shape[0]
        if num_labels is not None and num_labels != head_labels:
            raise ConversionError(f"--num-labels {num_labels} but the checkpoint's head has {head_labels} outputs")
        num_labels = head_labels
    elif with_head and num_labels is None:
        raise ConversionError("The checkpoint has no classification head: pass num_labels for a new one.")
    if id2label is not None and num_labels is None:
        num_labels = len(id2label)
    config = _infer_config(
        state,
        layout,
        num_mel_bins,
        num_frames,
        num_attention_heads,
        layer_norm_eps,
        num_labels if with_head else None,
        id2label,
        problem_type,
    )
    mapped, sources = map_state_dict(state, layout, config, with_head, report)
    if teacher_keys is not None:  # encoder weights the teacher copy lacks (e.g. ema_local_encoder=False)
        report.from_student = sorted(k for k in report.consumed if k not in teacher_keys)

    model = (AaspForAudioClassification if with_head else AaspModel)(config)
    _check_shapes(mapped, model, sources)
    expected = model.state_dict()
    full = {k: mapped.get(k, v) for k, v in expected.items()}  # positions (and a new head) keep the model's own
    missing = sorted(k for k in expected if k not in mapped and "position_embeddings" not in k)
    if missing and not (report.new_head and all(k.startswith("classifier") for k in missing)):
        raise RuntimeError(f"Internal: no source for {missing}")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in full.items()}, strict=True)
    model.eval()
    if report.from_student:
        logger.warning("--ema: the teacher copy lacks %s; the student's values were used", report.from_student)
    if report.new_head:
        logger.warning("No head in the checkpoint: the classifier (%d labels) is newly initialised", num_labels)
    return (model, report) if return_report else model


def eat_feature_extractor(config: AaspConfig) -> AaspFeatureExtractor:
    """EAT's front end: kaldi fbank, (x + 4.268) / (2 · 4.569), clips cut at the position-table length."""
    return AaspFeatureExtractor(mode="kaldi", feature_size=config.num_mel_bins, max_frames=config.num_frames)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="EAT fairseq .pt, a state-dict .pt/.safetensors, or a Hub-port folder")
    parser.add_argument("output_dir")
    parser.add_argument("--ema", action="store_true", help="convert the EMA teacher (`_ema`) of a pre-training run")
    parser.add_argument("--task", choices=("auto", "base", "classification"), default="auto")
    parser.add_argument(
        "--num-frames",
        type=int,
        default=None,
        help="position-table length (default: a Hub-port config's img_size[0], else EAT's table)",
    )
    parser.add_argument("--num-mel-bins", type=int, default=None, help="default: a Hub-port config's, else 128")
    parser.add_argument(
        "--num-attention-heads",
        type=int,
        default=None,
        help="default: a Hub-port config's num_heads, else hidden size / 64",
    )
    parser.add_argument("--layer-norm-eps", type=float, default=None, help="default: a Hub-port config's, else 1e-6")
    parser.add_argument("--num-labels", type=int, default=None, help="new head size when the checkpoint has none")
    parser.add_argument("--id2label-json", default=None, help='JSON file {"0": "Speech", ...} or a list of names')
    parser.add_argument(
        "--problem-type", default=None, choices=("single_label_classification", "multi_label_classification")
    )
    parser.add_argument("--trust-pickle", action="store_true", help="allow full unpickling (fairseq cfg objects)")
    parser.add_argument("--push-to-hub", default=None, metavar="REPO_ID")
    parser.add_argument("--private", action="store_true")
    return parse_command_line(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if not Path(args.checkpoint).exists():
        raise UsageError(
            f"checkpoint {args.checkpoint} does not exist (the first argument: an EAT .pt, a state-dict "
            f".pt / .safetensors, or a Hub-port folder)"
        )
    id2label = None
    if args.id2label_json:
        if not Path(args.id2label_json).is_file():
            raise UsageError(f"--id2label-json {args.id2label_json} does not exist")
        try:
            labels = json.loads(Path(args.id2label_json).read_text())
        except json.JSONDecodeError as error:
            raise UsageError(f"--id2label-json {args.id2label_json} is not valid JSON: {error}") from None
        id2label = dict(enumerate(labels)) if isinstance(labels, list) else {int(k): v for k, v in labels.items()}
    state = load_checkpoint(args.checkpoint, trust_pickle=args.trust_pickle)
    settings = hub_port_settings(args.checkpoint)  # unset fields keep convert()'s defaults
    given = {
        "num_frames": args.num_frames,
        "num_mel_bins": args.num_mel_bins,
        "num_attention_heads": args.num_attention_heads,
        "layer_norm_eps": args.layer_norm_eps,
    }
    settings.update({k: v for k, v in given.items() if v is not None})  # the command line wins
    model, report = convert(
        state,
        ema=args.ema,
        task=args.task,
        num_labels=args.num_labels,
        id2label=id2label,
        problem_type=args.problem_type,
        return_report=True,
        **settings,
    )
    logger.info("%s layout: %d keys consumed, %d dropped", report.layout, len(report.consumed), len(report.dropped))
    for key in report.dropped:
        logger.info("  dropped %s", key)

    from aasp_hf.utils.hub import push_folder, write_hub_folder

    source = Path(args.checkpoint).name + (" (EMA teacher)" if args.ema else "")
    folder = write_hub_folder(
        model,
        eat_feature_extractor(model.config),
        args.output_dir,
        model_card_fields={
            "title": f"EAT converted to aasp_hf ({source})",
            "description": "EAT's encoder (Chen et al., 2024) in aasp_hf's layout: the standard 16×16 patch "
            "embedding (SPE, no AaPE), fixed 2-D sin-cos positions, CLS, LayerNorm and "
            f"{model.config.num_hidden_layers} post-norm blocks ({model.config.hidden_size} wide). Input: 16 kHz "
            'mono audio -> EAT\'s kaldi log-mel front end (`AaspFeatureExtractor(mode="kaldi")`).',
            "license": "mit",
            "extra_tags": ["eat"],
            "training": f"Weights converted from the EAT checkpoint `{source}` with "
            "`conversion/convert_eat_checkpoint.py` (SPE stem, post-norm blocks, EAT's kaldi front end). "
            "Not trained by this project.",
            "repo_id": args.push_to_hub,
        },
    )
    logger.info("wrote %s", folder)
    if args.push_to_hub:
        push_folder(folder, args.push_to_hub, private=args.private)
    return folder


if __name__ == "__main__":
    run_script(main, "convert_eat_checkpoint.py")
