/* conv_cpu.c — the CPU backend's short-convolution ops (backend.h: shortconv, add_bias), in
 * host memory. The arithmetic is nn/shortconv.c's as it was before it became an op (bias
 * adds, window build, tap sum in k order, C gate), so LFM2's logits keep their bits. One
 * thread: a chunk's conv is a few multiply-adds per element next to its two matmuls. */
#include "cpu_kernels.h"
#include <string.h>

void cpu_add_bias(ci_backend *be, float *y, const float *bias, int n, int width) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < width; i++) y[(size_t)t * width + i] += bias[i];
}

/* Rows [t0, t0 + n) of bcx following `state` (updated): their outputs into y (same rows). */
static void conv_span(float *y_all, const float *bcx, float *win, int D, int K, const float *taps,
                      const float *conv_bias, float *state, int t0, int n) {
    const int H = K - 1;
    /* window: H history rows from the state, then bx = B ⊙ X of these rows */
    if (H) memcpy(win, state, (size_t)H * D * sizeof(float));
    for (int t = 0; t < n; t++) {
        const float *B = bcx + (size_t)(t0 + t) * 3 * D, *X = B + 2 * D;
        float *bx = win + (size_t)(H + t) * D;
        for (int c = 0; c < D; c++) bx[c] = B[c] * X[c];
    }
    /* y[t] = C[t] ⊙ Σ_k taps[k] ⊙ win[t + k]: output t sees inputs t-(K-1) .. t */
    for (int t = 0; t < n; t++) {
        float *y = y_all + (size_t)(t0 + t) * D;
        if (conv_bias) memcpy(y, conv_bias, (size_t)D * sizeof(float));
        else memset(y, 0, (size_t)D * sizeof(float));
        for (int k = 0; k < K; k++) {
            const float *w = taps + (size_t)k * D, *in = win + (size_t)(t + k) * D;
            for (int c = 0; c < D; c++) y[c] += w[c] * in[c];
        }
        const float *C = bcx + (size_t)(t0 + t) * 3 * D + D;
        for (int c = 0; c < D; c++) y[c] *= C[c];
    }
    if (H) memcpy(state, win + (size_t)n * D, (size_t)H * D * sizeof(float));  /* last K-1 rows */
}

void cpu_shortconv(ci_backend *be, float *y, float *bcx, int n, int dim, int K, const float *taps,
                   const float *in_bias, const float *conv_bias, float *state, float *const *states, float *scratch) {
    CI_FP_FLUSH_SCOPE();
    if (n <= 0) return;
    if (in_bias) cpu_add_bias(be, bcx, in_bias, n, 3 * dim);
    if (!states) {
        conv_span(y, bcx, scratch, dim, K, taps, conv_bias, state, 0, n);
        return;
    }
    for (int i = 0; i < n; i++) conv_span(y, bcx, scratch, dim, K, taps, conv_bias, states[i], i, 1);
}
