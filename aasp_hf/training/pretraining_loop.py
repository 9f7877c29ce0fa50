"""The pre-training loop of `examples/pretrain.py` (paper Sec. Training Setup) and what feeds it: from the step the
run starts or resumes at to --max_steps (or --stop_after_steps), each step's update (`step.pretraining_step`:
micro-batches, `apply_update`, EMA teacher), the learning-health monitors, logging (TensorBoard + progress bar),
crash-safe checkpoints and stop signals (`PretrainingLoop`); its micro-batches from the start step on
(`micro_batch_source`); what a resumed checkpoint restores of each process (`restore_process_state`, for
`resume.resume_run`, which returns the `RunState` the loop starts from); and at the end the exported
encoder(s) and results (`write_results`).

A resume repeats what the uninterrupted run would have done (docs/pretraining.md#resuming): the data position is a
pure function of the step (`data_order`), as are the learning rate and the teacher momentum, and each checkpoint
holds every process's random states and, with `--streaming`, its stream position.
"""

import hashlib
import json
import time
from functools import partial
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..data.clips import CollatedMicroBatches, FailureLog, load_micro_batches
from ..data.collators import PretrainingCollator
from ..utils.errors import UsageError
from ..utils.files import write_text_atomically
from ..utils.schedules import learning_rate, teacher_momentum
from .checkpointing import (
    COLLATOR,
    STREAM,
    RunState,
    collator_state,
    latest_checkpoint,
    refused_writes,
    save_checkpoint,
)
from .data_order import clip_order, stream_clip_seeds
from .monitors import is_due, pretraining_health
from .run_log import write_logs, write_rank_summary
from .saved_models import export_encoders, pretraining_summary
from .step import pretraining_step
from .stopping import FailedClipShare, StopAgreement, exit_stopped


def restore_process_state(collator, stream, checkpoint, process_state: dict):
    """The `resume_run` restore of pre-training: this process's collator generator (kept in checkpoints; every clip
    now draws from its own seed) and, with --streaming, the stream's position in its shard."""
    if (state := collator_state(process_state)) is not None:
        collator.load_state_dict(state)
    if stream is not None:
        if STREAM not in process_state:
            raise ValueError(
                f"{checkpoint} was not written by a --streaming run: resume it without "
                "--streaming, or start a streaming run afresh"
            )
        stream.position = dict(process_state[STREAM])


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


class PretrainingLoop:
    """Step 7 of examples/pretrain.py: the training loop from `start.step` to --max_steps (or --stop_after_steps); per
    step 7a. the update (`aasp_hf.training.step.pretraining_step`), 7b. monitors, 7c. logging (TensorBoard + progress
    bar), 7d. crash-safe checkpoints. It keeps what the logs and results need: loss sums since the last log, skipped
    steps, the data seen (a checksum of the clip indices), the clips that failed to decode."""

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
        stream,
        start: RunState,
        current_arguments: dict,
    ):
        self.accelerator, self.model, self.optimizer = accelerator, model, optimizer
        self.unwrapped, self.update_teacher = accelerator.unwrap_model(model), update_teacher
        self.collator, self.batches, self.monitors, self.args = collator, batches, monitors, args
        self.config = self.unwrapped.config
        self.feature_extractor = collator.feature_extractor  # exported with the encoders
        self.stream, self.current_arguments = stream, current_arguments
        self.start_step, self.step, self.nonfinite_steps = start.step, start.step, start.nonfinite_steps or 0
        self.last_logs = start.last_logs
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
            last = latest_checkpoint(self.output_dir)
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
        state = RunState(
            step,
            micro_batches=step * args.gradient_accumulation_steps,
            num_processes=accelerator.num_processes,
            nonfinite_steps=self.nonfinite_steps,
            run_arguments=self.current_arguments,
        )
        process_state = {
            COLLATOR: self.collator.state_dict(),
            **({STREAM: dict(stream.position)} if stream is not None else {}),
        }
        saved = save_checkpoint(accelerator, output_dir, state, process_state, args.save_total_limit)
        if args.export_with_checkpoints and accelerator.is_main_process:
            export_encoders(
                self.unwrapped, self.feature_extractor, output_dir / f"checkpoint-{step}", args.export_teacher
            )
        if data_vanishing is not None:
            raise UsageError(
                f"stopping at step {step}: {data_vanishing}. Saved {output_dir / f'checkpoint-{step}'}"
                f"; each failed file and why: {self.failure_log.path}. Restore the data, then run the "
                "same command with --resume (or raise --max_failed_clip_share)."
            )
        return saved


def write_results(loop: PretrainingLoop, data_args, dataset, elapsed: float, previous_results) -> dict:
    """Step 8 of examples/pretrain.py: export and results. Every process writes a summary (parameter checksums, data
    seen) to check the sync; the main process exports the encoder(s) with their model card and writes
    all_results.json."""
    accelerator, unwrapped, output_dir, step = loop.accelerator, loop.unwrapped, loop.output_dir, loop.step
    args = loop.args
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
            return f"{latest_checkpoint(output_dir)} is intact and --resume exports from it"

        with refused_writes(output_dir, "the encoder and results", needed, intact):  # a full disk: one line
            export_encoders(
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
