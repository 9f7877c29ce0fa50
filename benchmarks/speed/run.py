"""`make bench`: speed and memory of the AaSP parts, as ratios against a baseline measured in the same run.

Each benchmark times the candidate and its baseline interleaved (median of repeats) in one process, so the ratio
holds even when the absolute numbers drift with the machine's load. Results go to benchmarks/speed/results.json and
benchmarks/speed/results.md (the docs link the latter). Nothing here is asserted in the unit tests.

    python benchmarks/speed/run.py [--only sblu,features,pipeline,collate,training_process,log_mel_cache,flops,encoder,
                                           ast,pretrain,checkpoint_hash] [--repeats 7]
    python benchmarks/speed/run.py --device cuda     # on a GPU: -> results_cuda.json / .md, with the GPU's name

With --device cuda the timed work runs on the GPU (the clock is read after torch.cuda.synchronize), memory is
torch.cuda.max_memory_allocated growth, and the pre-training batches are larger; `flops` and `pipeline` stay on
the CPU (they do not depend on the device / are CPU work by nature). With --only, the other benchmarks' entries of
an existing results file are kept.
"""

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForPreTraining, AaspModel
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import parse_command_line
from aasp_hf.data.masking import sample_batch_masks
from aasp_hf import plan
from aasp_hf.modeling_aasp import sblu_magnitude

HERE = Path(__file__).resolve().parent
DEVICE = torch.device("cpu")  # set by --device


def synchronize():
    """Wait for the work queued on the device (CUDA kernels run asynchronously) before the clock is read."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def median_times(functions: dict, repeats: int) -> dict:
    """Median wall time (ms) of each callable, run interleaved after one warm-up call each."""
    for f in functions.values():
        f()
    samples = {name: [] for name in functions}
    for _ in range(repeats):
        for name, f in functions.items():
            synchronize()
            start = time.perf_counter()
            f()
            synchronize()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def device_peak_growth_mib(f) -> float:
    """CUDA: growth of torch.cuda.max_memory_allocated over what was allocated before f() (MiB)."""
    synchronize()
    torch.cuda.reset_peak_memory_stats(DEVICE)
    base = torch.cuda.memory_allocated(DEVICE)
    f()
    synchronize()
    return (torch.cuda.max_memory_allocated(DEVICE) - base) / 2**20


def peak_memory_growth_mib(code: str) -> float:
    """Peak resident memory growth (MiB) of a fresh interpreter running `code` after its imports and set-up.

    `code` must define `setup()` and `run()`; growth = peak RSS during run() − RSS after setup() (Linux: the
    peak is reset through /proc/self/clear_refs before run()). It runs in this folder, so it can `import run`.
    """
    import subprocess

    script = (
        "import torch\n"
        "def rss(field):\n"
        "    line = [l for l in open('/proc/self/status') if l.startswith(field)][0]\n"
        "    return int(line.split()[1]) / 1024\n" + code + "\nstate = setup()\n"
        "open('/proc/self/clear_refs', 'w').write('5')  # reset the peak (VmHWM) to the current RSS\n"
        "base = rss('VmRSS:')\nrun(*state)\nprint(rss('VmHWM:') - base)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=HERE)
    return float(out.stdout.strip().splitlines()[-1])


def live_tensor_peak_mib(f) -> float:
    """torch's own view of the peak: the largest sum of live CPU allocations (MiB) while running f(), from the
    profiler's memory events (aasp_hf.plan.profiler_peak_bytes; what existed before is not counted)."""
    from aasp_hf.plan import profiler_peak_bytes

    return profiler_peak_bytes(f) / 2**20


def saved_for_backward_bytes(f) -> int:
    """Bytes autograd keeps for backward while running f() (tensors saved by every op, counted once each)."""
    seen = {}

    def pack(t):
        seen[(t.data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = f()
    del out
    return sum(seen.values())


# ----------------------------------------------------------------------------------------------- 1. SBLU operator
def materialised_sblu(values, decay, frequency, step, kernel_size):
    """The straightforward version: build the (B, H, T, K) complex kernel, unfold v, sum, take |·| (Eq. 3)."""
    half = (kernel_size - 1) // 2
    distance = step * (torch.arange(kernel_size, dtype=values.dtype, device=values.device) - half).abs()  # (K,)
    kernel = torch.exp(-(decay[..., None] + 1j * frequency[..., None]) * distance)  # (B, H, T, K) complex
    windows = torch.nn.functional.pad(values, (half, half)).unfold(-1, kernel_size, 1)  # (B, H, T, K)
    return (kernel * windows).sum(-1).abs()


def bench_sblu(repeats):
    B, H, T, K, step = 4, 128, 608, 63, 0.01
    g = torch.Generator().manual_seed(0)
    v = torch.randn(B, H, T, generator=g).to(DEVICE).requires_grad_()
    alpha = (15 + 100 * torch.rand(B, H, T, generator=g)).to(DEVICE).requires_grad_()
    beta = (20 + 290 * torch.rand(B, H, T, generator=g)).to(DEVICE).requires_grad_()
    ours = lambda: sblu_magnitude(v, alpha, beta, step, K)  # noqa: E731
    base = lambda: materialised_sblu(v, alpha, beta, step, K)  # noqa: E731
    error = (ours() - base()).abs().max().item() / base().abs().max().item()
    times = median_times(
        {"ours": lambda: ours().sum().backward(), "materialised": lambda: base().sum().backward()}, repeats
    )
    memory = {"ours": saved_for_backward_bytes(ours), "materialised": saved_for_backward_bytes(base)}
    if DEVICE.type == "cuda":
        peak = {}
        for name, f in (("ours", ours), ("materialised", base)):
            v.grad = alpha.grad = beta.grad = None
            peak[name] = device_peak_growth_mib(lambda f=f: f().sum().backward())
        return {
            "what": f"SBLU forward+backward, B=4 H=128 T=608 K=63, float32, on {DEVICE}",
            "ms": times,
            "saved_for_backward_MiB": {k: v / 2**20 for k, v in memory.items()},
            "peak_memory_growth_MiB (torch.cuda.max_memory_allocated)": peak,
            "time_ratio": times["ours"] / times["materialised"],
            "memory_ratio": peak["ours"] / peak["materialised"],
            "max_relative_difference": error,
            "targets": {"time_ratio": "<= 0.2", "memory_ratio (peak)": "<= 0.05"},
        }
    live = {}
    for name, f in (("ours", ours), ("materialised", base)):
        v.grad = alpha.grad = beta.grad = None
        live[name] = live_tensor_peak_mib(lambda f=f: f().sum().backward())
    setup = (
        "from run import materialised_sblu\n"
        "from aasp_hf.modeling_aasp import sblu_magnitude\n"
        "def setup():\n"
        "    g = torch.Generator().manual_seed(0)\n"
        "    v = torch.randn(4, 128, 608, generator=g, requires_grad=True)\n"
        "    a = (15 + 100 * torch.rand(4, 128, 608, generator=g)).requires_grad_()\n"
        "    b = (20 + 290 * torch.rand(4, 128, 608, generator=g)).requires_grad_()\n"
        "    return v, a, b\n"
    )
    peak = {
        "ours": peak_memory_growth_mib(setup + "def run(v, a, b): sblu_magnitude(v, a, b, 0.01, 63).sum().backward()"),
        "materialised": peak_memory_growth_mib(
            setup + "def run(v, a, b): materialised_sblu(v, a, b, 0.01, 63).sum().backward()"
        ),
    }
    return {
        "what": "SBLU forward+backward, B=4 H=128 T=608 K=63, float32",
        "ms": times,
        "saved_for_backward_MiB": {k: v / 2**20 for k, v in memory.items()},
        "peak_memory_growth_MiB": peak,
        "live_tensor_peak_MiB (torch profiler)": live,
        "time_ratio": times["ours"] / times["materialised"],
        "memory_ratio": peak["ours"] / peak["materialised"],
        "saved_for_backward_ratio": memory["ours"] / memory["materialised"],
        "live_tensor_peak_ratio": live["ours"] / live["materialised"],
        "max_relative_difference": error,
        "targets": {"time_ratio": "<= 0.2", "memory_ratio (peak)": "<= 0.05"},
    }


# ----------------------------------------------------------------------------------------------- 2. front end
def bench_features(repeats):
    import torchaudio

    rng = np.random.default_rng(0)
    clips = [rng.standard_normal(160000).astype(np.float32) * 0.1 for _ in range(32)]
    batch = torch.from_numpy(np.stack(clips)).to(DEVICE)
    extractor = AaspFeatureExtractor()
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000,
        n_fft=1024,
        win_length=400,
        hop_length=160,
        f_min=50,
        f_max=8000,
        n_mels=128,
        power=2.0,
        norm="slaney",
        mel_scale="slaney",
    ).to(DEVICE)
    window = torch.hann_window(400, device=DEVICE)
    device = None if DEVICE.type == "cpu" else DEVICE  # ours: numpy clips in, features computed on DEVICE
    functions = {
        "ours": lambda: extractor(clips, sampling_rate=16000, return_tensors="pt", device=device),
        "bare_stft": lambda: torch.stft(batch, 1024, 160, 400, window, center=True, return_complex=True),
        "torchaudio": lambda: ((mel(batch) + 1.1920929e-07).log() + 7.1) / 4.1,
    }
    times = median_times(functions, repeats)
    result = {
        "what": f"32 clips of 10 s -> normalised log-mel (128 bins), on {DEVICE} (ours includes the copy of the "
        "numpy clips to the device; the baselines start from a device tensor)",
        "ms": times,
        "ratio_to_bare_stft": times["ours"] / times["bare_stft"],
        "speedup_vs_torchaudio": times["torchaudio"] / times["ours"],
        "targets": {"ratio_to_bare_stft": "<= 1.3", "speedup_vs_torchaudio": ">= 2"},
    }
    try:
        if DEVICE.type != "cpu":
            raise RuntimeError("ASTFeatureExtractor runs on the CPU only")
        from transformers import ASTFeatureExtractor

        ast = ASTFeatureExtractor()
        result["ms"]["transformers_ASTFeatureExtractor (512-point FFT, reported only)"] = median_times(
            {"ast": lambda: ast(clips, sampling_rate=16000, return_tensors="pt")}, max(1, repeats // 3)
        )["ast"]
    except Exception as error:  # reported only
        result["ast_error"] = repr(error)
    return result


# ----------------------------------------------------------------------------------------------- 3./4. encoder
def bench_encoder(repeats):
    x = torch.randn(1, 608, 128).to(DEVICE)
    models = {}
    for stem in ("aape", "spe"):
        torch.manual_seed(0)
        models[stem] = AaspModel(AaspConfig(patch_embedding=stem)).eval().to(DEVICE)
    with torch.inference_mode():
        times = median_times({stem: (lambda m=m: m(x)) for stem, m in models.items()}, repeats)
    return {
        "what": f"AaspModel ViT-B inference, one 6-s clip (608 frames, 304 tokens), float32, on {DEVICE}",
        "ms": times,
        "aape_over_spe": times["aape"] / times["spe"],
        "targets": {"aape_over_spe": "<= 1.10"},
    }


def bench_ast(repeats):
    from transformers import ASTConfig, ASTModel

    # AST with non-overlapping 16×16 patches on 128 × 608: 8 × 38 = 304 tokens (+2 for its CLS/distillation tokens)
    ast = ASTModel(ASTConfig(max_length=608, frequency_stride=16, time_stride=16)).eval().to(DEVICE)
    ours = AaspModel(AaspConfig(patch_embedding="spe")).eval().to(DEVICE)
    x = torch.randn(1, 608, 128).to(DEVICE)
    with torch.inference_mode():
        times = median_times({"aasp_spe": lambda: ours(x), "transformers_AST": lambda: ast(x)}, repeats)
    return {
        "what": f"encoder inference at the same token count vs transformers' ASTModel (ViT-B), on {DEVICE}",
        "ms": times,
        "aasp_over_ast": times["aasp_spe"] / times["transformers_AST"],
        "targets": {"aasp_over_ast": "<= 1.05"},
    }


# ----------------------------------------------------------------------------------------------- 6. pre-training step
PRETRAIN_CASES = {
    # name: (what, config overrides, batch size)
    "tiny_preset": (
        "the CPU demo's model (examples/configs/pretrain_tiny_cpu.json): D=64, 64 frames, H=16, C=64, K=15",
        None,
        16,
    ),
    "tiny_encoder_paper_stem": (
        "D=64, 2 layers, with the paper-size stem (608 frames, H=128, C=1024, K=63): the stem "
        "dominates — the worst case for the ratio",
        dict(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            lambda_encoder_reduction=4,
            predictor_hidden_size=64,
            predictor_num_attention_heads=4,
        ),
        8,
    ),
    "vit_b": ("the paper's configuration (ViT-B, 608 frames)", {}, 2),
}
CUDA_BATCH_SIZES = {"tiny_preset": 256, "tiny_encoder_paper_stem": 64, "vit_b": 32}  # a GPU needs more work per step


def pretrain_case_config(name: str, stem: str) -> AaspConfig:
    overrides = PRETRAIN_CASES[name][1]
    if overrides is None:
        preset = json.loads((HERE.parents[1] / "examples" / "configs" / "pretrain_tiny_cpu.json").read_text())
        overrides = preset["model_config"]
    return AaspConfig(patch_embedding=stem, **overrides)


def pretrain_inputs(config: AaspConfig, batch_size: int):
    """A batch of random log-mel (B, T, F) with the config's M views of block masks, as pretrain.py builds it."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, config.num_frames, config.num_mel_bins, generator=g)
    masks = sample_batch_masks(config, batch_size, generator=g)
    return x, masks["visible_indices"], masks["query_indices"]  # (B, M, V), (B, M, Q)


def bench_pretrain(repeats):
    results = {}
    models = {}
    for name, (what, _, batch_size) in PRETRAIN_CASES.items():
        batch_size = CUDA_BATCH_SIZES[name] if DEVICE.type == "cuda" else batch_size
        steps = {}
        for stem in ("aape", "spe"):
            torch.manual_seed(0)
            config = pretrain_case_config(name, stem)
            model = AaspForPreTraining(config).train().to(DEVICE)
            inputs = [t.to(DEVICE) for t in pretrain_inputs(config, batch_size)]
            models[name, stem] = model, inputs

            def step(model=model, inputs=inputs):
                model.zero_grad(set_to_none=True)
                model(*inputs).loss.backward()

            steps[stem] = step
        times = median_times(steps, max(3, repeats // 2 + 1))
        results[name] = {
            "what": what,
            "batch_size": batch_size,
            "ms_per_step": times,
            "clips_per_s": {k: batch_size / (v / 1e3) for k, v in times.items()},
            "aape_over_spe": times["aape"] / times["spe"],
        }
        if DEVICE.type == "cuda":  # memory of one step on the GPU, per stem
            memory = {}
            for stem in ("aape", "spe"):
                model, inputs = models.pop((name, stem))
                model.zero_grad(set_to_none=True)
                memory[stem] = device_peak_growth_mib(lambda: model(*inputs).loss.backward())
                del model, inputs
            results[name]["step_peak_memory_growth_MiB (fwd+bwd, torch.cuda.max_memory_allocated)"] = memory
            results[name]["memory_aape_over_spe"] = memory["aape"] / memory["spe"]
        models.clear()
    if DEVICE.type == "cuda":
        return {
            "what": f"pre-training step (M=4 views, fwd+bwd, float32) on {DEVICE}",
            **results,
            "targets": {"aape_over_spe": "<= 1.15"},
        }
    # Memory at ViT-B scale: peak RSS growth of one step (forward + backward) in a fresh interpreter, per stem.
    setup = (
        "from run import pretrain_case_config, pretrain_inputs\n"
        "from aasp_hf import AaspForPreTraining\n"
        "def setup():\n"
        "    torch.manual_seed(0)\n"
        "    config = pretrain_case_config('vit_b', STEM)\n"
        "    return AaspForPreTraining(config).train(), pretrain_inputs(config, 2)\n"
        "def run(model, inputs):\n"
        "    model(*inputs).loss.backward()\n"
    )
    memory = {stem: peak_memory_growth_mib(f"STEM = {stem!r}\n" + setup) for stem in ("aape", "spe")}
    results["vit_b"]["step_peak_memory_growth_MiB (batch 2, fwd+bwd, RSS)"] = memory
    results["vit_b"]["memory_aape_over_spe"] = memory["aape"] / memory["spe"]
    return {
        "what": "pre-training step (M=4 views, fwd+bwd, float32)",
        **results,
        "targets": {"aape_over_spe": "<= 1.15"},
    }


# ----------------------------------------------------------------------------------------------- 5. FLOPs of the stems
def sblu_tap_flops(config, num_sequences: int) -> dict:
    """FLOPs of the dense SBLU arithmetic that FlopCounterMode does not see (`aasp_hf.plan.sblu_tap_flops`,
    which `--plan` uses too; the per-element count is derived there from the SBLU operator's forward in
    aasp_hf/modeling_aasp.py).
    In masked pre-training the taps are a depthwise conv1d per visible token, which the counter does see."""
    return {
        "sblu_taps": plan.sblu_tap_flops(config, num_sequences),
        "sblu_taps_per_element": plan.sblu_tap_flops_per_element(config),
    }


def highpass_flops(config, num_sequences: int) -> int:
    """The zero-phase high-pass is an FFT convolution; counted as its direct equivalent, 2·L per output sample
    (`aasp_hf.plan.highpass_flops`)."""
    return plan.highpass_flops(config, num_sequences)


def appendix_d_terms(config, num_visible: int) -> dict:
    """The paper's Appendix D formulas (FLOPs = 2 per MAC), evaluated with the default configuration as printed."""
    n, d, c_tilde = config.num_patches, config.hidden_size, config.sblu_output_size // config.num_frequency_patches
    f, t, h, c = config.num_mel_bins, config.num_frames, config.sblu_hidden_size, config.sblu_output_size
    taps, k = config.sblu_highpass_num_taps, config.sblu_kernel_size  # both 63 by default
    width = config.lambda_encoder_hidden_size  # D/r
    block = 24 * num_visible * width**2 + 4 * num_visible**2 * width  # QKV + out (8 N d²), MLP ×4 (16 N d²), scores
    terms = {
        "spe (D.1): 2·N·D·16·16": 2 * n * d * 16 * 16,
        "fuse (D.2): 2·N·D·(D+C̃), N = all 304 tokens": 2 * n * d * (d + c_tilde),
        "hpf (D.3): 4·F·T·63": 4 * f * t * taps,
        "sblu depthwise conv (D.4): 2·H·T·K": 2 * h * t * k,
        "sblu projections (D.4): 2·T·(H·F + C·H), dense": 2 * t * (h * f + c * h),
        "lambda encoder (iii): L = 3 standard blocks at D/r = 128 on N_vis tokens": 3 * block,
    }
    as_printed = sum(terms.values())
    return {
        "terms": terms,
        "sum_as_printed": as_printed,
        "sum_as_printed_GFLOPs": as_printed / 1e9,
        "sum_with_fusion_on_visible_tokens_only_GFLOPs": (
            as_printed - terms["fuse (D.2): 2·N·D·(D+C̃), N = all 304 tokens"] + 2 * num_visible * d * (d + c_tilde)
        )
        / 1e9,
        "paper_GFLOPs": 0.55,
    }


def bench_flops(repeats):
    """FLOPs per clip (one 6-s clip, 608 frames, 304 tokens) of the AaPE and SPE stems vs the paper's Appendix D."""
    from torch.utils.flop_counter import FlopCounterMode

    paper = {"aape": 0.55e9, "spe": 0.12e9}
    results = {}
    for stem in ("spe", "aape"):
        torch.manual_seed(0)
        config = AaspConfig(patch_embedding=stem)
        embeddings = AaspModel(config).eval().embeddings
        x = torch.randn(1, config.num_frames, config.num_mel_bins)
        g = torch.Generator().manual_seed(0)
        # one masked view of the clip, as pre-training draws them (the count depends only on V, not on which tokens)
        one_view = sample_batch_masks(config, 1, generator=g)["visible_indices"][:, :1]  # (1, M, V) -> (1, 1, V)
        regimes = {"masked_pretraining (20% visible)": one_view, "all_tokens (inference)": None}
        for regime, views in regimes.items():
            counter = FlopCounterMode(display=False)
            with torch.no_grad(), counter:
                embeddings(x, visible_indices=views)
            per_module = {}
            for name, ops in counter.get_flop_counts().items():
                parts = name.split(".")
                if len(parts) == 2:  # direct children of AaspEmbeddings
                    per_module[parts[1]] = sum(ops.values())
            unattributed = counter.get_total_flops() - sum(per_module.values())
            if unattributed:  # anything computed by AaspEmbeddings itself, outside its submodules
                per_module["embeddings (own ops)"] = unattributed
            entry = {"flop_counter": counter.get_total_flops(), "flop_counter_by_module": per_module}
            if stem == "aape":
                entry["highpass_direct_equivalent"] = highpass_flops(config, 1)
                if views is None:  # dense taps (elementwise); the masked path's per-token conv1d is counted above
                    entry.update(sblu_tap_flops(config, 1))
            analytic = entry.get("sblu_taps", 0) + entry.get("highpass_direct_equivalent", 0)
            entry["total"] = entry["flop_counter"] + analytic
            entry["total_GFLOPs"] = entry["total"] / 1e9
            entry["paper_GFLOPs"] = paper[stem] / 1e9
            entry["relative_to_paper"] = entry["total"] / paper[stem]
            entry["visible_tokens"] = None if views is None else views.shape[-1]
            results.setdefault(stem, {})[regime] = entry
        if stem == "aape":
            num_visible = results[stem]["masked_pretraining (20% visible)"]["visible_tokens"]
            results[stem]["paper_appendix_d_formulas"] = appendix_d_terms(config, num_visible)
    return {
        "what": "FLOPs per clip of the patch-embedding stems (forward; 6-s clip, 304 tokens); a FLOP = one multiply "
        "or add (2 per MAC), as the paper's 0.12 GFLOPs for SPE implies",
        **results,
        "note": "flop_counter = torch.utils.flop_counter.FlopCounterMode (matmuls, convolutions, SDPA); sblu_taps and "
        "highpass_direct_equivalent are counted analytically (see sblu_tap_flops, highpass_flops); norms, "
        "activations, gathers are not counted. paper_appendix_d_formulas evaluates the paper's own formulas with "
        "the default configuration",
        "targets": {"relative_to_paper (masked_pretraining)": "within 0.85 .. 1.15"},
    }


# ----------------------------------------------------------------------------------------------- 7. data path
DATA_PATH_CORES = 12  # of an H100 host's 16 cores, left for decoding (the rest: training processes, the system)


def bench_pipeline(repeats, num_files=48, seconds=10.0, batch_size=16):
    """The training data path, per DataLoader worker: files read as pretrain.py reads `--train_dir` (map-style, and
    as a `--streaming` stream), decoded by `aasp_hf.data.clips` (one process, 1 torch thread: one worker's core),
    then the pre-training collator (random 6-s crop, log-mel, M = 4 masks) in micro-batches, timed by the code
    `--plan` uses (`aasp_hf.plan.time_data_path`). Beside it, the path before soundfile: datasets' own
    decoding (torchcodec opens every file), timed interleaved. The clips/s one H100 needs is the plan's prediction
    for the paper preset (`plan_pretraining`, 40 % MFU assumed)."""
    import tempfile

    import datasets
    import soundfile as sf

    from aasp_hf.data.clips import AudioClips, AudioStream
    from aasp_hf.data.collators import PretrainingCollator
    from aasp_hf.data.synthetic import unlabelled_clips
    from aasp_hf.plan import plan_pretraining, time_data_path

    preset = json.loads((HERE.parents[1] / "examples" / "configs" / "pretrain_paper.json").read_text())
    config = AaspConfig(**preset["model_config"])
    plan = plan_pretraining(config, preset["per_device_train_batch_size"], precision="bf16")
    needed = plan.per_device_batch / plan.step_seconds()["step"]  # clips/s per GPU
    collator = PretrainingCollator(
        AaspFeatureExtractor(feature_size=config.num_mel_bins), config, crop_seconds=preset["crop_seconds"]
    )
    formats = {
        "wav": dict(subtype="PCM_16"),
        "flac": dict(subtype="PCM_16"),
        "mp3": dict(format="MP3", subtype="MPEG_LAYER_III"),
    }
    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory() as tmp:
        sources = {}
        for extension, options in formats.items():
            folder = Path(tmp) / extension
            folder.mkdir()
            for number, clip in enumerate(unlabelled_clips(num_files, 0, seconds)):
                sf.write(folder / f"clip{number:03d}.{extension}", clip, 16000, **options)
            rows = datasets.load_dataset("audiofolder", data_dir=str(folder), drop_labels=True, split="train")
            undecoded = datasets.Audio(sampling_rate=16000, decode=False)
            sources[extension] = AudioClips(rows.cast_column("audio", undecoded))
            if extension in ("wav", "mp3"):  # before: datasets decodes (torchcodec), decode_audio takes its decoder
                sources[f"{extension}_torchcodec_before"] = AudioClips(
                    rows.cast_column("audio", datasets.Audio(sampling_rate=16000))
                )
        stream = datasets.load_dataset(
            "audiofolder", data_dir=str(Path(tmp) / "flac"), drop_labels=True, split="train", streaming=True
        )

        def runner(clips, on_device=False):
            def run():
                source = clips() if callable(clips) else clips
                return time_data_path(source, collator, num_files, batch_size, on_device)

            return run

        runs = {name: runner(clips) for name, clips in sources.items()}
        runs["flac_stream"] = runner(lambda: AudioStream(stream, "audio", batch_size, 1, 0, seed=0, buffer_size=16))
        for extension in formats:  # a worker's share when the log-mel runs on the accelerator: decode, crop, masks
            runs[f"{extension}_features_on_device"] = runner(sources[extension], on_device=True)
        samples = {name: [] for name in runs}
        for _ in range(max(3, repeats // 2)):
            for name, run in runs.items():  # interleaved
                samples[name].append(run())
    rates = {}
    for name, timed in samples.items():
        rates[name] = {
            "decode_clips_per_s": statistics.median(t["clips"] / t["decode_seconds"] for t in timed),
            "collate_clips_per_s": statistics.median(t["clips"] / t["collate_seconds"] for t in timed),
            "decode_crop_collate_clips_per_s": statistics.median(
                t["clips"] / (t["decode_seconds"] + t["collate_seconds"]) for t in timed
            ),
            "wall_clock_decode_crop_collate_clips_per_s": statistics.median(
                t["clips"] / (t["decode_wall_seconds"] + t["collate_wall_seconds"]) for t in timed
            ),
        }
    target = needed / DATA_PATH_CORES
    return {
        "what": f"training data path per DataLoader worker (1 process, 1 torch thread): {num_files} files of "
        f"{seconds:g} s, mono 16 kHz (WAV and FLAC 16-bit PCM, MP3), read as pretrain.py reads --train_dir (and the "
        f"FLAC folder as a --streaming stream) -> decode -> random 6-s crop -> log-mel (128 bins, 608 frames) -> 4 "
        f"masked views, micro-batches of {batch_size}; *_torchcodec_before: datasets' own decoding, as before. Rates "
        f"from the process's CPU time (time.process_time: a core of its own, also on a shared host); the wall-clock "
        f"rate beside them",
        "clips_per_s_per_worker": rates,
        "one_h100_needs_clips_per_s": needed,
        "predicted_step": f"{plan.per_device_batch} clips in {plan.step_seconds()['step'] * 1e3:.1f} ms (--plan, paper "
        f"preset, H100 SXM, MFU 0.4 assumed)",
        "target_clips_per_s_per_worker": target,
        "targets": {
            "decode_crop_collate_clips_per_s (wav, flac, mp3, flac_stream, *_features_on_device)": f">= {target:.0f} (one H100's need / {DATA_PATH_CORES} cores)"
        },
        "met": {
            name: rates[name]["decode_crop_collate_clips_per_s"] >= target
            for name in (
                "wav",
                "flac",
                "mp3",
                "flac_stream",
                "wav_features_on_device",
                "flac_features_on_device",
                "mp3_features_on_device",
            )
        },
    }


def bench_collate(repeats, batch_size=32):
    """The pre-training collator's share of the training process, per core (1 torch thread, CPU time):
    `PretrainingCollator.collate_seeded` (each clip cropped, featurised and drawn for from its own seed, then the
    masks of the whole micro-batch built in one pass, `masking.build_batch_masks`) against the same draws made clip
    by clip through the collator's own call (`collator([clip])` per seed, then concatenated: how `collate_seeded`
    collated before), on 10-s waveforms cropped to 6 s and on cached log-mel (`--log_mel_cache`, where no log-mel
    is computed), paper preset. Both give identical batches (checked here)."""
    from aasp_hf.data.collators import PretrainingCollator

    preset = json.loads((HERE.parents[1] / "examples" / "configs" / "pretrain_paper.json").read_text())
    config = AaspConfig(**preset["model_config"])
    collator = PretrainingCollator(
        AaspFeatureExtractor(feature_size=config.num_mel_bins), config, crop_seconds=preset["crop_seconds"]
    )
    g = torch.Generator().manual_seed(0)
    sources = {
        "waveform_10s": [torch.randn(160_000, generator=g) for _ in range(batch_size)],
        "cached_log_mel_10s": [
            {"log_mel": torch.randn(998, config.num_mel_bins, generator=g)} for _ in range(batch_size)
        ],
    }
    seeds = list(range(batch_size))

    def clip_by_clip(clips):
        parts = []
        for clip, seed in zip(clips, seeds):
            collator.generator.manual_seed(seed)
            parts.append(collator([clip]))
        return {key: torch.cat([part[key] for part in parts]) for key in parts[0]}

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    results = {}
    try:
        for name, clips in sources.items():
            candidate, baseline = collator.collate_seeded(clips, seeds), clip_by_clip(clips)
            identical = all(torch.equal(candidate[key], baseline[key]) for key in baseline)
            times = {"clip_by_clip": [], "collate_seeded": []}
            for _ in range(repeats):  # interleaved, CPU time of this process
                for label, run in (
                    ("clip_by_clip", lambda: clip_by_clip(clips)),
                    ("collate_seeded", lambda: collator.collate_seeded(clips, seeds)),
                ):
                    start = time.process_time()
                    run()
                    times[label].append(time.process_time() - start)
            rates = {label: batch_size / statistics.median(values) for label, values in times.items()}
            results[name] = {
                "identical_batches": identical,
                "clip_by_clip_clips_per_s": rates["clip_by_clip"],
                "collate_seeded_clips_per_s": rates["collate_seeded"],
                "speedup": rates["collate_seeded"] / rates["clip_by_clip"],
            }
    finally:
        torch.set_num_threads(threads)
    return {
        "what": f"pre-training collator per core (1 torch thread, CPU time), micro-batches of {batch_size}, paper "
        "preset: collate_seeded (masks built for the micro-batch in one pass) against the same draws "
        "collated clip by clip (before)",
        **results,
    }


def bench_training_process(repeats, batch_size=128, seconds=10.0):
    """The training process's CPU time per micro-batch of 128 (paper preset, 1 torch thread, CPU time of this process
    only), before and after collation moved into the loader workers, timed interleaved:

    - before: the training process replaced failed clips and collated the decoded micro-batch itself
      (`collate_seeded`; with --features_on_device all but the log-mel, `draw_seeded`, since the log-mel ran on the
      GPU: its launches are not timed here without a GPU);
    - after: it receives a finished micro-batch from one DataLoader worker (`CollatedMicroBatches`), names its failed
      clips (`FailureLog`), hashes its indices and finishes it (`PretrainingCollator.finish`: nothing without
      --features_on_device; the log-mel on the GPU with it, left out here without a GPU).

    The clips are 10-s waveforms in memory (the worker decodes nothing; its work is not counted anyway). Target:
    <= 10 % of the predicted step (--plan, paper preset, H100 SXM, MFU 0.4 assumed)."""
    import hashlib
    import tempfile
    from functools import partial

    from aasp_hf.data.clips import AudioClips, CollatedMicroBatches, FailureLog, load_micro_batches, replace_failed
    from aasp_hf.data.collators import PretrainingCollator
    from aasp_hf.data.synthetic import unlabelled_clips
    from aasp_hf.plan import plan_pretraining
    from aasp_hf.plan.data_path import _cycled_order

    preset = json.loads((HERE.parents[1] / "examples" / "configs" / "pretrain_paper.json").read_text())
    config = AaspConfig(**preset["model_config"])
    plan = plan_pretraining(config, preset["per_device_train_batch_size"], precision="bf16")
    step = plan.step_seconds()["step"]
    clips = AudioClips(list(unlabelled_clips(16, 0, seconds)))
    collator = PretrainingCollator(
        AaspFeatureExtractor(feature_size=config.num_mel_bins), config, crop_seconds=preset["crop_seconds"]
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    results = {}
    try:
        for on_device in (False, True):
            collate = collator.draw_seeded if on_device else collator.collate_seeded
            order = partial(_cycled_order, len(clips), batch_size)
            received = load_micro_batches(CollatedMicroBatches(clips, order, collate), 1)
            before_order = order()
            times = {"before": [], "after": []}
            with tempfile.TemporaryDirectory() as folder:
                failure_log, digest = FailureLog(Path(folder) / "failures.txt"), hashlib.sha256()
                next(received)  # the worker's start
                for _ in range(repeats):  # interleaved
                    _, rows, seeds = next(before_order)
                    examples = [clips[row] for row in rows]
                    start = time.process_time()
                    examples, failed = replace_failed(examples)
                    failure_log(failed)
                    collate(examples, seeds)
                    times["before"].append(time.process_time() - start)
                    start = time.process_time()
                    item = next(received)
                    failure_log(item["failed"])
                    digest.update(str(item["indices"]).encode())
                    if not on_device:
                        collator.finish(item["batch"])
                    times["after"].append(time.process_time() - start)
            del received
            medians = {label: statistics.median(values) for label, values in times.items()}
            results["features_on_device" if on_device else "features_on_cpu"] = {
                "before_ms": medians["before"] * 1e3,
                "after_ms": medians["after"] * 1e3,
                "before_share_of_step": medians["before"] / step,
                "after_share_of_step": medians["after"] / step,
                "after_met": medians["after"] <= 0.10 * step,
            }
    finally:
        torch.set_num_threads(threads)
    return {
        "what": f"the training process's CPU time per micro-batch of {batch_size} (paper preset, 1 torch thread, "
        "this process's CPU time): before, collating the decoded clips itself; after, receiving a finished "
        "micro-batch from a loader worker. With --features_on_device the log-mel's GPU launches are not "
        "timed (no GPU in this benchmark's CPU run)",
        "predicted_step_ms": step * 1e3,
        "target": f"<= 10 % of the predicted step: <= {0.10 * step * 1e3:.2f} ms per micro-batch of {batch_size}",
        **results,
    }


def _evict_from_page_cache(paths):
    """Ask the OS to drop these files' pages from its page cache (`posix_fadvise` DONTNEED after `fsync`: our own
    files only, nothing system-wide), so that the next read comes from the disk. Returns False where unsupported."""
    import os

    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def bench_log_mel_cache(repeats, num_files=300, seconds=10.0, batch_size=128):
    """`--log_mel_cache` per core: building it (`build_log_mel_cache` with num_workers=1: one DataLoader worker
    decodes, featurises and writes; its CPU time from the reaped worker's rusage) from `num_files` synthetic 10-s
    clips (`data.synthetic.unlabelled_clips`: tones, modulated tones, chirps, noise bursts, plus background noise)
    written as 16-bit 16-kHz WAV with soundfile; the bytes it holds per clip; and reading it as a loader worker does
    (`time_data_path` on a `LogMelCache`: `__getitem__` reads the .npy, then `collate_seeded` crops 6 s, normalises
    and draws the masks, paper preset, micro-batches of 128, 1 torch thread, CPU time). Beside it, the read alone, as
    `LogMelCache.__getitem__` does it (the whole file, `np.load`) and through a memory map (`mmap_mode="r"`), timed
    interleaved and checked to give identical arrays, with the files in the OS page cache (just written) and, once,
    after dropping them from it (`posix_fadvise`), read from this machine's disk."""
    import hashlib
    import math
    import os
    import resource
    import tempfile

    import soundfile as sf

    from aasp_hf.data.cache import LogMelCache, build_log_mel_cache
    from aasp_hf.data.collators import PretrainingCollator
    from aasp_hf.data.synthetic import unlabelled_clips
    from aasp_hf.plan import plan_pretraining, time_data_path

    preset = json.loads((HERE.parents[1] / "examples" / "configs" / "pretrain_paper.json").read_text())
    config = AaspConfig(**preset["model_config"])
    plan = plan_pretraining(config, preset["per_device_train_batch_size"], precision="bf16")
    needed = plan.per_device_batch / plan.step_seconds()["step"]  # clips/s per GPU
    extractor = AaspFeatureExtractor(feature_size=config.num_mel_bins)
    collator = PretrainingCollator(extractor, config, crop_seconds=preset["crop_seconds"])

    def children_cpu():
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    def read(path, mmap):  # LogMelCache.__getitem__'s read, with or without a memory map
        return torch.from_numpy(np.load(path, mmap_mode="r" if mmap else None).astype(np.float32))

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for number, clip in enumerate(unlabelled_clips(num_files, 0, seconds)):
            paths.append(os.path.join(tmp, "wav", f"clip{number:03d}.wav"))
            os.makedirs(os.path.dirname(paths[-1]), exist_ok=True)
            sf.write(paths[-1], clip, 16000, subtype="PCM_16")
        cache_dir = os.path.join(tmp, "cache")
        children, cpu, wall = children_cpu(), time.process_time(), time.perf_counter()
        summary = build_log_mel_cache(paths, cache_dir, extractor, num_workers=1)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        worker_cpu = children_cpu() - children
        cache = LogMelCache(cache_dir, extractor)
        files = [os.path.join(cache_dir, name) for name in cache.files]
        sizes = [os.path.getsize(path) for path in files]
        on_disk = [os.stat(path).st_blocks * 512 for path in files]
        digests = [hashlib.sha1(clip_id.encode("utf-8")).hexdigest() for clip_id in cache.ids]
        named_by_sha1 = all(name == f"{digest[:2]}/{digest}.npy" for digest, name in zip(digests, cache.files))
        identical = all(torch.equal(read(path, False), read(path, True)) for path in files)

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            reads = {"whole_file": [], "mmap": []}
            for _ in range(repeats):  # interleaved, CPU time of this process
                for label in reads:
                    start = time.process_time()
                    for path in files:
                        read(path, label == "mmap")
                    reads[label].append(len(files) / (time.process_time() - start))
            cold = {}
            for label in ("whole_file", "mmap"):
                if not _evict_from_page_cache(files):
                    break
                cpu_start, wall_start = time.process_time(), time.perf_counter()
                for path in files:
                    read(path, label == "mmap")
                cold[label] = {
                    "cpu_clips_per_s": len(files) / (time.process_time() - cpu_start),
                    "wall_clock_clips_per_s": len(files) / (time.perf_counter() - wall_start),
                }
        finally:
            torch.set_num_threads(threads)
        timed = [time_data_path(cache, collator, 3 * batch_size, batch_size) for _ in range(max(3, repeats // 2))]
    read_rate = statistics.median(t["clips"] / t["decode_seconds"] for t in timed)
    collate_rate = statistics.median(t["clips"] / t["collate_seconds"] for t in timed)
    worker_rate = statistics.median(t["clips"] / (t["decode_seconds"] + t["collate_seconds"]) for t in timed)
    build_rate = summary["num_written"] / worker_cpu
    bytes_per_clip = statistics.median(sizes)
    as2m = 2_000_000
    return {
        "what": f"--log_mel_cache per core: built from {num_files} synthetic {seconds:g}-s clips (tones, modulated "
        f"tones, chirps, noise bursts + background noise) written as 16-bit 16-kHz WAV, build_log_mel_cache "
        f"num_workers=1; read as a loader worker reads it (LogMelCache.__getitem__ + collate_seeded: 6-s crop, "
        f"normalise, 4 masked views; paper preset, micro-batches of {batch_size}, 1 torch thread, CPU time); files "
        f"in the OS page cache unless marked cold",
        "build": {
            "clips_written": summary["num_written"],
            "failed": summary["num_failed"],
            "worker_cpu_seconds": worker_cpu,
            "main_process_cpu_seconds": cpu,
            "wall_seconds": wall,
            "clips_per_s_per_core": build_rate,
            "as2m_extrapolated_core_hours": as2m / build_rate / 3600,
        },
        "disk": {
            "frames_per_clip": cache.num_frames[0],
            "bins": cache.settings["feature_size"],
            "dtype": "float16",
            "bytes_per_clip": bytes_per_clip,
            "allocated_bytes_per_clip": statistics.median(on_disk),
            "as2m_extrapolated_bytes": as2m * bytes_per_clip,
            "subfolders_used": len({name.split("/")[0] for name in cache.files}),
            "named_by_sha1_of_clip_id": named_by_sha1,
        },
        "read_only_clips_per_s": {
            "whole_file": statistics.median(reads["whole_file"]),
            "mmap": statistics.median(reads["mmap"]),
            "identical_arrays": identical,
            "cold_once": cold,
        },
        "loader_worker_clips_per_s": {
            "read": read_rate,
            "crop_collate": collate_rate,
            "read_crop_collate": worker_rate,
        },
        "one_h100_needs_clips_per_s": needed,
        "workers_per_gpu_needed": math.ceil(needed / worker_rate),
        "disk_read_per_gpu_bytes_per_s": needed * bytes_per_clip,
    }


# ----------------------------------------------------------------------------------------------- checkpoint hashes
HASH_CANDIDATES = ("sha256", "blake2b", "sha1", "md5")


def bench_checkpoint_hash(repeats):
    """What the manifest's content hashes add to a checkpoint of the paper preset's model (AaSP ViT-B student,
    EMA teacher, predictor, AdamW moments), on the CPU: `accelerator.save_state` of that model into a fresh folder
    (the save's own time) against hashing the files it wrote (`checkpointing.file_hash`, what `save_checkpoint` adds,
    reading them back right after the write as it does, in parallel threads, one per file), interleaved, median of
    `repeats` (at most 3: each save writes ~1.5 GB). The hashlib candidates hash the same files once each, one file
    after the other in one thread (their single-core speed)."""
    import hashlib
    import shutil
    import tempfile

    from accelerate import Accelerator

    from aasp_hf.training.checkpointing import HASH, file_hashes

    preset = json.loads((HERE.parents[1] / "examples" / "configs" / "pretrain_paper.json").read_text())
    model = AaspForPreTraining(AaspConfig(**preset["model_config"]))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    for p in optimizer.param_groups[0]["params"]:
        p.grad = torch.zeros_like(p)
    optimizer.step()  # AdamW's moments exist (a checkpoint of a running job holds them)
    optimizer.zero_grad(set_to_none=True)
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    work = Path(tempfile.mkdtemp(prefix="aasp_ckpt_bench_"))
    save_s, hash_s = [], []
    try:
        for repeat in range(min(repeats, 3)):
            folder = work / f"checkpoint-{repeat}"
            started = time.perf_counter()
            accelerator.save_state(str(folder))
            save_s.append(time.perf_counter() - started)
            files = sorted(p for p in folder.rglob("*") if p.is_file())
            started = time.perf_counter()
            file_hashes(files)
            hash_s.append(time.perf_counter() - started)
            if repeat < min(repeats, 3) - 1:
                shutil.rmtree(folder)
        sizes = {p.name: p.stat().st_size for p in files}
        total = sum(sizes.values())
        rates = {}
        for name in HASH_CANDIDATES:
            started = time.perf_counter()
            for path in files:
                digest = hashlib.new(name)
                with open(path, "rb") as f:
                    while block := f.read(1 << 22):
                        digest.update(block)
            rates[name] = total / 1e9 / (time.perf_counter() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save, hashing = statistics.median(save_s), statistics.median(hash_s)
    return {
        "what": "the manifest's content hashes vs the checkpoint save they protect (paper preset, CPU, fp32)",
        "hash": HASH,
        "files_bytes": sizes,
        "checkpoint_gb": total / 1e9,
        "save_state_s": save,
        "hash_s": hashing,
        "hash_over_save": hashing / save,
        "hash_gb_per_s": total / 1e9 / hashing,
        "candidates_gb_per_s": rates,
        "repeats": min(repeats, 3),
    }


BENCHMARKS = {
    "sblu": bench_sblu,
    "features": bench_features,
    "pipeline": bench_pipeline,
    "collate": bench_collate,
    "training_process": bench_training_process,
    "log_mel_cache": bench_log_mel_cache,
    "flops": bench_flops,
    "encoder": bench_encoder,
    "ast": bench_ast,
    "pretrain": bench_pretrain,
    "checkpoint_hash": bench_checkpoint_hash,
}


def to_markdown(results: dict) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Machine: {results['machine']}. Generated by `make bench` (`python benchmarks/speed/run.py`).",
        "Ratios compare the candidate with a baseline timed interleaved in the same process.",
        "",
    ]
    for name, r in results["benchmarks"].items():
        lines += [f"## {name}: {r.get('what', '')}", "", "```json", json.dumps(r, indent=2), "```", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(BENCHMARKS))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", default=None, help="default: benchmarks/speed/results (CPU), results_cuda (GPU)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    args = parse_command_line(parser, argv)
    global DEVICE
    DEVICE = torch.device(args.device)
    output = args.output or str(HERE / ("results" if DEVICE.type == "cpu" else f"results_{DEVICE.type}"))
    torch.set_num_threads(max(1, torch.get_num_threads()))
    machine = (
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, python {sys.version.split()[0]}"
    )
    if DEVICE.type == "cuda":
        machine += f"; GPU: {torch.cuda.get_device_name(DEVICE)}, CUDA {torch.version.cuda}"
    results = {"machine": machine, "device": str(DEVICE), "benchmarks": {}}
    previous = Path(output + ".json")
    if previous.is_file() and set(args.only.split(",")) != set(BENCHMARKS):  # --only: the others' results are kept
        results["benchmarks"] = json.loads(previous.read_text()).get("benchmarks", {})
    for name in args.only.split(","):
        print(f"== {name}", flush=True)
        results["benchmarks"][name] = BENCHMARKS[name](args.repeats)
        print(json.dumps(results["benchmarks"][name], indent=2), flush=True)
    Path(output + ".json").write_text(json.dumps(results, indent=2))
    Path(output + ".md").write_text(to_markdown(results))
    return results


if __name__ == "__main__":
    run_script(main, "run.py")
