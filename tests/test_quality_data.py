"""benchmarks/quality/build_data.py on a tiny fake package tree (no apt, fluidsynth or festival calls)."""

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
import soundfile as sf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("build_data", os.path.join(ROOT, "benchmarks/quality/build_data.py"))
bd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bd)

needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed")

RULES = [(r"/music/", "music"), (r"/sounds/", "sfx"), (r"/other/", "auto")]


def _tone(seconds, sr, freq=440.0, channels=1):
    t = np.arange(int(seconds * sr)) / sr
    x = 0.3 * np.sin(2 * np.pi * freq * t)
    return np.stack([x] * channels, axis=1) if channels > 1 else x


def make_fake_package(root):
    """A fake unpacked package: a long stereo OGG, a short WAV, a silent WAV, a corrupt OGG, a non-audio file."""
    base = os.path.join(root, "usr/share/games/fake")
    for d in ("music", "sounds", "other"):
        os.makedirs(os.path.join(base, d))
    sf.write(os.path.join(base, "music/song.ogg"), _tone(23.0, 44100, channels=2), 44100, format="OGG")
    sf.write(os.path.join(base, "sounds/boom.wav"), _tone(0.7, 22050, 880.0), 22050)
    sf.write(os.path.join(base, "sounds/silence.wav"), np.zeros(8000), 8000)
    with open(os.path.join(base, "sounds/broken.ogg"), "wb") as f:
        f.write(b"OggS this is not really an ogg file" * 10)
    sf.write(os.path.join(base, "other/ambience.wav"), _tone(2.0, 16000, 220.0), 16000)
    with open(os.path.join(base, "music/readme.txt"), "w") as f:
        f.write("not audio")
    return root


def fake_task_items(source, group_prefix, seed):
    rng = np.random.default_rng(seed)
    items = []
    for label in ("a", "b"):
        for k in range(3):
            items.append(
                {
                    "label": label,
                    "name": f"{source}_{label}{k}",
                    "audio": 0.1 * rng.standard_normal(16000),
                    "source": source,
                    "group": f"{group_prefix}/{label}{k}",
                    "origin": f"fake {label}{k}",
                }
            )
    return items


def run_fake_build(data_dir, package_root):
    bd.run_step(
        data_dir,
        "pretrain-fakepkg",
        ["pretrain/fakepkg"],
        lambda: bd.convert_source_files(data_dir, "fakepkg", package_root, RULES, jobs=1),
    )
    for split, source in (("train", "fake-train-sf"), ("test", "fake-test-sf")):
        bd.run_step(
            data_dir,
            f"task-toy-{split}",
            [f"tasks/toy/{split}"],
            lambda s=split, src=source: bd.save_task_clips(data_dir, "toy", s, fake_task_items(src, src, 0)),
        )
    return bd.write_manifest(data_dir)


@needs_ffmpeg
def test_fake_build_outputs_manifest_and_idempotence(tmp_path):
    package_root = make_fake_package(str(tmp_path / "unpacked" / "fakepkg"))
    data_dir = str(tmp_path / "data")
    manifest = run_fake_build(data_dir, package_root)
    files = manifest["files"]

    pre = [e for e in files if e["split"] == "pretrain"]
    # 23 s song -> 3 clips of 7.67 s; boom -> 1; ambience (2 s, "auto") -> sfx; silence dropped; broken skipped
    assert sorted(e["kind"] for e in pre) == ["music", "music", "music", "sfx", "sfx"]
    assert len(manifest["skipped_files"]["pretrain-fakepkg"]) == 1
    assert "broken.ogg" in manifest["skipped_files"]["pretrain-fakepkg"][0]
    assert not any("readme" in e["path"] or "silence" in e["path"] for e in files)

    for e in files:
        path = os.path.join(data_dir, e["path"])
        info = sf.info(path)
        assert (info.samplerate, info.channels, info.subtype, info.format) == (16000, 1, "PCM_16", "WAV")
        assert info.frames / 16000 <= bd.MAX_CLIP_SEC + 1e-6
        assert abs(info.frames / 16000 - e["seconds"]) < 1e-3
        assert bd.sha256_file(path) == e["sha256"]
    song = [e for e in pre if "song" in e["path"]]
    assert all(abs(e["seconds"] - 23.0 / 3) < 0.01 for e in song)

    # audiofolder layout of the task: tasks/toy/{train,test}/<label>/<file>.wav
    assert sorted(os.listdir(os.path.join(data_dir, "tasks/toy"))) == ["test", "train"]
    assert sorted(os.listdir(os.path.join(data_dir, "tasks/toy/test"))) == ["a", "b"]
    summary = manifest["summary"]
    assert summary["task_clips"]["toy"] == {"test": {"a": 3, "b": 3}, "train": {"a": 3, "b": 3}}
    assert summary["pretrain_hours_by_kind"]["music"] == pytest.approx(23.0 / 3600, abs=1e-3)
    assert "pre-training corpus" in bd.format_summary(manifest)

    # idempotent: a second run skips every step, rewrites nothing and gives the same manifest
    with open(os.path.join(data_dir, "manifest.json")) as f:
        first = f.read()
    mtimes = {e["path"]: os.stat(os.path.join(data_dir, e["path"])).st_mtime_ns for e in files}
    run_fake_build(data_dir, package_root)
    with open(os.path.join(data_dir, "manifest.json")) as f:
        assert f.read() == first
    assert mtimes == {e["path"]: os.stat(os.path.join(data_dir, e["path"])).st_mtime_ns for e in files}

    # resumable: a step whose record is gone is redone from scratch and gives identical files
    os.remove(os.path.join(data_dir, "steps", "pretrain-fakepkg.json"))
    run_fake_build(data_dir, package_root)
    with open(os.path.join(data_dir, "manifest.json")) as f:
        assert json.load(f) == json.loads(first)


def test_task_disjointness_check(tmp_path):
    data_dir = str(tmp_path)
    train = bd.save_task_clips(data_dir, "toy", "train", fake_task_items("sf-a", "sf-a", 0))["entries"]
    test = bd.save_task_clips(data_dir, "toy", "test", fake_task_items("sf-b", "sf-b", 1))["entries"]
    bd.check_task_disjointness(train + test)
    leaky = bd.save_task_clips(data_dir, "toy", "test", fake_task_items("sf-a", "sf-a", 2))["entries"]
    with pytest.raises(AssertionError, match="share sources"):
        bd.check_task_disjointness(train + leaky)
    pre = [{"path": "pretrain/x.wav", "split": "pretrain", "source": "sf-b", "kind": "music"}]
    with pytest.raises(AssertionError, match="pre-training sources"):
        bd.check_task_disjointness(train + test + pre)


def test_task_plans_keep_test_sources_unseen():
    plan = bd.task_plan()
    for task, splits in plan.items():
        assert splits["train"][0] != splits["test"][0], task  # another soundfont
    assert not set(bd.PITCH_TRAIN_PROGRAMS) & set(bd.PITCH_TEST_PROGRAMS)  # and other instruments
    assert bd.SPEECH_TRAIN_VOICE != bd.SPEECH_TEST_VOICE
    assert bd.VOICES[bd.SPEECH_TRAIN_VOICE][0] != bd.VOICES[bd.SPEECH_TEST_VOICE][0]
    for task, splits in plan.items():  # balanced classes
        for split, (_, notes) in splits.items():
            counts = {}
            for label, *_ in notes:
                counts[label] = counts.get(label, 0) + 1
            assert len(set(counts.values())) == 1, (task, split, counts)
    # nothing reserved for independent evaluation is ever referenced
    used = set(bd.GAME_SOURCES) | set(bd.SOUNDFONT_FILES) | {p for p, _ in bd.VOICES.values()}
    assert not used & bd.FORBIDDEN_PACKAGES
    with pytest.raises(bd.BuildError, match="reserved"):
        bd.fetch_deb("fluid-soundfont-gm", "/nonexistent")


def test_split_clips_and_midi(tmp_path):
    x = np.ones(int(25.5 * bd.SR), dtype=np.float32)
    clips = bd.split_clips(x)
    assert len(clips) == 3 and sum(len(c) for c in clips) == len(x)
    assert max(len(c) for c in clips) <= bd.MAX_CLIP_SEC * bd.SR
    assert len(bd.split_clips(x[:100])) == 1
    events = bd.pretrain_note_events(1)
    assert events == bd.pretrain_note_events(1)  # deterministic
    path = str(tmp_path / "a.mid")
    bd.write_midi(path, events)
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"MThd" and data[14:18] == b"MTrk" and data.endswith(b"\xff\x2f\x00")


def test_freepats_config_parsing():
    cfg = [
        "dir /x\n",
        "drumset 0\n",
        " 35 Drum_000/035_Kick_1.pat amp=100\n",
        "\n",
        "bank 0\n",
        "# comment\n",
        " 0 Tone_000/000_Acoustic_Grand_Piano.pat amp=120\n",
        " 73 Tone_000/073_Flute.pat\n",
    ]
    assert bd.freepats_programs(cfg) == [0, 73]


def test_missing_tool_and_package_errors(tmp_path):
    with pytest.raises(bd.BuildError, match="apt-get install fluidsynth"):
        bd.require_tool("fluidsynth", which=lambda name: None)
    with pytest.raises(bd.BuildError, match="apt-get install some-apt-pkg"):
        bd.require_tool("surely-not-a-tool-xyz", "some-apt-pkg")
    if shutil.which("apt-get") is None:
        pytest.skip("apt-get not available")
    # apt-get download fails locally (no network needed) for a package that does not exist
    with pytest.raises(bd.BuildError, match="aasp-no-such-package-xyz"):
        bd.fetch_deb("aasp-no-such-package-xyz", str(tmp_path / "debs"))
