/* quant_kernels_avx2.c — MLX-quantized kernels, AVX2 + FMA + F16C, 8 floats per vector.
 *
 * The vocabulary quant_simd.h is written over. Codes: 8 codes of b bits are b bytes, loaded
 * exactly into a u64 and broadcast, spread one per 32-bit lane with vpshufb (each 128-bit
 * half holds its own copy of the bytes), shifted by vpsrlvd and masked. E2M1: magnitude
 * from vpermps over the 8 magnitudes, sign bit moved into place. 2 token rows per tile
 * (16 ymm registers), as kernels_avx2.c; decode (1-2 rows) of the common packings takes
 * the fast path below. */
#if defined(__x86_64__)
#include "quant_kernels.h"
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define VL 8
#define TMAX 2
#define QTABLE cpu_qkernels_avx2
typedef __m256 vf;

static inline TGT vf vzero(void) { return _mm256_setzero_ps(); }
static inline TGT vf vset1(float a) { return _mm256_set1_ps(a); }
static inline TGT vf vld(const float *p) { return _mm256_loadu_ps(p); }
static inline TGT void vst(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline TGT vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline TGT vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }

static inline TGT void vhsum4(vf a, vf b, vf c, vf d, float *out) {
    vf ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
    vf cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
    vf s = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

/* 8 codes of BITS bits at p, one per 32-bit lane. */
static inline __attribute__((always_inline)) TGT __m256i vq_ints(const int BITS, const uint8_t *p) {
    if (BITS == 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    if (BITS == 4) {   /* 4 bytes: low nibbles are the even codes, high nibbles the odd ones */
        __m128i b = _mm_cvtsi32_si128((int)q_ld(p, 4)), m = _mm_set1_epi8(0x0f);
        __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        return _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    }
    __m256i v = _mm256_set1_epi64x((long long)q_ld(p, BITS));
    v = _mm256_shuffle_epi8(v, _mm256_load_si256((const __m256i *)cpu_q_ctrl[BITS]));
    v = _mm256_srlv_epi32(v, _mm256_load_si256((const __m256i *)cpu_q_shift[BITS]));
    return _mm256_and_si256(v, _mm256_set1_epi32((1 << BITS) - 1));
}
static inline __attribute__((always_inline)) TGT vf vq_codes(const int BITS, const uint8_t *p) {
    return _mm256_cvtepi32_ps(vq_ints(BITS, p));
}
static inline __attribute__((always_inline)) TGT vf vq_e2m1(const uint8_t *p) {
    __m256i i = vq_ints(4, p);
    vf mag = _mm256_permutevar8x32_ps(_mm256_loadu_ps(cpu_e2m1_value), i);   /* low 3 bits */
    __m256i sign = _mm256_and_si256(_mm256_slli_epi32(i, 28), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}
/* E4M3 -> f16 bits (value * 2^-8) -> f32, as kernels_avx2.c's vld_fp8. */
static inline __attribute__((always_inline)) TGT vf vq_fp8(const uint8_t *p) {
    __m128i h = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p));
    h = _mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16((short)0xBFFF));
    return _mm256_cvtph_ps(h);
}

/* ---- 4-bit codes in split order: affine 4-bit and mxfp4 ------------------------------------
 *
 * As the AVX-512 one (quant_kernels_avx512.c): per 16 columns of a row, the codes are 8
 * bytes, zero-extended to 8 dwords; the low nibbles are the even columns and the high
 * nibbles the odd ones, so x is split into even / odd columns once per tile (shared by its
 * 4 rows). Each half is dequantized with one FMA (mxfp4: a multiply) and dotted, even half
 * first: f32_tile's order on a chunk stored as [8 even, 8 odd] per 16 columns, which is
 * what prefill packs (qrow_split, qx_split). With 16 ymm registers a pass keeps two token
 * rows (8 accumulators); more rows run as more passes over the (L1-resident) codes. */

static inline TGT int qsplit(const ci_mat *W) {
    const ci_qdesc *d = q_desc(W);
    return d->mode == CI_Q_MXFP4 || (d->mode == CI_Q_AFFINE && d->bits == 4);
}

static inline __attribute__((always_inline)) TGT void qx16(const float *x, vf *xe, vf *xo) {
    vf a = _mm256_loadu_ps(x), b = _mm256_loadu_ps(x + 8);
    /* shuffle_ps gives x0 x2 x8 x10 | x4 x6 x12 x14; swapping the middle 64-bit pairs puts
     * them in order */
    *xe = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *xo = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

static inline __attribute__((always_inline)) TGT vf qe2m1_8(__m256i i, vf lut) {
    vf mag = _mm256_permutevar8x32_ps(lut, i);
    __m256i sign = _mm256_and_si256(_mm256_slli_epi32(i, 28), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

/* The 16 weights at column k (a multiple of 16 inside one group) of a row as its even and
 * odd halves. */
static inline __attribute__((always_inline)) TGT void qw16(const int MODE, const uint8_t *row, int64_t k, vf s, vf b,
                                                           vf lut, vf *e, vf *o) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + k / 2)));
    __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(15)), hi = _mm256_srli_epi32(v, 4);
    if (MODE == CI_Q_MXFP4) {
        *e = _mm256_mul_ps(qe2m1_8(lo, lut), s);
        *o = _mm256_mul_ps(qe2m1_8(hi, lut), s);
    } else {
        *e = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), s, b);
        *o = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), s, b);
    }
}

#define QS_UNROLL _Pragma("GCC unroll 4")

/* T <= 2 token rows (x at column 0) by 4 rows over all columns, in the summation order. */
static inline __attribute__((always_inline)) TGT void qsplit_T(const int T, const int MODE, const int PRE,
                                                               const ci_mat *W, const int64_t rows[4], const float *x,
                                                               int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, ng = W->cols / G, rb = W->cols / 2, cols = W->cols;
    const uint8_t *wr[4];
    int64_t gi[4];
    float part[2 * 4];
    const vf lut = _mm256_loadu_ps(cpu_e2m1_value);
    QS_UNROLL
    for (int r = 0; r < 4; r++) {
        wr[r] = (const uint8_t *)W->data + rows[r] * rb;
        gi[r] = (W->scale_row0 + rows[r]) * ng;
    }
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_KC) {
        const int64_t c1 = c0 + CPU_KC < cols ? c0 + CPU_KC : cols;
        vf acc[2][4];
        QS_UNROLL
        for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vzero();
        for (int64_t k0 = c0; k0 < c1;) {
            const int64_t g = k0 / G, k1 = (g + 1) * G < c1 ? (g + 1) * G : c1;
            float s[4], b[4];
            for (int r = 0; r < 4; r++) {
                s[r] = q_param(d, d->scales, gi[r] + g);
                b[r] = MODE == CI_Q_AFFINE ? q_param(d, d->biases, gi[r] + g) : 0.0f;
            }
            for (int64_t k = k0; k < k1; k += 16) {
                if (((k / 2) & 63) < 8) {   /* one prefetch per 64-byte line of each row's codes */
                    /* past the row's end: the same place in the row 4 below, which the next
                     * tile reads first (a 1024-column row is 512 bytes, so otherwise every
                     * prefetch but row 3's lands in a row this tile is already reading) */
                    int64_t off = k / 2 + 512;
                    if (off >= rb) off += 3 * rb;
                    QS_UNROLL
                    for (int r = 0; r < 4; r++) __builtin_prefetch(wr[r] + off, 0, 3);
                }
                vf xe[2], xo[2];
                QS_UNROLL
                for (int t = 0; t < T; t++) {
                    if (PRE) {   /* x already in split order */
                        xe[t] = _mm256_loadu_ps(x + t * xs + k);
                        xo[t] = _mm256_loadu_ps(x + t * xs + k + 8);
                    } else {
                        qx16(x + t * xs + k, &xe[t], &xo[t]);
                    }
                }
                QS_UNROLL
                for (int r = 0; r < 4; r++) {
                    vf e, o;
                    qw16(MODE, wr[r], k, vset1(s[r]), vset1(b[r]), lut, &e, &o);
                    QS_UNROLL
                    for (int t = 0; t < T; t++) acc[t][r] = vfma(o, xo[t], vfma(e, xe[t], acc[t][r]));
                }
            }
            k0 = k1;
        }
        QS_UNROLL
        for (int t = 0; t < T; t++) vhsum4(acc[t][0], acc[t][1], acc[t][2], acc[t][3], part + t * 4);
        for (int i = 0; i < T * 4; i++) out[i] = c0 == 0 ? part[i] : out[i] + part[i];
    }
}

/* Passes of two token rows; PRE: x already split (qsplit_pre_tile). */
static inline __attribute__((always_inline)) TGT void qsplit_passes(const int PRE, const ci_mat *W, const int64_t rows[4],
                                                                    int T, const float *x, int64_t xs, float *out) {
    const int mx = q_desc(W)->mode == CI_Q_MXFP4;
    for (int t0 = 0; t0 < T; t0 += 2) {
        const float *xt = x + t0 * xs;
        float *o = out + t0 * 4;
        if (T - t0 >= 2) {
            if (mx) qsplit_T(2, CI_Q_MXFP4, PRE, W, rows, xt, xs, o);
            else qsplit_T(2, CI_Q_AFFINE, PRE, W, rows, xt, xs, o);
        } else {
            if (mx) qsplit_T(1, CI_Q_MXFP4, PRE, W, rows, xt, xs, o);
            else qsplit_T(1, CI_Q_AFFINE, PRE, W, rows, xt, xs, o);
        }
    }
}

static TGT void qsplit_tile(const ci_mat *W, const int64_t rows[4], int T, const float *x, int64_t xs, float *out) {
    qsplit_passes(0, W, rows, T, x, xs, out);
}

static TGT int qsplit_pre_tile(const ci_mat *W, const int64_t rows[4], int T, const float *x, int64_t xs, float *out) {
    if (!qsplit(W)) return 0;
    qsplit_passes(1, W, rows, T, x, xs, out);
    return 1;
}
#define QSPLIT_PRE_TILE qsplit_pre_tile

/* Prefill: chunk [c0, c1) of row r dequantized in split order. */
static TGT void qrow_split(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst) {
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, gb = q_gidx(W, r, 0);
    const uint8_t *row = (const uint8_t *)W->data + r * (W->cols / 2);
    const vf lut = _mm256_loadu_ps(cpu_e2m1_value);
    for (int64_t k0 = c0; k0 < c1;) {   /* a group at a time: its scale and bias read once */
        const int64_t g = k0 / G, k1 = (g + 1) * G < c1 ? (g + 1) * G : c1;
        const vf s = vset1(q_param(d, d->scales, gb + g));
        vf e, o;
        if (d->mode == CI_Q_MXFP4) {
            for (int64_t k = k0; k < k1; k += 16) {
                qw16(CI_Q_MXFP4, row, k, s, vzero(), lut, &e, &o);
                _mm256_storeu_ps(dst + (k - c0), e);
                _mm256_storeu_ps(dst + (k - c0) + 8, o);
            }
        } else {
            const vf b = vset1(q_param(d, d->biases, gb + g));
            for (int64_t k = k0; k < k1; k += 16) {
                qw16(CI_Q_AFFINE, row, k, s, b, lut, &e, &o);
                _mm256_storeu_ps(dst + (k - c0), e);
                _mm256_storeu_ps(dst + (k - c0) + 8, o);
            }
        }
        k0 = k1;
    }
}

/* Prefill: T token rows of x (at column c0) split as qx16 splits them, into xp [T, CPU_KC]. */
static TGT void qx_split(int64_t c0, int64_t c1, int T, const float *x, int64_t xs, float *xp) {
    for (int t = 0; t < T; t++)
        for (int64_t k = c0; k < c1; k += 16) {
            vf xe, xo;
            qx16(x + t * xs + (k - c0), &xe, &xo);
            _mm256_storeu_ps(xp + t * CPU_KC + (k - c0), xe);
            _mm256_storeu_ps(xp + t * CPU_KC + (k - c0) + 8, xo);
        }
}

#include "quant_simd.h"

#else
typedef int cpu_qkernels_avx2_unused; /* keeps the translation unit non-empty */
#endif
