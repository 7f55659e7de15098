/* amx_tiles.h — what the AMX sets' files share (internal to src/backend/cpu; included by
 * amx_bf16.c, which states the tiles' use, and amx_mlx.c): the target, the tile configuration, the
 * x rounding and the 16 x 16 pair transpose of the tokens form's panels. */
#ifndef CI_AMX_TILES_H
#define CI_AMX_TILES_H
#include "cpu_kernels.h"
#include <immintrin.h>
#include <string.h>

#define AMX_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#define AMX_SEG 2048   /* columns of a packed tokens-form panel: 32 rows x 2048 x 2 bytes = 128 KiB */
#define ROWS_FORM_MAX 15

typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) amx_cfg;

/* A configuration of 8 tiles of 16 rows x 64 bytes, for the caller to shape before cfg_set. */
static inline void cfg_init(amx_cfg *c) {
    memset(c, 0, sizeof *c);
    c->palette = 1;
    for (int i = 0; i < 8; i++) {
        c->rows[i] = 16;
        c->colsb[i] = 64;
    }
}

static inline AMX_TGT void cfg_set(const amx_cfg *c) {
    /* GCC 14 inlining the setup dropped the rows / colsb stores as dead (only the palette byte was
     * written before ldtilecfg, and the first tile instruction faulted): the asm makes them live */
    __asm__ volatile("" : : "m"(*c) : "memory");
    _tile_loadconfig(c);
}

/* Tiles 0-3: sums; 4, 5: A; 6, 7: B. rows form: C and B nb columns of 4 bytes (nb = n tokens);
 * tokens form: every tile 16 x 64 bytes. */
static inline AMX_TGT void cfg_load(int nb) {
    _Alignas(64) amx_cfg c;
    cfg_init(&c);
    if (nb < 16)
        for (int i = 0; i < 4; i++) c.colsb[i] = c.colsb[6 + (i & 1)] = (uint16_t)(4 * nb);
    cfg_set(&c);
}

static inline int64_t padded(int64_t cols) { return (cols + 31) & ~(int64_t)31; }

/* 16 floats rounded to bf16 (the tail zero-filled), as kernels_avx512.c's x_bf16 rounds; with lo,
 * also the rounding's remainders (exact in f32) rounded to bf16 into *lo. */
static inline AMX_TGT __m256i round16(const float *x, int64_t left, __m256i *lo) {
    __m512 v = left >= 16 ? _mm512_loadu_ps(x) : _mm512_maskz_loadu_ps((__mmask16)((1u << (left > 0 ? left : 0)) - 1), x);
    const __m256bh h = _mm512_cvtneps_pbh(v);
    if (lo) {
        const __m512 hf = (__m512)_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16);
        *lo = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf));
    }
    return (__m256i)h;
}

/* 16 rows of 16 dwords (v[i]: row i; 32 bf16, or 64 bytes) transposed: o[p * stride + i] = dword p
 * of row i. */
static inline __attribute__((always_inline)) AMX_TGT void tr16_to(const __m512i v[16], uint32_t *o, int64_t stride) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* u[4 q + j], 128-bit lane L: rows 4 q .. 4 q + 3 of pair 4 L + j */
    for (int j = 0; j < 4; j++) {
        __m512i s0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), s1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        __m512i s2 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44), s3 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        _mm512_storeu_si512(o + stride * (0 + j), _mm512_shuffle_i32x4(s0, s2, 0x88));
        _mm512_storeu_si512(o + stride * (4 + j), _mm512_shuffle_i32x4(s0, s2, 0xDD));
        _mm512_storeu_si512(o + stride * (8 + j), _mm512_shuffle_i32x4(s1, s3, 0x88));
        _mm512_storeu_si512(o + stride * (12 + j), _mm512_shuffle_i32x4(s1, s3, 0xDD));
    }
}

/* 16 rows of 32 bf16 (v[i]: row i) into pairs: o[p * 16 + i] = pair p of row i. */
static inline __attribute__((always_inline)) AMX_TGT void tr16(const __m512i v[16], uint32_t *o) { tr16_to(v, o, 16); }

/* amx_mlx.c: MLX affine W (cpu_amx_q_ok) on the tiles; cpu_amx_bytes / prep / rows hand them over. */
size_t amx_mlx_bytes(const ci_mat *W, int n);
int amx_mlx_prep_unit(const ci_mat *W, int n);
void amx_mlx_prep(const ci_mat *W, const float *x, int n, int t0, int t1, void *mem, int act8);
void amx_mlx_rows(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const void *xp, float *y, void *pack,
                  int tiles, const uint32_t *pt, int act8);

#endif
