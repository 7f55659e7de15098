/* gated_attn.h — the output-gated GQA attention of Qwen3-Next and Qwen3.5 (transformers'
 * Qwen3NextAttention / Qwen3_5Attention).
 *
 *   q_proj x -> per head [query (hd) | gate (hd)]; k_proj x, v_proj x -> [n_kv, hd]
 *   query, key = RMSNorm over hd with (1 + w) weights (q_norm / k_norm)
 *   rotary on the first rot_dim dims of each head, NeoX half rotation (partial RoPE; Qwen3.5's
 *   mrope is this for text, every section sees the same position)
 *   out = o_proj(attention(query, key, value) * sigmoid(gate))
 * The cache rows of a layer are [k (n_kv*hd) | v (n_kv*hd)] per position. */
#ifndef CI_GATED_ATTN_H
#define CI_GATED_ATTN_H
#include "../backend/backend.h"
#include "../io/weights.h"
#include "rope.h"

typedef struct {
    int hidden, n_heads, n_kv, hd;
    float eps, scale;           /* q/k norm epsilon; hd^-0.5 */
    ci_mat q;                   /* [n_heads*2*hd, hidden]: per head query then gate */
    ci_mat k, v;                /* [n_kv*hd, hidden] */
    ci_mat o;                   /* [hidden, n_heads*hd] */
    float *q_norm, *k_norm;     /* [hd], the +1 already added (binder-owned) */
} ga_layer;

typedef struct {
    int max_n;
    float *qg;                  /* [max_n, n_heads*2*hd] */
    float *q, *gate, *att;      /* [max_n, n_heads*hd] */
    float *k, *v;               /* [max_n, n_kv*hd] */
} ga_scratch;

/* Floats per cached token: 2 * n_kv * hd. */
size_t ga_row_floats(const ga_layer *A);
/* Binds under prefix ("model.layers.3.self_attn"); norm_add is added to q/k norm weights
 * (1 for checkpoints that store zero-centred weights, 0 when already shifted). */
int ga_bind(w_binder *b, ga_layer *A, const char *prefix, float norm_add);
int ga_scratch_init(ga_scratch *s, const ga_layer *A, int max_n);
void ga_scratch_free(ga_scratch *s);
/* out[n, hidden] for x[n, hidden] (normed) at positions pos[0..n) = pos0.., writing the
 * chunk's K/V into rows [pos0, pos0+n) of kv [max_ctx, 2*n_kv*hd]. */
void ga_forward(ci_backend *be, const ga_layer *A, const rope_table *rope, ga_scratch *s, float *kv, float *out,
                const float *x, const int32_t *pos, int n, int pos0);

#endif
