#!/usr/bin/env bash
# Scratch (issue 12, session 8): "generation 2" of the tiny frozen-stem recipe. Starts from the 500-step student of
# examples/configs/pretrain_tiny_quality.json (study tiny-500, variant frozen_patch_embedding, seed S), trains 500 more
# steps with the same preset and seed (so the same clips and masks in the same order), the teacher starting as that
# student and either frozen there (momentum 1) or the preset's EMA; the stem stays the original frozen random one.
# Then probes both students with the study's protocol. Usage, from the repository root:
#   bash benchmarks/quality/exploration/generation2.sh S   (S = 0..3; results in runs/gen2/, git-ignored;
#   their probe lines are copied into generation2.jsonl)
set -euo pipefail
S=$1
G1=benchmarks/quality/runs/tiny-500/pretrain/frozen_patch_embedding/seed$S/encoder
CACHE=benchmarks/quality/runs/cache/pretrain-logmel-128bins
for T in frozen ema; do
  EXTRA=""; [ $T = frozen ] && EXTRA="--teacher_momentum_base 1 --teacher_momentum_final 1"
  OMP_NUM_THREADS=1 .venv/bin/python examples/pretrain.py --config examples/configs/pretrain_tiny_quality.json \
    --init_from $G1 --seed $S --log_mel_cache $CACHE --output_dir runs/gen2/${T}_s$S $EXTRA > runs/gen2_${T}_s$S.log 2>&1
done
OMP_NUM_THREADS=1 .venv/bin/python benchmarks/quality/probe_encoders.py gen2_frozen_s$S=runs/gen2/frozen_s$S/encoder \
  gen2_ema_s$S=runs/gen2/ema_s$S/encoder --data_dir benchmarks/quality/data --output_dir benchmarks/quality/runs \
  --out runs/gen2/probe_s$S.json > runs/gen2_probe_s$S.log 2>&1
