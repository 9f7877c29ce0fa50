# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The downstream protocol (paper Sec. Datasets) in one place: which clips train, which select the model, which are
reported, with which clip length and labels. examples/finetune.py and examples/linear_eval.py both load a task with
`load_downstream` (the EVAR task key and clip length, the label names, the parts of `downstream_parts`).

Rules, each named by an argument value that the scripts record in their results:

- K-fold tasks (ESC-50, US8K; a dataset with a `fold` column and only a "train" split): one part per test fold.
  `kfold_validation="evar"` (default) trains on all the other folds less a random `validation_fraction` (10 %) of
  them, which is the validation set — EVAR's rule (`TorchMLPClassifier2.fit`: `train_test_sure_split` of the
  training folds with `validation_fraction=0.1`, redrawn until every class is in the validation set). The draw is
  seeded with `seed` (successive draws of one generator, at most 100). `"next"`: validation is the fold
  after the test fold, cyclically (kept for comparison with older runs; ESC-50 then trains on 3 folds, 1,200 clips).
- Other datasets: the dataset's own test split, or `test_fraction` of train held out (`with_test_split`); the
  dataset's own validation split, or a seeded random `validation_fraction` of train (one draw, `seed`).
- `group_by` (a column, or a regular expression on the file name: each clip's source, e.g. its speaker or site):
  the validation set and a held-out test take whole sources (`splits.split_by_groups`), so that model selection and
  the reported score are on voices or places training never heard. A random draw shares the sources with training
  and rewards a model that has learnt them rather than the classes, which a small folder of few speakers invites.
  A dataset's own test split and folds are kept as they are.
- Clip length: the EVAR length of the task (`EVAR_CLIP_SECONDS`, from the dataset's record, the same for every
  alias of its name), or `--clip_seconds`; a dataset without one (an audiofolder of the user's own clips) gets the
  mean length of its training clips (`downstream_clip_seconds`), as EVAR's own lengths for its variable-length tasks
  are the datasets' mean clip lengths (VoxCeleb1: 8.2 s).
- Sound events (`sound_events`, DESED): the rows are recordings, so a validation or test held out of train takes
  whole files with all their events, as for any other single-split dataset; `group_by` takes whole sources of them
  (DESED's clips: `'^Y(.{11})_'`, the YouTube video). The clip length is the training window, 10 s.
- `select_on`: the split that selects the model. "validation" (default) as above; "test" (EAT: "the best result
  within the budget" on the evaluation set) and "last" (the last step) hold nothing out for validation, so the
  model trains on the whole training set (all of AS-20K / AS-2M; all other folds of a K-fold task).
"""

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from datasets import DatasetDict

from ..utils.errors import UsageError
from .decoding import decode_audio, for_safe_decoding
from .loaders import load
from .loaders.dataset_records import DATASET_RECORDS, find_record
from .splits import source_groups, split_by_folds, split_by_groups, with_test_split

logger = logging.getLogger(__name__)

KFOLD_VALIDATION = ("evar", "next")
SELECT_ON = ("validation", "test", "last")
SPLITS = ("train", "validation", "test")

# The published clip length of each EVAR task key (fine-tuning crops/pads each clip to it) and the dataset names
# whose task key differs, both read off the dataset records (`loaders.dataset_records`), where they are set. The
# functions below (`evar_task`, `published_clip_seconds`) find a name's record themselves, whatever its case, "-" and
# "_"; these tables are what the records held at import, for reading and messages.
EVAR_CLIP_SECONDS = {
    record.task: record.clip_seconds for record in DATASET_RECORDS.values() if record.clip_seconds is not None
}
TASK_ALIASES = {
    name: record.task for record in DATASET_RECORDS.values() for name in record.names if name != record.task
}

MAX_DRAWS = 100
MAX_MEASURED_CLIPS = 1000  # clips whose length is read to derive a clip length (spread evenly over the split)


def kfold_part(
    dataset,
    test_fold: int,
    *,
    kfold_validation: str = "evar",
    validation_fraction: float = 0.1,
    seed: int = 0,
    with_validation: bool = True,
    label_column: str = "label",
    group_by: str | None = None,
) -> DatasetDict:
    """The part of one test fold of a dataset with a `fold` column, {"train", ["validation",] "test"}: the folds split
    by `splits.split_by_folds`, then the validation set drawn by the module's rules.

    `with_validation=False`: every other fold trains (for `select_on` "test" or "last"). `group_by`: the "evar"
    validation set is whole sources of the training folds instead of a random draw.
    """
    if kfold_validation not in KFOLD_VALIDATION:
        raise ValueError(f"kfold_validation={kfold_validation!r}: use one of {KFOLD_VALIDATION}.")
    if isinstance(dataset, DatasetDict):
        if len(dataset) != 1:
            raise ValueError(f"kfold_part needs one split with a 'fold' column, got {list(dataset)}.")
        dataset = next(iter(dataset.values()))
    if not with_validation:
        return split_by_folds(dataset, test_fold)
    if kfold_validation == "next":
        folds = sorted(set(dataset["fold"]))
        valid_fold = folds[(folds.index(test_fold) + 1) % len(folds)] if test_fold in folds else None
        return split_by_folds(dataset, test_fold, valid_fold)
    split = split_by_folds(dataset, test_fold)
    if group_by is not None:
        groups = source_groups(split["train"], group_by)
        train, validation = split_by_groups(
            split["train"], groups, validation_fraction, seed, "validation", label_column
        )
    else:
        train, validation = evar_validation_draw(split["train"], validation_fraction, seed, label_column)
    return DatasetDict({"train": train, "validation": validation, "test": split["test"]})


def evar_validation_draw(train, validation_fraction: float, seed: int, label_column: str = "label"):
    """(train, validation): ceil(`validation_fraction` · N) clips of `train` drawn at random, redrawn until every
    class of `train` is in the validation set, as EVAR's `train_test_sure_split`. The draws are successive
    permutations of one `numpy.random.default_rng(seed)`; after `MAX_DRAWS` draws, or when the validation set is
    smaller than the number of classes, the last draw is kept (with a warning). Both keep the dataset's order."""
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction={validation_fraction}: a fraction in (0, 1) of the training folds.")
    num_rows = len(train)
    num_valid = math.ceil(validation_fraction * num_rows)
    if not 0 < num_valid < num_rows:
        raise ValueError(
            f"validation_fraction={validation_fraction} of {num_rows} clips leaves no train or no validation clip."
        )
    labels = train[label_column] if label_column in train.column_names else None  # one column: no audio decoded
    single_label = labels is not None and not isinstance(labels[0], (list, tuple))
    classes = set(labels) if single_label else None
    rng = np.random.default_rng(seed)
    for _ in range(MAX_DRAWS):
        chosen = np.sort(rng.permutation(num_rows)[:num_valid])
        covered = classes is None or {labels[i] for i in chosen} == classes
        if covered or num_valid < len(classes):
            break
    if not covered:
        logger.warning(
            f"The validation draw ({num_valid} clips, seed {seed}) lacks "
            f"{len(classes - {labels[i] for i in chosen})} of {len(classes)} classes."
        )
    is_valid = np.zeros(num_rows, dtype=bool)
    is_valid[chosen] = True
    return train.select(np.flatnonzero(~is_valid)), train.select(chosen)


def downstream_parts(
    loaded,
    *,
    folds=None,
    kfold_validation: str = "evar",
    select_on: str = "validation",
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    seed: int = 0,
    group_by: str | None = None,
) -> dict:
    """{part name: {split: Dataset}} of a loaded DatasetDict under the module's rules (`group_by`: validation and a
    held-out test take whole sources).

    K-fold datasets give one part per test fold ("fold<k>", `folds` or all); others one part, "official". The
    parts hold "train" and "test", and "validation" when `select_on == "validation"` (sound events: also when the
    dataset has its own).
    """
    if select_on not in SELECT_ON:
        raise ValueError(f"select_on={select_on!r}: use one of {SELECT_ON}.")
    with_validation = select_on == "validation"
    first = next(iter(loaded.values()))
    if has_folds(loaded):
        available = sorted(set(first["fold"]))
        return {
            f"fold{k}": dict(
                kfold_part(
                    first,
                    k,
                    kfold_validation=kfold_validation,
                    validation_fraction=validation_fraction,
                    seed=seed,
                    with_validation=with_validation,
                    group_by=group_by,
                )
            )
            for k in (folds or available)
        }
    splits = with_test_split(dict(loaded), test_fraction, seed=seed, group_by=group_by)
    if with_validation and "validation" not in splits and group_by is not None:
        splits["train"], splits["validation"] = split_by_groups(
            splits["train"], source_groups(splits["train"], group_by), validation_fraction, seed, "validation"
        )
    elif with_validation and "validation" not in splits:
        held = splits["train"].train_test_split(test_size=validation_fraction, seed=seed)
        splits["train"], splits["validation"] = held["train"], held["test"]
    # sound events keep a dataset's own validation whatever selects the model: their thresholds are chosen on it
    keep_own_validation = "validation" in loaded and "events" in first.column_names
    return {
        "official": {
            name: splits[name]
            for name in SPLITS
            if name in splits and (with_validation or keep_own_validation or name != "validation")
        }
    }


def reported_test_split(loaded, *, test_fraction: float = 0.2, seed: int = 0, group_by: str | None = None):
    """The test rows that fine-tuning's default run reports on, by the same code (`downstream_parts`): the dataset's
    own test split; for a K-fold task the first fold; otherwise `test_fraction` of train held out (`with_test_split`,
    seeded with `seed`; whole sources with `group_by`), the clips finetune.py and linear_eval.py hold out with the
    same fraction and seed (0 by default in both)."""
    first = next(iter(loaded.values()))
    folds = None
    if has_folds(loaded):
        folds = [min(set(first["fold"]))]
    (part,) = downstream_parts(
        loaded, folds=folds, select_on="last", test_fraction=test_fraction, seed=seed, group_by=group_by
    ).values()
    return part["test"]


SHARED_SOURCES = (
    "; its clips share their sources (speakers, sites, devices) with training, so it can rate a model "
    "that knows the sources above one that knows the classes: pass --group_by to hold sources out whole"
)
# With no validation (select_on "last" or "test") the held-out test is the one score: said when it was drawn at random
# out of train, so that its clips are from the training sources.
SHARED_TEST_SOURCES = (
    "; the test clips, held out of train at random, share their sources (speakers, sites, devices) with training, "
    "so the test can rate a model that knows the sources above one that knows the classes: pass --group_by to hold "
    "sources out whole"
)


def describe_protocol(
    select_on: str,
    kfold: bool,
    kfold_validation: str,
    validation_fraction: float,
    seed: int,
    group_by: str | None = None,
    test_held_out: bool = False,
) -> str:
    """One sentence naming the selection rule, for results files and model cards; a random validation draw says that
    it shares its sources with training (`SHARED_SOURCES`) unless `group_by` names them, and so does a test drawn at
    random out of train (`test_held_out`: the dataset has no test split or folds) when nothing is held out for
    validation (`SHARED_TEST_SOURCES`)."""
    shared_test = SHARED_TEST_SOURCES if test_held_out and group_by is None else ""
    if select_on == "test":
        return (
            "model selection on the test split (EAT: the best result within the budget); no validation held out"
            + shared_test
        )
    if select_on == "last":
        return "the last step's model; no validation held out" + shared_test
    if kfold and kfold_validation == "next":
        return "model selection on the fold after the test fold"
    if group_by is not None:
        where = "the training folds" if kfold else "train, where the dataset has no validation split of its own"
        return (
            f"model selection on whole sources (--group_by {group_by!r}) holding {validation_fraction:.0%} of "
            f"{where} (seed {seed})"
        )
    if kfold:
        return (
            f"model selection on a random {validation_fraction:.0%} of the training folds (EVAR; seed {seed}, "
            f"redrawn until every class is present){SHARED_SOURCES}"
        )
    return (
        f"model selection on the validation split (the dataset's own, or a random {validation_fraction:.0%} "
        f"of train, seed {seed}){SHARED_SOURCES}"
    )


# Fewer validation sources than this and the validation score is mostly a property of the few sources drawn: model
# selection and the reported validation score then follow them, not the task (`describe_sources` says so).
FEW_VALIDATION_SOURCES = 5


def describe_sources(splits: dict, group_by: str) -> str:
    """One line: the sources (`source_groups`) of each split of a part, and those found in more than one split; when
    validation holds fewer than `FEW_VALIDATION_SOURCES` sources, a second line says what its score is worth."""
    found = {name: sorted(set(source_groups(rows, group_by))) for name, rows in splits.items()}
    listed = ", ".join(
        f"{name} {len(groups)} ({', '.join(groups[:4])}{', …' if len(groups) > 4 else ''})"
        for name, groups in found.items()
    )
    names = list(found)
    shared = sorted({g for i, a in enumerate(names) for b in names[i + 1 :] for g in set(found[a]) & set(found[b])})
    line = f"sources (--group_by {group_by!r}): {listed}; " + (
        f"{len(shared)} in more than one split ({', '.join(shared[:4])}{', …' if len(shared) > 4 else ''}: "
        "the dataset's own splits share them)"
        if shared
        else "none in two splits"
    )
    few = len(found["validation"]) if "validation" in found else None  # None: no validation split to judge
    if few is not None and few < FEW_VALIDATION_SOURCES:
        line += (
            f"\n   validation holds {few} source{'s' if few != 1 else ''} ({len(splits['validation'])} clips): "
            "its score measures those few, so it can sit far above or below a test on other sources, and the "
            "step it selects follows them; hold out more sources (--validation_fraction), or train on every "
            "training source and keep the last step (--select_on last)"
        )
    return line


def evar_task(dataset: str, task: str | None = None) -> str:
    """The EVAR task key (of `EVAR_CLIP_SECONDS`) of a dataset name, or of `task` when given, from the record that
    `load` reads for the same name: "as20k" -> "audioset", "CREMA-D" -> "cremad", "voxceleb" -> "voxceleb1", ...
    A name of no record (a user's audiofolder, a Hub id) is its own key: `task` as given, else the dataset name in
    lower case without "-"."""
    record = find_record(task or dataset)
    if record is not None:
        return record.task
    return task or dataset.lower().replace("-", "")


def published_clip_seconds(name: str) -> float | None:
    """The published clip length of a task key, dataset name or alias (its dataset record's), None where none is
    published (an audiofolder, a name of no record)."""
    record = find_record(name)
    return record.clip_seconds if record is not None else None


def evar_clip_seconds(task: str, clip_seconds: float | None = None) -> float:
    """`clip_seconds` when given, else the EVAR clip length of `task`; a ValueError names the known tasks."""
    seconds = clip_seconds or published_clip_seconds(task)
    if seconds is None:
        raise UsageError(
            f"No EVAR clip length for task {task!r}: pass --clip_seconds or one of "
            f"{sorted(EVAR_CLIP_SECONDS)} as --task."
        )
    return seconds


def mean_clip_seconds(rows, max_clips: int = MAX_MEASURED_CLIPS) -> tuple[float, int]:
    """(mean length in seconds, clips measured) of at most `max_clips` clips of `rows` (a Dataset with an `audio`
    column, decoded or not), spread evenly over it. The length comes from the file's header (torchcodec's metadata);
    a clip whose header has none is decoded; a clip that cannot be read is left out (0 measured: nan)."""
    from torchcodec.decoders import AudioDecoder

    rows = for_safe_decoding(rows)  # {"path", "bytes"} cells: nothing decoded to read a header
    indices = np.unique(np.linspace(0, len(rows) - 1, min(len(rows), max_clips)).round().astype(int))
    lengths = []
    for index in indices:
        cell = rows[int(index)]["audio"]
        try:
            seconds = AudioDecoder(cell.get("bytes") or cell["path"]).metadata.duration_seconds
            if seconds is None:
                seconds = len(decode_audio(cell)) / 16000
        except Exception:  # noqa: BLE001, S112 - an unreadable clip is skipped later too; it does not set the length
            continue
        lengths.append(seconds)
    return (float(np.mean(lengths)) if lengths else float("nan")), len(lengths)


def downstream_clip_seconds(task: str, clip_seconds: float | None, loaded) -> float:
    """The clip length of a downstream task: `clip_seconds` when given, the task's EVAR length when it has one, and
    otherwise (a user's own audiofolder) the mean length of the training clips of `loaded` (its "train" split, else
    its first), rounded to 10 ms, with a line in the log saying so. EVAR's lengths for its variable-length tasks are
    those datasets' mean clip lengths (VoxCeleb1: 8.2 s), so this extends its rule to a new dataset; shorter clips
    are padded and longer ones cropped to it."""
    if clip_seconds or published_clip_seconds(task) is not None:
        return evar_clip_seconds(task, clip_seconds)
    rows = loaded["train"] if "train" in loaded else next(iter(loaded.values()))
    seconds, measured = mean_clip_seconds(rows)
    if not measured:
        raise UsageError(f"none of the clips of {task!r} could be read to derive a clip length: pass --clip_seconds")
    seconds = max(round(seconds, 2), 0.01)
    logger.warning(
        f"clip length {seconds:g} s: the mean length of {measured} training clips ({task!r} has no EVAR "
        f"clip length; --clip_seconds sets another)"
    )
    return seconds


def label_info(dataset) -> tuple[bool, list[str]]:
    """(multi_label, class names) from a datasets.Dataset's `labels` (AudioSet) or `label` ClassLabel column, or the
    event labels of a sound-event dataset's `events` (multi-label: events of several labels may overlap)."""
    features = dataset.features
    if "events" in features:
        return True, list(features["events"].feature["label"].names)
    if "labels" in features:
        feature = features["labels"]
        inner = getattr(feature, "feature", None) or feature[0]
        return True, list(inner.names)
    return False, list(features["label"].names)


def check_classes(rows, where) -> None:
    """A `UsageError` in one line when `rows` (a Dataset of `load`, audio undecoded) have fewer than two classes.

    An audiofolder takes its classes from the names of the folders that hold the clips, and with one such name it
    gives no `label` column at all (`label_info` then failed with `KeyError: 'label'`): the message names the one
    class found, its folder and what is needed; a folder whose clips lie in it directly is said so."""
    features = rows.features
    if "labels" in features or "events" in features:  # one event label is a detection task of its own
        return
    if "label" in features:
        folders, parents = list(getattr(features["label"], "names", None) or []), set()
        if len(folders) != 1:
            return
    else:
        parents = (
            {Path(cell["path"]).parent for cell in rows["audio"] if cell.get("path")} if "audio" in features else set()
        )
        folders = sorted({parent.name for parent in parents})
    root = Path(str(where))
    if len(folders) == 1 and root.is_dir() and root.resolve() in {p.resolve() for p in parents}:
        found = f"no class sub-folders (its {len(rows)} clips lie in it directly)"
    elif len(folders) == 1:
        found = f"one class, {folders[0]!r}" + (
            f" ({len(rows)} clips in {root / folders[0]})" if (root / folders[0]).is_dir() else f" ({len(rows)} clips)"
        )
    else:
        found = f"no classes ({len(rows)} clips, columns {sorted(features)}, no 'label')"
    raise UsageError(
        f"{where} holds {found}: fine-tuning and linear evaluation need at least "
        f"two classes, one sub-folder of clips per class ({root / '<class>' / '<clip>.wav'})"
    )


def has_folds(loaded) -> bool:
    """Whether a loaded DatasetDict is a K-fold dataset: one "train" split whose rows carry a "fold" column."""
    return set(loaded) == {"train"} and "fold" in loaded["train"].column_names


def is_kfold(parts: dict) -> bool:
    """Whether `parts` (of `downstream_parts`) are the test folds of a K-fold task ("fold<k>")."""
    return all(part.startswith("fold") for part in parts)


# tasks whose rows are recordings with timed events (`task_type` "sound events" in their dataset records, which
# `DownstreamTask.frame_level` reads)
FRAME_LEVEL_TASKS = tuple(
    dict.fromkeys(record.task for record in DATASET_RECORDS.values() if record.task_type == "sound events")
)


@dataclass
class DownstreamTask:
    """A loaded downstream task: `parts` {part name: {split: rows}}, the labels, and the EVAR task and clip length."""

    task: str
    parts: dict
    multi_label: bool
    label_names: list[str]
    clip_seconds: float
    test_held_out: bool = False  # the dataset had no test split or folds: its test is held out of train

    @property
    def frame_level(self) -> bool:
        """Recordings with timed events (strong labels), for a frame classifier, not clips with labels."""
        record = find_record(self.task)
        return record is not None and record.task_type == "sound events"


def load_downstream(
    dataset: str,
    *,
    root=None,
    loader_kwargs: dict | None = None,
    task: str | None = None,
    clip_seconds: float | None = None,
    folds=None,
    max_folds: int | None = None,
    kfold_validation: str = "evar",
    select_on: str = "validation",
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    seed: int = 0,
    group_by: str | None = None,
) -> DownstreamTask:
    """`data.load(dataset, root=root, **loader_kwargs)` (clips that fail to decode are skipped later), split into
    parts by `downstream_parts` under the module's rules.

    The EVAR task key comes from `task` or the dataset name (`evar_task`), the clip length from `clip_seconds`, the
    task's EVAR length, or the mean length of the training clips when the task has none (`downstream_clip_seconds`;
    a `task` given by name must have an EVAR length, checked before anything is read).
    K-fold tasks: the test folds `folds` (default all), at most the first `max_folds` of them. `group_by`: each
    clip's source (a column or a regular expression on the file name), held out whole (the module's rules). A dataset
    the loader cannot find (a `root` that does not exist, a metadata file or clips missing) is a one-line UsageError
    with the loader's message, as `python -m aasp_hf.data.check` prints it.
    """
    if task is not None:  # a task named on purpose must be one of EVAR's: refused before anything is read
        clip_seconds = evar_clip_seconds(evar_task(dataset, task), clip_seconds)
    task = evar_task(dataset, task)
    try:
        loaded = for_safe_decoding(load(dataset, root=root, **(loader_kwargs or {})))
    except FileNotFoundError as error:  # a root, metadata file or clips not there: the loader's words, as data.check
        raise UsageError(" ".join(str(error).split())) from None
    first = next(iter(loaded.values()))
    check_classes(first, root if root is not None else dataset)
    clip_seconds = downstream_clip_seconds(task, clip_seconds, loaded)
    multi_label, names = label_info(first)
    if max_folds is not None and has_folds(loaded):
        folds = list(folds if folds is not None else sorted(set(first["fold"])))[:max_folds]
    parts = downstream_parts(
        loaded,
        folds=folds,
        kfold_validation=kfold_validation,
        select_on=select_on,
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
        seed=seed,
        group_by=group_by,
    )
    test_held_out = "test" not in loaded and not has_folds(loaded)
    return DownstreamTask(task, parts, multi_label, names, clip_seconds, test_held_out)
