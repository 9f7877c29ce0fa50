"""aasp_hf.integrations.xares, an AaSP checkpoint as an X-ARES encoder: the frames X-ARES asks for (count, size, hop), their times
(frame i centred at i·hop, as X-ARES labels frames), the class X-ARES's runner finds and builds without arguments,
mistakes; the task builder of `make xares-check`; and, where X-ARES is installed (the venv `make xares-check`
builds), X-ARES's own `check_audio_encoder` and its runner, unmodified, on the two small local tasks.

The tiny encoder has 32 mel bins (F̃ = 2 frequency patches), D = 32 and a 64-frame (640 ms) position table.
"""

import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import tiny_config_kwargs

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspModel
from aasp_hf.integrations import hear
from aasp_hf.integrations import xares as aasp_xares
from aasp_hf.integrations.xares import AaspXaresEncoder
from aasp_hf.utils.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
SR = 16000
HAS_XARES = importlib.util.find_spec("xares") is not None
NEEDS_XARES = pytest.mark.skipif(
    not HAS_XARES,
    reason="X-ARES is not installed in this venv: `make xares-check` runs "
    "these tests in .venv-xares (pip install 'aasp_hf[xares]')",
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    config = AaspConfig(**tiny_config_kwargs())
    folder = tmp_path_factory.mktemp("xares") / "encoder"
    AaspModel(config).save_pretrained(folder)
    AaspFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def encoder(checkpoint):
    return AaspXaresEncoder(str(checkpoint))


def noise(num_clips, num_samples, seed=0):
    return 0.1 * torch.randn(num_clips, num_samples, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------------- what X-ARES asks
def test_the_attributes_and_the_frames_x_ares_asks_for(encoder):
    config = encoder.hear.encoder.config
    assert encoder.sampling_rate == SR and encoder.hop_size_in_ms == 40.0
    assert encoder.output_dim == config.num_frequency_patches * config.hidden_size  # a column, its patches concatenated
    for num_samples, frames in ((1, 1), (640, 1), (641, 2), (16000, 25), (50000, 79)):  # ceil(L / 640)
        out = encoder(noise(2, num_samples))
        assert out.shape == (2, frames, encoder.output_dim) and out.dtype == torch.float32, num_samples
        assert torch.isfinite(out).all()


def test_frame_i_is_the_column_centred_at_i_hop_of_the_clip(encoder):
    """Frame i is the HEAR module's timestamp embedding centred at i·40 ms of the clip: the module's column at
    75 + i·40 ms of the clip with 75 ms (1200 samples) of silence in front."""
    audio = noise(2, 20000, seed=1)
    padded = torch.nn.functional.pad(audio, (1200, 640))
    columns, timestamps = hear.get_timestamp_embeddings(padded, encoder.hear)
    frames = encoder(audio)
    assert timestamps[0, 0] == 75.0 and frames.shape[1] == 32  # ceil(1.25 s / 40 ms)
    torch.testing.assert_close(frames, columns[:, :32])


def test_a_click_moves_the_frames_centred_on_its_time(encoder):
    """A click at t ms changes most a frame within half a patch (80 ms) of t, and the change, spread over the frames,
    is centred on t: its centroid (the frames' times weighted by how much each changes) lies within 10 ms of t on
    average over 32 clicks. Frames off by one hop (40 ms) or starting at the clip's first column (75 ms late) fail.
    (Which single frame changes most depends on the random weights: that argmax is up to 34 ms early on average for
    this encoder, with the padding as for HEAR's own timestamps, so the centroid is the measure of centring.)"""
    click_ms = torch.linspace(200.0, 1800.0, 32) + torch.rand(32, generator=torch.Generator().manual_seed(0)) * 40
    clips = (noise(1, 2 * SR, seed=3) * 0.1).repeat(len(click_ms) + 1, 1)
    for i, t in enumerate(click_ms.tolist()):
        clips[i + 1, int(t * SR / 1000)] += 1.0
    frames = encoder(clips)
    change = (frames[1:] - frames[:1]).norm(dim=-1)  # (clicks, J)
    times = encoder.hop_size_in_ms * torch.arange(frames.shape[1])  # (J,) ms, frame i at i·hop
    assert (change.argmax(1) * encoder.hop_size_in_ms - click_ms).abs().max() <= 80.0 + 12.5
    centroid = (change * times).sum(1) / change.sum(1)  # (clicks,)
    assert (centroid - click_ms).mean().abs() <= 10.0, centroid - click_ms


def test_the_runner_finds_one_encoder_class_and_builds_it_from_the_environment(checkpoint, monkeypatch):
    """X-ARES's runner takes the module's one name ending in "Encoder" and calls it with no arguments."""
    assert [name for name in dir(aasp_xares) if name.endswith("Encoder")] == ["AaspXaresEncoder"]
    monkeypatch.setenv("AASP_XARES_MODEL", str(checkpoint))
    monkeypatch.setenv("AASP_XARES_OPTIONS", '{"hop_ms": 20, "frequency_pooling": "mean"}')
    built = AaspXaresEncoder()
    assert built.hop_size_in_ms == 20.0 and built.output_dim == 32
    assert built(noise(1, 16000)).shape == (1, 50, 32)


def test_mistakes_are_one_line(checkpoint, encoder, monkeypatch):
    monkeypatch.delenv("AASP_XARES_MODEL", raising=False)
    with pytest.raises(UsageError, match="AASP_XARES_MODEL") as error:
        AaspXaresEncoder()
    assert "\n" not in str(error.value)
    monkeypatch.setenv("AASP_XARES_MODEL", str(checkpoint))
    monkeypatch.setenv("AASP_XARES_OPTIONS", "hop_ms=20")
    with pytest.raises(UsageError, match="JSON object"):
        AaspXaresEncoder()
    with pytest.raises(UsageError, match="scene_pooling"):
        AaspXaresEncoder(str(checkpoint), scene_pooling="cls")
    with pytest.raises(UsageError, match="10, 20, 40, 80, 160"):
        AaspXaresEncoder(str(checkpoint), hop_ms=30)
    with pytest.raises(UsageError, match=r"\(batch, samples\)"):
        encoder(torch.zeros(16000))
    with pytest.raises(UsageError, match=r"\(batch, samples\)"):
        encoder(torch.zeros(2, 0))


# ----------------------------------------------------------------------------------------------- the local tasks
@pytest.fixture(scope="module")
def env_dir(tmp_path_factory):
    from benchmarks.xares import build_tasks  # the repository root is on the path when pytest runs from it

    root = tmp_path_factory.mktemp("env")
    build_tasks.build(root, seed=0)
    return root


def read_shard(path: Path) -> dict[str, dict[str, bytes]]:
    samples: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            key, suffix = member.name.split(".", 1)
            samples.setdefault(key, {})[suffix] = tar.extractfile(member).read()
    return samples


def test_the_tasks_are_webdataset_shards_x_ares_reads(env_dir):
    for task, counts in (("synthetic_scene", (40, 20, 20)), ("synthetic_event", (24, 12, 12))):
        assert (env_dir / task / ".audio_tar_ready").is_file()  # without it X-ARES downloads from Zenodo
        for split, count in zip(("train", "valid", "test"), counts):
            samples = read_shard(env_dir / task / f"{split}-000000.tar")
            assert len(samples) == count and all(set(s) == {"wav", "json"} for s in samples.values())
            audio, rate = sf.read(io.BytesIO(next(iter(samples.values()))["wav"]))
            assert rate == SR


def test_an_event_lies_where_its_label_says(env_dir):
    for sample in read_shard(env_dir / "synthetic_event" / "test-000000.tar").values():
        audio, _ = sf.read(io.BytesIO(sample["wav"]), dtype="float32")
        [event] = json.loads(sample["json"])
        start, end = round(event["onset"] * SR), round(event["offset"] * SR)
        inside, outside = audio[start:end], np.concatenate([audio[:start], audio[end:]])
        assert np.sqrt(np.mean(inside**2)) > 3 * np.sqrt(np.mean(outside**2))
        assert event["label"] in ("tone", "am_30hz", "chirp") and 0.4 <= event["offset"] - event["onset"] <= 1.0


def test_the_score_table_reads_what_the_runner_writes(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("xares_scores", ROOT / "benchmarks" / "xares" / "scores.py")
    scores = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scores)
    for encoder_name, value in (("AaspXaresEncoder", 0.5), ("LogMelEncoder", 0.25)):
        folder = tmp_path / "synthetic_scene" / "checkpoints" / encoder_name
        folder.mkdir(parents=True)
        (folder / "mlp_score.txt").write_text(f"{value}\n20")
    assert scores.test_scores(tmp_path) == {"synthetic_scene (mlp)": {"AaspXaresEncoder": 0.5, "LogMelEncoder": 0.25}}
    scores.main([str(tmp_path)])
    assert capsys.readouterr().out.splitlines()[1].split() == ["synthetic_scene", "(mlp)", "0.500", "0.250"]


# ----------------------------------------------------------------------------------------------- X-ARES's own tools
@NEEDS_XARES
def test_x_ares_check_audio_encoder_passes(checkpoint, monkeypatch):
    from xares.audio_encoder_checker import check_audio_encoder
    from xares.utils import attr_from_py_path

    monkeypatch.setenv("AASP_XARES_MODEL", str(checkpoint))
    built = attr_from_py_path("aasp_hf.integrations.xares", endswith="Encoder")()  # as X-ARES's runner builds it
    assert check_audio_encoder(built) is True
    assert aasp_xares.check(built) is True


@NEEDS_XARES
def test_the_event_task_labels_frame_i_with_what_sounds_at_i_hop(encoder):
    from benchmarks.xares.synthetic_event_task import synthetic_event_config

    config = synthetic_event_config(encoder)
    target = config.label_processor([{"onset": 1.0, "offset": 1.41, "label": "chirp"}])
    assert target.shape == (3, 75)  # 3 s at 40 ms
    assert torch.nonzero(target[2]).flatten().tolist() == list(range(25, 36))  # 1000 .. 1400 ms
    assert target[:2].sum() == 0 and config.task_type == "frame"


@NEEDS_XARES
def test_x_ares_runner_scores_both_tasks_end_to_end(checkpoint, env_dir, tmp_path):
    """`python -m xares.run`, as installed, on the clip-level and the frame-level task: encode, train its probes,
    score; each task's score file holds a score in [0, 1] and the runner prints its results table."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "env").symlink_to(env_dir)
    env = {**os.environ, "AASP_XARES_MODEL": str(checkpoint), "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    tasks = ["benchmarks.xares.synthetic_scene_task", "benchmarks.xares.synthetic_event_task"]
    result = subprocess.run(
        [sys.executable, "-m", "xares.run", "aasp_hf.integrations.xares", *tasks, "--max-jobs", "0"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Results:" in result.stdout and "Synthetic scene" in result.stdout and "Synthetic event" in result.stdout
    for task, probes in (("synthetic_scene", ("mlp", "knn")), ("synthetic_event", ("mlp",))):
        for probe in probes:
            stored = env_dir / task / "checkpoints" / "AaspXaresEncoder" / f"{probe}_score.txt"
            score, weight = stored.read_text().split()
            assert 0.0 <= float(score) <= 1.0 and int(weight) > 0 and not math.isnan(float(score))
