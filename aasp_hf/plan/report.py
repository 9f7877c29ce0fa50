"""`format_plan`: a `RunPlan` as the plain-text table `--plan` prints, with its unit formatters (FLOPs, bytes,
durations)."""

from .accelerators import MEMORY_HEADROOM, PAPER_BATCHES_PER_SECOND, PAPER_GLOBAL_BATCH, PAPER_NUM_GPUS
from .estimate import RunPlan


def _scaled(value: float, units: tuple, base: float) -> str:
    """value in the largest unit of `units` (each `base` times the previous) that keeps it >= 1, 3 significant
    digits: 28.3 TFLOP, 512 MiB, 71.6 ms."""
    unit, index = value, 0
    while index + 1 < len(units) and abs(unit) >= base:
        unit /= base
        index += 1
    return f"{unit:.3g} {units[index]}" if abs(unit) < 1000 else f"{unit:,.0f} {units[index]}"


def _flops(value: float) -> str:
    return _scaled(value, ("FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"), 1000)


def _bytes(value: float) -> str:
    return _scaled(value, ("B", "KiB", "MiB", "GiB", "TiB"), 1024)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} days"


def format_plan(plan: RunPlan) -> str:
    """A plain-text table of `plan`: parameters, FLOPs, memory, largest batch, step time and the whole run."""
    rows = []

    def row(label, value, note=""):
        rows.append(f"  {label:<60} {value:>14}{'  ' + note if note else ''}")

    precision = {"no": "fp32 (no mixed precision)", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}[plan.precision]
    clips = plan.per_device_batch * plan.num_processes * plan.gradient_accumulation_steps
    rows += [
        f"Plan of a {plan.kind} run: an ESTIMATE computed without a GPU (aasp_hf.plan)",
        f"  {plan.description}",
        f"  {plan.per_device_batch} clips per device × {plan.num_processes} process(es) × "
        f"{plan.gradient_accumulation_steps} accumulation = {clips} clips per step; {precision}; gradient "
        f"checkpointing {'on' if plan.gradient_checkpointing else 'off'}; {plan.max_steps:,} steps",
        "",
        "Parameters",
    ]
    for name, (count, trainable) in plan.parameters.items():
        row(name, f"{count / 1e6:,.2f} M", "trainable" if trainable else "frozen")

    rows += ["", "FLOPs per device and micro-batch (FlopCounterMode on fake tensors; analytic where marked)"]
    for name, flops in plan.flops_per_micro_batch.items():
        row(name, _flops(flops))
    per_clip = plan.flops_per_step / (plan.per_device_batch * plan.gradient_accumulation_steps)
    row("total per device and optimiser step", _flops(plan.flops_per_step), f"({_flops(per_clip)} per clip)")

    rows += ["", f"Peak memory per device at {plan.per_device_batch} clips per micro-batch"]
    for name, nbytes in plan.memory.items():
        row(name, _bytes(nbytes))
    row("total (without CUDA context and allocator fragmentation)", _bytes(plan.peak_bytes))
    for checkpointing in (False, True):
        low, high, b1, b2 = plan.dynamic_bytes[checkpointing]
        row(
            f"largest batch within {plan.memory_gib:g} GiB, gradient checkpointing {'on' if checkpointing else 'off'}",
            f"{plan.max_batch(checkpointing):,} clips",
            f"({_bytes((high - low) / (b2 - b1))} per clip)",
        )
    rows += [
        f"  activations: live tensor bytes of a fake step ("
        f"{'float32' if plan.precision == 'no' else plan.precision + ' autocast: the dtypes autocast gives'}), measured at "
        f"batches {plan.dynamic_bytes[plan.gradient_checkpointing][2]} and "
        f"{plan.dynamic_bytes[plan.gradient_checkpointing][3]}, linear per clip;",
        f"  fits = peak <= {plan.memory_gib * (1 - MEMORY_HEADROOM):g} GiB ({MEMORY_HEADROOM:.0%} kept free for the "
        f"CUDA context and fragmentation: an ASSUMPTION)",
    ]

    spec = plan.accelerator
    times = plan.step_seconds()
    peak_name = "fp32" if plan.precision == "no" else "dense bf16"
    rows += ["", f"Time on {plan.num_processes} × {spec.name} ({spec.source})"]
    row(f"datasheet peak {peak_name} FLOP/s", f"{plan.peak_flops() / 1e12:,.0f} TFLOP/s")
    row("datasheet memory bandwidth", f"{spec.bandwidth / 1e12:.3g} TB/s")
    row("MFU: an ASSUMPTION, not a measurement (--plan_mfu)", f"{plan.mfu:.2f}")
    row("compute time per step at that MFU", _duration(times["compute"]))
    row("memory-traffic floor per step (AdamW, EMA, activations)", _duration(times["memory"]))
    row("step time (the larger of the two)", _duration(times["step"]))
    row("throughput", f"{clips / times['step']:,.0f} clips/s")
    total_seconds = times["step"] * plan.max_steps
    row(f"wall-clock for {plan.max_steps:,} steps", _duration(total_seconds))
    gpu_hours = total_seconds * plan.num_processes / 3600
    row(f"GPU-hours ({plan.num_processes} × wall-clock)", f"{gpu_hours:,.1f}" if gpu_hours >= 1 else f"{gpu_hours:.2g}")

    rows += [
        "",
        f"Gradient all-reduce per step (DDP, ring: each GPU sends and receives 2(n − 1)/n × "
        f"{_bytes(plan.gradient_bytes)} of float32 gradients; {spec.interconnect_name}, "
        f"{spec.interconnect / 1e9:g} GB/s each way: {spec.source})",
    ]
    for n in (plan.num_processes,) if plan.num_processes > 1 else (4, 8):
        seconds = plan.allreduce_seconds(n)
        row(
            f"{n} GPUs of one node{'' if n == plan.num_processes else ' (if launched so)'}",
            _duration(seconds),
            f"({seconds / times['step']:.0%} of the step; DDP overlaps all but its last bucket with the backward)",
        )
    if plan.kind == "pre-training":
        paper_per_gpu = PAPER_BATCHES_PER_SECOND * PAPER_GLOBAL_BATCH / PAPER_NUM_GPUS
        ours_per_gpu = plan.per_device_batch * plan.gradient_accumulation_steps / times["step"]
        rows += [
            "",
            f"The paper's reported throughput: {PAPER_BATCHES_PER_SECOND} batches/s end to end (its predictor "
            f"ablation, cross-attention predictor), read as global batches of {PAPER_GLOBAL_BATCH} clips on "
            f"{PAPER_NUM_GPUS} H100s (its pre-training run; the ablation does not restate its batch)",
        ]
        row(
            "paper: clips/s per GPU",
            f"{paper_per_gpu:,.0f}",
            f"({PAPER_BATCHES_PER_SECOND * PAPER_GLOBAL_BATCH:,.0f} clips/s on {PAPER_NUM_GPUS} GPUs)",
        )
        row("this plan: clips/s per GPU", f"{ours_per_gpu:,.0f}", f"({ours_per_gpu / paper_per_gpu:.1f}× the paper's)")
        per_clip = plan.flops_per_step / (plan.per_device_batch * plan.gradient_accumulation_steps)
        implied_mfu = per_clip * paper_per_gpu / plan.peak_flops()
        row(
            "MFU the paper's rate gives by this plan's FLOP count",
            f"{implied_mfu:.3f}",
            "(for the paper's ViT-B configuration only)",
        )
    rows.append(
        "  not modelled: data loading (pretrain.py --plan times it on this host), all-reduce between nodes, "
        "logging and checkpoint steps, host overhead"
    )
    return "\n".join(rows) + "\n"
