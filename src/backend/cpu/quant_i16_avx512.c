/* quant_i16_avx512.c — MLX affine 4- and 8-bit weights dotted with int16 activations
 * (AVX-512 VNNI: vpdpwssd, pairs of signed words multiplied and summed into each 32-bit
 * lane). Opt-in (ci_backend_cpu_int16_act, ci_model_opts.int16_act): a second precision
 * beside the f32 path, the way bf16 dot products are for bf16 weights. It exists for decode:
 * the f32 path's 4-bit tile is bound by its shuffles (one vpmovzxbd and two vpermps per 32
 * columns of a row), this one by memory (one vpermps per 128 columns; the codes come out of
 * their 16-bit words with shifts and masks). int8 activations (vpdpbusd) stream no faster on
 * a Zen 5 core and are ~250x coarser: their rounding flipped MoE routes in the fixtures.
 *
 * What it computes, for one token row x and weight row w (group g: scale s_g, bias b_g, so
 * w_j = s_g q_j + b_g):
 *   x is cut into blocks of 32 columns; block b has d_b = max|x| / 32767 and the words
 *   x̂_j = round-to-nearest-even(x_j / d_b) (all 0 when the block is 0);
 *   y = Σ_lanes (s_g · d_b) · Σ_{j in lane} q_j x̂_j  +  Σ_g b_g · Σ_{blocks b in g} d_b Σ_{j in b} x̂_j
 * i.e. w · x̃ with x̃_j = d_b x̂_j (within d_b / 2 of x_j), the weights themselves exact. The
 * code-times-word sums are exact integers (each lane covers 8 (4-bit) or 4 (8-bit) columns of
 * one block and one group); each lane's sum becomes f32 (exact for 4-bit codes, below 2^22;
 * an 8-bit lane can reach 2^25 and is then rounded once), is multiplied by s_g · d_b (f32) and
 * added into an f32 lane accumulator, one lane chain per vector over the row; the bias term
 * uses the same x̃ (f32 group sums from prep), so the error is w · (x - x̃), which the codes'
 * offset (MLX biases sit near -8 s for 4-bit) does not inflate. One reduction per row at the
 * end. A token's output does not depend on the other rows of its batch (no shared sums), so
 * decode, batched decode and prefill give the same bits. quant_i16.h has the layout of a
 * prepared row and the preparation; quant_i16_avx2.c is the same math on 8 lanes (vpmaddwd,
 * no VNNI needed). */
#if defined(__x86_64__)
#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#include "quant_avx512.h"
#include <math.h>

#define I16_UNROLL _Pragma("GCC unroll 8")   /* rows / tokens loops: accumulators stay in registers */

#define I16_LANES 16

static inline TGT float i16_block(const float *x, int32_t q[32]) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16), zero = _mm512_setzero_ps();
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    /* 0 when every value is finite, NaN otherwise (inf · 0 and NaN · 0 are NaN) */
    const float fin = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_mul_ps(v0, zero), _mm512_mul_ps(v1, zero)));
    const float id = amax > 0 && fin == 0.0f ? 32767.0f / amax : 0.0f;
    /* nearest even (the default rounding mode), as lrintf */
    _mm512_storeu_si512(q, _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id))));
    _mm512_storeu_si512(q + 16, _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id))));
    return fin != 0.0f ? NAN : amax / 32767.0f;
}
#include "quant_i16.h"

/* Rows of up to I16_NT bytes of codes (2048 4-bit columns) prefetch the next tile in byte order:
 * 4 lines a chunk, at 4x the chunk's offset past this tile, the 4 rows being one contiguous
 * stretch; the first form fetched the same 4 lines as 4 lines a row apart. test_quant --bench
 * ROWS COLS 1 avx512-int16 on the Zen 5 (2026-12-04, two rounds, GB/s): 131072 x 2048 18.5, 19.2
 * -> 21.8, 21.9; 65536 x 1024 20.2, 20.5 -> 23.5, 27.3; 16384 x 768 level (24.7-26.3); two threads
 * level within the noise. */
#ifndef I16_SPF
#define I16_SPF cpu_pf_next_tile   /* AMD only, as the next-tile rule (quant_kernels.h) */
#endif
#ifndef I16_NT
#define I16_NT (cpu_pf_next_tile ? 1024 : 0)   /* AMD only, as kernels_avx512.c's rule */
#endif

/* T <= 4 token rows (prepared, stride xs bytes) by NR rows of W: 4, or 8 for one token
 * (i16_rows1); out[t * NR + r]. Each row's lanes see the same operations in the same order
 * whatever NR and T are (the rows share only x, its d and the masks), so its bits are too. */
static inline __attribute__((always_inline)) TGT void i16_tile_T(const int T, const int NR, const int BITS,
                                                                const ci_mat *W, const int64_t *rows,
                                                                const uint8_t *xq, int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    const i16_layout l = i16_lay(W);
    const int64_t G = d->group, ng = l.ng, rb = W->cols * BITS / 8, cols = W->cols;
    const int CWL = BITS == 4 ? 7 : 6;   /* log2 of the chunk's columns */
    /* Prefetch distance: rows up to 1 KiB ask for the same chunk of the next tile (4 rows
     * on: the tile's 4 rows are one contiguous block), longer ones 1 KiB ahead in the row.
     * 512 bytes in every row measured 14-16 GB/s a thread on a 151936 x 2048 4-bit head
     * (Zen 5), this 19-21. */
    const int64_t pd = rb < 1024 ? rb : 1024;
    const uint8_t *wr[8];
    int64_t gi[8];
    for (int r = 0; r < NR; r++) {
        wr[r] = (const uint8_t *)W->data + rows[r] * rb;
        gi[r] = (W->scale_row0 + rows[r]) * ng;
    }
    if (I16_SPF) q_pf_next_params(d, gi[0], ng, NR);   /* the next tile's scales / biases (quant_kernels.h) */
    /* lane i's group, past the chunk's first: (i * columns a lane) / G when G divides CW */
    const int lc = BITS == 4 ? 8 : 4;
    __m512i loff = _mm512_setzero_si512();
    if (G <= l.cw)
        loff = _mm512_srlv_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                    _mm512_set1_epi32(lc)),
                                 _mm512_set1_epi32(l.lg));
    __m512 acc[4][8], sv[8] = { 0 };
    I16_UNROLL
    for (int t = 0; t < T; t++)
        I16_UNROLL
        for (int r = 0; r < NR; r++) acc[t][r] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi16(0x000f), m8 = _mm512_set1_epi16(0x00ff);
    int64_t pb = -1;
    for (int64_t ch = 0; ch < l.nch; ch++) {
        const int64_t k = ch << CWL, g = k >> l.lg;
        if ((g & ~(int64_t)15) != pb) {   /* the next 16 groups: scales, and the bias term */
            pb = g & ~(int64_t)15;
            const int np = (int)(ng - pb < 16 ? ng - pb : 16);
            I16_UNROLL
            for (int r = 0; r < NR; r++) {
                sv[r] = q16(d, d->scales, gi[r] + pb, np);
                __m512 bv = q16(d, d->biases, gi[r] + pb, np);
                I16_UNROLL
                for (int t = 0; t < T; t++)
                    acc[t][r] = _mm512_fmadd_ps(bv, _mm512_load_ps((const float *)(xq + t * xs + 2 * l.cp) + I16_LANES * l.nch + pb),
                                                acc[t][r]);
            }
        }
        const __m512i gsel = _mm512_add_epi32(_mm512_set1_epi32((int)(g - pb)), loff);
        const int64_t nb = (cols - k) * BITS / 8;   /* code bytes of this chunk, 64 but the last */
        const __mmask64 km = nb >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << nb) - 1);
        if (I16_NT && rb <= I16_NT) {   /* the next tile in byte order (above) */
            const uint8_t *nt = wr[0] + NR * rb + NR * (k * BITS / 8);
            I16_UNROLL
            for (int r = 0; r < NR; r++) __builtin_prefetch(nt + 64 * r, 0, 3);
        } else {   /* pd bytes ahead in each row; past a row's end, the same place in the row 4
                    * below, which the next tile reads first */
            const int64_t pf = k * BITS / 8 + pd + (k * BITS / 8 + pd < rb ? 0 : (NR - 1) * rb);
            I16_UNROLL
            for (int r = 0; r < NR; r++) __builtin_prefetch(wr[r] + pf, 0, 3);
        }
        __m512 dl[4];
        I16_UNROLL
        for (int t = 0; t < T; t++) dl[t] = _mm512_load_ps((const float *)(xq + t * xs + 2 * l.cp) + I16_LANES * ch);
        I16_UNROLL
        for (int r = 0; r < NR; r++) {
            const __m512i v = _mm512_maskz_loadu_epi8(km, wr[r] + k * BITS / 8);
            const __m512 s = _mm512_permutexvar_ps(gsel, sv[r]);
            __m512i c[4];
            if (BITS == 4) {
                c[0] = _mm512_and_si512(v, m4);
                c[1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                c[2] = _mm512_and_si512(_mm512_srli_epi16(v, 8), m4);
                c[3] = _mm512_srli_epi16(v, 12);
            } else {
                c[0] = _mm512_and_si512(v, m8);
                c[1] = _mm512_srli_epi16(v, 8);
            }
            I16_UNROLL
            for (int t = 0; t < T; t++) {
                const int16_t *xt = (const int16_t *)(xq + t * xs) + k;
                __m512i is = _mm512_dpwssd_epi32(_mm512_setzero_si512(), c[0], _mm512_load_si512(xt));
                is = _mm512_dpwssd_epi32(is, c[1], _mm512_load_si512(xt + 32));
                if (BITS == 4) {
                    is = _mm512_dpwssd_epi32(is, c[2], _mm512_load_si512(xt + 64));
                    is = _mm512_dpwssd_epi32(is, c[3], _mm512_load_si512(xt + 96));
                }
                acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(s, dl[t]), acc[t][r]);
            }
        }
    }
    float part[8];
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < NR; r++) part[r] = _mm512_reduce_add_ps(acc[t][r]);
        memcpy(out + NR * t, part, NR * sizeof(float));
    }
}

#define I16_T(BITS) switch (T) { case 1: i16_tile_T(1, 4, BITS, W, rows, xq, xs, out); break; \
    case 2: i16_tile_T(2, 4, BITS, W, rows, xq, xs, out); break; case 3: i16_tile_T(3, 4, BITS, W, rows, xq, xs, out); break; \
    default: i16_tile_T(4, 4, BITS, W, rows, xq, xs, out); }
static TGT void i16_tile(const ci_mat *W, const int64_t rows[4], int T, const uint8_t *xq, int64_t xs, float *out) {
    if (q_desc(W)->bits == 4) { I16_T(4); } else { I16_T(8); }
}
#undef I16_T

/* Prefill (gemm): rows [r0, r1) of W by T <= 4 prepared token rows, 4 rows at a time through
 * i16_tile, so every output is exactly what the decode tile gives it. mm_i16_item calls it
 * for every group of 4 tokens of a block of rows, so here the T rows of x stay in L1 and the
 * block's codes in L2; the decode order (each 4-row tile over all tokens) reads x from L2 for
 * every 4 rows instead. A one-row kernel with the codes unpacked once for the 4 tokens (what
 * the AVX2 set uses) measured slower here on a Sapphire Rapids core (x read once per row, not
 * once per 4 rows: 99-105 vs 110-127 GFLOP/s, 4-bit [4096 x 2048] n = 128). */
static TGT void i16_gemm(const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y,
                         int64_t ys) {
    float out[16];
    for (int64_t r = r0; r < r1; r += 4) {
        int64_t rows[4];   /* past r1: the last row again, its results dropped (as tile_rows) */
        for (int i = 0; i < 4; i++) rows[i] = r + i < r1 ? r + i : r1 - 1;
        const int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
        i16_tile(W, rows, T, xq, xs, out);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < nr; i++) y[t * ys + r + i] = out[4 * t + i];
    }
}

/* One token (prepared at xq) by rows [r0, r1) of W into y[r0, r1): 8 rows a tile, which share
 * the loads of x and its d and the per-chunk masks between twice the rows and keep one tile of 8
 * rows in flight ahead (the next-tile prefetch covers NR rows); the last 1-7 rows through
 * i16_gemm. The same bits as i16_tile row for row. test_quant --bench ROWS COLS 1 avx512-int16
 * on the Zen 5 (2026-12-06): see bench/RESULTS.md. */
static TGT void i16_rows1(const ci_mat *W, int64_t r0, int64_t r1, const uint8_t *xq, float *y) {
    const int b4 = q_desc(W)->bits == 4;
    int64_t r = r0, rows[8];
    for (; r + 8 <= r1; r += 8) {
        for (int i = 0; i < 8; i++) rows[i] = r + i;
        if (b4) i16_tile_T(1, 8, 4, W, rows, xq, 0, y + r);
        else i16_tile_T(1, 8, 8, W, rows, xq, 0, y + r);
    }
    if (r < r1) i16_gemm(W, r, r1, 1, xq, 0, y, 0);
}

const cpu_i16kernels cpu_i16kernels_avx512vnni = { .ok = i16_ok, .stride = i16_stride, .prep = i16_prep,
                                                    .tile = i16_tile, .gemm = i16_gemm, .rows1 = i16_rows1 };

#else
typedef int cpu_i16kernels_avx512_unused; /* keeps the translation unit non-empty */
#endif
