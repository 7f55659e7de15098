/* deltanet.cu — the gated DeltaNet of Qwen3-Next / Qwen3.5 on the device (backend.h:
 * causal_conv, deltanet, deltanet_unfuse) and gated attention's output gates (split_halves,
 * sigmoid_mul, sigmoid_gate_add).
 *
 * causal_conv is two launches on the stream, as LFM2's shortconv (conv.cu): the outputs
 * (thread (c, t), the window read from the state and x on the fly; a chunk of one sequence:
 * thread (c, y) makes 8 tokens from a window of 8 + K - 1 registers), then the states' K-1
 * rows (row i reads window row m + i >= i of the old state before anything overwrites it).
 * A decode step (one row per sequence, or a one-row chunk; K <= 8) is one launch: thread
 * (c, t) owns channel c of row t's state, writes the output, then the shifted state.
 *
 * deltanet, a decode step or a short prompt, is two launches (three for a prompt: first the
 * per-token norms and gates of all its tokens at once, deltanet_prep_kernel). The
 * recurrence: the rows of a head's state S [dv, dk] are independent given the token's q, k,
 * beta and g, so a warp per (value head, 2 rows of S, sequence) holds its rows in registers
 * for the whole call (read once, written once) and runs the tokens one by one: the q / k L2
 * norms, beta and the decay (each warp computes them itself, so the token loop has no block
 * barrier), the update and o = S q (lanes across dk) into the op's scratch. Then the output
 * gate (RMSNorm of o over dv, times norm_w, times silu(z)) into z, a block per (head, row).
 * A batch step has one token per sequence, its S found through the table.
 *
 * A prompt of at least cb->dn_chunk tokens (CB_DN_CHUNK, CINFER_CUDA_DN_CHUNK) takes the
 * chunked (UT transform) form of the CPU instead, in chunks of 64 tokens and windows of 16
 * chunks: after the prep kernel, per window deltanet_wy_kernel (a block per (chunk, key
 * head): k.k, q.k, the triangular solve, W, U0, the decay-masked P, all that does not need
 * the state, into cb->dn_work) and deltanet_state_kernel (a block per (value head, 32 rows
 * of S), the state carried across the window's chunks: U = U0 - W S^T, o = e^G Q S^T + P U,
 * S = e^{G_L} S + K^T diag(e^{G_L - G}) U), then the output gate. f32 FMA throughout. Decay
 * factors below e^-60 are 0 in both forms, as the CPU cuts them (no subnormals into the
 * state). */
#include "cuda_internal.h"
#include "conv_window.cuh"
#include "loaders.cuh"   /* warp_sum */
#include <math.h>

/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it. */
__device__ __forceinline__ float dn_block_sum(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();   /* sh may be reused by the next call */
    return v;
}

/* ---- causal_conv ---------------------------------------------------------------------- */

/* Window entry w of channel c for a sequence whose rows are x rows r0 .. and whose state is
 * st: w < K-1 is state row w, else x row r0 + w - (K-1). */
__device__ __forceinline__ float cc_win(const float *x, const float *st, int dim, int K, int r0, int w, int c) {
    return w < K - 1 ? st[(int64_t)w * dim + c] : x[(int64_t)(r0 + w - (K - 1)) * dim + c];
}

__global__ void causal_conv_out_kernel(float *y, const float *x, int dim, int K, const float *taps,
                                       const float *state, float *const *states, int tab_step) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= dim) return;
    const float *st = states ? states[(int64_t)t * tab_step] : state;
    const int r0 = states ? t : 0, tw = states ? 0 : t;
    float acc = 0.0f;
    for (int k = 0; k < K; k++)
        acc = __fadd_rn(acc, __fmul_rn(taps[(int64_t)k * dim + c], cc_win(x, st, dim, K, r0, tw + k, c)));
    y[(int64_t)t * dim + c] = acc / (1.0f + expf(-acc));
}

__global__ void causal_conv_state_kernel(const float *x, int n, int dim, int K, float *state, float *const *states,
                                         int tab_step) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (c >= dim) return;
    float *st = states ? states[(int64_t)r * tab_step] : state;
    const int m = states ? 1 : n, r0 = states ? r : 0;
    for (int i = 0; i < K - 1; i++) st[(int64_t)i * dim + c] = cc_win(x, st, dim, K, r0, m + i, c);
}

enum { CC_T = 8, CC_KMAX = 8 };   /* tokens a thread of a chunk; the largest K held in registers */

/* A chunk of one sequence (K <= CC_KMAX): thread (c, block y) makes tokens CC_T·y .. of
 * channel c from one window of CC_T + K - 1 entries in registers (each input read once);
 * the same sums in the same order as causal_conv_out_kernel. */
__global__ void causal_conv_rows_kernel(float *y, const float *x, int n, int dim, int K, const float *taps,
                                        const float *state) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t0 = blockIdx.y * CC_T;
    if (c >= dim) return;
    cv_rows<CC_T, CC_KMAX>(
        n, dim, K, c, t0, taps, [] { return 0.0f; }, [=](int w) { return cc_win(x, state, dim, K, 0, w, c); },
        [=](int t, float acc) { y[(int64_t)t * dim + c] = acc / (1.0f + expf(-acc)); });
}

/* One row per sequence (a decode step, or a one-row chunk), K <= CC_KMAX: thread (c, t) owns
 * channel c of its sequence's state: the output, then the shifted state, in one launch. */
__global__ void causal_conv_step_kernel(float *y, const float *x, int dim, int K, const float *taps, float *state,
                                        float *const *states, int tab_step) {
    pdl_enter();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= dim) return;
    float *st = states ? states[(int64_t)t * tab_step] : state;
    const int r0 = states ? t : 0;
    cv_step<CC_KMAX>(
        dim, K, c, taps, [] { return 0.0f; }, st, [=](int w) { return cc_win(x, st, dim, K, r0, w, c); },
        [=](float acc) { y[(int64_t)t * dim + c] = acc / (1.0f + expf(-acc)); });
}

void cb_causal_conv(cuda_be *cb, float *y, const float *x, int n, int dim, int K, const float *taps, float *state,
                    float *const *states, int tab_step) {
    if (n <= 0 || dim <= 0 || K <= 0) return;
    const int threads = 256, bx = (dim + threads - 1) / threads;
    if (K <= CC_KMAX && (states || n == 1)) {
        cb_launch(cb, causal_conv_step_kernel, dim3(bx, n), dim3(threads), 0, y, x, dim, K, taps, state, states,
                  tab_step);
        cb_launched(cb, "causal_conv step");
        return;
    }
    if (K <= CC_KMAX) {
        cb_launch(cb, causal_conv_rows_kernel, dim3(bx, (n + CC_T - 1) / CC_T), dim3(threads), 0, y, x, n, dim, K, taps,
                  (const float *)state);
        if (cb_launched(cb, "causal_conv") || K < 2) return;
        cb_launch(cb, causal_conv_state_kernel, dim3(bx, 1), dim3(threads), 0, x, n, dim, K, state, states, tab_step);
        cb_launched(cb, "causal_conv state");
        return;
    }
    cb_launch(cb, causal_conv_out_kernel, dim3(bx, n), dim3(threads), 0, y, x, dim, K, taps, (const float *)state,
              states, tab_step);
    if (cb_launched(cb, "causal_conv") || K < 2) return;
    cb_launch(cb, causal_conv_state_kernel, dim3(bx, states ? n : 1), dim3(threads), 0, x, n, dim, K, state, states,
              tab_step);
    cb_launched(cb, "causal_conv state");
}

/* ---- deltanet ------------------------------------------------------------------------- */

/* A block: DN_WARPS warps, each over DN_WROWS rows of one head's state, its part of every
 * row (lane + 32 j, j < MAXJ: 4 for dk <= 128, DN_MAXJ for dk <= 256) in registers. The token loop is latency-bound
 * (a chain of warp sums per token), so few rows per warp and many warps: for hv = 32,
 * dv = 128 that is 2048 warps; a block's warps read the same q / k (one head) through L1. */
enum { DN_WARPS = 8, DN_WROWS = 2, DN_ROWS = DN_WARPS * DN_WROWS, DN_MAXJ = 8 };

__device__ __forceinline__ float dn_decay(float x) { return x < -60.0f ? 0.0f : expf(x); }
__device__ __forceinline__ float dn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* A lane's share of a token's q (row + qo), k (row + ko) and its warp's DN_WROWS values
 * (row + vo). */
template <int MAXJ>
__device__ __forceinline__ void dn_load(const float *row, int qo, int ko, int vo, int dk, int rows, int lane,
                                        float (&q)[MAXJ], float (&k)[MAXJ], float (&v)[DN_WROWS]) {
#pragma unroll
    for (int j = 0; j < MAXJ; j++) {
        const int c = lane + 32 * j;
        q[j] = c < dk ? row[qo + c] : 0.0f;
        k[j] = c < dk ? row[ko + c] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < DN_WROWS; r++) v[r] = r < rows ? row[vo + r] : 0.0f;
}

/* The recurrence: grid (hv, ceil(dv / DN_ROWS), 1) for a chunk of n tokens of one sequence
 * (S = state), (hv, ceil(dv / DN_ROWS), n) for a batch step (row t's S at
 * states[t * tab_step]). Rows of S are independent given q, k, beta and g, so each warp
 * keeps its DN_WROWS rows in registers for the whole call (read once, written once),
 * computes the token's q / k norms and gates itself (warp sums only: no block barrier in
 * the token loop), and writes its rows of o [n, hv*dv]. */
template <int MAXJ, bool PREP>
__global__ void __launch_bounds__(DN_WARPS * 32)
deltanet_kernel(float *o, const float *mix, const float *bb, const float *aa, const float *kqs, int n, ci_deltanet d,
                float *state, float *const *states, int tab_step) {
    pdl_enter();
    const int hk = d.hk, hv = d.hv, dk = d.dk, dv = d.dv, h = blockIdx.x, kh = h / (hv / hk);
    const int KD = hk * dk, C = 2 * KD + hv * dv, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i0 = blockIdx.y * DN_ROWS + warp * DN_WROWS;
    if (i0 >= dv) return;
    const int rows = dv - i0 < DN_WROWS ? dv - i0 : DN_WROWS;
    const int t0 = states ? blockIdx.z : 0, t1 = states ? blockIdx.z + 1 : n;
    float *Sg = (states ? states[(int64_t)blockIdx.z * tab_step] : state) + ((size_t)h * dv + i0) * dk;
    float S[DN_WROWS][MAXJ];
#pragma unroll
    for (int r = 0; r < DN_WROWS; r++)
#pragma unroll
        for (int j = 0; j < MAXJ; j++) {
            const int c = lane + 32 * j;
            S[r][j] = r < rows && c < dk ? Sg[(size_t)r * dk + c] : 0.0f;
        }
    const float qscale = 1.0f / sqrtf((float)dk), negA = d.neg_A[h], dtb = d.dt_bias[h];
    /* token t + 1's inputs are loaded while token t is computed (the loop is latency-bound) */
    float qn[MAXJ], kn[MAXJ], vn[DN_WROWS], bn = 0.0f, an = 0.0f, kqn = 0.0f;
    dn_load(mix + (int64_t)t0 * C, kh * dk, KD + kh * dk, 2 * KD + h * dv + i0, dk, rows, lane, qn, kn, vn);
    bn = bb[(int64_t)t0 * hv + h];
    an = aa[(int64_t)t0 * hv + h];
    if (PREP) kqn = kqs[(int64_t)t0 * hk + kh];
    for (int t = t0; t < t1; t++) {
        float q[MAXJ], k[MAXJ], v[DN_WROWS], sq = 0.0f, sk = 0.0f;
        const float bt = bn, at = an, kqt = kqn;
#pragma unroll
        for (int j = 0; j < MAXJ; j++) {
            q[j] = qn[j];
            k[j] = kn[j];
        }
#pragma unroll
        for (int r = 0; r < DN_WROWS; r++) v[r] = vn[r];
        if (t + 1 < t1) {
            dn_load(mix + (int64_t)(t + 1) * C, kh * dk, KD + kh * dk, 2 * KD + h * dv + i0, dk, rows, lane, qn, kn, vn);
            bn = bb[(int64_t)(t + 1) * hv + h];
            an = aa[(int64_t)(t + 1) * hv + h];
            if (PREP) kqn = kqs[(int64_t)(t + 1) * hk + kh];
        }
        float beta, eg, kq;
        if (PREP) {   /* deltanet_prep_kernel normed q, k and left beta, e^g and k.q */
            beta = bt;
            eg = at;
            kq = kqt;
        } else {
#pragma unroll
            for (int j = 0; j < MAXJ; j++) {
                sq += q[j] * q[j];
                sk += k[j] * k[j];
            }
            sq = warp_sum(sq);
            sk = warp_sum(sk);
            const float iq = 1.0f / sqrtf(sq + 1e-6f) * qscale, ik = 1.0f / sqrtf(sk + 1e-6f);
            kq = 0.0f;
#pragma unroll
            for (int j = 0; j < MAXJ; j++) {
                q[j] *= iq;
                k[j] *= ik;
                kq += k[j] * q[j];
            }
            kq = warp_sum(kq);
            beta = 1.0f / (1.0f + expf(-bt));
            eg = dn_decay(negA * dn_softplus(at + dtb));
        }
        float *orow = o + (int64_t)t * hv * dv + (size_t)h * dv + i0;
        /* row r: with S' = e^g S, delta = beta (v - S' k), S'' = S' + delta kᵀ, o = S'' q */
#pragma unroll
        for (int r = 0; r < DN_WROWS; r++) {
            if (r >= rows) break;   /* uniform in the warp */
            float a = 0.0f, b = 0.0f;
#pragma unroll
            for (int j = 0; j < MAXJ; j++) {
                a += S[r][j] * k[j];
                b += S[r][j] * q[j];
            }
            a = warp_sum(a);
            b = warp_sum(b);
            const float del = beta * (v[r] - eg * a);
#pragma unroll
            for (int j = 0; j < MAXJ; j++) S[r][j] = eg * S[r][j] + del * k[j];
            if (lane == 0) orow[r] = eg * b + del * kq;
        }
    }
#pragma unroll
    for (int r = 0; r < DN_WROWS; r++)
#pragma unroll
        for (int j = 0; j < MAXJ; j++) {
            const int c = lane + 32 * j;
            if (r < rows && c < dk) Sg[(size_t)r * dk + c] = S[r][j];
        }
}

/* A prompt's per-token work that does not need the state, for all its tokens at once (n > 1):
 * grid (ceil(hk / DN_WARPS), n), warp w of block x L2-normalises key head g = x DN_WARPS + w
 * of token t in mix (q also by dk^-0.5) and writes kq[t, g] = k.q; block 0 turns token t's
 * b and a into beta and the decay factor e^g (logg: the log decay g itself, for the chunked
 * form). The recurrence then only streams them. */
__global__ void deltanet_prep_kernel(float *mix, float *bb, float *aa, float *kq, ci_deltanet d, int logg) {
    pdl_enter();
    const int hk = d.hk, hv = d.hv, dk = d.dk, KD = hk * dk, C = 2 * KD + hv * d.dv, t = blockIdx.y;
    const int lane = threadIdx.x & 31, g = blockIdx.x * DN_WARPS + (threadIdx.x >> 5);
    if (blockIdx.x == 0)
        for (int h = threadIdx.x; h < hv; h += blockDim.x) {
            float *pb = bb + (int64_t)t * hv + h, *pa = aa + (int64_t)t * hv + h;
            *pb = 1.0f / (1.0f + expf(-*pb));
            const float g = d.neg_A[h] * dn_softplus(*pa + d.dt_bias[h]);
            *pa = logg ? g : dn_decay(g);
        }
    if (g >= hk) return;
    float *q = mix + (int64_t)t * C + (size_t)g * dk, *k = q + KD;
    float sq = 0.0f, sk = 0.0f;
    for (int c = lane; c < dk; c += 32) {
        sq += q[c] * q[c];
        sk += k[c] * k[c];
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    const float iq = 1.0f / sqrtf(sq + 1e-6f) * (1.0f / sqrtf((float)dk)), ik = 1.0f / sqrtf(sk + 1e-6f);
    float s = 0.0f;
    for (int c = lane; c < dk; c += 32) {
        const float a = q[c] * iq, b = k[c] * ik;
        q[c] = a;
        k[c] = b;
        s += b * a;
    }
    s = warp_sum(s);
    if (lane == 0) kq[(int64_t)t * hk + g] = s;
}

/* ---- deltanet: the chunked (UT transform) form for a prompt --------------------------- */

/* The math is the CPU's (deltanet_cpu.c's head comment): in a chunk of 64 tokens with
 * cumulative log decay G_i (from the chunk's start), T = (I + A)^-1 with A_ij = beta_i
 * e^{G_i - G_j} k_i.k_j (j < i), W = T diag(beta e^G) K, U0 = T diag(beta) V, P_ij =
 * e^{G_i - G_j} q_i.k_j (j <= i); then with the state S0 at the chunk's start
 *   U = U0 - W S0^T,   O = diag(e^G) Q S0^T + P U,   S = e^{G_L} S0 + U^T diag(e^{G_L - G}) K.
 * Every factor is formed as e^x of a difference of G (summed in double, so a chunk whose
 * decay reaches -1000 keeps its near-diagonal factors to f32 rounding), x < -60 giving 0:
 * no chunk has to end early as on the CPU (whose e^{G_i} e^{-G_j} would overflow).
 * All of it is f32 FMA (SIMT): the triangular solve is sensitive to operand rounding.
 *
 * A window of up to DN_WIN chunks is two launches: deltanet_wy_kernel, a block per (chunk,
 * key head), everything that does not need the state (T, W, U0, P, the decay factors) into
 * cb->dn_work; then deltanet_state_kernel, a block per (32 rows of S, value head), carrying
 * its rows of S across the window's chunks (rows of S are independent) and writing o. The
 * window bounds the scratch (~50 MB at the Qwen3.5 dims, about the H200's L2) whatever n is. */
enum {
    DN_CL = CI_DN_CHUNK,    /* tokens a chunk (64: the tilings below assume it) */
    DN_CT = 256,            /* threads of both kernels: 8 warps */
    DN_CR = 32,             /* rows of S a state block carries */
    DN_WIN = 16,            /* chunks a window */
    DN_CK_MAX = 128,        /* the largest dk of the chunked form (the state block's shared memory) */
    DN_LDC = DN_CL + 4,     /* row stride of the [., 64] tiles in shared memory (16-byte rows) */
    DN_LDA = 2 * DN_CL + 4, /* the state block's W^T | Q^T rows */
    DN_LDR = DN_CR + 4      /* the state block's [., 32] tiles */
};
static_assert(DN_CL == 64, "the chunk tilings assume 64 tokens");

/* The scratch of one window (nwc chunks; offsets (head * nwc + chunk) * tile): */
struct dn_chunk_bufs {
    float *wt;   /* [hv][nwc][dk][64]  W^T */
    float *u0;   /* [hv][nwc][64][dv]  U0 */
    float *pt;   /* [hv][nwc][64][64]  P^T (zero above i = j) */
    float *qt;   /* [hk][nwc][dk][64]  Q^T (normed q; the padding rows 0) */
    float *eg;   /* [hv][nwc][128]     e^{G_i}, then e^{G_L - G_j} */
};

__host__ __device__ static inline int dn_pad32(int x) { return (x + 31) & ~31; }
__host__ __device__ static inline int dn_pad16(int x) { return (x + 15) & ~15; }
__host__ __device__ static inline int dn_imax(int a, int b) { return a > b ? a : b; }

/* floats of deltanet_wy_kernel's shared memory: K^T / K, Q^T / V, A / T' (beta e^G), T^T /
 * T' (beta), e^G, e^{G_L - G}, beta, then G as 64 doubles */
__host__ __device__ static inline int dn_wy_floats(int dk, int dv) {
    const int dkp = dn_pad32(dk), dvp = dn_pad16(dv);
    return dn_imax(dkp * DN_LDC, DN_CL * (dkp + 4)) + dn_imax(dkp * DN_LDC, DN_CL * (dvp + 4)) + 2 * DN_CL * DN_LDC +
           3 * DN_CL + 2 * DN_CL;
}
/* floats of deltanet_state_kernel's shared memory: W^T | Q^T, S^T, K, P^T, U0, U, U', e^G Q S^T, the factors */
__host__ __device__ static inline int dn_state_floats(int dk) {
    const int dkp = dn_pad32(dk);
    return dkp * DN_LDA + dkp * DN_LDR + DN_CL * (dkp + 4) + DN_CL * DN_LDC + 4 * DN_CL * DN_LDR + 2 * DN_CL;
}

/* acc[r][c] += a[r] b[c] over p in [p0, p1): a = A[p * lda ..] (TM floats), b = B[p * ldb ..]
 * (4 floats), both 16-byte (TM 2: 8-byte) aligned in shared memory */
template <int TM>
__device__ __forceinline__ void dn_tile(float (&acc)[TM][4], const float *A, int lda, const float *B, int ldb, int p0,
                                        int p1) {
#pragma unroll 4
    for (int p = p0; p < p1; p++) {
        float a[TM];
        if constexpr (TM == 4) {
            const float4 v = *(const float4 *)(A + p * lda);
            a[0] = v.x; a[1] = v.y; a[2] = v.z; a[3] = v.w;
        } else {
            const float2 v = *(const float2 *)(A + p * lda);
            a[0] = v.x; a[1] = v.y;
        }
        const float4 b = *(const float4 *)(B + p * ldb);
#pragma unroll
        for (int r = 0; r < TM; r++) {
            acc[r][0] = fmaf(a[r], b.x, acc[r][0]);
            acc[r][1] = fmaf(a[r], b.y, acc[r][1]);
            acc[r][2] = fmaf(a[r], b.z, acc[r][2]);
            acc[r][3] = fmaf(a[r], b.w, acc[r][3]);
        }
    }
}

/* Everything of a chunk that does not need the state: grid (chunks of the window, hk), a
 * block per key head, its products k.k and q.k computed once for its hv / hk value heads.
 * Thread tiles of 4 x 4 outputs; a warp covers 8 x 4 tiles (32 x 16 outputs), so a step of
 * a product loads 8 distinct float4 of one operand and 4 of the other. Per value head: the
 * decay factors, A (shared memory) and P^T (scratch); T = (I + A)^-1 by forward elimination,
 * 64 steps, each thread keeping its 4 x 4 tile of T in registers (step m publishes row m,
 * final by then, and every row below takes its multiple of it: the CPU's order of terms);
 * then W^T = K^T (T diag(beta e^G))^T and U0 = T diag(beta) V into the scratch. mix holds
 * normed q / k (deltanet_prep_kernel), bb beta and aa the log decay g. */
__global__ void __launch_bounds__(DN_CT, 2)
deltanet_wy_kernel(const float *mix, const float *bb, const float *aa, int t0, int n, ci_deltanet d, dn_chunk_bufs sb) {
    pdl_enter();
    extern __shared__ float4 dn_smem[];
    const int hk = d.hk, hv = d.hv, dk = d.dk, dv = d.dv, r = hv / hk, kh = blockIdx.y, c = blockIdx.x, nwc = gridDim.x;
    const int KD = hk * dk, C = 2 * KD + hv * dv, dkp = dn_pad32(dk), dvp = dn_pad16(dv), ldk = dkp + 4, ldv = dvp + 4;
    const int tc0 = t0 + c * DN_CL, L = n - tc0 < DN_CL ? n - tc0 : DN_CL;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float *ks = (float *)dn_smem;                               /* K^T [dkp][DN_LDC], then K [64][ldk] */
    float *qs = ks + dn_imax(dkp * DN_LDC, DN_CL * ldk);        /* Q^T [dkp][DN_LDC], then V [64][ldv] */
    float *as = qs + dn_imax(dkp * DN_LDC, DN_CL * ldv);        /* A [64][DN_LDC], then (T diag(beta e^G))^T */
    float *ts = as + DN_CL * DN_LDC;                            /* T^T, then (T diag(beta))^T */
    float *eg = ts + DN_CL * DN_LDC, *ed = eg + DN_CL, *bs = ed + DN_CL;
    double *gd = (double *)(bs + DN_CL);                        /* G_i */
    const float *qrow = mix + (int64_t)tc0 * C + (size_t)kh * dk, *krow = qrow + KD;

    /* K^T and Q^T, zero past the chunk and past dk; a warp reads 4 rows x 8 floats and
     * writes 8 rows x 4 floats of the transposes (no bank conflicts at stride 68) */
    for (int e = tid; e < DN_CL * dkp; e += DN_CT) {
        const int blk = e >> 5, l = e & 31, i = (blk & 15) * 4 + (l >> 3), k = (blk >> 4) * 8 + (l & 7);
        const bool ok = i < L && k < dk;
        ks[k * DN_LDC + i] = ok ? krow[(int64_t)i * C + k] : 0.0f;
        qs[k * DN_LDC + i] = ok ? qrow[(int64_t)i * C + k] : 0.0f;
    }
    __syncthreads();
    /* k.k and q.k: warp w takes tiles rows 32 (w & 1) .., columns 16 (w >> 1) ..; the warps
     * wholly above the diagonal keep zeros */
    const int wbm = warp & 1, wbn = warp >> 1, i0 = (wbm * 8 + (lane & 7)) * 4, j0 = (wbn * 4 + (lane >> 3)) * 4;
    float kk[4][4], qk[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) kk[a][b] = qk[a][b] = 0.0f;
    if (wbn * 16 <= wbm * 32 + 31) {
        dn_tile<4>(kk, ks + i0, DN_LDC, ks + j0, DN_LDC, 0, dk);
        dn_tile<4>(qk, qs + i0, DN_LDC, ks + j0, DN_LDC, 0, dk);
    }
    /* Q^T for the state blocks, once per key head */
    float *qt = sb.qt + ((size_t)kh * nwc + c) * dk * DN_CL;
    for (int e = tid; e < dk * DN_CL; e += DN_CT) qt[e] = qs[(e >> 6) * DN_LDC + (e & 63)];
    __syncthreads();
    /* K rows (for W^T), zero past the chunk and past dk */
    for (int e = tid; e < DN_CL * dkp; e += DN_CT) {
        const int j = e / dkp, k = e - j * dkp;
        ks[j * ldk + k] = j < L && k < dk ? krow[(int64_t)j * C + k] : 0.0f;
    }
    for (int hj = 0; hj < r; hj++) {
        const int h = kh * r + hj;
        const size_t hc = (size_t)h * nwc + c;
        const float *vrow = mix + (int64_t)tc0 * C + 2 * KD + (size_t)h * dv;
        for (int e = tid; e < DN_CL * dvp; e += DN_CT) {
            const int j = e / dvp, v = e - j * dvp;
            qs[j * ldv + v] = j < L && v < dv ? vrow[(int64_t)j * C + v] : 0.0f;
        }
        if (tid < DN_CL) bs[tid] = tid < L ? bb[(int64_t)(tc0 + tid) * hv + h] : 0.0f;
        if (warp == 0) {   /* G by a scan over pairs of tokens, in double; g = 0 past the chunk */
            const float g0 = 2 * lane < L ? aa[(int64_t)(tc0 + 2 * lane) * hv + h] : 0.0f;
            const float g1 = 2 * lane + 1 < L ? aa[(int64_t)(tc0 + 2 * lane + 1) * hv + h] : 0.0f;
            const double s1 = (double)g0 + (double)g1;
            double x = s1;
            for (int o = 1; o < 32; o <<= 1) {
                const double y = __shfl_up_sync(0xffffffffu, x, o);
                if (lane >= o) x += y;
            }
            double ex = __shfl_up_sync(0xffffffffu, x, 1);
            if (lane == 0) ex = 0.0;
            gd[2 * lane] = ex + (double)g0;
            gd[2 * lane + 1] = x;
        }
        __syncthreads();
        if (tid < DN_CL) {
            const float e1 = dn_decay((float)gd[tid]), e2 = dn_decay((float)(gd[DN_CL - 1] - gd[tid]));
            eg[tid] = e1;
            ed[tid] = e2;
            sb.eg[hc * 2 * DN_CL + tid] = e1;
            sb.eg[hc * 2 * DN_CL + DN_CL + tid] = e2;
        }
        /* A (strictly below the diagonal) and P^T (on and below) from this thread's tiles */
        float *pt = sb.pt + hc * DN_CL * DN_CL;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int j = j0 + b;
            float pc[4];
#pragma unroll
            for (int a = 0; a < 4; a++) {
                const int i = i0 + a;
                const float f = j <= i ? dn_decay((float)(gd[i] - gd[j])) : 0.0f;
                as[i * DN_LDC + j] = j < i ? bs[i] * f * kk[a][b] : 0.0f;
                pc[a] = f * qk[a][b];
            }
            *(float4 *)(pt + j * DN_CL + i0) = make_float4(pc[0], pc[1], pc[2], pc[3]);
        }
        /* T = (I + A)^-1: after step m - 1 row m is final; step m publishes it (T^T's column m)
         * and every row i > m takes A_im times it */
        float t[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) t[a][b] = i0 + a == j0 + b ? 1.0f : 0.0f;
        for (int m = 0; m < DN_CL; m++) {
#pragma unroll
            for (int a = 0; a < 4; a++)
                if (i0 + a == m)
#pragma unroll
                    for (int b = 0; b < 4; b++) ts[(j0 + b) * DN_LDC + m] = t[a][b];
            __syncthreads();
            if (j0 <= m && i0 + 3 > m) {
                float tm[4];
#pragma unroll
                for (int b = 0; b < 4; b++) tm[b] = ts[(j0 + b) * DN_LDC + m];
#pragma unroll
                for (int a = 0; a < 4; a++)
                    if (i0 + a > m) {
                        const float am = as[(i0 + a) * DN_LDC + m];
#pragma unroll
                        for (int b = 0; b < 4; b++) t[a][b] = fmaf(-am, tm[b], t[a][b]);
                    }
            }
        }
        __syncthreads();
        /* (T diag(beta))^T into ts, (T diag(beta e^G))^T into as */
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const int j = j0 + b;
            const float fb = bs[j], fg = bs[j] * eg[j];
            *(float4 *)(ts + j * DN_LDC + i0) = make_float4(t[0][b] * fb, t[1][b] * fb, t[2][b] * fb, t[3][b] * fb);
            *(float4 *)(as + j * DN_LDC + i0) = make_float4(t[0][b] * fg, t[1][b] * fg, t[2][b] * fg, t[3][b] * fg);
        }
        __syncthreads();
        /* W^T [dk][64] = K^T (T diag(beta e^G))^T: warp blocks of 32 rows (k) x 16 columns (i);
         * T'^T[j][i] is 0 for j > i, so the sum stops at the block's last column */
        const int wmk = dkp / 32;
        float *wt = sb.wt + hc * dk * DN_CL;
        for (int wb = warp; wb < wmk * 4; wb += DN_CT / 32) {
            const int bm = wb % wmk, bn = wb / wmk, k0 = (bm * 8 + (lane & 7)) * 4, c0 = (bn * 4 + (lane >> 3)) * 4;
            float acc[4][4] = {};
            dn_tile<4>(acc, ks + k0, ldk, as + c0, DN_LDC, 0, 16 * (bn + 1));
#pragma unroll
            for (int a = 0; a < 4; a++)
                if (k0 + a < dk)
                    *(float4 *)(wt + (k0 + a) * DN_CL + c0) = make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
        }
        /* U0 [64][dv] = T diag(beta) V: warp blocks of 32 rows (i) x 16 columns (v) */
        const int wnv = dvp / 16;
        float *u0 = sb.u0 + hc * DN_CL * dv;
        for (int wb = warp; wb < 2 * wnv; wb += DN_CT / 32) {
            const int bm = wb & 1, bn = wb >> 1, r0 = (bm * 8 + (lane & 7)) * 4, c0 = (bn * 4 + (lane >> 3)) * 4;
            float acc[4][4] = {};
            dn_tile<4>(acc, ts + r0, DN_LDC, qs + c0, ldv, 0, 32 * (bm + 1));
            if (c0 < dv)
#pragma unroll
                for (int a = 0; a < 4; a++)
                    *(float4 *)(u0 + (r0 + a) * dv + c0) = make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
        }
        __syncthreads();   /* V, A and T are the next head's */
    }
}

/* Group 1 of chunk c's loads (needed first): W^T | Q^T, U0's columns v0.. and the factors. */
__device__ __forceinline__ void dn_load_g1(float *at, float *u0s, float *egs, const dn_chunk_bufs &sb, int h, int kh,
                                           int nwc, int c, int dk, int dv, int v0) {
    const int tid = threadIdx.x;
    const float *w = sb.wt + ((size_t)h * nwc + c) * dk * DN_CL, *q = sb.qt + ((size_t)kh * nwc + c) * dk * DN_CL;
    for (int e = tid; e < dk * 32; e += DN_CT) {
        const int k = e >> 5, p = e & 31;
        cb_cp16(at + k * DN_LDA + p * 4, p < 16 ? w + k * DN_CL + p * 4 : q + k * DN_CL + (p - 16) * 4, true);
    }
    const float *u = sb.u0 + ((size_t)h * nwc + c) * DN_CL * dv;
    for (int e = tid; e < DN_CL * (DN_CR / 4); e += DN_CT) {
        const int i = e >> 3, p = e & 7, v = v0 + p * 4;
        cb_cp16(u0s + i * DN_LDR + p * 4, v < dv ? u + (size_t)i * dv + v : u, v < dv);
    }
    if (tid < 2 * DN_CL / 4) cb_cp16(egs + tid * 4, sb.eg + ((size_t)h * nwc + c) * 2 * DN_CL + tid * 4, true);
}

/* Group 2 (needed after the state products): the chunk's K rows and P^T. */
__device__ __forceinline__ void dn_load_g2(float *kz, float *pz, const dn_chunk_bufs &sb, const float *mix, int C,
                                           int koff, int h, int nwc, int c, int tc0, int L, int dk, int ldk) {
    const int tid = threadIdx.x, pr = dk / 4;
    const float *k = mix + (int64_t)tc0 * C + koff;
    for (int e = tid; e < DN_CL * pr; e += DN_CT) {
        const int j = e / pr, p = e - j * pr;
        cb_cp16(kz + j * ldk + p * 4, j < L ? k + (int64_t)j * C + p * 4 : k, j < L);
    }
    const float *pp = sb.pt + ((size_t)h * nwc + c) * DN_CL * DN_CL;
    for (int e = tid; e < DN_CL * DN_CL / 4; e += DN_CT) {
        const int j = e >> 4, p = e & 15;
        cb_cp16(pz + j * DN_LDC + p * 4, pp + j * DN_CL + p * 4, true);
    }
}

/* The state's part, sequential over the window's chunks: grid (ceil(dv / 32), hv), a block
 * per 32 rows v0.. of a head's S (rows are independent), S^T [dk][32] in shared memory for
 * the whole window (read once, written once). Per chunk, with loads in two cp.async groups
 * (group 1 of chunk c + 1 runs under the products of c, group 2 under the next chunk's
 * state products):
 *   1. [W; Q] S^T [128, 32] (warp w: rows 32 (w & 3) .., columns 16 (w >> 2) ..): U = U0 -
 *      W S^T, U' = diag(e^{G_L - G}) U and e^G Q S^T into shared memory;
 *   2. O = e^G Q S^T + P U (2 x 4 tiles; a warp's sum stops at its last row) into o;
 *   3. S^T = e^{G_L} S^T + K^T U' (4 x 4 tiles).
 * Three barriers a chunk. */
__global__ void __launch_bounds__(DN_CT, 1)
deltanet_state_kernel(float *o, const float *mix, int t0, int n, int nwc, ci_deltanet d, dn_chunk_bufs sb,
                      float *state) {
    pdl_enter();
    extern __shared__ float4 dn_smem[];
    const int hk = d.hk, hv = d.hv, dk = d.dk, dv = d.dv, h = blockIdx.y, kh = h / (hv / hk), v0 = blockIdx.x * DN_CR;
    const int KD = hk * dk, C = 2 * KD + hv * dv, dkp = dn_pad32(dk), ldk = dkp + 4;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, rows = dv - v0 < DN_CR ? dv - v0 : DN_CR;
    float *at = (float *)dn_smem;          /* [dkp][DN_LDA]: W^T | Q^T */
    float *st = at + dkp * DN_LDA;         /* [dkp][DN_LDR]: S^T of rows v0.. */
    float *kz = st + dkp * DN_LDR;         /* [64][ldk]: K */
    float *pz = kz + DN_CL * ldk;          /* [64][DN_LDC]: P^T */
    float *u0s = pz + DN_CL * DN_LDC;      /* [64][DN_LDR]: U0 */
    float *us = u0s + DN_CL * DN_LDR;      /* U */
    float *up = us + DN_CL * DN_LDR;       /* U' = diag(e^{G_L - G}) U */
    float *xq = up + DN_CL * DN_LDR;       /* e^G Q S^T */
    float *egs = xq + DN_CL * DN_LDR;      /* e^G, e^{G_L - G} */
    float *S = state + ((size_t)h * dv + v0) * dk;
    /* the padding the copies never write stays 0; S^T from the state */
    for (int e = tid; e < dkp * DN_LDA; e += DN_CT) at[e] = 0.0f;
    for (int e = tid; e < DN_CL * ldk; e += DN_CT) kz[e] = 0.0f;
    for (int e = tid; e < dkp * DN_CR; e += DN_CT) {
        const int v = e / dkp, k = e - v * dkp;
        st[k * DN_LDR + v] = v < rows && k < dk ? S[(size_t)v * dk + k] : 0.0f;
    }
    __syncthreads();
    const int koff = KD + kh * dk;
    dn_load_g1(at, u0s, egs, sb, h, kh, nwc, 0, dk, dv, v0);
    cb_cp_commit();
    dn_load_g2(kz, pz, sb, mix, C, koff, h, nwc, 0, t0, n - t0 < DN_CL ? n - t0 : DN_CL, dk, ldk);
    cb_cp_commit();
    const int wbm = warp & 3, wbn = warp >> 2, c1 = (wbn * 4 + (lane >> 3)) * 4;
    const int i1 = (wbm * 8 + (lane & 7)) * 4, i2 = (wbm * 8 + (lane & 7)) * 2;
    for (int c = 0; c < nwc; c++) {
        const int tc0 = t0 + c * DN_CL;
        cb_cp_wait<1>();
        __syncthreads();
        /* 1. rows i1.. of [W; Q] S^T */
        {
            float acc[4][4] = {};
            dn_tile<4>(acc, at + i1, DN_LDA, st + c1, DN_LDR, 0, dk);
            if (wbm < 2) {   /* W rows (warp-uniform) */
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    const int i = i1 + a;
                    const float4 u0 = *(const float4 *)(u0s + i * DN_LDR + c1);
                    const float4 u = make_float4(u0.x - acc[a][0], u0.y - acc[a][1], u0.z - acc[a][2], u0.w - acc[a][3]);
                    const float f = egs[DN_CL + i];
                    *(float4 *)(us + i * DN_LDR + c1) = u;
                    *(float4 *)(up + i * DN_LDR + c1) = make_float4(f * u.x, f * u.y, f * u.z, f * u.w);
                }
            } else {
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    const int i = i1 + a - DN_CL;
                    const float f = egs[i];
                    *(float4 *)(xq + i * DN_LDR + c1) = make_float4(f * acc[a][0], f * acc[a][1], f * acc[a][2], f * acc[a][3]);
                }
            }
        }
        const float egl = egs[DN_CL - 1];
        __syncthreads();
        if (c + 1 < nwc) dn_load_g1(at, u0s, egs, sb, h, kh, nwc, c + 1, dk, dv, v0);
        cb_cp_commit();
        cb_cp_wait<1>();
        __syncthreads();
        /* 2. rows i2, i2 + 1 of O = e^G Q S^T + P U (P^T[j][i] = 0 for j > i) */
        {
            float acc[2][4];
#pragma unroll
            for (int a = 0; a < 2; a++) {
                const float4 x = *(const float4 *)(xq + (i2 + a) * DN_LDR + c1);
                acc[a][0] = x.x; acc[a][1] = x.y; acc[a][2] = x.z; acc[a][3] = x.w;
            }
            dn_tile<2>(acc, pz + i2, DN_LDC, us + c1, DN_LDR, 0, 16 * (wbm + 1));
            if (c1 < rows)
#pragma unroll
                for (int a = 0; a < 2; a++)
                    if (tc0 + i2 + a < n)
                        *(float4 *)(o + (int64_t)(tc0 + i2 + a) * hv * dv + (size_t)h * dv + v0 + c1) =
                            make_float4(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
        }
        /* 3. S^T = e^{G_L} S^T + K^T U' */
        for (int wb = warp; wb < (dkp / 32) * 2; wb += DN_CT / 32) {
            const int bm = wb % (dkp / 32), bn = wb / (dkp / 32), k0 = (bm * 8 + (lane & 7)) * 4, c0 = (bn * 4 + (lane >> 3)) * 4;
            float acc[4][4] = {};
            dn_tile<4>(acc, kz + k0, ldk, up + c0, DN_LDR, 0, DN_CL);
#pragma unroll
            for (int a = 0; a < 4; a++) {
                float4 *s = (float4 *)(st + (k0 + a) * DN_LDR + c0);
                const float4 v = *s;
                *s = make_float4(fmaf(egl, v.x, acc[a][0]), fmaf(egl, v.y, acc[a][1]), fmaf(egl, v.z, acc[a][2]),
                                 fmaf(egl, v.w, acc[a][3]));
            }
        }
        __syncthreads();
        if (c + 1 < nwc) {
            const int tn = tc0 + DN_CL;
            dn_load_g2(kz, pz, sb, mix, C, koff, h, nwc, c + 1, tn, n - tn < DN_CL ? n - tn : DN_CL, dk, ldk);
        }
        cb_cp_commit();
    }
    cb_cp_wait<0>();
    for (int e = tid; e < rows * dk; e += DN_CT) {
        const int v = e / dk, k = e - v * dk;
        S[(size_t)v * dk + k] = st[k * DN_LDR + v];
    }
}

/* The output gate, grid (hv, n): z = silu(z) * (o / rms(o) * norm_w) over each head's dv. */
__global__ void deltanet_gate_kernel(float *z, const float *o, ci_deltanet d) {
    pdl_enter();
    __shared__ float red[32];
    const int dv = d.dv;
    const int64_t off = ((int64_t)blockIdx.y * d.hv + blockIdx.x) * dv;
    const float *orow = o + off;
    float *zr = z + off;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dv; i += blockDim.x) ss += orow[i] * orow[i];
    ss = dn_block_sum(ss, red);
    const float sc = (float)(1.0 / sqrt((double)ss / (double)dv + (double)d.eps));
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float g = zr[i], on = orow[i] * sc * d.norm_w[i];
        zr[i] = g / (1.0f + expf(-g)) * on;
    }
}

/* Whether this call takes the chunked form: a prompt of one sequence, at least cb->dn_chunk
 * tokens, dims the tilings take (dk <= 128, dk and dv multiples of 4), 16-byte aligned rows. */
static int dn_chunked(const cuda_be *cb, int n, const ci_deltanet *d, const float *mix, const float *o,
                      float *const *states, int recurrent) {
    return !states && !recurrent && cb->dn_chunk > 0 && n >= cb->dn_chunk && n > 1 && d->dk <= DN_CK_MAX &&
           d->dk % 4 == 0 && d->dv % 4 == 0 && ((uintptr_t)mix & 15) == 0 && ((uintptr_t)o & 15) == 0;
}

/* The chunked form over the prompt's n tokens (mix / b / a already through the prep kernel
 * with logg), windows of DN_WIN chunks: o [n, hv*dv] and the final state. */
static void dn_chunk_run(cuda_be *cb, float *o, const float *mix, const float *b, const float *a, int n,
                         const ci_deltanet *d, float *state) {
    static int wy_set = 0, st_set = 0;
    const int hk = d->hk, hv = d->hv, dk = d->dk, dv = d->dv, nch = (n + DN_CL - 1) / DN_CL;
    const int nw = nch < DN_WIN ? nch : DN_WIN;
    const size_t wyb = (size_t)dn_wy_floats(dk, dv) * sizeof(float), stb = (size_t)dn_state_floats(dk) * sizeof(float);
    if (!cb_smem_ok(cb, deltanet_wy_kernel, wyb, &wy_set) || !cb_smem_ok(cb, deltanet_state_kernel, stb, &st_set)) {
        cb_fail_msg(cb, "deltanet (chunked): shared memory");
        return;
    }
    /* one window's products, each part a multiple of 64 floats */
    const size_t fwt = (size_t)hv * nw * dk * DN_CL, fu0 = (size_t)hv * nw * DN_CL * dv, fpt = (size_t)hv * nw * DN_CL * DN_CL;
    const size_t fqt = (size_t)hk * nw * dk * DN_CL, feg = (size_t)hv * nw * 2 * DN_CL;
    float *w = (float *)cb_scratch_get(cb, &cb->dn_work, (fwt + fu0 + fpt + fqt + feg) * sizeof(float));
    if (!w) return;
    for (int c0 = 0; c0 < nch; c0 += DN_WIN) {
        const int nwc = nch - c0 < DN_WIN ? nch - c0 : DN_WIN, t0 = c0 * DN_CL;
        /* the window's parts packed for its nwc chunks (the kernels index them by nwc) */
        dn_chunk_bufs sb;
        sb.wt = w;
        sb.u0 = sb.wt + (size_t)hv * nwc * dk * DN_CL;
        sb.pt = sb.u0 + (size_t)hv * nwc * DN_CL * dv;
        sb.qt = sb.pt + (size_t)hv * nwc * DN_CL * DN_CL;
        sb.eg = sb.qt + (size_t)hk * nwc * dk * DN_CL;
        cb_launch(cb, deltanet_wy_kernel, dim3(nwc, hk), dim3(DN_CT), wyb, mix, b, a, t0, n, *d, sb);
        if (cb_launched(cb, "deltanet chunk products")) return;
        cb_launch(cb, deltanet_state_kernel, dim3((dv + DN_CR - 1) / DN_CR, hv), dim3(DN_CT), stb, o, mix, t0, n, nwc,
                  *d, sb, state);
        if (cb_launched(cb, "deltanet chunk states")) return;
    }
}

void cb_deltanet(cuda_be *cb, float *z, float *mix, float *b, float *a, int n, const ci_deltanet *d, float *state,
                 float *const *states, int tab_step, int recurrent, float *o) {
    if (n <= 0) return;
    if (d->dk > 32 * DN_MAXJ) {
        cb_fail_msg(cb, "deltanet: key head dim above 256 (the kernel keeps a state row's share in registers)");
        return;
    }
    const int prep = !states && n > 1, chunked = dn_chunked(cb, n, d, mix, o, states, recurrent);
    float *kq = o + (size_t)n * d->hv * d->dv;   /* [n, hk] after o in the op's scratch */
    if (prep) {
        cb_launch(cb, deltanet_prep_kernel, dim3((d->hk + DN_WARPS - 1) / DN_WARPS, n), dim3(DN_WARPS * 32), 0, mix, b,
                  a, kq, *d, chunked);
        if (cb_launched(cb, "deltanet prep")) return;
    }
    if (chunked) {
        dn_chunk_run(cb, o, mix, b, a, n, d, state);
        if (cb->failed) return;
        cb_launch(cb, deltanet_gate_kernel, dim3(d->hv, n), dim3(d->dv >= 256 ? 256 : d->dv > 64 ? 128 : 32), 0, z,
                  (const float *)o, *d);
        cb_launched(cb, "deltanet gate");
        return;
    }
    const dim3 grid(d->hv, (d->dv + DN_ROWS - 1) / DN_ROWS, states ? n : 1), block(DN_WARPS * 32);
    const float *cm = mix, *cbb = b, *caa = a, *ckq = kq;
    if (d->dk <= 128 && prep)   /* a lane's share of a row in 4 registers (Qwen3-Next / Qwen3.5: dk = 128) */
        cb_launch(cb, deltanet_kernel<4, true>, grid, block, 0, o, cm, cbb, caa, ckq, n, *d, state, states, tab_step);
    else if (d->dk <= 128)
        cb_launch(cb, deltanet_kernel<4, false>, grid, block, 0, o, cm, cbb, caa, ckq, n, *d, state, states, tab_step);
    else if (prep)
        cb_launch(cb, deltanet_kernel<DN_MAXJ, true>, grid, block, 0, o, cm, cbb, caa, ckq, n, *d, state, states,
                  tab_step);
    else
        cb_launch(cb, deltanet_kernel<DN_MAXJ, false>, grid, block, 0, o, cm, cbb, caa, ckq, n, *d, state, states,
                  tab_step);
    if (cb_launched(cb, "deltanet")) return;
    cb_launch(cb, deltanet_gate_kernel, dim3(d->hv, n), dim3(d->dv >= 256 ? 256 : d->dv > 64 ? 128 : 32), 0, z,
              (const float *)o, *d);
    cb_launched(cb, "deltanet gate");
}

/* ---- deltanet_unfuse -------------------------------------------------------------------- */

__global__ void deltanet_unfuse_kernel(float *mix, float *z, float *b, float *a, const float *qkvz, const float *ba,
                                       ci_deltanet d) {
    pdl_enter();
    const int hk = d.hk, hv = d.hv, dk = d.dk, dv = d.dv, r = hv / hk, rv = r * dv;
    const int KD = hk * dk, VD = hv * dv, C = 2 * KD + VD, gw = 2 * dk + 2 * rv, t = blockIdx.y;
    const float *src = qkvz + (int64_t)t * (2 * KD + 2 * VD);
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C + VD + 2 * hv; c += gridDim.x * blockDim.x) {
        if (c < KD) mix[(int64_t)t * C + c] = src[(c / dk) * gw + c % dk];
        else if (c < 2 * KD) mix[(int64_t)t * C + c] = src[((c - KD) / dk) * gw + dk + (c - KD) % dk];
        else if (c < C) mix[(int64_t)t * C + c] = src[((c - 2 * KD) / rv) * gw + 2 * dk + (c - 2 * KD) % rv];
        else if (c < C + VD) z[(int64_t)t * VD + c - C] = src[((c - C) / rv) * gw + 2 * dk + rv + (c - C) % rv];
        else {
            int e = c - C - VD, h = e % hv, g = h / r, j = h % r;
            const float *bs = ba + (int64_t)t * 2 * hv + g * 2 * r;
            if (e < hv) b[(int64_t)t * hv + h] = bs[j];
            else a[(int64_t)t * hv + h] = bs[r + j];
        }
    }
}

void cb_deltanet_unfuse(cuda_be *cb, float *mix, float *z, float *b, float *a, const float *qkvz, const float *ba,
                        int n, const ci_deltanet *d) {
    if (n <= 0) return;
    const int total = 2 * d->hk * d->dk + 2 * d->hv * d->dv + 2 * d->hv, bx = (total + 255) / 256;
    cb_launch(cb, deltanet_unfuse_kernel, dim3(bx > 64 ? 64 : bx, n), dim3(256), 0, mix, z, b, a, qkvz, ba, *d);
    cb_launched(cb, "deltanet_unfuse");
}

/* ---- gates -------------------------------------------------------------------------------- */

__global__ void split_halves_kernel(float *lo, float *hi, const float *x, int64_t rows, int width) {
    pdl_enter();
    const int64_t count = rows * width;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / width, c = i % width;
        lo[i] = x[r * 2 * width + c];
        hi[i] = x[r * 2 * width + width + c];
    }
}

static int gate_blocks(int64_t count) {
    int64_t b = (count + 255) / 256;
    return (int)(b > 4096 ? 4096 : b < 1 ? 1 : b);
}

void cb_split_halves(cuda_be *cb, float *lo, float *hi, const float *x, int rows, int width) {
    if (rows <= 0 || width <= 0) return;
    cb_launch(cb, split_halves_kernel, dim3(gate_blocks((int64_t)rows * width)), dim3(256), 0, lo, hi, x, (int64_t)rows,
              width);
    cb_launched(cb, "split_halves");
}

__global__ void sigmoid_mul_kernel(float *y, const float *g, int64_t count) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        y[i] *= 1.0f / (1.0f + expf(-g[i]));
}

void cb_sigmoid_mul(cuda_be *cb, float *y, const float *g, int64_t count) {
    if (count <= 0) return;
    cb_launch(cb, sigmoid_mul_kernel, dim3(gate_blocks(count)), dim3(256), 0, y, g, count);
    cb_launched(cb, "sigmoid_mul");
}

__global__ void sigmoid_gate_add_kernel(float *y, const float *x, const float *g, int width) {
    pdl_enter();
    const int t = blockIdx.y;
    const float gw = g ? 1.0f / (1.0f + expf(-g[t])) : 1.0f;
    float *o = y + (int64_t)t * width;
    const float *v = x + (int64_t)t * width;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < width; i += gridDim.x * blockDim.x)
        o[i] = __fadd_rn(o[i], __fmul_rn(gw, v[i]));
}

void cb_sigmoid_gate_add(cuda_be *cb, float *y, const float *x, const float *g, int n, int width) {
    if (n <= 0 || width <= 0) return;
    const int bx = (width + 255) / 256;
    cb_launch(cb, sigmoid_gate_add_kernel, dim3(bx > 64 ? 64 : bx, n), dim3(256), 0, y, x, g, width);
    cb_launched(cb, "sigmoid_gate_add");
}
