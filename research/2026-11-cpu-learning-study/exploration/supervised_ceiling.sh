#!/usr/bin/env bash
# Scratch (issue 12, session 9): the supervised reference of supervised_ceiling.py for one seed S. For each mini
# task, trains the tiny preset's step-0 initialisation of seed S (study tiny-500, variant frozen_patch_embedding) on
# that task's labelled train split, stem frozen and stem trained, saving at 25/50/100/300/1000 steps; then probes
# every saved encoder on its own task with the study's protocol. From the repository root:
#   bash benchmarks/quality/exploration/supervised_ceiling.sh S   (S = 0..3; runs/supervised/, git-ignored; the
#   probe and training lines are copied into supervised_ceiling.jsonl)
set -euo pipefail
S=$1
INIT=benchmarks/quality/runs/tiny-500/pretrain/frozen_patch_embedding/seed$S/encoders/step0
OUT=benchmarks/quality/runs/supervised
STEPS="25 50 100 300 1000"
for TASK in instrument pitch speech; do
  for STEM in frozen trained; do
    FLAG=""; [ $STEM = trained ] && FLAG="--train_stem"
    DIR=$OUT/${STEM}_s$S/$TASK
    (cd benchmarks/quality/exploration && OMP_NUM_THREADS=1 ../../../.venv/bin/python supervised_ceiling.py \
      --init ../../../$INIT --task $TASK --seed $S --steps $STEPS --out_dir ../../../$DIR $FLAG) 2>/dev/null \
      | tee -a $OUT/train_s$S.jsonl
    PAIRS=""; for N in $STEPS; do PAIRS="$PAIRS ${STEM}_${TASK}_s${S}_$N=$DIR/step$N"; done
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/quality/probe_encoders.py init_${TASK}_s$S=$INIT $PAIRS \
      --tasks $TASK --data_dir benchmarks/quality/data --output_dir benchmarks/quality/runs \
      --out $DIR/probe.json 2>/dev/null | grep '"name"' | tee -a $OUT/probe_s$S.jsonl
  done
done
