"""examples/linear_eval.py and the frozen-feature helpers: pooling, padding, standardisation, the one-pass lr grid
(aasp_hf.evaluation.linear_heads), an end-to-end run on a tiny saved encoder with synthetic clips, and resume; then
the script as a real process: one evaluation per folder, a stop signal, the rerun that reuses what was saved, and
paths that cannot be used (docs/reliability.md, "Linear evaluation")."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import tiny_config_kwargs
from test_run_folder import error_lines, mount_tmpfs, wait_for
from test_stop_signals import signal_when, start

import linear_eval

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel
from aasp_hf.evaluation import (
    baseline,
    extract_features,
    linear_protocol,
    pool_features,
    standardization_stats,
    standardize,
)
from aasp_hf.evaluation.linear_heads import final_test_score, train_linear_heads
from aasp_hf.utils.entry_points import STOPPED_EXIT_CODE

TINY_128 = tiny_config_kwargs(num_mel_bins=128, num_hidden_layers=1, sblu_hidden_size=16, sblu_output_size=16)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("encoder")
    AaspModel(AaspConfig(**TINY_128)).save_pretrained(path)
    AaspFeatureExtractor().save_pretrained(path)
    return path


def test_pooled_features_are_cls_then_time_averaged_frequency_rows():
    hidden = torch.randn(2, 1 + 3 * 4, 5)  # (B, 1 + T̃·F̃, D) with T̃=3, F̃=4
    pooled = pool_features(hidden, None, num_frequency_patches=4)
    assert pooled.shape == (2, 5 + 4 * 5)
    assert torch.equal(pooled[:, :5], hidden[:, 0])
    for f in range(4):  # token t·F̃ + f, averaged over t
        expected = hidden[:, 1 + f :: 4].mean(1)
        torch.testing.assert_close(pooled[:, 5 + 5 * f : 5 + 5 * (f + 1)], expected)
    mask = torch.ones(2, 13, dtype=torch.bool)
    mask[1, 1 + 2 * 4 :] = False  # clip 1: only the first 2 time patches are real
    masked = pool_features(hidden, mask, 4)
    torch.testing.assert_close(masked[1, 5:10], hidden[1, [1, 5]].mean(0))


def test_extract_features_dimension_and_padding_tokens_excluded(encoder_dir):
    model = AaspModel.from_pretrained(encoder_dir)
    c = model.config
    rng = np.random.default_rng(0)
    short, long = rng.normal(0, 0.1, 8000).astype(np.float32), rng.normal(0, 0.1, 16000).astype(np.float32)
    fe = AaspFeatureExtractor()
    together, _ = extract_features(model, [dict(fe([short, long], sampling_rate=16000, return_tensors="pt"))])
    alone, _ = extract_features(model, [dict(fe([short], sampling_rate=16000, return_tensors="pt"))])
    assert together.shape == (2, c.hidden_size + c.num_frequency_patches * c.hidden_size)  # D + F̃·D = 32 + 8·32
    np.testing.assert_allclose(together[0], alone[0], atol=2e-5)  # padding tokens do not leak into the average


def test_standardisation_uses_train_statistics_only():
    rng = np.random.default_rng(0)
    train = rng.normal(3.0, 2.0, (500, 4)).astype(np.float32)
    train[:, 3] = 7.0  # a constant dimension
    test = rng.normal(5.0, 2.0, (300, 4)).astype(np.float32)
    mean, std = standardization_stats(train)
    z_train, z_test = standardize(train, mean, std), standardize(test, mean, std)
    np.testing.assert_allclose(z_train[:, :3].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(z_train[:, :3].std(0), 1, atol=1e-4)
    assert np.all(np.isfinite(z_test)) and std[3] == 1.0
    np.testing.assert_allclose(z_test, (test - train.mean(0)) / np.where(train.std(0) > 0, train.std(0), 1), atol=1e-4)
    assert z_test[:, :3].mean() > 0.7  # test statistics were NOT used (that would centre it at 0)


def separable(seed, n, dim=16, num_classes=3):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(0, 1.5, (num_classes, dim))
    y = rng.integers(0, num_classes, n)
    return (centres[y] + rng.normal(0, 1, (n, dim))).astype(np.float32), y


def test_several_learning_rates_in_one_pass_equal_separate_runs():
    train, valid, test = separable(0, 200), separable(1, 60), separable(2, 60)
    lrs = [1e-3, 1e-2, 5e-2]
    common = dict(multi_label=False, num_classes=3, max_steps=40, batch_size=32, eval_steps=5, seed=7)
    joint = train_linear_heads(train, valid, test, lrs, **common)
    for l, lr in enumerate(lrs):
        alone = train_linear_heads(train, valid, test, [lr], **common)
        torch.testing.assert_close(joint["weights"][l], alone["weights"][0], atol=1e-6, rtol=0)
        torch.testing.assert_close(joint["biases"][l], alone["biases"][0], atol=1e-6, rtol=0)
        assert joint["valid_scores"][l] == alone["valid_scores"][0]
        assert joint["test_scores"][l] == alone["test_scores"][0]
        assert joint["best_steps"][l] == alone["best_steps"][0]
    assert joint["chosen_index"] == int(np.argmax(joint["valid_scores"]))
    assert joint["test_score"] > 0.9  # the data are separable: the probe learns
    assert not torch.equal(joint["weights"][0], joint["weights"][2])  # different lrs really differ


def test_multi_label_heads_use_bce_and_report_map():
    rng = np.random.default_rng(0)

    def split(n):
        y = (rng.random((n, 4)) < 0.4).astype(np.float32)
        return (y.repeat(3, axis=1) + rng.normal(0, 0.5, (n, 12))).astype(np.float32), y  # 3 noisy copies per label

    train, valid, test = split(200), split(50), split(50)
    result = train_linear_heads(
        train, valid, test, [1e-2], multi_label=True, num_classes=4, max_steps=60, batch_size=32, eval_steps=10, seed=0
    )
    assert result["test_logits"].shape == (50, 4)
    from aasp_hf.metrics import load_metric

    score = final_test_score(load_metric("mean_average_precision"), result["test_logits"], test[1], True)
    assert score == pytest.approx(result["test_score"], abs=1e-6) and score > 0.8


def test_end_to_end_on_synthetic_clips_and_resume(encoder_dir, tmp_path):
    out = tmp_path / "run"
    argv = [
        "--model_name_or_path",
        str(encoder_dir),
        "--synthetic_per_class",
        "4",
        "--max_steps",
        "12",
        "--eval_steps",
        "4",
        "--batch_size",
        "8",
        "--learning_rates",
        "1e-3",
        "3e-2",
        "--seeds",
        "0",
        "1",
        "--feature_batch_size",
        "10",
        "--output_dir",
        str(out),
    ]
    results = linear_eval.main(argv)
    assert results["feature_dim"] == 32 + 8 * 32 and results["num_classes"] == 5 and results["metric"] == "accuracy"
    stored = json.loads((out / "all_results.json").read_text())
    assert stored == json.loads(json.dumps(results))
    assert len(stored["runs"]) == 2
    for run in stored["runs"]:  # the chosen lr is the best on validation, and its test score is reported
        assert run["chosen_learning_rate"] == run["learning_rates"][int(np.argmax(run["valid_scores"]))]
        assert run["test_score"] == pytest.approx(run["test_scores"][run["chosen_index"]], abs=1e-9)
        assert 0.0 <= run["test_score"] <= 1.0 and run["best_steps"][run["chosen_index"]] in (4, 8, 12)
    per_seed = [r["test_score"] for r in stored["runs"]]
    assert stored["test_mean"] == pytest.approx(np.mean(per_seed))
    assert stored["test_std"] == pytest.approx(np.std(per_seed, ddof=1))
    assert f"{100 * stored['test_mean']:.2f} ± {100 * stored['test_std']:.2f}" in (out / "results.md").read_text()
    feats = out / "features" / "synthetic"
    assert np.load(feats / "features_train.npy").shape == (20, 288)
    assert np.load(feats / "labels_test.npy").shape == (10,)
    # the log-mel baseline beside the model: the same clips, its crops seeded as the features' are; the tiny encoder
    # trained 12 steps is below it, which all_results.json and results.md say in one line
    block = stored["baseline"]
    assert block["name"] == baseline.NAME and list(block["parts"]) == ["synthetic"]
    assert block["parts"]["synthetic"]["clips"] == {
        split: {"used": n, "of": n} for split, n in (("train", 20), ("validation", 10), ("test", 10))
    }
    assert block["settings"]["crop_seeds"] == {"train": 0, "validation": 1, "test": 2} and block["capped"] == []
    assert stored["test_mean"] < block["test_mean"]
    assert stored["below_baseline"] == baseline.compare(stored["test_mean"], block, "accuracy")
    markdown = (out / "results.md").read_text()
    assert stored["below_baseline"] in markdown and f"**baseline accuracy: {100 * block['test_mean']:.2f}**" in markdown

    # resume: nothing is recomputed — neither the cached features nor the finished runs
    cached = {p: p.stat().st_mtime_ns for p in list(feats.iterdir()) + list((out / "runs").iterdir())}
    calls = []
    original = linear_protocol.extract_features
    linear_protocol.extract_features = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        again = linear_eval.main(argv)
    finally:
        linear_protocol.extract_features = original
    assert calls == [] and {p: p.stat().st_mtime_ns for p in cached} == cached
    assert again["runs"] == results["runs"] and again["test_mean"] == results["test_mean"]

    # a third seed trains only that seed; features of another data setting in the same cache are refused
    third = linear_eval.main(argv[:-6] + ["0", "1", "2"] + argv[-4:])
    assert [r["seed"] for r in third["runs"]] == [0, 1, 2] and third["runs"][:2] == results["runs"]
    with pytest.raises(ValueError, match="another setting"):
        linear_eval.main(argv + ["--feature_seed", "1"])


def test_k_fold_dataset_from_the_loader(encoder_dir, tmp_path):
    """A fake ESC-50 (official layout, 44.1 kHz WAVs): one part per test fold, validation = a seeded random 10 % of
    the other folds (EVAR), each clip padded to the EVAR length (5 s here shortened to 1 s), scores averaged over
    the folds."""
    import soundfile as sf

    root = tmp_path / "ESC-50-master"
    (root / "audio").mkdir(parents=True)
    (root / "meta").mkdir()
    lines = ["filename,fold,target,category,esc10,src_file,take"]
    rng = np.random.default_rng(0)
    for fold in range(1, 6):
        for target, category in enumerate(["dog", "rooster"]):
            name = f"{fold}-{100 + target}-A-{target}.wav"
            lines.append(f"{name},{fold},{target},{category},False,{100 + target},A")
            t = np.arange(int(0.4 * 44100)) / 44100
            sf.write(
                root / "audio" / name,
                (0.3 * np.sin(2 * np.pi * (300 + 2000 * target) * t) + 0.01 * rng.normal(size=t.shape)).astype(
                    np.float32
                ),
                44100,
            )
    (root / "meta" / "esc50.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "esc"
    results = linear_eval.main(
        [
            "--model_name_or_path",
            str(encoder_dir),
            "--dataset",
            "esc50",
            "--data_root",
            str(root),
            "--clip_seconds",
            "1.0",
            "--folds",
            "1",
            "4",
            "--max_steps",
            "6",
            "--eval_steps",
            "3",
            "--batch_size",
            "4",
            "--seeds",
            "0",
            "--output_dir",
            str(out),
        ]
    )
    assert results["parts"] == ["fold1", "fold4"] and results["num_classes"] == 2
    for part in ("fold1", "fold4"):  # 4 other folds of 2 clips: 7 train, 1 (10 %) validation; 1 test fold of 2
        sizes = [len(np.load(out / "features" / part / f"labels_{s}.npy")) for s in ("train", "validation", "test")]
        assert sizes == [7, 1, 2]
    assert results["kfold_validation"] == "evar" and "EVAR" in results["validation_rule"]
    for part in ("fold1", "fold4"):  # the baseline on the same folds and the same train / validation / test clips
        clips = results["baseline"]["parts"][part]["clips"]
        assert [clips[s]["used"] for s in ("train", "validation", "test")] == [7, 1, 2]
    assert "random 10% of the training folds" in (out / "results.md").read_text()
    assert results["test_per_seed"]["0"] == pytest.approx(np.mean([r["test_score"] for r in results["runs"]]))


# ----------------------------------------------------------------------------------------------- as a real process
SCRIPT = [sys.executable, str(Path(__file__).resolve().parents[1] / "examples" / "linear_eval.py")]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def command(encoder_dir, output_dir, *extra, max_steps=12, seeds=("0",)):
    """linear_eval.py on 4 synthetic clips per class, without the baseline unless `extra` asks for it."""
    return [
        *SCRIPT,
        "--model_name_or_path",
        str(encoder_dir),
        "--synthetic_per_class",
        "4",
        "--max_steps",
        str(max_steps),
        "--eval_steps",
        "4",
        "--batch_size",
        "8",
        "--seeds",
        *seeds,
        "--output_dir",
        str(output_dir),
        "--baseline",
        "none",
        *extra,
    ]


def run(argv) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # two script processes
def test_a_second_evaluation_into_a_held_folder_is_refused_in_one_line(encoder_dir, tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen(
        command(encoder_dir, out, max_steps=10**7), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert wait_for(lambda: (out / "features" / "synthetic" / "labels_test.npy").is_file(), timeout=300)
        second = run(command(encoder_dir, out))
        assert second.returncode == 2, second.stderr[-3000:]
        [line] = error_lines(second.stderr)
        assert line.startswith(f"linear_eval.py: error: {out} is in use by another run: process {first.pid} on ")
        assert "choose another --output_dir" in line
        assert "frozen encoder" not in second.stdout  # refused before the model was loaded
        assert first.poll() is None and json.loads((out / "run.lock").read_text())["pid"] == first.pid
    finally:
        first.kill()
        first.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow  # a script process stopped, then run again
def test_a_stop_signal_is_one_line_and_exit_75_and_the_rerun_says_what_it_reuses(encoder_dir, tmp_path, sig):
    """The signal again every 20 ms until the process exits, once the first of three seeds is done. The rerun (after
    SIGTERM) reuses the cached features and that seed's heads, and says so; a third run into the finished folder
    reuses everything and says that."""
    out = tmp_path / "run"
    argv = command(encoder_dir, out, max_steps=1000, seeds=("0", "1", "2"))
    proc = start(argv, tmp_path / "run.log")
    status = signal_when(lambda: proc.pid, proc, (out / "runs" / "synthetic_seed0.json").is_file, sig, timeout=300)
    output = (tmp_path / "run.log").read_text()
    assert status == STOPPED_EXIT_CODE, output[-3000:]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    lines = [line for line in output.replace("\r", "\n").splitlines() if "stopped by" in line]
    assert lines == [
        f"linear_eval.py: stopped by {sig.name}; the features and heads it finished are kept in "
        f"--output_dir (features/, runs/), and the same command reuses them; continue with: python "
        f"{argv[1]} {' '.join(argv[2:])} (exit status {STOPPED_EXIT_CODE})"
    ], output[-3000:]
    assert not (out / "run.lock").exists() and not list(out.rglob("*.tmp*"))  # the hold given back, nothing partial
    finished = sorted(p.name for p in (out / "runs").iterdir())
    assert "synthetic_seed0.json" in finished and len(finished) < 3
    if sig != signal.SIGTERM:  # the rerun is the same after either signal
        return
    kept = {name: (out / "runs" / name).stat().st_mtime_ns for name in finished}
    rerun = run(argv)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (
        f"   reused from {out}: the cached features of 3 of 3 splits (features/) and the heads of {len(finished)} "
        f"of 3 (part, seed) runs (runs/)\n"
    ) in rerun.stdout
    assert {name: (out / "runs" / name).stat().st_mtime_ns for name in finished} == kept
    assert [r["seed"] for r in json.loads((out / "all_results.json").read_text())["runs"]] == [0, 1, 2]
    again = run(argv)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (
        f"   reused from {out}: the cached features of 3 of 3 splits (features/) and the heads of 3 of 3 (part, "
        "seed) runs (runs/); nothing was extracted or trained again\n"
    ) in again.stdout


@pytest.mark.slow  # script processes on a read-only folder and a full tmpfs
def test_a_read_only_or_full_disk_is_one_line_with_advice_the_script_takes_and_nothing_partial(encoder_dir, tmp_path):
    """linear_eval.py has no --resume: its advice is the same command again, which reuses what is whole. A 40-KB
    tmpfs holds the train split's features but not the validation split's; the rerun on a larger disk reuses the
    split that was written and extracts the others."""
    read_only = mount_tmpfs(tmp_path / "ro", "ro,size=1m")
    try:
        refused = run(command(encoder_dir, read_only / "run"))
        assert refused.returncode == 2 and "--resume" not in refused.stderr, refused.stderr[-3000:]
        assert error_lines(refused.stderr) == [
            f"linear_eval.py: error: --output_dir {read_only / 'run'} cannot be "
            f"written (Read-only file system: {read_only / 'run'}); choose an "
            "--output_dir on a writable disk. Nothing was started."
        ]
    finally:
        subprocess.run(["umount", "-l", str(read_only)], check=False)
    disk = mount_tmpfs(tmp_path / "disk", "size=40k")
    try:
        out = disk / "run"
        full = run(command(encoder_dir, out))
        assert full.returncode == 2 and "--resume" not in full.stderr, full.stderr[-3000:]
        [line] = error_lines(full.stderr)
        assert line.startswith(
            f"linear_eval.py: error: cannot write {out}/features/synthetic/features_validation.npy: "
            "No space left on device"
        ) and line.endswith(
            "then run the same command again: it reuses the features and heads already in --output_dir."
        )
        assert sorted(p.name for p in (out / "features" / "synthetic").iterdir()) == [
            "features_train.npy",
            "labels_train.npy",
        ]
        assert np.load(out / "features" / "synthetic" / "features_train.npy").shape == (20, 288)  # whole
        assert not (out / "run.lock").exists()
        subprocess.run(["mount", "-o", "remount,size=2m", str(disk)], check=True)
        again = run(command(encoder_dir, out))
        assert again.returncode == 0, again.stderr[-3000:]
        assert (
            f"reused from {out}: the cached features of 1 of 3 splits (features/) and the heads of 0 of 1 (part, "
            "seed) runs (runs/)\n"
        ) in again.stdout
        assert not list(out.rglob("*.tmp"))
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("script", ["linear_eval.py", "finetune.py"])
@pytest.mark.slow  # script processes
def test_an_output_dir_that_is_a_file_or_a_data_root_that_is_not_there_is_one_line_and_creates_nothing(
    encoder_dir, tmp_path, script
):
    base = [
        sys.executable,
        str(Path(SCRIPT[1]).with_name(script)),
        "--model_name_or_path",
        str(encoder_dir),
        "--max_steps",
        "2",
    ]
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    for output_dir, where in ((a_file, "is a file"), (a_file / "run", f"lies under {a_file}, which is a file")):
        refused = run([*base, "--synthetic_per_class", "2", "--output_dir", str(output_dir)])
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert error_lines(refused.stderr) == [
            f"{script}: error: --output_dir {output_dir} {where}, not a folder: "
            "choose another --output_dir (a new or existing folder). Nothing was "
            "started."
        ]
    assert a_file.read_text() == "mine"
    missing = run(
        [*base, "--dataset", "esc50", "--data_root", str(tmp_path / "ESC-50"), "--output_dir", str(tmp_path / "out")]
    )
    assert missing.returncode == 2, missing.stderr[-3000:]
    assert error_lines(missing.stderr) == [
        f"{script}: error: ESC-50 metadata file meta/esc50.csv not found: "
        f"{tmp_path / 'ESC-50' / 'meta' / 'esc50.csv'} does not exist. It ships with "
        "ESC-50 (https://github.com/karolpiczak/ESC-50: meta/esc50.csv with columns "
        "filename,fold,target,category,esc10,src_file,take; audio/<filename>)."
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no folder left behind


def test_results_equal_to_the_baseline_say_equal(encoder_dir, tmp_path):
    """Two pure tones an octave apart are learnt perfectly by the probe on the tiny encoder and by the baseline: both
    score 100 %, and the verdict says so (it used to say nothing)."""
    import soundfile as sf

    rng = np.random.default_rng(0)
    for split, count in (("train", 8), ("validation", 3), ("test", 3)):
        for label, frequency in (("low", 200), ("high", 5000)):
            (tmp_path / "tones" / split / label).mkdir(parents=True)
            for i in range(count):
                t = np.arange(16000) / 16000
                tone = 0.5 * np.sin(2 * np.pi * frequency * (1 + 0.01 * i) * t) + 0.01 * rng.normal(size=t.shape)
                sf.write(tmp_path / "tones" / split / label / f"{i}.wav", tone.astype(np.float32), 16000)
    out = tmp_path / "run"
    result = run(
        [
            *SCRIPT,
            "--model_name_or_path",
            str(encoder_dir),
            "--dataset",
            "audiofolder",
            "--data_root",
            str(tmp_path / "tones"),
            "--max_steps",
            "50",
            "--eval_steps",
            "25",
            "--batch_size",
            "8",
            "--learning_rates",
            "1e-2",
            "--seeds",
            "0",
            "--output_dir",
            str(out),
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stored = json.loads((out / "all_results.json").read_text())
    assert stored["test_mean"] == stored["baseline"]["test_mean"] == 1.0
    verdict = (
        "equal to the log-mel baseline: 100.0 vs 100.0 % accuracy (log-mel statistics + logistic regression on "
        "the same splits); see docs/downstream.md#the-log-mel-baseline"
    )
    assert stored["baseline_verdict"] == verdict and "below_baseline" not in stored
    assert f"   the model is {verdict}\n" in result.stdout
    assert f"**The model is {verdict}.**" in (out / "results.md").read_text()


def test_a_dataset_without_its_folder_is_one_line_before_the_model_loads(tmp_path):
    """linear_eval.py reads its data before the encoder: `--dataset audiofolder` without `--data_root` is one line,
    said before any model is loaded (the model path here does not even exist), and nothing is created."""
    out = tmp_path / "out"
    refused = run(
        [
            sys.executable,
            SCRIPT[1],
            "--model_name_or_path",
            str(tmp_path / "no_model"),
            "--dataset",
            "audiofolder",
            "--output_dir",
            str(out),
        ]
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert error_lines(refused.stderr) == [
        "linear_eval.py: error: load('audiofolder') needs root= the dataset's folder in its official layout "
        "(the scripts' --data_root)."
    ]
    assert "1. data" in refused.stdout and "frozen encoder" not in refused.stdout
    assert not out.exists()
