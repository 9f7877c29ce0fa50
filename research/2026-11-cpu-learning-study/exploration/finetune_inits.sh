#!/usr/bin/env bash
# Fine-tune one exported encoder on the three mini tasks with one fixed recipe (issue 12: does pre-training help
# when the whole network trains, not only a linear head?). Same recipe, same seed, same steps for every encoder:
#   bash benchmarks/quality/exploration/finetune_inits.sh NAME ENCODER_FOLDER OUT_ROOT [extra finetune.py flags]
# e.g. NAME=init ENCODER=runs/small-1000/pretrain/aape_symmetric/seed0/encoders/step0 (the run's initialisation)
# and  NAME=pt1000 ENCODER=.../encoders/step1000 (the same network after 1,000 pre-training steps).
# Selection: the best validation accuracy (10 % of train, seed 0) within the budget, test accuracy at that step.
set -euo pipefail
NAME=$1; ENCODER=$2; OUT=$3; shift 3
DATA=${DATA:-benchmarks/quality/data/tasks}
for TASK in instrument pitch speech; do
  OMP_NUM_THREADS=${THREADS:-1} python examples/finetune.py --model_name_or_path "$ENCODER" \
    --dataset audiofolder --data_root "$DATA/$TASK" --clip_seconds 1.5 \
    --per_device_train_batch_size 32 --max_steps 300 --warmup_steps 30 --learning_rate 5e-4 --layer_decay 0.75 \
    --drop_path_rate 0.1 --spec_augment true --mixup_alpha 0 --ema_decay 0.99 --eval_steps 50 \
    --save_steps 100000 --seed 0 --output_dir "$OUT/$NAME/$TASK" --overwrite_output_dir true "$@"
done
