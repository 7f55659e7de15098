/* quant_kernels_scalar.c — the portable kernels for MLX-quantized weights, plus what every
 * quantized kernel set shares (tables, one-element access, matmul_xw).
 *
 * The readable statement of what the SIMD sets compute: a tile dequantizes CPU_KC columns
 * of its 4 rows into a stack buffer (w = scale*q + bias, or scale*fp(q)) and dots them with
 * every token row through kernels_scalar.c's f32_tile (the prefill path's micro-kernel). Nothing
 * dequantizes more than a chunk at a time, so a model stays at its packed size in memory. */
#include "quant_kernels.h"
#include <pthread.h>
#include <stdlib.h>


const float cpu_e2m1_value[16] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f };
_Alignas(64) uint8_t cpu_q_ctrl[9][64];
_Alignas(64) uint32_t cpu_q_shift[9][16];

static void build_tables(void) {
    for (int b = 1; b <= 8; b++)
        for (int j = 0; j < 16; j++) {
            int bit = j * b, o = bit >> 3;
            cpu_q_ctrl[b][4 * j] = (uint8_t)o;
            cpu_q_ctrl[b][4 * j + 1] = o + 1 < 16 ? (uint8_t)(o + 1) : 0x80;
            cpu_q_ctrl[b][4 * j + 2] = cpu_q_ctrl[b][4 * j + 3] = 0x80;
            cpu_q_shift[b][j] = (uint32_t)(bit & 7);
        }
}

static pthread_once_t q_once = PTHREAD_ONCE_INIT;
void cpu_q_init_tables(void) { pthread_once(&q_once, build_tables); }

float cpu_qmat_get(const ci_mat *W, int64_t r, int64_t c) {
    cpu_init_tables();
    const uint8_t *row = (const uint8_t *)W->data + r * q_row_bytes(W);
    return q_value(W, row, r, c);
}

/* dst[0..c1-c0) = row r, columns [c0, c1), dequantized; a group's scale and bias are
 * read once. */
static void row_f32(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst) {
    const ci_qdesc *d = q_desc(W);
    const uint8_t *row = (const uint8_t *)W->data + r * q_row_bytes(W);
    const int G = d->group, bits = d->bits;
    const int64_t gbase = q_gidx(W, r, 0);
    for (int64_t c = c0; c < c1;) {
        int64_t g = c / G, end = (g + 1) * G < c1 ? (g + 1) * G : c1;
        float s = q_param(d, d->scales, gbase + g);
        switch (d->mode) {
        case CI_Q_AFFINE: {
            float b = q_param(d, d->biases, gbase + g);
            for (; c < end; c++) dst[c - c0] = s * (float)q_code(row, c, bits) + b;
            break;
        }
        case CI_Q_MXFP4:
            for (; c < end; c++) dst[c - c0] = s * cpu_e2m1_value[q_code(row, c, 4)];
            break;
        case CI_Q_MXFP8:
            for (; c < end; c++) dst[c - c0] = s * cpu_fp8_lut[row[c]];
            break;
        default:
            for (; c < end; c++) dst[c - c0] = NAN;
        }
    }
}

/* Chunk by chunk (the summation order of cpu_kernels.h): CPU_KC columns of the 4 rows
 * dequantized into the stack, one scalar f32_tile, sums added. */
static int mat_tile(const ci_mat *W, const int64_t rows[CPU_TILE_R], int T, const float *x, int64_t xs,
                    float *out) {
    float buf[CPU_TILE_R][CPU_KC], part[CPU_TILE_T * CPU_TILE_R];
    const float *w[CPU_TILE_R] = { buf[0], buf[1], buf[2], buf[3] };
    for (int64_t c0 = 0; c0 < W->cols; c0 += CPU_KC) {
        int64_t c1 = c0 + CPU_KC < W->cols ? c0 + CPU_KC : W->cols;
        for (int r = 0; r < CPU_TILE_R; r++) row_f32(W, rows[r], c0, c1, buf[r]);
        cpu_kernels_scalar.f32_tile(w, c1 - c0, T, x + c0, xs, part);
        for (int i = 0; i < T * CPU_TILE_R; i++) out[i] = c0 == 0 ? part[i] : out[i] + part[i];
    }
    return 1;
}

const cpu_qkernels cpu_qkernels_scalar = { .mat_tile = mat_tile, .row_f32 = row_f32 };

/* y[n, W.cols] = x[n, W.rows] · W. A stored-transposed W (MLX MultiLinear) is a plain
 * matmul with the stored [cols, rows] matrix; a quantized W is dequantized one row at a
 * time and added into every token's output (MLA's per-head W_UK: small matrices). */
void cpu_matmul_xw_any(ci_backend *be, float *y, const float *x, int n, const ci_mat *W) {
    CI_FP_FLUSH_SCOPE();
    if (W->dtype != CI_U32) {
        cpu_matmul_xw(be, y, x, n, W);
        return;
    }
    if (q_desc(W)->stored_t) {   /* matmul ignores stored_t: it reads the rows as stored */
        ci_mat s = *W;
        s.rows = W->cols;
        s.cols = W->rows;
        be->matmul(be, y, x, n, &s);
        return;
    }
    cpu_matmul_xw_by(y, x, n, W, row_f32);
}
