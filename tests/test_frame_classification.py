"""AaspForAudioFrameClassification, the frame-level (sound event detection) head, and its config fields: shapes, the
frame logits against a hand computation, padding, the losses against float64 formulas, gradients, round trips and
remote code.

The tiny encoder of conftest has 32 mel bins, so each time column holds two frequency patches (F' = 2) and the
average over frequency, and the time-major token order it relies on (token t·F' + f), are actually exercised; with 16
mel bins a column would be a single token.
"""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoModelForAudioFrameClassification

from aasp_hf import AaspConfig, AaspForAudioClassification, AaspForAudioFrameClassification, AaspModel
from conftest import run_without_aasp_hf, tiny_config_kwargs
from host_sync import HostSyncCounter

NUM_LABELS = 3
FREQUENCY_PATCHES = 2  # 32 mel bins / 16
TIME_PATCH = 16


def frame_model(seed=0, **overrides):
    torch.manual_seed(seed)
    config = AaspConfig(**tiny_config_kwargs(num_labels=NUM_LABELS, **overrides))
    return AaspForAudioFrameClassification(config).eval()


def padded_batch(lengths, seed=0):
    """Clips of `lengths` frames (32 mel bins), zero-padded to the longest, with their frame attention_mask."""
    g = torch.Generator().manual_seed(seed)
    clips = [torch.randn(length, 32, generator=g) for length in lengths]
    longest = max(lengths)
    batch = torch.stack([F.pad(clip, (0, 0, 0, longest - len(clip))) for clip in clips])  # (B, T, 32)
    mask = (torch.arange(longest)[None] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    return clips, batch, mask


def expected_frame_mask(mask):
    """(B, T) frame mask -> (B, ceil(T / 16)): a column is real when any of its 16 input frames is."""
    batch_size, num_frames = mask.shape
    num_columns = math.ceil(num_frames / TIME_PATCH)
    out = torch.zeros(batch_size, num_columns, dtype=torch.long)
    for b in range(batch_size):
        for t in range(num_columns):
            out[b, t] = int(mask[b, t * TIME_PATCH : (t + 1) * TIME_PATCH].any())
    return out


# ----------------------------------------------------------------------------------------------- shapes and logits
@pytest.mark.parametrize("num_frames", [64, 50, 16, 100])
def test_output_shapes_for_lengths_on_and_off_the_patch_grid(num_frames):
    model = frame_model()
    out = model(torch.randn(2, num_frames, 32), output_hidden_states=True, output_attentions=True)
    num_columns = math.ceil(num_frames / TIME_PATCH)
    assert out.logits.shape == (2, num_columns, NUM_LABELS)
    assert out.frame_mask.shape == (2, num_columns) and out.frame_mask.dtype == torch.long
    assert out.frame_mask.eq(1).all()  # the frames added to reach a whole patch leave a partly real column real
    assert out.loss is None
    assert len(out.hidden_states) == 3 and len(out.attentions) == 2
    assert out.hidden_states[-1].shape == (2, 1 + num_columns * FREQUENCY_PATCHES, 32)
    as_tuple = model(torch.randn(2, num_frames, 32), return_dict=False)
    assert isinstance(as_tuple, tuple) and as_tuple[0].shape == (2, num_columns, NUM_LABELS)


@pytest.mark.parametrize("overrides", [{}, {"patch_embedding": "spe", "layer_norm_first": True}])
def test_frame_logits_equal_an_independent_computation(overrides):
    """An AaspModel with the classifier's encoder weights, each time column averaged over frequency in a loop over
    the time-major tokens (index 1 + t·F' + f), then LayerNorm and Linear with the head's weights, in float64."""
    model = frame_model(**overrides)
    encoder = AaspModel(model.config).eval()
    encoder.load_state_dict(model.aasp.state_dict())
    _, x, mask = padded_batch([64, 41])
    with torch.no_grad():
        out = model(x, mask)
        tokens = encoder(x, mask).last_hidden_state.double()  # (B, 1 + N, D)
    norm, dense = model.classifier.layernorm, model.classifier.dense
    expected = torch.zeros(2, 4, NUM_LABELS, dtype=torch.float64)
    for b in range(2):
        for t in range(4):
            column = sum(tokens[b, 1 + t * FREQUENCY_PATCHES + f] for f in range(FREQUENCY_PATCHES)) / FREQUENCY_PATCHES
            normed = F.layer_norm(column, (32,), norm.weight.double(), norm.bias.double(), norm.eps)
            expected[b, t] = dense.weight.double() @ normed + dense.bias.double()
    torch.testing.assert_close(out.logits.double(), expected, atol=1e-6, rtol=0)
    assert out.frame_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert torch.equal(out.frame_mask, expected_frame_mask(mask))


def test_a_padded_batch_equals_each_clip_alone():
    """Padding + attention_mask: each clip's real output frames equal those of the clip alone, and the padded ones
    are marked; the clips are 20, 50 and 96 frames (off the patch grid, and longer than the 64-frame position table)."""
    model = frame_model()
    lengths = [20, 96, 50]
    clips, batch, mask = padded_batch(lengths, seed=1)
    with torch.no_grad():
        out = model(batch, mask)
        for b, clip in enumerate(clips):
            alone = model(clip[None])
            num_columns = math.ceil(lengths[b] / TIME_PATCH)
            assert alone.logits.shape == (1, num_columns, NUM_LABELS)
            torch.testing.assert_close(out.logits[b, :num_columns], alone.logits[0], atol=2e-5, rtol=1e-4)
            assert out.frame_mask[b].tolist() == [1] * num_columns + [0] * (6 - num_columns)


# ----------------------------------------------------------------------------------------------- losses
def masked_bce_float64(logits, labels, frame_mask):
    """Binary cross-entropy with logits, written out in float64, averaged over the real frames and the labels."""
    x, y = logits.double(), labels.double()
    total, count = 0.0, 0
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            if not frame_mask[b, t]:
                continue
            for c in range(x.shape[2]):
                p = 1.0 / (1.0 + torch.exp(-x[b, t, c]))
                total += -(y[b, t, c] * torch.log(p) + (1 - y[b, t, c]) * torch.log(1 - p))
                count += 1
    return total / count


def soft_labels(batch_size, num_columns, seed=0):
    """Soft targets in [0, 1], as the fraction of each frame an event covers: some 0, some 1, some in between."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.rand(batch_size, num_columns, NUM_LABELS, generator=g)
    labels[labels < 0.3] = 0.0
    labels[labels > 0.8] = 1.0
    return labels


def test_multi_label_loss_is_bce_over_real_frames_and_labels_only():
    model = frame_model()
    assert model.config.problem_type is None  # unset: multi-label, the default of frame classification
    lengths = [64, 41, 20]
    clips, batch, mask = padded_batch(lengths, seed=2)
    labels = soft_labels(3, 4)
    labels[2, 2:] = -100.0  # whatever the padded frames' labels hold, they do not count
    labels[1, 3] = 7.0
    with torch.no_grad():
        out = model(batch, mask, labels=labels)
    assert out.frame_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]
    expected = masked_bce_float64(out.logits, labels, out.frame_mask)
    torch.testing.assert_close(out.loss.double(), expected, atol=1e-6, rtol=1e-6)

    # padding does not change it: more padding on the batch, and the clips one by one (the mean over the batch's
    # 4 + 3 + 2 real frames is the frame-weighted mean of the clips' own losses)
    wider = F.pad(batch, (0, 0, 0, 32))  # (3, 96, 32): two more padded columns
    wider_labels = torch.cat([labels, torch.full((3, 2, NUM_LABELS), 0.5)], dim=1)
    with torch.no_grad():
        again = model(wider, F.pad(mask, (0, 32)), labels=wider_labels)
        alone = [
            model(clip[None], labels=labels[b : b + 1, : math.ceil(len(clip) / TIME_PATCH)])
            for b, clip in enumerate(clips)
        ]
    torch.testing.assert_close(again.loss, out.loss, atol=2e-6, rtol=1e-5)
    weighted = sum(result.loss * result.logits.shape[1] for result in alone) / 9
    torch.testing.assert_close(weighted, out.loss, atol=2e-6, rtol=1e-5)


def test_single_label_loss_is_cross_entropy_over_real_labelled_frames():
    model = frame_model(problem_type="single_label_classification")
    _, batch, mask = padded_batch([64, 41], seed=3)
    labels = torch.tensor([[0, 2, -100, 1], [1, 1, 0, 2]])  # (B, T'): the second clip's last frame is padding
    with torch.no_grad():
        out = model(batch, mask, labels=labels)
    log_p = out.logits.double().log_softmax(-1)
    kept = [(b, t) for b in range(2) for t in range(4) if labels[b, t] != -100 and out.frame_mask[b, t]]
    assert len(kept) == 6
    expected = -sum(log_p[b, t, labels[b, t]] for b, t in kept) / len(kept)
    torch.testing.assert_close(out.loss.double(), expected, atol=1e-6, rtol=1e-6)


def test_a_half_precision_model_reduces_its_loss_in_float32():
    model = frame_model().to(torch.bfloat16)
    labels = soft_labels(2, 4)
    out = model(torch.randn(2, 64, 32, dtype=torch.bfloat16), labels=labels)
    assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits.float(), labels))


def test_label_shapes_that_do_not_match_raise_with_the_expected_shape():
    model = frame_model()
    x = torch.randn(2, 50, 32)  # 4 output frames
    with pytest.raises(ValueError, match=r"\(2, 4, 3\).*50 frames.*got \(2, 3, 3\)"):
        model(x, labels=torch.zeros(2, 3, NUM_LABELS))
    with pytest.raises(ValueError, match="single_label_classification"):
        model(x, labels=torch.zeros(2, 4, dtype=torch.long))  # class indices given to a multi-label head
    model.config.problem_type = "single_label_classification"
    with pytest.raises(ValueError, match=r"\(2, 4\).*got a torch.int64 tensor of shape \(2, 5\)"):
        model(x, labels=torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        model(x, labels=torch.zeros(2, 4))
    model.config.problem_type = "regression"
    with pytest.raises(ValueError, match="problem_type"):
        model(x, labels=torch.zeros(2, 4, NUM_LABELS))


def test_a_gradient_reaches_every_trainable_parameter():
    torch.manual_seed(0)
    model = AaspForAudioFrameClassification(AaspConfig(**tiny_config_kwargs(num_labels=NUM_LABELS))).train()
    _, batch, mask = padded_batch([64, 41], seed=4)
    model(batch, mask, labels=soft_labels(2, 4)).loss.backward()
    missing = [
        n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or p.grad.abs().sum() == 0)
    ]
    assert not missing, f"no gradient reaches {missing}"
    assert not model.aasp.embeddings.position_embeddings.requires_grad


@pytest.mark.parametrize("problem_type", ["multi_label_classification", "single_label_classification"])
def test_forward_and_loss_make_the_host_wait_for_nothing(problem_type):
    """The head and its loss read nothing back from the device in a training step on a padded batch (the frame mask,
    the label checks, shapes only, and the means over real frames stay on it): forward and backward wait for exactly
    what the encoder's forward alone waits for (transformers' SDPA mask asks whether a padding mask is all ones)."""
    model = frame_model(problem_type=problem_type).train()
    _, batch, mask = padded_batch([64, 41], seed=7)
    labels = soft_labels(2, 4) if problem_type == "multi_label_classification" else torch.tensor([[0, 1, 2, 1]] * 2)
    with HostSyncCounter() as encoder_syncs:
        model.aasp(batch, mask)
    with HostSyncCounter() as syncs:
        model(batch, mask, labels=labels).loss.backward()
    assert syncs.names == encoder_syncs.names
    with HostSyncCounter() as syncs:  # without padding, nothing at all
        model(batch[:1], labels=labels[:1]).loss.backward()
    assert syncs.names == []


def test_freeze_feature_encoder_freezes_only_the_stem():
    model = frame_model()
    model.freeze_feature_encoder()
    assert not any(p.requires_grad for p in model.aasp.embeddings.parameters())
    assert all(p.requires_grad for p in model.aasp.layers.parameters())
    assert model.classifier.dense.weight.requires_grad


# ----------------------------------------------------------------------------------------------- config fields
@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"event_thresholds": [0.5, 0.5]}, "event_thresholds"),  # 2 thresholds for 3 labels
        ({"event_thresholds": [0.5, 0.5, 0.5, 0.5]}, "event_thresholds"),
        ({"event_thresholds": [0.5, 1.5, 0.5]}, "event_thresholds"),
        ({"event_thresholds": [0.5, -0.1, 0.5]}, "event_thresholds"),
        ({"event_median_filter": 4}, "event_median_filter"),
        ({"event_median_filter": 0}, "event_median_filter"),
        ({"event_min_duration": -0.1}, "event_min_duration"),
        ({"event_merge_gap": -1}, "event_merge_gap"),
        ({"event_median_filter": 3.0}, "event_median_filter"),
    ],
)
def test_event_fields_are_validated_naming_them(overrides, field):
    with pytest.raises(StrictDataclassError, match=field):
        AaspConfig(num_labels=NUM_LABELS, **overrides)


def test_event_fields_round_trip_and_the_frame_duration(tmp_path):
    config = AaspConfig(
        num_labels=NUM_LABELS, event_thresholds=(0.3, 1, 0.55), event_median_filter=5, event_min_duration=0.25
    )
    assert config.event_thresholds == [0.3, 1.0, 0.55] and all(isinstance(t, float) for t in config.event_thresholds)
    assert (config.event_median_filter, config.event_min_duration, config.event_merge_gap) == (5, 0.25, 0.0)
    config.save_pretrained(tmp_path)
    again = AaspConfig.from_pretrained(tmp_path)
    assert again.event_thresholds == [0.3, 1.0, 0.55] and again.event_median_filter == 5
    assert again.to_dict() == config.to_dict()
    defaults = AaspConfig()
    assert defaults.event_thresholds is None and defaults.event_median_filter == 1
    assert defaults.frame_duration == pytest.approx(0.16)  # 16 frames of 10 ms
    assert AaspConfig(sblu_step=0.02).frame_duration == pytest.approx(0.32)
    assert AaspConfig(time_patch_size=8).frame_duration == pytest.approx(0.08)


# ----------------------------------------------------------------------------------------------- checkpoints
def test_save_load_round_trip_and_the_auto_class(tmp_path):
    model = frame_model(event_thresholds=[0.4, 0.5, 0.6], event_median_filter=3)
    _, x, mask = padded_batch([64, 41], seed=5)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"]["AutoModelForAudioFrameClassification"] == "modeling_aasp.AaspForAudioFrameClassification"
    # the checkpoint names its sound event pipeline (and only it: pipeline(model=folder) then finds the task)
    assert list(saved["custom_pipelines"]) == ["sound-event-detection"]
    assert saved["custom_pipelines"]["sound-event-detection"]["pt"] == ["AutoModelForAudioFrameClassification"]
    again = AutoModelForAudioFrameClassification.from_pretrained(tmp_path).eval()
    assert type(again) is AaspForAudioFrameClassification
    assert again.config.event_thresholds == [0.4, 0.5, 0.6] and again.config.event_median_filter == 3
    with torch.no_grad():
        expected, actual = model(x, mask), again(x, mask)
    torch.testing.assert_close(actual.logits, expected.logits)
    assert torch.equal(actual.frame_mask, expected.frame_mask)


def test_an_encoder_checkpoint_loads_into_the_encoder_and_only_the_head_is_new(tmp_path):
    torch.manual_seed(0)
    encoder = AaspModel(AaspConfig(**tiny_config_kwargs())).eval()
    encoder.save_pretrained(tmp_path)
    model, info = AaspForAudioFrameClassification.from_pretrained(
        tmp_path, num_labels=NUM_LABELS, output_loading_info=True
    )
    assert sorted(info["missing_keys"]) == [
        "classifier.dense.bias",
        "classifier.dense.weight",
        "classifier.layernorm.bias",
        "classifier.layernorm.weight",
    ]
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    saved = encoder.state_dict()
    for name, tensor in model.aasp.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    x = torch.randn(1, 64, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.eval().aasp(x).last_hidden_state, encoder(x).last_hidden_state)
    assert model(x).logits.shape == (1, 4, NUM_LABELS)


def test_the_clip_classifier_and_the_frame_classifier_share_the_encoder_layout(tmp_path):
    """A fine-tuned clip classifier's encoder loads into the frame classifier (encoder under `aasp`, as for every
    head), so a clip tagger can be fine-tuned on frame labels."""
    torch.manual_seed(0)
    clip = AaspForAudioClassification(AaspConfig(**tiny_config_kwargs(num_labels=NUM_LABELS))).eval()
    clip.save_pretrained(tmp_path)
    frames = AaspForAudioFrameClassification.from_pretrained(tmp_path).eval()
    x = torch.randn(1, 64, 32)
    with torch.no_grad():
        torch.testing.assert_close(frames.aasp(x).last_hidden_state, clip.aasp(x).last_hidden_state)


def test_remote_code_loads_in_a_fresh_process_without_the_package(tmp_path):
    """`AutoModelForAudioFrameClassification.from_pretrained(folder, trust_remote_code=True)`, offline, where
    `aasp_hf` cannot be imported: the same logits and frame mask as the in-process model."""
    model = frame_model(event_thresholds=[0.4, 0.5, 0.6])
    folder = tmp_path / "checkpoint"
    model.save_pretrained(folder)
    _, x, mask = padded_batch([64, 41], seed=6)
    torch.save({"x": x, "mask": mask}, tmp_path / "inputs.pt")
    run_without_aasp_hf(
        f"""
        import torch
        from transformers import AutoModelForAudioFrameClassification
        model = AutoModelForAudioFrameClassification.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        assert type(model).__name__ == "AaspForAudioFrameClassification", type(model).__name__
        assert model.config.event_thresholds == [0.4, 0.5, 0.6], model.config.event_thresholds
        assert abs(model.config.frame_duration - 0.16) < 1e-12, model.config.frame_duration
        inputs = torch.load({str(tmp_path / "inputs.pt")!r})
        with torch.no_grad():
            out = model(inputs["x"], inputs["mask"])
        torch.save({{"logits": out.logits, "frame_mask": out.frame_mask}}, "outputs.pt")
        """,
        tmp_path,
    )
    remote = torch.load(tmp_path / "outputs.pt")
    with torch.no_grad():
        expected = model(x, mask)
    np.testing.assert_allclose(remote["logits"].numpy(), expected.logits.numpy(), atol=1e-6)
    assert torch.equal(remote["frame_mask"], expected.frame_mask)
