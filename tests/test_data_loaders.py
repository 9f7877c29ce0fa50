"""Dataset loaders on tiny fake copies of each dataset's official layout (synthetic audio, real metadata formats)."""

import json
import logging
import os

import numpy as np
import pytest
import soundfile as sf
from datasets import ClassLabel, DatasetDict, IterableDataset, IterableDatasetDict, Sequence

from aasp_hf import data
from aasp_hf.data import (
    ClassBalancedSampler,
    SafeAudioDecoder,
    class_balanced_weights,
    filter_decodable,
    for_safe_decoding,
    split_for_node,
)


def write_tone(path, seconds=0.25, sr=16000, freq=440.0, subtype=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    sf.write(path, (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), sr, subtype=subtype)


def assert_decodes_16k(example, seconds):
    audio = example["audio"]
    assert audio["sampling_rate"] == 16000
    assert audio["array"].ndim == 1 and abs(audio["array"].shape[0] - seconds * 16000) <= 2


# ------------------------------------------------------------------------------------------------------
# ESC-50 and US8K
# ------------------------------------------------------------------------------------------------------


@pytest.fixture
def esc50_root(tmp_path):
    root = tmp_path / "ESC-50-master"
    lines = ["filename,fold,target,category,esc10,src_file,take"]
    categories = {0: "dog", 1: "rooster", 2: "pig"}
    for fold in range(1, 6):
        for target, category in categories.items():
            name = f"{fold}-{100 + target}-A-{target}.wav"
            lines.append(f"{name},{fold},{target},{category},{target == 0},{100 + target},A")
            # ESC-50 audio is 44.1 kHz: the Audio column resamples it
            write_tone(str(root / "audio" / name), seconds=0.2, sr=44100)
    (root / "meta").mkdir()
    (root / "meta" / "esc50.csv").write_text("\n".join(lines) + "\n")
    return root


def test_esc50_folds_labels_and_decoding(esc50_root):
    ds = data.load("esc50", root=esc50_root)
    assert isinstance(ds, DatasetDict) and list(ds) == ["train"]
    train = ds["train"]
    assert train.num_rows == 15
    assert train.features["label"] == ClassLabel(names=["dog", "rooster", "pig"])
    assert sorted(set(train["fold"])) == [1, 2, 3, 4, 5]
    assert sum(train["esc10"]) == 5
    assert_decodes_16k(train[0], 0.2)  # 44.1 kHz -> 16 kHz through datasets/torchcodec

    split = data.load("esc50", root=esc50_root, test_fold=2, valid_fold=3)
    assert {k: v.num_rows for k, v in split.items()} == {"train": 9, "validation": 3, "test": 3}
    assert set(split["test"]["fold"]) == {2} and set(split["validation"]["fold"]) == {3}
    with pytest.raises(ValueError, match="test_fold=7"):
        data.load("esc50", root=esc50_root, test_fold=7)


def test_esc50_missing_metadata_and_audio(esc50_root):
    os.remove(esc50_root / "audio" / "3-101-A-1.wav")
    with pytest.raises(FileNotFoundError, match=r"1 of 15 audio files .*3-101-A-1.wav"):
        data.load_esc50(esc50_root)
    os.remove(esc50_root / "meta" / "esc50.csv")
    with pytest.raises(FileNotFoundError, match=r"meta/esc50.csv.*github.com/karolpiczak/ESC-50"):
        data.load_esc50(esc50_root)


def test_us8k_ten_folds(tmp_path):
    root = tmp_path / "UrbanSound8K"
    lines = ["slice_file_name,fsID,start,end,salience,fold,classID,class"]
    names = {0: "air_conditioner", 3: "dog_bark"}
    names.update({1: "car_horn", 2: "children_playing"})
    for fold in range(1, 11):
        for class_id in (0, 1, 2, 3) if fold == 1 else (fold % 4,):
            name = f"{fold}{class_id}-{class_id}-0-0.wav"
            lines.append(f"{name},{fold}{class_id},0.0,0.3,1,{fold},{class_id},{names[class_id]}")
            write_tone(str(root / "audio" / f"fold{fold}" / name), seconds=0.3, sr=22050)
    (root / "metadata").mkdir()
    (root / "metadata" / "UrbanSound8K.csv").write_text("\n".join(lines) + "\n")
    ds = data.load("us8k", root=root)
    train = ds["train"]
    assert train.num_rows == 13 and sorted(set(train["fold"])) == list(range(1, 11))
    assert train.features["label"].names == ["air_conditioner", "car_horn", "children_playing", "dog_bark"]
    assert_decodes_16k(train[0], 0.3)
    split = data.load("us8k", root=root, test_fold=1)
    assert split["test"].num_rows == 4 and split["train"].num_rows == 9


def test_class_index_conflict_is_an_error(esc50_root):
    meta = esc50_root / "meta" / "esc50.csv"
    meta.write_text(meta.read_text().replace("1-100-A-0.wav,1,0,dog", "1-100-A-0.wav,1,0,cat"))
    with pytest.raises(ValueError, match="class index 0 is given two names"):
        data.load_esc50(esc50_root)


# ------------------------------------------------------------------------------------------------------
# Speech Commands v2 and NSynth
# ------------------------------------------------------------------------------------------------------


@pytest.fixture
def scv2_root(tmp_path):
    root = tmp_path / "speech_commands_v0.02"
    for word in ("yes", "no", "marvin"):
        for speaker in ("aaaa1111", "bbbb2222", "cccc3333"):
            write_tone(str(root / word / f"{speaker}_nohash_0.wav"), seconds=0.1)
    write_tone(str(root / "_background_noise_" / "white_noise.wav"), seconds=0.1)
    (root / "validation_list.txt").write_text("yes/bbbb2222_nohash_0.wav\nno/bbbb2222_nohash_0.wav\n")
    (root / "testing_list.txt").write_text("yes/cccc3333_nohash_0.wav\nmarvin/cccc3333_nohash_0.wav\n")
    return root


def test_speech_commands_official_lists(scv2_root):
    ds = data.load("scv2", root=scv2_root)
    assert {k: v.num_rows for k, v in ds.items()} == {"train": 5, "validation": 2, "test": 2}
    assert len(ds["train"].features["label"].names) == 35
    names = ds["train"].features["label"].names
    assert sorted(names[i] for i in ds["test"]["label"]) == ["marvin", "yes"]
    assert set(ds["validation"]["speaker_id"]) == {"bbbb2222"}
    all_paths = [a["path"] for split in for_safe_decoding(ds).values() for a in split["audio"]]
    assert len(all_paths) == 9
    assert not any("_background_noise_" in p for p in all_paths)
    assert_decodes_16k(ds["test"][0], 0.1)


def test_speech_commands_unknown_word_and_missing_list(scv2_root):
    write_tone(str(scv2_root / "hello" / "dddd4444_nohash_0.wav"), seconds=0.1)
    with pytest.raises(ValueError, match=r"Unknown label\(s\) \['hello'\]"):
        data.load("scv2", root=scv2_root)
    os.remove(scv2_root / "testing_list.txt")
    with pytest.raises(FileNotFoundError, match="testing_list.txt"):
        data.load("scv2", root=scv2_root)


def test_nsynth_splits_families_and_pitch(tmp_path):
    root = tmp_path
    for folder, families in (
        ("nsynth-train", ["bass", "guitar", "vocal"]),
        ("nsynth-valid", ["bass"]),
        ("nsynth-test", ["guitar", "bass"]),
    ):
        examples = {}
        for i, family in enumerate(families):
            note = f"{family}_acoustic_00{i}-0{60 + i}-100"
            examples[note] = {
                "note_str": note,
                "instrument_family_str": family,
                "pitch": 60 + i,
                "velocity": 100,
                "instrument_source_str": "acoustic",
            }
            write_tone(str(root / folder / "audio" / f"{note}.wav"), seconds=0.2)
        (root / folder / "examples.json").write_text(json.dumps(examples))
    ds = data.load("nsynth", root=root)
    assert {k: v.num_rows for k, v in ds.items()} == {"train": 3, "validation": 1, "test": 2}
    assert ds["train"].features["label"].num_classes == 11
    names = ds["train"].features["label"].names
    assert sorted(names[i] for i in ds["train"]["label"]) == ["bass", "guitar", "vocal"]
    assert sorted(ds["train"]["pitch"]) == [60, 61, 62]
    assert_decodes_16k(ds["test"][0], 0.2)

    meta = root / "nsynth-test" / "examples.json"
    meta.write_text(meta.read_text().replace('"guitar"', '"banjo"'))
    with pytest.raises(ValueError, match="banjo"):
        data.load("nsynth", root=root)
    os.remove(root / "nsynth-valid" / "examples.json")
    with pytest.raises(FileNotFoundError, match="nsynth-valid/examples.json"):
        data.load("nsynth", root=root)


# ------------------------------------------------------------------------------------------------------
# AudioSet
# ------------------------------------------------------------------------------------------------------

CLASS_LABELS = 'index,mid,display_name\n0,/m/09x0r,"Speech"\n1,/m/04rlf,"Music"\n2,/m/0jbk,"Animal"\n'


def write_segments(path, rows):
    header = (
        "# Segments csv created Sun Mar  5 10:54:31 2017\n"
        f"# num_ytids={len(rows)}, num_segs={len(rows)}, num_unique_labels=3, num_positive_labels=4\n"
        "# YTID, start_seconds, end_seconds, positive_labels\n"
    )
    path.write_text(header + "".join(f'{y}, {s:.3f}, {s + 10:.3f}, "{",".join(m)}"\n' for y, s, m in rows))


@pytest.fixture
def audioset_root(tmp_path):
    root = tmp_path / "audioset"
    root.mkdir()
    (root / "class_labels_indices.csv").write_text(CLASS_LABELS)
    write_segments(
        root / "balanced_train_segments.csv",
        [
            ("--PJHxphWEs", 30.0, ["/m/09x0r", "/m/04rlf"]),
            ("-0RWZT-miFs", 420.0, ["/m/04rlf"]),
            ("YxAbCdEfGhI", 0.0, ["/m/0jbk"]),
            ("missingAAAA", 0.0, ["/m/09x0r"]),
        ],
    )
    write_segments(root / "unbalanced_train_segments.csv", [("-0SdAVK79lg", 30.0, ["/m/09x0r"])])
    write_segments(
        root / "eval_segments.csv", [("--4gqARaEJE", 0.0, ["/m/0jbk", "/m/04rlf"]), ("missingBBBB", 5.0, ["/m/04rlf"])]
    )
    audio = root / "audio"
    write_tone(str(audio / "balanced_train_segments" / "--PJHxphWEs_30.000_40.000.wav"), seconds=0.3, sr=32000)
    write_tone(str(audio / "balanced_train_segments" / "-0RWZT-miFs.flac"), seconds=0.3)
    write_tone(str(audio / "balanced_train_segments" / "YYxAbCdEfGhI.wav"), seconds=0.3)  # Y<YTID> mirror naming
    write_tone(str(audio / "unbalanced_train_segments" / "Y-0SdAVK79lg_30_40.wav"), seconds=0.3)
    write_tone(str(audio / "eval_segments" / "--4gqARaEJE_0.000_10.000.flac"), seconds=0.3)
    return root


def test_audioset_naming_schemes_labels_and_missing(audioset_root, caplog):
    with caplog.at_level(logging.WARNING):
        ds = data.load("as20k", root=audioset_root)
    assert {k: v.num_rows for k, v in ds.items()} == {"train": 3, "test": 1}
    assert ds.missing_clips == {"train": ["missingAAAA"], "test": ["missingBBBB"]}
    assert "as20k train: 1 of 4 segments missing" in caplog.text
    assert "as20k test: 1 of 2 segments missing" in caplog.text
    feature = ds["train"].features["labels"]
    assert isinstance(feature, Sequence) and feature.feature.names == ["Speech", "Music", "Animal"]
    by_id = dict(zip(ds["train"]["ytid"], ds["train"]["labels"]))
    assert by_id == {"--PJHxphWEs": [0, 1], "-0RWZT-miFs": [1], "YxAbCdEfGhI": [2]}
    assert ds["test"]["labels"] == [[2, 1]]
    assert_decodes_16k(ds["train"][0], 0.3)  # 32 kHz wav -> 16 kHz

    as2m = data.load("as2m", root=audioset_root)
    assert as2m["train"].num_rows == 4 and "-0SdAVK79lg" in as2m["train"]["ytid"]


def test_audioset_unknown_label_and_missing_files(audioset_root):
    write_segments(audioset_root / "eval_segments.csv", [("--4gqARaEJE", 0.0, ["/m/0jbk", "/m/zzzz"])])
    with pytest.raises(ValueError, match="/m/zzzz"):
        data.load("as20k", root=audioset_root)
    os.remove(audioset_root / "class_labels_indices.csv")
    with pytest.raises(FileNotFoundError, match="class_labels_indices.csv.*research.google.com/audioset"):
        data.load("as20k", root=audioset_root)


def test_audioset_streaming_and_split_by_node(audioset_root):
    ds = data.load("as2m", root=audioset_root, streaming=True, num_shards=2)
    assert isinstance(ds, IterableDatasetDict) and isinstance(ds["train"], IterableDataset)
    rank_ytids = []
    for rank in range(2):
        shard = split_for_node(ds, rank=rank, world_size=2)["train"]
        rank_ytids.append([example["ytid"] for example in for_safe_decoding(shard)])
    assert sorted(rank_ytids[0] + rank_ytids[1]) == sorted(data.load("as2m", root=audioset_root)["train"]["ytid"])
    assert rank_ytids[0] and rank_ytids[1] and not set(rank_ytids[0]) & set(rank_ytids[1])


def test_balanced_sampler_favours_rare_classes():
    # class 0 on 90 clips, class 1 on 10 clips, one clip without labels
    labels = [[0]] * 90 + [[1]] * 10 + [[]]
    weights = class_balanced_weights(labels, num_classes=2)
    assert weights[0] == pytest.approx(1000 / 90.01) and weights[95] == pytest.approx(1000 / 10.01)
    assert weights[100] == 0
    sampler = ClassBalancedSampler(labels, num_classes=2, num_samples=20_000, seed=3)
    draws = np.array(list(sampler))
    assert len(draws) == len(sampler) == 20_000
    rare = np.isin(draws, np.arange(90, 100)).mean()
    assert abs(rare - 0.5) < 0.02  # each class drawn about equally often, though class 1 has 9x fewer clips
    assert 100 not in draws
    assert list(ClassBalancedSampler(labels, num_classes=2, num_samples=500, seed=3)) == draws[:500].tolist()
    sampler.set_epoch(1)
    assert list(sampler) != draws.tolist()
    halves = [list(ClassBalancedSampler(labels, 2, num_samples=101, seed=3, num_replicas=2, rank=r)) for r in (0, 1)]
    assert len(halves[0]) == 51 and len(halves[1]) == 50
    assert halves[0] == draws[:101:2].tolist()


def test_balanced_sampler_reads_audioset_dataset(audioset_root):
    train = data.load("as2m", root=audioset_root)["train"]
    sampler = ClassBalancedSampler(train, num_samples=200)
    assert sampler.weights.shape == (4,) and len(list(sampler)) == 200
    assert ClassBalancedSampler(train).num_samples == 200_000  # the paper's epoch


# ------------------------------------------------------------------------------------------------------
# EVAR-format tasks and VoxCeleb1
# ------------------------------------------------------------------------------------------------------


def write_evar_task(tmp_path, labels_splits, sub=""):
    audio_dir = tmp_path / "audio"
    lines = ["file_name,label,speaker_id,split"]
    for i, (label, split) in enumerate(labels_splits):
        name = f"{sub}{label}.{i:05d}.wav"
        write_tone(str(audio_dir / name), seconds=0.2, sr=22050)
        lines.append(f"{name},{label},{i % 3},{split}")
    csv_path = tmp_path / "task.csv"
    csv_path.write_text("\n".join(lines) + "\n")
    return audio_dir, csv_path


def test_gtzan_and_cremad_evar_csv(tmp_path):
    audio_dir, csv_path = write_evar_task(
        tmp_path, [("blues", "train"), ("rock", "train"), ("jazz", "valid"), ("rock", "test")], sub="genres_"
    )
    ds = data.load("gtzan", root=audio_dir, metadata_csv=csv_path)
    assert {k: v.num_rows for k, v in ds.items()} == {"train": 2, "validation": 1, "test": 1}
    assert ds["train"].features["label"].num_classes == 10  # GTZAN's fixed genre list
    assert ds["validation"].features["label"].int2str(ds["validation"]["label"][0]) == "jazz"
    assert ds["train"]["speaker_id"] == ["0", "1"]  # extra EVAR columns are kept
    assert_decodes_16k(ds["test"][0], 0.2)
    with pytest.raises(ValueError, match=r"Unknown label\(s\) \['blues', 'jazz', 'rock'\]"):
        data.load("cremad", root=audio_dir, metadata_csv=csv_path)  # not CREMA-D emotions


def test_surge_voxforge_labels_from_csv_and_errors(tmp_path):
    audio_dir, csv_path = write_evar_task(tmp_path, [("C4", "train"), ("A3", "test"), ("C4", "valid")])
    surge = data.load("surge", root=audio_dir, metadata_csv=csv_path)
    assert surge["train"].features["label"].names == ["A3", "C4"]
    vox = data.load("voxforge", root=audio_dir, metadata_csv=csv_path, label_names=["C4", "A3", "E5"])
    assert vox["test"]["label"] == [1]
    with pytest.raises(ValueError, match=r"\['A3'\]"):
        data.load("voxforge", root=audio_dir, metadata_csv=csv_path, label_names=["C4"])
    with pytest.raises(FileNotFoundError, match="EVAR metadata CSV for surge.*file_name,label,split"):
        data.load("surge", root=audio_dir, metadata_csv=tmp_path / "nope.csv")
    csv_path.write_text("file,label,split\nx.wav,C4,train\n")
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['file_name'\]"):
        data.load("surge", root=audio_dir, metadata_csv=csv_path)


def test_voxceleb1_iden_split(tmp_path):
    root = tmp_path / "vox1"
    lines = []
    for code, speaker, video in (
        (1, "id10001", "1zcIwhmdeo4"),
        (1, "id10002", "0_laIeN-Q44"),
        (2, "id10001", "7w0IBEWc9Qw"),
        (3, "id10002", "6WO410QOeuo"),
    ):
        rel = f"{speaker}/{video}/00001.wav"
        write_tone(str(root / "wav" / rel), seconds=0.2)
        lines.append(f"{code} {rel}")
    (root / "iden_split.txt").write_text("\n".join(lines) + "\n")
    ds = data.load("voxceleb1", root=root)
    assert {k: v.num_rows for k, v in ds.items()} == {"train": 2, "validation": 1, "test": 1}
    assert ds["train"].features["label"].names == ["id10001", "id10002"]
    assert ds["test"]["label"] == [1] and ds["validation"]["video_id"] == ["7w0IBEWc9Qw"]
    assert_decodes_16k(ds["validation"][0], 0.2)
    (root / "iden_split.txt").write_text("4 id10001/x/00001.wav\n")
    with pytest.raises(ValueError, match="line 1"):
        data.load("voxceleb1", root=root)


def test_audiofolder_and_unknown_name(tmp_path):
    for label in ("cat", "dog"):
        for i in range(2):
            write_tone(str(tmp_path / "folder" / label / f"{i}.wav"), seconds=0.1, sr=8000)
    ds = data.load("audiofolder", root=tmp_path / "folder")
    assert ds["train"].num_rows == 4 and ds["train"].features["label"].names == ["cat", "dog"]
    assert_decodes_16k(ds["train"][0], 0.1)
    with pytest.raises(ValueError, match="Unknown dataset 'esc-51'"):
        data.load("esc-51", root=tmp_path)


def test_every_dataset_record_has_its_loader_and_what_its_options_need():
    """Each record's loader is a public loader of `data.loaders` that takes the root first and the options the record
    fixes or asks for; `LOADERS` gives every name the loader with those options bound, as `load` calls it."""
    import inspect

    from aasp_hf.data import loaders
    from aasp_hf.data.loaders.dataset_records import DATASET_RECORDS, TASK_TYPES

    for name, record in DATASET_RECORDS.items():
        assert record.name == name and record.task_type in TASK_TYPES
        assert getattr(loaders, record.loader.__name__) is record.loader and record.loader.__name__ in loaders.__all__
        parameters = inspect.signature(record.loader).parameters
        assert next(iter(parameters)) == "root", name  # load() passes the root first
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        assert all(option in parameters or accepts_any for option in record.loader_options), name
        required = {p.name for p in parameters.values() if p.default is p.empty and p.kind is not p.VAR_KEYWORD}
        assert ("metadata_csv" in required) == record.needs_metadata_csv, name
        assert ("audio_dir" in parameters) == record.audio_dir_option, name
        assert all(isinstance(n, int) and n > 0 for n in record.official.values()), name
        for alias in record.names:
            bound = loaders.LOADERS[alias]
            assert getattr(bound, "func", bound) is record.loader
            assert getattr(bound, "keywords", {}) == dict(record.loader_options)


# ------------------------------------------------------------------------------------------------------
# Decode failures in training
# ------------------------------------------------------------------------------------------------------


def test_corrupt_clip_is_skipped_and_counted(esc50_root):
    (esc50_root / "audio" / "2-100-A-0.wav").write_bytes(np.random.default_rng(0).bytes(2000))
    train = data.load_esc50(esc50_root)["train"]
    decoder = SafeAudioDecoder()
    decoded = [decoder(example["audio"]) for example in for_safe_decoding(train)]
    assert decoder.num_failures == 1 and decoder.failures[0].endswith("2-100-A-0.wav")
    assert sum(d is None for d in decoded) == 1 and all(d.shape == (3200,) for d in decoded if d is not None)
    kept, dropped = filter_decodable(train)
    assert dropped == 1 and kept.num_rows == 14
