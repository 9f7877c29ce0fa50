# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Dataset loaders for the paper's evaluation protocols (Sec. Datasets: AS-2M/AS-20K and nine single-label tasks,
with the official or M2D/EVAR splits), one module per dataset (`layout` holds what they share), and sound events with
strong labels (DCASE's tables, DESED).

`load(name, root=..., **kwargs)` returns a `datasets.DatasetDict` with a 16 kHz `audio` column, a `ClassLabel`
`label` (AudioSet: `labels`, a sequence of 527 ClassLabels) and the protocol's fold/split columns, built from
paths and metadata only. Names: as20k (audioset), as2m, esc50, us8k, scv2, nsynth, cremad, gtzan, voxforge, surge,
voxceleb1, sound_events (or desed; its records carry `events`, each an onset, offset and label, instead of `label`),
audiofolder: one `DatasetRecord` each in `dataset_records`, which `data.check` and `data.protocol` read too; any
other name is passed to `load_audio_dataset` (a Hub id or local path).
See docs/datasets.md. `load_fairseq_manifest(path)` reads a fairseq manifest (`.tsv`) of unlabelled clips for
pre-training (examples/pretrain.py --train_manifest; docs/pretraining.md).
"""

from functools import partial

from ...utils.errors import UsageError
from .audio_dataset import load_audio_dataset, load_audiofolder
from .audioset import load_audioset
from .dataset_records import DATASET_RECORDS, DatasetRecord, find_record, known_names
from .esc50 import load_esc50
from .evar_tasks import load_cremad, load_evar_task, load_gtzan, load_surge, load_voxceleb1, load_voxforge
from .fairseq_manifest import load_fairseq_manifest, read_fairseq_manifest
from .nsynth import load_nsynth
from .sound_events import load_sound_events
from .speech_commands import load_speech_commands
from .urbansound8k import load_urbansound8k

# {name or alias: loader(root, **options)} of every record (`dataset_records`), with the options a name fixes bound
# (`LOADERS["as2m"]` loads AS-2M, not the loader's default variant)
LOADERS = {
    name: partial(record.loader, **record.loader_options) if record.loader_options else record.loader
    for record in DATASET_RECORDS.values()
    for name in record.names
}


def load(name: str, root=None, **kwargs):
    """One call per dataset: `load("esc50", root="/data/ESC-50-master")`.

    `name` is a name or alias of a record of `DATASET_RECORDS` (any case, "-" or "_": "ESC-50", "as20k"/"as2m" for
    the AudioSet variants, "audiofolder" with root = a folder of class sub-folders), or a Hub dataset id / local
    dataset path given to `load_audio_dataset`. Keyword arguments go to the loader (e.g. `test_fold=1`,
    `metadata_csv=...`, `streaming=True`), after the options the name fixes (`variant="as2m"`), which they override.
    """
    record = find_record(name)
    if record is not None:
        return record.loader(_require_root(name, root), **{**record.loader_options, **kwargs})
    if root is not None:
        raise ValueError(
            f"Unknown dataset {name!r} with root={root!r}: known names are {known_names()} (any case, '-' or '_')."
        )
    return load_audio_dataset(name, **kwargs)


def _require_root(name, root):
    if root is None:  # a UsageError: the scripts say it in one line (their --data_root is this root=)
        raise UsageError(
            f"load({name!r}) needs root= the dataset's folder in its official layout (the scripts' --data_root)."
        )
    return root


__all__ = [
    "DATASET_RECORDS",
    "LOADERS",
    "DatasetRecord",
    "find_record",
    "load",
    "load_audio_dataset",
    "load_audiofolder",
    "load_audioset",
    "load_cremad",
    "load_esc50",
    "load_evar_task",
    "load_fairseq_manifest",
    "load_gtzan",
    "load_nsynth",
    "load_sound_events",
    "load_speech_commands",
    "load_surge",
    "load_urbansound8k",
    "load_voxceleb1",
    "load_voxforge",
    "read_fairseq_manifest",
]
