/* mamba2.c — see mamba2.h.
 *
 * Layouts: activations are token-major ([t][channel]); xBC row t holds x (heads × P) then
 * B (groups × N) then C (groups × N); the SSM state is [head][p][n]; the conv state is the
 * K-1 inputs before the current chunk, oldest first. Heads of one group are adjacent
 * (head h reads group h / (Hm/G), as transformers' repeat_interleave), so a group's states
 * form one [Hm/G * P, N] matrix for the backend's matmul.
 *
 * Inner loops run over fixed-size blocks with a scalar tail: plain C that the compiler
 * vectorises at -O2 (fixed trip counts, restrict pointers). Plain-C work runs over the
 * backend's thread pool (tasks per head or per group); matmuls are issued from the
 * calling thread only, between pool runs (the pool is not re-entrant). */
#include "mamba2.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    MAMBA2_CHUNK = 64,    /* tokens per SSD chunk (L) */
    VB = 16               /* floats per vectorisable block */
};

/* Decay factors e^x with x below this are taken as 0. Every sum they enter also has a
 * term of weight e^0 (the current token), so the error is below e^-60 relative, far under
 * f32 rounding; without the cut, fast-forgetting heads fill the chunk products with
 * denormals (e^-90 and less), which x86 multiplies about a hundred times slower. */
#define LOG_TINY (-60.0f)

static float decay(float x) { return x < LOG_TINY ? 0.0f : expf(x); }

size_t mamba2_conv_floats(const mamba2_layer *L) { return (size_t)(L->d_conv - 1) * (size_t)L->conv_dim; }
size_t mamba2_ssm_floats(const mamba2_layer *L) {
    return (size_t)L->n_heads * (size_t)L->head_dim * (size_t)L->d_state;
}

void mamba2_scratch_free(mamba2_scratch *s) {
    free(s->proj); free(s->xbc); free(s->dt); free(s->y);
    free(s->cg); free(s->bg); free(s->bgt); free(s->cb); free(s->yoff); free(s->xwt); free(s->cs); free(s->tmp);
    memset(s, 0, sizeof *s);
}

int mamba2_scratch_init(mamba2_scratch *s, const mamba2_layer *L, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    const size_t n = (size_t)max_n, W = (size_t)(L->inner + L->conv_dim + L->n_heads);
    const size_t C = MAMBA2_CHUNK, G = (size_t)L->n_groups, N = (size_t)L->d_state, HP = (size_t)L->inner;
    s->proj = malloc(n * W * sizeof(float));
    s->xbc = malloc(n * (size_t)L->conv_dim * sizeof(float));
    s->dt = malloc(n * (size_t)L->n_heads * sizeof(float));
    s->y = malloc(n * HP * sizeof(float));
    s->cg = malloc(G * C * N * sizeof(float));
    s->bg = malloc(G * C * N * sizeof(float));
    s->bgt = malloc(G * N * C * sizeof(float));
    s->cb = malloc(G * C * C * sizeof(float));
    s->yoff = malloc(C * HP * sizeof(float));
    s->xwt = malloc(HP * C * sizeof(float));
    s->cs = malloc((size_t)L->n_heads * C * sizeof(float));
    s->tmp = malloc(HP * N * sizeof(float));
    if (!s->proj || !s->xbc || !s->dt || !s->y || !s->cg || !s->bg || !s->bgt || !s->cb || !s->yoff || !s->xwt ||
        !s->cs || !s->tmp) {
        mamba2_scratch_free(s);
        return -1;
    }
    return 0;
}

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

static float silu(float v) { return v / (1.0f + expf(-v)); }

/* Runs fn(ctx, i) for i < n over the backend's pool (inline when it has none). */
static void par(ci_backend *be, ci_task_fn fn, void *ctx, int n) {
    if (be->pool && n > 1) ci_pool_run(be->pool, fn, ctx, n);
    else for (int i = 0; i < n; i++) fn(ctx, i);
}

/* ---- conv, dt ------------------------------------------------------------------------ */

/* xbc[t] = silu(bias + Σ_k w[k] ⊙ in[t - (K-1) + k]) where in[<0] comes from the conv state
 * (read only here; conv_shift advances it afterwards). One task per CONV_BLOCK channels.
 * proj rows have W floats, xBC at offset I. */
typedef struct {
    const mamba2_layer *L;
    const float *state, *proj;
    size_t W;
    float *xbc;
    int n;
} conv_ctx;

enum { CONV_BLOCK = 256 };

static void conv_block(void *vctx, int blk) {
    const conv_ctx *c = vctx;
    const mamba2_layer *L = c->L;
    const int C = L->conv_dim, K = L->d_conv, I = L->inner;
    const int c0 = blk * CONV_BLOCK, m = C - c0 < CONV_BLOCK ? C - c0 : CONV_BLOCK;
    for (int t = 0; t < c->n; t++) {
        float *o = c->xbc + (size_t)t * C + c0;
        if (L->conv_b) memcpy(o, L->conv_b + c0, (size_t)m * sizeof(float));
        else memset(o, 0, (size_t)m * sizeof(float));
        for (int k = 0; k < K; k++) {
            int j = t - (K - 1) + k;
            const float *in = (j < 0 ? c->state + (size_t)(K - 1 + j) * C : c->proj + (size_t)j * c->W + I) + c0;
            axpy_v(o, L->conv_w + (size_t)k * C + c0, in, m);
        }
        for (int q = 0; q < m; q++) o[q] = silu(o[q]);
    }
}

/* The conv state becomes the last K-1 inputs of (state ‖ this chunk's inputs). */
static void conv_shift(const mamba2_layer *L, float *state, const float *proj, size_t W, int n) {
    const int C = L->conv_dim, keep = L->d_conv - 1, I = L->inner;
    if (keep < 1) return;
    if (n >= keep) {
        for (int r = 0; r < keep; r++)
            memcpy(state + (size_t)r * C, proj + (size_t)(n - keep + r) * W + I, (size_t)C * sizeof(float));
    } else {
        memmove(state, state + (size_t)n * C, (size_t)(keep - n) * C * sizeof(float));
        for (int r = 0; r < n; r++)
            memcpy(state + (size_t)(keep - n + r) * C, proj + (size_t)r * W + I, (size_t)C * sizeof(float));
    }
}

/* dt[t][h] = max(softplus(raw + dt_bias), dt_min); softplus as torch's (x itself above 20). */
static void make_dt(const mamba2_layer *L, const float *proj, size_t W, float *dt, int n) {
    const int Hm = L->n_heads, off = L->inner + L->conv_dim;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hm; h++) {
            float v = proj[(size_t)t * W + off + h] + L->dt_bias[h];
            float sp = v > 20.0f ? v : log1pf(expf(v));
            dt[(size_t)t * Hm + h] = sp < L->dt_min ? L->dt_min : sp;
        }
}

/* ---- the recurrence ----------------------------------------------------------------- */

typedef struct {
    const mamba2_layer *L;
    mamba2_scratch *s;
    float *S;             /* [Hm, P, N] */
    int n;
} scan_ctx;

/* Token t of head h through the recurrence: S (the head's [P, N]) advances, y row t. */
static void rec_step(const mamba2_layer *L, mamba2_scratch *s, float *S, int h, int t) {
    const int P = L->head_dim, N = L->d_state, Hm = L->n_heads, G = L->n_groups, I = L->inner, CD = L->conv_dim;
    const int g = h / (Hm / G);
    const float a = L->A[h], d = L->D[h];
    const float *row = s->xbc + (size_t)t * CD;
    const float *x = row + (size_t)h * P, *B = row + I + (size_t)g * N, *C = row + I + (size_t)(G + g) * N;
    const float dt = s->dt[(size_t)t * Hm + h], da = expf(dt * a);
    float *y = s->y + (size_t)t * I + (size_t)h * P;
    for (int p = 0; p < P; p++) y[p] = step_row(S + (size_t)p * N, B, C, da, dt * x[p], N) + d * x[p];
}

static void recurrent_head(void *vctx, int h) {
    const scan_ctx *c = vctx;
    const mamba2_layer *L = c->L;
    float *S = c->S + (size_t)h * L->head_dim * L->d_state;
    for (int t = 0; t < c->n; t++) rec_step(L, c->s, S, h, t);
}

/* Batched decode: pool task t * Hm + h is row t's step of head h on its own state. */
typedef struct {
    const mamba2_layer *L;
    mamba2_scratch *s;
    float *const *S;      /* [n] each row's [Hm, P, N] */
} rows_ctx;

static void rows_head(void *vctx, int i) {
    const rows_ctx *c = vctx;
    const mamba2_layer *L = c->L;
    const int t = i / L->n_heads, h = i % L->n_heads;
    rec_step(L, c->s, c->S[t] + (size_t)h * L->head_dim * L->d_state, h, t);
}

/* ---- chunked SSD -------------------------------------------------------------------- */

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
    const mamba2_layer *L;
    mamba2_scratch *s;
    float *S;             /* [Hm, P, N] */
    int t0, nc;           /* the chunk the head tasks work on */
    int next_t0, next_nc; /* the chunk the group tasks prepare (nc 0: none) */
} ssd_ctx;

/* Group g of the chunk at t0: gather its B, C (and Bᵀ) rows; cb[t][u] = C_t·B_u, u <= t. */
static void ssd_group(const ssd_ctx *c, int g, int t0, int nc) {
    const mamba2_layer *L = c->L;
    mamba2_scratch *s = c->s;
    const int G = L->n_groups, N = L->d_state, I = L->inner, CD = L->conv_dim;
    float *cg = s->cg + (size_t)g * MAMBA2_CHUNK * N, *bg = s->bg + (size_t)g * MAMBA2_CHUNK * N;
    float *bgt = s->bgt + (size_t)g * N * MAMBA2_CHUNK, *cb = s->cb + (size_t)g * MAMBA2_CHUNK * MAMBA2_CHUNK;
    for (int t = 0; t < nc; t++) {
        const float *row = s->xbc + (size_t)(t0 + t) * CD;
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
    const mamba2_layer *L = c->L;
    mamba2_scratch *s = c->s;
    const int P = L->head_dim, Hm = L->n_heads, G = L->n_groups, I = L->inner, CD = L->conv_dim;
    const int hpg = Hm / G, g = h / hpg, j = h % hpg, nc = c->nc, t0 = c->t0;
    const float a = L->A[h], d = L->D[h];
    const float *dt = s->dt + (size_t)t0 * Hm + h;                            /* stride Hm */
    const float *x0 = s->xbc + (size_t)t0 * CD + (size_t)h * P;               /* stride CD */
    float *cs = s->cs + (size_t)h * MAMBA2_CHUNK;
    float run = 0;
    for (int t = 0; t < nc; t++) {
        run += dt[(size_t)t * Hm] * a;
        cs[t] = run;
    }
    const float *cb = s->cb + (size_t)g * MAMBA2_CHUNK * MAMBA2_CHUNK;       /* [nc, nc] */
    const float *yoff = s->yoff + (size_t)g * MAMBA2_CHUNK * hpg * P;         /* [nc, hpg*P] */
    for (int t = 0; t < nc; t++) {
        const float *xt = x0 + (size_t)t * CD;
        float *y = s->y + (size_t)(t0 + t) * I + (size_t)h * P;
        const float *yo = yoff + (size_t)t * hpg * P + (size_t)j * P;
        const float et = decay(cs[t]);
        for (int p = 0; p < P; p++) y[p] = et * yo[p] + d * xt[p];
        for (int u = 0; u <= t; u++) {
            if (cs[t] - cs[u] < LOG_TINY) continue;
            const float m = cb[(size_t)t * nc + u] * expf(cs[t] - cs[u]) * dt[(size_t)u * Hm];
            axpy(y, x0 + (size_t)u * CD, m, P);
        }
    }
    float *xwt = s->xwt + (size_t)h * P * nc;                                 /* [P, nc] */
    for (int u = 0; u < nc; u++) {
        const float w = decay(cs[nc - 1] - cs[u]) * dt[(size_t)u * Hm];
        const float *xu = x0 + (size_t)u * CD;
        for (int p = 0; p < P; p++) xwt[(size_t)p * nc + u] = w * xu[p];
    }
}

/* Tasks [0, Hm): S_h = e^{cs_last} S_h + tmp_h for the chunk just done (when nc > 0);
 * tasks [Hm, Hm + G): ssd_group for the next chunk (when next_nc > 0). */
static void ssd_combine(void *vctx, int i) {
    const ssd_ctx *c = vctx;
    const mamba2_layer *L = c->L;
    const int Hm = L->n_heads;
    if (i >= Hm) {
        if (c->next_nc) ssd_group(c, i - Hm, c->next_t0, c->next_nc);
        return;
    }
    if (!c->nc) return;
    const size_t PN = (size_t)L->head_dim * (size_t)L->d_state;
    const float e = decay(c->s->cs[(size_t)i * MAMBA2_CHUNK + c->nc - 1]);
    float *restrict Sh = c->S + (size_t)i * PN;
    const float *restrict th = c->s->tmp + (size_t)i * PN;
    for (size_t k = 0; k < PN; k++) Sh[k] = e * Sh[k] + th[k];
}

static void scan_chunked(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *S, int n) {
    const int P = L->head_dim, N = L->d_state, Hm = L->n_heads, G = L->n_groups, hpg = Hm / G;
    ssd_ctx ctx = { L, s, S, 0, 0, 0, n < MAMBA2_CHUNK ? n : MAMBA2_CHUNK };
    par(be, ssd_combine, &ctx, Hm + G);                  /* prepare the first chunk's groups */
    for (int t0 = 0; t0 < n; t0 += MAMBA2_CHUNK) {
        const int nc = n - t0 < MAMBA2_CHUNK ? n - t0 : MAMBA2_CHUNK;
        ctx.t0 = t0;
        ctx.nc = nc;
        for (int g = 0; g < G; g++) {                    /* C S0ᵀ for every head of the group */
            ci_mat ws = f32_mat(S + (size_t)g * hpg * P * N, (int64_t)hpg * P, N);
            be->matmul(be, s->yoff + (size_t)g * MAMBA2_CHUNK * hpg * P, s->cg + (size_t)g * MAMBA2_CHUNK * N, nc, &ws);
        }
        par(be, ssd_head, &ctx, Hm);
        for (int g = 0; g < G; g++) {                    /* (decay·dt·x)ᵀ B */
            ci_mat wbt = f32_mat(s->bgt + (size_t)g * N * MAMBA2_CHUNK, N, nc);
            be->matmul(be, s->tmp + (size_t)g * hpg * P * N, s->xwt + (size_t)g * hpg * P * nc, hpg * P, &wbt);
        }
        ctx.next_t0 = t0 + MAMBA2_CHUNK;
        ctx.next_nc = n - ctx.next_t0 < MAMBA2_CHUNK ? (n > ctx.next_t0 ? n - ctx.next_t0 : 0) : MAMBA2_CHUNK;
        par(be, ssd_combine, &ctx, Hm + G);              /* new states, next chunk's groups */
    }
}

/* ---- the mixer ---------------------------------------------------------------------- */

/* Gated RMSNorm of token rows: y ⊙ silu(z), normalised per group of I/G channels, × norm_w.
 * One task per NORM_ROWS tokens. */
typedef struct {
    const mamba2_layer *L;
    float *y;
    const float *proj;
    size_t W;
    int n;
} norm_ctx;

enum { NORM_ROWS = 16 };

static void norm_rows(void *vctx, int blk) {
    const norm_ctx *c = vctx;
    const mamba2_layer *L = c->L;
    const int I = L->inner, G = L->n_groups, gs = I / G;
    const int t1 = (blk + 1) * NORM_ROWS < c->n ? (blk + 1) * NORM_ROWS : c->n;
    for (int t = blk * NORM_ROWS; t < t1; t++) {
        float *y = c->y + (size_t)t * I;
        const float *z = c->proj + (size_t)t * c->W;
        for (int i = 0; i < I; i++) y[i] *= silu(z[i]);
        for (int g = 0; g < G; g++) {
            float *yg = y + (size_t)g * gs;
            const float r = 1.0f / sqrtf(sumsq(yg, gs) / (float)gs + L->eps);
            const float *w = L->norm_w + (size_t)g * gs;
            for (int i = 0; i < gs; i++) yg[i] = yg[i] * r * w[i];
        }
    }
}

void mamba2_forward(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *conv_state, float *ssm_state,
                    float *out, const float *x, int n, mamba2_scan scan) {
    const size_t W = (size_t)(L->inner + L->conv_dim + L->n_heads);
    be->matmul(be, s->proj, x, n, &L->in_proj);                     /* [n, z | xBC | dt] */
    conv_ctx cc = { L, conv_state, s->proj, W, s->xbc, n };
    par(be, conv_block, &cc, (L->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK);
    conv_shift(L, conv_state, s->proj, W, n);
    make_dt(L, s->proj, W, s->dt, n);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (n == 1 || scan == MAMBA2_SCAN_RECURRENT) {
        scan_ctx ctx = { L, s, ssm_state, n };
        par(be, recurrent_head, &ctx, L->n_heads);
    } else {
        scan_chunked(be, L, s, ssm_state, n);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s->scan_seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    norm_ctx nc = { L, s->y, s->proj, W, n };
    par(be, norm_rows, &nc, (n + NORM_ROWS - 1) / NORM_ROWS);
    be->matmul(be, out, s->y, n, &L->out_proj);                     /* [n, hidden] */
}

void mamba2_forward_rows(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *const *conv_states,
                         float *const *ssm_states, float *out, const float *x, int n) {
    const size_t W = (size_t)(L->inner + L->conv_dim + L->n_heads);
    be->matmul(be, s->proj, x, n, &L->in_proj);                     /* [n, z | xBC | dt] */
    for (int t = 0; t < n; t++) {                                    /* each row's conv on its own window */
        conv_ctx cc = { L, conv_states[t], s->proj + (size_t)t * W, W, s->xbc + (size_t)t * L->conv_dim, 1 };
        par(be, conv_block, &cc, (L->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK);
        conv_shift(L, conv_states[t], s->proj + (size_t)t * W, W, 1);
    }
    make_dt(L, s->proj, W, s->dt, n);
    rows_ctx rc = { L, s, ssm_states };
    par(be, rows_head, &rc, n * L->n_heads);
    norm_ctx nc = { L, s->y, s->proj, W, n };
    par(be, norm_rows, &nc, (n + NORM_ROWS - 1) / NORM_ROWS);
    be->matmul(be, out, s->y, n, &L->out_proj);                     /* [n, hidden] */
}
