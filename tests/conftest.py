import json
import os
import signal
from pathlib import Path

import pytest
import torch

# Nothing in the test suite may reach the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# The torch threads of the test process, and of a subprocess whose weights a test compares with a run made here
# (`SAME_THREADS` in its environment). CPU kernels split their sums by thread (LayerNorm's weight gradient, oneDNN's
# convolutions): on an AMD EPYC the same fine-tuning run gives weights up to 1.3e-6 apart with 1 and with 2 threads,
# and bit-identical ones with the same count. A resumed run equals the uninterrupted one when both use the same
# number of threads (docs/reliability.md).
TORCH_THREADS = 2
torch.set_num_threads(TORCH_THREADS)
SAME_THREADS = {"OMP_NUM_THREADS": str(TORCH_THREADS)}

# The stop signals' dispositions in the test process. An ignored signal stays ignored in every process started after
# it (exec keeps SIG_IGN): a test that calls a script's entry point here (`run_stoppable` ignores the stop signals
# once `main` is done, for the interpreter's shutdown) left SIGTERM and SIGUSR1 ignored, and the later tests of
# tests/test_stop_signals.py signalled subprocesses that could no longer be stopped.
STOP_SIGNAL_NUMBERS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


@pytest.fixture(autouse=True)
def stop_signals_left_as_found():
    """Fails the test that leaves a stop signal's handler changed, after putting the handler back."""
    before = {number: signal.getsignal(number) for number in STOP_SIGNAL_NUMBERS}
    yield
    changed = [signal.Signals(n).name for n, handler in before.items() if signal.getsignal(n) is not handler]
    for number, handler in before.items():
        signal.signal(number, handler)
    if changed:
        pytest.fail(f"the test left the handlers of {', '.join(changed)} changed; restore them (see conftest.py)")


def tiny_config_kwargs(**overrides):
    """Tiny encoder: D=32, 2 layers, 32 mel bins (2 frequency patches), 64 frames (4 time patches)."""
    kwargs = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "num_mel_bins": 32,
        "num_frames": 64,
        "sblu_hidden_size": 8,
        "sblu_output_size": 16,
        "sblu_kernel_size": 15,
        "lambda_encoder_reduction": 4,
        "lambda_encoder_num_layers": 1,
        "lambda_encoder_num_attention_heads": 2,
    }
    kwargs.update(overrides)
    return kwargs


def save_tiny_encoder(path, **overrides):
    """Saves a tiny 128-mel-bin, one-layer encoder with the default feature extractor to `path` (a folder the
    downstream scripts take as --model_name_or_path); `overrides` change its config. Seeds torch first."""
    from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel

    torch.manual_seed(0)
    config = AaspConfig(**tiny_config_kwargs(**{"num_mel_bins": 128, "num_hidden_layers": 1, **overrides}))
    AaspModel(config).save_pretrained(path)
    AaspFeatureExtractor().save_pretrained(path)
    return path


@pytest.fixture
def tiny_config():
    from aasp_hf import AaspConfig

    def make(**overrides):
        return AaspConfig(**tiny_config_kwargs(**overrides))

    return make


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a launch's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_without_aasp_hf(script: str, workdir):
    """Runs `script` in a fresh interpreter where any import of `aasp_hf` fails, offline, with its own HF modules
    cache (remote code must work from the files saved next to the weights alone). Returns the finished process."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    prelude = 'import sys\nsys.modules["aasp_hf"] = None  # any import of our package now raises ImportError\n'
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(Path(workdir) / "modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def remote_code_logits(folder, audio, workdir):
    """Logits of the classifier saved in `folder` for `audio`, loaded with `trust_remote_code=True` by
    `run_without_aasp_hf`; also checks that `AutoModel` resolves to the remote `AaspModel`."""
    import numpy as np

    np.save(f"{workdir}/audio.npy", audio)
    run_without_aasp_hf(
        f"""
        import numpy as np, torch
        from transformers import AutoFeatureExtractor, AutoModel, AutoModelForAudioClassification
        path = {str(folder)!r}
        fe = AutoFeatureExtractor.from_pretrained(path, trust_remote_code=True)
        model = AutoModelForAudioClassification.from_pretrained(path, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        assert type(AutoModel.from_pretrained(path, trust_remote_code=True)).__name__ == "AaspModel"
        features = fe(np.load({f"{workdir}/audio.npy"!r}), sampling_rate=16000, return_tensors="pt")
        with torch.no_grad():
            np.save({f"{workdir}/remote.npy"!r}, model(**features).logits.numpy())
        """,
        workdir,
    )
    return np.load(f"{workdir}/remote.npy")


def cli_args(**options) -> list:
    """{"max_steps": 6, "resume": True, "x": None} -> ["--max_steps", "6", "--resume"] (None is left out)."""
    out = []
    for key, value in options.items():
        if value is True:
            out.append(f"--{key}")
        elif value is not None:
            out += [f"--{key}", str(value)]
    return out


# ----------------------------------------------------------------------------------------------- the scripts' short runs
# The tests run examples/pretrain.py and examples/finetune.py with a few short commands; each is written here once.
# A test changes what it needs with keyword options (`cli_args`: True a flag, None leaves an option out) and appends
# raw words (`"--resume"`) after them; the output folder comes last, before those words.
ROOT = Path(__file__).resolve().parents[1]
TINY_PRESET = ROOT / "examples" / "configs" / "pretrain_tiny_cpu.json"
# The tests' pre-training model without a preset: the tiny encoder, a 32-wide one-layer predictor, two mask views of
# 1×2 and 2×1 blocks.
TINY_PRETRAINING_MODEL = tiny_config_kwargs(
    predictor_hidden_size=32,
    predictor_num_layers=1,
    predictor_num_attention_heads=2,
    mask_num_views=2,
    mask_block_sizes=[[1, 2], [2, 1]],
)


def tiny_preset_argv(output_dir, *extra, **options) -> list:
    """examples/pretrain.py on the tiny CPU preset (examples/configs/pretrain_tiny_cpu.json): 8 synthetic clips in
    micro-batches of 4, 2 steps after a 1-step warm-up, a checkpoint and a log line every step, no tracker."""
    options = {
        "synthetic_clips": 8,
        "per_device_train_batch_size": 4,
        "max_steps": 2,
        "warmup_steps": 1,
        "save_steps": 1,
        "logging_steps": 1,
        "report_to": "none",
        **options,
        "output_dir": str(output_dir),
    }
    return ["--config", str(TINY_PRESET), *cli_args(**options), *extra]


def pretrain_argv(output_dir, *extra, model: dict | None = None, **options) -> list:
    """examples/pretrain.py on `model` (default `TINY_PRETRAINING_MODEL`) with no preset: 10 synthetic 1-s clips cut
    to 0.5 s, micro-batches of 4, 6 steps after a 2-step warm-up, a log line every step and a checkpoint every 3, no
    tracker, seed 3."""
    options = {
        "synthetic_clips": 10,
        "synthetic_seconds": 1.0,
        "crop_seconds": 0.5,
        "model_config": json.dumps(TINY_PRETRAINING_MODEL if model is None else model),
        "per_device_train_batch_size": 4,
        "max_steps": 6,
        "warmup_steps": 2,
        "logging_steps": 1,
        "save_steps": 3,
        "report_to": "none",
        "seed": 3,
        **options,
        "output_dir": str(output_dir),
    }
    return [*cli_args(**options), *extra]


def finetune_argv(encoder, output_dir, *extra, **options) -> list:
    """examples/finetune.py: a classifier on the encoder folder `encoder` fine-tuned on the built-in synthetic clips,
    4 train clips per class cut to 0.5 s, micro-batches of 4, 2 steps after a 1-step warm-up."""
    options = {
        "model_name_or_path": str(encoder),
        "synthetic_per_class": 4,
        "clip_seconds": 0.5,
        "per_device_train_batch_size": 4,
        "max_steps": 2,
        "warmup_steps": 1,
        **options,
        "output_dir": str(output_dir),
    }
    return [*cli_args(**options), *extra]


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory):
    """`save_tiny_encoder`'s folder, saved once for the session (tests only read it)."""
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny_encoder"))


@pytest.fixture(scope="session")
def finished_pretraining(tmp_path_factory):
    """A finished run of the tiny preset (`tiny_preset_argv`): 2 steps, checkpoints 1 and 2, results and encoder,
    made once for the session; a test that changes it works on a copy (`shutil.copytree`)."""
    import pretrain  # examples/pretrain.py (pytest's pythonpath)

    out = tmp_path_factory.mktemp("finished_pretraining") / "run"
    results = pretrain.main(tiny_preset_argv(out))
    assert results["step"] == 2 and "loss" in results
    return out


@pytest.fixture(scope="session")
def finished_finetuning(tiny_encoder, tmp_path_factory):
    """(run folder, its command): a finished fine-tuning run of the tiny encoder (`finetune_argv`, micro-batches of
    10, a checkpoint every step: checkpoints 1 and 2, results and the best model), made once for the session; a test
    that changes it works on a copy, with the copy's folder as the command's last word."""
    import finetune  # examples/finetune.py (pytest's pythonpath)

    out = tmp_path_factory.mktemp("finished_finetuning") / "run"
    command = finetune_argv(
        tiny_encoder, out, per_device_train_batch_size=10, per_device_eval_batch_size=32, eval_steps=2, save_steps=1
    )
    results = finetune.main(command)
    assert results["step"] == 2 and results["finished"]
    return out, command


def assert_states_close(actual: dict, expected: dict, rtol: float = 1e-5, atol: float = 1e-6):
    """Two weight dicts reached by different computations (a resumed run and an uninterrupted one, two runs of the
    same code): the same keys and dtypes, integer tensors equal, floating tensors within tolerance.

    Bit-exact equality of floats computed by two different tensor objects depends on the CPU's kernels (on an AMD
    EPYC, 13 of 2,112 outputs of a model differed by 1.2e-7 from its save/load copy), so it is never asserted here.
    Copies of one tensor (a save/load round trip, an export of a state) are compared with `torch.equal` instead.
    """
    assert actual.keys() == expected.keys()
    for key in expected:
        assert actual[key].dtype == expected[key].dtype, key
        if expected[key].is_floating_point():
            torch.testing.assert_close(actual[key], expected[key], rtol=rtol, atol=atol, msg=lambda m: f"{key}: {m}")
        else:
            assert torch.equal(actual[key], expected[key]), key


def pretraining_batch(config, batch_size=3, seed=0, dtype=torch.float32):
    """(input_values (B, T, F), visible_indices (B, M, V), query_indices (B, M, Q)) for `AaspForPreTraining`, seeded."""
    from aasp_hf.data.masking import sample_batch_masks

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, config.num_frames, config.num_mel_bins, generator=g, dtype=dtype)
    masks = sample_batch_masks(config, batch_size, generator=g)
    return x, masks["visible_indices"], masks["query_indices"]


def tiny_pretraining_config(**overrides):
    """An `AaspConfig` for `AaspForPreTraining`: the tiny encoder, a 16-wide 2-layer predictor, 1×2 mask blocks."""
    from aasp_hf import AaspConfig

    kwargs = tiny_config_kwargs(
        predictor_hidden_size=16, predictor_num_attention_heads=2, predictor_num_layers=2, mask_block_sizes=[[1, 2]]
    )
    kwargs.update(overrides)
    return AaspConfig(**kwargs)


def sample_pretraining_masks(config, batch_size, generator=None):
    """(visible_indices (B, M, V), query_indices (B, M, Q)) for `AaspForPreTraining`, for the model's own tests.

    A small stand-in for the training sampler (`aasp_hf.data.masking.sample_batch_masks`, EAT's inverse block
    masking): the model only receives index tensors, and these tests also run in a transformers tree, which has the
    model's files but not aasp_hf's data pipeline (conversion/write_transformers_pr.py writes this function into the
    tree's test file). The counts are the training sampler's, from the config: M = `mask_num_views` views per clip,
    V = round((1 - mask_ratio)·N) visible tokens (ascending) and Q = round(mask_query_ratio·(N - V)) queries drawn
    from the masked ones, N = F̃·T̃ tokens; which tokens is uniformly random (no blocks), from `generator`."""
    num_tokens = config.num_frequency_patches * config.num_time_patches
    num_visible = int(round((1.0 - config.mask_ratio) * num_tokens))
    num_queries = int(round(config.mask_query_ratio * (num_tokens - num_visible)))
    shape = (batch_size, config.mask_num_views, num_tokens)
    order = torch.rand(shape, generator=generator).argsort(dim=-1)  # (B, M, N): a random permutation per view
    visible = order[..., :num_visible].sort(dim=-1).values  # (B, M, V)
    queries = order[..., num_visible : num_visible + num_queries]  # (B, M, Q), masked tokens only
    return visible, queries


def pretraining_inputs(config, batch_size=3, seed=0):
    """(input_values (B, T, F), visible_indices (B, M, V), query_indices (B, M, Q)) for `AaspForPreTraining`'s tests,
    seeded, the masks from `sample_pretraining_masks` (runs without aasp_hf.data, as in a transformers tree)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, config.num_frames, config.num_mel_bins, generator=g)
    return (x, *sample_pretraining_masks(config, batch_size, generator=g))
