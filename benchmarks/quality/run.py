"""`make study`: does AaSP pre-training learn on real audio? Variants pre-trained with the same budget and seeds on
the mini corpus, every encoder linear-probed on every mini task, one table.

    python benchmarks/quality/run.py --quick            # AaPE, SPE, their inits, log-mel; 1 seed, 400 steps (~30 min)
    python benchmarks/quality/run.py                    # every variant of variants.py, seeds 0 1, 2000 steps (hours)
    python benchmarks/quality/run.py --variants spe,no_contrastive --seeds 0 1 2 --stop_after_minutes 50
    python benchmarks/quality/run.py --report_only      # rebuild results.md / .json / .png from the finished units
    python benchmarks/quality/run.py --dry_run          # list the units and which are finished
    python benchmarks/quality/run.py --device cuda --model_size base --max_steps 20000 \
        --set per_device_train_batch_size=64 --set mixed_precision=bf16 --set dataloader_num_workers=8

Data (`--data_dir`, default benchmarks/quality/data, built by benchmarks/quality/build_data.py): an unlabelled
corpus `pretrain/` (16 kHz audio files, any sub-folders) and labelled tasks `tasks/<task>/{train,test}/<label>/*`.

Recipe: `--preset` (default examples/configs/pretrain_small_quality.json, an examples/pretrain.py JSON preset),
`--model_size` (AaspConfig overrides of variants.MODEL_SIZES; "small" = the preset as is), then `--model_set
KEY=VALUE` (AaspConfig) and `--set KEY=VALUE` (pretrain.py arguments) for every variant, then each variant's own
overrides (variants.VARIANTS, or `--variants_file`). `--max_steps` replaces the preset's and scales its warm-up
in proportion (unless `--set warmup_steps=N`). Model-config fields that this checkout's AaspConfig does not know
are passed through (AaspConfig keeps them as inert attributes) and flagged in the table: such a variant ran as the
base recipe.

Units. The study runs one (variant, seed, step) unit at a time, variant after variant, and writes each unit's
result before starting the next: it can stop anywhere (Ctrl-C, `--stop_after_minutes`) and resumes where it stopped
(finished units are skipped, an interrupted pre-training resumes from its last checkpoint). Sessions can share the
work (`--variants a,b` in one, `--variants c,d` in another, same --output_dir): the report covers every finished
unit of the study. A unit
  1. pre-trains with examples/pretrain.py (a subprocess; `--launcher inprocess` calls its `main`) up to `step`:
     `--stop_after_steps step --resume` in the variant's run folder, so the schedules are those of `max_steps` and
     each segment resumes exactly where the last one stopped; the exported encoder is kept as encoders/step<step>/.
     Step 0 is the initialisation pretrain.py starts from (`set_seed(seed)` then `build_model`, as in its main).
  2. probes that encoder on every task -> units/<variant>/seed<k>/step<step>.json.

Probe protocol: examples/linear_eval.py's (`aasp_hf.evaluation`). `evaluation_parts` reads a task as an audiofolder
and holds out `--validation_fraction` (0.1) of train as validation, seeded with `--feature_seed` (0); `cached_features`
crops or pads each clip to the task's clip length (a seeded random crop for train/validation, the first segment
for test) and pools the paper feature [CLS ; time-mean of the patch tokens of each frequency row] (D + F̃·D);
`standardization_stats` takes the statistics of TRAIN only; `train_linear_heads` trains one linear layer per
learning rate in one pass (Adam, cosine), each learning rate's test accuracy is read at its best validation step
and the learning rate is chosen on validation; the unit's accuracy on a task is the mean over `--probe_seeds`
(head initialisation and batch order). The clip length of a task is `clip_seconds` from
DATA_DIR/tasks/<task>/task.json when the data builder wrote it, else the task's longest clip (at most
`--max_clip_seconds`), so no clip is cut.
NO TRUNCATION: pretrain.py exports its feature extractor with `max_frames = num_frames` (the pre-training crop),
which would cut every probe clip to the crop; the runner sets `max_frames = None` on the extractor it loads.
log-mel baseline: the same clips, crops and collator; per mel bin the mean and std over the real frames of the
normalised log-mel (2·F values); then the same standardisation and heads.

Layout of --output_dir (default benchmarks/quality/runs/, not for git):
    cache/pretrain-logmel-<F>bins/                log-mel cache of the corpus (aasp_hf.data.cache), built once
    <study>/study.json                            the resolved settings; <study> = <size>-<steps>steps-<hash>
    <study>/pretrain/<variant>/seed<k>/           pretrain.py's output_dir: run_config.json, pretrain.log,
                                                  log_history.jsonl, the latest checkpoint, encoders/step<s>/
    <study>/units/<variant>/seed<k>/step<s>.json  one finished unit (per-task accuracy, average, what ran)
    <study>/evals/<key>.json                      probe results by encoder weights + config (`encoder_key`):
                                                  identical encoders (random_init and step 0 of aape_symmetric) are
                                                  probed once
Report: `--results` (default benchmarks/quality/results.md, results_quick.md with --quick, results_<study>.md with
`--study`: a named study never replaces the committed default report), with results.json (all raw numbers, one unit
per line) and results.png (average probe accuracy against pre-training step) beside it.
"""

import argparse
import contextlib
import dataclasses
import datetime
import hashlib
import importlib.util
import inspect
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from variants import BASE, DEFAULT_VARIANTS, MODEL_SIZES, QUICK, VARIANTS  # benchmarks/quality/variants.py

from aasp_hf.utils.entry_points import run_script
from aasp_hf.utils.errors import parse_command_line
from aasp_hf.evaluation import mean_std
from aasp_hf.evaluation.linear_protocol import SPLITS  # the crop seeds are feature_seed + index

NAN = float("nan")  # the std of one seed: shown as no std in the table
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

DEFAULT_PRESET = ROOT / "examples" / "configs" / "pretrain_small_quality.json"
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
DATA_SOURCE_KEYS = (
    "dataset",
    "data_root",
    "train_dir",
    "dataset_name",
    "dataset_config",
    "synthetic_clips",
    "log_mel_cache",
    "streaming",
)
PER_RUN_KEYS = ("output_dir", "seed", "stop_after_steps", "resume")
NAME_FIELDS = ("transformers_version", "architectures", "_name_or_path")  # config fields that name, not define


# ----------------------------------------------------------------------------------------------- arguments
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_dir", default=str(HERE / "data"))
    p.add_argument("--output_dir", default=str(HERE / "runs"))
    p.add_argument(
        "--results",
        default=None,
        help="the table (.md; .json and .png beside it); default "
        "benchmarks/quality/results.md, results_quick.md with --quick, results_<study>.md with --study",
    )
    p.add_argument("--preset", default=str(DEFAULT_PRESET), help="an examples/pretrain.py JSON preset")
    p.add_argument("--model_size", choices=sorted(MODEL_SIZES), default="small")
    p.add_argument(
        "--variants",
        default=None,
        help=f"comma-separated, or 'all' (default: all; --quick: {','.join(QUICK['variants'])})",
    )
    p.add_argument(
        "--variants_file",
        default=None,
        help="JSON {name: {model_config, train, kind, about}}: more variants (or redefined ones)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="pre-training seeds (default 0 1; --quick: 0)")
    p.add_argument(
        "--max_steps",
        type=int,
        default=None,
        help=f"pre-training budget (default: the preset's; --quick: {QUICK['max_steps']})",
    )
    p.add_argument(
        "--probe_fractions",
        type=float,
        nargs="+",
        default=None,
        help="probe the encoder at these fractions of max_steps (default 0 0.25 0.5 1; --quick: 0 1)",
    )
    p.add_argument("--quick", action="store_true", help="a few variants, one seed, fewer steps (variants.QUICK)")
    p.add_argument(
        "--set",
        dest="train_set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pretrain.py argument for every variant (value parsed as JSON, else a string)",
    )
    p.add_argument(
        "--model_set", action="append", default=[], metavar="KEY=VALUE", help="an AaspConfig field for every variant"
    )
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: every DATA_DIR/tasks/*)")
    p.add_argument("--max_clip_seconds", type=float, default=10.0)
    p.add_argument("--probe_learning_rates", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2])
    p.add_argument("--probe_max_steps", type=int, default=1000)
    p.add_argument("--probe_eval_steps", type=int, default=50)
    p.add_argument("--probe_batch_size", type=int, default=128)
    p.add_argument(
        "--probe_seeds", type=int, nargs="+", default=None, help="linear-head seeds (default 0 1 2; --quick: 0)"
    )
    p.add_argument("--validation_fraction", type=float, default=0.1)
    p.add_argument("--feature_seed", type=int, default=0)
    p.add_argument("--feature_batch_size", type=int, default=32)
    p.add_argument(
        "--device",
        default=None,
        help="probing device, and with 'cpu' pre-training on the CPU too (default: cuda when available)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of pre-training (OMP_NUM_THREADS) and of "
        "this process; default 1 on the CPU: on 2 cores shared with other jobs a small-recipe step took "
        "1.3 s on one thread and 8 s on two (threads wait for each other); pass 2 on an idle machine",
    )
    p.add_argument(
        "--probe_threads",
        type=int,
        default=1,
        help="torch threads while probing: its many small ops "
        "run 5-10x faster on one thread than on two on a loaded machine (0: torch's default)",
    )
    p.add_argument("--launcher", choices=("subprocess", "inprocess"), default="subprocess")
    p.add_argument(
        "--log_mel_cache",
        choices=("auto", "on", "off"),
        default="auto",
        help="pre-train from a log-mel cache of the corpus (aasp_hf.data.cache, built once under "
        "OUTPUT_DIR/cache, ~8 min and 1.4 GB for the 15-h corpus on 1 CPU thread) instead of decoding 16 "
        "files a step (~0.2 s on the CPU); auto: on, except --quick on the CPU (not worth building for "
        "two 400-step runs)",
    )
    p.add_argument("--cache_workers", type=int, default=0, help="processes that build the log-mel cache")
    p.add_argument("--keep_checkpoints", action="store_true", help="keep the last checkpoint of finished runs")
    p.add_argument("--stop_after_minutes", type=float, default=None, help="start no unit after this long")
    p.add_argument("--study", default=None, help="the study folder's name (default <size>-<steps>steps-<hash>)")
    p.add_argument("--report_only", action="store_true")
    p.add_argument("--dry_run", action="store_true", help="list the units and their state, run nothing")
    args = parse_command_line(p, argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def parse_assignments(items) -> dict:
    """["lr=3e-4", "mixed_precision=bf16"] -> {"lr": 0.0003, "mixed_precision": "bf16"} (JSON values, else str)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def digest(obj, length: int = 12) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:length]


def write_json(path: Path, obj):
    """Write-then-rename: a unit file is either complete or absent."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=float))
    os.replace(tmp, path)


def table_json(obj: dict) -> str:
    """A report as JSON with one entry of each top-level list or dict per line (a unit, a variant's aggregate, a
    command): a diff of two reports reads line by line, and the file stays a table, not thousands of lines."""

    def entries(value):
        if isinstance(value, dict):
            return [f"{json.dumps(k)}: {json.dumps(v, default=float)}" for k, v in value.items()], "{}"
        return [json.dumps(v, default=float) for v in value], "[]"

    lines = []
    for key, value in obj.items():
        if isinstance(value, (dict, list)) and value:
            items, brackets = entries(value)
            body = ",\n".join(f"  {item}" for item in items)
            lines.append(f"{json.dumps(key)}: {brackets[0]}\n{body}\n {brackets[1]}")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, default=float)}")
    return "{\n " + ",\n ".join(lines) + "\n}\n"


# ----------------------------------------------------------------------------------------------- data
def audio_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file())


def find_tasks(data_dir: Path, only=None) -> list[str]:
    tasks_dir = data_dir / "tasks"
    found = (
        sorted(p.name for p in tasks_dir.iterdir() if (p / "train").is_dir() and (p / "test").is_dir())
        if tasks_dir.is_dir()
        else []
    )
    if only:
        missing = sorted(set(only) - set(found))
        if missing:
            raise ValueError(f"--tasks {missing} not found in {tasks_dir} (found {found})")
        found = [t for t in found if t in only]
    return found


def check_data(data_dir: Path, tasks) -> None:
    hint = (
        "Build it with `python benchmarks/quality/build_data.py` (or pass --data_dir): it holds pretrain/ "
        "(unlabelled audio) and tasks/<task>/{train,test}/<label>/*.wav."
    )
    if not (data_dir / "pretrain").is_dir() or not audio_files(data_dir / "pretrain"):
        raise FileNotFoundError(f"no pre-training corpus: {data_dir / 'pretrain'} holds no audio files. {hint}")
    if not tasks:
        raise FileNotFoundError(f"no tasks: {data_dir / 'tasks'} has no <task>/train and <task>/test folders. {hint}")


def data_fingerprint(data_dir: Path) -> str:
    """Hash of every audio file's path and size under pretrain/ and tasks/ (a rebuilt corpus is a new study)."""
    h = hashlib.sha256()
    for sub in ("pretrain", "tasks"):
        for path in audio_files(data_dir / sub):
            h.update(f"{path.relative_to(data_dir)}\t{path.stat().st_size}\n".encode())
    return h.hexdigest()[:16]


def task_clip_seconds(task_dir: Path, max_clip_seconds: float) -> float:
    """task.json's clip_seconds, else the longest clip of the task (so nothing is cut), at most max_clip_seconds."""
    meta = task_dir / "task.json"
    if meta.is_file() and "clip_seconds" in json.loads(meta.read_text()):
        return float(json.loads(meta.read_text())["clip_seconds"])
    import soundfile

    longest = 0.0
    for path in audio_files(task_dir):
        try:
            longest = max(longest, soundfile.info(str(path)).duration)
        except RuntimeError:  # a format soundfile cannot read: decode it
            from aasp_hf.data import decode_audio

            longest = max(longest, len(decode_audio(str(path))) / 16000)
    return min(math.ceil(longest * 100 - 1e-6) / 100, max_clip_seconds)


# ----------------------------------------------------------------------------------------------- settings
def pretrain_script():
    """examples/pretrain.py, the recipe this runner measures, as a module loaded once by its path: its argument
    dataclasses, its `main` (`--launcher inprocess`) and the initialisation it starts from."""
    if "pretrain" not in sys.modules:
        spec = importlib.util.spec_from_file_location("pretrain", ROOT / "examples" / "pretrain.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["pretrain"] = module
        spec.loader.exec_module(module)
    return sys.modules["pretrain"]


def pretrain_fields() -> set:
    pretrain = pretrain_script()
    return {
        f.name
        for cls in (pretrain.DataArguments, pretrain.ModelArguments, pretrain.PretrainingArguments)
        for f in dataclasses.fields(cls)
    }


def aasp_config_fields() -> set:
    from aasp_hf import AaspConfig

    return set(inspect.signature(AaspConfig.__init__).parameters) - {"self", "kwargs"}


def resolve_settings(args) -> dict:
    """The base recipe every variant starts from, the probe protocol and the study's name."""
    preset = json.loads(Path(args.preset).read_text())
    train = {k: v for k, v in preset.items() if k != "model_config"}
    model = dict(preset.get("model_config") or {})
    model.update(MODEL_SIZES[args.model_size])
    model.update(parse_assignments(args.model_set))
    overrides = parse_assignments(args.train_set)
    unknown = sorted(set(overrides) - pretrain_fields())
    if unknown:
        raise ValueError(f"--set {unknown}: not examples/pretrain.py arguments")
    preset_steps = int(train.get("max_steps", 1000))
    max_steps = args.max_steps or (QUICK["max_steps"] if args.quick else preset_steps)
    if "warmup_steps" not in overrides and max_steps != preset_steps:  # the same warm-up fraction
        overrides["warmup_steps"] = round(int(train.get("warmup_steps", 0)) * max_steps / preset_steps)
    train.update(overrides)
    train["max_steps"] = max_steps
    for key in DATA_SOURCE_KEYS + PER_RUN_KEYS:  # set per run by the runner
        train.pop(key, None)
    fractions = args.probe_fractions or (QUICK["probe_fractions"] if args.quick else [0.0, 0.25, 0.5, 1.0])
    if any(not 0.0 <= f <= 1.0 for f in fractions):
        raise ValueError(f"--probe_fractions {fractions} must lie in [0, 1]")
    probe_steps = sorted({round(f * max_steps) for f in fractions} | {0, max_steps})
    probe = {
        "learning_rates": args.probe_learning_rates,
        "max_steps": args.probe_max_steps,
        "eval_steps": args.probe_eval_steps,
        "batch_size": args.probe_batch_size,
        "seeds": args.probe_seeds or (QUICK["probe_seeds"] if args.quick else [0, 1, 2]),
        "validation_fraction": args.validation_fraction,
        "feature_seed": args.feature_seed,
        "max_clip_seconds": args.max_clip_seconds,
        "feature_batch_size": args.feature_batch_size,
    }
    data_dir = Path(args.data_dir).resolve()
    tasks = find_tasks(data_dir, args.tasks.split(",") if args.tasks else None)
    check_data(data_dir, tasks)
    settings = {
        "model_size": args.model_size,
        "preset": relative_to_root(args.preset),
        "model_config": model,
        "train": train,
        "probe": probe,
        "data_dir": relative_to_root(data_dir),
        "data_fingerprint": data_fingerprint(data_dir),
        "tasks": tasks,
        "log_mel_cache": args.log_mel_cache == "on"
        or (args.log_mel_cache == "auto" and not (args.quick and default_device(args) == "cpu")),
    }
    settings["study"] = args.study or f"{args.model_size}-{max_steps}steps-{digest(settings, 8)}"
    settings["probe_steps"] = probe_steps
    return settings


def load_variants(args) -> dict:
    variants = dict(VARIANTS)
    if args.variants_file:
        variants.update(json.loads(Path(args.variants_file).read_text()))
    for name, spec in variants.items():
        if spec.get("kind", "pretrain") not in ("pretrain", "random_init", "logmel"):
            raise ValueError(f"variant {name}: kind {spec['kind']!r} is not pretrain, random_init or logmel")
    return variants


def selected_variants(args, variants) -> list[str]:
    if args.variants in (None, "all"):
        names = (
            QUICK["variants"]
            if args.quick and args.variants is None
            else DEFAULT_VARIANTS + [v for v in variants if v not in DEFAULT_VARIANTS]
        )
    else:
        names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in variants]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; known: {sorted(variants)}")
    return names


def variant_recipe(settings, spec) -> tuple[dict, dict]:
    """(model_config, pretrain.py arguments) of a variant: the base recipe plus its overrides."""
    return {**settings["model_config"], **spec.get("model_config", {})}, {**settings["train"], **spec.get("train", {})}


# ----------------------------------------------------------------------------------------------- the study
class Study:
    """The resolved settings, the folders and what is cached in this process (task splits, the metric)."""

    def __init__(self, args, settings, variants):
        self.args, self.settings, self.variants = args, settings, variants
        self.output_dir = Path(args.output_dir).resolve()
        self.dir = self.output_dir / settings["study"]
        self.data_dir = Path(args.data_dir).resolve()
        self._parts, self._metric = {}, None
        self.command = "python benchmarks/quality/run.py " + shlex.join(args.argv)

    @property
    def device(self) -> str:
        return default_device(self.args)

    def unit_file(self, variant, seed, step) -> Path:
        return self.dir / "units" / variant / ("logmel" if seed is None else f"seed{seed}") / f"step{step}.json"

    def run_dir(self, variant, seed) -> Path:
        return self.dir / "pretrain" / variant / f"seed{seed}"

    def units(self, names, seeds) -> list[tuple]:
        """(variant, seed, step) in the order they run: variant after variant, seed after seed, step after step."""
        out = []
        for name in names:
            kind = self.variants[name].get("kind", "pretrain")
            if kind == "logmel":
                out.append((name, None, 0))
            else:
                steps = [0] if kind == "random_init" else self.settings["probe_steps"]
                out += [(name, seed, step) for seed in seeds for step in steps]
        return out

    def check_study_file(self):
        path = self.dir / "study.json"
        mine = {k: v for k, v in self.settings.items() if k != "probe_steps"}
        if path.is_file():
            stored = json.loads(path.read_text())
            changed = sorted(k for k in set(stored) | set(mine) if k != "probe_steps" and stored.get(k) != mine.get(k))
            if changed:
                raise ValueError(
                    f"{path} was written with other settings (differs in {changed}): use another "
                    f"--study name or --output_dir"
                )
        else:
            write_json(path, mine)

    # ------------------------------------------------------------------------------------------- pre-training
    def log_mel_cache(self, num_mel_bins: int) -> Path:
        """The corpus's unnormalised log-mel (aasp_hf.data.cache), built once and reused by every run."""
        from aasp_hf import AaspFeatureExtractor
        from aasp_hf.data.cache import build_log_mel_cache

        corpus = self.data_dir / "pretrain"
        files = audio_files(corpus)
        ids = [str(p.relative_to(corpus)) for p in files]
        cache_dir = self.output_dir / "cache" / f"pretrain-logmel-{num_mel_bins}bins"
        index_file = cache_dir / "index.json"
        if index_file.is_file():
            index = json.loads(index_file.read_text())
            if index.get("complete") and sorted(index["clips"]["id"] + [f["id"] for f in index["failed"]]) == sorted(
                ids
            ):
                return cache_dir
        print(f"log-mel cache of {len(files)} corpus files -> {cache_dir}", flush=True)
        summary = build_log_mel_cache(
            [{"audio": str(p), "id": i} for p, i in zip(files, ids)],
            cache_dir,
            AaspFeatureExtractor(feature_size=num_mel_bins),
            id_column="id",
            num_workers=self.args.cache_workers,
        )
        if summary["num_failed"]:
            print(f"  {summary['num_failed']} corpus files failed to decode and are left out", flush=True)
        return cache_dir

    def run_config(self, variant, seed) -> dict:
        """The complete examples/pretrain.py JSON config of one run (written to run_config.json)."""
        model, train = variant_recipe(self.settings, self.variants[variant])
        config = {**train, "model_config": model, "seed": seed, "output_dir": str(self.run_dir(variant, seed))}
        if self.variants[variant].get("kind", "pretrain") == "random_init":
            pass  # built, never trained: no data source
        elif self.settings["log_mel_cache"]:
            config["log_mel_cache"] = str(self.log_mel_cache(model.get("num_mel_bins", 128)))
        else:
            config["train_dir"] = str(self.data_dir / "pretrain")
        return config

    def prepare_run(self, variant, seed) -> Path:
        run_dir = self.run_dir(variant, seed)
        config = self.run_config(variant, seed)
        path = run_dir / "run_config.json"
        if path.is_file():
            stored = json.loads(path.read_text())
            changed = sorted(k for k in set(stored) | set(config) if stored.get(k) != config.get(k))
            if changed:
                raise ValueError(
                    f"{path} holds another recipe for {variant} seed {seed} (differs in {changed}): "
                    f"the variant's definition changed; delete {run_dir} or use another --study"
                )
        else:
            write_json(path, config)
        return path

    def encoder(self, variant, seed, step) -> Path:
        """The exported encoder of (variant, seed) at `step`, pre-training up to there when needed."""
        config_path = self.prepare_run(variant, seed)
        run_dir = config_path.parent
        dest = run_dir / "encoders" / f"step{step}"
        if (dest / "config.json").is_file():
            return dest
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        if step == 0:
            export_initialisation(json.loads(config_path.read_text()), tmp)
        else:
            from aasp_hf.training import latest_checkpoint
            from aasp_hf.training.checkpointing import load_trainer_state

            latest = latest_checkpoint(run_dir)
            if latest is not None and load_trainer_state(latest)["step"] > step:
                raise RuntimeError(
                    f"{latest} is past step {step} but {dest} is missing: delete {run_dir} to redo this run"
                )
            self.pretrain_segment(config_path, step)
            done = json.loads((run_dir / "all_results.json").read_text())["step"]
            if done != step:
                raise RuntimeError(f"pre-training of {run_dir} stopped at step {done}, expected {step}")
            shutil.copytree(run_dir / "encoder", tmp)
        os.replace(tmp, dest)
        if step == self.settings["train"]["max_steps"] and not self.args.keep_checkpoints:
            for checkpoint in run_dir.glob("checkpoint-*"):  # the run is complete: its exports are all we need
                shutil.rmtree(checkpoint, ignore_errors=True)
        return dest

    def pretrain_segment(self, config_path: Path, step: int):
        argv = ["--config", str(config_path), "--stop_after_steps", str(step), "--resume", "true"]
        if self.args.launcher == "inprocess":
            pretrain_script().main(argv)
            return
        env = dict(os.environ)
        if self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        if self.args.threads:
            env["OMP_NUM_THREADS"] = str(self.args.threads)
        log_path = config_path.parent / "pretrain.log"
        with open(log_path, "a") as log:
            log.write(f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')}: up to step {step}\n")
            log.flush()
            code = subprocess.run(
                [sys.executable, str(ROOT / "examples" / "pretrain.py"), *argv],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            ).returncode
        if code != 0:
            tail = "".join(log_path.read_text().splitlines(keepends=True)[-25:])
            raise RuntimeError(f"examples/pretrain.py failed (exit {code}); end of {log_path}:\n{tail}")

    # ------------------------------------------------------------------------------------------- probing
    def task_parts(self, task):
        """`evaluation_parts` of a task (its audiofolder; validation held out of train), cached."""
        if task not in self._parts:
            from aasp_hf.evaluation.linear_protocol import LinearEvalArguments, evaluation_parts

            task_dir = self.data_dir / "tasks" / task
            probe = self.settings["probe"]
            le_args = LinearEvalArguments(
                model_name_or_path="-",
                dataset="audiofolder",
                data_root=str(task_dir),
                task=task,
                clip_seconds=task_clip_seconds(task_dir, probe["max_clip_seconds"]),
                validation_fraction=probe["validation_fraction"],
                feature_seed=probe["feature_seed"],
            )
            parts, multi_label, num_classes, clip_seconds = evaluation_parts(le_args)
            self._parts[task] = parts["official"], multi_label, num_classes, clip_seconds
        return self._parts[task]

    def metric(self, multi_label):
        from aasp_hf.metrics import load_metric

        if self._metric is None:
            self._metric = {}
        name = "mean_average_precision" if multi_label else "accuracy"
        if name not in self._metric:
            self._metric[name] = load_metric(name)
        return self._metric[name]

    def probe_task(self, task, featurise) -> dict:
        """Standardise with train statistics, train the linear heads per probe seed, test accuracy at the chosen lr."""
        from aasp_hf.evaluation import standardization_stats, standardize
        from aasp_hf.evaluation.linear_heads import final_test_score, train_linear_heads

        splits, multi_label, num_classes, clip_seconds = self.task_parts(task)
        features = {
            split: featurise(task, splits[split], split, clip_seconds, num_classes if multi_label else None)
            for split in SPLITS
        }
        mean, std = standardization_stats(features["train"][0])
        data = [(standardize(features[s][0], mean, std), features[s][1]) for s in SPLITS]
        p = self.settings["probe"]
        runs = []
        for seed in p["seeds"]:
            result = train_linear_heads(
                *data,
                p["learning_rates"],
                multi_label=multi_label,
                num_classes=num_classes,
                max_steps=p["max_steps"],
                batch_size=p["batch_size"],
                eval_steps=p["eval_steps"],
                seed=seed,
                device=self.device,
            )
            score = final_test_score(self.metric(multi_label), result["test_logits"], data[2][1], multi_label)
            runs.append(
                {
                    "seed": seed,
                    "test": score,
                    "valid": result["valid_score"],
                    "learning_rate": result["chosen_learning_rate"],
                    "best_step": result["best_steps"][result["chosen_index"]],
                }
            )
        return {
            "accuracy": float(np.mean([r["test"] for r in runs])),
            "probe_runs": runs,
            "metric": "mAP" if multi_label else "accuracy",
            "num_classes": num_classes,
            "clip_seconds": clip_seconds,
            "feature_dim": int(features["train"][0].shape[1]),
            "num_clips": {s: int(len(features[s][0])) for s in SPLITS},
        }

    def probe_encoder(self, encoder_dir: Path) -> dict:
        """Every task's probe result for one exported encoder; cached under `encoder_key` and the probe protocol."""
        with torch_threads(self.args.probe_threads):
            return self._probe_encoder(encoder_dir)

    def _probe_encoder(self, encoder_dir: Path) -> dict:
        from aasp_hf.evaluation import load_frozen_encoder
        from aasp_hf.evaluation.linear_protocol import LinearEvalArguments, cached_features

        model, feature_extractor = load_frozen_encoder(str(encoder_dir), self.device)
        saved_max_frames = json.loads((encoder_dir / "preprocessor_config.json").read_text()).get("max_frames")
        feature_extractor.max_frames = None  # an export may truncate to the pre-training crop: probe whole clips
        key = encoder_key(model, feature_extractor)
        # the protocol is part of the cache name: probe_encoders.py shares one folder between calls whose --tasks or
        # probe flags differ (a study's own settings are fixed by its study.json)
        protocol = {
            "encoder": key,
            "probe": self.settings["probe"],
            "tasks": self.settings["tasks"],
            "data": self.settings["data_fingerprint"],
        }
        cached = self.dir / "evals" / f"{digest(protocol, 24)}.json"
        if cached.is_file():
            return {**json.loads(cached.read_text()), "reused": True}
        p = self.settings["probe"]
        with tempfile.TemporaryDirectory(prefix="probe-", dir=self.dir) as tmp:
            le_args = LinearEvalArguments(
                model_name_or_path=str(encoder_dir),
                output_dir=tmp,
                feature_batch_size=p["feature_batch_size"],
                feature_seed=p["feature_seed"],
            )

            def featurise(task, rows, split, clip_seconds, num_labels):
                return cached_features(
                    le_args, model, feature_extractor, task, rows, split, clip_seconds, num_labels, self.device
                )

            tasks = {task: self.probe_task(task, featurise) for task in self.settings["tasks"]}
        result = {"encoder_key": key, "saved_max_frames": saved_max_frames, "tasks": tasks}
        write_json(cached, result)
        return result

    def probe_logmel(self) -> dict:
        from aasp_hf import AaspFeatureExtractor

        extractor = AaspFeatureExtractor(feature_size=self.settings["model_config"].get("num_mel_bins", 128))
        p = self.settings["probe"]

        def featurise(task, rows, split, clip_seconds, num_labels):
            return logmel_features(
                extractor, rows, split, clip_seconds, num_labels, p["feature_seed"], p["feature_batch_size"]
            )

        with torch_threads(self.args.probe_threads):
            return {"tasks": {task: self.probe_task(task, featurise) for task in self.settings["tasks"]}}

    # ------------------------------------------------------------------------------------------- one unit
    def run_unit(self, variant, seed, step) -> dict:
        spec = self.variants[variant]
        kind = spec.get("kind", "pretrain")
        start = time.time()
        if kind == "logmel":
            probed, encoder_dir, history = self.probe_logmel(), None, None
        else:
            encoder_dir = self.encoder(variant, seed, step)
            probed = self.probe_encoder(encoder_dir)
            history = training_log(encoder_dir.parents[1], step)
        tasks = {t: probed["tasks"][t] for t in self.settings["tasks"]}
        model, train = variant_recipe(self.settings, spec)
        record = {
            "variant": variant,
            "seed": seed,
            "step": step,
            "kind": kind,
            "about": spec.get("about", ""),
            "max_steps": self.settings["train"]["max_steps"],
            "study": self.settings["study"],
            "accuracy": {t: r["accuracy"] for t, r in tasks.items()},
            "average": float(np.mean([r["accuracy"] for r in tasks.values()])),
            "tasks": tasks,
            "overrides": {k: spec[k] for k in ("model_config", "train") if k in spec},
            "unknown_model_fields": sorted(set(spec.get("model_config", {})) - aasp_config_fields()),
            "encoder": None if encoder_dir is None else str(encoder_dir.relative_to(self.dir)),
            "encoder_key": probed.get("encoder_key"),
            "probe_reused": bool(probed.get("reused")),
            "saved_max_frames": probed.get("saved_max_frames"),
            "training_log": history,
            "seconds": round(time.time() - start, 1),
            "command": self.command,
            "finished": datetime.datetime.now().isoformat(timespec="seconds"),
            "effective_config_digest": None if kind == "logmel" else effective_digest(model, train),
        }
        write_json(self.unit_file(variant, seed, step), record)
        return record


# ----------------------------------------------------------------------------------------------- helpers
def default_device(args) -> str:
    if args.device:
        return args.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def torch_threads(num_threads):
    """torch.set_num_threads(num_threads) inside the block (0 or None: unchanged)."""
    import torch

    before = torch.get_num_threads()
    if num_threads:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def export_initialisation(config: dict, dest: Path):
    """The encoder examples/pretrain.py starts from with this config and seed (its main: set_seed, build_model)."""
    from accelerate.utils import set_seed

    from aasp_hf import AaspFeatureExtractor
    from aasp_hf.training.saved_models import export_encoders

    pretrain = pretrain_script()
    set_seed(config["seed"])
    model = pretrain.build_model(pretrain.ModelArguments(model_config=config["model_config"]))
    extractor = AaspFeatureExtractor(feature_size=model.config.num_mel_bins)  # probing sets max_frames None anyway
    with tempfile.TemporaryDirectory() as tmp:
        export_encoders(model, extractor, Path(tmp), export_teacher=False)
        shutil.copytree(Path(tmp) / "encoder", dest)


def encoder_checksum(model) -> str:
    from aasp_hf.training.run_log import checksum

    return checksum(model)


def encoder_key(model, feature_extractor) -> str:
    """What a probe result is cached under: the weights, the config and the extractor. The config is part of it
    because some options change the forward and not the weights (`sblu_phase`, for one), so two variants' identical
    initialisations can be different encoders. A variant that changes only pre-training fields of the config
    (`mask_ratio`, `loss_scaling`, ...) therefore has its step 0 probed again: slower, never wrong."""
    config = {k: v for k, v in model.config.to_dict().items() if k not in NAME_FIELDS}
    return digest({"weights": encoder_checksum(model), "config": config, "extractor": feature_extractor.to_dict()}, 24)


def effective_digest(model_config: dict, train: dict) -> str:
    """Digest of the AaspConfig a recipe builds (defaults filled in) and its training arguments: two variants with
    the same digest ran the same recipe."""
    from aasp_hf import AaspConfig

    fields = {k: v for k, v in AaspConfig(**model_config).to_dict().items() if k not in NAME_FIELDS}
    return digest({"model": fields, "train": train})


def training_log(run_dir: Path, step: int):
    """The last log_history.jsonl record at or before `step` (loss parts, lr, ...), None at step 0."""
    path = run_dir / "log_history.jsonl"
    if step == 0 or not path.is_file():
        return None
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    records = [r for r in records if r["step"] <= step]
    return records[-1] if records else None


def logmel_features(extractor, rows, split, clip_seconds, num_labels, feature_seed, batch_size):
    """(N, 2F) log-mel mean and std over the real frames per mel bin, with linear_eval's clips and crops."""
    import torch

    from aasp_hf.data import AaspFineTuningCollator

    collator = AaspFineTuningCollator(
        extractor,
        clip_seconds=clip_seconds,
        split=split,
        num_labels=num_labels,
        seed=feature_seed + SPLITS.index(split),
    )
    loader = torch.utils.data.DataLoader(rows, batch_size=batch_size, shuffle=False, collate_fn=collator)
    features, labels = [], []
    for batch in loader:
        if batch is None:
            continue
        x = batch["input_values"].double()  # (B, T, F)
        real = batch["attention_mask"][..., None].double()  # (B, T) -> (B, T, 1)
        count = real.sum(1).clamp(min=1.0)  # (B, 1)
        mean = (x * real).sum(1) / count  # (B, F)
        std = (((x - mean[:, None]) ** 2 * real).sum(1) / count).sqrt()  # (B, F)
        features.append(torch.cat([mean, std], -1).float().numpy())  # (B, 2F)
        labels.append(np.asarray(batch["labels"]))
    return np.concatenate(features), np.concatenate(labels)


# ----------------------------------------------------------------------------------------------- aggregation
def validation_average(unit: dict, tasks: list[str]) -> float | None:
    """A unit's validation accuracy (the seeded 10 % of train: the training source, unlike test) averaged over
    tasks, each task's the mean over its probe runs; None for a unit written without them."""
    runs = [unit.get("tasks", {}).get(t, {}).get("probe_runs") for t in tasks]
    if not all(runs):
        return None
    return float(np.mean([np.mean([r["valid"] for r in task_runs]) for task_runs in runs]))


def aggregate(units: list[dict], tasks: list[str]) -> dict:
    """{variant: {step: {"seeds", "n", "tasks": {task: [mean, std]}, "average": [mean, std]}}}; the statistics are
    over seeds (std with ddof = 1), a seed's average is the mean of its task accuracies. For each pre-trained
    variant, "gain" at a step: the paired difference of averages to its own step 0 (the same seed and
    architecture at initialisation), mean and std over the seeds that have both."""
    out = {}
    for unit in units:
        out.setdefault(unit["variant"], {}).setdefault(unit["step"], []).append(unit)
    table = {}
    for variant, by_step in out.items():
        table[variant] = {}
        for step, group in sorted(by_step.items()):
            group = sorted(group, key=lambda u: -1 if u["seed"] is None else u["seed"])
            entry = {
                "seeds": [u["seed"] for u in group],
                "n": len(group),
                "tasks": {t: list(mean_std([u["accuracy"][t] for u in group], single_std=NAN)) for t in tasks},
                "average": list(mean_std([np.mean([u["accuracy"][t] for t in tasks]) for u in group], single_std=NAN)),
            }
            validation = [validation_average(u, tasks) for u in group]
            if all(v is not None for v in validation):  # the heads' accuracy on the training source's held-out 10 %
                entry["validation"] = list(mean_std(validation, single_std=NAN))
            if step > 0 and 0 in by_step:
                init = {u["seed"]: np.mean([u["accuracy"][t] for t in tasks]) for u in by_step[0]}
                gains = [
                    np.mean([u["accuracy"][t] for t in tasks]) - init[u["seed"]] for u in group if u["seed"] in init
                ]
                if gains:
                    entry["gain"] = list(mean_std(gains, single_std=NAN))
                    entry["gain_seeds"] = len(gains)
            table[variant][step] = entry
    return table


def relative_to_root(path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def fmt(mean, std=float("nan"), scale=100.0, signed=False) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    text = f"{scale * mean:+.1f}" if signed else f"{scale * mean:.1f}"
    return text if math.isnan(std) else f"{text} ± {scale * std:.1f}"


# ----------------------------------------------------------------------------------------------- report
def collect_units(study: Study) -> list[dict]:
    units_dir = study.dir / "units"
    return [json.loads(p.read_text()) for p in sorted(units_dir.rglob("step*.json"))] if units_dir.is_dir() else []


def write_report(study: Study, results_path: Path) -> dict:
    settings, tasks = study.settings, study.settings["tasks"]
    units = [u for u in collect_units(study) if u["variant"] in study.variants]
    if not units:  # never overwrite a table with an empty one (e.g. --report_only with other settings)
        raise SystemExit(f"no finished units in {study.dir}: nothing to report ({results_path} left as it is)")
    table = aggregate(units, tasks)
    order = [v for v in list(study.variants) if v in table]
    max_steps = settings["train"]["max_steps"]
    logmel = table.get("logmel", {}).get(0)
    model = settings["model_config"]

    # variants that ran the base recipe in effect (an unknown field, or overrides equal to the base's values)
    base_digest = next((u["effective_config_digest"] for u in units if u["variant"] == BASE), None)
    notes = {}
    for u in units:
        if u["unknown_model_fields"]:
            notes[u["variant"]] = (
                f"{', '.join(u['unknown_model_fields'])} not an AaspConfig field in this "
                f"checkout: ran as the base recipe"
            )
        elif u["kind"] == "pretrain" and u["variant"] != BASE and u["effective_config_digest"] == base_digest:
            notes[u["variant"]] = f"same recipe as {BASE}"

    task_info = {}
    for u in units:
        for t in tasks:
            task_info.setdefault(t, u["tasks"][t])
    lines = [
        "# Quality study: does pre-training beat random init and log-mel on real audio?",
        "",
        f"Study `{settings['study']}`: {settings['model_size']} model (D = {model.get('hidden_size')}, "
        f"{model.get('num_hidden_layers')} layers, {model.get('num_frames')} frames), preset "
        f"`{settings['preset']}`, "
        f"{max_steps} pre-training steps of batch {settings['train'].get('per_device_train_batch_size')} × "
        f"{model.get('mask_num_views', 4)} views, data `{settings['data_dir']}` (fingerprint "
        f"{settings['data_fingerprint']}).",
        "",
        "Linear-probe accuracy (%) on the test split of each task, mean ± std (ddof = 1) over pre-training seeds "
        '(n); a seed\'s average is the mean over tasks. "gain vs own init": the paired difference to the same '
        "variant at step 0 (the same architecture and seed, not pre-trained), mean ± std over seeds. log-mel: "
        'no network, no seed. "same-source validation": the chosen heads\' best accuracy on the validation '
        "split (10 % of train, so the training sources), averaged over tasks; test holds sources never seen in "
        "training, so the gap between the two is what the features lose across a change of synthesiser, "
        "instrument or voice.",
        "",
        "| variant | what changes | n | step | "
        + " | ".join(tasks)
        + " | average | gain vs own init | vs log-mel | same-source validation |",
        "|---|---|---|---|" + "---|" * len(tasks) + "---|---|---|---|",
    ]
    for variant in order:
        steps = table[variant]
        step = max_steps if max_steps in steps else max(steps)
        entry = steps[step]
        about = study.variants[variant].get("about", "")
        if variant in notes:
            about += f" (⚠ {notes[variant]})"
        step_text = str(step) if study.variants[variant].get("kind", "pretrain") == "pretrain" else "–"
        if study.variants[variant].get("kind", "pretrain") == "pretrain" and step != max_steps:
            step_text += " (unfinished)"
        gain = fmt(*entry["gain"], signed=True) if "gain" in entry else "–"
        vs_logmel = (
            fmt(entry["average"][0] - logmel["average"][0], signed=True) if logmel and variant != "logmel" else "–"
        )
        lines.append(
            f"| {variant} | {about} | {entry['n']} | {step_text} | "
            + " | ".join(fmt(*entry["tasks"][t]) for t in tasks)
            + f" | **{fmt(*entry['average'])}** | {gain} | {vs_logmel} | "
            + (fmt(*entry["validation"]) if "validation" in entry else "–")
            + " |"
        )

    curve_steps = sorted(
        {s for v in order for s in table[v] if study.variants[v].get("kind", "pretrain") == "pretrain"}
    )
    if curve_steps:
        lines += [
            "",
            "Average probe accuracy (%) against pre-training step (step 0 = the initialisation):",
            "",
            "| variant | " + " | ".join(str(s) for s in curve_steps) + " |",
            "|---|" + "---|" * len(curve_steps),
        ]
        for variant in order:
            if study.variants[variant].get("kind", "pretrain") != "pretrain":
                continue
            lines.append(
                f"| {variant} | "
                + " | ".join(fmt(*table[variant][s]["average"]) if s in table[variant] else "" for s in curve_steps)
                + " |"
            )
        lines += ["", f"![average probe accuracy against pre-training step]({results_path.with_suffix('.png').name})"]

    probe = settings["probe"]
    lines += [
        "",
        "## Tasks",
        "",
        "| task | classes | train / validation / test clips | clip length (s) |",
        "|---|---|---|---|",
    ]
    for t in tasks:
        info = task_info.get(t)
        if info:
            n = info["num_clips"]
            lines.append(
                f"| {t} | {info['num_classes']} | {n['train']} / {n['validation']} / {n['test']} | "
                f"{info['clip_seconds']:g} |"
            )
    lines += [
        "",
        "## Protocol",
        "",
        "- Features: the paper's [CLS ; time-mean of the patch tokens of each frequency row] "
        "(`aasp_hf.evaluation.pool_features` through `aasp_hf.evaluation.linear_protocol.cached_features`), "
        "standardised with the train split's statistics only. log-mel: mean and std over time per mel bin.",
        f"- Clips: each task's clips are cropped/padded to its clip length (the longest clip unless task.json sets "
        f"it, at most {probe['max_clip_seconds']:g} s): a random crop (seed {probe['feature_seed']}) for "
        f"train/validation, the first segment for test. **No truncation**: the runner sets the loaded feature "
        f"extractor's `max_frames` to None (exports of pretrain.py carried `max_frames` = "
        f"{sorted({str(u.get('saved_max_frames')) for u in units if u['kind'] != 'logmel'})}, the pre-training crop "
        f"where set, which would cut every probe clip to it).",
        f"- Validation: {probe['validation_fraction']:g} of train held out (datasets' `train_test_split`, seed "
        f"{probe['feature_seed']}).",
        f"- Heads: `aasp_hf.evaluation.linear_heads.train_linear_heads`, one linear layer per learning rate "
        f"{probe['learning_rates']} in one pass, Adam, cosine, {probe['max_steps']} steps of batch "
        f"{probe['batch_size']}, validated every {probe['eval_steps']} steps; each lr's test accuracy at its best "
        f"validation step, the lr chosen on validation; averaged over head seeds {probe['seeds']}.",
        f"- Step 0 of a variant is the initialisation its pre-training starts from; `random_init` is step 0 of "
        f"`{BASE}` (the same weights, probed once).",
    ]
    if notes:
        lines += ["", "## Notes", ""] + [f"- {v}: {n}." for v, n in sorted(notes.items())]
    commands = sorted({u["command"] for u in units})
    lines += ["", "## Commands", "", "Units (each finished unit records the command that ran it):", "", "```"]
    lines += commands + ["```", "", "This report:", "", "```", study.command, "```", ""]

    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text("\n".join(lines))
    plot_curves(study, table, order, results_path.with_suffix(".png"))
    report = {
        "study": settings["study"],
        "settings": settings,
        "tasks": tasks,
        "aggregate": {v: {str(s): e for s, e in table[v].items()} for v in order},
        "notes": notes,
        "units": units,
        "commands": commands,
    }
    results_path.with_suffix(".json").write_text(table_json(report))
    return report


def plot_curves(study: Study, table: dict, order: list, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    baseline_styles = iter([("gray", "--"), ("gray", ":"), ("gray", "-."), ("silver", "--"), ("silver", ":")])
    for variant in order:
        kind = study.variants[variant].get("kind", "pretrain")
        steps = sorted(table[variant])
        if kind == "pretrain":
            mean = np.array([table[variant][s]["average"][0] for s in steps]) * 100
            std = np.nan_to_num(np.array([table[variant][s]["average"][1] for s in steps]) * 100)
            (line,) = ax.plot(steps, mean, marker="o", label=variant)
            if np.any(std > 0):
                ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.15)
        else:
            color, style = ("black", "--") if kind == "logmel" else next(baseline_styles, ("gray", "--"))
            ax.axhline(
                table[variant][0]["average"][0] * 100,
                linestyle=style,
                linewidth=1.2,
                color=color,
                label=f"{variant} (no pre-training)",
            )
    ax.set_xlabel("pre-training step")
    ax.set_ylabel(f"average probe accuracy over {len(study.settings['tasks'])} tasks (%)")
    ax.set_title(f"{study.settings['study']}: mean over seeds (band: ± std)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------------------------- main
def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads is None and default_device(args) == "cpu":
        args.threads = 1
    with torch_threads(args.threads):
        return run_study(args)


def default_results_path(args) -> Path:
    """Where the report goes: --results; else results_<study>.md for a named study, so that a side study never
    overwrites the committed results.md; else results_quick.md (--quick) or results.md."""
    if args.results:
        return Path(args.results)
    if args.study:
        return HERE / f"results_{args.study}.md"
    return HERE / ("results_quick.md" if args.quick else "results.md")


def run_study(args) -> dict:
    variants = load_variants(args)
    names = selected_variants(args, variants)
    seeds = args.seeds if args.seeds is not None else (QUICK["seeds"] if args.quick else [0, 1])
    settings = resolve_settings(args)
    study = Study(args, settings, variants)
    results_path = default_results_path(args)
    plan = study.units(names, seeds)
    print(
        f"study {settings['study']} in {study.dir}: {len(plan)} units, tasks {settings['tasks']}, "
        f"probe steps {settings['probe_steps']}",
        flush=True,
    )
    for name in names:
        unknown = sorted(set(variants[name].get("model_config", {})) - aasp_config_fields())
        if unknown:
            print(
                f"WARNING: {name}: {unknown} not AaspConfig fields in this checkout; passed through, no effect",
                flush=True,
            )
    if args.dry_run:
        for unit in plan:
            state = "done" if study.unit_file(*unit).is_file() else "todo"
            print(f"  {state}  {unit[0]} seed {unit[1]} step {unit[2]}")
        return {"units": plan}
    if not args.report_only:
        study.check_study_file()
        start, failures = time.time(), []
        failed_runs = set()
        for number, (variant, seed, step) in enumerate(plan, 1):
            if study.unit_file(variant, seed, step).is_file() or (variant, seed) in failed_runs:
                continue
            if args.stop_after_minutes is not None and time.time() - start > 60 * args.stop_after_minutes:
                print(
                    f"--stop_after_minutes {args.stop_after_minutes:g} reached: stopping before unit {number}; "
                    f"run the same command again to go on",
                    flush=True,
                )
                break
            print(f"[{number}/{len(plan)}] {variant} seed {seed} step {step}", flush=True)
            try:
                record = study.run_unit(variant, seed, step)
            except Exception as error:  # noqa: BLE001 - one failed run must not stop the others; reported at the end
                failures.append(f"{variant} seed {seed} step {step}: {type(error).__name__}: {error}")
                failed_runs.add((variant, seed))
                print(f"  FAILED: {failures[-1]}", flush=True)
                continue
            print(
                f"  average {100 * record['average']:.1f} ("
                + ", ".join(f"{t} {100 * a:.1f}" for t, a in record["accuracy"].items())
                + f") in {record['seconds']:.0f} s",
                flush=True,
            )
    report = write_report(study, results_path)
    print(f"-> {results_path} (+ .json, .png)", flush=True)
    if not args.report_only and failures:
        raise SystemExit("failed units (the others ran; run again to retry):\n  " + "\n  ".join(failures))
    return report


if __name__ == "__main__":
    run_script(main, "run.py")
