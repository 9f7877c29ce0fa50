#!/bin/bash
# The study's runs, in the order they were queued (two at a time): each line is run_one.sh NAME DATA_ROOT [FLAGS].
# run_one.sh writes logs/NAME.cmd (the full command) and logs/NAME.log (its output, the seconds and the load) and the
# run folder runs/NAME; collect.py reads them. Paths are those of the machine it ran on (/tmp/s60 = /tmp/voices).
/tmp/s60/run_one.sh preset_fold0_randomval_s0 /tmp/s60/data/fold0
/tmp/s60/run_one.sh preset_fold2_groupval_s0 /tmp/s60/data/fold2 --group_by '^([a-z0-9-]+)_'
/tmp/s60/run_one.sh preset_fold0_groupval_s0 /tmp/s60/data/fold0 --group_by '^([a-z0-9-]+)_'
/tmp/s60/run_one.sh preset_fold1_groupval_s0 /tmp/s60/data/fold1 --group_by '^([a-z0-9-]+)_'
/tmp/s60/run_one.sh preset_fold3_groupval_s0 /tmp/s60/data/fold3 --group_by '^([a-z0-9-]+)_'
/tmp/s60/run_one.sh preset_fold1_randomval_s0 /tmp/s60/data/fold1
/tmp/s60/run_one.sh preset_fold2_randomval_s0 /tmp/s60/data/fold2
/tmp/s60/run_one.sh preset_fold3_randomval_s0 /tmp/s60/data/fold3
/tmp/s60/run_one.sh preset_all_random_s0 /tmp/s60/data/all
/tmp/s60/run_one.sh aug_fold0_groupval_s0 /tmp/s60/data/fold0_aug --group_by '^([a-z0-9-]+)_'
/tmp/s60/run_one.sh aug_fold1_groupval_s0 /tmp/s60/data/fold1_aug --group_by '^([a-z0-9-]+)_'
/tmp/s60/run_one.sh aug_fold2_groupval_s0 /tmp/s60/data/fold2_aug --group_by '^([a-z0-9-]+)_'
/tmp/s60/run_one.sh aug_fold3_groupval_s0 /tmp/s60/data/fold3_aug --group_by '^([a-z0-9-]+)_'
/tmp/s60/run_one.sh val25_fold0_groupval_s0 /tmp/s60/data/fold0 --group_by '^([a-z0-9-]+)_' --validation_fraction 0.25
/tmp/s60/run_one.sh val25_fold1_groupval_s0 /tmp/s60/data/fold1 --group_by '^([a-z0-9-]+)_' --validation_fraction 0.25
/tmp/s60/run_one.sh val25_fold2_groupval_s0 /tmp/s60/data/fold2 --group_by '^([a-z0-9-]+)_' --validation_fraction 0.25
/tmp/s60/run_one.sh val25_fold3_groupval_s0 /tmp/s60/data/fold3 --group_by '^([a-z0-9-]+)_' --validation_fraction 0.25
/tmp/s60/run_one.sh preset_all_random_s1 /tmp/s60/data/all --seed 1
/tmp/s60/run_one.sh preset_all_random_s2 /tmp/s60/data/all --seed 2
/tmp/s60/run_one.sh last_fold0_none_s0 /tmp/s60/data/fold0 --select_on last
/tmp/s60/run_one.sh last_fold1_none_s0 /tmp/s60/data/fold1 --select_on last
/tmp/s60/run_one.sh last_fold2_none_s0 /tmp/s60/data/fold2 --select_on last
/tmp/s60/run_one.sh last_fold3_none_s0 /tmp/s60/data/fold3 --select_on last
