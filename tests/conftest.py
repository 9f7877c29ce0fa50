import os

import pytest
import torch

# Nothing in the test suite may reach the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
torch.set_num_threads(2)


def tiny_config_kwargs(**overrides):
    """Tiny encoder: D=32, 2 layers, 32 mel bins (2 frequency patches), 64 frames (4 time patches)."""
    kwargs = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_mel_bins=32,
        num_frames=64,
        sblu_hidden_size=8,
        sblu_output_size=16,
        sblu_kernel_size=15,
        lambda_encoder_reduction=4,
        lambda_encoder_num_layers=1,
        lambda_encoder_num_attention_heads=2,
    )
    kwargs.update(overrides)
    return kwargs


@pytest.fixture
def tiny_config():
    from aasp_hf import AaspConfig

    def make(**overrides):
        return AaspConfig(**tiny_config_kwargs(**overrides))

    return make
