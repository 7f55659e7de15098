/* mamba2.c — see mamba2.h: the mixer wired on backend ops (the block norm fused into in_proj,
 * mamba_conv, ssd_scan, gated_rmsnorm, out_proj with the residual add); the arithmetic of
 * the three middle ops is the backend's (backend/cpu/mamba_cpu.c on the CPU). */
#include "mamba2.h"
#include "place.h"
#include "../core/status.h"
#include <string.h>
#include <time.h>

size_t mamba2_conv_floats(const mamba2_layer *L) { return (size_t)(L->d_conv - 1) * (size_t)L->conv_dim; }
size_t mamba2_ssm_floats(const mamba2_layer *L) {
    return (size_t)L->n_heads * (size_t)L->head_dim * (size_t)L->d_state;
}

static ci_ssd ssd_desc(const mamba2_layer *L) {
    return (ci_ssd){ .n_heads = L->n_heads, .head_dim = L->head_dim, .n_groups = L->n_groups,
                     .d_state = L->d_state, .dt_min = L->dt_min, .dt_bias = L->dt_bias, .A = L->A, .D = L->D };
}

void mamba2_scratch_free(ci_backend *be, mamba2_scratch *s) {
    float *bufs[] = { s->proj, s->xbc, s->y, s->scan };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) be->buf_free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

int mamba2_scratch_init(ci_backend *be, mamba2_scratch *s, const mamba2_layer *L, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    const size_t n = (size_t)max_n, W = (size_t)(L->inner + L->conv_dim + L->n_heads), f = sizeof(float);
    const ci_ssd d = ssd_desc(L);
    s->proj = be->alloc(be, n * W * f);
    s->xbc = be->alloc(be, n * (size_t)L->conv_dim * f);
    s->y = be->alloc(be, n * (size_t)L->inner * f);
    s->scan = be->alloc(be, ci_ssd_scratch_floats(max_n, &d) * f);
    if (!s->proj || !s->xbc || !s->y || !s->scan) {
        mamba2_scratch_free(be, s);
        return -1;
    }
    return 0;
}

int mamba2_shard(mamba2_layer *L, const shd_ctx *t, const char *what, char *err, size_t errlen) {
    shd_range g;
    if (shd_split(L->n_groups, 1, t->world, t->rank, &g)) return 0;   /* whole on every rank */
    const int64_t hpg = L->n_heads / L->n_groups, P = L->head_dim, N = L->d_state, I = L->inner,
                  GN = (int64_t)L->n_groups * N, h0 = g.lo * hpg, h1 = g.hi * hpg;
    /* the rank's xBC channels (x, B, C), then in_proj's rows: z, those channels, dt */
    const shd_range ch[3] = { { h0 * P, h1 * P }, { I + g.lo * N, I + g.hi * N }, { I + GN + g.lo * N, I + GN + g.hi * N } };
    const shd_range rows[5] = { { h0 * P, h1 * P }, { I + ch[0].lo, I + ch[0].hi }, { I + ch[1].lo, I + ch[1].hi },
                                { I + ch[2].lo, I + ch[2].hi }, { I + L->conv_dim + h0, I + L->conv_dim + h1 } };
    if (shd_rows_gather(&L->in_proj, rows, 5, &L->in_proj, t->keep, what, err, errlen) ||
        shd_cols(&L->out_proj, h0 * P, h1 * P, &L->out_proj, t->keep, what, err, errlen))
        return -1;
    if ((L->conv_w && !(L->conv_w = shd_f32_cols(L->conv_w, L->d_conv, L->conv_dim, ch, 3, t->keep))) ||
        (L->conv_b && !(L->conv_b = shd_f32_rows(L->conv_b, 1, ch, 3, t->keep))))
        return ci_err(err, errlen, "%s: out of memory for a rank's conv taps", what);
    L->dt_bias += h0;   /* offsets into the binder's copies */
    L->A += h0;
    L->D += h0;
    L->norm_w += h0 * P;
    L->n_heads = (int)(h1 - h0);
    L->n_groups = (int)(g.hi - g.lo);
    L->inner = (int)((h1 - h0) * P);
    L->conv_dim = L->inner + 2 * L->n_groups * (int)N;
    L->tp_part = shd_part(t->rank);
    return 0;
}

int mamba2_place(ci_backend *be, mamba2_layer *dst, const mamba2_layer *L) {
    *dst = *L;
    const float *v[6];
    int bad = ci_place_mat(be, &dst->in_proj, &L->in_proj) || ci_place_mat(be, &dst->out_proj, &L->out_proj) ||
              ci_place_vec(be, &v[0], L->conv_w, (int64_t)L->d_conv * L->conv_dim) ||
              ci_place_vec(be, &v[1], L->conv_b, L->conv_dim) || ci_place_vec(be, &v[2], L->dt_bias, L->n_heads) ||
              ci_place_vec(be, &v[3], L->A, L->n_heads) || ci_place_vec(be, &v[4], L->D, L->n_heads) ||
              ci_place_vec(be, &v[5], L->norm_w, L->inner);
    if (bad) return -1;
    dst->conv_w = (float *)v[0];
    dst->conv_b = (float *)v[1];
    dst->dt_bias = (float *)v[2];
    dst->A = (float *)v[3];
    dst->D = (float *)v[4];
    dst->norm_w = (float *)v[5];
    return 0;
}

/* The scan of s->xbc's n rows into s->y (dt from proj), timed. */
static void scan(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *state, float *const *states, int n,
                 int chunked) {
    const int W = L->inner + L->conv_dim + L->n_heads;
    const ci_ssd d = ssd_desc(L);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    be->ssd_scan(be, s->y, s->xbc, L->conv_dim, s->proj + L->inner + L->conv_dim, W, n, &d, state, states, chunked,
                 s->scan);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s->scan_seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

/* x += out_proj(gated_norm(scan(conv(in_proj(rmsnorm(x)))))), the state either one
 * sequence's (state / ssm) or a table per row (tab / ssm_tab). */
static void mixer(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *conv_state, float *ssm_state,
                  float *const *conv_tab, float *const *ssm_tab, float *x, float *xn, const float *norm_w, float eps,
                  int n, int chunked) {
    const int W = L->inner + L->conv_dim + L->n_heads;
    float *const ys[1] = { s->proj };
    const ci_mat *const ws[1] = { &L->in_proj };
    be->norm_matmul_n(be, xn, x, norm_w, eps, 1, ys, n, ws);          /* [n, z | xBC | dt] */
    be->mamba_conv(be, s->xbc, s->proj + L->inner, W, n, L->conv_dim, L->d_conv, L->conv_w, L->conv_b, conv_state,
                   conv_tab);
    scan(be, L, s, ssm_state, ssm_tab, n, chunked);
    be->gated_rmsnorm(be, s->y, s->proj, W, L->norm_w, n, L->inner, L->inner / L->n_groups, L->eps);
    ci_out_proj(be, x, s->y, n, &L->out_proj, 1, xn, L->tp_part);   /* x += [n, hidden] */
}

void mamba2_forward(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *conv_state, float *ssm_state,
                    float *x, float *xn, const float *norm_w, float eps, int n, mamba2_scan form) {
    mixer(be, L, s, conv_state, ssm_state, NULL, NULL, x, xn, norm_w, eps, n, n > 1 && form == MAMBA2_SCAN_CHUNKED);
}

void mamba2_forward_rows(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *const *conv_states,
                         float *const *ssm_states, float *x, float *xn, const float *norm_w, float eps, int n) {
    mixer(be, L, s, NULL, NULL, conv_states, ssm_states, x, xn, norm_w, eps, n, 0);
}
