"""What a newcomer runs into first: a misspelt flag (one line with the closest flag, in every script), the downstream
scripts on a small folder of their own clips, and the documentation's promises (where `make demo` writes, a training
checkpoint given where a model is expected)."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aasp_hf.utils.errors import UsageError

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


@pytest.mark.parametrize(
    "script, typo, right",
    [
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
        ("benchmarks/quality/build_data.py", "--jobz", "--jobs"),
        ("benchmarks/speed/run.py", "--repeets", "--repeats"),
    ],
)
def test_a_misspelt_flag_is_one_line_with_the_closest_flag_in_every_script(script, typo, right, tmp_path):
    """HfArgumentParser used to end in an 18-line traceback ("Some specified arguments are not used"), argparse in its
    usage block without a suggestion. The flag is checked before anything else (a required argument left unset by
    the typo is not what is reported), with the message a misspelt preset key gets."""
    module = _script(script)
    positional = [str(tmp_path / "a"), str(tmp_path / "b")] if script.startswith("conversion/") else []
    argv = [*positional, typo, "2"]
    message = (
        rf"^unknown key in the command line: '{typo}' \(did you mean '{right}'\?\)\. The valid keys are "
        rf"listed in the script's --help\.$"
    )
    with pytest.raises(UsageError, match=message):
        (module.parse_args if hasattr(module, "parse_args") else module.main)(argv)


def test_as_a_script_a_misspelt_flag_is_one_line_and_exit_code_2(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "finetune.py"), "--model_name_or_path", "x", "--max_stpes", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "finetune.py: error: unknown key in the command line: '--max_stpes' (did you mean '--max_steps'?). The "
        "valid keys are listed in the script's --help."
    ], result.stderr


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


# ----------------------------------------------------------------------------------------------- one's own small folder
CLASSES = {"bird": 15, "door": 14, "rain": 14}  # 43 clips, the size that failed one default at a time


@pytest.fixture(scope="module")
def own_folder(tmp_path_factory):
    """An audiofolder as a user has one: class folders, no train/test folders, WAVs of different lengths and rates.
    Returns (folder, {path: seconds})."""
    import numpy as np
    import soundfile as sf

    root = tmp_path_factory.mktemp("own_clips")
    rng = np.random.default_rng(0)
    seconds = {}
    for label, count in CLASSES.items():
        (root / label).mkdir()
        for i in range(count):
            rate = (16000, 22050, 44100)[i % 3]
            frames = int(rng.integers(int(0.5 * rate), int(1.1 * rate)))
            path = root / label / f"{label}_{i}.wav"
            sf.write(path, (0.1 * rng.standard_normal(frames)).astype("float32"), rate)
            seconds[str(path)] = frames / rate
    return root, seconds


@pytest.fixture
def encoder(tiny_encoder):
    """The session's tiny saved encoder (conftest.py)."""
    return tiny_encoder


def test_linear_eval_on_an_own_folder_derives_the_clip_length_from_the_clips(own_folder, encoder, tmp_path, caplog):
    """Without --clip_seconds (an audiofolder has no EVAR length) the clips are cut to their mean length, as EVAR's
    lengths of its variable-length tasks are; a line says so. It used to be a traceback asking for --clip_seconds."""
    import logging

    import linear_eval
    import numpy as np

    folder, seconds = own_folder
    with caplog.at_level(logging.WARNING, logger="aasp_hf.data.protocol"):
        results = linear_eval.main(
            [
                "--model_name_or_path",
                str(encoder),
                "--dataset",
                "audiofolder",
                "--data_root",
                str(folder),
                "--max_steps",
                "2",
                "--eval_steps",
                "1",
                "--seeds",
                "0",
                "--output_dir",
                str(tmp_path / "lin"),
            ]
        )
    expected = round(float(np.mean(list(seconds.values()))), 2)  # every clip is in the folder's one split, train
    assert results["clip_seconds"] == expected and results["num_classes"] == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"clip length {expected:g} s: the mean length of 43 training clips ('audiofolder' has no EVAR clip length; "
        f"--clip_seconds sets another)"
    ]


def test_finetune_on_an_own_folder_scales_the_unset_defaults_and_says_so(own_folder, encoder, tmp_path, capsys):
    """43 clips and --max_steps 3: the default warm-up (100) and batch (128) used to fail one after the other."""
    import json

    import finetune

    folder, _ = own_folder
    argv = [
        "--model_name_or_path",
        str(encoder),
        "--dataset",
        "audiofolder",
        "--data_root",
        str(folder),
        "--max_steps",
        "3",
        "--eval_steps",
        "3",
        "--output_dir",
        str(tmp_path / "ft"),
    ]
    parts = finetune.load_parts(finetune.parse_args(argv)).parts
    train_clips = len(parts["official"]["train"])
    assert train_clips < 43 - 8  # 20 % held out as test, then 10 % of the rest as validation
    capsys.readouterr()
    results = finetune.main(argv)
    printed = capsys.readouterr().out
    assert (
        "--warmup_steps 0: 10 % of --max_steps 3 (the default 100 is more than that; pass --warmup_steps to "
        "choose)" in printed
    )
    assert (
        f"--per_device_train_batch_size {train_clips}: the {train_clips} training clips (the default 128 is more "
        f"than that; pass --per_device_train_batch_size to choose)"
    ) in printed
    assert results["step"] == 3 and results["total_train_batch_size"] == train_clips
    stored = json.loads((tmp_path / "ft" / "all_results.json").read_text())["arguments"]
    assert (stored["warmup_steps"], stored["per_device_train_batch_size"]) == (0, train_clips)


def test_shift_consistency_on_an_own_folder_measures_the_clips_finetune_holds_out(own_folder, encoder, tmp_path):
    """An audiofolder has no test split; fine-tuning and linear evaluation hold 20 % out, and shift consistency now
    measures those same clips (the same code) instead of refusing --split test."""
    import finetune
    import shift_consistency
    from datasets import Audio

    folder, _ = own_folder
    common = ["--model_name_or_path", str(encoder), "--dataset", "audiofolder", "--data_root", str(folder)]
    parts = finetune.load_parts(finetune.parse_args(common)).parts
    held_out = parts["official"]["test"].cast_column("audio", Audio(decode=False))
    clips = shift_consistency.Clips(shift_consistency.parse_args(common))
    assert [row["audio"]["path"] for row in clips.source] == [row["audio"]["path"] for row in held_out]
    results = shift_consistency.main(common + ["--shifts_ms", "10", "--output_dir", str(tmp_path / "shift")])
    assert results["clips"] == len(held_out) == 9 and results["skipped_clips"] == 0


# ----------------------------------------------------------------------------------------------- what a newcomer cannot find
def _pretraining_checkpoint(run: Path) -> Path:
    """A checkpoint-<step>/ folder as examples/pretrain.py writes it (accelerate state: model.safetensors with the
    student under `aasp.` and the EMA teacher under `teacher.`, optimizer.bin, trainer_state.json; no config.json)."""
    import json

    import torch
    from safetensors.torch import save_file

    checkpoint = run / "checkpoint-1500"
    checkpoint.mkdir(parents=True)
    save_file(
        {"aasp.cls_token": torch.zeros(1, 1, 4), "teacher.cls_token": torch.zeros(1, 1, 4)},
        str(checkpoint / "model.safetensors"),
    )
    (checkpoint / "optimizer.bin").write_bytes(b"")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 1500}))
    return checkpoint


def test_a_training_checkpoint_given_as_a_model_says_what_to_load_instead(encoder, tmp_path):
    """transformers refuses such a folder in AutoConfig, before any AaSP class is involved, with "Should have a
    `model_type` key"; the scripts check first and name the encoder folder and the converter."""
    import shutil

    import export_onnx
    import finetune
    import linear_eval
    from transformers import AutoModel

    checkpoint = _pretraining_checkpoint(tmp_path / "run")
    with pytest.raises(ValueError, match="model_type"):  # what transformers says, unchanged
        AutoModel.from_pretrained(str(checkpoint))
    waiting = (
        rf"^{checkpoint} is a pre-training checkpoint \(weights, optimiser and data state for --resume\), not "
        rf"a model folder: load the encoder the run exports when it finishes, {tmp_path / 'run' / 'encoder'}, "
        rf"or make one from this step with `python conversion/convert_pretraining_checkpoint.py {checkpoint} "
        rf"OUTPUT_DIR` \(add --which teacher for the EMA teacher\)$"
    )
    with pytest.raises(UsageError, match=waiting):
        finetune.parse_args(["--model_name_or_path", str(checkpoint), "--synthetic_per_class", "2"])
    shutil.copytree(encoder, tmp_path / "run" / "encoder")
    exported = rf"load the encoder the run exported, {tmp_path / 'run' / 'encoder'}, or make one"
    with pytest.raises(UsageError, match=exported):
        linear_eval.main(
            [
                "--model_name_or_path",
                str(checkpoint),
                "--synthetic_per_class",
                "2",
                "--output_dir",
                str(tmp_path / "lin"),
            ]
        )
    with pytest.raises(UsageError, match=exported):
        export_onnx.main([str(checkpoint), str(tmp_path / "model.onnx")])
    shutil.copytree(encoder, checkpoint / "encoder")  # --export_with_checkpoints exports each step's encoder
    with pytest.raises(UsageError, match=rf"load this step's exported encoder, {checkpoint / 'encoder'}, or make one"):
        finetune.parse_args(["--model_name_or_path", str(checkpoint), "--synthetic_per_class", "2"])
    with pytest.raises(UsageError, match=rf"load the model the run saved, {tmp_path / 'ft'} "):  # a fine-tuning one
        finetune_checkpoint = tmp_path / "ft" / "checkpoint-3"
        shutil.copytree(checkpoint, finetune_checkpoint)
        (finetune_checkpoint / "model.safetensors").unlink()
        finetune.parse_args(["--model_name_or_path", str(finetune_checkpoint), "--synthetic_per_class", "2"])


def test_decode_failures_are_counted_per_file_not_per_micro_batch(tmp_path, caplog):
    """A small folder puts its one broken file into every few micro-batches: 2 broken files failing 4 times are 2."""
    import logging

    from aasp_hf.data import FailedClip, FailureLog

    log = FailureLog(tmp_path / "decode_failures.txt")
    with caplog.at_level(logging.WARNING, logger="aasp_hf.data.clips"):
        for step in range(2):
            log([FailedClip(step, "a.wav", "not audio"), FailedClip(step + 10, "b.wav", "empty")])
    assert (log.count, log.num_files, log.failed_files()) == (4, 2, 2)
    assert len(caplog.records) == 2  # each file named once
    assert (tmp_path / "decode_failures.txt").read_text().splitlines() == ["a.wav\tnot audio", "b.wav\tempty"]
    FailureLog(tmp_path / "decode_failures.txt")([FailedClip(0, "c.wav", "not audio")])  # another process
    assert log.failed_files() == 3


@pytest.mark.parametrize("script", ["visualize_sblu", "shift_consistency", "linear_eval", "finetune", "mask_geometry"])
def test_default_output_folders_stay_out_of_the_repository(script):
    """Run from the repository's root, a script's default output folder is one git ignores (visualize_sblu.py wrote
    sblu_visualization/ and shift_consistency.py shift_consistency_output/ into the root as untracked folders)."""
    import dataclasses

    module = importlib.import_module(script)
    (arguments,) = [
        c
        for c in vars(module).values()
        if dataclasses.is_dataclass(c)
        and c.__module__
        in (module.__name__, "aasp_hf.evaluation.linear_protocol", "aasp_hf.training.finetuning_arguments")
        and "output_dir" in {f.name for f in dataclasses.fields(c)}
    ]
    default = next(f.default for f in dataclasses.fields(arguments) if f.name == "output_dir")
    ignored = subprocess.run(["git", "check-ignore", "-q", f"{default}/results.md"], cwd=ROOT)
    assert ignored.returncode == 0, f"{script}.py writes {default}/ into the repository"


def test_a_second_demo_says_it_replaces_the_first(tmp_path, capsys):
    import demo

    (tmp_path / "all_results.json").write_text("{}")
    demo.main(
        [
            "--pretrain-steps",
            "0",
            "--finetune-steps",
            "1",
            "--train-per-class",
            "1",
            "--test-per-class",
            "1",
            "--output-dir",
            str(tmp_path),
            "--threads",
            "2",
        ]
    )
    first_lines = capsys.readouterr().out.splitlines()[:2]
    assert (
        f"{tmp_path}/ holds an earlier demo run (all_results.json): this run replaces it (pass --output-dir to "
        f"keep both)" in first_lines
    )


def test_the_readme_says_where_weights_come_from_and_its_example_loads_what_make_demo_writes():
    """The two opening commands stay first; the next section says that no pre-trained AaSP checkpoint is published
    and names the routes; the inference example loads the folders `make demo` writes (tests/test_demo.py checks that
    demo.py writes <output-dir>/pretrain/encoder and <output-dir>/classifier); the converters are in a user doc."""
    import re

    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in first_block.splitlines()] == ["make demo", "make test"]
    top = readme.split("## Inference", 1)[0]
    assert "No pre-trained AaSP checkpoint is published yet" in top and "--plan" in top
    assert "convert_eat_checkpoint.py" in top and 'patch_embedding="spe"' in top and "not AaSP" in top
    inference = readme.split("## Inference", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    folders = set(re.findall(r'from_pretrained\("([^"]+)"\)', inference) + re.findall(r'model="([^"]+)"', inference))
    assert re.search(r'"--output-dir", default="demo_output"', (ROOT / "examples" / "demo.py").read_text())
    assert folders == {"demo_output/pretrain/encoder", "demo_output/classifier"}
    user_docs = (ROOT / "docs" / "checkpoints.md").read_text()
    for command in (
        "python conversion/convert_pretraining_checkpoint.py runs/pt/checkpoint-1500",
        "python conversion/export_onnx.py runs/pt/encoder encoder.onnx --check",
    ):
        assert command in user_docs
    assert "docs/checkpoints.md" in top


# ----------------------------------------------------------------------------------------------- a run's output
OTHER_LIBRARIES = {  # lines other libraries printed in a default run, which the user could not act on
    "TensorFlow / absl start-up": (
        "absl::InitializeLog",
        "oneDNN custom operations",
        "cudart_stub",
        "TensorFlow binary",
    ),
    "transformers' loading report": ("LOAD REPORT", "MISSING", "\x1b["),
    "transformers' progress bars": ("Loading weights", "Writing model shards"),
    "accelerate's checkpoint lines": ("Saving current state to", "saved in"),
}


def other_libraries_lines(output: str) -> dict:
    lines = output.replace("\r", "\n").splitlines()
    return {
        what: [line for line in lines if any(mark in line for mark in marks)]
        for what, marks in OTHER_LIBRARIES.items()
        if any(mark in line for line in lines for mark in marks)
    }


@pytest.mark.slow  # each script as a process
def test_default_training_runs_print_no_line_of_another_library(tmp_path):
    """pretrain.py (its default tracker, tensorboard, whose event writer imported TensorFlow when it is installed),
    finetune.py (an encoder loaded into a classifier with a new head, evaluations and checkpoints) and linear_eval.py
    as processes: their output holds only the scripts' own lines and bars. The tensorboard events are still
    written."""
    from conftest import save_tiny_encoder

    env = {**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1"}
    pretrain = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "pretrain.py"),
            "--config",
            str(ROOT / "examples" / "configs" / "pretrain_tiny_cpu.json"),
            "--synthetic_clips",
            "8",
            "--per_device_train_batch_size",
            "4",
            "--max_steps",
            "2",
            "--save_steps",
            "1",
            "--output_dir",
            str(tmp_path / "pt"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert pretrain.returncode == 0, pretrain.stderr[-3000:]
    assert other_libraries_lines(pretrain.stdout + pretrain.stderr) == {}
    assert list((tmp_path / "pt").rglob("events.out.tfevents.*")), "no tensorboard events written"

    encoder = save_tiny_encoder(tmp_path / "encoder")
    finetune = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "finetune.py"),
            "--model_name_or_path",
            str(encoder),
            "--synthetic_per_class",
            "4",
            "--clip_seconds",
            "0.5",
            "--per_device_train_batch_size",
            "4",
            "--max_steps",
            "4",
            "--eval_steps",
            "2",
            "--save_steps",
            "2",
            "--output_dir",
            str(tmp_path / "ft"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert finetune.returncode == 0, finetune.stderr[-3000:]
    assert other_libraries_lines(finetune.stdout + finetune.stderr) == {}
    assert (
        f"loaded the encoder from {encoder}; the classification head (classifier.dense, classifier.layernorm: 4 "
        "tensors) is new, initialised for this task"
    ) in finetune.stdout.splitlines()
    assert "step 2: validation " in finetune.stdout and "step 4: validation " in finetune.stdout

    linear = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "linear_eval.py"),
            "--model_name_or_path",
            str(encoder),
            "--synthetic_per_class",
            "4",
            "--max_steps",
            "2",
            "--eval_steps",
            "1",
            "--seeds",
            "0",
            "--output_dir",
            str(tmp_path / "lin"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert linear.returncode == 0, linear.stderr[-3000:]
    assert other_libraries_lines(linear.stdout + linear.stderr) == {}


def test_a_checkpoint_that_does_not_fit_beyond_the_new_head_is_one_warning_naming_the_tensors():
    from aasp_hf.training.run_log import describe_new_head

    line = describe_new_head(
        {
            "missing_keys": {"classifier.dense.weight", "aasp.layers.0.mlp.fc1.weight"},
            "unexpected_keys": {"decoder.weight"},
            "mismatched_keys": set(),
        },
        "runs/x",
    )
    assert line == (
        "warning: runs/x does not fit this classifier beyond its new head (missing: "
        "aasp.layers.0.mlp.fc1.weight; unexpected: decoder.weight); is it an AaSP encoder of this "
        "architecture? Those tensors were initialised afresh."
    )
    assert describe_new_head({"missing_keys": set()}, "runs/x") == "loaded the classifier from runs/x, head included"
