"""aasp_hf.integrations.mteb, an AaSP checkpoint as an MTEB audio model: each clip's embedding is the HEAR module's scene
embedding whatever its batch, the command's mistakes are one line; the local task of `make mteb-check`; and, where
MTEB is installed (the venv `make mteb-check` builds), MTEB's `ModelMeta` and encoder interface and MTEB's own
evaluation, unmodified, on that task for the checkpoint and the log-mel baseline.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config_kwargs

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel
from aasp_hf.integrations import hear
from aasp_hf.integrations import mteb as aasp_mteb
from aasp_hf.integrations.mteb import AaspMtebEncoder
from aasp_hf.utils.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
HAS_MTEB = importlib.util.find_spec("mteb") is not None
NEEDS_MTEB = pytest.mark.skipif(
    not HAS_MTEB,
    reason="MTEB is not installed in this venv: `make mteb-check` runs "
    "these tests in .venv-mteb (pip install 'aasp_hf[mteb]')",
)


def _load(relative: str):
    spec = importlib.util.spec_from_file_location(relative.replace("/", "_")[:-3], ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    config = AaspConfig(**tiny_config_kwargs())
    folder = tmp_path_factory.mktemp("mteb") / "encoder"
    AaspModel(config).save_pretrained(folder)
    AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def encoder(checkpoint):
    return AaspMtebEncoder(str(checkpoint), device="cpu")


def test_a_clip_embeds_as_its_scene_embedding_whatever_its_batch(encoder):
    """Clips of three lengths, interleaved: each row is the HEAR scene embedding of that clip alone, in order."""
    rng = np.random.default_rng(0)
    arrays = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (16000, 8000, 16000, 12345, 8000)]
    embeddings = encoder.embed(arrays)
    assert embeddings.shape == (5, encoder.model.scene_embedding_size) and embeddings.dtype == np.float32
    for row, array in zip(embeddings, arrays):
        alone = hear.get_scene_embeddings(torch.from_numpy(array)[None], encoder.model)[0].numpy()
        np.testing.assert_allclose(row, alone, rtol=1e-5, atol=1e-5)
    assert not np.allclose(embeddings[0], embeddings[2])  # different clips of one length stay apart


def test_the_options_reach_the_hear_module(checkpoint):
    mean = AaspMtebEncoder(
        "aasp_hf/encoder", model_path=str(checkpoint), device="cpu", scene_pooling="mean", frequency_pooling="mean"
    )
    assert mean.model.scene_embedding_size == 32 and mean.model_path == str(checkpoint)
    with pytest.raises(UsageError, match="scene_pooling"):
        AaspMtebEncoder(str(checkpoint), scene_pooling="max")


def test_the_command_refuses_mistakes_in_one_line(checkpoint):
    for argv, match in (
        ([str(checkpoint)], "either --tasks"),
        ([str(checkpoint), "--tasks", "ESC50", "--benchmark", "MAEB(v1)"], "either --tasks"),
        ([str(checkpoint), "--tasks", "ESC50", "--model_options", "hop=20"], "JSON object"),
        ([str(checkpoint), "--tasks", "ESC50", "--batch_size", "0"], "at least 1"),
        ([str(checkpoint), "--taks", "ESC50"], "--tasks"),
    ):
        with pytest.raises(UsageError, match=match) as error:
            aasp_mteb.parse_args(argv)
        assert "\n" not in str(error.value)
    args = aasp_mteb.parse_args(
        [str(checkpoint), "--benchmark", "MAEB(v1, audio-only)", "--model_options", '{"hop_ms": 20}']
    )
    assert args.benchmark == "MAEB(v1, audio-only)" and args.model_options == {"hop_ms": 20}


@pytest.mark.skipif(HAS_MTEB, reason="checks the message given where MTEB is missing")
def test_without_mteb_the_command_says_what_to_install(checkpoint):
    with pytest.raises(UsageError, match=r"aasp_hf\[mteb\]"):
        aasp_mteb.main([str(checkpoint), "--tasks", "ESC50"])


# ----------------------------------------------------------------------------------------------- make mteb-check's task
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    pytest.importorskip("datasets", reason="the task builder writes parquet files with datasets")
    root = tmp_path_factory.mktemp("mteb_data")
    _load("benchmarks/mteb/build_task.py").build(root, seed=0)
    return root


def test_the_task_is_the_hear_checks_scene_clips_in_a_folder_datasets_loads(data_dir):
    from datasets import Audio, ClassLabel, load_dataset

    loaded = load_dataset(str(data_dir / "synthetic-scene"))
    assert sorted(loaded) == ["test", "train"] and (len(loaded["train"]), len(loaded["test"])) == (40, 20)
    assert isinstance(loaded["train"].features["audio"], Audio) and isinstance(
        loaded["train"].features["label"], ClassLabel
    )
    hear_rows = _load("benchmarks/hear/build_tasks.py").scene_rows(np.random.default_rng(0))
    first = loaded["test"][0]["audio"]
    samples = first.get_all_samples()
    assert samples.sample_rate == 16000
    _, hear_audio, [hear_label] = hear_rows["test"][0]
    np.testing.assert_allclose(samples.data.numpy()[0], hear_audio, atol=1 / 2**15)  # 16-bit PCM in the parquet file
    assert loaded["test"].features["label"].int2str(loaded["test"][0]["label"]) == hear_label


# ----------------------------------------------------------------------------------------------- MTEB's own tools
@NEEDS_MTEB
def test_model_meta_describes_the_checkpoint(checkpoint, encoder):
    from mteb.models import EncoderProtocol, ModelMeta

    meta = aasp_mteb.model_meta(str(checkpoint))
    assert isinstance(meta, ModelMeta) and meta.name == "aasp_hf/encoder" and meta.modalities == ["audio"]
    assert meta.embed_dim == encoder.model.scene_embedding_size
    assert meta.n_parameters == sum(p.numel() for p in encoder.model.encoder.parameters())
    assert len(meta.revision) == 12 and meta.revision == aasp_mteb.model_meta(str(checkpoint)).revision
    loaded = meta.load_model(device="cpu")
    assert isinstance(loaded, EncoderProtocol) and loaded.mteb_model_meta.name == "aasp_hf/encoder"
    same = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    torch.testing.assert_close(torch.as_tensor(loaded.similarity(same, same)), torch.eye(2))


@NEEDS_MTEB
def test_mteb_evaluates_the_checkpoint_and_the_baseline_on_the_local_task(checkpoint, data_dir, tmp_path, capsys):
    """MTEB's `evaluate`, unmodified, loads the local task with its own `load_data` and scores both models."""
    run = _load("benchmarks/mteb/run.py")
    scores = run.main([str(data_dir), "--model", str(checkpoint), "--output_folder", str(tmp_path)])
    assert sorted(scores) == ["aasp_hf/encoder", "baseline/log-mel"]
    assert all(0.0 <= value <= 1.0 for value in scores.values())
    [stored] = list(tmp_path.glob("results/aasp_hf__encoder/*/AaspSyntheticScene.json"))
    test_scores = json.loads(stored.read_text())["scores"]["test"][0]
    assert test_scores["main_score"] == pytest.approx(scores["aasp_hf/encoder"])
    assert "AaspSyntheticScene (accuracy)" in capsys.readouterr().out
