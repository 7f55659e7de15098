/* qwen3_next.c — the QWEN3_NEXT family (model_type "qwen3_next"): gated DeltaNet layers with
 * the fused in_proj_qkvz / in_proj_ba (grouped per key head), output-gated attention with
 * partial RoPE, and a MoE in the layers where (l+1) % decoder_sparse_step == 0 and l is not
 * in mlp_only_layers (SwiGLU of intermediate_size elsewhere): softmax top-k renormalised iff
 * norm_topk_prob, plus a sigmoid-gated shared expert. Hub checkpoints store per-expert
 * tensors and the older config dialect (rope_theta, partial_rotary_factor at top level,
 * full_attention_interval). See models/qwen_hybrid.h. */
#include "qwen_hybrid.h"

static int qwen3_next_load(ci_model *m, char *err, size_t errlen) {
    qh_opts o = { .layout = DN_FUSED, .mlp = QH_MLP_MOE_SPARSE };
    return qh_load(m, &o, err, errlen);
}

static const ci_family_ops qwen3_next_ops = {
    .load = qwen3_next_load, .unload = qh_unload,
    .session_init = qh_session_init, .session_free = qh_session_free,
    .forward = qh_forward, .cache_bytes_per_token = qh_cache_bytes_per_token,
    .pool_init = qh_pool_init,
    .forward_argmax = qh_forward_argmax, .snapshot = qh_snapshot, .restore = qh_session_restore,
    .forward_batch = qh_forward_batch, .forward_batch_argmax = qh_forward_batch_argmax,
};

const ci_family fam_qwen3_next = { "qwen3_next", (const char *const[]){ "qwen3_next", NULL }, NULL, &qwen3_next_ops,
                                   CI_CUDA_YES, 1, 1 };
