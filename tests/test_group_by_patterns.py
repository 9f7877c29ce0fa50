"""`--group_by` patterns that cannot give each clip a source, or whose sources are the classes themselves: one
line, from the one place that reads them (`data.splits.source_groups`, `split_by_groups`), in `data.check`,
`finetune.py` and `linear_eval.py` alike."""

import logging
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from aasp_hf.data import load
from aasp_hf.data.decoding import for_safe_decoding
from aasp_hf.data.protocol import downstream_parts
from aasp_hf.data.splits import classes_held_out_whole, source_groups
from aasp_hf.utils.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
SPEAKERS = ("george", "jackson", "nicolas", "theo")
OPTIONAL_GROUP = "_(george)_|_[a-z]+_"  # the group takes part only in george's names


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """An audiofolder of spoken digits as Free Spoken Digit names them, <digit>_<speaker>_<take>.wav in one folder
    per digit: 5 digits x 4 speakers x 2 takes of 0.25 s (noise: only the names matter)."""
    root = tmp_path_factory.mktemp("digits")
    rng = np.random.default_rng(0)
    for digit in range(5):
        (root / str(digit)).mkdir()
        for speaker in SPEAKERS:
            for take in range(2):
                clip = (0.1 * rng.standard_normal(4000)).astype("float32")
                sf.write(root / str(digit) / f"{digit}_{speaker}_{take}.wav", clip, 16000)
    return root


def loaded(root):
    return for_safe_decoding(load("audiofolder", root=str(root)))


def test_a_file_whose_first_group_did_not_take_part_is_one_line(digits):
    rows = loaded(digits)["train"]
    with pytest.raises(UsageError) as refused:
        source_groups(rows, OPTIONAL_GROUP)
    message = str(refused.value)
    assert message.startswith(f"--group_by {OPTIONAL_GROUP!r} matches the file name '0_jackson_0.wav' ('_jackson_')")
    assert "its first group does not take part in that match" in message and "\n" not in message
    assert set(source_groups(rows, "_(george|[a-z]+)_")) == set(SPEAKERS)  # the pattern the message suggests


def test_sources_that_are_the_classes_warn_in_one_line_and_speakers_do_not(digits, caplog):
    with caplog.at_level(logging.WARNING, logger="aasp_hf.data.splits"):
        (part,) = downstream_parts(loaded(digits), group_by=r"^(\d)_").values()
    warned = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    test_digits = sorted(set(source_groups(part["test"], r"^(\d)_")))
    assert (
        f"--group_by: every source held out as test ({len(test_digits)}: {', '.join(test_digits)}) holds one "
        in (warned[0])
    )
    assert len(warned) == 2 and "as validation" in warned[1] and not any("\n" in line for line in warned)
    assert "the pattern seems to take the class, not the source" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aasp_hf.data.splits"):
        downstream_parts(loaded(digits), group_by="_([a-z]+)_")  # speakers: each says every digit
    assert not [record for record in caplog.records if record.levelno == logging.WARNING]


def test_classes_held_out_whole_needs_single_class_sources_and_a_class_training_lacks():
    held = np.array([False, False, True, True])
    assert "no training clip has that class (b)" in classes_held_out_whole(
        ["x", "x", "y", "y"], ["a", "a", "b", "b"], held, "test"
    )
    assert classes_held_out_whole(["x", "x", "y", "y"], ["a", "b", "a", "a"], held, "test") is None  # seen in training
    assert classes_held_out_whole(["x", "x", "y", "y"], ["a", "a", "b", "c"], held, "test") is None  # 2 classes in y
    assert classes_held_out_whole(["x", "y"], [["a"], ["b"]], np.array([False, True]), "test") is None  # multi-label


@pytest.mark.slow  # three script processes
def test_data_check_finetune_and_linear_eval_say_the_optional_group_in_one_line(digits, tmp_path):
    from conftest import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    downstream = ["--model_name_or_path", str(encoder), "--dataset", "audiofolder", "--data_root", str(digits)]
    downstream += ["--group_by", OPTIONAL_GROUP, "--max_steps", "1", "--baseline", "none"]
    commands = {
        "python -m aasp_hf.data.check": ["-m", "aasp_hf.data.check", "audiofolder", "--root", str(digits)]
        + ["--group_by", OPTIONAL_GROUP],
        "finetune.py": ["examples/finetune.py", *downstream, "--output_dir", str(tmp_path / "ft")],
        "linear_eval.py": ["examples/linear_eval.py", *downstream, "--output_dir", str(tmp_path / "lin")],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with ThreadPoolExecutor(3) as pool:
        runs = {
            name: pool.submit(
                subprocess.run, [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True
            )
            for name, command in commands.items()
        }
    for name, run in runs.items():
        process = run.result()
        errors = [line for line in process.stderr.splitlines() if "error: " in line]
        assert process.returncode in (1, 2) and "Traceback" not in process.stderr, (name, process.stderr[-3000:])
        assert len(errors) == 1 and "its first group does not take part in that match" in errors[0], errors
