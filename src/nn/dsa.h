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
 * and rope). Rows pos[0..n) of both are written by dsa_attend.
 *
 * The selection and the sparse attention are one backend op (dsa_attend, backend.h): rows
 * whose context still fits in index_topk attend densely, the others over their kept rows,
 * every decision taken from positions in backend memory. This file is written on ops only. */
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

/* Scratch for up to max_n rows, in backend memory. */
typedef struct {
    float *q;                    /* [max_n, n_heads·head_dim] indexer queries */
    float *w;                    /* [max_n, n_heads] head weights (w_scale applied by dsa_attend) */
    float *k;                    /* [max_n, head_dim] the rows' indexer keys before the cache */
} dsa_scratch;

int dsa_scratch_init(ci_backend *be, dsa_scratch *s, const dsa_indexer *I, int max_n);
void dsa_scratch_free(ci_backend *be, dsa_scratch *s);
/* dst = I with its matrices and norm vectors in backend memory; -1 when out of memory. */
int dsa_place(ci_backend *be, dsa_indexer *dst, const dsa_indexer *I);

/* Top-k of score[0..L) (NaN counts as -inf; ties to the lower position): writes the kept
 * positions, ascending, to sel[0..k) and returns k = min(topk, L). sel must hold L entries.
 * (ci_topk_positions, the rule of the backends' dsa_attend.) */
int dsa_select(const float *score, int L, int topk, int32_t *sel);

/* s->olat of ms = DSA attention of xn[n, H] at positions pos (backend memory), after
 * mla_project: the rows' latent rows (ms->lat) and indexer keys go to rows pos of the caches,
 * then dsa_attend. lat_cache [max_keys, kv_lora + rope] and key_cache [max_keys, head_dim]:
 * one sequence's layer caches; or both NULL and tab (backend memory) row t's pair
 * tab[2t] (latent) / tab[2t + 1] (keys): a batch step. pages (backend.h ci_pages) or NULL:
 * both caches' rows of the positions. */
void dsa_attend(ci_backend *be, const mla_layer *A, const dsa_indexer *I, const float *inv_freq, float mscale,
                mla_scratch *ms, dsa_scratch *ds, float *lat_cache, float *key_cache, float *const *tab,
                const float *xn, const int32_t *pos, int n, int max_keys, const ci_pages *pages);

#endif
