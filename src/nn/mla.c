/* mla.c — see mla.h. */
#include "mla.h"
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

int mla_scratch_init(mla_scratch *s, const mla_layer *L, int max_n) {
    memset(s, 0, sizeof *s);
    size_t n = (size_t)max_n, Hh = (size_t)L->n_heads, lat = (size_t)(L->kv_lora + L->rope);
    size_t g = (size_t)(L->nope > L->kv_lora ? L->nope : L->kv_lora);
    if ((size_t)L->v > g) g = (size_t)L->v;
    s->qa = malloc(n * (size_t)(L->q_lora > 0 ? L->q_lora : 1) * sizeof(float));
    s->q = malloc(n * Hh * (size_t)(L->nope + L->rope) * sizeof(float));
    s->qcat = malloc(n * Hh * lat * sizeof(float));
    s->olat = malloc(n * Hh * lat * sizeof(float));
    s->tin = malloc(n * g * sizeof(float));
    s->tout = malloc(n * g * sizeof(float));
    s->o = malloc(n * Hh * (size_t)L->v * sizeof(float));
    if (!s->qa || !s->q || !s->qcat || !s->olat || !s->tin || !s->tout || !s->o) { mla_scratch_free(s); return -1; }
    return 0;
}

void mla_scratch_free(mla_scratch *s) {
    free(s->qa); free(s->q); free(s->qcat); free(s->olat); free(s->tin); free(s->tout); free(s->o);
    memset(s, 0, sizeof *s);
}

void mla_project(ci_backend *be, const mla_layer *L, const rope_table *rt, mla_scratch *s, float *lat_rows,
                 const float *xn, const int32_t *pos, int n, float eps) {
    const int Hh = L->n_heads, qd = L->nope + L->rope, lat = L->kv_lora + L->rope;
    /* queries [n, Hh, nope+rope] */
    if (L->q_lora > 0) {
        be->matmul(be, s->qa, xn, n, &L->q_a);
        be->rmsnorm(be, s->qa, s->qa, L->q_a_norm, n, L->q_lora, eps);
        be->matmul(be, s->q, s->qa, n, &L->q_b);
    } else {
        be->matmul(be, s->q, xn, n, &L->q);
    }
    /* latent + k_pe, then norm and rope in place */
    be->matmul(be, lat_rows, xn, n, &L->kv_a);
    for (int t = 0; t < n; t++) be->rmsnorm(be, lat_rows + (size_t)t * lat, lat_rows + (size_t)t * lat, L->kv_a_norm, 1, L->kv_lora, eps);
    be->rope(be, lat_rows, n, 1, lat, L->kv_lora, L->rope, pos, rt->inv_freq, rt->mscale, CI_ROPE_INTERLEAVED);
    be->rope(be, s->q, n, Hh, qd, L->nope, L->rope, pos, rt->inv_freq, rt->mscale, CI_ROPE_INTERLEAVED);
    /* absorbed queries: qcat[t, h] = [W_UK[h]ᵀ q_nope[t, h] ‖ q_pe[t, h]] */
    for (int h = 0; h < Hh; h++) {
        for (int t = 0; t < n; t++)
            memcpy(s->tin + (size_t)t * L->nope, s->q + ((size_t)t * Hh + h) * qd, (size_t)L->nope * sizeof(float));
        be->matmul_xw(be, s->tout, s->tin, n, &L->w_uk[h]);                /* [n, kv_lora] */
        for (int t = 0; t < n; t++) {
            float *dst = s->qcat + ((size_t)t * Hh + h) * lat;
            memcpy(dst, s->tout + (size_t)t * L->kv_lora, (size_t)L->kv_lora * sizeof(float));
            memcpy(dst + L->kv_lora, s->q + ((size_t)t * Hh + h) * qd + L->nope, (size_t)L->rope * sizeof(float));
        }
    }
}

void mla_output(ci_backend *be, const mla_layer *L, mla_scratch *s, float *out, int n) {
    const int Hh = L->n_heads, lat = L->kv_lora + L->rope;
    for (int h = 0; h < Hh; h++) {
        for (int t = 0; t < n; t++)
            memcpy(s->tin + (size_t)t * L->kv_lora, s->olat + ((size_t)t * Hh + h) * lat, (size_t)L->kv_lora * sizeof(float));
        be->matmul(be, s->tout, s->tin, n, &L->w_uv[h]);                   /* [n, v] */
        for (int t = 0; t < n; t++)
            memcpy(s->o + ((size_t)t * Hh + h) * L->v, s->tout + (size_t)t * L->v, (size_t)L->v * sizeof(float));
    }
    be->matmul(be, out, s->o, n, &L->o);
}

void mla_forward(ci_backend *be, const mla_layer *L, const rope_table *rt, mla_scratch *s, float *cache, float *out,
                 const float *xn, const int32_t *pos, int n, int pos0, float eps) {
    const int lat = L->kv_lora + L->rope;
    mla_project(be, L, rt, s, cache + (size_t)pos0 * lat, xn, pos, n, eps);   /* straight into this chunk's rows */
    /* one shared "KV head" of width kv_lora+rope; values are the same rows (their last
     * rope entries produce output columns that are ignored) */
    be->attention(be, s->olat, s->qcat, cache, cache, n, pos0, L->n_heads, 1, lat, lat, L->scale);
    mla_output(be, L, s, out, n);
}
