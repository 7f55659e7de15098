/* kernels_avx2.c — the AVX2 + FMA + F16C kernel set, 8 floats per vector.
 *
 * Defines the vector vocabulary that simd_template.h is written over and instantiates it,
 * with function-level target attributes so the project builds with default flags. With
 * only 16 ymm registers a tile keeps 2 token rows x 4 weight rows of accumulators
 * (TMAX = 2); a 4-token tile runs as two of those, re-reading the (L1-resident) weights.
 * That tile serves decode and attention; prefill matmuls go through block_tile below (4
 * tokens x 3 rows, the same bits), and short decode rows prefetch the next tile. */
#if defined(__x86_64__)
#include "cpu_kernels.h"
#include <immintrin.h>
#include <string.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define VL 8
#define TMAX 2
#define KTABLE cpu_kernels_avx2
#define KNAME "cpu-avx2"
typedef __m256 vf;

static inline TGT vf vzero(void) { return _mm256_setzero_ps(); }
static inline TGT vf vset1(float a) { return _mm256_set1_ps(a); }
static inline TGT vf vld(const float *p) { return _mm256_loadu_ps(p); }
static inline TGT void vst(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline TGT vf vadd(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline TGT vf vsub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline TGT vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline TGT vf vdiv(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline TGT vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline TGT vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }

#include "avx2_reduce.h"   /* vhsum, vhmax */

/* Four horizontal sums with one shuffle tree. */
static inline TGT void vhsum4(vf a, vf b, vf c, vf d, float *out) {
    vf ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
    vf cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
    vf s = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

static inline TGT vf vld_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
static inline TGT vf vld_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
/* min / max return their second operand when either is NaN: NaN passes the clamp */
static inline TGT void vst_f16(uint16_t *p, vf v) {
    v = _mm256_max_ps(_mm256_set1_ps(-65504.0f), _mm256_min_ps(_mm256_set1_ps(65504.0f), v));
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* E4M3 -> f16 bits (value * 2^-8) -> f32; see kernels_avx512.c for why via f16. */
static inline TGT vf vld_fp8(const uint8_t *p) {
    __m128i h = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)p));
    h = _mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16((short)0xBFFF));
    return _mm256_cvtph_ps(h);
}

/* exp(x), same scheme as the AVX-512 version. */
static inline TGT vf vexp(vf x) {
    const vf lo = _mm256_set1_ps(-87.33654475f), hi = _mm256_set1_ps(88.3762626647949f);
    vf keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);
    vf xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    vf kf = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(-2.12194440e-4f), r);
    vf p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(kf), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(keep, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Prefill block tile (simd_template.h, block_tile): the template's f32_tile keeps 2 tokens
 * x 4 rows of accumulators (8 of the 16 ymm) and GCC folds the weight loads into the FMAs,
 * so each 8 FMAs cost 10 loads and a 4-token tile runs twice; a 4-token x 3-row register
 * tile has 12 accumulators and the 3 weight vectors held, 7 loads per 12 FMAs. Measured on
 * a 2-vCPU AVX2 EPYC (Zen 3), one thread, bench/gemm_cpu.c, bf16 Qwen3-0.6B shapes at
 * n = 128, CPU time: ~55 -> ~68 GFLOP/s (the FMA peak there is ~100); the other orders
 * tried (rows outer: ~44; 9-row sub-blocks; x copied to a padded stride) were no better. */
#define BT_TOK 4
#define BT_ROWS 3
#define BT_IN_PLACE 1   /* block_tile16: few-token prefills of 16-bit weights (cpu.c cpu_bt16_n) */

/* Decode prefetch (simd_template.h, tile_span): for rows of up to 2 KiB (1024 bf16 columns:
 * q/k/v/gate/up and the head of the Qwen3-0.6B shapes) one prefetch per 64 bytes of the
 * tile's progress, of the next tile's bytes in order (a single sequential stream one tile
 * ahead), into L2 (hint 2). Measured on the AVX2 EPYC, bench/gemv_cpu.c one thread, CPU
 * time, medians of 6 rounds: 2048x1024 11.1 -> 12.4 GB/s, 3072x1024 11.0 -> 12.8,
 * 151936x1024 10.9 -> 11.9; 3072-column rows keep the per-row prefetch (13.3-16.2 GB/s
 * with it, 12.5-14.5 with this). */
#define PF_NEXT_TILE_MAX 2048

#include "simd_template.h"

#else
typedef int cpu_kernels_avx2_unused; /* keeps the translation unit non-empty */
#endif
