"""Scratch (issue 12): how pre-training reshapes the tokens the probe pools, layer by layer.

For each encoder folder and each task's test clips (the first N per class, 2.07-s crops from the start), per layer:
  within_clip_cos  mean cosine similarity between two different patch tokens of one clip (1 = all tokens alike)
  row_cos          mean cosine similarity between the time-means of two different frequency rows of one clip
                   (the paper feature's F̃ blocks; 1 = the rows carry the same vector)
Usage: python token_geometry.py NAME=ENCODER_DIR ... [--per_class 6] > out.jsonl
"""
import argparse
import json
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from aasp_hf import AaspFeatureExtractor, AaspModel

DATA = Path(__file__).resolve().parents[1] / "data" / "tasks"


def mean_offdiag_cos(x: torch.Tensor) -> float:
    """x (B, K, D) -> mean over b and i != j of cos(x[b, i], x[b, j])."""
    x = torch.nn.functional.normalize(x.double(), dim=-1)
    gram = x @ x.transpose(1, 2)  # (B, K, K)
    k = x.shape[1]
    return float(((gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)) / (k * (k - 1))).mean())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("encoders", nargs="+")
    p.add_argument("--per_class", type=int, default=6)
    p.add_argument("--frames", type=int, default=208)
    args = p.parse_args()
    torch.set_num_threads(1)
    extractor = AaspFeatureExtractor()
    for spec in args.encoders:
        name, folder = spec.split("=", 1)
        model = AaspModel.from_pretrained(folder).eval()
        rows = model.config.num_frequency_patches
        for task in sorted(p.name for p in DATA.iterdir()):
            files = [f for d in sorted((DATA / task / "test").iterdir()) for f in sorted(d.glob("*.wav"))[:args.per_class]]
            waves = []
            for f in files:
                audio, _ = sf.read(f, dtype="float32", always_2d=True)
                waves.append(audio.mean(1))
            x = extractor(waves, sampling_rate=16000, return_tensors="pt")["input_values"][:, :args.frames]
            with torch.no_grad():
                hidden = model(x, output_hidden_states=True).hidden_states
            out = {"encoder": name, "task": task, "clips": len(files), "within_clip_cos": [], "row_cos": []}
            for h in hidden:
                tokens = h[:, 1:]  # (B, N, D), time-major: N = T̃·F̃
                out["within_clip_cos"].append(round(mean_offdiag_cos(tokens), 4))
                grid = tokens.reshape(tokens.shape[0], -1, rows, tokens.shape[-1])  # (B, N, D) -> (B, T̃, F̃, D)
                out["row_cos"].append(round(mean_offdiag_cos(grid.mean(1)), 4))  # (B, F̃, D)
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
