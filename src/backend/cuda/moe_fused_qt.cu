/* moe_fused_qt.cu — a MoE block's decode of one token row in one launch (backend.h
 * moe_norm_experts) for fp8 E4M3 experts with 128 x 128 block scales, and a DeepSeek-style ungated
 * SwiGLU shared expert of fp8 beside them: the block's RMSNorm and router product, the routing,
 * the routed and shared experts' gate / up, their down sums, added into the residual.
 *
 * Why: at one token an fp8 DeepSeek layer's MoE was five launches (the router GEMV, the experts'
 * gate+up with the routing, their down, the shared SwiGLU pair, its down), each with its start and
 * its tail: ncu on an H100 (DeepSeek-V2-Lite dims, 2026-12-07) 8.3 + 21.0 + 13.8 + 11.2 + 8.6 us
 * for 63 MB, where moe_fused.cu's one launch streams a bf16 layer's 127 MB in 61.
 *
 * Bits: the composed ops' own (norm_matmul_keep, moe_route, moe_experts on quant_mma_moe.cu's pair,
 * matmul_swiglu and matmul_acc on quant_mma.cu's dense kernel, add), so a token decodes to the same
 * bits alone (here) or in a batch (there); test_cuda_ops "moe_norm_experts" checks it. Each tile's
 * work is split as those kernels split it (cb_qt_moe_plan, cb_qt_fp8_ks: ks parts of a tile's groups,
 * summed in part order; down items (expert, part) chained on the pair's dnw warp slots, the slots
 * summed in order): here every part is a work item of any warp of the grid, whose sums go to global
 * memory (partials) with an arrival count a tile; the item that arrives last adds the tile's parts in
 * their order, as the composed kernels' block reductions do, and writes the result (h, or out).
 *
 * Phases (TW = gridDim.x · MF_WARPS warps, each block resident all the time, moe_fused.cuh):
 *   1. mf_norm_router (xn in shared memory, logits); xn staged as the B operand (qt_stage); then
 *      between the block's arrival at the grid barrier and its wait, the shared expert's gate+up
 *      items (no routing needed);
 *   2. every block routes (route_row; block 0 writes sel / w); the routed gate+up items; barrier;
 *   3. h copied to shared memory and staged (the routed rows, the shared one); the down items:
 *      routed (output tile, warp slot) chains and shared (output tile, part) items, in chunks of
 *      consecutive shared items so the two kinds spread over the warps evenly; the last arrival of
 *      an output tile writes out[r] = (acc ? out[r] : 0) + (routed + shared).
 * Status: written in the fifty-seventh session (2026-12-08), which was lent no device; it compiles
 * (128 registers, ~100 bytes of spills a variant) but has never run, so it is off by default
 * (cuda_internal.h CB_MOE_FUSE_QT; CINFER_CUDA_MOE_FUSE_QT=1 turns it on) until
 * bench/device_runs/2026-12-08a-fusedqt.sh has checked its bits and measured it.
 * CINFER_CUDA_MOE_FUSE=0 or CINFER_CUDA_MOE_FUSE_QT=0: the composed ops. */
#include "quant_mma.cuh"
#include "route.cuh"
#include "moe_fused.cuh"

struct qf_args {
    mf_p1 p1;
    route_args ra;
    const int32_t *ids;
    int32_t *sel;
    float *wout;
    const void *const *w, *const *scale;   /* the experts' table [3E] (cb_moe_tab) */
    const int64_t *srow0;
    int sd, es;                /* their scales: qt_load's kind, bytes */
    int X, I, K, acc;
    float limit;
    /* the shared expert (SI > 0): gate, up [SI, X], down [X, SI] */
    const uint8_t *sc[3];
    const char *ss[3];
    int64_t s0[3];
    int ssd[3], ses[3];
    int SI;
    int gks, sks;              /* gate+up parts: routed (the pair's ks), shared (the dense pair's) */
    int dkp, dnw, dks;         /* down: the pair's kparts and warp slots; the shared down's ks */
    int schunk_g, schunk_d;    /* shared items a warp takes in a row */
    int big;                   /* floats of the shared xn / h region */
    int xs_off;                /* bytes to the staged operand region */
    float *h;                  /* [K · I + SI] */
    float *gpart, *dpart;      /* partials: gate+up [items][2][16], down [tiles][dnw + dks][16] */
    unsigned *gcnt, *dcnt;     /* arrivals: a gate+up tile each (routed, shared), an output tile each */
    float *out;
    unsigned *bar;
};

enum { QF_W = 8 };   /* fp8: 8 code words a lane and row of a 128-column group */

/* one gate+up item: (tile, part kp of ks) of the gate / up pair at codes c / scales s, rows r0..r0+15
 * of `rows`; its partial to P (32 floats: gate rows, up rows); arrival on *cnt; the last arrival of
 * the tile (base: the tile's first item's partial) adds the parts in order and writes h[r] */
__device__ __forceinline__ void qf_gu_item(const qf_args &a, const uint8_t *const *c, const char *const *s,
                                           const int64_t *s0, int sd, int es, int64_t rows, int64_t r0, int kp, int ks,
                                           const __half2 *xs, float *P, float *base, unsigned *cnt, float *h) {
    constexpr int U = qt_u<QF_W>();
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ng = a.X / 128, gb = kp * ng / ks, ge = (kp + 1) * ng / ks;
    qt_rows<2> R;
#pragma unroll
    for (int i = 0; i < 2; i++)
        qt_row_ptrs(c[i], s[i], nullptr, s0[i], 128, rows, 8, a.X, ng, es, r0, g, R.c[i], R.s[i], R.b[i]);
    qt_pv_set<QT_E4M3, 2>(R, 0, sd, ng, gb, nullptr, t);
    qt_buf<QF_W, 2, U> A;
    qt_load<QT_E4M3, QF_W, 2, U>(A, R, sd, t, gb, gb, ge, 0);
    float acc[2][4];
#pragma unroll
    for (int i = 0; i < 2; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const __half2 *xq[1] = { xs + (g & 1) * qt_rs(a.X) };
    const float *xsm[1] = { nullptr };
    qt_tile<QT_E4M3, QF_W, 2, 1, U>(A, R, sd, gb, ge, xq, xsm, t, acc, 0);
    if (t == 0)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            P[i * 16 + g] = acc[i][0];
            P[i * 16 + g + 8] = acc[i][1];
        }
    __threadfence();
    __syncwarp();
    unsigned old = 0;
    if (lane == 0) old = atomicAdd(cnt, 1u);
    old = __shfl_sync(0xffffffffu, old, 0);
    if (old != (unsigned)ks - 1) return;
    __threadfence();
    if (lane < 16) {   /* qt_reduce's order: part 0's sums, then each later part's added */
        float v[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float x = __ldcg(base + i * 16 + lane);
            for (int q = 1; q < ks; q++) x += __ldcg(base + q * 32 + i * 16 + lane);
            v[i] = x;
        }
        const int64_t r = r0 + lane;
        if (r < rows) h[r] = moe_act(v[0], v[1], 0, a.limit);
    }
    if (lane == 0) *cnt = 0u;   /* at rest for the next launch (every part has arrived) */
}

/* the sum of one down item: groups [gb, ge) of rows r0.. of a [X, cols] matrix, times the staged h row xq */
__device__ __forceinline__ void qf_dn_part(const qf_args &a, const uint8_t *c, const char *s, int64_t s0, int sd, int es,
                                           int cols, int64_t r0, int gb, int ge, const __half2 *xq0, float (*part)[4]) {
    constexpr int U = qt_u<QF_W>();
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, ng = cols / 128;
    qt_rows<1> R;
    qt_row_ptrs(c, s, nullptr, s0, 128, a.X, 8, cols, ng, es, r0, g, R.c[0], R.s[0], R.b[0]);
    qt_pv_set<QT_E4M3, 1>(R, 0, sd, ng, gb, nullptr, t);
    qt_buf<QF_W, 1, U> A;
    qt_load<QT_E4M3, QF_W, 1, U>(A, R, sd, t, gb, gb, ge, 0);
    part[0][0] = part[0][1] = part[0][2] = part[0][3] = 0.0f;
    const __half2 *xq[1] = { xq0 + (g & 1) * qt_rs(cols) };
    const float *xsm[1] = { nullptr };
    qt_tile<QT_E4M3, QF_W, 1, 1, U>(A, R, sd, gb, ge, xq, xsm, t, part, 0);
}

/* a down partial's arrival at output tile ot (16 rows at r0); the last adds the routed slots in order
 * (qt_dn's warp order, 0 for empty slots), then the shared parts in order (qt_reduce's), and writes
 * out = (acc ? out : 0) + (routed + shared) */
__device__ __forceinline__ void qf_dn_arrive(const qf_args &a, int ot, int nq, float (*acc)[4], float *P) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (t == 0) {
        P[g] = acc[0][0];
        P[g + 8] = acc[0][1];
    }
    __threadfence();
    __syncwarp();
    unsigned old = 0;
    if (lane == 0) old = atomicAdd(a.dcnt + ot, 1u);
    old = __shfl_sync(0xffffffffu, old, 0);
    const int shared_parts = a.SI ? a.dks : 0;
    if (old != (unsigned)(nq + shared_parts) - 1) return;
    __threadfence();
    if (lane < 16) {
        const float *T = a.dpart + (int64_t)ot * (a.dnw + a.dks) * 16;
        float s = 0.0f;
        for (int q = 0; q < a.dnw; q++) s += q < nq ? __ldcg(T + q * 16 + lane) : 0.0f;
        if (shared_parts) {
            float sh = __ldcg(T + a.dnw * 16 + lane);
            for (int q = 1; q < shared_parts; q++) sh += __ldcg(T + (a.dnw + q) * 16 + lane);
            s += sh;   /* matmul_acc's y += v, y being the routed sum */
        }
        const int64_t r = (int64_t)ot * 16 + lane;
        if (r < a.X) a.out[r] = a.acc ? __ldcg(a.out + r) + s : s;
    }
    if (lane == 0) a.dcnt[ot] = 0u;
}

template <class LR, int KS>
__global__ void __launch_bounds__(MF_WARPS * 32, 1) qf_kernel(qf_args a) {
    extern __shared__ float4 qf_smem[];
    float *big = (float *)qf_smem;   /* xn [X] in phases 1-2, h [K · I + SI] in phase 3 */
    float *rsm = big + a.big;        /* route_row's 2E floats */
    __half2 *xs = (__half2 *)((char *)qf_smem + a.xs_off);   /* the staged B operand: xn, then h */
    __shared__ int chosen[ROUTE_MAX_K];
    __shared__ float wsel[ROUTE_MAX_K];
    const int warp = threadIdx.x >> 5, gw = blockIdx.x * MF_WARPS + warp;
    const int TW = gridDim.x * MF_WARPS, X = a.X, I = a.I, K = a.K, SI = a.SI;
    const int ntI = (I + 15) / 16, ntS = (SI + 15) / 16, OT = (X + 15) / 16;
    const int RG = K * ntI * a.gks, SG = ntS * a.sks;   /* gate+up items: routed, shared */
    float *gpr = a.gpart, *gps = a.gpart + (int64_t)RG * 32;

    /* ---- 1. norm, router, staged xn; the shared expert's gate+up behind the barrier ---- */
    mf_norm_router<LR, KS>(a.p1, big, nullptr);
    qt_stage<QT_E4M3, QF_W, true>(xs, nullptr, big, 0, 1, X);
    {
        const unsigned old = mf_arrive(a.bar);
        const int sc = a.schunk_g;
        for (int c0 = gw * sc; c0 < SG; c0 += TW * sc)
            for (int j = c0; j < c0 + sc && j < SG; j++) {
                const int tile = j / a.sks, kp = j - tile * a.sks;
                qf_gu_item(a, a.sc, a.ss, a.s0, a.ssd[0], a.ses[0], SI, (int64_t)tile * 16, kp, a.sks, xs, gps + (int64_t)j * 32,
                           gps + (int64_t)tile * a.sks * 32, a.gcnt + K * ntI + tile, a.h + (int64_t)K * I);
            }
        mf_wait(a.bar, old);
    }

    /* ---- 2. routing, the routed experts' gate+up ---- */
    route_row(0, a.p1.logits, a.ids, a.ra, rsm, chosen, wsel);
    if ((int)threadIdx.x < K && blockIdx.x == 0) {
        a.sel[threadIdx.x] = chosen[threadIdx.x];
        a.wout[threadIdx.x] = wsel[threadIdx.x];
    }
    __syncthreads();
    for (int i = gw; i < RG; i += TW) {
        const int tile = i / a.gks, kp = i - tile * a.gks, k = tile / ntI, tt = tile - k * ntI, e = chosen[k];
        const uint8_t *c[2] = { (const uint8_t *)a.w[3 * e], (const uint8_t *)a.w[3 * e + 1] };
        const char *s[2] = { (const char *)a.scale[3 * e], (const char *)a.scale[3 * e + 1] };
        const int64_t s0[2] = { a.srow0[3 * e], a.srow0[3 * e + 1] };
        qf_gu_item(a, c, s, s0, a.sd, a.es, I, (int64_t)tt * 16, kp, a.gks, xs, gpr + (int64_t)i * 32,
                   gpr + (int64_t)tile * a.gks * 32, a.gcnt + tile, a.h + (int64_t)k * I);
    }
    mf_grid_sync(a.bar);

    /* ---- 3. down ---- */
    const int KI = K * I;
    for (int i = threadIdx.x * 4; i < KI + SI; i += MF_WARPS * 32 * 4)
        *(float4 *)(big + i) = __ldcg((const float4 *)(a.h + i));
    __syncthreads();
    const int rsI = qt_rs(I);
    __half2 *xsS = xs + (size_t)2 * K * rsI;
    qt_stage<QT_E4M3, QF_W, true>(xs, nullptr, big, I, K, I);
    if (SI) qt_stage<QT_E4M3, QF_W, true>(xsS, nullptr, big + KI, SI, 1, SI);
    const int items = K * a.dkp, nq = items < a.dnw ? items : a.dnw, ngi = I / 128;
    const int RD = OT * nq, SD = SI ? OT * a.dks : 0, sc = a.schunk_d;
    const int units = RD + (SD + sc - 1) / sc;
    for (int u = gw; u < units; u += TW) {
        if (u < RD) {   /* routed: output tile ot's warp slot q, its items q, q + dnw, ... */
            const int ot = u / nq, q = u - ot * nq;
            float acc[1][4] = { { 0.0f, 0.0f, 0.0f, 0.0f } };
            for (int it = q; it < items; it += a.dnw) {
                const int k = it / a.dkp, kp = it - k * a.dkp, m = 3 * chosen[k] + 2;
                float part[1][4];
                qf_dn_part(a, (const uint8_t *)a.w[m], (const char *)a.scale[m], a.srow0[m], a.sd, a.es, I, (int64_t)ot * 16,
                           kp * ngi / a.dkp, (kp + 1) * ngi / a.dkp, xs + (size_t)2 * k * rsI, part);
#pragma unroll
                for (int j = 0; j < 4; j++) acc[0][j] = fmaf(wsel[k], part[0][j], acc[0][j]);
            }
            qf_dn_arrive(a, ot, nq, acc, a.dpart + ((int64_t)ot * (a.dnw + a.dks) + q) * 16);
        } else {        /* shared: a chunk of (output tile, part) items */
            const int c0 = (u - RD) * sc, ngs = SI / 128;
            for (int j = c0; j < c0 + sc && j < SD; j++) {
                const int ot = j / a.dks, kp = j - ot * a.dks;
                float part[1][4];
                qf_dn_part(a, a.sc[2], a.ss[2], a.s0[2], a.ssd[2], a.ses[2], SI, (int64_t)ot * 16, kp * ngs / a.dks,
                           (kp + 1) * ngs / a.dks, xsS, part);
                qf_dn_arrive(a, ot, nq, part, a.dpart + ((int64_t)ot * (a.dnw + a.dks) + a.dnw + kp) * 16);
            }
        }
    }
}

/* the scale kind qt_load reads (0 f32, 2 bf16, 3 E8M0) and its bytes, of a ci_mat's scale dtype; -1: none */
static int qf_sd(ci_dtype d) { return d == CI_F32 ? 0 : d == CI_BF16 ? 2 : d == CI_F8_E8M0 ? 3 : -1; }

/* an fp8 matrix the dense kernels take: [rows, cols], 128 x 128 block scales, 16-byte aligned */
static bool qf_mat_ok(const ci_mat *w, int64_t rows, int64_t cols) {
    return w && w->dtype == CI_F8_E4M3 && w->rows == rows && w->cols == cols && w->scale && w->block == 128 &&
           qf_sd(w->scale_dtype) >= 0 && !((uintptr_t)w->data & 15) && cols % 128 == 0;
}

template <class LR>
static int qf_launch(cuda_be *cb, int ks, const qf_args &a, size_t smem) {
    auto kern = ks == 1 ? qf_kernel<LR, 1> : qf_kernel<LR, 4>;
    static int occ[2] = { -1, -1 };   /* per instantiation: blocks an SM at the largest shared size asked so far */
    static size_t occ_smem[2];
    const int v = ks == 1 ? 0 : 1;
    if (occ[v] < 0 || smem > occ_smem[v]) {
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ[v], kern, MF_WARPS * 32, smem) != cudaSuccess) {
            cudaGetLastError();
            occ[v] = 0;
        }
        occ_smem[v] = smem;
    }
    if (occ[v] < 1) return 0;
    cb_launch(cb, kern, dim3((unsigned)cb->sm_count), dim3(MF_WARPS * 32), smem, a);
    return 1;
}

int cb_moe_fused_qt(cuda_be *cb, float *out, float *xn, float *logits, int32_t *sel, float *w, const float *x,
                    const float *norm_w, float eps, const int32_t *ids, int n, const ci_mat *W, const ci_moe *m, int acc) {
    /* the forms the composed ops take at one row: the router on gemv.cu's NORM GEMV (as moe_fused.cu),
     * the experts on quant_mma_moe.cu's pair, the shared expert on quant_mma.cu's dense kernel */
    if (!cb->moe_fuse || n != 1 || !cb->norm_fuse || cb->gemv1 != 0 || !route_ok(m) || m->relu2) return 0;
    if (W->dtype != CI_F32 && W->dtype != CI_F16 && W->dtype != CI_BF16) return 0;
    const int X = m->hidden, I = m->inter, E = m->n_experts, K = m->top_k;
    const int vr = W->dtype == CI_F32 ? 4 : 8;
    if (W->rows != E || W->cols != X || X % vr || ((uintptr_t)W->data & 15) || ((uintptr_t)x & 15) ||
        ((uintptr_t)norm_w & 15) || ((uintptr_t)xn & 15) || m->w_up[0].dtype != CI_F8_E4M3 || m->e_lo ||
        (m->e_hi && m->e_hi != E) || K > ROUTE_MAX_K || X > 4 * 32 * MF_WARPS * MF_NI)
        return 0;
    if (X % 128 || I % 128) return 0;
    const cb_moe_tab *tab = cb_moe_table(cb, m);
    if (!tab || !cb_q_qmma() || tab->block != 128 || tab->scale_dtype > 2 || !cb_moe_fp8_qt_form(m, tab, xn)) return 0;
    cb_qt_moe_part pt;
    if (!cb_qt_moe_plan(cb, X, I, K, 0, 128, cb->route_fuse, E, &pt)) return 0;
    const int SI = m->sh_down ? m->shared_inter : 0;
    int sks = 0, dks = 0;
    if (SI) {   /* an ungated fp8 SwiGLU shared expert the dense kernels take */
        if (m->sh_router || SI % 128 || !qf_mat_ok(m->sh_gate, SI, X) || !qf_mat_ok(m->sh_up, SI, X) ||
            !qf_mat_ok(m->sh_down, X, SI) || m->sh_gate->scale_dtype != m->sh_up->scale_dtype)
            return 0;
        sks = cb_qt_fp8_ks(cb, SI, X, 1);
        dks = cb_qt_fp8_ks(cb, X, SI, 0);
        if (!sks || !dks) return 0;
    }
    const int ntI = I / 16, ntS = SI / 16, OT = (X + 15) / 16;
    const int big = X > K * I + SI ? X : K * I + SI;
    const int rsX = qt_rs(X), rsI = qt_rs(I), rsS = SI ? qt_rs(SI) : 0;
    size_t smem = ((size_t)big + 2 * (size_t)E) * sizeof(float);
    smem = (smem + 15) & ~(size_t)15;
    const int xs_off = (int)smem;
    const size_t stage = (size_t)2 * (K * rsI + rsS) > (size_t)2 * rsX ? (size_t)2 * (K * rsI + rsS) : (size_t)2 * rsX;
    smem += stage * 4;
    if (smem > (size_t)200 << 10) return 0;
    /* scratch: h, the partials; the arrival counts (zero at rest) apart */
    const int64_t RG = (int64_t)K * ntI * pt.gks, SG = (int64_t)ntS * sks;
    const size_t h_f = ((size_t)K * I + SI + 3) & ~(size_t)3;
    const size_t gp_f = (size_t)(RG + SG) * 32, dp_f = (size_t)OT * (pt.dnw + dks) * 16;
    float *h = (float *)cb_scratch_get(cb, &cb->moe_h, (h_f + gp_f + dp_f) * sizeof(float));
    const size_t ncnt = (size_t)K * ntI + ntS + OT;
    const void *cnt_was = cb->qf_cnt.p;
    unsigned *cnt = (unsigned *)cb_scratch_get(cb, &cb->qf_cnt, ncnt * sizeof(unsigned));
    if (!h || !cnt) return 0;
    if (cnt != cnt_was && cb_fail(cb, "moe_fused_qt counters", cudaMemsetAsync(cnt, 0, cb->qf_cnt.bytes, cb->stream)))
        return 0;
    qf_args a;
    memset(&a, 0, sizeof a);
    a.p1.x = x; a.p1.norm_w = norm_w; a.p1.eps = eps; a.p1.router = W->data; a.p1.sr = NULL;
    a.p1.X = X; a.p1.E = E; a.p1.xn = xn; a.p1.logits = logits; a.p1.glogit = NULL;
    a.ra = route_args_of(m); a.ids = ids; a.sel = sel; a.wout = w;
    a.w = tab->w; a.scale = tab->scale; a.srow0 = tab->srow0;
    a.sd = tab->scale_dtype == 0 ? 0 : tab->scale_dtype == 1 ? 2 : 3;
    a.es = tab->scale_dtype == 0 ? 4 : tab->scale_dtype == 1 ? 2 : 1;
    a.X = X; a.I = I; a.K = K; a.acc = acc; a.limit = m->act_limit;
    a.SI = SI;
    if (SI) {
        const ci_mat *sm[3] = { m->sh_gate, m->sh_up, m->sh_down };
        for (int i = 0; i < 3; i++) {
            a.sc[i] = (const uint8_t *)sm[i]->data;
            a.ss[i] = (const char *)sm[i]->scale;
            a.s0[i] = sm[i]->scale_row0;
            a.ssd[i] = qf_sd(sm[i]->scale_dtype);
            a.ses[i] = a.ssd[i] == 0 ? 4 : a.ssd[i] == 2 ? 2 : 1;
        }
    }
    a.gks = pt.gks; a.sks = sks; a.dkp = pt.kparts; a.dnw = pt.dnw; a.dks = dks;
    /* shared items a warp takes in a row: as few as leave every item a warp of its own */
    const int TW = cb->sm_count * MF_WARPS, items = K * pt.kparts, nq = items < pt.dnw ? items : pt.dnw;
    const int64_t RD = (int64_t)OT * nq, SD = (int64_t)OT * dks;
    a.schunk_g = 1;
    while (a.schunk_g < sks && (SG + a.schunk_g - 1) / a.schunk_g > TW) a.schunk_g *= 2;
    a.schunk_d = 1;
    while (SD && a.schunk_d < dks && RD + (SD + a.schunk_d - 1) / a.schunk_d > TW) a.schunk_d *= 2;
    a.big = big; a.xs_off = xs_off;
    a.h = h; a.gpart = h + h_f; a.dpart = h + h_f + gp_f;
    a.gcnt = cnt; a.dcnt = cnt + (size_t)K * ntI + ntS;
    a.out = out; a.bar = cb->gbar;
    const int ks = X > 2048 ? 4 : 1;   /* the router rows as gemv.cu's one-row form (moe_fused.cu) */
    int ok = 0;
    switch (W->dtype) {
    case CI_F32: ok = qf_launch<LF32>(cb, ks, a, smem); break;
    case CI_F16: ok = qf_launch<LF16>(cb, ks, a, smem); break;
    default: ok = qf_launch<LBF16>(cb, ks, a, smem); break;
    }
    if (!ok) return 0;
    cb_launched(cb, "moe_fused_qt");   /* a failure is sticky: the caller's next op sees it */
    return 1;
}
