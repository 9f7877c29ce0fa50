# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Files written whole or not at all: what every script writes that a rerun reads back.

Each writer writes into a temporary sibling (`<name>.tmp`), flushes it to the disk (`fsync`) and renames it into
place with `os.replace`, which is atomic: a reader, or a rerun after a crash, a stop signal or a full disk, finds the
old file or the new one, never a part of one. A write that fails removes the temporary file and raises an `OSError`
that names the file (`entry_points.run_script` prints a refused write as one line).

- `write_text_atomically`: results, run records, `latest` and checkpoint manifests (`training.checkpointing`).
- `save_array_atomically`: a numpy array in `.npy` format (linear evaluation's feature cache).
"""

import errno
import os
from pathlib import Path

import numpy as np


def write_atomically(path, write, mode: str = "w"):
    """Calls `write(file)` on a temporary sibling of `path` opened with `mode`, then moves it to `path`. numpy's
    `tofile` reports a write cut short without an errno ("N requested and M written"); a write to a regular file is
    cut short when the disk is full, so it is raised as ENOSPC, naming `path`."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        if error.errno is None or error.filename is None:  # name the file, for the one-line error
            raise OSError(
                error.errno or errno.ENOSPC, error.strerror or os.strerror(errno.ENOSPC), str(path)
            ) from error
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomically(path, text: str):
    """Writes `text` to `path` (see the module docstring)."""
    write_atomically(path, lambda f: f.write(text))


def save_array_atomically(path, array: np.ndarray):
    """`np.save(path, array)`, written whole or not at all (see the module docstring)."""
    write_atomically(path, lambda f: np.save(f, array), mode="wb")
