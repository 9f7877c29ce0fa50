"""A new user's mistakes in a command get one clear line before anything is built: misspelt keys (in a preset and
in `model_config`, with the closest valid key), numbers out of range (naming the argument), and, run as a script,
`<script>: error: <message>` with exit code 2 and no traceback."""

import json
import re
import subprocess
import sys
from pathlib import Path

import finetune
import linear_eval
import pretrain
import pytest

from aasp_hf import AaspConfig
from aasp_hf.utils.errors import UsageError
from aasp_hf.training.arguments import check_model_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TINY_PRESET = EXAMPLES / "configs" / "pretrain_tiny_cpu.json"


def test_a_typo_in_model_config_is_refused_with_the_closest_key(tmp_path):
    preset = json.loads(TINY_PRESET.read_text())
    preset["model_config"]["hiden_size"] = preset["model_config"].pop("hidden_size")
    path = tmp_path / "preset.json"
    path.write_text(json.dumps(preset))
    with pytest.raises(
        UsageError,
        match=r"unknown key in model_config: 'hiden_size' \(did you mean 'hidden_size'\?\)"
        r".*AaspConfig's docstring",
    ):
        pretrain.parse_args(["--config", str(path), "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # refused before anything was written
    # the same for an inline object and for a file given as --model_config
    with pytest.raises(UsageError, match="'num_layers'"):
        pretrain.parse_args(["--synthetic_clips", "8", "--model_config", '{"num_layers": 2}'])
    assert check_model_config('{"hidden_size": 64}', AaspConfig) == {"hidden_size": 64}
    assert check_model_config(None, AaspConfig) == {}


@pytest.mark.parametrize(
    "value, reason",
    [
        ('{"hidden_size": 0}', r"AaspConfig\.hidden_size=0: must be a positive integer"),  # validate_architecture
        ('{"hidden_size": 1.5}', r"Field 'hidden_size' expected int, got float"),  # @strict's type check
    ],
)
def test_a_value_the_config_refuses_is_one_line_before_anything_is_written(value, reason, tmp_path):
    with pytest.raises(UsageError, match="^model_config: " + reason):
        pretrain.parse_args(["--synthetic_clips", "8", "--model_config", value, "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "script, typo, right",
    [
        (pretrain, "lerning_rate", "learning_rate"),
        (finetune, "lerning_rate", "learning_rate"),
        (linear_eval, "learning_rate", "learning_rates"),  # linear evaluation sweeps a list of rates
    ],
)
def test_a_typo_at_the_top_of_a_preset_names_the_key_and_the_closest_one(script, typo, right, tmp_path):
    path = tmp_path / "preset.json"
    path.write_text(json.dumps({typo: 1e-3, "output_dir": str(tmp_path)}))
    message = rf"unknown key in the preset .*preset.json: '{typo}' \(did you mean '{right}'\?\)"
    with pytest.raises(UsageError, match=message):
        script.parse_args(["--config", str(path)])
    with pytest.raises(UsageError, match=message):  # the one-file form too
        script.parse_args([str(path)])
    path.write_text("{not json")
    with pytest.raises(UsageError, match="is not valid JSON"):
        script.parse_args(["--config", str(path)])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--learning_rate", "-0.001"], r"--learning_rate must be > 0, got -0.001"),
        (["--learning_rate", "0"], r"--learning_rate must be > 0, got 0.0"),
        (["--learning_rate", "nan"], r"--learning_rate must be > 0, got nan"),
        (["--per_device_train_batch_size", "0"], r"--per_device_train_batch_size must be > 0, got 0"),
        (["--weight_decay", "-0.1"], r"--weight_decay must be >= 0, got -0.1"),
        (["--adam_beta2", "1.0"], r"--adam_beta2 must be in \[0, 1\), got 1.0"),
        (["--teacher_momentum_base", "1.5"], r"--teacher_momentum_base must be in \[0, 1\], got 1.5"),
        (["--min_learning_rate", "0.01"], r"--min_learning_rate 0.01 must be at most --learning_rate 0.0005"),
        (["--crop_seconds", "-1"], r"--crop_seconds must be > 0, got -1.0"),
    ],
)
def test_a_number_out_of_range_is_refused_before_anything_is_built(flags, message):
    with pytest.raises(UsageError, match=message):
        pretrain.parse_args(["--synthetic_clips", "8", *flags])


STEPS_MISTAKES = [
    ({"max_steps": 3.7}, "max_steps must be a whole number, got 3.7"),  # HfArgumentParser trained 4 steps, said 3.7
    ({"max_steps": None}, "max_steps must be a whole number, got null"),
    ({"max_steps": True}, "max_steps must be a whole number, got true"),
]
PRESET_TYPE_MISTAKES = {
    pretrain: STEPS_MISTAKES + [({"seed": [0, 1]}, "seed must be a whole number, got [0, 1]")],
    finetune: STEPS_MISTAKES
    + [
        ({"seed": [0, 1]}, "seed must be a whole number, got [0, 1]"),
        ({"seeds": 0}, "seeds must be a list of whole numbers or null, got 0"),
        ({"seeds": [0, 1.5]}, "seeds must be a list of whole numbers or null, got [0, 1.5]"),
    ],
    linear_eval: STEPS_MISTAKES
    + [
        ({"seeds": 0}, "seeds must be a list of whole numbers, got 0"),
        ({"learning_rates": 1e-3}, "learning_rates must be a list of numbers, got 0.001"),
    ],
}


@pytest.mark.parametrize("script", [pretrain, finetune, linear_eval])
def test_a_preset_value_of_the_wrong_type_is_refused_as_the_command_line_refuses_it(script, tmp_path):
    """Both preset forms (`--config preset.json`, `preset.json` alone); a value of the right type (an int for a
    float) still passes, and so does a string, which argparse parses as the command line's ("3" is 3; "3.7" for a
    whole number is argparse's own refusal)."""
    path = tmp_path / "preset.json"
    for preset, message in PRESET_TYPE_MISTAKES[script]:
        path.write_text(json.dumps({**preset, "output_dir": str(tmp_path / "out")}))
        for argv in (["--config", str(path)], [str(path)]):
            with pytest.raises(UsageError, match=f"^the preset {re.escape(str(path))}: {re.escape(message)}$"):
                script.parse_args(argv)
    assert not (tmp_path / "out").exists()
    path.write_text(json.dumps({"max_steps": "3", "weight_decay": 0}))
    parsed = script.parse_args(
        ["--config", str(path), *(["--synthetic_clips", "8"] if script is pretrain else ["--model_name_or_path", "m"])]
    )
    args = parsed[-1] if isinstance(parsed, tuple) else parsed
    assert args.max_steps == 3 and args.weight_decay == 0


@pytest.mark.parametrize("script", ["pretrain.py", "finetune.py", "linear_eval.py"])
def test_as_a_script_a_preset_value_of_the_wrong_type_is_one_line_and_nothing_is_created(script, tmp_path):
    path = tmp_path / "preset.json"
    path.write_text(json.dumps({"max_steps": None, "output_dir": str(tmp_path / "out")}))
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--config", str(path), "--model_name_or_path", "m"]
        if script != "pretrain.py"
        else [sys.executable, str(EXAMPLES / script), "--config", str(path), "--synthetic_clips", "8"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1:] == [
        f"{script}: error: the preset {path}: max_steps must be a whole number, got null"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["preset.json"]


def test_as_a_script_a_mistake_is_one_line_with_exit_code_2(tmp_path):
    path = tmp_path / "preset.json"
    path.write_text(json.dumps({"synthetic_clips": 8, "max_step": 5}))
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "pretrain.py"), "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [
        f"pretrain.py: error: unknown key in the preset {path}: 'max_step' (did you mean 'max_steps'?)"
        f". The valid keys are listed in the script's --help."
    ], result.stderr
    assert "Traceback" not in result.stderr


def test_an_empty_or_missing_train_dir_says_what_was_looked_for(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "sub" / "notes.txt").write_text("not audio")
    base = ["--config", str(TINY_PRESET), "--output_dir", str(tmp_path / "out"), "--report_to", "none"]
    with pytest.raises(UsageError, match=r"no audio files found under .*empty \(looked for \.wav, \.flac, \.mp3"):
        pretrain.main(base + ["--train_dir", str(tmp_path / "empty")])
    with pytest.raises(UsageError, match=r"--train_dir .*missing does not exist"):
        pretrain.main(base + ["--train_dir", str(tmp_path / "missing")])


def test_a_failed_start_does_not_block_the_retry_but_a_run_does(tmp_path):
    """What a failed start leaves (tensorboard/, a log, no checkpoint) is cleared by the retry; a folder with a
    checkpoint is still refused without --resume / --overwrite_output_dir."""
    from aasp_hf.training.checkpointing import RUN_ARTEFACTS, check_output_dir

    artefacts = RUN_ARTEFACTS + ("encoder", "teacher_encoder", "ranks", "tensorboard")
    (tmp_path / "tensorboard").mkdir()
    (tmp_path / "log_history.jsonl").write_text("")
    (tmp_path / "my_notes.txt").write_text("kept")
    leftovers = check_output_dir(tmp_path, resume=False, overwrite=False, artefacts=artefacts)
    assert sorted(p.name for p in leftovers) == ["log_history.jsonl", "tensorboard"]
    (tmp_path / "checkpoint-5").mkdir()
    with pytest.raises(UsageError, match=r"already holds a run.*--resume.*--overwrite_output_dir"):
        check_output_dir(tmp_path, resume=False, overwrite=False, artefacts=artefacts)


def test_a_resumed_run_logs_each_step_once_and_says_where_the_encoder_is(tmp_path, capsys):
    """A run that stopped after logging step 3 but whose last checkpoint is step 2 computes step 3 again on --resume:
    log_history.jsonl holds it once. The end of a run prints the encoder's folder and the line that loads it."""
    import shutil

    argv = [
        "--config",
        str(TINY_PRESET),
        "--synthetic_clips",
        "16",
        "--per_device_train_batch_size",
        "4",
        "--max_steps",
        "3",
        "--warmup_steps",
        "1",
        "--logging_steps",
        "1",
        "--save_steps",
        "2",
        "--report_to",
        "none",
        "--output_dir",
        str(tmp_path),
    ]
    pretrain.main(argv)
    assert f"saved the pre-trained encoder to {tmp_path / 'encoder'}" in capsys.readouterr().out
    shutil.rmtree(tmp_path / "checkpoint-3")  # as if the process died after logging step 3, before saving it
    (tmp_path / "latest").write_text("checkpoint-2")
    pretrain.main(argv + ["--resume"])
    steps = [json.loads(line)["step"] for line in (tmp_path / "log_history.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_a_batch_larger_than_the_training_clips_names_the_argument_and_the_clips(tmp_path):
    """The synthetic demo data holds 5 classes × 20 training clips; a batch that was set is not scaled down (an unset
    one is: tests/test_newcomer.py). The encoder path must exist (a missing one is refused first), but the batch is
    refused before anything loads from it."""
    from conftest import save_tiny_encoder

    encoder = save_tiny_encoder(tmp_path / "encoder")
    with pytest.raises(
        UsageError,
        match=r"^--per_device_train_batch_size 128 × 1 process is more than the 100 "
        r"training clips: pass --per_device_train_batch_size 100 or less$",
    ):
        finetune.main(
            [
                "--model_name_or_path",
                str(encoder),
                "--synthetic_per_class",
                "20",
                "--per_device_train_batch_size",
                "128",
                "--max_steps",
                "2",
                "--warmup_steps",
                "1",
                "--output_dir",
                str(tmp_path / "out"),
            ]
        )


def test_conversion_mistakes_are_one_line_naming_the_argument(tmp_path):
    import convert_eat_checkpoint
    import convert_pretraining_checkpoint
    import export_onnx

    with pytest.raises(UsageError, match=r"^checkpoint .*missing.pt does not exist \(the first argument"):
        convert_eat_checkpoint.main([str(tmp_path / "missing.pt"), str(tmp_path / "out")])
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(UsageError, match=r"notes.pt is not a torch checkpoint \(.pt\), a .safetensors file or a "):
        convert_eat_checkpoint.main([str(tmp_path / "notes.pt"), str(tmp_path / "out")])
    with pytest.raises(UsageError, match=r"^--id2label-json .*labels.json does not exist$"):
        convert_eat_checkpoint.main(
            [str(tmp_path / "notes.pt"), str(tmp_path / "out"), "--id2label-json", str(tmp_path / "labels.json")]
        )
    with pytest.raises(UsageError, match=r"^source .*checkpoint-9 does not exist$"):
        convert_pretraining_checkpoint.main([str(tmp_path / "checkpoint-9"), str(tmp_path / "out")])
    with pytest.raises(UsageError, match=r"^model_dir .*nothing does not exist$"):
        export_onnx.main([str(tmp_path / "nothing"), str(tmp_path / "model.onnx")])
    assert not (tmp_path / "out").exists()
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES.parent / "conversion" / "export_onnx.py"),
            str(tmp_path / "nothing"),
            "model.onnx",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert (
        result.stderr.strip().splitlines()[-1] == f"export_onnx.py: error: model_dir {tmp_path / 'nothing'} does "
        f"not exist"
    )


def test_a_refused_write_advises_resume_only_where_the_script_can_resume(tmp_path, capsys):
    """A full disk ends every script in one line that says what to do after freeing space: the training scripts
    (`run_stoppable`) go on with --resume; every other script (`run_script`: the demo, conversion, benchmarks) has no
    --resume, so it says to run the same command again."""
    import errno
    import signal

    from aasp_hf.utils.entry_points import STOP_SIGNALS, run_script, run_stoppable

    def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "model.safetensors"))

    handlers = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    for entry_point, prog, advice in (
        (run_script, "demo.py", "then run the same command again."),
        (run_stoppable, "finetune.py", "then run the same command with --resume to go on from the last complete"),
    ):
        try:
            with pytest.raises(SystemExit) as stopped:
                entry_point(full_disk, prog)
        finally:  # run_stoppable leaves the stop signals ignored, as a script's end needs; this process goes on
            for number, handler in handlers.items():
                signal.signal(number, handler)
        assert stopped.value.code == 2
        message = capsys.readouterr().err.strip()
        assert message.startswith(f"{prog}: error: cannot write {tmp_path / 'out' / 'model.safetensors'}: No space")
        assert advice in message and message.count("\n") == 0, message
        assert ("--resume" in message) == (entry_point is run_stoppable)
