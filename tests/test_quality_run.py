"""benchmarks/quality/run.py (`make study`) end to end on a tiny fake DATA_DIR: units written and skipped on a re-run,
a lost unit redone without pre-training again, the table's rows and its mean ± std against a hand computation, the
plot, and step 0 being the initialisation that pre-training starts from."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from safetensors.torch import load_file

from conftest import tiny_config_kwargs

from aasp_hf.data.synthetic import synth_clip

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/quality/run.py by its path (its sibling variants.py imports through pytest's pythonpath)
_spec = importlib.util.spec_from_file_location("quality_run", ROOT / "benchmarks" / "quality" / "run.py")
quality = sys.modules["quality_run"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quality)

TASKS = {"pitched": ["tone", "noise_bursts"], "modulation": ["am_4hz", "chirp"]}
PRESET = {
    "crop_seconds": 0.63,  # 64 frames = num_frames
    "model_config": tiny_config_kwargs(
        predictor_hidden_size=32,
        predictor_num_layers=1,
        predictor_num_attention_heads=2,
        mask_num_views=2,
        mask_block_sizes=[[1, 2], [2, 1]],
    ),
    "per_device_train_batch_size": 4,
    "max_steps": 2,
    "warmup_steps": 1,
    "learning_rate": 1e-3,
    "logging_steps": 1,
    "save_steps": 100,
    "report_to": "none",
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """pretrain/ (8 unlabelled clips) and two separable tasks of synthetic sounds, {train,test}/<label>/*.wav."""
    root = tmp_path_factory.mktemp("quality_data")
    rng = np.random.default_rng(0)
    for i in range(8):
        path = root / "pretrain" / f"clip{i}.wav"
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, synth_clip(["tone", "chirp", "noise_bursts", "am_4hz"][i % 4], rng, 0.7), 16000)
    for task, labels in TASKS.items():
        for split, count in (("train", 8), ("test", 3)):
            for label in labels:
                for j in range(count):
                    path = root / "tasks" / task / split / label / f"{j}.wav"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    sf.write(path, synth_clip(label, rng, 0.5), 16000)
    return root


def argv(data_dir, out, preset, **extra):
    args = [
        "--data_dir",
        str(data_dir),
        "--output_dir",
        str(out / "runs"),
        "--results",
        str(out / "results.md"),
        "--preset",
        str(preset),
        "--launcher",
        "inprocess",
        "--probe_max_steps",
        "20",
        "--probe_eval_steps",
        "10",
        "--probe_seeds",
        "0",
        "--device",
        "cpu",
    ]
    for key, value in extra.items():
        args += [f"--{key}", *([str(v) for v in value] if isinstance(value, list) else [str(value)])]
    return args


@pytest.fixture(scope="module")
def study(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("quality_study")
    preset = out / "preset.json"
    preset.write_text(json.dumps(PRESET))
    args = argv(data_dir, out, preset, variants="logmel,random_init,spe", seeds=[0, 1], probe_fractions=[0, 1])
    report = quality.main(args)
    return {"out": out, "args": args, "report": report, "study_dir": out / "runs" / report["study"]}


def test_every_unit_is_written_once_with_its_numbers(study):
    units_dir = study["study_dir"] / "units"
    expected = {"logmel/logmel/step0.json", "random_init/seed0/step0.json", "random_init/seed1/step0.json"} | {
        f"spe/seed{s}/step{k}.json" for s in (0, 1) for k in (0, 2)
    }
    assert {str(p.relative_to(units_dir)) for p in units_dir.rglob("*.json")} == expected
    unit = json.loads((units_dir / "spe/seed1/step2.json").read_text())
    assert unit["variant"] == "spe" and unit["seed"] == 1 and unit["step"] == 2 and unit["max_steps"] == 2
    assert set(unit["accuracy"]) == set(TASKS)
    assert unit["average"] == pytest.approx(np.mean(list(unit["accuracy"].values())))
    for task in TASKS:
        info = unit["tasks"][task]
        assert info["num_classes"] == 2 and info["num_clips"]["test"] == 6
        assert info["num_clips"]["train"] + info["num_clips"]["validation"] == 16
        assert info["clip_seconds"] == 0.5  # the longest clip: nothing cut
        assert info["feature_dim"] == 32 + 2 * 32  # D + F̃·D with F̃ = 32 mel bins / 16
    assert unit["training_log"]["step"] == 2
    logmel = json.loads((units_dir / "logmel/logmel/step0.json").read_text())
    assert logmel["tasks"]["pitched"]["feature_dim"] == 2 * 32  # mean and std per mel bin
    saved = json.loads((study["study_dir"] / "pretrain/spe/seed1/encoders/step2/preprocessor_config.json").read_text())
    assert unit["saved_max_frames"] == saved.get("max_frames")  # recorded; the runner probed with max_frames None
    # the run is complete: its checkpoints are gone, its exports stay
    run_dir = study["study_dir"] / "pretrain/spe/seed1"
    assert not list(run_dir.glob("checkpoint-*")) and (run_dir / "encoders/step0/model.safetensors").is_file()


def test_rerun_skips_finished_units_and_redoes_a_lost_one_without_pretraining(study, monkeypatch):
    calls = []
    original = quality.Study.run_unit
    monkeypatch.setattr(quality.Study, "run_unit", lambda self, *unit: calls.append(unit) or original(self, *unit))
    before = json.loads((study["out"] / "results.json").read_text())["aggregate"]
    quality.main(study["args"])
    assert calls == []
    assert json.loads((study["out"] / "results.json").read_text())["aggregate"] == before

    lost = study["study_dir"] / "units/spe/seed1/step2.json"
    kept = json.loads(lost.read_text())
    lost.unlink()

    def no_pretraining(*args, **kwargs):
        raise AssertionError("the encoder of step 2 was exported already: no pre-training may run")

    monkeypatch.setattr(quality.Study, "pretrain_segment", no_pretraining)
    quality.main(study["args"])
    assert calls == [("spe", 1, 2)]
    redone = json.loads(lost.read_text())
    assert redone["probe_reused"] and redone["accuracy"] == kept["accuracy"]


def test_table_rows_and_mean_std_match_a_hand_computation(study):
    units_dir = study["study_dir"] / "units"

    def average(path):
        accuracy = json.loads((units_dir / path).read_text())["accuracy"]
        return (accuracy["modulation"] + accuracy["pitched"]) / 2

    spe_final = [average(f"spe/seed{s}/step2.json") for s in (0, 1)]
    spe_init = [average(f"spe/seed{s}/step0.json") for s in (0, 1)]
    mean = (spe_final[0] + spe_final[1]) / 2
    std = abs(spe_final[0] - spe_final[1]) / np.sqrt(2)  # the sample std (ddof = 1) of two values
    gains = [spe_final[0] - spe_init[0], spe_final[1] - spe_init[1]]
    task = [json.loads((units_dir / f"spe/seed{s}/step2.json").read_text())["accuracy"]["pitched"] for s in (0, 1)]

    aggregate = json.loads((study["out"] / "results.json").read_text())["aggregate"]
    assert aggregate["spe"]["2"]["average"] == pytest.approx([mean, std])
    assert aggregate["spe"]["2"]["tasks"]["pitched"] == pytest.approx([np.mean(task), np.std(task, ddof=1)])
    assert aggregate["spe"]["2"]["gain"] == pytest.approx([np.mean(gains), abs(gains[0] - gains[1]) / np.sqrt(2)])
    assert aggregate["spe"]["2"]["n"] == 2 and aggregate["random_init"]["0"]["n"] == 2

    table = (study["out"] / "results.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| variant")]
    main_rows = rows[: rows.index(next(r for r in rows if r.startswith("| spe |"))) + 1]
    assert [r.split(" | ")[0][2:] for r in main_rows] == ["logmel", "random_init", "spe"]
    spe_row = main_rows[-1].split(" | ")
    assert spe_row[2:4] == ["2", "2"]  # n seeds, step
    assert spe_row[6] == f"**{100 * mean:.1f} ± {100 * std:.1f}**"
    logmel = average("logmel/logmel/step0.json")
    assert spe_row[8].rstrip(" |") == f"{100 * (mean - logmel):+.1f}"

    # same-source validation: per task the mean of the heads' validation accuracies, then the mean over tasks
    def validation(path):
        tasks = json.loads((units_dir / path).read_text())["tasks"]
        return np.mean([np.mean([r["valid"] for r in tasks[t]["probe_runs"]]) for t in ("modulation", "pitched")])

    spe_valid = [validation(f"spe/seed{s}/step2.json") for s in (0, 1)]
    assert aggregate["spe"]["2"]["validation"] == pytest.approx([np.mean(spe_valid), np.std(spe_valid, ddof=1)])
    assert spe_row[9].rstrip(" |") == f"{100 * np.mean(spe_valid):.1f} ± {100 * np.std(spe_valid, ddof=1):.1f}"
    assert re.search(r"\| logmel \| .* \| 1 \| – \|", table)
    assert "max_frames" in table and "python benchmarks/quality/run.py" in table
    assert (study["out"] / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_aggregate_pairs_gains_by_seed_and_leaves_std_undefined_for_one_seed():
    def unit(variant, seed, step, a, b):
        return {"variant": variant, "seed": seed, "step": step, "accuracy": {"x": a, "y": b}}

    units = [
        unit("v", 0, 0, 0.5, 0.7),
        unit("v", 1, 0, 0.4, 0.4),
        unit("v", 2, 0, 0.9, 0.9),
        unit("v", 0, 10, 0.6, 0.8),
        unit("v", 1, 10, 0.7, 0.5),
        unit("w", 3, 10, 0.2, 0.4),
    ]
    table = quality.aggregate(units, ["x", "y"])
    assert table["v"][10]["average"] == pytest.approx([0.65, np.std([0.7, 0.6], ddof=1)])
    assert table["v"][10]["gain"] == pytest.approx([0.15, np.std([0.1, 0.2], ddof=1)])  # seed 2 has no step 10
    assert table["v"][10]["gain_seeds"] == 2 and table["v"][0]["n"] == 3
    assert table["w"][10]["average"][0] == pytest.approx(0.3) and np.isnan(table["w"][10]["average"][1])
    assert "gain" not in table["w"][10]
    assert quality.fmt(0.65, 0.0707) == "65.0 ± 7.1" and quality.fmt(0.3) == "30.0"


def test_step_zero_is_the_initialisation_pretraining_starts_from(data_dir, tmp_path, monkeypatch):
    """With the optimiser's update taken out, pre-training leaves the student where it started: the step-1 export
    equals step 0's. (A learning rate of 0 would say the same, but the scripts refuse it as a user's mistake.)"""
    import torch

    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, closure=None: None)  # the runner trains in-process
    preset = tmp_path / "preset.json"
    preset.write_text(json.dumps({**PRESET, "max_steps": 1, "warmup_steps": 0}))
    report = quality.main(
        argv(
            data_dir,
            tmp_path,
            preset,
            variants="spe",
            seeds=[3],
            probe_fractions=[1],
            tasks="pitched",
            log_mel_cache="on",
        )
    )  # pre-training from the log-mel cache
    encoders = tmp_path / "runs" / report["study"] / "pretrain/spe/seed3/encoders"
    init, trained = (load_file(encoders / f"step{k}/model.safetensors") for k in (0, 1))
    assert init.keys() == trained.keys()
    for name in init:
        assert np.array_equal(init[name].numpy(), trained[name].numpy()), name
    units = [u for u in report["units"] if u["variant"] == "spe"]
    assert {u["step"] for u in units} == {0, 1}
    assert units[0]["encoder_key"] == units[1]["encoder_key"] and units[1]["probe_reused"]
    run_config = json.loads((encoders.parent / "run_config.json").read_text())
    assert Path(run_config["log_mel_cache"], "index.json").is_file() and "train_dir" not in run_config


def test_probe_encoders_extracts_the_teacher_of_a_checkpoint(tmp_path):
    """probe_encoders.py NAME=FOLDER:teacher probes the EMA teacher: the folder it builds holds exactly the
    checkpoint's `teacher.*` weights, not the student's."""
    import torch
    from safetensors.torch import save_file

    import probe_encoders
    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForPreTraining, AaspModel

    torch.manual_seed(0)
    model = AaspForPreTraining(AaspConfig(**tiny_config_kwargs()))
    with torch.no_grad():  # make the teacher differ from the student
        for p in model.teacher.parameters():
            p.add_(0.01)
    export = tmp_path / "export"
    model.aasp.save_pretrained(export)
    AaspFeatureExtractor().save_pretrained(export)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, export / "full_state.safetensors")

    folder = probe_encoders.teacher_folder(export, tmp_path / "teacher")
    loaded = AaspModel.from_pretrained(folder).state_dict()
    teacher = model.teacher.state_dict()
    assert all(torch.equal(loaded[k], teacher[k]) for k in teacher)
    assert not torch.equal(loaded["cls_token"], model.aasp.state_dict()["cls_token"])


def test_probe_encoders_reprobes_an_encoder_when_the_tasks_or_probe_flags_change(data_dir, tmp_path):
    """probe_encoders.py keeps one cache folder for every call: a second call on the same encoder with other
    --tasks or probe flags must probe again (session 9 got the first call's tasks back), the same call must not."""
    import torch

    import probe_encoders
    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

    torch.manual_seed(0)
    config = AaspConfig(**tiny_config_kwargs())
    AaspModel(config).save_pretrained(tmp_path / "encoder")
    AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(tmp_path / "encoder")
    flags = [
        "--data_dir",
        str(data_dir),
        "--output_dir",
        str(tmp_path / "runs"),
        "--probe_max_steps",
        "20",
        "--probe_eval_steps",
        "10",
        "--probe_seeds",
        "0",
        "--device",
        "cpu",
    ]
    pair = f"enc={tmp_path / 'encoder'}"

    first = probe_encoders.main([pair, "--tasks", "pitched", *flags])["enc"]
    other_task = probe_encoders.main([pair, "--tasks", "modulation", *flags])["enc"]
    other_seeds = probe_encoders.main([pair, "--tasks", "pitched", *flags, "--probe_seeds", "1"])["enc"]
    again = probe_encoders.main([pair, "--tasks", "pitched", *flags])["enc"]
    assert list(first["tasks"]) == ["pitched"] and not first.get("reused")
    assert list(other_task["tasks"]) == ["modulation"] and not other_task.get("reused")
    assert not other_seeds.get("reused")
    assert again["reused"] and again["tasks"] == first["tasks"]


def test_probe_cache_key_tells_apart_configs_with_the_same_weights(tmp_path):
    """The analytic and symmetric SBLU phases share their initial weights but not their forward: a cached probe of
    one must not be reused for the other (the key holds the config), while a reloaded copy of an encoder is reused."""
    import torch

    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

    torch.manual_seed(0)
    symmetric = AaspModel(AaspConfig(**tiny_config_kwargs(sblu_phase="symmetric")))
    analytic = AaspModel(AaspConfig(**tiny_config_kwargs(sblu_phase="analytic")))
    analytic.load_state_dict(symmetric.state_dict())
    extractor = AaspFeatureExtractor()
    symmetric.save_pretrained(tmp_path / "copy")
    reloaded = AaspModel.from_pretrained(tmp_path / "copy")

    assert quality.encoder_checksum(symmetric) == quality.encoder_checksum(analytic)
    assert quality.encoder_key(symmetric, extractor) != quality.encoder_key(analytic, extractor)
    assert quality.encoder_key(symmetric, extractor) == quality.encoder_key(reloaded, extractor)


def test_tiny_quality_preset_is_the_recipe_study_tiny_500_measured(data_dir):
    """examples/configs/pretrain_tiny_quality.json restates the study's unit (tiny size, 500 steps, frozen stem):
    the small preset with variants.MODEL_SIZES["tiny"], --max_steps 500 (warm-up scaled) and the
    frozen_patch_embedding variant's overrides. If either side changes, docs/pretraining.md and the study's numbers no longer describe it."""
    preset_path = ROOT / "examples" / "configs" / "pretrain_tiny_quality.json"
    preset = json.loads(preset_path.read_text())
    args = quality.parse_args(["--data_dir", str(data_dir), "--model_size", "tiny", "--max_steps", "500"])
    model, train = quality.variant_recipe(quality.resolve_settings(args), quality.VARIANTS["frozen_patch_embedding"])
    assert preset["model_config"] == model
    assert {key: preset.get(key) for key in train} == train
    assert train["patch_embedding_lr_scale"] == 0.0 and train["max_steps"] == 500 and train["warmup_steps"] == 50
    extra = set(preset) - set(train) - {"model_config"}
    assert extra == {"train_dir", "output_dir", "seed"}  # what the runner sets per run
    import pretrain  # examples/pretrain.py (pytest's pythonpath)

    data_args, _, pretrain_args = pretrain.parse_args(["--config", str(preset_path)])
    assert data_args.train_dir == "benchmarks/quality/data/pretrain"
    assert pretrain_args.patch_embedding_lr_scale == 0.0 and pretrain_args.max_steps == 500


def test_a_named_study_reports_beside_the_committed_report_not_over_it():
    """Without --results, a run with --study writes results_<study>.md: a side study must not replace the committed
    results.md (the default study's report), which is what an unnamed run or `make study` writes."""
    here = ROOT / "benchmarks" / "quality"
    assert quality.default_results_path(quality.parse_args([])) == here / "results.md"
    assert quality.default_results_path(quality.parse_args(["--quick"])) == here / "results_quick.md"
    assert quality.default_results_path(quality.parse_args(["--study", "tiny-500"])) == here / "results_tiny-500.md"
    given = quality.parse_args(["--study", "tiny-500", "--results", "/tmp/elsewhere.md"])
    assert quality.default_results_path(given) == Path("/tmp/elsewhere.md")
