/* deltanet.c — see deltanet.h.
 *
 * The chunked form (derived for S [Dv, Dk], S k reading the state): inside a chunk of L
 * tokens with cumulative log decay G_i = g_0 + ... + g_i, write the state after token i as
 *   S_i = e^{G_i} S_0 + sum_{j<=i} e^{G_i - G_j} u_j k_j^T
 * where the pseudo-values u_j solve the lower-unitriangular system
 *   u_i + sum_{j<i} beta_i e^{G_i - G_j} (k_i . k_j) u_j = beta_i v_i - beta_i e^{G_i} S_0 k_i,
 * i.e. U = T (beta V) - T (beta e^G K) S_0^T with T = (I + A)^-1 (the UT transform). Then
 *   o_i = e^{G_i} S_0 q_i + sum_{j<=i} e^{G_i - G_j} (q_i . k_j) u_j
 *   S_L = e^{G_L} S_0 + sum_j e^{G_L - G_j} u_j k_j^T.
 * Every exponent is G_i - G_j with j <= i, or G_i itself, so all factors are <= 1. The
 * matrix products (see chunk_head) are backend matmuls on f32 views of the scratch, laid
 * out so that no result needs transposing; T is found by forward substitution in plain C.
 * f32 subnormals are kept out of every product (they cost ~100x on x86): chunks end before
 * their decay underflows, tiny decay factors are 0, and the state is flushed below 1e-30. */
#include "deltanet.h"
#include "../core/status.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small vector helpers: 8-wide blocks the compiler can vectorise as written ---------- */

static float dot(const float *a, const float *b, int n) {
    float acc[8] = { 0 };
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) acc[u] += a[i + u] * b[i + u];
    float s = 0;
    for (; i < n; i++) s += a[i] * b[i];
    for (int u = 0; u < 8; u++) s += acc[u];
    return s;
}

/* *ra = a.x, *rb = b.x in one pass over x */
static void dot2(const float *x, const float *a, const float *b, int n, float *ra, float *rb) {
    float p[8] = { 0 }, q[8] = { 0 };
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) {
            p[u] += x[i + u] * a[i + u];
            q[u] += x[i + u] * b[i + u];
        }
    float sa = 0, sb = 0;
    for (; i < n; i++) { sa += x[i] * a[i]; sb += x[i] * b[i]; }
    for (int u = 0; u < 8; u++) { sa += p[u]; sb += q[u]; }
    *ra = sa;
    *rb = sb;
}

/* y += w * x elementwise */
static void mul_add(float *y, const float *w, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) y[i + u] += w[i + u] * x[i + u];
    for (; i < n; i++) y[i] += w[i] * x[i];
}

/* y = a*y + d*x */
static void scale_axpy(float *y, float a, float d, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) y[i + u] = a * y[i + u] + d * x[i + u];
    for (; i < n; i++) y[i] = a * y[i] + d * x[i];
}

/* e^x for a log decay x <= 0, exactly 0 below DN_DECAY_FLOOR: such factors are far below f32
 * resolution next to the O(1) terms they are added to, and keeping them would feed
 * subnormal numbers to the kernels (each one a microcode assist, ~100x slower). */
#define DN_DECAY_FLOOR (-60.0f)
static float decay(float x) { return x < DN_DECAY_FLOOR ? 0.0f : expf(x); }

/* A chunk ends before its accumulated log decay passes DN_CHUNK_DECAY: every decay factor
 * inside is then at least e^-40, so its products with small values stay normal numbers,
 * and e^{-G} cannot overflow. Chunks shorter than DN_MIN_CHUNK (fast-decaying heads) run
 * the recurrence instead. */
#define DN_CHUNK_DECAY (-40.0f)
#define DN_MIN_CHUNK 16

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }  /* torch's threshold */

static ci_mat f32_view(const float *p, int64_t rows, int64_t cols) {
    ci_mat m = { 0 };
    m.data = p;
    m.dtype = CI_F32;
    m.rows = rows;
    m.cols = cols;
    return m;
}

static int conv_dim(const dn_layer *L) { return 2 * L->hk * L->dk + L->hv * L->dv; }

size_t dn_state_floats(const dn_layer *L) {
    return (size_t)(L->conv_k - 1) * (size_t)conv_dim(L) + (size_t)L->hv * (size_t)L->dv * (size_t)L->dk;
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
    return 1;
}

void dn_layer_free(dn_layer *L) {
    L->conv_w = NULL;  /* the binder's copy, freed with the model's other w_vec copies */
}

/* ---- scratch -------------------------------------------------------------------------- */

int dn_scratch_init(dn_scratch *s, const dn_layer *L, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    const size_t n = (size_t)max_n, C = (size_t)conv_dim(L), VD = (size_t)L->hv * L->dv, KD = (size_t)L->hk * L->dk;
    const size_t c = DN_CHUNK, dk = (size_t)L->dk, dv = (size_t)L->dv;
    size_t proj = L->layout == DN_FUSED ? 2 * KD + 2 * VD + 2 * (size_t)L->hv : 1;
    s->proj = malloc(n * proj * sizeof(float));
    s->ext = malloc((n + (size_t)L->conv_k - 1) * C * sizeof(float));
    s->ones = malloc(C * sizeof(float));
    if (s->ones)
        for (size_t i = 0; i < C; i++) s->ones[i] = 1.0f;
    s->mix = malloc(n * C * sizeof(float));
    s->z = malloc(n * VD * sizeof(float));
    s->b = malloc(n * (size_t)L->hv * sizeof(float));
    s->a = malloc(n * (size_t)L->hv * sizeof(float));
    s->o = malloc(n * VD * sizeof(float));
    s->kq = malloc(2 * c * dk * sizeof(float));
    s->kkqk = malloc(2 * c * c * sizeof(float));
    s->T = malloc(c * c * sizeof(float));
    s->P = malloc(c * c * sizeof(float));
    s->kt = malloc(dk * c * sizeof(float));
    s->kbt = malloc(dk * c * sizeof(float));
    s->kdt = malloc(dk * c * sizeof(float));
    s->vbt = malloc(dv * c * sizeof(float));
    s->ut = malloc(dv * c * sizeof(float));
    s->rt = malloc(dv * c * sizeof(float));
    s->w = malloc(c * dk * sizeof(float));
    s->og = malloc(c * dv * sizeof(float));
    s->pu = malloc(c * dv * sizeof(float));
    s->ds = malloc(dv * dk * sizeof(float));
    s->G = malloc(c * sizeof(float));
    s->heads = malloc((size_t)L->hv * sizeof(int));
    s->beta = malloc(c * sizeof(float));
    s->cb = malloc(c * sizeof(float));
    s->cd = malloc(c * sizeof(float));
    if (!s->proj || !s->ext || !s->ones || !s->mix || !s->z || !s->b || !s->a || !s->o || !s->kq || !s->kkqk || !s->T || !s->P ||
        !s->kt || !s->kbt || !s->kdt || !s->vbt || !s->ut || !s->rt || !s->w || !s->og || !s->pu || !s->ds || !s->G ||
        !s->beta || !s->cb || !s->cd || !s->heads) {
        dn_scratch_free(s);
        return -1;
    }
    return 0;
}

void dn_scratch_free(dn_scratch *s) {
    free(s->proj); free(s->ext); free(s->ones); free(s->mix); free(s->z); free(s->b); free(s->a); free(s->o);
    free(s->kq); free(s->kkqk); free(s->T); free(s->P); free(s->kt); free(s->kbt); free(s->kdt); free(s->vbt);
    free(s->ut); free(s->rt); free(s->w); free(s->og); free(s->pu); free(s->ds); free(s->G); free(s->beta);
    free(s->cb); free(s->cd); free(s->heads);
    memset(s, 0, sizeof *s);
}

/* ---- the recurrence ------------------------------------------------------------------ */

/* Tokens [t0, t1) of value head h, one at a time. */
static void rec_run(const dn_layer *L, const dn_scratch *s, float *S, int h, int t0, int t1) {
    const int dk = L->dk, dv = L->dv, hv = L->hv, KD = L->hk * L->dk, C = conv_dim(L), kh = h / (hv / L->hk);
    for (int t = t0; t < t1; t++) {
        const float *row = s->mix + (size_t)t * C;
        const float *q = row + kh * dk, *k = row + KD + kh * dk, *v = row + 2 * KD + h * dv;
        const float eg = decay(s->a[t * hv + h]), beta = s->b[t * hv + h], kq = dot(k, q, dk);
        float *o = s->o + (size_t)t * hv * dv + (size_t)h * dv;
        for (int i = 0; i < dv; i++) {
            float *Si = S + (size_t)i * dk;
            /* with S' = e^g S: delta = beta (v - S' k), S'' = S' + delta k^T, o = S'' q */
            float sk, sq;
            dot2(Si, k, q, dk, &sk, &sq);
            float d = beta * (v[i] - eg * sk);
            o[i] = eg * sq + d * kq;
            scale_axpy(Si, eg, d, k, dk);
        }
    }
}

typedef struct {
    const dn_layer *L;
    const dn_scratch *s;
    float *S;              /* [hv, dv, dk] */
    int n;
    const int *heads;      /* the heads to run, one pool task each */
} rec_ctx;

static void rec_head(void *vc, int i) {
    const rec_ctx *c = vc;
    int h = c->heads[i];
    rec_run(c->L, c->s, c->S + (size_t)h * c->L->dv * c->L->dk, h, 0, c->n);
}

/* ---- the chunked form: one value head, one chunk of Lc tokens starting at t0 ---------- */

/* dst[c][r] = src[r][c] for r < rows, c < cols (8x8 blocks: both sides touch few lines). */
static void transpose(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int rows, int cols) {
    for (int r0 = 0; r0 < rows; r0 += 8)
        for (int c0 = 0; c0 < cols; c0 += 8) {
            int r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int r = r0; r < r1; r++)
                for (int c = c0; c < c1; c++) dst[(int64_t)c * dst_stride + r] = src[(int64_t)r * src_stride + c];
        }
}

/* S = e*S + dS, with anything below 1e-30 set to 0: no subnormals into the next chunk's
 * products (a head whose updates stay ~0 would otherwise decay into them). */
static void state_update(float *S, float e, const float *dS, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++) {
            float v = e * S[i + u] + dS[i + u];
            S[i + u] = fabsf(v) < 1e-30f ? 0.0f : v;
        }
    for (; i < n; i++) {
        float v = e * S[i] + dS[i];
        S[i] = fabsf(v) < 1e-30f ? 0.0f : v;
    }
}

/* The chunk runs padded to Lp = a multiple of 16 tokens (k = q = v = 0, beta = 0, g = 0 in
 * the padding, which then adds nothing), so every product's inner dimension suits the
 * kernels. Seven backend matmuls, all with dk, dv or Lp as the inner dimension:
 *   [K; Q] K^T -> k.k, q.k          U0^T = (beta V)^T T^T        W = T (beta e^G K)
 *   R^T = S W^T (state read)        Og = (e^G Q) S^T             PU = P U
 *   dS = U^T (e^{G_L - G} K) */
static void chunk_head(ci_backend *be, const dn_layer *L, dn_scratch *s, float *S, int h, int t0, int Lc) {
    const int dk = L->dk, dv = L->dv, hv = L->hv, KD = L->hk * L->dk, C = conv_dim(L), kh = h / (hv / L->hk);
    const int Lp = (Lc + 15) / 16 * 16;
    float *G = s->G, *beta = s->beta;
    /* gather k rows then q rows, zero-padded; beta; cumulative decay */
    for (int i = 0; i < Lp; i++) {
        float *kr = s->kq + (size_t)i * dk, *qr = s->kq + (size_t)(Lp + i) * dk;
        if (i < Lc) {
            const float *row = s->mix + (size_t)(t0 + i) * C;
            memcpy(kr, row + KD + kh * dk, (size_t)dk * sizeof(float));
            memcpy(qr, row + kh * dk, (size_t)dk * sizeof(float));
            beta[i] = s->b[(t0 + i) * hv + h];
            G[i] = (i ? G[i - 1] : 0.0f) + s->a[(t0 + i) * hv + h];
        } else {
            memset(kr, 0, (size_t)dk * sizeof(float));
            memset(qr, 0, (size_t)dk * sizeof(float));
            beta[i] = 0.0f;
            G[i] = G[Lc - 1];
        }
    }
    /* chunk_len keeps G >= DN_CHUNK_DECAY, so e^{G_i - G_j} = e^{G_i} e^{-G_j} without overflow */
    for (int i = 0; i < Lp; i++) {
        s->cb[i] = expf(G[i]);
        s->cd[i] = expf(-G[i]);
    }
    ci_mat Km = f32_view(s->kq, Lp, dk);
    be->matmul(be, s->kkqk, s->kq, 2 * Lp, &Km);               /* [2Lp, Lp] */
    const float *kk = s->kkqk, *qk = s->kkqk + (size_t)Lp * Lp;
    /* T = (I + A)^-1, A_im = beta_i e^{G_i - G_m} k_i.k_m (m < i), by forward substitution
     * row by row (T_i = e_i - sum_{m<i} A_im T_m); P = decayed causal q.k, diagonal included */
    for (int i = 0; i < Lp; i++) {
        float *Ti = s->T + (size_t)i * Lp, *Pi = s->P + (size_t)i * Lp;
        const float *kki = kk + (size_t)i * Lp, *qki = qk + (size_t)i * Lp, bi = beta[i] * s->cb[i];
        memset(Ti, 0, (size_t)Lp * sizeof(float));
        Ti[i] = 1.0f;
        if (bi != 0.0f)
            for (int m = 0; m < i; m++) scale_axpy(Ti, 1.0f, -bi * s->cd[m] * kki[m], s->T + (size_t)m * Lp, m + 1);
        for (int j = 0; j <= i; j++) Pi[j] = s->cb[i] * s->cd[j] * qki[j];
        for (int j = i + 1; j < Lp; j++) Pi[j] = 0.0f;
    }
    /* K^T, then (beta e^G K)^T and (e^{G_L - G} K)^T from it; (beta V)^T */
    transpose(s->kt, Lp, s->kq, dk, Lp, dk);
    const float egl = s->cb[Lp - 1];
    for (int j = 0; j < Lp; j++) {      /* (cb, cd) become (beta e^G, e^{G_L - G}) */
        s->cd[j] *= egl;
        s->cb[j] *= beta[j];
    }
    for (int k = 0; k < dk; k++) {
        const float *src = s->kt + (size_t)k * Lp;
        float *b = s->kbt + (size_t)k * Lp, *e = s->kdt + (size_t)k * Lp;
        for (int j = 0; j < Lp; j++) { b[j] = src[j] * s->cb[j]; e[j] = src[j] * s->cd[j]; }
    }
    transpose(s->vbt, Lp, s->mix + (size_t)t0 * C + 2 * KD + h * dv, C, Lc, dv);
    for (int v = 0; v < dv; v++) {
        float *r = s->vbt + (size_t)v * Lp;
        for (int j = 0; j < Lc; j++) r[j] *= beta[j];
        for (int j = Lc; j < Lp; j++) r[j] = 0.0f;
    }
    ci_mat Tm = f32_view(s->T, Lp, Lp), Kb = f32_view(s->kbt, dk, Lp);
    be->matmul(be, s->ut, s->vbt, dv, &Tm);                    /* U0^T [dv, Lp] */
    be->matmul(be, s->w, s->T, Lp, &Kb);                       /* W [Lp, dk] */
    /* U^T = U0^T - S W^T */
    ci_mat Wm = f32_view(s->w, Lp, dk), Sm = f32_view(S, dv, dk);
    be->matmul(be, s->rt, S, dv, &Wm);                         /* [dv, Lp] */
    for (size_t i = 0; i < (size_t)dv * Lp; i++) s->ut[i] -= s->rt[i];
    /* o = (e^G Q) S^T + P U */
    float *qg = s->kq + (size_t)Lp * dk;
    for (int i = 0; i < Lc; i++) {
        const float e = expf(G[i]);
        for (int k = 0; k < dk; k++) qg[(size_t)i * dk + k] *= e;
    }
    ci_mat Um = f32_view(s->ut, dv, Lp);
    be->matmul(be, s->og, qg, Lp, &Sm);                        /* [Lp, dv] */
    be->matmul(be, s->pu, s->P, Lp, &Um);                      /* [Lp, dv] */
    for (int i = 0; i < Lc; i++) {
        float *o = s->o + (size_t)(t0 + i) * hv * dv + (size_t)h * dv;
        const float *a = s->og + (size_t)i * dv, *b = s->pu + (size_t)i * dv;
        for (int v = 0; v < dv; v++) o[v] = a[v] + b[v];
    }
    /* S <- e^{G_L} S + U^T (e^{G_L - G} K) */
    ci_mat Kd = f32_view(s->kdt, dk, Lp);
    be->matmul(be, s->ds, s->ut, dv, &Kd);                     /* [dv, dk] */
    state_update(S, egl, s->ds, dv * dk);
}

/* The next chunk of head h from token t0: up to DN_CHUNK tokens, fewer when the decay
 * accumulated inside would pass DN_CHUNK_DECAY. */
static int chunk_len(const dn_scratch *s, int hv, int h, int t0, int n) {
    float G = 0;
    int L = 0;
    while (L < DN_CHUNK && t0 + L < n) {
        G += s->a[(t0 + L) * hv + h];
        if (L > 0 && G < DN_CHUNK_DECAY) break;
        L++;
    }
    return L;
}

/* ---- the mixer ------------------------------------------------------------------------ */

/* Projections of x [n, hidden] into mix_in [n, C] ([q | k | v] pre-conv), s->z, s->b, s->a. */
static void project(ci_backend *be, const dn_layer *L, dn_scratch *s, float *mix_in, const float *x, int n) {
    const int hk = L->hk, hv = L->hv, dk = L->dk, dv = L->dv, r = hv / hk;
    const int KD = hk * dk, VD = hv * dv, C = conv_dim(L);
    if (L->layout == DN_SPLIT) {
        be->matmul(be, mix_in, x, n, &L->qkv);
        be->matmul(be, s->z, x, n, &L->z);
        be->matmul(be, s->b, x, n, &L->b);
        be->matmul(be, s->a, x, n, &L->a);
        return;
    }
    const int PW = 2 * KD + 2 * VD, gw = 2 * dk + 2 * r * dv;
    float *ba = s->proj + (size_t)n * PW;
    be->matmul(be, s->proj, x, n, &L->qkvz);
    be->matmul(be, ba, x, n, &L->ba);
    for (int t = 0; t < n; t++) {
        const float *src = s->proj + (size_t)t * PW;
        float *dst = mix_in + (size_t)t * C;
        for (int g = 0; g < hk; g++, src += gw) {
            memcpy(dst + g * dk, src, (size_t)dk * sizeof(float));
            memcpy(dst + KD + g * dk, src + dk, (size_t)dk * sizeof(float));
            memcpy(dst + 2 * KD + g * r * dv, src + 2 * dk, (size_t)r * dv * sizeof(float));
            memcpy(s->z + (size_t)t * VD + g * r * dv, src + 2 * dk + r * dv, (size_t)r * dv * sizeof(float));
            const float *bs = ba + (size_t)t * 2 * hv + g * 2 * r;
            for (int j = 0; j < r; j++) {
                s->b[t * hv + g * r + j] = bs[j];
                s->a[t * hv + g * r + j] = bs[r + j];
            }
        }
    }
}

/* Causal depthwise conv + SiLU of token rows ext[K-1 .. K-1+n) (ext: the K-1 window rows,
 * then the rows) into s->mix rows [t0, t0 + n). */
static void conv_rows(ci_backend *be, const dn_layer *L, dn_scratch *s, const float *ext, int t0, int n) {
    const int K = L->conv_k, C = conv_dim(L);
    for (int t = 0; t < n; t++) {
        float *o = s->mix + (size_t)(t0 + t) * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (int j = 0; j < K; j++)      /* tap j of every channel: row j of conv_w */
            mul_add(o, L->conv_w + (size_t)j * C, ext + (size_t)(t + j) * C, C);
        be->swiglu(be, o, s->ones, C);   /* silu(o) * 1 */
    }
}

/* L2-normalise q and k per key head (q also by dk^-0.5); beta and the log decay g. */
static void gates(const dn_layer *L, dn_scratch *s, int n) {
    const int hk = L->hk, hv = L->hv, dk = L->dk, C = conv_dim(L);
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        float *row = s->mix + (size_t)t * C;
        for (int g = 0; g < 2 * hk; g++) {
            float *p = row + g * dk;
            float inv = 1.0f / sqrtf(dot(p, p, dk) + 1e-6f) * (g < hk ? qscale : 1.0f);
            for (int i = 0; i < dk; i++) p[i] *= inv;
        }
        for (int h = 0; h < hv; h++) {
            float *bb = &s->b[t * hv + h], *aa = &s->a[t * hv + h];
            *bb = 1.0f / (1.0f + expf(-*bb));
            *aa = L->neg_A[h] * softplus(*aa + L->dt_bias[h]);
        }
    }
}

/* out = out_proj(RMSNorm(o) * silu(z)) over n rows */
static void out_rows(ci_backend *be, const dn_layer *L, dn_scratch *s, float *out, int n) {
    be->rmsnorm(be, s->o, s->o, L->norm_w, n * L->hv, L->dv, L->eps);
    be->swiglu(be, s->z, s->o, (int64_t)n * L->hv * L->dv);
    be->matmul(be, out, s->z, n, &L->out);
}

void dn_forward(ci_backend *be, const dn_layer *L, dn_scratch *s, float *state, float *out, const float *x, int n,
                dn_mode mode) {
    const int hv = L->hv, dk = L->dk, dv = L->dv, K = L->conv_k, C = conv_dim(L);
    float *window = state, *S = state + (size_t)(K - 1) * C;
    float *mix_in = s->ext + (size_t)(K - 1) * C;   /* this chunk's pre-conv rows follow the window */

    project(be, L, s, mix_in, x, n);
    /* causal depthwise conv + SiLU over the window and this chunk; keep the last K-1 rows */
    memcpy(s->ext, window, (size_t)(K - 1) * C * sizeof(float));
    conv_rows(be, L, s, s->ext, 0, n);
    memcpy(window, s->ext + (size_t)n * C, (size_t)(K - 1) * C * sizeof(float));
    gates(L, s, n);

    /* the core: o [n, hv*dv] */
    /* A head whose decay keeps its chunks short for most of the tokens runs the recurrence
     * (those heads in parallel, one pool task each); the others go chunk by chunk with the
     * matmuls threaded, and their occasional short chunk runs the recurrence inline. */
    int n_rec = 0, n_chk = 0;
    for (int h = 0; h < hv; h++) {
        int chunked = 0;
        if (mode != DN_RECURRENT && n >= DN_MIN_CHUNK)
            for (int t0 = 0, Lc; t0 < n; t0 += Lc) {
                Lc = chunk_len(s, hv, h, t0, n);
                if (Lc >= DN_MIN_CHUNK) chunked += Lc;
            }
        if (2 * chunked > n) s->heads[hv - 1 - n_chk++] = h;
        else s->heads[n_rec++] = h;
    }
    if (n_rec) {
        rec_ctx rc = { L, s, S, n, s->heads };
        ci_pool_run(be->pool, rec_head, &rc, n_rec);
    }
    for (int i = hv - 1; i >= n_rec; i--) {
        const int h = s->heads[i];
        float *Sh = S + (size_t)h * dv * dk;
        for (int t0 = 0, Lc; t0 < n; t0 += Lc) {
            Lc = chunk_len(s, hv, h, t0, n);
            if (Lc >= DN_MIN_CHUNK) chunk_head(be, L, s, Sh, h, t0, Lc);
            else rec_run(L, s, Sh, h, t0, t0 + Lc);
        }
    }
    out_rows(be, L, s, out, n);
}

/* One recurrence step (row t, value head h) of a batched step: pool task t * hv + h. */
typedef struct {
    const dn_layer *L;
    const dn_scratch *s;
    float *const *states;
} rows_ctx;

static void rows_task(void *vc, int i) {
    const rows_ctx *c = vc;
    const dn_layer *L = c->L;
    const int hv = L->hv, t = i / hv, h = i % hv;
    float *S = c->states[t] + (size_t)(L->conv_k - 1) * conv_dim(L) + (size_t)h * L->dv * L->dk;
    rec_run(L, c->s, S, h, t, t + 1);
}

void dn_forward_rows(ci_backend *be, const dn_layer *L, dn_scratch *s, float *const *states, float *out, const float *x,
                     int n) {
    const int K = L->conv_k, C = conv_dim(L);
    float *in = s->ext + (size_t)(K - 1) * C;   /* the rows' pre-conv values; each row's window goes before it */
    project(be, L, s, s->mix, x, n);            /* pre-conv rows, parked in mix until each is convolved */
    for (int t = n - 1; t >= 0; t--) {          /* back to front: conv_rows writes mix row t only */
        memcpy(s->ext, states[t], (size_t)(K - 1) * C * sizeof(float));
        memcpy(in, s->mix + (size_t)t * C, (size_t)C * sizeof(float));
        conv_rows(be, L, s, s->ext, t, 1);
        memcpy(states[t], s->ext + C, (size_t)(K - 1) * C * sizeof(float));
    }
    gates(L, s, n);
    rows_ctx rc = { L, s, states };
    ci_pool_run(be->pool, rows_task, &rc, n * L->hv);
    out_rows(be, L, s, out, n);
}
