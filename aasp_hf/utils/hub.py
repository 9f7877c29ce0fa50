"""Sharing on the Hugging Face Hub: write a complete repo folder, then push it.

Training/tooling side (not shipped as remote code). A written folder holds `model.safetensors`, `config.json` with
`auto_map`, the code files (`configuration_aasp.py`, `modeling_aasp.py`, ... copied by `save_pretrained` because
`import aasp_hf` registers the classes for their Auto classes), `preprocessor_config.json` and a `README.md` model
card generated from the model (`model_card`: its config, real parameter count, the training the caller documents and
the results it measured; `fill_model_card` still fills the ViT-B template `MODEL_CARD.md`), so it loads with
`AutoModel.from_pretrained(repo, trust_remote_code=True)` where `aasp_hf` is not installed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path

import yaml

from .errors import UsageError

logger = logging.getLogger(__name__)

MODEL_CARD_TEMPLATE = Path(__file__).resolve().parents[2] / "MODEL_CARD.md"  # the repository root
# The remote code save_pretrained ships with every checkpoint (encoder, classifier or pre-training model): the
# modeling file (the whole model, as transformers keeps one), the feature extractor, the config they import relatively
# and the pipeline. Folders saved before the model was one file also hold the files it was split into; they load with
# that code of theirs.
CODE_FILES = ("configuration_aasp.py", "modeling_aasp.py", "feature_extraction_aasp.py", "pipeline_aasp.py")
# YAML metadata keys a caller may set through `model_card_fields`.
YAML_FIELDS = ("library_name", "pipeline_tag", "license", "tags", "datasets", "base_model", "language", "metrics")
# all_results.json entries that are bookkeeping, not evaluation results.
_NOT_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "total_flos", "num_samples")


def training_checkpoint_message(path) -> str | None:
    """What to load instead when `path` is a training checkpoint folder (`checkpoint-<step>/` of examples/
    pretrain.py or finetune.py: the accelerate state for --resume, no config.json), else None.

    transformers cannot load such a folder: `AutoModel.from_pretrained` fails in `AutoConfig` before any AaSP class is
    involved ("Unrecognized model ... Should have a `model_type` key in its config.json"), so the scripts check first
    (`check_model_folder`). A pre-training checkpoint (weights under `aasp.` and `teacher.`) points to the encoder the
    run exports and to conversion/convert_pretraining_checkpoint.py; a fine-tuning one to the classifier saved in the
    run's folder."""
    folder = Path(path)
    if not folder.is_dir() or (folder / "config.json").is_file():
        return None
    if not ((folder / "trainer_state.json").is_file() or (folder / "optimizer.bin").is_file()):
        return None
    run = folder.parent
    keys = []
    if (folder / "model.safetensors").is_file():
        from safetensors import safe_open

        with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
            keys = list(weights.keys())
    if any(key.startswith("teacher.") for key in keys):  # AaspForPreTraining: student `aasp.*`, EMA `teacher.*`
        exported = run / "encoder"
        if (folder / "encoder" / "config.json").is_file():  # --export_with_checkpoints: this step's own export
            where = f"load this step's exported encoder, {folder / 'encoder'}"
        elif (exported / "config.json").is_file():
            where = f"load the encoder the run exported, {exported}"
        else:
            where = f"load the encoder the run exports when it finishes, {exported}"
        return (
            f"{folder} is a pre-training checkpoint (weights, optimiser and data state for --resume), not a model "
            f"folder: {where}, or make one from this step with `python "
            f"conversion/convert_pretraining_checkpoint.py {folder} OUTPUT_DIR` (add --which teacher for the EMA "
            f"teacher)"
        )
    return (
        f"{folder} is a training checkpoint (weights, optimiser and data state for --resume), not a model folder: "
        f"load the model the run saved, {run} (or {run / 'best_model'})"
    )


def check_model_folder(path) -> None:
    """A `UsageError` in one line (what `path` is, what to pass instead) when `path` exists but cannot load as a
    model: a training checkpoint (`training_checkpoint_message`); a folder without `config.json` (a pre-training
    run's own folder names its `encoder/`, any other folder the model folders it holds); a file; a truncated or
    corrupt weights file. A path that does not exist passes (it may be a Hub id; `check_model_path` decides), so the
    scripts call this while parsing their arguments. transformers alone gives a traceback ("Unrecognized model ...
    Should have a `model_type` key")."""
    folder = Path(path).expanduser()
    message = training_checkpoint_message(folder)
    if message is None and folder.is_dir() and not (folder / "config.json").is_file():
        message = _folder_without_config(folder)
    elif message is None and folder.is_file():
        message = f"{path} is a file, not a model folder: pass the folder that holds it, {WHAT_TO_PASS}"
    elif message is None and folder.is_dir():
        message = unreadable_weights_message(folder)
    if message is not None:
        raise UsageError(message)


def unreadable_weights_message(folder: Path) -> str | None:
    """Why a weights file of `folder` cannot be read, in one line; None when every `.safetensors` file opens. Reads only
    each file's header, which safetensors checks against the file's length: a truncated copy or download fails here
    instead of inside `from_pretrained` ("incomplete metadata", naming neither the file nor the cause)."""
    from safetensors import SafetensorError, safe_open

    for weights in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(weights, framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            return (
                f"Could not read the weights {weights} ({error}): the file is truncated or corrupt, e.g. an "
                f"interrupted copy or download. Copy, download or save it again."
            )
    return None


def check_model_path(path) -> None:
    """`check_model_folder`, and a `UsageError` in one line for a path that is not there before anything loads:

    - a path that does not exist and is not a Hub model id (`runs/pt/encodr`, or `runs/encodr` where `runs` is a
      local folder): the closest names in the nearest folder that exists (transformers: "Repo id must be in the
      form ...", a traceback);
    - a Hub id that is neither a local folder nor in the Hub cache, when the Hub is out of reach (`HF_HUB_OFFLINE`
      set, or its host name does not resolve): refused at once, instead of after the download's retries (about a
      minute); with the Hub reachable, an id it does not give is refused in one line too."""
    check_model_folder(path)
    if not Path(path).expanduser().exists():
        message = _missing_model_message(str(path))
        if message is not None:
            raise UsageError(message)


WHAT_TO_PASS = "a folder that save_pretrained wrote, with its config.json, such as a pre-training run's encoder/"


def _missing_model_message(path: str) -> str | None:
    """Why `path`, which is not on disk, is not a reachable Hub model either, in one line; None when it may load."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    folder = Path(path).expanduser()
    try:
        validate_repo_id(path)
        looks_local = folder.parent != Path(".") and folder.parent.is_dir()  # `runs/encodr`: `runs` is a local folder
    except HFValidationError:
        looks_local = True
    if looks_local:
        return f"{path} does not exist: {_nearest_names(folder)}pass {WHAT_TO_PASS}"
    return _unreachable_hub_model(path)


def _folder_without_config(folder: Path) -> str:
    if (folder / "encoder" / "config.json").is_file():  # examples/pretrain.py's output folder
        return (
            f"{folder} is a pre-training run's folder, not a model folder: pass the encoder it exported, "
            f"{folder / 'encoder'}"
        )
    models = sorted(p.name for p in folder.iterdir() if (p / "config.json").is_file())
    if models:
        return (
            f"{folder} holds no config.json, so it is not a model folder; the model folders in it: "
            f"{', '.join(models)}: pass one of them, e.g. {folder / models[0]}"
        )
    checkpoints = sorted(
        (p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
    )
    if checkpoints and (message := training_checkpoint_message(checkpoints[-1])) is not None:
        return f"{folder} is a training run's folder without a saved model yet; its newest checkpoint: {message}"
    return f"{folder} holds no config.json, so it is not a model folder: pass {WHAT_TO_PASS}"


def _nearest_names(missing: Path) -> str:
    """'did you mean runs/pt/encoder? Otherwise, ' for a missing `runs/pt/encodr` (the closest names in the deepest
    folder of the path that exists), or what that folder lacks."""
    import difflib

    parent = missing.parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return ""
    names = sorted(p.name for p in parent.iterdir() if p.is_dir() and not p.name.startswith("."))
    wanted = missing.relative_to(parent).parts[0] if missing.is_relative_to(parent) else missing.name
    close = difflib.get_close_matches(wanted, names, n=3, cutoff=0.6)
    if not close:
        return f"{parent} holds no folder named like {wanted!r}; "
    return f"did you mean {' or '.join(str(parent / name) for name in close)}? Otherwise, "


def _unreachable_hub_model(repo_id: str) -> str | None:
    """One line when `repo_id` (not a local path) is not in the Hub cache and the Hub cannot be asked, else None."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return None  # downloaded before: transformers loads it from the cache
    given = f"{repo_id} is not a local folder, nor a model in the Hub cache"
    if constants.HF_HUB_OFFLINE:
        return f"{given}, and HF_HUB_OFFLINE is set: pass {WHAT_TO_PASS}, or unset HF_HUB_OFFLINE to download it"
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None  # the proxy resolves the host: let the download say what it finds
    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.getaddrinfo(host, 443)
    except OSError as error:  # no network: the download would retry for about a minute before failing
        return (
            f"{given}, and the Hub ({host}) cannot be reached from here ({error.strerror or error}): pass "
            f"{WHAT_TO_PASS}, or download it where the Hub is reachable"
        )
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(repo_id, "config.json")
    except Exception as error:  # noqa: BLE001 - the Hub's answer, in one line: unknown, gated, private ...
        reason = " ".join(str(error).split())[:200]
        return f"{given}, and the Hub did not give it ({type(error).__name__}: {reason}): pass {WHAT_TO_PASS}"
    return None


_FALLBACK_TEMPLATE = """---
library_name: transformers
pipeline_tag: audio-classification
tags:
  - audio
  - aasp
  - custom_code
---

# AaSP

## Uses

```python
from transformers import AutoModel, AutoFeatureExtractor

model = AutoModel.from_pretrained("REPO_ID", trust_remote_code=True)
features = AutoFeatureExtractor.from_pretrained("REPO_ID", trust_remote_code=True)
```

## Training

FILL: training.

## Evaluation

FILL: evaluation.
"""


# ----------------------------------------------------------------------------------------------- model card
def _split_front_matter(text: str) -> tuple[dict, str]:
    match = re.match(r"^---\n(.*?)\n---\n", text, flags=re.S)
    if not match:
        return {}, text
    return yaml.safe_load(match.group(1)) or {}, text[match.end() :]


def _format_value(value) -> str:
    """A number, a {"mean", "std"} dict, or a list of per-seed values -> text ("0.4712", "0.4712 ± 0.0031 (n=3)")."""
    if isinstance(value, dict) and "mean" in value:
        std = value.get("std")
        return f"{value['mean']:.4f}" + ("" if std is None else f" ± {std:.4f}")
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
        mean = sum(value) / len(value)
        std = math.sqrt(sum((v - mean) ** 2 for v in value) / max(len(value) - 1, 1))
        return f"{mean:.4f} ± {std:.4f} (n={len(value)})"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _is_result(value) -> bool:
    """A number, a {"mean", "std"} dict or a list of numbers (per-seed values); not a raw dict or a history."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    if isinstance(value, dict):
        return isinstance(value.get("mean"), (int, float))
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    )


def evaluation_table(all_results: dict, protocol: str | None = None) -> str:
    """A Markdown table of the evaluation entries of a transformers-style `all_results.json`.

    Keys `eval_<metric>` / `test_<metric>` / `predict_<metric>` become rows (split, metric, value); timing and
    bookkeeping entries are left out. Values may be numbers, {"mean", "std"} dicts or lists of per-seed values."""
    rows = []
    for key, value in all_results.items():
        split, _, metric = key.partition("_")
        if split not in ("eval", "test", "predict") or not metric or metric.endswith(_NOT_METRICS):
            continue
        if not _is_result(value):  # histories, argument dicts, ...: not a result to print
            continue
        rows.append((split, metric, _format_value(value)))
    if not rows:
        return "No evaluation results were given."
    header = "| split | metric | value |" + (" protocol |" if protocol else "")
    rule = "|---|---|---|" + ("---|" if protocol else "")
    lines = [header, rule]
    for split, metric, value in rows:
        lines.append(f"| {split} | {metric} | {value} |" + (f" {protocol} |" if protocol else ""))
    return "\n".join(lines)


def fill_model_card(fields: dict | None = None, all_results: dict | None = None, template: str | None = None) -> str:
    """The model card text: the template's YAML updated from `fields`, its placeholders filled.

    fields: YAML keys (`license`, `tags`, `datasets`, `base_model`, ...), `extra_tags`, and `title`, `repo_id`,
    `description` (Markdown replacing the Model section), `training` (Markdown for the Training section),
    `evaluation_protocol`, `evaluation` (Markdown replacing the table).
    all_results: a transformers-style `all_results.json` dict; its eval/test entries fill the Evaluation table.
    """
    fields = dict(fields or {})
    if template is None:
        if MODEL_CARD_TEMPLATE.exists():
            template = MODEL_CARD_TEMPLATE.read_text()
        else:
            logger.warning("%s not found (installed without the repository): using a minimal card", MODEL_CARD_TEMPLATE)
            template = _FALLBACK_TEMPLATE
    metadata, body = _split_front_matter(template)
    for key in YAML_FIELDS:
        if fields.get(key) is not None:
            metadata[key] = fields[key]
    extra_tags = fields.get("extra_tags") or []
    metadata["tags"] = list(dict.fromkeys(list(metadata.get("tags") or []) + list(extra_tags)))

    # Title; the template's own note ("This is the template ...") goes.
    if fields.get("title"):
        body = re.sub(r"^# .*$", f"# {fields['title']}", body, count=1, flags=re.M)
    body = re.sub(r"\n> This is the template.*?(?=\n\n)", "", body, count=1, flags=re.S)
    if fields.get("repo_id"):
        body = body.replace("REPO_ID_FINETUNED", fields["repo_id"]).replace("REPO_ID", fields["repo_id"])

    if fields.get("description"):  # replaces the body of the "## Model" section (the template describes AaPE)
        body = re.sub(
            r"(^## Model\n\n).*?(?=\n## )",
            lambda m: m.group(1) + fields["description"].strip() + "\n",
            body,
            count=1,
            flags=re.S | re.M,
        )
    training = fields.get("training") or "Not documented for this checkpoint."
    body = re.sub(r"^FILL: (pre-)?training.*$", lambda _: training, body, count=1, flags=re.M)
    if fields.get("evaluation"):
        evaluation = fields["evaluation"]
    elif all_results:
        evaluation = evaluation_table(all_results, fields.get("evaluation_protocol"))
    else:
        evaluation = "No evaluation results were given for this checkpoint."
    body = re.sub(r"^FILL(:| from `all_results.json`:).*$", lambda _: evaluation, body, count=1, flags=re.M)
    body = re.sub(r"\n{3,}", "\n\n", body)
    front = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True)
    return f"---\n{front}---\n{body}"


def _architecture(model, feature_extractor=None) -> str:
    """One paragraph describing this model from its config, its real parameter count and its front end."""
    c = model.config
    count = sum(p.numel() for p in model.parameters())
    if c.patch_embedding == "aape":
        stem = (
            f"AaPE patch embedding ({c.frequency_patch_size}×{c.time_patch_size} patches fused with the "
            f"features of a{'n adaptive' if c.sblu_adaptive else ' static'} Structured Bilateral Laplace Unit: "
            f"{c.sblu_hidden_size} channels, {c.sblu_kernel_size} taps)"
        )
    else:
        stem = f"standard {c.frequency_patch_size}×{c.time_patch_size} patch embedding (SPE)"
    kind = {
        "AaspModel": "encoder",
        "AaspForAudioClassification": "audio classifier",
        "AaspForPreTraining": "pre-training model (student, EMA teacher, predictor)",
    }.get(type(model).__name__, type(model).__name__)
    text = (
        f"`{type(model).__name__}`, an AaSP {kind}: {c.num_hidden_layers} transformer blocks, hidden size "
        f"{c.hidden_size}, {c.num_attention_heads} attention heads, MLP {c.intermediate_size}; {stem}. "
        f"**{count:,} parameters ({count / 1e6:.3g} M).** Input: 16 kHz mono audio → {c.num_mel_bins}-bin "
        f"log-mel"
    )
    if feature_extractor is not None:
        text += f" (`AaspFeatureExtractor`, mode `{getattr(feature_extractor, 'mode', '?')}`)"
    text += (
        f"; the position table covers {c.num_frames} frames ({c.num_frames / 100:g} s), longer inputs get it "
        f"interpolated."
    )
    if type(model).__name__.endswith("ForAudioClassification"):
        names = [str(v) for _, v in sorted((c.id2label or {}).items())]
        shown = ", ".join(names[:12]) + (f", … ({len(names)} in all)" if len(names) > 12 else "")
        multi = c.problem_type == "multi_label_classification"
        text += f" Head: {c.num_labels} classes ({'multi' if multi else 'single'}-label): {shown}."
    return text


def _markdown(value) -> str:
    """Markdown of a `training` field: text as is, a dict as a bullet list ("- key: value")."""
    if isinstance(value, dict):
        return "\n".join(f"- {key}: {_format_value(v) if _is_result(v) else v}" for key, v in value.items())
    return str(value)


def model_card(model, feature_extractor=None, fields: dict | None = None, all_results: dict | None = None) -> str:
    """A model card generated from this model: its config, real parameter count and front end, the data and
    training the caller documents and the results actually measured (nothing is copied from a template).

    fields: YAML keys (`license`, `tags`, `datasets`, `base_model`, ...), `extra_tags`, and `title`, `repo_id`,
    `description` (Markdown replacing the generated Model paragraph), `training` (Markdown, or a dict shown as a
    list: data, steps, batch, ...), `evaluation_protocol`, `evaluation` (Markdown replacing the results table).
    all_results: a transformers-style dict whose eval_/test_ entries (numbers, mean ± std) fill the results table.
    """
    fields = dict(fields or {})
    classifier = type(model).__name__.endswith("ForAudioClassification")
    detector = type(model).__name__.endswith("ForAudioFrameClassification")  # sound events: no Hub pipeline tag
    metadata = {"library_name": "transformers"}
    if not detector:
        metadata["pipeline_tag"] = "audio-classification" if classifier else "feature-extraction"
    metadata["license"] = "apache-2.0"
    for key in YAML_FIELDS:
        if fields.get(key) is not None:
            metadata[key] = fields[key]
    tags = ["audio", "aasp", "custom_code"] + (["audio-classification"] if classifier else [])
    tags += ["sound-event-detection"] if detector else []
    metadata["tags"] = list(dict.fromkeys(list(metadata.get("tags") or tags) + list(fields.get("extra_tags") or [])))

    c = model.config
    title = fields.get("title") or (
        f"AaSP {'audio classifier' if classifier else 'sound event detector' if detector else 'encoder'} "
        f"({c.num_hidden_layers} layers, hidden {c.hidden_size})"
    )
    where = json.dumps(str(fields.get("repo_id") or fields.get("path") or "."))  # quoted for the snippet
    uses = [
        "from transformers import AutoFeatureExtractor, AutoModel, AutoModelForAudioClassification, pipeline",
        "# where aasp_hf is installed, `import aasp_hf` registers the classes instead: no trust_remote_code needed",
        "",
        f"features = AutoFeatureExtractor.from_pretrained({where}, trust_remote_code=True)",
        'inputs = features([waveform], sampling_rate=16000, return_tensors="pt")  # 1-D float32 at 16 kHz',
        f"encoder = AutoModel.from_pretrained({where}, trust_remote_code=True)",
        f"embedding = encoder(**inputs).last_hidden_state[:, 0]  # CLS: (B, {c.hidden_size})",
    ]
    if classifier:
        uses += [
            f"model = AutoModelForAudioClassification.from_pretrained({where}, trust_remote_code=True)",
            "probabilities = model(**inputs).logits.softmax(-1)",
            f'classifier = pipeline("audio-classification", model={where}, trust_remote_code=True)',
            'classifier("clip.wav", top_k=3)',
        ]
    elif detector:
        uses += [
            "from transformers import AutoModelForAudioFrameClassification",
            f"model = AutoModelForAudioFrameClassification.from_pretrained({where}, trust_remote_code=True)",
            f"frame_scores = model(**inputs).logits.sigmoid()  # (B, frames, labels), one frame per "
            f"{c.time_patch_size * c.sblu_step:g} s",
            f'detector = pipeline("sound-event-detection", model={where}, trust_remote_code=True)',
            'detector("recording.wav")  # [{"onset", "offset", "label", "score"}, ...] with the saved thresholds',
        ]
    else:
        uses += [
            "# fine-tuning (a new head; transformers' Trainer or run_audio_classification.py work as well):",
            f"model = AutoModelForAudioClassification.from_pretrained({where}, num_labels=10, trust_remote_code=True)",
        ]
    uses_text = "```python\n" + "\n".join(uses) + "\n```"

    training = fields.get("training")
    training_text = _markdown(training) if training else "Not documented for this checkpoint."
    if fields.get("evaluation"):
        evaluation = fields["evaluation"]
    else:
        table = evaluation_table(all_results, fields.get("evaluation_protocol")) if all_results else ""
        evaluation = table if table.startswith("|") else "No evaluation results were measured for this checkpoint."
    limitations = [
        "Relies on log-mel input at 16 kHz (other rates must be resampled); the SBLU emphasises amplitude-modulation "
        "cues.",
        "AaSP's gains are smaller on very short utterances and on pitch-dominated tasks (the paper's finding).",
    ]
    if fields.get("datasets"):
        limitations.append(
            f"Trained on {', '.join(map(str, fields['datasets']))}: its label and recording biases carry over."
        )
    else:
        limitations.append("Check the Training section for the data it saw; it carries that data's biases.")
    body = "\n\n".join(
        [
            f"# {title}",
            "## Model",
            (fields.get("description") or _architecture(model, feature_extractor)).strip(),
            "## Uses",
            uses_text,
            "## Limitations",
            "\n".join(f"- {item}" for item in limitations),
            "## Training",
            training_text.strip(),
            "## Evaluation",
            evaluation.strip(),
            "## Citation",
            "AaSP: Aliasing-aware Self-Supervised Pre-Training for Audio Spectrogram Transformers.",
        ]
    )
    front = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True)
    return f"---\n{front}---\n\n{body}\n"


def write_model_card(
    folder, model, feature_extractor=None, fields: dict | None = None, all_results: dict | None = None
) -> Path:
    """Writes `model_card(...)` as `folder/README.md` (the Hub's model card) and returns its path."""
    path = Path(folder) / "README.md"
    path.write_text(model_card(model, feature_extractor, fields, all_results))
    return path


# ----------------------------------------------------------------------------------------------- folder and push
def write_hub_folder(
    model,
    feature_extractor,
    folder: str | Path,
    model_card_fields: dict | None = None,
    all_results: str | Path | dict | None = None,
) -> Path:
    """Writes a complete Hub repo folder and returns its path (see the module docstring for its contents).

    all_results: a transformers-style `all_results.json` (path or dict) for the model card's evaluation table.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if model._auto_class is None:
        raise ValueError(
            f"{type(model).__name__} is not registered for an Auto class, so save_pretrained would not ship its code: "
            "`import aasp_hf` registers the aasp_hf classes."
        )
    model.save_pretrained(folder, safe_serialization=True)
    feature_extractor.save_pretrained(folder)

    config = json.loads((folder / "config.json").read_text())
    if "AutoModel" not in (config.get("auto_map") or {}):
        raise RuntimeError(f"{folder / 'config.json'} has no auto_map['AutoModel']: the code would not load remotely")
    expected = CODE_FILES + ("model.safetensors", "preprocessor_config.json")
    missing = [name for name in expected if not (folder / name).exists()]
    if missing:
        raise RuntimeError(f"{folder} is missing {missing} after save_pretrained")

    if isinstance(all_results, (str, Path)):
        all_results = json.loads(Path(all_results).read_text())
    write_model_card(folder, model, feature_extractor, model_card_fields, all_results)
    return folder


def push_folder(
    folder: str | Path,
    repo_id: str,
    token: str | None = None,
    private: bool = False,
    commit_message: str = "Upload AaSP model",
):
    """Creates `repo_id` (model repo; no error if it exists) and uploads `folder` to it. Returns the commit info."""
    from huggingface_hub import HfApi

    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"{folder} has no config.json: write it with write_hub_folder first")
    api = HfApi(token=token)
    api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
    return api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message)


__all__ = ["evaluation_table", "fill_model_card", "model_card", "push_folder", "write_hub_folder", "write_model_card"]
