/* simd_template.h — the SIMD kernel set, written once over a small vector vocabulary.
 *
 * Included by kernels_avx2.c and kernels_avx512.c (never on its own), after they define:
 *   VL                 floats per vector;   vf: the vector type;   TGT: the target attribute
 *   TMAX               token rows a tile keeps in registers (acc = TMAX x 4 vectors)
 *   KTABLE, KNAME      the name of the cpu_kernels table to define and its backend name
 *   vzero vset1 vld vst vadd vsub vmul vdiv vmax vfma(a,b,c)=a*b+c vhsum vhmax vexp
 *   vhsum4(a,b,c,d,out4)  the four horizontal sums, stored to out4[0..3]
 *   vld_bf16 vld_f16      VL weights converted exactly to f32
 *   vst_f16               VL floats stored as f16: clamped to [-65504, 65504] (NaN kept),
 *                         rounded to nearest even (the f16 attention cache, cpu_kv_f16)
 *   vld_fp8               VL E4M3 bytes as f32 *times 2^-8* (exact: the bits placed into an
 *                         f16, then widened; no table, no gather);
 *                         callers multiply by (block scale * 2^8), which is one rounding
 *                         of fp8 * scale, the same value ci_mat_get gives. (E4M3 NaN codes
 *                         0x7f/0xff decode as +-480 * scale here; checkpoints never hold them.)
 * Every function here carries TGT, so the ISA file compiles with default project flags.
 *
 * Loop tails (fewer than VL elements left) go through a zero-filled stack buffer: one
 * memcpy per row instead of masked memory access, so sanitizers see exact-size reads. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define AI static inline __attribute__((always_inline)) TGT
#define PRAGMA_(x) _Pragma(#x)
#define UNROLL(n) PRAGMA_(GCC unroll n)

#ifndef PF_DIST       /* overridable (-DPF_DIST=, or a set's runtime cpu_pf_dist) */
#define PF_DIST 1024  /* bytes ahead of the current column that decode prefetches */
#endif
#ifndef PF_NEXT_TILE_MAX  /* rows of up to this many bytes prefetch the next tile instead (0: none) */
#define PF_NEXT_TILE_MAX 0
#endif
#ifndef PF_NT_HINT        /* the next-tile prefetch's locality hint (2: into L2, 3: into L1) */
#define PF_NT_HINT 2
#endif

static inline size_t dt_size(int dt) { return dt == CI_F32 ? 4 : dt == CI_F8_E4M3 ? 1 : 2; }

/* VL weights of one row starting at column k, as f32 (fp8: times 2^-8). */
AI vf wload(const int dt, const void *row, int64_t k) {
    if (dt == CI_F32) return vld((const float *)row + k);
    if (dt == CI_BF16) return vld_bf16((const uint16_t *)row + k);
    if (dt == CI_F16) return vld_f16((const uint16_t *)row + k);
    return vld_fp8((const uint8_t *)row + k);
}

/* The first n (< VL) of them, the rest zero (0 bits are 0.0 in every format). */
AI vf wload_part(const int dt, const void *row, int64_t k, int n) {
    _Alignas(64) unsigned char b[VL * 4];
    size_t es = dt_size(dt);
    memset(b, 0, sizeof b);
    memcpy(b, (const char *)row + (size_t)k * es, (size_t)n * es);
    return wload(dt, b, 0);
}

AI vf xload_part(const float *p, int n) {
    _Alignas(64) float b[VL];
    memset(b, 0, sizeof b);
    memcpy(b, p, (size_t)n * sizeof(float));
    return vld(b);
}

AI void xstore_part(float *p, vf v, int n) {
    _Alignas(64) float b[VL];
    vst(b, v);
    memcpy(p, b, (size_t)n * sizeof(float));
}

/* One VL step of a tile: acc[t][r] += x_t[k, k + VL) · w_r, token by token. */
AI void tile_step(const int T, vf w0, vf w1, vf w2, vf w3, const float *x, int64_t xs, int64_t k, vf acc[TMAX][4]) {
    UNROLL(4)
    for (int t = 0; t < T; t++) {
        vf xv = vld(x + t * xs + k);
        acc[t][0] = vfma(w0, xv, acc[t][0]);
        acc[t][1] = vfma(w1, xv, acc[t][1]);
        acc[t][2] = vfma(w2, xv, acc[t][2]);
        acc[t][3] = vfma(w3, xv, acc[t][3]);
    }
}

/* The next-tile rule's prefetch for the step at column k of a tile of rows of rowb bytes from w0:
 * every line of the next tile (rows 4..7 below w0, contiguous in a decode item) whose start falls
 * in this step's share of it (4 · VL weights). */
AI void pf_next_tile(const int dt, const void *w0, int64_t k, size_t rowb) {
    const size_t nb = 4 * (size_t)k * dt_size(dt), step = 4 * VL * dt_size(dt);
    for (size_t o = (nb + 63) & ~(size_t)63; o < nb + step; o += 64)
        __builtin_prefetch((const char *)w0 + 4 * rowb + o, 0, PF_NT_HINT);
}

/* acc[t][r] += x_t · w_r over columns [c0, c1). fp8 weights are multiplied by mult[r]
 * (block scale * 2^8) right after conversion, so one tile covers one column block. */
AI void tile_span(const int T, const int dt, const void *const wr[4], int64_t c0, int64_t c1, const float *x,
                  int64_t xs, const vf *mult, vf acc[TMAX][4], size_t rowb) {
    int64_t k = c0;
    for (; k + VL <= c1; k += VL) {
        /* Decode streams 4 rows of weights from DRAM; one core keeps too few misses in
         * flight on its own (measured: 12 -> 14 GB/s single-thread with this). One
         * prefetch per 64-byte line and row; f32 tiles read packed, cache-hot data.
         * Near a row's end (rowb bytes) the target moves to the same place in the row 4
         * below, which the next tile of a decode item reads first: without that, rows
         * 1-3 of every tile start cold (their first PF_DIST bytes were "prefetched" by
         * the row above only after they were read), 3 KiB of every 8 KiB tile of 2 KiB rows
         * (measured on an AVX2 EPYC: 9 -> 11-12 GB/s for 1024-column bf16 rows). A
         * prefetch past the matrix does not fault. */
        if (dt == CI_F32) {
        } else if (PF_NEXT_TILE_MAX && rowb <= PF_NEXT_TILE_MAX) {
            /* a set that asks for it (kernels_avx2.c, kernels_avx512.c say why): short rows
             * prefetch the next tile (rows 4..7 below wr[0], contiguous in a decode item) in
             * byte order, every line whose start falls in this step's share of it (4 · VL
             * weights: one line a step for AVX2's bf16, two for AVX-512's, where the first
             * form's one a step left every other line to the hardware) */
            pf_next_tile(dt, wr[0], k, rowb);
        } else if ((((size_t)k * dt_size(dt)) & 63) < VL * dt_size(dt)) {
            size_t off = (size_t)k * dt_size(dt) + PF_DIST;
            if (off >= rowb) off += 3 * rowb;
            for (int r = 0; r < 4; r++) __builtin_prefetch((const char *)wr[r] + off, 0, 3);
        }
        vf w0 = wload(dt, wr[0], k), w1 = wload(dt, wr[1], k);
        vf w2 = wload(dt, wr[2], k), w3 = wload(dt, wr[3], k);
        if (dt == CI_F8_E4M3) {
            w0 = vmul(w0, mult[0]); w1 = vmul(w1, mult[1]);
            w2 = vmul(w2, mult[2]); w3 = vmul(w3, mult[3]);
        }
        tile_step(T, w0, w1, w2, w3, x, xs, k, acc);
    }
    if (k < c1) {
        int n = (int)(c1 - k);
        vf w0 = wload_part(dt, wr[0], k, n), w1 = wload_part(dt, wr[1], k, n);
        vf w2 = wload_part(dt, wr[2], k, n), w3 = wload_part(dt, wr[3], k, n);
        if (dt == CI_F8_E4M3) {
            w0 = vmul(w0, mult[0]); w1 = vmul(w1, mult[1]);
            w2 = vmul(w2, mult[2]); w3 = vmul(w3, mult[3]);
        }
        UNROLL(4)
        for (int t = 0; t < T; t++) {
            vf xv = xload_part(x + t * xs + k, n);
            acc[t][0] = vfma(w0, xv, acc[t][0]);
            acc[t][1] = vfma(w1, xv, acc[t][1]);
            acc[t][2] = vfma(w2, xv, acc[t][2]);
            acc[t][3] = vfma(w3, xv, acc[t][3]);
        }
    }
}

/* tile_span for a tile whose weights are already in L1 (cpu_tile_hot: the token tiles after a
 * 4-row tile's first, in a few-row prefill): the same FMAs in the same order, without the
 * per-row prefetch; the next-tile rule of short rows stays (without it a Qwen3-0.6B-dims
 * prefill of 16 tokens was ~10% slower on the Zen 5: its first pass alone did not bring the
 * next tile). 16-bit and f32 weights. LFM2-8B-A1B dims (8 layers, experts of ~16 token rows)
 * prefill 128 on one Zen 5 thread 114-126 -> 131-135 tok/s (bench/RESULTS.md). */
AI void hot_span(const int T, const int dt, const void *const wr[4], int64_t c0, int64_t c1, const float *x,
                 int64_t xs, vf acc[TMAX][4], size_t rowb) {
    int64_t k = c0;
    for (; k + VL <= c1; k += VL) {
        if (PF_NEXT_TILE_MAX && dt != CI_F32 && rowb <= PF_NEXT_TILE_MAX) pf_next_tile(dt, wr[0], k, rowb);
        vf w0 = wload(dt, wr[0], k), w1 = wload(dt, wr[1], k);
        vf w2 = wload(dt, wr[2], k), w3 = wload(dt, wr[3], k);
        tile_step(T, w0, w1, w2, w3, x, xs, k, acc);
    }
    if (k < c1) tile_span(T, dt, wr, k, c1, x, xs, NULL, acc, 0);
}

/* Block scale lookup without the generic function call: the fp8 tile asks for four of
 * these per 128 columns, which would otherwise cost as much as the arithmetic. */
AI float scale_at(const ci_mat *W, int64_t i) {
    switch (W->scale_dtype) {
    case CI_F32: return ((const float *)W->scale)[i];
    case CI_BF16: return ci_bf16_to_f32(((const uint16_t *)W->scale)[i]);
    case CI_F8_E8M0: return cpu_e8m0_value(((const uint8_t *)W->scale)[i]);
    default: return NAN;
    }
}

/* One tile of T (compile-time) token rows against 4 weight rows over all columns, in the
 * summation order of cpu_kernels.h: per CPU_KC chunk, lane accumulators from zero, one
 * reduction at the chunk's end, chunk sums added left to right. fp8 chunks are cut at
 * block edges (a multiple of VL from the chunk start, so lanes line up with f32_tile's on
 * the converted chunk). Returns 0 for what it cannot do exactly: a block size that is
 * not a multiple of VL, a block scale too large to fold into the 2^8 multiplier. */
AI int mat_tile_T(const int T, const int dt, const ci_mat *W, const int64_t rows[4], const float *x, int64_t xs,
                  float *out) {
    vf acc[TMAX][4];
    float part[TMAX * 4];
    const void *wr[4];
    const int64_t cols = W->cols;
    const int blocked = dt == CI_F8_E4M3 && W->scale && W->block > 0;
    const int64_t bs = blocked ? W->block : cols, ncb = (cols + bs - 1) / bs;
    const size_t rowb = (size_t)cols * dt_size(dt);
    int64_t srow[4];
    if (blocked && bs % VL) return 0;
    for (int r = 0; r < 4; r++) {
        wr[r] = (const char *)W->data + (size_t)(rows[r] * cols) * dt_size(dt);
        srow[r] = blocked ? (W->scale_row0 + rows[r]) / bs * ncb : 0;
    }
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_KC) {
        const int64_t c1 = c0 + CPU_KC < cols ? c0 + CPU_KC : cols;
        UNROLL(4)
        for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vzero();
        if (dt != CI_F8_E4M3 && cpu_tile_hot) {
            hot_span(T, dt, wr, c0, c1, x, xs, acc, rowb);
        } else if (dt != CI_F8_E4M3) {
            tile_span(T, dt, wr, c0, c1, x, xs, NULL, acc, rowb);
        } else if (!blocked) {
            vf one = vset1(0x1p8f), mult[4] = { one, one, one, one };
            tile_span(T, dt, wr, c0, c1, x, xs, mult, acc, rowb);
        } else {
            for (int64_t s0 = c0; s0 < c1;) {
                const int64_t cb = s0 / bs, s1 = (cb + 1) * bs < c1 ? (cb + 1) * bs : c1;
                vf mult[4];
                int finite = 1;
                for (int r = 0; r < 4; r++) {
                    float m = scale_at(W, srow[r] + cb) * 0x1p8f;
                    finite &= fabsf(m) <= FLT_MAX; /* false for inf and NaN scales */
                    mult[r] = vset1(m);
                }
                if (!finite) return 0;   /* never for real checkpoints */
                tile_span(T, dt, wr, s0, s1, x, xs, mult, acc, rowb);
                s0 = s1;
            }
        }
        UNROLL(4)
        for (int t = 0; t < T; t++) vhsum4(acc[t][0], acc[t][1], acc[t][2], acc[t][3], part + t * 4);
        for (int i = 0; i < T * 4; i++) out[i] = c0 == 0 ? part[i] : out[i] + part[i];
    }
    return 1;
}

/* Decode of one token over rows [r0, r1) of 16-bit weights, each row read from its first column
 * to its last before the next row (one sequential stream, no software prefetch), the tile's
 * bits: per CPU_KC chunk a row's lanes from zero (tile_span's FMAs for T = 1), kept until the
 * 4 rows of a tile are done, then reduced four rows at a time by vhsum4 and the chunk sums added
 * left to right, exactly as mat_tile_T. Returns 0 for rows longer than SEQ_CHUNKS chunks. cpu.c
 * sends rows of up to cpu_seq16 bytes here (cpu.c's tuner says why). */
#define SEQ_CHUNKS 16
AI void seq_row(const int dt, const void *w, int64_t cols, const float *x, vf *acc) {
    for (int64_t c0 = 0, c = 0; c0 < cols; c0 += CPU_KC, c++) {
        const int64_t c1 = c0 + CPU_KC < cols ? c0 + CPU_KC : cols;
        vf a = vzero();
        int64_t k = c0;
        for (; k + VL <= c1; k += VL) a = vfma(wload(dt, w, k), vld(x + k), a);
        if (k < c1) a = vfma(wload_part(dt, w, k, (int)(c1 - k)), xload_part(x + k, (int)(c1 - k)), a);
        acc[c] = a;
    }
}
/* The end of a 4-row tile read row after row: per chunk the rows' sums by vhsum4, added left to
 * right, the first nr rows' dots into y[0, nr) (the tile's order; kernels_avx512.c's bf16_seq too). */
AI void seq_finish(vf acc[4][SEQ_CHUNKS], int64_t nch, int nr, float *y) {
    float out[4], part[4];
    for (int64_t c = 0; c < nch; c++) {
        vhsum4(acc[0][c], acc[1][c], acc[2][c], acc[3][c], part);
        for (int i = 0; i < 4; i++) out[i] = c == 0 ? part[i] : out[i] + part[i];
    }
    for (int i = 0; i < nr; i++) y[i] = out[i];
}
static TGT int seq_rows(const ci_mat *W, int64_t r0, int64_t r1, const float *x, float *y) {
    const int64_t cols = W->cols, nch = (cols + CPU_KC - 1) / CPU_KC;
    const int dt = W->dtype;
    if ((dt != CI_BF16 && dt != CI_F16) || nch > SEQ_CHUNKS) return 0;
    const size_t rowb = (size_t)cols * 2;
    vf acc[4][SEQ_CHUNKS];
    for (int64_t r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
        for (int i = 0; i < 4; i++) {
            const void *w = (const char *)W->data + (size_t)(r + i) * rowb;
            if (i >= nr) { for (int64_t c = 0; c < nch; c++) acc[i][c] = vzero(); continue; }
            if (dt == CI_BF16) seq_row(CI_BF16, w, cols, x, acc[i]);
            else seq_row(CI_F16, w, cols, x, acc[i]);
        }
        seq_finish(acc, nch, nr, y + r);
    }
    return 1;
}

#if TMAX >= 4
#define TILE_CASES(dt, T, ...) switch (T) { \
    case 1: ok &= mat_tile_T(1, dt, __VA_ARGS__); break; case 2: ok &= mat_tile_T(2, dt, __VA_ARGS__); break; \
    case 3: ok &= mat_tile_T(3, dt, __VA_ARGS__); break; default: ok &= mat_tile_T(4, dt, __VA_ARGS__); break; }
#else
#define TILE_CASES(dt, T, ...) switch (T) { \
    case 1: ok &= mat_tile_T(1, dt, __VA_ARGS__); break; default: ok &= mat_tile_T(2, dt, __VA_ARGS__); break; }
#endif

static TGT int mat_tile(const ci_mat *W, const int64_t rows[4], int T, const float *x, int64_t xs, float *out) {
    int ok = 1;
    for (int t0 = 0; t0 < T && ok; t0 += TMAX) {
        int tt = T - t0 < TMAX ? T - t0 : TMAX;
        const float *xt = x + t0 * xs;
        float *o = out + t0 * 4;
        switch (W->dtype) {
        case CI_F32: TILE_CASES(CI_F32, tt, W, rows, xt, xs, o); break;
        case CI_BF16: TILE_CASES(CI_BF16, tt, W, rows, xt, xs, o); break;
        case CI_F16: TILE_CASES(CI_F16, tt, W, rows, xt, xs, o); break;
        case CI_F8_E4M3: TILE_CASES(CI_F8_E4M3, tt, W, rows, xt, xs, o); break;
        default: for (int i = 0; i < tt * 4; i++) o[i] = NAN;
        }
    }
    return ok;
}

/* One tile over all kc columns of 4 rows of dtype dt (f32: f32_tile; f16: h16_tile, the f16
 * attention cache): hot_span's loop without its prefetch (rowb past any rule), which for f32 rows
 * is tile_span's, so each output is the same chain of FMAs on the (exactly widened) values. */
AI void kc_tile_T(const int T, const int dt, const void *const w[4], int64_t kc, const float *x, int64_t xs,
                  float *out) {
    vf acc[TMAX][4];
    UNROLL(4)
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vzero();
    hot_span(T, dt, w, 0, kc, x, xs, acc, SIZE_MAX);
    UNROLL(4)
    for (int t = 0; t < T; t++) vhsum4(acc[t][0], acc[t][1], acc[t][2], acc[t][3], out + t * 4);
}

AI void kc_tile(const int dt, const void *const w[4], int64_t kc, int T, const float *x, int64_t xs, float *out) {
    for (int t0 = 0; t0 < T; t0 += TMAX) {
        int tt = T - t0 < TMAX ? T - t0 : TMAX;
        const float *xt = x + t0 * xs;
        float *o = out + t0 * 4;
        switch (tt) {
        case 1: kc_tile_T(1, dt, w, kc, xt, xs, o); break;
#if TMAX >= 4
        case 2: kc_tile_T(2, dt, w, kc, xt, xs, o); break;
        case 3: kc_tile_T(3, dt, w, kc, xt, xs, o); break;
        default: kc_tile_T(4, dt, w, kc, xt, xs, o); break;
#else
        default: kc_tile_T(2, dt, w, kc, xt, xs, o); break;
#endif
        }
    }
}

static TGT void f32_tile(const float *const w[4], int64_t kc, int T, const float *x, int64_t xs, float *out) {
    kc_tile(CI_F32, (const void *const *)w, kc, T, x, xs, out);
}

/* Rows the next tile of a block takes when left remain and a tile holds up to R: R, or all
 * that are left, and a remainder between R and 2 R as two near-equal tiles (so no 1-row tile
 * follows a full one). Shared by the block tiles of every set. */
static inline int block_rows_next(int left, int R) {
    return left > R && left < 2 * R ? (left + 1) / 2 : left < R ? left : R;
}

#ifdef BT_TOK
/* ---- prefill block tile (a set that defines BT_TOK x BT_ROWS, its register tile) --------
 * A whole packed block (nr rows x kc columns, every token row of the item) in one call:
 * BT_TOK token rows x BT_ROWS weight rows of accumulators, the weight vectors held in
 * registers and each x vector loaded once for all of them. The bits are f32_tile's: each
 * output's VL lanes run the same FMA chain over the chunk (lane l: columns l, l + VL, ...,
 * the tail zero-filled the same way), are reduced with the same vhsum4 tree (whichever
 * three other outputs share the call), and land in y as the chunk's part. */
AI void bt_micro(const int WDT, const int TT, const int RR, const void *const *w, int64_t kc, const float *x,
                 int64_t xs, float *y, int64_t ys, int first) {
    vf acc[BT_TOK][BT_ROWS];
    UNROLL(8)
    for (int t = 0; t < TT; t++)
        UNROLL(8)
        for (int r = 0; r < RR; r++) acc[t][r] = vzero();
    int64_t k = 0;
    for (; k + VL <= kc; k += VL) {
        vf wv[BT_ROWS];
        UNROLL(8)
        for (int r = 0; r < RR; r++) {
            wv[r] = wload(WDT, w[r], k);
            __asm__("" : "+v"(wv[r])); /* keep it in a register: reused by every token */
        }
        UNROLL(8)
        for (int t = 0; t < TT; t++) {
            vf xv = vld(x + t * xs + k);
            UNROLL(8)
            for (int r = 0; r < RR; r++) acc[t][r] = vfma(wv[r], xv, acc[t][r]);
        }
    }
    if (k < kc) {
        int n = (int)(kc - k);
        vf wv[BT_ROWS];
        UNROLL(8)
        for (int r = 0; r < RR; r++) wv[r] = wload_part(WDT, w[r], k, n);
        UNROLL(8)
        for (int t = 0; t < TT; t++) {
            vf xv = xload_part(x + t * xs + k, n);
            UNROLL(8)
            for (int r = 0; r < RR; r++) acc[t][r] = vfma(wv[r], xv, acc[t][r]);
        }
    }
    /* vhsum4 over the TT*RR accumulators in (t, r) order, four at a time, the last group
     * padded with repeats */
    float part[BT_TOK * BT_ROWS + 3];
    UNROLL(16)
    for (int i = 0; i < TT * RR; i += 4) {
        const int j1 = i + 1 < TT * RR ? i + 1 : i, j2 = i + 2 < TT * RR ? i + 2 : i, j3 = i + 3 < TT * RR ? i + 3 : i;
        vhsum4(acc[i / RR][i % RR], acc[j1 / RR][j1 % RR], acc[j2 / RR][j2 % RR], acc[j3 / RR][j3 % RR], part + i);
    }
    UNROLL(8)
    for (int t = 0; t < TT; t++) {
        float *yt = y + t * ys;
        UNROLL(8)
        for (int r = 0; r < RR; r++) yt[r] = first ? part[t * RR + r] : yt[r] + part[t * RR + r];
    }
}

#define BT_CASE(TT, RR) bt_micro(WDT, TT, RR, w + r, kc, x + t * xs, xs, y + t * ys + r, ys, first)
#if BT_TOK > 8 || BT_ROWS > 8
#error "block_tile: BT_TOK and BT_ROWS go up to 8"
#endif
#define BT_T_(n, RR) case n: if (n <= BT_TOK && RR <= BT_ROWS) BT_CASE(n <= BT_TOK ? n : 1, RR <= BT_ROWS ? RR : 1); break;
#define BT_TOKS(RR) switch (T - t < BT_TOK ? T - t : BT_TOK) { \
    BT_T_(1, RR) BT_T_(2, RR) BT_T_(3, RR) BT_T_(4, RR) BT_T_(5, RR) BT_T_(6, RR) BT_T_(7, RR) BT_T_(8, RR) }

/* y[t*ys + i] = part (first) or y[t*ys + i] + part, part = dot(x_t, w[i]) over kc, for i < nr,
 * t < T, w's rows in dtype WDT (f32, or 16-bit widened in registers: the same values, so the same
 * bits). Tokens go BT_TOK at a time over all the block's rows, BT_ROWS at a time (a remainder
 * between BT_ROWS and 2 * BT_ROWS as two near-equal tiles), so a token group's x stays in L1
 * while the block (PACK_ROWS x KC in cpu.c) comes from L1 / L2. */
AI void block_tile_dt(const int WDT, const void *const *w, int nr, int64_t kc, int T, const float *x, int64_t xs,
                      float *y, int64_t ys, int first) {
    for (int t = 0; t < T; t += BT_TOK)
        for (int r = 0; r < nr;) {
            int rr = block_rows_next(nr - r, BT_ROWS);
            switch (rr) {
            case 1: BT_TOKS(1) break;
            case 2: BT_TOKS(2) break;
            case 3: BT_TOKS(3) break;
            case 4: BT_TOKS(4) break;
            case 5: BT_TOKS(5) break;
            case 6: BT_TOKS(6) break;
            case 7: BT_TOKS(7) break;
            default: BT_TOKS(8) break;
            }
            r += rr;
        }
}
static TGT void block_tile(const float *const *w, int nr, int64_t kc, int T, const float *x, int64_t xs, float *y,
                           int64_t ys, int first) {
    block_tile_dt(CI_F32, (const void *const *)w, nr, kc, T, x, xs, y, ys, first);
}
#ifdef BT_IN_PLACE
/* The same over bf16 / f16 rows (dt) read in place and widened in registers, no packed f32 copy:
 * for few tokens, where the packing (a conversion pass and a store of every weight, and its wait on
 * memory) costs as much as the FMAs it serves. */
static TGT void block_tile16(int dt, const uint16_t *const *w, int nr, int64_t kc, int T, const float *x, int64_t xs,
                             float *y, int64_t ys, int first) {
    if (dt == CI_BF16) block_tile_dt(CI_BF16, (const void *const *)w, nr, kc, T, x, xs, y, ys, first);
    else block_tile_dt(CI_F16, (const void *const *)w, nr, kc, T, x, xs, y, ys, first);
}
#define KBLOCK_TILE16 , .block_tile16 = block_tile16
#endif
#define KBLOCK_TILE block_tile
#endif

/* dst = row[c0..c1) converted; fp8 spans are cut at column-block edges. */
AI void convert_span(const int dt, const void *row, int64_t c0, int64_t c1, vf mult, float *dst) {
    int64_t k = c0;
    for (; k + VL <= c1; k += VL) {
        vf w = wload(dt, row, k);
        if (dt == CI_F8_E4M3) w = vmul(w, mult);
        vst(dst + (k - c0), w);
    }
    if (k < c1) {
        vf w = wload_part(dt, row, k, (int)(c1 - k));
        if (dt == CI_F8_E4M3) w = vmul(w, mult);
        xstore_part(dst + (k - c0), w, (int)(c1 - k));
    }
}

static TGT void row_f32(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst) {
    int64_t cols = W->cols;
    switch (W->dtype) {
    case CI_F32: memcpy(dst, (const float *)W->data + r * cols + c0, (size_t)(c1 - c0) * sizeof(float)); break;
    case CI_BF16: convert_span(CI_BF16, (const uint16_t *)W->data + r * cols, c0, c1, vzero(), dst); break;
    case CI_F16: convert_span(CI_F16, (const uint16_t *)W->data + r * cols, c0, c1, vzero(), dst); break;
    case CI_F8_E4M3: {
        const uint8_t *row = (const uint8_t *)W->data + r * cols;
        int64_t bs = W->scale && W->block > 0 ? W->block : cols;
        int64_t ncb = (cols + bs - 1) / bs;
        for (int64_t c = c0; c < c1;) {
            int64_t cb = c / bs, end = (cb + 1) * bs < c1 ? (cb + 1) * bs : c1;
            float s = W->scale && W->block > 0 ? scale_at(W, (W->scale_row0 + r) / bs * ncb + cb) : 1.0f;
            float m = s * 0x1p8f;
            if (fabsf(m) <= FLT_MAX) {
                convert_span(CI_F8_E4M3, row, c, end, vset1(m), dst + (c - c0));
            } else {
                for (int64_t i = c; i < end; i++) dst[i - c0] = cpu_fp8_lut[row[i]] * s;
            }
            c = end;
        }
        break;
    }
    default:
        for (int64_t c = c0; c < c1; c++) dst[c - c0] = NAN;
    }
}

static TGT float sumsq(const float *x, int64_t n) {
    vf a0 = vzero(), a1 = vzero();
    int64_t i = 0;
    for (; i + 2 * VL <= n; i += 2 * VL) {
        vf u = vld(x + i), v = vld(x + i + VL);
        a0 = vfma(u, u, a0);
        a1 = vfma(v, v, a1);
    }
    for (; i < n; i += VL) {
        vf u = i + VL <= n ? vld(x + i) : xload_part(x + i, (int)(n - i));
        a0 = vfma(u, u, a0);
    }
    return vhsum(vadd(a0, a1));
}

static TGT void scale_mul(float *out, const float *x, const float *w, float s, int64_t n) {
    vf sv = vset1(s);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf v = vmul(vld(x + i), sv);
        if (w) v = vmul(v, vld(w + i));
        vst(out + i, v);
    }
    for (; i < n; i++) out[i] = w ? x[i] * s * w[i] : x[i] * s;
}

/* silu(g) * u with silu(g) = g / (1 + exp(-g)); vexp is within a few ulps of expf. The
 * tail goes through vexp too (a partial vector), so an element's value does not depend on
 * where it sits in the array: a token's row gets the same bits alone or in a batch. */
AI vf swiglu_v(vf gv, vf uv) {
    vf e = vexp(vsub(vzero(), gv));
    return vmul(vdiv(gv, vadd(vset1(1.0f), e)), uv);
}

static TGT void swiglu(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vst(g + i, swiglu_v(vld(g + i), vld(u + i)));
    if (i < n) xstore_part(g + i, swiglu_v(xload_part(g + i, (int)(n - i)), xload_part(u + i, (int)(n - i))), (int)(n - i));
}

static TGT void add(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vst(y + i, vadd(vld(y + i), vld(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

static TGT float vmaxf(const float *s, int L) {
    vf mv = vset1(-INFINITY);
    int j = 0;
    for (; j + VL <= L; j += VL) mv = vmax(mv, vld(s + j));
    float m = vhmax(mv);
    for (; j < L; j++) m = s[j] > m ? s[j] : m;
    return m;
}

static TGT float exp_sum(float *s, int L, float m) {
    vf sum = vzero(), msub = vset1(m);
    int j = 0;
    for (; j + VL <= L; j += VL) {
        vf e = vexp(vsub(vld(s + j), msub));
        vst(s + j, e);
        sum = vadd(sum, e);
    }
    float tot = vhsum(sum);
    for (; j < L; j++) {
        s[j] = expf(s[j] - m);
        tot += s[j];
    }
    return tot;
}

/* For nq <= 4 query rows: o_h[0..NV*VL) += sum_j p_h[j] v_j, with NV (compile-time)
 * vectors per row. Each value vector is loaded once for all nq rows; NQ*NV <= 16
 * accumulators stay in registers while the L value rows stream past. */
AI vf vld_kv(const int h16, const void *v, int64_t i) {
    return h16 ? vld_f16((const uint16_t *)v + i) : vld((const float *)v + i);
}

AI void wsum_tile(const int NQ, const int NV, const int h16, float *o, int64_t os, const float *p, int64_t ps,
                  const void *v, int64_t stride, int L) {
    vf a[4][4];
    UNROLL(4)
    for (int h = 0; h < NQ; h++) {
        UNROLL(4)
        for (int c = 0; c < NV; c++) a[h][c] = vzero();
    }
    for (int j = 0; j < L; j++) {
        const int64_t vj = (int64_t)j * stride;
        vf vv[4];
        UNROLL(4)
        for (int c = 0; c < NV; c++) vv[c] = vld_kv(h16, v, vj + c * VL);
        UNROLL(4)
        for (int h = 0; h < NQ; h++) {
            vf ph = vset1(p[h * ps + j]);
            UNROLL(4)
            for (int c = 0; c < NV; c++) a[h][c] = vfma(ph, vv[c], a[h][c]);
        }
    }
    UNROLL(4)
    for (int h = 0; h < NQ; h++) {
        UNROLL(4)
        for (int c = 0; c < NV; c++) vst(o + h * os + c * VL, vadd(vld(o + h * os + c * VL), a[h][c]));
    }
}

#define WSUM_NV(NQ, nv, ...) switch (nv) { \
    case 1: wsum_tile(NQ, 1, __VA_ARGS__); break; case 2: wsum_tile(NQ, 2, __VA_ARGS__); break; \
    case 3: wsum_tile(NQ, 3, __VA_ARGS__); break; default: wsum_tile(NQ, 4, __VA_ARGS__); break; }

/* Column chunks of up to 4 vectors; a final partial vector (hd not a multiple of VL)
 * goes through the stack buffer. With 4 rows and hd = 128 on AVX-512 that is two passes
 * over the (L2-resident) value block, each at full FMA rate. h16: f16 value rows (the
 * cache of ci_backend.kv_f16), v and stride in halves. */
AI void wsum_any(const int h16, float *o, int64_t os, int nq, const float *p, int64_t ps, const void *v,
                 int64_t stride, int L, int hd) {
    int i0 = 0;
    for (; i0 + VL <= hd;) {
        int nv = (hd - i0) / VL < 4 ? (hd - i0) / VL : 4;
        const void *vi = h16 ? (const void *)((const uint16_t *)v + i0) : (const void *)((const float *)v + i0);
        switch (nq) {
        case 1: WSUM_NV(1, nv, h16, o + i0, os, p, ps, vi, stride, L); break;
        case 2: WSUM_NV(2, nv, h16, o + i0, os, p, ps, vi, stride, L); break;
        case 3: WSUM_NV(3, nv, h16, o + i0, os, p, ps, vi, stride, L); break;
        default: WSUM_NV(4, nv, h16, o + i0, os, p, ps, vi, stride, L); break;
        }
        i0 += nv * VL;
    }
    if (i0 < hd) {
        int tail = hd - i0;
        for (int h = 0; h < nq; h++) {
            vf a = vzero();
            for (int j = 0; j < L; j++) {
                const int64_t at = (int64_t)j * stride + i0;
                vf vv = h16 ? wload_part(CI_F16, v, at, tail) : xload_part((const float *)v + at, tail);
                a = vfma(vset1(p[h * ps + j]), vv, a);
            }
            xstore_part(o + h * os + i0, vadd(xload_part(o + h * os + i0, tail), a), tail);
        }
    }
}

static TGT void attn_wsum(float *o, int64_t os, int nq, const float *p, int64_t ps, const float *v, int64_t stride,
                          int L, int hd) {
    wsum_any(0, o, os, nq, p, ps, v, stride, L, hd);
}

static TGT void attn_wsum16(float *o, int64_t os, int nq, const float *p, int64_t ps, const uint16_t *v,
                            int64_t stride, int L, int hd) {
    wsum_any(1, o, os, nq, p, ps, v, stride, L, hd);
}

static TGT void h16_tile(const uint16_t *const w[4], int64_t kc, int T, const float *x, int64_t xs, float *out) {
    kc_tile(CI_F16, (const void *const *)w, kc, T, x, xs, out);
}

/* The f16 cache's stores: VL at a time through the set's vst_f16 (the clamp, then the
 * conversion rounding to nearest even), the tail through cpu_kv_f16 (the same values). */
static TGT void to_f16(const float *x, int64_t n, uint16_t *h) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vst_f16(h + i, vld(x + i));
    for (; i < n; i++) h[i] = cpu_kv_f16(x[i]);
}

#ifdef KBLOCK_TILE
#ifndef KBLOCK_TILE16
#define KBLOCK_TILE16
#endif
#define KBLOCK_FIELD , .block_tile = KBLOCK_TILE KBLOCK_TILE16
#else
#define KBLOCK_FIELD
#endif
/* The set's fields but its name (a file may define a second table over the same kernels). */
#define KTABLE_FIELDS \
    .mat_tile = mat_tile, .seq_rows = seq_rows, .f32_tile = f32_tile, .row_f32 = row_f32, .sumsq = sumsq, .scale_mul = scale_mul, \
    .swiglu = swiglu, .add = add, .vmax = vmaxf, .exp_sum = exp_sum, .attn_wsum = attn_wsum, .h16_tile = h16_tile, \
    .attn_wsum16 = attn_wsum16, .to_f16 = to_f16 KBLOCK_FIELD

const cpu_kernels KTABLE = {
    .name = KNAME,
    KTABLE_FIELDS
};
