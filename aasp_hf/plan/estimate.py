"""The plan of a run: `plan_pretraining` (an `examples/pretrain.py` run) and `plan_finetuning` (an
`examples/finetune.py` run) measure a fake step and return a `RunPlan`: parameters, FLOPs per micro-batch, peak
memory per device, the largest batch that fits, step time and gradient all-reduce on a named accelerator."""

from dataclasses import dataclass, field

import torch

from .accelerators import ACCELERATORS, MEMORY_HEADROOM, AcceleratorSpec, GiB, check_plan_arguments
from .counting import highpass_flops, sblu_tap_flops, sblu_tap_flops_per_element
from .fake_step import fake_model, measure_fake_step, pretraining_inputs, set_gradient_checkpointing


@dataclass
class RunPlan:
    """Everything `format_plan` prints; every number is computed here except those marked as assumptions."""

    kind: str
    description: str
    per_device_batch: int
    gradient_accumulation_steps: int
    num_processes: int
    precision: str
    max_steps: int
    gradient_checkpointing: bool
    parameters: dict  # part -> (count, trainable)
    flops_per_micro_batch: dict  # part -> FLOPs per device and micro-batch
    memory: dict  # item -> bytes per device at the configured batch
    dynamic_bytes: dict  # checkpointing (bool) -> (bytes at batch b1, at b2, b1, b2)
    memory_gib: float
    accelerator: AcceleratorSpec
    mfu: float
    bytes_moved_per_step: float
    gradient_bytes: float = 0.0  # float32 gradients of the trainable parameters: what DDP all-reduces every step
    notes: list = field(default_factory=list)

    @property
    def flops_per_step(self) -> float:
        """Per device and optimiser step (all micro-batches)."""
        return sum(self.flops_per_micro_batch.values()) * self.gradient_accumulation_steps

    @property
    def peak_bytes(self) -> float:
        return sum(self.memory.values())

    def static_bytes(self) -> float:
        return sum(v for k, v in self.memory.items() if k != "activations, gradients, temporaries (measured)")

    def dynamic_at(self, batch: int, checkpointing: bool) -> float:
        """Linear per clip through the two measured batch sizes."""
        low, high, b1, b2 = self.dynamic_bytes[checkpointing]
        return low + (high - low) * (batch - b1) / (b2 - b1)

    def max_batch(self, checkpointing: bool) -> int:
        """Largest per-device batch whose peak stays within (1 − MEMORY_HEADROOM) of `memory_gib`."""
        low, high, b1, b2 = self.dynamic_bytes[checkpointing]
        per_clip = (high - low) / (b2 - b1)
        budget = self.memory_gib * GiB * (1 - MEMORY_HEADROOM) - self.static_bytes() - (low - per_clip * b1)
        return max(0, int(budget // per_clip))

    def peak_flops(self) -> float:
        return self.accelerator.fp32_flops if self.precision == "no" else self.accelerator.bf16_flops

    def step_seconds(self) -> dict:
        compute = self.flops_per_step / (self.peak_flops() * self.mfu)
        memory = self.bytes_moved_per_step / self.accelerator.bandwidth
        return {"compute": compute, "memory": memory, "step": max(compute, memory)}

    def allreduce_seconds(self, num_processes: int) -> float:
        """DDP's gradient all-reduce per optimiser step over `num_processes` GPUs of one node: a ring all-reduce
        sends and receives 2(n − 1)/n × the gradient bytes per GPU, at the interconnect's one-way bandwidth (no
        latency term; DDP overlaps it with the backward pass bucket by bucket, all but the last bucket)."""
        return 2 * (num_processes - 1) / num_processes * self.gradient_bytes / self.accelerator.interconnect


def _bytes_moved(static: dict, trainable: int, teacher: int, dynamic_peak: float) -> float:
    """A lower bound on the bytes one step moves through device memory: fused AdamW reads parameter, gradient and
    both moments and writes parameter and moments (7 × 4 bytes per trainable parameter), the EMA lerp reads teacher
    and student and writes the teacher (3 × 4 bytes per teacher parameter), and the activations are written once
    and read once (2 × the measured dynamic peak)."""
    return 28 * trainable + 12 * teacher + 2 * dynamic_peak


def _dynamic_bytes(model, fake_mode, kind, make_inputs, batch, precision, checkpointing, peak) -> dict:
    """RunPlan.dynamic_bytes: for the run's gradient checkpointing and for the other setting, the dynamic peaks at
    two batch sizes (b1 < b2, b2 = the configured batch unless it is 1) for the linear fit. `peak`, already measured
    at the configured batch with the run's setting, is not measured again."""
    dynamic = {}
    for setting in (checkpointing, not checkpointing):
        set_gradient_checkpointing(model, setting)
        b1, b2 = (batch // 2, batch) if batch >= 2 else (batch, 2)
        peaks = {}
        for b in (b2, b1):
            if setting == checkpointing and b == batch:
                peaks[b] = peak
            else:
                peaks[b] = measure_fake_step(model, fake_mode, kind, make_inputs(b), precision)[0]
        dynamic[setting] = (peaks[b1], peaks[b2], b1, b2)
    return dynamic


def _count_parameters(module, trainable_override=None) -> tuple[int, bool]:
    params = list(module.parameters())
    count = sum(p.numel() for p in params)
    trainable = any(p.requires_grad for p in params) if trainable_override is None else trainable_override
    return count, trainable


def plan_pretraining(
    config,
    per_device_batch: int,
    precision: str = "bf16",
    num_processes: int = 1,
    max_steps: int = 1000,
    gradient_accumulation_steps: int = 1,
    gradient_checkpointing: bool = False,
    memory_gb: float = 80,
    accelerator: str = "H100 SXM",
    mfu: float = 0.4,
    patch_embedding_frozen: bool = False,
) -> RunPlan:
    """The plan of an `examples/pretrain.py` run of `AaspForPreTraining(config)` (see the `aasp_hf.plan` docstring)."""
    check_plan_arguments(memory_gb, accelerator, mfu, precision, num_processes)
    if per_device_batch < 1:
        raise ValueError(f"--per_device_train_batch_size must be >= 1, got {per_device_batch}")
    model, fake_mode = fake_model(config, "pretraining")
    if patch_embedding_frozen:  # --patch_embedding_lr_scale 0
        model.aasp.embeddings.requires_grad_(False)
    parameters = {
        "student encoder": _count_parameters(model.aasp),
        "EMA teacher encoder": _count_parameters(model.teacher, False),
        "predictor": _count_parameters(model.predictor),
        "contrastive head": _count_parameters(model.contrastive_head),
    }
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())

    make_inputs = lambda b: pretraining_inputs(config, b)  # noqa: E731
    set_gradient_checkpointing(model, gradient_checkpointing)
    peak, counter = measure_fake_step(
        model, fake_mode, "pretraining", make_inputs(per_device_batch), precision, count_flops=True
    )
    by_module = {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
    total_counted = counter.get_total_flops()
    parts = {
        "student fwd+bwd (masked views)": by_module.get("AaspForPreTraining.aasp", 0),
        "EMA teacher fwd (full clips)": by_module.get("AaspForPreTraining.teacher", 0),
        "predictor fwd+bwd": by_module.get("AaspForPreTraining.predictor", 0),
        "contrastive head fwd+bwd": by_module.get("AaspForPreTraining.contrastive_head", 0),
    }
    parts["losses (contrastive similarities)"] = total_counted - sum(parts.values())
    num_views = config.mask_num_views
    if num_processes > 1:  # L_c's candidates are the views of all processes: (B·M) × (W·B·M) similarities,
        # forward + both gradients, 3 × 2·B·M·W·B·M·E; the counter saw W = 1
        embed = config.hidden_size // 2
        views = per_device_batch * num_views
        parts["losses (contrastive similarities)"] += 6 * views * views * embed * (num_processes - 1)
    if config.patch_embedding == "aape":
        student_rows = per_device_batch * (num_views if config.student_stem_input == "masked" else 1)
        parts["not counted by FlopCounterMode: high-pass (teacher + student)"] = highpass_flops(
            config, per_device_batch
        ) + highpass_flops(config, student_rows)
        parts["not counted by FlopCounterMode: teacher's dense SBLU taps"] = sblu_tap_flops(config, per_device_batch)

    dynamic = _dynamic_bytes(
        model, fake_mode, "pretraining", make_inputs, per_device_batch, precision, gradient_checkpointing, peak
    )
    teacher = parameters["EMA teacher encoder"][0]
    memory = {
        "parameters (float32; student, predictor, head)": 4 * (total - teacher),
        "EMA teacher (float32)": 4 * teacher,
        "AdamW moments (2 × float32 per trainable parameter)": 8 * trainable,
    }
    if num_processes > 1:
        memory["DDP gradient buckets (float32)"] = 4 * trainable
    memory["activations, gradients, temporaries (measured)"] = peak
    one = make_inputs(1)
    view_tokens = (one["visible_indices"].shape[-1], one["query_indices"].shape[-1])  # V, Q
    description = (
        f"AaspForPreTraining: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.patch_embedding.upper()} stem, {config.num_frames} frames × {config.num_mel_bins} mel "
        f"({config.num_patches} tokens); {num_views} views per clip, {view_tokens[0]} visible and "
        f"{view_tokens[1]} query tokens per view"
    )
    return RunPlan(
        kind="pre-training",
        description=description,
        per_device_batch=per_device_batch,
        gradient_accumulation_steps=gradient_accumulation_steps,
        num_processes=num_processes,
        precision=precision,
        max_steps=max_steps,
        gradient_checkpointing=gradient_checkpointing,
        parameters=parameters,
        flops_per_micro_batch=parts,
        memory=memory,
        dynamic_bytes=dynamic,
        memory_gib=memory_gb,
        accelerator=ACCELERATORS[accelerator],
        mfu=mfu,
        bytes_moved_per_step=_bytes_moved(memory, trainable, teacher, peak) * gradient_accumulation_steps,
        gradient_bytes=4 * trainable,
    )


def plan_finetuning(
    config,
    per_device_batch: int,
    num_frames: int,
    precision: str = "bf16",
    num_processes: int = 1,
    max_steps: int = 1000,
    gradient_accumulation_steps: int = 1,
    gradient_checkpointing: bool = False,
    memory_gb: float = 80,
    accelerator: str = "H100 SXM",
    mfu: float = 0.4,
    weight_ema: bool = True,
    freeze_feature_encoder: bool = False,
) -> RunPlan:
    """The plan of an `examples/finetune.py` run: `AaspForAudioClassification(config)` on clips of `num_frames`
    frames (the task's clip length), cross-entropy over `config.num_labels` classes, the weight EMA when
    `weight_ema` (a frozen float32 copy of the whole classifier)."""
    check_plan_arguments(memory_gb, accelerator, mfu, precision, num_processes)
    if per_device_batch < 1:
        raise ValueError(f"--per_device_train_batch_size must be >= 1, got {per_device_batch}")
    model, fake_mode = fake_model(config, "classification")
    if freeze_feature_encoder:
        model.freeze_feature_encoder()
    encoder_count = sum(p.numel() for p in model.aasp.parameters())
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    parameters = {"encoder": _count_parameters(model.aasp), "classifier head": (total - encoder_count, True)}
    if weight_ema:
        parameters["weight EMA (evaluation copy)"] = (total, False)

    def make_inputs(b):
        return {"input_values": (b, num_frames, config.num_mel_bins), "labels": torch.zeros(b, dtype=torch.long)}

    set_gradient_checkpointing(model, gradient_checkpointing)
    peak, counter = measure_fake_step(
        model, fake_mode, "classification", make_inputs(per_device_batch), precision, count_flops=True
    )
    parts = {"classifier fwd+bwd": counter.get_total_flops()}
    if config.patch_embedding == "aape":  # the encoder's dense stem, forward and backward (~2× forward)
        dense = highpass_flops(config, per_device_batch, num_frames)
        dense += 3 * sblu_tap_flops_per_element(config) * per_device_batch * config.sblu_hidden_size * num_frames
        parts["not counted by FlopCounterMode: high-pass, SBLU taps (fwd + ~2× bwd)"] = dense
    dynamic = _dynamic_bytes(
        model, fake_mode, "classification", make_inputs, per_device_batch, precision, gradient_checkpointing, peak
    )
    memory = {"parameters (float32)": 4 * total}
    if weight_ema:
        memory["weight EMA (float32)"] = 4 * total
    memory["AdamW moments (2 × float32 per trainable parameter)"] = 8 * trainable
    if num_processes > 1:
        memory["DDP gradient buckets (float32)"] = 4 * trainable
    memory["activations, gradients, temporaries (measured)"] = peak
    tokens = (num_frames + config.time_patch_size - 1) // config.time_patch_size * config.num_frequency_patches
    description = (
        f"AaspForAudioClassification: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.patch_embedding.upper()} stem, {num_frames} frames × {config.num_mel_bins} mel "
        f"(~{tokens} tokens)"
    )
    return RunPlan(
        kind="fine-tuning",
        description=description,
        per_device_batch=per_device_batch,
        gradient_accumulation_steps=gradient_accumulation_steps,
        num_processes=num_processes,
        precision=precision,
        max_steps=max_steps,
        gradient_checkpointing=gradient_checkpointing,
        parameters=parameters,
        flops_per_micro_batch=parts,
        memory=memory,
        dynamic_bytes=dynamic,
        memory_gib=memory_gb,
        accelerator=ACCELERATORS[accelerator],
        mfu=mfu,
        bytes_moved_per_step=_bytes_moved(memory, trainable, total if weight_ema else 0, peak)
        * gradient_accumulation_steps,
        gradient_bytes=4 * trainable,
    )
