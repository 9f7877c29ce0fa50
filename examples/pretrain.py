"""AaSP pre-training: multi-mask EMA teacher-student training of an AaSP encoder (paper Sec. Training Setup).

    accelerate launch examples/pretrain.py --config examples/configs/pretrain_tiny_cpu.json
    accelerate launch --config_file examples/accelerate_configs/four_h100.yaml examples/pretrain.py \
        --config examples/configs/pretrain_paper.json --dataset as2m --data_root /data/audioset
    python examples/pretrain.py --synthetic_clips 64 --max_steps 20 --output_dir runs/try   # one process

Arguments come from the dataclasses of `aasp_hf.training.pretraining_arguments`: on the command line, from one JSON
file (`pretrain.py preset.json`), or from `--config preset.json` followed by command-line overrides.

Steps: 1. `--resume` finds the newest complete checkpoint, 2. model and data (a dataset of `aasp_hf.data` in its
official layout — AS-2M's train split leaves the eval segments out —, an audio folder, a fairseq manifest, any
`datasets` dataset, or synthetic clips), 3. learning-health monitors, 4. optimiser and schedules (pure functions of the
step), 5. `accelerator.prepare`, 6. exact `--resume` of the states, 7. training loop: 7a. the step
(`aasp_hf.training.step.pretraining_step`: micro-batches, `apply_update`, EMA teacher), 7b. monitors, 7c. logging
(TensorBoard + progress bar), 7d. crash-safe checkpoints, 8. export of the student encoder (and on request the
teacher) for `AutoModel.from_pretrained`.

Data order (`aasp_hf.training.data_order`): each epoch is a seeded permutation of the dataset (seed + epoch); global
micro-batch g of an epoch is positions [g·B·W, (g+1)·B·W) of it, process r taking its r-th slice of B clips (W
processes, the incomplete last global batch is dropped). Each clip's crop, masks, queries and equaliser are drawn
from a generator seeded by its position in that order (`clip_seed`), not by the process that reads it. The data
position is therefore a pure function of the step, and so are the learning rate and the teacher momentum; RNG
states (accelerate: dropout, drop path) are saved with each checkpoint, so a resumed run repeats exactly what the
uninterrupted run would have done — on another number of processes too, given the per-device batch that keeps the
B·W clips of a global micro-batch (`aasp_hf.training.resume.check_process_count` says what cannot carry over). With
`--streaming` the data is a `datasets` IterableDataset: each process reads its shard, reshuffled every epoch, and
the stream position (epoch, micro-batches taken) is saved per process with each checkpoint instead (see
`aasp_hf.data.clips.AudioStream`).

`--resume` (docs/pretraining.md#resuming): a finished run is left as it is; a checkpoint stores the arguments that
define the run (`RUN_ARGUMENTS`) and a resume with other values is refused unless `--resume_allow_changes` names them;
a damaged checkpoint is named and passed over for the newest complete one. `--model_config` on the command line
overrides the preset's model config key by key; the resolved config is printed and saved as `resolved_config.json`.
"""

import hashlib
import json
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, set_seed
from tqdm.auto import tqdm

from aasp_hf import AaspConfig, AaspFeatureExtractor, AaspForPreTraining, AaspModel
from aasp_hf.configuration_aasp import init_arguments
from aasp_hf.data.collators import PretrainingCollator
from aasp_hf.schedules import learning_rate, teacher_momentum
from aasp_hf.training import find_latest_checkpoint, param_groups, save_checkpoint
from aasp_hf.training.console import quiet_libraries
from aasp_hf.training.data_order import clip_order, stream_clip_seeds
from aasp_hf.training.launch import check_launch
from aasp_hf.training.model_ema import update_teacher_
from aasp_hf.training.step import pretraining_step
from aasp_hf.entry_points import run_stoppable
from aasp_hf.training.stopping import StopAgreement, exit_stopped
from aasp_hf.training.checkpointing import (
    RUN_ARTEFACTS,
    check_output_dir,
    check_random_states,
    checkpoint_to_resume,
    load_process_state,
    load_trainer_state,
    read_results,
    refused_writes,
    remove_artefacts,
    thread_count_note,
    truncate_log,
    write_text_atomically,
)
from aasp_hf.training.failed_clips import FailedClipShare
from aasp_hf.training.resume import PRETRAINING_RUN_ARGUMENTS as RUN_ARGUMENTS
from aasp_hf.training.resume import (
    describe_finished_pretraining,
    describe_resume_changes,
    finished_pretraining,
    load_training_state,
    pretraining_resume_changes,
)
from aasp_hf.training.pretraining_monitors import Monitors, is_due
from aasp_hf.training.run_log import last_training_logs, write_logs, write_rank_summary
from aasp_hf.training.run_log import checksum  # noqa: F401  (benchmarks/quality/run.py reads pretrain.checksum)
from aasp_hf.training.saved_models import export_encoders as export
from aasp_hf.training.saved_models import pretraining_summary
from aasp_hf.training.run_lock import hold_run_folder
from aasp_hf.data.cache import LogMelCache
from aasp_hf.data.clips import (
    AudioStream,
    CollatedMicroBatches,
    FailureLog,
    load_clips,
    load_micro_batches,
)
from aasp_hf.errors import UsageError
from aasp_hf.hub import check_model_path
from aasp_hf.training.arguments import check_model_config, config_from_fields, parse_arguments
from aasp_hf.training.pretraining_arguments import (
    DATA_SOURCES,
    DataArguments,
    ModelArguments,
    PretrainingArguments,
    check_pretraining_arguments,
)
from aasp_hf.training.monitors import pretraining_health

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


def collate_clips(collator: PretrainingCollator, examples, seeds) -> dict:
    """The collator's batch with each clip's random draws (crop, masks, queries, equaliser) from its own seed (its
    `clip_seed`), so that they depend neither on the process that collates the clip nor on the rest of its batch."""
    return collator.collate_seeded(examples, seeds)


# ----------------------------------------------------------------------------------------------- monitors (steps 3, 7b)
# ----------------------------------------------------------------------------------------------- main
def main(argv=None) -> dict:
    data_args, model_args, args = parse_args(argv)
    if args.plan:  # what the run will cost, computed on fake tensors; builds nothing else, writes nothing
        from aasp_hf.plan import print_pretraining_plan

        try:
            return print_pretraining_plan(model_args, args, data_args)
        except ValueError as error:
            raise SystemExit(f"pretrain.py --plan: error: {error}") from None
    quiet_libraries()  # other libraries' start-up and bookkeeping lines (aasp_hf/training/console.py)
    with hold_run_folder(args.output_dir):  # one run per folder; an unwritable folder is refused here, before the model
        return train(data_args, model_args, args)


def train(data_args, model_args, args) -> dict:
    output_dir = Path(args.output_dir)
    # a folder holding a run is refused without --resume / --overwrite_output_dir (before anything is written)
    stale = check_output_dir(
        output_dir,
        args.resume,
        args.overwrite_output_dir,
        RUN_ARTEFACTS
        + ("encoder", "teacher_encoder", "ranks", "tensorboard", "resolved_config.json", "decode_failures.txt"),
    )
    trackers = None if args.report_to in ("none", "", None) else args.report_to
    ddp = (
        [] if args.ddp_bucket_cap_mb is None else [DistributedDataParallelKwargs(bucket_cap_mb=args.ddp_bucket_cap_mb)]
    )
    accelerator = Accelerator(
        mixed_precision=args.mixed_precision, log_with=trackers, project_dir=str(output_dir), kwargs_handlers=ddp
    )
    check_launch(accelerator.num_processes, "pretrain.py")  # a launcher's processes that did not join: one line

    # 1. --resume: the newest complete checkpoint (a damaged one is named and passed over). A run with nothing left
    #    to train whose results and encoder were written is left exactly as it is.
    checkpoint = checkpoint_to_resume(output_dir, accelerator.print) if args.resume else None
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
    #    DataLoader workers (step 7). The model config is built-in defaults
    #    < preset < command line, key by key; the arguments that define the run are compared with the checkpoint's.
    model = build_model(model_args)
    config = model.config
    accelerator.print(describe_model(config, model, output_dir / "resolved_config.json"))
    current_arguments = run_arguments(data_args, args, config, accelerator.mixed_precision)
    resume_changes = (
        []
        if checkpoint is None
        else pretraining_resume_changes(accelerator, checkpoint, trainer_state, current_arguments, args, config)
    )
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
    collator = PretrainingCollator(
        feature_extractor,
        config,
        crop_seconds=data_args.crop_seconds,
        generator=torch.Generator().manual_seed(args.seed * 1_000 + 1 + accelerator.process_index),  # per process
        device=accelerator.device if data_args.features_on_device else None,
        student_eq_strength=data_args.student_eq_strength,
    )
    # 3. Learning-health monitors (aasp_hf.training.monitors), on the main process only: no gradients, eval mode, no
    #    draws from any random stream, so they do not change what the run trains.
    monitors = Monitors.build(accelerator, data_args, args, dataset, stream, config, feature_extractor)

    # 4. Optimiser, 5. distribute (accelerate: DDP/FSDP, devices, mixed precision; --torch_compile)
    model, optimizer, update_teacher = distribute(accelerator, model, build_optimizer(model, args), args)
    unwrapped = accelerator.unwrap_model(model)

    # 6. Resume: model, optimiser and RNG states (accelerate), the collator's generator and the step.
    start_step, nonfinite_steps, last_logs = 0, 0, {}
    if args.resume:
        start_step, nonfinite_steps, last_logs = resume_states(
            accelerator, optimizer, collator, stream, checkpoint, trainer_state, args, resume_changes, current_arguments
        )
    if trackers is not None:
        hparams = {
            k: v if isinstance(v, (int, float, str, bool)) else str(v)
            for k, v in {**asdict(data_args), **asdict(args)}.items()
        }
        accelerator.init_trackers("tensorboard", config=hparams)
    if monitors.probe is not None and start_step == 0:  # the random-initialisation reference
        write_logs(accelerator, output_dir / "log_history.jsonl", 0, monitors.probe_logs(unwrapped, accelerator))

    # 7. Training loop, 8. export and results.
    batches = micro_batch_source(accelerator, data_args, args, dataset, stream, feature_extractor, config, start_step)
    loop = TrainingLoop(
        accelerator,
        model,
        optimizer,
        update_teacher,
        collator,
        batches,
        monitors,
        args,
        config,
        feature_extractor,
        stream,
        start_step,
        nonfinite_steps,
        last_logs,
        current_arguments,
    )
    _, elapsed = loop.run()
    return write_results(loop, data_args, args, dataset, elapsed, previous_results)


def build_optimizer(model: AaspForPreTraining, args) -> torch.optim.AdamW:
    """4. AdamW without decay on biases, norms, CLS and positions; the teacher is frozen and not in it. lr and
    momentum are pure functions of the step (set by hand each step; no scheduler object). --patch_embedding_lr_scale:
    0 freezes the stem (student and teacher then share it for the whole run), another value gives the stem's
    parameters groups of their own with that lr scale."""
    if args.patch_embedding_lr_scale == 0:
        model.aasp.embeddings.requires_grad_(False)
    lr_scales = {} if args.patch_embedding_lr_scale in (0, 1) else {"aasp.embeddings.": args.patch_embedding_lr_scale}
    return torch.optim.AdamW(
        param_groups(model, args.weight_decay, lr_scales),
        lr=learning_rate(0, args.max_steps, args.warmup_steps, args.learning_rate, args.min_learning_rate),
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        fused=True,  # one kernel per device and dtype; it skips a non-finite step on the device (training.step)
    )


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


def resume_states(
    accelerator, optimizer, collator, stream, checkpoint, trainer_state: dict, args, resume_changes, current_arguments
) -> tuple[int, int, dict]:
    """--resume: the states of `checkpoint` loaded (model, optimiser, RNG, the collator's generator, the stream's
    position); returns (start step, non-finite steps so far, the last logged training record)."""
    output_dir, rank, world = Path(args.output_dir), accelerator.process_index, accelerator.num_processes
    if checkpoint is None:
        accelerator.print(f"--resume: no complete checkpoint in {output_dir}, starting from scratch")
        if accelerator.is_main_process:  # a run killed before its first checkpoint logged steps no weights keep
            truncate_log(output_dir / "log_history.jsonl", 0)
        return 0, 0, {}
    same_world = trainer_state.get("num_processes", world) == world
    if same_world:  # load_state would skip an unreadable RNG file silently
        check_random_states(checkpoint, rank)
    load_training_state(accelerator, optimizer, checkpoint)
    if not same_world:  # the saved per-process states do not map to these processes (check_process_count)
        set_seed(args.seed + trainer_state["step"], device_specific=True)
    process_state = (load_process_state(checkpoint, rank) if same_world else None) or {}
    if "collator" in process_state:  # kept in checkpoints; every clip now draws from its own seed
        collator.load_state_dict(process_state["collator"])
    if stream is not None:
        if "stream" not in process_state:
            raise ValueError(
                f"{checkpoint} was not written by a --streaming run: resume it without "
                "--streaming, or start a streaming run afresh"
            )
        stream.position = dict(process_state["stream"])
    start_step = trainer_state["step"]
    accelerator.print(f"resumed from {checkpoint} at step {start_step}")
    if (note := thread_count_note(checkpoint, trainer_state, accelerator.device.type)) is not None:
        accelerator.print(note)
    if resume_changes:
        accelerator.print(
            describe_resume_changes(
                resume_changes,
                trainer_state["run_arguments"],
                current_arguments,
                start_step,
                streaming=stream is not None,
            )
        )
    if accelerator.is_main_process:  # the steps after the checkpoint are computed again: log them once
        truncate_log(output_dir / "log_history.jsonl", start_step)
    last_logs = last_training_logs(output_dir / "log_history.jsonl", start_step)
    return start_step, trainer_state.get("nonfinite_steps", 0), last_logs


def micro_batch_source(accelerator, data_args, args, dataset, stream, feature_extractor, config, start_step: int):
    """The micro-batches from `start_step` on. The loader workers make whole micro-batches: read, decode, replace
    failed clips, crop, log-mel, masks, queries and equaliser, each clip from its own seed (with
    --features_on_device all but the log-mel, which the training collator's `finish` computes on the accelerator).
    The training process receives them pinned (on CUDA) and in order."""
    world, rank = accelerator.num_processes, accelerator.process_index
    worker_collator = PretrainingCollator(
        feature_extractor,
        config,
        crop_seconds=data_args.crop_seconds,
        student_eq_strength=data_args.student_eq_strength,
    )  # CPU, in the workers
    collate = worker_collator.draw_seeded if data_args.features_on_device else worker_collator.collate_seeded
    pin_memory = accelerator.device.type == "cuda"  # page-locked host memory: the copy runs without stalling the host
    if stream is not None:  # its position came with the checkpoint
        return stream.finished_micro_batches(collate, partial(stream_clip_seeds, args.seed, world, rank), pin_memory)
    # the position is a pure function of the step
    plan = partial(
        clip_order,
        len(dataset),
        args.per_device_train_batch_size,
        world,
        rank,
        args.seed,
        start_step * args.gradient_accumulation_steps,
    )
    return load_micro_batches(
        CollatedMicroBatches(dataset, plan, collate), data_args.dataloader_num_workers, pin_memory
    )


class TrainingLoop:
    """7. The training loop from `start_step` to --max_steps (or --stop_after_steps): per step 7a. the update
    (`aasp_hf.training.step.pretraining_step`), 7b. monitors, 7c. logging (TensorBoard + progress bar), 7d. crash-safe
    checkpoints. It keeps what the logs and results need: loss sums since the last log, skipped steps, the data
    seen (a checksum of the clip indices), the clips that failed to decode."""

    def __init__(
        self,
        accelerator,
        model,
        optimizer,
        update_teacher,
        collator,
        batches,
        monitors,
        args,
        config,
        feature_extractor,
        stream,
        start_step: int,
        nonfinite_steps: int,
        last_logs: dict,
        current_arguments: dict,
    ):
        self.accelerator, self.model, self.optimizer = accelerator, model, optimizer
        self.unwrapped, self.update_teacher = accelerator.unwrap_model(model), update_teacher
        self.collator, self.batches, self.monitors, self.args, self.config = collator, batches, monitors, args, config
        self.feature_extractor, self.stream, self.current_arguments = feature_extractor, stream, current_arguments
        self.start_step, self.step, self.nonfinite_steps = start_step, start_step, nonfinite_steps
        self.last_logs = last_logs
        self.output_dir = Path(args.output_dir)
        self.history_path = self.output_dir / "log_history.jsonl"
        self.stop_step = min(args.max_steps, args.stop_after_steps or args.max_steps)
        accumulation = args.gradient_accumulation_steps
        self.clips_per_step = args.per_device_train_batch_size * accelerator.num_processes * accumulation
        self.sums, self.num_summed, self.seen = {}, 0, hashlib.sha256()
        self.failure_log = FailureLog(self.output_dir / "decode_failures.txt")  # names the clips that fail to decode
        self.failed_share = FailedClipShare(args.max_failed_clip_share)  # too many failures stop the run
        # skipped steps not yet counted
        self.skipped_since_read = torch.zeros((), dtype=torch.long, device=accelerator.device)
        self.epoch = None

    def next_batch(self) -> dict:
        """The next micro-batch on the device, its failed clips logged and counted and its clips in `seen`."""
        micro_batch = next(self.batches)  # finished in a loader worker (aasp_hf.data.clips.finish_micro_batch)
        self.epoch = micro_batch["epoch"]
        self.failure_log(micro_batch["failed"])  # the clips the worker replaced, named and counted here
        self.failed_share.add(len(micro_batch["indices"]), len(micro_batch["failed"]))
        self.seen.update(str(micro_batch["indices"]).encode())
        batch = self.collator.finish(micro_batch["batch"])  # --features_on_device: the log-mel on the accelerator
        return {k: v.to(self.accelerator.device, non_blocking=True) for k, v in batch.items()}

    def run(self) -> tuple[int, float]:
        """Trains to the stop step; returns (the step reached, seconds). A stop signal saves the step and exits."""
        accelerator, args = self.accelerator, self.args
        # smoothing=0: the ETA from the average rate since the start, periodic evaluations and saves included (the
        # default smoothing takes the step after one for its rate, and the ETA jumps tenfold)
        self.progress = tqdm(
            total=args.max_steps, initial=self.start_step, disable=not accelerator.is_local_main_process, smoothing=0
        )
        t_start, self.t_log, self.step_of_last_log = time.time(), time.time(), self.start_step
        stop = StopAgreement(accelerator.device)  # a stop signal on any process: every process saves the same step
        self.model.train()
        while self.step < self.stop_step:
            # 7a. One step (aasp_hf.training.step.pretraining_step): forward and backward per micro-batch, then clip,
            #     AdamW step and EMA teacher update. A NaN/inf loss on any process (or a non-finite gradient norm;
            #     under fp16 the grad scaler handles overflow itself) skips the update on every process — no
            #     optimiser step, no EMA update — decided on the device, so the host never waits for the step to
            #     finish. The step still counts, so the data position and the schedules stay pure functions of the
            #     step (exact resume). Skipped steps are counted on the device and read back, with the losses, on
            #     logging, monitoring and checkpoint steps only (the run stops there if too many were skipped).
            step = self.step
            lr = learning_rate(step, args.max_steps, args.warmup_steps, args.learning_rate, args.min_learning_rate)
            momentum = teacher_momentum(step, args.max_steps, args.teacher_momentum_base, args.teacher_momentum_final)
            done = pretraining_step(
                accelerator,
                self.model,
                self.optimizer,
                self.next_batch,
                args.gradient_accumulation_steps,
                lr,
                args.max_grad_norm,
                momentum,
                self.update_teacher,
                stop=stop.local(),
            )
            self.skipped_since_read = self.skipped_since_read + done.skipped.long()
            for name, value in done.losses.items():  # only good steps enter the logged means
                self.sums[name] = self.sums.get(name, 0.0) + torch.where(done.skipped, 0.0, value)
            self.num_summed = self.num_summed + (~done.skipped).long()
            self.step = step = step + 1
            self.progress.update(1)

            # SIGTERM / SIGUSR1 / SIGINT on any process (aasp_hf.training.stopping): log and save this step, then exit
            stopping = stop.agreed(done.stops) and step < self.stop_step
            due_log = step % args.logging_steps == 0 or step == self.stop_step or stopping
            due_save = step % args.save_steps == 0 or step == self.stop_step or stopping
            # read the skipped steps back (one host sync) on the steps every process shares, so that all of them
            # stop at the same step (monitors and the probe run on the main process only)
            data_vanishing = None
            if due_log or due_save:
                self.count_skipped_steps()
                data_vanishing = self.failed_share.check(accelerator)  # every process: saved below, then it stops
                due_save = due_save or data_vanishing is not None
            health = self.monitor(done)
            self.log(due_log, lr, momentum, done, health)
            if due_save:
                saved = self.save(data_vanishing)
            if stopping:
                self.progress.close()
                exit_stopped(accelerator, saved, step, "pretrain.py")
        self.progress.close()
        return self.step, time.time() - t_start

    def count_skipped_steps(self):
        """The steps skipped since the last read, read back and counted; too many stop the run."""
        step, args = self.step, self.args
        newly_skipped = int(self.skipped_since_read)
        self.skipped_since_read = torch.zeros_like(self.skipped_since_read)
        if newly_skipped:
            self.nonfinite_steps += newly_skipped
            self.accelerator.print(
                f"step {step}: {newly_skipped} of the steps since the last report had a non-finite "
                f"loss or gradient, their updates were skipped ({self.nonfinite_steps} skipped so "
                f"far, at most {args.max_nonfinite_steps} allowed)"
            )
        if self.nonfinite_steps > args.max_nonfinite_steps:
            last = find_latest_checkpoint(self.output_dir)
            raise RuntimeError(
                f"Stopping at step {step}: {self.nonfinite_steps} steps had a non-finite (NaN/inf) loss or gradient, "
                f"more than --max_nonfinite_steps={args.max_nonfinite_steps}. The weights were not updated by "
                f"those steps; the last complete checkpoint is {last}. Lower --learning_rate, check --max_grad_norm "
                f"and the data (clips that are silent or contain NaN), then continue with --resume, or raise "
                f"--max_nonfinite_steps."
            )

    def monitor(self, done) -> dict:
        """7b. Monitors (main process): after a good update, every --monitor_steps the collapse statistics of this
        batch (student CLS of one view per clip, the teacher targets of its forward) and the student's (α, β) on
        the fixed batch; every --probe_steps the frozen-feature probe. Their time is logged (monitor/seconds,
        probe/seconds) and left out of the throughput."""
        monitors, step, accelerator = self.monitors, self.step, self.accelerator
        health, started = {}, time.time()
        if (
            monitors.inputs is not None
            and is_due(step, monitors.monitor_steps, self.stop_step)
            and not bool(done.skipped)
        ):
            stats = pretraining_health(
                self.unwrapped, done.batch, done.outputs.targets, monitors.inputs, accelerator.autocast
            )
            health = {**{f"monitor/{k}": v for k, v in stats.items()}, "monitor/seconds": time.time() - started}
        if monitors.probe is not None and is_due(step, monitors.probe_steps, self.stop_step):
            health.update(monitors.probe_logs(self.unwrapped, accelerator))
        self.t_log += time.time() - started
        return health

    def log(self, due_log: bool, lr: float, momentum: float, done, health: dict):
        """7c. Logging: loss parts (mean over the good steps since the last log and over processes), lr, momentum,
        grad norm, throughput and the visible-token ratio. A stretch of skipped steps only logs nothing."""
        accelerator, step = self.accelerator, self.step
        good_steps = int(self.num_summed) if due_log else 0  # the same on every process
        if good_steps > 0:
            means = {k: accelerator.reduce(v / good_steps, reduction="mean").item() for k, v in self.sums.items()}
            now = time.time()
            logs = {
                **{f"train/{k}": v for k, v in means.items()},
                "train/learning_rate": lr,
                "train/teacher_momentum": momentum,
                "train/grad_norm": float(done.grad_norm),
                "train/clips_per_second": self.clips_per_step
                * (step - self.step_of_last_log)
                / max(now - self.t_log, 1e-9),
                "train/visible_token_ratio": done.batch["visible_indices"].shape[-1] / self.config.num_patches,
                "train/epoch": self.epoch,
                "train/nonfinite_steps": self.nonfinite_steps,
                **health,
            }
            write_logs(accelerator, self.history_path, step, logs)
            self.progress.set_postfix(loss=f"{means['loss']:.4f}", lr=f"{lr:.2e}")
            self.sums, self.num_summed, self.t_log, self.step_of_last_log, self.last_logs = {}, 0, now, step, logs
        elif health:  # a monitor step that is not a logging step: a line of its own
            write_logs(accelerator, self.history_path, step, health)

    def save(self, data_vanishing):
        """7d. Checkpoint: state + data position (the step) + this process's collator generator (+ the stream's
        position); a vanishing data source stops the run once it is saved."""
        accelerator, step, args, output_dir = self.accelerator, self.step, self.args, self.output_dir
        stream = self.stream
        saved = save_checkpoint(
            accelerator,
            output_dir,
            step,
            extra_state={
                "micro_batches": step * args.gradient_accumulation_steps,
                "num_processes": accelerator.num_processes,
                "nonfinite_steps": self.nonfinite_steps,
                "run_arguments": self.current_arguments,
            },
            process_state={
                "collator": self.collator.state_dict(),
                **({"stream": dict(stream.position)} if stream is not None else {}),
            },
            save_total_limit=args.save_total_limit,
        )
        if args.export_with_checkpoints and accelerator.is_main_process:
            export(self.unwrapped, self.feature_extractor, output_dir / f"checkpoint-{step}", args.export_teacher)
        if data_vanishing is not None:
            raise UsageError(
                f"stopping at step {step}: {data_vanishing}. Saved {output_dir / f'checkpoint-{step}'}"
                f"; each failed file and why: {self.failure_log.path}. Restore the data, then run the "
                "same command with --resume (or raise --max_failed_clip_share)."
            )
        return saved


def write_results(loop: TrainingLoop, data_args, args, dataset, elapsed: float, previous_results) -> dict:
    """8. Export and results. Every process writes a summary (parameter checksums, data seen) to check the sync;
    the main process exports the encoder(s) with their model card and writes all_results.json."""
    accelerator, unwrapped, output_dir, step = loop.accelerator, loop.unwrapped, loop.output_dir, loop.step
    accelerator.wait_for_everyone()  # every process has appended its failures to the one list
    decode_failures = loop.failure_log.failed_files()  # distinct files, not the micro-batches they failed in
    missing_files = loop.failure_log.missing_files()  # of those, the files the data source lists that are not on disk
    write_rank_summary(output_dir, accelerator.process_index, unwrapped, loop.seen.hexdigest())
    results = {
        **{k.removeprefix("train/"): v for k, v in loop.last_logs.items()},
        "step": step,
        "max_steps": args.max_steps,
        "start_step": loop.start_step,
        "num_processes": accelerator.num_processes,
        "num_clips": None if loop.stream is not None else len(dataset),
        "clips_per_second_overall": loop.clips_per_step * (step - loop.start_step) / max(elapsed, 1e-9),
        "decode_failures": decode_failures,
        "missing_files": missing_files,
        "nonfinite_steps": loop.nonfinite_steps,
    }
    if args.torch_compile:  # graphs dynamo captured (DDP splits them at bucket boundaries) and compiled pieces
        from torch._dynamo.utils import counters

        results["compiled_graphs"] = counters["stats"]["unique_graphs"]
        results["compiled_subgraphs"] = counters["aot_autograd"]["total"]
        results["graph_breaks"] = sum(counters["graph_break"].values())
    if step == loop.start_step:  # nothing was trained (a resume that only exports): no throughput to report
        del results["clips_per_second_overall"]
    if previous_results is not None:  # a resumed run keeps what the earlier segment reported and this one did not
        results = {**previous_results, **results}
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        if decode_failures:
            missing = f", {missing_files} of them missing on disk" if missing_files else ""
            print(
                f"skipped {decode_failures} file(s) that failed to decode{missing} (replaced by other clips of their "
                f"batch); each file and what was wrong: {loop.failure_log.path}"
            )
        encoders = [unwrapped.aasp] + ([unwrapped.teacher] if args.export_teacher else [])
        needed = sum(p.numel() * p.element_size() for encoder in encoders for p in encoder.state_dict().values())

        def intact():
            return f"{find_latest_checkpoint(output_dir)} is intact and --resume exports from it"

        with refused_writes(output_dir, "the encoder and results", needed, intact):  # a full disk: one line
            export(
                unwrapped,
                loop.feature_extractor,
                output_dir,
                args.export_teacher,
                pretraining_summary(data_args, args, results),
            )
            write_text_atomically(output_dir / "all_results.json", json.dumps(results, indent=2))
        print(
            f"saved the pre-trained encoder to {output_dir / 'encoder'}; load it with\n"
            f"  AutoModel.from_pretrained({str(output_dir / 'encoder')!r}, trust_remote_code=True)"
        )
    accelerator.end_training()
    return results


if __name__ == "__main__":
    run_stoppable(main, "pretrain.py")  # SIGTERM/SIGUSR1/SIGINT: save the step, exit 75 (docs/reliability.md)
