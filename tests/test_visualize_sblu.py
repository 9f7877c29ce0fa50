"""examples/visualize_sblu.py: the figure, the Lambda encoder's (α, β) within their bounds, and the stems it refuses."""

import json
import math

import numpy as np
import pytest
import torch

from conftest import tiny_config_kwargs

import visualize_sblu

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel
from aasp_hf.modeling_aasp import sblu_decay_min, sblu_frequency_range


def save_encoder(path, **overrides):
    torch.manual_seed(0)
    kwargs = tiny_config_kwargs(num_mel_bins=128, num_hidden_layers=1, sblu_hidden_size=16, sblu_output_size=16)
    AaspModel(AaspConfig(**{**kwargs, **overrides})).save_pretrained(path)
    AaspFeatureExtractor().save_pretrained(path)
    return path


def test_figure_and_parameters_within_bounds(tmp_path):
    model_dir = save_encoder(tmp_path / "encoder")
    out = tmp_path / "fig"
    results = visualize_sblu.main(
        [
            "--model_name_or_path",
            str(model_dir),
            "--synthetic_label",
            "am_30hz",
            "--seconds",
            "1.5",
            "--output_dir",
            str(out),
        ]
    )
    assert (out / "sblu_parameters.png").stat().st_size > 10_000
    arrays = np.load(out / "sblu_parameters.npz")
    beta_min, beta_max = sblu_frequency_range(0.01, 16)
    decay_min = sblu_decay_min(0.01, 0.01, 15)
    num_time_patches = math.ceil((1 + 1.5 * 16000 // 160) / 16)  # 151 frames -> 10 patches
    assert arrays["frequency"].shape == (num_time_patches, 8, 2)  # (T̃, F̃, H/F̃)
    assert np.all((arrays["frequency"] >= beta_min) & (arrays["frequency"] <= beta_max))
    np.testing.assert_allclose(arrays["frequency_hz"], arrays["frequency"] / (2 * math.pi))
    assert results["beta_min_hz"] == pytest.approx(3.125) and results["beta_max_hz"] == pytest.approx(50.0)
    assert 3.125 <= results["frequency_hz"]["min"] <= results["frequency_hz"]["max"] <= 50.0
    assert np.all(arrays["decay"] >= decay_min - 1e-9) and results["adaptive"] is True
    assert np.ptp(arrays["frequency"], axis=0).max() > 0  # input-dependent: varies over time patches
    assert json.loads((out / "all_results.json").read_text()) == json.loads(json.dumps(results))
    assert "sblu_parameters.png" in (out / "results.md").read_text()


def test_static_sblu_plotted_and_spe_refused(tmp_path):
    static = visualize_sblu.main(
        [
            "--model_name_or_path",
            str(save_encoder(tmp_path / "static", sblu_adaptive=False)),
            "--seconds",
            "1.0",
            "--output_dir",
            str(tmp_path / "fig_static"),
        ]
    )
    arrays = np.load(tmp_path / "fig_static" / "sblu_parameters.npz")
    assert static["adaptive"] is False and np.ptp(arrays["frequency"], axis=0).max() == 0  # constant over time
    assert (tmp_path / "fig_static" / "sblu_parameters.png").stat().st_size > 10_000
    with pytest.raises(ValueError, match="no SBLU"):
        visualize_sblu.main(
            [
                "--model_name_or_path",
                str(save_encoder(tmp_path / "spe", patch_embedding="spe")),
                "--output_dir",
                str(tmp_path / "fig_spe"),
            ]
        )
