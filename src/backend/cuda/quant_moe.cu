/* quant_moe.cu — the routed experts of a layer whose experts are MLX-quantized views (dtype
 * CI_U32; moe.cu hands such layers to cb_q_moe_experts), read packed as quant.cu's matmuls
 * are (quant.cuh decodes).
 *
 * Decode (n <= CB_GEMV_MAX_N rows at a time), two launches as moe.cu's:
 *   gate_up: a warp per row r of entry p = (t, k)'s expert: h[p, r] = act(gate·x_t, up·x_t)
 *   down:    a warp per output row r of token t: Σ_k w[t, k] · (down_e row r · h[p])
 * (the qmv forms below: a warp per R rows, the default; the two above with CINFER_CUDA_QMV=0);
 * affine 4- and 8-bit and mxfp4 layers go to quant_mma_moe.cu's tensor-core pair first (cb_qt_moe).
 * Prefill (n > CB_GEMV_MAX_N): gated experts of 4 or 8 bits (affine, mxfp4, mxfp8) whose widths
 * are multiples of 64 go to moe_gemm.cu's grouped GEMM as they are stored: its B loader decodes
 * each tile to f16 (cb_moe_grouped_q; CINFER_CUDA_Q_GEMM=0 turns it off). Other gated or relu²
 * experts of 8-element widths: the layer decoded to f16 (not bf16: cuda_internal.h, f16_sat)
 * into scratch (cb->wdeq) with a table of their addresses (relu²: up and down only, the gate
 * entries NULL), then the grouped GEMM on that table; a layer too big to widen loops the decode
 * kernels. Both prefill forms give the same f16 weights, so the same bits. */
#include "cuda_internal.h"
#include "loaders.cuh"
#include "quant.cuh"
#include "route.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

enum { QE_WARPS = 4 };

static int sd_code(ci_dtype t) { return t == CI_F32 ? 0 : t == CI_F16 ? 1 : t == CI_BF16 ? 2 : 3; }

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
    int qgemm;                   /* prefill: the grouped GEMM reads the codes (cb_moe_grouped_q_ok, 16-byte aligned
                                  * codes, CINFER_CUDA_Q_GEMM): no widening */
    cb_mg_quant mgq;             /* the table as cb_moe_grouped_q reads it (when qgemm) */
    cb_qmoe_tab *next;
};

struct qe_args {
    const uint8_t *const *codes;
    const void *const *scales, *const *biases;
    const int64_t *srow0;
    int mode[3], bits[3], group[3], sd[3];
    int X, I, K, relu2, acc;
    int aloop, fploop;           /* cb_qm.aloop, cb_qm.fploop */
    int pair;                    /* gate and up rows in one pass (cuda_be.q_pair) */
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
    m.aloop = a.aloop;
    m.fploop = a.fploop;
    return m;
}

/* this lane's share of stored row r · x (one token row) */
__device__ __forceinline__ float qe_dot(const cb_qm &m, int64_t r, const float *x, int lane) {
    float acc = 0.0f;
    switch (m.bits) {
    case 2: q_row_dot<2, 1>(m, r, x, 0, 1, lane, &acc); break;
    case 3: q_row_dot<3, 1>(m, r, x, 0, 1, lane, &acc); break;
    case 4: q_row_dot<4, 1>(m, r, x, 0, 1, lane, &acc); break;
    case 5: q_row_dot<5, 1>(m, r, x, 0, 1, lane, &acc); break;
    case 6: q_row_dot<6, 1>(m, r, x, 0, 1, lane, &acc); break;
    default: q_row_dot<8, 1>(m, r, x, 0, 1, lane, &acc); break;
    }
    return acc;
}

/* h[p, r] = act(gate_e row r · x_t, up_e row r · x_t) for entry p = (t, k): a warp per row */
__global__ void __launch_bounds__(QE_WARPS * 32) qe_gate_up_kernel(qe_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * QE_WARPS + warp, p = blockIdx.y;
    if (r >= a.I) return;
    const int e = a.sel[p], t = p / a.K;
    const float *xr = a.x + (int64_t)t * a.X;
    float u = warp_sum(qe_dot(qe_mat(a, e, 1), r, xr, lane));
    float g = a.relu2 ? 0.0f : warp_sum(qe_dot(qe_mat(a, e, 0), r, xr, lane));
    if (lane) return;
    a.h[(int64_t)p * a.I + r] = moe_act(g, u, a.relu2, a.limit);
}

/* qe_gate_up_kernel for gated experts whose gate and up share BITS: both rows against one
 * load of each x chunk (quant.cuh, q_row_dot_pair; the same sums, so the same h) */
template <int BITS>
__global__ void __launch_bounds__(QE_WARPS * 32) qe_gate_up_pair_kernel(qe_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * QE_WARPS + warp, p = blockIdx.y;
    if (r >= a.I) return;
    const int e = a.sel[p], t = p / a.K;
    float g = 0.0f, u = 0.0f;
    q_row_dot_pair<BITS>(qe_mat(a, e, 0), r, qe_mat(a, e, 1), r, a.x + (int64_t)t * a.X, lane, &g, &u);
    g = warp_sum(g);
    u = warp_sum(u);
    if (lane) return;
    a.h[(int64_t)p * a.I + r] = moe_act(g, u, 0, a.limit);
}

/* out[t, r] (+)= Σ_k w[t, k] · (down_e row r · h[t, k]): a warp per output row */
__global__ void __launch_bounds__(QE_WARPS * 32) qe_down_kernel(qe_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * QE_WARPS + warp, t = blockIdx.y;
    if (r >= a.X) return;
    float acc = 0.0f;
    for (int k = 0; k < a.K; k++) {
        const int p = t * a.K + k, e = a.sel[p];
        acc = fmaf(a.wt[p], qe_dot(qe_mat(a, e, 2), r, a.h + (int64_t)p * a.I, lane), acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) {
        float *o = a.out + (int64_t)t * a.X + r;
        *o = a.acc ? *o + acc : acc;
    }
}

/* ---- qmv forms of the two decode kernels (quant.cu's qmv_kernel: rows resolved once, x or h
 * loaded once per chunk for all of a warp's rows, every row's codes loaded before any
 * arithmetic); CINFER_CUDA_QMV=0 keeps the two above. ncu on the H200 (2026-12-02,
 * Qwen3-30B-A3B dims mlx4, batch 1): qe_gate_up_kernel 42 µs for 14 MB, qe_down_kernel 31 µs
 * for 7 MB a layer. */
enum { QE_KMAX = 32 };   /* top_k the down kernel keeps in shared memory (above: the kernels above) */

/* h[p, r] for R consecutive rows r of entry p = (t, k)'s expert: R up rows and (GATED) the R
 * gate rows of the same outputs against x_t */
template <int BITS, int R, bool GATED>
__global__ void __launch_bounds__(QE_WARPS * 32) qe_gu_kernel(qe_args a) {
    pdl_enter();
    constexpr int NR = GATED ? 2 * R : R;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = (blockIdx.x * QE_WARPS + warp) * R, p = blockIdx.y;
    if (r0 >= a.I) return;
    const int e = a.sel[p], t = p / a.K;
    const cb_qm mu = qe_mat(a, e, 1);
    const q_kind kd = q_kind_of(mu);
    q_row rw[NR];
    bool vec[NR];
#pragma unroll
    for (int j = 0; j < R; j++) {
        const int r = r0 + j < a.I ? r0 + j : a.I - 1;
        rw[j] = q_row_of<BITS>(mu, r);
        vec[j] = BITS % 4 == 0 && ((uintptr_t)rw[j].codes & 15) == 0;
        if (GATED) {
            rw[R + j] = q_row_of<BITS>(qe_mat(a, e, 0), r);
            vec[R + j] = BITS % 4 == 0 && ((uintptr_t)rw[R + j].codes & 15) == 0;
        }
    }
    const float *x = a.x + (int64_t)t * a.X;
    const bool al = ((uintptr_t)x & 15) == 0;
    const int cpr = a.X >> 5;
    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.0f;
    for (int c = lane; c < cpr; c += 32) {
        uint32_t u[NR][BITS];
        float s[NR], b[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) q_row_load<BITS>(rw[j], kd, vec[j], (uint32_t)c, u[j], &s[j], &b[j]);
        float xv[32];
        q_load_x32(x + c * 32, al, xv);
#pragma unroll
        for (int j = 0; j < NR; j++) acc[j] += q_dot32<BITS>(u[j], kd.mode, s[j], b[j], xv);
    }
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = warp_sum(acc[j]);
#pragma unroll
    for (int j = 0; j < R; j++)
        if (lane == j && r0 + j < a.I)
            a.h[(int64_t)p * a.I + r0 + j] = moe_act(GATED ? acc[R + j] : 0.0f, acc[j], !GATED, a.limit);
}

/* out[t, r] (+)= Σ_k w[t, k] · (down_e row r · h[t, k]) for R consecutive rows r: the K
 * experts' rows and chunks as one list (entry i: expert slot i / cpr, chunk i % cpr) that the
 * lanes take in turn, so every lane works when I / 32 < 32; each h chunk is loaded once for
 * the R rows. The slots' tables and weights are read once per block into shared memory. */
template <int BITS, int R>
__global__ void __launch_bounds__(QE_WARPS * 32) qe_dn_kernel(qe_args a) {
    pdl_enter();
    __shared__ const uint32_t *kc[QE_KMAX];
    __shared__ const char *ks[QE_KMAX], *kb[QE_KMAX];
    __shared__ float kw[QE_KMAX];
    const int t = blockIdx.y, K = a.K;
    q_kind kd;   /* every expert's down is packed alike (qmoe_tab) */
    kd.gsh = q_gshift(a.group[2]);
    kd.sd = a.sd[2];
    kd.mode = a.mode[2];
    const int es = q_param_size(kd.sd), cpr = a.I >> 5, gpr = a.I >> kd.gsh;
    if ((int)threadIdx.x < K) {
        const int p = t * K + threadIdx.x, i = 3 * a.sel[p] + 2;
        kc[threadIdx.x] = (const uint32_t *)a.codes[i];
        const int64_t g = a.srow0[i] * gpr * es;
        ks[threadIdx.x] = (const char *)a.scales[i] + g;
        kb[threadIdx.x] = kd.mode == 1 ? (const char *)a.biases[i] + g : (const char *)a.scales[i] + g;
        kw[threadIdx.x] = a.wt[p];
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = (blockIdx.x * QE_WARPS + warp) * R;
    if (r0 >= a.X) return;
    const float *h = a.h + (int64_t)t * K * a.I;
    const bool al = ((uintptr_t)a.h & 15) == 0 && (a.I & 3) == 0;
    float acc[R];
#pragma unroll
    for (int j = 0; j < R; j++) acc[j] = 0.0f;
    int k = 0, c = lane;
    while (c >= cpr) { c -= cpr; k++; }
    for (int i = lane; i < K * cpr; i += 32) {
        uint32_t u[R][BITS];
        float s[R], b[R];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int r = r0 + j < a.X ? r0 + j : a.X - 1;
            q_row q;
            q.codes = kc[k] + (int64_t)r * cpr * BITS;
            q.sp = ks[k] + (int64_t)r * gpr * es;
            q.bp = kb[k] + (int64_t)r * gpr * es;
            q_row_load<BITS>(q, kd, BITS % 4 == 0 && ((uintptr_t)q.codes & 15) == 0, (uint32_t)c, u[j], &s[j], &b[j]);
        }
        float xv[32];
        q_load_x32(h + (int64_t)k * a.I + c * 32, al, xv);
        const float wk = kw[k];
#pragma unroll
        for (int j = 0; j < R; j++) acc[j] = fmaf(wk, q_dot32<BITS>(u[j], kd.mode, s[j], b[j], xv), acc[j]);
        c += 32;
        while (c >= cpr) { c -= cpr; k++; }
    }
#pragma unroll
    for (int j = 0; j < R; j++) acc[j] = warp_sum(acc[j]);
#pragma unroll
    for (int j = 0; j < R; j++)
        if (lane == j && r0 + j < a.X) {
            float *o = a.out + (int64_t)t * a.X + r0 + j;
            *o = a.acc ? *o + acc[j] : acc[j];
        }
}

/* rows per warp of the qmv expert kernels (qe_qmv): CINFER_CUDA_QE_GU_R (1 or 2; default 2) and
 * CINFER_CUDA_QE_DN_R (1 or 2; default 2). Measured as quant.cu's CINFER_CUDA_QMV_R (2 rounds,
 * tok/s, with the dense R at 4): GU_R 1 556.2 / 553.4, 2 562.5 / 565.5, 4 516.4 / 513.1; DN_R 1
 * 567.1 / 561.7, 4 538.7 / 535.4 (4 since removed). */
template <int BITS, int R>
static void qe_gu_launch_r(cuda_be *cb, const qe_args &a, int rows_blocks_y) {
    const dim3 g((unsigned)((a.I + QE_WARPS * R - 1) / (QE_WARPS * R)), (unsigned)rows_blocks_y), b(QE_WARPS * 32);
    if (a.relu2) cb_launch(cb, qe_gu_kernel<BITS, R, false>, g, b, 0, a);
    else cb_launch(cb, qe_gu_kernel<BITS, R, true>, g, b, 0, a);
}
template <int BITS>
static void qe_gu_bits(cuda_be *cb, const qe_args &a, int k, int gr) {
    if (gr == 1) qe_gu_launch_r<BITS, 1>(cb, a, k * a.K);
    else qe_gu_launch_r<BITS, 2>(cb, a, k * a.K);
}
template <int BITS, int R>
static void qe_dn_launch_r(cuda_be *cb, const qe_args &a, int k) {
    const dim3 g((unsigned)((a.X + QE_WARPS * R - 1) / (QE_WARPS * R)), (unsigned)k), b(QE_WARPS * 32);
    cb_launch(cb, qe_dn_kernel<BITS, R>, g, b, 0, a);
}
template <int BITS>
static void qe_dn_bits(cuda_be *cb, const qe_args &a, int k, int dr) {
    if (dr == 1) qe_dn_launch_r<BITS, 1>(cb, a, k);
    else qe_dn_launch_r<BITS, 2>(cb, a, k);
}

/* the qmv pair for k token rows (a.sel, a.wt, a.x, a.out set): gate/up then down */
static void qe_qmv(cuda_be *cb, const qe_args &a, int k) {
    static const int gr = cb_env_int("CINFER_CUDA_QE_GU_R", 2, 1, 2), dr = cb_env_int("CINFER_CUDA_QE_DN_R", 2, 1, 2);
    switch (a.bits[1]) {
    case 2: qe_gu_bits<2>(cb, a, k, gr); break;
    case 3: qe_gu_bits<3>(cb, a, k, gr); break;
    case 4: qe_gu_bits<4>(cb, a, k, gr); break;
    case 5: qe_gu_bits<5>(cb, a, k, gr); break;
    case 6: qe_gu_bits<6>(cb, a, k, gr); break;
    default: qe_gu_bits<8>(cb, a, k, gr); break;
    }
    switch (a.bits[2]) {
    case 2: qe_dn_bits<2>(cb, a, k, dr); break;
    case 3: qe_dn_bits<3>(cb, a, k, dr); break;
    case 4: qe_dn_bits<4>(cb, a, k, dr); break;
    case 5: qe_dn_bits<5>(cb, a, k, dr); break;
    case 6: qe_dn_bits<6>(cb, a, k, dr); break;
    default: qe_dn_bits<8>(cb, a, k, dr); break;
    }
}

/* prefill: every matrix i = 3e + j of the layer decoded to f16 (saturated: cuda_internal.h),
 * the y-th at dst + y·I·X (gate and up [I, X], down [X, I]: the same count), its address into
 * wtab[i] (the table the grouped GEMM reads); one thread per 32-column chunk. Gated layers:
 * i = y (3E matrices); relu² layers have no gate (never read): 2E matrices, i = 3(y / 2) + 1
 * + y % 2, and wtab[3e] = NULL. */
__global__ void qe_widen_kernel(uint16_t *dst, const void **wtab, qe_args a) {
    pdl_enter();
    const int y = blockIdx.y, i = a.relu2 ? 3 * (y >> 1) + 1 + (y & 1) : y, e = i / 3, j = i % 3;
    const int64_t per = (int64_t)a.I * a.X;
    uint16_t *d = dst + (int64_t)y * per;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        wtab[i] = d;
        if (a.relu2 && j == 1) wtab[i - 1] = NULL;   /* the gate of expert e: none */
    }
    const cb_qm m = qe_mat(a, e, j);
    const q_kind kd = q_kind_of(m);
    const uint32_t ch = (uint32_t)(m.cols >> 5), total = (uint32_t)m.rows * ch;   /* I·X / 32 < 2^32 */
    for (uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < total; k += gridDim.x * blockDim.x) {
        const uint32_t r = k / ch, c = k - r * ch;
        uint16_t *o = d + (int64_t)r * m.cols;
        switch (m.bits) {
        case 2: q_widen_chunk<2>(m, kd, r, c, (__half *)o); break;
        case 3: q_widen_chunk<3>(m, kd, r, c, (__half *)o); break;
        case 4: q_widen_chunk<4>(m, kd, r, c, (__half *)o); break;
        case 5: q_widen_chunk<5>(m, kd, r, c, (__half *)o); break;
        case 6: q_widen_chunk<6>(m, kd, r, c, (__half *)o); break;
        default: q_widen_chunk<8>(m, kd, r, c, (__half *)o); break;
        }
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
    const size_t pb = 3 * n3 * sizeof(void *), rb = n3 * sizeof(int64_t);
    int bad = CB_CHECK(cb, "cudaMalloc (quantized MoE table)", cudaMalloc(&dp, pb)) ||
              CB_CHECK(cb, "cudaMalloc (quantized MoE table)", cudaMalloc(&dr, rb)) ||
              CB_CHECK(cb, "quantized MoE table upload", cudaMemcpy(dp, hp, pb, cudaMemcpyHostToDevice)) ||
              CB_CHECK(cb, "quantized MoE table upload", cudaMemcpy(dr, hr, rb, cudaMemcpyHostToDevice));
    free(hp); free(hr);
    if (bad) { cudaFree(dp); cudaFree(dr); free(t); return NULL; }
    t->codes = (const uint8_t **)dp;
    t->scales = (const void **)dp + n3;
    t->biases = (const void **)dp + 2 * n3;
    t->srow0 = (int64_t *)dr;
    {   /* whether the grouped GEMM can read the codes: the kinds, the shape, every matrix 16-byte aligned */
        cb_mg_quant *q = &t->mgq;
        q->codes = (const void *const *)t->codes;
        q->scales = t->scales;
        q->biases = t->biases;
        q->srow0 = t->srow0;
        q->E = E; q->I = I; q->X = X;
        for (int j = 0; j < 3; j++) {
            q->bits[j] = t->bits[j]; q->mode[j] = t->mode[j]; q->group[j] = t->group[j]; q->sd[j] = t->sd[j];
        }
        t->qgemm = cb_q_gemm() && cb_moe_grouped_q_ok(m, q) && cb_moe_aligned16(m);
    }
    t->next = cb->qmoe_tabs;
    cb->qmoe_tabs = t;
    return t;
}

void cb_quant_free(cuda_be *cb) {
    for (int i = 0; i < cb->n_qds; i++) free(cb->qds[i].dev);
    free(cb->qds);
    cb->qds = NULL;
    cb->n_qds = cb->cap_qds = 0;
    for (cb_qmoe_tab *t = cb->qmoe_tabs, *nx; t; t = nx) {
        nx = t->next;
        cudaFree((void *)t->codes);
        cudaFree(t->srow0);
        free(t);
    }
    cb->qmoe_tabs = NULL;
}

int cb_q_moe_experts(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                     const ci_moe *m, int acc, const cb_route *rt) {
    if (cb->failed || n <= 0) return !rt;
    if (rt && (n > CB_GEMV_MAX_N || !cb_q_qmma())) return 0;
    const cb_qmoe_tab *tab = qmoe_tab(cb, m);
    if (!tab) return !rt;
    qe_args a;
    memset(&a, 0, sizeof a);
    a.codes = tab->codes; a.scales = tab->scales; a.biases = tab->biases; a.srow0 = tab->srow0;
    for (int j = 0; j < 3; j++) {
        a.mode[j] = tab->mode[j]; a.bits[j] = tab->bits[j]; a.group[j] = tab->group[j]; a.sd[j] = tab->sd[j];
    }
    a.X = m->hidden; a.I = m->inter; a.K = m->top_k; a.relu2 = m->relu2; a.limit = m->act_limit; a.acc = acc;
    a.aloop = cb_q_aloop();
    a.fploop = cb_q_fploop();
    a.pair = cb->q_pair;
    /* matrices widened (relu² layers: no gates) and the table's entries */
    const size_t per = (size_t)tab->I * tab->X, count = (tab->relu2 ? 2 : 3) * (size_t)tab->E, slots = 3 * (size_t)tab->E;
    cb_moe_tab wide;
    memset(&wide, 0, sizeof wide);
    wide.key = m->w_up;
    wide.E = tab->E; wide.I = tab->I; wide.X = tab->X;
    wide.dtype = CI_F16;
    wide.relu2 = tab->relu2;
    wide.scale_dtype = -1;
    if (rt) {   /* the tensor-core pair, routing in its gate+up launch, or nothing */
        float *h = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)n * a.K * m->inter * sizeof(float));
        return h && cb_qt_moe(cb, a.codes, a.scales, a.biases, a.srow0, a.mode, a.bits, a.group, a.sd, a.relu2, a.X,
                              a.I, a.K, a.limit, rt->sel, rt->w, x, h, out, n, acc, rt);
    }
    if (n > CB_GEMV_MAX_N && tab->qgemm) {   /* the grouped GEMM decodes the codes (moe_gemm.cu) */
        float *y = out;
        if (acc && !(y = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)n * m->hidden * sizeof(float)))) return 1;
        cb_moe_grouped_q(cb, y, x, n, sel, w, m, &tab->mgq);
        if (acc) cb_add(cb, out, y, (int64_t)n * m->hidden);
        return 1;
    }
    if (n > CB_GEMV_MAX_N && count * per * 2 <= Q_WIDEN_MAX && cb_moe_grouped_shape_ok(m, &wide)) {
        uint16_t *wd = (uint16_t *)cb_scratch_get(cb, &cb->wdeq, count * per * 2 + slots * sizeof(void *) + 16);
        if (!wd) return 1;
        const void **wtab = (const void **)(((uintptr_t)(wd + count * per) + 15) & ~(uintptr_t)15);
        unsigned bx = (unsigned)((per / 32 + 255) / 256);
        if (bx > 64) bx = 64;
        if (bx < 1) bx = 1;
        cb_launch(cb, qe_widen_kernel, dim3(bx, (unsigned)count), dim3(256), 0, wd, wtab, a);
        if (cb_launched(cb, "quantized moe widen")) return 1;
        wide.w = wtab;
        float *y = out;
        if (acc && !(y = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)n * m->hidden * sizeof(float)))) return 1;
        cb_moe_grouped(cb, y, x, n, sel, w, m, &wide);
        if (acc) cb_add(cb, out, y, (int64_t)n * m->hidden);
        return 1;
    }
    const int K = m->top_k, chunk = n < CB_GEMV_MAX_N ? n : CB_GEMV_MAX_N;
    float *h = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)chunk * K * m->inter * sizeof(float));
    if (!h) return 1;
    a.h = h;
    /* the qmv kernels: gate and up packed alike (one q_kind), at most QE_KMAX slots */
    const bool qmv = cb_q_qmv() && K <= QE_KMAX &&
                     (a.relu2 || (a.bits[0] == a.bits[1] && a.mode[0] == a.mode[1] && a.group[0] == a.group[1] &&
                                  a.sd[0] == a.sd[1]));
    dim3 b(QE_WARPS * 32);
    for (int t0 = 0; t0 < n; t0 += CB_GEMV_MAX_N) {
        const int k = n - t0 < CB_GEMV_MAX_N ? n - t0 : CB_GEMV_MAX_N;
        a.sel = sel + (int64_t)t0 * K;
        a.wt = w + (int64_t)t0 * K;
        a.x = x + (int64_t)t0 * a.X;
        a.out = out + (int64_t)t0 * a.X;
        if (cb_qt_moe(cb, a.codes, a.scales, a.biases, a.srow0, a.mode, a.bits, a.group, a.sd, a.relu2, a.X, a.I, K,
                      a.limit, a.sel, a.wt, a.x, a.h, a.out, k, a.acc))
            continue;
        if (qmv) { qe_qmv(cb, a, k); continue; }
        const dim3 g1((unsigned)((a.I + QE_WARPS - 1) / QE_WARPS), (unsigned)(k * K));
        if (a.pair && !a.relu2 && a.bits[0] == a.bits[1]) {
            switch (a.bits[0]) {
            case 2: cb_launch(cb, qe_gate_up_pair_kernel<2>, g1, b, 0, a); break;
            case 3: cb_launch(cb, qe_gate_up_pair_kernel<3>, g1, b, 0, a); break;
            case 4: cb_launch(cb, qe_gate_up_pair_kernel<4>, g1, b, 0, a); break;
            case 5: cb_launch(cb, qe_gate_up_pair_kernel<5>, g1, b, 0, a); break;
            case 6: cb_launch(cb, qe_gate_up_pair_kernel<6>, g1, b, 0, a); break;
            default: cb_launch(cb, qe_gate_up_pair_kernel<8>, g1, b, 0, a); break;
            }
        } else cb_launch(cb, qe_gate_up_kernel, g1, b, 0, a);
        cb_launch(cb, qe_down_kernel, dim3((unsigned)((a.X + QE_WARPS - 1) / QE_WARPS), (unsigned)k), b, 0, a);
    }
    cb_launched(cb, "quantized moe_experts");
    return 1;
}
