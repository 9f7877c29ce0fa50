"""`python -m aasp_hf.tag --shard K/N`: N jobs tag a corpus together, each into outputs of its own.

- three jobs, run as SLURM runs them (`examples/slurm/tag_array.sh`, real processes, without SLURM), and one job
  over the whole corpus: the three outputs and events files concatenated as the docs say (the header once) hold the
  one-process run's lines, each once, a file's lines together and in the same order; the parts are disjoint and
  cover every file; each says in one line how many files it holds;
- a part stopped after its first file goes on when run again, doubling nothing;
- a bad K/N is one line and exit status 2, before any work (in this process: parsing is all that runs);
- the partition itself: a hash of the resolved path, the same in every process (fixed values), balanced, keeping the
  order of the files found."""

import csv
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import soundfile as sf
from test_long_audio import RATE, noisy_tones, save_classifier
from test_tag_reliability import ENV, ledger_files

from aasp_hf.cli.tag import main, one_shard, parse_shard, resolved, shard_of

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "slurm" / "tag_array.sh"
PARTS, NUM_FILES = 3, 8
# --batch_size 1: each window is scored alone, so a score does not depend on which windows share its batch (they
# differ between a part and the one-process run, and a batched score can differ in its 6th decimal): the lines can
# then be compared as strings. One thread per process: four run at once on this machine's cores.
OPTIONS = ["--timestamps", "--batch_size", "1", "--num_workers", "0"]
PROCESS_ENV = {**ENV, "OMP_NUM_THREADS": "1"}


def run_part(out_dir, model, audio, task_id, count=PARTS):
    """The SLURM script's task `task_id` of an array of `count` tasks, on the CPU, with events."""
    env = {
        **PROCESS_ENV,
        "SLURM_ARRAY_TASK_ID": str(task_id),
        "SLURM_ARRAY_TASK_COUNT": str(count),
        "PYTHON": sys.executable,
        "DEVICE": "cpu",
        "EVENTS": "1",
    }
    arguments = [str(out_dir), "--model", str(model), *OPTIONS, str(audio)]
    return subprocess.run(
        ["bash", str(SCRIPT), *arguments], check=False, capture_output=True, text=True, timeout=300, env=env
    )


def run_whole(out, events, model, audio):
    command = [sys.executable, "-m", "aasp_hf.tag", "--model", str(model), "--output", str(out), "--events"]
    command += [str(events), *OPTIONS, str(audio)]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, env=PROCESS_ENV)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny multi-label classifier (0.63-s windows) and eight clips of 1 to 1.7 s, three in a sub-folder; the three
    parts and the whole corpus tagged at once, each output's bytes kept as they ended."""
    root = tmp_path_factory.mktemp("tag_shards")
    model = save_classifier(root / "multi", problem_type="multi_label_classification")
    audio = root / "audio"
    (audio / "sub").mkdir(parents=True)
    for i in range(NUM_FILES):
        folder = audio / "sub" if i % 3 == 0 else audio
        sf.write(folder / f"{i:02d}.wav", noisy_tones(1.0 + 0.1 * i, seed=i), RATE, subtype="FLOAT")
    parts, whole = root / "parts", root / "whole"
    whole.mkdir()
    with ThreadPoolExecutor(PARTS + 1) as pool:
        started = {k: pool.submit(run_part, parts, model, audio, k) for k in range(1, PARTS + 1)}
        started["whole"] = pool.submit(run_whole, whole / "tags.csv", whole / "events.tsv", model, audio)
        processes = {name: run.result() for name, run in started.items()}
    for name, process in processes.items():
        assert process.returncode == 0, (name, process.stderr[-3000:])
    files = [
        *(Path(parts, f"tags.{k}.csv") for k in range(1, PARTS + 1)),
        *(Path(parts, f"events.{k}.tsv") for k in range(1, PARTS + 1)),
        whole / "tags.csv",
        whole / "events.tsv",
    ]
    return {
        "root": root,
        "model": model,
        "audio": audio,
        "parts": parts,
        "whole": whole,
        "processes": processes,
        "bytes": {file: file.read_bytes() for file in files},
        "found": sorted(resolved(file) for file in audio.rglob("*.wav")),
    }


def concatenated(paths) -> str:
    """The files one after the other, each one's header dropped but the first's: the docs' awk line, run as written."""
    command = ["awk", "FNR > 1 || NR == 1", *map(str, paths)]
    return subprocess.run(command, capture_output=True, check=True).stdout.decode()


def blocks(text: str, delimiter: str) -> list[tuple[str, list[str]]]:
    """A table's lines after its header -> [(file, its lines)], one block per run of lines of one file, in order."""
    found = []
    for line in text.splitlines()[1:]:
        file = next(csv.reader([line], delimiter=delimiter))[0]
        if found and found[-1][0] == file:
            found[-1][1].append(line)
        else:
            found.append((file, [line]))
    return found


@pytest.mark.parametrize("kind, pattern, delimiter", [("rows", "tags.{}.csv", ","), ("events", "events.{}.tsv", "\t")])
def test_the_parts_concatenated_hold_the_one_process_runs_lines_each_once(runs, kind, pattern, delimiter):
    """The header once; the same lines, each once (sorted: equal); each file's lines one block, in the one-process
    run's order; the files of a part in the one-process run's order."""
    whole = (runs["whole"] / ("tags.csv" if kind == "rows" else "events.tsv")).read_text()
    parts = [runs["parts"] / pattern.format(k) for k in range(1, PARTS + 1)]
    joined = concatenated(parts)
    assert joined.splitlines()[0] == whole.splitlines()[0]
    assert sorted(joined.splitlines()) == sorted(whole.splitlines())
    together, alone = blocks(joined, delimiter), blocks(whole, delimiter)
    assert len({file for file, _ in together}) == len(together), "a file's lines are split"
    assert dict(together) == dict(alone)
    order = [file for file, _ in alone]
    for part in parts:
        mine = [file for file, _ in blocks(part.read_text(), delimiter)]
        assert mine == [file for file in order if file in mine], part


def test_the_parts_are_disjoint_cover_every_file_and_say_how_many_they_hold(runs):
    held = {k: ledger_files(runs["parts"] / f"tags.{k}.csv") for k in range(1, PARTS + 1)}
    assert sum(len(files) for files in held.values()) == len(set().union(*held.values())), "a file in two parts"
    assert sorted(set().union(*held.values())) == runs["found"]
    assert ledger_files(runs["whole"] / "tags.csv") == set(runs["found"])
    for k, files in held.items():
        assert f"shard {k}/{PARTS}: {len(files)} of {NUM_FILES} files" in runs["processes"][k].stderr
        rows = (runs["parts"] / f"tags.{k}.csv").read_text().splitlines()[1:]
        assert {resolved(row.split(",")[0]) for row in rows} == files  # its rows are those of the files it holds


def test_a_part_stopped_after_its_first_file_goes_on_without_doubling(runs):
    """The part with the most files, its ledger cut back to its first file as if it was killed then (the rows and
    events written after it are then bytes past the ledger's sizes): the same task run again cuts them, tags the
    rest, and its outputs are again what the uninterrupted run wrote, byte for byte."""
    held = {k: ledger_files(runs["parts"] / f"tags.{k}.csv") for k in range(1, PARTS + 1)}
    k = max(held, key=lambda part: len(held[part]))
    out, events = runs["parts"] / f"tags.{k}.csv", runs["parts"] / f"events.{k}.tsv"
    ledger = Path(f"{out}.done.jsonl")
    lines = ledger.read_text().splitlines(keepends=True)
    first_file = next(i for i, line in enumerate(lines) if '"file"' in line)
    ledger.write_text("".join(lines[: first_file + 1]))

    again = run_part(runs["parts"], runs["model"], runs["audio"], k)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"1 of {len(held[k])} files are already in {out}: skipped." in again.stderr
    assert f"{out}: cut " in again.stderr and f"{events}: cut " in again.stderr
    assert out.read_bytes() == runs["bytes"][out]
    assert events.read_bytes() == runs["bytes"][events]
    assert ledger_files(out) == held[k]


BAD_VALUES = ["0/3", "4/3", "1/0", "a/b", "3", "1/3/3", "-1/3", "2/3 "]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_a_bad_shard_is_one_line_and_exit_2_before_any_work(tmp_path, capsys, value):
    """`main`, what the command runs, called in this process: parsing is all that runs before the refusal (the model
    folder and the paths are not read), so a process of its own would add only the import of torch."""
    out = tmp_path / "tags.csv"
    with pytest.raises(SystemExit) as refused:
        main(["--model", str(tmp_path), "--output", str(out), f"--shard={value}", str(tmp_path)])
    assert refused.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"python -m aasp_hf.tag: error: --shard {value} must be K/N, whole numbers with 1 <= K <= N")
    assert not out.exists()


# ----------------------------------------------------------------------------------------------- the partition
def test_a_files_part_is_a_hash_of_its_resolved_path_the_same_in_every_process(tmp_path, monkeypatch):
    """Fixed values (SHA-1, not Python's hash(), which is salted anew in every process): a change here would move
    files between the parts of a corpus half tagged. A file is in one part however its path is written."""
    assert [shard_of(f"/corpus/clip_{i:03d}.wav", 3) for i in range(12)] == [1, 1, 1, 3, 3, 3, 1, 2, 2, 2, 3, 3]
    monkeypatch.chdir(tmp_path)
    for count in (2, 3, 7):
        assert shard_of("a.wav", count) == shard_of("./a.wav", count) == shard_of(tmp_path / "a.wav", count)
    assert parse_shard("2/3") == (2, 3) and parse_shard("1/1") == (1, 1) and parse_shard(None) is None


def test_the_parts_are_disjoint_cover_every_file_keep_its_order_and_are_balanced():
    files = {f"/corpus/{d}/clip_{i:03d}.wav": f"clip_{i:03d}.wav" for d in ("a", "b", "c") for i in range(100)}
    unreadable = [(f"/corpus/locked_{i}", "PermissionError: Permission denied") for i in range(10)]
    for count in (1, 2, 3, 8):
        parts = [one_shard(files, unreadable, (k, count)) for k in range(1, count + 1)]
        assert sum(len(part) for part, _ in parts) == len(files)
        assert {file for part, _ in parts for file in part} == set(files)
        assert sorted(entry for _, folders in parts for entry in folders) == unreadable  # each once
        for part, _ in parts:
            assert list(part) == [file for file in files if file in part]  # the order found
            assert all(part[file] == files[file] for file in part)  # with its name for the events file
            assert abs(len(part) - len(files) / count) <= 0.25 * len(files) / count, [len(p) for p, _ in parts]
