/* conv.cu — LFM2's gated short convolution on the device (backend.h: shortconv, add_bias).
 *
 * shortconv is two launches on the stream, so no thread reads a state row another writes:
 *   out:   grid (dim / 256, n), thread (c, t): y[t, c] = C ⊙ (conv_bias + Σ_k taps[k] ⊙ win),
 *          the window entry before the row's sequence start read from its state, the others
 *          formed as B ⊙ X from bcx on the fly (in_bias added first, bcx left untouched);
 *   state: grid (dim / 256, 1 or n), thread (c, sequence): the state's K-1 rows of channel c
 *          become the last K-1 window rows, in increasing row order (row i reads window row
 *          n + i >= i of the old state before anything overwrites it).
 * A decode step (one row per sequence, or a one-row chunk; K <= 8) is one launch instead:
 * thread (c, t) owns channel c of row t's state, reads its window into registers, writes the
 * output and then the shifted state (shortconv_step_kernel).
 * Numerics: the CPU's order and rounding without contraction (__fmul_rn / __fadd_rn: no FMA),
 * so a device row has the CPU's bits. */
#include "cuda_internal.h"
#include "conv_window.cuh"

/* Window entry w of channel c for a sequence whose rows are bcx rows r0 .. r0 + m - 1 and
 * whose state is st: w < K-1 is state row w, else row r0 + w - (K-1)'s B ⊙ X. */
__device__ __forceinline__ float conv_win(const float *bcx, const float *in_bias, const float *st, int dim, int K,
                                          int r0, int w, int c) {
    if (w < K - 1) return st[(int64_t)w * dim + c];
    const float *row = bcx + (int64_t)(r0 + w - (K - 1)) * 3 * dim;
    float b = row[c], x = row[2 * dim + c];
    if (in_bias) {
        b = __fadd_rn(b, in_bias[c]);
        x = __fadd_rn(x, in_bias[2 * dim + c]);
    }
    return __fmul_rn(b, x);
}

__global__ void shortconv_out_kernel(float *y, const float *bcx, int dim, int K, const float *taps,
                                     const float *in_bias, const float *conv_bias, const float *state,
                                     float *const *states) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= dim) return;
    /* a chunk: one sequence from row 0, row t at window K-1+t; a table: row t alone */
    const float *st = states ? states[t] : state;
    const int r0 = states ? t : 0, tw = states ? 0 : t;
    float acc = conv_bias ? conv_bias[c] : 0.0f;
    for (int k = 0; k < K; k++)
        acc = __fadd_rn(acc, __fmul_rn(taps[(int64_t)k * dim + c], conv_win(bcx, in_bias, st, dim, K, r0, tw + k, c)));
    float C = bcx[(int64_t)t * 3 * dim + dim + c];
    if (in_bias) C = __fadd_rn(C, in_bias[dim + c]);
    y[(int64_t)t * dim + c] = __fmul_rn(acc, C);
}

__global__ void shortconv_state_kernel(const float *bcx, int n, int dim, int K, const float *in_bias, float *state,
                                       float *const *states) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (c >= dim) return;
    float *st = states ? states[r] : state;
    const int m = states ? 1 : n, r0 = states ? r : 0;
    for (int i = 0; i < K - 1; i++) st[(int64_t)i * dim + c] = conv_win(bcx, in_bias, st, dim, K, r0, m + i, c);
}

enum { SC_KMAX = 8 };

/* One row per sequence (a decode step, or a one-row chunk), K <= SC_KMAX: thread (c, t) owns
 * channel c of its sequence's state, so it forms the output and shifts the state in one pass
 * (the window in registers first): the two kernels' sums and stores in one launch. */
__global__ void shortconv_step_kernel(float *y, const float *bcx, int dim, int K, const float *taps,
                                      const float *in_bias, const float *conv_bias, float *state,
                                      float *const *states) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= dim) return;
    float *st = states ? states[t] : state;
    const int r0 = states ? t : 0;
    cv_step<SC_KMAX>(
        dim, K, c, taps, [=] { return conv_bias ? conv_bias[c] : 0.0f; }, st,
        [=](int w) { return conv_win(bcx, in_bias, st, dim, K, r0, w, c); },
        [=](float acc) {
            float C = bcx[(int64_t)r0 * 3 * dim + dim + c];
            if (in_bias) C = __fadd_rn(C, in_bias[dim + c]);
            y[(int64_t)t * dim + c] = __fmul_rn(acc, C);
        });
}

void cb_shortconv(cuda_be *cb, float *y, const float *bcx, int n, int dim, int K, const float *taps,
                  const float *in_bias, const float *conv_bias, float *state, float *const *states) {
    if (n <= 0 || dim <= 0 || K <= 0) return;
    const int threads = 256, bx = (dim + threads - 1) / threads;
    if ((states || n == 1) && K <= SC_KMAX) {
        cb_launch(cb, shortconv_step_kernel, dim3(bx, n), dim3(threads), 0, y, bcx, dim, K, taps, in_bias, conv_bias,
                  state, states);
        cb_launched(cb, "shortconv step");
        return;
    }
    cb_launch(cb, shortconv_out_kernel, dim3(bx, n), dim3(threads), 0, y, bcx, dim, K, taps, in_bias, conv_bias,
              (const float *)state, states);
    if (cb_launched(cb, "shortconv") || K < 2) return;
    cb_launch(cb, shortconv_state_kernel, dim3(bx, states ? n : 1), dim3(threads), 0, bcx, n, dim, K, in_bias, state,
              states);
    cb_launched(cb, "shortconv state");
}

__global__ void add_bias_kernel(float *y, const float *bias, int width) {
    pdl_enter();
    float *row = y + (int64_t)blockIdx.y * width;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < width; i += gridDim.x * blockDim.x)
        row[i] = __fadd_rn(row[i], bias[i]);
}

void cb_add_bias(cuda_be *cb, float *y, const float *bias, int n, int width) {
    if (n <= 0 || width <= 0) return;
    const int threads = 256, bx = (width + threads - 1) / threads;
    cb_launch(cb, add_bias_kernel, dim3(bx > 64 ? 64 : bx, n), dim3(threads), 0, y, bias, width);
    cb_launched(cb, "add_bias");
}
