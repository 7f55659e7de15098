/* dsa.cu — DeepSeek Sparse Attention on the device (backend.h dsa_attend): the lightning
 * index scores of the sparse rows, their top-k selection, then the MLA attention kernel of
 * mla.cu over the kept latent rows. Rows whose context fits in topk attend densely in the
 * same launch. Nothing synchronises; launches are sized by max_keys.
 *
 * dsa_score_kernel gives each sparse row (pos[t] + 1 > topk) its scores
 * Σ_h (w[h] · w_scale) · relu(q[h] · k[s]) (a warp per key, the row's indexer queries in
 * shared memory, heads summed in order); dsa_select_kernel (a block per row) finds the
 * topk-th largest score by a bitwise search on order-preserving integer keys, then writes
 * the kept positions in ascending order, ties at the threshold taken from the lowest
 * position (the rule of the CPU's ci_topk_positions). */
#include "cuda_internal.h"
#include <math.h>

enum { SEL_THREADS = 1024, SCORE_KEYS = 64, SCORE_THREADS = 256 };

/* score[t, s] for s <= pos[t] of the sparse rows; grid (key blocks of SCORE_KEYS, n), a warp
 * per key at a time; the row's queries in shared memory, the key row in a per-warp slot. */
__global__ void dsa_score_kernel(float *score, int ld, const float *key_cache, float *const *tab, const int32_t *pos,
                                 const float *iq, const float *iw, float w_scale, int ih, int id, int topk) {
    pdl_enter();
    extern __shared__ float sm[];
    const int t = blockIdx.y, L = pos[t] + 1;
    if (L <= topk) return;                       /* dense row: no scores */
    const int s0 = blockIdx.x * SCORE_KEYS;
    if (s0 >= L) return;
    if (tab) key_cache = tab[2 * (int64_t)t + 1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    float *qs = sm, *kw = sm + (size_t)ih * id + (size_t)warp * id;
    for (int i = threadIdx.x; i < ih * id; i += blockDim.x) qs[i] = iq[(int64_t)t * ih * id + i];
    __syncthreads();
    const int s1 = L < s0 + SCORE_KEYS ? L : s0 + SCORE_KEYS;
    for (int s = s0 + warp; s < s1; s += nw) {
        for (int d = lane; d < id; d += 32) kw[d] = key_cache[(int64_t)s * id + d];
        __syncwarp();
        float sc = 0.0f;
        for (int h = 0; h < ih; h++) {
            float dot = 0.0f;
            for (int d = lane; d < id; d += 32) dot = fmaf(qs[h * id + d], kw[d], dot);
            for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
            sc += (iw[(int64_t)t * ih + h] * w_scale) * (dot > 0.0f ? dot : 0.0f);
        }
        if (lane == 0) score[(int64_t)t * ld + s] = isnan(sc) ? -INFINITY : sc;
        __syncwarp();
    }
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

/* sel[t, 0..topk) = the kept positions of sparse row t, ascending; a block per row */
__global__ void __launch_bounds__(SEL_THREADS) dsa_select_kernel(int32_t *sel, const float *score, int ld,
                                                                 const int32_t *pos, int topk) {
    pdl_enter();
    __shared__ int sh[64];
    const int t = blockIdx.x, L = pos[t] + 1;
    if (L <= topk) return;
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
    int32_t *out = sel + (int64_t)t * topk;
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
}

void cb_dsa_attend(cuda_be *cb, float *out, const float *qcat, const float *lat_cache, const float *key_cache,
                   float *const *tab, int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale,
                   const float *iq, const float *iw, float w_scale, int ih, int id, int topk) {
    static int score_set = 0;
    if (n <= 0 || n_heads <= 0 || lat <= 0 || max_keys <= 0 || topk <= 0) return;
    if (max_keys > topk) {                       /* some row may be sparse */
        const size_t smem = ((size_t)ih * id + (size_t)(SCORE_THREADS / 32) * id) * sizeof(float);
        if (!cb_smem_ok(cb, dsa_score_kernel, smem, &score_set)) {
            cb_fail_msg(cb, "DSA index scores: the indexer queries of a row do not fit in shared memory");
            return;
        }
        float *score = (float *)cb_scratch_get(cb, &cb->mla_work[1], (size_t)n * max_keys * sizeof(float));
        int32_t *sel = (int32_t *)cb_scratch_get(cb, &cb->mla_work[2], (size_t)n * topk * sizeof(int32_t));
        if (!score || !sel) return;
        dim3 sgrid((unsigned)((max_keys + SCORE_KEYS - 1) / SCORE_KEYS), (unsigned)n);
        cb_launch(cb, dsa_score_kernel, sgrid, dim3(SCORE_THREADS), smem, score, max_keys, key_cache, tab, pos, iq, iw, w_scale,
                  ih, id, topk);
        if (cb_launched(cb, "dsa index scores")) return;
        cb_launch(cb, dsa_select_kernel, dim3((unsigned)n), dim3(SEL_THREADS), 0, sel, (const float *)score, max_keys,
                  pos, topk);
        if (cb_launched(cb, "dsa top-k")) return;
        cb_mla_attn_launch(cb, out, qcat, lat_cache, tab, 2, n, pos, sel, topk, topk < max_keys ? topk : max_keys, n_heads,
                        lat, scale);
        return;
    }
    cb_mla_attn_launch(cb, out, qcat, lat_cache, tab, 2, n, pos, NULL, topk, max_keys, n_heads, lat, scale);
}
