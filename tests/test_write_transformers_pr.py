"""conversion/write_transformers_pr.py's writer, on a skeleton of the transformers files it edits (no transformers tree,
no checks run): the model folder is generated from aasp_hf's Hub-shipped files with transformers-internal imports, the
shared entries land in their places, the tree's test files import from the tree, and writing again changes nothing."""

import ast
import re
import shutil
import textwrap
from pathlib import Path

import pytest

import write_transformers_pr as pr
from aasp_hf.utils.errors import UsageError
from aasp_hf.utils.hub import CODE_FILES

MODELS_INIT = """\
from typing import TYPE_CHECKING

from ..utils import _LazyModule


if TYPE_CHECKING:
    from .afmoe import *
    from .albert import *
    from .bert import *
else:
    import sys
"""

MODELING_AUTO = """\
MODEL_MAPPING_NAMES = OrderedDict(
    [
        # Base model mapping
        ("afmoe", "AfmoeModel"),
        ("bert", "BertModel"),
    ]
)

MODEL_FOR_PRETRAINING_MAPPING_NAMES = OrderedDict(
    [
        # Model for pre-training mapping
        ("albert", "AlbertForPreTraining"),
    ]
)

MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES = OrderedDict(
    [
        # Model for Audio Classification mapping
        ("audio-spectrogram-transformer", "ASTForAudioClassification"),
        ("whisper", "WhisperForAudioClassification"),
    ]
)
"""

TOCTREE = """\
    - sections:
      - local: model_doc/vit
        title: ViT
      title: Vision models
    - sections:
      - local: model_doc/audio-spectrogram-transformer
        title: Audio Spectrogram Transformer
      - local: model_doc/bark
        title: Bark
      title: Audio models
"""

MAKEFILE = """\
STYLE_CHECKERS := ruff_check, ruff_format, init_isort, sort_auto_mappings
REPO_CONSISTENCY_CHECKERS := \\
\tauto_mappings, \\
\timports, \\
\tdeps_table
"""


CONFIG_ATTRIBUTES = 'SPECIAL_CASES_TO_ALLOW = {\n    # a reason\n    "DeepseekV3Config": ["n_routed_experts"],\n}\n'


@pytest.fixture
def tree(tmp_path):
    """The files of a transformers source tree the writer reads or edits, in their places."""
    root = tmp_path / "transformers"
    files = {
        "src/transformers/models/__init__.py": MODELS_INIT,
        "src/transformers/models/auto/modeling_auto.py": MODELING_AUTO,
        "docs/source/en/_toctree.yml": TOCTREE,
        "utils/checkers.py": "",
        "utils/check_config_attributes.py": CONFIG_ATTRIBUTES,
        "Makefile": MAKEFILE,
        "setup.py": '_deps = [\n    "ruff==0.14.10",\n    "transformers-mlinter==0.1.4",\n]\n',
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def definitions(source: str) -> list[str]:
    """ast dumps of the module's top-level classes and functions, with the `from ... import` statements inside them
    left out (the writer makes those relative)."""
    defs = [n for n in ast.parse(source).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))]
    for node in (inner for d in defs for inner in ast.walk(d)):
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, field, None), list):
                setattr(node, field, [n for n in getattr(node, field) if not isinstance(n, ast.ImportFrom)])
    return [ast.dump(d) for d in defs]


def test_model_folder_is_generated_from_the_shipped_files_with_transformers_internal_imports(
    tree, tmp_path, monkeypatch
):
    # a copy of aasp_hf's shipped files with a marker line: the written folder follows the source it is given
    package = tmp_path / "aasp_hf"
    shutil.copytree(pr.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    with open(package / "modeling_aasp.py", "a") as f:
        f.write("\nMARKER_FROM_SOURCE = 1\n")
    monkeypatch.setattr(pr, "PACKAGE", package)
    pr.write(tree)

    folder = tree / "src/transformers/models/aasp"
    assert sorted(p.name for p in folder.iterdir()) == sorted(CODE_FILES + ("__init__.py",))
    assert "MARKER_FROM_SOURCE = 1" in (folder / "modeling_aasp.py").read_text()
    for name in CODE_FILES:
        written, source = (folder / name).read_text(), (package / name).read_text()
        for node in ast.walk(ast.parse(written)):  # nothing left that imports the package by its installed name
            if isinstance(node, ast.ImportFrom):
                assert node.level > 0 or node.module.split(".")[0] != "transformers", (name, node.module)
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] not in ("transformers", "aasp_hf") for a in node.names), name
        # every definition of the source is there, unchanged but for its own imports (checked relative above)
        assert definitions(written) == definitions(source), name
    modeling = (folder / "modeling_aasp.py").read_text()
    assert "from ...modeling_utils import PreTrainedModel\n" in modeling
    assert "from ... import initialization as init\n" in modeling
    assert (
        "from ...utils.output_capturing import OutputRecorder, capture_outputs, maybe_install_capturing_hooks\n"
        in modeling
    )
    assert "from .configuration_aasp import " in modeling  # siblings stay relative
    assert modeling.startswith(
        "# Copyright 2026 The aasp_hf authors. All rights reserved.\n#\n# Licensed under the "
        "Apache License, Version 2.0"
    )
    assert "you may obtain a copy of the license at" in modeling.lower()  # the linter's TRF028 looks for it
    # in the tree the model is installed code: the remote-code switch is keyed to transformers' package name
    assert '__name__.split(".")[0] != "transformers"' in (folder / "configuration_aasp.py").read_text()
    # __all__ holds only documented classes; the lazy __init__ imports each file that exports any
    exported = {}
    for name in CODE_FILES:
        for node in ast.parse((folder / name).read_text()).body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__all__":
                exported[name] = ast.literal_eval(node.value)
    assert sorted(sum(exported.values(), [])) == sorted(pr.DOCUMENTED)
    init = (folder / "__init__.py").read_text()
    assert [line.strip() for line in init.splitlines() if "import *" in line] == [
        f"from .{Path(name).stem} import *" for name in sorted(exported)
    ]


def test_shared_entries_land_in_their_alphabetical_places(tree):
    pr.write(tree)
    init = (tree / "src/transformers/models/__init__.py").read_text()
    assert "if TYPE_CHECKING:\n    from .aasp import *\n    from .afmoe import *\n" in init
    auto = (tree / "src/transformers/models/auto/modeling_auto.py").read_text()
    # after each table's leading comment (sort_auto_mappings fails on an entry above it), before the next model type
    assert '# Base model mapping\n        ("aasp", "AaspModel"),\n        ("afmoe",' in auto
    assert '# Model for pre-training mapping\n        ("aasp", "AaspForPreTraining"),\n        ("albert",' in auto
    assert (
        '# Model for Audio Classification mapping\n        ("aasp", "AaspForAudioClassification"),\n'
        '        ("audio-spectrogram-transformer"'
    ) in auto
    toc = (tree / "docs/source/en/_toctree.yml").read_text()
    audio = toc[toc.index("title: Vision models") :]
    assert audio.index("model_doc/aasp\n        title: AaSP") < audio.index("model_doc/audio-spectrogram-transformer")
    assert toc.index("title: Vision models") < toc.index("model_doc/aasp")  # in the audio section, not the vision one
    doc = (tree / "docs/source/en/model_doc/aasp.md").read_text()
    for cls, methods in pr.DOCUMENTED.items():
        assert f"[[autodoc]] {cls}\n" + "".join(f"    - {m}\n" for m in methods) in doc


def test_writing_again_replaces_the_previous_write(tree):
    pr.write(tree)
    first = snapshot(tree)
    stale = tree / "src/transformers/models/aasp/stale_from_an_older_write.py"
    stale.write_text("x = 1\n")
    pr.write(tree)
    assert not stale.exists()
    assert snapshot(tree) == first
    auto = (tree / "src/transformers/models/auto/modeling_auto.py").read_text()
    assert auto.count('("aasp", ') == 3
    assert (tree / "src/transformers/models/__init__.py").read_text().count("from .aasp import *") == 1
    assert (tree / "docs/source/en/_toctree.yml").read_text().count("model_doc/aasp\n") == 1


def test_tree_test_files_import_from_the_tree_and_carry_their_helpers(tree):
    pr.write(tree)
    folder = tree / "tests/models/aasp"
    assert sorted(p.name for p in folder.iterdir()) == sorted(["__init__.py", *pr.tree_test_files()])
    for name in pr.tree_test_files():
        text = (folder / name).read_text()
        module = ast.parse(text)
        for bad in ("aasp_hf", "conftest", "transformers_release_tests"):
            assert bad not in "\n".join(
                ast.unparse(n) for n in module.body if isinstance(n, (ast.Import, ast.ImportFrom))
            ), name
        defined = {n.name for n in module.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        imported = {
            (a.asname or a.name).split(".")[0]
            for n in module.body
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names
        }
        used = {n.id for n in ast.walk(module) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert imported <= used, (name, imported - used)  # no unused import (ruff's F401)
        assert {"tiny_config_kwargs", "tiny_pretraining_config"} & defined <= used, name  # no unused helper
        if name != "test_feature_extraction_aasp.py":  # the model tests' helper from conftest, written in
            assert "tiny_config_kwargs" in used and "tiny_config_kwargs" in defined, name
    modeling = (folder / "test_modeling_aasp.py").read_text()
    assert "from ...test_modeling_common import ModelTesterMixin, floats_tensor, ids_tensor\n" in modeling
    assert "from transformers import AaspConfig, AaspForAudioClassification, AaspModel\n" in modeling
    assert "class AaspModelTest(ModelTesterMixin, unittest.TestCase):" in modeling
    assert "aasp_in_transformers_model_tables" not in modeling.split('"""', 2)[2]  # our stand-in for the tables
    assert "class AaspFeatureExtractionTest(" in (folder / "test_feature_extraction_aasp.py").read_text()
    pretraining = modeling  # AaspForPreTraining is in modeling_aasp.py, so its tests are in test_modeling_aasp.py
    # the pre-training model's common tests and all its own tests, the masks from the sampler written into the file
    assert "class AaspForPreTrainingModelTest(ModelTesterMixin, unittest.TestCase):" in pretraining
    assert re.search(r"all_model_classes\s+=\s+\(AaspForPreTraining,\)", pretraining)  # as check_repo reads it
    for test in (
        "test_hidden_states_and_attentions_are_the_students_and_leave_the_teacher_alone",
        "test_teacher_starts_as_the_student_and_stays_in_eval_mode_without_gradients",
    ):
        assert f"def {test}(" in pretraining
    assert "def sample_pretraining_masks(" in pretraining and "def pretraining_inputs(" in pretraining
    assert "aasp_in_transformers_pretraining_table" not in pretraining.split('"""', 2)[2]
    assert "needs pretraining_batch" not in pretraining


def test_a_test_that_needs_training_side_code_is_left_out_and_named(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    shutil.copy(pr.REPO / "tests/conftest.py", repo / "tests/conftest.py")
    (repo / "tests/test_x.py").write_text(
        textwrap.dedent("""\
        \"\"\"Docstring.\"\"\"
        from aasp_hf import AaspForPreTraining
        from conftest import pretraining_batch, tiny_pretraining_config


        def test_uses_the_training_sampler():
            AaspForPreTraining(tiny_pretraining_config())(*pretraining_batch(tiny_pretraining_config()))


        def test_does_not():
            assert AaspForPreTraining(tiny_pretraining_config())
        """)
    )
    monkeypatch.setattr(pr, "REPO", repo)
    text = pr.tree_test_file([("test_x.py", {})])
    assert "def test_does_not(" in text and "def test_uses_the_training_sampler(" not in text
    assert "- `test_uses_the_training_sampler`: needs pretraining_batch (training-side code, not in the tree)" in text
    assert "def pretraining_batch(" not in text and "from aasp_hf" not in text
    assert "from transformers import AaspForPreTraining\n" in text


def test_tree_test_files_follow_the_file_that_defines_each_class(tree):
    """check_repo pairs `modeling_x.py` with `tests/models/aasp/test_modeling_x.py` and wants each model class of the
    module in an `all_model_classes` there: with the pre-training model in modeling_aasp.py (transformers' one
    modeling file per model), its tests go into test_modeling_aasp.py with the encoder's, and a name that lives in the
    model file (the losses) is imported from there."""
    assert [ours for ours, _ in pr.tree_test_files()["test_modeling_aasp.py"]] == [
        "test_transformers_common.py",
        "test_transformers_common_pretraining.py",
        "test_pretraining_model.py",
    ]
    pr.write(tree)
    folder = tree / "tests/models/aasp"
    assert sorted(p.name for p in folder.iterdir()) == [
        "__init__.py",
        "test_feature_extraction_aasp.py",
        "test_modeling_aasp.py",
    ]
    modeling = (folder / "test_modeling_aasp.py").read_text()
    tested = {
        name.strip()
        for group in re.findall(r"all_model_classes\s+=\s+\(([^\)]*)\)", modeling)
        for name in group.split(",")
        if name.strip()
    }
    assert tested == {
        "AaspModel",
        "AaspForAudioClassification",
        "AaspForAudioFrameClassification",
        "AaspForPreTraining",
    }
    assert "from transformers.models.aasp.modeling_aasp import masked_prediction_loss, teacher_targets\n" in modeling
    assert "objectives" not in modeling and "modeling_aasp_pretraining" not in modeling
    imports = [line for line in modeling.splitlines() if line.startswith(("import ", "from "))]
    assert len(imports) == len(set(imports))  # the three sources' imports, each line once
    assert [n.name for n in ast.parse(modeling).body if isinstance(n, ast.FunctionDef)].count("tiny_config_kwargs") == 1
    assert modeling.count("\nTRANSFORMERS_VERSION = ") == 1  # both common-test files define it, identically


def test_imports_of_aasp_hf_point_at_the_file_that_defines_each_name():
    node = ast.parse("from aasp_hf import AaspForPreTraining, AaspForPreTrainingOutput, AaspModel").body[0]
    assert pr._tree_import(node, node.names) == [
        "from transformers import AaspForPreTraining, AaspModel",  # documented: transformers exports them
        "from transformers.models.aasp.modeling_aasp import AaspForPreTrainingOutput",
    ]
    node = ast.parse("from transformers_release_tests.test_modeling_common import ModelTesterMixin").body[0]
    assert pr._tree_import(node, node.names) == ["from ...test_modeling_common import ModelTesterMixin"]
    node = ast.parse("from aasp_hf.data.masking import sample_batch_masks").body[0]
    with pytest.raises(
        UsageError,
        match="imports sample_batch_masks from aasp_hf.data.masking, which no file of the model folder defines",
    ):
        pr._tree_import(node, node.names)


def test_generated_files_are_formatted_by_the_trees_ruff():
    """The test files and the lazy `__init__.py` are written here, so the tree's `ruff format` formats them on every
    write (a step that must succeed); the model files are copied as they are and formatted at their source."""
    fixes = pr.tree_fixes("/venv/bin/python", style=False)
    assert (
        ["/venv/bin/ruff", "format", "src/transformers/models/aasp/__init__.py", "tests/models/aasp"],
        True,
    ) in fixes
    assert not any(cmd[1] == "format" and "src/transformers/models/aasp" in cmd for cmd, _ in fixes)


def test_shipped_files_are_formatted_alike_at_the_trees_line_length():
    """transformers' tree formats at line length 119, the repository at 120: the shipped files are written so that
    both formatters leave them as they are (the tree's `ruff format --check` runs on the copied files)."""
    import subprocess
    import sys

    files = [str(pr.PACKAGE / name) for name in CODE_FILES]
    for width in ("119", "120"):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", "format", "--check", "--line-length", width, *files],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"line length {width}:\n{result.stdout}{result.stderr}"


def test_rewrite_imports():
    source = textwrap.dedent("""\
        import torch
        from transformers import PreTrainedConfig
        from transformers import initialization as init
        from transformers.utils import (
            ModelOutput,
            logging,
        )
        from .configuration_aasp import CHOICES
        x = 1
        try:
            from transformers.utils.output_capturing import capture_outputs
        except ImportError:
            from transformers.utils.generic import check_model_inputs as capture_outputs
        def f():
            from transformers import PreTrainedModel
            return PreTrainedModel
        """)
    assert pr.rewrite_imports(source) == textwrap.dedent("""\
        import torch
        from ...configuration_utils import PreTrainedConfig
        from ... import initialization as init
        from ...utils import ModelOutput, logging
        from .configuration_aasp import CHOICES
        x = 1
        try:
            from ...utils.output_capturing import capture_outputs
        except ImportError:
            from ...utils.generic import check_model_inputs as capture_outputs
        def f():
            from ...modeling_utils import PreTrainedModel
            return PreTrainedModel
        """)
    with pytest.raises(UsageError, match=r"f.py:1: no transformers module is known for `AutoConfig`"):
        pr.rewrite_imports("from transformers import AutoConfig\n", "f.py")
    with pytest.raises(UsageError, match=r"f.py:2: `import transformers` has no relative form"):
        pr.rewrite_imports("import os\nimport transformers\n", "f.py")
    with pytest.raises(UsageError, match=r"f.py:1: put `from transformers.utils import ...` on a line of its own"):
        pr.rewrite_imports("try: from transformers.utils import logging\nexcept ImportError: pass\n", "f.py")


def test_tree_makefile_lists_and_pins(tree):
    assert pr.makefile_list(tree, "REPO_CONSISTENCY_CHECKERS") == ["auto_mappings", "imports", "deps_table"]
    assert pr.pinned_version(tree, "ruff") == "0.14.10"
    assert pr.pinned_version(tree, "transformers-mlinter") == "0.1.4"
    names = [name for name, _, _ in pr.checks(tree, "/venv/bin/python")]
    assert names == [
        "auto_mappings",
        "imports",
        "deps_table",
        "init_isort",
        "sort_auto_mappings",
        "ruff_check",
        "ruff_format",
        "modeling_structure",
        "model_tests",
    ]


def test_not_a_tree_is_one_clear_error(tmp_path):
    with pytest.raises(
        UsageError,
        match=r"is not a transformers source tree \(src/transformers/models/__init__.py "
        r"is missing\)",
    ):
        pr.main([str(tmp_path), "--write-only"])
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_tree_on_main_moves_to_a_pull_request_branch(tree):
    """The tree's checks compare the branch with main (check_modular_conversion converts every modular file on main):
    a tree on main is moved to `add-aasp` at the same commit; on that branch (or any other) it stays."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout

    with pytest.raises(UsageError, match="is not a git clone"):
        pr.ensure_pr_branch(tree)
    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
    assert pr.ensure_pr_branch(tree) == "add-aasp"
    assert git("branch", "--show-current").strip() == "add-aasp"
    assert pr.ensure_pr_branch(tree) == "add-aasp"  # again: stays
    git("switch", "-q", "main")
    with pytest.raises(UsageError, match="is on main and a branch add-aasp exists: switch to it"):
        pr.ensure_pr_branch(tree)
    assert git("branch", "--show-current").strip() == "main"


def test_the_pull_request_is_one_commit_that_a_rerun_amends(tree):
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(tree), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    assert "left uncommitted: the tree is on main" in pr.commit_pr(tree)  # never on main
    pr.ensure_pr_branch(tree)
    pr.write(tree)
    assert pr.commit_pr(tree).startswith("committed")
    first = git("log", "--format=%H %ad %s", "--date=iso")
    assert git("status", "--porcelain") == ""
    assert "src/transformers/models/aasp/modeling_aasp.py" in git("show", "--name-only", "--format=", "HEAD")
    pr.write(tree)
    assert pr.commit_pr(tree).startswith("amended")
    again = git("log", "--format=%H %ad %s", "--date=iso").splitlines()
    assert len(again) == 2 and again[1:] == first.splitlines()[1:]  # base, then our one commit
    assert again[0].split(" ", 1)[1] == first.splitlines()[0].split(" ", 1)[1]  # same author date and subject


def test_the_config_attribute_only_the_mask_sampler_reads_is_allowed_with_its_reason(tree):
    """check_config_attributes fails on a config attribute no modeling file reads: mask_block_sizes is read only by
    the training collator's sampler, so the pull request lists it, with the reason, as transformers' models do."""
    pr.write(tree)
    pr.write(tree)  # a rerun replaces the entry, it does not add a second one
    text = (tree / "utils/check_config_attributes.py").read_text()
    namespace = {}
    exec(text, namespace)
    assert namespace["SPECIAL_CASES_TO_ALLOW"] == {
        "AaspConfig": ["mask_block_sizes"],
        "DeepseekV3Config": ["n_routed_experts"],
    }
    assert all(len(line) <= 119 for line in text.splitlines())  # the tree's line length
    assert "mask sampler" in text.splitlines()[1]
