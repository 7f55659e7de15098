/* mla.c — see mla.h. Only backend ops: the per-head products and the latent attention are
 * the MLA ops of backend.h. */
#include "mla.h"
#include "place.h"
#include "../core/status.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int mla_split_kv_b(mla_layer *L) {
    L->w_uk = calloc((size_t)L->n_heads, sizeof *L->w_uk);
    L->w_uv = calloc((size_t)L->n_heads, sizeof *L->w_uv);
    if (!L->w_uk || !L->w_uv) return -1;
    size_t es = ci_dtype_size(L->kv_b.dtype);
    for (int h = 0; h < L->n_heads; h++) {
        int64_t r0 = (int64_t)h * (L->nope + L->v);
        ci_mat uk = L->kv_b, uv = L->kv_b;
        uk.rows = L->nope;
        uk.data = L->kv_b.data ? (const char *)L->kv_b.data + (size_t)r0 * (size_t)L->kv_lora * es : NULL;
        uk.scale_row0 = L->kv_b.scale_row0 + r0;
        uv.rows = L->v;
        uv.data = L->kv_b.data ? (const char *)L->kv_b.data + (size_t)(r0 + L->nope) * (size_t)L->kv_lora * es : NULL;
        uv.scale_row0 = L->kv_b.scale_row0 + r0 + L->nope;
        L->w_uk[h] = uk;
        L->w_uv[h] = uv;
    }
    return 0;
}

void mla_layer_free(mla_layer *L) {
    free(L->w_uk);
    free(L->w_uv);
    L->w_uk = L->w_uv = NULL;
}

/* ---- weights in backend memory ------------------------------------------------------------ */

/* A per-head view: an offset into the placed kv_b when it lies inside kv_b, else its own. */
static int place_view(ci_backend *be, ci_mat *dst, const ci_mat *V, const ci_mat *kvb, const ci_mat *kvb_placed) {
    const size_t n = (size_t)kvb->rows * (size_t)kvb->cols;
    const size_t whole = kvb->dtype == CI_U32 ? n * (size_t)((const ci_qdesc *)kvb->scale)->bits / 8
                                              : n * ci_dtype_size(kvb->dtype);
    uintptr_t a = (uintptr_t)V->data, b0 = (uintptr_t)kvb->data;
    if (kvb->data && V->dtype == kvb->dtype && (V->dtype != CI_U32 || V->scale == kvb->scale) && a >= b0 &&
        a < b0 + whole) {   /* an MLX-quantized head: a row view of kv_b (w_mat_rows), its descriptor kv_b's */
        *dst = *V;
        dst->data = (const char *)kvb_placed->data + (a - b0);
        dst->scale = kvb_placed->scale;
        return 0;
    }
    return ci_place_mat(be, dst, V);
}

int mla_place(ci_backend *be, mla_layer *dst, const mla_layer *L) {
    *dst = *L;
    dst->w_uk = calloc((size_t)L->n_heads, sizeof *dst->w_uk);
    dst->w_uv = calloc((size_t)L->n_heads, sizeof *dst->w_uv);
    if (!dst->w_uk || !dst->w_uv) return -1;
    const float *qn = NULL, *kn = NULL;
    if (ci_place_mat(be, &dst->q_a, &L->q_a) || ci_place_mat(be, &dst->q_b, &L->q_b) ||
        ci_place_mat(be, &dst->q, &L->q) || ci_place_mat(be, &dst->kv_a, &L->kv_a) ||
        ci_place_mat(be, &dst->kv_b, &L->kv_b) || ci_place_mat(be, &dst->o, &L->o) ||
        ci_place_vec(be, &qn, L->q_a_norm, L->q_lora) || ci_place_vec(be, &kn, L->kv_a_norm, L->kv_lora))
        return -1;
    dst->q_a_norm = (float *)qn;
    dst->kv_a_norm = (float *)kn;
    if (!L->kv_b.data) /* MLX MultiLinear heads (embed_q / unembed_out): one range each, evenly spaced */
        return ci_place_heads(be, dst->w_uk, L->w_uk, L->n_heads) || ci_place_heads(be, dst->w_uv, L->w_uv, L->n_heads)
                   ? -1 : 0;
    for (int h = 0; h < L->n_heads; h++)
        if (place_view(be, &dst->w_uk[h], &L->w_uk[h], &L->kv_b, &dst->kv_b) ||
            place_view(be, &dst->w_uv[h], &L->w_uv[h], &L->kv_b, &dst->kv_b))
            return -1;
    return 0;
}

int mla_shard(mla_layer *L, const shd_ctx *t, const char *what, char *err, size_t errlen) {
    const int W = t->world, R = t->rank;
    shd_kept *keep = t->keep;
    shd_range h, oc;
    if (shd_split(L->n_heads, 1, W, R, &h))
        return ci_err(err, errlen, "%s: %d attention heads do not split over %d ranks (the ranks must divide them)", what,
                      L->n_heads, W);
    if (shd_split((int64_t)L->n_heads * L->v, shd_unit(&L->o, 1, L->v), W, R, &oc))
        return ci_err(err, errlen, "%s: o_proj: a rank's heads do not start on its quantization blocks (%d heads of %d over %d ranks)",
                      what, L->n_heads, L->v, W);
    const int64_t qd = L->nope + L->rope, kd = L->nope + L->v, n = h.hi - h.lo;
    if (L->q_lora > 0) shd_rows(&L->q_b, h.lo * qd, h.hi * qd, &L->q_b);
    else shd_rows(&L->q, h.lo * qd, h.hi * qd, &L->q);
    if (L->kv_b.rows) shd_rows(&L->kv_b, h.lo * kd, h.hi * kd, &L->kv_b);   /* the views below lie inside it */
    memmove(L->w_uk, L->w_uk + h.lo, (size_t)n * sizeof *L->w_uk);
    memmove(L->w_uv, L->w_uv + h.lo, (size_t)n * sizeof *L->w_uv);
    if (shd_cols(&L->o, oc.lo, oc.hi, &L->o, keep, what, err, errlen)) return -1;
    L->n_heads = (int)n;
    L->tp_part = shd_part(R);
    return 0;
}

/* ---- scratch ------------------------------------------------------------------------------- */

int mla_scratch_init(ci_backend *be, mla_scratch *s, const mla_layer *L, int max_n) {
    memset(s, 0, sizeof *s);
    size_t n = (size_t)max_n, Hh = (size_t)L->n_heads, lat = (size_t)(L->kv_lora + L->rope), f = sizeof(float);
    s->qa = be->alloc(be, n * (size_t)(L->q_lora > 0 ? L->q_lora : 1) * f);
    s->q = be->alloc(be, n * Hh * (size_t)(L->nope + L->rope) * f);
    s->qcat = be->alloc(be, n * Hh * lat * f);
    s->olat = be->alloc(be, n * Hh * lat * f);
    s->o = be->alloc(be, n * Hh * (size_t)L->v * f);
    s->lat = be->alloc(be, n * lat * f);
    if (!s->qa || !s->q || !s->qcat || !s->olat || !s->o || !s->lat) { mla_scratch_free(be, s); return -1; }
    return 0;
}

void mla_scratch_free(ci_backend *be, mla_scratch *s) {
    float *bufs[] = { s->qa, s->q, s->qcat, s->olat, s->o, s->lat };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) be->buf_free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

/* ---- forward ------------------------------------------------------------------------------- */

int mla_project(ci_backend *be, const mla_layer *L, const float *inv_freq, float mscale, mla_scratch *s, float *xn,
                const float *x, const float *norm_w, int keep_xn, const int32_t *pos, int n, float eps, float *cache,
                float *const *tab, const ci_pages *pages) {
    const int Hh = L->n_heads;
    /* q_a (or the queries [n, Hh, nope+rope] without q_lora) and the latent + k_pe rows,
     * both from the normed input in one pass */
    const ci_mat *Ws[2] = { L->q_lora > 0 ? &L->q_a : &L->q, &L->kv_a };
    float *const ys[2] = { L->q_lora > 0 ? s->qa : s->q, s->lat };
    if (keep_xn) {
        be->rmsnorm(be, xn, x, norm_w, n, (int)L->kv_a.cols, eps);
        be->matmul_n(be, 2, ys, xn, n, Ws);
    } else {
        be->norm_matmul_n(be, xn, x, norm_w, eps, 2, ys, n, Ws);
    }
    if (L->q_lora > 0 && keep_xn) {   /* the indexer reads the normed s->qa too (dsa.c) */
        be->rmsnorm(be, s->qa, s->qa, L->q_a_norm, n, L->q_lora, eps);
        be->matmul(be, s->q, s->qa, n, &L->q_b);
    } else if (L->q_lora > 0) {   /* q_a's RMSNorm and q_b: one launch on a device (s->qa scratch) */
        const ci_mat *qb[1] = { &L->q_b };
        float *const qy[1] = { s->q };
        be->norm_matmul_n(be, s->qa, s->qa, L->q_a_norm, eps, 1, qy, n, qb);
    }
    if (be->mla_prepare) {   /* the two steps below and the rows' store as one op */
        be->mla_prepare(be, s->qcat, s->lat, s->q, L->kv_a_norm, eps, n, Hh, L->nope, L->rope, L->kv_lora, pos, inv_freq,
                        mscale, CI_ROPE_INTERLEAVED, L->w_uk, cache, cache ? NULL : tab, pages);
        return cache || tab;
    }
    /* the latent's norm (the kv_lora part of each row), then rope in place on it and on q */
    be->mla_rope(be, s->lat, s->q, L->kv_a_norm, eps, n, Hh, L->nope, L->rope, L->kv_lora, pos, inv_freq, mscale,
                 CI_ROPE_INTERLEAVED);
    /* absorbed queries: qcat[t, h] = [W_UK[h]ᵀ q_nope[t, h] ‖ q_pe[t, h]] */
    be->mla_absorb_q(be, s->qcat, s->q, n, Hh, L->nope, L->rope, L->kv_lora, L->w_uk);
    return 0;
}

void mla_attend(ci_backend *be, const mla_layer *L, mla_scratch *s, float *cache, float *const *tab,
                const int32_t *pos, int n, int max_keys, const ci_pages *pages, int stored) {
    const int lat = L->kv_lora + L->rope;
    if (!stored) be->kv_store_paged(be, cache, cache ? NULL : tab, 1, lat, s->lat, lat, n, pos, pages);
    /* one shared "KV head" of width kv_lora+rope; values are the same rows (their last
     * rope entries produce output columns that are ignored) */
    be->mla_attend(be, s->olat, s->qcat, cache, cache ? NULL : tab, 1, n, pos, max_keys, L->n_heads, lat, L->scale,
                   pages);
}

void mla_output_add(ci_backend *be, const mla_layer *L, mla_scratch *s, float *x, float *tmp, int n) {
    be->mla_out_heads(be, s->o, s->olat, n, L->n_heads, L->kv_lora, L->kv_lora + L->rope, L->v, L->w_uv);
    ci_out_proj(be, x, s->o, n, &L->o, 1, tmp, L->tp_part);
}
