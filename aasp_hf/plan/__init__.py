"""What a pre-training or fine-tuning run will cost, computed before it runs, without a GPU (`--plan`)."""

from .estimate import (
    accelerator_code_path,
    fake_model,
    flop_counter,
    format_plan,
    highpass_flops,
    measure_fake_step,
    plan_finetuning,
    plan_pretraining,
    pretraining_inputs,
    print_finetuning_plan,
    print_pretraining_plan,
    profiler_peak_bytes,
    run_step,
    sblu_tap_flops,
    sblu_tap_flops_per_element,
    time_data_path,
)
