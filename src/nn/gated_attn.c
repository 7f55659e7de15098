/* gated_attn.c — see gated_attn.h. */
#include "gated_attn.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t ga_row_floats(const ga_layer *A) { return 2 * (size_t)A->n_kv * (size_t)A->hd; }

int ga_bind(w_binder *b, ga_layer *A, const char *prefix, float norm_add) {
    const int64_t H = A->hidden, QD = (int64_t)A->n_heads * A->hd, KD = (int64_t)A->n_kv * A->hd;
    w_mat(b, &A->q, W_REQUIRED, 2 * QD, H, "%s.q_proj", prefix);
    w_mat(b, &A->k, W_REQUIRED, KD, H, "%s.k_proj", prefix);
    w_mat(b, &A->v, W_REQUIRED, KD, H, "%s.v_proj", prefix);
    w_mat(b, &A->o, W_REQUIRED, H, QD, "%s.o_proj", prefix);
    w_vec(b, &A->q_norm, W_REQUIRED, A->hd, norm_add, W_KIND_NORM, "%s.q_norm.weight", prefix);
    w_vec(b, &A->k_norm, W_REQUIRED, A->hd, norm_add, W_KIND_NORM, "%s.k_norm.weight", prefix);
    return b->failed ? -1 : 1;
}

int ga_scratch_init(ga_scratch *s, const ga_layer *A, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    size_t n = (size_t)max_n, QD = (size_t)A->n_heads * A->hd, KD = (size_t)A->n_kv * A->hd;
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

void ga_forward(ci_backend *be, const ga_layer *A, const rope_table *rope, ga_scratch *s, float *kv, float *out,
                const float *x, const int32_t *pos, int n, int pos0) {
    const int Hh = A->n_heads, KV = A->n_kv, hd = A->hd, QD = Hh * hd, KD = KV * hd, RW = 2 * KD;
    be->matmul(be, s->qg, x, n, &A->q);                   /* [n, H, 2, hd] */
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hh; h++) {
            const float *src = s->qg + ((size_t)t * Hh + h) * 2 * hd;
            memcpy(s->q + ((size_t)t * Hh + h) * hd, src, (size_t)hd * sizeof(float));
            memcpy(s->gate + ((size_t)t * Hh + h) * hd, src + hd, (size_t)hd * sizeof(float));
        }
    be->matmul(be, s->k, x, n, &A->k);
    be->matmul(be, s->v, x, n, &A->v);
    be->rmsnorm(be, s->q, s->q, A->q_norm, n * Hh, hd, A->eps);
    be->rmsnorm(be, s->k, s->k, A->k_norm, n * KV, hd, A->eps);
    be->rope(be, s->q, n, Hh, hd, 0, rope->rot_dim, pos, rope->inv_freq, rope->mscale, CI_ROPE_NEOX);
    be->rope(be, s->k, n, KV, hd, 0, rope->rot_dim, pos, rope->inv_freq, rope->mscale, CI_ROPE_NEOX);
    for (int t = 0; t < n; t++) {
        float *row = kv + (size_t)(pos0 + t) * RW;
        memcpy(row, s->k + (size_t)t * KD, (size_t)KD * sizeof(float));
        memcpy(row + KD, s->v + (size_t)t * KD, (size_t)KD * sizeof(float));
    }
    be->attention(be, s->att, s->q, kv, kv + KD, n, pos0, Hh, KV, hd, RW, A->scale);
    for (size_t i = 0; i < (size_t)n * QD; i++) s->att[i] *= 1.0f / (1.0f + expf(-s->gate[i]));
    be->matmul(be, out, s->att, n, &A->o);
}
