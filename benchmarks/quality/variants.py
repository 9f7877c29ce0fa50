"""The variants of `benchmarks/quality/run.py` (`make study`), the model sizes and the quick mode.

A variant is a named set of overrides on top of the base recipe (`examples/configs/pretrain_small_quality.json`):

    "model_config": AaspConfig fields (merged into the preset's "model_config")
    "train":        examples/pretrain.py arguments (learning_rate, warmup_steps, crop_seconds, ...)
    "kind":         "pretrain" (default): pre-train and probe the encoder at each probe step (step 0 = its
                    initialisation); "random_init": probe the initialisation only (no pre-training);
                    "logmel": no network, log-mel mean and std over time per mel bin (the feature baseline)
    "about":        one line for the results table

More variants can come from a JSON file of the same shape (`run.py --variants_file my_variants.json`), e.g. to
tune the recipe without editing this file. Symbols: η_u = clip_loss_weight, η_c = contrastive_loss_weight.
"""

BASE = "aape_symmetric"

VARIANTS = {
    "logmel": {"kind": "logmel", "about": "log-mel mean + std over time per mel bin, no network"},
    "random_init": {"kind": "random_init", "about": "AaPE (symmetric), initialisation only"},
    "random_init_spe": {
        "kind": "random_init",
        "model_config": {"patch_embedding": "spe"},
        "about": "SPE, initialisation only",
    },
    "aape_symmetric": {"about": "the base recipe: AaPE, symmetric SBLU phase"},
    "aape_analytic": {"model_config": {"sblu_phase": "analytic"}, "about": "AaPE, analytic (one-sided) SBLU phase"},
    "spe": {"model_config": {"patch_embedding": "spe"}, "about": "standard 16×16 patch embedding"},
    "no_contrastive": {"model_config": {"contrastive_loss_weight": 0.0}, "about": "η_c = 0 (no L_c)"},
    "ffn_targets": {
        "model_config": {"target_layer": "ffn"},
        "about": "teacher targets: FFN output before the residual (EAT, data2vec 2.0)",
    },
    "eat_loss_scaling": {"model_config": {"loss_scaling": "eat"}, "about": "EAT's loss reductions"},
    "full_stem": {
        "model_config": {"student_stem_input": "full"},
        "about": "student stem on the full clip, hidden tokens dropped after it (EAT's order)",
    },
    "channel_norm_targets": {
        "model_config": {"target_norm_axis": "channels"},
        "about": "targets normalised per token across channels (the paper's wording)",
    },
    "frozen_patch_embedding": {
        "train": {"patch_embedding_lr_scale": 0.0},
        "about": "patch embedding frozen at its initialisation (MoCo v3's random patch "
        "projection); the blocks, CLS, predictor and heads train",
    },
    "slow_patch_embedding": {
        "train": {"patch_embedding_lr_scale": 0.1},
        "about": "patch embedding at 0.1 × the learning rate",
    },
    "random_teacher": {
        "train": {"teacher_momentum_base": 1.0, "teacher_momentum_final": 1.0},
        "about": "teacher frozen at the shared initialisation (momentum 1): the student regresses a "
        "random network's features",
    },
    "slow_teacher": {
        "train": {"teacher_momentum_base": 0.9998, "teacher_momentum_final": 1.0},
        "about": "EAT's teacher momentum 0.9998 → 1 instead of DINOv2's 0.994 → 1",
    },
    "mask_ratio_50": {
        "model_config": {"mask_ratio": 0.5},
        "about": "mask ratio 0.5 instead of 0.8: the student sees half of each clip",
    },
    "pre_norm": {
        "model_config": {"layer_norm_first": True},
        "about": "pre-norm blocks (LayerNorm before attention and MLP; the residual stream carries the stem)",
    },
    "eat_faithful": {
        "model_config": {"target_layer": "ffn", "loss_scaling": "eat", "student_stem_input": "full"},
        "about": "the three EAT fidelity options together",
    },
}

# What `--variants all` runs, in table order (every variant above).
DEFAULT_VARIANTS = list(VARIANTS)

# Model sizes: AaspConfig overrides applied on top of the preset's model_config ("small" = the preset as is).
MODEL_SIZES = {
    "tiny": {  # a smoke test of the whole pipeline in minutes on a CPU, not a result
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "sblu_hidden_size": 16,
        "sblu_output_size": 64,
        "sblu_kernel_size": 15,
        "lambda_encoder_reduction": 4,
        "lambda_encoder_num_layers": 1,
        "lambda_encoder_num_attention_heads": 2,
        "predictor_hidden_size": 64,
        "predictor_num_layers": 1,
        "predictor_num_attention_heads": 4,
    },
    "small": {},
    "base": {  # the paper's ViT-B encoder and stem (a GPU job)
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "sblu_hidden_size": 128,
        "sblu_output_size": 1024,
        "sblu_kernel_size": 63,
        "lambda_encoder_reduction": 6,
        "lambda_encoder_num_layers": 3,
        "lambda_encoder_num_attention_heads": 2,
        "predictor_hidden_size": 512,
        "predictor_num_layers": 3,
        "predictor_num_attention_heads": 16,
    },
}

# `--quick`: does pre-training learn at all? (AaPE and SPE against their initialisations and log-mel.)
# Estimated from measured parts (2 shared CPU cores, one thread): pre-training 2 × 400 steps × ~1.5 s ≈ 20 min,
# 5 probes of the 3 mini tasks × ~1.5 min ≈ 8 min. Each of these can be overridden on the command line.
QUICK = {
    "variants": ["logmel", "random_init", "aape_symmetric", "spe"],
    "seeds": [0],
    "max_steps": 400,
    "probe_fractions": [0.0, 1.0],
    "probe_seeds": [0],
}
