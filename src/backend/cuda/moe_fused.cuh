/* moe_fused.cuh — the pieces of the one-launch MoE decode kernels (moe_fused.cu: 16-bit / f32
 * experts; moe_fused_qt.cu: fp8 experts on tensor cores): the grid-wide barrier of a grid that is
 * resident all at once, and phase 1, the block's RMSNorm and the router product in gemv.cu's
 * NORM GEMV order (so xn and the logits are norm_matmul_keep's bits). */
#ifndef CI_CUDA_MOE_FUSED_CUH
#define CI_CUDA_MOE_FUSED_CUH
#include "cuda_internal.h"
#include "loaders.cuh"
#include "prof.cuh"

enum { MF_WARPS = 16, MF_B = 8, MF_RU = 2, MF_NI = 8, MF_TAB_E = 256 };


__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* every block of the grid here before any goes on; writes before it visible after it. One atomic
 * add a block on bar: block 0 adds 2^31 - (blocks - 1), the others 1, so the counter's low 31 bits
 * are 0 between barriers and its top bit flips when the last block has added; the others poll for
 * the flip. (Before: a generation word read first, the counter, which the last block reset before
 * bumping the generation: two L2 trips more on the way out; the second barrier 4.9 -> 4.2 us, the
 * first 2.9 -> 2.2, bench/RESULTS.md forty-seventh session.) */
__device__ __forceinline__ unsigned mf_inc() { return blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u; }
/* the barrier in two halves: the block's arrival (its writes before it visible after the barrier;
 * the counter before the add, thread 0's), then, after work of its own, the wait for the others */
__device__ __forceinline__ unsigned mf_arrive(unsigned *bar) {
    __syncthreads();
    unsigned old = 0;
    if (threadIdx.x == 0) {
        __threadfence();
        old = atomicAdd(bar, mf_inc());
    }
    return old;
}
__device__ __forceinline__ void mf_wait(unsigned *bar, unsigned old) {
    if (threadIdx.x == 0) {
        const unsigned inc = mf_inc();
        if (!(((old + inc) ^ old) & 0x80000000u))   /* not the last: the flip is another block's */
            while (!((ld_acquire(bar) ^ old) & 0x80000000u)) __nanosleep(40);
        __threadfence();
    }
    __syncthreads();
}
__device__ __forceinline__ void mf_grid_sync(unsigned *bar) { mf_wait(bar, mf_arrive(bar)); }

/* column of the i-th 16-byte step of a router lane: KS = 1, lane · V + i · 32V (any unroll);
 * KS = 4, gemv_kernel's split form (U = MF_RU steps a trip, warps kw of the row interleaved) */
template <int KS, int V>
__device__ __forceinline__ int mf_rcol(int i, int kw, int lane) {
    if (KS == 1) return lane * V + i * 32 * V;
    constexpr int STEP = 32 * V * MF_RU;
    return kw * STEP + (i / MF_RU) * KS * STEP + (i % MF_RU) * 32 * V + lane * V;
}

/* V consecutive floats of shared memory at p (16-byte aligned) into o, as 16-byte loads without
 * bank conflicts: with 8 floats a lane (lanes 32 bytes apart) lanes 4..7 of each quarter warp
 * take their second half first, so each load's eight lanes cover the 32 banks once (plain loads
 * of a float each were 8-way conflicts: the lanes' rows 32 bytes apart). */
template <int V>
__device__ __forceinline__ void sh_row(const float *p, int lane, float *o) {
    const float4 *q = (const float4 *)p;
    if (V == 4) {
        const float4 a = q[0];
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
    } else {
        const int sw = (lane >> 2) & 1;
        const float4 a = q[sw], b = q[sw ^ 1];
        const float4 lo = sw ? b : a, hi = sw ? a : b;
        o[0] = lo.x; o[1] = lo.y; o[2] = lo.z; o[3] = lo.w;
        o[4] = hi.x; o[5] = hi.y; o[6] = hi.z; o[7] = hi.w;
    }
}

/* phase 1's inputs: x [X] and the norm weight; router [E, X] in LR's dtype, sr (or NULL) a row E
 * of it elsewhere (Qwen's σ-gated shared expert: its logit to glogit) */
struct mf_p1 {
    const float *x, *norm_w;
    float eps;
    const void *router;
    const char *sr;
    int X, E;
    float *xn, *logits, *glogit;   /* xn written by block 0 */
};

/* Phase 1, every block: before pdl_enter each router warp loads its first batch of router weights,
 * every thread its share of the norm weight (what no kernel writes); then x into shared memory
 * (big, X floats), its inverse RMS by warps 0..3 in the GEMV's order, xn = x · rms · w kept there
 * (block 0 also writes it to p.xn); router row r is warp (r · KS + kw)'s over the grid (KS = 1 or
 * 4 warps a row as gemv.cu's launch for that width), its logit written. Blocks of MF_WARPS warps;
 * pm: prof.cuh's slots for the ends of the prefetch, of pdl_enter and of the norm. */
template <class LR, int KS>
__device__ __forceinline__ void mf_norm_router(const mf_p1 &p, float *big, uint64_t *pm) {
    __shared__ float rpart[MF_WARPS], npart[4];
    __shared__ float nscale;
    constexpr int VR = LR::VEC, NT = MF_WARPS * 32, B = MF_B, NI = MF_NI;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gw = blockIdx.x * MF_WARPS + warp;
    const int TW = gridDim.x * MF_WARPS, X = p.X, E = p.E, ER = p.sr ? E + 1 : E;
    uint4 rr[B];
    {
        const int row = gw / KS, kw = gw % KS;
        if (row < ER) {
            const char *wr = row < E ? (const char *)p.router + (int64_t)row * X * LR::BYTES : p.sr;
#pragma unroll
            for (int b = 0; b < B; b++) {
                const int c = mf_rcol<KS, VR>(b, kw, lane);
                if (c < X) rr[b] = ld_stream(wr + (int64_t)c * LR::BYTES);
            }
        }
    }
    float4 nw[NI], xv[NI];
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int c = 4 * ((int)threadIdx.x + i * NT);
        if (c < X) nw[i] = __ldg((const float4 *)(p.norm_w + c));
    }
    CB_PROF_PM(pm, 0);
    pdl_enter();
    CB_PROF_PM(pm, 1);
    /* x into shared memory (every load issued first), then gemv_kernel's NORM pass of its four
     * warps over it: thread t sums columns 4t + 512k in k order, the same nesting */
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int c = 4 * ((int)threadIdx.x + i * NT);
        if (c < X) xv[i] = __ldcg((const float4 *)(p.x + c));
    }
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int c = 4 * ((int)threadIdx.x + i * NT);
        if (c < X) *(float4 *)(big + c) = xv[i];
    }
    __syncthreads();
    if (warp < 4) {
        float ss = 0.0f;
        for (int c = threadIdx.x * 4; c < X; c += 4 * 32 * 4) {
            const float4 f = *(const float4 *)(big + c);
            ss = fmaf(f.x, f.x, fmaf(f.y, f.y, fmaf(f.z, f.z, fmaf(f.w, f.w, ss))));
        }
        ss = warp_sum(ss);
        if (lane == 0) npart[warp] = ss;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float tot = 0.0f;
        for (int w = 0; w < 4; w++) tot += npart[w];
        nscale = (float)(1.0 / sqrt((double)tot / (double)X + (double)p.eps));
    }
    __syncthreads();
    {
        const float sc = nscale;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int c = 4 * ((int)threadIdx.x + i * NT);
            if (c >= X) break;
            float4 v = xv[i];
            v.x = v.x * sc * nw[i].x; v.y = v.y * sc * nw[i].y; v.z = v.z * sc * nw[i].z; v.w = v.w * sc * nw[i].w;
            *(float4 *)(big + c) = v;
            if (blockIdx.x == 0) *(float4 *)(p.xn + c) = v;
        }
    }
    __syncthreads();
    CB_PROF_PM(pm, 2);
    for (int base = blockIdx.x * MF_WARPS; base < ER * KS; base += TW) {   /* uniform in the block */
        const int unit = base + warp, row = unit / KS, kw = unit % KS;
        float acc = 0.0f;
        if (row < ER) {
            const char *wr = row < E ? (const char *)p.router + (int64_t)row * X * LR::BYTES : p.sr;
            for (int i0 = 0;; i0 += B) {
                if (mf_rcol<KS, VR>(i0, kw, lane) >= X) break;
                if (i0 || base != (int)blockIdx.x * MF_WARPS) {
#pragma unroll
                    for (int b = 0; b < B; b++) {
                        const int c = mf_rcol<KS, VR>(i0 + b, kw, lane);
                        if (c < X) rr[b] = ld_stream(wr + (int64_t)c * LR::BYTES);
                    }
                }
#pragma unroll
                for (int b = 0; b < B; b++) {
                    const int c = mf_rcol<KS, VR>(i0 + b, kw, lane);
                    if (c >= X) break;
                    float wv[VR], xs[VR];
                    LR::cvt(rr[b], wv);
                    sh_row<VR>(big + c, lane, xs);
#pragma unroll
                    for (int v = 0; v < VR; v++) acc = fmaf(wv[v], xs[v], acc);
                }
            }
            acc = warp_sum(acc);
        }
        if (KS == 1) {
            if (row < ER && lane == 0) *(row < E ? p.logits + row : p.glogit) = acc;
        } else {
            if (lane == 0) rpart[warp] = acc;
            __syncthreads();
            if (row < ER && kw == 0 && lane == 0) {
                float v = rpart[warp];
#pragma unroll
                for (int q = 1; q < KS; q++) v += rpart[warp + q];
                *(row < E ? p.logits + row : p.glogit) = v;
            }
            __syncthreads();
        }
    }
}
#endif
