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
 * MLX affine 4- and 8-bit W (cpu_amx_q_ok: groups of a multiple of 32 columns) take the same tiles
 * at near the f32 path's precision: each weight w = s q + b (one f32 fma) and each x are cut into
 * two bf16, hi = bf16(v) (nearest even) and lo = bf16(v - hi) (w and x to within ~2^-17), and a
 * 32-column step adds w_hi x_hi, w_hi x_lo, w_lo x_hi into the output's accumulator, in that
 * order, in both forms (w_lo x_lo, below 2^-17 of the product, is left out): three TDPBF16PS a
 * step where bf16 W take one. The weights are cut as they are read (rows form: 16 rows into a
 * buffer per step; tokens form: into the panel, AMX_SEG / 2 columns of both parts).
 *
 * Tiles are a per-thread state: each call loads its configuration and releases the tiles when it
 * returns (the pool's threads keep no AMX state between ops). The kernel lets a process use them
 * only after arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): cpu_amx_usable asks once. */
#include "cpu_kernels.h"
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define AMX_SEG 2048   /* columns of a packed tokens-form panel: 32 rows x 2048 x 2 bytes = 128 KiB */
#define ROWS_FORM_MAX 15

static int amx_ok = -1;
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
}

int cpu_amx_usable(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
}

typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) amx_cfg;

/* Tiles 0-3: sums; 4, 5: A; 6, 7: B. rows form: C and B nb columns of 4 bytes (nb = n tokens);
 * tokens form: every tile 16 x 64 bytes. */
static AMX_TGT void cfg_load(int nb) {
    _Alignas(64) amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.rows[i] = 16;
        c.colsb[i] = 64;
    }
    if (nb < 16)
        for (int i = 0; i < 4; i++) c.colsb[i] = c.colsb[6 + (i & 1)] = (uint16_t)(4 * nb);
    _tile_loadconfig(&c);
}

static int64_t padded(int64_t cols) { return (cols + 31) & ~(int64_t)31; }

/* MLX W: x goes in as two bf16 parts too (x_hi, x_lo), after each other in the prepared bytes. */
static int split_x(const ci_mat *W) { return W->dtype == CI_U32; }

size_t cpu_amx_bytes(const ci_mat *W, int n) {
    const int64_t np = n <= ROWS_FORM_MAX ? n : (n + 15) & ~15;
    return (size_t)np * (size_t)padded(W->cols) * 2 * (split_x(W) ? 2 : 1);
}

/* 16 floats rounded to bf16 (the tail zero-filled), as kernels_avx512.c's x_bf16 rounds; with lo,
 * also the rounding's remainders rounded to bf16 into *lo. */
static AMX_TGT __m256i round16(const float *x, int64_t left, __m256i *lo) {
    __m512 v = left >= 16 ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps((__mmask16)((1u << (left > 0 ? left : 0)) - 1), x);
    const __m256bh h = _mm512_cvtneps_pbh(v);
    if (lo) {
        const __m512 hf = (__m512)_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16);
        *lo = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf));
    }
    return (__m256i)h;
}

/* x (n rows of W->cols floats) into mem in the layout of n's form: rows form uint32 pairs [Kp/2][n];
 * tokens form bf16 rows [np][Kp], np = n rounded up to 16; zero past the width and the rows. For
 * MLX W (split_x) the low parts follow in the same layout. */
void AMX_TGT cpu_amx_prep(const ci_mat *W, const float *x, int n, void *mem) {
    const int64_t cols = W->cols, Kp = padded(cols);
    const int two = split_x(W);
    if (n <= ROWS_FORM_MAX) {
        uint32_t *xv = mem, *xl = xv + Kp / 2 * n;
        for (int t = 0; t < n; t++)
            for (int64_t c = 0; c < Kp; c += 16) {
                _Alignas(32) uint32_t p[8], q[8];
                __m256i lo;
                _mm256_store_si256((__m256i *)p, round16(x + (int64_t)t * cols + c, cols - c, two ? &lo : NULL));
                for (int i = 0; i < 8; i++) xv[(c / 2 + i) * n + t] = p[i];
                if (!two) continue;
                _mm256_store_si256((__m256i *)q, lo);
                for (int i = 0; i < 8; i++) xl[(c / 2 + i) * n + t] = q[i];
            }
        return;
    }
    const int np = (n + 15) & ~15;
    uint16_t *xr = mem, *xl = xr + (int64_t)np * Kp;
    for (int t = 0; t < np; t++)
        for (int64_t c = 0; c < Kp; c += 16) {
            __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
            if (t < n) hi = round16(x + (int64_t)t * cols + c, cols - c, two ? &lo : NULL);
            _mm256_storeu_si256((__m256i *)(xr + (int64_t)t * Kp + c), hi);
            if (two) _mm256_storeu_si256((__m256i *)(xl + (int64_t)t * Kp + c), lo);
        }
}

int cpu_amx_q_ok(const ci_mat *W) {
    if (W->dtype != CI_U32 || !W->scale) return 0;
    const ci_qdesc *d = W->scale;
    if (d->mode != CI_Q_AFFINE || (d->bits != 4 && d->bits != 8) || d->stored_t) return 0;
    if (d->scale_dtype != CI_F32 && d->scale_dtype != CI_BF16 && d->scale_dtype != CI_F16) return 0;
    return d->group >= 32 && d->group % 32 == 0 && W->cols % d->group == 0;
}

static float qparam(ci_dtype t, const void *p, int64_t i) {
    switch (t) {
    case CI_F32: return ((const float *)p)[i];
    case CI_BF16: return ci_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ci_f16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* f32 values as bf16 pairs w_hi = bf16(w) (nearest even) and w_lo = bf16(w - w_hi) (the difference
 * is exact in f32), 16 of each. */
static AMX_TGT void split16(__m512 w, __m256i *hi, __m256i *lo) {
    const __m256bh h = _mm512_cvtneps_pbh(w);
    const __m512 hf = (__m512)_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16);
    *hi = (__m256i)h;
    *lo = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(w, hf));
}

/* 32 columns from c of an MLX affine row (cpu_amx_q_ok: they lie in one group) as two bf16
 * vectors: w = s q + b in f32 (one fma), hi = bf16(w), lo = bf16(w - hi). 4-bit: byte i holds
 * columns 2i (low nibble) and 2i + 1, so the even and odd columns' bf16 go into the low and
 * high halves of 32-bit lane i; 8-bit: byte i is column i. */
static AMX_TGT void qload(const ci_mat *W, int64_t r, int64_t c, __m512i *hi, __m512i *lo) {
    const ci_qdesc *d = W->scale;
    const int64_t gi = (W->scale_row0 + r) * (W->cols / d->group) + c / d->group;
    const __m512 s = _mm512_set1_ps(qparam(d->scale_dtype, d->scales, gi));
    const __m512 b = _mm512_set1_ps(qparam(d->scale_dtype, d->biases, gi));
    const uint8_t *p = (const uint8_t *)W->data + r * (W->cols * d->bits / 8) + c * d->bits / 8;
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512 w0, w1;   /* 4-bit: the even and odd columns; 8-bit: columns 0-15 and 16-31 */
    if (d->bits == 4) {
        w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15))), s, b);
        w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), s, b);
    } else {
        w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), s, b);
        w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16)))), s, b);
    }
    __m256i h0, l0, h1, l1;
    split16(w0, &h0, &l0);
    split16(w1, &h1, &l1);
    if (d->bits == 4) {
        *hi = _mm512_or_si512(_mm512_cvtepu16_epi32(h0), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
        *lo = _mm512_or_si512(_mm512_cvtepu16_epi32(l0), _mm512_slli_epi32(_mm512_cvtepu16_epi32(l1), 16));
    } else {
        *hi = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
        *lo = _mm512_inserti64x4(_mm512_castsi256_si512(l0), l1, 1);
    }
}

/* The 32 bf16 of W's row r from column c, and for MLX rows the low parts (lo; bf16 W: zero):
 * zero past the width, or for a row past the matrix. */
static AMX_TGT __m512i wload2(const ci_mat *W, int64_t r, int64_t c, __m512i *lo) {
    *lo = _mm512_setzero_si512();
    if (r >= W->rows || c >= W->cols) return _mm512_setzero_si512();
    if (W->dtype == CI_U32) {
        __m512i hi;
        qload(W, r, c, &hi, lo);
        return hi;
    }
    const uint16_t *p = (const uint16_t *)W->data + r * W->cols + c;
    const int64_t left = W->cols - c;
    return left >= 32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16((__mmask32)((1ull << left) - 1), p);
}

/* ---- rows form ------------------------------------------------------------------------------- */

/* A tile source for the 16 rows from r at column c: W in place when it is bf16 and all of them lie
 * inside it, else buf (16 x 32 bf16) filled through wload2, and for MLX W (lbuf given) the rows'
 * low parts into lbuf. */
static AMX_TGT const void *a_src(const ci_mat *W, int64_t r, int64_t c, uint16_t *buf, uint16_t *lbuf, int64_t *stride) {
    if (W->dtype == CI_BF16 && r + 16 <= W->rows && c + 32 <= W->cols) {
        *stride = W->cols * 2;
        return (const uint16_t *)W->data + r * W->cols + c;
    }
    for (int i = 0; i < 16; i++) {
        __m512i lo;
        _mm512_storeu_si512(buf + 32 * i, wload2(W, r + i, c, &lo));
        if (lbuf) _mm512_storeu_si512(lbuf + 32 * i, lo);
    }
    *stride = 64;
    return buf;
}

/* Rows r + 16 i of sum tile C, one step: bf16 W its one product; MLX W (two) w_hi x_hi, w_hi x_lo
 * (x_lo in tile 7), w_lo x_hi, in that order. */
#define A_STEP(C, A, i)                                                              \
    if (g > (i)) {                                                                   \
        int64_t st;                                                                  \
        const void *src = a_src(W, r + 16 * (i), c, abuf, two ? lbuf : NULL, &st);   \
        _tile_loadd(A, src, st);                                                     \
        _tile_dpbf16ps(C, A, 6);                                                     \
        if (two) {                                                                   \
            _tile_dpbf16ps(C, A, 7);                                                 \
            _tile_loadd(A, lbuf, 64);                                                \
            _tile_dpbf16ps(C, A, 6);                                                 \
        }                                                                            \
    }

static AMX_TGT void rows_form(const ci_mat *W, int64_t r0, int64_t r1, int n, const uint32_t *xv, float *y) {
    const int64_t Kp = padded(W->cols), rows = W->rows;
    const int two = W->dtype == CI_U32;
    _Alignas(64) uint16_t abuf[16 * 32], lbuf[16 * 32];
    _Alignas(64) float cbuf[16 * 16];
    cfg_load(n);
    for (int64_t r = r0; r < r1; r += 32) {
        const int g = (int)((r1 - r < 32 ? r1 - r : 32) + 15) / 16;
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t c = 0; c < Kp; c += 32) {
            _tile_loadd(6, xv + (c / 2) * n, 4 * n);
            if (two) _tile_loadd(7, xv + Kp / 2 * n + (c / 2) * n, 4 * n);
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

/* 16 rows of 32 bf16 (v[i]: row i) into pairs: o[p * 16 + i] = pair p of row i, a 16 x 16
 * transpose of 32-bit pairs. */
static AMX_TGT void tr16(const __m512i v[16], uint32_t *o) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* u[4 q + j], 128-bit lane L: rows 4 q .. 4 q + 3 of pair 4 L + j */
    for (int j = 0; j < 4; j++) {
        __m512i s0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), s1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        __m512i s2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44), s3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        _mm512_storeu_si512(o + 16 * (0 + j), _mm512_shuffle_i32x4(s0, s2, 0x88));
        _mm512_storeu_si512(o + 16 * (4 + j), _mm512_shuffle_i32x4(s0, s2, 0xDD));
        _mm512_storeu_si512(o + 16 * (8 + j), _mm512_shuffle_i32x4(s1, s3, 0x88));
        _mm512_storeu_si512(o + 16 * (12 + j), _mm512_shuffle_i32x4(s1, s3, 0xDD));
    }
}

/* 16 rows from r, columns [c, c + 32 * steps), into pairs (tr16) at dst + s * dstep for step s
 * (rows past r1 zero); MLX W's low parts at dst + s * dstep + 512. */
static AMX_TGT void pack16(const ci_mat *W, int64_t r, int64_t r1, int64_t c, int64_t steps, uint32_t *dst, int64_t dstep) {
    const int two = W->dtype == CI_U32;
    for (int64_t s = 0; s < steps; s++) {
        __m512i v[16], l[16];
        for (int i = 0; i < 16; i++) {
            l[i] = _mm512_setzero_si512();
            v[i] = r + i < r1 ? wload2(W, r + i, c + 32 * s, &l[i]) : _mm512_setzero_si512();
        }
        tr16(v, dst + s * dstep);
        if (two) tr16(l, dst + s * dstep + 512);
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

static AMX_TGT void tokens_form(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int t_n, const uint16_t *xr,
                                float *y, uint32_t *pack) {
    const int64_t Kp = padded(W->cols), ys = W->rows;
    const int parts = W->dtype == CI_U32 ? 2 : 1;   /* MLX W: high and low parts, each step */
    const int64_t seg = AMX_SEG / parts, dstep = 512 * parts;   /* the pack holds 32 x AMX_SEG pairs' halves */
    _Alignas(64) float buf[256];
    cfg_load(16);
    for (int64_t p0 = r0; p0 < r1; p0 += 32) {
        const int halves = r1 - p0 > 16 ? 2 : 1;
        for (int64_t c0 = 0; c0 < Kp; c0 += seg) {
            const int64_t steps = (Kp - c0 < seg ? Kp - c0 : seg) / 32, first = c0 == 0;
            /* pack: [step][part][half][pair][row] */
            for (int h = 0; h < halves; h++) pack16(W, p0 + 16 * h, r1, c0, steps, pack + 256 * h, dstep);
            for (int tb = t0; tb < t1; tb += 32) {
                const int tiles = t1 - tb > 16 ? 2 : 1;
                EACH_C(C_LOAD);
                const uint16_t *xa = xr + (int64_t)tb * Kp + c0, *xlo = xa + (int64_t)((t_n + 15) & ~15) * Kp;
                for (int64_t s = 0; s < steps; s++) {
                    /* bf16 W: x w; MLX W: x_hi w_hi, x_lo w_hi, x_hi w_lo (the rows form's order) */
                    for (int k = 0; k < 2 * parts - 1; k++) {
                        const uint16_t *xk = (k == 1 ? xlo : xa) + 32 * s;
                        const uint32_t *pk = pack + dstep * s + (k == 2 ? 512 : 0);
                        _tile_loadd(4, xk, Kp * 2);
                        if (tiles > 1) _tile_loadd(5, xk + 16 * Kp, Kp * 2);
                        if (k != 1) {
                            _tile_loadd(6, pk, 64);
                            if (halves > 1) _tile_loadd(7, pk + 256, 64);
                        }
                        _tile_dpbf16ps(0, 4, 6);
                        if (tiles > 1) _tile_dpbf16ps(2, 5, 6);
                        if (halves > 1) {
                            _tile_dpbf16ps(1, 4, 7);
                            if (tiles > 1) _tile_dpbf16ps(3, 5, 7);
                        }
                    }
                }
                EACH_C(C_STORE);
            }
        }
    }
    _tile_release();
}

void cpu_amx_rows(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const void *xp, float *y, void *pack) {
    if (n <= ROWS_FORM_MAX) rows_form(W, r0, r1, n, xp, y);
    else tokens_form(W, r0, r1, t0, t1, n, xp, y, pack);
}

size_t cpu_amx_pack_bytes(void) { return (size_t)32 * AMX_SEG * 2; }
int cpu_amx_rows_form_max(void) { return ROWS_FORM_MAX; }

#else
int cpu_amx_usable(void) { return 0; }
size_t cpu_amx_bytes(const ci_mat *W, int n) { (void)W; (void)n; return 0; }
void cpu_amx_prep(const ci_mat *W, const float *x, int n, void *mem) { (void)W; (void)x; (void)n; (void)mem; }
int cpu_amx_q_ok(const ci_mat *W) { (void)W; return 0; }
void cpu_amx_rows(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const void *xp, float *y, void *pack) {
    (void)W; (void)r0; (void)r1; (void)t0; (void)t1; (void)n; (void)xp; (void)y; (void)pack;
}
size_t cpu_amx_pack_bytes(void) { return 0; }
int cpu_amx_rows_form_max(void) { return 0; }
#endif
