/* moe.cu — the MoE ops on the device: routing (a block per token) and the routed experts
 * of a few token rows (decode), with the expert ids read from device memory.
 *
 * Expert tables: a layer's experts are ci_mat views placed by the family (any layout:
 * per-expert tensors, fused gate_up, stacked); the first eager call of a layer uploads one
 * table of their data / scale pointers (struct cb_moe_tab), found again by the address of
 * ci_moe.w_up, so kernels index experts by the ids the router wrote.
 *
 * Routing (moe_route): a block per token row (route.cuh route_row). Scores s (softmax
 * probabilities, sigmoid or sqrt(softplus)) and the choice values (s + bias) in shared memory;
 * grouped top-k masks the groups whose two best choices add up below the topk_group best; then
 * each entry's rank among all. Ties keep the lower expert index, as the CPU's stable selection
 * does (NaN scores are not ordered the CPU's way). The weights are formed in double, in slot
 * order, as the CPU does.
 *
 * Experts, decode (n <= CB_GEMV_MAX_N rows at a time): two launches.
 *   gate_up: grid (inter / 4, n · top_k): warp w of a block owns row r of the entry's expert
 *            and streams its gate row and its up row against the entry's token row of x:
 *            h[entry, r] = act(g, u) (f32 scratch cb->moe_h).
 *   down:    grid (hidden / 4, n): warp w owns output row r of token t and streams row r of
 *            each of the token's top_k down matrices against h, each lane keeping
 *            Σ_k w_k · (its share of the dot); one shuffle reduction; out[t, r] = the sum.
 * Longer inputs go to moe_gemm.cu's grouped GEMM when it takes the layer, else through these
 * kernels CB_GEMV_MAX_N rows at a time. Numerics: f32 products and sums; fp8 weights times
 * their block scale before the product (as gemv.cu and the CPU). MLX-quantized experts
 * (U32 views) are quant_moe.cu's (cb_q_moe_experts: its own table, the two-launch decode on
 * the packed codes, and the grouped GEMM reading the codes or over the layer widened to f16).
 * fp8 experts' prefill: the grouped GEMM reads the fp8 bytes and block scales (moe_fp8_direct),
 * or with CINFER_CUDA_FP8_GEMM=0 the layer widened to f16 (cuda_internal.h, f16_sat). */
#include "cuda_internal.h"
#include "loaders.cuh"
#include "quant.cuh"
#include "route.cuh"
#include <float.h>
#include <stdarg.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { MOE_WARPS = 4 };

/* ---- tables ---------------------------------------------------------------------------- */

static void moe_fail(cuda_be *cb, const char *fmt, ...) {
    if (cb->failed) return;
    cb->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cb->base.last_error, sizeof cb->base.last_error, fmt, ap);
    va_end(ap);
}

int cb_moe_aligned16(const ci_moe *m) {
    for (int e = 0; e < m->n_experts; e++)
        if ((!m->relu2 && ((uintptr_t)m->w_gate[e].data & 15)) || ((uintptr_t)m->w_up[e].data & 15) ||
            ((uintptr_t)m->w_down[e].data & 15))
            return 0;
    return 1;
}

/* Whether the grouped GEMM reads this fp8 layer's bytes itself (its B loader decodes them to f16 with
 * the block scale: the widening's values, no scratch; moe_gemm.cu) and the description it takes:
 * CINFER_CUDA_FP8_GEMM (default 1), scale blocks a multiple of 64 (or none), every matrix 16-byte
 * aligned. Checked on the H200 (2026-12-02, bench/device_runs/2026-12-02d-fp8gemm.sh): op cases
 * 178 / 0 both ways, `cinfer logits` byte-identical to the widened path on deepseek_v3_fp8, memcheck
 * clean; DeepSeek V2-Lite dims fp8 pp512 10,434 vs 10,374 tok/s widened (the widening was not what
 * held that prefill), and no scratch the size of a layer's experts in f16 (1.1 GB there, 22 GB at V3
 * dims, which could not widen at all). Decided once, when the layer's table is built (moe_tab:
 * cb_moe_tab.fp8_direct, .mgq). */
static bool moe_fp8_direct(const ci_moe *m, const cb_moe_tab *tab, cb_mg_quant *q) {
    static const int on = cb_env_switch("CINFER_CUDA_FP8_GEMM", 1);
    if (!on) return false;
    memset(q, 0, sizeof *q);
    q->codes = tab->w;
    q->scales = tab->scale_dtype >= 0 ? tab->scale : NULL;
    q->srow0 = tab->srow0;
    q->E = tab->E; q->I = tab->I; q->X = tab->X;
    for (int j = 0; j < 3; j++) {
        q->bits[j] = 1;
        q->group[j] = tab->scale_dtype >= 0 ? tab->block : 0;
        q->sd[j] = tab->scale_dtype >= 0 ? tab->scale_dtype : 0;
    }
    return cb_moe_grouped_q_ok(m, q) && (tab->scale_dtype < 0 || tab->scale) && cb_moe_aligned16(m);
}

/* The table of m's experts, built on first use. Its cudaMalloc and synchronous upload are
 * allowed while a graph is being recorded (capture runs in relaxed mode; the table is not
 * part of the graph, it is done before the graph runs). NULL with last_error set when the
 * experts are not uniform. */
const cb_moe_tab *cb_moe_table(cuda_be *cb, const ci_moe *m) {
    for (cb_moe_tab *t = cb->moe_tabs; t; t = t->next)
        if (t->key == m->w_up) return t;
    const int E = m->n_experts, I = m->inter, X = m->hidden;
    const ci_mat *ref = &m->w_up[0];
    for (int e = 0; e < E; e++)
        for (int j = 0; j < 3; j++) {
            const ci_mat *W = j == 0 ? (m->relu2 ? NULL : &m->w_gate[e]) : j == 1 ? &m->w_up[e] : &m->w_down[e];
            if (!W) continue;
            long long want_r = j == 2 ? X : I, want_c = j == 2 ? I : X;
            if (W->rows != want_r || W->cols != want_c) {
                moe_fail(cb, "CUDA: MoE expert %d: matrix %d is [%lld, %lld], expected [%lld, %lld]", e, j,
                         (long long)W->rows, (long long)W->cols, want_r, want_c);
                return NULL;
            }
            if (W->dtype != ref->dtype || !cb_gemv_ok(W) || (W->dtype == CI_F8_E4M3 && (!!W->scale != !!ref->scale ||
                (W->scale && (W->block != ref->block || W->scale_dtype != ref->scale_dtype)))))
            {
                moe_fail(cb, "CUDA: MoE expert %d: matrix %d is %s, unlike expert 0's up (%s), or has no CUDA kernel", e, j,
                         ci_dtype_name(W->dtype), ci_dtype_name(ref->dtype));
                return NULL;
            }
        }
    cb_moe_tab *t = (cb_moe_tab *)calloc(1, sizeof *t);
    const void **hw = (const void **)calloc((size_t)3 * E, sizeof(void *));
    const void **hs = (const void **)calloc((size_t)3 * E, sizeof(void *));
    int64_t *hr = (int64_t *)calloc((size_t)3 * E, sizeof(int64_t));
    if (!t || !hw || !hs || !hr) {
        free(t); free(hw); free(hs); free(hr);
        moe_fail(cb, "CUDA: out of host memory for an MoE table of %d experts", E);
        return NULL;
    }
    t->key = m->w_up;
    t->E = E; t->I = I; t->X = X;
    t->dtype = ref->dtype;
    t->relu2 = m->relu2;
    t->scale_dtype = -1;
    if (ref->dtype == CI_F8_E4M3 && ref->scale) {
        t->block = ref->block;
        t->scale_dtype = ref->scale_dtype == CI_F32 ? 0 : ref->scale_dtype == CI_BF16 ? 1 : 2;
    }
    for (int e = 0; e < E; e++) {
        const ci_mat *Ws[3] = { m->relu2 ? NULL : &m->w_gate[e], &m->w_up[e], &m->w_down[e] };
        for (int j = 0; j < 3; j++) {
            hw[3 * e + j] = Ws[j] ? Ws[j]->data : NULL;
            hs[3 * e + j] = Ws[j] ? Ws[j]->scale : NULL;
            hr[3 * e + j] = Ws[j] ? Ws[j]->scale_row0 : 0;
        }
    }
    size_t pb = (size_t)3 * E * sizeof(void *), rb = (size_t)3 * E * sizeof(int64_t);
    int bad = CB_CHECK(cb, "cudaMalloc (MoE table)", cudaMalloc((void **)&t->w, pb)) ||
              CB_CHECK(cb, "cudaMalloc (MoE table)", cudaMalloc((void **)&t->scale, pb)) ||
              CB_CHECK(cb, "cudaMalloc (MoE table)", cudaMalloc((void **)&t->srow0, rb)) ||
              CB_CHECK(cb, "MoE table upload", cudaMemcpy((void *)t->w, hw, pb, cudaMemcpyHostToDevice)) ||
              CB_CHECK(cb, "MoE table upload", cudaMemcpy((void *)t->scale, hs, pb, cudaMemcpyHostToDevice)) ||
              CB_CHECK(cb, "MoE table upload", cudaMemcpy(t->srow0, hr, rb, cudaMemcpyHostToDevice));
    free(hw); free(hs); free(hr);
    if (bad) {
        cudaFree((void *)t->w); cudaFree((void *)t->scale); cudaFree(t->srow0);
        free(t);
        return NULL;
    }
    t->fp8_direct = t->dtype == CI_F8_E4M3 && moe_fp8_direct(m, t, &t->mgq);   /* the device arrays are set */
    t->next = cb->moe_tabs;
    cb->moe_tabs = t;
    return t;
}

void cb_moe_free(cuda_be *cb) {
    for (cb_moe_tab *t = cb->moe_tabs, *nx; t; t = nx) {
        nx = t->next;
        cudaFree((void *)t->w); cudaFree((void *)t->scale); cudaFree(t->srow0);
        free(t);
    }
    cb->moe_tabs = NULL;
    if (cb->moe_h.p) cudaFree(cb->moe_h.p);
    for (int i = 0; i < 6; i++)
        if (cb->moe_work[i].p) cudaFree(cb->moe_work[i].p);
}

/* ---- routing --------------------------------------------------------------------------- */

/* One block (ROUTE_THREADS) per token row: route.cuh's route_row. A decode step's route of 128
 * experts, top 8: 7.9 us -> 5.7 us a launch when the ranks replaced k rounds of a warp arg-max
 * (ncu at the card's clocks; a trivial kernel reads 3.4; bench/RESULTS.md, twenty-second session). */
__global__ void __launch_bounds__(ROUTE_THREADS) route_kernel(int32_t *sel, float *wout, const float *logits,
                                                              const int32_t *ids, int n, route_args a) {
    extern __shared__ float sm[];
    __shared__ int chosen[ROUTE_MAX_K];
    __shared__ float wsel[ROUTE_MAX_K];
    pdl_enter();
    const int t = blockIdx.x;
    if (t >= n) return;
    route_row(t, logits, ids, a, sm, chosen, wsel);
    if ((int)threadIdx.x < a.K) {
        sel[(int64_t)t * a.K + threadIdx.x] = chosen[threadIdx.x];
        wout[(int64_t)t * a.K + threadIdx.x] = wsel[threadIdx.x];
    }
}

static void op_moe_route(ci_backend *be, int32_t *sel, float *w, const float *logits, const int32_t *ids, int n,
                         const ci_moe *m) {
    cuda_be *cb = (cuda_be *)be;
    if (cb->failed || n <= 0) return;
    if (!route_ok(m)) {
        moe_fail(cb, "CUDA: moe_route: %d experts, top_k %d, %d groups: at most 1024 experts, 64 chosen, 32 groups",
                 m->n_experts, m->top_k, m->router == CI_ROUTE_SIGMOID && m->n_group > 1 ? m->n_group : 1);
        return;
    }
    const route_args a = route_args_of(m);
    const size_t smem = (size_t)2 * a.E * sizeof(float);
    cb_launch(cb, route_kernel, dim3((unsigned)n), dim3(ROUTE_THREADS), smem, sel, w,
              logits, ids, n, a);
    cb_launched(cb, "moe_route");
}

/* ---- experts, decode ------------------------------------------------------------------- */

struct exp_args {
    const void *const *w;        /* tab->w */
    const void *const *scale;
    const int64_t *srow0;
    int block, sd, X, I, K, relu2;
    int acc;                     /* out += instead of = */
    float limit;
    const int32_t *sel;
    const float *wt;
    const float *x;              /* [n, X] */
    float *h;                    /* [n·K, I] */
    float *out;                  /* [n, X] */
};

/* This lane's share of row r of W (C columns) · xr, weights converted (and scaled) in f32. */
template <class L, bool AL>
__device__ __forceinline__ float lane_dot(const void *W, const void *grid, int64_t srow0, const exp_args &a, int r, int C,
                                          const float *xr, int lane) {
    const char *wp = (const char *)W + (int64_t)r * C * L::BYTES;
    const int scols = a.block > 0 ? (C + a.block - 1) / a.block : 0;
    const int64_t sbase = grid ? ((srow0 + r) / a.block) * scols : 0;
    float acc = 0.0f;
    if (AL) {
        constexpr int V = L::VEC, U = 4;
        for (int c0 = lane * V; c0 < C; c0 += 32 * V * U) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (c0 + u * 32 * V < C) raw[u] = ld_stream(wp + (int64_t)(c0 + u * 32 * V) * L::BYTES);
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32 * V;
                if (c >= C) break;
                float wv[V];
                L::cvt(raw[u], wv);
                if (grid) {
                    float s = scale_elem(grid, a.sd, sbase + c / a.block);
#pragma unroll
                    for (int i = 0; i < V; i++) wv[i] *= s;
                }
                const float4 *xp = (const float4 *)(xr + c);
#pragma unroll
                for (int q = 0; q < V / 4; q++) {
                    float4 xv = __ldg(xp + q);
                    acc = fmaf(wv[4 * q], xv.x, acc);
                    acc = fmaf(wv[4 * q + 1], xv.y, acc);
                    acc = fmaf(wv[4 * q + 2], xv.z, acc);
                    acc = fmaf(wv[4 * q + 3], xv.w, acc);
                }
            }
        }
    } else {
        for (int c = lane; c < C; c += 32) {
            float wv = L::one(wp, c);
            if (grid) wv *= scale_elem(grid, a.sd, sbase + c / a.block);
            acc = fmaf(wv, __ldg(xr + c), acc);
        }
    }
    return acc;
}

template <class L, bool AL>
__global__ void __launch_bounds__(MOE_WARPS * 32) gate_up_kernel(exp_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * MOE_WARPS + warp, p = blockIdx.y;
    if (r >= a.I) return;
    const int e = a.sel[p], t = p / a.K;
    const float *xr = a.x + (int64_t)t * a.X;
    float u = lane_dot<L, AL>(a.w[3 * e + 1], a.scale[3 * e + 1], a.srow0[3 * e + 1], a, r, a.X, xr, lane);
    float g = a.relu2 ? 0.0f : lane_dot<L, AL>(a.w[3 * e], a.scale[3 * e], a.srow0[3 * e], a, r, a.X, xr, lane);
    u = warp_sum(u);
    g = warp_sum(g);
    if (lane) return;
    a.h[(int64_t)p * a.I + r] = moe_act(g, u, a.relu2, a.limit);
}

/* down, any layout: one expert after the other */
template <class L>
__global__ void __launch_bounds__(MOE_WARPS * 32) down_kernel(exp_args a) {
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.x * MOE_WARPS + warp, t = blockIdx.y;
    if (r >= a.X) return;
    float acc = 0.0f;
    for (int k = 0; k < a.K; k++) {
        const int p = t * a.K + k, e = a.sel[p];
        acc += a.wt[p] * lane_dot<L, false>(a.w[3 * e + 2], a.scale[3 * e + 2], a.srow0[3 * e + 2], a, r, a.I,
                                           a.h + (int64_t)p * a.I, lane);
    }
    acc = warp_sum(acc);
    if (lane == 0) {
        float *o = a.out + (int64_t)t * a.X + r;
        *o = a.acc ? *o + acc : acc;
    }
}

/* One 16-byte step of a down row r at columns c..: the vector's weights (times their block's
 * scale, fp8) · the expert's h at those columns (down_kernel_vec, down_kernel_split). */
template <class L>
__device__ __forceinline__ float down_step(uint4 raw, const void *sg, int sd, int64_t s0, int block, int scols, int r,
                                           int c, const float *hk) {
    constexpr int V = L::VEC;
    float wv[V];
    L::cvt(raw, wv);
    if (sg) {
        const float sc = scale_elem(sg, sd, ((s0 + r) / block) * scols + c / block);
#pragma unroll
        for (int i = 0; i < V; i++) wv[i] *= sc;
    }
    const float4 *xp = (const float4 *)(hk + c);
    float part = 0.0f;
#pragma unroll
    for (int q = 0; q < V / 4; q++) {
        const float4 xv = __ldg(xp + q);
        part = fmaf(wv[4 * q], xv.x, part);
        part = fmaf(wv[4 * q + 1], xv.y, part);
        part = fmaf(wv[4 * q + 2], xv.z, part);
        part = fmaf(wv[4 * q + 3], xv.w, part);
    }
    return part;
}

/* down, 16-byte vectors: the token's top_k rows r are one stream of K · S vector steps
 * (S = steps per row), issued DOWN_BATCH at a time before their products, so a warp keeps
 * that many loads in flight across experts instead of one row's few. The experts' row
 * bases, scale grids and weights are staged in shared memory by the block (all its warps
 * serve the same token). */
enum { DOWN_BATCH = 8, DOWN_MAX_K = 64 };
/* The block's token t: its top_k experts' down bases, scale grids, first scale rows and
 * routing weights into shared memory (threads 0..K-1; the caller syncs). */
__device__ __forceinline__ void down_stage(const exp_args &a, int t, const char **wb, const void **sg, int64_t *s0,
                                           float *wk) {
    const int K = a.K;
    if ((int)threadIdx.x < K) {
        const int p = t * K + threadIdx.x, e = a.sel[p];
        wb[threadIdx.x] = (const char *)a.w[3 * e + 2];
        sg[threadIdx.x] = a.scale[3 * e + 2];
        s0[threadIdx.x] = a.srow0[3 * e + 2];
        wk[threadIdx.x] = a.wt[p];
    }
}
/* PIPE: the next batch's loads are issued before this batch's products (two buffers), so a
 * warp's loads stay in flight while it computes (ncu at batch 1: 0.4 eligible warps per
 * scheduler, stalled on its loads, without it). */
template <class L, bool PIPE>
__global__ void __launch_bounds__(MOE_WARPS * 32) down_kernel_vec(exp_args a) {
    __shared__ const char *wb[DOWN_MAX_K];
    __shared__ const void *sg[DOWN_MAX_K];
    __shared__ int64_t s0[DOWN_MAX_K];
    __shared__ float wk[DOWN_MAX_K];
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = blockIdx.y, K = a.K;
    down_stage(a, t, wb, sg, s0, wk);
    __syncthreads();
    const int r = blockIdx.x * MOE_WARPS + warp;
    if (r >= a.X) return;
    constexpr int V = L::VEC;
    const int I = a.I, S = (I + 32 * V - 1) / (32 * V), total = K * S;
    const int scols = a.block > 0 ? (I + a.block - 1) / a.block : 0;
    const float *h = a.h + (int64_t)t * K * I;
    float acc = 0.0f;
    uint4 raw[DOWN_BATCH], nxt[PIPE ? DOWN_BATCH : 1];
#pragma unroll
    for (int b = 0; b < DOWN_BATCH; b++) {
        const int j = b, k = j / S, c = (j - k * S) * 32 * V + lane * V;
        if (j < total && c < I) raw[b] = ld_stream(wb[k] + ((int64_t)r * I + c) * L::BYTES);
    }
    for (int j0 = 0; j0 < total; j0 += DOWN_BATCH) {
        if (PIPE) {
#pragma unroll
            for (int b = 0; b < DOWN_BATCH; b++) {
                const int j = j0 + DOWN_BATCH + b, k = j / S, c = (j - k * S) * 32 * V + lane * V;
                if (j < total && c < I) nxt[PIPE ? b : 0] = ld_stream(wb[k] + ((int64_t)r * I + c) * L::BYTES);
            }
        } else if (j0) {
#pragma unroll
            for (int b = 0; b < DOWN_BATCH; b++) {
                const int j = j0 + b, k = j / S, c = (j - k * S) * 32 * V + lane * V;
                if (j < total && c < I) raw[b] = ld_stream(wb[k] + ((int64_t)r * I + c) * L::BYTES);
            }
        }
#pragma unroll
        for (int b = 0; b < DOWN_BATCH; b++) {
            const int j = j0 + b, k = j / S, c = (j - k * S) * 32 * V + lane * V;
            if (j >= total || c >= I) continue;
            acc = fmaf(wk[k], down_step<L>(raw[b], sg[k], a.sd, s0[k], a.block, scols, r, c, h + (int64_t)k * I), acc);
        }
        if (PIPE)
#pragma unroll
            for (int b = 0; b < DOWN_BATCH; b++) raw[b] = nxt[PIPE ? b : 0];
    }
    acc = warp_sum(acc);
    if (lane == 0) {
        float *o = a.out + (int64_t)t * a.X + r;
        *o = a.acc ? *o + acc : acc;
    }
}

/* down, 16-byte vectors, a row split over SP warps: block = RO rows x SP warps (8 warps); warp q
 * of a row takes the steps j = q, q + SP, ... of its K · S stream in rounds of DS_BATCH loads in
 * flight (registers capped so that 4 blocks = 32 warps fit an SM, 3 for fp8, with no spills:
 * ptxas -v, 2026-12-02), the row's partial sums meet in shared memory and are added in q order
 * (a fixed order: same inputs, same bits; not the one-warp kernel's order). SP warps a row
 * against down_kernel_vec's one: at batch 1 that kernel had 15 warps per SM, stalled on its
 * loads. SP = 2 (RO 4) by default, 4 (RO 2) with CINFER_CUDA_DS_SPLIT=4: at batch 1 the 2-warp
 * form's 2 · X warps fit the SMs in one wave (32 warps an SM), the 4-warp form's took two, each
 * block paying the two dependent loads of its experts' table (down_stage). Measured on an H100,
 * 2026-12-05 (bench/RESULTS.md): DeepSeek-V2-Lite dims +1.9%, Qwen3-30B-A3B dims level; a row
 * per warp (8 rows a block) and rounds of 6 loads were slower. */
enum { DS_BATCH = 4 };
template <class L, int SP, int RO>
__global__ void __launch_bounds__(SP * RO * 32, L::BYTES == 1 ? 3 : 4) down_kernel_split(exp_args a) {
    __shared__ const char *wb[DOWN_MAX_K];
    __shared__ const void *sg[DOWN_MAX_K];
    __shared__ int64_t s0[DOWN_MAX_K];
    __shared__ float wk[DOWN_MAX_K];
    __shared__ float part_sum[RO * SP];
    pdl_enter();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = blockIdx.y, K = a.K;
    down_stage(a, t, wb, sg, s0, wk);
    __syncthreads();
    const int q = warp % SP, r = blockIdx.x * RO + warp / SP;
    constexpr int V = L::VEC;
    const int I = a.I, S = (I + 32 * V - 1) / (32 * V), total = K * S;
    const int scols = a.block > 0 ? (I + a.block - 1) / a.block : 0;
    const float *h = a.h + (int64_t)t * K * I;
    float acc = 0.0f;
    if (r < a.X) {
        for (int j0 = q; j0 < total; j0 += SP * DS_BATCH) {
            uint4 raw[DS_BATCH];
#pragma unroll
            for (int b = 0; b < DS_BATCH; b++) {
                const int j = j0 + b * SP, k = j / S, c = (j - k * S) * 32 * V + lane * V;
                if (j < total && c < I) raw[b] = ld_stream(wb[k] + ((int64_t)r * I + c) * L::BYTES);
            }
#pragma unroll
            for (int b = 0; b < DS_BATCH; b++) {
                const int j = j0 + b * SP, k = j / S, c = (j - k * S) * 32 * V + lane * V;
                if (j >= total || c >= I) continue;
                acc = fmaf(wk[k], down_step<L>(raw[b], sg[k], a.sd, s0[k], a.block, scols, r, c, h + (int64_t)k * I),
                           acc);
            }
        }
        acc = warp_sum(acc);
    }
    if (lane == 0) part_sum[warp] = acc;
    __syncthreads();
    if (q == 0 && lane == 0 && r < a.X) {
        float s = part_sum[warp];
#pragma unroll
        for (int i = 1; i < SP; i++) s += part_sum[warp + i];
        float *o = a.out + (int64_t)t * a.X + r;
        *o = a.acc ? *o + s : s;
    }
}

/* CINFER_CUDA_DS_SPLIT (2, the default, or 4): down_kernel_split's warps a row */
static int ds_split(void) {
    static const int v = cb_env_int("CINFER_CUDA_DS_SPLIT", 2, 2, 4);
    return v;
}

template <class L, int SP, int RO>
static void launch_ds(cuda_be *cb, const exp_args &a, int n) {
    cb_launch(cb, down_kernel_split<L, SP, RO>, dim3((unsigned)((a.X + RO - 1) / RO), (unsigned)n), dim3(SP * RO * 32), 0,
              a);
}

template <class L>
static void launch_experts(cuda_be *cb, const exp_args &a, int n, bool al_up, bool al_down) {
    dim3 b(MOE_WARPS * 32);
    dim3 g1((unsigned)((a.I + MOE_WARPS - 1) / MOE_WARPS), (unsigned)(n * a.K));
    dim3 g2((unsigned)((a.X + MOE_WARPS - 1) / MOE_WARPS), (unsigned)n);
    if (al_up) cb_launch(cb, gate_up_kernel<L, true>, g1, b, 0, a);
    else cb_launch(cb, gate_up_kernel<L, false>, g1, b, 0, a);
    if (al_down && a.K <= DOWN_MAX_K && cb->moe_split) {
        if (ds_split() == 4) launch_ds<L, 4, 2>(cb, a, n);
        else launch_ds<L, 2, 4>(cb, a, n);
    }
    else if (al_down && a.K <= DOWN_MAX_K && cb->moe_pipe) cb_launch(cb, down_kernel_vec<L, true>, g2, b, 0, a);
    else if (al_down && a.K <= DOWN_MAX_K) cb_launch(cb, down_kernel_vec<L, false>, g2, b, 0, a);
    else cb_launch(cb, down_kernel<L>, g2, b, 0, a);
}

/* whether every matrix of one kind (0 gate, 1 up, 2 down) of the layer suits the vector path */
static bool moe_aligned(const ci_moe *m, int j, int vec, int cols, int block) {
    if (cols % vec || (block > 0 && block % vec)) return false;
    for (int e = 0; e < m->n_experts; e++) {
        const ci_mat *W = j == 0 ? &m->w_gate[e] : j == 1 ? &m->w_up[e] : &m->w_down[e];
        if (j == 0 && m->relu2) continue;
        if ((uintptr_t)W->data & 15) return false;
    }
    return true;
}

/* Whether one token row of m's experts decodes through gate_up_kernel<L, true> and
 * down_kernel_split<L, 2, 4> (f32 / f16 / bf16 table, x 16-byte aligned): the form
 * moe_fused.cu's one-launch MoE decode reproduces bit for bit. */
int cb_moe_split2_form(cuda_be *cb, const ci_moe *m, const cb_moe_tab *tab, const float *x) {
    if (tab->dtype != CI_F32 && tab->dtype != CI_F16 && tab->dtype != CI_BF16) return 0;
    const int vec = tab->dtype == CI_F32 ? 4 : 8;
    const bool al_up = ((uintptr_t)x & 15) == 0 && moe_aligned(m, 1, vec, m->hidden, 0) &&
                       moe_aligned(m, 0, vec, m->hidden, 0);
    const bool al_down = m->inter % vec == 0 && moe_aligned(m, 2, vec, m->inter, 0);
    return al_up && al_down && m->top_k <= DOWN_MAX_K && cb->moe_split && ds_split() == 2;
}

/* fp8 experts for a prefill chunk: every matrix of the layer widened to f16 (times its
 * block scale, rounded to nearest even and saturated, as gemv.cu's fp8_widen_kernel; f16:
 * cuda_internal.h, f16_sat) into one scratch buffer, the y-th widened matrix at y · I · X
 * elements (gate and up [I, X], down [X, I]: the same count), and its address into wtab[i],
 * i = 3e + j: a table the grouped GEMM reads like an f16 layer's. Gated layers widen matrix
 * i = y (3E of them); relu² layers have no gate (its entry in w is NULL, never read): 2E
 * matrices, i = 3(y / 2) + 1 + y % 2, and wtab[3e] = NULL. */
__global__ void moe_widen_kernel(__half *dst, const void **wtab, const void *const *w, const void *const *scale,
                                 const int64_t *srow0, int sd, int block, int I, int X, int relu2) {
    pdl_enter();
    const int y = blockIdx.y, i = relu2 ? 3 * (y >> 1) + 1 + (y & 1) : y, cols = i % 3 == 2 ? I : X;
    const int64_t total = (int64_t)I * X, scols = block > 0 ? (cols + block - 1) / block : 0;
    __half *d = dst + (int64_t)y * total;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        wtab[i] = d;
        if (relu2 && !(y & 1)) wtab[i - 1] = NULL;   /* the gate of expert e: none */
    }
    const uint8_t *src = (const uint8_t *)w[i];
    const void *sg = block > 0 ? scale[i] : NULL;
    if (cols % 16 == 0 && block % 16 == 0 && ((uintptr_t)src & 15) == 0 && srow0[i] + total / cols < ((int64_t)1 << 31)) {
        /* 16 elements a thread (fp8_widen16), 32-bit indices: the same values */
        const unsigned vpr = (unsigned)cols >> 4, tv = (unsigned)(total >> 4), sr0 = (unsigned)srow0[i];
        for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < tv; k += gridDim.x * blockDim.x) {
            const unsigned r = k / vpr, c = (k - r * vpr) << 4;
            const float sc = sg ? scale_elem(sg, sd, (int64_t)((sr0 + r) / block) * scols + c / block) : 1.0f;
            fp8_widen16(src + (size_t)r * cols + c, sc, d + (size_t)r * cols + c);
        }
        return;
    }
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = k / cols, c = k - r * cols;
        float v = LFP8::one(src, k);
        if (sg) v *= scale_elem(sg, sd, ((srow0[i] + r) / block) * scols + c / block);
        d[k] = __float2half_rn(f16_sat(v));
    }
}

/* The widened layer's bytes: at most this much scratch (a bigger layer loops the GEMVs). */
static const size_t MOE_WIDEN_MAX = (size_t)8 << 30;

/* the matrices of a layer moe_widen_kernel widens: gate, up, down per expert, or up, down */
static size_t moe_widen_count(const cb_moe_tab *tab) { return (tab->relu2 ? 2 : 3) * (size_t)tab->E; }

static void moe_grouped_fp8(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                            const ci_moe *m, const cb_moe_tab *tab) {
    const size_t per = (size_t)tab->I * tab->X, count = moe_widen_count(tab), slots = 3 * (size_t)tab->E;
    __half *wd = (__half *)cb_scratch_get(cb, &cb->wdeq, count * per * 2 + slots * sizeof(void *) + 16);
    if (!wd) return;
    const void **wtab = (const void **)(((uintptr_t)(wd + count * per) + 15) & ~(uintptr_t)15);
    unsigned bx = (unsigned)((per + 255) / 256);
    if (bx > 64) bx = 64;
    cb_launch(cb, moe_widen_kernel, dim3(bx, (unsigned)count), dim3(256), 0, wd, wtab, tab->w, tab->scale, tab->srow0,
              tab->scale_dtype < 0 ? 0 : tab->scale_dtype, tab->scale_dtype >= 0 ? tab->block : 0, tab->I, tab->X,
              tab->relu2 ? 1 : 0);
    if (cb_launched(cb, "moe fp8 widen")) return;
    cb_moe_tab wide = *tab;
    wide.dtype = CI_F16;
    wide.w = wtab;
    wide.scale = NULL;
    wide.block = 0;
    wide.scale_dtype = -1;
    cb_moe_grouped(cb, out, x, n, sel, w, m, &wide);
}

int cb_moe_fp8_qt_form(const ci_moe *m, const cb_moe_tab *tab, const float *x) {
    if (tab->dtype != CI_F8_E4M3 || tab->scale_dtype < 0) return 0;
    const int X = m->hidden, I = m->inter;
    return !((uintptr_t)x & 15) && moe_aligned(m, 1, 16, X, tab->block) && moe_aligned(m, 0, 16, X, tab->block) &&
           I % 16 == 0 && moe_aligned(m, 2, 16, I, tab->block);
}

/* fp8 experts of 1..CB_GEMV_MAX_N rows on the tensor-core pair (quant_mma_moe.cu; rt: routing
 * in its gate+up launch) when it takes them (E4M3 with block scales, x and every matrix 16-byte
 * aligned, block and widths multiples of 16); 0 and nothing launched when not */
static int moe_fp8_qt(cuda_be *cb, const cb_moe_tab *tab, float *out, const float *x, int n, const int32_t *sel,
                      const float *w, const ci_moe *m, int acc, const cb_route *rt) {
    if (n > CB_GEMV_MAX_N || !cb_moe_fp8_qt_form(m, tab, x)) return 0;
    const int X = m->hidden, I = m->inter, K = m->top_k;
    float *h = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)n * K * I * sizeof(float));
    return h && cb_qt_moe_fp8(cb, tab->w, tab->scale, tab->srow0, tab->block, tab->scale_dtype, m->relu2, X, I, K,
                              m->act_limit, sel, w, x, h, out, n, acc, rt);
}

int cb_moe_route_experts(cuda_be *cb, float *out, const float *x, int n, const float *logits, const int32_t *ids,
                         int32_t *sel, float *w, const ci_moe *m, int acc) {
    if (!cb->route_fuse || cb->failed || n < 1 || n > CB_GEMV_MAX_N || !route_ok(m)) return 0;
    cb_route rt;
    rt.logits = logits; rt.ids = ids; rt.sel = sel; rt.w = w; rt.a = route_args_of(m);
    if (m->w_up[0].dtype == CI_U32) return cb_q_moe_experts(cb, out, x, n, sel, w, m, acc, &rt);
    const cb_moe_tab *tab = cb_moe_table(cb, m);
    return tab && moe_fp8_qt(cb, tab, out, x, n, sel, w, m, acc, &rt);
}

static void op_moe_experts(ci_backend *be, float *out, const float *x, int n, const int32_t *sel, const float *w,
                           const ci_moe *m, int acc) {
    cuda_be *cb = (cuda_be *)be;
    if (cb->failed || n <= 0) return;
    if (m->w_up[0].dtype == CI_U32) { cb_q_moe_experts(cb, out, x, n, sel, w, m, acc); return; }  /* quant.cu */
    const cb_moe_tab *tab = cb_moe_table(cb, m);
    if (!tab) return;
    /* fp8 on the grouped GEMM: read directly, or widened when the layer fits the widening cap */
    const bool fp8_ok = n > CB_GEMV_MAX_N && cb_moe_grouped_fp8_ok(m, tab);
    const bool direct = fp8_ok && tab->fp8_direct;
    const bool fp8 = fp8_ok && (direct || moe_widen_count(tab) * tab->I * tab->X * 2 <= MOE_WIDEN_MAX);
    if (n > CB_GEMV_MAX_N && (fp8 || cb_moe_grouped_ok(m, tab))) {
        float *y = out;
        if (acc) {
            y = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)n * m->hidden * sizeof(float));
            if (!y) return;
        }
        if (direct) cb_moe_grouped_q(cb, y, x, n, sel, w, m, &tab->mgq);
        else if (fp8) moe_grouped_fp8(cb, y, x, n, sel, w, m, tab);
        else cb_moe_grouped(cb, y, x, n, sel, w, m, tab);
        if (acc) cb_add(cb, out, y, (int64_t)n * m->hidden);
        return;
    }
    const int K = m->top_k, chunk = n < CB_GEMV_MAX_N ? n : CB_GEMV_MAX_N;
    float *h = (float *)cb_scratch_get(cb, &cb->moe_h, (size_t)chunk * K * m->inter * sizeof(float));
    if (!h) return;
    exp_args a;
    memset(&a, 0, sizeof a);
    a.w = tab->w; a.scale = tab->scale; a.srow0 = tab->srow0;
    a.block = tab->block; a.sd = tab->scale_dtype < 0 ? 0 : tab->scale_dtype;
    a.X = m->hidden; a.I = m->inter; a.K = K; a.relu2 = m->relu2; a.limit = m->act_limit; a.acc = acc;
    a.h = h;
    const int vec = tab->dtype == CI_F32 ? 4 : tab->dtype == CI_F8_E4M3 ? 16 : 8;
    const int blk = tab->scale_dtype >= 0 ? tab->block : 0;
    const bool al_up = ((uintptr_t)x & 15) == 0 && moe_aligned(m, 1, vec, a.X, blk) && moe_aligned(m, 0, vec, a.X, blk);
    const bool al_down = a.I % vec == 0 && moe_aligned(m, 2, vec, a.I, blk);   /* h rows 16-byte aligned too */
    /* fp8 at decode: the tensor-core pair (quant_mma_moe.cu) when it takes the layer */
    if (moe_fp8_qt(cb, tab, out, x, n, sel, w, m, acc, nullptr)) return;
    for (int t0 = 0; t0 < n; t0 += CB_GEMV_MAX_N) {
        const int k = n - t0 < CB_GEMV_MAX_N ? n - t0 : CB_GEMV_MAX_N;
        a.sel = sel + (int64_t)t0 * K;
        a.wt = w + (int64_t)t0 * K;
        a.x = x + (int64_t)t0 * a.X;
        a.out = out + (int64_t)t0 * a.X;
        switch (tab->dtype) {
        case CI_F32: launch_experts<LF32>(cb, a, k, al_up, al_down); break;
        case CI_F16: launch_experts<LF16>(cb, a, k, al_up, al_down); break;
        case CI_BF16: launch_experts<LBF16>(cb, a, k, al_up, al_down); break;
        case CI_F8_E4M3: launch_experts<LFP8>(cb, a, k, al_up, al_down); break;
        default: return;
        }
    }
    cb_launched(cb, "moe_experts");
}

void cb_moe_ops(ci_backend *be) {
    be->moe_route = op_moe_route;
    be->moe_experts = op_moe_experts;
}
