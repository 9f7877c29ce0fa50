# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Clips for pre-training: waveforms read from any source, map-style or streamed, with failed clips skipped.

- `AudioClips`: a map-style dataset of mono float32 16-kHz waveforms from a list of arrays or a `datasets.Dataset`
  with an Audio column; a clip that cannot be decoded comes back as None.
- `AudioStream`: a streamed `datasets` dataset (IterableDataset), each process reading its own shard in
  micro-batches, with a position that a checkpoint saves and a resumed run restores.
- `load_clips(data_args, ...)`: either of the two from examples/pretrain.py's data arguments (`--synthetic_clips`,
  `--dataset`, `--train_dir` or `--dataset_name`, `--streaming`).
- `decode_clip`, `replace_failed`: one row to {"waveform", "index"} or None; a micro-batch's failed clips replaced
  by copies of decoded ones.
"""

import itertools

import numpy as np
import torch

from ._common import SAMPLING_RATE
from .decoding import decode_audio


class AudioClips(torch.utils.data.Dataset):
    """Mono float32 waveforms at 16 kHz from a list of arrays or a `datasets.Dataset` with an Audio column.

    A clip that fails to decode comes back as None (counted and replaced in the loop), never as an exception.
    """

    def __init__(self, source, audio_column: str = "audio"):
        self.source = source
        self.audio_column = audio_column

    def __len__(self):
        return len(self.source)

    def __getitem__(self, index):
        try:
            item = self.source[index]  # with datasets' Audio(decode=True) a corrupt file raises here
        except Exception:  # noqa: BLE001 - any decoding failure skips the clip
            return None
        return decode_clip(item, self.audio_column, index)


def decode_clip(item, audio_column: str, index):
    """{"waveform": float32 (samples,), "index": index} from an array or a dataset row, or None if it cannot be
    decoded, is empty or holds NaN/inf (the loop counts it and replaces it by another clip of its micro-batch)."""
    try:
        if isinstance(item, np.ndarray):
            waveform = torch.from_numpy(item.astype(np.float32, copy=False))
        else:
            waveform = torch.from_numpy(decode_audio(item[audio_column], SAMPLING_RATE))
        if waveform.numel() == 0 or not torch.isfinite(waveform).all():
            raise ValueError(f"bad clip: {waveform.numel()} samples")
        return {"waveform": waveform, "index": index}
    except Exception:  # noqa: BLE001 - any decoding failure skips the clip
        return None


class AudioStream:
    """A streamed `datasets` dataset (IterableDataset) for pre-training, read in the main process.

    Each process reads its own shard (`split_dataset_by_node`), reshuffled every epoch (shard order and a buffer of
    `buffer_size` examples, seeded with seed + epoch by `datasets`), in micro-batches of `batch_size` (an incomplete
    last one is dropped). Shards may differ in length, so each process counts its own epochs. `position` (epoch and
    micro-batches taken in it) is saved with every checkpoint; `--resume` restores it and skips to exactly there.
    """

    def __init__(self, dataset, audio_column, batch_size, num_processes, process_index, seed, buffer_size):
        from datasets.distributed import split_dataset_by_node

        shard = split_dataset_by_node(dataset, rank=process_index, world_size=num_processes)
        self.shard = shard.shuffle(seed=seed, buffer_size=buffer_size)
        self.audio_column, self.batch_size = audio_column, batch_size
        self.position = {"epoch": 0, "micro_batches": 0}

    def micro_batches(self):
        """Yields (epoch, list of `batch_size` examples) from `position` on, forever."""
        while True:
            epoch, taken = self.position["epoch"], self.position["micro_batches"]
            self.shard.set_epoch(epoch)
            examples = []
            # skipped by reading past them, not with IterableDataset.skip, which turns off the per-epoch shard-order
            # shuffle and would not replay the uninterrupted order; skipped clips are not decoded
            for number, item in itertools.islice(enumerate(self.shard), taken * self.batch_size, None):
                examples.append(decode_clip(item, self.audio_column, index=f"{epoch}:{number}"))
                if len(examples) == self.batch_size:
                    taken += 1
                    self.position = {"epoch": epoch, "micro_batches": taken}
                    yield epoch, examples
                    examples = []
            if taken == 0:
                raise ValueError(f"this process's shard of the stream cannot fill one micro-batch of {self.batch_size}")
            self.position = {"epoch": epoch + 1, "micro_batches": 0}


def load_clips(data_args, seed: int, batch_size: int, num_processes: int, process_index: int):
    """`AudioClips` (map-style) of `--synthetic_clips`, `--dataset`, `--train_dir` or `--dataset_name`; with
    `--streaming` the same sources read as an `AudioStream` of this process's shard. `data_args` is examples/
    pretrain.py's `DataArguments` (or any object with its fields)."""
    sources = [f"--{name}" for name in ("dataset", "train_dir", "dataset_name") if getattr(data_args, name) is not None]
    sources += ["--synthetic_clips"] if data_args.synthetic_clips > 0 else []
    if len(sources) > 1:
        raise ValueError(f"give one data source, got {', '.join(sources)}")
    if data_args.streaming and data_args.synthetic_clips > 0:
        raise ValueError("--streaming reads --dataset, --train_dir or --dataset_name, not --synthetic_clips")
    if data_args.streaming and data_args.dataloader_num_workers:
        raise ValueError("--streaming decodes in the main process: leave --dataloader_num_workers at 0")
    if data_args.synthetic_clips > 0:
        from .synthetic import unlabelled_clips

        return AudioClips(unlabelled_clips(data_args.synthetic_clips, seed, data_args.synthetic_seconds))
    import datasets

    if data_args.dataset is not None:
        from . import load

        splits = load(data_args.dataset, root=data_args.data_root, streaming=data_args.streaming)
        if data_args.dataset_split not in splits:
            raise ValueError(f"--dataset {data_args.dataset} has the splits {sorted(splits)}, not "
                             f"--dataset_split {data_args.dataset_split!r}")
        ds, audio_column = splits[data_args.dataset_split], "audio"  # our loaders: a 16 kHz `audio` column
    else:
        if data_args.train_dir is not None:
            ds = datasets.load_dataset("audiofolder", data_dir=data_args.train_dir, drop_labels=True,
                                       split=data_args.dataset_split, streaming=data_args.streaming)
        elif data_args.dataset_name is not None:
            ds = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config,
                                       split=data_args.dataset_split, streaming=data_args.streaming)
        else:
            raise ValueError(
                "give one of --dataset (with --data_root), --train_dir, --dataset_name or --synthetic_clips N"
            )
        audio_column = data_args.audio_column
        ds = ds.cast_column(audio_column, datasets.Audio(sampling_rate=SAMPLING_RATE))
    if data_args.streaming:
        return AudioStream(ds, audio_column, batch_size, num_processes, process_index, seed,
                           data_args.shuffle_buffer_size)
    return AudioClips(ds, audio_column)


def replace_failed(examples):
    """Clips that failed to decode are replaced by copies of decoded ones from the same micro-batch, so every process
    keeps the same batch shape (the gathered contrastive loss needs it). Returns (examples, number replaced)."""
    good = [e for e in examples if e is not None]
    if not good:
        raise RuntimeError(f"none of the {len(examples)} clips of a micro-batch could be decoded")
    failed = len(examples) - len(good)
    return good + [good[i % len(good)] for i in range(failed)], failed
