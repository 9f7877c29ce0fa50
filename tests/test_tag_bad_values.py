"""Bad values given to `python -m aasp_hf.tag` (run as a user runs it, a real process) and to the pipelines: each is
one line naming the value, before any file is read (the command: `prog: error: ...` and exit status 2; the
pipeline: a ValueError); the command and the pipeline refuse the same windows with the same words, since they share
one windowing; a run where files failed exits 3 and names the failures file in its last line."""

import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from transformers import pipeline

from aasp_hf import AaspAudioClassificationPipeline
from test_long_audio import RATE, noisy_tones, save_classifier

ROOT = Path(__file__).resolve().parents[1]
PROG = "python -m aasp_hf.tag"


def run_tag(*arguments):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "aasp_hf.tag", *map(str, arguments)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny single-label classifier (0.63-s windows), a copy with a config.json that is not JSON, one with a value
    of the wrong type, one without weights, one whose weights were cut short; a 2.5-s clip and a file that is not
    audio."""
    root = tmp_path_factory.mktemp("bad_values")
    model = save_classifier(root / "model")
    for name in ("not_json", "wrong_type", "no_weights", "truncated"):
        (root / name).mkdir()
        for file in model.iterdir():
            if not (name == "no_weights" and file.name == "model.safetensors"):
                (root / name / file.name).write_bytes(file.read_bytes())
    (root / "not_json" / "config.json").write_text("{garbage")
    weights = (root / "truncated" / "model.safetensors").read_bytes()
    (root / "truncated" / "model.safetensors").write_bytes(weights[: len(weights) // 2])  # an interrupted copy
    config = (root / "wrong_type" / "config.json").read_text()
    (root / "wrong_type" / "config.json").write_text(config.replace('"hidden_size": 32', '"hidden_size": "abc"'))
    sf.write(root / "a.wav", noisy_tones(2.5), RATE, subtype="FLOAT")
    (root / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEnot audio at all")
    (root / "folder.csv").mkdir()
    return root


REFUSALS = {  # name -> (arguments replacing the defaults, words the one line must hold)
    "hop_of_0_samples": (["--chunk_hop_s", "0.00001"], "--chunk_hop_s 1e-05 is shorter than one spectrogram hop"),
    "infinite_window": (["--chunk_length_s", "inf"], "--chunk_length_s inf must be a positive, finite number"),
    "window_of_0_samples": (["--chunk_length_s", "0.00001"], "--chunk_length_s 1e-05 is shorter than the model's"),
    "garbage_device": (["--device", "garbage"], "--device garbage is not a torch device"),
    "config_not_json": (["--model", "{root}/not_json"], "not_json: its config.json is not JSON"),
    "config_wrong_type": (["--model", "{root}/wrong_type"], "wrong_type does not load as AaspForAudioClassification"),
    "no_weights": (["--model", "{root}/no_weights"], "no_weights holds a config.json but no weights"),
    "truncated_weights": (["--model", "{root}/truncated"], "truncated/model.safetensors (Error while deserializing"),
    "output_a_folder": (["--output", "{root}/folder.csv"], "folder.csv is a folder"),
    "threshold_above_1": (["--threshold", "2"], "--threshold 2.0 must be between 0 and 1"),
    "threshold_nan": (["--threshold", "nan"], "--threshold nan must be a number"),
    "events_into_output": (["--events", "{root}/out.csv", "--threshold", "0.5"], "out.csv is the file --output"),
}
if not torch.cuda.is_available():
    REFUSALS["cuda_without_a_gpu"] = (["--device", "cuda"], "--device cuda is not available on this machine")


def refusal_arguments(root, changes) -> list:
    """The command line of a refusal: the tiny model, OUT `root/out.csv` and the clip, with `changes` applied."""
    options = {"--model": "{root}/model", "--output": "{root}/out.csv"}
    extra = []
    for flag, value in zip(changes[::2], changes[1::2]):
        if flag in options:
            options[flag] = value
        else:
            extra += [flag, value]
    return [part.format(root=root) for part in [*sum(options.items(), ()), *extra]] + [root / "a.wav"]


@pytest.fixture(scope="module")
def refused(setup):
    """{name: the finished process} of every refusal, three at a time (each is mostly the import of torch)."""
    with ThreadPoolExecutor(3) as pool:
        runs = {
            name: pool.submit(run_tag, *refusal_arguments(setup, changes)) for name, (changes, _) in REFUSALS.items()
        }
        return {name: run.result() for name, run in runs.items()}


@pytest.mark.parametrize("name", sorted(REFUSALS))
@pytest.mark.slow  # `refused`: one tag process per bad value
def test_a_bad_value_is_one_line_and_exit_2_before_any_file_is_read(setup, refused, name):
    process, words = refused[name], REFUSALS[name][1]
    lines = process.stderr.strip().splitlines()
    assert process.returncode == 2 and len(lines) == 1, process.stderr[-3000:]
    assert lines[0].startswith(f"{PROG}: error: ") and words in lines[0], lines[0]
    assert not (setup / "out.csv").exists()  # nothing written: refused before any work


@pytest.mark.slow  # `refused`: one tag process per bad value
def test_the_command_and_the_pipeline_refuse_a_window_with_the_same_words(setup, refused):
    """One windowing (`pipeline_aasp.window_samples`): the pipeline's message, its option spelt as the command's flag,
    is the command's."""
    classifier = pipeline(
        "audio-classification", model=str(setup / "model"), pipeline_class=AaspAudioClassificationPipeline
    )
    for name in ("hop_of_0_samples", "window_of_0_samples", "infinite_window"):
        (option, value), _ = REFUSALS[name]
        option = option.removeprefix("--")
        with pytest.raises(ValueError) as in_the_pipeline:
            classifier(noisy_tones(2.5), **{option: float(value)})
        spelt = str(in_the_pipeline.value).replace(f"{option}={float(value)!r}", f"--{option} {float(value)}")
        assert refused[name].stderr.strip() == f"{PROG}: error: {spelt}"


@pytest.mark.parametrize(
    "options, words",
    [
        ({"top_k": -1}, "top_k=-1 must be a whole number of labels"),
        ({"top_k": 0}, "top_k=0 must be a whole number of labels"),
        ({"chunk_length_s": math.inf}, "chunk_length_s=inf must be a positive, finite number of seconds"),
        ({"chunk_length_s": 1e-6}, "chunk_length_s=1e-06 is shorter than the model's smallest step in time"),
        ({"chunk_hop_s": 1e-6}, "chunk_hop_s=1e-06 is shorter than one spectrogram hop"),
        ({"chunk_hop_s": 5.0}, "chunk_hop_s=5.0 must be at most the window (0.63 s)"),
    ],
)
def test_the_pipeline_refuses_a_bad_option_naming_it(setup, options, words):
    classifier = pipeline(
        "audio-classification", model=str(setup / "model"), pipeline_class=AaspAudioClassificationPipeline
    )
    with pytest.raises(ValueError) as refused:
        classifier(np.zeros(RATE, dtype=np.float32), **options)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_run_where_files_failed_exits_3_and_names_the_failures_file_last(setup, tmp_path):
    out = tmp_path / "tags.csv"
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, dtype=np.float32), RATE)  # a whole WAV header and no sample
    process = run_tag("--model", setup / "model", "--output", out, setup / "a.wav", setup / "broken.wav", empty)
    assert process.returncode == 3, process.stderr[-3000:]
    last = process.stderr.strip().splitlines()[-1]
    assert last == f"2 file(s) could not be tagged: listed in {out}.failures.tsv (exit status 3).", last
    failures = dict(line.split("\t", 1) for line in (tmp_path / "tags.csv.failures.tsv").read_text().splitlines())
    assert "Could not decode" in failures[str(setup / "broken.wav")]
    assert "holds no audio (0 samples decoded)" in failures[str(empty)]  # not a decoder's message about seconds
    assert str(setup / "a.wav") in out.read_text()  # the good file is tagged all the same
