/* lfm2_moe.c — the LFM2_MOE family (model_type "lfm2_moe"): the LFM2 hybrid decoder
 * (lfm2.h: short-conv and attention layers by layer_types) whose feed-forward past the first
 * num_dense_layers is a MoE: router σ(x · gateᵀ), top-k on σ + expert_bias (when
 * use_expert_bias), weights = the unbiased σ of the chosen experts, divided by
 * (their sum + 1e-6) when norm_topk_prob, times routed_scaling_factor; SwiGLU experts of
 * width moe_intermediate_size. The dense layers use intermediate_size as is (no auto-adjust). */
#include "lfm2.h"

static int lfm2_moe_load(ci_model *m, char *err, size_t errlen) {
    lfm2_opts o = { .moe = 1 };
    return lfm2_load(m, &o, err, errlen);
}

static const ci_family_ops lfm2_moe_ops = {
    .load = lfm2_moe_load, .unload = lfm2_unload,
    .session_init = lfm2_session_init, .session_free = lfm2_session_free,
    .forward = lfm2_forward, .forward_argmax = lfm2_forward_argmax, .cache_bytes_per_token = lfm2_cache_bytes_per_token,
    .pool_init = lfm2_pool_init,
    .snapshot = lfm2_snapshot, .restore = lfm2_restore, .forward_batch = lfm2_forward_batch,
};

const ci_family fam_lfm2_moe = { "lfm2_moe", (const char *const[]){ "lfm2_moe", NULL }, NULL, &lfm2_moe_ops, CI_CUDA_YES, 1, 1 };
