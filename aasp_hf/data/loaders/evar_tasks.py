# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""CREMA-D, GTZAN, VoxForge and Surge with EVAR/M2D split files, and VoxCeleb1 with iden_split.txt.

EVAR (https://github.com/nttcslab/eval-audio-repr) defines these splits in one metadata CSV per task
(`evar/metadata/<task>.csv`, made by its `evar/utils/make_metadata.py`): a header with at least
``file_name,label,split``, ``file_name`` relative to the task's audio folder and ``split`` one of
``train``/``valid``/``test``; extra columns (e.g. CREMA-D's ``speaker_id``) are kept as strings. We do not
ship these files: the user passes the CSV's path.
"""

import logging
from pathlib import Path

from datasets import ClassLabel, Value

from .layout import (
    audio_features,
    build_dataset_dict,
    check_audio_files,
    check_labels,
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
    "train": "train", "valid": "validation", "validation": "validation", "val": "validation", "test": "test"
}

# Label sets fixed by the datasets themselves; None = taken from the CSV (sorted).
KNOWN_LABELS = {
    "cremad": ["ANG", "DIS", "FEA", "HAP", "NEU", "SAD"],
    "gtzan": ["blues", "classical", "country", "disco", "hiphop", "jazz", "metal", "pop", "reggae", "rock"],
    "voxforge": None,
    "surge": None,  # 88 tone presets
}
# Split sizes of the paper's protocol (Sec. Datasets, following M2D): a mismatch is only a warning (a filtered copy).
EXPECTED_SIZES = {"cremad": (5155, 732, 1551), "gtzan": (443, 197, 290)}
VOXCELEB1_SOURCE = (
    "Download iden_split.txt from https://www.robots.ox.ac.uk/~vgg/data/voxceleb/vox1.html (Identification split: "
    "lines '<1|2|3> idXXXXX/<video>/<nnnnn>.wav'; 1 = train, 2 = validation, 3 = test)."
)


def load_evar_task(metadata_csv, audio_dir, *, task: str = None, label_names=None, streaming=False, num_shards=None):
    """Any EVAR-format task: {"train", "validation", "test"} from `metadata_csv` (file_name,label,split).

    `label_names` fixes the ClassLabel order and makes a label outside it a ValueError; by default the task's
    known label set (CREMA-D, GTZAN) or the sorted labels of the CSV.
    """
    what = f"EVAR metadata CSV{' for ' + task if task else ''}"
    metadata_csv = require_file(metadata_csv, what, EVAR_SOURCE)
    audio_dir = require_dir(audio_dir, f"audio folder{' for ' + task if task else ''}", "Pass the folder that "
                            "the CSV's file_name paths are relative to.")
    rows = read_csv_rows(metadata_csv, ["file_name", "label", "split"], what)
    bad_splits = sorted({r["split"] for r in rows} - set(_SPLIT_NAMES))
    if bad_splits:
        raise ValueError(f"{metadata_csv}: unknown split value(s) {bad_splits}; expected train, valid or test.")
    if label_names is None and task is not None:
        label_names = KNOWN_LABELS.get(task)
    if label_names is None:
        label_names = sorted({r["label"] for r in rows})
    check_labels({r["label"] for r in rows}, label_names, str(metadata_csv))
    extra = [c for c in rows[0] if c not in ("file_name", "label", "split")] if rows else []
    paths = [str(audio_dir / r["file_name"]) for r in rows]
    check_audio_files(paths, metadata_csv, audio_dir)

    label_index = {name: i for i, name in enumerate(label_names)}
    features = audio_features(label=ClassLabel(names=list(label_names)), file_name=Value("string"),
                              **{c: Value("string") for c in extra})
    splits = {}
    for split in ("train", "validation", "test"):
        chosen = [(p, r) for p, r in zip(paths, rows) if _SPLIT_NAMES[r["split"]] == split]
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


def load_cremad(root, metadata_csv, **kwargs):
    """CREMA-D, 6 emotions, EVAR speaker split (5155/732/1551): root = the AudioWAV folder."""
    return load_evar_task(metadata_csv, root, task="cremad", **kwargs)


def load_gtzan(root, metadata_csv, **kwargs):
    """GTZAN, 10 genres, fault-filtered split (443/197/290): root = the genres folder (file_name 'blues/...')."""
    return load_evar_task(metadata_csv, root, task="gtzan", **kwargs)


def load_voxforge(root, metadata_csv, **kwargs):
    """VoxForge, 6 languages, EVAR split: root = the folder the CSV's file_name paths are relative to."""
    return load_evar_task(metadata_csv, root, task="voxforge", **kwargs)


def load_surge(root, metadata_csv, **kwargs):
    """Surge synthesizer, 88 tone presets, EVAR tone split: root = the folder of the CSV's file_name paths."""
    return load_evar_task(metadata_csv, root, task="surge", **kwargs)


def load_voxceleb1(root, *, split_file=None, audio_dir=None, streaming=False, num_shards=None):
    """VoxCeleb1 identification (1,251 speakers): {"train", "validation", "test"} from iden_split.txt.

    `split_file` defaults to `root/iden_split.txt`; `audio_dir` (holding idXXXXX/<video>/<n>.wav) to `root/wav`
    if it exists, else `root`. label = speaker id (ClassLabel of the sorted ids); columns also video_id, path.
    """
    root = Path(root)
    split_file = require_file(split_file or root / "iden_split.txt", "VoxCeleb1 iden_split.txt", VOXCELEB1_SOURCE)
    if audio_dir is None:
        audio_dir = root / "wav" if (root / "wav").is_dir() else root
    audio_dir = Path(audio_dir)
    entries = []
    with open(split_file, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 2 or parts[0] not in ("1", "2", "3") or not parts[1].startswith("id"):
                raise ValueError(f"{split_file}, line {line_number}: expected '<1|2|3> idXXXXX/<video>/<n>.wav', "
                                 f"got {line.strip()!r}.")
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
