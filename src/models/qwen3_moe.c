/* qwen3_moe.c — the QWEN3_MOE family (model_type "qwen3_moe"): the Qwen3 decoder (q/k
 * norms) whose sparse layers — (idx+1) % decoder_sparse_step == 0 and idx not in
 * mlp_only_layers — use a softmax top-k router over num_experts SwiGLU experts,
 * renormalised when norm_topk_prob. No shared expert. */
#include "dense.h"

static int qwen3_moe_load(ci_model *m, char *err, size_t errlen) {
    dense_opts o = { .qk_norm = 1, .moe = 1 };
    return dense_load(m, &o, err, errlen);
}

static const ci_family_ops qwen3_moe_ops = {
    .load = qwen3_moe_load, .unload = dense_unload,
    .session_init = dense_session_init, .session_free = dense_session_free, .pool_init = dense_pool_init,
    .forward = dense_forward, .cache_bytes_per_token = dense_cache_bytes_per_token,
    .forward_batch = dense_forward_batch, .cache_export = dense_cache_export, .cache_import = dense_cache_import,
    .forward_argmax = dense_forward_argmax, .forward_batch_argmax = dense_forward_batch_argmax,
};

const ci_family fam_qwen3_moe = { "qwen3_moe", (const char *const[]){ "qwen3_moe", NULL }, NULL, &qwen3_moe_ops, 1, 1, 1 };
