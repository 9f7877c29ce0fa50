"""Linear evaluation of a frozen AaSP encoder (EVAR protocol; paper Sec. Training Setup, Table hyperparams 2).

    python examples/linear_eval.py --config examples/configs/linear_eval/esc50.json \
        --model_name_or_path runs/pt/encoder --data_root /data/ESC-50-master --output_dir runs/lin_esc50
    python examples/linear_eval.py --model_name_or_path runs/pt/encoder --synthetic_per_class 20 --max_steps 200

Arguments come from `aasp_hf.evaluation.linear_protocol.LinearEvalArguments`: on the command line, from one JSON
file (`linear_eval.py preset.json`), or from `--config preset.json` followed by command-line overrides.

Steps: 1. data (a dataset of `aasp_hf.data.load` or synthetic demo clips) split into evaluation parts (one per test
fold for ESC-50/US8K), read first so that a data mistake is said before the model loads, 2. encoder (AutoModel,
frozen, eval mode) and feature extractor, 3. frozen features
[CLS ; frequency-concatenated time-averaged patch tokens] (D + F̃·D, 6912 for ViT-B) of every split, cached
on disk (`features/<part>/features_<split>.npy`, `labels_<split>.npy`), with EVAR clip lengths and cropping
(a random crop for train/validation, the first segment for test; no augmentation), 4. standardisation with the
TRAIN statistics, 5. for each part and seed (`aasp_hf.evaluation.linear_heads`), one Linear layer per learning rate,
all trained in one pass over the cached features (Adam, cosine schedule to `min_learning_rate`, CE or BCE for multi-label),
evaluated on validation every `eval_steps`; each learning rate's test score is taken at its best validation
step ("the best result within the budget"), and the learning rate with the best validation score is chosen,
6. results: mean over folds per seed, then mean ± std (ddof=1) over seeds -> `all_results.json`, `results.md`,
7. beside them the log-mel baseline (`aasp_hf.evaluation.baseline`: log-mel statistics + logistic regression on the
same parts and clips; `--baseline none` skips it, `--baseline_max_clips` caps the clips per split), with the verdict
line: the model is below, equal to or above it.

The folder: one evaluation per `--output_dir` (its `run.lock`, as the training scripts hold theirs); every file
written there (features, each (part, seed) result, the results) is written whole or not at all (`aasp_hf.utils.files`).
Rerun: the same command again reuses the cached features and each finished (part, seed) result
(`runs/<part>_seed<k>.json`) instead of retraining, and says what it reused; a cache made with another model or data
setting raises an error. SIGTERM, SIGUSR1 and SIGINT end a run at once with one line and exit status 75, as a stopped
training run: nothing is lost that the rerun would need (docs/reliability.md, "Linear evaluation").

Validation (`aasp_hf.data.downstream_parts`, the rule finetune.py uses too; stated in `all_results.json` and
`results.md`): for K-fold tasks (ESC-50, US8K) EVAR's rule, `--kfold_validation evar`: train on all the other
folds less a random `validation_fraction` (10 %) of them, which is the validation set, seeded with `feature_seed`
(redrawn with the next seeds until every class is present); `--kfold_validation next` validates on the fold after
the test fold instead. Datasets without a validation split (AudioSet) hold out `validation_fraction` of train,
seeded with `feature_seed`. The split is part of the feature cache's identity.
"""

import json
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import aasp_hf  # noqa: F401  (registers the Auto* classes)
from aasp_hf.utils.entry_points import run_interruptible
from aasp_hf.evaluation import baseline as logmel_baseline
from aasp_hf.evaluation import (
    load_frozen_encoder,
    mean_std,
    standardization_stats,
    standardize,
    write_linear_eval_markdown,
)
from aasp_hf.evaluation.linear_heads import final_test_score, train_linear_heads
from aasp_hf.evaluation.linear_protocol import (
    SPLITS,
    LinearEvalArguments,
    cached_features,
    check_cache_identity,
    evaluation_parts,
    is_cached,
)
from aasp_hf.utils.files import write_text_atomically
from aasp_hf.training.arguments import parse_arguments
from aasp_hf.training.run_lock import RunHold, check_launch
from aasp_hf.training.run_log import quiet_libraries


# ----------------------------------------------------------------------------------------------- arguments
def parse_args(argv=None) -> LinearEvalArguments:
    """CLI, or one JSON file, or `--config file.json` whose values the remaining CLI arguments override."""
    (args,) = parse_arguments(LinearEvalArguments, argv)
    from aasp_hf.data import KFOLD_VALIDATION

    if args.kfold_validation not in KFOLD_VALIDATION:
        raise ValueError(f"kfold_validation={args.kfold_validation!r}: use one of {KFOLD_VALIDATION}")
    logmel_baseline.check_choice(args.baseline, args.baseline_max_clips)
    return args


# ----------------------------------------------------------------------------------------------- main
def main(argv=None) -> dict:
    args = parse_args(argv)
    check_launch(1, "linear_eval.py", one_process=True)  # one process: a launcher's several would each do it all
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    quiet_libraries()  # other libraries' start-up and bookkeeping lines (aasp_hf/training/run_log.py)
    # one evaluation per folder, as the training scripts: a second one into a held folder, a folder that cannot be
    # written or a path that is a file is refused here in one line, before the model is loaded
    with RunHold(args.output_dir).acquire():
        return evaluate(args)


def evaluate(args: LinearEvalArguments) -> dict:
    """Steps 1-7 of the module docstring into --output_dir (held by `main`)."""
    output_dir = Path(args.output_dir)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    print("1. data")  # first: a data mistake is one line before the model is loaded
    parts, multi_label, num_classes, clip_seconds = evaluation_parts(args)
    task = "synthetic" if args.synthetic_per_class else (args.task or args.dataset)
    print(
        f"   {task}: {num_classes} classes, {'multi' if multi_label else 'single'}-label, clips {clip_seconds} s, "
        f"parts {list(parts)}"
    )
    if args.group_by is not None:
        from aasp_hf.data.protocol import describe_sources

        for part, splits in parts.items():
            print(f"   {part}: {describe_sources(splits, args.group_by)}")

    print(f"2. frozen encoder from {args.model_name_or_path} on {device}")
    model, feature_extractor = load_frozen_encoder(args.model_name_or_path, device)
    check_cache_identity(args, clip_seconds)  # after the model loaded: a wrong model path leaves no cache behind

    print("3. frozen features (cached under features/)")
    cached = [(part, split) for part in parts for split in SPLITS if is_cached(output_dir, part, split)]
    features = {}
    for part, splits in parts.items():
        features[part] = {
            split: cached_features(
                args,
                model,
                feature_extractor,
                part,
                splits[split],
                split,
                clip_seconds,
                num_classes if multi_label else None,
                device,
            )
            for split in SPLITS
        }
    dim = next(iter(features.values()))["train"][0].shape[1]
    print(
        f"   feature dimension {dim} = D + F̃·D = {model.config.hidden_size} + "
        f"{model.config.num_frequency_patches}·{model.config.hidden_size}"
    )

    print(f"4-5. standardised features, {len(args.learning_rates)} lr(s) per pass, seeds {args.seeds}")
    from aasp_hf.metrics import load_metric

    metric = load_metric("mean_average_precision" if multi_label else "accuracy")
    runs_dir = output_dir / "runs"
    runs_dir.mkdir(exist_ok=True)
    runs, reused = [], 0
    jobs = [(part, seed) for part in parts for seed in args.seeds]
    for part, seed in tqdm(jobs, desc="linear heads", unit="run"):
        run_file = runs_dir / f"{part}_seed{seed}.json"
        settings = {
            k: getattr(args, k)
            for k in (
                "learning_rates",
                "min_learning_rate",
                "weight_decay",
                "adam_beta1",
                "adam_beta2",
                "batch_size",
                "max_steps",
                "eval_steps",
                "early_stopping_patience",
            )
        }
        if run_file.is_file():
            stored = json.loads(run_file.read_text())
            if stored["settings"] == settings:
                runs.append(stored)
                reused += 1
                continue
        (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = (features[part][s] for s in SPLITS)
        mean, std = standardization_stats(train_x)
        result = train_linear_heads(
            (standardize(train_x, mean, std), train_y),
            (standardize(valid_x, mean, std), valid_y),
            (standardize(test_x, mean, std), test_y),
            args.learning_rates,
            multi_label=multi_label,
            num_classes=num_classes,
            max_steps=args.max_steps,
            batch_size=args.batch_size,
            eval_steps=args.eval_steps,
            seed=seed,
            min_learning_rate=args.min_learning_rate,
            weight_decay=args.weight_decay,
            betas=(args.adam_beta1, args.adam_beta2),
            early_stopping_patience=args.early_stopping_patience,
            device=device,
        )
        result["test_score"] = final_test_score(metric, result["test_logits"], test_y, multi_label)
        for key in ("test_logits", "weights", "biases"):
            del result[key]
        record = {"part": part, "seed": seed, "settings": settings, **result}
        write_text_atomically(run_file, json.dumps(record, indent=2))
        runs.append(record)

    if cached or reused:  # an earlier run into this folder (stopped or finished) spared work: say which
        everything = len(cached) == len(parts) * len(SPLITS) and reused == len(jobs)
        print(
            f"   reused from {output_dir}: the cached features of {len(cached)} of {len(parts) * len(SPLITS)} "
            f"splits (features/) and the heads of {reused} of {len(jobs)} (part, seed) runs (runs/)"
            + ("; nothing was extracted or trained again" if everything else "")
        )

    print("6. results")
    from aasp_hf.data import describe_protocol, is_kfold

    kfold = is_kfold(parts)
    per_seed = {seed: float(np.mean([r["test_score"] for r in runs if r["seed"] == seed])) for seed in args.seeds}
    test_mean, test_std = mean_std(list(per_seed.values()))
    results = {
        "task": task,
        "model_name_or_path": str(args.model_name_or_path),
        "metric": "mAP" if multi_label else "accuracy",
        "num_classes": num_classes,
        "feature_dim": int(dim),
        "clip_seconds": clip_seconds,
        "parts": list(parts),
        "seeds": list(args.seeds),
        "learning_rates": list(args.learning_rates),
        "max_steps": args.max_steps,
        "kfold_validation": args.kfold_validation if kfold else None,
        "validation_rule": describe_protocol(
            "validation", kfold, args.kfold_validation, args.validation_fraction, args.feature_seed, args.group_by
        ),
        "test_per_seed": {str(k): v for k, v in per_seed.items()},
        "test_mean": test_mean,
        "test_std": test_std,
        "runs": runs,
        "arguments": asdict(args),
    }

    def write(results):
        write_text_atomically(output_dir / "all_results.json", json.dumps(results, indent=2))
        write_linear_eval_markdown(output_dir / "results.md", results)

    write(results)
    print(f"   {task} {results['metric']}: {100 * test_mean:.2f} ± {100 * test_std:.2f} -> {output_dir}/results.md")
    # the log-mel baseline on the same parts and clips, its crops seeded as the features' (feature_seed + split index)
    return logmel_baseline.with_baseline(
        results,
        write,
        args.baseline,
        parts,
        clip_seconds,
        multi_label,
        num_classes,
        args.baseline_max_clips,
        crop_seed=args.feature_seed,
    )


if __name__ == "__main__":
    # SIGTERM/SIGUSR1/SIGINT end it at once with exit status 75: everything it wrote is whole and reused by the rerun
    run_interruptible(
        main,
        "linear_eval.py",
        kept="the features and heads it finished are kept in --output_dir "
        "(features/, runs/), and the same command reuses them",
        then="run the same command again: it reuses the features and heads already in --output_dir",
    )
