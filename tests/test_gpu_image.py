"""The GPU machine's image (docs/gpus.md, "The GPU acceptance check") has torch, transformers, accelerate and the like
but no `datasets`, `soundfile`, `torchcodec` or `evaluate`, and nothing can be installed there from a registry: the
acceptance check (benchmarks/gpu_acceptance.py) and what it runs there (the CUDA-only tests' file, examples/pretrain.py
--plan from synthetic clips, the attention check) must import none of them. `make test-device-image` runs the whole
check where they are not installed; this is its cheap guard in the suite."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_IN_THE_IMAGE = ("datasets", "soundfile", "torchcodec", "evaluate")


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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), str(ROOT)]), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "imports-ok" in done.stdout, (done.stdout[-2000:], done.stderr[-3000:])
