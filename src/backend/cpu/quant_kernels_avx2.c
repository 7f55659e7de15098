/* quant_kernels_avx2.c — MLX-quantized kernels, AVX2 + FMA + F16C, 8 floats per vector.
 *
 * The vocabulary quant_simd.h is written over. Codes: 8 codes of b bits are b bytes, loaded
 * exactly into a u64 and broadcast, spread one per 32-bit lane with vpshufb (each 128-bit
 * half holds its own copy of the bytes), shifted by vpsrlvd and masked. E2M1: magnitude
 * from vpermps over the 8 magnitudes, sign bit moved into place. 2 token rows per tile
 * (16 ymm registers), as kernels_avx2.c. */
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

#include "quant_simd.h"

#else
typedef int cpu_qkernels_avx2_unused; /* keeps the translation unit non-empty */
#endif
