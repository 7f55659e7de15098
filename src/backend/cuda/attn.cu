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
 *    multiple of 4 up to 256, 16-byte aligned rows, groups <= MAX_GROUP): flash decoding, a
 *    row's keys in at most about one wave of blocks / n_kv long chunks, each warp of a block
 *    its own online softmax over coalesced key rows (lanes across the head dimension).
 *  - attn_split_vec_kernel (switch off; head_dim a multiple of 4 up to 256, groups <= 8):
 *    chunks of 32 keys, a warp per 8 key rows, lanes across the head dimension.
 *  - attn_split_kernel (anything else, e.g. odd head dims): chunks of CHUNK = 256 keys, each
 *    lane scores whole keys (its own key row against the group's queries from shared
 *    memory), then the threads sum p·V along the head dimension.
 * All three are merged by attn_combine_kernel (a block per (row, head)).
 *
 * Many query rows (prefill), head_dim 64 / 128 / 256: flash attention on tensor cores
 * (attn_flash.cu's attn_flash_pipe_kernel, scores and output in registers, key tiles copied by
 * cp.async a tile ahead; attn_flash_kernel below, WMMA through shared memory, with
 * CINFER_CUDA_FLASH2=0). Other head sizes: a block takes QT query rows of one head and walks the key
 * tiles up to its last row's position with an online softmax (running max and sum per
 * row, rescaled when the max grows), K and V tiles staged in shared memory.
 *
 * Paged caches (rope_attend's pages, ci_pages by value; tab NULL: not paged, the kernels
 * read what they always did): every kernel reads key / value position j at cache row
 * pg_row(table, j) (cuda_internal.h) instead of row j, one table entry per key row it loads
 * (attn_decode2_kernel and the split kernels per row, the prefill / flash tile loaders per element /
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

/* Split-K decode kernel 2 (CINFER_CUDA_ATTN_DECODE2): flash decoding. The keys of a (row, kv
 * group) are cut into at most nc chunks of d2_chunk(L, nc, kt) keys (kt: one step of the
 * block), nc fixed per model and GPU (about one wave of blocks at batch 1), so a long context is
 * a few long chunks, not thousands of short ones, a short one still spreads over many blocks,
 * and a row's bits depend on its length alone (not on max_keys nor the batch). A block of
 * D2_WARPS warps streams its chunk; each warp takes U keys per step (key u of warp w at j0 +
 * step * D2_WARPS * U + w * U + u) and keeps its own online softmax (a running max and sum per
 * head, the p·V sums rescaled when the max grows), so the warps never wait on each other until
 * the end, where they meet in shared memory in a fixed order (all warps at once, a thread per
 * (head, dim) adding them).
 * Lanes lie across the head dimension (E = VW * NI floats of a row each: head_dim <= 64 in
 * float2s, <= 128 one float4, <= 256 two), so every key row is one coalesced read and a lane's
 * p·V sums are just its own dimensions (GM x E registers). A step loads its U key and U value
 * rows at once; the scores of up to 32 (head, key) pairs at a time are summed over the lanes by
 * a halving butterfly (31 shuffles for 32 sums, after which lane l holds pair l's), the
 * per-head max and sum over the step's keys take log2(U) shuffles more, and the probabilities
 * and rescale factors go through the warp's shared memory to every lane. The queries (scaled)
 * sit in shared memory. Groups up to GM heads (a power of two >= G; heads past G are zero and
 * masked). Keys past the row's length are neither read nor counted (rows past the context may
 * hold anything). A warp's first rows are loaded before the query fill. Fixed orders
 * throughout: same inputs, same bits. Part layout as above, merged by attn_combine_kernel with
 * nc_fix = nc and chunk = kt. */
enum { D2_WARPS = 8, D2_THREADS = D2_WARPS * 32, D2_NC_MAX = 256 };
/* keys of each chunk of a row of L keys cut into at most nc chunks: a multiple of kt, the keys
 * of one step of the block (so a short row still spreads over many blocks) */
__host__ __device__ __forceinline__ int d2_chunk(int L, int nc, int kt) {
    const int c = (L + nc - 1) / nc;
    return (c + kt - 1) / kt * kt;
}
template <int VW, int NI>
__device__ __forceinline__ void d2_row(float (&r)[VW * NI], const float *row, int lane, int hd, bool ok) {
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int d = (lane + 32 * i) * VW;
        if (VW == 4) {
            const float4 f = ok && d < hd ? *(const float4 *)(row + d) : make_float4(0.f, 0.f, 0.f, 0.f);
            r[4 * i] = f.x; r[4 * i + 1] = f.y; r[4 * i + 2] = f.z; r[4 * i + 3] = f.w;
        } else {
            const float2 f = ok && d < hd ? *(const float2 *)(row + d) : make_float2(0.f, 0.f);
            r[2 * i] = f.x; r[2 * i + 1] = f.y;
        }
    }
}
/* Sums NV = 2^k values over the warp's lanes; afterwards lane l's v[0] is the sum of value
 * l >> (5 - k). Step S exchanges half of what is left with lane l ^ (16 >> S). */
template <int NV, int S = 0>
__device__ __forceinline__ void d2_butterfly(float (&v)[NV], int lane) {
    if constexpr (S < 5) {
        constexpr int o = 16 >> S, n = NV >> S;
        if constexpr (n > 1) {
            const bool up = lane & o;
#pragma unroll
            for (int i = 0; i < n / 2; i++) {
                const float send = up ? v[i] : v[i + n / 2], keep = up ? v[i + n / 2] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
        }
        d2_butterfly<NV, S + 1>(v, lane);
    }
}
/* heads per pass of the block's merge (its buffer at most 8192 floats), and the floats before the
 * warps' shared arrays: the queries, or that buffer if larger */
__host__ __device__ constexpr int d2_merge_heads(int GM, int hd) { return GM < 1024 / hd ? GM : 1024 / hd; }
__host__ __device__ constexpr int d2_qfloats(int GM, int hd) {
    return GM * hd > D2_WARPS * d2_merge_heads(GM, hd) * hd ? GM * hd : D2_WARPS * d2_merge_heads(GM, hd) * hd;
}
/* keys per warp and step (registers: 2 U E for the rows, GM E for the sums) and blocks per SM */
__host__ __device__ constexpr int d2_keys(int E, int GM) { return E == 8 ? 2 : GM >= 8 ? 4 : 8; }
__host__ __device__ constexpr int d2_bps(int E, int GM) { return E * GM >= 64 ? 1 : 2; }
/* qk_rope_store's work taken by the decode kernel (rope_attend's one-row steps: d2_fuse.k set).
 * The kernel then reads q as projected and norms / rotates its group's heads itself (each block
 * of the row, a warp a head, hnr_finish: qk_rope_store's arithmetic, the same bits), and the block
 * whose chunk holds the row's last key (its own new one) makes that key's row from k (normed,
 * rotated) and v, writes both into the cache row and syncs before reading its keys: no other
 * block reads that row. One launch fewer a layer and step. Only where every row's new key is the
 * only one it reads that is not in the cache yet: one row, or rows each in its own cache (a
 * table, per-row pages). */
struct d2_fuse {
    const float *k, *v;                 /* [n, n_kv, hd] as projected; k NULL: not fused */
    const float *q_norm, *k_norm, *inv_freq;
    float eps, mscale;
    int rot_dim, style;
};
template <int VW, int NI, int GM>
__global__ void __launch_bounds__(D2_THREADS, d2_bps(VW * NI, GM)) attn_decode2_kernel(
    float *part, const float *q, const float *kc, const float *vc, const int32_t *pos, int pos0, int n_heads, int n_kv,
    int hd, int kv_stride, float scale, int n_chunks, int nc, float *const *kv_tab, ci_pages pg, d2_fuse fz) {
    constexpr int E = VW * NI;                       /* floats of a row per lane */
    constexpr int U = d2_keys(E, GM);               /* keys per warp and step */
    constexpr int HPB = 32 / U < GM ? 32 / U : GM;   /* heads per butterfly */
    constexpr int NB = GM / HPB;                     /* butterflies per step */
    constexpr int NV = HPB * U;                      /* (head, key) sums per butterfly */
    constexpr int LG = NV >= 32 ? 0 : NV >= 16 ? 1 : NV >= 8 ? 2 : NV >= 4 ? 3 : NV >= 2 ? 4 : 5; /* 5 - log2 NV */
    constexpr int GR = U << LG;                      /* lanes holding one head's sums */
    pdl_enter();
    extern __shared__ float4 sm2[];
    float *sm = (float *)sm2;
    const int g = blockIdx.x, chunk = blockIdx.y, t = blockIdx.z;
    if (kv_tab) { kc = kv_tab[2 * t]; vc = kv_tab[2 * t + 1]; }
    const int32_t *tb = pg_table(pg, t);          /* the row's block table, NULL unpaged */
    const int lg = pg.blk_log2;
    const int G = n_heads / n_kv;
    const int L = row_pos(pos, pos0, t) + 1;
    const int ck = d2_chunk(L, nc, D2_WARPS * U);
    const int j0 = chunk * ck;
    if (j0 >= L) return;
    const int nj = L - j0 < ck ? L - j0 : ck;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int HG = d2_merge_heads(GM, hd), QF = d2_qfloats(GM, hd);
    float *qs = sm;                                 /* [GM, hd] scaled queries, zero past G; then [D2_WARPS, HG, hd] the warps' p·V sums */
    float *pw = qs + QF + warp * (U * GM + GM);     /* this warp's [U, GM] probabilities and [GM] rescale factors */
    float *aw = pw + U * GM;
    float *mw = qs + QF + D2_WARPS * (U * GM + GM); /* [D2_WARPS, GM] the warps' maxima, then sums */
    float *lw = mw + D2_WARPS * GM;
    const float *kb = kc + (int64_t)g * hd, *vb = vc + (int64_t)g * hd;
    /* a step's U key and value rows of this warp (zeros past nj) */
    float kr[U][E], vr[U][E];
    auto load_rows = [&](int jb) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const bool ok = jb + u < nj;
            const int64_t row = pg_row(tb, lg, j0 + (ok ? jb + u : 0)) * kv_stride;
            d2_row<VW, NI>(kr[u], kb + row, lane, hd, ok);
            d2_row<VW, NI>(vr[u], vb + row, lane, hd, ok);
        }
    };
    const float *qrow = q + ((int64_t)t * n_heads + (int64_t)g * G) * hd;
    if (!fz.k) {
        if (warp * U < nj) load_rows(warp * U);    /* the first step's rows in flight through the query fill */
        for (int i = threadIdx.x; i < GM * hd; i += D2_THREADS) qs[i] = i < G * hd ? qrow[i] * scale : 0.0f;
        __syncthreads();
    } else {   /* d2_fuse: the queries normed and rotated here; the last chunk's block stores the new key */
        const bool last = j0 + nj == L;
        if (!last && warp * U < nj) load_rows(warp * U);
        const int half = fz.rot_dim / 2;
        float *cs = lw + D2_WARPS * GM, *sn = cs + half, *row = sn + half + warp * hd;
        float vals[8];
        if (warp < G) hnr_load(vals, qrow + (int64_t)warp * hd, hd, lane, true);
        rope_table(cs, sn, (float)(L - 1), fz.inv_freq, half, fz.mscale);
        for (int i = G * hd + threadIdx.x; i < GM * hd; i += D2_THREADS) qs[i] = 0.0f;
        __syncthreads();
        for (int h = warp; h < G; h += D2_WARPS) {
            if (h != warp) hnr_load(vals, qrow + (int64_t)h * hd, hd, lane, true);
            float *qd = qs + h * hd;
            hnr_finish(vals, qrow + (int64_t)h * hd, row, hd, fz.q_norm, fz.eps, fz.rot_dim, cs, sn, fz.style, lane,
                       [&](int i, float o) { qd[i] = o * scale; });
        }
        if (last && warp == D2_WARPS - 1) {       /* the row's new key and value into the cache */
            const int64_t r = pg_row(tb, lg, L - 1) * kv_stride + (int64_t)g * hd;
            const float *kr0 = fz.k + ((int64_t)t * n_kv + g) * hd, *vr0 = fz.v + ((int64_t)t * n_kv + g) * hd;
            float *kd = (float *)kc + r;
            hnr_load(vals, kr0, hd, lane, true);
            hnr_finish(vals, kr0, row, hd, fz.k_norm, fz.eps, fz.rot_dim, cs, sn, fz.style, lane,
                       [&](int i, float o) { kd[i] = o; });
            for (int i = lane; i < hd; i += 32) ((float *)vc)[r + i] = vr0[i];
        }
        __syncthreads();                          /* the queries, and the new key for the block's loads */
        if (last && warp * U < nj) load_rows(warp * U);
    }
    float acc[GM][E], mr[NB], lr[NB];
#pragma unroll
    for (int h = 0; h < GM; h++)
#pragma unroll
        for (int e = 0; e < E; e++) acc[h][e] = 0.0f;
#pragma unroll
    for (int b = 0; b < NB; b++) { mr[b] = -INFINITY; lr[b] = 0.0f; }
    const int idx = lane >> LG;                     /* this lane's (head, key) pair after a butterfly */
    for (int jb = warp * U; jb < nj; jb += D2_WARPS * U) {
        if (jb != warp * U) load_rows(jb);
#pragma unroll
        for (int b = 0; b < NB; b++) {
            float v[NV];
#pragma unroll
            for (int hh = 0; hh < HPB; hh++) {
                float qv[E];
                d2_row<VW, NI>(qv, qs + (b * HPB + hh) * hd, lane, hd, true);
#pragma unroll
                for (int u = 0; u < U; u++) {
                    float s = 0.0f;
#pragma unroll
                    for (int e = 0; e < E; e++) s = fmaf(kr[u][e], qv[e], s);
                    v[hh * U + u] = s;
                }
            }
            d2_butterfly<NV>(v, lane);
            float s = v[0];
            const int h = b * HPB + idx / U, u = idx % U;
            if (jb + u >= nj || h >= G) s = -INFINITY;
            float m = s;
#pragma unroll
            for (int o = 1 << LG; o < GR; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            const float mn = fmaxf(mr[b], m);
            const float alpha = mr[b] == -INFINITY ? 0.0f : expf(mr[b] - mn);
            const float p = s == -INFINITY ? 0.0f : expf(s - mn);
            float ps = p;
#pragma unroll
            for (int o = 1 << LG; o < GR; o <<= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
            lr[b] = lr[b] * alpha + ps;
            mr[b] = mn;
            pw[u * GM + h] = p;
            if (u == 0) aw[h] = alpha;
        }
        __syncwarp();
#pragma unroll
        for (int h = 0; h < GM; h++) {
            const float a = aw[h];
#pragma unroll
            for (int e = 0; e < E; e++) acc[h][e] *= a;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const float p = pw[u * GM + h];
#pragma unroll
                for (int e = 0; e < E; e++) acc[h][e] = fmaf(p, vr[u][e], acc[h][e]);
            }
        }
        __syncwarp();
    }
    /* the block's merge: the warps' maxima and sums (one lane per head), then per pass of HG
     * heads every warp writes its p·V sums, rescaled to the block's max, into its slice of the
     * buffer, and each thread adds one (head, dim) over the warps in order (a warp at a time
     * behind barriers cost ~8 us a call at short contexts: ncu, 2026-12-02) */
#pragma unroll
    for (int b = 0; b < NB; b++)
        if ((lane & (GR - 1)) == 0) {
            const int h = b * HPB + idx / U;
            mw[warp * GM + h] = mr[b];
            lw[warp * GM + h] = lr[b];
        }
    __syncthreads();
    float sc[GM];
#pragma unroll
    for (int h = 0; h < GM; h++) {
        float M = mw[h];
        for (int w = 1; w < D2_WARPS; w++) M = fmaxf(M, mw[w * GM + h]);
        sc[h] = mw[warp * GM + h] == -INFINITY ? 0.0f : expf(mw[warp * GM + h] - M);
    }
    float *out = part + (((int64_t)t * n_heads + (int64_t)g * G) * n_chunks + chunk) * (hd + 2);
    const int64_t hstride = (int64_t)n_chunks * (hd + 2);
    for (int hb = 0; hb < G; hb += HG) {
#pragma unroll
        for (int h = 0; h < GM; h++) {
            if (h < hb || h >= hb + HG || h >= G) continue;
            float *dst = qs + ((int64_t)warp * HG + (h - hb)) * hd;
#pragma unroll
            for (int i = 0; i < NI; i++) {
                const int d = (lane + 32 * i) * VW;
                if (d >= hd) continue;
                if (VW == 4)
                    *(float4 *)(dst + d) = make_float4(acc[h][4 * i] * sc[h], acc[h][4 * i + 1] * sc[h],
                                                       acc[h][4 * i + 2] * sc[h], acc[h][4 * i + 3] * sc[h]);
                else
                    *(float2 *)(dst + d) = make_float2(acc[h][2 * i] * sc[h], acc[h][2 * i + 1] * sc[h]);
            }
        }
        __syncthreads();
        const int hn = G - hb < HG ? G - hb : HG;
        for (int e = threadIdx.x; e < hn * hd; e += D2_THREADS) {
            float v = qs[e];
#pragma unroll
            for (int w = 1; w < D2_WARPS; w++) v += qs[(int64_t)w * HG * hd + e];
            out[(int64_t)(hb + e / hd) * hstride + e % hd] = v;
        }
        __syncthreads();
    }
    if (threadIdx.x < G) {
        const int h = threadIdx.x;
        float M = mw[h];
        for (int w = 1; w < D2_WARPS; w++) M = fmaxf(M, mw[w * GM + h]);
        float l = 0.0f;
        for (int w = 0; w < D2_WARPS; w++)
            if (mw[w * GM + h] != -INFINITY) l += lw[w * GM + h] * expf(mw[w * GM + h] - M);
        out[h * hstride + hd] = M;
        out[h * hstride + hd + 1] = l;
    }
}

/* Merges a row's chunks: weights exp(m_c - M) / sum_c exp(m_c - M) l_c in shared memory,
 * then each thread sums its dimensions over the chunks. Chunks of `chunk` keys, or with
 * nc_fix > 0 of d2_chunk(L, nc_fix, chunk) (attn_decode2_kernel's). */
__global__ void attn_combine_kernel(float *out, const float *part, const int32_t *pos, int pos0, int n_heads, int hd,
                                    int n_chunks, int chunk, int nc_fix) {
    pdl_enter();
    extern __shared__ float wsh[];    /* [n_chunks] */
    __shared__ float red[32];
    const int h = blockIdx.x, t = blockIdx.y;
    const int L = row_pos(pos, pos0, t) + 1;
    if (nc_fix > 0) chunk = d2_chunk(L, nc_fix, chunk);
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

/* Which kernel family takes a call (attention below, and cb_rope_attend_fused asking before it
 * fuses): the split-K kernels for few rows and every batch step with per-row tables; among them
 * attn_decode2_kernel (with cuda_be.attn_decode2) when the rows are 16-byte aligned (a table's
 * pointers are buffer addresses plus multiples of 4 floats, backend.h). */
static bool split_call(int n, float *const *kv_tab, const ci_pages &pg) {
    return n <= SPLIT_MAX_N || kv_tab || pg.per_row;
}
static bool aligned4(const float *q, const float *k, const float *v, int hd, int kv_stride, float *const *kv_tab) {
    return hd % 4 == 0 && hd <= 256 && kv_stride % 4 == 0 &&
           (kv_tab || (((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0)) && ((uintptr_t)q & 15) == 0;
}

/* cb_attention's body; fz.k set (cb_rope_attend_fused, which checked that the decode2 kernel takes
 * the call): that kernel does qk_rope_store's work too */
static void attention(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                      const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                      float *const *kv_tab, const ci_pages *pages, const d2_fuse &fz) {
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
    if (split_call(n, kv_tab, pg)) {
        const int al4 = aligned4(q, k, v, hd, kv_stride, kv_tab);
        const int dec2 = cb->attn_decode2 && al4;
        if (fz.k && !dec2) {   /* cb_rope_attend_fused checks what this kernel takes */
            cb_fail_msg(cb, "attention (decode, rope fused): not the decode2 kernel's call");
            return;
        }
        const int vec = !dec2 && al4 && G <= VGROUP;
        /* decode2: at most nc chunks of a row, about a wave of blocks for one row (its bits
         * depend on its length and nc, not on max_keys or the batch) */
        const int d2_kind = hd <= 64 ? 0 : hd <= 128 ? 1 : 2, d2_e = d2_kind == 0 ? 2 : d2_kind == 1 ? 4 : 8;
        int d2_lgm = 0;
        while ((1 << d2_lgm) < G) d2_lgm++;
        int nc = (d2_bps(d2_e, 1 << d2_lgm) * cb->sm_count + n_kv - 1) / n_kv;
        nc = nc < 1 ? 1 : nc > D2_NC_MAX ? D2_NC_MAX : nc;
        const int d2_kt = D2_WARPS * d2_keys(d2_e, 1 << d2_lgm); /* decode2's chunks: multiples of d2_kt keys */
        const int chunk = dec2 ? d2_kt : vec ? (int)VCHUNK : (int)CHUNK;
        int n_chunks = (max_keys + chunk - 1) / chunk;
        if (dec2 && n_chunks > nc) n_chunks = nc;
        size_t pbytes = (size_t)n * n_heads * n_chunks * (hd + 2) * sizeof(float);
        float *part = (float *)cb_scratch_get(cb, &cb->attn_part, pbytes);
        if (!part) return;
        dim3 grid(n_kv, n_chunks, n);
        if (dec2) {
            typedef void (*d2_fn)(float *, const float *, const float *, const float *, const int32_t *, int, int, int,
                                  int, int, float, int, int, float *const *, ci_pages, d2_fuse);
            static const d2_fn fns[3][5] = {
                { attn_decode2_kernel<2, 1, 1>, attn_decode2_kernel<2, 1, 2>, attn_decode2_kernel<2, 1, 4>,
                  attn_decode2_kernel<2, 1, 8>, attn_decode2_kernel<2, 1, 16> },
                { attn_decode2_kernel<4, 1, 1>, attn_decode2_kernel<4, 1, 2>, attn_decode2_kernel<4, 1, 4>,
                  attn_decode2_kernel<4, 1, 8>, attn_decode2_kernel<4, 1, 16> },
                { attn_decode2_kernel<4, 2, 1>, attn_decode2_kernel<4, 2, 2>, attn_decode2_kernel<4, 2, 4>,
                  attn_decode2_kernel<4, 2, 8>, attn_decode2_kernel<4, 2, 16> } };
            const int GM = 1 << d2_lgm, U = d2_keys(d2_e, GM);
            const size_t smem = ((size_t)d2_qfloats(GM, hd) + (size_t)D2_WARPS * (U * GM + GM) + 2 * (size_t)D2_WARPS * GM +
                                 (fz.k ? (size_t)(fz.rot_dim / 2) * 2 + (size_t)D2_WARPS * hd : 0)) * sizeof(float);
            if (fz.k) {   /* the rotary table and a row a warp: past the default 48 KB at group 16 */
                static int set[3][5];
                if (!cb_smem_ok(cb, fns[d2_kind][d2_lgm], smem, &set[d2_kind][d2_lgm])) {
                    cb_fail_msg(cb, "attention (decode, rope fused): shared memory");
                    return;
                }
            }
            cb_launch(cb, fns[d2_kind][d2_lgm], dim3(grid), dim3(D2_THREADS), smem, part, q, k, v, pos, pos0, n_heads, n_kv, hd,
                      kv_stride, scale, n_chunks, nc, kv_tab, pg, fz);
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
        cb_launch(cb, attn_combine_kernel, dim3(dim3(n_heads, n)), dim3(128), csmem, out, part, pos, pos0, n_heads, hd,
                  n_chunks, chunk, dec2 ? nc : 0);
        cb_launched(cb, "attention (combine)");
        return;
    }
    if (fz.k) {
        cb_fail_msg(cb, "attention (rope fused): not a decode call");
        return;
    }
    /* tensor cores when the rows are 16-byte aligned for the float4 tile loads */
    int al = (kv_stride % 4) == 0 && ((uintptr_t)k & 15) == 0 && ((uintptr_t)v & 15) == 0;
    if (al && ((uintptr_t)q & 15) == 0 && cb->flash2 &&   /* and q's, for its float4 loads */
        cb_attn_flash_pipe(cb, out, q, k, v, n, pos0, pos, max_keys, n_heads, n_kv, hd, kv_stride, scale, pg))
        return;
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

void cb_attention(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                  const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                  float *const *kv_tab, const ci_pages *pages) {
    const d2_fuse none = {};
    attention(cb, out, q, k, v, n, pos0, pos, max_keys, n_heads, n_kv, hd, kv_stride, scale, kv_tab, pages, none);
}

int cb_rope_attend_fused(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int n_heads,
                         int n_kv, int hd, const float *q_norm, const float *k_norm, float eps, int rot_dim,
                         const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style, float *kc,
                         float *vc, float *const *kv_tab, const ci_pages *pages, int kv_stride, int max_keys,
                         float scale) {
    const ci_pages pg = cb_pages(pages);
    /* the decode2 kernel's call (attention's choice), with every row's new key the only one it
     * reads that is not in the cache yet; shapes attention refuses stay with the unfused path,
     * which reports them */
    if (!cb->rope_fuse || !cb->attn_decode2 || !split_call(n, kv_tab, pg) || !aligned4(q, kc, vc, hd, kv_stride, kv_tab) ||
        !(n == 1 || kv_tab || pg.per_row) || n <= 0 || !pos || n_heads <= 0 || n_kv <= 0 || n_heads % n_kv ||
        n_heads / n_kv > MAX_GROUP || max_keys <= 0 || rot_dim < 0 || rot_dim > hd || rot_dim % 2)
        return 0;
    const d2_fuse fz = { k, v, q_norm, k_norm, inv_freq, eps, mscale, rot_dim, (int)style };
    attention(cb, out, q, kc, vc, n, 0, pos, max_keys, n_heads, n_kv, hd, kv_stride, scale, kv_tab, pages, fz);
    return 1;
}

