/* qwen3_5.c — the QWEN3_5 family (model_type "qwen3_5" for the hub's VL wrapper, whose
 * text_config is read, and "qwen3_5_text"): dense Qwen3.5. Gated DeltaNet layers with
 * separate in_proj_qkv / in_proj_z / in_proj_b / in_proj_a, output-gated attention with
 * partial RoPE, SwiGLU MLP of intermediate_size everywhere (models/qwen_hybrid.h). */
#include "qwen_hybrid.h"

static int qwen3_5_load(ci_model *m, char *err, size_t errlen) {
    qh_opts o = { .layout = DN_SPLIT, .mlp = QH_MLP_DENSE };
    return qh_load(m, &o, err, errlen);
}

static const ci_family_ops qwen3_5_ops = {
    .load = qwen3_5_load, .unload = qh_unload,
    .session_init = qh_session_init, .session_free = qh_session_free,
    .forward = qh_forward, .cache_bytes_per_token = qh_cache_bytes_per_token,
    .pool_init = qh_pool_init,
    .forward_argmax = qh_forward_argmax, .snapshot = qh_snapshot, .restore = qh_session_restore,
    .forward_batch = qh_forward_batch, .forward_batch_argmax = qh_forward_batch_argmax,
};

const ci_family fam_qwen3_5 = { "qwen3_5", (const char *const[]){ "qwen3_5", "qwen3_5_text", NULL }, NULL, &qwen3_5_ops,
                                CI_CUDA_YES, 1, 1 };
