/* qwen_hybrid.h — the decoder shared by the gated-DeltaNet hybrids: Qwen3-Next
 * (qwen3_next.c), Qwen3.5 (qwen3_5.c) and Qwen3.5-MoE (qwen3_5_moe.c).
 *
 * Per layer: x += mixer(norm1 x); x += mlp(norm2 x), where the mixer is a gated DeltaNet
 * (nn/deltanet.h) on "linear_attention" layers and output-gated attention
 * (nn/gated_attn.h) on "full_attention" layers (layer_types, else every
 * full_attention_interval-th layer), and the MLP is SwiGLU or a softmax-routed MoE with a
 * sigmoid-gated shared expert (nn/moe.h). Every RMSNorm but the DeltaNet output norm
 * multiplies by (1 + w): checkpoints in the HF form store w, and mlx-lm's sanitized ones
 * (conv1d weight [C, K, 1]) store 1 + w already; the loader tells them apart once.
 * Tensor prefix: "model." (text checkpoints), "model.language_model." (the hub's VL
 * wrappers) or "language_model.model." with head "language_model.lm_head" (mlx-lm's
 * qwen3_5 / qwen3_5_moe, text or VL); vision towers and MTP heads are ignored. Any matrix
 * may be MLX-quantized (weights.h), experts as switch_mlp stacks, checked against
 * config.json's quantization block.
 *
 * The session's cache is backend memory: attention layers keep K/V rows, DeltaNet layers a
 * fixed state (conv window + S). The cache position always equals the session's; a session
 * reset (pos 0) clears the states, and going back to any other position goes through a
 * cache snapshot (qh_snapshot / qh_session_restore, by backend-to-backend copies). The
 * families own their model_type and options; qwen_hybrid*.c own the tensor list and
 * forward() (qwen_hybrid_internal.h says which file holds what). */
#ifndef CI_QWEN_HYBRID_H
#define CI_QWEN_HYBRID_H
#include "model.h"
#include "../cache/cache.h"
#include "../nn/deltanet.h"

typedef enum {
    QH_MLP_DENSE,       /* Qwen3.5: SwiGLU of intermediate_size everywhere */
    QH_MLP_MOE_ALL,     /* Qwen3.5-MoE: MoE everywhere, top-k always renormalised */
    QH_MLP_MOE_SPARSE   /* Qwen3-Next: MoE where (l+1) % decoder_sparse_step == 0 and l is not in
                         * mlp_only_layers, renormalised iff norm_topk_prob (default true) */
} qh_mlp;

typedef struct {
    dn_layout layout;   /* DN_SPLIT (Qwen3.5) or DN_FUSED (Qwen3-Next) */
    qh_mlp mlp;
} qh_opts;

int qh_load(ci_model *m, const qh_opts *o, char *err, size_t errlen);
void qh_unload(ci_model *m);
int qh_session_init(ci_session *s, char *err, size_t errlen);
void qh_session_free(ci_session *s);
int qh_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
size_t qh_cache_bytes_per_token(const ci_model *m);
/* registry.h pool_init: the attention layers' rows of the model's block pool (layer_snap.h). */
int qh_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen);
/* forward, but only the argmax of the last row's logits comes back (registry.h). */
int qh_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen);

/* Puts a snapshot back and moves the session to its position. */
int qh_session_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen);
/* A snapshot of the session's cache at its position (the serving op, registry.h). */
cache_snap *qh_snapshot(const ci_session *s, char *err, size_t errlen);
/* One decode step of n sessions (the serving op forward_batch, registry.h). */
int qh_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen);
/* The same step with each row's argmax taken by the backend (forward_batch_argmax). */
int qh_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen);
/* How prompts run the DeltaNet core (DN_AUTO: chunked; DN_RECURRENT: token by token). */
void qh_set_deltanet_mode(ci_model *m, dn_mode mode);

#endif
