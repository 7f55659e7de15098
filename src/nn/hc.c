/* hc.c — see hc.h. */
#include "hc.h"
#include <math.h>
#include <string.h>

static float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

/* o[d] = Σ_j pre[j] · xs[j][d], the streams xs [C, D] collapsed to one row */
static void collapse_row(const float *pre, const float *xs, int C, int D, float *o) {
    for (int d = 0; d < D; d++) {
        float a = 0;
        for (int j = 0; j < C; j++) a += pre[j] * xs[(size_t)j * D + d];
        o[d] = a;
    }
}

/* mix[n, rows of fn] = (X · fnᵀ) scaled by each token's rsqrt(mean(flat²) + eps) */
static void mixes(ci_backend *be, const hc_map *h, const float *X, int n, float *mix) {
    const int F = h->hc * h->dim, M = (int)h->fn.rows;
    be->matmul(be, mix, X, n, &h->fn);
    for (int t = 0; t < n; t++) {
        const float *f = X + (size_t)t * F;
        double ss = 0;
        for (int i = 0; i < F; i++) ss += (double)f[i] * f[i];
        float r = 1.0f / sqrtf((float)(ss / F) + h->norm_eps);
        for (int i = 0; i < M; i++) mix[(size_t)t * M + i] *= r;
    }
}

void hc_collapse(ci_backend *be, const hc_map *h, const float *X, int n, float *mix, float *post, float *comb, float *x) {
    const int C = h->hc, D = h->dim, M = (2 + C) * C;
    mixes(be, h, X, n, mix);
    for (int t = 0; t < n; t++) {
        const float *mx = mix + (size_t)t * M;
        float pre[C];
        float *po = post + (size_t)t * C, *cb = comb + (size_t)t * C * C;
        for (int j = 0; j < C; j++) {
            pre[j] = sigm(mx[j] * h->scale[0] + h->base[j]) + h->eps;
            po[j] = 2.0f * sigm(mx[C + j] * h->scale[1] + h->base[C + j]);
        }
        for (int i = 0; i < C; i++) {                 /* row softmax of the comb logits, + eps */
            float *row = cb + i * C, m = -INFINITY;
            for (int j = 0; j < C; j++) {
                row[j] = mx[2 * C + i * C + j] * h->scale[2] + h->base[2 * C + i * C + j];
                if (row[j] > m) m = row[j];
            }
            float s = 0;
            for (int j = 0; j < C; j++) { row[j] = expf(row[j] - m); s += row[j]; }
            for (int j = 0; j < C; j++) row[j] = row[j] / s + h->eps;
        }
        for (int it = 0; it < h->iters; it++) {       /* columns, then (rows, columns) again */
            if (it > 0)
                for (int i = 0; i < C; i++) {
                    float s = 0;
                    for (int j = 0; j < C; j++) s += cb[i * C + j];
                    for (int j = 0; j < C; j++) cb[i * C + j] /= s + h->eps;
                }
            for (int j = 0; j < C; j++) {
                float s = 0;
                for (int i = 0; i < C; i++) s += cb[i * C + j];
                for (int i = 0; i < C; i++) cb[i * C + j] /= s + h->eps;
            }
        }
        collapse_row(pre, X + (size_t)t * C * D, C, D, x + (size_t)t * D);
    }
}

void hc_expand(const hc_map *h, float *X, const float *y, const float *post, const float *comb, int n, float *tmp) {
    const int C = h->hc, D = h->dim;
    for (int t = 0; t < n; t++) {
        float *xs = X + (size_t)t * C * D;
        const float *po = post + (size_t)t * C, *cb = comb + (size_t)t * C * C, *yt = y + (size_t)t * D;
        memcpy(tmp, xs, (size_t)C * D * sizeof(float));
        for (int k = 0; k < C; k++) {
            float *o = xs + (size_t)k * D;
            for (int d = 0; d < D; d++) {
                float a = po[k] * yt[d];
                for (int j = 0; j < C; j++) a += cb[j * C + k] * tmp[(size_t)j * D + d];
                o[d] = a;
            }
        }
    }
}

void hc_head(ci_backend *be, const hc_map *h, const float *X, int n, float *mix, float *x) {
    const int C = h->hc, D = h->dim;
    mixes(be, h, X, n, mix);
    for (int t = 0; t < n; t++) {
        float pre[C];
        for (int j = 0; j < C; j++) pre[j] = sigm(mix[(size_t)t * C + j] * h->scale[0] + h->base[j]) + h->eps;
        collapse_row(pre, X + (size_t)t * C * D, C, D, x + (size_t)t * D);
    }
}
