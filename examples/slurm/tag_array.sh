#!/bin/bash
# Tagging a corpus larger than one machine under SLURM: a job array of N tasks, task K tagging part K of N of the
# files found (`python -m aasp_hf.tag --shard K/N`) into outputs of its own. docs/inference.md, "A corpus across
# machines".
#
#   sbatch --array=1-8 examples/slurm/tag_array.sh tags/ --model runs/classifier /data/recordings
#
# The first argument is the folder of the outputs; the others are the tagger's, the same for every task (not
# --output, --events or --shard: the script gives each task its own). Task K writes tags/tags.K.csv, with its ledger
# and failures file beside it, and with EVENTS=1 in its environment (`sbatch --export=ALL,EVENTS=1 ...`) also
# tags/events.K.tsv. Every task finds the same files and keeps those whose resolved path hashes to its part, so the N
# tasks tag each file once, provided they see the files at the same paths (one shared file system). Once every task
# has finished, one table and one events file, each with its header once:
#
#   awk 'FNR > 1 || NR == 1' tags/tags.*.csv > tags.csv
#   awk 'FNR > 1 || NR == 1' tags/events.*.tsv > events.tsv
#
# They hold the rows of one process tagging the whole corpus, each once, in another order of the files.
# A task that was stopped (SLURM's SIGTERM at the time limit: the tagger finishes its batch and exits 75) or that
# failed goes on where it was when run again: the same sbatch command runs every task again, and those that had
# finished find all their files done. To run some tasks again alone, keep N: `sbatch --array=3,5
# --export=ALL,SHARDS=8 ...`, since SLURM counts the tasks of that array alone (2 here: part 3 of 2 would be refused,
# and part 1 of 1 would be every file).
#
# PYTHON and DEVICE can be set from outside (tests/test_tag_shards.py runs this file without SLURM: its interpreter as
# PYTHON, DEVICE=cpu, and SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT set as SLURM sets them).
#SBATCH --job-name=aasp-tag
#SBATCH --array=1-8
#SBATCH --gpus=1
#SBATCH --cpus-per-task=4
#SBATCH --time=12:00:00
#SBATCH --output=%x-%A_%a.out

set -e
k=${SLURM_ARRAY_TASK_ID:?run this file as a job array: sbatch --array=1-N examples/slurm/tag_array.sh OUT_DIR ...}
n=${SHARDS:-${SLURM_ARRAY_TASK_COUNT:?run this file as a job array: sbatch --array=1-N ...}}
out_dir=${1:?the first argument is the folder of the outputs, e.g. tags/}
shift
events=()
if [ -n "${EVENTS:-}" ]; then
    events=(--events "$out_dir/events.$k.tsv")
fi
mkdir -p "$out_dir"

# --device cuda: the task's own GPU (SLURM shows each task the GPU it was given as cuda:0); the arguments given to
# the script come after it, so that they can change it (and add --num_workers, to decode in more processes)
# shellcheck disable=SC2086  # PYTHON may be a command line of several words
exec ${PYTHON:-python} -m aasp_hf.tag --device "${DEVICE:-cuda}" "$@" \
    --shard "$k/$n" --output "$out_dir/tags.$k.csv" "${events[@]}"
