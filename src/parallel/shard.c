/* shard.c — see shard.h. */
#include "shard.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

int shd_split(int64_t n, int64_t unit, int parts, int rank, shd_range *r) {
    if (n < 0 || unit < 1 || parts < 1 || rank < 0 || rank >= parts || n % unit || (n / unit) % parts) return -1;
    const int64_t per = n / parts;
    r->lo = per * rank;
    r->hi = r->lo + per;
    return 0;
}

int shd_gqa(int n_heads, int n_kv, int tp, int rank, shd_range *q, shd_range *kv, const char *what, char *err,
            size_t errlen) {
    if (n_kv < 1 || n_heads % n_kv || shd_split(n_heads, 1, tp, rank, q))
        return ci_err(err, errlen, "%s: %d attention heads do not split over %d ranks (the ranks must divide them)",
                      what, n_heads, tp);
    if (n_kv % tp == 0) return shd_split(n_kv, 1, tp, rank, kv);
    if (tp % n_kv)
        return ci_err(err, errlen, "%s: %d key/value heads do not split over %d ranks (one must divide the other)",
                      what, n_kv, tp);
    const int64_t g = n_heads / n_kv;   /* queries per key head: a rank's all read the same one */
    kv->lo = q->lo / g;
    kv->hi = kv->lo + 1;
    return 0;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

int64_t shd_unit(const ci_mat *W, int cols, int64_t unit) {
    int64_t q = 1;
    if (cols && W->dtype == CI_F8_E4M3 && W->scale && W->block > 0) q = W->block;
    if (cols && W->dtype == CI_U32 && W->scale) q = ((const ci_qdesc *)W->scale)->group;
    return unit / gcd64(unit, q) * q;
}

void shd_rows(const ci_mat *W0, int64_t lo, int64_t hi, ci_mat *out) {
    const ci_mat w = *W0, *W = &w;   /* out may be W0 */
    *out = w;
    out->rows = hi - lo;
    if (!W->data) return;
    size_t row_bytes = W->dtype == CI_U32 ? (size_t)W->cols * (size_t)((const ci_qdesc *)W->scale)->bits / 8
                                          : (size_t)W->cols * ci_dtype_size(W->dtype);
    out->data = (const char *)W->data + (size_t)lo * row_bytes;
    if (W->dtype == CI_U32 || (W->dtype == CI_F8_E4M3 && W->scale)) out->scale_row0 = W->scale_row0 + lo;
}

void shd_kept_free(shd_kept *k) {
    for (int i = 0; i < k->n; i++) free(k->p[i]);
    free(k->p);
    memset(k, 0, sizeof *k);
}

void *shd_kept_alloc(shd_kept *k, size_t bytes) {
    if (k->n == k->cap) {
        int cap = k->cap ? 2 * k->cap : 16;
        void **p = realloc(k->p, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        k->p = p;
        k->cap = cap;
    }
    void *b = malloc(bytes ? bytes : 1);
    if (b) k->p[k->n++] = b;
    return b;
}

int shd_cols(const ci_mat *W0, int64_t lo, int64_t hi, ci_mat *out, shd_kept *keep, const char *what, char *err,
             size_t errlen) {
    const ci_mat w0 = *W0, *W = &w0;   /* out may be W0 */
    *out = w0;
    if (W->dtype == CI_U32)
        return ci_err(err, errlen, "%s: MLX- or FP4-quantized columns do not split across ranks yet", what);
    const int64_t u = shd_unit(W, 1, 1);
    if (lo < 0 || hi > W->cols || lo >= hi || lo % u || (hi % u && hi != W->cols))
        return ci_err(err, errlen, "%s: columns [%lld, %lld) of %lld do not start and end on its %lld-column blocks",
                      what, (long long)lo, (long long)hi, (long long)W->cols, (long long)u);
    out->cols = hi - lo;
    if (!W->data) return 0;
    const size_t es = ci_dtype_size(W->dtype), w = (size_t)(hi - lo) * es;
    char *d = shd_kept_alloc(keep, (size_t)W->rows * w);
    if (!d) return ci_err(err, errlen, "%s: out of memory for a rank's columns", what);
    for (int64_t r = 0; r < W->rows; r++)
        memcpy(d + (size_t)r * w, (const char *)W->data + ((size_t)r * (size_t)W->cols + (size_t)lo) * es, w);
    out->data = d;
    if (W->dtype == CI_F8_E4M3 && W->scale && W->block > 0) {
        /* every grid row the view reaches (scale_row0 kept), the blocks of [lo, hi) */
        const int64_t B = W->block, gc = (W->cols + B - 1) / B, c0 = lo / B, c1 = (hi + B - 1) / B;
        const int64_t gr = (W->scale_row0 + W->rows + B - 1) / B;
        const size_t ss = ci_dtype_size(W->scale_dtype), sw = (size_t)(c1 - c0) * ss;
        char *s = shd_kept_alloc(keep, (size_t)gr * sw);
        if (!s) return ci_err(err, errlen, "%s: out of memory for a rank's columns", what);
        for (int64_t r = 0; r < gr; r++)
            memcpy(s + (size_t)r * sw, (const char *)W->scale + ((size_t)r * (size_t)gc + (size_t)c0) * ss, sw);
        out->scale = s;
    }
    return 0;
}

int shd_mlp(ci_mat *wg, ci_mat *wu, ci_mat *wd, int *inter, const shd_ctx *t, const char *what, char *err,
            size_t errlen) {
    const int W = t->world, R = t->rank;
    shd_kept *keep = t->keep;
    shd_range f;
    if (shd_split(*inter, shd_unit(wd, 1, 1), W, R, &f))
        return ci_err(err, errlen, "%s: intermediate width %d does not split into whole %lld-column blocks over %d ranks",
                      what, *inter, (long long)shd_unit(wd, 1, 1), W);
    if (wg && wg->rows) shd_rows(wg, f.lo, f.hi, wg);
    shd_rows(wu, f.lo, f.hi, wu);
    if (shd_cols(wd, f.lo, f.hi, wd, keep, what, err, errlen)) return -1;
    *inter = (int)(f.hi - f.lo);
    return 0;
}

void shd_head(ci_mat *head, int64_t vocab, const shd_ctx *t) {
    if (!shd_head_split(vocab, t->world)) return;
    const int64_t per = vocab / t->world;
    shd_rows(head, per * t->rank, per * (t->rank + 1), head);
}

int shd_rows_gather(const ci_mat *W, const shd_range *segs, int n, ci_mat *out, shd_kept *keep, const char *what,
                    char *err, size_t errlen) {
    const ci_mat w0 = *W;   /* out may be W */
    if (w0.dtype == CI_U32)
        return ci_err(err, errlen, "%s: MLX- or FP4-quantized rows do not gather across ranks yet", what);
    const int fp8 = w0.dtype == CI_F8_E4M3 && w0.scale && w0.block > 0;
    const int64_t B = fp8 ? w0.block : 1;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        if (segs[i].lo < 0 || segs[i].hi > w0.rows || segs[i].lo > segs[i].hi ||
            (fp8 && ((w0.scale_row0 + segs[i].lo) % B ||   /* a partial block only at the matrix's end, last */
                     ((segs[i].hi - segs[i].lo) % B && (segs[i].hi != w0.rows || i != n - 1)))))
            return ci_err(err, errlen, "%s: rows [%lld, %lld) of %lld do not start and end on its %lld-row blocks", what,
                          (long long)segs[i].lo, (long long)segs[i].hi, (long long)w0.rows, (long long)B);
        rows += segs[i].hi - segs[i].lo;
    }
    *out = w0;
    out->rows = rows;
    out->scale_row0 = 0;
    if (!w0.data) return 0;
    const size_t rb = (size_t)w0.cols * ci_dtype_size(w0.dtype);
    char *d = shd_kept_alloc(keep, (size_t)rows * rb);
    if (!d) return ci_err(err, errlen, "%s: out of memory for a rank's rows", what);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const size_t len = (size_t)(segs[i].hi - segs[i].lo) * rb;
        memcpy(d + at, (const char *)w0.data + (size_t)segs[i].lo * rb, len);
        at += len;
    }
    out->data = d;
    if (fp8) {   /* the grid rows of each segment, whole grid rows */
        const int64_t gc = (w0.cols + B - 1) / B;
        const size_t gb = (size_t)gc * ci_dtype_size(w0.scale_dtype);
        char *sc = shd_kept_alloc(keep, (size_t)((rows + B - 1) / B + n) * gb);
        if (!sc) return ci_err(err, errlen, "%s: out of memory for a rank's rows", what);
        size_t g = 0;
        for (int i = 0; i < n; i++) {
            const int64_t r0 = (w0.scale_row0 + segs[i].lo) / B, r1 = (w0.scale_row0 + segs[i].hi + B - 1) / B;
            memcpy(sc + g * gb, (const char *)w0.scale + (size_t)r0 * gb, (size_t)(r1 - r0) * gb);
            g += (size_t)(r1 - r0);
        }
        out->scale = sc;
    }
    return 0;
}

float *shd_f32_cols(const float *src, int64_t rows, int64_t cols, const shd_range *segs, int n, shd_kept *keep) {
    int64_t w = 0;
    for (int i = 0; i < n; i++) w += segs[i].hi - segs[i].lo;
    float *d = shd_kept_alloc(keep, (size_t)rows * (size_t)w * sizeof(float));
    if (!d) return NULL;
    for (int64_t r = 0; r < rows; r++) {
        float *o = d + (size_t)r * (size_t)w;
        for (int i = 0; i < n; i++) {
            memcpy(o, src + (size_t)r * (size_t)cols + (size_t)segs[i].lo, (size_t)(segs[i].hi - segs[i].lo) * sizeof(float));
            o += segs[i].hi - segs[i].lo;
        }
    }
    return d;
}

float *shd_f32_rows(const float *src, int64_t cols, const shd_range *segs, int n, shd_kept *keep) {
    int64_t rows = 0;
    for (int i = 0; i < n; i++) rows += segs[i].hi - segs[i].lo;
    float *d = shd_kept_alloc(keep, (size_t)rows * (size_t)cols * sizeof(float));
    if (!d) return NULL;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const size_t len = (size_t)(segs[i].hi - segs[i].lo) * (size_t)cols;
        memcpy(d + at, src + (size_t)segs[i].lo * (size_t)cols, len * sizeof(float));
        at += len;
    }
    return d;
}
