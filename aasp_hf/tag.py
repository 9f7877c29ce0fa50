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
`--batch_size` for the model, and writes a file's rows, in one write, when its last window is scored. A file that
cannot be decoded is one line of the failures file (OUT's name + `.failures.tsv`) and the run goes on. Run again
with the same OUT to go on: files already in OUT are skipped (and the failed ones tried again). Ctrl-C or SIGTERM stop
at the next batch; OUT then holds every file finished so far, complete.
"""

import argparse
import ctypes
import csv
import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .data.audiofolder import AUDIO_EXTENSIONS  # a file named on the command line is read whatever its suffix
from .entry_points import STOPPED_EXIT_CODE, run_script  # 75: stopped by a signal; the same command goes on
from .errors import UsageError, parse_command_line
from .feature_extraction_aasp import AaspFeatureExtractor
from .modeling_aasp import AaspForAudioClassification, AaspForAudioFrameClassification
from .pipeline_aasp import (
    apply_score_function,
    decode_blocks,
    default_aggregation,
    default_function_to_apply,
    file_frame_scores,
    frame_events,
    frame_score_function,
    frame_window_lengths,
    iter_windows,
    trained_window_samples,
)

CLASSIFIERS = {model.__name__: model for model in (AaspForAudioClassification, AaspForAudioFrameClassification)}


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
    parser.add_argument("--num_workers", type=int, default=1, help="decoding processes; 0: in this one (default 1)")
    parser.add_argument("--device", default="cpu", help="where the model runs (default cpu)")
    args = parse_command_line(parser, argv)
    suffix = Path(args.output).suffix.lower()
    if suffix not in (".csv", ".jsonl"):
        raise UsageError(f"--output {args.output}: the suffix must be .csv or .jsonl (it chooses the format).")
    for name in ("top_k", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name} {getattr(args, name)} must be at least 1.")
    if args.num_workers < 0:
        raise UsageError(f"--num_workers {args.num_workers} must be 0 or more.")
    for name in ("chunk_length_s", "chunk_hop_s"):
        if getattr(args, name) is not None and not getattr(args, name) > 0:
            raise UsageError(f"--{name} {getattr(args, name)} must be a positive number of seconds.")
    return args


def find_audio_files(paths) -> dict[str, str]:
    """{file: its name in an events file}: the files named, each named by its file name, and the audio files (by
    `AUDIO_EXTENSIONS`) under the folders named, each named by its path under that folder (`sub/a.wav`, with `/`), as
    DCASE's reference annotations name the files of their audio folder. Sorted, once each (with its first name)."""
    files = {}
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(
                (f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in AUDIO_EXTENSIONS), key=str
            )
            if not found:
                raise UsageError(f"{path} holds no audio file ({', '.join(AUDIO_EXTENSIONS)}).")
            for file in found:
                files.setdefault(str(file), file.relative_to(path).as_posix())
        elif path.is_file():
            files.setdefault(str(path), path.name)
        else:
            raise UsageError(f"{path}: no such file or folder.")
    return files


def check_event_names(files: dict, events_path):
    """Two files of one name in the events file would be one recording to a scorer: refused, naming them."""
    seen = {}
    for file, name in files.items():
        if name in seen:
            raise UsageError(
                f"--events {events_path}: {seen[name]} and {file} would both be named {name} there (a file is named "
                f"by its path under the folder given, or by its file name when it is given itself): tag them in "
                f"separate runs, or give the folder that holds both."
            )
        seen[name] = file


def load_classifier(folder, device):
    """(model in eval mode on `device`, feature extractor) from a folder saved by `save_pretrained`: a clip
    classifier (`AaspForAudioClassification`) or a frame classifier (`AaspForAudioFrameClassification`)."""
    config_file = Path(folder) / "config.json"
    if not config_file.is_file():
        raise UsageError(f"--model {folder}: no config.json there; give the folder a classifier was saved to.")
    architectures = json.loads(config_file.read_text()).get("architectures") or []
    name = next((name for name in architectures if name in CLASSIFIERS), None)
    if name is None:
        raise UsageError(
            f"--model {folder} holds {', '.join(architectures) or 'no model class'}, not an AaspForAudioClassification "
            f"or AaspForAudioFrameClassification: tagging needs a fine-tuned classifier (examples/finetune.py saves one)."
        )
    model = CLASSIFIERS[name].from_pretrained(folder).to(device).eval()
    return model, AaspFeatureExtractor.from_pretrained(folder)


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
        threshold = threshold if args.threshold is None else args.threshold
        thresholds = np.broadcast_to(np.asarray(threshold, dtype=np.float64), (len(labels),))
        return cls(labels, function_to_apply, args.top_k or top_k, thresholds, args.aggregation or aggregation)

    def pick(self, scores) -> list:
        return choose_labels(scores, self.labels, self.top_k, self.thresholds)

    def aggregate(self, scores):
        """(W, labels) -> (labels,)"""
        return scores.mean(axis=0) if self.aggregation == "mean" else scores.max(axis=0)


def tag_windows(args, feature_extractor, model) -> tuple[int, int, int]:
    """(window, hop, align) in samples: the trained length or `--chunk_length_s`, and `--chunk_hop_s` (default: the
    window); a frame classifier's in whole output frames, every window starting on their grid (as its pipeline's)."""
    rate, config = feature_extractor.sampling_rate, model.config
    if args.chunk_length_s is None:
        window = trained_window_samples(feature_extractor, config)
    else:
        window = round(args.chunk_length_s * rate)
    hop = window if args.chunk_hop_s is None else round(args.chunk_hop_s * rate)
    if hop > window:
        raise UsageError(
            f"--chunk_hop_s {args.chunk_hop_s} must be at most the window ({window / rate:g} s): a longer "
            f"hop would leave audio between windows untagged."
        )
    if not isinstance(model, AaspForAudioFrameClassification):
        return window, hop, 1
    frame = config.time_patch_size * feature_extractor.hop_length
    return *frame_window_lengths(window, hop, frame), frame


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
                for start, samples, last in mark_last(
                    iter_windows(decode_blocks(self.files[index], rate), self.window, self.hop, self.align)
                ):
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


def mark_last(windows):
    """(start, samples) items -> (start, samples, is_last); an empty clip raises a ValueError."""
    current = next(windows, None)
    if current is None:
        raise ValueError("the file holds no audio (0 samples)")
    for following in windows:
        yield *current, False
        current = following
    yield *current, True


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


class RowWriter:
    """OUT (CSV or JSON Lines by its suffix), opened for appending; one `write_file` call writes and flushes all the
    rows of a file, so a stopped run leaves only whole files. `done` holds the files OUT already has."""

    def __init__(self, path, columns):
        self.path, self.columns, self.jsonl = Path(path), columns, Path(path).suffix.lower() == ".jsonl"
        self.done = self._read_done()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self.file = open(self.path, "a", newline="")
        if new and not self.jsonl:
            csv.writer(self.file).writerow(columns)
            self.file.flush()

    def _read_done(self) -> set:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return set()
        with open(self.path, newline="") as file:
            if self.jsonl:
                rows = [json.loads(line) for line in file if line.strip()]
                found = list(rows[0]) if rows else self.columns
            else:
                reader = csv.DictReader(file)
                rows, found = list(reader), reader.fieldnames
        if list(found) != list(self.columns):
            raise UsageError(
                f"--output {self.path} has the columns {','.join(found)}, but this run writes {','.join(self.columns)} "
                f"(with or without --timestamps): choose another --output, or remove that file."
            )
        return {row["file"] for row in rows}

    def write_file(self, rows):
        if self.jsonl:
            self.file.write("".join(json.dumps(dict(zip(self.columns, row))) + "\n" for row in rows))
        else:
            csv.writer(self.file).writerows(rows)
        self.file.flush()

    def close(self):
        self.file.close()


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
    return_freed_blocks_to_the_system()
    files = find_audio_files(args.paths)  # {file: its name in the events file}
    model, feature_extractor = load_classifier(args.model, args.device)
    config, rate = model.config, feature_extractor.sampling_rate
    frame_level = isinstance(model, AaspForAudioFrameClassification)
    choice = LabelChoice.of(args, config, frame_level)
    window, hop, frame = tag_windows(args, feature_extractor, model)  # frame: the grid of a frame classifier's windows
    if args.events:
        check_event_names(files, args.events)
        if not frame_level:
            print(clip_events_note(args, config, hop / rate), file=sys.stderr)

    columns = ["file", "start", "end", "label", "score"] if args.timestamps else ["file", "label", "score"]
    writer = RowWriter(args.output, columns)
    todo = [file for file in files if file not in writer.done]
    if len(todo) < len(files):
        print(f"{len(files) - len(todo)} of {len(files)} files are already in {args.output}: skipped.", file=sys.stderr)
    events_file = None
    if args.events:
        new = not Path(args.events).exists() or Path(args.events).stat().st_size == 0
        events_file = open(args.events, "a", newline="")
        if new:
            events_file.write("filename\tonset\toffset\tevent_label\n")
    failures_path = Path(f"{args.output}.failures.tsv")
    failures = open(failures_path, "w")  # this run's failures; a rerun tries them again
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
    pending, finished, failed = [], set(), 0  # windows waiting for the model; files whose last window is pending

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
            outputs = model(input_values.to(args.device), attention_mask=attention_mask.to(args.device))
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
        writer.write_file(rows)
        if events_file is not None:
            events_file.writelines("\t".join(map(str, event)) + "\n" for event in events)
            events_file.flush()
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
        if events_file is not None:
            events_file.close()
    if failed:
        print(f"{failed} file(s) could not be decoded: listed in {failures_path}.", file=sys.stderr)
    if stop.signal is not None:
        print(
            f"\nstopped by {signal.Signals(stop.signal).name}: {args.output} holds every file finished; run the same "
            f"command to go on.",
            file=sys.stderr,
        )
        return STOPPED_EXIT_CODE
    return 0


def main(argv=None) -> int:
    return run_script(lambda: tag(parse_args(argv)), "python -m aasp_hf.tag")


if __name__ == "__main__":
    sys.exit(main())
