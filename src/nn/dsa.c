/* dsa.c — see dsa.h. The MLA steps before and after the attention are the MLA layer's
 * (mla_project, mla_output in nn/mla.c); the indexer's keys, queries and weights are ops
 * here, the scores, selection and sparse attention the backend's dsa_attend. */
#include "dsa.h"
#include "place.h"
#include <string.h>

int dsa_scratch_init(ci_backend *be, dsa_scratch *s, const dsa_indexer *I, int max_n) {
    memset(s, 0, sizeof *s);
    size_t n = (size_t)max_n, f = sizeof(float);
    s->q = be->alloc(be, n * (size_t)I->n_heads * (size_t)I->head_dim * f);
    s->w = be->alloc(be, n * (size_t)I->n_heads * f);
    s->k = be->alloc(be, n * (size_t)I->head_dim * f);
    if (!s->q || !s->w || !s->k) { dsa_scratch_free(be, s); return -1; }
    return 0;
}

void dsa_scratch_free(ci_backend *be, dsa_scratch *s) {
    float *bufs[] = { s->q, s->w, s->k };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) be->buf_free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

int dsa_place(ci_backend *be, dsa_indexer *dst, const dsa_indexer *I) {
    *dst = *I;
    const float *w = NULL, *b = NULL;
    if (ci_place_mat(be, &dst->wq_b, &I->wq_b) || ci_place_mat(be, &dst->wk, &I->wk) ||
        ci_place_mat(be, &dst->weights_proj, &I->weights_proj) || ci_place_vec(be, &w, I->k_norm_w, I->head_dim) ||
        ci_place_vec(be, &b, I->k_norm_b, I->head_dim))
        return -1;
    dst->k_norm_w = (float *)w;
    dst->k_norm_b = (float *)b;
    return 0;
}

int dsa_select(const float *score, int L, int topk, int32_t *sel) { return ci_topk_positions(score, L, topk, sel); }

void dsa_attend(ci_backend *be, const mla_layer *A, const dsa_indexer *I, const float *inv_freq, float mscale,
                mla_scratch *ms, dsa_scratch *ds, float *lat_cache, float *key_cache, float *const *tab,
                const float *xn, const int32_t *pos, int n, int max_keys, const ci_pages *pages) {
    const int lat = A->kv_lora + A->rope, IH = I->n_heads, ID = I->head_dim;
    /* indexer keys of every row (dense or not: later queries score them): LayerNorm with
     * the reference's nn.LayerNorm(head_dim, eps=1e-6), not a config key, then rope */
    be->matmul(be, ds->k, xn, n, &I->wk);                                   /* [n, ID] */
    be->layernorm(be, ds->k, ds->k, I->k_norm_w, I->k_norm_b, n, ID, 1e-6);
    be->rope(be, ds->k, n, 1, ID, 0, I->rope_dim, pos, inv_freq, mscale, I->rope_style);
    be->kv_store_paged(be, lat_cache, lat_cache ? NULL : tab, 2, lat, ms->lat, lat, n, pos, pages);
    be->kv_store_paged(be, key_cache, lat_cache ? NULL : tab + 1, 2, ID, ds->k, ID, n, pos, pages);
    /* indexer queries and head weights (rows that attend densely do not read them) */
    be->matmul(be, ds->q, ms->qa, n, &I->wq_b);                             /* [n, IH·ID] */
    be->rope(be, ds->q, n, IH, ID, 0, I->rope_dim, pos, inv_freq, mscale, I->rope_style);
    be->matmul(be, ds->w, xn, n, &I->weights_proj);                         /* [n, IH] */
    be->dsa_attend(be, ms->olat, ms->qcat, lat_cache, key_cache, lat_cache ? NULL : tab, n, pos, max_keys,
                   A->n_heads, lat, A->scale, ds->q, ds->w, I->w_scale, IH, ID, I->topk, pages);
}
