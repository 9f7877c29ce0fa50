"""The study's variants of the unseen-voices data and encoder (research/2026-11-unseen-voices/build_data.py made both).

    python research/2026-11-what-transfers/build_variants.py --data /tmp/s60/data --encoder /tmp/s60/enc/tiny \
        --output /tmp/s60b

Writes, under --output:
- enc/tiny_dsnorm_fold<k>: the encoder with the front end's normalisation `(x - mean) / std` set to fold k's training
  clips' own log-mel mean and standard deviation (over every frame and bin of the unnormalised m2d log-mel) in
  place of the fixed -7.1 / 4.1 of the paper's front end; the weights are the encoder's, unchanged.
- enc/tiny_deep, enc/tiny_wide: the tiny preset with 4 blocks instead of 2 (D = 64), or D = 128 (4 heads, MLP 256)
  instead of 64 (2 blocks); randomly initialised with seed 0, as the study's encoder.
- data/fold<k>_rms: fold k with every clip scaled to an RMS of -20 dBFS, written as 32-bit float so that no sample
  clips: each clip's gain removed, what per-clip mean subtraction of the log-mel does (up to the arithmetic against
  the geometric mean of the energy).
- data/fold<k>_noise: fold k with, beside each training clip, two copies with noise added at a signal-to-noise ratio
  of 5-20 dB (white, and pink: a 1/f power spectrum), drawn with seed 2000 + k; the test clips unchanged.
- data/fold<k>_half, data/fold<k>_seen: the voices-seen reference. Fold k's test clips are halved within each voice
  and class (sorted by name, alternate clips): `_half` trains on fold k's training voices and tests on half A;
  `_seen` trains on the same voices plus half B of the test voices and tests on the same half A.
"""

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

NUM_FOLDS = 4


def voice_of(path: Path) -> str:
    return path.name.split("_")[0]  # <voice>_<file>.wav


def training_log_mel_statistics(train: Path) -> tuple[float, float]:
    """Mean and std of the unnormalised log-mel over every frame and bin of the training clips, in float64."""
    extractor = AaspFeatureExtractor(do_normalize=False)
    total, total_sq, count = 0.0, 0.0, 0
    for path in sorted(train.rglob("*.wav")):
        audio, rate = sf.read(path, dtype="float32")
        assert rate == 16000, path
        features = extractor(audio, sampling_rate=rate, return_tensors="np")["input_values"][0].astype(np.float64)
        total, total_sq, count = total + features.sum(), total_sq + (features**2).sum(), count + features.size
    mean = total / count
    return float(mean), float(np.sqrt(total_sq / count - mean**2))


def write_encoder(config: AaspConfig, target: Path, seed: int = 0):
    torch.manual_seed(seed)
    AaspModel(config).save_pretrained(target)
    AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(target)


def copy_clips(pairs, transform=None):
    for source, target in pairs:
        target.parent.mkdir(parents=True, exist_ok=True)
        if transform is None:
            shutil.copyfile(source, target)
        else:
            audio, rate = sf.read(source, dtype="float64")
            sf.write(target, transform(audio), rate, subtype="FLOAT")


def rms_normalised(audio: np.ndarray, dbfs: float = -20.0) -> np.ndarray:
    return audio * (10 ** (dbfs / 20) / max(float(np.sqrt(np.mean(audio**2))), 1e-9))


def noisy_copies(audio: np.ndarray, rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """Two copies of one clip with white or pink noise at a random 5-20 dB signal-to-noise ratio: (name, audio)."""
    copies = []
    for name in ("white", "pink"):
        noise = rng.standard_normal(len(audio))
        if name == "pink":  # shape the white noise's spectrum to a 1/f power: amplitude 1/sqrt(f)
            spectrum = np.fft.rfft(noise)
            spectrum[1:] /= np.sqrt(np.arange(1, len(spectrum)))
            noise = np.fft.irfft(spectrum, n=len(audio))
        snr_db = rng.uniform(5, 20)
        scale = np.sqrt(np.mean(audio**2) / max(np.mean(noise**2), 1e-12) / 10 ** (snr_db / 10))
        copies.append((name, audio + scale * noise))
    return copies


def write_noisy(source: Path, target: Path, seed: int):
    rng = np.random.default_rng(seed)
    for path in sorted(source.rglob("*.wav")):
        relative = path.relative_to(source)
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target / relative)
        if relative.parts[0] == "train":
            audio, rate = sf.read(path, dtype="float64")
            for name, copy in noisy_copies(audio, rng):
                sf.write((target / relative).with_name(f"{path.stem}-{name}.wav"), copy, rate, subtype="FLOAT")


def halves(test: Path) -> tuple[list[Path], list[Path]]:
    """Fold k's test clips in two halves, alternating within each (voice, class), sorted by name."""
    a, b = [], []
    groups = {}
    for path in sorted(test.rglob("*.wav")):
        groups.setdefault((voice_of(path), path.parent.name), []).append(path)
    for paths in groups.values():
        a += paths[0::2]
        b += paths[1::2]
    return a, b


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="build_data.py's output")
    parser.add_argument("--encoder", type=Path, required=True, help="build_data.py's --encoder")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    statistics = {}
    for fold in range(NUM_FOLDS):
        source = args.data / f"fold{fold}"
        mean, std = training_log_mel_statistics(source / "train")
        statistics[f"fold{fold}"] = {"mean": mean, "std": std}
        target = args.output / "enc" / f"tiny_dsnorm_fold{fold}"
        shutil.copytree(args.encoder, target, dirs_exist_ok=True)
        preprocessor = json.loads((target / "preprocessor_config.json").read_text())
        preprocessor.update(mean=mean, std=std)
        (target / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2))
        clips = sorted(source.rglob("*.wav"))
        copy_clips(
            [(p, args.output / "data" / f"fold{fold}_rms" / p.relative_to(source)) for p in clips], rms_normalised
        )
        write_noisy(source, args.output / "data" / f"fold{fold}_noise", seed=2000 + fold)
        half_a, half_b = halves(source / "test")
        train = sorted((source / "train").rglob("*.wav"))
        for name, extra in (("half", []), ("seen", half_b)):
            root = args.output / "data" / f"fold{fold}_{name}"
            copy_clips([(p, root / "train" / p.relative_to(source / "train")) for p in train])
            copy_clips([(p, root / "train" / p.relative_to(source / "test")) for p in extra])
            copy_clips([(p, root / "test" / p.relative_to(source / "test")) for p in half_a])
        print(f"fold{fold}: log-mel mean {mean:.3f} std {std:.3f}; test halves {len(half_a)} / {len(half_b)} clips")
    tiny = AaspConfig.from_pretrained(args.encoder)
    write_encoder(AaspConfig(**{**tiny.to_dict(), "num_hidden_layers": 4}), args.output / "enc" / "tiny_deep")
    wide = {"hidden_size": 128, "num_attention_heads": 4, "intermediate_size": 256}
    write_encoder(AaspConfig(**{**tiny.to_dict(), **wide}), args.output / "enc" / "tiny_wide")
    (args.output / "variants.json").write_text(json.dumps({"log_mel_statistics": statistics}, indent=1))


if __name__ == "__main__":
    main()
