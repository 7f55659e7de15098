/* quant.cu — MLX-quantized weights (ci_mat dtype CI_U32: affine 2/3/4/5/6/8-bit, mxfp4,
 * mxfp8; DeepSeek V4's FP4 experts are bound as mxfp4) on the device, read in their packed
 * form: the codes and the descriptor's scales / biases are placed as they are (weight(),
 * weight_q()), never widened at load.
 *
 * Decode (n <= CB_Q_GEMV_MAX_N token rows): qgemv_kernel, one warp per output row; lane l
 * takes the row's 32-column chunks l, l + 32, ... (a chunk is `bits` consecutive words, so
 * the warp reads the row front to back), decodes a chunk in registers (quant.cuh, q_chunk)
 * and dots it with every token row; f32 products and sums, one warp reduction per output.
 * Prefill: the matrix decoded to bf16 in scratch (cb->wdeq), then the bf16 GEMM (cb_gemm),
 * as fp8 weights are. Embedding rows, matmul_xw and the routed experts (moe.cu hands U32
 * layers to cb_q_moe_experts) follow the same split. Every kernel decodes with the same
 * q_chunk, so the paths agree on each weight bit for bit. */
#include "cuda_internal.h"
#include "quant.cuh"
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

enum { Q_WARPS = 4 };
/* Rows up to which decode kernels serve (above: widen to bf16 + GEMM): a GEMV pass over a
 * 4-bit matrix reads ~0.5 byte per weight for 8 rows; widening reads it once, writes 2 bytes
 * and the GEMM reads 2, so the GEMV pays up to ~5 passes (as fp8's threshold). */
#define CB_Q_GEMV_MAX_N (5 * CB_GEMV_MAX_N)

/* ---- views ------------------------------------------------------------------------------ */

static int sd_code(ci_dtype t) { return t == CI_F32 ? 0 : t == CI_F16 ? 1 : t == CI_BF16 ? 2 : 3; }

int cb_q_ok(const ci_mat *W) {
    if (W->dtype != CI_U32 || !W->data || !W->scale) return 0;
    const ci_qdesc *d = (const ci_qdesc *)W->scale;
    const int b = d->bits;
    if (!d->scales || (d->mode == CI_Q_AFFINE && !d->biases)) return 0;
    if (!(b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8)) return 0;
    if (d->mode < CI_Q_AFFINE || d->mode > CI_Q_MXFP8 || (d->group != 32 && d->group != 64 && d->group != 128)) return 0;
    const int64_t sc = d->stored_t ? W->rows : W->cols;
    return sc > 0 && sc % d->group == 0 && ((uintptr_t)W->data & 3) == 0;
}

/* The stored matrix of a view (matmul reads the rows as stored; matmul_xw swaps first). */
cb_qm cb_q_view(const ci_mat *W) {
    const ci_qdesc *d = (const ci_qdesc *)W->scale;
    cb_qm m;
    m.codes = (const uint8_t *)W->data;
    m.scales = d->scales;
    m.biases = d->mode == CI_Q_AFFINE ? d->biases : NULL;
    m.rows = W->rows;
    m.cols = W->cols;
    m.srow0 = W->scale_row0;
    m.mode = (int)d->mode;
    m.bits = d->bits;
    m.group = d->group;
    m.sd = d->mode == CI_Q_AFFINE ? sd_code(d->scale_dtype) : 3;
    return m;
}

/* ---- decode: y[n, rows] (op)= x[n, cols] · Wᵀ ----------------------------------------------- */

struct qg_args {
    cb_qm W[4];
    float *y[4];
    int count;               /* matrices (CB_SWIGLU: 2, gate then up, one output) */
    int op;                  /* CB_STORE, CB_ACC, CB_SWIGLU */
    int n;                   /* token rows, <= CB_GEMV_MAX_N */
    const float *x;          /* [n, cols] */
};

/* This lane's share of stored row r · x rows [0, n) (acc[t] += ...), x rows xs floats apart:
 * 16-byte loads when x is 16-byte aligned (chunks start at multiples of 32 floats). */
template <int BITS>
__device__ __forceinline__ void q_row_dot(const cb_qm &m, int64_t r, const float *x, int64_t xs, int n, int lane,
                                          float *acc) {
    const bool al = ((uintptr_t)x & 15) == 0 && (xs & 3) == 0;
    for (int64_t c0 = (int64_t)lane * 32; c0 < m.cols; c0 += 32 * 32) {
        float w[32];
        q_chunk<BITS>(m, r, c0, w);
#pragma unroll
        for (int t = 0; t < CB_GEMV_MAX_N; t++) {
            if (t >= n) break;
            const float *xr = x + t * xs + c0;
            float s = 0.0f;
            if (al) {
#pragma unroll
                for (int q = 0; q < 8; q++) {
                    const float4 v = __ldg((const float4 *)xr + q);
                    s = fmaf(w[4 * q], v.x, s);
                    s = fmaf(w[4 * q + 1], v.y, s);
                    s = fmaf(w[4 * q + 2], v.z, s);
                    s = fmaf(w[4 * q + 3], v.w, s);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++) s = fmaf(w[i], __ldg(xr + i), s);
            }
            acc[t] += s;
        }
    }
}

__device__ __forceinline__ float q_warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int BITS>
__global__ void __launch_bounds__(Q_WARPS * 32) qgemv_kernel(qg_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * Q_WARPS + warp;
    int i = 0;                                    /* which matrix: rows of W[0], then W[1], ... */
    if (a.op != CB_SWIGLU)
        while (i < a.count - 1 && r >= a.W[i].rows) r -= a.W[i++].rows;
    const cb_qm &m = a.W[i];
    if (r >= m.rows) return;
    const int64_t xs = m.cols;
    float acc[CB_GEMV_MAX_N], acc2[CB_GEMV_MAX_N];
#pragma unroll
    for (int t = 0; t < CB_GEMV_MAX_N; t++) acc[t] = acc2[t] = 0.0f;
    q_row_dot<BITS>(m, r, a.x, xs, a.n, lane, acc);
    if (a.op == CB_SWIGLU) q_row_dot<BITS>(a.W[1], r, a.x, xs, a.n, lane, acc2);
#pragma unroll
    for (int t = 0; t < CB_GEMV_MAX_N; t++) {
        if (t >= a.n) break;
        const float g = q_warp_sum(acc[t]);
        const float u = a.op == CB_SWIGLU ? q_warp_sum(acc2[t]) : 0.0f;
        if (lane) continue;
        float *y = a.y[i] + (int64_t)t * m.rows + r;
        if (a.op == CB_SWIGLU) *y = g / (1.0f + expf(-g)) * u;
        else if (a.op == CB_ACC) *y += g;
        else *y = g;
    }
}

/* One launch for count matrices of the same bits and cols (n <= CB_GEMV_MAX_N). */
static void qgemv(cuda_be *cb, int op, int count, float *const *ys, const float *x, int n, const ci_mat *const *Ws) {
    qg_args a;
    memset(&a, 0, sizeof a);
    a.count = count;
    a.op = op;
    a.n = n;
    a.x = x;
    int64_t rows = 0;
    for (int i = 0; i < count; i++) {
        a.W[i] = cb_q_view(Ws[i]);
        a.y[i] = op == CB_SWIGLU ? ys[0] : ys[i];
        rows += Ws[i]->rows;
    }
    if (op == CB_SWIGLU) rows = Ws[0]->rows;
    dim3 grid((unsigned)((rows + Q_WARPS - 1) / Q_WARPS)), block(Q_WARPS * 32);
    switch (a.W[0].bits) {
    case 2: cb_launch(cb, qgemv_kernel<2>, grid, block, 0, a); break;
    case 3: cb_launch(cb, qgemv_kernel<3>, grid, block, 0, a); break;
    case 4: cb_launch(cb, qgemv_kernel<4>, grid, block, 0, a); break;
    case 5: cb_launch(cb, qgemv_kernel<5>, grid, block, 0, a); break;
    case 6: cb_launch(cb, qgemv_kernel<6>, grid, block, 0, a); break;
    default: cb_launch(cb, qgemv_kernel<8>, grid, block, 0, a); break;
    }
    cb_launched(cb, "quantized gemv");
}

/* ---- widening: a matrix decoded into scratch ----------------------------------------------- */

/* dst [rows, cols] = the stored matrix as T (bf16 rounded to nearest even, or f32); one
 * thread per 32-column chunk. */
template <int BITS, typename T>
__global__ void qwiden_kernel(T *dst, cb_qm m) {
    pdl_enter();
    const int64_t chunks = m.cols / 32, total = m.rows * chunks;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / chunks, c0 = (k - r * chunks) * 32;
        float w[32];
        q_chunk<BITS>(m, r, c0, w);
        T *d = dst + r * m.cols + c0;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            if constexpr (sizeof(T) == 4) d[i] = w[i];
            else d[i] = __bfloat16_as_ushort(__float2bfloat16_rn(w[i]));
        }
    }
}

template <typename T>
static void qwiden(cuda_be *cb, T *dst, const cb_qm &m) {
    const int64_t total = m.rows * (m.cols / 32);
    unsigned blocks = (unsigned)((total + 255) / 256);
    if (blocks > 4u * (unsigned)cb->sm_count) blocks = 4u * (unsigned)cb->sm_count;
    if (blocks < 1) blocks = 1;
    switch (m.bits) {
    case 2: cb_launch(cb, qwiden_kernel<2, T>, dim3(blocks), dim3(256), 0, dst, m); break;
    case 3: cb_launch(cb, qwiden_kernel<3, T>, dim3(blocks), dim3(256), 0, dst, m); break;
    case 4: cb_launch(cb, qwiden_kernel<4, T>, dim3(blocks), dim3(256), 0, dst, m); break;
    case 5: cb_launch(cb, qwiden_kernel<5, T>, dim3(blocks), dim3(256), 0, dst, m); break;
    case 6: cb_launch(cb, qwiden_kernel<6, T>, dim3(blocks), dim3(256), 0, dst, m); break;
    default: cb_launch(cb, qwiden_kernel<8, T>, dim3(blocks), dim3(256), 0, dst, m); break;
    }
    cb_launched(cb, "quantized widen");
}

/* ---- the matmul family ---------------------------------------------------------------------- */

void cb_q_matmul(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W, int acc) {
    if (cb->failed || n <= 0 || W->rows <= 0) return;
    if (n > CB_Q_GEMV_MAX_N) {
        __nv_bfloat16 *wd = (__nv_bfloat16 *)cb_scratch_get(cb, &cb->wdeq, (size_t)W->rows * (size_t)W->cols * 2);
        if (!wd) return;
        qwiden(cb, (uint16_t *)wd, cb_q_view(W));
        ci_mat B;
        memset(&B, 0, sizeof B);
        B.data = wd;
        B.dtype = CI_BF16;
        B.rows = W->rows;
        B.cols = W->cols;
        if (cb_gemm(cb, y, x, n, &B, acc ? 1.0f : 0.0f) == 0) return;
        if (!cb->failed) cb_fail_msg(cb, "quantized matmul: the bf16 GEMM refused the widened weight");
        return;
    }
    for (int t0 = 0; t0 < n; t0 += CB_GEMV_MAX_N) {
        const int k = n - t0 < CB_GEMV_MAX_N ? n - t0 : CB_GEMV_MAX_N;
        float *yy = y + (size_t)t0 * W->rows;
        qgemv(cb, acc ? CB_ACC : CB_STORE, 1, &yy, x + (size_t)t0 * W->cols, k, &W);
    }
}

/* matmul_n / matmul_swiglu: one launch when the matrices share bits and cols and n fits one
 * GEMV launch; else matrix by matrix (swiglu then the swiglu op). Returns 1 if it took the call. */
int cb_q_matmul_n(cuda_be *cb, int op, int count, float *const *ys, float *u, const float *x, int n,
                  const ci_mat *const *Ws) {
    int same = count <= 4 && n <= CB_GEMV_MAX_N;
    for (int i = 0; i < count; i++) {
        if (!cb_q_ok(Ws[i])) return 0;
        same &= ((const ci_qdesc *)Ws[i]->scale)->bits == ((const ci_qdesc *)Ws[0]->scale)->bits &&
                Ws[i]->cols == Ws[0]->cols && Ws[i]->rows > 0;
    }
    if (cb->failed || n <= 0) return 1;
    if (op == CB_SWIGLU) same &= Ws[0]->rows == Ws[1]->rows;
    if (same) { qgemv(cb, op, count, ys, x, n, Ws); return 1; }
    if (op == CB_SWIGLU) {
        cb_q_matmul(cb, ys[0], x, n, Ws[0], 0);
        cb_q_matmul(cb, u, x, n, Ws[1], 0);
        cb_swiglu(cb, ys[0], u, (int64_t)n * Ws[0]->rows);
        return 1;
    }
    for (int i = 0; i < count; i++) cb_q_matmul(cb, ys[i], x, n, Ws[i], 0);
    return 1;
}

/* y[n, W.cols] = x[n, W.rows] · W: a stored-transposed view (MLX MultiLinear) is a matmul
 * with the stored rows; otherwise the view decoded to f32 in scratch and the f32 launcher. */
void cb_q_matmul_xw(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W) {
    if (cb->failed || n <= 0) return;
    const ci_qdesc *d = (const ci_qdesc *)W->scale;
    if (d->stored_t) {
        ci_mat s = *W;
        s.rows = W->cols;
        s.cols = W->rows;
        cb_q_matmul(cb, y, x, n, &s, 0);
        return;
    }
    float *wd = (float *)cb_scratch_get(cb, &cb->wdeq, (size_t)W->rows * (size_t)W->cols * 4);
    if (!wd) return;
    qwiden(cb, wd, cb_q_view(W));
    ci_mat F;
    memset(&F, 0, sizeof F);
    F.data = wd;
    F.dtype = CI_F32;
    F.rows = W->rows;
    F.cols = W->cols;
    cb_matmul_xw_launch(cb, y, x, n, &F);
}

/* ---- embedding rows ------------------------------------------------------------------------ */

template <int BITS>
__global__ void qembed_kernel(float *out, cb_qm m, const int32_t *ids, int n) {
    pdl_enter();
    const int64_t chunks = m.cols / 32, total = (int64_t)n * chunks;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = k / chunks, c0 = (k - t * chunks) * 32;
        float w[32];
        q_chunk<BITS>(m, ids[t], c0, w);
#pragma unroll
        for (int i = 0; i < 32; i++) out[t * m.cols + c0 + i] = w[i];
    }
}

void cb_q_embed(cuda_be *cb, float *out, const ci_mat *E, const int32_t *ids, int n) {
    if (cb->failed || n <= 0) return;
    const cb_qm m = cb_q_view(E);
    const int64_t total = (int64_t)n * (m.cols / 32);
    unsigned blocks = (unsigned)((total + 127) / 128);
    if (blocks > 4u * (unsigned)cb->sm_count) blocks = 4u * (unsigned)cb->sm_count;
    if (blocks < 1) blocks = 1;
    switch (m.bits) {
    case 2: cb_launch(cb, qembed_kernel<2>, dim3(blocks), dim3(128), 0, out, m, ids, n); break;
    case 3: cb_launch(cb, qembed_kernel<3>, dim3(blocks), dim3(128), 0, out, m, ids, n); break;
    case 4: cb_launch(cb, qembed_kernel<4>, dim3(blocks), dim3(128), 0, out, m, ids, n); break;
    case 5: cb_launch(cb, qembed_kernel<5>, dim3(blocks), dim3(128), 0, out, m, ids, n); break;
    case 6: cb_launch(cb, qembed_kernel<6>, dim3(blocks), dim3(128), 0, out, m, ids, n); break;
    default: cb_launch(cb, qembed_kernel<8>, dim3(blocks), dim3(128), 0, out, m, ids, n); break;
    }
    cb_launched(cb, "quantized embed");
}

/* ---- routed experts ---------------------------------------------------------------------------
 * A layer's quantized experts as device tables (built on the layer's first eager call, keyed
 * by ci_moe.w_up like moe.cu's): per expert e and matrix j (0 gate, 1 up, 2 down) its codes,
 * scales, biases and first scale row at 3e + j; mode / bits / group / scale type per matrix
 * kind, the same for every expert (checked). */
struct cb_qmoe_tab {
    const void *key;
    int E, I, X, relu2;
    int mode[3], bits[3], group[3], sd[3];
    const uint8_t **codes;       /* device arrays [3E] */
    const void **scales, **biases;
    int64_t *srow0;
    cb_qmoe_tab *next;
};

struct qe_args {
    const uint8_t *const *codes;
    const void *const *scales, *const *biases;
    const int64_t *srow0;
    int mode[3], bits[3], group[3], sd[3];
    int X, I, K, relu2, acc;
    float limit;
    const int32_t *sel;
    const float *wt;
    const float *x;              /* [n, X] */
    float *h;                    /* [n·K, I] */
    float *out;                  /* [n, X] */
};

__device__ __forceinline__ cb_qm qe_mat(const qe_args &a, int e, int j) {
    cb_qm m;
    const int i = 3 * e + j;
    m.codes = a.codes[i];
    m.scales = a.scales[i];
    m.biases = a.biases[i];
    m.srow0 = a.srow0[i];
    m.rows = j == 2 ? a.X : a.I;
    m.cols = j == 2 ? a.I : a.X;
    m.mode = a.mode[j]; m.bits = a.bits[j]; m.group = a.group[j]; m.sd = a.sd[j];
    return m;
}

/* this lane's share of stored row r · x (one token row) */
__device__ __forceinline__ float qe_dot(const cb_qm &m, int64_t r, const float *x, int lane) {
    float acc = 0.0f;
    switch (m.bits) {
    case 2: q_row_dot<2>(m, r, x, 0, 1, lane, &acc); break;
    case 3: q_row_dot<3>(m, r, x, 0, 1, lane, &acc); break;
    case 4: q_row_dot<4>(m, r, x, 0, 1, lane, &acc); break;
    case 5: q_row_dot<5>(m, r, x, 0, 1, lane, &acc); break;
    case 6: q_row_dot<6>(m, r, x, 0, 1, lane, &acc); break;
    default: q_row_dot<8>(m, r, x, 0, 1, lane, &acc); break;
    }
    return acc;
}

/* h[p, r] = act(gate_e row r · x_t, up_e row r · x_t) for entry p = (t, k): a warp per row */
__global__ void __launch_bounds__(Q_WARPS * 32) qe_gate_up_kernel(qe_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * Q_WARPS + warp, p = blockIdx.y;
    if (r >= a.I) return;
    const int e = a.sel[p], t = p / a.K;
    const float *xr = a.x + (int64_t)t * a.X;
    float u = q_warp_sum(qe_dot(qe_mat(a, e, 1), r, xr, lane));
    float g = a.relu2 ? 0.0f : q_warp_sum(qe_dot(qe_mat(a, e, 0), r, xr, lane));
    if (lane) return;
    float hv;
    if (a.relu2) {
        const float v = u > 0.0f ? u : 0.0f;
        hv = v * v;
    } else {
        if (a.limit > 0.0f) {
            g = fminf(g, a.limit);
            u = fminf(fmaxf(u, -a.limit), a.limit);
        }
        hv = g / (1.0f + expf(-g)) * u;
    }
    a.h[(int64_t)p * a.I + r] = hv;
}

/* out[t, r] (+)= Σ_k w[t, k] · (down_e row r · h[t, k]): a warp per output row */
__global__ void __launch_bounds__(Q_WARPS * 32) qe_down_kernel(qe_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * Q_WARPS + warp, t = blockIdx.y;
    if (r >= a.X) return;
    float acc = 0.0f;
    for (int k = 0; k < a.K; k++) {
        const int p = t * a.K + k, e = a.sel[p];
        acc = fmaf(a.wt[p], qe_dot(qe_mat(a, e, 2), r, a.h + (int64_t)p * a.I, lane), acc);
    }
    acc = q_warp_sum(acc);
    if (lane == 0) {
        float *o = a.out + (int64_t)t * a.X + r;
        *o = a.acc ? *o + acc : acc;
    }
}

/* prefill: every matrix i = 3e + j of the layer decoded to bf16 at dst + i·I·X (gate and up
 * [I, X], down [X, I]: the same count), its address into wtab[i] (the table the grouped GEMM
 * reads); one thread per 32-column chunk */
__global__ void qe_widen_kernel(uint16_t *dst, const void **wtab, qe_args a) {
    pdl_enter();
    const int i = blockIdx.y, e = i / 3, j = i % 3;
    const int64_t per = (int64_t)a.I * a.X;
    uint16_t *d = dst + (int64_t)i * per;
    if (blockIdx.x == 0 && threadIdx.x == 0) wtab[i] = d;
    if (j == 0 && a.relu2) return;
    const cb_qm m = qe_mat(a, e, j);
    const int64_t chunks = m.cols / 32, total = m.rows * chunks;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / chunks, c0 = (k - r * chunks) * 32;
        float w[32];
        switch (m.bits) {
        case 2: q_chunk<2>(m, r, c0, w); break;
        case 3: q_chunk<3>(m, r, c0, w); break;
        case 4: q_chunk<4>(m, r, c0, w); break;
        case 5: q_chunk<5>(m, r, c0, w); break;
        case 6: q_chunk<6>(m, r, c0, w); break;
        default: q_chunk<8>(m, r, c0, w); break;
        }
        uint16_t *o = d + r * m.cols + c0;
#pragma unroll
        for (int q = 0; q < 32; q++) o[q] = __bfloat16_as_ushort(__float2bfloat16_rn(w[q]));
    }
}

static const size_t Q_WIDEN_MAX = (size_t)8 << 30;   /* widened layer bytes; above: GEMV row groups */

static const cb_qmoe_tab *qmoe_tab(cuda_be *cb, const ci_moe *m) {
    for (cb_qmoe_tab *t = cb->qmoe_tabs; t; t = t->next)
        if (t->key == m->w_up) return t;
    const int E = m->n_experts, I = m->inter, X = m->hidden;
    const ci_mat *ref[3] = { m->relu2 ? NULL : &m->w_gate[0], &m->w_up[0], &m->w_down[0] };
    char msg[200];
    for (int e = 0; e < E; e++)
        for (int j = 0; j < 3; j++) {
            const ci_mat *W = j == 0 ? (m->relu2 ? NULL : &m->w_gate[e]) : j == 1 ? &m->w_up[e] : &m->w_down[e];
            if (!W) continue;
            const ci_qdesc *d = (const ci_qdesc *)W->scale, *d0 = (const ci_qdesc *)ref[j]->scale;
            const long long want_r = j == 2 ? X : I, want_c = j == 2 ? I : X;
            if (!cb_q_ok(W) || W->rows != want_r || W->cols != want_c || d->stored_t || d->mode != d0->mode ||
                d->bits != d0->bits || d->group != d0->group || d->scale_dtype != d0->scale_dtype) {
                snprintf(msg, sizeof msg, "MoE expert %d: matrix %d is not a [%lld, %lld] MLX-quantized view packed as "
                         "expert 0's", e, j, want_r, want_c);
                cb_fail_msg(cb, msg);
                return NULL;
            }
        }
    cb_qmoe_tab *t = (cb_qmoe_tab *)calloc(1, sizeof *t);
    const size_t n3 = (size_t)3 * E;
    const void **hp = (const void **)calloc(3 * n3, sizeof(void *));
    int64_t *hr = (int64_t *)calloc(n3, sizeof(int64_t));
    if (!t || !hp || !hr) {
        free(t); free(hp); free(hr);
        cb_fail_msg(cb, "out of host memory for a quantized MoE table");
        return NULL;
    }
    t->key = m->w_up;
    t->E = E; t->I = I; t->X = X; t->relu2 = m->relu2;
    for (int j = 0; j < 3; j++) {
        if (!ref[j]) continue;
        const ci_qdesc *d = (const ci_qdesc *)ref[j]->scale;
        t->mode[j] = (int)d->mode; t->bits[j] = d->bits; t->group[j] = d->group;
        t->sd[j] = d->mode == CI_Q_AFFINE ? sd_code(d->scale_dtype) : 3;
    }
    for (int e = 0; e < E; e++)
        for (int j = 0; j < 3; j++) {
            const ci_mat *W = j == 0 ? (m->relu2 ? NULL : &m->w_gate[e]) : j == 1 ? &m->w_up[e] : &m->w_down[e];
            if (!W) continue;
            const ci_qdesc *d = (const ci_qdesc *)W->scale;
            hp[3 * e + j] = W->data;
            hp[n3 + 3 * e + j] = d->scales;
            hp[2 * n3 + 3 * e + j] = d->mode == CI_Q_AFFINE ? d->biases : NULL;
            hr[3 * e + j] = W->scale_row0;
        }
    void *dp = NULL, *dr = NULL;
    int bad = CB_CHECK(cb, "cudaMalloc (quantized MoE table)", cudaMalloc(&dp, 3 * n3 * sizeof(void *))) ||
              CB_CHECK(cb, "cudaMalloc (quantized MoE table)", cudaMalloc(&dr, n3 * sizeof(int64_t))) ||
              CB_CHECK(cb, "quantized MoE table upload", cudaMemcpy(dp, hp, 3 * n3 * sizeof(void *), cudaMemcpyHostToDevice)) ||
              CB_CHECK(cb, "quantized MoE table upload", cudaMemcpy(dr, hr, n3 * sizeof(int64_t), cudaMemcpyHostToDevice));
    free(hp); free(hr);
    if (bad) { cudaFree(dp); cudaFree(dr); free(t); return NULL; }
    t->codes = (const uint8_t **)dp;
    t->scales = (const void **)dp + n3;
    t->biases = (const void **)dp + 2 * n3;
    t->srow0 = (int64_t *)dr;
    t->next = cb->qmoe_tabs;
    cb->qmoe_tabs = t;
    return t;
}

void cb_quant_free(cuda_be *cb) {
    for (cb_qmoe_tab *t = cb->qmoe_tabs, *nx; t; t = nx) {
        nx = t->next;
        cudaFree((void *)t->codes);
        cudaFree(t->srow0);
        free(t);
    }
    cb->qmoe_tabs = NULL;
}

void cb_q_moe_experts(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                      const ci_moe *m, int acc) {
    if (cb->failed || n <= 0) return;
    const cb_qmoe_tab *tab = qmoe_tab(cb, m);
    if (!tab) return;
    qe_args a;
    memset(&a, 0, sizeof a);
    a.codes = tab->codes; a.scales = tab->scales; a.biases = tab->biases; a.srow0 = tab->srow0;
    for (int j = 0; j < 3; j++) {
        a.mode[j] = tab->mode[j]; a.bits[j] = tab->bits[j]; a.group[j] = tab->group[j]; a.sd[j] = tab->sd[j];
    }
    a.X = m->hidden; a.I = m->inter; a.K = m->top_k; a.relu2 = m->relu2; a.limit = m->act_limit; a.acc = acc;
    const size_t per = (size_t)tab->I * tab->X, count = 3 * (size_t)tab->E;
    cb_moe_tab wide;
    memset(&wide, 0, sizeof wide);
    wide.key = m->w_up;
    wide.E = tab->E; wide.I = tab->I; wide.X = tab->X;
    wide.dtype = CI_BF16;
    wide.relu2 = tab->relu2;
    wide.scale_dtype = -1;
    if (n > CB_GEMV_MAX_N && count * per * 2 <= Q_WIDEN_MAX && cb_moe_grouped_shape_ok(m, &wide)) {
        uint16_t *wd = (uint16_t *)cb_scratch_get(cb, &cb->wdeq, count * per * 2 + count * sizeof(void *) + 16);
        if (!wd) return;
        const void **wtab = (const void **)(((uintptr_t)(wd + count * per) + 15) & ~(uintptr_t)15);
        unsigned bx = (unsigned)((per / 32 + 255) / 256);
        if (bx > 64) bx = 64;
        if (bx < 1) bx = 1;
        cb_launch(cb, qe_widen_kernel, dim3(bx, (unsigned)count), dim3(256), 0, wd, wtab, a);
        if (cb_launched(cb, "quantized moe widen")) return;
        wide.w = wtab;
        float *y = out;
        if (acc && !(y = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)n * m->hidden * sizeof(float)))) return;
        cb_moe_grouped(cb, y, x, n, sel, w, m, &wide);
        if (acc) cb_add(cb, out, y, (int64_t)n * m->hidden);
        return;
    }
    const int K = m->top_k, chunk = n < CB_GEMV_MAX_N ? n : CB_GEMV_MAX_N;
    float *h = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)chunk * K * m->inter * sizeof(float));
    if (!h) return;
    a.h = h;
    dim3 b(Q_WARPS * 32);
    for (int t0 = 0; t0 < n; t0 += CB_GEMV_MAX_N) {
        const int k = n - t0 < CB_GEMV_MAX_N ? n - t0 : CB_GEMV_MAX_N;
        a.sel = sel + (int64_t)t0 * K;
        a.wt = w + (int64_t)t0 * K;
        a.x = x + (int64_t)t0 * a.X;
        a.out = out + (int64_t)t0 * a.X;
        cb_launch(cb, qe_gate_up_kernel, dim3((unsigned)((a.I + Q_WARPS - 1) / Q_WARPS), (unsigned)(k * K)), b, 0, a);
        cb_launch(cb, qe_down_kernel, dim3((unsigned)((a.X + Q_WARPS - 1) / Q_WARPS), (unsigned)k), b, 0, a);
    }
    cb_launched(cb, "quantized moe_experts");
}
