/* dsa.h — DeepSeek Sparse Attention (DeepSeek V3.2): the lightning indexer, top-k key
 * selection, and absorbed MLA (nn/mla.h) restricted to the selected keys.
 *
 * The indexer, per token t (IH = index_n_heads, ID = index_head_dim, R = qk_rope_head_dim):
 *   q_I[t]  = wq_b(qa[t])                  [IH, ID]  qa = the MLA's q_a_layernorm(q_a_proj x)
 *   k_I[t]  = LayerNorm(wk x[t]) (+bias)   [ID]      eps 1e-6, kept in the indexer-key cache
 *   w[t]    = weights_proj x[t]            [IH]
 *   RoPE on the FIRST R dims of every q_I head and of k_I (the rest pass through), with the
 *   main rope table (same frequencies and yarn cos/sin factor); half-split (NEOX) pairs
 *   unless the config says indexer_rope_interleave.
 *   score[t, s] = Σ_h relu(q_I[t,h] · k_I[s]) · w[t,h] · IH^-0.5 · ID^-0.5,   s <= t
 * Query t keeps the index_topk keys of highest score among its causal keys 0..t (ties go to
 * the earlier position); when t+1 <= index_topk it keeps them all, i.e. attention is dense.
 * The MLA attention of t then runs over the kept keys only (softmax over that set).
 *
 * Caches, both grown by one row per token and addressed by position: the MLA latent cache
 * [max_ctx, kv_lora + rope] (as mla.h) and the indexer-key cache [max_ctx, ID] (after norm
 * and rope). Rows pos0..pos0+n-1 of both are written by dsa_forward.
 *
 * Sparse attention is done by gathering: the kept latent rows of one query are copied, in
 * ascending position order, into a [index_topk, kv_lora + rope] scratch, and the backend's
 * causal attention is called for that one query at position index_topk - 1, so that every
 * gathered row is visible (pos0 arithmetic: the causal mask admits keys 0..pos0). Queries whose
 * context still fits in index_topk (a prefix of any chunk) share one dense causal call. */
#ifndef CI_DSA_H
#define CI_DSA_H
#include "../backend/backend.h"
#include "mla.h"
#include "rope.h"

typedef struct {
    int n_heads, head_dim;       /* index_n_heads, index_head_dim */
    int rope_dim;                /* qk_rope_head_dim: leading dims of each head that rotate */
    int topk;                    /* index_topk */
    ci_rope_style rope_style;    /* CI_ROPE_NEOX unless indexer_rope_interleave */
    float w_scale;               /* n_heads^-0.5 · head_dim^-0.5 */
    ci_mat wq_b;                 /* [n_heads·head_dim, q_lora] */
    ci_mat wk;                   /* [head_dim, H] */
    float *k_norm_w, *k_norm_b;  /* [head_dim] LayerNorm weight and bias */
    ci_mat weights_proj;         /* [n_heads, H] */
} dsa_indexer;

typedef struct {
    int max_n, max_ctx;
    float *q;                    /* [max_n, n_heads·head_dim] indexer queries */
    float *w;                    /* [max_n, n_heads] head weights (× w_scale) */
    float *dots;                 /* [n_heads, max_ctx] q_I[t,h] · k_I[s] of one query */
    float *score;                /* [max_ctx] index scores of one query */
    int32_t *sel;                /* [max_ctx] candidate positions; the first topk are kept */
    float *kv;                   /* [topk, kv_lora + rope] gathered latent rows */
} dsa_scratch;

int dsa_scratch_init(dsa_scratch *s, const dsa_indexer *I, const mla_layer *A, int max_n, int max_ctx);
void dsa_scratch_free(dsa_scratch *s);

/* Top-k of score[0..L) (NaN counts as -inf; ties to the lower position): writes the kept
 * positions, ascending, to sel[0..k) and returns k = min(topk, L). sel must hold L entries. */
int dsa_select(const float *score, int L, int topk, int32_t *sel);

/* out[n, H] = DSA attention of xn[n, H] at positions pos0..pos0+n-1 (pos[t] = pos0 + t).
 * lat_cache: this layer's [max_ctx, kv_lora + rope]; key_cache: its [max_ctx, head_dim]. */
void dsa_forward(ci_backend *be, const mla_layer *A, const dsa_indexer *I, const rope_table *rt, mla_scratch *ms,
                 dsa_scratch *ds, float *lat_cache, float *key_cache, float *out, const float *xn, const int32_t *pos,
                 int n, int pos0, float eps);

#endif
