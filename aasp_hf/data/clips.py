# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Clips for pre-training: waveforms read from any source, map-style or streamed, with failed clips skipped.

- `AudioClips`: a map-style dataset of mono float32 16-kHz waveforms from a list of arrays or a `datasets.Dataset`
  with an Audio column; a clip that cannot be decoded comes back as a `FailedClip` (its file and what was wrong).
- `AudioStream`: a streamed `datasets` dataset (IterableDataset), each process reading its own shard in
  micro-batches decoded in DataLoader workers, with a position that a checkpoint saves and a resumed run restores.
- `load_clips(data_args, ...)`: either of the two from examples/pretrain.py's data arguments (`--synthetic_clips`,
  `--dataset`, `--train_dir`, `--train_manifest` (a fairseq manifest) or `--dataset_name`, `--streaming`).
- `decode_clip`, `replace_failed`, `FailureLog`: one row to {"waveform", "index"} or a `FailedClip`; a micro-batch's
  failed clips replaced by copies of decoded ones; the failed clips named, the first few in the log and every one in
  a file.
- `CollatedMicroBatches`, `AudioStream.finished_micro_batches`, `load_micro_batches`: finished micro-batches made in
  the DataLoader workers (read, decode, replace the failed clips, collate from per-clip seeds), handed to the training
  process in order, pinned for the copy to the GPU; `finish_micro_batch` is one worker's share of one.
"""

import collections
import itertools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..utils.errors import UsageError
from .decoding import SAMPLING_RATE, _describe, decode_audio, for_safe_decoding, short_reason
from .synthetic import unlabelled_clips


logger = logging.getLogger(__name__)

# The reason a `FailedClip` gives for a file its data source lists that is not on disk (a fairseq manifest's clip of a
# video taken down, a folder moved): counted apart from the clips that are there but fail to decode.
MISSING_FILE = "no such file: listed in the data source but not on disk"

# A loader worker keeps a reference to its last few micro-batches after handing them over. A micro-batch travels in
# shared memory, whose pages are freed by whichever process lets go of it last: the training process, holding its
# micro-batch through the step, would otherwise be last, and freeing the ~40 MB of a paper-preset micro-batch cost
# it ~6 ms of system time, 8 % of a predicted step. Worker w has at most 2 (the DataLoader's prefetch) micro-batches
# beyond those the training process has taken from it, so by its 4th next one, the training process has let go.
KEPT_BY_WORKER = 4


@dataclass
class FailedClip:
    """A clip that could not be used: its `index` (row, or "epoch:number" in a stream), `source` (its file, or a
    description of what was passed) and `reason` (the decoder's error, in words)."""

    index: object
    source: str
    reason: str


class AudioClips(torch.utils.data.Dataset):
    """Mono float32 waveforms at 16 kHz from a list of arrays or a `datasets.Dataset` with an Audio column.

    A clip that fails to decode comes back as a `FailedClip` (named, counted and replaced in the loop), never as an
    exception.
    """

    def __init__(self, source, audio_column: str = "audio"):
        self.source = source
        self.audio_column = audio_column

    def __len__(self):
        return len(self.source)

    def __getitem__(self, index):
        try:
            item = self.source[index]  # with datasets' Audio(decode=True) a corrupt file raises here
        except Exception as error:  # noqa: BLE001 - any decoding failure skips the clip
            return self._failed_row(index, error)
        return decode_clip(item, self.audio_column, index)

    def _failed_row(self, index, error) -> FailedClip:
        """The row read without decoding its audio, to name its file; our decoder then says what is wrong with it."""
        try:
            if getattr(self, "_undecoded", None) is None:  # made at the first failure, then kept
                from datasets import Audio

                feature = Audio(sampling_rate=SAMPLING_RATE, decode=False)
                self._undecoded = self.source.cast_column(self.audio_column, feature)
            cell = self._undecoded[index][self.audio_column]
        except Exception:  # noqa: BLE001 - not a datasets row after all: name what is known
            return FailedClip(index, f"row {index}", f"{type(error).__name__}: {error}")
        failure = decode_clip({self.audio_column: cell}, self.audio_column, index)
        if isinstance(failure, FailedClip):
            return failure
        return FailedClip(index, _describe(cell), short_reason(error))


def decode_clip(item, audio_column: str, index):
    """{"waveform": float32 (samples,), "index": index} from an array or a dataset row, or a `FailedClip` saying why
    not: it cannot be decoded, is empty or holds NaN/inf (the loop names and counts it and replaces it by another
    clip of its micro-batch)."""
    try:
        if isinstance(item, np.ndarray):
            waveform = torch.from_numpy(item.astype(np.float32, copy=False))
        else:
            waveform = torch.from_numpy(decode_audio(item[audio_column], SAMPLING_RATE))
        if waveform.numel() == 0:
            raise ValueError("it decodes to 0 samples")
        if not torch.isfinite(waveform).all():
            raise ValueError(
                f"{int((~torch.isfinite(waveform)).sum())} of its {waveform.numel()} samples are NaN or infinite"
            )
        return {"waveform": waveform, "index": index}
    except Exception as error:  # noqa: BLE001 - any decoding failure skips the clip
        source = f"array {index}" if isinstance(item, np.ndarray) else _source_of(item, audio_column)
        if _is_missing_file(item, audio_column):
            return FailedClip(index, source, MISSING_FILE)
        return FailedClip(index, source, str(error) if type(error) is ValueError else short_reason(error))


def _is_missing_file(item, audio_column: str) -> bool:
    """Whether the row's audio is a path alone (no bytes) to no file: asked only once decoding failed, so a clip that
    decodes costs no extra look-up."""
    try:
        cell = item[audio_column]
    except Exception:  # noqa: BLE001 - an array, or a row without the column
        return False
    path = cell.get("path") if isinstance(cell, dict) and not cell.get("bytes") else cell
    return isinstance(path, (str, os.PathLike)) and not os.path.exists(path)


def _source_of(item, audio_column: str) -> str:
    try:
        return _describe(item[audio_column])
    except Exception:  # noqa: BLE001 - a row without the column: its repr, shortened
        return repr(item)[:200]


class AudioStream:
    """A streamed `datasets` dataset (IterableDataset) for pre-training, decoded in DataLoader workers.

    Each process reads its own shard (`split_dataset_by_node`), reshuffled every epoch (shard order and a buffer of
    `buffer_size` examples, seeded with seed + epoch by `datasets`), in micro-batches of `batch_size` (an incomplete
    last one is dropped). Shards may differ in length, so each process counts its own epochs. `position` (epoch and
    micro-batches taken in it) is saved with every checkpoint; `--resume` restores it and skips to exactly there.

    With `num_workers` > 0, worker w of W decodes (and, through `finished_micro_batches`, collates) micro-batches
    w, w + W, w + 2W, ... of that order (its shard of the micro-batches), and the DataLoader hands them back in turn,
    so the micro-batches, their order and the position are the same for any number of workers (0: made in the main
    process). Every worker reads the rows of the whole
    shard to keep that order, which is cheap for files (a row is a path) and for rows that carry their audio bytes
    costs W reads of them (a stream from the Hub is read W times).
    """

    def __init__(
        self, dataset, audio_column, batch_size, num_processes, process_index, seed, buffer_size, num_workers: int = 0
    ):
        from datasets.distributed import split_dataset_by_node

        shard = split_dataset_by_node(
            for_safe_decoding(dataset, audio_column), rank=process_index, world_size=num_processes
        )  # rows carry their file ({"path", "bytes"})
        self.shard = shard.shuffle(seed=seed, buffer_size=buffer_size)
        self.audio_column, self.batch_size, self.num_workers = audio_column, batch_size, num_workers
        self.position = {"epoch": 0, "micro_batches": 0}

    def micro_batches(self):
        """Yields (epoch, list of `batch_size` decoded examples) from `position` on, forever; `position` follows
        what has been yielded (not what the workers decoded ahead)."""
        micro_batches = StreamMicroBatches(self.shard, self.audio_column, self.batch_size, dict(self.position))
        # its own generator: creating an iterator must not draw from the global RNG (exact resume mid-epoch)
        loader = torch.utils.data.DataLoader(
            micro_batches,
            batch_size=None,
            collate_fn=_as_is,
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(0),
            worker_init_fn=leave_stop_signals_to_the_training_process,
        )
        for epoch, examples, position in loader:
            self.position = position
            yield epoch, examples

    def finished_micro_batches(self, collate, seeds, pin_memory: bool = False):
        """Yields finished micro-batches (`finish_micro_batch`'s dicts) from `position` on, forever, made in the
        `num_workers` DataLoader workers: `seeds(epoch, numbers)` gives the seeds of the clips numbered `numbers` in
        this process's shard of epoch `epoch`, and `collate(examples, seeds)` makes the batch. `position` follows what
        has been yielded."""
        micro_batches = StreamMicroBatches(
            self.shard, self.audio_column, self.batch_size, dict(self.position), collate=collate, seeds=seeds
        )
        for item in load_micro_batches(micro_batches, self.num_workers, pin_memory):
            self.position = item["position"]
            yield item


def _as_is(item):
    return item


def finish_micro_batch(examples, seeds, collate, epoch, position=None, earlier=()) -> dict:
    """What a loader worker makes of one micro-batch: its failed clips replaced (`replace_failed`, from `earlier` when
    every clip failed), then `collate(examples, seeds)` (the seeds by place in the micro-batch, as the training loop
    paired them before).

    Returns {"batch": the collated tensors, "epoch", "indices": the clips' indices (the run's data checksum),
    "failed": the `FailedClip`s (the training process's `FailureLog` names and counts them), "position": a stream's
    position after this micro-batch (None for a map-style dataset)}."""
    examples, failed = replace_failed(examples, earlier)
    return {
        "batch": collate(examples, seeds),
        "epoch": epoch,
        "indices": [e["index"] for e in examples],
        "failed": failed,
        "position": position,
    }


class CollatedMicroBatches(torch.utils.data.IterableDataset):
    """Finished micro-batches of a map-style dataset (`AudioClips`, `LogMelCache`), made in DataLoader workers.

    `order()` iterates over this process's micro-batches in training order as (epoch, row numbers, per-clip seeds)
    (examples/pretrain.py: `training.data_order.clip_order`, `micro_batches` over the row numbers with each clip's
    `clip_seed`).
    Worker w of W reads, decodes and collates micro-batches w, w + W, w + 2W, ... of it (`finish_micro_batch` with
    `collate`), and the DataLoader hands them back in turn: the same micro-batches in the same order for any number
    of workers (0: made in the training process). Every worker walks the whole order, which costs one permutation of
    the row numbers per epoch.
    """

    def __init__(self, dataset, order, collate):
        self.dataset, self.order, self.collate = dataset, order, collate

    def __iter__(self):
        num_workers, worker = _worker()
        kept = _kept_by_worker()
        earlier = []  # the decoded clips of this worker's last micro-batch that had any
        for count, (epoch, rows, seeds) in enumerate(self.order()):
            if count % num_workers == worker:
                examples = [self.dataset[row] for row in rows]
                kept.append(finish_micro_batch(examples, seeds, self.collate, epoch, earlier=earlier))
                earlier = decoded(examples) or earlier
                yield kept[-1]


def leave_stop_signals_to_the_training_process(worker_id: int = 0):
    """A DataLoader `worker_init_fn`: a worker leaves SIGINT, SIGUSR1 and SIGTERM to the training process, which stops
    at a step boundary and saves (`aasp_hf.training.stopping`), then shuts its workers down itself. Ctrl-C in a
    terminal and a cluster's signals reach every process of the group, workers included: torch's worker handler ends
    a worker on any SIGTERM not sent by its parent, and the training process then failed on its next batch.

    SIGINT and SIGUSR1 are ignored. SIGTERM is blocked and read by a thread (`sigwaitinfo`, which tells the sender):
    from the training process (torch's shutdown of its workers) or once that process is gone, the worker exits as
    torch's own handler would (`os._exit(0)`); from anyone else it is ignored."""
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    parent = os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # every thread started from here on blocks it too

    def wait_for_sigterm():
        while True:
            sender = signal.sigwaitinfo({signal.SIGTERM}).si_pid
            if sender == parent or os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=wait_for_sigterm, daemon=True, name="sigterm").start()


def load_micro_batches(micro_batches, num_workers: int, pin_memory: bool = False):
    """The items of `micro_batches` (an IterableDataset of finished micro-batches) made in `num_workers` DataLoader
    workers, in order; with `pin_memory` (a CUDA run) their tensors arrive in page-locked memory, so the copy to the
    GPU runs without stalling the training process."""
    # its own generator: creating an iterator must not draw from the global RNG (exact resume mid-epoch)
    return iter(
        torch.utils.data.DataLoader(
            micro_batches,
            batch_size=None,
            collate_fn=_as_is,
            num_workers=num_workers,
            pin_memory=pin_memory,
            generator=torch.Generator().manual_seed(0),
            worker_init_fn=leave_stop_signals_to_the_training_process,
        )
    )


def _kept_by_worker() -> collections.deque:
    """Where a DataLoader worker keeps its last `KEPT_BY_WORKER` micro-batches (in the main process: none)."""
    return collections.deque(maxlen=KEPT_BY_WORKER if torch.utils.data.get_worker_info() is not None else 1)


def _worker() -> tuple[int, int]:
    """(number of DataLoader workers, this one's id); (1, 0) in the main process."""
    info = torch.utils.data.get_worker_info()
    return (1, 0) if info is None else (info.num_workers, info.id)


class StreamMicroBatches(torch.utils.data.IterableDataset):
    """The micro-batches of a stream's shard from `position` on, as (epoch, decoded examples, position after it), or
    with `collate` and `seeds` as finished micro-batches (`finish_micro_batch`; `seeds(epoch, numbers)` gives the
    seeds of the clips numbered `numbers` in the shard's epoch); in DataLoader worker w of W, only micro-batches
    w, w + W, ... counted from `position` (see `AudioStream`)."""

    def __init__(self, shard, audio_column: str, batch_size: int, position: dict, collate=None, seeds=None):
        self.shard, self.audio_column, self.batch_size, self.position = shard, audio_column, batch_size, position
        self.collate, self.seeds = collate, seeds

    def __iter__(self):
        num_workers, worker = _worker()
        kept = _kept_by_worker()
        epoch, taken = self.position["epoch"], self.position["micro_batches"]
        count = 0  # micro-batches read since `position`, by every worker alike
        earlier = []  # the decoded clips of this worker's last micro-batch that had any
        while True:
            self.shard.set_epoch(epoch)
            # .iter(batch_size=1) rather than iter(shard): in a DataLoader worker, datasets' own __iter__ would hand
            # this worker only some of the shard's files. Skipped rows (a resume) are read past, not decoded, and not
            # with IterableDataset.skip, which turns off the per-epoch shard-order shuffle.
            rows = ({key: values[0] for key, values in batch.items()} for batch in self.shard.iter(batch_size=1))
            rows = itertools.islice(enumerate(rows), taken * self.batch_size, None)
            for group in iter(lambda: list(itertools.islice(rows, self.batch_size)), []):
                if len(group) < self.batch_size:  # the incomplete last micro-batch of the epoch is dropped
                    break
                taken, count = taken + 1, count + 1
                if (count - 1) % num_workers == worker:
                    examples = [decode_clip(row, self.audio_column, index=f"{epoch}:{number}") for number, row in group]
                    position = {"epoch": epoch, "micro_batches": taken}
                    if self.collate is None:
                        yield epoch, examples, position
                    else:
                        seeds = self.seeds(epoch, [number for number, _ in group])
                        kept.append(finish_micro_batch(examples, seeds, self.collate, epoch, position, earlier))
                        earlier = decoded(examples) or earlier
                        yield kept[-1]
            if taken == 0:
                raise ValueError(f"this process's shard of the stream cannot fill one micro-batch of {self.batch_size}")
            epoch, taken = epoch + 1, 0


def check_audio_folder(folder) -> None:
    """A UsageError for a `--train_dir` that does not exist, is not a folder or holds no audio file (the extensions
    `datasets`' audiofolder reads), instead of `datasets`' traceback."""
    from datasets.packaged_modules.audiofolder.audiofolder import AudioFolder

    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"--train_dir {folder} {'is not a folder' if folder.exists() else 'does not exist'}")
    extensions = {extension.lower() for extension in AudioFolder.EXTENSIONS}
    if not any(path.suffix.lower() in extensions for path in folder.rglob("*") if path.is_file()):
        common = ", ".join(e for e in (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4v") if e in extensions)
        raise UsageError(f"no audio files found under {folder} (looked for {common}, … in all its subfolders)")


def load_clips(data_args, seed: int, batch_size: int, num_processes: int, process_index: int):
    """`AudioClips` (map-style) of `--synthetic_clips`, `--dataset`, `--train_dir`, `--train_manifest` or
    `--dataset_name`; with `--streaming` the same sources read as an `AudioStream` of this process's shard. `data_args`
    is examples/pretrain.py's `DataArguments` (or any object with its fields; `train_manifest` may be absent)."""
    sources = [
        f"--{name}"
        for name in ("dataset", "train_dir", "train_manifest", "dataset_name")
        if getattr(data_args, name, None) is not None
    ]
    sources += ["--synthetic_clips"] if data_args.synthetic_clips > 0 else []
    if len(sources) > 1:
        raise UsageError(f"give one data source, got {', '.join(sources)}")
    if data_args.streaming and data_args.synthetic_clips > 0:
        raise UsageError(
            "--streaming reads --dataset, --train_dir, --train_manifest or --dataset_name, not --synthetic_clips"
        )
    if data_args.synthetic_clips > 0:
        return AudioClips(unlabelled_clips(data_args.synthetic_clips, seed, data_args.synthetic_seconds))
    import datasets  # here, as the loaders: synthetic clips are arrays in memory and need no datasets

    from .loaders import load, load_fairseq_manifest

    if data_args.dataset is not None:
        splits = load(data_args.dataset, root=data_args.data_root, streaming=data_args.streaming)
        if data_args.dataset_split not in splits:
            raise UsageError(
                f"--dataset {data_args.dataset} has the splits {sorted(splits)}, not "
                f"--dataset_split {data_args.dataset_split!r}"
            )
        ds, audio_column = splits[data_args.dataset_split], "audio"  # our loaders: a 16 kHz `audio` column
    elif getattr(data_args, "train_manifest", None) is not None:  # the manifest is the split: no --dataset_split
        ds, audio_column = load_fairseq_manifest(data_args.train_manifest, streaming=data_args.streaming), "audio"
    else:
        if data_args.train_dir is not None:
            check_audio_folder(data_args.train_dir)
            ds = datasets.load_dataset(
                "audiofolder",
                data_dir=data_args.train_dir,
                drop_labels=True,
                split=data_args.dataset_split,
                streaming=data_args.streaming,
            )
        elif data_args.dataset_name is not None:
            ds = datasets.load_dataset(
                data_args.dataset_name,
                data_args.dataset_config,
                split=data_args.dataset_split,
                streaming=data_args.streaming,
            )
        else:
            raise UsageError(
                "give one of --dataset (with --data_root), --train_dir, --train_manifest, --dataset_name "
                "or --synthetic_clips N"
            )
        audio_column = data_args.audio_column
    if data_args.streaming:
        return AudioStream(
            ds,
            audio_column,
            batch_size,
            num_processes,
            process_index,
            seed,
            data_args.shuffle_buffer_size,
            data_args.dataloader_num_workers,
        )
    # rows carry their file ({"path", "bytes"}) and `decode_audio` decodes it: datasets' own decoding would open
    # every file with torchcodec (~40 ms each), which soundfile reads in a fraction of that
    return AudioClips(for_safe_decoding(ds, audio_column), audio_column)


def decoded(examples) -> list:
    """The examples of a micro-batch that decoded (not a `FailedClip`, not None)."""
    return [e for e in examples if not (e is None or isinstance(e, FailedClip))]


def replace_failed(examples, earlier=()):
    """Clips that failed to decode (`FailedClip`s, or None) are replaced by copies of decoded ones from the same
    micro-batch, so every process keeps the same batch shape (the gathered contrastive loss needs it). A micro-batch
    where every clip failed takes copies of `earlier` (the decoded clips of an earlier micro-batch of this worker):
    its failures are counted like any others, so a folder that vanishes mid-run stops at the next step where
    ``--max_failed_clip_share`` is judged, with a checkpoint, rather than with a traceback. With no `earlier` clip
    either (the first micro-batch), a RuntimeError. Returns (examples, the failures replaced)."""
    failed = [e for e in examples if e is None or isinstance(e, FailedClip)]
    good = decoded(examples)
    copied = good or list(earlier)
    if not copied:
        named = "; ".join(str(f.source) for f in failed if f is not None)[:500]
        raise RuntimeError(
            f"none of the {len(examples)} clips of a micro-batch could be decoded" + (f": {named}" if named else "")
        )
    return good + [copied[i % len(copied)] for i in range(len(failed))], failed


class FailureLog:
    """Names the clips that failed, each file once (per process): the first `max_logged` files as warnings, and every
    one as a line `source<TAB>reason` appended to `path` (created at the first failure; several processes append to
    one file).

    A file that fails in several micro-batches (a small folder is read every few steps) is one failed file: report
    `num_files` (this process) or `failed_files()` (every process, from the shared file), not `count`.

    Attributes:
        count (`int`): failures seen, repeats included (events, not files).
        num_files (`int`): distinct files that failed in this process.
    """

    def __init__(self, path, max_logged: int = 5):
        self.path, self.max_logged = Path(path), max_logged
        self.count, self._written = 0, set()

    @property
    def num_files(self) -> int:
        return len(self._written)

    def failed_files(self) -> int:
        """Distinct files listed in `path` by every process that appends to it (call it once they all have)."""
        return len(self._listed())

    def missing_files(self) -> int:
        """Of `failed_files()`, those that were not on disk (`MISSING_FILE`)."""
        return sum(reason == MISSING_FILE for reason in self._listed().values())

    def _listed(self) -> dict:
        """{file: reason} of every line of `path`."""
        if not self.path.is_file():
            return {}
        return dict(line.split("\t", 1) for line in self.path.read_text().splitlines() if "\t" in line)

    def __call__(self, failures):
        for failure in failures:
            self.count += 1
            source = getattr(failure, "source", "<unknown clip>")
            reason = " ".join(getattr(failure, "reason", "failed to decode").split()).rstrip(".")  # one line
            if source in self._written:  # named already (a small folder fails in every few micro-batches)
                continue
            self._written.add(source)
            if self.num_files <= self.max_logged:
                more = " (the first few are logged; all are listed there)" if self.num_files == self.max_logged else ""
                logger.warning(f"skipped a clip that failed to decode: {source}: {reason}; listed in {self.path}{more}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as file:
                file.write(f"{source}\t{reason}\n")
