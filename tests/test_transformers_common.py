"""transformers' own common tests, run against our classes as transformers runs them against AST.

`ModelTesterMixin` (every model merged into transformers must pass it), `ConfigTester` and
`SequenceFeatureExtractionTestMixin` come unchanged from the pinned transformers release's sdist, unpacked by
`make setup` (tests/transformers_release.py). The testers below play the part of
`tests/models/audio_spectrogram_transformer/test_modeling_audio_spectrogram_transformer.py`: the same shape of
tester, the same overrides and skips that AST's file declares, and no others except where a comment says why a test
cannot apply to an audio encoder. The model tests run twice: on whole clips and on a padded batch with a frame
`attention_mask` (the mask changes the code path: token masks in the Lambda encoder, the SBLU and attention).
"""

import inspect
import os
import unittest

import numpy as np
import pytest
import torch
import transformers
from torch import nn

from conftest import tiny_config_kwargs

from aasp_hf import (
    AaspConfig,
    AaspFeatureExtractor,
    AaspForAudioClassification,
    AaspForAudioFrameClassification,
    AaspModel,
)

try:
    import transformers_release_tests.test_modeling_common  # noqa: F401
except ImportError:
    if os.environ.get("CI"):  # CI runs `make setup`, which unpacks them: their absence there is a failure
        raise
    pytest.skip(
        "transformers' common tests are not unpacked: run `make setup` (python tests/transformers_release.py)",
        allow_module_level=True,
    )
from transformers_release_tests.test_configuration_common import ConfigTester  # noqa: E402
from transformers_release_tests.test_modeling_common import ModelTesterMixin, floats_tensor, ids_tensor  # noqa: E402
from transformers_release_tests.test_sequence_feature_extraction_common import (  # noqa: E402
    SequenceFeatureExtractionTestMixin,
)
from transformers_release_tests.utils.test_configuration_utils import config_common_kwargs  # noqa: E402

TRANSFORMERS_VERSION = tuple(int(part) for part in transformers.__version__.split(".")[:2])


class AaspModelTester:
    """The suite's tiny AaPE encoder (conftest) with 64 mel bins (4 frequency patches) and 64 frames (4 time patches).
    `padded=True` gives the batch a frame attention_mask in which every other clip is cut short (not on a patch
    boundary), as AaspFeatureExtractor pads a batch of unequal clips. As many mel bins as frames: transformers 5.4's
    eager-against-SDPA tests build their frame mask as long as the input's last axis (the mel bins; 5.23's take
    `seq_length`), which the model refuses when the two differ."""

    def __init__(self, parent, padded=False, batch_size=3, num_frames=64, num_mel_bins=64, num_labels=5):
        self.parent = parent
        self.padded = padded
        self.batch_size = batch_size
        self.num_frames = num_frames
        self.num_mel_bins = num_mel_bins
        self.num_labels = num_labels
        tiny = tiny_config_kwargs()
        self.hidden_size = tiny["hidden_size"]
        self.num_hidden_layers = tiny["num_hidden_layers"]
        self.num_attention_heads = tiny["num_attention_heads"]
        self.is_training = True
        # The attention mask is per frame (B, T): the common tests build theirs `seq_length` long; the encoder's
        # sequence (hidden states, attention maps) is CLS plus the patch tokens, `encoder_seq_length`.
        self.seq_length = num_frames
        self.encoder_seq_length = 1 + (num_frames // 16) * (num_mel_bins // 16)

    def get_config(self):
        return AaspConfig(
            **tiny_config_kwargs(num_frames=self.num_frames, num_mel_bins=self.num_mel_bins, num_labels=self.num_labels)
        )

    def prepare_config_and_inputs(self):
        input_values = floats_tensor([self.batch_size, self.num_frames, self.num_mel_bins])
        labels = ids_tensor([self.batch_size], self.num_labels)
        return self.get_config(), input_values, labels

    def prepare_config_and_inputs_for_common(self):
        config, input_values, _ = self.prepare_config_and_inputs()
        inputs_dict = {"input_values": input_values}
        if self.padded:
            lengths = [self.num_frames if i % 2 == 0 else self.num_frames - 21 for i in range(self.batch_size)]
            attention_mask = (torch.arange(self.num_frames)[None] < torch.tensor(lengths)[:, None]).long()  # (B, T)
            inputs_dict["input_values"] = input_values * attention_mask[..., None]  # padding is zeros
            inputs_dict["attention_mask"] = attention_mask
        return config, inputs_dict

    def create_and_check_model(self, config, input_values, labels):
        model = AaspModel(config).eval()
        result = model(input_values)
        expected = (self.batch_size, self.encoder_seq_length, self.hidden_size)
        self.parent.assertEqual(result.last_hidden_state.shape, expected)
        classifier = AaspForAudioClassification(config).eval()
        self.parent.assertEqual(classifier(input_values).logits.shape, (self.batch_size, self.num_labels))
        frames = AaspForAudioFrameClassification(config).eval()
        expected = (self.batch_size, self.num_frames // 16, self.num_labels)
        self.parent.assertEqual(frames(input_values).logits.shape, expected)


@pytest.fixture(scope="module", autouse=True)
def aasp_in_transformers_model_tables():
    """The common tests find a model's task by its class name in transformers' static tables of merged models
    (e.g. `test_training` gives labels to the classes of MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES and skips
    those of MODEL_MAPPING_NAMES, the bare encoders). Our classes are entered as a merged "aasp" would be, for this
    module only."""
    from transformers.models.auto import modeling_auto

    tables = [
        (modeling_auto.MODEL_MAPPING_NAMES, "AaspModel"),
        (modeling_auto.MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES, "AaspForAudioClassification"),
        (modeling_auto.MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES, "AaspForAudioFrameClassification"),
    ]
    for table, name in tables:
        assert "aasp" not in table
        table["aasp"] = name
    yield
    for table, _ in tables:
        del table["aasp"]


class AaspModelTest(ModelTesterMixin, unittest.TestCase):
    """As AST's ASTModelTest: the overrides and the one skip it declares (no inputs_embeds)."""

    all_model_classes = (AaspModel, AaspForAudioClassification, AaspForAudioFrameClassification)
    test_resize_embeddings = False
    padded = False

    def setUp(self):
        self.model_tester = AaspModelTester(self, padded=self.padded)
        # AST's file passes hidden_size=32; AaspConfig checks that its head counts and the Lambda encoder's
        # reduction divide the widths, so the width is 48 (12 heads of 4, a Lambda encoder 8 wide)
        self.config_tester = ConfigTester(self, config_class=AaspConfig, has_text_modality=False, hidden_size=48)

    def test_config(self):
        self.config_tester.run_common_tests()

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        # The common tests give labels to the heads of transformers' tables by task and have no case for audio frame
        # classification: the frame head gets multi-label targets, (batch_size, num_time_patches, num_labels), as its
        # loss takes them (the training tests would otherwise call backward on no loss).
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is AaspForAudioFrameClassification:
            num_time_patches = self.model_tester.num_frames // 16
            shape = (self.model_tester.batch_size, num_time_patches, self.model_tester.num_labels)
            inputs_dict["labels"] = torch.zeros(shape, device=inputs_dict["input_values"].device)
        return inputs_dict

    @unittest.skip(reason="AaSP does not use inputs_embeds")  # AST's own skip
    def test_inputs_embeds(self):
        pass

    def test_model_get_set_embeddings(self):  # AST's override: the input embedding is a conv stem
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config)
            self.assertIsInstance(model.get_input_embeddings(), nn.Module)
            output_embeddings = model.get_output_embeddings()
            self.assertTrue(output_embeddings is None or isinstance(output_embeddings, nn.Linear))

    def test_forward_signature(self):  # AST's override: the first argument is input_values
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            arg_names = [*inspect.signature(model_class(config).forward).parameters.keys()]
            self.assertListEqual(arg_names[:1], ["input_values"])

    def test_model(self):
        self.model_tester.create_and_check_model(*self.model_tester.prepare_config_and_inputs())

    def test_reverse_loading_mapping(self):
        # transformers 5.4 to 5.8 look checkpoint conversions up by model_type only, so the head's renamings are
        # registered for "aasp" there (modeling_aasp.py) and reach the bare encoder too, which has no head whose keys
        # they could rename: there the common test runs on the classifier alone
        if TRANSFORMERS_VERSION < (5, 9):
            self.all_model_classes = (AaspForAudioClassification,)
        super().test_reverse_loading_mapping()


class AaspPaddedModelTest(AaspModelTest):
    """The same tests on a padded batch with a frame attention_mask."""

    padded = True

    @unittest.skip(reason="runs once, in AaspModelTest: the config does not depend on the inputs")
    def test_config(self):
        pass


def test_config_common_kwargs_names_every_public_config_attribute():
    """The stand-in table of tests/transformers_release.py covers every public attribute of transformers'
    PreTrainedConfig(), each with a non-default value (so the config tester checks all of them)."""
    from transformers import PreTrainedConfig

    base = PreTrainedConfig()
    public = {key for key in base.__dict__ if not key.startswith("_")} - {"transformers_version", "is_encoder_decoder"}
    public.add("output_attentions")  # a property over `_output_attentions`
    assert public == set(config_common_kwargs), sorted(public ^ set(config_common_kwargs))
    assert not [key for key, value in config_common_kwargs.items() if getattr(base, key) == value]


class AaspFeatureExtractionTester:
    """Raw 16 kHz waveforms of unequal lengths, as AST's feature-extraction tester gives them (feature_size 1)."""

    def __init__(self, parent, batch_size=7, min_seq_length=400, max_seq_length=2000, feature_size=1):
        self.parent = parent
        self.batch_size = batch_size
        self.min_seq_length = min_seq_length
        self.max_seq_length = max_seq_length
        self.seq_length_diff = (max_seq_length - min_seq_length) // (batch_size - 1)
        self.feature_size = feature_size
        self.padding_value = 0.0
        self.sampling_rate = 16000
        self.return_attention_mask = True

    def prepare_feat_extract_dict(self):
        return {
            "feature_size": self.feature_size,
            "sampling_rate": self.sampling_rate,
            "padding_value": self.padding_value,
            "return_attention_mask": self.return_attention_mask,
        }

    def prepare_inputs_for_common(self, equal_length=False, numpify=False):
        rng = np.random.default_rng(0)
        if equal_length:
            lengths = [self.max_seq_length] * self.batch_size
        else:
            lengths = range(self.min_seq_length, self.max_seq_length, self.seq_length_diff)
        inputs = [rng.random(length).tolist() for length in lengths]
        return [np.asarray(x) for x in inputs] if numpify else inputs


class AaspFeatureExtractionTest(SequenceFeatureExtractionTestMixin, unittest.TestCase):
    feature_extraction_class = AaspFeatureExtractor

    def setUp(self):
        self.feat_extract_tester = AaspFeatureExtractionTester(self)
