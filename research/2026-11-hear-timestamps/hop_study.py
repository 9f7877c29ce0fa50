"""How should aasp_hf.hear reach a timestamp hop of at most 50 ms from 160 ms patch columns? Onset accuracy on a
synthetic event task, and the cost per minute of audio, for each method.

    python research/2026-11-hear-timestamps/hop_study.py --output_dir research/2026-11-hear-timestamps

Methods (aasp_hf.hear options): the bare 160 ms columns (hop_ms=160), one pass linearly interpolated to 40 ms
(timestamp_method="interpolate"), and shifted passes at 40 ms and 20 ms (timestamp_method="shift", 4 and 8 passes).

1. Onsets. Clips of 2 s: quiet noise plus one tone burst (300-4000 Hz, 5 ms attack, 0.3-0.8 s long, onset uniform in
   0.2-1.2 s). A logistic-regression probe on the standardised timestamp embeddings of 240 training clips predicts
   "tone on" at each timestamp of 120 test clips. Events are decoded as HEAR's event tasks decode them: p > 0.5
   after a median filter over about 250 ms of timestamps, each run of active timestamps one event starting at its
   first timestamp. Reported: frame accuracy, the onset F-measure at 200 ms (HEAR's `event_onset_200ms_fms`) and
   at 50 ms (a predicted onset is a hit when it lies within the tolerance of the clip's one true onset; every other
   predicted event is a false positive), and the median error of the predicted onset nearest the true one.
   Encoder: the tiny preset's (examples/configs/pretrain_tiny_cpu.json, 128 mel bins, D = 64, 2 layers) at its
   seeded random initialisation, read at block 0 (the patch embedding: conv stem and SBLU, no attention) and at
   its output (-1, after two blocks of random attention that mix columns across the clip). The numbers measure the
   time resolution of each method, not a trained representation.
2. Cost. Seconds per minute of audio (one 60 s clip) for each method with the paper's ViT-B encoder (AaspConfig()
   defaults, random weights), on this machine's CPU, two threads; the best of `--repeats` runs.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel, hear

SR = 16000
METHODS = {  # name -> aasp_hf.hear options
    "columns 160 ms": dict(hop_ms=160),
    "interpolate 40 ms": dict(hop_ms=40, timestamp_method="interpolate"),
    "shift 40 ms (4 passes)": dict(hop_ms=40, timestamp_method="shift"),
    "shift 20 ms (8 passes)": dict(hop_ms=20, timestamp_method="shift"),
}
TINY = Path(__file__).resolve().parents[2] / "examples" / "configs" / "pretrain_tiny_cpu.json"


def event_clips(num_clips: int, seed: int, seconds: float = 2.0):
    """(audio (n, L) float32, onsets (n,) s, offsets (n,) s): quiet noise plus one tone burst per clip."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    audio = 0.01 * rng.standard_normal((num_clips, t.size))
    onsets = rng.uniform(0.2, 1.2, num_clips)
    offsets = onsets + rng.uniform(0.3, 0.8, num_clips)
    for i in range(num_clips):
        tone = 0.3 * np.sin(2 * np.pi * rng.uniform(300, 4000) * t + rng.uniform(0, 2 * np.pi))
        envelope = np.clip((t - onsets[i]) / 0.005, 0, 1) * (t < offsets[i])  # 5 ms linear attack
        audio[i] += tone * envelope
    return torch.from_numpy(audio.astype(np.float32)), onsets, offsets


def embed(model, audio, batch=40):
    out = [hear.get_timestamp_embeddings(audio[i : i + batch], model) for i in range(0, len(audio), batch)]
    return torch.cat([e for e, _ in out]).numpy(), torch.cat([t for _, t in out]).numpy() / 1000.0  # s


def median_filter(active: np.ndarray, width: int) -> np.ndarray:
    """Median of a 1-D bool array over `width` (odd) neighbours, the edges padded with their own values."""
    half = width // 2
    padded = np.pad(active.astype(np.float32), half, mode="edge")
    return np.array([np.median(padded[i : i + width]) for i in range(active.size)]) > 0.5


def onsets_of(active: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Start times of the runs of True."""
    starts = np.flatnonzero(active & ~np.concatenate([[False], active[:-1]]))
    return times[starts]


def onset_fmeasure(predicted: list, truth: np.ndarray, tolerance: float) -> float:
    """F-measure of predicted onsets against one true onset per clip, within `tolerance` seconds."""
    hits = sum(bool(np.any(np.abs(p - t) <= tolerance)) for p, t in zip(predicted, truth))
    false_positives = sum(len(p) for p in predicted) - hits
    misses = len(truth) - hits
    return 2 * hits / max(2 * hits + false_positives + misses, 1)


def onset_study(options, train, test, seed=0):
    torch.manual_seed(seed)
    config = AaspConfig(**json.loads(TINY.read_text())["model_config"])
    model = hear.AaspHearModel(AaspModel(config).eval(), AaspFeatureExtractor(), **options)
    results = {"layers": options.get("layers", -1)}
    (train_audio, train_on, train_off), (test_audio, test_on, test_off) = train, test
    x_train, ts_train = embed(model, train_audio)
    x_test, ts_test = embed(model, test_audio)
    y_train = (ts_train >= train_on[:, None]) & (ts_train < train_off[:, None])  # (n, J)
    y_test = (ts_test >= test_on[:, None]) & (ts_test < test_off[:, None])
    scaler = StandardScaler().fit(x_train.reshape(-1, x_train.shape[-1]))
    probe = LogisticRegression(max_iter=2000, C=1.0)
    probe.fit(scaler.transform(x_train.reshape(-1, x_train.shape[-1])), y_train.reshape(-1))
    p = probe.predict_proba(scaler.transform(x_test.reshape(-1, x_test.shape[-1])))[:, 1].reshape(y_test.shape)
    width = max(1, round(250 / model.hop_ms)) // 2 * 2 + 1  # odd, about 250 ms
    active = np.stack([median_filter(row > 0.5, width) for row in p])
    predicted = [onsets_of(active[i], ts_test[i]) for i in range(len(p))]
    nearest = np.array([np.min(np.abs(o - t)) if o.size else np.inf for o, t in zip(predicted, test_on)])
    results.update(
        frame_accuracy=float(((p > 0.5) == y_test).mean()),
        onset_fms_200ms=onset_fmeasure(predicted, test_on, 0.2),
        onset_fms_50ms=onset_fmeasure(predicted, test_on, 0.05),
        median_onset_error_ms=float(1000 * np.median(nearest)),
        hop_ms=model.hop_ms,
    )
    return results


def cost_study(options, repeats):
    torch.manual_seed(0)
    model = hear.AaspHearModel(AaspModel(AaspConfig()).eval(), AaspFeatureExtractor(), **options)
    audio = 0.1 * torch.randn(1, 60 * SR, generator=torch.Generator().manual_seed(0))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        hear.get_timestamp_embeddings(audio, model)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="research/2026-11-hear-timestamps")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip_cost", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    train, test = event_clips(240, seed=1), event_clips(120, seed=2)
    rows = {}
    for name, options in METHODS.items():
        cost = None if args.skip_cost else cost_study(options, args.repeats)
        for layers in (0, -1):
            key = f"{name}, block {layers}"
            rows[key] = onset_study({**options, "layers": layers}, train, test)
            rows[key]["vit_b_seconds_per_minute"] = cost
            print(key, rows[key], flush=True)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    lines = ["| method, encoder block read | hop (ms) | frame accuracy | onset F 200 ms | onset F 50 ms | "
             "median onset error (ms) | ViT-B s per minute of audio |", "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        cost = "–" if r["vit_b_seconds_per_minute"] is None else f"{r['vit_b_seconds_per_minute']:.1f}"
        lines.append(f"| {name} | {r['hop_ms']:g} | {r['frame_accuracy']:.3f} | {r['onset_fms_200ms']:.3f} | "
                     f"{r['onset_fms_50ms']:.3f} | {r['median_onset_error_ms']:.0f} | {cost} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
