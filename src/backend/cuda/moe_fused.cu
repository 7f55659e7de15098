/* moe_fused.cu — a MoE block's decode of one token row in one launch (backend.h
 * moe_norm_experts): the block's RMSNorm and router product, the routing, the routed experts'
 * gate / up and their down sum (added into the residual), in three phases of one grid that is
 * resident all at once (a block of 16 warps an SM), parted by grid-wide barriers.
 *
 * Why: at one token a MoE layer's routed part was four launches (norm_matmul_keep's router GEMV,
 * moe_route, gate_up, down), each paying its start and its tail, the route launch reading
 * nothing. ncu on an H100 (Qwen3-30B-A3B dims, kernels one at a time): route 7.3-8.5 us, gate_up
 * 24.5 (61.5% of the DRAM peak), down 17.6-18.0, plus the router GEMV, against 53-56 us for this
 * launch over the same 76 MB; in a decode step +1.4..2.6% (bench/RESULTS.md, thirty-ninth
 * session). Its streaming phases run below the standalone kernels' rate (one block of 16 warps
 * an SM keeps fewer bytes in flight than their 32-64 warps); what it saves is the launches.
 *
 * Phases (TW = gridDim.x · MF_WARPS warps, warp gw):
 *   1. before pdl_enter each router warp loads its first batch of router weights, every thread
 *      its share of the norm weight, the block the experts' table (E <= 256); then x into
 *      shared memory, its inverse RMS by warps 0..3 in the GEMV's order, xn = x · rms · w kept
 *      there (block 0 also writes it to xn); router row r is warp (r · KS + kw)'s, KS = 1 or 4
 *      warps a row as gemv.cu's launch for that width; logits written. Barrier.
 *      (With a shared expert and one warp a router row, its gate / up units run between the
 *      block's arrival at this barrier and its wait: mf_arrive / mf_wait, CB_MF_EARLY.)
 *   2. every block routes (route.cuh route_row, the logits through L2; block 0 writes sel / w),
 *      then gate_up units u = k · I + r (expert slot k, row r) go round the warps: the gate and
 *      up rows against xn, h[u] = act(g, u) written; a warp streams its units in half batches,
 *      the next half's loads in flight during the current one's sums (+1.1..1.6% decode against
 *      whole batches loaded then summed, Qwen3-30B-A3B dims on an H100, RESULTS.md forty-sixth
 *      session). Each warp loads its first down batch (weights: before the barrier). Barrier.
 *   3. every block copies h ([K, I] floats) into shared memory; output row r is warp r's (+ TW
 *      ...): its K · S 16-byte steps j (S a row of one expert) in batches, two buffers; steps
 *      of even and odd j summed apart and added at the end, as down_kernel_split<L, 2, 4>;
 *      out[r] = (acc ? out[r] : 0) + the sum.
 * A shared expert (DeepSeek's own MLP beside the routed experts, Nemotron-H's relu² one, Qwen3-Next /
 * Qwen3.5-MoE's σ-gated one; backend.h ci_moe.sh_down) rides along: its SI gate / up rows are units
 * K · I.. of phase 2 (h after the routed slots'). A σ-gated one's down steps follow the routed ones
 * in phase 3 with weight σ(xn · sh_router), whose row is router row E of phase 1 (its logit kept at
 * h[K · I + SI]): one launch for Qwen's six (+3.0..3.7% decode, Qwen3.5-35B-A3B dims, H100). An
 * ungated one's down is matmul_acc's GEMV after the launch: in phase 3 (weight 1) it took the down
 * phase from 18.8 to 35.8 us at DeepSeek-V2-Lite dims for 11.5 MB more (26.8 -> 49.7 at
 * Nemotron-3-Nano's for 20 MB; prof.cuh marks, cause not found) and lost 6% / 13% of the decode;
 * as the GEMV, +2.6% / +1.3% (bench/RESULTS.md fiftieth session). Not the composed ops' bits (the
 * gate / up in gate_up_kernel's order, the gated sum rounded once with the routed one):
 * test_cuda_ops "moe_norm_experts shared" bounds it against the CPU. CINFER_CUDA_MOE_SHARED=0: the
 * composed ops.
 * Shared rows are read by 16-byte loads without bank conflicts (sh_row): the first form read a
 * float at a time with the lanes' rows 32 bytes apart (8-way conflicts) and ran 7% slower than
 * the four launches. Measured and not kept: 8 warps a block (the rest of the SM free for the
 * kernels before and after: slower), 32 (64 registers: slower), warps asking L2 for their next
 * rows (slower).
 * Where a block's time goes (prof.cuh marks, CINFER_CUDA_PROF build; Qwen3-30B-A3B dims bf16 on an
 * H100, medians, before the half batches): x and norm 1.2 us, the first barrier 3.0, routing 4.9,
 * gate / up 17.0 (50 MB: ~2.9 TB/s), the second barrier 5.7 (the warps with a third gate / up unit:
 * 6144 units over 2112 warps), down 10.8; a launch spans 47 us. Since (forty-seventh session,
 * RESULTS.md): the ranks by 4 threads an expert (route.cuh), routing 6.2 -> 3.8 us with the marks
 * inside it; the one-atomic barrier, 2.9 -> 2.2 and 4.9 -> 4.2; decode +4.0..4.5%.
 * Bits: every sum runs in the order of the kernel it replaces (gemv_kernel's NORM pass and
 * its lanes' column order, route_kernel, gate_up_kernel<L, true>, down_kernel_split<L, 2, 4>),
 * so the results equal the three ops' bit for bit (test_cuda_ops "moe_norm_experts" checks
 * it; `cinfer logits --step` of the MoE fixtures cmp-identical); where a call would take another
 * form of those ops (fp8 or MLX weights, more rows, a tuning switch) the three ops run instead.
 * The barrier (mf_grid_sync): one counter in device memory (cuda_be.gbar) whose top bit flips
 * when every block has added to it, which the blocks poll. The grid is never
 * larger than the blocks that fit the SMs at once (the occupancy calculator), so every block
 * is resident while the others wait; nothing else on the device may hold SMs for good (the
 * engine runs one stream of kernels at a time at decode). CINFER_CUDA_MOE_FUSE=0: the three
 * ops. */
#include "cuda_internal.h"
#include "loaders.cuh"
#include "route.cuh"
#include "prof.cuh"
#include "moe_fused.cuh"

CB_PROF_TU(moe_fused)

struct mf_args {
    const float *x, *norm_w;
    float eps;
    const void *router;          /* [E, X] */
    float *xn, *logits;          /* [X], [E] */
    int32_t *sel;
    float *wout;                 /* [K] each */
    const int32_t *ids;
    route_args ra;
    const void *const *w;        /* the experts' table (cb_moe_tab.w) */
    int X, I, relu2, acc, big;   /* big: floats of the shared xn / h region */
    int tab_off;                 /* E <= MF_TAB_E: the experts' table copied to shared memory at this byte offset, else 0 */
    float limit;
    const char *sg, *su, *sd;    /* the shared expert folded in (SI > 0): gate / up [SI, X], down [X, SI] (gated only) */
    const char *sr;              /* its σ gate row [X] in the router's dtype (NULL: ungated) */
    int SI;
    float *h, *out;              /* [K · I + SI (+ 1: the gate's logit)], [X] */
    unsigned *bar;               /* mf_grid_sync's counter */
};

/* SHM: 0 the routed loops alone (no test for shared units and steps in them); 1 the shared expert's
 * gate / up units ride in phase 2 and its down is the caller's (an ungated one: cb_moe_fused's GEMV
 * after the launch); 2 its down steps ride in phase 3 too (weight 1, or σ of its gate row: a.sr);
 * + 4 (early): the shared units before the routing, behind the first barrier */
template <class LR, class LE, int KS, int SHM>
__global__ void __launch_bounds__(MF_WARPS * 32, 1) moe_fused_kernel(mf_args a) {
    constexpr bool SH = (SHM & 3) > 0, SD = (SHM & 3) == 2;
    extern __shared__ float4 mf_smem[];
    float *big = (float *)mf_smem;             /* xn [X] in phases 1-2, h [K, I] in phase 3 */
    float *rsm = big + a.big;                  /* route_row's 2E floats */
    const char **tsm = a.tab_off ? (const char **)((char *)mf_smem + a.tab_off) : NULL;   /* the table, 3E */
    __shared__ int chosen[ROUTE_MAX_K];
    __shared__ float wsel[ROUTE_MAX_K];
    __shared__ const char *gb[ROUTE_MAX_K], *ub[ROUTE_MAX_K], *db[ROUTE_MAX_K];
    constexpr int VE = LE::VEC, NT = MF_WARPS * 32;
    constexpr int B = MF_B;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gw = blockIdx.x * MF_WARPS + warp;
    const int TW = gridDim.x * MF_WARPS, X = a.X, I = a.I, E = a.ra.E, K = a.ra.K;
    const int SI = SH ? a.SI : 0;

    CB_PROF_BEGIN(CB_PROF_MOE_FUSED, K, I, X);
    /* ---- 1. norm and router ---- */
    if (tsm)   /* the experts' table (nothing writes it: before pdl_enter) */
        for (int i = threadIdx.x; i < 3 * E; i += NT) tsm[i] = (const char *)a.w[i];
    const int KI = K * I, NU = KI + SI;   /* h: units past K · I the shared expert's rows, h[NU] its gate */
    {
        mf_p1 p;
        p.x = a.x; p.norm_w = a.norm_w; p.eps = a.eps; p.router = a.router; p.sr = SH ? a.sr : NULL;
        p.X = X; p.E = E; p.xn = a.xn; p.logits = a.logits; p.glogit = a.h + NU;
        mf_norm_router<LR, KS>(p, big, CB_PROF_AT(1));   /* marks 1-3 */
    }
    /* the warp's units as steps of HB 16-byte loads a lane (half a batch of gate and of up
     * rows), the next step's loads issued before the current one's sums: the registers of one
     * whole batch, and bytes in flight while the warp computes. Each lane sums its columns
     * lane · VE + i · 32 VE in i order, as gate_up_kernel's lanes (the same bits). */
    constexpr int HB = B / 2, SPAN = HB * 32 * VE;
    const int steps = (X + SPAN - 1) / SPAN;
    uint4 cu[HB], cg[HB], nu[HB], ng[HB];
    auto issue = [&](int u, int st, uint4 *ru, uint4 *rg) {
        const bool sh = SH && u >= KI;
        const int k = sh ? K : u / I, r = sh ? u - KI : u - k * I;
        const char *up = (sh ? a.su : ub[k]) + (int64_t)r * X * LE::BYTES;
        const char *gp = a.relu2 ? up : (sh ? a.sg : gb[k]) + (int64_t)r * X * LE::BYTES;
#pragma unroll
        for (int b = 0; b < HB; b++) {
            const int c = st * SPAN + lane * VE + b * 32 * VE;
            if (c < X) {
                ru[b] = ld_stream(up + (int64_t)c * LE::BYTES);
                if (!a.relu2) rg[b] = ld_stream(gp + (int64_t)c * LE::BYTES);
            }
        }
    };
    /* units u, u + TW, ... below end */
    auto run_units = [&](int u, int end) {
        int st = 0;
        if (u < end) issue(u, 0, cu, cg);
        float au = 0.0f, ag = 0.0f;
        while (u < end) {
            int u2 = u, st2 = st + 1;
            if (st2 == steps) { u2 = u + TW; st2 = 0; }
            if (u2 < end) issue(u2, st2, nu, ng);
#pragma unroll
            for (int b = 0; b < HB; b++) {
                const int c = st * SPAN + lane * VE + b * 32 * VE;
                if (c >= X) break;
                float wv[VE], xs[VE];
                LE::cvt(cu[b], wv);
                sh_row<VE>(big + c, lane, xs);
#pragma unroll
                for (int v = 0; v < VE; v++) au = fmaf(wv[v], xs[v], au);
                if (!a.relu2) {
                    LE::cvt(cg[b], wv);
#pragma unroll
                    for (int v = 0; v < VE; v++) ag = fmaf(wv[v], xs[v], ag);
                }
            }
            if (st + 1 == steps) {
                au = warp_sum(au);
                ag = warp_sum(ag);
                if (lane == 0) a.h[u] = moe_act(ag, au, a.relu2, a.limit);
                au = ag = 0.0f;
            }
#pragma unroll
            for (int b = 0; b < HB; b++) { cu[b] = nu[b]; cg[b] = ng[b]; }
            u = u2; st = st2;
        }
    };
    /* a shared expert's units need no routing: with SHM & 4 (early) they run between this block's arrival
     * at the barrier and its wait (the barrier's and the other blocks' router tails hidden behind
     * them), the routed ones after the routing; else all after it, shared units last. The same
     * units, each summed alike: the same bits either way. */
    constexpr bool early = SH && (SHM & 4);
    CB_PROF_MARK(4);
    {
        const unsigned old = mf_arrive(a.bar);
        if (early) run_units(KI + gw, NU);
        mf_wait(a.bar, old);
    }
    CB_PROF_MARK(5);

    /* ---- 2. routing and gate / up ---- */
    route_row(0, a.logits, a.ids, a.ra, rsm, chosen, wsel, CB_PROF_AT(6));   /* marks 6-8 */
    if ((int)threadIdx.x < K) {
        const int e = chosen[threadIdx.x];
        if (blockIdx.x == 0) {
            a.sel[threadIdx.x] = e;
            a.wout[threadIdx.x] = wsel[threadIdx.x];
        }
        gb[threadIdx.x] = tsm ? tsm[3 * e] : (const char *)a.w[3 * e];
        ub[threadIdx.x] = tsm ? tsm[3 * e + 1] : (const char *)a.w[3 * e + 1];
        db[threadIdx.x] = tsm ? tsm[3 * e + 2] : (const char *)a.w[3 * e + 2];
    }
    __syncthreads();
    CB_PROF_MARK(9);
    run_units(gw, early ? KI : NU);
    CB_PROF_MARK(10);
    /* down steps j of row r: expert slot k = j / S's, column c; past K · S the shared expert's
     * (k = K, its h at K · I, as a slot's; weight 1, or σ of its gate's logit) */
    const int S = (I + 32 * VE - 1) / (32 * VE), KS_ = K * S, total = KS_ + (SD ? (SI + 32 * VE - 1) / (32 * VE) : 0);
    auto dstep = [&](int j, int r, int &k, int &c) -> const char * {   /* NULL: past the row's end */
        if (!SD) {
            k = j / S;
            c = (j - k * S) * 32 * VE + lane * VE;
            return c < I ? db[k] + ((int64_t)r * I + c) * LE::BYTES : NULL;
        }
        k = j < KS_ ? j / S : K;
        c = (j < KS_ ? j - k * S : j - KS_) * 32 * VE + lane * VE;
        if (j < KS_) return c < I ? db[k] + ((int64_t)r * I + c) * LE::BYTES : NULL;
        return c < SI ? a.sd + ((int64_t)r * SI + c) * LE::BYTES : NULL;
    };
    /* the first down batch of this warp's first row: weights only, so before the barrier */
    uint4 raw[B], nxt[B];
    if (gw < X) {
#pragma unroll
        for (int b = 0; b < B; b++) {
            int k, c;
            const char *p = b < total ? dstep(b, gw, k, c) : NULL;
            if (p) raw[b] = ld_stream(p);
        }
    }
    mf_grid_sync(a.bar);
    CB_PROF_MARK(11);

    /* ---- 3. down and the residual ---- */
    for (int i = threadIdx.x * 4; i < (SD ? NU : KI); i += NT * 4)
        *(float4 *)(big + i) = __ldcg((const float4 *)(a.h + i));
    const float wsh = SD && a.sr ? 1.0f / (1.0f + expf(-__ldcg(a.h + NU))) : 1.0f;   /* sigmoid_gate_add's form */
    __syncthreads();
    CB_PROF_MARK(12);
    for (int r = gw; r < X; r += TW) {
        if (r != gw) {
#pragma unroll
            for (int b = 0; b < B; b++) {
                int k, c;
                const char *p = b < total ? dstep(b, r, k, c) : NULL;
                if (p) raw[b] = ld_stream(p);
            }
        }
        float acc0 = 0.0f, acc1 = 0.0f;
        for (int j0 = 0; j0 < total; j0 += B) {
            if (j0 + B < total) {
#pragma unroll
                for (int b = 0; b < B; b++) {
                    const int j = j0 + B + b;
                    int k, c;
                    const char *p = j < total ? dstep(j, r, k, c) : NULL;
                    if (p) nxt[b] = ld_stream(p);
                }
            }
#pragma unroll
            for (int b = 0; b < B; b++) {
                const int j = j0 + b;
                if (j >= total) break;
                int k, c;
                if (!dstep(j, r, k, c)) continue;
                float wv[VE], hs[VE];
                LE::cvt(raw[b], wv);
                sh_row<VE>(big + k * I + c, lane, hs);
                float part = 0.0f;
#pragma unroll
                for (int v = 0; v < VE; v++) part = fmaf(wv[v], hs[v], part);
                const float wk = !SD || k < K ? wsel[k] : wsh;
                if (j & 1) acc1 = fmaf(wk, part, acc1);
                else acc0 = fmaf(wk, part, acc0);
            }
#pragma unroll
            for (int b = 0; b < B; b++) raw[b] = nxt[b];
        }
        acc0 = warp_sum(acc0);
        acc1 = warp_sum(acc1);
        if (lane == 0) {
            const float s = acc0 + acc1;
            a.out[r] = a.acc ? a.out[r] + s : s;
        }
    }
    CB_PROF_END();
}

template <class LR, class LE, int KS, int SHM>
static int mf_launch(cuda_be *cb, const mf_args &a, size_t smem) {
    auto kern = moe_fused_kernel<LR, LE, KS, SHM>;
    static int occ = -1;   /* per instantiation: blocks an SM at the largest shared size asked so far */
    static size_t occ_smem = 0;
    if (occ < 0 || smem > occ_smem) {
        if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, MF_WARPS * 32, smem) != cudaSuccess) {
            cudaGetLastError();
            occ = 0;
        }
        occ_smem = smem;
    }
    if (occ < 1) return 0;
    cb_launch(cb, kern, dim3((unsigned)cb->sm_count), dim3(MF_WARPS * 32), smem, a);
    return 1;
}

/* ks warps a router row (1 or 4); the early forms (SHM & 4) only at one: at four they spilled
 * (cb_moe_fused), so they are not compiled there */
template <class LR, class LE, int SHM>
static int mf_ks(cuda_be *cb, int ks, const mf_args &a, size_t smem) {
    if (ks == 1) return mf_launch<LR, LE, 1, SHM>(cb, a, smem);
    if constexpr ((SHM & 4) != 0) return 0;
    else return mf_launch<LR, LE, 4, SHM>(cb, a, smem);
}

template <int SHM>
static int mf_pick(cuda_be *cb, ci_dtype dr, ci_dtype de, int ks, const mf_args &a, size_t smem) {
#define MF_E(LR)                                                                                   \
    switch (de) {                                                                                  \
    case CI_F32: return mf_ks<LR, LF32, SHM>(cb, ks, a, smem);                                     \
    case CI_F16: return mf_ks<LR, LF16, SHM>(cb, ks, a, smem);                                     \
    case CI_BF16: return mf_ks<LR, LBF16, SHM>(cb, ks, a, smem);                                   \
    default: return 0;                                                                             \
    }
    switch (dr) {
    case CI_F32: MF_E(LF32)
    case CI_F16: MF_E(LF16)
    default: MF_E(LBF16)
    }
#undef MF_E
}

/* a shared expert's matrix as the kernel reads it: [rows, cols] in dtype dt, 16-byte aligned */
static bool mf_shared_ok(const ci_mat *w, int64_t rows, int64_t cols, ci_dtype dt) {
    return w && w->dtype == dt && w->rows == rows && w->cols == cols && !((uintptr_t)w->data & 15);
}

int cb_moe_fused(cuda_be *cb, float *out, float *xn, float *logits, int32_t *sel, float *w, const float *x,
                 const float *norm_w, float eps, const int32_t *ids, int n, const ci_mat *W, const ci_moe *m, int acc) {
    /* the forms the three ops take at one row (else their bits would differ): the router on
     * gemv.cu's NORM GEMV (16-bit / f32, aligned, the measured shape rules), the experts on
     * moe.cu's gate_up + split-2 down */
    if (!cb->moe_fuse || n != 1 || !cb->norm_fuse || cb->gemv1 != 0 || !route_ok(m)) return 0;
    if (W->dtype != CI_F32 && W->dtype != CI_F16 && W->dtype != CI_BF16) return 0;
    const int X = m->hidden, I = m->inter, E = m->n_experts, K = m->top_k;
    const int vr = W->dtype == CI_F32 ? 4 : 8;
    if (W->rows != E || W->cols != X || X % vr || ((uintptr_t)W->data & 15) || ((uintptr_t)x & 15) ||
        ((uintptr_t)norm_w & 15) || m->w_up[0].dtype == CI_U32 || m->e_lo || (m->e_hi && m->e_hi != E))
        return 0;
    const cb_moe_tab *tab = cb_moe_table(cb, m);
    if (!tab || !cb_moe_split2_form(cb, m, tab, xn)) return 0;
    if (X > 4 * 32 * MF_WARPS * MF_NI) return 0;   /* a thread's share of x in registers */
    /* the shared expert: the routed experts' dtype, whole 16-byte steps, aligned rows */
    const int SI = m->sh_down ? m->shared_inter : 0, ve = tab->dtype == CI_F32 ? 4 : 8;
    if (m->sh_down && (SI <= 0 || SI % ve || X % ve || I % 4 || !mf_shared_ok(m->sh_up, SI, X, tab->dtype) ||
                       !mf_shared_ok(m->sh_down, X, SI, tab->dtype) ||
                       (!m->relu2 && !mf_shared_ok(m->sh_gate, SI, X, tab->dtype)) ||
                       (m->sh_router && !mf_shared_ok(m->sh_router, 1, X, W->dtype))))
        return 0;
    const int big = X > K * I + SI ? X : K * I + SI;
    size_t smem = ((size_t)big + 2 * (size_t)E) * sizeof(float);
    int tab_off = 0;
    if (E <= MF_TAB_E) {
        smem = (smem + 15) & ~(size_t)15;
        tab_off = (int)smem;
        smem += (size_t)3 * E * sizeof(void *);
    }
    if (smem > (size_t)160 << 10) return 0;
    const int gated = SI && m->sh_router;
    float *h = (float *)cb_scratch_get(cb, &cb->moe_h, ((size_t)K * I + SI + gated) * sizeof(float));
    if (!h) return 0;
    mf_args a;
    memset(&a, 0, sizeof a);
    a.x = x; a.norm_w = norm_w; a.eps = eps; a.router = W->data;
    a.xn = xn; a.logits = logits; a.sel = sel; a.wout = w; a.ids = ids;
    a.ra = route_args_of(m);
    a.w = tab->w;
    a.X = X; a.I = I; a.relu2 = m->relu2; a.acc = acc; a.big = big; a.limit = m->act_limit;
    a.h = h; a.out = out; a.bar = cb->gbar; a.tab_off = tab_off;
    if (SI) {
        a.sg = m->relu2 ? NULL : (const char *)m->sh_gate->data;
        a.su = (const char *)m->sh_up->data;
        a.SI = SI;
        if (gated) {   /* its down in phase 3 (an ungated one's: the GEMV below) */
            a.sd = (const char *)m->sh_down->data;
            a.sr = (const char *)m->sh_router->data;
        }
    }
    const int ks = X > 2048 ? 4 : 1;   /* gemv.cu's one-row form for <= 2048 rows: a row over 4 warps past 2048 columns */
    /* early (SHM + 4) where the router rows take one warp each: at four (X > 2048) its form spilled
     * 32-48 bytes and decoded level on Nemotron-3-Nano dims (922-923 tok/s against 922-928) */
    const int shm = !SI ? 0 : (gated ? 2 : 1) + (cb->mf_early && ks == 1 ? 4 : 0);
    int ok = 0;
    switch (shm) {
    case 0: ok = mf_pick<0>(cb, W->dtype, tab->dtype, ks, a, smem); break;
    case 1: ok = mf_pick<1>(cb, W->dtype, tab->dtype, ks, a, smem); break;
    case 2: ok = mf_pick<2>(cb, W->dtype, tab->dtype, ks, a, smem); break;
    case 5: ok = mf_pick<5>(cb, W->dtype, tab->dtype, ks, a, smem); break;
    default: ok = mf_pick<6>(cb, W->dtype, tab->dtype, ks, a, smem); break;
    }
    if (ok && cb_launched(cb, "moe_fused")) return 1;   /* failed: sticky, the caller's next op sees it */
    if (ok && SI && !gated) {   /* the ungated shared expert's down: out += sd · h[K · I ..] (matmul_acc's GEMV) */
        float *y = out;
        const ci_mat *sd = m->sh_down;
        cb_gemv(cb, CB_ACC, 1, &y, h + (size_t)K * I, 1, &sd, NULL, 0.0f);
        cb_launched(cb, "moe_fused (shared down)");
    }
    return ok;
}
