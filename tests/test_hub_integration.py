"""The transformers ecosystem and the Hub: Auto* classes, remote code in a fresh process without the package, the
audio-classification pipeline, and aasp_hf.utils.hub's folders (complete, with a model card) and pushes, which call only
`HfApi.create_repo` and `HfApi.upload_folder` (mocked: no network)."""

import json
from unittest import mock

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio
import yaml
from huggingface_hub import HfApi
from transformers import (
    AutoConfig,
    AutoFeatureExtractor,
    AutoModel,
    AutoModelForAudioClassification,
    pipeline,
)

from aasp_hf import (
    AaspAudioClassificationPipeline,
    AaspConfig,
    AaspFeatureExtractor,
    AaspForAudioClassification,
    AaspForPreTraining,
    AaspModel,
)
from aasp_hf.utils.hub import (
    CODE_FILES,
    evaluation_table,
    fill_model_card,
    push_folder,
    write_hub_folder,
)
from aasp_hf.data.masking import sample_batch_masks
from conftest import remote_code_logits, run_without_aasp_hf, tiny_config_kwargs

LABELS = ["dog", "rain", "siren"]


def tone(seconds, freq, sr=16000, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    return (0.5 * np.sin(2 * np.pi * freq * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


def tiny_classifier():
    """A tiny AaPE classifier with 128 mel bins (the feature extractor's) and three labels, seeded. Trained length 208
    frames (2.07 s): the pipeline classifies every clip of these tests (at most 1.7 s) as one window."""
    torch.manual_seed(0)
    config = AaspConfig(
        **tiny_config_kwargs(num_mel_bins=128, num_frames=208, sblu_hidden_size=16, sblu_output_size=64),
        num_labels=3,
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
    )
    return AaspForAudioClassification(config).eval()


@pytest.fixture(scope="module")
def saved_classifier(tmp_path_factory):
    """A tiny AaPE classifier with 128 mel bins (the feature extractor's), saved with its feature extractor."""
    model = tiny_classifier()
    path = tmp_path_factory.mktemp("classifier")
    model.save_pretrained(path)
    AaspFeatureExtractor().save_pretrained(path)
    return path, model


def direct_probabilities(model, audio, function="softmax"):
    features = AaspFeatureExtractor()(audio, sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        logits = model(**features).logits[0]
    return {"softmax": logits.softmax(-1), "sigmoid": logits.sigmoid(), "none": logits}[function]


def as_dict(predictions):
    return {p["label"]: p["score"] for p in predictions}


def test_auto_classes_resolve_to_aasp(saved_classifier):
    path, _ = saved_classifier
    assert isinstance(AutoConfig.from_pretrained(path), AaspConfig)
    assert type(AutoModel.from_pretrained(path)) is AaspModel
    assert type(AutoModelForAudioClassification.from_pretrained(path)) is AaspForAudioClassification
    assert isinstance(AutoFeatureExtractor.from_pretrained(path), AaspFeatureExtractor)


def test_saved_folder_ships_code_auto_map_and_safetensors(saved_classifier):
    path, _ = saved_classifier
    config = json.loads((path / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_aasp.AaspConfig",
        "AutoModel": "modeling_aasp.AaspModel",
        "AutoModelForAudioClassification": "modeling_aasp.AaspForAudioClassification",
    }
    preprocessor = json.loads((path / "preprocessor_config.json").read_text())
    assert preprocessor["auto_map"] == {"AutoFeatureExtractor": "feature_extraction_aasp.AaspFeatureExtractor"}
    for name in CODE_FILES:
        assert (path / name).exists(), name
    assert config["custom_pipelines"] == {
        "audio-classification": {
            "impl": "pipeline_aasp.AaspAudioClassificationPipeline",
            "pt": ["AutoModelForAudioClassification"],
            "type": "audio",
        }
    }
    assert (path / "model.safetensors").exists()
    assert not list(path.glob("*.bin")) and not list(path.glob("*.pt"))


def assert_remote_code_matches(folder, model, audio, tmp_path):
    """The folder's remote code, in a fresh process without `aasp_hf`, gives the in-process model's logits."""
    features = AaspFeatureExtractor()(audio, sampling_rate=16000, return_tensors="pt")
    with torch.no_grad():
        expected = model(**features).logits.numpy()
    np.testing.assert_allclose(remote_code_logits(folder, audio, tmp_path), expected, atol=1e-6)


def test_remote_code_loads_in_a_fresh_process_without_the_package(saved_classifier, tmp_path):
    """`trust_remote_code=True`, offline, `aasp_hf` unimportable: same logits as the in-process model."""
    path, model = saved_classifier
    assert_remote_code_matches(path, model, tone(1.3, 440.0), tmp_path)


def test_the_checkpoint_pipeline_averages_a_stereo_file_in_a_fresh_process_without_the_package(
    saved_classifier, tmp_path
):
    """`pipeline(..., trust_remote_code=True)` where `aasp_hf` is unimportable builds the checkpoint's own pipeline
    class, which decodes a stereo file to (L + R) / 2: the in-process features and scores of the channel mean."""
    path, model = saved_classifier
    left, right = tone(1.0, 440.0), tone(1.0, 2500.0, seed=1)
    wav = tmp_path / "stereo.wav"
    sf.write(wav, np.stack([left, right], axis=1), 16000, subtype="FLOAT")  # (samples, channels)
    result = run_without_aasp_hf(
        f"""
        import json, numpy as np
        from transformers import pipeline
        classifier = pipeline("audio-classification", model={str(path)!r}, trust_remote_code=True)
        print(type(classifier).__module__, type(classifier).__name__)
        np.save("features.npy", next(classifier.preprocess({str(wav)!r}))["input_values"].numpy())  # its one window
        print(json.dumps({{p["label"]: p["score"] for p in classifier({str(wav)!r}, top_k=3)}}))
        """,
        tmp_path,
    )
    where, scores = result.stdout.strip().splitlines()[-2:]
    assert where.startswith("transformers_modules."), where
    assert where.endswith(".pipeline_aasp AaspAudioClassificationPipeline"), where
    mean = (left + right) / 2
    expected_features = AaspFeatureExtractor()(mean, sampling_rate=16000, return_tensors="np")["input_values"]
    np.testing.assert_allclose(np.load(tmp_path / "features.npy"), expected_features, atol=1e-5)
    expected = direct_probabilities(model, mean)
    for i, name in enumerate(LABELS):
        assert json.loads(scores)[name] == pytest.approx(expected[i].item(), abs=1e-5)


def test_pipeline_on_a_16khz_array(saved_classifier):
    path, model = saved_classifier
    classifier = pipeline("audio-classification", model=str(path), trust_remote_code=True)
    audio = tone(1.0, 440.0)
    predictions = classifier(audio, top_k=3)
    assert {p["label"] for p in predictions} == set(LABELS)
    expected = direct_probabilities(model, audio)
    for i, name in enumerate(LABELS):
        assert as_dict(predictions)[name] == pytest.approx(expected[i].item(), abs=1e-5)


def test_pipeline_resamples_a_22050_hz_dict(saved_classifier):
    path, model = saved_classifier
    classifier = pipeline("audio-classification", model=str(path), trust_remote_code=True)
    audio_22k = tone(1.0, 440.0, sr=22050)
    predictions = as_dict(classifier({"raw": audio_22k, "sampling_rate": 22050}, top_k=3))
    resampled = torchaudio.functional.resample(torch.from_numpy(audio_22k), 22050, 16000).numpy()
    expected = direct_probabilities(model, resampled)
    for i, name in enumerate(LABELS):
        assert predictions[name] == pytest.approx(expected[i].item(), abs=1e-5)


def test_pipeline_on_a_wav_path(saved_classifier, tmp_path):
    path, model = saved_classifier
    audio = tone(0.8, 880.0)
    wav = tmp_path / "clip.wav"
    sf.write(wav, audio, 16000, subtype="FLOAT")  # float WAV: ffmpeg decodes it without quantisation
    classifier = pipeline("audio-classification", model=str(path), trust_remote_code=True)
    predictions = as_dict(classifier(str(wav), top_k=3))
    expected = direct_probabilities(model, audio)
    for i, name in enumerate(LABELS):
        assert predictions[name] == pytest.approx(expected[i].item(), abs=1e-5)


def test_pipeline_on_a_batch_equals_single_calls(saved_classifier):
    path, _ = saved_classifier
    classifier = pipeline("audio-classification", model=str(path), trust_remote_code=True)
    clips = [tone(0.5, 300.0), tone(1.7, 1200.0, seed=1), tone(1.0, 3000.0, seed=2)]
    batched = classifier(clips, top_k=3, batch_size=3)
    for clip, predictions in zip(clips, batched):
        single = as_dict(classifier(clip, top_k=3))
        for p in predictions:
            assert p["score"] == pytest.approx(single[p["label"]], abs=1e-5)


def test_multi_label_checkpoint_makes_the_pipeline_use_a_sigmoid(tmp_path):
    torch.manual_seed(0)
    config = AaspConfig(
        **tiny_config_kwargs(
            num_mel_bins=128, num_frames=208, sblu_hidden_size=16, sblu_output_size=64, patch_embedding="spe"
        ),  # 2.07 s: the 1-s clip is one window
        num_labels=3,
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
        problem_type="multi_label_classification",
    )
    model = AaspForAudioClassification(config).eval()
    model.save_pretrained(tmp_path)
    AaspFeatureExtractor().save_pretrained(tmp_path)
    audio = tone(1.0, 500.0)
    expected = direct_probabilities(model, audio, function="sigmoid")
    # every way the pipeline is made: the plain call and trust_remote_code=True (transformers' class: the package is
    # installed), and ours by pipeline_class; on transformers 5.4 to 5.22, whose own class applied a softmax to any
    # checkpoint, too (make test-compat)
    for kwargs in ({}, {"trust_remote_code": True}, {"pipeline_class": AaspAudioClassificationPipeline}):
        classifier = pipeline("audio-classification", model=str(tmp_path), **kwargs)
        predictions = as_dict(classifier(audio, top_k=3))
        for i, name in enumerate(LABELS):
            assert predictions[name] == pytest.approx(expected[i].item(), abs=1e-5), kwargs
        assert sum(predictions.values()) != pytest.approx(1.0, abs=1e-3)  # not a softmax
    # a function named when the pipeline is built holds for the calls that name none, one named in a call for it
    logits = direct_probabilities(model, audio, function="none")
    classifier = pipeline("audio-classification", model=str(tmp_path), function_to_apply="none")
    assert as_dict(classifier(audio, top_k=3)) == pytest.approx(dict(zip(LABELS, logits.tolist())), abs=1e-5)
    softmax = as_dict(classifier(audio, top_k=3, function_to_apply="softmax"))
    assert softmax == pytest.approx(dict(zip(LABELS, logits.softmax(-1).tolist())), abs=1e-5)


def shipped_code(folder):
    return {path.name for path in folder.glob("*.py")}


def test_every_folder_ships_the_one_modeling_file_and_each_loads_without_the_package(saved_classifier, tmp_path):
    """Encoder, classifier and pre-training folders ship exactly hub.CODE_FILES (the whole model is one modeling
    file, as transformers keeps a model) and each loads remotely, the pre-training model from that same file."""
    classifier_folder, _ = saved_classifier
    torch.manual_seed(0)
    config = AaspConfig(
        **tiny_config_kwargs(
            predictor_hidden_size=16, predictor_num_attention_heads=2, predictor_num_layers=2, mask_block_sizes=[[1, 2]]
        )
    )
    pretraining_model = AaspForPreTraining(config).eval()
    encoder = AaspModel(config).eval()
    folders = {"encoder": tmp_path / "encoder", "pretraining": tmp_path / "pretraining"}
    for name, model in (("encoder", encoder), ("pretraining", pretraining_model)):
        model.save_pretrained(folders[name])
        AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(folders[name])
    assert shipped_code(classifier_folder) == set(CODE_FILES)
    assert shipped_code(folders["encoder"]) == set(CODE_FILES)
    assert shipped_code(folders["pretraining"]) == set(CODE_FILES)
    auto_map = json.loads((folders["pretraining"] / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForPreTraining"] == "modeling_aasp.AaspForPreTraining"
    assert auto_map["AutoModel"] == "modeling_aasp.AaspModel"

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, config.num_frames, config.num_mel_bins, generator=g)
    masks = sample_batch_masks(config, 2, generator=g)
    visible, queries = masks["visible_indices"], masks["query_indices"]
    torch.save({"x": x, "visible": visible, "queries": queries}, tmp_path / "inputs.pt")
    with torch.no_grad():
        expected_hidden = encoder(x).last_hidden_state
        expected = pretraining_model(x, visible_indices=visible, query_indices=queries)

    run_without_aasp_hf(
        f"""
        import torch
        from transformers import AutoModel, AutoModelForAudioClassification, AutoModelForPreTraining
        inputs = torch.load({str(tmp_path / "inputs.pt")!r})
        encoder = AutoModel.from_pretrained({str(folders["encoder"])!r}, trust_remote_code=True).eval()
        AutoModelForAudioClassification.from_pretrained({str(classifier_folder)!r}, trust_remote_code=True)
        model = AutoModelForPreTraining.from_pretrained({str(folders["pretraining"])!r}, trust_remote_code=True).eval()
        assert type(model).__module__.endswith(".modeling_aasp"), type(model).__module__
        with torch.no_grad():
            hidden = encoder(inputs["x"]).last_hidden_state
            out = model(inputs["x"], visible_indices=inputs["visible"], query_indices=inputs["queries"])
        torch.save({{"hidden": hidden, "loss": out.loss, "predictions": out.predictions}}, "outputs.pt")
        """,
        tmp_path,
    )
    remote = torch.load(tmp_path / "outputs.pt")
    torch.testing.assert_close(remote["hidden"], expected_hidden, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(remote["predictions"], expected.predictions, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(remote["loss"], expected.loss, atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------------------------- aasp_hf.utils.hub folders and pushes
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
    model = tiny_classifier()
    folder = tmp_path_factory.mktemp("hub") / "repo"
    results = folder.parent / "all_results.json"
    results.write_text(json.dumps(ALL_RESULTS))
    write_hub_folder(
        model,
        AaspFeatureExtractor(),
        folder,
        model_card_fields={
            "title": "AaSP tiny test",
            "repo_id": "me/aasp-tiny",
            "datasets": ["esc50"],
            "extra_tags": ["esc50"],
        },
        all_results=results,
    )
    return folder, model


def test_folder_is_complete(hub_folder):
    folder, _ = hub_folder
    names = {p.name for p in folder.iterdir()}
    for name in ("model.safetensors", "config.json", "preprocessor_config.json", "README.md"):
        assert name in names, name
    assert {n for n in names if n.endswith(".py")} == set(CODE_FILES)
    assert not any(n.endswith((".bin", ".pt")) for n in names)
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_aasp.AaspModel"
    assert config["auto_map"]["AutoModelForAudioClassification"] == "modeling_aasp.AaspForAudioClassification"


def test_pretraining_folder_ships_the_same_code_and_maps_the_pretraining_class(tmp_path):
    model = AaspForPreTraining(AaspConfig(**tiny_config_kwargs(predictor_hidden_size=16, predictor_num_layers=1)))
    folder = write_hub_folder(model, AaspFeatureExtractor(feature_size=32), tmp_path / "repo")
    assert {p.name for p in folder.glob("*.py")} == set(CODE_FILES)
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForPreTraining"] == "modeling_aasp.AaspForPreTraining"


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


def test_hub_folder_loads_as_remote_code_in_a_fresh_process(hub_folder, tmp_path):
    folder, model = hub_folder
    audio = (0.3 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)).astype(np.float32)
    assert_remote_code_matches(folder, model, audio, tmp_path)


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
