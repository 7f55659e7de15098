/* compressor.c — see compressor.h. */
#include "compressor.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int width(const cmp_block *c) { return (1 + c->overlap) * c->d; }

int cmp_state_init(cmp_state *s, const cmp_block *c, int max_ctx) {
    memset(s, 0, sizeof *s);
    size_t w = (size_t)c->ratio * width(c);
    s->cap = max_ctx / c->ratio + 1;
    s->pend_kv = malloc(w * sizeof(float));
    s->pend_gate = malloc(w * sizeof(float));
    s->prev_kv = malloc((size_t)c->ratio * c->d * sizeof(float));
    s->prev_gate = malloc((size_t)c->ratio * c->d * sizeof(float));
    s->entries = malloc((size_t)s->cap * c->d * sizeof(float));
    if (!s->pend_kv || !s->pend_gate || !s->prev_kv || !s->prev_gate || !s->entries) { cmp_state_free(s); return -1; }
    return 0;
}

void cmp_state_free(cmp_state *s) {
    free(s->pend_kv); free(s->pend_gate); free(s->prev_kv); free(s->prev_gate); free(s->entries);
    memset(s, 0, sizeof *s);
}

void cmp_state_reset(cmp_state *s) {
    s->n = 0;
    s->has_prev = 0;
}

size_t cmp_state_bytes(const cmp_block *c, long long max_ctx) {
    size_t w = (size_t)c->ratio * width(c), prev = (size_t)c->ratio * c->d;
    return (2 * w + 2 * prev + (size_t)(max_ctx / c->ratio + 1) * c->d) * sizeof(float);
}

/* Closes window w (its tokens are in pend): appends its entry. */
static void emit(ci_backend *be, const cmp_block *c, cmp_state *s, int w, const rope_table *rt, float eps) {
    const int R = c->ratio, d = c->d, m = width(c);
    float *e = s->entries + (size_t)s->n * d;
    for (int ch = 0; ch < d; ch++) {
        /* slots: (overlap, when there is a previous window) its Ca values, then this window's
         * own series (Cb when overlapping) */
        const int own = c->overlap ? d + ch : ch;
        float mx = -INFINITY;
        if (c->overlap && s->has_prev)
            for (int k = 0; k < R; k++) mx = fmaxf(mx, s->prev_gate[(size_t)k * d + ch]);
        for (int k = 0; k < R; k++) mx = fmaxf(mx, s->pend_gate[(size_t)k * m + own]);
        double num = 0, den = 0;
        if (c->overlap && s->has_prev)
            for (int k = 0; k < R; k++) {
                double p = exp((double)s->prev_gate[(size_t)k * d + ch] - mx);
                num += p * s->prev_kv[(size_t)k * d + ch];
                den += p;
            }
        for (int k = 0; k < R; k++) {
            double p = exp((double)s->pend_gate[(size_t)k * m + own] - mx);
            num += p * s->pend_kv[(size_t)k * m + own];
            den += p;
        }
        e[ch] = (float)(num / den);
    }
    be->rmsnorm(be, e, e, c->norm, 1, d, eps);
    int32_t pos = w * R;
    be->rope(be, e, 1, 1, d, d - rt->rot_dim, rt->rot_dim, &pos, rt->inv_freq, rt->mscale, CI_ROPE_INTERLEAVED);
    s->n++;
    if (c->overlap) {   /* this window's Ca series feeds the next entry */
        for (int k = 0; k < R; k++) {
            memcpy(s->prev_kv + (size_t)k * d, s->pend_kv + (size_t)k * m, (size_t)d * sizeof(float));
            memcpy(s->prev_gate + (size_t)k * d, s->pend_gate + (size_t)k * m, (size_t)d * sizeof(float));
        }
        s->has_prev = 1;
    }
}

void cmp_project(ci_backend *be, const cmp_block *c, const float *xn, int n, float *pkv, float *pgate) {
    be->matmul(be, pkv, xn, n, &c->kv);
    be->matmul(be, pgate, xn, n, &c->gate);
}

void cmp_push(ci_backend *be, const cmp_block *c, cmp_state *s, const float *kv, const float *gate, int p,
              const rope_table *rt, float eps) {
    const int R = c->ratio, m = width(c), slot = p % R;
    memcpy(s->pend_kv + (size_t)slot * m, kv, (size_t)m * sizeof(float));
    float *g = s->pend_gate + (size_t)slot * m;
    const float *ape = c->ape + (size_t)slot * m;
    for (int i = 0; i < m; i++) g[i] = gate[i] + ape[i];
    if (slot == R - 1 && s->n < s->cap) emit(be, c, s, p / R, rt, eps);
}
