"""Scratch (issue 12): does pre-training learn its training sources, and fail only to transfer to unseen ones?

Every mini task's train split comes from a source the pre-training corpus holds (timgm6mb-soundfont notes, the
festvox kal voice), its test split from one it does not (freepats, the kdl voice). With all of train, a linear probe
is at 99 % on held-out train-source clips for every encoder, so the study's same-source column cannot tell encoders
apart. With a few labels per class it can. This fits one classifier on k labelled train clips per class and scores
it twice:

  same-source   the task's other train clips (the sources the corpus holds)
  unseen-source the task's test split (the study's test column, here with k labels per class)

for k in 1, 3 and 10, over 10 draws of the labelled clips (the same draws for every encoder).

    python benchmarks/quality/exploration/label_efficiency_probe.py NAME=ENCODER_DIR ... > label_efficiency.jsonl

`logmel` as a NAME (no folder) is the log-mel mean + std baseline. Features: the paper feature of whole clips, cut
or zero-padded to 1.5 s and cropped to 144 frames, exactly as `masked_view_probe.py` (whose clip loaders this
imports); logistic regression (C = 0.1) on features standardised with the labelled clips' statistics. Needs
scikit-learn, like the other probes here.
"""
import json
import sys

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression

from aasp_hf import AaspModel
from aasp_hf.evaluation import pool_features, standardization_stats, standardize
from masked_view_probe import items, log_mel_batches

SHOTS, DRAWS = (1, 3, 10), 10


@torch.no_grad()
def clip_features(model, rows):
    """(clips, features) for one split: the paper feature, or log-mel mean + std when model is None."""
    parts = []
    for mel in log_mel_batches(rows):  # (B, T, F), T = 144 frames
        if model is None:
            parts.append(torch.cat([mel.mean(1), mel.std(1)], dim=-1).numpy())  # (B, 2F)
        else:
            hidden = model(mel).last_hidden_state  # (B, 1 + N, D)
            parts.append(pool_features(hidden, None, model.config.num_frequency_patches).numpy())  # (B, D + F̃·D)
    return np.concatenate(parts)


def draw_labelled(labels, shots, rng):
    """Indices of `shots` clips of each class (a seeded draw) and the indices of the rest."""
    chosen = np.concatenate([rng.choice(np.flatnonzero(labels == c), shots, replace=False)
                             for c in np.unique(labels)])
    rest = np.setdiff1d(np.arange(len(labels)), chosen)
    return chosen, rest


def accuracy(x_fit, y_fit, x_eval, y_eval):
    mean, std = standardization_stats(x_fit)
    clf = LogisticRegression(C=0.1, max_iter=500).fit(standardize(x_fit, mean, std), y_fit)
    return float((clf.predict(standardize(x_eval, mean, std)) == y_eval).mean())


def main():
    torch.set_num_threads(1)
    for spec in sys.argv[1:]:
        name, _, folder = spec.partition("=")
        model = AaspModel.from_pretrained(folder).eval() if folder else None
        for task in ("instrument", "pitch", "speech"):
            train_rows, test_rows = items(task, "train"), items(task, "test")
            classes = sorted({label for _, label in train_rows})
            y_train = np.array([classes.index(label) for _, label in train_rows])
            y_test = np.array([classes.index(label) for _, label in test_rows])
            x_train, x_test = clip_features(model, train_rows), clip_features(model, test_rows)
            for shots in SHOTS:
                rng = np.random.default_rng(shots)  # the same draws for every encoder
                same, unseen = [], []
                for _ in range(DRAWS):
                    chosen, rest = draw_labelled(y_train, shots, rng)
                    same.append(accuracy(x_train[chosen], y_train[chosen], x_train[rest], y_train[rest]))
                    unseen.append(accuracy(x_train[chosen], y_train[chosen], x_test, y_test))
                print(json.dumps({"encoder": name, "task": task, "shots": shots, "draws": DRAWS,
                                  "same_source": round(float(np.mean(same)), 4),
                                  "same_source_std": round(float(np.std(same)), 4),
                                  "unseen_source": round(float(np.mean(unseen)), 4),
                                  "unseen_source_std": round(float(np.std(unseen)), 4)}), flush=True)


if __name__ == "__main__":
    main()
