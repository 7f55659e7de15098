/* avx2_reduce.h — horizontal sum and max of 8 floats (one fixed tree each), shared by the AVX2
 * kernel files (internal to src/backend/cpu; the includer defines TGT, its AVX2 target). */
#ifndef CI_AVX2_REDUCE_H
#define CI_AVX2_REDUCE_H
#include <immintrin.h>

static inline TGT float vhsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline TGT float vhmax(__m256 a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
