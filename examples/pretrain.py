"""AaSP pre-training: multi-mask EMA teacher-student training of an AaSP encoder (paper Sec. Training Setup).

    accelerate launch examples/pretrain.py --config examples/configs/pretrain_tiny_cpu.json
    accelerate launch --config_file examples/accelerate_configs/four_h100.yaml examples/pretrain.py \
        --config examples/configs/pretrain_paper.json --dataset as2m --data_root /data/audioset
    python examples/pretrain.py --synthetic_clips 64 --max_steps 20 --output_dir runs/try   # one process

Arguments come from the dataclasses of `aasp_hf.training.pretraining_arguments`: on the command line, from one JSON
file (`pretrain.py preset.json`), or from `--config preset.json` followed by command-line overrides (`--model_config`
key by key; the resolved config is printed and saved as `resolved_config.json`).

Steps (`train`): 1. `--resume` finds the newest complete checkpoint, 2. model and data (a dataset of `aasp_hf.data`
in its official layout, an audio folder, a fairseq manifest, any `datasets` dataset, a log-mel cache or synthetic
clips), 3. learning-health monitors, 4. optimiser, 5. `accelerator.prepare`, 6. the states of a resumed checkpoint,
7. the training loop (`aasp_hf.training.pretraining_loop`: the step of `aasp_hf.training.step`, monitors, logging,
checkpoints), 8. export of the student encoder (and on request the teacher) for `AutoModel.from_pretrained`. The
data order, the learning rate and the teacher momentum are pure functions of the step, so `--resume` continues
exactly, on another number of processes too (docs/pretraining.md#resuming).
"""

import json
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, set_seed

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForPreTraining, AaspModel
from aasp_hf.configuration_aasp import init_arguments
from aasp_hf.data.cache import LogMelCache
from aasp_hf.data.clips import AudioStream, load_clips
from aasp_hf.data.collators import PretrainingCollator
from aasp_hf.utils.entry_points import run_stoppable
from aasp_hf.utils.hub import check_model_path
from aasp_hf.training.arguments import check_model_config, config_from_fields, parse_arguments
from aasp_hf.training.checkpointing import (
    RUN_ARTEFACTS,
    RunState,
    check_output_dir,
    latest_checkpoint,
    load_trainer_state,
    read_results,
    remove_artefacts,
)
from aasp_hf.training.model_ema import update_teacher_
from aasp_hf.training.monitors import Monitors
from aasp_hf.training.optim import pretraining_optimizer
from aasp_hf.training.pretraining_arguments import (
    DATA_SOURCES,
    DataArguments,
    ModelArguments,
    PretrainingArguments,
    check_pretraining_arguments,
)
from aasp_hf.training.pretraining_loop import PretrainingLoop, micro_batch_source, restore_process_state, write_results
from aasp_hf.training.resume import PRETRAINING_RUN_ARGUMENTS as RUN_ARGUMENTS
from aasp_hf.training.resume import (
    describe_finished_pretraining,
    describe_resume_changes,
    finished_pretraining,
    pretraining_resume_changes,
    resume_run,
)
from aasp_hf.training.run_lock import check_launch, hold_run_folder
from aasp_hf.training.run_log import quiet_libraries, write_logs

# what a pre-training run leaves besides RUN_ARTEFACTS (checkpoints, log, results); --overwrite_output_dir removes it
ARTEFACTS = ("encoder", "teacher_encoder", "ranks", "tensorboard", "resolved_config.json", "decode_failures.txt")


# ----------------------------------------------------------------------------------------------- arguments
def parse_args(argv=None):
    """CLI, or one JSON file, or `--config file.json` whose values the remaining CLI arguments override."""
    # a data source on the command line replaces the preset's (`--config pretrain_tiny_cpu.json --train_dir DIR`)
    data_args, model_args, args = parse_arguments(
        (DataArguments, ModelArguments, PretrainingArguments), argv, exclusive=DATA_SOURCES
    )
    model_args.model_config = check_model_config(model_args.model_config, AaspConfig)  # a typo is refused here
    config_from_fields(AaspConfig, model_args.model_config)  # and a value the config refuses, before any folder
    check_pretraining_arguments(args)  # --torch_compile's bucket size, --resume_allow_changes
    return data_args, model_args, args


# ----------------------------------------------------------------------------------------------- accelerate
def make_accelerator(args, output_dir: Path) -> Accelerator:
    """accelerate's Accelerator for this run: mixed precision, the TensorBoard tracker (--report_to), DDP's bucket
    size (--ddp_bucket_cap_mb). A launcher's processes that did not join are refused in one line."""
    trackers = None if args.report_to in ("none", "", None) else args.report_to
    ddp = (
        [] if args.ddp_bucket_cap_mb is None else [DistributedDataParallelKwargs(bucket_cap_mb=args.ddp_bucket_cap_mb)]
    )
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision,
        log_with=trackers,
        project_dir=str(output_dir),
        kwargs_handlers=ddp,
    )
    check_launch(accelerator.num_processes, "pretrain.py")
    return accelerator


def init_tensorboard(accelerator, data_args, args):
    """The TensorBoard tracker (unless --report_to none) with every argument as a hyper-parameter (a list, a dict or
    None as its string)."""
    if args.report_to in ("none", "", None):
        return
    hparams = {
        k: v if isinstance(v, (int, float, str, bool)) else str(v)
        for k, v in {**asdict(data_args), **asdict(args)}.items()
    }
    accelerator.init_trackers("tensorboard", config=hparams)


# ----------------------------------------------------------------------------------------------- model (step 2)
def build_model(model_args: ModelArguments) -> AaspForPreTraining:
    if model_args.init_from is not None:
        check_model_path(model_args.init_from)  # a misspelt path, a run folder, an unreachable Hub id: one line
        config = AaspConfig.from_pretrained(model_args.init_from)
        if "AaspForPreTraining" in (config.architectures or []):
            return AaspForPreTraining.from_pretrained(model_args.init_from)
        model = AaspForPreTraining(config)
        encoder = AaspModel.from_pretrained(model_args.init_from)
        model.aasp.load_state_dict(encoder.state_dict())
        model.teacher.load_state_dict(encoder.state_dict())
        return model
    return AaspForPreTraining(config_from_fields(AaspConfig, check_model_config(model_args.model_config, AaspConfig)))


def resolved_model_config(config: AaspConfig) -> dict:
    """Every AaspConfig field of `config` (defaults < preset < command line, as built), JSON-ready."""
    fields = init_arguments(AaspConfig)
    return json.loads(json.dumps({k: v for k, v in config.to_dict().items() if k in fields}))


def describe_model(config: AaspConfig, model: AaspForPreTraining, saved_as: Path) -> str:
    """One line: the fields that differ from AaspConfig's defaults, the encoder's size, where every field is saved."""
    defaults, resolved = resolved_model_config(AaspConfig()), resolved_model_config(config)
    changed = {k: v for k, v in resolved.items() if defaults.get(k) != v}
    parameters = sum(p.numel() for p in model.aasp.parameters())
    return (
        f"model: AaspConfig defaults with {json.dumps(changed)}; encoder {parameters / 1e6:.2f} M parameters, "
        f"{config.num_hidden_layers} layers of width {config.hidden_size}; every field: {saved_as}"
    )


def run_arguments(data_args, args, config: AaspConfig, mixed_precision: str) -> dict:
    """The values of RUN_ARGUMENTS for this run and its resolved model config: what a checkpoint stores."""
    given = {**asdict(data_args), **asdict(args), "mixed_precision": mixed_precision}
    return {**{name: given[name] for name in RUN_ARGUMENTS}, "model_config": resolved_model_config(config)}


# ----------------------------------------------------------------------------------------------- data (step 2)
def load_dataset(accelerator, data_args, args, feature_extractor):
    """(dataset, stream): the clips of the data source (a stream: each process its shard; stream is None else)."""
    world, rank = accelerator.num_processes, accelerator.process_index
    if data_args.log_mel_cache is not None:
        if data_args.streaming:
            raise ValueError("--streaming reads audio; a --log_mel_cache is read as a map-style dataset")
        dataset = LogMelCache(data_args.log_mel_cache, feature_extractor)  # refuses a cache of other settings
    else:
        dataset = load_clips(data_args, args.seed, args.per_device_train_batch_size, world, rank)
    stream = dataset if isinstance(dataset, AudioStream) else None
    described = "a stream" if stream is not None else f"{len(dataset)} clips"
    accelerator.print(f"{described}, {world} process(es)")
    return dataset, stream


def training_collator(accelerator, data_args, args, feature_extractor, config: AaspConfig) -> PretrainingCollator:
    """The training process's collator: with --features_on_device it computes each micro-batch's log-mel on the
    accelerator (`finish`); its generator, one per process, is kept in checkpoints."""
    return PretrainingCollator(
        feature_extractor,
        config,
        crop_seconds=data_args.crop_seconds,
        generator=torch.Generator().manual_seed(args.seed * 1_000 + 1 + accelerator.process_index),  # per process
        device=accelerator.device if data_args.features_on_device else None,
        student_eq_strength=data_args.student_eq_strength,
    )


# ----------------------------------------------------------------------------------------------- distribute (step 5)
def distribute(accelerator, model, optimizer, args):
    """5. (model, optimizer, update_teacher) prepared: DDP/FSDP, device placement and mixed-precision autocast come
    from accelerate. --torch_compile compiles what the step runs (aasp_hf.training.step): the forward — student on
    the masked views, EMA teacher on the clip, predictor, the three losses — as one graph (fullgraph: a graph break
    is an error) whose backward AOTAutograd compiles with it, and the EMA update as a second graph. Between them stay
    autograd's engine, the gradient clipping (foreach kernels; accelerate unscales fp16 and handles FSDP there) and
    fused AdamW, which PyTorch excludes from compilation because it already is a single fused kernel. The model is
    compiled in place, inside its DDP wrapper: DDP's own forward (its bookkeeping, which dynamo cannot trace in one
    graph) stays eager and calls the compiled model, whose graph dynamo then splits at DDP's gradient-bucket
    boundaries so that each bucket's all-reduce starts while the backward goes on."""
    model, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(model)
    # the EMA teacher's update: θ_teacher ← m·θ_teacher + (1 − m)·θ_student, called right after each optimiser step
    ema_update = torch.compile(update_teacher_, fullgraph=True) if args.torch_compile else update_teacher_
    update_teacher = partial(ema_update, unwrapped.teacher, unwrapped.aasp)
    if args.torch_compile:
        unwrapped.compile(fullgraph=True)
    return model, optimizer, update_teacher


# ----------------------------------------------------------------------------------------------- main
def main(argv=None) -> dict:
    data_args, model_args, args = parse_args(argv)
    if args.plan:  # what the run will cost, computed on fake tensors; builds nothing else, writes nothing
        from aasp_hf.plan import print_pretraining_plan

        try:
            return print_pretraining_plan(model_args, args, data_args)
        except ValueError as error:
            raise SystemExit(f"pretrain.py --plan: error: {error}") from None
    quiet_libraries()  # other libraries' start-up and bookkeeping lines (aasp_hf/training/run_log.py)
    with hold_run_folder(args.output_dir):  # one run per folder; an unwritable folder is refused here, before the model
        return train(data_args, model_args, args)


def train(data_args, model_args, args) -> dict:
    output_dir = Path(args.output_dir)
    # a folder holding a run is refused without --resume / --overwrite_output_dir (before anything is written)
    stale = check_output_dir(output_dir, args.resume, args.overwrite_output_dir, RUN_ARTEFACTS + ARTEFACTS)
    accelerator = make_accelerator(args, output_dir)

    # 1. --resume: the newest complete checkpoint (a damaged one is named and passed over). A run with nothing left
    #    to train whose results and encoder were written is left exactly as it is.
    checkpoint = latest_checkpoint(output_dir, accelerator.print) if args.resume else None
    trainer_state = load_trainer_state(checkpoint) if checkpoint is not None else {}
    previous_results = None
    if checkpoint is not None:
        finished = finished_pretraining(output_dir, checkpoint, trainer_state["step"], args)
        if finished is not None:
            accelerator.print(describe_finished_pretraining(output_dir, trainer_state["step"], args))
            accelerator.end_training()
            return finished
        # an earlier segment's results: kept where not replaced (a damaged file is named and left out)
        previous_results = read_results(output_dir / "all_results.json", accelerator.print)
    set_seed(args.seed)  # python, numpy, torch: the model initialisation, identical on every process
    if stale and accelerator.is_main_process:
        remove_artefacts(stale)
    accelerator.wait_for_everyone()

    # 2. Model, feature extractor and data: decoding (or reading cached log-mel), cropping, features and masks in
    #    DataLoader workers (step 7). The model config is built-in defaults < preset < command line, key by key; the
    #    arguments that define the run are compared with the checkpoint's.
    model = build_model(model_args)
    config = model.config
    accelerator.print(describe_model(config, model, output_dir / "resolved_config.json"))
    run_args = run_arguments(data_args, args, config, accelerator.mixed_precision)
    resume_changes = []
    if checkpoint is not None:
        resume_changes = pretraining_resume_changes(accelerator, checkpoint, trainer_state, run_args, args, config)
    if accelerator.is_main_process:  # every field of the model this run trains, beside its checkpoints
        output_dir.mkdir(parents=True, exist_ok=True)
        config.to_json_file(output_dir / "resolved_config.json")
    # No max_frames: the exported extractor must featurise whole clips (the model interpolates its positions); the
    # pre-training crop to config.num_frames is the collator's (crop_seconds, max_frames=num_frames).
    feature_extractor = AaspFeatureExtractor(feature_size=config.num_mel_bins)
    dataset, stream = load_dataset(accelerator, data_args, args, feature_extractor)
    set_seed(args.seed, device_specific=True)  # from here on (dropout, drop path) each process has its own stream
    if args.gradient_checkpointing:  # transformers >= 5 renamed it
        getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
    collator = training_collator(accelerator, data_args, args, feature_extractor, config)
    # 3. Learning-health monitors (aasp_hf.training.monitors), on the main process only: no gradients, eval mode, no
    #    draws from any random stream, so they do not change what the run trains.
    monitors = Monitors.build(accelerator, data_args, args, dataset, stream, config, feature_extractor)

    # 4. Optimiser, 5. distribute (accelerate: DDP/FSDP, devices, mixed precision; --torch_compile)
    model, optimizer, update_teacher = distribute(accelerator, model, pretraining_optimizer(model, args), args)
    unwrapped = accelerator.unwrap_model(model)

    # 6. Resume: model, optimiser and RNG states (accelerate), the collator's generator and the step.
    start = RunState(nonfinite_steps=0)
    if args.resume:
        changes = None
        if resume_changes:  # what the allowed changes do from the resume step on
            changes = describe_resume_changes(
                resume_changes,
                trainer_state["run_arguments"],
                run_args,
                trainer_state["step"],
                streaming=stream is not None,
            )
        start = resume_run(
            accelerator,
            optimizer,
            checkpoint,
            output_dir,
            partial(restore_process_state, collator, stream, checkpoint),
            changes,
            same_processes=trainer_state.get("num_processes", accelerator.num_processes) == accelerator.num_processes,
            seed=args.seed,
        )
    init_tensorboard(accelerator, data_args, args)
    if monitors.probe is not None and start.step == 0:  # the random-initialisation reference
        write_logs(accelerator, output_dir / "log_history.jsonl", 0, monitors.probe_logs(unwrapped, accelerator))

    # 7. Training loop (aasp_hf.training.pretraining_loop), 8. export and results.
    batches = micro_batch_source(accelerator, data_args, args, dataset, stream, feature_extractor, config, start.step)
    loop = PretrainingLoop(
        accelerator, model, optimizer, update_teacher, collator, batches, monitors, args, stream, start, run_args
    )
    _, elapsed = loop.run()
    return write_results(loop, data_args, dataset, elapsed, previous_results)


if __name__ == "__main__":
    run_stoppable(main, "pretrain.py")  # SIGTERM/SIGUSR1/SIGINT: save the step, exit 75 (docs/reliability.md)
