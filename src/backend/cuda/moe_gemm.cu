/* moe_gemm.cu — the routed experts of many token rows (prefill) on tensor cores: a grouped
 * GEMM over the experts, with the expert ids kept on the device.
 *
 * Pipeline (five launches, no host synchronisation, no host loop over experts):
 *   1. convert   x [n, X] f32 -> xb [n, X] in the weights' type (bf16 / f16), rounded to
 *                nearest as cb_gemm rounds activations for cuBLAS (cb_convert).
 *   2. sort      one block of 1024 threads: counts the n·K (token, slot) entries per expert
 *                (shared-memory atomics), scans the counts and the row tiles per expert
 *                (ceil(count / TM)), and places every entry in its expert's segment:
 *                off[E + 1] (segment starts), toff[E + 1] (first row tile of each expert),
 *                rent[n·K] (the entry t·K + k of each sorted row), epos[n·K] (the sorted row
 *                of each entry; -1 for an id outside [0, E): that slot adds nothing). The
 *                order inside a segment comes from atomics and may change from run to run;
 *                nothing depends on it (below).
 *   3. GEMM 1    gated experts: for each (row tile of an expert's segment, tile of TN / 2 =
 *                64 columns of inter): G = A·Wgᵀ and U = A·Wuᵀ in one block (the B tile is
 *                64 gate rows then the same 64 up rows), A's rows read straight from xb
 *                through rent (no gathered copy), f32 accumulation; epilogue h = silu(g) · u
 *                (with act_limit L > 0: silu(min(g, L)) · clamp(u, -L, L)), rounded to the
 *                weight type into H [n·K, I] (sorted rows).
 *                relu² experts (ci_moe.relu2, Nemotron-H: no gate matrices, their table
 *                entries NULL and never read): tiles of TN = 128 columns of inter, U =
 *                A·Wuᵀ (the B tile is 128 up rows, A as above), epilogue h = relu(u)² of the
 *                f32 product (moe_act's relu² branch, as the CPU's relu2), rounded to the
 *                weight type into H. Same kernel template (mode MG_UP_RELU2): the tiles,
 *                loads and MMAs of GEMM 2, the A rows and the 16-bit store of the gated mode.
 *   4. GEMM 2    Y = H_seg · Wdᵀ, tiles of TM rows x TN = 128 columns of hidden, f32 into
 *                Y [n·K, X] (sorted rows).
 *   5. combine   out[t] = Σ_k w[t, k] · Y[epos[t·K + k]], summed in k order.
 *   The GEMM grids are (column tiles, an upper bound of the row tiles): Σ_e ceil(c_e / TM)
 *   <= ceil(n·K / TM) + min(E, n·K). A block finds its expert by a binary search of toff
 *   (the largest e with toff[e] <= tile: empty experts have toff[e] == toff[e + 1]); blocks
 *   past toff[E] return at once.
 *
 * Determinism: a row of a tile is one token's data times the weights with a fixed K-loop
 * (tiles of BK, 16-deep MMA steps in order), so its result does not depend on which rows
 * share the tile or on their order; the combine sums in k order. Same inputs, same bits.
 *
 * GEMM tiles (both GEMMs, one kernel template, three modes): TM = 64 rows x TN = 128 B
 * rows (output columns; gated GEMM 1: 64 gate + 64 up) x BK = 64 of the reduction, 128
 * threads = 4 warps as 2 (rows) x 2 (columns), each warp 32 rows x 64 B rows = 2 x 8
 * mma.sync m16n8k16 tiles (bf16 / f16 operands from shared memory by ldmatrix, f32
 * accumulation in registers). In gated GEMM 1 a warp's 64 B rows are 32 gate rows and the
 * 32 up rows of the same output columns, so the SwiGLU epilogue pairs g and u in registers
 * and stores h directly; relu² GEMM 1 squares each u in registers and stores h (GEMM 2
 * stores f32 pairs). Warps whose 32 rows are all past the segment's end skip the MMAs
 * (segments average ~32 rows for Qwen3-30B-A3B at n = 512). The MG_*_TUNE macros (TM,
 * warps along columns, BK, stages, register cap, MMA = 0: a WMMA build with the epilogue
 * through shared memory) exist for side-by-side builds; the defaults are the best
 * measured.
 *   Shared memory: STAGES = 2 cp.async stages (the copy of step k + 1 runs under the
 *   MMAs of step k) of A [64][BK + 8] and B [128][BK + 8] 16-bit elements (rows padded by
 *   16 bytes: the 8 rows of each 16-byte-per-lane fragment load land on distinct banks;
 *   the row stride, 144 bytes, keeps every 16-row fragment 32-byte aligned as WMMA
 *   wants): 2 · (64 + 128) · 72 · 2 = 55,296 bytes (opted in with cudaFuncSetAttribute;
 *   the WMMA build reuses it for an f32 C tile [64][128 + 4] = 33,792 bytes). Registers:
 *   capped at 128 (__launch_bounds__(128, 4)), so 4 blocks (16 warps) fit an SM by both
 *   registers and shared memory; ptxas -v: 128 registers, the down-projection
 *   instantiations spill 8 bytes (a stack slot), the gate/up and relu² up ones none.
 *   Loads: each thread copies 4 A chunks and 8 B chunks of 16 bytes per stage
 *   (cp.async.cg, L2 only); chunks past the segment's rows, past N or past the reduction
 *   length are zero-filled (src-size 0), so no odd size reads out of bounds.
 *   Shapes, Qwen3-30B-A3B (X = 2048, I = 768, E = 128, K = 8), n = 512: GEMM 1 grid
 *   12 x (64 + 128) with ~128 x 12 working blocks, 32 reduction steps; GEMM 2 grid
 *   16 x 192, 12 reduction steps.
 *   Measured on the H200 (2026-12-01, a standalone harness against a double-precision
 *   reference; all 128 experts active, 1.2 GB of bf16 weights; whole call, median of 15):
 *   n = 128 0.35 ms (3.5 TB/s of weights), n = 512 0.385 ms (3.1 TB/s), n = 2048 0.89 ms
 *   (174 TFLOP/s: there the MMAs, not the weight stream, bound it). Side by side (WMMA
 *   builds): BK 64 / 2 stages 0.35 / 0.40 / 0.97 ms; BK 32 / 3 stages 0.50 / 0.55 / 1.05;
 *   BK 64 / 3 stages 0.36 / 0.42 / 1.09; BK 128 / 2 stages 0.37 / 0.43 / 1.12; no
 *   register cap 0.40 / 0.45 / 1.01; TM 128 or 8 warps a block were slower everywhere
 *   (occupancy, not load depth, is what paid). mma.sync and WMMA gave the same bits.
 * Odd sizes: X and I must be multiples of 8 (16-byte chunks; a partial last BK tile is
 * zero-filled), the expert matrices 16-byte aligned, E <= 1024, top_k >= 1; anything else
 * (and f32 tables) is refused by cb_moe_grouped_ok, and moe.cu loops its GEMVs. Gated and
 * relu² layers are both taken. MLX-quantized gated layers of 4 / 8 bits come as their codes
 * (mode QB of the kernel: a thread decodes a B tile row to f16 in registers, loaded before the
 * MMAs of the slice before and stored after them; cb_moe_grouped_q), fp8 ones the same way
 * (QB = 1; CINFER_CUDA_FP8_GEMM=0 widens them instead), others as f16 tables
 * widened by moe.cu / quant_moe.cu, unless too big to widen (relu² ones not: f16 would cap
 * h = relu(u)² at 65504; see cb_moe_grouped_fp8_ok). M and N tails
 * are predicated (zero-filled loads, masked stores).
 *
 * Scratch (grow-only, cb->moe_work): [0] off | toff | epos | rent (ints), [1] xb, [2] H,
 * [3] Y. */
#include "cuda_internal.h"
#include "loaders.cuh"
#include "quant.cuh"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>
#include <string.h>

#ifndef MG_TM_TUNE
#define MG_TM_TUNE 64
#endif
#ifndef MG_WN_TUNE
#define MG_WN_TUNE 2
#endif
#ifndef MG_BK_TUNE
#define MG_BK_TUNE 64
#endif
#ifndef MG_STAGES_TUNE
#define MG_STAGES_TUNE 2
#endif
#ifndef MG_MMA_TUNE
#define MG_MMA_TUNE 1                     /* 1: mma.sync + ldmatrix, 0: WMMA */
#endif
#ifndef MG_MINB_TUNE
#define MG_MINB_TUNE 4                    /* blocks per SM the register budget is set for */
#endif
enum {
    MG_TM = MG_TM_TUNE, MG_TN = 128, MG_BK = MG_BK_TUNE, MG_STAGES = MG_STAGES_TUNE,
    MG_WM = MG_TM / 32, MG_WN = MG_WN_TUNE,  /* warps along rows (32 each) and columns */
    MG_WCOL = MG_TN / MG_WN, MG_JF = MG_WCOL / 16, /* a warp's columns, its 16-wide fragments */
    MG_NT = MG_WCOL / 8,                  /* its n8 tiles (mma.sync) */
    MG_THREADS = 32 * MG_WM * MG_WN,
    MG_CPR = MG_BK / 8,                   /* 16-byte chunks per tile row */
    MG_RPP = MG_THREADS / MG_CPR,         /* tile rows one pass of the threads copies */
    MG_APASS = MG_TM / MG_RPP, MG_BPASS = MG_TN / MG_RPP,
    MG_LDS = MG_BK + 8,                   /* shared row stride of the A / B tiles (elements) */
    MG_LDC = MG_TN + 4,                   /* shared row stride of the f32 C tile */
    MG_SORT_THREADS = 1024, MG_MAX_E = 1024
};
static_assert(MG_TM % MG_RPP == 0 && MG_TN % MG_RPP == 0 && MG_BK % 16 == 0, "tile shapes");
static constexpr size_t MG_PIPE_BYTES = (size_t)MG_STAGES * (MG_TM + MG_TN) * MG_LDS * 2;
static constexpr size_t MG_C_BYTES = (size_t)MG_TM * MG_LDC * 4;
static constexpr size_t MG_SMEM = MG_PIPE_BYTES > MG_C_BYTES ? MG_PIPE_BYTES : MG_C_BYTES;

/* ---- 2. sort the entries by expert ---- */
__global__ void __launch_bounds__(MG_SORT_THREADS) moe_sort_kernel(int *off, int *toff, int *epos, int *rent,
                                                                   const int32_t *sel, int nK, int E) {
    pdl_enter();
    __shared__ int cnt[MG_MAX_E];
    __shared__ int wsum[2][32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int e = tid; e < E; e += MG_SORT_THREADS) cnt[e] = 0;
    __syncthreads();
    for (int i = tid; i < nK; i += MG_SORT_THREADS) {
        const int e = sel[i];
        if (e >= 0 && e < E) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    /* block-wide inclusive scan of (count, tiles) of expert tid (E <= 1024 = the threads) */
    const int c = tid < E ? cnt[tid] : 0, tl = (c + MG_TM - 1) / MG_TM;
    int sc = c, st = tl;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int a = __shfl_up_sync(0xffffffffu, sc, o), b = __shfl_up_sync(0xffffffffu, st, o);
        if (lane >= o) { sc += a; st += b; }
    }
    if (lane == 31) { wsum[0][warp] = sc; wsum[1][warp] = st; }
    __syncthreads();
    if (warp == 0) {
        int a = wsum[0][lane], b = wsum[1][lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int pa = __shfl_up_sync(0xffffffffu, a, o), pb = __shfl_up_sync(0xffffffffu, b, o);
            if (lane >= o) { a += pa; b += pb; }
        }
        wsum[0][lane] = a;
        wsum[1][lane] = b;
    }
    __syncthreads();
    const int ex_c = (warp ? wsum[0][warp - 1] : 0) + sc - c, ex_t = (warp ? wsum[1][warp - 1] : 0) + st - tl;
    if (tid < E) {
        off[tid] = ex_c;
        toff[tid] = ex_t;
        cnt[tid] = ex_c;                  /* becomes the placement cursor (every read of cnt is above) */
    }
    if (tid == E - 1) {
        off[E] = ex_c + c;
        toff[E] = ex_t + tl;
    }
    __syncthreads();
    for (int i = tid; i < nK; i += MG_SORT_THREADS) {
        const int e = sel[i];
        int p = -1;
        if (e >= 0 && e < E) {
            p = atomicAdd(&cnt[e], 1);
            rent[p] = i;
        }
        epos[i] = p;
    }
}

/* ---- 3. / 4. the grouped GEMM ---- */
/* the kernel's modes: GEMM 1 of gated experts, GEMM 1 of relu² experts, GEMM 2 */
enum { MG_DOWN = 0, MG_GATE_UP = 1, MG_UP_RELU2 = 2 };
struct mg_args {
    const void *a;               /* GEMM 1: xb [n, Kd] (row = token rent[row] / top_k); GEMM 2: H [n·K, Kd] */
    const int *rent;
    int top_k;
    const void *const *wtab;     /* cb_moe_tab.w: [3E] gate, up, down */
    const int *off, *toff;
    int E;
    int N, Kd;                   /* output columns (I or X), reduction length (X or I) */
    void *out;                   /* GEMM 1: H [n·K, N] in T; GEMM 2: Y [n·K, N] f32 */
    float act_limit;
    /* MLX-quantized B (kernel QB = 4 or 8 bits, T = f16): wtab holds each matrix's codes, qs /
     * qb its scales / biases and qr0 its first scale row (quant_moe.cu's table, i = 3e + j);
     * the decode parameters of the matrices this GEMM reads */
    const void *const *qs, *const *qb;
    const int64_t *qr0;
    int qmode, qgsh, qsd;
    int qblock;                  /* QB = 1 (fp8 E4M3 experts): the block of the scale grid (0: no scales); qsd
                                  * then as scale_elem's (0 f32, 1 bf16, 2 e8m0) */
};

__device__ __forceinline__ void mg_store2(__nv_bfloat16 *p, float a, float b) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void mg_store2(__half *p, float a, float b) {
    *(__half2 *)p = __floats2half2_rn(f16_sat(a), f16_sat(b));
}

/* c += a · b on one m16n8k16 tile, f32 accumulation */
template <typename T>
__device__ __forceinline__ void mg_mma(float *c, const unsigned *a, unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mg_mma<__nv_bfloat16>(float *c, const unsigned *a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mg_mma<__half>(float *c, const unsigned *a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* MODE MG_GATE_UP: B tile = 64 gate rows then the same 64 up rows, h = act(g, u) in T;
 * MG_UP_RELU2: B tile = 128 up rows, h = relu(u)² in T; MG_DOWN: B tile = 128 down rows,
 * f32 out. GEMM 1 (both modes) reads A's rows from xb through rent. */
template <typename T, int MODE, int QB = 0>
__global__ void __launch_bounds__(MG_THREADS, MG_MINB_TUNE) moe_gemm_kernel(mg_args p) {
    constexpr bool GATED = MODE == MG_GATE_UP, GEMM1 = MODE != MG_DOWN;
    static_assert(QB == 0 || (MG_THREADS == MG_TN && MG_BK == 64 && MG_STAGES == 2), "quantized B: a thread a tile row");
    pdl_enter();
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char mg_sm[];
    const int tile = blockIdx.y;
    if (tile >= p.toff[p.E]) return;
    int lo = 0, hi = p.E - 1;         /* the largest e with toff[e] <= tile */
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (p.toff[mid] <= tile) lo = mid;
        else hi = mid - 1;
    }
    const int e = lo;
    const int row0 = p.off[e] + (tile - p.toff[e]) * MG_TM;
    const int rows = min((int)MG_TM, p.off[e + 1] - row0);
    const int N = p.N, Kd = p.Kd;
    const int n0 = blockIdx.x * (GATED ? MG_TN / 2 : MG_TN);
    const T *B0 = (const T *)p.wtab[3 * e + (GATED ? 0 : GEMM1 ? 1 : 2)];
    const T *B1 = GATED ? (const T *)p.wtab[3 * e + 1] : B0;
    const T *Ab = (const T *)p.a;
    T *As = (T *)mg_sm;
    T *Bs = As + MG_STAGES * MG_TM * MG_LDS;
    const int tid = threadIdx.x, kc = (tid % MG_CPR) * 8, rt = tid / MG_CPR;

    /* this thread's chunks: A and B tile rows rt + MG_RPP·i, columns kc .. kc + 7 */
    const T *asrc[MG_APASS], *bsrc[MG_BPASS];
    bool aok[MG_APASS], bok[MG_BPASS];
#pragma unroll
    for (int i = 0; i < MG_APASS; i++) {
        const int r = rt + MG_RPP * i;
        aok[i] = r < rows;
        int64_t src = 0;
        if (aok[i]) src = GEMM1 ? p.rent[row0 + r] / p.top_k : row0 + r;
        asrc[i] = Ab + src * Kd + kc;
    }
#pragma unroll
    for (int i = 0; i < MG_BPASS; i++) {
        const int j = rt + MG_RPP * i;
        const T *m = GATED && j >= MG_TN / 2 ? B1 : B0;
        const int nr = n0 + (GATED ? (j & (MG_TN / 2 - 1)) : j);
        bok[i] = nr < N;
        bsrc[i] = m + (int64_t)(bok[i] ? nr : 0) * Kd + kc;
    }
    /* Quantized B (QB bits a code): thread tid decodes B tile row tid. Per BK = 64 slice it
     * loads the row's 8·QB bytes of codes (16-byte loads) and the scale / bias of columns
     * 0..31 and 32..63 (groups are >= 32 columns) into registers before the MMAs of the
     * slice before, and after them writes the 64 weights as f16 into the other stage: the
     * values of quant.cu's widening (fmaf(s, q, b), s·e2m1(q), s·e4m3(q), rounded to nearest
     * and saturated), so the GEMM computes what widen + GEMM computed. */
    constexpr int QBITS = QB == 1 ? 8 : QB ? QB : 8;   /* bits a code (QB = 1: fp8 E4M3, a byte) */
    constexpr int QV = QBITS / 2;                      /* 16-byte code vectors per slice */
    const uint8_t *qrow = nullptr;
    const char *qsp = nullptr, *qbp = nullptr;
    bool qok = false;
    uint4 qv[QV];
    float qsv[2], qbv[2];
    if constexpr (QB != 0) {
        const int j = tid, mi = 3 * e + (GATED ? (j >= MG_TN / 2 ? 1 : 0) : GEMM1 ? 1 : 2);
        const int nr = n0 + (GATED ? (j & (MG_TN / 2 - 1)) : j);
        qok = nr < N;
        qrow = (const uint8_t *)p.wtab[mi] + (int64_t)(qok ? nr : 0) * (Kd / 8 * QBITS);
        if (QB == 1) {   /* fp8: the row's block row of the scale grid (qsp: its first scale) */
            if (p.qblock > 0) {
                const int64_t scols = (Kd + p.qblock - 1) / p.qblock;
                const int es = p.qsd == 0 ? 4 : p.qsd == 1 ? 2 : 1;
                qsp = (const char *)p.qs[mi] + ((p.qr0[mi] + (qok ? nr : 0)) / p.qblock) * scols * es;
            }
        } else {
            const int es = p.qsd == 0 ? 4 : p.qsd == 3 ? 1 : 2;
            const int64_t g0 = (p.qr0[mi] + (qok ? nr : 0)) * (int64_t)(Kd >> p.qgsh);
            qsp = (const char *)p.qs[mi] + g0 * es;
            qbp = p.qmode == 1 ? (const char *)p.qb[mi] + g0 * es : qsp;
        }
    }
    auto qload = [&](int kt) {
        const int k0 = kt * MG_BK;
#pragma unroll
        for (int v = 0; v < QV; v++) {
            const int c0 = k0 + v * (128 / QBITS);   /* a vector holds 128 / QBITS codes */
            qv[v] = qok && c0 < Kd ? ld_nc_u4((const uint4 *)(qrow + c0 / 8 * QBITS)) : make_uint4(0, 0, 0, 0);
        }
        if constexpr (QB == 1) {   /* one block scale for the slice (blocks: multiples of 64, cb_moe_grouped_q_ok) */
            const bool in = qok && k0 < Kd;
            qsv[0] = qsv[1] = !in ? 0.0f : p.qblock > 0 ? scale_elem(qsp, p.qsd, k0 / p.qblock) : 1.0f;
            qbv[0] = qbv[1] = 0.0f;
        } else {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int c = k0 + 32 * h;
                const bool in = qok && c < Kd;
                qsv[h] = in ? q_param(qsp, p.qsd, c >> p.qgsh) : 0.0f;
                qbv[h] = in && p.qmode == 1 ? q_param(qbp, p.qsd, c >> p.qgsh) : 0.0f;
            }
        }
    };
    auto qword = [&](int i) -> unsigned {   /* code word i of the slice (32 / QB codes a word) */
        const uint4 &v = qv[i >> 2];
        return (i & 3) == 0 ? v.x : (i & 3) == 1 ? v.y : (i & 3) == 2 ? v.z : v.w;
    };
    auto qstore = [&](int s) {
        T *row = Bs + s * MG_TN * MG_LDS + tid * MG_LDS;
#pragma unroll
        for (int c8 = 0; c8 < 8; c8++) {   /* columns 8·c8 .. 8·c8 + 7 */
            const float sc = qsv[c8 >> 2], bi = qbv[c8 >> 2];
            float w[8];
            if constexpr (QB == 1) {   /* fp8 · block scale, as moe.cu's widening (fp8_widen16) */
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const unsigned wd = qword(2 * c8 + (i >> 1));
                    const float2 f = fp8x2((unsigned short)((i & 1) ? wd >> 16 : wd & 0xffffu));
                    w[2 * i] = f.x * sc;
                    w[2 * i + 1] = f.y * sc;
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const int bit = (8 * c8 + i) * QBITS;
                    const unsigned q = (qword(bit >> 5) >> (bit & 31)) & ((1u << QBITS) - 1u);
                    w[i] = p.qmode == 1 ? fmaf(sc, q_u2f(q), bi) : p.qmode == 2 ? sc * q_e2m1(q) : sc * q_e4m3(q);
                }
            }
            unsigned hh[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const __half2 v = __floats2half2_rn(f16_sat(w[2 * i]), f16_sat(w[2 * i + 1]));
                hh[i] = *(const unsigned *)&v;
            }
            *(uint4 *)(row + 8 * c8) = make_uint4(hh[0], hh[1], hh[2], hh[3]);
        }
    };
    auto load = [&](int s, int kt) {
        const int k0 = kt * MG_BK;
        const bool kin = k0 + kc < Kd;
        T *as = As + s * MG_TM * MG_LDS, *bs = Bs + s * MG_TN * MG_LDS;
#pragma unroll
        for (int i = 0; i < MG_APASS; i++) {
            const bool ok = aok[i] && kin;
            cb_cp16(as + (rt + MG_RPP * i) * MG_LDS + kc, ok ? asrc[i] + k0 : Ab, ok);
        }
        if constexpr (QB != 0) {
            qload(kt);   /* into registers; qstore writes the stage after the MMAs */
        } else {
#pragma unroll
            for (int i = 0; i < MG_BPASS; i++) {
                const bool ok = bok[i] && kin;
                cb_cp16(bs + (rt + MG_RPP * i) * MG_LDS + kc, ok ? bsrc[i] + k0 : B0, ok);
            }
        }
    };

    const int warp = tid >> 5, wm = warp % MG_WM, wn = warp / MG_WM;
    const bool active = wm * 32 < rows;
    const int KT = (Kd + MG_BK - 1) / MG_BK;
#if MG_MMA_TUNE
    /* mma.sync m16n8k16: the warp's 32 rows are 2 m16 tiles, its MG_WCOL B rows MG_NT n8
     * tiles (GEMM 1: the first half gate rows, the second half the up rows of the same
     * output columns, so the epilogue pairs them in registers). Fragments come from
     * shared memory by ldmatrix; accumulator (i, j) element e holds row 16i + lane/4 +
     * 8(e/2), column 8j + 2(lane%4) + e%2 of the warp tile. */
    const int lane = tid & 31;
    float acc[2][MG_NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < MG_NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    /* B row of this lane's ldmatrix address for tile pair jj (tiles 2jj, 2jj + 1) */
    auto brow = [&](int jj) {
        const int sub = ((lane >> 4) << 3) + (lane & 7);
        if (GATED) {
            const int half = MG_NT / 4;   /* tile pairs per half */
            return jj < half ? wn * (MG_WCOL / 2) + jj * 16 + sub
                             : MG_TN / 2 + wn * (MG_WCOL / 2) + (jj - half) * 16 + sub;
        }
        return wn * MG_WCOL + jj * 16 + sub;
    };
#else
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][MG_JF];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < MG_JF; j++) wmma::fill_fragment(acc[i][j], 0.0f);
#endif

#pragma unroll
    for (int s = 0; s < MG_STAGES - 1; s++) {
        if (s < KT) load(s, s);
        cb_cp_commit();
    }
    if constexpr (QB != 0) {
        if (KT > 0) qstore(0);
    }
    for (int kt = 0; kt < KT; kt++) {
        cb_cp_wait<MG_STAGES - 2>();
        __syncthreads();          /* stage kt is in; every warp is done with stage kt - 1 */
        if (kt + MG_STAGES - 1 < KT) load((kt + MG_STAGES - 1) % MG_STAGES, kt + MG_STAGES - 1);
        cb_cp_commit();
        if (active) {
            const int s = kt % MG_STAGES;
#if MG_MMA_TUNE
            const T *as = As + s * MG_TM * MG_LDS + (wm * 32 + (lane & 15)) * MG_LDS + (lane >> 4) * 8;
            const T *bs = Bs + s * MG_TN * MG_LDS + ((lane >> 3) & 1) * 8;
#pragma unroll
            for (int kk = 0; kk < MG_BK / 16; kk++) {
                unsigned fa[2][4];
#pragma unroll
                for (int i = 0; i < 2; i++) cb_ldsm4(fa[i], as + i * 16 * MG_LDS + kk * 16);
#pragma unroll
                for (int jj = 0; jj < MG_NT / 2; jj++) {
                    unsigned fb[4];
                    cb_ldsm4(fb, bs + brow(jj) * MG_LDS + kk * 16);
#pragma unroll
                    for (int i = 0; i < 2; i++) {
                        mg_mma<T>(acc[i][2 * jj], fa[i], fb[0], fb[1]);
                        mg_mma<T>(acc[i][2 * jj + 1], fa[i], fb[2], fb[3]);
                    }
                }
            }
#else
            const T *as = As + s * MG_TM * MG_LDS + wm * 32 * MG_LDS;
            const T *bs = Bs + s * MG_TN * MG_LDS + wn * MG_WCOL * MG_LDS;
#pragma unroll
            for (int kk = 0; kk < MG_BK / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
#pragma unroll
                for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], as + i * 16 * MG_LDS + kk * 16, MG_LDS);
#pragma unroll
                for (int j = 0; j < MG_JF; j++) {
                    wmma::load_matrix_sync(fb, bs + j * 16 * MG_LDS + kk * 16, MG_LDS);
#pragma unroll
                    for (int i = 0; i < 2; i++) wmma::mma_sync(acc[i][j], fa[i], fb, acc[i][j]);
                }
            }
#endif
        }
        if constexpr (QB != 0) {
            if (kt + 1 < KT) qstore((kt + 1) % MG_STAGES);   /* the stage every warp left at the barrier above */
        }
    }
    cb_cp_wait<0>();
#if MG_MMA_TUNE
    if (!active) return;
    const int qr = lane >> 2, qc = (lane & 3) * 2;
    if (GATED) {
        T *H = (T *)p.out;
        const float L = p.act_limit;
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < MG_NT / 2; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 32 + i * 16 + qr + 8 * h, c = n0 + wn * (MG_WCOL / 2) + j * 8 + qc;
                    if (r < rows && c < N) /* N % 8 == 0: the pair is inside */
                        mg_store2(H + (int64_t)(row0 + r) * N + c,
                                  moe_act(acc[i][j][2 * h], acc[i][j + MG_NT / 2][2 * h], 0, L),
                                  moe_act(acc[i][j][2 * h + 1], acc[i][j + MG_NT / 2][2 * h + 1], 0, L));
                }
    } else if (MODE == MG_UP_RELU2) {
        T *H = (T *)p.out;
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < MG_NT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 32 + i * 16 + qr + 8 * h, c = n0 + wn * MG_WCOL + j * 8 + qc;
                    if (r < rows && c < N) /* N % 8 == 0: the pair is inside */
                        mg_store2(H + (int64_t)(row0 + r) * N + c, moe_act(0.0f, acc[i][j][2 * h], 1, 0.0f),
                                  moe_act(0.0f, acc[i][j][2 * h + 1], 1, 0.0f));
                }
    } else {
        float *Y = (float *)p.out;
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < MG_NT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 32 + i * 16 + qr + 8 * h, c = n0 + wn * MG_WCOL + j * 8 + qc;
                    if (r < rows && c < N)
                        *(float2 *)(Y + (int64_t)(row0 + r) * N + c) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                }
    }
#else
    __syncthreads();              /* the pipeline's shared memory becomes the C tile */
    float *Cs = (float *)mg_sm;
    if (active) {
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < MG_JF; j++)
                wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * MG_LDC + wn * MG_WCOL + j * 16, acc[i][j], MG_LDC,
                                        wmma::mem_row_major);
    }
    __syncthreads();
    if (GATED) {
        T *H = (T *)p.out;
        const float L = p.act_limit;
        for (int idx = tid; idx < MG_TM * (MG_TN / 4); idx += MG_THREADS) {
            const int r = idx / (MG_TN / 4), c = (idx % (MG_TN / 4)) * 2;
            if (r < rows && n0 + c < N) { /* N % 8 == 0: the pair is inside */
                const float *cr = Cs + r * MG_LDC;
                mg_store2(H + (int64_t)(row0 + r) * N + n0 + c, moe_act(cr[c], cr[MG_TN / 2 + c], 0, L),
                          moe_act(cr[c + 1], cr[MG_TN / 2 + c + 1], 0, L));
            }
        }
    } else if (MODE == MG_UP_RELU2) {
        T *H = (T *)p.out;
        for (int idx = tid; idx < MG_TM * (MG_TN / 2); idx += MG_THREADS) {
            const int r = idx / (MG_TN / 2), c = (idx % (MG_TN / 2)) * 2;
            if (r < rows && n0 + c < N) { /* N % 8 == 0: the pair is inside */
                const float *cr = Cs + r * MG_LDC;
                mg_store2(H + (int64_t)(row0 + r) * N + n0 + c, moe_act(0.0f, cr[c], 1, 0.0f),
                          moe_act(0.0f, cr[c + 1], 1, 0.0f));
            }
        }
    } else {
        float *Y = (float *)p.out;
        for (int idx = tid; idx < MG_TM * (MG_TN / 4); idx += MG_THREADS) {
            const int r = idx / (MG_TN / 4), c = (idx % (MG_TN / 4)) * 4;
            if (r < rows && n0 + c < N)   /* N % 8 == 0: the four are inside */
                *(float4 *)(Y + (int64_t)(row0 + r) * N + n0 + c) = *(const float4 *)(Cs + r * MG_LDC + c);
        }
    }
#endif
}

/* ---- 5. combine: out[t] = Σ_k w[t, k] · Y[epos[t·K + k]] in k order ---- */
__global__ void moe_combine_kernel(float *out, const float *Y, const int *epos, const float *w, int K, int X) {
    pdl_enter();
    const int t = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= X) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        const int pos = epos[(int64_t)t * K + k];
        if (pos >= 0) acc += w[(int64_t)t * K + k] * Y[(int64_t)pos * X + c];
    }
    out[(int64_t)t * X + c] = acc;
}

/* ---- host side ---- */
static int mg_mat_ok(const ci_mat *W, ci_dtype dt, int64_t rows, int64_t cols) {
    return W && W->dtype == dt && W->rows == rows && W->cols == cols && W->data && ((uintptr_t)W->data & 15) == 0;
}

/* The shape half of cb_moe_grouped_ok: gated or relu² experts (the table says which, as the
 * layer does; relu² layers need no gate matrices), E within the sort's reach, widths in
 * whole 16-byte chunks of 16-bit elements. */
static int mg_shape_ok(const ci_moe *m, const cb_moe_tab *tab) {
    if (!tab->relu2 != !m->relu2 || (!m->relu2 && !m->w_gate) || !m->w_up || !m->w_down) return 0;
    const int E = tab->E, X = tab->X, I = tab->I;
    if (E < 1 || E > MG_MAX_E || E != m->n_experts || m->top_k < 1 || X != m->hidden || I != m->inter) return 0;
    return X >= 8 && I >= 8 && X % 8 == 0 && I % 8 == 0;
}

/* fp8 and MLX-quantized layers are widened to f16 for the GEMMs (cuda_internal.h, f16_sat).
 * Not relu² ones: h = relu(u)² in f16 saturates at 65504 (|u| > 256), a range real fp8
 * Nemotron-H activations may reach; they keep moe.cu's / quant_moe.cu's f32 decode kernels
 * (exact, slower) until h is stored scaled. The widen kernels' relu² support stays for that. */
int cb_moe_grouped_fp8_ok(const ci_moe *m, const cb_moe_tab *tab) {
    return m && tab && tab->w && tab->dtype == CI_F8_E4M3 && !m->relu2 && mg_shape_ok(m, tab);
}

int cb_moe_grouped_shape_ok(const ci_moe *m, const cb_moe_tab *tab) { return m && tab && !m->relu2 && mg_shape_ok(m, tab); }

int cb_moe_grouped_ok(const ci_moe *m, const cb_moe_tab *tab) {
    if (!m || !tab || !tab->w) return 0;
    if (tab->dtype != CI_BF16 && tab->dtype != CI_F16) return 0;
    if (!mg_shape_ok(m, tab)) return 0;
    const int E = tab->E, X = tab->X, I = tab->I;
    /* the table holds these views' data pointers: 16-byte aligned for the cp.async chunks
     * (relu² layers: the gate entries are NULL and never read) */
    for (int e = 0; e < E; e++)
        if ((!m->relu2 && !mg_mat_ok(&m->w_gate[e], tab->dtype, I, X)) || !mg_mat_ok(&m->w_up[e], tab->dtype, I, X) ||
            !mg_mat_ok(&m->w_down[e], tab->dtype, X, I))
            return 0;
    return 1;
}

static int q_group_shift(int group) { return group == 32 ? 5 : group == 64 ? 6 : 7; }

/* One GEMM over quantized B (QB = bits, 4 or 8; mode MG_GATE_UP or MG_DOWN); 1 if it failed. */
static int mg_q_launch(cuda_be *cb, int mode, int bits, dim3 grid, const mg_args &a) {
    static int attr_set = 0;
    if (!attr_set) {
        cudaFuncSetAttribute(moe_gemm_kernel<__half, MG_GATE_UP, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        cudaFuncSetAttribute(moe_gemm_kernel<__half, MG_GATE_UP, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        cudaFuncSetAttribute(moe_gemm_kernel<__half, MG_DOWN, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        cudaFuncSetAttribute(moe_gemm_kernel<__half, MG_DOWN, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        cudaFuncSetAttribute(moe_gemm_kernel<__half, MG_GATE_UP, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        cudaFuncSetAttribute(moe_gemm_kernel<__half, MG_DOWN, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        attr_set = 1;
    }
    if (mode == MG_GATE_UP) {
        if (bits == 4) cb_launch(cb, moe_gemm_kernel<__half, MG_GATE_UP, 4>, grid, dim3(MG_THREADS), MG_SMEM, a);
        else if (bits == 8) cb_launch(cb, moe_gemm_kernel<__half, MG_GATE_UP, 8>, grid, dim3(MG_THREADS), MG_SMEM, a);
        else cb_launch(cb, moe_gemm_kernel<__half, MG_GATE_UP, 1>, grid, dim3(MG_THREADS), MG_SMEM, a);
        return cb_launched(cb, "moe grouped (gate/up, quantized)");
    }
    if (bits == 4) cb_launch(cb, moe_gemm_kernel<__half, MG_DOWN, 4>, grid, dim3(MG_THREADS), MG_SMEM, a);
    else if (bits == 8) cb_launch(cb, moe_gemm_kernel<__half, MG_DOWN, 8>, grid, dim3(MG_THREADS), MG_SMEM, a);
    else cb_launch(cb, moe_gemm_kernel<__half, MG_DOWN, 1>, grid, dim3(MG_THREADS), MG_SMEM, a);
    return cb_launched(cb, "moe grouped (down, quantized)");
}

template <typename T>
static void mg_launch(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                      const ci_moe *m, const cb_moe_tab *tab, const cb_mg_quant *q = nullptr) {
    const int E = tab->E, X = tab->X, I = tab->I, K = m->top_k;
    const int64_t nK = (int64_t)n * K;
    const bool bf = tab->dtype == CI_BF16;
    int *ib = (int *)cb_scratch_get(cb, &cb->moe_work[0], (size_t)(2 * (E + 1) + 2 * nK) * sizeof(int));
    T *xb = (T *)cb_scratch_get(cb, &cb->moe_work[1], (size_t)n * X * sizeof(T));
    T *H = (T *)cb_scratch_get(cb, &cb->moe_work[2], (size_t)nK * I * sizeof(T));
    float *Y = (float *)cb_scratch_get(cb, &cb->moe_work[3], (size_t)nK * X * sizeof(float));
    if (!ib || !xb || !H || !Y) return;
    int *off = ib, *toff = off + (E + 1), *epos = toff + (E + 1), *rent = epos + nK;

    cb_convert(cb, xb, x, (int64_t)n * X, bf);
    cb_launch(cb, moe_sort_kernel, dim3(1), dim3(MG_SORT_THREADS), 0, off, toff, epos, rent, sel, (int)nK, E);
    if (cb_launched(cb, "moe grouped (sort)")) return;

    static int attr_set = 0;      /* per instantiation */
    if (!attr_set) {
        cudaFuncSetAttribute(moe_gemm_kernel<T, MG_GATE_UP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        cudaFuncSetAttribute(moe_gemm_kernel<T, MG_UP_RELU2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        cudaFuncSetAttribute(moe_gemm_kernel<T, MG_DOWN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)MG_SMEM);
        attr_set = 1;
    }
    const int64_t max_tiles = (nK + MG_TM - 1) / MG_TM + (nK < E ? nK : E);
    mg_args a;
    memset(&a, 0, sizeof a);
    a.a = xb;
    a.rent = rent;
    a.top_k = K;
    a.wtab = tab->w;
    a.off = off;
    a.toff = toff;
    a.E = E;
    a.N = I;
    a.Kd = X;
    a.out = H;
    a.act_limit = m->act_limit;
    if (q) {   /* MLX-quantized gate / up then down: the B loader decodes (T is f16, mg_q_launch) */
        a.qs = q->scales;
        a.qb = q->biases;
        a.qr0 = q->srow0;
        a.qmode = q->mode[1];
        a.qgsh = q->bits[1] == 1 ? 0 : q_group_shift(q->group[1]);
        a.qblock = q->bits[1] == 1 ? q->group[1] : 0;
        a.qsd = q->sd[1];
        if (mg_q_launch(cb, MG_GATE_UP, q->bits[1], dim3((I + MG_TN / 2 - 1) / (MG_TN / 2), (unsigned)max_tiles), a)) return;
        a.a = H;
        a.N = X;
        a.Kd = I;
        a.out = Y;
        a.qmode = q->mode[2];
        a.qgsh = q->bits[2] == 1 ? 0 : q_group_shift(q->group[2]);
        a.qblock = q->bits[2] == 1 ? q->group[2] : 0;
        a.qsd = q->sd[2];
        if (mg_q_launch(cb, MG_DOWN, q->bits[2], dim3((X + MG_TN - 1) / MG_TN, (unsigned)max_tiles), a)) return;
        cb_launch(cb, moe_combine_kernel, dim3(n, (X + 255) / 256), dim3(256), 0, out, (const float *)Y,
                  (const int *)epos, w, K, X);
        cb_launched(cb, "moe grouped (combine)");
        return;
    }
    if (tab->relu2) {             /* h = relu(up·x)²: 128 up rows a block, no gate */
        cb_launch(cb, moe_gemm_kernel<T, MG_UP_RELU2>, dim3((I + MG_TN - 1) / MG_TN, (unsigned)max_tiles),
                  dim3(MG_THREADS), MG_SMEM, a);
        if (cb_launched(cb, "moe grouped (up, relu2)")) return;
    } else {
        cb_launch(cb, moe_gemm_kernel<T, MG_GATE_UP>, dim3((I + MG_TN / 2 - 1) / (MG_TN / 2), (unsigned)max_tiles),
                  dim3(MG_THREADS), MG_SMEM, a);
        if (cb_launched(cb, "moe grouped (gate/up)")) return;
    }
    a.a = H;
    a.N = X;
    a.Kd = I;
    a.out = Y;
    cb_launch(cb, moe_gemm_kernel<T, MG_DOWN>, dim3((X + MG_TN - 1) / MG_TN, (unsigned)max_tiles), dim3(MG_THREADS),
              MG_SMEM, a);
    if (cb_launched(cb, "moe grouped (down)")) return;
    cb_launch(cb, moe_combine_kernel, dim3(n, (X + 255) / 256), dim3(256), 0, out, (const float *)Y, (const int *)epos,
              w, K, X);
    cb_launched(cb, "moe grouped (combine)");
}

/* MLX-quantized experts whose codes the GEMMs decode (quant_moe.cu checks cb_moe_grouped_q_ok
 * and the codes' 16-byte alignment) */
int cb_moe_grouped_q_ok(const ci_moe *m, const cb_mg_quant *q) {
    if (!m || !q || m->relu2) return 0;
    cb_moe_tab t;
    memset(&t, 0, sizeof t);
    t.E = q->E;
    t.I = q->I;
    t.X = q->X;
    if (!mg_shape_ok(m, &t) || q->X % 64 || q->I % 64) return 0;
    for (int j = 0; j < 3; j++) {
        if (q->bits[j] == 1) {   /* fp8 E4M3: no scales, or blocks a multiple of the 64-column slice */
            if (q->group[j] < 0 || q->group[j] % 64) return 0;
            continue;
        }
        if (!(q->bits[j] == 4 || q->bits[j] == 8) || q->group[j] < 32 || (q->mode[j] == 2 && q->bits[j] != 4) ||
            (q->mode[j] == 3 && q->bits[j] != 8))
            return 0;
    }
    return q->bits[0] == q->bits[1] && q->mode[0] == q->mode[1] && q->group[0] == q->group[1] && q->sd[0] == q->sd[1];
}

void cb_moe_grouped_q(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                      const ci_moe *m, const cb_mg_quant *q) {
    if (cb->failed || n <= 0) return;
    if ((int64_t)n * m->top_k > (1 << 30) || (int64_t)n * m->top_k / MG_TM + q->E + 1 > 65535) {
        cb_fail_msg(cb, "grouped MoE: more rows than its grid takes");
        return;
    }
    cb_moe_tab t;   /* the shape and the codes table, as mg_launch reads a table */
    memset(&t, 0, sizeof t);
    t.E = q->E;
    t.I = q->I;
    t.X = q->X;
    t.dtype = CI_F16;
    t.w = (const void **)q->codes;
    mg_launch<__half>(cb, out, x, n, sel, w, m, &t, q);
}

void cb_moe_grouped(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                    const ci_moe *m, const cb_moe_tab *tab) {
    if (cb->failed || n <= 0) return;
    if ((int64_t)n * m->top_k > (1 << 30) ||
        (int64_t)n * m->top_k / MG_TM + tab->E + 1 > 65535) { /* grid.y limit: ~4M entries */
        if (!cb->failed) {
            cb->failed = 1;
            snprintf(cb->base.last_error, sizeof cb->base.last_error,
                     "CUDA: grouped MoE over %d rows x top-%d is more than its grid takes", n, m->top_k);
        }
        return;
    }
    if (tab->dtype == CI_BF16) mg_launch<__nv_bfloat16>(cb, out, x, n, sel, w, m, tab);
    else mg_launch<__half>(cb, out, x, n, sel, w, m, tab);
}
