/* dsa.cu — DeepSeek Sparse Attention on the device (backend.h dsa_attend): the lightning
 * index scores of the sparse rows, their top-k selection, then the MLA attention kernel of
 * mla.cu over the kept latent rows. Rows whose context fits in topk attend densely in the
 * same launch. Nothing synchronises; launches are sized by max_keys. The scores and the
 * selection (cb_index_select) also make V4's CSA indexer choice (v4.cu: keys its compressor
 * state's entries, (pos + 1) / ratio of them, ks = id^-1/2, the count of each row's choice
 * in nsel).
 *
 * Scores: each sparse row (L keys > topk) gets Σ_h relu(q[h] · k[s]) · ks · (w[h] · w_scale),
 * heads summed in order, NaN mapped to -inf (DSA: ks = 1, an exact product). dsa_score_kernel: a warp per key, the row's
 * indexer queries in shared memory, each head's dot a 5-step shuffle reduction.
 * dsa_score4_kernel (switch cuda_be.dsa_score, CINFER_CUDA_DSA_SCORE, default on; index
 * head dims 16, 32, 64, 128): four lanes per key, each holding a quarter of the key in
 * registers, queries broadcast from shared memory, two shuffles per head; the same
 * operations on the same operands in the same tree, so the same score bits.
 *
 * Selection: the topk best positions of the row, written ascending; ties at the threshold
 * taken from the lowest positions (the rule of the CPU's ci_topk_positions; compared as
 * order-preserving integer keys, so -0 ranks below +0 here where the CPU ties them: a score,
 * summed from +0, is -0 only by underflow).
 * dsa_select_kernel (a block per row) finds the topk-th largest order-preserving integer key
 * by a 32-step bitwise search, each step a pass over the row's scores in global memory, then
 * writes the kept positions in an ordered pass (two block scans per 1024 positions).
 * dsa_select_radix_kernel (switch cuda_be.dsa_select, CINFER_CUDA_DSA_SELECT, default on)
 * stages the row's keys in shared memory once (rows of up to ~47k keys; longer ones read
 * global memory in each pass), finds the same threshold by an 8-bit radix select (at most
 * four histogram passes) and writes the same positions, warp by warp with ballots (one scan
 * over the warps).
 * Both switches: measured: not yet. Bit for bit with the old kernels by construction; the
 * GPU suite checks it (test_cuda_ops, each sparse dsa_attend case: "switches (DSA_SELECT,
 * DSA_SCORE) on = off, bit for bit", the outputs of all four settings). */
#include "cuda_internal.h"
#include <math.h>

enum { SEL_THREADS = 1024, SCORE_KEYS = 64, SCORE_THREADS = 256 };

/* score[t, s] for s <= pos[t] of the sparse rows; grid (key blocks of SCORE_KEYS, n), a warp
 * per key at a time; the row's queries in shared memory, the key row in a per-warp slot. */
__global__ void dsa_score_kernel(float *score, int ld, cb_keyrows kr, const int32_t *pos, const float *iq,
                                 const float *iw, float w_scale, float ks, int ih, int id, int topk) {
    pdl_enter();
    extern __shared__ float sm[];
    const int t = blockIdx.y, L = (pos[t] + 1) / kr.ratio;
    if (L <= topk) return;                       /* dense row: no scores */
    const int s0 = blockIdx.x * SCORE_KEYS;
    if (s0 >= L) return;
    const float *key_cache = (kr.tab ? kr.tab[(int64_t)t * kr.tab_step] : kr.base) + kr.off;
    const int32_t *tb = pg_table(kr.pg, t);      /* paged keys: the row's block table */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    float *qs = sm, *kw = sm + (size_t)ih * id + (size_t)warp * id;
    for (int i = threadIdx.x; i < ih * id; i += blockDim.x) qs[i] = iq[(int64_t)t * ih * id + i];
    __syncthreads();
    const int s1 = L < s0 + SCORE_KEYS ? L : s0 + SCORE_KEYS;
    for (int s = s0 + warp; s < s1; s += nw) {
        const float *krow = key_cache + pg_row(tb, kr.pg.blk_log2, s) * id;
        for (int d = lane; d < id; d += 32) kw[d] = krow[d];
        __syncwarp();
        float sc = 0.0f;
        for (int h = 0; h < ih; h++) {
            float dot = 0.0f;
            for (int d = lane; d < id; d += 32) dot = fmaf(qs[h * id + d], kw[d], dot);
            for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
            sc = __fmaf_rn(dot > 0.0f ? __fmul_rn(dot, ks) : 0.0f, __fmul_rn(iw[(int64_t)t * ih + h], w_scale), sc);
        }
        if (lane == 0) score[(int64_t)t * ld + s] = isnan(sc) ? -INFINITY : sc;
        __syncwarp();
    }
}

/* The scores of dsa_score_kernel, bit for bit, with four lanes per key (a block of
 * SC4_THREADS takes SC4_KEYS keys: thread x is lane r = x % 4 of key s0 + x / 4). In
 * dsa_score_kernel lane j of the warp sums q[d]·k[d] over d = j, j + 32, ... (fmaf from 0)
 * and the xor-butterfly (16, 8, 4, 2, 1) adds the 32 lane sums; float addition is
 * commutative, so every lane ends with the same tree. Here lane r of a key holds k[d] for
 * d = 4i + r + 32m (i < 8, m < ID/32) in registers, forms the 8 lane sums j = 4i + r of that
 * tree in the same fmaf order, adds them as the butterfly's levels 16, 8, 4 do (i with
 * i + 4, then i + 2, then i + 1), and levels 2 and 1 are two xor shuffles among the key's
 * four lanes. The queries sit in shared memory permuted so that lane r reads its 8·ID/32
 * values as float4 broadcasts (a stride of 8·ID/32 + 4 floats per r: the four lanes' loads
 * fall on different banks). The heads are summed in order h = 0..ih-1 by
 * fmaf(relu(dot), iw[h] · w_scale, sum) (what dsa_score_kernel compiles to; written with
 * the _rn intrinsics so that no contraction can differ). ID % 4 == 0, ID <= 128. */
enum { SC4_THREADS = 256, SC4_KEYS = SC4_THREADS / 4 };
template <int ID>
__global__ void __launch_bounds__(SC4_THREADS) dsa_score4_kernel(float *score, int ld, cb_keyrows kr, const int32_t *pos,
                                                                 const float *iq, const float *iw, float w_scale,
                                                                 float ks, int ih, int topk) {
    constexpr int M = (ID + 31) / 32, C = 8 * M, RS = C + 4, HS = 4 * RS;
    static_assert(ID % 4 == 0 && ID <= 128, "dsa_score4_kernel: ID % 4 == 0, ID <= 128");
    pdl_enter();
    extern __shared__ float4 sc4_sm[];
    const int t = blockIdx.y, L = (pos[t] + 1) / kr.ratio;
    if (L <= topk) return;                       /* dense row: no scores */
    const int s0 = blockIdx.x * SC4_KEYS;
    if (s0 >= L) return;
    const float *key_cache = (kr.tab ? kr.tab[(int64_t)t * kr.tab_step] : kr.base) + kr.off;
    float *qp = (float *)sc4_sm, *wsh = qp + (size_t)ih * HS;
    const float *q = iq + (int64_t)t * ih * ID;
    for (int i = threadIdx.x; i < ih * HS; i += blockDim.x) {
        const int h = i / HS, r = i % HS / RS, c = i % RS;
        float v = 0.0f;
        if (c < C) {
            const int d = 4 * (c / M) + r + 32 * (c % M);
            if (d < ID) v = q[h * ID + d];
        }
        qp[i] = v;
    }
    for (int h = threadIdx.x; h < ih; h += blockDim.x) wsh[h] = __fmul_rn(iw[(int64_t)t * ih + h], w_scale);
    const int r = threadIdx.x & 3, s = s0 + (threadIdx.x >> 2);
    const float *krow = key_cache + pg_row(pg_table(kr.pg, t), kr.pg.blk_log2, s < L ? s : s0) * ID;   /* past L: any row held */
    float k[C];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int m = 0; m < M; m++) k[i * M + m] = 4 * i + 32 * m < ID ? krow[4 * i + r + 32 * m] : 0.0f;
    __syncthreads();
    const float *qr = qp + r * RS;
    float sum = 0.0f;
    for (int h = 0; h < ih; h++) {
        const float4 *q4 = (const float4 *)(qr + (size_t)h * HS);
        float qv[C];
#pragma unroll
        for (int c = 0; c < C / 4; c++) {
            const float4 v = q4[c];
            qv[4 * c] = v.x; qv[4 * c + 1] = v.y; qv[4 * c + 2] = v.z; qv[4 * c + 3] = v.w;
        }
        float p[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            p[i] = 0.0f;
#pragma unroll
            for (int m = 0; m < M; m++)
                if (4 * i + 32 * m < ID) p[i] = __fmaf_rn(qv[i * M + m], k[i * M + m], p[i]);
        }
        float dot = __fadd_rn(__fadd_rn(__fadd_rn(p[0], p[4]), __fadd_rn(p[2], p[6])),
                              __fadd_rn(__fadd_rn(p[1], p[5]), __fadd_rn(p[3], p[7])));
        dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, 2));
        dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, 1));
        sum = __fmaf_rn(dot > 0.0f ? __fmul_rn(dot, ks) : 0.0f, wsh[h], sum);
    }
    if (s < L && r == 0) score[(int64_t)t * ld + s] = isnan(sum) ? -INFINITY : sum;
}

/* order-preserving integer key of a float (larger float, larger key) */
static __device__ __forceinline__ unsigned okey(float f) {
    unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __device__ int sel_block_count(int v, int *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : 0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* exclusive prefix sum of v over the block (in thread order), and the block total in *total */
static __device__ int sel_block_scan(int v, int *sh, int *total) {
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, x, o);
        if (l >= o) x += y;
    }
    __syncthreads();
    if (l == 31) sh[w] = x;
    __syncthreads();
    if (w == 0) {
        int s = l < nw ? sh[l] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            int y = __shfl_up_sync(0xffffffffu, s, o);
            if (l >= o) s += y;
        }
        if (l < nw) sh[32 + l] = s;   /* inclusive over warps */
    }
    __syncthreads();
    *total = sh[32 + nw - 1];
    return (w > 0 ? sh[32 + w - 1] : 0) + x - v;
}

/* A row of L <= topk keys: with nsel, all its positions and their count; 1 (the row is done) */
static __device__ __forceinline__ int sel_dense(int32_t *out, int32_t *nsel, int t, int L, int topk) {
    if (L > topk) return 0;
    if (nsel) {
        for (int i = threadIdx.x; i < L; i += blockDim.x) out[i] = i;
        if (threadIdx.x == 0) nsel[t] = L;
    }
    return 1;
}

/* sel[t · sel_stride ..] = the kept positions of sparse row t (L = (pos[t] + 1) / ratio keys),
 * ascending, nsel[t] = topk; a block per row */
__global__ void __launch_bounds__(SEL_THREADS) dsa_select_kernel(int32_t *sel, int sel_stride, int32_t *nsel,
                                                                 const float *score, int ld, const int32_t *pos,
                                                                 int ratio, int topk) {
    pdl_enter();
    __shared__ int sh[64];
    const int t = blockIdx.x, L = (pos[t] + 1) / ratio;
    if (sel_dense(sel + (int64_t)t * sel_stride, nsel, t, L, topk)) return;
    const float *sc = score + (int64_t)t * ld;
    unsigned T = 0;
    for (int b = 31; b >= 0; b--) {              /* the largest T with count(key >= T) >= topk */
        const unsigned cand = T | (1u << b);
        int c = 0;
        for (int s = threadIdx.x; s < L; s += blockDim.x) c += okey(sc[s]) >= cand;
        if (sel_block_count(c, sh) >= topk) T = cand;
    }
    int gt = 0;
    for (int s = threadIdx.x; s < L; s += blockDim.x) gt += okey(sc[s]) > T;
    const int need = topk - sel_block_count(gt, sh);   /* ties at T taken, lowest positions first */
    int eq_before = 0, taken = 0;
    int32_t *out = sel + (int64_t)t * sel_stride;
    for (int base = 0; base < L; base += blockDim.x) {
        const int s = base + threadIdx.x;
        const unsigned k = s < L ? okey(sc[s]) : 0u;
        const int is_eq = s < L && k == T, is_gt = s < L && k > T;
        int eq_total, take_total;
        const int eq_rank = eq_before + sel_block_scan(is_eq, sh, &eq_total);
        const int take = is_gt || (is_eq && eq_rank < need);
        const int at = taken + sel_block_scan(take, sh, &take_total);
        if (take && at < topk) out[at] = s;
        eq_before += eq_total;
        taken += take_total;
    }
    if (nsel && threadIdx.x == 0) nsel[t] = topk;
}

/* The same selection as dsa_select_kernel (a block per row) in fewer passes. STAGED: the
 * row's order-preserving keys are staged once in dynamic shared memory and every pass reads
 * them there (rows of up to ~47k keys); else every pass reads the scores from global memory
 * as dsa_select_kernel does (longer rows), one pass for the keys' min and max, up to four
 * histogram passes, two for the write, instead of 34. The topk-th largest key T by an 8-bit
 * radix select below the bits common to all of the row's keys (their min and max tell
 * which; at most four passes of up to 8 bits, most significant first; each pass histograms
 * the digit of the keys that match the digits chosen so far, in SELR_COPIES shared
 * histograms, lane % 16 picking one, so that equal digits in a warp (the common case: the
 * first digit holds exponent bits) collide at most 2-way), then the ordered write: each
 * warp owns a contiguous run of positions, counts its keys > T and == T, a scan over the
 * warps gives each run's start, and the run is written 32 positions at a time with ballots.
 * Ties at T are taken from the lowest positions (need = topk - count(key > T)), as in
 * dsa_select_kernel: the same positions in the same order. Dynamic shared memory: the
 * histograms, then (STAGED) L keys. */
enum { SELR_COPIES = 16, SELR_STRIDE = 257 };   /* 257: copy c of bin b on bank (c + b) % 32 */
template <bool STAGED>
__global__ void __launch_bounds__(SEL_THREADS) dsa_select_radix_kernel(int32_t *sel, int sel_stride, int32_t *nsel,
                                                                       const float *score, int ld, const int32_t *pos,
                                                                       int ratio, int topk) {
    pdl_enter();
    extern __shared__ unsigned selr_sm[];
    __shared__ unsigned tot[256];
    __shared__ int wsum[2][32];
    __shared__ unsigned wmin[32], wmax[32], s_digit;
    __shared__ int s_rem;
    const int t = blockIdx.x, L = (pos[t] + 1) / ratio;
    if (sel_dense(sel + (int64_t)t * sel_stride, nsel, t, L, topk)) return;
    unsigned *hist = selr_sm, *key = selr_sm + SELR_COPIES * SELR_STRIDE;
    const float *sc = score + (int64_t)t * ld;
    const auto key_at = [&](int s) { return STAGED ? key[s] : okey(sc[s]); };
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int i = threadIdx.x; i < SELR_COPIES * SELR_STRIDE; i += blockDim.x) hist[i] = 0;
    unsigned kmin = 0xffffffffu, kmax = 0u;
#pragma unroll 8
    for (int s = threadIdx.x; s < L; s += blockDim.x) {
        const unsigned k = okey(sc[s]);
        if (STAGED) key[s] = k;
        kmin = k < kmin ? k : kmin;
        kmax = k > kmax ? k : kmax;
    }
    for (int o = 16; o > 0; o >>= 1) {
        kmin = min(kmin, __shfl_xor_sync(0xffffffffu, kmin, o));
        kmax = max(kmax, __shfl_xor_sync(0xffffffffu, kmax, o));
    }
    if (lane == 0) { wmin[w] = kmin; wmax[w] = kmax; }
    __syncthreads();
    kmin = lane < nw ? wmin[lane] : 0xffffffffu;
    kmax = lane < nw ? wmax[lane] : 0u;
    for (int o = 16; o > 0; o >>= 1) {
        kmin = min(kmin, __shfl_xor_sync(0xffffffffu, kmin, o));
        kmax = max(kmax, __shfl_xor_sync(0xffffffffu, kmax, o));
    }
    /* the bits from hi up are the same in every key of the row: the digits start below them
     * (fewer passes, and the first one's keys spread over more bins); all keys equal: none */
    int hi = kmin == kmax ? 0 : 32 - __clz((int)(kmin ^ kmax));
    unsigned mask = hi == 32 ? 0u : ~((1u << hi) - 1u), prefix = kmin & mask;
    unsigned *my = hist + (lane & (SELR_COPIES - 1)) * SELR_STRIDE;
    int rem = topk;                              /* rank of T among the keys matching prefix */
    while (hi > 0) {
        const int shift = hi > 8 ? hi - 8 : 0;
        const unsigned dmask = (1u << (hi - shift)) - 1u;
#pragma unroll 4
        for (int s = threadIdx.x; s < L; s += blockDim.x) {
            const unsigned k = key_at(s);
            if ((k & mask) == prefix) atomicAdd(&my[(k >> shift) & dmask], 1u);
        }
        __syncthreads();
        if (threadIdx.x < 256) {
            unsigned c = 0;
            for (int j = 0; j < SELR_COPIES; j++) {
                c += hist[j * SELR_STRIDE + threadIdx.x];
                hist[j * SELR_STRIDE + threadIdx.x] = 0;   /* for the next pass (after two barriers) */
            }
            tot[threadIdx.x] = c;
        }
        __syncthreads();
        if (w == 0) {                            /* lane l: bins 255 - 8l down to 248 - 8l */
            int c[8], sum = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) { c[j] = (int)tot[255 - 8 * lane - j]; sum += c[j]; }
            int inc = sum;                       /* keys matching prefix in bins >= this lane's lowest */
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o) inc += y;
            }
            int above = inc - sum;
            if (above < rem && rem <= inc) {     /* exactly one lane: the count matching prefix is >= rem >= 1 */
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    if (above + c[j] >= rem) {
                        s_digit = (unsigned)(255 - 8 * lane - j);
                        s_rem = rem - above;
                        break;
                    }
                    above += c[j];
                }
            }
        }
        __syncthreads();
        prefix |= s_digit << shift;
        mask |= dmask << shift;
        rem = s_rem;
        hi = shift;
    }
    const unsigned T = prefix;                   /* the topk-th largest key */
    const int need = rem;                        /* topk - count(key > T): the ties at T to take */
    const int chunk = (L + nw * 32 - 1) / (nw * 32) * 32;
    const int b0 = w * chunk, b1 = L < b0 + chunk ? L : b0 + chunk;
    int ngt = 0, neq = 0;
    for (int s = b0 + lane; s < b1; s += 32) {
        const unsigned k = key_at(s);
        ngt += k > T;
        neq += k == T;
    }
    for (int o = 16; o > 0; o >>= 1) {
        ngt += __shfl_xor_sync(0xffffffffu, ngt, o);
        neq += __shfl_xor_sync(0xffffffffu, neq, o);
    }
    if (lane == 0) { wsum[0][w] = ngt; wsum[1][w] = neq; }
    __syncthreads();
    int gt_before = lane < w ? wsum[0][lane] : 0, eq_before = lane < w ? wsum[1][lane] : 0;
    for (int o = 16; o > 0; o >>= 1) {
        gt_before += __shfl_xor_sync(0xffffffffu, gt_before, o);
        eq_before += __shfl_xor_sync(0xffffffffu, eq_before, o);
    }
    int taken = gt_before + (eq_before < need ? eq_before : need);
    const unsigned lt = (1u << lane) - 1u;
    int32_t *out = sel + (int64_t)t * sel_stride;
    if (nsel && threadIdx.x == 0) nsel[t] = topk;
    for (int base = b0; base < b1; base += 32) {
        const int s = base + lane;
        const unsigned k = s < b1 ? key_at(s) : 0u;
        const int is_gt = s < b1 && k > T, is_eq = s < b1 && k == T;
        const unsigned eqm = __ballot_sync(0xffffffffu, is_eq);
        const int take = is_gt || (is_eq && eq_before + __popc(eqm & lt) < need);
        const unsigned tm = __ballot_sync(0xffffffffu, take);
        const int at = taken + __popc(tm & lt);
        if (take && at < topk) out[at] = s;
        eq_before += __popc(eqm);
        taken += __popc(tm);
    }
}

/* dsa_score4_kernel for ih heads of id dims: its shared memory, 0 when id has no instance */
static size_t score4_smem(int ih, int id) {
    if (id != 16 && id != 32 && id != 64 && id != 128) return 0;
    const int M = (id + 31) / 32;
    return ((size_t)ih * 4 * (8 * M + 4) + (size_t)ih) * sizeof(float);
}

/* The scores by dsa_score4_kernel; 0 when it has no instance for id or its shared memory
 * cannot be had (the caller then takes dsa_score_kernel). */
static int score4_launch(cuda_be *cb, float *score, int ld, cb_keyrows kr, const int32_t *pos, int n, int max_keys,
                         const float *iq, const float *iw, float w_scale, float ks, int ih, int id, int topk) {
    static int set[4];
    const size_t smem = score4_smem(ih, id);
    const dim3 grid((unsigned)((max_keys + SC4_KEYS - 1) / SC4_KEYS), (unsigned)n), block(SC4_THREADS);
#define SC4_GO(ID, I)                                                                                                 \
    do {                                                                                                              \
        if (!cb_smem_ok(cb, dsa_score4_kernel<ID>, smem, &set[I])) return 0;                                          \
        cb_launch(cb, dsa_score4_kernel<ID>, grid, block, smem, score, ld, kr, pos, iq, iw, w_scale, ks, ih, topk); \
        return 1;                                                                                                     \
    } while (0)
    switch (id) {
    case 16: SC4_GO(16, 0);
    case 32: SC4_GO(32, 1);
    case 64: SC4_GO(64, 2);
    case 128: SC4_GO(128, 3);
    default: return 0;
    }
#undef SC4_GO
}

int cb_index_select(cuda_be *cb, int32_t *sel, int sel_stride, int32_t *nsel, cb_keyrows kr, int n,
                    const int32_t *pos, int max_keys, const float *iq, const float *iw, float w_scale, float ks, int ih,
                    int id, int topk) {
    static int score_set = 0, select_set = 0;
    if (n <= 0) return 1;
    const int ld = max_keys > 0 ? max_keys : 1;
    float *score = NULL;                         /* rows of at most topk keys read no scores */
    if (max_keys > topk) {                       /* some row may be sparse */
        if (!(score = (float *)cb_scratch_get(cb, &cb->mla_work[1], (size_t)n * ld * sizeof(float)))) return 0;
        if (!(cb->dsa_score && score4_launch(cb, score, ld, kr, pos, n, max_keys, iq, iw, w_scale, ks, ih, id, topk))) {
            const size_t smem = ((size_t)ih * id + (size_t)(SCORE_THREADS / 32) * id) * sizeof(float);
            if (!cb_smem_ok(cb, dsa_score_kernel, smem, &score_set)) {
                cb_fail_msg(cb, "index scores: the indexer queries of a row do not fit in shared memory");
                return 0;
            }
            dim3 sgrid((unsigned)((max_keys + SCORE_KEYS - 1) / SCORE_KEYS), (unsigned)n);
            cb_launch(cb, dsa_score_kernel, sgrid, dim3(SCORE_THREADS), smem, score, ld, kr, pos, iq, iw, w_scale, ks,
                      ih, id, topk);
        }
        if (cb_launched(cb, "index scores")) return 0;
    }
    const size_t hsmem = (size_t)SELR_COPIES * SELR_STRIDE * sizeof(unsigned);
    const size_t ssmem = hsmem + (size_t)ld * sizeof(unsigned);   /* the staged keys too */
    const dim3 grid((unsigned)n), block(SEL_THREADS);
    if (cb->dsa_select && cb_smem_ok(cb, dsa_select_radix_kernel<true>, ssmem, &select_set))
        cb_launch(cb, dsa_select_radix_kernel<true>, grid, block, ssmem, sel, sel_stride, nsel, (const float *)score, ld,
                  pos, kr.ratio, topk);
    else if (cb->dsa_select)
        cb_launch(cb, dsa_select_radix_kernel<false>, grid, block, hsmem, sel, sel_stride, nsel, (const float *)score, ld,
                  pos, kr.ratio, topk);
    else
        cb_launch(cb, dsa_select_kernel, grid, block, 0, sel, sel_stride, nsel, (const float *)score, ld, pos, kr.ratio,
                  topk);
    return !cb_launched(cb, "index top-k");
}

void cb_dsa_attend(cuda_be *cb, float *out, const float *qcat, const float *lat_cache, const float *key_cache,
                   float *const *tab, int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale,
                   const float *iq, const float *iw, float w_scale, int ih, int id, int topk, const ci_pages *pages) {
    if (n <= 0 || n_heads <= 0 || lat <= 0 || max_keys <= 0 || topk <= 0) return;
    if (max_keys > topk) {                       /* some row may be sparse */
        int32_t *sel = (int32_t *)cb_scratch_get(cb, &cb->mla_work[2], (size_t)n * topk * sizeof(int32_t));
        cb_keyrows kr = { key_cache, tab ? tab + 1 : NULL, 2, 1, 0, cb_pages(pages) };
        if (!sel || !cb_index_select(cb, sel, topk, NULL, kr, n, pos, max_keys, iq, iw, w_scale, 1.0f, ih, id, topk))
            return;
        cb_mla_attn_launch(cb, out, qcat, lat_cache, tab, 2, n, pos, sel, topk, topk < max_keys ? topk : max_keys, n_heads,
                           lat, scale, pages);
        return;
    }
    cb_mla_attn_launch(cb, out, qcat, lat_cache, tab, 2, n, pos, NULL, topk, max_keys, n_heads, lat, scale, pages);
}
