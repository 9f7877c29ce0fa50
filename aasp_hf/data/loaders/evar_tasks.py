# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""CREMA-D, GTZAN, VoxForge and Surge with EVAR/M2D split files, and VoxCeleb1 with iden_split.txt (or EVAR's CSV).

EVAR (https://github.com/nttcslab/eval-audio-repr) defines these splits in one metadata CSV per task
(`evar/metadata/<task>.csv`, shipped for CREMA-D and VoxForge, written by `evar/utils/make_metadata.py` for the
others), read here as EVAR's own dataset class (`WavDataset` in `evar/data.py`) reads it:

- columns: at least ``file_name,label,split``; ``file_name`` is relative to the task's audio folder. pandas'
  unnamed index column (header ``""``, or ``Unnamed: 0`` after a pandas round trip), which `make_metadata.py`
  writes for Surge (``df.to_csv(path)`` without ``index=None``), is dropped; other extra columns (CREMA-D's
  ``speaker_id``) are kept as strings.
- ``split``: ``train``, ``valid`` or ``test``. A row with an empty split belongs to no split and is left out, as
  EVAR's ``df[df.split == split]`` leaves it out; the loader logs how many. GTZAN's CSV has 70 such rows: its
  1,000 files, of which the fault-filtered lists keep 930. Any other value is an error.
- label order: ``sorted(df.label.unique())`` of the column as pandas parsed it, so numeric labels sort as numbers
  (Surge's MIDI pitches: 60 before 100, not "100" before "60"). EVAR takes the classes from the train split only;
  here they come from every row the splits use, which is the same set whenever train holds every class.
"""

import logging
from pathlib import Path

from datasets import ClassLabel, Value

from .layout import (
    audio_features,
    build_dataset_dict,
    check_audio_files,
    check_labels,
    default_audio_dir,
    is_index_column,
    numbers_as_numbers,
    read_csv_rows,
    require_dir,
    require_file,
)


logger = logging.getLogger(__name__)

EVAR_SOURCE = (
    "Pass the EVAR metadata CSV for this task (columns file_name,label,split; made by EVAR's "
    "evar/utils/make_metadata.py, see https://github.com/nttcslab/eval-audio-repr, or copied from evar/metadata/)."
)
_SPLIT_NAMES = {
    "train": "train",
    "valid": "validation",
    "validation": "validation",
    "val": "validation",
    "test": "test",
}

# Label sets fixed by the datasets themselves, in EVAR's (sorted) order; None = the labels of the CSV, ordered as
# EVAR orders them (`numbers_as_numbers`).
KNOWN_LABELS = {
    "cremad": ["ANG", "DIS", "FEA", "HAP", "NEU", "SAD"],
    "gtzan": ["blues", "classical", "country", "disco", "hiphop", "jazz", "metal", "pop", "reggae", "rock"],
    "voxforge": None,  # 6 languages
    "surge": None,  # 88 pitches (MIDI note numbers): the file stems
    "voxceleb1": None,  # 1,251 speaker ids
}
# Split sizes (train, validation, test) of the paper's protocol (Sec. Datasets, following M2D/EVAR): a mismatch is
# only a warning (a copy with clips missing).
EXPECTED_SIZES = {
    "cremad": (5155, 732, 1551),
    "gtzan": (443, 197, 290),
    "voxforge": (121281, 26684, 28463),
    "surge": (148896, 17160, 17336),
}
GTZAN_HINT = (
    "GTZAN: root must be the folder holding the 10 genre folders (genres/ in GTZAN's genres.tar.gz); the CSV names "
    "<genre>/<genre>.000NN.wav and the archive's <genre>/<genre>.000NN.au is read where the .wav is absent."
)
VOXCELEB1_SOURCE = (
    "Download iden_split.txt from https://www.robots.ox.ac.uk/~vgg/data/voxceleb/vox1.html (Identification split: "
    "lines '<1|2|3> idXXXXX/<video>/<nnnnn>.wav'; 1 = train, 2 = validation, 3 = test)."
)


def load_evar_task(
    metadata_csv, audio_dir, *, task: str = None, label_names=None, other_suffixes=(), streaming=False, num_shards=None
):
    """Any EVAR-format task: {"train", "validation", "test"} from `metadata_csv` (file_name,label,split).

    `label_names` fixes the ClassLabel order and makes a label outside it a ValueError; by default the task's
    known label set (CREMA-D, GTZAN) or the CSV's labels in EVAR's order (numbers by value, else strings sorted).
    `other_suffixes` (e.g. ``(".au",)``): where the file a row names is absent, the same path with one of these
    suffixes is read instead, if it exists.
    """
    what = f"EVAR metadata CSV{' for ' + task if task else ''}"
    metadata_csv = require_file(metadata_csv, what, EVAR_SOURCE)
    audio_dir = require_dir(
        audio_dir,
        f"audio folder{' for ' + task if task else ''}",
        "Pass the folder that the CSV's file_name paths are relative to.",
    )
    rows = read_csv_rows(metadata_csv, ["file_name", "label", "split"], what)
    bad_splits = sorted({r["split"].strip() for r in rows} - set(_SPLIT_NAMES) - {""})
    if bad_splits:
        raise ValueError(
            f"{metadata_csv}: unknown split value(s) {bad_splits}; expected train, valid or test "
            f"(or empty: a row outside every split)."
        )
    used = [r for r in rows if r["split"].strip()]
    if len(used) < len(rows):
        logger.info(
            f"{metadata_csv}: {len(rows) - len(used)} of {len(rows)} rows have no split and are left out "
            f"(EVAR leaves them out too); {len(used)} rows remain."
        )
    if label_names is None and task is not None:
        label_names = KNOWN_LABELS.get(task)
    if label_names is None:
        label_names = numbers_as_numbers(r["label"] for r in used)
    check_labels({r["label"] for r in used}, label_names, str(metadata_csv))
    header = rows[0] if rows else {}
    extra = [c for c in header if c not in ("file_name", "label", "split") and not is_index_column(c)]
    paths = [_existing(audio_dir / r["file_name"], other_suffixes) for r in used]
    check_audio_files(paths, metadata_csv, audio_dir)

    label_index = {name: i for i, name in enumerate(label_names)}
    features = audio_features(
        label=ClassLabel(names=list(label_names)), file_name=Value("string"), **{c: Value("string") for c in extra}
    )
    splits = {}
    for split in ("train", "validation", "test"):
        chosen = [(p, r) for p, r in zip(paths, used) if _SPLIT_NAMES[r["split"].strip()] == split]
        splits[split] = {
            "audio": [p for p, _ in chosen],
            "label": [label_index[r["label"]] for _, r in chosen],
            "file_name": [r["file_name"] for _, r in chosen],
            **{c: [r[c] for _, r in chosen] for c in extra},
        }
    sizes = tuple(len(splits[s]["audio"]) for s in ("train", "validation", "test"))
    if task in EXPECTED_SIZES and sizes != EXPECTED_SIZES[task]:
        logger.warning(f"{task}: split sizes {sizes} differ from the paper's protocol {EXPECTED_SIZES[task]}.")
    return build_dataset_dict(splits, features, streaming, num_shards)


def _existing(path: Path, other_suffixes) -> str:
    """`path`, or the first of its `other_suffixes` variants that exists where `path` does not (one stat if found)."""
    if other_suffixes and not path.is_file():
        for suffix in other_suffixes:
            if path.with_suffix(suffix).is_file():
                return str(path.with_suffix(suffix))
    return str(path)


def load_cremad(root, metadata_csv, **kwargs):
    """CREMA-D, 6 emotions, EVAR speaker split (5155/732/1551 of 7,438 clips): root = the AudioWAV folder.

    EVAR ships the CSV (evar/metadata/cremad.csv: file_name,label,speaker_id,split)."""
    return load_evar_task(metadata_csv, root, task="cremad", **kwargs)


def load_gtzan(root, metadata_csv, **kwargs):
    """GTZAN, 10 genres, fault-filtered split (443/197/290 of 1,000 clips): root = the genres folder.

    EVAR's gtzan.csv lists all 1,000 files as ``<genre>/<genre>.000NN.wav``; the 70 outside the filtered lists have
    an empty split and are left out (logged). Where only GTZAN's own ``.au`` file exists (the archive's format; EVAR
    converts to .wav first), the ``.au`` is read: the same audio, decoded by torchcodec and by `SafeAudioDecoder`.
    """
    kwargs.setdefault("other_suffixes", (".au",))
    try:
        return load_evar_task(metadata_csv, root, task="gtzan", **kwargs)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{error} {GTZAN_HINT}") from None


def load_voxforge(root, metadata_csv, **kwargs):
    """VoxForge, 6 languages, EVAR split (121,281/26,684/28,463): root = the folder of the CSV's file_name paths.

    EVAR ships the CSV (evar/metadata/voxforge.csv)."""
    return load_evar_task(metadata_csv, root, task="voxforge", **kwargs)


def load_surge(root, metadata_csv, **kwargs):
    """Surge synthesizer pitch task: 88 classes, the pitches (MIDI note numbers, the file stems of
    ``<tone>/<pitch>.ogg``), and EVAR's split by tone preset (2,084 tones: 1,692/195/197, so 148,896/17,160/17,336
    clips), so that no tone is in two splits: root = the folder holding the tone folders.

    EVAR's make_metadata.py writes surge.csv with pandas' index as its first column, which is dropped; the pitches
    order as numbers, as in EVAR."""
    return load_evar_task(metadata_csv, root, task="surge", **kwargs)


def load_voxceleb1(root, *, split_file=None, audio_dir=None, metadata_csv=None, streaming=False, num_shards=None):
    """VoxCeleb1 identification (153,516 clips of 1,251 speakers): {"train", "validation", "test"} from
    iden_split.txt.

    `split_file` defaults to `root/iden_split.txt`; `audio_dir` (holding idXXXXX/<video>/<n>.wav) to `root/wav`
    if it exists, else `root`. label = speaker id (ClassLabel of the sorted ids); columns also video_id, path.
    With `metadata_csv=` EVAR's vc1.csv (made by its make_metadata.py from the same iden_split.txt: file_name
    ``wav/idXXXXX/<video>/<n>.wav`` relative to root, label = the speaker id, split) is read instead, with the same
    splits and labels; its columns are label and file_name.
    """
    if metadata_csv is not None:
        if split_file is not None or audio_dir is not None:
            raise ValueError(
                "load_voxceleb1: give metadata_csv= (EVAR's vc1.csv, paths relative to root) or "
                "split_file=/audio_dir= (iden_split.txt), not both."
            )
        return load_evar_task(metadata_csv, root, task="voxceleb1", streaming=streaming, num_shards=num_shards)
    root = Path(root)
    split_file = require_file(split_file or root / "iden_split.txt", "VoxCeleb1 iden_split.txt", VOXCELEB1_SOURCE)
    audio_dir = default_audio_dir(root, audio_dir, "wav")
    entries = []
    with open(split_file, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2 or parts[0] not in ("1", "2", "3") or not parts[1].startswith("id"):
                raise ValueError(
                    f"{split_file}, line {line_number}: expected '<1|2|3> idXXXXX/<video>/<n>.wav', "
                    f"got {line.strip()!r}."
                )
            entries.append((int(parts[0]), parts[1]))
    paths = [str(audio_dir / p) for _, p in entries]
    check_audio_files(paths, split_file, audio_dir)
    speakers = sorted({p.split("/")[0] for _, p in entries})
    speaker_index = {s: i for i, s in enumerate(speakers)}
    features = audio_features(label=ClassLabel(names=speakers), video_id=Value("string"), path=Value("string"))
    splits = {}
    for code, split in ((1, "train"), (2, "validation"), (3, "test")):
        chosen = [(a, p) for a, (c, p) in zip(paths, entries) if c == code]
        splits[split] = {
            "audio": [a for a, _ in chosen],
            "label": [speaker_index[p.split("/")[0]] for _, p in chosen],
            "video_id": [p.split("/")[1] for _, p in chosen],
            "path": [p for _, p in chosen],
        }
    return build_dataset_dict(splits, features, streaming, num_shards)
