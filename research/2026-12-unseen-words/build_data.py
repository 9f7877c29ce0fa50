"""The unseen-words study's word task: ten spoken words (Speech Commands' core ten) said by 24 synthetic voices of
espeak-ng (Debian's `espeak-ng` 1.51), an audiofolder split by voice: 6 voices in training (3 male variants, 2 female, one Klatt), 18 held out for the
test.

A voice is an accent (one of espeak-ng's seven English ones) with a voice variant (its `!v` files: formant sets,
breathiness, pitch range; m1-m7, f1-f5 and the Klatt voices), and a base pitch (`-p`, 25-75) and rate (`-s`, 140-200
words per minute) drawn once per voice. Each voice says each word three times, each time at its base pitch ± 6 and
rate ± 8 %, with one of five leading silences (0-80 ms), so the clips of one voice differ. espeak-ng writes 22,050-Hz
16-bit WAV; the clips are resampled to 16 kHz (scipy's polyphase resampler) and written as 16-bit WAV.

    python research/2026-12-unseen-words/build_data.py --output /tmp/words

Writes `OUTPUT/train/<word>/<voice>_<word>_<k>.wav` (the 6 training voices), `OUTPUT/test/<word>/...` (the 18 others)
and `OUTPUT/manifest.json` (every voice's accent, variant, pitch and rate, and its split). `--group_by
'^([a-z0-9-]+)_'` reads the voice from a file name.
"""

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan", "en-gb-x-gbcwmd")
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "klatt", "klatt2", "klatt3")
NUM_VOICES, TRAIN_VOICES, REPEATS = 24, 6, 3
RATE = 16000


def voices(rng: np.random.Generator) -> list[dict]:
    """NUM_VOICES distinct (accent, variant) pairs, each variant used at most twice, with a base pitch and rate."""
    pairs = [(a, v) for a in ACCENTS for v in VARIANTS]
    order = rng.permutation(len(pairs))
    chosen, uses = [], {}
    for index in order:
        accent, variant = pairs[index]
        if uses.get(variant, 0) < 2:
            uses[variant] = uses.get(variant, 0) + 1
            chosen.append({"accent": accent, "variant": variant})
        if len(chosen) == NUM_VOICES:
            break
    for voice in chosen:
        voice["name"] = f"{voice['accent']}-{voice['variant']}"
        voice["pitch"] = int(rng.integers(25, 76))
        voice["rate"] = int(rng.integers(140, 201))
    return chosen


def speak(word: str, voice: dict, pitch: int, rate: int, work: Path) -> np.ndarray:
    """espeak-ng's rendering of `word` as float32 at 16 kHz."""
    path = work / "say.wav"
    command = ["espeak-ng", "-v", f"{voice['accent']}+{voice['variant']}", "-p", str(pitch), "-s", str(rate)]
    subprocess.run([*command, "-w", str(path), word], check=True, capture_output=True)
    audio, rate_in = sf.read(path, dtype="float32")
    assert rate_in == 22050, rate_in
    return resample_poly(audio, 320, 441).astype(np.float32)  # 22,050 Hz -> 16 kHz


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    every = voices(rng)
    # training voices of every kind of variant, as a user's few speakers would hold both sexes: 3 male, 2 female and
    # one Klatt voice, the first of each kind in the shuffled order
    kinds = {"m": 3, "f": 2, "k": 1}
    train = set()
    for voice in every:
        kind = voice["variant"][0]
        if kinds.get(kind, 0) > 0:
            kinds[kind] -= 1
            train.add(voice["name"])
    assert len(train) == TRAIN_VOICES
    with tempfile.TemporaryDirectory() as work:
        for voice in every:
            voice["split"] = "train" if voice["name"] in train else "test"
            for word in WORDS:
                folder = args.output / voice["split"] / word
                folder.mkdir(parents=True, exist_ok=True)
                for k in range(REPEATS):
                    pitch = int(np.clip(voice["pitch"] + rng.integers(-6, 7), 0, 99))
                    rate = int(round(voice["rate"] * rng.uniform(0.92, 1.08)))
                    audio = speak(word, voice, pitch, rate, Path(work))
                    lead = np.zeros(int(rng.choice([0, 0.02, 0.04, 0.06, 0.08]) * RATE), dtype=np.float32)
                    sf.write(folder / f"{voice['name']}_{word}_{k}.wav", np.concatenate([lead, audio]), RATE, "PCM_16")
    manifest = {"words": WORDS, "voices": every, "repeats": REPEATS, "seed": args.seed, "sampling_rate": RATE}
    (args.output / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for split in ("train", "test"):
        names = [v["name"] for v in every if v["split"] == split]
        print(f"{split}: {len(names)} voices, {len(names) * len(WORDS) * REPEATS} clips: {', '.join(names)}")


if __name__ == "__main__":
    main()
