# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The files of an audiofolder split, `root/<split>/<label>/<file>`, listed without `datasets`: paths, label indices
and class names, a fixed class-balanced subset when asked (`list_audiofolder`). The frozen-feature probe of
pre-training (`aasp_hf.evaluation.probes.FrozenFeatureProbe`) reads its clips through it.
"""

from pathlib import Path

import numpy as np

# The suffixes a folder is searched for (here, by `aasp_hf.data.check`, by the AudioSet loader and by `aasp_hf.tag`):
# the formats torchcodec (FFmpeg) and libsndfile decode. A file named explicitly is read whatever its suffix.
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".au", ".aif", ".aiff")


def list_audiofolder(root, split: str, max_clips: int | None = None, classes: list[str] | None = None):
    """Files of an audiofolder split `root/split/<label>/<file>` -> (paths, labels as indices into `classes`,
    classes). `classes` defaults to the sorted label folders of the split; files of other labels are left out.
    With `max_clips`, the files are taken round-robin over the classes in sorted file order (balanced, fixed).
    """
    split_dir = Path(root) / split
    if not split_dir.is_dir():
        raise ValueError(f"{split_dir} is not a folder: the probe dataset needs {root}/{{train,test}}/<label>/*.wav")
    folders = {p.name: p for p in sorted(split_dir.iterdir()) if p.is_dir()}
    classes = sorted(folders) if classes is None else list(classes)
    per_class = [
        sorted(f for f in folders[name].rglob("*") if f.suffix.lower() in AUDIO_EXTENSIONS) if name in folders else []
        for name in classes
    ]
    paths, labels = [], []
    for rank in range(max((len(files) for files in per_class), default=0)):
        for label, files in enumerate(per_class):
            if rank < len(files) and (max_clips is None or len(paths) < max_clips):
                paths.append(files[rank])
                labels.append(label)
    return paths, np.asarray(labels, dtype=np.int64), classes


__all__ = ["AUDIO_EXTENSIONS", "list_audiofolder"]
