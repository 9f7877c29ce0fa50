"""torch.compile (inductor) gives the eager numbers: the pre-training step (student with the token-local AaPE stem,
EMA teacher with the dense SBLU, predictor, all losses; forward and backward) and the encoder's inference with
padding. The graph-break checks (torch._dynamo.explain) are in test_modeling.py and test_pretraining_model.py;
these compile for real (about a minute on 2 CPU cores)."""

import shutil

import pytest
import torch
from conftest import pretraining_batch, tiny_pretraining_config

from aasp_hf import AaspForPreTraining, AaspModel

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None, reason="inductor's CPU backend needs a C++ compiler"
)


def test_compiled_pretraining_step_matches_eager():
    torch.manual_seed(0)
    config = tiny_pretraining_config()
    model = AaspForPreTraining(config).train()
    batch = pretraining_batch(config)
    eager_loss = model(*batch).loss
    eager_loss.backward()
    eager_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    compiled_loss = torch.compile(model)(*batch).loss
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert grads.keys() == eager_grads.keys() and any(name.startswith("aasp.embeddings.sblu") for name in grads)
    # attention key biases have an exactly-zero true gradient (softmax ignores a shift shared by all keys): both
    # sides are rounding noise there, hence the absolute tolerance tied to the largest gradient
    scale = max(g.abs().max().item() for g in eager_grads.values())
    for name, grad in grads.items():
        torch.testing.assert_close(grad, eager_grads[name], rtol=1e-4, atol=1e-6 * scale, msg=name)


def test_compiled_encoder_inference_with_padding_matches_eager(tiny_config):
    torch.manual_seed(0)
    model = AaspModel(tiny_config()).eval()
    x = torch.randn(2, 64, 32)
    mask = torch.ones(2, 64, dtype=torch.long)
    mask[1, 40:] = 0  # the second clip is padded
    with torch.no_grad():
        expected = model(x, attention_mask=mask).last_hidden_state
        out = torch.compile(model)(x, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
