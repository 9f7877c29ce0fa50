"""Mask geometry of the pre-training presets next to EAT's sampler: what the student sees of each view.

    python examples/mask_geometry.py --output_dir runs/mask_geometry
    python examples/mask_geometry.py --num_views 500 --output_dir /tmp/mask_geometry   # quicker, noisier

Paper Sec. "Training Setup": inverse block masking [EAT] at 80 %, a block size drawn per view from {3×8, 4×6, 5×5}
(frequency × time patches), the remaining visible tokens chosen at random (`aasp_hf.data.masking`). The blocks
were chosen for the paper's 38 × 8 (time × frequency) token grid; the small presets crop 2.07 s, a 13 × 8 grid, where
one block (24 or 25 tokens) already exceeds the V = 21 visible tokens, so each view shows one blob.

Steps: 1. read each preset of `examples/configs/pretrain_*.json` (its grid from `num_frames` and `num_mel_bins`, its
`mask_ratio` and `mask_block_sizes`) and draw `num_views` views with `sample_view_masks`; 2. draw EAT's inverse block
masks (`eat_inverse_block_masks`, EAT's `compute_block_mask_2d` with its config/pretraining_AS2M.yaml settings) on
EAT's 64 × 8 grid (10.24 s) and on each preset's grid; 3. on the small grid, the paper's blocks with their time
length scaled by T̃/38 (a `mask_block_sizes` value a preset could set; not a preset change); 4. statistics per row:
visible ratio, connected visible regions per view (4-neighbour components), visibility of each frequency row
(f = 0 the lowest band) and each time step; 5. write `mask_geometry.md` (table), `mask_geometry.json` and, when
matplotlib is installed, `mask_geometry.png`.
"""

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from aasp_hf import AaspConfig
from aasp_hf.data.masking import sample_view_masks
from aasp_hf.utils.entry_points import run_script
from aasp_hf.training.arguments import parse_arguments

logger = logging.getLogger(__name__)
CONFIGS = Path(__file__).resolve().parent / "configs"
EAT_GRID = (64, 8)  # EAT: 1024 frames × 128 mel bins, 16 × 16 patches -> (time, frequency) tokens
PAPER_TIME_PATCHES = 38  # 608 frames / 16


@dataclass
class MaskGeometryArguments:
    num_views: int = field(default=4000, metadata={"help": "views drawn per sampler and grid"})
    seed: int = field(default=0, metadata={"help": "seeds every sampler's generator"})
    output_dir: str = field(default="runs/mask_geometry", metadata={"help": "where the table and figure go"})


# ----------------------------------------------------------------------------------------------- EAT's sampler
def eat_inverse_block_masks(
    num_views,
    num_time_patches,
    num_frequency_patches,
    mask_prob=0.8,
    mask_length=5,
    mask_prob_adjust=0.07,
    generator=None,
) -> torch.BoolTensor:
    """EAT's inverse block masks (EAT utils/data_utils.py `compute_block_mask_2d`, `inverse_mask=True`,
    `require_same_masks=True`, no `mask_dropout`), vectorised over views. bool (R, N), True = masked, N time-major.

    1. p = 1 − mask_prob is the visible fraction; C = int(N·(p + mask_prob_adjust) / mask_length²) block centres per
       view, uniform over the N tokens with replacement;
    2. each centre makes a mask_length × mask_length block of visible tokens, rows and columns clamped to the grid
       (a block at an edge is cut, not shifted);
    3. exactly int(N·p) visible: surplus visible tokens are hidden, or missing ones revealed, uniformly at random.
    """
    num_time, num_frequency = num_time_patches, num_frequency_patches
    num_tokens = num_time * num_frequency
    visible_prob = 1.0 - mask_prob
    num_centres = int(num_tokens * (visible_prob + mask_prob_adjust) / mask_length**2)  # C
    num_visible = int(num_tokens * visible_prob)
    visible = torch.zeros(num_views, num_tokens, dtype=torch.bool)
    if num_centres > 0:
        centres = torch.randint(0, num_tokens, (num_views, num_centres), generator=generator)  # (R, C)
        offsets = torch.arange(mask_length) - mask_length // 2  # (L,)
        t = (centres // num_frequency)[..., None, None] + offsets[:, None]  # (R, C, L, 1)
        f = (centres % num_frequency)[..., None, None] + offsets[None, :]  # (R, C, 1, L)
        tokens = t.clamp(0, num_time - 1) * num_frequency + f.clamp(0, num_frequency - 1)  # (R, C, L, L)
        visible.scatter_(1, tokens.reshape(num_views, -1), True)  # (R, C, L, L) -> (R, C·L·L)
    score = torch.rand(num_views, num_tokens, generator=generator) + visible  # block tokens first, random order
    keep = score.topk(num_visible, dim=-1).indices  # (R, V)
    mask = torch.ones(num_views, num_tokens, dtype=torch.bool)
    return mask.scatter_(1, keep, False)


# ----------------------------------------------------------------------------------------------- statistics
def mask_statistics(mask: torch.BoolTensor, num_time_patches: int, num_frequency_patches: int) -> dict:
    """mask: bool (R, N), True = masked, time-major. Mean visible ratio; connected visible regions per view
    (4-neighbour), the same per 100 visible tokens, and those of at least 2 tokens ("blobs"); the share of views
    that show one region; P(visible) of each frequency row (F̃,) and each time step (T̃,)."""
    from scipy.ndimage import label

    visible = (~mask).reshape(-1, num_time_patches, num_frequency_patches).numpy()  # (R, N) -> (R, T̃, F̃)
    labelled = [label(view) for view in visible]  # 4-connectivity: scipy's default structure
    regions = np.array([count for _, count in labelled])  # (R,)
    blobs = np.array([(np.bincount(labels.ravel())[1:] >= 2).sum() for labels, _ in labelled])  # regions of ≥ 2
    return {
        "grid": f"{num_time_patches} × {num_frequency_patches}",
        "visible_ratio": float(visible.mean()),
        "regions_mean": float(regions.mean()),
        "regions_per_100_visible": float(100 * regions.mean() / visible[0].sum()),
        "blobs_mean": float(blobs.mean()),
        "one_region_share": float((regions == 1).mean()),
        "frequency_row_visibility": visible.mean(axis=(0, 1)).tolist(),  # (F̃,)
        "time_visibility": visible.mean(axis=(0, 2)).tolist(),  # (T̃,)
    }


def scaled_block_sizes(block_sizes, num_time_patches: int):
    """The paper's (frequency × time) blocks with the time length scaled by T̃ / 38 (at least 1 patch)."""
    return [[f, max(1, round(t * num_time_patches / PAPER_TIME_PATCHES))] for f, t in block_sizes]


def preset_configs() -> dict:
    """{preset name: AaspConfig} for every `examples/configs/pretrain_*.json`."""
    return {path.stem: AaspConfig(**json.loads(path.read_text())["model_config"])
            for path in sorted(CONFIGS.glob("pretrain_*.json"))}  # fmt: skip


def ours(config, block_sizes, num_views, generator):
    masks = sample_view_masks(num_views, 1, config.num_frequency_patches, config.num_time_patches,
                              config.mask_ratio, block_sizes, generator=generator)  # fmt: skip
    return masks[:, 0]  # (R, 1, N) -> (R, N)


def parse_args(argv=None) -> MaskGeometryArguments:
    (args,) = parse_arguments((MaskGeometryArguments,), argv)
    return args


def main(argv=None) -> list:
    args = parse_args(argv)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    # 1.-3. every sampler on every grid, each from its own seeded generator
    rows = []
    grids_done = set()
    for name, config in preset_configs().items():
        grid = (config.num_time_patches, config.num_frequency_patches)
        g = torch.Generator().manual_seed(args.seed)
        sizes = config.mask_block_sizes
        stats = mask_statistics(ours(config, sizes, args.num_views, g), *grid)
        rows.append({"sampler": f"{name} (blocks {sizes})", **stats})
        if grid in grids_done:
            continue
        grids_done.add(grid)
        g = torch.Generator().manual_seed(args.seed)
        stats = mask_statistics(eat_inverse_block_masks(args.num_views, *grid, generator=g), *grid)
        rows.append({"sampler": "EAT compute_block_mask_2d", **stats})
        if grid[0] < PAPER_TIME_PATCHES:
            scaled = scaled_block_sizes(config.mask_block_sizes, grid[0])
            g = torch.Generator().manual_seed(args.seed)
            stats = mask_statistics(ours(config, scaled, args.num_views, g), *grid)
            rows.append({"sampler": f"paper blocks, time scaled by {grid[0]}/38 ({scaled})", **stats})
    g = torch.Generator().manual_seed(args.seed)
    rows.append(
        {
            "sampler": "EAT compute_block_mask_2d (EAT's grid)",
            **mask_statistics(eat_inverse_block_masks(args.num_views, *EAT_GRID, generator=g), *EAT_GRID),
        }
    )

    # 4.-5. table, JSON and figure
    lines = [
        f"Mask geometry, {args.num_views} views per row (seed {args.seed}); grid = time × frequency tokens; "
        "regions = 4-connected visible regions per view; row visibility = P(visible) of each frequency row, "
        "f = 0 (lowest band) first.",
        "",
        "| sampler | grid | visible ratio | regions / view | per 100 visible | blobs (≥ 2) / view | one region | "
        "frequency-row visibility | time visibility (min–max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rows_visibility = " ".join(f"{v:.2f}" for v in r["frequency_row_visibility"])
        time = r["time_visibility"]
        lines.append(
            f"| {r['sampler']} | {r['grid']} | {r['visible_ratio']:.3f} | {r['regions_mean']:.2f} | "
            f"{r['regions_per_100_visible']:.1f} | {r['blobs_mean']:.2f} | {r['one_region_share']:.0%} | "
            f"{rows_visibility} | {min(time):.2f}–{max(time):.2f} |"
        )
    (output_dir / "mask_geometry.md").write_text("\n".join(lines) + "\n")
    (output_dir / "mask_geometry.json").write_text(json.dumps(rows, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: the table only")
        return rows
    fig, (ax_f, ax_t) = plt.subplots(1, 2, figsize=(13, 4.5))
    for r in rows:
        ax_f.plot(r["frequency_row_visibility"], marker="o", label=f"{r['sampler']}, {r['grid']}")
        time = np.asarray(r["time_visibility"])
        ax_t.plot(np.linspace(0, 1, len(time)), time, marker=".")
    ax_f.set(xlabel="frequency row f (0 = lowest band)", ylabel="P(visible)", title="visibility per frequency row")
    ax_t.set(xlabel="time position (0 = start, 1 = end of the crop)", ylabel="P(visible)",
             title="visibility per time step")  # fmt: skip
    ax_f.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(output_dir / "mask_geometry.png", dpi=120)
    plt.close(fig)
    return rows


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    for row in run_script(main, "mask_geometry.py"):
        print(
            f"{row['sampler']:<70} {row['grid']:>7}  visible {row['visible_ratio']:.3f}  "
            f"regions {row['regions_mean']:.2f}"
        )
