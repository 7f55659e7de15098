/* lfm2.h — the LFM2 hybrid decoder shared by the lfm2 and lfm2_moe families.
 *
 * Per layer, by layer_types: a gated short convolution (nn/shortconv.h) or GQA attention
 * with per-head q/k RMSNorm and full RoPE; then a SwiGLU feed-forward (lfm2; lfm2_moe's
 * first num_dense_layers) or a sigmoid-routed MoE with expert_bias (lfm2_moe).
 *   h = x + op(operator_norm(x));  out = h + ff(ffn_norm(h));  logits = head(embedding_norm(out))
 * The families (lfm2.c, lfm2_moe.c) own their model_type and options; lfm2.c owns the tensor
 * list and the weights' placement in backend memory, lfm2_run.c the session cache (backend
 * memory: KV rows for attention layers, the conv state for conv layers) and forward(), all
 * on backend ops (a device backend runs them as they are, MLX-quantized weights included).
 *
 * The functions below reach a session's cache (lfm2_cache.c): snapshot and restore at a
 * token position (prefix reuse; the conv state cannot be trimmed like KV), and the prefill
 * chunk size. */
#ifndef CI_LFM2_H
#define CI_LFM2_H
#include "model.h"
#include "../cache/cache.h"

enum { LFM2_UBATCH = 256 };      /* most tokens per pass through the layers (scratch rows) */

typedef struct {
    int moe;                     /* lfm2_moe: MoE feed-forward after num_dense_layers */
} lfm2_opts;

int lfm2_load(ci_model *m, const lfm2_opts *o, char *err, size_t errlen);
void lfm2_unload(ci_model *m);
int lfm2_session_init(ci_session *s, char *err, size_t errlen);
void lfm2_session_free(ci_session *s);
int lfm2_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
int lfm2_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen);
size_t lfm2_cache_bytes_per_token(const ci_model *m);
/* registry.h pool_init: the attention layers' rows of the model's block pool (layer_snap.h). */
int lfm2_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen);

/* A copy of the session's whole cache (every conv state, KV rows [0, pos), pos). NULL with
 * a message when the session is not an LFM2 one or memory runs out. Free with
 * cache_snap_free. */
cache_snap *lfm2_snapshot(const ci_session *s, char *err, size_t errlen);
/* Puts a snapshot back (into this session or another of the same model, with max_ctx >=
 * the snapshot's position); the session continues from that position. Only the cache's
 * shape is checked: a snapshot of another model with the same layer layout is not caught. */
int lfm2_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen);
/* One decode step of n sessions (the serving op forward_batch, registry.h). */
int lfm2_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen);
/* Tokens per pass through the layers during prefill, 1..the session's scratch rows (LFM2_UBATCH on
 * the CPU, up to CI_DEVICE_CHUNK on a device: runner.h); the default is all of them. */
int lfm2_set_chunk(ci_session *s, int chunk, char *err, size_t errlen);

#endif
