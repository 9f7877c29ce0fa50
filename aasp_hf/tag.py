# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""Tag audio files and folders with a saved AaSP classifier: `python -m aasp_hf.tag` (also the `aasp-tag` command).

    python -m aasp_hf.tag --model CLASSIFIER_DIR --output tags.csv recordings/ extra.flac

Every file is read whole, window by window, as the audio-classification pipeline reads it (`pipeline_aasp`: windows
of the length the classifier was trained on, `--chunk_length_s` / `--chunk_hop_s` to change them; each window scored
as its samples alone; the file's scores the mean of the windows' for a single-label classifier, their max for a
multi-label one). OUT is a CSV or JSON Lines file, chosen by its suffix:
- without `--timestamps`, rows `file,label,score`: the file's `--top_k` labels (default 1 for a single-label
  classifier, all for a multi-label one) whose score is at least `--threshold` (default 0, or 0.5 for multi-label);
- with `--timestamps`, rows `file,start,end,label,score` (seconds), the same choice of labels for each window.
A file with no label chosen gets one row with an empty label and score, so that the output says it was tagged.
`--events EVENTS.tsv` also writes, for every label, the runs of consecutive windows where it is chosen as one event
each, in DCASE's tab-separated `filename, onset, offset, event_label` (what sed_eval and sed_scores_eval read).

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
from pathlib import Path

import numpy as np
import torch

from .data.audiofolder import AUDIO_EXTENSIONS  # a file named on the command line is read whatever its suffix
from .entry_points import STOPPED_EXIT_CODE, run_script  # 75: stopped by a signal; the same command goes on
from .errors import UsageError, parse_command_line
from .feature_extraction_aasp import AaspFeatureExtractor
from .modeling_aasp import AaspForAudioClassification
from .pipeline_aasp import (
    apply_score_function,
    decode_blocks,
    default_aggregation,
    default_function_to_apply,
    iter_windows,
    trained_window_samples,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m aasp_hf.tag",
        description="Tag audio files and folders with a saved AaSP classifier (docs/inference.md, "
        "'Long recordings and folders').",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="audio files, and folders searched recursively")
    parser.add_argument("--model", required=True, help="a classifier folder saved by save_pretrained (finetune.py)")
    parser.add_argument("--output", required=True, help="OUT: a .csv or .jsonl file; rows are appended")
    parser.add_argument("--timestamps", action="store_true", help="one row per window: file,start,end,label,score")
    parser.add_argument("--events", help="also write events (runs of windows of one label) to this DCASE .tsv")
    parser.add_argument("--top_k", type=int, help="labels per file or window (default 1; multi-label: all)")
    parser.add_argument("--threshold", type=float, help="the lowest score written (default 0; multi-label: 0.5)")
    parser.add_argument("--chunk_length_s", type=float, help="window length (default: the trained length)")
    parser.add_argument("--chunk_hop_s", type=float, help="seconds between window starts (default: no overlap)")
    parser.add_argument("--aggregation", choices=("mean", "max"), help="windows -> file (default mean; multi: max)")
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


def find_audio_files(paths) -> list[str]:
    """The files named, and the audio files (by `AUDIO_EXTENSIONS`) under the folders named, sorted, once each."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(str(f) for f in path.rglob("*") if f.is_file() and f.suffix.lower() in AUDIO_EXTENSIONS)
            if not found:
                raise UsageError(f"{path} holds no audio file ({', '.join(AUDIO_EXTENSIONS)}).")
            files += found
        elif path.is_file():
            files.append(str(path))
        else:
            raise UsageError(f"{path}: no such file or folder.")
    return list(dict.fromkeys(files))


def load_classifier(folder, device):
    """(model in eval mode on `device`, feature extractor) from a folder saved by `save_pretrained`."""
    config_file = Path(folder) / "config.json"
    if not config_file.is_file():
        raise UsageError(f"--model {folder}: no config.json there; give the folder a classifier was saved to.")
    architectures = json.loads(config_file.read_text()).get("architectures") or []
    if "AaspForAudioClassification" not in architectures:
        raise UsageError(
            f"--model {folder} holds {', '.join(architectures) or 'no model class'}, not an AaspForAudioClassification: "
            f"tagging needs a fine-tuned classifier (examples/finetune.py saves one)."
        )
    model = AaspForAudioClassification.from_pretrained(folder).to(device).eval()
    return model, AaspFeatureExtractor.from_pretrained(folder)


class FileWindows(torch.utils.data.IterableDataset):
    """The windows of `files`, featurised, file after file; with several DataLoader workers, worker w takes files
    w, w + n, ... Items: `{"file": index, "start", "end" (seconds), "input_values": (T, F), "frames": real frames, "last": bool}`, or
    `{"file": index, "error": message, "last": True}` for a file that fails (after any of its windows)."""

    def __init__(self, files, feature_extractor, window: int, hop: int):
        self.files, self.feature_extractor, self.window, self.hop = files, feature_extractor, window, hop

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        rate = self.feature_extractor.sampling_rate
        for index in range(worker, len(self.files), num_workers):
            try:
                for start, samples, last in mark_last(
                    iter_windows(decode_blocks(self.files[index], rate), self.window, self.hop)
                ):
                    features = self.feature_extractor(
                        samples, sampling_rate=rate, return_tensors="pt", truncation=False
                    )
                    yield {
                        "file": index,
                        "start": start / rate,
                        "end": (start + len(samples)) / rate,
                        "input_values": features["input_values"][0],  # (1, T, F) -> (T, F)
                        "frames": int(features["attention_mask"].sum()),
                        "last": last,
                    }  # real frames, <= T
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
    """SIGINT and SIGTERM set `signal` (the first one received) instead of ending the process."""

    def __init__(self):
        self.signal = None
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, self._handle)

    def _handle(self, number, frame):
        self.signal = self.signal or number


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
    """(labels,) scores -> [(label, score)] of the `top_k` highest at or above `threshold`, highest first; one
    `("", "")` when none is."""
    order = np.argsort(-scores, kind="stable")[:top_k]
    chosen = [(labels[i], round(float(scores[i]), 6)) for i in order if scores[i] >= threshold]
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
    files = find_audio_files(args.paths)
    model, feature_extractor = load_classifier(args.model, args.device)
    config, rate = model.config, feature_extractor.sampling_rate
    multi_label = config.problem_type == "multi_label_classification"
    labels = [config.id2label[i] for i in range(config.num_labels)]
    top_k = args.top_k or (config.num_labels if multi_label else 1)
    threshold = args.threshold if args.threshold is not None else (0.5 if multi_label else 0.0)
    aggregation = args.aggregation or default_aggregation(config)
    function_to_apply = default_function_to_apply(config)
    window = (
        trained_window_samples(feature_extractor, config)
        if args.chunk_length_s is None
        else round(args.chunk_length_s * rate)
    )
    hop = window if args.chunk_hop_s is None else round(args.chunk_hop_s * rate)
    if hop > window:
        raise UsageError(
            f"--chunk_hop_s {args.chunk_hop_s} must be at most the window ({window / rate:g} s): a longer "
            f"hop would leave audio between windows untagged."
        )

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

    dataset = FileWindows(todo, feature_extractor, window, hop)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        num_workers=args.num_workers,
        worker_init_fn=ignore_interrupts_in_worker if args.num_workers else None,
        persistent_workers=False,
    )
    progress = Progress(len(todo))
    scored = {}  # file index -> {"start": [...], "end": [...], "scores": [(labels,) arrays]}
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
            logits = model(input_values.to(args.device), attention_mask=attention_mask.to(args.device)).logits
        scores = apply_score_function(logits.float().cpu(), function_to_apply).numpy()  # (B, labels)
        for item, window_scores in zip(pending, scores):
            record = scored.setdefault(item["file"], {"start": [], "end": [], "scores": []})
            record["start"].append(item["start"])
            record["end"].append(item["end"])
            record["scores"].append(window_scores)
        pending.clear()
        for index in sorted(finished):
            finish_file(index, scored.pop(index))
        finished.clear()

    def finish_file(index, record):
        name, scores = todo[index], np.stack(record["scores"])  # (W, labels)
        starts, ends = [round(s, 6) for s in record["start"]], [round(e, 6) for e in record["end"]]
        per_window = [choose_labels(s, labels, top_k, threshold) for s in scores]
        if args.timestamps:
            rows = [
                (name, start, end, label, score)
                for start, end, chosen in zip(starts, ends, per_window)
                for label, score in chosen
            ]
        else:
            clip = scores.mean(axis=0) if aggregation == "mean" else scores.max(axis=0)  # (W, labels) -> (labels,)
            rows = [(name, label, score) for label, score in choose_labels(clip, labels, top_k, threshold)]
        writer.write_file(rows)
        if events_file is not None:
            events_file.writelines(
                "\t".join(map(str, event)) + "\n" for event in events_of(name, starts, ends, per_window)
            )
            events_file.flush()
        progress.update(ends[-1])

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
