"""The order in which the training scripts read a map-style dataset: a pure function of the seed and of the number
of micro-batches already consumed, the same on every process, so that `--resume` continues exactly where the
uninterrupted run would be.

Each epoch is a seeded permutation of the rows (`epoch_order`, seed · 100003 + epoch), or the draws of a sampler
such as `aasp_hf.data.ClassBalancedSampler` reseeded per epoch. Global micro-batch g of an epoch is positions
[g·B·W, (g+1)·B·W) of that order, process r taking its r-th slice of B rows (W processes); the incomplete last global
batch is dropped (`micro_batches`).

The random draws of a clip (its crop, its masks and queries, the student's equaliser) come from a generator seeded
by the clip's place in that order (`clip_seed`: seed, epoch, position), not from a stream per process: a global
micro-batch of B·W clips then gets the same crops and masks whether W processes read B clips each or one process
reads all B·W, so a run resumed on another number of processes (with the per-device batch that keeps B·W) trains
on the same global batches as the uninterrupted run.
"""

import numpy as np
import torch
from torch.utils.data import DataLoader

from ..data.clips import leave_stop_signals_to_the_training_process


def epoch_order(num_rows: int, seed: int, epoch: int, sampler=None) -> torch.Tensor:
    """Row indices of epoch `epoch`: a seeded permutation of `num_rows`, or the sampler's draws (its
    `set_epoch(seed · 100003 + epoch)`). The same on every process."""
    if sampler is not None:
        sampler.set_epoch(seed * 100_003 + epoch)
        return torch.tensor(list(iter(sampler)), dtype=torch.long)
    return torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))


def clip_seed(seed: int, epoch: int, position: int) -> int:
    """The seed of the random draws of the clip at `position` of epoch `epoch`'s order (a 64-bit integer for
    `torch.Generator.manual_seed`): a function of where the clip sits in the global order, the same whichever process
    reads it. numpy's SeedSequence hashes the three numbers, so neighbouring positions get unrelated streams."""
    return int(np.random.SeedSequence([seed, epoch, position]).generate_state(1, np.uint64)[0])


def micro_batches(
    rows,
    batch_size: int,
    num_processes: int,
    process_index: int,
    seed: int,
    start: int = 0,
    num_workers: int = 0,
    sampler=None,
    with_positions: bool = False,
):
    """Yields (epoch, list of `batch_size` rows) for process `process_index`, from global micro-batch `start` on,
    forever; with `with_positions`, (epoch, rows, their positions in the epoch's order) — what `clip_seed` takes.
    `rows` is indexable (a list or a map-style dataset, read through a DataLoader with `num_workers`)."""
    per_epoch_draws = len(sampler) if sampler is not None else len(rows)
    per_epoch = per_epoch_draws // (batch_size * num_processes)
    if per_epoch == 0:
        raise ValueError(f"{per_epoch_draws} clips cannot fill one global batch of {batch_size}x{num_processes}")
    epoch, offset = divmod(start, per_epoch)
    while True:
        order = epoch_order(len(rows), seed, epoch, sampler)[: per_epoch * batch_size * num_processes]
        order = order.reshape(per_epoch, num_processes, batch_size)[offset:, process_index]  # (G, W, B) -> (G', B)
        # its own generator: creating an iterator must not draw from the global RNG (exact resume mid-epoch)
        loader = DataLoader(
            rows,
            batch_sampler=order.tolist(),
            collate_fn=list,
            num_workers=num_workers,
            generator=torch.Generator().manual_seed(seed * 100_003 + epoch),
            worker_init_fn=leave_stop_signals_to_the_training_process,
        )
        for g, examples in enumerate(loader, start=offset):
            if with_positions:  # global micro-batch g of the epoch: positions g·B·W + r·B + [0, B)
                first = (g * num_processes + process_index) * batch_size
                yield epoch, examples, list(range(first, first + batch_size))
            else:
                yield epoch, examples
        epoch, offset = epoch + 1, 0


def clip_order(num_rows: int, batch_size: int, world: int, rank: int, seed: int, start: int):
    """(epoch, row numbers, clip seeds) of this process's micro-batches from global micro-batch `start` on: the data
    order (`micro_batches` over the row numbers) and each clip's `clip_seed`; what the loader workers read and
    collate (`aasp_hf.data.clips.CollatedMicroBatches`) in examples/pretrain.py and `--plan_measure`."""
    order = micro_batches(range(num_rows), batch_size, world, rank, seed, start=start, with_positions=True)
    for epoch, rows, positions in order:
        yield epoch, rows, [clip_seed(seed, epoch, p) for p in positions]


def stream_clip_seeds(seed: int, world: int, rank: int, epoch: int, numbers) -> list[int]:
    """The seeds of a stream's clips: clip `number` of this process's shard in epoch `epoch` is place number·W + r
    of that epoch (the W shards interleaved), seeded by `clip_seed` as a map-style clip by its position."""
    return [clip_seed(seed, epoch, number * world + rank) for number in numbers]
