/* mamba.cu — Mamba2 on the device (backend.h: mamba_conv, ssd_scan, gated_rmsnorm, relu2).
 *
 * mamba_conv is two launches, as LFM2's shortconv (conv.cu), so no thread reads a state row
 * another writes:
 *   out:   grid (dim / 256, n), thread (c, t): xbc[t, c] = silu(bias + Σ_k taps[k] ⊙ win),
 *          window entries before the row's sequence start read from its state;
 *   state: grid (dim / 256, 1 or n): the state's K-1 rows of channel c become the last K-1
 *          window rows, in increasing row order (row i reads window row n + i >= i of the old
 *          state before anything overwrites it).
 *   The tap sum has the CPU's order and rounding (no contraction); SiLU uses the device's
 *   expf, so outputs agree with the CPU's to an ulp or two, the states bit for bit.
 * ssd_scan is one launch: grid (Hm, sequences, P / 8), block 8 warps; warp w owns state row
 * p of head h, its N floats in registers (lane j holds n = j, j + 32, ...: N <= 256), read
 * once and written once per call; per token it forms dt (softplus, bias, clamp), the decay
 * e^{dt·A}, updates the row with dt·x_p·B, and reduces S_p·C over the warp (+ D x_p), the
 * next token's B, C, x_p and dt already loading. A
 * chunk loops over its tokens inside the kernel (the recurrence: equal to the CPU's chunked
 * SSD up to rounding; the within-chunk GEMM form is not written yet). The state update has
 * the CPU's rounding (a·s + b·B without contraction) but the decay comes from the device's
 * expf, and the y reduction runs in another order: agreement to rounding, not bits.
 * gated_rmsnorm: one block per (row, group); relu2 elementwise. */
#include "cuda_internal.h"

__device__ __forceinline__ float mb_silu(float v) { return v / (1.0f + expf(-v)); }

/* ---- mamba_conv ----------------------------------------------------------------------- */

/* Window entry w of channel c for a sequence whose inputs are rows r0 .. of in (stride) and
 * whose state is st: w < K-1 is state row w, else input row r0 + w - (K-1). */
__device__ __forceinline__ float mconv_win(const float *in, int stride, const float *st, int dim, int K, int r0, int w,
                                           int c) {
    if (w < K - 1) return st[(int64_t)w * dim + c];
    return in[(int64_t)(r0 + w - (K - 1)) * stride + c];
}

__global__ void mamba_conv_out_kernel(float *xbc, const float *in, int stride, int dim, int K, const float *taps,
                                      const float *bias, const float *state, float *const *states) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= dim) return;
    const float *st = states ? states[t] : state;
    const int r0 = states ? t : 0, tw = states ? 0 : t;
    float acc = bias ? bias[c] : 0.0f;
    for (int k = 0; k < K; k++)
        acc = __fadd_rn(acc, __fmul_rn(taps[(int64_t)k * dim + c], mconv_win(in, stride, st, dim, K, r0, tw + k, c)));
    xbc[(int64_t)t * dim + c] = mb_silu(acc);
}

__global__ void mamba_conv_state_kernel(const float *in, int stride, int n, int dim, int K, float *state,
                                        float *const *states) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (c >= dim) return;
    float *st = states ? states[r] : state;
    const int m = states ? 1 : n, r0 = states ? r : 0;
    for (int i = 0; i < K - 1; i++) st[(int64_t)i * dim + c] = mconv_win(in, stride, st, dim, K, r0, m + i, c);
}

void cb_mamba_conv(cuda_be *cb, float *xbc, const float *in, int in_stride, int n, int dim, int K, const float *taps,
                   const float *bias, float *state, float *const *states) {
    if (n <= 0 || dim <= 0 || K <= 0) return;
    const int threads = 256, bx = (dim + threads - 1) / threads;
    cb_launch(cb, mamba_conv_out_kernel, dim3(bx, n), dim3(threads), 0, xbc, in, in_stride, dim, K, taps, bias,
              (const float *)state, states);
    if (cb_launched(cb, "mamba_conv") || K < 2) return;
    cb_launch(cb, mamba_conv_state_kernel, dim3(bx, states ? n : 1), dim3(threads), 0, in, in_stride, n, dim, K,
              state, states);
    cb_launched(cb, "mamba_conv state");
}

/* ---- ssd_scan ------------------------------------------------------------------------- */

enum { SSD_WARPS = 8, SSD_MAXJ = 8 };   /* rows per block; N <= 32 * SSD_MAXJ */

__global__ void __launch_bounds__(32 * SSD_WARPS)
ssd_scan_kernel(float *y, const float *xbc, int xbc_stride, const float *dtr, int dt_stride, int n, int Hm, int P,
                int G, int N, float dt_min, const float *dt_bias, const float *A, const float *D, float *state,
                float *const *states) {
    pdl_enter();
    const int h = blockIdx.x, lane = threadIdx.x & 31, p = blockIdx.z * SSD_WARPS + (threadIdx.x >> 5);
    if (p >= P) return;
    const int g = h / (Hm / G), I = Hm * P;
    /* a table: sequence blockIdx.y is row blockIdx.y alone; a chunk: rows 0..n-1 */
    const int t0 = states ? blockIdx.y : 0, t1 = states ? t0 + 1 : n;
    float *S = (states ? states[blockIdx.y] : state) + ((int64_t)h * P + p) * N;
    float s[SSD_MAXJ];
#pragma unroll
    for (int j = 0; j < SSD_MAXJ; j++) s[j] = lane + 32 * j < N ? S[lane + 32 * j] : 0.0f;
    const float a = A[h], d = D[h], bias = dt_bias[h];
    /* token t's inputs are loaded while token t-1 is computed (nb / nc / nx / nr: the next) */
    float nb[SSD_MAXJ], nc[SSD_MAXJ], nx = 0.0f, nr = 0.0f;
#define SSD_LOAD(t_)                                                                                                \
    do {                                                                                                            \
        const float *row_ = xbc + (int64_t)(t_) * xbc_stride;                                                       \
        const float *B_ = row_ + I + (int64_t)g * N, *C_ = row_ + I + (int64_t)(G + g) * N;                        \
        _Pragma("unroll") for (int j = 0; j < SSD_MAXJ; j++) {                                                      \
            const int i_ = lane + 32 * j;                                                                           \
            nb[j] = i_ < N ? B_[i_] : 0.0f;                                                                         \
            nc[j] = i_ < N ? C_[i_] : 0.0f;                                                                         \
        }                                                                                                           \
        nx = row_[(int64_t)h * P + p];                                                                              \
        nr = dtr[(int64_t)(t_) * dt_stride + h];                                                                    \
    } while (0)
    if (t0 < t1) SSD_LOAD(t0);
    for (int t = t0; t < t1; t++) {
        float Bv[SSD_MAXJ], Cv[SSD_MAXJ];
#pragma unroll
        for (int j = 0; j < SSD_MAXJ; j++) { Bv[j] = nb[j]; Cv[j] = nc[j]; }
        const float xp = nx, raw = nr;
        if (t + 1 < t1) SSD_LOAD(t + 1);
        const float v = __fadd_rn(raw, bias);
        const float sp = v > 20.0f ? v : log1pf(expf(v));
        const float dt = sp < dt_min ? dt_min : sp, da = expf(__fmul_rn(dt, a));
        const float b = __fmul_rn(dt, xp);
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < SSD_MAXJ; j++) {
            if (lane + 32 * j < N) {
                s[j] = __fadd_rn(__fmul_rn(da, s[j]), __fmul_rn(b, Bv[j]));
                acc = __fadd_rn(acc, __fmul_rn(s[j], Cv[j]));
            }
        }
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0) y[(int64_t)t * I + (int64_t)h * P + p] = __fadd_rn(acc, __fmul_rn(d, xp));
    }
#undef SSD_LOAD
#pragma unroll
    for (int j = 0; j < SSD_MAXJ; j++)
        if (lane + 32 * j < N) S[lane + 32 * j] = s[j];
}

void cb_ssd_scan(cuda_be *cb, float *y, const float *xbc, int xbc_stride, const float *dt, int dt_stride, int n,
                 const ci_ssd *s, float *state, float *const *states) {
    if (n <= 0) return;
    if (s->d_state > 32 * SSD_MAXJ || s->n_groups <= 0 || s->n_heads % s->n_groups) {
        if (!cb->failed) {
            cb->failed = 1;
            snprintf(cb->base.last_error, sizeof cb->base.last_error,
                     "CUDA: ssd_scan: d_state %d (at most %d) / n_groups %d not supported", s->d_state,
                     32 * SSD_MAXJ, s->n_groups);
        }
        return;
    }
    dim3 grid(s->n_heads, states ? n : 1, (s->head_dim + SSD_WARPS - 1) / SSD_WARPS);
    cb_launch(cb, ssd_scan_kernel, grid, dim3(32 * SSD_WARPS), 0, y, xbc, xbc_stride, dt, dt_stride, n, s->n_heads,
              s->head_dim, s->n_groups, s->d_state, s->dt_min, s->dt_bias, s->A, s->D, state, states);
    cb_launched(cb, "ssd_scan");
}

/* ---- gated_rmsnorm, relu2 ------------------------------------------------------------- */

__global__ void gated_rmsnorm_kernel(float *y, const float *z, int z_stride, const float *w, int dim, int group,
                                     float eps) {
    pdl_enter();
    __shared__ float part[32];
    const int t = blockIdx.y, g0 = blockIdx.x * group;
    float *yr = y + (int64_t)t * dim + g0;
    const float *zr = z + (int64_t)t * z_stride + g0;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < group; i += blockDim.x) {
        const float v = __fmul_rn(yr[i], mb_silu(zr[i]));
        yr[i] = v;
        ss = __fadd_rn(ss, __fmul_rn(v, v));
    }
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) tot += part[i];
    const float r = 1.0f / sqrtf(tot / (float)group + eps);
    for (int i = threadIdx.x; i < group; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(yr[i], r), w[g0 + i]);
}

void cb_gated_rmsnorm(cuda_be *cb, float *y, const float *z, int z_stride, const float *w, int n, int dim, int group,
                      float eps) {
    if (n <= 0 || dim <= 0 || group <= 0 || dim % group) return;
    cb_launch(cb, gated_rmsnorm_kernel, dim3(dim / group, n), dim3(256), 0, y, z, z_stride, w, dim, group, eps);
    cb_launched(cb, "gated_rmsnorm");
}

__global__ void relu2_kernel(float *g, int64_t count) {
    pdl_enter();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = g[i] > 0.0f ? g[i] : 0.0f;
        g[i] = __fmul_rn(v, v);
    }
}

void cb_relu2(cuda_be *cb, float *g, int64_t count) {
    if (count <= 0) return;
    int64_t blocks = (count + 255) / 256;
    cb_launch(cb, relu2_kernel, dim3((unsigned)(blocks > 4096 ? 4096 : blocks)), dim3(256), 0, g, count);
    cb_launched(cb, "relu2");
}
