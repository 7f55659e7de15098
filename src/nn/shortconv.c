/* shortconv.c — see shortconv.h.
 *
 * The depthwise kernel is the one 3-D tensor of the LFM2 families, which the w_* binder
 * (2-D matrices, 1-D vectors) does not cover; bind_taps does the same job for it through
 * the binder's public fields: sticky error, claimed flag, parameter and byte counts, and a
 * recorded spec in make-random mode. */
#include "shortconv.h"
#include "../core/status.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bind_fail(w_binder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bind_fail(w_binder *b, const char *fmt, ...) {
    if (b->failed) return -1;
    b->failed = 1;
    int o = snprintf(b->err, sizeof b->err, "%s: ", b->family);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err + o, sizeof b->err - (size_t)o, fmt, ap);
    va_end(ap);
    return -1;
}

/* The conv kernel <name> [dim, 1, K] into an owned [K, dim] f32 copy. */
static int bind_taps(w_binder *b, float **out, int dim, int K, const char *name) {
    *out = NULL;
    if (b->failed) return -1;
    float *taps = calloc((size_t)dim * (size_t)K, sizeof *taps);
    if (!taps) return bind_fail(b, "out of memory for '%s'", name);
    if (!b->st) {                                   /* record mode: list it for make-random */
        if (b->n_specs == b->cap_specs) {
            int nc = b->cap_specs ? b->cap_specs * 2 : 256;
            w_spec *ns = realloc(b->specs, (size_t)nc * sizeof *ns);
            if (!ns) { free(taps); return bind_fail(b, "out of memory"); }
            b->specs = ns;
            b->cap_specs = nc;
        }
        w_spec *s = &b->specs[b->n_specs];
        size_t len = strlen(name);
        if (len >= sizeof s->name) { free(taps); return bind_fail(b, "tensor name '%s' is too long", name); }
        memcpy(s->name, name, len + 1);
        b->n_specs++;
        s->ndim = 3;
        s->shape[0] = dim; s->shape[1] = 1; s->shape[2] = K;
        s->kind = W_KIND_MATRIX;
        *out = taps;
        return 0;
    }
    int i = st_index_of(b->st, name);
    if (i < 0) { free(taps); return bind_fail(b, "required tensor '%s' is missing from the checkpoint", name); }
    const ci_tensor *t = st_get(b->st, i);
    int ok = (t->ndim == 3 && t->shape[0] == dim && ((t->shape[1] == 1 && t->shape[2] == K) ||
                                                     (t->shape[1] == K && t->shape[2] == 1))) ||
             (t->ndim == 2 && t->shape[0] == dim && t->shape[1] == K);
    if (!ok) {
        char got[128];
        free(taps);
        return bind_fail(b, "tensor '%s' in %s has shape %s, expected [%d, 1, %d]", name, st_file_of(b->st, i),
                         ci_shape_str(t->shape, t->ndim, got, sizeof got), dim, K);
    }
    if (t->dtype != CI_F32 && t->dtype != CI_F16 && t->dtype != CI_BF16) {
        free(taps);
        return bind_fail(b, "tensor '%s' has dtype %s, expected F32, F16 or BF16", name, ci_dtype_name(t->dtype));
    }
    for (int c = 0; c < dim; c++)
        for (int k = 0; k < K; k++) {
            size_t at = (size_t)c * (size_t)K + (size_t)k;
            float v;
            if (t->dtype == CI_F32) memcpy(&v, (const char *)t->data + 4 * at, 4);
            else {
                uint16_t h;
                memcpy(&h, (const char *)t->data + 2 * at, 2);
                v = t->dtype == CI_BF16 ? ci_bf16_to_f32(h) : ci_f16_to_f32(h);
            }
            taps[(size_t)k * (size_t)dim + (size_t)c] = v;
        }
    b->claimed[i] = 1;
    b->n_params += ci_tensor_numel(t);
    b->bytes_by_dtype[t->dtype] += t->nbytes;
    b->decode_bytes += t->nbytes;
    *out = taps;
    return 0;
}

int sc_bind(w_binder *b, shortconv *sc, int dim, int K, int bias, const char *prefix) {
    memset(sc, 0, sizeof *sc);
    sc->dim = dim;
    sc->K = K;
    char name[512];
    w_mat(b, &sc->in_proj, W_REQUIRED, 3 * (int64_t)dim, dim, "%s.in_proj", prefix);
    w_mat(b, &sc->out_proj, W_REQUIRED, dim, dim, "%s.out_proj", prefix);
    snprintf(name, sizeof name, "%s.conv.weight", prefix);
    bind_taps(b, &sc->taps, dim, K, name);
    if (bias) {
        w_vec(b, &sc->in_bias, W_REQUIRED, 3 * (int64_t)dim, 0, W_KIND_BIAS, "%s.in_proj.bias", prefix);
        w_vec(b, &sc->conv_bias, W_REQUIRED, dim, 0, W_KIND_BIAS, "%s.conv.bias", prefix);
        w_vec(b, &sc->out_bias, W_REQUIRED, dim, 0, W_KIND_BIAS, "%s.out_proj.bias", prefix);
    }
    return b->failed ? -1 : 0;
}

void sc_free(shortconv *sc) {
    free(sc->taps);
    sc->taps = NULL;
}

int sc_scratch_init(sc_scratch *s, const shortconv *sc, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    size_t D = (size_t)sc->dim;
    s->bcx = malloc((size_t)max_n * 3 * D * sizeof(float));
    s->win = malloc(((size_t)sc->K - 1 + (size_t)max_n) * D * sizeof(float));
    s->y = malloc((size_t)max_n * D * sizeof(float));
    if (!s->bcx || !s->win || !s->y) {
        sc_scratch_free(s);
        return -1;
    }
    return 0;
}

void sc_scratch_free(sc_scratch *s) {
    free(s->bcx); free(s->win); free(s->y);
    memset(s, 0, sizeof *s);
}

static void add_bias(float *y, const float *bias, int n, int width) {
    for (int t = 0; t < n; t++)
        for (int i = 0; i < width; i++) y[(size_t)t * width + i] += bias[i];
}

void sc_forward(ci_backend *be, const shortconv *sc, sc_scratch *s, float *state, float *out, const float *x, int n) {
    const int D = sc->dim, K = sc->K, H = K - 1;
    be->matmul(be, s->bcx, x, n, &sc->in_proj);                   /* [n, 3D]: B | C | X */
    if (sc->in_bias) add_bias(s->bcx, sc->in_bias, n, 3 * D);
    /* window: H history rows from the state, then bx = B ⊙ X of this chunk */
    if (H) memcpy(s->win, state, (size_t)H * D * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float *B = s->bcx + (size_t)t * 3 * D, *X = B + 2 * D;
        float *bx = s->win + (size_t)(H + t) * D;
        for (int c = 0; c < D; c++) bx[c] = B[c] * X[c];
    }
    /* y[t] = C[t] ⊙ Σ_k taps[k] ⊙ win[t + k]: output t sees inputs t-(K-1) .. t */
    for (int t = 0; t < n; t++) {
        float *y = s->y + (size_t)t * D;
        if (sc->conv_bias) memcpy(y, sc->conv_bias, (size_t)D * sizeof(float));
        else memset(y, 0, (size_t)D * sizeof(float));
        for (int k = 0; k < K; k++) {
            const float *w = sc->taps + (size_t)k * D, *in = s->win + (size_t)(t + k) * D;
            for (int c = 0; c < D; c++) y[c] += w[c] * in[c];
        }
        const float *C = s->bcx + (size_t)t * 3 * D + D;
        for (int c = 0; c < D; c++) y[c] *= C[c];
    }
    if (H) memcpy(state, s->win + (size_t)n * D, (size_t)H * D * sizeof(float));  /* last K-1 rows */
    be->matmul(be, out, s->y, n, &sc->out_proj);                   /* [n, D] */
    if (sc->out_bias) add_bias(out, sc->out_bias, n, D);
}
