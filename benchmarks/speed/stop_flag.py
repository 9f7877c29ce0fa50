"""What the stop flag (aasp_hf.training.stopping) costs per training step, as a ratio measured in one run.

Two processes on this machine (gloo, one torch thread each) train the tiny preset's model
(examples/configs/pretrain_tiny_cpu.json, 16 clips per process) as the scripts do, each variant timed interleaved with
its baseline, the same steps on both sides:

- pretrain: forward, backward and `training.step.apply_update` (clip, the non-finite flag's all-reduce, fused AdamW,
  EMA teacher) without the stop flag, against the same with it: the flag rides in that all-reduce (`stop=`), and the
  summed flag is read back (`StopAgreement.agreed`) as pretrain.py does on the CPU.
- finetune: AaspForAudioClassification's forward, backward, clipping and AdamW step, against the same plus the one
  all-reduce of one number that finetune.py adds with several processes (`stop_agreed`).

    python benchmarks/speed/stop_flag.py [--steps 10] [--repeats 15]

Prints the median ms per step of each variant, the median ratio of adjacent blocks (with / without: drifts of the
machine cancel) with its quartiles, the same in process CPU time, and the absolute cost of what the flag adds timed
alone (many calls: pretrain the flag's fill, the two-number tensor and the read back; finetune the all-reduce of one
number between the two processes); writes stop_flag.json beside this file. A tiny
model makes a step short, so the flag's share is as large as it gets; on the CPU the host waits for nothing, so the
GPU path (the flag read one step late) is not measured here.
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
PRESET = HERE.parents[1] / "examples" / "configs" / "pretrain_tiny_cpu.json"
BATCH = 16


def worker(rank: int, world: int, port: int, steps: int, repeats: int, results):
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        ACCELERATE_USE_CPU="1",
    )
    torch.set_num_threads(1)
    from accelerate import Accelerator

    from aasp_hf import AaspConfig, AaspForAudioClassification, AaspForPreTraining
    from aasp_hf.data.masking import sample_batch_masks
    from aasp_hf.training.step import apply_update
    from aasp_hf.utils.entry_points import StopSignals
    from aasp_hf.training.stopping import StopAgreement, stop_agreed

    accelerator = Accelerator(cpu=True)
    model_config = json.loads(PRESET.read_text())["model_config"]
    config = AaspConfig(**model_config)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(BATCH, config.num_frames, config.num_mel_bins, generator=g)
    masks = sample_batch_masks(config, BATCH, generator=g)

    torch.manual_seed(0)
    pretraining = AaspForPreTraining(config)
    optimizer = torch.optim.AdamW(pretraining.parameters(), lr=1e-4, fused=True)
    pretraining, optimizer = accelerator.prepare(pretraining, optimizer)
    request = StopSignals()  # never signalled: the flag is 0, as in every step but the last of a stopped run
    agreement = StopAgreement(accelerator.device, request)
    momentum = torch.tensor(0.99, dtype=torch.float64)

    def pretrain_step(with_stop: bool):
        loss = pretraining(x, masks["visible_indices"], masks["query_indices"]).loss
        accelerator.backward(loss)
        finite = torch.isfinite(loss.detach())
        if with_stop:
            _, _, stops = apply_update(
                accelerator, optimizer, pretraining, finite, 4.0, momentum, stop=agreement.local()
            )
            assert not agreement.agreed(stops)
        else:
            apply_update(accelerator, optimizer, pretraining, finite, 4.0, momentum)

    torch.manual_seed(0)
    classifier = AaspForAudioClassification(AaspConfig(**model_config, num_labels=10))
    labels = torch.randint(0, 10, (BATCH,), generator=g)
    classifier_optimizer = torch.optim.AdamW(classifier.parameters(), lr=1e-4)
    classifier, classifier_optimizer = accelerator.prepare(classifier, classifier_optimizer)

    def finetune_step(with_stop: bool):
        loss = torch.nn.functional.cross_entropy(classifier(input_values=x).logits, labels)
        accelerator.backward(loss)
        loss.item()  # finetune.py reads its loss back each micro-batch
        accelerator.clip_grad_norm_(classifier.parameters(), 4.0)
        classifier_optimizer.step()
        classifier_optimizer.zero_grad(set_to_none=True)
        if with_stop:
            assert not stop_agreed(accelerator, request)

    def extra_work():  # what the flag adds to a pretrain step besides the second number in the all-reduce
        flags = torch.cat([torch.zeros(1), agreement.local().reshape(1)])
        return bool(flags[1] > 0)

    measured = {}
    for name, step in (("pretrain", pretrain_step), ("finetune", finetune_step)):
        for with_stop in (False, True):  # warm-up
            step(with_stop)
        wall, cpu = {False: [], True: []}, {False: [], True: []}
        for repeat in range(repeats):
            for with_stop in (False, True) if repeat % 2 == 0 else (True, False):  # alternate which goes first
                accelerator.wait_for_everyone()
                start, start_cpu = time.perf_counter(), time.process_time()
                for _ in range(steps):
                    step(with_stop)
                wall[with_stop].append((time.perf_counter() - start) * 1e3 / steps)
                cpu[with_stop].append((time.process_time() - start_cpu) * 1e3 / steps)
        # each block with the flag against the block without it next to it: slow drifts of the machine cancel
        pairs = sorted(w / wo for w, wo in zip(wall[True], wall[False]))
        cpu_pairs = sorted(w / wo for w, wo in zip(cpu[True], cpu[False]))
        measured[name] = {
            "ms_per_step_without": statistics.median(wall[False]),
            "ms_per_step_with_stop_flag": statistics.median(wall[True]),
            "ratio": statistics.median(pairs),
            "ratio_quartiles": statistics.quantiles(pairs, n=4)[::2],
            "cpu_ratio": statistics.median(cpu_pairs),
            "cpu_ratio_quartiles": statistics.quantiles(cpu_pairs, n=4)[::2],
        }
    # the absolute cost of what is added, in microseconds per step, timed alone (many calls)
    calls = 2000
    accelerator.wait_for_everyone()
    start = time.perf_counter()
    for _ in range(calls):
        extra_work()
    measured["pretrain"]["added_us_per_step"] = (time.perf_counter() - start) * 1e6 / calls
    accelerator.wait_for_everyone()
    start = time.perf_counter()
    for _ in range(calls):
        stop_agreed(accelerator, request)
    measured["finetune"]["added_us_per_step"] = (time.perf_counter() - start) * 1e6 / calls
    if rank == 0:
        results.update(measured)
    accelerator.wait_for_everyone()


def main(argv=None):
    from aasp_hf.utils.errors import parse_command_line

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--repeats", type=int, default=15, help="timed blocks per variant (interleaved)")
    args = parse_command_line(parser, argv)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(worker, args=(2, port, args.steps, args.repeats, results), nprocs=2)
        results = dict(results)
    report = {
        "processes": 2,
        "backend": "gloo",
        "batch_per_process": BATCH,
        "steps_per_block": args.steps,
        "blocks": args.repeats,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        **results,
    }
    for name in ("pretrain", "finetune"):
        r = results[name]
        print(
            f"{name}: {r['ms_per_step_without']:.2f} ms/step without, {r['ms_per_step_with_stop_flag']:.2f} with "
            f"the stop flag: ratio {r['ratio']:.3f} (quartiles of the block pairs {r['ratio_quartiles'][0]:.3f}–"
            f"{r['ratio_quartiles'][1]:.3f}), CPU-time ratio {r['cpu_ratio']:.3f}; what the flag adds, timed alone: "
            f"{r['added_us_per_step']:.1f} µs per step"
        )
    (HERE / "stop_flag.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
