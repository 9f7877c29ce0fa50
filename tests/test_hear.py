"""aasp_hf.hear, the HEAR 2021 common API: the contract HEAR's tools check, each embedding against the encoder it comes
from, the timestamps' spacing and centring, long and very short clips, batch independence, mistakes, and HEAR's own
validator (`hear-validator`, run as installed) on a saved tiny checkpoint.

The tiny encoder has 32 mel bins (F̃ = 2 frequency patches), D = 32 and a 64-frame (640 ms) position table, so a
2-second clip is already four chunks.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config_kwargs

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForAudioClassification, AaspModel
from aasp_hf.evaluation import pool_features
from aasp_hf.integrations import hear
from aasp_hf.utils.errors import UsageError
from aasp_hf.utils.hub import CODE_FILES

SR = 16000


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A saved tiny encoder (random weights, seeded) with its 32-bin feature extractor."""
    torch.manual_seed(0)
    config = AaspConfig(**tiny_config_kwargs())
    folder = tmp_path_factory.mktemp("hear") / "encoder"
    AaspModel(config).save_pretrained(folder)
    AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model(checkpoint):
    return hear.load_model(str(checkpoint))


def noise(num_clips, seconds, seed=0):
    g = torch.Generator().manual_seed(seed)
    return 0.1 * torch.randn(num_clips, int(seconds * SR), generator=g)


def encoder_tokens(model, features):
    """The encoder's output (B, 1 + N, D) and token mask for features (B, T, F) that fit one chunk: the reference."""
    with torch.no_grad():
        output = model.encoder(features)
    return output.last_hidden_state, output.token_mask


# ----------------------------------------------------------------------------------------------- the contract
def test_the_contract_hear_checks(model):
    config = model.encoder.config
    assert model.sample_rate == SR and isinstance(model.sample_rate, int)
    d, freq = config.hidden_size, config.num_frequency_patches
    assert model.timestamp_embedding_size == freq * d and isinstance(model.timestamp_embedding_size, int)
    assert model.scene_embedding_size == d + freq * d and isinstance(model.scene_embedding_size, int)

    audio = noise(3, 1.0)
    scene = hear.get_scene_embeddings(audio, model)
    assert scene.shape == (3, model.scene_embedding_size) and scene.dtype == torch.float32  # (n, d), not (n, 1, d)
    embeddings, timestamps = hear.get_timestamp_embeddings(audio, model)
    assert embeddings.dtype == torch.float32 and timestamps.dtype == torch.float32
    assert embeddings.shape == (3, timestamps.shape[1], model.timestamp_embedding_size)
    assert timestamps.shape[0] == 3 and torch.equal(timestamps[0], timestamps[2])
    spacing = torch.diff(timestamps[0].double())
    assert model.hop_ms <= 50 and torch.allclose(spacing, torch.full_like(spacing, model.hop_ms))
    # milliseconds, centred on the columns: column 0 spans frames 0..15, centred on frame 7.5 (75 ms: frame k of the
    # centred STFT is centred at k·10 ms); the last column is centred within the clip's last hop
    assert timestamps[0, 0] == pytest.approx((config.time_patch_size - 1) / 2 * 10.0)
    assert 1000.0 - model.hop_ms < timestamps[0, -1] <= 1000.0
    assert torch.isfinite(embeddings).all() and torch.isfinite(scene).all()


def test_a_timestamp_embedding_is_a_time_column_of_the_token_grid(model):
    """hop 160 ms (one pass): column t = the F̃ tokens t·F̃ .. t·F̃ + F̃ − 1 of the time-major grid, concatenated; the
    scene embedding is the linear-evaluation feature [CLS ; time-averaged columns]."""
    coarse = hear.AaspHearModel(model.encoder, model.feature_extractor, hop_ms=160)
    audio = noise(2, 0.5)  # 51 frames: one chunk
    features = coarse.log_mel(audio)
    tokens, mask = encoder_tokens(coarse, features)
    freq = coarse.encoder.config.num_frequency_patches
    embeddings, timestamps = hear.get_timestamp_embeddings(audio, coarse)
    assert embeddings.shape[1] == 3  # columns centred at 75, 235, 395 ms; the 4th (555 ms) lies past the clip
    for t in range(embeddings.shape[1]):
        expected = tokens[:, 1 + t * freq : 1 + (t + 1) * freq].flatten(1)  # (B, F̃, D) -> (B, F̃·D)
        torch.testing.assert_close(embeddings[:, t], expected)
    torch.testing.assert_close(timestamps[0], torch.tensor([75.0, 235.0, 395.0]))
    # the scene embedding pools every column that holds a real frame (all 4), as linear evaluation does
    torch.testing.assert_close(hear.get_scene_embeddings(audio, coarse), pool_features(tokens, mask, freq))


def test_shifted_passes_interleave_columns_every_hop(model):
    """hop 40 ms: timestamp j = 4t + s is column t of the encoder run on the log-mel from frame 4s on."""
    audio = noise(2, 0.5, seed=1)
    features = model.log_mel(audio)
    embeddings, timestamps = hear.get_timestamp_embeddings(audio, model)
    passes = model.patch_frames // model.hop_frames
    assert passes == 4 and embeddings.shape[1] == 11  # centres 75, 115, ..., 475 ms within the 500 ms clip
    freq = model.encoder.config.num_frequency_patches
    for s in range(passes):
        tokens, _ = encoder_tokens(model, features[:, s * model.hop_frames :])
        for j in range(s, embeddings.shape[1], passes):
            t = j // passes
            torch.testing.assert_close(embeddings[:, j], tokens[:, 1 + t * freq : 1 + (t + 1) * freq].flatten(1))
            assert timestamps[0, j] == pytest.approx(10.0 * (s * model.hop_frames + 16 * t + 7.5))


def test_interpolation_mixes_the_two_nearest_columns(model):
    interp = hear.AaspHearModel(model.encoder, model.feature_extractor, timestamp_method="interpolate")
    coarse = hear.AaspHearModel(model.encoder, model.feature_extractor, hop_ms=160)
    audio = noise(1, 0.5, seed=2)
    columns, _ = hear.get_timestamp_embeddings(audio, coarse)  # centred at 75, 235, 395 ms
    embeddings, timestamps = hear.get_timestamp_embeddings(audio, interp)
    torch.testing.assert_close(timestamps, hear.get_timestamp_embeddings(audio, model)[1])
    torch.testing.assert_close(embeddings[:, 0], columns[:, 0])  # 75 ms
    torch.testing.assert_close(embeddings[:, 1], 0.75 * columns[:, 0] + 0.25 * columns[:, 1])  # 115 ms
    torch.testing.assert_close(embeddings[:, 4], columns[:, 1])  # 235 ms


def test_a_click_moves_the_embedding_most_near_its_time(model):
    """A click at time t changes the timestamp embeddings most at a timestamp near t: within half a patch (80 ms,
    the columns that hold the click) for every click, and centred on it on average over 32 clicks (which of the
    columns holding a click changes most depends on the random weights; a timestamp placed at its column's start
    instead of its centre would be 75 ms off on average)."""
    click_ms = torch.linspace(200.0, 1800.0, 32) + torch.rand(32, generator=torch.Generator().manual_seed(0)) * 40
    background = noise(1, 2.0, seed=3) * 0.1
    clips = background.repeat(len(click_ms) + 1, 1)
    for i, t in enumerate(click_ms.tolist()):
        clips[i + 1, int(t * SR / 1000)] += 1.0
    for method in ("shift", "interpolate"):
        probe = hear.AaspHearModel(model.encoder, model.feature_extractor, timestamp_method=method)
        embeddings, timestamps = hear.get_timestamp_embeddings(clips, probe)
        change = (embeddings[1:] - embeddings[:1]).norm(dim=-1)  # (clicks, J)
        errors = timestamps[0, change.argmax(1)] - click_ms
        assert errors.abs().max() <= 80.0 + 12.5, (method, errors)  # half a patch + half the STFT window
        assert errors.mean().abs() <= 25.0, (method, errors)


# ----------------------------------------------------------------------------------------------- long and short clips
def test_long_clips_are_encoded_in_chunks_and_stitched(model):
    """2.05 s = 206 frames > the 64-frame position table: chunks of 64 frames, each encoded on its own, columns
    stitched in time; the padded tail's columns are dropped and the scene pools over the whole clip."""
    coarse = hear.AaspHearModel(model.encoder, model.feature_extractor, hop_ms=160)
    audio = noise(2, 2.05, seed=4)
    features = coarse.log_mel(audio)
    assert features.shape[1] == 206
    embeddings, timestamps = hear.get_timestamp_embeddings(audio, coarse)
    assert embeddings.shape[1] == 13 and timestamps[0, -1] == pytest.approx(75 + 12 * 160)  # 13th column: 1995 ms
    freq, chunk = coarse.encoder.config.num_frequency_patches, coarse.chunk_frames
    columns, weights, cls = [], [], []
    for start in range(0, 206, chunk):
        tokens, mask = encoder_tokens(coarse, features[:, start : start + chunk])
        grid = tokens[:, 1:].reshape(2, -1, freq * tokens.shape[-1])  # (B, T̃c, F̃·D)
        columns.append(grid)
        weights.append(grid.shape[1])
        cls.append(tokens[:, 0])
    columns = torch.cat(columns, dim=1)  # (B, 13, F̃·D): 4 + 4 + 4 + 1 columns
    torch.testing.assert_close(embeddings, columns[:, : embeddings.shape[1]])
    w = torch.tensor(weights, dtype=torch.float32)
    expected_cls = (torch.stack(cls, 1) * w[None, :, None]).sum(1) / w.sum()
    torch.testing.assert_close(
        hear.get_scene_embeddings(audio, coarse), torch.cat([expected_cls, columns.mean(1)], dim=-1)
    )


def test_the_whole_batch_goes_through_the_encoder_at_once_and_memory_is_bounded(model):
    calls = []
    handle = model.encoder.register_forward_hook(lambda module, args, output: calls.append(args[0].shape[0]))
    try:
        audio = noise(4, 0.5, seed=5)
        expected, _ = hear.get_timestamp_embeddings(audio, model)  # 4 clips x 4 passes x 1 chunk = 16 sequences
        assert calls == [16]
        calls.clear()
        small = hear.AaspHearModel(model.encoder, model.feature_extractor, batch_size=5)
        torch.testing.assert_close(hear.get_timestamp_embeddings(audio, small)[0], expected)
        assert calls == [5, 5, 5, 1]
    finally:
        handle.remove()


@pytest.mark.parametrize("num_samples", [1, 100, 1200, 2000])
def test_audio_shorter_than_a_patch_still_gives_embeddings(model, num_samples):
    audio = noise(2, num_samples / SR, seed=6)
    embeddings, timestamps = hear.get_timestamp_embeddings(audio, model)
    scene = hear.get_scene_embeddings(audio, model)
    assert embeddings.shape[1] >= 1 and torch.isfinite(embeddings).all() and torch.isfinite(scene).all()
    duration_ms = 1000.0 * num_samples / SR
    frames = model.feature_extractor.num_frames(num_samples)
    if frames - 1 < 7.5:  # under half a patch: one embedding, centred on the real frames
        assert timestamps[0].tolist() == [pytest.approx(10.0 * (frames - 1) / 2)]
    else:
        assert timestamps[0, 0] == 75.0 and timestamps[0, -1] <= duration_ms


def test_kaldi_frames_are_centred_half_a_window_later_and_short_clips_are_padded_to_one_window(model):
    kaldi = hear.AaspHearModel(model.encoder, AaspFeatureExtractor(feature_size=32, mode="kaldi"))
    assert kaldi.frame_offset_ms == 12.5  # a Kaldi frame starts at k·10 ms and spans 25 ms
    _, timestamps = hear.get_timestamp_embeddings(noise(1, 1.0), kaldi)
    assert timestamps[0, 0] == pytest.approx(75.0 + 12.5)
    embeddings, timestamps = hear.get_timestamp_embeddings(noise(2, 0.01), kaldi)  # 160 samples < 400
    assert embeddings.shape[:2] == (2, 1) and timestamps[0, 0] == pytest.approx(12.5)


# ----------------------------------------------------------------------------------------------- independence, loading
def test_a_clip_gives_the_same_embeddings_alone_and_in_any_batch(model):
    audio = torch.cat([noise(1, 1.3, seed=7), 0.01 * noise(1, 1.3, seed=8), torch.zeros(1, int(1.3 * SR))])
    batch_frames, _ = hear.get_timestamp_embeddings(audio, model)
    batch_scene = hear.get_scene_embeddings(audio, model)
    for i in range(3):
        alone_frames, _ = hear.get_timestamp_embeddings(audio[i : i + 1], model)
        torch.testing.assert_close(batch_frames[i : i + 1], alone_frames, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(
            batch_scene[i : i + 1], hear.get_scene_embeddings(audio[i : i + 1], model), rtol=1e-5, atol=1e-5
        )


def test_options_change_the_layers_and_pooling(model, checkpoint):
    audio = noise(2, 0.5, seed=9)
    base = hear.load_model(str(checkpoint), hop_ms=160)
    features = base.log_mel(audio)
    with torch.no_grad():
        states = base.encoder(features, output_hidden_states=True).hidden_states  # embedding, block 1, block 2
    both = hear.load_model(str(checkpoint), hop_ms=160, layers=[1, 2], frequency_pooling="mean", scene_pooling="cls")
    assert both.timestamp_embedding_size == 32 and both.scene_embedding_size == 32
    mean_layers = (states[1] + states[2]) / 2  # (B, 1 + N, D); post-norm: block 2's output is the final output
    embeddings, _ = hear.get_timestamp_embeddings(audio, both)
    torch.testing.assert_close(embeddings[:, 0], mean_layers[:, 1:3].mean(1))
    torch.testing.assert_close(hear.get_scene_embeddings(audio, both), mean_layers[:, 0])
    assert both.options()["layers"] == [1, 2] and base.options()["layers"] == -1


def test_a_fine_tuned_classifier_loads_as_its_encoder(checkpoint, model, tmp_path):
    classifier = AaspForAudioClassification.from_pretrained(checkpoint, num_labels=3)
    classifier.save_pretrained(tmp_path)
    AaspFeatureExtractor.from_pretrained(checkpoint).save_pretrained(tmp_path)
    audio = noise(1, 0.7, seed=10)
    torch.testing.assert_close(
        hear.get_scene_embeddings(audio, hear.load_model(str(tmp_path))), hear.get_scene_embeddings(audio, model)
    )


def test_the_module_is_not_part_of_the_shipped_remote_code(checkpoint):
    assert not (checkpoint / "hear.py").exists()
    shipped = Path(hear.__file__).parents[1]  # aasp_hf/, where the shipped files are
    for name in CODE_FILES:
        assert "from .hear" not in (shipped / name).read_text() and "aasp_hf.hear" not in (shipped / name).read_text()


# ----------------------------------------------------------------------------------------------- mistakes
def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_an_empty_path_or_a_folder_that_is_not_a_checkpoint_is_one_line(tmp_path):
    with pytest.raises(UsageError) as error:
        hear.load_model("")
    assert "save_pretrained" in one_line(error) and "model_file_path" in one_line(error)
    with pytest.raises(UsageError) as error:
        hear.load_model(str(tmp_path / "missing"))
    assert "is not a folder" in one_line(error)
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(UsageError) as error:
        hear.load_model(str(tmp_path))
    assert "is not an AaSP checkpoint" in one_line(error)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(UsageError, match="model_type 'aasp'"):
        hear.load_model(str(tmp_path))


def test_a_truncated_weights_file_is_one_line_naming_it(checkpoint, tmp_path):
    for file in checkpoint.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])  # an interrupted copy: the header promises more than the file holds
    with pytest.raises(UsageError) as error:
        hear.load_model(str(tmp_path))
    assert f"{weights} (" in one_line(error) and "truncated or corrupt" in one_line(error)


def test_bad_options_and_bad_audio_are_one_line(checkpoint, model):
    with pytest.raises(UsageError, match="hop_m") as error:
        hear.load_model(str(checkpoint), hop_mz=20)
    one_line(error)
    with pytest.raises(UsageError, match="10, 20, 40, 80, 160") as error:
        hear.load_model(str(checkpoint), hop_ms=30)
    one_line(error)
    with pytest.raises(UsageError, match="out of range"):
        hear.load_model(str(checkpoint), layers=3)
    with pytest.raises(UsageError, match="frequency_pooling"):
        hear.load_model(str(checkpoint), frequency_pooling="max")
    with pytest.raises(UsageError, match=r"\(n_sounds, n_samples\)"):
        hear.get_scene_embeddings(torch.zeros(SR), model)
    with pytest.raises(UsageError, match="0 samples"):
        hear.get_timestamp_embeddings(torch.zeros(2, 0), model)


# ----------------------------------------------------------------------------------------------- HEAR's validator
@pytest.mark.slow  # HEAR's validator as a process
def test_hear_validator_passes_on_a_saved_checkpoint(checkpoint):
    """HEAR's own validator, as installed (`hear-validator`, from hearvalidator 2021.0.2), in a fresh process."""
    validator = Path(sys.executable).parent / "hear-validator"
    if not validator.exists():
        pytest.fail(
            f"{validator} is missing: install the pinned stack (`make setup` installs the package with its "
            "test extra at the constraints.txt pins)"
        )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [str(validator), "aasp_hf.hear", "--model", str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Looks good!" in result.stdout
    assert "Interval between timestamps is 40.0ms" in result.stdout
    assert "We suggest a interval" not in result.stderr  # its warning for hops over 50 ms
    assert np.isclose(float(result.stdout.split("scene_embedding_size: ")[1].split()[0]), 32 + 2 * 32)
