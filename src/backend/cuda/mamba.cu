/* mamba.cu — Mamba2 on the device (backend.h: mamba_conv, ssd_scan, gated_rmsnorm, relu2).
 *
 * mamba_conv is two launches, as LFM2's shortconv (conv.cu), so no thread reads a state row
 * another writes:
 *   out:   grid (dim / 256, n), thread (c, t): xbc[t, c] = silu(bias + Σ_k taps[k] ⊙ win),
 *          window entries before the row's sequence start read from its state; a chunk of
 *          one sequence: thread (c, y) makes 8 tokens from a window of 8 + K - 1 registers;
 *          a decode step (one row per sequence, or a one-row chunk; K <= 8) is one launch:
 *          thread (c, t) owns channel c of row t's state, output then shifted state;
 *   state: grid (dim / 256, 1 or n): the state's K-1 rows of channel c become the last K-1
 *          window rows, in increasing row order (row i reads window row n + i >= i of the old
 *          state before anything overwrites it).
 *   The tap sum has the CPU's order and rounding (no contraction); SiLU uses the device's
 *   expf, so outputs agree with the CPU's to an ulp or two, the states bit for bit.
 * ssd_scan, token by token (decode steps, short chunks, cuda_be.ssd_chunk off): one launch,
 * grid (Hm, sequences, P / 8), block 8 warps; warp w owns state row p of head h, its N floats
 * in registers (lane j holds n = j, j + 32, ...: N <= 256), read once and written once per
 * call; per token it forms dt (softplus, bias, clamp), the decay e^{dt·A}, updates the row
 * with dt·x_p·B, and reduces S_p·C over the warp (+ D x_p), the next token's B, C, x_p and dt
 * already loading. The state update has the CPU's rounding (a·s + b·B without contraction)
 * but the decay comes from the device's expf, and the y reduction runs in another order:
 * agreement to rounding, not bits.
 * ssd_scan, chunked (a prompt of >= SSD_CHUNK_MIN tokens asked for in the chunked form): the
 * CPU's chunked SSD (mamba_cpu.c) over chunks of SC_L = 64 tokens, in f32 on the CUDA cores,
 * three launches over scratch (cuda_be.ssd_work: dt and cumulative dt·A per (chunk, head,
 * token), one [P, N] state per (chunk, head)):
 *   chunk_state (grid chunks × Hm): dt, cs_t = Σ_{u<=t} dt_u A, and the chunk's own state
 *     term Σ_u e^{cs_last - cs_u} dt_u x_u ⊗ B_u (a [P, L] x [L, N] product in shared memory);
 *   state_pass (grid P·N / 256 × Hm): a thread per state entry walks the chunks in order,
 *     S <- e^{cs_last} S + term, leaving in each chunk's slot the state it starts from, and
 *     the final state in `state`;
 *   chunk_out (grid chunks × Hm): y_t = e^{cs_t} C_t·S0 + Σ_{u<=t} (C_t·B_u) e^{cs_t - cs_u}
 *     dt_u x_u + D x_t, C·Bᵀ and both sums as products in shared memory.
 *   Decays below e^-60 count as 0, as the CPU's. Agreement with the CPU's chunked form to
 *   rounding (the device's expf, other summation orders).
 * gated_rmsnorm: one block per (row, group); relu2 elementwise. */
#include "cuda_internal.h"
#include "conv_window.cuh"

__device__ __forceinline__ float mb_silu(float v) { return v / (1.0f + expf(-v)); }

/* ---- mamba_conv ----------------------------------------------------------------------- */

/* Window entry w of channel c for a sequence whose inputs are rows r0 .. of in (stride) and
 * whose state is st: w < K-1 is state row w, else input row r0 + w - (K-1). */
__device__ __forceinline__ float mconv_win(const float *in, int stride, const float *st, int dim, int K, int r0, int w,
                                           int c) {
    if (w < K - 1) return st[(int64_t)w * dim + c];
    return in[(int64_t)(r0 + w - (K - 1)) * stride + c];
}

enum { MC_T = 8, MC_KMAX = 8 };   /* tokens a thread of a chunk; taps held in registers */

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

/* A chunk of one sequence (K <= MC_KMAX): thread (c, block y) makes tokens MC_T·y .. of
 * channel c from one window of MC_T + K - 1 entries in registers (each input read once, not
 * K times); the same sums in the same order as mamba_conv_out_kernel. */
__global__ void mamba_conv_rows_kernel(float *xbc, const float *in, int stride, int n, int dim, int K,
                                       const float *taps, const float *bias, const float *state) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t0 = blockIdx.y * MC_T;
    if (c >= dim) return;
    cv_rows<MC_T, MC_KMAX>(
        n, dim, K, c, t0, taps, [=] { return bias ? bias[c] : 0.0f; },
        [=](int w) { return mconv_win(in, stride, state, dim, K, 0, w, c); },
        [=](int t, float acc) { xbc[(int64_t)t * dim + c] = mb_silu(acc); });
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

/* One row per sequence (a decode step, or a one-row chunk), K <= MC_KMAX: thread (c, t) owns
 * channel c of its sequence's state: the output, then the shifted state, in one launch. */
__global__ void mamba_conv_step_kernel(float *xbc, const float *in, int stride, int dim, int K, const float *taps,
                                       const float *bias, float *state, float *const *states) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= dim) return;
    float *st = states ? states[t] : state;
    const int r0 = states ? t : 0;
    cv_step<MC_KMAX>(
        dim, K, c, taps, [=] { return bias ? bias[c] : 0.0f; }, st,
        [=](int w) { return mconv_win(in, stride, st, dim, K, r0, w, c); },
        [=](float acc) { xbc[(int64_t)t * dim + c] = mb_silu(acc); });
}

void cb_mamba_conv(cuda_be *cb, float *xbc, const float *in, int in_stride, int n, int dim, int K, const float *taps,
                   const float *bias, float *state, float *const *states) {
    if (n <= 0 || dim <= 0 || K <= 0) return;
    const int threads = 256, bx = (dim + threads - 1) / threads;
    if ((states || n == 1) && K <= MC_KMAX) {
        cb_launch(cb, mamba_conv_step_kernel, dim3(bx, n), dim3(threads), 0, xbc, in, in_stride, dim, K, taps, bias,
                  state, states);
        cb_launched(cb, "mamba_conv step");
        return;
    }
    if (!states && n > 1 && K <= MC_KMAX)
        cb_launch(cb, mamba_conv_rows_kernel, dim3(bx, (n + MC_T - 1) / MC_T), dim3(threads), 0, xbc, in, in_stride, n,
                  dim, K, taps, bias, (const float *)state);
    else
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

/* ---- ssd_scan, chunked ---------------------------------------------------------------- */

enum { SC_L = 64, SC_LT = SC_L + 4, SC_THREADS = 256, SSD_CHUNK_MIN = 32 };

__device__ __forceinline__ float sc_decay(float x) { return x < -60.0f ? 0.0f : expf(x); }

/* acc[r][c] += a[r] b[c] for a 4x4 tile */
__device__ __forceinline__ void sc_fma4(float (&acc)[4][4], float4 a, float4 b) {
    const float av[4] = { a.x, a.y, a.z, a.w }, bv[4] = { b.x, b.y, b.z, b.w };
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
}

/* Chunk c (blockIdx.x) of head h (blockIdx.y): dt and cs of its tokens into dtc / csc
 * [chunks, Hm, SC_L] (tokens past the end: dt 0, cs the last token's), and its state term
 * st[c, h] [P, N] = Σ_u e^{cs_last - cs_u} dt_u x_u ⊗ B_u. Shared memory: x·w [SC_L, Pp],
 * B [SC_L, Np], dt, cs, w [SC_L] (Pp, Np: P, N rounded up to 4). */
__global__ void __launch_bounds__(SC_THREADS)
ssd_chunk_state_kernel(const float *xbc, int xbc_stride, const float *dtr, int dt_stride, int n, int Hm, int P, int G,
                       int N, float dt_min, const float *dt_bias, const float *A, float *dtc, float *csc, float *st) {
    pdl_enter();
    extern __shared__ float4 sc_sm4[];
    float *sm = (float *)sc_sm4;
    const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int Pp = (P + 3) & ~3, Np = (N + 3) & ~3, I = Hm * P, g = h / (Hm / G);
    const int t0 = c * SC_L, nt = n - t0 < SC_L ? n - t0 : SC_L;
    float *xs = sm, *bs = xs + SC_L * Pp, *sdt = bs + SC_L * Np, *scs = sdt + SC_L, *sw = scs + SC_L;
    if (tid < SC_L) {
        float dt = 0.0f;
        if (tid < nt) {
            const float v = __fadd_rn(dtr[(int64_t)(t0 + tid) * dt_stride + h], dt_bias[h]);
            const float sp = v > 20.0f ? v : log1pf(expf(v));
            dt = sp < dt_min ? dt_min : sp;
        }
        sdt[tid] = dt;
    }
    __syncthreads();
    if (tid == 0) {   /* the CPU's order: one running sum */
        const float a = A[h];
        float run = 0.0f;
        for (int t = 0; t < nt; t++) {
            run += sdt[t] * a;
            scs[t] = run;
        }
        for (int t = nt; t < SC_L; t++) scs[t] = run;
    }
    __syncthreads();
    if (tid < SC_L) {
        sw[tid] = tid < nt ? sc_decay(scs[nt - 1] - scs[tid]) * sdt[tid] : 0.0f;
        const int64_t o = ((int64_t)c * Hm + h) * SC_L + tid;
        dtc[o] = sdt[tid];
        csc[o] = scs[tid];
    }
    __syncthreads();
    for (int i = tid; i < SC_L * Pp; i += SC_THREADS) {
        const int t = i / Pp, p = i - t * Pp;
        xs[i] = t < nt && p < P ? sw[t] * xbc[(int64_t)(t0 + t) * xbc_stride + (int64_t)h * P + p] : 0.0f;
    }
    for (int i = tid; i < SC_L * Np; i += SC_THREADS) {
        const int t = i / Np, k = i - t * Np;
        bs[i] = t < nt && k < N ? xbc[(int64_t)(t0 + t) * xbc_stride + I + (int64_t)g * N + k] : 0.0f;
    }
    __syncthreads();
    const int TN = Np / 4;
    float *out = st + ((int64_t)c * Hm + h) * P * N;
    for (int tile = tid; tile < (Pp / 4) * TN; tile += SC_THREADS) {
        const int p0 = tile / TN * 4, k0 = tile % TN * 4;
        float acc[4][4] = {};
        for (int t = 0; t < nt; t++)
            sc_fma4(acc, *(const float4 *)&xs[t * Pp + p0], *(const float4 *)&bs[t * Np + k0]);
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (p0 + r < P && k0 + q < N) out[(int64_t)(p0 + r) * N + k0 + q] = acc[r][q];
    }
}

/* Entry e (blockIdx.x · 256 + thread) of head h's [P, N] state through the chunks in order:
 * each chunk's slot of st gets the state the chunk starts from, state the final one. */
__global__ void __launch_bounds__(SC_THREADS)
ssd_state_pass_kernel(float *st, const float *csc, int chunks, int Hm, int PN, float *state) {
    pdl_enter();
    const int h = blockIdx.y;
    const int64_t e = (int64_t)blockIdx.x * SC_THREADS + threadIdx.x, cstride = (int64_t)Hm * PN;
    if (e >= PN) return;
    float *slot = st + (int64_t)h * PN + e;
    float s = state[(int64_t)h * PN + e], next = slot[0];
    for (int c = 0; c < chunks; c++) {
        const float term = next;
        if (c + 1 < chunks) next = slot[(c + 1) * cstride];
        slot[c * cstride] = s;
        s = __fadd_rn(__fmul_rn(sc_decay(csc[((int64_t)c * Hm + h) * SC_L + SC_L - 1]), s), term);
    }
    state[(int64_t)h * PN + e] = s;
}

/* y of chunk c (blockIdx.x), head h (blockIdx.y), from the state it starts from (st[c, h]).
 * Shared memory: Cᵀ [Np, SC_LT], Bᵀ [Np, SC_LT] then that state transposed [Np, Pp + 4],
 * Mᵀ [SC_L, SC_LT] (M[t][u] = (C_t·B_u) e^{cs_t - cs_u} dt_u, u <= t), x [SC_L, Pp], cs, dt. */
__global__ void __launch_bounds__(SC_THREADS)
ssd_chunk_out_kernel(float *y, const float *xbc, int xbc_stride, int n, int Hm, int P, int G, int N, const float *D,
                     const float *dtc, const float *csc, const float *st) {
    pdl_enter();
    extern __shared__ float4 sc_sm4[];
    float *sm = (float *)sc_sm4;
    const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int Pp = (P + 3) & ~3, Np = (N + 3) & ~3, SP = Pp + 4, I = Hm * P, g = h / (Hm / G);
    const int t0 = c * SC_L, nt = n - t0 < SC_L ? n - t0 : SC_L;
    const int LT = SC_LT, R = LT > SP ? LT : SP;
    float *ct = sm, *bt = ct + Np * SC_LT, *sp = bt, *mt = bt + Np * R, *xs = mt + SC_L * SC_LT, *scs = xs + SC_L * Pp,
          *sdt = scs + SC_L;
    if (tid < SC_L) {
        const int64_t o = ((int64_t)c * Hm + h) * SC_L + tid;
        scs[tid] = csc[o];
        sdt[tid] = dtc[o];
    }
    for (int i = tid; i < SC_L * Np; i += SC_THREADS) {
        const int t = i / Np, k = i - t * Np;
        const float *row = xbc + (int64_t)(t0 + t) * xbc_stride + I;
        const int ok = t < nt && k < N;
        bt[k * SC_LT + t] = ok ? row[(int64_t)g * N + k] : 0.0f;
        ct[k * SC_LT + t] = ok ? row[(int64_t)(G + g) * N + k] : 0.0f;
    }
    for (int i = tid; i < SC_L * Pp; i += SC_THREADS) {
        const int t = i / Pp, p = i - t * Pp;
        xs[i] = t < nt && p < P ? xbc[(int64_t)(t0 + t) * xbc_stride + (int64_t)h * P + p] : 0.0f;
    }
    __syncthreads();
    /* Mᵀ, a 4x4 tile (rows t0.., columns u0..) per thread; tiles above the diagonal are 0 */
    for (int tile = tid; tile < (SC_L / 4) * (SC_L / 4); tile += SC_THREADS) {
        const int r0 = tile / (SC_L / 4) * 4, u0 = tile % (SC_L / 4) * 4;
        float acc[4][4] = {};
        if (u0 <= r0 && r0 < nt)
            for (int k = 0; k < Np; k++)
                sc_fma4(acc, *(const float4 *)&ct[k * SC_LT + r0], *(const float4 *)&bt[k * SC_LT + u0]);
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int t = r0 + r, u = u0 + q;
                mt[u * SC_LT + t] = u <= t && t < nt ? acc[r][q] * sc_decay(scs[t] - scs[u]) * sdt[u] : 0.0f;
            }
    }
    __syncthreads();
    const float *S0 = st + ((int64_t)c * Hm + h) * P * N;
    for (int i = tid; i < Np * Pp; i += SC_THREADS) {
        const int p = i / Np, k = i - p * Np;
        sp[k * SP + p] = p < P && k < N ? S0[(int64_t)p * N + k] : 0.0f;
    }
    __syncthreads();
    const int TP = Pp / 4;
    const float d = D[h];
    for (int tile = tid; tile < (SC_L / 4) * TP; tile += SC_THREADS) {
        const int r0 = tile / TP * 4, p0 = tile % TP * 4;
        if (r0 >= nt) continue;
        float off[4][4] = {}, in[4][4] = {};
        for (int k = 0; k < Np; k++)
            sc_fma4(off, *(const float4 *)&ct[k * SC_LT + r0], *(const float4 *)&sp[k * SP + p0]);
        const int ue = r0 + 4 < nt ? r0 + 4 : nt;
        for (int u = 0; u < ue; u++)
            sc_fma4(in, *(const float4 *)&mt[u * SC_LT + r0], *(const float4 *)&xs[u * Pp + p0]);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int t = r0 + r;
            if (t >= nt) break;
            const float et = sc_decay(scs[t]);
            float *yr = y + (int64_t)(t0 + t) * I + (int64_t)h * P;
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (p0 + q < P) yr[p0 + q] = et * off[r][q] + in[r][q] + d * xs[t * Pp + p0 + q];
        }
    }
}

static size_t sc_state_smem(int P, int N) {
    return ((size_t)SC_L * (((P + 3) & ~3) + ((N + 3) & ~3)) + 3 * SC_L) * sizeof(float);
}
static size_t sc_out_smem(int P, int N) {
    const size_t Pp = (size_t)((P + 3) & ~3), Np = (size_t)((N + 3) & ~3), LT = SC_LT, R = LT > Pp + 4 ? LT : Pp + 4;
    return (Np * LT + Np * R + SC_L * LT + SC_L * Pp + 2 * SC_L) * sizeof(float);
}

/* The chunked form, or 0 when it does not apply (its shared memory would not fit). */
static int ssd_chunked(cuda_be *cb, float *y, const float *xbc, int xbc_stride, const float *dt, int dt_stride,
                       int n, const ci_ssd *s, float *state) {
    static int set_state = 0, set_out = 0;
    const int Hm = s->n_heads, P = s->head_dim, N = s->d_state, chunks = (n + SC_L - 1) / SC_L;
    const size_t sm1 = sc_state_smem(P, N), sm3 = sc_out_smem(P, N);
    if (sm1 > 200 * 1024 || sm3 > 200 * 1024) return 0;
    if (!cb_smem_ok(cb, ssd_chunk_state_kernel, sm1, &set_state) || !cb_smem_ok(cb, ssd_chunk_out_kernel, sm3, &set_out))
        return 0;
    const size_t per = (size_t)chunks * Hm, PN = (size_t)P * N;
    float *w = (float *)cb_scratch_get(cb, &cb->ssd_work, (2 * per * SC_L + per * PN) * sizeof(float));
    if (!w) return 1;   /* cb_scratch_get recorded the failure */
    float *dtc = w, *csc = dtc + per * SC_L, *st = csc + per * SC_L;
    cb_launch(cb, ssd_chunk_state_kernel, dim3(chunks, Hm), dim3(SC_THREADS), sm1, xbc, xbc_stride, dt, dt_stride, n,
              Hm, P, s->n_groups, N, s->dt_min, s->dt_bias, s->A, dtc, csc, st);
    if (cb_launched(cb, "ssd_scan (chunk states)")) return 1;
    cb_launch(cb, ssd_state_pass_kernel, dim3((unsigned)((PN + SC_THREADS - 1) / SC_THREADS), Hm), dim3(SC_THREADS), 0,
              st, (const float *)csc, chunks, Hm, (int)PN, state);
    if (cb_launched(cb, "ssd_scan (state pass)")) return 1;
    cb_launch(cb, ssd_chunk_out_kernel, dim3(chunks, Hm), dim3(SC_THREADS), sm3, y, xbc, xbc_stride, n, Hm, P,
              s->n_groups, N, s->D, (const float *)dtc, (const float *)csc, (const float *)st);
    cb_launched(cb, "ssd_scan (chunk outputs)");
    return 1;
}

void cb_ssd_scan(cuda_be *cb, float *y, const float *xbc, int xbc_stride, const float *dt, int dt_stride, int n,
                 const ci_ssd *s, float *state, float *const *states, int chunked) {
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
    if (!states && chunked && cb->ssd_chunk && n >= SSD_CHUNK_MIN &&
        ssd_chunked(cb, y, xbc, xbc_stride, dt, dt_stride, n, s, state))
        return;
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
