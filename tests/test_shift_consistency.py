"""examples/shift_consistency.py and the drift helpers: drift 0 for no shift, bounds, outputs, resume."""

import json

import numpy as np
import torch

from conftest import tiny_config_kwargs

import shift_consistency

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel
from aasp_hf.evaluation import circular_shift, representation_drift


def test_circular_shift_and_drift_definitions():
    x = np.arange(32000, dtype=np.float32)
    shifted = circular_shift(x, 10.0, 16000)  # 10 ms = 160 samples
    assert np.array_equal(shifted[160:], x[:-160]) and np.array_equal(shifted[:160], x[-160:])
    z = torch.tensor([[1.0, 0.0], [1.0, 1.0], [2.0, -1.0]])
    other = torch.tensor([[0.0, 3.0], [2.0, 2.0], [-4.0, 2.0]])  # orthogonal, parallel, opposite
    torch.testing.assert_close(representation_drift(z, other), torch.tensor([1.0, 0.0, 2.0], dtype=torch.float64))


def test_script_drifts_outputs_and_resume(tmp_path):
    torch.manual_seed(0)
    model_dir = tmp_path / "encoder"
    AaspModel(
        AaspConfig(
            **tiny_config_kwargs(
                num_mel_bins=128, num_hidden_layers=1, sblu_hidden_size=16, sblu_output_size=16, initializer_range=0.5
            )
        )
    ).save_pretrained(model_dir)
    AaspFeatureExtractor().save_pretrained(model_dir)
    out = tmp_path / "shift"
    argv = [
        "--model_name_or_path",
        str(model_dir),
        "--synthetic_clips",
        "5",
        "--batch_size",
        "2",
        "--shifts_ms",
        "0",
        "10",
        "160",
        "--output_dir",
        str(out),
    ]
    results = shift_consistency.main(argv)
    drifts = np.load(out / "drifts.npy")
    assert drifts.shape == (5, 3) and results["clips"] == 5 and results["skipped_clips"] == 0
    assert np.all(np.abs(drifts[:, 0]) < 1e-12)  # no shift, no drift
    assert np.all((drifts >= 0) & (drifts <= 2))
    assert drifts[:, 2].max() > 1e-9  # a whole-patch shift does change the representation
    np.testing.assert_allclose(results["drift_mean"], drifts.mean(0))
    np.testing.assert_allclose(results["drift_std"], drifts.std(0))
    assert json.loads((out / "all_results.json").read_text()) == json.loads(json.dumps(results))
    assert "| 0 ms | 10 ms | 160 ms |" in (out / "results.md").read_text()
    assert (out / "shift_consistency.png").stat().st_size > 1000

    # resume: a finished run computes no embedding again
    mtime = (out / "drifts.npy").stat().st_mtime_ns
    calls = []
    original = shift_consistency.cls_embeddings
    shift_consistency.cls_embeddings = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        again = shift_consistency.main(argv)
        assert calls == [] and (out / "drifts.npy").stat().st_mtime_ns == mtime
        assert again["drift_mean"] == results["drift_mean"]
        # an interrupted run (2 of 5 clips saved) continues after the saved clips
        state = json.loads((out / "drifts_state.json").read_text())
        (out / "drifts_state.json").write_text(json.dumps({**state, "done": 2}))
        partial = drifts.copy()
        partial[2:] = np.nan
        np.save(out / "drifts.npy", partial)
        resumed = shift_consistency.main(argv)
    finally:
        shift_consistency.cls_embeddings = original
    assert len(calls) == 2 * 4  # clips 2-3 and 4: z(x) plus 3 shifts each batch
    np.testing.assert_allclose(resumed["drift_mean"], results["drift_mean"], atol=1e-9)
