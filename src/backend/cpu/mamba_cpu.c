/* mamba_cpu.c — the CPU backend's Mamba2 ops (backend.h: mamba_conv, ssd_scan,
 * gated_rmsnorm, relu2), in host memory. The arithmetic is nn/mamba2.c's as it was before it
 * became ops (conv taps in k order, dt softplus and clamp, the recurrence, the chunked SSD
 * with its two state products through the backend's matmul, the gated norm), so
 * Nemotron-H's logits keep their bits.
 *
 * Layouts: xBC row t holds x (heads × P) then B (groups × N) then C (groups × N); the SSM
 * state is [head][p][n]; the conv state is the K-1 inputs before the current rows, oldest
 * first. Heads of one group are adjacent, so a group's states form one [Hm/G * P, N]
 * matrix for the backend's matmul. Inner loops run over fixed-size blocks with a scalar
 * tail (plain C the compiler vectorises at -O2). Plain-C work runs over the backend's pool
 * (tasks per head or per group); matmuls are issued from the calling thread only, between
 * pool runs (the pool is not re-entrant). */
#include "cpu_kernels.h"
#include <math.h>
#include <string.h>

enum { VB = 16 };             /* floats per vectorisable block */

/* Decay factors e^x with x below this are taken as 0. Every sum they enter also has a
 * term of weight e^0 (the current token), so the error is below e^-60 relative, far under
 * f32 rounding; without the cut, fast-forgetting heads fill the chunk products with
 * denormals (e^-90 and less), which x86 multiplies about a hundred times slower. */
#define LOG_TINY (-60.0f)

static float decay(float x) { return x < LOG_TINY ? 0.0f : expf(x); }

/* ---- small vector helpers ----------------------------------------------------------- */

/* y[i] += a * x[i] */
static void axpy(float *restrict y, const float *restrict x, float a, int n) {
    int i = 0;
    for (; i + VB <= n; i += VB)
        for (int k = 0; k < VB; k++) y[i + k] += a * x[i + k];
    for (; i < n; i++) y[i] += a * x[i];
}

/* y[i] += w[i] * x[i] */
static void axpy_v(float *restrict y, const float *restrict w, const float *restrict x, int n) {
    int i = 0;
    for (; i + VB <= n; i += VB)
        for (int k = 0; k < VB; k++) y[i + k] += w[i + k] * x[i + k];
    for (; i < n; i++) y[i] += w[i] * x[i];
}

/* One state row of the recurrence: s = a·s + b·B, returns s·C. */
static float step_row(float *restrict s, const float *restrict B, const float *restrict C, float a, float b, int n) {
    float acc[VB] = { 0 };
    int i = 0;
    for (; i + VB <= n; i += VB)
        for (int k = 0; k < VB; k++) {
            float v = a * s[i + k] + b * B[i + k];
            s[i + k] = v;
            acc[k] += v * C[i + k];
        }
    float t = 0;
    for (int k = 0; k < VB; k++) t += acc[k];
    for (; i < n; i++) {
        float v = a * s[i] + b * B[i];
        s[i] = v;
        t += v * C[i];
    }
    return t;
}

static float sumsq(const float *restrict x, int n) {
    float acc[VB] = { 0 };
    int i = 0;
    for (; i + VB <= n; i += VB)
        for (int k = 0; k < VB; k++) acc[k] += x[i + k] * x[i + k];
    float t = 0;
    for (int k = 0; k < VB; k++) t += acc[k];
    for (; i < n; i++) t += x[i] * x[i];
    return t;
}

static float dot(const float *restrict x, const float *restrict y, int n) {
    float acc[VB] = { 0 };
    int i = 0;
    for (; i + VB <= n; i += VB)
        for (int k = 0; k < VB; k++) acc[k] += x[i + k] * y[i + k];
    float t = 0;
    for (int k = 0; k < VB; k++) t += acc[k];
    for (; i < n; i++) t += x[i] * y[i];
    return t;
}

static float silu(float v) { return v / (1.0f + expf(-v)); }

/* Runs fn(ctx, i) for i < n over the backend's pool (inline when it has none). */
static void par(ci_backend *be, ci_task_fn fn, void *ctx, int n) {
    if (be->pool && n > 1) ci_pool_run(be->pool, fn, ctx, n);
    else for (int i = 0; i < n; i++) fn(ctx, i);
}

/* ---- mamba_conv ----------------------------------------------------------------------- */

/* xbc[t] = silu(bias + Σ_k w[k] ⊙ in[t - (K-1) + k]) where in[<0] comes from the state
 * (read only here; conv_shift advances it afterwards). One task per CONV_BLOCK channels. */
typedef struct {
    const float *state, *in, *taps, *bias;
    int stride, dim, K, n;
    float *xbc;
} conv_ctx;

enum { CONV_BLOCK = 256 };

static void conv_block(void *vctx, int blk) {
    const conv_ctx *c = vctx;
    const int C = c->dim, K = c->K;
    const int c0 = blk * CONV_BLOCK, m = C - c0 < CONV_BLOCK ? C - c0 : CONV_BLOCK;
    for (int t = 0; t < c->n; t++) {
        float *o = c->xbc + (size_t)t * C + c0;
        if (c->bias) memcpy(o, c->bias + c0, (size_t)m * sizeof(float));
        else memset(o, 0, (size_t)m * sizeof(float));
        for (int k = 0; k < K; k++) {
            int j = t - (K - 1) + k;
            const float *in = (j < 0 ? c->state + (size_t)(K - 1 + j) * C : c->in + (size_t)j * c->stride) + c0;
            axpy_v(o, c->taps + (size_t)k * C + c0, in, m);
        }
        for (int q = 0; q < m; q++) o[q] = silu(o[q]);
    }
}

/* The conv state becomes the last K-1 inputs of (state ‖ these rows' inputs). */
static void conv_shift(float *state, const float *in, int stride, int C, int K, int n) {
    const int keep = K - 1;
    if (keep < 1) return;
    if (n >= keep) {
        for (int r = 0; r < keep; r++)
            memcpy(state + (size_t)r * C, in + (size_t)(n - keep + r) * stride, (size_t)C * sizeof(float));
    } else {
        memmove(state, state + (size_t)n * C, (size_t)(keep - n) * C * sizeof(float));
        for (int r = 0; r < n; r++)
            memcpy(state + (size_t)(keep - n + r) * C, in + (size_t)r * stride, (size_t)C * sizeof(float));
    }
}

void cpu_mamba_conv(ci_backend *be, float *xbc, const float *in, int in_stride, int n, int dim, int K,
                    const float *taps, const float *bias, float *state, float *const *states) {
    CI_FP_FLUSH_SCOPE();
    if (n <= 0) return;
    const int blocks = (dim + CONV_BLOCK - 1) / CONV_BLOCK;
    if (!states) {
        conv_ctx cc = { state, in, taps, bias, in_stride, dim, K, n, xbc };
        par(be, conv_block, &cc, blocks);
        conv_shift(state, in, in_stride, dim, K, n);
        return;
    }
    for (int t = 0; t < n; t++) {                  /* each row's conv on its own window */
        conv_ctx cc = { states[t], in + (size_t)t * in_stride, taps, bias, in_stride, dim, K, 1,
                        xbc + (size_t)t * dim };
        par(be, conv_block, &cc, blocks);
        conv_shift(states[t], in + (size_t)t * in_stride, in_stride, dim, K, 1);
    }
}

/* ---- ssd_scan: shared state ------------------------------------------------------------ */

typedef struct {
    ci_backend *be;
    const ci_ssd *s;
    const float *xbc;
    int CD;                  /* xbc row stride */
    float *y;                /* [n, Hm*P] */
    float *dt;               /* [n, Hm] after softplus and clamp */
    /* chunked SSD, for one chunk of up to L = CI_SSD_CHUNK tokens */
    float *cg, *bg;          /* [G, L, N] C and B of each group, token-major */
    float *bgt;              /* [G, N, L] B transposed */
    float *cb;               /* [G, L, L] C_t·B_u (u <= t) */
    float *yoff;             /* [G][L, Hm/G*P] C S0ᵀ of every head of the group */
    float *xwt;              /* [Hm*P, L] (decay·dt·x)ᵀ of every head */
    float *cs;               /* [Hm, L] cumulative dt·A */
    float *tmp;              /* [Hm*P, N] the chunk's new-state term of every head */
} scan_ws;

/* The scratch's parts, in ci_ssd_scratch_floats' order. */
static void carve(scan_ws *w, float *scratch, int n) {
    const ci_ssd *s = w->s;
    const size_t L = CI_SSD_CHUNK, G = (size_t)s->n_groups, N = (size_t)s->d_state, Hm = (size_t)s->n_heads,
                 HP = Hm * (size_t)s->head_dim;
    float **dst[] = { &w->dt, &w->cg, &w->bg, &w->bgt, &w->cb, &w->yoff, &w->xwt, &w->cs, &w->tmp };
    const size_t parts[] = { (size_t)(n > 0 ? n : 1) * Hm, G * L * N, G * L * N, G * N * L, G * L * L, L * HP,
                             HP * L, Hm * L, HP * N };
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        *dst[i] = scratch;
        scratch += (parts[i] + 63) / 64 * 64;
    }
}

/* dt[t][h] = max(softplus(raw + dt_bias), dt_min); softplus as torch's (x itself above 20). */
static void make_dt(const ci_ssd *s, const float *raw, int stride, float *dt, int n) {
    const int Hm = s->n_heads;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hm; h++) {
            float v = raw[(size_t)t * stride + h] + s->dt_bias[h];
            float sp = v > 20.0f ? v : log1pf(expf(v));
            dt[(size_t)t * Hm + h] = sp < s->dt_min ? s->dt_min : sp;
        }
}

/* ---- the recurrence ----------------------------------------------------------------- */

/* Token t of head h through the recurrence: S (the head's [P, N]) advances, y row t. */
static void rec_step(const scan_ws *w, float *S, int h, int t) {
    const ci_ssd *s = w->s;
    const int P = s->head_dim, N = s->d_state, Hm = s->n_heads, G = s->n_groups, I = Hm * P;
    const int g = h / (Hm / G);
    const float a = s->A[h], d = s->D[h];
    const float *row = w->xbc + (size_t)t * w->CD;
    const float *x = row + (size_t)h * P, *B = row + I + (size_t)g * N, *C = row + I + (size_t)(G + g) * N;
    const float dt = w->dt[(size_t)t * Hm + h], da = expf(dt * a);
    float *y = w->y + (size_t)t * I + (size_t)h * P;
    for (int p = 0; p < P; p++) y[p] = step_row(S + (size_t)p * N, B, C, da, dt * x[p], N) + d * x[p];
}

typedef struct {
    const scan_ws *w;
    float *S;                /* [Hm, P, N] */
    float *const *states;    /* or a table: [n] each row's [Hm, P, N] */
    int n;
} rec_ctx;

static void recurrent_head(void *vctx, int h) {
    const rec_ctx *c = vctx;
    const ci_ssd *s = c->w->s;
    float *S = c->S + (size_t)h * s->head_dim * s->d_state;
    for (int t = 0; t < c->n; t++) rec_step(c->w, S, h, t);
}

/* Batched decode: pool task t * Hm + h is row t's step of head h on its own state. */
static void rows_head(void *vctx, int i) {
    const rec_ctx *c = vctx;
    const ci_ssd *s = c->w->s;
    const int t = i / s->n_heads, h = i % s->n_heads;
    rec_step(c->w, c->states[t] + (size_t)h * s->head_dim * s->d_state, h, t);
}

/* ---- chunked SSD -------------------------------------------------------------------- */

static ci_mat f32_mat(const float *data, int64_t rows, int64_t cols) {
    ci_mat m;
    memset(&m, 0, sizeof m);
    m.data = data;
    m.dtype = CI_F32;
    m.rows = rows;
    m.cols = cols;
    return m;
}

typedef struct {
    const scan_ws *w;
    float *S;             /* [Hm, P, N] */
    int t0, nc;           /* the chunk the head tasks work on */
    int next_t0, next_nc; /* the chunk the group tasks prepare (nc 0: none) */
} ssd_ctx;

/* Group g of the chunk at t0: gather its B, C (and Bᵀ) rows; cb[t][u] = C_t·B_u, u <= t. */
static void ssd_group(const ssd_ctx *c, int g, int t0, int nc) {
    const scan_ws *w = c->w;
    const ci_ssd *s = w->s;
    const int G = s->n_groups, N = s->d_state, I = s->n_heads * s->head_dim, CD = w->CD;
    float *cg = w->cg + (size_t)g * CI_SSD_CHUNK * N, *bg = w->bg + (size_t)g * CI_SSD_CHUNK * N;
    float *bgt = w->bgt + (size_t)g * N * CI_SSD_CHUNK, *cb = w->cb + (size_t)g * CI_SSD_CHUNK * CI_SSD_CHUNK;
    for (int t = 0; t < nc; t++) {
        const float *row = w->xbc + (size_t)(t0 + t) * CD;
        memcpy(bg + (size_t)t * N, row + I + (size_t)g * N, (size_t)N * sizeof(float));
        memcpy(cg + (size_t)t * N, row + I + (size_t)(G + g) * N, (size_t)N * sizeof(float));
        for (int k = 0; k < N; k++) bgt[(size_t)k * nc + t] = bg[(size_t)t * N + k];
    }
    for (int t = 0; t < nc; t++)
        for (int u = 0; u <= t; u++) cb[(size_t)t * nc + u] = dot(cg + (size_t)t * N, bg + (size_t)u * N, N);
}

/* Head h of the chunk, after C S0ᵀ (yoff) came back from the backend:
 *   y_t = e^{cs_t} (S0 C_t) + Σ_{u<=t} (C_t·B_u) e^{cs_t - cs_u} dt_u x_u + D x_t
 *   xwt[p][u] = e^{cs_last - cs_u} dt_u x_u[p]   (the chunk's contribution to the state) */
static void ssd_head(void *vctx, int h) {
    const ssd_ctx *c = vctx;
    const scan_ws *w = c->w;
    const ci_ssd *s = w->s;
    const int P = s->head_dim, Hm = s->n_heads, G = s->n_groups, I = Hm * P, CD = w->CD;
    const int hpg = Hm / G, g = h / hpg, j = h % hpg, nc = c->nc, t0 = c->t0;
    const float a = s->A[h], d = s->D[h];
    const float *dt = w->dt + (size_t)t0 * Hm + h;                            /* stride Hm */
    const float *x0 = w->xbc + (size_t)t0 * CD + (size_t)h * P;               /* stride CD */
    float *cs = w->cs + (size_t)h * CI_SSD_CHUNK;
    float run = 0;
    for (int t = 0; t < nc; t++) {
        run += dt[(size_t)t * Hm] * a;
        cs[t] = run;
    }
    const float *cb = w->cb + (size_t)g * CI_SSD_CHUNK * CI_SSD_CHUNK;       /* [nc, nc] */
    const float *yoff = w->yoff + (size_t)g * CI_SSD_CHUNK * hpg * P;         /* [nc, hpg*P] */
    for (int t = 0; t < nc; t++) {
        const float *xt = x0 + (size_t)t * CD;
        float *y = w->y + (size_t)(t0 + t) * I + (size_t)h * P;
        const float *yo = yoff + (size_t)t * hpg * P + (size_t)j * P;
        const float et = decay(cs[t]);
        for (int p = 0; p < P; p++) y[p] = et * yo[p] + d * xt[p];
        for (int u = 0; u <= t; u++) {
            if (cs[t] - cs[u] < LOG_TINY) continue;
            const float m = cb[(size_t)t * nc + u] * expf(cs[t] - cs[u]) * dt[(size_t)u * Hm];
            axpy(y, x0 + (size_t)u * CD, m, P);
        }
    }
    float *xwt = w->xwt + (size_t)h * P * nc;                                 /* [P, nc] */
    for (int u = 0; u < nc; u++) {
        const float wu = decay(cs[nc - 1] - cs[u]) * dt[(size_t)u * Hm];
        const float *xu = x0 + (size_t)u * CD;
        for (int p = 0; p < P; p++) xwt[(size_t)p * nc + u] = wu * xu[p];
    }
}

/* Tasks [0, Hm): S_h = e^{cs_last} S_h + tmp_h for the chunk just done (when nc > 0);
 * tasks [Hm, Hm + G): ssd_group for the next chunk (when next_nc > 0). */
static void ssd_combine(void *vctx, int i) {
    const ssd_ctx *c = vctx;
    const ci_ssd *s = c->w->s;
    const int Hm = s->n_heads;
    if (i >= Hm) {
        if (c->next_nc) ssd_group(c, i - Hm, c->next_t0, c->next_nc);
        return;
    }
    if (!c->nc) return;
    const size_t PN = (size_t)s->head_dim * (size_t)s->d_state;
    const float e = decay(c->w->cs[(size_t)i * CI_SSD_CHUNK + c->nc - 1]);
    float *restrict Sh = c->S + (size_t)i * PN;
    const float *restrict th = c->w->tmp + (size_t)i * PN;
    for (size_t k = 0; k < PN; k++) Sh[k] = e * Sh[k] + th[k];
}

static void scan_chunked(const scan_ws *w, float *S, int n) {
    ci_backend *be = w->be;
    const ci_ssd *s = w->s;
    const int P = s->head_dim, N = s->d_state, Hm = s->n_heads, G = s->n_groups, hpg = Hm / G;
    ssd_ctx ctx = { w, S, 0, 0, 0, n < CI_SSD_CHUNK ? n : CI_SSD_CHUNK };
    par(be, ssd_combine, &ctx, Hm + G);                  /* prepare the first chunk's groups */
    for (int t0 = 0; t0 < n; t0 += CI_SSD_CHUNK) {
        const int nc = n - t0 < CI_SSD_CHUNK ? n - t0 : CI_SSD_CHUNK;
        ctx.t0 = t0;
        ctx.nc = nc;
        for (int g = 0; g < G; g++) {                    /* C S0ᵀ for every head of the group */
            ci_mat ws = f32_mat(S + (size_t)g * hpg * P * N, (int64_t)hpg * P, N);
            be->matmul(be, w->yoff + (size_t)g * CI_SSD_CHUNK * hpg * P, w->cg + (size_t)g * CI_SSD_CHUNK * N, nc,
                       &ws);
        }
        par(be, ssd_head, &ctx, Hm);
        for (int g = 0; g < G; g++) {                    /* (decay·dt·x)ᵀ B */
            ci_mat wbt = f32_mat(w->bgt + (size_t)g * N * CI_SSD_CHUNK, N, nc);
            be->matmul(be, w->tmp + (size_t)g * hpg * P * N, w->xwt + (size_t)g * hpg * P * nc, hpg * P, &wbt);
        }
        ctx.next_t0 = t0 + CI_SSD_CHUNK;
        ctx.next_nc = n - ctx.next_t0 < CI_SSD_CHUNK ? (n > ctx.next_t0 ? n - ctx.next_t0 : 0) : CI_SSD_CHUNK;
        par(be, ssd_combine, &ctx, Hm + G);              /* new states, next chunk's groups */
    }
}

void cpu_ssd_scan(ci_backend *be, float *y, const float *xbc, int xbc_stride, const float *dt, int dt_stride, int n,
                  const ci_ssd *s, float *state, float *const *states, int chunked, float *scratch) {
    CI_FP_FLUSH_SCOPE();
    if (n <= 0) return;
    scan_ws w = { .be = be, .s = s, .xbc = xbc, .CD = xbc_stride, .y = y };
    carve(&w, scratch, n);
    make_dt(s, dt, dt_stride, w.dt, n);
    if (states) {
        rec_ctx rc = { &w, NULL, states, n };
        par(be, rows_head, &rc, n * s->n_heads);
    } else if (n == 1 || !chunked) {
        rec_ctx rc = { &w, state, NULL, n };
        par(be, recurrent_head, &rc, s->n_heads);
    } else {
        scan_chunked(&w, state, n);
    }
}

/* ---- gated_rmsnorm, relu2 ------------------------------------------------------------ */

/* y ⊙ silu(z), normalised per group, × w. One task per NORM_ROWS tokens. */
typedef struct {
    float *y;
    const float *z, *w;
    int z_stride, n, dim, group;
    float eps;
} norm_ctx;

enum { NORM_ROWS = 16 };

static void norm_rows(void *vctx, int blk) {
    const norm_ctx *c = vctx;
    const int I = c->dim, gs = c->group, G = I / gs;
    const int t1 = (blk + 1) * NORM_ROWS < c->n ? (blk + 1) * NORM_ROWS : c->n;
    for (int t = blk * NORM_ROWS; t < t1; t++) {
        float *y = c->y + (size_t)t * I;
        const float *z = c->z + (size_t)t * c->z_stride;
        for (int i = 0; i < I; i++) y[i] *= silu(z[i]);
        for (int g = 0; g < G; g++) {
            float *yg = y + (size_t)g * gs;
            const float r = 1.0f / sqrtf(sumsq(yg, gs) / (float)gs + c->eps);
            const float *w = c->w + (size_t)g * gs;
            for (int i = 0; i < gs; i++) yg[i] = yg[i] * r * w[i];
        }
    }
}

void cpu_gated_rmsnorm(ci_backend *be, float *y, const float *z, int z_stride, const float *w, int n, int dim,
                       int group, float eps) {
    CI_FP_FLUSH_SCOPE();
    if (n <= 0) return;
    norm_ctx nc = { y, z, w, z_stride, n, dim, group, eps };
    par(be, norm_rows, &nc, (n + NORM_ROWS - 1) / NORM_ROWS);
}

void cpu_relu2(ci_backend *be, float *g, int64_t count) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int64_t i = 0; i < count; i++) {
        float v = g[i] > 0.0f ? g[i] : 0.0f;
        g[i] = v * v;
    }
}
