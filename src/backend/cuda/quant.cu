/* quant.cu — MLX-quantized weights (ci_mat dtype CI_U32: affine 2/3/4/5/6/8-bit, mxfp4,
 * mxfp8; DeepSeek V4's FP4 experts are bound as mxfp4) on the device, read in their packed
 * form: the codes and the descriptor's scales / biases are placed as they are (weight(),
 * weight_q()), never widened at load.
 *
 * Decode (n <= CB_Q_GEMV_MAX_N token rows, CB_GEMV_MAX_N per launch): affine 4- and 8-bit
 * codes on tensor cores (quant_mma.cuh: f32-class sums, another order, so not these kernels'
 * bits; CINFER_CUDA_QMMA=0 keeps them here); the rest, and those with QMMA off: qgemv_kernel, one warp
 * per output row; lane l takes the row's 32-column chunks l, l + 32, ... (a chunk is `bits`
 * consecutive words, so the warp reads the row front to back), decodes a chunk in registers
 * (quant.cuh, q_chunk) and dots it with every token row; f32 products and sums, one warp reduction per output.
 * Prefill: the matrix decoded to f16 in scratch (cb->wdeq), then the f16 GEMM (cb_gemm), as
 * fp8 weights are (f16, not bf16: cuda_internal.h, f16_sat). Embedding rows, matmul_xw and
 * the routed experts (moe.cu hands U32 layers to cb_q_moe_experts, quant_moe.cu) follow the
 * same split. Every kernel decodes with
 * the same q_chunk, so the paths agree on each weight bit for bit. weight_q's descriptors
 * (cb_weight_q) live here too. */
#include "cuda_internal.h"
#include "quant.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

enum { Q_WARPS = 4 };
/* Rows up to which decode kernels serve (above: widen to f16 + GEMM): a GEMV pass over a
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
    if (d->mode < CI_Q_AFFINE || d->mode > CI_Q_MXFP8) return 0;
    if (d->group != 32 && d->group != 64 && d->group != 128) return 0;
    const int64_t sc = d->stored_t ? W->rows : W->cols;
    /* quant.cuh indexes a row's chunks and groups in 32 bits */
    return sc > 0 && sc < ((int64_t)1 << 31) && sc % d->group == 0 && ((uintptr_t)W->data & 3) == 0;
}

/* CINFER_CUDA_Q_AFFINE_LOOP (default 1; 0 to measure against): which form of q_chunk's
 * arithmetic the kernels take (quant.cuh; the same values either way). */
int cb_q_aloop(void) {
    static const int v = cb_env_switch("CINFER_CUDA_Q_AFFINE_LOOP", 1);
    return v;
}

/* CINFER_CUDA_Q_FP_LOOP=1: mxfp4 / mxfp8 codes (V4's FP4 experts among them) decoded in loops
 * of their own, as the affine loop that measured +19% (quant.cuh; the same values). Default 0:
 * written on 2026-12-02 after the device time was spent, not measured yet. */
int cb_q_fploop(void) {
    static const int v = cb_env_switch("CINFER_CUDA_Q_FP_LOOP", 0);
    return v;
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
    m.aloop = cb_q_aloop();
    m.fploop = cb_q_fploop();
    return m;
}

/* ---- placement ------------------------------------------------------------------------------ */

/* An MLX-quantized tensor's descriptor: a host copy whose scales / biases point at their
 * device copies (weight()), found again by the host descriptor's address. A later call
 * that reaches further places the longer ranges and updates the copy in place (views placed
 * before keep working: the old device ranges stay alive, weight() retires them). */
const ci_qdesc *cb_weight_q(ci_backend *be, const ci_qdesc *d, size_t param_bytes) {
    cuda_be *cb = (cuda_be *)be;
    if (!d) return NULL;
    int lo = 0, hi = cb->n_qds;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((uintptr_t)cb->qds[mid].host < (uintptr_t)d) lo = mid + 1;
        else hi = mid;
    }
    cb_qd *q = lo < cb->n_qds && cb->qds[lo].host == d ? &cb->qds[lo] : NULL;
    if (q && q->param_bytes >= param_bytes) return q->dev;
    const void *s = be->weight(be, d->scales, param_bytes);
    const void *b = d->biases ? be->weight(be, d->biases, param_bytes) : NULL;
    if (!s || (d->biases && !b)) return NULL;
    if (!q) {
        if (cb->n_qds == cb->cap_qds) {
            int cap = cb->cap_qds ? 2 * cb->cap_qds : 256;
            cb_qd *t = (cb_qd *)realloc(cb->qds, (size_t)cap * sizeof *t);
            if (!t) { snprintf(be->last_error, sizeof be->last_error, "CUDA: out of host memory"); return NULL; }
            cb->qds = t;
            cb->cap_qds = cap;
        }
        ci_qdesc *dev = (ci_qdesc *)malloc(sizeof *dev);
        if (!dev) { snprintf(be->last_error, sizeof be->last_error, "CUDA: out of host memory"); return NULL; }
        memmove(cb->qds + lo + 1, cb->qds + lo, (size_t)(cb->n_qds - lo) * sizeof *cb->qds);
        cb->n_qds++;
        q = &cb->qds[lo];
        q->host = d;
        q->dev = dev;
    }
    *q->dev = *d;
    q->dev->scales = s;
    q->dev->biases = b;
    q->param_bytes = param_bytes;
    return q->dev;
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
    q_row_dot<BITS, CB_GEMV_MAX_N>(m, r, a.x, xs, a.n, lane, acc);
    if (a.op == CB_SWIGLU) q_row_dot<BITS, CB_GEMV_MAX_N>(a.W[1], r, a.x, xs, a.n, lane, acc2);
#pragma unroll
    for (int t = 0; t < CB_GEMV_MAX_N; t++) {
        if (t >= a.n) break;
        const float g = warp_sum(acc[t]);
        const float u = a.op == CB_SWIGLU ? warp_sum(acc2[t]) : 0.0f;
        if (lane) continue;
        float *y = a.y[i] + (int64_t)t * m.rows + r;
        if (a.op == CB_SWIGLU) *y = g / (1.0f + expf(-g)) * u;
        else if (a.op == CB_ACC) *y += g;
        else *y = g;
    }
}

/* One token row (decode at batch 1) with two rows per warp sharing each x chunk
 * (q_row_dot_pair): CB_SWIGLU pairs gate row r with up row r; otherwise (one matrix) a warp
 * takes rows 2w and 2w + 1. The same sums as qgemv_kernel, in its order. */
template <int BITS>
__global__ void __launch_bounds__(Q_WARPS * 32) qgemv_pair_kernel(qg_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t w = (int64_t)blockIdx.x * Q_WARPS + warp;
    const cb_qm &m = a.W[0];
    const bool sw = a.op == CB_SWIGLU;
    const int64_t ra = sw ? w : 2 * w, rb = sw ? w : ra + 1;
    if (ra >= m.rows) return;
    float sa = 0.0f, sb = 0.0f;
    if (sw || rb < m.rows) q_row_dot_pair<BITS>(m, ra, sw ? a.W[1] : m, rb, a.x, lane, &sa, &sb);
    else q_row_dot<BITS, 1>(m, ra, a.x, m.cols, 1, lane, &sa);
    sa = warp_sum(sa);
    sb = warp_sum(sb);
    if (lane) return;
    float *y = a.y[0];
    if (sw) y[ra] = sa / (1.0f + expf(-sa)) * sb;
    else if (a.op == CB_ACC) {
        y[ra] += sa;
        if (rb < m.rows) y[rb] += sb;
    } else {
        y[ra] = sa;
        if (rb < m.rows) y[rb] = sb;
    }
}

/* ---- qmv: batch-1 decode with rows resolved once and x shared by R rows ---------------------
 * The kernels above give each warp one output row (two with pairs): a lane recomputes the
 * chunk's code and scale offsets per chunk and loads 32 x floats per 16 bytes of 4-bit codes,
 * and a warp's whole life is a couple of chunks per lane, so at batch 1 they ran latency-bound
 * (ncu on the H200, 2026-12-02, Qwen3-30B-A3B dims mlx4: the fused q/k/v GEMV 19 µs for 5.9 MB,
 * the 151936-row head 380 µs for 175 MB). qmv_kernel gives a warp R consecutive output rows
 * (SW: R gate rows and the R up rows of the same outputs), resolves each row's pointers once
 * (q_row_of), and per 32-column chunk loads x once for all of its rows and every row's codes
 * before any arithmetic. Lane l takes chunks l, l + 32, ...; each row's sum is its lanes'
 * q_dot32 partials reduced over the warp (a different order from qgemv_kernel's, so not the
 * same bits). Rows of a fused launch may span matrices (matmul_n: count matrices of the same
 * bits and cols). */
template <int BITS, int R, bool SW>
__global__ void __launch_bounds__(Q_WARPS * 32) qmv_kernel(qg_args a) {
    pdl_enter();
    constexpr int NR = SW ? 2 * R : R;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t g0 = ((int64_t)blockIdx.x * Q_WARPS + warp) * R;
    const q_kind kd = q_kind_of(a.W[0]);
    q_row rw[NR];
    int64_t orow[R];
    int oi[R];
    bool live[R], vec[NR];
#pragma unroll
    for (int j = 0; j < R; j++) {
        int64_t r = g0 + j;
        int i = 0;
        if (!SW)
            while (i < a.count - 1 && r >= a.W[i].rows) r -= a.W[i++].rows;
        live[j] = r < a.W[i].rows;
        oi[j] = i;
        orow[j] = r;
        rw[j] = q_row_of<BITS>(a.W[i], live[j] ? r : 0);
        vec[j] = BITS % 4 == 0 && ((uintptr_t)rw[j].codes & 15) == 0;
        if (SW) {
            rw[R + j] = q_row_of<BITS>(a.W[1], live[j] ? r : 0);
            vec[R + j] = BITS % 4 == 0 && ((uintptr_t)rw[R + j].codes & 15) == 0;
        }
    }
    if (!live[0]) return;
    const int cpr = (int)(a.W[0].cols >> 5);
    const bool al = ((uintptr_t)a.x & 15) == 0;
    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.0f;
    for (int c = lane; c < cpr; c += 32) {
        uint32_t u[NR][BITS];
        float s[NR], b[NR];
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (live[j % R]) q_row_load<BITS>(rw[j], kd, vec[j], (uint32_t)c, u[j], &s[j], &b[j]);
        float xv[32];
        q_load_x32(a.x + (int64_t)c * 32, al, xv);
#pragma unroll
        for (int j = 0; j < NR; j++)
            if (live[j % R]) acc[j] += q_dot32<BITS>(u[j], kd.mode, s[j], b[j], xv);
    }
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = warp_sum(acc[j]);
#pragma unroll
    for (int j = 0; j < R; j++) {
        if (lane != j || !live[j]) continue;
        float *y = a.y[oi[j]] + orow[j];
        if (SW) *y = acc[j] / (1.0f + expf(-acc[j])) * acc[R + j];
        else if (a.op == CB_ACC) *y += acc[j];
        else *y = acc[j];
    }
}

/* CINFER_CUDA_QMV (default 1; 0: the kernels above at batch 1, to measure against) and
 * CINFER_CUDA_QMV_R (rows a warp loads per chunk: 1 or 2, default 2; SwiGLU: one gate and one
 * up row). Measured on the H200 (2026-12-02, mlx4 Qwen3-30B-A3B dims, 12 layers, decode after
 * 512, alternating, 2 rounds): QMV=0 456.5 / 461.7 tok/s, R 4 (SwiGLU 2 + 2; since removed)
 * 562.5 / 565.5, R 2 584.9 / 591.8. Tried and removed (bench/RESULTS.md): two chunks a lane in
 * flight, and registers capped for 6 or 8 blocks an SM (spills): none faster. */
int cb_q_qmv(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QMV", 1);
    return v;
}
static int qmv_rows(void) {
    static const int v = cb_env_int("CINFER_CUDA_QMV_R", 2, 1, 2);
    return v;
}

/* CINFER_CUDA_Q_GEMM (default 1; 0: widen the layer to f16 and run the f16 grouped GEMM, to
 * measure against): quantized experts' prefill through the grouped GEMM's decoding B loader */
int cb_q_gemm(void) {
    static const int v = cb_env_switch("CINFER_CUDA_Q_GEMM", 1);
    return v;
}

template <int R, bool SW>
static void qmv_launch_r(cuda_be *cb, const qg_args &a, int bits, int64_t rows) {
    const int64_t warps = (rows + R - 1) / R;
    dim3 grid((unsigned)((warps + Q_WARPS - 1) / Q_WARPS)), block(Q_WARPS * 32);
    switch (bits) {
    case 2: cb_launch(cb, qmv_kernel<2, R, SW>, grid, block, 0, a); break;
    case 3: cb_launch(cb, qmv_kernel<3, R, SW>, grid, block, 0, a); break;
    case 4: cb_launch(cb, qmv_kernel<4, R, SW>, grid, block, 0, a); break;
    case 5: cb_launch(cb, qmv_kernel<5, R, SW>, grid, block, 0, a); break;
    case 6: cb_launch(cb, qmv_kernel<6, R, SW>, grid, block, 0, a); break;
    default: cb_launch(cb, qmv_kernel<8, R, SW>, grid, block, 0, a); break;
    }
    cb_launched(cb, "quantized gemv (qmv)");
}

static void qmv_launch(cuda_be *cb, const qg_args &a, int64_t rows) {
    const int bits = a.W[0].bits;
    if (a.op == CB_SWIGLU) qmv_launch_r<1, true>(cb, a, bits, rows);   /* a gate and an up row a warp */
    else if (qmv_rows() == 1) qmv_launch_r<1, false>(cb, a, bits, rows);
    else qmv_launch_r<2, false>(cb, a, bits, rows);
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
    if (cb_qt_matmul(cb, op, count, ys, x, n, a.W, NULL, 0.0f)) return;
    bool same_kind = true;   /* qmv: one q_kind for every row of the launch */
    for (int i = 1; i < count; i++)
        same_kind &= a.W[i].mode == a.W[0].mode && a.W[i].group == a.W[0].group && a.W[i].sd == a.W[0].sd;
    if (n == 1 && same_kind && cb_q_qmv()) { qmv_launch(cb, a, rows); return; }
    if (n == 1 && cb->q_pair && (op == CB_SWIGLU || count == 1)) {
        const int64_t warps = op == CB_SWIGLU ? rows : (rows + 1) / 2;
        dim3 grid((unsigned)((warps + Q_WARPS - 1) / Q_WARPS)), block(Q_WARPS * 32);
        switch (a.W[0].bits) {
        case 2: cb_launch(cb, qgemv_pair_kernel<2>, grid, block, 0, a); break;
        case 3: cb_launch(cb, qgemv_pair_kernel<3>, grid, block, 0, a); break;
        case 4: cb_launch(cb, qgemv_pair_kernel<4>, grid, block, 0, a); break;
        case 5: cb_launch(cb, qgemv_pair_kernel<5>, grid, block, 0, a); break;
        case 6: cb_launch(cb, qgemv_pair_kernel<6>, grid, block, 0, a); break;
        default: cb_launch(cb, qgemv_pair_kernel<8>, grid, block, 0, a); break;
        }
        cb_launched(cb, "quantized gemv (pairs)");
        return;
    }
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

/* dst [rows, cols] = the stored matrix as T (f16 rounded to nearest even and saturated, or f32); one
 * thread per 32-column chunk (q_widen_chunk: 16-byte code loads and 16-byte stores; a chunk's
 * index splits into row and chunk by a 32-bit division when the matrix has < 2^32 chunks). The
 * 2026-12-02 ncu profile had the kernel before it (32 two-byte stores per chunk, 64-bit
 * divisions) at 7.1 ms per Qwen3-30B-A3B expert layer. */
template <int BITS, typename T>
__global__ void qwiden_kernel(T *dst, cb_qm m) {
    pdl_enter();
    const q_kind kd = q_kind_of(m);
    const int64_t chunks = m.cols >> 5, total = m.rows * chunks;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    if (total < ((int64_t)1 << 32)) {
        const uint32_t ch = (uint32_t)chunks;
        for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += step) {
            const uint32_t r = (uint32_t)k / ch, c = (uint32_t)k - r * ch;
            q_widen_chunk<BITS, T>(m, kd, r, c, dst + (int64_t)r * m.cols);
        }
    } else {
        for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += step) {
            const int64_t r = k / chunks;
            q_widen_chunk<BITS, T>(m, kd, r, (uint32_t)(k - r * chunks), dst + r * m.cols);
        }
    }
}

template <typename T>
static void qwiden(cuda_be *cb, T *dst, const cb_qm &m) {
    const int64_t total = m.rows * (m.cols / 32);
    unsigned blocks = (unsigned)((total + 255) / 256);
    if (blocks > 16u * (unsigned)cb->sm_count) blocks = 16u * (unsigned)cb->sm_count;
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
        uint16_t *wd = (uint16_t *)cb_scratch_get(cb, &cb->wdeq, (size_t)W->rows * (size_t)W->cols * 2);
        if (!wd) return;
        qwiden(cb, wd, cb_q_view(W));
        ci_mat B;
        memset(&B, 0, sizeof B);
        B.data = wd;
        B.dtype = CI_F16;
        B.rows = W->rows;
        B.cols = W->cols;
        if (cb_gemm(cb, y, x, n, &B, acc ? 1.0f : 0.0f) == 0) return;
        if (!cb->failed) cb_fail_msg(cb, "quantized matmul: the f16 GEMM refused the widened weight");
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

/* norm_matmul_n (op CB_STORE) / norm_matmul_swiglu (CB_SWIGLU) in one launch when the
 * tensor-core GEMVs take it (quant_mma.cu stages x RMS-normed; xn_out: the normed rows
 * written there too, norm_matmul_keep); 0 (nothing done) otherwise */
int cb_q_norm_matmul_n(cuda_be *cb, int op, int count, float *const *ys, const float *x, const float *norm_w, float eps,
                       int n, const ci_mat *const *Ws, float *xn_out) {
    if (count < 1 || count > 4 || n < 1 || n > CB_GEMV_MAX_N) return 0;
    cb_qm ms[4];
    for (int i = 0; i < count; i++) {
        if (!cb_q_ok(Ws[i]) || ((const ci_qdesc *)Ws[i]->scale)->stored_t) return 0;
        ms[i] = cb_q_view(Ws[i]);
    }
    return cb_qt_matmul(cb, op, count, ys, x, n, ms, norm_w, eps, xn_out);
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

