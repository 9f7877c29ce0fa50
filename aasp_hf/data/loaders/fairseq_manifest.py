# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""A fairseq audio manifest, the file wav2vec 2.0, data2vec 2.0, EAT and BEATs pre-train from, read for pre-training.

The format, as fairseq's `FileAudioDataset` reads it and examples/wav2vec/wav2vec_manifest.py writes it: a text file
(`train.tsv`) whose first line is the root folder and each further line `relative/path<TAB>num_samples`, the path
joined to the root (an absolute path stands alone; a relative root is taken from the working folder, as fairseq does)
and `num_samples` the clip's length in samples at the file's own rate. Here, as there, each line is stripped of the
white space around it and split at its tabs into exactly two fields, so a path may hold spaces but not a tab. A line
that is blank is passed over (fairseq would stop on it); any other line that is not `path<TAB>whole number` is an
error naming the file and the line.

`num_samples` is kept as a column and read by `--plan` (the clips' total and mean length without decoding them); the
training loop does not filter or batch by it (fairseq's `--min_sample_size` / bucketing): every listed clip is read,
decoded and cropped as any other source's. A listed file that is missing on disk is not checked here (2M stats on a
network file system take minutes): training counts and skips it as it does a clip that fails to decode.
Not supported: fairseq's `path:offset:length` slices of a zip file, and EAT's `.h5` containers.
"""

import os
from pathlib import Path

from datasets import Dataset, Value

from ...utils.errors import UsageError
from .layout import audio_features


FORMAT = "a fairseq manifest: the root folder on line 1, then one `relative/path<TAB>num_samples` line per clip"


def read_fairseq_manifest(path) -> tuple[str, list[tuple[int, str, int]]]:
    """(root folder, [(line number, path as listed, num_samples), ...]) of the manifest at `path`, or a `UsageError`
    of one line that names the file and the line: the file is missing, empty or not UTF-8 text, its first line is a
    clip rather than a folder, the root folder does not exist, a line is not `path<TAB>num_samples`, or it lists no
    clip."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"fairseq manifest {path} {'is not a file' if path.exists() else 'does not exist'}")
    entries = []
    try:
        with open(path, encoding="utf-8") as file:  # text mode: \n, \r\n and \r end a line, as in fairseq
            first = file.readline()
            if not first:
                raise UsageError(f"fairseq manifest {path} is empty; expected {FORMAT}")
            root = first.strip()
            if not root or _as_entry(root) is not None:
                raise UsageError(
                    f"{path}, line 1: {root!r} is not a folder; expected {FORMAT} (as fairseq's "
                    f"wav2vec_manifest.py writes it)"
                )
            for number, line in enumerate(file, start=2):
                if not line.strip():
                    continue
                entry = _as_entry(line.strip())
                if entry is None:
                    raise UsageError(
                        f"{path}, line {number}: {_shorten(line.strip())!r} is not "
                        f"`relative/path<TAB>num_samples` ({_what_is_wrong(line.strip())})"
                    )
                entries.append((number, *entry))
    except UnicodeDecodeError as error:
        raise UsageError(f"fairseq manifest {path} is not UTF-8 text (byte {error.start}: {error.reason})") from None
    if not os.path.isdir(root):
        raise UsageError(f"{path}, line 1: the root folder {root} does not exist{_relative_to_cwd(root)}")
    if not entries:
        raise UsageError(f"fairseq manifest {path} lists no clips (only its root folder {root}); expected {FORMAT}")
    return root, entries


def load_fairseq_manifest(path, *, streaming: bool = False, num_shards=None):
    """A `datasets.Dataset` of the manifest's clips, in its order: `audio` (16 kHz `Audio`, the root joined to each
    path; the file is read when a row is decoded) and `num_samples` (as listed). No audio is read and no file is
    checked. With `streaming`, the same rows as an IterableDataset of `num_shards` shards (default min(64, clips))."""
    root, entries = read_fairseq_manifest(path)
    dataset = Dataset.from_dict(
        {
            "audio": [os.path.join(root, listed) for _, listed, _ in entries],
            "num_samples": [num_samples for _, _, num_samples in entries],
        },
        features=audio_features(num_samples=Value("int64")),
    )
    if streaming:
        return dataset.to_iterable_dataset(num_shards=max(1, min(num_shards or 64, len(dataset))))
    return dataset


def _as_entry(line: str) -> tuple[str, int] | None:
    """(path, num_samples) of a stripped line `path<TAB>num_samples`, or None."""
    fields = line.split("\t")
    count = fields[-1].strip()
    if len(fields) != 2 or not fields[0] or not (count.isascii() and count.isdigit()):
        return None
    return fields[0], int(count)


def _what_is_wrong(line: str) -> str:
    fields = line.split("\t")
    if len(fields) == 1:
        return "no tab; fields separated by spaces?" if " " in line else "no tab and no num_samples"
    if len(fields) > 2:
        return f"{len(fields)} tab-separated fields, not 2"
    if not fields[0]:
        return "the path is empty"
    return f"num_samples {fields[1]!r} is not a whole number"


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _relative_to_cwd(root: str) -> str:
    return "" if os.path.isabs(root) else f" (a relative root is taken from the working folder, {os.getcwd()})"
