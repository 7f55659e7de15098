/* mlx_avx2_oct.h — mlx_avx2.c's octet kernels (internal; included by mlx_avx2.c alone, after its
 * layout, which they read): the integer block sums of 8 weight rows by up to MX_TMAX tokens, the f32
 * chain over them (params by window transposes, or from cpu_amx_mlx_ptiles' copy), and the octets of
 * the copy with each one's chain run under the next one's integer loop. What they compute is stated
 * at the top of mlx_avx2.c. */
#ifndef CI_MLX_AVX2_OCT_H
#define CI_MLX_AVX2_OCT_H

/* 8 x 8 f32 transpose: r[i] lane j -> r[j] lane i. */
AI void tr8(__m256 r[8]) {
    __m256 t[8], u[8];
    UNROLL8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    UNROLL8
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    UNROLL8
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* One row's 64-column chunk of codes, loaded and split into the vectors its dot takes (HALF: only
 * the chunk's first 32 columns exist): act8 4-bit, c[0] / c[1] the low / high nibbles as bytes;
 * int16 4-bit, c[n] nibble n of each word; 8-bit, per 32-column half the low / high bytes of each
 * word (c[0], c[1]; c[2], c[3]). */
typedef struct {
    __m256i c[4];
} mx_codes;

AI mx_codes codes_of(const int BITS, const int XB, const int HALF, const uint8_t *p) {
    mx_codes r;
    if (BITS == 4) {
        const __m256i cv = HALF ? _mm256_zextsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p))
                                : _mm256_loadu_si256((const __m256i *)(const void *)p);
        if (XB == 1) {
            const __m256i m = _mm256_set1_epi8(0x0f);
            r.c[0] = _mm256_and_si256(cv, m);
            r.c[1] = _mm256_and_si256(_mm256_srli_epi16(cv, 4), m);
        } else {
            const __m256i m = _mm256_set1_epi16(0x000f);
            r.c[0] = _mm256_and_si256(cv, m);
            r.c[1] = _mm256_and_si256(_mm256_srli_epi16(cv, 4), m);
            r.c[2] = _mm256_and_si256(_mm256_srli_epi16(cv, 8), m);
            r.c[3] = _mm256_srli_epi16(cv, 12);
        }
        return r;
    }
    const __m256i m = _mm256_set1_epi16(0x00ff);
    for (int h = 0; h < 2; h++) {
        if (h && HALF) break;
        const __m256i cv = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32 * h));
        r.c[2 * h] = _mm256_and_si256(cv, m);
        r.c[2 * h + 1] = _mm256_srli_epi16(cv, 8);
    }
    return r;
}

/* The chunk's codes against x̂ (xc): 8 int32 lanes; with B = 32 (B64 0), lanes 0-3 hold the first
 * block's columns, 4-7 the second's. */
AI __m256i codes_dot(const int BITS, const int XB, const int B64, const int HALF, const mx_codes *r, const uint8_t *xc) {
    const __m256i *x = (const __m256i *)xc;
    if (BITS == 4 && XB == 1) {
        const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(r->c[0], _mm256_load_si256(x)),
                                           _mm256_maddubs_epi16(r->c[1], _mm256_load_si256(x + 1)));
        return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
    }
    if (BITS == 4) {
        __m256i s = _mm256_madd_epi16(r->c[0], _mm256_load_si256(x));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(r->c[1], _mm256_load_si256(x + 1)));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(r->c[2], _mm256_load_si256(x + 2)));
        return _mm256_add_epi32(s, _mm256_madd_epi16(r->c[3], _mm256_load_si256(x + 3)));
    }
    const __m256i h0 = _mm256_add_epi32(_mm256_madd_epi16(r->c[0], _mm256_load_si256(x)),
                                        _mm256_madd_epi16(r->c[1], _mm256_load_si256(x + 1)));
    if (HALF) return h0;   /* B = 32 here: lanes 0-7 the one block's */
    const __m256i h1 = _mm256_add_epi32(_mm256_madd_epi16(r->c[2], _mm256_load_si256(x + 2)),
                                        _mm256_madd_epi16(r->c[3], _mm256_load_si256(x + 3)));
    if (B64) return _mm256_add_epi32(h0, h1);
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
}

#define MX_TMAX 4   /* tokens an octet's pass takes (cpu.c's gemm calls: CPU_TILE_T) */

/* The chunk of the 8 rows (codes at p + ro[i]) for T tokens (x̂ chunks xc[t]): each token's sums over
 * lanes 0-3 (lo[t]) and 4-7 (hi[t]), row i in lane i. A pair of rows at a time, its codes split once
 * for the T tokens, each token's pair folded into the tree's first level at once (t1), then two more
 * levels of unpacks and adds. Exact. */
AI void oct_chunk(const int T, const int BITS, const int XB, const int B64, const int HALF, const uint8_t *p,
                  const int64_t ro[8], const uint8_t *const xc[MX_TMAX], __m256i lo[MX_TMAX], __m256i hi[MX_TMAX]) {
    __m256i t1[MX_TMAX][4];
    UNROLL8
    for (int j = 0; j < 4; j++) {
        const mx_codes ca = codes_of(BITS, XB, HALF, p + ro[2 * j]), cb = codes_of(BITS, XB, HALF, p + ro[2 * j + 1]);
        UNROLL8
        for (int t = 0; t < T; t++) {
            const __m256i a = codes_dot(BITS, XB, B64, HALF, &ca, xc[t]), b = codes_dot(BITS, XB, B64, HALF, &cb, xc[t]);
            t1[t][j] = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
        }
    }
    UNROLL8
    for (int t = 0; t < T; t++) {
        const __m256i u0 = _mm256_add_epi32(_mm256_unpacklo_epi64(t1[t][0], t1[t][1]), _mm256_unpackhi_epi64(t1[t][0], t1[t][1]));
        const __m256i u1 = _mm256_add_epi32(_mm256_unpacklo_epi64(t1[t][2], t1[t][3]), _mm256_unpackhi_epi64(t1[t][2], t1[t][3]));
        lo[t] = _mm256_permute2x128_si256(u0, u1, 0x20);
        hi[t] = _mm256_permute2x128_si256(u0, u1, 0x31);
    }
}

/* Chunk k's block sums of the 8 rows (codes at p + ro[i]) for T tokens (x̂ chunk xk of token 0, the
 * others xs bytes apart) into sb (token t's at sb + t * ts, 8 int32 a block); HALF: the row's last 32
 * columns (one block of 32). Returns the blocks written: 1, or 2 with B = 32. */
AI int chunk_sums(const int T, const int BITS, const int XB, const int B64, int half, const uint8_t *p, const int64_t ro[8],
                  const uint8_t *xk, int64_t xs, int32_t *sb, int64_t ts) {
    const uint8_t *xc[MX_TMAX];
    UNROLL8
    for (int t = 0; t < T; t++) xc[t] = xk + t * xs;
    __m256i lo[MX_TMAX], hi[MX_TMAX];
    if (half) {
        oct_chunk(T, BITS, XB, B64, 1, p, ro, xc, lo, hi);
        UNROLL8
        for (int t = 0; t < T; t++) _mm256_store_si256((__m256i *)(sb + t * ts), lo[t]);
        return 1;
    }
    oct_chunk(T, BITS, XB, B64, 0, p, ro, xc, lo, hi);
    UNROLL8
    for (int t = 0; t < T; t++) {
        if (B64) _mm256_store_si256((__m256i *)(sb + t * ts), _mm256_add_epi32(lo[t], hi[t]));
        else {
            _mm256_store_si256((__m256i *)(sb + t * ts), lo[t]);
            _mm256_store_si256((__m256i *)(sb + t * ts + 8), hi[t]);
        }
    }
    return B64 ? 1 : 2;
}

/* A chain's state between windows: the params of 8 groups from wg ([group - wg][row]), the group
 * of the next block and its end column, and a window's block sums of each token (rows in lanes). */
typedef struct {
    _Alignas(32) float sw[8][8];
    _Alignas(32) float bw[8][8];
    _Alignas(32) int32_t sb[MX_TMAX][MX_WIN][8];
    int64_t wg, g, gend;
} mx_cstate;

/* The params of groups g .. g + 7 (fewer at the row's end) of the 8 rows: each row's, transposed to
 * rows in lanes. Not inlined either: its 16 registers would push the chain's accumulators out. */
static __attribute__((noinline)) TGT void mx_window(mx_cstate *cs, const ci_qdesc *d, const int64_t gi[8], int64_t g,
                                                    int64_t ng) {
    const int cnt = ng - g < 8 ? (int)(ng - g) : 8;
    __m256 r[8];
    UNROLL8
    for (int i = 0; i < 8; i++) r[i] = q8p(d, d->scales, gi[i] + g, cnt);
    tr8(r);
    UNROLL8
    for (int i = 0; i < 8; i++) _mm256_store_ps(cs->sw[i], r[i]);
    UNROLL8
    for (int i = 0; i < 8; i++) r[i] = q8p(d, d->biases, gi[i] + g, cnt);
    tr8(r);
    UNROLL8
    for (int i = 0; i < 8; i++) _mm256_store_ps(cs->bw[i], r[i]);
}

/* The T tokens' chains over blocks b0 .. b0 + nb - 1 (their sums in cs->sb), in order, from acc (D / X:
 * each token's d_b and X_g). Not inlined: its accumulators then stay in registers (inside oct_T, whose
 * integer loop takes all 16, GCC kept one in memory: a store and a load in every step of the chain). */
AI void mx_chain_T(const int T, mx_cstate *cs, const ci_mat *W, const int64_t gi[8], const float *const D[MX_TMAX],
                   const float *const X[MX_TMAX], int64_t b0, int64_t nb, __m256 acc[MX_TMAX]) {
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, ng = W->cols / G, B = G % 64 ? 32 : 64;
    int64_t g = cs->g, gend = cs->gend, wg = cs->wg;   /* in registers for the loop */
    __m256 a[MX_TMAX];
    UNROLL8
    for (int t = 0; t < T; t++) a[t] = acc[t];
    for (int64_t j = 0; j < nb; j++) {
        const int64_t b = b0 + j;
        if (g >= wg + 8) {
            mx_window(cs, d, gi, g, ng);
            wg = g;
        }
        const __m256 sv = _mm256_load_ps(cs->sw[g - wg]);
        UNROLL8
        for (int t = 0; t < T; t++) {
            const __m256 sd = _mm256_mul_ps(sv, _mm256_set1_ps(D[t][b]));
            a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *)cs->sb[t][j])), sd, a[t]);
        }
        if ((b + 1) * B == gend) {   /* the group's last block: its bias term */
            const __m256 bv = _mm256_load_ps(cs->bw[g - wg]);
            UNROLL8
            for (int t = 0; t < T; t++) a[t] = _mm256_fmadd_ps(bv, _mm256_set1_ps(X[t][g]), a[t]);
            g++;
            gend += G;
        }
    }
    cs->g = g;
    cs->gend = gend;
    cs->wg = wg;
    UNROLL8
    for (int t = 0; t < T; t++) acc[t] = a[t];
}
static __attribute__((noinline)) TGT void mx_chain(int T, mx_cstate *cs, const ci_mat *W, const int64_t gi[8],
                                                   const float *const D[MX_TMAX], const float *const X[MX_TMAX],
                                                   int64_t b0, int64_t nb, __m256 acc[MX_TMAX]) {
    switch (T) {
    case 1: mx_chain_T(1, cs, W, gi, D, X, b0, nb, acc); break;
    case 2: mx_chain_T(2, cs, W, gi, D, X, b0, nb, acc); break;
    case 3: mx_chain_T(3, cs, W, gi, D, X, b0, nb, acc); break;
    default: mx_chain_T(4, cs, W, gi, D, X, b0, nb, acc);
    }
}

/* T tokens (prepared rows xq, stride xs bytes) by the 8 weight rows rows[0..8) (repeats allowed):
 * out[t * 8 + i] = row i's output for token t, amx_mlx.c's chain with the rows in lanes, the params by
 * window transposes (the octets of the copy: octs_pt_T below). */
AI void oct_T(const int T, const int BITS, const int XB, const int B64, const ci_mat *W, const int64_t rows[8],
              const uint8_t *xq, int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    const mlay L = mlay_of(W, XB == 1);
    const int64_t K = W->cols, rb = K * BITS / 8, G = d->group, cb = BITS == 4 ? 32 : 64;   /* code bytes a chunk */
    const int64_t nfull = K >> 6;   /* whole chunks (a last one of 32 columns after them) */
    const float *D[MX_TMAX], *X[MX_TMAX];
    UNROLL8
    for (int t = 0; t < T; t++) {
        D[t] = (const float *)(xq + t * xs + L.d_at);
        X[t] = (const float *)(xq + t * xs + L.x_at);
    }
    const uint8_t *w0 = (const uint8_t *)W->data + rows[0] * rb;
    int64_t ro[8], gi[8];   /* the rows' code offsets from row 0's, their params' first index */
    UNROLL8
    for (int i = 0; i < 8; i++) {
        ro[i] = (rows[i] - rows[0]) * rb;
        gi[i] = (W->scale_row0 + rows[i]) * L.ng;
    }
    mx_cstate cs;   /* not an initializer: that would zero its 8 KiB for every octet */
    cs.wg = -8;
    cs.g = 0;
    cs.gend = G;
    __m256 acc[MX_TMAX];
    UNROLL8
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    const int64_t cpw = MX_WIN * L.B / 64;    /* chunks a window of MX_WIN blocks */
    for (int64_t k0 = 0; k0 < L.nch; k0 += cpw) {
        const int64_t k1 = k0 + cpw < L.nch ? k0 + cpw : L.nch;
        /* the integer sums of the window's chunks, nothing else in the loop */
        int64_t nbw = 0;
        for (int64_t k = k0; k < k1; k++) {
            const int64_t off = k * cb;
            /* the 8 rows are one run of 8 rb bytes (but at a matrix's last, short octet): this
             * chunk's share of the run MX_PFD bytes on, a line per 64 bytes, into L2 */
            UNROLL8
            for (int64_t l = 0; l < 8 * cb; l += 64) __builtin_prefetch(w0 + MX_PFD + k * 8 * cb + l, 0, 2);
            nbw += chunk_sums(T, BITS, XB, B64, k == nfull, w0 + off, ro, xq + k * 64 * XB, xs, &cs.sb[0][nbw][0],
                              MX_WIN * 8);
        }
        mx_chain(T, &cs, W, gi, D, X, k0 * 64 / L.B, nbw, acc);
    }
    UNROLL8
    for (int t = 0; t < T; t++) _mm256_storeu_ps(out + 8 * t, acc[t]);
}

/* ---- octets whose params come from the copy, each one's chain run under the next one's integer loop ----
 *
 * The chain is a dependent run of two FMAs a block (4 cycles each): after an octet's integer loop it
 * ran alone, ~10% of a one-token decode. Here it runs a block (two with B = 32) after each chunk of
 * the next octet's loop, whose work hides its latency; the same operations in the same order, so the
 * same bits. For rows of at most MX_NBMAX blocks (the buffers: 32 KiB a token). */
#define MX_NBMAX 256   /* 16384 columns (B = 64); wider rows take oct_T's window transposes */
typedef struct {
    _Alignas(32) int32_t sb[2][MX_TMAX][MX_NBMAX][8];   /* two octets' block sums: the one summed, the one chained */
    __m256 acc[MX_TMAX];
    const uint32_t *pr;   /* the chained octet's params */
    int64_t j, g, bi;     /* its next block, that block's group, the block's place in it */
    int live, buf;        /* a chain pending; the buffer it reads */
} mx_pend;

/* n more blocks of the pending chain (T tokens; bpg blocks a group). */
AI void pend_steps(const int T, mx_pend *p, int n, int64_t bpg, const float *const D[MX_TMAX], const float *const X[MX_TMAX]) {
    for (int s = 0; s < n; s++) {
        const int64_t j = p->j, g = p->g;
        const __m256i pv = _mm256_loadu_si256((const __m256i *)(const void *)(p->pr + 16 * g));
        const __m256 sv = _mm256_castsi256_ps(_mm256_slli_epi32(pv, 16));
        UNROLL8
        for (int t = 0; t < T; t++)
            p->acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *)p->sb[p->buf][t][j])),
                                        _mm256_mul_ps(sv, _mm256_set1_ps(D[t][j])), p->acc[t]);
        if (++p->bi == bpg) {   /* the group's last block: its bias term */
            const __m256 bv = _mm256_castsi256_ps(_mm256_and_si256(pv, _mm256_set1_epi32((int)0xffff0000u)));
            UNROLL8
            for (int t = 0; t < T; t++) p->acc[t] = _mm256_fmadd_ps(bv, _mm256_set1_ps(X[t][g]), p->acc[t]);
            p->bi = 0;
            p->g++;
        }
        p->j++;
    }
}

/* Octets [r0, r1) (whole, from a grid row of 8 k; pt the copy) by T tokens, y[t * ys + r]. */
AI void octs_pt_T(const int T, const int BITS, const int XB, const int B64, const ci_mat *W, int64_t r0, int64_t r1,
                  const uint32_t *pt, const uint8_t *xq, int64_t xs, float *y, int64_t ys) {
    const ci_qdesc *d = q_desc(W);
    const mlay L = mlay_of(W, XB == 1);
    const int64_t K = W->cols, rb = K * BITS / 8, cb = BITS == 4 ? 32 : 64, nfull = K >> 6, bpg = d->group / L.B;
    const float *D[MX_TMAX], *X[MX_TMAX];
    UNROLL8
    for (int t = 0; t < T; t++) {
        D[t] = (const float *)(xq + t * xs + L.d_at);
        X[t] = (const float *)(xq + t * xs + L.x_at);
    }
    int64_t ro[8];
    UNROLL8
    for (int i = 0; i < 8; i++) ro[i] = i * rb;
    mx_pend p;
    p.live = 0;
    p.buf = 1;
    int64_t pr_row = 0;   /* the pending octet's first row */
    for (int64_t r = r0; r <= r1; r += 8) {
        const int cur = p.buf ^ 1;
        if (r < r1) {
            const uint8_t *w0 = (const uint8_t *)W->data + r * rb;
            int64_t nbw = 0;
            for (int64_t k = 0; k < L.nch; k++) {
                UNROLL8
                for (int64_t l = 0; l < 8 * cb; l += 64) __builtin_prefetch(w0 + MX_PFD + k * 8 * cb + l, 0, 2);
                nbw += chunk_sums(T, BITS, XB, B64, k == nfull, w0 + k * cb, ro, xq + k * 64 * XB, xs,
                                  &p.sb[cur][0][nbw][0], MX_NBMAX * 8);
                /* the octet before: as many blocks as this chunk gave (every octet has as many) */
                if (p.live) pend_steps(T, &p, k == nfull || B64 ? 1 : 2, bpg, D, X);
            }
        }
        if (p.live) {   /* the octet before: the rest of its chain (all of it after the last octet), its outputs */
            pend_steps(T, &p, (int)(L.nb - p.j), bpg, D, X);
            UNROLL8
            for (int t = 0; t < T; t++) _mm256_storeu_ps(y + t * ys + pr_row, p.acc[t]);
        }
        if (r == r1) break;
        const int64_t gr = W->scale_row0 + r;
        p.pr = pt + (gr >> 4) * L.ng * 16 + (gr & 15);
        p.j = p.g = p.bi = 0;
        p.buf = cur;
        p.live = 1;
        pr_row = r;
        UNROLL8
        for (int t = 0; t < T; t++) p.acc[t] = _mm256_setzero_ps();
    }
}

/* F(T, BITS, XB, B64, args...) for W's form (bits, A8, b64 in scope) and the token count T (1..4). */
#define MX_FORM(F, T, ...) do { \
    if (bits == 4 && A8) { if (b64) F(T, 4, 1, 1, __VA_ARGS__); else F(T, 4, 1, 0, __VA_ARGS__); } \
    else if (bits == 4) { if (b64) F(T, 4, 2, 1, __VA_ARGS__); else F(T, 4, 2, 0, __VA_ARGS__); } \
    else { if (b64) F(T, 8, 2, 1, __VA_ARGS__); else F(T, 8, 2, 0, __VA_ARGS__); } } while (0)
#define MX_BY_T(F, ...) switch (T) { \
    case 1: MX_FORM(F, 1, __VA_ARGS__); break; \
    case 2: MX_FORM(F, 2, __VA_ARGS__); break; \
    case 3: MX_FORM(F, 3, __VA_ARGS__); break; \
    default: MX_FORM(F, 4, __VA_ARGS__); }

static __attribute__((noinline)) TGT void octs_pt(const int A8, int T, const ci_mat *W, int64_t r0, int64_t r1,
                                                  const uint32_t *pt, const uint8_t *xq, int64_t xs, float *y, int64_t ys) {
    const int bits = q_desc(W)->bits, b64 = q_desc(W)->group % 64 == 0;
    MX_BY_T(octs_pt_T, W, r0, r1, pt, xq, xs, y, ys);
}

AI void oct(const int A8, int T, const ci_mat *W, const int64_t rows[8], const uint8_t *xq, int64_t xs, float *out) {
    const int bits = q_desc(W)->bits, b64 = q_desc(W)->group % 64 == 0;
    MX_BY_T(oct_T, W, rows, xq, xs, out);
}
#undef MX_BY_T
#undef MX_FORM

#endif
