"""The defaults that depend on a run's length or its data's size (aasp_hf.training.short_run): the rules as pure
functions, the one line each prints, the paper's presets unchanged, explicit values never overridden, and one warm-up
rule for pre-training and fine-tuning. No training here."""

import dataclasses
import json
import typing
from pathlib import Path

import finetune  # examples/ (pytest's pythonpath)
import pretrain
import pytest

from aasp_hf.utils.errors import UsageError
from aasp_hf.training.arguments import (
    PlanArguments,
    TrainingRunArguments,
    batch_size_for,
    ema_decay_for,
    fit_warmup,
    learning_rate_for,
    warmup_steps_for,
)
from aasp_hf.training.finetuning_arguments import FinetuneArguments, scale_batch_to_data
from aasp_hf.training.pretraining_arguments import PretrainingArguments

CONFIGS = Path(__file__).resolve().parents[1] / "examples" / "configs"
# The paper's presets (Table hyperparams 1); small_folder.json is not one (tests/test_finetune.py checks it: its EMA and
# warm-up are derived on purpose)
# the paper's presets (small_folder and sound_events are ours, for tasks the paper does not run)
FINETUNE_PRESETS = sorted(
    p for p in (CONFIGS / "finetune").glob("*.json") if p.stem not in ("small_folder", "sound_events")
)
PRETRAIN_PRESETS = sorted(CONFIGS.glob("pretrain_*.json"))
DOCUMENTED = ["--model_name_or_path", "x", "--dataset", "audiofolder", "--data_root", "my_clips"]


# ----------------------------------------------------------------------------------------------- the rules
@pytest.mark.parametrize(
    "max_steps, lr",
    [
        (3, 2e-3),
        (100, 2e-3),
        (200, 2e-3),
        (300, 1.33e-3),
        (1000, 4e-4),
        (4000, 1e-4),
        (7999, 5e-5),
        (8000, 5e-5),
        (40_000, 5e-5),
    ],
)
def test_learning_rate_keeps_the_papers_lr_times_steps_up_to_2e_3(max_steps, lr):
    value, line = learning_rate_for(max_steps)
    assert value == lr
    assert (line is None) == (max_steps >= 8000)


@pytest.mark.parametrize(
    "max_steps, decay",
    [
        (3, 0.0),
        (19, 0.0),
        (20, 0.5),
        (100, 0.9),
        (200, 0.95),
        (1000, 0.99),
        (1999, 0.995),
        (2000, 0.995),
        (40_000, 0.995),
    ],
)
def test_ema_horizon_is_at_most_a_tenth_of_the_run(max_steps, decay):
    value, line = ema_decay_for(max_steps)
    assert value == decay
    assert (line is None) == (decay == 0.995)
    if 0 < decay < 0.995:
        assert 1 / (1 - decay) == pytest.approx(max_steps / 10)


@pytest.mark.parametrize("max_steps, warmup", [(3, 0), (10, 1), (200, 20), (999, 99), (1000, 100), (40_000, 100)])
def test_warmup_is_100_or_a_tenth_of_a_shorter_run(max_steps, warmup):
    assert warmup_steps_for(max_steps)[0] == warmup


@pytest.mark.parametrize(
    "clips, processes, batch",
    [(3, 1, 3), (43, 1, 43), (99, 1, 99), (99, 2, 49), (200, 2, 100), (512, 1, 128), (512, 2, 128), (1, 2, 1)],
)
def test_batch_is_128_or_the_training_clips(clips, processes, batch):
    value, line = batch_size_for(clips, processes)
    assert value == batch and (line is None) == (batch == 128)


def test_each_rule_says_what_it_chose_in_one_line():
    assert learning_rate_for(200)[1] == (
        "--learning_rate 0.002: the paper's 5e-05 × 8,000 steps (its shortest "
        "schedule) spread over --max_steps 200 (pass --learning_rate to choose)"
    )
    assert learning_rate_for(50)[1] == (
        "--learning_rate 0.002: the paper's 5e-05 × 8,000 steps (its shortest "
        "schedule) spread over --max_steps 50, at most 0.002 (pass --learning_rate "
        "to choose)"
    )
    assert ema_decay_for(200)[1] == (
        "--ema_decay 0.95: its horizon 1/(1-d) = 20 steps is a tenth of --max_steps 200 "
        "(the paper's 0.995 averages over 200; pass --ema_decay to choose)"
    )
    assert ema_decay_for(3)[1] == (
        "--ema_decay 0 (no weight EMA): --max_steps 3 is too short for one (the paper's "
        "0.995 averages over 200 steps; pass --ema_decay to choose)"
    )
    assert warmup_steps_for(200)[1] == (
        "--warmup_steps 20: 10 % of --max_steps 200 (the default 100 is more than that; pass --warmup_steps to choose)"
    )
    assert batch_size_for(99)[1] == (
        "--per_device_train_batch_size 99: the 99 training clips (the default 128 is "
        "more than that; pass --per_device_train_batch_size to choose)"
    )
    assert batch_size_for(99, 2)[1] == (
        "--per_device_train_batch_size 49: the 99 training clips over 2 processes (the "
        "default 128 is more than that; pass --per_device_train_batch_size to choose)"
    )
    assert fit_warmup(30, 3, "the preset's") == (
        0,
        "--warmup_steps 0: 10 % of --max_steps 3 (the preset's 30 is more than the run; pass --warmup_steps to choose)",
    )
    assert fit_warmup(30, 30, "the preset's") == (30, None)


# ----------------------------------------------------------------------------------------------- in the scripts
def test_the_documented_command_derives_lr_ema_and_warmup_and_says_so(capsys):
    args = finetune.parse_args(DOCUMENTED + ["--max_steps", "200"])
    assert (args.learning_rate, args.ema_decay, args.warmup_steps) == (2e-3, 0.95, 20)
    assert capsys.readouterr().out.splitlines() == [
        learning_rate_for(200)[1],
        ema_decay_for(200)[1],
        warmup_steps_for(200)[1],
    ]


def test_the_batch_is_derived_from_the_training_clips_and_said(capsys):
    args = finetune.parse_args(DOCUMENTED + ["--max_steps", "200"])
    capsys.readouterr()
    parts = {"official": {"train": list(range(99))}}
    assert scale_batch_to_data(args, parts, 1).per_device_train_batch_size == 99
    assert capsys.readouterr().out.splitlines() == [batch_size_for(99)[1]]
    given = finetune.parse_args(DOCUMENTED + ["--max_steps", "200", "--per_device_train_batch_size", "32"])
    assert scale_batch_to_data(given, parts, 1).per_device_train_batch_size == 32


def test_explicit_values_are_never_overridden(capsys):
    args = finetune.parse_args(
        DOCUMENTED + ["--max_steps", "200", "--learning_rate", "5e-5", "--ema_decay", "0.995", "--warmup_steps", "100"]
    )
    assert (args.learning_rate, args.ema_decay, args.warmup_steps) == (5e-5, 0.995, 100)
    assert capsys.readouterr().out == ""
    args = finetune.parse_args(DOCUMENTED + ["--max_steps", "200", "--ema_decay", "0"])  # 0: off, as given
    assert args.ema_decay == 0.0
    for script, argv in ((finetune, DOCUMENTED), (pretrain, ["--config", str(CONFIGS / "pretrain_tiny_cpu.json")])):
        with pytest.raises(UsageError, match=r"^--warmup_steps 30 must be at most --max_steps 3: "):
            script.parse_args(argv + ["--max_steps", "3", "--warmup_steps", "30"])
        with pytest.raises(UsageError, match=r"^--warmup_steps 30 must be at most --max_steps 3: "):
            script.parse_args(argv + ["--max_steps", "3", "--warmup_st", "30"])  # a prefix argparse takes is typed too


@pytest.mark.parametrize("preset", FINETUNE_PRESETS, ids=lambda p: p.stem)
def test_finetune_presets_keep_the_papers_values(preset, capsys):
    values = json.loads(preset.read_text())
    for argv in (
        ["--config", str(preset), "--model_name_or_path", "x"],
        ["--config", str(preset), "--model_name_or_path", "x", "--max_steps", "200", "--warmup_steps", "20"],
    ):
        args = finetune.parse_args(argv)
        for key, value in values.items():
            if key not in ("max_steps", "warmup_steps") or "--max_steps" not in argv:
                assert getattr(args, key) == value, key
        assert (args.learning_rate, args.ema_decay) == (5e-5, 0.0 if preset.stem == "esc50" else 0.995)
    assert capsys.readouterr().out == ""  # nothing derived, nothing said


@pytest.mark.parametrize("preset", PRETRAIN_PRESETS, ids=lambda p: p.stem)
def test_pretrain_presets_keep_their_values(preset, capsys):
    values = json.loads(preset.read_text())
    args = next(a for a in pretrain.parse_args([str(preset)]) if hasattr(a, "warmup_steps"))
    for key in ("max_steps", "warmup_steps", "learning_rate", "teacher_momentum_base"):
        if key in values:
            assert getattr(args, key) == values[key], key
    assert capsys.readouterr().out == ""


# ----------------------------------------------------------------------------------------------- one warm-up rule
@pytest.mark.parametrize(
    "script, argv, preset_warmup",
    [
        (pretrain, ["--config", str(CONFIGS / "pretrain_tiny_cpu.json")], 30),
        (finetune, ["--config", str(CONFIGS / "finetune" / "esc50.json"), "--model_name_or_path", "x"], 800),
    ],
)
def test_a_presets_warmup_longer_than_the_run_is_cut_to_a_tenth_in_both_scripts(script, argv, preset_warmup, capsys):
    parsed = script.parse_args(argv + ["--max_steps", "3"])
    args = next(a for a in (parsed if isinstance(parsed, tuple) else (parsed,)) if hasattr(a, "warmup_steps"))
    assert (args.max_steps, args.warmup_steps) == (3, 0)
    assert capsys.readouterr().out.splitlines()[0] == (
        f"--warmup_steps 0: 10 % of --max_steps 3 (the preset's {preset_warmup} is more than the run; pass "
        "--warmup_steps to choose)"
    )
    parsed = script.parse_args(argv + ["--max_steps", "50"])  # a warm-up that fits stays the preset's
    args = next(a for a in (parsed if isinstance(parsed, tuple) else (parsed,)) if hasattr(a, "warmup_steps"))
    assert args.warmup_steps == (30 if script is pretrain else 5)


# ----------------------------------------------------------------------------------------------- shared fields
# Each script's own default for a run argument both scripts share (TrainingRunArguments holds none for these).
SCRIPT_DEFAULTS = {
    PretrainingArguments: {
        "output_dir": "pretrain_output",
        "min_learning_rate": 0.0,
        "logging_steps": 10,
        "save_total_limit": 3,
    },
    FinetuneArguments: {
        "output_dir": "finetune_output",
        "min_learning_rate": 1e-7,
        "logging_steps": 50,
        "save_total_limit": 2,
    },
}


@pytest.mark.parametrize("script", SCRIPT_DEFAULTS, ids=lambda cls: cls.__name__)
def test_a_run_argument_both_training_scripts_share_has_one_help_and_only_its_default_per_script(script):
    shared = {field.name: field for field in dataclasses.fields(TrainingRunArguments)}
    defaults = SCRIPT_DEFAULTS[script]
    # a script's dataclass declares a shared field again only to give it its own default (`script_default`)
    assert set(script.__annotations__) & set(shared) == set(defaults)
    for field in dataclasses.fields(script):
        if field.name in shared:
            assert field.metadata == shared[field.name].metadata, field.name
            assert field.default == defaults.get(field.name, shared[field.name].default), field.name


def test_the_arguments_both_training_scripts_still_define_apart_differ_in_type():
    # the annotations, not `Field.type`: HfArgumentParser rewrites a parsed field's `int | None` type to `int`
    pretraining, finetuning = typing.get_type_hints(PretrainingArguments), typing.get_type_hints(FinetuneArguments)
    inherited = {field.name for cls in (TrainingRunArguments, PlanArguments) for field in dataclasses.fields(cls)}
    apart = (set(pretraining) & set(finetuning)) - inherited
    # fine-tuning may leave these unset (derived from the run's length or the data), pre-training may not
    assert apart == {"per_device_train_batch_size", "warmup_steps", "learning_rate"}
    assert all(pretraining[name] != finetuning[name] for name in apart)
