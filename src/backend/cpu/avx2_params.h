/* avx2_params.h — a window of up to 8 consecutive MLX scales or biases as f32 lanes, shared by
 * the AVX2 kernel files that read them eight groups at a time (internal to src/backend/cpu; the
 * includer defines TGT, its AVX2 target, and includes quant_kernels.h). */
#ifndef CI_AVX2_PARAMS_H
#define CI_AVX2_PARAMS_H
#include <immintrin.h>
#include <string.h>

/* Parameters i0 .. i0+n-1 (n <= 8) of p as f32 lanes, as q_param converts each (affine
 * formats: f32, bf16, f16), lanes past n zero; never reads outside p[0 .. i0+n-1]. No call
 * (a call inside a kernel's loop makes every ymm register caller-saved): a whole window is one
 * unaligned load; a short one (a row's last window) loads the 8 parameters that end at
 * i0 + n and moves them down, unless fewer than 8 precede that end (then through a buffer). */
static inline TGT __m256 q8cvt(const ci_qdesc *d, const uint8_t *b) {
    if (d->scale_dtype == CI_F32) return _mm256_loadu_ps((const float *)(const void *)b);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)b);
    if (d->scale_dtype == CI_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));   /* bf16 */
}
static inline TGT __m256 q8p(const ci_qdesc *d, const void *p, int64_t i0, int n) {
    const int64_t es = d->scale_dtype == CI_F32 ? 4 : 2;
    if (n == 8) return q8cvt(d, (const uint8_t *)p + i0 * es);
    if (i0 + n >= 8) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 v = q8cvt(d, (const uint8_t *)p + (i0 + n - 8) * es);
        const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
        return _mm256_and_ps(_mm256_permutevar8x32_ps(v, _mm256_add_epi32(lane, _mm256_set1_epi32(8 - n))), keep);
    }
    _Alignas(32) uint8_t b[32] = { 0 };
    memcpy(b, (const uint8_t *)p + i0 * es, (size_t)(n * es));
    return q8cvt(d, b);
}

#endif
