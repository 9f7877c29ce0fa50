#!/usr/bin/env python
"""Build the real-audio mini benchmark from Debian packages.

One command:

    .venv/bin/python benchmarks/quality/build_data.py --out benchmarks/quality/data

writes

* ``DATA/pretrain/<source>/<file>.wav``: an unlabelled pre-training corpus (game music, game sound effects,
  game voices, note sequences rendered from a General MIDI soundfont, diphone speech), mono 16 kHz 16-bit WAV,
  clips of at most 10 s;
* ``DATA/tasks/<task>/{train,test}/<label>/<file>.wav``: labelled tasks whose test split comes from sources that
  training never sees (another soundfont, other instruments, another voice);
* ``DATA/manifest.json``: every output file with its sha256, duration, source package, kind/task/split/label;
* ``DATA/debs`` (downloaded .deb files) and ``DATA/unpacked`` (their contents): caches.

Each step writes ``DATA/steps/<step>.json`` when it is finished; a re-run skips finished steps and rebuilds the
same manifest. An unfinished step is redone from scratch. See benchmarks/quality/README.md.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from multiprocessing import Pool

import numpy as np
import soundfile as sf

from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import parse_command_line

SR = 16000
MAX_CLIP_SEC = 10.0
MIN_CLIP_SEC = 0.3  # shorter pieces (and silent ones) are dropped
SILENCE_PEAK = 10 ** (-60 / 20)  # a clip whose peak is below -60 dBFS counts as silent
AUTO_MUSIC_SEC = 45.0  # "auto" kind: files at least this long are music, shorter ones sound effects
AUDIO_EXTENSIONS = (".ogg", ".opus", ".wav", ".flac", ".mp3", ".it", ".s3m", ".xm", ".mod")
SEED = 12

# Reserved for independent evaluation: never used here.
FORBIDDEN_PACKAGES = {"fluid-soundfont-gm", "fluid-soundfont-gs", "hydrogen-drumkits"}

# Licences as stated in each package's debian/copyright (see README.md for details).
LICENSES = {
    "wesnoth-1.16-music": "GPL-2+",
    "warzone2100-music": "GPL-2+ (original soundtrack); CC-BY-SA-3.0+ or GPL-2+ (legacy/aftermath albums)",
    "supertuxkart-data": "per file: CC-BY-SA-3.0/4.0, CC-BY-3.0, CC0, public domain, GPL",
    "hedgewars-data": "GPL-2 (music); GFDL-1.3 (Data/Sounds incl. voices); CC-BY-SA-3.0 (Droplet sounds)",
    "frozen-bubble-data": "GPL-2",
    "pingus-data": "GPL-2+",
    "0ad-data": "CC-BY-SA-3.0 (art and audio)",
    "timgm6mb-soundfont": "GPL-2",
    "freepats": "GPL-2+ (with a composition exception)",
    "festvox-kallpc16k": "free, modification/redistribution allowed (CSTR/OGI licence)",
    "festvox-kdlpc16k": "free, modification/redistribution allowed (CSTR/OGI licence)",
    "festlex-cmu": "CMU dictionary licence (BSD-like)",
    "festlex-poslex": "free (CSTR licence)",
    "base-files": "licence texts (read aloud as speech text)",
}

TOOLS = {  # executable -> apt package that provides it
    "apt-get": "apt",
    "dpkg-deb": "dpkg",
    "ffmpeg": "ffmpeg",
    "fluidsynth": "fluidsynth",
    "festival": "festival",
    "timidity": "timidity",
}

# Game packages for the pre-training corpus: (regex on the path inside the package, kind); first match wins.
# kind "auto": music when the file is at least AUTO_MUSIC_SEC long, else sfx.
GAME_SOURCES = {
    "frozen-bubble-data": [(r"/snd/", "auto")],
    "pingus-data": [(r"/data/music/", "music"), (r"/data/sounds/", "sfx")],
    "hedgewars-data": [(r"/Data/Music/", "music"), (r"/Sounds/voices/", "speech"), (r"/Data/Sounds/", "sfx")],
    "supertuxkart-data": [(r"/data/music/", "music"), (r"/data/sfx/", "sfx"), (r".", "auto")],
    "wesnoth-1.16-music": [(r"/music/", "music")],
    "warzone2100-music": [(r"/music/", "music")],
    "0ad-data": [(r"audio/music/", "music"), (r"audio/voice/", "speech"), (r"audio/", "sfx")],
}

# ----------------------------------------------------------------------------------------------------------
# Tasks. Rendered notes: (program, midi pitch, velocity). Training notes come from the TimGM6mb soundfont
# (fluidsynth), test notes from the freepats GUS patches (timidity): another sample set, another synthesiser.
# MuseScore General is deliberately NOT used: most of its presets are Fluid R3 samples, and fluid-soundfont-gm
# is reserved for independent evaluation.
TRAIN_INSTRUMENTS = "timgm6mb-soundfont"
TEST_INSTRUMENTS = "freepats"
SOUNDFONT_FILES = {"timgm6mb-soundfont": "usr/share/sounds/sf2/TimGM6mb.sf2"}

# instrument family -> (GM programs for train (TimGM6mb), GM programs for test (freepats), lowest, highest pitch)
INSTRUMENT_FAMILIES = {
    "piano": ([0, 1, 2, 3, 4, 5], [0, 2, 4, 5], 36, 84),
    "mallet": ([8, 9, 10, 11, 12, 13], [8, 9, 13, 14], 55, 91),
    "organ": ([16, 17, 18, 19, 20, 21], [16, 19, 21, 23], 36, 84),
    "guitar": ([24, 25, 26, 27, 28, 29], [24, 25, 27, 29], 40, 76),
    "bass": ([32, 33, 34, 35, 36, 37], [32, 33, 35, 36], 28, 55),
    "strings": ([40, 41, 42, 43, 44, 48], [40, 42, 44, 48], 36, 79),
    "brass": ([56, 57, 58, 59, 60, 61], [56, 57, 58, 60], 45, 77),
    "reed": ([64, 65, 66, 68, 69, 71], [65, 66, 68, 71], 45, 81),
    "pipe": ([72, 73, 74, 75, 77, 79], [72, 73, 74, 75], 60, 91),
}
INSTRUMENT_PITCHES_PER_PROGRAM = 5
INSTRUMENT_VELOCITIES = (60, 90, 120)

PITCH_CLASSES = ["C", "C#", "D", "D#", "E", "F", "F#", "G", "G#", "A", "A#", "B"]
PITCH_TRAIN_PROGRAMS = [0, 11, 19, 24, 40, 56, 65, 73]  # TimGM6mb
PITCH_TEST_PROGRAMS = [2, 15, 16, 25, 42, 57, 71, 74]  # other instruments, from freepats
PITCH_RANGE = (36, 95)  # five octaves, C2..B6 (three octaves made the task too easy for log-mel features)
PITCH_VELOCITIES = (75, 110)

NOTE_HOLD_SEC = 1.0  # note on -> note off
NOTE_CLIP_SEC = 1.5  # clip length (includes the release)
NOTE_SLOT_SEC = 1.6  # spacing of the notes in the rendered stream
RENDER_SR = 48000

SPEECH_WORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]
SPEECH_F0 = (85, 100, 115, 130, 145, 160)
SPEECH_STRETCH = (0.8, 0.9, 1.0, 1.15, 1.3)
VOICES = {  # voice -> (apt package, festival voice name)
    "kal": ("festvox-kallpc16k", "kal_diphone"),
    "ked": ("festvox-kdlpc16k", "ked_diphone"),
}
SPEECH_TRAIN_VOICE = "kal"
SPEECH_TEST_VOICE = "ked"
FESTIVAL_LEXICONS = ["festlex-cmu", "festlex-poslex"]

# Pre-training material rendered/synthesised from the *train* sources only.
PRETRAIN_NOTES_MINUTES = 30
PRETRAIN_SPEECH_WORDS = 5000  # ~30 min of diphone speech read from licence texts
LICENSE_TEXTS = ["Apache-2.0", "Artistic", "BSD", "GPL-2", "MPL-2.0"]


class BuildError(RuntimeError):
    """A problem the user has to fix (missing tool or package); printed without a traceback."""


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------------------------
# apt / dpkg / external tools


def require_tool(name: str, apt_package: str | None = None, which=shutil.which) -> str:
    path = which(name)
    if path is None:
        apt_package = apt_package or TOOLS.get(name, name)
        raise BuildError(f"required tool '{name}' not found: install it with `apt-get install {apt_package}`")
    return path


def fetch_deb(package: str, debs_dir: str) -> str:
    """Download ``package``'s .deb into ``debs_dir`` (once) and return its path."""
    if package in FORBIDDEN_PACKAGES:
        raise BuildError(f"package '{package}' is reserved for independent evaluation and must not be used")
    os.makedirs(debs_dir, exist_ok=True)
    found = sorted(glob.glob(os.path.join(debs_dir, f"{package}_*.deb")))
    if not found:
        require_tool("apt-get")
        log(f"  downloading {package}")
        proc = subprocess.run(["apt-get", "download", package], cwd=debs_dir, capture_output=True, text=True)
        found = sorted(glob.glob(os.path.join(debs_dir, f"{package}_*.deb")))
        if proc.returncode != 0 or not found:
            raise BuildError(
                f"could not download Debian package '{package}' with `apt-get download {package}` "
                f"(is it in your apt sources? try `apt-get update`):\n{proc.stderr.strip()}"
            )
    return found[-1]


def unpack_deb(deb: str, dest: str) -> str:
    """``dpkg-deb -x deb dest`` once (a marker file records completion); returns ``dest``."""
    marker = os.path.join(dest, ".unpacked")
    if os.path.exists(marker):
        return dest
    require_tool("dpkg-deb")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    log(f"  unpacking {os.path.basename(deb)}")
    subprocess.run(["dpkg-deb", "-x", deb, dest], check=True)
    open(marker, "w").close()
    return dest


def deb_name(data_dir: str, package: str) -> str:
    """File name (package_version_arch.deb) of the downloaded package, for the manifest."""
    return os.path.basename(fetch_deb(package, os.path.join(data_dir, "debs")))


def get_package(data_dir: str, package: str) -> str:
    """Download and unpack ``package``; returns the directory holding its files."""
    deb = fetch_deb(package, os.path.join(data_dir, "debs"))
    return unpack_deb(deb, os.path.join(data_dir, "unpacked", package))


def extract_0ad_audio(package_dir: str) -> str:
    """0ad keeps its data in one big zip: extract the ``audio/`` files next to it and delete the zip."""
    dest = package_dir + "-audio"
    marker = os.path.join(dest, ".unpacked")
    if os.path.exists(marker):
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    zip_path = os.path.join(package_dir, "usr/share/games/0ad/mods/public/public.zip")
    log("  extracting audio/ from 0ad public.zip")
    with zipfile.ZipFile(zip_path) as zf:
        for name in sorted(zf.namelist()):
            if name.startswith("audio/") and name.lower().endswith(AUDIO_EXTENSIONS):
                zf.extract(name, dest)
    open(marker, "w").close()
    os.remove(zip_path)  # 3 GB we no longer need
    return dest


# ----------------------------------------------------------------------------------------------------------
# audio helpers


def ffmpeg_decode(path: str) -> np.ndarray:
    """Any file ffmpeg reads -> mono float32 at 16 kHz. Raises RuntimeError when ffmpeg fails.

    ffmpeg's `-ac 1` downmixes stereo to (L + R) / sqrt(2), the package's rule is (L + R) / 2: the two differ by a
    constant factor, which `peak_normalize` removes from every clip this corpus keeps."""
    cmd = [
        "ffmpeg",
        "-nostdin",
        "-v",
        "error",
        "-threads",
        "1",
        "-i",
        path,
        "-vn",
        "-ac",
        "1",
        "-ar",
        str(SR),
        "-f",
        "f32le",
        "-",
    ]
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace").strip()[-300:])
    return np.frombuffer(proc.stdout, dtype=np.float32).copy()


def resample(x: np.ndarray, sr: int) -> np.ndarray:
    if sr == SR:
        return x.astype(np.float32)
    from scipy.signal import resample_poly

    g = math.gcd(sr, SR)
    return resample_poly(x, SR // g, sr // g).astype(np.float32)


def split_clips(x: np.ndarray, max_sec: float = MAX_CLIP_SEC) -> list[np.ndarray]:
    """Cut ``x`` into the fewest equal pieces of at most ``max_sec``."""
    max_len = int(max_sec * SR)
    n = max(1, math.ceil(len(x) / max_len))
    bounds = [round(i * len(x) / n) for i in range(n + 1)]
    return [x[bounds[i] : bounds[i + 1]] for i in range(n)]


def is_usable(x: np.ndarray, min_sec: float = MIN_CLIP_SEC) -> bool:
    return len(x) >= min_sec * SR and float(np.max(np.abs(x))) >= SILENCE_PEAK


def peak_normalize(x: np.ndarray, peak: float = 0.9) -> np.ndarray:
    m = float(np.max(np.abs(x))) if len(x) else 0.0
    return x if m == 0 else (x * (peak / m)).astype(np.float32)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_wav(path: str, x: np.ndarray) -> None:
    """16-bit PCM mono WAV at 16 kHz, written atomically."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    sf.write(tmp, np.clip(x, -1.0, 1.0), SR, subtype="PCM_16", format="WAV")
    os.replace(tmp, path)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


# ----------------------------------------------------------------------------------------------------------
# steps: each returns manifest entries; run_step() stores them in DATA/steps/<step>.json when done


def fingerprint(params) -> str:
    """Short hash of a step's parameters (and the clip settings): a step is redone when they change."""
    text = json.dumps([params, SR, MAX_CLIP_SEC, MIN_CLIP_SEC, SILENCE_PEAK], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_step(data_dir: str, step: str, out_dirs: list[str], fn, params=None) -> dict:
    """Run ``fn() -> {"entries": [...], "skipped": [...], "debs": [...]}`` unless the step is already recorded
    with the same ``params`` and all its files exist."""
    record_path = os.path.join(data_dir, "steps", f"{step}.json")
    if os.path.exists(record_path):
        with open(record_path) as f:
            record = json.load(f)
        if record.get("params") == fingerprint(params) and all(
            os.path.exists(os.path.join(data_dir, e["path"])) for e in record["entries"]
        ):
            log(f"[{step}] already done ({len(record['entries'])} files)")
            return record
    for d in out_dirs:  # an unfinished step is redone from scratch
        shutil.rmtree(os.path.join(data_dir, d), ignore_errors=True)
    t0 = time.time()
    log(f"[{step}] running")
    record = fn()
    record = {
        "step": step,
        "params": fingerprint(params),
        "debs": sorted(record.get("debs", [])),
        "entries": sorted(record["entries"], key=lambda e: e["path"]),
        "skipped": sorted(record.get("skipped", [])),
    }
    os.makedirs(os.path.dirname(record_path), exist_ok=True)
    with open(record_path + ".tmp", "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(record_path + ".tmp", record_path)
    secs = sum(e["seconds"] for e in record["entries"])
    log(
        f"[{step}] done in {time.time() - t0:.0f} s: {len(record['entries'])} files, {secs / 3600:.2f} h, "
        f"{len(record['skipped'])} skipped"
    )
    return record


def make_entry(data_dir: str, path: str, n_samples: int, source: str, **fields) -> dict:
    entry = {
        "path": os.path.relpath(path, data_dir),
        "sha256": sha256_file(path),
        "seconds": round(n_samples / SR, 4),
        "source": source,
    }
    entry.update(fields)
    return entry


def list_audio_files(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.lower().endswith(AUDIO_EXTENSIONS):
                out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


def match_kind(relpath: str, rules: list[tuple[str, str]]) -> str | None:
    for pattern, kind in rules:
        if re.search(pattern, "/" + relpath):
            return kind
    return None


def _convert_job(job: tuple) -> dict:
    """Worker: decode one source file, cut it into clips, write them. Returns a result dict."""
    data_dir, src, out_stem, source, origin, kind = job
    try:
        x = ffmpeg_decode(src)
    except RuntimeError as err:
        return {"origin": origin, "error": str(err), "entries": []}
    if len(x) == 0:
        return {"origin": origin, "error": "no audio decoded", "entries": []}
    if kind == "auto":
        kind = "music" if len(x) >= AUTO_MUSIC_SEC * SR else "sfx"
    entries, dropped = [], 0
    for i, clip in enumerate(split_clips(x)):
        if not is_usable(clip):
            dropped += 1
            continue
        path = f"{out_stem}__{i:03d}.wav"
        write_wav(path, clip)
        entries.append(make_entry(data_dir, path, len(clip), source, kind=kind, split="pretrain", origin=origin))
    return {"origin": origin, "error": None, "entries": entries, "dropped": dropped}


def convert_source_files(data_dir: str, source: str, root: str, rules, jobs: int = 2) -> dict:
    """Turn the audio files under ``root`` (an unpacked package) into pre-training clips."""
    job_list = []
    for rel in list_audio_files(root):
        kind = match_kind(rel, rules)
        if kind is None:
            continue
        stem = safe_name(re.sub(r"^usr/share/(games/)?", "", os.path.splitext(rel)[0]).replace("/", "-"))
        job_list.append(
            (data_dir, os.path.join(root, rel), os.path.join(data_dir, "pretrain", source, stem), source, rel, kind)
        )
    entries, skipped = [], []
    if jobs > 1 and len(job_list) > 1:
        with Pool(jobs) as pool:
            results = list(pool.imap(_convert_job, job_list, chunksize=1))
    else:
        results = [_convert_job(j) for j in job_list]
    for res in results:
        entries.extend(res["entries"])
        if res["error"]:
            skipped.append(f"{res['origin']}: {res['error'][:200]}")
    return {"entries": entries, "skipped": skipped}


def step_game_package(data_dir: str, package: str, jobs: int) -> dict:
    def build():
        root = get_package(data_dir, package)
        if package == "0ad-data":
            root = extract_0ad_audio(root)
        record = convert_source_files(data_dir, package, root, GAME_SOURCES[package], jobs)
        return dict(record, debs=[deb_name(data_dir, package)])

    params = [package, GAME_SOURCES[package], AUTO_MUSIC_SEC]
    return run_step(data_dir, f"pretrain-{package}", [f"pretrain/{package}"], build, params)


# ----------------------------------------------------------------------------------------------------------
# MIDI + fluidsynth rendering


def _varlen(n: int) -> bytes:
    out = [n & 0x7F]
    n >>= 7
    while n:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(reversed(out))


def write_midi(path: str, events: list[tuple[float, bytes]]) -> None:
    """Write a type-0 standard MIDI file from (time in seconds, raw message) pairs (120 bpm, 480 ticks/beat)."""
    ticks_per_sec = 960
    track = bytearray(b"\x00\xff\x51\x03\x07\xa1\x20")  # tempo 500000 us per beat
    last = 0
    for t, msg in sorted(events, key=lambda e: e[0]):  # stable: keeps the given order at equal times
        tick = int(round(t * ticks_per_sec))
        track += _varlen(tick - last) + msg
        last = tick
    track += b"\x00\xff\x2f\x00"
    with open(path, "wb") as f:
        f.write(b"MThd" + struct.pack(">IHHH", 6, 0, 1, 480))
        f.write(b"MTrk" + struct.pack(">I", len(track)) + bytes(track))


def note_events(t: float, channel: int, program: int, pitch: int, velocity: int, hold: float) -> list:
    ch = channel & 0x0F
    return [
        (t, bytes([0xB0 | ch, 121, 0])),  # reset controllers
        (t, bytes([0xB0 | ch, 7, 100])),  # volume
        (t, bytes([0xB0 | ch, 10, 64])),  # pan centre
        (t, bytes([0xC0 | ch, program])),
        (t, bytes([0x90 | ch, pitch, velocity])),
        (t + hold, bytes([0x80 | ch, pitch, 0])),
    ]


def freepats_programs(cfg_lines: list[str]) -> list[int]:
    """Melodic programs (bank 0) that a timidity config defines."""
    programs, in_bank0 = [], False
    for line in cfg_lines:
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] in ("bank", "drumset"):
            in_bank0 = words == ["bank", "0"]
        elif in_bank0 and words[0].isdigit():
            programs.append(int(words[0]))
    return programs


def render_midi(package: str, package_dir: str, events: list, work_dir: str) -> np.ndarray:
    """Render MIDI events without reverb/chorus: soundfonts with fluidsynth, freepats with timidity.

    Returns mono float32 at RENDER_SR; time 0 of the file is time 0 of the events.
    """
    os.makedirs(work_dir, exist_ok=True)
    mid = os.path.join(work_dir, "render.mid")
    wav = os.path.join(work_dir, "render.wav")
    write_midi(mid, events)
    if package == "freepats":
        require_tool("timidity")
        cfg = os.path.join(work_dir, "freepats.cfg")
        with open(os.path.join(package_dir, "etc/timidity/freepats.cfg")) as f:
            patches = [line for line in f if not line.startswith("dir ")]
        # timidity also reads the system config (which may point at other patch sets): every program we play
        # must be defined by freepats, whose definitions (read last) then win.
        defined = set(freepats_programs(patches))
        used = {msg[1] for _, msg in events if msg[0] & 0xF0 == 0xC0}
        if not used <= defined:
            raise BuildError(f"programs {sorted(used - defined)} are not in freepats")
        with open(cfg, "w") as f:
            f.write(f"dir {os.path.join(package_dir, 'usr/share/midi/freepats')}\n" + "".join(patches))
        cmd = [
            "timidity",
            "-c",
            cfg,
            "-Ow",
            "-o",
            wav,
            "-s",
            str(RENDER_SR),
            "-EFreverb=0",
            "-EFchorus=0",
            "--preserve-silence",
            "--quiet=2",
            mid,
        ]
    else:
        require_tool("fluidsynth")
        cmd = [
            "fluidsynth",
            "-ni",
            "-q",
            "-R",
            "0",
            "-C",
            "0",
            "-g",
            "0.5",
            "-r",
            str(RENDER_SR),
            "-O",
            "float",
            "-T",
            "wav",
            "-F",
            wav,
            os.path.join(package_dir, SOUNDFONT_FILES[package]),
            mid,
        ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(wav):
        raise BuildError(f"rendering with {cmd[0]} failed: {proc.stderr.strip()[-500:]}")
    x, sr = sf.read(wav, dtype="float32", always_2d=True)
    assert sr == RENDER_SR, sr
    os.remove(wav)
    return x.mean(axis=1)


def render_notes(package: str, package_dir: str, notes: list[tuple[int, int, int]], work_dir: str) -> list:
    """Render single notes (program, pitch, velocity) in one synthesiser run; returns 16 kHz clips."""
    events = []
    channels = [c for c in range(16) if c != 9]  # channel 10 is drums
    for i, (program, pitch, velocity) in enumerate(notes):
        t = 0.5 + i * NOTE_SLOT_SEC
        ch = channels[i % len(channels)]
        events += note_events(t, ch, program, pitch, velocity, NOTE_HOLD_SEC)
        events.append((t + NOTE_CLIP_SEC + 0.02, bytes([0xB0 | ch, 120, 0])))  # all sound off
    x = render_midi(package, package_dir, events, work_dir)
    n = int(NOTE_CLIP_SEC * RENDER_SR)
    clips = []
    for i in range(len(notes)):
        start = int(round((0.5 + i * NOTE_SLOT_SEC) * RENDER_SR))
        seg = x[start : start + n]
        seg = np.pad(seg, (0, n - len(seg)))
        clips.append(resample(seg, RENDER_SR))
    return clips


# ----------------------------------------------------------------------------------------------------------
# tasks


def instrument_notes(split: str) -> list[tuple[str, int, int, int]]:
    """(label, program, pitch, velocity) for the instrument task; both splits use the same pitches."""
    notes = []
    for family, (train_programs, test_programs, lo, hi) in INSTRUMENT_FAMILIES.items():
        pitches = [int(round(p)) for p in np.linspace(lo, hi, INSTRUMENT_PITCHES_PER_PROGRAM)]
        for program in train_programs if split == "train" else test_programs:
            for pitch in pitches:
                for vel in INSTRUMENT_VELOCITIES:
                    notes.append((family, program, pitch, vel))
    return notes


def pitch_notes(programs: list[int]) -> list[tuple[str, int, int, int]]:
    notes = []
    for program in programs:
        for pitch in range(PITCH_RANGE[0], PITCH_RANGE[1] + 1):
            for vel in PITCH_VELOCITIES:
                notes.append((PITCH_CLASSES[pitch % 12], program, pitch, vel))
    return notes


def task_plan() -> dict:
    """What each task split is made of: {task: {split: (source package, [(label, program, pitch, vel)])}}."""
    return {
        "instrument": {
            "train": (TRAIN_INSTRUMENTS, instrument_notes("train")),
            "test": (TEST_INSTRUMENTS, instrument_notes("test")),
        },
        "pitch": {
            "train": (TRAIN_INSTRUMENTS, pitch_notes(PITCH_TRAIN_PROGRAMS)),
            "test": (TEST_INSTRUMENTS, pitch_notes(PITCH_TEST_PROGRAMS)),
        },
    }


def save_task_clips(data_dir: str, task: str, split: str, items: list[dict]) -> dict:
    """Write labelled clips. Each item: label, name, audio (16 kHz float), source, group, origin.

    ``group`` names the unit that must not be shared between train and test (soundfont+program, voice...).
    """
    entries, skipped = [], []
    for item in items:
        x = item["audio"]
        if not is_usable(x, min_sec=0.1):
            skipped.append(f"{item['origin']}: silent")
            continue
        path = os.path.join(data_dir, "tasks", task, split, item["label"], item["name"] + ".wav")
        write_wav(path, peak_normalize(x))
        entries.append(
            make_entry(
                data_dir,
                path,
                len(x),
                item["source"],
                kind=task,
                task=task,
                split=split,
                label=item["label"],
                group=item["group"],
                origin=item["origin"],
            )
        )
    return {"entries": entries, "skipped": skipped}


def step_note_task(data_dir: str, task: str, split: str) -> dict:
    package, notes = task_plan()[task][split]

    def build():
        clips = render_notes(
            package,
            get_package(data_dir, package),
            [n[1:] for n in notes],
            os.path.join(data_dir, "work", f"{task}-{split}"),
        )
        items = []
        for (label, program, pitch, vel), clip in zip(notes, clips):
            items.append(
                {
                    "label": label,
                    "name": f"{package.split('-')[0]}_p{program:03d}_n{pitch:03d}_v{vel:03d}",
                    "audio": clip,
                    "source": package,
                    "group": f"{package}/program{program}",
                    "origin": f"{package} program {program} pitch {pitch} velocity {vel}",
                }
            )
        return dict(save_task_clips(data_dir, task, split, items), debs=[deb_name(data_dir, package)])

    params = [package, notes, NOTE_HOLD_SEC, NOTE_CLIP_SEC, NOTE_SLOT_SEC, RENDER_SR]
    return run_step(data_dir, f"task-{task}-{split}", [f"tasks/{task}/{split}"], build, params)


# ----------------------------------------------------------------------------------------------------------
# festival speech


def festival_root(data_dir: str) -> str:
    """Unpack the lexicons and both diphone voices into one tree (festival finds them via lexdir)."""
    root = os.path.join(data_dir, "unpacked", "festival-root")
    marker = os.path.join(root, ".unpacked")
    if os.path.exists(marker):
        return root
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for package in FESTIVAL_LEXICONS + [p for p, _ in VOICES.values()]:
        deb = fetch_deb(package, os.path.join(data_dir, "debs"))
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    open(marker, "w").close()
    return root


def festival_debs(data_dir: str, voice: str) -> list[str]:
    return [deb_name(data_dir, p) for p in FESTIVAL_LEXICONS + [VOICES[voice][0]]]


def scheme_string(text: str) -> str:
    return '"' + text.replace("\\", " ").replace('"', " ") + '"'


def synthesize(data_dir: str, voice: str, utterances: list[tuple[str, float, float, str]], work_dir: str):
    """Synthesise (text, f0 mean, duration stretch, wav path) with festival and the given diphone voice."""
    require_tool("festival")
    root = festival_root(data_dir)
    dicts = os.path.join(root, "usr/share/festival/dicts/")
    name = VOICES[voice][1]
    voice_dir = os.path.join(root, "usr/share/festival/voices/english", name)
    lines = [
        f"(set! lexdir {scheme_string(dicts)})",
        f"(set! pos_model_dir {scheme_string(dicts)})",
        '(load (path-append datadir "pos.scm"))',
        f"(set! voice-locations (cons (cons '{name} {scheme_string(voice_dir + '/')}) voice-locations))",
        f"(load {scheme_string(os.path.join(voice_dir, 'festvox', name + '.scm'))})",
        f"(voice_{name})",
        "(define (synth_to text f0 stretch path)",
        "  (set! int_lr_params (list (list 'target_f0_mean f0) (list 'target_f0_std (/ f0 8.0))",
        "                            '(model_f0_mean 170) '(model_f0_std 34)))",
        "  (Parameter.set 'Duration_Stretch stretch)",
        # Utterance does not evaluate its arguments: build the call, else every file says "text"
        "  (utt.save.wave (utt.synth (eval (list 'Utterance 'Text text))) path 'riff))",
    ]
    for text, f0, stretch, path in utterances:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lines.append(f"(synth_to {scheme_string(text)} {f0} {stretch} {scheme_string(path)})")
    os.makedirs(work_dir, exist_ok=True)
    script = os.path.join(work_dir, f"{voice}.scm")
    with open(script, "w") as f:
        f.write("\n".join(lines) + "\n")
    proc = subprocess.run(["festival", "--batch", script], capture_output=True, text=True)
    missing = [p for *_, p in utterances if not os.path.exists(p)]
    if proc.returncode != 0 or missing:
        raise BuildError(f"festival failed ({len(missing)} files missing): {proc.stderr.strip()[-800:]}")


def load_wav16(path: str) -> np.ndarray:
    x, sr = sf.read(path, dtype="float32", always_2d=True)
    return resample(x.mean(axis=1), sr)


def step_speech_task(data_dir: str, split: str) -> dict:
    voice = SPEECH_TRAIN_VOICE if split == "train" else SPEECH_TEST_VOICE
    package = VOICES[voice][0]

    def build():
        work = os.path.join(data_dir, "work", f"speech-{split}")
        shutil.rmtree(work, ignore_errors=True)
        utts = []
        for word in SPEECH_WORDS:
            for f0 in SPEECH_F0:
                for stretch in SPEECH_STRETCH:
                    utts.append((word, f0, stretch, os.path.join(work, f"{voice}_{word}_f{f0}_s{stretch}.wav")))
        synthesize(data_dir, voice, utts, work)
        items = [
            {
                "label": word,
                "name": os.path.basename(p)[:-4],
                "audio": load_wav16(p),
                "source": package,
                "group": f"{package}",
                "origin": f"festival {VOICES[voice][1]} f0={f0} stretch={stretch}",
            }
            for word, f0, stretch, p in utts
        ]
        record = save_task_clips(data_dir, "speech", split, items)
        shutil.rmtree(work)
        return dict(record, debs=festival_debs(data_dir, voice))

    params = [voice, SPEECH_WORDS, SPEECH_F0, SPEECH_STRETCH]
    return run_step(data_dir, f"task-speech-{split}", [f"tasks/speech/{split}"], build, params)


# ----------------------------------------------------------------------------------------------------------
# pre-training material rendered from the train-only sources


def pretrain_note_events(minutes: int, seed: int = SEED) -> list:
    """Random 10-s segments of melodies/chords (+ drums) on random GM programs."""
    rng = np.random.default_rng(seed)
    scales = [[0, 2, 4, 5, 7, 9, 11], [0, 2, 3, 5, 7, 8, 10], [0, 2, 4, 7, 9], [0, 3, 5, 7, 10]]
    events = []
    for seg in range(int(minutes * 60 / MAX_CLIP_SEC)):
        t0 = seg * MAX_CLIP_SEC
        key = int(rng.integers(0, 12))
        scale = scales[int(rng.integers(0, len(scales)))]
        n_voices = int(rng.integers(1, 4))
        for v in range(n_voices):
            ch = v
            program = int(rng.integers(0, 112))
            centre = int(rng.integers(40, 80))
            t = t0 + float(rng.uniform(0, 0.5))
            chord = v > 0 and rng.random() < 0.5
            while t < t0 + MAX_CLIP_SEC - 0.6:
                dur = float(rng.choice([0.125, 0.25, 0.25, 0.5, 0.5, 1.0, 2.0]))
                dur = min(dur, t0 + MAX_CLIP_SEC - 0.3 - t)
                degree = int(rng.integers(-7, 8))
                pitch = centre + 12 * (degree // len(scale)) + scale[degree % len(scale)] + key
                vel = int(rng.integers(50, 121))
                pitches = [pitch, pitch + 4, pitch + 7] if chord else [pitch]
                for p in pitches:
                    events += note_events(t, ch, program, int(np.clip(p, 21, 108)), vel, dur * 0.9)
                t += dur
        if rng.random() < 0.5:  # drums on channel 10
            beat = float(rng.uniform(0.3, 0.6))
            kit = [35, 36, 38, 40, 42, 44, 46, 49, 51]
            t = t0
            while t < t0 + MAX_CLIP_SEC - 0.4:
                for p in (36, 42) if rng.random() < 0.5 else (int(rng.choice(kit)),):
                    events += [(t, bytes([0x99, p, int(rng.integers(60, 120))])), (t + 0.1, bytes([0x89, p, 0]))]
                t += beat
        for ch in list(range(4)) + [9]:
            events.append((t0 + MAX_CLIP_SEC - 0.05, bytes([0xB0 | ch, 120, 0])))
    return events


def step_pretrain_notes(data_dir: str) -> dict:
    package = TRAIN_INSTRUMENTS

    def build():
        x = render_midi(
            package,
            get_package(data_dir, package),
            pretrain_note_events(PRETRAIN_NOTES_MINUTES),
            os.path.join(data_dir, "work", "pretrain-notes"),
        )
        x = peak_normalize(resample(x, RENDER_SR), 0.9)
        seg = int(MAX_CLIP_SEC * SR)
        entries = []
        for i in range(len(x) // seg):
            clip = x[i * seg : (i + 1) * seg]
            if not is_usable(clip):
                continue
            path = os.path.join(data_dir, "pretrain", "rendered-notes", f"timgm6mb_seq{i:04d}.wav")
            write_wav(path, clip)
            entries.append(
                make_entry(
                    data_dir,
                    path,
                    len(clip),
                    package,
                    kind="music",
                    split="pretrain",
                    origin=f"random note sequence {i} (seed {SEED})",
                )
            )
        return {"entries": entries, "debs": [deb_name(data_dir, package)]}

    params = [package, PRETRAIN_NOTES_MINUTES, SEED, RENDER_SR]
    return run_step(data_dir, "pretrain-rendered-notes", ["pretrain/rendered-notes"], build, params)


def speech_text_chunks(max_words: int = 22, total_words: int = PRETRAIN_SPEECH_WORDS) -> list[str]:
    """Sentences (cut to <= max_words) from Debian's licence texts, up to total_words words."""
    chunks, count = [], 0
    for name in LICENSE_TEXTS:
        path = os.path.join("/usr/share/common-licenses", name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = re.sub(r"\s+", " ", f.read())
        for sentence in re.split(r"(?<=[.;:!?])\s+", text):
            words = re.sub(r"[^A-Za-z0-9,.;:'()\- ]", " ", sentence).split()
            for i in range(0, len(words), max_words):
                part = words[i : i + max_words]
                if len(part) >= 3:
                    chunks.append(" ".join(part))
                    count += len(part)
                if count >= total_words:
                    return chunks
    return chunks


def step_pretrain_speech(data_dir: str) -> dict:
    voice = SPEECH_TRAIN_VOICE  # the speech task's *train* voice only
    package = VOICES[voice][0]

    def build():
        work = os.path.join(data_dir, "work", "pretrain-speech")
        shutil.rmtree(work, ignore_errors=True)
        rng = np.random.default_rng(SEED)
        utts = []
        for i, text in enumerate(speech_text_chunks()):
            f0 = int(rng.integers(80, 170))
            stretch = round(float(rng.uniform(0.85, 1.25)), 2)
            utts.append((text, f0, stretch, os.path.join(work, f"{voice}_text{i:04d}.wav")))
        synthesize(data_dir, voice, utts, work)
        entries = []
        for i, (text, f0, stretch, p) in enumerate(utts):
            x = load_wav16(p)
            for k, clip in enumerate(split_clips(x)):
                if not is_usable(clip):
                    continue
                path = os.path.join(data_dir, "pretrain", "festival-speech", f"{voice}_text{i:04d}__{k:03d}.wav")
                write_wav(path, clip)
                entries.append(
                    make_entry(
                        data_dir,
                        path,
                        len(clip),
                        package,
                        kind="speech",
                        split="pretrain",
                        origin=f"festival {VOICES[voice][1]} reading licence text, f0={f0}",
                    )
                )
        shutil.rmtree(work)
        return {"entries": entries, "debs": festival_debs(data_dir, voice)}

    params = [voice, PRETRAIN_SPEECH_WORDS, LICENSE_TEXTS, SEED]
    return run_step(data_dir, "pretrain-festival-speech", ["pretrain/festival-speech"], build, params)


# ----------------------------------------------------------------------------------------------------------
# manifest and checks


def check_task_disjointness(entries: list[dict]) -> None:
    """Every task's test split must share neither source package nor group with its train split, nor a source
    package with the pre-training corpus."""
    pretrain_sources = {e["source"] for e in entries if e["split"] == "pretrain"}
    leaked = {e["source"] for e in entries if e.get("task") and e["split"] == "test"} & pretrain_sources
    if leaked:
        raise AssertionError(f"test splits use pre-training sources {sorted(leaked)}")
    tasks = sorted({e["task"] for e in entries if e.get("task")})
    for task in tasks:
        sets = {}
        for split in ("train", "test"):
            es = [e for e in entries if e.get("task") == task and e["split"] == split]
            sets[split] = ({e["source"] for e in es}, {e["group"] for e in es})
        shared = (sets["train"][0] & sets["test"][0]) | (sets["train"][1] & sets["test"][1])
        if shared:
            raise AssertionError(f"task {task}: train and test share sources {sorted(shared)}")


def summarize(entries: list[dict]) -> dict:
    hours = {}
    pretrain_sources = {}
    for e in entries:
        if e["split"] == "pretrain":
            hours[e["kind"]] = hours.get(e["kind"], 0.0) + e["seconds"] / 3600
            pretrain_sources[e["source"]] = pretrain_sources.get(e["source"], 0.0) + e["seconds"] / 3600
    tasks = {}
    for e in entries:
        if e.get("task"):
            counts = tasks.setdefault(e["task"], {}).setdefault(e["split"], {})
            counts[e["label"]] = counts.get(e["label"], 0) + 1
    task_sources = {}
    for e in entries:
        if e.get("task"):
            srcs = task_sources.setdefault(e["task"], {}).setdefault(e["split"], [])
            if e["source"] not in srcs:
                srcs.append(e["source"])
    return {
        "pretrain_hours_by_kind": {k: round(v, 3) for k, v in sorted(hours.items())},
        "pretrain_hours_total": round(sum(hours.values()), 3),
        "pretrain_clips": sum(1 for e in entries if e["split"] == "pretrain"),
        "pretrain_hours_by_source": {k: round(v, 3) for k, v in sorted(pretrain_sources.items())},
        "task_clips": {t: {s: dict(sorted(c.items())) for s, c in sorted(v.items())} for t, v in sorted(tasks.items())},
        "task_sources": {t: {s: sorted(v) for s, v in sorted(d.items())} for t, d in sorted(task_sources.items())},
    }


def write_manifest(data_dir: str) -> dict:
    entries, skipped, debs = [], {}, set()
    for record_path in sorted(glob.glob(os.path.join(data_dir, "steps", "*.json"))):
        with open(record_path) as f:
            record = json.load(f)
        entries.extend(record["entries"])
        debs.update(record.get("debs", []))
        if record.get("skipped"):
            skipped[record["step"]] = record["skipped"]
    entries.sort(key=lambda e: e["path"])
    check_task_disjointness(entries)
    manifest = {
        "sample_rate": SR,
        "format": "WAV, mono, 16-bit PCM",
        "max_clip_seconds": MAX_CLIP_SEC,
        "summary": summarize(entries),
        "licenses": {s: LICENSES.get(s, "?") for s in sorted({e["source"] for e in entries})},
        "debian_packages": sorted(debs),
        "skipped_files": skipped,
        "files": entries,
    }
    path = os.path.join(data_dir, "manifest.json")
    with open(path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)
    return manifest


def format_summary(manifest: dict) -> str:
    s = manifest["summary"]
    lines = [f"pre-training corpus: {s['pretrain_hours_total']:.2f} h in {s['pretrain_clips']} clips"]
    for kind, h in s["pretrain_hours_by_kind"].items():
        lines.append(f"  {kind:8s} {h:6.2f} h")
    lines.append("  by source: " + ", ".join(f"{k} {v:.2f} h" for k, v in s["pretrain_hours_by_source"].items()))
    for task, splits in s["task_clips"].items():
        lines.append(f"task {task}:")
        for split, counts in splits.items():
            srcs = ", ".join(s["task_sources"][task][split])
            lines.append(
                f"  {split:5s} {sum(counts.values()):5d} clips, {len(counts)} labels, from {srcs}: "
                + " ".join(f"{k}={v}" for k, v in counts.items())
            )
    n_skipped = sum(len(v) for v in manifest["skipped_files"].values())
    lines.append(f"skipped (undecodable/empty) source files: {n_skipped}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------


def build(data_dir: str, jobs: int = 2, include_0ad: bool = True) -> dict:
    data_dir = os.path.abspath(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    for tool in TOOLS:
        require_tool(tool)
    t0 = time.time()
    packages = [p for p in GAME_SOURCES if include_0ad or p != "0ad-data"]
    for package in packages:
        step_game_package(data_dir, package, jobs)
    step_pretrain_notes(data_dir)
    step_pretrain_speech(data_dir)
    for task in ("instrument", "pitch"):
        for split in ("train", "test"):
            step_note_task(data_dir, task, split)
    for split in ("train", "test"):
        step_speech_task(data_dir, split)
    shutil.rmtree(os.path.join(data_dir, "work"), ignore_errors=True)
    manifest = write_manifest(data_dir)
    log(f"build finished in {time.time() - t0:.0f} s")
    return manifest


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(here, "data"), help="output directory (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel decoding processes (default 2)")
    parser.add_argument("--no-0ad", action="store_true", help="skip 0ad-data (a 1.4 GB download, 3 GB unpacked)")
    args = parse_command_line(parser, argv)  # a misspelt flag: one line with the closest flag
    try:
        manifest = build(args.out, jobs=max(1, args.jobs), include_0ad=not args.no_0ad)
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    summary = format_summary(manifest)
    print(summary)
    with open(os.path.join(os.path.abspath(args.out), "SUMMARY.txt"), "w") as f:
        f.write(summary + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main, "build_data.py"))
