/* quant_mma.cu — the dense MLX 4- / 8-bit, mxfp4 and fp8 E4M3 GEMVs of 1..8 token rows on tensor
 * cores (quant_mma.cuh says how): quant.cu's qgemv hands them its matmuls, matmul_n and
 * matmul_swiglu, and its norm_ forms (the RMSNorm staged in with x); gemv.cu its fp8 ones;
 * cuda_backend.cu its matmul_groups of row views of one tensor (cb_qt_groups). */
#include "quant_mma.cuh"
#include "prof.cuh"

CB_PROF_TU(quant_mma)

/* CINFER_CUDA_QMMA (default 1; 0: quant.cu's / quant_moe.cu's f32 qmv kernels, to measure
 * against). Measured on the H200 (2026-12-02, mlx4 Qwen3-30B-A3B dims, 12 layers, decode after
 * 512 tokens, alternating, 2 rounds): 807.3 / 804.5 tok/s on vs 604.5 / 605.5 off in its first
 * form, 904.7 / 902.1 vs 611.7 / 612.5 with the steps after (bench/RESULTS.md); 8-bit codes
 * 867.4 / 851.0 vs 594.3 / 595.7; batched decode of 8 sequences 1,803 vs 948 tok/s. */
int cb_q_qmma(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QMMA", 1);
    return v;
}

/* ---- dense: y[n, rows] (op)= x[n, K] · Wᵀ --------------------------------------------------- */

struct qt_args {
    const uint8_t *codes[4];
    const char *sp[4], *bp[4];   /* MLX: the view's first row's scales / biases; fp8: the scale grid */
    int64_t srow0[4];            /* fp8: the view's first row in the scale grid (MLX: 0) */
    int rblk;                    /* weight rows a param row covers: MLX 1, fp8 the block (128) */
    int64_t rows[4];
    int64_t tiles[4];
    float *y[4];
    const float *x;
    const float *norm_w;         /* RMSNorm of x first (norm_matmul_n / _swiglu), or NULL */
    float *xn_out;               /* with norm_w: block 0 writes the normed rows here (norm_matmul_keep) */
    float eps;
    float limit;                 /* SwiGLU: the clamp of gate and up when > 0 (moe_act's) */
    int count, op, n, K, ng, sd, es, ks;
    int pair;                    /* qt_load's pair loads (W = 1) */
    int pv;                      /* the param window allowed (qt_pv_set) */
    int usum;                    /* qt_stage's unit_sums (qt_usum_mode) */
    int64_t ntiles;              /* warp tiles (SwiGLU: of the gate rows, each with its up tile) */
    int64_t ldx, ldy;            /* x's row stride (K unless grouped); y's (0: the matrix's rows) */
    /* grouped launches (cb_qt_groups, blockIdx.y = group g): x from column g·gx, y from column g·gy,
     * the matrix g·gcode code bytes and g·gsrow param rows on (0 otherwise) */
    int64_t gx, gy, gcode, gsrow;
};

/* NB: B sets (1: up to 4 token rows, 2: up to 8). The first tile's codes are loaded before
 * pdl_enter(): weights are never written while a model runs, so they may stream in while the
 * kernel before finishes (every other global read waits for it). */
template <int BITS, int W, int NTL, int NB, int NW>
__global__ void __launch_bounds__(NW * 32, 16 / NW) qt_dense_kernel(qt_args a) {
    extern __shared__ __align__(16) unsigned char qt_sm[];
    constexpr int U = qt_u<W>();
    const int rs = qt_rs(a.K);
    uint2 *pws = (uint2 *)qt_sm;   /* the warps' param window slots (qt_rows) first */
    __half2 *xs = (__half2 *)(qt_sm + NW * qt_pw_bytes(NTL));
    float *xsum = (float *)(xs + (size_t)2 * a.n * rs);
    float *red = xsum + a.n * a.ng;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tpb = NW / a.ks, kp = warp % a.ks;
    const int64_t nbt = (a.ntiles + tpb - 1) / tpb;
    const int gb = kp * a.ng / a.ks, ge = (kp + 1) * a.ng / a.ks;
    qt_buf<W, NTL, U> A;
    qt_rows<NTL> R;
    int mi = 0;
    int64_t r0 = 0;
    bool live = false;
    const int gi = blockIdx.y;
    CB_PROF_BEGIN(CB_PROF_DENSE, a.K, a.ntiles * 16, a.ks);
    auto setup = [&](int64_t bt) {   /* the rows of block tile bt, and their first batch's loads */
        const int64_t tile = bt * tpb + warp / a.ks;
        live = tile < a.ntiles;
        mi = 0;
        if (!live) return;
        int64_t tl = tile;
        if (NTL == 1)
            while (mi < a.count - 1 && tl >= a.tiles[mi]) tl -= a.tiles[mi++];
        r0 = tl * 16;
#pragma unroll
        for (int i = 0; i < NTL; i++) {
            const int m = NTL == 1 ? mi : i;
            qt_row_ptrs(a.codes[m] + gi * a.gcode, a.sp[m], a.bp[m], a.srow0[m] + gi * a.gsrow, a.rblk, a.rows[m],
                        qt_cbits(BITS), a.K, a.ng, a.es, r0, g, R.c[i], R.s[i], R.b[i]);
        }
        qt_pv_set<BITS, NTL>(R, a.pv, a.sd, a.ng, gb, pws + warp * (qt_pw_bytes(NTL) / 8), t);
        qt_load<BITS, W, NTL, U>(A, R, a.sd, t, gb, gb, ge, a.pair);
    };
    setup(blockIdx.x);
    CB_PROF_MARK(1);
    pdl_enter();
    CB_PROF_MARK(2);
    qt_stage<BITS, W>(xs, qt_nobias(BITS) ? nullptr : xsum, a.x + gi * a.gx, a.ldx, a.n, a.K, a.norm_w, a.eps,
                      blockIdx.x == 0 ? a.xn_out : nullptr, CB_PROF_AT(3), a.usum);
    CB_PROF_MARK(5);
    const __half2 *xq[NB];
    const float *xsm[NB];
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        const int bt = 4 * nb + (g >> 1), mt = 4 * nb + t;   /* the token this quad supplies to B; the lane's */
        xq[nb] = xs + (size_t)(2 * (bt < a.n ? bt : 0) + (g & 1)) * rs;
        xsm[nb] = xsum + (mt < a.n ? mt : 0) * a.ng;
    }
    for (int64_t bt = blockIdx.x; bt < nbt; bt += gridDim.x) {
        if (bt != blockIdx.x) setup(bt);
        float acc[NTL][4];
#pragma unroll
        for (int i = 0; i < NTL; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
        if (live) qt_tile<BITS, W, NTL, NB, U>(A, R, a.sd, gb, ge, xq, xsm, t, acc, a.pair);
        if (bt == blockIdx.x) CB_PROF_MARK(6);
        qt_reduce<NTL>(red, a.ks, warp, lane, acc);
        if (bt == blockIdx.x) CB_PROF_MARK(7);
        if (!live || kp) continue;
        const int64_t rows = a.rows[mi], ldy = a.ldy ? a.ldy : rows;
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            const int tok = 4 * nb + t;
            if (tok >= a.n) continue;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t r = r0 + g + 8 * h;
                if (r >= rows) continue;
                float *y = a.y[mi] + gi * a.gy + (int64_t)tok * ldy + r;
                const float v = acc[0][2 * nb + h];
                if (NTL == 2) *y = moe_act(v, acc[NTL - 1][2 * nb + h], 0, a.limit);
                else if (a.op == CB_ACC) *y += v;
                else *y = v;
            }
        }
    }
    CB_PROF_END();
}
/* 4- or 8-bit affine, groups of 32 / 64 / 128, K a multiple of the group, 16-byte aligned codes
 * of 16-byte aligned rows, f32 / f16 / bf16 params; or mxfp4 (E2M1 codes, an E8M0 scale per 32) */
static int qt_kind_ok(const cb_qm &m) {
    const bool affine = m.mode == 1 && (m.bits == 4 || m.bits == 8) && m.sd <= 2 &&
                        (m.group == 32 || m.group == 64 || m.group == 128);
    const bool mxfp4 = m.mode == 2 && m.bits == 4 && m.group == 32 && m.sd == 3;
    return (affine || mxfp4) && m.cols % m.group == 0 && ((uintptr_t)m.codes & 15) == 0 && (m.cols * m.bits / 8) % 16 == 0;
}
/* the BITS of quant_mma.cuh's kernels for a view qt_kind_ok takes, and its param bytes */
static int qt_bits(const cb_qm &m) { return m.mode == 2 ? QT_E2M1 : m.bits; }
static int qt_es(int sd) { return sd == 0 ? 4 : sd == 3 ? 1 : 2; }

static size_t qt_dense_smem(int n, int K, int ng, int ntl, int nw) {
    return (size_t)nw * qt_pw_bytes(ntl) + (size_t)2 * n * qt_rs(K) * 4 + (size_t)n * ng * 4 + (size_t)nw * ntl * 4 * 32 * 4;
}

/* CINFER_CUDA_QMMA_NW16 (default 1; 0: never): one-matrix dense launches of at most one tile
 * per SM (an o_proj: 2048 rows) in blocks of 16 warps, so each tile's groups split 16 ways.
 * Measured as QMMA_DNW (same call): 905.1 / 906.2 tok/s on vs 869.0 / 866.5 off. */
static int qt_nw16(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QMMA_NW16", 1);
    return v;
}

/* CINFER_CUDA_QT_FP8G1 (default 1; 0: two groups a warp as the other codes): fp8 dense launches
 * split a tile's 128-column groups down to one a warp (qt_ks's mg), so an o_proj's 128 tiles
 * (DeepSeek-V2-Lite: 16 groups) run as 128 blocks of 16 warps instead of 64 of two tiles each.
 * H100, 2026-12-07, DeepSeek-V2-Lite dims + q_lora 1024, 14 layers fp8, decode after 512,
 * alternating: 743.9 / 739.3 tok/s on vs 726.4 / 726.9 off (+1.9%); ncu: o_proj / shared down
 * 8.58 -> 7.82 us, q_a + kv_a 8.73 -> 7.75, q_b 7.85 -> 7.42 (bench/RESULTS.md). */
static int qt_fp8_g1(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QT_FP8G1", 1);
    return v;
}

/* the groups a warp keeps at least (qt_ks's mg) */
static int qt_mg(int bits) { return bits == QT_E4M3 && qt_fp8_g1() ? 1 : 2; }
/* a dense launch's block warps for all_tiles tiles of ntl matrices */
static int qt_dense_nw(cuda_be *cb, int ntl, int64_t all_tiles) {
    return ntl == 1 && qt_nw16() && all_tiles <= cb->sm_count ? 16 : QT_WARPS;
}

/* the launches of a.ntiles tiles over n token rows (in chunks whose staged x fits); 0 when not
 * even one row fits. bits: 4, 8, QT_E4M3 or QT_E2M1; W code words a lane loads per group and row. */
static int qt_dense_launch(cuda_be *cb, qt_args &a, int op, int count, float *const *ys, const float *x, int n,
                           const int64_t *rows, int bits, int W, int groups = 1) {
    const int K = a.K, ng = a.ng, ntl = op == CB_SWIGLU ? 2 : 1;
    const int64_t all_tiles = a.ntiles * groups;
    const int nw = qt_dense_nw(cb, ntl, all_tiles);
    if (!a.ldx) a.ldx = K;
    a.pair = qt_w1pair();
    /* token rows a launch stages: all n, or fewer when their x does not fit in shared memory (an
     * o_proj's 4096 columns at 8 rows): a row's bits are the same in any launch, so a batch's
     * rows keep those they have alone; only when even one row does not fit, not here at all */
    int chunk = n;
    while (chunk > 1 && qt_dense_smem(chunk, K, ng, ntl, nw) > QT_SMEM_MAX) chunk--;
    if (qt_dense_smem(chunk, K, ng, ntl, nw) > QT_SMEM_MAX) return 0;
    a.ks = qt_ks(all_tiles, ng, cb->sm_count, nw, qt_mg(bits));
    a.pv = qt_pv_mode();
    a.usum = qt_usum_mode();
    const int64_t blocks = (a.ntiles + nw / a.ks - 1) / (nw / a.ks);
    const dim3 blk(32 * nw);
#define QT_GO(BI, WW, NN, BB, NWW)                                                                            \
    do {                                                                                                      \
        const void *k_ = (const void *)qt_dense_kernel<BI, WW, NN, BB, NWW>;                                  \
        qt_optin(k_);                                                                                         \
        const int gx_ = qt_grid(k_, 32 * NWW, smem, cb->sm_count, blocks * groups) / groups;                 \
        const dim3 grid((unsigned)(gx_ > 0 ? gx_ : 1), (unsigned)groups);                                     \
        cb_launch(cb, qt_dense_kernel<BI, WW, NN, BB, NWW>, grid, blk, smem, a);                              \
    } while (0)
#define QT_GO_W(NN, BB, NWW)                                                                                  \
    do {                                                                                                      \
        if (bits == QT_E4M3) QT_GO(QT_E4M3, 8, NN, BB, NWW);                                                  \
        else if (bits == QT_E2M1) QT_GO(QT_E2M1, 1, NN, BB, NWW);                                             \
        else if (bits == 4) {                                                                                 \
            if (W == 1) QT_GO(4, 1, NN, BB, NWW);                                                             \
            else if (W == 2) QT_GO(4, 2, NN, BB, NWW);                                                        \
            else QT_GO(4, 4, NN, BB, NWW);                                                                    \
        } else {                                                                                              \
            if (W == 2) QT_GO(8, 2, NN, BB, NWW);                                                             \
            else if (W == 4) QT_GO(8, 4, NN, BB, NWW);                                                        \
            else QT_GO(8, 8, NN, BB, NWW);                                                                    \
        }                                                                                                     \
    } while (0)
    float *const xn0 = a.xn_out;
    for (int t0 = 0; t0 < n; t0 += chunk) {
        const int nn = n - t0 < chunk ? n - t0 : chunk;
        const size_t smem = qt_dense_smem(nn, K, ng, ntl, nw);
        a.n = nn;
        a.x = x + (size_t)t0 * a.ldx;
        if (xn0) a.xn_out = xn0 + (size_t)t0 * K;
        for (int i = 0; i < count; i++) a.y[i] = (op == CB_SWIGLU ? ys[0] : ys[i]) + (size_t)t0 * (a.ldy ? a.ldy : rows[i]);
        if (ntl == 2) {
            if (nn <= 4) QT_GO_W(2, 1, 8);
            else QT_GO_W(2, 2, 8);
        } else if (nw == 16) {
            if (nn <= 4) QT_GO_W(1, 1, 16);
            else QT_GO_W(1, 2, 16);
        } else {
            if (nn <= 4) QT_GO_W(1, 1, 8);
            else QT_GO_W(1, 2, 8);
        }
    }
#undef QT_GO_W
#undef QT_GO
    return 1;
}

int cb_qt_matmul(cuda_be *cb, int op, int count, float *const *ys, const float *x, int n, const cb_qm *ms,
                 const float *norm_w, float eps, float *xn_out, float limit) {
    if (!cb_q_qmma() || n < 1 || n > QT_MAX_TOK || count < 1 || count > 4 || (op == CB_SWIGLU && count != 2)) return 0;
    for (int i = 0; i < count; i++)
        if (!qt_kind_ok(ms[i]) || ms[i].mode != ms[0].mode || ms[i].bits != ms[0].bits || ms[i].group != ms[0].group ||
            ms[i].sd != ms[0].sd || ms[i].cols != ms[0].cols || ms[i].rows < 1)
            return 0;
    if (op == CB_SWIGLU && ms[0].rows != ms[1].rows) return 0;
    if (((uintptr_t)x & 3) != 0) return 0;
    const int K = (int)ms[0].cols, ng = K / ms[0].group, bits = qt_bits(ms[0]), W = ms[0].group * ms[0].bits / 128;
    qt_args a;
    memset(&a, 0, sizeof a);
    const int es = qt_es(ms[0].sd);
    a.count = count; a.op = op; a.K = K; a.ng = ng; a.sd = ms[0].sd; a.es = es; a.rblk = 1;   /* n, x, y: per launch */
    a.norm_w = norm_w; a.eps = eps; a.limit = limit;
    a.xn_out = norm_w ? xn_out : nullptr;
    int64_t rows[4];
    for (int i = 0; i < count; i++) {
        a.codes[i] = ms[i].codes;
        a.sp[i] = (const char *)ms[i].scales + ms[i].srow0 * ng * es;
        a.bp[i] = ms[i].biases ? (const char *)ms[i].biases + ms[i].srow0 * ng * es : nullptr;
        rows[i] = a.rows[i] = ms[i].rows;
        a.tiles[i] = (ms[i].rows + 15) / 16;
        if (op != CB_SWIGLU || i == 0) a.ntiles += a.tiles[i];
    }
    if (!qt_dense_launch(cb, a, op, count, ys, x, n, rows, bits, W)) return 0;
    cb_launched(cb, "quantized gemv (tensor cores)");
    return 1;
}

/* fp8 E4M3 weights of 128 x 128 block scales (f32 / bf16 / E8M0), K a multiple of 128, 16-byte
 * aligned rows: gemv.cu's matmuls of 1..8 token rows (mode: CB_STORE / CB_ACC / CB_SWIGLU, as
 * cb_gemv; count matrices of the same shape and scale type). 0: not taken, nothing done. */
int cb_qt_fp8(cuda_be *cb, int op, int count, float *const *ys, const float *x, int n, const ci_mat *const *Ws,
              const float *norm_w, float eps, float limit) {
    if (!cb_q_qmma() || n < 1 || n > QT_MAX_TOK || count < 1 || count > 4 || (op == CB_SWIGLU && count != 2)) return 0;
    const ci_mat *W0 = Ws[0];
    for (int i = 0; i < count; i++) {
        const ci_mat *w = Ws[i];
        if (w->dtype != CI_F8_E4M3 || !w->scale || w->block != 128 || w->scale_dtype != W0->scale_dtype ||
            w->cols != W0->cols || w->cols % 128 || w->rows < 1 || ((uintptr_t)w->data & 15) || w->cols > (1 << 30))
            return 0;
    }
    if (W0->scale_dtype != CI_F32 && W0->scale_dtype != CI_BF16 && W0->scale_dtype != CI_F8_E8M0) return 0;
    if (op == CB_SWIGLU && Ws[0]->rows != Ws[1]->rows) return 0;
    if (((uintptr_t)x & 3) != 0) return 0;
    const int K = (int)W0->cols, ng = K / 128;
    qt_args a;
    memset(&a, 0, sizeof a);
    a.count = count; a.op = op; a.K = K; a.ng = ng; a.rblk = 128;
    a.sd = W0->scale_dtype == CI_F32 ? 0 : W0->scale_dtype == CI_BF16 ? 2 : 3;
    a.es = W0->scale_dtype == CI_F32 ? 4 : W0->scale_dtype == CI_BF16 ? 2 : 1;
    a.norm_w = norm_w; a.eps = eps; a.limit = limit;
    int64_t rows[4];
    for (int i = 0; i < count; i++) {
        a.codes[i] = (const uint8_t *)Ws[i]->data;
        a.sp[i] = (const char *)Ws[i]->scale;
        a.srow0[i] = Ws[i]->scale_row0;
        rows[i] = a.rows[i] = Ws[i]->rows;
        a.tiles[i] = (Ws[i]->rows + 15) / 16;
        if (op != CB_SWIGLU || i == 0) a.ntiles += a.tiles[i];
    }
    if (!qt_dense_launch(cb, a, op, count, ys, x, n, rows, QT_E4M3, 8)) return 0;
    cb_launched(cb, "fp8 gemv (tensor cores)");
    return 1;
}

int cb_qt_swiglu_clamp(cuda_be *cb, float *g, const float *x, int n, const ci_mat *Wg, const ci_mat *Wu, float limit) {
    const ci_mat *Ws[2] = { Wg, Wu };
    if (Wg->dtype == CI_F8_E4M3 && Wu->dtype == CI_F8_E4M3)
        return cb_qt_fp8(cb, CB_SWIGLU, 2, &g, x, n, Ws, nullptr, 0.0f, limit);
    if (Wg->dtype != CI_U32 || Wu->dtype != CI_U32 || !cb_q_ok(Wg) || !cb_q_ok(Wu) ||
        ((const ci_qdesc *)Wg->scale)->stored_t || ((const ci_qdesc *)Wu->scale)->stored_t)
        return 0;
    const cb_qm ms[2] = { cb_q_view(Wg), cb_q_view(Wu) };
    return cb_qt_matmul(cb, CB_SWIGLU, 2, &g, x, n, ms, nullptr, 0.0f, nullptr, limit);
}

/* matmul_groups (backend.h) of 1..8 token rows in one launch, blockIdx.y the group: the groups'
 * matrices are consecutive row ranges of one fp8 (128 x 128 block scales) or MLX 4- / 8-bit
 * matrix whose range starts at whole scale blocks (DeepSeek V4's wo_a, split by w_mat_rows),
 * each group's x read in place from its columns of x [n, groups · cols] and y written to its
 * columns of y [n, groups · rows]: the same sums as one matmul per group. 0: not taken. */
int cb_qt_groups(cuda_be *cb, float *y, const float *x, int n, int groups, const ci_mat *W) {
    if (!cb_q_qmma() || n < 1 || n > QT_MAX_TOK || groups < 2 || ((uintptr_t)x & 3) != 0) return 0;
    const ci_mat *W0 = &W[0];
    const int64_t rows = W0->rows, K = W0->cols;
    qt_args a;
    memset(&a, 0, sizeof a);
    a.count = 1; a.op = CB_STORE; a.K = (int)K;
    int bits, Wq;
    if (W0->dtype == CI_F8_E4M3) {
        if (!W0->scale || W0->block != 128 || K % 128 || rows % 128 || W0->scale_row0 % 128 || ((uintptr_t)W0->data & 15) ||
            K > (1 << 30) || (W0->scale_dtype != CI_F32 && W0->scale_dtype != CI_BF16 && W0->scale_dtype != CI_F8_E8M0))
            return 0;
        for (int g = 1; g < groups; g++)
            if (W[g].dtype != CI_F8_E4M3 || W[g].rows != rows || W[g].cols != K || W[g].scale != W0->scale ||
                W[g].scale_dtype != W0->scale_dtype || W[g].block != 128 ||
                (const uint8_t *)W[g].data != (const uint8_t *)W0->data + g * rows * K ||
                W[g].scale_row0 != W0->scale_row0 + g * rows)
                return 0;
        a.ng = (int)(K / 128); a.rblk = 128;
        a.sd = W0->scale_dtype == CI_F32 ? 0 : W0->scale_dtype == CI_BF16 ? 2 : 3;
        a.es = W0->scale_dtype == CI_F32 ? 4 : W0->scale_dtype == CI_BF16 ? 2 : 1;
        a.codes[0] = (const uint8_t *)W0->data;
        a.sp[0] = (const char *)W0->scale;
        a.srow0[0] = W0->scale_row0;
        a.gcode = rows * K;
        bits = QT_E4M3; Wq = 8;
    } else {
        if (!cb_q_ok(W0)) return 0;
        const cb_qm m0 = cb_q_view(W0);
        if (!qt_kind_ok(m0) || m0.rows != rows) return 0;
        const int64_t row_bytes = m0.cols * m0.bits / 8;
        for (int g = 1; g < groups; g++) {
            if (!cb_q_ok(&W[g])) return 0;
            const cb_qm m = cb_q_view(&W[g]);
            if (m.mode != m0.mode || m.bits != m0.bits || m.group != m0.group || m.sd != m0.sd || m.cols != m0.cols ||
                m.rows != rows || m.scales != m0.scales || m.biases != m0.biases || m.srow0 != m0.srow0 + g * rows ||
                m.codes != m0.codes + g * rows * row_bytes)
                return 0;
        }
        a.ng = (int)(K / m0.group); a.sd = m0.sd; a.es = qt_es(m0.sd); a.rblk = 1;
        a.codes[0] = m0.codes;
        a.sp[0] = (const char *)m0.scales + m0.srow0 * a.ng * a.es;
        a.bp[0] = m0.biases ? (const char *)m0.biases + m0.srow0 * a.ng * a.es : nullptr;
        a.gcode = rows * row_bytes;
        bits = qt_bits(m0); Wq = m0.group * m0.bits / 128;
    }
    a.rows[0] = rows;
    a.tiles[0] = a.ntiles = (rows + 15) / 16;
    a.ldx = (int64_t)groups * K; a.ldy = (int64_t)groups * rows;
    a.gx = K; a.gy = rows; a.gsrow = rows;
    float *ys[1] = { y };
    const int64_t rr[1] = { rows };
    if (!qt_dense_launch(cb, a, CB_STORE, 1, ys, x, n, rr, bits, Wq, groups)) return 0;
    cb_launched(cb, "matmul_groups (tensor cores)");
    return 1;
}

int cb_qt_fp8_ks(cuda_be *cb, int64_t rows, int K, int swiglu) {
    if (!cb_q_qmma() || K % 128 || rows < 1) return 0;
    const int ntl = swiglu ? 2 : 1, ng = K / 128;
    const int64_t tiles = (rows + 15) / 16;
    const int nw = qt_dense_nw(cb, ntl, tiles);
    if (qt_dense_smem(1, K, ng, ntl, nw) > QT_SMEM_MAX) return 0;
    return qt_ks(tiles, ng, cb->sm_count, nw, qt_mg(QT_E4M3));
}
