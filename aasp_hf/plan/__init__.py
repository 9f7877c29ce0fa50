"""What a pre-training or fine-tuning run will cost, computed before it runs, without a GPU (`--plan`).

Modules: `accelerators` (datasheets, precisions, the paper's throughput, the `--plan_*` checks), `counting` (FLOPs),
`memory` (live tensor bytes), `fake_step` (the step on fake tensors), `estimate` (`RunPlan`, `plan_pretraining`,
`plan_finetuning`), `report` (`format_plan`), `data_path` (the data side, timed on this host), `measure` (the plan
beside real steps, `--plan_measure`), `cli` (the scripts' `--plan`). This package sits above `training/`, `data/`
and the model files: it builds the model classes itself.

    python examples/pretrain.py --config examples/configs/pretrain_paper.json --plan [--plan_num_processes 4]

`plan_pretraining` / `plan_finetuning` return a `RunPlan`; `format_plan` prints it as a plain-text table:

1. Parameters of each part (student, EMA teacher, predictor, contrastive head; or encoder and classifier head), and
   which of them train.
2. FLOPs per optimiser step and device. The model is built on the meta device (no weights are initialised: the
   initialisers would read random values, which fake tensors cannot give), its parameters become fake tensors
   (`FakeTensorMode`: shapes and dtypes, no storage), and one step runs on fake inputs shaped as the collator makes
   them (`AaspForPreTraining.forward` with `visible_indices` / `query_indices` drawn by
   `aasp_hf.data.masking.sample_batch_masks`), under `torch.utils.flop_counter.FlopCounterMode`. Nothing is
   allocated, so the configured per-device batch is run as it is (128 clips × 4 views for the paper) in about a
   second. Three corrections:
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
   cropped and collated as a loader worker does it, on one core; the clips/s per worker, the workers per GPU the
   predicted step needs and whether this host's cores can run them; and the training process's CPU time per
   micro-batch it receives from a worker, as a share of the predicted step. Logging and checkpoint steps and
   all-reduce between nodes are not modelled.
7. `--plan_measure N` (pretrain.py; `measure`): the plan checked on the machine it runs on. N real optimiser steps
   of the same run (its compile, precision, batch, views, data source and workers, `--features_on_device`), after an
   untimed warm-up, each figure measured beside the plan's (step time, clips/s per device, MFU, peak memory, data
   wait, all-reduce), flagged with its likely cause when more than 15 % off; written to `plan_measured.json`.
"""

from .accelerators import ACCELERATORS, PRECISIONS, AcceleratorSpec, check_plan_arguments
from .cli import launch_environment, print_finetuning_plan, print_pretraining_plan
from .counting import flop_counter, highpass_flops, sblu_tap_flops, sblu_tap_flops_per_element
from .data_path import data_path_plan, time_data_path
from .estimate import RunPlan, plan_finetuning, plan_pretraining
from .fake_step import accelerator_code_path, fake_model, measure_fake_step, pretraining_inputs, run_step
from .memory import LiveTensorBytes, profiler_peak_bytes
from .measure import accelerator_of, compare, format_measured, measure_pretraining
from .report import format_plan

__all__ = [
    "ACCELERATORS",
    "PRECISIONS",
    "AcceleratorSpec",
    "LiveTensorBytes",
    "RunPlan",
    "accelerator_code_path",
    "accelerator_of",
    "check_plan_arguments",
    "compare",
    "data_path_plan",
    "fake_model",
    "flop_counter",
    "format_measured",
    "format_plan",
    "highpass_flops",
    "launch_environment",
    "measure_fake_step",
    "measure_pretraining",
    "plan_finetuning",
    "plan_pretraining",
    "pretraining_inputs",
    "print_finetuning_plan",
    "print_pretraining_plan",
    "profiler_peak_bytes",
    "run_step",
    "sblu_tap_flops",
    "sblu_tap_flops_per_element",
    "time_data_path",
]
