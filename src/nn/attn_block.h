/* attn_block.h — the GQA softmax attention block the families share: Llama / Qwen3 /
 * Qwen3-MoE (models/dense.c), LFM2's attention layers (models/lfm2.c), and the core of
 * Qwen3-Next / Qwen3.5's output-gated attention (nn/gated_attn.h).
 *
 * For x [n, hidden] (RMS-normed by the block when a norm weight is given):
 *   q = x·wqᵀ [n, n_heads, hd];  k = x·wkᵀ, v = x·wvᵀ [n, n_kv, hd]       (matmul_n)
 *   q, k = per-head RMSNorm over hd (q_norm / k_norm, when given), then RoPE on the first
 *   rot_dim dims of each head (NeoX or interleaved) at each row's position; k and v go to
 *   the cache rows of those positions                                     (qk_rope_store)
 *   att = causal GQA attention of q over cache rows 0..pos[t]             (attention_pos;
 *                                              the two in one: rope_attend)
 *   y += att·woᵀ (the residual add; attn_output can also write y = ...)   (matmul_acc)
 * Written only on backend ops: the positions live in a backend int32 buffer and the block
 * never reads or writes activation or cache bytes, so a device backend (and its captured
 * decode graph) runs it as it is. The CPU backend's fused ops compose the unfused ones in
 * this order, so a family moved onto the block keeps its bits.
 *
 * This file owns the block's weight description (attn_block), its per-call buffers
 * (attn_bufs), the description of one layer's K / V cache (attn_cache) and the binding of
 * its tensors; the family owns the tensors' names, the cache memory and the scratch. */
#ifndef CI_ATTN_BLOCK_H
#define CI_ATTN_BLOCK_H
#include "../backend/backend.h"
#include "../parallel/shard.h"
#include "../io/weights.h"
#include "rope.h"

typedef struct {
    int n_heads, n_kv, hd;       /* query heads, key / value heads (n_heads % n_kv == 0), head dim */
    float eps;                   /* q / k norm epsilon */
    float scale;                 /* multiplies q·k (hd^-0.5) */
    ci_mat wq;                   /* [n_heads*hd, hidden]; gated attention: [n_heads*2*hd, hidden] */
    ci_mat wk, wv;               /* [n_kv*hd, hidden] */
    ci_mat wo;                   /* [hidden, n_heads*hd] */
    const float *q_norm, *k_norm;/* [hd] per-head RMSNorm weights, or NULL: no q / k norm */
    int rot_dim;                 /* dims rotated from dim 0 of each head (even, <= hd) */
    const float *inv_freq;       /* [rot_dim/2] */
    float mscale;                /* multiplies cos and sin (yarn), 1 else */
    ci_rope_style style;         /* NeoX halves or interleaved pairs */
    int tp_part;                 /* tensor parallel (backend.h CI_TP_*): a part of the heads, o_proj's
                                  * product all-reduced over the ranks by attn_output */
} attn_block;

/* One call's buffers, all in backend memory. */
typedef struct {
    float *q;                    /* [n, n_heads*hd] queries */
    float *k, *v;                /* [n, n_kv*hd] the rows' keys / values before the cache */
    float *att;                  /* [n, n_heads*hd] attention output (kept after attn_output) */
    float *xn;                   /* [n, hidden] scratch: the normed input when the block norms
                                  * it, then o_proj's product (matmul_acc's tmp); may be the
                                  * (already normed) input itself */
    const int32_t *pos;          /* [n] each row's position */
    float *const *kv_tab;        /* a batch step (n caches): [2n] each row's K / V cache of this
                                  * layer, uploaded by the caller (backend.h rope_attend), or
                                  * NULL: one op call per row */
    const ci_pages *pages;       /* a paged cache (backend.h ci_pages), or NULL: the caches are
                                  * kvs[i] below, row p = position p. With pages every kvs[i] is
                                  * the layer's arrays of a pool, its positions through the
                                  * tables; a batch step also sets kv_tab (the arrays per row) */
    int keys;                    /* a host bound on every pos[t] + 1 tighter than the caches'
                                  * rows (a prefill chunk's end: ci_runner.keys), or 0. Only for
                                  * ops that run eagerly: a recorded step is replayed further on */
} attn_bufs;

/* One layer's K / V cache of one sequence: the key of position p at k + p*stride, its value
 * at v + p*stride (stride n_kv*hd for separate K and V arrays, 2*n_kv*hd for [k | v] rows). */
typedef struct {
    float *k, *v;
    int stride;                  /* floats between consecutive rows */
    int rows;                    /* positions it holds (the session's context): attention's max_keys */
} attn_cache;

/* A cache of [k | v] rows of be (ci_cache's attention rows), k and v kv_width = n_kv*hd values
 * each: ci_kv_slots(be, kv_width) floats each (f16 two to a float on a kv_f16 backend). Rows
 * NULL (a layer without attention) gives an empty cache, no pointer arithmetic on NULL. */
static inline attn_cache attn_cache_kv_rows(const ci_backend *be, float *rows, int kv_width, int n_rows) {
    const int w = ci_kv_slots(be, kv_width);
    return (attn_cache){ rows, rows ? rows + w : NULL, 2 * w, n_rows };
}

/* Binds the block's matrices under prefix ("model.layers.3.self_attn") in this order:
 * q_proj (q_rows_per_head * n_heads * hd rows: 2 for a gated q_proj), k_proj, v_proj,
 * o_name (the output projection's name), then q_norm_name / k_norm_name ("<name>.weight",
 * [hd], norm_add added to every element) when given, else the norms stay NULL. n_heads,
 * n_kv and hd must be set. Returns as w_mat. */
int attn_bind(w_binder *b, attn_block *A, int64_t hidden, int q_rows_per_head, const char *prefix, const char *o_name,
              const char *q_norm_name, const char *k_norm_name, float norm_add);
/* Takes rot_dim, inv_freq and mscale from t (inv_freq as the pointer t holds) and style. */
void attn_set_rope(attn_block *A, const rope_table *t, ci_rope_style style);

/* q, k, v of x [n, hidden]; with norm_w, x is first RMS-normed (eps) into b->xn
 * (norm_matmul_n), else x is used as it is. */
void attn_project(ci_backend *be, const attn_block *A, const attn_bufs *b, const float *x, const float *norm_w,
                  float eps, int n);
/* q / k norms, RoPE at b->pos, k / v into the cache, then attention into b->att. kvs holds
 * n_caches caches: 1 (the n rows are a chunk of one sequence) or n (row i belongs to the
 * sequence whose cache is kvs[i]: a decode step of n sequences; with b->kv_tab holding
 * the same caches). Through the backend's rope_attend when it has one (one cache, or the
 * table), else qk_rope_store and attention_pos per call. q and k are scratch afterwards. */
void attn_attend(ci_backend *be, const attn_block *A, const attn_bufs *b, const attn_cache *kvs, int n_caches, int n);
/* o_proj of b->att: acc ? y += att·woᵀ (b->xn as the product's scratch) : y = att·woᵀ. */
void attn_output(ci_backend *be, const attn_block *A, const attn_bufs *b, float *y, int acc, int n);
/* The whole block: y += o_proj(attention(x)), the three calls above in order. */
void attn_forward(ci_backend *be, const attn_block *A, const attn_bufs *b, const attn_cache *kvs, int n_caches,
                  const float *x, const float *norm_w, float eps, float *y, int n);

/* Tensor parallel (parallel/shard.h): narrows A's bound weights to rank R of W's query heads
 * and the key / value heads they read (q/k/v rows; o_proj's columns copied into keep), sets
 * n_heads / n_kv to the rank's and tp_part. -1 with err (what names the layer) when the heads
 * or o_proj's blocks do not split. Call before placing the weights. */
int attn_shard(attn_block *A, const shd_ctx *t, const char *what, char *err, size_t errlen);

#endif
