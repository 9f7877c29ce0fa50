"""Splits by source: `--group_by` (a column, or a regular expression on the file name) makes validation and a held-out
test take whole sources (speakers, sites, devices), in the downstream protocol, `finetune.py` and `data.check`;
without it, the selection rule says that validation shares its sources with training."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from aasp_hf.data import load
from aasp_hf.data.decoding import for_safe_decoding
from aasp_hf.data.protocol import (
    SHARED_SOURCES,
    SHARED_TEST_SOURCES,
    describe_protocol,
    downstream_parts,
    load_downstream,
)
from aasp_hf.data.splits import hold_out_groups, source_groups
from aasp_hf.utils.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
SPEAKERS = ("ann", "bob", "cat", "dan", "eve", "fay", "gus", "hal")
WORDS = ("yes", "no")


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    """An audiofolder of word folders whose files are named <speaker>_<word>_<take>.wav: 8 speakers x 2 words x 3
    takes, 0.5 s each (noise: only the names matter here)."""
    root = tmp_path_factory.mktemp("voices")
    rng = np.random.default_rng(0)
    for word in WORDS:
        (root / word).mkdir()
        for speaker in SPEAKERS:
            for take in range(3):
                sf.write(
                    root / word / f"{speaker}_{word}_{take}.wav",
                    (0.1 * rng.standard_normal(8000)).astype("float32"),
                    16000,
                )
    return root


def loaded(root):
    return for_safe_decoding(load("audiofolder", root=str(root)))


def test_validation_and_test_take_whole_speakers_and_every_clip_is_in_one_split(voices):
    (part,) = downstream_parts(loaded(voices), group_by=r"^([a-z]+)_").values()
    sources = {name: set(source_groups(rows, r"^([a-z]+)_")) for name, rows in part.items()}
    assert set(part) == {"train", "validation", "test"}
    assert not (
        sources["train"] & sources["validation"]
        or sources["train"] & sources["test"]
        or sources["validation"] & sources["test"]
    ), sources
    assert sources["train"] | sources["validation"] | sources["test"] == set(SPEAKERS)
    assert sum(len(rows) for rows in part.values()) == len(SPEAKERS) * len(WORDS) * 3
    # 20 % of 48 clips held out as test: whole speakers of 6 clips each, at least 9.6 clips -> 2 speakers
    assert len(sources["test"]) == 2 and len(part["test"]) == 12
    # without --group_by the random draws share speakers between the splits
    (random_part,) = downstream_parts(loaded(voices)).values()
    shared = set(source_groups(random_part["train"], r"^([a-z]+)_")) & set(
        source_groups(random_part["test"], r"^([a-z]+)_")
    )
    assert shared


def test_hold_out_groups_is_seeded_whole_and_keeps_a_group():
    groups = ["a"] * 5 + ["b"] * 3 + ["c"] * 2
    held = hold_out_groups(groups, 0.3, seed=1, what="test")
    assert held.tolist() == hold_out_groups(groups, 0.3, seed=1, what="test").tolist()
    for group in set(groups):  # a group is held out whole or not at all
        assert len({h for g, h in zip(groups, held) if g == group}) == 1
    assert held.sum() >= 3 and not held.all()
    assert not hold_out_groups(groups, 0.99, seed=0, what="test").all()  # one group is always kept
    with pytest.raises(UsageError, match=r"found 1 source \(a\) where the test must hold out whole sources"):
        hold_out_groups(["a"] * 4, 0.2, seed=0, what="test")


def test_a_column_names_the_source_and_a_pattern_that_misses_is_one_line(voices):
    rows = loaded(voices)["train"]
    assert source_groups(rows.add_column("speaker", ["x"] * len(rows)), "speaker") == ["x"] * len(rows)
    with pytest.raises(UsageError) as missed:
        source_groups(rows, r"^(\d+)_")
    assert str(missed.value).startswith(r"--group_by '^(\\d+)_' does not match the file name '")
    with pytest.raises(UsageError, match=r"is neither a column of the data \(audio, label\) nor a regular expression"):
        source_groups(rows, "(")


def test_the_selection_rule_says_when_validation_shares_its_sources():
    assert describe_protocol("validation", False, "evar", 0.1, 0).endswith(SHARED_SOURCES)
    assert describe_protocol("validation", True, "evar", 0.1, 0).endswith(SHARED_SOURCES)
    grouped = describe_protocol("validation", False, "evar", 0.1, 0, r"^([a-z]+)_")
    assert grouped == (
        "model selection on whole sources (--group_by '^([a-z]+)_') holding 10% of train, where the "
        "dataset has no validation split of its own (seed 0)"
    )


def test_with_no_validation_the_selection_rule_says_when_the_test_shares_its_sources(voices, tmp_path):
    """The small-folder preset keeps the last step: its held-out test is then the one score, and the rule says when
    that test was drawn at random from the training sources; a dataset's own test split, or --group_by, is not."""
    rule = "the last step's model; no validation held out"
    assert describe_protocol("last", False, "evar", 0.1, 0, test_held_out=True) == rule + SHARED_TEST_SOURCES
    assert describe_protocol("test", False, "evar", 0.1, 0, test_held_out=True).endswith(SHARED_TEST_SOURCES)
    assert describe_protocol("last", False, "evar", 0.1, 0, r"^([a-z]+)_", test_held_out=True) == rule
    assert describe_protocol("last", False, "evar", 0.1, 0) == rule  # the dataset's own test split
    assert load_downstream("audiofolder", root=voices, select_on="last").test_held_out
    with_test = tmp_path / "with_test"
    for split in ("train", "test"):
        shutil.copytree(voices, with_test / split)
    assert not load_downstream("audiofolder", root=with_test, select_on="last").test_held_out


@pytest.mark.slow  # python -m aasp_hf.data.check as a process
def test_data_check_prints_the_sources_of_each_split(voices):
    run = subprocess.run(
        [sys.executable, "-m", "aasp_hf.data.check", "audiofolder", "--root", str(voices), "--group_by", r"^([a-z]+)_"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("official: sources")]
    assert line.startswith("official: sources (--group_by '^([a-z]+)_'): train 5 (") and line.endswith(
        "none in two splits"
    )
    run = subprocess.run(
        [sys.executable, "-m", "aasp_hf.data.check", "audiofolder", "--root", str(voices), "--group_by", r"^(\d+)_"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and run.stderr.startswith("error: --group_by '^(\\\\d+)_' does not match"), run.stderr


def test_finetune_with_group_by_validates_on_unseen_speakers_and_says_so(voices, tmp_path):
    from conftest import save_tiny_encoder

    import finetune

    encoder = save_tiny_encoder(tmp_path / "encoder")
    results = finetune.main(
        [
            "--model_name_or_path",
            str(encoder),
            "--dataset",
            "audiofolder",
            "--data_root",
            str(voices),
            "--group_by",
            r"^([a-z]+)_",
            "--max_steps",
            "2",
            "--eval_steps",
            "2",
            "--per_device_train_batch_size",
            "8",
            "--baseline",
            "none",
            "--output_dir",
            str(tmp_path / "ft"),
        ]
    )
    assert results["selection_rule"].startswith("model selection on whole sources (--group_by '^([a-z]+)_')")
    assert "whole sources" in (tmp_path / "ft" / "results.md").read_text()


def test_linear_eval_with_group_by_holds_out_whole_speakers(voices, tmp_path, capsys):
    from conftest import save_tiny_encoder

    import linear_eval

    encoder = save_tiny_encoder(tmp_path / "encoder")
    results = linear_eval.main(
        [
            "--model_name_or_path",
            str(encoder),
            "--dataset",
            "audiofolder",
            "--data_root",
            str(voices),
            "--group_by",
            r"^([a-z]+)_",
            "--max_steps",
            "2",
            "--eval_steps",
            "1",
            "--seeds",
            "0",
            "--baseline",
            "none",
            "--output_dir",
            str(tmp_path / "lin"),
        ]
    )
    assert results["validation_rule"].startswith("model selection on whole sources (--group_by '^([a-z]+)_')")
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "sources (--group_by" in line]
    assert line.strip().startswith("official: sources (--group_by '^([a-z]+)_'): train 5 (") and line.endswith(
        "none in two splits"
    )


def test_a_validation_of_few_sources_is_named_as_a_noisy_estimate(voices):
    from aasp_hf.data.protocol import FEW_VALIDATION_SOURCES, describe_sources

    (part,) = downstream_parts(loaded(voices), group_by=r"^([a-z]+)_").values()
    validation_sources = set(source_groups(part["validation"], r"^([a-z]+)_"))
    assert len(validation_sources) < FEW_VALIDATION_SOURCES  # 8 speakers: 10 % of the rest is one speaker
    line = describe_sources(part, r"^([a-z]+)_")
    assert f"validation holds {len(validation_sources)} source" in line and "--select_on last" in line
    assert f"({len(part['validation'])} clips)" in line
    # enough validation sources: no such line
    many = {"train": part["train"], "validation": part["train"]}  # every training speaker, at least 5
    assert len(set(source_groups(part["train"], r"^([a-z]+)_"))) >= FEW_VALIDATION_SOURCES
    assert "validation holds" not in describe_sources(many, r"^([a-z]+)_")
