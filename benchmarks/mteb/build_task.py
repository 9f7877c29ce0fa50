"""A small local audio task in MTEB's data format from the package's synthetic audio, for `make mteb-check`: MTEB's
own evaluation (`mteb.evaluate`, from the released `mteb` package) loads and scores it unmodified, as it does its
audio classification tasks (ESC-50, GTZAN, ...) once their data are on the machine.

`synthetic-scene`: the HEAR check's `synthetic-scene` clips (the five classes of `aasp_hf.data.synthetic`, 1 s;
train 40, test 20; the same generator and seed as `benchmarks/hear/build_tasks.py`), an `audio` column (the
`datasets` Audio feature, 16 kHz) and an integer `label`, one parquet file per split: what `datasets.load_dataset`
reads from a folder, as MTEB's task loader calls it with the task's `metadata.dataset`.

    python benchmarks/mteb/build_task.py DATA_DIR [--seed 0]

A task folder that already exists is left alone (delete it to rebuild). The scores show that the path works
(wrapper, MTEB's loader, its logistic-regression probe and metrics), not how good a representation is.
"""

import argparse
from pathlib import Path

import numpy as np
from datasets import Audio, ClassLabel, Dataset, Features

from aasp_hf.data.synthetic import LABELS
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import parse_command_line

SAMPLING_RATE = 16000
SPLITS = ("train", "test")
SECONDS = 1.0
CLIPS_PER_CLASS = {"train": 8, "valid": 4, "test": 4}  # drawn as the HEAR check draws them; valid is not written


def clips(rng: np.random.Generator) -> dict[str, list[tuple[np.ndarray, int]]]:
    """The HEAR check's scene clips: per split, (audio, label index) in its order (valid drawn, not kept)."""
    from aasp_hf.data.synthetic import synth_clip

    return {
        split: [(synth_clip(label, rng, SECONDS), LABELS.index(label)) for label in LABELS for _ in range(count)]
        for split, count in CLIPS_PER_CLASS.items()
    }


def build(data_dir: Path, seed: int = 0) -> Path:
    folder = Path(data_dir) / "synthetic-scene"
    if folder.exists():
        print(f"{folder} exists: kept (delete it to rebuild)")
        return folder
    features = Features({"audio": Audio(sampling_rate=SAMPLING_RATE), "label": ClassLabel(names=LABELS)})
    drawn = clips(np.random.default_rng(seed))
    folder.mkdir(parents=True)
    for split in SPLITS:
        rows = {
            "audio": [{"array": audio, "sampling_rate": SAMPLING_RATE} for audio, _ in drawn[split]],
            "label": [label for _, label in drawn[split]],
        }
        Dataset.from_dict(rows, features=features).to_parquet(str(folder / f"{split}.parquet"))
    print(f"{folder}: " + ", ".join(f"{split} {len(drawn[split])} clips" for split in SPLITS))
    return folder


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path, help="folder to write the task folder into")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_command_line(parser, argv)
    return build(args.data_dir, args.seed)


if __name__ == "__main__":
    run_script(main, "build_task.py")
