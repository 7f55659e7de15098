/* shortconv.c — see shortconv.h.
 *
 * The depthwise kernel [dim, 1, K] is bound by w_conv (weights.h) into a tap-major
 * [K, dim] f32 copy owned with the model's other w_vec copies. */
#include "shortconv.h"
#include "../core/status.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sc_bind(w_binder *b, shortconv *sc, int dim, int K, int bias, const char *prefix) {
    memset(sc, 0, sizeof *sc);
    sc->dim = dim;
    sc->K = K;
    w_mat(b, &sc->in_proj, W_REQUIRED, 3 * (int64_t)dim, dim, "%s.in_proj", prefix);
    w_mat(b, &sc->out_proj, W_REQUIRED, dim, dim, "%s.out_proj", prefix);
    w_conv(b, &sc->taps, dim, K, "%s.conv.weight", prefix);  /* -> [K, dim], owned by the binder */
    if (bias) {
        w_vec(b, &sc->in_bias, W_REQUIRED, 3 * (int64_t)dim, 0, W_KIND_BIAS, "%s.in_proj.bias", prefix);
        w_vec(b, &sc->conv_bias, W_REQUIRED, dim, 0, W_KIND_BIAS, "%s.conv.bias", prefix);
        w_vec(b, &sc->out_bias, W_REQUIRED, dim, 0, W_KIND_BIAS, "%s.out_proj.bias", prefix);
    }
    return b->failed ? -1 : 0;
}

void sc_free(shortconv *sc) {
    sc->taps = NULL;  /* the binder's copy, freed with the model's other w_vec copies */
}

int sc_scratch_init(sc_scratch *s, const shortconv *sc, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    size_t D = (size_t)sc->dim;
    s->bcx = malloc((size_t)max_n * 3 * D * sizeof(float));
    s->win = malloc(((size_t)sc->K - 1 + (size_t)max_n) * D * sizeof(float));
    s->y = malloc((size_t)max_n * D * sizeof(float));
    if (!s->bcx || !s->win || !s->y) {
        sc_scratch_free(s);
        return -1;
    }
    return 0;
}

void sc_scratch_free(sc_scratch *s) {
    free(s->bcx); free(s->win); free(s->y);
    memset(s, 0, sizeof *s);
}

static void add_bias(float *y, const float *bias, int n, int width) {
    for (int t = 0; t < n; t++)
        for (int i = 0; i < width; i++) y[(size_t)t * width + i] += bias[i];
}

/* Tokens [t0, t0 + n) of s->bcx following `state` (updated): their conv outputs into s->y. */
static void conv_span(const shortconv *sc, sc_scratch *s, float *state, int t0, int n) {
    const int D = sc->dim, K = sc->K, H = K - 1;
    /* window: H history rows from the state, then bx = B ⊙ X of these tokens */
    if (H) memcpy(s->win, state, (size_t)H * D * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float *B = s->bcx + (size_t)(t0 + t) * 3 * D, *X = B + 2 * D;
        float *bx = s->win + (size_t)(H + t) * D;
        for (int c = 0; c < D; c++) bx[c] = B[c] * X[c];
    }
    /* y[t] = C[t] ⊙ Σ_k taps[k] ⊙ win[t + k]: output t sees inputs t-(K-1) .. t */
    for (int t = 0; t < n; t++) {
        float *y = s->y + (size_t)(t0 + t) * D;
        if (sc->conv_bias) memcpy(y, sc->conv_bias, (size_t)D * sizeof(float));
        else memset(y, 0, (size_t)D * sizeof(float));
        for (int k = 0; k < K; k++) {
            const float *w = sc->taps + (size_t)k * D, *in = s->win + (size_t)(t + k) * D;
            for (int c = 0; c < D; c++) y[c] += w[c] * in[c];
        }
        const float *C = s->bcx + (size_t)(t0 + t) * 3 * D + D;
        for (int c = 0; c < D; c++) y[c] *= C[c];
    }
    if (H) memcpy(state, s->win + (size_t)n * D, (size_t)H * D * sizeof(float));  /* last K-1 rows */
}

void sc_forward(ci_backend *be, const shortconv *sc, sc_scratch *s, float *state, float *out, const float *x, int n) {
    const int D = sc->dim;
    be->matmul(be, s->bcx, x, n, &sc->in_proj);                   /* [n, 3D]: B | C | X */
    if (sc->in_bias) add_bias(s->bcx, sc->in_bias, n, 3 * D);
    conv_span(sc, s, state, 0, n);
    be->matmul(be, out, s->y, n, &sc->out_proj);                   /* [n, D] */
    if (sc->out_bias) add_bias(out, sc->out_bias, n, D);
}

void sc_forward_rows(ci_backend *be, const shortconv *sc, sc_scratch *s, float *const *states, float *out,
                     const float *x, int n) {
    const int D = sc->dim;
    be->matmul(be, s->bcx, x, n, &sc->in_proj);
    if (sc->in_bias) add_bias(s->bcx, sc->in_bias, n, 3 * D);
    for (int i = 0; i < n; i++) conv_span(sc, s, states[i], i, 1);
    be->matmul(be, out, s->y, n, &sc->out_proj);
    if (sc->out_bias) add_bias(out, sc->out_bias, n, D);
}
