"""Vanishing data stops the run: the share of clips that fail to decode, judged over windows of clips read.

A clip that fails to decode is replaced (pre-training: by a copy of another clip of its micro-batch, so every
process keeps its batch shape) or dropped (fine-tuning). A few bad files in a large dataset are harmless; a folder
that is deleted, unmounted or cut short while the run reads it is not: the run would go on training on copies of the
clips that are left. `FailedClipShare` counts the clips read and the clips that failed in every process; at the
steps that every process shares (logging, checkpoints) the counts are summed over the processes and, once a window
holds at least `min_clips` clips, the share that failed in it is compared with ``--max_failed_clip_share`` and the
window starts over. Past it, the script saves a checkpoint and stops with one line; ``--resume`` continues once the
data is back. A clip read twice (a later epoch) counts twice, so the share is that of the batches' clips that were
copies (or dropped) — what a vanishing folder costs the training — in the recent window, not over the whole run.
"""

import torch

DEFAULT_MAX_SHARE = 0.1
MIN_CLIPS = 100  # a window's clips over all processes: 1 bad file in a small folder must not stop a run by chance


class FailedClipShare:
    """Counts of clips read and failed since the window started (this process), judged by `check`."""

    def __init__(self, max_share: float = DEFAULT_MAX_SHARE, min_clips: int = MIN_CLIPS):
        if not 0 <= max_share <= 1:
            raise ValueError(f"max_share={max_share}: a share between 0 and 1")
        self.max_share, self.min_clips = max_share, min_clips
        self.read, self.failed = 0, 0

    def add(self, read: int, failed: int):
        self.read += read
        self.failed += failed

    def check(self, accelerator) -> str | None:
        """Every process calls it at the same step (a sum over processes). None while the share is within bounds or
        the window is still short; else what went wrong, in words, for the stop message."""
        counts = torch.tensor([self.read, self.failed], dtype=torch.long, device=accelerator.device)
        read, failed = (int(v) for v in accelerator.reduce(counts, reduction="sum").cpu())
        if read < self.min_clips:
            return None
        self.read, self.failed = 0, 0
        if failed <= self.max_share * read:
            return None
        return (
            f"{failed} of the last {read} clips read ({100 * failed / read:.0f} %) failed to decode, more than "
            f"--max_failed_clip_share {self.max_share:g}: the data is vanishing or damaged while the run reads it"
        )
