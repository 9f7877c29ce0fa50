"""`make hear-check`'s own parts, without HEAR's tools (they live in .venv-hear): the task builder writes HEAR's
on-disk format with labels that match the audio, the log-mel floor keeps HEAR's contract (timestamps in ms, centred),
and the score table reads what heareval's prediction runner writes."""

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"hear_{name}", ROOT / "benchmarks" / "hear" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_tasks, logmel_floor, scores = _load("build_tasks"), _load("logmel_floor"), _load("scores")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    build_tasks.build(root, seed=0)
    return root


def test_the_tasks_are_in_heareval_layout(tasks):
    for task in ("synthetic-scene", "synthetic-event"):
        metadata = json.loads((tasks / task / "task_metadata.json").read_text())
        with open(tasks / task / "labelvocabulary.csv") as handle:
            vocabulary = {row["label"] for row in csv.DictReader(handle)}
        for split in metadata["splits"]:
            table = json.loads((tasks / task / f"{split}.json").read_text())
            folder = tasks / task / "16000" / split
            assert sorted(table) == sorted(path.name for path in folder.iterdir()), (task, split)
            for name, target in table.items():
                info = sf.info(folder / name)
                assert info.samplerate == 16000 and info.duration == pytest.approx(metadata["sample_duration"])
                labels = target if metadata["embedding_type"] == "scene" else [event["label"] for event in target]
                assert set(labels) <= vocabulary, (task, name)


def test_an_event_lies_where_its_label_says(tasks):
    """The labelled span holds the event: the audio outside it is the quiet background only."""
    table = json.loads((tasks / "synthetic-event" / "test.json").read_text())
    for name, [event] in table.items():
        audio, rate = sf.read(tasks / "synthetic-event" / "16000" / "test" / name, dtype="float32")
        start, end = round(event["start"] * rate / 1000), round(event["end"] * rate / 1000)
        inside, outside = audio[start:end], np.concatenate([audio[:start], audio[end:]])
        assert np.sqrt(np.mean(inside**2)) > 3 * np.sqrt(np.mean(outside**2)), name
        assert 400 <= event["end"] - event["start"] <= 1000


def test_a_built_task_is_kept(tasks, capsys):
    before = (tasks / "synthetic-scene" / "train.json").stat().st_mtime_ns
    build_tasks.build(tasks, seed=1)
    assert (tasks / "synthetic-scene" / "train.json").stat().st_mtime_ns == before
    assert "exists: kept" in capsys.readouterr().out


def test_the_floor_keeps_the_contract():
    model = logmel_floor.load_model()
    audio = torch.zeros(3, 16000)
    audio[1, 7680] = 1.0  # a click at 480 ms in the second clip only (a frame centre: 12 hops of 40 ms)
    embeddings, timestamps = logmel_floor.get_timestamp_embeddings(audio, model)
    scene = logmel_floor.get_scene_embeddings(audio, model)
    assert embeddings.shape == (3, timestamps.shape[1], model.timestamp_embedding_size)
    assert scene.shape == (3, model.scene_embedding_size) and scene.dtype == torch.float32
    assert torch.allclose(timestamps.diff(dim=1), torch.tensor(40.0))  # ms, evenly spaced
    change = (embeddings[1] - embeddings[0]).abs().sum(dim=1)
    assert timestamps[1, change.argmax()] == pytest.approx(480.0)  # centred: the frame that peaks is the click's
    assert torch.equal(embeddings[0], embeddings[2])  # batch neighbours do not matter
    with pytest.raises(ValueError, match="no weights"):
        logmel_floor.load_model("some/folder")


def test_the_score_table_reads_the_prediction_runner_output(tmp_path, capsys):
    for module, value in (("aasp_hf.hear", 0.5), ("logmel_floor", 0.25)):
        task = tmp_path / module / "synthetic-scene"
        task.mkdir(parents=True)
        (task / "task_metadata.json").write_text(json.dumps({"evaluation": ["top1_acc"]}))
        (task / "test.predicted-scores.json").write_text(json.dumps({"test": {"test_top1_acc": value}}))
    assert scores.test_scores(tmp_path) == {"synthetic-scene (top1_acc)": {"aasp_hf.hear": 0.5, "logmel_floor": 0.25}}
    scores.main([str(tmp_path)])
    assert capsys.readouterr().out.splitlines()[1].split() == ["synthetic-scene", "(top1_acc)", "0.500", "0.250"]
