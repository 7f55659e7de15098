/* shortconv.c — see shortconv.h. Only backend ops between the projections: the conv
 * itself (window, taps, gates, state) is the backend's shortconv op (cpu/conv_cpu.c holds
 * the arithmetic this file did by hand).
 *
 * The depthwise kernel [dim, 1, K] is bound by w_conv (weights.h) into a tap-major
 * [K, dim] f32 copy owned with the model's other w_vec copies. */
#include "shortconv.h"
#include "../core/status.h"
#include "place.h"
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

static int place_vec(ci_backend *be, float **dst, const float *v, size_t len) {
    *dst = v ? (float *)be->weight(be, v, len * sizeof(float)) : NULL;
    return v && !*dst ? -1 : 0;
}

int sc_place(ci_backend *be, shortconv *dst, const shortconv *sc) {
    const size_t D = (size_t)sc->dim;
    *dst = *sc;
    return ci_place_mat(be, &dst->in_proj, &sc->in_proj) || ci_place_mat(be, &dst->out_proj, &sc->out_proj) ||
                   place_vec(be, &dst->taps, sc->taps, (size_t)sc->K * D) ||
                   place_vec(be, &dst->in_bias, sc->in_bias, 3 * D) || place_vec(be, &dst->conv_bias, sc->conv_bias, D) ||
                   place_vec(be, &dst->out_bias, sc->out_bias, (size_t)sc->out_proj.rows)
               ? -1
               : 0;
}

int sc_shard(shortconv *sc, const shd_ctx *t, const char *what, char *err, size_t errlen) {
    shd_range c;
    const int64_t D = sc->dim;
    if (shd_split(D, 1, t->world, t->rank, &c))
        return ci_err(err, errlen, "%s: %lld short-conv channels do not split over %d ranks", what, (long long)D, t->world);
    const shd_range bcx[3] = { { c.lo, c.hi }, { D + c.lo, D + c.hi }, { 2 * D + c.lo, 2 * D + c.hi } };
    if (shd_rows_gather(&sc->in_proj, bcx, 3, &sc->in_proj, t->keep, what, err, errlen) ||
        shd_cols(&sc->out_proj, c.lo, c.hi, &sc->out_proj, t->keep, what, err, errlen))
        return -1;
    if ((sc->taps && !(sc->taps = shd_f32_cols(sc->taps, sc->K, D, &c, 1, t->keep))) ||
        (sc->in_bias && !(sc->in_bias = shd_f32_rows(sc->in_bias, 1, bcx, 3, t->keep))))
        return ci_err(err, errlen, "%s: out of memory for a rank's conv taps", what);
    if (sc->conv_bias) sc->conv_bias += c.lo;   /* an offset into the binder's copy */
    sc->dim = (int)(c.hi - c.lo);
    sc->tp_part = shd_part(t->rank);
    return 0;
}

int sc_scratch_init(ci_backend *be, sc_scratch *s, const shortconv *sc, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    size_t D = (size_t)sc->dim;
    s->bcx = be->alloc(be, (size_t)max_n * 3 * D * sizeof(float));
    s->win = be->alloc(be, ((size_t)sc->K - 1 + (size_t)max_n) * D * sizeof(float));
    s->y = be->alloc(be, (size_t)max_n * D * sizeof(float));
    if (!s->bcx || !s->win || !s->y) {
        sc_scratch_free(be, s);
        return -1;
    }
    return 0;
}

void sc_scratch_free(ci_backend *be, sc_scratch *s) {
    void *bufs[] = { s->bcx, s->win, s->y };
    for (int i = 0; i < 3; i++)
        if (bufs[i]) be->buf_free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

void sc_forward_add_norm(ci_backend *be, const shortconv *sc, sc_scratch *s, float *state, float *const *states,
                         float *x, float *xn, const float *norm_w, float eps, int n) {
    const int D = sc->dim;
    float *const ys[1] = { s->bcx };
    const ci_mat *const ws[1] = { &sc->in_proj };
    be->norm_matmul_n(be, xn, x, norm_w, eps, 1, ys, n, ws);       /* [n, 3D]: B | C | X */
    be->shortconv(be, s->y, s->bcx, n, D, sc->K, sc->taps, sc->in_bias, sc->conv_bias, state, states, s->win);
    if (!sc->out_bias) {
        ci_out_proj(be, x, s->y, n, &sc->out_proj, 1, xn, sc->tp_part);   /* x += [n, H] */
        return;
    }
    const int H = (int)sc->out_proj.rows;
    be->matmul(be, xn, s->y, n, &sc->out_proj);
    if (sc->tp_part == CI_TP_REST) {   /* its channels' part alone: the bias is rank 0's */
        be->copy(be, x, xn, (size_t)n * (size_t)H * sizeof(float));
    } else {
        be->add_bias(be, xn, sc->out_bias, n, H);
        be->add(be, x, xn, (int64_t)n * H);
    }
    if (sc->tp_part) be->all_reduce(be, x, (int64_t)n * H);
}
