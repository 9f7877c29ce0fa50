"""examples/pretrain.py end to end on synthetic clips: one process, exact resume, a crash mid-save, two processes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_PRETRAINING_MODEL, assert_states_close, free_port, pretrain_argv

ROOT = Path(__file__).resolve().parents[1]
import pretrain

from aasp_hf.utils.schedules import learning_rate, teacher_momentum
from aasp_hf.training import latest_checkpoint

# dropout: resume must restore the RNG
MODEL = {**TINY_PRETRAINING_MODEL, "hidden_dropout_prob": 0.1, "drop_path_rate": 0.1}


def argv(output_dir, **overrides):
    """conftest.py's pre-training command on MODEL."""
    return pretrain_argv(output_dir, model=MODEL, **overrides)


def history(output_dir):
    return [json.loads(line) for line in (Path(output_dir) / "log_history.jsonl").read_text().splitlines()]


def test_single_process_run_logs_schedules_applies_ema_and_exports(tmp_path):
    results = pretrain.main(
        argv(tmp_path, max_steps=4, save_steps=100, report_to="tensorboard", export_teacher=True, logging_steps=2)
    )
    assert results["step"] == 4 and results["num_processes"] == 1 and results["decode_failures"] == 0
    for name in ("loss", "masked_prediction_loss", "clip_loss", "contrastive_loss"):
        assert torch.isfinite(torch.tensor(results[name])), name
    assert json.loads((tmp_path / "all_results.json").read_text()) == results

    # the logged lr / momentum are the schedules' values for the step just taken (0-based index step - 1)
    logs = history(tmp_path)
    assert [r["step"] for r in logs] == [2, 4]
    for record in logs:
        s = record["step"] - 1
        assert record["train/learning_rate"] == learning_rate(s, 4, 2, 5e-4)
        assert record["train/teacher_momentum"] == teacher_momentum(s, 4)
        assert record["train/grad_norm"] > 0
        assert record["train/visible_token_ratio"] == pytest.approx(2 / 8)  # V = round(0.2 * 8) of N = 8 tokens

    # TensorBoard got the same scalars
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))
    assert events
    scalars = {}
    for event_file in events:
        acc = EventAccumulator(str(event_file))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars[tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
    assert scalars["train/teacher_momentum"] == [
        (2, pytest.approx(teacher_momentum(1, 4))),
        (4, pytest.approx(teacher_momentum(3, 4))),
    ]

    # the exported encoder loads through AutoModel; the EMA teacher moved away from the student
    import aasp_hf  # noqa: F401  (registers the Auto classes)
    from transformers import AutoFeatureExtractor, AutoModel

    student = AutoModel.from_pretrained(tmp_path / "encoder")
    teacher = AutoModel.from_pretrained(tmp_path / "teacher_encoder")
    assert type(student).__name__ == "AaspModel"
    assert AutoFeatureExtractor.from_pretrained(tmp_path / "encoder").feature_size == MODEL["num_mel_bins"]
    differ = [n for (n, p), q in zip(student.named_parameters(), teacher.parameters()) if not torch.equal(p, q)]
    assert len(differ) > len(list(student.parameters())) // 2
    # ... and the teacher itself moved (EMA applied, not a frozen copy of the initial student). main() seeds with
    # set_seed(seed) right before building the model, so the same seed rebuilds the initial weights.
    from accelerate.utils import set_seed

    set_seed(3)
    initial = aasp_hf.AaspForPreTraining(aasp_hf.AaspConfig(**MODEL)).aasp
    moved = [n for (n, p), q in zip(initial.named_parameters(), teacher.parameters()) if not torch.equal(p, q)]
    assert len(moved) > len(list(initial.parameters())) // 2
    features = torch.randn(1, MODEL["num_frames"], MODEL["num_mel_bins"])
    assert torch.isfinite(student(features).last_hidden_state).all()


def test_resume_is_exact_and_ignores_a_checkpoint_left_half_written(tmp_path):
    # run A: 6 steps in one go (checkpoints at 3 and 6); 10 clips / batch 4 = 2 batches per epoch, so step 3 is
    # half-way through epoch 1 and the resumed run must also pick up the data position inside an epoch.
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    pretrain.main(argv(run_a))
    # run B: stop after 3 steps, as if the job were killed ...
    pretrain.main(argv(run_b, stop_after_steps=3))
    assert latest_checkpoint(run_b).name == "checkpoint-3"
    # ... while it was writing checkpoint-6: a half-written .tmp directory is left behind
    (run_b / "checkpoint-6.tmp").mkdir()
    (run_b / "checkpoint-6.tmp" / "model.safetensors").write_bytes(b"truncated")
    assert latest_checkpoint(run_b).name == "checkpoint-3"
    results = pretrain.main(argv(run_b, resume=True))
    assert results["start_step"] == 3 and results["step"] == 6
    assert latest_checkpoint(run_b).name == "checkpoint-6" and not (run_b / "checkpoint-6.tmp").exists()

    # student, teacher, predictor, head: the uninterrupted run's (to float tolerance: the resumed run computes with
    # other tensor objects, and bit-exactness across those depends on the CPU's kernels); so are the logged losses
    state_a = load_file(run_a / "checkpoint-6" / "model.safetensors")
    state_b = load_file(run_b / "checkpoint-6" / "model.safetensors")
    assert any(k.startswith("teacher.") for k in state_a)
    assert_states_close(state_b, state_a)
    a, b = history(run_a), history(run_b)
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5, 6]
    for ra, rb in zip(a, b):
        for key in ("train/learning_rate", "train/teacher_momentum", "train/epoch"):  # functions of the step
            assert ra[key] == rb[key], (ra["step"], key)
        assert rb["train/loss"] == pytest.approx(ra["train/loss"], rel=1e-5), ra["step"]
    # and the teacher really is an EMA, not a copy: it differs from the student after 6 steps
    assert not torch.equal(state_a["teacher.cls_token"], state_a["aasp.cls_token"])


def test_audio_folder_with_a_broken_file_and_init_from_an_exported_encoder(tmp_path):
    """Real files through datasets' audiofolder; a file that fails to decode is counted and replaced, not fatal."""
    import numpy as np
    import soundfile as sf

    audio = tmp_path / "audio"
    audio.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        sf.write(audio / f"clip{i}.wav", (0.1 * rng.standard_normal(12_000 + 4_000 * i)).astype("float32"), 16000)
    (audio / "broken.wav").write_bytes(b"RIFF" + b"\0" * 60)  # a header and nothing else
    encoder_run, run = tmp_path / "encoder_run", tmp_path / "run"
    pretrain.main(argv(encoder_run, max_steps=1, warmup_steps=1, logging_steps=1, save_steps=100))
    results = pretrain.main(
        argv(
            run,
            synthetic_clips=0,
            train_dir=audio,
            max_steps=2,
            save_steps=100,
            init_from=encoder_run / "encoder",
            model_config=None,
        )
    )
    # batch 4 of 4 files: every micro-batch holds the broken one, which is one file that failed
    assert results["decode_failures"] == 1 and results["step"] == 2
    assert torch.isfinite(torch.tensor(results["loss"]))
    # the new run started from the exported encoder: its teacher began as that encoder and moved only a little
    first = load_file(encoder_run / "encoder" / "model.safetensors")
    teacher = load_file(run / "checkpoint-2" / "model.safetensors")
    assert torch.allclose(teacher["teacher.cls_token"], first["cls_token"], atol=1e-2)
    assert not torch.equal(teacher["teacher.cls_token"], first["cls_token"])


def write_audioset_layout(root):
    """A fake AudioSet in its official layout: 3 balanced + 1 unbalanced training segments, 2 eval segments."""
    import numpy as np
    import soundfile as sf

    (root / "audio").mkdir(parents=True)
    (root / "class_labels_indices.csv").write_text('index,mid,display_name\n0,/m/09x0r,"Speech"\n1,/m/04rlf,"Music"\n')
    header = "# created by the test\n# num_ytids=?\n# YTID, start_seconds, end_seconds, positive_labels\n"
    segments = {
        "balanced_train_segments": ["bal0000000a", "bal0000000b", "bal0000000c"],
        "unbalanced_train_segments": ["unbal000000"],
        "eval_segments": ["eval0000000", "eval0000001"],
    }
    rng = np.random.default_rng(0)
    for name, ytids in segments.items():
        (root / f"{name}.csv").write_text(header + "".join(f'{y}, 0.000, 10.000, "/m/09x0r"\n' for y in ytids))
        for ytid in ytids:
            sf.write(root / "audio" / f"{ytid}.wav", (0.1 * rng.standard_normal(12_000)).astype("float32"), 16000)
    return root


def test_audioset_official_layout_pretrains_on_its_train_split_only(tmp_path):
    """--dataset as2m --data_root: the balanced + unbalanced training segments, never the eval segments."""
    root = write_audioset_layout(tmp_path / "audioset")
    results = pretrain.main(
        argv(tmp_path / "run", synthetic_clips=0, dataset="as2m", data_root=str(root), max_steps=2, save_steps=100)
    )
    assert results["num_clips"] == 4 and results["step"] == 2 and results["decode_failures"] == 0
    with pytest.raises(ValueError, match="has the splits.*'train'.*not --dataset_split 'validation'"):
        pretrain.main(
            argv(tmp_path / "bad", synthetic_clips=0, dataset="as2m", data_root=str(root), dataset_split="validation")
        )
    with pytest.raises(ValueError, match="give one data source, got --dataset, --train_dir"):
        pretrain.main(
            argv(
                tmp_path / "bad", synthetic_clips=0, dataset="as2m", data_root=str(root), train_dir=str(root / "audio")
            )
        )


def test_streaming_run_crosses_epochs_and_resumes_exactly(tmp_path):
    """--streaming: the 4 training clips in micro-batches of 2 (2 per epoch), 4 steps, so the run crosses epoch
    boundaries; stopped after 1 step (mid-epoch) and resumed, it ends where the uninterrupted run ends (to float tolerance)."""
    root = write_audioset_layout(tmp_path / "audioset")
    common = dict(
        synthetic_clips=0,
        dataset="as2m",
        data_root=str(root),
        streaming=True,
        shuffle_buffer_size=3,
        per_device_train_batch_size=2,
        max_steps=4,
        save_steps=2,
    )
    full = pretrain.main(argv(tmp_path / "full", **common))
    assert full["step"] == 4 and full["num_clips"] is None and full["decode_failures"] == 0
    assert [h["train/epoch"] for h in history(tmp_path / "full")] == [0, 0, 1, 1]
    first = pretrain.main(argv(tmp_path / "split", stop_after_steps=1, **common))
    assert first["step"] == 1
    resumed = pretrain.main(argv(tmp_path / "split", resume=True, **common))
    assert resumed["start_step"] == 1 and resumed["step"] == 4
    reference = load_file(tmp_path / "full" / "checkpoint-4" / "model.safetensors")
    state = load_file(tmp_path / "split" / "checkpoint-4" / "model.safetensors")
    assert_states_close(state, reference)
    with pytest.raises(ValueError, match="not --synthetic_clips"):
        pretrain.main(argv(tmp_path / "bad", streaming=True))
    pretrain.main(argv(tmp_path / "map_style", max_steps=2, save_steps=2))  # synthetic clips, no stream position
    with pytest.raises(ValueError, match="streaming false → true, which a resumed run cannot change"):
        pretrain.main(argv(tmp_path / "map_style", resume=True, **common))


def test_bf16_mixed_precision_autocasts_the_encoder_and_keeps_float32_weights(tmp_path, monkeypatch):
    """--mixed_precision bf16 (accelerate's autocast; on the CPU here): the encoder's matmuls run in bf16, the student's
    token-local SBLU stem in float32, the step stays finite, and the exported weights are float32."""
    seen = {}
    build = pretrain.build_model

    def build_and_watch(model_args):
        model = build(model_args)

        def record_encoder_dtype(module, inputs, out):
            seen["encoder"] = out.dtype

        model.aasp.layers[0].mlp.fc1.register_forward_hook(record_encoder_dtype)

        def record_stem_dtype(module, inputs, out):  # the student's visible-token SBLU (the teacher's is dense)
            if module.training:
                seen["stem"] = out.dtype

        model.aasp.embeddings.sblu.register_forward_hook(record_stem_dtype)
        return model

    monkeypatch.setattr(pretrain, "build_model", build_and_watch)
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # earlier runs in this process fixed "no"
    try:
        results = pretrain.main(argv(tmp_path, mixed_precision="bf16", max_steps=2, save_steps=100))
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)  # later runs get their own precision
    assert seen == {"encoder": torch.bfloat16, "stem": torch.float32}
    assert results["nonfinite_steps"] == 0 and torch.isfinite(torch.tensor(results["loss"]))
    assert {t.dtype for t in load_file(tmp_path / "encoder" / "model.safetensors").values()} == {torch.float32}


def test_a_json_file_alone_is_the_whole_configuration(tmp_path):
    preset = {k.removeprefix("--"): v for k, v in zip(argv(tmp_path)[::2], argv(tmp_path)[1::2])}
    preset.update(model_config=MODEL, max_steps=1, warmup_steps=1, per_device_train_batch_size=4, synthetic_clips=4)
    path = tmp_path / "preset.json"
    path.write_text(json.dumps(preset))
    data_args, model_args, args = pretrain.parse_args([str(path)])
    assert model_args.model_config == MODEL and args.max_steps == 1 and data_args.synthetic_clips == 4
    # --config FILE followed by overrides
    data_args, model_args, args = pretrain.parse_args(["--config", str(path), "--max_steps", "7", "--resume"])
    assert args.max_steps == 7 and args.resume and model_args.model_config == MODEL and args.seed == 3


def test_save_total_limit_keeps_the_newest(tmp_path):
    pretrain.main(argv(tmp_path, max_steps=3, save_steps=1, save_total_limit=2, logging_steps=3))
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    assert (tmp_path / "latest").read_text().strip() == "checkpoint-3"


@pytest.mark.slow  # a two-process launch
def test_two_real_processes_stay_in_sync(tmp_path):
    """On CPU, `accelerate launch --cpu --num_processes 2` starts one process and `--multi_gpu` alone starts two
    unsynchronised ones; ACCELERATE_USE_CPU=1 + --multi_gpu starts two gloo-synchronised processes. Each rank writes its
    parameter checksums and a hash of the clips it saw: the data differ, the parameters must not."""
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        str(ROOT / "examples" / "pretrain.py"),
        *argv(tmp_path, max_steps=2, save_steps=2, logging_steps=2, synthetic_clips=16),
    ]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "all_results.json").read_text())
    assert results["num_processes"] == 2 and results["step"] == 2
    rank0 = json.loads((tmp_path / "ranks" / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "ranks" / "rank1.json").read_text())
    assert rank0["data_checksum"] != rank1["data_checksum"]  # each process trained on its own shard ...
    assert rank0["student_checksum"] == rank1["student_checksum"]  # ... yet the gradients were all-reduced
    assert rank0["teacher_checksum"] == rank1["teacher_checksum"]
    # every process saved its own collator generator and RNG state with the checkpoint
    checkpoint = tmp_path / "checkpoint-2"
    assert {p.name for p in checkpoint.glob("process_state_*.pt")} == {"process_state_0.pt", "process_state_1.pt"}
    assert len(list(checkpoint.glob("random_states_*.pkl"))) == 2


def test_pretraining_from_a_log_mel_cache(tmp_path):
    """--log_mel_cache: no audio decoding in the loop; cached clips feed the same collator and model."""
    import numpy as np

    from aasp_hf import AaspFeatureExtractor
    from aasp_hf.data.cache import build_log_mel_cache

    rng = np.random.default_rng(0)
    clips = [{"array": (0.1 * rng.standard_normal(16000)).astype(np.float32), "sampling_rate": 16000} for _ in range(8)]
    report = build_log_mel_cache(clips, tmp_path / "cache", AaspFeatureExtractor(feature_size=32))
    assert report["num_written"] == 8 and report["num_failed"] == 0
    results = pretrain.main(
        argv(tmp_path / "run", synthetic_clips=0, log_mel_cache=str(tmp_path / "cache"), max_steps=2, save_steps=100)
    )
    assert results["step"] == 2 and results["decode_failures"] == 0
    assert torch.isfinite(torch.tensor(results["loss"]))


def test_patch_embedding_lr_scale_zero_freezes_the_stem_of_student_and_teacher(tmp_path):
    """MoCo v3's frozen random patch projection: the stem keeps its initial weights in both exported encoders,
    while the blocks train."""
    pretrain.main(argv(tmp_path, max_steps=3, save_steps=100, export_teacher=True, patch_embedding_lr_scale=0.0))
    import aasp_hf
    from accelerate.utils import set_seed
    from transformers import AutoModel

    set_seed(3)  # main() seeds right before building the model
    initial = aasp_hf.AaspForPreTraining(aasp_hf.AaspConfig(**MODEL)).aasp.state_dict()
    for folder in ("encoder", "teacher_encoder"):
        trained = AutoModel.from_pretrained(tmp_path / folder).state_dict()
        stem = [k for k in initial if k.startswith("embeddings.")]
        assert len(stem) > 5 and all(torch.equal(trained[k], initial[k]) for k in stem), folder
        blocks = [k for k in initial if k.startswith("layers.") and k.endswith(".weight")]
        assert sum(not torch.equal(trained[k], initial[k]) for k in blocks) > len(blocks) // 2, folder
    with pytest.raises(ValueError, match="patch_embedding_lr_scale must be >= 0"):
        pretrain.main(argv(tmp_path / "bad", patch_embedding_lr_scale=-0.1))


def test_student_eq_strength_changes_what_the_student_sees_and_resumes_exactly(tmp_path):
    """--student_eq_strength: the same seed and batches without it give another first-step loss (the student's view
    differs, nothing else); its curves come from the collator's generator, so an interrupted run resumes exactly."""
    eq = dict(max_steps=4, save_steps=2, student_eq_strength=0.5)
    pretrain.main(argv(tmp_path / "eq", **eq))
    pretrain.main(argv(tmp_path / "plain", max_steps=4, save_steps=100))
    pretrain.main(argv(tmp_path / "resumed", stop_after_steps=2, **eq))
    pretrain.main(argv(tmp_path / "resumed", resume=True, **eq))
    with_eq, plain, resumed = history(tmp_path / "eq"), history(tmp_path / "plain"), history(tmp_path / "resumed")
    assert with_eq[0]["train/loss"] != pytest.approx(plain[0]["train/loss"], rel=1e-4)
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(with_eq, resumed):
        assert b["train/loss"] == pytest.approx(a["train/loss"], rel=1e-5), a["step"]
    with pytest.raises(ValueError, match="--student_eq_strength must be >= 0"):
        pretrain.main(argv(tmp_path / "bad", student_eq_strength=-1.0))


def test_cnn_predictor_noise_comes_from_the_checkpointed_rng_so_a_run_resumes_exactly(tmp_path):
    """EAT's CNN predictor fills hidden positions with N(0, 0.01²) noise drawn in forward from torch's global RNG,
    which main() seeds and every checkpoint saves: a run stopped after 2 steps and resumed ends with the weights and
    losses of the uninterrupted run (noise drawn from an unseeded generator instead fails this comparison)."""
    cnn = dict(
        MODEL,
        predictor_type="cnn",
        predictor_cnn_hidden_size=32,
        predictor_cnn_groups=4,
        predictor_cnn_num_layers=2,
        predictor_cnn_mask_noise_std=0.01,
    )
    common = dict(model_config=json.dumps(cnn), max_steps=4, save_steps=2)
    pretrain.main(argv(tmp_path / "whole", **common))
    pretrain.main(argv(tmp_path / "resumed", stop_after_steps=2, **common))
    pretrain.main(argv(tmp_path / "resumed", resume=True, **common))
    whole = load_file(tmp_path / "whole" / "checkpoint-4" / "model.safetensors")
    assert any(k.startswith("predictor.convs.") for k in whole)
    assert_states_close(load_file(tmp_path / "resumed" / "checkpoint-4" / "model.safetensors"), whole)
    for a, b in zip(history(tmp_path / "whole"), history(tmp_path / "resumed")):
        assert b["train/loss"] == pytest.approx(a["train/loss"], rel=1e-5), a["step"]
