"""Collation in the DataLoader workers: the training process receives finished micro-batches.

The loader's batches equal `PretrainingCollator.collate_seeded`'s for the same rows and seeds, bit for bit, on the
waveform, cached log-mel and equaliser paths, with 0, 1 and 2 workers; with the log-mel on the accelerator the
workers draw everything else and `finish` completes the same batch; a stream's micro-batches likewise; failed clips
reach the training process's count; a run stopped and resumed with workers ends where one without workers ends.
"""

import json
from functools import partial

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file

from conftest import assert_states_close, cli_args, tiny_config_kwargs

import pretrain

from aasp_hf import AaspConfig, AaspFeatureExtractor
from aasp_hf.data.cache import LogMelCache, build_log_mel_cache
from aasp_hf.data.clips import AudioClips, CollatedMicroBatches, FailedClip, load_clips, load_micro_batches
from aasp_hf.data.collators import PretrainingCollator
from aasp_hf.training.data_order import clip_order, clip_seed, stream_clip_seeds

CONFIG = tiny_config_kwargs(mask_num_views=2, mask_block_sizes=[[1, 2], [2, 1]])
SEED, BATCH = 3, 3


def lengths():
    """Clip lengths in samples: some shorter than the 0.5-s crop (used whole, padded), most longer (a crop draw)."""
    return [6_000, 16_000, 9_000, 20_000, 12_000, 7_000, 24_000]


def clips(with_nan: bool = False):
    rng = np.random.default_rng(0)
    arrays = [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in lengths()]
    if with_nan:  # clip 4 fails (its samples are NaN): replaced in its micro-batch, counted by the training process
        arrays[4][100] = np.nan
    return arrays


def collator(student_eq_strength=0.0):
    config = AaspConfig(**CONFIG)
    return PretrainingCollator(
        AaspFeatureExtractor(feature_size=config.num_mel_bins),
        config,
        crop_seconds=0.5,
        student_eq_strength=student_eq_strength,
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cache")
    rows = [{"array": array, "sampling_rate": 16000} for array in clips()]
    report = build_log_mel_cache(rows, folder, AaspFeatureExtractor(feature_size=CONFIG["num_mel_bins"]))
    assert report["num_written"] == len(rows)
    return LogMelCache(folder)


def reference(dataset, make, start, count):
    """What the training process made before: the order's rows read in order, failed clips replaced, then
    `collate_seeded` on the order's seeds."""
    from aasp_hf.data.clips import replace_failed

    order = clip_order(len(dataset), BATCH, 1, 0, SEED, start)
    out = []
    for _, (epoch, rows, seeds) in zip(range(count), order):
        examples, failed = replace_failed([dataset[row] for row in rows])
        out.append((epoch, make().collate_seeded(examples, seeds), [e["index"] for e in examples], failed))
    return out


def assert_batches_equal(actual: dict, expected: dict, workers: int = 0):
    """In this process: the same computation, equal bit for bit. From a loader worker, which torch runs with one
    thread where this process may use several, the features may round otherwise (`assert_batches_close`)."""
    if workers > 0:
        return assert_batches_close(actual, expected)
    assert actual.keys() == expected.keys()
    for key in expected:
        assert torch.equal(actual[key], expected[key]), key


def assert_batches_close(actual: dict, expected: dict):
    """The same draws (masks and queries exactly) and features from another computation (the micro-batch's log-mel in
    one call against clip by clip): equal within float32 rounding, which other CPU kernels may order differently."""
    assert actual.keys() == expected.keys()
    for key in expected:
        if expected[key].is_floating_point():
            torch.testing.assert_close(actual[key], expected[key], atol=1e-5, rtol=1e-5, msg=key)
        else:
            assert torch.equal(actual[key], expected[key]), key


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("path", ["waveform", "cache", "equaliser"])
def test_the_workers_batches_are_collate_seeded_bit_for_bit(path, workers, cache):
    dataset = cache if path == "cache" else AudioClips(clips(with_nan=True))
    make = partial(collator, 0.5 if path == "equaliser" else 0.0)
    # from global micro-batch 1 (a resume), 5 micro-batches: across the epoch boundary (7 clips: 2 per epoch)
    order = partial(clip_order, len(dataset), BATCH, 1, 0, SEED, 1)
    loader = load_micro_batches(CollatedMicroBatches(dataset, order, make().collate_seeded), workers)
    expected = reference(dataset, make, 1, 5)
    got = [next(loader) for _ in expected]
    assert [g["epoch"] for g in got] == [0, 1, 1, 2, 2]
    for item, (epoch, batch, indices, failed) in zip(got, expected):
        assert item["epoch"] == epoch and item["indices"] == indices and item["position"] is None
        assert_batches_equal(item["batch"], batch, workers)
        assert [(f.index, f.reason) for f in item["failed"]] == [(f.index, f.reason) for f in failed]
    expected_keys = {"input_values", "visible_indices", "query_indices"} | (
        {"student_input_values"} if path == "equaliser" else set()
    )
    assert got[0]["batch"].keys() == expected_keys
    if path != "cache":  # clip 4's NaN is named in every micro-batch that holds it, in the order's place
        failures = [f for item in got for f in item["failed"]]
        assert failures and all(isinstance(f, FailedClip) and f.index == 4 for f in failures)
        assert "1 of its 12000 samples are NaN or infinite" in failures[0].reason


@pytest.mark.parametrize("workers", [0, 2])
def test_with_the_log_mel_on_the_accelerator_the_workers_draw_the_rest_and_finish_completes_the_same_batch(
    workers, cache
):
    """--features_on_device: a worker crops and draws masks, queries and equaliser (`draw_seeded`); the training
    process's `finish` computes the log-mel of the micro-batch in one call: the batch `collate_seeded` makes."""
    dataset, make = AudioClips(clips()), partial(collator, 0.5)
    order = partial(clip_order, len(dataset), BATCH, 1, 0, SEED, 0)
    loader = load_micro_batches(CollatedMicroBatches(dataset, order, make().draw_seeded), workers)
    finisher = make()
    for epoch, batch, indices, _ in reference(dataset, make, 0, 3):
        item = next(loader)
        assert set(item["batch"]) == {"waveforms", "waveform_lengths", "visible_indices", "query_indices", "eq_curves"}
        assert item["batch"]["waveforms"].shape[1] == 8_000  # the 0.5-s crop, the longest of the micro-batch
        assert_batches_close(finisher.finish(item["batch"]), batch)
        assert item["indices"] == indices
    # cached log-mel has no log-mel left to compute: the worker's batch is finished already
    cached = make().draw_seeded([cache[0], cache[1]], [5, 6])
    assert_batches_equal(make().finish(cached), make().collate_seeded([cache[0], cache[1]], [5, 6]))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_streams_finished_micro_batches_are_collate_seeded_and_keep_its_position(workers, tmp_path):
    folder = tmp_path / "audio"
    folder.mkdir()
    for number, array in enumerate(clips()[:6]):
        sf.write(folder / f"clip{number}.wav", array, 16000)
    data_args = pretrain.DataArguments(
        train_dir=str(folder), streaming=True, shuffle_buffer_size=4, dataloader_num_workers=workers
    )
    make = partial(collator, 0.5)
    seeds = partial(stream_clip_seeds, SEED, 1, 0)
    stream = load_clips(data_args, SEED, 2, 1, 0)
    stream.position = {"epoch": 0, "micro_batches": 1}  # as a resume restores it
    got = stream.finished_micro_batches(make().collate_seeded, seeds)
    items = [next(got) for _ in range(4)]
    assert stream.position == {"epoch": 1, "micro_batches": 2}  # what was yielded, not what workers made ahead
    # the reference: the same stream's decoded micro-batches (one process), collated from the same seeds
    plain = load_clips(
        pretrain.DataArguments(train_dir=str(folder), streaming=True, shuffle_buffer_size=4), SEED, 2, 1, 0
    )
    plain.position = {"epoch": 0, "micro_batches": 1}
    decoded = plain.micro_batches()
    for item in items:
        epoch, examples = next(decoded)
        numbers = [int(e["index"].split(":")[1]) for e in examples]
        assert item["epoch"] == epoch and item["indices"] == [e["index"] for e in examples]
        assert_batches_equal(item["batch"], make().collate_seeded(examples, seeds(epoch, numbers)), workers)
    assert [item["position"] for item in items] == [
        {"epoch": 0, "micro_batches": 2},
        {"epoch": 0, "micro_batches": 3},
        {"epoch": 1, "micro_batches": 1},
        {"epoch": 1, "micro_batches": 2},
    ]
    assert stream_clip_seeds(SEED, 2, 1, 0, [0, 1]) == [clip_seed(SEED, 0, p) for p in (1, 3)]


def write_folder(folder):
    """Six WAVs (0.4-1.5 s) and one file that is only a header: it fails in every epoch, one failed file."""
    folder.mkdir(parents=True)
    for number, array in enumerate(clips()[:6]):
        sf.write(folder / f"clip{number}.wav", array, 16000)
    (folder / "broken.wav").write_bytes(b"RIFF" + b"\0" * 60)
    return folder


def argv(output_dir, folder, **overrides):
    args = dict(
        train_dir=str(folder),
        crop_seconds=0.5,
        model_config=json.dumps(CONFIG),
        output_dir=str(output_dir),
        per_device_train_batch_size=3,
        max_steps=4,
        warmup_steps=1,
        logging_steps=1,
        save_steps=2,
        report_to="none",
        seed=SEED,
        monitor_steps=0,
        student_eq_strength=0.5,
    )
    args.update(overrides)
    return cli_args(**args)


def losses(output_dir):
    return [json.loads(line)["train/loss"] for line in (output_dir / "log_history.jsonl").read_text().splitlines()]


def test_a_run_stopped_and_resumed_with_workers_ends_where_a_run_without_workers_ends(tmp_path):
    """7 files in micro-batches of 3 (2 per epoch): 4 steps cross two epochs. The run without workers and the run with
    2 workers stopped after 2 steps and resumed with 1 end with the same losses and weights, and so do the first 2
    steps with --features_on_device and 2 workers; the broken file is counted once in all_results.json and named in
    decode_failures.txt (by each segment of the resumed run)."""
    folder = write_folder(tmp_path / "audio")
    plain = pretrain.main(argv(tmp_path / "plain", folder, dataloader_num_workers=0))
    pretrain.main(argv(tmp_path / "split", folder, dataloader_num_workers=2, stop_after_steps=2))
    resumed = pretrain.main(argv(tmp_path / "split", folder, dataloader_num_workers=1, resume=True))
    on_device = pretrain.main(
        argv(tmp_path / "device", folder, dataloader_num_workers=2, features_on_device=True, stop_after_steps=2)
    )
    assert resumed["start_step"] == 2 and resumed["step"] == plain["step"] == 4 and on_device["step"] == 2
    assert losses(tmp_path / "split") == pytest.approx(losses(tmp_path / "plain"), rel=1e-5)
    assert losses(tmp_path / "device") == pytest.approx(losses(tmp_path / "plain")[:2], rel=1e-5)
    for run, step in (("split", 4), ("device", 2)):
        # the workers' features round as one thread does (assert_batches_close): steps apart by float32 rounding
        assert_states_close(
            load_file(tmp_path / run / f"checkpoint-{step}" / "model.safetensors"),
            load_file(tmp_path / "plain" / f"checkpoint-{step}" / "model.safetensors"),
            atol=1e-5,
        )
    for results, run in ((plain, "plain"), (resumed, "split"), (on_device, "device")):
        assert results["decode_failures"] == 1 and results["missing_files"] == 0, run
        listed = (tmp_path / run / "decode_failures.txt").read_text().splitlines()
        assert {line.split("\t")[0] for line in listed} == {str(folder / "broken.wav")}, run


@pytest.mark.parametrize("source", ["cache", "folder_on_device"])
def test_plan_times_the_workers_and_the_training_process_on_the_runs_own_path(source, tmp_path, cache):
    """--plan: a loader worker's decode + collate per clip gives the workers per GPU; the training process's CPU time
    per micro-batch of the run's size, received from a real worker, is its share of the predicted step, judged
    against 10 %. With --features_on_device and no GPU the log-mel it would launch is left out, and it says so."""
    import math

    preset = pretrain.Path(pretrain.__file__).parent / "configs" / "pretrain_tiny_cpu.json"
    argv = [
        "--config",
        str(preset),
        "--plan",
        "--plan_data_clips",
        "8",
        "--per_device_train_batch_size",
        "4",
        "--output_dir",
        str(tmp_path / "never"),
        "--model_config",
        json.dumps(CONFIG),
        "--crop_seconds",
        "0.5",
    ]
    if source == "cache":
        argv += ["--log_mel_cache", str(cache.cache_dir)]
    else:
        argv += ["--train_dir", str(write_folder(tmp_path / "audio")), "--features_on_device", "true"]
    results = pretrain.main(argv)
    data, text = results["data"], results["plan"]
    assert data["workers"] == math.ceil(data["needed_clips_per_s"] / data["decode_crop_collate_clips_per_s"])
    step = 4 / data["needed_clips_per_s"]  # the predicted step: 4 clips per GPU
    assert data["training_process_seconds_per_step"] == data["training_process_seconds_per_micro_batch"] > 0
    assert data["training_process_share_of_step"] == pytest.approx(data["training_process_seconds_per_step"] / step)
    assert "the training process per micro-batch of 4 (CPU)" in text
    assert "of the predicted step: " in text and "the target of at most 10%" in text
    if source == "cache":
        assert f"--log_mel_cache {cache.cache_dir} (cached log-mel: nothing to decode)" in text
        assert "read (cached log-mel)" in text and data["training_process_finish_timed"] is True
    else:
        assert "crop + masks (the log-mel: --features_on_device)" in text and "1 failed to decode" in text
        assert data["training_process_finish_timed"] is torch.cuda.is_available()
        assert ("left out (no GPU here)" in text) is not torch.cuda.is_available()
    assert not (tmp_path / "never").exists()
