"""`--plan_measure N`: the plan checked on this machine. After `--plan` prints its table, N real optimiser steps of
the run its arguments describe run here, after an untimed warm-up, and each figure of the plan is printed beside its
measured value (`measure_pretraining`, `compare`, `format_measured`); `plan_measured.json` holds both.

What runs is the run's own setup and step, built from the library pieces the script builds it from.
`measure_pretraining` (`examples/pretrain.py`): the model from the plan's config, the data source through
`load_clips` (or the `--log_mel_cache`), its loader workers finishing whole micro-batches in the script's order
(`clip_order`; with `--features_on_device` the log-mel is left to the device), AdamW groups (fused), `accelerate`'s
mixed precision, DDP and `--torch_compile` as the script compiles it, and per step the script's own step,
`aasp_hf.training.step.pretraining_step` (forward/backward per micro-batch, then clip, the skip decision on the
device, AdamW, EMA teacher). `measure_finetuning` (`examples/finetune.py`): the classifier from
`--model_name_or_path`, the task's training clips, crops, mixup and SpecAugment (`augmented_inputs`), layer-decay
AdamW, and the script's step, `aasp_hf.training.step.finetuning_step` (clipping and the weight EMA included).
Neither is the script's loop itself: that loop also logs, evaluates, checkpoints and exports, which a measurement
must not do (no checkpoint, no output beyond the report), and keeps no per-step clock.

How each figure is taken:
- step time: wall-clock of each timed step, the device synchronised at its end (`torch.cuda.synchronize`), so a step
  is the time from its first batch to its last kernel; median and spread (min, max, interquartile range) over N.
- data wait: the part of each step spent getting its micro-batches (the next one the loader workers finished, the
  log-mel with `--features_on_device`, the copy to the device) while the device is idle (the previous step was synchronised): an upper bound on what the run,
  which queues the next step without waiting, loses to data.
- compile and warm-up: the first steps (2 with `--torch_compile`, else 1) are run and timed apart; the first
  holds the compilation.
- clips/s per device: per-device clips per step / median step; MFU: the plan's FLOPs per step / median step /
  the datasheet peak of the plan's accelerator (only on a GPU of that name; elsewhere the achieved FLOP/s alone).
- peak memory: CUDA: `torch.cuda.max_memory_allocated` over the timed steps (what the plan's total counts: weights,
  EMA, AdamW moments, gradients, activations; `max_memory_reserved` beside it shows the allocator's fragmentation).
  CPU: the bytes of the weights, buffers and optimiser state, plus the allocator's peak during one more step from
  the profiler's memory events (`profiler_peak_bytes`).
- all-reduce (more than one process): `torch.distributed.all_reduce` of a float32 buffer of the size of the
  gradients, as DDP sends them, timed alone (median of repeats): what the plan's ring formula predicts. In a step it
  overlaps the backward bucket by bucket.
- host syncs (CUDA): the synchronising calls of one more step, counted by `torch.cuda.set_sync_debug_mode("warn")`.
A figure more than 15 % off the plan is flagged with its likely cause.
"""

import json
import re
import statistics
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, set_seed

from ..data.cache import LogMelCache
from ..data.clips import AudioStream, load_clips
from ..data.collators import PretrainingCollator
from ..feature_extraction_aasp import AaspFeatureExtractor
from ..modeling_aasp import AaspForAudioClassification
from ..modeling_aasp import AaspForPreTraining
from ..utils.schedules import learning_rate, teacher_momentum
from ..training.arguments import gradient_accumulation_for
from ..training.finetuning_loop import FineTuningData, training_collator, training_micro_batches
from ..training.model_ema import create_ema, update_teacher_
from ..training.optim import finetuning_optimizer, pretraining_optimizer
from ..training.pretraining_loop import micro_batch_source
from ..training.step import augmented_inputs, finetuning_step, pretraining_step
from .accelerators import ACCELERATORS
from .memory import profiler_peak_bytes
from .report import _bytes, _duration, _flops

TOLERANCE = 0.15  # a measured figure within ±15 % of the plan agrees with it
DATA_WAIT_LIMIT = 0.05  # the data may hold up at most 5 % of a step
ALLREDUCE_REPEATS = 5


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    threads = torch.get_num_threads()
    return f"{device.type} ({threads} thread{'' if threads == 1 else 's'})"


def accelerator_of(name: str) -> str | None:
    """The `ACCELERATORS` entry a CUDA device name is (H100 80GB HBM3 -> H100 SXM, H100 PCIe -> H100 PCIe, ...), None
    for another device."""
    upper = name.upper()
    if "H100" in upper:
        return "H100 PCIe" if "PCIE" in upper else "H100 SXM"
    for key in ("H200", "A100", "L4"):
        if re.search(rf"\b{key}\b", upper):  # a whole word: an L40S is not an L4
            return next(spec for spec in ACCELERATORS if spec.upper().startswith(key))
    return None


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_pretraining(config, data_args, args, num_steps: int) -> dict:
    """N timed optimiser steps of the `examples/pretrain.py` run that `data_args` / `args` (its `DataArguments` and
    `PretrainingArguments`) describe, with `config` its model; every process runs them (DDP). Returns the measured
    figures (see the module docstring); writes nothing."""
    ddp = (
        [] if args.ddp_bucket_cap_mb is None else [DistributedDataParallelKwargs(bucket_cap_mb=args.ddp_bucket_cap_mb)]
    )
    accelerator = Accelerator(mixed_precision=args.mixed_precision, kwargs_handlers=ddp)
    rank, world, device = accelerator.process_index, accelerator.num_processes, accelerator.device
    set_seed(args.seed)
    model = AaspForPreTraining(config)  # initial weights do not change a step's time or memory
    feature_extractor = AaspFeatureExtractor(feature_size=config.num_mel_bins)
    batch_size, accum = args.per_device_train_batch_size, args.gradient_accumulation_steps
    if data_args.log_mel_cache is not None:
        dataset = LogMelCache(data_args.log_mel_cache, feature_extractor)
    else:
        dataset = load_clips(data_args, args.seed, batch_size, world, rank)
    stream = dataset if isinstance(dataset, AudioStream) else None
    set_seed(args.seed, device_specific=True)
    if args.gradient_checkpointing:
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    # the script's data path (`micro_batch_source` below): loader workers finish whole micro-batches (with
    # --features_on_device all but the log-mel, which this process's `collator.finish` computes on the device)
    collator = PretrainingCollator(
        feature_extractor,
        config,
        crop_seconds=data_args.crop_seconds,
        device=device if data_args.features_on_device else None,
        student_eq_strength=data_args.student_eq_strength,
    )
    optimizer = pretraining_optimizer(model, args)
    model, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(model)
    ema_update = torch.compile(update_teacher_, fullgraph=True) if args.torch_compile else update_teacher_
    update_teacher = partial(ema_update, unwrapped.teacher, unwrapped.aasp)
    if args.torch_compile:
        torch._dynamo.utils.counters.clear()
        unwrapped.compile(fullgraph=True)
    batches = micro_batch_source(accelerator, data_args, args, dataset, stream, feature_extractor, config, 0)
    model.train()

    def step(index: int) -> float:
        """One optimiser step of the script (`aasp_hf.training.step.pretraining_step`); returns the seconds spent
        getting its batches."""
        waited = 0.0

        def next_batch() -> dict:
            nonlocal waited
            started = time.perf_counter()
            batch = collator.finish(next(batches)["batch"])  # finished in a loader worker
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            waited += time.perf_counter() - started
            return batch

        lr = learning_rate(index, args.max_steps, args.warmup_steps, args.learning_rate, args.min_learning_rate)
        momentum = teacher_momentum(index, args.max_steps, args.teacher_momentum_base, args.teacher_momentum_final)
        pretraining_step(
            accelerator, model, optimizer, next_batch, accum, lr, args.max_grad_norm, momentum, update_teacher
        )
        return waited

    static = [*unwrapped.parameters(), *unwrapped.buffers()]
    return _timed_steps(accelerator, model, optimizer, step, static, num_steps, args.torch_compile)


def measure_finetuning(args, splits: dict, multi_label: bool, names: list, clip_seconds: float, num_steps: int) -> dict:
    """N timed optimiser steps of the `examples/finetune.py` run `args` describes, on the training split of `splits`
    (the part its `load_parts` gives first): the classifier loaded from `--model_name_or_path`, the collator's crops,
    mixup and SpecAugment as the arguments set them, AdamW with layer-wise lr decay, gradient clipping and the weight
    EMA after the step, as the script's loop runs them (its loss read back every micro-batch included). Writes
    nothing."""
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    rank, world, device = accelerator.process_index, accelerator.num_processes, accelerator.device
    accum = gradient_accumulation_for(
        args.total_train_batch_size, args.per_device_train_batch_size, world, args.gradient_accumulation_steps
    )
    num_labels = len(names)
    set_seed(args.seed)
    model = AaspForAudioClassification.from_pretrained(
        args.model_name_or_path,
        num_labels=num_labels,
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
        drop_path_rate=args.drop_path_rate,
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
        **({"classifier_pooling": args.classifier_pooling} if args.classifier_pooling else {}),
    )
    if args.freeze_feature_encoder:
        model.freeze_feature_encoder()
    feature_extractor = AaspFeatureExtractor(
        feature_size=model.config.num_mel_bins, per_clip_normalization=args.per_clip_normalization
    )
    ema = create_ema(model) if args.ema_decay > 0 else None
    set_seed(args.seed, device_specific=True)
    data = FineTuningData(splits, multi_label, num_labels=num_labels, clip_seconds=clip_seconds)
    collator = training_collator(feature_extractor, args, data, rank)  # the script's crops and padding
    augment_rng = np.random.default_rng(args.seed * 1000 + 2 + rank)
    optimizer = finetuning_optimizer(model, args)
    model, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(model)
    if ema is not None:
        ema.to(device)
    batches = training_micro_batches(args, data, world, rank)
    soft = multi_label or args.mixup_alpha > 0
    spec_augment_fraction = args.spec_augment_fraction if args.spec_augment else None
    model.train()

    def step(index: int) -> float:
        """One optimiser step of the script (`aasp_hf.training.step.finetuning_step`, its loss read back every
        micro-batch included); returns the seconds spent getting its batches."""
        waited = 0.0

        def next_batch() -> tuple:
            nonlocal waited
            started = time.perf_counter()
            batch = None
            while batch is None:  # a micro-batch where every clip failed to decode is skipped
                _, rows = next(batches)
                batch = collator(rows)
            inputs = augmented_inputs(
                batch, num_labels, soft, args.mixup_alpha, spec_augment_fraction, augment_rng, args.freq_mask_fraction
            )
            inputs = tuple(t.to(device) for t in inputs)
            waited += time.perf_counter() - started
            return inputs

        lr = learning_rate(index, args.max_steps, args.warmup_steps, args.learning_rate, args.min_learning_rate)
        finetuning_step(
            accelerator, model, optimizer, next_batch, accum, lr, args.max_grad_norm, soft, ema, args.ema_decay
        )
        return waited

    static = [
        *unwrapped.parameters(),
        *unwrapped.buffers(),
        *([] if ema is None else [*ema.parameters(), *ema.buffers()]),
    ]
    return _timed_steps(accelerator, model, optimizer, step, static, num_steps, False)


def _timed_steps(accelerator, model, optimizer, step, static_tensors, num_steps: int, compiled: bool) -> dict:
    """Runs `step(index)` (returns its data wait) for the warm-up (2 steps compiled, else 1), then `num_steps` timed
    steps, the device synchronised around each; then the peak memory, host syncs (CUDA), compile counters and the
    all-reduce (more than one process). The measured figures `compare` takes."""
    device, world = accelerator.device, accelerator.num_processes

    def timed(index: int) -> tuple[float, float]:
        synchronize(device)
        started = time.perf_counter()
        waited = step(index)
        synchronize(device)
        return time.perf_counter() - started, waited

    warmup = 2 if compiled else 1
    warmup_seconds = [timed(i)[0] for i in range(warmup)]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    samples = [timed(warmup + i) for i in range(num_steps)]
    accelerator.wait_for_everyone()
    figures = {
        "device": device_name(device),
        "device_type": device.type,
        "num_processes": world,
        "precision": accelerator.mixed_precision,
        "torch_compile": bool(compiled),
        "steps": num_steps,
        "warmup_steps": warmup,
        "first_step_seconds": warmup_seconds[0],
        "warmup_seconds": sum(warmup_seconds),
        "step_seconds": [s for s, _ in samples],
        "data_wait_seconds": [w for _, w in samples],
    }
    if device.type == "cuda":
        figures["peak_bytes"] = torch.cuda.max_memory_allocated(device)
        figures["reserved_bytes"] = torch.cuda.max_memory_reserved(device)
        figures["host_syncs"] = _count_host_syncs(lambda: step(warmup + num_steps))
    else:
        state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
        static = sum(t.untyped_storage().nbytes() for t in [*static_tensors, *state])
        figures["static_bytes"] = static
        figures["peak_bytes"] = static + profiler_peak_bytes(lambda: step(warmup + num_steps))
    if compiled:
        counters = torch._dynamo.utils.counters
        figures["graph_breaks"] = sum(counters["graph_break"].values())
        figures["compiled_graphs"] = counters["stats"]["unique_graphs"]
    if world > 1:
        figures["allreduce_seconds"] = _time_allreduce(
            sum(p.numel() for p in model.parameters() if p.requires_grad), device
        )
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return figures


def _count_host_syncs(function) -> int:
    """The calls that made the host wait for the device while `function` ran (CUDA's sync debug mode warns once per
    synchronising call)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            function()
            torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _time_allreduce(num_gradients: int, device: torch.device) -> float:
    """Median seconds of a sum all-reduce of `num_gradients` float32 values across the processes (one warm-up)."""
    buffer = torch.zeros(num_gradients, dtype=torch.float32, device=device)
    times = []
    for i in range(ALLREDUCE_REPEATS + 1):
        synchronize(device)
        torch.distributed.barrier()
        started = time.perf_counter()
        torch.distributed.all_reduce(buffer)
        synchronize(device)
        if i > 0:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def _spread(values: list) -> dict:
    ordered = sorted(values)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "iqr": quartiles[2] - quartiles[0],
    }


def compare(plan, measured: dict) -> dict:
    """plan_measured.json: each figure's measured and predicted value, their ratio, whether it is within ±15 % of
    the plan, and where it is not, the likely cause. Time figures are compared only where the device is the plan's
    accelerator (`comparable_time`); memory anywhere (the plan counts bytes, not a device's speed)."""
    step = _spread(measured["step_seconds"])
    wait = _spread(measured["data_wait_seconds"])
    clips = plan.per_device_batch * plan.gradient_accumulation_steps
    predicted_step = plan.step_seconds()["step"]
    on = accelerator_of(measured["device"]) if measured["device_type"] == "cuda" else None
    comparable = on == plan.accelerator.name
    wait_fraction = wait["median"] / step["median"]
    achieved = plan.flops_per_step / step["median"]
    causes = []
    if wait_fraction > DATA_WAIT_LIMIT:
        causes.append(
            f"data wait: {wait_fraction:.0%} of the step (more --dataloader_num_workers, "
            "--features_on_device or a --log_mel_cache)"
        )
    if measured.get("graph_breaks"):
        causes.append(f"graph breaks: {measured['graph_breaks']}")
    if not measured["torch_compile"]:
        causes.append("eager: no --torch_compile")
    if measured.get("host_syncs"):
        causes.append(f"host syncs: {measured['host_syncs']} per step")

    def figure(value, predicted, time_figure=True, higher_is_slower=True):
        entry = {"measured": value, "predicted": predicted}
        if value is None or predicted in (None, 0):
            return entry
        entry["ratio"] = value / predicted
        if time_figure and not comparable:
            entry["within_15_percent"] = None
            entry["note"] = f"not comparable: measured on {measured['device']}, predicted for {plan.accelerator.name}"
            return entry
        entry["within_15_percent"] = abs(entry["ratio"] - 1) <= TOLERANCE
        if not entry["within_15_percent"]:
            slower = (entry["ratio"] > 1) == higher_is_slower
            entry["note"] = (
                ("; ".join(causes) or "no data wait, graph break or host sync seen")
                if slower
                else "faster than the plan: its MFU assumption (--plan_mfu) is low for this setup"
            )
        return entry

    figures = {
        "step_seconds": {**figure(step["median"], predicted_step), "spread": step},
        "clips_per_second_per_device": figure(clips / step["median"], clips / predicted_step, higher_is_slower=False),
        "mfu": figure(achieved / plan.peak_flops() if comparable else None, plan.mfu, higher_is_slower=False),
        "achieved_flops_per_second": achieved,
        "data_wait_seconds": {
            "measured": wait["median"],
            "predicted": 0.0,
            "spread": wait,
            "fraction_of_step": wait_fraction,
            "within_limit": wait_fraction <= DATA_WAIT_LIMIT,
        },
        "peak_memory_bytes": figure(measured["peak_bytes"], plan.peak_bytes, time_figure=False),
    }
    memory = figures["peak_memory_bytes"]
    if measured["device_type"] == "cuda":
        memory["reserved_bytes"] = measured["reserved_bytes"]
        fragmentation = (
            f"; fragmentation: the allocator reserved "
            f"{(measured['reserved_bytes'] - measured['peak_bytes']) / 2**20:,.0f} MiB beyond its peak"
        )
        if memory.get("within_15_percent") is False:
            memory["note"] = (
                "allocations the fake step does not see (kernel workspaces, compiled graphs' buffers, the batch)"
                if memory["ratio"] > 1
                else "fewer live tensors than the fake step (a fused or compiled kernel keeps fewer temporaries)"
            ) + fragmentation
    elif memory.get("within_15_percent") is False:
        memory["note"] = (
            "on the CPU the SBLU works block by block (smaller temporaries than the accelerator's "
            "whole-tensor pass the plan counts)"
            if memory["ratio"] < 1
            else "allocations the fake step does not see (kernel workspaces, the batch)"
        )
    if measured["num_processes"] > 1:
        figures["allreduce_seconds"] = figure(
            measured["allreduce_seconds"], plan.allreduce_seconds(measured["num_processes"])
        )
    keys = (
        "device",
        "num_processes",
        "precision",
        "torch_compile",
        "steps",
        "warmup_steps",
        "first_step_seconds",
        "warmup_seconds",
        "graph_breaks",
        "compiled_graphs",
        "host_syncs",
        "static_bytes",
    )
    return {
        **{k: measured[k] for k in keys if k in measured},
        "predicted_for": plan.accelerator.name,
        "comparable_time": comparable,
        "tolerance": TOLERANCE,
        "figures": figures,
        "samples": {"step_seconds": measured["step_seconds"], "data_wait_seconds": measured["data_wait_seconds"]},
    }


def _fmt(value, unit):
    if value is None:
        return "-"
    if unit == "s":
        return _duration(value)
    if unit == "B":
        return _bytes(value)
    if unit == "%":
        return f"{value:.1%}"
    return f"{value:,.1f}"


def format_measured(report: dict) -> str:
    """Measured beside predicted, one row per figure, and what is off and why."""
    f = report["figures"]
    step = f["step_seconds"]["spread"]
    rows = [
        f"Measured on this machine: {report['steps']} steps on {report['num_processes']} × {report['device']}, "
        f"{report['precision']}, torch.compile {'on' if report['torch_compile'] else 'off'} (plan for "
        f"{report['predicted_for']})",
        f"  warm-up, not timed: {report['warmup_steps']} step(s) in {_fmt(report['warmup_seconds'], 's')} (the "
        f"first {_fmt(report['first_step_seconds'], 's')}"
        + (", compilation included)" if report["torch_compile"] else ")"),
        f"  {'figure':<40} {'measured':>14} {'predicted':>14} {'ratio':>7}  verdict",
    ]

    def row(label, entry, unit):
        ratio = entry.get("ratio")
        within = entry.get("within_15_percent")
        verdict = "within ±15 %" if within else ("OUTSIDE ±15 %" if within is False else "")
        if entry.get("note"):
            verdict = f"{verdict}: {entry['note']}" if verdict else entry["note"]
        rows.append(
            f"  {label:<40} {_fmt(entry['measured'], unit):>14} {_fmt(entry['predicted'], unit):>14} "
            f"{'' if ratio is None else f'{ratio:.3f}' if ratio < 100 else f'{ratio:.3g}':>7}  {verdict}"
        )

    row("step time (median)", f["step_seconds"], "s")
    rows.append(
        f"  {'  spread: min / max / interquartile':<40} {_fmt(step['min'], 's')} / {_fmt(step['max'], 's')} / "
        f"{_fmt(step['iqr'], 's')}"
    )
    row("clips/s per device", f["clips_per_second_per_device"], "")
    row("MFU (the plan's FLOPs per step)", f["mfu"], "%")
    rows.append(f"  {'  achieved':<40} {_flops(f['achieved_flops_per_second']):>14}/s")
    row("peak memory per device", f["peak_memory_bytes"], "B")
    wait = f["data_wait_seconds"]
    rows.append(
        f"  {'data wait per step (median)':<40} {_fmt(wait['measured'], 's'):>14} {_fmt(0.0, 's'):>14} "
        f"{'':>7}  {wait['fraction_of_step']:.1%} of the step, "
        f"{'within' if wait['within_limit'] else 'ABOVE'} the {DATA_WAIT_LIMIT:.0%} limit"
    )
    if "allreduce_seconds" in f:
        row(f"gradient all-reduce ({report['num_processes']} processes)", f["allreduce_seconds"], "s")
    if "graph_breaks" in report:
        rows.append(f"  graph breaks {report['graph_breaks']}, compiled graphs {report['compiled_graphs']}")
    if "host_syncs" in report:
        rows.append(f"  host syncs in a step: {report['host_syncs']}")
    return "\n".join(rows) + "\n"


def write_report(output_dir, plan_text: str, report: dict) -> Path:
    """plan.txt (the plan's table and the measured one) and plan_measured.json in `output_dir`; nothing else."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "plan.txt").write_text(plan_text)
    path = output_dir / "plan_measured.json"
    path.write_text(json.dumps(report, indent=2))
    return path
