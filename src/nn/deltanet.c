/* deltanet.c — see deltanet.h. Only backend ops between the projections: the conv, the
 * q / k norms and gates, the recurrence (or the chunked form) and the output gate are the
 * backend's causal_conv and deltanet ops (cpu/deltanet_cpu.c holds the arithmetic this file
 * did by hand), Qwen3-Next's fused projections are put back in order by deltanet_unfuse. */
#include "deltanet.h"
#include "place.h"
#include "../core/status.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int conv_dim(const dn_layer *L) { return 2 * L->hk * L->dk + L->hv * L->dv; }

size_t dn_state_S_offset(const dn_layer *L) { return (size_t)(L->conv_k - 1) * (size_t)conv_dim(L); }

size_t dn_state_floats(const dn_layer *L) {
    return dn_state_S_offset(L) + (size_t)L->hv * (size_t)L->dv * (size_t)L->dk;
}

/* ---- binding -------------------------------------------------------------------------- */

int dn_bind(w_binder *b, dn_layer *L, const char *prefix) {
    const int64_t H = L->hidden, KD = (int64_t)L->hk * L->dk, VD = (int64_t)L->hv * L->dv;
    if (L->layout == DN_SPLIT) {
        w_mat(b, &L->qkv, W_REQUIRED, 2 * KD + VD, H, "%s.in_proj_qkv", prefix);
        w_mat(b, &L->z, W_REQUIRED, VD, H, "%s.in_proj_z", prefix);
        w_mat(b, &L->b, W_REQUIRED, L->hv, H, "%s.in_proj_b", prefix);
        w_mat(b, &L->a, W_REQUIRED, L->hv, H, "%s.in_proj_a", prefix);
    } else {
        w_mat(b, &L->qkvz, W_REQUIRED, 2 * KD + 2 * VD, H, "%s.in_proj_qkvz", prefix);
        w_mat(b, &L->ba, W_REQUIRED, 2 * L->hv, H, "%s.in_proj_ba", prefix);
    }
    w_conv(b, &L->conv_w, 2 * KD + VD, L->conv_k, "%s.conv1d.weight", prefix);  /* -> [K, C], owned by the binder */
    w_vec(b, &L->neg_A, W_REQUIRED, L->hv, 0, W_KIND_NORM, "%s.A_log", prefix);
    w_vec(b, &L->dt_bias, W_REQUIRED, L->hv, 0, W_KIND_BIAS, "%s.dt_bias", prefix);
    w_vec(b, &L->norm_w, W_REQUIRED, L->dv, 0, W_KIND_NORM, "%s.norm.weight", prefix);
    w_mat(b, &L->out, W_REQUIRED, H, VD, "%s.out_proj", prefix);
    if (b->failed) return -1;
    for (int h = 0; h < L->hv; h++) L->neg_A[h] = -expf(L->neg_A[h]);
    L->ops = (ci_deltanet){ L->hk, L->hv, L->dk, L->dv, L->neg_A, L->dt_bias, L->norm_w, L->eps };
    return 1;
}

void dn_layer_free(dn_layer *L) {
    L->conv_w = NULL;  /* the binder's copy, freed with the model's other w_vec copies */
}

int dn_place(ci_backend *be, dn_layer *dst, const dn_layer *L) {
    *dst = *L;
    const float *cw = NULL, *na = NULL, *dt = NULL, *nw = NULL;
    int bad = ci_place_vec(be, &cw, L->conv_w, (int64_t)L->conv_k * conv_dim(L)) ||
              ci_place_vec(be, &na, L->neg_A, L->hv) || ci_place_vec(be, &dt, L->dt_bias, L->hv) ||
              ci_place_vec(be, &nw, L->norm_w, L->dv) || ci_place_mat(be, &dst->out, &L->out);
    if (!bad && L->layout == DN_SPLIT)
        bad = ci_place_mat(be, &dst->qkv, &L->qkv) || ci_place_mat(be, &dst->z, &L->z) ||
              ci_place_mat(be, &dst->b, &L->b) || ci_place_mat(be, &dst->a, &L->a);
    if (!bad && L->layout == DN_FUSED) bad = ci_place_mat(be, &dst->qkvz, &L->qkvz) || ci_place_mat(be, &dst->ba, &L->ba);
    dst->conv_w = (float *)cw;
    dst->neg_A = (float *)na;
    dst->dt_bias = (float *)dt;
    dst->norm_w = (float *)nw;
    dst->ops.neg_A = na;
    dst->ops.dt_bias = dt;
    dst->ops.norm_w = nw;
    return bad ? -1 : 0;
}

int dn_shard(dn_layer *L, const shd_ctx *t, const char *what, char *err, size_t errlen) {
    /* an even share of the value heads, and the key heads they read: split with them when the
     * ranks divide the key heads, else one key head shared by the ranks of its value heads */
    shd_range k, v;
    const int r = L->hv / L->hk, dk = L->dk, dv = L->dv;
    if (shd_split(L->hv, 1, t->world, t->rank, &v) || (L->hk % t->world && t->world % L->hk))
        return ci_err(err, errlen, "%s: %d DeltaNet key / %d value heads do not split over %d ranks", what, L->hk, L->hv,
                      t->world);
    k = (shd_range){ v.lo / r, (v.hi - 1) / r + 1 };
    const int64_t KD = (int64_t)L->hk * dk;
    /* the rank's channels of q | k | v: the conv's and, split, in_proj_qkv's rows */
    const shd_range ch[3] = { { k.lo * dk, k.hi * dk }, { KD + k.lo * dk, KD + k.hi * dk },
                              { 2 * KD + v.lo * dv, 2 * KD + v.hi * dv } };
    if (L->layout == DN_SPLIT) {
        if (shd_rows_gather(&L->qkv, ch, 3, &L->qkv, t->keep, what, err, errlen)) return -1;
        shd_rows(&L->z, v.lo * dv, v.hi * dv, &L->z);
        shd_rows(&L->b, v.lo, v.hi, &L->b);
        shd_rows(&L->a, v.lo, v.hi, &L->a);
    } else if (L->hk % t->world == 0) {   /* grouped per key head: whole groups */
        const int64_t G = 2 * (int64_t)dk + 2 * (int64_t)r * dv;
        shd_rows(&L->qkvz, k.lo * G, k.hi * G, &L->qkvz);
        shd_rows(&L->ba, k.lo * 2 * r, k.hi * 2 * r, &L->ba);
    } else {   /* part of one key head's group: its q, k, and the rank's value heads' v and z (b and a) */
        const int64_t G = 2 * (int64_t)dk + 2 * (int64_t)r * dv, g0 = k.lo * G, j0 = v.lo - k.lo * r, j1 = v.hi - k.lo * r;
        const shd_range qs[3] = { { g0, g0 + 2 * dk }, { g0 + 2 * dk + j0 * dv, g0 + 2 * dk + j1 * dv },
                                  { g0 + 2 * dk + (r + j0) * dv, g0 + 2 * dk + (r + j1) * dv } };
        const shd_range bs[2] = { { k.lo * 2 * r + j0, k.lo * 2 * r + j1 }, { k.lo * 2 * r + r + j0, k.lo * 2 * r + r + j1 } };
        if (shd_rows_gather(&L->qkvz, qs, 3, &L->qkvz, t->keep, what, err, errlen) ||
            shd_rows_gather(&L->ba, bs, 2, &L->ba, t->keep, what, err, errlen))
            return -1;
    }
    if (shd_cols(&L->out, v.lo * dv, v.hi * dv, &L->out, t->keep, what, err, errlen)) return -1;
    if (L->conv_w && !(L->conv_w = shd_f32_cols(L->conv_w, L->conv_k, conv_dim(L), ch, 3, t->keep)))
        return ci_err(err, errlen, "%s: out of memory for a rank's conv taps", what);
    if (L->neg_A) L->neg_A += v.lo;      /* offsets into the binder's copies */
    if (L->dt_bias) L->dt_bias += v.lo;
    L->hk = (int)(k.hi - k.lo);
    L->hv = (int)(v.hi - v.lo);
    L->ops = (ci_deltanet){ L->hk, L->hv, dk, dv, L->neg_A, L->dt_bias, L->norm_w, L->eps };
    L->tp_part = shd_part(t->rank);
    return 0;
}

/* ---- scratch -------------------------------------------------------------------------- */

int dn_scratch_init(ci_backend *be, dn_scratch *s, const dn_layer *L, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    const size_t n = (size_t)max_n, C = (size_t)conv_dim(L), VD = (size_t)L->hv * L->dv, KD = (size_t)L->hk * L->dk,
                 f = sizeof(float);
    if (L->layout == DN_FUSED) {
        s->proj = be->alloc(be, n * (2 * KD + 2 * VD) * f);
        s->ba = be->alloc(be, n * 2 * (size_t)L->hv * f);
    }
    s->xin = be->alloc(be, n * C * f);
    s->win = be->alloc(be, (n + (size_t)L->conv_k - 1) * C * f);
    s->mix = be->alloc(be, n * C * f);
    s->z = be->alloc(be, n * VD * f);
    s->b = be->alloc(be, n * (size_t)L->hv * f);
    s->a = be->alloc(be, n * (size_t)L->hv * f);
    s->work = be->alloc(be, ci_deltanet_scratch_floats(&L->ops, max_n) * f);
    if ((L->layout == DN_FUSED && (!s->proj || !s->ba)) || !s->xin || !s->win || !s->mix || !s->z || !s->b || !s->a ||
        !s->work) {
        dn_scratch_free(be, s);
        return -1;
    }
    return 0;
}

void dn_scratch_free(ci_backend *be, dn_scratch *s) {
    float *bufs[] = { s->proj, s->ba, s->xin, s->win, s->mix, s->z, s->b, s->a, s->work };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) be->buf_free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

/* ---- the mixer ------------------------------------------------------------------------ */

/* Projections of x [n, hidden] (with norm_w: of rmsnorm(x) * norm_w, normed into xn) into
 * s->xin ([q | k | v] pre-conv), s->z, s->b, s->a. */
static void project(ci_backend *be, const dn_layer *L, dn_scratch *s, const float *x, const float *norm_w, float eps,
                    float *xn, int n) {
    float *const y4[4] = { s->xin, s->z, s->b, s->a }, *const y2[2] = { s->proj, s->ba };
    const ci_mat *const W4[4] = { &L->qkv, &L->z, &L->b, &L->a }, *const W2[2] = { &L->qkvz, &L->ba };
    const int split = L->layout == DN_SPLIT, count = split ? 4 : 2;
    float *const *ys = split ? y4 : y2;
    const ci_mat *const *Ws = split ? W4 : W2;
    if (norm_w) be->norm_matmul_n(be, xn, x, norm_w, eps, count, ys, n, Ws);
    else be->matmul_n(be, count, ys, x, n, Ws);
    if (!split) be->deltanet_unfuse(be, s->xin, s->z, s->b, s->a, s->proj, s->ba, n, &L->ops);
}

/* The conv and the core: s->xin -> s->z (the gated output) for a chunk (tab NULL) or a step. */
static void mix(ci_backend *be, const dn_layer *L, dn_scratch *s, float *state, float *const *tab, int n, dn_mode mode) {
    /* causal depthwise conv + SiLU over the window and the rows; the window keeps the last K-1 rows */
    be->causal_conv(be, s->mix, s->xin, n, conv_dim(L), L->conv_k, L->conv_w, tab ? NULL : state, tab, 2, s->win);
    be->deltanet(be, s->z, s->mix, s->b, s->a, n, &L->ops, tab ? NULL : state + dn_state_S_offset(L), tab ? tab + 1 : NULL,
                 2, !tab && mode == DN_RECURRENT, s->work);
}

/* out_proj of the gated output s->z into y (acc: added to y, the residual; backend.h ci_out_proj) */
static void output(ci_backend *be, const dn_layer *L, dn_scratch *s, float *y, int acc, float *tmp, int n) {
    ci_out_proj(be, y, s->z, n, &L->out, acc, tmp, L->tp_part);
}

void dn_forward(ci_backend *be, const dn_layer *L, dn_scratch *s, float *state, float *out, const float *x, int n,
                dn_mode mode) {
    project(be, L, s, x, NULL, 0, NULL, n);
    mix(be, L, s, state, NULL, n, mode);
    output(be, L, s, out, 0, NULL, n);
}

void dn_forward_rows(ci_backend *be, const dn_layer *L, dn_scratch *s, float *const *tab, float *out, const float *x,
                     int n) {
    project(be, L, s, x, NULL, 0, NULL, n);
    mix(be, L, s, NULL, tab, n, DN_AUTO);
    output(be, L, s, out, 0, NULL, n);
}

void dn_forward_add(ci_backend *be, const dn_layer *L, dn_scratch *s, float *state, float *x, const float *norm_w,
                    float eps, float *xn, float *tmp, int n, dn_mode mode) {
    project(be, L, s, x, norm_w, eps, xn, n);
    mix(be, L, s, state, NULL, n, mode);
    output(be, L, s, x, 1, tmp, n);
}

void dn_forward_rows_add(ci_backend *be, const dn_layer *L, dn_scratch *s, float *const *tab, float *x,
                         const float *norm_w, float eps, float *xn, float *tmp, int n) {
    project(be, L, s, x, norm_w, eps, xn, n);
    mix(be, L, s, NULL, tab, n, DN_AUTO);
    output(be, L, s, x, 1, tmp, n);
}
