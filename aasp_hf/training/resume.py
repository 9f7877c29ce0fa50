"""What defines a run, and what a resumed run may change: the run arguments each checkpoint stores, their
comparison with the command that resumes it, and what an allowed change does from the resume step on
(docs/pretraining.md#resuming).

`PRETRAINING_RUN_ARGUMENTS` (`examples/pretrain.py`) and `FINETUNING_RUN_ARGUMENTS` (`examples/finetune.py`) map each
run-defining argument to what a change of it touches: a checkpoint stores their values (trainer_state.json,
"run_arguments") and `compare_run_arguments` refuses other values unless `--resume_allow_changes` names them; a
"fixed" one no flag allows, since the checkpoint's state would not fit the run. `describe_resume_changes` says, one
line per part of the run, what the allowed changes do.
"""

import json
from pathlib import Path

from ..utils.errors import UsageError, check_keys
from ..utils.schedules import learning_rate, teacher_momentum
from .checkpointing import (
    RunState,
    check_random_states,
    latest_checkpoint,
    load_process_state,
    load_trainer_state,
    read_results,
    thread_count_note,
    truncate_log,
)
from .run_log import last_training_logs

# What defines a pre-training run: every checkpoint stores these arguments (trainer_state.json, "run_arguments",
# with the resolved model config as "model_config") and --resume refuses other values unless --resume_allow_changes
# names them. The value says what a change touches from the resume step on (`describe_resume_changes`). The number
# of processes is checked apart (`check_process_count` below): a run may resume on another number
# when the clips of a global micro-batch (per-device batch × processes) stay the same.
PRETRAINING_RUN_ARGUMENTS = {
    # the learning rate, a pure function of the step: linear warm-up, then cosine from the peak to the floor at
    # max_steps (max_steps also ends the teacher-momentum cosine)
    "max_steps": "schedules",
    "warmup_steps": "lr",
    "learning_rate": "lr",
    "min_learning_rate": "lr",
    # the EMA teacher's momentum, a pure function of the step: cosine from base to final over max_steps
    "teacher_momentum_base": "momentum",
    "teacher_momentum_final": "momentum",
    # the data order: epoch e is a permutation seeded by seed + e, cut into global micro-batches of the per-device
    # batch × processes; a step takes gradient_accumulation_steps of them (so the global batch is their product)
    "seed": "data",
    "per_device_train_batch_size": "data",
    "gradient_accumulation_steps": "data",
    # the clips: where they come from, and what the collator makes of each one (crop, the student's equaliser)
    "dataset": "data",
    "data_root": "data",
    "train_dir": "data",
    "train_manifest": "data",
    "dataset_name": "data",
    "dataset_config": "data",
    "dataset_split": "data",
    "audio_column": "data",
    "synthetic_clips": "data",
    "synthetic_seconds": "data",
    "log_mel_cache": "data",
    "crop_seconds": "data",
    "student_eq_strength": "data",
    "shuffle_buffer_size": "data",
    # the update: AdamW's hyper-parameters (the restored optimiser state keeps its moments) and the clipping norm
    "weight_decay": "optimiser",
    "adam_beta1": "optimiser",
    "adam_beta2": "optimiser",
    "adam_epsilon": "optimiser",
    "max_grad_norm": "optimiser",
    # the arithmetic: the autocast dtype, resolved (what `accelerate launch` gave when the flag is unset)
    "mixed_precision": "precision",
    # what the checkpoint's state must fit, so no flag allows a change: which parameters the optimiser holds and in
    # which groups (a scale of 0 freezes the stem, another scale gives it groups of its own); the kind of data
    # position saved (a stream's per-process position, or the step of a map-style dataset)
    "patch_embedding_lr_scale": "fixed",
    "streaming": "fixed",
}


# What defines a fine-tuning run: every checkpoint stores these arguments (trainer_state.json, "run_arguments") and
# --resume refuses other values unless --resume_allow_changes names them. The value says what a change touches
# from the resume step on. The number of processes is checked apart (the data are sharded by it).
FINETUNING_RUN_ARGUMENTS = {
    # the learning rate, a pure function of the step (warm-up, then cosine to the floor at max_steps), times each
    # group's layer-decay scale
    "max_steps": "lr",
    "warmup_steps": "lr",
    "learning_rate": "lr",
    "min_learning_rate": "lr",
    "layer_decay": "lr",
    # the data order (epoch permutations seeded by seed, global micro-batches of batch × processes, accumulation), the
    # splits and the clips (dataset, fold, held-out fractions, clip length) and their augmentation
    "seed": "data",
    "per_device_train_batch_size": "data",
    "gradient_accumulation_steps": "data",
    "dataset": "data",
    "data_root": "data",
    "dataset_kwargs": "data",
    "synthetic_per_class": "data",
    "synthetic_multi_label": "data",
    "task": "data",
    "clip_seconds": "data",
    "clip_padding": "data",
    "test_fold": "data",
    "select_on": "data",
    "kfold_validation": "data",
    "validation_fraction": "data",
    "test_fraction": "data",
    "group_by": "data",
    "class_balanced_sampling": "data",
    "samples_per_epoch": "data",
    "mixup_alpha": "data",
    "spec_augment": "data",
    "spec_augment_fraction": "data",
    "freq_mask_fraction": "data",
    "speed_perturbation": "data",
    "vtlp": "data",
    "random_eq_db": "data",
    "per_clip_normalization": "data",
    # the update: AdamW's hyper-parameters (the restored state keeps its moments) and the clipping norm
    "weight_decay": "optimiser",
    "adam_beta1": "optimiser",
    "adam_beta2": "optimiser",
    "adam_epsilon": "optimiser",
    "max_grad_norm": "optimiser",
    # the model and the arithmetic
    "model_name_or_path": "model",
    "drop_path_rate": "model",
    "classifier_pooling": "model",
    "mixed_precision": "precision",
    # what the checkpoint's state must fit, so no flag allows a change: a frozen stem leaves the optimiser without
    # its parameters; the weight EMA is saved only when it is on
    "freeze_feature_encoder": "fixed",
    "ema_decay": "fixed",
}


# ----------------------------------------------------------------------------------------------- the comparison
def _flatten(arguments: dict, prefix: str = "") -> dict:
    """{"model_config": {"hidden_size": 64}} -> {"model_config.hidden_size": 64}; values through a JSON round trip,
    so that a tuple and the list it is stored as compare equal."""
    flat = {}
    for key, value in arguments.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.loads(json.dumps(value))
    return flat


def changed_arguments(stored: dict, current: dict) -> list[tuple[str, object, object]]:
    """(name, stored value, current value) for each argument both dicts hold with different values (a nested dict
    such as model_config key by key, as "model_config.hidden_size"). An argument the checkpoint did not store (it
    was written by an older version) is not compared."""
    stored, current = _flatten(stored), _flatten(current)
    return [(name, stored[name], current[name]) for name in current if name in stored and stored[name] != current[name]]


def _show(value) -> str:
    return repr(value) if isinstance(value, str) else json.dumps(value)


def check_resume_arguments(checkpoint, stored: dict | None, current: dict, allowed, fixed=()) -> list:
    """The changes of run-defining arguments between `checkpoint` (its stored "run_arguments") and this command, when
    each is allowed; else a UsageError that names every refused change in one line (old → new).

    `allowed`: the names `--resume_allow_changes` gave (an argument, or "model_config" for all of its keys). `fixed`:
    names no flag can allow, because the checkpoint's files cannot be loaded into the changed run (e.g. the number of
    processes); a change of those is refused with the reason. Returns [] for a checkpoint without stored arguments.
    """
    if stored is None:
        return []
    changes = changed_arguments(stored, current)
    allowed = set(allowed or ())

    def listed(names):
        return ", ".join(f"{name} {_show(old)} → {_show(new)}" for name, old, new in names)

    cannot = [c for c in changes if c[0] in fixed or c[0].split(".")[0] in fixed]
    if cannot:
        raise UsageError(
            f"--resume: {checkpoint} was written with {listed(cannot)}, which a resumed run cannot "
            "change (the checkpoint's state does not fit the new run): resume with the checkpoint's "
            "values, or start a new run in another --output_dir."
        )
    refused = [c for c in changes if c[0] not in allowed and c[0].split(".")[0] not in allowed]
    if refused:
        names = " ".join(dict.fromkeys(name for name, _, _ in refused))
        raise UsageError(
            f"--resume: {checkpoint} was written with other arguments: {listed(refused)}. Resume with "
            f"the checkpoint's values, or pass --resume_allow_changes {names} to continue with the new "
            "ones (docs/pretraining.md#resuming says what each change does)."
        )
    return changes


def allowed_resume_changes(names: list[str], resume: bool, valid) -> list[str]:
    """--resume_allow_changes as a list of names (`a,b` split at its commas); a `UsageError` of one line without
    --resume or for a name not in `valid` (what the script's checkpoints store)."""
    if not resume:
        raise UsageError("--resume_allow_changes goes with --resume (it names what a resumed run may change)")
    names = [name for item in names for name in item.split(",") if name]
    check_keys(names, valid, "--resume_allow_changes", "docs/pretraining.md#resuming")
    return names


def compare_run_arguments(
    checkpoint,
    stored: dict | None,
    current: dict,
    allowed,
    run_arguments: dict,
    mixed_precision: str,
    checkpoint_step: int,
    max_steps: int,
    warn=None,
) -> list:
    """The allowed changes between `checkpoint`'s stored run arguments and this command's `current` ones (a UsageError
    of one line for a refused one, `check_resume_arguments`); the "fixed" arguments of `run_arguments`
    refused always, and the precision too where either side is fp16 (its gradient scaler's state only an fp16
    checkpoint holds). `warn` (a print function), when given, says so for a checkpoint without stored arguments. A
    `max_steps` below the checkpoint's step is refused: a resumed run cannot go back."""
    fixed = {name for name, kind in run_arguments.items() if kind == "fixed"}
    if "fp16" in ((stored or {}).get("mixed_precision"), mixed_precision):
        fixed.add("mixed_precision")  # fp16 has a gradient scaler whose state only an fp16 checkpoint holds
    changes = check_resume_arguments(checkpoint, stored, current, allowed, fixed)
    if stored is None and warn is not None:
        warn(
            f"warning: {checkpoint} predates stored run arguments; the command's arguments are taken as the run's "
            "without comparison"
        )
    if checkpoint_step > max_steps:
        raise UsageError(
            f"--max_steps {max_steps} is below the step of {checkpoint} ({checkpoint_step}): a resumed "
            f"run cannot go back; pass --max_steps {checkpoint_step} or more"
        )
    return changes


def describe_resume_changes(
    changes, stored: dict, current: dict, step: int, finetuning: bool = False, streaming: bool = False
) -> str:
    """What the allowed changes do from the resume step on, one line per part of the run (schedules, data,
    optimiser, precision, model); `finetuning`: of a fine-tuning run (`FINETUNING_RUN_ARGUMENTS`, a layer-decay lr),
    else of a pre-training run (`PRETRAINING_RUN_ARGUMENTS`, with the teacher momentum; `streaming`: its data is a
    stream). The schedules stay pure functions of the step, now with the new arguments: a run planned with them from
    the start would have the same values from here on, so a finished run extended with a larger max_steps continues
    on the cosine of the longer run (its lr rises again to that curve)."""
    run_arguments = FINETUNING_RUN_ARGUMENTS if finetuning else PRETRAINING_RUN_ARGUMENTS
    kinds = {run_arguments.get(name, "model") for name, _, _ in changes}
    lines = ["resuming with " + ", ".join(f"{name} {old!r} → {new!r}" for name, old, new in changes)]
    if kinds & {"schedules", "lr"}:

        def lr(a):
            return learning_rate(step, a["max_steps"], a["warmup_steps"], a["learning_rate"], a["min_learning_rate"])

        if finetuning:
            lines.append(
                f"learning rate at step {step}: {lr(stored):.3g} → {lr(current):.3g} (× each layer's decay "
                f"scale {current['layer_decay']:g}^depth); from here on warm-up {current['warmup_steps']} "
                f"then cosine to {current['min_learning_rate']:g} at step {current['max_steps']}, as if the "
                "run had been planned with the new arguments"
            )
        else:
            lines.append(
                f"learning rate at step {step}: {lr(stored):.3g} → {lr(current):.3g}; from here on warm-up "
                f"{current['warmup_steps']} then cosine from {current['learning_rate']:g} to "
                f"{current['min_learning_rate']:g} at step {current['max_steps']}, as if the run had been "
                "planned with the new arguments"
            )
    if kinds & {"schedules", "momentum"}:

        def m(a):
            return teacher_momentum(step, a["max_steps"], a["teacher_momentum_base"], a["teacher_momentum_final"])

        lines.append(
            f"teacher momentum at step {step}: {m(stored):.5f} → {m(current):.5f}; from here on cosine from "
            f"{current['teacher_momentum_base']:g} to {current['teacher_momentum_final']:g} at step "
            f"{current['max_steps']}"
        )
    if "data" in kinds:
        if finetuning:
            lines.append(
                f"data: the batches from step {step} on follow the order, splits and augmentation the new "
                "arguments define, at the saved position (clips of the current epoch may repeat or be left "
                "out)"
            )
        elif streaming:
            lines.append(
                "data: the stream goes on from its saved position; what it reads from here follows the new arguments"
            )
        else:
            lines.append(
                f"data: from step {step} the batches are micro-batch "
                f"{step * current['gradient_accumulation_steps']} onwards of the order the new arguments "
                "define (clips of the current epoch may repeat or be left out); the collator's random stream "
                "goes on from its saved state"
            )
    if "optimiser" in kinds:
        lines.append(
            "optimiser: AdamW keeps its restored moments and takes the new weight decay, betas, ε and "
            "clipping norm from here on"
        )
    if "precision" in kinds:
        lines.append(f"precision: the steps from {step} on compute under {current['mixed_precision']!r} autocast")
    if "model" in kinds:
        lines.append(
            "model: the checkpoint's weights are loaded into the model the new arguments build"
            if finetuning
            else "model: built from the new config; the checkpoint's weights are loaded into it"
        )
    return "\n".join(lines)


def finished_pretraining(output_dir: Path, checkpoint: Path, step: int, args) -> dict | None:
    """The results of the run in `output_dir` when `--resume` has nothing to do: its checkpoint `step` is at
    `--max_steps` (or `--stop_after_steps`) and the results and encoder of that step were written. None otherwise
    (there is training left, or the run died between its last checkpoint and its export, which resuming redoes)."""
    path = output_dir / "all_results.json"
    stop = min(args.max_steps, args.stop_after_steps or args.max_steps)
    if step < stop or not path.is_file() or not (output_dir / "encoder").is_dir():
        return None
    results = read_results(path, warn=lambda line: None)  # damaged: the run is not taken for finished
    return results if results is not None and results.get("step") == step else None


def describe_finished_pretraining(output_dir: Path, step: int, args) -> str:
    """The line for a --resume of a pre-training run with nothing left to train (`finished_pretraining`): where its
    results are, how to train on."""
    if step >= args.max_steps:
        why = f"finished (step {step} of --max_steps {args.max_steps})"
        more = "raise --max_steps and pass --resume_allow_changes max_steps"
    else:
        why = f"at --stop_after_steps {step} (of --max_steps {args.max_steps})"
        more = "raise --stop_after_steps"
    return (
        f"{output_dir} holds a run already {why}; nothing was changed. Its results: "
        f"{output_dir / 'all_results.json'}, its encoder: {output_dir / 'encoder'}. To train "
        f"on, {more}."
    )


def pretraining_resume_changes(accelerator, checkpoint, trainer_state: dict, current: dict, args, config) -> list:
    """The allowed changes of a pre-training run's arguments (`current`) against `checkpoint`'s (the process count
    checked apart, `check_process_count`); a change --resume_allow_changes does not name is refused."""
    world = accelerator.num_processes
    stored = trainer_state.get("run_arguments")
    compared = check_process_count(
        checkpoint,
        trainer_state.get("num_processes", world),
        world,
        stored,
        current,
        args.resume_allow_changes,
        config,
    )
    if trainer_state.get("num_processes", world) != world:
        accelerator.print(
            f"resuming {trainer_state['num_processes']} process(es) × "
            f"{stored['per_device_train_batch_size']} clips on {world} × "
            f"{args.per_device_train_batch_size}"
        )
    return compare_run_arguments(
        checkpoint,
        stored,
        compared,
        args.resume_allow_changes,
        PRETRAINING_RUN_ARGUMENTS,
        accelerator.mixed_precision,
        trainer_state["step"],
        args.max_steps,
        warn=accelerator.print,
    )


def resumed_run_arguments(output_dir) -> dict:
    """The run arguments stored by the checkpoint that `--resume` will continue (of the run in `output_dir`, or of its
    first sub-run `<part>_seed<k>/` with one), {} when there is none. A run that derived its lr, EMA decay or warm-up
    from `--max_steps` keeps them when resumed with a longer `--max_steps`: re-deriving them would change the EMA
    (which no resume may change) and the lr mid-run."""
    output_dir = Path(output_dir)
    run_dirs = [output_dir] + (sorted(output_dir.glob("*_seed*")) if output_dir.is_dir() else [])
    for run_dir in run_dirs:
        if run_dir.is_dir() and (checkpoint := latest_checkpoint(run_dir)) is not None:
            return load_trainer_state(checkpoint).get("run_arguments") or {}
    return {}


def finished_finetuning(output_dir: Path, args, parts, seeds) -> dict | None:
    """The results of a finished fine-tuning run in `output_dir` (every (part, seed) sub-run at --max_steps), for
    `--resume` to leave as they are; None when there is training left or no results yet."""
    summary = read_results(output_dir / "all_results.json", warn=lambda line: None)  # damaged: not finished
    if summary is None or summary.get("max_steps", -1) < args.max_steps or "runs" not in summary:
        return None
    done = {(r["part"], r["seed"]) for r in summary["runs"] if r.get("finished")}
    return summary if done == {(part, seed) for part in parts for seed in seeds} else None


# ----------------------------------------------------------------------------------------------- resuming
def load_training_state(accelerator, optimizer, checkpoint):
    """accelerate's states of `checkpoint` (model, optimiser, RNG states) loaded into the prepared run. The
    optimiser's hyper-parameters stay the arguments': `load_state` restores the checkpoint's with its moments, so an
    allowed change of weight decay, betas or ε takes effect here."""
    hyper = [{k: g[k] for k in ("weight_decay", "betas", "eps", "lr_scale") if k in g} for g in optimizer.param_groups]
    accelerator.load_state(str(checkpoint))
    for group, values in zip(optimizer.param_groups, hyper):
        group.update(values)


def resume_run(
    accelerator,
    optimizer,
    checkpoint,
    output_dir,
    restore,
    changes: str | None = None,
    same_processes: bool = True,
    seed: int = 0,
) -> RunState:
    """``--resume`` of either loop: `checkpoint`'s states loaded into the prepared run and where it stands returned.

    Model, optimiser and RNG states (accelerate's; an unreadable RNG file refused first, `check_random_states`), then
    this process's own state, which `restore` (a function of that dict) puts back into the loop's collator, stream,
    generators and EMA; then one line says where the run resumes (with the thread-count note and `changes`, the
    lines that say what the allowed argument changes do), and the log is cut back to the checkpoint's step, since
    the steps after it are computed again. `same_processes` False: a checkpoint of another number of processes
    (pre-training, `resume.check_process_count`), whose per-process states cannot be dealt out; each process then
    draws from `seed` + the step instead. A `checkpoint` of None (nothing to resume) is said in one line and gives a
    fresh `RunState`, after the log of a run killed before its first checkpoint is emptied (no weights keep its steps).
    """
    from accelerate.utils import set_seed

    output_dir = Path(output_dir)
    history_path = output_dir / "log_history.jsonl"
    if checkpoint is None:
        accelerator.print(f"--resume: no complete checkpoint in {output_dir}, starting from scratch")
        if accelerator.is_main_process:
            truncate_log(history_path, 0)
        return RunState()
    trainer_state, rank = load_trainer_state(checkpoint), accelerator.process_index
    if same_processes:  # load_state would skip an unreadable RNG file silently
        check_random_states(checkpoint, rank)
    load_training_state(accelerator, optimizer, checkpoint)  # the optimiser's hyper-parameters: the arguments'
    step = trainer_state["step"]
    if not same_processes:
        set_seed(seed + step, device_specific=True)
    process_state = (load_process_state(checkpoint, rank) if same_processes else None) or {}
    restore(process_state)
    accelerator.print(f"resumed from {checkpoint} at step {step}")
    if (note := thread_count_note(checkpoint, trainer_state, accelerator.device.type)) is not None:
        accelerator.print(note)
    if changes:
        accelerator.print(changes)
    if accelerator.is_main_process:  # the steps after the checkpoint are computed again: log them once
        truncate_log(history_path, step)
    return RunState.from_checkpoint(trainer_state, process_state, last_training_logs(history_path, step))


def check_process_count(
    checkpoint, stored_world: int, world: int, stored: dict | None, current: dict, allowed, config
) -> dict:
    """A checkpoint written by `stored_world` processes, resumed on `world`: `current` (this command's run arguments)
    as they compare with the checkpoint's, or a UsageError of one line that says what to pass instead.

    What carries over exactly: the model, optimiser and teacher (one copy, the same on every process), the schedules
    (functions of the step) and the data. The data order is cut into global micro-batches of B·W clips and each
    clip's crop and masks come from its position in the order (`clip_seed`), so keeping B·W — the per-device batch
    scaled by the inverse of the process count — gives the same global batches; so does the contrastive loss, whose
    negatives are the B·W clips of a micro-batch over all processes. Keeping only the global batch by the
    accumulation instead would split the contrastive loss's micro-batch: refused, unless --resume_allow_changes
    per_device_train_batch_size accepts another micro-batch. What cannot carry over: a --streaming run's position
    (one shard per process) and the random states each process saved for dropout, drop path or the CNN predictor's
    mask noise (--resume_allow_changes num_processes continues with fresh ones, seeded by --seed and the step)."""
    if stored_world == world:
        return current
    allowed = set(allowed or ())
    head = f"--resume: {checkpoint} was written by {stored_world} process(es)"
    if current["streaming"]:
        raise UsageError(
            f"{head}, each reading its own shard of the stream from a saved position that {world} "
            f"process(es) cannot take over: resume it on {stored_world} process(es)."
        )
    if stored is None:
        raise UsageError(
            f"{head} and predates stored run arguments, so its per-device batch is unknown: resume it on "
            f"{stored_world} process(es)."
        )
    old_batch, new_batch = stored["per_device_train_batch_size"], current["per_device_train_batch_size"]
    clips = old_batch * stored_world  # a global micro-batch: the data order's unit and the contrastive loss's batch
    if new_batch * world != clips and "per_device_train_batch_size" not in allowed:
        other = (
            f"pass --per_device_train_batch_size {clips // world} to keep its micro-batch of {clips} clips"
            if clips % world == 0
            else f"its micro-batch of {clips} clips cannot be split evenly over {world}: resume on a number of "
            f"processes that divides {clips}"
        )
        raise UsageError(
            f"{head} × {old_batch} clips; on {world} {other} (the data order and the contrastive "
            f"loss's negatives), or pass --resume_allow_changes per_device_train_batch_size to go on "
            f"with micro-batches of {new_batch} × {world} clips."
        )
    if new_batch * world == clips:  # the same micro-batch over all processes: not a change of the run
        current = {**current, "per_device_train_batch_size": old_batch}
    random = [
        f"{name} {getattr(config, name):g}"
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate")
        if getattr(config, name) > 0
    ]
    if config.predictor_type == "cnn" and config.predictor_cnn_mask_noise_std > 0:
        random.append(f"predictor_cnn_mask_noise_std {config.predictor_cnn_mask_noise_std:g}")
    if random and "num_processes" not in allowed:
        raise UsageError(
            f"{head}, whose random states for {', '.join(random)} cannot be dealt to {world}: resume on "
            f"{stored_world} process(es) to repeat its draws, or pass --resume_allow_changes "
            "num_processes to go on with new ones."
        )
    return current
