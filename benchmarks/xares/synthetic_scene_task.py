"""X-ARES task config for `synthetic_scene` (clip level), the data `benchmarks/xares/build_tasks.py` writes.

X-ARES's runner imports this module by name and calls its one function whose name ends in `_config` with the
encoder: `python -m xares.run aasp_hf.integrations.xares benchmarks.xares.synthetic_scene_task --max-jobs 0`, run with the
repository root on the import path and `env/` (X-ARES's env_root) in the working folder.
"""

from xares.task import TaskConfig

from benchmarks.xares.build_tasks import LABELS


def synthetic_scene_config(encoder) -> TaskConfig:
    return TaskConfig(
        name="synthetic_scene",
        formal_name="Synthetic scene",
        encoder=encoder,
        label_processor=lambda target: target["label"],
        output_dim=len(LABELS),
        metric="accuracy",
        eval_weight=20,  # test clips: the weight of this task in X-ARES's averages
        batch_size_encode=8,
        num_encoder_workers=0,
    )
