"""The layout rules of docs/architecture.md that a grep can check: no file edits the import path (the package is
installed; pytest's `pythonpath` in pyproject.toml finds the scripts), the package never imports a script, and no
import of the package's own modules runs up a floor of docs/architecture.md's Floors list."""

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH_EDIT = re.compile(r"\bsys\.path\.(insert|append|extend)\b|\bsys\.path\s*(\+=|=[^=])")
SCRIPTS = {
    "pretrain",
    "finetune",
    "linear_eval",
    "demo",
    "shift_consistency",
    "visualize_sblu",
    "run",
    "variants",
    "build_data",
    "probe_encoders",
    "convert_eat_checkpoint",
    "convert_pretraining_checkpoint",
    "export_onnx",
}


def tracked_python_files(under: str = ".") -> list[Path]:
    """The repository's tracked .py files (the pinned studies in research/ are not run, so not checked)."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--", f"{under}/*.py" if under != "." else "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return [ROOT / name for name in names if name and not name.startswith("research/")]


def test_no_file_edits_the_import_path():
    files = tracked_python_files()
    assert len(files) > 50  # the listing worked
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path.is_file()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PATH_EDIT.search(line)
    ]
    assert not offenders, (
        "edits of the import path (install the package; pytest's pythonpath finds the scripts):\n"
        + "\n".join(offenders)
    )


def test_the_package_imports_no_script():
    """aasp_hf/ never imports examples/, benchmarks/ or conversion/ (the arrows point from the scripts to it)."""
    offenders = []
    for path in tracked_python_files("aasp_hf"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            offenders += [
                f"{path.relative_to(ROOT)}: {name}"
                for name in names
                if name.split(".")[0] in SCRIPTS | {"examples", "benchmarks", "conversion", "research"}
            ]
    assert not offenders, offenders


# ---- floors: docs/architecture.md's "Floors" list, which no import may run up ----------------------------------------
FLOOR_LINE = re.compile(r"^\s*floor (\d+):\s*(.+?)\s*$")


def declared_floors() -> dict[str, int]:
    """{unit: floor} from the "Floors" block of docs/architecture.md. A unit is a module directly under aasp_hf/ or a
    sub-package (its whole folder), written without `aasp_hf.` and `.py`; `__init__` is the package face."""
    block = (ROOT / "docs" / "architecture.md").read_text().split("## Floors", 1)[1].split("```")[1]
    floors = {}
    for line in block.splitlines():
        if match := FLOOR_LINE.match(line):
            floors.update({unit.strip(): int(match.group(1)) for unit in match.group(2).split(",")})
    return floors


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def own_imports(path: Path, source: str) -> list[tuple[int, str]]:
    """(line, module) for every import of the package's own modules in `path`, function-local ones included.
    `from X import name` imports the module `X.name` when there is one, else `X` (which defines or re-exports it)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "aasp_hf"]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            origin = ".".join(parts + ([node.module] if node.module else []))
            if origin.split(".")[0] == "aasp_hf":
                found += [
                    (node.lineno, f"{origin}.{alias.name}" if is_module(f"{origin}.{alias.name}") else origin)
                    for alias in node.names
                ]
    return sorted(set(found))


def upward_imports(path: Path, source: str, floors: dict) -> list[str]:
    """The imports of `path` that go to its own floor or higher in another unit, or, inside a sub-package, through
    that sub-package's face (`from . import load` in data/clips.py: the face imports clips.py)."""
    module = module_name(path)
    offenders = []
    for line, target in own_imports(path, source):
        here, there = unit_of(module), unit_of(target)
        where = f"{path.relative_to(ROOT)}:{line} imports {target}"
        if here != there and floors[there] >= floors[here]:
            offenders.append(f"{where} (floor {floors[here]} -> floor {floors[there]})")
        elif here == there != "__init__" and path.name != "__init__.py" and target == f"aasp_hf.{here}":
            offenders.append(f"{where} (its own sub-package's face)")
    return offenders


def test_every_module_has_a_floor():
    floors = declared_floors()
    units = {unit_of(module_name(path)) for path in tracked_python_files("aasp_hf")}
    assert units - floors.keys() == set(), "give these a floor in docs/architecture.md's Floors list"
    assert floors.keys() - units == set(), "docs/architecture.md's Floors list names modules that do not exist"


def test_no_import_runs_up_a_floor():
    floors = declared_floors()
    offenders = [
        offender
        for path in tracked_python_files("aasp_hf")
        for offender in upward_imports(path, path.read_text(), floors)
    ]
    assert not offenders, "imports that run up a floor (docs/architecture.md, Floors):\n" + "\n".join(offenders)


def test_the_floor_check_sees_local_and_face_imports():
    """The check can fail: a function-local import of training/ from data/, and data/'s face from inside data/."""
    floors = declared_floors()
    probe = ROOT / "aasp_hf" / "data" / "probe.py"
    upward = upward_imports(probe, "def f():\n    from ..training import optim\n", floors)
    assert upward == [
        f"aasp_hf/data/probe.py:2 imports aasp_hf.training.optim (floor {floors['data']} -> floor {floors['training']})"
    ]
    assert upward_imports(probe, "from . import load\n", floors) == [
        "aasp_hf/data/probe.py:1 imports aasp_hf.data (its own sub-package's face)"
    ]
    assert (
        upward_imports(probe, "import torch\nfrom . import collators\nfrom ..utils.errors import check_flags\n", floors)
        == []
    )
