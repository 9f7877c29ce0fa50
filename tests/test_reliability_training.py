"""Training faults and untrusted files: SIGKILL of examples/pretrain.py mid-checkpoint and mid-step then --resume,
NaN/inf losses, a config with a new head, pickle-free weights, and remote code without network or
dynamic code. The matrix of what was tried is in docs/reliability.md."""

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import SAME_THREADS, TINY_PRETRAINING_MODEL, assert_states_close, pretrain_argv, tiny_config_kwargs
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
import pretrain

from aasp_hf import AaspConfig, AaspForAudioClassification, AaspForPreTraining, AaspModel
from aasp_hf.utils.hub import CODE_FILES
from aasp_hf.training import latest_checkpoint
from aasp_hf.training.checkpointing import HASH, checkpoint_problem, file_hash

MODEL = {**TINY_PRETRAINING_MODEL, "hidden_dropout_prob": 0.1}
MAX_STEPS = 8


def argv(output_dir, **overrides):
    """conftest.py's pre-training command on MODEL: 8 steps, a checkpoint every step (all kept), seed 5."""
    options = {"max_steps": MAX_STEPS, "save_steps": 1, "save_total_limit": 0, "seed": 5, **overrides}
    return pretrain_argv(output_dir, model=MODEL, **options)


def logged_steps(output_dir):
    path = Path(output_dir) / "log_history.jsonl"
    if not path.is_file():
        return []
    # a line being written may be incomplete: keep the complete ones
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.endswith("}")]


def tmp_dirs(output_dir):
    return sorted(p.name for p in Path(output_dir).glob("checkpoint-*.tmp"))


def latest_name(output_dir):
    pointer = Path(output_dir) / "latest"
    return pointer.read_text().strip() if pointer.is_file() else None


def start_run(output_dir, **overrides):
    output_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **SAME_THREADS, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = open(output_dir.parent / f"{output_dir.name}.log", "w")
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "pretrain.py"), *argv(output_dir, **overrides)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def freeze_when(proc, condition, confirm, timeout=120.0):
    """Poll (0.2 ms) until `condition()`; then SIGSTOP the process from outside and check `confirm()` on the frozen
    state. A miss (the moment passed before the stop landed) lets it go on and waits for the next occurrence.
    Returns True once frozen at a confirmed moment; the caller then SIGKILLs it, so what the kill leaves behind is
    exactly the frozen state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if condition():
            os.kill(proc.pid, signal.SIGSTOP)
            if confirm():
                return True
            os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.0002)
    return False


def sigkill(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: MAX_STEPS steps in one go; its final full training state (student, teacher, predictor)."""
    out = tmp_path_factory.mktemp("reference")
    results = pretrain.main(argv(out))
    assert results["step"] == MAX_STEPS and results["nonfinite_steps"] == 0
    return load_file(out / f"checkpoint-{MAX_STEPS}" / "model.safetensors")


def assert_same_state(reference_state, output_dir):
    state = load_file(Path(output_dir) / f"checkpoint-{MAX_STEPS}" / "model.safetensors")
    assert_states_close(state, reference_state)  # two runs' computations: close, not bit-exact
    exported = load_file(Path(output_dir) / "encoder" / "model.safetensors")  # the shared encoder is the student
    assert all(torch.equal(v, state[f"aasp.{k}"]) for k, v in exported.items())  # a copy of this run's state


def test_sigkill_during_a_checkpoint_write_then_resume_matches_the_uninterrupted_run(tmp_path, reference):
    out = tmp_path / "run"
    proc = start_run(out)
    try:
        # kill while checkpoint-k.tmp (k >= 2) is being written and before it is renamed to checkpoint-k
        caught = freeze_when(
            proc,
            condition=lambda: any(int(re.findall(r"\d+", n)[0]) >= 2 for n in tmp_dirs(out)),
            confirm=lambda: bool(tmp_dirs(out)) and not (out / tmp_dirs(out)[0].removesuffix(".tmp")).exists(),
        )
        assert caught, "never caught the run inside a checkpoint write"
    finally:
        sigkill(proc)
    half_written = tmp_dirs(out)[0]
    k = int(re.findall(r"\d+", half_written)[0])
    # the pointer and the resume logic name the previous, complete checkpoint; the .tmp one is never read
    assert latest_name(out) == f"checkpoint-{k - 1}"
    assert latest_checkpoint(out).name == f"checkpoint-{k - 1}"
    results = pretrain.main(argv(out, resume=True))
    assert results["start_step"] == k - 1 and results["step"] == MAX_STEPS
    assert tmp_dirs(out) == []  # the leftover was cleared when step k was saved again
    assert_same_state(reference, out)


def test_sigkill_during_a_step_then_resume_replays_the_lost_steps_exactly(tmp_path, reference):
    out = tmp_path / "run"
    proc = start_run(out, save_steps=2)  # checkpoints at 2, 4, 6, 8
    try:
        # step 3 is logged (no checkpoint at 3): the process is now computing step 4
        caught = freeze_when(
            proc,
            condition=lambda: 3 in logged_steps(out),
            confirm=lambda: logged_steps(out)[-1] == 3 and tmp_dirs(out) == [] and latest_name(out) == "checkpoint-2",
        )
        assert caught, "never caught the run between steps 3 and 4"
    finally:
        sigkill(proc)
    assert not (out / "checkpoint-4").exists() and not (out / "encoder").exists()
    results = pretrain.main(argv(out, resume=True, save_steps=2))
    assert results["start_step"] == 2 and results["step"] == MAX_STEPS  # step 3 is lost and recomputed
    assert_same_state(reference, out)


# ----------------------------------------------------------------------------------------------- NaN / inf loss
def poison_losses(monkeypatch, bad_calls, value=float("nan")):
    """Make AaspForPreTraining return a non-finite loss on the listed forward calls (0-based)."""
    original = AaspForPreTraining.forward
    calls = {"n": 0}

    def forward(self, *args, **kwargs):
        outputs = original(self, *args, **kwargs)
        if calls["n"] in bad_calls:
            outputs.loss = outputs.loss * value
        calls["n"] += 1
        return outputs

    monkeypatch.setattr(AaspForPreTraining, "forward", forward)


def test_a_nonfinite_loss_skips_the_update_and_is_counted(tmp_path, monkeypatch):
    poison_losses(monkeypatch, bad_calls={1, 2}, value=float("inf"))  # steps 2 and 3
    results = pretrain.main(argv(tmp_path, max_steps=4))
    assert results["step"] == 4 and results["nonfinite_steps"] == 2
    assert json.loads((tmp_path / "checkpoint-3" / "trainer_state.json").read_text())["nonfinite_steps"] == 2
    states = {s: load_file(tmp_path / f"checkpoint-{s}" / "model.safetensors") for s in range(1, 5)}
    for skipped in (2, 3):  # student, teacher and predictor unchanged by a skipped step
        assert all(torch.equal(states[skipped][k], states[1][k]) for k in states[1])
    assert not torch.equal(states[4]["aasp.cls_token"], states[3]["aasp.cls_token"])  # a good step moves the student
    assert all(torch.isfinite(v).all() for v in states[4].values())
    logs = [json.loads(line) for line in (tmp_path / "log_history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logs] == [1, 4]  # a step with nothing good to report logs nothing
    assert all(torch.isfinite(torch.tensor(r["train/loss"])) for r in logs)
    assert logs[-1]["train/nonfinite_steps"] == 2


def test_too_many_nonfinite_losses_stop_the_run_with_a_clear_message(tmp_path, monkeypatch):
    poison_losses(monkeypatch, bad_calls=set(range(100)))
    with pytest.raises(RuntimeError, match=r"3 steps had a non-finite.*--max_nonfinite_steps=2.*--resume"):
        pretrain.main(argv(tmp_path, max_nonfinite_steps=2))
    # stopped at the third bad step; the two skipped steps before it were checkpointed with untouched weights
    assert latest_checkpoint(tmp_path).name == "checkpoint-2"
    from accelerate.utils import set_seed

    set_seed(5)
    initial = AaspForPreTraining(AaspConfig(**MODEL)).state_dict()
    saved = load_file(tmp_path / "checkpoint-2" / "model.safetensors")
    assert all(torch.equal(saved[k], initial[k]) for k in saved)


# ----------------------------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def saved_encoder(tmp_path_factory):
    path = tmp_path_factory.mktemp("encoder")
    torch.manual_seed(0)
    AaspModel(AaspConfig(**tiny_config_kwargs())).save_pretrained(path)
    return path


def test_a_matching_config_with_a_new_head_still_loads(saved_encoder):
    config = AaspConfig(**tiny_config_kwargs(num_labels=3, classifier_pooling="mean", hidden_dropout_prob=0.1))
    model = AaspForAudioClassification.from_pretrained(saved_encoder, config=config)
    reference = load_file(saved_encoder / "model.safetensors")
    assert torch.equal(model.aasp.cls_token, reference["cls_token"]) and model.config.num_labels == 3


def test_weights_are_saved_as_safetensors_only(saved_encoder, tmp_path):
    suffixes = [p.suffix for p in saved_encoder.iterdir()]
    assert suffixes.count(".safetensors") == 1 and set(suffixes) <= {".json", ".safetensors", ".py"}  # .py: remote code
    model = AaspForPreTraining(AaspConfig(**tiny_config_kwargs()))
    model.save_pretrained(tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt")]


class _Payload:
    """Unpickling this runs os.mkdir(marker): what a malicious `.bin` would do with weights_only=False."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_pickled_bin_from_elsewhere_is_read_with_weights_only(saved_encoder, tmp_path):
    marker = tmp_path / "code_ran"
    folder = tmp_path / "untrusted"
    folder.mkdir()
    (folder / "config.json").write_text((saved_encoder / "config.json").read_text())
    state = {k: v for k, v in load_file(saved_encoder / "model.safetensors").items()}
    torch.save({**state, "payload": _Payload(str(marker))}, folder / "pytorch_model.bin")
    with pytest.raises(Exception, match=r"(?i)weights_only|unpickl|unsupported global"):
        AaspModel.from_pretrained(folder)
    assert not marker.exists()
    # our own training-side loader too (the per-process state of a checkpoint)
    from aasp_hf.training.checkpointing import load_process_state

    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    torch.save({"collator": _Payload(str(marker))}, checkpoint / "process_state_0.pt")
    with pytest.raises(Exception, match=r"(?i)weights_only|unpickl|unsupported global"):
        load_process_state(checkpoint, 0)
    assert not marker.exists()
    # ... while a plain state (tensors, numbers, numpy bit-generator dicts) still loads
    torch.save(
        {"collator": {"generator": torch.Generator().get_state()}, "rng": {"state": {"key": 2**70}}},
        checkpoint / "process_state_0.pt",
    )
    assert load_process_state(checkpoint, 0)["rng"]["state"]["key"] == 2**70


@pytest.mark.parametrize("victim", ["optimizer.bin", "random_states_0.pkl"])
def test_resume_refuses_a_pickle_payload_in_the_accelerate_files_of_a_checkpoint(tmp_path, victim):
    """accelerate writes the optimizer and RNG states as pickles; --resume reads them through
    accelerate.utils.load, i.e. torch.load(weights_only=True) with numpy's safe globals: a payload never runs."""
    out = tmp_path / "run"
    pretrain.main(argv(out, max_steps=2))
    checkpoint = out / "checkpoint-2"
    assert (checkpoint / victim).is_file(), sorted(p.name for p in checkpoint.iterdir())
    marker = tmp_path / "code_ran"
    torch.save({"state": _Payload(str(marker))}, checkpoint / victim)
    # the manifest's hash no longer matches: --resume would pass the checkpoint over; a tamperer rewrites it too
    assert checkpoint_problem(checkpoint).startswith(f"{victim} ")  # "has n bytes, m were written" or "differs"
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    manifest[victim] = {"size": (checkpoint / victim).stat().st_size, HASH: file_hash(checkpoint / victim)}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(Exception, match=r"(?i)weights_only|unpickl|unsupported global"):
        pretrain.main(argv(out, max_steps=4, resume=True, resume_allow_changes="max_steps"))
    assert not marker.exists()


REMOTE_CODE = list(CODE_FILES)
FORBIDDEN_MODULES = {
    "requests",
    "urllib",
    "urllib3",
    "http",
    "socket",
    "subprocess",
    "importlib",
    "httpx",
    "aiohttp",
    "ftplib",
    "smtplib",
    "pickle",
    "marshal",
    "ctypes",
    "multiprocessing",
    "shutil",
    "huggingface_hub",
}
FORBIDDEN_BUILTINS = {"exec", "eval", "compile", "__import__", "open", "breakpoint", "input"}  # `f(...)`
FORBIDDEN_METHODS = {"system", "popen", "urlopen", "import_module", "load_source"}  # `x.f(...)` (`.eval()` is fine)


def _remote_files():
    """The files transformers ships as remote code: the named ones and whatever they import relatively."""
    package = ROOT / "aasp_hf"
    found = [f for f in REMOTE_CODE if (package / f).is_file()]
    todo = list(found)
    while todo:
        tree = ast.parse((package / todo.pop()).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                name = node.module.split(".")[0] + ".py"
                if name not in found:
                    found.append(name)
                    todo.append(name)
    return found


@pytest.mark.parametrize("name", _remote_files())
def test_remote_code_has_no_network_access_or_dynamic_code(name):
    source = (ROOT / "aasp_hf" / name).read_text()
    tree = ast.parse(source)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.module == "huggingface_hub.dataclasses":  # `@strict` alone: the config's type checks, as
                continue  # transformers' own configs have them; nothing else of huggingface_hub is imported
            if node.level == 0:
                imported.add(node.module.split(".")[0])
            else:  # relative imports stay inside the shipped folder
                assert (ROOT / "aasp_hf" / (node.module.split(".")[0] + ".py")).is_file(), node.module
        elif isinstance(node, ast.Call):
            func = node.func
            if _opens_for_reading(node):  # the pipeline reads the audio file its caller names; nothing writes
                continue
            assert not (isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS), f"{name}:{node.lineno}"
            assert not (isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_METHODS), f"{name}:{node.lineno}"
    # difflib (the closest valid key in an error) and inspect (a signature's parameter names) read, never run, code;
    # io (in-memory bytes) and torchcodec (the audio decoder datasets uses) decode the clip the pipeline is given;
    # os for os.path alone (whether a name given to from_pretrained is a local folder, so nothing is fetched for it);
    # types for SimpleNamespace (the pipeline asks transformers' class how it scores a stand-in multi-label config)
    # torchaudio: the pipeline resamples an array given at another rate with it, imported where it is needed, as
    # transformers' own audio-classification pipeline does
    assert imported <= {
        "torch",
        "transformers",
        "numpy",
        "math",
        "copy",
        "dataclasses",
        "typing",
        "functools",
        "warnings",
        "collections",
        "itertools",
        "__future__",
        "enum",
        "difflib",
        "inspect",
        "io",
        "torchcodec",
        "torchaudio",
        "os",
        "types",
    }, imported
    assert not imported & FORBIDDEN_MODULES
    # and the text itself: no dynamic code or network names hidden in strings or attribute chains
    # (the one URL allowed besides arxiv and GitHub is the Apache licence's, in the licence header)
    for pattern in (
        r"(?<![\w.])exec\(",
        r"(?<![\w.])eval\(",
        r"__import__",
        r"importlib",
        r"\brequests\b",
        r"urllib",
        r"\bsocket\b",
        r"subprocess",
        r"\bos\.(?!path\.)",
        r"https?://(?!arxiv\.org|github\.com|www\.apache\.org/licenses/)",
    ):
        hits = [i + 1 for i, line in enumerate(source.splitlines()) if re.search(pattern, line)]
        assert hits == [], f"{name} lines {hits} match {pattern!r}"


def _opens_for_reading(call) -> bool:
    """`open(x, "rb")`: a call of the builtin open whose mode is the literal "rb"."""
    return (
        isinstance(call.func, ast.Name)
        and call.func.id == "open"
        and len(call.args) == 2
        and not call.keywords
        and isinstance(call.args[1], ast.Constant)
        and call.args[1].value == "rb"
    )


def test_the_remote_code_check_catches_a_forbidden_call(tmp_path, monkeypatch):
    """The scan above is not vacuous: a file with `eval` or `import socket` is rejected."""
    fake = tmp_path / "aasp_hf"
    fake.mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    for bad in (
        "import socket\n",
        "x = eval('1')\n",
        "from urllib import request\n",
        "m = __import__('os')\n",
        "import importlib\n",
        "torch.hub.urlopen('x')\n",
        "open(path, 'wb')\n",
        "open(path)\n",
        "open(path, mode='rb')\n",
        "import os\nos.remove(path)\n",
    ):
        (fake / "modeling_aasp.py").write_text(bad)
        with pytest.raises(AssertionError):
            test_remote_code_has_no_network_access_or_dynamic_code("modeling_aasp.py")
