/* v4_cpu.c — the CPU backend's DeepSeek V4 ops (backend.h: hc_spread, hc_pre, hc_post,
 * v4_compress, v4_index, v4_attend, matmul_groups), in host memory.
 *
 * Each op is the arithmetic nn/hc.c, nn/compressor.c and models/deepseek_v4.c did on host
 * arrays before these ops existed, in the same order and through the same backend ops
 * (matmul, rmsnorm, rope), so DeepSeek V4's logits keep their bits. Entry counts come from
 * positions (a session's state holds (p + 1) / ratio entries after the token at p). */
#include "cpu_kernels.h"
#include <math.h>
#include <string.h>

static float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

void cpu_hc_spread(ci_backend *be, float *X, const float *x, int n, int hc, int dim) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int t = 0; t < n; t++)
        for (int j = 0; j < hc; j++)
            memcpy(X + ((size_t)t * hc + j) * dim, x + (size_t)t * dim, (size_t)dim * sizeof(float));
}

/* o[d] = Σ_j pre[j] · xs[j][d], the streams xs [C, D] collapsed to one row */
static void collapse_row(const float *pre, const float *xs, int C, int D, float *o) {
    for (int d = 0; d < D; d++) {
        float a = 0;
        for (int j = 0; j < C; j++) a += pre[j] * xs[(size_t)j * D + d];
        o[d] = a;
    }
}

void cpu_hc_pre(ci_backend *be, float *x, float *post, float *comb, float *mix, const float *X, int n, int hc, int dim,
                int iters, float eps, float norm_eps, const float *scale, const float *base) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    const int C = hc, D = dim, F = hc * dim, M = post ? (2 + C) * C : C;
    for (int t = 0; t < n; t++) {   /* mix scaled by each row's rsqrt(mean(flat²) + eps) */
        const float *f = X + (size_t)t * F;
        double ss = 0;
        for (int i = 0; i < F; i++) ss += (double)f[i] * f[i];
        float r = 1.0f / sqrtf((float)(ss / F) + norm_eps);
        for (int i = 0; i < M; i++) mix[(size_t)t * M + i] *= r;
    }
    for (int t = 0; t < n; t++) {
        const float *mx = mix + (size_t)t * M;
        float pre[C];
        if (!post) {   /* the head mapping */
            for (int j = 0; j < C; j++) pre[j] = sigm(mx[j] * scale[0] + base[j]) + eps;
            collapse_row(pre, X + (size_t)t * C * D, C, D, x + (size_t)t * D);
            continue;
        }
        float *po = post + (size_t)t * C, *cb = comb + (size_t)t * C * C;
        for (int j = 0; j < C; j++) {
            pre[j] = sigm(mx[j] * scale[0] + base[j]) + eps;
            po[j] = 2.0f * sigm(mx[C + j] * scale[1] + base[C + j]);
        }
        for (int i = 0; i < C; i++) {                 /* row softmax of the comb logits, + eps */
            float *row = cb + i * C, m = -INFINITY;
            for (int j = 0; j < C; j++) {
                row[j] = mx[2 * C + i * C + j] * scale[2] + base[2 * C + i * C + j];
                if (row[j] > m) m = row[j];
            }
            float s = 0;
            for (int j = 0; j < C; j++) { row[j] = expf(row[j] - m); s += row[j]; }
            for (int j = 0; j < C; j++) row[j] = row[j] / s + eps;
        }
        for (int it = 0; it < iters; it++) {          /* columns, then (rows, columns) again */
            if (it > 0)
                for (int i = 0; i < C; i++) {
                    float s = 0;
                    for (int j = 0; j < C; j++) s += cb[i * C + j];
                    for (int j = 0; j < C; j++) cb[i * C + j] /= s + eps;
                }
            for (int j = 0; j < C; j++) {
                float s = 0;
                for (int i = 0; i < C; i++) s += cb[i * C + j];
                for (int i = 0; i < C; i++) cb[i * C + j] /= s + eps;
            }
        }
        collapse_row(pre, X + (size_t)t * C * D, C, D, x + (size_t)t * D);
    }
}

/* the matmul, then hc_pre: the bits of the two ops */
void cpu_hc_mix_pre(ci_backend *be, float *x, float *post, float *comb, float *mix, const float *X, int n,
                    const ci_mat *fn, int hc, int dim, int iters, float eps, float norm_eps, const float *scale,
                    const float *base) {
    be->matmul(be, mix, X, n, fn);
    cpu_hc_pre(be, x, post, comb, mix, X, n, hc, dim, iters, eps, norm_eps, scale, base);
}

void cpu_hc_post(ci_backend *be, float *X, const float *y, const float *post, const float *comb, int n, int hc, int dim,
                 float *tmp) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    const int C = hc, D = dim;
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

/* ---- the compressor ------------------------------------------------------------------ */

/* Closes window w of the state st of row t (its tokens are pending): writes its entry. */
static void emit(ci_backend *be, const ci_v4cmp *c, float *st, int t, int w) {
    const int R = c->ratio, d = c->d, m = (1 + c->overlap) * d, has_prev = c->overlap && w > 0;
    const float *pend_kv = st, *pend_gate = st + (size_t)R * m;
    float *prev_kv = st + 2 * (size_t)R * m, *prev_gate = prev_kv + (size_t)R * d;
    float *e = ci_v4cmp_entry(c, st, t, w);
    for (int ch = 0; ch < d; ch++) {
        /* slots: (overlap, when there is a previous window) its Ca values, then this window's
         * own series (Cb when overlapping) */
        const int own = c->overlap ? d + ch : ch;
        float mx = -INFINITY;
        if (has_prev)
            for (int k = 0; k < R; k++) mx = fmaxf(mx, prev_gate[(size_t)k * d + ch]);
        for (int k = 0; k < R; k++) mx = fmaxf(mx, pend_gate[(size_t)k * m + own]);
        double num = 0, den = 0;
        if (has_prev)
            for (int k = 0; k < R; k++) {
                double p = exp((double)prev_gate[(size_t)k * d + ch] - mx);
                num += p * prev_kv[(size_t)k * d + ch];
                den += p;
            }
        for (int k = 0; k < R; k++) {
            double p = exp((double)pend_gate[(size_t)k * m + own] - mx);
            num += p * pend_kv[(size_t)k * m + own];
            den += p;
        }
        e[ch] = (float)(num / den);
    }
    be->rmsnorm(be, e, e, c->norm, 1, d, c->eps);
    int32_t pos = w * R;
    be->rope(be, e, 1, 1, d, d - c->rot_dim, c->rot_dim, &pos, c->inv_freq, c->mscale, CI_ROPE_INTERLEAVED);
    if (c->overlap) {   /* this window's Ca series feeds the next entry */
        for (int k = 0; k < R; k++) {
            memcpy(prev_kv + (size_t)k * d, pend_kv + (size_t)k * m, (size_t)d * sizeof(float));
            memcpy(prev_gate + (size_t)k * d, pend_gate + (size_t)k * m, (size_t)d * sizeof(float));
        }
    }
}

void cpu_v4_compress(ci_backend *be, float *state, float *const *states, int tab_step, const float *kv,
                     const float *gate, int n, const int32_t *pos, const ci_v4cmp *c) {
    CI_FP_FLUSH_SCOPE();
    const int R = c->ratio, m = (1 + c->overlap) * c->d;
    for (int t = 0; t < n; t++) {
        float *st = states ? states[(size_t)t * tab_step] : state;
        const int p = pos[t], slot = p % R;
        memcpy(st + (size_t)slot * m, kv + (size_t)t * m, (size_t)m * sizeof(float));
        float *g = st + (size_t)R * m + (size_t)slot * m;
        const float *ape = c->ape + (size_t)slot * m, *gt = gate + (size_t)t * m;
        for (int i = 0; i < m; i++) g[i] = gt[i] + ape[i];
        if (slot == R - 1) emit(be, c, st, t, p / R);
    }
}

void cpu_v4_index(ci_backend *be, int32_t *sel, int32_t *nsel, const float *iq, const float *iw, const float *state,
                  float *const *states, int tab_step, int n, const int32_t *pos, const ci_v4cmp *c, int ih, int topk,
                  int sel_stride, int max_entries, float *scratch) {
    CI_FP_FLUSH_SCOPE();
    (void)max_entries;
    const int Di = c->d;
    const float ks = 1.0f / sqrtf((float)Di), ws = 1.0f / sqrtf((float)ih);
    float *dots = scratch;                             /* [ih, CI_V4_IDX_BLOCK] */
    float *gath = dots + (size_t)ih * CI_V4_IDX_BLOCK;  /* [CI_V4_IDX_BLOCK, Di] entries on a pool */
    for (int t = 0; t < n; t++) {
        float *st = (float *)(states ? states[(size_t)t * tab_step] : state);
        const float *entries = c->ent ? NULL : ci_v4cmp_entry(c, st, t, 0);
        const float *q = iq + (size_t)t * ih * Di, *w = iw + (size_t)t * ih;
        int32_t *out = sel + (size_t)t * sel_stride;
        const int vis = (pos[t] + 1) / c->ratio;
        float *scores = gath + (size_t)Di * CI_V4_IDX_BLOCK;
        int32_t *tmp = (int32_t *)(scores + (vis > 0 ? vis : 1));
        if (vis <= topk) {
            for (int i = 0; i < vis; i++) out[i] = i;
            nsel[t] = vis;
            continue;
        }
        /* q_h · k_s for every head and visible entry, a block of entries per matmul, then
         * score(s) = Σ_h relu(q_h · k_s) · Di^-½ · w_h */
        for (int s0 = 0; s0 < vis; s0 += CI_V4_IDX_BLOCK) {
            const int nb = vis - s0 < CI_V4_IDX_BLOCK ? vis - s0 : CI_V4_IDX_BLOCK;
            const float *kb = entries ? entries + (size_t)s0 * Di : gath;
            for (int i = 0; !entries && i < nb; i++)
                memcpy(gath + (size_t)i * Di, ci_v4cmp_entry(c, st, t, s0 + i), (size_t)Di * sizeof(float));
            ci_mat K = { .data = kb, .dtype = CI_F32, .rows = nb, .cols = Di };
            be->matmul(be, dots, q, ih, &K);           /* [ih, nb] */
            for (int i = 0; i < nb; i++) {
                float sc = 0;
                for (int h = 0; h < ih; h++) {
                    float v = dots[(size_t)h * nb + i], wh = w[h] * ws;
                    if (v > 0) sc += v * ks * wh;
                }
                scores[s0 + i] = sc;
            }
        }
        int k = ci_topk_positions(scores, vis, topk, tmp);   /* ties: the lower index */
        memcpy(out, tmp, (size_t)k * sizeof *out);
        nsel[t] = k;
    }
}

/* ---- attention ------------------------------------------------------------------------ */

/* Softmax of one head's scores with its sink logit in the denominator, then the head's
 * output Σ_j p_j · k_j (K = V). Pool task h of one query row. */
typedef struct {
    const float *sinks;
    const float *keys;                    /* [nk, D] */
    float *sc;                            /* [Hh, nk] scores, scaled in place to weights */
    float *out;                           /* [Hh, D] */
    int nk, D;
} head_ctx;

static void head_task(void *vctx, int h) {
    const head_ctx *a = vctx;
    const int D = a->D, nk = a->nk;
    const float scale = 1.0f / sqrtf((float)D);
    float *sc = a->sc + (size_t)h * nk, mx = a->sinks[h];
    for (int j = 0; j < nk; j++) {
        sc[j] *= scale;
        if (sc[j] > mx) mx = sc[j];
    }
    float sum = expf(a->sinks[h] - mx);
    for (int j = 0; j < nk; j++) { sc[j] = expf(sc[j] - mx); sum += sc[j]; }
    float *o = a->out + (size_t)h * D;
    memset(o, 0, (size_t)D * sizeof(float));
    for (int j = 0; j < nk; j++) {
        const float w = sc[j] / sum, *k = a->keys + (size_t)j * D;
        for (int e = 0; e < D; e++) o[e] += w * k[e];
    }
}

void cpu_v4_attend(ci_backend *be, float *out, const float *q, const float *kv, int n, const int32_t *pos, float *ring,
                   int ring_rows, int window, const float *cstate, float *const *tab, int tab_step, const ci_v4cmp *c,
                   const int32_t *sel, const int32_t *nsel, int sel_stride, const float *sinks, int n_heads, int D,
                   int rot_dim, const float *inv_freq, float mscale, float *kbuf, float *sc) {
    CI_FP_FLUSH_SCOPE();
    const int HD = n_heads * D;
    for (int t = 0; t < n; t++) {   /* every row's key into its ring before any row attends */
        float *rg = tab ? tab[(size_t)t * tab_step] : ring;
        memcpy(rg + (size_t)(pos[t] % ring_rows) * D, kv + (size_t)t * D, (size_t)D * sizeof(float));
    }
    for (int t = 0; t < n; t++) {
        const float *rg = tab ? tab[(size_t)t * tab_step] : ring;
        const int p = pos[t];
        int s0 = p - window + 1 > 0 ? p - window + 1 : 0, nk = 0;
        for (int r = s0; r <= p; r++)
            memcpy(kbuf + (size_t)nk++ * D, rg + (size_t)(r % ring_rows) * D, (size_t)D * sizeof(float));
        if (c) {
            float *cs = (float *)(tab ? tab[(size_t)t * tab_step + 1] : cstate);
            if (sel) {
                const int32_t *st = sel + (size_t)t * sel_stride;
                for (int i = 0; i < nsel[t]; i++)
                    memcpy(kbuf + (size_t)nk++ * D, ci_v4cmp_entry(c, cs, t, st[i]), (size_t)D * sizeof(float));
            } else {
                int vis = (p + 1) / c->ratio;
                if (!c->ent) {
                    memcpy(kbuf + (size_t)nk * D, ci_v4cmp_entry(c, cs, t, 0), (size_t)vis * D * sizeof(float));
                    nk += vis;
                } else
                    for (int i = 0; i < vis; i++)
                        memcpy(kbuf + (size_t)nk++ * D, ci_v4cmp_entry(c, cs, t, i), (size_t)D * sizeof(float));
            }
        }
        ci_mat K = { .data = kbuf, .dtype = CI_F32, .rows = nk, .cols = D };
        be->matmul(be, sc, q + (size_t)t * HD, n_heads, &K);
        head_ctx hc = { sinks, kbuf, sc, out + (size_t)t * HD, nk, D };
        ci_pool_run(be->pool, head_task, &hc, n_heads);
    }
    /* inverse rope on the outputs (angle -p) */
    int32_t np[256];
    for (int t0 = 0; t0 < n; t0 += 256) {
        const int k = n - t0 < 256 ? n - t0 : 256;
        for (int t = 0; t < k; t++) np[t] = -pos[t0 + t];
        be->rope(be, out + (size_t)t0 * HD, k, n_heads, D, D - rot_dim, rot_dim, np, inv_freq, mscale,
                 CI_ROPE_INTERLEAVED);
    }
}

void cpu_matmul_groups(ci_backend *be, float *y, const float *x, int n, int groups, const ci_mat *W, float *xg,
                       float *yg) {
    CI_FP_FLUSH_SCOPE();
    const int GI = (int)W[0].cols, OL = (int)W[0].rows;
    for (int g = 0; g < groups; g++) {
        for (int t = 0; t < n; t++)
            memcpy(xg + (size_t)t * GI, x + (size_t)t * groups * GI + (size_t)g * GI, (size_t)GI * sizeof(float));
        be->matmul(be, yg, xg, n, &W[g]);
        for (int t = 0; t < n; t++)
            memcpy(y + (size_t)t * groups * OL + (size_t)g * OL, yg + (size_t)t * OL, (size_t)OL * sizeof(float));
    }
}
