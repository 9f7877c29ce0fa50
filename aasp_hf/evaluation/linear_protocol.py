# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The linear-evaluation protocol's data and features (EVAR protocol; paper Sec. Training Setup, Table hyperparams 2),
shared by examples/linear_eval.py and benchmarks/quality/run.py.

- `DownstreamArguments`: the data, protocol and baseline arguments that finetune.py and linear_eval.py share;
  `LinearEvalArguments`: the arguments of a linear evaluation (examples/linear_eval.py's command line).
- `evaluation_parts`: the arguments mapped onto `aasp_hf.data.load_downstream`: evaluation parts (one per test fold
  of a K-fold task), each a dict of train / validation / test rows.
- `cached_features`: frozen features [CLS ; time-averaged patch tokens per frequency row] of one split, with EVAR
  clip lengths and cropping (random for train / validation with seed `feature_seed` + split index, the first segment
  for test), cached on disk under `output_dir/features/<part>/`; `check_cache_identity` refuses a cache made with
  another model or data setting.

The heads trained on these features: `aasp_hf.evaluation.linear_heads`.
"""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..data.clips import leave_stop_signals_to_the_training_process
from ..data.collators import AaspFineTuningCollator
from ..data.protocol import load_downstream
from ..data.synthetic import LABELS, synthetic_splits
from ..utils.files import save_array_atomically, write_text_atomically
from .baseline import BASELINE_HELP, DEFAULT_MAX_CLIPS, MAX_CLIPS_HELP
from .features import extract_features

logger = logging.getLogger(__name__)
SPLITS = ("train", "validation", "test")  # the crop seed of a split is feature_seed + its index


@dataclass(kw_only=True)  # keyword-only: a script's own required fields (the model) may follow these defaults
class DownstreamArguments:
    """The downstream data and its protocol, as examples/finetune.py and examples/linear_eval.py both read them
    (`evaluation_parts`, `aasp_hf.data.load_downstream`), and the log-mel baseline beside their results: one field
    and one help text each."""

    dataset: str | None = field(default=None, metadata={"help": "a name for aasp_hf.data.load (as20k, esc50, ...)"})
    data_root: str | None = field(default=None, metadata={"help": "the dataset's folder in its official layout"})
    dataset_kwargs: str | None = field(
        default=None, metadata={"help": 'JSON object of extra loader arguments, e.g. \'{"metadata_csv": "..."}\''}
    )
    synthetic_per_class: int = field(default=0, metadata={"help": "N > 0: demo clips (N train per class), no files"})
    task: str | None = field(default=None, metadata={"help": "EVAR clip-length key; unset: the dataset's"})
    clip_seconds: float | None = field(default=None, metadata={"help": "overrides the task's EVAR clip length"})
    kfold_validation: str = field(
        default="evar",
        metadata={
            "help": "K-fold validation set: 'evar' (a seeded random validation_fraction of the other folds) or "
            "'next' (the fold after the test fold); finetune.py reads 'test' as the old spelling of --select_on test"
        },
    )
    validation_fraction: float = field(
        default=0.1,
        metadata={"help": "held out of train when there is no validation (and of the training folds of a K-fold task)"},
    )
    test_fraction: float = field(
        default=0.2,
        metadata={
            "help": "held out of train (stratified by class, seeded) when there is no test split, "
            "e.g. an audiofolder without train/test sub-folders"
        },
    )
    group_by: str | None = field(
        default=None,
        metadata={
            "help": "each clip's source (speaker, site, device): a column of the data, or a regular expression whose "
            "first group, searched in the file name, is the source (e.g. '^(\\d+)_'); validation (and a K-fold "
            "task's validation draw) and a held-out test then take whole sources, never heard in training"
        },
    )
    baseline: str = field(default="logmel", metadata={"help": BASELINE_HELP})
    baseline_max_clips: int = field(default=DEFAULT_MAX_CLIPS, metadata={"help": MAX_CLIPS_HELP})


@dataclass
class LinearEvalArguments(DownstreamArguments):
    model_name_or_path: str = field(metadata={"help": "a saved AaspModel (or a checkpoint AutoModel can load)"})
    folds: list[int] | None = field(default=None, metadata={"help": "test folds of a K-fold task; unset: all"})
    learning_rates: list[float] = field(default_factory=lambda: [1e-4], metadata={"help": "peak lrs, one pass"})
    min_learning_rate: float = field(default=0.0, metadata={"help": "end of the cosine schedule"})
    weight_decay: float = field(default=0.0)
    adam_beta1: float = field(default=0.9)
    adam_beta2: float = field(default=0.999)
    batch_size: int = field(default=128)
    max_steps: int = field(default=1000, metadata={"help": "the training-step budget"})
    eval_steps: int = field(default=100, metadata={"help": "validate every N steps (and at the last step)"})
    early_stopping_patience: int = field(
        default=0, metadata={"help": "stop after N validations without improvement for any lr (0: use the budget)"}
    )
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    feature_batch_size: int = field(default=32)
    feature_seed: int = field(default=0, metadata={"help": "seeds the train/validation random crops"})
    dataloader_num_workers: int = field(default=0)
    device: str | None = field(default=None, metadata={"help": "default: cuda when available, else cpu"})
    output_dir: str = field(default="linear_eval_output")


def evaluation_parts(args) -> tuple[dict, bool, int, float]:
    """-> ({part name: {split: rows}}, multi_label, num_classes, clip_seconds): the arguments mapped onto
    `data.load_downstream` (the protocol finetune.py uses too). A K-fold dataset gives one part per test fold of
    `--folds` (default all). The validation draws are seeded with `--feature_seed`, which is part of the feature
    cache's identity (finetune.py uses seed 0: the same split when `--feature_seed` is 0, the default)."""
    if args.synthetic_per_class > 0:
        # 1.25-s clips, a bit longer than the 1-s EVAR length: train / validation crops are random, test takes the start
        return (
            {"synthetic": synthetic_splits(args.synthetic_per_class, args.feature_seed)},
            False,
            len(LABELS),
            (args.clip_seconds or 1.0),
        )
    if args.dataset is None:
        raise ValueError("Pass --dataset (with --data_root) or --synthetic_per_class N.")
    downstream = load_downstream(
        args.dataset,
        root=args.data_root,
        loader_kwargs=json.loads(args.dataset_kwargs) if args.dataset_kwargs else None,
        task=args.task,
        clip_seconds=args.clip_seconds,
        folds=args.folds,
        kfold_validation=getattr(args, "kfold_validation", "evar"),
        validation_fraction=args.validation_fraction,
        test_fraction=args.test_fraction,
        seed=args.feature_seed,
        group_by=args.group_by,
    )
    return downstream.parts, downstream.multi_label, len(downstream.label_names), downstream.clip_seconds


def feature_files(output_dir, part, split) -> tuple[Path, Path]:
    """(features, labels) of one split in the cache: `features/<part>/features_<split>.npy`, `labels_<split>.npy`."""
    folder = Path(output_dir) / "features" / part
    return folder / f"features_{split}.npy", folder / f"labels_{split}.npy"


def is_cached(output_dir, part, split) -> bool:
    return all(path.is_file() for path in feature_files(output_dir, part, split))


def cached_features(args, model, feature_extractor, part, rows, split, clip_seconds, num_labels, device):
    """Features and labels of one split, from `features/<part>/` when cached there, else extracted and saved."""
    feature_file, label_file = feature_files(args.output_dir, part, split)
    folder = feature_file.parent
    if is_cached(args.output_dir, part, split):
        return np.load(feature_file), np.load(label_file)
    collator = AaspFineTuningCollator(
        feature_extractor,
        clip_seconds=clip_seconds,
        split=split,
        num_labels=num_labels,
        seed=args.feature_seed + SPLITS.index(split),
    )
    loader = torch.utils.data.DataLoader(
        rows,
        batch_size=args.feature_batch_size,
        shuffle=False,
        collate_fn=collator,
        num_workers=args.dataloader_num_workers,
        worker_init_fn=leave_stop_signals_to_the_training_process,
    )
    with tqdm(total=len(rows), desc=f"features {part}/{split}", unit="clip") as progress:
        features, labels = extract_features(model, loader, device=device, progress=progress)
    if collator.num_skipped:
        logger.warning(
            f"{part}/{split}: {collator.num_skipped} clip(s) failed to decode and were skipped (each file "
            f"is named in a line of its own above)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for path, array in ((feature_file, features), (label_file, labels)):  # each whole or absent: no partial cache
        save_array_atomically(path, array)
    return features, labels


def check_cache_identity(args, clip_seconds):
    """The feature cache belongs to one model and data setting; reusing it for another raises a ValueError."""
    identity = {
        "model_name_or_path": str(args.model_name_or_path),
        "dataset": args.dataset,
        "data_root": args.data_root,
        "dataset_kwargs": args.dataset_kwargs,
        "synthetic_per_class": args.synthetic_per_class,
        "clip_seconds": clip_seconds,
        "feature_seed": args.feature_seed,
        "validation_fraction": args.validation_fraction,
        "test_fraction": args.test_fraction,
        "kfold_validation": args.kfold_validation,
        **({"group_by": args.group_by} if args.group_by is not None else {}),  # (absent: a cache from before it)
    }
    path = Path(args.output_dir) / "features" / "identity.json"
    if path.is_file():
        cached = json.loads(path.read_text())
        if cached != identity:
            changed = sorted(k for k in identity if cached.get(k) != identity[k])
            raise ValueError(
                f"{path.parent} holds features of another setting (differs in {changed}); "
                f"use a new --output_dir or delete that folder."
            )
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps(identity, indent=2))
