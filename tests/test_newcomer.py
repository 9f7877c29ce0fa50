"""What a newcomer runs into first: a misspelt flag (one line with the closest flag, in every script), the downstream
scripts on a small folder of their own clips, and the documentation's promises (where `make demo` writes, a training
checkpoint given where a model is expected)."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from aasp_hf.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------- misspelt flags
def _script(path: str):
    """The module of a script under the repository root (examples/, conversion/ and benchmarks/quality/ are on the
    test path; benchmarks/speed/run.py shares its name with benchmarks/quality/run.py, so it is loaded by path)."""
    if path == "benchmarks/speed/run.py":
        spec = importlib.util.spec_from_file_location("speed_run", ROOT / path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(Path(path).stem)


@pytest.mark.parametrize("script, typo, right", [
    ("examples/pretrain.py", "--max_stpes", "--max_steps"),
    ("examples/finetune.py", "--max_stpes", "--max_steps"),
    ("examples/linear_eval.py", "--learning_rats", "--learning_rates"),
    ("examples/shift_consistency.py", "--shift_ms", "--shifts_ms"),
    ("examples/visualize_sblu.py", "--synthetic_lable", "--synthetic_label"),
    ("examples/mask_geometry.py", "--num_veiws", "--num_views"),
    ("examples/demo.py", "--pretrain_steps", "--pretrain-steps"),
    ("conversion/convert_eat_checkpoint.py", "--num_frames", "--num-frames"),
    ("conversion/convert_pretraining_checkpoint.py", "--wich", "--which"),
    ("conversion/export_onnx.py", "--chek", "--check"),
    ("benchmarks/quality/run.py", "--max_stpes", "--max_steps"),
    ("benchmarks/speed/run.py", "--repeets", "--repeats"),
])
def test_a_misspelt_flag_is_one_line_with_the_closest_flag_in_every_script(script, typo, right, tmp_path):
    """HfArgumentParser used to end in an 18-line traceback ("Some specified arguments are not used"), argparse in its
    usage block without a suggestion. The flag is checked before anything else (a required argument left unset by
    the typo is not what is reported), with the message a misspelt preset key gets."""
    module = _script(script)
    positional = [str(tmp_path / "a"), str(tmp_path / "b")] if script.startswith("conversion/") else []
    argv = [*positional, typo, "2"]
    message = (rf"^unknown key in the command line: '{typo}' \(did you mean '{right}'\?\)\. The valid keys are "
               rf"listed in the script's --help\.$")
    with pytest.raises(UsageError, match=message):
        (module.parse_args if hasattr(module, "parse_args") else module.main)(argv)


def test_as_a_script_a_misspelt_flag_is_one_line_and_exit_code_2(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "finetune.py"), "--model_name_or_path", "x",
                             "--max_stpes", "2"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "finetune.py: error: unknown key in the command line: '--max_stpes' (did you mean '--max_steps'?). The "
        "valid keys are listed in the script's --help."], result.stderr


def test_argparse_refusals_are_one_line_too():
    """A missing required argument, a value of the wrong type, a stray value: one line each, no usage block."""
    import finetune

    with pytest.raises(UsageError, match=r"^the following arguments are required: --model_name_or_path"):
        finetune.parse_args(["--synthetic_per_class", "2"])
    with pytest.raises(UsageError, match=r"^argument --max_steps/--max-steps: invalid int value: 'two'$"):
        finetune.parse_args(["--model_name_or_path", "x", "--max_steps", "two"])
    with pytest.raises(UsageError, match=r"^unexpected argument 7: every value follows its --flag"):
        finetune.parse_args(["--model_name_or_path", "x", "--max_steps", "2", "7"])
    assert finetune.parse_args(["--model_name_or_path", "x", "--max_st", "2", "--warmup_steps", "1"]).max_steps == 2
