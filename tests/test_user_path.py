"""The paths a new user walks: what pre-training exports takes whole clips, exported encoders fine-tune
through transformers' own Auto classes and Trainer as remote code, scripts refuse to overwrite a run, audiofolders
without split folders work, and the pipeline / extractor take the inputs the docs promise."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import conftest
from conftest import TINY_PRETRAINING_MODEL, finetune_argv, run_without_aasp_hf

ROOT = Path(__file__).resolve().parents[1]
import pretrain

import aasp_hf  # noqa: F401  (registers the Auto classes)
from aasp_hf import AaspFeatureExtractor

MODEL = TINY_PRETRAINING_MODEL
SR = 16000


def pretrain_argv(output_dir, **overrides):
    """conftest.py's pre-training command on 4 clips: 2 steps after a 1-step warm-up, no checkpoint before the end,
    seed 0."""
    options = {"synthetic_clips": 4, "max_steps": 2, "warmup_steps": 1, "save_steps": 100, "seed": 0, **overrides}
    return conftest.pretrain_argv(output_dir, **options)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A 2-step pre-training run of examples/pretrain.py; its folder (encoder/ inside)."""
    output_dir = tmp_path_factory.mktemp("user_path") / "pt"
    pretrain.main(pretrain_argv(output_dir))
    return output_dir


# ----------------------------------------------------------------------------------------------- 1. no truncation
def test_exported_encoder_gives_tokens_for_the_whole_of_a_60_second_clip(pretrained):
    from transformers import AutoFeatureExtractor, AutoModel

    encoder_dir = pretrained / "encoder"
    assert json.loads((encoder_dir / "preprocessor_config.json").read_text())["max_frames"] is None
    features = AutoFeatureExtractor.from_pretrained(encoder_dir)
    model = AutoModel.from_pretrained(encoder_dir).eval()
    clip = np.random.default_rng(0).uniform(-0.5, 0.5, 60 * SR).astype(np.float32)
    inputs = features(clip, sampling_rate=SR, return_tensors="pt")
    assert int(inputs["attention_mask"].sum()) == 1 + 60 * SR // 160  # 6001 frames: 60 s at a 10 ms hop
    with torch.no_grad():
        tokens = model(**inputs).last_hidden_state
    time_patches = inputs["input_values"].shape[1] // 16  # 6016 frames -> 376 time patches
    assert tokens.shape[1] == 1 + time_patches * (MODEL["num_mel_bins"] // 16)
    assert time_patches * 16 * 160 >= 60 * SR  # the tokens cover the whole minute


def test_downstream_loading_drops_the_limit_an_older_export_saved(tmp_path, caplog):
    from aasp_hf.evaluation import load_frozen_encoder

    config = aasp_hf.AaspConfig(**MODEL)
    aasp_hf.AaspModel(config).save_pretrained(tmp_path)
    AaspFeatureExtractor(feature_size=32, max_frames=64).save_pretrained(tmp_path)  # what pretrain.py used to save
    with caplog.at_level("WARNING"):
        _, features = load_frozen_encoder(tmp_path)
    assert features.max_frames is None and "max_frames=64" in caplog.text
    inputs = features(np.zeros(5 * SR, np.float32), sampling_rate=SR)
    assert inputs["attention_mask"].sum() == 1 + 5 * SR // 160


# ----------------------------------------------------------------------------------------------- 2. Hub ecosystem
def test_exported_encoder_maps_the_classifier_for_remote_code(pretrained):
    auto_map = json.loads((pretrained / "encoder" / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModel"] == "modeling_aasp.AaspModel"
    assert auto_map["AutoModelForAudioClassification"] == "modeling_aasp.AaspForAudioClassification"


def test_trainer_fine_tunes_an_exported_encoder_through_remote_code(pretrained, tmp_path):
    """What `run_audio_classification.py --trust_remote_code True --model_name_or_path <encoder>` does, in a
    fresh process where `aasp_hf` cannot be imported: Auto classes, Trainer, save, reload."""
    encoder_dir = pretrained / "encoder"
    run_without_aasp_hf(
        f"""
        import json
        import numpy as np, torch
        from safetensors.torch import load_file
        from transformers import (AutoConfig, AutoFeatureExtractor, AutoModelForAudioClassification, Trainer,
                                  TrainingArguments)
        path = {str(encoder_dir)!r}
        labels = ["low", "high"]
        config = AutoConfig.from_pretrained(path, num_labels=2, id2label=dict(enumerate(labels)),
                                            label2id={{n: i for i, n in enumerate(labels)}}, trust_remote_code=True)
        model = AutoModelForAudioClassification.from_pretrained(path, config=config, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        assert type(model).__name__ == "AaspForAudioClassification"
        # the encoder's weights arrived (copies: exact), the head is new
        saved = load_file(path + "/model.safetensors")
        state = model.aasp.state_dict()
        assert all(torch.equal(state[k], v) for k, v in saved.items()), "encoder weights not loaded"
        fe = AutoFeatureExtractor.from_pretrained(path, trust_remote_code=True)
        rng = np.random.default_rng(0)
        SR = 16000
        t = np.arange(SR) / SR
        clips = [np.sin(2 * np.pi * (300 if i % 2 == 0 else 3000) * t).astype(np.float32) * rng.uniform(0.2, 0.8)
                 for i in range(8)]
        inputs = fe(clips, sampling_rate=SR)
        rows = [{{"input_values": x, "attention_mask": m, "labels": i % 2}}
                for i, (x, m) in enumerate(zip(inputs["input_values"], inputs["attention_mask"]))]
        args = TrainingArguments(output_dir="trainer_out", max_steps=3, per_device_train_batch_size=4,
                                 learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True,
                                 logging_steps=1, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=args, train_dataset=rows)
        result = trainer.train()
        assert np.isfinite(result.training_loss), result
        trainer.save_model("fine_tuned")
        fe.save_pretrained("fine_tuned")
        saved_config = json.load(open("fine_tuned/config.json"))
        assert saved_config["auto_map"]["AutoModelForAudioClassification"].endswith("AaspForAudioClassification")
        reloaded = AutoModelForAudioClassification.from_pretrained("fine_tuned", trust_remote_code=True).eval()
        model.eval()
        batch = fe(clips[:2], sampling_rate=SR, return_tensors="pt")
        with torch.no_grad():
            torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits, rtol=1e-4, atol=1e-5)
        assert reloaded.config.id2label == {{0: "low", 1: "high"}}
        print("TRAINED", result.training_loss)
        """,
        tmp_path,
    )


# ----------------------------------------------------------------------------------------------- 4. no silent overwrite
def test_pretrain_refuses_an_output_dir_that_holds_a_run_and_overwrites_only_when_told(tmp_path):
    out = tmp_path / "pt"
    pretrain.main(pretrain_argv(out, max_steps=2, save_steps=1))
    log_before = (out / "log_history.jsonl").read_text()
    weights_before = (out / "encoder" / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match=r"already holds a run.*--resume.*--overwrite_output_dir"):
        pretrain.main(pretrain_argv(out, max_steps=1, save_steps=1, seed=1))
    assert (out / "log_history.jsonl").read_text() == log_before  # nothing was touched
    assert (out / "encoder" / "model.safetensors").read_bytes() == weights_before
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]

    pretrain.main(pretrain_argv(out, max_steps=1, save_steps=1, seed=1, overwrite_output_dir=True))
    assert [json.loads(line)["step"] for line in (out / "log_history.jsonl").read_text().splitlines()] == [1]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]  # the old run's are gone
    assert json.loads((out / "all_results.json").read_text())["max_steps"] == 1
    assert (out / "latest").read_text().strip() == "checkpoint-1"


def test_finetune_refuses_an_output_dir_that_holds_a_run_and_overwrites_only_when_told(pretrained, tmp_path):
    import finetune

    out = tmp_path / "ft"
    common = finetune_argv(
        pretrained / "encoder", out, synthetic_per_class=2, per_device_train_batch_size=5, eval_steps=2, logging_steps=1
    )
    finetune.main(common + ["--max_steps", "2"])
    results_before = (out / "all_results.json").read_text()
    with pytest.raises(ValueError, match=r"already holds a run.*--resume.*--overwrite_output_dir"):
        finetune.main(common + ["--max_steps", "1"])
    assert (out / "all_results.json").read_text() == results_before
    finetune.main(common + ["--max_steps", "1", "--overwrite_output_dir"])
    assert [json.loads(line)["step"] for line in (out / "log_history.jsonl").read_text().splitlines()] == [1]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert json.loads((out / "all_results.json").read_text())["max_steps"] == 1


# ----------------------------------------------------------------------------------------------- 5. audiofolder
@pytest.fixture(scope="module")
def class_folders(tmp_path_factory):
    """The layout docs/datasets.md documents: <label>/<clip>.wav, no train/test folders (2 classes x 10 clips)."""
    import soundfile as sf

    root = tmp_path_factory.mktemp("audiofolder")
    rng = np.random.default_rng(0)
    t = np.arange(SR // 2) / SR
    for label, freq in (("low", 300.0), ("high", 3000.0)):
        (root / label).mkdir()
        for i in range(10):
            sf.write(root / label / f"{label}_{i}.wav", (0.5 * np.sin(2 * np.pi * freq * t + rng.uniform(0, 6))), SR)
    return root


def test_finetune_on_an_audiofolder_without_split_folders_holds_out_a_stated_test_fraction(
    pretrained, class_folders, tmp_path
):
    import finetune
    from datasets import Audio

    downstream = finetune.load_parts(
        finetune.parse_args(
            [
                "--model_name_or_path",
                "unused",
                "--dataset",
                "audiofolder",
                "--data_root",
                str(class_folders),
                "--clip_seconds",
                "0.5",
            ]
        )
    )
    splits = downstream.parts["official"]
    assert not downstream.multi_label and sorted(downstream.label_names) == ["high", "low"]
    assert downstream.test_held_out  # class sub-folders, no test/: its test is held out of train
    assert {k: len(v) for k, v in splits.items()} == {"train": 14, "validation": 2, "test": 4}  # 20 % test, then 10 %
    assert sorted(splits["test"]["label"]) == [0, 0, 1, 1]  # stratified by class
    paths = [
        {r["audio"]["path"] for r in splits[s].cast_column("audio", Audio(decode=False))}
        for s in ("train", "validation", "test")
    ]
    assert not (paths[0] & paths[2]) and not (paths[1] & paths[2]) and not (paths[0] & paths[1])

    results = finetune.main(
        [
            "--model_name_or_path",
            str(pretrained / "encoder"),
            "--dataset",
            "audiofolder",
            "--data_root",
            str(class_folders),
            "--clip_seconds",
            "0.5",
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "4",
            "--warmup_steps",
            "1",
            "--output_dir",
            str(tmp_path / "ft"),
        ]
    )
    assert 0.0 <= results["test_score"] <= 1.0 and results["step"] == 1


def test_linear_eval_on_an_audiofolder_without_split_folders(pretrained, class_folders, tmp_path):
    import linear_eval

    results = linear_eval.main(
        [
            "--model_name_or_path",
            str(pretrained / "encoder"),
            "--dataset",
            "audiofolder",
            "--data_root",
            str(class_folders),
            "--clip_seconds",
            "0.5",
            "--max_steps",
            "2",
            "--eval_steps",
            "1",
            "--batch_size",
            "4",
            "--seeds",
            "0",
            "--output_dir",
            str(tmp_path / "lin"),
        ]
    )
    assert 0.0 <= results["test_mean"] <= 1.0 and results["num_classes"] == 2


# ----------------------------------------------------------------------------------------------- 6. inputs
def test_extractor_takes_datasets_rows_with_their_own_sampling_rate():
    extractor = AaspFeatureExtractor(feature_size=32)
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-0.5, 0.5, n).astype(np.float32) for n in (SR, SR // 2))
    expected = extractor([a, b], sampling_rate=SR)["input_values"]
    rows = [{"array": a, "sampling_rate": SR, "path": None}, {"array": b, "sampling_rate": SR}]
    np.testing.assert_allclose(extractor(rows)["input_values"], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        extractor(rows[0])["input_values"], extractor(a, sampling_rate=SR)["input_values"], rtol=1e-6, atol=1e-6
    )
    # a stereo cell (datasets' mono=False: (channels, samples)) is one clip, its channels averaged
    stereo = np.stack([a, 0.5 * a])
    np.testing.assert_allclose(
        extractor({"raw": stereo, "sampling_rate": SR})["input_values"],
        extractor(0.75 * a, sampling_rate=SR)["input_values"],
        rtol=1e-5,
        atol=1e-5,
    )
    with pytest.raises(ValueError, match="8000.*astype\\(np.float32\\) / 32768"):
        extractor({"array": a, "sampling_rate": 8000})
    with pytest.raises(ValueError, match="sampling_rate=22050 was passed.*16000"):
        extractor(rows, sampling_rate=22050)
    with pytest.raises(ValueError, match="different sampling rates"):
        extractor([rows[0], {"array": b, "sampling_rate": 8000}])


def test_int16_at_8_khz_and_stereo_reach_the_pipeline_through_decode_audio(tmp_path):
    from transformers import pipeline

    from aasp_hf.data import decode_audio

    torch.manual_seed(0)
    config = aasp_hf.AaspConfig(**MODEL, num_labels=2, id2label={0: "a", 1: "b"}, label2id={"a": 0, "b": 1})
    aasp_hf.AaspForAudioClassification(config).save_pretrained(tmp_path)
    AaspFeatureExtractor(feature_size=32).save_pretrained(tmp_path)
    classifier = pipeline("audio-classification", model=str(tmp_path), trust_remote_code=True, device="cpu")

    t = np.arange(8000) / 8000
    floats = (0.6 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    pcm = np.round(floats * 32767).astype(np.int16)
    with pytest.raises(Exception):  # what transformers itself does with it (torchaudio cannot resample int16)
        classifier({"raw": pcm, "sampling_rate": 8000})
    from_pcm = decode_audio({"array": pcm, "sampling_rate": 8000})
    from_float = decode_audio({"array": floats, "sampling_rate": 8000})
    assert from_pcm.dtype == np.float32 and from_pcm.shape == (SR,)
    np.testing.assert_allclose(from_pcm, from_float, atol=1e-4)  # scaled to [-1, 1), not left at 32767
    scores = {p["label"]: p["score"] for p in classifier(from_pcm, top_k=2)}
    reference = {p["label"]: p["score"] for p in classifier(from_float, top_k=2)}
    assert scores.keys() == reference.keys()
    for label in scores:
        assert scores[label] == pytest.approx(reference[label], abs=1e-3)

    stereo = np.stack([from_float, from_float], axis=1)  # (samples, channels), as soundfile reads it
    mixed = decode_audio({"array": stereo, "sampling_rate": SR})
    assert mixed.shape == (SR,)
    np.testing.assert_allclose(mixed, from_float, atol=1e-6)


# ----------------------------------------------------------------------------------------------- 7. model cards
TEMPLATE_CLAIMS = ("ViT-B", "86.9", "AudioSet", "REPO_ID", "FILL", "template", "{'")


def card_parts(folder):
    import yaml

    front, body = (Path(folder) / "README.md").read_text().split("---\n", 2)[1:]
    return yaml.safe_load(front), body


def test_pretraining_export_has_a_card_of_this_model_and_run(pretrained):
    from transformers import AutoModel

    metadata, body = card_parts(pretrained / "encoder")
    count = sum(p.numel() for p in AutoModel.from_pretrained(pretrained / "encoder").parameters())
    assert f"{count:,} parameters" in body
    assert f"{MODEL['num_hidden_layers']} transformer blocks, hidden size {MODEL['hidden_size']}" in body
    assert "4 synthetic clips" in body and "steps: 2 of 2" in body and "final pre-training loss" in body
    assert metadata["pipeline_tag"] == "feature-extraction" and "custom_code" in metadata["tags"]
    assert not [claim for claim in TEMPLATE_CLAIMS if claim in body]


def test_finetuned_folder_has_a_card_with_the_measured_scores(pretrained, tmp_path):
    import finetune

    out = tmp_path / "ft"
    results = finetune.main(
        finetune_argv(pretrained / "encoder", out, synthetic_per_class=2, per_device_train_batch_size=5, eval_steps=2)
    )
    metadata, body = card_parts(out)
    assert metadata["pipeline_tag"] == "audio-classification"
    assert f"| test | accuracy | {results['test_score']:.4f} |" in body
    assert f"| eval | accuracy | {results['best_valid_score']:.4f} |" in body
    assert "Head: 5 classes (single-label): tone, am_4hz" in body and str(pretrained / "encoder") in body
    assert not [claim for claim in TEMPLATE_CLAIMS if claim in body]


def test_hub_folder_card_is_generated_from_the_model(tmp_path):
    from aasp_hf.utils.hub import write_hub_folder

    model = aasp_hf.AaspModel(aasp_hf.AaspConfig(**MODEL))
    write_hub_folder(
        model,
        AaspFeatureExtractor(feature_size=32),
        tmp_path / "repo",
        model_card_fields={"repo_id": "me/tiny", "datasets": ["esc50"]},
        all_results={
            "eval_history": [{"step": 1, "valid_score": 0.5}],
            "test_accuracy": 0.75,
            "eval_arguments": {"lr": 1},
        },
    )
    metadata, body = card_parts(tmp_path / "repo")
    count = sum(p.numel() for p in model.parameters())
    assert f"{count:,} parameters" in body and 'AutoModel.from_pretrained("me/tiny"' in body
    assert "| test | accuracy | 0.7500 |" in body and "valid_score" not in body and "'lr'" not in body
    assert metadata["datasets"] == ["esc50"] and "Trained on esc50" in body
    assert not [claim for claim in TEMPLATE_CLAIMS if claim in body]


# ----------------------------------------------------------------------------------------------- should fix
def test_a_data_source_on_the_command_line_replaces_the_presets():
    preset = str(ROOT / "examples" / "configs" / "pretrain_tiny_cpu.json")
    data_args, _, args = pretrain.parse_args(["--config", preset, "--train_dir", "/my/clips"])
    assert data_args.train_dir == "/my/clips" and data_args.synthetic_clips == 0
    assert args.max_steps == 300  # the rest of the preset still applies
    data_args, _, _ = pretrain.parse_args(["--config", preset, "--max_steps", "40"])
    assert data_args.synthetic_clips == 256  # no data source given: the preset's


def test_help_lists_config_and_says_what_each_flag_does(capsys):
    import finetune

    with pytest.raises(SystemExit):
        finetune.parse_args(["--help"])
    text = capsys.readouterr().out
    assert "--config PRESET.json" in text and "(default: from" not in text and "turns --spec_augment off" in text
    for flag in ("--adam_beta2", "--weight_decay", "--warmup_steps", "--layer_decay"):
        help_text = text.split(flag, 1)[1].split("\n  --", 1)[0]
        assert "AdamW" in help_text or "warm-up" in help_text or "decay" in help_text, flag
    with pytest.raises(SystemExit):
        pretrain.parse_args(["--help"])
    text = capsys.readouterr().out
    assert "--config PRESET.json" in text and "AdamW β1" in text


def test_too_few_steps_for_the_warmup_fail_at_once_naming_warmup_steps():
    import finetune

    with pytest.raises(ValueError, match=r"--warmup_steps 100 must be at most --max_steps 5"):
        finetune.parse_args(["--model_name_or_path", "unused", "--max_steps", "5", "--warmup_steps", "100"])
    with pytest.raises(ValueError, match=r"--warmup_steps 30 must be at most --max_steps 10"):
        pretrain.parse_args(
            [
                "--config",
                str(ROOT / "examples" / "configs" / "pretrain_tiny_cpu.json"),
                "--max_steps",
                "10",
                "--warmup_steps",
                "30",
            ]
        )  # typed (a preset's own is cut to fit)


def test_messages_name_the_file_and_the_cause(tmp_path):
    from aasp_hf.data import decode_audio
    from aasp_hf.utils.errors import UsageError
    from aasp_hf.utils.hub import check_model_folder

    model_dir = tmp_path / "model"
    aasp_hf.AaspModel(aasp_hf.AaspConfig(**MODEL)).save_pretrained(model_dir)
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # an interrupted copy
    with pytest.raises(UsageError, match=r"weights .*model\.safetensors .*truncated or corrupt"):
        check_model_folder(model_dir)  # what the scripts and HEAR's load_model run before loading

    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("not audio at all")
    with pytest.raises(ValueError, match=r"Could not decode .*notes\.wav as audio"):
        decode_audio(str(not_audio))
    with pytest.raises(ValueError, match=r"Could not decode <16 bytes of a file> as audio"):
        decode_audio(not_audio.read_bytes())


def test_package_metadata_uses_an_spdx_licence_expression():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"  # not the deprecated {text = ...} table (setuptools warns)
    assert any(req.startswith("setuptools>=77") for req in project["build-system"]["requires"])


def test_the_shipped_cpu_accelerate_config_launches_without_warnings(tmp_path):
    import os
    import subprocess

    script = tmp_path / "hello.py"
    script.write_text("print('launched')\n")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}  # no default accelerate config of the user's
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("accelerate")),
            "launch",
            "--config_file",
            str(ROOT / "examples" / "accelerate_configs" / "cpu.yaml"),
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "launched" in done.stdout
    assert "were not passed" not in done.stdout + done.stderr


def test_presets_and_default_output_dirs_write_under_git_ignored_folders():
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "examples/configs"], cwd=ROOT, capture_output=True, text=True)
    presets = [ROOT / name for name in tracked.stdout.split() if name.endswith(".json")]
    assert presets
    outputs = {json.loads(p.read_text()).get("output_dir") for p in presets} - {None}
    outputs |= {"pretrain_output", "finetune_output", "linear_eval_output", "demo_output"}  # the scripts' defaults
    for output in sorted(outputs):
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{output}/encoder/model.safetensors"], cwd=ROOT)
        assert ignored.returncode == 0, f"{output}/ is not git-ignored"
    tiny = json.loads((ROOT / "examples" / "configs" / "pretrain_tiny_cpu.json").read_text())
    assert tiny["output_dir"] == "runs/pt"  # what the README's downstream commands read (runs/pt/encoder)
