"""The Lambda encoder's SBLU parameters for one clip (paper Sec. Qualitative Interpretability Analysis, Fig. analysis).

    python examples/visualize_sblu.py --model_name_or_path runs/pt/encoder --audio clip.wav --output_dir runs/fig
    python examples/visualize_sblu.py --model_name_or_path runs/pt/encoder --synthetic_label am_30hz

Top: the normalised log-mel spectrogram the model sees, with the P_time × P_freq patch grid. Middle: the estimated
decay α (1/s) and bottom: the estimated frequency β/2π (Hz), per time patch (columns) and frequency group (rows,
each the mean over the group's H/F̃ channels — 16 (α, β) pairs per patch in the paper's setting). The frequency
axis is bounded by [β_min, β_max] / 2π (3.125–50 Hz at Δ = 10 ms, P_time = 16), the alias-prone modulation band.

A model with the SPE stem has no SBLU: that is an error. A non-adaptive SBLU has one static (α, β) per channel:
they are shown, constant over time, and `adaptive` is false in the results.

Steps: 1. encoder and feature extractor, 2. the clip (a file, decoded to 16 kHz mono, or a synthetic demo clip),
3. one forward pass, the Lambda encoder's (α, β) captured by a forward hook (exactly what the model used),
4. the figure (`sblu_parameters.png`), the arrays (`sblu_parameters.npz`), `all_results.json` and `results.md`.
A rerun with the same arguments and outputs present returns the stored results.
"""

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

import aasp_hf  # noqa: F401  (registers the Auto* classes)
from aasp_hf.utils.entry_points import run_script
from aasp_hf.evaluation import load_frozen_encoder
from aasp_hf.training.arguments import parse_arguments

logger = logging.getLogger(__name__)
SAMPLE_RATE = 16000


@dataclass
class VisualizeArguments:
    model_name_or_path: str = field(metadata={"help": "a saved AaspModel with the AaPE stem"})
    audio: str | None = field(default=None, metadata={"help": "an audio file (any rate; resampled to 16 kHz)"})
    synthetic_label: str = field(default="am_30hz", metadata={"help": "without --audio: a demo label to synthesise"})
    seconds: float | None = field(default=None, metadata={"help": "keep the first N seconds (synthetic: its length)"})
    seed: int = field(default=0)
    device: str | None = field(default=None)
    output_dir: str = field(default="runs/sblu_visualization")


def parse_args(argv=None) -> VisualizeArguments:
    """CLI, or one JSON file, or `--config file.json` whose values the remaining CLI arguments override."""
    (args,) = parse_arguments(VisualizeArguments, argv)
    return args


def load_clip(args) -> np.ndarray:
    if args.audio is not None:
        from aasp_hf.data import decode_audio

        waveform = decode_audio(args.audio, SAMPLE_RATE)
    else:
        from aasp_hf.data.synthetic import LABELS, synth_clip

        if args.synthetic_label not in LABELS:
            raise ValueError(f"--synthetic_label {args.synthetic_label!r}: use one of {LABELS}.")
        waveform = synth_clip(args.synthetic_label, np.random.default_rng(args.seed), args.seconds or 2.0)
    if args.seconds is not None:
        waveform = waveform[: int(round(args.seconds * SAMPLE_RATE))]
    return waveform


@torch.no_grad()
def sblu_parameters(model, input_values, attention_mask):
    """One forward pass; returns (decay α, frequency β) as float64 numpy (T̃, F̃, H/F̃) in 1/s and rad/s, and whether
    they are adaptive. Raises ValueError for a model without SBLU (SPE stem)."""
    config = model.config
    if config.patch_embedding != "aape":
        raise ValueError(
            f"{config.patch_embedding!r} stem: this model has no SBLU / Lambda encoder to visualise "
            f"(patch_embedding must be 'aape')."
        )
    embeddings = model.embeddings
    num_groups = config.num_frequency_patches
    if embeddings.lambda_encoder is None:  # non-adaptive: static (α, β) per hidden channel
        decay, frequency = embeddings.sblu.static_parameters()  # (H,) each
        num_time_patches = math.ceil(input_values.shape[1] / config.time_patch_size)
        shape = (num_time_patches, num_groups, -1)
        decay = decay.reshape(1, num_groups, -1).expand(*shape)  # (H,) -> (T̃, F̃, H/F̃), constant over time
        frequency = frequency.reshape(1, num_groups, -1).expand(*shape)
        return decay.double().cpu().numpy(), frequency.double().cpu().numpy(), False
    captured = {}
    hook = embeddings.lambda_encoder.register_forward_hook(lambda module, inputs, output: captured.update(out=output))
    try:
        model(input_values=input_values, attention_mask=attention_mask)
    finally:
        hook.remove()
    decay, frequency = captured["out"]  # (1, N, H/F̃) each, time-major tokens
    decay = decay[0].reshape(-1, num_groups, decay.shape[-1])  # (N, H/F̃) -> (T̃, F̃, H/F̃)
    frequency = frequency[0].reshape(-1, num_groups, frequency.shape[-1])
    return decay.double().cpu().numpy(), frequency.double().cpu().numpy(), True


def plot(path: Path, log_mel, decay, frequency_hz, config, frequency_range_hz, decay_min, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    num_frames, num_bins = log_mel.shape
    num_time_patches, num_groups = decay.shape[:2]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True, constrained_layout=True)
    extent = [0, num_time_patches * config.time_patch_size, 0, num_bins]
    image = axes[0].imshow(log_mel.T, origin="lower", aspect="auto", cmap="magma", extent=[0, num_frames, 0, num_bins])
    for t in range(0, num_time_patches * config.time_patch_size + 1, config.time_patch_size):
        axes[0].axvline(t, color="white", lw=0.4, alpha=0.6)
    for f in range(0, num_bins + 1, config.frequency_patch_size):
        axes[0].axhline(f, color="white", lw=0.4, alpha=0.6)
    axes[0].set_ylabel("mel bin")
    axes[0].set_title(title, fontsize=9)
    fig.colorbar(image, ax=axes[0], label="normalised log-mel")

    # (T̃, F̃) means over each group's channels, drawn as images: rows = frequency groups, columns = time patches.
    panels = (
        (axes[1], decay.mean(-1), "decay α (1/s)", "viridis", (decay_min, None)),
        (axes[2], frequency_hz.mean(-1), "frequency β/2π (Hz)", "cividis", frequency_range_hz),
    )
    for ax, values, label, cmap, (low, high) in panels:
        image = ax.imshow(
            values.T,
            origin="lower",
            aspect="auto",
            cmap=cmap,
            extent=extent,
            vmin=low,
            vmax=high,
            interpolation="nearest",
        )
        ax.set_ylabel("frequency group")
        ax.set_yticks(np.arange(num_groups) * config.frequency_patch_size + config.frequency_patch_size / 2)
        ax.set_yticklabels([str(g) for g in range(num_groups)])
        fig.colorbar(image, ax=ax, label=label)
    axes[2].set_xlabel(f"frame (10 ms); patch grid of {config.time_patch_size} frames")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    figure, arrays, results_file = (
        output_dir / n for n in ("sblu_parameters.png", "sblu_parameters.npz", "all_results.json")
    )
    if figure.is_file() and arrays.is_file() and results_file.is_file():
        stored = json.loads(results_file.read_text())
        if stored.get("arguments") == asdict(args):
            print(f"outputs for these arguments already in {output_dir}; nothing to do")
            return stored
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    progress = tqdm(total=4, desc="visualize SBLU", unit="step")

    print(f"1. encoder from {args.model_name_or_path}")
    model, feature_extractor = load_frozen_encoder(args.model_name_or_path, device)
    config = model.config
    if config.patch_embedding != "aape":
        raise ValueError(
            f"{args.model_name_or_path} uses the {config.patch_embedding!r} stem: it has no SBLU / "
            f"Lambda encoder to visualise (patch_embedding must be 'aape')."
        )
    progress.update()

    waveform = load_clip(args)
    source = args.audio or f"synthetic {args.synthetic_label}"
    print(f"2. clip: {source}, {len(waveform) / SAMPLE_RATE:.2f} s")
    inputs = feature_extractor(waveform, sampling_rate=SAMPLE_RATE, return_tensors="pt")
    input_values, attention_mask = inputs["input_values"].to(device), inputs["attention_mask"].to(device)
    progress.update()

    print("3. forward pass, Lambda encoder outputs")
    decay, frequency, adaptive = sblu_parameters(model, input_values, attention_mask)  # (T̃, F̃, H/F̃) each
    real_patches = int(math.ceil(int(attention_mask.sum()) / config.time_patch_size))
    decay, frequency = decay[:real_patches], frequency[:real_patches]  # drop padding-only time patches
    frequency_hz = frequency / (2 * math.pi)
    embeddings_sblu = model.embeddings.sblu
    beta_range = (embeddings_sblu.frequency_min, embeddings_sblu.frequency_max)  # rad/s
    beta_range_hz = tuple(b / (2 * math.pi) for b in beta_range)
    progress.update()

    print("4. figure")
    log_mel = inputs["input_values"][0, : int(attention_mask.sum())].cpu().numpy()  # (T, F)
    title = (
        f"{Path(str(args.model_name_or_path)).name} — {source}: "
        f"{'adaptive' if adaptive else 'static (non-adaptive)'} SBLU, {decay.shape[-1]} (α, β) pairs per patch"
    )
    plot(figure, log_mel, decay, frequency_hz, config, beta_range_hz, embeddings_sblu.decay_min, title)
    np.savez(arrays, decay=decay, frequency=frequency, frequency_hz=frequency_hz, log_mel=log_mel)
    results = {
        "model_name_or_path": str(args.model_name_or_path),
        "clip": source,
        "adaptive": adaptive,
        "num_time_patches": int(decay.shape[0]),
        "num_frequency_groups": int(decay.shape[1]),
        "pairs_per_patch": int(decay.shape[2]),
        "beta_min_hz": beta_range_hz[0],
        "beta_max_hz": beta_range_hz[1],
        "decay_min": float(embeddings_sblu.decay_min),
        "frequency_hz": {
            "min": float(frequency_hz.min()),
            "mean": float(frequency_hz.mean()),
            "max": float(frequency_hz.max()),
        },
        "decay": {"min": float(decay.min()), "mean": float(decay.mean()), "max": float(decay.max())},
        "figure": str(figure),
        "arguments": asdict(args),
    }
    results_file.write_text(json.dumps(results, indent=2))
    (output_dir / "results.md").write_text(
        f"# SBLU parameters: {source}\n\n![SBLU parameters]({figure.name})\n\n"
        "| quantity | min | mean | max | bound |\n|---|---|---|---|---|\n"
        f"| frequency β/2π (Hz) | {results['frequency_hz']['min']:.2f} | {results['frequency_hz']['mean']:.2f} | "
        f"{results['frequency_hz']['max']:.2f} | [{beta_range_hz[0]:.3f}, {beta_range_hz[1]:.3f}] |\n"
        f"| decay α (1/s) | {results['decay']['min']:.2f} | {results['decay']['mean']:.2f} | "
        f"{results['decay']['max']:.2f} | ≥ {results['decay_min']:.3f} |\n"
    )
    progress.update()
    progress.close()
    print(
        f"   β/2π in [{results['frequency_hz']['min']:.2f}, {results['frequency_hz']['max']:.2f}] Hz, "
        f"α in [{results['decay']['min']:.2f}, {results['decay']['max']:.2f}] 1/s -> {figure}"
    )
    return results


if __name__ == "__main__":
    run_script(main, "visualize_sblu.py")
