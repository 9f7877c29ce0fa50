"""The downstream protocol (aasp_hf.data.protocol): EVAR's K-fold validation (a seeded random 10 % of
the training folds), training on the whole training set when selecting on test or on the last step, the task key,
clip length and labels that both scripts take from `load_downstream`, the gradient accumulation that makes up a
preset's global batch on any number of processes, and the one record per dataset that `load`, `data.check` and the
protocol all read (every alias gives its dataset's record and published clip length)."""

import logging

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from aasp_hf.data import downstream_parts, kfold_part
from aasp_hf.training.arguments import gradient_accumulation_for


def fold_dataset(num_folds=5, num_classes=10, per_class_per_fold=8) -> Dataset:
    """An ESC-50-shaped table without audio: `num_folds` folds of `num_classes` × `per_class_per_fold` clips."""
    rows = [(f, c) for f in range(1, num_folds + 1) for c in range(num_classes) for _ in range(per_class_per_fold)]
    features = Features({"clip": Value("int32"), "label": ClassLabel(num_classes=num_classes), "fold": Value("int32")})
    return Dataset.from_dict(
        {"clip": list(range(len(rows))), "label": [c for _, c in rows], "fold": [f for f, _ in rows]}, features=features
    )


def test_evar_kfold_validation_is_a_seeded_random_tenth_of_all_other_folds():
    dataset = fold_dataset()  # ESC-50's shape: 5 folds of 80 clips here (of 400 in ESC-50)
    split = kfold_part(dataset, 3)  # default: EVAR
    train, valid, test = (set(split[s]["clip"]) for s in ("train", "validation", "test"))
    others = {c for c, f in zip(dataset["clip"], dataset["fold"]) if f != 3}
    assert test == {c for c, f in zip(dataset["clip"], dataset["fold"]) if f == 3}
    assert train | valid == others and not train & valid  # every other fold trains or validates
    assert len(valid) == 32 and len(train) == 288  # 10 % of 320 (ESC-50: 160 and 1,440, not 400 and 1,200)
    assert set(split["validation"]["fold"]) == {1, 2, 4, 5}  # drawn from all the training folds, not one
    assert set(split["validation"]["label"]) == set(range(10))  # every class (EVAR's train_test_sure_split)
    assert set(kfold_part(dataset, 3)["validation"]["clip"]) == valid  # seeded
    assert set(kfold_part(dataset, 3, seed=1)["validation"]["clip"]) != valid
    old = kfold_part(dataset, 3, kfold_validation="next")  # the former rule, still available
    assert set(old["validation"]["fold"]) == {4} and len(old["train"]) == 240


def test_evar_draw_is_redrawn_until_every_class_is_in_validation():
    dataset = fold_dataset(num_classes=5, per_class_per_fold=1)  # 4 training clips per class: 2 validate
    for seed in range(5):
        valid = kfold_part(dataset, 1, seed=seed)["validation"]
        assert len(valid) == 2  # fewer than the classes: the first draw stands, with a warning
    dataset = fold_dataset(num_classes=2, per_class_per_fold=3)  # 24 training clips, 3 validate: both classes
    for seed in range(10):
        assert set(kfold_part(dataset, 1, seed=seed)["validation"]["label"]) == {0, 1}


def test_downstream_parts_k_fold_and_selection_rules():
    dataset = DatasetDict({"train": fold_dataset()})
    parts = downstream_parts(dataset, folds=[1, 5], seed=0)
    assert list(parts) == ["fold1", "fold5"] and all(set(p) == {"train", "validation", "test"} for p in parts.values())
    for rule in ("test", "last"):  # nothing held out: every other fold trains
        parts = downstream_parts(dataset, folds=[2], select_on=rule)
        assert set(parts["fold2"]) == {"train", "test"} and len(parts["fold2"]["train"]) == 320
    with pytest.raises(ValueError, match="select_on"):
        downstream_parts(dataset, select_on="best")
    with pytest.raises(ValueError, match="kfold_validation"):
        downstream_parts(dataset, kfold_validation="random")


def test_audioset_like_dataset_trains_on_all_of_train_unless_selecting_on_validation():
    table = fold_dataset().remove_columns("fold")
    dataset = DatasetDict({"train": table.select(range(300)), "test": table.select(range(300, 400))})
    held = downstream_parts(dataset, validation_fraction=0.1, seed=0)["official"]
    assert (len(held["train"]), len(held["validation"]), len(held["test"])) == (270, 30, 100)
    expected = dataset["train"].train_test_split(test_size=0.1, seed=0)  # unchanged rule (linear_eval, run.py)
    assert held["validation"]["clip"] == expected["test"]["clip"]
    for rule in ("test", "last"):  # the paper fine-tunes on all of AS-20K
        full = downstream_parts(dataset, select_on=rule)["official"]
        assert set(full) == {"train", "test"} and full["train"]["clip"] == dataset["train"]["clip"]


def test_load_downstream_names_the_task_and_its_clip_length_and_picks_the_test_folds(monkeypatch):
    from aasp_hf import data
    from aasp_hf.data import protocol

    dataset = fold_dataset()
    dataset = dataset.add_column("audio", [f"/nowhere/{clip}.wav" for clip in dataset["clip"]])  # never read
    calls = []

    def fake_load(name, root=None, **kwargs):
        calls.append((name, root, kwargs))
        return DatasetDict({"train": dataset})

    monkeypatch.setattr(protocol, "load", fake_load)  # the name load_downstream calls
    first = data.load_downstream("ESC-50", root="/data", loader_kwargs={"metadata_csv": "m.csv"}, max_folds=1)
    assert calls == [("ESC-50", "/data", {"metadata_csv": "m.csv"})]
    assert (first.task, first.clip_seconds, first.multi_label) == ("esc50", 5.0, False)
    assert first.label_names == [str(c) for c in range(10)] and list(first.parts) == ["fold1"]
    every = data.load_downstream("esc50", root="/data")
    assert list(every.parts) == [f"fold{k}" for k in range(1, 6)] and data.is_kfold(every.parts)
    assert every.parts["fold1"]["validation"]["clip"] == first.parts["fold1"]["validation"]["clip"]  # one seeded draw
    assert list(data.load_downstream("esc50", root="/data", folds=[3], max_folds=1).parts) == ["fold3"]
    assert data.load_downstream("esc50", root="/data", clip_seconds=2.0).clip_seconds == 2.0
    # the task key of both scripts: finetune.py had the crema_d alias, linear_eval.py did not
    assert data.evar_task("crema_d") == data.evar_task("CREMA-D") == "cremad"
    assert data.evar_task("as20k") == data.evar_task("AS2M") == "audioset"
    assert data.evar_task("x", task="us8k") == "us8k"
    calls.clear()
    with pytest.raises(ValueError, match="No EVAR clip length for task 'mystery'"):
        data.load_downstream("esc50", root="/data", task="mystery")
    assert calls == []  # a task named on purpose is refused before anything is read


def test_global_batch_is_made_up_by_accumulation(caplog):
    assert gradient_accumulation_for(None, 32, 1) == 1  # no global batch stated: the flag's accumulation
    assert gradient_accumulation_for(None, 32, 1, 3) == 3
    assert gradient_accumulation_for(128, 32, 4) == 1  # the paper's 4 GPUs
    assert gradient_accumulation_for(128, 32, 2) == 2
    with caplog.at_level(logging.WARNING, logger="aasp_hf.training.arguments"):
        assert gradient_accumulation_for(128, 32, 1) == 4  # one process: 4 micro-batches of 32, not a batch of 32
    assert "4 gradient-accumulation micro-batches" in caplog.text
    assert gradient_accumulation_for(128, 32, 1, 4) == 4  # an explicit agreeing value is fine
    with pytest.raises(ValueError, match="not a multiple"):
        gradient_accumulation_for(128, 32, 8)
    with pytest.raises(ValueError, match="contradicts"):
        gradient_accumulation_for(128, 32, 1, 2)


# ---- one record per dataset: the names that load(), data.check and the protocol know ---------------------------------
# Every name or alias that any of the three accepted when each kept its own table, and spellings of them, with the
# dataset's record and its published clip length (None: none is published, the protocol measures the clips). Where
# the protocol's table lacked an alias that the loader accepted (voxceleb, speechcommands, esc_50), the run silently
# got the measured mean clip length instead of the published one.
NAMES_AND_LENGTHS = {
    **dict.fromkeys(("as20k", "audioset", "AudioSet", "as-20k"), ("as20k", 10.0)),
    **dict.fromkeys(("as2m", "AS2M"), ("as2m", 10.0)),
    **dict.fromkeys(("esc50", "esc_50", "ESC-50"), ("esc50", 5.0)),
    **dict.fromkeys(("us8k", "urbansound8k", "UrbanSound8K"), ("us8k", 4.0)),
    **dict.fromkeys(("scv2", "speech_commands", "speechcommands", "Speech-Commands"), ("scv2", 1.0)),
    "nsynth": ("nsynth", 4.0),
    **dict.fromkeys(("cremad", "crema_d", "CREMA-D"), ("cremad", 2.5)),
    "gtzan": ("gtzan", 30.0),
    "voxforge": ("voxforge", 5.8),
    "surge": ("surge", 4.0),
    **dict.fromkeys(("voxceleb1", "voxceleb", "VoxCeleb"), ("voxceleb1", 8.2)),
    **dict.fromkeys(("sound_events", "sound-events", "soundevents", "desed", "DESED"), ("sound_events", 10.0)),
    **dict.fromkeys(("audiofolder", "AudioFolder"), ("audiofolder", None)),
}


@pytest.mark.parametrize("name", sorted(NAMES_AND_LENGTHS))
def test_every_name_and_alias_is_its_datasets_record_in_load_check_and_the_protocol(name, monkeypatch):
    import dataclasses

    from aasp_hf import data
    from aasp_hf.data import check, protocol
    from aasp_hf.data.loaders import dataset_records
    from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor

    expected, seconds = NAMES_AND_LENGTHS[name]
    record = dataset_records.DATASET_RECORDS[expected]
    assert dataset_records.find_record(name) is record and record.clip_seconds == seconds
    # load(): the record's loader, with the options the name fixes (AudioSet's variant)
    calls = []
    fake = dataclasses.replace(record, loader=lambda root, **options: calls.append((root, options)))
    monkeypatch.setitem(dataset_records._REGISTRY, expected, fake)
    data.load(name, root="/data")
    assert calls == [("/data", dict(record.loader_options))]
    # data.check: the record's name, hence its official counts and audio folder
    assert check.canonical_name(name) == expected
    # the protocol: the record's task and published length, never the measured mean where one is published
    monkeypatch.setattr(protocol, "mean_clip_seconds", lambda rows, max_clips=1000: (3.21, 4))
    task = protocol.evar_task(name)
    loaded = DatasetDict({"train": fold_dataset().remove_columns("fold")})
    assert task == record.task
    assert protocol.downstream_clip_seconds(task, None, loaded) == (seconds if seconds is not None else 3.21)
    assert protocol.DownstreamTask(task, {}, False, [], 1.0).frame_level == (record.task_type == "sound events")
    # the fine-tuning collator's task=: the same length, or the same refusal where none is published
    if seconds is None:
        with pytest.raises(ValueError, match="pass clip_seconds="):
            data.AaspFineTuningCollator(AaspFeatureExtractor(), task=name)
    else:
        assert data.AaspFineTuningCollator(AaspFeatureExtractor(), task=name).clip_seconds == seconds


@pytest.mark.parametrize("alias", ["voxceleb", "speechcommands", "esc_50"])
def test_load_downstream_gives_an_alias_its_datasets_published_clip_length(alias, monkeypatch):
    from aasp_hf.data import protocol

    expected, seconds = NAMES_AND_LENGTHS[alias]
    table = fold_dataset().remove_columns("fold")
    monkeypatch.setattr(protocol, "load", lambda name, root=None, **kwargs: DatasetDict({"train": table}))
    monkeypatch.setattr(protocol, "mean_clip_seconds", lambda *args, **kwargs: pytest.fail("clips measured"))
    task = protocol.load_downstream(alias, root="/data")
    assert (task.task, task.clip_seconds) == (protocol.evar_task(expected), seconds)


def test_one_new_record_is_all_that_load_check_and_the_protocol_need(tmp_path, monkeypatch):
    """A dataset added as one record, and nothing else, is loaded by `load`, checked by `data.check` against its
    official counts and audio folder, and given its task and clip length by the protocol, under its name or alias."""
    import numpy as np
    import soundfile as sf
    from datasets import Audio

    from aasp_hf import data
    from aasp_hf.data import check, protocol
    from aasp_hf.data.loaders import dataset_records
    from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor

    for index in range(7):  # six clips the loader reads, one that no split names
        (tmp_path / "clips").mkdir(exist_ok=True)
        sf.write(str(tmp_path / "clips" / f"{index}.wav"), np.zeros(1600, dtype=np.float32), 16000)
    options_seen = []

    def load_toyset(root, *, marker=None):
        options_seen.append(marker)
        clips = sorted(str(path) for path in (tmp_path / "clips").glob("*.wav"))[:6]
        features = Features({"audio": Audio(sampling_rate=16000), "label": ClassLabel(names=["a", "b"])})
        table = Dataset.from_dict({"audio": clips, "label": [i % 2 for i in range(6)]}, features=features)
        return DatasetDict({"train": table.select(range(4)), "test": table.select(range(4, 6))})

    assert dataset_records.find_record("toy") is None
    with pytest.raises(ValueError, match="Unknown dataset 'toy'"):
        data.load("toy", root=tmp_path)
    record = dataset_records.DatasetRecord(
        "toyset",
        load_toyset,
        task="toyset",
        task_type="single-label",
        clip_seconds=3.0,
        aliases=("toy",),
        loader_options={"marker": "bound"},
        official={"train": 4, "test": 3},
        audio_dir="clips",
    )
    monkeypatch.setitem(dataset_records._REGISTRY, "toyset", record)

    assert list(data.load("TOY", root=tmp_path)) == ["train", "test"] and options_seen == ["bound"]
    report = check.check_dataset("toy", tmp_path)
    assert report["name"] == "toyset" and report["errors"] == []
    assert {row["split"]: (row["clips"], row["official"]) for row in report["splits"]} == {
        "train": (4, 4),
        "test": (2, 3),
    }
    assert report["unnamed_files"] == {"folder": str(tmp_path / "clips"), "count": 1, "examples": ["clips/6.wav"]}
    assert check.main(["toy", "--root", str(tmp_path)]) == 0
    monkeypatch.setattr(protocol, "mean_clip_seconds", lambda *args, **kwargs: pytest.fail("clips measured"))
    task = protocol.load_downstream("toy", root=tmp_path)
    assert (task.task, task.clip_seconds, task.label_names) == ("toyset", 3.0, ["a", "b"])
    assert data.AaspFineTuningCollator(AaspFeatureExtractor(), task="toy").clip_seconds == 3.0
