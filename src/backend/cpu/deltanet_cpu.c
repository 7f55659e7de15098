/* deltanet_cpu.c — the CPU backend's gated-DeltaNet ops (backend.h: causal_conv, deltanet,
 * deltanet_unfuse) and gated attention's output gate (split_halves, sigmoid_mul), in host
 * memory. The arithmetic is nn/deltanet.c's and nn/gated_attn.c's as it was before it
 * became ops (same loops, same order, the SiLU through the backend's swiglu), so the
 * Qwen3-Next / Qwen3.5 logits keep their bits.
 *
 * The core, derived for S [Dv, Dk] (S k reads the state): inside a chunk of L tokens with
 * cumulative log decay G_i = g_0 + ... + g_i, the state after token i is
 *   S_i = e^{G_i} S_0 + sum_{j<=i} e^{G_i - G_j} u_j k_j^T
 * where the pseudo-values u_j solve the lower-unitriangular system
 *   u_i + sum_{j<i} beta_i e^{G_i - G_j} (k_i . k_j) u_j = beta_i v_i - beta_i e^{G_i} S_0 k_i,
 * i.e. U = T (beta V) - T (beta e^G K) S_0^T with T = (I + A)^-1 (the UT transform). Then
 *   o_i = e^{G_i} S_0 q_i + sum_{j<=i} e^{G_i - G_j} (q_i . k_j) u_j
 *   S_L = e^{G_L} S_0 + sum_j e^{G_L - G_j} u_j k_j^T.
 * Every exponent is G_i - G_j with j <= i, or G_i itself, so all factors are <= 1. The
 * matrix products (see chunk_head) are backend matmuls on f32 views of the scratch, laid
 * out so that no result needs transposing; T is found by forward substitution in plain C.
 * Prompts run chunks of up to CI_DN_CHUNK tokens; a chunk also ends where its accumulated
 * decay would underflow, and heads that decay too fast for useful chunks, a few tokens
 * (decode) and the recurrent flag run the token-by-token recurrence.
 * f32 subnormals are kept out of every product (they cost ~100x on x86): chunks end before
 * their decay underflows, tiny decay factors are 0, and the state is flushed below 1e-30. */
#include "cpu_kernels.h"
#include <math.h>
#include <string.h>

/* The scratch of one deltanet call, carved from the op's scratch (backend.h). */
typedef struct {
    float *mix, *b, *a;    /* the op's arguments: [n, conv_dim], [n, hv] -> beta, g */
    float *o;              /* [n, hv*dv] */
    /* chunked form, one (head, chunk) at a time; C = CI_DN_CHUNK, Lp <= C the padded length */
    float *kq;             /* [2C, dk] K rows then Q rows (Q later scaled by e^G) */
    float *kkqk;           /* [2C, C] k.k then q.k */
    float *T, *P;          /* [C, C] (I + A)^-1 and the decayed causal q.k */
    float *kt, *kbt, *kdt; /* [dk, C] K^T, (beta e^G K)^T, (e^{G_L - G} K)^T */
    float *vbt;            /* [dv, C] (beta V)^T */
    float *ut, *rt;        /* [dv, C] U^T and the state read S W^T */
    float *w;              /* [C, dk] W = T (beta e^G K) */
    float *og, *pu;        /* [C, dv] (e^G Q) S^T and P U */
    float *ds;             /* [dv, dk] state increment */
    float *G, *beta;       /* [C] cumulative log decay, beta */
    float *cb, *cd;        /* [C] e^G then beta e^G; e^-G then e^{G_L - G} */
    int *heads;            /* [hv] heads run by the recurrence, then the chunked ones */
} dn_work;


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

/* A chunk ends before its accumulated log decay passes CI_DN_CHUNK_DECAY: every decay factor
 * inside is then at least e^-40, so its products with small values stay normal numbers,
 * and e^{-G} cannot overflow. Chunks shorter than DN_MIN_CHUNK (fast-decaying heads) run
 * the recurrence instead. */
#define CI_DN_CHUNK_DECAY (-40.0f)
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

static int conv_dim(const ci_deltanet *L) { return 2 * L->hk * L->dk + L->hv * L->dv; }

/* The op's scratch as dn_work (sizes as ci_deltanet_scratch_floats adds them up). */
static void carve(dn_work *s, const ci_deltanet *L, float *scratch, int n) {
    const size_t c = CI_DN_CHUNK, dk = (size_t)L->dk, dv = (size_t)L->dv;
    float *p = scratch;
    s->o = p; p += (size_t)n * L->hv * dv;
    s->kq = p; p += 2 * c * dk;
    s->kkqk = p; p += 2 * c * c;
    s->T = p; p += c * c;
    s->P = p; p += c * c;
    s->kt = p; p += dk * c;
    s->kbt = p; p += dk * c;
    s->kdt = p; p += dk * c;
    s->vbt = p; p += dv * c;
    s->ut = p; p += dv * c;
    s->rt = p; p += dv * c;
    s->w = p; p += c * dk;
    s->og = p; p += c * dv;
    s->pu = p; p += c * dv;
    s->ds = p; p += dv * dk;
    s->G = p; p += c;
    s->beta = p; p += c;
    s->cb = p; p += c;
    s->cd = p; p += c;
    s->heads = (int *)(void *)p;
}

/* ---- the recurrence ------------------------------------------------------------------ */

/* ---- the recurrence ------------------------------------------------------------------ */

/* Tokens [t0, t1) of value head h, one at a time. */
static void rec_run(const ci_deltanet *L, const dn_work *s, float *S, int h, int t0, int t1) {
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
    const ci_deltanet *L;
    const dn_work *s;
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
static void chunk_head(ci_backend *be, const ci_deltanet *L, dn_work *s, float *S, int h, int t0, int Lc) {
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
    /* chunk_len keeps G >= CI_DN_CHUNK_DECAY, so e^{G_i - G_j} = e^{G_i} e^{-G_j} without overflow */
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

/* The next chunk of head h from token t0: up to CI_DN_CHUNK tokens, fewer when the decay
 * accumulated inside would pass CI_DN_CHUNK_DECAY. */
static int chunk_len(const dn_work *s, int hv, int h, int t0, int n) {
    float G = 0;
    int L = 0;
    while (L < CI_DN_CHUNK && t0 + L < n) {
        G += s->a[(t0 + L) * hv + h];
        if (L > 0 && G < CI_DN_CHUNK_DECAY) break;
        L++;
    }
    return L;
}


/* L2-normalise q and k per key head (q also by dk^-0.5); beta and the log decay g. */
static void gates(const ci_deltanet *L, dn_work *s, int n) {
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

/* ---- the ops -------------------------------------------------------------------------- */

/* One value head of a step of n sequences: pool task t * hv + h runs row t's head h. */
typedef struct {
    const ci_deltanet *L;
    const dn_work *s;
    float *const *states;
    int tab_step;
} rows_ctx;

static void rows_task(void *vc, int i) {
    const rows_ctx *c = vc;
    const ci_deltanet *L = c->L;
    const int hv = L->hv, t = i / hv, h = i % hv;
    float *S = c->states[(size_t)t * c->tab_step] + (size_t)h * L->dv * L->dk;
    rec_run(L, c->s, S, h, t, t + 1);
}

void cpu_deltanet(ci_backend *be, float *z, float *mix, float *b, float *a, int n, const ci_deltanet *L, float *S,
                  float *const *states, int tab_step, int recurrent, float *scratch) {
    CI_FP_FLUSH_SCOPE();
    if (n <= 0) return;
    const int hv = L->hv, dk = L->dk, dv = L->dv;
    dn_work w, *s = &w;
    carve(s, L, scratch, n);
    s->mix = mix;
    s->b = b;
    s->a = a;
    gates(L, s, n);
    if (states) {
        rows_ctx rc = { L, s, states, tab_step };
        ci_pool_run(be->pool, rows_task, &rc, n * hv);
    } else {
        /* A head whose decay keeps its chunks short for most of the tokens runs the
         * recurrence (those heads in parallel, one pool task each); the others go chunk by
         * chunk with the matmuls threaded, and their occasional short chunk runs the
         * recurrence inline. */
        int n_rec = 0, n_chk = 0;
        for (int h = 0; h < hv; h++) {
            int chunked = 0;
            if (!recurrent && n >= DN_MIN_CHUNK)
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
    }
    /* the output gate: z = silu(z) * rmsnorm(o) w */
    be->rmsnorm(be, s->o, s->o, L->norm_w, n * hv, dv, L->eps);
    be->swiglu(be, z, s->o, (int64_t)n * hv * dv);
}

/* SiLU through swiglu(x, 1): elementwise, so any split of a row gives the same bits. */
static const float ones[256] = {
#define O8 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f
#define O64 O8, O8, O8, O8, O8, O8, O8, O8
    O64, O64, O64, O64
#undef O64
#undef O8
};

static void silu_row(ci_backend *be, float *o, int n) {
    for (int i = 0; i < n; i += 256) be->swiglu(be, o + i, ones, n - i < 256 ? n - i : 256);
}

/* Rows [t0, t0 + n) of x following `state` (updated): their outputs into y (same rows). */
static void conv_span(ci_backend *be, float *y_all, const float *x, float *ext, int C, int K, const float *taps,
                      float *state, int t0, int n) {
    const int H = K - 1;
    if (H) memcpy(ext, state, (size_t)H * C * sizeof(float));
    memcpy(ext + (size_t)H * C, x + (size_t)t0 * C, (size_t)n * C * sizeof(float));
    for (int t = 0; t < n; t++) {
        float *o = y_all + (size_t)(t0 + t) * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (int j = 0; j < K; j++)      /* tap j of every channel: row j of taps */
            mul_add(o, taps + (size_t)j * C, ext + (size_t)(t + j) * C, C);
        silu_row(be, o, C);
    }
    if (H) memcpy(state, ext + (size_t)n * C, (size_t)H * C * sizeof(float));
}

void cpu_causal_conv(ci_backend *be, float *y, const float *x, int n, int dim, int K, const float *taps, float *state,
                     float *const *states, int tab_step, float *scratch) {
    CI_FP_FLUSH_SCOPE();
    if (n <= 0) return;
    if (!states) {
        conv_span(be, y, x, scratch, dim, K, taps, state, 0, n);
        return;
    }
    for (int t = 0; t < n; t++) conv_span(be, y, x, scratch, dim, K, taps, states[(size_t)t * tab_step], t, 1);
}

void cpu_deltanet_unfuse(ci_backend *be, float *mix, float *z, float *b, float *a, const float *qkvz, const float *ba,
                         int n, const ci_deltanet *L) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    const int hk = L->hk, hv = L->hv, dk = L->dk, dv = L->dv, r = hv / hk;
    const int KD = hk * dk, VD = hv * dv, C = conv_dim(L), PW = 2 * KD + 2 * VD, gw = 2 * dk + 2 * r * dv;
    for (int t = 0; t < n; t++) {
        const float *src = qkvz + (size_t)t * PW;
        float *dst = mix + (size_t)t * C;
        for (int g = 0; g < hk; g++, src += gw) {
            memcpy(dst + g * dk, src, (size_t)dk * sizeof(float));
            memcpy(dst + KD + g * dk, src + dk, (size_t)dk * sizeof(float));
            memcpy(dst + 2 * KD + g * r * dv, src + 2 * dk, (size_t)r * dv * sizeof(float));
            memcpy(z + (size_t)t * VD + g * r * dv, src + 2 * dk + r * dv, (size_t)r * dv * sizeof(float));
            const float *bs = ba + (size_t)t * 2 * hv + g * 2 * r;
            for (int j = 0; j < r; j++) {
                b[t * hv + g * r + j] = bs[j];
                a[t * hv + g * r + j] = bs[r + j];
            }
        }
    }
}

void cpu_split_halves(ci_backend *be, float *lo, float *hi, const float *x, int rows, int width) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *src = x + (size_t)r * 2 * width;
        memcpy(lo + (size_t)r * width, src, (size_t)width * sizeof(float));
        memcpy(hi + (size_t)r * width, src + width, (size_t)width * sizeof(float));
    }
}

void cpu_sigmoid_mul(ci_backend *be, float *y, const float *g, int64_t count) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int64_t i = 0; i < count; i++) y[i] *= 1.0f / (1.0f + expf(-g[i]));
}

void cpu_sigmoid_gate_add(ci_backend *be, float *y, const float *x, const float *g, int n, int width) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int t = 0; t < n; t++) {
        float gw = g ? 1.0f / (1.0f + expf(-g[t])) : 1.0f;
        float *o = y + (size_t)t * width;
        const float *v = x + (size_t)t * width;
        for (int h = 0; h < width; h++) o[h] += gw * v[h];
    }
}
