"""Two small tasks in X-ARES's own data format from the package's synthetic audio, for `make xares-check`: X-ARES's
runner (`python -m xares.run`, from the released `xares` package) encodes, trains and scores them unmodified, as it
does its own tasks once their data are downloaded.

- `synthetic_scene` (clip level): the HEAR check's `synthetic-scene` clips (the five classes of
  `aasp_hf.data.synthetic`, 1 s, 40 / 20 / 20 for train / valid / test), scored by accuracy (MLP and k-NN).
- `synthetic_event` (frame level): the HEAR check's `synthetic-event` clips (3 s of quiet noise with one 0.4-1.0 s
  tone, 30 Hz-modulated tone or chirp; 24 / 12 / 12), scored by X-ARES's segment F1 (macro, 200 ms segments).

The same audio as `benchmarks/hear/build_tasks.py` (same generator, same seed), so both suites see one data set.
These are a smoke test of the whole path (encoder, stored embeddings, X-ARES's probes and metrics), not evidence of
quality: a few dozen clips, separable by their spectra alone.

    python -m benchmarks.xares.build_tasks ENV_DIR [--seed 0]      # from the repository root

Layout (what X-ARES's `XaresTask` reads, with `env_root` = ENV_DIR): ENV_DIR/TASK/{train,valid,test}-000000.tar,
webdataset shards whose samples are KEY.wav (16 kHz, 16-bit PCM) and KEY.json (scene: {"label": class index};
event: a list of {"onset", "offset" (seconds), "label" (name)}), and ENV_DIR/TASK/.audio_tar_ready, the file that
tells X-ARES the data are in place (without it, it would download from Zenodo). A task folder that already exists
is left alone (delete it to rebuild).
"""

import argparse
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import soundfile as sf

from aasp_hf.data.synthetic import LABELS
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import parse_command_line
from benchmarks.hear.build_tasks import EVENT_LABELS, EVENT_SECONDS, SAMPLING_RATE, event_rows, scene_rows

READY_FILE = ".audio_tar_ready"  # X-ARES's XaresSettings.audio_ready_filename


def wav_bytes(audio: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, audio, SAMPLING_RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def write_shard(path: Path, samples: list[tuple[str, np.ndarray, object]]) -> None:
    """One webdataset shard: for each (key, audio, label) the members KEY.wav and KEY.json."""
    with tarfile.open(path, "w") as tar:
        for key, audio, label in samples:
            for suffix, data in (("wav", wav_bytes(audio)), ("json", json.dumps(label).encode())):
                member = tarfile.TarInfo(f"{key}.{suffix}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))


def write_task(folder: Path, splits: dict[str, list[tuple]]) -> None:
    folder.mkdir(parents=True)
    for split, samples in splits.items():
        write_shard(folder / f"{split}-000000.tar", samples)
    (folder / READY_FILE).touch()


def scene_samples(rows: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """HEAR rows (file name, audio, [label]) -> (key, audio, {"label": class index})."""
    return {
        split: [
            (name.removesuffix(".wav"), audio, {"label": LABELS.index(label)}) for name, audio, [label] in split_rows
        ]
        for split, split_rows in rows.items()
    }


def event_samples(rows: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """HEAR rows (file name, audio, [{"label", "start", "end"} in ms]) -> (key, audio, [{"onset", "offset" in s,
    "label"}])."""
    return {
        split: [
            (
                name.removesuffix(".wav"),
                audio,
                [{"onset": e["start"] / 1000, "offset": e["end"] / 1000, "label": e["label"]} for e in events],
            )
            for name, audio, events in split_rows
        ]
        for split, split_rows in rows.items()
    }


def build(env_dir: Path, seed: int = 0) -> list[Path]:
    """Writes both tasks under `env_dir` (skipping a task folder that exists); returns their folders."""
    rng = np.random.default_rng(seed)  # drawn in the HEAR builder's order: the same clips
    scene, event = scene_rows(rng), event_rows(rng)
    tasks = [(env_dir / "synthetic_scene", scene_samples(scene)), (env_dir / "synthetic_event", event_samples(event))]
    for folder, splits in tasks:
        if folder.exists():
            print(f"{folder} exists: kept (delete it to rebuild)")
            continue
        write_task(folder, splits)
        print(f"{folder}: " + ", ".join(f"{split} {len(rows)} clips" for split, rows in splits.items()))
    return [folder for folder, _ in tasks]


def main(argv=None) -> list[Path]:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("env_dir", type=Path, help="X-ARES's env_root: the folder to write the two task folders into")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_command_line(parser, argv)
    return build(args.env_dir, args.seed)


__all__ = ["EVENT_LABELS", "EVENT_SECONDS", "LABELS", "build"]  # the task configs read the classes from here

if __name__ == "__main__":
    run_script(main, "build_tasks.py")
