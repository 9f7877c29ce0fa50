"""transformers' own common tests (`ModelTesterMixin`), run against `AaspForPreTraining`.

Every model class transformers ships is run through its common tests (its repository check, check_repo, refuses a
model file whose classes no test file lists in `all_model_classes`). The pre-training model's forward takes, besides
the clips, the masks of the student's views: the tester draws them with `sample_pretraining_masks` (conftest), a
seeded stand-in for the training sampler, which lives in aasp_hf's data pipeline and not in a transformers tree.
The output's `hidden_states` and `attentions` are the student encoder's, on the visible tokens of each view, so the
common tests that read them check those. The skips are those AST's and wav2vec2's files declare (wav2vec2's
pre-training class runs in its common tests): no `inputs_embeds`, no token embeddings to resize. Every other common
test runs.
"""

import copy
import inspect
import os
import unittest

import pytest
import torch
import transformers
from torch import nn

from conftest import sample_pretraining_masks, tiny_config_kwargs

from aasp_hf import AaspConfig, AaspForPreTraining

try:
    import transformers_release_tests.test_modeling_common  # noqa: F401
except ImportError:
    if os.environ.get("CI"):  # CI runs `make setup`, which unpacks them: their absence there is a failure
        raise
    pytest.skip(
        "transformers' common tests are not unpacked: run `make setup` (python tests/transformers_release.py)",
        allow_module_level=True,
    )
from transformers_release_tests.test_modeling_common import ModelTesterMixin, floats_tensor  # noqa: E402

TRANSFORMERS_VERSION = tuple(int(part) for part in transformers.__version__.split(".")[:2])


class AaspForPreTrainingModelTester:
    """The suite's tiny AaPE encoder (conftest) with a 16-wide, 2-layer predictor; 32 mel bins and 64 frames give a
    2 × 4 patch grid, N = 8 tokens: each of the M = 4 views of a clip shows V = 2 tokens to the student and asks the
    predictor for Q = 4 of the 6 it hides (the config's mask_ratio 0.8 and mask_query_ratio 0.75)."""

    def __init__(self, parent, batch_size=3, num_frames=64, num_mel_bins=32):
        self.parent = parent
        self.batch_size = batch_size
        self.num_frames = num_frames
        self.num_mel_bins = num_mel_bins
        tiny = tiny_config_kwargs()
        self.hidden_size = tiny["hidden_size"]
        self.num_hidden_layers = tiny["num_hidden_layers"]
        self.num_attention_heads = tiny["num_attention_heads"]
        self.is_training = True
        # the common tests read the student encoder's hidden states and attentions: CLS and the V visible tokens of
        # each view, (B·M, 1 + V, D)
        config = self.get_config()
        num_tokens = config.num_frequency_patches * config.num_time_patches  # N
        self.seq_length = 1 + int(round((1.0 - config.mask_ratio) * num_tokens))  # 1 + V

    def get_config(self):
        predictor = {"predictor_hidden_size": 16, "predictor_num_attention_heads": 2, "predictor_num_layers": 2}
        return AaspConfig(**tiny_config_kwargs(num_frames=self.num_frames, num_mel_bins=self.num_mel_bins, **predictor))

    def prepare_config_and_inputs(self):
        config = self.get_config()
        input_values = floats_tensor([self.batch_size, self.num_frames, self.num_mel_bins])
        generator = torch.Generator().manual_seed(0)
        visible_indices, query_indices = sample_pretraining_masks(config, self.batch_size, generator=generator)
        return config, input_values, visible_indices, query_indices

    def prepare_config_and_inputs_for_common(self):
        config, input_values, visible_indices, query_indices = self.prepare_config_and_inputs()
        inputs_dict = {"input_values": input_values, "visible_indices": visible_indices, "query_indices": query_indices}
        return config, inputs_dict

    def create_and_check_model(self, config, input_values, visible_indices, query_indices):
        model = AaspForPreTraining(config).eval()
        result = model(input_values, visible_indices, query_indices)
        batch_size, num_views, num_queries = query_indices.shape
        num_tokens = config.num_frequency_patches * config.num_time_patches
        self.parent.assertEqual(result.predictions.shape, (batch_size, num_views, num_queries, self.hidden_size))
        self.parent.assertEqual(result.targets.shape, (batch_size, num_tokens, self.hidden_size))
        self.parent.assertEqual(result.loss.shape, ())
        self.parent.assertTrue(torch.isfinite(result.loss))


@pytest.fixture(scope="module", autouse=True)
def aasp_in_transformers_pretraining_table():
    """The common tests find a model's task by its class name in transformers' static tables of merged models; the
    pre-training class is entered in MODEL_FOR_PRETRAINING_MAPPING_NAMES as a merged "aasp" would be, for this module
    only."""
    from transformers.models.auto import modeling_auto

    table = modeling_auto.MODEL_FOR_PRETRAINING_MAPPING_NAMES
    assert "aasp" not in table
    table["aasp"] = "AaspForPreTraining"
    yield
    del table["aasp"]


class AaspForPreTrainingModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (AaspForPreTraining,)
    # the masks travel with the clips where a common test rebuilds the inputs (eager against SDPA)
    additional_model_inputs = ["visible_indices", "query_indices"]
    test_resize_embeddings = False
    # The teacher (an EMA copy of the student) runs under no_grad and never has a gradient, even where the
    # gradient-checkpointing tests of transformers' main branch (5.16) set requires_grad on every parameter (releases
    # since leave parameters frozen on purpose alone). That every student, predictor and head parameter gets one is
    # checked by test_pretraining_model.py; the checkpointing tests still compare which gradients are non-zero.
    test_all_params_have_gradient = False

    def setUp(self):
        self.model_tester = AaspForPreTrainingModelTester(self)

    def test_eager_matches_sdpa_predictions(self):
        """The common eager-against-SDPA test compares the student encoder's hidden states; this compares what the
        predictor's cross-attention makes of them: eager attention and SDPA give the same predictions and loss.
        Weights 25 times the usual scale: at initializer_range 0.02 the tiny model's attention is nearly uniform, and
        an eager path that scaled its logits by 1.5 would still agree to 1e-5."""
        config, inputs_dict = self.model_tester.prepare_config_and_inputs_for_common()
        config.initializer_range = 0.5
        torch.manual_seed(0)
        eager = AaspForPreTraining._from_config(copy.deepcopy(config), attn_implementation="eager").eval()
        sdpa = AaspForPreTraining._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
        sdpa.load_state_dict(eager.state_dict())
        for model, implementation in ((eager, "eager"), (sdpa, "sdpa")):  # every attention layer's config follows
            self.assertEqual(
                {m.config._attn_implementation for m in model.modules() if hasattr(m, "config")}, {implementation}
            )
        with torch.no_grad():
            expected, actual = eager(**inputs_dict), sdpa(**inputs_dict)
        torch.testing.assert_close(actual.predictions, expected.predictions, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(actual.loss, expected.loss, rtol=1e-4, atol=1e-4)

    def test_reverse_loading_mapping(self):
        # transformers 5.4 to 5.8 look checkpoint conversions up by model_type only, so the classifier head's
        # renamings registered for "aasp" there (modeling_aasp.py) reach the pre-training model too, which has no head
        # whose keys they could rename; later releases find no conversion for it
        if TRANSFORMERS_VERSION < (5, 9):
            self.skipTest("transformers < 5.9 applies the classifier's checkpoint conversion to every aasp class")
        super().test_reverse_loading_mapping()

    def test_model(self):
        self.model_tester.create_and_check_model(*self.model_tester.prepare_config_and_inputs())

    @unittest.skip(reason="AaSP does not use inputs_embeds")  # as wav2vec2's and AST's files
    def test_inputs_embeds(self):
        pass

    def test_model_get_set_embeddings(self):  # AST's override: the input embedding is the student's conv stem
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        model = AaspForPreTraining(config)
        self.assertIsInstance(model.get_input_embeddings(), nn.Module)
        self.assertIsNone(model.get_output_embeddings())

    def test_forward_signature(self):  # AST's override: the clips, then the views' masks
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        arg_names = [*inspect.signature(AaspForPreTraining(config).forward).parameters.keys()]
        self.assertListEqual(arg_names[:3], ["input_values", "visible_indices", "query_indices"])
