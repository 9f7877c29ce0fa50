#!/bin/bash
# run_one.sh NAME DATA_ROOT [extra finetune.py flags]: the documented small-folder command with the study's encoder
name=$1; root=$2; shift 2
cd /work/main
cmd="OMP_NUM_THREADS=1 .venv/bin/python examples/finetune.py --config examples/configs/finetune/small_folder.json --model_name_or_path /tmp/s60/enc/tiny --dataset audiofolder --data_root $root --output_dir /tmp/s60/runs/$name $( (( $# )) && printf "%q " "$@")"
echo "$cmd" > /tmp/s60/logs/$name.cmd
start=$(date +%s); load0=$(cut -d' ' -f1-3 /proc/loadavg)
eval "$cmd" > /tmp/s60/logs/$name.log 2>&1
rc=$?
echo "rc=$rc seconds=$(( $(date +%s) - start )) start_load $load0 end_load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/s60/logs/$name.log
