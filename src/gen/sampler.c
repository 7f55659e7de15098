/* sampler.c — see sampler.h. */
#include "sampler.h"
#include "../backend/backend.h"
#include "../core/status.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void ci_sampler_defaults(ci_sampler_opts *o) {
    memset(o, 0, sizeof *o);
    o->temperature = 0;
    o->top_p = 1;
    o->repeat_penalty = 1;
    o->seed = 0;
}

int smp_check(const ci_sampler_opts *o, char *err, size_t errlen) {
    if (!(o->temperature >= 0 && o->temperature <= 100)) return ci_err(err, errlen, "temperature must be in [0, 100], got %g", o->temperature);
    if (o->top_k < 0) return ci_err(err, errlen, "top-k must be >= 0, got %d", o->top_k);
    if (!(o->top_p > 0 && o->top_p <= 1)) return ci_err(err, errlen, "top-p must be in (0, 1], got %g", o->top_p);
    if (!(o->min_p >= 0 && o->min_p <= 1)) return ci_err(err, errlen, "min-p must be in [0, 1], got %g", o->min_p);
    if (!(o->repeat_penalty > 0 && o->repeat_penalty <= 100)) return ci_err(err, errlen, "repeat penalty must be in (0, 100], got %g", o->repeat_penalty);
    if (o->repeat_last_n < 0) return ci_err(err, errlen, "repeat-last-n must be >= 0, got %d", o->repeat_last_n);
    return 0;
}

int smp_init(smp_state *s, const ci_sampler_opts *o, int vocab) {
    memset(s, 0, sizeof *s);
    s->o = *o;
    s->rng = o->seed;
    s->vocab = vocab;
    s->p = malloc((size_t)vocab * sizeof *s->p);
    s->idx = malloc((size_t)vocab * sizeof *s->idx);
    s->tmp = malloc((size_t)vocab * 3 * sizeof *s->tmp);
    if (!s->p || !s->idx || !s->tmp) { smp_free(s); return -1; }
    return 0;
}

void smp_free(smp_state *s) {
    free(s->p);
    free(s->idx);
    free(s->tmp);
    s->p = NULL;
    s->idx = NULL;
    s->tmp = NULL;
}

/* A float's key in the order wanted, as an unsigned integer that sorts ascending: larger
 * values first (-0 as +0, so the two tie), NaN after everything. */
static inline uint32_t desc_key(float v) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    b = v == 0.0f ? 0u : b;                                  /* -0 as +0 */
    const uint32_t asc = b ^ ((uint32_t)((int32_t)b >> 31) | 0x80000000u);   /* ascending in v */
    return v != v ? UINT32_MAX : ~asc;                       /* descending in v, NaN last */
}

/* (key, index) pairs k0 / i0 [n], in ascending index order, sorted by key in three stable
 * passes of 11 bits (least significant first), so equal keys keep ascending indices; k1 / i1
 * [n] scratch. The result is in i0. */
static void radix_sort(uint32_t *k0, int *i0, uint32_t *k1, int *i1, int n) {
    uint32_t *ks = k0, *kd = k1;
    int *is = i0, *id = i1;
    for (int shift = 0; shift < 33; shift += 11) {
        int cnt[2048] = { 0 };
        for (int i = 0; i < n; i++) cnt[(ks[i] >> shift) & 2047]++;
        int at = 0;
        for (int d = 0; d < 2048; d++) { int c = cnt[d]; cnt[d] = at; at += c; }
        for (int i = 0; i < n; i++) {
            int o = cnt[(ks[i] >> shift) & 2047]++;
            kd[o] = ks[i];
            id[o] = is[i];
        }
        uint32_t *kt = ks; ks = kd; kd = kt;
        int *it = is; is = id; id = it;
    }
    if (is != i0) memcpy(i0, is, (size_t)n * sizeof *i0);   /* three passes: the result is in i1 */
}

void smp_order(const float *x, int n, int *idx, uint32_t *tmp) {
    for (int i = 0; i < n; i++) { tmp[i] = desc_key(x[i]); idx[i] = i; }
    radix_sort(tmp, idx, tmp + n, (int *)(tmp + 2 * (size_t)n), n);
}

void smp_order_top(const float *x, int n, int k, int *idx, uint32_t *tmp) {
    if (k <= 0 || k >= n) { smp_order(x, n, idx, tmp); return; }
    /* the top 11 bits' bucket that holds the k-th key: every key in it or before it is a
     * candidate (at least k of them), taken in index order and sorted as smp_order would */
    int cnt[2048] = { 0 };
    for (int i = 0; i < n; i++) { tmp[i] = desc_key(x[i]); cnt[tmp[i] >> 21]++; }
    int b = 0, below = 0;
    while (below + cnt[b] < k) below += cnt[b++];
    int m = 0;
    for (int i = 0; i < n; i++)
        if ((int)(tmp[i] >> 21) <= b) { tmp[m] = tmp[i]; idx[m] = i; m++; }   /* m <= i: in place */
    radix_sort(tmp, idx, tmp + n, (int *)(tmp + 2 * (size_t)n), m);
}

double smp_uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

int smp_argmax(const float *x, int n) { return ci_argmax_f32(x, n); }

/* top-k / top-p / min-p only narrow the candidates of a draw: at temperature 0 they change
 * nothing; the penalty rescales logits and can change the winner. */
int smp_is_greedy(const ci_sampler_opts *o) { return o->temperature <= 0 && o->repeat_penalty == 1.0f; }

int smp_sample(smp_state *s, float *logits, const int *history, int n_hist) {
    const int V = s->vocab;
    if (s->o.repeat_penalty != 1.0f && n_hist > 0) {
        int start = s->o.repeat_last_n > 0 && n_hist > s->o.repeat_last_n ? n_hist - s->o.repeat_last_n : 0;
        /* each distinct id penalised once: mark with a sign trick on the scratch */
        memset(s->idx, 0, (size_t)V * sizeof *s->idx);
        for (int i = start; i < n_hist; i++) {
            int t = history[i];
            if (t < 0 || t >= V || s->idx[t]) continue;
            s->idx[t] = 1;
            logits[t] = logits[t] > 0 ? logits[t] / s->o.repeat_penalty : logits[t] * s->o.repeat_penalty;
        }
    }
    if (s->o.temperature <= 0) return smp_argmax(logits, V);
    int n = V;
    for (int i = 0; i < V; i++) logits[i] /= s->o.temperature;
    /* candidates by logit, descending, ties by index (a radix sort: qsort with a comparison
     * callback took ~23 ms for 152k ids on a Zen 5 core, every sampled token) */
    if (s->o.top_k > 0 && s->o.top_k < V) smp_order_top(logits, V, s->o.top_k, s->idx, s->tmp);   /* the first top_k */
    else smp_order(logits, V, s->idx, s->tmp);
    if (s->o.top_k > 0 && s->o.top_k < n) n = s->o.top_k;
    float mx = logits[s->idx[0]];
    double sum = 0;
    for (int i = 0; i < n; i++) { s->p[i] = expf(logits[s->idx[i]] - mx); sum += s->p[i]; }
    for (int i = 0; i < n; i++) s->p[i] = (float)(s->p[i] / sum);
    if (s->o.top_p < 1.0f) {
        double c = 0;
        int keep = n;
        for (int i = 0; i < n; i++) { c += s->p[i]; if (c >= s->o.top_p) { keep = i + 1; break; } }
        n = keep;
    }
    if (s->o.min_p > 0) {
        float thr = s->o.min_p * s->p[0];
        int keep = 1;
        while (keep < n && s->p[keep] >= thr) keep++;
        n = keep;
    }
    sum = 0;
    for (int i = 0; i < n; i++) sum += s->p[i];
    double r = smp_uniform(&s->rng) * sum, c = 0;
    for (int i = 0; i < n; i++) { c += s->p[i]; if (r < c) return s->idx[i]; }
    return s->idx[n - 1];
}
