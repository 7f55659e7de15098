/* quant_kernels_avx512.c — MLX-quantized kernels, AVX-512 (F/BW/VL) + FMA, 16 floats per vector.
 *
 * The vocabulary quant_simd.h is written over. Codes: 16 codes of b bits are 2b bytes,
 * loaded exactly, broadcast to the four 128-bit lanes, spread one code per 32-bit lane
 * with vpshufb (bytes o, o+1 of the code), shifted by vpsrlvd and masked. E2M1 values come
 * from one vpermps over the 16-entry table. Function-level target attributes only; cpu.c
 * picks this table after checking the CPU, with the matching cpu_kernels_avx512. */
#if defined(__x86_64__)
#include "quant_kernels.h"
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define VL 16
#define TMAX 4
#define QTABLE cpu_qkernels_avx512
typedef __m512 vf;

static inline TGT vf vzero(void) { return _mm512_setzero_ps(); }
static inline TGT vf vset1(float a) { return _mm512_set1_ps(a); }
static inline TGT vf vld(const float *p) { return _mm512_loadu_ps(p); }
static inline TGT void vst(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline TGT vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline TGT vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }

static inline TGT void vhsum4(vf a, vf b, vf c, vf d, float *out) {
    vf ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    vf cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    vf s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* 16 codes of BITS bits at p, one per 32-bit lane. */
static inline __attribute__((always_inline)) TGT __m512i vq_ints(const int BITS, const uint8_t *p) {
    if (BITS == 8) return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    if (BITS == 4) {   /* 8 bytes: low nibbles are the even codes, high nibbles the odd ones */
        __m128i b = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(0x0f);
        __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    }
    const int NB = 2 * BITS;
    uint64_t lo = q_ld(p, NB < 8 ? NB : 8), hi = NB > 8 ? q_ld(p + 8, NB - 8) : 0;
    __m512i v = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)hi, (long long)lo));
    v = _mm512_shuffle_epi8(v, _mm512_load_si512((const void *)cpu_q_ctrl[BITS]));
    v = _mm512_srlv_epi32(v, _mm512_load_si512((const void *)cpu_q_shift[BITS]));
    return _mm512_and_si512(v, _mm512_set1_epi32((1 << BITS) - 1));
}
static inline __attribute__((always_inline)) TGT vf vq_codes(const int BITS, const uint8_t *p) {
    return _mm512_cvtepi32_ps(vq_ints(BITS, p));
}
static inline __attribute__((always_inline)) TGT vf vq_e2m1(const uint8_t *p) {
    return _mm512_permutexvar_ps(vq_ints(4, p), _mm512_loadu_ps(cpu_e2m1_value));
}
/* E4M3 -> f16 bits (value * 2^-8) -> f32, as kernels_avx512.c's vld_fp8. */
static inline __attribute__((always_inline)) TGT vf vq_fp8(const uint8_t *p) {
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
    return _mm512_cvtph_ps(h);
}

/* ---- decode fast path: T <= 2 token rows, affine 4/8-bit and mxfp4 ------------------------
 *
 * Per 32 columns of a row: 4-bit codes are 16 bytes, zero-extended to 16 dwords with one
 * vpmovzxbd; the low nibbles are the even columns and the high nibbles the odd ones, so
 * the token rows are split into even / odd columns instead (two vpermt2ps per 32 columns,
 * shared by the tile's 4 rows) and no per-row byte interleave is needed. (8-bit: two
 * vpmovzxbd, columns in order.) Within a group the integer codes are dotted with x
 * unscaled; at the group's end acc += s * Σ q·x + b * Σ x (Σ x once per group, shared by the
 * rows), which is MLX's own formulation and saves the per-weight dequantizing FMA. */
#define QFAST 1

static inline __attribute__((always_inline)) TGT void qx32(const int BITS, const float *x, vf *xe, vf *xo) {
    vf a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    if (BITS == 8) { *xe = a; *xo = b; return; }
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *xe = _mm512_permutex2var_ps(a, ie, b);
    *xo = _mm512_permutex2var_ps(a, io, b);
}

/* The 32 codes at p as two vectors matching qx32's split (affine: integers as f32;
 * mxfp4: E2M1 values). */
static inline __attribute__((always_inline)) TGT void qc32(const int MODE, const int BITS, const uint8_t *p, vf lut,
                                                           vf *e, vf *o) {
    if (BITS == 8) {
        *e = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
        *o = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))));
        return;
    }
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512i lo = _mm512_and_si512(v, _mm512_set1_epi32(15)), hi = _mm512_srli_epi32(v, 4);
    if (MODE == CI_Q_MXFP4) {
        *e = _mm512_permutexvar_ps(lo, lut);
        *o = _mm512_permutexvar_ps(hi, lut);
    } else {
        *e = _mm512_cvtepi32_ps(lo);
        *o = _mm512_cvtepi32_ps(hi);
    }
}

#define QF_UNROLL _Pragma("GCC unroll 4")   /* rows / tokens loops: accumulators stay in registers */
#define QF_GROUPS 128   /* groups whose scales / biases a tile converts to f32 at once */

/* n scales (or biases) of p from index i0, as f32. */
static inline TGT void q_params_f32(const ci_qdesc *d, const void *p, int64_t i0, int n, float *dst) {
    switch (d->scale_dtype) {
    case CI_F32: memcpy(dst, (const float *)p + i0, (size_t)n * sizeof(float)); break;
    case CI_BF16:
        for (int i = 0; i < n; i++) { uint16_t h; memcpy(&h, (const uint16_t *)p + i0 + i, 2); dst[i] = ci_bf16_to_f32(h); }
        break;
    default:
        for (int i = 0; i < n; i++) dst[i] = q_param(d, p, i0 + i);
    }
}

static inline __attribute__((always_inline)) TGT void qfast_T(const int T, const int MODE, const int BITS,
                                                              const ci_mat *W, const int64_t rows[4], const float *x,
                                                              int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, ng = W->cols / G, rb = W->cols * BITS / 8;
    const uint8_t *wr[4];
    int64_t gi[4];
    vf acc[2][4], lut = _mm512_loadu_ps(cpu_e2m1_value);
    float sf[4][QF_GROUPS], bf[4][QF_GROUPS];   /* this chunk's scales / biases, f32 */
    QF_UNROLL
    for (int r = 0; r < 4; r++) {
        wr[r] = (const uint8_t *)W->data + rows[r] * rb;
        gi[r] = (W->scale_row0 + rows[r]) * ng;
    }
    QF_UNROLL
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vzero();
    for (int64_t g = 0; g < ng; g++) {
        const int gc = (int)(g % QF_GROUPS);
        if (gc == 0) {
            int n = (int)(ng - g < QF_GROUPS ? ng - g : QF_GROUPS);
            QF_UNROLL
            for (int r = 0; r < 4; r++) {
                q_params_f32(d, d->scales, gi[r] + g, n, sf[r]);
                if (MODE == CI_Q_AFFINE) q_params_f32(d, d->biases, gi[r] + g, n, bf[r]);
            }
        }
        vf ga[2][4], xsum[2] = { vzero(), vzero() };
        QF_UNROLL
        for (int t = 0; t < T; t++) ga[t][0] = ga[t][1] = ga[t][2] = ga[t][3] = vzero();
        for (int64_t k = g * G; k < (g + 1) * G; k += 32) {
            const int64_t off = k * BITS / 8;   /* 16 or 32 bytes per row */
            if ((off & 63) < 4 * BITS)
                QF_UNROLL
                for (int r = 0; r < 4; r++) __builtin_prefetch(wr[r] + off + 512, 0, 3);
            vf xe[2], xo[2];
            QF_UNROLL
            for (int t = 0; t < T; t++) {
                qx32(BITS, x + t * xs + k, &xe[t], &xo[t]);
                if (MODE == CI_Q_AFFINE) xsum[t] = _mm512_add_ps(xsum[t], _mm512_add_ps(xe[t], xo[t]));
            }
            QF_UNROLL
            for (int r = 0; r < 4; r++) {
                vf e, o;
                qc32(MODE, BITS, wr[r] + off, lut, &e, &o);
                QF_UNROLL
                for (int t = 0; t < T; t++) ga[t][r] = vfma(o, xo[t], vfma(e, xe[t], ga[t][r]));
            }
        }
        QF_UNROLL
        for (int r = 0; r < 4; r++) {
            vf s = vset1(sf[r][gc]);
            QF_UNROLL
            for (int t = 0; t < T; t++) acc[t][r] = vfma(ga[t][r], s, acc[t][r]);
            if (MODE == CI_Q_AFFINE) {
                vf b = vset1(bf[r][gc]);
                QF_UNROLL
                for (int t = 0; t < T; t++) acc[t][r] = vfma(xsum[t], b, acc[t][r]);
            }
        }
    }
    QF_UNROLL
    for (int t = 0; t < T; t++) vhsum4(acc[t][0], acc[t][1], acc[t][2], acc[t][3], out + t * 4);
}

/* 1 when the fast path took this tile (T <= 2 token rows, affine 4/8-bit or mxfp4). */
static TGT int qfast_tile(const ci_mat *W, const int64_t rows[4], int T, const float *x, int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    if (T > 2) return 0;
#define QF(MODE, BITS) do { if (T == 1) qfast_T(1, MODE, BITS, W, rows, x, xs, out); \
                            else qfast_T(2, MODE, BITS, W, rows, x, xs, out); } while (0)
    if (d->mode == CI_Q_MXFP4) QF(CI_Q_MXFP4, 4);
    else if (d->mode == CI_Q_AFFINE && d->bits == 4) QF(CI_Q_AFFINE, 4);
    else if (d->mode == CI_Q_AFFINE && d->bits == 8) QF(CI_Q_AFFINE, 8);
    else return 0;
#undef QF
    return 1;
}

#include "quant_simd.h"

#else
typedef int cpu_qkernels_avx512_unused; /* keeps the translation unit non-empty */
#endif
