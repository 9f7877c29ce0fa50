"""`make demo`: AaSP end to end on the CPU in a few minutes — pre-train, linear-probe, fine-tune, share.

Built-in synthetic audio (`aasp_hf.data.synthetic`, no downloads) whose classes differ in modulation and spectral
content: a steady tone, the same carrier amplitude-modulated at 4 Hz and at 30 Hz (30 Hz lies in the alias-prone band, 3.125–50 Hz at
a 10 ms hop and 16-frame patches, that a 16×16 patch embedding folds down), a chirp and noise bursts.

Steps:
1. synthesise labelled train/test clips (and unlabelled pre-training clips, made by examples/pretrain.py)
2. pre-train the tiny preset (examples/configs/pretrain_tiny_cpu.json) with examples/pretrain.py, export the encoder
3. linear probe of frozen features ([CLS ; time-averaged tokens per frequency row]): random init vs pre-trained
4. fine-tune AaspForAudioClassification from scratch and from the pre-trained encoder, the same number of steps
   and the same recipe each: each step is examples/finetune.py's own (`aasp_hf.training.step.finetuning_step`:
   cross-entropy, backward, clipping at 1.0, AdamW), with weight decay 0.01 and a warm-up + cosine lr by step, on the
   demo's clips as they are (the script's mixup, SpecAugment, layer-wise lr decay and weight EMA left out)
5. save_pretrained the fine-tuned model (with a model card), reload it with
   pipeline("audio-classification"), predict

    python examples/demo.py [--pretrain-steps 1500] [--finetune-steps 250] [--output-dir demo_output] [--seed 0]

Artefacts (printed at the end): demo_output/pretrain/ (the pre-training run: checkpoint, log_history.jsonl,
all_results.json, TensorBoard events) with the exported encoder in demo_output/pretrain/encoder/,
demo_output/classifier/ (the fine-tuned classifier for the pipeline) and demo_output/all_results.json.
Torch uses one thread per usable core, at most 8 (`--threads`).
"""

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from sklearn.linear_model import LogisticRegression
from transformers import pipeline

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification, AaspModel
from aasp_hf.data.synthetic import LABELS, labelled_clips
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import parse_command_line
from aasp_hf.evaluation import extract_features, standardization_stats, standardize
from aasp_hf.training.step import finetuning_step

HERE = Path(__file__).resolve().parent
SAMPLE_RATE = 16000
TINY_PRESET = HERE / "configs" / "pretrain_tiny_cpu.json"


# ----------------------------------------------------------------------------------------------- 2. pre-training
def tiny_model_config() -> dict:
    """The encoder of the tiny pre-training preset (64 wide, 2 layers, AaPE with a narrow SBLU)."""
    return json.loads(TINY_PRESET.read_text())["model_config"]


def pretrain(output_dir: Path, steps: int, clips: int, seed: int) -> Path:
    """Runs examples/pretrain.py (one process) on synthetic clips; returns the exported student encoder folder."""
    import pretrain as pretrain_script  # examples/pretrain.py, beside this script

    warmup = max(1, steps // 15)
    pretrain_script.main(
        ["--config", str(TINY_PRESET), "--output_dir", str(output_dir), "--max_steps", str(steps),
         "--warmup_steps", str(warmup), "--synthetic_clips", str(clips), "--save_steps", str(steps),
         "--seed", str(seed), "--overwrite_output_dir"]
    )  # fmt: skip
    return output_dir / "encoder"


# ----------------------------------------------------------------------------------------------- 3. linear probe
def batches(features, labels, batch_size=64):
    for i in range(0, len(labels), batch_size):
        yield {
            "input_values": features["input_values"][i : i + batch_size],
            "attention_mask": features["attention_mask"][i : i + batch_size],
            "labels": labels[i : i + batch_size],
        }


@torch.no_grad()
def linear_probe(encoder: AaspModel, train, train_y, test, test_y) -> float:
    """Held-out accuracy of a logistic regression on standardised frozen features."""
    train_x, _ = extract_features(encoder, batches(train, train_y))
    test_x, _ = extract_features(encoder, batches(test, test_y))
    mean, std = standardization_stats(train_x)
    probe = LogisticRegression(max_iter=3000).fit(standardize(train_x, mean, std), train_y)
    return float(probe.score(standardize(test_x, mean, std), test_y))


# ----------------------------------------------------------------------------------------------- 4. fine-tuning
@torch.no_grad()
def accuracy(model, features, labels) -> float:
    model.eval()
    correct = 0
    for batch in batches(features, torch.as_tensor(labels)):
        logits = model(batch["input_values"], batch["attention_mask"]).logits
        correct += (logits.argmax(-1) == batch["labels"]).sum().item()
    return correct / len(labels)


def finetune(model, train, train_y, steps, batch_size, learning_rate, log_prefix, seed) -> float:
    """`steps` fine-tuning steps through the scripts' one step (`aasp_hf.training.step.finetuning_step`: forward,
    cross-entropy, backward, clipping at 1.0, AdamW), with AdamW (weight decay 0.01), a warm-up (first 10 %) × cosine
    lr by step and batches in a seeded order (the same for every model). Returns the seconds it took."""
    # the model is not `prepare`d, so it and the demo's tensors stay on the CPU: the accelerator (the one step 2's
    # pre-training made, where there was one) only runs the step's backward and gradient clipping
    accelerator = Accelerator()
    # one parameter group at the full lr (the step scales each group's lr by its "lr_scale")
    optimizer = torch.optim.AdamW(
        [{"params": model.parameters(), "lr_scale": 1.0}], lr=learning_rate, weight_decay=0.01
    )
    labels = torch.as_tensor(train_y)
    batch_size, start = min(batch_size, len(labels)), time.monotonic()
    generator = torch.Generator().manual_seed(seed)
    per_epoch = len(labels) // batch_size
    model.train()
    for step in range(steps):
        if step % per_epoch == 0:
            order = torch.randperm(len(labels), generator=generator)
        idx = order[(step % per_epoch) * batch_size : (step % per_epoch + 1) * batch_size]
        lr = learning_rate * min(1.0, 10 * (step + 1) / steps) * 0.5 * (1 + math.cos(math.pi * step / steps))
        batch = (train["input_values"][idx], train["attention_mask"][idx], labels[idx])
        (loss,), _ = finetuning_step(
            accelerator,
            model,
            optimizer,
            lambda batch=batch: batch,
            accumulation=1,
            lr=lr,
            max_grad_norm=1.0,
            soft=False,
        )
        if (step + 1) % 50 == 0 or step + 1 == steps:
            print(f"   {log_prefix} step {step + 1:5d}/{steps}  loss {loss:.3f}  ({time.monotonic() - start:.0f} s)")
    return time.monotonic() - start


def default_threads() -> int:
    """One torch thread per core this process may use (its CPU affinity, not the host's count), at most 8."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(usable, 8))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrain-steps", type=int, default=1500, help="0 skips pre-training")
    parser.add_argument("--pretrain-clips", type=int, default=1024)
    parser.add_argument("--finetune-steps", type=int, default=250, help="fine-tuning steps, the same for each model")
    parser.add_argument(
        "--threads", type=int, default=default_threads(), help="torch threads (default: usable cores, at most 8)"
    )
    parser.add_argument("--output-dir", default="demo_output")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-per-class", type=int, default=400)
    parser.add_argument("--test-per-class", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    args = parse_command_line(parser, argv)
    output_dir = Path(args.output_dir)
    earlier = [name for name in ("all_results.json", "pretrain", "classifier") if (output_dir / name).exists()]
    if earlier:
        print(
            f"{output_dir}/ holds an earlier demo run ({', '.join(earlier)}): this run replaces it "
            f"(pass --output-dir to keep both)"
        )
    torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")
    t_start = time.monotonic()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed + 1)  # the pre-training clips come from `seed`, these from seed + 1
    id2label = dict(enumerate(LABELS))
    results = {}

    print(f"1. synthesising {args.train_per_class} train / {args.test_per_class} test clips per class: {LABELS}")
    train_clips, train_y = labelled_clips(args.train_per_class, rng)
    test_clips, test_y = labelled_clips(args.test_per_class, rng)
    feature_extractor = AaspFeatureExtractor()
    train = feature_extractor(train_clips, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    test = feature_extractor(test_clips, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    config = AaspConfig(**tiny_model_config())
    print(f"   log-mel input {tuple(train['input_values'].shape)}")

    encoder_dir = None
    if args.pretrain_steps > 0:
        print(
            f"2. pre-training the tiny preset for {args.pretrain_steps} steps on {args.pretrain_clips} unlabelled clips"
        )
        start = time.monotonic()
        encoder_dir = pretrain(output_dir / "pretrain", args.pretrain_steps, args.pretrain_clips, args.seed)
        results["pretrain_seconds"] = round(time.monotonic() - start, 1)
        results["pretrain_steps"] = args.pretrain_steps

    print("3. linear probe on frozen features")
    torch.manual_seed(args.seed)
    results["probe_accuracy_random_init"] = linear_probe(AaspModel(config).eval(), train, train_y, test, test_y)
    print(f"   random init : {results['probe_accuracy_random_init']:.3f}")
    if encoder_dir is not None:
        encoder = AaspModel.from_pretrained(encoder_dir).eval()
        results["probe_accuracy_pretrained"] = linear_probe(encoder, train, train_y, test, test_y)
        print(f"   pre-trained : {results['probe_accuracy_pretrained']:.3f}")

    print(f"4. fine-tuning for {args.finetune_steps} steps each, same recipe (chance {1 / len(LABELS):.2f})")
    head_kwargs = dict(num_labels=len(LABELS), id2label=id2label, label2id={v: k for k, v in id2label.items()})
    torch.manual_seed(args.seed)
    candidates = {"scratch": AaspForAudioClassification(AaspConfig(**tiny_model_config(), **head_kwargs))}
    if encoder_dir is not None:
        candidates["pretrained"] = AaspForAudioClassification.from_pretrained(encoder_dir, **head_kwargs)
    for name, model in candidates.items():
        seconds = finetune(
            model, train, train_y, args.finetune_steps, args.batch_size, args.learning_rate, name, seed=args.seed
        )
        results[f"finetune_steps_{name}"] = args.finetune_steps
        results[f"finetune_seconds_{name}"] = round(seconds, 1)
        results[f"finetune_accuracy_{name}"] = accuracy(model, test, test_y)
    for name in candidates:
        print(
            f"   from {name:10s}: {results[f'finetune_accuracy_{name}']:.3f} held-out accuracy after "
            f"{args.finetune_steps} steps ({results[f'finetune_seconds_{name}']:.0f} s)"
        )

    best_name = "pretrained" if "pretrained" in candidates else "scratch"
    classifier_dir = output_dir / "classifier"
    candidates[best_name].save_pretrained(classifier_dir)
    feature_extractor.save_pretrained(classifier_dir)
    print(f"5. saved the model fine-tuned from {best_name} to {classifier_dir}/; reloading with the pipeline")
    classifier = pipeline("audio-classification", model=str(classifier_dir), device="cpu")  # aasp_hf is installed
    predictions = classifier(list(test_clips), top_k=1, batch_size=16)
    results["pipeline_accuracy"] = float(np.mean([p[0]["label"] == LABELS[y] for p, y in zip(predictions, test_y)]))
    results["finetuned_from"] = best_name
    print(f"   pipeline held-out accuracy: {results['pipeline_accuracy']:.3f} ({len(test_y)} clips)")
    for clip, label in list(zip(test_clips, test_y))[:5]:
        shown = ", ".join(f"{p['label']} {p['score']:.2f}" for p in classifier(clip, top_k=2))
        print(f"   true {LABELS[label]:>13s} -> {shown}")

    from aasp_hf.utils.hub import write_model_card

    write_model_card(
        classifier_dir,
        candidates[best_name],
        feature_extractor,
        {
            "title": "AaSP demo classifier (synthetic audio, 5 classes)",
            "path": str(classifier_dir),
            "training": {
                "data": f"examples/demo.py's synthetic clips: {args.train_per_class} train per class, "
                f"{args.test_per_class} test per class, 1 s each",
                "pre-training": f"{args.pretrain_steps} steps on {args.pretrain_clips} unlabelled synthetic clips"
                if encoder_dir is not None
                else "none (from scratch)",
                "fine-tuning": f"{args.finetune_steps} steps, batch {args.batch_size}, AdamW lr {args.learning_rate:g}",
            },
            "evaluation": f"Held-out accuracy on {len(test_y)} synthetic test clips through the pipeline: "
            f"{results['pipeline_accuracy']:.3f} (from scratch, same steps: "
            f"{results['finetune_accuracy_scratch']:.3f}). A demonstration, not a benchmark.",
        },
    )
    results["seconds"] = round(time.monotonic() - t_start, 1)
    (output_dir / "all_results.json").write_text(json.dumps(results, indent=2))
    print(f"done in {results['seconds'] / 60:.1f} min. Artefacts:")
    if encoder_dir is not None:
        print(
            f"   pre-training run      {output_dir / 'pretrain'}/  (checkpoint, log_history.jsonl, all_results.json, "
            f"TensorBoard events)"
        )
        print(f"   pre-trained encoder   {encoder_dir}/  (AutoModel.from_pretrained; model card README.md)")
    print(
        f"   fine-tuned classifier {classifier_dir}/  (model card; load it with "
        f'pipeline("audio-classification", model=...))'
    )
    print(f"   results               {output_dir / 'all_results.json'}")
    return results


if __name__ == "__main__":
    run_script(main, "demo.py")
