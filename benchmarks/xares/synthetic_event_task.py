"""X-ARES task config for `synthetic_event` (frame level), the data `benchmarks/xares/build_tasks.py` writes.

Labelled as X-ARES labels its sound-event tasks (DESED, MAESTRO): frame i of the encoder's output is "on" for a
class when i·hop lies within one of its events (frames ceil(onset / hop) .. ceil(offset / hop) - 1), scored by
X-ARES's segment F1 (macro over the classes, on 200 ms segments) of a frame-wise linear probe.
"""

from math import ceil

import torch
from xares.task import TaskConfig

from benchmarks.xares.build_tasks import EVENT_LABELS, EVENT_SECONDS


def synthetic_event_config(encoder) -> TaskConfig:
    hop_s = encoder.hop_size_in_ms / 1000 if encoder else 0.04

    def frames(seconds: float) -> int:
        return ceil(seconds / hop_s)

    def targets(events: list) -> torch.Tensor:
        """[{"onset", "offset", "label"}] -> float (classes, frames) of 0 / 1."""
        target = torch.zeros(len(EVENT_LABELS), frames(EVENT_SECONDS))
        for event in events:
            target[EVENT_LABELS.index(event["label"]), frames(event["onset"]) : frames(event["offset"])] = 1.0
        return target

    return TaskConfig(
        name="synthetic_event",
        formal_name="Synthetic event",
        encoder=encoder,
        task_type="frame",
        label_processor=targets,
        output_dim=len(EVENT_LABELS),
        criterion="BCEWithLogitsLoss",
        metric="segmentf1_macro",
        metric_args=dict(hop_size_in_ms=encoder.hop_size_in_ms if encoder else 40, segment_length_in_s=0.2),
        do_knn=False,  # k-NN scores clips, not frames
        eval_weight=12,
        batch_size_encode=8,
        batch_size_train=8,
        epochs=20,
        num_encoder_workers=0,
    )
