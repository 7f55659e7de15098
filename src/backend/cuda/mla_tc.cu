/* mla_tc.cu — MLA attention over the latent cache on tensor cores (mla.cu's decode and tiled
 * kernels do it on the CUDA cores; cb_mla_attn_launch picks). K = V = the latent row of lat
 * floats (DeepSeek: 512 + 64); the queries arrive absorbed, one lat-wide row a head.
 *
 * A block takes one query row t, 16 heads of it (zero rows past n_heads) and one run of its
 * keys, in tiles of TC_KT = 32 keys staged by cp.async into shared memory (two stages: the next
 * tile loads while this one is used), rows TC_RS = LP + 8 floats apart (LP = lat rounded up to
 * 32, the columns past lat zero-filled, as are the rows past the run's last key). Eight warps:
 *   scores   S[16 heads, 32 keys] = Q · Kᵀ by mma m16n8k8 (tf32): warp w takes k-steps
 *            w W .. w W + W - 1 (W = LP / 64 rounded up) of all four 8-key n-tiles, its Q
 *            fragments held in registers for the whole run; the 8 partial tiles go to shared
 *            memory and are summed in warp order by the softmax. Within a k-step the fragment's
 *            slots t and t + 4 hold columns 8s + 2t and 8s + 2t + 1 (the same permutation on
 *            both operands, so the products are those of the plain order), which makes each
 *            lane's K load one 8-byte word, conflict-free at the row stride LP + 8.
 *   softmax  warp w keeps heads 2w, 2w + 1 (lane = key): the running max m and sum l in its
 *            registers, this tile's p and rescale r to shared memory.
 *   values   O[16, LP] = r O + P · V by mma: warp w takes the 8-column n-tiles w, w + 8, ...
 *            (W of them, acc in registers), four 8-key k-steps.
 * Each f32 operand x is split into tf32 hi = rn(x) and lo = rn(x - hi) and a product is
 * lo·hi + hi·lo + hi·hi (the three-pass tf32 form: about f32's precision). The block then writes
 * its run's (acc, m, l) in the combine's layout (mla.cu), or the normalised row when the row
 * has one run. Rows come as the other kernels take them: through a per-row table, a paged
 * block table, or DSA's selection (sel given and pos[t] + 1 > topk: the topk kept rows).
 *
 * Measured (H100, 2026-12-07, DeepSeek-V2-Lite dims 14 layers, bench/RESULTS.md): prefill of 4096
 * 1.39x mla.cu's tiled kernel, decode after 4096 1.05x its decode kernel, after 512 0.99x (16 blocks
 * of one tile on 132 SMs where the decode kernel spreads 264; cuda_be.mla_tc_min keeps short
 * decode contexts there). A tile is 1,728 mma (three passes of S and P·V); runs of 2 / 4 tiles
 * measured slower than runs of one, so a block's tile time, not the combine, is the cost. */
#include "cuda_internal.h"
#include <math.h>

enum { TC_KT = 32, TC_WARPS = 8, TC_HG = 16, TC_SS = TC_KT + 8, TC_PS = TC_KT + 4 };

__device__ __forceinline__ void tf32_split(float x, unsigned &hi, unsigned &lo) {
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(x));
    const float r = x - __uint_as_float(hi);
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(r));
}

/* c += a · b, one m16n8k8 tf32 tile: a rows (g, g + 8) x slots (t, t + 4), b slots (t, t + 4)
 * of column g, c rows g / g + 8 x columns 2t, 2t + 1 (g = lane / 4, t = lane % 4) */
__device__ __forceinline__ void mma_tf32(float *c, const unsigned *a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* the three-pass product: c += alo·bhi + ahi·blo + ahi·bhi */
__device__ __forceinline__ void mma_3x(float *c, const unsigned *ahi, const unsigned *alo, float b0, float b1) {
    unsigned h0, l0, h1, l1;
    tf32_split(b0, h0, l0);
    tf32_split(b1, h1, l1);
    mma_tf32(c, alo, h0, h1);
    mma_tf32(c, ahi, l0, l1);
    mma_tf32(c, ahi, h0, h1);
}

/* the tile of keys jb .. jb + TC_KT - 1 (cache rows through sel / the block table) into stage kt:
 * thread i copies row i / 8, 16-byte units i % 8, + 8, ... (a row's 8 threads read 128
 * contiguous bytes a step); units past lat and rows from the run's end j1 on zero-filled. A row not 16-byte
 * aligned (a table's own cache at an odd offset) goes 4 bytes at a time. */
__device__ __forceinline__ void tc_load_tile(float *kt, const float *cache, const int32_t *tb, int lg,
                                             const int32_t *srow, int jb, int j1, int lat, int LP) {
    const int r = threadIdx.x >> 3, u0 = threadIdx.x & 7;
    const bool ok = jb + r < j1;
    const float *src = cache;
    if (ok) src = cache + pg_row(tb, lg, srow ? srow[jb + r] : jb + r) * lat;
    float *dst = kt + r * (LP + 8);
    if (((uintptr_t)src & 15) == 0) {
        for (int u = u0; u < LP / 4; u += 8) cb_cp16(dst + 4 * u, ok && 4 * u < lat ? src + 4 * u : cache, ok && 4 * u < lat);
    } else {
        for (int c = u0; c < LP; c += 8) {
            if (ok && c < lat) {
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst + c)),
                             "l"(src + c)
                             : "memory");
            } else {
                dst[c] = 0.0f;
            }
        }
    }
}

/* grid (head groups of 16, runs, n); W = ceil(LP / 64): each warp's k-steps and n-tiles */
template <int W>
__global__ void __launch_bounds__(TC_WARPS * 32, 1) mla_tc_kernel(float *out, float *part, const float *qcat,
                                                                  const float *cache, float *const *tab, int tab_step,
                                                                  const int32_t *pos, const int32_t *sel, int topk,
                                                                  int n_heads, int lat, float scale, int n_runs,
                                                                  ci_pages pg) {
    pdl_enter();
    extern __shared__ __align__(16) float tsm[];
    const int LP = (lat + 31) & ~31, RS = LP + 8, KS = LP / 8;
    float *kt0 = tsm, *kt1 = kt0 + TC_KT * RS;             /* [2][TC_KT][RS] key tiles */
    float *sp = kt1 + TC_KT * RS;                          /* [TC_WARPS][16][TC_SS] partial scores */
    float *ps = sp + TC_WARPS * TC_HG * TC_SS;             /* [16][TC_PS] probabilities */
    float *rsh = ps + TC_HG * TC_PS;                       /* [16] rescales, then [16] final sums */
    const int t = blockIdx.z, run = blockIdx.y, h0 = blockIdx.x * TC_HG;
    const int nh = n_heads - h0 < TC_HG ? n_heads - h0 : TC_HG;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
    if (tab) cache = tab[(int64_t)t * tab_step];
    const int32_t *tb = pg_table(pg, t);
    const int lg = pg.blk_log2;
    const int count = mla_row_keys(pos, sel, topk, t);
    const int32_t *srow = sel && pos[t] + 1 > topk ? sel + (int64_t)t * topk : NULL;
    const int tiles = (count + TC_KT - 1) / TC_KT, per = (tiles + n_runs - 1) / n_runs;
    const int j0 = run * per * TC_KT, j1 = count < j0 + per * TC_KT ? count : j0 + per * TC_KT;
    if (j0 >= j1) {                                        /* a run past the context: weight 0 in the combine */
        mla_part_empty(part, t, n_heads, h0, nh, n_runs, run, lat);
        return;
    }
    tc_load_tile(kt0, cache, tb, lg, srow, j0, j1, lat, LP);
    cb_cp_commit();
    /* the warp's Q fragments (scaled; zero past nh and lat), split once */
    unsigned qh[W][4], ql[W][4];
#pragma unroll
    for (int i = 0; i < W; i++) {
        const int s = warp * W + i;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = g + (e & 1) * 8, c = 8 * s + 2 * tq + (e >> 1);
            const float v = s < KS && h < nh && c < lat ? qcat[((int64_t)t * n_heads + h0 + h) * lat + c] * scale : 0.0f;
            tf32_split(v, qh[i][e], ql[i][e]);
        }
    }
    float acc[W][4];
#pragma unroll
    for (int i = 0; i < W; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[i][e] = 0.0f;
    float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };   /* heads 2 warp, 2 warp + 1 */
    int stage = 0;
    for (int jb = j0; jb < j1; jb += TC_KT, stage ^= 1) {
        const int nk = j1 - jb < TC_KT ? j1 - jb : TC_KT;
        float *kt = stage ? kt1 : kt0;
        if (jb + TC_KT < j1) {                             /* the next tile into the other stage */
            tc_load_tile(stage ? kt0 : kt1, cache, tb, lg, srow, jb + TC_KT, j1, lat, LP);
            cb_cp_commit();
            cb_cp_wait<1>();
        } else {
            cb_cp_wait<0>();
        }
        __syncthreads();
        {   /* scores: this warp's k-steps of the four n-tiles */
            float sc[4][4];
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) sc[j][e] = 0.0f;
#pragma unroll
            for (int i = 0; i < W; i++) {
                const int s = warp * W + i;
                if (s >= KS) break;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const float2 b = *(const float2 *)(kt + (8 * j + g) * RS + 8 * s + 2 * tq);
                    mma_3x(sc[j], qh[i], ql[i], b.x, b.y);
                }
            }
            float *spw = sp + warp * TC_HG * TC_SS;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                *(float2 *)(spw + g * TC_SS + 8 * j + 2 * tq) = make_float2(sc[j][0], sc[j][1]);
                *(float2 *)(spw + (g + 8) * TC_SS + 8 * j + 2 * tq) = make_float2(sc[j][2], sc[j][3]);
            }
        }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < 2; e++) {                      /* online softmax, lane = key */
            const int h = 2 * warp + e;
            float s = 0.0f;
#pragma unroll
            for (int w = 0; w < TC_WARPS; w++) s += sp[(w * TC_HG + h) * TC_SS + lane];
            if (lane >= nk) s = -INFINITY;
            float mx = s;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            mx = fmaxf(mx, m[e]);
            const float p = lane < nk ? expf(s - mx) : 0.0f;
            float sum = p;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            const float r = m[e] == -INFINITY ? 0.0f : expf(m[e] - mx);
            m[e] = mx;
            l[e] = l[e] * r + sum;
            ps[h * TC_PS + lane] = p;
            if (lane == 0) rsh[h] = r;
        }
        __syncthreads();
        {   /* values: the warp's n-tiles, rescaled, then the tile's four 8-key k-steps */
            const float r0 = rsh[g], r1 = rsh[g + 8];
#pragma unroll
            for (int i = 0; i < W; i++) {
                acc[i][0] *= r0; acc[i][1] *= r0;
                acc[i][2] *= r1; acc[i][3] *= r1;
            }
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                unsigned ah[4], al[4];
                tf32_split(ps[g * TC_PS + 8 * kk + tq], ah[0], al[0]);
                tf32_split(ps[(g + 8) * TC_PS + 8 * kk + tq], ah[1], al[1]);
                tf32_split(ps[g * TC_PS + 8 * kk + tq + 4], ah[2], al[2]);
                tf32_split(ps[(g + 8) * TC_PS + 8 * kk + tq + 4], ah[3], al[3]);
                const float *v0 = kt + (8 * kk + tq) * RS + g, *v1 = v0 + 4 * RS;
#pragma unroll
                for (int i = 0; i < W; i++) {
                    const int nt = warp + TC_WARPS * i;
                    if (8 * nt >= LP) break;
                    mma_3x(acc[i], ah, al, v0[8 * nt], v1[8 * nt]);
                }
            }
        }
        __syncthreads();                                   /* the stage and ps free for the next tile */
    }
    /* the run's sums l per head to shared memory (the softmax warps hold them) */
    if (lane == 0) {
        rsh[TC_HG + 2 * warp] = l[0];
        rsh[TC_HG + 2 * warp + 1] = l[1];
    }
    __syncthreads();
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int h = g + 8 * half;
        if (h >= nh) continue;
        const int64_t row = (int64_t)t * n_heads + h0 + h;
        float *dst;
        float f = 1.0f;
        if (n_runs == 1) {
            const float ls = rsh[TC_HG + h];
            f = ls > 0.0f ? 1.0f / ls : 0.0f;
            dst = out + row * lat;
        } else {
            dst = part + (row * n_runs + run) * (lat + 2);
        }
#pragma unroll
        for (int i = 0; i < W; i++) {
            const int c = 8 * (warp + TC_WARPS * i) + 2 * tq;
            if (c >= lat) break;
            const float a0 = acc[i][2 * half] * f, a1 = acc[i][2 * half + 1] * f;
            *(float2 *)(dst + c) = make_float2(a0, a1);
        }
    }
    if (n_runs > 1 && lane == 0) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int h = 2 * warp + e;
            if (h >= nh) continue;
            float *p = part + (((int64_t)t * n_heads + h0 + h) * n_runs + run) * (lat + 2);
            p[lat] = m[e];
            p[lat + 1] = l[e];
        }
    }
}

static size_t mla_tc_smem(int lat) {
    const int LP = (lat + 31) & ~31;
    return ((size_t)2 * TC_KT * (LP + 8) + (size_t)TC_WARPS * TC_HG * TC_SS + (size_t)TC_HG * TC_PS + 2 * TC_HG) *
           sizeof(float);
}

/* The tensor-core kernel's launch (1), or 0 when it does not take the call (lat not a multiple
 * of 4, wider than 672 (two stages of its key rows pass cb_smem_ok's 200 KiB), or the cache not
 * 16-byte aligned: the caller runs mla.cu's kernels).
 * Runs: whole tiles of max_keys, about one block an SM over the rows and head groups, at
 * least cuda_be.mla_tc_run tiles each. */
int cb_mla_tc_launch(cuda_be *cb, float *out, const float *qcat, const float *cache, float *const *tab, int tab_step,
                     int n, const int32_t *pos, const int32_t *sel, int topk, int keys, int n_heads, int lat,
                     float scale, ci_pages pg) {
    static int smem_set[5];
    const int LP = (lat + 31) & ~31;
    const size_t smem = mla_tc_smem(lat);
    if (lat % 4 || smem > 200 * 1024 || (!tab && ((uintptr_t)cache & 15))) return 0;
    const int groups = (n_heads + TC_HG - 1) / TC_HG;
    const int64_t tiles = (keys + TC_KT - 1) / TC_KT, rt = cb->mla_tc_run > 0 ? cb->mla_tc_run : 1;
    int64_t want = ((int64_t)cb->sm_count + (int64_t)n * groups - 1) / ((int64_t)n * groups);
    const int64_t most = (tiles + rt - 1) / rt;
    const int n_runs = (int)(want > most ? most : want < 1 ? 1 : want);
    float *part = NULL;
    if (n_runs > 1) {
        part = (float *)cb_scratch_get(cb, &cb->mla_work[0], (size_t)n * n_heads * n_runs * (lat + 2) * sizeof(float));
        if (!part) return 1;
    }
    const dim3 grid((unsigned)groups, (unsigned)n_runs, (unsigned)n), block(TC_WARPS * 32);
#define TC_GO(W, I)                                                                                                 \
    do {                                                                                                            \
        if (!cb_smem_ok(cb, mla_tc_kernel<W>, smem, &smem_set[I])) {                                                \
            cb_fail_msg(cb, "MLA attention (tensor cores): shared memory");                                         \
            return 1;                                                                                               \
        }                                                                                                           \
        cb_launch(cb, mla_tc_kernel<W>, grid, block, smem, out, part, qcat, cache, tab, tab_step, pos, sel, topk,  \
                  n_heads, lat, scale, n_runs, pg);                                                                 \
    } while (0)
    if (LP <= 64) TC_GO(1, 0);
    else if (LP <= 128) TC_GO(2, 1);
    else if (LP <= 256) TC_GO(4, 2);
    else if (LP <= 576) TC_GO(9, 3);
    else TC_GO(11, 4);
#undef TC_GO
    if (cb_launched(cb, "mla_attend (tensor cores)") || n_runs == 1) return 1;
    cb_mla_combine_launch(cb, out, part, n, n_heads, lat, n_runs);
    cb_launched(cb, "mla_attend (combine)");
    return 1;
}
