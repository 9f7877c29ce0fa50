"""aasp_hf.training.monitors and the frozen-feature probes (aasp_hf.evaluation.probes, the clips listed by
aasp_hf.data.audiofolder) against independent computations, and examples/pretrain.py logging them."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.io import wavfile
from scipy.stats import entropy
from sklearn.linear_model import RidgeClassifier
from sklearn.neighbors import KNeighborsClassifier

from conftest import cli_args, tiny_config_kwargs

from aasp_hf import AaspConfig, AaspModel
from aasp_hf.data.audiofolder import list_audiofolder
from aasp_hf.evaluation.probes import knn_probe_accuracy, probe_accuracies, ridge_probe_accuracy
from aasp_hf.training.monitors import (
    collapse_statistics,
    effective_rank,
    lambda_statistics,
    pretraining_collapse_statistics,
    sblu_lambdas,
)

ROOT = Path(__file__).resolve().parents[1]
import pretrain


def matrix_with_singular_values(singular_values, n, d, seed=0):
    """U diag(s) Vᵀ with random orthonormal U (n, r), V (d, r)."""
    rng = np.random.default_rng(seed)
    r = len(singular_values)
    u = np.linalg.qr(rng.standard_normal((n, r)))[0]
    v = np.linalg.qr(rng.standard_normal((d, r)))[0]
    return torch.from_numpy(u @ np.diag(singular_values) @ v.T)


# ----------------------------------------------------------------------------------------------- collapse
def test_effective_rank_is_exp_entropy_of_normalised_singular_values():
    s = np.array([5.0, 3.0, 1.0, 0.5, 0.1])
    expected = np.exp(entropy(s / s.sum()))  # scipy: −Σ p log p, natural log
    assert effective_rank(matrix_with_singular_values(s, 40, 12)) == pytest.approx(expected, rel=1e-9)
    assert effective_rank(matrix_with_singular_values([2.0] * 6, 30, 8)) == pytest.approx(6.0)  # equal: the rank
    assert effective_rank(matrix_with_singular_values([7.0], 10, 5)) == pytest.approx(1.0)  # rank one
    assert effective_rank(torch.zeros(6, 4)) == 0.0
    with pytest.raises(ValueError, match="matrix"):
        effective_rank(torch.zeros(3))


def test_collapse_statistics_match_numpy_and_see_a_collapsed_batch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((50, 8)) * np.arange(1, 9) + 3.0  # per-dimension std 1..8 around a mean of 3
    stats = collapse_statistics(torch.from_numpy(x).float())
    std = x.std(axis=0, ddof=1)
    assert stats["std_mean"] == pytest.approx(std.mean(), rel=1e-5)
    assert stats["std_min"] == pytest.approx(std.min(), rel=1e-5)
    centred_s = np.linalg.svd(x - x.mean(0), compute_uv=False)
    assert stats["effective_rank"] == pytest.approx(np.exp(entropy(centred_s / centred_s.sum())), rel=1e-4)

    collapsed = collapse_statistics(torch.full((32, 8), 0.7))  # every row the same vector
    assert collapsed == {"std_mean": 0.0, "std_min": 0.0, "effective_rank": 0.0}
    # a batch that varies along one direction only has effective rank 1
    line = torch.from_numpy(rng.standard_normal((32, 1)) * rng.standard_normal((1, 8)) + 5.0).float()
    assert collapse_statistics(line)["effective_rank"] == pytest.approx(1.0, abs=1e-3)
    # max_rows keeps evenly spaced rows
    assert collapse_statistics(torch.from_numpy(x), max_rows=2)["std_mean"] == pytest.approx(
        x[[0, 49]].std(axis=0, ddof=1).mean()
    )


def test_pretraining_collapse_statistics_names_cls_clip_target_and_token_target():
    rng = np.random.default_rng(2)
    targets = rng.standard_normal((6, 10, 4))  # (B, N, D)
    cls = rng.standard_normal((6, 2, 4))  # (B, M, D)
    stats = pretraining_collapse_statistics(torch.from_numpy(cls), torch.from_numpy(targets))
    assert stats["target_clip_std_mean"] == pytest.approx(targets.mean(1).std(0, ddof=1).mean())
    assert stats["target_token_std_min"] == pytest.approx(targets.reshape(60, 4).std(0, ddof=1).min())
    assert stats["student_cls_std_mean"] == pytest.approx(cls.reshape(12, 4).std(0, ddof=1).mean())
    assert len(stats) == 9
    one_clip = pretraining_collapse_statistics(torch.from_numpy(cls[:1]), torch.from_numpy(targets[:1]))
    assert sorted(one_clip) == sorted(k for k in stats if not k.startswith("target_clip"))  # 1 clip: no ȳ spread


# ----------------------------------------------------------------------------------------------- SBLU (α, β)
def test_lambda_statistics_count_values_at_the_bounds():
    decay = torch.tensor([10.0, 10.05, 10.2, 20.0])  # α_min = 10: two within 1 %
    frequency = torch.tensor([[1.0, 1.009, 50.0], [99.5, 100.0, 60.0]])  # β in [1, 100]
    stats = lambda_statistics(decay, frequency, 10.0, 1.0, 100.0)
    assert stats["decay_at_min"] == 0.5
    assert stats["frequency_at_min"] == pytest.approx(2 / 6) and stats["frequency_at_max"] == pytest.approx(2 / 6)
    assert stats["decay_mean"] == pytest.approx(decay.double().mean().item())
    assert stats["frequency_std"] == pytest.approx(np.std(frequency.numpy().astype(np.float64)))


def test_sblu_lambdas_are_the_lambda_encoders_output_or_the_static_parameters():
    torch.manual_seed(0)
    model = AaspModel(AaspConfig(**tiny_config_kwargs())).train()
    mel = torch.randn(3, 64, 32)
    decay, frequency = sblu_lambdas(model, mel)
    assert model.training  # its mode is restored
    emb = model.embeddings  # independently: X_spec + positions through the Lambda encoder
    with torch.no_grad():
        tokens = emb.projection(mel[:, None]).flatten(2).transpose(1, 2) + emb.patch_positions(4)
        expected = emb.lambda_encoder(tokens)
    torch.testing.assert_close(decay, expected[0])
    torch.testing.assert_close(frequency, expected[1])
    assert decay.shape == (3, 8, 4) and (decay >= emb.sblu.decay_min).all()

    static = AaspModel(AaspConfig(**tiny_config_kwargs(sblu_adaptive=False)))
    decay, frequency = sblu_lambdas(static)
    torch.testing.assert_close(decay, static.embeddings.sblu.static_parameters()[0])
    assert frequency.shape == (8,)
    assert sblu_lambdas(AaspModel(AaspConfig(**tiny_config_kwargs(patch_embedding="spe"))), mel) is None


# ----------------------------------------------------------------------------------------------- probes
def clusters(num_classes, per_class, dim, spread, seed, points_seed=None):
    """Gaussian clusters (n, dim) around centres drawn with `seed`; the points with `points_seed` (default `seed`)."""
    centres = np.random.default_rng(seed).standard_normal((num_classes, dim)) * 3
    labels = np.repeat(np.arange(num_classes), per_class)
    rng = np.random.default_rng(seed if points_seed is None else points_seed)
    return centres[labels] + spread * rng.standard_normal((len(labels), dim)), labels


def test_knn_probe_matches_sklearn_and_scores_separable_and_shuffled_data():
    x, y = clusters(2, 40, 6, spread=5.0, seed=3)  # overlapping clusters: not every answer is right
    tx, ty = clusters(2, 30, 6, spread=5.0, seed=3, points_seed=12)
    reference = KNeighborsClassifier(n_neighbors=7, metric="cosine", algorithm="brute").fit(x, y)
    accuracy = knn_probe_accuracy(x, y, tx, ty, k=7)
    assert accuracy == pytest.approx(reference.score(tx, ty)) and 0.5 < accuracy < 1.0  # odd k, 2 labels: no ties

    x, y = clusters(4, 25, 16, spread=0.1, seed=4)
    test_x, test_y = clusters(4, 200, 16, spread=0.1, seed=4, points_seed=5)  # same centres, new points
    assert knn_probe_accuracy(x, y, test_x, test_y, k=5) == 1.0  # separable
    shuffled = np.random.default_rng(6).permutation(y)
    assert knn_probe_accuracy(x, shuffled, test_x, test_y, k=5) < 0.6  # labels no longer follow the clusters
    rng = np.random.default_rng(6)  # features that say nothing about the labels: chance, 1/4
    noise_accuracy = knn_probe_accuracy(
        rng.standard_normal((400, 16)),
        rng.integers(0, 4, 400),
        rng.standard_normal((1000, 16)),
        rng.integers(0, 4, 1000),
        k=15,
    )
    assert abs(noise_accuracy - 0.25) < 0.05


def test_knn_probe_breaks_label_ties_by_the_nearest_neighbour():
    train = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.1]])
    labels = np.array([1, 0, 0, 1])
    # k = 4: two votes each; label 1 owns the nearest neighbour of [1, 0.1]
    assert knn_probe_accuracy(train, labels, np.array([[1.0, 0.1]]), np.array([1]), k=4) == 1.0
    assert knn_probe_accuracy(train, labels, np.array([[0.1, 1.0]]), np.array([0]), k=4) == 1.0


@pytest.mark.parametrize("num_train", [20, 200])  # the dual (d > n) and the primal (d <= n) form
def test_ridge_probe_matches_sklearn_ridge_classifier(num_train):
    x, y = clusters(3, num_train // 3 + 1, 40, spread=6.0, seed=7)
    tx, ty = clusters(3, 40, 40, spread=6.0, seed=7, points_seed=8)
    for alpha in (0.5, 50.0):
        reference = RidgeClassifier(alpha=alpha, solver="cholesky").fit(x, y)
        assert ridge_probe_accuracy(x, y, tx, ty, alpha) == pytest.approx(reference.score(tx, ty)), alpha
    x, y = clusters(2, 30, 5, spread=0.1, seed=9)
    assert ridge_probe_accuracy(x, y, x, y) == 1.0
    with pytest.raises(ValueError, match="labels"):
        ridge_probe_accuracy(x, y[:-1], x, y)


def test_probe_accuracies_standardise_with_train_statistics_only():
    x, y = clusters(3, 20, 8, spread=0.5, seed=10)
    tx, ty = clusters(3, 10, 8, spread=0.5, seed=10, points_seed=11)
    scale = np.arange(1, 9) * 1e3  # per-dimension units must not matter
    assert probe_accuracies(x * scale + 7, y, tx * scale + 7, ty) == probe_accuracies(x, y, tx, ty)


# ----------------------------------------------------------------------------------------------- the script
def tone(freq, seconds=0.5, sr=16000, seed=0):
    t = np.arange(int(seconds * sr)) / sr
    noise = 0.01 * np.random.default_rng(seed).standard_normal(len(t))
    return (0.5 * np.sin(2 * np.pi * freq * t) + noise).astype(np.float32)


def write_probe_dataset(root):
    for split, count in (("train", 4), ("test", 2)):
        for label, freq in (("high", 3000.0), ("low", 200.0)):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                wavfile.write(folder / f"{i}.wav", 16000, tone(freq * (1 + 0.05 * i), seed=i))


def test_list_audiofolder_is_balanced_and_sorted(tmp_path):
    write_probe_dataset(tmp_path)
    paths, labels, classes = list_audiofolder(tmp_path, "train", max_clips=5)
    assert classes == ["high", "low"] and labels.tolist() == [0, 1, 0, 1, 0]
    assert [p.name for p in paths] == ["0.wav", "0.wav", "1.wav", "1.wav", "2.wav"]


MODEL = tiny_config_kwargs(
    predictor_hidden_size=32,
    predictor_num_layers=1,
    predictor_num_attention_heads=2,
    mask_num_views=2,
    mask_block_sizes=[[1, 2], [2, 1]],
)


def run(output_dir, **overrides):
    args = dict(
        synthetic_clips=10,
        synthetic_seconds=1.0,
        crop_seconds=0.5,
        model_config=json.dumps(MODEL),
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        max_steps=3,
        warmup_steps=1,
        logging_steps=2,
        save_steps=100,
        report_to="none",
        seed=3,
    )
    args.update(overrides)
    return pretrain.main(cli_args(**args))


def test_pretrain_logs_monitors_and_probe_without_changing_the_run(tmp_path):
    write_probe_dataset(tmp_path / "probe")
    run(tmp_path / "on", monitor_steps=1, probe_dataset=str(tmp_path / "probe"), probe_steps=2, probe_k=3)
    logs = [json.loads(line) for line in (tmp_path / "on" / "log_history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logs] == [0, 1, 2, 3]  # probe at 0; monitors every step; train/ at 2 and 3
    monitor_keys = [
        f"monitor/{what}_{stat}"
        for what in ("student_cls", "target_clip", "target_token")
        for stat in ("std_mean", "std_min", "effective_rank")
    ]
    monitor_keys += [
        f"monitor/sblu_{stat}"
        for stat in (
            "decay_mean",
            "decay_std",
            "decay_at_min",
            "frequency_mean",
            "frequency_std",
            "frequency_at_min",
            "frequency_at_max",
        )
    ]
    probe_keys = [
        f"probe/{encoder}_{score}" for encoder in ("student", "teacher") for score in ("knn_accuracy", "ridge_accuracy")
    ] + ["probe/chance_accuracy", "probe/seconds"]
    for record in logs[1:]:
        for key in monitor_keys + ["monitor/seconds"]:
            assert np.isfinite(record[key]), (record["step"], key)
    assert "train/loss" in logs[2] and "train/loss" not in logs[1]
    for record in (logs[0], logs[2], logs[3]):  # step 0, every 2 steps, the last
        assert all(np.isfinite(record[key]) for key in probe_keys), record["step"]
        assert all(0.0 <= record[key] <= 1.0 for key in probe_keys if "accuracy" in key)
    assert logs[0]["probe/chance_accuracy"] == 0.5
    assert logs[-1]["monitor/sblu_decay_mean"] > AaspConfig(**MODEL).sblu_step  # α ≥ α_min > 0
    assert logs[-1]["monitor/target_token_std_mean"] == pytest.approx(1.0, abs=0.2)  # normalised targets

    # the last probe equals an independent one on the exported student: extract_features + sklearn
    from aasp_hf import AaspFeatureExtractor
    from aasp_hf.evaluation import extract_features, standardization_stats, standardize

    student = AaspModel.from_pretrained(tmp_path / "on" / "encoder")
    extractor = AaspFeatureExtractor(feature_size=MODEL["num_mel_bins"], max_frames=MODEL["num_frames"])
    feats = {}
    for split in ("train", "test"):
        paths, labels, _ = list_audiofolder(tmp_path / "probe", split)
        waves = [wavfile.read(p)[1] for p in paths]
        inputs = extractor(
            waves,
            sampling_rate=16000,
            return_tensors="pt",
            padding="max_length",
            max_frames=MODEL["num_frames"],
            return_attention_mask=True,
        )
        feats[split] = extract_features(student, [dict(inputs)])[0], labels
    mean, std = standardization_stats(feats["train"][0])
    knn = KNeighborsClassifier(n_neighbors=3, metric="cosine", algorithm="brute")
    knn.fit(standardize(feats["train"][0], mean, std), feats["train"][1])
    assert logs[-1]["probe/student_knn_accuracy"] == knn.score(
        standardize(feats["test"][0], mean, std), feats["test"][1]
    )

    # monitors draw no random numbers and change no weights: the same run without them ends identically
    run(tmp_path / "off", monitor_steps=0)
    ranks = [json.loads((tmp_path / name / "ranks" / "rank0.json").read_text()) for name in ("on", "off")]
    assert ranks[0] == ranks[1]
    assert not any(
        k.startswith("monitor/")
        for line in (tmp_path / "off" / "log_history.jsonl").read_text().splitlines()
        for k in json.loads(line)
    )
