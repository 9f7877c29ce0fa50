"""aasp_hf.hub: the written folder is complete and loads as remote code in a fresh process; pushing calls only
`HfApi.create_repo` and `HfApi.upload_folder` (mocked: no network)."""

import json
from unittest import mock

import numpy as np
import pytest
import torch
import yaml
from huggingface_hub import HfApi

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification, AaspForPreTraining
from aasp_hf.hub import CODE_FILES, PRETRAINING_CODE_FILES, evaluation_table, fill_model_card, push_folder, write_hub_folder
from conftest import remote_code_logits, tiny_config_kwargs

LABELS = ["dog", "rain", "siren"]
ALL_RESULTS = {
    "epoch": 3.0,
    "eval_accuracy": 0.8125,
    "eval_loss": 0.5,
    "eval_runtime": 1.2,
    "eval_samples_per_second": 10.0,
    "test_map": [0.47, 0.48, 0.49],
    "train_loss": 0.3,
}


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory):
    torch.manual_seed(0)
    config = AaspConfig(
        **tiny_config_kwargs(num_mel_bins=128, sblu_hidden_size=16, sblu_output_size=64),
        num_labels=3,
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
    )
    model = AaspForAudioClassification(config).eval()
    folder = tmp_path_factory.mktemp("hub") / "repo"
    results = folder.parent / "all_results.json"
    results.write_text(json.dumps(ALL_RESULTS))
    write_hub_folder(
        model,
        AaspFeatureExtractor(),
        folder,
        model_card_fields={
            "title": "AaSP tiny test", "repo_id": "me/aasp-tiny", "datasets": ["esc50"], "extra_tags": ["esc50"]
        },
        all_results=results,
    )
    return folder, model


def test_folder_is_complete(hub_folder):
    folder, _ = hub_folder
    names = {p.name for p in folder.iterdir()}
    for name in ("model.safetensors", "config.json", "preprocessor_config.json", "README.md"):
        assert name in names, name
    assert {n for n in names if n.endswith(".py")} == set(CODE_FILES)  # no pre-training code in a classifier's repo
    assert not any(n.endswith((".bin", ".pt")) for n in names)
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_aasp.AaspModel"
    assert config["auto_map"]["AutoModelForAudioClassification"] == "modeling_aasp.AaspForAudioClassification"


def test_pretraining_folder_ships_the_pretraining_code_too(tmp_path):
    model = AaspForPreTraining(AaspConfig(**tiny_config_kwargs(predictor_hidden_size=16, predictor_num_layers=1)))
    folder = write_hub_folder(model, AaspFeatureExtractor(feature_size=32), tmp_path / "repo")
    assert {p.name for p in folder.glob("*.py")} == set(CODE_FILES + PRETRAINING_CODE_FILES)


def test_model_card_metadata_and_evaluation_table(hub_folder):
    folder, _ = hub_folder
    text = (folder / "README.md").read_text()
    front, body = text.split("---\n", 2)[1:]
    metadata = yaml.safe_load(front)
    assert metadata["library_name"] == "transformers"
    assert metadata["pipeline_tag"] == "audio-classification"
    assert metadata["datasets"] == ["esc50"]
    assert "custom_code" in metadata["tags"] and "esc50" in metadata["tags"]
    assert body.lstrip().startswith("# AaSP tiny test")
    assert "REPO_ID" not in body and 'AutoModel.from_pretrained("me/aasp-tiny"' in body
    assert "FILL" not in body and "This is the template" not in body
    assert "| eval | accuracy | 0.8125 |" in body
    assert "| test | map | 0.4800 ± 0.0100 (n=3) |" in body
    assert "runtime" not in body and "samples_per_second" not in body and "train_loss" not in body


def test_evaluation_table_mean_std_dict():
    table = evaluation_table({"eval_map": {"mean": 0.5, "std": 0.01}}, protocol="linear evaluation")
    assert "| eval | map | 0.5000 ± 0.0100 | linear evaluation |" in table
    card = fill_model_card({"description": "An EAT encoder."}, None)
    assert "No evaluation results" in card
    assert "## Model\n\nAn EAT encoder.\n\n## Uses" in card and "AaPE: standard" not in card


def test_remote_code_loads_in_a_fresh_process_without_the_package(hub_folder, tmp_path):
    folder, model = hub_folder
    audio = (0.3 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)).astype(np.float32)
    features = AaspFeatureExtractor()(audio, sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        expected = model(**features).logits.numpy()
    np.testing.assert_allclose(remote_code_logits(folder, audio, tmp_path), expected, atol=1e-6)


def test_push_folder_calls_create_repo_then_upload_folder(hub_folder):
    folder, _ = hub_folder
    calls = []
    def fake_create(*args, **kwargs):
        calls.append("create")

    def fake_upload(*args, **kwargs):
        calls.append("upload")
        return "commit"

    with (
        mock.patch.object(HfApi, "create_repo", autospec=True, side_effect=fake_create) as create,
        mock.patch.object(HfApi, "upload_folder", autospec=True, side_effect=fake_upload) as upload,
    ):
        assert push_folder(folder, "me/aasp-tiny", token="hf_test", private=True) == "commit"
    assert calls == ["create", "upload"]
    api = create.call_args.args[0]
    assert isinstance(api, HfApi) and api.token == "hf_test"
    expected = {"repo_id": "me/aasp-tiny", "repo_type": "model", "private": True, "exist_ok": True}
    assert create.call_args.kwargs == expected
    assert upload.call_args.kwargs["folder_path"] == str(folder)
    assert upload.call_args.kwargs["repo_id"] == "me/aasp-tiny"
    assert upload.call_args.kwargs["repo_type"] == "model"


def test_push_folder_refuses_an_incomplete_folder(tmp_path):
    with mock.patch.object(HfApi, "create_repo") as create:
        with pytest.raises(FileNotFoundError, match="config.json"):
            push_folder(tmp_path, "me/x")
    create.assert_not_called()
