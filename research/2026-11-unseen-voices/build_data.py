"""The study's data: which kind of vocal sound a clip holds (pain, jump, fall, speech), from 23 recorded voices of two
games' Debian packages, so that the classes are not the voices and voices can be held out whole.

    mkdir -p /tmp/voices && cd /tmp/voices
    apt-get download hedgewars-data nexuiz-data
    dpkg-deb -x hedgewars-data_*.deb hw && dpkg-deb -x nexuiz-data_*.deb nx
    unzip -q nx/usr/share/games/nexuiz/data/data.pk3 'sound/player/*' -d nx
    python research/2026-11-unseen-voices/build_data.py --hedgewars hw --nexuiz nx --output /tmp/voices/data

Sources (each voice is one recorded actor; mono mean of the channels, resampled to 16 kHz, otherwise as recorded):
- hedgewars-data (GFDL-1.3), Data/Sounds/voices/<pack>/: 15 packs. pain = Ow1-4, jump = Jump1-3, fall = Ooff1-3
  (the grunt of a hedgehog's fall), speech = Hello, Incoming, Takecover, Victory (in the pack's own language: four
  packs speak Spanish, Polish, Russian or Ukrainian).
- nexuiz-data (GPL-2+), data.pk3 sound/player/<model>/: the 8 models with a player/ and coms/ folder. pain =
  pain25/50/75/100, jump = jump, fall = fall1, speech = attack (attack1 for pyria-skadi), coverme, defend, incoming.

Layout: <output>/all/<class>/<voice>_<file>.wav, voice = hw-<pack> or nx-<model> in lower case, so that
`--group_by '^([a-z0-9-]+)_'` reads the voice. <output>/fold<k>/{train,test}/<class>/...: k = 0..3, test = the
voices of fold k (five or six voices: each game's voices shuffled with seed 0 and dealt round-robin) and train = the
others. manifest.json lists
every clip with its voice, class, source file and sha256. <output>/fold<k>_aug/: the same test clips, and each training clip with three copies whose source changes and class
does not (`source_augmented`): a gain of -12..+6 dB, a random spectral tilt (a first-order low or high shelf of
-9..+9 dB at 300-3000 Hz) and a speed change of 0.85-1.15 (resampled: pitch and length move together, as Kaldi's
speed perturbation), drawn with seed 1000 + k. `--encoder DIR` also writes the study's encoder: the tiny
pre-training preset's model (D = 64, 2 layers, AaPE), randomly initialised with seed 0, and the default front end.
"""

import argparse
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

SAMPLE_RATE = 16000
NUM_FOLDS = 4
HEDGEWARS = {
    "pain": ("Ow1", "Ow2", "Ow3", "Ow4"),
    "jump": ("Jump1", "Jump2", "Jump3"),
    "fall": ("Ooff1", "Ooff2", "Ooff3"),
    "speech": ("Hello", "Incoming", "Takecover", "Victory"),
}
NEXUIZ = {
    "pain": ("player/pain25", "player/pain50", "player/pain75", "player/pain100"),
    "jump": ("player/jump",),
    "fall": ("player/fall1",),
    "speech": ("coms/attack", "coms/coverme", "coms/defend", "coms/incoming"),
}


def read_mono_16k(path: Path) -> np.ndarray:
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)  # (samples,)
    g = np.gcd(rate, SAMPLE_RATE)
    return resample_poly(audio, SAMPLE_RATE // g, rate // g).astype(np.float32)


def sources(hedgewars: Path, nexuiz: Path) -> list[dict]:
    """Every clip: {voice, game, label, path}."""
    clips = []
    packs = hedgewars / "usr/share/games/hedgewars/Data/Sounds/voices"
    for pack in sorted(p for p in packs.iterdir() if p.is_dir()):
        for label, names in HEDGEWARS.items():
            for name in names:
                clips.append({"voice": f"hw-{pack.name.lower().replace('_', '-')}", "game": "hedgewars",
                              "label": label, "path": pack / f"{name}.ogg"})
    models = nexuiz / "sound/player"
    for model in sorted(p for p in models.iterdir() if (p / "player").is_dir() and (p / "coms").is_dir()):
        for label, names in NEXUIZ.items():
            for name in names:
                path = model / f"{name}.ogg"
                if not path.exists() and name == "coms/attack":
                    path = model / "coms/attack1.ogg"
                clips.append({"voice": f"nx-{model.name.lower()}", "game": "nexuiz", "label": label, "path": path})
    missing = [str(c["path"]) for c in clips if not c["path"].exists()]
    if missing:
        raise SystemExit(f"missing source files: {missing}")
    return clips


def voice_folds(clips: list[dict], seed: int = 0) -> dict[str, int]:
    """voice -> fold (0..NUM_FOLDS-1): each game's voices shuffled with `seed` and dealt round-robin."""
    fold_of, dealt = {}, 0
    for game in ("hedgewars", "nexuiz"):
        voices = sorted({c["voice"] for c in clips if c["game"] == game})
        random.Random(seed).shuffle(voices)
        for voice in voices:
            fold_of[voice] = dealt % NUM_FOLDS
            dealt += 1
    return fold_of


def shelf(audio: np.ndarray, gain_db: float, corner_hz: float, high: bool) -> np.ndarray:
    """A first-order shelving filter: `gain_db` above (high) or below (low) `corner_hz`, 0 dB on the other side."""
    from scipy.signal import lfilter

    k = np.tan(np.pi * corner_hz / SAMPLE_RATE)
    g = 10 ** (gain_db / 20)
    if high:  # H(s) = (g s + w) / (s + w), bilinear
        b, a = [g + k, k - g], [1 + k, k - 1]
    else:  # H(s) = (s + g w) / (s + w)
        b, a = [1 + g * k, g * k - 1], [1 + k, k - 1]
    return lfilter(np.array(b) / a[0], np.array(a) / a[0], audio).astype(np.float32)


def source_augmented(audio: np.ndarray, rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """Three copies of one clip, each as another microphone, room or voice would change it: (name, audio)."""
    gain = audio * 10 ** (rng.uniform(-12, 6) / 20)
    tilt = shelf(audio, rng.uniform(-9, 9), rng.uniform(300, 3000), high=bool(rng.integers(2)))
    speed = rng.uniform(0.85, 1.15)  # > 1: faster and higher
    up, down = 100, int(round(100 * speed))
    fast = resample_poly(audio, up, down).astype(np.float32)
    copies = [("gain", gain), ("tilt", tilt), ("speed", fast)]
    # a copy that would clip is scaled to a peak of 0.99 instead (a recorder's level, not distortion)
    return [(name, x * min(1.0, 0.99 / max(float(np.abs(x).max()), 1e-9))) for name, x in copies]


def fresh_encoder(target: Path, seed: int = 0):
    import torch

    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

    preset = Path(__file__).resolve().parents[2] / "examples/configs/pretrain_tiny_cpu.json"
    torch.manual_seed(seed)
    config = AaspConfig(**json.loads(preset.read_text())["model_config"])
    AaspModel(config).save_pretrained(target)
    AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(target)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hedgewars", type=Path, required=True, help="the unpacked hedgewars-data package")
    parser.add_argument("--nexuiz", type=Path, required=True, help="folder holding nexuiz's sound/player/")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--encoder", type=Path, help="also write the study's fresh tiny encoder here")
    args = parser.parse_args()
    if args.encoder:
        fresh_encoder(args.encoder)
    clips = sources(args.hedgewars, args.nexuiz)
    fold_of = voice_folds(clips)
    manifest = []
    for clip in clips:
        audio = read_mono_16k(clip["path"])
        name = f"{clip['voice']}_{clip['path'].stem.lower()}.wav"
        targets = [args.output / "all" / clip["label"] / name]
        for fold in range(NUM_FOLDS):
            split = "test" if fold_of[clip["voice"]] == fold else "train"
            targets.append(args.output / f"fold{fold}" / split / clip["label"] / name)
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            sf.write(target, audio, SAMPLE_RATE, subtype="PCM_16")
        manifest.append({"file": f"{clip['label']}/{name}", "voice": clip["voice"], "game": clip["game"],
                         "label": clip["label"], "fold": fold_of[clip["voice"]], "seconds": len(audio) / SAMPLE_RATE,
                         "source": str(clip["path"].relative_to(clip["path"].parents[3])),
                         "sha256": hashlib.sha256(targets[0].read_bytes()).hexdigest()})
    for fold in range(NUM_FOLDS):
        rng = np.random.default_rng(1000 + fold)
        source, target = args.output / f"fold{fold}", args.output / f"fold{fold}_aug"
        for path in sorted(source.rglob("*.wav")):
            relative = path.relative_to(source)
            audio, _ = sf.read(path, dtype="float32")
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            sf.write(target / relative, audio, SAMPLE_RATE, subtype="PCM_16")
            if relative.parts[0] == "train":
                for name, copy in source_augmented(audio, rng):
                    sf.write((target / relative).with_name(f"{path.stem}-{name}.wav"), copy, SAMPLE_RATE,
                             subtype="PCM_16")
    (args.output / "manifest.json").write_text(json.dumps(manifest, indent=1))
    counts = {label: sum(m["label"] == label for m in manifest) for label in HEDGEWARS}
    seconds = [m["seconds"] for m in manifest]
    print(f"{len(manifest)} clips of {len(fold_of)} voices: {counts}; {min(seconds):.2f}-{max(seconds):.2f} s, "
          f"mean {np.mean(seconds):.2f} s")
    for fold in range(NUM_FOLDS):
        print(f"fold{fold} test voices: {sorted(v for v, f in fold_of.items() if f == fold)}")


if __name__ == "__main__":
    main()
