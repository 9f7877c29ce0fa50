"""Loaders on damaged data: a truncated FLAC, a zero-byte WAV, a WAV with a garbage header, a header-only WAV, a
truncated WAV, a missing file listed in the metadata, an unknown label, a wrong CSV header. Datasets build from
metadata (no audio read); bad clips are reported with a count; training-side decoding skips them and keeps every
good clip. The matrix is in docs/reliability.md."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from aasp_hf.data import (
    AaspFineTuningCollator,
    SafeAudioDecoder,
    filter_decodable,
    for_safe_decoding,
    load_esc50,
    load_evar_task,
)
from aasp_hf.feature_extraction_aasp import AaspFeatureExtractor

ROOT = Path(__file__).resolve().parents[1]
SR = 16000
GOOD = ["a.wav", "b.flac", "c.wav", "d.flac"]
BAD = ["truncated.flac", "empty.wav", "garbage_header.wav", "header_only.wav"]


def _clip(seed, seconds=0.5):
    return (0.2 * np.random.default_rng(seed).standard_normal(int(seconds * SR))).astype(np.float32)


@pytest.fixture
def damaged(tmp_path):
    """audio/ with 4 good clips, 4 undecodable ones and a truncated WAV (decodable: its first half);
    meta.csv in EVAR format (file_name,label,split)."""
    audio = tmp_path / "audio"
    audio.mkdir()
    for i, name in enumerate(GOOD):
        sf.write(audio / name, _clip(i), SR, subtype="PCM_16")
    sf.write(audio / "full.flac", _clip(10, 2.0), SR)
    flac = (audio / "full.flac").read_bytes()
    (audio / "full.flac").unlink()
    (audio / "truncated.flac").write_bytes(flac[: len(flac) // 3])  # cut mid-frame
    (audio / "empty.wav").write_bytes(b"")
    (audio / "garbage_header.wav").write_bytes(b"RIFF\xff\xff\xff\xffWAVEfmt " + np.random.default_rng(0).bytes(2000))
    sf.write(audio / "full.wav", _clip(11, 1.0), SR, subtype="PCM_16")
    wav = (audio / "full.wav").read_bytes()
    (audio / "full.wav").unlink()
    (audio / "header_only.wav").write_bytes(wav[:44])  # a RIFF header and no samples
    (audio / "truncated.wav").write_bytes(wav[: 44 + 2 * 8000])  # header says 1 s, the file holds 0.5 s
    names = GOOD + BAD + ["truncated.wav"]
    labels = ["dog", "cat"] * 4 + ["dog"]
    rows = [f"{n},{lab},{'train' if i % 3 else 'test'}" for i, (n, lab) in enumerate(zip(names, labels))]
    (tmp_path / "meta.csv").write_text("file_name,label,split\n" + "\n".join(rows) + "\n")
    return tmp_path


def load(root, **kwargs):
    return load_evar_task(root / "meta.csv", root / "audio", label_names=["cat", "dog"], **kwargs)


def all_rows(dataset_dict):
    from datasets import concatenate_datasets

    return concatenate_datasets([dataset_dict[s] for s in ("train", "validation", "test")])


def test_the_dataset_builds_and_the_bad_clips_are_counted(damaged):
    dataset = all_rows(load(damaged))  # builds from metadata: no audio is read
    assert len(dataset) == 9
    decoder = SafeAudioDecoder()
    kept, dropped = filter_decodable(dataset, decoder=decoder)
    assert dropped == len(BAD) == decoder.num_failures
    assert sorted(Path(p).name for p in decoder.failures) == sorted(BAD)  # reported by name
    kept_names = sorted(kept["file_name"])
    assert kept_names == sorted(GOOD + ["truncated.wav"])  # nothing good is lost
    # the good clips decode to exactly what was written (PCM_16 round trip)
    for example in for_safe_decoding(kept):
        waveform = SafeAudioDecoder()(example["audio"])
        name = Path(example["audio"]["path"]).name
        if name.endswith(".wav") and name != "truncated.wav":
            expected = sf.read(damaged / "audio" / name, dtype="float32")[0]
            np.testing.assert_allclose(waveform, expected, atol=1e-6)
    truncated = SafeAudioDecoder()({"path": str(damaged / "audio" / "truncated.wav"), "bytes": None})
    assert len(truncated) == 8000  # a truncated WAV yields the samples it holds (documented, not an error)


def test_finetuning_collator_skips_bad_clips_and_keeps_labels_aligned(damaged):
    dataset = all_rows(load(damaged))
    examples = list(for_safe_decoding(dataset))
    collator = AaspFineTuningCollator(AaspFeatureExtractor(feature_size=32), task="scv2", split="test")
    batch = collator(examples)
    assert collator.num_skipped == len(BAD)
    good = [e for e in examples if Path(e["audio"]["path"]).name not in BAD]
    assert batch["labels"].tolist() == [e["label"] for e in good]
    assert batch["input_values"].shape[0] == len(good) and torch.isfinite(batch["input_values"]).all()
    assert collator([e for e in examples if Path(e["audio"]["path"]).name in BAD]) is None  # all bad: skip batch
    assert collator.num_skipped == 2 * len(BAD)


def test_pretraining_dataset_names_bad_clips_and_the_loop_replaces_them(damaged):
    from datasets import Audio

    from aasp_hf.data import AudioClips, FailedClip, replace_failed

    dataset = all_rows(load(damaged)).cast_column("audio", Audio(sampling_rate=SR))
    clips = AudioClips(dataset)
    items = [clips[i] for i in range(len(clips))]
    failed = [item for item in items if isinstance(item, FailedClip)]
    assert sorted(Path(f.source).name for f in failed) == sorted(BAD)  # each named by its file, with the reason
    reasons = {Path(f.source).name: f.reason for f in failed}
    assert reasons.pop("header_only.wav") == "a header and no audio samples"
    assert reasons.pop("empty.wav") == "an empty file (0 bytes)"
    # the decoder's own words, short: no C++ source location (torchcodec's "SingleStreamDecoder, /.../x.cpp:41, ")
    assert all(
        reason.startswith("RuntimeError: Could not ") and ".cpp" not in reason and len(reason) <= 200
        for reason in reasons.values()
    ), reasons
    examples, replaced = replace_failed(items)
    assert replaced == failed and len(examples) == len(items)  # batch shape kept (DDP), failures returned
    assert all(isinstance(e, dict) and torch.isfinite(e["waveform"]).all() for e in examples)
    with pytest.raises(RuntimeError, match="none of the 2 clips"):
        replace_failed([None, None])
    # a micro-batch where every clip failed takes copies of an earlier one's clips, its failures counted
    earlier = [e for e in items if not isinstance(e, FailedClip)][:2]
    examples, replaced = replace_failed(failed[:3], earlier=earlier)
    assert replaced == failed[:3] and examples == [earlier[0], earlier[1], earlier[0]]


def test_a_file_listed_in_the_metadata_but_missing_is_an_error_with_a_count(damaged):
    (damaged / "audio" / "c.wav").unlink()
    with pytest.raises(FileNotFoundError, match=r"1 of 9 audio files listed in .*meta\.csv are missing.*c\.wav"):
        load(damaged)


def test_an_unknown_label_is_an_error_naming_it(damaged):
    meta = damaged / "meta.csv"
    meta.write_text(meta.read_text().replace("b.flac,cat", "b.flac,bird"))
    with pytest.raises(ValueError, match=r"Unknown label\(s\) \['bird'\].*known labels are \['cat', 'dog'\]"):
        load(damaged)


@pytest.mark.parametrize("header", ["file,label,split", "file_name;label;split", ""])
def test_a_wrong_metadata_header_names_the_missing_columns(damaged, header):
    meta = damaged / "meta.csv"
    lines = meta.read_text().splitlines()
    meta.write_text("\n".join([header] + lines[1:]) + "\n")
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \[.*'file_name'.*\]: its header is"):
        load(damaged)


def test_esc50_with_a_wrong_header_and_a_damaged_clip(tmp_path):
    (tmp_path / "meta").mkdir()
    (tmp_path / "audio").mkdir()
    sf.write(tmp_path / "audio" / "1-1-A-0.wav", _clip(0), SR)
    (tmp_path / "audio" / "1-2-A-1.wav").write_bytes(b"")
    good_header = "filename,fold,target,category,esc10,src_file,take"
    rows = ["1-1-A-0.wav,1,0,dog,True,1,A", "1-2-A-1.wav,1,1,rooster,False,2,A"]
    (tmp_path / "meta" / "esc50.csv").write_text("\n".join([good_header.replace("target", "class")] + rows))
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['target'\]"):
        load_esc50(tmp_path)
    (tmp_path / "meta" / "esc50.csv").write_text("\n".join([good_header] + rows))
    dataset = load_esc50(tmp_path)["train"]
    assert len(dataset) == 2
    kept, dropped = filter_decodable(dataset)
    assert dropped == 1 and kept["filename"] == ["1-1-A-0.wav"]
