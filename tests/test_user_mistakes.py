"""A new user's audio-input mistakes: each gets one clear message or the right answer, never a silent wrong result.

Real parts throughout: WAV files written with soundfile, a tiny classifier saved to disk and loaded by
`pipeline("audio-classification", pipeline_class=AaspAudioClassificationPipeline)` (the class a checkpoint ships and
builds with `trust_remote_code=True` where the package is not installed), transformers' own
ffmpeg reader.
"""

import logging
import shutil

import numpy as np
import pytest
import soundfile as sf
import torch
import transformers

from conftest import tiny_config_kwargs

import aasp_hf
from aasp_hf import AaspFeatureExtractor
from aasp_hf.data import decode_audio
from aasp_hf.evaluation import cls_embeddings

TRANSFORMERS_VERSION = tuple(int(part) for part in transformers.__version__.split(".")[:2])
SR = 16000
FEATURES = dict(sampling_rate=SR, return_tensors="np")


def stereo_clip(num_samples=SR, seed=0):
    """(2, L) float32 with a left channel of noise and a right channel of a tone: L != R."""
    rng = np.random.default_rng(seed)
    t = np.arange(num_samples) / SR
    left = 0.3 * rng.standard_normal(num_samples)
    right = 0.4 * np.sin(2 * np.pi * 440 * t)
    return np.stack([left, right]).clip(-0.95, 0.95).astype(np.float32)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    from transformers import pipeline

    folder = tmp_path_factory.mktemp("classifier")
    torch.manual_seed(0)
    config = aasp_hf.AaspConfig(
        **tiny_config_kwargs(), num_labels=2, id2label={0: "a", 1: "b"}, label2id={"a": 0, "b": 1}
    )
    aasp_hf.AaspForAudioClassification(config).save_pretrained(folder)
    AaspFeatureExtractor(feature_size=32).save_pretrained(folder)
    return pipeline(
        "audio-classification", model=str(folder), pipeline_class=aasp_hf.AaspAudioClassificationPipeline, device="cpu"
    )


def scores(classifier, audio):
    return {p["label"]: p["score"] for p in classifier(audio, top_k=2)}


# ----------------------------------------------------------------------------------------------- stereo as (2, L)
def test_a_stereo_tensor_from_torchaudio_is_refused_with_what_to_pass():
    extractor = AaspFeatureExtractor()
    waveform = torch.from_numpy(stereo_clip())  # what `torchaudio.load("stereo.wav")` returns: (channels, samples)
    with pytest.raises(ValueError) as error:
        extractor(waveform, **FEATURES)
    assert str(error.value) == (
        "Got a 2-D input of shape (2, 16000): one stereo clip (channels, samples), as torchaudio.load returns it, "
        "or a batch of two clips? For one stereo clip, downmix it (`x.mean(0)`) or pass mono=True; for two clips, "
        "pass a list of 1-D waveforms (`list(x)`) or batched=True."
    )
    # each way out does what it says
    one = extractor(waveform.mean(0), **FEATURES)["input_values"]
    np.testing.assert_allclose(extractor(waveform, mono=True, **FEATURES)["input_values"], one, atol=1e-6)
    two = extractor(list(waveform), **FEATURES)["input_values"]
    assert one.shape[0] == 1 and two.shape[0] == 2
    np.testing.assert_allclose(extractor(waveform, batched=True, **FEATURES)["input_values"], two, atol=1e-6)
    # (1, L), a mono file from torchaudio.load, is one clip either way
    np.testing.assert_allclose(
        extractor(waveform[:1], **FEATURES)["input_values"],
        extractor(waveform[0], **FEATURES)["input_values"],
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="exclude each other"):
        extractor(waveform, mono=True, batched=True, **FEATURES)


def test_cls_embeddings_passes_a_stereo_tensor_to_the_extractor_check_instead_of_splitting_it():
    torch.manual_seed(0)
    model = aasp_hf.AaspModel(aasp_hf.AaspConfig(**tiny_config_kwargs()))
    extractor = AaspFeatureExtractor(feature_size=32)
    waveform = torch.from_numpy(stereo_clip(8000))
    with pytest.raises(ValueError, match=r"shape \(2, 8000\): one stereo clip"):
        cls_embeddings(model, extractor, waveform)
    assert cls_embeddings(model, extractor, list(waveform)).shape == (2, 32)  # a list is a batch, as before


# ----------------------------------------------------------------------------------------------- one downmix rule
def test_a_stereo_file_and_the_same_audio_as_an_array_give_the_same_features_and_scores(tmp_path, classifier):
    stereo = stereo_clip()  # (2, L), L != R
    path = tmp_path / "stereo.wav"
    sf.write(path, stereo.T, SR, subtype="FLOAT")  # soundfile writes (samples, channels)
    mean = stereo.mean(axis=0)  # the one rule: (L + R) / 2
    from_file = decode_audio(str(path))
    np.testing.assert_allclose(from_file, mean, atol=1e-7)
    np.testing.assert_allclose(decode_audio(path.read_bytes()), mean, atol=1e-7)
    np.testing.assert_allclose(decode_audio({"array": stereo, "sampling_rate": SR}), mean, atol=1e-7)

    extractor = AaspFeatureExtractor()
    reference = extractor(mean, **FEATURES)["input_values"]
    for same in (from_file, torch.from_numpy(stereo).mean(0)):
        np.testing.assert_allclose(extractor(same, **FEATURES)["input_values"], reference, atol=1e-5)
    for clip in (stereo, stereo.T, {"array": stereo, "sampling_rate": SR}):  # mono=True: (C, L), (L, C), a row
        kwargs = {} if isinstance(clip, dict) else {"mono": True}
        np.testing.assert_allclose(extractor(clip, **kwargs, **FEATURES)["input_values"], reference, atol=1e-5)

    expected = scores(classifier, mean)
    for label, score in scores(classifier, decode_audio(str(path))).items():
        assert score == pytest.approx(expected[label], abs=1e-6)


def pipeline_features(classifier, audio):
    processed = classifier.preprocess(audio)
    if hasattr(processed, "__next__"):  # ours yields a clip's windows (a ChunkPipeline): a short clip makes one
        processed = next(processed)
    return processed["input_values"].numpy()  # (1, T, F): what the pipeline feeds the model


def test_the_pipeline_given_a_stereo_file_averages_its_channels_like_every_other_entry_point(tmp_path, classifier):
    """The checkpoint's pipeline decodes a path, a pathlib.Path, bytes and a datasets cell (a torchcodec
    AudioDecoder) to the channel mean, exactly as `decode_audio` does; transformers' own pipeline class would give
    (L + R) / sqrt(2) for the path."""
    from torchcodec.decoders import AudioDecoder

    assert type(classifier).__name__ == "AaspAudioClassificationPipeline"
    stereo = stereo_clip()
    path = tmp_path / "stereo.wav"
    sf.write(path, stereo.T, SR, subtype="FLOAT")
    reference = pipeline_features(classifier, stereo.mean(axis=0))
    for given in (str(path), path, path.read_bytes(), AudioDecoder(str(path))):
        np.testing.assert_allclose(pipeline_features(classifier, given), reference, atol=1e-6)
    expected = scores(classifier, stereo.mean(axis=0))
    for label, score in scores(classifier, str(path)).items():
        assert score == pytest.approx(expected[label], abs=1e-6)

    # a 44.1 kHz file: the pipeline decodes and resamples it as decode_audio does, sample for sample
    path_44k = tmp_path / "stereo_44k.wav"
    sf.write(path_44k, np.tile(stereo, 3).T[:44100], 44100, subtype="PCM_16")
    np.testing.assert_array_equal(
        pipeline_features(classifier, str(path_44k)), pipeline_features(classifier, decode_audio(str(path_44k)))
    )

    # what the class replaces: transformers' AudioClassificationPipeline on the same path gives the sqrt(2) downmix
    from transformers import AudioClassificationPipeline

    stock = AudioClassificationPipeline(model=classifier.model, feature_extractor=classifier.feature_extractor)
    louder = pipeline_features(stock, stereo.sum(axis=0) / np.sqrt(2))  # (the stock class reads the whole clip)
    np.testing.assert_allclose(pipeline_features(stock, str(path)), louder, atol=1e-4)
    assert np.abs(louder - pipeline_features(stock, stereo.mean(axis=0))).max() > 0.05


def test_the_pipeline_says_what_is_wrong_with_a_file_it_cannot_decode(tmp_path, classifier):
    missing = tmp_path / "missing.wav"
    with pytest.raises(FileNotFoundError, match="missing.wav"):
        classifier(str(missing))
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF" + b"\0" * 60)  # a header and nothing else
    with pytest.raises(
        ValueError,
        match=rf"^Could not decode {broken} as audio \(.*\)\. Is it an audio file .* "
        rf"that is complete\?$",
    ):
        classifier(str(broken))


def test_the_plain_pipeline_call_works_where_the_package_is_installed(classifier, tmp_path):
    """In a fresh interpreter that imports aasp_hf: `pipeline("audio-classification", model=folder)` with no flag
    builds transformers' pipeline class over the installed model (same scores as our class on an array), and so
    does `trust_remote_code=True` where transformers prefers installed code to a checkpoint's (5.5 and later; 5.4
    builds the checkpoint's own pipeline class, the same scores); `pipeline_class=` gives ours (one downmix rule
    for files). Without the package, `trust_remote_code=True` builds the checkpoint's own class
    (tests/test_hub_integration.py)."""
    import json
    import subprocess
    import sys

    folder = classifier.model.name_or_path
    audio = stereo_clip().mean(axis=0)
    np.save(tmp_path / "audio.npy", audio)
    script = f"""
import json, numpy as np
import aasp_hf
from transformers import pipeline
audio = np.load({str(tmp_path / "audio.npy")!r})
plain = pipeline("audio-classification", model={folder!r}, device="cpu")
own = pipeline("audio-classification", model={folder!r}, trust_remote_code=True, device="cpu")
local = pipeline("audio-classification", model={folder!r}, pipeline_class=aasp_hf.AaspAudioClassificationPipeline)
scores = lambda p: {{x["label"]: x["score"] for x in p(audio, top_k=2)}}
print(json.dumps({{"types": [type(p).__name__ for p in (plain, own, local)], "own_module": type(own).__module__,
                   "model": type(plain.model).__module__, "scores": [scores(plain), scores(own)]}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "HF_MODULES_CACHE": str(tmp_path / "modules")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # transformers' class: on transformers 5.4 to 5.22 the installed package's AaspScoresAudioClassificationPipeline,
    # the same class with an AaSP checkpoint's score function chosen by problem_type (aasp_hf.pipeline_aasp), on later
    # ones its own
    assert report["types"][2] == "AaspAudioClassificationPipeline"
    assert report["types"][0] in ("AudioClassificationPipeline", "AaspScoresAudioClassificationPipeline")
    if TRANSFORMERS_VERSION >= (5, 5):  # transformers prefers the installed classes to the checkpoint's
        assert report["types"][1] == report["types"][0]
    else:  # 5.4: the checkpoint's own config keeps `custom_pipelines`, naming the checkpoint's pipeline class
        assert report["types"][1] == "AaspAudioClassificationPipeline"
        assert report["own_module"].startswith("transformers_modules."), report["own_module"]
    assert report["model"] == "aasp_hf.modeling_aasp"  # the installed package's class, no remote code
    plain, own = report["scores"]
    assert plain.keys() == own.keys() and all(abs(plain[k] - own[k]) < 1e-6 for k in plain)


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs ffmpeg")
def test_transformers_ffmpeg_reader_downmixes_stereo_to_the_sum_over_sqrt2(tmp_path):
    """Why checkpoints ship their own pipeline class: transformers' reader of a file path, ffmpeg's `-ac 1`, gives
    (L + R) / sqrt(2) for float output (docs/inference.md). If this fails, that line of the docs is stale."""
    from transformers.pipelines.audio_utils import ffmpeg_read

    stereo = stereo_clip()
    path = tmp_path / "stereo.wav"
    sf.write(path, stereo.T, SR, subtype="FLOAT")
    ffmpeg = ffmpeg_read(path.read_bytes(), SR)
    np.testing.assert_allclose(ffmpeg, stereo.sum(axis=0) / np.sqrt(2), atol=1e-6)
    assert np.abs(ffmpeg - stereo.mean(axis=0)).max() > 0.1


# ----------------------------------------------------------------------------------------------- truncated WAV
def test_a_truncated_wav_is_named_with_what_is_wrong_and_classified_on_what_it_holds(tmp_path, classifier, caplog):
    audio = stereo_clip()[0]
    whole = tmp_path / "whole.wav"
    sf.write(whole, audio, SR, subtype="PCM_16")
    cut = tmp_path / "cut.wav"
    cut.write_bytes(whole.read_bytes()[: 44 + 2 * 7000 + 1])  # header: 16000 frames; the file: 7000 and a half
    with caplog.at_level(logging.WARNING, logger="aasp_hf.data.decoding"):
        waveform = decode_audio(str(cut))
        assert scores(classifier, decode_audio(str(whole)))  # a complete file: no warning
    assert [r.getMessage() for r in caplog.records] == [
        f"{cut}: the WAV header promises 16000 frames (1.000 s at 16000 Hz) but the file holds 7000 (0.438 s): it "
        f"is truncated (an interrupted copy or download?); using the audio it holds."
    ]
    held = sf.read(whole, dtype="float32")[0][:7000]
    np.testing.assert_array_equal(waveform, held)  # the whole frames it holds (torchcodec alone would fail here)
    expected = scores(classifier, held)
    for label, score in scores(classifier, waveform).items():
        assert score == pytest.approx(expected[label], abs=1e-6)

    # the pipeline given the path (or the bytes) says the same and classifies the same whole frames
    for given, name in ((str(cut), str(cut)), (cut.read_bytes(), f"<{2 * 7000 + 45} bytes of a file>")):
        with pytest.warns(UserWarning) as warned:
            features = pipeline_features(classifier, given)
        assert [str(w.message) for w in warned] == [
            f"{name}: the WAV header promises 16000 frames (1.000 s at 16000 Hz) but the file holds 7000 (0.438 s): "
            f"it is truncated (an interrupted copy or download?); using the audio it holds."
        ]
        np.testing.assert_array_equal(features, pipeline_features(classifier, held))

    # a truncated 44.1 kHz stereo file: decode_audio and the pipeline decode and resample the same whole frames
    whole_44k = tmp_path / "whole_44k.wav"
    sf.write(whole_44k, np.tile(stereo_clip(), 3).T[:44100], 44100, subtype="PCM_16")
    cut_44k = tmp_path / "cut_44k.wav"
    cut_44k.write_bytes(whole_44k.read_bytes()[: 44 + 4 * 20000 + 3])  # 20000 stereo frames and 3 bytes of one more
    with pytest.warns(UserWarning, match="holds 20000"):
        features = pipeline_features(classifier, str(cut_44k))
    np.testing.assert_array_equal(features, pipeline_features(classifier, decode_audio(str(cut_44k))))


# ----------------------------------------------------------------------------------------------- corrupt clips in training
def test_pretraining_names_each_clip_that_fails_to_decode_in_the_log_and_in_a_file(tmp_path, caplog):
    import json

    import pretrain

    from conftest import cli_args

    audio = tmp_path / "audio"
    audio.mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        sf.write(audio / f"clip{i}.wav", (0.1 * rng.standard_normal(12_000)).astype(np.float32), SR)
    (audio / "broken.wav").write_bytes(b"RIFF" + b"\0" * 60)  # a header and nothing else
    model = tiny_config_kwargs(
        predictor_hidden_size=32,
        predictor_num_layers=1,
        predictor_num_attention_heads=2,
        mask_num_views=2,
        mask_block_sizes=[[1, 2], [2, 1]],
    )
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="aasp_hf.data.clips"):
        results = pretrain.main(
            cli_args(
                train_dir=str(audio),
                crop_seconds=0.5,
                model_config=json.dumps(model),
                output_dir=str(run),
                per_device_train_batch_size=4,
                max_steps=1,
                warmup_steps=1,
                logging_steps=1,
                save_steps=100,
                report_to="none",
                seed=0,
            )
        )
    assert results["decode_failures"] == 1
    broken = str(audio / "broken.wav")
    logged = [r.getMessage() for r in caplog.records if r.name == "aasp_hf.data.clips"]
    # the line finetune.py and linear_eval.py write too (tests/test_launch_and_refusals.py): path, short reason
    assert len(logged) == 1 and logged[0].startswith(f"skipped a clip that failed to decode: {broken}: RuntimeError: ")
    assert logged[0].endswith(f"listed in {run / 'decode_failures.txt'}") and ".cpp" not in logged[0]
    lines = (run / "decode_failures.txt").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{broken}\tRuntimeError: ") and ".cpp" not in lines[0]


def test_a_misspelt_feature_extractor_argument_is_refused_but_saved_files_still_load(tmp_path):
    """`AaspFeatureExtractor(sampling_rat=...)` used to keep the typo as an inert attribute. The keys transformers
    passes back from a saved preprocessor_config.json (feature_extractor_type, auto_map, processor_class,
    padding_side) still load, in process and as remote code in a fresh interpreter."""
    import json
    import os
    import subprocess
    import sys

    with pytest.raises(
        ValueError,
        match=r"^unknown key in AaspFeatureExtractor's arguments: 'sampling_rat' \(did you "
        r"mean 'sampling_rate'\?\)\. The valid keys are listed in AaspFeatureExtractor"
        r"'s docstring\.$",
    ):
        AaspFeatureExtractor(sampling_rat=16000)
    with pytest.raises(
        ValueError,
        match=r"unknown keys .*'feature_sise' \(did you mean 'feature_size'\?\), "
        r"'xyz'\.",
    ):
        AaspFeatureExtractor(feature_sise=64, xyz=1)
    AaspFeatureExtractor(feature_size=64, mode="kaldi").save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "preprocessor_config.json").read_text())
    assert {"feature_extractor_type", "auto_map", "padding_side"} <= set(saved)
    saved["processor_class"] = "SomeProcessor"  # what a processor's save_pretrained adds
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(saved))
    loaded = AaspFeatureExtractor.from_pretrained(tmp_path)
    assert (loaded.feature_size, loaded.mode) == (64, "kaldi")
    code = (
        "import sys; sys.modules['aasp_hf'] = None\n"  # remote code, the package unimportable
        "from transformers import AutoFeatureExtractor\n"
        f"fe = AutoFeatureExtractor.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)\n"
        "print(type(fe).__name__, fe.feature_size, fe.mode)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.stdout.split() == ["AaspFeatureExtractor", "64", "kaldi"], result.stderr
