/* dsa.c — see dsa.h. The MLA steps before and after the attention are mla_forward's
 * (mla_project, mla_output in nn/mla.c); only the attention step differs. */
#include "dsa.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int dsa_scratch_init(dsa_scratch *s, const dsa_indexer *I, const mla_layer *A, int max_n, int max_ctx) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    s->max_ctx = max_ctx;
    size_t n = (size_t)max_n, ctx = (size_t)max_ctx, k = (size_t)(I->topk < max_ctx ? I->topk : max_ctx);
    s->q = malloc(n * (size_t)I->n_heads * (size_t)I->head_dim * sizeof(float));
    s->w = malloc(n * (size_t)I->n_heads * sizeof(float));
    s->dots = malloc((size_t)I->n_heads * ctx * sizeof(float));
    s->score = malloc(ctx * sizeof(float));
    s->sel = malloc(ctx * sizeof(int32_t));
    s->kv = malloc((k ? k : 1) * (size_t)(A->kv_lora + A->rope) * sizeof(float));
    if (!s->q || !s->w || !s->dots || !s->score || !s->sel || !s->kv) { dsa_scratch_free(s); return -1; }
    return 0;
}

void dsa_scratch_free(dsa_scratch *s) {
    free(s->q); free(s->w); free(s->dots); free(s->score); free(s->sel); free(s->kv);
    memset(s, 0, sizeof *s);
}

/* ---- top-k selection ---------------------------------------------------------------------- */

/* a ranks before b: higher score, then lower position (a strict total order: positions differ) */
static int ranks_before(const float *sc, int32_t a, int32_t b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); }

static int cmp_pos(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int dsa_select(const float *score, int L, int topk, int32_t *sel) {
    for (int i = 0; i < L; i++) sel[i] = i;
    if (L <= topk) return L;
    if (topk <= 0) return 0;
    /* Quickselect on sel[] by ranks_before so that sel[0..topk) are the topk best. NaN scores
     * were turned into -inf by the caller, so the order is total. */
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

/* ---- the indexer ---------------------------------------------------------------------------- */

/* k rows [n, D]: LayerNorm with weight and bias, in place (mean and variance in double);
 * eps is the reference's nn.LayerNorm(head_dim, eps=1e-6), not a config key. */
static void layer_norm(float *x, int n, int D, const float *w, const float *b) {
    const double eps = 1e-6;
    for (int t = 0; t < n; t++) {
        float *r = x + (size_t)t * D;
        double mean = 0, var = 0;
        for (int i = 0; i < D; i++) mean += r[i];
        mean /= D;
        for (int i = 0; i < D; i++) var += (r[i] - mean) * (r[i] - mean);
        var /= D;
        double inv = 1.0 / sqrt(var + eps);
        for (int i = 0; i < D; i++) r[i] = (float)((r[i] - mean) * inv) * w[i] + b[i];
    }
}

/* Index scores of one query (indexer query q [IH, ID], head weights w [IH]) against keys
 * 0..L-1 of the key cache: score[s] = Σ_h w[h] · relu(q[h] · k[s]). */
static void index_scores(ci_backend *be, const dsa_indexer *I, dsa_scratch *ds, const float *q, const float *w,
                         const float *key_cache, int L) {
    ci_mat K = { .data = key_cache, .dtype = CI_F32, .rows = L, .cols = I->head_dim };
    be->matmul(be, ds->dots, q, I->n_heads, &K);                       /* [IH, L] */
    for (int s = 0; s < L; s++) ds->score[s] = 0.0f;
    for (int h = 0; h < I->n_heads; h++) {
        const float *d = ds->dots + (size_t)h * L;
        float wh = w[h];
        for (int s = 0; s < L; s++) ds->score[s] += wh * (d[s] > 0.0f ? d[s] : 0.0f);
    }
    for (int s = 0; s < L; s++)
        if (isnan(ds->score[s])) ds->score[s] = -INFINITY;
}

/* ---- DSA attention ---------------------------------------------------------------------------- */

void dsa_forward(ci_backend *be, const mla_layer *A, const dsa_indexer *I, const rope_table *rt, mla_scratch *ms,
                 dsa_scratch *ds, float *lat_cache, float *key_cache, float *out, const float *xn, const int32_t *pos,
                 int n, int pos0, float eps) {
    const int Hh = A->n_heads, lat = A->kv_lora + A->rope;
    const int IH = I->n_heads, ID = I->head_dim;
    /* MLA queries and this chunk's latent rows, into the latent cache; ms->qa [n, q_lora] is
     * also the indexer's input */
    mla_project(be, A, rt, ms, lat_cache + (size_t)pos0 * lat, xn, pos, n, eps);

    /* indexer: keys into the key cache (every token, dense or not: later queries score them),
     * queries and head weights for this chunk */
    float *krows = key_cache + (size_t)pos0 * ID;
    be->matmul(be, krows, xn, n, &I->wk);                                   /* [n, ID] */
    layer_norm(krows, n, ID, I->k_norm_w, I->k_norm_b);
    be->rope(be, krows, n, 1, ID, 0, I->rope_dim, pos, rt->inv_freq, rt->mscale, I->rope_style);
    /* queries whose causal context fits in topk (a prefix of the chunk) attend densely */
    int n_dense = I->topk - pos0;
    if (n_dense > n) n_dense = n;
    if (n_dense < 0) n_dense = 0;
    if (n_dense > 0) be->attention(be, ms->olat, ms->qcat, lat_cache, lat_cache, n_dense, pos0, Hh, 1, lat, lat, A->scale);
    if (n_dense < n) {
        be->matmul(be, ds->q, ms->qa, n, &I->wq_b);                          /* [n, IH·ID] */
        be->rope(be, ds->q, n, IH, ID, 0, I->rope_dim, pos, rt->inv_freq, rt->mscale, I->rope_style);
        be->matmul(be, ds->w, xn, n, &I->weights_proj);                      /* [n, IH] */
        for (size_t i = 0; i < (size_t)n * IH; i++) ds->w[i] *= I->w_scale;
        for (int t = n_dense; t < n; t++) {
            int L = pos0 + t + 1;
            index_scores(be, I, ds, ds->q + (size_t)t * IH * ID, ds->w + (size_t)t * IH, key_cache, L);
            int k = dsa_select(ds->score, L, I->topk, ds->sel);
            for (int j = 0; j < k; j++)
                memcpy(ds->kv + (size_t)j * lat, lat_cache + (size_t)ds->sel[j] * lat, (size_t)lat * sizeof(float));
            /* one query at position k-1 over the k gathered rows: all of them are visible */
            be->attention(be, ms->olat + (size_t)t * Hh * lat, ms->qcat + (size_t)t * Hh * lat, ds->kv, ds->kv, 1, k - 1,
                          Hh, 1, lat, lat, A->scale);
        }
    }

    mla_output(be, A, ms, out, n);
}
