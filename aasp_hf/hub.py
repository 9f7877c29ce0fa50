"""Sharing on the Hugging Face Hub: write a complete repo folder, then push it.

Training/tooling side (not shipped as remote code). A written folder holds `model.safetensors`, `config.json` with
`auto_map`, the code files (`configuration_aasp.py`, `modeling_aasp.py`, ... copied by `save_pretrained` because
`import aasp_hf` registers the classes for their Auto classes), `preprocessor_config.json` and a `README.md` model
card filled from the template `MODEL_CARD.md` at the repository root, so it loads with
`AutoModel.from_pretrained(repo, trust_remote_code=True)` where `aasp_hf` is not installed.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import yaml

logger = logging.getLogger(__name__)

MODEL_CARD_TEMPLATE = Path(__file__).resolve().parents[1] / "MODEL_CARD.md"
CODE_FILES = ("configuration_aasp.py", "modeling_aasp.py", "feature_extraction_aasp.py")
# YAML metadata keys a caller may set through `model_card_fields`.
YAML_FIELDS = ("library_name", "pipeline_tag", "license", "tags", "datasets", "base_model", "language", "metrics")
# all_results.json entries that are bookkeeping, not evaluation results.
_NOT_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "total_flos", "num_samples")

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


def evaluation_table(all_results: dict, protocol: str | None = None) -> str:
    """A Markdown table of the evaluation entries of a transformers-style `all_results.json`.

    Keys `eval_<metric>` / `test_<metric>` / `predict_<metric>` become rows (split, metric, value); timing and
    bookkeeping entries are left out. Values may be numbers, {"mean", "std"} dicts or lists of per-seed values."""
    rows = []
    for key, value in all_results.items():
        split, _, metric = key.partition("_")
        if split not in ("eval", "test", "predict") or not metric or metric.endswith(_NOT_METRICS):
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
        body = re.sub(r"(^## Model\n\n).*?(?=\n## )", lambda m: m.group(1) + fields["description"].strip() + "\n",
                      body, count=1, flags=re.S | re.M)
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
    fields = dict(model_card_fields or {})
    if getattr(model.config, "num_labels", None) and type(model).__name__.endswith("ForAudioClassification"):
        fields.setdefault("pipeline_tag", "audio-classification")
    else:
        fields.setdefault("pipeline_tag", "feature-extraction")
    (folder / "README.md").write_text(fill_model_card(fields, all_results))
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
    return api.upload_folder(
        folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=commit_message
    )


__all__ = ["evaluation_table", "fill_model_card", "push_folder", "write_hub_folder"]
