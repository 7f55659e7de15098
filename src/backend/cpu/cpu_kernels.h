/* cpu_kernels.h — the per-ISA kernel table of the CPU backend (internal to src/backend/cpu).
 *
 * cpu.c owns the op drivers: argument shapes, blocking, splitting work across the pool,
 * per-thread scratch. What differs between instruction sets is only the inner loops
 * listed here; kernels_scalar.c, kernels_avx2.c and kernels_avx512.c each fill one table.
 * Every kernel is single-threaded, allocation-free and accumulates in f32.
 *
 * Tiles: a "tile" is T token rows (1 <= T <= CPU_TILE_T) by 4 weight rows. Kernels write
 * out[t*4 + r] = sum_k x[t*xs + k] * w_r[k]. The caller always passes 4 valid rows (it
 * repeats the last one when fewer remain) and ignores the extra results, so kernels never
 * branch on a row count.
 *
 * One summation order. Every output is summed the same way whatever the token count n of
 * the matmul, so a sequence gets the same bits decoded alone or beside others, and a
 * prompt the same bits prefilled in any chunks (the server relies on it):
 *   y = d_0 + d_1 + d_2 + ...   (left to right, f32), d_j the dot over the columns of
 *   chunk j = [j*CPU_KC, (j+1)*CPU_KC), computed by the set's f32_tile on the chunk's f32
 *   weights (lanes counted from the chunk's first column, reduced at its end).
 * The prefill path converts each chunk to f32 (row_f32) and calls f32_tile; mat_tile reads
 * the checkpoint dtype in registers and must produce exactly those bits, or return 0 (a
 * case it cannot do exactly, e.g. an fp8 block scale too large to fold), and then cpu.c
 * converts the chunk and calls f32_tile itself. 4-bit quantized formats are dotted in a
 * split column order (cpu_qkernels.split), which both paths apply to weights and x alike.
 * The bf16-activation sets keep the rule with an order of their own (kernels_avx512.c), and the
 * cpu-amx-bf16 set's bf16 matmuls one more (amx_bf16.c: one tile accumulator over the whole row, no
 * chunk sums): every token count still gives a row the same bits within a set. */
#ifndef CI_CPU_KERNELS_H
#define CI_CPU_KERNELS_H
#include "../backend.h"
#include "../../core/fpmode.h"   /* CI_FP_FLUSH_SCOPE: every op computes with FTZ + DAZ */
#include <stdint.h>

#define CPU_TILE_T 4    /* token rows per tile */
#define CPU_TILE_R 4    /* weight rows per tile */
#define CPU_KC 512      /* columns per chunk of the summation order (and of prefill packing) */
/* The AVX-512 sets' decode prefetch distance in bytes, per thread: cpu.c's par_for sets it for
 * every participant of a run (2048 when one thread streams alone, else 1024; kernels_avx512.c
 * says why); 1024 on a thread that never ran one. Prefetch only: no result depends on it. */
extern _Thread_local int cpu_pf_dist;
/* Whether a decode tile's weights are already in L1 (cpu.c's mm_decode_item sets it for the token
 * tiles after a 4-row tile's first, in a few-row prefill): the 16-bit tiles then run a loop
 * without the per-row prefetch (simd_template.h's hot_span; the same FMAs in the same order). */
extern _Thread_local int cpu_tile_hot;
/* Whether the AVX-512 sets' decode tiles of short rows prefetch the next tile in byte order
 * (kernels_avx512.c, quant_*_avx512.c): set by ci_backend_cpu_new, 1 on AMD CPUs (measured faster
 * on the Zen 5), 0 elsewhere (level or slower on the Xeon of the GPU box, bench/RESULTS.md);
 * CINFER_CPU_PF_NEXT_TILE=0|1 overrides it. Prefetch only: no result depends on it. */
extern int cpu_pf_next_tile;
/* The same rule for the 16-bit (bf16 / f16 / fp8) tiles, as the longest row in bytes that takes
 * it (0: none; kernels_avx512.c's PF_NEXT_TILE_MAX): 4096 on AMD CPUs, 0 elsewhere, until
 * ci_backend_cpu_tune measures it (cpu.c: on the same Zen 5 model it was 15-35% faster on one
 * host and 35% slower on another); CINFER_CPU_PF_NEXT_TILE=0|1 sets it (0 / 4096) untuned. */
extern int cpu_pf_next16;
/* The longest 16-bit (bf16 / f16) row in bytes that a one-token decode reads row after row
 * (cpu_kernels.seq_rows: one sequential stream, no software prefetch) instead of in 4-row
 * tiles (0: none): 2048 on AMD CPUs, 0 elsewhere, until ci_backend_cpu_tune measures it;
 * CINFER_CPU_SEQ=0|1 sets it (0 / 4096) untuned. Same bits either way. */
extern int cpu_seq16;

/* A value as the f16 attention cache holds it (backend.h ci_backend.kv_f16): x clamped to
 * [-65504, 65504] (NaN kept), rounded to the nearest f16, ties to even. */
static inline uint16_t cpu_kv_f16(float x) {
    return ci_f32_to_f16(x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f : x);
}

typedef struct {
    const char *name;
    /* Decode / small batch: weights read in their checkpoint dtype and converted in
     * registers. rows[r] are row indices of W; dot over all W->cols. Returns 0 (out
     * unspecified) when it cannot follow the summation order exactly: the caller then
     * does it with row_f32 + f32_tile. */
    int (*mat_tile)(const ci_mat *W, const int64_t rows[CPU_TILE_R], int T, const float *x, int64_t xs,
                     float *out);
    /* Optional (NULL: mat_tile): one token over rows [r0, r1) of a 16-bit W, row after row, the
     * bits of mat_tile; y[r] for r in [r0, r1). Returns 0 for what it does not take. */
    int (*seq_rows)(const ci_mat *W, int64_t r0, int64_t r1, const float *x, float *y);
    /* Prefill micro-kernel over f32 weight rows w[r][0..kc). */
    void (*f32_tile)(const float *const w[CPU_TILE_R], int64_t kc, int T, const float *x, int64_t xs,
                     float *out);
    /* Optional (NULL: f32_tile per 4 x 4 tile). A whole prefill block: for i < nr, t < T,
     * y[t*ys + i] = part (first) or y[t*ys + i] + part, part = dot(x + t*xs, w[i]) over kc
     * columns, bit for bit f32_tile's (so a set can pick its own register tile). */
    void (*block_tile)(const float *const *w, int nr, int64_t kc, int T, const float *x, int64_t xs, float *y,
                       int64_t ys, int first);
    /* Optional (NULL: none; the AVX2 set): block_tile over bf16 / f16 rows (dt) read in place and
     * widened in registers, block_tile's bits: prefills of few tokens (cpu.c cpu_bt16_n). */
    void (*block_tile16)(int dt, const uint16_t *const *w, int nr, int64_t kc, int T, const float *x, int64_t xs,
                         float *y, int64_t ys, int first);
    /* dst[0..c1-c0) = W[r][c0..c1) as f32 (fp8: times its block scale). */
    void (*row_f32)(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst);

    float (*sumsq)(const float *x, int64_t n);
    /* out = x * s * w (w may be NULL) */
    void (*scale_mul)(float *out, const float *x, const float *w, float s, int64_t n);
    void (*swiglu)(float *g, const float *u, int64_t n);
    void (*add)(float *y, const float *x, int64_t n);

    /* Attention pieces (scores themselves come from f32_tile: query rows x 4 keys).
     * vmax is max_j s[j]; exp_sum sets s[j] = exp(s[j] - m) and returns their sum;
     * attn_wsum adds sum_j p_h[j] * v_j into o_h[0..hd) for nq <= 4 rows h (o_h = o + h*os,
     * p_h = p + h*ps), value rows at v + j*stride. */
    float (*vmax)(const float *s, int L);
    float (*exp_sum)(float *s, int L, float m);
    void (*attn_wsum)(float *o, int64_t os, int nq, const float *p, int64_t ps, const float *v, int64_t stride,
                      int L, int hd);
    /* The same two over an f16 cache (ci_backend.kv_f16): h16_tile is f32_tile with the 4 rows
     * f16, attn_wsum16 attn_wsum with f16 value rows (stride in halves), each value widened
     * exactly in registers: the bits of the f32 kernels on the widened rows. to_f16 stores n
     * floats as the cache's f16 (cpu_kv_f16 of each). */
    void (*h16_tile)(const uint16_t *const w[CPU_TILE_R], int64_t kc, int T, const float *x, int64_t xs, float *out);
    void (*attn_wsum16)(float *o, int64_t os, int nq, const float *p, int64_t ps, const uint16_t *v, int64_t stride,
                        int L, int hd);
    void (*to_f16)(const float *x, int64_t n, uint16_t *h);

    /* Optional (NULL: bf16 weights take mat_tile / row_f32 + f32 tiles like the others): bf16
     * weights dotted with x rounded to bf16 (a second precision, with its own summation
     * order: kernels_avx512.c). x_bf16 rounds n floats once per matmul; bf16_tile is the
     * decode tile over the rounded rows (T <= 4 of row stride xs), bf16_block a prefill
     * block (nr rows, w[i] at the chunk's first column, kc columns; y as block_tile). */
    void (*x_bf16)(const float *x, int64_t n, uint16_t *xb);
    int (*bf16_tile)(const ci_mat *W, const int64_t rows[CPU_TILE_R], int T, const uint16_t *xb, int64_t xs,
                     float *out);
    void (*bf16_block)(const uint16_t *const *w, int nr, int64_t kc, int T, const uint16_t *xb, int64_t xs, float *y,
                       int64_t ys, int first);
    /* Optional (NULL: bf16_tile): seq_rows for the rounded x, the bits of bf16_tile. */
    int (*bf16_seq)(const ci_mat *W, int64_t r0, int64_t r1, const uint16_t *xb, float *y);
    /* Nonzero (the cpu-amx-bf16 set): bf16 W take the AMX tiles of amx_bf16.c instead of bf16_tile /
     * bf16_block, every token count, in that file's summation order (the same precision). */
    int amx;
} cpu_kernels;

extern const cpu_kernels cpu_kernels_scalar;
#if defined(__x86_64__)
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;
extern const cpu_kernels cpu_kernels_avx512bf16;   /* the same, plus the bf16 dot products */
extern const cpu_kernels cpu_kernels_amxbf16;      /* the same, bf16 W on AMX tiles (amx_bf16.c) */
#endif

/* amx_bf16.c. Whether this CPU and kernel let the process use AMX-BF16 tiles (asks the kernel for
 * them once; 0 elsewhere). bf16 W (or, cpu_amx_q_ok, MLX W: amx_mlx.c) times n rows of x:
 * cpu_amx_prep prepares x's tokens [t0, t1) (of n rows of W->cols floats) into cpu_amx_bytes(W, n)
 * bytes, once per matmul (ranges write disjoint bytes: cpu.c runs them across the pool; t0 a
 * multiple of cpu_amx_prep_unit(W, n), t1 one too or n);
 * cpu_amx_rows writes y[t * W->rows + r] for r in [r0, r1) and the tokens [t0, t1) (n <=
 * cpu_amx_rows_form_max(): all n, t0 / t1 ignored; else t0 a multiple of 16), with pack:
 * cpu_amx_pack_bytes() of scratch, 64-byte aligned; t1 - t0 <= CPU_AMX_TOK; tiles 0: MLX W's
 * products of 4 tokens and more on AVX-512 VNNI instead of the AMX-INT8 tiles, the same bits (a
 * CPU without AMX-INT8; bf16 W always on the tiles); pt: MLX W's params as cpu_amx_mlx_ptiles
 * keeps them, or NULL. */
#define CPU_AMX_TOK 512
int cpu_amx_usable(void);
int cpu_amx_int8_usable(void);   /* the same, and the CPU has AMX-INT8 (CPUID; compilers differ in naming it) */
/* amx_mlx.c. Whether W is MLX affine 4- or 8-bit in groups of a multiple of 32 columns dividing
 * the width (f32 / bf16 / f16 params): what a backend with amx_mlx (ci_backend_cpu_amx_mlx) puts
 * on AMX-INT8 tiles and AVX-512 VNNI, codes exact and x rounded to int16 per block. */
int cpu_amx_q_ok(const ci_mat *W);
size_t cpu_amx_bytes(const ci_mat *W, int n);
void cpu_amx_prep(const ci_mat *W, const float *x, int n, int t0, int t1, void *mem, int act8);
int cpu_amx_prep_unit(const ci_mat *W, int n);
void cpu_amx_rows(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const void *xp, float *y, void *pack,
                  int tiles, const uint32_t *pt, int act8);
size_t cpu_amx_pack_bytes(void);
int cpu_amx_rows_form_max(void);
/* amx_mlx.c. MLX W's bf16 scales and biases kept in its kernels' order: per 16 rows of the scale
 * grid (from row 0) and group g, 16 dwords, row i's scale | bias << 16 (the transposes the kernels
 * otherwise make, per token in the one-token kernel: ~11% of a one-token decode's time on the Zen 5;
 * per 32 rows in the tiles' form: ~2% of a prefill's). One array per descriptor (stacked experts
 * share one), held in *tab until cpu_amx_ptab_free: the same bytes again as the scales and biases.
 * cpu_amx_mlx_ptiles returns W's, or NULL where W's params are not bf16 with biases, its grid's
 * size is not known, or free memory (less 256 MiB) is short (the kernels then transpose); *fill: 0,
 * or the rows of a new array, to be filled (cpu_amx_mlx_ptiles_fill, ranges of multiples of 16 rows, disjoint, at once
 * if wanted) before its first use. */
typedef struct cpu_amx_ptab cpu_amx_ptab;
uint32_t *cpu_amx_mlx_ptiles(cpu_amx_ptab **tab, const ci_mat *W, int64_t *fill);
void cpu_amx_mlx_ptiles_fill(const ci_mat *W, uint32_t *t, int64_t r0, int64_t r1);
void cpu_amx_ptab_free(cpu_amx_ptab *tab);

/* MLX-quantized weights (ci_mat dtype CI_U32, see backend.h): the same two inner loops, reading the
 * packed codes and per-group scales directly (quant_kernels_*.c). cpu.c sends a quantized
 * W here instead of to mat_tile / row_f32; the table is picked with the same ISA. */
typedef struct {
    int (*mat_tile)(const ci_mat *W, const int64_t rows[CPU_TILE_R], int T, const float *x, int64_t xs,
                    float *out);
    void (*row_f32)(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst);
    /* 4-bit formats whose codes the ISA unpacks in a split column order (per block of
     * 2*VL columns: the VL even columns, then the VL odd ones: the low and high nibbles of
     * the block's bytes, so no byte interleave is needed). split(W) says whether W is one
     * (NULL: none); its decode tile dots the dequantized weights in that order with x
     * split the same way. The prefill path then packs row_split's output (chunk [c0, c1)
     * of row r, dequantized, in split order) and splits the token rows with x_split (xp:
     * [T, CPU_KC], the rows of x at column c0 with row stride xs), and f32_tile on the
     * two gives the decode tile's bits. */
    int (*split)(const ci_mat *W);
    void (*row_split)(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst);
    void (*x_split)(int64_t c0, int64_t c1, int T, const float *x, int64_t xs, float *xp);
    /* Optional (NULL: none): the decode tile of a split W with the token rows already in
     * split order (xsp: T rows of the whole width, row stride xs, each 2*VL block as
     * x_split writes it), so a matmul splits x once instead of once per tile. Same bits as
     * mat_tile. */
    int (*split_tile)(const ci_mat *W, const int64_t rows[CPU_TILE_R], int T, const float *xsp, int64_t xs,
                      float *out);
} cpu_qkernels;

/* Int16 activations for MLX affine 4- and 8-bit W (opt-in: ci_backend_cpu_int16_act; what it
 * computes is stated in quant_i16_avx512.c). ok(W) says whether W is a format it takes; each
 * token row of x is prepared once per matmul (prep: stride(W) bytes, at a 64-byte-aligned
 * address) and tile dots T <= 4 prepared rows (row stride xs bytes) with 4 rows of W.
 * gemm (prefill) dots the same T <= 4 prepared rows with rows [r0, r1) of W, one row after
 * another, writing y[t * ys + r]: the same bits as tile gives each (row, token). */
typedef struct {
    int (*ok)(const ci_mat *W);
    int64_t (*stride)(const ci_mat *W);
    void (*prep)(const ci_mat *W, const float *x, uint8_t *xq);
    void (*tile)(const ci_mat *W, const int64_t rows[CPU_TILE_R], int T, const uint8_t *xq, int64_t xs, float *out);
    void (*gemm)(const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y, int64_t ys);
    /* one token by rows [r0, r1) into y[r0, r1), the bits of tile's (NULL: tile by tile) */
    void (*rows1)(const ci_mat *W, int64_t r0, int64_t r1, const uint8_t *xq, float *y);
    int gemm_all;   /* gemm takes every token count, decode too (mlx_avx2.c's tables) */
    /* Optional (NULL: none): gemm reading W's bf16 params from cpu_amx_mlx_ptiles' copy pt, the same
     * bits; and the copy's fill (cpu_amx_mlx_ptiles_fill's contract) for this set's CPU */
    void (*gemm_pt)(const ci_mat *W, int64_t r0, int64_t r1, int T, const uint8_t *xq, int64_t xs, float *y, int64_t ys,
                    const uint32_t *pt);
    void (*pt_fill)(const ci_mat *W, uint32_t *t, int64_t r0, int64_t r1);
} cpu_i16kernels;

/* One matmul of cpu_matmul_batch: y[n, W.rows] = x[n, W.cols] · Wᵀ. */
typedef struct {
    float *y;
    const float *x;
    int n;
    const ci_mat *W;
} cpu_mm_job;

/* The jobs' matmuls on a CPU backend, each giving exactly what be->matmul gives alone; those
 * of at most CPU_TILE_T token rows (or int16-activation W) in one pass of the thread pool, so
 * an MoE decode step wakes the pool once for all its experts' gate and up, once for the downs. */
void cpu_matmul_batch(ci_backend *be, const cpu_mm_job *jobs, int count);
/* Whether be's int16-activation kernels take W: its matmuls are row items for any token count
 * (cpu_matmul_batch puts them in its pool pass whatever their n). */
int cpu_i16_takes(ci_backend *be, const ci_mat *W);

extern const cpu_qkernels cpu_qkernels_scalar;
#if defined(__x86_64__)
extern const cpu_qkernels cpu_qkernels_avx2;
extern const cpu_qkernels cpu_qkernels_avx512;
extern const cpu_i16kernels cpu_i16kernels_avx512vnni;   /* AVX-512 with VNNI (vpdpwssd) */
extern const cpu_i16kernels cpu_i16kernels_avx2;         /* AVX2 (vpmaddwd) */
/* mlx_avx2.c: amx_mlx.c's math (ci_backend_cpu_amx_mlx_act) on AVX2 through this interface, x̂ int8
 * for 4-bit W (act 8) or int16 for all W (act 16); ok is cpu_amx_q_ok */
extern const cpu_i16kernels cpu_mlx8kernels_avx2;
extern const cpu_i16kernels cpu_mlxkernels_avx2;
#endif
/* quant_kernels_scalar.c: one weight of a quantized W as f32 (ci_mat_get), the shared
 * tables (E2M1 values, SIMD unpack controls; built by cpu_init_tables), and matmul_xw for
 * quantized or stored-transposed W (falls through to cpu_matmul_xw otherwise). */
float cpu_qmat_get(const ci_mat *W, int64_t r, int64_t c);
void cpu_q_init_tables(void);
void cpu_matmul_xw_any(ci_backend *be, float *y, const float *x, int n, const ci_mat *W);

/* Shared by all kernel sets: the 256-entry E4M3 table and the block scale of W at
 * (row block rb, column block cb) as f32. */
extern float cpu_fp8_lut[256];
void cpu_init_tables(void);
float cpu_block_scale(const ci_mat *W, int64_t rb, int64_t cb);
/* matmul_xw.c: y[n, W.cols] = x[n, W.rows] · W, CPU_XW_CHUNK columns of W's rows at a time
 * converted on the stack; cpu_matmul_xw_by takes the conversion of columns c0 .. c1 - 1 of
 * row r into dst (cpu_matmul_xw_any's quantized rows) */
enum { CPU_XW_CHUNK = 1024 };
typedef void (*cpu_xw_row)(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst);
void cpu_matmul_xw_by(float *y, const float *x, int n, const ci_mat *W, cpu_xw_row row_of);
void cpu_matmul_xw(ci_backend *be, float *y, const float *x, int n, const ci_mat *W);
/* moe_cpu.c: the MoE ops. cpu_moe_experts_run keeps its scratch at *tmp_slot (grown on
 * demand, freed with cpu_moe_tmp_free); -1 when it cannot allocate. */
void cpu_moe_route(ci_backend *be, int32_t *sel, float *w, const float *logits, const int32_t *ids, int n,
                   const ci_moe *m);
int cpu_moe_experts_run(ci_backend *be, void **tmp_slot, float *out, const float *x, int n, const int32_t *sel,
                        const float *w, const ci_moe *m, int acc);
void cpu_moe_tmp_free(void *tmp);
/* mla_cpu.c: the MLA / DSA ops (backend.h). Their scratch hangs at cpu_mla_slot(be) (freed
 * with cpu_mla_tmp_free); cpu_fail makes the backend's status sticky with msg, cpu_failed
 * reads it (cpu.c). */
void cpu_rmsnorm_strided(ci_backend *be, float *out, const float *x, const float *w, int n, int dim, int stride,
                         float eps);
void cpu_layernorm(ci_backend *be, float *out, const float *x, const float *w, const float *b, int n, int dim,
                   double eps);
void cpu_head_norm_rope(ci_backend *be, float *x, int n, int n_heads, int head_dim, const float *w, float eps,
                        int rot_offset, int rot_dim, const int32_t *pos, const float *inv_freq, float mscale,
                        ci_rope_style style);
void cpu_mla_rope(ci_backend *be, float *lat, float *q, const float *kv_norm, float eps, int n, int n_heads, int nope,
                  int rope, int kv_lora, const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style);
void cpu_mla_absorb_q(ci_backend *be, float *qcat, const float *q, int n, int n_heads, int nope, int rope, int kv_lora,
                      const ci_mat *w_uk);
void cpu_mla_out_heads(ci_backend *be, float *o, const float *olat, int n, int n_heads, int kv_lora, int lat, int v,
                       const ci_mat *w_uv);
void cpu_kv_store_paged(ci_backend *be, float *cache, float *const *tab, int tab_step, int stride, const float *src,
                        int width, int n, const int32_t *pos, const ci_pages *pages);
void cpu_mla_attend(ci_backend *be, float *out, const float *qcat, const float *cache, float *const *tab, int tab_step,
                    int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale, const ci_pages *pages);
void cpu_dsa_attend(ci_backend *be, float *out, const float *qcat, const float *lat_cache, const float *key_cache,
                    float *const *tab, int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale,
                    const float *iq, const float *iw, float w_scale, int ih, int id, int topk, const ci_pages *pages);
/* cpu.c's attention core (attention_pos) over a cache that may be paged: query row t's keys
 * at rows ci_page_row(pg, pg_row + t, j) (pg NULL: rows j). */
void cpu_attention_paged(ci_backend *be, float *out, const float *q, const float *k, const float *v, int n,
                         const int32_t *pos, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                         const ci_pages *pg, int pg_row);
void cpu_mla_tmp_free(void *tmp);
void **cpu_mla_slot(ci_backend *be);
void cpu_fail(ci_backend *be, const char *msg);
int cpu_failed(ci_backend *be);

/* conv_cpu.c: LFM2's short-convolution ops (backend.h shortconv, add_bias). */
void cpu_shortconv(ci_backend *be, float *y, float *bcx, int n, int dim, int K, const float *taps,
                   const float *in_bias, const float *conv_bias, float *state, float *const *states, float *scratch);
void cpu_add_bias(ci_backend *be, float *y, const float *bias, int n, int width);

/* mamba_cpu.c: the Mamba2 ops (backend.h mamba_conv, ssd_scan, gated_rmsnorm, relu2). */
void cpu_mamba_conv(ci_backend *be, float *xbc, const float *in, int in_stride, int n, int dim, int K,
                    const float *taps, const float *bias, float *state, float *const *states);
void cpu_ssd_scan(ci_backend *be, float *y, const float *xbc, int xbc_stride, const float *dt, int dt_stride, int n,
                  const ci_ssd *s, float *state, float *const *states, int chunked, float *scratch);
void cpu_gated_rmsnorm(ci_backend *be, float *y, const float *z, int z_stride, const float *w, int n, int dim,
                       int group, float eps);
void cpu_relu2(ci_backend *be, float *g, int64_t count);
/* deltanet_cpu.c: the gated-DeltaNet ops and gated attention's output gate (backend.h). */
void cpu_causal_conv(ci_backend *be, float *y, const float *x, int n, int dim, int K, const float *taps, float *state,
                     float *const *states, int tab_step, float *scratch);
void cpu_deltanet(ci_backend *be, float *z, float *mix, float *b, float *a, int n, const ci_deltanet *L, float *S,
                  float *const *states, int tab_step, int recurrent, float *scratch);
void cpu_deltanet_unfuse(ci_backend *be, float *mix, float *z, float *b, float *a, const float *qkvz, const float *ba,
                         int n, const ci_deltanet *L);
void cpu_split_halves(ci_backend *be, float *lo, float *hi, const float *x, int rows, int width);
void cpu_sigmoid_mul(ci_backend *be, float *y, const float *g, int64_t count);
void cpu_sigmoid_gate_add(ci_backend *be, float *y, const float *x, const float *g, int n, int width);

/* v4_cpu.c: DeepSeek V4's ops (backend.h hc_spread ... matmul_groups). */
void cpu_hc_spread(ci_backend *be, float *X, const float *x, int n, int hc, int dim);
void cpu_hc_pre(ci_backend *be, float *x, float *post, float *comb, float *mix, const float *X, int n, int hc, int dim,
                int iters, float eps, float norm_eps, const float *scale, const float *base);
void cpu_hc_mix_pre(ci_backend *be, float *x, float *post, float *comb, float *mix, const float *X, int n,
                    const ci_mat *fn, int hc, int dim, int iters, float eps, float norm_eps, const float *scale,
                    const float *base);
void cpu_hc_post(ci_backend *be, float *X, const float *y, const float *post, const float *comb, int n, int hc, int dim,
                 float *tmp);
void cpu_v4_compress(ci_backend *be, float *state, float *const *states, int tab_step, const float *kv,
                     const float *gate, int n, const int32_t *pos, const ci_v4cmp *c);
void cpu_v4_index(ci_backend *be, int32_t *sel, int32_t *nsel, const float *iq, const float *iw, const float *state,
                  float *const *states, int tab_step, int n, const int32_t *pos, const ci_v4cmp *c, int ih, int topk,
                  int sel_stride, int max_entries, float *scratch);
void cpu_v4_attend(ci_backend *be, float *out, const float *q, const float *kv, int n, const int32_t *pos, float *ring,
                   int ring_rows, int window, const float *cstate, float *const *tab, int tab_step, const ci_v4cmp *c,
                   const int32_t *sel, const int32_t *nsel, int sel_stride, const float *sinks, int n_heads, int D,
                   int rot_dim, const float *inv_freq, float mscale, float *kbuf, float *sc);
void cpu_matmul_groups(ci_backend *be, float *y, const float *x, int n, int groups, const ci_mat *W, float *xg,
                       float *yg);

/* E8M0 (a bare exponent) as f32 without libm: 0xff is NaN, 0 is 2^-127 (subnormal). */
static inline float cpu_e8m0_value(uint8_t b) {
    union { uint32_t u; float f; } v;
    v.u = b == 0xff ? 0x7fc00000u : b == 0 ? 0x00400000u : (uint32_t)b << 23;
    return v.f;
}

#endif
