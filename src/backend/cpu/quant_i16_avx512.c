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
 * one block and one group); each lane's sum becomes f32 (exact: below 2^24), is multiplied
 * by s_g · d_b (f32) and added into an f32 lane accumulator, one lane chain per 16-lane
 * vector over the row; the bias term uses the same x̃ (f32 group sums from prep), so the
 * error is w · (x - x̃), which the codes' offset (MLX biases sit near -8 s for 4-bit) does not
 * inflate. One reduction per row at the end. A token's output does not depend on the other
 * rows of its batch (no shared sums), so decode, batched decode and prefill give the same bits.
 *
 * Layout of one prepared token row (prep, stride() bytes, 64-byte aligned in the buffer):
 *   [0, 2 Cp)      x̂ as int16 in the order the codes come out: per chunk of CW columns
 *                  (4-bit: 128 = 64 code bytes = 32 words of 4 nibbles; 8-bit: 64 = 32 words
 *                  of 2 bytes) nv = CW / 32 vectors of 32 words, column o of the chunk at word
 *                  o / nv of vector o % nv (xpos); Cp = cols rounded up to CW, zero past cols
 *   then 16 f32 per chunk: d_b of the block each lane of the chunk's dot falls in
 *   then ng16 f32: the group sums of x̃ (ng rounded up to 16, zero past ng)
 * Groups are powers of two of at least 32 columns (i16_ok), so a chunk holds whole groups or
 * lies in one, and never straddles a window of 16 groups' scales. */
#if defined(__x86_64__)
#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#include "quant_avx512.h"
#include <math.h>

#define I16_UNROLL _Pragma("GCC unroll 4")   /* rows / tokens loops: accumulators stay in registers */

typedef struct {
    int64_t cw, cp, nch, ng, ng16, stride;
    int lg;   /* log2 of the group size */
} i16_layout;

/* Shifts and masks only: a decode tile computes this for every 4 rows. */
static inline i16_layout i16_lay(const ci_mat *W) {
    i16_layout l;
    const ci_qdesc *d = q_desc(W);
    l.cw = d->bits == 4 ? 128 : 64;
    l.lg = __builtin_ctz((unsigned)d->group);
    l.cp = (W->cols + l.cw - 1) & ~(l.cw - 1);
    l.nch = l.cp / l.cw;
    l.ng = W->cols >> l.lg;
    l.ng16 = (l.ng + 15) & ~(int64_t)15;
    l.stride = (2 * l.cp + 64 * l.nch + 4 * l.ng16 + 63) & ~(int64_t)63;
    return l;
}

/* Affine 4- or 8-bit with a power-of-two group of at least 32 columns (MLX's 32, 64, 128):
 * a chunk of CW columns then holds whole groups or lies in one. */
static int i16_ok(const ci_mat *W) {
    if (W->dtype != CI_U32 || !W->scale) return 0;
    const ci_qdesc *d = q_desc(W);
    if (d->mode != CI_Q_AFFINE || (d->bits != 4 && d->bits != 8)) return 0;
    int64_t G = d->group;
    return G >= 32 && (G & (G - 1)) == 0 && W->cols % G == 0;
}

static int64_t i16_stride(const ci_mat *W) { return i16_lay(W).stride; }

/* Where column j's word lies: a chunk holds cw / 32 vectors of 32 words; column o of the
 * chunk is word o / nv of vector o % nv (nv = cw / 32), as the codes' nibbles (4-bit: bits
 * 4n of each 16-bit word) or bytes (8-bit) come out of 64 bytes of a row. */
static inline int64_t xpos(int64_t j, int64_t cw) {
    int64_t k = j & ~(cw - 1), o = j - k, nv = cw / 32;
    return k + (o % nv) * 32 + o / nv;
}

/* One token row x (W->cols floats) into its prepared form at xq (stride() bytes). Groups
 * divide cols and are multiples of 32, so every block is whole. A block holding an infinity
 * or a NaN gets d = NaN, so the outputs it feeds are NaN as on the f32 path. */
static TGT void i16_prep(const ci_mat *W, const float *x, uint8_t *xq) {
    const i16_layout l = i16_lay(W);
    const int64_t cols = W->cols, G = q_desc(W)->group, bits = q_desc(W)->bits;
    int16_t *xb = (int16_t *)xq;
    float *dl = (float *)(xq + 2 * l.cp), *xg = dl + 16 * l.nch;
    memset(xq, 0, (size_t)l.stride);
    const __m512 zero = _mm512_setzero_ps();
    float gs = 0;   /* the current group's sum of x̃ */
    for (int64_t c0 = 0; c0 < cols; c0 += 32) {
        const __m512 v0 = _mm512_loadu_ps(x + c0), v1 = _mm512_loadu_ps(x + c0 + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float fin = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_mul_ps(v0, zero), _mm512_mul_ps(v1, zero)));
        const float d = fin != 0.0f ? NAN : amax / 32767.0f, id = amax > 0 && fin == 0.0f ? 32767.0f / amax : 0.0f;
        /* nearest even (the default rounding mode), as lrintf */
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
        int32_t q[32];
        _mm512_storeu_si512(q, q0);
        _mm512_storeu_si512(q + 16, q1);
        for (int j = 0; j < 32; j++) xb[xpos(c0 + j, l.cw)] = (int16_t)q[j];
        /* lane i of a chunk's dot covers 8 (4-bit) or 4 (8-bit) columns from i * that: this
         * block's lanes are 32 / that of them */
        const int64_t lpb = bits == 4 ? 4 : 8, ch = c0 / l.cw, i0 = (c0 % l.cw) / 32 * lpb;
        for (int64_t i = i0; i < i0 + lpb; i++) dl[16 * ch + i] = d;
        /* x̃'s group sums: per block d times its exact integer sum, blocks added in order */
        gs += d * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        if ((c0 + 32) % G == 0) {
            xg[c0 / G] = gs;
            gs = 0;
        }
    }
}

/* T <= 4 token rows (prepared, stride xs bytes) by the 4 rows of W. */
static inline __attribute__((always_inline)) TGT void i16_tile_T(const int T, const int BITS, const ci_mat *W,
                                                                const int64_t rows[4], const uint8_t *xq, int64_t xs,
                                                                float *out) {
    const ci_qdesc *d = q_desc(W);
    const i16_layout l = i16_lay(W);
    const int64_t G = d->group, ng = l.ng, rb = W->cols * BITS / 8, cols = W->cols;
    const int CWL = BITS == 4 ? 7 : 6;   /* log2 of the chunk's columns */
    /* Prefetch distance: rows up to 1 KiB ask for the same chunk of the next tile (4 rows
     * on: the tile's 4 rows are one contiguous block), longer ones 1 KiB ahead in the row.
     * 512 bytes in every row measured 14-16 GB/s a thread on a 151936 x 2048 4-bit head
     * (Zen 5), this 19-21. */
    const int64_t pd = rb < 1024 ? rb : 1024;
    const uint8_t *wr[4];
    int64_t gi[4];
    for (int r = 0; r < 4; r++) {
        wr[r] = (const uint8_t *)W->data + rows[r] * rb;
        gi[r] = (W->scale_row0 + rows[r]) * ng;
    }
    /* lane i's group, past the chunk's first: (i * columns a lane) / G when G divides CW */
    const int lc = BITS == 4 ? 8 : 4;
    __m512i loff = _mm512_setzero_si512();
    if (G <= l.cw)
        loff = _mm512_srlv_epi32(_mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                    _mm512_set1_epi32(lc)),
                                 _mm512_set1_epi32(l.lg));
    __m512 acc[4][4], sv[4] = { 0 };
    I16_UNROLL
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi16(0x000f), m8 = _mm512_set1_epi16(0x00ff);
    int64_t pb = -1;
    for (int64_t ch = 0; ch < l.nch; ch++) {
        const int64_t k = ch << CWL, g = k >> l.lg;
        if ((g & ~(int64_t)15) != pb) {   /* the next 16 groups: scales, and the bias term */
            pb = g & ~(int64_t)15;
            const int np = (int)(ng - pb < 16 ? ng - pb : 16);
            I16_UNROLL
            for (int r = 0; r < 4; r++) {
                sv[r] = q16(d, d->scales, gi[r] + pb, np);
                __m512 bv = q16(d, d->biases, gi[r] + pb, np);
                I16_UNROLL
                for (int t = 0; t < T; t++)
                    acc[t][r] = _mm512_fmadd_ps(bv, _mm512_load_ps((const float *)(xq + t * xs + 2 * l.cp) + 16 * l.nch + pb),
                                                acc[t][r]);
            }
        }
        const __m512i gsel = _mm512_add_epi32(_mm512_set1_epi32((int)(g - pb)), loff);
        const int64_t nb = (cols - k) * BITS / 8;   /* code bytes of this chunk, 64 but the last */
        const __mmask64 km = nb >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << nb) - 1);
        /* pd bytes ahead in each row; past a row's end, the same place in the row 4 below,
         * which the next tile reads first */
        const int64_t pf = k * BITS / 8 + pd + (k * BITS / 8 + pd < rb ? 0 : 3 * rb);
        I16_UNROLL
        for (int r = 0; r < 4; r++) __builtin_prefetch(wr[r] + pf, 0, 3);
        __m512 dl[4];
        I16_UNROLL
        for (int t = 0; t < T; t++) dl[t] = _mm512_load_ps((const float *)(xq + t * xs + 2 * l.cp) + 16 * ch);
        I16_UNROLL
        for (int r = 0; r < 4; r++) {
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
    float part[4];
    for (int t = 0; t < T; t++) {
        for (int r = 0; r < 4; r++) part[r] = _mm512_reduce_add_ps(acc[t][r]);
        memcpy(out + 4 * t, part, sizeof part);
    }
}

#define I16_T(BITS) switch (T) { case 1: i16_tile_T(1, BITS, W, rows, xq, xs, out); break; \
    case 2: i16_tile_T(2, BITS, W, rows, xq, xs, out); break; case 3: i16_tile_T(3, BITS, W, rows, xq, xs, out); break; \
    default: i16_tile_T(4, BITS, W, rows, xq, xs, out); }
static TGT void i16_tile(const ci_mat *W, const int64_t rows[4], int T, const uint8_t *xq, int64_t xs, float *out) {
    if (q_desc(W)->bits == 4) { I16_T(4); } else { I16_T(8); }
}
#undef I16_T

const cpu_i16kernels cpu_i16kernels_avx512vnni = { .ok = i16_ok, .stride = i16_stride, .prep = i16_prep, .tile = i16_tile };

#else
typedef int cpu_i16kernels_avx512_unused; /* keeps the translation unit non-empty */
#endif
