"""AaspForPreTraining: predictor size, the teacher (its EMA update, a training-side function, is tested in
test_training_utils.py), gradients, loss composition, round trip. The views' masks come from conftest's
`sample_pretraining_masks` (the model only receives index tensors; these tests also run in a transformers tree,
without aasp_hf's training sampler or its training helpers)."""

import pytest
import torch

from aasp_hf import AaspConfig, AaspForPreTraining, AaspModel
from aasp_hf.modeling_aasp import masked_prediction_loss, teacher_targets
from conftest import pretraining_inputs, tiny_pretraining_config


def test_predictor_has_the_papers_size():
    with torch.device("meta"):
        model = AaspForPreTraining(AaspConfig())
    n = sum(p.numel() for p in model.predictor.parameters())
    # 3 CrossMAE blocks, width 512, 16 heads (paper Sec. Training Setup), K/V projected from the 768-d encoder output
    assert abs(n - 10.63e6) / 10.63e6 < 0.01, n


def test_teacher_starts_as_the_student_and_stays_in_eval_mode_without_gradients():
    model = AaspForPreTraining(tiny_pretraining_config()).train()
    for (name, t), s in zip(model.teacher.named_parameters(), model.aasp.parameters()):
        assert torch.equal(t, s), name
        assert not t.requires_grad
    assert model.aasp.training and not model.teacher.training
    assert not any(m.training for m in model.teacher.modules())


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"patch_embedding": "spe"},
        {"sblu_adaptive": False},
        {"sblu_phase": "analytic", "layer_norm_first": True},
        {
            "predictor_type": "cnn",
            "predictor_cnn_hidden_size": 32,
            "predictor_cnn_groups": 4,
            "predictor_cnn_num_layers": 2,
        },
    ],
)
def test_gradients_reach_every_student_predictor_and_head_parameter_and_never_the_teacher(overrides):
    torch.manual_seed(0)
    config = tiny_pretraining_config(**overrides)
    model = AaspForPreTraining(config).train()
    out = model(*pretraining_inputs(config))
    out.loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    missing = [n for n, p in trainable if p.grad is None or p.grad.abs().sum() == 0]
    assert not missing, missing
    assert all(p.grad is None for p in model.teacher.parameters())
    assert {n.split(".")[0] for n, _ in trainable} == {"aasp", "predictor", "contrastive_head"}


def test_loss_is_the_weighted_sum_of_its_parts_and_targets_come_from_every_teacher_block():
    torch.manual_seed(0)
    # block targets (hidden states); the default FFN targets have their own float64 oracle in test_fidelity_options
    config = tiny_pretraining_config(clip_loss_weight=0.7, contrastive_loss_weight=0.3, target_layer="block")
    model = AaspForPreTraining(config).eval()
    x, visible, queries = pretraining_inputs(config)
    out = model(x, visible, queries)
    expected = out.masked_prediction_loss + 0.7 * out.clip_loss + 0.3 * out.contrastive_loss
    torch.testing.assert_close(out.loss, expected)
    with torch.no_grad():
        hidden = model.teacher(x, output_hidden_states=True).hidden_states
    targets = teacher_targets([h[:, 1:] for h in hidden[1:]], "tokens")
    torch.testing.assert_close(out.targets, targets)
    b, m, q = queries.shape
    gathered = torch.stack([targets[i, queries[i, j]] for i in range(b) for j in range(m)]).reshape(b, m, q, -1)
    torch.testing.assert_close(out.masked_prediction_loss, masked_prediction_loss(out.predictions, gathered))
    assert out.predictions.shape == (b, m, q, config.hidden_size)


def test_the_contrastive_loss_takes_its_candidates_from_the_gather_it_is_given():
    """The forward gathers across processes only through `contrastive_gather`: a gather that adds the views of
    another (here made-up) process changes L_c alone, as the loss given that gather computes it."""
    torch.manual_seed(0)
    config = tiny_pretraining_config()
    model = AaspForPreTraining(config).eval()
    x, visible, queries = pretraining_inputs(config)
    seen = []

    def two_processes(anchors):  # this process is the second of two; the first holds the anchors reversed
        seen.append(anchors.shape)
        return torch.cat([anchors.flip(0), anchors]), anchors.shape[0]

    with torch.no_grad():
        local = model(x, visible, queries)
        gathered = model(x, visible, queries, contrastive_gather=two_processes)
    assert seen == [(x.shape[0] * config.mask_num_views, config.hidden_size // 2)]
    assert not torch.equal(gathered.contrastive_loss, local.contrastive_loss)
    assert torch.equal(gathered.masked_prediction_loss, local.masked_prediction_loss)
    assert torch.equal(gathered.clip_loss, local.clip_loss)


def test_round_trip_keeps_student_and_teacher_and_the_encoder_loads_alone(tmp_path):
    torch.manual_seed(0)
    config = tiny_pretraining_config()
    model = AaspForPreTraining(config)
    with torch.no_grad():  # make the teacher differ from the student
        for p in model.aasp.parameters():
            p.add_(0.01)
    model.save_pretrained(tmp_path)
    again = AaspForPreTraining.from_pretrained(tmp_path)
    for (name, a), b in zip(again.state_dict().items(), model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    encoder = AaspModel.from_pretrained(tmp_path).eval()  # the student, under `aasp.`
    x = torch.randn(1, 64, 32)
    torch.testing.assert_close(encoder(x).last_hidden_state, model.aasp.eval()(x).last_hidden_state)


def test_student_input_values_reach_the_student_only():
    """The teacher's targets come from input_values whatever the student sees, the student's predictions from its own
    view; passing no student view is the same as passing input_values."""
    torch.manual_seed(0)
    config = tiny_pretraining_config()
    model = AaspForPreTraining(config).eval()
    x, visible, queries = pretraining_inputs(config)
    recoloured = x + torch.linspace(-0.5, 0.5, config.num_mel_bins)  # (B, T, F) + (F,)
    plain, same = model(x, visible, queries), model(x, visible, queries, x)
    other = model(x, visible, queries, recoloured)
    torch.testing.assert_close(other.targets, plain.targets)
    torch.testing.assert_close(same.loss, plain.loss)
    with torch.no_grad():
        student = model.aasp(recoloured, visible_indices=visible).last_hidden_state
    b, m, q = queries.shape
    torch.testing.assert_close(
        other.predictions.reshape(b * m, q, -1),
        model.predictor(student, visible.reshape(b * m, -1), queries.reshape(b * m, -1)),
    )
    assert (other.predictions - plain.predictions).abs().max() > 1e-5  # the two views give other predictions
    with pytest.raises(ValueError, match="student_input_values"):
        model(x, visible, queries, x[:, :-16])


def test_hidden_states_and_attentions_are_the_students_and_leave_the_teacher_alone():
    """`output_hidden_states` / `output_attentions` return the student encoder's, on each view's visible tokens; the
    targets do not change, and the teacher records no attention weights whatever the config asks for."""
    torch.manual_seed(0)
    config = tiny_pretraining_config(target_layer="block")
    model = AaspForPreTraining(config).eval()
    with torch.no_grad():  # make the teacher differ from the student
        for p in model.aasp.parameters():
            p.add_(0.01)
    x, visible, queries = pretraining_inputs(config)
    b, m, v = visible.shape
    with torch.no_grad():
        plain = model(x, visible, queries)
        recorded = model(x, visible, queries, output_hidden_states=True, output_attentions=True)
        student = model.aasp(x, visible_indices=visible, output_hidden_states=True, output_attentions=True)
    assert plain.hidden_states is None and plain.attentions is None
    assert len(recorded.hidden_states) == config.num_hidden_layers + 1
    assert len(recorded.attentions) == config.num_hidden_layers
    for got, expected in zip(recorded.hidden_states + recorded.attentions, student.hidden_states + student.attentions):
        assert torch.equal(got, expected)
    assert recorded.attentions[0].shape == (b * m, config.num_attention_heads, 1 + v, 1 + v)
    assert torch.equal(recorded.targets, plain.targets)
    # the config's flag (which needs eager attention) asks every AaspModel inside: the teacher records none
    model.set_attn_implementation("eager")
    model.config.output_attentions = True
    teacher_outputs = []
    model.teacher.register_forward_hook(lambda module, args, output: teacher_outputs.append(output))
    with torch.no_grad():
        flagged = model(x, visible, queries)
    assert len(flagged.attentions) == config.num_hidden_layers
    assert teacher_outputs[0].attentions is None


def test_bad_query_shape_raises():
    config = tiny_pretraining_config()
    x, visible, queries = pretraining_inputs(config)
    with pytest.raises(ValueError, match="query_indices"):
        AaspForPreTraining(config)(x, visible, queries[:, :2])


def test_pretraining_step_traces_without_graph_breaks():
    config = tiny_pretraining_config()
    explanation = torch._dynamo.explain(AaspForPreTraining(config).train())(*pretraining_inputs(config))
    assert explanation.graph_break_count == 0, explanation.break_reasons


def test_cnn_predictor_sees_only_visible_tokens_and_keeps_the_grid():
    """EAT's CNN predictor with a zero fill (`predictor_cnn_mask_noise_std=0`): hidden positions start from zeros, so
    changing the student's output only at visible tokens changes predictions, and the output at each query comes from
    its own grid position."""
    torch.manual_seed(0)
    config = tiny_pretraining_config(
        predictor_type="cnn", predictor_cnn_hidden_size=32, predictor_cnn_groups=4, predictor_cnn_num_layers=2,
        predictor_cnn_kernel_size=1, predictor_cnn_mask_noise_std=0.0,
    )  # fmt: skip
    predictor = AaspForPreTraining(config).predictor
    encoder_output = torch.randn(2, 1 + 3, 32)
    visible = torch.tensor([[0, 2, 5], [1, 3, 4]])
    queries = torch.tensor([[1, 7], [0, 6]])
    out = predictor(encoder_output, visible, queries)
    assert out.shape == (2, 2, 32)
    # with 1×1 convolutions a query far from every visible token sees only zeros: the same for both clips
    torch.testing.assert_close(out[0, 1], out[1, 1])
    assert (
        (
            predictor(encoder_output * 2, visible, torch.tensor([[2, 5], [3, 4]]))
            - predictor(encoder_output, visible, torch.tensor([[2, 5], [3, 4]]))
        ).abs()
        > 0
    ).any()
