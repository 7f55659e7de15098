/* v4.cu — DeepSeek V4's ops on the device (backend.h: hc_spread, hc_pre, hc_post,
 * v4_compress, v4_index, v4_attend, matmul_groups). Nothing synchronises, nothing is
 * decided on the host from a position: entry counts, windows and selections follow from
 * pos[] on the device, so a decode step can be captured.
 *
 * hc_pre: a block per row (the sum of squares in double, or hc_mix_pre's parts summed; pre; then
 * the first warp builds post / comb in shared memory, a lane per stream, while the other warps
 * collapse the streams over the row's channels). hc_post: a thread per
 * channel of a row holds that channel of every stream.
 * v4_compress: a chunk's tokens reach the state in three launches, in stream order: every
 * row that completes a window writes its entry, reading each slot from the chunk's rows
 * when its position is in the chunk, else from the state (the pending slots of the window
 * the chunk started in, or the previous window's Ca series); then the last completed
 * window's Ca series becomes the state's previous one; then the rows of the chunk's last
 * window become the pending slots. A decode step's rows are each their own chunk.
 * v4_index: dsa.cu's lightning indexer kernels (cb_index_select) over the indexer state's
 * entries: four lanes an entry score it (heads in order), then a block per row finds the
 * topk-th score by a radix select on order-preserving integer keys staged in shared memory
 * and keeps the entries above it and the lowest-index ties, ascending (ci_topk_positions' rule).
 * v4_attend: the ring store, then a block per (head, row): warps take keys in turn with an
 * online softmax, merged with the sink in shared memory, then the inverse rope; decode rows
 * (heads · rows < SMs, head_dim <= 512) instead split the keys over blocks of 8 heads
 * (v4_attend_split_kernel, flash decoding over the shared K = V) and merge the splits with the
 * sink and the inverse rope in v4_attend_comb_kernel (CINFER_CUDA_V4_SPLIT=0: never). */
#include "cuda_internal.h"
#include <math.h>

enum { V4_THREADS = 256, V4_MAX_HC = 64, V4_MAX_D = 1024 };

/* ---- hyper-connections ------------------------------------------------------------------ */

__global__ void v4_hc_spread_kernel(float *X, const float *x, int hc, int dim) {
    pdl_enter();
    const int t = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hc * dim; i += gridDim.x * blockDim.x)
        X[(int64_t)t * hc * dim + i] = x[(int64_t)t * dim + i % dim];
}

void cb_hc_spread(cuda_be *cb, float *X, const float *x, int n, int hc, int dim) {
    if (n <= 0 || hc <= 0 || dim <= 0) return;
    const int bx = (hc * dim + V4_THREADS - 1) / V4_THREADS;
    cb_launch(cb, v4_hc_spread_kernel, dim3(bx > 64 ? 64 : bx, n), dim3(V4_THREADS), 0, X, x, hc, dim);
    cb_launched(cb, "hc_spread");
}

__device__ __forceinline__ float v4_sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

/* block sum of a double (blockDim.x a multiple of 32, at most 1024) */
__device__ double v4_block_sum_d(double v, double *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    double s = 0;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

__device__ float v4_block_sum_f(float v, float *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    float s = 0;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

/* a block per row; shared: the row's mix [M], pre [hc], then comb [hc, hc] while it is built.
 * The maps are built by the first warp, a lane per stream (pre, post, a comb row's softmax and
 * row sums, a comb column's sums): every element sees the operations, in the order, of one
 * thread doing them all (the CPU's order), so the bits are those; the first version left the
 * Sinkhorn loop to one thread over global memory: 93 us a call on the H200 (ncu, 2026-12-03). */
__global__ void v4_hc_pre_kernel(float *x, float *post, float *comb, float *mix, const float *X, int hc, int dim,
                                 int iters, float eps, float norm_eps, const float *scale, const float *base,
                                 const float *part, const double *ssq, int S) {
    pdl_enter();
    extern __shared__ float sm[];
    __shared__ double shd[32];
    const int t = blockIdx.x, C = hc, F = hc * dim, M = post ? (2 + C) * C : C;
    const float *f = X + (int64_t)t * F;
    double ss = 0;
    if (ssq) {   /* hc_mix_pre: the parts' sums of squares, in part order: the first warp loads 32
                  * parts at once and every lane adds them in order from the shuffles */
        if (threadIdx.x < 32) {
            for (int q0 = 0; q0 < S; q0 += 32) {
                const int nq = S - q0 < 32 ? S - q0 : 32;
                const double v = (int)threadIdx.x < nq ? ssq[(int64_t)t * S + q0 + threadIdx.x] : 0.0;
                for (int j = 0; j < nq; j++) ss += __shfl_sync(0xffffffffu, v, j);
            }
            if (threadIdx.x == 0) shd[0] = ss;
        }
        __syncthreads();
        ss = shd[0];
    } else {
        for (int i = threadIdx.x; i < F; i += blockDim.x) ss += (double)f[i] * f[i];
        ss = v4_block_sum_d(ss, shd);
    }
    const float r = 1.0f / sqrtf((float)(ss / F) + norm_eps);
    float *mx = sm, *pre = sm + M, *cm = pre + C;
    for (int i = threadIdx.x; i < M; i += blockDim.x) {
        float v;
        if (part) {   /* the mix row's parts, in part order (unrolled: the loads issued together) */
            v = 0.0f;
#pragma unroll 8
            for (int q = 0; q < S; q++) v += part[((int64_t)t * S + q) * M + i];
        } else {
            v = mix[(int64_t)t * M + i];
        }
        v *= r;
        mix[(int64_t)t * M + i] = v;
        mx[i] = v;
    }
    __syncthreads();
    for (int j = threadIdx.x; j < C; j += blockDim.x) pre[j] = v4_sigm(mx[j] * scale[0] + base[j]) + eps;
    __syncthreads();
    /* the first warp builds post and comb while the others collapse the streams with pre */
    if (post && threadIdx.x < 32) {
        const int lane = threadIdx.x;
        {
            float *po = post + (int64_t)t * C;
            for (int j = lane; j < C; j += 32) po[j] = 2.0f * v4_sigm(mx[C + j] * scale[1] + base[C + j]);
            for (int i = lane; i < C; i += 32) {
                float *row = cm + i * C, m = -INFINITY;
                for (int j = 0; j < C; j++) {
                    row[j] = mx[2 * C + i * C + j] * scale[2] + base[2 * C + i * C + j];
                    m = fmaxf(m, row[j]);
                }
                float s = 0;
                for (int j = 0; j < C; j++) { row[j] = expf(row[j] - m); s += row[j]; }
                for (int j = 0; j < C; j++) row[j] = row[j] / s + eps;
            }
            __syncwarp();
            for (int it = 0; it < iters; it++) {
                if (it > 0) {
                    for (int i = lane; i < C; i += 32) {
                        float s = 0;
                        for (int j = 0; j < C; j++) s += cm[i * C + j];
                        for (int j = 0; j < C; j++) cm[i * C + j] /= s + eps;
                    }
                    __syncwarp();
                }
                for (int j = lane; j < C; j += 32) {
                    float s = 0;
                    for (int i = 0; i < C; i++) s += cm[i * C + j];
                    for (int i = 0; i < C; i++) cm[i * C + j] /= s + eps;
                }
                __syncwarp();
            }
            float *cbm = comb + (int64_t)t * C * C;
            for (int i = lane; i < C * C; i += 32) cbm[i] = cm[i];
        }
        return;
    }
    const int c0 = post ? 32 : 0, me = threadIdx.x - c0, nth = blockDim.x - c0;
    if ((dim & 3) == 0) {   /* four channels a thread, the same sums */
        const int d4n = dim >> 2;
        const float4 *f4 = (const float4 *)f;
        for (int d = me; d < d4n; d += nth) {
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            for (int j = 0; j < C; j++) {
                const float4 v = f4[(int64_t)j * d4n + d];
                a.x += pre[j] * v.x;
                a.y += pre[j] * v.y;
                a.z += pre[j] * v.z;
                a.w += pre[j] * v.w;
            }
            ((float4 *)(x + (int64_t)t * dim))[d] = a;
        }
        return;
    }
    for (int d = me; d < dim; d += nth) {
        float a = 0;
        for (int j = 0; j < C; j++) a += pre[j] * f[(int64_t)j * dim + d];
        x[(int64_t)t * dim + d] = a;
    }
}

void cb_hc_pre(cuda_be *cb, float *x, float *post, float *comb, float *mix, const float *X, int n, int hc, int dim,
               int iters, float eps, float norm_eps, const float *scale, const float *base) {
    if (n <= 0 || hc <= 0 || dim <= 0) return;
    if (hc > V4_MAX_HC) { cb_fail_msg(cb, "hc_pre: more than 64 hyper-connection streams"); return; }
    const size_t smem = ((size_t)(post ? (2 + hc) * hc : hc) + hc + (post ? (size_t)hc * hc : 0)) * sizeof(float);
    cb_launch(cb, v4_hc_pre_kernel, dim3((unsigned)n), dim3(V4_THREADS), smem, x, post, comb, mix, X, hc, dim, iters, eps,
              norm_eps, scale, base, (const float *)nullptr, (const double *)nullptr, 0);
    cb_launched(cb, "hc_pre");
}

/* hc_mix_pre's first pass: block (q, t) takes columns [q·HCM_COLS, (q + 1)·HCM_COLS) of row t's
 * flat streams, four a thread: its share of every mix row's dot product with fn (f32) and of the
 * row's sum of squares (double), summed over the block in a fixed order (lanes by xor shuffles,
 * then warps in order) into part[t, q, 0..M) and ssq[t, q]. fn's loads are issued before
 * pdl_enter (weights are never written while a model runs). */
enum { HCM_THREADS = 128, HCM_COLS = 4 * HCM_THREADS, HCM_MAX_M = 32 };

__global__ void __launch_bounds__(HCM_THREADS) v4_hc_mix_kernel(float *part, double *ssq, const float *X,
                                                                const float *fn, int F, int M) {
    __shared__ float red[HCM_THREADS / 32][HCM_MAX_M];
    __shared__ double redd[HCM_THREADS / 32];
    const int q = blockIdx.x, t = blockIdx.y, S = gridDim.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t c = (int64_t)q * HCM_COLS + 4 * threadIdx.x;
    const bool in = c < F;
    float4 w[HCM_MAX_M];
#pragma unroll
    for (int m = 0; m < HCM_MAX_M; m++)
        w[m] = m < M && in ? __ldg((const float4 *)(fn + (int64_t)m * F + c)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    pdl_enter();
    const float4 v = in ? *(const float4 *)(X + (int64_t)t * F + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    double d = (double)v.x * v.x;
    d += (double)v.y * v.y;
    d += (double)v.z * v.z;
    d += (double)v.w * v.w;
    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    if (lane == 0) redd[warp] = d;
#pragma unroll
    for (int m = 0; m < HCM_MAX_M; m++) {
        if (m >= M) break;
        float a = v.x * w[m].x;
        a = fmaf(v.y, w[m].y, a);
        a = fmaf(v.z, w[m].z, a);
        a = fmaf(v.w, w[m].w, a);
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == 0) red[warp][m] = a;
    }
    __syncthreads();
    if (threadIdx.x < M) {
        float a = 0.0f;
        for (int i = 0; i < HCM_THREADS / 32; i++) a += red[i][threadIdx.x];
        part[((int64_t)t * S + q) * M + threadIdx.x] = a;
    }
    if (threadIdx.x == 0) {
        double a = 0;
        for (int i = 0; i < HCM_THREADS / 32; i++) a += redd[i];
        ssq[(int64_t)t * S + q] = a;
    }
}

/* CINFER_CUDA_HCMIX (default 1; 0: the mix as a matmul, then hc_pre reading the streams again) */
static int hc_mix_on(void) {
    static const int v = cb_env_switch("CINFER_CUDA_HCMIX", 1);
    return v;
}

int cb_hc_mix_pre(cuda_be *cb, float *x, float *post, float *comb, float *mix, const float *X, int n, const ci_mat *fn,
                  int hc, int dim, int iters, float eps, float norm_eps, const float *scale, const float *base) {
    const int64_t F = (int64_t)hc * dim;
    const int M = post ? (2 + hc) * hc : hc;
    if (!hc_mix_on() || n < 1 || n > CB_GEMV_MAX_N || hc < 1 || hc > V4_MAX_HC || dim < 1 || M > HCM_MAX_M ||
        fn->dtype != CI_F32 || fn->rows != M || fn->cols != F || (F & 3) || F > (int64_t)HCM_COLS * 65535 ||
        ((uintptr_t)fn->data & 15) || ((uintptr_t)X & 15))
        return 0;
    const int S = (int)((F + HCM_COLS - 1) / HCM_COLS);
    double *ssq = (double *)cb_scratch_get(cb, &cb->hc_part, (size_t)n * S * (sizeof(double) + (size_t)M * sizeof(float)));
    if (!ssq) return 1;   /* cb_scratch_get recorded the failure */
    float *part = (float *)(ssq + (size_t)n * S);
    cb_launch(cb, v4_hc_mix_kernel, dim3((unsigned)S, (unsigned)n), dim3(HCM_THREADS), 0, part, ssq, X,
              (const float *)fn->data, (int)F, M);
    cb_launched(cb, "hc_mix");
    const size_t smem = ((size_t)M + hc + (post ? (size_t)hc * hc : 0)) * sizeof(float);
    cb_launch(cb, v4_hc_pre_kernel, dim3((unsigned)n), dim3(V4_THREADS), smem, x, post, comb, mix, X, hc, dim, iters, eps,
              norm_eps, scale, base, (const float *)part, (const double *)ssq, S);
    cb_launched(cb, "hc_pre");
    return 1;
}

/* a thread per (row, channel): that channel of every stream in registers */
__global__ void v4_hc_post_kernel(float *X, const float *y, const float *post, const float *comb, int hc, int dim) {
    pdl_enter();
    const int t = blockIdx.y, C = hc;
    const float *po = post + (int64_t)t * C, *cbm = comb + (int64_t)t * C * C;
    float *xs = X + (int64_t)t * C * dim;
    for (int d = blockIdx.x * blockDim.x + threadIdx.x; d < dim; d += gridDim.x * blockDim.x) {
        float old[V4_MAX_HC];
        for (int j = 0; j < C; j++) old[j] = xs[(int64_t)j * dim + d];
        const float yd = y[(int64_t)t * dim + d];
        for (int k = 0; k < C; k++) {
            float a = po[k] * yd;
            for (int j = 0; j < C; j++) a += cbm[j * C + k] * old[j];
            xs[(int64_t)k * dim + d] = a;
        }
    }
}

void cb_hc_post(cuda_be *cb, float *X, const float *y, const float *post, const float *comb, int n, int hc, int dim) {
    if (n <= 0 || hc <= 0 || dim <= 0) return;
    if (hc > V4_MAX_HC) { cb_fail_msg(cb, "hc_post: more than 64 hyper-connection streams"); return; }
    const int bx = (dim + V4_THREADS - 1) / V4_THREADS;
    cb_launch(cb, v4_hc_post_kernel, dim3(bx > 64 ? 64 : bx, n), dim3(V4_THREADS), 0, X, y, post, comb, hc, dim);
    cb_launched(cb, "hc_post");
}

/* ---- the compressor ----------------------------------------------------------------------- */

/* Row t's chunk: with states, the row alone (its own sequence); else the n rows. */
struct v4_seg {
    float *st;        /* the state */
    int first, last;  /* rows of the chunk */
    int p0;           /* position of its first row */
};

__device__ __forceinline__ v4_seg v4_seg_of(float *state, float *const *states, int tab_step, const int32_t *pos, int n,
                                            int t) {
    v4_seg s;
    if (states) {
        s.st = states[(int64_t)t * tab_step];
        s.first = s.last = t;
        s.p0 = pos[t];
    } else {
        s.st = state;
        s.first = 0;
        s.last = n - 1;
        s.p0 = pos[0];
    }
    return s;
}

/* kv (gate 0) or gate + ape (gate 1) at position q, column col of the m-wide series, for a
 * window that ends in this chunk: from its row when q is in the chunk, from the pending
 * slots of the window the chunk started in, or (Ca columns only) from the previous window's
 * series. */
__device__ __forceinline__ float v4_slot(const v4_seg &s, const float *kv, const float *gate, const ci_v4cmp &c, int m,
                                         int q, int col, int gate_sel) {
    const int R = c.ratio, d = c.d, k = q % R;
    if (q >= s.p0) {
        const int64_t row = s.first + (q - s.p0);
        return gate_sel ? gate[row * m + col] + c.ape[(int64_t)k * m + col] : kv[row * m + col];
    }
    if (q / R == s.p0 / R) return s.st[(size_t)gate_sel * R * m + (size_t)k * m + col];   /* pending */
    const float *prev = s.st + 2 * (size_t)R * m;
    return prev[(size_t)gate_sel * R * d + (size_t)k * d + col];
}

/* out[0 .. d) = in rotated at position fp over its last rot_dim dims (interleaved pairs, angles in
 * double, times mscale), the first d - rot_dim copied; the whole block, in (shared) complete */
__device__ __forceinline__ void v4_rope_tail(float *out, const float *in, int d, int rot_dim, float fp,
                                             const float *inv_freq, float mscale) {
    const int half = rot_dim / 2, off = d - rot_dim;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        if (i < off) { out[i] = in[i]; continue; }
        const int pi = (i - off) >> 1;
        if (pi >= half) { out[i] = in[i]; continue; }
        const double a = (double)(fp * inv_freq[pi]);
        const float co = (float)(cos(a) * mscale), si = (float)(sin(a) * mscale);
        const float x0 = in[off + 2 * pi], x1 = in[off + 2 * pi + 1];
        out[i] = ((i - off) & 1) ? x1 * co + x0 * si : x0 * co - x1 * si;
    }
}

/* a block per row; rows that complete a window write its entry (shared: the entry [d]) */
__global__ void v4_emit_kernel(float *state, float *const *states, int tab_step, const float *kv, const float *gate,
                               int n, const int32_t *pos, ci_v4cmp c, size_t entries_off) {
    pdl_enter();
    extern __shared__ float e[];
    __shared__ float shf[32];
    const int t = blockIdx.x, p = pos[t], R = c.ratio, d = c.d, m = (1 + c.overlap) * d;
    if (p % R != R - 1) return;
    const v4_seg s = v4_seg_of(state, states, tab_step, pos, n, t);
    const int w = p / R, has_prev = c.overlap && w > 0;
    for (int ch = threadIdx.x; ch < d; ch += blockDim.x) {
        const int own = c.overlap ? d + ch : ch;
        float mx = -INFINITY;
        if (has_prev)
            for (int k = 0; k < R; k++) mx = fmaxf(mx, v4_slot(s, kv, gate, c, m, (w - 1) * R + k, ch, 1));
        for (int k = 0; k < R; k++) mx = fmaxf(mx, v4_slot(s, kv, gate, c, m, w * R + k, own, 1));
        double num = 0, den = 0;
        if (has_prev)
            for (int k = 0; k < R; k++) {
                const int q = (w - 1) * R + k;
                double pr = exp((double)v4_slot(s, kv, gate, c, m, q, ch, 1) - mx);
                num += pr * v4_slot(s, kv, gate, c, m, q, ch, 0);
                den += pr;
            }
        for (int k = 0; k < R; k++) {
            const int q = w * R + k;
            double pr = exp((double)v4_slot(s, kv, gate, c, m, q, own, 1) - mx);
            num += pr * v4_slot(s, kv, gate, c, m, q, own, 0);
            den += pr;
        }
        e[ch] = (float)(num / den);
    }
    __syncthreads();
    float ss = 0;
    for (int ch = threadIdx.x; ch < d; ch += blockDim.x) ss += e[ch] * e[ch];
    ss = v4_block_sum_f(ss, shf);
    const float r = 1.0f / sqrtf(ss / d + c.eps);
    for (int ch = threadIdx.x; ch < d; ch += blockDim.x) e[ch] = e[ch] * r * c.norm[ch];
    __syncthreads();
    float *dst = c.ent ? c.ent + pg_row(pg_table(c.ent_pages, t), c.ent_pages.blk_log2, w) * d
                       : s.st + entries_off + (size_t)w * d;
    v4_rope_tail(dst, e, d, c.rot_dim, (float)(w * R), c.inv_freq, c.mscale);
}

/* the chunk's last row: the Ca series of the last window it completed becomes the state's
 * previous one (overlapping compressors only) */
__global__ void v4_prev_kernel(float *state, float *const *states, int tab_step, const float *kv, const float *gate,
                               int n, const int32_t *pos, ci_v4cmp c) {
    pdl_enter();
    const int t = blockIdx.x;
    const v4_seg s = v4_seg_of(state, states, tab_step, pos, n, t);
    if (t != s.last) return;
    const int R = c.ratio, d = c.d, m = 2 * d, pl = pos[t];
    const int wl = (pl + 1) / R - 1;
    if (wl < 0 || (wl + 1) * R <= s.p0) return;   /* no window completed in this chunk */
    float *prev = s.st + 2 * (size_t)R * m;
    for (int i = threadIdx.x; i < R * d; i += blockDim.x) {
        const int k = i / d, ch = i % d, q = wl * R + k;
        prev[i] = v4_slot(s, kv, gate, c, m, q, ch, 0);
        prev[(size_t)R * d + i] = v4_slot(s, kv, gate, c, m, q, ch, 1);
    }
}

/* rows of the chunk's last window become its pending slots */
__global__ void v4_pend_kernel(float *state, float *const *states, int tab_step, const float *kv, const float *gate,
                               int n, const int32_t *pos, ci_v4cmp c) {
    pdl_enter();
    const int t = blockIdx.x, R = c.ratio, m = (1 + c.overlap) * c.d, p = pos[t];
    const v4_seg s = v4_seg_of(state, states, tab_step, pos, n, t);
    if (p / R != pos[s.last] / R) return;
    const int k = p % R;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        s.st[(size_t)k * m + i] = kv[(int64_t)t * m + i];
        s.st[(size_t)R * m + (size_t)k * m + i] = gate[(int64_t)t * m + i] + c.ape[(int64_t)k * m + i];
    }
}

void cb_v4_compress(cuda_be *cb, float *state, float *const *states, int tab_step, const float *kv, const float *gate,
                    int n, const int32_t *pos, const ci_v4cmp *c) {
    if (n <= 0) return;
    const size_t off = ci_v4cmp_entries(c);
    cb_launch(cb, v4_emit_kernel, dim3((unsigned)n), dim3(V4_THREADS), (size_t)c->d * sizeof(float), state, states,
              tab_step, kv, gate, n, pos, *c, off);
    if (cb_launched(cb, "v4_compress entries")) return;
    if (c->overlap) {
        cb_launch(cb, v4_prev_kernel, dim3((unsigned)n), dim3(V4_THREADS), 0, state, states, tab_step, kv, gate, n, pos, *c);
        if (cb_launched(cb, "v4_compress previous window")) return;
    }
    cb_launch(cb, v4_pend_kernel, dim3((unsigned)n), dim3(V4_THREADS), 0, state, states, tab_step, kv, gate, n, pos, *c);
    cb_launched(cb, "v4_compress pending");
}

/* ---- the indexer's choice ----------------------------------------------------------------- */

void cb_v4_index(cuda_be *cb, int32_t *sel, int32_t *nsel, const float *iq, const float *iw, const float *state,
                 float *const *states, int tab_step, int n, const int32_t *pos, const ci_v4cmp *c, int ih, int topk,
                 int sel_stride, int max_entries, float *scratch) {
    (void)scratch;
    const cb_keyrows kr = c->ent ? cb_keyrows{ c->ent, NULL, 0, c->ratio, 0, c->ent_pages }
                                 : cb_keyrows{ state, states, tab_step, c->ratio, ci_v4cmp_entries(c), { 0, 0, 0, 0 } };
    cb_index_select(cb, sel, sel_stride, nsel, kr, n, pos, max_entries, iq, iw, 1.0f / sqrtf((float)ih),
                    1.0f / sqrtf((float)c->d), ih, c->d, topk);
}

/* ---- attention ------------------------------------------------------------------------------ */

__global__ void v4_ring_store_kernel(float *ring, float *const *tab, int tab_step, int ring_rows, const float *kv,
                                     const int32_t *pos, int D) {
    pdl_enter();
    const int t = blockIdx.x;
    float *rg = tab ? tab[(int64_t)t * tab_step] : ring;
    float *dst = rg + (int64_t)(pos[t] % ring_rows) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) dst[i] = kv[(int64_t)t * D + i];
}

struct v4_attn_args {
    float *out;
    const float *q;
    const int32_t *pos;
    const float *ring, *cstate;
    float *const *tab;
    int tab_step, ring_rows, window;
    int has_comp, ratio;
    size_t off;
    const float *ent_pool;       /* the entries on a block pool (ci_v4cmp ent), or NULL */
    ci_pages ent_pg;
    const int32_t *sel, *nsel;
    int sel_stride;
    const float *sinks;
    int n_heads, D, rot_dim;
    const float *inv_freq;
    float mscale, scale;
};

/* head h of row t (position p): its output qs [D] (shared, complete) through the inverse rope
 * into out; the whole block */
__device__ __forceinline__ void v4_head_out(const v4_attn_args &a, int t, int h, int p, const float *qs) {
    v4_rope_tail(a.out + ((int64_t)t * a.n_heads + h) * a.D, qs, a.D, a.rot_dim, (float)(-p), a.inv_freq, a.mscale);
}

/* row t's compressed entries (NULL: none): the block pool's, or its state's after their offset */
__device__ __forceinline__ const float *v4_entries(const v4_attn_args &a, int t) {
    if (!a.has_comp) return NULL;
    if (a.ent_pool) return a.ent_pool;
    return (a.tab ? a.tab[(int64_t)t * a.tab_step + 1] : a.cstate) + a.off;
}

/* row t's key j (of nwin window keys from position s0, then its compressed entries) */
__device__ __forceinline__ const float *v4_key(const v4_attn_args &a, const float *rg, const float *ent, int t, int s0,
                                               int nwin, int j) {
    if (j < nwin) return rg + (int64_t)((s0 + j) % a.ring_rows) * a.D;
    const int c = j - nwin, k = a.sel ? a.sel[(int64_t)t * a.sel_stride + c] : c;
    return ent + (a.ent_pool ? pg_row(pg_table(a.ent_pg, t), a.ent_pg.blk_log2, k) : (int64_t)k) * a.D;
}

/* a block per (head, row); warps take keys in turn (online softmax, a lane holds channels
 * lane, lane + 32, ...); shared: q [D], per warp its max, sum and output [D] */
__global__ void v4_attend_kernel(v4_attn_args a) {
    pdl_enter();
    extern __shared__ float sm[];
    const int h = blockIdx.x, t = blockIdx.y, D = a.D, p = a.pos[t];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    float *qs = sm, *wm = sm + D, *wl = wm + nw, *wo = wl + nw;
    const float *rg = a.tab ? a.tab[(int64_t)t * a.tab_step] : a.ring;
    const float *ent = v4_entries(a, t);
    const float *q = a.q + ((int64_t)t * a.n_heads + h) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) qs[i] = q[i];
    __syncthreads();
    const int s0 = p - a.window + 1 > 0 ? p - a.window + 1 : 0, nwin = p - s0 + 1;
    int ncomp = 0;
    if (a.has_comp) ncomp = a.sel ? a.nsel[t] : (p + 1) / a.ratio;
    const int nk = nwin + ncomp;
    float m = -INFINITY, l = 0.0f, acc[V4_MAX_D / 32];
    const int per = (D + 31) / 32;
    for (int i = 0; i < per; i++) acc[i] = 0.0f;
    for (int j = warp; j < nk; j += nw) {
        const float *k = v4_key(a, rg, ent, t, s0, nwin, j);
        float kv[V4_MAX_D / 32], dot = 0.0f;
        for (int i = 0; i < per; i++) {
            const int d = lane + 32 * i;
            kv[i] = d < D ? k[d] : 0.0f;
            dot = fmaf(d < D ? qs[d] : 0.0f, kv[i], dot);
        }
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        const float s = dot * a.scale, mn = fmaxf(m, s), corr = expf(m - mn), pj = expf(s - mn);
        l = l * corr + pj;
        for (int i = 0; i < per; i++) acc[i] = acc[i] * corr + pj * kv[i];
        m = mn;
    }
    if (lane == 0) { wm[warp] = m; wl[warp] = l; }
    for (int i = 0; i < per; i++) {
        const int d = lane + 32 * i;
        if (d < D) wo[(size_t)warp * D + d] = acc[i];
    }
    __syncthreads();
    const float sink = a.sinks[h];
    float M = sink;
    for (int w = 0; w < nw; w++) M = fmaxf(M, wm[w]);
    float L = expf(sink - M);
    for (int w = 0; w < nw; w++) L += wl[w] * expf(wm[w] - M);   /* a warp with no key: l = 0, e^-inf = 0 */
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < nw; w++)
            if (wl[w] > 0.0f) o += wo[(size_t)w * D + d] * expf(wm[w] - M);
        qs[d] = o / L;   /* the head's output, before the inverse rope */
    }
    __syncthreads();
    v4_head_out(a, t, h, p, qs);
}

/* Decode rows (flash decoding over the shared K = V): grid (head groups of V4_SPLIT_HEADS, S
 * splits, rows), a warp per head holding its query in registers; split sp takes the row's keys
 * j = sp, sp + S, ... (so S needs no bound on the key count), V4_SPLIT_KB of them a batch
 * (independent loads and dots, one softmax rescale a batch); the block's warps read the same
 * keys, so each key comes from L2 once a block. Each (row, head, split) leaves its running
 * max, sum and unnormalised output [m, l, o[D]] in part; v4_attend_comb_kernel merges them
 * with the sink. PER: floats a lane (D <= 32 · PER). */
enum { V4_SPLIT_HEADS = 8, V4_SPLIT_KB = 4, V4_SPLIT_MAX = 32 };
template <int PER>
__global__ void __launch_bounds__(V4_SPLIT_HEADS * 32) v4_attend_split_kernel(v4_attn_args a, float *part, int S) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = blockIdx.x * V4_SPLIT_HEADS + warp, sp = blockIdx.y, t = blockIdx.z, D = a.D, p = a.pos[t];
    if (h >= a.n_heads) return;
    const float *rg = a.tab ? a.tab[(int64_t)t * a.tab_step] : a.ring;
    const float *ent = v4_entries(a, t);
    const int s0 = p - a.window + 1 > 0 ? p - a.window + 1 : 0, nwin = p - s0 + 1;
    const int nk = nwin + (a.has_comp ? (a.sel ? a.nsel[t] : (p + 1) / a.ratio) : 0);
    const float *q = a.q + ((int64_t)t * a.n_heads + h) * D;
    float qv[PER], acc[PER], m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int d = lane + 32 * i;
        qv[i] = d < D ? q[d] : 0.0f;
        acc[i] = 0.0f;
    }
    for (int j = sp; j < nk; j += V4_SPLIT_KB * S) {   /* key j is valid: the batch's first */
        float kv[V4_SPLIT_KB][PER], sc[V4_SPLIT_KB];
#pragma unroll
        for (int b = 0; b < V4_SPLIT_KB; b++) {
            const int jb = j + b * S;
            const float *k = v4_key(a, rg, ent, t, s0, nwin, jb < nk ? jb : j);
#pragma unroll
            for (int i = 0; i < PER; i++) {
                const int d = lane + 32 * i;
                kv[b][i] = d < D ? k[d] : 0.0f;
            }
        }
#pragma unroll
        for (int b = 0; b < V4_SPLIT_KB; b++) {
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < PER; i++) dot = fmaf(qv[i], kv[b][i], dot);
            sc[b] = dot;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int b = 0; b < V4_SPLIT_KB; b++) sc[b] += __shfl_xor_sync(0xffffffffu, sc[b], o);
        float mn = m;
#pragma unroll
        for (int b = 0; b < V4_SPLIT_KB; b++) {
            sc[b] = j + b * S < nk ? sc[b] * a.scale : -INFINITY;
            mn = fmaxf(mn, sc[b]);
        }
        const float corr = expf(m - mn);
        l *= corr;
#pragma unroll
        for (int i = 0; i < PER; i++) acc[i] *= corr;
#pragma unroll
        for (int b = 0; b < V4_SPLIT_KB; b++) {
            const float pb = expf(sc[b] - mn);
            l += pb;
#pragma unroll
            for (int i = 0; i < PER; i++) acc[i] = fmaf(pb, kv[b][i], acc[i]);
        }
        m = mn;
    }
    float *pp = part + (((int64_t)t * a.n_heads + h) * S + sp) * (D + 2);
    if (lane == 0) { pp[0] = m; pp[1] = l; }
#pragma unroll
    for (int i = 0; i < PER; i++) {
        const int d = lane + 32 * i;
        if (d < D) pp[2 + d] = acc[i];
    }
}

/* a block per (head, row): the S splits' partials merged with the sink, then the inverse rope */
__global__ void v4_attend_comb_kernel(v4_attn_args a, const float *part, int S) {
    pdl_enter();
    extern __shared__ float sm[];
    const int h = blockIdx.x, t = blockIdx.y, D = a.D, p = a.pos[t];
    const float *pp = part + ((int64_t)t * a.n_heads + h) * S * (D + 2);
    float *qs = sm, *ws = sm + D;
    const float sink = a.sinks[h];
    float M = sink;
    for (int s = 0; s < S; s++)
        if (pp[(int64_t)s * (D + 2) + 1] > 0.0f) M = fmaxf(M, pp[(int64_t)s * (D + 2)]);
    float L = expf(sink - M);
    for (int s = 0; s < S; s++) {   /* a split with no key: l = 0 */
        const float ls = pp[(int64_t)s * (D + 2) + 1];
        if (ls > 0.0f) L += ls * expf(pp[(int64_t)s * (D + 2)] - M);
    }
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        const float ls = pp[(int64_t)s * (D + 2) + 1];
        ws[s] = ls > 0.0f ? expf(pp[(int64_t)s * (D + 2)] - M) : 0.0f;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < S; s++)
            if (ws[s] > 0.0f) o += pp[(int64_t)s * (D + 2) + 2 + d] * ws[s];
        qs[d] = o / L;
    }
    __syncthreads();
    v4_head_out(a, t, h, p, qs);
}

/* CINFER_CUDA_V4_SPLIT (default 1; 0: every row through v4_attend_kernel, a block per (head, row)) */
static int v4_split_on(void) {
    static const int v = cb_env_switch("CINFER_CUDA_V4_SPLIT", 1);
    return v;
}

void cb_v4_attend(cuda_be *cb, float *out, const float *q, const float *kv, int n, const int32_t *pos, float *ring,
                  int ring_rows, int window, const float *cstate, float *const *tab, int tab_step, const ci_v4cmp *c,
                  const int32_t *sel, const int32_t *nsel, int sel_stride, const float *sinks, int n_heads, int D,
                  int rot_dim, const float *inv_freq, float mscale) {
    static int smem_set = 0;
    if (n <= 0 || n_heads <= 0 || D <= 0) return;
    if (D > V4_MAX_D) { cb_fail_msg(cb, "v4_attend: head_dim above 1024"); return; }
    cb_launch(cb, v4_ring_store_kernel, dim3((unsigned)n), dim3(V4_THREADS), 0, ring, tab, tab_step, ring_rows, kv, pos, D);
    if (cb_launched(cb, "v4_attend ring store")) return;
    const int nw = V4_THREADS / 32;
    const size_t smem = ((size_t)D + 2 * nw + (size_t)nw * D) * sizeof(float);
    if (!cb_smem_ok(cb, v4_attend_kernel, smem, &smem_set)) { cb_fail_msg(cb, "v4_attend: shared memory"); return; }
    v4_attn_args a;
    a.out = out; a.q = q; a.pos = pos; a.ring = ring; a.cstate = cstate; a.tab = tab; a.tab_step = tab_step;
    a.ring_rows = ring_rows; a.window = window; a.has_comp = c != NULL; a.ratio = c ? c->ratio : 1;
    a.off = c ? ci_v4cmp_entries(c) : 0; a.sel = sel; a.nsel = nsel; a.sel_stride = sel_stride; a.sinks = sinks;
    a.ent_pool = c ? c->ent : NULL; a.ent_pg = c ? c->ent_pages : ci_pages{};
    a.n_heads = n_heads; a.D = D; a.rot_dim = rot_dim; a.inv_freq = inv_freq; a.mscale = mscale;
    a.scale = 1.0f / sqrtf((float)D);
    /* decode rows: split over the keys when the (head, row) blocks would leave SMs idle */
    const int groups = (n_heads + V4_SPLIT_HEADS - 1) / V4_SPLIT_HEADS;
    int S = 2 * cb->sm_count / (groups * n);
    S = S > V4_SPLIT_MAX ? V4_SPLIT_MAX : S;
    if (v4_split_on() && D <= 512 && n_heads * n < cb->sm_count && S >= 2) {
        float *part = (float *)cb_scratch_get(cb, &cb->mla_work[0], (size_t)n * n_heads * S * (D + 2) * sizeof(float));
        if (!part) return;
        const dim3 grid((unsigned)groups, (unsigned)S, (unsigned)n), block(V4_SPLIT_HEADS * 32);
        if (D <= 128) cb_launch(cb, v4_attend_split_kernel<4>, grid, block, 0, a, part, S);
        else cb_launch(cb, v4_attend_split_kernel<16>, grid, block, 0, a, part, S);
        if (cb_launched(cb, "v4_attend split")) return;
        cb_launch(cb, v4_attend_comb_kernel, dim3((unsigned)n_heads, (unsigned)n), dim3(V4_THREADS),
                  ((size_t)D + S) * sizeof(float), a, (const float *)part, S);
        cb_launched(cb, "v4_attend combine");
        return;
    }
    cb_launch(cb, v4_attend_kernel, dim3((unsigned)n_heads, (unsigned)n), dim3(V4_THREADS), smem, a);
    cb_launched(cb, "v4_attend");
}

/* ---- the grouped output projection's gathers ----------------------------------------------- */

/* dir 0: xg[t] = x[t, g·cols ..+cols); dir 1: y[t, g·cols ..+cols) = xg[t] */
__global__ void v4_group_copy_kernel(float *dst, const float *src, int groups, int g, int cols, int dir) {
    pdl_enter();
    const int t = blockIdx.y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < cols; i += gridDim.x * blockDim.x) {
        const int64_t wide = (int64_t)t * groups * cols + (int64_t)g * cols + i, narrow = (int64_t)t * cols + i;
        if (dir) dst[wide] = src[narrow];
        else dst[narrow] = src[wide];
    }
}

void cb_group_copy(cuda_be *cb, float *dst, const float *src, int n, int groups, int g, int cols, int dir) {
    if (n <= 0 || cols <= 0) return;
    const int bx = (cols + V4_THREADS - 1) / V4_THREADS;
    cb_launch(cb, v4_group_copy_kernel, dim3(bx > 64 ? 64 : bx, n), dim3(V4_THREADS), 0, dst, src, groups, g, cols, dir);
    cb_launched(cb, "matmul_groups copy");
}
