"""The downstream protocol (aasp_hf.data.protocol): EVAR's K-fold validation (a seeded random 10 % of
the training folds), training on the whole training set when selecting on test or on the last step, the task key,
clip length and labels that both scripts take from `load_downstream`, and the gradient accumulation that makes up a
preset's global batch on any number of processes."""

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
    import aasp_hf.data as data
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
