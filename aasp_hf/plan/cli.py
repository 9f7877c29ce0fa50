"""The scripts' `--plan`: `print_pretraining_plan` (examples/pretrain.py) and `print_finetuning_plan`
(examples/finetune.py) build the plan their arguments describe and print it on the main process; `launch_environment`
reads what `accelerate launch` / torchrun set. The arguments themselves are
`aasp_hf.training.arguments.PlanArguments`."""

import os

from ..configuration_aasp import AaspConfig
from ..feature_extraction_aasp import AaspFeatureExtractor
from ..training.arguments import check_model_config, config_from_fields, gradient_accumulation_for
from .data_path import data_path_plan
from .estimate import plan_finetuning, plan_pretraining
from .measure import compare, format_measured, measure_finetuning, measure_pretraining, write_report
from .report import format_plan


def launch_environment() -> tuple[int, str | None, bool]:
    """(number of processes, mixed precision or None, is the main process) as `accelerate launch` / torchrun set
    them in the environment (WORLD_SIZE, ACCELERATE_MIXED_PRECISION, RANK); 1, None, True for a plain `python`."""

    return (
        int(os.environ.get("WORLD_SIZE", "1")),
        os.environ.get("ACCELERATE_MIXED_PRECISION"),
        int(os.environ.get("RANK", "0")) == 0,
    )


def print_pretraining_plan(model_args, args, data_args=None) -> dict:
    """`examples/pretrain.py --plan`: the plan of the run its arguments describe, printed by the main process (under
    `accelerate launch` every process would otherwise print it). The model configuration comes from
    `--model_config` (a JSON file, an inline object or a preset's object) or `--init_from`'s config.json; no
    weights or output folder are touched. With `data_args` and `--plan_data_clips` > 0, the data path is timed on
    this host too (`data_path_plan`: the run's data source is read, nothing is written but a temporary folder).
    Returns {"plan": the table, "data": the data path's figures (when timed)}."""

    if model_args.init_from is not None:
        config = AaspConfig.from_pretrained(model_args.init_from)
    else:
        config = config_from_fields(AaspConfig, check_model_config(model_args.model_config, AaspConfig))
    world, launched_precision, is_main = launch_environment()
    _check_measured_processes(args, world)
    plan = plan_pretraining(
        config,
        args.per_device_train_batch_size,
        precision=args.mixed_precision or launched_precision or "no",
        num_processes=args.plan_num_processes or world,
        max_steps=args.max_steps,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        gradient_checkpointing=args.gradient_checkpointing,
        memory_gb=args.plan_memory_gb,
        accelerator=args.plan_accelerator,
        mfu=args.plan_mfu,
        patch_embedding_frozen=args.patch_embedding_lr_scale == 0,
    )
    table = format_plan(plan)
    if is_main:
        print(table, flush=True)
    result = {"plan": table}
    if data_args is not None and args.plan_data_clips > 0 and is_main:
        lines, figures = data_path_plan(plan, config, data_args, args.plan_data_clips, args.seed)
        print(lines, flush=True)
        result = {"plan": table + "\n" + lines, "data": figures}
    if getattr(args, "plan_measure", 0) > 0:
        result.update(
            _measure(
                plan,
                result["plan"],
                measure_pretraining(config, data_args, args, args.plan_measure),
                args.output_dir,
                is_main,
            )
        )
    return result


def _check_measured_processes(args, world: int):
    """--plan_measure runs the processes launched: a plan for another number cannot be compared with them."""
    if getattr(args, "plan_measure", 0) > 0 and args.plan_num_processes not in (None, world):
        raise ValueError(
            f"--plan_measure measures the {world} process(es) launched, not --plan_num_processes "
            f"{args.plan_num_processes}: drop --plan_num_processes or launch that many processes"
        )


def _measure(plan, plan_text: str, measured: dict, output_dir, is_main: bool) -> dict:
    """The main process prints measured beside predicted and writes plan.txt and plan_measured.json to
    `output_dir` (nothing else); returns {"measured": the report, "report_path"} (the report on every process)."""
    report = compare(plan, measured)
    if not is_main:
        return {"measured": report}
    text = format_measured(report)
    print(text, flush=True)
    path = write_report(output_dir, plan_text + "\n" + text, report)
    print(f"measured beside predicted: {path}", flush=True)
    return {"measured": report, "report_path": str(path)}


def print_finetuning_plan(args, load_parts=None) -> dict:
    """`examples/finetune.py --plan`: the plan of the run its arguments describe (see `print_pretraining_plan`).
        The encoder's configuration is read from `--model_name_or_path`'s config.json (no weights); the clip length
        from `--clip_seconds` or the task's EVAR length (`--task`, or `--dataset`'s task); the global batch as the
        script makes it up (`total_train_batch_size`: gradient accumulation on fewer processes). With `--plan_measure N`,
    `load_parts` (the script's) reads the task's data and N steps are measured (`measure_finetuning`)."""

    config = AaspConfig.from_pretrained(args.model_name_or_path, drop_path_rate=args.drop_path_rate)
    if args.synthetic_per_class > 0:
        seconds = args.clip_seconds or 1.0  # the script's synthetic demo clips
    elif args.dataset is None and args.task is None and args.clip_seconds is None:
        raise ValueError("--plan needs the clip length: give --dataset, --task or --clip_seconds")
    else:
        from ..data.protocol import (
            evar_clip_seconds,
            evar_task,
        )  # here: it imports datasets, --plan of pretrain.py none

        seconds = evar_clip_seconds(evar_task(args.dataset or args.task, args.task), args.clip_seconds)
    num_frames = AaspFeatureExtractor(feature_size=config.num_mel_bins).num_frames(int(round(seconds * 16000)))
    world, launched_precision, is_main = launch_environment()
    _check_measured_processes(args, world)
    world = args.plan_num_processes or world
    accumulation = gradient_accumulation_for(
        args.total_train_batch_size, args.per_device_train_batch_size, world, args.gradient_accumulation_steps
    )
    plan = plan_finetuning(
        config,
        args.per_device_train_batch_size,
        num_frames,
        precision=args.mixed_precision or launched_precision or "no",
        num_processes=world,
        max_steps=args.max_steps,
        gradient_accumulation_steps=accumulation,
        gradient_checkpointing=getattr(args, "gradient_checkpointing", False),
        memory_gb=args.plan_memory_gb,
        accelerator=args.plan_accelerator,
        mfu=args.plan_mfu,
        weight_ema=args.ema_decay > 0,
        freeze_feature_encoder=args.freeze_feature_encoder,
    )
    table = format_plan(plan)
    if is_main:
        print(table, flush=True)
    result = {"plan": table}
    if getattr(args, "plan_measure", 0) > 0:
        if load_parts is None:
            raise ValueError("--plan_measure needs the script's data: pass its load_parts")
        downstream = load_parts(args)
        splits = next(iter(downstream.parts.values()))  # the first part (test fold) a run trains on
        measured = measure_finetuning(
            args, splits, downstream.multi_label, downstream.label_names, downstream.clip_seconds, args.plan_measure
        )
        result.update(_measure(plan, table, measured, args.output_dir, is_main))
    return result
