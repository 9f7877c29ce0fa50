# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""An AaSP checkpoint as an MTEB audio model (MAEB, the Massive Audio Embedding Benchmark, is MTEB's audio part):
`AaspMtebEncoder` (MTEB's encoder interface) and `model_meta` (its `ModelMeta`), and a command that runs MTEB's
own evaluation on a checkpoint:

    python -m aasp_hf.integrations.mteb runs/pt/encoder --benchmark "MAEB(v1, audio-only)" --output_folder mteb_results

From Python, as MTEB's own model wrappers are used:

    import mteb
    from aasp_hf.integrations.mteb import model_meta
    meta = model_meta("runs/pt/encoder")                  # ModelMeta: loader, embed_dim, n_parameters, ...
    results = mteb.evaluate(meta.load_model(), mteb.get_tasks(tasks=["ESC50"]))

How a clip becomes an embedding: MTEB hands the encoder batches of decoded audio; its own `AudioCollator` resamples
them to 16 kHz, and each clip's embedding is the HEAR module's scene embedding (`aasp_hf.hear`): by default
[CLS ; the time average of the encoder's time columns, their frequency patches concatenated], the feature of the
paper's linear evaluation (D + F̃·D values), over the whole clip in chunks of the model's position table. Clips of
equal length are encoded together and each on its own terms, so an embedding does not depend on its batch. Every
option of `aasp_hf.integrations.hear.load_model` applies (`frequency_pooling="mean"`, `scene_pooling="mean"`, `layers`, ...).
Similarity is the cosine, computed by MTEB's own function.

The encoder implements MTEB's `EncoderProtocol` (`encode`, `similarity`, `similarity_pairwise`, `mteb_model_meta`)
rather than subclassing its `AbsEncoder`, so that this module imports without MTEB (MTEB is imported where it is
used). It needs `pip install "aasp_hf[mteb]"` to run. MTEB's tasks load their data from the Hugging Face Hub
(`datasets.load_dataset` of each task's `metadata.dataset`), or from the local datasets cache when they were
loaded before (`HF_DATASETS_OFFLINE=1`).

This module is a user of the model, not part of the remote code a checkpoint ships.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from . import hear
from ..utils.entry_points import run_script
from ..utils.errors import UsageError, parse_command_line

SAMPLE_RATE = hear.SAMPLE_RATE


class AaspMtebEncoder:
    """An AaSP checkpoint folder as an MTEB encoder: one embedding per clip, the HEAR module's scene embedding.

    Args:
        model_name (`str`): the checkpoint folder (`save_pretrained` output), or the model's MTEB name when
            `model_path` gives the folder (as `ModelMeta.load_model` calls its loader with the name).
        revision (`str`, *optional*): ignored (MTEB passes it; a folder has one version).
        model_path (`str`, *optional*): the checkpoint folder, when `model_name` is the MTEB name.
        device (`str`, *optional*): where to run, default "cuda" when available, else "cpu".
        **options: `aasp_hf.integrations.hear.load_model`'s options.

    Example:

    ```python
    >>> encoder = AaspMtebEncoder("runs/pt/encoder")
    >>> encoder.embed([np.zeros(16000, np.float32)]).shape  # one clip -> (1, scene_embedding_size)
    (1, 576)
    ```
    """

    def __init__(
        self,
        model_name: str,
        revision: str | None = None,
        *,
        device: str | None = None,
        model_path: str | None = None,
        **options,
    ):
        self.model_path, self.options = str(model_path or model_name), dict(options)
        self.model = hear.load_model(self.model_path, **options)
        self.model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.sampling_rate = SAMPLE_RATE
        self.mteb_model_meta = None  # MTEB's ModelMeta.load_model sets it; `model_meta` builds one

    def embed(self, arrays: list[np.ndarray]) -> np.ndarray:
        """16 kHz mono clips (any lengths) -> float32 (n, scene_embedding_size), in their order. Clips of equal
        length go through the encoder together."""
        groups: dict[int, list[int]] = {}
        for index, array in enumerate(arrays):
            groups.setdefault(len(array), []).append(index)
        out = np.zeros((len(arrays), self.model.scene_embedding_size), dtype=np.float32)
        for indices in groups.values():
            audio = torch.as_tensor(np.stack([np.asarray(arrays[i], dtype=np.float32) for i in indices]))  # (b, L)
            out[indices] = hear.get_scene_embeddings(audio, self.model).cpu().numpy()
        return out

    def encode(self, inputs, *, task_metadata, hf_split: str, hf_subset: str, prompt_type=None, **kwargs) -> np.ndarray:
        """MTEB's encode: a DataLoader of audio batches -> float32 (n_clips, scene_embedding_size)."""
        from mteb.models.modality_collators import AudioCollator

        inputs.collate_fn = AudioCollator(target_sampling_rate=self.sampling_rate)  # resamples to 16 kHz
        batches = []
        for batch in inputs:
            arrays = [item["array"] if isinstance(item, dict) else item for item in batch["audio"]]
            batches.append(self.embed([np.asarray(a, dtype=np.float32).reshape(-1) for a in arrays]))
        return np.concatenate(batches) if batches else np.zeros((0, self.model.scene_embedding_size), np.float32)

    def similarity(self, embeddings1, embeddings2):
        from mteb.similarity_functions import cos_sim

        return cos_sim(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1, embeddings2):
        from mteb.similarity_functions import pairwise_cos_sim

        return pairwise_cos_sim(embeddings1, embeddings2)


def model_meta(model_path: str, name: str | None = None, **options):
    """MTEB's `ModelMeta` for a checkpoint folder: `load_model()` builds an `AaspMtebEncoder` with `options`.

    `name` ("organization/model", as MTEB names models; default "aasp_hf/FOLDER") and `revision` (the first 12 hex
    digits of the weights' SHA-256, so that MTEB's result cache keeps two checkpoints of one name apart) identify the
    results MTEB stores.
    """
    from mteb.models import ModelMeta

    folder = hear._checkpoint_folder(model_path)
    probe = hear.load_model(str(folder), **options)
    parameters = sum(p.numel() for p in probe.encoder.parameters())
    return ModelMeta(
        loader=AaspMtebEncoder,
        loader_kwargs={"model_path": str(folder), **options},
        name=name or f"aasp_hf/{folder.resolve().name}",
        revision=_weights_digest(folder),
        release_date=None,
        languages=None,
        n_parameters=parameters,
        n_embedding_parameters=0,
        memory_usage_mb=round(parameters * 4 / 2**20, 1),
        max_tokens=float("inf"),  # any clip length: encoded in chunks of the position table
        embed_dim=probe.scene_embedding_size,
        license=None,
        open_weights=None,
        public_training_code=None,
        public_training_data=None,
        framework=["PyTorch"],
        similarity_fn_name="cosine",
        use_instructions=False,
        training_datasets=None,
        modalities=["audio"],
        experiment_kwargs=dict(options) or None,  # MTEB names the run after them (ablations of one checkpoint)
    )


def _weights_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in ("model.safetensors", "model.safetensors.index.json"):
        if (folder / name).is_file():
            with open(folder / name, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:12]


# ----------------------------------------------------------------------------------------------- the command
def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m aasp_hf.integrations.mteb",
        description="MTEB's own evaluation of an AaSP checkpoint on MTEB's audio tasks.",
    )
    parser.add_argument("model", help="the checkpoint folder (save_pretrained output)")
    parser.add_argument("--tasks", nargs="+", default=None, help="MTEB task names, e.g. ESC50 GTZANGenre")
    parser.add_argument("--benchmark", default=None, help='an MTEB benchmark, e.g. "MAEB(v1, audio-only)"')
    parser.add_argument("--output_folder", default="mteb_results", help="MTEB's result cache (one JSON per task)")
    parser.add_argument("--batch_size", type=int, default=8, help="clips per batch MTEB hands the encoder")
    parser.add_argument(
        "--model_options", default="{}", help="aasp_hf.integrations.hear.load_model's options as a JSON object"
    )
    parser.add_argument("--name", default=None, help='the model name in the results ("organization/model")')
    args = parse_command_line(parser, argv)
    if (args.tasks is None) == (args.benchmark is None):
        raise UsageError('pass either --tasks NAME [NAME ...] or --benchmark NAME (e.g. "MAEB(v1, audio-only)").')
    if args.batch_size < 1:
        raise UsageError(f"--batch_size {args.batch_size} must be at least 1.")
    try:
        args.model_options = json.loads(args.model_options)
    except ValueError:
        args.model_options = None
    if not isinstance(args.model_options, dict):
        raise UsageError(
            "--model_options must be a JSON object of aasp_hf.integrations.hear.load_model's options, e.g. '{\"hop_ms\": 20}'."
        )
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        import mteb
    except ImportError as error:
        raise UsageError(f"MTEB is not installed here ({error}): pip install 'aasp_hf[mteb]'.") from None
    tasks = mteb.get_benchmark(args.benchmark).tasks if args.benchmark else mteb.get_tasks(tasks=args.tasks)
    meta = model_meta(args.model, name=args.name, **args.model_options)
    try:
        results = mteb.evaluate(
            meta.load_model(),
            tasks,
            encode_kwargs={"batch_size": args.batch_size},
            cache=mteb.ResultCache(args.output_folder),
        )
    except ConnectionError as error:  # datasets' message when a task's data are neither reachable nor cached
        raise UsageError(
            f"{error}: MTEB loads each task's data from the Hugging Face Hub; load them once where it is "
            f"reachable (they stay in the datasets cache), then run with HF_DATASETS_OFFLINE=1."
        ) from None
    for task_result in results.task_results:
        print(f"{task_result.task_name}: {task_result.get_score():.4f}")
    return results


if __name__ == "__main__":
    run_script(main, "python -m aasp_hf.integrations.mteb")
