/* mla_cpu.c — the CPU backend's MLA / DSA ops (backend.h), in host memory.
 *
 * Each op is the arithmetic nn/mla.c and nn/dsa.c did between ops before these existed, in
 * the same order and through the same backend kernels (matmul, matmul_xw, rmsnorm,
 * attention_pos), so the logits of the DeepSeek families keep their bits: per-head gathers
 * into a scratch row block, one matmul per head over all rows, scatter back; the index
 * scores as one matmul of the row's indexer queries against the key cache, then the
 * relu-weighted sum over heads; the kept latent rows gathered in position order and one
 * causal attention call over them. Scratch grows on demand and lives with the backend
 * (cpu_mla_slot); an allocation failure makes the backend's status sticky. */
#include "cpu_kernels.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_IN = 0, T_OUT, T_DOTS, T_SCORE, T_SEL, T_KV, T_KEYS, T_COUNT };

typedef struct {
    void *buf[T_COUNT];
    size_t cap[T_COUNT];
} mla_tmp;

void cpu_mla_tmp_free(void *tmp) {
    mla_tmp *t = tmp;
    if (!t) return;
    for (int i = 0; i < T_COUNT; i++) free(t->buf[i]);
    free(t);
}

/* Scratch buffer `which` of at least `bytes`; NULL (and the backend failed) when out of memory. */
static void *tmp_get(ci_backend *be, int which, size_t bytes) {
    void **slot = cpu_mla_slot(be);
    mla_tmp *t = *slot;
    if (!t && !(t = *slot = calloc(1, sizeof *t))) goto oom;
    if (bytes <= t->cap[which]) return t->buf[which];
    void *p = malloc(bytes ? bytes : 1);
    if (!p) goto oom;
    free(t->buf[which]);
    t->buf[which] = p;
    t->cap[which] = bytes;
    return p;
oom:
    cpu_fail(be, "cpu: out of memory for the MLA / DSA scratch");
    return NULL;
}

void cpu_rmsnorm_strided(ci_backend *be, float *out, const float *x, const float *w, int n, int dim, int stride,
                         float eps) {
    CI_FP_FLUSH_SCOPE();
    for (int t = 0; t < n; t++) be->rmsnorm(be, out + (size_t)t * stride, x + (size_t)t * stride, w, 1, dim, eps);
}

void cpu_mla_rope(ci_backend *be, float *lat, float *q, const float *kv_norm, float eps, int n, int n_heads, int nope,
                  int rope, int kv_lora, const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style) {
    CI_FP_FLUSH_SCOPE();
    const int latw = kv_lora + rope;
    cpu_rmsnorm_strided(be, lat, lat, kv_norm, n, kv_lora, latw, eps);
    be->rope(be, lat, n, 1, latw, kv_lora, rope, pos, inv_freq, mscale, style);
    be->rope(be, q, n, n_heads, nope + rope, nope, rope, pos, inv_freq, mscale, style);
}

void cpu_head_norm_rope(ci_backend *be, float *x, int n, int n_heads, int head_dim, const float *w, float eps,
                        int rot_offset, int rot_dim, const int32_t *pos, const float *inv_freq, float mscale,
                        ci_rope_style style) {
    CI_FP_FLUSH_SCOPE();
    be->rmsnorm(be, x, x, w, n * n_heads, head_dim, eps);
    be->rope(be, x, n, n_heads, head_dim, rot_offset, rot_dim, pos, inv_freq, mscale, style);
}

void cpu_layernorm(ci_backend *be, float *out, const float *x, const float *w, const float *b, int n, int dim,
                   double eps) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int t = 0; t < n; t++) {
        const float *r = x + (size_t)t * dim;
        float *o = out + (size_t)t * dim;
        double mean = 0, var = 0;
        for (int i = 0; i < dim; i++) mean += r[i];
        mean /= dim;
        for (int i = 0; i < dim; i++) var += (r[i] - mean) * (r[i] - mean);
        var /= dim;
        double inv = 1.0 / sqrt(var + eps);
        for (int i = 0; i < dim; i++) o[i] = (float)((r[i] - mean) * inv) * w[i] + b[i];
    }
}

/* Query rows [t0, t0 + k) of head h: gathered into tin, multiplied by the head's W_UK (matmul_xw) into
 * tout, scattered with the rope part into qcat. The serial loop and the pool tasks below both run it,
 * so the same bits either way (a row's matmul_xw does not depend on the other rows). */
typedef struct {
    ci_backend *be;
    float *qcat;
    const float *q;
    int n, n_heads, nope, rope, kv_lora;
    const ci_mat *w_uk;
} absorb_ctx;

static void absorb_rows(const absorb_ctx *a, int h, int t0, int k, float *tin, float *tout) {
    const int qd = a->nope + a->rope, lat = a->kv_lora + a->rope;
    for (int t = 0; t < k; t++)
        memcpy(tin + (size_t)t * a->nope, a->q + ((size_t)(t0 + t) * a->n_heads + h) * qd, (size_t)a->nope * sizeof(float));
    a->be->matmul_xw(a->be, tout, tin, k, &a->w_uk[h]);                     /* [k, kv_lora] */
    for (int t = 0; t < k; t++) {
        float *dst = a->qcat + ((size_t)(t0 + t) * a->n_heads + h) * lat;
        memcpy(dst, tout + (size_t)t * a->kv_lora, (size_t)a->kv_lora * sizeof(float));
        memcpy(dst + a->kv_lora, a->q + ((size_t)(t0 + t) * a->n_heads + h) * qd + a->nope, (size_t)a->rope * sizeof(float));
    }
}

/* One head as a pool task: its rows a block at a time through a stack buffer. */
enum { ABSORB_BUF = 16384 };   /* floats: a block's nope + kv_lora columns (64 KiB of the worker's stack) */
static void absorb_head(void *c, int h) {
    const absorb_ctx *a = c;
    const int tb = ABSORB_BUF / (a->nope + a->kv_lora);
    float buf[ABSORB_BUF];
    for (int t0 = 0; t0 < a->n; t0 += tb) {
        const int k = a->n - t0 < tb ? a->n - t0 : tb;
        absorb_rows(a, h, t0, k, buf, buf + (size_t)k * a->nope);
    }
}

/* The heads side by side on the pool (MLA's absorbed queries ran on the caller alone: ~8% of a two-thread
 * DeepSeek-V2-Lite-dims prefill), unless a head's W is stored transposed (quantized: matmul_xw then
 * calls the pooled matmul, which a pool task must not), a block would not fit the task's buffer, or the pool
 * is one thread (the blocks would only convert each head's W again): then a head after another, all rows
 * at once through the backend's scratch. */
void cpu_mla_absorb_q(ci_backend *be, float *qcat, const float *q, int n, int n_heads, int nope, int rope, int kv_lora,
                      const ci_mat *w_uk) {
    CI_FP_FLUSH_SCOPE();
    const absorb_ctx a = { be, qcat, q, n, n_heads, nope, rope, kv_lora, w_uk };
    const int stored_t = w_uk[0].dtype == CI_U32 && ((const ci_qdesc *)w_uk[0].scale)->stored_t;
    if (be->pool && ci_pool_size(be->pool) > 1 && n_heads > 1 && !stored_t && nope + kv_lora <= ABSORB_BUF &&
        !cpu_failed(be)) {
        ci_pool_run(be->pool, absorb_head, (void *)&a, n_heads);
        return;
    }
    float *tin = tmp_get(be, T_IN, (size_t)n * nope * sizeof(float));
    float *tout = tmp_get(be, T_OUT, (size_t)n * kv_lora * sizeof(float));
    if (!tin || !tout || cpu_failed(be)) return;
    for (int h = 0; h < n_heads; h++) absorb_rows(&a, h, 0, n, tin, tout);
}

void cpu_mla_out_heads(ci_backend *be, float *o, const float *olat, int n, int n_heads, int kv_lora, int lat, int v,
                       const ci_mat *w_uv) {
    CI_FP_FLUSH_SCOPE();
    float *tin = tmp_get(be, T_IN, (size_t)n * kv_lora * sizeof(float));
    float *tout = tmp_get(be, T_OUT, (size_t)n * v * sizeof(float));
    if (!tin || !tout || cpu_failed(be)) return;
    for (int h = 0; h < n_heads; h++) {
        for (int t = 0; t < n; t++)
            memcpy(tin + (size_t)t * kv_lora, olat + ((size_t)t * n_heads + h) * lat, (size_t)kv_lora * sizeof(float));
        be->matmul(be, tout, tin, n, &w_uv[h]);                             /* [n, v] */
        for (int t = 0; t < n; t++)
            memcpy(o + ((size_t)t * n_heads + h) * v, tout + (size_t)t * v, (size_t)v * sizeof(float));
    }
}

/* The row of position p of query row t: through the pages when given (backend.h). */
static inline int64_t lat_row(const ci_pages *pg, int t, int64_t p) { return pg ? ci_page_row(pg, t, p) : p; }

void cpu_kv_store_paged(ci_backend *be, float *cache, float *const *tab, int tab_step, int stride, const float *src,
                        int width, int n, const int32_t *pos, const ci_pages *pages) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int t = 0; t < n; t++) {
        float *c = tab ? tab[(size_t)t * tab_step] : cache;
        memcpy(c + lat_row(pages, t, pos[t]) * stride, src + (size_t)t * width, (size_t)width * sizeof(float));
    }
}

void cpu_mla_attend(ci_backend *be, float *out, const float *qcat, const float *cache, float *const *tab, int tab_step,
                    int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale, const ci_pages *pages) {
    CI_FP_FLUSH_SCOPE();
    (void)max_keys;
    if (!tab) {
        cpu_attention_paged(be, out, qcat, cache, cache, n, pos, n_heads, 1, lat, lat, scale, pages, 0);
        return;
    }
    const size_t QD = (size_t)n_heads * lat;
    for (int t = 0; t < n; t++) {
        const float *c = tab[(size_t)t * tab_step];
        cpu_attention_paged(be, out + t * QD, qcat + t * QD, c, c, 1, pos + t, n_heads, 1, lat, lat, scale, pages, t);
    }
}

/* ---- DSA ----------------------------------------------------------------------------------- */

/* a ranks before b: higher score, then lower position (a strict total order: positions differ) */
static int ranks_before(const float *sc, int32_t a, int32_t b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); }

static int cmp_pos(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int ci_topk_positions(const float *score, int L, int topk, int32_t *sel) {
    for (int i = 0; i < L; i++) sel[i] = i;
    if (L <= topk) return L;
    if (topk <= 0) return 0;
    /* Quickselect on sel[] by ranks_before so that sel[0..topk) are the topk best. */
    int lo = 0, hi = L - 1, kth = topk - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        /* median of three as the pivot, moved to hi */
        if (ranks_before(score, sel[mid], sel[lo])) { int32_t t = sel[mid]; sel[mid] = sel[lo]; sel[lo] = t; }
        if (ranks_before(score, sel[hi], sel[lo])) { int32_t t = sel[hi]; sel[hi] = sel[lo]; sel[lo] = t; }
        if (ranks_before(score, sel[mid], sel[hi])) { int32_t t = sel[mid]; sel[mid] = sel[hi]; sel[hi] = t; }
        int32_t piv = sel[hi];
        int st = lo;
        for (int i = lo; i < hi; i++)
            if (ranks_before(score, sel[i], piv)) { int32_t t = sel[i]; sel[i] = sel[st]; sel[st] = t; st++; }
        sel[hi] = sel[st];
        sel[st] = piv;
        if (st == kth) break;
        if (st < kth) lo = st + 1;
        else hi = st - 1;
    }
    qsort(sel, (size_t)topk, sizeof *sel, cmp_pos);
    return topk;
}

/* One sparse row: index scores of keys 0..L-1, the topk kept, their latent rows gathered in
 * position order and one query at position k - 1 over them (all gathered rows visible). The
 * scratch is sized by cap (>= L: the op's max_keys), so a decode that goes on allocates it
 * once, not a step longer each step. Paged caches (pg, the row's table row pg_row): the key
 * rows are gathered in position order first, so the scores are one matmul as unpaged. */
static void sparse_row(ci_backend *be, float *out, const float *qcat, const float *lc, const float *kc, int L, int cap,
                       int n_heads, int lat, float scale, const float *iq, const float *iw, float w_scale, int ih,
                       int id, int topk, const ci_pages *pg, int pg_row) {
    if (cap < L) cap = L;
    const int keep_cap = topk < cap ? topk : cap;
    float *dots = tmp_get(be, T_DOTS, (size_t)ih * cap * sizeof(float));
    float *score = tmp_get(be, T_SCORE, (size_t)cap * sizeof(float));
    int32_t *sel = tmp_get(be, T_SEL, (size_t)cap * sizeof(int32_t));
    float *kv = tmp_get(be, T_KV, (size_t)(keep_cap > 0 ? keep_cap : 1) * lat * sizeof(float));
    float *keys = pg ? tmp_get(be, T_KEYS, (size_t)cap * id * sizeof(float)) : NULL;
    if (!dots || !score || !sel || !kv || (pg && !keys) || cpu_failed(be)) return;
    if (pg) {   /* whole pages at a time: their rows are consecutive */
        const int blk = 1 << pg->blk_log2;
        for (int s = 0; s < L; s += blk) {
            const int run = L - s < blk ? L - s : blk;
            memcpy(keys + (size_t)s * id, kc + ci_page_row(pg, pg_row, s) * id, (size_t)run * id * sizeof(float));
        }
        kc = keys;
    }
    ci_mat K = { .data = kc, .dtype = CI_F32, .rows = L, .cols = id };
    be->matmul(be, dots, iq, ih, &K);                                       /* [ih, L] */
    for (int s = 0; s < L; s++) score[s] = 0.0f;
    for (int h = 0; h < ih; h++) {
        const float *d = dots + (size_t)h * L;
        float wh = iw[h] * w_scale;
        for (int s = 0; s < L; s++) score[s] += wh * (d[s] > 0.0f ? d[s] : 0.0f);
    }
    for (int s = 0; s < L; s++)
        if (isnan(score[s])) score[s] = -INFINITY;
    int k = ci_topk_positions(score, L, topk, sel);
    for (int j = 0; j < k; j++)
        memcpy(kv + (size_t)j * lat, lc + lat_row(pg, pg_row, sel[j]) * lat, (size_t)lat * sizeof(float));
    be->attention(be, out, qcat, kv, kv, 1, k - 1, n_heads, 1, lat, lat, scale);
}

void cpu_dsa_attend(ci_backend *be, float *out, const float *qcat, const float *lat_cache, const float *key_cache,
                    float *const *tab, int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale,
                    const float *iq, const float *iw, float w_scale, int ih, int id, int topk, const ci_pages *pages) {
    CI_FP_FLUSH_SCOPE();
    const size_t QD = (size_t)n_heads * lat;
    for (int t = 0; t < n; t++) {
        const float *lc = tab ? tab[2 * (size_t)t] : lat_cache, *kc = tab ? tab[2 * (size_t)t + 1] : key_cache;
        if (pos[t] + 1 <= topk) {
            /* dense: this row and the dense rows after it that share its cache, in one call */
            int run = 1;
            while (!tab && t + run < n && pos[t + run] + 1 <= topk) run++;
            cpu_attention_paged(be, out + t * QD, qcat + t * QD, lc, lc, run, pos + t, n_heads, 1, lat, lat, scale,
                                pages, t);
            t += run - 1;
            continue;
        }
        sparse_row(be, out + t * QD, qcat + t * QD, lc, kc, pos[t] + 1, max_keys, n_heads, lat, scale,
                   iq + (size_t)t * ih * id, iw + (size_t)t * ih, w_scale, ih, id, topk, pages, t);
    }
}
