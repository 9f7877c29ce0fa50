"""The study's data and its fresh encoders, from the 15 hedgewars voice packs written at 8 kHz (a band-limited,
low-rate recording like a phone corpus): two tasks of two audiofolders each, and randomly initialised encoders.

The voice task (the one the study measures; `build_voices`): which of the 15 voices speaks, 839 clips; the phrase
task (`build`): which of 25 phrases is spoken, 375 clips, one per voice and phrase.

    cd /tmp/study && apt-get download hedgewars-data && dpkg-deb -x hedgewars-data_*.deb hw
    python research/2026-11-short-clip-finetuning/build_data.py \
        --voices /tmp/study/hw/usr/share/games/hedgewars/Data/Sounds/voices --output /tmp/study/data \
        --encoders /tmp/study/encoders

Phrase task:
- <output>/unseen/{train,test}/<Phrase>/<pack>.wav: test = the packs Classic, Default_pl, Pirate, Surfer (voices never
  heard in training: 100 clips), train = the other 11 packs (275 clips; finetune.py holds 10 % out for validation);
- <output>/random/<Phrase>/<pack>.wav: every clip, no split folders, so finetune.py holds out its own stratified test
  (20 %) and validation (10 % of the rest): the same voices in training and test.

Each pack is one voice actor (Debian hedgewars-data, Data/Sounds/voices/<pack>/<Phrase>.ogg, GFDL-1.3). The 25
phrases are the spoken ones that all 15 packs have (the numbered grunts Ow1-4, Ooff1-3, Jump1-3 are left out). The
clips are mixed to mono and resampled to 8 kHz, otherwise as recorded (no trimming, no level normalisation).

Encoders (random initialisation, seed 0, the default front end): tiny (the tiny preset, D = 64, 2 layers, AaPE),
tiny_spe (the same with the plain patch embedding), small (the small preset's D = 192, 4 layers, AaPE), small_spe;
tiny_mean and small_mean (the same weights, `classifier_pooling="mean"`: the classifier reads the mean of the patch
tokens instead of CLS), tiny_f4k (tiny's weights, mel filters up to 4 kHz, the Nyquist frequency of the 8-kHz
clips, instead of 8 kHz), tiny_spe_mean and tiny_f4k_mean (both changes).
"""

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

PHRASES = ("Byebye", "Comeonthen", "Enemydown", "Firstblood", "Flawless", "Hello", "Hurry", "Illgetyou", "Incoming",
           "Kamikaze", "Laugh", "Missed", "Nooo", "Nutter", "Oops", "Reinforcements", "Sameteam", "Stupid",
           "Takecover", "Traitor", "Uh-oh", "Victory", "Watchit", "Yessir", "Youllregretthat")
TEST_PACKS = ("Classic", "Default_pl", "Pirate", "Surfer")  # as in research/2026-11-small-folder-finetuning
SAMPLE_RATE = 8000
CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
PRESETS = {"tiny": "pretrain_tiny_cpu.json", "small": "pretrain_small_quality.json"}


def build(voices: Path, output: Path) -> dict:
    packs = sorted(p.name for p in voices.iterdir() if p.is_dir())
    counts = {"unseen/train": 0, "unseen/test": 0, "random": 0}
    seconds = []
    for pack in packs:
        split = "test" if pack in TEST_PACKS else "train"
        for phrase in PHRASES:
            audio, rate = sf.read(voices / pack / f"{phrase}.ogg", dtype="float32", always_2d=True)
            audio = audio.mean(axis=1)
            g = np.gcd(rate, SAMPLE_RATE)
            audio = resample_poly(audio, SAMPLE_RATE // g, rate // g).astype(np.float32)
            seconds.append(len(audio) / SAMPLE_RATE)
            for target in (output / "unseen" / split / phrase / f"{pack}.wav", output / "random" / phrase / f"{pack}.wav"):
                target.parent.mkdir(parents=True, exist_ok=True)
                sf.write(target, audio, SAMPLE_RATE, subtype="PCM_16")
            counts[f"unseen/{split}"] += 1
            counts["random"] += 1
    return {"packs": packs, "test_packs": list(TEST_PACKS), "phrases": list(PHRASES), "clips": counts,
            "seconds": {"mean": float(np.mean(seconds)), "min": float(np.min(seconds)), "max": float(np.max(seconds))}}


HELD_OUT_PHRASES = ("Firstblood", "Hello", "Incoming", "Kamikaze", "Laugh", "Oops", "Reinforcements", "Takecover",
                    "Traitor", "Victory", "Jump1", "Ooff1", "Ow1")  # the voice task's unseen-source test: these files


def build_voices(voices: Path, output: Path) -> dict:
    """Which voice pack speaks (15 classes), from every file of every pack (spoken phrases and grunts).

    - <output>/voices_unseen/{train,test}/<pack>/<Phrase>.wav: test = the 13 HELD_OUT_PHRASES (in every pack that has
      them), train = every other file: the test phrases are never heard in training, in any voice;
    - <output>/voices_random/<pack>/<Phrase>.wav: every file, finetune.py holds out its own random 20 %."""
    counts = {"voices_unseen/train": 0, "voices_unseen/test": 0, "voices_random": 0}
    seconds = []
    for pack in sorted(p.name for p in voices.iterdir() if p.is_dir()):
        for path in sorted((voices / pack).glob("*.ogg")):
            audio, rate = sf.read(path, dtype="float32", always_2d=True)
            audio = audio.mean(axis=1)
            g = np.gcd(rate, SAMPLE_RATE)
            audio = resample_poly(audio, SAMPLE_RATE // g, rate // g).astype(np.float32)
            seconds.append(len(audio) / SAMPLE_RATE)
            split = "test" if path.stem in HELD_OUT_PHRASES else "train"
            for target in (output / "voices_unseen" / split / pack / f"{path.stem}.wav",
                           output / "voices_random" / pack / f"{path.stem}.wav"):
                target.parent.mkdir(parents=True, exist_ok=True)
                sf.write(target, audio, SAMPLE_RATE, subtype="PCM_16")
            counts[f"voices_unseen/{split}"] += 1
            counts["voices_random"] += 1
    return {"held_out_phrases": list(HELD_OUT_PHRASES), "clips": counts,
            "seconds": {"mean": float(np.mean(seconds)), "min": float(np.min(seconds)), "max": float(np.max(seconds))}}


def fresh_encoders(folder: Path, seed: int = 0):
    import torch
    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

    for name, preset in PRESETS.items():
        for stem in ("aape", "spe"):
            torch.manual_seed(seed)
            config = AaspConfig(**{**json.loads((CONFIGS / preset).read_text())["model_config"],
                                   "patch_embedding": stem})
            target = folder / (name if stem == "aape" else f"{name}_spe")
            AaspModel(config).save_pretrained(target)
            AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(target)
    # variants of the same weights: mean pooling of the patch tokens instead of CLS; mel bins up to 4 kHz only
    for source, target, file, change in (("tiny", "tiny_mean", "config.json", {"classifier_pooling": "mean"}),
                                         ("small", "small_mean", "config.json", {"classifier_pooling": "mean"}),
                                         ("tiny", "tiny_f4k", "preprocessor_config.json", {"f_max": 4000.0}),
                                         ("tiny_spe", "tiny_spe_mean", "config.json", {"classifier_pooling": "mean"}),
                                         ("tiny_mean", "tiny_f4k_mean", "preprocessor_config.json", {"f_max": 4000.0})):
        shutil.copytree(folder / source, folder / target, dirs_exist_ok=True)
        values = json.loads((folder / target / file).read_text())
        (folder / target / file).write_text(json.dumps({**values, **change}, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--encoders", type=Path)
    args = parser.parse_args()
    print(json.dumps(build(args.voices, args.output)))
    print(json.dumps(build_voices(args.voices, args.output)))
    if args.encoders:
        fresh_encoders(args.encoders)
