/* test_ops.c — every CPU op on every kernel set this machine runs, against double-precision
 * references written here, plus the thread pool.
 *
 * The references decode weights with the scalar conversions of core/tensor.h and do all
 * arithmetic in double, so they share no code with the kernels. Inputs are random with a
 * fixed seed and deliberately awkward sizes: row and column counts that are not multiples
 * of 16 or 64, n = 1, 3, 4, 5 and 17 token rows (decode tiles, prefill tiles and
 * remainders), fp8 with partial edge blocks and all three scale dtypes, row views that
 * start inside a scale block (scale_row0), matmul_xw, both rope styles
 * with partial rotation, GQA with 4 query heads per kv head, pos0 > 0, and a context
 * longer than one attention chunk.
 *
 * Error measure: rel = max_i |got_i - ref_i| / max_i |ref_i| (normwise, so a near-zero
 * element that suffers cancellation does not dominate). Bound for every f32 path:
 * rel <= 1e-5. f32 accumulation over K terms is off by about sqrt(K) ulps of the largest
 * partial sum; for K <= 1000 that is ~1e-6, so 1e-5 leaves a 10x margin while any wrong
 * index, scale or formula gives errors of order 1. Since each ISA meets the bound against
 * the same reference, the ISAs agree with each other to 2e-5. */
#include "backend/backend.h"
#include "check.h"
#include "core/threads.h"
#include <math.h>
#include <stdatomic.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define TOL 1e-5

/* ---- helpers ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / 16777216.0f; }
static float *rnd_vec(int64_t n, float lo, float hi) {
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = rnd(lo, hi);
    return v;
}

static double rel_err(const float *got, const double *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (isnan(d)) return NAN; /* fails every bound */
        if (d > num) num = d;
        if (fabs(ref[i]) > den) den = fabs(ref[i]);
    }
    return den > 0 ? num / den : num;
}

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

/* ---- weights -------------------------------------------------------------------------- */

typedef struct {
    ci_mat m;
    void *data, *scale;
} wmat;

/* A random weight in the given dtype. fp8 codes 0x7f/0xff (NaN) are avoided and the block
 * scales spread over about 2^-5..2^2. With `huge`, every scale is about 2^120 (too big to
 * fold into the kernels' 2^8 multiplier, so they take their per-element path) and fp8
 * magnitudes stay below 1 so that nothing overflows f32. */
static wmat make_w(int64_t rows, int64_t cols, ci_dtype dt, ci_dtype sdt, int block, int huge) {
    wmat w;
    memset(&w, 0, sizeof w);
    w.m.rows = rows;
    w.m.cols = cols;
    w.m.dtype = dt;
    int64_t n = rows * cols;
    w.data = malloc((size_t)n * ci_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        float f = rnd(-1.0f, 1.0f);
        switch (dt) {
        case CI_F32: ((float *)w.data)[i] = f; break;
        case CI_BF16: ((uint16_t *)w.data)[i] = ci_f32_to_bf16(f); break;
        case CI_F16: ((uint16_t *)w.data)[i] = ci_f32_to_f16(f); break;
        default: {
            uint8_t b = (uint8_t)rnd_u32();
            if ((b & 0x7f) == 0x7f) b ^= 1;
            if (huge) b = (uint8_t)((b & 0x87) | (rnd_u32() % 7) << 3); /* exponent field <= 6 */
            ((uint8_t *)w.data)[i] = b;
        }
        }
    }
    if (dt == CI_F8_E4M3) {
        int64_t nrb = (rows + block - 1) / block, ncb = (cols + block - 1) / block, ns = nrb * ncb;
        w.m.block = block;
        w.m.scale_dtype = sdt;
        w.scale = malloc((size_t)ns * 4);
        for (int64_t i = 0; i < ns; i++) {
            int e = huge ? 120 : -5 + (int)(rnd_u32() % 8);
            float s = ldexpf(rnd(1.0f, 2.0f), e);
            if (sdt == CI_F32) ((float *)w.scale)[i] = s;
            else if (sdt == CI_BF16) ((uint16_t *)w.scale)[i] = ci_f32_to_bf16(s);
            else ((uint8_t *)w.scale)[i] = (uint8_t)(127 + e);
        }
    }
    w.m.data = w.data;
    w.m.scale = w.scale;
    return w;
}

static void free_w(wmat *w) {
    free(w->data);
    free(w->scale);
}

/* The reference decode: independent of the backend's ci_mat_get. */
static double ref_w(const wmat *w, int64_t r, int64_t c) {
    int64_t i = r * w->m.cols + c;
    switch (w->m.dtype) {
    case CI_F32: return ((const float *)w->data)[i];
    case CI_BF16: return ci_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case CI_F16: return ci_f16_to_f32(((const uint16_t *)w->data)[i]);
    default: {
        int64_t b = w->m.block, ncb = (w->m.cols + b - 1) / b, si = r / b * ncb + c / b;
        double s = w->m.scale_dtype == CI_F32 ? ((const float *)w->scale)[si]
                 : w->m.scale_dtype == CI_BF16 ? ci_bf16_to_f32(((const uint16_t *)w->scale)[si])
                 : ldexp(1.0, ((const uint8_t *)w->scale)[si] - 127);
        return (double)ci_fp8_e4m3_to_f32(((const uint8_t *)w->data)[i]) * s;
    }
    }
}

typedef struct { ci_dtype dt, sdt; int block; const char *name; } wkind;
static const wkind wkinds[] = {
    { CI_F32, CI_F32, 0, "f32" },
    { CI_F16, CI_F32, 0, "f16" },
    { CI_BF16, CI_F32, 0, "bf16" },
    { CI_F8_E4M3, CI_F32, 128, "fp8/f32 scale/128" },
    { CI_F8_E4M3, CI_BF16, 128, "fp8/bf16 scale/128" },
    { CI_F8_E4M3, CI_F8_E8M0, 128, "fp8/e8m0 scale/128" },
    { CI_F8_E4M3, CI_F32, 31, "fp8/f32 scale/31" }, /* row blocks straddle 4-row tiles */
};
#define N_WKINDS (int)(sizeof wkinds / sizeof wkinds[0])

/* ---- thread pool ---------------------------------------------------------------------- */

typedef struct {
    int *hits;
    atomic_int calls;
} pool_ctx;

static void count_task(void *c, int i) {
    pool_ctx *p = c;
    p->hits[i]++; /* each index is run once per ci_pool_run, so no two threads share it */
    atomic_fetch_add(&p->calls, 1);
}

static void test_pool(void) {
    int sizes[] = { 1, 2, 3, 5 };
    int hits[1000];
    for (int si = 0; si < 4; si++) {
        ci_pool *p = ci_pool_new(sizes[si]);
        CHECK(p != NULL, "ci_pool_new(%d)", sizes[si]);
        if (!p) return;
        CHECK(ci_pool_size(p) == sizes[si], "size %d, want %d", ci_pool_size(p), sizes[si]);
        pool_ctx c = { hits, 0 };
        memset(hits, 0, sizeof hits);
        ci_pool_run(p, count_task, &c, 0);
        CHECK(atomic_load(&c.calls) == 0, "n_tasks = 0 ran %d tasks", atomic_load(&c.calls));
        ci_pool_run(p, count_task, &c, 1000);  /* n_tasks >> threads */
        for (int i = 0; i < 1000; i++) CHECK(hits[i] == 1, "pool %d: task %d ran %d times", sizes[si], i, hits[i]);
        /* Many short runs: the spin-wake path, and every worker checking in each time. */
        memset(hits, 0, sizeof hits);
        atomic_store(&c.calls, 0);
        for (int r = 0; r < 3000; r++) ci_pool_run(p, count_task, &c, 1 + r % 7);
        int want = 0;
        for (int r = 0; r < 3000; r++) want += 1 + r % 7;
        CHECK(atomic_load(&c.calls) == want, "pool %d: %d calls, want %d", sizes[si], atomic_load(&c.calls), want);
        /* Runs after the workers have gone to sleep: the condition-variable path. */
        for (int r = 0; r < 3; r++) {
            usleep(5000);
            memset(hits, 0, sizeof hits);
            ci_pool_run(p, count_task, &c, 50);
            for (int i = 0; i < 50; i++) CHECK(hits[i] == 1, "after sleep: task %d ran %d times", i, hits[i]);
        }
        ci_pool_free(p);
    }
    ci_pool *p = ci_pool_new(0);
    CHECK(p && ci_pool_size(p) >= 1, "ci_pool_new(0) gives all online CPUs");
    ci_pool_free(p);
}

/* Runs that change job and size every time, some tasks slow (stragglers): every task of a
 * run writes its run's stamp into its run's array, and nothing of a run is written after
 * ci_pool_run returned (a late worker with the old job would stamp an array already
 * checked). More tasks than one claim word counts (2^20 - 1) run in chunks. */
typedef struct {
    int stamp;
    int *out;
} stamp_ctx;

static void stamp_task(void *c, int i) {
    stamp_ctx *k = c;
    if (i == 3 && k->stamp % 97 == 0) usleep(300);   /* a straggler now and then */
    k->out[i] = k->stamp;
}

static void test_pool_jobs(void) {
    enum { N = 257 };
    static int a[N], b[N];
    for (int threads = 2; threads <= 4; threads++) {
        ci_pool *p = ci_pool_new(threads);
        if (!p) { CHECK(0, "ci_pool_new"); return; }
        int bad = 0;
        for (int r = 1; r <= 2000 && !bad; r++) {
            int *arr = r & 1 ? a : b, n = 1 + (r * 37) % N;
            stamp_ctx k = { r, arr };
            ci_pool_run(p, stamp_task, &k, n);
            for (int i = 0; i < n; i++) if (arr[i] != r) { bad = 1; CHECK(0, "run %d task %d: stamp %d", r, i, arr[i]); break; }
            /* the other array holds the previous run's stamps and must keep them */
            int *prev = r & 1 ? b : a, pn = 1 + ((r - 1) * 37) % N;
            for (int i = 0; r > 1 && i < pn; i++)
                if (prev[i] != r - 1) { bad = 1; CHECK(0, "run %d wrote into run %d's array at %d", prev[i], r - 1, i); break; }
        }
        ci_pool_free(p);
    }
    ci_pool *p = ci_pool_new(3);
    int n = (1 << 21) + 5;
    int *hits = calloc((size_t)n, sizeof *hits);
    pool_ctx c = { hits, 0 };
    if (p && hits) {
        ci_pool_run(p, count_task, &c, n);
        int ok = atomic_load(&c.calls) == n;
        for (int i = 0; i < n && ok; i++) ok = hits[i] == 1;
        CHECK(ok, "%d tasks (several claim words): %d calls", n, atomic_load(&c.calls));
    }
    free(hits);
    ci_pool_free(p);
}

/* ---- matmul --------------------------------------------------------------------------- */

/* Rows r0..r0+nr of w as a borrowed view: fp8 views keep the whole scale grid and say
 * where they start in it (scale_row0), as MLA's per-head slices of kv_b do. */
static ci_mat view_rows(const wmat *w, int64_t r0, int64_t nr) {
    ci_mat v = w->m;
    v.data = (const char *)w->data + (size_t)(r0 * w->m.cols) * ci_dtype_size(w->m.dtype);
    v.rows = nr;
    v.scale_row0 = w->m.scale_row0 + r0;
    return v;
}

static void check_matmul_view(ci_backend *be, const char *isa, const wmat *w, int64_t r0, int64_t rows, int n,
                              const char *what) {
    int64_t cols = w->m.cols;
    ci_mat v = view_rows(w, r0, rows);
    float *x = rnd_vec(n * cols, -1.0f, 1.0f);
    float *y = malloc((size_t)(n * rows) * sizeof(float));
    double *ref = malloc((size_t)(n * rows) * sizeof(double));
    for (int t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double a = 0;
            for (int64_t c = 0; c < cols; c++) a += (double)x[t * cols + c] * ref_w(w, r0 + r, c);
            ref[t * rows + r] = a;
        }
    for (int64_t i = 0; i < n * rows; i++) y[i] = NAN;
    be->matmul(be, y, x, n, &v);
    double e = rel_err(y, ref, n * rows);
    CHECK(e <= TOL, "%s matmul %s [%lld x %lld] rows from %lld, n=%d: rel err %.3g", isa, what, (long long)rows,
          (long long)cols, (long long)r0, n, e);
    free(x);
    free(y);
    free(ref);
}

static void check_matmul(ci_backend *be, const char *isa, const wmat *w, int n, const char *what) {
    check_matmul_view(be, isa, w, 0, w->m.rows, n, what);
}

/* matmul_xw: y[n, cols] = x[n, rows] · W (no transpose), on a row view. */
static void check_matmul_xw(ci_backend *be, const char *isa, const wmat *w, int64_t r0, int64_t rows, int n,
                            const char *what) {
    int64_t cols = w->m.cols;
    ci_mat v = view_rows(w, r0, rows);
    float *x = rnd_vec(n * rows, -1.0f, 1.0f);
    float *y = malloc((size_t)(n * cols) * sizeof(float));
    double *ref = calloc((size_t)(n * cols), sizeof(double));
    for (int t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) ref[t * cols + c] += (double)x[t * rows + r] * ref_w(w, r0 + r, c);
    for (int64_t i = 0; i < n * cols; i++) y[i] = NAN;
    be->matmul_xw(be, y, x, n, &v);
    double e = rel_err(y, ref, n * cols);
    CHECK(e <= TOL, "%s matmul_xw %s [%lld x %lld] rows from %lld, n=%d: rel err %.3g", isa, what, (long long)rows,
          (long long)cols, (long long)r0, n, e);
    free(x);
    free(y);
    free(ref);
}

static void test_matmul(void) {
    static const int64_t shapes[][2] = { { 37, 203 }, { 19, 1000 }, { 130, 300 }, { 4, 17 }, { 1, 129 } };
    static const int ns[] = { 1, 3, 4, 5, 17 };
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        CHECK(be != NULL, "%s backend", isas[ii].name);
        if (!be) continue;
        CHECK(strcmp(be->name, isas[ii].name) == 0, "backend name %s, want %s", be->name, isas[ii].name);
        for (int wk = 0; wk < N_WKINDS; wk++)
            for (int si = 0; si < 5; si++) {
                wmat w = make_w(shapes[si][0], shapes[si][1], wkinds[wk].dt, wkinds[wk].sdt, wkinds[wk].block,
                                wkinds[wk].dt == CI_F8_E4M3 && si == 4);
                for (int ni = 0; ni < 5; ni++) check_matmul(be, isas[ii].name, &w, ns[ni], wkinds[wk].name);
                free_w(&w);
            }
        be->free(be);
    }
}

/* ci_mat_get against the reference decode, every dtype and scale dtype. */
static void test_mat_get(void) {
    for (int wk = 0; wk < 2 * N_WKINDS; wk++) {
        const wkind *k = &wkinds[wk % N_WKINDS];
        if (wk >= N_WKINDS && k->dt != CI_F8_E4M3) continue;
        wmat w = make_w(50, 77, k->dt, k->sdt, k->block, wk >= N_WKINDS);
        for (int64_t r = 0; r < 50; r++)
            for (int64_t c = 0; c < 77; c++) {
                float g = ci_mat_get(&w.m, r, c);
                CHECK(g == (float)ref_w(&w, r, c), "%s [%lld,%lld]: %g vs %g", k->name, (long long)r,
                      (long long)c, g, ref_w(&w, r, c));
            }
        CHECK(isnan(ci_mat_get(&w.m, 50, 0)), "out of range gives NaN");
        free_w(&w);
    }
}

/* Row views (scale_row0 != 0) through matmul, matmul_xw and embed: the views start inside
 * a scale row block, so using the view's own row index for the scale would be caught. */
static void test_row_views(void) {
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        for (int wk = 0; wk < N_WKINDS; wk++) {
            const wkind *k = &wkinds[wk];
            wmat w = make_w(200, 161, k->dt, k->sdt, k->block, 0);
            static const int64_t views[][2] = { { 37, 40 }, { 130, 70 }, { 5, 1 } };
            for (int vi = 0; vi < 3; vi++)
                for (int n = 1; n <= 17; n += 8) {
                    check_matmul_view(be, isas[ii].name, &w, views[vi][0], views[vi][1], n, k->name);
                    check_matmul_xw(be, isas[ii].name, &w, views[vi][0], views[vi][1], n, k->name);
                }
            /* matmul_xw over rows wider than its 1024-column chunk */
            wmat wide = make_w(9, 2100, k->dt, k->sdt, k->block, 0);
            check_matmul_xw(be, isas[ii].name, &wide, 2, 5, 3, k->name);
            free_w(&wide);
            /* embed and ci_mat_get on a view */
            ci_mat v = view_rows(&w, 37, 100);
            int32_t ids[3] = { 0, 99, 50 };
            float out[3 * 161];
            be->embed(be, out, &v, ids, 3);
            int exact = 1;
            for (int t = 0; t < 3; t++)
                for (int64_t c = 0; c < 161; c++) {
                    exact &= out[t * 161 + c] == (float)ref_w(&w, 37 + ids[t], c);
                    exact &= ci_mat_get(&v, ids[t], c) == (float)ref_w(&w, 37 + ids[t], c);
                }
            CHECK(exact, "%s embed / ci_mat_get on a row view, %s", isas[ii].name, k->name);
            free_w(&w);
        }
        be->free(be);
    }
}

/* Every output element is computed by one tile in a fixed order, so the thread count must
 * not change a single bit; also covers prefill with tokens split across items, and
 * attention items that take whole head groups or single heads. */
static void test_threads_invariant(void) {
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *b1 = ci_backend_cpu_new(1, isas[ii].isa), *b3 = ci_backend_cpu_new(3, isas[ii].isa);
        CHECK(b1 && b3, "backends");
        if (!b1 || !b3) return;
        wmat w = make_w(300, 512, CI_BF16, CI_F32, 0, 0);
        for (int n = 1; n <= 33; n += 8) {
            float *x = rnd_vec(n * 512, -1, 1), *y1 = malloc((size_t)n * 300 * 4), *y3 = malloc((size_t)n * 300 * 4);
            b1->matmul(b1, y1, x, n, &w.m);
            b3->matmul(b3, y3, x, n, &w.m);
            CHECK(memcmp(y1, y3, (size_t)n * 300 * 4) == 0, "%s n=%d: 1 and 3 threads differ", isas[ii].name, n);
            free(x);
            free(y1);
            free(y3);
        }
        free_w(&w);
        /* attention: items group a different number of heads with 1 and 3 threads */
        int n = 5, nh = 8, nkv = 2, hd = 64, pos0 = 300, kvs = nkv * hd, L = pos0 + n;
        float *q = rnd_vec(n * nh * hd, -2, 2), *k = rnd_vec((int64_t)L * kvs, -2, 2), *v = rnd_vec((int64_t)L * kvs, -1, 1);
        float *o1 = malloc((size_t)n * nh * hd * 4), *o3 = malloc((size_t)n * nh * hd * 4);
        b1->attention(b1, o1, q, k, v, n, pos0, nh, nkv, hd, kvs, 0.125f);
        b3->attention(b3, o3, q, k, v, n, pos0, nh, nkv, hd, kvs, 0.125f);
        CHECK(memcmp(o1, o3, (size_t)n * nh * hd * 4) == 0, "%s attention: 1 and 3 threads differ", isas[ii].name);
        free(q);
        free(k);
        free(v);
        free(o1);
        free(o3);
        b1->free(b1);
        b3->free(b3);
    }
}

/* The decode prefetch rule (CINFER_CPU_PF_NEXT_TILE: the next tile in byte order for short rows,
 * the AMD default, or the per-row distance) and the row order (CINFER_CPU_SEQ: a one-token decode
 * of rows up to 4 KiB row after row, or in 4-row tiles) move no bit: decode rows (n <= 4) of bf16,
 * f16 and fp8 matrices whose rows are under, at and over the rules' 4 KiB (with a part-vector and a
 * part-chunk tail, and a last tile of fewer than 4 rows), and the bf16-activation set, on one and
 * two threads, give the same outputs in all four settings (the last tile's prefetch runs past the
 * matrix: a hint, never a fault). The rules are process-wide and set when a backend is made, so
 * each backend runs before the next is made. */
static void test_prefetch_rule_invariant(void) {
    ci_isa extra[4];
    const char *names[4];
    int ne = 0;
    for (int ii = 0; ii < n_isas; ii++) {
        extra[ne] = isas[ii].isa;
        names[ne++] = isas[ii].name;
    }
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512bf16")) {
        extra[ne] = CI_ISA_AVX512BF16;
        names[ne++] = "cpu-avx512-bf16";
    }
#endif
    const char *old = getenv("CINFER_CPU_PF_NEXT_TILE"), *olds = getenv("CINFER_CPU_SEQ");
    char *saved = old ? strdup(old) : NULL, *saveds = olds ? strdup(olds) : NULL;
    const struct { int64_t rows, cols; ci_dtype dt, sdt; int block; } shapes[] = {
        { 37, 1024, CI_BF16, CI_F32, 0 }, { 21, 2048, CI_BF16, CI_F32, 0 }, { 13, 3000, CI_BF16, CI_F32, 0 },
        { 29, 1024, CI_F16, CI_F32, 0 }, { 19, 4096, CI_F8_E4M3, CI_BF16, 128 }, { 23, 700, CI_BF16, CI_F32, 0 },
        { 10, 515, CI_F16, CI_F32, 0 }, { 6, 2047, CI_BF16, CI_F32, 0 },
    };
    for (int ii = 0; ii < ne; ii++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            wmat w = make_w(shapes[si].rows, shapes[si].cols, shapes[si].dt, shapes[si].sdt, shapes[si].block, 0);
            const int64_t R = shapes[si].rows, C = shapes[si].cols;
            for (int th = 1; th <= 2; th++)
                for (int n = 1; n <= 4; n += 3) {
                    float *x = rnd_vec(n * C, -1, 1), *y[4];
                    for (int rule = 0; rule < 4; rule++) {
                        setenv("CINFER_CPU_PF_NEXT_TILE", rule & 1 ? "1" : "0", 1);
                        setenv("CINFER_CPU_SEQ", rule & 2 ? "1" : "0", 1);
                        ci_backend *be = ci_backend_cpu_new(th, extra[ii]);
                        y[rule] = calloc((size_t)n * R, 4);
                        CHECK(be, "%s: backend", names[ii]);
                        if (be) {
                            CHECK(ci_backend_cpu_seq_bytes() == (rule & 2 ? 4096 : 0), "CINFER_CPU_SEQ=%d left %d bytes",
                                  rule >> 1, ci_backend_cpu_seq_bytes());
                            be->matmul(be, y[rule], x, n, &w.m);
                            be->free(be);
                        }
                    }
                    for (int rule = 1; rule < 4; rule++)
                        CHECK(memcmp(y[0], y[rule], (size_t)n * R * 4) == 0,
                              "%s %s [%lld x %lld] n=%d %d threads: the prefetch rule / row order (%d) changed the result",
                              names[ii], ci_dtype_name(shapes[si].dt), (long long)R, (long long)C, n, th, rule);
                    free(x);
                    for (int rule = 0; rule < 4; rule++) free(y[rule]);
                }
            free_w(&w);
        }
    if (saved) setenv("CINFER_CPU_PF_NEXT_TILE", saved, 1);
    else unsetenv("CINFER_CPU_PF_NEXT_TILE");
    if (saveds) setenv("CINFER_CPU_SEQ", saveds, 1);
    else unsetenv("CINFER_CPU_SEQ");
    free(saved);
    free(saveds);
}

/* ci_backend_cpu_tune (the 16-bit decode rules measured once per process): what it leaves is one
 * of the next-tile rule's and one of the row order's settings (0 on CPUs that are not AMD, where
 * it measures nothing); bf16 decodes of rows under and over the row order's lengths give the same
 * bits before and after it; with CINFER_CPU_PF_NEXT_TILE and CINFER_CPU_SEQ set it measures
 * nothing and the variables' settings stand, and a backend made later keeps what it measured. */
static void test_cpu_tune(void) {
    const char *old = getenv("CINFER_CPU_PF_NEXT_TILE"), *olds = getenv("CINFER_CPU_SEQ");
    char *saved = old ? strdup(old) : NULL, *saveds = olds ? strdup(olds) : NULL;
    wmat w[2] = { make_w(45, 2048, CI_BF16, CI_F32, 0, 0), make_w(45, 1000, CI_BF16, CI_F32, 0, 0) };
    float *x = rnd_vec(2048, -1, 1), *y0[2] = { calloc(45, 4), calloc(45, 4) }, *y1[2] = { calloc(45, 4), calloc(45, 4) };
    setenv("CINFER_CPU_PF_NEXT_TILE", "1", 1);
    setenv("CINFER_CPU_SEQ", "0", 1);
    ci_backend *be = ci_backend_cpu_new(1, CI_ISA_AUTO);
    CHECK(be, "backend");
    if (be) {
        const int before = ci_backend_cpu_next_tile_bytes(), sbefore = ci_backend_cpu_seq_bytes();
        ci_backend_cpu_tune(be, NULL, 0);
        CHECK(ci_backend_cpu_next_tile_bytes() == before && ci_backend_cpu_seq_bytes() == sbefore,
              "tune with both variables set moved the rules %d, %d -> %d, %d", before, sbefore,
              ci_backend_cpu_next_tile_bytes(), ci_backend_cpu_seq_bytes());
        be->free(be);
    }
    unsetenv("CINFER_CPU_PF_NEXT_TILE");
    unsetenv("CINFER_CPU_SEQ");
    be = ci_backend_cpu_new(1, CI_ISA_AUTO);
    CHECK(be, "backend");
    if (be) {
        for (int i = 0; i < 2; i++) be->matmul(be, y0[i], x, 1, &w[i].m);
        ci_backend_cpu_tune(be, NULL, 0);
        const int nt = ci_backend_cpu_next_tile_bytes(), sq = ci_backend_cpu_seq_bytes();
        CHECK(nt == 0 || nt == 1024 || nt == 2048 || nt == 4096, "tune left %d bytes", nt);
        CHECK(sq == 0 || sq == 1024 || sq == 2048 || sq == 4096, "tune left row order %d bytes", sq);
#if defined(__x86_64__)
        __builtin_cpu_init();
        if (!__builtin_cpu_is("amd")) CHECK(nt == 0 && sq == 0, "tune on a CPU that is not AMD left %d, %d bytes", nt, sq);
#endif
        for (int i = 0; i < 2; i++) {
            be->matmul(be, y1[i], x, 1, &w[i].m);
            CHECK(memcmp(y0[i], y1[i], 45 * 4) == 0, "the decode's bits moved with the tuned rules (%d, %d bytes; %lld columns)",
                  nt, sq, (long long)w[i].m.cols);
        }
        be->free(be);
        ci_backend *b2 = ci_backend_cpu_new(2, CI_ISA_AUTO);
        CHECK(b2 && ci_backend_cpu_next_tile_bytes() == nt && ci_backend_cpu_seq_bytes() == sq,
              "a later backend reset the measured rules %d, %d -> %d, %d", nt, sq, ci_backend_cpu_next_tile_bytes(),
              ci_backend_cpu_seq_bytes());
        if (b2) b2->free(b2);
    }
    free(x);
    for (int i = 0; i < 2; i++) {
        free(y0[i]);
        free(y1[i]);
        free_w(&w[i]);
    }
    if (saved) setenv("CINFER_CPU_PF_NEXT_TILE", saved, 1);
    if (saveds) setenv("CINFER_CPU_SEQ", saveds, 1);
    free(saved);
    free(saveds);
}

/* A larger prefill through the pack path: K spans several KC chunks, rows several blocks. */
static void test_matmul_prefill_large(void) {
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        wmat w = make_w(70, 1100, CI_BF16, CI_F32, 0, 0);
        check_matmul(be, isas[ii].name, &w, 33, "bf16 prefill");
        free_w(&w);
        w = make_w(70, 1100, CI_F8_E4M3, CI_BF16, 128, 0);
        check_matmul(be, isas[ii].name, &w, 33, "fp8 prefill");
        free_w(&w);
        be->free(be);
    }
}

/* ---- rmsnorm -------------------------------------------------------------------------- */

static void test_rmsnorm(void) {
    static const int dims[] = { 1, 77, 1000, 4099 };
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        for (int di = 0; di < 4; di++)
            for (int n = 1; n <= 17; n += 8)
                for (int wi = 0; wi < 2; wi++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        int dim = dims[di];
                        float *x = rnd_vec((int64_t)n * dim, -3, 3), *w = wi ? rnd_vec(dim, -2, 2) : NULL;
                        float *out = inplace ? x : malloc((size_t)n * dim * 4);
                        double *ref = malloc((size_t)n * dim * 8);
                        float eps = 1e-6f;
                        for (int t = 0; t < n; t++) {
                            double ss = 0;
                            for (int i = 0; i < dim; i++) ss += (double)x[t * dim + i] * x[t * dim + i];
                            double r = 1.0 / sqrt(ss / dim + eps);
                            for (int i = 0; i < dim; i++)
                                ref[t * dim + i] = x[t * dim + i] * r * (w ? w[i] : 1.0);
                        }
                        be->rmsnorm(be, out, x, w, n, dim, eps);
                        /* per row: each row is normalised on its own */
                        for (int t = 0; t < n; t++) {
                            double e = rel_err(out + t * dim, ref + t * dim, dim);
                            CHECK(e <= TOL, "%s rmsnorm dim=%d n=%d w=%d inplace=%d: rel err %.3g", isas[ii].name,
                                  dim, n, wi, inplace, e);
                        }
                        if (!inplace) free(out);
                        free(x);
                        free(w);
                        free(ref);
                    }
        be->free(be);
    }
}

/* ---- subnormals (core/fpmode.h) ------------------------------------------------------ */

/* Every op computes with flush-to-zero and denormals-are-zero, on the pool's workers and on
 * the calling thread alike, and gives the caller its floating-point environment back: adding
 * subnormals to zeros gives zeros in every chunk (several threads) and in a decode-sized call
 * (the caller alone), and MXCSR reads the same before and after. x86 only (elsewhere a no-op). */
static void test_flush_subnormals(void) {
#if defined(__x86_64__)
    const int64_t big = 1 << 17, small = 100;
    const unsigned csr0 = _mm_getcsr();
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(3, isas[ii].isa);
        if (!be) continue;
        float *y = calloc((size_t)big, sizeof *y), *x = malloc((size_t)big * sizeof *x);
        for (int64_t i = 0; i < big; i++) x[i] = (i & 1 ? -1e-40f : 3e-39f);
        for (int pass = 0; pass < 2; pass++) {
            int64_t n = pass ? small : big, bad = 0;
            be->add(be, y, x, n);
            for (int64_t i = 0; i < n; i++) bad += y[i] != 0.0f;
            CHECK(bad == 0, "%s add of %lld subnormals: %lld nonzero results (y[0] %g)", isas[ii].name, (long long)n,
                  (long long)bad, y[0]);
            CHECK((_mm_getcsr() & ~0x3fu) == (csr0 & ~0x3fu), "%s: MXCSR controls %#x after the op, %#x before",
                  isas[ii].name, _mm_getcsr() & ~0x3fu, csr0 & ~0x3fu);   /* bits 0-5: sticky status flags */
        }
        volatile float sub = 3e-39f, one = 1.0f;
        CHECK(sub * one != 0.0f, "%s: the caller's own arithmetic flushes subnormals after an op", isas[ii].name);
        free(x);
        free(y);
        be->free(be);
    }
#endif
}

/* ---- rope ----------------------------------------------------------------------------- */

static void test_rope(void) {
    /* head_dim, rot_offset, rot_dim */
    static const int cfg[][3] = { { 64, 0, 64 }, { 72, 8, 32 }, { 128, 64, 64 }, { 576, 0, 576 } };
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        for (int ci = 0; ci < 4; ci++)
            for (int style = 0; style < 2; style++)
                for (int n = 1; n <= 17; n += 16) {
                    int hd = cfg[ci][0], off = cfg[ci][1], rd = cfg[ci][2], nh = 3, half = rd / 2;
                    float mscale = style ? 1.25f : 1.0f;
                    int64_t cnt = (int64_t)n * nh * hd;
                    float *x = rnd_vec(cnt, -2, 2), *inv = malloc((size_t)half * 4);
                    int32_t *pos = malloc((size_t)n * 4);
                    double *ref = malloc((size_t)cnt * 8);
                    for (int i = 0; i < half; i++) inv[i] = (float)pow(10000.0, -2.0 * i / rd);
                    for (int t = 0; t < n; t++) pos[t] = 3 + 611 * t;
                    for (int64_t i = 0; i < cnt; i++) ref[i] = x[i];
                    for (int t = 0; t < n; t++)
                        for (int h = 0; h < nh; h++) {
                            const float *xb = x + ((int64_t)t * nh + h) * hd + off;
                            double *rb = ref + ((int64_t)t * nh + h) * hd + off;
                            for (int i = 0; i < half; i++) {
                                double ang = (double)((float)pos[t] * inv[i]); /* f32 angle, as specified */
                                double c = cos(ang) * mscale, s = sin(ang) * mscale;
                                int ia = style == CI_ROPE_NEOX ? i : 2 * i, ib = style == CI_ROPE_NEOX ? i + half : 2 * i + 1;
                                rb[ia] = xb[ia] * c - xb[ib] * s;
                                rb[ib] = xb[ib] * c + xb[ia] * s;
                            }
                        }
                    be->rope(be, x, n, nh, hd, off, rd, pos, inv, mscale, (ci_rope_style)style);
                    double e = rel_err(x, ref, cnt);
                    CHECK(e <= TOL, "%s rope hd=%d off=%d rot=%d style=%d n=%d: rel err %.3g", isas[ii].name, hd, off,
                          rd, style, n, e);
                    free(x);
                    free(inv);
                    free(pos);
                    free(ref);
                }
        be->free(be);
    }
}

/* The CPU keeps the last prefill-sized rope call's cos / sin for the next one with the same
 * positions, frequencies and mscale (q then k, every layer): each call in a sequence that reuses
 * it and then changes one of them (positions, the frequencies in place, mscale, the count) gives
 * the bits of a fresh backend's call. */
static void test_rope_table_reuse(void) {
    enum { HD = 64, NH = 2, N = 96 };
    ci_backend *be = ci_backend_cpu_new(2, CI_ISA_AUTO);
    float *inv = malloc(HD / 2 * sizeof(float));
    int32_t *pos = malloc(N * sizeof(int32_t));
    for (int i = 0; i < HD / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / HD);
    for (int t = 0; t < N; t++) pos[t] = 5 + t;
    for (int step = 0; step < 6 && be; step++) {
        int n = N;
        float mscale = 1.0f;
        if (step == 2) for (int t = 0; t < N; t++) pos[t] = 900 + 3 * t;   /* new positions */
        if (step == 3) inv[7] *= 1.5f;                                    /* new frequencies, same pointer */
        if (step == 4) mscale = 1.0625f;
        if (step == 5) n = N - 16;
        float *x = rnd_vec((int64_t)N * NH * HD, -2, 2), *xf = malloc((size_t)N * NH * HD * sizeof(float));
        memcpy(xf, x, (size_t)N * NH * HD * sizeof(float));
        ci_backend *fresh = ci_backend_cpu_new(2, CI_ISA_AUTO);
        be->rope(be, x, n, NH, HD, 0, HD, pos, inv, mscale, CI_ROPE_NEOX);
        if (fresh) fresh->rope(fresh, xf, n, NH, HD, 0, HD, pos, inv, mscale, CI_ROPE_NEOX);
        CHECK(fresh && !memcmp(x, xf, (size_t)N * NH * HD * sizeof(float)), "rope call %d of a sequence: differs from a "
              "fresh backend's (a stale cos / sin table?)", step);
        if (fresh) fresh->free(fresh);
        free(x);
        free(xf);
    }
    free(inv);
    free(pos);
    if (be) be->free(be);
}

/* ---- attention ------------------------------------------------------------------------ */

static void check_attention(ci_backend *be, const char *isa, int n, int pos0, int nh, int nkv, int hd) {
    int kv_stride = nkv * hd + 5; /* padded rows: the kernels must honour the stride */
    int L = pos0 + n;
    float *q = rnd_vec((int64_t)n * nh * hd, -1.5f, 1.5f);
    float *k = rnd_vec((int64_t)L * kv_stride, -1.5f, 1.5f), *v = rnd_vec((int64_t)L * kv_stride, -1, 1);
    float *out = malloc((size_t)n * nh * hd * 4);
    double *ref = calloc((size_t)n * nh * hd, 8), *s = malloc((size_t)L * 8);
    float scale = 1.0f / sqrtf((float)hd);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            int g = h / (nh / nkv), Lt = pos0 + t + 1;
            const float *qv = q + ((int64_t)t * nh + h) * hd;
            double m = -INFINITY, sum = 0;
            for (int j = 0; j < Lt; j++) {
                double a = 0;
                for (int i = 0; i < hd; i++) a += (double)qv[i] * k[(int64_t)j * kv_stride + g * hd + i];
                s[j] = a * scale;
                if (s[j] > m) m = s[j];
            }
            for (int j = 0; j < Lt; j++) sum += (s[j] = exp(s[j] - m));
            double *o = ref + ((int64_t)t * nh + h) * hd;
            for (int j = 0; j < Lt; j++)
                for (int i = 0; i < hd; i++) o[i] += s[j] / sum * v[(int64_t)j * kv_stride + g * hd + i];
        }
    be->attention(be, out, q, k, v, n, pos0, nh, nkv, hd, kv_stride, scale);
    /* per (token, head) row, so that a wrong row cannot hide behind a large one */
    double worst = 0;
    for (int r = 0; r < n * nh; r++) {
        double e = rel_err(out + (int64_t)r * hd, ref + (int64_t)r * hd, hd);
        if (isnan(e) || e > worst) worst = e;
        if (isnan(worst)) break;
    }
    CHECK(worst <= TOL, "%s attention n=%d pos0=%d heads=%d/%d hd=%d: rel err %.3g", isa, n, pos0, nh, nkv, hd, worst);
    free(q);
    free(k);
    free(v);
    free(out);
    free(ref);
    free(s);
}

static void test_attention(void) {
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        static const int hds[] = { 64, 40, 128, 7 };
        static const int ns[] = { 1, 3, 17 };
        static const int pos0s[] = { 0, 5, 100 };
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 3; c++) check_attention(be, isas[ii].name, ns[b], pos0s[c], 8, 2, hds[a]);
        check_attention(be, isas[ii].name, 1, 0, 4, 4, 64);     /* MHA */
        check_attention(be, isas[ii].name, 3, 4500, 8, 2, 64);  /* context spans many key blocks */
        check_attention(be, isas[ii].name, 17, 130, 24, 2, 48); /* group of 12: three 4-head tiles */
        check_attention(be, isas[ii].name, 3, 7, 6, 2, 80);     /* group of 3 */
        be->free(be);
        /* One thread: every item takes its whole group, whatever n. */
        be = ci_backend_cpu_new(1, isas[ii].isa);
        check_attention(be, isas[ii].name, 1, 300, 12, 2, 128);
        check_attention(be, isas[ii].name, 5, 0, 10, 2, 33);
        be->free(be);
    }
}

/* ---- elementwise and embed ------------------------------------------------------------ */

static void test_swiglu_add(void) {
    static const int64_t counts[] = { 1, 15, 1007, 40000 + 3 };
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        for (int ci = 0; ci < 4; ci++) {
            int64_t n = counts[ci];
            float *g = rnd_vec(n, -12, 12), *u = rnd_vec(n, -2, 2);
            double *ref = malloc((size_t)n * 8);
            for (int64_t i = 0; i < n; i++) ref[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            be->swiglu(be, g, u, n);
            double e = rel_err(g, ref, n);
            CHECK(e <= TOL, "%s swiglu n=%lld: rel err %.3g", isas[ii].name, (long long)n, e);
            for (int64_t i = 0; i < n; i++) ref[i] = (double)g[i] + u[i];
            be->add(be, g, u, n);
            e = rel_err(g, ref, n);
            CHECK(e <= TOL, "%s add n=%lld: rel err %.3g", isas[ii].name, (long long)n, e);
            free(g);
            free(u);
            free(ref);
        }
        be->free(be);
    }
}

static void test_embed(void) {
    for (int ii = 0; ii < n_isas; ii++) {
        ci_backend *be = ci_backend_cpu_new(2, isas[ii].isa);
        if (!be) continue;
        for (int wk = 0; wk < N_WKINDS; wk++)
            for (int big = 0; big < 2; big++) {
                int64_t rows = big ? 300 : 37, cols = big ? 2050 : 203;
                int n = big ? 40 : 5;
                wmat w = make_w(rows, cols, wkinds[wk].dt, wkinds[wk].sdt, wkinds[wk].block, !big);
                int32_t ids[40];
                for (int t = 0; t < n; t++) ids[t] = (int32_t)(rnd_u32() % rows);
                ids[0] = (int32_t)rows - 1; /* the last row: a partial row block for fp8 */
                float *out = malloc((size_t)n * cols * 4);
                double *ref = malloc((size_t)n * cols * 8);
                for (int t = 0; t < n; t++)
                    for (int64_t c = 0; c < cols; c++) ref[t * cols + c] = ref_w(&w, ids[t], c);
                be->embed(be, out, &w.m, ids, n);
                int exact = 1;
                for (int64_t i = 0; i < n * cols; i++) exact &= out[i] == (float)ref[i];
                /* conversion is exact (fp8 * scale rounds once, like the reference) */
                CHECK(exact, "%s embed %s: not exact (rel err %.3g)", isas[ii].name, wkinds[wk].name,
                      rel_err(out, ref, n * cols));
                free(out);
                free(ref);
                free_w(&w);
            }
        be->free(be);
    }
}

static void test_backend_new(void) {
    ci_backend *be = ci_backend_cpu_new(0, CI_ISA_AUTO);
    CHECK(be != NULL, "auto backend");
    if (!be) return;
    CHECK(be->n_threads >= 1 && be->n_threads == ci_pool_size(be->pool), "n_threads %d", be->n_threads);
    CHECK(strncmp(be->name, "cpu-", 4) == 0, "name %s", be->name);
    be->free(be);
}

int main(void) {
    find_isas();
    TEST_RUN(test_pool);
    TEST_RUN(test_pool_jobs);
    TEST_RUN(test_backend_new);
    TEST_RUN(test_mat_get);
    TEST_RUN(test_matmul);
    TEST_RUN(test_row_views);
    TEST_RUN(test_threads_invariant);
    TEST_RUN(test_prefetch_rule_invariant);
    TEST_RUN(test_cpu_tune);
    TEST_RUN(test_matmul_prefill_large);
    TEST_RUN(test_rmsnorm);
    TEST_RUN(test_rope);
    TEST_RUN(test_rope_table_reuse);
    TEST_RUN(test_attention);
    TEST_RUN(test_swiglu_add);
    TEST_RUN(test_flush_subnormals);
    TEST_RUN(test_embed);
    TEST_EXIT();
}
