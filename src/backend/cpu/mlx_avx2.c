/* mlx_avx2.c — amx_mlx.c's math for MLX affine 4- and 8-bit weights on AVX2 (--mlx-amx / --mlx-amx8
 * on a CPU without AVX-512 VNNI: ci_backend_cpu_amx_mlx_act), as cpu_i16kernels tables that cpu.c
 * runs like the int16-activation kernels. What it computes is amx_mlx.c's formula, word for word:
 * x rounded per block of B = 64 columns (32 where the group is not a multiple of 64) to x̂ =
 * nearest-even(x / d_b), d_b = max|x| / 127 for 4-bit W under act8 (x̂ one signed byte), / 32639
 * otherwise (int16); S_b = sum of q_j x̂_j over the block, an exact integer; per output one f32 chain,
 * blocks in order: acc = fma(f32(S_b), s_g * d_b, acc), and at a group's last block acc = fma(b_g,
 * X_g, acc) with X_g the group's sum of d_b * (sum of x̂ of block b) in f32. The same operations in
 * the same order as amx_mlx.c's vector kernel and tiles, so the same bits as those on an AVX-512
 * VNNI CPU, and one row's bits do not depend on the token count (one kernel for every n).
 *
 * Integer sums: act8 4-bit W by vpmaddubsw (unsigned codes times signed x̂ bytes, pairs summed into
 * 16 bits: at most 2 * 15 * 127, exact) and vpmaddwd against ones; int16 x̂ by vpmaddwd on the codes
 * widened to words (4-bit: nibble n of word w is column 4w + n; 8-bit: byte n of word w is column
 * 2w + n). Eight weight rows at a time: each row's 64-column chunk gives 8 int32 lanes, and three
 * levels of unpacks and adds turn the 8 rows' lanes into one vector of their block sums (rows in
 * lanes), on which the chain runs for the 8 rows at once. Tokens run one after another over an
 * octet of rows (its codes then come from L1). */
#if defined(__x86_64__)
#define TGT __attribute__((target("avx2,fma,f16c")))
#include "cpu_kernels.h"
#include "quant_kernels.h"
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "avx2_params.h"   /* q8p */
#include "avx2_reduce.h"   /* vhsum, vhmax */

#define AI static inline __attribute__((always_inline)) TGT
#define UNROLL8 _Pragma("GCC unroll 8")
/* Bytes ahead of an octet's codes that its chunks prefetch (into L2): two octets of 1024-column rows,
 * one of 2048. Against 4096 on the 2-vCPU AMD EPYC Zen 3 (bench/ab_cpu.sh, medians of 4-6 alternating
 * runs, 2026-12-07): `--mlx-amx8` decode of the Qwen3-30B-A3B-dims 4-bit MoE (its 2048-column head is
 * 58% of the bytes) +28% on one thread and +23% on two, of the Qwen3-0.6B-dims one +5% on each, `--mlx-amx`
 * +7% on one; prefill level; 16384 level with 8192 or below it. */
#define MX_PFD 8192
#define MX_WIN 32     /* blocks whose sums a pass keeps (1 KiB a token) before their chain */

/* A prepared token row (stride bytes, 64-byte aligned): x̂ of 64-column chunks (nch, cols rounded
 * up to 64, zero past cols), xb bytes a value: act8 4-bit W, 64 bytes a chunk, its 32 even columns'
 * x̂ then its 32 odd ones' (byte m pairs with code byte m's low, then high nibble); int16 with 4-bit
 * W, vector n (16 words) holds columns 4w + n; int16 with 8-bit W, per 32-column half the even
 * columns' 16 words then the odd ones'. Then d_b (nb f32) and X_g (ng f32). */
typedef struct {
    int64_t B, nb, ng, nch, d_at, x_at, stride;
    int xb;
} mlay;

static inline mlay mlay_of(const ci_mat *W, int act8) {
    const ci_qdesc *d = q_desc(W);
    mlay L;
    L.B = d->group % 64 ? 32 : 64;
    L.nb = W->cols / L.B;
    L.ng = W->cols / d->group;
    L.nch = (W->cols + 63) / 64;
    L.xb = act8 && d->bits == 4 ? 1 : 2;
    L.d_at = L.nch * 64 * L.xb;
    L.x_at = L.d_at + 4 * L.nb;
    L.stride = (L.x_at + 4 * L.ng + 63) & ~(int64_t)63;
    return L;
}

/* Where column c's x̂ goes, in values from the row's start. */
static inline int64_t mpos(const mlay *L, int bits, int64_t c) {
    const int64_t k = c & ~(int64_t)63, o = c & 63;
    if (L->xb == 1) return k + (o & 1) * 32 + (o >> 1);
    if (bits == 4) return k + (o & 3) * 16 + (o >> 2);
    return k + (o >> 5) * 32 + (o & 1) * 16 + ((o & 31) >> 1);
}

static int64_t mx_stride8(const ci_mat *W) { return mlay_of(W, 1).stride; }
static int64_t mx_stride16(const ci_mat *W) { return mlay_of(W, 0).stride; }

/* amx_mlx.c's quant_block on 8 lanes: the same d, the same x̂ (x times qmax / max|x|, nearest even),
 * the same NaN rule (a block holding an infinity or a NaN: d NaN, x̂ 0). */
AI void mx_prep_T(const int A8, const ci_mat *W, const float *x, uint8_t *xq) {
    const mlay L = mlay_of(W, A8);
    const int bits = q_desc(W)->bits;
    const int64_t G = q_desc(W)->group;
    const float qmax = L.xb == 1 ? 127.0f : 32639.0f;
    float *D = (float *)(xq + L.d_at), *X = (float *)(xq + L.x_at);
    int8_t *x8 = (int8_t *)xq;
    int16_t *x16 = (int16_t *)xq;
    memset(xq, 0, (size_t)L.d_at);   /* zero past cols */
    const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    float gs = 0;
    for (int64_t b = 0; b < L.nb; b++) {
        const float *xb = x + b * L.B;
        __m256 mx = zero, z = zero;
        for (int64_t j = 0; j < L.B; j += 8) {
            const __m256 v = _mm256_loadu_ps(xb + j);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v));
            z = _mm256_add_ps(z, _mm256_mul_ps(v, zero));   /* NaN when any value is not finite */
        }
        const float amax = vhmax(mx), bad = vhsum(z);
        const float id = amax > 0 && bad == 0.0f ? qmax / amax : 0.0f;
        const float d = bad == 0.0f ? amax / qmax : NAN;
        __m256i sum = _mm256_setzero_si256();
        for (int64_t j = 0; j < L.B; j += 8) {
            __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + j), _mm256_set1_ps(id)));
            if (bad != 0.0f) v = _mm256_setzero_si256();
            sum = _mm256_add_epi32(sum, v);
            _Alignas(32) int32_t q[8];
            _mm256_store_si256((__m256i *)q, v);
            for (int i = 0; i < 8; i++) {
                const int64_t p = mpos(&L, bits, b * L.B + j + i);
                if (L.xb == 1) x8[p] = (int8_t)q[i];
                else x16[p] = (int16_t)q[i];
            }
        }
        const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        const int32_t s = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xb1)));
        D[b] = d;
        gs += d * (float)s;
        if (((b + 1) * L.B) % G == 0) {
            X[(b + 1) * L.B / G - 1] = gs;
            gs = 0;
        }
    }
}
static TGT void mx_prep8(const ci_mat *W, const float *x, uint8_t *xq) { mx_prep_T(1, W, x, xq); }
static TGT void mx_prep16(const ci_mat *W, const float *x, uint8_t *xq) { mx_prep_T(0, W, x, xq); }

#include "mlx_avx2_oct.h"   /* oct, octs_pt: the octet kernels */

/* T token rows (prepared, stride xs bytes) by rows [r0, r1) of W, y[t * ys + r]: octet after octet of
 * rows, up to MX_TMAX tokens a pass over the octet. */
AI void mx_gemm_T(const int A8, const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y,
                  int64_t ys, const uint32_t *pt) {
    const int64_t B = q_desc(W)->group % 64 ? 32 : 64;
    if (pt && !((W->scale_row0 + r0) & 7) && W->cols / B <= MX_NBMAX && r1 - r0 >= 8) {   /* whole octets: pipelined */
        const int64_t re = r0 + (r1 - r0) / 8 * 8;
        for (int t0 = 0; t0 < T; t0 += MX_TMAX)
            octs_pt(A8, T - t0 < MX_TMAX ? T - t0 : MX_TMAX, W, r0, re, pt, xq + t0 * xs, xs, y + t0 * ys, ys);
        r0 = re;
    }
    for (int64_t r = r0; r < r1; r += 8) {
        int64_t rows[8];
        const int nr = (int)(r1 - r < 8 ? r1 - r : 8);
        for (int i = 0; i < 8; i++) rows[i] = r + (i < nr ? i : nr - 1);
        for (int t0 = 0; t0 < T; t0 += MX_TMAX) {
            const int tt = T - t0 < MX_TMAX ? T - t0 : MX_TMAX;
            _Alignas(32) float o[8 * MX_TMAX];
            oct(A8, tt, W, rows, xq + t0 * xs, xs, o);
            for (int t = 0; t < tt; t++) memcpy(y + (t0 + t) * ys + r, o + 8 * t, (size_t)nr * sizeof(float));
        }
    }
}
static TGT void mx_gemm8(const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y,
                         int64_t ys) {
    mx_gemm_T(1, W, r0, r1, T, xq, xs, y, ys, NULL);
}
static TGT void mx_gemm16(const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y,
                          int64_t ys) {
    mx_gemm_T(0, W, r0, r1, T, xq, xs, y, ys, NULL);
}
static TGT void mx_gemm8_pt(const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y,
                            int64_t ys, const uint32_t *pt) {
    mx_gemm_T(1, W, r0, r1, T, xq, xs, y, ys, pt);
}
static TGT void mx_gemm16_pt(const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y,
                             int64_t ys, const uint32_t *pt) {
    mx_gemm_T(0, W, r0, r1, T, xq, xs, y, ys, pt);
}

/* cpu_amx_mlx_ptiles_fill's copy without AVX-512: grid rows [r0, r1) (multiples of 16) of W's bf16
 * scale | bias << 16, 16 rows a group (rows past W's grid: 0). */
static void mx_pt_fill(const ci_mat *W, uint32_t *t, int64_t r0, int64_t r1) {
    const ci_qdesc *d = q_desc(W);
    const int64_t ng = W->cols / d->group;
    const int64_t reach = d->grid_rows > W->scale_row0 + W->rows ? d->grid_rows : W->scale_row0 + W->rows;
    const uint16_t *sc = d->scales, *bi = d->biases;
    for (int64_t r = r0; r < r1; r += 16)
        for (int64_t g = 0; g < ng; g++)
            for (int64_t i = 0; i < 16; i++) {
                const int64_t row = r + i, at = row * ng + g;
                t[r * ng + 16 * g + i] = row < reach ? (uint32_t)sc[at] | (uint32_t)bi[at] << 16 : 0;
            }
}

/* The 4-row tile of the interface (cpu.c runs these tables by gemm alone: gemm_all). */
AI void mx_tile_T(const int A8, const ci_mat *W, const int64_t rows[4], int T, const uint8_t *xq, int64_t xs, float *out) {
    const int64_t r8[8] = { rows[0], rows[1], rows[2], rows[3], rows[3], rows[3], rows[3], rows[3] };
    for (int t0 = 0; t0 < T; t0 += MX_TMAX) {
        const int tt = T - t0 < MX_TMAX ? T - t0 : MX_TMAX;
        _Alignas(32) float o[8 * MX_TMAX];
        oct(A8, tt, W, r8, xq + t0 * xs, xs, o);
        for (int t = 0; t < tt; t++) memcpy(out + 4 * (t0 + t), o + 8 * t, 4 * sizeof(float));
    }
}
static TGT void mx_tile8(const ci_mat *W, const int64_t rows[4], int T, const uint8_t *xq, int64_t xs, float *out) {
    mx_tile_T(1, W, rows, T, xq, xs, out);
}
static TGT void mx_tile16(const ci_mat *W, const int64_t rows[4], int T, const uint8_t *xq, int64_t xs, float *out) {
    mx_tile_T(0, W, rows, T, xq, xs, out);
}

const cpu_i16kernels cpu_mlx8kernels_avx2 = { .ok = cpu_amx_q_ok, .stride = mx_stride8, .prep = mx_prep8,
                                              .tile = mx_tile8, .gemm = mx_gemm8, .gemm_all = 1,
                                              .gemm_pt = mx_gemm8_pt, .pt_fill = mx_pt_fill };
const cpu_i16kernels cpu_mlxkernels_avx2 = { .ok = cpu_amx_q_ok, .stride = mx_stride16, .prep = mx_prep16,
                                             .tile = mx_tile16, .gemm = mx_gemm16, .gemm_all = 1,
                                             .gemm_pt = mx_gemm16_pt, .pt_fill = mx_pt_fill };

#else
typedef int cpu_mlx_avx2_unused; /* keeps the translation unit non-empty */
#endif
