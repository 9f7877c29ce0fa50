"""Lays out transformers' own common test mixins for `tests/test_transformers_common.py`.

The mixins every model merged into transformers must pass (`ModelTesterMixin`, `ConfigTester`,
`SequenceFeatureExtractionTestMixin`) ship in the pinned transformers release's source distribution, under its
`tests/` folder. Nothing of them is copied into this repository: `make setup` runs this script, which downloads the
release's sdist from PyPI with pip (the version pinned in constraints.txt) and unpacks its top-level `tests/*.py`,
unchanged, into `.venv/transformers-tests/transformers_release_tests/` (a package, so their relative imports work);
pytest finds it through pyproject's `pythonpath`.

The sdist leaves out three of the sub-folders those files import from. Each is written here as the smallest module
that lets the top-level files import, and what that leaves untested is said where it matters:
- `exporters/test_export.py`: `ExportTesterMixin`, the base class of `ModelTesterMixin`, drives transformers'
  exporters (torch.export / ONNX / ExecuTorch / OpenVINO / TensorRT backends). Its file is not in the sdist, so an
  empty mixin stands in and those tests do not run here; our ONNX export is tested by tests/test_export.py.
- `generation/test_utils.py`: `GenerationTesterMixin`, only checked with `issubclass` by the common tests (an audio
  encoder cannot generate, so our testers never inherit it).
- `utils/test_configuration_utils.py`: `config_common_kwargs`, every common `PreTrainedConfig` argument with a value
  other than its default (the config tester checks that each is accepted and kept): our own table below, of the
  public attributes of transformers 5's `PreTrainedConfig()` (tests/test_transformers_common.py checks that it
  names every one of them, so it cannot fall behind the pinned release).

Usage: `python tests/transformers_release.py` (idempotent: a finished layout for the pinned version is kept).
`--installed` lays out the release installed next to the interpreter that runs it instead of the pinned one, and
`--target` puts it in another folder: `make test-newest` runs `.venv-newest/bin/python tests/transformers_release.py
--installed --target .venv-newest/transformers-tests` and points pytest's pythonpath there.
"""

import argparse
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / ".venv" / "transformers-tests"
PACKAGE = "transformers_release_tests"

STAND_INS = {
    "__init__.py": '"""transformers\' own test mixins, unpacked from a release\'s sdist (tests/transformers_release.py)."""\n',
    "exporters/__init__.py": "",
    "exporters/test_export.py": (
        '"""Stand-in: the sdist does not ship transformers\' exporter tests (see tests/transformers_release.py)."""\n\n\n'
        "class ExportTesterMixin:\n    pass\n"
    ),
    "generation/__init__.py": "",
    "generation/test_utils.py": (
        '"""Stand-in: only checked with issubclass; an audio encoder does not generate."""\n\n\n'
        "class GenerationTesterMixin:\n    pass\n"
    ),
    "utils/__init__.py": "",
    "utils/test_configuration_utils.py": (
        '"""Stand-in: every public argument of transformers 5\'s PreTrainedConfig with a non-default value."""\n\n'
        "config_common_kwargs = {\n"
        '    "return_dict": False,\n'
        '    "output_hidden_states": True,\n'
        '    "output_attentions": True,\n'
        '    "dtype": "float16",\n'
        '    "chunk_size_feed_forward": 5,\n'
        '    "architectures": ["AaspModel"],\n'
        '    "id2label": {0: "label"},\n'
        '    "label2id": {"label": "0"},\n'
        '    "problem_type": "regression",\n'
        "}\n"
    ),
}


def pinned_version() -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.startswith("transformers=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit("constraints.txt pins no transformers version")


def installed_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(f"--installed: transformers is not installed for {sys.executable}; install it first") from None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Unpack transformers' common test mixins from its release's sdist.")
    parser.add_argument(
        "--installed",
        action="store_true",
        help="the transformers release installed for this interpreter, not the version constraints.txt "
        "pins (make test-newest)",
    )
    parser.add_argument(
        "--target",
        type=Path,
        default=TARGET,
        help="the folder to unpack into (default .venv/transformers-tests); pytest's pythonpath must name it",
    )
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    version = installed_version() if args.installed else pinned_version()
    target = args.target.resolve()
    package = target / PACKAGE
    stamp = target / f".done-{version}"
    if stamp.exists():
        return
    if target.is_dir() and any(target.iterdir()) and not package.is_dir():  # never empty a folder that is not ours
        raise SystemExit(f"--target {target} holds other files: name a new folder or one this script laid out")
    shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"transformers=={version}",
                "-d",
                download,
            ],
            check=True,
        )
        (sdist,) = Path(download).glob("transformers-*.tar.gz")
        prefix = f"transformers-{version}/tests/"
        package.mkdir(parents=True)
        with tarfile.open(sdist) as archive:
            for member in archive.getmembers():
                name = member.name.removeprefix(prefix)
                if member.isfile() and member.name.startswith(prefix) and "/" not in name and name.endswith(".py"):
                    (package / name).write_bytes(archive.extractfile(member).read())
    for name, text in STAND_INS.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(text)
    stamp.touch()
    print(f"transformers {version}'s common tests are in {package}")


if __name__ == "__main__":
    main()
