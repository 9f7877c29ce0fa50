"""Checks a set written by build_data.py by reading it back, and listens by numbers: for every event, the level inside
its labelled extent against the level of the same clip outside every event, next to what its event-to-background
ratio (manifest.json) predicts for a steady background, 10 log10(1 + 10^(EBR/10)).

    python research/2026-12-sound-events/check_data.py /tmp/sed_data
"""

import csv
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import soundfile as sf

SPLITS = ("train", "validation", "test")


def db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(x.astype(np.float64) ** 2) + 1e-20))


def main():
    root = Path(sys.argv[1])
    manifest = json.loads((root / "manifest.json").read_text())
    problems = []
    for split in SPLITS:
        with open(root / f"{split}.tsv") as f:
            lines = f.read().splitlines()
        if lines[0] != "filename\tonset\toffset\tevent_label":
            problems.append(f"{split}.tsv header {lines[0]!r}")
        rows = list(csv.DictReader(lines, delimiter="\t"))
        by_file = defaultdict(list)
        for row in rows:
            by_file[row["filename"]].append((float(row["onset"]), float(row["offset"]), row["event_label"]))
        wavs = sorted(p.name for p in (root / split).glob("*.wav"))
        clips = {c["filename"]: c for c in manifest["clips"][split]}
        if sorted(clips) != wavs:
            problems.append(f"{split}: the manifest's clips and the wav files differ")
        if not set(by_file) <= set(wavs):
            problems.append(f"{split}.tsv names files that are not in {split}/")
        overlap_events, inside_minus_outside = 0, defaultdict(list)
        predicted, measured = [], []
        formats = Counter()
        for name in wavs:
            info = sf.info(root / split / name)
            formats[(info.samplerate, info.channels, info.subtype, round(info.duration, 3))] += 1
            audio, rate = sf.read(root / split / name, dtype="float32")
            events = sorted(by_file.get(name, []))
            if len(events) != len(clips[name]["events"]):
                problems.append(f"{split}/{name}: {len(events)} rows, {len(clips[name]['events'])} in the manifest")
            outside = np.ones(len(audio), bool)
            for onset, offset, _ in events:
                outside[int(round(onset * rate)) : int(round(offset * rate))] = False
            for i, (onset, offset, label) in enumerate(events):
                if not 0 <= onset < offset <= info.duration + 1e-6:
                    problems.append(f"{split}/{name}: event {onset}-{offset} outside the clip")
                others = [e for j, e in enumerate(events) if j != i and e[0] < offset and onset < e[1]]
                if any(e[2] == label for e in others):
                    problems.append(f"{split}/{name}: two {label} events overlap")
                overlap_events += bool(others)
                if outside.sum() < rate // 2 or others:
                    continue  # too little background to compare with, or another event inside
                gap = db(audio[int(round(onset * rate)) : int(round(offset * rate))]) - db(audio[outside])
                inside_minus_outside[label].append(gap)
                ebr = next(
                    e["ebr_db"]
                    for e in clips[name]["events"]
                    if e["event_label"] == label and abs(e["onset"] - onset) < 1e-3
                )
                predicted.append(10 * np.log10(1 + 10 ** (ebr / 10)))
                measured.append(gap)
        n_events = len(rows)
        empty = sum(not by_file.get(name) for name in wavs)
        counts = Counter(r["event_label"] for r in rows)
        lengths = defaultdict(list)
        for r in rows:
            lengths[r["event_label"]].append(float(r["offset"]) - float(r["onset"]))
        print(
            f"== {split}: {len(wavs)} clips {dict(formats)}, {empty} without events ({empty / len(wavs):.0%}), "
            f"{n_events} events, {overlap_events} ({overlap_events / max(n_events, 1):.0%}) overlapping another"
        )
        print(
            f"   {'class':14s} {'events':>6s} {'length s (median, min-max)':>28s} "
            f"{'inside - outside dB (median, 10-90 %)':>40s} {'> 0 dB':>7s}"
        )
        for label in sorted(counts):
            g, ln = np.array(inside_minus_outside[label]), np.array(lengths[label])
            spread = (
                f"{np.median(g):+5.1f} ({np.percentile(g, 10):+5.1f} .. {np.percentile(g, 90):+5.1f})"
                if len(g)
                else "-"
            )
            above = f"{np.mean(g > 0):.0%}" if len(g) else "-"
            print(
                f"   {label:14s} {counts[label]:6d} {np.median(ln):10.2f} ({ln.min():.2f}-{ln.max():.2f}) "
                f"{spread:>40s} {above:>7s}"
            )
        if measured:
            m, p = np.array(measured), np.array(predicted)
            print(
                f"   isolated events: inside - outside {np.median(m):+.1f} dB median, "
                f"predicted for a steady background "
                f"{np.median(p):+.1f} dB; correlation {np.corrcoef(m, p)[0, 1]:.2f}"
            )
    print("\n".join(problems) if problems else "no problems found")
    print("a few events read back:")
    for split in SPLITS:
        clip = next(c for c in manifest["clips"][split] if len(c["events"]) >= 2)
        audio, rate = sf.read(root / split / clip["filename"], dtype="float32")
        for e in clip["events"]:
            inside = audio[int(round(e["onset"] * rate)) : int(round(e["offset"] * rate))]
            print(
                f"  {split}/{clip['filename']} {e['onset']:6.3f}-{e['offset']:6.3f} {e['event_label']:13s} "
                f"EBR {e['ebr_db']:5.1f} dB, inside {db(inside):6.1f} dBFS, whole clip {db(audio):6.1f} dBFS; "
                f"{e['source']} over {clip['background']}"
            )


if __name__ == "__main__":
    main()
