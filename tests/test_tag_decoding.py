"""Files of every common format and of any length decode to their real end, through the pipeline and through
`python -m aasp_hf.tag` as a process; and the two ways of reading a recording longer than the model saw say so in
one warning: transformers' own pipeline class given a whole recording, and our pipeline given windows far longer than
the trained length.

The files are encoded here by ffmpeg at 8 kHz mono (tiny, so decoding is fast): an Opus file of a whole number of
minutes says 6.5 ms more in its header than it holds, an MP3's header a few frames more, and a block decoder that
trusted the header asked for a block past the end."""

import csv
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import pipeline

from aasp_hf import AaspAudioClassificationPipeline, AaspFeatureExtractor, AaspForAudioClassification
from aasp_hf.pipeline_aasp import (
    decode_blocks,
    decode_clip,
    trained_window_samples,
)
from test_long_audio import RATE, noisy_tones, save_classifier

ROOT = Path(__file__).resolve().parents[1]
FORMATS = {"opus": ["-c:a", "libopus"], "mp3": ["-c:a", "libmp3lame"], "flac": [], "ogg": ["-c:a", "libvorbis"]}
LENGTHS = (60.0, 61.3)  # a whole minute (a block boundary at the file's end) and a length that is not

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="the test encodes its files with ffmpeg")


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    """{(format, seconds): path} of a sine at 8 kHz mono, encoded by ffmpeg, in one folder."""
    folder = tmp_path_factory.mktemp("encoded")
    files = {}
    for extension, codec in FORMATS.items():
        for seconds in LENGTHS:
            path = folder / f"tone_{seconds:g}s.{extension}"
            source = f"sine=frequency=440:sample_rate=8000:duration={seconds}"
            command = ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", source, "-ac", "1", "-ar", "8000"]
            subprocess.run([*command, *codec, "-b:a", "16k", str(path)], check=True, capture_output=True)
            files[extension, seconds] = path
    return files


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory):
    return save_classifier(tmp_path_factory.mktemp("classifier"))


@pytest.mark.parametrize("extension", FORMATS)
@pytest.mark.parametrize("seconds", LENGTHS)
def test_blocks_end_where_the_audio_ends(encoded, extension, seconds):
    """In 60-s blocks (the default) and in 20-s blocks, the blocks hold as many samples as the whole-file decode and
    stop there, for a file ending on a block boundary as for one that does not."""
    path = encoded[extension, seconds]
    whole = len(decode_clip(str(path), RATE))
    assert whole == pytest.approx(seconds * RATE, abs=0.03 * RATE)
    for block_s in (60.0, 20.0):
        blocks = list(decode_blocks(str(path), RATE, block_s=block_s))
        assert sum(len(block) for block in blocks) == whole
        # an MP3's first block starts at its first sample after the encoder's delay, so it may be short
        assert all(len(block) == round(block_s * RATE) for block in blocks[1:-1])


def test_a_damaged_file_still_fails_with_its_name(encoded, tmp_path):
    """Only a block past the end is the end: a file whose data is not audio is refused, naming it."""
    broken = tmp_path / "broken.opus"
    broken.write_bytes(encoded["opus", 60.0].read_bytes()[:200] + bytes(5000))
    with pytest.raises(ValueError, match="broken.opus"):
        list(decode_blocks(str(broken), RATE))


def test_the_pipeline_reads_each_file_to_its_end(encoded, classifier_folder):
    """Our pipeline on a whole minute of Opus (the file that failed whole) and on 61.3 s of MP3: no error, and the
    last window ends at the file's last sample."""
    classifier = pipeline(
        "audio-classification", model=str(classifier_folder), pipeline_class=AaspAudioClassificationPipeline
    )
    for path in (encoded["opus", 60.0], encoded["mp3", 61.3]):
        result = classifier(str(path), return_timestamps=True, batch_size=64)
        assert result["windows"][-1]["end"] == len(decode_clip(str(path), RATE)) / RATE


def test_the_tagger_tags_every_file_to_its_end(encoded, classifier_folder, tmp_path):
    """`python -m aasp_hf.tag` over a whole minute of each format and 61.3 s of Opus: exit 0, no failure, and each
    file's last window row ends at the file's end."""
    out = tmp_path / "windows.csv"
    files = [encoded[extension, 60.0] for extension in FORMATS] + [encoded["opus", 61.3]]
    process = subprocess.run(
        [sys.executable, "-m", "aasp_hf.tag", "--model", str(classifier_folder), "--output", str(out)]
        + ["--timestamps", "--batch_size", "64", "--num_workers", "0", *map(str, files)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.returncode == 0, process.stderr[-3000:]
    failures = tmp_path / "windows.csv.failures.tsv"
    assert not failures.exists() or not failures.read_text().strip()
    with open(out, newline="") as file:
        rows = list(csv.DictReader(file))
    ends = {}
    for row in rows:
        ends[row["file"]] = max(ends.get(row["file"], 0.0), float(row["end"]))
    assert len(ends) == len(files)
    for path in files:
        (name,) = [name for name in ends if Path(name).name == path.name]
        assert ends[name] == pytest.approx(len(decode_clip(str(path), RATE)) / RATE, abs=1e-5)


def test_training_mode_and_our_windows_say_nothing(classifier_folder, caplog):
    """A model being trained is not warned about its inputs, and our pipeline's default windows are the trained
    length: a long clip classified through it raises no warning at all."""
    model = AaspForAudioClassification.from_pretrained(classifier_folder)
    extractor = AaspFeatureExtractor.from_pretrained(classifier_folder)
    with caplog.at_level(logging.WARNING):
        model.train()(**extractor(noisy_tones(3.0), sampling_rate=RATE, return_tensors="pt"))
        ours = AaspAudioClassificationPipeline(model=model.eval(), feature_extractor=extractor)
        ours({"raw": noisy_tones(3.0), "sampling_rate": RATE})
        ours({"raw": noisy_tones(3.0), "sampling_rate": RATE}, chunk_length_s=2 * 0.6)  # within 2x: no word
    assert not [record for record in caplog.records if record.name.startswith("aasp_hf")]


def test_a_window_far_longer_than_the_trained_one_is_said_once(classifier_folder, caplog):
    """A window of more than 2x the trained length (an extractor keeping max_frames=32: 3x, 96 frames) is said in one
    line, however many clips are classified, naming the factor and the trained window."""
    model = AaspForAudioClassification.from_pretrained(classifier_folder).eval()
    extractor = AaspFeatureExtractor(max_frames=32)
    classifier = AaspAudioClassificationPipeline(model=model, feature_extractor=extractor)
    trained = trained_window_samples(extractor, model.config) / RATE
    with caplog.at_level(logging.WARNING):
        for seed in range(2):
            audio = noisy_tones(3 * trained + 0.5, seed=seed)
            classifier({"raw": audio, "sampling_rate": RATE}, chunk_length_s=3 * trained)
    (record,) = [record for record in caplog.records if record.name.startswith("aasp_hf")]
    assert record.name == "aasp_hf.pipeline_aasp" and "never saw" in record.getMessage()
    assert record.getMessage().startswith(f"chunk_length_s={3 * trained:g} s is 3.0x the {trained:g}-s")
