"""Learning, not just running: a few minutes of pre-training on synthetic audio must give frozen features that a
linear probe classifies clearly better than the same model at random initialisation."""

import numpy as np
import pytest
import torch

import demo  # examples/demo.py (pytest's pythonpath)
from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel
from aasp_hf.data.synthetic import labelled_clips


@pytest.mark.slow
def test_pretrained_features_beat_random_features_in_a_linear_probe(tmp_path):
    encoder_dir = demo.pretrain(tmp_path / "pretrain", steps=1500, clips=1024, seed=0)
    rng = np.random.default_rng(1)
    train_clips, train_y = labelled_clips(100, rng)
    test_clips, test_y = labelled_clips(40, rng)
    extractor = AaspFeatureExtractor()
    train = extractor(train_clips, sampling_rate=16000, return_tensors="pt")
    test = extractor(test_clips, sampling_rate=16000, return_tensors="pt")
    torch.manual_seed(0)
    random_init = AaspModel(AaspConfig(**demo.tiny_model_config())).eval()
    pretrained = AaspModel.from_pretrained(encoder_dir).eval()
    random_accuracy = demo.linear_probe(random_init, train, train_y, test, test_y)
    pretrained_accuracy = demo.linear_probe(pretrained, train, train_y, test, test_y)
    print(f"linear probe: random init {random_accuracy:.3f}, pre-trained {pretrained_accuracy:.3f}")
    assert pretrained_accuracy >= random_accuracy + 0.05, (random_accuracy, pretrained_accuracy)
