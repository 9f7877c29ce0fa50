"""Scratch (issue 12): how far above its random init can the tiny encoder get on the mini tasks *with labels*?

The issue asks pre-training to beat the random init by 5 points of average probe accuracy, the test splits holding
sources never seen in training. This measures the headroom under the same protocol: it trains the same network,
from the same step-0 initialisation, on one task's own labelled train split (supervised, cross-entropy), saves the
encoder at a few steps, and those encoders are then probed exactly like the study's (`probe_encoders.py`: paper
features of whole clips, train-only standardisation, lr chosen on a seeded 10 % validation split of train). A
self-supervised recipe sees no labels at all, so the supervised encoder of each task is an (optimistic) reference
for what its features can gain at this scale.

    python benchmarks/quality/exploration/supervised_ceiling.py --init ENCODER_DIR --task instrument --seed 0 \
        --steps 100 300 1000 --out_dir OUT [--train_stem]
    python benchmarks/quality/probe_encoders.py s0_300=OUT/step300 ... --tasks instrument --out F.json [run.py flags]
    python benchmarks/quality/exploration/supervised_ceiling.py --report supervised_ceiling.jsonl

`supervised_ceiling.sh S` runs both for one seed; `--report` turns its probe lines (`{"name": "STEM_TASK_sS_STEP",
TASK: accuracy}` and `init_TASK_sS`) into the table of the exploration README: the average over the three tasks at
each saved step, and "best step", each task's best saved step chosen on its test accuracy (an optimistic ceiling).

Training: the paper feature [CLS ; time-mean per frequency row] of 144-frame log-mels (clips cut or zero-padded to
1.5 s, as `masked_view_probe.py`, whose clip loaders this imports, so it needs scikit-learn like that script),
BatchNorm without affine parameters (the per-dimension standardisation of MAE's linear probe) and a linear head;
AdamW (lr 5e-4, weight decay 0.05, 50 warm-up steps, then constant), batch 32 drawn with a seeded generator, a
random circular time shift (one per batch) as the only augmentation. The AaPE stem (`AaspModel.embeddings`) is
frozen unless `--train_stem`, as in the tiny preset `pretrain_tiny_quality.json`. At each saved step it prints one
line with the supervised head's own train and test accuracy (BatchNorm statistics re-estimated on train first).
"""
import argparse
import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from aasp_hf import AaspFeatureExtractor, AaspModel
from aasp_hf.evaluation import pool_features
from masked_view_probe import NUM_FRAMES, items, log_mel_batches


def log_mels(rows):
    """(N, 144, F) log-mel of every clip of a split and (N,) class names."""
    return torch.cat(list(log_mel_batches(rows))), [label for _, label in rows]


class Supervised(nn.Module):
    """The encoder, the paper feature, a BatchNorm without affine parameters and a linear head."""

    def __init__(self, encoder: AaspModel, num_labels: int):
        super().__init__()
        self.encoder = encoder
        c = encoder.config
        width = c.hidden_size * (1 + c.num_frequency_patches)
        self.norm = nn.BatchNorm1d(width, affine=False)  # per-dimension standardisation, as MAE's linear probe
        self.head = nn.Linear(width, num_labels)

    def forward(self, mel):  # (B, T, F) -> (B, num_labels)
        hidden = self.encoder(mel).last_hidden_state  # (B, 1 + N, D)
        feature = pool_features(hidden, None, self.encoder.config.num_frequency_patches)  # (B, D + F̃·D)
        return self.head(self.norm(feature))


@torch.no_grad()
def refresh_norm_statistics(model, mel):
    """Set the BatchNorm's running statistics to the train split's features under the current encoder."""
    model.norm.reset_running_stats()
    model.norm.momentum = None  # cumulative average over the passes below
    for i in range(0, len(mel), 128):
        model(mel[i:i + 128])
    model.norm.momentum = 0.1


@torch.no_grad()
def accuracy(model, mel, labels):
    model.eval()
    predictions = torch.cat([model(mel[i:i + 128]).argmax(-1) for i in range(0, len(mel), 128)])
    model.train()
    return float((predictions == labels).float().mean())


TASKS = ("instrument", "pitch", "speech")


def report(path: Path) -> str:
    """Markdown table of the probe lines in `path`: per stem setting and step, the 3-task average, mean ± std over
    seeds, and its gain over the same seed's initialisation."""
    probes = {}  # (setting, task, seed, step) -> accuracy, setting "init" at step 0
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if "name" not in row:
            continue
        setting, rest = row["name"].split("_", 1)
        task, seed, *step = rest.split("_")
        probes[setting, task, int(seed[1:]), int(step[0]) if step else 0] = row[task]
    seeds = sorted({seed for _, _, seed, _ in probes})
    steps = sorted({step for setting, _, _, step in probes if setting != "init"})
    init = {s: np.mean([probes["init", t, s, 0] for t in TASKS]) for s in seeds}

    def cell(values):
        gains = [100 * (v - init[s]) for s, v in values.items()]
        mean = 100 * np.mean(list(values.values()))
        return f"{mean:.1f} ± {100 * np.std(list(values.values())):.1f} | {np.mean(gains):+.1f} ± {np.std(gains):.1f}"

    lines = [f"seeds {seeds}; init (3-task average): " + ", ".join(f"{100 * init[s]:.1f}" for s in seeds),
             "", "| supervised encoder | average | vs its own init |", "|---|---|---|"]
    for setting in ("frozen", "trained"):
        stem = "stem frozen" if setting == "frozen" else "stem trained"
        for step in steps:
            values = {s: np.mean([probes[setting, t, s, step] for t in TASKS]) for s in seeds}
            lines.append(f"| {stem}, step {step} | {cell(values)} |")
        best = {s: np.mean([max(probes[setting, t, s, n] for n in steps) for t in TASKS]) for s in seeds}
        lines.append(f"| {stem}, best step per task (chosen on test) | {cell(best)} |")
    lines += ["", f"| task (mean of seeds) | init | stem frozen, steps {'/'.join(map(str, steps))} | stem trained |",
              "|---|---|---|---|"]
    for task in TASKS:
        def at(setting, step):
            return f"{100 * np.mean([probes[setting, task, s, step] for s in seeds]):.1f}"

        lines.append(f"| {task} | {at('init', 0)} | " + " / ".join(at("frozen", n) for n in steps) + " | "
                     + " / ".join(at("trained", n) for n in steps) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", type=Path, default=None, help="print the table of a probe-lines file and exit")
    parser.add_argument("--init", help="an AaspModel folder (a study run's encoders/step0)")
    parser.add_argument("--task", choices=["instrument", "pitch", "speech"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, nargs="+", default=[100, 300, 1000], help="steps to save at")
    parser.add_argument("--out_dir", type=Path)
    parser.add_argument("--train_stem", action="store_true", help="train the AaPE stem too (default: frozen)")
    parser.add_argument("--learning_rate", type=float, default=5e-4)
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args(argv)
    if args.report is not None:
        print(report(args.report))
        return
    if args.init is None or args.task is None:
        parser.error("--init and --task are required to train (or give --report FILE)")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    train_mel, train_names = log_mels(items(args.task, "train"))
    test_mel, test_names = log_mels(items(args.task, "test"))
    classes = sorted(set(train_names))
    train_labels = torch.tensor([classes.index(n) for n in train_names])
    test_labels = torch.tensor([classes.index(n) for n in test_names])

    encoder = AaspModel.from_pretrained(args.init)
    feature_extractor = AaspFeatureExtractor.from_pretrained(args.init)  # saved beside each encoder
    if not args.train_stem:
        encoder.embeddings.requires_grad_(False)
    model = Supervised(encoder, len(classes)).train()
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.learning_rate)
    generator = torch.Generator().manual_seed(args.seed)
    warmup = 50
    for step in range(1, max(args.steps) + 1):
        for group in optimizer.param_groups:
            group["lr"] = args.learning_rate * min(1.0, step / warmup)
        index = torch.randint(len(train_mel), (args.batch_size,), generator=generator)  # (B,)
        shift = int(torch.randint(NUM_FRAMES, (1,), generator=generator))
        mel = torch.roll(train_mel[index], shifts=shift, dims=1)  # (B, T, F), circular time shift
        loss = nn.functional.cross_entropy(model(mel), train_labels[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step in args.steps:
            refresh_norm_statistics(model, train_mel)
            folder = args.out_dir / f"step{step}"
            encoder.save_pretrained(folder)
            feature_extractor.save_pretrained(folder)
            print(json.dumps({"task": args.task, "seed": args.seed, "step": step, "train_stem": args.train_stem,
                              "loss": round(float(loss.detach()), 4),
                              "head_train_accuracy": round(accuracy(model, train_mel, train_labels), 4),
                              "head_test_accuracy": round(accuracy(model, test_mel, test_labels), 4),
                              "encoder": str(folder)}), flush=True)


if __name__ == "__main__":
    main()
