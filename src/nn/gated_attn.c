/* gated_attn.c — see gated_attn.h. */
#include "gated_attn.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t ga_row_floats(const ga_layer *A) { return 2 * (size_t)A->a.n_kv * (size_t)A->a.hd; }

int ga_bind(w_binder *b, ga_layer *A, const char *prefix, float norm_add) {
    return attn_bind(b, &A->a, A->hidden, 2, prefix, "o_proj", "q_norm", "k_norm", norm_add);
}
int ga_scratch_init(ga_scratch *s, const ga_layer *A, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    size_t n = (size_t)max_n, QD = (size_t)A->a.n_heads * A->a.hd, KD = (size_t)A->a.n_kv * A->a.hd;
    s->qg = malloc(n * 2 * QD * sizeof(float));
    s->q = malloc(n * QD * sizeof(float));
    s->gate = malloc(n * QD * sizeof(float));
    s->att = malloc(n * QD * sizeof(float));
    s->k = malloc(n * KD * sizeof(float));
    s->v = malloc(n * KD * sizeof(float));
    if (!s->qg || !s->q || !s->gate || !s->att || !s->k || !s->v) {
        ga_scratch_free(s);
        return -1;
    }
    return 0;
}

void ga_scratch_free(ga_scratch *s) {
    free(s->qg); free(s->q); free(s->gate); free(s->att); free(s->k); free(s->v);
    memset(s, 0, sizeof *s);
}

void ga_forward(ci_backend *be, const ga_layer *A, ga_scratch *s, const attn_cache *kvs, int n_caches, float *out,
                const float *x, const int32_t *pos, int n) {
    const int Hh = A->a.n_heads, hd = A->a.hd, QD = Hh * hd;
    const attn_bufs proj = { .q = s->qg, .k = s->k, .v = s->v, .att = s->att, .pos = pos },
                    ab = { .q = s->q, .k = s->k, .v = s->v, .att = s->att, .pos = pos };
    attn_project(be, &A->a, &proj, x, NULL, 0, n);       /* qg [n, H, 2, hd], k / v [n, n_kv*hd] */
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hh; h++) {
            const float *src = s->qg + ((size_t)t * Hh + h) * 2 * hd;
            memcpy(s->q + ((size_t)t * Hh + h) * hd, src, (size_t)hd * sizeof(float));
            memcpy(s->gate + ((size_t)t * Hh + h) * hd, src + hd, (size_t)hd * sizeof(float));
        }
    attn_attend(be, &A->a, &ab, kvs, n_caches, n);
    for (size_t i = 0; i < (size_t)n * QD; i++) s->att[i] *= 1.0f / (1.0f + expf(-s->gate[i]));
    attn_output(be, &A->a, &ab, out, 0, n);
}
