"""The data side of a pre-training plan, measured on this host: `time_data_path` times decoding and collating as
training does them, `data_path_plan` turns that into the DataLoader workers and cores the predicted step needs."""

import dataclasses
import itertools
import math
import os
import tempfile
import time

import soundfile as sf
import torch

from ..data.clips import AudioStream, load_clips, replace_failed
from ..data.collators import PretrainingCollator
from ..data.loaders.fairseq_manifest import read_fairseq_manifest
from ..data.synthetic import unlabelled_clips
from ..feature_extraction_aasp import AaspFeatureExtractor
from ..training.data_order import clip_seed
from .estimate import RunPlan
from .report import _duration


def time_data_path(clips, collator, num_clips: int, batch_size: int) -> dict:
    """Times the data path training runs, in this process on one torch thread (one DataLoader worker's share of a
    core): `clips` (an `aasp_hf.data.clips.AudioClips`, rows read in order and cycled, or an `AudioStream`, whose own
    micro-batches are read) decoded as the loader's workers decode them, failed clips replaced, then cropped,
    featurised and masked by `collator` (the training process's share: map-style clips one by one from their
    `clip_seed`, `PretrainingCollator.collate_seeded`; a stream's micro-batch at once), in micro-batches of
    `batch_size`, until `num_clips` clips are done. One micro-batch is run first, untimed (imports, first calls).

    Returns {"clips", "decode_seconds", "collate_seconds", "failed"}, the seconds in CPU time of this process
    (`time.process_time`: what the work costs a core of its own, also when other processes share this host's
    cores), and the wall-clock seconds as "decode_wall_seconds", "collate_wall_seconds".
    """

    if isinstance(clips, AudioStream):
        batches = (examples for _, examples in clips.micro_batches())
        collate = collator
    else:
        rows = itertools.cycle(range(len(clips)))
        batches = ([clips[next(rows)] for _ in range(batch_size)] for _ in itertools.count())
        positions = itertools.count()
        collate = lambda examples: collator.collate_seeded(  # noqa: E731
            examples, [clip_seed(0, 0, next(positions)) for _ in examples])
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
    return {"clips": done, "decode_seconds": cpu[0], "collate_seconds": cpu[1], "decode_wall_seconds": wall[0],
            "collate_wall_seconds": wall[1], "failed": failed}


def data_path_plan(plan: RunPlan, config, data_args, num_clips: int, seed: int = 0) -> tuple[str, dict]:
    """The data side of a pre-training plan, measured on this host: `time_data_path` on the run's data source
    (`data_args`: examples/pretrain.py's, read with `aasp_hf.data.clips.load_clips` as training reads it, decoded in
    this process) or, with none given, synthetic 10-s clips written as 16-bit 16-kHz WAV files to a temporary folder
    and read as `--train_dir` reads them. A `--train_manifest` is timed on its first listed clips (a listed file missing
    on disk counts among the failed), and its `num_samples` give the lengths of all its clips without decoding them
    (`manifest_lengths`). Returns (the lines to print, the figures)."""

    batch_size = max(1, min(plan.per_device_batch, 32, num_clips))
    collator = PretrainingCollator(AaspFeatureExtractor(feature_size=config.num_mel_bins), config,
                                   crop_seconds=data_args.crop_seconds, generator=torch.Generator().manual_seed(seed),
                                   student_eq_strength=data_args.student_eq_strength)
    sources = [name for name in ("dataset", "train_dir", "train_manifest", "dataset_name")
               if getattr(data_args, name, None) is not None]
    with tempfile.TemporaryDirectory() as folder:
        if sources or data_args.synthetic_clips > 0:
            read = dataclasses.replace(data_args, dataloader_num_workers=0)
            what = (f"--{sources[0]} {getattr(data_args, sources[0])}" if sources else
                    f"--synthetic_clips {data_args.synthetic_clips} (arrays in memory: nothing to decode)")
            what += ", as a stream" if data_args.streaming else ""
        else:
            for number, clip in enumerate(unlabelled_clips(min(num_clips, 32), seed, 10.0)):
                sf.write(os.path.join(folder, f"clip{number:03d}.wav"), clip, 16000, subtype="PCM_16")
            read = dataclasses.replace(data_args, train_dir=folder, streaming=False, dataloader_num_workers=0)
            what = ("none given, so synthetic 10-s clips written as 16-bit 16-kHz WAV files and read as --train_dir "
                    "reads them (give --train_dir, --train_manifest, --dataset or --dataset_name, with --streaming "
                    "or not, to time your own)")
        import datasets

        quiet = datasets.utils.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # the folder's "Generating train split" bars would break the table
        try:
            clips = load_clips(read, seed, batch_size, 1, 0)
            timed = time_data_path(clips, collator, num_clips, batch_size)
        finally:
            if not quiet:
                datasets.enable_progress_bars()
    step = plan.step_seconds()["step"]
    needed = plan.per_device_batch * plan.gradient_accumulation_steps / step  # clips/s per GPU
    decode_rate = timed["clips"] / max(timed["decode_seconds"], 1e-9)
    collate_rate = timed["clips"] / timed["collate_seconds"]
    whole_rate = timed["clips"] / (timed["decode_seconds"] + timed["collate_seconds"])
    workers = math.ceil(needed / decode_rate)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores_needed = plan.num_processes * (workers + 1)  # + the training process, which collates
    on_device = getattr(data_args, "features_on_device", False)
    wall = timed["decode_wall_seconds"] + timed["collate_wall_seconds"]
    rows = [f"Data path on this host, measured: {timed['clips']} clips in micro-batches of {batch_size}, one process, "
            f"1 torch thread, {timed['failed']} failed to decode; rates per core of its own (CPU time; wall-clock "
            f"{timed['clips'] / wall:,.0f} clips/s for decode + crop + collate while this host was shared)",
            f"  data source: {what}"]
    lengths = None
    if getattr(data_args, "train_manifest", None) is not None:
        lengths = manifest_lengths(data_args.train_manifest, data_args.crop_seconds)
        clips_per_step = plan.per_device_batch * plan.num_processes * plan.gradient_accumulation_steps
        rows.append(f"  its clips, from the manifest's num_samples (not decoded): {lengths['clips']:,} listed, "
                    f"{lengths['hours']:,.1f} h in all, {lengths['mean_seconds']:.2f} s on average (shortest "
                    f"{lengths['min_seconds']:.2f} s, longest {lengths['max_seconds']:.2f} s) at {lengths['rate']:,} "
                    f"Hz ({lengths['rate_from']}); {lengths['shorter_than_crop']:,} shorter than --crop_seconds "
                    f"{data_args.crop_seconds:g} (used whole, padded); an epoch is "
                    f"{lengths['clips'] // clips_per_step:,} steps of {clips_per_step:,} clips")

    def row(label, value, note=""):
        rows.append(f"  {label:<60} {value:>14}{'  ' + note if note else ''}")

    row("decode (what each DataLoader worker does)", f"{decode_rate:,.0f} clips/s", "per worker")
    row("crop + log-mel + masks (the collator, in the training process)", f"{collate_rate:,.0f} clips/s",
        "on the CPU" + ("; with --features_on_device the log-mel runs on the accelerator" if on_device else ""))
    row("decode + crop + collate on one core", f"{whole_rate:,.0f} clips/s")
    row("clips/s per GPU the predicted step needs", f"{needed:,.0f} clips/s",
        f"({plan.per_device_batch * plan.gradient_accumulation_steps} clips every {_duration(step)})")
    row("decoding workers per GPU (--dataloader_num_workers)", f"{workers:,}")
    verdict = "yes" if cores_needed <= cores else "no"
    row(f"this host's cores supply {plan.num_processes} GPU process(es) × ({workers} workers + 1)",
        f"{verdict}: {cores_needed:,} of {cores}")
    if collate_rate < needed and not on_device:
        rows.append(f"  the training process collates {collate_rate:,.0f} clips/s on one core, below the "
                    f"{needed:,.0f} the step needs: pass --features_on_device (the log-mel on the accelerator) or read "
                    f"a --log_mel_cache")
    figures = {"clips": timed["clips"], "decode_clips_per_s": decode_rate, "collate_clips_per_s": collate_rate,
               "decode_crop_collate_clips_per_s": whole_rate, "needed_clips_per_s": needed, "workers": workers,
               "cores": cores, "cores_needed": cores_needed}
    if lengths is not None:
        figures["manifest"] = lengths
    return "\n".join(rows) + "\n", figures


def manifest_lengths(path, crop_seconds: float, max_headers: int = 20) -> dict:
    """The clip lengths a fairseq manifest lists (`num_samples`), without decoding a clip: {"clips", "hours",
    "mean_seconds", "min_seconds", "max_seconds", "shorter_than_crop", "rate", "rate_from"}.

    `num_samples` counts samples at the file's own rate (wav2vec_manifest.py writes the decoded length; AudioSet copies
    are 16 or 32 kHz), which the manifest does not give: it is read from the header of the first listed file that
    opens (of the first `max_headers`), and taken as 16 kHz when none does (`rate_from` says which)."""
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
    return {"clips": len(samples), "hours": total / rate / 3600, "mean_seconds": total / len(samples) / rate,
            "min_seconds": min(samples) / rate, "max_seconds": max(samples) / rate,
            "shorter_than_crop": sum(n < crop_seconds * rate for n in samples), "rate": rate, "rate_from": rate_from}
