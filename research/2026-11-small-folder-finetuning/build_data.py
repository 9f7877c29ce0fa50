"""The study's data and its fresh encoder: ten spoken phrases of the hedgewars voice packs as an audiofolder whose
test split is voice packs never heard in training, and a randomly initialised tiny encoder.

    cd /tmp && apt-get download hedgewars-data && dpkg-deb -x hedgewars-data_*.deb hw
    python research/2026-11-small-folder-finetuning/build_data.py --voices /tmp/hw/usr/share/games/hedgewars/Data/Sounds/voices \
        --output /tmp/sf/hedgewars_phrases --fresh_encoder /tmp/sf/fresh_encoder

Each pack is one voice actor (or one actor's character) recording the game's phrases (Debian hedgewars-data,
Data/Sounds/voices/<pack>/<Phrase>.ogg, GFDL-1.3). The clips are mixed to mono and resampled to 16 kHz, as recorded
otherwise (no trimming, no normalisation). Layout: <output>/{train,test}/<Phrase>/<pack>.wav.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

PHRASES = ("Hello", "Incoming", "Takecover", "Victory", "Oops", "Reinforcements", "Kamikaze", "Laugh", "Traitor",
           "Firstblood")  # ten phrases every one of the 15 packs has, of different words and lengths
TEST_PACKS = ("Classic", "Default_pl", "Pirate", "Surfer")  # four voices held out: a speaker-independent test
SAMPLE_RATE = 16000
TINY_PRESET = Path(__file__).resolve().parents[2] / "examples" / "configs" / "pretrain_tiny_cpu.json"


def build(voices: Path, output: Path) -> dict:
    packs = sorted(p.name for p in voices.iterdir() if p.is_dir())
    counts = {"train": 0, "test": 0}
    for pack in packs:
        split = "test" if pack in TEST_PACKS else "train"
        for phrase in PHRASES:
            audio, rate = sf.read(voices / pack / f"{phrase}.ogg", dtype="float32", always_2d=True)
            audio = audio.mean(axis=1)
            g = np.gcd(rate, SAMPLE_RATE)
            audio = resample_poly(audio, SAMPLE_RATE // g, rate // g).astype(np.float32)
            target = output / split / phrase / f"{pack}.wav"
            target.parent.mkdir(parents=True, exist_ok=True)
            sf.write(target, audio, SAMPLE_RATE, subtype="PCM_16")
            counts[split] += 1
    return {"packs": packs, "test_packs": list(TEST_PACKS), "phrases": list(PHRASES), "clips": counts}


def fresh_encoder(folder: Path, seed: int = 0):
    """The tiny preset's encoder (D = 64, 2 layers, AaPE) at its random initialisation, with the default front end."""
    import torch
    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

    torch.manual_seed(seed)
    config = AaspConfig(**json.loads(TINY_PRESET.read_text())["model_config"])
    AaspModel(config).save_pretrained(folder)
    AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(folder)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--fresh_encoder", type=Path)
    args = parser.parse_args()
    print(json.dumps(build(args.voices, args.output)))
    if args.fresh_encoder:
        fresh_encoder(args.fresh_encoder)
