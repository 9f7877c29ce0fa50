# Copyright 2026 The aasp_hf authors. Licensed under the Apache License, Version 2.0.
"""The launch check: a launcher that started several processes whose Accelerator sees one refuses in one line.

torchrun, `accelerate launch`, mpirun and srun tell each process how many there are in the environment. accelerate
joins them into one run only when it recognises the setup: on a CPU-only machine it does so only with
`ACCELERATE_USE_CPU=1` (or `accelerate launch --cpu`'s config); otherwise each process trains alone, as if it were the
only one, and every one of them writes the same output folder (the log twice, each step once per process, and
`num_processes: 1` in the results). `check_launch` refuses that before anything is written.
"""

import os

from ..utils.errors import UsageError

# The variables launchers set to the number of processes: those accelerate reads itself (torchrun / accelerate
# launch, MPICH and Intel MPI, Open MPI, MVAPICH), and srun's task count, which accelerate does not read.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS")


def launched_processes(environ=None) -> tuple[str, int] | None:
    """(variable, number) of the first of `WORLD_SIZE_VARIABLES` in `environ` (default `os.environ`) that says more
    than one process was started, else None."""
    environ = os.environ if environ is None else environ
    for name in WORLD_SIZE_VARIABLES:
        try:
            number = int(environ.get(name, ""))
        except ValueError:
            continue
        if number > 1:
            return name, number
    return None


def launch_mismatch_message(num_processes: int, script: str, environ=None, one_process: bool = False) -> str | None:
    """Why the launch is split, in one line, or None when it is not.

    `num_processes` is what the script's Accelerator sees (`accelerator.num_processes`); `one_process=True` for a
    script that runs in one process only (linear_eval.py), where any launch of several is refused."""
    launched = launched_processes(environ)
    if launched is None or (num_processes > 1 and not one_process):
        return None
    name, number = launched
    if one_process:
        return (
            f"{name}={number}: the launcher started {number} processes, but {script} runs in one process (each "
            f"would do the whole work into the same output folder): start it with `python {script}`"
        )
    if name == "SLURM_STEP_NUM_TASKS":
        return (
            f"{name}={number}: srun started {number} tasks of {script}, but accelerate sees 1 process, so each "
            f"would train alone into the same output folder: run one task per node that starts torchrun or "
            f'`accelerate launch` (docs/pretraining.md, "Several processes and machines")'
        )
    return (
        f"{name}={number}: the launcher started {number} processes, but accelerate sees 1, so each would train "
        f"alone into the same output folder: on CPU set ACCELERATE_USE_CPU=1 for the launch "
        f"(`ACCELERATE_USE_CPU=1 torchrun ...`, `ACCELERATE_USE_CPU=1 accelerate launch ...`)"
    )


def check_launch(num_processes: int, script: str, environ=None, one_process: bool = False) -> None:
    """A `UsageError` with `launch_mismatch_message` when the environment says several processes were launched and
    the script's Accelerator sees one (or, with `one_process=True`, when several were launched at all). Call it right
    after building the Accelerator, before anything is written."""
    message = launch_mismatch_message(num_processes, script, environ, one_process)
    if message is not None:
        raise UsageError(message)
