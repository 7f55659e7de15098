/* mla.cu — the MLA ops of backend.h on the device (DSA's are dsa.cu's; the absorbed queries
 * and value heads are mla_heads.cu's): strided RMSNorm, LayerNorm, cache stores (per-row
 * caches through a table, paged caches through block tables), and MLA attention over the
 * latent cache. Nothing synchronises:
 * positions, cache tables and selections stay in device memory, launches are sized by
 * max_keys, so a recorded step serves every later position.
 *
 * MLA attention (K = V = the latent row, lat = kv_lora + rope floats, e.g. 576): a block
 * takes one query row, HG heads of it and one chunk of keys. KT keys at a time are staged in
 * shared memory (each latent row read once per block for all HG heads); warps score
 * (head, key) pairs with lane-split dot products; one thread per head keeps the online
 * softmax (running max m, sum l, rescale r); every thread owns lat / 256 output columns of
 * each head in registers. With several chunks per row (decode: the keys split so that
 * every SM is busy at batch 1) each block writes (acc, m, l) and a combine kernel merges
 * them; with one chunk (prefill) the block writes the normalised row itself.
 *
 * A sparse row (DSA, dsa.cu: sel given and pos[t] + 1 > topk) attends its topk kept rows
 * sel[t, 0..topk) instead of 0..pos[t]. A paged cache (backend.h ci_pages): position j of
 * row t is cache row pg_row(its block table, j) (cuda_internal.h), one table read per key row
 * loaded. */
#include "cuda_internal.h"
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>

enum { MLA_THREADS = 256, MLA_KT = 32, MLA_KPW = MLA_KT / (MLA_THREADS / 32), MLA_HG = 16, MLA_MAX_LAT = 1024,
       MLA_COLS = MLA_MAX_LAT / MLA_THREADS };
static_assert(MLA_KPW * MLA_HG == 64, "the score butterfly leaves each lane 2 of 64 sums");
static_assert(MLA_HG % 2 == 0, "the tile's row table after 3 MLA_HG floats stays 8-byte aligned");

void cb_fail_msg(cuda_be *cb, const char *msg) {
    if (cb->failed) return;
    cb->failed = 1;
    snprintf(cb->base.last_error, sizeof cb->base.last_error, "CUDA: %s", msg);
}

/* ---- norms ------------------------------------------------------------------------------------ */

/* rows `stride` floats apart; as rmsnorm_kernel (ops.cu): the root in double */
__global__ void rmsnorm_strided_kernel(float *out, const float *x, const float *w, int dim, int stride, float eps) {
    pdl_enter();
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * stride;
    float *orow = out + (int64_t)blockIdx.x * stride;
    float s = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s = fmaf(xr[i], xr[i], s);
    s = block_sum(s, sh);
    const float sc = (float)(1.0 / sqrt((double)s / (double)dim + (double)eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = w ? xr[i] * sc * w[i] : xr[i] * sc;
}

void cb_rmsnorm_strided(cuda_be *cb, float *out, const float *x, const float *w, int n, int dim, int stride, float eps) {
    if (n <= 0 || dim <= 0) return;
    const int th = rms_threads(dim);
    cb_launch(cb, rmsnorm_strided_kernel, dim3(n), dim3(th), 0, out, x, w, dim, stride, eps);
    cb_launched(cb, "rmsnorm_strided");
}

/* mean and variance in double, as the CPU; every element read and written by one thread */
__global__ void layernorm_kernel(float *out, const float *x, const float *w, const float *b, int dim, double eps) {
    pdl_enter();
    __shared__ double sh[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *orow = out + (int64_t)blockIdx.x * dim;
    double s = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s += xr[i];
    const double mean = block_sum(s, sh) / dim;
    double v = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
    const double var = block_sum(v, sh) / dim;
    const double inv = 1.0 / sqrt(var + eps);
    __syncthreads();
    for (int i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = (float)((xr[i] - mean) * inv) * w[i] + b[i];
}

void cb_layernorm(cuda_be *cb, float *out, const float *x, const float *w, const float *b, int n, int dim, double eps) {
    if (n <= 0 || dim <= 0) return;
    const int th = rms_threads(dim);
    cb_launch(cb, layernorm_kernel, dim3(n), dim3(th), 0, out, x, w, b, dim, eps);
    cb_launched(cb, "layernorm");
}

/* ---- cache stores (through a table, through pages) ------------------------------------------ */

__global__ void kv_store_paged_kernel(float *cache, float *const *tab, int tab_step, int stride, const float *src,
                                      int width, const int32_t *pos, ci_pages pg) {
    pdl_enter();
    const int t = blockIdx.x;
    float *dst = (tab ? tab[(int64_t)t * tab_step] : cache) + pg_row(pg_table(pg, t), pg.blk_log2, pos[t]) * stride;
    const float *s = src + (int64_t)t * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = s[i];
}

void cb_kv_store_paged(cuda_be *cb, float *cache, float *const *tab, int tab_step, int stride, const float *src,
                       int width, int n, const int32_t *pos, const ci_pages *pages) {
    if (n <= 0 || width <= 0) return;
    cb_launch(cb, kv_store_paged_kernel, dim3(n), dim3(256), 0, cache, tab, tab_step, stride, src, width, pos,
              cb_pages(pages));
    cb_launched(cb, "kv_store_paged");
}

/* ---- MLA attention ------------------------------------------------------------------------------ */

/* The butterfly sum of a warp's V values per lane (V a power of two, V >= 64 / 32 ... ):
 * after it lane l holds the sums over all lanes of v[2l] and v[2l + 1] in v[0], v[1] (V = 64).
 * Each stage hands half of the values to the partner lane: V - 2 shuffles in all. */
template <int V>
static __device__ __forceinline__ void warp_sum_split(float (&v)[V]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 16, cnt = V; o > 0; o >>= 1, cnt >>= 1) {
        const bool up = lane & o;
#pragma unroll
        for (int i = 0; i < V / 2; i++) {
            if (i >= cnt / 2) break;
            const float keep = up ? v[i + cnt / 2] : v[i];
            const float send = up ? v[i] : v[i + cnt / 2];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
}

/* grid (head groups, chunks, n); part [n, n_heads, n_chunks, lat + 2] when n_chunks > 1.
 * Row t's count keys are cut into n_chunks equal runs of whole tiles at run time (so a
 * recorded step splits whatever context it meets evenly); tiles of MLA_KT keys:
 *   scores   warp w takes keys 4w..4w+3 of the tile, lanes along the latent columns (keys
 *            read straight from the cache, coalesced), all MLA_HG heads at once from the
 *            queries staged in shared memory; a butterfly sum leaves lane l the scores of
 *            heads 2l mod 16, 2l + 1 mod 16 of key l / 8;
 *   softmax  warp w keeps heads 2w, 2w + 1: lane = key, max and sum by shuffles;
 *   values   thread i owns columns i, i + 256, ... of every head: Σ_j p[h][j] · row_j[c],
 *            the rows read again (from L1).
 * Three barriers per tile. PG: paged caches, the tile's key rows read once into shared memory
 * (rw); the unpaged instance addresses rows as before pages (pp4096 at par with that build:
 * 38,160 tok/s both, 2026-12-04; with the table code and no table it was 1.8% slower). */
template <bool PG>
__global__ void __launch_bounds__(MLA_THREADS) mla_attn_kernel(float *out, float *part, const float *qcat,
                                                               const float *cache, float *const *tab, int tab_step,
                                                               const int32_t *pos, const int32_t *sel, int topk,
                                                               int n_heads, int lat, float scale, int n_chunks,
                                                               ci_pages pg) {
    pdl_enter();
    extern __shared__ float sm[];
    const int t = blockIdx.z, ck = blockIdx.y, h0 = blockIdx.x * MLA_HG;
    const int nh = n_heads - h0 < MLA_HG ? n_heads - h0 : MLA_HG;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (tab) cache = tab[(int64_t)t * tab_step];
    const int32_t *tb = pg_table(pg, t);          /* the row's block table, NULL unpaged */
    const int lg = pg.blk_log2;
    const int count = mla_row_keys(pos, sel, topk, t);
    const int sparse = sel && pos[t] + 1 > topk;
    const int32_t *srow = sparse ? sel + (int64_t)t * topk : NULL;
    const int tiles = (count + MLA_KT - 1) / MLA_KT, per = (tiles + n_chunks - 1) / n_chunks;
    const int j0 = ck * per * MLA_KT, j1 = count < j0 + per * MLA_KT ? count : j0 + per * MLA_KT;
    float *qs = sm;                              /* [MLA_HG, lat] scaled queries (zero rows past nh) */
    float *ps = qs + MLA_HG * lat;               /* [MLA_HG, MLA_KT] scores, then probabilities */
    float *ms = ps + MLA_HG * MLA_KT;            /* [MLA_HG] running max */
    float *ls = ms + MLA_HG;                     /* [MLA_HG] running sum */
    float *rs = ls + MLA_HG;                     /* [MLA_HG] this tile's rescale of the old sums */
    int64_t *rw = (int64_t *)(rs + MLA_HG);      /* [MLA_KT] the tile's keys' cache rows (8-byte aligned: MLA_HG even) */
    const float *qrow = qcat + ((int64_t)t * n_heads + h0) * lat;
#pragma unroll 8
    for (int i = threadIdx.x; i < MLA_HG * lat; i += blockDim.x) qs[i] = i < nh * lat ? qrow[i] * scale : 0.0f;
    if (threadIdx.x < MLA_HG) { ms[threadIdx.x] = -INFINITY; ls[threadIdx.x] = 0.0f; }
    float acc[MLA_HG][MLA_COLS];
#pragma unroll
    for (int h = 0; h < MLA_HG; h++)
#pragma unroll
        for (int k = 0; k < MLA_COLS; k++) acc[h][k] = 0.0f;
    __syncthreads();
    for (int jb = j0; jb < j1; jb += MLA_KT) {
        const int nk = j1 - jb < MLA_KT ? j1 - jb : MLA_KT;
        {   /* scores of keys jb + 4 warp + kk, all heads; their cache rows to rw for the values
             * (a key past nk: the tile's first key's row, any row held) */
            const float *kr[MLA_KPW];
#pragma unroll
            for (int kk = 0; kk < MLA_KPW; kk++) {
                const int j = warp * MLA_KPW + kk;
                if constexpr (PG) {
                    const int key = srow ? srow[jb + (j < nk ? j : 0)] : jb + (j < nk ? j : 0);
                    const int64_t row = pg_row(tb, lg, key);
                    kr[kk] = j < nk ? cache + row * lat : NULL;
                    if (lane == kk) rw[j] = row;
                } else {
                    const int key = j < nk ? (srow ? srow[jb + j] : jb + j) : -1;
                    kr[kk] = key >= 0 ? cache + (int64_t)key * lat : NULL;
                }
            }
            float v[MLA_KPW * MLA_HG];
#pragma unroll
            for (int i = 0; i < MLA_KPW * MLA_HG; i++) v[i] = 0.0f;
#pragma unroll 6
            for (int c = lane; c < lat; c += 32) {
                float kv[MLA_KPW];
#pragma unroll
                for (int kk = 0; kk < MLA_KPW; kk++) kv[kk] = kr[kk] ? kr[kk][c] : 0.0f;
#pragma unroll
                for (int h = 0; h < MLA_HG; h++) {
                    const float qv = qs[h * lat + c];
#pragma unroll
                    for (int kk = 0; kk < MLA_KPW; kk++) v[kk * MLA_HG + h] = fmaf(qv, kv[kk], v[kk * MLA_HG + h]);
                }
            }
            warp_sum_split<MLA_KPW * MLA_HG>(v);
            /* lane holds indices 2 lane, 2 lane + 1 = kk * MLA_HG + h */
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int idx = 2 * lane + e, kk = idx / MLA_HG, h = idx - kk * MLA_HG, j = warp * MLA_KPW + kk;
                ps[h * MLA_KT + j] = j < nk ? v[e] : -INFINITY;
            }
        }
        __syncthreads();
        for (int h = warp; h < MLA_HG; h += MLA_THREADS / 32) {   /* online softmax: lane = key */
            const float sc = lane < MLA_KT ? ps[h * MLA_KT + lane] : -INFINITY;
            float mx = sc;
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float mo = ms[h];
            mx = fmaxf(mx, mo);
            const float p = sc == -INFINITY ? 0.0f : expf(sc - mx);
            float sum = p;
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane < MLA_KT) ps[h * MLA_KT + lane] = p;
            if (lane == 0) {
                const float r = mo == -INFINITY ? 0.0f : expf(mo - mx);
                ms[h] = mx;
                ls[h] = ls[h] * r + sum;
                rs[h] = r;
            }
        }
        __syncthreads();
        {   /* values: acc[h][k] = acc · r + Σ_j p[h][j] row_j[c] */
#pragma unroll
            for (int k = 0; k < MLA_COLS; k++) {
                const int c = threadIdx.x + k * MLA_THREADS;
                if (c >= lat) break;
                float a[MLA_HG];
#pragma unroll
                for (int h = 0; h < MLA_HG; h++) a[h] = acc[h][k] * rs[h];
#pragma unroll 8
                for (int j = 0; j < MLA_KT; j++) {   /* keys past nk have p = 0 (their row: any held one) */
                    const float x = cache[(PG ? rw[j] : (int64_t)(j < nk ? (srow ? srow[jb + j] : jb + j) : (srow ? srow[jb] : jb))) * lat + c];
#pragma unroll
                    for (int h = 0; h < MLA_HG; h++) a[h] = fmaf(ps[h * MLA_KT + j], x, a[h]);
                }
#pragma unroll
                for (int h = 0; h < MLA_HG; h++) acc[h][k] = a[h];
            }
        }
        __syncthreads();
    }
    if (n_chunks == 1) {
#pragma unroll
        for (int h = 0; h < MLA_HG; h++) {
            if (h >= nh) break;
            const float inv = ls[h] > 0.0f ? 1.0f / ls[h] : 0.0f;
            float *orow = out + ((int64_t)t * n_heads + h0 + h) * lat;
#pragma unroll
            for (int k = 0; k < MLA_COLS; k++) {
                const int c = threadIdx.x + k * MLA_THREADS;
                if (c < lat) orow[c] = acc[h][k] * inv;
            }
        }
        return;
    }
#pragma unroll
    for (int h = 0; h < MLA_HG; h++) {
        if (h >= nh) break;
        float *p = part + (((int64_t)t * n_heads + h0 + h) * n_chunks + ck) * (lat + 2);
#pragma unroll
        for (int k = 0; k < MLA_COLS; k++) {
            const int c = threadIdx.x + k * MLA_THREADS;
            if (c < lat) p[c] = acc[h][k];
        }
        if (threadIdx.x == 0) { p[lat] = ms[h]; p[lat + 1] = ls[h]; }
    }
}

/* ---- decode: a few query rows, each warp its own run of keys ---------------------------------
 * The kernel above gives a block 16 heads and whole 32-key tiles: at batch 1 a short context is
 * one tile, so one block does all the work, ~30 µs on the H200 whatever the context up to a few
 * thousand keys (ncu: 2 warps per scheduler, ~11 cycles between issues). Here a block takes
 * MD_HG heads of one row and one run of its keys; warp w takes keys w, w + 8, ... of the run.
 * Lane l owns latent columns l, l + 32, ... (LPC of them): the queries (scaled) and the
 * accumulators of its heads sit in registers, each key row is loaded once (the next one
 * prefetched) and serves both its score (a warp all-reduce) and its value update, with the
 * online softmax (max m, sum l) kept by every lane alike. The block's 8 warps then merge in
 * shared memory in warp order, and the block writes its run's (acc, m, l) for the combine
 * kernel, or the normalised row when it is the row's only run. Up to LPC 18 (DeepSeek's 576
 * floats) two blocks share an SM (128 registers): at 138, what the paged cache's table reads
 * took it to, one did, and the kernel ran 8.2 -> 11.7 us at 512 keys (ncu, 2026-12-04). The
 * row of the key after the next is read a key ahead (rn). Still 20-21 us against 18.6 before
 * pages at 4096 keys, with a table or without (the build before compiled it to 128 registers
 * and a 16-byte spill; an instance with that addressing compiles to 144, or 128 held, and ran
 * 21.3 us): cause not found. */
enum { MD_HG = 2, MD_WARPS = 8, MD_MAX_WORK = 131072 };

template <int LPC>
__global__ void __launch_bounds__(MD_WARPS * 32, LPC <= 18 ? 2 : 1) mla_decode_kernel(float *out, float *part, const float *qcat,
                                                                   const float *cache, float *const *tab, int tab_step,
                                                                   const int32_t *pos, const int32_t *sel, int topk,
                                                                   int n_heads, int lat, float scale, int n_runs,
                                                                   ci_pages pg) {
    pdl_enter();
    extern __shared__ float md[];                 /* [MD_WARPS][MD_HG][lat] acc, then [MD_WARPS][MD_HG][2] m, l */
    const int t = blockIdx.z, run = blockIdx.y, h0 = blockIdx.x * MD_HG;
    const int nh = n_heads - h0 < MD_HG ? n_heads - h0 : MD_HG;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (tab) cache = tab[(int64_t)t * tab_step];
    const int32_t *tb = pg_table(pg, t);          /* the row's block table, NULL unpaged */
    const int lg = pg.blk_log2;
    const int count = mla_row_keys(pos, sel, topk, t);
    const int32_t *srow = sel && pos[t] + 1 > topk ? sel + (int64_t)t * topk : NULL;
    const int per = (count + n_runs - 1) / n_runs;
    const int j0 = run * per, j1 = count < j0 + per ? count : j0 + per;
    float *ml = md + MD_WARPS * MD_HG * lat;
    if (j0 >= j1) {                               /* a run past the context: weight 0 in the combine */
        mla_part_empty(part, t, n_heads, h0, nh, n_runs, run, lat);
        return;
    }
    float q[MD_HG][LPC], acc[MD_HG][LPC], m[MD_HG], l[MD_HG];
#pragma unroll
    for (int h = 0; h < MD_HG; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
        const float *qr = qcat + ((int64_t)t * n_heads + h0 + (h < nh ? h : 0)) * lat;
#pragma unroll
        for (int i = 0; i < LPC; i++) {
            const int c = lane + 32 * i;
            q[h][i] = h < nh && c < lat ? qr[c] * scale : 0.0f;
            acc[h][i] = 0.0f;
        }
    }
    float k[LPC], kn[LPC];
    int j = j0 + warp;
    /* the cache row of the key after the next one, read a key ahead (the table and sel reads
     * off the path of the row loads) */
    int64_t rn = j + MD_WARPS < j1 ? pg_row(tb, lg, srow ? srow[j + MD_WARPS] : j + MD_WARPS) : 0;
    if (j < j1) {
        const float *kr = cache + pg_row(tb, lg, srow ? srow[j] : j) * lat;
#pragma unroll
        for (int i = 0; i < LPC; i++) k[i] = lane + 32 * i < lat ? kr[lane + 32 * i] : 0.0f;
    }
    for (; j < j1; j += MD_WARPS) {
        const int jn = j + MD_WARPS, jnn = jn + MD_WARPS;
        if (jn < j1) {                            /* the warp's next key, in flight during this one */
            const float *kr = cache + rn * lat;
#pragma unroll
            for (int i = 0; i < LPC; i++) kn[i] = lane + 32 * i < lat ? kr[lane + 32 * i] : 0.0f;
        }
        if (jnn < j1) rn = pg_row(tb, lg, srow ? srow[jnn] : jnn);
        float sc[MD_HG];
#pragma unroll
        for (int h = 0; h < MD_HG; h++) {
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < LPC; i++) d = fmaf(q[h][i], k[i], d);
            sc[h] = d;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int h = 0; h < MD_HG; h++) sc[h] += __shfl_xor_sync(0xffffffffu, sc[h], o);
#pragma unroll
        for (int h = 0; h < MD_HG; h++) {
            const float mx = fmaxf(m[h], sc[h]);
            const float r = m[h] == -INFINITY ? 0.0f : expf(m[h] - mx);
            const float p = expf(sc[h] - mx);
            m[h] = mx;
            l[h] = l[h] * r + p;
#pragma unroll
            for (int i = 0; i < LPC; i++) acc[h][i] = fmaf(acc[h][i], r, p * k[i]);
        }
#pragma unroll
        for (int i = 0; i < LPC; i++) k[i] = kn[i];
    }
    /* the warps meet: warp w's (acc, m, l) to shared memory (a warp without keys has m = -inf) */
#pragma unroll
    for (int h = 0; h < MD_HG; h++) {
#pragma unroll
        for (int i = 0; i < LPC; i++) {
            const int c = lane + 32 * i;
            if (c < lat) md[((int64_t)warp * MD_HG + h) * lat + c] = acc[h][i];
        }
        if (lane == 0) { ml[(warp * MD_HG + h) * 2] = m[h]; ml[(warp * MD_HG + h) * 2 + 1] = l[h]; }
    }
    __syncthreads();
    for (int h = 0; h < nh; h++) {
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < MD_WARPS; w++) M = fmaxf(M, ml[(w * MD_HG + h) * 2]);
        float f[MD_WARPS], L = 0.0f;
#pragma unroll
        for (int w = 0; w < MD_WARPS; w++) {
            const float mw = ml[(w * MD_HG + h) * 2];
            f[w] = mw == -INFINITY ? 0.0f : expf(mw - M);
            L = fmaf(f[w], ml[(w * MD_HG + h) * 2 + 1], L);
        }
        const int64_t row = (int64_t)t * n_heads + h0 + h;
        if (n_runs == 1) {
            const float inv = L > 0.0f ? 1.0f / L : 0.0f;
            for (int c = threadIdx.x; c < lat; c += blockDim.x) {
                float a = 0.0f;
#pragma unroll
                for (int w = 0; w < MD_WARPS; w++) a = fmaf(f[w], md[((int64_t)w * MD_HG + h) * lat + c], a);
                out[row * lat + c] = a * inv;
            }
        } else {
            float *p = part + (row * n_runs + run) * (lat + 2);
            for (int c = threadIdx.x; c < lat; c += blockDim.x) {
                float a = 0.0f;
#pragma unroll
                for (int w = 0; w < MD_WARPS; w++) a = fmaf(f[w], md[((int64_t)w * MD_HG + h) * lat + c], a);
                p[c] = a;
            }
            if (threadIdx.x == 0) { p[lat] = M; p[lat + 1] = L; }
        }
    }
}

/* The floats of the weights' shared memory: n_chunks weights and the count, padded by two 16-byte
 * vectors (the unrolled sum loads the weights four at a time and may read past the count:
 * compute-sanitizer saw a 16-byte read at weights 16..19 of an 18-float buffer); the sliced
 * combine's slices follow them. */
static __host__ __device__ __forceinline__ int comb_wk_floats(int n_chunks) { return (n_chunks + 1 + 3) / 4 * 4 + 8; }

/* The chunks' weights of one (row, head) to wk[0 .. n_chunks) (divided by the sum), and the
 * count of chunks that saw keys to wk[n_chunks] (as int bits): warp 0 of the block, the rest wait
 * at the caller's barrier. */
static __device__ __forceinline__ void comb_weights(const float *p, int n_chunks, int lat, float *wk) {
    const int lane = threadIdx.x & 31;
    float M = -INFINITY;
    for (int k = lane; k < n_chunks; k += 32) M = fmaxf(M, p[(int64_t)k * (lat + 2) + lat]);
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float L = 0.0f;
    int used = 0;   /* chunks that saw keys: a prefix (the attention kernels cut whole tiles from 0) */
    for (int k = lane; k < n_chunks; k += 32) {
        const float m = p[(int64_t)k * (lat + 2) + lat];
        const float e = m == -INFINITY ? 0.0f : expf(m - M);
        wk[k] = e;
        if (m != -INFINITY) used = k + 1;
        L = fmaf(e, p[(int64_t)k * (lat + 2) + lat + 1], L);
    }
    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    for (int o = 16; o > 0; o >>= 1) used = max(used, __shfl_xor_sync(0xffffffffu, used, o));
    if (lane == 0) wk[n_chunks] = __int_as_float(used);
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    __syncwarp();
    for (int k = lane; k < n_chunks; k += 32) wk[k] *= inv;
}

/* out[t, h] = Σ_k e^(m_k - M) acc_k / Σ_k e^(m_k - M) l_k over the row's chunks (those that
 * saw no key have m = -inf and weigh 0). The chunks' weights go to shared memory first (a
 * warp's max and sum), then each thread sums its columns over the chunks with many loads
 * in flight. A block takes `cols` columns of one (row, head) (blockIdx.z the column block):
 * at batch 1 a block a head was 16 blocks on the whole GPU, ~6.4 / 9.5 us after 512 / 4096
 * keys (33 chunks; H200, ncu, 2026-12-07); each block works out the same weights, and each
 * column's sum keeps its chunk order, so the bits do not depend on cols. 128 columns (5 blocks a
 * head of 576) against 64 and a whole row, ds14 decode on an H100: after 512 649.3 / 649.8 /
 * 623.1 tok/s, after 4096 577.5 / 570.3 / 553.9 (RESULTS, 2026-12-07). */
__global__ void __launch_bounds__(256) mla_combine_kernel(float *out, const float *part, int n_heads, int lat,
                                                          int n_chunks, int cols) {
    pdl_enter();
    extern __shared__ float wk[];                 /* [n_chunks] weights, then the count of chunks used */
    const int h = blockIdx.x, t = blockIdx.y;
    const int c0 = blockIdx.z * cols, c1 = lat < c0 + cols ? lat : c0 + cols;
    const float *p = part + ((int64_t)t * n_heads + h) * n_chunks * (lat + 2);
    if (threadIdx.x < 32) comb_weights(p, n_chunks, lat, wk);
    __syncthreads();
    const int used = min(__float_as_int(wk[n_chunks]), n_chunks);
    float *orow = out + ((int64_t)t * n_heads + h) * lat;
    for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
        float a = 0.0f;
#pragma unroll 8
        for (int k = 0; k < used; k++) a = fmaf(wk[k], p[(int64_t)k * (lat + 2) + c], a);
        orow[c] = a;
    }
}

/* The combine with the chunks sliced among warps (cuda_be.mla_cslice): a block takes 32 columns of
 * one (row, head), lane = column; warp w sums chunks w, w + 8, ... in order, then warp 0 adds the
 * 8 slices in warp order: 8 x the loads in flight a column where the many short runs of the
 * tensor-core kernel (mla_tc.cu: ~128 at 4096 keys) make a long chain of each column's sum. The
 * order is fixed by the chunk count alone (other bits than mla_combine_kernel's). */
__global__ void __launch_bounds__(256) mla_combine_sliced_kernel(float *out, const float *part, int n_heads, int lat,
                                                                 int n_chunks) {
    pdl_enter();
    extern __shared__ float wk[];                 /* [n_chunks] weights, the count, padding; then [8][32] slices */
    const int h = blockIdx.x, t = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c = blockIdx.z * 32 + lane;
    const float *p = part + ((int64_t)t * n_heads + h) * n_chunks * (lat + 2);
    float *sl = wk + comb_wk_floats(n_chunks);
    if (warp == 0) comb_weights(p, n_chunks, lat, wk);
    __syncthreads();
    const int used = min(__float_as_int(wk[n_chunks]), n_chunks);
    float a = 0.0f;
    if (c < lat) {
#pragma unroll 4
        for (int k = warp; k < used; k += 8) a = fmaf(wk[k], p[(int64_t)k * (lat + 2) + c], a);
    }
    sl[warp * 32 + lane] = a;
    __syncthreads();
    if (warp == 0 && c < lat) {
        float s = sl[lane];
#pragma unroll
        for (int w = 1; w < 8; w++) s += sl[w * 32 + lane];
        out[((int64_t)t * n_heads + h) * lat + c] = s;
    }
}

/* The combine's shared memory in bytes: its weights (comb_wk_floats). */
static size_t mla_combine_smem(int n_chunks) { return (size_t)comb_wk_floats(n_chunks) * sizeof(float); }

/* The combine of n rows' n_chunks partial runs: the sliced kernel (cuda_be.mla_cslice), else
 * cuda_be.mla_comb columns a block (0: the whole row, 256 threads, the form before), as many
 * threads as columns up to 256. */
void cb_mla_combine_launch(cuda_be *cb, float *out, const float *part, int n, int n_heads, int lat, int n_chunks) {
    if (cb->mla_cslice) {
        const dim3 grid((unsigned)n_heads, (unsigned)n, (unsigned)((lat + 31) / 32));
        cb_launch(cb, mla_combine_sliced_kernel, grid, dim3(256), mla_combine_smem(n_chunks) + 256 * sizeof(float), out,
                  part, n_heads, lat, n_chunks);
        return;
    }
    const int cols = cb->mla_comb > 0 && cb->mla_comb < lat ? cb->mla_comb : lat;
    const int threads = cols >= 256 ? 256 : (cols + 31) / 32 * 32;
    const dim3 grid((unsigned)n_heads, (unsigned)n, (unsigned)((lat + cols - 1) / cols));
    cb_launch(cb, mla_combine_kernel, grid, dim3((unsigned)threads), mla_combine_smem(n_chunks), out, part, n_heads, lat,
              n_chunks, cols);
}

/* The decode kernel's launch: runs of at least MD_MIN_RUN keys (of max_keys, the longest
 * context a recorded step may meet), as many as fill the SMs twice over (H100, 2026-12-07,
 * DeepSeek-V2-Lite dims 14 layers decoding after 4096: runs for 1 / 2 / 3 / 4 / 6 blocks an SM
 * 507.5 / 547-550 / 505-508 / 506-513 / 476-477 tok/s); the per-row cost grows
 * with heads x keys, so the caller keeps it to n_heads x max_keys <= MD_MAX_WORK (past that the
 * tiled kernel, which shares each key row among 16 heads, is the faster one). */
enum { MD_MIN_RUN = 32 };
static void mla_decode_launch(cuda_be *cb, float *out, const float *qcat, const float *cache, float *const *tab,
                              int tab_step, int n, const int32_t *pos, const int32_t *sel, int topk, int keys,
                              int n_heads, int lat, float scale, ci_pages pg) {
    static int smem_set[5];
    const int lpc = (lat + 31) / 32;
    const size_t smem = ((size_t)MD_WARPS * MD_HG * lat + (size_t)MD_WARPS * MD_HG * 2) * sizeof(float);
    const int groups = (n_heads + MD_HG - 1) / MD_HG;
    int64_t want = (2 * (int64_t)cb->sm_count + (int64_t)n * groups - 1) / ((int64_t)n * groups);
    int64_t most = (keys + MD_MIN_RUN - 1) / MD_MIN_RUN;
    int n_runs = (int)(want < 1 ? 1 : want > most ? most : want);
    if (n_runs < 1) n_runs = 1;
    float *part = NULL;
    if (n_runs > 1) {
        part = (float *)cb_scratch_get(cb, &cb->mla_work[0], (size_t)n * n_heads * n_runs * (lat + 2) * sizeof(float));
        if (!part) return;
    }
    dim3 grid((unsigned)groups, (unsigned)n_runs, (unsigned)n), block(MD_WARPS * 32);
#define MD_GO(LPC, I)                                                                                               \
    do {                                                                                                            \
        if (!cb_smem_ok(cb, mla_decode_kernel<LPC>, smem, &smem_set[I])) {                                          \
            cb_fail_msg(cb, "MLA decode attention: shared memory");                                                 \
            return;                                                                                                 \
        }                                                                                                           \
        cb_launch(cb, mla_decode_kernel<LPC>, grid, block, smem, out, part, qcat, cache, tab, tab_step, pos, sel,  \
                  topk, n_heads, lat, scale, n_runs, pg);                                                           \
    } while (0)
    if (lpc <= 2) MD_GO(2, 0);
    else if (lpc <= 4) MD_GO(4, 1);
    else if (lpc <= 8) MD_GO(8, 2);
    else if (lpc <= 18) MD_GO(18, 3);
    else MD_GO(32, 4);
#undef MD_GO
    if (cb_launched(cb, "mla_attend (decode)") || n_runs == 1) return;
    cb_mla_combine_launch(cb, out, part, n, n_heads, lat, n_runs);
    cb_launched(cb, "mla_attend (combine)");
}

void cb_mla_attn_launch(cuda_be *cb, float *out, const float *qcat, const float *cache, float *const *tab,
                        int tab_step, int n, const int32_t *pos, const int32_t *sel, int topk, int keys, int n_heads,
                        int lat, float scale, const ci_pages *pages) {
    static int smem_set[2];
    const ci_pages pg = cb_pages(pages);
    const bool pi = pg.tab != NULL;
    if (lat > MLA_MAX_LAT) {
        cb_fail_msg(cb, "MLA attention: latent rows wider than 1024 floats are not supported");
        return;
    }
    const size_t smem = ((size_t)MLA_HG * lat + (size_t)MLA_HG * MLA_KT + 3 * (size_t)MLA_HG) * sizeof(float) +
                        (size_t)MLA_KT * sizeof(int64_t);
    if (!(pi ? cb_smem_ok(cb, mla_attn_kernel<true>, smem, &smem_set[1])
             : cb_smem_ok(cb, mla_attn_kernel<false>, smem, &smem_set[0]))) {
        cb_fail_msg(cb, "MLA attention: shared memory");
        return;
    }
    if (cb->mla_tc && (n <= 4 ? keys >= cb->mla_tc_min : cb->mla_tc == 2) &&
        cb_mla_tc_launch(cb, out, qcat, cache, tab, tab_step, n, pos, sel, topk, keys, n_heads, lat, scale, pg))
        return;
    if (cb->mla_decode && n <= 4 && (int64_t)n_heads * keys <= MD_MAX_WORK) {
        mla_decode_launch(cb, out, qcat, cache, tab, tab_step, n, pos, sel, topk, keys, n_heads, lat, scale, pg);
        return;
    }
    const int groups = (n_heads + MLA_HG - 1) / MLA_HG;
    /* one block per SM (decode; the kernel's registers allow one), never more chunks than
     * tiles of the longest context; each block takes its share of the row's actual keys at
     * run time */
    int64_t want = ((int64_t)cb->sm_count + (int64_t)n * groups - 1) / ((int64_t)n * groups);
    int64_t max_chunks = (keys + MLA_KT - 1) / MLA_KT;
    int n_chunks = (int)(want < 1 ? 1 : want > max_chunks ? max_chunks : want);
    float *part = NULL;
    if (n_chunks > 1) {
        part = (float *)cb_scratch_get(cb, &cb->mla_work[0], (size_t)n * n_heads * n_chunks * (lat + 2) * sizeof(float));
        if (!part) return;
    }
    const dim3 grid((unsigned)groups, (unsigned)n_chunks, (unsigned)n);
    if (pi)
        cb_launch(cb, mla_attn_kernel<true>, grid, dim3(MLA_THREADS), smem, out, part, qcat, cache, tab, tab_step, pos,
                  sel, topk, n_heads, lat, scale, n_chunks, pg);
    else
        cb_launch(cb, mla_attn_kernel<false>, grid, dim3(MLA_THREADS), smem, out, part, qcat, cache, tab, tab_step, pos,
                  sel, topk, n_heads, lat, scale, n_chunks, pg);
    if (cb_launched(cb, "mla_attend") || n_chunks == 1) return;
    cb_mla_combine_launch(cb, out, part, n, n_heads, lat, n_chunks);
    cb_launched(cb, "mla_attend (combine)");
}

void cb_mla_attend(cuda_be *cb, float *out, const float *qcat, const float *cache, float *const *tab, int tab_step,
                   int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale, const ci_pages *pages) {
    if (n <= 0 || n_heads <= 0 || lat <= 0 || max_keys <= 0) return;
    cb_mla_attn_launch(cb, out, qcat, cache, tab, tab_step, n, pos, NULL, 0, max_keys, n_heads, lat, scale, pages);
}
