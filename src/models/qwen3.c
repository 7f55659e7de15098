/* qwen3.c — the QWEN3 family (model_type "qwen3"): the dense decoder with per-head RMSNorm
 * on q and k (q_norm / k_norm [head_dim]) before RoPE; tied or untied head. */
#include "dense.h"

static int qwen3_load(ci_model *m, char *err, size_t errlen) {
    dense_opts o = { .qk_norm = 1 };
    return dense_load(m, &o, err, errlen);
}

static const ci_family_ops qwen3_ops = {
    .load = qwen3_load, .unload = dense_unload,
    .session_init = dense_session_init, .session_free = dense_session_free, .pool_init = dense_pool_init,
    .forward = dense_forward, .cache_bytes_per_token = dense_cache_bytes_per_token,
    .forward_batch = dense_forward_batch, .cache_export = dense_cache_export, .cache_import = dense_cache_import,
    .forward_argmax = dense_forward_argmax, .forward_batch_argmax = dense_forward_batch_argmax,
};

const ci_family fam_qwen3 = { "qwen3", (const char *const[]){ "qwen3", NULL }, NULL, &qwen3_ops, 1, 1, 1 };
