"""`python -m aasp_hf.data.check`: per-split counts beside the official ones, missing and unnamed files, the sample
rates / channels / formats of the file headers, labels, AudioSet's coverage, and one line per problem with exit 1.

Each layout is small and written by the test in the format the dataset publishes (header lines and column names as
released); the WAVs are tiny and written by soundfile at two sample rates."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from aasp_hf.data import check


def write_tone(path, seconds=0.1, sr=16000, channels=1):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    wave = (0.1 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * sr)) / sr)).astype(np.float32)
    sf.write(path, np.stack([wave] * channels, axis=1) if channels > 1 else wave, sr)


def run_main(argv, capsys):
    code = check.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def table_row(out, split):
    """The cells of the table row of `split`."""
    return next(
        line.split()[len(split.split()) :]
        for line in out.splitlines()
        if line.startswith(f"  {split} ") and line.split()[: len(split.split())] == split.split()
    )


@pytest.fixture
def esc50_root(tmp_path):
    """ESC-50's layout (meta/esc50.csv with its published header; audio/*.wav): 5 folds of 3 clips, 2 at 44.1 kHz
    and 1 at 22.05 kHz per fold; then one listed file deleted and one unlisted file added."""
    root = tmp_path / "ESC-50-master"
    lines = ["filename,fold,target,category,esc10,src_file,take"]
    for fold in range(1, 6):
        for target, category in enumerate(["dog", "rooster", "pig"]):
            name = f"{fold}-{100 + target}-A-{target}.wav"
            lines.append(f"{name},{fold},{target},{category},{target == 0},{100 + target},A")
            write_tone(str(root / "audio" / name), sr=22050 if target == 2 else 44100)
    (root / "meta").mkdir()
    (root / "meta" / "esc50.csv").write_text("\n".join(lines) + "\n")
    os.remove(root / "audio" / "3-101-A-1.wav")
    write_tone(str(root / "audio" / "stray-copy.wav"), sr=44100)
    return root


def test_check_esc50_as_a_subprocess(esc50_root, tmp_path):
    report_file = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "aasp_hf.data.check", "esc50", "--root", str(esc50_root), "--json", str(report_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    # the loader's own message, one line: the copy lacks a file its metadata names
    assert result.stderr.splitlines() == [
        f"error: 1 of 15 audio files listed in {esc50_root / 'meta' / 'esc50.csv'} are missing under "
        f"{esc50_root / 'audio'}, e.g. ['{esc50_root / 'audio' / '3-101-A-1.wav'}']. Check that `root` points at "
        f"the dataset's top folder in its official layout."
    ]
    out = result.stdout
    assert table_row(out, "fold 1") == ["3", "400", "*", "0"]
    assert table_row(out, "fold 3") == ["3", "400", "*", "1"]
    assert table_row(out, "all") == ["15", "2,000", "*", "1"]
    assert "labels: 3 classes, 3 of them in the splits" in out
    assert "missing: 1 file named by the metadata, e.g. audio/3-101-A-1.wav" in out
    assert f"in no split: 1 file under {esc50_root / 'audio'}, e.g. audio/stray-copy.wav" in out
    assert "audio, headers of all 14 files:" in out  # 14 of 15 listed files exist; the stray one is not read
    assert "sample rates: 22050 Hz (5), 44100 Hz (9)" in out
    assert "channels: 1 (14)" in out and "formats: WAV/PCM_16 (14)" in out

    report = json.loads(report_file.read_text())
    assert [(r["split"], r["clips"], r["official"], r["missing"]) for r in report["splits"]] == [
        (f"fold {k}", 3, 400, int(k == 3)) for k in range(1, 6)
    ] + [("all", 15, 2000, 1)]
    assert report["audio"]["sample_rates"] == {"22050": 5, "44100": 9}
    assert report["unnamed_files"]["count"] == 1 and report["missing_files"]["count"] == 1


def test_check_missing_metadata_is_one_line(esc50_root, capsys):
    os.remove(esc50_root / "meta" / "esc50.csv")
    code, out, err = run_main(["esc50", "--root", esc50_root], capsys)
    assert code == 1 and out == ""
    assert len(err) == 1 and "meta/esc50.csv not found" in err[0] and "github.com/karolpiczak/ESC-50" in err[0]
    code, out, err = run_main(["esc50", "--root", esc50_root, "--split_file", "x.txt"], capsys)
    assert code == 1 and err == [
        "error: esc50 does not take --split_file; its options are in the esc50 section of docs/datasets.md."
    ]
    code, out, err = run_main(["gtzan", "--root", esc50_root], capsys)  # EVAR tasks need their CSV
    assert code == 2 and err == ["error: gtzan needs --metadata_csv, EVAR's metadata CSV for it (docs/datasets.md)."]


def write_evar_csv(path, rows):
    """EVAR's metadata CSV as its make_metadata.py writes it: file_name,label,split (+ extra columns)."""
    path.write_text("file_name,label,split\n" + "".join(f"{f},{label},{split}\n" for f, label, split in rows))


def test_check_evar_task_with_an_empty_split(tmp_path, capsys):
    genres = tmp_path / "genres"
    rows = [
        ("blues/blues.00000.wav", "blues", "train"),
        ("rock/rock.00001.wav", "rock", "train"),
        ("jazz/jazz.00002.wav", "jazz", "test"),
    ]
    for file_name, _, _ in rows:
        write_tone(str(genres / file_name), sr=22050)
    write_evar_csv(tmp_path / "gtzan.csv", rows)
    code, out, err = run_main(["gtzan", "--root", genres, "--metadata_csv", tmp_path / "gtzan.csv"], capsys)
    assert code == 1
    assert len(err) == 1 and "'validation'" in err[0]  # no row of the CSV is in EVAR's "valid" split
    assert table_row(out, "train") == ["2", "443", "*", "0"]
    assert table_row(out, "validation") == ["0", "197", "*", "0"]
    assert table_row(out, "test") == ["1", "290", "*", "0"]
    assert "labels: 10 classes, 3 of them in the splits" in out and "sample rates: 22050 Hz (3)" in out

    rows.append(("pop/pop.00003.wav", "pop", "valid"))
    write_tone(str(genres / "pop" / "pop.00003.wav"), sr=22050)
    write_evar_csv(tmp_path / "gtzan.csv", rows)
    code, out, err = run_main(["gtzan", "--root", genres, "--metadata_csv", tmp_path / "gtzan.csv"], capsys)
    assert code == 0 and err == [] and table_row(out, "validation") == ["1", "197", "*", "0"]


CLASS_LABELS = 'index,mid,display_name\n0,/m/09x0r,"Speech"\n1,/m/04rlf,"Music"\n2,/m/0jbk,"Animal"\n'


def write_segments(path, rows):
    """An AudioSet segment CSV as released: 3 '#' header lines, then YTID, start, end, "mid,mid" with spaces."""
    path.write_text(
        "# Segments csv created Sun Mar  5 10:54:31 2017\n"
        f"# num_ytids={len(rows)}, num_segs={len(rows)}, num_unique_labels=3, num_positive_labels=4\n"
        "# YTID, start_seconds, end_seconds, positive_labels\n"
        + "".join(f'{y}, {s:.3f}, {s + 10:.3f}, "{",".join(m)}"\n' for y, s, m in rows)
    )


@pytest.fixture
def audioset_root(tmp_path):
    """balanced_train: 4 segments, 3 with a file (three namings); eval: 3 segments, 2 with a file; one unbalanced
    segment with a file (named by as2m only). Two sample rates and a stereo clip."""
    root = tmp_path / "audioset"
    root.mkdir()
    (root / "class_labels_indices.csv").write_text(CLASS_LABELS)
    write_segments(
        root / "balanced_train_segments.csv",
        [
            ("--PJHxphWEs", 30.0, ["/m/09x0r", "/m/04rlf"]),
            ("-0RWZT-miFs", 420.0, ["/m/04rlf"]),
            ("xAbCdEfGhIj", 0.0, ["/m/04rlf"]),
            ("gone1234567", 0.0, ["/m/09x0r"]),
        ],
    )
    write_segments(root / "unbalanced_train_segments.csv", [("-0SdAVK79lg", 30.0, ["/m/09x0r"])])
    write_segments(
        root / "eval_segments.csv",
        [
            ("--4gqARaEJE", 0.0, ["/m/0jbk", "/m/04rlf"]),
            ("-1nilez17Dg", 30.0, ["/m/04rlf"]),
            ("gone7654321", 5.0, ["/m/04rlf"]),
        ],
    )
    audio = root / "audio"
    write_tone(str(audio / "balanced" / "--PJHxphWEs_30.000_40.000.wav"), sr=32000)
    write_tone(str(audio / "balanced" / "Y-0RWZT-miFs.wav"), sr=32000, channels=2)
    write_tone(str(audio / "balanced" / "xAbCdEfGhIj.wav"))
    write_tone(str(audio / "unbalanced" / "-0SdAVK79lg_30.000_40.000.wav"))
    write_tone(str(audio / "eval" / "--4gqARaEJE_0.000_10.000.wav"))
    write_tone(str(audio / "eval" / "-1nilez17Dg_30.000_40.000.wav"))
    return root


def test_check_audioset_coverage(audioset_root, capsys, tmp_path):
    code, out, err = run_main(["as20k", "--root", audioset_root, "--json", tmp_path / "as20k.json"], capsys)
    assert code == 0 and err == []
    assert table_row(out, "train") == ["3", "22,160", "*", "4", "75.0", "%"]
    assert table_row(out, "test") == ["2", "20,371", "*", "3", "66.7", "%"]
    assert "segments without a file (left out by the loader), e.g. gone1234567, gone7654321" in out
    assert "labels: 3 classes, 3 of them in the splits" in out
    assert f"in no split: 1 file under {audioset_root / 'audio'}, e.g. audio/unbalanced/-0SdAVK79lg" in out
    assert "sample rates: 16000 Hz (3), 32000 Hz (2)" in out and "channels: 1 (4), 2 (1)" in out
    report = json.loads((tmp_path / "as20k.json").read_text())
    assert [(r["split"], r["clips"], r["segments"], r["coverage"]) for r in report["splits"]] == [
        ("train", 3, 4, 0.75),
        ("test", 2, 3, 0.6667),
    ]

    code, out, err = run_main(["as2m", "--root", audioset_root], capsys)
    assert code == 0 and table_row(out, "train") == ["4", "2,063,949", "*", "5", "80.0", "%"]  # balanced + unbalanced
    assert f"in no split: 0 files under {audioset_root / 'audio'}" in out


def test_check_us8k_scv2_nsynth_voxceleb1(tmp_path, capsys):
    """The other official layouts: counts per fold / split and the label count each loader gives."""
    us8k = tmp_path / "UrbanSound8K"
    lines = ["slice_file_name,fsID,start,end,salience,fold,classID,class"]
    for fold in range(1, 11):
        class_id, name = fold % 2, f"{100 + fold}-{fold % 2}-0-0.wav"
        lines.append(f"{name},{100 + fold},0,0.1,1,{fold},{class_id},{['air_conditioner', 'car_horn'][class_id]}")
        write_tone(str(us8k / "audio" / f"fold{fold}" / name), sr=48000 if fold % 2 else 8000)
    (us8k / "metadata").mkdir()
    (us8k / "metadata" / "UrbanSound8K.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode())  # CRLF copy
    code, out, err = run_main(["us8k", "--root", us8k], capsys)
    assert code == 0, err
    assert table_row(out, "fold 4") == ["1", "990", "*", "0"] and table_row(out, "all") == ["10", "8,732", "*", "0"]
    assert "sample rates: 8000 Hz (5), 48000 Hz (5)" in out and "labels: 2 classes, 2 of them" in out

    scv2 = tmp_path / "speech_commands_v0.02"
    for word in ("yes", "no"):
        for speaker in ("aaaa1111", "bbbb2222", "cccc3333"):
            write_tone(str(scv2 / word / f"{speaker}_nohash_0.wav"))
    write_tone(str(scv2 / "_background_noise_" / "white_noise.wav"))  # read by no split, and not "in no split"
    (scv2 / "validation_list.txt").write_text("yes/bbbb2222_nohash_0.wav\nno/bbbb2222_nohash_0.wav\n")
    (scv2 / "testing_list.txt").write_text("yes/cccc3333_nohash_0.wav\nno/dddd4444_nohash_0.wav\n")
    code, out, err = run_main(["scv2", "--root", scv2], capsys)
    assert code == 1 and len(err) == 1 and "1 of 2 audio files listed in test list" in err[0]
    assert table_row(out, "train") == ["3", "84,843", "*", "0"]  # the 6 files less the 3 of the lists that exist
    assert table_row(out, "test") == ["2", "11,005", "*", "1"]
    assert "labels: 35 classes, 2 of them in the splits" in out and "in no split: 0 files" in out

    nsynth = tmp_path / "nsynth"
    for folder, count in (("nsynth-train", 3), ("nsynth-valid", 1), ("nsynth-test", 2)):
        notes = {
            f"bass_synthetic_00{i}-0{60 + i}-100": {
                "note_str": f"bass_synthetic_00{i}-0{60 + i}-100",
                "instrument_family_str": "bass",
                "pitch": 60 + i,
                "velocity": 100,
                "instrument_source_str": "synthetic",
            }
            for i in range(count)
        }
        for note in notes:
            write_tone(str(nsynth / folder / "audio" / f"{note}.wav"))
        (nsynth / folder / "examples.json").write_text(json.dumps(notes))
    code, out, err = run_main(["nsynth", "--root", nsynth], capsys)
    assert code == 0 and table_row(out, "validation") == ["1", "12,678", "*", "0"]
    assert "labels: 11 classes, 1 of them in the splits" in out

    vox = tmp_path / "vox1"
    split_lines = []
    for code_, speaker in ((1, "id10001"), (1, "id10002"), (2, "id10001"), (3, "id10002")):
        rel = f"{speaker}/1zcIwhmdeo4/0000{code_}.wav"
        write_tone(str(vox / "wav" / rel))
        split_lines.append(f"{code_} {rel}")
    (vox / "iden_split.txt").write_text("\n".join(split_lines) + "\n")
    code, out, err = run_main(["voxceleb1", "--root", vox], capsys)
    assert code == 0 and table_row(out, "train") == ["2", "138,361", "*", "0"]
    assert "labels: 2 classes, 2 of them in the splits" in out


def test_check_audiofolder_sampled_headers_and_mp3(tmp_path, capsys):
    """An audiofolder has no official counts or metadata; headers of a seeded sample; an mp3 read by torchcodec."""
    folder = tmp_path / "clips"
    for label in ("cat", "dog"):
        for i in range(3):
            write_tone(str(folder / label / f"{i}.wav"), sr=8000 if label == "cat" else 16000)
    sf.write(str(folder / "dog" / "3.mp3"), np.zeros(16000, np.float32), 16000)
    code, out, err = run_main(["audiofolder", "--root", folder, "--sample_files", "7"], capsys)
    assert code == 0 and table_row(out, "train") == ["7", "—", "0"]
    assert "formats: MP3/mp3 (1), WAV/PCM_16 (6)" in out and "sample rates: 8000 Hz (3), 16000 Hz (4)" in out
    assert "in no split" not in out
    sampled = check.check_dataset("audiofolder", folder, sample_files=3, seed=5)["audio"]
    assert sampled["files_read"] == 3 and sampled["files_present"] == 7 and sampled["sampled"]
    assert sum(sampled["sample_rates"].values()) == 3
    assert check.check_dataset("audiofolder", folder, sample_files=3, seed=5)["audio"] == sampled  # seeded
    code, out, _ = run_main(["audiofolder", "--root", folder, "--sample_files", "3"], capsys)
    assert "headers of a seeded sample of 3 of 7 files (seed 0)" in out
