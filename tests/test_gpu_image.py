"""The GPU machine's image (docs/gpus.md, "The GPU acceptance check") has torch, transformers, accelerate and the like
but no `datasets`, `soundfile`, `torchcodec` or `evaluate`, and nothing can be installed there from a registry: the
acceptance check (benchmarks/gpu_acceptance.py) and what it runs there (the CUDA-only tests' file, examples/pretrain.py
--plan from synthetic clips, the attention check) must import none of them. `make test-device-image` runs the whole
check where they are not installed; this is its cheap guard in the suite."""

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from aasp_hf.utils.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
NOT_IN_THE_IMAGE = ("datasets", "soundfile", "torchcodec", "evaluate")


@pytest.mark.slow  # a fresh interpreter importing the whole check
def test_the_acceptance_check_imports_nothing_the_gpu_image_lacks(tmp_path):
    """In a fresh interpreter where importing any of NOT_IN_THE_IMAGE raises ImportError (transformers then finds them
    "not installed", as it does there): the check's module, `pretrain`, pytest's collection of the CUDA-only tests,
    pretrain.py's --plan with its data path timed from synthetic clips (the acceptance run's data source), and the
    attention check of the dry run."""
    script = f"""
        import sys
        for name in {NOT_IN_THE_IMAGE!r}:
            sys.modules[name] = None  # `import name` now raises ImportError; importlib.util.find_spec gives None

        import importlib.util

        import pytest
        import torch

        spec = importlib.util.spec_from_file_location("gpu_acceptance", "benchmarks/gpu_acceptance.py")
        acceptance = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(acceptance)
        import pretrain

        files = acceptance.gpu_test_files()
        assert "tests/test_feature_extraction.py" in files, files
        code = pytest.main(["--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files])
        assert code == 0, f"collecting the CUDA-only tests: pytest exit {{code}}"
        plan = pretrain.main(["--config", "examples/configs/pretrain_tiny_cpu.json", "--plan", "--synthetic_clips", "8",
                              "--synthetic_seconds", "1", "--plan_data_clips", "4", "--per_device_train_batch_size",
                              "4", "--output_dir", {str(tmp_path / "plan")!r}])
        assert plan["data"]["clips"] >= 4, plan.keys()  # the data path was timed, from the synthetic clips
        attention = acceptance.attention_check(True, torch.device("cpu"), repeats=1)
        assert set(attention["implementations"]) == {{"eager", "sdpa"}}, attention
        loaded = [name for name in {NOT_IN_THE_IMAGE!r} if sys.modules.get(name) is not None]
        assert not loaded, loaded
        print("imports-ok")
        """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), str(ROOT)]),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and "imports-ok" in done.stdout, (done.stdout[-2000:], done.stderr[-3000:])


def _acceptance():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", ROOT / "benchmarks" / "gpu_acceptance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _assert_ends(pid: int):
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_each_step_of_the_check_stops_at_its_time_limit(tmp_path):
    """A command past its limit is killed with the processes it started (torch.compile's and the DataLoader's workers
    would otherwise run on and hold the GPU) and reported as "timeout", and so when the check itself is ended with
    SIGTERM (`stop`: an outer `timeout`); the in-process attention step is stopped by `within`; --time_limits takes
    step=seconds pairs and refuses anything else in one line."""
    acceptance = _acceptance()
    marker = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
        f"time.sleep(120)']); open({str(marker)!r}, 'w').write(str(child.pid)); time.sleep(120)"
    )
    started = time.perf_counter()
    result = acceptance.run_command([sys.executable, "-c", script], 5)
    assert result["returncode"] == "timeout" and "timed out after 5 s (its time limit)" in result["output"]
    assert time.perf_counter() - started < 60 and acceptance.finished(result).startswith("timed out after ")
    _assert_ends(int(marker.read_text()))
    assert acceptance.run_command([sys.executable, "-c", "print('done')"], 60)["returncode"] == 0
    with pytest.raises(TimeoutError, match="timed out after 0.5 s"):
        acceptance.within(0.5, time.sleep, 30)
    assert acceptance.within(5, sum, [1, 2]) == 3
    # an outer `timeout` (SIGTERM to the check alone): `stop` ends the command running then, with its processes
    marker.unlink()
    worker = threading.Thread(target=acceptance.run_command, args=([sys.executable, "-c", script], 600))
    worker.start()
    deadline = time.monotonic() + 60
    while not (marker.is_file() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(SystemExit) as exited:
        acceptance.stop(signal.SIGTERM, None)
    assert exited.value.code == 128 + signal.SIGTERM
    worker.join(30)
    assert not worker.is_alive() and not acceptance.RUNNING
    _assert_ends(int(marker.read_text()))
    limits = acceptance.time_limits("aape=240, spe=200", acceptance.LIMITS)
    assert limits == {**acceptance.LIMITS, "aape": 240.0, "spe": 200.0}
    for wrong in ("aape=0", "compile=30", "aape=soon", "aape"):
        with pytest.raises(UsageError, match="--time_limits .*: give step=seconds pairs, seconds > 0, for the steps"):
            acceptance.time_limits(wrong, acceptance.LIMITS)
