"""Deployment export of AaSP models: `torch.export` programs and ONNX files with dynamic batch and length.

The SBLU is written in real arithmetic (no complex tensors) and its high-pass switches from an FFT to a direct
convolution while exporting, so the whole model exports with a symbolic number of frames (a multiple of 16).

    from aasp_hf.integrations.export import export_onnx
    export_onnx(AaspForAudioClassification.from_pretrained("dir"), "model.onnx")
"""

from pathlib import Path

import torch

from ..modeling_aasp import AaspForAudioClassification, AaspModel


class _ExportWrapper(torch.nn.Module):
    """(input_values (B, T, F), attention_mask (B, T)) -> logits (B, C) or last_hidden_state (B, 1 + N, D)."""

    def __init__(self, model):
        super().__init__()
        if not isinstance(model, (AaspForAudioClassification, AaspModel)):
            raise ValueError(f"export supports AaspForAudioClassification and AaspModel, got {type(model).__name__}")
        self.model = model
        self.eval()  # the wrapper too: torch.onnx.export warns about (and exports) a module left in training mode

    def forward(self, input_values, attention_mask):
        output = self.model(input_values, attention_mask)
        return output.logits if isinstance(self.model, AaspForAudioClassification) else output.last_hidden_state


def _example_and_shapes(model, max_batch: int, max_frames: int):
    config = model.config
    frames = torch.export.Dim("time_patches", min=1, max=max_frames // config.time_patch_size)
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    length = config.time_patch_size * frames  # the frame count stays a multiple of P_time
    example = (
        torch.zeros(2, 2 * config.time_patch_size, config.num_mel_bins),
        torch.ones(2, 2 * config.time_patch_size, dtype=torch.long),
    )
    shapes = {"input_values": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}}
    return example, shapes


def export_program(model, max_batch: int = 1024, max_frames: int = 16384) -> torch.export.ExportedProgram:
    """A `torch.export` program with dynamic batch and frames (multiples of the time patch size)."""
    wrapper = _ExportWrapper(model)
    example, shapes = _example_and_shapes(wrapper.model, max_batch, max_frames)
    with torch.no_grad():
        return torch.export.export(wrapper, example, dynamic_shapes=shapes)


def export_onnx(model, path, max_batch: int = 1024, max_frames: int = 16384) -> Path:
    """Writes an ONNX file with inputs `input_values` (B, T, F) float32 and `attention_mask` (B, T) int64, output
    `logits` (classifier) or `last_hidden_state` (encoder); B and T (a multiple of 16) are dynamic."""
    wrapper = _ExportWrapper(model)
    example, shapes = _example_and_shapes(wrapper.model, max_batch, max_frames)
    output_name = "logits" if isinstance(wrapper.model, AaspForAudioClassification) else "last_hidden_state"
    with torch.no_grad():
        program = torch.onnx.export(
            wrapper,
            example,
            dynamic_shapes=shapes,
            input_names=["input_values", "attention_mask"],
            output_names=[output_name],
            dynamo=True,
        )
    path = Path(path)
    program.save(str(path))
    return path
