"""The layout rules of docs/architecture.md that a grep can check: no file edits the import path (the package is
installed; pytest's `pythonpath` in pyproject.toml finds the scripts), and the package never imports a script."""

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATH_EDIT = re.compile(r"\bsys\.path\.(insert|append|extend)\b|\bsys\.path\s*(\+=|=[^=])")
SCRIPTS = {"pretrain", "finetune", "linear_eval", "demo", "shift_consistency", "visualize_sblu", "run", "variants",
           "build_data", "probe_encoders", "convert_eat_checkpoint", "convert_pretraining_checkpoint", "export_onnx"}


def tracked_python_files(under: str = ".") -> list[Path]:
    """The repository's tracked .py files (the pinned studies in research/ are not run, so not checked)."""
    names = subprocess.run(["git", "ls-files", "-z", "--", f"{under}/*.py" if under != "." else "*.py"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    return [ROOT / name for name in names if name and not name.startswith("research/")]


def test_no_file_edits_the_import_path():
    files = tracked_python_files()
    assert len(files) > 50  # the listing worked
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in files if path.is_file()
                 for number, line in enumerate(path.read_text().splitlines(), 1) if PATH_EDIT.search(line)]
    assert not offenders, "edits of the import path (install the package; pytest's pythonpath finds the scripts):\n" \
        + "\n".join(offenders)


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
            offenders += [f"{path.relative_to(ROOT)}: {name}" for name in names
                          if name.split(".")[0] in SCRIPTS | {"examples", "benchmarks", "conversion", "research"}]
    assert not offenders, offenders
