"""Export a saved AaSP model (classifier or encoder) to ONNX with dynamic batch and length, and check it.

    python conversion/export_onnx.py MODEL_DIR model.onnx [--check]

`--check` runs onnxruntime on random inputs of two shapes (with padding) and prints the largest difference from
PyTorch. Frames fed to the ONNX model must be a multiple of 16 (the feature extractor already pads to that).
"""

import argparse
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig

import aasp_hf  # noqa: F401  (registers the Auto classes)
from aasp_hf import AaspForAudioClassification, AaspModel
from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import UsageError, parse_command_line
from aasp_hf.integrations.export import export_onnx
from aasp_hf.utils.hub import check_model_folder


def check(model, path, shapes=((1, 64), (3, 160))) -> float:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch, frames in shapes:
        x = torch.randn(batch, frames, model.config.num_mel_bins)
        mask = torch.ones(batch, frames, dtype=torch.long)
        mask[0, frames // 2 :] = 0
        (onnx_out,) = session.run(None, {"input_values": x.numpy(), "attention_mask": mask.numpy()})
        with torch.no_grad():
            out = model(x, mask)
        reference = out.logits if isinstance(model, AaspForAudioClassification) else out.last_hidden_state
        worst = max(worst, float(np.abs(onnx_out - reference.numpy()).max()))
    return worst


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a save_pretrained folder of AaspModel or AaspForAudioClassification")
    parser.add_argument("output", help="the .onnx file to write")
    parser.add_argument("--check", action="store_true")
    return parse_command_line(parser, argv)


def main(argv=None):
    args = parse_args(argv)
    check_model_folder(args.model_dir)  # a checkpoint-<step>/ folder: say what to export instead
    if not (Path(args.model_dir) / "config.json").is_file():
        raise UsageError(
            f"model_dir {args.model_dir} "
            + (
                "holds no config.json: pass a save_pretrained folder"
                if Path(args.model_dir).is_dir()
                else "does not exist"
            )
        )
    config = AutoConfig.from_pretrained(args.model_dir)
    has_head = any("ForAudioClassification" in name for name in (config.architectures or []))
    model_class = AaspForAudioClassification if has_head else AaspModel
    model = model_class.from_pretrained(args.model_dir).eval()
    path = export_onnx(model, args.output)
    print(f"wrote {path} ({model_class.__name__})")
    if args.check:
        print(f"max |onnxruntime - torch| = {check(model, path):.3g}")
    return path


if __name__ == "__main__":
    run_script(main, "export_onnx.py")
