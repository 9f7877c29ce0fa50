"""A sound-event-detection set from real recordings in Debian's game-data packages: event recordings of 7 classes placed
at known, random times into real ambience recordings, in DCASE's layout, seeded and deterministic.

    mkdir -p /tmp/sed_src && cd /tmp/sed_src
    apt-get download 0ad-data hedgewars-data nexuiz-data openarena-data megaglest-data widelands-data
    for p in 0ad-data hedgewars-data nexuiz-data openarena-data megaglest-data widelands-data; do
        dpkg-deb -x ${p}_*.deb $p; done
    unzip -q 0ad-data/usr/share/games/0ad/mods/public/public.zip 'audio/*' -x 'audio/music/*' -d 0ad
    unzip -q nexuiz-data/usr/share/games/nexuiz/data/data.pk3 'sound/*' -d nexuiz
    unzip -q openarena-data/usr/share/games/openarena/baseoa/pak0.pk3 'sound/player/footsteps/*' -d openarena
    python research/2026-12-sound-events/build_data.py --sources /tmp/sed_src --output /tmp/sed_data

Classes (each a list of source globs, see EVENTS): speech, scream (pain and death cries), footsteps, wood_chopping,
mining (a pick on stone or metal), horse (neighs, snorts, a dying horse), sawing. Every event file is read as the mean
of its channels, resampled to 8 kHz and trimmed of its leading and trailing 10-ms frames more than `--trim_db` (40) dB
below its loudest frame, so that the labels are the extent of the sound itself; a trimmed recording longer than
`--max_event_seconds` (5) gives a random window of 2 s to that length instead (trimmed again). Exact and gain-scaled
duplicates (same length, correlation above 0.99) are dropped, one copy kept.

Splits by recording: within each class, the recordings are put into groups (one speaker where the package says who
speaks, hedgewars packs that ship each other's files merged; one source recording where its documentation says several
files were cut from one; one surface or family for footsteps; else one file) and whole groups are dealt to test (~25 %
of the files), validation (~15 %) and train (the rest), with `--seed`, each package with three or more groups in the
class on its own, the other packages' groups together (of two such groups, one trains and one tests); so the test and
the validation hear event recordings (and speakers) that training never heard. The background recordings are dealt
the same way, within each kind of ambience (day, night, water, rain, wind). The dealing does not depend on the sizes,
so `--train_minutes 2` has the same test as the default.

Each soundscape (`--soundscape_seconds`, 10 s): a random excerpt of one background recording of its split (excerpts in
which more than 10 % of the 100-ms frames lie 30 dB below the excerpt's RMS, i.e. digital near-silence, are redrawn),
set to an RMS of -40..-25 dBFS; in a random `--empty_fraction` (15 %) of the clips nothing else, in the others
max(1, Poisson(events_per_minute x seconds / 60 / (1 - empty_fraction))) events (so about `--events_per_minute` over
the split: a little more from the max, a little less where a clip has no room left), each of a class drawn uniformly
and a recording drawn uniformly within that class's split, at a uniform onset that keeps it inside the clip and off
the other events of its class; an onset overlapping another class's event is kept with probability
`--overlap_prob` (0.1), else redrawn (up to 100 draws, then the event is left out).
Each event is scaled to an event-to-background ratio drawn uniformly in `--ebr_db` (0..15) dB: the event's mean
power over its own extent against the background excerpt's mean power over the whole clip. A mixture whose peak
would pass 0.99 is scaled down whole (every ratio kept). 8 kHz mono 16-bit WAV.

Output: <output>/{train,validation,test}/<split>_NNNNN.wav, <output>/<split>.tsv (filename, onset, offset,
event_label; a clip with no events has no rows), <output>/<split>_durations.tsv (filename, duration), and
<output>/manifest.json: the arguments, every source recording (class, package, group, split, seconds, sha256), every
background recording, and every clip's background excerpt, level and events with their source and ratio.
"""

import argparse
import glob
import hashlib
import json
import re
import time
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

SAMPLE_RATE = 8000
SPLITS = ("train", "validation", "test")
SHARE = {
    "test": 0.25,
    "validation": 0.15,
}  # of each class's files (or each kind's background recordings); train the rest
FRAME = SAMPLE_RATE // 100  # 10 ms, the trimming resolution

HW_VOICES = "hedgewars-data/usr/share/games/hedgewars/Data/Sounds/voices"
NX_PLAYERS = "nexuiz/sound/player"
MG = "megaglest-data/usr/share/games/megaglest"
WL = "widelands-data/usr/share/games/widelands/data/sound"
OA = "openarena/sound/player/footsteps"
AD = "0ad/audio"

# class -> [(package, glob under --sources, group)]: group is "file" (each file its own group), a fixed name, or a
# regular expression whose groups, joined with "-", name the group (the speaker, surface or source recording)
EVENTS = {
    "speech": [
        ("0ad-data", f"{AD}/voice/*/civ/civ_*.ogg", r"voice/(\w+)/civ/civ_(female|male)"),
        ("hedgewars-data", f"{HW_VOICES}/*/Hello.ogg", r"voices/([^/]+)/"),
        ("hedgewars-data", f"{HW_VOICES}/*/Incoming.ogg", r"voices/([^/]+)/"),
        ("hedgewars-data", f"{HW_VOICES}/*/Takecover.ogg", r"voices/([^/]+)/"),
        ("hedgewars-data", f"{HW_VOICES}/*/Victory.ogg", r"voices/([^/]+)/"),
        ("nexuiz-data", f"{NX_PLAYERS}/*/coms/attack*.ogg", r"player/([^/]+)/"),
        ("nexuiz-data", f"{NX_PLAYERS}/*/coms/coverme.ogg", r"player/([^/]+)/"),
        ("nexuiz-data", f"{NX_PLAYERS}/*/coms/defend.ogg", r"player/([^/]+)/"),
        ("nexuiz-data", f"{NX_PLAYERS}/*/coms/incoming.ogg", r"player/([^/]+)/"),
    ],
    "scream": [
        ("0ad-data", f"{AD}/actor/human/death/*.ogg", "file"),
        ("hedgewars-data", f"{HW_VOICES}/*/Ow[1-4].ogg", r"voices/([^/]+)/"),
        ("nexuiz-data", f"{NX_PLAYERS}/*/player/pain*.ogg", r"player/([^/]+)/"),
    ],
    "footsteps": [
        ("0ad-data", f"{AD}/actor/singlesteps/fs_*.ogg", r"singlesteps/(fs_[a-z]+)"),
        ("0ad-data", f"{AD}/actor/human/movement/Footsteps/*.ogg", r"Foo[a-z]+_([A-Za-z]+)_"),
        ("0ad-data", f"{AD}/actor/human/movement/hstep_*.ogg", "0ad-hstep"),
        ("nexuiz-data", "nexuiz/sound/misc/footstep0*.wav", "nexuiz-footstep"),
        ("nexuiz-data", "nexuiz/sound/misc/metalfootstep0*.wav", "nexuiz-metalfootstep"),
        ("openarena-data", f"{OA}/boot*.wav", "openarena-boot"),
        ("openarena-data", f"{OA}/step*.wav", "openarena-step"),
        ("openarena-data", f"{OA}/clank*.wav", "openarena-clank"),
        ("openarena-data", f"{OA}/flesh*.wav", "openarena-flesh"),
    ],
    "wood_chopping": [
        ("0ad-data", f"{AD}/resource/lumbering/lumber_tree_*.ogg", "file"),
        ("megaglest-data", f"{MG}/techs/megapack/commondata/sounds/worker_harvest_wood*.wav", "megaglest-harvest-wood"),
        ("widelands-data", f"{WL}/woodcutting/*woodcutting*.ogg", "file"),
    ],
    "mining": [
        ("0ad-data", f"{AD}/resource/mining/mine_stone_*.ogg", "file"),
        ("0ad-data", f"{AD}/resource/mining/mine_metal_*.ogg", "file"),
        ("megaglest-data", f"{MG}/techs/megapack/commondata/sounds/worker_mine*.wav", "megaglest-mine"),
    ],
    "horse": [
        ("0ad-data", f"{AD}/actor/fauna/animal/horse*.ogg", "file"),
        ("0ad-data", f"{AD}/actor/*/death/death_horse_*.ogg", "file"),
        ("widelands-data", f"{WL}/farm/horse_*.ogg", "file"),
    ],
    "sawing": [
        ("0ad-data", f"{AD}/resource/construction/con_saw_*.ogg", "file"),
        # wl-sound-docu.csv: sawing_00-02 are cut from one recording (dobroide), benchsaw_00-02 from another (mauxuam)
        ("widelands-data", f"{WL}/atlanteans/saw/sawing_*.ogg", "widelands-sawing-dobroide"),
        ("widelands-data", f"{WL}/atlanteans/saw/benchsaw_*.ogg", "widelands-benchsaw-mauxuam"),
    ],
}

MG_SETS = f"{MG}/tilesets"
# kind -> [(package, path under --sources)]: ambience with no speech, steps, tools or horses in it as far as its name
# and the package say (0 A.D.'s farm, port and market ambiences hold voices and work sounds and are left out)
BACKGROUNDS = {
    "day": [
        ("0ad-data", f"{AD}/ambient/dayscape/{n}.ogg")
        for n in (
            "day_temperate_11",
            "day_temperate_12",
            "day_temperate_13",
            "day_temperate_14",
            "day_temperate_gen_01",
            "day_temperate_gen_02",
            "day_temperate_gen_03",
            "day_tropical_10",
            "day_tropical_11",
        )
    ]
    + [
        ("megaglest-data", f"{MG_SETS}/{n}.ogg")
        for n in (
            "autumn/sounds/sunny_day",
            "birch_forest/sounds/day",
            "dark_forest/sounds/day",
            "fernland/sounds/day",
            "mediterran/sounds/desertday",
            "spring/sounds/day",
        )
    ],
    "night": [
        ("megaglest-data", f"{MG_SETS}/{n}.ogg")
        for n in (
            "autumn/sounds/nightime",
            "birch_forest/sounds/night",
            "dark_forest/sounds/night",
            "desert2/sounds/night",
            "fernland/sounds/night",
            "mediterran/sounds/night",
        )
    ],
    "water": [
        ("0ad-data", f"{AD}/ambient/water/{n}.ogg")
        for n in (
            "river_fast_21",
            "river_med_21",
            "river_raging_21",
            "river_slow_21",
            "waterfall_31",
            "wave_21",
            "wavecrash_21",
            "waverocky_21",
        )
    ],
    "rain": [
        ("0ad-data", f"{AD}/ambient/weather/rain_11.ogg"),
        ("0ad-data", f"{AD}/ambient/weather/rain_12.ogg"),
        ("megaglest-data", f"{MG_SETS}/autumn/sounds/rain.ogg"),
        ("megaglest-data", f"{MG_SETS}/birch_forest/sounds/rain.ogg"),
        ("megaglest-data", f"{MG_SETS}/desert2/sounds/rain.wav"),
    ],
    "wind": [("0ad-data", f"{AD}/ambient/weather/{n}.ogg") for n in ("wind_11", "windstorm_11", "snowstorm_11")]
    + [
        ("megaglest-data", f"{MG_SETS}/winter/sounds/wind.ogg"),
        ("megaglest-data", f"{MG_SETS}/winter_forest/sounds/wind.ogg"),
    ],
}


def read_mono(path: Path) -> np.ndarray:
    """The file as float32 at SAMPLE_RATE: the mean of its channels, resampled."""
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)
    g = np.gcd(rate, SAMPLE_RATE)
    return resample_poly(audio, SAMPLE_RATE // g, rate // g).astype(np.float32)


def frame_db(audio: np.ndarray, frame: int) -> np.ndarray:
    n = max(1, len(audio) // frame)
    frames = np.pad(audio, (0, max(0, n * frame - len(audio))))[: n * frame].reshape(n, frame)
    return 10 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-20)


def trim_bounds(audio: np.ndarray, trim_db: float) -> tuple[int, int]:
    """(start, end) in samples without the leading and trailing 10-ms frames more than trim_db below the loudest."""
    levels = frame_db(audio, FRAME)
    loud = np.flatnonzero(levels > levels.max() - trim_db)
    return int(loud[0] * FRAME), int(min(len(audio), (loud[-1] + 1) * FRAME))


def trim(audio: np.ndarray, trim_db: float) -> np.ndarray:
    start, end = trim_bounds(audio, trim_db)
    return audio[start:end]


def power(audio: np.ndarray) -> float:
    return float(np.mean(audio.astype(np.float64) ** 2))


def drop_duplicates(items: list[dict]) -> list[dict]:
    """Keep the first of each set of recordings that are equal up to a gain (same length, correlation > 0.99)."""
    kept = []
    for item in items:
        x = item["audio"]
        duplicate = None
        for other in kept:
            y = other["audio"]
            if len(x) == len(y):
                denom = np.sqrt(power(x) * power(y)) * len(x)
                if denom > 0 and float(np.dot(x.astype(np.float64), y)) / denom > 0.99:
                    duplicate = other
                    break
        if duplicate is None:
            kept.append(item)
        else:
            duplicate.setdefault("duplicates", []).append(item["path"])
    return kept


# hedgewars voice packs that ship identical files (some of their lines are one recording): one speaker group each
HW_SHARED = {"classic": "default", "default_uk": "default", "hillbilly": "default", "russian_pl": "default_pl"}


def group_of(rule: str, relative: str) -> str:
    if rule == "file":
        return relative
    if "(" not in rule:
        return rule
    match = re.search(rule, relative)
    if match is None:
        raise SystemExit(f"group rule {rule!r} does not match {relative}")
    group = "-".join(match.groups()).lower()
    return HW_SHARED.get(group, group) if relative.startswith(HW_VOICES) else group


def deal(groups: dict[str, int], rng: np.random.Generator) -> dict[str, str]:
    """group -> split: whole groups, shuffled, each to the split furthest below its share of the files (test,
    validation and train each get one group first, where there are three; ties go to test, then validation; of two
    groups, one trains and one tests; one group trains)."""
    names = sorted(groups)
    rng.shuffle(names)
    total = sum(groups.values())
    target = {"test": SHARE["test"] * total, "validation": SHARE["validation"] * total}
    target["train"] = total - target["test"] - target["validation"]
    have = dict.fromkeys(SPLITS, 0)
    split_of = {}
    if len(names) < 3:
        return dict(zip(names, ("train", "test")))
    for i, name in enumerate(names):
        if i < 3:
            split = ("test", "validation", "train")[i]
        else:
            split = max(("test", "validation", "train"), key=lambda s: (target[s] - have[s]) / target[s])
        split_of[name] = split
        have[split] += groups[name]
    return split_of


def deal_class(items: list[dict], rng: np.random.Generator) -> None:
    """Set each item's split: the groups of each package with three or more groups in this class are dealt on their
    own (so every split holds each such package's share), the groups of the other packages together."""
    packages = sorted({item["package"] for item in items})
    groups = {p: {} for p in packages}
    for item in items:
        groups[item["package"]][item["group"]] = groups[item["package"]].get(item["group"], 0) + 1
    rest = {}
    split_of = {}
    for package in packages:
        if len(groups[package]) >= 3:
            split_of |= deal(groups[package], rng)
        else:
            rest |= groups[package]
    if rest:
        split_of |= deal(rest, rng)
    for item in items:
        item["split"] = split_of[item["group"]]


def load_events(sources: Path, trim_db: float, seed: int) -> list[dict]:
    recordings = []
    for label, specs in EVENTS.items():
        items = []
        for package, pattern, rule in specs:
            paths = sorted(glob.glob(str(sources / pattern)))
            if not paths:
                raise SystemExit(
                    f"no files match {pattern} under {sources} (see the commands in this file's docstring)"
                )
            for path in paths:
                relative = str(Path(path).relative_to(sources))
                audio = trim(read_mono(Path(path)), trim_db)
                items.append(
                    {
                        "label": label,
                        "package": package,
                        "path": relative,
                        "audio": audio,
                        "group": f"{package.split('-')[0]}:{group_of(rule, relative)}",
                    }
                )
        items = drop_duplicates(items)
        deal_class(items, np.random.default_rng([seed, 1, list(EVENTS).index(label)]))
        recordings += items
    return recordings


def load_backgrounds(sources: Path, seconds: float, seed: int) -> list[dict]:
    backgrounds = []
    for k, (kind, specs) in enumerate(BACKGROUNDS.items()):
        items = []
        for package, relative in specs:
            audio = read_mono(sources / relative)
            if len(audio) < seconds * SAMPLE_RATE:
                raise SystemExit(f"{relative} is shorter than a soundscape")
            items.append({"kind": kind, "package": package, "path": relative, "audio": audio, "group": relative})
        items = drop_duplicates(items)
        split_of = deal({item["group"]: 1 for item in items}, np.random.default_rng([seed, 2, k]))
        for item in items:
            item["split"] = split_of[item["group"]]
        backgrounds += items
    return backgrounds


def background_excerpt(pool: list[dict], length: int, rng: np.random.Generator) -> tuple[dict, int, np.ndarray]:
    """A random excerpt that is not digital near-silence: (recording, offset, audio)."""
    for _ in range(200):
        recording = pool[rng.integers(len(pool))]
        offset = int(rng.integers(0, len(recording["audio"]) - length + 1))
        excerpt = recording["audio"][offset : offset + length]
        rms_db = 10 * np.log10(power(excerpt) + 1e-20)
        if np.mean(frame_db(excerpt, SAMPLE_RATE // 10) < rms_db - 30) <= 0.10:
            return recording, offset, excerpt
    raise SystemExit("no usable background excerpt in 200 draws")


def event_window(audio: np.ndarray, max_seconds: float, trim_db: float, rng: np.random.Generator):
    """The event as placed: the trimmed recording, or a random window of 2 s .. max_seconds of a longer one."""
    limit = int(max_seconds * SAMPLE_RATE)
    if len(audio) <= limit:
        return audio, 0
    length = int(rng.uniform(2.0, max_seconds) * SAMPLE_RATE)
    start = int(rng.integers(0, len(audio) - length + 1))
    window = audio[start : start + length]
    lead, end = trim_bounds(window, trim_db)
    return window[lead:end], start + lead


def make_split(split: str, minutes: float, args, recordings: list[dict], backgrounds: list[dict]) -> list[dict]:
    rng = np.random.default_rng([args.seed, 3, SPLITS.index(split)])
    labels = list(EVENTS)
    by_class = {label: [r for r in recordings if r["label"] == label and r["split"] == split] for label in labels}
    pool = [b for b in backgrounds if b["split"] == split]
    length = int(round(args.soundscape_seconds * SAMPLE_RATE))
    count = int(round(minutes * 60 / args.soundscape_seconds))
    folder = args.output / split
    folder.mkdir(parents=True, exist_ok=True)
    empty = set(rng.choice(count, size=int(round(args.empty_fraction * count)), replace=False).tolist())
    per_clip = args.events_per_minute * args.soundscape_seconds / 60 / (1 - args.empty_fraction)
    clips = []
    for index in range(count):
        name = f"{split}_{index:05d}.wav"
        background, offset, excerpt = background_excerpt(pool, length, rng)
        level_db = float(rng.uniform(*args.background_dbfs))
        bed = excerpt * np.float32(10 ** (level_db / 20) / np.sqrt(power(excerpt)))
        bed_power = power(bed)
        mixture = bed.astype(np.float64).copy()
        events = []
        if index not in empty:
            wanted = max(1, int(rng.poisson(per_clip)))
            for _ in range(wanted):
                label = labels[rng.integers(len(labels))]
                recording = by_class[label][rng.integers(len(by_class[label]))]
                audio, start_in_source = event_window(recording["audio"], args.max_event_seconds, args.trim_db, rng)
                span = len(audio)
                for _ in range(100):
                    onset = int(rng.integers(0, length - span + 1))
                    clash = [e for e in events if onset < e["offset_sample"] and e["onset_sample"] < onset + span]
                    if any(e["event_label"] == label for e in clash):
                        continue
                    if clash and rng.random() >= args.overlap_prob:
                        continue
                    break
                else:
                    continue  # no room for it in this clip
                ebr = float(rng.uniform(*args.ebr_db))
                gain = np.sqrt(bed_power * 10 ** (ebr / 10) / max(power(audio), 1e-20))
                mixture[onset : onset + span] += gain * audio
                events.append(
                    {
                        "event_label": label,
                        "onset_sample": onset,
                        "offset_sample": onset + span,
                        "source": recording["path"],
                        "start_in_trimmed_source_s": start_in_source / SAMPLE_RATE,
                        "ebr_db": round(ebr, 2),
                    }
                )
        peak = float(np.abs(mixture).max())
        scale = min(1.0, 0.99 / peak) if peak > 0 else 1.0
        sf.write(folder / name, (mixture * scale).astype(np.float32), SAMPLE_RATE, subtype="PCM_16")
        events.sort(key=lambda e: (e["onset_sample"], e["event_label"]))
        for e in events:
            e["onset"] = round(e["onset_sample"] / SAMPLE_RATE, 3)
            e["offset"] = round(e["offset_sample"] / SAMPLE_RATE, 3)
        clips.append(
            {
                "filename": name,
                "duration": length / SAMPLE_RATE,
                "background": background["path"],
                "background_offset_s": offset / SAMPLE_RATE,
                "background_dbfs": round(level_db + 20 * np.log10(scale), 2),
                "scaled_by": round(scale, 4),
                "events": events,
            }
        )
    with open(args.output / f"{split}.tsv", "w") as f:
        f.write("filename\tonset\toffset\tevent_label\n")
        for clip in clips:
            for e in clip["events"]:
                f.write(f"{clip['filename']}\t{e['onset']:.3f}\t{e['offset']:.3f}\t{e['event_label']}\n")
    with open(args.output / f"{split}_durations.tsv", "w") as f:
        f.write("filename\tduration\n")
        for clip in clips:
            f.write(f"{clip['filename']}\t{clip['duration']:.3f}\n")
    return clips


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=Path, required=True, help="the folder the packages were unpacked in")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--train_minutes", type=float, default=40)
    parser.add_argument("--validation_minutes", type=float, default=5)
    parser.add_argument("--test_minutes", type=float, default=10)
    parser.add_argument("--soundscape_seconds", type=float, default=10)
    parser.add_argument(
        "--events_per_minute",
        type=float,
        default=12,
        help="mean events per minute over the split, empty clips included (about: see the docstring)",
    )
    parser.add_argument("--empty_fraction", type=float, default=0.15, help="share of clips with no events")
    parser.add_argument("--ebr_db", type=float, nargs=2, default=(0.0, 15.0), help="event-to-background ratio range")
    parser.add_argument(
        "--background_dbfs", type=float, nargs=2, default=(-40.0, -25.0), help="range of the background excerpt's RMS"
    )
    parser.add_argument(
        "--overlap_prob", type=float, default=0.1, help="chance that an onset overlapping another class's event is kept"
    )
    parser.add_argument("--trim_db", type=float, default=40.0)
    parser.add_argument("--max_event_seconds", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.time()
    if args.output.exists() and any(args.output.iterdir()):
        raise SystemExit(f"{args.output} is not empty")
    args.output.mkdir(parents=True, exist_ok=True)
    recordings = load_events(args.sources, args.trim_db, args.seed)
    backgrounds = load_backgrounds(args.sources, args.soundscape_seconds, args.seed)
    minutes = {"train": args.train_minutes, "validation": args.validation_minutes, "test": args.test_minutes}
    clips = {split: make_split(split, minutes[split], args, recordings, backgrounds) for split in SPLITS}
    for clip_list in clips.values():
        for clip in clip_list:
            for e in clip["events"]:
                del e["onset_sample"], e["offset_sample"]
    manifest = {
        "arguments": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "sample_rate": SAMPLE_RATE,
        "events": [
            {k: r[k] for k in ("label", "package", "path", "group", "split")}
            | {
                "seconds": round(len(r["audio"]) / SAMPLE_RATE, 3),
                "sha256": sha256(args.sources / r["path"]),
                "duplicates": r.get("duplicates", []),
            }
            for r in recordings
        ],
        "backgrounds": [
            {k: b[k] for k in ("kind", "package", "path", "split")}
            | {
                "seconds": round(len(b["audio"]) / SAMPLE_RATE, 2),
                "sha256": sha256(args.sources / b["path"]),
                "duplicates": b.get("duplicates", []),
            }
            for b in backgrounds
        ],
        "clips": clips,
    }
    (args.output / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(
        f"{len(recordings)} event recordings, {len(backgrounds)} background recordings "
        f"({sum(len(b['audio']) for b in backgrounds) / SAMPLE_RATE / 60:.1f} min)"
    )
    header = f"{'class':14s}" + "".join(f"{s + ' rec/events':>22s}" for s in SPLITS)
    print(header)
    for label in EVENTS:
        row = f"{label:14s}"
        for split in SPLITS:
            n_rec = sum(r["label"] == label and r["split"] == split for r in recordings)
            n_ev = sum(e["event_label"] == label for c in clips[split] for e in c["events"])
            row += f"{f'{n_rec} / {n_ev}':>22s}"
        print(row)
    for split in SPLITS:
        n = len(clips[split])
        empty = sum(not c["events"] for c in clips[split])
        n_ev = sum(len(c["events"]) for c in clips[split])
        n_bg = sum(b["split"] == split for b in backgrounds)
        print(
            f"{split}: {n} clips ({n * args.soundscape_seconds / 60:.1f} min), {empty} without events, {n_ev} events; "
            f"{n_bg} background recordings"
        )
    print(f"built in {time.time() - started:.0f} s -> {args.output}")


if __name__ == "__main__":
    main()
