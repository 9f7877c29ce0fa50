"""Checkpoints prove their bytes: the manifest holds a content hash of every file and `--resume` checks it, passing
over a damaged checkpoint (bytes zeroed in place, a file gone with its manifest, a `latest` that names nothing) in one
line for the newest one that verifies; checkpoints from before hashes (a manifest of sizes) and before manifests still
resume; an empty all_results.json never blocks `--resume`. Copies of the session's finished runs
(conftest.py: `finished_pretraining`, `finished_finetuning`)."""

import json
import shutil
from pathlib import Path

import pretrain
import pytest
import torch
from conftest import TORCH_THREADS, assert_states_close, tiny_preset_argv
from safetensors.torch import load_file

from aasp_hf.training.checkpointing import HASH, checkpoint_problem, file_hash, load_trainer_state, verify_checkpoints


@pytest.fixture
def run(finished_pretraining, tmp_path):
    """A copy of the finished run, as if it had died right after writing checkpoint-2 (no results yet)."""
    run = Path(shutil.copytree(finished_pretraining, tmp_path / "run"))
    (run / "all_results.json").unlink()
    return run


def warnings(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]


def resumes_from_checkpoint_1(run, finished_pretraining, capsys) -> str:
    """--resume passes over checkpoint-2 in one warning line, trains step 2 again from checkpoint-1 and ends with the
    finished run's state; returns the line."""
    results = pretrain.main(tiny_preset_argv(run, "--resume"))
    lines = warnings(capsys)
    assert len(lines) == 1 and lines[0].endswith("; resuming from checkpoint-1, the newest complete checkpoint")
    assert results["start_step"] == 1 and results["step"] == 2
    assert checkpoint_problem(run / "checkpoint-2") is None  # saved again, whole
    assert_states_close(
        load_file(run / "checkpoint-2" / "model.safetensors"),
        load_file(finished_pretraining / "checkpoint-2" / "model.safetensors"),
    )
    return lines[0]


def test_the_manifest_holds_the_size_and_hash_of_every_file(finished_pretraining):
    checkpoint = finished_pretraining / "checkpoint-2"
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    files = {p.name for p in checkpoint.iterdir()} - {"manifest.json"}
    assert (
        set(manifest) == files
        and {"model.safetensors", "optimizer.bin", "random_states_0.pkl", "trainer_state.json"} <= files
    )
    for name, entry in manifest.items():
        assert entry == {"size": (checkpoint / name).stat().st_size, HASH: file_hash(checkpoint / name)}


def test_bytes_zeroed_in_place_are_named_and_the_run_resumes_from_the_checkpoint_before(
    run, finished_pretraining, capsys
):
    weights = run / "checkpoint-2" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    size = len(data)
    data[size // 2 : size // 2 + 4096] = bytes(4096)  # 4 KiB of the tensors zeroed, the header and the size intact
    weights.write_bytes(bytes(data))
    line = resumes_from_checkpoint_1(run, finished_pretraining, capsys)
    assert line.startswith(
        f"warning: {run / 'checkpoint-2'} is damaged (model.safetensors differs from what was written: {HASH} "
    )


def test_a_checkpoint_without_its_manifest_and_optimizer_is_passed_over(run, finished_pretraining, capsys):
    (run / "checkpoint-2" / "optimizer.bin").unlink()
    (run / "checkpoint-2" / "manifest.json").unlink()
    line = resumes_from_checkpoint_1(run, finished_pretraining, capsys)
    assert line.startswith(
        f"warning: {run / 'checkpoint-2'} is damaged (manifest.json is missing (the save wrote one))"
    )


def as_written_before(checkpoint, manifest: str | None):
    """`checkpoint` as an older version wrote it: its trainer_state without "checkpoint_format", and a manifest of
    sizes ("sizes") or none (None)."""
    state = load_trainer_state(checkpoint)
    del state["checkpoint_format"]
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    entries = json.loads((checkpoint / "manifest.json").read_text())
    if manifest == "sizes":
        (checkpoint / "manifest.json").write_text(json.dumps({k: v["size"] for k, v in entries.items()}))
    else:
        (checkpoint / "manifest.json").unlink()


def test_a_checkpoint_from_before_manifests_that_misses_a_file_is_passed_over(run, finished_pretraining, capsys):
    as_written_before(run / "checkpoint-2", None)
    assert checkpoint_problem(run / "checkpoint-2") is None  # whole: it resumes as before
    (run / "checkpoint-2" / "optimizer.bin").unlink()
    line = resumes_from_checkpoint_1(run, finished_pretraining, capsys)
    assert line == (
        f"warning: {run / 'checkpoint-2'} is damaged (optimizer.bin is missing); resuming from "
        "checkpoint-1, the newest complete checkpoint"
    )


def test_a_checkpoint_with_a_manifest_of_sizes_still_resumes(run, finished_pretraining, capsys):
    as_written_before(run / "checkpoint-1", "sizes")
    shutil.rmtree(run / "checkpoint-2")
    (run / "latest").write_text("checkpoint-1\n")
    assert verify_checkpoints(run) == (run / "checkpoint-1", [])
    results = pretrain.main(tiny_preset_argv(run, "--resume"))
    assert results["start_step"] == 1 and warnings(capsys) == []
    assert_states_close(
        load_file(run / "checkpoint-2" / "model.safetensors"),
        load_file(finished_pretraining / "checkpoint-2" / "model.safetensors"),
    )


def test_an_edited_step_in_trainer_state_is_named_and_the_run_resumes_from_the_checkpoint_before(
    run, finished_pretraining, capsys
):
    """trainer_state.json is hashed in the manifest like the weights: a step changed by hand (2 -> 3) would resume
    "at step 3" with step 3 never trained."""
    state = run / "checkpoint-2" / "trainer_state.json"
    edited = state.read_text().replace('"step": 2,', '"step": 3,')
    assert edited != state.read_text()
    state.write_text(edited)
    line = resumes_from_checkpoint_1(run, finished_pretraining, capsys)
    assert line.startswith(
        f"warning: {run / 'checkpoint-2'} is damaged (trainer_state.json differs from what was written: {HASH} "
    )


def test_a_folder_named_like_a_checkpoint_where_no_save_finished_is_ignored_and_never_rotated(
    run, finished_pretraining, capsys
):
    """An empty checkpoint-999 (made by hand, or a copy that stopped) is named in one line at --resume, never resumed
    from, and not counted by --save_total_limit: it used to count as the newest checkpoint, so rotation deleted the
    good ones and kept it."""
    shutil.rmtree(run / "checkpoint-2")
    (run / "latest").write_text("checkpoint-1\n")
    (run / "checkpoint-999").mkdir()
    results = pretrain.main(tiny_preset_argv(run, "--resume", "--save_total_limit", "1"))
    assert warnings(capsys) == [
        f"warning: {run / 'checkpoint-999'} is not a checkpoint (it holds no "
        "trainer_state.json: no save finished there): ignored, neither resumed from nor "
        "counted by --save_total_limit; delete it"
    ]
    assert results["start_step"] == 1 and results["step"] == 2
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-999"]
    assert checkpoint_problem(run / "checkpoint-2") is None and not any((run / "checkpoint-999").iterdir())


def test_a_resume_with_another_thread_count_says_it_matches_to_rounding_only(run, finished_pretraining, capsys):
    """CPU kernels split their sums by thread: the checkpoint records the run's torch threads and a resume with
    another count says, in one line, that it is not bit-exact and how to make it so."""
    shutil.rmtree(run / "checkpoint-2")
    (run / "latest").write_text("checkpoint-1\n")
    torch.set_num_threads(1)
    try:
        results = pretrain.main(tiny_preset_argv(run, "--resume"))
    finally:
        torch.set_num_threads(TORCH_THREADS)
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: checkpoint-1 was written by a run with {TORCH_THREADS} torch threads, this one has 1: "
        "CPU kernels split their sums by thread, so the result matches an uninterrupted run to float "
        f"rounding, not bit for bit (OMP_NUM_THREADS={TORCH_THREADS} resumes exactly)"
    ]
    assert results["step"] == 2 and load_trainer_state(run / "checkpoint-2")["torch_threads"] == 1
    assert_states_close(
        load_file(run / "checkpoint-2" / "model.safetensors"),
        load_file(finished_pretraining / "checkpoint-2" / "model.safetensors"),
    )


def test_a_latest_that_names_nothing_is_one_line(run, finished_pretraining, capsys):
    shutil.rmtree(run / "checkpoint-1")
    (run / "latest").write_text("checkpoint-7\n")
    results = pretrain.main(tiny_preset_argv(run, "--resume"))
    assert warnings(capsys) == [
        f"warning: {run / 'latest'} names 'checkpoint-7', which is not there; resuming from "
        "checkpoint-2, the newest complete checkpoint"
    ]
    assert results["step"] == 2


def test_an_empty_all_results_never_blocks_resume(finished_pretraining, tmp_path, capsys):
    run = Path(shutil.copytree(finished_pretraining, tmp_path / "run"))
    (run / "all_results.json").write_text("")  # what a full disk left while an older version wrote it
    results = pretrain.main(tiny_preset_argv(run, "--resume"))
    assert warnings(capsys) == [
        f"warning: {run / 'all_results.json'} is damaged (empty); its results are left out and "
        "the file is written again when this run ends"
    ]
    assert json.loads((run / "all_results.json").read_text()) == results and results["step"] == 2


# ----------------------------------------------------------------------------------------------- finetune.py
def test_finetune_passes_over_a_checkpoint_with_zeroed_bytes(finished_finetuning, tmp_path, capsys):
    import finetune

    finished, command = finished_finetuning
    out = Path(shutil.copytree(finished, tmp_path / "run"))
    command = [*command[:-1], str(out)]
    (out / "all_results.json").unlink()
    optimizer = out / "checkpoint-2" / "optimizer.bin"
    data = bytearray(optimizer.read_bytes())
    data[-8192:-4096] = bytes(4096)
    optimizer.write_bytes(bytes(data))
    capsys.readouterr()
    results = finetune.main([*command, "--resume"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1
    assert lines[0].startswith(
        f"warning: {out / 'checkpoint-2'} is damaged (optimizer.bin differs from what was written: {HASH} "
    )
    assert lines[0].endswith("; resuming from checkpoint-1, the newest complete checkpoint")
    assert results["step"] == 2 and checkpoint_problem(out / "checkpoint-2") is None
