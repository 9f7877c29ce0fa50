# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""One record per dataset that `load` knows by name: its loader and the options it fixes, its other names, the
EVAR task it is and that task's published clip length, the official clip counts, where its clips lie, and the kind
of task.

The loaders' `load`, `python -m aasp_hf.data.check` and the downstream protocol (`data.protocol`) all read
`DATASET_RECORDS` through `find_record`, so that a name means one dataset to all three: an alias that the loader
accepted while the protocol did not know it used to fall back to the measured mean clip length instead of the
published one. Adding a dataset is its loader module and one record here.

A name is found whatever its case and whatever "-" and "_" it has ("ESC-50", "esc_50" and "esc50" are one name),
which covers both earlier spellings of a name: with "-" read as "_" (the loaders', data.check's) and with "-"
dropped (the protocol's).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .audio_dataset import load_audiofolder
from .audioset import load_audioset
from .esc50 import load_esc50
from .evar_tasks import load_cremad, load_gtzan, load_surge, load_voxceleb1, load_voxforge
from .nsynth import load_nsynth
from .sound_events import load_sound_events
from .speech_commands import load_speech_commands
from .urbansound8k import load_urbansound8k

# single-label: one `label` per clip; multi-label: `labels` (AudioSet's 527); sound events: recordings whose
# `events` each carry an onset, an offset and a label, for a classifier with one output per frame
TASK_TYPES = ("single-label", "multi-label", "sound events")


@dataclass(frozen=True, eq=False)  # one object per dataset: equal only to itself
class DatasetRecord:
    """What the package knows of one dataset, read by the loaders, `data.check` and `data.protocol`.

    Attributes:
        name: the name `data.check` reports it under (and `load`'s first choice of name).
        loader: `loader(root, **loader_options, **options)` returns the `DatasetDict`.
        task: the EVAR task key, which results name; two datasets that are one task share it (AS-20K and AS-2M
            are both "audioset").
        task_type: one of `TASK_TYPES`.
        clip_seconds: the clip length that fine-tuning and linear evaluation crop or pad each clip to: EVAR's
            `unit_sec` of the task (for a variable-length task, EVAR's mean clip length); None where none is
            published (an audiofolder of the user's own clips: the protocol measures the mean length).
        aliases: other names of the dataset; a name is matched whatever its case, "-" and "_".
        loader_options: options the name fixes (AudioSet's `variant`); the caller's options override them.
        official: the official clips per split ("fold <k>" and "all" for a K-fold dataset; AudioSet: the segments
            its CSVs list), which `data.check` shows beside a copy's; docs/datasets.md gives the source of each.
        audio_dir: the folder under the root that holds the clips ("" the root itself; None: no folder, the files
            are the metadata), which `data.check` walks for files that no split names.
        audio_dir_option: the loader takes `audio_dir=`, and without it reads the root when `audio_dir` is not
            there (`layout.default_audio_dir`); otherwise the clips are always in `audio_dir`.
        unread_folders: folders under `audio_dir` that hold audio which no split reads (SCV2's background noise),
            so that `data.check` does not count their files as left out.
        needs_metadata_csv: the loader needs `metadata_csv=` (EVAR's CSV), which `data.check` asks for up front.
    """

    name: str
    loader: Callable
    task: str
    task_type: str
    clip_seconds: float | None
    aliases: tuple[str, ...] = ()
    loader_options: Mapping = field(default_factory=dict)
    official: Mapping = field(default_factory=dict)
    audio_dir: str | None = ""
    audio_dir_option: bool = False
    unread_folders: tuple[str, ...] = ()
    needs_metadata_csv: bool = False

    def __post_init__(self):
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"{self.name}: task_type={self.task_type!r}, not one of {TASK_TYPES}.")
        # read-only views, so that no caller changes the one record everybody reads
        object.__setattr__(self, "loader_options", MappingProxyType(dict(self.loader_options)))
        object.__setattr__(self, "official", MappingProxyType(dict(self.official)))

    @property
    def names(self) -> tuple[str, ...]:
        """The name and the aliases."""
        return (self.name, *self.aliases)


# Official clips per fold of UrbanSound8K, counted in metadata/UrbanSound8K.csv as released.
US8K_FOLDS = (873, 888, 925, 990, 936, 823, 838, 806, 816, 837)
# EVAR clip lengths are `unit_sec` of `_defs` in EVAR's evar/ds_tasks.py (the paper's linear evaluation follows EVAR,
# Sec. Training Setup). Official counts: AudioSet's are the `num_segs` of its CSVs' header lines; the others as
# docs/datasets.md ("Checking a prepared copy") gives them.
_RECORDS = (
    DatasetRecord(
        "as20k",
        load_audioset,
        task="audioset",
        task_type="multi-label",
        clip_seconds=10.0,
        aliases=("audioset",),  # the loader's default variant
        loader_options={"variant": "as20k"},
        official={"train": 22_160, "test": 20_371},
        audio_dir="audio",
        audio_dir_option=True,
    ),
    DatasetRecord(
        "as2m",
        load_audioset,
        task="audioset",
        task_type="multi-label",
        clip_seconds=10.0,
        loader_options={"variant": "as2m"},
        official={"train": 22_160 + 2_041_789, "test": 20_371},
        audio_dir="audio",
        audio_dir_option=True,
    ),
    DatasetRecord(
        "esc50",
        load_esc50,
        task="esc50",
        task_type="single-label",
        clip_seconds=5.0,
        official={**{f"fold {k}": 400 for k in range(1, 6)}, "all": 2_000},
        audio_dir="audio",
    ),
    DatasetRecord(
        "us8k",
        load_urbansound8k,
        task="us8k",
        task_type="single-label",
        clip_seconds=4.0,
        aliases=("urbansound8k",),
        official={**{f"fold {k}": n for k, n in enumerate(US8K_FOLDS, start=1)}, "all": 8_732},
        audio_dir="audio",
    ),
    DatasetRecord(
        "scv2",
        load_speech_commands,
        task="scv2",
        task_type="single-label",
        clip_seconds=1.0,
        aliases=("speech_commands",),
        official={"train": 84_843, "validation": 9_981, "test": 11_005},
        unread_folders=("_background_noise_",),
    ),
    DatasetRecord(
        "nsynth",
        load_nsynth,
        task="nsynth",
        task_type="single-label",
        clip_seconds=4.0,
        official={"train": 289_205, "validation": 12_678, "test": 4_096},
    ),
    DatasetRecord(
        "cremad",
        load_cremad,
        task="cremad",
        task_type="single-label",
        clip_seconds=2.5,
        official={"train": 5_155, "validation": 732, "test": 1_551},
        needs_metadata_csv=True,
    ),
    DatasetRecord(
        "gtzan",
        load_gtzan,
        task="gtzan",
        task_type="single-label",
        clip_seconds=30.0,
        official={"train": 443, "validation": 197, "test": 290},
        needs_metadata_csv=True,
    ),
    DatasetRecord(
        "voxforge",
        load_voxforge,
        task="voxforge",
        task_type="single-label",
        clip_seconds=5.8,
        official={"train": 121_281, "validation": 26_684, "test": 28_463},
        needs_metadata_csv=True,
    ),
    DatasetRecord(
        "surge",
        load_surge,
        task="surge",
        task_type="single-label",
        clip_seconds=4.0,
        official={"train": 148_896, "validation": 17_160, "test": 17_336},
        needs_metadata_csv=True,
    ),
    DatasetRecord(
        "voxceleb1",
        load_voxceleb1,
        task="voxceleb1",
        task_type="single-label",
        clip_seconds=8.2,  # EVAR's: the mean length of VoxCeleb1's clips
        aliases=("voxceleb",),
        official={"train": 138_361, "validation": 6_904, "test": 8_251},
        audio_dir="wav",
        audio_dir_option=True,
    ),
    DatasetRecord(
        "sound_events",
        load_sound_events,
        task="sound_events",
        task_type="sound events",
        # not an EVAR task: the training window cut from each recording, 10 s as DCASE task 4's clips (DESED_task's
        # recipes: `audio_max_len: 10`); longer recordings give a random window per step, shorter ones are padded.
        clip_seconds=10.0,
        aliases=("desed",),
        official={},  # its splits are the user's tables or the DESED sets chosen: docs/datasets.md gives DESED's
    ),
    DatasetRecord(
        "audiofolder",
        load_audiofolder,
        task="audiofolder",
        task_type="single-label",
        clip_seconds=None,
        audio_dir=None,
    ),
)
# the one registry: {name: record}; read through `DATASET_RECORDS` and `find_record`
_REGISTRY = {record.name: record for record in _RECORDS}
DATASET_RECORDS = MappingProxyType(_REGISTRY)


def name_key(name: str) -> str:
    """`name` as records are matched: lower case, without "-" and "_"."""
    return name.lower().replace("-", "").replace("_", "")


def _by_key() -> dict:
    """{name_key(name or alias): record} of the registry. A ValueError when two records answer to one name (the name
    would mean whichever came last), when a record's task key is not a name of a record of that task (the protocol
    finds a task's clip length by its key), or when two records of one task give it different clip lengths or types."""
    found = {}
    for record in DATASET_RECORDS.values():
        for name in record.names:
            other = found.setdefault(name_key(name), record)
            if other is not record:
                raise ValueError(f"the dataset name {name!r} is both {other.name!r} and {record.name!r}.")
    for record in DATASET_RECORDS.values():
        by_task = found.get(name_key(record.task))
        if by_task is None or by_task.task != record.task:
            raise ValueError(f"{record.name}'s task {record.task!r} is not a name of a dataset of that task.")
        if (by_task.clip_seconds, by_task.task_type) != (record.clip_seconds, record.task_type):
            raise ValueError(
                f"{record.name} and {by_task.name} are task {record.task!r} with different clip lengths or task types."
            )
    return found


_by_key()  # a registry that breaks those rules fails on import, not on the first look-up of a name


def find_record(name: str) -> DatasetRecord | None:
    """The record of a dataset name, alias or task key (any case, "-" or "_"), or None for a name no record has (a
    Hub id or a local dataset path, for `load`). The index is built from the registry on each call (a dozen
    records), so that it cannot differ from the records."""
    return _by_key().get(name_key(name))


def known_names() -> list[str]:
    """Every name and alias of the records, sorted, for messages that list them."""
    return sorted(name for record in DATASET_RECORDS.values() for name in record.names)
