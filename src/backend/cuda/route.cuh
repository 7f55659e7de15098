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
    int rank;                    /* the top-k's form (cuda_be.route_rank): 0 a thread an entry counts the entries
                                  * that beat it, 1 up to 32 threads an entry do, 2 warp 0 takes k maxima */
    float norm_eps, scaling;
    const float *bias;
    const int32_t *hash_ids;
};

/* The ranking of the top-k: larger value first, the lower index among equals (the CPU's topk
 * and a stable descending sort); NaN ranks as -inf (the CPU keeps a NaN it meets first, so
 * the two agree wherever no score is NaN). */
__device__ __forceinline__ float route_key(float v) { return v != v ? -INFINITY : v; }

/* route_key as an int whose signed order is the floats' (-0 taken as +0, so equal floats give
 * equal ints); INT_MIN lies below every key (-inf's is 0x807fffff) */
__device__ __forceinline__ int route_ikey(float v) {
    v = route_key(v);
    if (v == 0.0f) v = 0.0f;
    const int i = __float_as_int(v);
    return i ^ ((i >> 31) & 0x7fffffff);
}

/* The top k of choice[0..E) by warp 0 alone (every lane calls it), into chosen[0..K) in rank
 * order, and their weights from s into wsel[0..K): lane l owns entries [l·m, l·m + m), m = E / 32
 * rounded up, and keeps its best key (the lower index among equals); K rounds of the warp's
 * maximum (redux), the lowest lane holding it wins (the lower index: lanes own ascending runs),
 * writes its entry, marks it taken (INT_MIN, choice reused as the keys) and finds its next best.
 * The winner's score goes round the warp by a shuffle and every lane adds it to a double sum in
 * rank order: the bits of the block form's thread-0 sum and divisions. */
__device__ __forceinline__ void route_top_warp(const float *s, float *choice, int E, int K, int norm, double eps,
                                               float scaling, int *chosen, float *wsel) {
    const int lane = threadIdx.x & 31, m = (E + 31) >> 5, lo = lane * m, hi = min(lo + m, E);
    int bk = INT_MIN, be = -1;
    for (int e = lo; e < hi; e++) {   /* choice becomes the keys (their bits) */
        const int k = route_ikey(choice[e]);
        choice[e] = __int_as_float(k);
        if (k > bk) { bk = k; be = e; }
    }
    float bs = be >= 0 ? s[be] : 0.0f, w0 = 0.0f, w1 = 0.0f;
    double sum = 0;
    for (int r = 0; r < K; r++) {
        const int top = __reduce_max_sync(0xffffffffu, bk);
        const int wl = __ffs(__ballot_sync(0xffffffffu, bk == top)) - 1;
        const float w = __shfl_sync(0xffffffffu, bs, wl);
        if (lane == wl) {
            chosen[r] = be;
            choice[be] = __int_as_float(INT_MIN);
            bk = INT_MIN; be = -1;
            for (int e = lo; e < hi; e++) {
                const int k = __float_as_int(choice[e]);
                if (k > bk) { bk = k; be = e; }
            }
            bs = be >= 0 ? s[be] : 0.0f;
        }
        sum += w;
        if (r == lane) w0 = w;
        if (r == lane + 32) w1 = w;
    }
    if (norm) {
        w0 = (float)(w0 / (sum + eps));
        w1 = (float)(w1 / (sum + eps));
    }
    if (lane < K) wsel[lane] = w0 * scaling;
    if (lane + 32 < K) wsel[lane + 32] = w1 * scaling;
}

/* grouped routing (G > 1) by warp 0 (every lane calls it): each group's score is the sum of its
 * two best choices; entries outside the topk_group best groups (the lower index on ties) set to
 * -inf in choice */
__device__ __forceinline__ void route_group_mask(float *choice, const route_args &a) {
    const int lane = threadIdx.x & 31;
    const int per = a.E / a.G;
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
    __syncwarp();
}

/* what the normalized weights' sum is divided by beside it (the CPU's) */
__device__ __forceinline__ double route_eps(const route_args &a) {
    return a.router == CI_ROUTE_SOFTMAX ? 0.0 : a.norm_eps > 0 ? (double)a.norm_eps : 1e-20;
}

/* Row t's routing by warp 0 alone (route_args.rank 2; every lane calls it), for route_row: the
 * scores (softmax: lane l takes entries l, l + 32, .. for the max, the exponentials and the double
 * sum, then the shuffle tree: the block form's bits), the group mask, then route_top_warp; hash
 * routing: the table's experts, their weights' double sum in rank order by every lane. No block
 * barrier inside: the other warps wait at the caller's. */
__device__ __forceinline__ void route_warp(int t, const float *logits, const int32_t *ids, const route_args &a,
                                           float *sm, int *chosen, float *wsel, uint64_t *pm) {
    const int lane = threadIdx.x & 31, E = a.E, K = a.K;
    float *s = sm, *choice = sm + E;
    const float *lg = logits + (int64_t)t * E;
    if (a.router == CI_ROUTE_SOFTMAX) {
        float mx = -FLT_MAX;
        for (int e = lane; e < E; e += 32) {
            const float v = __ldcg(lg + e);
            s[e] = v;
            mx = fmaxf(mx, v);
        }
        for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double sum = 0;
        for (int e = lane; e < E; e += 32) {
            const float x = expf(s[e] - mx);
            s[e] = x;
            sum += x;
        }
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        for (int e = lane; e < E; e += 32) {
            const float p = (float)(s[e] / sum);
            s[e] = p;
            choice[e] = p;
        }
    } else {
        for (int e = lane; e < E; e += 32) {
            const float x = __ldcg(lg + e);
            const float v = a.router == CI_ROUTE_SQRTSOFTPLUS ? sqrtf(x > 20.0f ? x : log1pf(expf(x))) : 1.0f / (1.0f + expf(-x));
            s[e] = v;
            choice[e] = v + (a.bias ? a.bias[e] : 0.0f);
        }
    }
    __syncwarp();
    CB_PROF_PM(pm, 0);
    if (a.hash_ids) {
        const int id0 = ids ? ids[t] : 0, id = id0 < 0 || id0 >= a.hash_vocab ? 0 : id0;   /* validated by the caller */
        for (int k = lane; k < K; k += 32) chosen[k] = a.hash_ids[(int64_t)id * K + k];
        __syncwarp();
        double sum = 0;
        for (int k = 0; k < K; k++) sum += s[chosen[k]];
        for (int k = lane; k < K; k += 32) {
            float w = s[chosen[k]];
            if (a.norm) w = (float)(w / (sum + route_eps(a)));
            wsel[k] = w * a.scaling;
        }
    } else {
        if (a.router != CI_ROUTE_SOFTMAX && a.G > 1) route_group_mask(choice, a);
        route_top_warp(s, choice, E, K, a.norm, route_eps(a), a.scaling, chosen, wsel);
    }
    CB_PROF_PM(pm, 1);
}

/* Row t's choice by the whole block (any size, a multiple of 32; every thread calls it): the
 * experts in rank order into chosen[0..K) and their weights into wsel[0..K) (shared memory the
 * caller owns, valid after the call); sm: 2 E floats of shared scratch. logits are read through
 * L2 (ld.global.cg): in the fused launch other blocks wrote them.
 * The scores as the CPU computes them: softmax's max and exponentials over every thread, its
 * double sum by warp 0 (lane l: entries l, l + 32, ..; then a shuffle tree), so the weights'
 * bits do not depend on the block size; grouped sigmoid's group scores by warp 0. Then every
 * entry's rank among all E at once (each thread counts the entries that beat its own: E
 * compares against a shared-memory broadcast): the k chosen are those of rank < k, in rank
 * order. The weights: their sum in rank order in double by thread 0, the divisions by k
 * threads. */
__device__ __forceinline__ void route_row(int t, const float *logits, const int32_t *ids, const route_args &a,
                                          float *sm, int *chosen, float *wsel, uint64_t *pm = nullptr) {
    /* pm: prof.cuh's slots for the end of the scores, of the ranks and of the weights (a measuring build) */
    __shared__ float red[32];
    __shared__ double dsum;
    const int tid = threadIdx.x, nt = blockDim.x, warp = tid >> 5, lane = tid & 31, E = a.E, K = a.K;
    float *s = sm, *choice = sm + E;
    const float *lg = logits + (int64_t)t * E;
    if (a.rank == 2) {
        if (warp == 0) route_warp(t, logits, ids, a, sm, chosen, wsel, pm);
        __syncthreads();
        CB_PROF_PM(pm, 2);
        return;
    }
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
            if (warp == 0) route_group_mask(choice, a);
            __syncthreads();
        }
        /* e's rank: the entries that beat it, counted by q threads of one warp (q a power of two,
         * the most with q · E <= nt, at most 32; 1 when E >= nt) each over every q-th entry, the
         * counts summed by shuffles: integers, so any q gives the same ranks */
        int q = 1;
        if (a.rank == 1)
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
        if (a.norm) w = (float)(w / (dsum + route_eps(a)));
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

/* route_args of m (moe_route's checks passed) on cb */
static inline route_args route_args_of(const cuda_be *cb, const ci_moe *m) {
    route_args a;
    a.rank = cb->route_rank;
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
