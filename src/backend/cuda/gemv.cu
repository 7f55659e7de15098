/* gemv.cu — decode matmuls: y[n, R] = x[n, C] · Wᵀ for n <= 8 token rows, and the cuBLAS
 * path for larger n.
 *
 * Decode is bound by reading the weights once, so the kernel is built around the weight
 * stream: each warp owns RPW consecutive rows (two streams per row for the fused SwiGLU:
 * the gate row and the up row), each lane loads 16 bytes of every stream per step (8 bf16
 * / f16, 4 f32, 16 fp8), converts them in registers and multiplies them with the same
 * columns of all n token rows (x is read through the read-only cache: every warp of the
 * SM reads the same few KiB). The warp then sums its lanes with shuffles and lane 0 writes
 * the row. A launch may cover up to 4 matrices that share the input (q / k / v): the grid
 * is their blocks laid end to end. Odd sizes (C not a multiple of the vector width,
 * unaligned bases, fp8 blocks not a multiple of 16) take the same kernel with one element
 * per lane per step.
 *
 * Numerics: products and sums in f32 (each lane sums its columns in order, then a shuffle
 * tree), fp8 weights multiplied by their block scale before the product, as on the CPU.
 * fp8 weights of whole 128-column scale blocks go to quant_mma.cu's tensor-core GEMVs first
 * (cb_qt_fp8); these kernels keep the other fp8 layouts (and norm_matmul_keep's fp8 calls). */
#include "cuda_internal.h"
#include "loaders.cuh"
#include "quant.cuh"

enum { WARPS = 4 };

struct gemv_args {
    const void *w[4];
    const void *scale[4];
    float *y[4];
    int rows[4];
    int64_t scale_row0[4];
    int blk_start[5];
    int count, cols, n;
    int block, scale_cols, scale_dtype; /* fp8: block size, scale grid columns, 0 f32 / 1 bf16 / 2 e8m0 / -1 none */
    int block_shift;                    /* log2(block) when a power of two, else -1 */
    const float *x;
    const float *norm_w;                /* NORM kernels: x is RMS-normed with this weight first */
    float *xn_out;                      /* NORM kernels: block 0 writes the normed rows here too */
    float eps;
};

/* Scale of column c in the row whose scale-grid row starts at srow. */
__device__ __forceinline__ float scale_at(const gemv_args &a, const void *srow, int c) {
    int cb = a.block_shift >= 0 ? c >> a.block_shift : c / a.block;
    if (a.scale_dtype == 0) return __ldg((const float *)srow + cb);
    if (a.scale_dtype == 1) return __uint_as_float((unsigned)__ldg((const unsigned short *)srow + cb) << 16);
    unsigned e = __ldg((const unsigned char *)srow + cb);
    return e == 255 ? __int_as_float(0x7fc00000) : e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
}

/* U column steps of 32 * VEC per loop trip: all U x S 16-byte loads are issued before the
 * first product, so each lane has U * S loads in flight, and the next trip's loads are
 * issued before this trip's products (two buffers). The first trip's weights are loaded
 * before pdl_enter(): weights are no kernel's output, so their first round trip overlaps
 * the previous kernel's tail (and, with NORM, the block's RMS pass over x). */
template <class L, int NT, int MODE, bool AL, int RPW, int U, bool NORM, int KS>
__global__ void __launch_bounds__(WARPS * 32) gemv_kernel(gemv_args a) {
    static_assert(KS == 1 || (KS == WARPS && RPW == 1), "a row split over the block's warps: one row per block");
    constexpr int V = AL ? L::VEC : 1;
    constexpr int S = MODE == CB_SWIGLU ? 2 * RPW : RPW;
    constexpr int STEP = 32 * V * U;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kw = KS > 1 ? warp : 0;   /* KS > 1: this warp's share of the row's column steps */
    const int b = blockIdx.x;
    int mi = 0;
    if (MODE == CB_STORE)
        while (mi + 1 < a.count && b >= a.blk_start[mi + 1]) mi++;
    const int R = a.rows[mi];
    const int row0 = KS > 1 ? b - a.blk_start[mi] : (b - a.blk_start[mi]) * (WARPS * RPW) + warp * RPW;
    const bool live = row0 < R;
    const int C = a.cols;
    const char *wp[S];
    const void *srow[S];
#pragma unroll
    for (int s = 0; s < S; s++) {
        int r = row0 + (s % RPW);
        if (r >= R) r = R - 1; /* clamped: computed, never written */
        const int m = MODE == CB_SWIGLU ? s / RPW : mi;
        wp[s] = (const char *)a.w[m] + (int64_t)r * C * L::BYTES;
        srow[s] = NULL;
        if (L::BYTES == 1 && a.scale_dtype >= 0) {
            int64_t sr = (a.scale_row0[m] + r) / a.block;
            int es = a.scale_dtype == 0 ? 4 : a.scale_dtype == 1 ? 2 : 1;
            srow[s] = (const char *)a.scale[m] + sr * a.scale_cols * es;
        }
    }
    uint4 cur[AL ? U : 1][S];
    if (AL && live) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int s = 0; s < S; s++)
                if (kw * STEP + lane * V + u * 32 * V < C)
                    cur[u][s] = ld_stream(wp[s] + (int64_t)(kw * STEP + lane * V + u * 32 * V) * L::BYTES);
    }
    pdl_enter();
    /* NORM: each block takes the inverse RMS of its token rows first (as the CPU's
     * rmsnorm: f32 sum of squares, the root in double), then multiplies x by it and the
     * norm weight where it reads x. */
    __shared__ float nscale[NT];
    if (NORM) {
        __shared__ float part[NT][WARPS];
        float ss[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) ss[t] = 0.0f;
        if ((C & 3) == 0 && ((uintptr_t)a.x & 15) == 0) {
            for (int c = threadIdx.x * 4; c < C; c += WARPS * 32 * 4)
#pragma unroll
                for (int t = 0; t < NT; t++)
                    if (t < a.n) {
                        float4 f = __ldg((const float4 *)(a.x + (int64_t)t * C + c));
                        ss[t] = fmaf(f.x, f.x, fmaf(f.y, f.y, fmaf(f.z, f.z, fmaf(f.w, f.w, ss[t]))));
                    }
        } else {
            for (int c = threadIdx.x; c < C; c += WARPS * 32)
#pragma unroll
                for (int t = 0; t < NT; t++)
                    if (t < a.n) {
                        float f = __ldg(a.x + (int64_t)t * C + c);
                        ss[t] = fmaf(f, f, ss[t]);
                    }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            for (int o = 16; o > 0; o >>= 1) ss[t] += __shfl_xor_sync(0xffffffffu, ss[t], o);
            if (lane == 0) part[t][warp] = ss[t];
        }
        __syncthreads();
        if (threadIdx.x < NT) {
            float tot = 0.0f;
            for (int w = 0; w < WARPS; w++) tot += part[threadIdx.x][w];
            nscale[threadIdx.x] = (float)(1.0 / sqrt((double)tot / (double)C + (double)a.eps));
        }
        __syncthreads();
        if (a.xn_out && blockIdx.x == 0) {   /* the same products as where the rows are read below */
            /* in rounds of XU elements a thread, loads first: one element at a time, each store
             * kept the next element's loads behind it (block 0 took ~16 dependent L2 round trips
             * for a 2048-wide row, the whole of a MoE router's 0.5 MB GEMV twice over) */
            constexpr int XU = 8;
            const int tot = a.n * C;
            for (int i0 = threadIdx.x; i0 < tot; i0 += XU * WARPS * 32) {
                float xv[XU], wv[XU];
#pragma unroll
                for (int u = 0; u < XU; u++) {
                    const int i = i0 + u * WARPS * 32;
                    if (i >= tot) break;
                    const int t = i / C;
                    xv[u] = a.x[i];
                    wv[u] = a.norm_w[i - t * C];
                }
#pragma unroll
                for (int u = 0; u < XU; u++) {
                    const int i = i0 + u * WARPS * 32;
                    if (i >= tot) break;
                    a.xn_out[i] = xv[u] * nscale[i / C] * wv[u];
                }
            }
        }
    }
    if (!live) return;
    float acc[S][NT];
#pragma unroll
    for (int s = 0; s < S; s++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[s][t] = 0.0f;

    if (AL) {
        for (int c0 = kw * STEP + lane * V; c0 < C; c0 += KS * STEP) {
            uint4 nxt[U][S];
            if (c0 + KS * STEP < C) {
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int s = 0; s < S; s++)
                        if (c0 + KS * STEP + u * 32 * V < C)
                            nxt[u][s] = ld_stream(wp[s] + (int64_t)(c0 + KS * STEP + u * 32 * V) * L::BYTES);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * 32 * V;
                if (c >= C) break;
                float w[S][V];
#pragma unroll
                for (int s = 0; s < S; s++) {
                    L::cvt(cur[u][s], w[s]);
                    if (L::BYTES == 1 && srow[s]) {
                        float sc = scale_at(a, srow[s], c);
#pragma unroll
                        for (int v = 0; v < V; v++) w[s][v] *= sc;
                    }
                }
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t < a.n) {
                        const float *xp = a.x + (int64_t)t * C + c;
#pragma unroll
                        for (int v = 0; v < V; v += 4) {
                            float4 f = __ldg((const float4 *)(xp + v));
                            if (NORM) {
                                const float4 nw = __ldg((const float4 *)(a.norm_w + c + v));
                                const float sc = nscale[t];
                                f.x = f.x * sc * nw.x; f.y = f.y * sc * nw.y; f.z = f.z * sc * nw.z; f.w = f.w * sc * nw.w;
                            }
#pragma unroll
                            for (int s = 0; s < S; s++) {
                                acc[s][t] = fmaf(w[s][v], f.x, acc[s][t]);
                                acc[s][t] = fmaf(w[s][v + 1], f.y, acc[s][t]);
                                acc[s][t] = fmaf(w[s][v + 2], f.z, acc[s][t]);
                                acc[s][t] = fmaf(w[s][v + 3], f.w, acc[s][t]);
                            }
                        }
                    }
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int s = 0; s < S; s++) cur[u][s] = nxt[u][s];
        }
    } else {
        for (int c = kw * 32 + lane; c < C; c += 32 * KS) {
            float w[S];
#pragma unroll
            for (int s = 0; s < S; s++) {
                w[s] = L::one(wp[s], c);
                if (L::BYTES == 1 && srow[s]) w[s] *= scale_at(a, srow[s], c);
            }
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < a.n) {
                    float xv = __ldg(a.x + (int64_t)t * C + c);
                    if (NORM) xv = xv * nscale[t] * __ldg(a.norm_w + c);
#pragma unroll
                    for (int s = 0; s < S; s++) acc[s][t] = fmaf(w[s], xv, acc[s][t]);
                }
        }
    }
#pragma unroll
    for (int s = 0; s < S; s++)
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[s][t] += __shfl_xor_sync(0xffffffffu, acc[s][t], o);
    if (KS > 1) { /* the warps' shares of the row meet in shared memory; warp 0 adds them in order */
        __shared__ float part[WARPS][S][NT];
        if (lane == 0)
#pragma unroll
            for (int s = 0; s < S; s++)
#pragma unroll
                for (int t = 0; t < NT; t++) part[warp][s][t] = acc[s][t];
        __syncthreads();
        if (warp) return;
#pragma unroll
        for (int s = 0; s < S; s++)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float v = part[0][s][t];
#pragma unroll
                for (int w = 1; w < KS; w++) v += part[w][s][t];
                acc[s][t] = v;
            }
    }
    if (lane) return;
#pragma unroll
    for (int s = 0; s < RPW; s++) {
        int r = row0 + s;
        if (r >= R) break;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= a.n) break;
            float *y = a.y[mi] + (int64_t)t * R + r;
            if (MODE == CB_STORE) *y = acc[s][t];
            else if (MODE == CB_ACC) *y += acc[s][t];
            else {
                float g = acc[s][t], u = acc[s + RPW][t];
                *y = g / (1.0f + expf(-g)) * u;
            }
        }
    }
}

/* Rows per warp and unroll by token count: one token streams one row per warp with four
 * loads in flight; more tokens share each x load among more rows. */
template <class L, int MODE, bool AL, bool NORM>
static void launch_nt(cuda_be *cb, gemv_args &a, int total_rows) {
    dim3 block(WARPS * 32);
#define CB_GEMV_GO_KS(NT, RPW, U, KS)                                                                \
    do {                                                                                             \
        int blocks = 0;                                                                              \
        for (int i = 0; i < a.count; i++) {                                                          \
            a.blk_start[i] = blocks;                                                                 \
            blocks += (KS) > 1 ? a.rows[i] : (a.rows[i] + WARPS * (RPW) - 1) / (WARPS * (RPW));     \
        }                                                                                            \
        a.blk_start[a.count] = blocks;                                                               \
        cb_launch(cb, gemv_kernel<L, NT, MODE, AL, RPW, U, NORM, KS>, dim3(blocks), dim3(block), 0, a);               \
    } while (0)
#define CB_GEMV_GO(NT, RPW, U) CB_GEMV_GO_KS(NT, RPW, U, 1)
    if (a.n <= 1) {
        /* One token, by shape (each choice measured side by side on the H200, 2026-12-01,
         * tests/gpu/tune.sh, bench/RESULTS.md):
         *  - few (<= 2048), long (>= 2048 columns) rows: a row per block, split over its four
         *    warps (Qwen3-0.6B's o_proj / down_proj: 2 blocks per SM otherwise): 0.6B decode
         *    1014-1016 vs 985-999 tok/s;
         *  - many (>= 4096) rows of 4096 columns, and the tall vocabulary head: two rows per
         *    warp, so each x (and norm weight) load serves two weight rows: 8B-dims decode
         *    556-558 vs 518-521 tok/s; on shorter rows (the 0.6B's 1024 columns) it lost
         *    (956-960 vs 985-999): more warps in flight matter more there; the same for the
         *    fused gate+up on >= 4096 rows of >= 4096 columns (two gate and two up rows per
         *    warp): 568-571 vs 556-562; not for down_proj's 12288 columns (550 vs 558), and
         *    four rows per warp on the 4096-column head was within noise (560-564);
         *  - rows of 1025..2048 columns (hidden 2048: LFM2, Qwen3-30B-A3B, DeepSeek-V2-Lite), not
         *    the head: two rows per warp, two loads in flight (2026-12-03, 2 rounds alternating,
         *    decode after 512: LFM2-8B-A1B 8 layers 1784.8 / 1785.7 vs 1720.4 / 1710.8 tok/s,
         *    Qwen3-30B-A3B 4 layers 2164.8 / 2174.2 vs 2135.9 / 2132.2; CINFER_CUDA_GEMV1=7
         *    keeps the rules below for these);
         *  - 2048..4096 rows of <= 1024 columns (DeepSeek-V2-Lite's q_b, 3072 x 1024; Qwen3-0.6B's
         *    q/k/v, 4096 x 1024), not the SwiGLU pairs: two rows per warp, one load in flight
         *    (H100, 2026-12-07, decode after 512, two rounds alternating: DeepSeek-V2-Lite dims +
         *    q_lora 1024 14 layers 602.0 / 602.3 vs 595.9 / 597.8 tok/s, Qwen3-0.6B dims 991.3 /
         *    990.9 vs 979.2 / 982.3; a row over four warps lost, 940-949 on the 0.6B; two loads in
         *    flight 603.8 / 603.5 but 990.6 / 974.8; CINFER_CUDA_GEMV1=7 keeps the rules before);
         *  - else one row per warp with four 16-byte loads in flight per lane. */
        const bool tall = total_rows >= 32768;
        if (cb->gemv1 >= 1 && cb->gemv1 <= 6 && a.cols <= 2048 && !tall && L::BYTES != 1) {   /* CINFER_CUDA_GEMV1 */
            switch (cb->gemv1) {
            case 1: CB_GEMV_GO(1, 1, 4); break;
            case 2: CB_GEMV_GO(1, 2, 2); break;
            case 3: CB_GEMV_GO_KS(1, 1, 2, WARPS); break;
            case 4: CB_GEMV_GO(1, 2, 1); break;
            case 5: CB_GEMV_GO(1, 4, 1); break;
            default: CB_GEMV_GO(1, 1, 2); break;
            }
        } else if (L::BYTES == 1 && cb->fp8_rows2) CB_GEMV_GO(1, 2, 2);   /* tuning switch, tests/gpu/tune.sh */
        else if (cb->gemv1 != 7 && a.cols > 1024 && a.cols <= 2048 && !tall) CB_GEMV_GO(1, 2, 2);
        else if (total_rows <= 2048 && a.cols >= 2048) CB_GEMV_GO_KS(1, 1, 2, WARPS);
        else if (MODE != CB_SWIGLU && cb->gemv1 != 7 && a.cols <= 1024 && total_rows >= 2048 && total_rows <= 4096)
            CB_GEMV_GO(1, 2, 1);
        else if (MODE == CB_SWIGLU) {
            if ((tall && a.cols <= 1024) || (total_rows >= 4096 && a.cols >= 4096)) CB_GEMV_GO(1, 2, 1);
            else CB_GEMV_GO(1, 1, 2);
        } else if (tall && a.cols <= 1024) CB_GEMV_GO(1, 4, 1);
        else if ((tall || (total_rows >= 4096 && a.cols >= 4096)) && a.cols <= 4096) CB_GEMV_GO(1, 2, 2);
        else CB_GEMV_GO(1, 1, 4);
    } else if (a.n <= 2) CB_GEMV_GO(2, 2, 2);
    else if (a.n <= 4) CB_GEMV_GO(4, 2, 1);
    else CB_GEMV_GO(8, 2, 1);
#undef CB_GEMV_GO
#undef CB_GEMV_GO_KS
}

template <class L, int MODE>
static void launch_al(cuda_be *cb, gemv_args &a, int blocks, bool al) {
    const bool norm = a.norm_w != NULL;
    if (MODE == CB_ACC) { /* no fused norm: the residual accumulation reads another input */
        if (al) launch_nt<L, MODE, true, false>(cb, a, blocks);
        else launch_nt<L, MODE, false, false>(cb, a, blocks);
    } else if (norm) {
        if (al) launch_nt<L, MODE, true, true>(cb, a, blocks);
        else launch_nt<L, MODE, false, true>(cb, a, blocks);
    } else {
        if (al) launch_nt<L, MODE, true, false>(cb, a, blocks);
        else launch_nt<L, MODE, false, false>(cb, a, blocks);
    }
}

template <class L>
static void launch_mode(cuda_be *cb, int mode, gemv_args &a, int blocks, bool al) {
    if (mode == CB_STORE) launch_al<L, CB_STORE>(cb, a, blocks, al);
    else if (mode == CB_ACC) launch_al<L, CB_ACC>(cb, a, blocks, al);
    else launch_al<L, CB_SWIGLU>(cb, a, blocks, al);
}

int cb_gemv_ok(const ci_mat *W) {
    switch (W->dtype) {
    case CI_F32: case CI_F16: case CI_BF16: return 1;
    case CI_F8_E4M3:
        return !W->scale || (W->block > 0 && (W->scale_dtype == CI_F32 || W->scale_dtype == CI_BF16 ||
                                              W->scale_dtype == CI_F8_E8M0));
    default: return 0;
    }
}

void cb_gemv(cuda_be *cb, int mode, int count, float *const *ys, const float *x, int n, const ci_mat *const *Ws,
             const float *norm_w, float eps, float *xn_out) {
    if (n <= 0 || count <= 0) return;
    /* fp8 with 128 x 128 block scales: the tensor-core kernels (quant_mma.cu) when they take it */
    if (Ws[0]->dtype == CI_F8_E4M3 && !xn_out &&
        cb_qt_fp8(cb, mode, mode == CB_SWIGLU ? 2 : mode == CB_STORE ? count : 1, ys, x, n, Ws,
                  mode == CB_ACC ? NULL : norm_w, eps))
        return;
    gemv_args a;
    memset(&a, 0, sizeof a);
    a.norm_w = mode == CB_ACC ? NULL : norm_w;
    a.xn_out = a.norm_w ? xn_out : NULL;
    a.eps = eps;
    const ci_mat *W0 = Ws[0];
    a.count = mode == CB_STORE ? count : 1;
    a.cols = (int)W0->cols;
    a.n = n;
    a.x = x;
    int vec = W0->dtype == CI_F32 ? 4 : W0->dtype == CI_F8_E4M3 ? 16 : 8;
    bool al = a.cols % vec == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)a.norm_w & 15) == 0;
    int blocks = 0;
    int nm = mode == CB_SWIGLU ? 2 : a.count;
    for (int i = 0; i < nm; i++) {
        const ci_mat *W = Ws[i];
        a.w[i] = W->data;
        a.scale[i] = W->scale;
        a.scale_row0[i] = W->scale_row0;
        al = al && ((uintptr_t)W->data & 15) == 0;
    }
    for (int i = 0; i < a.count; i++) {
        a.rows[i] = (int)Ws[i]->rows;
        a.y[i] = ys[mode == CB_STORE ? i : 0];
        blocks += a.rows[i];
    }
    a.scale_dtype = -1;
    if (W0->dtype == CI_F8_E4M3 && W0->scale && W0->block > 0) {
        a.block = W0->block;
        a.scale_cols = (int)((W0->cols + W0->block - 1) / W0->block);
        a.scale_dtype = W0->scale_dtype == CI_F32 ? 0 : W0->scale_dtype == CI_BF16 ? 1 : 2;
        a.block_shift = -1;
        for (int sh = 0; sh < 30; sh++)
            if (a.block == 1 << sh) a.block_shift = sh;
        al = al && a.block % 16 == 0;
    }
    switch (W0->dtype) {
    case CI_F32: launch_mode<LF32>(cb, mode, a, blocks, al); break;
    case CI_F16: launch_mode<LF16>(cb, mode, a, blocks, al); break;
    case CI_BF16: launch_mode<LBF16>(cb, mode, a, blocks, al); break;
    case CI_F8_E4M3: launch_mode<LFP8>(cb, mode, a, blocks, al); break;
    default: return;
    }
    cb_launched(cb, "gemv");
}

/* ---- prefill: cuBLAS -------------------------------------------------------------------
 * Row-major Y[n, R] = X[n, C] · Wᵀ is, in cuBLAS's column-major terms, Yᶜ[R, n] = Wᶜᵀ · Xᶜ with
 * Wᶜ = the [C, R] column-major view of W (lda = C) and Xᶜ the [C, n] view of X (ldb = C). */
/* dst[r, c] = f16(fp8(w[r, c]) · scale), saturating, for a [rows, cols] fp8 matrix (block
 * scales as gemv_args; f16 rather than bf16: cuda_internal.h, f16_sat) */
__global__ void fp8_widen_kernel(__half *dst, const uint8_t *w, int64_t rows, int64_t cols, const void *scale,
                                 int sd, int block, int64_t srow0) {
    pdl_enter();
    const int64_t total = rows * cols, scols = block > 0 ? (cols + block - 1) / block : 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, c = i - r * cols;
        float v = LFP8::one(w, i);
        if (scale) v *= scale_elem(scale, sd, ((srow0 + r) / block) * scols + c / block);
        dst[i] = __float2half_rn(f16_sat(v));
    }
}

/* fp8_widen_kernel 16 elements a thread (fp8_widen16), for cols % 16 == 0, a block a multiple
 * of 16 (or no scale), 16-byte aligned rows and every index below 2^31 (cb_gemm checks): 32-bit
 * index arithmetic, one scale per 16 elements. The element-wise kernel's three 64-bit
 * divisions per element were most of a DeepSeek fp8 prefill. */
__global__ void fp8_widen16_kernel(__half *dst, const uint8_t *w, int rows, int cols, const void *scale, int sd, int block,
                                   int srow0) {
    pdl_enter();
    const unsigned vpr = (unsigned)cols >> 4, total = (unsigned)rows * vpr;
    const unsigned scols = block > 0 ? ((unsigned)cols + block - 1) / block : 0;
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < total; k += gridDim.x * blockDim.x) {
        const unsigned r = k / vpr, c = (k - r * vpr) << 4;
        const float sc = scale ? scale_elem(scale, sd, (int64_t)(((unsigned)srow0 + r) / block) * scols + c / block) : 1.0f;
        const size_t o = (size_t)r * cols + c;
        fp8_widen16(w + o, sc, dst + o);
    }
}

/* y (beta: + y) = x · Wᵀ by cuBLAS, A / B of type t (f32 out, f32 sums) */
static void gemm_blas(cuda_be *cb, cublasHandle_t h, float *y, const void *A, const void *B, cudaDataType_t t, int n,
                      const ci_mat *W, float beta) {
    const float alpha = 1.0f;
    cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)W->rows, n, (int)W->cols, &alpha, A,
                                    t, (int)W->cols, B, t, (int)W->cols, &beta, y, CUDA_R_32F, (int)W->rows,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS && !cb->failed) {
        cb->failed = 1;
        snprintf(cb->base.last_error, sizeof cb->base.last_error, "CUDA: cuBLAS GEMM [%d x %lld x %lld] failed (status %d)",
                 n, (long long)W->rows, (long long)W->cols, (int)s);
    }
}

int cb_gemm16_ok(const ci_mat *W) { return W->dtype == CI_BF16 || W->dtype == CI_F16; }

void *cb_gemm16_input(cuda_be *cb, int n, const ci_mat *W) {
    return cb_scratch_get(cb, &cb->xconv, (size_t)n * (size_t)W->cols * 2);
}

void cb_gemm16_on(cuda_be *cb, cublasHandle_t h, float *y, const void *xh, int n, const ci_mat *W, float beta) {
    gemm_blas(cb, h, y, W->data, xh, W->dtype == CI_BF16 ? CUDA_R_16BF : CUDA_R_16F, n, W, beta);
}

void cb_gemm16(cuda_be *cb, float *y, const void *xh, int n, const ci_mat *W, float beta) {
    cb_gemm16_on(cb, cb->blas, y, xh, n, W, beta);
}

struct stack_parts {         /* unstack_kernel's outputs: part i is columns [c[i], c[i + 1]) of a row */
    float *y[CB_STACK_MAX];
    int c[CB_STACK_MAX + 1];
    int count;
};

/* ys[i][t, :] = ya[t, c[i] .. c[i + 1]) for every row t of ya [n, c[count]], by float4s (every
 * part's width a multiple of 4) */
__global__ void unstack_kernel(const float *ya, int n, stack_parts p) {
    pdl_enter();
    const int w4 = p.c[p.count] / 4;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < (int64_t)n * w4; k += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(k / w4), j = (int)(k - (int64_t)t * w4) * 4;
        int i = 0;
        while (j >= p.c[i + 1]) i++;
        const int w = p.c[i + 1] - p.c[i];
        *(float4 *)(p.y[i] + (int64_t)t * w + (j - p.c[i])) = *(const float4 *)(ya + (int64_t)t * p.c[p.count] + j);
    }
}

int cb_gemm16_stacked(const ci_mat *const *Ws, int count) {
    if (count < 2 || count > CB_STACK_MAX || !cb_gemm16_ok(Ws[0])) return 0;
    const size_t es = 2;
    for (int i = 1; i < count; i++)
        if (Ws[i]->dtype != Ws[0]->dtype || Ws[i]->cols != Ws[0]->cols ||
            (const char *)Ws[i]->data != (const char *)Ws[i - 1]->data + (size_t)Ws[i - 1]->rows * Ws[i - 1]->cols * es)
            return 0;
    int64_t rows = 0;
    for (int i = 0; i < count; i++) {
        if (Ws[i]->rows % 4) return 0;
        rows += Ws[i]->rows;
    }
    return rows < (1 << 30);
}

void cb_gemm16_stack(cuda_be *cb, int count, float *const *ys, const void *xh, int n, const ci_mat *const *Ws) {
    stack_parts p;
    p.count = count;
    p.c[0] = 0;
    for (int i = 0; i < count; i++) {
        p.y[i] = ys[i];
        p.c[i + 1] = p.c[i] + (int)Ws[i]->rows;
    }
    float *ya = (float *)cb_scratch_get(cb, &cb->stack_y, (size_t)n * (size_t)p.c[count] * sizeof(float));
    if (!ya) return;
    ci_mat all = *Ws[0];
    all.rows = p.c[count];
    cb_gemm16(cb, ya, xh, n, &all, 0.0f);
    const int64_t v = (int64_t)n * p.c[count] / 4;
    int64_t blocks = (v + 255) / 256;
    if (blocks > (int64_t)cb->sm_count * 8) blocks = (int64_t)cb->sm_count * 8;
    cb_launch(cb, unstack_kernel, dim3((unsigned)blocks), dim3(256), 0, (const float *)ya, n, p);
    cb_launched(cb, "unstack");
}

int cb_gemm(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W, float beta) {
    cudaDataType_t t;
    const void *B = x;
    const void *A = W->data;
    if (W->dtype == CI_F8_E4M3) {
        size_t cnt = (size_t)W->rows * (size_t)W->cols;
        __half *wd = (__half *)cb_scratch_get(cb, &cb->wdeq, cnt * 2);
        void *conv = cb_scratch_get(cb, &cb->xconv, (size_t)n * (size_t)W->cols * 2);
        if (!wd || !conv) return 0;
        int sd = W->scale_dtype == CI_F32 ? 0 : W->scale_dtype == CI_BF16 ? 1 : 2;
        int64_t blocks = (int64_t)((cnt + 255) / 256);
        if (blocks > (int64_t)cb->sm_count * 64) blocks = (int64_t)cb->sm_count * 64;
        const bool scaled = W->scale && W->block > 0;
        if (W->cols % 16 == 0 && (!scaled || W->block % 16 == 0) && ((uintptr_t)W->data & 15) == 0 &&
            (int64_t)W->rows * W->cols / 16 < ((int64_t)1 << 31) && W->scale_row0 + W->rows < ((int64_t)1 << 31))
            cb_launch(cb, fp8_widen16_kernel, dim3((unsigned)blocks), dim3(256), 0, wd, (const uint8_t *)W->data, (int)W->rows,
                      (int)W->cols, scaled ? W->scale : NULL, sd, W->block, (int)W->scale_row0);
        else
            cb_launch(cb, fp8_widen_kernel, dim3((unsigned)blocks), dim3(256), 0, wd, (const uint8_t *)W->data, (int64_t)W->rows,
                      (int64_t)W->cols, scaled ? W->scale : NULL, sd, W->block, W->scale_row0);
        cb_launched(cb, "fp8 widen");
        cb_convert(cb, conv, x, (int64_t)n * W->cols, 0);
        A = wd;
        B = conv;
        t = CUDA_R_16F;
    } else if (W->dtype == CI_F32) t = CUDA_R_32F;
    else if (cb_gemm16_ok(W)) {   /* x in W's 16-bit type, then the product */
        void *conv = cb_gemm16_input(cb, n, W);
        if (!conv) return 0;
        cb_convert(cb, conv, x, (int64_t)n * W->cols, W->dtype == CI_BF16);
        cb_gemm16(cb, y, conv, n, W, beta);
        return 0;
    } else return -1;
    gemm_blas(cb, cb->blas, y, A, B, t, n, W, beta);
    return 0;
}

/* ---- matmul_xw: y[n, W.cols] = x[n, W.rows] · W (MLA's absorbed queries; small, per head) ----
 * One thread per output column, looping over W's rows: neighbouring threads read
 * neighbouring columns of a row. */
__device__ __forceinline__ float xw_elem(const void *data, int dtype, int64_t i) {
    if (dtype == CI_F32) return __ldg((const float *)data + i);
    if (dtype == CI_BF16) return __uint_as_float((unsigned)__ldg((const unsigned short *)data + i) << 16);
    if (dtype == CI_F16) return __half2float(__ldg((const __half *)data + i));
    __half_raw h = __nv_cvt_fp8_to_halfraw(__ldg((const __nv_fp8_storage_t *)((const uint8_t *)data + i)), __NV_E4M3);
    return __half2float(*(__half *)&h);
}

__global__ void matmul_xw_kernel(float *y, const float *x, const void *data, int dtype, int64_t rows, int64_t cols,
                                 const void *scale, int scale_dtype, int block, int64_t scale_row0) {
    pdl_enter();
    const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int t = blockIdx.y;
    if (c >= cols) return;
    const float *xr = x + (int64_t)t * rows;
    const int64_t scols = block > 0 ? (cols + block - 1) / block : 0;
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        float w = xw_elem(data, dtype, r * cols + c);
        if (dtype == CI_F8_E4M3 && scale && block > 0) {
            int64_t si = ((scale_row0 + r) / block) * scols + c / block;
            float s;
            if (scale_dtype == CI_F32) s = __ldg((const float *)scale + si);
            else if (scale_dtype == CI_BF16) s = __uint_as_float((unsigned)__ldg((const unsigned short *)scale + si) << 16);
            else {
                unsigned e = __ldg((const unsigned char *)scale + si);
                s = e == 255 ? __int_as_float(0x7fc00000) : e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
            }
            w *= s;
        }
        acc = fmaf(__ldg(xr + r), w, acc);
    }
    y[(int64_t)t * cols + c] = acc;
}

void cb_matmul_xw_launch(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W) {
    if (n <= 0 || W->cols <= 0) return;
    dim3 grid((unsigned)((W->cols + 127) / 128), (unsigned)n);
    cb_launch(cb, matmul_xw_kernel, dim3(grid), dim3(128), 0, y, x, W->data, (int)W->dtype, W->rows, W->cols, W->scale,
                                                   (int)W->scale_dtype, W->block, W->scale_row0);
    cb_launched(cb, "matmul_xw");
}
