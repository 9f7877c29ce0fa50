"""Training-side helpers: the schedules (aasp_hf.utils.schedules) vs hand-computed values, AdamW groups, the data order,
the pre-training collator (aasp_hf.data.collators), crash-safe checkpoints."""

import math

import numpy as np
import pytest
import torch
from conftest import pretraining_inputs, tiny_config_kwargs

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification, AaspForPreTraining
from aasp_hf.data.collators import PretrainingCollator, random_eq_curves
from aasp_hf.utils.schedules import learning_rate, teacher_momentum
from aasp_hf.training import latest_checkpoint, param_groups, save_checkpoint
from aasp_hf.training.checkpointing import RunState, load_process_state, load_trainer_state
from aasp_hf.training.data_order import epoch_order, micro_batches
from aasp_hf.training.model_ema import update_teacher_
from aasp_hf.training.optim import layer_id, no_weight_decay


# ----------------------------------------------------------------------------------------------- schedules
def test_learning_rate_warmup_then_cosine():
    # total 10, warm-up 4, peak 1: linear (s + 1) / 4, then 0.5 (1 + cos(pi (s - 4) / 6))
    assert [learning_rate(s, 10, 4, 1.0) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert learning_rate(4, 10, 4, 1.0) == 1.0
    assert learning_rate(7, 10, 4, 1.0) == pytest.approx(0.5)
    assert learning_rate(5, 10, 4, 1.0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 6)))
    assert learning_rate(10, 10, 4, 1.0) == pytest.approx(0.0)
    assert learning_rate(12, 10, 4, 1.0) == pytest.approx(0.0)  # past the end: stays at final
    assert learning_rate(7, 10, 4, 1.0, final=0.1) == pytest.approx(0.55)
    # the paper: peak 5e-4 reached at the end of the 80k warm-up, half of it half-way through the decay
    assert learning_rate(79_999, 600_000, 80_000, 5e-4) == pytest.approx(5e-4)
    assert learning_rate(340_000, 600_000, 80_000, 5e-4) == pytest.approx(2.5e-4)
    with pytest.raises(ValueError, match="warmup_steps"):
        learning_rate(0, 10, 11, 1.0)


def test_learning_rate_without_warmup_is_the_linear_evaluation_cosine():
    # linear_eval.py's heads: peak at step 0, half at mid-run, the minimum at the end
    assert learning_rate(0, 100, 0, 1e-3) == pytest.approx(1e-3)
    assert learning_rate(50, 100, 0, 1e-3) == pytest.approx(5e-4)
    assert learning_rate(100, 100, 0, 1e-3) == pytest.approx(0.0)
    expected = 1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + math.cos(math.pi / 4))
    assert learning_rate(25, 100, 0, 1e-3, final=1e-5) == pytest.approx(expected)


def test_teacher_momentum_dinov2_cosine():
    assert teacher_momentum(0, 100) == pytest.approx(0.994)
    assert teacher_momentum(50, 100) == pytest.approx(0.997)
    assert teacher_momentum(25, 100) == pytest.approx(0.9948786797, abs=1e-10)  # 1 - 0.006 (1 + cos(pi/4)) / 2
    assert teacher_momentum(100, 100) == 1.0
    assert teacher_momentum(150, 100) == 1.0
    assert teacher_momentum(10, 100, base=0.9, final=0.99) == pytest.approx(
        0.99 - 0.09 * (math.cos(math.pi * 0.1) + 1) / 2
    )
    values = [teacher_momentum(s, 600_000) for s in range(0, 600_001, 50_000)]
    assert values == sorted(values)


# ----------------------------------------------------------------------------------------------- optimiser
def tiny_pretraining_config(**overrides):
    return AaspConfig(
        **tiny_config_kwargs(
            predictor_hidden_size=32, predictor_num_layers=1, predictor_num_attention_heads=2, **overrides
        )
    )


def test_teacher_update_is_the_exponential_moving_average():
    torch.manual_seed(0)
    config = tiny_pretraining_config()
    model = AaspForPreTraining(config).train()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model(*pretraining_inputs(config)).loss.backward()
    optimizer.step()
    old = [t.detach().clone() for t in model.teacher.parameters()]
    update_teacher_(model.teacher, model.aasp, 0.9)
    for (name, t), before, s in zip(model.teacher.named_parameters(), old, model.aasp.parameters()):
        torch.testing.assert_close(t, 0.9 * before + 0.1 * s.detach(), msg=name)
    assert any(not torch.equal(t, s) for t, s in zip(model.teacher.parameters(), model.aasp.parameters()))


def test_layer_ids_for_layer_wise_learning_rate_decay(tiny_config):
    model = AaspForAudioClassification(tiny_config(num_labels=2))
    ids = {name: layer_id(model, name) for name, _ in model.named_parameters()}
    assert ids["aasp.embeddings.projection.weight"] == 0 and ids["aasp.cls_token"] == 0
    assert ids["aasp.embeddings.lambda_encoder.layers.0.mlp.fc1.weight"] == 0  # inside the stem, not block 0
    assert ids["aasp.layers.0.attention.query.weight"] == 1 and ids["aasp.layers.1.norm2.bias"] == 2
    assert ids["classifier.dense.weight"] == 3 and ids["classifier.layernorm.weight"] == 3
    assert set(ids.values()) == {0, 1, 2, 3}
    base = model.aasp
    assert layer_id(base, "layers.1.mlp.fc2.weight") == 2 and layer_id(base, "embedding_norm.weight") == 0
    assert {n for n in no_weight_decay(model)} == {"aasp.cls_token", "aasp.embeddings.position_embeddings"}


def test_param_groups_cover_every_trainable_parameter_once_and_never_the_teacher():
    torch.manual_seed(0)
    model = AaspForPreTraining(tiny_pretraining_config())
    decay, no_decay = param_groups(model, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    grouped = [id(p) for p in decay["params"] + no_decay["params"]]
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert len(grouped) == len(set(grouped)) == len(trainable) and set(grouped) == trainable
    teacher = {id(p) for p in model.teacher.parameters()}
    assert teacher and not teacher & set(grouped)
    # no decay on biases, norms (1-D), CLS and positions; decay on every matrix of the student/predictor/head
    assert all(p.ndim >= 2 for p in decay["params"])
    assert not any(n.endswith(".bias") or "cls_token" in n or "position_embeddings" in n for n in decay["names"])
    assert "aasp.cls_token" in no_decay["names"]
    assert any("norm" in n and n.endswith(".weight") for n in no_decay["names"])
    assert "aasp.layers.0.attention.query.weight" in decay["names"] or any(
        n.startswith("aasp.layers.0.") and n.endswith(".weight") for n in decay["names"]
    )
    optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-3, betas=(0.9, 0.95))  # torch accepts the groups
    assert len(optimizer.param_groups) == 2


def test_param_groups_give_a_name_prefix_its_own_lr_scale():
    torch.manual_seed(0)
    model = AaspForPreTraining(tiny_pretraining_config())
    plain = param_groups(model, 0.05)
    groups = param_groups(model, 0.05, {"aasp.embeddings.": 0.1})
    assert [g["lr_scale"] for g in plain] == [1.0, 1.0]
    assert [(g["lr_scale"], g["weight_decay"]) for g in groups] == [(1.0, 0.05), (1.0, 0.0), (0.1, 0.05), (0.1, 0.0)]
    scaled = groups[2]["names"] + groups[3]["names"]
    assert scaled and all(n.startswith("aasp.embeddings.") for n in scaled)
    assert not any(n.startswith("aasp.embeddings.") for n in groups[0]["names"] + groups[1]["names"])
    # the same parameters, each once, with the same decay choice as without scales
    assert sorted(scaled + groups[0]["names"] + groups[1]["names"]) == sorted(plain[0]["names"] + plain[1]["names"])
    assert set(groups[2]["names"]) <= set(plain[0]["names"]) and set(groups[3]["names"]) <= set(plain[1]["names"])


# ----------------------------------------------------------------------------------------------- data order
def test_micro_batches_are_a_pure_function_of_the_position():
    rows = list(range(23))  # 2 processes x 3 clips: 3 global micro-batches per epoch, 5 clips left out

    def take(process, start, count):
        batches = micro_batches(rows, 3, 2, process, seed=5, start=start)
        return [next(batches) for _ in range(count)]

    first, second = take(0, 0, 9), take(1, 0, 9)
    assert [epoch for epoch, _ in first] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert take(0, 4, 5) == first[4:]  # resuming mid-epoch continues exactly
    # global micro-batch g is positions [6g, 6g + 6) of the epoch's permutation, process r its r-th slice of 3
    assert first[0][1] + second[0][1] == epoch_order(23, 5, 0)[:6].tolist()
    for epoch in range(3):
        taken = [r for batches in (first, second) for e, batch in batches if e == epoch for r in batch]
        assert len(taken) == len(set(taken)) == 18  # no clip twice within an epoch, on any process
    assert [batch for _, batch in first[:3]] != [batch for _, batch in first[3:6]]  # reshuffled every epoch
    with pytest.raises(ValueError, match="cannot fill one global batch"):
        next(micro_batches(rows[:5], 3, 2, 0, seed=5))


# ----------------------------------------------------------------------------------------------- collator
@pytest.fixture
def collator_parts():
    config = tiny_pretraining_config(mask_num_views=3, mask_block_sizes=[[1, 2], [2, 1]])
    return config, AaspFeatureExtractor(feature_size=config.num_mel_bins, max_frames=config.num_frames)


def test_collator_shapes_masks_and_crops(collator_parts):
    config, extractor = collator_parts
    collator = PretrainingCollator(extractor, config, crop_seconds=0.5, generator=torch.Generator().manual_seed(1))
    rng = torch.Generator().manual_seed(0)
    clips = [
        torch.randn(48_000, generator=rng),
        torch.randn(4_000, generator=rng).numpy(),
        {"waveform": torch.randn(9_000, generator=rng)},
    ]
    state = collator.state_dict()
    batch = collator(clips)
    B, M, N = 3, config.mask_num_views, config.num_patches  # N = 2 x 4 = 8
    V = round(0.2 * N)
    Q = round(0.75 * (N - V))
    assert batch["input_values"].shape == (B, config.num_frames, config.num_mel_bins)
    assert batch["visible_indices"].shape == (B, M, V) and batch["query_indices"].shape == (B, M, Q)
    visible, queries = batch["visible_indices"], batch["query_indices"]
    assert visible.min() >= 0 and visible.max() < N and queries.min() >= 0 and queries.max() < N
    for b in range(B):
        for m in range(M):
            v, q = set(visible[b, m].tolist()), set(queries[b, m].tolist())
            assert len(v) == V and len(q) == Q and not v & q  # queries are masked tokens, never visible ones

    # the features are those of a 0.5-s crop (8000 samples) of each long clip and of the whole short clip:
    # replay the generator and cut the same crops by hand
    collator.load_state_dict(state)
    crops = [collator.random_crop(torch.as_tensor(c["waveform"] if isinstance(c, dict) else c)) for c in clips]
    assert [len(c) for c in crops] == [8000, 4000, 8000]
    assert torch.equal(crops[0], clips[0][int(torch.nonzero(clips[0] == crops[0][0])[0]) :][:8000])
    expected = extractor(
        crops, sampling_rate=16000, return_tensors="pt", padding="max_length", max_frames=config.num_frames
    )["input_values"]
    assert torch.allclose(batch["input_values"], expected, atol=1e-6)


def test_collator_state_dict_replays_exactly(collator_parts):
    config, extractor = collator_parts
    clips = [torch.randn(40_000) for _ in range(4)]
    collator = PretrainingCollator(extractor, config, crop_seconds=0.5, generator=torch.Generator().manual_seed(7))
    collator(clips)
    state = collator.state_dict()
    first, second = collator(clips), collator(clips)
    assert not torch.equal(first["visible_indices"], second["visible_indices"])  # fresh masks every call
    # a new collator with another seed, restored from the saved state, continues identically
    other = PretrainingCollator(extractor, config, crop_seconds=0.5, generator=torch.Generator().manual_seed(99))
    other.load_state_dict(state)
    replay = other(clips)
    assert all(torch.equal(first[k], replay[k]) for k in first)


def test_collator_takes_cached_log_mel_like_waveforms(collator_parts):
    """Items of a LogMelCache (unnormalised log-mel) give the waveform path's features (float16 storage aside) and,
    for clips no longer than the crop (no crop draw), exactly the same masks."""
    config, extractor = collator_parts
    clips = [torch.randn(6_000, generator=torch.Generator().manual_seed(i)) for i in range(3)]  # shorter than 0.5 s
    raw = AaspFeatureExtractor(feature_size=config.num_mel_bins, do_normalize=False)
    cached = [
        {"log_mel": raw(c, sampling_rate=16000)["input_values"][0, : raw.num_frames(len(c))].astype("float16")}
        for c in clips
    ]  # what build_log_mel_cache stores: (T_i, F) float16, unnormalised, unpadded
    from_waves = PretrainingCollator(extractor, config, crop_seconds=0.5, generator=torch.Generator().manual_seed(3))
    from_cache = PretrainingCollator(extractor, config, crop_seconds=0.5, generator=torch.Generator().manual_seed(3))
    a, b = from_waves(clips), from_cache(cached)
    assert b["input_values"].shape == a["input_values"].shape
    assert (a["input_values"] - b["input_values"]).abs().max() < 5e-3  # float16 rounding, normalised units
    assert torch.equal(a["visible_indices"], b["visible_indices"]) and torch.equal(
        a["query_indices"], b["query_indices"]
    )


def test_random_eq_curves_are_the_cosine_series_scipy_computes():
    """Each curve is Σ_{k=1..4} a_k cos(π k (f + ½) / F): scipy's float64 DCT-III of [0, a_1/2, .., a_4/2, 0, ..]."""
    from scipy.fft import dct

    strength, num_bins = 0.3, 40
    curves = random_eq_curves(5, num_bins, strength, torch.Generator().manual_seed(0))
    coefficients = torch.rand(5, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1
    coefficients = coefficients.numpy() * strength  # the same draws, replayed
    assert np.abs(coefficients).max() <= strength
    spectrum = np.zeros((5, num_bins))
    spectrum[:, 1:5] = coefficients / 2
    expected = dct(spectrum, type=3, axis=-1)  # y[f] = x[0] + 2 Σ_n x[n] cos(π n (2f + 1) / 2F)
    assert curves.shape == (5, num_bins) and curves.dtype == torch.float32
    np.testing.assert_allclose(curves.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert np.abs(expected.mean(axis=-1)).max() < 1e-9  # no k = 0 term: no overall gain


def test_collator_student_eq_recolours_the_students_view_only_and_draws_after_the_masks(collator_parts):
    config, extractor = collator_parts
    clips = [torch.randn(40_000, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    plain = PretrainingCollator(extractor, config, crop_seconds=0.5, generator=torch.Generator().manual_seed(5))
    eq = PretrainingCollator(
        extractor, config, crop_seconds=0.5, generator=torch.Generator().manual_seed(5), student_eq_strength=0.4
    )
    a = plain(clips)
    state = eq.state_dict()
    b = eq(clips)
    assert "student_input_values" not in a
    # the same crops and masks as without the option (its draws come after them)
    assert all(torch.equal(a[k], b[k]) for k in ("input_values", "visible_indices", "query_indices"))
    # the student's view is the clean one plus one smooth curve per clip, the same on every frame
    replay = PretrainingCollator(extractor, config, crop_seconds=0.5, generator=torch.Generator())
    replay.load_state_dict(state)
    replay(clips)  # crops and masks, as eq drew them
    curves = random_eq_curves(4, config.num_mel_bins, 0.4, replay.generator)  # then the curves
    torch.testing.assert_close(b["student_input_values"], b["input_values"] + curves[:, None, :])
    with pytest.raises(ValueError, match="student_eq_strength"):
        PretrainingCollator(extractor, config, student_eq_strength=-0.1)


# ----------------------------------------------------------------------------------------------- checkpoints
def test_checkpoints_are_atomic_and_latest_skips_a_crash_mid_save(tmp_path, monkeypatch):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    assert latest_checkpoint(tmp_path) is None

    final = save_checkpoint(accelerator, tmp_path, RunState(5, micro_batches=10), process_state={"collator": {"x": 1}})
    assert final == tmp_path / "checkpoint-5" and latest_checkpoint(tmp_path) == final
    assert load_trainer_state(final) == {
        "step": 5,
        "checkpoint_format": 2,
        "torch_threads": torch.get_num_threads(),
        "micro_batches": 10,
        "num_processes": 1,
    }
    assert load_process_state(final, 0) == {"collator": {"x": 1}}
    assert (tmp_path / "latest").read_text().strip() == "checkpoint-5"

    # a crash while writing checkpoint-8: the state is half written into checkpoint-8.tmp, nothing is renamed
    real_save_state = accelerator.save_state

    def crash(output_dir, **kwargs):
        real_save_state(output_dir, **kwargs)
        (tmp_path / "checkpoint-8.tmp" / "model.safetensors").write_bytes(b"half")  # torn write
        raise KeyboardInterrupt("killed mid-save")

    monkeypatch.setattr(accelerator, "save_state", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(accelerator, tmp_path, RunState(8))
    monkeypatch.undo()
    assert (tmp_path / "checkpoint-8.tmp").is_dir() and not (tmp_path / "checkpoint-8").exists()
    assert latest_checkpoint(tmp_path) == final  # the last complete one
    # even with `latest` lost, a .tmp directory is never chosen
    (tmp_path / "latest").unlink()
    assert latest_checkpoint(tmp_path) == final

    # the next save of step 8 replaces the leftover and keeps only the newest 1
    again = save_checkpoint(accelerator, tmp_path, RunState(8), save_total_limit=1)
    assert latest_checkpoint(tmp_path) == again == tmp_path / "checkpoint-8"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint-8"]
    assert (again / "model.safetensors").stat().st_size > 100
