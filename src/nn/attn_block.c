/* attn_block.c — see attn_block.h. Only backend ops: no activation, cache or position byte
 * is touched here. */
#include "attn_block.h"
#include "../core/status.h"

int attn_bind(w_binder *b, attn_block *A, int64_t hidden, int q_rows_per_head, const char *prefix, const char *o_name,
              const char *q_norm_name, const char *k_norm_name, float norm_add) {
    const int64_t QD = (int64_t)A->n_heads * A->hd, KD = (int64_t)A->n_kv * A->hd;
    w_mat(b, &A->wq, W_REQUIRED, q_rows_per_head * QD, hidden, "%s.q_proj", prefix);
    w_mat(b, &A->wk, W_REQUIRED, KD, hidden, "%s.k_proj", prefix);
    w_mat(b, &A->wv, W_REQUIRED, KD, hidden, "%s.v_proj", prefix);
    w_mat(b, &A->wo, W_REQUIRED, hidden, QD, "%s.%s", prefix, o_name);
    float *qn = NULL, *kn = NULL;
    if (q_norm_name) w_vec(b, &qn, W_REQUIRED, A->hd, norm_add, W_KIND_NORM, "%s.%s.weight", prefix, q_norm_name);
    if (k_norm_name) w_vec(b, &kn, W_REQUIRED, A->hd, norm_add, W_KIND_NORM, "%s.%s.weight", prefix, k_norm_name);
    A->q_norm = qn;
    A->k_norm = kn;
    return b->failed ? -1 : 1;
}

void attn_set_rope(attn_block *A, const rope_table *t, ci_rope_style style) {
    A->rot_dim = t->rot_dim;
    A->inv_freq = t->inv_freq;
    A->mscale = t->mscale;
    A->style = style;
}

void attn_project(ci_backend *be, const attn_block *A, const attn_bufs *b, const float *x, const float *norm_w,
                  float eps, int n) {
    float *ys[3] = { b->q, b->k, b->v };
    const ci_mat *ws[3] = { &A->wq, &A->wk, &A->wv };
    if (norm_w) be->norm_matmul_n(be, b->xn, x, norm_w, eps, 3, ys, n, ws);
    else be->matmul_n(be, 3, ys, x, n, ws);
}

void attn_attend(ci_backend *be, const attn_block *A, const attn_bufs *b, const attn_cache *kvs, int n_caches, int n) {
    const int H = A->n_heads, KV = A->n_kv, hd = A->hd;
    const size_t QD = (size_t)H * hd, KD = (size_t)KV * hd;
    if (be->rope_attend && (n_caches == 1 || b->kv_tab)) {
        int max_keys = 0;
        for (int i = 0; i < n_caches; i++) max_keys = kvs[i].rows > max_keys ? kvs[i].rows : max_keys;
        if (b->keys > 0 && b->keys < max_keys) max_keys = b->keys;   /* a device sizes a prefill's launch by it */
        be->rope_attend(be, b->att, b->q, b->k, b->v, n, H, KV, hd, A->q_norm, A->k_norm, A->eps, A->rot_dim, b->pos,
                        A->inv_freq, A->mscale, A->style, n_caches == 1 ? kvs[0].k : NULL,
                        n_caches == 1 ? kvs[0].v : NULL, n_caches == 1 ? NULL : b->kv_tab, b->pages, kvs[0].stride,
                        max_keys, A->scale);
        return;
    }
    /* one cache: the n rows in one call each; else one row per call, each into its own cache */
    const int rows = n_caches == 1 ? n : 1;
    for (int i = 0; i < n; i += rows) {
        const attn_cache *kv = &kvs[n_caches == 1 ? 0 : i];
        float *q = b->q + (size_t)i * QD;
        be->qk_rope_store(be, q, b->k + (size_t)i * KD, b->v + (size_t)i * KD, rows, H, KV, hd, A->q_norm, A->k_norm,
                          A->eps, A->rot_dim, b->pos + i, A->inv_freq, A->mscale, A->style, kv->k, kv->v, kv->stride);
        be->attention_pos(be, b->att + (size_t)i * QD, q, kv->k, kv->v, rows, b->pos + i, kv->rows, H, KV, hd,
                          kv->stride, A->scale);
    }
}

void attn_output(ci_backend *be, const attn_block *A, const attn_bufs *b, float *y, int acc, int n) {
    ci_out_proj(be, y, b->att, n, &A->wo, acc, b->xn, A->tp_part);
}

void attn_forward(ci_backend *be, const attn_block *A, const attn_bufs *b, const attn_cache *kvs, int n_caches,
                  const float *x, const float *norm_w, float eps, float *y, int n) {
    attn_project(be, A, b, x, norm_w, eps, n);
    attn_attend(be, A, b, kvs, n_caches, n);
    attn_output(be, A, b, y, 1, n);
}

int attn_shard(attn_block *A, const shd_ctx *t, const char *what, char *err, size_t errlen) {
    const int W = t->world, R = t->rank;
    shd_kept *keep = t->keep;
    const int hd = A->hd;
    shd_range q, kv, oc;
    if (shd_gqa(A->n_heads, A->n_kv, W, R, &q, &kv, what, err, errlen)) return -1;
    const int64_t qr = A->wq.rows / ((int64_t)A->n_heads * hd);   /* 2: a gated q_proj's [query | gate] per head */
    if (shd_split((int64_t)A->n_heads * hd, shd_unit(&A->wo, 1, hd), W, R, &oc))
        return ci_err(err, errlen, "%s: o_proj: a rank's heads do not start on its quantization blocks (%d heads of %d over %d ranks)",
                      what, A->n_heads, hd, W);
    shd_rows(&A->wq, q.lo * qr * hd, q.hi * qr * hd, &A->wq);
    shd_rows(&A->wk, kv.lo * hd, kv.hi * hd, &A->wk);
    shd_rows(&A->wv, kv.lo * hd, kv.hi * hd, &A->wv);
    if (shd_cols(&A->wo, oc.lo, oc.hi, &A->wo, keep, what, err, errlen)) return -1;
    A->n_heads = (int)(q.hi - q.lo);
    A->n_kv = (int)(kv.hi - kv.lo);
    A->tp_part = shd_part(R);
    return 0;
}
