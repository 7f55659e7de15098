/* test_quant.c — MLX-quantized weights: kernels against a double-precision
 * dequantize-then-multiply reference, the config reader and the binder.
 *
 * Kernels: for every mode / bits / group size (affine 2, 3, 4, 5, 6, 8 bits x groups 32,
 * 64, 128 with F32, F16 and BF16 scales, negative scales included; mxfp4 and mxfp8 with
 * E8M0 scales, one mxfp8 scale too large for the folded multiplier) and every kernel set
 * this CPU runs: matmul at n = 1..5 and 17 (decode tiles, prefill packing, remainders),
 * a width that crosses the 512-column prefill chunk, row counts that are not multiples of
 * 4, row views that start inside the tensor (scale_row0), embedding rows, ci_mat_get, and
 * matmul_xw both for quantized rows and for MLX's stored-transposed MultiLinear.
 * Packed rows are allocated at their exact size, so ASan sees any read past a row.
 * The reference decodes codes from the bit stream with its own code (not the kernels'),
 * applies the stored scale and bias in double and multiplies in double. Bound: normwise
 * rel <= 1e-5, as test_ops.c (the f32 dequantization adds one rounding per weight).
 *
 * Whole models: f32 fixtures re-quantized here (and, for the hybrid families, first
 * converted as mlx-lm's sanitize converts them: language_model. names, switch_mlp stacks,
 * Qwen's norms shifted by +1, conv weights [C, K, 1]) against their dequantized twins.
 *
 * `test_quant --bench` instead measures a 4-bit and an 8-bit matvec against bf16 (GB/s of
 * weights streamed, all threads); `test_quant --bench-gemm ROWS COLS N [THREADS [avx2|avx512]]`
 * a prefill matmul of N token rows, the f32 path against int16 activations (GFLOP/s). */
#include "backend/backend.h"
#include "check.h"
#include "cinfer.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "io/st_write.h"
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOL 1e-5

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / 16777216.0f; }

typedef struct { ci_isa isa; const char *name; } isa_case;
static isa_case isas[3];
static int n_isas;

static void find_isas(void) {
    n_isas = 0;
    isas[n_isas++] = (isa_case){ CI_ISA_SCALAR, "cpu-scalar" };
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        isas[n_isas++] = (isa_case){ CI_ISA_AVX2, "cpu-avx2" };
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
        isas[n_isas++] = (isa_case){ CI_ISA_AVX512, "cpu-avx512" };
#endif
}

/* ---- a random quantized matrix and its double reference ------------------------------- */

typedef struct {
    ci_qdesc d;
    ci_mat m;
    uint8_t *packed;     /* [rows, cols*bits/8] exactly */
    void *scales, *biases;
    double *w;           /* [rows, cols] dequantized in double */
} qmat;

static double e2m1(unsigned q) {
    static const double mag[8] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6 };
    return (q & 8 ? -1 : 1) * mag[q & 7];
}

/* E4M3 decoded from its fields (no shared table). */
static double e4m3(unsigned b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    return s ? -v : v;
}

/* Stores v in dtype dt at p[i] and returns the stored value. */
static double put(ci_dtype dt, void *p, int64_t i, float v) {
    if (dt == CI_F32) { ((float *)p)[i] = v; return v; }
    if (dt == CI_BF16) { uint16_t h = ci_f32_to_bf16(v); ((uint16_t *)p)[i] = h; return ci_bf16_to_f32(h); }
    uint16_t h = ci_f32_to_f16(v);
    ((uint16_t *)p)[i] = h;
    return ci_f16_to_f32(h);
}

/* big_scale: the first group's mxfp8 scale is 2^121 (beyond the folded 2^8 multiplier) with
 * small codes there. */
static void qmat_make(qmat *Q, ci_qmode mode, int bits, int group, ci_dtype sdt, int64_t rows, int64_t cols, int big_scale) {
    memset(Q, 0, sizeof *Q);
    int64_t ng = cols / group, rb = cols * bits / 8;
    Q->packed = calloc((size_t)(rows * rb), 1);
    Q->w = malloc((size_t)(rows * cols) * sizeof(double));
    int mx = mode != CI_Q_AFFINE;
    Q->scales = malloc((size_t)(rows * ng) * (mx ? 1 : ci_dtype_size(sdt)));
    if (!mx) Q->biases = malloc((size_t)(rows * ng) * ci_dtype_size(sdt));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < ng; g++) {
            int64_t gi = r * ng + g;
            double s, b = 0;
            if (mx) {
                uint8_t e = (uint8_t)(117 + rnd_u32() % 14);
                if (gi == 1) e = 0;                       /* 2^-127, as MLX decodes 0 */
                if (big_scale && gi == 0) e = 248;
                ((uint8_t *)Q->scales)[gi] = e;
                s = e ? ldexp(1.0, e - 127) : ldexp(1.0, -127);
            } else {
                float sv = rnd(0.002f, 0.1f) * (rnd_u32() & 1 ? -1.0f : 1.0f);
                s = put(sdt, Q->scales, gi, sv);
                b = put(sdt, Q->biases, gi, rnd(-0.6f, 0.6f));
            }
            for (int64_t c = g * group; c < (g + 1) * group; c++) {
                unsigned q = rnd_u32() & ((1u << bits) - 1);
                if (mode == CI_Q_MXFP8 && (q & 0x7f) == 0x7f) q ^= 1;       /* no NaN codes */
                if (mode == CI_Q_MXFP8 && big_scale && gi == 0) q &= 0x9f;  /* |v| <= 0.12 */
                /* pack into the little-endian bit stream */
                int64_t bit = c * bits;
                for (int k = 0; k < bits; k++, bit++)
                    if (q >> k & 1) Q->packed[r * rb + (bit >> 3)] |= (uint8_t)(1u << (bit & 7));
                double v = mode == CI_Q_AFFINE ? s * q + b : mode == CI_Q_MXFP4 ? s * e2m1(q) : s * e4m3(q);
                Q->w[r * cols + c] = v;
            }
        }
    Q->d.mode = mode;
    Q->d.bits = bits;
    Q->d.group = group;
    Q->d.scale_dtype = mx ? CI_F8_E8M0 : sdt;
    Q->d.scales = Q->scales;
    Q->d.biases = Q->biases;
    Q->m.data = Q->packed;
    Q->m.dtype = CI_U32;
    Q->m.rows = rows;
    Q->m.cols = cols;
    Q->m.scale = &Q->d;
}

static void qmat_free(qmat *Q) {
    free(Q->packed); free(Q->scales); free(Q->biases); free(Q->w);
}

/* A view of rows [r0, r0 + n). */
static ci_mat qview(const qmat *Q, int64_t r0, int64_t n) {
    ci_mat v = Q->m;
    v.data = Q->packed + r0 * (Q->m.cols * Q->d.bits / 8);
    v.rows = n;
    v.scale_row0 = r0;
    return v;
}

static double rel_err(const float *got, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (isnan(d)) return NAN;
        if (d > num) num = d;
        if (fabs(ref[i]) > den) den = fabs(ref[i]);
    }
    return den > 0 ? num / den : num;
}

/* y = x · W[r0 : r0+rows]ᵀ on the backend, against the double reference. */
static void check_mm(ci_backend *be, const qmat *Q, int64_t r0, int64_t rows, int n, float xscale, const char *what) {
    int64_t C = Q->m.cols;
    float *x = malloc((size_t)(n * C) * sizeof(float)), *y = malloc((size_t)(n * rows) * sizeof(float));
    double *ref = malloc((size_t)(n * rows) * sizeof(double));
    for (int64_t i = 0; i < n * C; i++) x[i] = rnd(-1, 1) * xscale;
    for (int t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double a = 0;
            for (int64_t c = 0; c < C; c++) a += (double)x[t * C + c] * Q->w[(r0 + r) * C + c];
            ref[t * rows + r] = a;
        }
    ci_mat v = qview(Q, r0, rows);
    be->matmul(be, y, x, n, &v);
    double e = rel_err(y, ref, n * rows);
    CHECK(e <= TOL, "%s matmul %s [%lld x %lld] from row %lld, n=%d: rel err %.3g", be->name, what, (long long)rows,
          (long long)C, (long long)r0, n, e);
    free(x); free(y); free(ref);
}

static const char *mode_name(ci_qmode m) { return m == CI_Q_AFFINE ? "affine" : m == CI_Q_MXFP4 ? "mxfp4" : "mxfp8"; }

typedef struct { ci_qmode mode; int bits, group; ci_dtype sdt; int big; } qcase;

static int all_cases(qcase *out) {
    static const int bits[6] = { 2, 3, 4, 5, 6, 8 }, groups[3] = { 32, 64, 128 };
    static const ci_dtype sdts[3] = { CI_BF16, CI_F16, CI_F32 };
    int n = 0;
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++) out[n++] = (qcase){ CI_Q_AFFINE, bits[b], groups[g], sdts[(b + g) % 3], 0 };
    out[n++] = (qcase){ CI_Q_MXFP4, 4, 32, CI_F8_E8M0, 0 };
    out[n++] = (qcase){ CI_Q_MXFP8, 8, 32, CI_F8_E8M0, 0 };
    out[n++] = (qcase){ CI_Q_MXFP8, 8, 32, CI_F8_E8M0, 1 };
    return n;
}

static void test_matmul_all(void) {
    qcase cs[32];
    int nc = all_cases(cs);
    static const int ns[6] = { 1, 2, 3, 4, 5, 17 };
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        CHECK(be != NULL, "%s backend", isas[ii].name);
        if (!be) continue;
        for (int i = 0; i < nc; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s %d-bit group %d scales %s%s", mode_name(cs[i].mode), cs[i].bits, cs[i].group,
                     ci_dtype_name(cs[i].sdt), cs[i].big ? " (scale 2^121)" : "");
            /* 640 columns cross the 512-column prefill chunk */
            for (int wide = 0; wide < 2; wide++) {
                qmat Q;
                int64_t cols = wide ? 640 : 2 * 128;
                qmat_make(&Q, cs[i].mode, cs[i].bits, cs[i].group, cs[i].sdt, 37, cols, cs[i].big);
                float xs = cs[i].big ? 1e-30f : 1.0f;
                for (int k = 0; k < 6; k++) check_mm(be, &Q, 0, 37, ns[k], xs, what);
                check_mm(be, &Q, 5, 30, 1, xs, what);      /* views: scale_row0 = 5 */
                check_mm(be, &Q, 9, 23, 17, xs, what);
                qmat_free(&Q);
            }
        }
        be->free(be);
    }
}

static void test_embed_get(void) {
    qcase cs[32];
    int nc = all_cases(cs);
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        for (int i = 0; i < nc; i++) {
            qmat Q;
            int64_t V = 50, C = 384;
            qmat_make(&Q, cs[i].mode, cs[i].bits, cs[i].group, cs[i].sdt, V, C, cs[i].big);
            int32_t ids[6] = { 0, 49, 7, 7, 23, 1 };
            float *out = malloc(6 * (size_t)C * sizeof(float));
            be->embed(be, out, &Q.m, ids, 6);
            double worst = 0;   /* per row, normwise: q*s + b may cancel to near zero */
            for (int t = 0; t < 6; t++) {
                double e = rel_err(out + t * C, Q.w + ids[t] * C, C);
                if (!(e <= worst)) worst = e;
            }
            CHECK(worst <= 1e-6, "%s embed %s %d-bit group %d: rel err %.3g", be->name, mode_name(cs[i].mode),
                  cs[i].bits, cs[i].group, worst);
            /* ci_mat_get on a view */
            ci_mat v = qview(&Q, 11, 20);
            for (int k = 0; k < 200; k++) {
                int64_t r = rnd_u32() % 20, c = rnd_u32() % C;
                double ref = Q.w[(11 + r) * C + c], got = ci_mat_get(&v, r, c), big = 0;
                for (int64_t k = 0; k < C; k++) big = fmax(big, fabs(Q.w[(11 + r) * C + k]));
                CHECK(fabs(got - ref) <= 1e-6 * big, "ci_mat_get %s %d-bit (%lld, %lld): %g vs %g",
                      mode_name(cs[i].mode), cs[i].bits, (long long)r, (long long)c, got, ref);
            }
            CHECK(isnan(ci_mat_get(&v, 20, 0)), "ci_mat_get out of range is NaN");
            free(out);
            qmat_free(&Q);
        }
        be->free(be);
    }
}

/* matmul_xw: y[n, W.cols] = x[n, W.rows] · W for quantized rows, and MultiLinear's
 * stored-transposed W (the view is logically [cols, rows] of the stored matrix). */
static void test_matmul_xw(void) {
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        for (int k = 0; k < 3; k++) {   /* 2: quantized rows wider than matmul_xw's 1024-column chunk */
            const int st = k == 1;
            qmat Q;
            qmat_make(&Q, k ? CI_Q_AFFINE : CI_Q_MXFP4, 4, k ? 64 : 32, CI_BF16, 24, k == 2 ? 2112 : 128, 0);
            Q.d.stored_t = st;
            int n = 3;
            /* logical W: plain = stored [24, 128]; stored_t = [128, 24] (Wᵀ of the rows 4..20) */
            int64_t r0 = 4, R = 16;
            ci_mat v = qview(&Q, r0, R);
            int64_t LR = st ? Q.m.cols : R, LC = st ? R : Q.m.cols;
            if (st) { v.rows = LR; v.cols = LC; }
            float *x = malloc((size_t)(n * LR) * sizeof(float)), *y = malloc((size_t)(n * LC) * sizeof(float));
            double *ref = calloc((size_t)(n * LC), sizeof(double));
            for (int64_t i = 0; i < n * LR; i++) x[i] = rnd(-1, 1);
            for (int t = 0; t < n; t++)
                for (int64_t i = 0; i < LR; i++)
                    for (int64_t j = 0; j < LC; j++) {
                        double w = st ? Q.w[(r0 + j) * Q.m.cols + i] : Q.w[(r0 + i) * Q.m.cols + j];
                        ref[t * LC + j] += (double)x[t * LR + i] * w;
                    }
            be->matmul_xw(be, y, x, n, &v);
            double e = rel_err(y, ref, n * LC);
            CHECK(e <= TOL, "%s matmul_xw %s: rel err %.3g", be->name,
                  st ? "stored-transposed" : k ? "quantized rows of 2112" : "quantized rows", e);
            free(x); free(y); free(ref);
            qmat_free(&Q);
        }
        be->free(be);
    }
}

/* ---- whole models: re-quantized fixtures ---------------------------------------------------
 *
 * An f32 fixture is quantized here with MLX's algorithms (affine: per group min/max, the
 * edge value made exact, round to nearest; mxfp: power-of-two scale from max|w|, nearest
 * code), written under mlx-lm's names (switch_mlp stacks for the experts) with a
 * `quantization` block, and also written dequantized, in f32, under the fixture's own names.
 * The two checkpoints must give the same logits (prefill and single steps): this checks
 * the config, the binder and the kernels inside real forward passes, with no Python. */

typedef struct { const char *module; int off; q_params p; } qrule;

typedef struct {
    st_wdesc *d;
    void **buf;
    int n, cap;
} wlist;

static void *wl_add(wlist *l, const char *name, ci_dtype dt, int ndim, const int64_t *shape) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->d = realloc(l->d, (size_t)l->cap * sizeof *l->d);
        l->buf = realloc(l->buf, (size_t)l->cap * sizeof *l->buf);
    }
    st_wdesc *w = &l->d[l->n];
    memset(w, 0, sizeof *w);
    w->name = strdup(name);
    w->dtype = dt;
    w->ndim = ndim;
    size_t nb = ci_dtype_size(dt);
    for (int i = 0; i < ndim; i++) { w->shape[i] = shape[i]; nb *= (size_t)shape[i]; }
    l->buf[l->n] = calloc(nb ? nb : 1, 1);
    return l->buf[l->n++];
}

/* Larger elements first (stable): every tensor then starts at a multiple of its element
 * size, as the safetensors writers of torch and mlx-lm's conversions keep it; the kernels
 * read f32 / bf16 matrices straight from the mapping. */
static void wl_align(wlist *l) {
    for (int i = 1; i < l->n; i++)
        for (int j = i; j > 0 && ci_dtype_size(l->d[j].dtype) > ci_dtype_size(l->d[j - 1].dtype); j--) {
            st_wdesc td = l->d[j]; l->d[j] = l->d[j - 1]; l->d[j - 1] = td;
            void *tb = l->buf[j]; l->buf[j] = l->buf[j - 1]; l->buf[j - 1] = tb;
        }
}

static int wl_fill(void *ctx, int i, void *buf, size_t nbytes) {
    memcpy(buf, ((wlist *)ctx)->buf[i], nbytes);
    return 0;
}

static void wl_free(wlist *l) {
    for (int i = 0; i < l->n; i++) { free((void *)l->d[i].name); free(l->buf[i]); }
    free(l->d); free(l->buf);
    memset(l, 0, sizeof *l);
}

static uint8_t e4m3_nearest(float v) {   /* nearest E4M3 code (saturating), ties to the lower code */
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        double d = fabs(e4m3((unsigned)c) - v);
        if (d < bd) { bd = d; best = c; }
    }
    return (uint8_t)best;
}

/* Quantizes rows x cols of w (f32) with p; writes the codes / scales / biases into the
 * given buffers at row offset r0 and the dequantized values back into w. */
static void quantize_rows(float *w, int64_t rows, int64_t cols, const q_params *p, uint8_t *codes, void *scales,
                          void *biases, ci_dtype sdt) {
    int64_t ng = cols / p->group, rb = cols * p->bits / 8;
    float nb = (float)((1 << p->bits) - 1);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < ng; g++) {
            float *x = w + r * cols + g * p->group;
            uint8_t *row = codes + r * rb;
            unsigned q[128];
            if (p->mode == CI_Q_AFFINE) {
                float mn = INFINITY, mx = -INFINITY;
                for (int k = 0; k < p->group; k++) { mn = fminf(mn, x[k]); mx = fmaxf(mx, x[k]); }
                int mask = fabsf(mn) > fabsf(mx);
                float sc = fmaxf((mx - mn) / nb, 1e-7f), edge = mask ? mn : mx, bias = 0;
                sc = mask ? sc : -sc;
                float q0 = rintf(edge / sc);
                if (q0 != 0) { sc = edge / q0; bias = edge; }
                for (int k = 0; k < p->group; k++) q[k] = (unsigned)fminf(fmaxf(rintf((x[k] - bias) / sc), 0), nb);
                double s = put(sdt, scales, r * ng + g, sc), b = put(sdt, biases, r * ng + g, bias);
                for (int k = 0; k < p->group; k++) x[k] = (float)(s * q[k] + b);
            } else {
                float amax = 0;
                for (int k = 0; k < p->group; k++) amax = fmaxf(amax, fabsf(x[k]));
                float sc = amax / (p->mode == CI_Q_MXFP4 ? 6.0f : 448.0f);
                int e = sc > 0 ? (int)rint(log2(sc)) : 0;
                e = e < -127 ? -127 : e > 127 ? 127 : e;
                ((uint8_t *)scales)[r * ng + g] = (uint8_t)(e + 127);
                double s = ldexp(1.0, e);
                for (int k = 0; k < p->group; k++) {
                    float v = (float)(x[k] / s);
                    if (p->mode == CI_Q_MXFP8) q[k] = e4m3_nearest(v);
                    else {
                        unsigned best = 0;
                        for (unsigned c = 1; c < 16; c++) if (fabs(e2m1(c) - v) < fabs(e2m1(best) - v)) best = c;
                        q[k] = best;
                    }
                    x[k] = (float)(s * (p->mode == CI_Q_MXFP8 ? e4m3(q[k]) : e2m1(q[k])));
                }
            }
            for (int k = 0; k < p->group; k++) {
                int64_t bit = (g * p->group + k) * p->bits;
                for (int j = 0; j < p->bits; j++, bit++)
                    if (q[k] >> j & 1) row[bit >> 3] |= (uint8_t)(1u << (bit & 7));
            }
        }
}

/* The rule for module (NULL: the default), or whether it is off. */
static const qrule *find_rule(const qrule *rules, int n, const char *module) {
    for (int i = 0; i < n; i++)
        if (!strcmp(rules[i].module, module)) return &rules[i];
    return NULL;
}

/* Adds module `base` ([E,] rows, cols of f32 at w) to q (quantized when the rules and the
 * width allow, else f32); w is replaced by what the quantized model computes with. */
static void emit_module(wlist *q, const char *base, int64_t E, int64_t rows, int64_t cols, float *w,
                        const q_params *def, const qrule *rules, int n_rules, ci_dtype sdt) {
    const qrule *ru = find_rule(rules, n_rules, base);
    q_params p = ru && !ru->off ? ru->p : *def;
    char name[512];
    int nd = E ? 3 : 2;
    int64_t lead = E ? E : 1;
    if ((ru && ru->off) || cols % p.group) {
        int64_t sh[3] = { E, rows, cols };
        if (!E) { sh[0] = rows; sh[1] = cols; }
        snprintf(name, sizeof name, "%s.weight", base);
        memcpy(wl_add(q, name, CI_F32, nd, sh), w, (size_t)(lead * rows * cols) * sizeof(float));
        return;
    }
    int64_t shw[3] = { E, rows, cols * p.bits / 32 }, shs[3] = { E, rows, cols / p.group };
    if (!E) { shw[0] = rows; shw[1] = cols * p.bits / 32; shs[0] = rows; shs[1] = cols / p.group; }
    int mx = p.mode != CI_Q_AFFINE;
    snprintf(name, sizeof name, "%s.weight", base);
    uint8_t *codes = wl_add(q, name, CI_U32, nd, shw);
    snprintf(name, sizeof name, "%s.scales", base);
    void *sc = wl_add(q, name, mx ? CI_U8 : sdt, nd, shs);
    void *bi = NULL;
    if (!mx) {
        snprintf(name, sizeof name, "%s.biases", base);
        bi = wl_add(q, name, sdt, nd, shs);
    }
    quantize_rows(w, lead * rows, cols, &p, codes, sc, bi, sdt);
}

/* mlx-lm's sanitize for a family, as mlx-lm applies it before converting (models/<family>.py):
 * what the quantized copy's names and layouts become. The dequantized copy keeps the
 * source's names and layouts, so the two checkpoints are one model in two forms. */
typedef struct {
    const char *pre_from, *pre_to;   /* rename this name prefix (e.g. "model." -> "backbone.") */
    const char *head_to;             /* "lm_head.weight" becomes "<head_to>.weight" */
    int shift_norms;                 /* qwen3_5 / qwen3_next: +1 on the (1+w) norms */
    int conv_t;                      /* depthwise conv weights [C, 1, K] -> [C, K, 1] (2: only the
                                      * first one, a broken checkpoint for the error test) */
    int lfm2_names;                  /* lfm2_moe: w1 / w3 / w2 -> gate_proj / up_proj / down_proj */
    int relu2;                       /* nemotron_h: stacked experts are up / down -> switch_mlp.fc1 / fc2 */
    const char *noq;                 /* modules ending so are not quantizable (mlx-lm's MoEGate) */
    int kv_b_split;                  /* deepseek: kv_b_proj -> MultiLinear embed_q / unembed_out */
    int heads, nope, v;              /* deepseek: heads, qk_nope_head_dim, v_head_dim */
} mlx_san;

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The quantized copy's name of source tensor `name` (prefix and head renames). */
static void mlx_name(const mlx_san *san, const char *name, char *out, size_t n) {
    if (san && san->head_to && !strncmp(name, "lm_head.", 8)) { snprintf(out, n, "%s.%s", san->head_to, name + 8); return; }
    if (san && san->pre_from && !strncmp(name, san->pre_from, strlen(san->pre_from))) {
        snprintf(out, n, "%s%s", san->pre_to, name + strlen(san->pre_from));
        return;
    }
    snprintf(out, n, "%s", name);
}

/* lfm2_moe's rename of an FF projection leaf. */
static const char *ff_leaf(const mlx_san *san, const char *leaf) {
    if (!san || !san->lfm2_names) return leaf;
    return !strcmp(leaf, "w1") ? "gate_proj" : !strcmp(leaf, "w3") ? "up_proj" : !strcmp(leaf, "w2") ? "down_proj" : leaf;
}

/* src fixture (f32) -> qdir (mlx layout, quantized) + ddir (source layout, dequantized).
 * san (NULL: names as they are) says how mlx-lm's sanitize would have renamed and reshaped
 * the checkpoint first. Per-expert tensors are stacked into switch_mlp as mlx-lm does. */
static int requantize_as(const char *src, const char *qdir, const char *ddir, const mlx_san *san, const q_params *def,
                         const qrule *rules, int n_rules, ci_dtype sdt, char *err, size_t errlen) {
    st_set *st;
    if (st_open_dir(src, &st, err, errlen)) return -1;
    wlist q = { 0 }, dq = { 0 };
    float **vals = calloc((size_t)st_count(st), sizeof *vals);   /* what the quantized model computes with */
    unsigned char *done = calloc((size_t)st_count(st), 1);
    int n_conv_t = 0;
    for (int i = 0; i < st_count(st); i++) {
        const ci_tensor *t = st_get(st, i);
        vals[i] = malloc((size_t)ci_tensor_numel(t) * sizeof(float));
        memcpy(vals[i], t->data, (size_t)ci_tensor_numel(t) * sizeof(float));   /* the fixtures are f32 */
    }
    for (int i = 0; i < st_count(st); i++) {
        if (done[i]) continue;
        const ci_tensor *t = st_get(st, i);
        int64_t n = ci_tensor_numel(t);
        float *w = vals[i];
        size_t L = strlen(t->name);
        char qn[512], base[480];
        mlx_name(san, t->name, qn, sizeof qn);
        const char *ex = strstr(qn, ".experts.");
        if (san && (strstr(t->name, "visual.") || !strncmp(t->name, "mtp.", 4))) {
            /* mlx-lm drops the vision tower and the MTP head */
        } else if (t->ndim == 2 && ex && ex[9] >= '0' && ex[9] <= '9' && ends_with(qn, ".weight")) {
            /* per-expert <pre>.experts.<e>.<leaf>.weight: stack every expert of this leaf */
            const char *leaf = strchr(ex + 9, '.') + 1;
            char lf[64], sname[512];
            snprintf(lf, sizeof lf, "%.*s", (int)(strlen(leaf) - 7), leaf);
            const char *tn_ex = strstr(t->name, ".experts.");
            int E = 0;
            for (;; E++) {
                snprintf(sname, sizeof sname, "%.*s.experts.%d.%s.weight", (int)(tn_ex - t->name), t->name, E, lf);
                if (!st_find(st, sname)) break;
            }
            int64_t R = t->shape[0], C = t->shape[1];
            float *stack = malloc((size_t)(E * R * C) * sizeof(float));
            int *idx = malloc((size_t)E * sizeof *idx);
            for (int e = 0; e < E; e++) {
                snprintf(sname, sizeof sname, "%.*s.experts.%d.%s.weight", (int)(tn_ex - t->name), t->name, e, lf);
                idx[e] = st_index_of(st, sname);
                memcpy(stack + e * R * C, vals[idx[e]], (size_t)(R * C) * sizeof(float));
            }
            const char *pl = san && san->relu2 ? (!strcmp(lf, "up_proj") ? "fc1" : "fc2") : ff_leaf(san, lf);
            snprintf(base, sizeof base, "%.*s.switch_mlp.%s", (int)(ex - qn), qn, pl);
            emit_module(&q, base, E, R, C, stack, def, rules, n_rules, sdt);
            for (int e = 0; e < E; e++) {
                memcpy(vals[idx[e]], stack + e * R * C, (size_t)(R * C) * sizeof(float));
                done[idx[e]] = 1;
            }
            free(stack);
            free(idx);
            continue;   /* the dequantized copy gets every expert below */
        } else if (san && san->kv_b_split && ends_with(t->name, "self_attn.kv_b_proj.weight")) {
            /* deepseek: kv_b_proj [H*(nope+v), kv_lora] -> embed_q [H, kv_lora, nope] (W_UK
             * transposed per head) and unembed_out [H, v, kv_lora] */
            int64_t H = san->heads, nope = san->nope, v = san->v, r = nope + v, kl = t->shape[1];
            float *uk = malloc((size_t)(H * kl * nope) * sizeof(float)), *uv = malloc((size_t)(H * v * kl) * sizeof(float));
            for (int64_t h = 0; h < H; h++) {
                for (int64_t a = 0; a < nope; a++)
                    for (int64_t c = 0; c < kl; c++) uk[(h * kl + c) * nope + a] = w[(h * r + a) * kl + c];
                memcpy(uv + h * v * kl, w + (h * r + nope) * kl, (size_t)(v * kl) * sizeof(float));
            }
            snprintf(base, sizeof base, "%.*sembed_q", (int)(strlen(qn) - strlen("kv_b_proj.weight")), qn);
            emit_module(&q, base, H, kl, nope, uk, def, rules, n_rules, sdt);
            snprintf(base, sizeof base, "%.*sunembed_out", (int)(strlen(qn) - strlen("kv_b_proj.weight")), qn);
            emit_module(&q, base, H, v, kl, uv, def, rules, n_rules, sdt);
            for (int64_t h = 0; h < H; h++) {
                for (int64_t a = 0; a < nope; a++)
                    for (int64_t c = 0; c < kl; c++) w[(h * r + a) * kl + c] = uk[(h * kl + c) * nope + a];
                memcpy(w + (h * r + nope) * kl, uv + h * v * kl, (size_t)(v * kl) * sizeof(float));
            }
            free(uk);
            free(uv);
        } else if (t->ndim == 2 && L > 7 && !strcmp(t->name + L - 7, ".weight")) {
            snprintf(base, sizeof base, "%.*s", (int)(strlen(qn) - 7), qn);
            const char *leaf = strrchr(base, '.');
            const char *to = leaf && strstr(base, "feed_forward.") ? ff_leaf(san, leaf + 1) : NULL;
            if (to && to != leaf + 1) snprintf(base + (leaf + 1 - base), sizeof base - (size_t)(leaf + 1 - base), "%s", to);
            if (san && san->noq && ends_with(base, san->noq)) {
                snprintf(qn, sizeof qn, "%s.weight", base);
                memcpy(wl_add(&q, qn, CI_F32, 2, t->shape), w, (size_t)n * sizeof(float));
            } else {
                emit_module(&q, base, 0, t->shape[0], t->shape[1], w, def, rules, n_rules, sdt);
            }
        } else if (t->ndim == 3 && strstr(qn, "experts.gate_up_proj")) {
            int64_t E = t->shape[0], I2 = t->shape[1], H = t->shape[2], I = I2 / 2;
            float *g = malloc((size_t)(E * I * H) * sizeof(float)), *u = malloc((size_t)(E * I * H) * sizeof(float));
            for (int64_t e = 0; e < E; e++) {
                memcpy(g + e * I * H, w + e * I2 * H, (size_t)(I * H) * sizeof(float));
                memcpy(u + e * I * H, w + e * I2 * H + I * H, (size_t)(I * H) * sizeof(float));
            }
            snprintf(base, sizeof base, "%.*sswitch_mlp.gate_proj", (int)(strstr(qn, "experts.") - qn), qn);
            emit_module(&q, base, E, I, H, g, def, rules, n_rules, sdt);
            snprintf(base, sizeof base, "%.*sswitch_mlp.up_proj", (int)(strstr(qn, "experts.") - qn), qn);
            emit_module(&q, base, E, I, H, u, def, rules, n_rules, sdt);
            for (int64_t e = 0; e < E; e++) {
                memcpy(w + e * I2 * H, g + e * I * H, (size_t)(I * H) * sizeof(float));
                memcpy(w + e * I2 * H + I * H, u + e * I * H, (size_t)(I * H) * sizeof(float));
            }
            free(g); free(u);
        } else if (t->ndim == 3 && (strstr(qn, "experts.down_proj") || strstr(qn, "experts.up_proj"))) {
            int up = strstr(qn, "experts.up_proj") != NULL;
            const char *leaf = san && san->relu2 ? (up ? "fc1" : "fc2") : up ? "up_proj" : "down_proj";
            snprintf(base, sizeof base, "%.*sswitch_mlp.%s", (int)(strstr(qn, "experts.") - qn), qn, leaf);
            emit_module(&q, base, t->shape[0], t->shape[1], t->shape[2], w, def, rules, n_rules, sdt);
        } else if (san && san->conv_t && t->ndim == 3 && t->shape[1] == 1 && strstr(qn, "conv") && ends_with(qn, ".weight") &&
                   !(san->conv_t == 2 && n_conv_t++)) {
            int64_t C = t->shape[0], K = t->shape[2], sh[3] = { C, K, 1 };
            memcpy(wl_add(&q, qn, CI_F32, 3, sh), w, (size_t)n * sizeof(float));   /* same C x K values */
        } else if (san && san->shift_norms && t->ndim == 1 &&
                   (ends_with(qn, ".input_layernorm.weight") || ends_with(qn, ".post_attention_layernorm.weight") ||
                    ends_with(qn, "model.norm.weight") || ends_with(qn, ".q_norm.weight") || ends_with(qn, ".k_norm.weight"))) {
            float *o = wl_add(&q, qn, CI_F32, 1, t->shape);
            for (int64_t k = 0; k < n; k++) o[k] = w[k] + 1.0f;
        } else {
            memcpy(wl_add(&q, qn, CI_F32, t->ndim, t->shape), w, (size_t)n * sizeof(float));
        }
        done[i] = 1;
    }
    for (int i = 0; i < st_count(st); i++) {
        const ci_tensor *t = st_get(st, i);
        memcpy(wl_add(&dq, t->name, CI_F32, t->ndim, t->shape), vals[i], (size_t)ci_tensor_numel(t) * sizeof(float));
        free(vals[i]);
    }
    free(vals);
    free(done);
    st_close(st);
    char path[1024];
    int rc = 0;
    snprintf(path, sizeof path, "%s/model.safetensors", qdir);
    wl_align(&q);
    rc |= st_write_file(path, q.d, q.n, wl_fill, &q, err, errlen);
    snprintf(path, sizeof path, "%s/model.safetensors", ddir);
    rc |= st_write_file(path, dq.d, dq.n, wl_fill, &dq, err, errlen);
    wl_free(&q);
    wl_free(&dq);
    /* configs: the source's, plus the quantization block for qdir */
    snprintf(path, sizeof path, "%s/config.json", src);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) return snprintf(err, errlen, "%.200s: %.200s", path, je.text), -1;
    snprintf(path, sizeof path, "%s/config.json", ddir);
    rc |= json_dump_file(cfg, path, 0);
    json_t *qb = json_pack("{s:i, s:i, s:s}", "group_size", def->group, "bits", def->bits, "mode", q_mode_name(def->mode));
    for (int i = 0; i < n_rules; i++) {
        if (rules[i].off) { json_object_set_new(qb, rules[i].module, json_false()); continue; }
        json_t *o = json_pack("{s:i, s:i}", "group_size", rules[i].p.group, "bits", rules[i].p.bits);
        if (rules[i].p.mode != CI_Q_AFFINE) json_object_set_new(o, "mode", json_string(q_mode_name(rules[i].p.mode)));
        json_object_set_new(qb, rules[i].module, o);
    }
    json_object_set(cfg, "quantization", qb);
    json_object_set_new(cfg, "quantization_config", qb);
    snprintf(path, sizeof path, "%s/config.json", qdir);
    rc |= json_dump_file(cfg, path, 0);
    json_decref(cfg);
    return rc ? -1 : 0;
}

static int requantize(const char *src, const char *qdir, const char *ddir, const q_params *def, const qrule *rules,
                      int n_rules, ci_dtype sdt, char *err, size_t errlen) {
    return requantize_as(src, qdir, ddir, NULL, def, rules, n_rules, sdt, err, errlen);
}

/* Logits of tokens through one prefill and through single steps. */
static float *run_logits(const char *dir, int isa, const int *toks, int T, int steps, char *err, size_t errlen) {
    ci_model_opts o = { .isa = isa };
    ci_model *m;
    ci_session *s;
    if (ci_model_open(dir, &o, &m, err, errlen)) return NULL;
    ci_model_info info;
    ci_model_get_info(m, &info);
    float *out = malloc((size_t)T * (size_t)info.vocab_size * sizeof(float));
    int rc = ci_session_new(m, T, &s, err, errlen);
    if (!rc && !steps) rc = ci_forward(s, toks, T, out, 1, err, errlen);
    for (int t = 0; !rc && steps && t < T; t++)
        rc = ci_forward(s, &toks[t], 1, out + (size_t)t * info.vocab_size, 1, err, errlen);
    if (!rc) ci_session_free(s);
    ci_model_free(m);
    if (rc) { free(out); return NULL; }
    return out;
}

static int mkdirs(char *qdir, char *ddir) {
    strcpy(qdir, "/tmp/cinfer_tq_XXXXXX");
    strcpy(ddir, "/tmp/cinfer_td_XXXXXX");
    return mkdtemp(qdir) && mkdtemp(ddir) ? 0 : -1;
}

static void rmdirs(const char *qdir, const char *ddir) {
    const char *dirs[2] = { qdir, ddir };
    char p[1024];
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/model.safetensors", dirs[i]); remove(p);
        snprintf(p, sizeof p, "%s/config.json", dirs[i]); remove(p);
        remove(dirs[i]);
    }
}

static void check_requantized_as(const char *src, const mlx_san *san, const q_params *def, const qrule *rules,
                                 int n_rules, ci_dtype sdt, int V) {
    char qdir[64], ddir[64], err[1024];
    CHECK(mkdirs(qdir, ddir) == 0, "mkdtemp");
    int rc = requantize_as(src, qdir, ddir, san, def, rules, n_rules, sdt, err, sizeof err);
    CHECK(rc == 0, "%s: %s", src, err);
    int toks[20];
    for (int i = 0; i < 20; i++) toks[i] = 3 + (int)(rnd_u32() % (uint32_t)(V - 3));
    if (!rc) {   /* the quantized model holds packed codes and as many parameters */
        ci_model *mq = NULL, *md = NULL;
        ci_model_info iq, id;
        rc = ci_model_open(qdir, NULL, &mq, err, sizeof err) || ci_model_open(ddir, NULL, &md, err, sizeof err);
        CHECK(rc == 0, "%s: %s", src, err);
        if (!rc) {
            ci_model_get_info(mq, &iq);
            ci_model_get_info(md, &id);
            CHECK(iq.bytes_by_dtype[CI_U32] > 0 && iq.n_params == id.n_params && iq.decode_bytes < id.decode_bytes,
                  "%s: quantized model: %zu bytes of codes, %lld params (dequantized: %lld), decode bytes %zu vs %zu", src,
                  iq.bytes_by_dtype[CI_U32], (long long)iq.n_params, (long long)id.n_params, iq.decode_bytes, id.decode_bytes);
        }
        ci_model_free(mq);
        ci_model_free(md);
    }
    for (int isa = 0; !rc && isa < 2; isa++)
        for (int steps = 0; steps < 2; steps++) {
            float *want = run_logits(ddir, isa, toks, 20, steps, err, sizeof err);
            CHECK(want != NULL, "%s (dequantized): %s", src, err);
            float *got = want ? run_logits(qdir, isa, toks, 20, steps, err, sizeof err) : NULL;
            CHECK(!want || got != NULL, "%s (quantized): %s", src, err);
            if (got && want) {
                double md = 0, mx = 0;
                for (int i = 0; i < 20 * V; i++) {
                    double d = fabs((double)got[i] - want[i]);
                    if (!(d <= md)) md = d;
                    if (fabs(want[i]) > mx) mx = fabs(want[i]);
                }
                CHECK(md <= 1e-4 * (mx > 1 ? mx : 1) && mx > 0, "%s %s isa=%d: quantized vs dequantized max|diff| %.3g (max|logit| %.3g)",
                      src, steps ? "steps" : "prefill", isa, md, mx);
                if (getenv("TQ_VERBOSE")) printf("  %s %s isa=%d max|diff| %.3g max|logit| %.3g\n", src, steps ? "steps" : "prefill", isa, md, mx);
            }
            free(got);
            free(want);
        }
    rmdirs(qdir, ddir);
}

static void check_requantized(const char *src, const q_params *def, const qrule *rules, int n_rules, ci_dtype sdt,
                              int V) {
    check_requantized_as(src, NULL, def, rules, n_rules, sdt, V);
}

#define QP(m, b, g) ((q_params){ (m), (b), (g) })

/* Llama, untied: 4-bit g32 by default; embedding 8-bit, lm_head 6-bit, and one module of
 * every other kind of packing; one module left unquantized (false), down_proj (112 wide)
 * unquantizable, as mlx-lm leaves it. BF16 scales. */
static void test_model_llama_mixed(void) {
    const qrule rules[] = {
        { "model.embed_tokens", 0, QP(CI_Q_AFFINE, 8, 64) },
        { "lm_head", 0, QP(CI_Q_AFFINE, 6, 32) },
        { "model.layers.0.self_attn.q_proj", 0, QP(CI_Q_AFFINE, 3, 32) },
        { "model.layers.0.self_attn.v_proj", 0, QP(CI_Q_AFFINE, 5, 64) },
        { "model.layers.0.mlp.gate_proj", 0, QP(CI_Q_AFFINE, 2, 64) },
        { "model.layers.1.mlp.up_proj", 0, QP(CI_Q_MXFP4, 4, 32) },
        { "model.layers.1.self_attn.o_proj", 0, QP(CI_Q_MXFP8, 8, 32) },
        { "model.layers.1.self_attn.k_proj", 1, QP(CI_Q_NONE, 0, 0) },
    };
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    check_requantized("tests/fixtures/llama_gqa_llama3", &def, rules, (int)(sizeof rules / sizeof rules[0]), CI_BF16, 300);
}

/* Qwen3, tied: 8-bit g64 with F16 scales; the quantized embedding is also the head. */
static void test_model_qwen3_tied(void) {
    q_params def = QP(CI_Q_AFFINE, 8, 64);
    check_requantized("tests/fixtures/qwen3_tied", &def, NULL, 0, CI_F16, 300);
}

/* Qwen3-MoE: experts as mlx switch_mlp stacks, 4-bit g32, the router 8-bit g64 (mlx-lm's
 * qwen3_moe quant_predicate); F32 scales. And the whole model in mxfp4. */
static void test_model_qwen3_moe(void) {
    char name[64];
    qrule rules[3];
    for (int l = 0; l < 3; l++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate", l);
        rules[l].module = strdup(name);
        rules[l].off = 0;
        rules[l].p = QP(CI_Q_AFFINE, 8, 64);
    }
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    check_requantized("tests/fixtures/qwen3_moe", &def, rules, 3, CI_F32, 300);
    def = QP(CI_Q_MXFP4, 4, 32);
    check_requantized("tests/fixtures/qwen3_moe", &def, NULL, 0, CI_F32, 300);
    for (int l = 0; l < 3; l++) free((void *)rules[l].module);
}

/* DeepSeek V3 (MLA + sigmoid-routed MoE with shared experts), as older mlx-community
 * conversions ship it: kv_b_proj quantized whole (per-head W_UK / W_UV become row views of
 * packed rows; W_UK goes through matmul_xw), routed experts as switch_mlp stacks. 4-bit
 * g32, BF16 scales; q_b_proj (48 wide) stays f32. */
static void test_model_deepseek_v3(void) {
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    const qrule rules[] = { { "model.layers.1.self_attn.kv_b_proj", 0, QP(CI_Q_AFFINE, 8, 32) },
                            { "model.layers.2.mlp.shared_experts.down_proj", 0, QP(CI_Q_MXFP4, 4, 32) } };
    check_requantized("tests/fixtures/deepseek_v3", &def, rules, 2, CI_BF16, 300);
}

/* DeepSeek V3.2 (DSA indexer on MLA) with kv_b_proj quantized whole: the per-head W_UK /
 * W_UV must be packed row views (a plain element offset into U32 codes would read other
 * heads' rows). 8-bit g32 for kv_b_proj, 4-bit g32 elsewhere; experts as switch_mlp. */
static void test_model_deepseek_v32(void) {
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    const qrule rules[] = { { "model.layers.0.self_attn.kv_b_proj", 0, QP(CI_Q_AFFINE, 8, 32) } };
    check_requantized("tests/fixtures/deepseek_v32_short", &def, rules, 1, CI_BF16, 300);
    check_requantized("tests/fixtures/deepseek_v32", &def, NULL, 0, CI_F16, 300);
}

/* ---- hybrid families in mlx-lm's layout -----------------------------------------------------
 *
 * Each source fixture (HF names and layouts) is converted as mlx-lm's sanitize would, then
 * quantized: the quantized copy must compute what the dequantized copy in the HF form
 * computes, so every rename, the +1 on Qwen's (1+w) norms (applied once: the loader must
 * see the sanitized form and not add it again) and the [C, K, 1] conv weights are checked
 * in real forward passes, prefill and steps. */

/* Qwen3.5 (mlx-lm qwen3_5.py / qwen3_5_moe.py): every key under language_model. (the hub's
 * model.language_model. becomes language_model.model.), vision tower and MTP dropped, fused
 * experts split into switch_mlp, routers and shared-expert gates 8-bit g64 (its
 * quant_predicate), norms +1, conv [C, K, 1]. */
static void test_model_qwen3_5_mlx(void) {
    mlx_san text = { .pre_from = "model.", .pre_to = "language_model.model.", .head_to = "language_model.lm_head",
                     .shift_norms = 1, .conv_t = 1 };
    mlx_san vl = { .pre_from = "model.language_model.", .pre_to = "language_model.model.",
                   .head_to = "language_model.lm_head", .shift_norms = 1, .conv_t = 1 };
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    check_requantized_as("tests/fixtures/qwen3_5", &text, &def, NULL, 0, CI_BF16, 300);
    def = QP(CI_Q_AFFINE, 8, 64);
    check_requantized_as("tests/fixtures/qwen3_5_vl_tied", &vl, &def, NULL, 0, CI_F16, 300);
    char names[8][96];
    qrule rules[8];
    for (int l = 0; l < 4; l++) {
        snprintf(names[2 * l], sizeof names[0], "language_model.model.layers.%d.mlp.gate", l);
        snprintf(names[2 * l + 1], sizeof names[0], "language_model.model.layers.%d.mlp.shared_expert_gate", l);
        rules[2 * l] = (qrule){ names[2 * l], 0, QP(CI_Q_AFFINE, 8, 64) };
        rules[2 * l + 1] = (qrule){ names[2 * l + 1], 0, QP(CI_Q_AFFINE, 8, 64) };
    }
    def = QP(CI_Q_AFFINE, 4, 32);
    check_requantized_as("tests/fixtures/qwen3_5_moe_hub", &vl, &def, rules, 8, CI_BF16, 300);
    def = QP(CI_Q_MXFP4, 4, 32);
    check_requantized_as("tests/fixtures/qwen3_5_moe_hub", &vl, &def, NULL, 0, CI_BF16, 300);
}

/* Qwen3-Next (mlx-lm qwen3_next.py): per-expert tensors stacked into switch_mlp, norms +1,
 * conv [C, K, 1], names otherwise kept (model.*); fused in_proj_qkvz / in_proj_ba
 * quantized like any Linear. */
static void test_model_qwen3_next_mlx(void) {
    mlx_san san = { .shift_norms = 1, .conv_t = 1 };
    char names[4][64];
    qrule rules[4];
    for (int l = 0; l < 4; l++) {
        snprintf(names[l], sizeof names[0], "model.layers.%d.mlp.gate", l);
        rules[l] = (qrule){ names[l], 0, QP(CI_Q_AFFINE, 8, 64) };
    }
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    check_requantized_as("tests/fixtures/qwen3_next", &san, &def, rules, 4, CI_BF16, 300);
    def = QP(CI_Q_AFFINE, 6, 64);
    check_requantized_as("tests/fixtures/qwen3_next_hub", &san, &def, NULL, 0, CI_F32, 300);
}

/* LFM2 (mlx-lm lfm2.py): conv [C, K, 1], names kept; tied quantized embedding as the head.
 * LFM2-MoE (lfm2_moe.py): every w1 / w3 / w2 renamed gate_proj / up_proj / down_proj
 * (dense layers too), experts stacked into switch_mlp, router 8-bit g64, expert_bias f32. */
static void test_model_lfm2_mlx(void) {
    mlx_san lfm2 = { .conv_t = 1 }, moe = { .conv_t = 1, .lfm2_names = 1 };
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    check_requantized_as("tests/fixtures/lfm2", &lfm2, &def, NULL, 0, CI_BF16, 300);
    def = QP(CI_Q_MXFP4, 4, 32);
    check_requantized_as("tests/fixtures/lfm2_hub", &lfm2, &def, NULL, 0, CI_BF16, 300);
    char names[5][64];
    qrule rules[5];
    for (int l = 0; l < 5; l++) {
        snprintf(names[l], sizeof names[0], "model.layers.%d.feed_forward.gate", l);
        rules[l] = (qrule){ names[l], 0, QP(CI_Q_AFFINE, 8, 64) };
    }
    def = QP(CI_Q_AFFINE, 4, 32);
    check_requantized_as("tests/fixtures/lfm2_moe", &moe, &def, rules, 5, CI_BF16, 300);
    def = QP(CI_Q_AFFINE, 8, 32);
    check_requantized_as("tests/fixtures/lfm2_moe_fused", &moe, &def, NULL, 0, CI_F16, 300);
}

/* Nemotron-H (mlx-lm nemotron_h.py): backbone. names, experts stacked into switch_mlp.fc1
 * (up) / fc2 (down), conv [C, K, 1]; the router (MoEGate, not a Linear) stays unquantized.
 * The latent fixture's expert down projections (24 wide) stay an unquantized stack. */
static void test_model_nemotron_h_mlx(void) {
    mlx_san mem = { .pre_from = "model.", .pre_to = "backbone.", .conv_t = 1, .relu2 = 1, .noq = ".mixer.gate" };
    mlx_san hub = { .conv_t = 1, .relu2 = 1, .noq = ".mixer.gate" };
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    check_requantized_as("tests/fixtures/nemotron_h", &mem, &def, NULL, 0, CI_BF16, 300);
    const qrule rules[] = { { "backbone.layers.1.mixer.switch_mlp.fc1", 0, QP(CI_Q_MXFP4, 4, 32) },
                            { "backbone.layers.1.mixer.fc1_latent_proj", 0, QP(CI_Q_AFFINE, 8, 64) } };
    check_requantized_as("tests/fixtures/nemotron_h_latent", &hub, &def, rules, 2, CI_F32, 300);
}

/* A Qwen3.5 checkpoint whose DeltaNet conv weights are in both layouts cannot say whether
 * its norms were shifted: refused, naming one tensor of each form. */
static void test_qwen3_5_mixed_forms(void) {
    char qdir[64], ddir[64], err[1024];
    CHECK(mkdirs(qdir, ddir) == 0, "mkdtemp");
    mlx_san san = { .shift_norms = 1, .conv_t = 2 };
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    int rc = requantize_as("tests/fixtures/qwen3_5", qdir, ddir, &san, &def, NULL, 0, CI_BF16, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    ci_model *m = NULL;
    CHECK(!rc && ci_model_open(qdir, NULL, &m, err, sizeof err) != 0, "mixed conv layouts accepted");
    ci_model_free(m);
    CHECK_HAS(err, "conv weights in two layouts");
    CHECK_HAS(err, "model.layers.0.linear_attn.conv1d.weight' is [C, K, 1]");
    CHECK_HAS(err, "model.layers.1.linear_attn.conv1d.weight' is [C, 1, K]");
    rmdirs(qdir, ddir);
}

/* ---- errors ------------------------------------------------------------------------------ */

static ci_tensor fake(const char *name, ci_dtype dt, int64_t a, int64_t b) {
    ci_tensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = dt;
    t.ndim = 2;
    t.shape[0] = a;
    t.shape[1] = b;
    return t;
}

/* q_infer: what the tensors say, and one-line refusals naming the tensor. */
static void test_infer(void) {
    char err[512];
    q_params p;
    ci_tensor w = fake("l.weight", CI_U32, 8, 64 * 4 / 32), s = fake("l.scales", CI_BF16, 8, 1), b = s;
    b.name = "l.biases";
    CHECK(q_infer(&w, &s, &b, 64, &p, err, sizeof err) == 0 && p.mode == CI_Q_AFFINE && p.bits == 4 && p.group == 64,
          "affine 4/64: %s", err);
    w.shape[1] = 64 * 3 / 32 * 2;   /* 96 cols, 3 bits: 9 words */
    w.shape[1] = 9;
    s.shape[1] = b.shape[1] = 3;
    CHECK(q_infer(&w, &s, &b, 96, &p, err, sizeof err) == 0 && p.bits == 3 && p.group == 32, "3-bit: %s", err);
    ci_tensor su8 = fake("m.scales", CI_U8, 8, 2), wm = fake("m.weight", CI_U32, 8, 8);
    CHECK(q_infer(&wm, &su8, NULL, 64, &p, err, sizeof err) == 0 && p.mode == CI_Q_MXFP4, "mxfp4: %s", err);
    wm.shape[1] = 16;
    CHECK(q_infer(&wm, &su8, NULL, 64, &p, err, sizeof err) == 0 && p.mode == CI_Q_MXFP8, "mxfp8: %s", err);
    su8.shape[1] = 4;
    wm.shape[1] = 8;
    CHECK(q_infer(&wm, &su8, NULL, 64, &p, err, sizeof err) < 0, "nvfp4 refused");
    CHECK_HAS(err, "nvfp4");
    ci_tensor wb = fake("x.weight", CI_BF16, 8, 64);
    CHECK(q_infer(&wb, &s, &b, 64, &p, err, sizeof err) < 0, "bf16 codes refused");
    CHECK_HAS(err, "x.weight");
    CHECK_HAS(err, "expected U32");
    w.shape[1] = 7;   /* 7 words for 64 columns: no bits fit */
    s.shape[1] = b.shape[1] = 1;
    CHECK(q_infer(&w, &s, &b, 64, &p, err, sizeof err) < 0, "odd width refused");
    CHECK_HAS(err, "l.weight");
    w.shape[1] = 14;  /* 7 bits */
    CHECK(q_infer(&w, &s, &b, 64, &p, err, sizeof err) < 0, "7-bit refused");
    CHECK_HAS(err, "does not produce");
    w.shape[1] = 8;
    b.dtype = CI_F16;
    CHECK(q_infer(&w, &s, &b, 64, &p, err, sizeof err) < 0, "bias dtype mismatch refused");
    CHECK_HAS(err, "l.biases");
    CHECK(q_infer(&w, &su8, NULL, 64, &p, err, sizeof err) < 0 || p.mode != CI_Q_AFFINE, "u8 scales are never affine");
}

/* q_config_read / q_config_module on config texts. */
static void test_config_block(void) {
    char err[512];
    q_config qc;
    q_params p;
    struct { const char *json; int present; ci_qmode mode; int bits, group; } cases[] = {
        { "{\"quantization\": {\"group_size\": 32, \"bits\": 3}}", 1, CI_Q_AFFINE, 3, 32 },
        { "{\"quantization\": {\"mode\": \"mxfp8\"}}", 1, CI_Q_MXFP8, 8, 32 },
        { "{\"quantization\": {}}", 1, CI_Q_AFFINE, 4, 64 },
        { "{\"quantization_config\": {\"group_size\": 128, \"bits\": 8}}", 1, CI_Q_AFFINE, 8, 128 },
        { "{\"quantization_config\": {\"quant_method\": \"mxfp4\"}}", 1, CI_Q_MXFP4, 4, 32 },
        { "{\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}", 0, 0, 0, 0 },
        { "{\"text_config\": {\"quantization\": {\"bits\": 6, \"group_size\": 64}}}", 1, CI_Q_AFFINE, 6, 64 },
        { "{\"vocab_size\": 3}", 0, 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *root = json_loads(cases[i].json, 0, NULL);
        const json_t *text = json_object_get(root, "text_config");
        int rc = q_config_read(root, text ? text : root, "config.json", &qc, err, sizeof err);
        CHECK(rc == 0, "case %zu: %s", i, err);
        CHECK(qc.present == cases[i].present, "case %zu: present %d", i, qc.present);
        if (qc.present)
            CHECK(qc.def.mode == cases[i].mode && qc.def.bits == cases[i].bits && qc.def.group == cases[i].group,
                  "case %zu: %s %d-bit group %d", i, q_mode_name(qc.def.mode), qc.def.bits, qc.def.group);
        json_decref(root);
    }
    /* per-module entries: an object (mode defaults to affine, as MLX's to_quantized), true,
     * false, and no entry */
    json_t *root = json_loads("{\"quantization\": {\"group_size\": 32, \"bits\": 4, \"mode\": \"mxfp4\", "
                              "\"a\": {\"bits\": 8}, \"b\": true, \"c\": false, \"d\": {\"mode\": \"mxfp8\"}}}",
                              0, NULL);
    CHECK(q_config_read(root, root, "config.json", &qc, err, sizeof err) == 0, "%s", err);
    CHECK(q_config_module(&qc, "a", &p) == Q_MOD_PARAMS && p.mode == CI_Q_AFFINE && p.bits == 8 && p.group == 64,
          "a: %s %d %d", q_mode_name(p.mode), p.bits, p.group);
    CHECK(q_config_module(&qc, "b", &p) == Q_MOD_DEFAULT && p.mode == CI_Q_MXFP4, "b");
    CHECK(q_config_module(&qc, "c", &p) == Q_MOD_OFF, "c");
    CHECK(q_config_module(&qc, "d", &p) == Q_MOD_PARAMS && p.mode == CI_Q_MXFP8 && p.bits == 8 && p.group == 32, "d");
    CHECK(q_config_module(&qc, "e", &p) == Q_MOD_DEFAULT && p.mode == CI_Q_MXFP4 && p.group == 32, "e");
    json_decref(root);
    /* refusals name the key */
    const char *bad[][2] = {
        { "{\"quantization\": {\"group_size\": 16, \"bits\": 4}}", "group_size 16" },
        { "{\"quantization\": {\"mode\": \"mxfp4\", \"bits\": 8}}", "mxfp4 with bits 8" },
        { "{\"quantization\": {\"bits\": \"4\"}}", "quantization.bits must be an integer" },
        { "{\"quantization\": 4}", "'quantization' must be an object" },
        { "{\"quantization\": {\"bits\": 4, \"x.y\": {\"bits\": 1}}}", "quantization.x.y" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        root = json_loads(bad[i][0], 0, NULL);
        CHECK(q_config_read(root, root, "config.json", &qc, err, sizeof err) < 0, "bad case %zu accepted", i);
        CHECK_HAS(err, bad[i][1]);
        json_decref(root);
    }
}

/* Opens dir after replacing its config's quantization block (both keys) by text; returns
 * the open's status and leaves the message in err. */
static int open_with_block(const char *dir, const char *text, char *err, size_t errlen) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    json_t *blk = json_loads(text, 0, NULL);
    if (!cfg || !blk) { json_decref(cfg); json_decref(blk); return snprintf(err, errlen, "bad test json"), -2; }
    json_object_set(cfg, "quantization", blk);
    json_object_set_new(cfg, "quantization_config", blk);
    json_dump_file(cfg, path, 0);
    json_decref(cfg);
    ci_model *m = NULL;
    int rc = ci_model_open(dir, NULL, &m, err, errlen);
    ci_model_free(m);
    return rc;
}

/* The binder against config.json: each refusal names the tensor or key and what was
 * expected. The checkpoint is the mixed Llama of test_model_llama_mixed. */
static void test_config_errors(void) {
    char qdir[64], ddir[64], err[1024];
    CHECK(mkdirs(qdir, ddir) == 0, "mkdtemp");
    const qrule rules[] = { { "lm_head", 0, QP(CI_Q_AFFINE, 6, 32) },
                            { "model.layers.1.self_attn.k_proj", 1, QP(CI_Q_NONE, 0, 0) } };
    q_params def = QP(CI_Q_AFFINE, 4, 32);
    int rc = requantize("tests/fixtures/llama_gqa_llama3", qdir, ddir, &def, rules, 2, CI_BF16, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) { rmdirs(qdir, ddir); return; }
    const char *ok = "{\"group_size\": 32, \"bits\": 4, \"lm_head\": {\"group_size\": 32, \"bits\": 6}}";
    CHECK(open_with_block(qdir, ok, err, sizeof err) == 0, "valid block: %s", err);
    /* the default disagrees with the tensors */
    CHECK(open_with_block(qdir, "{\"group_size\": 64, \"bits\": 4, \"lm_head\": {\"group_size\": 32, \"bits\": 6}}",
                          err, sizeof err) != 0, "group 64 accepted");
    CHECK_HAS(err, "model.embed_tokens.weight");
    CHECK_HAS(err, "affine 4-bit group 32");
    CHECK_HAS(err, "says affine 4-bit group 64");
    /* an override disagrees */
    CHECK(open_with_block(qdir, "{\"group_size\": 32, \"bits\": 4, \"lm_head\": {\"group_size\": 32, \"bits\": 8}}",
                          err, sizeof err) != 0, "lm_head 8-bit accepted");
    CHECK_HAS(err, "lm_head.weight");
    CHECK_HAS(err, "quantization.lm_head says affine 8-bit group 32");
    /* false for a module that is quantized */
    CHECK(open_with_block(qdir, "{\"group_size\": 32, \"bits\": 4, \"lm_head\": false}", err, sizeof err) != 0,
          "false accepted");
    CHECK_HAS(err, "lm_head.weight");
    CHECK_HAS(err, "false");
    /* an override for a module that has no scales */
    CHECK(open_with_block(qdir,
                          "{\"group_size\": 32, \"bits\": 4, \"lm_head\": {\"group_size\": 32, \"bits\": 6}, "
                          "\"model.layers.1.self_attn.k_proj\": {\"bits\": 4, \"group_size\": 32}}",
                          err, sizeof err) != 0, "override without scales accepted");
    CHECK_HAS(err, "model.layers.1.self_attn.k_proj.scales");
    /* malformed blocks are config errors */
    CHECK(open_with_block(qdir, "{\"group_size\": 32, \"bits\": 7}", err, sizeof err) != 0, "7 bits accepted");
    CHECK_HAS(err, "bits 7");
    CHECK(open_with_block(qdir, "{\"group_size\": 32, \"bits\": 4, \"mode\": \"nvfp4\"}", err, sizeof err) != 0,
          "nvfp4 accepted");
    CHECK_HAS(err, "quantization.mode 'nvfp4'");
    CHECK(open_with_block(qdir, "{\"group_size\": 32, \"bits\": 4, \"lm_head\": 6}", err, sizeof err) != 0,
          "override 6 accepted");
    CHECK_HAS(err, "quantization.lm_head");
    CHECK(open_with_block(qdir, "{\"group_size\": 32, \"bits\": 4, \"mode\": \"mxfp4\"}", err, sizeof err) != 0,
          "mxfp4 with group 32 bits 4 is valid, but the tensors are affine");
    CHECK_HAS(err, "says mxfp4 4-bit group 32");
    /* no block at all: the packing comes from the tensors alone */
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", qdir);
    json_t *cfg = json_load_file(path, 0, NULL);
    json_object_del(cfg, "quantization");
    json_object_del(cfg, "quantization_config");
    json_dump_file(cfg, path, 0);
    json_decref(cfg);
    ci_model *m = NULL;
    CHECK(ci_model_open(qdir, NULL, &m, err, sizeof err) == 0, "no block: %s", err);
    ci_model_free(m);
    rmdirs(qdir, ddir);
}

/* ---- memory: the model stays packed -------------------------------------------------------
 *
 * A 4-bit g64 Llama of about 110M parameters (62 MB on disk; 440 MB if it were dequantized to
 * f32) is streamed to disk with random codes, opened, and run (prefill + decode steps). The
 * process's resident memory may grow by the file (mapped pages) plus scratch, never by a
 * dequantized copy: growth <= 1.1 x file size + 16 MB of caches and scratch. */

typedef struct {
    int n;
    st_wdesc d[128];
    int kind[128];       /* 0 codes, 1 scales, 2 biases, 3 norm */
} bigq;

static void bq_add(bigq *b, const char *name, ci_dtype dt, int64_t r, int64_t c, int kind) {
    if (b->n == (int)(sizeof b->d / sizeof b->d[0])) return;   /* the test lists fewer */
    st_wdesc *w = &b->d[b->n];
    memset(w, 0, sizeof *w);
    w->name = strdup(name);
    w->dtype = dt;
    w->ndim = c ? 2 : 1;
    w->shape[0] = r;
    w->shape[1] = c;
    b->kind[b->n++] = kind;
}

static void bq_module(bigq *b, const char *base, int64_t rows, int64_t cols) {
    char n[256];
    snprintf(n, sizeof n, "%s.weight", base); bq_add(b, n, CI_U32, rows, cols / 8, 0);
    snprintf(n, sizeof n, "%s.scales", base); bq_add(b, n, CI_BF16, rows, cols / 64, 1);
    snprintf(n, sizeof n, "%s.biases", base); bq_add(b, n, CI_BF16, rows, cols / 64, 2);
}

static int bq_fill(void *ctx, int i, void *buf, size_t nbytes) {
    bigq *b = ctx;
    if (b->kind[i] == 0) {
        uint32_t *u = buf;
        for (size_t k = 0; k < nbytes / 4; k++) u[k] = rnd_u32() ^ (rnd_u32() << 16);
    } else {
        uint16_t *h = buf;
        float v = b->kind[i] == 1 ? 0.004f : b->kind[i] == 2 ? -0.03f : 1.0f;
        for (size_t k = 0; k < nbytes / 2; k++) h[k] = ci_f32_to_bf16(v * (b->kind[i] == 3 ? 1.0f : rnd(0.5f, 1.5f)));
    }
    return 0;
}

static size_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
        fclose(f);
    }
    return (size_t)res * 4096;
}

/* Writes the checkpoint into dir; returns its file size (0 on failure). */
static size_t write_big_llama(const char *dir, char *err, size_t errlen) {
    const int64_t D = 1024, F = 2816, V = 32000, KV = 256, L = 4;
    bigq b = { 0 };
    bq_module(&b, "model.embed_tokens", V, D);
    bq_module(&b, "lm_head", V, D);
    bq_add(&b, "model.norm.weight", CI_BF16, D, 0, 3);
    char n[128];
    for (int l = 0; l < L; l++) {
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l); bq_add(&b, n, CI_BF16, D, 0, 3);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l); bq_add(&b, n, CI_BF16, D, 0, 3);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_proj", l); bq_module(&b, n, D, D);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_proj", l); bq_module(&b, n, KV, D);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.v_proj", l); bq_module(&b, n, KV, D);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj", l); bq_module(&b, n, D, D);
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate_proj", l); bq_module(&b, n, F, D);
        snprintf(n, sizeof n, "model.layers.%d.mlp.up_proj", l); bq_module(&b, n, F, D);
        snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj", l); bq_module(&b, n, D, F);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = st_write_file(path, b.d, b.n, bq_fill, &b, err, errlen);
    size_t bytes = 0;
    for (int i = 0; i < b.n; i++) {
        size_t nb = ci_dtype_size(b.d[i].dtype) * (size_t)b.d[i].shape[0] * (size_t)(b.d[i].ndim == 2 ? b.d[i].shape[1] : 1);
        bytes += nb;
        free((void *)b.d[i].name);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": %lld, \"hidden_size\": %lld, \"intermediate_size\": %lld, "
               "\"num_hidden_layers\": %lld, \"num_attention_heads\": 16, \"num_key_value_heads\": 4, \"head_dim\": 64, "
               "\"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"tie_word_embeddings\": false, "
               "\"quantization\": {\"group_size\": 64, \"bits\": 4}}\n",
            (long long)V, (long long)D, (long long)F, (long long)L);
    fclose(f);
    return rc ? 0 : bytes;
}

static void rm_big(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", dir); remove(p);
    snprintf(p, sizeof p, "%s/config.json", dir); remove(p);
    remove(dir);
}

static void test_resident_memory(void) {
    char dir[] = "/tmp/cinfer_tqbig_XXXXXX", err[1024];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    size_t file = write_big_llama(dir, err, sizeof err);
    CHECK(file > 0, "writing the checkpoint: %s", err);
    size_t before = rss_bytes();
    ci_model *m = NULL;
    ci_session *s = NULL;
    int rc = ci_model_open(dir, NULL, &m, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (!rc) rc = ci_session_new(m, 16, &s, err, sizeof err);
    float *logits = malloc(32000 * sizeof(float));
    int toks[8] = { 1, 500, 31999, 7, 1234, 20000, 42, 3 };
    if (!rc) rc = ci_forward(s, toks, 6, logits, 0, err, sizeof err);
    for (int t = 6; !rc && t < 8; t++) rc = ci_forward(s, &toks[t], 1, logits, 0, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    size_t grown = rss_bytes() - before;
    int finite = 1;
    for (int i = 0; i < 32000; i++) finite &= isfinite(logits[i]) != 0;
    CHECK(finite, "non-finite logits");
    CHECK(grown <= file + file / 10 + ((size_t)16 << 20),
          "resident memory grew by %.1f MB for a %.1f MB checkpoint (bound 1.1x + 16 MB)", grown / 1e6, file / 1e6);
    if (getenv("TQ_VERBOSE")) printf("  resident +%.1f MB, file %.1f MB\n", grown / 1e6, file / 1e6);
    free(logits);
    ci_session_free(s);
    ci_model_free(m);
    if (getenv("TQ_KEEP")) printf("  kept %s\n", dir);
    else rm_big(dir);
}

/* ---- bench ------------------------------------------------------------------------------ */

/* With one thread the op runs on the caller, and process CPU time is what it cost even
 * on a busy machine; with more threads, wall time. */
static int bench_cpu_clock;
static double now_s(void) {
    struct timespec ts;
    clock_gettime(bench_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double bench_mm(ci_backend *be, const ci_mat *W, size_t bytes) {
    float *x = malloc((size_t)W->cols * sizeof(float)), *y = malloc((size_t)W->rows * sizeof(float));
    for (int64_t i = 0; i < W->cols; i++) x[i] = rnd(-1, 1);
    be->matmul(be, y, x, 1, W);
    int reps = 0;
    double t0 = now_s(), t;
    do { be->matmul(be, y, x, 1, W); reps++; } while ((t = now_s() - t0) < 1.0);
    free(x); free(y);
    return (double)bytes * reps / t / 1e9;
}

/* Default [8192 x 4096]: 64 MiB in bf16, 16 MiB + scales in 4-bit (from memory, not cache). */
static int bench(int64_t R, int64_t C, int threads, ci_isa isa, int int16_act, int mlx) {
    ci_backend *be = ci_backend_cpu_new(threads, isa);
    if (!be) return 1;
    if ((int16_act && !ci_backend_cpu_int16_act(be)) || (mlx && !ci_backend_cpu_amx_mlx_act(be, mlx == 2 ? 8 : 16))) {
        fprintf(stderr, "test_quant --bench: this CPU's %s backend takes no %s\n", be->name, mlx == 2 ? "mlx8" : mlx ? "mlx" : "int16");
        be->free(be);
        return 1;
    }
    bench_cpu_clock = be->n_threads == 1;
    uint16_t *wb = malloc((size_t)(R * C) * 2);
    for (int64_t i = 0; i < R * C; i++) wb[i] = ci_f32_to_bf16(rnd(-1, 1));
    ci_mat B = { .data = wb, .dtype = CI_BF16, .rows = R, .cols = C };
    double gb = bench_mm(be, &B, (size_t)(R * C) * 2);
    printf("bench %s threads=%d (%s time) bf16 matvec [%lld x %lld]: %.1f GB/s (%.2f ms)\n", be->name, be->n_threads,
           bench_cpu_clock ? "CPU" : "wall", (long long)R, (long long)C, gb, (double)R * C * 2 / gb / 1e6);
    free(wb);
    for (int bits = 4; bits <= 8; bits += 4) {
        qmat Q;
        qmat_make(&Q, CI_Q_AFFINE, bits, 64, CI_BF16, R, C, 0);
        Q.d.grid_rows = R;   /* as a loaded model's (io/weights.c): --mlx-amx's params copy is taken */
        free(Q.w);
        Q.w = NULL;
        size_t bytes = (size_t)(R * C * bits / 8) + (size_t)(R * C / 64) * 4;
        double q = bench_mm(be, &Q.m, bytes);
        printf("bench %s threads=%d affine %d-bit g64 matvec: %.1f GB/s (%.2f ms, %.2fx the bf16 time)\n", be->name,
               be->n_threads, bits, q, (double)bytes / q / 1e6, ((double)bytes / q) / ((double)R * C * 2 / gb));
        qmat_free(&Q);
    }
    be->free(be);
    /* whole-model decode on the 110M-parameter 4-bit Llama of test_resident_memory */
    char dir[] = "/tmp/cinfer_tqbig_XXXXXX", err[1024];
    if (!mkdtemp(dir) || !write_big_llama(dir, err, sizeof err)) return 1;
    ci_model_opts o = { .n_threads = threads, .isa = (int)isa, .int16_act = int16_act, .mlx_amx = mlx };
    ci_model *m = NULL;
    ci_session *s = NULL;
    if (ci_model_open(dir, &o, &m, err, sizeof err) || ci_session_new(m, 300, &s, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    float *logits = malloc(32000 * sizeof(float));
    int tok = 1, n = 0;
    ci_forward(s, &tok, 1, logits, 0, err, sizeof err);
    double t0 = now_s(), t;
    do { tok = 2 + n % 1000; ci_forward(s, &tok, 1, logits, 0, err, sizeof err); n++; } while ((t = now_s() - t0) < 2.0 && n < 250);
    printf("bench decode 4-bit llama (%.0fM params, %.1f MB read per token): %.1f tok/s, %.1f GB/s\n", info.n_params / 1e6,
           info.decode_bytes / 1e6, n / t, info.decode_bytes * (n / t) / 1e9);
    free(logits);
    ci_session_free(s);
    ci_model_free(m);
    rm_big(dir);
    return 0;
}

/* Prefill GEMM speed: affine 4- and 8-bit g64 [R x C] by n token rows, the f32 path and the
 * int16-activation path of one kernel set, GFLOP/s (2 R C n per matmul; the best of 5 runs of
 * >= 0.3 s each, so a busy neighbour shows as spread rather than as the number). */
static int bench_gemm(int64_t R, int64_t C, int n, int threads, ci_isa isa) {
    if (R <= 0 || C <= 0 || C % 64 || n <= 0 || threads < 0) {
        fprintf(stderr, "test_quant --bench-gemm: want ROWS > 0, COLS a multiple of 64 (group 64), N > 0; got %lld %lld %d\n",
                (long long)R, (long long)C, n);
        return 1;
    }
    /* the exact f32 path, int16 activations, and (where the CPU has AVX-512 VNNI) amx_mlx.c's kernels */
    ci_backend *be[3] = { ci_backend_cpu_new(threads, isa), ci_backend_cpu_new(threads, isa), ci_backend_cpu_new(threads, isa) };
    if (!be[0] || !be[1] || !be[2] || !ci_backend_cpu_int16_act(be[1])) {
        fprintf(stderr, "test_quant --bench-gemm: no int16-activation kernels for this ISA\n");
        return 1;
    }
    const int np = ci_backend_cpu_amx_mlx(be[2]) ? 3 : 2;
    bench_cpu_clock = be[0]->n_threads == 1;
    float *x = malloc((size_t)(n * C) * sizeof(float)), *y = malloc((size_t)(n * R) * sizeof(float));
    for (int64_t i = 0; i < n * C; i++) x[i] = rnd(-1, 1);
    for (int bits = 4; bits <= 8; bits += 4) {
        qmat Q;
        qmat_make(&Q, CI_Q_AFFINE, bits, 64, CI_BF16, R, C, 0);
        for (int p = 0; p < np; p++) {
            double best = 0;
            for (int rep = 0; rep < 5; rep++) {
                int k = 0;
                double t0 = now_s(), t;
                do { be[p]->matmul(be[p], y, x, n, &Q.m); k++; } while ((t = now_s() - t0) < 0.3);
                double g = 2.0 * (double)R * (double)C * n * k / t / 1e9;
                if (g > best) best = g;
            }
            printf("bench-gemm %s threads=%d (%s time) %d-bit g64 [%lld x %lld] n=%d %s: %.1f GFLOP/s\n", be[p]->name,
                   be[p]->n_threads, bench_cpu_clock ? "CPU" : "wall", bits, (long long)R, (long long)C, n,
                   p == 2 ? "mlx" : p ? "int16" : "f32", best);
        }
        qmat_free(&Q);
    }
    free(x);
    free(y);
    for (int p = 0; p < 3; p++) be[p]->free(be[p]);
    return 0;
}

int main(int argc, char **argv) {
    find_isas();
    if (argc > 1 && !strcmp(argv[1], "--bench")) {   /* --bench [rows cols threads [scalar|avx2|avx512|avx2-int16|avx512-int16|avx512-mlx|avx512-mlx8]] */
        const char *in = argc > 5 ? argv[5] : "";
        return bench(argc > 3 ? atoll(argv[2]) : 8192, argc > 3 ? atoll(argv[3]) : 4096, argc > 4 ? atoi(argv[4]) : 0,
                     !*in ? CI_ISA_AUTO : !strcmp(in, "scalar") ? CI_ISA_SCALAR : !strncmp(in, "avx2", 4) ? CI_ISA_AVX2 : CI_ISA_AVX512,
                     strstr(in, "-int16") != NULL, strstr(in, "-mlx8") ? 2 : strstr(in, "-mlx") != NULL);
    }
    if (argc > 4 && !strcmp(argv[1], "--bench-gemm")) {   /* --bench-gemm rows cols n [threads [avx2|avx512]] */
        const char *in = argc > 6 ? argv[6] : "";
        return bench_gemm(atoll(argv[2]), atoll(argv[3]), atoi(argv[4]), argc > 5 ? atoi(argv[5]) : 1,
                          !*in ? CI_ISA_AUTO : !strcmp(in, "avx2") ? CI_ISA_AVX2 : CI_ISA_AVX512);
    }
    TEST_RUN(test_matmul_all);
    TEST_RUN(test_embed_get);
    TEST_RUN(test_matmul_xw);
    TEST_RUN(test_model_llama_mixed);
    TEST_RUN(test_model_qwen3_tied);
    TEST_RUN(test_model_qwen3_moe);
    TEST_RUN(test_model_deepseek_v3);
    TEST_RUN(test_model_deepseek_v32);
    TEST_RUN(test_model_qwen3_5_mlx);
    TEST_RUN(test_model_qwen3_next_mlx);
    TEST_RUN(test_model_lfm2_mlx);
    TEST_RUN(test_model_nemotron_h_mlx);
    TEST_RUN(test_qwen3_5_mixed_forms);
    TEST_RUN(test_infer);
    TEST_RUN(test_config_block);
    TEST_RUN(test_config_errors);
    TEST_RUN(test_resident_memory);
    TEST_EXIT();
}
