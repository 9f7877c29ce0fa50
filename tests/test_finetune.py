"""examples/finetune.py: layer-wise lr decay groups, the weight EMA, an end-to-end run on a tiny saved encoder with
synthetic clips (best-within-budget bookkeeping, the saved model in the audio-classification pipeline), the
multi-label path and exact resume."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import assert_states_close, tiny_config_kwargs

import finetune  # examples/finetune.py (pytest's pythonpath)

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification, AaspModel
from aasp_hf.training.model_ema import create_ema, ema_update_
from aasp_hf.training.optim import layer_decay_param_groups, set_learning_rates

# 128 mel bins (the feature extractor's), the standard conv patch embedding (fast on CPU), 0.5-s clips.
TINY_128 = tiny_config_kwargs(num_mel_bins=128, num_hidden_layers=1, patch_embedding="spe")
CLIP = [
    "--clip_seconds",
    "0.5",
    "--per_device_train_batch_size",
    "10",
    "--per_device_eval_batch_size",
    "32",
    "--learning_rate",
    "3e-3",
    "--warmup_steps",
    "2",
    "--logging_steps",
    "2",
    "--layer_decay",
    "0.75",
]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("encoder")
    AaspModel(AaspConfig(**TINY_128)).save_pretrained(path)
    AaspFeatureExtractor().save_pretrained(path)
    return path


def test_layer_decay_groups_scale_lr_by_depth_and_skip_decay_on_biases_norms_cls_positions():
    model = AaspForAudioClassification(AaspConfig(**tiny_config_kwargs(num_hidden_layers=2), num_labels=3))
    groups = layer_decay_param_groups(model, weight_decay=0.05, layer_decay=0.7)
    optimizer = torch.optim.AdamW(groups, lr=1.0)
    set_learning_rates(optimizer, 5e-5)
    lr_of, wd_of = {}, {}
    for group in optimizer.param_groups:
        for name in group["names"]:
            assert name not in lr_of
            lr_of[name], wd_of[name] = group["lr"], group["weight_decay"]
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert set(lr_of) == trainable
    L = 2
    expected_depth = lambda n: (
        0
        if n.startswith(("aasp.embeddings.", "aasp.cls_token", "aasp.embedding_norm."))  # noqa: E731
        else int(n.split(".")[2]) + 1
        if n.startswith("aasp.layers.")
        else L + 1
    )
    for name in trainable:
        assert lr_of[name] == pytest.approx(5e-5 * 0.7 ** (L + 1 - expected_depth(name))), name
    assert lr_of["classifier.dense.weight"] == pytest.approx(5e-5) and lr_of["aasp.cls_token"] == pytest.approx(
        5e-5 * 0.7**3
    )
    params = dict(model.named_parameters())
    no_decay = {n for n in trainable if wd_of[n] == 0.0}
    assert no_decay == {
        n
        for n in trainable
        if params[n].ndim < 2 or n.endswith(".bias") or "cls_token" in n or "position_embeddings" in n
    }
    assert {"aasp.cls_token", "classifier.dense.bias", "classifier.layernorm.weight"} <= no_decay
    matrices = {n for n in trainable if params[n].ndim == 2 and "position_embeddings" not in n}
    assert "classifier.dense.weight" in matrices and not matrices & no_decay
    assert all(wd_of[n] == 0.05 for n in trainable - no_decay) and len(trainable - no_decay) > 0


def test_model_ema_is_m_old_plus_one_minus_m_new():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    ema = create_ema(model)
    assert not any(p.requires_grad for p in ema.parameters()) and not ema.training
    old = {k: v.clone() for k, v in ema.state_dict().items()}
    model.train()(torch.randn(8, 4)).sum().backward()  # BatchNorm running stats and its int counter move
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    ema_update_(ema, model, decay=0.9)
    new = model.state_dict()
    for key, value in ema.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(value, 0.9 * old[key] + 0.1 * new[key])
        else:
            assert torch.equal(value, new[key])  # num_batches_tracked copied
    with pytest.raises(ValueError):
        ema_update_(ema, model, decay=1.5)


def synthetic_test_rows(per_class: int, multi_label: bool) -> list:
    """The test rows that a run with `--synthetic_per_class per_class` and CLIP's 0.5-s clips evaluates on."""
    argv = ["--model_name_or_path", "unused", "--synthetic_per_class", str(per_class), *CLIP]
    args = finetune.parse_args(argv + (["--synthetic_multi_label"] if multi_label else []))
    parts = finetune.load_parts(args).parts
    return parts["synthetic"]["test"]


@pytest.fixture(scope="module")
def single_label_run(encoder_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ft_single")
    argv = [
        "--model_name_or_path",
        str(encoder_dir),
        "--synthetic_per_class",
        "6",
        "--max_steps",
        "18",
        "--eval_steps",
        "6",
        "--mixup_alpha",
        "0.8",
        "--ema_decay",
        "0.6",
        "--output_dir",
        str(out),
        *CLIP,
    ]
    return finetune.main(argv), out


def test_best_validation_score_and_its_step_are_recorded_consistently(single_label_run):
    results, out = single_label_run
    stored = json.loads((out / "all_results.json").read_text())
    history = stored["eval_history"]
    assert [h["step"] for h in history] == [6, 12, 18] and stored["step"] == 18 and stored["finished"]
    best = max(h["valid_score"] for h in history)
    first_best = next(h for h in history if h["valid_score"] == best)
    assert stored["best_valid_score"] == best and stored["best_step"] == first_best["step"]
    assert stored["test_score"] == first_best["test_score"] == results["test_mean"]
    assert stored["metric"] == "accuracy" and stored["decode_failures"] == 0
    losses = [json.loads(line)["loss"] for line in (out / "log_history.jsonl").read_text().splitlines()]
    assert len(losses) == 9 and all(np.isfinite(losses))
    assert "synthetic accuracy" in (out / "results.md").read_text()
    # the log-mel baseline on the same clips (the run's evaluation crops, seeds 7 + split index), and the line that
    # says the model is below it when it is
    block = stored["baseline"]
    assert block["parts"]["synthetic"]["clips"] == {
        split: {"used": n, "of": n} for split, n in (("train", 30), ("validation", 15), ("test", 15))
    }
    assert block["settings"]["crop_seeds"] == {"train": 7, "validation": 8, "test": 9}
    assert block["parts"]["synthetic"]["C_chosen_on"] == "validation"
    markdown = (out / "results.md").read_text()
    assert f"**baseline accuracy: {100 * block['test_mean']:.2f}**" in markdown
    assert stored["test_mean"] < block["test_mean"] and stored["below_baseline"] in markdown


def test_saved_model_in_the_pipeline_reproduces_the_reported_test_accuracy(single_label_run):
    from transformers import pipeline

    from aasp_hf.data.synthetic import LABELS

    results, out = single_label_run
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {str(i): n for i, n in enumerate(LABELS)}
    assert config["problem_type"] == "single_label_classification" and config["drop_path_rate"] == 0.1
    test_rows = synthetic_test_rows(6, multi_label=False)  # the run's test clips (fixed data seed)
    classifier = pipeline("audio-classification", model=str(out), trust_remote_code=True)
    predicted = [classifier(row["audio"]["array"], top_k=1)[0]["label"] for row in test_rows]
    accuracy = np.mean([p == LABELS[row["label"]] for p, row in zip(predicted, test_rows)])
    assert accuracy == pytest.approx(results["test_score"])


def test_multi_label_path_uses_bce_and_reports_map(encoder_dir, tmp_path):
    from sklearn.metrics import average_precision_score
    from transformers import pipeline

    argv = [
        "--model_name_or_path",
        str(encoder_dir),
        "--synthetic_per_class",
        "4",
        "--synthetic_multi_label",
        "--max_steps",
        "4",
        "--eval_steps",
        "4",
        "--ema_decay",
        "0",
        "--no_spec_augment",
        "--output_dir",
        str(tmp_path),
        *CLIP,
    ]
    results = finetune.main(argv)
    assert results["metric"] == "mAP" and 0.0 < results["test_score"] <= 1.0
    assert json.loads((tmp_path / "config.json").read_text())["problem_type"] == "multi_label_classification"
    rows = synthetic_test_rows(4, multi_label=True)
    classifier = pipeline("audio-classification", model=str(tmp_path), trust_remote_code=True)
    names = classifier.model.config.id2label
    scores = np.array(
        [
            [
                {p["label"]: p["score"] for p in classifier(r["audio"]["array"], top_k=None)}[names[c]]
                for c in range(len(names))
            ]
            for r in rows
        ]
    )  # sigmoid scores (multi-label)
    labels = np.zeros_like(scores)
    for i, r in enumerate(rows):
        labels[i, r["labels"]] = 1
    expected = np.mean([average_precision_score(labels[:, c], scores[:, c]) for c in range(labels.shape[1])])
    assert expected == pytest.approx(results["test_score"], abs=1e-6)


def straight_and_resumed(common, tmp_path, stop_after: int, before_resume=None):
    """The fine-tuning command `common` run straight into tmp_path/straight, and into tmp_path/split stopped after
    `stop_after` steps and resumed (`before_resume(split)` in between, when given): the two output folders."""
    straight, split = tmp_path / "straight", tmp_path / "split"
    finetune.main(common + ["--output_dir", str(straight)])
    finetune.main(common + ["--output_dir", str(split), "--stop_after_steps", str(stop_after)])
    if before_resume is not None:
        before_resume(split)
    finetune.main(common + ["--output_dir", str(split), "--resume"])
    return straight, split


def test_resume_n_plus_n_equals_2n_including_ema(encoder_dir, tmp_path):
    common = [
        "--model_name_or_path",
        str(encoder_dir),
        "--synthetic_per_class",
        "4",
        "--max_steps",
        "8",
        "--eval_steps",
        "4",
        "--save_steps",
        "4",
        "--mixup_alpha",
        "0.8",
        "--ema_decay",
        "0.7",
        *CLIP,
    ]

    def stopped_at_4(split):
        assert (split / "checkpoint-4").is_dir() and not (split / "checkpoint-8").exists()

    straight, split = straight_and_resumed(common, tmp_path, 4, before_resume=stopped_at_4)
    a, b = (straight / "checkpoint-8", split / "checkpoint-8")
    weights_a, weights_b = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert_states_close(weights_b, weights_a)  # two computations: close, not bit-exact (depends on the CPU)
    ema_a, ema_b = (torch.load(c / "process_state_0.pt", weights_only=False)["ema"] for c in (a, b))
    assert not torch.equal(
        ema_a["classifier.dense.weight"], weights_a["classifier.dense.weight"]
    )  # the EMA is its own state
    assert_states_close(ema_b, ema_a)
    results_a, results_b = (json.loads((d / "all_results.json").read_text()) for d in (straight, split))
    assert [r["step"] for r in results_a["eval_history"]] == [r["step"] for r in results_b["eval_history"]]
    for ra, rb in zip(results_a["eval_history"], results_b["eval_history"]):
        assert rb == {k: pytest.approx(v, rel=1e-5) if isinstance(v, float) else v for k, v in ra.items()}
    assert results_b["best_step"] == results_a["best_step"]
    assert results_b["test_score"] == pytest.approx(results_a["test_score"], rel=1e-5)


# every option of a speaker-independent study on: the training clips' speed, vocal tract length and equalisation, each
# clip normalised on its own, frequency masks wider than the time masks
VOICE_AND_CHANNEL = [
    "--speed_perturbation",
    "0.9",
    "1.1",
    "--vtlp",
    "0.9",
    "1.1",
    "--random_eq_db",
    "6",
    "--per_clip_normalization",
    "--freq_mask_fraction",
    "0.4",
]


def test_voice_and_channel_options_train_save_the_per_clip_extractor_and_resume_exactly(encoder_dir, tmp_path):
    """With every new option on: the run trains, its saved feature extractor normalises each clip (and the pipeline
    loads it and feeds the model with it), the model card names the options, and 2 steps + --resume + 2 steps give
    the 4 steps of one run (the collator's generator, which draws the speeds, warps and curves, included)."""
    from transformers import pipeline

    common = [
        "--model_name_or_path",
        str(encoder_dir),
        "--synthetic_per_class",
        "4",
        "--max_steps",
        "4",
        "--eval_steps",
        "4",
        "--save_steps",
        "2",
        "--ema_decay",
        "0.5",
        "--baseline",
        "none",
        *CLIP,
        *VOICE_AND_CHANNEL,
    ]
    straight, split = straight_and_resumed(common, tmp_path, 2)

    saved = json.loads((straight / "preprocessor_config.json").read_text())
    assert saved["per_clip_normalization"] is True and saved["max_frames"] == 64
    card = (straight / "README.md").read_text()
    assert "speed ×0.9–1.1, VTLP α 0.9–1.1, random EQ ±6 dB, each clip normalised per mel bin" in card
    classifier = pipeline("audio-classification", model=str(straight), trust_remote_code=True)
    assert classifier.feature_extractor.per_clip_normalization is True
    clip = synthetic_test_rows(4, multi_label=False)[0]["audio"]["array"]
    model = AaspForAudioClassification.from_pretrained(straight).eval()
    cmvn = AaspFeatureExtractor(per_clip_normalization=True)
    with torch.no_grad():
        probabilities = model(**cmvn(clip, sampling_rate=16000, return_tensors="pt")).logits.softmax(-1)[0]
    scores = {p["label"]: p["score"] for p in classifier(clip, top_k=None)}
    expected = {model.config.id2label[i]: float(v) for i, v in enumerate(probabilities)}
    assert scores == {k: pytest.approx(v, abs=1e-5) for k, v in expected.items()}

    a, b = straight / "checkpoint-4", split / "checkpoint-4"
    assert_states_close(load_file(b / "model.safetensors"), load_file(a / "model.safetensors"))
    state_a, state_b = (torch.load(c / "process_state_0.pt", weights_only=False) for c in (a, b))
    assert state_a["collator"] == state_b["collator"] and state_a["augment_rng"] == state_b["augment_rng"]
    assert_states_close(state_b["ema"], state_a["ema"])
    history_a, history_b = (json.loads((d / "all_results.json").read_text())["eval_history"] for d in (straight, split))
    assert history_b == [{k: pytest.approx(v, rel=1e-5) for k, v in h.items()} for h in history_a]


def test_a_checkpoint_with_the_collator_under_its_old_key_resumes_exactly(encoder_dir, tmp_path):
    """Fine-tuning checkpoints written before both loops saved the collator's generator under one key held it as
    "collator_rng": such a checkpoint (its manifest rewritten as that code wrote it) resumes to the same state as the
    uninterrupted run."""
    from aasp_hf.training.checkpointing import HASH, file_hash

    common = [
        "--model_name_or_path",
        str(encoder_dir),
        "--synthetic_per_class",
        "4",
        "--max_steps",
        "4",
        "--eval_steps",
        "4",
        "--save_steps",
        "2",
        "--ema_decay",
        "0.5",
        "--baseline",
        "none",
        "--random_eq_db",
        "3",
        *CLIP,
    ]

    def write_the_old_key(split):
        checkpoint = split / "checkpoint-2"
        state = torch.load(checkpoint / "process_state_0.pt", weights_only=True)
        state["collator_rng"] = state.pop("collator")
        torch.save(state, checkpoint / "process_state_0.pt")
        manifest = json.loads((checkpoint / "manifest.json").read_text())
        manifest["process_state_0.pt"] = {
            "size": (checkpoint / "process_state_0.pt").stat().st_size,
            HASH: file_hash(checkpoint / "process_state_0.pt"),
        }
        (checkpoint / "manifest.json").write_text(json.dumps(manifest, indent=2))

    straight, split = straight_and_resumed(common, tmp_path, 2, before_resume=write_the_old_key)

    a, b = straight / "checkpoint-4", split / "checkpoint-4"
    assert_states_close(load_file(b / "model.safetensors"), load_file(a / "model.safetensors"))
    state_a, state_b = (torch.load(c / "process_state_0.pt", weights_only=True) for c in (a, b))
    assert state_b["collator"] == state_a["collator"] and "collator_rng" not in state_b


def test_voice_and_channel_options_reach_the_training_collator_only():
    """The training split's collator draws the speeds, warps and curves of the options (on the extractor's mel axis
    and units); validation and test collators get none of them."""
    from aasp_hf.training.augment import LogMelAugmentation
    from aasp_hf.training.finetuning_loop import FineTuningData, split_collator, training_collator

    args = finetune.parse_args(["--model_name_or_path", "x", "--synthetic_per_class", "4", *CLIP, *VOICE_AND_CHANNEL])
    extractor = AaspFeatureExtractor(per_clip_normalization=True)
    data = FineTuningData({}, False, 5, 0.5)
    train = training_collator(extractor, args, data, 0)
    assert train.speed_perturbation == (0.9, 1.1)
    assert train.log_mel_augmentation == LogMelAugmentation((0.9, 1.1), 6.0, 50.0, 8000.0, "slaney", 4.1)
    for split in ("validation", "test"):
        other = split_collator(extractor, args, data, split, seed=7)
        assert other.speed_perturbation is None and other.log_mel_augmentation is None
    plain = training_collator(extractor, finetune.parse_args(["--model_name_or_path", "x", *CLIP]), data, 0)
    assert plain.speed_perturbation is None and plain.log_mel_augmentation is None


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--speed_perturbation", "1.1", "0.9"], "--speed_perturbation 1.1 0.9: need 0 < LOW <= HIGH"),
        (["--vtlp", "0", "1.1"], "--vtlp 0 1.1: need 0 < LOW <= HIGH"),
        (["--vtlp", "0.9"], "--vtlp 0.9: give two factors, LOW HIGH"),
        (["--random_eq_db", "-3"], "--random_eq_db must be >= 0, got -3"),
        (["--freq_mask_fraction", "1.5"], "--freq_mask_fraction must be in [0, 1], got 1.5"),
    ],
)
def test_voice_and_channel_options_out_of_range_are_one_line(flags, message):
    with pytest.raises(finetune.UsageError) as error:
        finetune.parse_args(["--model_name_or_path", "x", "--synthetic_per_class", "4", *flags])
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "name, layer_decay, steps, warmup, min_lr, mixup",
    [
        ("as2m", 0.70, 300_000, 30_000, 1e-6, 0.8),
        ("as20k", 0.70, 40_000, 4_000, 1e-6, 0.8),
        ("esc50", 0.65, 8_000, 800, 1e-7, 0.0),
        ("scv2", 0.75, 160_000, 16_000, 1e-7, 0.8),
        ("cremad", 0.65, 8_000, 800, 1e-7, 0.0),
        ("nsynth", 0.65, 443_000, 44_000, 1e-7, 0.0),
        ("surge", 0.65, 233_000, 23_000, 1e-7, 0.0),
    ],
)
def test_presets_copy_table_hyperparams_1(name, layer_decay, steps, warmup, min_lr, mixup):
    preset = Path(__file__).resolve().parents[1] / "examples" / "configs" / "finetune" / f"{name}.json"
    args = finetune.parse_args(
        ["--config", str(preset), "--model_name_or_path", "x", "--max_steps", "7", "--warmup_steps", "1"]
    )  # (the preset's warm-up alone would exceed 7 steps)
    assert args.max_steps == 7  # the command line overrides the preset
    args = finetune.parse_args(["--config", str(preset), "--model_name_or_path", "x"])
    assert (args.layer_decay, args.max_steps, args.warmup_steps, args.min_learning_rate, args.mixup_alpha) == (
        layer_decay,
        steps,
        warmup,
        min_lr,
        mixup,
    )
    assert (args.learning_rate, args.weight_decay, args.adam_beta2, args.drop_path_rate) == (5e-5, 0.05, 0.95, 0.1)
    gpus = 4 if name in ("as2m", "as20k") else 1
    assert args.per_device_train_batch_size * gpus == 128 and args.seeds == [0, 1, 2]
    if gpus > 1:  # the preset states the paper's global batch: one process accumulates 4 micro-batches of 32
        assert args.total_train_batch_size == 128
        assert (
            finetune.gradient_accumulation_for(
                args.total_train_batch_size, args.per_device_train_batch_size, 1, args.gradient_accumulation_steps
            )
            == 4
        )
    # the AudioSet presets train on all of AS-20K / AS-2M and select on the eval set (EAT); ESC-50 on the test fold
    assert args.select_on == ("test" if name in ("as2m", "as20k", "esc50") else "validation")
    assert (args.ema_decay, args.spec_augment) == ((0.0, False) if name == "esc50" else (0.995, True))
    assert args.class_balanced_sampling == (name == "as2m")


def test_select_on_test_and_last_and_the_global_batch_by_accumulation(encoder_dir, tmp_path):
    """--select_on test: the best test score within the budget; --select_on last: the last step's. Both train on
    the whole training set and record the rule. --total_train_batch_size 20 with 10 per device on one process
    accumulates 2 micro-batches per step (and records it)."""
    common = [
        "--model_name_or_path",
        str(encoder_dir),
        "--synthetic_per_class",
        "4",
        "--max_steps",
        "4",
        "--eval_steps",
        "2",
        "--save_steps",
        "4",
        "--ema_decay",
        "0",
        *CLIP,
        "--total_train_batch_size",
        "20",
    ]
    picked = finetune.main(common + ["--select_on", "test", "--output_dir", str(tmp_path / "test")])
    history = picked["eval_history"]
    assert [h["step"] for h in history] == [2, 4] and all("valid_score" not in h for h in history)
    best = max(h["test_score"] for h in history)
    assert picked["test_score"] == best and picked["best_step"] == next(
        h["step"] for h in history if h["test_score"] == best
    )
    assert picked["select_on"] == "test" and "selection on the test split" in picked["selection_rule"]
    assert (picked["gradient_accumulation_steps"], picked["total_train_batch_size"]) == (2, 20)
    losses = [json.loads(line) for line in (tmp_path / "test" / "log_history.jsonl").read_text().splitlines()]
    assert len(losses) == 2  # logged every 2 optimiser steps (each of 2 micro-batches of 10 clips)
    assert "--select_on test" in (tmp_path / "test" / "results.md").read_text()
    assert "held out" in picked["baseline"]["parts"]["synthetic"]["C_chosen_on"]  # no validation split: C on train

    last = finetune.main(common + ["--select_on", "last", "--baseline", "none", "--output_dir", str(tmp_path / "last")])
    assert last["best_step"] == 4 and last["test_score"] == last["eval_history"][-1]["test_score"]
    assert "baseline" not in json.loads((tmp_path / "last" / "all_results.json").read_text())
    assert last["select_on"] == "last" and (tmp_path / "last" / "model.safetensors").is_file()

    args = finetune.parse_args(["--model_name_or_path", "x", "--kfold_validation", "test"])  # the old spelling
    assert (args.select_on, args.kfold_validation) == ("test", "evar")
    with pytest.raises(ValueError, match="not a multiple"):
        finetune.main(common[:-1] + ["25", "--output_dir", str(tmp_path / "odd")])


def test_classifier_pooling_mean_is_what_the_saved_classifier_reads(encoder_dir, tmp_path):
    """--classifier_pooling mean: the head reads the mean of the patch tokens (the encoder's config says cls), in the
    run and in the saved model; another value is one line."""
    assert json.loads((encoder_dir / "config.json").read_text())["classifier_pooling"] == "cls"
    finetune.main(
        [
            "--model_name_or_path",
            str(encoder_dir),
            "--synthetic_per_class",
            "4",
            "--max_steps",
            "2",
            "--eval_steps",
            "2",
            "--classifier_pooling",
            "mean",
            "--output_dir",
            str(tmp_path),
            *CLIP,
        ]
    )
    model = AaspForAudioClassification.from_pretrained(tmp_path)
    assert model.config.classifier_pooling == "mean"
    hidden = torch.randn(2, 5, model.config.hidden_size)
    assert torch.equal(model.pool(hidden), hidden[:, 1:].mean(dim=1))
    with pytest.raises(finetune.UsageError, match="--classifier_pooling max: use cls"):
        finetune.parse_args(
            ["--model_name_or_path", str(encoder_dir), "--synthetic_per_class", "4", "--classifier_pooling", "max"]
        )


def test_masked_clip_padding_gives_the_logits_of_the_short_clip_alone(encoder_dir):
    """--clip_padding masked: a clip shorter than the clip length is padded in frames that the attention mask marks,
    so a classifier reads what it reads from the clip alone (as the pipeline gives it a whole clip); with zeros
    appended to the waveform it reads the silence too."""
    from aasp_hf.data import AaspFineTuningCollator

    torch.manual_seed(0)
    model = AaspForAudioClassification.from_pretrained(encoder_dir, num_labels=3, classifier_pooling="mean").eval()
    extractor = AaspFeatureExtractor()
    short = (0.1 * np.random.default_rng(0).standard_normal(5600)).astype(np.float32)  # 0.35 s against 1-s crops
    rows = [{"audio": {"array": short, "sampling_rate": 16000}, "label": 0}]
    alone = extractor(short, sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        expected = model(**alone).logits
        logits = {}
        for padding in ("masked", "zeros"):
            batch = AaspFineTuningCollator(extractor, clip_seconds=1.0, split="test", padding=padding)(rows)
            logits[padding] = model(input_values=batch["input_values"], attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(logits["masked"], expected, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(logits["zeros"], expected, atol=1e-3)


def test_small_folder_preset_and_clip_padding_choices(encoder_dir):
    """The small-folder preset (docs/downstream.md#a-small-folder-of-your-own-clips): the recipe measured in
    research/2026-11-small-data-recipe, the last step kept (research/2026-11-what-transfers), speed perturbation and
    VTLP (research/2026-12-unseen-words), the EMA and warm-up derived from its 1,500 steps; another --clip_padding is
    one line."""
    preset = Path(__file__).resolve().parents[1] / "examples" / "configs" / "finetune" / "small_folder.json"
    args = finetune.parse_args(
        ["--config", str(preset), "--model_name_or_path", "x", "--dataset", "audiofolder", "--data_root", "y"]
    )
    assert (
        args.classifier_pooling,
        args.learning_rate,
        args.layer_decay,
        args.per_device_train_batch_size,
        args.max_steps,
        args.clip_padding,
        args.select_on,
    ) == ("mean", 4e-3, 1.0, 32, 1500, "masked", "last")
    assert (args.ema_decay, args.warmup_steps, args.spec_augment, args.drop_path_rate) == (0.9933, 100, True, 0.1)
    # speed perturbation and VTLP: what carried words to voices training never heard (research/2026-12-unseen-words)
    assert (args.speed_perturbation, args.vtlp) == ([0.9, 1.1], [0.9, 1.1])
    with pytest.raises(finetune.UsageError, match="--clip_padding edge: use zeros"):
        finetune.parse_args(
            ["--model_name_or_path", str(encoder_dir), "--synthetic_per_class", "4", "--clip_padding", "edge"]
        )
