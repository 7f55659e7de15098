/* deltanet.cu — the gated DeltaNet of Qwen3-Next / Qwen3.5 on the device (backend.h:
 * causal_conv, deltanet, deltanet_unfuse) and gated attention's output gates (split_halves,
 * sigmoid_mul, sigmoid_gate_add).
 *
 * causal_conv is two launches on the stream, as LFM2's shortconv (conv.cu): the outputs
 * (thread (c, t), the window read from the state and x on the fly), then the states' K-1
 * rows (row i reads window row m + i >= i of the old state before anything overwrites it).
 *
 * deltanet is two launches (three for a prompt: first the per-token norms and gates of all
 * its tokens at once, deltanet_prep_kernel). The recurrence: the rows of a head's state S [dv, dk] are
 * independent given the token's q, k, beta and g, so a warp per (value head, 2 rows of S,
 * sequence) holds its rows in registers for the whole call (read once, written once) and
 * runs the tokens one by one: the q / k L2 norms, beta and the decay (each warp computes
 * them itself, so the token loop has no block barrier), the update and o = S q (lanes
 * across dk) into the op's scratch. Then the output gate (RMSNorm of o over dv, times norm_w, times
 * silu(z)) into z, a block per (head, row). A chunk of one sequence loops over its tokens
 * in the block (the CPU's chunked UT form is not used here: this is the first, plain
 * form); a batch step has one token per sequence, its S found through the table. Decay
 * factors below e^-60 are 0, as the CPU cuts them (no subnormals into the state). */
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
            sq = dn_warp_sum(sq);
            sk = dn_warp_sum(sk);
            const float iq = 1.0f / sqrtf(sq + 1e-6f) * qscale, ik = 1.0f / sqrtf(sk + 1e-6f);
            kq = 0.0f;
#pragma unroll
            for (int j = 0; j < MAXJ; j++) {
                q[j] *= iq;
                k[j] *= ik;
                kq += k[j] * q[j];
            }
            kq = dn_warp_sum(kq);
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
            a = dn_warp_sum(a);
            b = dn_warp_sum(b);
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
 * b and a into beta and the decay factor e^g. The recurrence then only streams them. */
__global__ void deltanet_prep_kernel(float *mix, float *bb, float *aa, float *kq, ci_deltanet d) {
    pdl_enter();
    const int hk = d.hk, hv = d.hv, dk = d.dk, KD = hk * dk, C = 2 * KD + hv * d.dv, t = blockIdx.y;
    const int lane = threadIdx.x & 31, g = blockIdx.x * DN_WARPS + (threadIdx.x >> 5);
    if (blockIdx.x == 0)
        for (int h = threadIdx.x; h < hv; h += blockDim.x) {
            float *pb = bb + (int64_t)t * hv + h, *pa = aa + (int64_t)t * hv + h;
            *pb = 1.0f / (1.0f + expf(-*pb));
            *pa = dn_decay(d.neg_A[h] * dn_softplus(*pa + d.dt_bias[h]));
        }
    if (g >= hk) return;
    float *q = mix + (int64_t)t * C + (size_t)g * dk, *k = q + KD;
    float sq = 0.0f, sk = 0.0f;
    for (int c = lane; c < dk; c += 32) {
        sq += q[c] * q[c];
        sk += k[c] * k[c];
    }
    sq = dn_warp_sum(sq);
    sk = dn_warp_sum(sk);
    const float iq = 1.0f / sqrtf(sq + 1e-6f) * (1.0f / sqrtf((float)dk)), ik = 1.0f / sqrtf(sk + 1e-6f);
    float s = 0.0f;
    for (int c = lane; c < dk; c += 32) {
        const float a = q[c] * iq, b = k[c] * ik;
        q[c] = a;
        k[c] = b;
        s += b * a;
    }
    s = dn_warp_sum(s);
    if (lane == 0) kq[(int64_t)t * hk + g] = s;
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

void cb_deltanet(cuda_be *cb, float *z, float *mix, float *b, float *a, int n, const ci_deltanet *d, float *state,
                 float *const *states, int tab_step, float *o) {
    if (n <= 0) return;
    if (d->dk > 32 * DN_MAXJ) {
        cb_fail_msg(cb, "deltanet: key head dim above 256 (the kernel keeps a state row's share in registers)");
        return;
    }
    const int prep = !states && n > 1;
    float *kq = o + (size_t)n * d->hv * d->dv;   /* [n, hk] after o in the op's scratch */
    if (prep) {
        cb_launch(cb, deltanet_prep_kernel, dim3((d->hk + DN_WARPS - 1) / DN_WARPS, n), dim3(DN_WARPS * 32), 0, mix, b,
                  a, kq, *d);
        if (cb_launched(cb, "deltanet prep")) return;
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
