/* quant_moe.cu — the routed experts of a layer whose experts are MLX-quantized views (dtype
 * CI_U32; moe.cu hands such layers to cb_q_moe_experts), read packed as quant.cu's matmuls
 * are (quant.cuh decodes).
 *
 * Decode (n <= CB_GEMV_MAX_N rows at a time), two launches as moe.cu's:
 *   gate_up: a warp per row r of entry p = (t, k)'s expert: h[p, r] = act(gate·x_t, up·x_t)
 *   down:    a warp per output row r of token t: Σ_k w[t, k] · (down_e row r · h[p])
 * Prefill (n > CB_GEMV_MAX_N, gated or relu² experts of 8-element widths): the layer's experts
 * decoded to f16 (not bf16: cuda_internal.h, f16_sat) into scratch (cb->wdeq) with a table of
 * their addresses (relu²: up and down only, the gate entries NULL), then moe_gemm.cu's grouped
 * GEMM on that table, as fp8 experts are; a layer too big to widen loops the decode kernels. */
#include "cuda_internal.h"
#include "loaders.cuh"
#include "quant.cuh"
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
    float u = q_warp_sum(qe_dot(qe_mat(a, e, 1), r, xr, lane));
    float g = a.relu2 ? 0.0f : q_warp_sum(qe_dot(qe_mat(a, e, 0), r, xr, lane));
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
    g = q_warp_sum(g);
    u = q_warp_sum(u);
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
    acc = q_warp_sum(acc);
    if (lane == 0) {
        float *o = a.out + (int64_t)t * a.X + r;
        *o = a.acc ? *o + acc : acc;
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
        for (int q = 0; q < 32; q++) o[q] = __half_as_ushort(__float2half_rn(f16_sat(w[q])));
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
    if (n > CB_GEMV_MAX_N && count * per * 2 <= Q_WIDEN_MAX && cb_moe_grouped_shape_ok(m, &wide)) {
        uint16_t *wd = (uint16_t *)cb_scratch_get(cb, &cb->wdeq, count * per * 2 + slots * sizeof(void *) + 16);
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
    dim3 b(QE_WARPS * 32);
    for (int t0 = 0; t0 < n; t0 += CB_GEMV_MAX_N) {
        const int k = n - t0 < CB_GEMV_MAX_N ? n - t0 : CB_GEMV_MAX_N;
        a.sel = sel + (int64_t)t0 * K;
        a.wt = w + (int64_t)t0 * K;
        a.x = x + (int64_t)t0 * a.X;
        a.out = out + (int64_t)t0 * a.X;
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
}
