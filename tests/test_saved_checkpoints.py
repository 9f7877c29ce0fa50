"""Checkpoints saved by earlier code keep loading, and compute exactly what that code computed.

tests/fixtures/checkpoints_v1/ holds one tiny, seeded checkpoint of each kind (encoder, single- and multi-label
classifier, pre-training model) as `save_pretrained` wrote them before the model files were folded into one modeling
file, the fixed inputs, and the outputs that code computed from them (its write_fixtures.py says how they were made).
Each loads with today's `aasp_hf`, and through remote code (`trust_remote_code=True`, `aasp_hf` unimportable) both
with the code it was saved with and with today's code saved next to its weights; integer outputs are compared
exactly, floating-point ones within float32 rounding (the fixtures were computed on one CPU; another CPU's kernels,
or another torch's, may round otherwise).
"""

import ast
import json
import shutil
import tarfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aasp_hf import AaspForAudioClassification, AaspForPreTraining, AaspModel
from conftest import run_without_aasp_hf

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints_v1"
CLASSES = {
    "encoder": AaspModel,
    "single_label": AaspForAudioClassification,
    "multi_label": AaspForAudioClassification,
    "pretraining": AaspForPreTraining,
}
AUTO_CLASSES = {
    "encoder": "AutoModel",
    "single_label": "AutoModelForAudioClassification",
    "multi_label": "AutoModelForAudioClassification",
    "pretraining": "AutoModelForPreTraining",
}

# The forward calls of write_fixtures.py, as source, so that the fresh process without aasp_hf runs the same calls.
WRITER = (FIXTURES / "write_fixtures.py").read_text()
OUTPUTS_SOURCE = (
    "\n"
    + next(
        ast.get_source_segment(WRITER, node)
        for node in ast.parse(WRITER).body
        if isinstance(node, ast.FunctionDef) and node.name == "outputs"
    )
    + "\n"
)
namespace = {"torch": torch}
exec(OUTPUTS_SOURCE, namespace)
outputs = namespace["outputs"]


def expected_outputs(kind: str) -> dict:
    return {
        key: value for key, value in load_file(FIXTURES / "outputs.safetensors").items() if key.startswith(f"{kind}.")
    }


def assert_same_outputs(actual: dict, expected: dict, where: str):
    """Integer outputs exactly; floating-point ones within float32 rounding, since the fixtures' outputs were computed on
    one CPU and another CPU's kernels (or another torch's) may round otherwise."""
    assert actual.keys() == expected.keys(), (where, sorted(actual), sorted(expected))
    for key in expected:
        assert actual[key].dtype == expected[key].dtype, (where, key)
        if not expected[key].is_floating_point():
            assert torch.equal(actual[key], expected[key]), (where, key, (actual[key] - expected[key]).abs().max())
        else:
            torch.testing.assert_close(actual[key], expected[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", list(CLASSES))
def test_a_checkpoint_saved_by_earlier_code_loads_with_the_same_outputs(kind):
    model = CLASSES[kind].from_pretrained(FIXTURES / kind).eval()
    assert type(model) is CLASSES[kind]
    batch = load_file(FIXTURES / "inputs.safetensors")
    assert_same_outputs(outputs(kind, model, batch), expected_outputs(kind), kind)


def test_earlier_checkpoints_load_as_remote_code_with_their_own_code_and_with_todays(tmp_path):
    """Each folder rebuilt as it was saved (its weights and the code it shipped) and each one saved again by today's
    code load with `trust_remote_code=True` in a fresh process where `aasp_hf` cannot be imported."""
    shipped = json.loads((FIXTURES / "remote_code.json").read_text())
    with tarfile.open(FIXTURES / "remote_code.tar.gz") as tar:
        code = {member.name: tar.extractfile(member).read() for member in tar.getmembers()}
    for kind, names in shipped.items():
        folder = shutil.copytree(FIXTURES / kind, tmp_path / f"saved_{kind}")
        for name in names:
            (folder / name).write_bytes(code[name])
        CLASSES[kind].from_pretrained(FIXTURES / kind).save_pretrained(tmp_path / f"today_{kind}")
        shutil.copy(FIXTURES / kind / "preprocessor_config.json", tmp_path / f"today_{kind}")
    assert {p.name for p in (tmp_path / "saved_pretraining").glob("*.py")} >= {"modeling_aasp_pretraining.py"}

    run_without_aasp_hf(
        OUTPUTS_SOURCE
        + f"""
import torch, transformers
from safetensors.torch import load_file, save_file
torch.set_num_threads(2)
batch = load_file({str(FIXTURES / "inputs.safetensors")!r})
results = {{}}
for kind, auto in {AUTO_CLASSES!r}.items():
    for code in ("saved", "today"):
        model = getattr(transformers, auto).from_pretrained(f"{tmp_path}/{{code}}_{{kind}}", trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        results.update({{f"{{code}}/{{key}}": value for key, value in outputs(kind, model.eval(), batch).items()}})
save_file(results, "remote.safetensors")
""",
        tmp_path,
    )
    remote = load_file(tmp_path / "remote.safetensors")
    for kind in CLASSES:
        for code in ("saved", "today"):
            actual = {key.split("/", 1)[1]: value for key, value in remote.items() if key.startswith(f"{code}/{kind}.")}
            assert_same_outputs(actual, expected_outputs(kind), f"{code} code, {kind}")
