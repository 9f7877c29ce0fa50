"""Scratch (issue 12): a log-mel cache of the mini corpus with equal hours per kind (music, effects, speech).

Writes OUTPUT_DIR/index.json listing each cached clip of a kind round(music hours / that kind's hours) times, and
links OUTPUT_DIR's shard folders to the CACHE_DIR ones: the same cached clips, no new audio, nothing decoded again.
Each clip's kind comes from the corpus manifest (`data/manifest.json`, written by `build_data.py`).

    python benchmarks/quality/exploration/balanced_cache_index.py \\
        benchmarks/quality/runs/cache/pretrain-logmel-128bins \\
        benchmarks/quality/runs/cache/pretrain-logmel-128bins-balanced

Point a pre-training config's `log_mel_cache` at OUTPUT_DIR. With the corpus as built (12.81 h music, 0.98 h
effects, 0.86 h speech) effects clips are listed 13 times and speech clips 15 times (38,272 entries from 7,102).
"""
import collections
import json
import os
import sys
from pathlib import Path

MANIFEST = Path(__file__).resolve().parents[1] / "data" / "manifest.json"


def main(cache_dir, output_dir):
    cache_dir, output_dir = Path(cache_dir), Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for shard in cache_dir.iterdir():
        if shard.is_dir() and not (output_dir / shard.name).exists():
            os.symlink(shard.resolve(), output_dir / shard.name)
    index = json.loads((cache_dir / "index.json").read_text())
    manifest = json.loads(MANIFEST.read_text())
    kind = {f["path"].removeprefix("pretrain/"): f["kind"] for f in manifest["files"] if f["split"] == "pretrain"}
    clips = index["clips"]  # columns: id, file, num_frames, row
    hop_seconds = index["settings"]["hop_length"] / index["settings"]["sampling_rate"]
    seconds = collections.Counter()
    for clip_id, num_frames in zip(clips["id"], clips["num_frames"]):
        seconds[kind[clip_id]] += num_frames * hop_seconds
    repeat = {k: round(seconds["music"] / v) for k, v in seconds.items()}
    balanced = {column: [] for column in clips}
    for j, clip_id in enumerate(clips["id"]):
        for _ in range(repeat[kind[clip_id]]):
            for column in clips:
                balanced[column].append(clips[column][j])
    index.update(clips=balanced, num_clips=len(balanced["id"]),
                 balanced_from={"cache": str(cache_dir), "repeat_per_kind": repeat,
                                "note": "issue-12 scratch: each clip of a kind listed repeat[kind] times"})
    (output_dir / "index.json").write_text(json.dumps(index))
    print(json.dumps({"hours": {k: round(v / 3600, 2) for k, v in seconds.items()}, "repeat": repeat,
                      "entries": index["num_clips"]}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
