#!/bin/bash
# run.sh NAME SEED 'MODEL_JSON_OVERRIDES' [extra args]
cd /work/main
NAME=$1; SEED=$2; OV=$3; shift 3
MC=$(.venv/bin/python -c "
import json,sys; b=json.load(open('/tmp/exp/base.json'))['model_config']; b.update(json.loads(sys.argv[1])); print(json.dumps(b))" "$OV")
OMP_NUM_THREADS=1 .venv/bin/python examples/pretrain.py --config /tmp/exp/base.json --model_config "$MC" --seed $SEED \
  --log_mel_cache /tmp/exp/cache --output_dir /tmp/exp/runs/$NAME --monitor_steps 100 \
  --probe_dataset benchmarks/quality/data/tasks/instrument --probe_steps 250 --probe_max_clips 300 "$@" > /tmp/exp/runs/$NAME.log 2>&1
