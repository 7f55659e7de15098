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

/* ---- decode fast path: one token row at a time, affine 4/8-bit and mxfp4 --------------------
 *
 * As the AVX-512 one (quant_kernels_avx512.c): per 16 columns of a row, 4-bit codes are 8
 * bytes, zero-extended to 8 dwords; the low nibbles are the even columns and the high
 * nibbles the odd ones, so x is split into even / odd columns once per tile (shared by its
 * 4 rows), and the group's scale and bias are applied once per group:
 * acc += s * Σ q·x + b * Σ x. With 16 ymm registers a tile keeps one token row; two rows
 * run as two passes over the (L1-resident) codes. */
#define QFAST 1
#define QF_UNROLL _Pragma("GCC unroll 4")
#define QF_GROUPS 128

static inline __attribute__((always_inline)) TGT void qx16(const int BITS, const float *x, vf *xe, vf *xo) {
    vf a = _mm256_loadu_ps(x), b = _mm256_loadu_ps(x + 8);
    if (BITS == 8) { *xe = a; *xo = b; return; }
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

/* The 16 codes at p as two vectors matching qx16's split. */
static inline __attribute__((always_inline)) TGT void qc16(const int MODE, const int BITS, const uint8_t *p, vf lut,
                                                           vf *e, vf *o) {
    if (BITS == 8) {
        *e = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
        *o = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8))));
        return;
    }
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(15)), hi = _mm256_srli_epi32(v, 4);
    if (MODE == CI_Q_MXFP4) {
        *e = qe2m1_8(lo, lut);
        *o = qe2m1_8(hi, lut);
    } else {
        *e = _mm256_cvtepi32_ps(lo);
        *o = _mm256_cvtepi32_ps(hi);
    }
}

static inline TGT void q_params_f32(const ci_qdesc *d, const void *p, int64_t i0, int n, float *dst) {
    if (d->scale_dtype == CI_F32) { memcpy(dst, (const float *)p + i0, (size_t)n * sizeof(float)); return; }
    for (int i = 0; i < n; i++) dst[i] = q_param(d, p, i0 + i);
}

static inline __attribute__((always_inline)) TGT void qfast_1(const int MODE, const int BITS, const ci_mat *W,
                                                              const int64_t rows[4], const float *x, float *out) {
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, ng = W->cols / G, rb = W->cols * BITS / 8;
    const uint8_t *wr[4];
    int64_t gi[4];
    vf acc[4], lut = _mm256_loadu_ps(cpu_e2m1_value);
    float sf[4][QF_GROUPS], bf[4][QF_GROUPS];
    QF_UNROLL
    for (int r = 0; r < 4; r++) {
        wr[r] = (const uint8_t *)W->data + rows[r] * rb;
        gi[r] = (W->scale_row0 + rows[r]) * ng;
        acc[r] = vzero();
    }
    for (int64_t g = 0; g < ng; g++) {
        const int gc = (int)(g % QF_GROUPS);
        if (gc == 0) {
            int n = (int)(ng - g < QF_GROUPS ? ng - g : QF_GROUPS);
            for (int r = 0; r < 4; r++) {
                q_params_f32(d, d->scales, gi[r] + g, n, sf[r]);
                if (MODE == CI_Q_AFFINE) q_params_f32(d, d->biases, gi[r] + g, n, bf[r]);
            }
        }
        vf ga[4] = { vzero(), vzero(), vzero(), vzero() }, xsum = vzero();
        for (int64_t k = g * G; k < (g + 1) * G; k += 16) {
            const int64_t off = k * BITS / 8;   /* 8 or 16 bytes per row */
            if ((off & 63) < 2 * BITS)
                QF_UNROLL
                for (int r = 0; r < 4; r++) __builtin_prefetch(wr[r] + off + 512, 0, 3);
            vf xe, xo;
            qx16(BITS, x + k, &xe, &xo);
            if (MODE == CI_Q_AFFINE) xsum = _mm256_add_ps(xsum, _mm256_add_ps(xe, xo));
            QF_UNROLL
            for (int r = 0; r < 4; r++) {
                vf e, o;
                qc16(MODE, BITS, wr[r] + off, lut, &e, &o);
                ga[r] = vfma(o, xo, vfma(e, xe, ga[r]));
            }
        }
        QF_UNROLL
        for (int r = 0; r < 4; r++) {
            acc[r] = vfma(ga[r], vset1(sf[r][gc]), acc[r]);
            if (MODE == CI_Q_AFFINE) acc[r] = vfma(xsum, vset1(bf[r][gc]), acc[r]);
        }
    }
    vhsum4(acc[0], acc[1], acc[2], acc[3], out);
}

/* 1 when the fast path took this tile (T <= 2 token rows, affine 4/8-bit or mxfp4). */
static TGT int qfast_tile(const ci_mat *W, const int64_t rows[4], int T, const float *x, int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    if (T > 2) return 0;
    for (int t = 0; t < T; t++) {
        if (d->mode == CI_Q_MXFP4) qfast_1(CI_Q_MXFP4, 4, W, rows, x + t * xs, out + t * 4);
        else if (d->mode == CI_Q_AFFINE && d->bits == 4) qfast_1(CI_Q_AFFINE, 4, W, rows, x + t * xs, out + t * 4);
        else if (d->mode == CI_Q_AFFINE && d->bits == 8) qfast_1(CI_Q_AFFINE, 8, W, rows, x + t * xs, out + t * 4);
        else return 0;
    }
    return 1;
}

#include "quant_simd.h"

#else
typedef int cpu_qkernels_avx2_unused; /* keeps the translation unit non-empty */
#endif
