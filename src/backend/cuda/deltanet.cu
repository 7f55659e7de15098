/* deltanet.cu — the gated DeltaNet of Qwen3-Next / Qwen3.5 on the device (backend.h:
 * causal_conv, deltanet, deltanet_unfuse) and gated attention's output gates (split_halves,
 * sigmoid_mul, sigmoid_gate_add).
 *
 * causal_conv is two launches on the stream, as LFM2's shortconv (conv.cu): the outputs
 * (thread (c, t), the window read from the state and x on the fly), then the states' K-1
 * rows (row i reads window row m + i >= i of the old state before anything overwrites it).
 *
 * deltanet is one launch: a block per (value head, sequence) holds that head's state S
 * [dv, dk] in shared memory for the whole call (read once, written once) and runs the
 * recurrence token by token: the q / k L2 norms, beta and the decay, the state update and
 * o = S q (a warp per state row, lanes across dk), then the output gate (RMSNorm over dv,
 * times norm_w, times silu(z)) into z. A chunk of one sequence loops over its tokens in the
 * block (the chunked WY form of the CPU is not used here: this is the first, plain form);
 * a batch step has one token per sequence, its S found through the table. Decay factors
 * below e^-60 are 0, as the CPU cuts them (no subnormals into the state). */
#include "cuda_internal.h"
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

__device__ __forceinline__ float dn_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
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
    for (int k = 0; k < K; k++) acc = __fadd_rn(acc, __fmul_rn(taps[(int64_t)k * dim + c], cc_win(x, st, dim, K, r0, tw + k, c)));
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

void cb_causal_conv(cuda_be *cb, float *y, const float *x, int n, int dim, int K, const float *taps, float *state,
                    float *const *states, int tab_step) {
    if (n <= 0 || dim <= 0 || K <= 0) return;
    const int threads = 256, bx = (dim + threads - 1) / threads;
    cb_launch(cb, causal_conv_out_kernel, dim3(bx, n), dim3(threads), 0, y, x, dim, K, taps, (const float *)state,
              states, tab_step);
    if (cb_launched(cb, "causal_conv") || K < 2) return;
    cb_launch(cb, causal_conv_state_kernel, dim3(bx, states ? n : 1), dim3(threads), 0, x, n, dim, K, state, states,
              tab_step);
    cb_launched(cb, "causal_conv state");
}

/* ---- deltanet ------------------------------------------------------------------------- */

enum { DN_THREADS = 256 };

__device__ __forceinline__ float dn_decay(float x) { return x < -60.0f ? 0.0f : expf(x); }
__device__ __forceinline__ float dn_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* grid (hv, 1) for a chunk of n tokens of one sequence (S = state), (hv, n) for a batch
 * step (row t's S at states[t * tab_step]); shared: S [dv*dk], q, k [dk], v, o [dv], 32. */
__global__ void deltanet_kernel(float *z, const float *mix, const float *bb, const float *aa, int n, ci_deltanet d,
                                float *state, float *const *states, int tab_step) {
    pdl_enter();
    extern __shared__ float sm[];
    const int hk = d.hk, hv = d.hv, dk = d.dk, dv = d.dv, h = blockIdx.x, kh = h / (hv / hk);
    const int KD = hk * dk, C = 2 * KD + hv * dv;
    float *S = sm, *q = S + (size_t)dv * dk, *k = q + dk, *v = k + dk, *o = v + dv, *red = o + dv;
    const int t0 = states ? blockIdx.y : 0, t1 = states ? blockIdx.y + 1 : n;
    float *Sg = (states ? states[(int64_t)blockIdx.y * tab_step] : state) + (size_t)h * dv * dk;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    for (int i = tid; i < dv * dk; i += blockDim.x) S[i] = Sg[i];
    const float qscale = 1.0f / sqrtf((float)dk), negA = d.neg_A[h], dtb = d.dt_bias[h];
    for (int t = t0; t < t1; t++) {
        const float *row = mix + (int64_t)t * C;
        float sq = 0.0f, sk = 0.0f;
        for (int i = tid; i < dk; i += blockDim.x) {
            float a = row[kh * dk + i], b = row[KD + kh * dk + i];
            q[i] = a;
            k[i] = b;
            sq += a * a;
            sk += b * b;
        }
        for (int i = tid; i < dv; i += blockDim.x) v[i] = row[2 * KD + h * dv + i];
        sq = dn_block_sum(sq, red);
        sk = dn_block_sum(sk, red);
        const float iq = 1.0f / sqrtf(sq + 1e-6f) * qscale, ik = 1.0f / sqrtf(sk + 1e-6f);
        float kq = 0.0f;
        for (int i = tid; i < dk; i += blockDim.x) {
            q[i] *= iq;
            k[i] *= ik;
            kq += k[i] * q[i];
        }
        kq = dn_block_sum(kq, red);   /* its syncs also publish q, k */
        const float beta = 1.0f / (1.0f + expf(-bb[(int64_t)t * hv + h]));
        const float eg = dn_decay(negA * dn_softplus(aa[(int64_t)t * hv + h] + dtb));
        /* a warp per state row i: with S' = e^g S, delta = beta (v - S' k), S'' = S' + delta kᵀ, o = S'' q */
        for (int i = warp; i < dv; i += nwarps) {
            float *Si = S + (size_t)i * dk;
            float a = 0.0f, b = 0.0f;
            for (int j = lane; j < dk; j += 32) {
                a += Si[j] * k[j];
                b += Si[j] * q[j];
            }
            a = dn_warp_sum(a);
            b = dn_warp_sum(b);
            const float del = beta * (v[i] - eg * a);
            for (int j = lane; j < dk; j += 32) Si[j] = eg * Si[j] + del * k[j];
            if (lane == 0) o[i] = eg * b + del * kq;
        }
        __syncthreads();
        /* the output gate: z = silu(z) * (o / rms(o) * norm_w) */
        float ss = 0.0f;
        for (int i = tid; i < dv; i += blockDim.x) ss += o[i] * o[i];
        ss = dn_block_sum(ss, red);
        const float sc = (float)(1.0 / sqrt((double)ss / (double)dv + (double)d.eps));
        float *zr = z + (int64_t)t * hv * dv + (size_t)h * dv;
        for (int i = tid; i < dv; i += blockDim.x) {
            float g = zr[i], on = o[i] * sc * d.norm_w[i];
            zr[i] = g / (1.0f + expf(-g)) * on;
        }
        __syncthreads();   /* q, k, v, o are refilled by the next token */
    }
    for (int i = tid; i < dv * dk; i += blockDim.x) Sg[i] = S[i];
}

static int dn_smem_set;

void cb_deltanet(cuda_be *cb, float *z, const float *mix, const float *b, const float *a, int n, const ci_deltanet *d,
                 float *state, float *const *states, int tab_step) {
    if (n <= 0) return;
    const size_t smem = ((size_t)d->dv * d->dk + 2 * (size_t)d->dk + 2 * (size_t)d->dv + 32) * sizeof(float);
    if (!cb_smem_ok(cb, deltanet_kernel, smem, &dn_smem_set)) {
        if (!cb->failed) cb_fail_msg(cb, "deltanet: a value head's state does not fit in shared memory");
        return;
    }
    cb_launch(cb, deltanet_kernel, dim3(d->hv, states ? n : 1), dim3(DN_THREADS), smem, z, mix, b, a, n, *d, state,
              states, tab_step);
    cb_launched(cb, "deltanet");
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
