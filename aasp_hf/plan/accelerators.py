"""The accelerators a plan can name (datasheet figures), the precisions it knows, the paper's own throughput, the
memory kept free when the largest batch is computed, and the check of the `--plan_*` arguments."""

import math
from dataclasses import dataclass

GiB = 2**30


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
        AcceleratorSpec(
            "H100 SXM",
            989e12,
            67e12,
            3.35e12,
            80,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM)",
            450e9,
            "NVLink 4, 900 GB/s bidirectional per GPU",
        ),
        # same datasheet, H100 PCIe column: BF16 1,513 TFLOPS with sparsity (756 dense), FP32 51 TFLOPS, 80 GB HBM2e
        # at 2.0 TB/s; PCIe Gen5 128 GB/s bidirectional (its NVLink bridge joins pairs of cards only)
        AcceleratorSpec(
            "H100 PCIe",
            756e12,
            51e12,
            2.0e12,
            80,
            "NVIDIA H100 Tensor Core GPU datasheet (PCIe)",
            64e9,
            "PCIe Gen5 x16, 128 GB/s bidirectional",
        ),
        # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: BF16 1,979 TFLOPS with sparsity (989 dense),
        # FP32 67 TFLOPS, 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s bidirectional
        AcceleratorSpec(
            "H200",
            989e12,
            67e12,
            4.8e12,
            141,
            "NVIDIA H200 Tensor Core GPU datasheet (SXM)",
            450e9,
            "NVLink 4, 900 GB/s bidirectional per GPU",
        ),
        # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: BF16 312 TFLOPS dense (624 with sparsity),
        # FP32 19.5 TFLOPS, 80 GB HBM2e at 2,039 GB/s; NVLink 3, 600 GB/s bidirectional
        AcceleratorSpec(
            "A100 80GB",
            312e12,
            19.5e12,
            2.039e12,
            80,
            "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)",
            300e9,
            "NVLink 3, 600 GB/s bidirectional per GPU",
        ),
        # NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS with sparsity (121 dense), FP32 30.3 TFLOPS, 24 GB GDDR6
        # at 300 GB/s; PCIe Gen4 x16, 64 GB/s bidirectional
        AcceleratorSpec(
            "L4",
            121e12,
            30.3e12,
            300e9,
            24,
            "NVIDIA L4 Tensor Core GPU datasheet",
            32e9,
            "PCIe Gen4 x16, 64 GB/s bidirectional",
        ),
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
        raise ValueError(
            f"--plan_accelerator {accelerator!r} is not known; use one of: "
            + ", ".join(repr(name) for name in ACCELERATORS)
        )
    if not (isinstance(mfu, (int, float)) and 0 < mfu <= 1):
        raise ValueError(f"--plan_mfu must be in (0, 1] (the assumed fraction of peak FLOP/s), got {mfu!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"--mixed_precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if not (isinstance(num_processes, int) and num_processes >= 1):
        raise ValueError(f"--plan_num_processes must be an integer >= 1, got {num_processes!r}")
