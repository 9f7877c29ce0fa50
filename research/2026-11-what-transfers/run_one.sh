#!/bin/bash
# run_one.sh NAME DATA_ROOT ENCODER [extra finetune.py flags]: the documented small-folder command at the study's commit
name=$1; root=$2; encoder=$3; shift 3
[ -e /tmp/s60b/logs/$name.log ] && exit 0
cd /work/study
cmd="PYTHONPATH=/work/study OMP_NUM_THREADS=1 .venv/bin/python examples/finetune.py --config examples/configs/finetune/small_folder.json --model_name_or_path $encoder --dataset audiofolder --data_root $root --output_dir /tmp/s60b/runs/$name $( (( $# )) && printf "%q " "$@")"
echo "$cmd" > /tmp/s60b/logs/$name.cmd
start=$(date +%s); load0=$(cut -d' ' -f1-3 /proc/loadavg)
eval "$cmd" > /tmp/s60b/logs/$name.log 2>&1
rc=$?
echo "rc=$rc seconds=$(( $(date +%s) - start )) start_load $load0 end_load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/s60b/logs/$name.log
