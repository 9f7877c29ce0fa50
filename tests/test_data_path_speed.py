"""The fast training data path gives the samples the slow one gave.

Training decodes files with soundfile where it gives what the checkpoint's pipeline (torchcodec) gives, and with
torchcodec otherwise (`aasp_hf.data.decoding`); a stream decodes in DataLoader workers in the order the main process
read it in (`aasp_hf.data.clips.AudioStream`). The speed itself is measured by benchmarks/speed/run.py, not here.
"""

import numpy as np
import pytest
import soundfile as sf

from aasp_hf.data.decoding import SOUNDFILE_EXACT, SOUNDFILE_LOSSY, _read_with_soundfile, decode_audio
from aasp_hf.pipeline_aasp import decode_clip as pipeline_decode


pytest.importorskip("torchcodec")

# lossy codecs: libvorbis / mpg123 (soundfile) against ffmpeg's decoders (torchcodec) on a 1-s clip at 0.3 of full
# scale; measured 1.3e-7 (Vorbis) and 1.7e-6 (MP3) on 10-s noise at 0.1 of full scale, 16 kHz stereo
LOSSY_TOLERANCE = 1e-5


def _stereo(seconds=1.0, rate=16000, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    left = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)
    right = 0.2 * np.sin(2 * np.pi * 660 * t) + 0.05 * rng.standard_normal(t.size)
    return np.stack([left, right], axis=1).astype(np.float32)  # (L, C)


@pytest.mark.parametrize("major", sorted(SOUNDFILE_EXACT))
def test_pcm_files_decode_bit_for_bit_as_the_pipeline(tmp_path, major):
    """Every (format, subtype) soundfile reads for training equals the pipeline's torchcodec decoding exactly,
    mono, stereo and 6 channels (the channel mean, (L + R) / 2 for stereo)."""
    extension = "flac" if major == "FLAC" else "wav"
    six = np.concatenate([_stereo(seed=1), _stereo(seed=2), _stereo(seed=3)], axis=1)  # (L, 6)
    for subtype in sorted(SOUNDFILE_EXACT[major]):
        for channels in (1, 2, 6):
            path = tmp_path / f"{subtype}_{channels}.{extension}"
            sf.write(path, six[:, :channels], 16000, format=major, subtype=subtype)
            ours, theirs = decode_audio(str(path)), pipeline_decode(str(path), 16000)
            assert ours.dtype == np.float32 and ours.shape == theirs.shape, (subtype, channels)
            assert np.array_equal(ours, theirs), (major, subtype, channels, np.abs(ours - theirs).max())


@pytest.mark.parametrize("major,subtype", [(m, s) for m in sorted(SOUNDFILE_LOSSY) for s in SOUNDFILE_LOSSY[m]])
def test_lossy_files_decode_within_rounding_of_the_pipeline(tmp_path, major, subtype):
    path = tmp_path / f"clip.{major.lower()}"
    sf.write(path, _stereo(), 16000, format=major, subtype=subtype)
    assert _read_with_soundfile(str(path), 16000) is not None  # decoded by soundfile, not by torchcodec
    ours, theirs = decode_audio(str(path)), pipeline_decode(str(path), 16000)
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= LOSSY_TOLERANCE


def test_other_rates_and_bytes_decode_as_the_pipeline(tmp_path):
    """A 44.1-kHz file is resampled by torchcodec, as before; a file's bytes decode as its path."""
    path = tmp_path / "cd.wav"
    sf.write(path, _stereo(rate=44100), 44100, subtype="PCM_16")
    assert _read_with_soundfile(str(path), 16000) is None  # left to torchcodec, which resamples it
    assert np.array_equal(decode_audio(str(path)), pipeline_decode(str(path), 16000))
    flac = tmp_path / "clip.flac"
    sf.write(flac, _stereo(), 16000, subtype="PCM_24")
    assert np.array_equal(decode_audio({"path": None, "bytes": flac.read_bytes()}), pipeline_decode(str(flac), 16000))


def test_truncated_wav_still_warns_and_gives_its_whole_frames(tmp_path, caplog):
    path = tmp_path / "cut.wav"
    sf.write(path, _stereo(), 16000, subtype="PCM_16")
    path.write_bytes(path.read_bytes()[:-1001])  # 250 frames of 4 bytes and one byte of the next one cut
    with pytest.warns(UserWarning, match="truncated"):
        theirs = pipeline_decode(str(path), 16000)
    ours = decode_audio(str(path))
    assert ours.shape == (16000 - 251,) and np.array_equal(ours, theirs)
    assert "cut.wav" in caplog.text and "truncated" in caplog.text


def test_train_dir_rows_carry_their_file_and_decode_as_the_pipeline(tmp_path):
    """A map-style --train_dir is read without datasets' own decoding (which opens every file with torchcodec):
    rows carry {"path", "bytes"}, and the clip is the pipeline's decoding of that file."""
    from types import SimpleNamespace

    from aasp_hf.data.clips import load_clips

    sf.write(tmp_path / "a.flac", _stereo(), 16000, subtype="PCM_16")
    sf.write(tmp_path / "b.wav", _stereo(rate=22050), 22050, subtype="PCM_16")
    data_args = SimpleNamespace(
        synthetic_clips=0,
        dataset=None,
        train_dir=str(tmp_path),
        dataset_name=None,
        streaming=False,
        dataloader_num_workers=0,
        dataset_split="train",
        audio_column="audio",
    )
    clips = load_clips(data_args, seed=0, batch_size=1, num_processes=1, process_index=0)
    for index in range(len(clips)):
        cell = clips.source[index]["audio"]
        assert set(cell) == {"path", "bytes"}
        assert np.array_equal(clips[index]["waveform"].numpy(), pipeline_decode(cell["path"], 16000))


def test_stream_decoded_in_workers_trains_and_resumes_as_in_the_main_process(tmp_path):
    """--streaming with 2 DataLoader workers (each decoding every other micro-batch) stopped after 1 step and resumed
    gives the run that decodes in the main process uninterrupted: same micro-batches, epochs and weights."""
    from conftest import assert_states_close
    from safetensors.torch import load_file
    from test_pretrain_script import argv, history, pretrain, write_audioset_layout

    root = write_audioset_layout(tmp_path / "audioset")
    common = dict(
        synthetic_clips=0,
        dataset="as2m",
        data_root=str(root),
        streaming=True,
        shuffle_buffer_size=3,
        per_device_train_batch_size=2,
        max_steps=3,
        save_steps=3,
    )
    full = pretrain.main(argv(tmp_path / "main_process", **common))
    first = pretrain.main(argv(tmp_path / "workers", stop_after_steps=1, dataloader_num_workers=2, **common))
    assert first["step"] == 1
    resumed = pretrain.main(argv(tmp_path / "workers", resume=True, dataloader_num_workers=2, **common))
    assert resumed["start_step"] == 1 and resumed["step"] == 3 and full["decode_failures"] == 0
    assert [h["train/epoch"] for h in history(tmp_path / "workers")] == [0, 0, 1]
    assert_states_close(
        load_file(tmp_path / "workers" / "checkpoint-3" / "model.safetensors"),
        load_file(tmp_path / "main_process" / "checkpoint-3" / "model.safetensors"),
    )


def test_plan_models_the_gradient_all_reduce_and_prints_the_papers_throughput():
    """All-reduce: a ring moves 2(n − 1)/n × the float32 gradients of the trainable parameters (counted here on a
    real model) at NVLink 4's 450 GB/s each way; the paper's 2.83 batches/s of 512 clips on 4 GPUs is 362 per GPU."""
    from conftest import tiny_config_kwargs

    from aasp_hf import AaspConfig, AaspForPreTraining
    from aasp_hf.plan import format_plan, plan_pretraining

    config = AaspConfig(**tiny_config_kwargs())
    plan = plan_pretraining(config, 4, precision="no", num_processes=4, max_steps=10)
    trainable = sum(p.numel() for p in AaspForPreTraining(config).parameters() if p.requires_grad)
    assert plan.allreduce_seconds(4) == pytest.approx(2 * 3 / 4 * 4 * trainable / 450e9, rel=1e-12)
    assert plan.allreduce_seconds(1) == 0
    table = format_plan(plan)
    assert "4 GPUs of one node" in table and "NVLink 4, 900 GB/s bidirectional per GPU" in table
    per_gpu = 2.83 * 512 / 4
    assert f"{per_gpu:,.0f}  ({2.83 * 512:,.0f} clips/s on 4 GPUs)" in table
    implied = plan.flops_per_step / 4 * per_gpu / plan.peak_flops()  # FLOPs per clip × clips/s ÷ peak FLOP/s
    assert f"{implied:.3f}" in table


@pytest.mark.parametrize("streaming", [False, True])
def test_plan_times_the_data_path_of_a_folder(tmp_path, streaming):
    """--plan with --train_dir (read as files or as a stream) decodes, crops and collates the folder's clips and
    derives the workers from the rates: ceil(clips/s the step needs ÷ decoded and collated clips/s per worker)."""
    import math
    from pathlib import Path

    from test_pretrain_script import pretrain

    for number in range(3):
        sf.write(tmp_path / f"clip{number}.flac", _stereo(seed=number), 16000, subtype="PCM_16")
    preset = Path(__file__).resolve().parents[1] / "examples" / "configs" / "pretrain_tiny_cpu.json"
    argv = [
        "--config",
        str(preset),
        "--plan",
        "--train_dir",
        str(tmp_path),
        "--plan_data_clips",
        "8",
        "--per_device_train_batch_size",
        "2",
        "--output_dir",
        str(tmp_path / "never"),
    ]
    results = pretrain.main(argv + (["--streaming", "true"] if streaming else []))
    data = results["data"]
    assert data["clips"] >= 8 and data["workers"] == math.ceil(
        data["needed_clips_per_s"] / data["decode_crop_collate_clips_per_s"]
    )
    assert data["cores_needed"] == data["workers"] + 1
    assert f"--train_dir {tmp_path}" + (", as a stream" if streaming else "") in results["plan"]
    assert "0 failed to decode" in results["plan"] and not (tmp_path / "never").exists()


def test_seeded_collation_gives_each_clip_the_draws_of_its_seed_alone():
    """`collate_seeded`: a clip's crop, features and masks are those of the clip collated alone from its seed,
    whatever else is in the batch (what lets a resumed run on another number of processes repeat them)."""
    import torch
    from conftest import tiny_config_kwargs

    from aasp_hf import AaspConfig, AaspFeatureExtractor
    from aasp_hf.data.collators import PretrainingCollator

    config = AaspConfig(**tiny_config_kwargs())
    collator = PretrainingCollator(AaspFeatureExtractor(feature_size=config.num_mel_bins), config, crop_seconds=0.5)
    clips = [{"waveform": torch.from_numpy(_stereo(seed=seed)[:, 0])} for seed in range(3)]
    batch = collator.collate_seeded(clips, [11, 12, 13])
    for index, seed in enumerate([11, 12, 13]):
        collator.generator.manual_seed(seed)
        alone = collator([clips[index]])
        for key in alone:
            assert torch.equal(batch[key][index], alone[key][0]), key
    other = collator.collate_seeded([clips[2], clips[1]], [13, 12])
    assert torch.equal(other["input_values"][0], batch["input_values"][2])
    assert not torch.equal(batch["input_values"][0], collator.collate_seeded(clips[:1], [99])["input_values"][0])
