/* attn.cu — causal GQA attention over the f32 KV cache.
 *
 * Few query rows (decode, n <= SPLIT_MAX_N, and every kv_tab batch step): split-K. The
 * keys 0..pos[t] are cut into chunks; a block takes one (row, kv head, chunk) and every
 * query head of that kv group, so K and V are read once per group; the chunk's softmax is
 * local (max m, sum l), and a combine kernel merges the chunks of a row with their (m, l).
 * The grid is sized by max_keys, not by the position, so a recorded decode step serves
 * every later position: blocks whose chunk starts past pos[t] return at once. Three
 * kernels, by shape and switch:
 *  - attn_decode2_kernel (CINFER_CUDA_ATTN_DECODE2=1, cuda_be.attn_decode2; head_dim a
 *    multiple of 4 up to 256, 16-byte aligned rows, groups <= MAX_GROUP): chunks of
 *    D2_CHUNK = 128 keys, key rows read coalesced (8 / 16 / 32 lanes per row across the head
 *    dimension, float4 loads, several rows in flight per lane), scores summed by shuffles,
 *    p·V summed in registers; merged by attn_combine2_kernel (a block per 32 dimensions of a
 *    (row, head), the chunks split over 8 warps).
 *  - attn_split_vec_kernel (switch off; head_dim a multiple of 4 up to 256, groups <= 8):
 *    chunks of 32 keys, a warp per 8 key rows, lanes across the head dimension.
 *  - attn_split_kernel (anything else, e.g. odd head dims): chunks of CHUNK = 256 keys, each
 *    lane scores whole keys (its own key row against the group's queries from shared
 *    memory), then the threads sum p·V along the head dimension.
 * The last two are merged by attn_combine_kernel (a block per (row, head)).
 *
 * Many query rows (prefill), head_dim 64 / 128 / 256: flash attention on tensor cores
 * (attn_flash_kernel below). Other head sizes: a block takes QT query rows of one head and walks the key
 * tiles up to its last row's position with an online softmax (running max and sum per
 * row, rescaled when the max grows), K and V tiles staged in shared memory.
 *
 * Paged caches (rope_attend's pages, ci_pages by value; tab NULL: not paged, the kernels
 * read what they always did): every kernel reads key / value position j at cache row
 * pg_row(table, j) (cuda_internal.h) instead of row j, one table entry per key row it loads
 * (d2_rows and the split kernels per row, the prefill / flash tile loaders per element /
 * float4 they stage; the entry is shared by the lanes of a row, an L1 hit). The decode
 * kernels take row t's own table with per_row (a batch step, kv_tab or not), else the
 * shared one; the prefill / flash kernels get a chunk of one sequence (never per_row:
 * cb_attention sends per-row tables to the split-K kernels whatever n). The order of every
 * sum is the unpaged one, so a paged cache gives the bits of an unpaged one with the same
 * rows. */
#include "cuda_internal.h"
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>

enum { CHUNK = 256, SPLIT_THREADS = 128, SPLIT_MAX_N = 8, MAX_GROUP = 16 };
enum { QT = 16, KT = 64, PF_THREADS = 128 };

__device__ __forceinline__ int row_pos(const int32_t *pos, int pos0, int t) { return pos ? pos[t] : pos0 + t; }

/* A chunk's local softmax: for each head h < G, the max m and the exp-sum l of its nj scores
 * at ps[h * ld ..], the scores replaced by exp(s - m) and (m, l) into ml[2h, 2h + 1]; warp
 * `warp` of nw takes heads warp, warp + nw, ... (both decode kernels). */
__device__ __forceinline__ void chunk_softmax(float *ps, int ld, float *ml, int G, int nj, int warp, int lane, int nw) {
    for (int h = warp; h < G; h += nw) {
        float m = -INFINITY;
        for (int j = lane; j < nj; j += 32) m = fmaxf(m, ps[h * ld + j]);
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float l = 0.0f;
        for (int j = lane; j < nj; j += 32) {
            const float p = expf(ps[h * ld + j] - m);
            ps[h * ld + j] = p;
            l += p;
        }
        for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        if (lane == 0) { ml[2 * h] = m; ml[2 * h + 1] = l; }
    }
}

/* part: [n, n_heads, n_chunks, hd + 2] (o, m, l) */
__global__ void __launch_bounds__(SPLIT_THREADS) attn_split_kernel(
    float *part, const float *q, const float *kc, const float *vc, const int32_t *pos, int pos0, int n_heads, int n_kv,
    int hd, int kv_stride, float scale, int n_chunks, float *const *kv_tab, ci_pages pg) {
    pdl_enter();
    extern __shared__ float sm[];
    const int g = blockIdx.x, chunk = blockIdx.y, t = blockIdx.z;
    if (kv_tab) { kc = kv_tab[2 * t]; vc = kv_tab[2 * t + 1]; }
    const int G = n_heads / n_kv;
    const int L = row_pos(pos, pos0, t) + 1;
    const int j0 = chunk * CHUNK;
    if (j0 >= L) return;
    const int nj = L - j0 < CHUNK ? L - j0 : CHUNK;
    float *qs = sm;                     /* [G, hd] scaled queries */
    float *ps = sm + G * hd;            /* [G, CHUNK] scores, then probabilities */
    float *ml = ps + G * CHUNK;         /* [G, 2] */
    const float *qrow = q + ((int64_t)t * n_heads + (int64_t)g * G) * hd;
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) qs[i] = qrow[i] * scale;
    __syncthreads();
    const float *kb = kc + (int64_t)g * hd, *vb = vc + (int64_t)g * hd;
    const int32_t *tb = pg_table(pg, t);          /* the row's block table, NULL unpaged */
    const int lg = pg.blk_log2;
    for (int j = threadIdx.x; j < nj; j += blockDim.x) {
        const float *kr = kb + pg_row(tb, lg, j0 + j) * kv_stride;
        float s[MAX_GROUP];
#pragma unroll
        for (int h = 0; h < MAX_GROUP; h++) s[h] = 0.0f;
        if ((hd & 3) == 0 && ((uintptr_t)kr & 15) == 0) {
            for (int d = 0; d < hd; d += 4) {
                float4 k4 = *(const float4 *)(kr + d);
#pragma unroll
                for (int h = 0; h < MAX_GROUP; h++)
                    if (h < G) {
                        const float *qq = qs + h * hd + d;
                        s[h] = fmaf(k4.x, qq[0], fmaf(k4.y, qq[1], fmaf(k4.z, qq[2], fmaf(k4.w, qq[3], s[h]))));
                    }
            }
        } else {
            for (int d = 0; d < hd; d++) {
                float kv = kr[d];
#pragma unroll
                for (int h = 0; h < MAX_GROUP; h++)
                    if (h < G) s[h] = fmaf(kv, qs[h * hd + d], s[h]);
            }
        }
#pragma unroll
        for (int h = 0; h < MAX_GROUP; h++)
            if (h < G) ps[h * CHUNK + j] = s[h];
    }
    __syncthreads();
    /* per head: max and exp-sum over the chunk (one warp per head, warps loop over heads) */
    chunk_softmax(ps, CHUNK, ml, G, nj, threadIdx.x >> 5, threadIdx.x & 31, blockDim.x >> 5);
    __syncthreads();
    /* o[h][d] = sum_j p[h][j] v[j][d] */
    float *out = part + (((int64_t)t * n_heads + (int64_t)g * G) * n_chunks + chunk) * (hd + 2);
    const int64_t hstride = (int64_t)n_chunks * (hd + 2);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o[MAX_GROUP];
#pragma unroll
        for (int h = 0; h < MAX_GROUP; h++) o[h] = 0.0f;
        for (int j = 0; j < nj; j++) {
            float v = vb[pg_row(tb, lg, j0 + j) * kv_stride + d];
#pragma unroll
            for (int h = 0; h < MAX_GROUP; h++)
                if (h < G) o[h] = fmaf(ps[h * CHUNK + j], v, o[h]);
        }
#pragma unroll
        for (int h = 0; h < MAX_GROUP; h++)
            if (h < G) out[h * hstride + d] = o[h];
    }
    if (threadIdx.x < G) {
        out[threadIdx.x * hstride + hd] = ml[2 * threadIdx.x];
        out[threadIdx.x * hstride + hd + 1] = ml[2 * threadIdx.x + 1];
    }
}

/* Split-K for rows whose head_dim is a multiple of 4 (<= 256) and GQA groups <= 8: a block
 * takes VCHUNK = 32 keys of one (row, kv group) and warp w the keys 8w..8w+7 of them. A
 * decode step is bound by latency, not bandwidth, at the contexts it usually sees, so each
 * warp issues the 16-byte loads of all its 8 K rows (lanes across the head dimension)
 * before the first product, scores them per query head with shuffle sums, and after the
 * chunk's softmax (per head, as above) loads its 8 V rows at once and sums p·V; the 4
 * warps' sums meet in shared memory. */
enum { VCHUNK = 32, VKPW = 8, VGROUP = 8 };
__global__ void __launch_bounds__(128) attn_split_vec_kernel(float *part, const float *q, const float *kc,
                                                             const float *vc, const int32_t *pos, int pos0,
                                                             int n_heads, int n_kv, int hd, int kv_stride, float scale,
                                                             int n_chunks, float *const *kv_tab, ci_pages pg) {
    pdl_enter();
    extern __shared__ float sm[];
    const int g = blockIdx.x, chunk = blockIdx.y, t = blockIdx.z;
    if (kv_tab) { kc = kv_tab[2 * t]; vc = kv_tab[2 * t + 1]; }
    const int32_t *tb = pg_table(pg, t);          /* the row's block table, NULL unpaged */
    const int lg = pg.blk_log2;
    const int G = n_heads / n_kv;
    const int L = row_pos(pos, pos0, t) + 1;
    const int j0 = chunk * VCHUNK;
    if (j0 >= L) return;
    const int nj = L - j0 < VCHUNK ? L - j0 : VCHUNK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hd4 = hd >> 2;
    float *qs = sm;                                 /* [G, hd] scaled queries */
    float *ps = qs + G * hd;                        /* [G, VCHUNK] scores, then probabilities */
    float *ml = ps + G * VCHUNK;                    /* [G, 2] */
    float *red = ml + ((2 * G + 3) & ~3);           /* [4, G, hd] per-warp p·V sums (16-byte aligned) */
    const float *qrow = q + ((int64_t)t * n_heads + (int64_t)g * G) * hd;
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) qs[i] = qrow[i] * scale;
    __syncthreads();
    const float *kb = kc + (int64_t)g * hd, *vb = vc + (int64_t)g * hd;
    const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
    const int jw = warp * VKPW;                     /* this warp's first key in the chunk */
    {
        float4 k0[VKPW], k1[VKPW];
#pragma unroll
        for (int u = 0; u < VKPW; u++) {
            const int j = jw + u;
            const float4 *kr = (const float4 *)(kb + pg_row(tb, lg, j0 + (j < nj ? j : 0)) * kv_stride);
            k0[u] = lane < hd4 && j < nj ? kr[lane] : z4;
            k1[u] = lane + 32 < hd4 && j < nj ? kr[lane + 32] : z4;
        }
#pragma unroll
        for (int h = 0; h < VGROUP; h++) {
            if (h >= G) break;
            const float4 *qh = (const float4 *)(qs + h * hd);
            const float4 a = lane < hd4 ? qh[lane] : z4, b = lane + 32 < hd4 ? qh[lane + 32] : z4;
#pragma unroll
            for (int u = 0; u < VKPW; u++) {
                float sc = k0[u].x * a.x + k0[u].y * a.y + k0[u].z * a.z + k0[u].w * a.w +
                           k1[u].x * b.x + k1[u].y * b.y + k1[u].z * b.z + k1[u].w * b.w;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) sc += __shfl_xor_sync(0xffffffffu, sc, o);
                if (lane == 0 && jw + u < nj) ps[h * VCHUNK + jw + u] = sc;
            }
        }
    }
    __syncthreads();
    for (int h = warp; h < G; h += 4) {
        float sv = lane < nj ? ps[h * VCHUNK + lane] : -INFINITY;
        float m = sv;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        float p = lane < nj ? expf(sv - m) : 0.0f;
        if (lane < nj) ps[h * VCHUNK + lane] = p;
        float l = p;
        for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
        if (lane == 0) { ml[2 * h] = m; ml[2 * h + 1] = l; }
    }
    __syncthreads();
    {
        float4 v0[VKPW], v1[VKPW];
#pragma unroll
        for (int u = 0; u < VKPW; u++) {
            const int j = jw + u;
            const float4 *vr = (const float4 *)(vb + pg_row(tb, lg, j0 + (j < nj ? j : 0)) * kv_stride);
            v0[u] = lane < hd4 && j < nj ? vr[lane] : z4;
            v1[u] = lane + 32 < hd4 && j < nj ? vr[lane + 32] : z4;
        }
#pragma unroll
        for (int h = 0; h < VGROUP; h++) {
            if (h >= G) break;
            float4 a0 = z4, a1 = z4;
#pragma unroll
            for (int u = 0; u < VKPW; u++) {
                const float p = jw + u < nj ? ps[h * VCHUNK + jw + u] : 0.0f;
                a0.x = fmaf(p, v0[u].x, a0.x); a0.y = fmaf(p, v0[u].y, a0.y);
                a0.z = fmaf(p, v0[u].z, a0.z); a0.w = fmaf(p, v0[u].w, a0.w);
                a1.x = fmaf(p, v1[u].x, a1.x); a1.y = fmaf(p, v1[u].y, a1.y);
                a1.z = fmaf(p, v1[u].z, a1.z); a1.w = fmaf(p, v1[u].w, a1.w);
            }
            float4 *r = (float4 *)(red + ((int64_t)warp * G + h) * hd);
            if (lane < hd4) r[lane] = a0;
            if (lane + 32 < hd4) r[lane + 32] = a1;
        }
    }
    __syncthreads();
    float *out = part + (((int64_t)t * n_heads + (int64_t)g * G) * n_chunks + chunk) * (hd + 2);
    const int64_t hstride = (int64_t)n_chunks * (hd + 2);
    for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
        int h = i / hd, d = i % hd;
        float o = red[(0 * G + h) * hd + d] + red[(1 * G + h) * hd + d] + red[(2 * G + h) * hd + d] +
                  red[(3 * G + h) * hd + d];
        out[h * hstride + d] = o;
    }
    if (threadIdx.x < G) {
        out[threadIdx.x * hstride + hd] = ml[2 * threadIdx.x];
        out[threadIdx.x * hstride + hd + 1] = ml[2 * threadIdx.x + 1];
    }
}

/* Split-K decode kernel 2 (CINFER_CUDA_ATTN_DECODE2; head_dim a multiple of 4, <= 256, rows
 * 16-byte aligned, any group <= MAX_GROUP): a block of D2_THREADS takes ck = D2_CHUNK keys
 * of one (row, kv group) (fixed: a row's bits depend on neither max_keys nor the batch), so
 * the partials stay few. Key rows are read coalesced: a subgroup of SW = 8, 16 or 32 lanes per
 * key row (SW >= hd / 4 where it can), lanes across the head dimension with float4 loads (NI
 * = 1 or 2 of them per lane), each warp U = 8 / NI rows per subgroup in flight. Scores: the
 * lane's partial dot products with the group's queries (shared memory, a broadcast read per
 * U keys) summed over the subgroup by xor shuffles; then the chunk's softmax per head (max,
 * sum) as in attn_split_kernel; then p·V with the same layout, each subgroup summing its keys
 * in registers for up to 8 heads at a time (larger groups take the V rows again), the
 * subgroups of a warp met by shuffles, the warps by a fixed tree through shared memory.
 * With NI = 1 (head_dim <= 128) a warp's first K rows are loaded across the queries'
 * barrier and its first V rows from its last score pass on, so a block's K and V loads
 * overlap (with NI = 2 the registers would spill). Fixed orders throughout: same inputs, same bits. Part layout as above, merged by
 * attn_combine2_kernel (below) with chunk = ck. */
enum { D2_CHUNK = 128, D2_THREADS = 256, D2_WARPS = D2_THREADS / 32, D2_HB = 8 };
/* Rows jb + u * kpi + sub (u < U) of a chunk starting at key j0, lane sl's float4s sl + i * sw
 * of each (zeros past nj and past the head dimension); key j's cache row through the block
 * table tb (2^lg rows a block) when paged. */
template <int U, int NI>
__device__ __forceinline__ void d2_rows(float4 (&r)[U][NI], const float *base, int j0, int jb, int nj, int kpi, int sub,
                                        int sl, int sw, int hd4, int kv_stride, const int32_t *tb, int lg) {
    const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int j = jb + u * kpi + sub;
        const float4 *row = (const float4 *)(base + pg_row(tb, lg, j0 + (j < nj ? j : 0)) * kv_stride);
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int c = sl + i * sw;
            r[u][i] = j < nj && c < hd4 ? row[c] : z4;
        }
    }
}
template <int NI>
__global__ void __launch_bounds__(D2_THREADS, 2) attn_decode2_kernel(
    float *part, const float *q, const float *kc, const float *vc, const int32_t *pos, int pos0, int n_heads, int n_kv,
    int hd, int kv_stride, float scale, int n_chunks, int ck, float *const *kv_tab, ci_pages pg) {
    constexpr int U = 8 / NI;
    constexpr bool PRE_V = NI == 1;                 /* K and V rows early (with NI = 2 it would spill) */
    pdl_enter();
    extern __shared__ float4 sm2[];
    float *sm = (float *)sm2;
    const int g = blockIdx.x, chunk = blockIdx.y, t = blockIdx.z;
    if (kv_tab) { kc = kv_tab[2 * t]; vc = kv_tab[2 * t + 1]; }
    const int32_t *tb = pg_table(pg, t);          /* the row's block table, NULL unpaged */
    const int lg = pg.blk_log2;
    const int G = n_heads / n_kv;
    const int L = row_pos(pos, pos0, t) + 1;
    const int j0 = chunk * ck;
    if (j0 >= L) return;
    const int nj = L - j0 < ck ? L - j0 : ck;
    const int hd4 = hd >> 2;
    const int SW = hd4 <= 8 ? 8 : hd4 <= 16 ? 16 : 32, KPI = 32 / SW;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane / SW, sl = lane % SW;
    const int HB = G < D2_HB ? G : D2_HB;
    float *qs = sm;                                 /* [G, hd] scaled queries */
    float *ps = qs + G * hd;                        /* [G, ck] scores, then probabilities */
    float *ml = ps + G * ck;                        /* [G, 2] */
    float *red = ml + ((2 * G + 3) & ~3);           /* [D2_WARPS / 2, HB, hd] the warps' p·V sums */
    const float *qrow = q + ((int64_t)t * n_heads + (int64_t)g * G) * hd;
    for (int i = threadIdx.x; i < G * hd; i += D2_THREADS) qs[i] = qrow[i] * scale;
    const float *kb = kc + (int64_t)g * hd, *vb = vc + (int64_t)g * hd;
    const float4 z4 = make_float4(0.f, 0.f, 0.f, 0.f);
    const int step = D2_WARPS * U * KPI;            /* keys per pass of the block */
    const int jb0 = warp * U * KPI;                 /* this warp's first pass */
    /* with PRE_V: the first pass's K rows in flight through the barrier, and the first p·V
     * pass's V rows from the last score pass on (through the softmax) */
    float4 kr[U][NI], vr[U][NI];
    if (PRE_V && jb0 < nj) d2_rows<U, NI>(kr, kb, j0, jb0, nj, KPI, sub, sl, SW, hd4, kv_stride, tb, lg);
    __syncthreads();
    const float4 *qs4 = (const float4 *)qs;
    /* scores: this lane's keys jb + u * KPI + sub */
    for (int jb = jb0; jb < nj; jb += step) {
        if (!PRE_V || jb != jb0) d2_rows<U, NI>(kr, kb, j0, jb, nj, KPI, sub, sl, SW, hd4, kv_stride, tb, lg);
        if (PRE_V && jb + step >= nj) d2_rows<U, NI>(vr, vb, j0, jb0, nj, KPI, sub, sl, SW, hd4, kv_stride, tb, lg);
#pragma unroll 1
        for (int h = 0; h < G; h++) {
            float4 qv[NI];
#pragma unroll
            for (int i = 0; i < NI; i++) {
                const int c = sl + i * SW;
                qv[i] = c < hd4 ? qs4[h * hd4 + c] : z4;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                float s = 0.0f;
#pragma unroll
                for (int i = 0; i < NI; i++)
                    s = fmaf(kr[u][i].x, qv[i].x, fmaf(kr[u][i].y, qv[i].y, fmaf(kr[u][i].z, qv[i].z, fmaf(kr[u][i].w, qv[i].w, s))));
                for (int o = SW >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                const int j = jb + u * KPI + sub;
                if (sl == 0 && j < nj) ps[h * ck + j] = s;
            }
        }
    }
    __syncthreads();
    /* per head: max and exp-sum over the chunk (one warp per head, warps loop over heads) */
    chunk_softmax(ps, ck, ml, G, nj, warp, lane, D2_WARPS);
    __syncthreads();
    float *out = part + (((int64_t)t * n_heads + (int64_t)g * G) * n_chunks + chunk) * (hd + 2);
    const int64_t hstride = (int64_t)n_chunks * (hd + 2);
    float4 *red4 = (float4 *)red;
    for (int hb = 0; hb < G; hb += HB) {
        const int hn = G - hb < HB ? G - hb : HB;   /* heads in this pass */
        float4 acc[D2_HB][NI];
#pragma unroll
        for (int h = 0; h < D2_HB; h++)
#pragma unroll
            for (int i = 0; i < NI; i++) acc[h][i] = z4;
        for (int jb = jb0; jb < nj; jb += step) {
            if (!PRE_V || hb > 0 || jb != jb0)
                d2_rows<U, NI>(vr, vb, j0, jb, nj, KPI, sub, sl, SW, hd4, kv_stride, tb, lg);
#pragma unroll
            for (int h = 0; h < D2_HB; h++) {
                if (h < hn) {
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        const int j = jb + u * KPI + sub;
                        const float p = j < nj ? ps[(hb + h) * ck + j] : 0.0f;
#pragma unroll
                        for (int i = 0; i < NI; i++) {
                            acc[h][i].x = fmaf(p, vr[u][i].x, acc[h][i].x);
                            acc[h][i].y = fmaf(p, vr[u][i].y, acc[h][i].y);
                            acc[h][i].z = fmaf(p, vr[u][i].z, acc[h][i].z);
                            acc[h][i].w = fmaf(p, vr[u][i].w, acc[h][i].w);
                        }
                    }
                }
            }
        }
        /* the warp's subgroups, then the warps: fixed trees */
#pragma unroll
        for (int h = 0; h < D2_HB; h++)
#pragma unroll
            for (int i = 0; i < NI; i++)
                for (int o = SW; o < 32; o <<= 1) {
                    acc[h][i].x += __shfl_xor_sync(0xffffffffu, acc[h][i].x, o);
                    acc[h][i].y += __shfl_xor_sync(0xffffffffu, acc[h][i].y, o);
                    acc[h][i].z += __shfl_xor_sync(0xffffffffu, acc[h][i].z, o);
                    acc[h][i].w += __shfl_xor_sync(0xffffffffu, acc[h][i].w, o);
                }
        for (int s = D2_WARPS >> 1; s > 0; s >>= 1) {
            if (warp >= s && warp < 2 * s && sub == 0) {
#pragma unroll
                for (int h = 0; h < D2_HB; h++)
#pragma unroll
                    for (int i = 0; i < NI; i++) {
                        const int c = sl + i * SW;
                        if (h < hn && c < hd4) red4[((warp - s) * HB + h) * hd4 + c] = acc[h][i];
                    }
            }
            __syncthreads();
            if (warp < s && sub == 0) {
#pragma unroll
                for (int h = 0; h < D2_HB; h++)
#pragma unroll
                    for (int i = 0; i < NI; i++) {
                        const int c = sl + i * SW;
                        if (h < hn && c < hd4) {
                            const float4 r = red4[(warp * HB + h) * hd4 + c];
                            acc[h][i].x += r.x; acc[h][i].y += r.y; acc[h][i].z += r.z; acc[h][i].w += r.w;
                        }
                    }
            }
            __syncthreads();
        }
        if (warp == 0 && sub == 0) {
#pragma unroll
            for (int h = 0; h < D2_HB; h++)
#pragma unroll
                for (int i = 0; i < NI; i++) {
                    const int c = sl + i * SW;
                    if (h < hn && c < hd4) {
                        float *o = out + (int64_t)(hb + h) * hstride + 4 * c;
                        o[0] = acc[h][i].x; o[1] = acc[h][i].y; o[2] = acc[h][i].z; o[3] = acc[h][i].w;
                    }
                }
        }
    }
    if (threadIdx.x < G) {
        out[threadIdx.x * hstride + hd] = ml[2 * threadIdx.x];
        out[threadIdx.x * hstride + hd + 1] = ml[2 * threadIdx.x + 1];
    }
}

/* Merges a row's chunks: weights exp(m_c - M) / sum_c exp(m_c - M) l_c in shared memory,
 * then each thread sums its dimensions over the chunks. */
__global__ void attn_combine_kernel(float *out, const float *part, const int32_t *pos, int pos0, int n_heads, int hd,
                                    int n_chunks, int chunk) {
    pdl_enter();
    extern __shared__ float wsh[];    /* [n_chunks] */
    __shared__ float red[32];
    const int h = blockIdx.x, t = blockIdx.y;
    const int L = row_pos(pos, pos0, t) + 1;
    const int nc = (L + chunk - 1) / chunk;
    const float *p = part + ((int64_t)t * n_heads + h) * n_chunks * (hd + 2);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float M = -INFINITY;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) M = fmaxf(M, p[(int64_t)c * (hd + 2) + hd]);
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if (lane == 0) red[w] = M;
    __syncthreads();
    M = red[0];
    for (int i = 1; i < nw; i++) M = fmaxf(M, red[i]);
    __syncthreads();
    float den = 0.0f;
    for (int c = threadIdx.x; c < nc; c += blockDim.x) {
        float e = expf(p[(int64_t)c * (hd + 2) + hd] - M);
        wsh[c] = e;
        den += e * p[(int64_t)c * (hd + 2) + hd + 1];
    }
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
    if (lane == 0) red[w] = den;
    __syncthreads();
    den = 0.0f;
    for (int i = 0; i < nw; i++) den += red[i];
    const float inv = 1.0f / den;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int c = 0; c < nc; c++) acc = fmaf(wsh[c], p[(int64_t)c * (hd + 2) + d], acc);
        out[((int64_t)t * n_heads + h) * hd + d] = acc * inv;
    }
}

/* attn_combine_kernel's merge over more blocks (with attn_decode2_kernel): a block takes
 * 32 dimensions of one (row, head), grid.z = ceil(hd / 32); each recomputes the weights
 * (as attn_combine_kernel), its warp w sums chunks w, w + 8, ... for lane's dimension, and
 * the 8 warps' sums meet in shared memory in a fixed order. */
enum { C2_THREADS = 256, C2_WARPS = C2_THREADS / 32 };
__global__ void __launch_bounds__(C2_THREADS) attn_combine2_kernel(float *out, const float *part, const int32_t *pos,
                                                                   int pos0, int n_heads, int hd, int n_chunks, int chunk) {
    pdl_enter();
    extern __shared__ float wsh2[];   /* [n_chunks] */
    __shared__ float red[C2_WARPS];
    __shared__ float acc_sh[C2_WARPS][32];
    const int h = blockIdx.x, t = blockIdx.y;
    const int L = row_pos(pos, pos0, t) + 1;
    const int nc = (L + chunk - 1) / chunk;
    const float *p = part + ((int64_t)t * n_heads + h) * n_chunks * (hd + 2);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float M = -INFINITY;
    for (int c = threadIdx.x; c < nc; c += C2_THREADS) M = fmaxf(M, p[(int64_t)c * (hd + 2) + hd]);
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    if (lane == 0) red[w] = M;
    __syncthreads();
    M = red[0];
    for (int i = 1; i < C2_WARPS; i++) M = fmaxf(M, red[i]);
    __syncthreads();
    float den = 0.0f;
    for (int c = threadIdx.x; c < nc; c += C2_THREADS) {
        float e = expf(p[(int64_t)c * (hd + 2) + hd] - M);
        wsh2[c] = e;
        den += e * p[(int64_t)c * (hd + 2) + hd + 1];
    }
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
    if (lane == 0) red[w] = den;
    __syncthreads();
    den = 0.0f;
    for (int i = 0; i < C2_WARPS; i++) den += red[i];
    const int d = blockIdx.z * 32 + lane;
    float acc = 0.0f;
    if (d < hd) {
#pragma unroll 4
        for (int c = w; c < nc; c += C2_WARPS) acc = fmaf(wsh2[c], p[(int64_t)c * (hd + 2) + d], acc);
    }
    acc_sh[w][lane] = acc;
    __syncthreads();
    if (w == 0 && d < hd) {
        float s = acc_sh[0][lane];
        for (int i = 1; i < C2_WARPS; i++) s += acc_sh[i][lane];
        out[((int64_t)t * n_heads + h) * hd + d] = s * (1.0f / den);
    }
}

/* Prefill: block = QT query rows x one head. Thread layout for scores: each thread owns
 * (row r = tid / 8, keys tid % 8 + 8 i); for the output each thread owns (row, dims). */
__global__ void __launch_bounds__(PF_THREADS) attn_prefill_kernel(
    float *out, const float *q, const float *kc, const float *vc, const int32_t *pos, int pos0, int n, int n_heads,
    int n_kv, int hd, int kv_stride, float scale, ci_pages pg) {
    pdl_enter();
    const int32_t *tb = pg.tab;                   /* one sequence's block table, NULL unpaged */
    const int lg = pg.blk_log2;
    extern __shared__ float sm[];
    const int h = blockIdx.y, t0 = blockIdx.x * QT, g = h / (n_heads / n_kv);
    const int nq = n - t0 < QT ? n - t0 : QT;
    float *qs = sm;                  /* [QT, hd] */
    float *ks = qs + QT * hd;        /* [KT, hd + 1] (padded) */
    float *vs = ks + KT * (hd + 1);  /* [KT, hd] */
    float *ps = vs + KT * hd;        /* [QT, KT] */
    float *mrow = ps + QT * KT;      /* [QT] running max */
    float *lrow = mrow + QT;         /* [QT] running sum */
    float *rs = lrow + QT;           /* [QT] rescale of this tile */
    __shared__ int lens[QT];
    const int tid = threadIdx.x;
    for (int i = tid; i < QT * hd; i += blockDim.x) {
        int r = i / hd, d = i % hd;
        qs[i] = r < nq ? q[((int64_t)(t0 + r) * n_heads + h) * hd + d] * scale : 0.0f;
    }
    if (tid < QT) {
        lens[tid] = tid < nq ? row_pos(pos, pos0, t0 + tid) + 1 : 0;
        mrow[tid] = -INFINITY;
        lrow[tid] = 0.0f;
    }
    /* each thread accumulates out rows (tid / (PF_THREADS/QT)) for dims strided by 8 */
    const int orow = tid / (PF_THREADS / QT), olane = tid % (PF_THREADS / QT);
    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; i++) acc[i] = 0.0f;
    __syncthreads();
    int Lmax = 0;
    for (int r = 0; r < nq; r++) Lmax = lens[r] > Lmax ? lens[r] : Lmax;
    for (int j0 = 0; j0 < Lmax; j0 += KT) {
        const int nj = Lmax - j0 < KT ? Lmax - j0 : KT;
        for (int i = tid; i < nj * hd; i += blockDim.x) {
            int j = i / hd, d = i % hd;
            int64_t at = pg_row(tb, lg, j0 + j) * kv_stride + (int64_t)g * hd + d;
            ks[j * (hd + 1) + d] = kc[at];
            vs[j * hd + d] = vc[at];
        }
        __syncthreads();
        /* scores: thread (row r, key column c = olane + 8 i) */
        {
            const int r = orow;
            for (int j = olane; j < KT; j += PF_THREADS / QT) {
                float s = -INFINITY;
                if (j < nj && j0 + j < lens[r]) {
                    s = 0.0f;
                    for (int d = 0; d < hd; d++) s = fmaf(qs[r * hd + d], ks[j * (hd + 1) + d], s);
                }
                ps[r * KT + j] = s;
            }
        }
        __syncthreads();
        if (tid < QT) {
            const int r = tid;
            float m = mrow[r], cm = -INFINITY;
            for (int j = 0; j < KT; j++) cm = fmaxf(cm, ps[r * KT + j]);
            float nm = fmaxf(m, cm);
            float scale_old = (m == -INFINITY) ? 0.0f : expf(m - nm);
            float l = lrow[r] * scale_old;
            for (int j = 0; j < KT; j++) {
                float p = ps[r * KT + j] == -INFINITY ? 0.0f : expf(ps[r * KT + j] - nm);
                ps[r * KT + j] = p;
                l += p;
            }
            mrow[r] = nm;
            lrow[r] = l;
            rs[r] = scale_old;
        }
        __syncthreads();
        {
            const int r = orow;
            float sc = rs[r];
#pragma unroll
            for (int i = 0; i < 32; i++) {
                const int d = olane + i * (PF_THREADS / QT);
                if (d < hd) {
                    float a = acc[i] * sc;
                    for (int j = 0; j < nj; j++) a = fmaf(ps[r * KT + j], vs[j * hd + d], a);
                    acc[i] = a;
                }
            }
        }
        __syncthreads();
    }
    if (orow < nq) {
        float inv = 1.0f / lrow[orow];
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const int d = olane + i * (PF_THREADS / QT);
            if (d < hd) out[((int64_t)(t0 + orow) * n_heads + h) * hd + d] = acc[i] * inv;
        }
    }
}

/* Prefill on tensor cores (head_dim 64 / 128 / 256): a block takes BQ query rows of one
 * head (128, or 64 for head_dim 256 to fit shared memory), a warp per 16 rows, so each
 * converted K / V tile serves BQ rows. Per key tile of BK = 64: K and V rows are converted to
 * f16 into shared memory, S = Q·Kᵀ (Q pre-scaled, f16 operands, f32 accumulation) by
 * 16x16x16 WMMA tiles, then each pair of lanes takes one row of S: masks keys past the
 * row's position, updates its running max / sum and writes P = exp(S - max) as f16; the
 * warp rescales its O rows (f32, shared memory; only rows whose max grew) and adds P·V
 * with WMMA. f16 operands keep
 * 11 significant bits (about 5e-4 relative per element; f32 sums). */
template <int HD>
struct flash_cfg {
    static constexpr int BQ = HD <= 128 ? 128 : 64;   /* query rows per block: 16 per warp */
    static constexpr int THREADS = BQ * 2;
};

template <int HD>
__global__ void __launch_bounds__(flash_cfg<HD>::THREADS) attn_flash_kernel(float *out, const float *q, const float *kc,
                                                                            const float *vc, const int32_t *pos, int pos0,
                                                                            int n, int n_heads, int n_kv, int kv_stride,
                                                                            float scale, ci_pages pg) {
    pdl_enter();
    const int32_t *tb = pg.tab;                   /* one sequence's block table, NULL unpaged */
    const int lg = pg.blk_log2;
    constexpr int BQ = flash_cfg<HD>::BQ, NT = flash_cfg<HD>::THREADS;
    constexpr int BK = 64, LDH = HD + 8, LDS = BK + 4, LDP = BK + 8, LDO = HD + 4;
    extern __shared__ __align__(128) unsigned char smraw[];
    __half *Qs = (__half *)smraw;
    __half *Ks = Qs + BQ * LDH;
    __half *Vs = Ks + BK * LDH;
    __half *Ps = Vs + BK * LDH;
    float *Ss = (float *)(Ps + BQ * LDP);
    float *Os = Ss + BQ * LDS;
    float *mrow = Os + BQ * LDO, *lrow = mrow + BQ;
    int *lens = (int *)(lrow + BQ);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int t0 = blockIdx.x * BQ, h = blockIdx.y, g = h / (n_heads / n_kv);
    const int nq = n - t0 < BQ ? n - t0 : BQ;
    for (int i = tid; i < BQ * HD; i += NT) {
        int r = i / HD, d = i % HD;
        Qs[r * LDH + d] = __float2half_rn(r < nq ? q[((int64_t)(t0 + r) * n_heads + h) * HD + d] * scale : 0.0f);
        Os[r * LDO + d] = 0.0f;
    }
    if (tid < BQ) {
        lens[tid] = tid < nq ? row_pos(pos, pos0, t0 + tid) + 1 : 0;
        mrow[tid] = -INFINITY;
        lrow[tid] = 0.0f;
    }
    __syncthreads();
    int Lmax = 0;
    for (int r = 0; r < nq; r++) Lmax = lens[r] > Lmax ? lens[r] : Lmax;
    const float *kb = kc + (int64_t)g * HD, *vb = vc + (int64_t)g * HD;
    for (int j0 = 0; j0 < Lmax; j0 += BK) {
        for (int i = tid; i < BK * HD / 4; i += NT) {
            int j = i / (HD / 4), d = (i % (HD / 4)) * 4;
            float4 k4 = make_float4(0.f, 0.f, 0.f, 0.f), v4 = k4;
            if (j0 + j < Lmax) {
                k4 = *(const float4 *)(kb + pg_row(tb, lg, j0 + j) * kv_stride + d);
                v4 = *(const float4 *)(vb + pg_row(tb, lg, j0 + j) * kv_stride + d);
            }
            __half *kd = Ks + j * LDH + d, *vd = Vs + j * LDH + d;
            kd[0] = __float2half_rn(k4.x); kd[1] = __float2half_rn(k4.y);
            kd[2] = __float2half_rn(k4.z); kd[3] = __float2half_rn(k4.w);
            vd[0] = __float2half_rn(v4.x); vd[1] = __float2half_rn(v4.y);
            vd[2] = __float2half_rn(v4.z); vd[3] = __float2half_rn(v4.w);
        }
        __syncthreads();
        {
            using namespace nvcuda;
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
#pragma unroll
            for (int kt = 0; kt < BK / 16; kt++) {
                wmma::fill_fragment(fc, 0.0f);
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    wmma::load_matrix_sync(fa, Qs + warp * 16 * LDH + kk * 16, LDH);
                    wmma::load_matrix_sync(fb, Ks + kt * 16 * LDH + kk * 16, LDH);
                    wmma::mma_sync(fc, fa, fb, fc);
                }
                wmma::store_matrix_sync(Ss + warp * 16 * LDS + kt * 16, fc, LDS, wmma::mem_row_major);
            }
        }
        __syncwarp();
        {
            const int r = warp * 16 + (lane >> 1), hs = (lane & 1) * (BK / 2), L = lens[r];
            float cm = -INFINITY;
            for (int j = 0; j < BK / 2; j++)
                if (j0 + hs + j < L) cm = fmaxf(cm, Ss[r * LDS + hs + j]);
            cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 1));
            const float mold = mrow[r], mnew = fmaxf(mold, cm);
            const float alpha = mold == -INFINITY ? 0.0f : expf(mold - mnew);
            float ls = 0.0f;
            for (int j = 0; j < BK / 2; j++) {
                float p = (j0 + hs + j < L && mnew != -INFINITY) ? expf(Ss[r * LDS + hs + j] - mnew) : 0.0f;
                Ps[r * LDP + hs + j] = __float2half_rn(p);
                ls += p;
            }
            ls += __shfl_xor_sync(0xffffffffu, ls, 1);
            const float lold = lrow[r];
            __syncwarp();
            if ((lane & 1) == 0) {
                mrow[r] = mnew;
                lrow[r] = lold * alpha + ls;
            }
            if (alpha != 1.0f) /* the max grew: earlier tiles were weighted against a smaller one */
                for (int d = (lane & 1) * (HD / 2); d < (lane & 1) * (HD / 2) + HD / 2; d++) Os[r * LDO + d] *= alpha;
        }
        __syncwarp();
        {
            using namespace nvcuda;
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
#pragma unroll
            for (int dt = 0; dt < HD / 16; dt++) {
                wmma::load_matrix_sync(fc, Os + warp * 16 * LDO + dt * 16, LDO, wmma::mem_row_major);
#pragma unroll
                for (int kk = 0; kk < BK / 16; kk++) {
                    wmma::load_matrix_sync(fa, Ps + warp * 16 * LDP + kk * 16, LDP);
                    wmma::load_matrix_sync(fb, Vs + kk * 16 * LDH + dt * 16, LDH);
                    wmma::mma_sync(fc, fa, fb, fc);
                }
                wmma::store_matrix_sync(Os + warp * 16 * LDO + dt * 16, fc, LDO, wmma::mem_row_major);
            }
        }
        __syncthreads();
    }
    for (int i = tid; i < BQ * HD; i += NT) {
        int r = i / HD, d = i % HD;
        if (r < nq) out[((int64_t)(t0 + r) * n_heads + h) * HD + d] = Os[r * LDO + d] / lrow[r];
    }
}

template <int HD>
static size_t flash_smem() {
    constexpr int BQ = flash_cfg<HD>::BQ, BK = 64, LDH = HD + 8, LDS = BK + 4, LDP = BK + 8, LDO = HD + 4;
    return (size_t)(BQ * LDH + 2 * BK * LDH + BQ * LDP) * 2 + (size_t)(BQ * LDS + BQ * LDO + 3 * BQ) * 4;
}

template <int HD>
static void flash_launch(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                         const int32_t *pos, int n_heads, int n_kv, int kv_stride, float scale, ci_pages pg) {
    static int set = 0;
    size_t smem = flash_smem<HD>();
    if (!set) {
        cudaFuncSetAttribute(attn_flash_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        set = 1;
    }
    dim3 grid((n + flash_cfg<HD>::BQ - 1) / flash_cfg<HD>::BQ, n_heads);
    cb_launch(cb, attn_flash_kernel<HD>, dim3(grid), dim3(flash_cfg<HD>::THREADS), smem, out, q, k, v, pos, pos0, n,
              n_heads, n_kv, kv_stride, scale, pg);
    cb_launched(cb, "attention (flash)");
}

void cb_attention(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                  const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                  float *const *kv_tab, const ci_pages *pages) {
    if (n <= 0 || n_heads <= 0 || n_kv <= 0 || hd <= 0) return;
    const ci_pages pg = cb_pages(pages);
    const int G = n_heads / n_kv;
    if (G > MAX_GROUP || n_heads % n_kv || hd > 256 || max_keys <= 0) {
        if (!cb->failed) {
            cb->failed = 1;
            snprintf(cb->base.last_error, sizeof cb->base.last_error,
                     "CUDA: attention with %d heads over %d kv heads, head_dim %d is not supported", n_heads, n_kv, hd);
        }
        return;
    }
    if (n <= SPLIT_MAX_N || kv_tab || pg.per_row) {   /* per-row tables: a batch step too */
        /* a table's pointers are buffer addresses plus multiples of 4 floats (backend.h) */
        const int al4 = hd % 4 == 0 && hd <= 256 && kv_stride % 4 == 0 &&
                        (kv_tab || (((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0)) && ((uintptr_t)q & 15) == 0;
        const int dec2 = cb->attn_decode2 && al4;
        const int vec = !dec2 && al4 && G <= VGROUP;
        /* decode2: a fixed chunk (a row's bits must not depend on max_keys or the batch) */
        const int ck = D2_CHUNK;
        const int chunk = dec2 ? ck : vec ? (int)VCHUNK : (int)CHUNK;
        int n_chunks = (max_keys + chunk - 1) / chunk;
        size_t pbytes = (size_t)n * n_heads * n_chunks * (hd + 2) * sizeof(float);
        float *part = (float *)cb_scratch_get(cb, &cb->attn_part, pbytes);
        if (!part) return;
        dim3 grid(n_kv, n_chunks, n);
        if (dec2) {
            const int HB = G < D2_HB ? G : D2_HB;
            const size_t smem = ((size_t)G * hd + (size_t)G * ck + (size_t)((2 * G + 3) & ~3) +
                                 (size_t)(D2_WARPS / 2) * HB * hd) * sizeof(float);
            static int smem_set[2];
            if (hd <= 128) {
                if (!cb_smem_ok(cb, attn_decode2_kernel<1>, smem, &smem_set[0])) {
                    cb_fail_msg(cb, "decode attention: shared memory");
                    return;
                }
                cb_launch(cb, attn_decode2_kernel<1>, dim3(grid), dim3(D2_THREADS), smem, part, q, k, v, pos, pos0, n_heads,
                          n_kv, hd, kv_stride, scale, n_chunks, ck, kv_tab, pg);
            } else {
                if (!cb_smem_ok(cb, attn_decode2_kernel<2>, smem, &smem_set[1])) {
                    cb_fail_msg(cb, "decode attention: shared memory");
                    return;
                }
                cb_launch(cb, attn_decode2_kernel<2>, dim3(grid), dim3(D2_THREADS), smem, part, q, k, v, pos, pos0, n_heads,
                          n_kv, hd, kv_stride, scale, n_chunks, ck, kv_tab, pg);
            }
        } else if (vec) {
            size_t smem = ((size_t)G * hd + (size_t)G * VCHUNK + (size_t)((2 * G + 3) & ~3) + 4 * (size_t)G * hd) * sizeof(float);
            cb_launch(cb, attn_split_vec_kernel, dim3(grid), dim3(128), smem, part, q, k, v, pos, pos0, n_heads, n_kv, hd,
                                                                   kv_stride, scale, n_chunks, kv_tab, pg);
        } else {
            size_t smem = ((size_t)G * hd + (size_t)G * CHUNK + 2 * (size_t)G) * sizeof(float);
            cb_launch(cb, attn_split_kernel, dim3(grid), dim3(SPLIT_THREADS), smem, part, q, k, v, pos, pos0, n_heads, n_kv, hd,
                                                                          kv_stride, scale, n_chunks, kv_tab, pg);
        }
        if (cb_launched(cb, "attention (split)")) return;
        size_t csmem = ((size_t)n_chunks + 4) * sizeof(float); /* + 4: the unrolled loop may read a vector past nc */
        if (csmem > 48 * 1024) {
            static int set = 0;
            if (!set) {
                cudaFuncSetAttribute(attn_combine_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
                cudaFuncSetAttribute(attn_combine2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
                set = 1;
            }
            if (csmem > 200 * 1024) {
                if (!cb->failed) {
                    cb->failed = 1;
                    snprintf(cb->base.last_error, sizeof cb->base.last_error,
                             "CUDA: decode attention over %d keys is more than this kernel takes", max_keys);
                }
                return;
            }
        }
        if (dec2)
            cb_launch(cb, attn_combine2_kernel, dim3(dim3(n_heads, n, (hd + 31) / 32)), dim3(C2_THREADS), csmem, out, part, pos,
                      pos0, n_heads, hd, n_chunks, chunk);
        else
            cb_launch(cb, attn_combine_kernel, dim3(dim3(n_heads, n)), dim3(128), csmem, out, part, pos, pos0, n_heads, hd,
                      n_chunks, chunk);
        cb_launched(cb, "attention (combine)");
        return;
    }
    /* tensor cores when the rows are 16-byte aligned for the float4 tile loads */
    int al = (kv_stride % 4) == 0 && ((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0;
    if (al && hd == 64) { flash_launch<64>(cb, out, q, k, v, n, pos0, pos, n_heads, n_kv, kv_stride, scale, pg); return; }
    if (al && hd == 128) { flash_launch<128>(cb, out, q, k, v, n, pos0, pos, n_heads, n_kv, kv_stride, scale, pg); return; }
    if (al && hd == 256) { flash_launch<256>(cb, out, q, k, v, n, pos0, pos, n_heads, n_kv, kv_stride, scale, pg); return; }
    size_t smem = ((size_t)QT * hd + (size_t)KT * (hd + 1) + (size_t)KT * hd + (size_t)QT * KT + 3 * QT) * sizeof(float);
    static int smem_set = 0;
    if (!smem_set) {
        cudaFuncSetAttribute(attn_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
        smem_set = 1;
    }
    dim3 grid((n + QT - 1) / QT, n_heads);
    cb_launch(cb, attn_prefill_kernel, dim3(grid), dim3(PF_THREADS), smem, out, q, k, v, pos, pos0, n, n_heads, n_kv, hd,
                                                                kv_stride, scale, pg);
    cb_launched(cb, "attention (prefill)");
}

