/* quant_mma.cuh — MLX affine 4- and 8-bit, mxfp4 and fp8 GEMVs of 1..8 token rows on tensor cores (decode),
 * the pieces the dense kernels (quant_mma.cu, for quant.cu's matmuls) and the routed experts'
 * kernels (quant_mma_moe.cu, for quant_moe.cu) share.
 *
 * Why: the f32 kernels of quant.cu / quant_moe.cu spend ~5 instructions a weight (extract,
 * convert, s·q + b, · x) and load 32 x floats per 16 bytes of codes, so at batch 1 they ran
 * at ~0.6 TB/s, no faster than the bf16 GEMVs reading 3.6x the bytes (bench/RESULTS.md, ninth
 * session). Here a warp owns a tile of 16 weight rows and multiplies it with mma.sync
 * m16n8k16 (f16 operands, f32 accumulation), the 8 columns of B being up to 8 token rows:
 *   - codes: lane (g, t) = (lane / 4, lane % 4) loads W words of rows g and g + 8 per group
 *     (W = group / 32 for 4-bit codes, group / 16 for 8-bit: a quad reads one group of a row, a
 *     warp 8 rows at once); a 4-bit word's 8 nibbles become 4 half2 (q_j, q_{j+4}) by one lop3
 *     into 1024's mantissa, an 8-bit word's 4 bytes 2 half2 (q_2p, q_2p+1) by one prmt, then an
 *     exact subtraction of 1024 (HSUB2), so A holds the codes q themselves, exact in f16;
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
 *     another order than the CPU's). A first form with x as one f16 row failed 5 mlx parity
 *     checks (bench/RESULTS.md, eleventh session).
 * A tile's groups may be split over ks warps of a block (small matrices: enough warps in
 * flight), their sums added in warp order; ks depends on the matrix's shape only, never on the
 * number of token rows, so a token row gets the same bits alone or in a batch. Each lane
 * double-buffers its code loads (one batch of groups in flight while the previous is
 * multiplied), the first batch issued before the staging of x (the dense kernels: before
 * pdl_enter(), weights being never written while a model runs). Affine 4- and 8-bit codes,
 * groups of 32 / 64 / 128, f32 / f16 / bf16 scales; and fp8 E4M3 weights with a scale per
 * 128 x 128 block (DeepSeek's layout; f32 / bf16 / E8M0 scales), BITS = QT_E4M3: laid out as
 * 8-bit codes with groups of 128 columns (a block's width), each byte pair made a half2 by one
 * cvt (E4M3 is exact in f16: 4 exponent bits, 3 mantissa bits), the block's scale applied to
 * the group's sum, no bias: acc += s·(C_hi + C_lo). And mxfp4 (E2M1 codes, an E8M0 scale per 32;
 * DeepSeek V4's FP4 experts), BITS = QT_E2M1: laid out as 4-bit codes, a pair made a half2 by
 * placing its bits (qt_pair_e2m1: the values times 2^-14, exact), acc += s·2^14·(C_hi + C_lo).
 * Everything else stays on quant.cu's / gemv.cu's kernels. CINFER_CUDA_QMMA=0 turns this off
 * (quant_mma.cu). */
#ifndef CI_CUDA_QUANT_MMA_CUH
#define CI_CUDA_QUANT_MMA_CUH
#include "cuda_internal.h"
#include "loaders.cuh"
#include "quant.cuh"
#include "prof.cuh"
#include <cuda_fp16.h>
#include <string.h>

enum { QT_WARPS = 8, QT_THREADS = QT_WARPS * 32, QT_MAX_TOK = 8 };
enum { QT_E4M3 = 3 };   /* BITS of fp8 E4M3 weights (their codes are laid out as 8-bit ones) */
enum { QT_E2M1 = 9 };   /* BITS of mxfp4 (E2M1) weights (laid out as 4-bit ones) */
/* CINFER_CUDA_QT_USUM (default 1; 0: a warp a group after the pairs): qt_stage's group sums made in
 * its float4 pass (unit_sums). H100, 2026-12-06, Qwen3-30B-A3B dims 12 layers mlx4, decode after 512,
 * alternating: 1,052.7 / 1,049.2 / 1,055.6 -> 1,112.7 / 1,115.0 / 1,104.8 tok/s. */
static inline int qt_usum_mode(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QT_USUM", 1);
    return v;
}
/* qt_stage's norm pass: a thread's x loads issued QT_SB at a time before any is summed (a load
 * at a time waited an L2 round trip each: 8 in a row of 2048 columns) */
enum { QT_SB = 8 };
/* half2 from one staged row of K columns to the next: K / 2 and a pad making it 2 mod 32 (words),
 * so the hi and lo rows a decode's lanes read their B fragments from (8 bytes a lane, lane quads
 * 4·W words apart) fall in different banks; K / 2 + 4 (the first pad) put them 4 banks apart,
 * a lane's words then sharing banks with its neighbour's in the other row (ncu, 2026-12-03: 4-way
 * conflicts, half the shared wavefronts of the experts' gate+up). K / 2 is a multiple of 16. */
__host__ __device__ constexpr int qt_rs(int K) { return (K >> 1) + ((2 - (K >> 1) % 32 + 32) % 32); }
/* bits a code takes in memory */
__host__ __device__ constexpr int qt_cbits(int bits) { return bits == QT_E4M3 ? 8 : bits == QT_E2M1 ? 4 : bits; }
/* whether BITS' codes are nibbles (the 4-bit layout of the staged x) */
__host__ __device__ constexpr bool qt_nib(int bits) { return qt_cbits(bits) == 4; }
/* whether BITS has no bias term (so no group sums of x are staged) */
__host__ __device__ constexpr bool qt_nobias(int bits) { return bits == QT_E4M3 || bits == QT_E2M1; }
static const size_t QT_SMEM_MAX = 96 * 1024;   /* dynamic shared memory a launch may take */

/* ---- device pieces ------------------------------------------------------------------------- */

/* which word of a group's row (4W words) lane t's word w is. W = 8 (8-bit codes, groups of 128:
 * fp8's blocks): words 4t..4t+3 and 16 + 4t..16 + 4t + 3, so each of the lane's two 16-byte loads
 * reads, with the quad's other lanes, 64 whole bytes (two whole sectors) of the row; t·W + w would
 * have each load take half of four sectors. Otherwise the lane's W words in a row, t·W + w (a
 * quad's load: 16 bytes of a row for W = 1, 32 or 64 for W = 2 or 4). */
template <int W>
__host__ __device__ constexpr int qt_word(int t, int w) { return W == 8 ? (w >> 2) * 16 + 4 * t + (w & 3) : t * W + w; }

/* lane t's W words of a group's row (p: the row's group) */
template <int W>
__device__ __forceinline__ void qt_ldw(const uint32_t *p, int t, uint32_t *u) {
    if constexpr (W == 4 || W == 8) {
#pragma unroll
        for (int q = 0; q < W; q += 4) {
            const uint4 v = ld_nc_u4((const uint4 *)(p + qt_word<W>(t, q)));
            u[q] = v.x; u[q + 1] = v.y; u[q + 2] = v.z; u[q + 3] = v.w;
        }
    } else if constexpr (W == 2) {
        asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(p + 2 * t));
    } else {
        /* a quad reads 16 bytes, half a sector, of a row's group: the next group's half comes
         * with the next batch's load, so the sector stays in L1 for it (no L1::no_allocate) */
        asm("ld.global.nc.u32 %0, [%1];" : "=r"(u[0]) : "l"(p + t));
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

/* E2M1 codes (j, j + 4) of the word's nibbles, as qt_pair, as a half2 of the values times 2^-14:
 * the code's exponent and mantissa bits (2..0) put at f16 bits 11..9 and its sign at 15 make
 * the f16 2^(e-15)·(1 + m/2) for e > 0 and 2^-14·m/2 (subnormal) for e = 0, each the E2M1
 * value 2^(e-1)·(1 + m/2) or m/2 times 2^-14 exactly; the caller multiplies sums by 2^14 */
__device__ __forceinline__ unsigned qt_pair_e2m1(unsigned u) {
    return ((u << 9) & 0x0E000E00u) | ((u << 12) & 0x80008000u);
}

/* fp8 E4M3 codes (2p, 2p + 1) of the word's 4 bytes as a half2 (exact: every E4M3 value is an
 * f16; NaN stays NaN) */
__device__ __forceinline__ unsigned qt_pair_e4m3(unsigned u, int p) {
    unsigned r;
    const unsigned short v = (unsigned short)(u >> (16 * p));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
    return r;
}

/* the A fragment from one code word of rows g (r0) and g + 8 (r1): nibbles 0 and 4 (qt_pair's or
 * qt_pair_e2m1's half2) in a0 / a1, nibbles 1 and 5 in a2 / a3; the caller shifts the words right
 * by 8 for nibbles 2, 6 and 3, 7 */
template <int BITS>
__device__ __forceinline__ void qt_a_nib(unsigned r0, unsigned r1, unsigned &a0, unsigned &a1, unsigned &a2, unsigned &a3) {
    if constexpr (BITS == QT_E2M1) {
        a0 = qt_pair_e2m1(r0); a1 = qt_pair_e2m1(r1); a2 = qt_pair_e2m1(r0 >> 4); a3 = qt_pair_e2m1(r1 >> 4);
    } else {
        a0 = qt_pair(r0); a1 = qt_pair(r1); a2 = qt_pair(r0 >> 4); a3 = qt_pair(r1 >> 4);
    }
}

/* one staged pair (a, b) as its hi row's half2 (f16 of each, saturated) and its lo row's (the rest) */
__device__ __forceinline__ void qt_hilo(float a, float b, __half2 &hi, __half2 &lo) {
    hi = __floats2half2_rn(f16_sat(a), f16_sat(b));
    const float2 hf = __half22float2(hi);
    lo = __floats2half2_rn(f16_sat(a - hf.x), f16_sat(b - hf.y));
}

/* Stages ntok rows of K floats (row i at x + i·xs_stride) as the B operand: staged row 2i
 * (hi) and 2i + 1 (lo) of token i, rs = qt_rs(K) half2 apart. W: code words a lane
 * loads per group and row. 4-bit: half2 number ((G·4 + t)·W + w)·4 + p (group G, lane quad
 * position t, word w, pair p) holds columns (k0 + p, k0 + p + 4), k0 = 32W·G + 8(tW + w): the
 * columns of the codes qt_pair makes of lane t's word w. 8-bit: number ((G·4 + t)·W + w)·2 + p
 * holds (k0 + 2p, k0 + 2p + 1), k0 = 16W·G + 4·qt_word(t, w) (qt_pair8). xsum[i·ng + G]: Σ of group
 * G's f32 x (xsum NULL: none): each unit's columns in order, then a butterfly over the group's units,
 * whether x was read as float4s or not (unit_sums; else a warp a group: each lane's columns, then
 * a warp tree); a fixed order, the same for a row alone or in a batch, aligned or not. norm_w: x RMS-normed first;
 * xn_out (with norm_w): the normed rows [ntok, K] written there too. Ends with a barrier. */
template <int BITS, int W, bool ALIGNED = false>
__device__ void qt_stage(__half2 *xs, float *xsum, const float *x, int64_t xs_stride, int ntok, int K,
                         const float *norm_w = nullptr, float eps = 0.0f, float *xn_out = nullptr,
                         uint64_t *pm = nullptr, bool unit_sums = true) {
    /* pm: prof.cuh's slots for the end of the norm pass and of the pairs (a measuring build) */
    __shared__ float part[32][QT_MAX_TOK], nsc[QT_MAX_TOK];
    constexpr int PPG = qt_nib(BITS) ? 16 * W : 8 * W, GS = 2 * PPG;   /* pairs and columns a group */
    const int half = K >> 1, rs = qt_rs(K), ng = K / GS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (int)(blockDim.x >> 5);
    if (norm_w) {   /* RMSNorm of each row first (norm_matmul: xn is never written) */
        for (int tok = 0; tok < ntok; tok++) {
            const float *xr = x + tok * xs_stride;
            float ss = 0.0f;
            for (int c0 = threadIdx.x; c0 < K; c0 += QT_SB * blockDim.x) {   /* QT_SB loads, then their sums */
                float v[QT_SB];
#pragma unroll
                for (int u = 0; u < QT_SB; u++) {
                    const int c = c0 + u * (int)blockDim.x;
                    v[u] = c < K ? xr[c] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < QT_SB; u++)
                    if (c0 + u * (int)blockDim.x < K) ss = fmaf(v[u], v[u], ss);
            }
            ss = warp_sum(ss);
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
    CB_PROF_PM(pm, 0);
    /* the pairs a unit of consecutive columns makes: 4-bit, pairs 4u..4u + 3 = columns (8u + p,
     * 8u + p + 4) of [8u, 8u + 8); 8-bit, pairs 2u, 2u + 1 = the 4 columns of lane word u
     * (qt_pair8's (c, c + 1), (c + 2, c + 3)). Read as float4s where x, its row stride, the norm
     * weight and xn_out allow, else a pair at a time; the same arithmetic on each column. */
    constexpr int PU = qt_nib(BITS) ? 4 : 2, CU = 2 * PU;   /* pairs and columns a unit */
    constexpr int UPG = GS / CU;                               /* units a group: 4W, at most 32 */
    const bool vec = ALIGNED || ((((uintptr_t)x | (uintptr_t)norm_w | (uintptr_t)xn_out) & 15) | (xs_stride & 3)) == 0;
    if (vec) {
        /* a warp's lanes take consecutive units, the warp together (the group sums' shuffles): a
         * group's UPG units are lanes l0..l0 + UPG - 1 of one pass, l0 a multiple of UPG (a row's
         * units and the block's threads are multiples of UPG) */
        const int nu = half / PU, nt = ntok * nu;   /* units a row, in all */
        for (int ib = threadIdx.x - lane; ib < nt; ib += blockDim.x) {
            const int i = ib + lane < nt ? ib + lane : nt - 1;
            const int tok = i / nu, u = i - tok * nu;
            int c;   /* the unit's first column */
            if constexpr (qt_nib(BITS)) {
                c = CU * u;
            } else {
                const int G = u / (4 * W), q8 = u - G * 4 * W;
                c = GS * G + 4 * qt_word<W>(q8 / W, q8 % W);
            }
            float v[CU];
#pragma unroll
            for (int h = 0; h < CU; h += 4) {
                const float4 f = *(const float4 *)(x + tok * xs_stride + c + h);
                v[h] = f.x; v[h + 1] = f.y; v[h + 2] = f.z; v[h + 3] = f.w;
            }
            if (norm_w) {
#pragma unroll
                for (int h = 0; h < CU; h += 4) {
                    const float4 w = __ldg((const float4 *)(norm_w + c + h));
                    v[h] = v[h] * nsc[tok] * w.x; v[h + 1] = v[h + 1] * nsc[tok] * w.y;
                    v[h + 2] = v[h + 2] * nsc[tok] * w.z; v[h + 3] = v[h + 3] * nsc[tok] * w.w;
                    if (xn_out && ib + lane < nt) *(float4 *)(xn_out + (int64_t)tok * K + c + h) = make_float4(v[h], v[h + 1], v[h + 2], v[h + 3]);
                }
            }
            unsigned hw[PU], lw[PU];
#pragma unroll
            for (int p = 0; p < PU; p++) {
                __half2 hi, lo;
                qt_hilo(qt_nib(BITS) ? v[p] : v[2 * p], qt_nib(BITS) ? v[p + 4] : v[2 * p + 1], hi, lo);
                hw[p] = *(const unsigned *)&hi;
                lw[p] = *(const unsigned *)&lo;
            }
            if (xsum && unit_sums) {   /* group G = u / UPG's Σ x: the unit's columns in order, then a butterfly over its lanes */
                float gs = v[0];
#pragma unroll
                for (int h = 1; h < CU; h++) gs += v[h];
#pragma unroll
                for (int o = 1; o < UPG; o <<= 1) gs += __shfl_xor_sync(0xffffffffu, gs, o);
                if (ib + lane < nt && (lane & (UPG - 1)) == 0) xsum[tok * ng + u / UPG] = gs;
            }
            if (ib + lane >= nt) continue;
            /* 8-byte stores: the lo row starts 8 bytes past a 16-byte boundary (qt_rs) */
            uint2 *dh = (uint2 *)(xs + 2 * tok * rs + PU * u), *dl = (uint2 *)(xs + (2 * tok + 1) * rs + PU * u);
#pragma unroll
            for (int p = 0; p < PU; p += 2) {
                dh[p / 2] = make_uint2(hw[p], hw[p + 1]);
                dl[p / 2] = make_uint2(lw[p], lw[p + 1]);
            }
        }
    } else if constexpr (!ALIGNED) {
        for (int i = threadIdx.x; i < ntok * half; i += blockDim.x) {
            const int tok = i / half, j = i - tok * half;
            const int G = j / PPG, rem = j - G * PPG;
            const int q8 = rem >> 1;   /* 8-bit: the lane word tW + w the pair belongs to */
            const int ka = qt_nib(BITS) ? GS * G + 8 * (rem >> 2) + (rem & 3)
                                        : GS * G + 4 * qt_word<W>(q8 / W, q8 % W) + 2 * (rem & 1);
            const int kb = qt_nib(BITS) ? ka + 4 : ka + 1;
            const float *xr = x + tok * xs_stride;
            float a = xr[ka], b = xr[kb];
            if (norm_w) {
                a = a * nsc[tok] * __ldg(norm_w + ka);
                b = b * nsc[tok] * __ldg(norm_w + kb);
                if (xn_out) {   /* the normed rows kept (each column is in exactly one pair) */
                    xn_out[(int64_t)tok * K + ka] = a;
                    xn_out[(int64_t)tok * K + kb] = b;
                }
            }
            qt_hilo(a, b, xs[2 * tok * rs + j], xs[(2 * tok + 1) * rs + j]);
        }
    }
    CB_PROF_PM(pm, 1);
    if constexpr (!ALIGNED) {
        if (xsum && unit_sums && !vec) {   /* the float4 form's sums, in its order (the same bits), a warp 32 / UPG groups */
            const int nit = ntok * ng, ul = lane % UPG;
            for (int ib = warp * (32 / UPG); ib < nit; ib += nw * (32 / UPG)) {
                const int it = ib + lane / UPG, itc = it < nit ? it : nit - 1;
                const int tok = itc / ng, G = itc - tok * ng;
                const int c = qt_nib(BITS) ? GS * G + CU * ul : GS * G + 4 * qt_word<W>(ul / W, ul % W);
                const float *xr = x + tok * xs_stride;
                float gs = 0.0f;
#pragma unroll
                for (int h = 0; h < CU; h++) {
                    float v = xr[c + h];
                    if (norm_w) v = v * nsc[tok] * __ldg(norm_w + c + h);
                    gs = h ? gs + v : v;
                }
#pragma unroll
                for (int o = 1; o < UPG; o <<= 1) gs += __shfl_xor_sync(0xffffffffu, gs, o);
                if (it < nit && ul == 0) xsum[it] = gs;
            }
        }
    }
    for (int it = warp; xsum && !unit_sums && it < ntok * ng; it += nw) {   /* fp8: no biases, no sums */
        const int tok = it / ng, G = it - tok * ng;
        const float *xr = x + tok * xs_stride + GS * G;
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < GS / 32; q++) {
            float v = xr[32 * q + lane];
            if (norm_w) v = v * nsc[tok] * __ldg(norm_w + GS * G + 32 * q + lane);
            s += v;
        }
        s = warp_sum(s);
        if (lane == 0) xsum[it] = s;
    }
    __syncthreads();
}

/* one lane's rows of NTL tiles: codes, scale and bias of rows g (h = 0) and g + 8 (h = 1); and,
 * for affine codes with 16-bit params (pv, qt_pv_set), the lane's param window: lane t of a quad
 * keeps one of the quad's four param rows (t = 0: scales of row g, 1: biases of row g, 2, 3: those
 * of row g + 8; pwp) for 4 groups [4v, 4v + 4) in one 8-byte copy, and a group's four values reach
 * the quad by shuffles (qt_pw_get). Each lane loading its own 2-byte params a group (4 loads a
 * group, each touching 8 rows' sectors for 16 bytes) made 2/3 of a 4-bit GEMV's L1 sector requests.
 * The windows go by cp.async into the warp's slots in shared memory (pws: slot v & 1, the next
 * window copied while the last groups of this one are multiplied; qt_pw_bytes a warp), waited for
 * where a window's first group is applied (qt_apply): kept in registers, their slot chosen at run
 * time, they lived in local memory, and storing a just-loaded window there stalled the warp a DRAM
 * round trip at every window (ptxas: a 72-byte stack frame; prof.cuh's marks, bench/RESULTS.md,
 * 2026-12-06). */
template <int NTL>
struct qt_rows {
    const uint32_t *c[NTL][2];
    const char *s[NTL][2], *b[NTL][2];
    const char *pwp[NTL];   /* this lane's param row of each tile (the window's source) */
    uint2 *pws;             /* the warp's window slots: [2][NTL][32] */
    int gb, pw_last;        /* the first group; the first group of the last window copied */
    bool pv;
};
/* shared bytes of a warp's window slots */
__host__ __device__ constexpr int qt_pw_bytes(int ntl) { return 2 * ntl * 32 * 8; }

/* whether the tiles' params take the window (call after qt_row_ptrs, before the first qt_load at
 * gb): the launch lets them (pv, qt_pv_mode), affine codes, f16 / bf16 params (sd 1 / 2), 4 groups a
 * row or a multiple (an aligned window never leaves its row) and every param row 8-byte aligned (row
 * starts are ng·2 bytes apart: the first row's tells); pws: the warp's slots */
template <int BITS, int NTL>
__device__ __forceinline__ void qt_pv_set(qt_rows<NTL> &R, int pv, int sd, int ng, int gb, uint2 *pws, int t) {
    bool ok = pv && !qt_nobias(BITS) && (sd == 1 || sd == 2) && (ng & 3) == 0;
#pragma unroll
    for (int i = 0; i < NTL; i++) {
        ok = ok && (((uintptr_t)R.s[i][0] | (uintptr_t)R.b[i][0]) & 7) == 0;
        const char *p0 = t & 1 ? R.b[i][0] : R.s[i][0], *p1 = t & 1 ? R.b[i][1] : R.s[i][1];
        R.pwp[i] = t >> 1 ? p1 : p0;
    }
    R.pv = ok;
    R.pws = pws;
    R.gb = gb;
    R.pw_last = -1;
}

/* the window of group G (this lane's copies, one cp.async group; see qt_rows) */
template <int NTL>
__device__ __forceinline__ void qt_pw_load(qt_rows<NTL> &R, int G) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < NTL; i++) {
        const char *p = R.pwp[i] + (int64_t)(G & ~3) * 2;
        cb_cp8(R.pws + (((G >> 2) & 1) * NTL + i) * 32 + lane, p);
    }
    cb_cp_commit();
    R.pw_last = G;
}

/* before group G's params are read: its window copied (a newer one may still be in flight) */
template <int NTL>
__device__ __forceinline__ void qt_pw_wait(const qt_rows<NTL> &R, int G) {
    if (G != R.gb && (G & 3)) return;
    if (R.pw_last > G) cb_cp_wait<1>();
    else cb_cp_wait<0>();
}

/* tile i's params of group G from the quad's windows: scale and bias of rows g (s0, b0), g + 8 */
template <int NTL>
__device__ __forceinline__ void qt_pw_get(const qt_rows<NTL> &R, int i, int G, int sd, float &s0, float &b0, float &s1,
                                          float &b1) {
    const uint2 w = R.pws[(((G >> 2) & 1) * NTL + i) * 32 + (threadIdx.x & 31)];
    const unsigned v = ((G & 2) ? w.y : w.x) >> (16 * (G & 1)) & 0xffffu;
    const float f = sd == 2 ? __uint_as_float(v << 16) : __half2float(__ushort_as_half((unsigned short)v));
    s0 = __shfl_sync(0xffffffffu, f, 0, 4);
    b0 = __shfl_sync(0xffffffffu, f, 1, 4);
    s1 = __shfl_sync(0xffffffffu, f, 2, 4);
    b1 = __shfl_sync(0xffffffffu, f, 3, 4);
}

/* the loads of one batch of U groups starting at G0 (groups >= ge not loaded) */
template <int W, int NTL, int U>
struct qt_buf {
    uint32_t w[U][NTL][2][W];
    float s[U][NTL][2], b[U][NTL][2];
};

/* pair (W = 1, batches of 2 groups): lane t loads words 2t and 2t + 1 of the two groups' 8 words
 * of a row in one 8-byte load (a quad: the row's whole 32-byte sector), into w[0] and w[1];
 * qt_compute then keeps the groups apart by mma with the B fragment of the other group's lanes
 * zeroed (lanes 0, 1 hold group G0, lanes 2, 3 group G0 + 1). A batch of one group (a warp's
 * odd last) is loaded as without pair. */
template <int BITS, int W, int NTL, int U>
__device__ __forceinline__ void qt_load(qt_buf<W, NTL, U> &B, qt_rows<NTL> &R, int sd, int t, int G0, int gb, int ge,
                                        int pair) {
    const bool pv = !qt_nobias(BITS) && R.pv;   /* params from the window (qt_rows), not B's */
    if (pv) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int G = G0 + u;
            if (G < ge && (G == gb || (G & 3) == 0)) qt_pw_load<NTL>(R, G);
        }
    }
    if constexpr (W == 1 && U == 2) {
        if (pair && G0 + 1 < ge) {
#pragma unroll
            for (int i = 0; i < NTL; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(B.w[0][i][h][0]), "=r"(B.w[1][i][h][0])
                        : "l"(R.c[i][h] + G0 * 4 + 2 * t));
                    if (BITS != QT_E2M1 && !pv) {
                        B.s[0][i][h] = q_param(R.s[i][h], sd, G0);
                        B.s[1][i][h] = q_param(R.s[i][h], sd, G0 + 1);
                        if constexpr (!qt_nobias(BITS)) {
                            B.b[0][i][h] = q_param(R.b[i][h], sd, G0);
                            B.b[1][i][h] = q_param(R.b[i][h], sd, G0 + 1);
                        }
                    }
                }
        }
    }
    if constexpr (BITS == QT_E2M1 && U == 2) {
        /* mxfp4: both groups' E8M0 scales of a row in one 2-byte load where they are aligned
         * (a row's scales start at an even byte when a row has an even number of groups) */
        if (G0 + 1 < ge) {
#pragma unroll
            for (int i = 0; i < NTL; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (!pair) {
                        qt_ldw<W>(R.c[i][h] + G0 * 4 * W, t, B.w[0][i][h]);
                        qt_ldw<W>(R.c[i][h] + (G0 + 1) * 4 * W, t, B.w[1][i][h]);
                    }
                    const unsigned char *sp = (const unsigned char *)R.s[i][h] + G0;
                    unsigned e0, e1;
                    if (((uintptr_t)sp & 1) == 0) {
                        const unsigned v = __ldg((const unsigned short *)sp);
                        e0 = v & 255u; e1 = v >> 8;
                    } else {
                        e0 = __ldg(sp); e1 = __ldg(sp + 1);
                    }
                    B.s[0][i][h] = q_e8m0(e0);
                    B.s[1][i][h] = q_e8m0(e1);
                }
            return;
        }
    }
    if constexpr (W == 1 && U == 2)
        if (pair && G0 + 1 < ge) return;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int G = G0 + u;
        if (G >= ge) break;
#pragma unroll
        for (int i = 0; i < NTL; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                qt_ldw<W>(R.c[i][h] + G * 4 * W, t, B.w[u][i][h]);
                if constexpr (BITS == QT_E4M3) {   /* fp8's E8M0 scales: 255 is NaN (gemv.cu's scale_at), not MLX's inf */
                    B.s[u][i][h] = sd == 3 && __ldg((const unsigned char *)R.s[i][h] + G) == 255 ? __int_as_float(0x7fc00000)
                                                                                                 : q_param(R.s[i][h], sd, G);
                } else if constexpr (BITS == QT_E2M1) {   /* mxfp4: an E8M0 scale a group, no bias (q_param's) */
                    B.s[u][i][h] = q_param(R.s[i][h], sd, G);
                } else if (!pv) {
                    B.s[u][i][h] = q_param(R.s[i][h], sd, G);
                    B.b[u][i][h] = q_param(R.b[i][h], sd, G);
                }
            }
    }
}

/* acc += the group's sums c (tile i, B set nb) in f32: scale (and bias · Σx) of load slot u */
template <int BITS, int W, int NTL, int U, int NB>
__device__ __forceinline__ void qt_apply(const qt_buf<W, NTL, U> &B, const qt_rows<NTL> &R, int sd, int u,
                                         const float (*c)[NB][4], const float *const *xsum, int G, float (*acc)[4]) {
    float ps[NTL][2], pb[NTL][2];   /* the group's scales and biases, rows g and g + 8 */
    if constexpr (!qt_nobias(BITS)) {
        if (R.pv) qt_pw_wait<NTL>(R, G);
#pragma unroll
        for (int i = 0; i < NTL; i++) {
            if (R.pv) {
                qt_pw_get<NTL>(R, i, G, sd, ps[i][0], pb[i][0], ps[i][1], pb[i][1]);
            } else {
                ps[i][0] = B.s[u][i][0]; ps[i][1] = B.s[u][i][1];
                pb[i][0] = B.b[u][i][0]; pb[i][1] = B.b[u][i][1];
            }
        }
    }
#pragma unroll
    for (int nb = 0; nb < NB; nb++) {
        if constexpr (BITS == QT_E2M1) {   /* the group's scale on the sum times 2^14 (qt_pair_e2m1), no bias */
#pragma unroll
            for (int i = 0; i < NTL; i++) {
                acc[i][2 * nb] = fmaf(B.s[u][i][0], (c[i][nb][0] + c[i][nb][1]) * 16384.0f, acc[i][2 * nb]);
                acc[i][2 * nb + 1] = fmaf(B.s[u][i][1], (c[i][nb][2] + c[i][nb][3]) * 16384.0f, acc[i][2 * nb + 1]);
            }
            continue;
        }
        if constexpr (BITS == QT_E4M3) {   /* the block's scale, no bias */
#pragma unroll
            for (int i = 0; i < NTL; i++) {
                acc[i][2 * nb] = fmaf(B.s[u][i][0], c[i][nb][0] + c[i][nb][1], acc[i][2 * nb]);
                acc[i][2 * nb + 1] = fmaf(B.s[u][i][1], c[i][nb][2] + c[i][nb][3], acc[i][2 * nb + 1]);
            }
            continue;
        }
        const float X = xsum[nb][G];
#pragma unroll
        for (int i = 0; i < NTL; i++) {
            acc[i][2 * nb] = fmaf(ps[i][0], c[i][nb][0] + c[i][nb][1], fmaf(pb[i][0], X, acc[i][2 * nb]));
            acc[i][2 * nb + 1] = fmaf(ps[i][1], c[i][nb][2] + c[i][nb][3], fmaf(pb[i][1], X, acc[i][2 * nb + 1]));
        }
    }
}

/* acc[i][2nb + h] += the batch's groups for tile i, rows g (h = 0) and g + 8 (h = 1), token
 * 4nb + t: c = mma of the tile's codes with the staged x (B set nb: this quad's staged row
 * xq[nb], columns hi / lo of tokens 4nb..4nb+3), then s·(c_hi + c_lo) + b·Σx with Σx from
 * xsum[nb] (the lane's token's) */
template <int BITS, int W, int NTL, int U, int NB>
__device__ __forceinline__ void qt_compute(const qt_buf<W, NTL, U> &B, const qt_rows<NTL> &R, int sd,
                                           const __half2 *const *xq, const float *const *xsum, int t, int G0, int ge,
                                           float (*acc)[4], int pair) {
    if constexpr (W == 1 && U == 2 && BITS != 8 && BITS != QT_E4M3) {
        if (pair && G0 + 1 < ge) {   /* qt_load's pair: words 2t, 2t + 1 of groups G0, G0 + 1 */
            float c0[NTL][NB][4], c1[NTL][NB][4];
#pragma unroll
            for (int i = 0; i < NTL; i++)
#pragma unroll
                for (int nb = 0; nb < NB; nb++)
#pragma unroll
                    for (int j = 0; j < 4; j++) c0[i][nb][j] = c1[i][nb][j] = 0.0f;
#pragma unroll
            for (int w = 0; w < 2; w++) {
                /* the staged x of lane t's word w: group-word (2t + w) % 4 of group G0 + (2t + w) / 4,
                 * i.e. staged lane word G0·4 + 2t + w */
                const int off = (G0 * 4 + 2 * t + w) * 4;
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    uint2 b0[NB], b1[NB];   /* B of group G0 (lanes 0, 1) and of G0 + 1 (lanes 2, 3) */
#pragma unroll
                    for (int nb = 0; nb < NB; nb++) {
                        const uint2 bx = *(const uint2 *)(xq[nb] + off + 2 * hh);
                        b0[nb] = t < 2 ? bx : make_uint2(0u, 0u);
                        b1[nb] = t < 2 ? make_uint2(0u, 0u) : bx;
                    }
#pragma unroll
                    for (int i = 0; i < NTL; i++) {
                        const unsigned r0 = B.w[w][i][0][0] >> (8 * hh), r1 = B.w[w][i][1][0] >> (8 * hh);
                        unsigned a0, a1, a2, a3;
                        qt_a_nib<BITS>(r0, r1, a0, a1, a2, a3);
#pragma unroll
                        for (int nb = 0; nb < NB; nb++) {
                            cb_mma_f16(c0[i][nb], a0, a1, a2, a3, b0[nb].x, b0[nb].y);
                            cb_mma_f16(c1[i][nb], a0, a1, a2, a3, b1[nb].x, b1[nb].y);
                        }
                    }
                }
            }
            qt_apply<BITS, W, NTL, U, NB>(B, R, sd, 0, c0, xsum, G0, acc);
            qt_apply<BITS, W, NTL, U, NB>(B, R, sd, 1, c1, xsum, G0 + 1, acc);
            return;
        }
    }
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
            if constexpr (BITS == 8 || BITS == QT_E4M3) {   /* a word: 4 codes, one mma */
                uint2 bx[NB];
#pragma unroll
                for (int nb = 0; nb < NB; nb++) bx[nb] = *(const uint2 *)(xq[nb] + ((G * 4 + t) * W + w) * 2);
#pragma unroll
                for (int i = 0; i < NTL; i++) {
                    const unsigned r0 = B.w[u][i][0][w], r1 = B.w[u][i][1][w];
                    unsigned a0, a1, a2, a3;
                    if constexpr (BITS == QT_E4M3) {
                        a0 = qt_pair_e4m3(r0, 0); a1 = qt_pair_e4m3(r1, 0); a2 = qt_pair_e4m3(r0, 1); a3 = qt_pair_e4m3(r1, 1);
                    } else {
                        a0 = qt_pair8(r0, 0x4140); a1 = qt_pair8(r1, 0x4140); a2 = qt_pair8(r0, 0x4342); a3 = qt_pair8(r1, 0x4342);
                    }
#pragma unroll
                    for (int nb = 0; nb < NB; nb++) cb_mma_f16(c[i][nb], a0, a1, a2, a3, bx[nb].x, bx[nb].y);
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
                    unsigned a0, a1, a2, a3;
                    qt_a_nib<BITS>(r0, r1, a0, a1, a2, a3);
#pragma unroll
                    for (int nb = 0; nb < NB; nb++) cb_mma_f16(c[i][nb], a0, a1, a2, a3, bx[nb].x, bx[nb].y);
                }
            }
        }
        qt_apply<BITS, W, NTL, U, NB>(B, R, sd, u, c, xsum, G, acc);
    }
}

/* groups a lane loads per batch: 8 bytes of each row (16 for groups of 128), two batches in
 * flight */
template <int W>
__host__ __device__ constexpr int qt_u() { return W == 1 ? 2 : 1; }

/* acc += this lane's sums of NTL tiles over groups [gb, ge), double-buffered; A holds the loads
 * of the first batch (qt_load at gb: issued by the caller, before the staging of x) */
template <int BITS, int W, int NTL, int NB, int U>
__device__ __forceinline__ void qt_tile(qt_buf<W, NTL, U> &A, qt_rows<NTL> &R, int sd, int gb, int ge,
                                        const __half2 *const *xq, const float *const *xsum, int t, float (*acc)[4],
                                        int pair) {
    qt_buf<W, NTL, U> B;
    for (int G0 = gb; G0 < ge; G0 += 2 * U) {
        if (G0 + U < ge) qt_load<BITS, W, NTL, U>(B, R, sd, t, G0 + U, gb, ge, pair);
        qt_compute<BITS, W, NTL, U, NB>(A, R, sd, xq, xsum, t, G0, ge, acc, pair);
        if (G0 + U >= ge) break;
        if (G0 + 2 * U < ge) qt_load<BITS, W, NTL, U>(A, R, sd, t, G0 + 2 * U, gb, ge, pair);
        qt_compute<BITS, W, NTL, U, NB>(B, R, sd, xq, xsum, t, G0 + U, ge, acc, pair);
    }
}

/* lane's rows of a matrix (codes at codes, K·bits / 32 words a row): rows r0 + g and r0 + g + 8,
 * clamped to rows - 1 (their sums are not written); their params (ng a row, es bytes each) from
 * sp / bp at param row (srow0 + r) / rblk: MLX keeps a param row per weight row (rblk 1), fp8 a
 * scale row per 128-row block (rblk 128, bp unused) */
__device__ __forceinline__ void qt_row_ptrs(const uint8_t *codes, const char *sp, const char *bp, int64_t srow0,
                                            int rblk, int64_t rows, int bits, int K, int ng, int es, int64_t r0, int g,
                                            const uint32_t **c, const char **s, const char **b) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int64_t r = r0 + g + 8 * h;
        if (r >= rows) r = rows - 1;
        c[h] = (const uint32_t *)codes + r * (K >> 3) * (bits >> 2);
        const int64_t pr = rblk == 1 ? srow0 + r : (srow0 + r) / rblk;
        s[h] = sp + pr * ng * es;
        b[h] = bp ? bp + pr * ng * es : nullptr;
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

/* ---- host side ---------------------------------------------------------------------------- */

/* warps a tile's groups are split over: 1, 2, .. nw (a block's warps), doubled while the
 * launch's warps still fit one wave (16 warps an SM: the kernels' launch bounds) and each
 * warp keeps 2 groups or more. A function of the shape only (never of the token rows).
 * Measured on the H200 (2026-12-02, mlx4 Qwen3-30B-A3B dims, 12 layers, decode after 512,
 * alternating, 2 rounds, bench/device_runs/2026-12-02f-qmma5.sh, in a build that also held a
 * second prefetch buffer across the staging, since removed: no faster, 13 more registers): at
 * least 2 groups a warp 891.4 / 897.8 tok/s, 1 group 893.3 / 898.7, 4 groups 863.9 / 872.3
 * (small matrices such as the router split further); the experts' gate+up split 8 or 2 ways
 * instead of the rule's 4: 813.5 / 814.5, 812.8 / 816.0.
 * mg: the groups a warp keeps at least (2; fp8's dense launches 1, qt_fp8_g1: a 128-column fp8
 * group is 128 bytes of a row, four times a 4-bit group of 64's bytes). */
static inline int qt_ks(int64_t warp_tiles, int ng, int sm_count, int nw, int mg = 2) {
    int ks = 1;
    while (ks < nw && warp_tiles * ks * 2 <= (int64_t)sm_count * 16 && ng >= 2 * mg * ks) ks *= 2;
    return ks;
}

/* CINFER_CUDA_QT_W1PAIR (default 1; 0: a group a load): the pair loads of W = 1 codes (MLX 4-bit
 * groups of 32, mxfp4), qt_load's pair */
static inline int qt_w1pair(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QT_W1PAIR", 1);
    return v;
}

/* CINFER_CUDA_QT_PV (default 1; 0: never): the param window of qt_rows. Measured on the H200
 * (2026-12-04, mlx4 Qwen3-30B-A3B dims, 12 layers, decode after 512, alternating): 970.8 / 963.7 /
 * 966.9 tok/s against 951.6 / 943.0 / 936.1 for the lib without it (6e0234c); the layers' kernels
 * 0.1-1.0 us faster each (gate+up 18.3 -> 17.3 us, q/k/v 15.0 -> 14.3, o 11.6 -> 10.9), the head
 * slower (84 -> 95 us: a launch of 9,496 tiles, one warp over all 32 groups). Only the window on
 * the small launches (ks > 1) was slower still (936.7-962.3): with the switch compiled in, the
 * head without the window took 107 us (ncu per-step tables, bench/device_runs/2026-12-04u, v). */
static inline int qt_pv_mode(void) {
    static const int v = cb_env_switch("CINFER_CUDA_QT_PV", 1);
    return v;
}

/* a kernel's opt-in to QT_SMEM_MAX bytes of dynamic shared memory, asked the first time it is
 * launched (before qt_grid's occupancy question, which depends on it) */
static inline void qt_optin(const void *kernel) {
    static const void *seen[64];
    static int n_seen;
    for (int i = 0; i < n_seen; i++)
        if (seen[i] == kernel) return;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)QT_SMEM_MAX);
    if (n_seen < 64) seen[n_seen++] = kernel;
}

/* blocks: want, at most what is resident at once (blocks loop over their tiles); the
 * occupancy of a (kernel, shared bytes) asked once */
static inline int qt_grid(const void *kernel, int threads, size_t smem, int sm_count, int64_t want) {
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
#endif
