"""Inference needs only the core dependencies of pyproject.toml; training, evaluation, plots, benchmarks, export and
tests are extras.

`pip install aasp_hf` without extras must be enough to load an exported encoder with `AutoModel.from_pretrained`, run
its feature extractor and forward, save it again and classify a file with the pipeline. Rather than build a second
venv (torch alone is gigabytes), a fresh interpreter is started in which every package that only the extras bring is
unimportable: the packages are derived from pyproject.toml and the installed metadata, so a new extra is blocked
without editing this file, and a package that a core dependency needs itself stays importable.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import save_tiny_encoder


ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# what inference needs (see the comment on `dependencies` in pyproject.toml): moving a package between core and an
# extra is a decision, made here as well
CORE = {"torch", "torchcodec", "transformers", "safetensors", "huggingface-hub", "numpy", "pyyaml"}


def requirement_closure(requirements) -> set[str]:
    """Canonical names of the installed distributions that `requirements` need, their dependencies included
    (no extras of theirs; environment markers evaluated here; our own package's self-references skipped)."""
    found, todo = set(), [Requirement(r) if isinstance(r, str) else r for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found or name == canonicalize_name(PROJECT["name"]):
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            needs = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:  # not installed here (another platform's dependency)
            continue
        found.add(name)
        todo += [Requirement(r) for r in needs]
    return found


def extras_only() -> tuple[list[str], list[str]]:
    """(distributions, top-level modules) that only the extras install: the distributions the extras need, their
    dependencies included, less those the core dependencies need; a module is blocked when every distribution that
    provides it is."""
    blocked = requirement_closure(
        r for rs in PROJECT["optional-dependencies"].values() for r in rs
    ) - requirement_closure(PROJECT["dependencies"])
    modules = [
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if module.isidentifier() and all(canonicalize_name(d) in blocked for d in dists)
    ]
    return sorted(blocked), sorted(modules)


# Prepended to the script run in the fresh interpreter: sys.path's finder (importlib's PathFinder) is replaced by one
# that neither finds the blocked modules nor lists the blocked distributions' metadata, so `import datasets` raises
# ModuleNotFoundError, importlib.util.find_spec answers None and importlib.metadata.version raises
# PackageNotFoundError: what transformers and torch see where a package is not installed, as they probe both.
CORE_ONLY = """
import importlib.machinery
import re
import sys


class CoreOnlyFinder(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in BLOCKED_MODULES:
            return None
        return super().find_spec(fullname, path, target)

    @classmethod
    def find_distributions(cls, *args, **kwargs):
        return (dist for dist in super().find_distributions(*args, **kwargs)
                if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() not in BLOCKED_DISTRIBUTIONS)


# what the interpreter imported before this first line, at start-up, is no import of the code under test: a `.pth`
# file in site-packages runs in every interpreter (matplotlib 3.7.0's mpl_toolkits namespace .pth imports
# mpl_toolkits), so it is left out of the modules that must not be imported
AT_STARTUP = {name for name in BLOCKED_MODULES if name in sys.modules}
sys.meta_path[:] = [CoreOnlyFinder if finder is importlib.machinery.PathFinder else finder for finder in sys.meta_path]
"""


def test_core_dependencies_are_what_inference_needs_and_every_declared_package_is_pinned():
    assert {canonicalize_name(Requirement(r).name) for r in PROJECT["dependencies"]} == CORE
    extras = PROJECT["optional-dependencies"]
    assert {"data", "train", "eval", "plots", "bench", "export", "all", "test"} <= set(extras)
    # the benchmark suites' extras are installed by their make targets in venvs of their own, not with `all`
    suites = ("xares", "mteb")
    assert extras["all"] == [f"aasp_hf[{','.join(n for n in extras if n not in ('all', 'test', *suites))}]"]
    pins = {
        canonicalize_name(Requirement(line).name): line
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    declared = {
        canonicalize_name(Requirement(r).name) for rs in [PROJECT["dependencies"], *extras.values()] for r in rs
    }
    declared.discard(canonicalize_name(PROJECT["name"]))
    assert {name for name in declared if "==" not in pins.get(name, "")} == set()


def test_an_exported_encoder_loads_runs_and_classifies_with_the_core_dependencies_only(tmp_path):
    distributions, modules = extras_only()
    assert {"datasets", "accelerate", "sklearn", "matplotlib", "tensorboard", "soundfile", "torchaudio"} <= set(modules)
    encoder = save_tiny_encoder(tmp_path / "encoder")
    script = f"BLOCKED_MODULES = {set(modules)!r}\nBLOCKED_DISTRIBUTIONS = {set(distributions)!r}\n" + CORE_ONLY
    script += textwrap.dedent(f"""
        import importlib.metadata
        import importlib.util

        try:
            import datasets
        except ImportError:
            pass
        else:
            raise AssertionError("the blocker is not active")
        assert importlib.util.find_spec("sklearn") is None
        try:
            importlib.metadata.version("accelerate")
        except importlib.metadata.PackageNotFoundError:
            pass
        else:
            raise AssertionError("the blocked distributions' metadata is visible")

        import json
        import wave

        import numpy as np
        import torch
        from transformers import AutoFeatureExtractor, AutoModel, pipeline

        import aasp_hf

        encoder, work = {str(encoder)!r}, {str(tmp_path)!r}
        model = AutoModel.from_pretrained(encoder).eval()
        feature_extractor = AutoFeatureExtractor.from_pretrained(encoder)
        sine = (0.5 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)).astype(np.float32)  # 1 s at 16 kHz
        inputs = feature_extractor([sine], sampling_rate=16000, return_tensors="pt")
        with torch.no_grad():
            tokens = model(**inputs).last_hidden_state
        model.save_pretrained(work + "/copy")
        reloaded = AutoModel.from_pretrained(work + "/copy").eval()
        with torch.no_grad():
            same = torch.equal(reloaded(**inputs).last_hidden_state, tokens)

        classifier = aasp_hf.AaspForAudioClassification.from_pretrained(encoder, num_labels=2)
        classifier.save_pretrained(work + "/classifier")
        feature_extractor.save_pretrained(work + "/classifier")
        with wave.open(work + "/clip.wav", "wb") as f:  # 16-bit mono PCM, written by the standard library
            f.setnchannels(1), f.setsampwidth(2), f.setframerate(16000)
            f.writeframes((sine * 32767).astype("<i2").tobytes())
        classify = pipeline("audio-classification", model=work + "/classifier",
                            pipeline_class=aasp_hf.AaspAudioClassificationPipeline)
        scores = classify(work + "/clip.wav")
        leaked = sorted(name for name in BLOCKED_MODULES - AT_STARTUP if name in sys.modules)
        print(json.dumps({{"inputs": list(inputs["input_values"].shape), "tokens": list(tokens.shape),
                          "same": same, "labels": len(scores), "leaked": leaked}}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # 1 s -> 98 frames, padded to 112 (a multiple of 16) × 128 mel bins; tokens: CLS + (112/16) × (128/16) patches
    assert result == {"inputs": [1, 112, 128], "tokens": [1, 1 + 7 * 8, 32], "same": True, "labels": 2, "leaked": []}
