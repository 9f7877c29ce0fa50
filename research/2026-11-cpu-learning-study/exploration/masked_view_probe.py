"""Scratch (issue 12): is the pre-trained student worse only on the input it never saw in training?

The student trains on 20 % of each clip's tokens (inverse block masks); the probe feeds it whole clips. This probes
each encoder two ways on the mini tasks, with the same linear classifier:

  full    the paper feature [CLS ; time-mean per frequency row] of the whole clip (the study's input)
  masked  the same feature from the student's masked forward, as in pre-training: M inverse block masks at the
          pre-training mask ratio, the encoder sees only each view's visible tokens; CLS averaged over the M views,
          each frequency row's tokens averaged over all its visible tokens of the M views

If pre-training made the student better than its initialisation on masked input but worse on whole clips, the
probe's drop is a train/test input mismatch; if it is worse on both, the features themselves transfer worse.

    python benchmarks/quality/exploration/masked_view_probe.py NAME=ENCODER_DIR ... > masked_view_probe.jsonl

Classifier: logistic regression (C = 0.1) on train-standardised features, as `per_layer_probe.py`; clips cut or
zero-padded to 1.5 s and the log-mel cropped to 144 frames (9 time patches) for both inputs. Needs scikit-learn
(`pip install scikit-learn`; not a dependency of the package), like `per_layer_probe.py`.
"""
import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from sklearn.linear_model import LogisticRegression

from aasp_hf import AaspFeatureExtractor, AaspModel
from aasp_hf.evaluation import pool_features, standardization_stats, standardize
from aasp_hf.training.masking import sample_view_masks, visible_indices

torch.set_num_threads(1)
DATA = Path(__file__).resolve().parents[1] / "data" / "tasks"
NUM_SAMPLES, NUM_FRAMES, NUM_VIEWS = 24000, 144, 8
extractor = AaspFeatureExtractor()


def items(task, split):
    return [(f, d.name) for d in sorted((DATA / task / split).iterdir()) for f in sorted(d.glob("*.wav"))]


def waves(rows):
    out = []
    for path, _ in rows:
        audio, _ = sf.read(path, dtype="float32", always_2d=True)
        audio = audio.mean(1)[:NUM_SAMPLES]
        out.append(np.pad(audio, (0, NUM_SAMPLES - len(audio))))
    return out


def log_mel_batches(rows, batch_size=64):
    """Log-mel of `rows` (clips cut or zero-padded to 1.5 s), cropped to 144 frames, `batch_size` clips at a time."""
    for i in range(0, len(rows), batch_size):
        mel = extractor(waves(rows[i:i + batch_size]), sampling_rate=16000, return_tensors="pt")["input_values"]
        yield mel[:, :NUM_FRAMES]  # (B, T, F), T = 144 frames


@torch.no_grad()
def features(model, mel, generator):
    """(B, T, F) log-mel -> full (B, D + F̃·D) and masked (B, D + F̃·D) features."""
    c = model.config
    num_rows = c.num_frequency_patches
    full = pool_features(model(mel).last_hidden_state, None, num_rows)  # (B, D + F̃·D)

    batch = mel.shape[0]
    num_time = mel.shape[1] // c.time_patch_size
    mask = sample_view_masks(batch, NUM_VIEWS, num_rows, num_time, c.mask_ratio, c.mask_block_sizes,
                             generator=generator)  # (B, M, N), True = hidden
    index = visible_indices(mask)  # (B, M, V), time-major token indices
    hidden = model(mel, visible_indices=index).last_hidden_state  # (B·M, 1 + V, D)
    hidden = hidden.reshape(batch, NUM_VIEWS, -1, hidden.shape[-1])  # (B·M, 1 + V, D) -> (B, M, 1 + V, D)
    cls = hidden[:, :, 0].mean(1)  # (B, D)
    rows = torch.nn.functional.one_hot(index % num_rows, num_rows).to(hidden.dtype)  # (B, M, V, F̃)
    sums = torch.einsum("bmvf,bmvd->bfd", rows, hidden[:, :, 1:])  # (B, F̃, D)
    counts = rows.sum((1, 2))[..., None].clamp(min=1.0)  # (B, F̃, 1)
    masked = torch.cat([cls, (sums / counts).reshape(batch, -1)], dim=-1)  # (B, F̃, D) -> (B, D + F̃·D)
    return full.numpy(), masked.numpy()


def main():
    for spec in sys.argv[1:]:
        name, folder = spec.split("=", 1)
        model = AaspModel.from_pretrained(folder).eval()
        for task in ("instrument", "pitch", "speech"):
            labels = sorted({label for _, label in items(task, "train")})
            feats = {}
            generator = torch.Generator().manual_seed(0)  # the same masks for every encoder
            for split in ("train", "test"):
                rows = items(task, split)
                parts = [features(model, mel, generator) for mel in log_mel_batches(rows)]
                y = np.array([labels.index(label) for _, label in rows])
                feats[split] = ([np.concatenate([p[k] for p in parts]) for k in (0, 1)], y)
            record = {"encoder": name, "task": task}
            for k, kind in enumerate(("full", "masked")):
                x_train, x_test = feats["train"][0][k], feats["test"][0][k]
                mean, std = standardization_stats(x_train)
                clf = LogisticRegression(C=0.1, max_iter=300).fit(standardize(x_train, mean, std), feats["train"][1])
                record[kind] = round(float((clf.predict(standardize(x_test, mean, std)) == feats["test"][1]).mean()), 4)
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
