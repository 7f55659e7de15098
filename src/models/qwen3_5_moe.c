/* qwen3_5_moe.c — the QWEN3_5_MOE family (model_type "qwen3_5_moe" for the hub's VL wrapper,
 * whose text_config is read and whose tensors sit under model.language_model., and
 * "qwen3_5_moe_text"): Qwen3.5 with a MoE in every layer — softmax router over num_experts,
 * top num_experts_per_tok always renormalised (there is no norm_topk_prob), experts in any
 * layout (hub checkpoints fuse them: experts.gate_up_proj / experts.down_proj), plus a
 * shared expert scaled by sigmoid(shared_expert_gate x). See models/qwen_hybrid.h. */
#include "qwen_hybrid.h"

static int qwen3_5_moe_load(ci_model *m, char *err, size_t errlen) {
    qh_opts o = { .layout = DN_SPLIT, .mlp = QH_MLP_MOE_ALL };
    return qh_load(m, &o, err, errlen);
}

static const ci_family_ops qwen3_5_moe_ops = {
    .load = qwen3_5_moe_load, .unload = qh_unload,
    .session_init = qh_session_init, .session_free = qh_session_free,
    .forward = qh_forward, .cache_bytes_per_token = qh_cache_bytes_per_token,
    .pool_init = qh_pool_init,
    .forward_argmax = qh_forward_argmax, .snapshot = qh_snapshot, .restore = qh_session_restore,
    .forward_batch = qh_forward_batch, .forward_batch_argmax = qh_forward_batch_argmax,
};

const ci_family fam_qwen3_5_moe = { "qwen3_5_moe", (const char *const[]){ "qwen3_5_moe", "qwen3_5_moe_text", NULL },
                                    NULL, &qwen3_5_moe_ops, CI_CUDA_YES, 1, 1 };
