"""`make demo`: fine-tune a tiny AaSP classifier on synthetic audio, save it, reload it through the pipeline.

The task is built so that the aliasing-aware stem matters: besides a steady tone, a chirp and noise bursts, two
classes are the same carrier amplitude-modulated at 4 Hz and at 30 Hz. 30 Hz lies in the alias-prone modulation
band (3.125–50 Hz at a 10 ms hop and 16-frame patches) that a 16×16 patch embedding folds down.

Steps: 1. make the data, 2. build the model and feature extractor, 3. train for a time budget on the CPU,
4. evaluate on held-out clips, 5. save_pretrained, 6. reload with pipeline("audio-classification") and predict.

    python examples/demo.py [--seconds 60] [--patch-embedding aape|spe] [--output-dir demo_output] [--seed 0]
"""

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from transformers import pipeline

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification

SAMPLE_RATE = 16000
LABELS = ["tone", "am_4hz", "am_30hz", "chirp", "noise_bursts"]


# ----------------------------------------------------------------------------------------------- 1. data
def synth_clip(label: str, rng: np.random.Generator, seconds: float = 1.0) -> np.ndarray:
    """One float32 clip of `label` at 16 kHz with random carrier, level and background noise."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    carrier = rng.uniform(300.0, 3000.0)
    phase = rng.uniform(0, 2 * math.pi)
    if label == "tone":
        x = np.sin(2 * math.pi * carrier * t + phase)
    elif label.startswith("am_"):
        rate = float(label[3:-2]) * rng.uniform(0.9, 1.1)
        envelope = 0.5 * (1 + np.sin(2 * math.pi * rate * t + rng.uniform(0, 2 * math.pi)))
        x = envelope * np.sin(2 * math.pi * carrier * t + phase)
    elif label == "chirp":
        f0, f1 = sorted(rng.uniform(200.0, 4000.0, size=2))
        if rng.random() < 0.5:
            f0, f1 = f1, f0
        x = np.sin(2 * math.pi * (f0 * t + 0.5 * (f1 - f0) / seconds * t**2) + phase)
    elif label == "noise_bursts":
        gate = np.zeros_like(t)
        for start in rng.uniform(0, seconds - 0.1, size=rng.integers(2, 5)):
            gate[(t >= start) & (t < start + rng.uniform(0.03, 0.1))] = 1.0
        x = gate * rng.standard_normal(t.shape)
    else:
        raise ValueError(f"unknown label {label!r}")
    x = rng.uniform(0.1, 0.8) * x / (np.abs(x).max() + 1e-8)
    x = x + rng.uniform(0.001, 0.02) * rng.standard_normal(t.shape)
    return x.astype(np.float32)


def make_split(num_per_class: int, rng: np.random.Generator):
    clips, labels = [], []
    for label_id, label in enumerate(LABELS):
        for _ in range(num_per_class):
            clips.append(synth_clip(label, rng))
            labels.append(label_id)
    order = rng.permutation(len(clips))
    return [clips[i] for i in order], np.asarray(labels)[order]


# ----------------------------------------------------------------------------------------------- 2. model
def tiny_config(patch_embedding: str = "aape") -> AaspConfig:
    """A 2-layer, 96-wide encoder for 1-s clips (112 frames); AaPE with the paper's K = 63 and a 4× narrower
    SBLU (H = 32, C = 256) so that the stem does not dominate such a small encoder on the CPU."""
    return AaspConfig(
        patch_embedding=patch_embedding,
        sblu_hidden_size=32,
        sblu_output_size=256,
        hidden_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=192,
        num_frames=112,
        lambda_encoder_num_layers=1,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
    )


@torch.no_grad()
def evaluate(model, features, labels, batch_size=64) -> float:
    model.eval()
    correct = 0
    for i in range(0, len(labels), batch_size):
        logits = model(features["input_values"][i : i + batch_size], features["attention_mask"][i : i + batch_size])
        correct += (logits.logits.argmax(-1) == labels[i : i + batch_size]).sum().item()
    return correct / len(labels)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="training time budget on this machine")
    parser.add_argument("--output-dir", default="demo_output")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-per-class", type=int, default=400)
    parser.add_argument("--test-per-class", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--patch-embedding", choices=["aape", "spe"], default="aape")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    print(f"1. synthesising {args.train_per_class} train / {args.test_per_class} test clips per class: {LABELS}")
    train_clips, train_labels = make_split(args.train_per_class, rng)
    test_clips, test_labels = make_split(args.test_per_class, rng)

    print(f"2. feature extraction (16 kHz log-mel, 128 bins) and a tiny AaSP classifier ({args.patch_embedding})")
    feature_extractor = AaspFeatureExtractor()
    train = feature_extractor(train_clips, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    test = feature_extractor(test_clips, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    train_y, test_y = torch.from_numpy(train_labels), torch.from_numpy(test_labels)
    model = AaspForAudioClassification(tiny_config(args.patch_embedding))
    print(f"   input {tuple(train['input_values'].shape)}, {model.num_parameters() / 1e6:.2f} M parameters")

    print(f"3. training for {args.seconds:.0f} s")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    batch_size, step, start = min(args.batch_size, len(train_y)), 0, time.monotonic()
    while time.monotonic() - start < args.seconds:
        model.train()
        order = torch.randperm(len(train_y))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size]
            # warm-up then cosine decay over the time budget (the demo trains for seconds, not steps)
            progress = min((time.monotonic() - start) / args.seconds, 1.0)
            for group in optimizer.param_groups:
                group["lr"] = args.learning_rate * min(1.0, 10 * progress) * 0.5 * (1 + math.cos(math.pi * progress))
            out = model(train["input_values"][idx], train["attention_mask"][idx], labels=train_y[idx])
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            if step % 10 == 0:
                print(f"   step {step:4d}  loss {out.loss.item():.3f}  ({time.monotonic() - start:.0f} s)")
            if time.monotonic() - start >= args.seconds:
                break

    train_seconds = time.monotonic() - start
    accuracy = evaluate(model, test, test_y)
    print(f"4. held-out accuracy after {step} steps: {accuracy:.3f} ({len(test_y)} clips, chance {1 / len(LABELS):.2f})")

    output_dir = Path(args.output_dir)
    model.save_pretrained(output_dir)
    feature_extractor.save_pretrained(output_dir)
    print(f"5. saved to {output_dir}/: {sorted(p.name for p in output_dir.iterdir())}")

    print("6. reloading through pipeline('audio-classification')")
    classifier = pipeline("audio-classification", model=str(output_dir), device="cpu")
    predictions = classifier([clip for clip in test_clips], top_k=1, batch_size=16)
    pipeline_accuracy = np.mean([p[0]["label"] == LABELS[y] for p, y in zip(predictions, test_labels)])
    print(f"   pipeline held-out accuracy: {pipeline_accuracy:.3f}")
    for clip, label in list(zip(test_clips, test_labels))[:5]:
        top = classifier(clip, top_k=2)
        shown = ", ".join(f"{p['label']} {p['score']:.2f}" for p in top)
        print(f"   true {LABELS[label]:>13s} -> {shown}")

    results = {
        "train_steps": step,
        "train_seconds": round(train_seconds, 1),
        "test_clips": len(test_labels),
        "test_accuracy": accuracy,
        "pipeline_test_accuracy": float(pipeline_accuracy),
    }
    (output_dir / "all_results.json").write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
