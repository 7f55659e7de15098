/* gated_attn.c — see gated_attn.h. */
#include "gated_attn.h"
#include <stdlib.h>
#include <string.h>

size_t ga_row_floats(const ga_layer *A, const ci_backend *be) { return 2 * (size_t)ci_kv_slots(be, A->a.n_kv * A->a.hd); }

int ga_bind(w_binder *b, ga_layer *A, const char *prefix, float norm_add) {
    return attn_bind(b, &A->a, A->hidden, 2, prefix, "o_proj", "q_norm", "k_norm", norm_add);
}
int ga_scratch_init(ci_backend *be, ga_scratch *s, const ga_layer *A, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    size_t n = (size_t)max_n, QD = (size_t)A->a.n_heads * A->a.hd, KD = (size_t)A->a.n_kv * A->a.hd, f = sizeof(float);
    s->qg = be->alloc(be, n * 2 * QD * f);
    s->q = be->alloc(be, n * QD * f);
    s->gate = be->alloc(be, n * QD * f);
    s->att = be->alloc(be, n * QD * f);
    s->k = be->alloc(be, n * KD * f);
    s->v = be->alloc(be, n * KD * f);
    if (!s->qg || !s->q || !s->gate || !s->att || !s->k || !s->v) {
        ga_scratch_free(be, s);
        return -1;
    }
    return 0;
}

void ga_scratch_free(ci_backend *be, ga_scratch *s) {
    float *bufs[] = { s->qg, s->q, s->gate, s->att, s->k, s->v };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) be->buf_free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

void ga_forward(ci_backend *be, const ga_layer *A, ga_scratch *s, const attn_cache *kvs, int n_caches,
                float *const *kv_tab, const ci_pages *pages, float *x, const float *norm_w, float eps, float *xn,
                float *tmp, const int32_t *pos, int keys, int n) {
    const int Hh = A->a.n_heads, hd = A->a.hd, QD = Hh * hd;
    const attn_bufs proj = { .q = s->qg, .k = s->k, .v = s->v, .att = s->att, .xn = xn, .pos = pos },
                    ab = { .q = s->q, .k = s->k, .v = s->v, .att = s->att, .xn = tmp, .pos = pos, .kv_tab = kv_tab,
                                 .pages = pages, .keys = keys };
    attn_project(be, &A->a, &proj, x, norm_w, eps, n);   /* qg [n, H, 2, hd], k / v [n, n_kv*hd] */
    be->split_halves(be, s->q, s->gate, s->qg, n * Hh, hd);
    attn_attend(be, &A->a, &ab, kvs, n_caches, n);
    be->sigmoid_mul(be, s->att, s->gate, (int64_t)n * QD);
    attn_output(be, &A->a, &ab, x, 1, n);                /* x += att·woᵀ, the product in tmp */
}
