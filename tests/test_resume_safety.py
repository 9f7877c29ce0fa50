"""`--resume` never loses or silently changes a run: a finished run is left as it is; a raised --max_steps continues it
and merges its results; a checkpoint stores the arguments that define its run and a resume that changes one is
refused unless --resume_allow_changes names it; --model_config on the command line merges over the preset's; a
damaged checkpoint is named and the newest complete one is resumed from. Tiny preset, two steps."""

import json
import re
import shutil
from pathlib import Path

import pretrain
import pytest
import torch
from conftest import TINY_PRESET, assert_states_close, tiny_preset_argv
from safetensors.torch import load_file

from aasp_hf import AaspConfig, AaspForPreTraining
from aasp_hf.training.checkpointing import checkpoint_problem, latest_checkpoint, load_trainer_state, verify_checkpoints
from aasp_hf.training.resume import check_resume_arguments
from aasp_hf.utils.errors import UsageError
from aasp_hf.utils.schedules import learning_rate, teacher_momentum


def files(folder) -> dict:
    """Every file under `folder` -> its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


@pytest.fixture
def run(finished_pretraining, tmp_path):
    """A copy of the session's finished tiny-preset run (conftest.py) to change."""
    return Path(shutil.copytree(finished_pretraining, tmp_path / "run"))


# ----------------------------------------------------------------------------------------------- finished runs
def test_resume_on_a_finished_run_leaves_every_file_as_it_was(run, capsys):
    before = files(run)
    results = pretrain.main(tiny_preset_argv(run, "--resume"))
    assert files(run) == before  # main rewrote all_results.json with 8 of its 35 keys and the model card
    assert results == json.loads((run / "all_results.json").read_text())
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"{run} holds a run already finished (step 2 of --max_steps 2); nothing was changed. Its results: "
        f"{run / 'all_results.json'}, its encoder: {run / 'encoder'}. To train on, raise --max_steps and "
        "pass --resume_allow_changes max_steps."
    ]


def test_a_raised_max_steps_is_refused_unless_allowed_then_continues_and_merges_the_results(run, capsys):
    before, old_results = files(run), json.loads((run / "all_results.json").read_text())
    with pytest.raises(UsageError) as refused:
        pretrain.main(tiny_preset_argv(run, "--resume", "--max_steps", "3", "--learning_rate", "0.001"))
    message = str(refused.value)
    assert "\n" not in message and "max_steps 2 → 3, learning_rate 0.0005 → 0.001" in message
    assert "--resume_allow_changes max_steps learning_rate" in message
    assert files(run) == before
    capsys.readouterr()

    results = pretrain.main(
        tiny_preset_argv(run, "--resume", "--max_steps", "3", "--resume_allow_changes", "max_steps")
    )
    assert results["step"] == 3 and results["start_step"] == 2
    assert set(old_results) <= set(results)  # no key lost: losses, component losses, monitors, ...
    assert results["loss"] != old_results["loss"]  # ... and those of the new step replace the old ones
    card = (run / "encoder" / "README.md").read_text()
    assert f"final pre-training loss: {results['loss']:.4f}" in card
    # the schedules of a run planned with max_steps 3 from here on (lr and momentum are pure functions of the step)
    last = json.loads((run / "log_history.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 3
    assert last["train/learning_rate"] == learning_rate(2, 3, 1, 5e-4, 0.0)
    assert last["train/teacher_momentum"] == teacher_momentum(2, 3, 0.994, 1.0)
    out = capsys.readouterr().out
    assert "resuming with max_steps 2 → 3" in out
    assert (
        f"learning rate at step 2: {learning_rate(2, 2, 1, 5e-4, 0.0):.3g} → {learning_rate(2, 3, 1, 5e-4, 0.0):.3g}"
        in out
    )
    assert (
        f"teacher momentum at step 2: {teacher_momentum(2, 2, 0.994, 1.0):.5f} → "
        f"{teacher_momentum(2, 3, 0.994, 1.0):.5f}"
    ) in out
    # the new checkpoint stores the new arguments: resuming it again needs no flag, and leaves it as it is
    assert load_trainer_state(run / "checkpoint-3")["run_arguments"]["max_steps"] == 3
    after = files(run)
    pretrain.main(tiny_preset_argv(run, "--resume", "--max_steps", "3"))
    assert files(run) == after


# ----------------------------------------------------------------------------------------------- run arguments
# every argument of pretrain.RUN_ARGUMENTS, changed on the command line (mixed_precision is resolved by accelerate)
CHANGES = {
    "max_steps": "7",
    "warmup_steps": "0",
    "learning_rate": "0.001",
    "min_learning_rate": "1e-05",
    "teacher_momentum_base": "0.99",
    "teacher_momentum_final": "0.999",
    "seed": "1",
    "per_device_train_batch_size": "2",
    "gradient_accumulation_steps": "2",
    "dataset": "esc50",
    "data_root": "/data",
    "train_dir": "/audio",
    "train_manifest": "/train.tsv",
    "dataset_name": "x",
    "dataset_config": "c",
    "dataset_split": "validation",
    "audio_column": "wav",
    "synthetic_clips": "9",
    "synthetic_seconds": "2.0",
    "log_mel_cache": "/cache",
    "crop_seconds": "0.5",
    "student_eq_strength": "0.5",
    "shuffle_buffer_size": "10",
    "weight_decay": "0.1",
    "adam_beta1": "0.8",
    "adam_beta2": "0.9",
    "adam_epsilon": "1e-06",
    "max_grad_norm": "1.0",
    "patch_embedding_lr_scale": "0.5",
    "streaming": "true",
}
FIXED = {name for name, kind in pretrain.RUN_ARGUMENTS.items() if kind == "fixed"}


def stored_and_changed(flags, mixed_precision="no"):
    """The run arguments of the base command and of the command with `flags` added (what a checkpoint stores and
    what a resume compares with it), built as main() builds them, without training."""

    def arguments(extra, precision):
        data_args, model_args, args = pretrain.parse_args(tiny_preset_argv("unused", *extra))
        return pretrain.run_arguments(data_args, args, AaspConfig(**model_args.model_config), precision)

    return arguments([], "no"), arguments(flags, mixed_precision)


def shown(value):
    return repr(value) if isinstance(value, str) else json.dumps(value)


def test_every_run_argument_has_a_case_here():
    assert set(CHANGES) | {"mixed_precision"} == set(pretrain.RUN_ARGUMENTS)


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_a_changed_run_argument_is_refused_in_one_line_unless_allowed(name):
    stored, current = stored_and_changed([f"--{name}", CHANGES[name]])
    with pytest.raises(UsageError) as refused:
        check_resume_arguments("checkpoint-2", stored, current, allowed=[], fixed=FIXED)
    message, old, new = str(refused.value), stored[name], current[name]
    assert "\n" not in message and old != new
    assert f"{name} {shown(old)} → {shown(new)}" in message
    if name in FIXED:  # the checkpoint's state cannot fit: no flag allows it
        with pytest.raises(UsageError, match="cannot change"):
            check_resume_arguments("checkpoint-2", stored, current, allowed=[name], fixed=FIXED)
    else:
        assert f"--resume_allow_changes {name} " in message
        assert check_resume_arguments("checkpoint-2", stored, current, allowed=[name], fixed=FIXED) == [
            (name, old, new)
        ]


def test_mixed_precision_and_the_model_config_are_compared_key_by_key():
    stored, current = stored_and_changed(["--model_config", '{"num_hidden_layers": 1}'], mixed_precision="bf16")
    with pytest.raises(
        UsageError,
        match=r"num_hidden_layers 2 → 1, mixed_precision 'no' → 'bf16'|"
        r"mixed_precision 'no' → 'bf16', model_config.num_hidden_layers 2 → 1",
    ):
        check_resume_arguments("checkpoint-2", stored, current, allowed=[], fixed=FIXED)
    changes = check_resume_arguments(
        "checkpoint-2", stored, current, allowed=["model_config", "mixed_precision"], fixed=FIXED
    )
    assert sorted(changes) == [("mixed_precision", "no", "bf16"), ("model_config.num_hidden_layers", 2, 1)]
    assert check_resume_arguments("checkpoint-2", None, current, allowed=[]) == []  # a checkpoint of older code


def test_the_checkpoint_stores_the_run_arguments_of_its_command(finished_pretraining):
    stored = load_trainer_state(finished_pretraining / "checkpoint-2")["run_arguments"]
    assert stored == stored_and_changed([])[0]
    assert stored["model_config"]["hidden_size"] == 64 and stored["learning_rate"] == 5e-4


def test_resume_allow_changes_is_checked_like_any_argument(tmp_path):
    with pytest.raises(UsageError, match=r"'max_step' \(did you mean 'max_steps'\?\)"):
        pretrain.parse_args(tiny_preset_argv(tmp_path, "--resume", "--resume_allow_changes", "max_step"))
    with pytest.raises(UsageError, match="--resume_allow_changes goes with --resume"):
        pretrain.parse_args(tiny_preset_argv(tmp_path, "--resume_allow_changes", "max_steps"))
    _, _, args = pretrain.parse_args(
        tiny_preset_argv(tmp_path, "--resume", "--resume_allow_changes", "max_steps,seed", "model_config.mask_ratio")
    )
    assert args.resume_allow_changes == ["max_steps", "seed", "model_config.mask_ratio"]


# ----------------------------------------------------------------------------------------------- --model_config
def test_model_config_on_the_command_line_merges_key_by_key_over_the_preset(finished_pretraining):
    preset = json.loads(TINY_PRESET.read_text())["model_config"]
    for flags in (["--model_config", '{"num_hidden_layers": 1}'], ['--model_config={"num_hidden_layers": 1}']):
        _, model_args, _ = pretrain.parse_args(tiny_preset_argv("unused", *flags))
        assert model_args.model_config == {**preset, "num_hidden_layers": 1}
    model = pretrain.build_model(model_args)
    expected = AaspForPreTraining(AaspConfig(**{**preset, "num_hidden_layers": 1}))  # the oracle: preset + 1 layer
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 1  # not the 768-wide default
    count = sum(p.numel() for p in model.aasp.parameters())
    assert count == sum(p.numel() for p in expected.aasp.parameters()) < 200_000
    # the run saved its resolved config: the encoder's own fields
    resolved = json.loads((finished_pretraining / "resolved_config.json").read_text())
    encoder = json.loads((finished_pretraining / "encoder" / "config.json").read_text())
    assert {k: resolved[k] for k in preset} == preset
    assert all(resolved[k] == encoder[k] for k in pretrain.resolved_model_config(AaspConfig(**preset)))


# ----------------------------------------------------------------------------------------------- damaged checkpoints
def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda p: p.unlink(), "model.safetensors is missing"),
        (truncate, r"model.safetensors has \d+ bytes, \d+ were written"),
    ],
    ids=["missing", "truncated"],
)
def test_a_damaged_newest_checkpoint_is_named_and_the_run_resumes_from_the_one_before(run, capsys, damage, problem):
    reference = {k: v.clone() for k, v in load_file(run / "checkpoint-2" / "model.safetensors").items()}  # not mmap
    damage(run / "checkpoint-2" / "model.safetensors")
    (run / "all_results.json").unlink()  # as if the run had died right after writing checkpoint-2
    assert latest_checkpoint(run) == run / "checkpoint-1"
    results = pretrain.main(tiny_preset_argv(run, "--resume"))
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"warning: {run / 'checkpoint-2'} is damaged (")
    assert warnings[0].endswith("); resuming from checkpoint-1, the newest complete checkpoint")
    assert re.search(problem, warnings[0])
    assert results["start_step"] == 1 and results["step"] == 2
    assert checkpoint_problem(run / "checkpoint-2") is None  # saved again, whole
    assert_states_close(load_file(run / "checkpoint-2" / "model.safetensors"), reference)


def test_checkpoint_problems_are_named_and_a_folder_of_damaged_checkpoints_is_refused(run):
    assert checkpoint_problem(run / "checkpoint-1") is None
    (run / "checkpoint-2" / "optimizer.bin").unlink()
    assert checkpoint_problem(run / "checkpoint-2") == "optimizer.bin is missing"
    truncate(run / "checkpoint-1" / "random_states_0.pkl")
    assert re.fullmatch(
        r"random_states_0.pkl has \d+ bytes, \d+ were written", checkpoint_problem(run / "checkpoint-1")
    )
    assert verify_checkpoints(run)[0] is None
    with pytest.raises(
        UsageError,
        match=r"^--resume: no complete checkpoint in .*\(checkpoint-2: optimizer.bin is "
        r"missing; checkpoint-1: random_states_0.pkl has",
    ):
        pretrain.main(tiny_preset_argv(run, "--resume"))
    # a checkpoint whose manifest is gone is damaged, as the save wrote one
    (run / "checkpoint-1" / "manifest.json").unlink()
    assert checkpoint_problem(run / "checkpoint-1") == "manifest.json is missing (the save wrote one)"
    # a checkpoint written before manifests: its weights are checked (a header that does not cover the file)
    state = load_trainer_state(run / "checkpoint-1")
    del state["checkpoint_format"]
    (run / "checkpoint-1" / "trainer_state.json").write_text(json.dumps(state))
    truncate(run / "checkpoint-1" / "model.safetensors")
    assert checkpoint_problem(run / "checkpoint-1").startswith("model.safetensors cannot be read")


# ----------------------------------------------------------------------------------------------- finetune.py
def test_finetune_resume_leaves_a_finished_run_and_refuses_a_changed_one(finished_finetuning, tmp_path, capsys):
    import finetune

    finished, command = finished_finetuning
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    command = [*command[:-1], str(run)]
    before = files(run)
    results = finetune.main(command + ["--resume"])
    assert files(run) == before and results == json.loads((run / "all_results.json").read_text())
    assert f"{run} holds a finished run (step 2 of --max_steps 2); nothing was changed." in capsys.readouterr().out
    with pytest.raises(
        UsageError,
        match=r"^--resume: .*checkpoint-2 was written with other arguments: max_steps 2 → "
        r"3, learning_rate 0\.002 → 0\.0001\. .*--resume_allow_changes max_steps "
        r"learning_rate ",
    ):
        finetune.main(command + ["--resume", "--max_steps", "3", "--learning_rate", "1e-4"])
    assert files(run) == before
    assert load_trainer_state(run / "checkpoint-2")["run_arguments"]["max_steps"] == 2


def test_finetune_resume_passes_over_a_damaged_checkpoint(finished_finetuning, tmp_path, capsys):
    import finetune

    finished, command = finished_finetuning
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    command = [*command[:-1], str(run)]
    reference = {k: v.clone() for k, v in load_file(run / "checkpoint-2" / "model.safetensors").items()}
    (run / "checkpoint-2" / "model.safetensors").unlink()
    (run / "all_results.json").unlink()  # as if the run had died right after writing checkpoint-2
    results = finetune.main(command + ["--resume"])
    assert (
        f"warning: {run / 'checkpoint-2'} is damaged (model.safetensors is missing); resuming from checkpoint-1, "
        "the newest complete checkpoint"
    ) in capsys.readouterr().out
    assert results["step"] == 2 and checkpoint_problem(run / "checkpoint-2") is None
    assert_states_close(load_file(run / "checkpoint-2" / "model.safetensors"), reference)


def test_finetune_resumed_with_a_longer_run_keeps_the_lr_and_ema_it_derived(finished_finetuning, tmp_path, capsys):
    """A run that derived its lr and weight-EMA decay from --max_steps 2 (0.002, no EMA) keeps them when resumed with
    --max_steps 800, for which they would be derived as 5e-4 and 0.9875: the EMA may not change on resume, and the lr
    should not jump. A value typed on the command line is used as given."""
    import finetune

    finished, command = finished_finetuning
    run = Path(shutil.copytree(finished, tmp_path / "run"))
    command = [*command[:-1], str(run), "--resume", "--max_steps", "800", "--resume_allow_changes", "max_steps"]
    capsys.readouterr()
    args = finetune.parse_args(command)
    assert (args.learning_rate, args.ema_decay) == (0.002, 0.0)
    assert capsys.readouterr().out.splitlines() == [
        "--learning_rate 0.002: the value the resumed run derived from its --max_steps 2 (pass --learning_rate to "
        "choose)",
        "--ema_decay 0: the value the resumed run derived from its --max_steps 2 (pass --ema_decay to choose)",
    ]
    assert finetune.parse_args(command + ["--learning_rate", "1e-4"]).learning_rate == 1e-4
    fresh = finetune.parse_args(
        [*finished_finetuning[1][:-1], str(tmp_path / "new"), "--max_steps", "800"]
    )  # a new run
    assert (fresh.learning_rate, fresh.ema_decay) == (5e-4, 0.9875)
