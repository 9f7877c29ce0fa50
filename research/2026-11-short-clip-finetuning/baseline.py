"""The log-mel baseline of the study: per clip the mean and the standard deviation over time of each of 64 log-mel
bins (the package's m2d front end at 16 kHz, the whole clip, no crop), standardised, then a logistic regression
(scikit-learn, L2, C = 1). It reads the splits exactly as finetune.py does (aasp_hf.data.load_downstream with the
script's defaults and split seed 0), trains on the training clips (not the validation ones) and scores the test clips.

    python research/2026-11-short-clip-finetuning/baseline.py --data_root /tmp/study/data/unseen --output x.json
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np


def logmel_stats(rows, num_mel_bins: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """-> (features (N, 2 · bins): mean and std over time of each log-mel bin, labels (N,))."""
    import torch

    from aasp_hf import AaspFeatureExtractor
    from aasp_hf.data.decoding import decode_audio

    extractor = AaspFeatureExtractor(feature_size=num_mel_bins, do_normalize=False)
    features, labels = [], []
    for row in rows:
        waveform = decode_audio(row["audio"])  # 16 kHz mono
        with torch.no_grad():
            log_mel = extractor([waveform], sampling_rate=16000, return_tensors="pt")["input_values"][0]  # (T, F)
        features.append(np.concatenate([log_mel.mean(0).numpy(), log_mel.std(0).numpy()]))
        labels.append(int(row["label"]))
    return np.stack(features), np.array(labels)


def logmel_baseline(data_root: str, num_mel_bins: int = 64, seed: int = 0) -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from aasp_hf.data import load_downstream

    start = time.time()
    task = load_downstream("audiofolder", root=data_root, seed=0)
    (splits,) = task.parts.values()
    x_train, y_train = logmel_stats(splits["train"], num_mel_bins)
    x_test, y_test = logmel_stats(splits["test"], num_mel_bins)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000, random_state=seed))
    model.fit(x_train, y_train)
    return {"data_root": data_root, "train_clips": len(y_train), "test_clips": len(y_test),
            "num_classes": len(task.label_names), "test_accuracy": float((model.predict(x_test) == y_test).mean()),
            "train_accuracy": float((model.predict(x_train) == y_train).mean()), "seconds": time.time() - start}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_root", required=True)
    parser.add_argument("--num_mel_bins", type=int, default=64)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    result = logmel_baseline(args.data_root, args.num_mel_bins)
    print(json.dumps(result))
    if args.output:
        args.output.write_text(json.dumps(result, indent=2))
