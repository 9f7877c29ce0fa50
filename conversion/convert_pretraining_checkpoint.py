"""Turn an AaSP pre-training state into a Hub-ready encoder folder (student or EMA teacher).

Sources:
- a `save_pretrained` folder of `AaspForPreTraining` (config.json + model.safetensors);
- an accelerate `checkpoint-*` folder from `examples/pretrain.py` (model.safetensors, no config: the config is looked
  up in the folder, its parent, or given with --config);
- a raw `.safetensors` file (with --config).

Keys: `aasp.*` (student), `teacher.*` (EMA teacher), `predictor.*`, `contrastive_head.*` (pre-training only, dropped),
possibly behind `module.` (DDP) or `_orig_mod.` (torch.compile). Any other key is an error.

    python conversion/convert_pretraining_checkpoint.py runs/pt/checkpoint-600000 out/aasp-base --which teacher \
        --push-to-hub me/aasp-base
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import UsageError, parse_command_line

logger = logging.getLogger(__name__)

ENCODER_PREFIXES = {"student": "aasp.", "teacher": "teacher."}
DROPPED_PREFIXES = ("predictor.", "contrastive_head.")  # pre-training-only modules
WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DDP / torch.compile


def _strip_wrappers(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix) :], True
    return key


def locate(source: str | Path, config: str | Path | None = None) -> tuple[Path, AaspConfig, Path | None]:
    """(weights file, config, folder holding a preprocessor_config.json or None) for a folder or a file."""
    source = Path(source)
    weights = source / "model.safetensors" if source.is_dir() else source
    if not weights.exists():
        raise UsageError(f"no model.safetensors in {source}" if source.exists() else f"source {source} does not exist")
    if config is None:
        candidates = [weights.parent, weights.parent.parent, weights.parent.parent / "encoder"]
        config = next((c for c in candidates if (c / "config.json").exists()), None)
        if config is None:
            raise UsageError(
                f"no config.json next to {weights} or in its parent folder: pass --config (a config.json or a folder)"
            )
    if not Path(config).exists():
        raise UsageError(f"--config {config} does not exist")
    config_path = Path(config)
    if config_path.is_dir():
        config_obj = AaspConfig.from_pretrained(config_path)
    else:
        config_obj = AaspConfig.from_json_file(config_path)
    folder = config_path if config_path.is_dir() else config_path.parent
    preprocessor = next((f for f in (weights.parent, folder) if (f / "preprocessor_config.json").exists()), None)
    return weights, config_obj, preprocessor


def convert(state_dict: dict, config: AaspConfig, which: str = "student") -> AaspModel:
    """Pre-training state dict -> `AaspModel` holding the chosen encoder (eval mode)."""
    if which not in ENCODER_PREFIXES:
        raise ValueError(f"which={which!r}: use 'student' or 'teacher'")
    keep = ENCODER_PREFIXES[which]
    other = ENCODER_PREFIXES["teacher" if which == "student" else "student"]
    encoder, unknown = {}, []
    for key, value in state_dict.items():
        key = _strip_wrappers(key)
        if key.startswith(keep):
            encoder[key[len(keep) :]] = value
        elif not key.startswith(DROPPED_PREFIXES + (other,)):
            unknown.append(key)
    if unknown:
        raise UsageError(f"Keys outside aasp./teacher./predictor./contrastive_head.: {sorted(unknown)}")
    if not encoder:
        raise UsageError(f"No `{keep}*` keys: is this an AaspForPreTraining state dict?")

    config = AaspConfig.from_dict({k: v for k, v in config.to_dict().items() if k not in ("auto_map", "architectures")})
    model = AaspModel(config)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(encoder))
    extra = sorted(set(encoder) - set(expected))
    if missing or extra:
        raise UsageError(f"{which} encoder does not match the config: missing {missing}, unexpected {extra}")
    for key, tensor in encoder.items():
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise UsageError(
                f"Shape mismatch for `{keep}{key}`: checkpoint {tuple(tensor.shape)}, "
                f"model {tuple(expected[key].shape)}"
            )
    model.load_state_dict(encoder, strict=True)
    return model.eval()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="AaspForPreTraining folder, accelerate checkpoint-* folder or .safetensors")
    parser.add_argument("output_dir")
    parser.add_argument(
        "--which",
        choices=tuple(ENCODER_PREFIXES),
        default="student",
        help="which encoder to export (default: the student, as examples/pretrain.py exports)",
    )
    parser.add_argument("--config", default=None, help="config.json (or its folder) when the source has none")
    parser.add_argument("--feature-extractor", default=None, help="folder with preprocessor_config.json")
    parser.add_argument("--all-results", default=None, help="all_results.json for the model card's evaluation table")
    parser.add_argument("--push-to-hub", default=None, metavar="REPO_ID")
    parser.add_argument("--private", action="store_true")
    return parse_command_line(parser, argv)


def main(argv=None) -> Path:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    from safetensors.torch import load_file

    from aasp_hf.utils import hub

    weights, config, preprocessor = locate(args.source, args.config)
    model = convert(load_file(str(weights)), config, args.which)
    fe_source = args.feature_extractor or preprocessor
    if fe_source:
        feature_extractor = AaspFeatureExtractor.from_pretrained(fe_source)
    else:
        feature_extractor = AaspFeatureExtractor(feature_size=config.num_mel_bins)
    folder = hub.write_hub_folder(
        model,
        feature_extractor,
        args.output_dir,
        model_card_fields={
            "title": f"AaSP encoder ({args.which}) from {weights.parent.name}",
            "repo_id": args.push_to_hub,
            "training": f"Self-supervised AaSP pre-training (`examples/pretrain.py`); this folder holds the "
            f"{'EMA teacher' if args.which == 'teacher' else 'student'} encoder of `{weights}`.",
        },
        all_results=args.all_results,
    )
    logger.info("wrote %s (%s encoder, %d parameters)", folder, args.which, sum(p.numel() for p in model.parameters()))
    if args.push_to_hub:
        hub.push_folder(folder, args.push_to_hub, private=args.private)
    return folder


if __name__ == "__main__":
    run_script(main, "convert_pretraining_checkpoint.py")
