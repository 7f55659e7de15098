/* kernels_scalar.c — the portable kernel set: plain C11, any architecture.
 *
 * This is both the fallback and the readable statement of what each kernel computes.
 * Sums use 8 interleaved f32 partial sums (lane k % 8), the same shape as the SIMD sets,
 * which keeps rounding error comparable across ISAs (about sqrt(n) ulps, not n). Weights
 * are converted a chunk of CPU_KC columns at a time into a stack buffer, then reused for
 * every token row of the tile; each chunk is one f32_tile (the summation order of
 * cpu_kernels.h), so decode and prefill give the same bits. */
#include "cpu_kernels.h"
#include <math.h>
#include <string.h>

#define LANES 8

static void row_f32(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst) {
    int64_t cols = W->cols;
    switch (W->dtype) {
    case CI_F32: {
        const float *p = (const float *)W->data + r * cols;
        memcpy(dst, p + c0, (size_t)(c1 - c0) * sizeof(float));
        break;
    }
    case CI_BF16: {
        const uint16_t *p = (const uint16_t *)W->data + r * cols;
        for (int64_t c = c0; c < c1; c++) dst[c - c0] = ci_bf16_to_f32(p[c]);
        break;
    }
    case CI_F16: {
        const uint16_t *p = (const uint16_t *)W->data + r * cols;
        for (int64_t c = c0; c < c1; c++) dst[c - c0] = ci_f16_to_f32(p[c]);
        break;
    }
    case CI_F8_E4M3: {
        const uint8_t *p = (const uint8_t *)W->data + r * cols;
        int64_t bs = W->block > 0 ? W->block : cols;
        for (int64_t c = c0; c < c1;) {
            int64_t cb = c / bs, end = (cb + 1) * bs < c1 ? (cb + 1) * bs : c1;
            float s = cpu_block_scale(W, (W->scale_row0 + r) / bs, cb);
            for (; c < end; c++) dst[c - c0] = cpu_fp8_lut[p[c]] * s;
        }
        break;
    }
    default:
        for (int64_t c = c0; c < c1; c++) dst[c - c0] = NAN;
    }
}

/* acc[t][r][lane] += x[t][k] * w[r][k] over one chunk (lane = k % 8; chunks start at
 * multiples of 8). The fixed 8-wide inner loop is written so that compilers vectorize it
 * at -O2 on any target (SSE2, NEON), which keeps this fallback within a few x of SIMD. */
static void chunk_dot(float acc[CPU_TILE_T][CPU_TILE_R][LANES], const float *const w[CPU_TILE_R], int64_t n,
                      int T, const float *x, int64_t xs) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < CPU_TILE_R; r++) {
            const float *xt = x + t * xs, *wr = w[r];
            float a[LANES];
            memcpy(a, acc[t][r], sizeof a);
            int64_t k = 0;
            for (; k + LANES <= n; k += LANES)
                for (int l = 0; l < LANES; l++) a[l] += xt[k + l] * wr[k + l];
            for (; k < n; k++) a[k % LANES] += xt[k] * wr[k];
            memcpy(acc[t][r], a, sizeof a);
        }
}

static void finish(float acc[CPU_TILE_T][CPU_TILE_R][LANES], int T, float *out) {
    for (int t = 0; t < T; t++)
        for (int r = 0; r < CPU_TILE_R; r++) {
            float *a = acc[t][r];
            out[t * CPU_TILE_R + r] = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
        }
}

static void f32_tile(const float *const w[CPU_TILE_R], int64_t kc, int T, const float *x, int64_t xs, float *out) {
    float acc[CPU_TILE_T][CPU_TILE_R][LANES];
    memset(acc, 0, sizeof acc);
    chunk_dot(acc, w, kc, T, x, xs);
    finish(acc, T, out);
}

/* Chunk by chunk: the weights converted (8 KiB of stack), one f32_tile, sums added. */
static int mat_tile(const ci_mat *W, const int64_t rows[CPU_TILE_R], int T, const float *x, int64_t xs,
                    float *out) {
    float buf[CPU_TILE_R][CPU_KC], part[CPU_TILE_T * CPU_TILE_R];
    const float *w[CPU_TILE_R];
    for (int64_t c0 = 0; c0 < W->cols; c0 += CPU_KC) {
        int64_t c1 = c0 + CPU_KC < W->cols ? c0 + CPU_KC : W->cols;
        for (int r = 0; r < CPU_TILE_R; r++) {
            row_f32(W, rows[r], c0, c1, buf[r]);
            w[r] = buf[r];
        }
        f32_tile(w, c1 - c0, T, x + c0, xs, part);
        for (int i = 0; i < T * CPU_TILE_R; i++) out[i] = c0 == 0 ? part[i] : out[i] + part[i];
    }
    return 1;
}

static float sum_lanes(const float *a) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

static float sumsq(const float *x, int64_t n) {
    float a[LANES] = {0};
    for (int64_t i = 0; i < n; i++) a[i % LANES] += x[i] * x[i];
    return sum_lanes(a);
}

static void scale_mul(float *out, const float *x, const float *w, float s, int64_t n) {
    if (w) for (int64_t i = 0; i < n; i++) out[i] = x[i] * s * w[i];
    else for (int64_t i = 0; i < n; i++) out[i] = x[i] * s;
}

static void swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static float vmax(const float *s, int L) {
    float m = -INFINITY;
    for (int j = 0; j < L; j++) m = s[j] > m ? s[j] : m;
    return m;
}

static float exp_sum(float *s, int L, float m) {
    float a[LANES] = {0};
    for (int j = 0; j < L; j++) {
        s[j] = expf(s[j] - m);
        a[j % LANES] += s[j];
    }
    return sum_lanes(a);
}

static void attn_wsum(float *o, int64_t os, int nq, const float *p, int64_t ps, const float *v, int64_t stride,
                      int L, int hd) {
    for (int h = 0; h < nq; h++)
        for (int j = 0; j < L; j++) {
            const float *vj = v + (int64_t)j * stride;
            float pj = p[h * ps + j];
            float *oh = o + h * os;
            for (int i = 0; i < hd; i++) oh[i] += pj * vj[i];
        }
}

/* f32_tile over f16 rows: widened a piece of CPU_KC columns at a time (a multiple of the lanes,
 * so every product lands in f32_tile's lane in its order), then finished once. */
static void h16_tile(const uint16_t *const w[CPU_TILE_R], int64_t kc, int T, const float *x, int64_t xs, float *out) {
    float acc[CPU_TILE_T][CPU_TILE_R][LANES], buf[CPU_TILE_R][CPU_KC];
    const float *wp[CPU_TILE_R];
    memset(acc, 0, sizeof acc);
    for (int64_t c0 = 0; c0 < kc; c0 += CPU_KC) {
        int64_t n = kc - c0 < CPU_KC ? kc - c0 : CPU_KC;
        for (int r = 0; r < CPU_TILE_R; r++) {
            for (int64_t c = 0; c < n; c++) buf[r][c] = ci_f16_to_f32(w[r][c0 + c]);
            wp[r] = buf[r];
        }
        chunk_dot(acc, wp, n, T, x + c0, xs);   /* c0 a multiple of LANES: the lanes go on as in one call */
    }
    finish(acc, T, out);
}

static void attn_wsum16(float *o, int64_t os, int nq, const float *p, int64_t ps, const uint16_t *v, int64_t stride,
                        int L, int hd) {
    for (int h = 0; h < nq; h++)
        for (int j = 0; j < L; j++) {
            const uint16_t *vj = v + (int64_t)j * stride;
            float pj = p[h * ps + j];
            float *oh = o + h * os;
            for (int i = 0; i < hd; i++) oh[i] += pj * ci_f16_to_f32(vj[i]);
        }
}

static void to_f16(const float *x, int64_t n, uint16_t *h) {
    for (int64_t i = 0; i < n; i++) h[i] = cpu_kv_f16(x[i]);
}

const cpu_kernels cpu_kernels_scalar = {
    .name = "cpu-scalar",
    .mat_tile = mat_tile,
    .f32_tile = f32_tile,
    .row_f32 = row_f32,
    .sumsq = sumsq,
    .scale_mul = scale_mul,
    .swiglu = swiglu,
    .add = add,
    .vmax = vmax,
    .exp_sum = exp_sum,
    .attn_wsum = attn_wsum,
    .h16_tile = h16_tile,
    .attn_wsum16 = attn_wsum16,
    .to_f16 = to_f16,
};
