/* route.cuh — one token row's MoE routing by one whole block (route_row): the body of moe.cu's
 * route_kernel and of moe_fused.cu's one-launch MoE decode, which routes in every block. */
#ifndef CI_CUDA_ROUTE_CUH
#define CI_CUDA_ROUTE_CUH
#include "cuda_internal.h"
#include "prof.cuh"
#include <float.h>
#include <limits.h>

enum { ROUTE_THREADS = 128, ROUTE_MAX_E = 1024, ROUTE_MAX_K = 64 };

struct route_args {
    int E, K, router, norm, G, topk_group, hash_vocab;
    float norm_eps, scaling;
    const float *bias;
    const int32_t *hash_ids;
};

/* The ranking of the top-k: larger value first, the lower index among equals (the CPU's topk
 * and a stable descending sort); NaN ranks as -inf (the CPU keeps a NaN it meets first, so
 * the two agree wherever no score is NaN). */
__device__ __forceinline__ float route_key(float v) { return v != v ? -INFINITY : v; }

/* Row t's choice by the whole block (any size, a multiple of 32; every thread calls it): the
 * experts in rank order into chosen[0..K) and their weights into wsel[0..K) (shared memory the
 * caller owns, valid after the call); sm: 2 E floats of shared scratch. logits are read through
 * L2 (ld.global.cg): in the fused launch other blocks wrote them.
 * The scores as the CPU computes them: softmax's max and exponentials over every thread, its
 * double sum by warp 0 (lane l: entries l, l + 32, ..; then a shuffle tree), so the weights'
 * bits do not depend on the block size; grouped sigmoid's group scores by warp 0. Then every
 * entry's rank among all E at once (the entries that beat it, counted against shared-memory
 * broadcasts by q threads an entry when the block has q · E threads): the k chosen are those of
 * rank < k, in rank order. The weights: their sum in rank order in double by thread 0, the
 * divisions by k threads.
 * Measured (moe_fused, Qwen3-30B-A3B dims on an H100, bench/RESULTS.md forty-seventh session):
 * the ranks by one thread an entry took 4.3 us of the block's 6.2 us of routing, by 4 threads an
 * entry 1.9 (decode +2.3..2.8%). Tried and not kept: the whole routing by warp 0 (k rounds of
 * a redux over the lanes' kept best keys, no block barrier inside): ranks 4.0 us, scores 1.7
 * (each lane's four double divisions in a row), decode 1-4% below the ranks by 4 threads. */
__device__ __forceinline__ void route_row(int t, const float *logits, const int32_t *ids, const route_args &a,
                                          float *sm, int *chosen, float *wsel, uint64_t *pm = nullptr) {
    /* pm: prof.cuh's slots for the end of the scores, of the ranks and of the weights (a measuring build) */
    __shared__ float red[32];
    __shared__ double dsum;
    const int tid = threadIdx.x, nt = blockDim.x, warp = tid >> 5, lane = tid & 31, E = a.E, K = a.K;
    float *s = sm, *choice = sm + E;
    const float *lg = logits + (int64_t)t * E;
    if (a.router == CI_ROUTE_SOFTMAX) {
        float mx = -FLT_MAX;
        for (int e = tid; e < E; e += nt) {   /* the logits read once (one L2 trip), kept in s */
            const float v = __ldcg(lg + e);
            s[e] = v;
            mx = fmaxf(mx, v);
        }
        for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if (lane == 0) red[warp] = mx;
        __syncthreads();
        mx = red[0];
        for (int w = 1; w < nt / 32; w++) mx = fmaxf(mx, red[w]);
        for (int e = tid; e < E; e += nt) s[e] = expf(s[e] - mx);
        __syncthreads();
        if (warp == 0) {
            double sum = 0;
            for (int e = lane; e < E; e += 32) sum += s[e];
            for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) dsum = sum;
        }
        __syncthreads();
        const double sum = dsum;
        for (int e = tid; e < E; e += nt) {
            const float p = (float)(s[e] / sum);
            s[e] = p;
            choice[e] = p;
        }
    } else {
        for (int e = tid; e < E; e += nt) {
            float x = __ldcg(lg + e);
            float v = a.router == CI_ROUTE_SQRTSOFTPLUS ? sqrtf(x > 20.0f ? x : log1pf(expf(x))) : 1.0f / (1.0f + expf(-x));
            s[e] = v;
            choice[e] = v + (a.bias ? a.bias[e] : 0.0f);
        }
    }
    __syncthreads();
    CB_PROF_PM(pm, 0);
    if (a.hash_ids) {
        if (tid < K) {
            int id = ids ? ids[t] : 0;
            if (id < 0 || id >= a.hash_vocab) id = 0;   /* ids are validated by the caller */
            chosen[tid] = a.hash_ids[(int64_t)id * K + tid];
        }
    } else {
        if (a.router != CI_ROUTE_SOFTMAX && a.G > 1) {
            if (warp == 0) {
                const int per = E / a.G;
                float sc = -FLT_MAX;
                if (lane < a.G) {                  /* group score: the sum of its two best choices */
                    const float *c = choice + lane * per;
                    int b0 = 0;
                    for (int i = 1; i < per; i++) if (c[i] > c[b0]) b0 = i;
                    sc = c[b0];
                    if (per >= 2) {
                        int b1 = b0 == 0 ? 1 : 0;
                        for (int i = 0; i < per; i++) if (i != b0 && c[i] > c[b1]) b1 = i;
                        sc += c[b1];
                    }
                }
                unsigned keep = 0;                 /* the topk_group best groups (lower index on ties) */
                for (int j = 0; j < a.topk_group; j++) {
                    float bv = (lane < a.G && !(keep >> lane & 1)) ? route_key(sc) : -INFINITY;
                    int bi = (lane < a.G && !(keep >> lane & 1)) ? lane : INT_MAX;
                    for (int o = 16; o; o >>= 1) {
                        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                        if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
                    }
                    keep |= 1u << bi;
                }
                __syncwarp();
                for (int e = lane; e < per * a.G; e += 32)
                    if (!(keep >> (e / per) & 1)) choice[e] = -INFINITY;
            }
            __syncthreads();
        }
        /* e's rank: the entries that beat it, counted by q threads of one warp (q a power of two,
         * the most with q · E <= nt, at most 32; 1 when E >= nt) each over every q-th entry, the
         * counts summed by shuffles: integers, so any q gives the same ranks */
        int q = 1;
        while (q < 32 && 2 * q * E <= nt) q *= 2;
        const int per = nt / q, sub = tid & (q - 1);
        for (int e0 = 0; e0 < E; e0 += per) {   /* uniform in the block: every lane reaches the shuffles */
            const int e = e0 + tid / q;
            int r = 0;
            if (e < E) {
                const float v = route_key(choice[e]);
                for (int j = sub; j < E; j += q) {
                    const float c = route_key(choice[j]);
                    r += c > v || (c == v && j < e);
                }
            }
            for (int o = 1; o < q; o <<= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
            if (e < E && sub == 0 && r < K) chosen[r] = e;
        }
    }
    __syncthreads();
    CB_PROF_PM(pm, 1);
    if (tid == 0) {
        double sum = 0;
        for (int k = 0; k < K; k++) sum += s[chosen[k]];
        dsum = sum;
    }
    __syncthreads();
    if (tid < K) {
        float w = s[chosen[tid]];
        if (a.norm) {
            const double eps = a.router == CI_ROUTE_SOFTMAX ? 0.0 : a.norm_eps > 0 ? (double)a.norm_eps : 1e-20;
            w = (float)(w / (dsum + eps));
        }
        wsel[tid] = w * a.scaling;
    }
    __syncthreads();
    CB_PROF_PM(pm, 2);
}

/* a MoE layer's routing done inside the routed experts' first decode kernel (quant_mma_moe.cu's
 * gate+up, cb_moe_route_experts): the router's logits [n, E] and the token ids hash routing reads
 * in; sel / w [n, K] written there as moe_route writes them */
struct cb_route {
    const float *logits;
    const int32_t *ids;
    int32_t *sel;
    float *w;
    route_args a;
};

/* route_args of m (moe_route's checks passed) */
static inline route_args route_args_of(const ci_moe *m) {
    route_args a;
    const int G = m->router == CI_ROUTE_SIGMOID && m->n_group > 1 ? m->n_group : 1;
    a.E = m->n_experts; a.K = m->top_k; a.router = (int)m->router; a.norm = m->norm_topk_prob;
    a.G = G; a.topk_group = m->topk_group; a.hash_vocab = m->hash_vocab;
    a.norm_eps = m->norm_eps; a.scaling = m->routed_scaling;
    a.bias = m->router == CI_ROUTE_SOFTMAX ? NULL : m->bias;
    a.hash_ids = m->router == CI_ROUTE_SOFTMAX ? NULL : m->hash_ids;
    return a;
}

/* Whether the device routes m (at most 1024 experts, 64 chosen, 32 groups); else why in err. */
static inline int route_ok(const ci_moe *m) {
    const int G = m->router == CI_ROUTE_SIGMOID && m->n_group > 1 ? m->n_group : 1;
    return !(m->n_experts < 1 || m->n_experts > ROUTE_MAX_E || m->top_k < 1 || m->top_k > ROUTE_MAX_K ||
             m->top_k > m->n_experts || G > 32 || (G > 1 && (m->n_experts % G || m->topk_group < 1 || m->topk_group > G)));
}

#endif
