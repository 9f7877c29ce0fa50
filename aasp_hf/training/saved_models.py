"""The models a run leaves and their model cards: the pre-trained encoders that `examples/pretrain.py` exports
(`export_encoders`, described by `pretraining_summary`) and the fine-tuned classifier that `examples/finetune.py`
saves (`save_best_model`, `install_best_model`, `write_classifier_card`). Every folder is written whole or not at
all (a temporary folder, then a rename)."""

import copy
import os
import shutil
from pathlib import Path

from ..data.collators import trained_max_frames
from ..utils.hub import write_model_card
from .checkpointing import latest_checkpoint, refused_writes, replace_directory


def export_encoders(model, feature_extractor, output_dir: Path, export_teacher: bool, training=None):
    """`AutoModel.from_pretrained(output_dir / "encoder")` then loads the student encoder (after `import aasp_hf`,
    or with `trust_remote_code=True`); each exported folder gets a model card (README.md) generated from the model
    and `training` (what `pretraining_summary` says about the run)."""
    encoders = {"encoder": (model.aasp, "student")}
    if export_teacher:
        encoders["teacher_encoder"] = (model.teacher, "EMA teacher")
    for folder, (encoder, which) in encoders.items():
        with replace_directory(output_dir / folder) as written:  # whole or not at all: a new folder, then os.replace
            encoder.save_pretrained(written)
            feature_extractor.save_pretrained(written)
            write_model_card(
                written,
                encoder,
                feature_extractor,
                {
                    "title": f"AaSP encoder ({which}, {encoder.config.num_hidden_layers} layers, hidden "
                    f"{encoder.config.hidden_size})",
                    "path": str(output_dir / folder),
                    "training": {
                        "encoder": f"the {which} of self-supervised AaSP pre-training (examples/pretrain.py)",
                        **(training or {}),
                    },
                    "evaluation": "No downstream evaluation was run on this export (see examples/finetune.py and "
                    "examples/linear_eval.py).",
                },
            )


def pretraining_summary(data_args, args, results: dict) -> dict:
    """What the model card says about a pre-training run: data, steps, batch, optimiser, final losses."""
    if data_args.synthetic_clips > 0:
        data = (
            f"{data_args.synthetic_clips} synthetic clips of {data_args.synthetic_seconds:g} s "
            f"(examples/demo.py's five classes; labels unused)"
        )
    elif data_args.log_mel_cache:
        data = f"the log-mel cache {data_args.log_mel_cache}"
    elif data_args.dataset:
        data = f"`{data_args.dataset}` ({data_args.dataset_split} split) from {data_args.data_root}"
    elif data_args.train_dir:
        data = f"the audio files of {data_args.train_dir}"
    elif data_args.train_manifest:
        data = f"the clips of the fairseq manifest {data_args.train_manifest}"
    else:
        data = f"the `{data_args.dataset_name}` dataset ({data_args.dataset_split} split)"
    summary = {
        "data": data
        + (f", {results['num_clips']} clips" if results.get("num_clips") else "")
        + f", random {data_args.crop_seconds:g}-s crops",
        "steps": f"{results['step']} of {args.max_steps} ({args.warmup_steps} warm-up)",
        "batch": f"{args.per_device_train_batch_size} × {results['num_processes']} process(es) × "
        f"{args.gradient_accumulation_steps} accumulation",
        "optimiser": f"AdamW, peak lr {args.learning_rate:g}, weight decay {args.weight_decay:g}, teacher momentum "
        f"{args.teacher_momentum_base:g} → {args.teacher_momentum_final:g}",
    }
    if "loss" in results:
        summary["final pre-training loss"] = (
            f"{results['loss']:.4f} (masked prediction "
            f"{results.get('masked_prediction_loss', float('nan')):.4f}, clip "
            f"{results.get('clip_loss', float('nan')):.4f}, contrastive "
            f"{results.get('contrastive_loss', float('nan')):.4f})"
        )
    return summary


def save_best_model(model, feature_extractor, directory: Path, clip_seconds: float | None = None):
    """`save_pretrained` into a temporary folder, then an atomic rename (a crash never leaves half a model); a full
    disk is one line that names the space and the intact checkpoint, and the temporary folder is removed.

    With `clip_seconds` (the crop the model was trained on), the saved feature extractor keeps that length as
    `max_frames` (`trained_max_frames`): the pipeline and `python -m aasp_hf.tag` cut windows of it, and a plain
    call of the extractor on a longer clip reads its first `max_frames` frames and says so in one warning
    (`truncation=False` reads it all). `feature_extractor` itself is left as it is: training featurises whole
    clips."""
    if clip_seconds is not None:
        feature_extractor = copy.copy(feature_extractor)
        feature_extractor.max_frames = trained_max_frames(feature_extractor, clip_seconds)
    needed = sum(p.numel() * p.element_size() for p in model.state_dict().values())

    def intact():
        checkpoint = latest_checkpoint(directory.parent)
        if checkpoint is None:
            return (
                "there is no checkpoint yet, so --resume starts the run again from step 0 (--save_steps keeps "
                "the progress of a long run)"
            )
        return f"the last complete checkpoint is {checkpoint}"

    with refused_writes(directory, "the best model", needed, intact), replace_directory(directory) as tmp:
        model.save_pretrained(tmp)
        feature_extractor.save_pretrained(tmp)


def voice_and_channel(args) -> str:
    """The per-clip changes of voice and channel and the frequency masks a fine-tuning run trained with, for its
    model card's augmentation line ("" when all are off, so the line reads as it did before they existed)."""
    parts = []
    if getattr(args, "freq_mask_fraction", None) is not None and args.spec_augment:
        parts.append(f"frequency masks up to {args.freq_mask_fraction:g} of the mel bins")
    if getattr(args, "speed_perturbation", None):
        parts.append("speed ×{:g}–{:g}".format(*args.speed_perturbation))
    if getattr(args, "vtlp", None):
        parts.append("VTLP α {:g}–{:g}".format(*args.vtlp))
    if getattr(args, "random_eq_db", 0):
        parts.append(f"random EQ ±{args.random_eq_db:g} dB")
    if getattr(args, "per_clip_normalization", False):
        parts.append("each clip normalised per mel bin (the saved feature extractor does it too)")
    return "".join(f", {part}" for part in parts)


def write_classifier_card(output_dir: Path, model, feature_extractor, args, splits, results: dict, clip_seconds: float):
    """The saved classifier's model card, generated from the model, the data and the scores this run measured."""
    if args.synthetic_per_class > 0:
        data = f"synthetic clips of examples/demo.py's classes ({args.synthetic_per_class} train per class)"
    else:
        data = f"`{args.dataset}` from {args.data_root}"
    sizes = ", ".join(f"{split} {len(splits[split])}" for split in ("train", "validation", "test") if split in splits)
    metric = results["metric"]
    training = {
        "base model": f"{args.model_name_or_path} (pre-trained AaSP encoder; the head is new)",
        "data": f"{data}; clips: {sizes}; {clip_seconds:g}-s crops, shorter clips padded with "
        f"{'masked frames' if args.clip_padding == 'masked' else 'zeros'}",
        "steps": f"{results['step']} ({args.warmup_steps} warm-up), batch {args.per_device_train_batch_size} × "
        f"{results['num_processes']} process(es) × {results['gradient_accumulation_steps']} accumulation "
        f"= {results['total_train_batch_size']}",
        "optimiser": f"AdamW, peak lr {args.learning_rate:g}, layer decay {args.layer_decay:g}, weight decay "
        f"{args.weight_decay:g}",
        "augmentation": f"mixup α {args.mixup_alpha:g}, SpecAugment {'on' if args.spec_augment else 'off'}"
        + voice_and_channel(args),
        "saved weights": f"{'EMA (decay ' + format(args.ema_decay, 'g') + ')' if args.ema_decay > 0 else 'trained'} "
        f"weights at step {results['best_step']} ({results['selection_rule']})",
    }
    write_model_card(
        output_dir,
        model,
        feature_extractor,
        {
            "title": f"AaSP {'sound event detector' if 'sound_events' in results else 'audio classifier'} "
            f"({model.config.num_labels} {'labels' if 'sound_events' in results else 'classes'})",
            "path": str(output_dir),
            "training": training,
            "evaluation_protocol": f"fine-tuning, {results['selection_rule']}: step {results['best_step']}",
        },
        {
            **({f"eval_{metric}": results["best_valid_score"]} if args.select_on == "validation" else {}),
            f"test_{metric}": results["test_score"],
            **{  # sound events: every detection score of the test recordings, with the saved thresholds
                f"test_{name}": value
                for name, value in results.get("sound_events", {}).get("test", {}).items()
                if name in ("event_f1_micro", "segment_f1", "segment_f1_micro", "psds")
            },
        },
    )


def install_best_model(output_dir: Path):
    """The files of `output_dir / "best_model"` copied beside it into `output_dir` (where the pipeline and the Hub
    look), whole or not at all: copied into a temporary folder (where a full disk stops the copy and the folder is
    removed), then renamed into place, which needs no space."""
    export = output_dir / "export.tmp"
    shutil.rmtree(export, ignore_errors=True)
    try:
        export.mkdir()
        for item in sorted((output_dir / "best_model").iterdir()):  # copy2 raises the OSError itself
            shutil.copy2(item, export / item.name)
        for item in sorted(export.iterdir()):
            os.replace(item, output_dir / item.name)
    finally:
        shutil.rmtree(export, ignore_errors=True)
