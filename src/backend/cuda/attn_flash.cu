/* attn_flash.cu — prefill attention (head_dim 64 / 128 / 256) on tensor cores, scores and
 * output in registers (FlashAttention-2's form), with the key / value tiles copied by cp.async
 * a tile ahead (cuda_be.flash2; attn.cu's WMMA attn_flash_kernel with the switch off).
 *
 * Why the copies: the kernel before this one (attn_flash2_kernel, attn.cu until the
 * twenty-first session) staged each key tile in a loop of dependent steps (a float4 load, its
 * f16 conversion, a shared-memory store, the next load): every tile cost a chain of memory round
 * trips, ~20 us a 64-key tile on the H200 (ncu, 2026-12-04: 125 us a layer for 344 rows at
 * depth 0, 730 us at depth 1920, Qwen3-8B dims), where its arithmetic is well under 1 us; this
 * one is 1.1x (fresh prompts) to 3x (344 rows after 8192 keys) faster (bench/RESULTS.md).
 *
 * The math: a block takes 64 or 128 query rows (flash_bq below), a warp 16 of them; per key
 * tile S = Q·Kᵀ by m16n8k16 mma (Q pre-scaled in f16 from shared memory, f32 sums), keys
 * past a row's position masked (in the tiles that reach past a warp's shortest row), the
 * online softmax in registers in base 2 (Q pre-scaled by scale · log2 e, so each exponential is
 * one ex2 of the SFU; the merged segments' m too), P in f16 from S's registers
 * as the A operand of O += P·V; Q·scale·log2 e, K, V and P rounded to f16 (round-to-nearest), f32 sums. The
 * forms, each behind a switch for measuring:
 *  - staging: a tile's K and V rows go to shared memory as they are in the cache (f32, one
 *    cp.async of 16 bytes a thread and chunk, all of a tile's copies in flight at once), tile
 *    t + 1's copies issued before tile t is used. LDM (cuda_be.flash_ldm, head_dim 64 / 128):
 *    the tile is converted to f16 tiles once (all threads), fragments read by ldmatrix (V
 *    transposed by .trans); else each warp converts its fragments from the f32 stage (K: two
 *    float2 loads a fragment; V: four scalar loads, no transposed copy).
 *  - rows (cuda_be.flash_gqa): a block takes every head of one kv group on 64 / G positions
 *    (row r: position t0 + r % P, head hb + r / P; G a divisor of 64), so each K / V tile serves
 *    G heads; else one head on 64 positions.
 *  - key segments (cuda_be.flash_split): when the blocks are fewer than a wave (MINB an SM),
 *    the keys are cut into S segments (a block each, grid z) whose unnormalized O and (m, l) a
 *    second kernel merges in segment order. The keys are the caller's bound (max_keys: a
 *    prefill chunk's end where the model knows it, attn_bufs.keys).
 *  - a thread's loads are issued together: Q's rows in rounds of float4s, a tile's K / V
 *    copies after all of its table reads (one a tile when a block of the table holds whole
 *    tiles): one at a time, each round trip had been the thread's wait.
 *  - the f16 form (NST > 0, cuda_be.flash_h16; by default from FLASH_H16_ROWS query rows): a
 *    first kernel (kv_half_kernel) rounds the keys the rows attend to into f16 arrays
 *    [n_kv][keys][hd] (through the page table when paged), then the tiles are copied as they
 *    are into NST f16 stages read by ldmatrix: no f32 stage, no per-tile conversion pass, one
 *    sync a tile, 70 KB of shared memory at head_dim 128 (three blocks an SM). The operands are
 *    the LDM form's (the same f16 rounding of the same values, the same tiles and order): the
 *    same bits. ncu (H100, 124 rows after 1372 keys): the attention 44 -> 35 us a layer, but the
 *    conversion costs 8.5 us, so short chunks after long contexts keep the f32 stage.
 * The key tile is BK = 32 rows (16 at head_dim 256, or by CINFER_CUDA_FLASH_BK=16); a launch's
 * bits depend on its shape (max_keys among it: the segments) and the switches only (paged or
 * not, the same).
 *
 * Shared memory: Q [BQ][HD + 8] f16, two f32 stages of K and V (rows padded against bank
 * conflicts of the fragment reads: K HD + 8 for the 64-bit reads of a half warp, V HD + 4 for
 * the scalar reads of a warp; LDM: unpadded, plus f16 K / V tiles [BK][HD + 8]), the rows' key
 * counts [BQ]. HD 128: 86 KB (LDM 100 KB), two blocks an SM; BQ 128 at HD 128: 102 KB (LDM
 * 116 KB), one block of 8 warps an SM. */
#include "cuda_internal.h"
#include <cuda_fp16.h>
#include <math.h>

/* FLASH_H16_ROWS: the fewest query rows of a launch that takes the f16 form by default (its
 * keys' conversion is a pass over them; measured on an H100, bench/RESULTS.md thirty-seventh
 * session: 1496 fresh rows +6.5%, 344 after 8192 keys level, 124 after 1372 -1.5%) */
enum { FP_SPLIT_MAX = 16, FLASH_H16_ROWS = 512 };
/* FP_SLACK: how far (base 2) a row's max may rise above the reference its exponentials are
 * taken against before the warp moves the references and rescales O and l */
#define FP_SLACK 8.0f

/* BQ query rows a block (64 or 128; a warp takes 16, so 2 * BQ threads). LDM 0: fragments read
 * from the f32 stage (K rows HD + 8, V rows HD + 4 floats); 1: the stage (rows of HD floats)
 * converted once a tile into f16 tiles K16 / V16 [BK][HD + 8] read by ldmatrix */
template <int HD, int BK_, int LDM, int BQ_, int NST_ = 0>
struct fp_cfg {
    static constexpr int BQ = BQ_, THREADS = 2 * BQ_;
    static constexpr int BK = BK_, LQ = HD + 8, LK = LDM ? HD : HD + 8, LV = LDM ? HD : HD + 4;
    static constexpr int NST = NST_;            /* > 0: the f16 form, NST f16 stages (no f32 one) */
    static constexpr int STAGE = NST ? 0 : BK * (LK + LV); /* floats */
    static constexpr int T16 = NST ? NST * BK * LQ : LDM ? BK * LQ : 0; /* halves of K16, and of V16 */
    static constexpr size_t SMEM = (size_t)BQ * LQ * 2 + 2 * (size_t)STAGE * 4 + 2 * (size_t)T16 * 2 + BQ * sizeof(int);
};

__device__ __forceinline__ unsigned fp_h2(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *(unsigned *)&h;
}

/* 2^x by the SFU (ex2.approx.ftz: -inf -> +0, results below 2^-126 -> 0). The scores are kept in
 * base-2 units (Q pre-scaled by scale · log2 e), so each exponential is one subtraction and this
 * one instruction, where expf took ~10 (its range reduction) */
__device__ __forceinline__ float fp_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <int HD, int BK_, int MINB, int LDM, int BQ_, int NST = 0>
__global__ void __launch_bounds__(2 * BQ_, MINB) attn_flash_pipe_kernel(float *out, const float *q, const float *kc,
                                                                     const float *vc, const int32_t *pos, int pos0,
                                                                     int n, int n_heads, int n_kv, int kv_stride,
                                                                     float scale, ci_pages pg, float *part, int seg,
                                                                     int hpb, const __half *kh, const __half *vh,
                                                                     int hkeys) {
    pdl_enter();
    static_assert(!NST || LDM, "the f16 form reads its tiles by ldmatrix");
    typedef fp_cfg<HD, BK_, LDM, BQ_, NST> C;
    constexpr int BK = C::BK, LQ = C::LQ, LK = C::LK, LV = C::LV, BQ = C::BQ, NT = C::THREADS;
    constexpr int NS = NST ? NST : 1;                     /* f16 tile slots: tile t in slot t % NS */
    const int32_t *tb = pg.tab;
    const int lg = pg.blk_log2;
    extern __shared__ __align__(128) unsigned char smraw[];
    __half *Qs = (__half *)smraw;                         /* [BQ][LQ] */
    float *st = (float *)(Qs + BQ * LQ);                  /* stage s at st + s * STAGE: K [BK][LK], V [BK][LV] */
    __half *K16 = (__half *)(st + 2 * C::STAGE), *V16 = K16 + C::T16; /* LDM: [BK][LQ] each */
    int *lens = (int *)(V16 + C::T16);                    /* [BQ] keys of each row */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
    /* the block's BQ rows: hpb heads (1, or the whole kv group: its K / V tiles serve them all) of
     * P = BQ / hpb positions; row r is position t0 + r % P of head hb + r / P */
    const int P = BQ / hpb, t0 = blockIdx.x * P, hb = blockIdx.y * hpb, g = hb / (n_heads / n_kv);
    const int nq = n - t0 < P ? n - t0 : P;
    /* Q·scale in f16: rounds of QR float4 loads a thread, all issued before their conversions
     * (one at a time, each load's round trip was the thread's wait) */
    constexpr int QN = BQ * HD / 4 / NT, QR = QN < 8 ? QN : 8;
    const float qs = scale * 1.4426950408889634f;        /* scale · log2 e: scores in base 2 */
    static_assert(QN % QR == 0, "Q staging rounds");
#pragma unroll
    for (int u0 = 0; u0 < QN; u0 += QR) {
        float4 qv[QR];
#pragma unroll
        for (int u = 0; u < QR; u++) {
            const int i = tid + (u0 + u) * NT, r = i / (HD / 4), d = (i % (HD / 4)) * 4, pr = r % P;
            qv[u] = pr < nq ? *(const float4 *)(q + ((int64_t)(t0 + pr) * n_heads + hb + r / P) * HD + d)
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < QR; u++) {
            const int i = tid + (u0 + u) * NT, r = i / (HD / 4), d = (i % (HD / 4)) * 4;
            *(uint2 *)(Qs + r * LQ + d) = make_uint2(fp_h2(qv[u].x * qs, qv[u].y * qs),
                                                     fp_h2(qv[u].z * qs, qv[u].w * qs));
        }
    }
    if (tid < BQ) lens[tid] = tid % P < nq ? row_pos(pos, pos0, t0 + tid % P) + 1 : 0;
    __syncthreads();
    int Lmax = lens[lane];
#pragma unroll
    for (int i = 32; i < BQ; i += 32) Lmax = lens[lane + i] > Lmax ? lens[lane + i] : Lmax;
    for (int o = 16; o >= 1; o >>= 1) {
        const int x = __shfl_xor_sync(0xffffffffu, Lmax, o);
        Lmax = x > Lmax ? x : Lmax;
    }
    const int r0 = warp * 16 + gq, r1 = r0 + 8, L0 = lens[r0], L1 = lens[r1];
    int wl = L0 > L1 ? L0 : L1, ws = L0 < L1 ? L0 : L1; /* the warp's longest and shortest rows */
    for (int o = 16; o >= 4; o >>= 1) {
        const int x = __shfl_xor_sync(0xffffffffu, wl, o), y = __shfl_xor_sync(0xffffffffu, ws, o);
        wl = x > wl ? x : wl;
        ws = y < ws ? y : ws;
    }
    const float *kb = kc + (int64_t)g * HD, *vb = vc + (int64_t)g * HD;
    /* the f16 form: group g's keys as kv_half_kernel wrote them, [hkeys][HD] each */
    const __half *khb = kh + (int64_t)g * hkeys * HD, *vhb = vh + (int64_t)g * hkeys * HD;
    /* the block's tiles: all of them, or (split, blockIdx.z = s) those of keys s·seg .. (s + 1)·seg */
    int tbeg = 0, ntile = (Lmax + BK - 1) / BK;
    if (part) {
        tbeg = blockIdx.z * (seg / BK);
        ntile = ntile < tbeg + seg / BK ? ntile : tbeg + seg / BK;
    }
    /* tile t's K and V rows into stage t & 1: a thread per 16 bytes, rows past Lmax zero-filled
     * (their scores are masked; zeros keep 0 · V finite) */
    constexpr int SN = BK * HD / 4 / NT;          /* 16-byte chunks of K (and of V) a thread */
    static_assert(BK * HD / 4 % NT == 0, "stage chunks");
    /* a tile lies in one block of the table when blocks hold a multiple of BK rows (tiles
     * start at multiples of BK): one lookup a tile, else one a row (all issued first) */
    const bool one_block = !tb || (1 << lg) >= BK;
    auto stage = [&](int t) {
        float *Kd = st + (t & 1) * C::STAGE, *Vd = Kd + BK * LK;
        const int64_t base = one_block ? pg_row(tb, lg, t * BK) : 0;
        int64_t rows[SN];
#pragma unroll
        for (int u = 0; u < SN; u++) {
            const int key = t * BK + (tid + u * NT) / (HD / 4);
            rows[u] = key >= Lmax ? 0 : one_block ? base + (key - t * BK) : pg_row(tb, lg, key);
        }
#pragma unroll
        for (int u = 0; u < SN; u++) {
            const int i = tid + u * NT, j = i / (HD / 4), d = (i % (HD / 4)) * 4;
            const bool ok = t * BK + j < Lmax;
            cb_cp16(Kd + j * LK + d, kb + rows[u] * kv_stride + d, ok);
            cb_cp16(Vd + j * LV + d, vb + rows[u] * kv_stride + d, ok);
        }
        cb_cp_commit();
    };
    /* the f16 form: tile t's K and V rows (f16, as kv_half_kernel wrote them) straight into
     * slot t % NST of K16 / V16, rows padded to LQ for ldmatrix */
    auto stage16 = [&](int t) {
        constexpr int SN16 = BK * HD / 8 / NT;    /* 16-byte chunks of K (and of V) a thread */
        static_assert(!NST || BK * HD / 8 % NT == 0, "f16 stage chunks");
        __half *Kd = K16 + (t % NS) * BK * LQ, *Vd = V16 + (t % NS) * BK * LQ;
#pragma unroll
        for (int u = 0; u < SN16; u++) {
            const int i = tid + u * NT, j = i / (HD / 8), d = (i % (HD / 8)) * 8, key = t * BK + j;
            const bool ok = key < Lmax && key < hkeys;
            const int64_t r = ok ? key : 0;
            cb_cp16(Kd + j * LQ + d, khb + r * HD + d, ok);
            cb_cp16(Vd + j * LQ + d, vhb + r * HD + d, ok);
        }
        cb_cp_commit();
    };
    float o_[HD / 8][4];
#pragma unroll
    for (int d = 0; d < HD / 8; d++) o_[d][0] = o_[d][1] = o_[d][2] = o_[d][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    if (NST) {   /* the f16 form: NST - 1 tiles in flight before the first is used */
#pragma unroll
        for (int u = 0; u < NS - 1; u++)
            if (tbeg + u < ntile) stage16(tbeg + u);
            else cb_cp_commit();
    } else if (tbeg < ntile) stage(tbeg);
    for (int t = tbeg; t < ntile; t++) {
        const int j0 = t * BK;
        const float *Ks = st + (t & 1) * C::STAGE, *Vs = Ks + BK * LK;
        const __half *K16t = K16 + (t % NS) * BK * LQ, *V16t = V16 + (t % NS) * BK * LQ;
        if (NST) {
            cb_cp_wait<NST ? NST - 2 : 0>();              /* tile t is in (one group committed a tile, empty ones past the end) */
            __syncthreads();                              /* every warp sees it, and is done with tile t - 1's slot */
            if (t + NST - 1 < ntile) stage16(t + NST - 1); /* into that slot */
            else cb_cp_commit();
        } else {
        if (t + 1 < ntile) stage(t + 1);                  /* into the stage tile t - 1 used (all warps are past it) */
        else cb_cp_commit();                              /* an empty group: wait<1> below still means "tile t is in" */
        cb_cp_wait<1>();
        __syncthreads();                                  /* LDM: also every warp is done with K16 / V16 */
        }
        if (LDM && !NST) {                                /* the tile to f16, once for all warps */
#pragma unroll
            for (int i = tid; i < BK * HD / 4; i += NT) {
                const int j = i / (HD / 4), d = (i % (HD / 4)) * 4;
                const float4 k4 = *(const float4 *)(Ks + j * HD + d), v4 = *(const float4 *)(Vs + j * HD + d);
                *(uint2 *)(K16 + j * LQ + d) = make_uint2(fp_h2(k4.x, k4.y), fp_h2(k4.z, k4.w));
                *(uint2 *)(V16 + j * LQ + d) = make_uint2(fp_h2(v4.x, v4.y), fp_h2(v4.z, v4.w));
            }
            __syncthreads();
        }
        if (j0 < wl) {                                    /* else every key of the tile is past this warp's rows */
            float s_[BK / 8][4];
#pragma unroll
            for (int nt = 0; nt < BK / 8; nt++) s_[nt][0] = s_[nt][1] = s_[nt][2] = s_[nt][3] = 0.0f;
            if (LDM) {
                /* ldmatrix lanes: matrix mi = lane / 8, its row lane % 8. Q (A): rows +8 for odd
                 * mi, columns +8 for mi >= 2; K (B, two n-tiles): columns +8 for odd mi, keys +8
                 * for mi >= 2 */
                const int mi = lane >> 3, mr = lane & 7;
                const __half *qa = Qs + (warp * 16 + (mi & 1) * 8 + mr) * LQ + (mi >> 1) * 8;
                const __half *ka = K16t + ((mi >> 1) * 8 + mr) * LQ + (mi & 1) * 8;
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    unsigned a[4];
                    cb_ldsm4(a, qa + kk * 16);
#pragma unroll
                    for (int nt = 0; nt < BK / 8; nt += 2) {
                        unsigned b[4];
                        cb_ldsm4(b, ka + nt * 8 * LQ + kk * 16);
                        cb_mma_f16(s_[nt], a[0], a[1], a[2], a[3], b[0], b[1]);
                        cb_mma_f16(s_[nt + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
                    }
                }
            } else
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                const __half *qa = Qs + r0 * LQ + kk * 16 + 2 * tq, *qb = Qs + r1 * LQ + kk * 16 + 2 * tq;
                const unsigned a0 = *(const unsigned *)qa, a1 = *(const unsigned *)qb;
                const unsigned a2 = *(const unsigned *)(qa + 8), a3 = *(const unsigned *)(qb + 8);
#pragma unroll
                for (int nt = 0; nt < BK / 8; nt++) {
                    const float *kr = Ks + (nt * 8 + gq) * LK + kk * 16 + 2 * tq;
                    const float2 x = *(const float2 *)kr, y = *(const float2 *)(kr + 8);
                    cb_mma_f16(s_[nt], a0, a1, a2, a3, fp_h2(x.x, x.y), fp_h2(y.x, y.y));
                }
            }
            /* mask (only where the tile reaches past the warp's shortest row), the rows' new
             * maxima (a row's 4 lanes: lanes 4gq .. 4gq + 3) */
            if (j0 + BK > ws)
#pragma unroll
                for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int key = j0 + nt * 8 + 2 * tq + e;
                        if (key >= L0) s_[nt][e] = -INFINITY;
                        if (key >= L1) s_[nt][2 + e] = -INFINITY;
                    }
            float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < BK / 8; nt++) {
                mx0 = fmaxf(mx0, fmaxf(s_[nt][0], s_[nt][1]));
                mx1 = fmaxf(mx1, fmaxf(s_[nt][2], s_[nt][3]));
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
            /* Each row's exponentials are taken against a reference m (m0 / m1), moved up to the
             * row's running max only when some row of the warp has gained more than FP_SLACK over
             * its reference (so P <= 2^FP_SLACK, exact in f16's range), which after the first tiles
             * is seldom: O and l are rescaled then, not every tile. O / l and the merged segments
             * use the same reference, so the result is the softmax's whatever it is. A row with no
             * key yet (m = -inf) takes 0: its exponentials are 2^-inf = 0, and so is the factor. */
            if (__any_sync(0xffffffffu, mx0 > m0 + FP_SLACK || mx1 > m1 + FP_SLACK)) {
                const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
                const float al0 = fp_ex2(m0 - (mn0 == -INFINITY ? 0.0f : mn0));
                const float al1 = fp_ex2(m1 - (mn1 == -INFINITY ? 0.0f : mn1));
                m0 = mn0;
                m1 = mn1;
                l0 *= al0;
                l1 *= al1;
#pragma unroll
                for (int d = 0; d < HD / 8; d++) {
                    o_[d][0] *= al0; o_[d][1] *= al0;
                    o_[d][2] *= al1; o_[d][3] *= al1;
                }
            }
            const float ms0 = m0 == -INFINITY ? 0.0f : m0, ms1 = m1 == -INFINITY ? 0.0f : m1;
            float ls0 = 0.0f, ls1 = 0.0f;
            unsigned pa[BK / 8][2];                       /* P in f16 pairs: [n-tile][row g / g + 8] */
#pragma unroll
            for (int nt = 0; nt < BK / 8; nt++) {
                const float p0 = fp_ex2(s_[nt][0] - ms0), p1 = fp_ex2(s_[nt][1] - ms0);
                const float p2 = fp_ex2(s_[nt][2] - ms1), p3 = fp_ex2(s_[nt][3] - ms1);
                ls0 += p0 + p1;
                ls1 += p2 + p3;
                pa[nt][0] = fp_h2(p0, p1);
                pa[nt][1] = fp_h2(p2, p3);
            }
            l0 += ls0;
            l1 += ls1;
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                const unsigned a0 = pa[2 * kk][0], a1 = pa[2 * kk][1], a2 = pa[2 * kk + 1][0], a3 = pa[2 * kk + 1][1];
                if (LDM) {   /* V (B, transposed, two n-tiles): keys +8 for odd mi, columns +8 for mi >= 2 */
                    const int mi = lane >> 3, mr = lane & 7;
                    const __half *va = V16t + (kk * 16 + (mi & 1) * 8 + mr) * LQ + (mi >> 1) * 8;
#pragma unroll
                    for (int d = 0; d < HD / 8; d += 2) {
                        unsigned b[4];
                        cb_ldsm4_t(b, va + d * 8);
                        cb_mma_f16(o_[d], a0, a1, a2, a3, b[0], b[1]);
                        cb_mma_f16(o_[d + 1], a0, a1, a2, a3, b[2], b[3]);
                    }
                } else {
                    const float *v0 = Vs + (kk * 16 + 2 * tq) * LV + gq;   /* B[k][n] = V[key k][column n] */
#pragma unroll
                    for (int d = 0; d < HD / 8; d++) {
                        const float *vr = v0 + d * 8;
                        cb_mma_f16(o_[d], a0, a1, a2, a3, fp_h2(vr[0], vr[LV]), fp_h2(vr[8 * LV], vr[9 * LV]));
                    }
                }
            }
        }
        if (!LDM) __syncthreads();                        /* every warp is done with stage t & 1 (LDM: with
                                                           * the stage since the conversion's sync; the f16
                                                           * form: the next tile's first sync) */
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if (part) {   /* the segment's unnormalized O and its (m, l): fp_combine_kernel merges them */
        float *po = part + ((int64_t)blockIdx.z * n + t0) * n_heads * (HD + 2);
        float *y0 = po + ((int64_t)(r0 % P) * n_heads + hb + r0 / P) * (HD + 2);
        float *y1 = po + ((int64_t)(r1 % P) * n_heads + hb + r1 / P) * (HD + 2);
#pragma unroll
        for (int d = 0; d < HD / 8; d++) {                /* a row's 4 lanes: 32 bytes, one sector */
            const int col = d * 8 + 2 * tq;
            if (r0 % P < nq) *(float2 *)(y0 + col) = make_float2(o_[d][0], o_[d][1]);
            if (r1 % P < nq) *(float2 *)(y1 + col) = make_float2(o_[d][2], o_[d][3]);
        }
        if (tq == 0 && r0 % P < nq) *(float2 *)(y0 + HD) = make_float2(m0, l0);
        if (tq == 0 && r1 % P < nq) *(float2 *)(y1 + HD) = make_float2(m1, l1);
        return;
    }
    const float i0 = 1.0f / l0, i1 = 1.0f / l1;
#pragma unroll
    for (int d = 0; d < HD / 8; d++) {
        const int col = d * 8 + 2 * tq;
        if (r0 % P < nq)
            *(float2 *)(out + ((int64_t)(t0 + r0 % P) * n_heads + hb + r0 / P) * HD + col) =
                make_float2(o_[d][0] * i0, o_[d][1] * i0);
        if (r1 % P < nq)
            *(float2 *)(out + ((int64_t)(t0 + r1 % P) * n_heads + hb + r1 / P) * HD + col) =
                make_float2(o_[d][2] * i1, o_[d][3] * i1);
    }
}

/* Merges the S key segments of a split launch: a warp per (row, head), segments in order (fixed
 * order, the same bits every run); a segment whose keys are all past the row (m = -inf) adds
 * nothing. part: [S][n][n_heads][hd + 2] (O unnormalized, then m in base 2, l). */
__global__ void fp_combine_kernel(float *out, const float *part, int n, int n_heads, int hd, int S) {
    pdl_enter();
    const int w = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (w >= n * n_heads) return;
    const int64_t seg_stride = (int64_t)n * n_heads * (hd + 2);
    const float *p = part + (int64_t)w * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < S; s++) M = fmaxf(M, p[s * seg_stride + hd]);
    float L = 0.0f, acc[8] = { 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f };   /* hd <= 256: 8 columns a lane */
    for (int s = 0; s < S; s++) {
        const float *ps = p + s * seg_stride, m = ps[hd];
        if (m == -INFINITY) continue;
        const float e = exp2f(m - M);             /* m, M in base 2 (the scores' units) */
        L += e * ps[hd + 1];
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (lane + 32 * i < hd) acc[i] += e * ps[lane + 32 * i];
    }
    const float inv = 1.0f / L;
    float *y = out + (int64_t)w * hd;
#pragma unroll
    for (int i = 0; i < 8; i++)
        if (lane + 32 * i < hd) y[lane + 32 * i] = acc[i] * inv;
}

/* The f16 form's keys: K and V of the positions the rows attend to (0 .. max pos[t], within the
 * launch's key bound `keys`, which a caller may give loosely: the cache's rows; the rows
 * through the page table when paged) rounded to f16 (nearest even, as the f32 form rounds them
 * in each tile) into kh / vh [n_kv][keys][hd], a thread per 8 columns. */
__global__ void kv_half_kernel(__half *kh, __half *vh, const float *kc, const float *vc, int keys, int n_kv, int hd,
                               int kv_stride, ci_pages pg, const int32_t *pos, int pos0, int n) {
    pdl_enter();
    __shared__ int lim;
    if (threadIdx.x == 0) lim = 0;
    __syncthreads();
    int m = 0;
    for (int t = threadIdx.x; t < n; t += blockDim.x) m = max(m, row_pos(pos, pos0, t) + 1);
    atomicMax(&lim, m);
    __syncthreads();
    const int c8 = hd / 8, L = lim < keys ? lim : keys;
    const int64_t total = (int64_t)L * n_kv * c8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int d = (int)(i % c8) * 8;
        const int64_t r = i / c8;
        const int g = (int)(r % n_kv), key = (int)(r / n_kv);
        const int64_t off = pg_row(pg.tab, pg.blk_log2, key) * kv_stride + (int64_t)g * hd + d;
        const float4 k0 = *(const float4 *)(kc + off), k1 = *(const float4 *)(kc + off + 4);
        const float4 v0 = *(const float4 *)(vc + off), v1 = *(const float4 *)(vc + off + 4);
        const int64_t o = ((int64_t)g * keys + key) * hd + d;
        *(uint4 *)(kh + o) = make_uint4(fp_h2(k0.x, k0.y), fp_h2(k0.z, k0.w), fp_h2(k1.x, k1.y), fp_h2(k1.z, k1.w));
        *(uint4 *)(vh + o) = make_uint4(fp_h2(v0.x, v0.y), fp_h2(v0.z, v0.w), fp_h2(v1.x, v1.y), fp_h2(v1.z, v1.w));
    }
}

template <int HD, int BK, int MINB, int LDM, int BQ, int NST = 0>
static void flash_pipe_launch(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                              const int32_t *pos, int64_t keys, int n_heads, int n_kv, int kv_stride, float scale,
                              ci_pages pg, const __half *kh = 0, const __half *vh = 0) {
    static int set = 0;
    typedef fp_cfg<HD, BK, LDM, BQ, NST> C;
    if (!cb_smem_ok(cb, attn_flash_pipe_kernel<HD, BK, MINB, LDM, BQ, NST>, C::SMEM, &set)) {
        cb_fail_msg(cb, "attention (flash, pipelined): shared memory");
        return;
    }
    /* Split the keys when the (query tile, head) blocks are too few to fill the device (a few
     * hundred rows after a long cached prefix: 344 rows x 32 heads = 192 blocks for 132 SMs,
     * each walking ~2000 keys): S segments of seg keys, each block one segment, then a merge.
     * S from the shape on the host (keys, from the caller: pos0 + n, or max_keys when the rows carry positions),
     * so it is the same for a paged and an unpaged cache; never inside a graph capture (a
     * replay at a later position would keep this launch's segments). */
    const int G = n_heads / n_kv, hpb = cb->flash_gqa && BQ % G == 0 ? G : 1, P = BQ / hpb;
    const int blocks = (n + P - 1) / P * (n_heads / hpb);
    /* S: the fewest rounds of tiles a slot walks, counting whole waves of MINB blocks an SM
     * (the longest rows' tiles, keys / BK; fewer segments on a tie: fewer partials to merge).
     * 124 rows after 1372 keys, 64 blocks: 4 segments of 12 tiles in one wave, where 5 took
     * two waves of 10. */
    int S = 1;
    const int slots = MINB * cb->sm_count;
    if (cb->flash_split && !cb->capturing && blocks < slots) {
        const int64_t tiles = (keys + BK - 1) / BK;
        int smax = (int)(keys / cb->flash_segmin);
        smax = smax < FP_SPLIT_MAX ? smax : FP_SPLIT_MAX;
        int64_t best = -1;
        for (int s = 1; s <= smax; s++) {
            const int64_t rounds = ((int64_t)blocks * s + slots - 1) / slots * ((tiles + s - 1) / s);
            if (best < 0 || rounds < best) best = rounds, S = s;
        }
    }
    const int seg = (int)(((keys + S - 1) / S + BK - 1) / BK * BK);
    float *part = 0;
    if (S > 1) {
        part = (float *)cb_scratch_get(cb, &cb->attn_fpart, (size_t)S * n * n_heads * (HD + 2) * sizeof(float));
        if (!part) return;
    }
    dim3 grid((n + P - 1) / P, n_heads / hpb, S);
    cb_launch(cb, attn_flash_pipe_kernel<HD, BK, MINB, LDM, BQ, NST>, grid, dim3(C::THREADS), C::SMEM, out, q, k, v, pos,
              pos0, n, n_heads, n_kv, kv_stride, scale, pg, part, seg, hpb, kh, vh, (int)keys);
    if (cb_launched(cb, "attention (flash, pipelined)") || S == 1) return;
    cb_launch(cb, fp_combine_kernel, dim3((n * n_heads + 3) / 4), dim3(128), 0, out, (const float *)part, n, n_heads,
              HD, S);
    cb_launched(cb, "attention (flash, merge)");
}

/* 128 query rows a block for long key walks: a launch of n rows takes BQ = 128 when the block's
 * positions (128, or 128 / G with a block per kv group) are at most n and its keys number 4096
 * or more; each K / V tile then serves twice the rows (head_dim 64 / 128; 256 keeps 64). H100,
 * Qwen3-8B dims 12 layers, prefill tok/s 64 -> 128 rows (2026-12-05p-flashbq.sh): 4096 fresh
 * 81.2k / 83.6k -> 84.9k / 84.8k, 344 after 8192 36.6k / 36.8k -> 37.8k / 37.9k; shorter walks
 * level or slower (344 after 1920 60.7k / 62.1k -> 59.3k / 60.0k, 1000 fresh -1%, 124 after
 * 1372 and 216 after 1280 level). cuda_be.flash_bq: 64 or 128 always, 0 by that rule. */
static int flash_bq(const cuda_be *cb, int n, int64_t keys, int n_heads, int n_kv, int hd) {
    if (hd > 128 || cb->flash_bk == 16) return 64;
    if (cb->flash_bq) return cb->flash_bq;
    const int G = n_heads / n_kv, P = cb->flash_gqa && 128 % G == 0 ? 128 / G : 128;
    return n >= P && keys >= 4096 ? 128 : 64;
}

int cb_attn_flash_pipe(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                       const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                       ci_pages pg) {
#define FP_ARGS cb, out, q, k, v, n, pos0, pos, keys, n_heads, n_kv, kv_stride, scale, pg
    const int64_t keys = pos ? (int64_t)max_keys : ((int64_t)pos0 + n < max_keys ? (int64_t)pos0 + n : max_keys);
    const int bq = flash_bq(cb, n, keys, n_heads, n_kv, hd);
    /* the f16 form (cuda_be.flash_h16: 3 or 4 stages; by default 3 from FLASH_H16_ROWS rows):
     * the keys rounded to f16 once by kv_half_kernel, then tiles copied as they are into NST f16
     * stages, no per-tile conversion; the same f16 operands and order as the LDM form, so the
     * same bits. 64 query rows a block, head_dim 64 / 128, a scratch of at most 64 MiB, never
     * inside a graph capture. */
    const size_t hbytes = (size_t)keys * n_kv * hd * sizeof(__half);
    const int h16 = cb->flash_h16 >= 0 ? cb->flash_h16 : n >= FLASH_H16_ROWS ? 3 : 0;
    if (h16 && cb->flash_ldm && cb->flash_bk == 32 && bq == 64 && (hd == 64 || hd == 128) && !cb->capturing && keys > 0 &&
        2 * hbytes <= ((size_t)64 << 20)) {
        __half *kh = (__half *)cb_scratch_get(cb, &cb->attn_h16, 2 * hbytes), *vh = kh + hbytes / sizeof(__half);
        if (!kh) return 1;
        const int64_t items = keys * n_kv * (hd / 8);
        int64_t blocks = (items + 255) / 256;
        if (blocks > (int64_t)cb->sm_count * 4) blocks = (int64_t)cb->sm_count * 4;   /* each reads the n positions */
        cb_launch(cb, kv_half_kernel, dim3((unsigned)blocks), dim3(256), 0, kh, vh, k, v, (int)keys, n_kv, hd, kv_stride, pg,
                  pos, pos0, n);
        if (cb_launched(cb, "attention (keys to f16)")) return 1;
        if (hd == 64 && h16 == 4) flash_pipe_launch<64, 32, 3, 1, 64, 4>(FP_ARGS, kh, vh);
        else if (hd == 64) flash_pipe_launch<64, 32, 4, 1, 64, 3>(FP_ARGS, kh, vh);
        else if (h16 == 4) flash_pipe_launch<128, 32, 2, 1, 64, 4>(FP_ARGS, kh, vh);
        else flash_pipe_launch<128, 32, 3, 1, 64, 3>(FP_ARGS, kh, vh);
        return 1;
    }
    if (cb->flash_ldm) {
        if (hd == 64 && bq == 128) flash_pipe_launch<64, 32, 2, 1, 128>(FP_ARGS);
        else if (hd == 64) flash_pipe_launch<64, 32, 4, 1, 64>(FP_ARGS);
        else if (hd == 128 && cb->flash_bk == 16) flash_pipe_launch<128, 16, 4, 1, 64>(FP_ARGS);
        else if (hd == 128 && bq == 128) flash_pipe_launch<128, 32, 1, 1, 128>(FP_ARGS);
        else if (hd == 128) flash_pipe_launch<128, 32, 2, 1, 64>(FP_ARGS);
        else if (hd == 256) flash_pipe_launch<256, 16, 2, 0, 64>(FP_ARGS);   /* LDM's f16 tiles: one block an SM */
        else return 0;
        return 1;
    }
    if (hd == 64 && bq == 128) flash_pipe_launch<64, 32, 2, 0, 128>(FP_ARGS);
    else if (hd == 64) flash_pipe_launch<64, 32, 4, 0, 64>(FP_ARGS);
    else if (hd == 128 && cb->flash_bk == 16) flash_pipe_launch<128, 16, 4, 0, 64>(FP_ARGS);
    else if (hd == 128 && bq == 128) flash_pipe_launch<128, 32, 1, 0, 128>(FP_ARGS);
    else if (hd == 128) flash_pipe_launch<128, 32, 2, 0, 64>(FP_ARGS);
    else if (hd == 256) flash_pipe_launch<256, 16, 2, 0, 64>(FP_ARGS);
    else return 0;
#undef FP_ARGS
    return 1;
}
