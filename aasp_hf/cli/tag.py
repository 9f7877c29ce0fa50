# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Tag audio files and folders with a saved AaSP classifier: `python -m aasp_hf.tag` (also the `aasp-tag` command).

    python -m aasp_hf.tag --model CLASSIFIER_DIR --output tags.csv recordings/ extra.flac
    python -m aasp_hf.tag --model SOUND_EVENT_DIR --output tags.csv --events events.tsv recordings/

Every file is read whole, window by window, as the pipelines read it (`pipeline_aasp`: windows of the length the model
was trained on, `--chunk_length_s` / `--chunk_hop_s` to change them; each window scored as its samples alone). OUT is
a CSV or JSON Lines file, chosen by its suffix; a file with no label chosen gets one row with an empty label and
score, so that the output says it was tagged.

A clip classifier (`AaspForAudioClassification`) scores each window:
- without `--timestamps`, rows `file,label,score`: the file's `--top_k` labels (default 1 for a single-label
  classifier, all for a multi-label one) whose score is at least `--threshold` (default 0, or 0.5 for multi-label),
  the file's scores the mean of the windows' for a single-label classifier, their max for a multi-label one;
- with `--timestamps`, rows `file,start,end,label,score` (seconds), the same choice of labels for each window;
- `--events EVENTS.tsv`: for every label, each run of consecutive windows where it is chosen is one event, its edges
  window edges. A single-label classifier gives every window a label (it has no "nothing happening" class), so it
  needs `--threshold` for events.
A frame classifier (`AaspForAudioFrameClassification`, sound event detection) scores each output frame (0.16 s); its
windows are whole frames (`AaspSoundEventDetectionPipeline`), and where windows overlap a frame's score is their mean:
- without `--timestamps`, rows `file,label,score`: the labels whose highest frame score (`--aggregation mean`: mean)
  is at least their threshold (the config's `event_thresholds`, default 0.5; `--threshold` one for all), `--top_k`
  of them (default all);
- with `--timestamps`, rows `file,start,end,label,score` for every output frame, the same choice for each frame;
- `--events EVENTS.tsv`: the events of `frame_events` with the settings saved in the config (`event_thresholds` or
  `--threshold`, `event_median_filter`, `event_min_duration`, `event_merge_gap`), as the pipeline gives them.
Events are written in DCASE's tab-separated `filename, onset, offset, event_label` (what sed_eval and sed_scores_eval
read), a file named as DCASE's reference annotations name it: by its path under the folder given on the command line
(`sub/a.wav`), or by its file name when the file itself is given; OUT's `file` column is the path as found.

How it runs: `--num_workers` processes decode the files (in 60-s blocks, so memory does not grow with a file's length)
and featurise their windows; the main process gathers windows, of one file or of several, into batches of
`--batch_size` for the model, and writes a file's rows and events when its last window is scored, then a line of
OUT's ledger (OUT's name + `.done.jsonl`): a file is done only once that line is whole (`RowWriter`), so a full disk
or a kill mid-file leaves no torn row that a rerun would read. A file that cannot be decoded, or a folder that cannot
be listed, is one line of the failures file (OUT's name + `.failures.tsv`) and the run goes on. Run again with the
same OUT to go on: files already done are skipped, known by their resolved path (and the failed ones tried again);
with an `--events` file that lacks some of them, those are tagged again for their events only. One tagger writes to
an OUT at a time (OUT's name + `.lock`, the training scripts' hold: a second is refused in one line, the hold of a
killed one taken over). Ctrl-C or SIGTERM stop at the next batch; OUT then holds every file finished so far,
complete.

A corpus larger than one machine: `--shard K/N` tags part K of the N parts of the files found (`shard_of`, a hash of
each file's resolved path, the same in every process on every machine), in the order the one-process run takes them,
and says in one line how many of the files found that is. N jobs (a SLURM job array, `examples/slurm/tag_array.sh`;
one process per GPU) each write their own OUT, events file, failures file and ledger, and each goes on by itself when
run again. The N OUTs concatenated (a CSV's and the events file's header once, JSON Lines as they are) hold the
one-process run's rows, each once, a file's rows together and in the same order; only the order of the files differs.
A score can differ in its last decimal where a window was batched with other windows (as between two runs of other
`--batch_size`) or ran on another device; with `--batch_size 1` on one kind of device the rows are the same lines.

Every option, path, device and model folder is checked before a file is read; a bad one is one line and exit status 2
(`entry_points.run_script`). The windows are the pipelines' (`pipeline_aasp.window_samples`). Exit status: 0, every
file tagged; 2, a usage error; 3 (`FILES_FAILED_EXIT_CODE`), the run finished but some files failed, and its last
line names the failures file; 75, stopped by a signal (the same command goes on).
"""

import argparse
import contextlib
import csv
import ctypes
import hashlib
import io
import json
import math
import os
import re
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from huggingface_hub.errors import StrictDataclassError  # a config.json value of the wrong type or range
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME

from ..data.audiofolder import AUDIO_EXTENSIONS  # a file named on the command line is read whatever its suffix
from ..utils.entry_points import STOPPED_EXIT_CODE, run_script  # 75: stopped by a signal; the same command goes on
from ..utils.errors import UsageError, parse_command_line
from ..utils.hub import unreadable_weights_message
from ..feature_extraction_aasp import AaspFeatureExtractor
from ..modeling_aasp import AaspForAudioClassification, AaspForAudioFrameClassification
from ..pipeline_aasp import (
    AaspAudioWindows,
    aggregate_windows,
    apply_score_function,
    decode_blocks,
    default_aggregation,
    default_function_to_apply,
    file_frame_scores,
    frame_events,
    frame_score_function,
    iter_windows,
    mark_last,
    window_samples,
)
from ..training.run_lock import RunHold  # one tagger per OUT, as one training run per folder

CLASSIFIERS = {model.__name__: model for model in (AaspForAudioClassification, AaspForAudioFrameClassification)}
WEIGHTS_FILES = (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME)  # save_pretrained's
FILES_FAILED_EXIT_CODE = 3  # the run finished, but some files could not be tagged: listed in the failures file
PRECISIONS = ("fp32", "bf16", "int8", "auto")  # --precision: the model's number format
FLAG_SPELLING = "--{name} {value}"  # an option in the shared windowing's messages (`window_samples`)
NO_AUDIO = "the file holds no audio (0 samples decoded): nothing to tag"  # its failure line


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m aasp_hf.tag",
        description="Tag audio files and folders with a saved AaSP classifier (docs/inference.md, "
        "'Long recordings and folders' and 'Sound events').",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="audio files, and folders searched recursively")
    parser.add_argument("--model", required=True, help="a classifier folder saved by save_pretrained (finetune.py)")
    parser.add_argument("--output", required=True, help="OUT: a .csv or .jsonl file; rows are appended")
    parser.add_argument(
        "--timestamps",
        action="store_true",
        help="rows file,start,end,label,score: one per window (a frame classifier: one per 0.16-s output frame)",
    )
    parser.add_argument(
        "--events",
        help="also write events to this DCASE .tsv: a frame classifier's, post-processed with its config's settings; "
        "a clip classifier's, runs of windows of one label",
    )
    parser.add_argument("--top_k", type=int, help="labels per file or window (default 1; multi-label, frames: all)")
    parser.add_argument(
        "--threshold",
        type=float,
        help="the lowest score written (default 0; multi-label: 0.5; frames: the config's event_thresholds or 0.5)",
    )
    parser.add_argument("--chunk_length_s", type=float, help="window length (default: the trained length)")
    parser.add_argument("--chunk_hop_s", type=float, help="seconds between window starts (default: no overlap)")
    parser.add_argument(
        "--aggregation",
        choices=("mean", "max"),
        help="windows (frames) -> file (default mean; multi-label, frames: max)",
    )
    parser.add_argument("--batch_size", type=int, default=8, help="windows per model call (default 8)")
    parser.add_argument(
        "--num_workers",
        type=int,
        help="decoding processes; 0: in this one (default: 0 on 2 cores or fewer, where a worker takes a core the "
        "model needs, else 1)",
    )
    parser.add_argument("--device", default="cpu", help="where the model runs (default cpu)")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="the model's number format, cast once at loading (the SBLU stays float32): fp32 (default); bf16; int8 "
        "(dynamic int8 linear layers, CPU only); auto: bf16 where the device multiplies bf16 natively (a CPU with "
        "AMX or AVX512-BF16, a GPU with bf16), else fp32",
    )
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="tag only part K of N (1 <= K <= N) of the files found, chosen by a hash of each file's resolved path: "
        "N jobs, each with its own --output, tag a corpus together (docs/inference.md, 'A corpus across machines')",
    )
    args = parse_command_line(parser, argv)
    args.shard = parse_shard(args.shard)
    check_output_paths(args)
    suffix = Path(args.output).suffix.lower()
    if suffix not in (".csv", ".jsonl"):
        raise UsageError(f"--output {args.output}: the suffix must be .csv or .jsonl (it chooses the format).")
    for name in ("top_k", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name} {getattr(args, name)} must be at least 1.")
    if args.num_workers is None:
        args.num_workers = default_num_workers()
    if args.num_workers < 0:
        raise UsageError(f"--num_workers {args.num_workers} must be 0 or more.")
    try:
        AaspAudioWindows.window_seconds(args.chunk_length_s, args.chunk_hop_s, spelling=FLAG_SPELLING)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.threshold is not None and not math.isfinite(args.threshold):
        raise UsageError(f"--threshold {args.threshold} must be a number: the lowest score written, e.g. 0.5.")
    check_device(args.device)
    args.precision, args.precision_reason = resolve_precision(args.precision, args.device)
    return args


def default_num_workers() -> int:
    """Decoding processes when --num_workers is not given: none where this process may use 2 cores or fewer (decoding
    and the log-mel are a few percent of the model's time, and a worker process would take a core from the model's
    threads), else one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 0 if cores <= 2 else 1


def cpu_flags() -> set:
    """The feature flags of this machine's CPU (Linux's /proc/cpuinfo); empty where that file is not."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def native_bf16(device: str) -> str | None:
    """What multiplies bf16 matrices natively on `device` ("amx_bf16" or "avx512_bf16": CPU instructions that take
    bf16 operands; "cuda"), or None where bf16 would be converted to float32 around every product (no faster)."""
    device = torch.device(device)
    if device.type == "cuda":
        return "cuda" if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu":
        return next((flag for flag in ("amx_bf16", "avx512_bf16") if flag in cpu_flags()), None)
    return None


def quantize_dynamic():
    """torch's `quantize_dynamic`, or None where this torch no longer has it (it is announced to move to torchao)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic
    except ImportError:
        return None
    return quantize_dynamic


def resolve_precision(precision: str, device: str) -> tuple[str, str]:
    """(fp32, bf16 or int8, why): `auto` made definite for `device`; int8 refused off the CPU (its kernels are
    the CPU's)."""
    if precision == "int8" and torch.device(device).type != "cpu":
        raise UsageError(
            f"--precision int8 runs on the CPU only (dynamic int8 linear layers): not on --device {device}."
        )
    if precision == "int8" and quantize_dynamic() is None:
        raise UsageError(f"--precision int8 needs torch's dynamic quantization, which torch {torch.__version__} lacks.")
    native = native_bf16(device)
    if precision != "auto":
        return precision, "as asked"
    if native is not None:
        return "bf16", f"auto: native bf16 matrix products ({native})"
    return "fp32", "auto: this device has no native bf16 matrix products"


def parse_shard(value) -> tuple[int, int] | None:
    """`--shard K/N` -> (K, N), None without it; anything but whole numbers 1 <= K <= N is a UsageError."""
    if value is None:
        return None
    match = re.fullmatch(r"([0-9]+)/([0-9]+)", value)
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise UsageError(
            f"--shard {value} must be K/N, whole numbers with 1 <= K <= N: this job's part K of N parts (e.g. "
            f"--shard 2/3)."
        )
    return int(match[1]), int(match[2])


def shard_of(file, count: int) -> int:
    """The part (1 ... `count`) of `--shard` that holds `file`: the SHA-1 of its resolved path (the key OUT's ledger
    knows it by) modulo `count`. Not Python's `hash()`, which is salted anew in every process: every job, on any
    machine, must put a file in the same part, so that the N jobs tag each file once (given that they see the files
    at the same resolved paths, as on a shared file system)."""
    digest = hashlib.sha1(resolved(file).encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def one_shard(files: dict, unreadable: list, shard: tuple[int, int]) -> tuple[dict, list]:
    """`find_audio_files`' (files, unreadable folders) -> those of part K of N (`shard_of`), in the order found, so
    that a job takes its files in the order the one-process run would. A folder that cannot be listed falls to one
    part too, by its own path: the N failures files together name it once, as the one-process run's does."""
    number, count = shard
    mine = {file: name for file, name in files.items() if shard_of(file, count) == number}
    return mine, [(folder, why) for folder, why in unreadable if shard_of(folder, count) == number]


def check_output_paths(args):
    """OUT, the events file and the failures file (OUT + `.failures.tsv`) must be files, and three different ones."""
    output = Path(args.output).resolve()
    for flag, path, example in (("--output", args.output, "tags.csv"), ("--events", args.events, "events.tsv")):
        if path is not None and Path(path).is_dir():
            raise UsageError(f"{flag} {path} is a folder: give the file to write (e.g. {Path(path) / example}).")
    if args.events is not None and Path(args.events).resolve() in (output, Path(f"{output}.failures.tsv")):
        raise UsageError(
            f"--events {args.events} is the file --output {args.output} writes (or its failures file): give the "
            f"events their own file (e.g. {Path(args.output).with_suffix('.events.tsv')})."
        )


def check_device(device: str):
    """A UsageError when `device` is not a torch device, or one this machine does not have (`cuda` without a GPU)."""
    try:
        torch.device(device)
    except RuntimeError:
        raise UsageError(f"--device {device} is not a torch device: e.g. cpu, cuda, cuda:1, mps.") from None
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as error:  # AssertionError: a torch built without CUDA
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"--device {device} is not available on this machine ({reason}): e.g. --device cpu.") from None


def find_audio_files(paths) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """({file: its name in an events file}, [(folder, why it cannot be listed)]): the files named, each named by its
    file name, and the audio files (by `AUDIO_EXTENSIONS`) under the folders named, each named by its path under that
    folder (`sub/a.wav`, with `/`), as DCASE's reference annotations name the files of their audio folder. Sorted, once
    each by its resolved path (with its first name: `a.wav` and `./a.wav` are one file). A sub-folder that cannot be
    listed (no permission, gone) is returned with its reason, for the failures file: never skipped without a word."""
    files, unreadable, seen = {}, [], set()
    for path in map(Path, paths):
        if path.is_dir():
            found, errors = [], []
            for folder, _, names in os.walk(path, onerror=errors.append):  # symbolic links to folders not followed
                found += [Path(folder, n) for n in names if Path(n).suffix.lower() in AUDIO_EXTENSIONS]
            if any(Path(error.filename) == path for error in errors):
                raise UsageError(f"{path} cannot be read ({errors[0].strerror}): give a folder this user can list.")
            unreadable += [(error.filename, f"{type(error).__name__}: {error.strerror}") for error in errors]
            found = sorted((f for f in found if f.is_file()), key=str)
            if not found and not errors:
                raise UsageError(f"{path} holds no audio file ({', '.join(AUDIO_EXTENSIONS)}).")
            named = [(file, file.relative_to(path).as_posix()) for file in found]
        elif path.is_file():
            named = [(path, path.name)]
        else:
            raise UsageError(f"{path}: no such file or folder.")
        for file, name in named:
            if resolved(file) not in seen:
                seen.add(resolved(file))
                files[str(file)] = name
    return files, unreadable


def resolved(file) -> str:
    """How OUT's ledger knows a file, however its path was written (relative, absolute, through a link)."""
    return str(Path(file).resolve())


def check_event_names(files: dict, events_path):
    """Two files of one name in the events file would be one recording to a scorer, and a name with a tab or a line
    break cannot be a field of its tab-separated lines (DCASE's tables have no quoting; a scorer would read other
    columns): both refused before any work, naming the files."""
    broken = [name for name in files.values() if any(c in name for c in "\t\n\r")]
    if broken:
        raise UsageError(
            f"--events {events_path}: {len(broken)} file name(s) hold a tab or a line break, which a DCASE events "
            f"file (tab-separated, one event per line) cannot hold, e.g. {broken[0]!r}: rename them, or tag them "
            f"without --events."
        )
    seen = {}
    for file, name in files.items():
        if name in seen:
            raise UsageError(
                f"--events {events_path}: {seen[name]} and {file} would both be named {name} there (a file is named "
                f"by its path under the folder given, or by its file name when it is given itself): tag them in "
                f"separate runs, or give the folder that holds both."
            )
        seen[name] = file


def read_classifier(folder):
    """(model class, config, feature extractor) of a folder saved by `save_pretrained`: a clip classifier
    (`AaspForAudioClassification`) or a frame classifier (`AaspForAudioFrameClassification`); a folder without them,
    or whose files do not load, is a UsageError. The weights load later (`load_weights`), once the options are checked
    against the config."""
    config_file = Path(folder) / "config.json"
    if not config_file.is_file():
        raise UsageError(f"--model {folder}: no config.json there; give the folder a classifier was saved to.")
    try:
        saved = json.loads(config_file.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"--model {folder}: its config.json is not JSON ({error}); save it again.") from None
    architectures = saved.get("architectures") if isinstance(saved, dict) else None
    architectures = [name for name in architectures if isinstance(name, str)] if isinstance(architectures, list) else []
    name = next((name for name in architectures if name in CLASSIFIERS), None)
    if name is None:
        raise UsageError(
            f"--model {folder} holds {', '.join(architectures) or 'no model class'}, not an AaspForAudioClassification "
            f"or AaspForAudioFrameClassification: tagging needs a fine-tuned classifier (examples/finetune.py saves one)."
        )
    if not any((Path(folder) / weights).is_file() for weights in WEIGHTS_FILES):
        raise UsageError(
            f"--model {folder} holds a config.json but no weights ({' or '.join(WEIGHTS_FILES)}): give the folder "
            f"save_pretrained wrote whole."
        )
    message = unreadable_weights_message(Path(folder))  # a truncated copy: named here, before anything loads
    if message is not None:
        raise UsageError(f"--model {folder}: {message}")
    model_class = CLASSIFIERS[name]
    with unloadable(folder, name):
        config = model_class.config_class.from_pretrained(folder)
        return model_class, config, AaspFeatureExtractor.from_pretrained(folder)


def load_weights(model_class, folder, config, device, precision: str = "fp32"):
    """The model of `read_classifier`'s folder, in eval mode on `device`, in `precision` (cast once, here):
    - fp32 and bf16: every weight in that format, whatever the checkpoint's, except the SBLU's, which stay float32
      (the model's `_keep_in_fp32_modules_strict`: its taps decay over K samples to values bf16 cannot hold);
    - int8: every linear layer with int8 weights and int8 products of its inputs quantised per call (torch's
      dynamic quantization; the convolutions, norms, softmax and SBLU stay float32)."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with unloadable(folder, model_class.__name__):
        model = model_class.from_pretrained(folder, config=config, dtype=dtype)
    model = model.to(device).eval()
    if precision == "int8":
        with warnings.catch_warnings():  # torch announces a move of this API to torchao; it works as documented
            warnings.simplefilter("ignore")
            model = quantize_dynamic()(model, {torch.nn.Linear}, dtype=torch.qint8)
    return model


@contextlib.contextmanager
def unloadable(folder, name: str):
    """A config, front end or weights file that does not load (a wrong value, a truncated file) as one UsageError."""
    try:
        yield
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RuntimeError, StrictDataclassError) as error:
        reason = " ".join(str(error).split())[:300] or type(error).__name__
        raise UsageError(f"--model {folder} does not load as {name} ({reason}); save the classifier again.") from None


@dataclass
class LabelChoice:
    """What is written of a model's scores: `function_to_apply` turns logits into scores; a file's scores are its
    windows' (frames') by `aggregation`; a file, window or frame gets its `top_k` highest labels scoring at least
    their `thresholds` (one per label)."""

    labels: list
    function_to_apply: str
    top_k: int
    thresholds: np.ndarray
    aggregation: str

    @classmethod
    def of(cls, args, config, frame_level: bool) -> "LabelChoice":
        labels = [config.id2label[i] for i in range(config.num_labels)]
        if frame_level:
            function_to_apply = frame_score_function(config)
            top_k = config.num_labels if function_to_apply == "sigmoid" else 1
            threshold = config.event_thresholds if config.event_thresholds is not None else 0.5
            aggregation = "max"
        else:
            multi_label = config.problem_type == "multi_label_classification"
            function_to_apply = default_function_to_apply(config)
            top_k = config.num_labels if multi_label else 1
            threshold = 0.5 if multi_label else 0.0
            aggregation = default_aggregation(config)
        if args.threshold is not None and function_to_apply != "none" and not 0 <= args.threshold <= 1:
            raise UsageError(
                f"--threshold {args.threshold} must be between 0 and 1: the lowest score written, and this model's "
                f"scores are probabilities (a {function_to_apply})."
            )
        threshold = threshold if args.threshold is None else args.threshold
        thresholds = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (len(labels),))
        return cls(labels, function_to_apply, args.top_k or top_k, thresholds, args.aggregation or aggregation)

    def pick(self, scores) -> list:
        return choose_labels(scores, self.labels, self.top_k, self.thresholds)

    def aggregate(self, scores):
        """(W, labels) -> (labels,)"""
        return aggregate_windows(scores, self.aggregation)


def tag_windows(args, feature_extractor, config, frame_level: bool) -> tuple[int, int, int]:
    """(window, hop, align) in samples: the pipelines' windows (`window_samples`) of the trained length or
    `--chunk_length_s`, and `--chunk_hop_s` (default: the window); a frame classifier's in whole output frames, every
    window starting on their grid (as its pipeline's)."""
    try:
        window, hop = window_samples(
            feature_extractor, config, args.chunk_length_s, args.chunk_hop_s, frame_level, FLAG_SPELLING
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    return window, hop, config.time_patch_size * feature_extractor.hop_length if frame_level else 1


def clip_events_note(args, config, hop_seconds: float) -> str:
    """What `--events` writes for a clip classifier, in one line; refused for a single-label classifier without
    `--threshold` (each window gets one of its labels, so its events would cover every file from end to end)."""
    if config.problem_type != "multi_label_classification" and args.threshold is None:
        raise UsageError(
            f"--events with {args.model}, a single-label clip classifier, needs --threshold: it gives every window one "
            f"of its labels (it has no 'nothing happening' class), so its events would cover every file from end to "
            f"end. Pass --threshold (the lowest score of an event's windows), or use a multi-label or a frame "
            f"classifier."
        )
    return (
        f"--events: {args.model} is a clip classifier: an event is a run of consecutive windows where a label is "
        f"chosen, its onset and offset window edges ({hop_seconds:g}-s hop); a frame classifier (AaspForAudioFrame"
        f"Classification) gives events in 0.16-s frames."
    )


class FileWindows(torch.utils.data.IterableDataset):
    """The windows of `files` (`iter_windows`, the last one's start a multiple of `align` samples), featurised, file
    after file; with several DataLoader workers, worker w takes files w, w + n, ... Items: `{"file": index, "start"
    (its first sample), "samples" (how many), "input_values": (T, F), "frames": real frames, "last": bool}`, or
    `{"file": index, "error": message, "last": True}` for a file that fails (after any of its windows)."""

    def __init__(self, files, feature_extractor, window: int, hop: int, align: int = 1):
        self.files, self.feature_extractor, self.window, self.hop = files, feature_extractor, window, hop
        self.align = align

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        rate = self.feature_extractor.sampling_rate
        for index in range(worker, len(self.files), num_workers):
            try:
                windows = iter_windows(decode_blocks(self.files[index], rate), self.window, self.hop, self.align)
                for start, samples, last in mark_last(windows, NO_AUDIO):
                    with one_thread():
                        features = self.feature_extractor(
                            samples, sampling_rate=rate, return_tensors="pt", truncation=False
                        )
                    yield {
                        "file": index,
                        "start": start,
                        "samples": len(samples),
                        "input_values": features["input_values"][0],  # (1, T, F) -> (T, F)
                        "frames": int(features["attention_mask"].sum()),  # real frames, <= T
                        "last": last,
                    }
            except Exception as error:  # noqa: BLE001 - any file that fails is reported and skipped
                yield {"file": index, "error": f"{type(error).__name__}: {error}".replace("\n", " "), "last": True}


@contextlib.contextmanager
def one_thread():
    """torch on one thread for what runs inside (then the threads it had). The log-mel of a window is a few small
    operations; split over threads, each waits for the others to wake, and where the model's threads or another
    process hold the cores that wait is the whole cost: a 10-s window took 7 ms on one thread and 120-170 ms on two of
    a loaded 2-core machine. DataLoader workers run on one thread already; this is for --num_workers 0."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def ignore_interrupts_in_worker(worker_id):
    """A DataLoader worker leaves Ctrl-C (SIGINT, sent to the whole process group) to the main process, which stops
    after its current batch and shuts the workers down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)


class StopRequest:
    """SIGINT and SIGTERM set `signal` (the first one received) instead of ending the process, until `restore` puts
    the previous handlers back (so that `main()` called in a process leaves its handlers as it found them)."""

    def __init__(self):
        self.signal = None
        self.previous = {number: signal.signal(number, self._handle) for number in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, number, frame):
        self.signal = self.signal or number

    def restore(self):
        for number, handler in self.previous.items():
            signal.signal(number, handler)


LEDGER_SUFFIX = ".done.jsonl"  # OUT's ledger: which files are done, and how far OUT and the events file reach then
EVENTS_HEADER = "filename\tonset\toffset\tevent_label\n"


def file_size(handle_or_path) -> int:
    if isinstance(handle_or_path, (str, Path)):
        return Path(handle_or_path).stat().st_size if Path(handle_or_path).exists() else 0
    return os.fstat(handle_or_path.fileno()).st_size


class RowWriter:
    """OUT (CSV or JSON Lines by its suffix), the events file (`events`, DCASE's TSV) and OUT's ledger (OUT +
    `.done.jsonl`), all appended to. `write_file` writes a file's rows and events, then one ledger line naming the
    file by its resolved path, with the sizes OUT and the events file have after them: a file is done only once that
    line is whole. A write the disk refuses (full, over quota) cuts all three back to where the file began and raises;
    a run killed mid-file leaves bytes past the sizes of the last whole ledger line, which the next `RowWriter` cuts
    off, so a torn last row is never read as a row and that file is tagged again.

    `done`: the resolved paths of the files OUT holds; `with_events`: those whose events are in this run's events
    file (a file tagged without `--events`, or into another events file, is not); `earlier_events`: the events file
    of the latest run that wrote one, or None."""

    def __init__(self, path, columns, events=None, run=None):
        self.path, self.columns, self.jsonl = Path(path), columns, Path(path).suffix.lower() == ".jsonl"
        self.ledger_path = Path(f"{path}{LEDGER_SUFFIX}")
        self.events_path = None if events is None else Path(events)
        self.events_key = None if events is None else resolved(events)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        entries, adopted = self._recover()
        files = [entry for entry in entries if "file" in entry]
        self.done = {entry["file"] for entry in files}
        self.with_events = {e["file"] for e in files if events is not None and e.get("events") == self.events_key}
        self.earlier_events = next((e["events"] for e in reversed(entries) if e.get("events")), None)
        self.earlier_precisions = set()  # the precisions of the runs that wrote OUT's files (before this one)
        precision = None  # a file's run: the last run line above it (files adopted from before ledgers have none)
        for entry in entries:
            if "file" not in entry:
                precision = entry.get("precision")
            elif precision is not None:
                self.earlier_precisions.add(precision)
        self.run = dict(run or {})
        self.file = open(self.path, "ab", buffering=0)  # noqa: SIM115 - unbuffered: a refused write leaves nothing pending
        self.events = None if events is None else open(self.events_path, "ab", buffering=0)  # noqa: SIM115
        self.ledger = open(self.ledger_path, "ab", buffering=0)  # noqa: SIM115
        if file_size(self.file) == 0 and not self.jsonl:
            self._append(self.file, self.path, csv_text([columns]))
        if self.events is not None and file_size(self.events) == 0:
            self._append(self.events, self.events_path, EVENTS_HEADER)
        for entry in adopted:
            self._append(self.ledger, self.ledger_path, json.dumps(entry) + "\n")
        self._append(self.ledger, self.ledger_path, self._ledger_line(run=self.run))  # where this run starts, how

    def _ledger_line(self, file=None, run=None) -> str:
        entry = {"file": file} if file is not None else dict(run or {})
        entry["out"] = file_size(self.file)
        if self.events is not None:
            entry.update(events=self.events_key, events_size=file_size(self.events))
        return json.dumps(entry) + "\n"

    def _recover(self) -> tuple[list, list]:
        """(the ledger's whole lines, the files of an OUT written before ledgers, to be added to it); OUT and the
        events file cut back to the sizes the ledger's last lines give."""
        entries = []
        if self.ledger_path.exists():
            data = self.ledger_path.read_bytes()
            whole = data[: data.rfind(b"\n") + 1]  # a torn last line is no line
            try:
                entries = [json.loads(line) for line in whole.splitlines() if line.strip()]
            except ValueError:
                raise UsageError(
                    f"--output {self.path}: its ledger {self.ledger_path} is damaged (a line that is not JSON before "
                    f"its last): choose another --output, or remove both files to tag everything again."
                ) from None
            if len(whole) < len(data):
                os.truncate(self.ledger_path, len(whole))
        adopted = [] if entries else self._adopt()
        entries += adopted
        if entries:
            self._cut("--output", self.path, entries[-1]["out"])
        self._check_columns()
        if self.events_path is not None:
            naming = [entry for entry in entries if entry.get("events") == self.events_key]
            if naming:
                self._cut("--events", self.events_path, naming[-1]["events_size"])
            elif file_size(self.events_path) and self.events_path.read_bytes() != EVENTS_HEADER.encode():
                raise UsageError(
                    f"--events {self.events_path} already holds events that were not written with --output "
                    f"{self.path} (its ledger {self.ledger_path} does not name it): appending would double or mix "
                    f"them. Choose another --events (the files already in {self.path} are then tagged again for "
                    f"their events), or remove it."
                )
        return entries, adopted

    def _cut(self, option, path, committed: int):
        """`path` cut back to `committed` bytes, the size the ledger last gave it; shorter is refused."""
        actual = file_size(path)
        if actual < committed:
            raise UsageError(
                f"{option} {path} holds {actual} bytes, but its ledger {self.ledger_path} says {committed} were "
                f"written: it was changed since. Choose another {option}, or remove {path} and {self.ledger_path} to "
                f"tag everything again."
            )
        if actual > committed:
            os.truncate(path, committed)
            print(
                f"{path}: cut {actual - committed} bytes written after its last whole file (a run ended while "
                f"writing a file); that file is tagged again.",
                file=sys.stderr,
            )

    def _adopt(self) -> list:
        """An OUT with rows but no ledger (written before ledgers): its files are done, a torn last line cut off."""
        data = self.path.read_bytes() if self.path.exists() else b""
        whole = data[: data.rfind(b"\n") + 1]
        if len(whole) < len(data):
            os.truncate(self.path, len(whole))
        text = whole.decode("utf-8", "surrogateescape")
        if self.jsonl:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            rows = list(csv.DictReader(io.StringIO(text, newline="")))
        files = dict.fromkeys(resolved(row["file"]) for row in rows if "file" in row)
        return [{"file": file, "out": len(whole)} for file in files]

    def _check_columns(self):
        if file_size(self.path) == 0:
            return
        with open(self.path, newline="", errors="surrogateescape") as file:
            first = file.readline()
        if self.jsonl:
            found = list(json.loads(first)) if first.strip() else self.columns
        else:
            found = next(csv.reader([first]), [])
        if list(found) != list(self.columns):
            raise UsageError(
                f"--output {self.path} has the columns {','.join(found)}, but this run writes {','.join(self.columns)} "
                f"(with or without --timestamps): choose another --output, or remove that file."
            )

    @staticmethod
    def _append(handle, path, text: str):
        data = memoryview(text.encode("utf-8", "surrogateescape"))
        try:
            while data:
                data = data[handle.write(data) :]
        except OSError as error:  # named, so that the one line says which file
            raise OSError(error.errno, error.strerror, str(path)) from None

    def write_file(self, rows, events=(), file=None, with_rows=True):
        """Appends a file's rows (not when `with_rows` is False: OUT has them, only its events are added), its
        events, then its ledger line (`file`: its resolved path; default that of the first row's file). A refused
        write cuts the three back to where they were and raises the OSError, naming the file it was writing."""
        file = resolved(rows[0][0]) if file is None else file
        handles = [h for h in (self.file, self.events, self.ledger) if h is not None]
        sizes = [file_size(handle) for handle in handles]
        try:
            if with_rows:
                self._append(self.file, self.path, self._format(rows))
            if self.events is not None:
                self._append(self.events, self.events_path, "".join("\t".join(map(str, e)) + "\n" for e in events))
            for handle in (self.file, self.events):  # on the disk before the line that says so: after a power cut
                if handle is not None:  # the ledger never names bytes the disk lost
                    os.fdatasync(handle.fileno())
            self._append(self.ledger, self.ledger_path, self._ledger_line(file))
        except OSError:
            for handle, size in zip(handles, sizes):
                with contextlib.suppress(OSError):
                    os.ftruncate(handle.fileno(), size)
            raise

    def _format(self, rows) -> str:
        if self.jsonl:
            return "".join(json.dumps(dict(zip(self.columns, row))) + "\n" for row in rows)
        return csv_text(rows)

    def close(self):
        for handle in (self.file, self.events, self.ledger):
            if handle is not None:
                handle.close()


def csv_text(rows) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)  # lines end with \r\n, as csv writes them
    return buffer.getvalue()


def choose_labels(scores, labels, top_k, threshold):
    """(labels,) scores -> [(label, score)] of the `top_k` highest at or above `threshold` (one for all labels, or
    one per label), highest first; one `("", "")` when none is."""
    threshold = np.broadcast_to(threshold, scores.shape)
    order = np.argsort(-scores, kind="stable")[:top_k]
    chosen = [(labels[i], round(float(scores[i]), 6)) for i in order if scores[i] >= threshold[i]]
    return chosen or [("", "")]


def events_of(file, starts, ends, chosen_per_window):
    """DCASE rows (file, onset, offset, label): each run of consecutive windows in which a label is chosen."""
    events, open_runs = [], {}  # label -> onset of its run so far
    for index, chosen in enumerate(chosen_per_window + [[]]):  # an empty window after the last closes every run
        present = {label for label, _ in chosen if label}
        for label in list(open_runs):
            if label not in present:
                events.append((file, open_runs.pop(label), ends[index - 1], label))
        for label in present:
            open_runs.setdefault(label, starts[index])
    return sorted(events, key=lambda event: (event[1], event[3]))


def clip_file_output(name, event_name, windows, choice: LabelChoice, rate: int, timestamps: bool):
    """A clip classifier's file: its windows' `(start, samples, scores (labels,), None)` -> (OUT's rows, its events,
    its duration in seconds)."""
    scores = np.stack([window[2] for window in windows])  # (W, labels)
    starts = [round(start / rate, 6) for start, _, _, _ in windows]
    ends = [round((start + samples) / rate, 6) for start, samples, _, _ in windows]
    per_window = [choice.pick(s) for s in scores]
    if timestamps:
        rows = [
            (name, start, end, label, score)
            for start, end, chosen in zip(starts, ends, per_window)
            for label, score in chosen
        ]
    else:
        rows = [(name, label, score) for label, score in choice.pick(choice.aggregate(scores))]
    return rows, events_of(event_name, starts, ends, per_window), ends[-1]


def frame_file_output(name, event_name, windows, choice: LabelChoice, frame: int, rate: int, timestamps: bool, config):
    """A frame classifier's file: its windows' `(start, samples, scores (T', labels), frame_mask (T',))` -> (OUT's
    rows, its events, its duration in seconds), the frame scores joined as `AaspSoundEventDetectionPipeline` joins
    them (`file_frame_scores`) and the events its `frame_events` with the config's settings."""
    scores = file_frame_scores(windows, frame)  # (frames, labels)
    duration = max(start + samples for start, samples, _, _ in windows) / rate
    frame_seconds = frame / rate
    if timestamps:
        rows = []
        for index, frame_scores in enumerate(scores):
            start, end = round(index * frame_seconds, 6), round(min((index + 1) * frame_seconds, duration), 6)
            rows += [(name, start, end, label, score) for label, score in choice.pick(frame_scores)]
    else:
        rows = [(name, label, score) for label, score in choice.pick(choice.aggregate(scores))]
    found = frame_events(
        scores,
        frame_seconds,
        choice.labels,
        thresholds=choice.thresholds,
        median_filter=config.event_median_filter,
        min_duration=config.event_min_duration,
        merge_gap=config.event_merge_gap,
        duration=duration,
    )
    events = [(event_name, round(e["onset"], 6), round(e["offset"], 6), e["label"]) for e in found]
    return rows, events, duration


class Progress:
    """One line on stderr, rewritten at most once a second: files done, hours of audio, hours of audio per second."""

    def __init__(self, total_files):
        self.total, self.files, self.seconds, self.started, self.shown = total_files, 0, 0.0, time.perf_counter(), 0.0
        self.line_open = False  # a progress line without its line break yet

    def update(self, audio_seconds):
        self.files += 1
        self.seconds += audio_seconds
        now = time.perf_counter()
        if now - self.shown >= 1.0 or self.files == self.total:
            self.shown = now
            rate = self.seconds / 3600 / max(now - self.started, 1e-9)
            end = "\n" if self.files == self.total else ""
            print(
                f"\r{self.files}/{self.total} files, {self.seconds / 3600:.2f} h of audio, {rate:.3f} h/s "
                f"({rate * 3600:.0f}x real time)",
                end=end,
                file=sys.stderr,
                flush=True,
            )
            self.line_open = self.files != self.total

    def close(self):
        """Ends the progress line, so that what is printed next (an error, the stop) starts a line of its own."""
        if self.line_open:
            print(file=sys.stderr, flush=True)
            self.line_open = False


def return_freed_blocks_to_the_system():
    """Make glibc's malloc hand every block of 1 MiB or more back to the system when it is freed. By default glibc
    raises this threshold to the size of each large block freed, after which blocks of that size (the model's
    activations, the audio blocks) come from the heap, which keeps its peak: the command's peak memory then grew with
    the length of a file though nothing more was held (paper-size SPE classifier, batches of 4: 481 MiB over the
    loaded model for a 1-minute file, 533 for 5 minutes, 607 for 20; with the fixed threshold 452, 469, 470). The
    same as the environment variable MALLOC_MMAP_THRESHOLD_=1048576; nothing elsewhere than glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS, musl): its own policy
        return
    libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD, in bytes; a fixed value also stops glibc from raising it


def tag(args) -> int:
    """Tags under the hold of OUT and of the events file (`RunHold`, the training scripts' hold of their folder, here
    of one file): a second tagger into the same OUT or events file is refused in one line (exit 2); the hold of a
    tagger that was killed is taken over with a line."""
    with contextlib.ExitStack() as holds:
        for option, path in (("--output", args.output), ("--events", args.events)):
            if path is not None:
                path = Path(path)
                hold = RunHold(path.parent, f"{path.name}.lock", held=path, option=option)
                holds.enter_context(hold.acquire(say=lambda line: print(line, file=sys.stderr)))
        return tag_files(args)


def tag_files(args) -> int:
    return_freed_blocks_to_the_system()
    files, unreadable = find_audio_files(args.paths)  # {file: its name in the events file}, folders not listed
    model_class, config, feature_extractor = read_classifier(args.model)  # its weights load once all is checked
    rate, frame_level = feature_extractor.sampling_rate, model_class is AaspForAudioFrameClassification
    choice = LabelChoice.of(args, config, frame_level)
    window, hop, frame = tag_windows(args, feature_extractor, config, frame_level)  # frame: a frame classifier's grid
    if args.events:
        check_event_names(files, args.events)  # all the files found: the N parts' events files name each file once
        if not frame_level:
            print(clip_events_note(args, config, hop / rate), file=sys.stderr)
    if args.shard is not None:
        found = len(files)
        files, unreadable = one_shard(files, unreadable, args.shard)
        print(f"shard {args.shard[0]}/{args.shard[1]}: {len(files)} of {found} files", file=sys.stderr)
    model = load_weights(model_class, args.model, config, args.device, args.precision)
    print(f"model: {args.precision} on {args.device} ({args.precision_reason})", file=sys.stderr)
    input_dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32

    columns = ["file", "start", "end", "label", "score"] if args.timestamps else ["file", "label", "score"]
    writer = RowWriter(
        args.output, columns, events=args.events, run={"precision": args.precision, "device": args.device}
    )
    if writer.earlier_precisions - {args.precision}:
        print(
            f"note: {args.output} holds files tagged in {', '.join(sorted(writer.earlier_precisions))}; this run adds "
            f"its files in {args.precision} (its ledger {writer.ledger_path} says which run wrote which).",
            file=sys.stderr,
        )
    keys = {file: resolved(file) for file in files}  # OUT's ledger knows files by their resolved paths
    todo = [f for f in files if keys[f] not in writer.done or (args.events and keys[f] not in writer.with_events)]
    events_only = {file for file in todo if keys[file] in writer.done}  # in OUT, but without events in this file
    if len(todo) < len(files):
        print(f"{len(files) - len(todo)} of {len(files)} files are already in {args.output}: skipped.", file=sys.stderr)
    if events_only:
        print(
            f"{len(events_only)} of the files already in {args.output} have no events in {args.events} (they were "
            f"tagged without --events, or into another events file): tagged again for their events only; their rows "
            f"in {args.output} stay as they are.",
            file=sys.stderr,
        )
    if not args.events and writer.earlier_events and todo:
        print(
            f"note: an earlier run into {args.output} wrote events to {writer.earlier_events}; this one writes none "
            f"for its {len(todo)} files (pass --events {writer.earlier_events} to keep it whole).",
            file=sys.stderr,
        )
    failures_path = Path(f"{args.output}.failures.tsv")
    failures = open(failures_path, "w")  # noqa: SIM115 - closed in the finally below; a rerun tries its files again
    for folder, reason in unreadable:
        failures.write(f"{folder}\t{reason} (a folder that cannot be listed: its files were not tagged)\n")
        print(f"{folder} cannot be listed ({reason}): its files are not tagged.", file=sys.stderr)
    stop = StopRequest()

    dataset = FileWindows(todo, feature_extractor, window, hop, frame)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        num_workers=args.num_workers,
        worker_init_fn=ignore_interrupts_in_worker if args.num_workers else None,
        persistent_workers=False,
    )
    progress = Progress(len(todo))
    scored = {}  # file index -> its windows' [(start, samples, scores (labels,) or (T', labels), frame_mask or None)]
    pending, finished, failed = [], set(), len(unreadable)  # windows for the model; files whose last one is pending

    def run_batch():
        num_frames = max(item["input_values"].shape[0] for item in pending)
        input_values = torch.stack(
            [
                torch.nn.functional.pad(
                    item["input_values"],
                    (0, 0, 0, num_frames - item["input_values"].shape[0]),
                    value=feature_extractor.padding_value,
                )
                for item in pending
            ]
        )  # B × (T_i, F) -> (B, T, F)
        frames = torch.tensor([item["frames"] for item in pending])  # (B,) real frames of each window
        attention_mask = (torch.arange(num_frames)[None] < frames[:, None]).long()  # (B, T)
        with torch.inference_mode():
            outputs = model(input_values.to(args.device, input_dtype), attention_mask=attention_mask.to(args.device))
        scores = apply_score_function(outputs.logits.float().cpu(), choice.function_to_apply).numpy()
        # (B, labels), or a frame classifier's (B, T', labels) and its frame mask (B, T')
        frame_masks = outputs.frame_mask.cpu().numpy() if frame_level else [None] * len(pending)
        for item, window_scores, frame_mask in zip(pending, scores, frame_masks):
            scored.setdefault(item["file"], []).append((item["start"], item["samples"], window_scores, frame_mask))
        pending.clear()
        for index in sorted(finished):
            finish_file(index, scored.pop(index))
        finished.clear()

    def finish_file(index, windows):
        name = todo[index]
        if frame_level:
            rows, events, duration = frame_file_output(
                name, files[name], windows, choice, frame, rate, args.timestamps, config
            )
        else:
            rows, events, duration = clip_file_output(name, files[name], windows, choice, rate, args.timestamps)
        writer.write_file(rows, events, file=keys[name], with_rows=name not in events_only)
        progress.update(duration)

    try:
        for item in loader:
            if "error" in item:
                pending[:] = [p for p in pending if p["file"] != item["file"]]
                scored.pop(item["file"], None)
                finished.discard(item["file"])
                failures.write(f"{todo[item['file']]}\t{item['error']}\n")
                failures.flush()
                failed += 1
                progress.update(0.0)
            else:
                pending.append(item)
                if item["last"]:
                    finished.add(item["file"])
                if len(pending) == args.batch_size:
                    run_batch()
            if stop.signal is not None:
                break
        else:
            if pending:
                run_batch()
    except RuntimeError:
        if stop.signal is None:  # a worker killed by the signal that is stopping the run: stop as asked
            raise
    finally:
        stop.restore()
        writer.close()
        failures.close()
        progress.close()
    if stop.signal is not None:
        print(
            f"stopped by {signal.Signals(stop.signal).name}: {args.output} holds every file finished; run the same "
            f"command to go on.",
            file=sys.stderr,
        )
    if failed:  # the last line, so that a script (or a person) sees it
        print(
            f"{failed} file(s) could not be tagged: listed in {failures_path}"
            + ("." if stop.signal is not None else f" (exit status {FILES_FAILED_EXIT_CODE})."),
            file=sys.stderr,
        )
    if stop.signal is not None:
        return STOPPED_EXIT_CODE
    return FILES_FAILED_EXIT_CODE if failed else 0


def main(argv=None) -> int:
    return run_script(lambda: tag(parse_args(argv)), "python -m aasp_hf.tag")


if __name__ == "__main__":
    sys.exit(main())
