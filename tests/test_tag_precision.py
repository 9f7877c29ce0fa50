"""`python -m aasp_hf.tag --precision`: the model cast once at loading (bf16 with the SBLU kept float32; int8 dynamic
linear layers), `auto` made definite from what the device multiplies natively, and the precision that ran said in one
line and in OUT's ledger. Scores are compared with the float32 run's (the oracle), window by window."""

import csv
import json

import numpy as np
import pytest
import soundfile as sf
import torch

from aasp_hf import AaspForAudioClassification
from aasp_hf.cli import tag as tag_module
from aasp_hf.utils.errors import UsageError
from aasp_hf.cli.tag import load_weights, main as tag, resolve_precision
from test_long_audio import RATE, noisy_tones, save_classifier


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny AaPE classifier (its SBLU is the part bf16 must not touch) and a 4-s clip: 7 windows of 0.63 s."""
    root = tmp_path_factory.mktemp("precision")
    model = save_classifier(root / "model", patch_embedding="aape")
    sf.write(root / "a.wav", noisy_tones(4.0), RATE, subtype="FLOAT")
    return root


def window_scores(path) -> np.ndarray:
    """(windows, labels) of a `--timestamps --top_k 3 --threshold 0` CSV, labels in name order."""
    scores = {}
    with open(path, newline="") as file:
        for row in csv.DictReader(file):
            scores.setdefault(float(row["start"]), {})[row["label"]] = float(row["score"])
    return np.array([[labels[name] for name in sorted(labels)] for _, labels in sorted(scores.items())])


def run(setup, precision, output, capsys):
    flags = ["--timestamps", "--top_k", "3", "--threshold", "0", "--num_workers", "0", "--precision", precision]
    assert tag(["--model", str(setup / "model"), "--output", str(output), *flags, str(setup / "a.wav")]) == 0
    return capsys.readouterr().err


# Score tolerances for this tiny model drawn wide (initializer_range 0.5, sharp softmaxes): int8 rounds each
# linear layer's inputs to 256 levels per call; research/2026-12-precision measures trained classifiers.
@pytest.mark.parametrize("precision, tolerance", [("bf16", 0.05), ("int8", 0.25)])
def test_a_precision_scores_every_window_close_to_float32_and_says_which_ran(
    setup, tmp_path, capsys, precision, tolerance
):
    run(setup, "fp32", tmp_path / "fp32.csv", capsys)
    said = run(setup, precision, tmp_path / f"{precision}.csv", capsys)
    reference, scores = window_scores(tmp_path / "fp32.csv"), window_scores(tmp_path / f"{precision}.csv")
    assert reference.shape == scores.shape == (7, 3)
    difference = np.abs(scores - reference).max()
    assert 0 < difference < tolerance  # not the float32 model under another name, and close to it
    assert f"model: {precision} on cpu (as asked)" in said
    first = json.loads((tmp_path / f"{precision}.csv.done.jsonl").read_text().splitlines()[0])
    assert first["precision"] == precision and first["device"] == "cpu"


def test_bf16_keeps_the_sblu_in_float32_and_int8_quantises_the_linear_layers(setup):
    config = AaspForAudioClassification.config_class.from_pretrained(setup / "model")
    bf16 = load_weights(AaspForAudioClassification, setup / "model", config, "cpu", "bf16")
    dtypes = {name: p.dtype for name, p in bf16.named_parameters()}
    assert {d for n, d in dtypes.items() if ".sblu." in n} == {torch.float32}
    assert {d for n, d in dtypes.items() if ".sblu." not in n} == {torch.bfloat16}
    int8 = load_weights(AaspForAudioClassification, setup / "model", config, "cpu", "int8")
    linear = [m for m in int8.modules() if type(m) is torch.nn.Linear]
    quantised = [m for m in int8.modules() if type(m).__name__ == "Linear" and "quantized" in type(m).__module__]
    assert not linear and len(quantised) == sum(type(m) is torch.nn.Linear for m in bf16.modules())


def test_auto_picks_bf16_only_where_the_cpu_multiplies_bf16_natively(monkeypatch):
    for flags, expected in (({"amx_bf16", "avx512_bf16"}, "bf16"), ({"avx512_bf16"}, "bf16"), ({"avx2"}, "fp32")):
        monkeypatch.setattr(tag_module, "cpu_flags", lambda flags=flags: flags)
        precision, reason = resolve_precision("auto", "cpu")
        assert precision == expected and reason.startswith("auto: ")
    assert resolve_precision("bf16", "cpu") == ("bf16", "as asked")  # asked for, it runs even where it is emulated
    with pytest.raises(UsageError, match="--precision int8 runs on the CPU only"):
        resolve_precision("int8", "cuda")


def test_a_rerun_in_another_precision_says_that_out_mixes_them(setup, tmp_path, capsys):
    sf.write(tmp_path / "b.wav", noisy_tones(1.0, seed=1), RATE, subtype="FLOAT")
    out = tmp_path / "tags.csv"
    common = ["--model", str(setup / "model"), "--output", str(out), "--num_workers", "0"]
    assert tag([*common, "--precision", "fp32", str(setup / "a.wav")]) == 0
    capsys.readouterr()
    assert tag([*common, "--precision", "fp32", str(setup / "a.wav"), str(tmp_path / "b.wav")]) == 0
    assert "holds files tagged in" not in capsys.readouterr().err
    assert tag([*common, "--precision", "bf16", str(setup / "a.wav"), str(tmp_path / "b.wav"), str(tmp_path)]) == 0
    assert "holds files tagged in fp32; this run adds its files in bf16" in capsys.readouterr().err


def test_the_pipeline_takes_the_transformers_dtype_argument_the_same_way(setup):
    """`pipeline(..., dtype=torch.bfloat16)` loads the model as `--precision bf16` does (cast once, SBLU float32) and
    gives its windows to the model in bf16; its scores stay near the float32 pipeline's."""
    from transformers import pipeline

    from aasp_hf import AaspAudioClassificationPipeline

    audio = noisy_tones(4.0)
    scores = {}
    for dtype in (torch.float32, torch.bfloat16):
        classifier = pipeline(
            "audio-classification",
            model=str(setup / "model"),
            pipeline_class=AaspAudioClassificationPipeline,
            dtype=dtype,
        )
        sblu = {p.dtype for n, p in classifier.model.named_parameters() if ".sblu." in n}
        assert sblu == {torch.float32} and classifier.model.dtype == dtype
        scores[dtype] = {s["label"]: s["score"] for s in classifier(audio, top_k=3)}
    difference = max(
        abs(scores[torch.float32][label] - scores[torch.bfloat16][label]) for label in scores[torch.float32]
    )
    assert 0 < difference < 0.05
