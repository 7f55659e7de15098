/* test_determinism.c — a row of matmul(x, n) does not depend on n.
 *
 * The server decodes a request alone (n = 1) or beside others (n = 2..parallel), and
 * prefills it in chunks of any size, so the CPU matmul must give token row t the same bits
 * whatever the batch around it is: the decode tiles (n <= 4) and the packed prefill path
 * (n > 4) must sum every output in one order. Checked bit for bit for each ISA the CPU has,
 * every weight kind (f32, bf16, f16, fp8 with 128x128 block scales, fp8 whose huge block
 * scale takes the exact fallback, MLX affine 3/4/8-bit, mxfp4, mxfp8 incl. an oversized
 * scale), with cols > 512 (several prefill column chunks, a partial last one) and a row
 * count that is not a multiple of the 4-row tile. Also the row-wise ops (swiglu, add,
 * rmsnorm) for a row width that is not a multiple of the vector length.
 *
 * `test_determinism --bench [rows cols [threads [isa]]]` instead times matmul at n = 1, 4,
 * 128 for bf16, fp8 and 4/8-bit weights (best of 5 runs; default 2 threads, the best ISA;
 * with 1 thread it reports CPU time, steadier on a shared machine). */
#include "check.h"
#include "backend/backend.h"
#include "core/tensor.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / (float)0x1000000; }

static const struct { ci_isa isa; const char *name; int mlx_amx; } isas[] = {
    { CI_ISA_SCALAR, "cpu-scalar", 0 }, { CI_ISA_AVX2, "cpu-avx2", 0 }, { CI_ISA_AVX512, "cpu-avx512", 0 },
    { CI_ISA_AVX512BF16, "cpu-avx512-bf16", 0 }, { CI_ISA_AMXBF16, "cpu-amx-bf16", 0 },
    { CI_ISA_AVX512, "cpu-avx512-amx-mlx", 1 },   /* MLX weights as amx_mlx.c computes them (ci_backend_cpu_amx_mlx):
                                                   * AMX-INT8 tiles where the CPU has them, else AVX-512 VNNI */
    { CI_ISA_AVX512, "cpu-avx512-vnni-mlx", 2 },  /* the same on AVX-512 VNNI alone (CINFER_CPU_MLX_TILES=0) */
    { CI_ISA_AVX512, "cpu-avx512-amx-mlx8", 3 },  /* both with x rounded to int8 (--mlx-amx8) */
    { CI_ISA_AVX512, "cpu-avx512-vnni-mlx8", 4 },
    { CI_ISA_AVX2, "cpu-avx2-mlx", 5 },           /* the same math on AVX2 (mlx_avx2.c), any AVX2 CPU */
    { CI_ISA_AVX2, "cpu-avx2-mlx8", 6 },
};
/* whether isas' mlx_amx m asks for x rounded to int8 (--mlx-amx8) */
static int mlx_act8(int m) { return m == 3 || m == 4 || m == 6; }

/* isas[ii]'s backend, or NULL where this CPU lacks it. */
static ci_backend *isa_backend(size_t ii, int threads) {
    ci_backend *be = ci_backend_cpu_new(threads, isas[ii].isa);
    const int vnni = isas[ii].mlx_amx == 2 || isas[ii].mlx_amx == 4;
    if (vnni) setenv("CINFER_CPU_MLX_TILES", "0", 1);
    const int mlx_ok = !be || !isas[ii].mlx_amx || ci_backend_cpu_amx_mlx_act(be, mlx_act8(isas[ii].mlx_amx) ? 8 : 16);
    if (vnni) unsetenv("CINFER_CPU_MLX_TILES");
    if (!mlx_ok) {
        be->free(be);
        return NULL;
    }
    return be;
}

/* ---- weights ----------------------------------------------------------------------------- */

typedef enum { K_F32, K_BF16, K_F16, K_FP8, K_FP8_HUGE, K_Q3, K_Q4, K_Q8, K_MXFP4, K_MXFP8, K_MXFP8_HUGE, N_KINDS } kind;
static const char *kind_name[N_KINDS] = { "f32", "bf16", "f16", "fp8", "fp8 huge scale", "affine 3-bit g128",
                                          "affine 4-bit g64", "affine 8-bit g32", "mxfp4", "mxfp8",
                                          "mxfp8 huge scale" };

typedef struct {
    ci_mat m;
    ci_qdesc d;
    void *data, *scales, *biases;
} wmat;

static void wmat_free(wmat *w) { free(w->data); free(w->scales); free(w->biases); }

static int group_force;   /* nonzero: the group size of the quantized kinds instead of theirs */

static void make_w(wmat *w, kind k, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    w->m.rows = rows;
    w->m.cols = cols;
    if (k <= K_FP8_HUGE) {
        static const ci_dtype dts[] = { CI_F32, CI_BF16, CI_F16, CI_F8_E4M3, CI_F8_E4M3 };
        ci_dtype dt = dts[k];
        size_t es = ci_dtype_size(dt);
        w->data = malloc((size_t)(rows * cols) * es);
        for (int64_t i = 0; i < rows * cols; i++) {
            float v = rnd(-1, 1);
            if (dt == CI_F32) ((float *)w->data)[i] = v;
            else if (dt == CI_BF16) ((uint16_t *)w->data)[i] = ci_f32_to_bf16(v);
            else if (dt == CI_F16) ((uint16_t *)w->data)[i] = ci_f32_to_f16(v);
            else ((uint8_t *)w->data)[i] = (uint8_t)(rnd_u32() & 0xff) & (k == K_FP8_HUGE ? 0x9f : 0xff);
        }
        if (dt == CI_F8_E4M3)   /* no NaN codes */
            for (int64_t i = 0; i < rows * cols; i++)
                if ((((uint8_t *)w->data)[i] & 0x7f) == 0x7f) ((uint8_t *)w->data)[i] ^= 1;
        w->m.data = w->data;
        w->m.dtype = dt;
        if (dt == CI_F8_E4M3) {
            int64_t rb = (rows + 127) / 128, cb = (cols + 127) / 128;
            float *s = malloc((size_t)(rb * cb) * sizeof(float));
            for (int64_t i = 0; i < rb * cb; i++) s[i] = rnd(0.001f, 0.01f);
            if (k == K_FP8_HUGE) s[cb + 1 < rb * cb ? cb + 1 : 0] = 0x1p121f;   /* 2nd row block */
            w->scales = s;
            w->m.scale = s;
            w->m.scale_dtype = CI_F32;
            w->m.block = 128;
        }
        return;
    }
    static const int bits_of[] = { [K_Q3] = 3, [K_Q4] = 4, [K_Q8] = 8, [K_MXFP4] = 4, [K_MXFP8] = 8, [K_MXFP8_HUGE] = 8 };
    static const int group_of[] = { [K_Q3] = 128, [K_Q4] = 64, [K_Q8] = 32, [K_MXFP4] = 32, [K_MXFP8] = 32, [K_MXFP8_HUGE] = 32 };
    int bits = bits_of[k], group = group_force ? group_force : group_of[k], mx = k >= K_MXFP4;
    int64_t ng = cols / group, rb = cols * bits / 8;
    uint8_t *packed = malloc((size_t)(rows * rb));
    for (int64_t i = 0; i < rows * rb; i++) packed[i] = (uint8_t)rnd_u32();
    if (k == K_MXFP8 || k == K_MXFP8_HUGE)
        for (int64_t i = 0; i < rows * rb; i++) {
            if ((packed[i] & 0x7f) == 0x7f) packed[i] ^= 1;
            if (k == K_MXFP8_HUGE) packed[i] &= 0x9f;
        }
    if (mx) {
        uint8_t *s = malloc((size_t)(rows * ng));
        for (int64_t i = 0; i < rows * ng; i++) s[i] = (uint8_t)(117 + rnd_u32() % 14);
        if (k == K_MXFP8_HUGE) s[ng + 3] = 248;   /* 2^121: beyond the folded 2^8 multiplier */
        w->scales = s;
        w->d.scale_dtype = CI_F8_E8M0;
    } else {
        uint16_t *s = malloc((size_t)(rows * ng) * 2), *b = malloc((size_t)(rows * ng) * 2);
        for (int64_t i = 0; i < rows * ng; i++) {
            s[i] = ci_f32_to_bf16(rnd(0.002f, 0.1f));
            b[i] = ci_f32_to_bf16(rnd(-0.6f, 0.6f));
        }
        w->scales = s;
        w->biases = b;
        w->d.scale_dtype = CI_BF16;
    }
    w->d.mode = k == K_MXFP4 ? CI_Q_MXFP4 : mx ? CI_Q_MXFP8 : CI_Q_AFFINE;
    w->d.bits = bits;
    w->d.group = group;
    w->d.scales = w->scales;
    w->d.biases = w->biases;
    w->data = packed;
    w->m.data = packed;
    w->m.dtype = CI_U32;
    w->m.scale = &w->d;
}

/* ---- the check ----------------------------------------------------------------------------- */

enum { NMAX = 64 };

static void check_kind(ci_backend *be, const char *isa, kind k, int64_t rows, int64_t cols) {
    /* 5..7: an int16 prefill (gemm) with 1..3 tokens in its last group of 4 */
    static const int ns[] = { 1, 2, 3, 4, 5, 6, 7, 17, NMAX };
    wmat w;
    make_w(&w, k, rows, cols);
    float *x = malloc((size_t)(NMAX * cols) * sizeof(float));
    float *ref = malloc((size_t)(NMAX * rows) * sizeof(float)), *y = malloc((size_t)(NMAX * rows) * sizeof(float));
    for (int64_t i = 0; i < NMAX * cols; i++) x[i] = rnd(-1, 1);
    /* the reference: every row of x at once (the prefill path) */
    be->matmul(be, ref, x, NMAX, &w.m);
    int finite = 1;
    for (int64_t i = 0; i < NMAX * rows; i++) finite &= isfinite(ref[i]) != 0;
    CHECK(finite, "%s %s [%lld x %lld]: non-finite output", isa, kind_name[k], (long long)rows, (long long)cols);
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        int n = ns[ni];
        /* rows [t0, t0 + n) of x as a batch of their own: each must match its row of ref */
        for (int t0 = 0; t0 + n <= NMAX; t0 += n > 8 ? NMAX : 7 * n + 1) {
            for (int64_t i = 0; i < n * rows; i++) y[i] = NAN;
            be->matmul(be, y, x + (int64_t)t0 * cols, n, &w.m);
            int same = memcmp(y, ref + (int64_t)t0 * rows, (size_t)(n * rows) * sizeof(float)) == 0;
            if (!same) {
                int64_t bad = 0;
                while (bad < n * rows && !memcmp(&y[bad], &ref[t0 * rows + bad], sizeof(float))) bad++;
                CHECK(0, "%s %s [%lld x %lld]: rows %d..%d as a batch of %d differ from the batch of %d: token %lld row %lld %.9g vs %.9g",
                      isa, kind_name[k], (long long)rows, (long long)cols, t0, t0 + n - 1, n, NMAX,
                      (long long)(t0 + bad / rows), (long long)(bad % rows), y[bad], ref[t0 * rows + bad]);
            }
        }
    }
    free(x); free(ref); free(y);
    wmat_free(&w);
}

static void test_matmul_rows_independent_of_batch(void) {
    int ran = 0;
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        ci_backend *be = isa_backend(ii, 2);
        if (!be) continue;   /* the CPU lacks this ISA */
        ran++;
        for (int k = 0; k < N_KINDS; k++) {
            /* dense: 3 chunks; 8 chunks + 4 columns (a partial vector in a partial chunk).
             * quantized: multiples of 128 (every group size), 1536 and 4224 = 8 chunks + 128 */
            int q = k >= K_Q3;
            check_kind(be, isas[ii].name, (kind)k, 37, 1536);
            check_kind(be, isas[ii].name, (kind)k, 21, q ? 4224 : 4100);
        }
        be->free(be);
    }
    CHECK(ran >= 1, "no CPU backend");
}

/* Small column counts (one chunk) too: the old decode/prefill split agreed there, keep it. */
static void test_matmul_small_cols(void) {
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        ci_backend *be = isa_backend(ii, 3);
        if (!be) continue;
        check_kind(be, isas[ii].name, K_BF16, 9, 200);
        check_kind(be, isas[ii].name, K_FP8, 9, 300);
        check_kind(be, isas[ii].name, K_Q4, 9, 256);
        be->free(be);
    }
}

/* cpu-avx512-bf16 (where the CPU has AVX512-BF16) and cpu-amx-bf16 (where it has AMX-BF16) compute
 * what they say for bf16 weights: the dot of x rounded to bf16 (nearest even) with the weights,
 * products exact, f32 sums: within 1e-5 (relative to sum |x_bf16 * w|) of that dot in double, for
 * decode, short prompts and prefill (AMX: its rows form at 1 and 9 tokens, its tokens form at 33)
 * and widths with partial vectors, chunks and AMX segments; and it is not the f32 path (which it
 * would be if the rounding were skipped): some output differs from the f32 path's by more. */
static void bf16_act_precision(ci_isa isa, const char *name) {
    ci_backend *be = ci_backend_cpu_new(2, isa), *f32 = ci_backend_cpu_new(2, CI_ISA_AVX512);
    if (!be) {
        printf("NOTE %s is not available on this CPU: its precision not checked\n", name);
        if (f32) f32->free(f32);
        return;
    }
    CHECK(strcmp(be->name, name) == 0, "backend name %s", be->name);
    static const int64_t shapes[][2] = { { 37, 1536 }, { 21, 4100 }, { 9, 200 }, { 5, 31 } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1];
        wmat w;
        make_w(&w, K_BF16, rows, cols);
        static const int ns[] = { 1, 9, 33 };
        for (int ni = 0; ni < 3; ni++) {
            const int n = ns[ni];
            float *x = malloc((size_t)(n * cols) * sizeof(float)), *y = malloc((size_t)(n * rows) * sizeof(float));
            float *yf = malloc((size_t)(n * rows) * sizeof(float));
            for (int64_t i = 0; i < n * cols; i++) x[i] = rnd(-1, 1);
            be->matmul(be, y, x, n, &w.m);
            f32->matmul(f32, yf, x, n, &w.m);
            double worst = 0, apart = 0;
            for (int t = 0; t < n; t++)
                for (int64_t r = 0; r < rows; r++) {
                    double s = 0, a = 0;
                    for (int64_t c = 0; c < cols; c++) {
                        double p = (double)ci_bf16_to_f32(ci_f32_to_bf16(x[t * cols + c])) *
                                   ci_bf16_to_f32(((const uint16_t *)w.data)[r * cols + c]);
                        s += p;
                        a += fabs(p);
                    }
                    double e = fabs(y[t * rows + r] - s) / (a > 0 ? a : 1);
                    worst = e > worst ? e : worst;
                    double d = fabs((double)y[t * rows + r] - yf[t * rows + r]) / (a > 0 ? a : 1);
                    apart = d > apart ? d : apart;
                }
            CHECK(worst <= 1e-5, "%s [%lld x %lld] n=%d: %.3g from the bf16-rounded dot", name, (long long)rows,
                  (long long)cols, n, worst);
            CHECK(apart > 1e-5, "%s [%lld x %lld] n=%d: within %.3g of the f32 path (x not rounded?)", name,
                  (long long)rows, (long long)cols, n, apart);
            free(x); free(y); free(yf);
        }
        wmat_free(&w);
    }
    be->free(be);
    f32->free(f32);
}

static void test_bf16_act_precision(void) {
    bf16_act_precision(CI_ISA_AVX512BF16, "cpu-avx512-bf16");
    bf16_act_precision(CI_ISA_AMXBF16, "cpu-amx-bf16");
}

/* ci_backend_cpu_amx_mlx (--mlx-amx) puts MLX affine 4- and 8-bit weights (groups of a multiple of
 * 32) on AMX-INT8 tiles and AVX-512 VNNI, or on AVX-512 VNNI alone on a CPU without the tiles
 * (amx_mlx.c): codes exact, x rounded to int16 per block of 64 columns (32 where the group is not a multiple of 64), d = max|x| / 32639, exact integer code
 * sums, f32 scaling; with act 8 (--mlx-amx8) the same for 8-bit W and x rounded to int8 (d = max|x| / 127) for
 * 4-bit W. Checked for the vector kernel (1 token) and the tiles (9 and 33 tokens),
 * groups 32 / 64 / 128 / 96, widths with a partial last chunk, relative to the sum of |terms|: within
 * 1e-6 of that formula in double; within the rounding's own bound of the f32 path; measurably not
 * the f32 path where x̃ is not x; a NaN in one token's x reaches exactly that token's outputs. */
static double amx_mlx_ref(const wmat *w, const float *x, int64_t r, double *mag, double *bound, double *exact, float qmax) {
    const int64_t cols = w->m.cols, G = w->d.group, ng = cols / G, bits = w->d.bits, B = G % 64 ? 32 : 64;
    const uint8_t *row = (const uint8_t *)w->data + r * cols * bits / 8;
    double y = 0;
    *mag = *bound = *exact = 0;
    for (int64_t b0 = 0; b0 < cols; b0 += B) {
        float amax = 0;
        for (int64_t j = b0; j < b0 + B; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / qmax, id = amax > 0 ? qmax / amax : 0.0f;
        for (int64_t j = b0; j < b0 + B; j++) {
            unsigned q = bits == 4 ? (row[j / 2] >> (4 * (j & 1))) & 15 : row[j];
            double s = ci_bf16_to_f32(((const uint16_t *)w->scales)[r * ng + j / G]);
            double bb = ci_bf16_to_f32(((const uint16_t *)w->biases)[r * ng + j / G]);
            double xh = (double)d * (double)lrintf(x[j] * id);
            y += s * q * xh + bb * xh;
            *exact += (double)fmaf((float)s, (float)q, (float)bb) * x[j];   /* the dot the f32 path computes */
            *mag += fabs(s * q * xh) + fabs(bb * xh);
            *bound += fabs(s * q + bb) * d / 2;
        }
    }
    return y;
}

static void amx_mlx_precision(ci_isa isa, int act);
static void test_amx_mlx_precision(void) {
    amx_mlx_precision(CI_ISA_AVX512, 16);
    amx_mlx_precision(CI_ISA_AVX2, 16);
}
static void test_amx_mlx8_precision(void) {
    amx_mlx_precision(CI_ISA_AVX512, 8);
    amx_mlx_precision(CI_ISA_AVX2, 8);
}

/* On isa's backend: AVX-512 (amx_mlx.c where the CPU has VNNI) or AVX2 (mlx_avx2.c). */
static void amx_mlx_precision(ci_isa isa, int act) {
    rng = 0x5851f42d4c957f2dull;   /* its own inputs, whatever ran before it */
    const char *tag = isa == CI_ISA_AVX2 ? (act == 8 ? "avx2-mlx8" : "avx2-mlx") : act == 8 ? "amx-mlx8" : "amx-mlx";
    ci_backend *be = ci_backend_cpu_new(2, isa), *f32 = ci_backend_cpu_new(2, isa);
    if (be && !ci_backend_cpu_amx_mlx_act(be, act)) {
        be->free(be);
        be = NULL;
    }
    if (!be || !f32) {
        printf("NOTE no %s on this CPU: %s's precision not checked\n", isa == CI_ISA_AVX2 ? "AVX2" : "AVX-512",
               isa == CI_ISA_AVX2 ? "mlx_avx2.c" : "amx_mlx.c");
        if (be) be->free(be);
        if (f32) f32->free(f32);
        return;
    }
    /* where be has the tiles, the same on AVX-512 VNNI alone (isas' mlx_amx 2 entry): the same bits;
     * where be is AVX-512 VNNI's (tiles or not), mlx_avx2.c's kernels (isas' 5 / 6): the same bits */
    ci_backend *vn = NULL, *av2 = NULL;
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0] && strstr(be->name, "amx-mlx"); ii++)
        if (isas[ii].mlx_amx == (act == 8 ? 4 : 2)) vn = isa_backend(ii, 2);
    if (!vn && isa == CI_ISA_AVX512) printf("NOTE no AMX-INT8 on this CPU: amx_mlx.c's tiles against its VNNI form not checked\n");
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0] && (strstr(be->name, "amx-mlx") || strstr(be->name, "vnni-mlx")); ii++)
        if (isas[ii].mlx_amx == (act == 8 ? 6 : 5)) av2 = isa_backend(ii, 2);
    static const struct { kind k; int group; int64_t rows, cols; } cases[] = {
        { K_Q4, 64, 37, 1536 }, { K_Q4, 32, 21, 4160 }, { K_Q8, 32, 9, 2112 }, { K_Q8, 128, 40, 384 },
        { K_Q4, 128, 17, 256 }, { K_Q4, 96, 19, 2304 }, { K_Q4, 64, 33, 2112 }, { K_Q8, 64, 5, 64 },
        { K_Q4, 32, 7, 96 },   /* a width whose last 32 columns end the row (the tiles' last code load) */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int64_t rows = cases[ci].rows, cols = cases[ci].cols, G = cases[ci].group;
        wmat w;
        group_force = cases[ci].group;
        make_w(&w, cases[ci].k, rows, cols);
        group_force = 0;
        const int bits = w.d.bits;
        const float qmax = act == 8 && bits < 8 ? 127.0f : 32639.0f;   /* 8-bit W keeps int16 x */
        static const int ns[] = { 1, 9, 33 };
        for (int xk = 0; xk < 6; xk++) {
            const int n = ns[xk % 3], outl = xk >= 3;
            float *x = malloc((size_t)(n * cols) * sizeof(float)), *y = malloc((size_t)(n * rows) * sizeof(float));
            float *yf = malloc((size_t)(n * rows) * sizeof(float));
            /* plain: uniform, every 97th value 8x, an all-zero first block; outl: one 1000 per 32
             * values, the rest +-0.0123, which round to 0, so x̃ is measurably not x */
            for (int64_t i = 0; i < n * cols; i++)
                x[i] = outl ? (i % 32 == 7 ? 1000.0f : (rnd_u32() & 1 ? 0.0123f : -0.0123f))
                            : rnd(-1, 1) * (i % 97 == 0 ? 8.0f : 1.0f);
            for (int64_t c = 0; c < 64 && cols > 128 && !outl; c++) x[c] = 0;
            be->matmul(be, y, x, n, &w.m);
            f32->matmul(f32, yf, x, n, &w.m);
            ci_backend *twins[2] = { vn, av2 };
            static const char *const twin_what[2] = { "the tiles and the VNNI form", "amx_mlx.c and mlx_avx2.c" };
            for (int k = 0; k < 2; k++) {
                if (!twins[k]) continue;
                float *yv = malloc((size_t)(n * rows) * sizeof(float));
                twins[k]->matmul(twins[k], yv, x, n, &w.m);
                CHECK(!memcmp(y, yv, (size_t)(n * rows) * sizeof(float)), "%s %d-bit g%lld [%lld x %lld] n=%d: %s differ",
                      tag, bits, (long long)G, (long long)rows, (long long)cols, n, twin_what[k]);
                free(yv);
            }
            double worst = 0, over = 0, apart = 0, pred = 0, to_ref = 0, to_ex = 0;
            for (int t = 0; t < n; t++)
                for (int64_t r = 0; r < rows; r++) {
                    double mag, bound, ex, ref = amx_mlx_ref(&w, x + t * cols, r, &mag, &bound, &ex, qmax);
                    const double M = mag > 0 ? mag : 1, e = fabs(y[t * rows + r] - ref) / M;
                    if (fabs(ref - ex) / M > pred) {   /* the output the rounding moves most */
                        pred = fabs(ref - ex) / M;
                        to_ref = e;
                        to_ex = fabs(y[t * rows + r] - ex) / M;
                    }
                    worst = e > worst ? e : worst;
                    const double dd = fabs((double)y[t * rows + r] - yf[t * rows + r]), o = dd - bound - 1e-6 * mag;
                    over = o > over ? o : over;
                    apart = dd / M > apart ? dd / M : apart;
                }
            CHECK(worst <= 1e-6, "%s %d-bit g%lld [%lld x %lld] n=%d: %.3g from its rounded formula", tag, bits,
                  (long long)G, (long long)rows, (long long)cols, n, worst);
            CHECK(over <= 0, "%s %d-bit g%lld [%lld x %lld] n=%d: %.3g past the rounding bound of the f32 path", tag,
                  bits, (long long)G, (long long)rows, (long long)cols, n, over);
            /* at the output the rounding moves most (by pred from the exact dot), the kernel is far
             * nearer the rounded formula than the exact dot: it rounds x */
            CHECK(outl ? to_ex > 10 * to_ref : apart > 0, "%s %d-bit g%lld [%lld x %lld] n=%d: %.3g from the rounded "
                  "formula, %.3g from the exact dot (x not rounded?); %.3g from the f32 path", tag, bits, (long long)G,
                  (long long)rows, (long long)cols, n, to_ref, to_ex, apart);
            if (getenv("CINFER_TEST_VERBOSE"))
                printf("  %s %d-bit g%lld n=%d%s: %.3g from formula, %.3g from f32\n", tag, bits, (long long)G, n,
                       outl ? " outliers" : "", worst, apart);
            free(x); free(y); free(yf);
        }
        for (int ni = 0; ni < 3; ni++) {   /* a NaN in token 0's x: exactly its outputs NaN */
            const int n = ns[ni];
            float *x = malloc((size_t)(n * cols) * sizeof(float)), *y = malloc((size_t)(n * rows) * sizeof(float));
            for (int64_t i = 0; i < n * cols; i++) x[i] = rnd(-1, 1);
            x[cols / 2] = NAN;
            be->matmul(be, y, x, n, &w.m);
            int ok = 1;
            for (int t = 0; t < n; t++)
                for (int64_t r = 0; r < rows; r++) ok &= t == 0 ? isnan(y[r]) : isfinite(y[t * rows + r]);
            CHECK(ok, "%s %d-bit g%lld [%lld x %lld] n=%d: a NaN in token 0's x not carried to exactly its outputs",
                  tag, bits, (long long)G, (long long)rows, (long long)cols, n);
            free(x); free(y);
        }
        wmat_free(&w);
    }
    be->free(be);
    f32->free(f32);
    if (vn) vn->free(vn);
    if (av2) av2->free(av2);
}

/* --mlx-amx's kernels (one token: rows_one; 33: rows_tiles) read bf16 scales and biases from a copy
 * kept in its own order (cpu_amx_mlx_ptiles: 16 grid rows by group) where the grid's size is known:
 * the same bits as the kernels transposing them (CINFER_CPU_MLX_PTILES=0), for whole matrices, views of
 * stacked "experts" starting at a grid row of 16 k (the copy) or not (the transposing kernel),
 * two widths of one grid in one backend, a descriptor whose view reaches past its stated grid
 * (the copy made again), and groups past one 16-group window. */
static void amx_mlx_ptiles(ci_isa isa);
static void test_amx_mlx_ptiles(void) {
    amx_mlx_ptiles(CI_ISA_AVX512);
    amx_mlx_ptiles(CI_ISA_AVX2);   /* mlx_avx2.c: the copy read 8 lanes an octet of rows */
}
static void amx_mlx_ptiles(ci_isa isa) {
    rng = 0x2545f4914f6cdd1dull;
    ci_backend *be = ci_backend_cpu_new(2, isa), *bt = ci_backend_cpu_new(1, isa);
    setenv("CINFER_CPU_MLX_PTILES", "0", 1);
    const int ok = be && bt && ci_backend_cpu_amx_mlx(bt);   /* bt: transposing per token */
    unsetenv("CINFER_CPU_MLX_PTILES");
    if (!ok || !ci_backend_cpu_amx_mlx(be)) {
        printf("NOTE no %s on this CPU: its MLX params copy not checked\n", isa == CI_ISA_AVX2 ? "AVX2" : "AVX-512");
        if (be) be->free(be);
        if (bt) bt->free(bt);
        return;
    }
    static const struct { kind k; int group; int64_t rows, cols, grid; } cases[] = {
        { K_Q4, 64, 72, 2112, 72 },   /* 33 groups: three windows */
        { K_Q8, 32, 40, 1088, 40 },
        { K_Q4, 32, 53, 512, 53 },    /* a last tile of 5 rows */
        { K_Q4, 64, 48, 1024, 16 },   /* a view reaching past the grid it states: the copy grows */
        { K_Q4, 64, 24, 4224, 24 },   /* 66 blocks a row (mlx_avx2.c's pipelined octets: up to MX_NBMAX 256) */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        wmat w;
        group_force = cases[ci].group;
        make_w(&w, cases[ci].k, cases[ci].rows, cases[ci].cols);
        group_force = 0;
        w.d.grid_rows = cases[ci].grid;
        const int64_t rows = cases[ci].rows, cols = cases[ci].cols, rb = cols * w.d.bits / 8;
        enum { NT = 33 };   /* 1 token (rows_one) and NT (rows_tiles), both reading the copy */
        float *x = malloc((size_t)NT * cols * sizeof(float)), *y = malloc((size_t)NT * rows * sizeof(float));
        float *yt = malloc((size_t)NT * rows * sizeof(float));
        for (int64_t i = 0; i < NT * cols; i++) x[i] = rnd(-1, 1);
        /* views: the first 16 rows, the whole, from row 16, from row 24 (not a tile's first row),
         * 8 rows from row 32 */
        static const int64_t v0[] = { 0, 0, 16, 24, 32 }, vn[] = { 16, -1, -1, -1, 8 };
        for (int vi = 0; vi < 5; vi++) {
            if (v0[vi] >= rows) continue;
            ci_mat V = w.m;
            V.data = (const uint8_t *)w.m.data + v0[vi] * rb;
            V.rows = vn[vi] < 0 || v0[vi] + vn[vi] > rows ? rows - v0[vi] : vn[vi];
            V.scale_row0 = v0[vi];
            for (int n = 1; n <= NT; n += NT - 1) {
                be->matmul(be, y, x, n, &V);
                bt->matmul(bt, yt, x, n, &V);
                CHECK(!memcmp(y, yt, (size_t)n * V.rows * sizeof(float)), "amx-mlx %d-bit g%d [%lld x %lld] rows %lld.. of a "
                      "grid of %lld, %d tokens: the params copy and the transposes differ", w.d.bits, w.d.group,
                      (long long)V.rows, (long long)cols, (long long)v0[vi], (long long)cases[ci].grid, n);
            }
        }
        /* the same descriptor seen at another width (the copy's groups a row differ): not taken */
        ci_mat N = w.m;
        N.cols = cols / 2;
        N.rows = rows < 16 ? rows : 16;
        be->matmul(be, y, x, 1, &N);
        bt->matmul(bt, yt, x, 1, &N);
        CHECK(!memcmp(y, yt, (size_t)N.rows * sizeof(float)), "amx-mlx %d-bit g%d: a half-width view of a copied grid "
              "differs from the per-token transposes", w.d.bits, w.d.group);
        free(x); free(y); free(yt);
        wmat_free(&w);
    }
    be->free(be);
    bt->free(bt);
}

/* matmul_n of one x through --mlx-amx's tokens form: a matmul whose W has the layout of the one
 * before it (width, bits, group) reads that one's prepared x (q / k / v, gate / up); each output the
 * bits of its matmul alone, where the layouts match and where they do not (8-bit between 4-bit, g32
 * after g64), and in a second call on a new x (nothing kept from the first). */
static void test_amx_mlx_shared_prep(void) {
    rng = 0x9e3779b97f4a7c15ull;
    ci_backend *be = ci_backend_cpu_new(2, CI_ISA_AVX512);
    if (!be || !ci_backend_cpu_amx_mlx(be)) {
        printf("NOTE no AVX-512 VNNI on this CPU: amx_mlx.c's shared preparation not checked\n");
        if (be) be->free(be);
        return;
    }
    enum { NW = 5, COLS = 1024, N = 33 };
    static const struct { kind k; int group; int64_t rows; } ws[NW] = {
        { K_Q4, 64, 40 }, { K_Q4, 64, 24 }, { K_Q8, 64, 16 }, { K_Q4, 64, 8 }, { K_Q4, 32, 16 },
    };
    wmat w[NW];
    for (int i = 0; i < NW; i++) {
        group_force = ws[i].group;
        make_w(&w[i], ws[i].k, ws[i].rows, COLS);
        group_force = 0;
    }
    static const int calls[2][4] = { { 0, 1, 2, 3 }, { 3, 4, 0, 1 } };
    float *x = malloc((size_t)N * COLS * sizeof(float));
    for (int c = 0; c < 2; c++) {
        for (int64_t i = 0; i < (int64_t)N * COLS; i++) x[i] = rnd(-1, 1) * (c ? 3.0f : 1.0f);
        float *ys[4], *ya[4];
        const ci_mat *W[4];
        for (int j = 0; j < 4; j++) {
            W[j] = &w[calls[c][j]].m;
            ys[j] = malloc((size_t)N * W[j]->rows * sizeof(float));
            ya[j] = malloc((size_t)N * W[j]->rows * sizeof(float));
        }
        be->matmul_n(be, 4, ys, x, N, W);
        for (int j = 0; j < 4; j++) {
            be->matmul(be, ya[j], x, N, W[j]);
            CHECK(!memcmp(ys[j], ya[j], (size_t)N * W[j]->rows * sizeof(float)), "amx-mlx matmul_n call %d, matmul %d "
                  "(%d-bit g%d after %s): differs from its matmul alone", c, j, w[calls[c][j]].d.bits,
                  w[calls[c][j]].d.group, j ? "another" : "none");
            free(ys[j]);
            free(ya[j]);
        }
    }
    free(x);
    for (int i = 0; i < NW; i++) wmat_free(&w[i]);
    be->free(be);
}

/* ci_backend_cpu_int16_act (where the CPU has AVX-512 VNNI) computes what quant_i16_avx512.c
 * states for affine 4- and 8-bit weights: w · x̃, x̃ = x rounded to int16 per 32-column block
 * (d = max|x| / 32767, nearest even) times d, exact integer code sums, f32 scaling. Within
 * 1e-5 (relative to the sum of |terms|) of that computed in double; within the rounding's own
 * bound of the exact path (|y - y_f32| <= sum |w| d / 2, plus the same 1e-5); not the exact
 * path; a row's bits the same alone or in any batch (check_kind); group sizes 32 / 64 / 128,
 * widths with a partial last chunk. */
static double i16_ref(const wmat *w, const float *x, int64_t r, double *mag, double *bound, double *exact) {
    const int64_t cols = w->m.cols, G = w->d.group, ng = cols / G, bits = w->d.bits;
    const uint8_t *row = (const uint8_t *)w->data + r * cols * bits / 8;
    double y = 0;
    *mag = *bound = *exact = 0;
    for (int64_t b0 = 0; b0 < cols; b0 += 32) {
        float amax = 0;
        for (int64_t j = b0; j < b0 + 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 32767.0f, id = amax > 0 ? 32767.0f / amax : 0.0f;
        for (int64_t j = b0; j < b0 + 32; j++) {
            unsigned q = bits == 4 ? (row[j / 2] >> (4 * (j & 1))) & 15 : row[j];
            double s = ci_bf16_to_f32(((const uint16_t *)w->scales)[r * ng + j / G]);
            double bb = ci_bf16_to_f32(((const uint16_t *)w->biases)[r * ng + j / G]);
            double xh = (double)d * (double)lrintf(x[j] * id);
            y += s * q * xh + bb * xh;
            *exact += (double)fmaf((float)s, (float)q, (float)bb) * x[j];   /* the dot the f32 path computes */
            *mag += fabs(s * q * xh) + fabs(bb * xh);
            *bound += fabs(s * q + bb) * d / 2;
        }
    }
    return y;
}

/* One backend's int16 kernels (be: int16 on; f32: the same ISA without). */
static void int16_act_on(ci_backend *be, ci_backend *f32) {
    static const struct { kind k; int group; int64_t rows, cols; } cs[] = {
        { K_Q4, 64, 37, 1536 }, { K_Q4, 64, 21, 1088 }, { K_Q4, 32, 9, 160 }, { K_Q4, 128, 13, 640 },
        { K_Q8, 32, 37, 1536 }, { K_Q8, 64, 21, 1088 }, { K_Q8, 128, 5, 384 }, { K_Q8, 32, 6, 96 },
        { K_Q4, 64, 2, 64 }, { K_Q4, 32, 3, 32 }, { K_Q8, 32, 1, 32 }, { K_Q4, 64, 70, 192 },
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        int64_t rows = cs[ci].rows, cols = cs[ci].cols;
        group_force = cs[ci].group;
        check_kind(be, be->name, cs[ci].k, rows, cols);
        wmat w;
        make_w(&w, cs[ci].k, rows, cols);
        group_force = 0;
        for (int xk = 0; xk < 4; xk++) {   /* n = 1 (decode tile) and 9 (prefill), two kinds of x */
            const int n = xk & 1 ? 9 : 1, outl = xk >= 2;
            float *x = malloc((size_t)(n * cols) * sizeof(float)), *y = malloc((size_t)(n * rows) * sizeof(float));
            float *yf = malloc((size_t)(n * rows) * sizeof(float));
            /* plain: uniform with every 97th value 8x and (wide rows) an all-zero block; outl:
             * one value 1000 per block, the rest +-0.0123, which round to 0 (d = 1000 / 32767),
             * so x̃ is measurably not x */
            for (int64_t i = 0; i < n * cols; i++)
                x[i] = outl ? (i % 32 == 7 ? 1000.0f : (rnd_u32() & 1 ? 0.0123f : -0.0123f))
                            : rnd(-1, 1) * (i % 97 == 0 ? 8.0f : 1.0f);
            for (int64_t c = 0; c < 32 && cols > 64 && !outl; c++) x[c] = 0;
            be->matmul(be, y, x, n, &w.m);
            f32->matmul(f32, yf, x, n, &w.m);
            double worst = 0, over = 0, apart = 0, pred = 0, to_ref = 0, to_ex = 0;
            for (int t = 0; t < n; t++)
                for (int64_t r = 0; r < rows; r++) {
                    double mag, bound, ex, ref = i16_ref(&w, x + t * cols, r, &mag, &bound, &ex);
                    const double M = mag > 0 ? mag : 1;
                    if (fabs(ref - ex) / M > pred) {   /* the output the rounding moves most */
                        pred = fabs(ref - ex) / M;
                        to_ref = fabs(y[t * rows + r] - ref) / M;
                        to_ex = fabs(y[t * rows + r] - ex) / M;
                    }
                    double e = fabs(y[t * rows + r] - ref) / (mag > 0 ? mag : 1);
                    worst = e > worst ? e : worst;
                    double d = fabs((double)y[t * rows + r] - yf[t * rows + r]);
                    double o = d - bound - 1e-6 * mag;
                    over = o > over ? o : over;
                    apart = d / (mag > 0 ? mag : 1) > apart ? d / (mag > 0 ? mag : 1) : apart;
                }
            CHECK(worst <= 1e-6, "int16-act %s g%d [%lld x %lld] n=%d: %.3g from the int16-rounded dot",
                  kind_name[cs[ci].k], cs[ci].group, (long long)rows, (long long)cols, n, worst);
            CHECK(over <= 0, "int16-act %s g%d [%lld x %lld] n=%d: %.3g past the rounding bound of the f32 path",
                  kind_name[cs[ci].k], cs[ci].group, (long long)rows, (long long)cols, n, over);
            /* at the output the rounding moves most (by pred from the exact dot), the kernel is far
             * nearer the rounded formula than the exact dot: it rounds x */
            CHECK(outl ? to_ex > 10 * to_ref : apart > 0, "int16-act %s g%d [%lld x %lld] n=%d: %.3g from the rounded "
                  "formula, %.3g from the exact dot (x not rounded?); %.3g from the f32 path", kind_name[cs[ci].k],
                  cs[ci].group, (long long)rows, (long long)cols, n, to_ref, to_ex, apart);
            free(x); free(y); free(yf);
        }
        {   /* a NaN in x makes every output of its token NaN, as on the f32 path */
            float *x = malloc((size_t)(2 * cols) * sizeof(float)), *y = malloc((size_t)(2 * rows) * sizeof(float));
            for (int64_t i = 0; i < 2 * cols; i++) x[i] = rnd(-1, 1);
            x[cols + cols / 2] = NAN;
            be->matmul(be, y, x, 2, &w.m);
            int ok = 1;
            for (int64_t r = 0; r < rows; r++) ok &= isfinite(y[r]) && isnan(y[rows + r]);
            CHECK(ok, "int16-act %s g%d [%lld x %lld]: a NaN in token 1's x not carried to exactly its outputs",
                  kind_name[cs[ci].k], cs[ci].group, (long long)rows, (long long)cols);
            free(x); free(y);
        }
        wmat_free(&w);
    }
}

/* An MoE decode step on an int16 backend (one token: every expert's gate and up share one
 * prepared x; 2..4 tokens: each expert's own rows) gives the rows of a 23-token call (a
 * prefill, which an int16 backend also runs as one batch of every expert's matmuls, most of
 * them with more than 4 token rows: the gemm path, gate and up sharing their prepared x). */
static void int16_moe_rows(ci_backend *be) {
    enum { E = 5, K = 2, X = 128, I = 64, N = 23 };
    wmat w[3][E];
    ci_mat mg[E], mu[E], md[E];
    for (int e = 0; e < E; e++) {
        make_w(&w[0][e], K_Q4, I, X); make_w(&w[1][e], K_Q4, I, X); make_w(&w[2][e], K_Q8, X, I);
        mg[e] = w[0][e].m; mu[e] = w[1][e].m; md[e] = w[2][e].m;
    }
    ci_moe m = { .n_experts = E, .top_k = K, .hidden = X, .inter = I, .routed_scaling = 1, .n_group = 1,
                 .topk_group = 1, .w_gate = mg, .w_up = mu, .w_down = md };
    float x[N * X], wt[N * K], all[N * X], part[N * X];
    int32_t sel[N * K];
    for (int i = 0; i < N * X; i++) x[i] = rnd(-1, 1);
    for (int i = 0; i < N * K; i++) wt[i] = rnd(0, 1);
    for (int t = 0; t < N; t++) sel[t * K] = t % E, sel[t * K + 1] = (t + 2) % E;
    be->moe_experts(be, all, x, N, sel, wt, &m, 0);
    for (int t0 = 0, n = 1; t0 < N; t0 += n, n = n % 4 + 1) {
        int nn = N - t0 < n ? N - t0 : n;
        be->moe_experts(be, part + t0 * X, x + t0 * X, nn, sel + t0 * K, wt + t0 * K, &m, 0);
    }
    CHECK(memcmp(all, part, sizeof all) == 0, "%s: MoE decode-step rows differ from the %d-token call", be->name, N);
    for (int e = 0; e < E; e++) { wmat_free(&w[0][e]); wmat_free(&w[1][e]); wmat_free(&w[2][e]); }
}

static void test_int16_act_precision(void) {
    rng = 0x9e3779b97f4a7c15ull;   /* its own inputs, whatever ran before it on this CPU */
    static const struct { ci_isa isa; const char *name; } is[] = { { CI_ISA_AVX512, "cpu-avx512-int16" },
                                                                    { CI_ISA_AVX2, "cpu-avx2-int16" } };
    int ran = 0;
    for (size_t i = 0; i < sizeof is / sizeof is[0]; i++) {
        ci_backend *be = ci_backend_cpu_new(2, is[i].isa), *f32 = ci_backend_cpu_new(2, is[i].isa);
        if (be && f32 && ci_backend_cpu_int16_act(be)) {
            CHECK(strcmp(be->name, is[i].name) == 0, "backend name %s, want %s", be->name, is[i].name);
            int16_act_on(be, f32);
            int16_moe_rows(be);
            ran++;
        }
        if (be) be->free(be);
        if (f32) f32->free(f32);
    }
    ci_backend *sc = ci_backend_cpu_new(1, CI_ISA_SCALAR);
    CHECK(sc && !ci_backend_cpu_int16_act(sc) && strcmp(sc->name, "cpu-scalar") == 0, "scalar backend took int16-act");
    if (sc) sc->free(sc);
    if (!ran) printf("NOTE no AVX2 on this CPU: int16-act not checked\n");
}

/* The row-wise ops a decode step batches too: swiglu, add and rmsnorm of one row alone
 * equal that row of a batch, for a width that leaves a partial vector at each row's end
 * (so a row of the batch starts and ends at other vector offsets). */
static void test_rowwise_ops_independent_of_batch(void) {
    enum { B = 7, D = 1000 };
    static float g[B * D], u[B * D], g1[D], x[B * D], y[B * D], w[D], o[B * D], o1[D];
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        ci_backend *be = isa_backend(ii, 2);
        if (!be) continue;
        for (int i = 0; i < B * D; i++) { g[i] = rnd(-8, 8); u[i] = rnd(-2, 2); x[i] = rnd(-3, 3); y[i] = rnd(-3, 3); }
        for (int i = 0; i < D; i++) w[i] = rnd(0.5f, 1.5f);
        memcpy(o, g, sizeof o);
        be->swiglu(be, o, u, (int64_t)B * D);
        for (int t = 0; t < B; t++) {
            memcpy(g1, g + t * D, sizeof g1);
            be->swiglu(be, g1, u + t * D, D);
            CHECK(!memcmp(g1, o + t * D, sizeof g1), "%s swiglu: row %d alone differs from the batch", isas[ii].name, t);
        }
        memcpy(o, y, sizeof o);
        be->add(be, o, x, (int64_t)B * D);
        for (int t = 0; t < B; t++) {
            memcpy(o1, y + t * D, sizeof o1);
            be->add(be, o1, x + t * D, D);
            CHECK(!memcmp(o1, o + t * D, sizeof o1), "%s add: row %d alone differs from the batch", isas[ii].name, t);
        }
        be->rmsnorm(be, o, x, w, B, D, 1e-6f);
        for (int t = 0; t < B; t++) {
            be->rmsnorm(be, o1, x + t * D, w, 1, D, 1e-6f);
            CHECK(!memcmp(o1, o + t * D, sizeof o1), "%s rmsnorm: row %d alone differs from the batch", isas[ii].name, t);
        }
        be->free(be);
    }
}

/* ---- bench ----------------------------------------------------------------------------- */

/* Wall time; with one thread the process's CPU time instead, which other jobs on a shared
 * machine disturb much less (the work runs on the calling thread alone). */
static int cpu_clock;
static double now_s(void) {
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bench(int64_t rows, int64_t cols, int threads, ci_isa isa) {
    ci_backend *be = ci_backend_cpu_new(threads, isa);
    if (!be) { fprintf(stderr, "test_determinism --bench: this CPU lacks the ISA asked for\n"); return 2; }
    static const kind ks[] = { K_BF16, K_FP8, K_Q4, K_Q8 };
    static const int ns[] = { 1, 4, 128 };
    float *x = malloc((size_t)(128 * cols) * sizeof(float)), *y = malloc((size_t)(128 * rows) * sizeof(float));
    for (int64_t i = 0; i < 128 * cols; i++) x[i] = rnd(-1, 1);
    cpu_clock = be->n_threads == 1;
    printf("%s, %d threads, [%lld x %lld]: %s ms per matmul (best of 5 runs) and GFLOP/s\n", be->name, be->n_threads,
           (long long)rows, (long long)cols, cpu_clock ? "CPU" : "wall");
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        wmat w;
        make_w(&w, ks[ki], rows, cols);
        printf("  %-18s", kind_name[ks[ki]]);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int n = ns[ni], reps = n == 1 ? 20 : n == 4 ? 10 : 2;
            double best = 1e30;
            be->matmul(be, y, x, n, &w.m);   /* warm */
            for (int run = 0; run < 5; run++) {
                double t0 = now_s();
                for (int r = 0; r < reps; r++) be->matmul(be, y, x, n, &w.m);
                double dt = (now_s() - t0) / reps;
                if (dt < best) best = dt;
            }
            printf("  n=%-3d %7.3f ms %6.1f GF/s", n, best * 1e3, 2.0 * (double)rows * (double)cols * n / best * 1e-9);
        }
        printf("\n");
        wmat_free(&w);
    }
    free(x); free(y);
    be->free(be);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        int64_t rows = argc > 3 ? atoll(argv[2]) : 4096, cols = argc > 3 ? atoll(argv[3]) : 4096;
        int threads = argc > 4 ? atoi(argv[4]) : 2;
        const char *in = argc > 5 ? argv[5] : "auto";
        ci_isa isa = !strcmp(in, "scalar") ? CI_ISA_SCALAR : !strcmp(in, "avx2") ? CI_ISA_AVX2
                   : !strcmp(in, "avx512") ? CI_ISA_AVX512 : CI_ISA_AUTO;
        if (rows < 1 || cols < 128 || cols % 128 || threads < 1 || (isa == CI_ISA_AUTO && strcmp(in, "auto"))) {
            fprintf(stderr, "usage: test_determinism --bench [rows cols [threads [auto|scalar|avx2|avx512]]] "
                            "(cols a positive multiple of 128)\n");
            return 2;
        }
        return bench(rows, cols, threads, isa);
    }
    TEST_RUN(test_matmul_rows_independent_of_batch);
    TEST_RUN(test_matmul_small_cols);
    TEST_RUN(test_bf16_act_precision);
    TEST_RUN(test_amx_mlx_precision);
    TEST_RUN(test_amx_mlx8_precision);
    TEST_RUN(test_amx_mlx_ptiles);
    TEST_RUN(test_amx_mlx_shared_prep);
    TEST_RUN(test_int16_act_precision);
    TEST_RUN(test_rowwise_ops_independent_of_batch);
    TEST_EXIT();
}
