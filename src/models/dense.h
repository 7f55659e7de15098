/* dense.h — the dense decoder shared by the Llama and Qwen3 families.
 *
 * Per layer: x += o_proj(attn(rope(q), rope(k), v)) over rmsnorm(x); x += down(silu(gate)·up)
 * over rmsnorm(x). GQA with n_kv heads; Qwen3 adds per-head RMSNorm on q and k before RoPE.
 * Qwen3-MoE replaces the FFN of its sparse layers by a softmax-routed MoE (nn/moe.h).
 * The families (llama.c, qwen3.c, qwen3_moe.c) own their model_type, options and messages; this file
 * owns the tensor list, the KV cache ([layer][pos][n_kv*hd] f32) and forward().
 *
 * Written against the backend's memory boundary (backend.h): weights are placed with
 * be->weight after binding, every session buffer (cache, activations, the ids / positions of
 * a chunk, logits) comes from be->alloc, and forward only uploads ids and positions, runs
 * ops and downloads logits (or the 4-byte argmax of dense_forward_argmax, the n int32 ids
 * of dense_forward_batch_argmax). A decode step is
 * captured once per session as a backend graph when the backend has graphs and replayed
 * after (ci_model.no_graphs: eager). llama, qwen3 and qwen3_moe run on CUDA this way, MLX-quantized
 * weights included (their codes placed packed: nn/place.h). */
#ifndef CI_DENSE_H
#define CI_DENSE_H
#include "model.h"
#include "../nn/rope.h"

typedef struct {
    int qk_norm;            /* Qwen3: q_norm / k_norm [head_dim] per layer */
    int moe;                /* Qwen3-MoE: softmax-routed experts in the sparse layers */
} dense_opts;

int dense_load(ci_model *m, const dense_opts *o, char *err, size_t errlen);
void dense_unload(ci_model *m);
int dense_session_init(ci_session *s, char *err, size_t errlen);
int dense_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen);
void dense_session_free(ci_session *s);
int dense_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
/* registry.h forward_argmax: forward, then the last row's argmax taken by the backend. */
int dense_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen);
size_t dense_cache_bytes_per_token(const ci_model *m);
/* The optional serving ops of registry.h (forward_batch, cache_export, cache_import). */
int dense_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen);
/* registry.h forward_batch_argmax: forward_batch, then each row's argmax taken by the backend. */
int dense_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen);
int dense_cache_export(const ci_session *s, int n, void *dst, char *err, size_t errlen);
int dense_cache_import(ci_session *s, int n, const void *src, char *err, size_t errlen);

#endif
