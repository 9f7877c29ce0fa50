"""Pre-training from a fairseq manifest (`--train_manifest`), the `.tsv` that wav2vec 2.0, data2vec 2.0, EAT and BEATs
read: written here as fairseq's examples/wav2vec/wav2vec_manifest.py writes it (the root folder on line 1, then
`relative/path<TAB>frames`), over tiny 16-kHz WAVs, one with spaces in its name and one listed but missing on disk.
The tiny preset pre-trains on it, counts the missing file, resumes exactly and plans its data path; a malformed or
empty manifest is one line naming the file and the line."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import TINY_PRESET, assert_states_close, tiny_preset_argv
from safetensors.torch import load_file

import pretrain
from aasp_hf.data.clips import MISSING_FILE
from aasp_hf.data.decoding import for_safe_decoding
from aasp_hf.data.loaders import load_fairseq_manifest, read_fairseq_manifest
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import UsageError

PRESENT = ["bal/clip0.wav", "bal/a clip with spaces.wav", "unbal/clip2.wav", "unbal/clip3.wav", "unbal/sub/clip4.wav"]
MISSING = "unbal/taken down.wav"  # a video taken down since the manifest was written


def write_manifest(folder: Path) -> tuple[Path, dict]:
    """Five WAVs of 1-2 s under folder/audio and a manifest `train.tsv` as wav2vec_manifest.py writes it: its root line
    is the folder's real path (`print(dir_path, file=f)`), each clip `print(f"{relpath}\\t{frames}", file=f)`; then a
    line for a file that is not there. Returns (manifest, {path as listed: frames})."""
    audio = folder / "audio"
    rng = np.random.default_rng(0)
    frames = {}
    for number, listed in enumerate(PRESENT):
        path = audio / listed
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, (0.1 * rng.standard_normal(16_000 + 4_000 * number)).astype("float32"), 16000)
        frames[listed] = sf.info(path).frames
    frames[MISSING] = 24_000
    manifest = folder / "train.tsv"
    with open(manifest, "w") as f:
        print(os.path.realpath(audio), file=f)
        for listed in [PRESENT[0], MISSING, *PRESENT[1:]]:
            print(f"{listed}\t{frames[listed]}", file=f)
    return manifest, frames


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return write_manifest(tmp_path_factory.mktemp("fairseq"))


def argv(output_dir, manifest_path, *extra):
    """The tiny preset's command (conftest.py) on the manifest: 6 listed clips in micro-batches of 3, so an epoch is 2
    steps and holds every listed clip (the missing one included) once; 4 steps."""
    return tiny_preset_argv(
        output_dir,
        *extra,
        synthetic_clips=None,
        train_manifest=manifest_path,
        per_device_train_batch_size=3,
        max_steps=4,
    )


def history(output_dir):
    return [json.loads(line) for line in (Path(output_dir) / "log_history.jsonl").read_text().splitlines()]


def test_the_manifest_is_read_as_fairseq_reads_it(manifest, tmp_path):
    path, frames = manifest
    root, entries = read_fairseq_manifest(path)
    assert root == os.path.realpath(path.parent / "audio")
    listed = [PRESENT[0], MISSING, *PRESENT[1:]]
    assert entries == [(number, name, frames[name]) for number, name in enumerate(listed, start=2)]
    dataset = load_fairseq_manifest(path)
    assert len(dataset) == 6 and dataset.column_names == ["audio", "num_samples"]
    assert for_safe_decoding(dataset)[2]["audio"] == {
        "path": os.path.join(root, "bal/a clip with spaces.wav"),
        "bytes": None,
    }
    assert dataset["num_samples"] == [frames[name] for name in listed]
    stream = load_fairseq_manifest(path, streaming=True)
    assert [row["num_samples"] for row in for_safe_decoding(stream)] == dataset["num_samples"]
    # a blank line (a trailing one, or between entries) is passed over; CRLF line ends read as LF
    crlf = tmp_path / "crlf.tsv"
    crlf.write_bytes(path.read_bytes().replace(b"\n", b"\r\n") + b"\r\n\r\n")
    assert read_fairseq_manifest(crlf) == (root, entries)


def test_pretraining_counts_the_missing_file_and_resumes_exactly(manifest, tmp_path, capsys):
    path, _ = manifest
    whole = pretrain.main(argv(tmp_path / "whole", path))
    assert whole["step"] == 4 and whole["num_clips"] == 6
    # the missing file was in every epoch's batches (replaced by another clip of its micro-batch), one file skipped
    assert whole["decode_failures"] == 1 and whole["missing_files"] == 1
    failures = (tmp_path / "whole" / "decode_failures.txt").read_text().splitlines()
    assert failures == [f"{os.path.join(os.path.realpath(path.parent / 'audio'), MISSING)}\t{MISSING_FILE}"]
    assert "skipped 1 file(s) that failed to decode, 1 of them missing on disk" in capsys.readouterr().out
    assert json.loads((tmp_path / "whole" / "all_results.json").read_text())["missing_files"] == 1

    # stopped after step 1 (half-way through epoch 0), then resumed: the uninterrupted run's weights and losses
    first = pretrain.main(argv(tmp_path / "resumed", path, "--stop_after_steps", "1"))
    assert first["step"] == 1
    resumed = pretrain.main(argv(tmp_path / "resumed", path, "--resume"))
    assert resumed["start_step"] == 1 and resumed["step"] == 4 and resumed["missing_files"] == 1
    assert_states_close(
        load_file(tmp_path / "resumed" / "checkpoint-4" / "model.safetensors"),
        load_file(tmp_path / "whole" / "checkpoint-4" / "model.safetensors"),
    )
    a, b = history(tmp_path / "whole"), history(tmp_path / "resumed")
    assert [r["step"] for r in b] == [1, 2, 3, 4] and [r["train/epoch"] for r in b] == [0, 0, 1, 1]
    for ra, rb in zip(a, b):
        assert rb["train/loss"] == pytest.approx(ra["train/loss"], rel=1e-5), ra["step"]

    # another manifest is another run: refused on resume unless allowed
    with pytest.raises(UsageError, match="train_manifest .* → .*--resume_allow_changes train_manifest"):
        pretrain.main(
            argv(
                tmp_path / "resumed",
                tmp_path / "other.tsv",
                "--resume",
                "--max_steps",
                "5",
                "--resume_allow_changes",
                "max_steps",
            )
        )


def test_streaming_reads_the_manifest_and_counts_the_missing_file(manifest, tmp_path):
    path, _ = manifest
    results = pretrain.main(
        argv(
            tmp_path / "stream",
            path,
            "--streaming",
            "true",
            "--shuffle_buffer_size",
            "4",
            "--max_steps",
            "2",
            "--save_steps",
            "2",
        )
    )
    assert results["step"] == 2 and results["num_clips"] is None  # one epoch: every listed clip once
    assert results["decode_failures"] == 1 and results["missing_files"] == 1


def test_plan_times_the_manifests_files_and_reads_its_lengths(manifest, tmp_path):
    path, frames = manifest
    results = pretrain.main(
        [
            "--config",
            str(TINY_PRESET),
            "--plan",
            "--train_manifest",
            str(path),
            "--plan_data_clips",
            "6",
            "--per_device_train_batch_size",
            "3",
            "--output_dir",
            str(tmp_path / "never"),
        ]
    )
    data, plan = results["data"], results["plan"]
    assert f"data source: --train_manifest {path}" in plan and not (tmp_path / "never").exists()
    assert data["clips"] >= 6 and data["decode_clips_per_s"] > 0
    lengths = data["manifest"]
    assert lengths["clips"] == 6 and lengths["rate"] == 16000 and lengths["rate_from"] == f"the header of {PRESENT[0]}"
    assert lengths["hours"] == pytest.approx(sum(frames.values()) / 16000 / 3600)
    assert lengths["min_seconds"] == 1.0 and lengths["max_seconds"] == pytest.approx(frames[PRESENT[4]] / 16000)
    assert lengths["shorter_than_crop"] == 0  # the tiny preset crops 0.64 s
    assert "6 listed" in plan and "an epoch is 2 steps of 3 clips" in plan


BAD = {
    "empty": ("", r"^fairseq manifest .*bad\.tsv is empty; expected a fairseq manifest: the root folder on line 1"),
    "root only": ("{root}\n", r"^fairseq manifest .*bad\.tsv lists no clips \(only its root folder"),
    "no root line": ("a.wav\t16000\nb.wav\t16000\n", r"^.*bad\.tsv, line 1: 'a.wav\\t16000' is not a folder"),
    "spaces, not a tab": (
        "{root}\na.wav\t16000\nb.wav 16000\n",
        r"^.*bad\.tsv, line 3: 'b.wav 16000' is not `relative/path<TAB>num_samples` \(no tab; "
        r"fields separated by spaces\?\)$",
    ),
    "not a whole number": ("{root}\na.wav\t1.5e4\n", r"^.*bad\.tsv, line 2: .*\(num_samples '1.5e4' is not a whole"),
    "three fields": ("{root}\n\na.wav\t16000\tSpeech\n", r"^.*bad\.tsv, line 3: .*\(3 tab-separated fields, not 2\)$"),
    "no root folder": ("{root}/gone\na.wav\t16000\n", r"^.*bad\.tsv, line 1: the root folder .*gone does not exist$"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_or_empty_manifest_is_one_line_naming_the_file_and_line(tmp_path, case):
    text, message = BAD[case]
    bad = tmp_path / "bad.tsv"
    bad.write_text(text.format(root=tmp_path))
    with pytest.raises(UsageError) as error:
        read_fairseq_manifest(bad)
    assert "\n" not in str(error.value)
    assert re.search(message, str(error.value)), str(error.value)


def test_the_script_says_what_is_wrong_with_the_manifest_in_one_line(tmp_path, capsys):
    bad = tmp_path / "train.tsv"
    bad.write_text(f"{tmp_path}\nclip.wav\tten\n")
    with pytest.raises(SystemExit) as exit_code:
        run_script(lambda: pretrain.main(argv(tmp_path / "run", bad)), "pretrain.py")
    assert exit_code.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pretrain.py: error: {bad}, line 2: 'clip.wav\\tten' is not `relative/path<TAB>num_samples` (num_samples "
        "'ten' is not a whole number)"
    ]
    with pytest.raises(SystemExit):
        run_script(lambda: pretrain.main(argv(tmp_path / "run2", tmp_path / "absent.tsv")), "pretrain.py")
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pretrain.py: error: fairseq manifest {tmp_path / 'absent.tsv'} does not exist"
    ]
    with pytest.raises(UsageError, match="give one data source, got --train_dir, --train_manifest"):
        pretrain.main(argv(tmp_path / "run3", bad, "--train_dir", str(tmp_path)))
