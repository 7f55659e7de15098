/* test_decode_alloc.c — the CPU decode path does not allocate (DESIGN.md: scratch comes from
 * buffers that are grown once and kept).
 *
 * This binary is linked with malloc, calloc, realloc, aligned_alloc and posix_memalign wrapped
 * (ld --wrap, CMakeLists.txt), for its own objects and the engine's archive alike, so every
 * heap allocation the engine makes while `counting` is on is counted (those libc makes inside
 * itself, stdio or strdup, are not). Checked:
 *  - the counter sees the engine: making a backend allocates;
 *  - matmuls and MoE decode steps (one pool pass over every expert: cpu_matmul_batch) of 1..4
 *    token rows, on every ISA here, with int16 activations and without: once each size has run,
 *    running them all again from the largest to the smallest (after a prefill, which prepares
 *    more than any of them) allocates nothing and gives the same bits as the first run, whose
 *    prepared x went into freshly grown scratch;
 *  - every fixture, with ci_model_opts.int16_act and without: after a prefill and two steps,
 *    three single-token steps (ci_forward) allocate nothing (deepseek_v32's sparse rows too:
 *    their DSA scratch is sized by the op's max_keys, not by the row's context). */
#include "check.h"
#include "cinfer.h"
#include "backend/backend.h"
#include "core/tensor.h"
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the allocation counter ---------------------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t k, size_t n);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n);

static atomic_int counting;
static atomic_long n_allocs;
static void note(void) {
    if (atomic_load(&counting)) atomic_fetch_add(&n_allocs, 1);
}
void *__wrap_malloc(size_t n) { note(); return __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { note(); return __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { note(); return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { note(); return __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { note(); return __real_posix_memalign(p, a, n); }

static void count_from_zero(void) { atomic_store(&n_allocs, 0); atomic_store(&counting, 1); }
static long counted(void) { atomic_store(&counting, 0); return atomic_load(&n_allocs); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / (float)0x1000000; }

static void test_counter_sees_the_engine(void) {
    count_from_zero();
    ci_backend *be = ci_backend_cpu_new(2, CI_ISA_AUTO);
    long n = counted();
    CHECK(be != NULL, "no CPU backend");
    CHECK(n > 0, "making a backend counted no allocation: malloc is not wrapped (CMakeLists.txt)");
    if (be) be->free(be);
}

/* ---- matmuls and MoE steps --------------------------------------------------------------- */

typedef struct {
    ci_mat m;
    ci_qdesc d;
    void *data, *scales, *biases;
} wmat;

/* bits 4 / 8: MLX affine with group g (bf16 scales and biases); bits 0: bf16; mx: mxfp4 */
static void make_w(wmat *w, int bits, int group, int mx, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    w->m.rows = rows;
    w->m.cols = cols;
    if (!bits) {
        uint16_t *p = malloc((size_t)(rows * cols) * 2);
        for (int64_t i = 0; i < rows * cols; i++) p[i] = ci_f32_to_bf16(rnd(-1, 1));
        w->data = p;
        w->m.data = p;
        w->m.dtype = CI_BF16;
        return;
    }
    const int64_t ng = cols / group, rb = cols * bits / 8;
    uint8_t *packed = malloc((size_t)(rows * rb));
    for (int64_t i = 0; i < rows * rb; i++) packed[i] = (uint8_t)rnd_u32();
    if (mx) {
        uint8_t *s = malloc((size_t)(rows * ng));
        for (int64_t i = 0; i < rows * ng; i++) s[i] = (uint8_t)(117 + rnd_u32() % 14);
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
    w->d.mode = mx ? CI_Q_MXFP4 : CI_Q_AFFINE;
    w->d.bits = bits;
    w->d.group = group;
    w->d.scales = w->scales;
    w->d.biases = w->biases;
    w->data = packed;
    w->m.data = packed;
    w->m.dtype = CI_U32;
    w->m.scale = &w->d;
}
static void wmat_free(wmat *w) { free(w->data); free(w->scales); free(w->biases); }

enum { NW = 6, E = 5, K = 2, X = 128, I = 64, NP = 33, COLS_MAX = 1536, ROWS_MAX = 70 };

/* One backend: the matmuls of NW weights (smallest first) and MoE steps for n = 1..4, then a
 * prefill, then all of them again from the largest, counted and compared. */
static void decode_reuses_scratch(ci_backend *be) {
    static const struct { int bits, group, mx; int64_t rows, cols; } ws[NW] = {
        { 4, 32, 0, 9, 160 }, { 8, 128, 0, 5, 384 }, { 0, 0, 0, 11, 704 },
        { 4, 32, 1, 19, 640 }, { 8, 32, 0, 21, 1088 }, { 4, 64, 0, 37, 1536 },
    };
    wmat w[NW], ex[3][E];
    ci_mat mg[E], mu[E], md[E];
    for (int i = 0; i < NW; i++) make_w(&w[i], ws[i].bits, ws[i].group, ws[i].mx, ws[i].rows, ws[i].cols);
    for (int e = 0; e < E; e++) {
        make_w(&ex[0][e], 4, 64, 0, I, X); make_w(&ex[1][e], 4, 64, 0, I, X); make_w(&ex[2][e], 8, 32, 0, X, I);
        mg[e] = ex[0][e].m; mu[e] = ex[1][e].m; md[e] = ex[2][e].m;
    }
    ci_moe moe = { .n_experts = E, .top_k = K, .hidden = X, .inter = I, .routed_scaling = 1, .n_group = 1,
                   .topk_group = 1, .w_gate = mg, .w_up = mu, .w_down = md };
    static float x[NP * COLS_MAX], y[NP * ROWS_MAX], ya[4][NW][4 * ROWS_MAX], ma[4][4 * X], mo[4 * X], wt[4 * K];
    int32_t sel[4 * K];
    for (int i = 0; i < NP * COLS_MAX; i++) x[i] = rnd(-1, 1) * (i % 97 == 0 ? 8.0f : 1.0f);
    for (int i = 0; i < 4 * K; i++) wt[i] = rnd(0, 1);
    for (int t = 0; t < 4; t++) sel[t * K] = t % E, sel[t * K + 1] = (t + 2) % E;
    for (int n = 1; n <= 4; n++) {
        for (int i = 0; i < NW; i++) be->matmul(be, ya[n - 1][i], x, n, &w[i].m);
        be->moe_experts(be, ma[n - 1], x, n, sel, wt, &moe, 0);
    }
    be->matmul(be, y, x, NP, &w[NW - 1].m);   /* a prefill: more prepared x than any step */
    be->matmul(be, y, x, 9, &w[NW - 2].m);
    int same = 1;
    count_from_zero();
    for (int n = 4; n >= 1; n--) {
        for (int i = NW - 1; i >= 0; i--) {
            be->matmul(be, y, x, n, &w[i].m);
            same &= !memcmp(y, ya[n - 1][i], (size_t)(n * ws[i].rows) * sizeof(float));
        }
        be->moe_experts(be, mo, x, n, sel, wt, &moe, 0);
        same &= !memcmp(mo, ma[n - 1], (size_t)(n * X) * sizeof(float));
    }
    long n_al = counted();
    CHECK(n_al == 0, "%s: %ld allocations in 4 x (%d matmuls + an MoE step) already run once", be->name, n_al, NW);
    CHECK(same, "%s: a matmul or MoE step run again on grown scratch gave other bits", be->name);
    CHECK(be->status(be) == 0, "%s: %s", be->name, be->last_error);
    for (int i = 0; i < NW; i++) wmat_free(&w[i]);
    for (int e = 0; e < E; e++) { wmat_free(&ex[0][e]); wmat_free(&ex[1][e]); wmat_free(&ex[2][e]); }
}

static void test_matmuls_reuse_scratch(void) {
    static const ci_isa isas[] = { CI_ISA_SCALAR, CI_ISA_AVX2, CI_ISA_AVX512, CI_ISA_AVX512BF16, CI_ISA_AMXBF16 };
    int i16_runs = 0, amx_runs = 0;
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
        for (int mode = 0; mode < 3; mode++) {   /* as it is, int16 activations, MLX weights as amx_mlx.c computes them
                                                  * (AVX-512 VNNI) or mlx_avx2.c (AVX2) */
            if (mode == 2 && isas[i] != CI_ISA_AVX512 && isas[i] != CI_ISA_AVX2) continue;
            ci_backend *be = ci_backend_cpu_new(2, isas[i]);
            if (!be) continue;
            if (!mode || (mode == 1 && ci_backend_cpu_int16_act(be)) || (mode == 2 && ci_backend_cpu_amx_mlx(be))) {
                decode_reuses_scratch(be);
                i16_runs += mode == 1;
                amx_runs += mode == 2;
            }
            be->free(be);
        }
    if (!i16_runs) printf("NOTE no AVX2 on this CPU: the int16 path not checked\n");
    if (!amx_runs) printf("NOTE no AVX2 on this CPU: the MLX amx_mlx.c / mlx_avx2.c kernels not checked\n");
}

/* ---- whole decode steps ------------------------------------------------------------------ */

static void decode_steps(const char *dir, int int16_act) {
    char err[1024];
    ci_model_opts o = { .n_threads = 2, .int16_act = int16_act };
    ci_model *m = NULL;
    ci_session *s = NULL;
    if (ci_model_open(dir, &o, &m, err, sizeof err) || ci_session_new(m, 64, &s, err, sizeof err)) {
        CHECK(0, "%s: %s", dir, err);
        ci_model_free(m);
        return;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    float *logits = malloc((size_t)info.vocab_size * sizeof *logits);
    /* a prompt of 34: past the DSA fixtures' index_topk (8 to 32), so the prefill has sparse rows */
    int toks[39], rc = 0;
    for (int i = 0; i < 39; i++) toks[i] = (1 + 7 * i) % info.vocab_size;
    rc |= ci_forward(s, toks, 34, logits, 0, err, sizeof err);
    for (int i = 34; i < 36; i++) rc |= ci_forward(s, &toks[i], 1, logits, 0, err, sizeof err);
    count_from_zero();
    for (int i = 36; i < 39; i++) rc |= ci_forward(s, &toks[i], 1, logits, 0, err, sizeof err);
    long n = counted();
    CHECK(rc == 0, "%s: %s", dir, err);
    CHECK(n == 0, "%s (%s, int16_act %d): %ld allocations in 3 decode steps", dir, info.backend, int16_act, n);
    /* greedy steps (ci_forward_argmax; the model keeps the host logits of a family without an
     * argmax op): one to warm, then two counted; then the same through forward_batch_argmax for
     * a batch of one where the family batches */
    int id = -1, ids[1] = { -1 };
    rc = ci_forward_argmax(s, &toks[0], 1, &id, err, sizeof err);
    count_from_zero();
    for (int i = 1; i < 3; i++) rc |= ci_forward_argmax(s, &toks[i], 1, &id, err, sizeof err);
    n = counted();
    CHECK(rc == 0 && id >= 0 && id < info.vocab_size, "%s: argmax steps: %s", dir, err);
    CHECK(n == 0, "%s (%s, int16_act %d): %ld allocations in 2 argmax steps", dir, info.backend, int16_act, n);
    ci_session *const ss[1] = { s };
    if (ci_forward_batch_argmax(ss, &toks[3], 1, ids, err, sizeof err) == 0) {
        count_from_zero();
        rc = 0;
        for (int i = 4; i < 6; i++) rc |= ci_forward_batch_argmax(ss, &toks[i], 1, ids, err, sizeof err);
        n = counted();
        CHECK(rc == 0 && ids[0] >= 0 && ids[0] < info.vocab_size, "%s: batch argmax steps: %s", dir, err);
        CHECK(n == 0, "%s (%s, int16_act %d): %ld allocations in 2 batch argmax steps", dir, info.backend, int16_act, n);
    }
    free(logits);
    ci_session_free(s);
    ci_model_free(m);
}

static void test_decode_steps_do_not_allocate(void) {
    DIR *d = opendir("tests/fixtures");
    CHECK(d != NULL, "tests/fixtures not found (run from the repository root)");
    if (!d) return;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[512];
        snprintf(dir, sizeof dir, "tests/fixtures/%s", e->d_name);
        decode_steps(dir, 0);
        decode_steps(dir, 1);
        n++;
    }
    closedir(d);
    CHECK(n >= 40, "only %d fixtures found", n);
}

int main(void) {
    TEST_RUN(test_counter_sees_the_engine);
    TEST_RUN(test_matmuls_reuse_scratch);
    TEST_RUN(test_decode_steps_do_not_allocate);
    TEST_EXIT();
}
