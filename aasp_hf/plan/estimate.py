"""What a pre-training or fine-tuning run will cost, computed before it runs, without a GPU (`--plan`).

    python examples/pretrain.py --config examples/configs/pretrain_paper.json --plan [--plan_num_processes 4]

`plan_pretraining` / `plan_finetuning` return a `RunPlan`; `format_plan` prints it as a plain-text table:

1. Parameters of each part (student, EMA teacher, predictor, contrastive head; or encoder and classifier head), and
   which of them train.
2. FLOPs per optimiser step and device. The model is built on the meta device (no weights are initialised: the
   initialisers would read random values, which fake tensors cannot give), its parameters become fake tensors
   (`FakeTensorMode`: shapes and dtypes, no storage), and one step runs on fake inputs shaped as the collator makes
   them (`AaspForPreTraining.forward` with `visible_indices` / `query_indices` drawn by `aasp_hf.training.masking`),
   under `torch.utils.flop_counter.FlopCounterMode`. Nothing is allocated, so the configured per-device batch is
   run as it is (128 clips × 4 views for the paper) in about a second. Three corrections:
   - FlopCounterMode's weight-gradient formula for `convolution_backward` ignores `groups` and counts a grouped
     convolution as a dense one: G× too many FLOPs for G groups (for the per-token SBLU taps, a depthwise conv1d
     over B·M·V·H/F̃ rows, that is ~10⁵× too many). `conv_backward_flop` replaces it (each gradient of a
     convolution costs what its forward costs).
   - What FlopCounterMode does not see (it counts matmuls, convolutions and attention only) is added analytically:
     the dense SBLU taps of the teacher's stem (`SbluMagnitudeFunction`, elementwise arithmetic; `sblu_tap_flops`)
     and the zero-phase high-pass, an FFT convolution counted as its direct equivalent (`highpass_flops`), on every
     clip (teacher) and every masked view (student). Norms, activations, softmax and gathers are not counted (the
     usual convention for model FLOPs and MFU).
   - FlopCounterMode counts attention only for the CUDA kernels; the CPU kernel that the fake step runs gets the
     same formula (`cpu_attention_flop`).
3. Peak memory per device: parameters (float32 under accelerate's mixed precision, which keeps float32 weights and
   autocasts the forward), gradients, AdamW's two float32 moments, the EMA teacher (or the fine-tuning weight EMA),
   DDP's gradient buckets when there is more than one process, and the activations. The activations, gradients and
   temporaries are measured, not modelled: `LiveTensorBytes` follows the storage of every tensor that an operator
   creates during the fake step (forward, loss and backward) and frees it when its last reference goes, and its
   peak is the peak of a real step's live tensor bytes (the test suite checks this against a real CPU step).
   bf16/fp16: the fake step runs under `torch.autocast` (CPU rules), so every activation has the dtype autocast
   really gives it: matmul and convolution outputs bf16; the SBLU, norms, softmax and losses float32; autocast's
   bf16 copies of the weights are counted too.
   The step runs the accelerator's code path: the SBLU's custom autograd function in one whole-tensor pass, as on
   any non-CPU device (`accelerator_code_path`; on the CPU it works block by block to keep its temporaries small).
   The largest batch that fits: the dynamic peak is measured at two batch sizes and extrapolated linearly per clip.
4. Step time for a named accelerator (`ACCELERATORS`, datasheet figures): the larger of the compute time at an
   ASSUMED model-FLOPs utilisation (MFU; `--plan_mfu`, default 0.4: an assumption, not a measurement) and the time
   to move the bytes every step must move at the datasheet bandwidth (AdamW and EMA updates, activations written
   once and read once).
5. DDP's gradient all-reduce within one node: a ring all-reduce sends and receives 2(n − 1)/n × the float32
   gradients per GPU at the interconnect's one-way datasheet bandwidth (`AcceleratorSpec.interconnect`; NVLink 4 on
   H100 SXM: 900 GB/s bidirectional, 450 GB/s each way), printed beside the step it mostly overlaps. Beside the
   prediction, the paper's own end-to-end throughput (2.83 batches/s, its predictor ablation), read as its
   pre-training run's global batch of 512 clips on 4 H100s, and the MFU that rate implies by this FLOP count.
6. The data side (`data_path_plan`, pretrain.py only), MEASURED on this host: the run's data source decoded,
   cropped and collated as training does it, on one core; the clips/s per DataLoader worker, the workers per GPU
   the predicted step needs and whether this host's cores can run them. Host overhead, logging and checkpoint
   steps and all-reduce between nodes are not modelled.
"""

import math
import weakref
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

GiB = 2**30


# ----------------------------------------------------------------------------------------------- accelerators
@dataclass(frozen=True)
class AcceleratorSpec:
    """Datasheet figures of one accelerator: peak dense (no sparsity) tensor-core bf16 and plain fp32 FLOP/s, memory
    bandwidth in bytes/s, memory in GiB; `source` names the datasheet. `interconnect`: bytes/s each way between the
    GPUs of one node (half the bidirectional figure datasheets give), `interconnect_name` what it is."""

    name: str
    bf16_flops: float
    fp32_flops: float
    bandwidth: float
    memory_gib: float
    source: str
    interconnect: float = 0.0
    interconnect_name: str = ""


ACCELERATORS = {
    spec.name: spec
    for spec in (
        # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: BF16 1,979 TFLOPS with sparsity (989 dense),
        # FP32 67 TFLOPS, 80 GB HBM3 at 3.35 TB/s
        # NVLink 4: 900 GB/s bidirectional per GPU, 450 GB/s each way
        AcceleratorSpec("H100 SXM", 989e12, 67e12, 3.35e12, 80, "NVIDIA H100 Tensor Core GPU datasheet (SXM)",
                        450e9, "NVLink 4, 900 GB/s bidirectional per GPU"),
        # same datasheet, H100 PCIe column: BF16 1,513 TFLOPS with sparsity (756 dense), FP32 51 TFLOPS, 80 GB HBM2e
        # at 2.0 TB/s; PCIe Gen5 128 GB/s bidirectional (its NVLink bridge joins pairs of cards only)
        AcceleratorSpec("H100 PCIe", 756e12, 51e12, 2.0e12, 80, "NVIDIA H100 Tensor Core GPU datasheet (PCIe)",
                        64e9, "PCIe Gen5 x16, 128 GB/s bidirectional"),
        # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: BF16 1,979 TFLOPS with sparsity (989 dense),
        # FP32 67 TFLOPS, 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s bidirectional
        AcceleratorSpec("H200", 989e12, 67e12, 4.8e12, 141, "NVIDIA H200 Tensor Core GPU datasheet (SXM)",
                        450e9, "NVLink 4, 900 GB/s bidirectional per GPU"),
        # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: BF16 312 TFLOPS dense (624 with sparsity),
        # FP32 19.5 TFLOPS, 80 GB HBM2e at 2,039 GB/s; NVLink 3, 600 GB/s bidirectional
        AcceleratorSpec("A100 80GB", 312e12, 19.5e12, 2.039e12, 80, "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)",
                        300e9, "NVLink 3, 600 GB/s bidirectional per GPU"),
        # NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS with sparsity (121 dense), FP32 30.3 TFLOPS, 24 GB GDDR6
        # at 300 GB/s; PCIe Gen4 x16, 64 GB/s bidirectional
        AcceleratorSpec("L4", 121e12, 30.3e12, 300e9, 24, "NVIDIA L4 Tensor Core GPU datasheet",
                        32e9, "PCIe Gen4 x16, 64 GB/s bidirectional"),
    )
}
PRECISIONS = ("no", "bf16", "fp16")
# The paper's own throughput (its predictor ablation: "end-to-end training throughput", 2.83 batches/s with the
# cross-attention predictor) and the pre-training run it belongs to (its hyper-parameter table: a total batch of 512
# on 4 H100-80GB GPUs). The ablation does not restate its batch: read here as that run's global batch of 512.
PAPER_BATCHES_PER_SECOND = 2.83
PAPER_GLOBAL_BATCH = 512
PAPER_NUM_GPUS = 4
# Memory kept free for the CUDA context, NCCL buffers and the caching allocator's fragmentation when the largest
# batch that fits is computed: an ASSUMPTION (10 % of the device memory), not a measurement.
MEMORY_HEADROOM = 0.10


def check_plan_arguments(memory_gb: float, accelerator: str, mfu: float, precision: str, num_processes: int):
    """ValueError naming the argument and its valid values when one of the `--plan_*` arguments is out of range."""
    if not (isinstance(memory_gb, (int, float)) and math.isfinite(memory_gb) and memory_gb > 0):
        raise ValueError(f"--plan_memory_gb must be a number > 0 (GiB per device), got {memory_gb!r}")
    if accelerator not in ACCELERATORS:
        raise ValueError(f"--plan_accelerator {accelerator!r} is not known; use one of: "
                         + ", ".join(repr(name) for name in ACCELERATORS))
    if not (isinstance(mfu, (int, float)) and 0 < mfu <= 1):
        raise ValueError(f"--plan_mfu must be in (0, 1] (the assumed fraction of peak FLOP/s), got {mfu!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"--mixed_precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if not (isinstance(num_processes, int) and num_processes >= 1):
        raise ValueError(f"--plan_num_processes must be an integer >= 1, got {num_processes!r}")


# ----------------------------------------------------------------------------------------------- FLOPs
def sblu_tap_flops(config, num_sequences: int) -> int:
    """FLOPs of the dense SBLU arithmetic that FlopCounterMode does not see (it counts matmuls/convolutions only),
    forward, for `num_sequences` clips of `config.num_frames` frames.

    Counted from the implementation (aasp_hf/sblu.py, forward): per (sequence, hidden channel, frame) element, with
    c = (K−1)/2 taps per side, every tap d = 1..c costs a + b (1) and two addcmul (2 each) [analytic phase: + a − b
    (1)], and every d < c the running power p ← p·z, one complex multiply (6 real FLOPs); set-up z = exp(−Δα)·(cos,
    −sin)(Δβ) ≈ 8 (transcendentals counted as 1), |r| = sqrt(re² + im²) 4, 2·Γ·|r| with Γ of Eq. (6) ≈ 14.
    In masked pre-training the student's taps are a depthwise conv1d per visible token, which the counter does see.
    """
    return sblu_tap_flops_per_element(config) * num_sequences * config.sblu_hidden_size * config.num_frames


def sblu_tap_flops_per_element(config) -> int:
    """FLOPs per (sequence, hidden channel, frame) element of the dense SBLU (see `sblu_tap_flops`)."""
    half = (config.sblu_kernel_size - 1) // 2
    per_tap = 6 if config.sblu_phase == "analytic" else 5
    return per_tap * half + 6 * (half - 1) + 8 + 4 + 14


def highpass_flops(config, num_sequences: int, num_frames: int | None = None) -> int:
    """The zero-phase high-pass is an FFT convolution; counted as its direct equivalent, 2·L per output sample
    (L = 2·taps − 1, the forward–backward kernel), over F mel bins and T frames of `num_sequences` sequences."""
    frames = config.num_frames if num_frames is None else num_frames
    return 2 * (2 * config.sblu_highpass_num_taps - 1) * num_sequences * config.num_mel_bins * frames


def _forward_conv_flops(x_shape, w_shape, out_shape, transposed: bool) -> int:
    """2 · batch · output positions · C_out · (C_in / groups) · kernel: the weight shape (C_out, C_in/groups, *k)
    already carries the groups; for a transposed convolution the input plays the output's role."""
    batch = x_shape[0]
    positions = math.prod(x_shape[2:] if transposed else out_shape[2:])
    return 2 * batch * positions * math.prod(w_shape)


def conv_backward_flop(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                       _output_padding, _groups, output_mask, out_shape, **kwargs) -> int:
    """`aten.convolution_backward`: each requested gradient (input, weight) costs what the forward costs.

    Replaces FlopCounterMode's formula, whose weight-gradient term treats a grouped convolution as dense (it
    multiplies the batch by the whole transposed input and gradient, G× too much for G groups)."""
    forward = _forward_conv_flops(x_shape, w_shape, grad_out_shape, transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def cpu_attention_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """`aten._scaled_dot_product_flash_attention_for_cpu` (what SDPA runs on CPU tensors, fake ones included): the
    formula FlopCounterMode uses for the CUDA flash / efficient kernels (4·B·h·S_q·S_k·d), which it does not apply to
    the CPU kernel (it would count no attention at all)."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def cpu_attention_backward_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                                **kwargs) -> int:
    """The backward of `cpu_attention_flop`'s kernel, with FlopCounterMode's formula for the CUDA kernels'."""
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def flop_counter():
    """FlopCounterMode with the grouped-convolution fix (`conv_backward_flop`) and the CPU attention kernel counted
    (`cpu_attention_flop`): the fake step runs on the CPU's operators, a GPU step on the CUDA ones."""
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    return FlopCounterMode(display=False, custom_mapping={  # each formula receives shapes (FlopCounterMode wraps it)
        aten.convolution_backward: conv_backward_flop,
        aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention_flop,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_attention_backward_flop,
    })


# ----------------------------------------------------------------------------------------------- memory
class LiveTensorBytes(TorchDispatchMode):
    """Live bytes of the tensors that operators create while the mode is on, and their peak.

    Every operator's output storage is counted once (views share their base's storage) when it is created and
    uncounted when it is freed (a weak reference to the storage; PyTorch keeps one Python object per storage, so
    its finaliser runs exactly when the storage is released). Storages that existed before (`ignore`: parameters,
    buffers, optimiser state) are not counted. Works on real and on fake tensors (a fake tensor's storage has the
    size the real one would have). Gradients are operator outputs, so they count from the moment autograd makes them.
    """

    def __init__(self, ignore=()):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._known = WeakIdKeyDictionary()  # storage -> True, by identity
        for tensor in ignore:
            self._known[tensor.untyped_storage()] = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                if storage in self._known:
                    continue
                nbytes = storage.nbytes()
                self._known[storage] = True
                self.current += nbytes
                self.peak = max(self.peak, self.current)
                weakref.finalize(storage, self._free, nbytes)
        return out

    def _free(self, nbytes):
        self.current -= nbytes


def profiler_peak_bytes(function) -> int:
    """Peak of the bytes that PyTorch's CPU allocator holds for tensors while `function` runs, from the profiler's
    memory events (every allocation and free the c10 CPU allocator reports, with its size; what existed before is
    not counted). This is the CPU counterpart of `torch.cuda.max_memory_allocated` growth, and it sees what the
    dispatch-level tracker of the plan cannot: allocations made inside kernels, workspaces, autograd's own buffers."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        function()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return peak


@contextmanager
def accelerator_code_path():
    """Runs the SBLU's custom autograd function as on an accelerator: one whole-tensor pass (`aasp_hf.sblu._blocks`
    gives every non-CPU device one block; on the CPU it cuts the tensors into cache-sized blocks, whose temporaries
    an accelerator does not have). The arithmetic is the same; only the size of the temporaries differs."""
    from unittest import mock

    from .. import sblu

    with mock.patch.object(sblu, "_blocks", lambda values, half: [(Ellipsis,)]):
        yield


def fake_model(config, kind: str):
    """(model, fake_mode): `AaspForPreTraining` ("pretraining") or `AaspForAudioClassification` ("classification")
    built on the meta device (instant; no initialiser runs on data), its parameters and buffers then made fake CPU
    tensors of the same shapes and dtypes. In training mode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .. import AaspForAudioClassification, AaspForPreTraining

    model_class = AaspForPreTraining if kind == "pretraining" else AaspForAudioClassification
    with torch.device("meta"):
        model = model_class(config)
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with fake_mode:
        model.to_empty(device="cpu")
    return model.train(), fake_mode


def pretraining_inputs(config, batch_size: int, seed: int = 0) -> dict:
    """Real index tensors as `PretrainingCollator` makes them (M views, V visible and Q query tokens per view, drawn
    by `aasp_hf.training.masking`) and the shape of `input_values`; the log-mel itself is made where it is used."""
    from ..training.masking import sample_query_indices, sample_view_masks, visible_indices

    c = config
    generator = torch.Generator().manual_seed(seed)
    mask = sample_view_masks(batch_size, c.mask_num_views, c.num_frequency_patches, c.num_time_patches,
                             mask_ratio=c.mask_ratio, block_sizes=c.mask_block_sizes, generator=generator)
    queries = sample_query_indices(mask, c.mask_query_ratio, generator=generator)  # (B, M, Q)
    return {"input_values": (batch_size, c.num_frames, c.num_mel_bins), "visible_indices": visible_indices(mask),
            "query_indices": queries}


def _autocast(precision: str):
    if precision == "no":
        return nullcontext()
    return torch.autocast("cpu", dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


def run_step(model, kind: str, inputs: dict, precision: str):
    """One forward (under autocast for bf16/fp16, as accelerate runs it) and backward of the loss, on the tensors
    `inputs` describes: `input_values` a shape (made here, inside whatever modes are on, so that it is counted),
    the rest tensors."""
    values = torch.randn(inputs["input_values"])  # (B, T, F)
    with _autocast(precision):
        if kind == "pretraining":
            loss = model(values, inputs["visible_indices"], inputs["query_indices"]).loss
        else:
            mask = torch.ones(values.shape[:2], dtype=torch.long)  # (B, T)
            logits = model(input_values=values, attention_mask=mask).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), inputs["labels"])
    loss.backward()


def _static_tensors(model):
    return [*model.parameters(), *model.buffers()]


def measure_fake_step(model, fake_mode, kind, inputs, precision, count_flops=False):
    """(peak dynamic bytes, FlopCounterMode or None) of one fake step; gradients are cleared before and after."""
    model.zero_grad(set_to_none=True)
    counter = flop_counter() if count_flops else nullcontext()
    live = LiveTensorBytes(ignore=_static_tensors(model))
    with accelerator_code_path(), fake_mode, counter, live:
        run_step(model, kind, inputs, precision)
    model.zero_grad(set_to_none=True)
    return live.peak, (counter if count_flops else None)


def set_gradient_checkpointing(model, enabled: bool):
    """As `examples/pretrain.py` turns it on (transformers >= 5 renamed the method)."""
    if enabled:
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    else:
        getattr(model, "activation_checkpointing_disable", model.gradient_checkpointing_disable)()


# ----------------------------------------------------------------------------------------------- the plan
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


def plan_pretraining(config, per_device_batch: int, precision: str = "bf16", num_processes: int = 1,
                     max_steps: int = 1000, gradient_accumulation_steps: int = 1,
                     gradient_checkpointing: bool = False, memory_gb: float = 80, accelerator: str = "H100 SXM",
                     mfu: float = 0.4, patch_embedding_frozen: bool = False) -> RunPlan:
    """The plan of an `examples/pretrain.py` run of `AaspForPreTraining(config)` (see the module docstring)."""
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
    peak, counter = measure_fake_step(model, fake_mode, "pretraining", make_inputs(per_device_batch), precision,
                                      count_flops=True)
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
        parts["not counted by FlopCounterMode: high-pass (teacher + student)"] = (
            highpass_flops(config, per_device_batch) + highpass_flops(config, student_rows))
        parts["not counted by FlopCounterMode: teacher's dense SBLU taps"] = sblu_tap_flops(config, per_device_batch)

    dynamic = _dynamic_bytes(model, fake_mode, "pretraining", make_inputs, per_device_batch, precision,
                             gradient_checkpointing, peak)
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
    description = (f"AaspForPreTraining: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
                   f"{config.patch_embedding.upper()} stem, {config.num_frames} frames × {config.num_mel_bins} mel "
                   f"({config.num_patches} tokens); {num_views} views per clip, {view_tokens[0]} visible and "
                   f"{view_tokens[1]} query tokens per view")
    return RunPlan(
        kind="pre-training", description=description, per_device_batch=per_device_batch,
        gradient_accumulation_steps=gradient_accumulation_steps, num_processes=num_processes, precision=precision,
        max_steps=max_steps, gradient_checkpointing=gradient_checkpointing, parameters=parameters,
        flops_per_micro_batch=parts, memory=memory, dynamic_bytes=dynamic, memory_gib=memory_gb,
        accelerator=ACCELERATORS[accelerator], mfu=mfu,
        bytes_moved_per_step=_bytes_moved(memory, trainable, teacher, peak) * gradient_accumulation_steps,
        gradient_bytes=4 * trainable,
    )


def plan_finetuning(config, per_device_batch: int, num_frames: int, precision: str = "bf16", num_processes: int = 1,
                    max_steps: int = 1000, gradient_accumulation_steps: int = 1, gradient_checkpointing: bool = False,
                    memory_gb: float = 80, accelerator: str = "H100 SXM", mfu: float = 0.4, weight_ema: bool = True,
                    freeze_feature_encoder: bool = False) -> RunPlan:
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
    parameters = {"encoder": _count_parameters(model.aasp),
                  "classifier head": (total - encoder_count, True)}
    if weight_ema:
        parameters["weight EMA (evaluation copy)"] = (total, False)

    def make_inputs(b):
        return {"input_values": (b, num_frames, config.num_mel_bins),
                "labels": torch.zeros(b, dtype=torch.long)}

    set_gradient_checkpointing(model, gradient_checkpointing)
    peak, counter = measure_fake_step(model, fake_mode, "classification", make_inputs(per_device_batch), precision,
                                      count_flops=True)
    parts = {"classifier fwd+bwd": counter.get_total_flops()}
    if config.patch_embedding == "aape":  # the encoder's dense stem, forward and backward (~2× forward)
        dense = highpass_flops(config, per_device_batch, num_frames)
        dense += 3 * sblu_tap_flops_per_element(config) * per_device_batch * config.sblu_hidden_size * num_frames
        parts["not counted by FlopCounterMode: high-pass, SBLU taps (fwd + ~2× bwd)"] = dense
    dynamic = _dynamic_bytes(model, fake_mode, "classification", make_inputs, per_device_batch, precision,
                             gradient_checkpointing, peak)
    memory = {"parameters (float32)": 4 * total}
    if weight_ema:
        memory["weight EMA (float32)"] = 4 * total
    memory["AdamW moments (2 × float32 per trainable parameter)"] = 8 * trainable
    if num_processes > 1:
        memory["DDP gradient buckets (float32)"] = 4 * trainable
    memory["activations, gradients, temporaries (measured)"] = peak
    tokens = (num_frames + config.time_patch_size - 1) // config.time_patch_size * config.num_frequency_patches
    description = (f"AaspForAudioClassification: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
                   f"{config.patch_embedding.upper()} stem, {num_frames} frames × {config.num_mel_bins} mel "
                   f"(~{tokens} tokens)")
    return RunPlan(
        kind="fine-tuning", description=description, per_device_batch=per_device_batch,
        gradient_accumulation_steps=gradient_accumulation_steps, num_processes=num_processes, precision=precision,
        max_steps=max_steps, gradient_checkpointing=gradient_checkpointing, parameters=parameters,
        flops_per_micro_batch=parts, memory=memory, dynamic_bytes=dynamic, memory_gib=memory_gb,
        accelerator=ACCELERATORS[accelerator], mfu=mfu,
        bytes_moved_per_step=_bytes_moved(memory, trainable, total if weight_ema else 0, peak)
        * gradient_accumulation_steps,
        gradient_bytes=4 * trainable,
    )


# ----------------------------------------------------------------------------------------------- the table
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
        f"Plan of a {plan.kind} run: an ESTIMATE computed without a GPU (aasp_hf.training.plan)",
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
        row(f"largest batch within {plan.memory_gib:g} GiB, gradient checkpointing {'on' if checkpointing else 'off'}",
            f"{plan.max_batch(checkpointing):,} clips", f"({_bytes((high - low) / (b2 - b1))} per clip)")
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

    rows += ["", f"Gradient all-reduce per step (DDP, ring: each GPU sends and receives 2(n − 1)/n × "
             f"{_bytes(plan.gradient_bytes)} of float32 gradients; {spec.interconnect_name}, "
             f"{spec.interconnect / 1e9:g} GB/s each way: {spec.source})"]
    for n in (plan.num_processes,) if plan.num_processes > 1 else (4, 8):
        seconds = plan.allreduce_seconds(n)
        row(f"{n} GPUs of one node{'' if n == plan.num_processes else ' (if launched so)'}", _duration(seconds),
            f"({seconds / times['step']:.0%} of the step; DDP overlaps all but its last bucket with the backward)")
    if plan.kind == "pre-training":
        paper_per_gpu = PAPER_BATCHES_PER_SECOND * PAPER_GLOBAL_BATCH / PAPER_NUM_GPUS
        ours_per_gpu = plan.per_device_batch * plan.gradient_accumulation_steps / times["step"]
        rows += ["", f"The paper's reported throughput: {PAPER_BATCHES_PER_SECOND} batches/s end to end (its predictor "
                 f"ablation, cross-attention predictor), read as global batches of {PAPER_GLOBAL_BATCH} clips on "
                 f"{PAPER_NUM_GPUS} H100s (its pre-training run; the ablation does not restate its batch)"]
        row("paper: clips/s per GPU", f"{paper_per_gpu:,.0f}",
            f"({PAPER_BATCHES_PER_SECOND * PAPER_GLOBAL_BATCH:,.0f} clips/s on {PAPER_NUM_GPUS} GPUs)")
        row("this plan: clips/s per GPU", f"{ours_per_gpu:,.0f}", f"({ours_per_gpu / paper_per_gpu:.1f}× the paper's)")
        per_clip = plan.flops_per_step / (plan.per_device_batch * plan.gradient_accumulation_steps)
        implied_mfu = per_clip * paper_per_gpu / plan.peak_flops()
        row("MFU the paper's rate gives by this plan's FLOP count", f"{implied_mfu:.3f}",
            "(for the paper's ViT-B configuration only)")
    rows.append("  not modelled: data loading (pretrain.py --plan times it on this host), all-reduce between nodes, "
                "logging and checkpoint steps, host overhead")
    return "\n".join(rows) + "\n"


# ----------------------------------------------------------------------------------------------- the data path
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
    import itertools
    import time

    from ..data.clips import AudioStream, replace_failed
    from ..training.data_order import clip_seed

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
    and read as `--train_dir` reads them. Returns (the lines to print, the figures)."""
    import dataclasses
    import os
    import tempfile

    import soundfile as sf

    from .. import AaspFeatureExtractor
    from ..data.clips import load_clips
    from ..data.collators import PretrainingCollator

    batch_size = max(1, min(plan.per_device_batch, 32, num_clips))
    collator = PretrainingCollator(AaspFeatureExtractor(feature_size=config.num_mel_bins), config,
                                   crop_seconds=data_args.crop_seconds, generator=torch.Generator().manual_seed(seed),
                                   student_eq_strength=data_args.student_eq_strength)
    sources = [name for name in ("dataset", "train_dir", "dataset_name") if getattr(data_args, name) is not None]
    with tempfile.TemporaryDirectory() as folder:
        if sources or data_args.synthetic_clips > 0:
            read = dataclasses.replace(data_args, dataloader_num_workers=0)
            what = (f"--{sources[0]} {getattr(data_args, sources[0])}" if sources else
                    f"--synthetic_clips {data_args.synthetic_clips} (arrays in memory: nothing to decode)")
            what += ", as a stream" if data_args.streaming else ""
        else:
            from ..data.synthetic import unlabelled_clips

            for number, clip in enumerate(unlabelled_clips(min(num_clips, 32), seed, 10.0)):
                sf.write(os.path.join(folder, f"clip{number:03d}.wav"), clip, 16000, subtype="PCM_16")
            read = dataclasses.replace(data_args, train_dir=folder, streaming=False, dataloader_num_workers=0)
            what = ("none given, so synthetic 10-s clips written as 16-bit 16-kHz WAV files and read as --train_dir "
                    "reads them (give --train_dir, --dataset or --dataset_name, with --streaming or not, to time "
                    "your own)")
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
    return "\n".join(rows) + "\n", figures


# ----------------------------------------------------------------------------------------------- the scripts' --plan
def launch_environment() -> tuple[int, str | None, bool]:
    """(number of processes, mixed precision or None, is the main process) as `accelerate launch` / torchrun set
    them in the environment (WORLD_SIZE, ACCELERATE_MIXED_PRECISION, RANK); 1, None, True for a plain `python`."""
    import os

    return (int(os.environ.get("WORLD_SIZE", "1")), os.environ.get("ACCELERATE_MIXED_PRECISION"),
            int(os.environ.get("RANK", "0")) == 0)


def print_pretraining_plan(model_args, args, data_args=None) -> dict:
    """`examples/pretrain.py --plan`: the plan of the run its arguments describe, printed by the main process (under
    `accelerate launch` every process would otherwise print it). The model configuration comes from
    `--model_config` (a JSON file, an inline object or a preset's object) or `--init_from`'s config.json; no
    weights or output folder are touched. With `data_args` and `--plan_data_clips` > 0, the data path is timed on
    this host too (`data_path_plan`: the run's data source is read, nothing is written but a temporary folder).
    Returns {"plan": the table, "data": the data path's figures (when timed)}."""
    import json
    from pathlib import Path

    from .. import AaspConfig

    if model_args.init_from is not None:
        config = AaspConfig.from_pretrained(model_args.init_from)
    else:
        fields = model_args.model_config or {}
        if isinstance(fields, str):
            fields = json.loads(fields) if fields.lstrip().startswith("{") else json.loads(Path(fields).read_text())
        config = AaspConfig(**fields)
    world, launched_precision, is_main = launch_environment()
    plan = plan_pretraining(
        config, args.per_device_train_batch_size, precision=args.mixed_precision or launched_precision or "no",
        num_processes=args.plan_num_processes or world, max_steps=args.max_steps,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        gradient_checkpointing=args.gradient_checkpointing, memory_gb=args.plan_memory_gb,
        accelerator=args.plan_accelerator, mfu=args.plan_mfu,
        patch_embedding_frozen=args.patch_embedding_lr_scale == 0,
    )
    table = format_plan(plan)
    if is_main:
        print(table, flush=True)
    if data_args is None or args.plan_data_clips <= 0 or not is_main:
        return {"plan": table}
    lines, figures = data_path_plan(plan, config, data_args, args.plan_data_clips, args.seed)
    print(lines, flush=True)
    return {"plan": table + "\n" + lines, "data": figures}


def print_finetuning_plan(args) -> dict:
    """`examples/finetune.py --plan`: the plan of the run its arguments describe (see `print_pretraining_plan`).
    The encoder's configuration is read from `--model_name_or_path`'s config.json (no weights); the clip length
    from `--clip_seconds` or the task's EVAR length (`--task`, or `--dataset`'s task); the global batch as the
    script makes it up (`total_train_batch_size`: gradient accumulation on fewer processes)."""
    from .. import AaspConfig, AaspFeatureExtractor
    from ..data import evar_clip_seconds, evar_task
    from ..training.arguments import gradient_accumulation_for

    config = AaspConfig.from_pretrained(args.model_name_or_path, drop_path_rate=args.drop_path_rate)
    if args.synthetic_per_class > 0:
        seconds = args.clip_seconds or 1.0  # the script's synthetic demo clips
    elif args.dataset is None and args.task is None and args.clip_seconds is None:
        raise ValueError("--plan needs the clip length: give --dataset, --task or --clip_seconds")
    else:
        seconds = evar_clip_seconds(evar_task(args.dataset or args.task, args.task), args.clip_seconds)
    num_frames = AaspFeatureExtractor(feature_size=config.num_mel_bins).num_frames(int(round(seconds * 16000)))
    world, launched_precision, is_main = launch_environment()
    world = args.plan_num_processes or world
    accumulation = gradient_accumulation_for(args.total_train_batch_size, args.per_device_train_batch_size, world,
                                             args.gradient_accumulation_steps)
    plan = plan_finetuning(
        config, args.per_device_train_batch_size, num_frames, precision=args.mixed_precision or launched_precision
        or "no", num_processes=world, max_steps=args.max_steps, gradient_accumulation_steps=accumulation,
        gradient_checkpointing=getattr(args, "gradient_checkpointing", False), memory_gb=args.plan_memory_gb,
        accelerator=args.plan_accelerator, mfu=args.plan_mfu, weight_ema=args.ema_decay > 0,
        freeze_feature_encoder=args.freeze_feature_encoder,
    )
    table = format_plan(plan)
    if is_main:
        print(table, flush=True)
    return {"plan": table}
