/* matmul_xw.c — y[n, W.cols] = x[n, W.rows] · W for the CPU backend (W not transposed).
 *
 * Used by MLA's absorbed queries (W_UKᵀ q per head: W is a [nope, kv_lora] view of kv_b),
 * so matrices are small and per head; each row of W is converted to f32 once (fp8 with its
 * block scale, honouring scale_row0 for views) and accumulated into every token's output
 * (an axpy the compiler vectorises). Single-threaded: per head the work is tiny and the
 * caller loops over heads. */
#include "cpu_kernels.h"
#include <string.h>

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

void cpu_matmul_xw_by(float *y, const float *x, int n, const ci_mat *W, cpu_xw_row row_of) {
    const int64_t R = W->rows, C = W->cols;
    float row[CPU_XW_CHUNK];   /* a chunk of columns at a time: no allocation, the same sums */
    memset(y, 0, (size_t)n * (size_t)C * sizeof(float));
    for (int64_t c0 = 0; c0 < C; c0 += CPU_XW_CHUNK) {
        const int64_t c1 = c0 + CPU_XW_CHUNK < C ? c0 + CPU_XW_CHUNK : C;
        for (int64_t r = 0; r < R; r++) {
            row_of(W, r, c0, c1, row);
            for (int t = 0; t < n; t++) {
                float a = x[(size_t)t * R + r];
                float *yt = y + (size_t)t * C;
                for (int64_t c = c0; c < c1; c++) yt[c] += a * row[c - c0];
            }
        }
    }
}

void cpu_matmul_xw(ci_backend *be, float *y, const float *x, int n, const ci_mat *W) {
    (void)be;
    cpu_matmul_xw_by(y, x, n, W, row_to_f32);
}
