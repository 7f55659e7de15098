/* matmul_xw.c — y[n, W.cols] = x[n, W.rows] · W for the CPU backend (W not transposed).
 *
 * Used by MLA's absorbed queries (W_UKᵀ q per head: W is a [nope, kv_lora] view of kv_b),
 * so matrices are small and per head; each row of W is converted to f32 once (fp8 with its
 * block scale, honouring scale_row0 for views) and accumulated into every token's output
 * (axpy: AVX-512 / AVX2 where the CPU has them, each product and sum rounded apart, so the bits
 * are the baseline loop's everywhere). Single-threaded: per head the work is tiny and the
 * caller loops over heads. */
#include "cpu_kernels.h"
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* columns c0 .. c1 - 1 of row r of W as f32 into dst[0 ..) */
static void row_to_f32(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst) {
    const int64_t C = W->cols, nc = c1 - c0;
    switch (W->dtype) {
    case CI_F32: memcpy(dst, (const float *)W->data + r * C + c0, (size_t)nc * sizeof(float)); break;
    case CI_BF16: {
        const uint16_t *p = (const uint16_t *)W->data + r * C;
        for (int64_t c = c0; c < c1; c++) dst[c - c0] = ci_bf16_to_f32(p[c]);
        break;
    }
    case CI_F16: {
        const uint16_t *p = (const uint16_t *)W->data + r * C;
        for (int64_t c = c0; c < c1; c++) dst[c - c0] = ci_f16_to_f32(p[c]);
        break;
    }
    case CI_F8_E4M3: {
        cpu_init_tables();
        const uint8_t *p = (const uint8_t *)W->data + r * C;
        int64_t bs = W->block > 0 ? W->block : C, rb = (W->scale_row0 + r) / bs;
        for (int64_t c = c0; c < c1;) {
            const int64_t b = c / bs, e = (b + 1) * bs < c1 ? (b + 1) * bs : c1;
            const float sc = cpu_block_scale(W, rb, b);
            for (; c < e; c++) dst[c - c0] = cpu_fp8_lut[p[c]] * sc;
        }
        break;
    }
    default: memset(dst, 0, (size_t)nc * sizeof(float)); break;
    }
}

/* y[c] += a * w[c], c < n (the wide forms return how many they did): each product rounded, then each sum (no fused multiply-add, as the baseline
 * compile gives: the same bits on every CPU), 16 lanes at a time on AVX-512, 8 on AVX2 (this loop
 * compiled for the baseline is SSE2, 4 lanes: a DeepSeek-V2-Lite-dims prefill of 512 tokens on one
 * Sapphire Rapids core took 1.2x (f32) / 1.45x (--bf16-act) the time it takes with the AVX-512 form). */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static int64_t axpy512(float *y, float a, const float *w, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        _mm512_storeu_ps(y + c, _mm512_add_ps(_mm512_loadu_ps(y + c), _mm512_mul_ps(va, _mm512_loadu_ps(w + c))));
    return c;
}
__attribute__((target("avx2"))) static int64_t axpy256(float *y, float a, const float *w, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        _mm256_storeu_ps(y + c, _mm256_add_ps(_mm256_loadu_ps(y + c), _mm256_mul_ps(va, _mm256_loadu_ps(w + c))));
    return c;
}
#endif
static void axpy(int xw_isa /* 2: AVX-512, 1: AVX2, 0: the baseline loop */, float *y, float a, const float *w,
                 int64_t n) {
    int64_t c = 0;   /* the wide forms' whole vectors, then the rest here (compiled for the baseline: no FMA) */
#if defined(__x86_64__)
    if (xw_isa == 2) c = axpy512(y, a, w, n);
    else if (xw_isa == 1) c = axpy256(y, a, w, n);
#endif
    for (; c < n; c++) y[c] += a * w[c];
}

/* XW_RB rows of a chunk converted at once (XW_RB x CPU_XW_CHUNK floats on the stack, 16 KiB), then each
 * token's output chunk takes their XW_RB products while it sits in L1: every output is still
 * 0 + x_0 w_0 + x_1 w_1 + ... in row order, as when the rows came one at a time (the same bits), but a
 * prefill's outputs (n x 1024 floats a chunk: 2 MiB at 512 tokens) are read and written once per XW_RB
 * rows instead of once per row. A DeepSeek-V2-Lite-dims prefill of 512 tokens on one Sapphire Rapids
 * core spent 13% of its time here before (bench/RESULTS.md, 2026-12-05). */
enum { XW_RB = 4 };
void cpu_matmul_xw_by(float *y, const float *x, int n, const ci_mat *W, cpu_xw_row row_of) {
    const int64_t R = W->rows, C = W->cols;
    float rows[XW_RB][CPU_XW_CHUNK];   /* a chunk of columns at a time: no allocation, the same sums */
    memset(y, 0, (size_t)n * (size_t)C * sizeof(float));
#if defined(__x86_64__)
    __builtin_cpu_init();
    const int xw_isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    const int xw_isa = 0;
#endif
    for (int64_t c0 = 0; c0 < C; c0 += CPU_XW_CHUNK) {
        const int64_t c1 = c0 + CPU_XW_CHUNK < C ? c0 + CPU_XW_CHUNK : C;
        for (int64_t r0 = 0; r0 < R; r0 += XW_RB) {
            const int rb = R - r0 < XW_RB ? (int)(R - r0) : XW_RB;
            for (int i = 0; i < rb; i++) row_of(W, r0 + i, c0, c1, rows[i]);
            for (int t = 0; t < n; t++)
                for (int i = 0; i < rb; i++) axpy(xw_isa, y + (size_t)t * C + c0, x[(size_t)t * R + r0 + i], rows[i], c1 - c0);
        }
    }
}

void cpu_matmul_xw(ci_backend *be, float *y, const float *x, int n, const ci_mat *W) {
    (void)be;
    cpu_matmul_xw_by(y, x, n, W, row_to_f32);
}
