"""Every loader on a small layout written from the dataset's published format: the real metadata files' names, header
lines, columns and quoting (AudioSet's `#` lines and quoted label lists, US8K's CRLF copy, the SCV2 lists' relative
paths, NSynth's examples.json keys), EVAR's CSVs as its make_metadata.py writes them (pandas, index column included
where it writes one), and placeholder audio at the real names and formats. Each case asserts split sizes, label
order and class counts."""

import json
import logging
import os
import shutil

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

import aasp_hf.data.loaders  # data.loaders.<module> below: the sub-package imported by name, not by an earlier test
from aasp_hf import data
from aasp_hf.data import SafeAudioDecoder, for_safe_decoding


def tone(path, sr=16000, seconds=0.05, channels=1, **kwargs):
    """A short sine at `path` (parent folders made), e.g. subtype="PCM_U8" or format="AU"."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    wave = 0.3 * np.sin(2 * np.pi * 440 * np.arange(int(sr * seconds)) / sr)
    sf.write(path, np.repeat(wave[:, None], channels, axis=1).astype(np.float32), sr, **kwargs)


def sizes(ds):
    return {split: part.num_rows for split, part in ds.items()}


def labels_of(part):
    return [part.features["label"].int2str(i) for i in part["label"]]


# ------------------------------------------------------------------------------------------------------
# The layouts, as published
# ------------------------------------------------------------------------------------------------------

ESC50_CATEGORIES = {0: "dog", 1: "rooster", 2: "pig"}  # target -> category, as in meta/esc50.csv


def write_esc50(root):
    """meta/esc50.csv (filename,fold,target,category,esc10,src_file,take; esc10 as True/False), audio/ at 44.1 kHz."""
    lines = ["filename,fold,target,category,esc10,src_file,take"]
    for fold in range(1, 6):
        for target in (2, 0, 1):  # the CSV is ordered by file name, not by target
            src = 100032 + 17 * fold + target
            name = f"{fold}-{src}-A-{target}.wav"
            lines.append(f"{name},{fold},{target},{ESC50_CATEGORIES[target]},{target == 0},{src},A")
            tone(str(root / "audio" / name), sr=44100)
    os.makedirs(root / "meta")
    (root / "meta" / "esc50.csv").write_text("\n".join(lines) + "\n")
    return {}


US8K_CLASSES = [
    "air_conditioner",
    "car_horn",
    "children_playing",
    "dog_bark",
    "drilling",
    "engine_idling",
    "gun_shot",
    "jackhammer",
    "siren",
    "street_music",
]
# sample rate, subtype, channels: the spread of formats UrbanSound8K ships (8 to 96 kHz, 8- to 32-bit, stereo)
US8K_FORMATS = [
    (8000, "PCM_U8", 1),
    (11025, "PCM_16", 1),
    (22050, "PCM_24", 2),
    (44100, "PCM_16", 2),
    (48000, "FLOAT", 1),
    (96000, "PCM_24", 2),
    (16000, "PCM_32", 1),
]


def write_us8k(root):
    """metadata/UrbanSound8K.csv with CRLF line ends, audio/fold<k>/<fsID>-<classID>-<occurrence>-<slice>.wav."""
    lines = ["slice_file_name,fsID,start,end,salience,fold,classID,class"]
    for i in range(20):
        fold, class_id = i % 10 + 1, i % 10
        fs_id = 100032 + i
        name = f"{fs_id}-{class_id}-0-{i // 10}.wav"
        lines.append(
            f"{name},{fs_id},{1.5 * i},{1.5 * i + 0.317551},{1 + i % 2},{fold},{class_id},{US8K_CLASSES[class_id]}"
        )
        sr, subtype, channels = US8K_FORMATS[i % len(US8K_FORMATS)]
        tone(str(root / "audio" / f"fold{fold}" / name), sr=sr, subtype=subtype, channels=channels)
    os.makedirs(root / "metadata")
    (root / "metadata" / "UrbanSound8K.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    return {}


def write_scv2(root):
    """speech_commands_v0.02 as extracted: <word>/<speaker>_nohash_<n>.wav, the two lists, _background_noise_,
    LICENSE and README.md."""
    for word in ("yes", "no", "marvin", "backward"):
        for speaker in ("0a7c2a8d", "0b09edd3", "0c40e715"):
            tone(str(root / word / f"{speaker}_nohash_0.wav"))
    tone(str(root / "_background_noise_" / "white_noise.wav"))
    (root / "_background_noise_" / "README.md").write_text("noise\n")
    (root / "LICENSE").write_text("CC-BY-4.0\n")
    (root / "README.md").write_text("Speech Commands\n")
    (root / "validation_list.txt").write_text(
        "backward/0b09edd3_nohash_0.wav\nmarvin/0b09edd3_nohash_0.wav\nno/0b09edd3_nohash_0.wav\n"
    )
    (root / "testing_list.txt").write_text("backward/0c40e715_nohash_0.wav\nyes/0c40e715_nohash_0.wav\n")
    return {}


def nsynth_example(family, source, instrument, pitch, velocity):
    """One examples.json entry with every key NSynth publishes."""
    note_str = f"{family}_{source}_{instrument:03d}-{pitch:03d}-{velocity:03d}"
    families = data.loaders.nsynth.NSYNTH_FAMILIES
    return note_str, {
        "note": 1000 * instrument + pitch,
        "sample_rate": 16000,
        "pitch": pitch,
        "velocity": velocity,
        "instrument_source_str": source,
        "instrument_family_str": family,
        "qualities_str": ["bright"],
        "instrument_str": f"{family}_{source}_{instrument:03d}",
        "note_str": note_str,
        "instrument": instrument,
        "qualities": [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        "instrument_source": ["acoustic", "electronic", "synthetic"].index(source),
        "instrument_family": families.index(family),
    }


def write_nsynth(root):
    """nsynth-{train,valid,test}/examples.json (note_str -> entry) and audio/<note_str>.wav."""
    notes = {
        "train": [
            ("bass", "synthetic", 68, 21, 100),
            ("keyboard", "acoustic", 4, 60, 25),
            ("vocal", "synthetic", 3, 108, 127),
        ],
        "valid": [("guitar", "electronic", 21, 64, 75)],
        "test": [("string", "acoustic", 14, 50, 50), ("bass", "electronic", 18, 33, 100)],
    }
    for split, entries in notes.items():
        examples = dict(nsynth_example(*entry) for entry in entries)
        for note_str in examples:
            tone(str(root / f"nsynth-{split}" / "audio" / f"{note_str}.wav"))
        (root / f"nsynth-{split}" / "examples.json").write_text(json.dumps(examples, indent=4))
    return {}


def write_cremad(root):
    """EVAR's evar/metadata/cremad.csv (file_name,label,speaker_id,split; no index) and AudioWAV/."""
    rows = []
    for speaker, split in ((1001, "test"), (1002, "train"), (1003, "train"), (1012, "valid")):
        for sentence, emotion, level in (("DFA", "ANG", "XX"), ("IEO", "SAD", "HI"), ("TIE", "NEU", "XX")):
            name = f"{speaker}_{sentence}_{emotion}_{level}.wav"
            rows.append({"file_name": name, "label": emotion, "speaker_id": speaker, "split": split})
            tone(str(root / "AudioWAV" / name))
    pd.DataFrame(rows).to_csv(root / "cremad.csv", index=None)
    return {"root": root / "AudioWAV", "metadata_csv": root / "cremad.csv"}


GTZAN_GENRES = ["blues", "classical", "country", "disco", "hiphop", "jazz", "metal", "pop", "reggae", "rock"]


def write_gtzan(root, au=True):
    """GTZAN's archive (genres/<genre>/<genre>.000NN.au, 22,050 Hz AU) and gtzan.csv as EVAR's
    convert_gtzan_metadata writes it: every file, the split set from the filtered lists, empty for the others."""
    files = []
    for genre in GTZAN_GENRES:
        for n in range(3):
            files.append([f"{genre}/{genre}.{n:05d}.wav", genre])
            target = root / "genres" / genre / f"{genre}.{n:05d}.{'au' if au else 'wav'}"
            tone(str(target), sr=22050, **({"format": "AU", "subtype": "PCM_16"} if au else {}))
    df = pd.DataFrame(files, columns=["file_name", "label"])
    # 2 + 1 per genre in train and valid, "n == 2" in test for 4 genres, the other 6 left out of every list
    df.loc[df.file_name.str.endswith(".00002.wav") & df.label.isin(GTZAN_GENRES[:4]), "split"] = "test"
    df.loc[df.file_name.str.endswith(".00001.wav"), "split"] = "valid"
    df.loc[df.file_name.str.endswith(".00000.wav"), "split"] = "train"
    df.to_csv(root / "gtzan.csv", index=None)
    return {"root": root / "genres", "metadata_csv": root / "gtzan.csv"}


VOXFORGE_LANGUAGES = ["de", "en", "es", "fr", "it", "ru"]


def write_voxforge(root):
    """A VoxForge CSV (file_name,label,split) with <archive>/wav/<n>.wav paths, the 6 languages."""
    rows = []
    for i, language in enumerate(VOXFORGE_LANGUAGES * 2):
        name = f"{language}_speaker{i}-20100101-abc/wav/a{i:04d}.wav"
        rows.append({"file_name": name, "label": language, "split": ("train", "valid", "test", "train")[i % 4]})
        tone(str(root / "voxforge" / name))
    pd.DataFrame(rows).to_csv(root / "voxforge.csv", index=None)
    return {"root": root / "voxforge", "metadata_csv": root / "voxforge.csv"}


SURGE_TONES = {
    "surge-patches-3rdparty-Argitoth-Drums-Snare-velocity64": "train",
    "surge-patches-3rdparty-Argitoth-Drums-Kick-velocity64": "valid",
    "surge-patches-3rdparty-Bluelight-Basses-Bass-10-velocity64": "test",
}


def write_surge(root, pitches=(21, 60, 100, 108)):
    """<tone>/<MIDI pitch>.ogg and surge.csv as EVAR's make_metadata.py surge writes it (pandas index included)."""
    files = sorted(root / "surge" / tone_name / f"{pitch}.ogg" for tone_name in SURGE_TONES for pitch in pitches)
    tone(str(files[0]), sr=22050, format="OGG", subtype="VORBIS")
    for file in files[1:]:  # the same Ogg Vorbis bytes at every name: encoding each costs ~10 ms
        os.makedirs(file.parent, exist_ok=True)
        shutil.copyfile(files[0], file)
    pd.DataFrame(
        {
            "file_name": [str(f.relative_to(root / "surge")) for f in files],
            "label": [f.stem for f in files],
            "split": [SURGE_TONES[f.parent.name] for f in files],
        }
    ).to_csv(root / "surge.csv")
    return {"root": root / "surge", "metadata_csv": root / "surge.csv"}


VOX1 = [
    (1, "id10001", "1zcIwhmdeo4"),
    (1, "id10001", "7w0IBEWc9Qw"),
    (1, "id10002", "0_laIeN-Q44"),
    (1, "id10003", "5ablueV_1tw"),
    (2, "id10001", "Y8hIVOBuels"),
    (2, "id10002", "6WO410QOeuo"),
    (3, "id10002", "C7k7C-PDvAA"),
    (3, "id10003", "E_6MjfYr0sQ"),
]


def write_voxceleb1(root, evar_csv=False):
    """iden_split.txt ('<1|2|3> idXXXXX/<video>/<nnnnn>.wav') and wav/; or EVAR's vc1.csv made from it."""
    for _, speaker, video in VOX1:
        tone(str(root / "wav" / speaker / video / "00001.wav"))
    (root / "iden_split.txt").write_text("".join(f"{c} {s}/{v}/00001.wav\n" for c, s, v in VOX1))
    if not evar_csv:
        return {}
    files = [f"wav/{s}/{v}/00001.wav" for _, s, v in VOX1]
    pd.DataFrame(
        {
            "file_name": files,
            "label": [f.split("/")[1] for f in files],
            "split": [{1: "train", 2: "valid", 3: "test"}[c] for c, _, _ in VOX1],
        }
    ).to_csv(root / "vc1.csv", index=None)
    return {"metadata_csv": root / "vc1.csv"}


# name: (writer, load kwargs, split sizes, label names (or their count), a clip that must decode to 16 kHz)
CASES = {
    "esc50": (write_esc50, {}, {"train": 15}, ["dog", "rooster", "pig"], ("train", 0)),
    "esc50_fold": (write_esc50, {"test_fold": 5}, {"train": 12, "test": 3}, ["dog", "rooster", "pig"], None),
    "us8k": (write_us8k, {}, {"train": 20}, US8K_CLASSES, None),
    "scv2": (write_scv2, {}, {"train": 7, "validation": 3, "test": 2}, 35, ("test", 0)),
    "nsynth": (
        write_nsynth,
        {},
        {"train": 3, "validation": 1, "test": 2},
        data.loaders.nsynth.NSYNTH_FAMILIES,
        ("validation", 0),
    ),
    "cremad": (
        write_cremad,
        {},
        {"train": 6, "validation": 3, "test": 3},
        ["ANG", "DIS", "FEA", "HAP", "NEU", "SAD"],
        None,
    ),
    "gtzan": (write_gtzan, {}, {"train": 10, "validation": 10, "test": 4}, GTZAN_GENRES, ("test", 0)),
    "voxforge": (write_voxforge, {}, {"train": 6, "validation": 3, "test": 3}, VOXFORGE_LANGUAGES, None),
    "surge": (write_surge, {}, {"train": 4, "validation": 4, "test": 4}, ["21", "60", "100", "108"], ("train", 2)),
    "voxceleb1": (
        write_voxceleb1,
        {},
        {"train": 4, "validation": 2, "test": 2},
        ["id10001", "id10002", "id10003"],
        ("test", 1),
    ),
    "voxceleb1_evar": (
        lambda root: write_voxceleb1(root, evar_csv=True),
        {},
        {"train": 4, "validation": 2, "test": 2},
        ["id10001", "id10002", "id10003"],
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_published_layout_loads_with_counts_and_labels(case, tmp_path):
    writer, kwargs, expected_sizes, expected_labels, decode = CASES[case]
    root = tmp_path / case
    load_kwargs = {"root": root, **writer(root), **kwargs}
    ds = data.load(case.split("_")[0], **load_kwargs)
    assert sizes(ds) == expected_sizes
    names = ds["train"].features["label"].names
    if isinstance(expected_labels, int):
        assert len(names) == expected_labels
    else:
        assert names == expected_labels
    for part in ds.values():  # no stray columns: the index pandas writes, an empty header
        assert "" not in part.column_names and not any(c.startswith("Unnamed") for c in part.column_names)
    if decode is not None:
        audio = ds[decode[0]][decode[1]]["audio"]
        assert audio["sampling_rate"] == 16000 and audio["array"].ndim == 1 and len(audio["array"]) > 500


def test_published_labels_land_on_the_right_clips(tmp_path):
    """Per clip: ESC-50 by `target`, US8K by `classID` (CRLF file), SCV2 by folder, NSynth by family and pitch,
    CREMA-D by the CSV's label with its speaker_id kept."""
    write_esc50(tmp_path / "esc")
    esc = data.load("esc50", root=tmp_path / "esc")["train"]
    assert all(f.endswith(f"-A-{t}.wav") for f, t in zip(esc["filename"], esc["label"]))
    assert sum(esc["esc10"]) == 5 and sorted(set(esc["fold"])) == [1, 2, 3, 4, 5]

    write_us8k(tmp_path / "us8k")
    us8k = data.load("us8k", root=tmp_path / "us8k")["train"]
    assert [int(n.split("-")[1]) for n in us8k["slice_file_name"]] == us8k["label"]
    assert sorted(set(us8k["fold"])) == list(range(1, 11)) and set(us8k["salience"]) == {1, 2}
    decoded = [SafeAudioDecoder()(a) for a in for_safe_decoding(us8k)["audio"][:7]]  # the 7 formats
    assert [len(d) for d in decoded] == [800] * 7  # 0.05 s at 16 kHz from 8 to 96 kHz, mono and stereo

    write_scv2(tmp_path / "scv2")
    scv2 = data.load("scv2", root=tmp_path / "scv2")
    assert sorted(labels_of(scv2["validation"])) == ["backward", "marvin", "no"]
    assert set(scv2["test"]["speaker_id"]) == {"0c40e715"}

    write_nsynth(tmp_path / "nsynth")
    nsynth = data.load("nsynth", root=tmp_path / "nsynth")
    assert labels_of(nsynth["train"]) == ["bass", "keyboard", "vocal"] and nsynth["train"]["pitch"] == [21, 60, 108]
    assert nsynth["test"]["instrument_source_str"] == ["electronic", "acoustic"]

    cremad = data.load("cremad", **write_cremad(tmp_path / "cremad"))
    assert labels_of(cremad["test"]) == ["ANG", "SAD", "NEU"] and set(cremad["test"]["speaker_id"]) == {"1001"}


# ------------------------------------------------------------------------------------------------------
# EVAR's CSVs: empty splits, the index column, the label order
# ------------------------------------------------------------------------------------------------------


def test_gtzan_csv_rows_without_a_split_are_left_out_and_counted(tmp_path, caplog):
    kwargs = write_gtzan(tmp_path, au=False)
    assert (tmp_path / "gtzan.csv").read_text().splitlines()[-1] == "rock/rock.00002.wav,rock,"  # as pandas writes NaN
    with caplog.at_level(logging.INFO, logger="aasp_hf.data.loaders"):
        ds = data.load("gtzan", **kwargs)
    assert sizes(ds) == {"train": 10, "validation": 10, "test": 4}
    assert "6 of 30 rows have no split and are left out" in caplog.text
    assert all(p.endswith(".wav") for p in ds["train"]["file_name"])


def test_gtzan_reads_the_archives_au_files(tmp_path):
    """GTZAN ships .au; EVAR's CSV names .wav: the .au is read, and it decodes through datasets and SafeAudioDecoder."""
    kwargs = write_gtzan(tmp_path)
    ds = data.load("gtzan", **kwargs)
    paths = [a["path"] for a in for_safe_decoding(ds)["test"]["audio"]]
    assert [os.path.relpath(p, tmp_path) for p in paths] == [f"genres/{g}/{g}.00002.au" for g in GTZAN_GENRES[:4]]
    assert ds["test"]["file_name"][0] == "blues/blues.00002.wav"  # the CSV's name is kept
    assert len(ds["test"][0]["audio"]["array"]) == 800  # 0.05 s at 22,050 Hz -> 16 kHz, by torchcodec
    decoder = SafeAudioDecoder()
    assert len(decoder({"path": paths[0], "bytes": None})) == 800 and decoder.num_failures == 0
    for genre in GTZAN_GENRES[:2]:
        os.remove(tmp_path / "genres" / genre / f"{genre}.00000.au")
    with pytest.raises(FileNotFoundError, match=r"2 of 24 audio files.*genre folders \(genres/ in GTZAN's genres"):
        data.load("gtzan", **kwargs)


@pytest.mark.parametrize("index_header", ["", "Unnamed: 0"])
def test_surge_csv_index_column_dropped_and_pitches_ordered_as_numbers(tmp_path, index_header):
    """88 pitches (here MIDI 21-108) of one tone per split: 88 classes in numeric order, as EVAR's pandas sorts them."""
    kwargs = write_surge(tmp_path, pitches=range(21, 109))
    csv_path = kwargs["metadata_csv"]
    assert csv_path.read_text().startswith(",file_name,label,split\n0,")
    if index_header:  # the same file after a pandas read/write round trip
        pd.read_csv(csv_path).to_csv(csv_path, index=None)
        assert csv_path.read_text().startswith("Unnamed: 0,file_name,label,split\n")
    ds = data.load("surge", **kwargs)
    assert sizes(ds) == {"train": 88, "validation": 88, "test": 88}
    assert ds["train"].features["label"].names == [str(p) for p in range(21, 109)]
    assert ds["train"].column_names == ["audio", "label", "file_name"]
    by_file = dict(zip(ds["test"]["file_name"], labels_of(ds["test"])))
    assert by_file["surge-patches-3rdparty-Bluelight-Basses-Bass-10-velocity64/100.ogg"] == "100"


def test_evar_unknown_split_value_is_still_an_error(tmp_path):
    kwargs = write_voxforge(tmp_path)
    kwargs["metadata_csv"].write_text(kwargs["metadata_csv"].read_text().replace(",valid\n", ",dev\n", 1))
    with pytest.raises(ValueError, match=r"unknown split value\(s\) \['dev'\]; expected train, valid or test"):
        data.load("voxforge", **kwargs)


# ------------------------------------------------------------------------------------------------------
# AudioSet: the segment CSVs as published, and every naming the field's pipelines use
# ------------------------------------------------------------------------------------------------------

CLASS_LABELS = (
    'index,mid,display_name\n0,/m/09x0r,"Speech"\n1,/m/05zppz,"Male speech, man speaking"\n'
    '2,/m/02zsn,"Female speech, woman speaking"\n3,/m/0ytgt,"Child speech, kid speaking"\n'
    '4,/m/01h8n0,"Conversation"\n'
)
SEGMENTS = {  # real-looking YTIDs: '-' and '_' inside, a leading 'Y', a non-integer start
    "balanced_train": [
        ("--PJHxphWEs", 30.0, ["/m/09x0r", "/m/05zppz"]),
        ("-0RWZT-miFs", 420.0, ["/m/02zsn"]),
        ("Y_3Xk9q0aZs", 0.0, ["/m/0ytgt"]),
        ("0_Ab12cd_Ef", 2.5, ["/m/01h8n0", "/m/09x0r"]),
    ],
    "unbalanced_train": [("-0SdAVK79lg", 30.0, ["/m/09x0r"]), ("zz_top_0001", 170.0, ["/m/01h8n0"])],
    "eval": [("--4gqARaEJE", 0.0, ["/m/02zsn", "/m/05zppz"]), ("-1pRmoJIGQc", 11.0, ["/m/0ytgt"])],
}


def write_segments(path, rows, spaced_labels):
    """A segment CSV as published: 3 '#' lines, then 'YTID, start, end, "mid,mid"' (or "mid, mid")."""
    join = ", " if spaced_labels else ","
    header = (
        "# Segments csv created Sun Mar  5 10:54:31 2017\n"
        f"# num_ytids={len(rows)}, num_segs={len(rows)}, num_unique_labels=5, num_positive_labels=9\n"
        "# YTID, start_seconds, end_seconds, positive_labels\n"
    )
    path.write_text(header + "".join(f'{y}, {s:.3f}, {s + 10:.3f}, "{join.join(m)}"\n' for y, s, m in rows))


SCHEMES = {
    "ytid": lambda y, s, e: y,
    "Y_ytid": lambda y, s, e: f"Y{y}",
    "start_end_3decimals": lambda y, s, e: f"{y}_{s:.3f}_{e:.3f}",
    "start_end_integers": lambda y, s, e: f"{y}_{int(s)}_{int(e)}",
    "m2d_start_3decimals": lambda y, s, e: f"{y}_{s:.3f}",
    "start_1decimal": lambda y, s, e: f"{y}_{s:.1f}",
    "start_integer": lambda y, s, e: f"{y}_{int(s)}",
    "Y_start_end": lambda y, s, e: f"Y{y}_{s:.3f}_{e:.3f}",
    "Y_start_integer": lambda y, s, e: f"Y{y}_{int(s)}",
}


def write_audioset(root, scheme, drop=(), shift=0.0):
    """The metadata CSVs and audio/<subset>/<name>.<ext> for every segment but `drop`; `shift` moves the file names'
    times away from the CSV's."""
    os.makedirs(root / "audio")
    (root / "class_labels_indices.csv").write_text(CLASS_LABELS)
    for i, (subset, rows) in enumerate(SEGMENTS.items()):
        write_segments(root / f"{subset}_segments.csv", rows, spaced_labels=i % 2 == 0)
        for j, (ytid, start, _) in enumerate(rows):
            if ytid not in drop:
                name = SCHEMES[scheme](ytid, start + shift, start + shift + 10) + (".wav", ".flac")[j % 2]
                tone(str(root / "audio" / f"{subset}_segments" / name), sr=32000)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_audioset_every_naming_scheme_matches_every_clip(tmp_path, scheme, caplog):
    write_audioset(tmp_path, scheme)
    with caplog.at_level(logging.INFO, logger="aasp_hf.data.loaders"):
        as20k = data.load("as20k", root=tmp_path)
    assert sizes(as20k) == {"train": 4, "test": 2} and as20k.missing_clips == {"train": [], "test": []}
    assert "as20k train: 0 of 4 segments missing" in caplog.text and "as20k test: 0 of 2" in caplog.text
    feature = as20k["train"].features["labels"].feature
    assert feature.num_classes == 5 and feature.names[1] == "Male speech, man speaking"
    by_id = {y: [feature.int2str(i) for i in ls] for y, ls in zip(as20k["train"]["ytid"], as20k["train"]["labels"])}
    assert by_id["--PJHxphWEs"] == ["Speech", "Male speech, man speaking"]
    assert by_id["0_Ab12cd_Ef"] == ["Conversation", "Speech"] and as20k["train"]["start_seconds"][3] == 2.5
    assert all(
        os.path.basename(p).startswith(SCHEMES[scheme](y, 0, 0)[:12])
        for y, p in zip(as20k["train"]["ytid"], [a["path"] for a in for_safe_decoding(as20k)["train"]["audio"]])
    )
    as2m = data.load("as2m", root=tmp_path)
    assert sizes(as2m) == {"train": 6, "test": 2}
    assert as2m["test"][1]["audio"]["sampling_rate"] == 16000  # a 32 kHz FLAC, decoded


def test_audioset_missing_clips_are_counted_per_split(tmp_path, caplog):
    write_audioset(tmp_path, "m2d_start_3decimals", drop=("-0RWZT-miFs", "-1pRmoJIGQc"))
    with caplog.at_level(logging.INFO, logger="aasp_hf.data.loaders"):
        ds = data.load("as20k", root=tmp_path)
    assert sizes(ds) == {"train": 3, "test": 1}
    assert ds.missing_clips == {"train": ["-0RWZT-miFs"], "test": ["-1pRmoJIGQc"]}
    assert "as20k train: 1 of 4 segments missing" in caplog.text
    assert "as20k test: 1 of 2 segments missing" in caplog.text


def test_audioset_times_that_disagree_are_no_match_and_an_empty_split_says_what_it_found(tmp_path):
    write_audioset(tmp_path, "m2d_start_3decimals", shift=10.0)  # --PJHxphWEs_40.000.wav for the segment at 30 s
    with pytest.raises(ValueError) as error:
        data.load("as20k", root=tmp_path)
    message = str(error.value)
    assert "as20k train: 0 of 4 segments of balanced_train_segments.csv have an audio file" in message
    assert "named like ['balanced_train_segments/--PJHxphWEs_40.000.wav'" in message
    assert "--PJHxphWEs_30.000_40.000.wav, --PJHxphWEs_30.000.wav or --PJHxphWEs_30.wav" in message
    assert "\n" not in message


def test_audioset_split_matched_under_half_is_an_error(tmp_path):
    write_audioset(tmp_path, "ytid", drop=("--PJHxphWEs", "-0RWZT-miFs", "Y_3Xk9q0aZs"))
    with pytest.raises(ValueError, match=r"as20k train: 1 of 4 segments .* \(under 50%\)"):
        data.load("as20k", root=tmp_path)
    assert sizes(data.load("as20k", root=tmp_path, min_coverage=0.25)) == {"train": 1, "test": 2}


def test_audioset_clip_name_readings():
    parse = data.loaders.audioset.parse_clip_name
    assert parse("--PJHxphWEs_30.000_40.000") == [("--PJHxphWEs", "30.000", "40.000")]
    assert parse("Y-0SdAVK79lg_30") == [("-0SdAVK79lg", "30", None)]
    assert parse("abcdefg_123") == [("abcdefg_123", None, None)]  # an 11-character YTID ending in _123
    assert parse("abcdefg_123_30") == [("abcdefg_123", "30", None)]
    assert parse("YxAbCdEfGhI") == [("YxAbCdEfGhI", None, None)]  # a YTID that starts with Y
    assert parse("YYxAbCdEfGhI") == [("YxAbCdEfGhI", None, None)]
