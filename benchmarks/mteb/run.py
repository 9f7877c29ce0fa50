"""MTEB's own evaluation, unmodified, on the local task of `build_task.py`, for an AaSP checkpoint (through
`aasp_hf.integrations.mteb`) and for a log-mel baseline, for `make mteb-check`; prints the test scores side by side.

    python benchmarks/mteb/run.py DATA_DIR --model runs/pt/encoder --output_folder mteb_output/results

The task is an MTEB `AbsTaskClassification` (MTEB's audio classification: a logistic regression trained on the
embeddings of 8 clips per class, 10 draws, accuracy on the test split) whose `metadata.dataset` names the local
folder; MTEB's unmodified `load_data` reads it with `datasets.load_dataset`. The baseline is MTEB's kind of
reference for a clip embedding: the time average of a 128-bin log-mel spectrogram (64 ms window, 40 ms hop), no
weights. Runs in the venv `make mteb-check` builds (MTEB and the package); MTEB is imported where it is used.
"""

import argparse
from pathlib import Path

import numpy as np
import torch

from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import UsageError, parse_command_line

TASK_NAME = "AaspSyntheticScene"
N_MELS = 128


def synthetic_task(folder: Path):
    """The MTEB task over `folder` (train.parquet, test.parquet: `audio`, `label`)."""
    from mteb.abstasks.classification import AbsTaskClassification
    from mteb.abstasks.task_metadata import TaskMetadata

    class AaspSyntheticScene(AbsTaskClassification):
        metadata = TaskMetadata(
            name=TASK_NAME,
            description="Five synthetic sound classes (tone, 4 Hz and 30 Hz amplitude modulation, chirp, noise "
            "bursts), 1 s clips at 16 kHz, written by aasp_hf's benchmarks/mteb/build_task.py.",
            reference=None,
            dataset={"path": str(folder), "revision": "local"},
            type="AudioClassification",
            category="a2c",
            eval_splits=["test"],
            eval_langs=["zxx-Zxxx"],
            main_score="accuracy",
            date=("2026-01-01", "2026-01-01"),
            domains=[],
            task_subtypes=[],
            license="apache-2.0",
            annotations_creators="derived",
            dialect=[],
            modalities=["audio"],
            sample_creation="created",
            bibtex_citation="",
        )
        input_column_name = "audio"
        label_column_name = "label"

    return AaspSyntheticScene()


class LogMelMtebEncoder:
    """MTEB's encoder interface for the baseline: a clip -> its 128 log-mel bins averaged over time."""

    def __init__(self, model_name: str = "baseline/log-mel", revision: str | None = None, **kwargs):
        import torchaudio

        self.melspec = torchaudio.transforms.MelSpectrogram(
            sample_rate=16000, n_fft=1024, hop_length=640, n_mels=N_MELS, center=True
        )
        self.mteb_model_meta = None

    def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs) -> np.ndarray:
        from mteb.models.modality_collators import AudioCollator

        inputs.collate_fn = AudioCollator(target_sampling_rate=16000)
        out = []
        for batch in inputs:
            for item in batch["audio"]:
                audio = torch.as_tensor(np.asarray(item["array"], dtype=np.float32).reshape(-1))
                out.append(torch.log(self.melspec(audio) + 1e-6).mean(-1).numpy())  # (N_MELS, frames) -> (N_MELS,)
        return np.stack(out)

    def similarity(self, embeddings1, embeddings2):
        from mteb.similarity_functions import cos_sim

        return cos_sim(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1, embeddings2):
        from mteb.similarity_functions import pairwise_cos_sim

        return pairwise_cos_sim(embeddings1, embeddings2)


def logmel_meta():
    from mteb.models import ModelMeta

    return ModelMeta(
        loader=LogMelMtebEncoder,
        name="baseline/log-mel",
        revision="1",
        release_date=None,
        languages=None,
        n_parameters=0,
        n_embedding_parameters=0,
        memory_usage_mb=0,
        max_tokens=float("inf"),
        embed_dim=N_MELS,
        license=None,
        open_weights=None,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch"],
        similarity_fn_name="cosine",
        use_instructions=False,
        training_datasets=None,
        modalities=["audio"],
    )


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", type=Path, help="the folder build_task.py wrote (holding synthetic-scene/)")
    parser.add_argument("--model", required=True, help="the AaSP checkpoint folder")
    parser.add_argument(
        "--output_folder",
        type=Path,
        default=Path("mteb_output/results"),
        help="MTEB's result cache for this run (one JSON per model and task)",
    )
    args = parse_command_line(parser, argv)
    folder = args.data_dir / "synthetic-scene"
    if not (folder / "train.parquet").is_file():
        raise UsageError(f"{folder} holds no train.parquet: run benchmarks/mteb/build_task.py {args.data_dir} first.")
    import mteb

    from aasp_hf.integrations.mteb import model_meta

    scores = {}
    for meta in (model_meta(args.model), logmel_meta()):
        result = mteb.evaluate(
            meta.load_model(),
            synthetic_task(folder.resolve()),
            encode_kwargs={"batch_size": 8},
            cache=mteb.ResultCache(args.output_folder),
            overwrite_strategy="always",
            show_progress_bar=False,
        )
        [task_result] = result.task_results
        scores[meta.name] = task_result.get_score()
    print(f"{'task (main score)':<32}" + "".join(f"  {name:>24}" for name in scores))
    print(f"{TASK_NAME + ' (accuracy)':<32}" + "".join(f"  {value:>24.3f}" for value in scores.values()))
    return scores


if __name__ == "__main__":
    run_script(main, "run.py")
