"""Repository hygiene: the tracked files explain themselves from the paper and this repository.

A docstring, comment or document must not send a reader to something they do not have: private notes, files outside
the repository, or issue numbers of a tracker they cannot see. Finished studies under `research/` are pinned as they
ran and are not checked.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Built from pieces so that this file does not match itself.
FORBIDDEN = re.compile("|".join(["SPEC" + "_NOTES", "shared" + "/ENV", r"\bissues?\s+#?\d"]), re.IGNORECASE)


def _tracked_files():
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        pytest.skip("not a git checkout")
    return [name for name in listing.decode().split("\0") if name and not name.startswith("research/")]


def test_no_file_cites_private_notes_or_issue_numbers():
    found = []
    for name in _tracked_files():
        path = ROOT / name
        if not path.is_file():  # deleted or moved in the working tree
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, "say what the reference means instead of citing it:\n" + "\n".join(found)


def test_the_repository_has_one_formatter_and_follows_it():
    """`ruff format` (its settings in pyproject.toml) leaves every Python file as it is: one style for the model file,
    the scripts, the data code and the tests."""
    import sys

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (
        "files not in `ruff format`'s style (run `ruff format .`):\n" + result.stdout + result.stderr
    )
