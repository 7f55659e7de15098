/* kernels_avx512.c — the AVX-512 (F/BW/VL) + FMA kernel set, 16 floats per vector.
 *
 * Defines the vector vocabulary that simd_template.h is written over and instantiates it.
 * Compiled with function-level target attributes only, so the project builds with default
 * flags; cpu.c selects this table only after __builtin_cpu_supports confirms the CPU.
 *
 * AVX512-BF16 (vdpbf16ps) is deliberately unused: it multiplies bf16 by bf16, which would
 * round the f32 activations to bf16. Weights are instead widened to f32 in registers
 * (a zero-extend and a shift) and every product and sum is an f32 FMA. Tiles keep
 * 4 token rows x 4 weight rows = 16 accumulators of the 32 zmm registers. */
#if defined(__x86_64__)
#include "cpu_kernels.h"
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define VL 16
#define TMAX 4
#define KTABLE cpu_kernels_avx512
#define KNAME "cpu-avx512"
typedef __m512 vf;

static inline TGT vf vzero(void) { return _mm512_setzero_ps(); }
static inline TGT vf vset1(float a) { return _mm512_set1_ps(a); }
static inline TGT vf vld(const float *p) { return _mm512_loadu_ps(p); }
static inline TGT void vst(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline TGT vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline TGT vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline TGT vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline TGT vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline TGT vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline TGT vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline TGT float vhsum(vf a) { return _mm512_reduce_add_ps(a); }
static inline TGT float vhmax(vf a) { return _mm512_reduce_max_ps(a); }

/* Four horizontal sums with one shuffle tree (about 10 ops instead of 4 x 8). */
static inline TGT void vhsum4(vf a, vf b, vf c, vf d, float *out) {
    vf ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    vf cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    vf s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

static inline TGT vf vld_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline TGT vf vld_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
/* E4M3 -> f16 bits -> f32. Shifting the 7 exponent+mantissa bits to bits 7..13 of a
 * 16-bit lane gives the f16 whose value is fp8 * 2^-8 (fp8 subnormals land on f16
 * subnormals, and the 4-bit exponent always fits); the sign-extended byte leaves the sign
 * in bits 14..15, and bit 14 is cleared. vcvtph2ps then widens exactly. Going through f16
 * rather than placing the bits straight into an f32 matters for speed: fp8 subnormals
 * would become f32 subnormals, and every multiply touching one takes a microcode assist
 * (measured: 10x slower on weights with a realistic share of tiny values). */
static inline TGT vf vld_fp8(const uint8_t *p) {
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
    return _mm512_cvtph_ps(h);
}

/* exp(x): x = k ln2 + r with |r| <= ln2/2, exp(r) by its degree-7 Taylor polynomial
 * (truncation < 1e-8 relative), 2^k built in the exponent field. Inputs below
 * ln(FLT_MIN) give 0; inputs are clamped at 88.376 so that k <= 127. */
static inline TGT vf vexp(vf x) {
    const vf lo = _mm512_set1_ps(-87.33654475f), hi = _mm512_set1_ps(88.3762626647949f);
    __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
    vf xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    vf kf = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(-2.12194440e-4f), r);
    vf p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(kf), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps(keep, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

/* Prefill block tile (simd_template.h, block_tile): 4 tokens x 6 rows, 24 accumulators, 6
 * weight vectors held, 10 loads per 24 FMAs (f32_tile: 4 x 4, 8 loads per 16). Measured on
 * a 2-vCPU AMD EPYC (Zen 5, family 26), one thread, bench/gemm_cpu.c, bf16 Qwen3-0.6B
 * shapes at n = 128, CPU time, 4 rounds alternating: 4 x 6 173-189 GFLOP/s, 4 x 4 165-182,
 * 6 x 4 165-181, 8 x 3 130-147; without block_tile (f32_tile) 130-151. */
#define BT_TOK 4
#define BT_ROWS 6

#include "simd_template.h"

#else
typedef int cpu_kernels_avx512_unused; /* keeps the translation unit non-empty */
#endif
