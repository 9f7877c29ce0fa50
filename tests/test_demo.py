"""`make demo` end to end, shortened: data (`aasp_hf.data.synthetic`), pre-training, probe, fine-tuning (through
`aasp_hf.training.step.finetuning_step`), save, reload through the pipeline."""

import json

import numpy as np

import demo  # examples/demo.py (pytest's pythonpath)
from aasp_hf.data.synthetic import LABELS, synth_clip
from aasp_hf.training.step import finetuning_step


def test_synthetic_classes_differ_where_they_should():
    rng = np.random.default_rng(0)
    clips = {label: synth_clip(label, rng) for label in LABELS}
    assert all(c.shape == (16000,) and c.dtype == np.float32 and np.abs(c).max() <= 1.0 for c in clips.values())

    def envelope_spectrum_peak(x):  # modulation frequency of the 10-ms frame energy
        frames = np.sqrt((x[: 16000 // 160 * 160].reshape(-1, 160) ** 2).mean(1))
        spectrum = np.abs(np.fft.rfft(frames - frames.mean()))
        return np.fft.rfftfreq(len(frames), d=0.01)[spectrum.argmax()]

    assert abs(envelope_spectrum_peak(clips["am_4hz"]) - 4) <= 1.0
    assert abs(envelope_spectrum_peak(clips["am_30hz"]) - 30) <= 4.0


def test_demo_main_pretrains_probes_finetunes_and_the_pipeline_agrees(tmp_path, capsys, monkeypatch):
    steps_taken = []  # the fine-tuning goes through the scripts' one step, once per step and model

    def counted_step(*args, **kwargs):
        steps_taken.append(kwargs["lr"])
        return finetuning_step(*args, **kwargs)

    monkeypatch.setattr(demo, "finetuning_step", counted_step)
    results = demo.main(
        ["--pretrain-steps", "3", "--pretrain-clips", "32", "--finetune-steps", "3", "--train-per-class", "6",
         "--test-per-class", "4", "--output-dir", str(tmp_path), "--threads", "2"]
    )  # fmt: skip
    printed = capsys.readouterr().out
    # both fine-tuning runs get the same number of steps (not the same seconds); every artefact's path is printed
    assert results["finetune_steps_scratch"] == results["finetune_steps_pretrained"] == 3
    assert len(steps_taken) == 2 * 3 and all(lr > 0 for lr in steps_taken)
    for path in (
        tmp_path / "pretrain",
        tmp_path / "pretrain" / "encoder",
        tmp_path / "classifier",
        tmp_path / "all_results.json",
    ):
        assert str(path) in printed, path
    assert "torch threads: 2" in printed
    assert "AaSP demo classifier" in (tmp_path / "classifier" / "README.md").read_text()
    for key in ("probe_accuracy_random_init", "probe_accuracy_pretrained", "finetune_accuracy_scratch",
                "finetune_accuracy_pretrained"):  # fmt: skip
        assert 0.0 <= results[key] <= 1.0, key
    assert results["finetune_steps_pretrained"] >= 1 and results["finetuned_from"] == "pretrained"
    # the reloaded pipeline sees the same model: same held-out accuracy as the in-memory model
    assert results["pipeline_accuracy"] == results["finetune_accuracy_pretrained"]
    assert json.loads((tmp_path / "all_results.json").read_text()) == results
    assert (tmp_path / "pretrain" / "encoder" / "model.safetensors").exists()
    assert (tmp_path / "classifier" / "preprocessor_config.json").exists()
