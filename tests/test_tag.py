"""`python -m aasp_hf.tag`, run as a user runs it (a real process) on tiny classifiers and audio written here: rows
equal to the pipeline's, windows of several files in one batch, failures, reruns that skip what is done, events,
and a SIGTERM that leaves OUT complete up to the last file."""

import csv
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from transformers import pipeline

from aasp_hf import AaspAudioClassificationPipeline
from aasp_hf.cli.tag import events_of
from test_long_audio import LABELS, RATE, noisy_tones, save_classifier

ROOT = Path(__file__).resolve().parents[1]


def run_tag(*arguments, check=True):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.run(
        [sys.executable, "-m", "aasp_hf.tag", *map(str, arguments)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if check:
        assert process.returncode == 0, process.stderr[-3000:]
    return process


def read_rows(path):
    if Path(path).suffix == ".jsonl":
        return [json.loads(line) for line in Path(path).read_text().splitlines()]
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A single-label and a multi-label tiny classifier, and a folder of three clips (one in a sub-folder, one FLAC)
    and a file that is not audio."""
    root = tmp_path_factory.mktemp("tag")
    single = save_classifier(root / "single")
    multi = save_classifier(root / "multi", problem_type="multi_label_classification", patch_embedding="spe")
    audio = root / "audio"
    (audio / "sub").mkdir(parents=True)
    sf.write(audio / "a.wav", noisy_tones(2.5), RATE, subtype="FLOAT")
    sf.write(audio / "sub" / "b.flac", noisy_tones(1.1, seed=1), RATE)
    sf.write(audio / "c.wav", noisy_tones(0.4, seed=2), RATE, subtype="FLOAT")
    (audio / "sub" / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEnot audio at all")
    return {"single": single, "multi": multi, "audio": audio}


def pipeline_results(model, files, **options):
    classifier = pipeline("audio-classification", model=str(model), pipeline_class=AaspAudioClassificationPipeline)
    return {str(f): classifier(str(f), top_k=None, **options) for f in files}


def test_a_folder_with_a_broken_file_is_tagged_as_the_pipeline_tags_each_file(folders, tmp_path):
    """Rows `file,label,score`: each file's top label and score as the pipeline gives them (mean over windows); the
    broken file is one line of the failures file; windows of several files share batches of 8."""
    out = tmp_path / "tags.csv"
    process = run_tag("--model", folders["single"], "--output", out, "--batch_size", 8, folders["audio"], check=False)
    assert process.returncode == 3, process.stderr[-3000:]  # FILES_FAILED_EXIT_CODE: some files failed
    good = sorted(
        str(p) for p in folders["audio"].rglob("*") if p.suffix in (".wav", ".flac") and "broken" not in p.name
    )
    rows = read_rows(out)
    assert [row["file"] for row in rows] == sorted(row["file"] for row in rows) == good  # one row each, in order
    for row, (file, expected) in zip(rows, pipeline_results(folders["single"], good).items()):
        assert row["label"] == expected[0]["label"]
        assert float(row["score"]) == pytest.approx(expected[0]["score"], abs=1e-5)
    failures = (tmp_path / "tags.csv.failures.tsv").read_text().splitlines()
    assert len(failures) == 1 and failures[0].startswith(str(folders["audio"] / "sub" / "broken.wav") + "\t")
    assert "Could not decode" in failures[0]
    last = process.stderr.strip().splitlines()[-1]
    assert last.startswith(f"1 file(s) could not be tagged: listed in {out}.failures"), last


def test_timestamps_and_threshold_of_a_multi_label_classifier_in_jsonl(folders, tmp_path):
    """--timestamps: one row per window and label at or above the threshold, with the pipeline's window start, end
    and score; overlapping windows with --chunk_hop_s; batch 1 and batch 8 give the same rows."""
    good = [folders["audio"] / "a.wav", folders["audio"] / "sub" / "b.flac"]
    expected = pipeline_results(folders["multi"], good, chunk_hop_s=0.3, return_timestamps=True)
    threshold = float(np.median([s["score"] for r in expected.values() for w in r["windows"] for s in w["scores"]]))
    outputs = {}
    for batch_size in (1, 8):
        out = tmp_path / f"windows{batch_size}.jsonl"
        run_tag(
            "--model",
            folders["multi"],
            "--output",
            out,
            "--timestamps",
            "--chunk_hop_s",
            0.3,
            "--threshold",
            threshold,
            "--batch_size",
            batch_size,
            "--num_workers",
            0,
            *good,
        )
        outputs[batch_size] = read_rows(out)
    assert list(outputs[1][0]) == ["file", "start", "end", "label", "score"]
    wanted = []  # a window with no label at or above the threshold: one row with an empty label and score
    for file, result in expected.items():
        for w in result["windows"]:
            chosen = [(s["label"], s["score"]) for s in w["scores"] if s["score"] >= threshold] or [("", "")]
            wanted += [(file, w["start"], w["end"], label, score) for label, score in chosen]
    assert 0 < sum(w[3] != "" for w in wanted) < sum(len(r["windows"]) * len(LABELS) for r in expected.values())
    for rows in outputs.values():
        got = [(r["file"], r["start"], r["end"], r["label"], r["score"]) for r in rows]
        assert [g[:4] for g in got] == [(f, pytest.approx(s), pytest.approx(e), lab) for f, s, e, lab, _ in wanted]
        assert [g[4] or 0.0 for g in got] == pytest.approx([w[4] or 0.0 for w in wanted], abs=1e-5)


def test_events_are_runs_of_windows_in_dcase_tsv_named_as_dcase_names_files(folders, tmp_path):
    """--events: every run of consecutive windows where a label is chosen is one `filename onset offset
    event_label` line, onset the run's first start and offset its last end (recomputed here from the --timestamps
    rows of the same run). A file is named by its path under the folder given, or by its file name when given itself,
    as DCASE's reference annotations name them; OUT's `file` column keeps the path as found."""
    single = tmp_path / "elsewhere" / "long.wav"
    single.parent.mkdir()
    sf.write(single, noisy_tones(1.7, seed=5), RATE, subtype="FLOAT")
    out, events = tmp_path / "windows.csv", tmp_path / "events.tsv"
    process = run_tag(
        "--model", folders["multi"], "--output", out, "--timestamps", "--events", events, "--threshold", 0.5,
        folders["audio"], single, check=False,
    )  # fmt: skip
    assert process.returncode == 3, process.stderr[-3000:]  # the broken file failed
    assert "is a clip classifier: an event is a run of consecutive windows" in process.stderr
    names = {str(folders["audio"] / name): name for name in ("a.wav", "sub/b.flac", "c.wav")}
    names[str(single)] = "long.wav"
    with open(events, newline="") as file:
        reader = csv.DictReader(file, delimiter="\t")  # as sed_eval / dcase_util read a DCASE event list
        got = [(row["filename"], float(row["onset"]), float(row["offset"]), row["event_label"]) for row in reader]
    assert reader.fieldnames == ["filename", "onset", "offset", "event_label"]
    rows = read_rows(out)
    assert set(row["file"] for row in rows) == set(names)
    expected = []
    for file in dict.fromkeys(row["file"] for row in rows):
        windows = sorted({(float(r["start"]), float(r["end"])) for r in rows if r["file"] == file})
        for label in LABELS:
            present = [
                any(r["file"] == file and float(r["start"]) == s and r["label"] == label for r in rows)
                for s, _ in windows
            ]
            for i, here in enumerate(present):
                if here and (i == 0 or not present[i - 1]):
                    j = i
                    while j + 1 < len(present) and present[j + 1]:
                        j += 1
                    expected.append((names[file], windows[i][0], windows[j][1], label))
    assert sorted(got) == sorted(expected) and {name for name, *_ in got} == set(names.values())


def test_events_refused_where_they_would_mislead(folders, tmp_path, capsys):
    """A single-label clip classifier gives every window a label: without --threshold its events would cover every
    file, so --events is refused; two files that the events file would name alike are refused, naming both."""
    from aasp_hf.cli.tag import main

    other = tmp_path / "other"
    other.mkdir()
    sf.write(other / "a.wav", noisy_tones(0.5), RATE, subtype="FLOAT")
    common = ["--output", str(tmp_path / "t.csv"), "--events", str(tmp_path / "e.tsv")]
    for model, paths, message in (
        (folders["single"], [folders["audio"] / "a.wav"], "a single-label clip classifier, needs --threshold"),
        (folders["multi"], [folders["audio"] / "a.wav", other / "a.wav"], "would both be named a.wav there"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["--model", str(model), *common, *map(str, paths)])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "t.csv").exists() and not (tmp_path / "e.tsv").exists()


def test_events_of_merges_consecutive_windows_only():
    starts, ends = [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]
    chosen = [[("dog", 0.9)], [("dog", 0.8), ("car", 0.6)], [("", "")], [("dog", 0.7)]]
    assert events_of("f.wav", starts, ends, chosen) == [
        ("f.wav", 0.0, 2.0, "dog"),
        ("f.wav", 1.0, 2.0, "car"),
        ("f.wav", 3.0, 4.0, "dog"),
    ]


@pytest.mark.slow  # the tag command as a process, twice
def test_a_rerun_skips_the_files_already_tagged(folders, tmp_path):
    out = tmp_path / "tags.jsonl"
    run_tag("--model", folders["single"], "--output", out, folders["audio"] / "a.wav")
    first = read_rows(out)
    process = run_tag("--model", folders["single"], "--output", out, folders["audio"], check=False)
    rows = read_rows(out)
    assert process.returncode == 3  # the broken file fails again, and is not in OUT
    assert "1 of 4 files are already in" in process.stderr
    assert rows[: len(first)] == first and len(rows) == 3
    assert len({row["file"] for row in rows}) == 3
    refused = run_tag("--model", folders["single"], "--output", out, "--timestamps", folders["audio"], check=False)
    assert refused.returncode == 2 and "has the columns file,label,score" in refused.stderr


@pytest.mark.slow  # the tag command as a process, stopped and run again
def test_sigterm_leaves_whole_files_and_the_same_command_finishes(folders, tmp_path):
    """SIGTERM while many files are being tagged (per window, batch 1): the run exits with 75 saying so; every file in
    OUT has all its windows; the same command then tags the rest, and no file appears twice."""
    many = tmp_path / "many"
    many.mkdir()
    for i in range(40):
        sf.write(many / f"{i:02d}.wav", noisy_tones(3.0, seed=i), RATE, subtype="FLOAT")
    out = tmp_path / "windows.csv"
    command = [
        sys.executable,
        "-m",
        "aasp_hf.tag",
        "--model",
        str(folders["single"]),
        "--output",
        str(out),
        "--timestamps",
        "--batch_size",
        "1",
        str(many),
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    deadline = time.time() + 120
    while time.time() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 6):
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 75, stderr[-2000:]
    assert "stopped by SIGTERM" in stderr
    rows = read_rows(out)
    windows_per_file = 1 + int(np.ceil((3.0 - 0.63) / 0.63))  # 0.63-s windows, the last one ending at 3.0 s
    per_file = {file: sum(row["file"] == file for row in rows) for file in {row["file"] for row in rows}}
    assert 0 < len(per_file) < 40 and set(per_file.values()) == {windows_per_file}
    run_tag(*command[3:])
    per_file = {}
    for row in read_rows(out):
        per_file[row["file"]] = per_file.get(row["file"], 0) + 1
    assert len(per_file) == 40 and set(per_file.values()) == {windows_per_file}


@pytest.mark.parametrize(
    "arguments,message",
    [
        (["--output", "tags.txt"], "suffix must be .csv or .jsonl"),
        (["--output", "tags.csv", "--batch_size", "0"], "--batch_size 0 must be at least 1"),
        (["--output", "tags.csv", "--chunk_length_s", "1", "--chunk_hop_s", "2"], "must be at most the window"),
        (["--output", "tags.csv", "--treshold", "0.3"], "'--treshold' (did you mean '--threshold'?)"),
    ],
)
def test_mistakes_are_one_line(folders, tmp_path, capsys, monkeypatch, arguments, message):
    """The command's own entry point, in this process (the arguments are read before any file is)."""
    from aasp_hf.cli.tag import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", str(folders["single"]), *arguments, str(folders["audio"])])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("python -m aasp_hf.tag: error:") and message in lines[-1]
    with pytest.raises(SystemExit):
        main(["--model", str(folders["single"]), "--output", "t.csv", str(tmp_path / "nowhere")])
    assert "nowhere: no such file or folder" in capsys.readouterr().err


def test_the_console_script_is_the_module_entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, function = scripts["aasp-tag"].split(":")
    assert (module, function) == ("aasp_hf.cli.tag", "main")
    import aasp_hf.cli.tag

    documented = importlib.import_module("aasp_hf" + ".tag")  # `python -m aasp_hf.tag`, the documented name
    assert getattr(aasp_hf.cli.tag, function) is documented.main
