"""Shift consistency of a frozen AaSP encoder (paper Sec. Shift-Consistency Analysis, Table shift).

    python examples/shift_consistency.py --model_name_or_path runs/pt/encoder --dataset as20k \
        --data_root /data/audioset --split test --output_dir runs/shift_aasp
    python examples/shift_consistency.py --model_name_or_path runs/pt/encoder --synthetic_clips 32

For every clip x of a split and every shift δ (default 10, 20, 40, 80, 160 ms), x_δ = np.roll(x, δ) is the
circularly shifted waveform, and the drift is 1 − cos(z(x), z(x_δ)) of the frozen CLS token z (in [0, 2]; smaller
= more consistent). A 160-ms shift is one whole time patch (P_time = 16 frames of 10 ms).

Steps: 1. encoder (AutoModel, frozen, eval mode) and feature extractor, 2. clips (a split of an
`aasp_hf.data.load` dataset, each cut to its task's EVAR length from the start, or synthetic demo clips; a dataset
without a test split, such as an audiofolder of class folders, is measured on the clips that finetune.py and
linear_eval.py hold out as test, by the same code: `aasp_hf.data.reported_test_split`),
3. drifts per clip and shift (`drifts.npy`, saved after every batch; a rerun resumes after the last saved clip),
4. mean ± std over clips -> `all_results.json`, `results.md` and `shift_consistency.png`.
"""

import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import aasp_hf  # noqa: F401  (registers the Auto* classes)
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import UsageError
from aasp_hf.evaluation import (
    circular_shift,
    cls_embeddings,
    load_frozen_encoder,
    representation_drift,
)
from aasp_hf.training.arguments import parse_arguments

logger = logging.getLogger(__name__)
SAMPLE_RATE = 16000
SPLIT_SEED = 0  # the held-out test draw, as in finetune.py (and linear_eval.py's default --feature_seed)


@dataclass
class ShiftConsistencyArguments:
    model_name_or_path: str = field(metadata={"help": "a saved AaspModel (or a checkpoint AutoModel can load)"})
    dataset: str | None = field(default=None, metadata={"help": "a name for aasp_hf.data.load (the paper: as20k)"})
    data_root: str | None = field(default=None)
    dataset_kwargs: str | None = field(default=None, metadata={"help": "JSON object of extra loader arguments"})
    split: str = field(
        default="test",
        metadata={
            "help": "the split to measure; 'test' of a dataset without one is the test set fine-tuning holds out: the "
            "first fold of a K-fold task, or --test_fraction of train (an audiofolder without train/test folders)"
        },
    )
    test_fraction: float = field(
        default=0.2,
        metadata={
            "help": "held out of train (stratified by class, seed 0) when there is no test split, "
            "the clips finetune.py and linear_eval.py hold out"
        },
    )
    synthetic_clips: int = field(default=0, metadata={"help": "N > 0: N synthetic demo clips, no files"})
    max_clips: int | None = field(default=None, metadata={"help": "only the first N clips of the split"})
    clip_seconds: float | None = field(
        default=None,
        metadata={
            "help": "cut each clip to this length from the start (default: the task's EVAR length, "
            "or the mean length of the training clips when it has none)"
        },
    )
    shifts_ms: list[float] = field(default_factory=lambda: [10.0, 20.0, 40.0, 80.0, 160.0])
    batch_size: int = field(default=16)
    seed: int = field(default=0, metadata={"help": "seeds the synthetic clips"})
    device: str | None = field(default=None, metadata={"help": "default: cuda when available, else cpu"})
    output_dir: str = field(default="runs/shift_consistency")


def parse_args(argv=None) -> ShiftConsistencyArguments:
    """CLI, or one JSON file, or `--config file.json` whose values the remaining CLI arguments override."""
    (args,) = parse_arguments(ShiftConsistencyArguments, argv)
    return args


# ----------------------------------------------------------------------------------------------- 2. clips
class Clips:
    """Indexable waveforms: synthetic demo clips or a split of a loaded dataset (decoded on access; a clip
    that fails to decode comes back as None and is skipped with NaN drifts)."""

    def __init__(self, args):
        self.clip_samples = None
        if args.synthetic_clips > 0:
            from aasp_hf.data.synthetic import unlabelled_clips

            self.source = unlabelled_clips(args.synthetic_clips, args.seed, 1.0)
            self.decoder = None
        elif args.dataset is not None:
            from aasp_hf import data

            kwargs = json.loads(args.dataset_kwargs) if args.dataset_kwargs else {}
            loaded = data.for_safe_decoding(data.load(args.dataset, root=args.data_root, **kwargs))
            if args.split in loaded:
                self.source = loaded[args.split]
            elif args.split == "test":  # held out as fine-tuning and linear evaluation hold it out (the same code)
                self.source = data.reported_test_split(loaded, test_fraction=args.test_fraction, seed=SPLIT_SEED)
                logger.warning(
                    f"{args.dataset} has no test split: measuring the {len(self.source)} clips that "
                    f"finetune.py and linear_eval.py hold out as test"
                )
            else:
                raise UsageError(f"--split {args.split!r} is not a split of {args.dataset}: {sorted(loaded)}")
            self.decoder = data.SafeAudioDecoder()
            seconds = data.downstream_clip_seconds(data.evar_task(args.dataset), args.clip_seconds, loaded)
            self.clip_samples = int(round(seconds * SAMPLE_RATE))
        else:
            raise UsageError("Pass --dataset (with --data_root) or --synthetic_clips N.")
        if args.clip_seconds and self.clip_samples is None:
            self.clip_samples = int(round(args.clip_seconds * SAMPLE_RATE))
        self.length = len(self.source) if args.max_clips is None else min(args.max_clips, len(self.source))

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if self.decoder is None:
            waveform = self.source[index]
        else:
            waveform = self.decoder(self.source[index]["audio"])
            if waveform is None:
                return None
        if self.clip_samples is not None:
            from aasp_hf.data import crop_or_pad

            waveform = crop_or_pad(waveform, self.clip_samples, random_crop=False)  # the first segment
        return waveform


# ----------------------------------------------------------------------------------------------- 4. outputs
def plot(path: Path, shifts_ms, means, stds, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.errorbar(shifts_ms, means, yerr=stds, marker="o", capsize=3)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xticks(shifts_ms)
    ax.set_xticklabels([f"{s:g}" for s in shifts_ms])
    ax.set_xlabel("circular shift δ (ms)")
    ax.set_ylabel("drift 1 − cos(z(x), z(x_δ))")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    print(f"1. frozen encoder from {args.model_name_or_path} on {device}")
    model, feature_extractor = load_frozen_encoder(args.model_name_or_path, device)

    clips = Clips(args)
    print(
        f"2. {len(clips)} clips ({'synthetic' if args.synthetic_clips else f'{args.dataset}/{args.split}'}), "
        f"shifts {args.shifts_ms} ms"
    )

    print("3. drifts (resumable: drifts.npy)")
    identity = {k: v for k, v in asdict(args).items() if k not in ("batch_size", "device", "output_dir")}
    drift_file, state_file = output_dir / "drifts.npy", output_dir / "drifts_state.json"
    drifts = np.full((len(clips), len(args.shifts_ms)), np.nan)  # (clips, shifts)
    done = 0
    if drift_file.is_file() and state_file.is_file():
        state = json.loads(state_file.read_text())
        if state["identity"] == identity:
            drifts, done = np.load(drift_file), state["done"]
        else:
            logger.warning("drifts.npy belongs to another setting; starting over.")
    skipped = 0
    with tqdm(total=len(clips), initial=done, desc="shift drift", unit="clip") as progress:
        while done < len(clips):
            stop = min(done + args.batch_size, len(clips))
            indices = [i for i in range(done, stop)]
            waveforms = [clips[i] for i in indices]
            kept = [(i, w) for i, w in zip(indices, waveforms) if w is not None]
            skipped += len(indices) - len(kept)
            if kept:
                rows = [i for i, _ in kept]
                z = cls_embeddings(model, feature_extractor, [w for _, w in kept], SAMPLE_RATE, device)  # (B, D)
                for column, shift in enumerate(args.shifts_ms):
                    shifted = [circular_shift(w, shift, SAMPLE_RATE) for _, w in kept]
                    z_shifted = cls_embeddings(model, feature_extractor, shifted, SAMPLE_RATE, device)  # (B, D)
                    drifts[rows, column] = representation_drift(z, z_shifted).numpy()
            done = stop
            np.save(output_dir / "drifts.tmp.npy", drifts)
            os.replace(output_dir / "drifts.tmp.npy", drift_file)
            state_file.write_text(json.dumps({"identity": identity, "done": done}))
            progress.update(len(indices))

    print("4. results")
    valid = ~np.isnan(drifts).any(axis=1)
    means = drifts[valid].mean(axis=0)
    stds = drifts[valid].std(axis=0)
    results = {
        "model_name_or_path": str(args.model_name_or_path),
        "clips": int(valid.sum()),
        "skipped_clips": int((~valid).sum()),
        "shifts_ms": list(args.shifts_ms),
        "drift_mean": means.tolist(),
        "drift_std": stds.tolist(),
        "arguments": asdict(args),
    }
    (output_dir / "all_results.json").write_text(json.dumps(results, indent=2))
    header = " | ".join(f"{s:g} ms" for s in args.shifts_ms)
    cells = " | ".join(f"{m:.4f} ± {s:.4f}" for m, s in zip(means, stds))
    (output_dir / "results.md").write_text(
        f"# Shift consistency: {args.model_name_or_path}\n\nDrift 1 − cos(z(x), z(x_δ)) of the frozen CLS, "
        f"mean ± std over {results['clips']} clips (lower = more consistent).\n\n| model | {header} |\n"
        f"|---|{'---|' * len(args.shifts_ms)}\n| {Path(str(args.model_name_or_path)).name} | {cells} |\n"
    )
    plot(
        output_dir / "shift_consistency.png",
        args.shifts_ms,
        means,
        stds,
        f"{Path(str(args.model_name_or_path)).name}: {results['clips']} clips",
    )
    print("   " + ", ".join(f"{s:g} ms: {m:.4f} ± {d:.4f}" for s, m, d in zip(args.shifts_ms, means, stds)))
    return results


if __name__ == "__main__":
    run_script(main, "shift_consistency.py")
