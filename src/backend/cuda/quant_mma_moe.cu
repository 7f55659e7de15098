/* quant_mma_moe.cu — the routed experts' gate+up and down of MLX 4- / 8-bit, mxfp4 and fp8 E4M3
 * layers at decode (1..8 token rows) on tensor cores (quant_mma.cuh says how): quant_moe.cu
 * hands them its decode pair, moe.cu its fp8 one. */
#include "quant_mma.cuh"
#include "prof.cuh"
#include "route.cuh"

CB_PROF_TU(quant_mma_moe)

/* CINFER_CUDA_QMMA_DNW (8 or 16, default 16): warps of a block of the experts' down kernel.
 * Measured on the H200 (2026-12-02, mlx4 Qwen3-30B-A3B dims, 12 layers, decode after 512,
 * alternating, 2 rounds): 870.2 / 868.3 tok/s with 16 vs 802.1 / 799.7 with 8; with NW16 905.1 /
 * 906.2 vs 840.9 / 840.6. Batched decode of 8 sequences pays for it (1,782 tok/s against 1,980
 * with 8 warps: 8 tokens' tiles are 8 waves of one block an SM), but the warp count is not
 * picked per batch size: a token's bits must not depend on its batch. */
static int qt_dn_warps(void) {
    static const int v = cb_env_int("CINFER_CUDA_QMMA_DNW", 16, 8, 16) >= 16 ? 16 : 8;
    return v;
}

/* CINFER_CUDA_QT_DNBAL (default 1; 0: the earlier rule): how the experts' down kernel splits
 * each expert's groups into parts (qt_moe_launch). */
static int qt_dn_balance(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QT_DNBAL", 1);
    return v;
}

/* ---- routed experts ------------------------------------------------------------------------ */

/* gate+up: h[p, r] = act(gate_e row r · x_t, up_e row r · x_t) for entries p = (t, k) =
 * blockIdx.y (e = sel[p], t = p / K): token t's x staged, NTL = 2 tiles (gate, up) a warp for
 * gated experts, 1 (up) for relu². down: out[t, r] (+)= Σ_k w[t, k] · (down_e row r · h[t, k])
 * for one 16-row tile r0 = 16·blockIdx.x of token t = blockIdx.y: the K rows of h staged, the
 * block's NW warps taking (expert k, part kp) items i = warp, warp + NW, ..., each summing w_k ·
 * its share, then the NW warps' sums added in warp order. */
struct qt_moe_args {
    const uint8_t *const *codes;
    const void *const *scales, *const *biases;
    const int64_t *srow0;   /* a matrix's first row in its param grid (param row (srow0 + r) / rblk) */
    const int32_t *sel;
    const float *wt;
    const float *x;    /* [n, X] */
    float *h;          /* [n·K, I] */
    float *out;        /* [n, X] */
    int X, I, K, sd, es, acc, ks, kparts, rblk;
    int pair;          /* qt_load's pair loads (W = 1) */
    int pv;            /* the param window allowed (qt_pv_set) */
    int usum;          /* qt_stage's unit_sums (qt_usum_mode) */
    float limit;
    /* routing in the gate+up kernel (cb_route; logits NULL: sel / wt given): each block routes its
     * token from logits with route_row (2 E floats of shared memory past the kernel's own), block
     * x = 0 of entry p writes sel[p] / wt[p] (sel_out / wt_out: the arrays down reads) */
    const float *logits;
    const int32_t *rids;
    int32_t *sel_out;
    float *wt_out;
    route_args ra;
};

template <int BITS, int W, int NTL>
__global__ void __launch_bounds__(QT_THREADS, 2) qt_gu_kernel(qt_moe_args a) {
    extern __shared__ __align__(16) unsigned char qt_sm[];
    constexpr int U = qt_u<W>();
    const int K = a.X, ng = K / (qt_nib(BITS) ? 32 * W : 16 * W), p = blockIdx.y;
    uint2 *pws = (uint2 *)qt_sm;   /* the warps' param window slots (qt_rows) first */
    __half2 *xs = (__half2 *)(qt_sm + QT_WARPS * qt_pw_bytes(NTL));
    float *xsum = (float *)(xs + 2 * qt_rs(K));
    float *red = xsum + ng;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tpb = QT_WARPS / a.ks, kp = warp % a.ks;
    const int ntiles = (a.I + 15) / 16, nb = (ntiles + tpb - 1) / tpb;
    const int gb = kp * ng / a.ks, ge = (kp + 1) * ng / a.ks;
    CB_PROF_BEGIN(CB_PROF_QT_GU, K, a.I, a.ks);
    pdl_enter();
    CB_PROF_MARK(1);
    const int tk = p / a.K;
    int e;
    if (a.logits) {   /* moe_route's choice for token tk, here instead of its own launch */
        __shared__ int chosen[ROUTE_MAX_K];
        __shared__ float wsel[ROUTE_MAX_K];
        route_row(tk, a.logits, a.rids, a.ra, red + QT_WARPS * NTL * 4 * 32, chosen, wsel);
        const int kk = p - tk * a.K;
        e = chosen[kk];
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            a.sel_out[p] = e;
            a.wt_out[p] = wsel[kk];
        }
    } else {
        e = a.sel[p];
    }
    qt_buf<W, NTL, U> A;
    qt_rows<NTL> R;
    int tile = 0;
    bool live = false;
    auto setup = [&](int bt) {   /* the rows of block tile bt, and their first batch's loads */
        tile = bt * tpb + warp / a.ks;
        live = tile < ntiles;
        if (!live) return;
#pragma unroll
        for (int i = 0; i < NTL; i++) {
            const int m = 3 * e + (NTL == 2 ? i : 1);   /* gate (i = 0), up */
            qt_row_ptrs(a.codes[m], (const char *)a.scales[m], a.biases ? (const char *)a.biases[m] : nullptr,
                        a.srow0[m], a.rblk, a.I, qt_cbits(BITS), K, ng, a.es, (int64_t)tile * 16, g, R.c[i], R.s[i],
                        R.b[i]);
        }
        if (bt == (int)blockIdx.x) CB_PROF_MARK(2);
        qt_pv_set<BITS, NTL>(R, a.pv, a.sd, ng, gb, pws + warp * (qt_pw_bytes(NTL) / 8), t);
        qt_load<BITS, W, NTL, U>(A, R, a.sd, t, gb, gb, ge, a.pair);
    };
    setup(blockIdx.x);
    CB_PROF_MARK(3);
    qt_stage<BITS, W>(xs, qt_nobias(BITS) ? nullptr : xsum, a.x + (int64_t)tk * a.X, 0, 1, K, nullptr, 0.0f, nullptr,
                      CB_PROF_AT(4), a.usum);
    CB_PROF_MARK(6);
    const __half2 *xq[1] = { xs + (g & 1) * qt_rs(K) };   /* B columns: hi, lo, hi, lo, ... */
    const float *xsm[1] = { xsum };
    for (int bt = blockIdx.x; bt < nb; bt += gridDim.x) {
        if (bt != (int)blockIdx.x) setup(bt);
        float acc[NTL][4];
#pragma unroll
        for (int i = 0; i < NTL; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
        if (live) qt_tile<BITS, W, NTL, 1, U>(A, R, a.sd, gb, ge, xq, xsm, t, acc, a.pair);
        if (bt == (int)blockIdx.x) CB_PROF_MARK(7);
        qt_reduce<NTL>(red, a.ks, warp, lane, acc);
        if (bt == (int)blockIdx.x) CB_PROF_MARK(8);
        if (!live || kp || t) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = tile * 16 + g + 8 * h;
            if (r < a.I)
                a.h[(int64_t)p * a.I + r] = moe_act(NTL == 2 ? acc[0][h] : 0.0f, acc[NTL - 1][h], NTL == 1, a.limit);
        }
    }
    CB_PROF_END();
}

/* 2 blocks an SM at 16 warps (64 registers): the V4-Flash shape's 256 blocks in one wave, where
 * the 66 registers of one block an SM made two (ncu, 2026-12-03: 25% occupancy); the MLX 4-bit
 * groups of 32 and 128 instantiations spill 20-68 bytes at that bound. */
template <int BITS, int W, int NW>
__global__ void __launch_bounds__(NW * 32, 32 / NW) qt_dn_kernel(qt_moe_args a) {
    extern __shared__ __align__(16) unsigned char qt_sm[];
    constexpr int U = qt_u<W>();
    const int K = a.I, ng = K / (qt_nib(BITS) ? 32 * W : 16 * W), tk = blockIdx.y, rs = qt_rs(K);
    uint2 *pws = (uint2 *)qt_sm;   /* the warps' param window slots (qt_rows) first */
    __half2 *xs = (__half2 *)(qt_sm + NW * qt_pw_bytes(1));
    float *xsum = (float *)(xs + (size_t)2 * a.K * rs);
    float *red = xsum + a.K * ng;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t r0 = (int64_t)blockIdx.x * 16;
    const int items = a.K * a.kparts;
    CB_PROF_BEGIN(CB_PROF_QT_DN, K, a.X, a.kparts);
    pdl_enter();
    CB_PROF_MARK(1);
    qt_buf<W, 1, U> A;
    qt_rows<1> R;
    int k = 0, gb = 0, ge = 0;
    auto setup = [&](int it) {   /* item it = (expert slot k, part): its rows and first batch's loads */
        k = it / a.kparts;
        const int kp = it - k * a.kparts, m = 3 * a.sel[tk * a.K + k] + 2;
        gb = kp * ng / a.kparts;
        ge = (kp + 1) * ng / a.kparts;
        qt_row_ptrs(a.codes[m], (const char *)a.scales[m], a.biases ? (const char *)a.biases[m] : nullptr, a.srow0[m],
                    a.rblk, a.X, qt_cbits(BITS), K, ng, a.es, r0, g, R.c[0], R.s[0], R.b[0]);
        if (it == warp) CB_PROF_MARK(2);
        qt_pv_set<BITS, 1>(R, a.pv, a.sd, ng, gb, pws + warp * (qt_pw_bytes(1) / 8), t);
        qt_load<BITS, W, 1, U>(A, R, a.sd, t, gb, gb, ge, a.pair);
    };
    if (warp < items) setup(warp);
    CB_PROF_MARK(3);
    qt_stage<BITS, W, true>(xs, qt_nobias(BITS) ? nullptr : xsum, a.h + (int64_t)tk * a.K * a.I, a.I, a.K, K, nullptr, 0.0f,
                      nullptr, CB_PROF_AT(4), a.usum);
    CB_PROF_MARK(6);
    float acc[1][4] = { { 0.0f, 0.0f, 0.0f, 0.0f } };
    for (int it = warp; it < items; it += NW) {
        if (it != warp) setup(it);
        float part[1][4] = { { 0.0f, 0.0f, 0.0f, 0.0f } };
        const __half2 *xq[1] = { xs + (size_t)(2 * k + (g & 1)) * rs };
        const float *xsm[1] = { xsum + k * ng };
        qt_tile<BITS, W, 1, 1, U>(A, R, a.sd, gb, ge, xq, xsm, t, part, a.pair);
        const float wk = a.wt[tk * a.K + k];
#pragma unroll
        for (int j = 0; j < 4; j++) acc[0][j] = fmaf(wk, part[0][j], acc[0][j]);
    }
    CB_PROF_MARK(7);
    /* the NW warps' sums in warp order */
    if (t == 0) {
        red[warp * 16 + g] = acc[0][0];
        red[warp * 16 + g + 8] = acc[0][1];
    }
    __syncthreads();
    CB_PROF_MARK(8);
    if (threadIdx.x < 16) {
        const int64_t r = r0 + threadIdx.x;
        float s = 0.0f;
        for (int q = 0; q < NW; q++) s += red[q * 16 + threadIdx.x];
        if (r < a.X) {
            float *o = a.out + (int64_t)tk * a.X + r;
            *o = a.acc ? *o + s : s;
        }
    }
    CB_PROF_END();
}

/* the partition of the pair's work for these shapes (a function of the shapes only, never of the
 * token rows): gate+up's ks (warps a tile's groups split over), down's parts of an expert's groups
 * (kparts) and its block's warps (dnw); 0 when the staged rows do not fit (nothing to launch).
 * moe_fused_qt.cu's one launch takes the same partition (the same bits). gs: the group (fp8: 128);
 * with_route: the routing in the gate+up launch (2E floats of its shared memory). */
int cb_qt_moe_plan(cuda_be *cb, int X, int I, int K, int relu2, int gs, int with_route, int E, cb_qt_moe_part *pt) {
    const int ngx = X / gs, ngi = I / gs, ntl = relu2 ? 1 : 2;
    const size_t smem_gu = (size_t)QT_WARPS * qt_pw_bytes(ntl) + (size_t)2 * qt_rs(X) * 4 + (size_t)ngx * 4 +
                           (size_t)QT_WARPS * ntl * 4 * 32 * 4 + (with_route ? (size_t)2 * E * 4 : 0);
    const int dnw = qt_dn_warps();
    const size_t smem_dn = (size_t)dnw * qt_pw_bytes(1) + (size_t)2 * K * qt_rs(I) * 4 + (size_t)K * ngi * 4 + dnw * 16 * 4;
    if (smem_gu > QT_SMEM_MAX || smem_dn > QT_SMEM_MAX) return 0;
    pt->smem_gu = smem_gu;
    pt->smem_dn = smem_dn;
    const int tiles = (I + 15) / 16;
    pt->gks = qt_ks((int64_t)tiles * K, ngx, cb->sm_count, QT_WARPS);
    /* down: items (expert, part) over the block's dnw warps, the parts (of at least 2 groups)
     * that give the block's busiest warp the fewest groups: rounds ceil(K·parts / dnw) times
     * ceil(ngi / parts) groups an item, the fewest parts among equals (V4-Flash's 6 FP4 experts
     * of 64 groups on 16 warps: 8 parts, 3 rounds of 8 groups, where doubling until K·parts >=
     * dnw gave 4: 2 rounds of 16). Of the shape only, never of the token rows. */
    int kp_best = 1;
    if (qt_dn_balance()) {
        int64_t best = -1;
        for (int kp = 1; kp == 1 || ngi >= 2 * kp; kp *= 2) {
            const int64_t cost = (int64_t)((K * kp + dnw - 1) / dnw) * ((ngi + kp - 1) / kp);
            if (best < 0 || cost < best) { best = cost; kp_best = kp; }
        }
    } else {
        while (K * kp_best < dnw && ngi >= 2 * kp_best) kp_best *= 2;
    }
    pt->kparts = kp_best;
    pt->dnw = dnw;
    return 1;
}

/* the two launches for k token rows (a: everything but ks / kparts); 0 (nothing launched) when
 * the staged rows do not fit. bits 4, 8, QT_E4M3 or QT_E2M1, gs the group (fp8: 128). */
static int qt_moe_launch(cuda_be *cb, qt_moe_args &a, int bits, int gs, int relu2, int k) {
    const int X = a.X, I = a.I, K = a.K, bt = bits, W = gs * qt_cbits(bits) / 128;
    cb_qt_moe_part pt;
    if (!cb_qt_moe_plan(cb, X, I, K, relu2, gs, a.logits != nullptr, a.ra.E, &pt)) return 0;
    a.ks = pt.gks;
    a.kparts = pt.kparts;
    const int dnw = pt.dnw;
    const size_t smem_gu = pt.smem_gu, smem_dn = pt.smem_dn;
    a.pair = qt_w1pair();
    a.pv = qt_pv_mode();
    a.usum = qt_usum_mode();
    const int tiles = (I + 15) / 16;
    const int tpb = QT_WARPS / a.ks;
    const dim3 gg((unsigned)((tiles + tpb - 1) / tpb), (unsigned)(k * K)), gd((unsigned)((X + 15) / 16), (unsigned)k),
        blk(QT_THREADS);
#define QT_SET(KER, GRID, BLK, SM)                                                                            \
    do {                                                                                                      \
        qt_optin((const void *)KER);                                                                          \
        cb_launch(cb, KER, GRID, BLK, SM, a);                                                                 \
    } while (0)
#define QT_MOE(BI, WW)                                                                                        \
    do {                                                                                                      \
        if (relu2) QT_SET((qt_gu_kernel<BI, WW, 1>), gg, blk, smem_gu);                                       \
        else QT_SET((qt_gu_kernel<BI, WW, 2>), gg, blk, smem_gu);                                             \
        if (dnw == 16) QT_SET((qt_dn_kernel<BI, WW, 16>), gd, dim3(32 * dnw), smem_dn);                      \
        else QT_SET((qt_dn_kernel<BI, WW, 8>), gd, dim3(32 * dnw), smem_dn);                                 \
    } while (0)
    if (bt == QT_E4M3) QT_MOE(QT_E4M3, 8);
    else if (bt == QT_E2M1) QT_MOE(QT_E2M1, 1);
    else if (bt == 4) {
        if (W == 1) QT_MOE(4, 1);
        else if (W == 2) QT_MOE(4, 2);
        else QT_MOE(4, 4);
    } else {
        if (W == 2) QT_MOE(8, 2);
        else if (W == 4) QT_MOE(8, 4);
        else QT_MOE(8, 8);
    }
#undef QT_MOE
#undef QT_SET
    return 1;
}

/* rt's routing into a (quant.cuh cb_qt_moe): sel / wt become the arrays the gate+up kernel writes */
static void qt_route_set(qt_moe_args &a, const cb_route *rt) {
    if (!rt) return;
    a.logits = rt->logits; a.rids = rt->ids; a.ra = rt->a;
    a.sel_out = rt->sel; a.wt_out = rt->w;
    a.sel = rt->sel; a.wt = rt->w;
}

/* MLX affine 4- / 8-bit layers, or mxfp4 ones (DeepSeek V4's FP4 experts among them), with gate / up /
 * down packed alike; 0 when not taken */
int cb_qt_moe(cuda_be *cb, const uint8_t *const *codes, const void *const *scales, const void *const *biases,
              const int64_t *srow0, const int *mode, const int *bits, const int *group, const int *sd, int relu2, int X,
              int I, int K, float limit, const int32_t *sel, const float *wt, const float *x, float *h, float *out,
              int k, int acc, const cb_route *rt) {
    if (!cb_q_qmma() || k < 1 || k > QT_MAX_TOK || K < 1) return 0;
    const int cbits = bits[1], md = mode[1];
    for (int j = relu2 ? 1 : 0; j < 3; j++)
        if (mode[j] != md || bits[j] != cbits || group[j] != group[1] || sd[j] != sd[1]) return 0;
    const int gs = group[1];
    const bool affine = md == 1 && (cbits == 4 || cbits == 8) && sd[1] <= 2 && (gs == 32 || gs == 64 || gs == 128);
    const bool mxfp4 = md == 2 && cbits == 4 && gs == 32 && sd[1] == 3;
    if (!(affine || mxfp4) || X % gs || I % gs || (X * cbits / 8) % 16 || (I * cbits / 8) % 16) return 0;
    const int bt = mxfp4 ? (int)QT_E2M1 : cbits;
    if (((uintptr_t)x & 3) || ((uintptr_t)h & 15)) return 0;   /* h: the down kernel stages its rows as float4s (qt_stage ALIGNED) */
    qt_moe_args a;
    memset(&a, 0, sizeof a);
    a.codes = codes; a.scales = scales; a.biases = biases; a.srow0 = srow0; a.sel = sel; a.wt = wt; a.x = x; a.h = h;
    a.out = out; a.X = X; a.I = I; a.K = K; a.sd = sd[1]; a.es = sd[1] == 0 ? 4 : sd[1] == 3 ? 1 : 2; a.acc = acc;
    a.limit = limit;
    a.rblk = 1;
    qt_route_set(a, rt);
    if (!qt_moe_launch(cb, a, bt, gs, relu2, k)) return 0;
    cb_launched(cb, "quantized moe_experts (tensor cores)");
    return 1;
}

/* fp8 E4M3 experts with 128 x 128 block scales (scale_dtype 0 f32, 1 bf16, 2 E8M0, as moe.cu's
 * tables keep it), X and I multiples of 128, every matrix 16-byte aligned (the caller checks);
 * 0 when not taken */
int cb_qt_moe_fp8(cuda_be *cb, const void *const *w, const void *const *scale, const int64_t *srow0, int block,
                  int scale_dtype, int relu2, int X, int I, int K, float limit, const int32_t *sel, const float *wt,
                  const float *x, float *h, float *out, int k, int acc, const cb_route *rt) {
    if (!cb_q_qmma() || k < 1 || k > QT_MAX_TOK || K < 1 || block != 128 || scale_dtype < 0 || scale_dtype > 2 ||
        X % 128 || I % 128)
        return 0;
    if (((uintptr_t)x & 3) || ((uintptr_t)h & 15)) return 0;   /* h: the down kernel stages its rows as float4s (qt_stage ALIGNED) */
    qt_moe_args a;
    memset(&a, 0, sizeof a);
    a.codes = (const uint8_t *const *)w; a.scales = scale; a.biases = nullptr; a.srow0 = srow0; a.sel = sel; a.wt = wt;
    a.x = x; a.h = h; a.out = out; a.X = X; a.I = I; a.K = K; a.acc = acc; a.limit = limit; a.rblk = 128;
    a.sd = scale_dtype == 0 ? 0 : scale_dtype == 1 ? 2 : 3;
    a.es = scale_dtype == 0 ? 4 : scale_dtype == 1 ? 2 : 1;
    qt_route_set(a, rt);
    if (!qt_moe_launch(cb, a, QT_E4M3, 128, relu2, k)) return 0;
    cb_launched(cb, "fp8 moe_experts (tensor cores)");
    return 1;
}
