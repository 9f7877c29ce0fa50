"""`make bench`: speed and memory of the AaSP parts, as ratios against a baseline measured in the same run.

Each benchmark times the candidate and its baseline interleaved (median of repeats) in one process, so the ratio
holds even when the absolute numbers drift with the machine's load. Results go to benchmarks/results.json and
benchmarks/results.md (the README links the latter). Nothing here is asserted in the unit tests.

    python benchmarks/run.py [--only sblu,features,encoder,ast,pretrain] [--repeats 7]
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
from aasp_hf.masking import sample_query_indices, sample_view_masks, visible_indices
from aasp_hf.sblu import sblu_magnitude

HERE = Path(__file__).resolve().parent


def median_times(functions: dict, repeats: int) -> dict:
    """Median wall time (ms) of each callable, run interleaved after one warm-up call each."""
    for f in functions.values():
        f()
    samples = {name: [] for name in functions}
    for _ in range(repeats):
        for name, f in functions.items():
            start = time.perf_counter()
            f()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def peak_memory_growth_mib(code: str) -> float:
    """Peak resident memory growth (MiB) of a fresh interpreter running `code` after its imports and set-up.

    `code` must define `setup()` and `run()`; growth = peak RSS during run() − RSS after setup() (Linux: the
    peak is reset through /proc/self/clear_refs before run()).
    """
    import subprocess

    script = (
        "import torch\n"
        "def rss(field):\n"
        "    line = [l for l in open('/proc/self/status') if l.startswith(field)][0]\n"
        "    return int(line.split()[1]) / 1024\n"
        + code
        + "\nstate = setup()\n"
        "open('/proc/self/clear_refs', 'w').write('5')  # reset the peak (VmHWM) to the current RSS\n"
        "base = rss('VmRSS:')\nrun(*state)\nprint(rss('VmHWM:') - base)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


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
    """The straightforward version: build the (B, H, T, K) complex kernel, unfold v, sum, take |·| (Eq. 5)."""
    half = (kernel_size - 1) // 2
    distance = step * (torch.arange(kernel_size, dtype=values.dtype) - half).abs()  # (K,)
    kernel = torch.exp(-(decay[..., None] + 1j * frequency[..., None]) * distance)  # (B, H, T, K) complex
    windows = torch.nn.functional.pad(values, (half, half)).unfold(-1, kernel_size, 1)  # (B, H, T, K)
    return (kernel * windows).sum(-1).abs()


def bench_sblu(repeats):
    B, H, T, K, step = 4, 128, 608, 63, 0.01
    g = torch.Generator().manual_seed(0)
    v = torch.randn(B, H, T, generator=g, requires_grad=True)
    alpha = (15 + 100 * torch.rand(B, H, T, generator=g)).requires_grad_()
    beta = (20 + 290 * torch.rand(B, H, T, generator=g)).requires_grad_()
    ours = lambda: sblu_magnitude(v, alpha, beta, step, K)  # noqa: E731
    base = lambda: materialised_sblu(v, alpha, beta, step, K)  # noqa: E731
    error = (ours() - base()).abs().max().item() / base().abs().max().item()
    times = median_times({"ours": lambda: ours().sum().backward(), "materialised": lambda: base().sum().backward()}, repeats)
    memory = {"ours": saved_for_backward_bytes(ours), "materialised": saved_for_backward_bytes(base)}
    setup = (
        "import sys; sys.path.insert(0, %r)\n"
        "from run import materialised_sblu\n"
        "from aasp_hf.sblu import sblu_magnitude\n"
        "def setup():\n"
        "    g = torch.Generator().manual_seed(0)\n"
        "    v = torch.randn(4, 128, 608, generator=g, requires_grad=True)\n"
        "    a = (15 + 100 * torch.rand(4, 128, 608, generator=g)).requires_grad_()\n"
        "    b = (20 + 290 * torch.rand(4, 128, 608, generator=g)).requires_grad_()\n"
        "    return v, a, b\n"
    ) % str(HERE)
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
        "time_ratio": times["ours"] / times["materialised"],
        "memory_ratio": peak["ours"] / peak["materialised"],
        "saved_for_backward_ratio": memory["ours"] / memory["materialised"],
        "max_relative_difference": error,
        "targets": {"time_ratio": "<= 0.2", "memory_ratio (peak)": "<= 0.05"},
    }


# ----------------------------------------------------------------------------------------------- 2. front end
def bench_features(repeats):
    import torchaudio

    rng = np.random.default_rng(0)
    clips = [rng.standard_normal(160000).astype(np.float32) * 0.1 for _ in range(32)]
    batch = torch.from_numpy(np.stack(clips))
    extractor = AaspFeatureExtractor()
    mel = torchaudio.transforms.MelSpectrogram(
        sample_rate=16000, n_fft=1024, win_length=400, hop_length=160, f_min=50, f_max=8000, n_mels=128,
        power=2.0, norm="slaney", mel_scale="slaney",
    )
    window = torch.hann_window(400)
    functions = {
        "ours": lambda: extractor(clips, sampling_rate=16000, return_tensors="pt"),
        "bare_stft": lambda: torch.stft(batch, 1024, 160, 400, window, center=True, return_complex=True),
        "torchaudio": lambda: ((mel(batch) + 1.1920929e-07).log() + 7.1) / 4.1,
    }
    times = median_times(functions, repeats)
    result = {
        "what": "32 clips of 10 s -> normalised log-mel (128 bins)",
        "ms": times,
        "ratio_to_bare_stft": times["ours"] / times["bare_stft"],
        "speedup_vs_torchaudio": times["torchaudio"] / times["ours"],
        "targets": {"ratio_to_bare_stft": "<= 1.3", "speedup_vs_torchaudio": ">= 2"},
    }
    try:
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
    x = torch.randn(1, 608, 128)
    models = {}
    for stem in ("aape", "spe"):
        torch.manual_seed(0)
        models[stem] = AaspModel(AaspConfig(patch_embedding=stem)).eval()
    with torch.inference_mode():
        times = median_times({stem: (lambda m=m: m(x)) for stem, m in models.items()}, repeats)
    return {
        "what": "AaspModel ViT-B inference, one 6-s clip (608 frames, 304 tokens), float32",
        "ms": times,
        "aape_over_spe": times["aape"] / times["spe"],
        "targets": {"aape_over_spe": "<= 1.10"},
    }


def bench_ast(repeats):
    from transformers import ASTConfig, ASTModel

    # AST with non-overlapping 16×16 patches on 128 × 608: 8 × 38 = 304 tokens (+2 for its CLS/distillation tokens)
    ast = ASTModel(ASTConfig(max_length=608, frequency_stride=16, time_stride=16)).eval()
    ours = AaspModel(AaspConfig(patch_embedding="spe")).eval()
    x = torch.randn(1, 608, 128)
    with torch.inference_mode():
        times = median_times({"aasp_spe": lambda: ours(x), "transformers_AST": lambda: ast(x)}, repeats)
    return {
        "what": "encoder inference at the same token count vs transformers' ASTModel (ViT-B)",
        "ms": times,
        "aasp_over_ast": times["aasp_spe"] / times["transformers_AST"],
        "targets": {"aasp_over_ast": "<= 1.05"},
    }


# ----------------------------------------------------------------------------------------------- 6. pre-training step
def bench_pretrain(repeats):
    results = {}
    for name, kwargs, batch_size in (
        ("tiny", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                      lambda_encoder_reduction=4, predictor_hidden_size=64, predictor_num_attention_heads=4), 8),
        ("vit_b", {}, 2),
    ):
        times = {}
        for stem in ("aape", "spe"):
            torch.manual_seed(0)
            config = AaspConfig(patch_embedding=stem, **kwargs)
            model = AaspForPreTraining(config).train()
            g = torch.Generator().manual_seed(0)
            x = torch.randn(batch_size, 608, 128, generator=g)
            mask = sample_view_masks(batch_size, 4, 8, 38, generator=g)
            inputs = (x, visible_indices(mask), sample_query_indices(mask, generator=g))

            def step(model=model, inputs=inputs):
                model.zero_grad(set_to_none=True)
                model(*inputs).loss.backward()

            times[stem] = median_times({stem: step}, max(2, repeats // 2))[stem]
        results[name] = {
            "batch_size": batch_size,
            "ms_per_step": times,
            "clips_per_s": {k: batch_size / (v / 1e3) for k, v in times.items()},
            "aape_over_spe": times["aape"] / times["spe"],
        }
    return {"what": "pre-training step (M=4 views, fwd+bwd, float32)", **results, "targets": {"aape_over_spe": "<= 1.15"}}


BENCHMARKS = {
    "sblu": bench_sblu,
    "features": bench_features,
    "encoder": bench_encoder,
    "ast": bench_ast,
    "pretrain": bench_pretrain,
}


def to_markdown(results: dict) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Machine: {results['machine']}. Generated by `make bench` (`python benchmarks/run.py`).",
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
    parser.add_argument("--output", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, python {sys.version.split()[0]}",
        "benchmarks": {},
    }
    for name in args.only.split(","):
        print(f"== {name}", flush=True)
        results["benchmarks"][name] = BENCHMARKS[name](args.repeats)
        print(json.dumps(results["benchmarks"][name], indent=2), flush=True)
    Path(args.output + ".json").write_text(json.dumps(results, indent=2))
    Path(args.output + ".md").write_text(to_markdown(results))
    return results


if __name__ == "__main__":
    main()
