"""The sound-event loader (`data.load("sound_events")`) on tiny copies written in DCASE's and DESED's published
formats: the tab-separated tables with their real header line (`filename<TAB>onset<TAB>offset<TAB>event_label`),
DESED's folders (`audio/<split>/<set>/`, `metadata/<split>/<set>.tsv`) and file names
(`Y<YouTube id>_<start>_<end>.wav`, the synthetic soundscapes' `<n>.wav`), with short noise as placeholder audio.
Each case asserts the records read back, or the one line a bad table gives."""

import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from aasp_hf import data
from aasp_hf.data.check import check_dataset
from aasp_hf.data.loaders.sound_events import SoundEventTableError
from aasp_hf.utils.errors import UsageError


HEADER = "filename\tonset\toffset\tevent_label\n"


def noise(path, seconds=2.0, sr=16000):
    """`seconds` of quiet noise at `path` (parent folders made)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, 0.05 * np.random.default_rng(len(str(path))).standard_normal(int(sr * seconds)), sr)


def table(path, rows, header=HEADER):
    """A DCASE table: the header line, then each row's fields joined by tabs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + "".join("\t".join(map(str, row)) + "\n" for row in rows))


def write_ours(root, validation=True, test=True):
    """Our layout: train/, validation/, test/ beside train.tsv, validation.tsv, test.tsv. train holds a file in a
    sub-folder, one listed without events (DESED's empty row) and one no row names (background)."""
    for name in ("kitchen/0001.wav", "kitchen/0002.wav", "street_01.wav", "street_02.wav", "silence.wav", "bg.wav"):
        noise(root / "train" / name)
    table(
        root / "train.tsv",
        [
            ("kitchen/0001.wav", "0.000", "1.250", "Dishes"),
            ("kitchen/0001.wav", "0.500", "2.000", "Speech"),
            ("kitchen/0002.wav", "0.163", "0.665", "Dishes"),
            ("street_01.wav", "1.005", "1.997", "Speech"),
            ("street_02.wav", "0.000", "2.000", "Dog"),
            ("silence.wav", "", "", ""),
        ],
    )
    if validation:
        noise(root / "validation" / "v1.wav")
        noise(root / "validation" / "v2.wav")
        table(root / "validation.tsv", [("v1.wav", "0.250", "0.750", "Dog"), ("v2.wav", "0.1", "0.2", "Dishes")])
    if test:
        noise(root / "test" / "t1.wav")
        noise(root / "test" / "t2.wav", seconds=1.0)
        table(root / "test.tsv", [("t1.wav", "0.000", "2.000", "Speech")])


def events_of(record, names):
    return [(e["onset"], e["offset"], names[e["label"]]) for e in record["events"]]


def by_name(split):
    names = split.features["events"].feature["label"].names
    return {r["filename"]: (events_of(r, names), r["duration"]) for r in split.remove_columns("audio")}


# ------------------------------------------------------------------------------------------------ our layout
def test_our_layout_reads_every_file_with_its_events(tmp_path):
    write_ours(tmp_path)
    ds = data.load("sound_events", root=tmp_path)
    assert {split: len(rows) for split, rows in ds.items()} == {"train": 6, "validation": 2, "test": 2}
    assert list(ds["train"].features) == ["audio", "filename", "events", "duration"]
    names = ds["train"].features["events"].feature["label"].names
    assert names == ["Dishes", "Dog", "Speech"]  # sorted union of every table
    assert by_name(ds["train"]) == {
        "bg.wav": ([], 2.0),  # no row names it: a record without events
        "kitchen/0001.wav": ([(0.0, 1.25, "Dishes"), (0.5, 2.0, "Speech")], 2.0),  # table order, times exact
        "kitchen/0002.wav": ([(0.163, 0.665, "Dishes")], 2.0),
        "silence.wav": ([], 2.0),  # listed by an empty row
        "street_01.wav": ([(1.005, 1.997, "Speech")], 2.0),
        "street_02.wav": ([(0.0, 2.0, "Dog")], 2.0),
    }
    assert by_name(ds["test"]) == {"t1.wav": ([(0.0, 2.0, "Speech")], 2.0), "t2.wav": ([], 1.0)}
    record = data.for_safe_decoding(ds["train"])[1]
    assert record["audio"]["path"].endswith("train/kitchen/0001.wav")
    assert data.decode_audio(record["audio"]).shape == (32000,)  # 16 kHz, as the other loaders' audio column


def test_events_round_trip_through_save_and_select(tmp_path):
    write_ours(tmp_path / "copy")
    train = data.load("sound_events", root=tmp_path / "copy")["train"]
    train.save_to_disk(tmp_path / "saved")
    from datasets import load_from_disk

    again = load_from_disk(tmp_path / "saved")
    assert again.features == train.features
    assert again.remove_columns("audio")[:] == train.remove_columns("audio")[:]
    assert train.select([1])[0]["events"] == [
        {"onset": 0.0, "offset": 1.25, "label": 0},
        {"onset": 0.5, "offset": 2.0, "label": 2},
    ]


def test_unreadable_file_is_left_out_and_counted(tmp_path, caplog):
    write_ours(tmp_path)
    (tmp_path / "train" / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVE")
    with caplog.at_level(logging.WARNING, logger="aasp_hf.data"):
        train = data.load("sound_events", root=tmp_path)["train"]
    assert "broken.wav" not in train["filename"] and len(train) == 6
    assert "left out 1 audio file(s)" in caplog.text and "broken.wav" in caplog.text


# ------------------------------------------------------------------------------------------------ DESED
REAL = ["Y-BJNMHMZDcU_50.000_60.000.wav", "Y00pK0GMmE9s_70.000_80.000.wav", "Y0cH_NlhhMAs_30.000_40.000.wav"]


def write_desed(root):
    """DESED after its archives are merged: the synthetic soundscapes (train and validation), the strongly
    labelled AudioSet clips, the real validation clips (one of them listed by an empty row, as files without events
    are), the weak and unlabelled sets (never read: not strong labels), and the public evaluation set."""
    synth = "train/synthetic21_train/soundscapes"
    for n in range(4):
        noise(root / "audio" / synth / f"{n}.wav")
        (root / "audio" / synth / f"{n}.jams").write_text("{}")  # Scaper's annotation beside each soundscape
    table(
        root / "metadata" / f"{synth}.tsv",
        [(f"{n}.wav", f"{0.1 * n:.3f}", f"{1.0 + 0.2 * n:.3f}", ("Cat", "Dog")[n % 2]) for n in range(4)],
    )
    noise(root / "audio/train/strong_label_real/Y7fmOlUlwoNg_6.000_16.000.wav")
    table(root / "metadata/train/audioset_strong.tsv", [("Y7fmOlUlwoNg_6.000_16.000.wav", 0.0, 1.5, "Speech")])
    synth_val = "validation/synthetic21_validation/soundscapes"
    noise(root / "audio" / synth_val / "0.wav")
    table(root / "metadata" / f"{synth_val}.tsv", [("0.wav", "0.500", "1.000", "Dog")])
    for name in REAL:
        noise(root / "audio/validation/validation" / name)
    table(
        root / "metadata/validation/validation.tsv",
        [(REAL[0], "0.467", "0.717", "Cat"), (REAL[0], "1.100", "2.000", "Speech"), (REAL[1], "", "", "")],
    )
    table(root / "metadata/validation/validation_durations.tsv", [(n, "2.000") for n in REAL], "filename\tduration\n")
    noise(root / "audio/train/weak/Y00pbt6aJV8Y_350.000_360.000.wav")
    table(
        root / "metadata/train/weak.tsv",
        [("Y00pbt6aJV8Y_350.000_360.000.wav", "Cat,Speech")],
        "filename\tevent_labels\n",
    )
    noise(root / "audio/train/unlabel_in_domain/Y0bjUq9XMMmQ_30.000_40.000.wav")
    table(root / "metadata/train/unlabel_in_domain.tsv", [("Y0bjUq9XMMmQ_30.000_40.000.wav",)], "filename\n")
    noise(root / "audio/eval/public/Y1-0EYLUEbRo_340.000_350.000.wav")
    table(root / "metadata/eval/public.tsv", [("Y1-0EYLUEbRo_340.000_350.000.wav", "0.000", "1.838", "Blender")])


def test_desed_layout_reads_the_default_sets(tmp_path):
    write_desed(tmp_path)
    ds = data.load("desed", root=tmp_path)
    assert {split: len(rows) for split, rows in ds.items()} == {"train": 5, "validation": 1, "test": 3}
    assert ds["train"].features["events"].feature["label"].names == ["Cat", "Dog", "Speech"]  # no weak/public labels
    train = by_name(ds["train"])
    assert train["Y7fmOlUlwoNg_6.000_16.000.wav"] == ([(0.0, 1.5, "Speech")], 2.0)  # metadata/train/audioset_strong.tsv
    assert train["3.wav"] == ([(0.3, 1.6, "Dog")], 2.0)
    assert by_name(ds["test"]) == {
        REAL[0]: ([(0.467, 0.717, "Cat"), (1.1, 2.0, "Speech")], 2.0),
        REAL[1]: ([], 2.0),  # its empty row: no events
        REAL[2]: ([], 2.0),  # in the folder, in no row
    }


def test_desed_sets_choose_the_splits_and_resampled_folders(tmp_path):
    write_desed(tmp_path)
    (tmp_path / "audio/validation/validation").rename(tmp_path / "audio/validation/validation_16k")
    sets = {"train": "train/synthetic21_train/soundscapes", "test": ["eval/public", "validation/validation_16k"]}
    ds = data.load("sound_events", root=tmp_path, sets=sets)
    assert {split: len(rows) for split, rows in ds.items()} == {"train": 4, "test": 4}
    assert ds["test"].features["events"].feature["label"].names == ["Blender", "Cat", "Dog", "Speech"]
    assert by_name(ds["test"])["Y1-0EYLUEbRo_340.000_350.000.wav"] == ([(0.0, 1.838, "Blender")], 2.0)
    # the default sets find the resampled copy of the real validation folder too
    assert len(data.load("sound_events", root=tmp_path)["test"]) == 3


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        ("train/weak", "metadata/train/weak.tsv line 1: columns ['filename', 'event_labels'] are weak labels"),
        ("train/unlabel_in_domain", "metadata/train/unlabel_in_domain.tsv line 1: it lists files without labels"),
        ("train/synthetic21", "DESED set 'train/synthetic21' (train):"),
    ],
)
def test_desed_sets_that_are_not_strong_labels_are_refused(tmp_path, chosen, expected):
    write_desed(tmp_path)
    with pytest.raises(SoundEventTableError) as error:
        data.load("sound_events", root=tmp_path, sets={"train": [chosen]})
    assert len(error.value.problems) == 1 and error.value.problems[0].startswith(expected)


def test_two_sets_of_a_split_holding_one_name_are_refused(tmp_path):
    write_desed(tmp_path)
    sets = {"train": ["train/synthetic21_train/soundscapes", "validation/synthetic21_validation/soundscapes"]}
    with pytest.raises(SoundEventTableError) as error:
        data.load("desed", root=tmp_path, sets=sets)
    (problem,) = error.value.problems
    assert problem == (
        "train: two files named '0.wav', in train/synthetic21_train/soundscapes and "
        "validation/synthetic21_validation/soundscapes: a split's file names must be unique (its recordings are told "
        "apart by name)"
    )


def test_sets_keys_are_checked(tmp_path):
    write_desed(tmp_path)
    with pytest.raises(UsageError, match="'tset' \\(did you mean 'test'\\?\\)"):
        data.load("sound_events", root=tmp_path, sets={"train": ["train/weak"], "tset": ["eval/public"]})
    write_ours(tmp_path / "ours")
    with pytest.raises(UsageError, match="sets= chooses DESED's sets"):
        data.load("sound_events", root=tmp_path / "ours", sets={"train": ["train"]})


def test_skip_missing_leaves_out_rows_of_absent_clips(tmp_path, caplog):
    write_desed(tmp_path)
    (tmp_path / "audio/validation/validation" / REAL[0]).unlink()
    with pytest.raises(SoundEventTableError, match=f"line 2 \\(and 1 more row\\): '{REAL[0]}' is not in"):
        data.load("desed", root=tmp_path)
    with caplog.at_level(logging.WARNING, logger="aasp_hf.data"):
        test = data.load("desed", root=tmp_path, skip_missing=True)["test"]
    assert sorted(test["filename"]) == sorted(REAL[1:]) and "left out 2 table row(s)" in caplog.text


# ------------------------------------------------------------------------------------------------ bad tables
def bad_train(root, rows, header=HEADER, extra=()):
    """Our layout whose train table holds `rows` (after two good rows of each label, so that both are frequent)."""
    write_ours(root, validation=False, test=False)
    good = [("street_02.wav", "0.000", "1.000", label) for label in ("Speech", "Dog", "Dishes") for _ in range(3)]
    table(root / "train.tsv", good + list(rows), header)
    for name in extra:
        noise(root / "train" / name)


@pytest.mark.parametrize(
    ("rows", "header", "expected"),
    [
        ([("kitchen/0003.wav", "0.1", "0.2", "Dog")], HEADER, "train.tsv line 11: 'kitchen/0003.wav' is not in train/"),
        ([("bg.wav", "1.5", "0.5", "Dog")], HEADER, "train.tsv line 11: onset 1.5 > offset 0.5 of 'bg.wav' (Dog)"),
        ([("bg.wav", "-0.2", "0.5", "Dog")], HEADER, "train.tsv line 11: onset '-0.2' of 'bg.wav': times are"),
        ([("bg.wav", "0.2", "NaN", "Dog")], HEADER, "train.tsv line 11: offset 'NaN' of 'bg.wav': times are"),
        ([("bg.wav", "0.2", "1,5", "Dog")], HEADER, "train.tsv line 11: offset '1,5' of 'bg.wav' is not a number"),
        ([("bg.wav", "0.2", "", "Dog")], HEADER, "train.tsv line 11: 'bg.wav' has onset '0.2', offset '', event_l"),
        (
            [("bg.wav", "0.2", "2.8", "Dog")],
            HEADER,
            "train.tsv line 11: offset 2.8 s of 'bg.wav' is 0.800 s past the end of the file (2.000 s;",
        ),
        ([("bg.wav", "0.2", "0.8", "Speeh")], HEADER, "train.tsv line 11: label 'Speeh' occurs only once in all tab"),
        ([("bg.wav", "0.2", "0.8", "dog")], HEADER, "train.tsv line 11: label 'dog' occurs only once in all tables; "),
        ([], "filename\tonset\toffset\tlabel\n", "train.tsv line 1: columns ['filename', 'onset', 'offset', 'label']"),
        (
            [],
            "filename onset offset event_label\n",
            "train.tsv line 1: 'filename onset offset event_label' has no tabs",
        ),
        ([], "", "train.tsv line 1: no header line: the first line is a row (street_02.wav<TAB>0.000"),
    ],
)
def test_each_bad_table_row_is_one_line(tmp_path, rows, header, expected):
    bad_train(tmp_path, rows, header)
    with pytest.raises(SoundEventTableError) as error:
        data.load("sound_events", root=tmp_path)
    problems = error.value.problems
    assert len(problems) == 1 and problems[0].startswith(expected), problems
    assert "\n" not in problems[0] and problems[0] in str(error.value)


def test_bad_header_says_the_expected_one_and_misspellings_name_the_frequent_label(tmp_path):
    bad_train(tmp_path, [], "filename\tonset\toffset\tlabel\n")
    with pytest.raises(
        SoundEventTableError,
        match="missing \\['event_label'\\], unknown \\['label'\\]; expected the "
        "header filename<TAB>onset<TAB>offset<TAB>event_label",
    ):
        data.load("sound_events", root=tmp_path)
    bad_train(tmp_path / "b", [("bg.wav", "0.2", "0.8", "Speeh"), ("bg.wav", "0.2", "0.8", "Running water")])
    table(tmp_path / "b" / "test.tsv", [("t.wav", 0, 1, "Running_water")] * 3)
    noise(tmp_path / "b" / "test" / "t.wav")
    with pytest.raises(SoundEventTableError) as error:
        data.load("sound_events", root=tmp_path / "b")
    assert error.value.problems == [  # in the order of the table's lines
        "train.tsv line 11: label 'Speeh' occurs only once in all tables; did you mean 'Speech' (3 rows)?",
        (
            "train.tsv line 12: label 'Running water' occurs only once in all tables; did you mean 'Running_water' "
            "(3 rows)?"
        ),
    ]


def test_every_problem_is_found_before_anything_trains(tmp_path):
    bad_train(
        tmp_path,
        [("bg.wav", "1.5", "0.5", "Dog"), ("nowhere.wav", "0", "1", "Dog"), ("bg.wav", "0", "9", "Dog")],
    )
    (tmp_path / "validation.tsv").write_text(HEADER)  # a table without its folder
    with pytest.raises(SoundEventTableError) as error:
        data.load("sound_events", root=tmp_path)
    assert len(error.value.problems) == 4
    message = str(error.value)
    assert message.startswith(f"4 problems in the sound-event tables of {tmp_path}:\n")
    for part in (
        "line 11: onset 1.5 > offset 0.5",
        "line 12: 'nowhere.wav' is not in",
        "line 13: offset 9 s",
        "validation.tsv has no audio folder beside it",
    ):
        assert part in message


def test_empty_train_split_and_missing_table(tmp_path):
    (tmp_path / "train").mkdir()
    table(tmp_path / "train.tsv", [])
    with pytest.raises(SoundEventTableError, match="the train split has no readable audio files \\(in train/\\)"):
        data.load("sound_events", root=tmp_path)
    noise(tmp_path / "b" / "train" / "a.wav")
    with pytest.raises(SoundEventTableError, match="train/ has no table: .*train.tsv does not exist"):
        data.load("sound_events", root=tmp_path / "b")
    with pytest.raises(FileNotFoundError, match="neither train/ nor audio/ \\+ metadata/"):
        data.load("sound_events", root=tmp_path / "b" / "train")


# ------------------------------------------------------------------------------------------------ protocol
def split_names(task):
    return {
        part: {split: sorted(rows["filename"]) for split, rows in splits.items()} for part, splits in task.parts.items()
    }


def test_load_downstream_keeps_the_splits_of_the_copy(tmp_path):
    write_ours(tmp_path)
    task = data.load_downstream("sound-events", root=tmp_path)
    assert (task.task, task.multi_label, task.label_names, task.clip_seconds) == (
        "sound_events",
        True,
        ["Dishes", "Dog", "Speech"],
        10.0,
    )
    assert split_names(task) == {
        "official": {
            "train": [
                "bg.wav",
                "kitchen/0001.wav",
                "kitchen/0002.wav",
                "silence.wav",
                "street_01.wav",
                "street_02.wav",
            ],
            "validation": ["v1.wav", "v2.wav"],
            "test": ["t1.wav", "t2.wav"],
        }
    }
    assert not task.test_held_out
    assert data.load_downstream("desed", root=tmp_path, clip_seconds=4.0).clip_seconds == 4.0


def test_load_downstream_holds_out_whole_files_without_validation_or_test(tmp_path):
    write_ours(tmp_path, validation=False, test=False)
    task = data.load_downstream("sound_events", root=tmp_path, validation_fraction=0.2, test_fraction=0.2, seed=1)
    (part,) = task.parts.values()
    sizes = {split: len(rows) for split, rows in part.items()}
    assert sizes == {"train": 3, "validation": 1, "test": 2} and task.test_held_out
    held = [name for rows in part.values() for name in rows["filename"]]
    assert sorted(held) == sorted(set(held)) and len(held) == 6  # every file in one split, with all its events
    by_file = {r["filename"]: r["events"] for rows in part.values() for r in rows.remove_columns("audio")}
    assert len(by_file["kitchen/0001.wav"]) == 2
    last = data.load_downstream("sound_events", root=tmp_path, select_on="last")
    assert set(last.parts["official"]) == {"train", "test"}


def test_group_by_holds_out_whole_videos_of_desed_clips(tmp_path):
    """DESED's real clips are named after their YouTube video: --group_by '^Y(.{11})_' keeps each video's clips in
    one split where the protocol holds files out of train."""
    videos = ["-BJNMHMZDcU", "00pK0GMmE9s", "0cH_NlhhMAs", "0eh_N-cmcuI"]
    names = [f"Y{video}_{start}.000_{start + 10}.000.wav" for video in videos for start in (30, 50, 70)]
    for name in names:
        noise(tmp_path / "audio/train/strong_label_real" / name, seconds=0.5)
    table(tmp_path / "metadata/train/audioset_strong.tsv", [(n, "0.000", "0.400", "Speech") for n in names])
    task = data.load_downstream("desed", root=tmp_path, group_by="^Y(.{11})_", seed=0)
    part = task.parts["official"]
    videos_of = {split: {name[1:12] for name in rows["filename"]} for split, rows in part.items()}
    assert set(videos_of) == {"train", "validation", "test"}
    assert sum(len(v) for v in videos_of.values()) == 4  # each video in exactly one split
    assert sum(len(rows) for rows in part.values()) == 12


def test_data_check_reports_sound_events(tmp_path):
    write_ours(tmp_path)
    report = check_dataset("sound-events", tmp_path)
    assert report["errors"] == []
    assert [(row["split"], row["clips"]) for row in report["splits"]] == [("train", 6), ("validation", 2), ("test", 2)]
    assert report["labels"] == {"classes": 3, "present": 3} and report["unnamed_files"]["count"] == 0
    bad_train(tmp_path / "bad", [("bg.wav", "1.5", "0.5", "Dog"), ("nowhere.wav", "0", "1", "Dog")])
    errors = check_dataset("desed", tmp_path / "bad")["errors"]
    assert [e.split(": ", 1)[0] for e in errors] == ["train.tsv line 11", "train.tsv line 12"]
