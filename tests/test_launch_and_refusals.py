"""Launches that cannot split silently, and one line for each mistake a new user makes with a folder of their own:

- a launcher (torchrun, accelerate launch, mpirun, srun) that started several processes whose Accelerator sees one is
  refused in one line naming the variable and what to set; the documented torchrun loopback recipe trains as one run;
- an audiofolder with one class, a misspelt --model_name_or_path, a run's folder instead of its encoder, an unknown
  Hub id offline: one line each, saying what was given, what it is and what to pass;
- the README's sentence on the plain pipeline, as written: after `import aasp_hf` it works without a flag, without
  the import transformers asks for trust_remote_code;
- an empty or header-only WAV: one line per file, once per run, the same line in fine-tuning and linear evaluation
  as in pre-training (path and a short reason).
"""

import json
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import free_port, save_tiny_encoder

from aasp_hf.utils.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
SR = 16000


def one_line(error) -> str:
    message = str(error.value if hasattr(error, "value") else error)
    assert "\n" not in message and "Traceback" not in message, message
    return message


# ----------------------------------------------------------------------------------------------- launches
def test_a_launch_whose_processes_did_not_join_is_refused_in_one_line():
    """The environment says N > 1 processes, accelerate sees 1: refused, naming the variable and what to set."""
    from aasp_hf.training.run_lock import check_launch, launch_mismatch_message

    message = launch_mismatch_message(1, "pretrain.py", {"WORLD_SIZE": "2", "RANK": "1"})
    assert message.startswith("WORLD_SIZE=2: the launcher started 2 processes, but accelerate sees 1")
    assert "ACCELERATE_USE_CPU=1" in message and "\n" not in message
    assert "OMPI_COMM_WORLD_SIZE=4" in launch_mismatch_message(1, "finetune.py", {"OMPI_COMM_WORLD_SIZE": "4"})
    assert "PMI_SIZE=3" in launch_mismatch_message(1, "finetune.py", {"PMI_SIZE": "3"})
    srun = launch_mismatch_message(1, "pretrain.py", {"SLURM_STEP_NUM_TASKS": "2"})
    assert srun.startswith("SLURM_STEP_NUM_TASKS=2: srun started 2 tasks") and "torchrun" in srun
    # joined, or one process launched: nothing to say
    for environ, seen in (({"WORLD_SIZE": "2"}, 2), ({"WORLD_SIZE": "1"}, 1), ({}, 1), ({"WORLD_SIZE": "x"}, 1)):
        assert launch_mismatch_message(seen, "pretrain.py", environ) is None
        check_launch(seen, "pretrain.py", environ)
    # a one-process script refuses any launch of several
    alone = launch_mismatch_message(1, "linear_eval.py", {"WORLD_SIZE": "2"}, one_process=True)
    assert "linear_eval.py runs in one process" in alone and "`python linear_eval.py`" in alone
    with pytest.raises(UsageError, match=r"^WORLD_SIZE=2: "):
        check_launch(1, "pretrain.py", {"WORLD_SIZE": "2"})


def test_each_script_refuses_a_split_launch_before_writing_anything(tmp_path, monkeypatch):
    """pretrain.py as a real process with WORLD_SIZE=2 and no launcher: exit 2, one line on stderr, no output
    folder; finetune.py and linear_eval.py (in this process) refuse the same environment."""
    import finetune
    import linear_eval

    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}
    output_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "examples/pretrain.py",
            "--config",
            "examples/configs/pretrain_tiny_cpu.json",
            "--max_steps",
            "2",
            "--warmup_steps",
            "1",
            "--output_dir",
            str(output_dir),
            "--report_to",
            "none",
        ],
        cwd=ROOT,
        env={**env, "WORLD_SIZE": "2", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    [line] = result.stderr.strip().splitlines()
    assert (
        line.startswith("pretrain.py: error: WORLD_SIZE=2: the launcher started 2 processes, but accelerate sees 1")
        and "ACCELERATE_USE_CPU=1" in line
    )
    assert not output_dir.exists()

    encoder = save_tiny_encoder(tmp_path / "encoder")
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UsageError) as error:
        finetune.main(
            [
                "--model_name_or_path",
                str(encoder),
                "--synthetic_per_class",
                "2",
                "--max_steps",
                "1",
                "--output_dir",
                str(tmp_path / "ft"),
            ]
        )
    assert one_line(error).startswith("WORLD_SIZE=2: the launcher started 2 processes, but accelerate sees 1")
    with pytest.raises(UsageError) as error:
        linear_eval.main(
            ["--model_name_or_path", str(encoder), "--synthetic_per_class", "2", "--output_dir", str(tmp_path / "lin")]
        )
    assert "linear_eval.py runs in one process" in one_line(error)
    assert not (tmp_path / "lin").exists()


def documented_torchrun_command() -> str:
    """The CPU loopback torchrun command of docs/pretraining.md (its fenced lines, continuations joined)."""
    lines = (ROOT / "docs" / "pretraining.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ACCELERATE_USE_CPU=1 torchrun "))
    command = []
    for line in lines[start:]:
        command.append(line.strip().removesuffix("\\").strip())
        if not line.endswith("\\"):
            break
    return " ".join(command)


@pytest.mark.slow  # a two-process torchrun launch
def test_the_documented_torchrun_recipe_on_loopback_trains_as_one_run_of_two_processes(tmp_path):
    """docs/pretraining.md's `ACCELERATE_USE_CPU=1 torchrun --nnodes 2 --nproc_per_node 1 --node_rank R ...` run as
    written for R = 0 and 1 (a free port and a temporary output folder swapped in): both ranks join one run of 2
    processes (all_results.json, each rank's own state in the checkpoint), and the log holds each step once."""
    words = shlex.split(documented_torchrun_command())
    variables = {}
    while re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        name, value = words.pop(0).split("=", 1)
        variables[name] = value
    assert variables == {"ACCELERATE_USE_CPU": "1"} and words[0] == "torchrun", words
    port, output_dir = str(free_port()), tmp_path / "run"
    swapped = {"29500": port, "runs/pt_torchrun": str(output_dir)}
    words = [swapped.get(word, word) for word in words[1:]]
    assert port in words and str(output_dir) in words, "the recipe's port or output folder changed: update the test"
    env = {k: v for k, v in os.environ.items() if k not in ("ACCELERATE_USE_CPU", "WORLD_SIZE")}
    env.update(variables, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    logs = [tmp_path / f"rank{rank}.log" for rank in (0, 1)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                *["0" if w == "R" and rank == 0 else "1" if w == "R" else w for w in words],
            ],
            cwd=ROOT,
            env=env,
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for rank, log in enumerate(logs)
    ]
    deadline = time.monotonic() + 240
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    outputs = [log.read_text() for log in logs]
    assert [p.returncode for p in procs] == [0, 0], "\n-----\n".join(o[-2500:] for o in outputs)
    results = json.loads((output_dir / "all_results.json").read_text())
    assert results["num_processes"] == 2 and results["step"] == 3
    assert "2 process(es)" in outputs[0] and "1 process(es)" not in "".join(outputs)
    steps = [json.loads(line)["step"] for line in (output_dir / "log_history.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 3, steps  # one log: each step once
    for rank in (0, 1):  # each process saved its own random states into the one checkpoint
        assert (output_dir / "checkpoint-3" / f"random_states_{rank}.pkl").is_file(), rank


# ----------------------------------------------------------------------------------------------- a folder of one's own
def write_folder(root: Path, classes=("no", "yes"), per_class=4, seconds=0.5, seed=0) -> Path:
    rng = np.random.default_rng(seed)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            sf.write(
                root / name / f"{name}{i}.wav", (0.1 * rng.standard_normal(int(seconds * SR))).astype(np.float32), SR
            )
    return root


def test_an_audiofolder_with_one_class_is_refused_in_one_line(tmp_path):
    """`KeyError: 'label'` before: datasets gives a folder with one class sub-folder no label column at all."""
    import finetune
    import linear_eval

    folder = write_folder(tmp_path / "speech", classes=("yes",))
    encoder = save_tiny_encoder(tmp_path / "encoder")
    for main, script in ((finetune.main, "finetune"), (linear_eval.main, "linear_eval")):
        with pytest.raises(UsageError) as error:
            main(
                [
                    "--model_name_or_path",
                    str(encoder),
                    "--dataset",
                    "audiofolder",
                    "--data_root",
                    str(folder),
                    "--max_steps",
                    "1",
                    "--output_dir",
                    str(tmp_path / script),
                ]
            )
        assert one_line(error) == (
            f"{folder} holds one class, 'yes' (4 clips in {folder / 'yes'}): fine-tuning and linear evaluation need at "
            f"least two classes, one sub-folder of clips per class ({folder / '<class>' / '<clip>.wav'})"
        )
    from aasp_hf.data import load_downstream

    flat = tmp_path / "flat"
    flat.mkdir()
    for clip in (folder / "yes").iterdir():
        clip.rename(flat / clip.name)
    with pytest.raises(UsageError, match=r"holds no class sub-folders \(its 4 clips lie in it directly\)"):
        load_downstream("audiofolder", root=str(flat))


@pytest.fixture
def offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_a_wrong_model_path_is_one_line_saying_what_it_is_and_what_to_pass(tmp_path, monkeypatch, offline):
    """A misspelt local path (transformers: "Repo id must be in the form ..."), a pre-training run's own folder
    ("Unrecognized model ... model_type"), a file, and an unknown Hub id offline (a minute of retries, then a
    traceback): one line each, from the scripts themselves."""
    import finetune
    import linear_eval
    import pretrain

    run = tmp_path / "runs" / "pt"
    save_tiny_encoder(run / "encoder")
    (run / "log_history.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    cases = {
        "runs/pt/encodr": "runs/pt/encodr does not exist: did you mean runs/pt/encoder? Otherwise, pass a folder that "
        "save_pretrained wrote",
        str(run / "encodr"): f"{run / 'encodr'} does not exist: did you mean {run / 'encoder'}?",
        "runs/pt": "runs/pt is a pre-training run's folder, not a model folder: pass the encoder it exported, "
        "runs/pt/encoder",
        "runs/pt/encoder/config.json": "runs/pt/encoder/config.json is a file, not a model folder",
        "someone/aasp-base": "someone/aasp-base is not a local folder, nor a model in the Hub cache, and "
        "HF_HUB_OFFLINE is set: pass a folder that save_pretrained wrote",
    }
    for given, expected in cases.items():
        for main, script in ((linear_eval.main, "linear_eval"), (finetune.main, "finetune")):
            with pytest.raises(UsageError) as error:
                main(
                    [
                        "--model_name_or_path",
                        given,
                        "--synthetic_per_class",
                        "2",
                        "--max_steps",
                        "1",
                        "--output_dir",
                        str(tmp_path / script),
                    ]
                )
            assert one_line(error).startswith(expected), (script, str(error.value))
        with pytest.raises(UsageError) as error:  # pretrain.py --init_from loads through the same check
            pretrain.build_model(pretrain.ModelArguments(init_from=given))
        assert one_line(error).startswith(expected), ("pretrain --init_from", str(error.value))


def test_an_unknown_hub_id_fails_at_once_when_the_hub_cannot_be_reached(monkeypatch):
    """No network and HF_HUB_OFFLINE unset: the host name does not resolve, so the id is refused at once instead of
    after the download's retries (about 53 s here)."""
    import huggingface_hub

    from aasp_hf.utils.hub import check_model_path

    def no_network(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    def download(*args, **kwargs):
        raise AssertionError("the download was tried")

    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    start = time.monotonic()
    with pytest.raises(UsageError) as error:
        check_model_path("someone/aasp-base")
    assert time.monotonic() - start < 1
    assert one_line(error) == (
        "someone/aasp-base is not a local folder, nor a model in the Hub cache, and the Hub (huggingface.co) cannot be "
        "reached from here (Name or service not known): pass a folder that save_pretrained wrote, with its "
        "config.json, such as a pre-training run's encoder/, or download it where the Hub is reachable"
    )


def test_an_unknown_hub_id_offline_is_one_line_from_the_command_line(tmp_path):
    """linear_eval.py as a real process with HF_HUB_OFFLINE=1 in its environment: exit 2, one line."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "linear_eval.py"),
            "--model_name_or_path",
            "someone/aasp-base",
            "--synthetic_per_class",
            "2",
            "--output_dir",
            str(tmp_path / "lin"),
        ],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line == (
        "linear_eval.py: error: someone/aasp-base is not a local folder, nor a model in the Hub cache, "
        "and HF_HUB_OFFLINE is set: pass a folder that save_pretrained wrote, with its config.json, such "
        "as a pre-training run's encoder/, or unset HF_HUB_OFFLINE to download it"
    )


# ----------------------------------------------------------------------------------------------- the README's pipeline
PIPELINE_SENTENCE = (
    'After `import aasp_hf` in the same process, the plain\n`pipeline("audio-classification", '
    "model=folder)` works without any flag"
)
WITHOUT_IMPORT = (
    "Without that import (`aasp_hf` installed or not) transformers asks for `trust_remote_code=True`: "
    "a prompt in a terminal,\na `ValueError` elsewhere; import aasp_hf or pass trust_remote_code=True"
)


@pytest.mark.slow  # the README's sentence in a fresh interpreter
def test_the_readme_pipeline_sentence_as_written(tmp_path):
    """In a fresh process: after `import aasp_hf` the plain pipeline works (transformers' own class); without it,
    and with nothing on stdin, transformers refuses with a ValueError asking for trust_remote_code, and
    `trust_remote_code=True` builds the checkpoint's own pipeline class with the same scores."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert " ".join(PIPELINE_SENTENCE.split()) in readme and " ".join(WITHOUT_IMPORT.split()) in readme
    from test_hub_integration import tiny_classifier

    from aasp_hf import AaspFeatureExtractor

    folder = tmp_path / "classifier"
    tiny_classifier().save_pretrained(folder)
    AaspFeatureExtractor().save_pretrained(folder)
    script = """
        import json, sys
        import numpy as np
        {prelude}
        from transformers import pipeline
        audio = np.sin(np.linspace(0, 2000, 16000)).astype(np.float32)
        out = {{}}
        try:
            plain = pipeline("audio-classification", model={folder!r})
            out["plain"] = [type(plain).__module__ + "." + type(plain).__name__, plain(audio, top_k=3)]
        except ValueError as error:
            out["plain"] = ["ValueError", str(error)]
        {trusted}
        print("RESULT" + json.dumps(out))
    """
    trusted = (
        'remote = pipeline("audio-classification", model={folder!r}, trust_remote_code=True); '
        'out["trusted"] = [type(remote).__module__ + "." + type(remote).__name__, remote(audio, top_k=3)]'
    )
    results = {}
    for name, prelude, extra in (("with", "import aasp_hf", ""), ("without", "", trusted.format(folder=str(folder)))):
        env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / f"modules_{name}"), "HF_HUB_OFFLINE": "1"}
        code = "\n".join(
            line[8:] for line in script.format(prelude=prelude, folder=str(folder), trusted=extra).splitlines()
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results[name] = json.loads(done.stdout.split("RESULT", 1)[1])
    kind, scores = results["with"]["plain"]
    assert kind == "transformers.pipelines.audio_classification.AudioClassificationPipeline"
    kind, message = results["without"]["plain"]
    assert kind == "ValueError" and "trust_remote_code=True" in message
    kind, remote_scores = results["without"]["trusted"]
    assert kind.startswith("transformers_modules.") and kind.endswith(".AaspAudioClassificationPipeline")
    assert [s["label"] for s in remote_scores] == [s["label"] for s in scores]
    np.testing.assert_allclose([s["score"] for s in remote_scores], [s["score"] for s in scores], atol=1e-6)


# ---------------------------------------------------------------------------------------------- undecodable files
def test_an_empty_or_header_only_wav_is_named_once_per_run_in_one_short_line(tmp_path, caplog):
    """An empty WAV (0 bytes) and a header-only one (8 kHz: torchcodec's C++ error before) in a two-class folder:
    fine-tuning (evaluating at every step) and linear evaluation each name every bad file once, as
    `skipped a clip that failed to decode: <path>: <short reason>`, the line pre-training writes."""
    import finetune
    import linear_eval

    encoder = save_tiny_encoder(tmp_path / "encoder")

    def bad_folder(where: Path) -> tuple[list[str], dict]:
        """A folder of two classes with an empty and a header-only WAV (a folder per script: a file is named once
        per process); the scripts' common arguments and {path: reason} of what they must name."""
        folder = write_folder(where, per_class=5)
        empty, header_only = folder / "no" / "empty.wav", folder / "yes" / "header_only.wav"
        empty.write_bytes(b"")
        sf.write(header_only, np.zeros(0, dtype=np.float32), 8000)
        return (
            [
                "--model_name_or_path",
                str(encoder),
                "--dataset",
                "audiofolder",
                "--data_root",
                str(folder),
                "--clip_seconds",
                "0.5",
            ],
            {str(empty): "an empty file (0 bytes)", str(header_only): "a header and no audio samples"},
        )

    runs = {
        "finetune": lambda common: finetune.main(
            [
                *common,
                "--max_steps",
                "3",
                "--eval_steps",
                "1",
                "--warmup_steps",
                "0",
                "--per_device_train_batch_size",
                "4",
                "--output_dir",
                str(tmp_path / "ft"),
            ]
        ),
        "linear_eval": lambda common: linear_eval.main(
            [*common, "--max_steps", "2", "--eval_steps", "1", "--seeds", "0", "--output_dir", str(tmp_path / "lin")]
        ),
    }
    for script, run in runs.items():
        common, expected = bad_folder(tmp_path / script / "speech")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            run(common)
        named = [
            r.getMessage()
            for r in caplog.records
            if "failed to decode" in r.getMessage() and "were skipped" not in r.getMessage()
        ]
        lines = {}
        for message in named:
            match = re.fullmatch(r"skipped a clip that failed to decode: (.+?): (.+)", message)
            assert match, (script, message)
            lines.setdefault(match.group(1), []).append(match.group(2))
        assert lines == {path: [reason] for path, reason in expected.items()}, (script, named)
        assert not any(".cpp" in r.getMessage() for r in caplog.records), script
