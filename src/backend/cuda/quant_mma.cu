/* quant_mma.cu — MLX affine 4-bit GEMVs of 1..8 token rows on tensor cores (decode): the dense
 * matmuls (quant.cu hands them here) and the routed experts' gate+up and down (quant_moe.cu).
 *
 * Why: the f32 kernels of quant.cu / quant_moe.cu spend ~5 instructions a weight (extract,
 * convert, s·q + b, · x) and load 32 x floats per 16 bytes of codes, so at batch 1 they ran
 * at ~0.6 TB/s, no faster than the bf16 GEMVs reading 3.6x the bytes (bench/RESULTS.md, ninth
 * session). Here a warp owns a tile of 16 weight rows and multiplies it with mma.sync
 * m16n8k16 (f16 operands, f32 accumulation), the 8 columns of B being up to 8 token rows:
 *   - codes: lane (g, t) = (lane / 4, lane % 4) loads W = group / 32 words of rows g and g + 8
 *     per group (a quad reads one group's 16·W bytes of a row, a warp 8 rows at once); a word's
 *     8 nibbles become 4 half2 (q_j, q_{j+4}) by one lop3 into 1024's mantissa and an exact
 *     subtraction of 1024 (HSUB2), so A holds the codes q themselves, exact in f16;
 *   - which of the 16 k slots of an mma holds which column is free (a dot product does not care
 *     about the order of its terms) as long as B holds x in the same order: the block stages its
 *     x rows once in shared memory as f16 pairs in exactly the order the lanes' codes come in
 *     (qt_stage), so a B fragment is one 8-byte shared load, and each group's Σ x beside them;
 *   - x is staged as two f16 rows, hi = f16(x) and lo = f16(x - hi) (x to ~22 significant bits;
 *     hi saturates at ±65504, lo takes the rest up to twice that), B's columns 2j and 2j + 1
 *     are token j's hi and lo, so one mma gives 4 tokens' sums (hi and lo parts added in f32
 *     after it) and a second one with the same A the tokens 4..7;
 *   - one group's mmas start from zero (C = Σ q·x over the group), then the group's affine
 *     parameters apply in f32: acc += s·C + b·Σx (Σx of the f32 x). So weights are never
 *     rounded and x only past ~2^-22: f32-class sums (products exact, f32 accumulation in
 *     another order than the CPU's).
 * A tile's groups may be split over ks warps of a block (small matrices: enough warps in
 * flight), their sums added in warp order; ks depends on the matrix's shape only, never on the
 * number of token rows, so a token row gets the same bits alone or in a batch. Each lane
 * double-buffers its code loads (one batch of groups in flight while the previous is
 * multiplied). Only 4-bit affine codes, groups of 32 / 64 / 128, f32 / f16 / bf16 scales;
 * everything else stays on quant.cu's kernels. CINFER_CUDA_QMMA=0 turns this off. */
#include "cuda_internal.h"
#include "loaders.cuh"
#include "quant.cuh"
#include <cuda_fp16.h>
#include <string.h>

enum { QT_WARPS = 8, QT_THREADS = QT_WARPS * 32, QT_MAX_TOK = 8, QT_PAD = 4 /* half2 after a staged row */ };

/* CINFER_CUDA_QMMA (default 1; 0: quant.cu's / quant_moe.cu's f32 qmv kernels, to measure
 * against). Measured on the H200 (2026-12-02, mlx4 Qwen3-30B-A3B dims, 12 layers, decode after
 * 512 tokens, alternating, 2 rounds): 807.3 / 804.5 tok/s on vs 604.5 / 605.5 off; batched
 * decode of 8 sequences 1,980 vs 948 tok/s. */
int cb_q_qmma(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QMMA", 1);
    return v;
}

/* ---- device pieces ------------------------------------------------------------------------- */

template <int W>
__device__ __forceinline__ void qt_ldw(const uint32_t *p, uint32_t *u) {
    if constexpr (W == 4 || W == 8) {
#pragma unroll
        for (int q = 0; q < W; q += 4) {
            const uint4 v = ld_nc_u4((const uint4 *)p + q / 4);
            u[q] = v.x; u[q + 1] = v.y; u[q + 2] = v.z; u[q + 3] = v.w;
        }
    } else if constexpr (W == 2) {
        asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(p));
    } else {
        asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(u[0]) : "l"(p));
    }
}

/* codes (j, j + 4) of the word's nibbles, j = 0..3 as u >> 4j, as a half2 of the codes */
__device__ __forceinline__ unsigned qt_pair(unsigned u) {
    unsigned r;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(u), "r"(0x000F000Fu), "r"(0x64006400u));   /* (u & m) | c */
    __half2 h = __hsub2(*(const __half2 *)&r, __half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400)));
    return *(const unsigned *)&h;
}

/* codes (2p, 2p + 1) of the word's 4 bytes, p = 0 (sel 0x4140) or 1 (0x4342), as a half2 of
 * the codes: each byte under 0x64 (1024 + q), then 1024 off (exact) */
__device__ __forceinline__ unsigned qt_pair8(unsigned u, unsigned sel) {
    unsigned r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(u), "r"(0x64646464u), "r"(sel));
    __half2 h = __hsub2(*(const __half2 *)&r, __half2(__ushort_as_half(0x6400), __ushort_as_half(0x6400)));
    return *(const unsigned *)&h;
}

__device__ __forceinline__ void qt_mma(float *c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                       unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Stages ntok rows of K floats (row i at x + i·xs_stride) as the B operand: staged row 2i
 * (hi) and 2i + 1 (lo) of token i, rs = K / 2 + QT_PAD half2 apart. W: code words a lane
 * loads per group and row. 4-bit: half2 number ((G·4 + t)·W + w)·4 + p (group G, lane quad
 * position t, word w, pair p) holds columns (k0 + p, k0 + p + 4), k0 = 32W·G + 8(tW + w): the
 * columns of the codes qt_pair makes of lane t's word w. 8-bit: number ((G·4 + t)·W + w)·2 + p
 * holds (k0 + 2p, k0 + 2p + 1), k0 = 16W·G + 4(tW + w) (qt_pair8). xsum[i·ng + G]: Σ of group
 * G's f32 x (lanes in order, then a fixed tree). Ends with a barrier. */
template <int BITS, int W>
__device__ void qt_stage(__half2 *xs, float *xsum, const float *x, int64_t xs_stride, int ntok, int K,
                         const float *norm_w = nullptr, float eps = 0.0f) {
    __shared__ float part[32][QT_MAX_TOK], nsc[QT_MAX_TOK];
    constexpr int PPG = BITS == 4 ? 16 * W : 8 * W, GS = 2 * PPG;   /* pairs and columns a group */
    const int half = K >> 1, rs = half + QT_PAD, ng = K / GS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    if (norm_w) {   /* RMSNorm of each row first (norm_matmul: xn is never written) */
        for (int tok = 0; tok < ntok; tok++) {
            const float *xr = x + tok * xs_stride;
            float ss = 0.0f;
            for (int c = threadIdx.x; c < K; c += blockDim.x) ss = fmaf(xr[c], xr[c], ss);
            ss = q_warp_sum(ss);
            if (lane == 0) part[warp][tok] = ss;
        }
        __syncthreads();
        if ((int)threadIdx.x < ntok) {
            float tot = 0.0f;
            for (int w = 0; w < nw; w++) tot += part[w][threadIdx.x];
            nsc[threadIdx.x] = (float)(1.0 / sqrt((double)tot / (double)K + (double)eps));
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < ntok * half; i += blockDim.x) {
        const int tok = i / half, j = i - tok * half;
        const int G = j / PPG, rem = j - G * PPG;
        const int ka = BITS == 4 ? GS * G + 8 * (rem >> 2) + (rem & 3) : GS * G + 4 * (rem >> 1) + 2 * (rem & 1);
        const int kb = BITS == 4 ? ka + 4 : ka + 1;
        const float *xr = x + tok * xs_stride;
        float a = xr[ka], b = xr[kb];
        if (norm_w) {
            a = a * nsc[tok] * __ldg(norm_w + ka);
            b = b * nsc[tok] * __ldg(norm_w + kb);
        }
        const __half2 hi = __floats2half2_rn(f16_sat(a), f16_sat(b));
        const float2 hf = __half22float2(hi);
        xs[2 * tok * rs + j] = hi;
        xs[(2 * tok + 1) * rs + j] = __floats2half2_rn(f16_sat(a - hf.x), f16_sat(b - hf.y));
    }
    for (int it = warp; it < ntok * ng; it += nw) {
        const int tok = it / ng, G = it - tok * ng;
        const float *xr = x + tok * xs_stride + GS * G;
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < GS / 32; q++) {
            float v = xr[32 * q + lane];
            if (norm_w) v = v * nsc[tok] * __ldg(norm_w + GS * G + 32 * q + lane);
            s += v;
        }
        s = q_warp_sum(s);
        if (lane == 0) xsum[it] = s;
    }
    __syncthreads();
}

/* one lane's rows of NTL tiles: codes, scale and bias of rows g (h = 0) and g + 8 (h = 1) */
template <int NTL>
struct qt_rows {
    const uint32_t *c[NTL][2];
    const char *s[NTL][2], *b[NTL][2];
};

/* the loads of one batch of U groups starting at G0 (groups >= ge not loaded) */
template <int W, int NTL, int U>
struct qt_buf {
    uint32_t w[U][NTL][2][W];
    float s[U][NTL][2], b[U][NTL][2];
};

template <int W, int NTL, int U>
__device__ __forceinline__ void qt_load(qt_buf<W, NTL, U> &B, const qt_rows<NTL> &R, int sd, int t, int G0, int ge) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int G = G0 + u;
        if (G >= ge) break;
#pragma unroll
        for (int i = 0; i < NTL; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                qt_ldw<W>(R.c[i][h] + G * 4 * W + t * W, B.w[u][i][h]);
                B.s[u][i][h] = q_param(R.s[i][h], sd, G);
                B.b[u][i][h] = q_param(R.b[i][h], sd, G);
            }
    }
}

/* acc[i][2nb + h] += the batch's groups for tile i, rows g (h = 0) and g + 8 (h = 1), token
 * 4nb + t: c = mma of the tile's codes with the staged x (B set nb: this quad's staged row
 * xq[nb], columns hi / lo of tokens 4nb..4nb+3), then s·(c_hi + c_lo) + b·Σx with Σx from
 * xsum[nb] (the lane's token's) */
template <int BITS, int W, int NTL, int U, int NB>
__device__ __forceinline__ void qt_compute(const qt_buf<W, NTL, U> &B, const __half2 *const *xq,
                                           const float *const *xsum, int t, int G0, int ge, float (*acc)[4]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int G = G0 + u;
        if (G >= ge) break;
        float c[NTL][NB][4];
#pragma unroll
        for (int i = 0; i < NTL; i++)
#pragma unroll
            for (int nb = 0; nb < NB; nb++) c[i][nb][0] = c[i][nb][1] = c[i][nb][2] = c[i][nb][3] = 0.0f;
#pragma unroll
        for (int w = 0; w < W; w++) {
            if constexpr (BITS == 8) {   /* a word: 4 codes, one mma */
                uint2 bx[NB];
#pragma unroll
                for (int nb = 0; nb < NB; nb++) bx[nb] = *(const uint2 *)(xq[nb] + ((G * 4 + t) * W + w) * 2);
#pragma unroll
                for (int i = 0; i < NTL; i++) {
                    const unsigned r0 = B.w[u][i][0][w], r1 = B.w[u][i][1][w];
                    const unsigned a0 = qt_pair8(r0, 0x4140), a1 = qt_pair8(r1, 0x4140), a2 = qt_pair8(r0, 0x4342),
                                   a3 = qt_pair8(r1, 0x4342);
#pragma unroll
                    for (int nb = 0; nb < NB; nb++) qt_mma(c[i][nb], a0, a1, a2, a3, bx[nb].x, bx[nb].y);
                }
                continue;
            }
            const int off = ((G * 4 + t) * W + w) * 4;
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                uint2 bx[NB];
#pragma unroll
                for (int nb = 0; nb < NB; nb++) bx[nb] = *(const uint2 *)(xq[nb] + off + 2 * hh);
#pragma unroll
                for (int i = 0; i < NTL; i++) {
                    const unsigned r0 = B.w[u][i][0][w] >> (8 * hh), r1 = B.w[u][i][1][w] >> (8 * hh);
                    const unsigned a0 = qt_pair(r0), a1 = qt_pair(r1), a2 = qt_pair(r0 >> 4), a3 = qt_pair(r1 >> 4);
#pragma unroll
                    for (int nb = 0; nb < NB; nb++) qt_mma(c[i][nb], a0, a1, a2, a3, bx[nb].x, bx[nb].y);
                }
            }
        }
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            const float X = xsum[nb][G];
#pragma unroll
            for (int i = 0; i < NTL; i++) {
                acc[i][2 * nb] = fmaf(B.s[u][i][0], c[i][nb][0] + c[i][nb][1], fmaf(B.b[u][i][0], X, acc[i][2 * nb]));
                acc[i][2 * nb + 1] = fmaf(B.s[u][i][1], c[i][nb][2] + c[i][nb][3], fmaf(B.b[u][i][1], X, acc[i][2 * nb + 1]));
            }
        }
    }
}

/* groups a lane loads per batch: 8 bytes of each row (16 for groups of 128), two batches in
 * flight */
template <int W>
__host__ __device__ constexpr int qt_u() { return W == 1 ? 2 : 1; }

/* acc += this lane's sums of NTL tiles over groups [gb, ge), double-buffered; A holds the loads
 * of the first batch (qt_load at gb: issued by the caller, before the staging of x) */
template <int BITS, int W, int NTL, int NB, int U>
__device__ __forceinline__ void qt_tile(qt_buf<W, NTL, U> &A, const qt_rows<NTL> &R, int sd, int gb, int ge,
                                        const __half2 *const *xq, const float *const *xsum, int t, float (*acc)[4]) {
    qt_buf<W, NTL, U> B;
    for (int G0 = gb; G0 < ge; G0 += 2 * U) {
        if (G0 + U < ge) qt_load<W, NTL, U>(B, R, sd, t, G0 + U, ge);
        qt_compute<BITS, W, NTL, U, NB>(A, xq, xsum, t, G0, ge, acc);
        if (G0 + U >= ge) break;
        if (G0 + 2 * U < ge) qt_load<W, NTL, U>(A, R, sd, t, G0 + 2 * U, ge);
        qt_compute<BITS, W, NTL, U, NB>(B, xq, xsum, t, G0 + U, ge, acc);
    }
}

/* lane's rows of a matrix (codes at c, K / 8 words a row; params from p0 / q0, ng a row, es
 * bytes each): rows r0 + g and r0 + g + 8, clamped to rows - 1 (their sums are not written) */
__device__ __forceinline__ void qt_row_ptrs(const uint8_t *codes, const char *sp, const char *bp, int64_t rows,
                                            int bits, int K, int ng, int es, int64_t r0, int g, const uint32_t **c,
                                            const char **s, const char **b) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t r = r0 + g + 8 * h;
        if (r >= rows) r = rows - 1;
        c[h] = (const uint32_t *)codes + r * (K >> 3) * (bits >> 2);
        s[h] = sp + r * ng * es;
        b[h] = bp + r * ng * es;
    }
}

/* the block's ks-way sums: warps kp = 1.. of a tile write theirs, warp kp = 0 adds them in order
 * (all warps of the block call it) */
template <int NTL>
__device__ __forceinline__ void qt_reduce(float *red, int ks, int warp, int lane, float (*acc)[4]) {
    if (ks == 1) return;
    const int kp = warp % ks;
    if (kp)
#pragma unroll
        for (int i = 0; i < NTL; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) red[((warp * NTL + i) * 4 + j) * 32 + lane] = acc[i][j];
    __syncthreads();
    if (!kp)
        for (int q = 1; q < ks; q++)
#pragma unroll
            for (int i = 0; i < NTL; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += red[(((warp + q) * NTL + i) * 4 + j) * 32 + lane];
    __syncthreads();
}

/* ---- dense: y[n, rows] (op)= x[n, K] · Wᵀ --------------------------------------------------- */

struct qt_args {
    const uint8_t *codes[4];
    const char *sp[4], *bp[4];   /* the view's first row's scales / biases */
    int64_t rows[4];
    int64_t tiles[4];
    float *y[4];
    const float *x;
    const float *norm_w;         /* RMSNorm of x first (norm_matmul_n / _swiglu), or NULL */
    float eps;
    int count, op, n, K, ng, sd, es, ks;
    int64_t ntiles;              /* warp tiles (SwiGLU: of the gate rows, each with its up tile) */
};

/* NB: B sets (1: up to 4 token rows, 2: up to 8). The first tile's codes are loaded before
 * pdl_enter(): weights are never written while a model runs, so they may stream in while the
 * kernel before finishes (every other global read waits for it). */
template <int BITS, int W, int NTL, int NB, int NW>
__global__ void __launch_bounds__(NW * 32, 16 / NW) qt_dense_kernel(qt_args a) {
    extern __shared__ __align__(16) unsigned char qt_sm[];
    constexpr int U = qt_u<W>();
    const int rs = (a.K >> 1) + QT_PAD;
    __half2 *xs = (__half2 *)qt_sm;
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
            qt_row_ptrs(a.codes[m], a.sp[m], a.bp[m], a.rows[m], BITS, a.K, a.ng, a.es, r0, g, R.c[i], R.s[i], R.b[i]);
        }
        qt_load<W, NTL, U>(A, R, a.sd, t, gb, ge);
    };
    setup(blockIdx.x);
    pdl_enter();
    qt_stage<BITS, W>(xs, xsum, a.x, a.K, a.n, a.K, a.norm_w, a.eps);
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
        if (live) qt_tile<BITS, W, NTL, NB, U>(A, R, a.sd, gb, ge, xq, xsm, t, acc);
        qt_reduce<NTL>(red, a.ks, warp, lane, acc);
        if (!live || kp) continue;
        const int64_t rows = a.rows[mi];
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            const int tok = 4 * nb + t;
            if (tok >= a.n) continue;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t r = r0 + g + 8 * h;
                if (r >= rows) continue;
                float *y = a.y[mi] + (int64_t)tok * rows + r;
                const float v = acc[0][2 * nb + h];
                if (NTL == 2) *y = v / (1.0f + expf(-v)) * acc[NTL - 1][2 * nb + h];
                else if (a.op == CB_ACC) *y += v;
                else *y = v;
            }
        }
    }
}

/* warps a tile's groups are split over: 1, 2, .. nw (a block's warps), doubled while the
 * launch's warps still fit one wave (16 warps an SM: the kernels' launch bounds) and each
 * warp keeps 2 groups or more. A function of the shape only (never of the token rows).
 * Measured on the H200 (2026-12-02, mlx4 Qwen3-30B-A3B dims, 12 layers, decode after 512,
 * alternating, 2 rounds, bench/device_runs/2026-12-02f-qmma5.sh, in a build that also held a
 * second prefetch buffer across the staging, since removed: no faster, 13 more registers): at
 * least 2 groups a warp 891.4 / 897.8 tok/s, 1 group 893.3 / 898.7, 4 groups 863.9 / 872.3
 * (small matrices such as the router split further); the experts' gate+up split 8 or 2 ways
 * instead of the rule's 4: 813.5 / 814.5, 812.8 / 816.0. */
static int qt_ks(int64_t warp_tiles, int ng, int sm_count, int nw) {
    int ks = 1;
    while (ks < nw && warp_tiles * ks * 2 <= (int64_t)sm_count * 16 && ng >= 4 * ks) ks *= 2;
    return ks;
}

/* blocks: want, at most what is resident at once (blocks loop over their tiles); the
 * occupancy of a (kernel, shared bytes) asked once */
static int qt_grid(const void *kernel, int threads, size_t smem, int sm_count, int64_t want) {
    static struct { const void *k; size_t smem; int per; } memo[64];
    static int n_memo;
    int per = 0;
    for (int i = 0; i < n_memo && !per; i++)
        if (memo[i].k == kernel && memo[i].smem == smem) per = memo[i].per;
    if (!per) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, smem) != cudaSuccess || per < 1) per = 1;
        if (n_memo < 64) memo[n_memo++] = { kernel, smem, per };
    }
    const int64_t cap = (int64_t)per * sm_count;
    return (int)(want < cap ? want : cap);
}

/* 4- or 8-bit affine, groups of 32 / 64 / 128, K a multiple of the group, 16-byte aligned codes
 * of 16-byte aligned rows, f32 / f16 / bf16 params */
static int qt_kind_ok(const cb_qm &m) {
    return m.mode == 1 && (m.bits == 4 || m.bits == 8) && m.sd <= 2 &&
           (m.group == 32 || m.group == 64 || m.group == 128) && m.cols % m.group == 0 &&
           ((uintptr_t)m.codes & 15) == 0 && (m.cols * m.bits / 8) % 16 == 0;
}

static size_t qt_dense_smem(int n, int K, int ng, int ntl, int nw) {
    return (size_t)2 * n * ((K >> 1) + QT_PAD) * 4 + (size_t)n * ng * 4 + (size_t)nw * ntl * 4 * 32 * 4;
}
static const size_t QT_SMEM_MAX = 96 * 1024;

/* CINFER_CUDA_QMMA_NW16 (default 1; 0: never): one-matrix dense launches of at most one tile
 * per SM (an o_proj: 2048 rows) in blocks of 16 warps, so each tile's groups split 16 ways.
 * Measured as QMMA_DNW (same call): 905.1 / 906.2 tok/s on vs 869.0 / 866.5 off. */
static int qt_nw16(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QMMA_NW16", 1);
    return v;
}
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

int cb_qt_matmul(cuda_be *cb, int op, int count, float *const *ys, const float *x, int n, const cb_qm *ms,
                 const float *norm_w, float eps) {
    if (!cb_q_qmma() || n < 1 || n > QT_MAX_TOK || count < 1 || count > 4 || (op == CB_SWIGLU && count != 2)) return 0;
    for (int i = 0; i < count; i++)
        if (!qt_kind_ok(ms[i]) || ms[i].bits != ms[0].bits || ms[i].group != ms[0].group || ms[i].sd != ms[0].sd ||
            ms[i].cols != ms[0].cols || ms[i].rows < 1)
            return 0;
    if (op == CB_SWIGLU && ms[0].rows != ms[1].rows) return 0;
    if (((uintptr_t)x & 3) != 0) return 0;
    const int K = (int)ms[0].cols, ng = K / ms[0].group, bits = ms[0].bits, W = ms[0].group * bits / 128,
              ntl = op == CB_SWIGLU ? 2 : 1;
    qt_args a;
    memset(&a, 0, sizeof a);
    const int es = ms[0].sd == 0 ? 4 : 2;
    a.count = count; a.op = op; a.n = n; a.K = K; a.ng = ng; a.sd = ms[0].sd; a.es = es; a.x = x;
    a.norm_w = norm_w; a.eps = eps;
    for (int i = 0; i < count; i++) {
        a.codes[i] = ms[i].codes;
        a.sp[i] = (const char *)ms[i].scales + ms[i].srow0 * ng * es;
        a.bp[i] = (const char *)ms[i].biases + ms[i].srow0 * ng * es;
        a.rows[i] = ms[i].rows;
        a.tiles[i] = (ms[i].rows + 15) / 16;
        a.y[i] = op == CB_SWIGLU ? ys[0] : ys[i];
        if (op != CB_SWIGLU || i == 0) a.ntiles += a.tiles[i];
    }
    const int nw = ntl == 1 && qt_nw16() && a.ntiles <= cb->sm_count ? 16 : QT_WARPS;
    const size_t smem = qt_dense_smem(n, K, ng, ntl, nw);
    if (smem > QT_SMEM_MAX) return 0;
    a.ks = qt_ks(a.ntiles, ng, cb->sm_count, nw);
    const int64_t blocks = (a.ntiles + nw / a.ks - 1) / (nw / a.ks);
    const dim3 blk(32 * nw);
#define QT_GO(BI, WW, NN, BB, NWW)                                                                            \
    do {                                                                                                      \
        static int attr = 0;                                                                                  \
        if (!attr) {                                                                                          \
            cudaFuncSetAttribute(qt_dense_kernel<BI, WW, NN, BB, NWW>,                                        \
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)QT_SMEM_MAX);              \
            attr = 1;                                                                                         \
        }                                                                                                     \
        const dim3 grid((unsigned)qt_grid((const void *)qt_dense_kernel<BI, WW, NN, BB, NWW>, 32 * NWW, smem, \
                                          cb->sm_count, blocks));                                             \
        cb_launch(cb, qt_dense_kernel<BI, WW, NN, BB, NWW>, grid, blk, smem, a);                              \
    } while (0)
#define QT_GO_W(NN, BB, NWW)                                                                                  \
    do {                                                                                                      \
        if (bits == 4) {                                                                                      \
            if (W == 1) QT_GO(4, 1, NN, BB, NWW);                                                             \
            else if (W == 2) QT_GO(4, 2, NN, BB, NWW);                                                        \
            else QT_GO(4, 4, NN, BB, NWW);                                                                    \
        } else {                                                                                              \
            if (W == 2) QT_GO(8, 2, NN, BB, NWW);                                                             \
            else if (W == 4) QT_GO(8, 4, NN, BB, NWW);                                                        \
            else QT_GO(8, 8, NN, BB, NWW);                                                                    \
        }                                                                                                     \
    } while (0)
    if (ntl == 2) {
        if (n <= 4) QT_GO_W(2, 1, 8);
        else QT_GO_W(2, 2, 8);
    } else if (nw == 16) {
        if (n <= 4) QT_GO_W(1, 1, 16);
        else QT_GO_W(1, 2, 16);
    } else {
        if (n <= 4) QT_GO_W(1, 1, 8);
        else QT_GO_W(1, 2, 8);
    }
#undef QT_GO_W
#undef QT_GO
    cb_launched(cb, "quantized gemv (tensor cores)");
    return 1;
}

/* ---- routed experts ------------------------------------------------------------------------ */

/* gate+up: h[p, r] = act(gate_e row r · x_t, up_e row r · x_t) for entries p = (t, k) =
 * blockIdx.y (e = sel[p], t = p / K): token t's x staged, NTL = 2 tiles (gate, up) a warp for
 * gated experts, 1 (up) for relu². down: out[t, r] (+)= Σ_k w[t, k] · (down_e row r · h[t, k])
 * for one 16-row tile r0 = 16·blockIdx.x of token t = blockIdx.y: the K rows of h staged, the
 * block's warps taking (expert k, part kp) items i = warp, warp + 8, ..., each summing w_k ·
 * its share, then the 8 warps' sums added in warp order. */
struct qt_moe_args {
    const uint8_t *const *codes;
    const void *const *scales, *const *biases;
    const int64_t *srow0;
    const int32_t *sel;
    const float *wt;
    const float *x;    /* [n, X] */
    float *h;          /* [n·K, I] */
    float *out;        /* [n, X] */
    int X, I, K, sd, es, acc, ks, kparts;
    float limit;
};

template <int BITS, int W, int NTL>
__global__ void __launch_bounds__(QT_THREADS, 2) qt_gu_kernel(qt_moe_args a) {
    extern __shared__ __align__(16) unsigned char qt_sm[];
    constexpr int U = qt_u<W>();
    const int K = a.X, ng = K / (BITS == 4 ? 32 * W : 16 * W), p = blockIdx.y;
    __half2 *xs = (__half2 *)qt_sm;
    float *xsum = (float *)(xs + 2 * ((K >> 1) + QT_PAD));
    float *red = xsum + ng;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tpb = QT_WARPS / a.ks, kp = warp % a.ks;
    const int ntiles = (a.I + 15) / 16, nb = (ntiles + tpb - 1) / tpb;
    const int gb = kp * ng / a.ks, ge = (kp + 1) * ng / a.ks;
    pdl_enter();
    const int e = a.sel[p], tk = p / a.K;
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
            const char *sp = (const char *)a.scales[m] + a.srow0[m] * ng * a.es;
            const char *bp = (const char *)a.biases[m] + a.srow0[m] * ng * a.es;
            qt_row_ptrs(a.codes[m], sp, bp, a.I, BITS, K, ng, a.es, (int64_t)tile * 16, g, R.c[i], R.s[i], R.b[i]);
        }
        qt_load<W, NTL, U>(A, R, a.sd, t, gb, ge);
    };
    setup(blockIdx.x);
    qt_stage<BITS, W>(xs, xsum, a.x + (int64_t)tk * a.X, 0, 1, K);
    const __half2 *xq[1] = { xs + (g & 1) * ((K >> 1) + QT_PAD) };   /* B columns: hi, lo, hi, lo, ... */
    const float *xsm[1] = { xsum };
    for (int bt = blockIdx.x; bt < nb; bt += gridDim.x) {
        if (bt != (int)blockIdx.x) setup(bt);
        float acc[NTL][4];
#pragma unroll
        for (int i = 0; i < NTL; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
        if (live) qt_tile<BITS, W, NTL, 1, U>(A, R, a.sd, gb, ge, xq, xsm, t, acc);
        qt_reduce<NTL>(red, a.ks, warp, lane, acc);
        if (!live || kp || t) continue;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = tile * 16 + g + 8 * h;
            if (r < a.I)
                a.h[(int64_t)p * a.I + r] = moe_act(NTL == 2 ? acc[0][h] : 0.0f, acc[NTL - 1][h], NTL == 1, a.limit);
        }
    }
}

template <int BITS, int W, int NW>
__global__ void __launch_bounds__(NW * 32, 16 / NW) qt_dn_kernel(qt_moe_args a) {
    extern __shared__ __align__(16) unsigned char qt_sm[];
    constexpr int U = qt_u<W>();
    const int K = a.I, ng = K / (BITS == 4 ? 32 * W : 16 * W), tk = blockIdx.y, rs = (K >> 1) + QT_PAD;
    __half2 *xs = (__half2 *)qt_sm;
    float *xsum = (float *)(xs + (size_t)2 * a.K * rs);
    float *red = xsum + a.K * ng;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t r0 = (int64_t)blockIdx.x * 16;
    const int items = a.K * a.kparts;
    pdl_enter();
    qt_buf<W, 1, U> A;
    qt_rows<1> R;
    int k = 0, gb = 0, ge = 0;
    auto setup = [&](int it) {   /* item it = (expert slot k, part): its rows and first batch's loads */
        k = it / a.kparts;
        const int kp = it - k * a.kparts, m = 3 * a.sel[tk * a.K + k] + 2;
        gb = kp * ng / a.kparts;
        ge = (kp + 1) * ng / a.kparts;
        const char *sp = (const char *)a.scales[m] + a.srow0[m] * ng * a.es;
        const char *bp = (const char *)a.biases[m] + a.srow0[m] * ng * a.es;
        qt_row_ptrs(a.codes[m], sp, bp, a.X, BITS, K, ng, a.es, r0, g, R.c[0], R.s[0], R.b[0]);
        qt_load<W, 1, U>(A, R, a.sd, t, gb, ge);
    };
    if (warp < items) setup(warp);
    qt_stage<BITS, W>(xs, xsum, a.h + (int64_t)tk * a.K * a.I, a.I, a.K, K);
    float acc[1][4] = { { 0.0f, 0.0f, 0.0f, 0.0f } };
    for (int it = warp; it < items; it += NW) {
        if (it != warp) setup(it);
        float part[1][4] = { { 0.0f, 0.0f, 0.0f, 0.0f } };
        const __half2 *xq[1] = { xs + (size_t)(2 * k + (g & 1)) * rs };
        const float *xsm[1] = { xsum + k * ng };
        qt_tile<BITS, W, 1, 1, U>(A, R, a.sd, gb, ge, xq, xsm, t, part);
        const float wk = a.wt[tk * a.K + k];
#pragma unroll
        for (int j = 0; j < 4; j++) acc[0][j] = fmaf(wk, part[0][j], acc[0][j]);
    }
    /* the NW warps' sums in warp order */
    if (t == 0) {
        red[warp * 16 + g] = acc[0][0];
        red[warp * 16 + g + 8] = acc[0][1];
    }
    __syncthreads();
    if (threadIdx.x < 16) {
        const int64_t r = r0 + threadIdx.x;
        float s = 0.0f;
        for (int q = 0; q < NW; q++) s += red[q * 16 + threadIdx.x];
        if (r < a.X) {
            float *o = a.out + (int64_t)tk * a.X + r;
            *o = a.acc ? *o + s : s;
        }
    }
}

/* the two launches for k token rows; 0 (nothing launched) when the layer is not 4-bit affine
 * with gate / up / down packed alike or does not fit */
int cb_qt_moe(cuda_be *cb, const uint8_t *const *codes, const void *const *scales, const void *const *biases,
              const int64_t *srow0, const int *mode, const int *bits, const int *group, const int *sd, int relu2, int X,
              int I, int K, float limit, const int32_t *sel, const float *wt, const float *x, float *h, float *out,
              int k, int acc) {
    if (!cb_q_qmma() || k < 1 || k > QT_MAX_TOK || K < 1) return 0;
    const int bt = bits[1];
    for (int j = relu2 ? 1 : 0; j < 3; j++)
        if (mode[j] != 1 || bits[j] != bt || sd[j] > 2 || group[j] != group[1] || sd[j] != sd[1]) return 0;
    const int gs = group[1], W = gs * bt / 128;
    if ((bt != 4 && bt != 8) || !(gs == 32 || gs == 64 || gs == 128) || X % gs || I % gs || (X * bt / 8) % 16 ||
        (I * bt / 8) % 16)
        return 0;
    if (((uintptr_t)x & 3) || ((uintptr_t)h & 3)) return 0;
    const int ngx = X / gs, ngi = I / gs, ntl = relu2 ? 1 : 2;
    const size_t smem_gu = (size_t)2 * ((X >> 1) + QT_PAD) * 4 + (size_t)ngx * 4 + (size_t)QT_WARPS * ntl * 4 * 32 * 4;
    const int dnw = qt_dn_warps();
    const size_t smem_dn = (size_t)2 * K * ((I >> 1) + QT_PAD) * 4 + (size_t)K * ngi * 4 + dnw * 16 * 4;
    if (smem_gu > QT_SMEM_MAX || smem_dn > QT_SMEM_MAX) return 0;
    qt_moe_args a;
    memset(&a, 0, sizeof a);
    a.codes = codes; a.scales = scales; a.biases = biases; a.srow0 = srow0; a.sel = sel; a.wt = wt; a.x = x; a.h = h;
    a.out = out; a.X = X; a.I = I; a.K = K; a.sd = sd[1]; a.es = sd[1] == 0 ? 4 : 2; a.acc = acc; a.limit = limit;
    const int tiles = (I + 15) / 16;
    a.ks = qt_ks((int64_t)tiles * K, ngx, cb->sm_count, QT_WARPS);
    /* down: items (expert, part) over the block's 8 warps; parts only when K < 8 */
    a.kparts = 1;
    while (K * a.kparts < dnw && ngi >= 2 * a.kparts) a.kparts *= 2;
    const int tpb = QT_WARPS / a.ks;
    const dim3 gg((unsigned)((tiles + tpb - 1) / tpb), (unsigned)(k * K)), gd((unsigned)((X + 15) / 16), (unsigned)k),
        blk(QT_THREADS);
#define QT_SET(KER, SM)                                                                                       \
    do {                                                                                                      \
        static int attr = 0;                                                                                  \
        if (!attr) {                                                                                          \
            cudaFuncSetAttribute(KER, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)QT_SMEM_MAX);         \
            attr = 1;                                                                                         \
        }                                                                                                     \
        cb_launch(cb, KER, gg_or_gd, blk_or_bd, SM, a);                                                       \
    } while (0)
    dim3 gg_or_gd = gg, blk_or_bd = blk;
#define QT_MOE(BI, WW)                                                                                        \
    do {                                                                                                      \
        if (relu2) QT_SET((qt_gu_kernel<BI, WW, 1>), smem_gu);                                                \
        else QT_SET((qt_gu_kernel<BI, WW, 2>), smem_gu);                                                      \
        gg_or_gd = gd;                                                                                        \
        blk_or_bd = dim3(32 * dnw);                                                                           \
        if (dnw == 16) QT_SET((qt_dn_kernel<BI, WW, 16>), smem_dn);                                          \
        else QT_SET((qt_dn_kernel<BI, WW, 8>), smem_dn);                                                     \
    } while (0)
    if (bt == 4) {
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
    cb_launched(cb, "quantized moe_experts (tensor cores)");
    return 1;
}
