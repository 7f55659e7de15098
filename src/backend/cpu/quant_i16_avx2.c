/* quant_i16_avx2.c — quant_i16_avx512.c's int16-activation kernels on 8 lanes (AVX2 + FMA:
 * vpmaddwd multiplies pairs of signed words and sums each pair into a 32-bit lane, then
 * vpaddd; no VNNI needed), for AVX2 CPUs and AVX-512 ones without VNNI. The same math, stated
 * there: x rounded to int16 per block of 32 columns, exact integer code sums per lane, f32
 * scaling, the bias term on the same rounded x. A chunk is 64 (4-bit) or 32 (8-bit) columns:
 * 32 code bytes; the scales come in windows of 8 groups. 2 token rows per pass (16 ymm
 * registers: 8 accumulators for 4 rows); 3 or 4 tokens read the codes twice, from L1. */
#if defined(__x86_64__)
#define TGT __attribute__((target("avx2,fma,f16c")))
#include "quant_kernels.h"
#include <immintrin.h>
#include <math.h>

#define I16_UNROLL _Pragma("GCC unroll 4")
#define I16_LANES 8
#define I16_PF 8192   /* decode prefetch distance, bytes (i16_tile_T) */

#include "avx2_reduce.h"   /* vhsum, vhmax */

static inline TGT float i16_block(const float *x, int32_t q[32]) {
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    __m256 v[4], mx = zero, z = zero;
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[i]));
        z = _mm256_add_ps(z, _mm256_mul_ps(v[i], zero));   /* NaN when any value is not finite */
    }
    const float amax = vhmax(mx), fin = vhsum(z);
    const float id = amax > 0 && fin == 0.0f ? 32767.0f / amax : 0.0f;
    for (int i = 0; i < 4; i++)   /* nearest even (the default rounding mode), as lrintf */
        _mm256_storeu_si256((__m256i *)(q + 8 * i), _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id))));
    return fin != 0.0f ? NAN : amax / 32767.0f;
}
#include "quant_i16.h"

#include "avx2_params.h"   /* q8p */

/* The 16-bit words of 32 bytes of codes as separate code vectors: 4-bit, c[j] = nibble j of each
 * word; 8-bit, c[j] = byte j (the tile and the row kernel alike) */
static inline __attribute__((always_inline)) TGT void i16_unpack(const int BITS, __m256i v, __m256i c[4]) {
    if (BITS == 4) {
        const __m256i m4 = _mm256_set1_epi16(0x000f);
        c[0] = _mm256_and_si256(v, m4);
        c[1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        c[2] = _mm256_and_si256(_mm256_srli_epi16(v, 8), m4);
        c[3] = _mm256_srli_epi16(v, 12);
    } else {
        c[0] = _mm256_and_si256(v, _mm256_set1_epi16(0x00ff));
        c[1] = _mm256_srli_epi16(v, 8);
    }
}

/* One chunk of the 4 rows (codes at wr[r] + kb) by T prepared token rows: per row and token
 * fma(f32(exact integer sum), s * d, acc). PART: a 4-bit row's last, half chunk (km: its
 * dwords). BC: one group covers the chunk, so s is the broadcast of the row's scale gw of
 * the window (sf, converted at the window's start): the value the lane permute gives. */
static inline __attribute__((always_inline)) TGT void i16_chunk(const int T, const int BITS, const int BC,
                                                                const int PART, const uint8_t *const wr[4],
                                                                int64_t kb, __m256i km, const float sf[4][8],
                                                                int64_t gw, __m256i gsel, const int16_t *const xt[2],
                                                                const __m256 dl[2], __m256 acc[2][4]) {
    I16_UNROLL
    for (int r = 0; r < 4; r++) {
        const __m256i v = PART ? _mm256_maskload_epi32((const int *)(const void *)(wr[r] + kb), km)
                               : _mm256_loadu_si256((const __m256i *)(const void *)(wr[r] + kb));
        const __m256 s = BC ? _mm256_broadcast_ss(&sf[r][gw]) : _mm256_permutevar8x32_ps(_mm256_load_ps(sf[r]), gsel);
        __m256i c[4];
        i16_unpack(BITS, v, c);
        I16_UNROLL
        for (int t = 0; t < T; t++) {
            __m256i is = _mm256_madd_epi16(c[0], _mm256_load_si256((const __m256i *)xt[t]));
            is = _mm256_add_epi32(is, _mm256_madd_epi16(c[1], _mm256_load_si256((const __m256i *)(xt[t] + 16))));
            if (BITS == 4) {
                is = _mm256_add_epi32(is, _mm256_madd_epi16(c[2], _mm256_load_si256((const __m256i *)(xt[t] + 32))));
                is = _mm256_add_epi32(is, _mm256_madd_epi16(c[3], _mm256_load_si256((const __m256i *)(xt[t] + 48))));
            }
            acc[t][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(s, dl[t]), acc[t][r]);
        }
    }
}

/* T <= 2 token rows (prepared, stride xs bytes) by the 4 rows of W, window by window (8
 * groups: the scales converted once, then the bias term, then the window's chunks), as
 * i16_row_T orders them. BC: the group covers a chunk (G >= its columns). */
static inline __attribute__((always_inline)) TGT void i16_tile_T(const int T, const int BITS, const int BC,
                                                                 const ci_mat *W, const int64_t rows[4],
                                                                 const uint8_t *xq, int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    const i16_layout l = i16_lay(W);
    const int64_t ng = l.ng, rb = W->cols * BITS / 8;
    const int CWL = BITS == 4 ? 6 : 5;   /* log2 of the chunk's columns */
    /* Prefetch into L2 (prefetcht1), once per 64-byte line of each row, the same place I16_PF
     * bytes ahead rounded up to whole rows: a 4-row tile of 2048 4-bit columns is one 4 KiB
     * page, on which the hardware's stream prefetcher has to start again for every tile. On the
     * AVX2 Zen 4 (bench/RESULTS.md) the rule before (prefetcht0 into L1, one tile ahead, every
     * 32 bytes) streamed a 151936 x 2048 4-bit matrix at 14-15 G weights/s, this one at 19-23. */
    const int64_t pd = (I16_PF + rb - 1) / rb * rb;
    const int64_t nfull = BITS == 4 ? W->cols >> 6 : l.nch;   /* whole chunks: all but a 4-bit half one */
    const uint8_t *wr[4];
    int64_t gi[4];
    for (int r = 0; r < 4; r++) {
        wr[r] = (const uint8_t *)W->data + rows[r] * rb;
        gi[r] = (W->scale_row0 + rows[r]) * ng;
    }
    __m256i loff = _mm256_setzero_si256();
    if (!BC)
        loff = _mm256_srlv_epi32(_mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                    _mm256_set1_epi32(BITS == 4 ? 8 : 4)),
                                 _mm256_set1_epi32(l.lg));
    const __m256i km = _mm256_cmpgt_epi32(_mm256_set1_epi32(4), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _Alignas(32) float sf[4][8];   /* the window's scales of each row */
    const int16_t *xt[2];
    const float *dlp[2], *xg[2];
    __m256 acc[2][4];
    I16_UNROLL
    for (int t = 0; t < T; t++) {
        xt[t] = (const int16_t *)(xq + t * xs);
        dlp[t] = (const float *)(xq + t * xs + 2 * l.cp);
        xg[t] = dlp[t] + I16_LANES * l.nch;
        acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = _mm256_setzero_ps();
    }
    for (int64_t pb = 0; pb < ng; pb += 8) {
        const int np = (int)(ng - pb < 8 ? ng - pb : 8);
        I16_UNROLL
        for (int r = 0; r < 4; r++) {
            _mm256_store_ps(sf[r], q8p(d, d->scales, gi[r] + pb, np));
            const __m256 bv = q8p(d, d->biases, gi[r] + pb, np);
            I16_UNROLL
            for (int t = 0; t < T; t++) acc[t][r] = _mm256_fmadd_ps(bv, _mm256_load_ps(xg[t] + pb), acc[t][r]);
        }
        /* the window's whole chunks (a 4-bit row's last, half chunk after them) */
        const int64_t ch0 = (pb << l.lg) >> CWL, ch1 = pb + np >= ng ? nfull : ((pb + np) << l.lg) >> CWL;
        for (int64_t ch = ch0; ch < ch1; ch++) {
            const int64_t kb = ch << 5, k = ch << CWL, g = k >> l.lg;   /* 32 code bytes a chunk */
            if (!(kb & 63)) {
                I16_UNROLL
                for (int r = 0; r < 4; r++) __builtin_prefetch(wr[r] + kb + pd, 0, 2);
            }
            const __m256i gsel = BC ? loff : _mm256_add_epi32(_mm256_set1_epi32((int)(g - pb)), loff);
            const int16_t *xk[2];
            __m256 dl[2];
            I16_UNROLL
            for (int t = 0; t < T; t++) {
                xk[t] = xt[t] + k;
                dl[t] = _mm256_load_ps(dlp[t] + I16_LANES * ch);
            }
            i16_chunk(T, BITS, BC, 0, wr, kb, km, sf, g - pb, gsel, xk, dl, acc);
        }
        if (pb + np >= ng && nfull < l.nch) {   /* the row's last window: its half chunk */
            const int64_t ch = nfull, kb = ch << 5, k = ch << CWL, g = k >> l.lg;
            const __m256i gsel = BC ? loff : _mm256_add_epi32(_mm256_set1_epi32((int)(g - pb)), loff);
            const int16_t *xk[2];
            __m256 dl[2];
            I16_UNROLL
            for (int t = 0; t < T; t++) {
                xk[t] = xt[t] + k;
                dl[t] = _mm256_load_ps(dlp[t] + I16_LANES * ch);
            }
            i16_chunk(T, BITS, BC, 1, wr, kb, km, sf, g - pb, gsel, xk, dl, acc);
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < 4; r++) out[4 * t + r] = vhsum(acc[t][r]);
}

static TGT void i16_tile(const ci_mat *W, const int64_t rows[4], int T, const uint8_t *xq, int64_t xs, float *out) {
    const int bc = q_desc(W)->group >= i16_lay(W).cw;
    for (int t0 = 0; t0 < T; t0 += 2) {
        const int tt = T - t0 < 2 ? T - t0 : 2;
        const uint8_t *x = xq + t0 * xs;
        float *o = out + 4 * t0;
#define I16_TILE(BITS, BC) (tt == 1 ? i16_tile_T(1, BITS, BC, W, rows, x, xs, o) : i16_tile_T(2, BITS, BC, W, rows, x, xs, o))
        if (q_desc(W)->bits == 4) {
            if (bc) I16_TILE(4, 1);
            else I16_TILE(4, 0);
        } else {
            if (bc) I16_TILE(8, 1);
            else I16_TILE(8, 0);
        }
#undef I16_TILE
    }
}

/* Prefill: one row of W by T <= 4 token rows over the whole width, the rows of a block one
 * after another while the T prepared rows stay in L1 (i16_gemm). Each output is the same
 * operations on the same lanes in the same order as i16_tile_T (bias term at each window of
 * 8 groups, then per chunk fma(f32(exact integer sum), s * d, acc), one vhsum), so the same
 * bits; what differs is the register use: 4 accumulators and 4 integer sums, the codes
 * unpacked once for all T tokens, x read as memory operands (i16_tile_T with its 4 rows keeps
 * more values live than AVX2's 16 registers hold). */
/* One chunk of one row (codes v, scale s) by T prepared token rows (xk: their chunk; dl: the
 * chunk's block scales of each): the codes unpacked once, then one token's sum at a time
 * (fewer live values than all T sums at once, which GCC spilled). */
static inline __attribute__((always_inline)) TGT void i16_row_chunk(const int T, const int BITS, __m256i v, __m256 s,
                                                                    const int16_t *const xk[4],
                                                                    const float *const dk[4], __m256 acc[4]) {
    __m256i c[4];
    i16_unpack(BITS, v, c);
    I16_UNROLL
    for (int t = 0; t < T; t++) {
        const int16_t *x = xk[t];
        __m256i is = _mm256_madd_epi16(c[0], _mm256_load_si256((const __m256i *)x));
        is = _mm256_add_epi32(is, _mm256_madd_epi16(c[1], _mm256_load_si256((const __m256i *)(x + 16))));
        if (BITS == 4) {
            is = _mm256_add_epi32(is, _mm256_madd_epi16(c[2], _mm256_load_si256((const __m256i *)(x + 32))));
            is = _mm256_add_epi32(is, _mm256_madd_epi16(c[3], _mm256_load_si256((const __m256i *)(x + 48))));
        }
        const __m256 sd = _mm256_mul_ps(s, _mm256_load_ps(dk[t]));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), sd, acc[t]);
    }
}

/* BC: the group covers a chunk (G >= its columns): s is a broadcast of the window's converted
 * scale, the value the lane permute gives. */
static inline __attribute__((always_inline)) TGT void i16_row_T(const int T, const int BITS, const int BC,
                                                                const ci_mat *W, int64_t row, const uint8_t *xq,
                                                                int64_t xs, float *y, int64_t ys) {
    const ci_qdesc *d = q_desc(W);
    const i16_layout l = i16_lay(W);
    const int64_t ng = l.ng, rb = W->cols * BITS / 8;
    const int CWL = BITS == 4 ? 6 : 5;
    const int64_t nfull = BITS == 4 ? W->cols >> 6 : l.nch;   /* whole chunks: all but a 4-bit half one */
    const uint8_t *wr = (const uint8_t *)W->data + row * rb;
    const int64_t gi = (W->scale_row0 + row) * ng;
    __m256i loff = _mm256_setzero_si256();
    if (!BC)
        loff = _mm256_srlv_epi32(_mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                    _mm256_set1_epi32(BITS == 4 ? 8 : 4)),
                                 _mm256_set1_epi32(l.lg));
    const int16_t *xp[4];
    const float *dp[4];
    __m256 acc[4];
    _Alignas(32) float sf[8];   /* the window's scales */
    I16_UNROLL
    for (int t = 0; t < T; t++) {
        xp[t] = (const int16_t *)(xq + t * xs);
        dp[t] = (const float *)(xq + t * xs + 2 * l.cp);
        acc[t] = _mm256_setzero_ps();
    }
    /* window by window (8 groups), so that the inner loop calls nothing (a call would spill
     * every ymm register): its bias term first, then its chunks, as i16_tile_T orders them */
    for (int64_t pb = 0; pb < ng; pb += 8) {
        const int np = (int)(ng - pb < 8 ? ng - pb : 8);
        const __m256 sv = q8p(d, d->scales, gi + pb, np), bv = q8p(d, d->biases, gi + pb, np);
        _mm256_store_ps(sf, sv);
        I16_UNROLL
        for (int t = 0; t < T; t++) acc[t] = _mm256_fmadd_ps(bv, _mm256_load_ps(dp[t] + I16_LANES * l.nch + pb), acc[t]);
        /* the window's whole chunks, then (the row's last window) a 4-bit row's half chunk */
        const int64_t ch1 = pb + np >= ng ? nfull : ((pb + np) << l.lg) >> CWL;
        for (int64_t ch = (pb << l.lg) >> CWL; ch < ch1; ch++) {
            const int64_t k = ch << CWL, kb = ch << 5, g = k >> l.lg;
            if (!(kb & 63)) __builtin_prefetch(wr + rb + kb, 0, 3);   /* the next row of the block, same place */
            const __m256 s = BC ? _mm256_broadcast_ss(&sf[g - pb])
                                : _mm256_permutevar8x32_ps(sv, _mm256_add_epi32(_mm256_set1_epi32((int)(g - pb)), loff));
            const int16_t *xk[4];
            const float *dk[4];
            I16_UNROLL
            for (int t = 0; t < T; t++) {
                xk[t] = xp[t] + k;
                dk[t] = dp[t] + I16_LANES * ch;
            }
            i16_row_chunk(T, BITS, _mm256_loadu_si256((const __m256i *)(const void *)(wr + kb)), s, xk, dk, acc);
        }
        if (pb + np >= ng && nfull < l.nch) {
            const int64_t ch = nfull, k = ch << CWL, kb = ch << 5, g = k >> l.lg;
            const __m256i km = _mm256_cmpgt_epi32(_mm256_set1_epi32(4), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            const __m256 s = BC ? _mm256_broadcast_ss(&sf[g - pb])
                                : _mm256_permutevar8x32_ps(sv, _mm256_add_epi32(_mm256_set1_epi32((int)(g - pb)), loff));
            const int16_t *xk[4];
            const float *dk[4];
            I16_UNROLL
            for (int t = 0; t < T; t++) {
                xk[t] = xp[t] + k;
                dk[t] = dp[t] + I16_LANES * ch;
            }
            i16_row_chunk(T, BITS, _mm256_maskload_epi32((const int *)(const void *)(wr + kb), km), s, xk, dk, acc);
        }
    }
    for (int t = 0; t < T; t++) y[t * ys] = vhsum(acc[t]);
}

#define I16_ROWS(BITS, BC) for (int64_t r = r0; r < r1; r++) switch (T) { \
    case 1: i16_row_T(1, BITS, BC, W, r, xq, xs, y + r, ys); break; \
    case 2: i16_row_T(2, BITS, BC, W, r, xq, xs, y + r, ys); break; \
    case 3: i16_row_T(3, BITS, BC, W, r, xq, xs, y + r, ys); break; \
    default: i16_row_T(4, BITS, BC, W, r, xq, xs, y + r, ys); }
static TGT void i16_gemm(const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y,
                         int64_t ys) {
    const int bc = q_desc(W)->group >= i16_lay(W).cw;
    if (q_desc(W)->bits == 4) {
        if (bc) { I16_ROWS(4, 1); } else { I16_ROWS(4, 0); }
    } else {
        if (bc) { I16_ROWS(8, 1); } else { I16_ROWS(8, 0); }
    }
}
#undef I16_ROWS

const cpu_i16kernels cpu_i16kernels_avx2 = { .ok = i16_ok, .stride = i16_stride, .prep = i16_prep, .tile = i16_tile,
                                              .gemm = i16_gemm };

#else
typedef int cpu_i16kernels_avx2_unused; /* keeps the translation unit non-empty */
#endif
