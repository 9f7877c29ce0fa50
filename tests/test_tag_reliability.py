"""`python -m aasp_hf.tag` loses and doubles nothing: each test runs the command as a real process.

- a full disk (a 20-KB tmpfs mounted here) stops the run in one line and leaves only whole files in OUT and the events
  file; after space is freed (and a torn row and event line added, as a kill mid-write leaves them) the same command
  cuts the torn bytes off, tags the rest, and every file has all its rows and events once (CSV and JSON Lines);
- one tagger per OUT: a second one is refused in one line (exit 2) while the first holds OUT; the hold of a killed
  tagger is taken over with a line;
- a rerun knows files by their resolved path (relative, then absolute: nothing tagged twice), and a rerun that adds
  --events adds the events of the files already tagged; an OUT written before ledgers is read up to its torn row;
- a sub-folder that cannot be listed is a line of the failures file and a non-zero exit;
- file names with a tab or a line break are refused with --events (a DCASE TSV cannot hold them).
Mounting needs root (the full-disk tests skip with the reason otherwise)."""

import csv
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import soundfile as sf
from test_long_audio import LABELS, RATE, noisy_tones, save_classifier
from test_run_folder import error_lines, mount_tmpfs, wait_for

from aasp_hf.cli.tag import FILES_FAILED_EXIT_CODE, LEDGER_SUFFIX, RowWriter

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
NUM_FILES, SECONDS = 12, 3.0
# --threshold 0 chooses every label of every 0.63-s window: 5 windows x 3 labels per 3-s file, and each label one
# event from 0 to 3 s
COMMON = ["--timestamps", "--threshold", "0", "--num_workers", "0"]
ROWS_PER_FILE = 5 * len(LABELS)


def command(*arguments):
    return [sys.executable, "-m", "aasp_hf.tag", *map(str, arguments)]


def run_tag(*arguments, cwd=None, prefix=()):
    return subprocess.run(
        [*prefix, *command(*arguments)], capture_output=True, text=True, timeout=300, env=ENV, cwd=cwd, check=False
    )


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    """A tiny multi-label classifier and a folder of 12 three-second clips."""
    root = tmp_path_factory.mktemp("tag_reliability")
    model = save_classifier(root / "multi", problem_type="multi_label_classification")
    audio = root / "audio"
    audio.mkdir()
    for i in range(NUM_FILES):
        sf.write(audio / f"{i:02d}.wav", noisy_tones(SECONDS, seed=i), RATE, subtype="FLOAT")
    return {"root": root, "model": model, "audio": audio}


def read_rows(path) -> list[dict]:
    """OUT's rows; a torn JSON line would raise here and a torn CSV row miss fields."""
    if Path(path).suffix == ".jsonl":
        return [json.loads(line) for line in Path(path).read_text().splitlines()]
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    assert all(None not in row.values() and None not in row for row in rows), rows
    return rows


def read_events(path) -> list[tuple]:
    with open(path, newline="") as file:
        reader = csv.DictReader(file, delimiter="\t")
        events = [(row["filename"], float(row["onset"]), float(row["offset"]), row["event_label"]) for row in reader]
    assert reader.fieldnames == ["filename", "onset", "offset", "event_label"]
    return sorted(events)


def whole_events(names) -> list[tuple]:
    return sorted((name, 0.0, SECONDS, label) for name in names for label in LABELS)


def rows_per_file(out) -> Counter:
    return Counter(row["file"] for row in read_rows(out))


def ledger_files(out) -> set:
    lines = Path(f"{out}{LEDGER_SUFFIX}").read_text().splitlines()
    return {entry["file"] for entry in map(json.loads, lines) if "file" in entry}


# ------------------------------------------------------------------------------------------------------- full disk
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.slow  # the tag command as a process on a full tmpfs, then again
def test_a_full_disk_leaves_whole_files_and_the_rerun_cuts_torn_rows_and_completes_the_output(tagger, tmp_path, suffix):
    """A file counts as done only when all its rows and events are written: the run that meets the full disk exits
    2 in one line and OUT ends with its last whole file; a torn row and a torn event line (a kill mid-write) are cut
    off by the rerun, which tags that file again: every file then has all its rows and events, once."""
    disk = mount_tmpfs(tmp_path / "disk", "size=20k")
    try:
        out, events = disk / f"tags{suffix}", disk / "events.tsv"
        arguments = ["--model", tagger["model"], "--output", out, "--events", events, *COMMON, tagger["audio"]]
        full = run_tag(*arguments)
        assert full.returncode == 2, full.stderr[-3000:]
        [line] = error_lines(full.stderr)
        assert "No space left on device" in line and "run the same command again" in line
        counts = rows_per_file(out)
        assert 0 < len(counts) < NUM_FILES and set(counts.values()) == {ROWS_PER_FILE}, counts
        assert out.read_bytes().endswith(b"\n")
        assert ledger_files(out) == {str(Path(file).resolve()) for file in counts}
        assert read_events(events) == whole_events(Path(file).name for file in counts)

        subprocess.run(["mount", "-o", "remount,size=1m", str(disk)], check=True)
        torn_file = str(tagger["audio"] / f"{len(counts):02d}.wav")
        torn_row = f'{{"file": "{torn_file}", "start": 0.6' if suffix == ".jsonl" else f"{torn_file},0.63,1.2"
        with open(out, "a") as file:
            file.write(torn_row)
        with open(events, "a") as file:
            file.write(f"{Path(torn_file).name}\t0.0\t1.")
        again = run_tag(*arguments)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"{out}: cut {len(torn_row)} bytes written after its last whole file" in again.stderr
        assert f"{len(counts)} of {NUM_FILES} files are already in" in again.stderr
        counts = rows_per_file(out)
        assert len(counts) == NUM_FILES and set(counts.values()) == {ROWS_PER_FILE}, counts
        assert read_events(events) == whole_events(f"{i:02d}.wav" for i in range(NUM_FILES))
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# ------------------------------------------------------------------------------------------------ one tagger per OUT
@pytest.mark.slow  # three tag processes, one killed
def test_a_second_tagger_into_one_output_is_refused_and_a_killed_taggers_hold_is_taken_over(tagger, tmp_path):
    """The training scripts' hold (run_lock), of OUT: while a tagger holds it (frozen here, so that it surely
    does), a second one exits 2 in one line naming it; once the holder is killed, the next run takes the hold over
    in one line and tags every file once."""
    out = tmp_path / "tags.csv"
    arguments = ["--model", tagger["model"], "--output", out, *COMMON, tagger["audio"]]
    hold = tmp_path / "tags.csv.lock"
    first = subprocess.Popen(command(*arguments), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        assert wait_for(lambda: hold.is_file() or first.poll() is not None, poll=0.01), "no hold taken"
        first.send_signal(signal.SIGSTOP)
        assert first.poll() is None, first.communicate()[1][-3000:]
        second = run_tag(*arguments)
        assert second.returncode == 2, second.stderr[-3000:]
        [line] = error_lines(second.stderr)
        assert f"{out} is in use by another run: process {first.pid} on " in line and "choose another --output" in line
    finally:
        first.kill()
        first.communicate()
    assert hold.is_file()  # a killed tagger leaves its hold
    third = run_tag(*arguments)
    assert third.returncode == 0, third.stderr[-3000:]
    assert f"taking over {out} from process {first.pid} on" in third.stderr and "its process is gone" in third.stderr
    counts = rows_per_file(out)
    assert len(counts) == NUM_FILES and set(counts.values()) == {ROWS_PER_FILE}, counts
    assert not hold.exists()


# ---------------------------------------------------------------------------------------------------------- reruns
def test_a_rerun_knows_files_by_their_resolved_path_and_adds_the_events_they_lack(tagger, tmp_path):
    """Two files tagged by relative paths without --events; then the folder by its absolute path with --events: the
    two are not tagged again (their rows stay, once), but their events are added, so the events cover every file."""
    out, events = tmp_path / "tags.csv", tmp_path / "events.tsv"
    model = ["--model", tagger["model"], "--output", out, *COMMON]
    first = run_tag(*model, "audio/00.wav", "audio/../audio/01.wav", cwd=tagger["root"])
    assert first.returncode == 0, first.stderr[-3000:]
    before = out.read_bytes()
    second = run_tag(*model, "--events", events, tagger["audio"])
    assert second.returncode == 0, second.stderr[-3000:]
    assert "2 of the files already in" in second.stderr and "tagged again for their events only" in second.stderr
    assert out.read_bytes().startswith(before)
    counts = rows_per_file(out)
    assert counts["audio/00.wav"] == counts["audio/../audio/01.wav"] == ROWS_PER_FILE
    assert len(counts) == NUM_FILES and set(counts.values()) == {ROWS_PER_FILE}, counts  # 00 and 01 once each
    assert read_events(events) == whole_events(f"{i:02d}.wav" for i in range(NUM_FILES))


def test_an_output_without_a_ledger_reads_whole_rows_only(tmp_path, monkeypatch):
    """An OUT written before ledgers, its last JSON line torn (a full disk used to leave it, and the rerun was a
    JSONDecodeError): its whole rows are done, the torn line is cut off, and the ledger now lists them."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "old.jsonl"
    rows = [{"file": name, "label": "bird", "score": 0.5} for name in ("a.wav", "a.wav", "b.wav")]
    out.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"file": "c.wav", "lab')
    writer = RowWriter(out, ["file", "label", "score"])
    writer.close()
    assert writer.done == {str(tmp_path / "a.wav"), str(tmp_path / "b.wav")}
    assert read_rows(out) == rows
    assert ledger_files(out) == writer.done


def without_root_powers() -> list[str]:
    """A command prefix under which root obeys file permissions (no CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH)."""
    if os.geteuid() != 0:
        return []
    check = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--", "true"], check=False)
    if check.returncode != 0:
        pytest.skip("running as root without setpriv's capability dropping: every folder is readable")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--"]


@pytest.mark.slow  # tag processes
def test_an_unreadable_sub_folder_is_a_failure_line_and_names_with_tabs_are_refused_for_events(tagger, tmp_path):
    """A sub-folder that cannot be listed is one line of the failures file, the run's files are tagged and it ends
    with the failures' exit status; names with a tab or a line break are refused with --events before anything is
    written."""
    audio = tmp_path / "audio"
    (audio / "locked").mkdir(parents=True)
    sf.write(audio / "a.wav", noisy_tones(1.0), RATE, subtype="FLOAT")
    sf.write(audio / "locked" / "b.wav", noisy_tones(1.0, seed=1), RATE, subtype="FLOAT")
    (audio / "locked").chmod(0)
    out = tmp_path / "tags.csv"
    try:
        process = run_tag("--model", tagger["model"], "--output", out, audio, prefix=without_root_powers())
    finally:
        (audio / "locked").chmod(0o755)
    assert process.returncode == FILES_FAILED_EXIT_CODE, process.stderr[-3000:]
    assert set(rows_per_file(out)) == {str(audio / "a.wav")}
    [failure] = Path(f"{out}.failures.tsv").read_text().splitlines()
    assert failure.startswith(f"{audio / 'locked'}\tPermissionError: Permission denied")
    assert f"{audio / 'locked'} cannot be listed" in process.stderr

    named = tmp_path / "named"
    named.mkdir()
    for name in ("tab\there.wav", "line\nbreak.wav", "plain.wav"):
        sf.write(named / name, noisy_tones(0.5), RATE, subtype="FLOAT")
    out = tmp_path / "named.csv"
    refused = run_tag(
        "--model", tagger["model"], "--output", out, "--events", tmp_path / "e.tsv", "--threshold", 0.5, named
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    [line] = error_lines(refused.stderr)
    assert "2 file name(s) hold a tab or a line break" in line
    assert not out.exists() and not (tmp_path / "e.tsv").exists()
