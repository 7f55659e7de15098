/* quant_avx512.h — AVX-512 pieces the MLX-quantized kernel files share (internal to
 * src/backend/cpu; included by quant_kernels_avx512.c, quant_i16_avx512.c and amx_mlx.c after each defines
 * TGT, its function target attribute). */
#ifndef CI_QUANT_AVX512_H
#define CI_QUANT_AVX512_H
#include "quant_kernels.h"
#include <immintrin.h>

/* Parameters (scales or biases) i0 .. i0+n-1 (n <= 16) of p as f32 lanes, exactly as
 * q_param converts each; masked loads never read past the n asked for. */
static inline TGT __m512 q16(const ci_qdesc *d, const void *p, int64_t i0, int n) {
    const __mmask16 k = (__mmask16)((1u << n) - 1);
    switch (d->scale_dtype) {
    case CI_F32: return _mm512_maskz_loadu_ps(k, (const float *)p + i0);
    case CI_BF16: {
        __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i0));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
    case CI_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i0));
    default: {   /* E8M0: 2^(e-127); e = 0 is 2^-127 (subnormal), e = 255 infinity, as q_e8m0 */
        __m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, (const uint8_t *)p + i0));
        __m512i v = _mm512_slli_epi32(e, 23);
        v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
        v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7f800000));
        return _mm512_castsi512_ps(v);
    }
    }
}

#endif
