#!/bin/bash
# The study's runs, in the order worker.sh took them from its queue (two workers): each line is run_one.sh NAME DATA_ROOT
# ENCODER [FLAGS]. Paths are those of the machine it ran on: /tmp/s60 = the previous study's data and encoder
# (research/2026-11-unseen-voices/build_data.py), /tmp/s60b = build_variants.py's output, /tmp/s60c = the 8-kHz voices
# (research/2026-11-short-clip-finetuning/build_data.py --encoders).
/tmp/s60b/run_one.sh last_fold0_s1 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --select_on last --seed 1
/tmp/s60b/run_one.sh last_fold1_s1 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --select_on last --seed 1
/tmp/s60b/run_one.sh last_fold2_s1 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --select_on last --seed 1
/tmp/s60b/run_one.sh last_fold3_s1 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --select_on last --seed 1
/tmp/s60b/run_one.sh groupval_fold1_s0 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 0
/tmp/s60b/run_one.sh last_fold2_s0 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --select_on last --seed 0
/tmp/s60b/run_one.sh last_fold0_s2 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --select_on last --seed 2
/tmp/s60b/run_one.sh last_fold1_s2 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --select_on last --seed 2
/tmp/s60b/run_one.sh last_fold2_s2 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --select_on last --seed 2
/tmp/s60b/run_one.sh last_fold3_s2 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --select_on last --seed 2
/tmp/s60b/run_one.sh groupval_fold0_s1 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 1
/tmp/s60b/run_one.sh groupval_fold1_s1 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 1
/tmp/s60b/run_one.sh groupval_fold2_s1 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 1
/tmp/s60b/run_one.sh groupval_fold3_s1 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 1
/tmp/s60b/run_one.sh groupval_fold0_s2 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 2
/tmp/s60b/run_one.sh groupval_fold1_s2 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 2
/tmp/s60b/run_one.sh groupval_fold2_s2 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 2
/tmp/s60b/run_one.sh groupval_fold3_s2 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --group_by '^([a-z0-9-]+)_' --seed 2
/tmp/s60b/run_one.sh dsnorm_fold0_s0 /tmp/s60/data/fold0 /tmp/s60b/enc/tiny_dsnorm_fold0 --select_on last
/tmp/s60b/run_one.sh dsnorm_fold1_s0 /tmp/s60/data/fold1 /tmp/s60b/enc/tiny_dsnorm_fold1 --select_on last
/tmp/s60b/run_one.sh dsnorm_fold2_s0 /tmp/s60/data/fold2 /tmp/s60b/enc/tiny_dsnorm_fold2 --select_on last
/tmp/s60b/run_one.sh dsnorm_fold3_s0 /tmp/s60/data/fold3 /tmp/s60b/enc/tiny_dsnorm_fold3 --select_on last
/tmp/s60b/run_one.sh rms_fold0_s0 /tmp/s60b/data/fold0_rms /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh rms_fold1_s0 /tmp/s60b/data/fold1_rms /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh lastall_all_s0 /tmp/s60/data/all /tmp/s60/enc/tiny --select_on last --seed 0
/tmp/s60b/run_one.sh lastall_all_s1 /tmp/s60/data/all /tmp/s60/enc/tiny --select_on last --seed 1
/tmp/s60b/run_one.sh lastall_all_s2 /tmp/s60/data/all /tmp/s60/enc/tiny --select_on last --seed 2
/tmp/s60b/run_one.sh rms_fold2_s0 /tmp/s60b/data/fold2_rms /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh rms_fold3_s0 /tmp/s60b/data/fold3_rms /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh mixup_fold0_s0 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --select_on last --mixup_alpha 0.5
/tmp/s60b/run_one.sh mixup_fold1_s0 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --select_on last --mixup_alpha 0.5
/tmp/s60b/run_one.sh mixup_fold2_s0 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --select_on last --mixup_alpha 0.5
/tmp/s60b/run_one.sh mixup_fold3_s0 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --select_on last --mixup_alpha 0.5
/tmp/s60b/run_one.sh cls_fold0_s0 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --select_on last --classifier_pooling cls
/tmp/s60b/run_one.sh cls_fold1_s0 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --select_on last --classifier_pooling cls
/tmp/s60b/run_one.sh cls_fold2_s0 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --select_on last --classifier_pooling cls
/tmp/s60b/run_one.sh v8preset_random_s0 /tmp/s60c/data/voices_random /tmp/s60c/encoders/tiny --seed 0
/tmp/s60b/run_one.sh v8last_random_s0 /tmp/s60c/data/voices_random /tmp/s60c/encoders/tiny --select_on last --seed 0
/tmp/s60b/run_one.sh v8last_random_s1 /tmp/s60c/data/voices_random /tmp/s60c/encoders/tiny --select_on last --seed 1
/tmp/s60b/run_one.sh v8last_random_s2 /tmp/s60c/data/voices_random /tmp/s60c/encoders/tiny --select_on last --seed 2
/tmp/s60b/run_one.sh v8last_unseen_s0 /tmp/s60c/data/voices_unseen /tmp/s60c/encoders/tiny --select_on last --seed 0
/tmp/s60b/run_one.sh v8last_unseen_s1 /tmp/s60c/data/voices_unseen /tmp/s60c/encoders/tiny --select_on last --seed 1
/tmp/s60b/run_one.sh cls_fold3_s0 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --select_on last --classifier_pooling cls
/tmp/s60b/run_one.sh nospec_fold0_s0 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --select_on last --no_spec_augment
/tmp/s60b/run_one.sh nospec_fold1_s0 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --select_on last --no_spec_augment
/tmp/s60b/run_one.sh nospec_fold2_s0 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --select_on last --no_spec_augment
/tmp/s60b/run_one.sh nospec_fold3_s0 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --select_on last --no_spec_augment
/tmp/s60b/run_one.sh half_fold0_s0 /tmp/s60b/data/fold0_half /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh seen_fold0_s0 /tmp/s60b/data/fold0_seen /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh half_fold1_s0 /tmp/s60b/data/fold1_half /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh seen_fold1_s0 /tmp/s60b/data/fold1_seen /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh half_fold2_s0 /tmp/s60b/data/fold2_half /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh seen_fold2_s0 /tmp/s60b/data/fold2_seen /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh half_fold3_s0 /tmp/s60b/data/fold3_half /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh seen_fold3_s0 /tmp/s60b/data/fold3_seen /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh steps3000_fold0_s0 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --select_on last --max_steps 3000
/tmp/s60b/run_one.sh steps3000_fold1_s0 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --select_on last --max_steps 3000
/tmp/s60b/run_one.sh steps3000_fold2_s0 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --select_on last --max_steps 3000
/tmp/s60b/run_one.sh steps3000_fold3_s0 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --select_on last --max_steps 3000
/tmp/s60b/run_one.sh deep_fold0_s0 /tmp/s60/data/fold0 /tmp/s60b/enc/tiny_deep --select_on last
/tmp/s60b/run_one.sh deep_fold1_s0 /tmp/s60/data/fold1 /tmp/s60b/enc/tiny_deep --select_on last
/tmp/s60b/run_one.sh deep_fold2_s0 /tmp/s60/data/fold2 /tmp/s60b/enc/tiny_deep --select_on last
/tmp/s60b/run_one.sh deep_fold3_s0 /tmp/s60/data/fold3 /tmp/s60b/enc/tiny_deep --select_on last
/tmp/s60b/run_one.sh wide_fold0_s0 /tmp/s60/data/fold0 /tmp/s60b/enc/tiny_wide --select_on last
/tmp/s60b/run_one.sh wide_fold1_s0 /tmp/s60/data/fold1 /tmp/s60b/enc/tiny_wide --select_on last
/tmp/s60b/run_one.sh wide_fold2_s0 /tmp/s60/data/fold2 /tmp/s60b/enc/tiny_wide --select_on last
/tmp/s60b/run_one.sh wide_fold3_s0 /tmp/s60/data/fold3 /tmp/s60b/enc/tiny_wide --select_on last
/tmp/s60b/run_one.sh spec04_fold0_s0 /tmp/s60/data/fold0 /tmp/s60/enc/tiny --select_on last --spec_augment_fraction 0.4
/tmp/s60b/run_one.sh spec04_fold1_s0 /tmp/s60/data/fold1 /tmp/s60/enc/tiny --select_on last --spec_augment_fraction 0.4
/tmp/s60b/run_one.sh spec04_fold2_s0 /tmp/s60/data/fold2 /tmp/s60/enc/tiny --select_on last --spec_augment_fraction 0.4
/tmp/s60b/run_one.sh spec04_fold3_s0 /tmp/s60/data/fold3 /tmp/s60/enc/tiny --select_on last --spec_augment_fraction 0.4
/tmp/s60b/run_one.sh noise_fold0_s0 /tmp/s60b/data/fold0_noise /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh noise_fold1_s0 /tmp/s60b/data/fold1_noise /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh noise_fold2_s0 /tmp/s60b/data/fold2_noise /tmp/s60/enc/tiny --select_on last
/tmp/s60b/run_one.sh noise_fold3_s0 /tmp/s60b/data/fold3_noise /tmp/s60/enc/tiny --select_on last
