/* amx_bf16.c — bf16 weights dotted with x rounded to bf16 on Intel AMX tiles (the cpu-amx-bf16 set).
 *
 * The same precision as cpu-avx512-bf16 (kernels_avx512.c): x rounded to bf16 (vcvtneps2bf16,
 * nearest even), each product of two bf16 exact in f32, sums in f32. What differs is the order of
 * the sums, and the speed: one TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x
 * 16 f32 sums, 16 times the work of a vdpbf16ps.
 *
 * The summation order (one for every token count, so a row gets the same bits decoded alone,
 * batched or prefilled in any chunks, as cpu_kernels.h asks of every set): an output is one
 * TDPBF16PS accumulator over the whole width, from zero, taking the columns 32 at a time left to
 * right (the last 32 zero-filled past the width); within each 32 the instruction's own order of its
 * 16 pairs. Unlike the other sets there are no CPU_KC chunk sums: a tile keeps its sums across the
 * whole row, or is stored and loaded back unchanged between the segments of a long one.
 *
 * Two forms, picked by the token count n; both run the same chain per output, so they give the
 * same bits (the products are exact and commute; tests/unit/test_determinism.c checks it):
 *   rows form (n < 16, decode and short prompts): A = 16 weight rows x 32 columns read in place,
 *     B = x as bf16 pairs [16 pairs][n tokens], C = 16 rows x n tokens; two C tiles (32 rows)
 *     share each B (one decode thread streaming alone on a Sapphire Rapids VM, a throwaway
 *     loop, 1024- and 2048-column rows: 14.4-15.4 GB/s with 16 or 32 rows a pass, 13.7-15.0 with
 *     64; software prefetch 128 to 2048 bytes ahead level or slower).
 *   tokens form (n >= 16, prefill): A = 16 token rows of x x 32 columns, B = 32 weight rows packed
 *     into pairs (a 16 x 16 transpose of 32-bit pairs per 32 columns, AMX_SEG columns at a time
 *     into the slot's 128 KiB), C = 16 tokens x 16 rows stored straight into y; 2 x 2 C tiles.
 *
 * MLX affine W go to amx_mlx.c (ci_backend_cpu_amx_mlx: exact codes, x as int16, AMX-INT8) through the
 * same three entry points; amx_tiles.h holds what the two files share.
 *
 * Tiles are a per-thread state: each call loads its configuration and releases the tiles when it
 * returns (the pool's threads keep no AMX state between ops). The kernel lets a process use them
 * only after arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): cpu_amx_usable asks once. */
#include "cpu_kernels.h"
#if defined(__x86_64__)
#include "amx_tiles.h"
#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static int amx_ok = -1, amx_int8 = 0;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    unsigned a, b, c, d;
    amx_ok = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    const int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !bf16) return;
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): without it a tile load faults */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return;
    amx_ok = 1;
    amx_int8 = (d >> 25) & 1;
}

int cpu_amx_usable(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

int cpu_amx_int8_usable(void) { return cpu_amx_usable() && amx_int8; }

size_t cpu_amx_bytes(const ci_mat *W, int n) {
    if (W->dtype == CI_U32) return amx_mlx_bytes(W, n);
    const int64_t np = n <= ROWS_FORM_MAX ? n : (n + 15) & ~15;
    return (size_t)np * (size_t)padded(W->cols) * 2;
}

int cpu_amx_prep_unit(const ci_mat *W, int n) { return W->dtype == CI_U32 ? amx_mlx_prep_unit(W, n) : 1; }

/* Tokens [t0, t1) of x (n rows of W->cols floats) into mem in the layout of n's form: rows form
 * uint32 pairs [Kp/2][n]; tokens form bf16 rows [np][Kp], np = n rounded up to 16; zero past the
 * width, and (the range that ends at n) the padding rows. Ranges write disjoint bytes. */
void AMX_TGT cpu_amx_prep(const ci_mat *W, const float *x, int n, int t0, int t1, void *mem, int act8) {
    if (W->dtype == CI_U32) {
        amx_mlx_prep(W, x, n, t0, t1, mem, act8);
        return;
    }
    const int64_t cols = W->cols, Kp = padded(cols);
    if (n <= ROWS_FORM_MAX) {
        uint32_t *xv = mem;
        for (int t = t0; t < t1; t++)
            for (int64_t c = 0; c < Kp; c += 16) {
                _Alignas(32) uint32_t p[8];
                _mm256_store_si256((__m256i *)p, round16(x + (int64_t)t * cols + c, cols - c, NULL));
                for (int i = 0; i < 8; i++) xv[(c / 2 + i) * n + t] = p[i];
            }
        return;
    }
    uint16_t *xr = mem;
    const int np = (n + 15) & ~15, tz = t1 == n ? np : t1;
    for (int t = t0; t < tz; t++)
        for (int64_t c = 0; c < Kp; c += 16)
            _mm256_storeu_si256((__m256i *)(xr + (int64_t)t * Kp + c),
                                t < n ? round16(x + (int64_t)t * cols + c, cols - c, NULL) : _mm256_setzero_si256());
}

/* 32 bf16 of W's row r from column c (zero past the width, or for a row past the matrix). */
static AMX_TGT __m512i wload(const ci_mat *W, int64_t r, int64_t c) {
    if (r >= W->rows || c >= W->cols) return _mm512_setzero_si512();
    const uint16_t *p = (const uint16_t *)W->data + r * W->cols + c;
    const int64_t left = W->cols - c;
    return left >= 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16((__mmask32)((1ull << left) - 1), p);
}

/* ---- rows form ------------------------------------------------------------------------------- */

/* A tile source for the 16 rows from r at column c: W in place when all of them lie inside it,
 * else buf (16 x 32 bf16) filled through wload. */
static AMX_TGT const void *a_src(const ci_mat *W, int64_t r, int64_t c, uint16_t *buf, int64_t *stride) {
    if (r + 16 <= W->rows && c + 32 <= W->cols) {
        *stride = W->cols * 2;
        return (const uint16_t *)W->data + r * W->cols + c;
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_si512(buf + 32 * i, wload(W, r + i, c));
    *stride = 64;
    return buf;
}

#define A_STEP(C, A, i)                                                              \
    if (g > (i)) {                                                                   \
        int64_t st;                                                                  \
        const void *src = a_src(W, r + 16 * (i), c, abuf, &st);                      \
        _tile_loadd(A, src, st);                                                     \
        _tile_dpbf16ps(C, A, 6);                                                     \
    }

static AMX_TGT void rows_form(const ci_mat *W, int64_t r0, int64_t r1, int n, const uint32_t *xv, float *y) {
    const int64_t Kp = padded(W->cols), rows = W->rows;
    _Alignas(64) uint16_t abuf[16 * 32];
    _Alignas(64) float cbuf[16 * 16];
    cfg_load(n);
    for (int64_t r = r0; r < r1; r += 32) {
        const int g = (int)((r1 - r < 32 ? r1 - r : 32) + 15) / 16;
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t c = 0; c < Kp; c += 32) {
            _tile_loadd(6, xv + (c / 2) * n, 4 * n);
            A_STEP(0, 4, 0)
            A_STEP(1, 5, 1)
        }
        for (int i = 0; i < g; i++) {
            if (i == 0) _tile_stored(0, cbuf, 4 * n);
            else _tile_stored(1, cbuf, 4 * n);
            const int64_t rb = r + 16 * i, nr = r1 - rb < 16 ? r1 - rb : 16;
            for (int t = 0; t < n; t++)
                for (int64_t j = 0; j < nr; j++) y[(int64_t)t * rows + rb + j] = cbuf[j * n + t];
        }
    }
    _tile_release();
}

/* ---- tokens form ----------------------------------------------------------------------------- */

/* 16 rows from r, columns [c, c + 32 * steps), into pairs: dst + s * dstep gets step s (tr16; rows
 * past r1 zero). */
static AMX_TGT void pack16(const ci_mat *W, int64_t r, int64_t r1, int64_t c, int64_t steps, uint32_t *dst, int64_t dstep) {
    for (int64_t s = 0; s < steps; s++) {
        __m512i v[16];
        for (int i = 0; i < 16; i++) v[i] = r + i < r1 ? wload(W, r + i, c + 32 * s) : _mm512_setzero_si512();
        tr16(v, dst + s * dstep);
    }
}

/* C tile k's sums of tokens [t, t + nt) x rows [r, r + nr) of y (row stride ys): load (first: zero)
 * or store, straight when the block is whole, else through buf. */
#define C_LOAD(k)                                                                      \
    do {                                                                               \
        if (first) _tile_zero(k);                                                      \
        else if (whole) _tile_loadd(k, yp, ys * 4);                                    \
        else {                                                                         \
            memset(buf, 0, sizeof buf);                                                \
            for (int64_t a = 0; a < nt; a++) memcpy(buf + 16 * a, yp + a * ys, (size_t)nr * 4); \
            _tile_loadd(k, buf, 64);                                                   \
        }                                                                              \
    } while (0)
#define C_STORE(k)                                                                     \
    do {                                                                               \
        if (whole) _tile_stored(k, yp, ys * 4);                                        \
        else {                                                                         \
            _tile_stored(k, buf, 64);                                                  \
            for (int64_t a = 0; a < nt; a++) memcpy(yp + a * ys, buf + 16 * a, (size_t)nr * 4); \
        }                                                                              \
    } while (0)

/* Sum tile k (tokens tile k / 2 of the block at tb, rows half k % 2 of the panel at p0): 0 when the
 * block has no such tile, else its place in y and its tokens nt and rows nr (<= 16 each). */
static inline int c_block(int k, int tiles, int halves, int tb, int t1, int64_t p0, int64_t r1, float *y, int64_t ys,
                          float **yp, int64_t *nt, int64_t *nr) {
    const int a = k >> 1, h = k & 1;
    if (a >= tiles || h >= halves) return 0;
    *nt = t1 - (tb + 16 * a) < 16 ? t1 - (tb + 16 * a) : 16;
    *nr = r1 - (p0 + 16 * h) < 16 ? r1 - (p0 + 16 * h) : 16;
    *yp = y + (int64_t)(tb + 16 * a) * ys + p0 + 16 * h;
    return 1;
}

/* OP (C_LOAD or C_STORE) on each sum tile the block has (tile numbers are immediates: one case each). */
#define EACH_C(OP)                                                                                 \
    for (int k = 0; k < 4; k++) {                                                                  \
        int64_t nt, nr;                                                                            \
        float *yp;                                                                                 \
        if (!c_block(k, tiles, halves, tb, t1, p0, r1, y, ys, &yp, &nt, &nr)) continue;            \
        const int whole = nt == 16 && nr == 16;                                                    \
        switch (k) {                                                                               \
        case 0: OP(0); break;                                                                      \
        case 1: OP(1); break;                                                                      \
        case 2: OP(2); break;                                                                      \
        default: OP(3); break;                                                                     \
        }                                                                                          \
    }

static AMX_TGT void tokens_form(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, const uint16_t *xr, float *y,
                                uint32_t *pack) {
    const int64_t Kp = padded(W->cols), ys = W->rows;
    _Alignas(64) float buf[256];
    cfg_load(16);
    for (int64_t p0 = r0; p0 < r1; p0 += 32) {
        const int halves = r1 - p0 > 16 ? 2 : 1;
        for (int64_t c0 = 0; c0 < Kp; c0 += AMX_SEG) {
            const int64_t steps = (Kp - c0 < AMX_SEG ? Kp - c0 : AMX_SEG) / 32, first = c0 == 0;
            /* pack: [step][half][pair][row] */
            for (int h = 0; h < halves; h++) pack16(W, p0 + 16 * h, r1, c0, steps, pack + 256 * h, 512);
            for (int tb = t0; tb < t1; tb += 32) {
                const int tiles = t1 - tb > 16 ? 2 : 1;
                EACH_C(C_LOAD);
                const uint16_t *xa = xr + (int64_t)tb * Kp + c0;
                for (int64_t s = 0; s < steps; s++) {
                    _tile_loadd(6, pack + 512 * s, 64);
                    _tile_loadd(4, xa + 32 * s, Kp * 2);
                    _tile_dpbf16ps(0, 4, 6);
                    if (halves > 1) {
                        _tile_loadd(7, pack + 512 * s + 256, 64);
                        _tile_dpbf16ps(1, 4, 7);
                    }
                    if (tiles > 1) {
                        _tile_loadd(5, xa + 16 * Kp + 32 * s, Kp * 2);
                        _tile_dpbf16ps(2, 5, 6);
                        if (halves > 1) _tile_dpbf16ps(3, 5, 7);
                    }
                }
                EACH_C(C_STORE);
            }
        }
    }
    _tile_release();
}

void cpu_amx_rows(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const void *xp, float *y, void *pack,
                  int tiles, const uint32_t *pt, int act8) {
    if (W->dtype == CI_U32) amx_mlx_rows(W, r0, r1, t0, t1, n, xp, y, pack, tiles, pt, act8);
    else if (n <= ROWS_FORM_MAX) rows_form(W, r0, r1, n, xp, y);
    else tokens_form(W, r0, r1, t0, t1, xp, y, pack);
}

size_t cpu_amx_pack_bytes(void) { return (size_t)32 * AMX_SEG * 2; }
int cpu_amx_rows_form_max(void) { return ROWS_FORM_MAX; }

#else
int cpu_amx_usable(void) { return 0; }
int cpu_amx_int8_usable(void) { return 0; }
size_t cpu_amx_bytes(const ci_mat *W, int n) { (void)W; (void)n; return 0; }
int cpu_amx_prep_unit(const ci_mat *W, int n) { (void)W; (void)n; return 1; }
int cpu_amx_q_ok(const ci_mat *W) { (void)W; return 0; }
void cpu_amx_prep(const ci_mat *W, const float *x, int n, int t0, int t1, void *mem, int act8) {
    (void)W; (void)x; (void)n; (void)t0; (void)t1; (void)mem; (void)act8;
}
void cpu_amx_rows(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const void *xp, float *y, void *pack,
                  int tiles, const uint32_t *pt, int act8) {
    (void)tiles;
    (void)act8;
    (void)pt;
    (void)W; (void)r0; (void)r1; (void)t0; (void)t1; (void)n; (void)xp; (void)y; (void)pack;
}
size_t cpu_amx_pack_bytes(void) { return 0; }
int cpu_amx_rows_form_max(void) { return 0; }
uint32_t *cpu_amx_mlx_ptiles(cpu_amx_ptab **tab, const ci_mat *W, int64_t *fill) {
    (void)tab;
    (void)W;
    *fill = 0;
    return NULL;
}
void cpu_amx_mlx_ptiles_fill(const ci_mat *W, uint32_t *t, int64_t r0, int64_t r1) {
    (void)W;
    (void)t;
    (void)r0;
    (void)r1;
}
void cpu_amx_ptab_free(cpu_amx_ptab *tab) { (void)tab; }
#endif
