"""The data side of a pre-training plan, measured on this host: `time_data_path` times a loader worker's decoding and
collating as training does them, `time_training_process` the training process's CPU time per micro-batch (receiving
the workers' finished micro-batches), and `data_path_plan` turns that into the DataLoader workers and cores the
predicted step needs and the training process's share of the step."""

import copy
import dataclasses
import hashlib
import itertools
import math
import os
import tempfile
import time
from functools import partial

import torch

from ..data.cache import LogMelCache
from ..data.clips import AudioStream, CollatedMicroBatches, FailureLog, load_clips, load_micro_batches, replace_failed
from ..data.collators import PretrainingCollator
from ..data.synthetic import unlabelled_clips
from ..feature_extraction_aasp import AaspFeatureExtractor
from ..training.data_order import clip_seed, stream_clip_seeds
from .estimate import RunPlan
from .report import _duration


def time_data_path(clips, collator, num_clips: int, batch_size: int, on_device: bool = False) -> dict:
    """Times a loader worker's work as training does it, in this process on one torch thread (what a DataLoader
    worker runs on): `clips` (an `aasp_hf.data.clips.AudioClips` or a `LogMelCache`, rows read in order and cycled,
    or an `AudioStream`, whose own micro-batches are read) decoded, failed clips replaced, then cropped, featurised
    and masked by `collator` from per-clip seeds (`PretrainingCollator.collate_seeded`; with `on_device`, the log-mel
    being the accelerator's, all but the log-mel: `draw_seeded`), in micro-batches of `batch_size`, until
    `num_clips` clips are done. One micro-batch is run first, untimed (imports, first calls).

    Returns {"clips", "decode_seconds", "collate_seconds", "failed"}, the seconds in CPU time of this process
    (`time.process_time`: what the work costs a core of its own, also when other processes share this host's
    cores), and the wall-clock seconds as "decode_wall_seconds", "collate_wall_seconds".
    """

    if isinstance(clips, AudioStream):
        batches = (examples for _, examples in clips.micro_batches())
    else:
        rows = itertools.cycle(range(len(clips)))
        batches = ([clips[next(rows)] for _ in range(batch_size)] for _ in itertools.count())
    positions = itertools.count()
    seeded = collator.draw_seeded if on_device else collator.collate_seeded
    collate = lambda examples: seeded(examples, [clip_seed(0, 0, next(positions)) for _ in examples])  # noqa: E731
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        collate(replace_failed(next(batches))[0])  # warm-up
        done, failed, cpu, wall = 0, 0, [0.0, 0.0], [0.0, 0.0]  # [decode, collate]
        while done < num_clips:
            cpu_start, wall_start = time.process_time(), time.perf_counter()
            examples, failures = replace_failed(next(batches))
            cpu_middle, wall_middle = time.process_time(), time.perf_counter()
            collate(examples)
            cpu = [cpu[0] + cpu_middle - cpu_start, cpu[1] + time.process_time() - cpu_middle]
            wall = [wall[0] + wall_middle - wall_start, wall[1] + time.perf_counter() - wall_middle]
            done, failed = done + len(examples), failed + len(failures)
    finally:
        torch.set_num_threads(threads)
    return {
        "clips": done,
        "decode_seconds": cpu[0],
        "collate_seconds": cpu[1],
        "decode_wall_seconds": wall[0],
        "collate_wall_seconds": wall[1],
        "failed": failed,
    }


def time_training_process(clips, collator, num_micro_batches: int, batch_size: int, on_device: bool) -> dict:
    """The training process's CPU time per micro-batch as training spends it: finished micro-batches made by one
    DataLoader worker (`CollatedMicroBatches` over the rows of `clips` cycled in micro-batches of `batch_size`, or
    the stream's own micro-batches through `finished_micro_batches`), received in this process (pinned when CUDA is
    available), their failed clips named (`FailureLog`, into a temporary file), their indices hashed,
    `collator.finish` (with `on_device` on CUDA: the log-mel launched on the GPU; without a GPU it is left out, and
    `finish_timed` says so) and the copy to the device.
    One micro-batch is received first, untimed (the worker's start). `time.process_time` counts this process only
    (its threads, the pin-memory thread included), not the worker.

    Returns {"micro_batches", "seconds" (CPU), "wall_seconds", "finish_timed", "pinned"}."""
    cuda = torch.cuda.is_available()
    device = torch.device("cuda") if cuda else torch.device("cpu")
    collate = collator.draw_seeded if on_device else collator.collate_seeded
    if isinstance(clips, AudioStream):
        clips.num_workers = 1
        items = clips.finished_micro_batches(collate, partial(stream_clip_seeds, 0, 1, 0), pin_memory=cuda)
    else:
        order = partial(_cycled_order, len(clips), batch_size)
        items = load_micro_batches(CollatedMicroBatches(clips, order, collate), 1, pin_memory=cuda)
    finisher = copy.copy(collator)  # the training process's: its log-mel on the GPU with `on_device`
    finisher.device = device if on_device and cuda else None
    finish_timed = cuda or not on_device
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as folder:
        failure_log = FailureLog(os.path.join(folder, "decode_failures.txt"))
        next(items)  # the worker's start and first micro-batch
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        for _ in range(num_micro_batches):
            item = next(items)
            failure_log(item["failed"])
            digest.update(str(item["indices"]).encode())
            batch = item["batch"]
            if finish_timed:
                batch = finisher.finish(batch)
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        if cuda:
            torch.cuda.synchronize()
        cpu, wall = time.process_time() - cpu_start, time.perf_counter() - wall_start
    return {
        "micro_batches": num_micro_batches,
        "seconds": cpu,
        "wall_seconds": wall,
        "finish_timed": finish_timed,
        "pinned": cuda,
    }


def _cycled_order(num_rows: int, batch_size: int):
    """(epoch 0, rows, seeds) of micro-batches of `batch_size` rows taken in order and cycled, so that a few clips
    fill a micro-batch of the run's size; each clip seeded by its place."""
    rows, positions = itertools.cycle(range(num_rows)), itertools.count()
    while True:
        yield 0, [next(rows) for _ in range(batch_size)], [clip_seed(0, 0, next(positions)) for _ in range(batch_size)]


def data_path_plan(plan: RunPlan, config, data_args, num_clips: int, seed: int = 0) -> tuple[str, dict]:
    """The data side of a pre-training plan, measured on this host: `time_data_path` on the run's data source
    (`data_args`: examples/pretrain.py's, read with `aasp_hf.data.clips.load_clips` as training reads it, decoded in
    this process) or, with none given, synthetic 10-s clips written as 16-bit 16-kHz WAV files to a temporary folder
    and read as `--train_dir` reads them. A `--train_manifest` is timed on its first listed clips (a listed file missing
    on disk counts among the failed), and its `num_samples` give the lengths of all its clips without decoding them
    (`manifest_lengths`). A `--log_mel_cache` is read as training reads it (nothing decoded).

    The path timed is the run's own: the loader workers decode and collate whole micro-batches (with
    `--features_on_device` all but the log-mel), timed as one worker's per-clip cost; the training process receives
    them (`time_training_process`), timed per micro-batch and scaled to the step's clips, and compared with the
    predicted step time (the target: at most 10 % of it). Returns (the lines to print, the figures)."""

    batch_size = max(1, min(plan.per_device_batch, 32, num_clips))
    feature_extractor = AaspFeatureExtractor(feature_size=config.num_mel_bins)
    collator = PretrainingCollator(
        feature_extractor,
        config,
        crop_seconds=data_args.crop_seconds,
        generator=torch.Generator().manual_seed(seed),
        student_eq_strength=data_args.student_eq_strength,
    )
    on_device = getattr(data_args, "features_on_device", False)
    cache = getattr(data_args, "log_mel_cache", None)
    sources = [
        name
        for name in ("dataset", "train_dir", "train_manifest", "dataset_name")
        if getattr(data_args, name, None) is not None
    ]
    with tempfile.TemporaryDirectory() as folder:
        if cache is not None:
            read, what = None, f"--log_mel_cache {cache} (cached log-mel: nothing to decode)"
        elif sources or data_args.synthetic_clips > 0:
            read = dataclasses.replace(data_args, dataloader_num_workers=0)
            what = (
                f"--{sources[0]} {getattr(data_args, sources[0])}"
                if sources
                else f"--synthetic_clips {data_args.synthetic_clips} (arrays in memory: nothing to decode)"
            )
            what += ", as a stream" if data_args.streaming else ""
        else:
            import soundfile as sf  # here, as datasets below: in-memory clips and a cache read no file

            for number, clip in enumerate(unlabelled_clips(min(num_clips, 32), seed, 10.0)):
                sf.write(os.path.join(folder, f"clip{number:03d}.wav"), clip, 16000, subtype="PCM_16")
            read = dataclasses.replace(data_args, train_dir=folder, streaming=False, dataloader_num_workers=0)
            what = (
                "none given, so synthetic 10-s clips written as 16-bit 16-kHz WAV files and read as --train_dir "
                "reads them (give --train_dir, --train_manifest, --dataset or --dataset_name, with --streaming "
                "or not, to time your own)"
            )
        quiet = True
        if read is not None and read.synthetic_clips == 0:  # files, which datasets reads (in-memory clips need none)
            import datasets

            quiet = datasets.utils.are_progress_bars_disabled()
            datasets.disable_progress_bars()  # the folder's "Generating train split" bars would break the table
        try:
            clips = (
                LogMelCache(cache, feature_extractor) if cache is not None else load_clips(read, seed, batch_size, 1, 0)
            )
            timed = time_data_path(clips, collator, num_clips, batch_size, on_device)
            # the run's own micro-batch (a stream's is fixed when it is read: its micro-batches of batch_size)
            received = batch_size if isinstance(clips, AudioStream) else plan.per_device_batch
            trained = time_training_process(clips, collator, max(3, num_clips // received), received, on_device)
        finally:
            if not quiet:
                datasets.enable_progress_bars()
    step = plan.step_seconds()["step"]
    needed = plan.per_device_batch * plan.gradient_accumulation_steps / step  # clips/s per GPU
    decode_rate = timed["clips"] / max(timed["decode_seconds"], 1e-9)
    collate_rate = timed["clips"] / timed["collate_seconds"]
    whole_rate = timed["clips"] / (timed["decode_seconds"] + timed["collate_seconds"])
    workers = math.ceil(needed / whole_rate)  # each worker decodes and collates
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores_needed = plan.num_processes * (workers + 1)  # + the training process
    step_clips = plan.per_device_batch * plan.gradient_accumulation_steps
    per_micro_batch = trained["seconds"] / trained["micro_batches"]
    per_step = per_micro_batch / received * step_clips  # scaled by clips where the timed micro-batch is smaller
    share = per_step / step
    wall = timed["decode_wall_seconds"] + timed["collate_wall_seconds"]
    rows = [
        f"Data path on this host, measured: {timed['clips']} clips in micro-batches of {batch_size}, one process, "
        f"1 torch thread, {timed['failed']} failed to decode; rates per core of its own (CPU time; wall-clock "
        f"{timed['clips'] / wall:,.0f} clips/s for decode + crop + collate while this host was shared)",
        f"  data source: {what}",
    ]
    lengths = None
    if getattr(data_args, "train_manifest", None) is not None:
        lengths = manifest_lengths(data_args.train_manifest, data_args.crop_seconds)
        clips_per_step = plan.per_device_batch * plan.num_processes * plan.gradient_accumulation_steps
        rows.append(
            f"  its clips, from the manifest's num_samples (not decoded): {lengths['clips']:,} listed, "
            f"{lengths['hours']:,.1f} h in all, {lengths['mean_seconds']:.2f} s on average (shortest "
            f"{lengths['min_seconds']:.2f} s, longest {lengths['max_seconds']:.2f} s) at {lengths['rate']:,} "
            f"Hz ({lengths['rate_from']}); {lengths['shorter_than_crop']:,} shorter than --crop_seconds "
            f"{data_args.crop_seconds:g} (used whole, padded); an epoch is "
            f"{lengths['clips'] // clips_per_step:,} steps of {clips_per_step:,} clips"
        )

    def row(label, value, note=""):
        rows.append(f"  {label:<60} {value:>14}{'  ' + note if note else ''}")

    collated = (
        "crop + masks (the log-mel: --features_on_device)" if on_device and cache is None else "crop + log-mel + masks"
    )
    row("read (cached log-mel)" if cache is not None else "decode", f"{decode_rate:,.0f} clips/s", "per loader worker")
    row(collated, f"{collate_rate:,.0f} clips/s", "per loader worker")
    row("decode + collate: one loader worker", f"{whole_rate:,.0f} clips/s", "per core")
    row(
        "clips/s per GPU the predicted step needs",
        f"{needed:,.0f} clips/s",
        f"({step_clips} clips every {_duration(step)})",
    )
    row("loader workers per GPU (--dataloader_num_workers)", f"{workers:,}")
    verdict = "yes" if cores_needed <= cores else "no"
    row(
        f"this host's cores supply {plan.num_processes} GPU process(es) × ({workers} workers + 1)",
        f"{verdict}: {cores_needed:,} of {cores}",
    )
    left_out = "" if trained["finish_timed"] else "; the log-mel launched on the GPU left out (no GPU here)"
    row(
        f"the training process per micro-batch of {received} (CPU)",
        _duration(per_micro_batch),
        f"receive{', pin' if trained['pinned'] else ''}, name failed clips, finish, copy{left_out}",
    )
    target = 0.10
    row(
        f"the training process per step of {step_clips} clips (CPU)",
        _duration(per_step),
        f"{share:.1%} of the predicted step: {'within' if share <= target else 'above'} the target of at most "
        f"{target:.0%} ({_duration(target * step)})"
        + (f"; scaled by clips from micro-batches of {received}" if received != plan.per_device_batch else ""),
    )
    figures = {
        "clips": timed["clips"],
        "decode_clips_per_s": decode_rate,
        "collate_clips_per_s": collate_rate,
        "decode_crop_collate_clips_per_s": whole_rate,
        "needed_clips_per_s": needed,
        "workers": workers,
        "cores": cores,
        "cores_needed": cores_needed,
        "training_process_seconds_per_micro_batch": per_micro_batch,
        "training_process_seconds_per_step": per_step,
        "training_process_share_of_step": share,
        "training_process_finish_timed": trained["finish_timed"],
    }
    if lengths is not None:
        figures["manifest"] = lengths
    return "\n".join(rows) + "\n", figures


def manifest_lengths(path, crop_seconds: float, max_headers: int = 20) -> dict:
    """The clip lengths a fairseq manifest lists (`num_samples`), without decoding a clip: {"clips", "hours",
    "mean_seconds", "min_seconds", "max_seconds", "shorter_than_crop", "rate", "rate_from"}.

    `num_samples` counts samples at the file's own rate (wav2vec_manifest.py writes the decoded length; AudioSet copies
    are 16 or 32 kHz), which the manifest does not give: it is read from the header of the first listed file that
    opens (of the first `max_headers`), and taken as 16 kHz when none does (`rate_from` says which)."""
    import soundfile as sf

    from ..data.loaders.fairseq_manifest import read_fairseq_manifest

    root, entries = read_fairseq_manifest(path)
    rate, rate_from = 16000, f"assumed: none of the first {min(max_headers, len(entries))} listed files opened"
    for _, listed, _ in entries[:max_headers]:
        try:
            rate = sf.info(os.path.join(root, listed)).samplerate
        except Exception:  # noqa: BLE001 - missing or not a format soundfile reads: try the next
            continue
        rate_from = f"the header of {listed}"
        break
    samples = [num_samples for _, _, num_samples in entries]
    total = sum(samples)
    return {
        "clips": len(samples),
        "hours": total / rate / 3600,
        "mean_seconds": total / len(samples) / rate,
        "min_seconds": min(samples) / rate,
        "max_seconds": max(samples) / rate,
        "shorter_than_crop": sum(n < crop_seconds * rate for n in samples),
        "rate": rate,
        "rate_from": rate_from,
    }
