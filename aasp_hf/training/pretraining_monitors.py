"""When and on what `examples/pretrain.py` runs its learning-health monitors (`aasp_hf.training.monitors`), on the
main process only: the fixed batch whose SBLU (α, β) are summarised every --monitor_steps (with the collapse
statistics of the training batch), and the frozen-feature probe every --probe_steps. No gradients, eval mode, no
draws from any random stream, so they do not change what the run trains."""

import itertools
import time
from dataclasses import dataclass

import torch

from ..data.clips import decode_clip
from ..data.collators import PretrainingCollator
from ..evaluation.probes import FrozenFeatureProbe


def is_due(step: int, every: int, stop_step: int) -> bool:
    """Every `every` steps and at the last step; never when `every` is 0."""
    return every > 0 and (step % every == 0 or step == stop_step)


def monitor_batch(dataset, stream, data_args, config, feature_extractor, seed: int, num_clips: int) -> torch.Tensor:
    """The fixed batch (B', T, F) on which the student's (α, β) are summarised: the first `num_clips` decodable clips
    (map-style rows 0, 1, ...; a stream: its first examples in epoch 0's order), cropped and featurised by a
    collator of its own (seeded with `seed`), so the training collator's random stream is untouched."""
    if stream is not None:
        items = itertools.islice(stream.shard, 4 * num_clips)
        examples = [decode_clip(item, stream.audio_column, i) for i, item in enumerate(items)]
    else:
        examples = [dataset[i] for i in range(min(len(dataset), 4 * num_clips))]
    examples = [e for e in examples if isinstance(e, dict)][:num_clips]  # FailedClips left out
    if not examples:
        raise ValueError("--monitor_steps: none of the first clips of the dataset could be decoded")
    collator = PretrainingCollator(
        feature_extractor, config, crop_seconds=data_args.crop_seconds, generator=torch.Generator().manual_seed(seed)
    )
    return collator(examples)["input_values"]


def probe_logs(probe: FrozenFeatureProbe, model, encoders, autocast) -> dict:
    """probe/<encoder>_knn_accuracy, probe/<encoder>_ridge_accuracy for "student" (model.aasp) and/or "teacher",
    probe/chance_accuracy and probe/seconds."""
    started = time.time()
    logs = {"probe/chance_accuracy": probe.chance_accuracy()}
    for name in encoders:
        scores = probe(model.aasp if name == "student" else model.teacher, autocast)
        logs.update({f"probe/{name}_{key}": value for key, value in scores.items()})
    return {**logs, "probe/seconds": time.time() - started}


@dataclass
class Monitors:
    """3. The learning-health monitors (aasp_hf.training.monitors), on the main process only: the fixed batch whose
    (α, β) are summarised every `monitor_steps` and the frozen-feature probe every `probe_steps` (None elsewhere,
    and when off)."""

    monitor_steps: int
    probe_steps: int
    probe_encoders: list
    inputs: torch.Tensor | None = None
    probe: FrozenFeatureProbe | None = None

    @classmethod
    def build(cls, accelerator, data_args, args, dataset, stream, config, feature_extractor) -> "Monitors":
        monitor_steps = args.logging_steps if args.monitor_steps is None else args.monitor_steps
        probe_steps = args.save_steps if args.probe_steps is None else args.probe_steps
        probe_encoders = [name.strip() for name in args.probe_encoders.split(",") if name.strip()]
        if monitor_steps < 0 or probe_steps <= 0 or not set(probe_encoders) <= {"student", "teacher"}:
            raise ValueError(
                f"need --monitor_steps >= 0, --probe_steps > 0 and --probe_encoders among "
                f"student,teacher; got {monitor_steps}, {probe_steps}, {args.probe_encoders!r}"
            )
        monitors = cls(monitor_steps, probe_steps, probe_encoders)
        if accelerator.is_main_process and monitor_steps > 0:
            monitors.inputs = monitor_batch(
                dataset, stream, data_args, config, feature_extractor, args.seed, args.monitor_clips
            ).to(accelerator.device)
        if accelerator.is_main_process and args.probe_dataset is not None:
            monitors.probe = FrozenFeatureProbe(
                args.probe_dataset,
                feature_extractor,
                config.num_frames,
                args.probe_max_clips,
                args.probe_k,
                args.probe_ridge,
            )
        return monitors

    def probe_logs(self, model, accelerator) -> dict:
        return probe_logs(self.probe, model, self.probe_encoders, accelerator.autocast)
