/* gated_attn.h — the output-gated GQA attention of Qwen3-Next and Qwen3.5 (transformers'
 * Qwen3NextAttention / Qwen3_5Attention).
 *
 *   q_proj x -> per head [query (hd) | gate (hd)]; k_proj x, v_proj x -> [n_kv, hd]
 *   query, key = RMSNorm over hd with (1 + w) weights (q_norm / k_norm)
 *   rotary on the first rot_dim dims of each head, NeoX half rotation (partial RoPE; Qwen3.5's
 *   mrope is this for text, every section sees the same position)
 *   out = o_proj(attention(query, key, value) * sigmoid(gate))
 * The cache rows of a layer are [k (n_kv*hd) | v (n_kv*hd)] per position.
 *
 * Everything but the gate is the shared attention block (nn/attn_block.h): its q_proj simply
 * emits 2*hd rows per head. What this file adds is the gate's two elementwise steps, the
 * split of q_proj's rows into query and gate (split_halves) and the sigmoid product before
 * o_proj (sigmoid_mul), both backend ops: the scratch is backend memory. */
#ifndef CI_GATED_ATTN_H
#define CI_GATED_ATTN_H
#include "../backend/backend.h"
#include "../io/weights.h"
#include "attn_block.h"

typedef struct {
    int hidden;
    attn_block a;               /* wq [n_heads*2*hd, hidden]: per head query then gate; wk / wv
                                 * [n_kv*hd, hidden]; wo [hidden, n_heads*hd]; q_norm / k_norm
                                 * [hd] with the +1 already added (binder-owned); eps, scale
                                 * hd^-0.5 and the (partial, NeoX) rope set by the family */
} ga_layer;

typedef struct {
    int max_n;
    float *qg;                  /* [max_n, n_heads*2*hd] */
    float *q, *gate, *att;      /* [max_n, n_heads*hd] */
    float *k, *v;               /* [max_n, n_kv*hd] */
} ga_scratch;

/* Floats per cached token on be: 2 * n_kv * hd (half that on a kv_f16 backend: ci_kv_slots). */
size_t ga_row_floats(const ga_layer *A, const ci_backend *be);
/* Binds under prefix ("model.layers.3.self_attn"); a.n_heads / n_kv / hd and hidden must
 * be set. norm_add is added to q/k norm weights (1 for checkpoints that store zero-centred
 * weights, 0 when already shifted). */
int ga_bind(w_binder *b, ga_layer *A, const char *prefix, float norm_add);
int ga_scratch_init(ci_backend *be, ga_scratch *s, const ga_layer *A, int max_n);
void ga_scratch_free(ci_backend *be, ga_scratch *s);
/* x[n, hidden] += o_proj(gated attention(rmsnorm(x) * norm_w)) (eps) at positions pos[0..n)
 * (backend memory), each row's K/V written into cache row pos[t]: kvs as attn_attend's (1
 * cache for a chunk of one sequence, or n, one per row's sequence, kv_tab then holding them
 * as attn_bufs' kv_tab; else NULL), through pages when paged (attn_bufs' pages); keys as
 * attn_bufs' (0: none). xn, tmp: [n, hidden] scratch (the normed rows, o_proj's
 * product: the CPU's bits of rmsnorm, the projections, ..., matmul into tmp, add). */
void ga_forward(ci_backend *be, const ga_layer *A, ga_scratch *s, const attn_cache *kvs, int n_caches,
                float *const *kv_tab, const ci_pages *pages, float *x, const float *norm_w, float eps, float *xn,
                float *tmp, const int32_t *pos, int keys, int n);

#endif
