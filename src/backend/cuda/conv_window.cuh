/* conv_window.cuh — the register-window bodies shared by the depthwise causal convolutions
 * (conv.cu shortconv, mamba.cu mamba_conv, deltanet.cu causal_conv). A family's kernel names
 * its window entries (win(w): entry w of this thread's channel, w < K-1 from the state) and its
 * epilogue; the sums are the CPU's: acc = init, then + taps[k] ⊙ win in k order, no contraction.
 *   cv_rows: a chunk of one sequence, tokens t0 .. t0 + T - 1 of channel c from one window of
 *            T + K - 1 entries in registers (each input read once); out(t, acc) per token < n.
 *   cv_step: one row of a sequence: the K entries in registers, out(acc), then the channel's
 *            K-1 state rows shifted (the calling thread owns them). */
#pragma once

template <int T, int KMAX, class Init, class Win, class Out>
__device__ __forceinline__ void cv_rows(int n, int dim, int K, int c, int t0, const float *taps, Init init, Win win,
                                        Out out) {
    float tap[KMAX], wv[T + KMAX - 1];
#pragma unroll
    for (int k = 0; k < KMAX; k++) tap[k] = k < K ? taps[(int64_t)k * dim + c] : 0.0f;
#pragma unroll
    for (int j = 0; j < T + KMAX - 1; j++) wv[j] = j < T + K - 1 && t0 + j - (K - 1) < n ? win(t0 + j) : 0.0f;
    const float a0 = init();
#pragma unroll
    for (int i = 0; i < T; i++) {
        if (t0 + i >= n) break;
        float acc = a0;
#pragma unroll
        for (int k = 0; k < KMAX; k++)
            if (k < K) acc = __fadd_rn(acc, __fmul_rn(tap[k], wv[i + k]));
        out(t0 + i, acc);
    }
}

template <int KMAX, class Init, class Win, class Out>
__device__ __forceinline__ void cv_step(int dim, int K, int c, const float *taps, Init init, float *st, Win win,
                                        Out out) {
    float wv[KMAX];
#pragma unroll
    for (int k = 0; k < KMAX; k++) wv[k] = k < K ? win(k) : 0.0f;
    float acc = init();
#pragma unroll
    for (int k = 0; k < KMAX; k++)
        if (k < K) acc = __fadd_rn(acc, __fmul_rn(taps[(int64_t)k * dim + c], wv[k]));
    out(acc);
#pragma unroll
    for (int i = 0; i + 1 < KMAX; i++)
        if (i < K - 1) st[(int64_t)i * dim + c] = wv[i + 1];
}
