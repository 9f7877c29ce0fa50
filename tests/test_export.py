"""ONNX and torch.export of AaSP models: dynamic batch and length, parity with PyTorch."""

import numpy as np
import pytest
import torch

from aasp_hf import AaspConfig, AaspForAudioClassification, AaspModel
from aasp_hf.integrations.export import export_onnx, export_program
from conftest import tiny_config_kwargs


def tiny(model_class, **overrides):
    torch.manual_seed(0)
    kwargs = tiny_config_kwargs(num_mel_bins=128, sblu_hidden_size=16, sblu_output_size=64, **overrides)
    return model_class(AaspConfig(**kwargs)).eval()


@pytest.mark.parametrize("overrides", [dict(num_labels=3), dict(num_labels=3, patch_embedding="spe")])
def test_onnx_matches_pytorch_for_new_batch_sizes_and_lengths(tmp_path, overrides):
    onnxruntime = pytest.importorskip("onnxruntime")
    model = tiny(AaspForAudioClassification, **overrides)
    path = export_onnx(model, tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, frames in ((1, 48), (3, 112)):  # neither is the export example's (2, 32)
        x = torch.randn(batch, frames, 128)
        mask = torch.ones(batch, frames, dtype=torch.long)
        mask[0, frames // 2 :] = 0
        (logits,) = session.run(None, {"input_values": x.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            expected = model(x, mask).logits.numpy()
        assert logits.shape == (batch, 3)
        np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=1e-4)


def test_torch_export_program_matches_the_encoder():
    model = tiny(AaspModel)
    program = export_program(model)
    x, mask = torch.randn(2, 80, 128), torch.ones(2, 80, dtype=torch.long)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x, mask), model(x, mask).last_hidden_state, atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # the ONNX export and its check through the command
def test_export_cli_writes_and_checks(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    import export_onnx as cli

    tiny(AaspForAudioClassification, num_labels=2).save_pretrained(tmp_path / "model")
    cli.main([str(tmp_path / "model"), str(tmp_path / "model.onnx"), "--check"])
    printed = capsys.readouterr().out
    worst = float(printed.rsplit("=", 1)[1])
    assert (tmp_path / "model.onnx").stat().st_size > 0 and worst < 1e-4


def test_export_runs_the_model_in_eval_mode_without_a_training_mode_warning():
    """torch.onnx.export warns about (and would trace dropout of) a module left in training mode: the wrapper that
    export builds around a model is in eval mode as a whole, and so is the model."""
    from aasp_hf.integrations.export import _ExportWrapper

    model = tiny(AaspForAudioClassification).train()
    wrapper = _ExportWrapper(model)
    assert not wrapper.training and not any(module.training for module in wrapper.modules())
