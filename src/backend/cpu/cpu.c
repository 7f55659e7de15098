/* cpu.c — the CPU backend: op drivers, work splitting, scratch, ISA selection.
 *
 * Owns one ci_pool and one scratch slot per pool participant. Each op checks nothing the
 * caller has validated (shapes, ids, dtypes are bound at load time), splits its work into
 * items, and runs them through par_for, whose pool tasks are numbered 0..slots-1: task s
 * claims items from a shared counter and uses slot s only, so scratch needs no locks and
 * no per-call allocation. Inner loops come from one cpu_kernels table chosen at creation
 * (scalar, AVX2 or AVX-512).
 *
 * matmul has two shapes of work:
 *  - n <= 4 (decode, tiny batches): items are runs of output rows; each 4-row tile reads
 *    its weights once, in the checkpoint dtype, converts them in registers and dots them
 *    with all n token rows. Weights stream from memory exactly once.
 *  - n > 4 (prefill): items are (ITEM_ROWS rows) x (range of tokens). For each KC-column
 *    chunk, each PACK_ROWS block of the item is converted to f32 into the slot's pack
 *    buffer (32 KiB, stays in L1) and a 4x4 f32 micro-kernel runs over it for every 4
 *    tokens, so each converted weight is reused by every token of the item, and the
 *    tokens' x chunk is reused (from L2) by every block. f32 weights skip the packing.
 *    Measured single-core: ~100 GFLOP/s for bf16/fp8/f32 at n >= 64 on AVX-512, about 57%
 *    of the FMA peak; the micro-kernel alone reaches 90% and the rest is packing and the
 *    4x4 reductions. A kernel set with a block_tile (AVX2) takes the whole packed block and
 *    all the item's tokens in one call instead, with its own register tile.
 * MLX-quantized weights (dtype CI_U32, backend.h) take the same two paths through the
 * cpu_qkernels table of the same ISA: decode tiles read the packed codes directly, prefill
 * dequantizes each PACK_ROWS x KC block into the pack buffer (4-bit formats: a whole
 * item's rows in the split column order of cpu_qkernels.split, with each token tile's x
 * split alike); embed dequantizes one row.
 * Invariant: results depend only on the ISA and the inputs, never on the thread count, the
 * item split or the number of tokens n: every output element is computed by one tile, or
 * one head's pass over the keys, and both matmul paths follow the one summation order of
 * cpu_kernels.h (chunks of KC columns, summed left to right), so a token row gets the same
 * bits decoded alone, batched beside others or prefilled. tests/unit/test_ops.c checks the
 * thread count, tests/unit/test_determinism.c the token count, bit for bit.
 *
 * Subnormals: every op computes with flush-to-zero and denormals-are-zero (src/core/fpmode.h):
 * the pool's workers keep both set, each op sets them on the calling thread for its duration
 * (CI_FP_FLUSH_SCOPE, first line of every op that does arithmetic), so the invariant above
 * holds with them and the caller's floating-point environment is its own between ops.
 * Memory ops (alloc, upload, download, copy, weight) are host memory and memcpy: buffers
 * are the model's to pass to ops, weights are read where the checkpoint lies. The fused
 * ops (matmul_n, matmul_acc, matmul_swiglu, qk_rope_store) call the ops above in the
 * order backend.h gives, and attention_pos is attention with per-row key counts, so the
 * boundary costs the CPU neither bits nor speed (tests/unit/test_backend_ops.c). */
#include "cpu_kernels.h"
#include "../../parallel/comm.h"
#include <stdio.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define ITEM_ROWS 64          /* weight rows per prefill work item */
#define PACK_ROWS 16          /* weight rows converted together (one L1-sized block) */
#define KC CPU_KC             /* columns per prefill chunk: 16 x 512 f32 = 32 KiB */
#define ATTN_BLOCK 128        /* keys per attention block (online softmax across blocks) */
#define ATTN_MAX_HPI 16       /* most query heads one attention item handles */
#define ROPE_CHUNK 256        /* rotation pairs whose cos/sin sit on the stack at once */
#define SMALL_WORK (1 << 15)  /* below this many multiply-adds an op runs on the caller */

typedef struct {
    float *pack;              /* [PACK_ROWS, KC] converted weights (prefill) */
    float *qx;                /* [CPU_TILE_T, KC] a token tile's x in split order, and */
    float *qpack;             /* [ITEM_ROWS, KC] an item's rows unpacked in split order (prefill
                               * of split quantized weights, cpu_qkernels.split) */
    float *scores;            /* [CPU_TILE_T, ATTN_BLOCK] attention probabilities */
} cpu_slot;

/* cos and sin [n][half] of a cpu_rope call, with what made them: its positions, frequencies
 * (kept after the sin rows) and mscale */
typedef struct {
    float *cs, *sn, mscale;
    const float *inv;
    int32_t *pos;
    int n, half;
    size_t cap, pos_cap;      /* floats of cs and of sn; ints of pos */
} rope_table;

typedef struct {
    ci_backend base;          /* first: a ci_backend * is a cpu_backend * */
    const cpu_kernels *k;
    const cpu_qkernels *qk;   /* the same ISA's kernels for MLX-quantized weights */
    const cpu_i16kernels *i16;  /* int16 activations for the formats it takes (opt-in), or NULL */
    int amx_mlx;              /* MLX affine W as amx_mlx.c computes it (opt-in): 1 on the AMX-INT8
                               * tiles, 2 on AVX-512 VNNI alone (the same bits) */
    int amx_act8;             /* amx_mlx with x rounded to int8 for 4-bit W (ci_backend_cpu_amx_mlx_act 8) */
    char name_buf[48];        /* base.name where it is made up (amx_mlx's) */
    int amx_ptiles;           /* amx_mlx: matmuls read W's params from ptab (CINFER_CPU_MLX_PTILES=0:
                               * transposed per token or per 32-row block instead) */
    cpu_amx_ptab *ptab;       /* cpu_amx_mlx_ptiles' copies */
    rope_table rope;          /* cpu_rope's last table */
    int n_slots;              /* == ci_pool_size(base.pool) */
    cpu_slot *slots;          /* [n_slots] */
    void *moe_tmp;            /* moe_experts' scratch (moe_cpu.c) */
    void *mla_tmp;            /* the MLA / DSA ops' scratch (mla_cpu.c) */
    uint8_t *mm_x;            /* [mm_x_cap] bytes, 64-byte aligned: the prepared x of the matmul
                               * (or batch of matmuls) running now (mm_scratch) */
    size_t mm_x_cap;
    int failed;               /* sticky: an op could not allocate its scratch (last_error) */
    int poison;               /* CINFER_CPU_POISON_SCRATCH=1: fused ops' scratch outputs filled with NaN */
} cpu_backend;

static cpu_backend *cpu(ci_backend *be) { return (cpu_backend *)be; }

/* The fused ops' scratch arguments (backend.h: xn, u, tmp, q / k of rope_attend; the recurrent
 * ops' windows and scratch, below ci_backend_cpu_new) hold the CPU's
 * intermediate values afterwards, but a device leaves them unwritten or as they came: a model
 * that reads one after the op is right on the CPU and wrong on the device. With
 * CINFER_CPU_POISON_SCRATCH=1 (read when the backend is made; test_parity runs every fixture
 * so) the CPU fills them with NaN after the op, so such a read fails parity here too. */
static void poison(ci_backend *be, float *p, size_t count) {
    if (!cpu(be)->poison || !p) return;
    for (size_t i = 0; i < count; i++) p[i] = NAN;
}
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- shared tables ------------------------------------------------------------------ */

float cpu_fp8_lut[256];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    for (int i = 0; i < 256; i++) cpu_fp8_lut[i] = ci_fp8_e4m3_to_f32((uint8_t)i);
    cpu_q_init_tables();
}

void cpu_init_tables(void) { pthread_once(&tables_once, init_tables); }

float cpu_block_scale(const ci_mat *W, int64_t rb, int64_t cb) {
    if (!W->scale || W->block <= 0) return 1.0f;
    int64_t i = rb * ceil_div(W->cols, W->block) + cb;
    switch (W->scale_dtype) {
    case CI_F32: return ((const float *)W->scale)[i];
    case CI_BF16: return ci_bf16_to_f32(((const uint16_t *)W->scale)[i]);
    case CI_F8_E8M0: return cpu_e8m0_value(((const uint8_t *)W->scale)[i]);
    default: return NAN;
    }
}

float ci_mat_get(const ci_mat *W, int64_t r, int64_t c) {
    if (!W || !W->data || r < 0 || c < 0 || r >= W->rows || c >= W->cols) return NAN;
    if (W->dtype == CI_U32) return cpu_qmat_get(W, r, c);
    int64_t i = r * W->cols + c;
    switch (W->dtype) {
    case CI_F32: return ((const float *)W->data)[i];
    case CI_BF16: return ci_bf16_to_f32(((const uint16_t *)W->data)[i]);
    case CI_F16: return ci_f16_to_f32(((const uint16_t *)W->data)[i]);
    case CI_F8_E4M3: {
        int64_t bs = W->block > 0 ? W->block : 1;
        return ci_fp8_e4m3_to_f32(((const uint8_t *)W->data)[i]) * cpu_block_scale(W, (W->scale_row0 + r) / bs, c / bs);
    }
    default: return NAN;
    }
}

/* ---- parallel loop over items with a private scratch slot --------------------------- */

typedef void (*item_fn)(void *ctx, int64_t item, cpu_slot *slot);

/* The items are split into one contiguous range a task, each taken in order by its own task
 * first (the rows a thread streams stay one run: its prefetches ahead of an item's end land in
 * its next item, and its next item does not start on lines nobody asked for), then what is left
 * of the others' ranges, from their fronts, so uneven progress still balances. An item's result
 * does not depend on the task that runs it. Against one shared counter (CINFER_CPU_PAR_SHARED=1,
 * for measuring), on the 2-vCPU AMD EPYC Zen 3, two threads, medians of 6-8 alternating runs
 * (bench/ab_cpu.sh, bench/RESULTS.md 2026-12-07): MLX 4-bit `--mlx-amx8` Qwen3-0.6B dims decode
 * +9.5%, prefill +5.7%; Qwen3-30B-A3B dims (4 layers) decode +3.5%, prefill +11%; bf16
 * Qwen3-0.6B prefill +5%, decode level. */
typedef struct {
    _Alignas(64) atomic_llong next;
    int64_t end;
} par_range;
static int par_shared;   /* CINFER_CPU_PAR_SHARED=1, read by ci_backend_cpu_new */

typedef struct {
    item_fn fn;
    void *ctx;
    cpu_slot *slots;
    par_range *r;
    int nr;
} par_ctx;

_Thread_local int cpu_pf_dist = 1024;
_Thread_local int cpu_tile_hot;
int cpu_pf_next_tile;
int cpu_pf_next16;
int cpu_seq16;
static int pf_next16_set;   /* CINFER_CPU_PF_NEXT_TILE given: ci_backend_cpu_tune leaves it */
static int seq16_set;       /* CINFER_CPU_SEQ given: the same for cpu_seq16 */
static int cpu_amd;         /* an AMD CPU: the decode rules are measured (ci_backend_cpu_tune) */
/* 16-bit weights, and 4-bit ones in split order, with at most this many token rows take the
 * decode tiles (CPU_TILE_T tokens a pass over a row tile, its weights from L1 after the first)
 * instead of the prefill's blocks, whose per-chunk conversion (unpacking) of the weights to f32
 * is paid for a few tokens only: the same sums in the same order (the one matmul order of every
 * batch size), so the same bits (`cinfer logits` cmp-identical). Measured on the Zen 5
 * (bench/RESULTS.md, twenty-second session), prefill: Qwen3-0.6B bf16 of 12 / 16 / 32 tokens
 * 1.7-2.1x / 1.5x / 1.1-1.2x on one thread, level at 48, slower at 64; the MLX 4-bit
 * Qwen3-30B-A3B dims (4 layers) of 16 / 32 / 64 tokens 1.35-1.44x / 1.31-1.37x / 1.19-1.25x on
 * one and two threads; its bf16 twin's 128 tokens (experts of ~8 rows) +3-12%. Not fp8: its
 * decode tile (a block scale per element) made a 32-token prefill slower (172 -> 119 tok/s).
 * CINFER_CPU_ROWS_N (4..4096) overrides the cut-off for measuring. */
static int cpu_rows_max_n = 32;
/* 16-bit weights with more than CPU_TILE_T and at most this many token rows, on a set with
 * block_tile16 (AVX2): the prefill's items with each block read in place and widened in registers
 * (mm_prefill_in_place) instead of the decode tiles above (cpu_rows_max_n: AVX2's tile keeps 2
 * tokens x 4 rows, so a row tile's weights are widened again for every 2 tokens) or the packed
 * blocks (one conversion pass and store per weight, for few tokens as dear as the FMAs). The same
 * bits (the one summation order). CINFER_CPU_BT16_N (0..4096) overrides it for measuring; 0: off. */
static int cpu_bt16_n = 48;
/* A one-token int16 decode on a thread that streams alone (cpu_pf_dist 2048: par_for ran it on
 * one thread) reads 8 weight rows a tile (cpu_i16kernels.rows1, the same bits as the 4-row
 * tiles): the loads of x, its scales and the chunk's masks shared by twice the rows, the setup
 * and the next-tile prefetch per 8 rows. On the Zen 5 (bench/RESULTS.md, 2026-12-06), one
 * thread: 4-bit rows of 768 / 1024 / 2048 columns streamed 27 / 30 / 37 -> 36 / 38 / 41 GB/s,
 * the MLX 4-bit Qwen3-0.6B dims decoded 73.5-74.3 -> 85.9-87.4 tok/s and the Qwen3-30B-A3B
 * dims (4 layers) 94-101 -> 113-117; two threads: the MoE 126-130 -> 111-116 (its 1 KiB rows'
 * next tile, 8 KiB ahead in each thread, is too deep when two share the bandwidth), the dense
 * 97-98 -> 99-102, so several threads keep the 4-row tiles. CINFER_CPU_ROWS8=0 keeps them on
 * one thread too, for measuring. */
static int cpu_rows8 = 1;
/* Prefill attention by blocks of 4 query rows (attn_item_qb) when a row's keys span more than one
 * ATTN_BLOCK and a kv head serves fewer than 4 heads: the same bits as row by row. On the Zen 5
 * (bench/RESULTS.md, 2026-12-06), Qwen3-0.6B dims (2 heads a kv head) bf16 `--bf16-act` prefill,
 * one thread: 256 tokens +6-9%, 384 +11-12%, 512 +14-18%; two threads 2048 tokens 260 -> 449
 * tok/s. Not taken: within one key block (128 tokens: its diagonal block's per-row value sums,
 * 0-7% slower), and 4 or more heads a kv head, whose row items already fill the tiles (Qwen3-8B
 * dims 512 / 2048 tokens and DeepSeek-V2-Lite's MLA 512: level to 2% slower). CINFER_CPU_ATTN_QB=0
 * keeps rows everywhere, for measuring. */
static int attn_qb_on = 1;

static void par_task(void *c, int s) {
    par_ctx *pc = c;
    cpu_pf_dist = 1024;   /* several threads share the machine's bandwidth (cpu_kernels.h) */
    for (int k = 0; k < pc->nr; k++) {   /* its own range, then the others' */
        par_range *r = &pc->r[(s + k) % pc->nr];
        for (;;) {
            int64_t i = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
            if (i >= r->end) break;
            pc->fn(pc->ctx, i, &pc->slots[s]);
        }
    }
}

/* Runs fn on items 0..n_items-1, across the pool when `parallel` (false: the work is too
 * small to be worth waking the pool, so the caller does it alone with slot 0). */
static void par_for(cpu_backend *b, int64_t n_items, item_fn fn, void *ctx, int parallel) {
    if (n_items <= 0) return;
    int nt = parallel ? (int)min64(b->n_slots, n_items) : 1;
    if (nt <= 1) {
        cpu_pf_dist = 2048;   /* this thread streams alone */
        for (int64_t i = 0; i < n_items; i++) fn(ctx, i, &b->slots[0]);
        return;
    }
    const int nr = par_shared ? 1 : nt;
    par_range r[nt];
    for (int t = 0; t < nr; t++) {
        atomic_init(&r[t].next, n_items * t / nr);
        r[t].end = n_items * (t + 1) / nr;
    }
    par_ctx pc = { .fn = fn, .ctx = ctx, .slots = b->slots, .r = r, .nr = nr };
    ci_pool_run(b->base.pool, par_task, &pc, nt);
}

/* ---- matmul ---------------------------------------------------------------------- */

typedef struct mm_ctx_s {
    const cpu_kernels *k;
    const cpu_qkernels *qk;
    float *y;
    const float *x;
    int n;
    const ci_mat *W;
    int64_t rows_per_item;    /* decode: multiple of 4 */
    int64_t tok_per_item;     /* prefill: multiple of 4 */
    int64_t n_tok_items;      /* prefill: token ranges per row block */
    int split;                /* W is quantized in a format qk dots in split order */
    /* x prepared once per matmul (mm_prepare), in the backend's scratch (mm_scratch): */
    const float *xsp;         /* split W: x in split order, row stride cols (decode: for
                               * qk->split_tile; prefill: instead of per-item x_split), or NULL */
    const uint16_t *xb;       /* bf16 W on a set with bf16 dot products: x rounded to bf16
                               * (row stride cols), or NULL */
    int amx;                  /* bf16 W on the cpu-amx-bf16 set, or MLX W with amx_mlx: x prepared
                               * into xa (cpu_amx_prep); 2: MLX W whose tokens form runs on AVX-512
                               * VNNI instead of the tiles (amx_mlx 2) */
    const void *xa;
    const uint32_t *pt;       /* amx, or i16 with gemm_pt: MLX W's params in 16-row tiles (cpu_amx_mlx_ptiles), or NULL */
    int act8;                 /* amx, MLX W: x rounded to int8 (cpu_backend.amx_act8) */
    const cpu_i16kernels *i16;  /* W taken by the int16-activation kernels: x prepared in xi16 */
    const uint8_t *xi16;       /* n prepared token rows, row stride xi16s bytes */
    const struct mm_ctx_s *xi16_donor;   /* an earlier job of a batch whose xi16 this one reads
                               * (same x, same layout), or NULL */
    int64_t xi16s;
} mm_ctx;

/* Rows r..r+3 of a tile, repeating the last valid row (its results are dropped). */
static void tile_rows(int64_t rr[CPU_TILE_R], int64_t r, int64_t r_end) {
    for (int i = 0; i < CPU_TILE_R; i++) rr[i] = min64(r + i, r_end - 1);
}

/* A decode tile the prefill way (what mat_tile declined): each chunk converted to f32 in
 * the slot's pack buffer, one f32_tile, chunk sums added: the summation order itself. */
static void tile_by_chunks(const mm_ctx *m, const int64_t rr[CPU_TILE_R], int T, const float *x, cpu_slot *slot,
                           float *out) {
    const ci_mat *W = m->W;
    const int64_t cols = W->cols;
    const float *w[CPU_TILE_R];
    float part[CPU_TILE_T * CPU_TILE_R];
    for (int64_t c0 = 0; c0 < cols; c0 += KC) {
        int64_t kc = min64(KC, cols - c0);
        for (int i = 0; i < CPU_TILE_R; i++) {
            if (W->dtype == CI_F32) {
                w[i] = (const float *)W->data + rr[i] * cols + c0;
                continue;
            }
            if (W->dtype == CI_U32) m->qk->row_f32(W, rr[i], c0, c0 + kc, slot->pack + i * KC);
            else m->k->row_f32(W, rr[i], c0, c0 + kc, slot->pack + i * KC);
            w[i] = slot->pack + i * KC;
        }
        m->k->f32_tile(w, kc, T, x + c0, cols, part);
        for (int i = 0; i < T * CPU_TILE_R; i++) out[i] = c0 == 0 ? part[i] : out[i] + part[i];
    }
}

static void mm_decode_item(void *c, int64_t it, cpu_slot *slot) {
    mm_ctx *m = c;
    int64_t rows = m->W->rows, cols = m->W->cols;
    int64_t r0 = it * m->rows_per_item, r1 = min64(r0 + m->rows_per_item, rows);
    if (m->n == 1 && !m->xsp && (m->W->dtype == CI_BF16 || m->W->dtype == CI_F16) && cols * 2 <= cpu_seq16 &&
        (m->xb ? m->k->bf16_seq && m->k->bf16_seq(m->W, r0, r1, m->xb, m->y)
               : m->k->seq_rows && m->k->seq_rows(m->W, r0, r1, m->x, m->y)))
        return;   /* short rows, one token: row after row (cpu_seq16) */
    float out[CPU_TILE_T * CPU_TILE_R];
    for (int64_t r = r0; r < r1; r += CPU_TILE_R) {
        int64_t rr[CPU_TILE_R], nr = min64(CPU_TILE_R, r1 - r);
        tile_rows(rr, r, r1);
        /* token tiles of CPU_TILE_T (more than one only for cpu_rows_max_n's few-row
         * prefills): the rows' weights come from memory for the first, from L1 after */
        for (int t0 = 0; t0 < m->n; t0 += CPU_TILE_T) {
            const int T = m->n - t0 < CPU_TILE_T ? m->n - t0 : CPU_TILE_T;
            const int64_t xo = (int64_t)t0 * cols;
            cpu_tile_hot = t0 > 0;   /* the rows' weights are in L1 after the first token tile */
            int ok = m->xb ? m->k->bf16_tile(m->W, rr, T, m->xb + xo, cols, out)
                   : m->xsp ? m->qk->split_tile(m->W, rr, T, m->xsp + xo, cols, out)
                   : m->W->dtype == CI_U32 ? m->qk->mat_tile(m->W, rr, T, m->x + xo, cols, out)
                                           : m->k->mat_tile(m->W, rr, T, m->x + xo, cols, out);
            cpu_tile_hot = 0;
            if (!ok) tile_by_chunks(m, rr, T, m->x + xo, slot, out);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < nr; i++) m->y[(t0 + t) * rows + r + i] = out[t * CPU_TILE_R + i];
        }
    }
}

/* Int16 activations (m->i16): every token count alike, so a token's bits do not depend on its
 * batch. An item is a range of rows. A set with gemm_all (mlx_avx2.c) runs gemm alone, as
 * prefill below. Decode (n <= CPU_TILE_T, or a set without gemm): each
 * 4-row tile runs over all token rows, 4 at a time, its codes read from memory once and from
 * L1 for the later token groups. Prefill (gemm): the item's rows in blocks of I16_BLOCK_BYTES
 * of codes (they stay in L2), each block run by gemm for every group of 4 token rows (whose
 * prepared x stays in L1); gemm gives the bits tile gives. */
#define I16_BLOCK_BYTES (128 << 10)
static void mm_i16_item(void *c, int64_t it, cpu_slot *slot) {
    (void)slot;
    mm_ctx *m = c;
    int64_t rows = m->W->rows;
    int64_t r0 = it * m->rows_per_item, r1 = min64(r0 + m->rows_per_item, rows);
    if ((m->n > CPU_TILE_T || m->i16->gemm_all) && m->i16->gemm) {
        const int64_t rbytes = m->W->cols * ((const ci_qdesc *)m->W->scale)->bits / 8;
        const int64_t per = I16_BLOCK_BYTES / rbytes / CPU_TILE_R * CPU_TILE_R;   /* whole 4-row tiles */
        const int64_t blk = per > CPU_TILE_R ? per : CPU_TILE_R;
        for (int64_t b0 = r0; b0 < r1; b0 += blk)
            for (int t0 = 0; t0 < m->n; t0 += CPU_TILE_T) {
                int T = m->n - t0 < CPU_TILE_T ? m->n - t0 : CPU_TILE_T;
                if (m->pt) m->i16->gemm_pt(m->W, b0, min64(b0 + blk, r1), T, m->xi16 + t0 * m->xi16s, m->xi16s,
                                           m->y + (int64_t)t0 * rows, rows, m->pt);
                else m->i16->gemm(m->W, b0, min64(b0 + blk, r1), T, m->xi16 + t0 * m->xi16s, m->xi16s,
                                  m->y + (int64_t)t0 * rows, rows);
            }
        return;
    }
    if (m->n == 1 && m->i16->rows1 && cpu_rows8 && cpu_pf_dist == 2048) {   /* one token, one thread: 8 rows a tile */
        m->i16->rows1(m->W, r0, r1, m->xi16, m->y);
        return;
    }
    float out[CPU_TILE_T * CPU_TILE_R];
    for (int64_t r = r0; r < r1; r += CPU_TILE_R) {
        int64_t rr[CPU_TILE_R], nr = min64(CPU_TILE_R, r1 - r);
        tile_rows(rr, r, r1);
        for (int t0 = 0; t0 < m->n; t0 += CPU_TILE_T) {
            int T = m->n - t0 < CPU_TILE_T ? m->n - t0 : CPU_TILE_T;
            m->i16->tile(m->W, rr, T, m->xi16 + t0 * m->xi16s, m->xi16s, out);
            for (int t = 0; t < T; t++)
                for (int i = 0; i < nr; i++) m->y[(t0 + t) * rows + r + i] = out[t * CPU_TILE_R + i];
        }
    }
}

/* Prefetch (into L2) W's rows [r0, r1) over columns [c0, c1): the block a prefill item
 * packs next, asked for while the current one is multiplied. Without it the packing waits
 * on DRAM one row stream at a time (measured on a Zen 5 EPYC: ~20% of a bf16 prefill). For
 * dtypes stored row-major at their element size (not MLX codes). */
static void prefetch_block(const ci_mat *W, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    if (W->dtype == CI_U32) return;
    size_t es = ci_dtype_size(W->dtype), len = (size_t)(c1 - c0) * es;
    for (int64_t r = r0; r < r1; r++) {
        const char *p = (const char *)W->data + ((size_t)r * (size_t)W->cols + (size_t)c0) * es;
        for (size_t off = 0; off < len; off += 64) __builtin_prefetch(p + off, 0, 2);
    }
}

/* What a prefill item over rows [R0, R1) works on after the block of rows [r0, r1) at
 * chunk c0 (kc columns): the next row block of the chunk, else the first of the next chunk. */
static void prefetch_next_block(const ci_mat *W, int64_t R0, int64_t R1, int64_t r1, int64_t c0, int64_t kc) {
    if (r1 < R1) prefetch_block(W, r1, min64(r1 + PACK_ROWS, R1), c0, c0 + kc);
    else if (c0 + KC < W->cols) prefetch_block(W, R0, min64(R0 + PACK_ROWS, R1), c0 + KC, min64(c0 + 2 * KC, W->cols));
}

/* whether a matmul takes block_tile16 in mm_prefill_in_place (cpu_bt16_n) */
static int mm_bt16(const mm_ctx *m) {
    return m->k->block_tile16 && !m->xb && !m->i16 && !m->amx && !m->split && m->n <= cpu_bt16_n &&
           (m->W->dtype == CI_BF16 || m->W->dtype == CI_F16);
}

/* Prefill of 16-bit W with the item's rows read in place, one call per chunk and PACK_ROWS block,
 * the next block prefetched as mm_prefill_item does: bf16 dot products over x rounded to bf16
 * (m->xb: the set's bf16_block), or a few-token prefill of bf16 / f16 W (mm_bt16: block_tile16,
 * the weights widened in registers). */
static void mm_prefill_in_place(mm_ctx *m, int64_t R0, int64_t R1, int64_t t0, int64_t t1) {
    const ci_mat *W = m->W;
    int64_t rows = W->rows, cols = W->cols;
    const uint16_t *w[PACK_ROWS];
    for (int64_t c0 = 0; c0 < cols; c0 += KC) {
        int64_t kc = min64(KC, cols - c0);
        for (int64_t r0 = R0; r0 < R1; r0 += PACK_ROWS) {
            int64_t r1 = min64(r0 + PACK_ROWS, R1);
            for (int64_t r = r0; r < r1; r++) w[r - r0] = (const uint16_t *)W->data + r * cols + c0;
            prefetch_next_block(W, R0, R1, r1, c0, kc);
            float *y = m->y + t0 * rows + r0;
            if (m->xb)
                m->k->bf16_block(w, (int)(r1 - r0), kc, (int)(t1 - t0), m->xb + t0 * cols + c0, cols, y, rows, c0 == 0);
            else
                m->k->block_tile16(W->dtype, w, (int)(r1 - r0), kc, (int)(t1 - t0), m->x + t0 * cols + c0, cols, y,
                                   rows, c0 == 0);
        }
    }
}

static void mm_prefill_item(void *c, int64_t it, cpu_slot *slot) {
    mm_ctx *m = c;
    const ci_mat *W = m->W;
    int64_t rows = W->rows, cols = W->cols;
    int64_t rb = it / m->n_tok_items, tb = it % m->n_tok_items;
    int64_t R0 = rb * ITEM_ROWS, R1 = min64(R0 + ITEM_ROWS, rows);
    int64_t t0 = tb * m->tok_per_item, t1 = min64(t0 + m->tok_per_item, m->n);
    if (m->xb || mm_bt16(m)) {
        mm_prefill_in_place(m, R0, R1, t0, t1);
        return;
    }
    const float *w[PACK_ROWS];
    float out[CPU_TILE_T * CPU_TILE_R];
    /* Chunk loop outermost: the item's x chunk (tokens x KC) comes from memory once and
     * stays in L2 for the following row blocks of the item. */
    for (int64_t c0 = 0; c0 < cols; c0 += KC) {
        int64_t kc = min64(KC, cols - c0);
        for (int64_t r0 = R0; r0 < R1; r0 += PACK_ROWS) {
            int64_t r1 = min64(r0 + PACK_ROWS, R1);
            for (int i = 0; i < PACK_ROWS; i++) {
                int64_t r = min64(r0 + i, r1 - 1);
                if (W->dtype == CI_F32) {
                    w[i] = (const float *)W->data + r * cols + c0;
                } else {
                    if (r0 + i < r1 && W->dtype == CI_U32) m->qk->row_f32(W, r, c0, c0 + kc, slot->pack + i * KC);
                    else if (r0 + i < r1) m->k->row_f32(W, r, c0, c0 + kc, slot->pack + i * KC);
                    w[i] = slot->pack + (r - r0) * KC;
                }
            }
            prefetch_next_block(W, R0, R1, r1, c0, kc);
            if (m->k->block_tile) { /* the set's own register tile over the whole block */
                m->k->block_tile(w, (int)(r1 - r0), kc, (int)(t1 - t0), m->x + t0 * cols + c0, cols, m->y + t0 * rows + r0,
                                 rows, c0 == 0);
                continue;
            }
            for (int64_t t = t0; t < t1; t += CPU_TILE_T) {
                int T = (int)min64(CPU_TILE_T, t1 - t);
                for (int64_t g = r0; g < r1; g += CPU_TILE_R) {
                    int nr = (int)min64(CPU_TILE_R, r1 - g);
                    m->k->f32_tile(w + (g - r0), kc, T, m->x + t * cols + c0, cols, out);
                    for (int tt = 0; tt < T; tt++) {
                        float *yp = m->y + (t + tt) * rows + g;
                        for (int i = 0; i < nr; i++)
                            yp[i] = c0 == 0 ? out[tt * CPU_TILE_R + i] : yp[i] + out[tt * CPU_TILE_R + i];
                    }
                }
            }
        }
    }
}

/* Prefill of 4-bit weights in split column order (cpu_qkernels.split): the same item, but
 * all ITEM_ROWS rows of a chunk are unpacked at once (slot->qpack, 128 KiB: read from L2 by
 * the micro-kernel) so that each token tile's x is split once per chunk, not once per
 * PACK_ROWS block. Each output is still one f32_tile per chunk, summed left to right. */
static void mm_prefill_split_item(void *c, int64_t it, cpu_slot *slot) {
    mm_ctx *m = c;
    const ci_mat *W = m->W;
    int64_t rows = W->rows, cols = W->cols;
    int64_t rb = it / m->n_tok_items, tb = it % m->n_tok_items;
    int64_t R0 = rb * ITEM_ROWS, R1 = min64(R0 + ITEM_ROWS, rows);
    int64_t t0 = tb * m->tok_per_item, t1 = min64(t0 + m->tok_per_item, m->n);
    const float *w[ITEM_ROWS];
    float out[CPU_TILE_T * CPU_TILE_R];
    for (int64_t c0 = 0; c0 < cols; c0 += KC) {
        int64_t kc = min64(KC, cols - c0);
        for (int64_t r = R0; r < R1; r++) m->qk->row_split(W, r, c0, c0 + kc, slot->qpack + (r - R0) * KC);
        for (int64_t t = t0; t < t1; t += CPU_TILE_T) {
            int T = (int)min64(CPU_TILE_T, t1 - t);
            /* x in split order: split once by cpu_matmul (m->xsp), else here per token tile */
            const float *xq = slot->qx;
            int64_t xqs = KC;
            if (m->xsp) {
                xq = m->xsp + t * cols + c0;
                xqs = cols;
            } else {
                m->qk->x_split(c0, c0 + kc, T, m->x + t * cols + c0, cols, slot->qx);
            }
            if (m->k->block_tile) {
                for (int64_t r = R0; r < R1; r++) w[r - R0] = slot->qpack + (r - R0) * KC;
                m->k->block_tile(w, (int)(R1 - R0), kc, T, xq, xqs, m->y + t * rows + R0, rows, c0 == 0);
                continue;
            }
            for (int64_t g = R0; g < R1; g += CPU_TILE_R) {
                int nr = (int)min64(CPU_TILE_R, R1 - g);
                for (int i = 0; i < CPU_TILE_R; i++) w[i] = slot->qpack + (min64(g + i, R1 - 1) - R0) * KC;
                m->k->f32_tile(w, kc, T, xq, xqs, out);
                for (int tt = 0; tt < T; tt++) {
                    float *yp = m->y + (t + tt) * rows + g;
                    for (int i = 0; i < nr; i++)
                        yp[i] = c0 == 0 ? out[tt * CPU_TILE_R + i] : yp[i] + out[tt * CPU_TILE_R + i];
                }
            }
        }
    }
}

/* Rows of a row item: ~8 items per thread balances uneven progress; rows stay contiguous
 * per item. */
static int64_t mm_rows_per_item(const cpu_backend *b, const ci_mat *W, int n) {
    const int64_t rows = W->rows, work = rows * W->cols * n;
    int64_t per = work < SMALL_WORK ? rows : ceil_div(rows, (int64_t)b->n_slots * 8);
    return ceil_div(per < CPU_TILE_R ? CPU_TILE_R : per, CPU_TILE_R) * CPU_TILE_R;
}

/* Whether two int16-activation W prepare x alike (the preparation depends on the width,
 * the bits and the group). */
static int same_i16_prep(const ci_mat *A, const ci_mat *B) {
    const ci_qdesc *a = A->scale, *b = B->scale;
    return A->cols == B->cols && a->bits == b->bits && a->group == b->group;
}

/* The matmuls' prepared x (int16 rows, split order, bf16) lives in one buffer of the backend, grown
 * when a matmul or a batch needs more than it holds and kept until the backend is freed: a
 * decode step asks for the same sizes every step, so after the first it allocates nothing
 * (DESIGN.md). One user at a time, without a lock: ops run one at a time on a backend (its
 * pool is not re-entrant; the server's scheduler thread alone drives the model), the pool's
 * tasks only read the buffer, and its user is one cpu_matmul or one pool pass of
 * cpu_matmul_batch (whose lone matmuls run before the pass takes the buffer). A 64-byte
 * aligned pointer to at least `bytes`, or NULL after cpu_fail. */
static uint8_t *mm_scratch(cpu_backend *b, size_t bytes) {
    if (bytes <= b->mm_x_cap) return b->mm_x;
    const size_t cap = (bytes + 63) & ~(size_t)63;
    uint8_t *p = aligned_alloc(64, cap);
    if (!p) {
        cpu_fail(&b->base, "matmul: out of memory for the prepared activations");
        return NULL;
    }
    free(b->mm_x);
    b->mm_x = p;
    b->mm_x_cap = cap;
    return p;
}

/* Whether m's x goes into split order once (split W: the same floats per KC chunk as x_split
 * gives a token tile), not once per 4-row decode tile or per prefill item (an MoE expert's
 * prefill has ~12-32 row items over the same few tokens); whether it is rounded to bf16 once
 * (bf16 W on a set with bf16 dot products). Never both: split W are quantized. */
static int mm_wants_xsp(const cpu_backend *b, const mm_ctx *m) {
    return m->split && (m->n > CPU_TILE_T || b->qk->split_tile);
}
static int mm_wants_xb(const cpu_backend *b, const mm_ctx *m) {
    return m->W->dtype == CI_BF16 && b->k->bf16_block;
}

/* W's params in amx_mlx.c's 16-row tiles (cpu_amx_mlx_ptiles), a new array filled across the pool. */
typedef struct {
    const ci_mat *W;
    uint32_t *t;
    int64_t rows;
    void (*fill)(const ci_mat *W, uint32_t *t, int64_t r0, int64_t r1);
} ptiles_ctx;

#define PTILE_ROWS 256   /* grid rows a fill item */
static void ptiles_item(void *c, int64_t it, cpu_slot *slot) {
    (void)slot;
    const ptiles_ctx *p = c;
    p->fill(p->W, p->t, it * PTILE_ROWS, min64((it + 1) * PTILE_ROWS, p->rows));
}

static const uint32_t *ptiles(cpu_backend *b, const ci_mat *W) {
    int64_t fill;
    uint32_t *t = cpu_amx_mlx_ptiles(&b->ptab, W, &fill);
    if (t && fill) {
        /* the int16-kernel table's own fill where it has one (mlx_avx2.c: no AVX-512 there) */
        ptiles_ctx p = { W, t, fill, b->i16 && b->i16->pt_fill ? b->i16->pt_fill : cpu_amx_mlx_ptiles_fill };
        par_for(b, ceil_div(fill, PTILE_ROWS), ptiles_item, &p, 1);
    }
    return t;
}

/* Picks the path W takes (int16 activations, AMX tiles, split order, bf16), sets rows_per_item (for a
 * row-item matmul: int16 activations or n <= CPU_TILE_T) and returns the bytes of scratch
 * mm_prepare fills with x prepared for that path: 0 when it needs none, or when m reads
 * donor's int16 rows (donor: an earlier job of a batch with the same x and n and a W that
 * same_i16_prep; or NULL). */
static size_t mm_plan(cpu_backend *b, mm_ctx *m, const mm_ctx *donor) {
    const ci_mat *W = m->W;
    const size_t xn = (size_t)m->n * (size_t)W->cols;
    m->rows_per_item = mm_rows_per_item(b, W, m->n);
    if (b->i16 && b->i16->ok(W)) {
        m->i16 = b->i16;
        m->xi16_donor = donor;
        m->xi16s = donor ? donor->xi16s : b->i16->stride(W);
        if (b->i16->gemm_all) m->rows_per_item = (m->rows_per_item + 7) / 8 * 8;   /* mlx_avx2.c: octets */
        if (b->i16->gemm_pt && b->amx_ptiles) m->pt = ptiles(b, W);
        return donor ? 0 : (size_t)m->n * (size_t)m->xi16s;
    }
    if ((b->k->amx && W->dtype == CI_BF16) || (b->amx_mlx && cpu_amx_q_ok(W))) {   /* AMX rows of 16: whole tiles */
        m->amx = W->dtype == CI_BF16 || b->amx_mlx == 1 ? 1 : 2;
        /* int8 x for 4-bit W only: 8-bit matrices (MLX's routers and the layers a mixed recipe
         * keeps finer) keep int16 */
        m->act8 = W->dtype == CI_U32 && b->amx_act8 && ((const ci_qdesc *)W->scale)->bits < 8;
        m->rows_per_item = (m->rows_per_item + 15) / 16 * 16;
        if (W->dtype == CI_U32 && b->amx_ptiles) m->pt = ptiles(b, W);
        return cpu_amx_bytes(W, m->n);
    }
    m->split = W->dtype == CI_U32 && b->qk->split && b->qk->split(W);
    return mm_wants_xsp(b, m) ? xn * sizeof(float) : mm_wants_xb(b, m) ? xn * sizeof(uint16_t) : 0;
}

/* Converts x once for the path mm_plan picked, into mem (the bytes mm_plan asked for; a
 * donor's job already made the int16 rows m reads; done: mm_prep_rows already wrote m's
 * int16 or AMX rows there). */
static void mm_prepare(cpu_backend *b, mm_ctx *m, uint8_t *mem, int done) {
    const ci_mat *W = m->W;
    const int n = m->n;
    if (m->i16) {
        if (m->xi16_donor) {
            m->xi16 = m->xi16_donor->xi16;
            return;
        }
        if (!done)
            for (int t = 0; t < n; t++) b->i16->prep(W, m->x + (int64_t)t * W->cols, mem + t * m->xi16s);
        m->xi16 = mem;
    } else if (m->amx) {
        if (!done) cpu_amx_prep(W, m->x, n, 0, n, mem, m->act8);
        m->xa = mem;
    } else if (mm_wants_xsp(b, m)) {
        float *xsp = (float *)mem;
        for (int t = 0; t < n; t++)
            for (int64_t c0 = 0; c0 < W->cols; c0 += KC)
                b->qk->x_split(c0, min64(c0 + KC, W->cols), 1, m->x + t * W->cols + c0, W->cols, xsp + t * W->cols + c0);
        m->xsp = xsp;
    } else if (mm_wants_xb(b, m)) {
        uint16_t *xb = (uint16_t *)mem;
        b->k->x_bf16(m->x, (int64_t)n * W->cols, xb);
        m->xb = xb;
    }
}

/* The x rows of several jobs (a batch's, or one prefill's) that take int16 activations or an AMX
 * set, prepared across the pool, a token row an item (16 for amx_mlx.c's tiles: a token an item
 * wrote 4 bytes of every 64-byte line, two threads' tokens sharing all of them; on the 2-vCPU Zen 5,
 * 2026-12-06, the preparation was then 14% of a 128-token --mlx-amx prefill's samples on two
 * threads against 4.7% on one), when there are enough of them to pay for the
 * pass (PREP_PAR_ELEMS columns in all): in an MoE prefill on one thread the int16 preparation of
 * the experts' x was ~5% of the time (Sapphire Rapids VM, 2026-12-05), and the AMX one ~10% of an
 * MLX prefill with --mlx-amx, the whole of it at 16 threads (2026-12-06), left on the caller alone
 * while the pool waited. Each row is what mm_prepare writes (cpu_amx_prep's token ranges write
 * disjoint bytes). Returns whether it ran (then mm_prepare(..., 1) only sets the pointers). */
#define PREP_PAR_ELEMS (1 << 17)
typedef struct {
    const cpu_backend *b;
    const mm_ctx *m;
    uint8_t *mem;
    const size_t *at;
    const int64_t *first;   /* [count + 1]: job j's rows are items first[j] .. first[j + 1] - 1 */
    int count;
} prep_ctx;

static void prep_item(void *c, int64_t it, cpu_slot *slot) {
    (void)slot;
    const prep_ctx *p = c;
    int j = 0;
    while (it >= p->first[j + 1]) j++;
    const mm_ctx *m = &p->m[j];
    const int64_t t = it - p->first[j];
    if (m->i16) p->b->i16->prep(m->W, m->x + t * m->W->cols, p->mem + p->at[j] + t * m->xi16s);
    else {   /* an item of u tokens (16 in amx_mlx.c's tiles layout: whole lines of it) */
        const int u = cpu_amx_prep_unit(m->W, m->n), t0 = (int)t * u;
        cpu_amx_prep(m->W, m->x, m->n, t0, t0 + u < m->n ? t0 + u : m->n, p->mem + p->at[j], m->act8);
    }
}

static int mm_prep_rows(cpu_backend *b, const mm_ctx *m, int count, uint8_t *mem, const size_t *at) {
    enum { MAXP = 129 };
    int64_t first[MAXP + 1], elems = 0;
    if (b->n_slots < 2 || count > MAXP) return 0;
    first[0] = 0;
    for (int j = 0; j < count; j++) {
        const int rows = (m[j].i16 && !m[j].xi16_donor) || m[j].amx ? m[j].n : 0;
        first[j + 1] = first[j] + (m[j].amx ? ceil_div(rows, cpu_amx_prep_unit(m[j].W, m[j].n)) : rows);
        elems += (int64_t)rows * m[j].W->cols;
    }
    if (elems < PREP_PAR_ELEMS) return 0;
    prep_ctx p = { .b = b, .m = m, .mem = mem, .at = at, .first = first, .count = count };
    par_for(b, first[count], prep_item, &p, 1);
    return 1;
}

/* Whether a prepared matmul runs as row items (mm_rows_item): decode tiles or int16
 * activations; else it is a prefill. */
static int mm_by_rows(const mm_ctx *m) {
    if (m->amx) return m->n <= cpu_amx_rows_form_max();
    if (m->n > CPU_TILE_T && mm_bt16(m)) return 0;
    return m->i16 || m->n <= CPU_TILE_T ||
           (m->n <= cpu_rows_max_n && !m->xb &&
            ((m->split && m->qk->split_tile) || m->W->dtype == CI_BF16 || m->W->dtype == CI_F16));
}

/* bf16 W on AMX tiles (amx_bf16.c): row items (rows_per_item rows, all tokens), or in the tokens
 * form (n > cpu_amx_rows_form_max()) items of ITEM_ROWS rows by CPU_AMX_TOK tokens. */
static void mm_amx_item(void *c, int64_t it, cpu_slot *slot) {
    mm_ctx *m = c;
    const int64_t rows = m->W->rows;
    int64_t r0, r1;
    int t0 = 0, t1 = m->n;
    if (m->n <= cpu_amx_rows_form_max()) {
        r0 = it * m->rows_per_item;
        r1 = min64(r0 + m->rows_per_item, rows);
    } else {
        int64_t rb = it / m->n_tok_items, tb = it % m->n_tok_items;
        r0 = rb * ITEM_ROWS;
        r1 = min64(r0 + ITEM_ROWS, rows);
        t0 = (int)(tb * m->tok_per_item);
        t1 = (int)min64(t0 + m->tok_per_item, m->n);
    }
    cpu_amx_rows(m->W, r0, r1, t0, t1, m->n, m->xa, m->y, slot->qpack, m->amx == 1, m->pt, m->act8);
}

static void mm_rows_item(void *c, int64_t it, cpu_slot *slot) {
    if (((mm_ctx *)c)->i16) mm_i16_item(c, it, slot);
    else if (((mm_ctx *)c)->amx) mm_amx_item(c, it, slot);
    else mm_decode_item(c, it, slot);
}

/* cpu_matmul; prepped: x as this matmul would prepare it is in the scratch already (the matmul
 * before it in one cpu_matmul_batch call had the same x, n and mm_same_prep's layout) */
static void matmul_x(ci_backend *be, float *y, const float *x, int n, const ci_mat *W, int prepped) {
    cpu_backend *b = cpu(be);
    if (n <= 0 || W->rows <= 0) return;
    if (W->cols <= 0) {
        memset(y, 0, (size_t)n * (size_t)W->rows * sizeof(float));
        return;
    }
    mm_ctx m = { .k = b->k, .qk = b->qk, .y = y, .x = x, .n = n, .W = W };
    int64_t rows = W->rows, work = rows * W->cols * n;
    const size_t bytes = mm_plan(b, &m, NULL);
    uint8_t *mem = bytes ? mm_scratch(b, bytes) : NULL;
    if (bytes && !mem) return;
    const size_t at0 = 0;
    mm_prepare(b, &m, mem, (m.i16 || m.amx) && (prepped || mm_prep_rows(b, &m, 1, mem, &at0)));
    if (mm_by_rows(&m)) {
        par_for(b, ceil_div(rows, m.rows_per_item), mm_rows_item, &m, m.i16 ? work >= SMALL_WORK : 1);
        return;
    }
    if (m.amx) {   /* the tokens form: ITEM_ROWS rows by CPU_AMX_TOK tokens an item */
        m.tok_per_item = CPU_AMX_TOK;
        m.n_tok_items = ceil_div(n, CPU_AMX_TOK);
        par_for(b, ceil_div(rows, ITEM_ROWS) * m.n_tok_items, mm_amx_item, &m, work >= SMALL_WORK);
        return;
    }
    /* Prefill: split tokens too when there are too few row blocks to feed every thread. */
    int64_t n_rb = ceil_div(rows, ITEM_ROWS), want = (int64_t)b->n_slots * 4, n_tb = 1;
    if (work >= SMALL_WORK && n_rb < want) n_tb = min64(ceil_div(want, n_rb), ceil_div(n, CPU_TILE_T));
    m.tok_per_item = ceil_div(ceil_div(n, n_tb), CPU_TILE_T) * CPU_TILE_T;
    m.n_tok_items = ceil_div(n, m.tok_per_item);
    par_for(b, n_rb * m.n_tok_items, m.split ? mm_prefill_split_item : mm_prefill_item, &m, work >= SMALL_WORK);
}

static void cpu_matmul(ci_backend *be, float *y, const float *x, int n, const ci_mat *W) {
    CI_FP_FLUSH_SCOPE();
    matmul_x(be, y, x, n, W, 0);
}

/* Whether a matmul of W prepares x into the AMX tokens form's layout exactly as one of A does (MLX
 * W of one width, bits and group: amx_mlx.c's layout depends on nothing else, with n and the form). */
static int mm_same_prep(cpu_backend *b, const ci_mat *A, const ci_mat *W, int n) {
    return b->amx_mlx && n > cpu_amx_rows_form_max() && A->dtype == CI_U32 && W->dtype == CI_U32 &&
           cpu_amx_q_ok(A) && cpu_amx_q_ok(W) && same_i16_prep(A, W);
}

/* A batch of matmuls (cpu_kernels.h): the row-item ones share one pass of the pool (their
 * items numbered one after another), the others run one by one as cpu_matmul. Each output
 * is what cpu_matmul alone gives. */
typedef struct {
    mm_ctx *m;
    const int64_t *first;   /* [count + 1]: job j's items are first[j] .. first[j + 1] - 1 */
    int count;
} mm_batch;

static void mm_batch_item(void *c, int64_t it, cpu_slot *slot) {
    const mm_batch *bt = c;
    int j = 0;
    while (it >= bt->first[j + 1]) j++;
    mm_rows_item(&bt->m[j], it - bt->first[j], slot);
}

int cpu_i16_takes(ci_backend *be, const ci_mat *W) {
    const cpu_backend *b = cpu(be);
    return b->i16 && W->cols > 0 && b->i16->ok(W);
}

/* Up to MAXJ jobs at a time: the lone ones run as they come (cpu_matmul, with the scratch to
 * itself), then the others' x are prepared one after another in one scratch (job j at bytes
 * at[j] of it, 64-byte aligned) and they run in one pool pass. */
void cpu_matmul_batch(ci_backend *be, const cpu_mm_job *jobs, int count) {
    CI_FP_FLUSH_SCOPE();
    enum { MAXJ = 128 };   /* one pool pass for up to this many jobs */
    cpu_backend *b = cpu(be);
    for (int j0 = 0; j0 < count; j0 += MAXJ) {
        mm_ctx m[MAXJ];
        int64_t first[MAXJ + 1], work = 0;
        size_t at[MAXJ + 1];
        int nj = 0;
        first[0] = 0;
        at[0] = 0;
        for (int j = j0; j < count && j < j0 + MAXJ; j++) {
            const cpu_mm_job *q = &jobs[j];
            if (q->n <= 0 || q->W->rows <= 0 || q->W->cols <= 0 || (q->n > CPU_TILE_T && !cpu_i16_takes(be, q->W))) {
                /* empty, or a prefill by blocks: alone; q / k / v or gate / up of one x (MLX W on
                 * the tiles' tokens form) prepare it once */
                const cpu_mm_job *pj = j > j0 ? &jobs[j - 1] : NULL;
                const int prepped = pj && pj->x == q->x && pj->n == q->n && q->n > CPU_TILE_T && q->W->rows > 0 &&
                                    pj->W->rows > 0 && pj->W->cols > 0 && !cpu_i16_takes(be, pj->W) && !b->failed &&
                                    mm_same_prep(b, pj->W, q->W, q->n);
                matmul_x(be, q->y, q->x, q->n, q->W, prepped);
                continue;
            }
            m[nj] = (mm_ctx){ .k = b->k, .qk = b->qk, .y = q->y, .x = q->x, .n = q->n, .W = q->W };
            /* an MoE step's gate and up, and every expert of a 1-token step, read one x: an
             * earlier job's int16 preparation of it serves when the layout is the same */
            const mm_ctx *donor = NULL;
            for (int i = 0; i < nj && !donor && cpu_i16_takes(be, q->W); i++)
                if (m[i].i16 && m[i].x == q->x && m[i].n == q->n && same_i16_prep(m[i].W, q->W)) donor = &m[i];
            at[nj + 1] = at[nj] + ((mm_plan(b, &m[nj], donor) + 63) & ~(size_t)63);
            work += q->W->rows * q->W->cols * q->n;
            first[nj + 1] = first[nj] + ceil_div(q->W->rows, m[nj].rows_per_item);
            nj++;
        }
        uint8_t *mem = at[nj] ? mm_scratch(b, at[nj]) : NULL;
        if (at[nj] && !mem) break;
        const int done = mem && mm_prep_rows(b, m, nj, mem, at);
        for (int j = 0; j < nj; j++) mm_prepare(b, &m[j], mem ? mem + at[j] : NULL, done);
        mm_batch bt = { .m = m, .first = first, .count = nj };
        if (!b->failed) par_for(b, first[nj], mm_batch_item, &bt, work >= SMALL_WORK);
    }
}

/* ---- rmsnorm ------------------------------------------------------------------------ */

typedef struct {
    const cpu_kernels *k;
    float *out;
    const float *x, *w;
    int64_t dim, rows_per_item, n;
    float eps;
} norm_ctx;

static void norm_item(void *c, int64_t it, cpu_slot *slot) {
    (void)slot;
    norm_ctx *m = c;
    int64_t t1 = min64((it + 1) * m->rows_per_item, m->n);
    for (int64_t t = it * m->rows_per_item; t < t1; t++) {
        const float *xt = m->x + t * m->dim;
        double ms = (double)m->k->sumsq(xt, m->dim) / (double)m->dim;
        float s = (float)(1.0 / sqrt(ms + (double)m->eps));
        m->k->scale_mul(m->out + t * m->dim, xt, m->w, s, m->dim);
    }
}

static void cpu_rmsnorm(ci_backend *be, float *out, const float *x, const float *w, int n, int dim, float eps) {
    CI_FP_FLUSH_SCOPE();
    cpu_backend *b = cpu(be);
    if (n <= 0 || dim <= 0) return;
    norm_ctx m = { .k = b->k, .out = out, .x = x, .w = w, .dim = dim, .n = n, .eps = eps };
    m.rows_per_item = (int64_t)n * dim < SMALL_WORK ? n : ceil_div(n, (int64_t)b->n_slots * 4);
    par_for(b, ceil_div(n, m.rows_per_item), norm_item, &m, 1);
}

/* ---- rope --------------------------------------------------------------------------- */

typedef struct {
    float *x;
    int n_heads, head_dim, rot_offset, rot_dim;
    const int32_t *pos;
    const float *inv_freq;
    float mscale;
    ci_rope_style style;
    float *cs, *sn;           /* a table [n][rot_dim / 2] to fill (rope_table_item) or to read, or NULL */
} rope_ctx;

/* cos and sin of token t's angles i0 .. i1 - 1 into cs[0 ..), sn[0 ..). The angle is the f32 product
 * pos * inv_freq (as the reference models compute it); cos and sin of that f32 angle are taken in
 * double, then rounded once. */
static void rope_angles(const rope_ctx *m, int64_t t, int i0, int i1, float *cs, float *sn) {
    const float p = (float)m->pos[t];
    for (int i = i0; i < i1; i++) {
        const double a = (double)(p * m->inv_freq[i]);
        cs[i - i0] = (float)(cos(a) * m->mscale);
        sn[i - i0] = (float)(sin(a) * m->mscale);
    }
}

/* token t's row of the table */
static void rope_table_item(void *c, int64_t t, cpu_slot *slot) {
    (void)slot;
    const rope_ctx *m = c;
    const int half = m->rot_dim / 2;
    rope_angles(m, t, 0, half, m->cs + t * half, m->sn + t * half);
}

/* One token: its angles from the table, or rope_angles' a chunk at a time. */
static void rope_item(void *c, int64_t t, cpu_slot *slot) {
    (void)slot;
    rope_ctx *m = c;
    int half = m->rot_dim / 2;
    float cbuf[ROPE_CHUNK], sbuf[ROPE_CHUNK];
    for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
        int i1 = i0 + ROPE_CHUNK < half ? i0 + ROPE_CHUNK : half;
        const float *cs = cbuf, *sn = sbuf;
        if (m->cs) {   /* the table's row (rope_table_item: the same values) */
            cs = m->cs + t * half + i0;
            sn = m->sn + t * half + i0;
        } else {
            rope_angles(m, t, i0, i1, cbuf, sbuf);
        }
        for (int h = 0; h < m->n_heads; h++) {
            float *base = m->x + ((int64_t)t * m->n_heads + h) * m->head_dim + m->rot_offset;
            for (int i = i0; i < i1; i++) {
                float *pa, *pb;
                if (m->style == CI_ROPE_NEOX) { pa = base + i; pb = base + i + half; }
                else { pa = base + 2 * i; pb = base + 2 * i + 1; }
                float a = *pa, bb = *pb, co = cs[i - i0], si = sn[i - i0];
                *pa = a * co - bb * si;
                *pb = bb * co + a * si;
            }
        }
    }
}

/* Points m at the table for its call of n tokens: 1 when the table must be filled first (a new
 * one, or the last call's positions, frequencies or mscale differ), 0 when it holds them
 * already, or when no memory was had for it (m->cs NULL: rope_item computes them itself). */
static int rope_table_get(rope_table *r, rope_ctx *m, int n) {
    const int half = m->rot_dim / 2;
    if (r->cs && r->n == n && r->half == half && r->inv == m->inv_freq && !memcmp(&r->mscale, &m->mscale, sizeof(float)) &&
        !memcmp(r->pos, m->pos, (size_t)n * sizeof(int32_t)) &&
        !memcmp(r->sn + (size_t)n * half, m->inv_freq, (size_t)half * sizeof(float))) {
        m->cs = r->cs;
        m->sn = r->sn;
        return 0;
    }
    const size_t need = (size_t)n * half + half;
    if (need > r->cap) {
        free(r->cs);
        free(r->sn);
        r->cs = malloc(need * sizeof(float));
        r->sn = malloc(need * sizeof(float));
        r->cap = r->cs && r->sn ? need : 0;
    }
    if ((size_t)n > r->pos_cap) {
        free(r->pos);
        r->pos = malloc((size_t)n * sizeof(int32_t));
        r->pos_cap = r->pos ? (size_t)n : 0;
    }
    if (!r->cap || !r->pos_cap) {   /* no table: this call and the next compute their own */
        free(r->cs); free(r->sn); free(r->pos);
        memset(r, 0, sizeof *r);
        return 0;
    }
    memcpy(r->pos, m->pos, (size_t)n * sizeof(int32_t));
    memcpy(r->sn + (size_t)n * half, m->inv_freq, (size_t)half * sizeof(float));
    r->n = n; r->half = half; r->inv = m->inv_freq; r->mscale = m->mscale;
    m->cs = r->cs;
    m->sn = r->sn;
    return 1;
}

static void cpu_rope(ci_backend *be, float *x, int n, int n_heads, int head_dim, int rot_offset, int rot_dim,
                     const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style) {
    CI_FP_FLUSH_SCOPE();
    cpu_backend *b = cpu(be);
    if (n <= 0 || n_heads <= 0 || rot_dim < 2) return;
    rope_ctx m = { x, n_heads, head_dim, rot_offset, rot_dim, pos, inv_freq, mscale, style, NULL, NULL };
    /* sin/cos dominate: a few dozen tokens are worth spreading, one is not. A prefill's calls
     * (q and k of every layer) share positions and frequencies: the table of the last call serves
     * the next with the same (compared by value), so its cos / sin are taken once a forward. */
    if ((int64_t)n * rot_dim >= 4096 && rope_table_get(&b->rope, &m, n)) par_for(b, n, rope_table_item, &m, 1);
    par_for(b, n, rope_item, &m, (int64_t)n * rot_dim >= 4096);
}

/* ---- attention ------------------------------------------------------------------------ */

typedef struct {
    const cpu_kernels *k;
    float *out;
    const float *q, *kc, *vc;
    int pos0, n_heads, group, hd, kv_stride;
    int heads_per_item;       /* divides group: an item's heads share one kv head */
    float scale;
    const int32_t *pos;       /* attention_pos: row t attends keys 0..pos[t]; NULL: pos0 + t */
    const ci_pages *pg;       /* a paged cache (backend.h), or NULL: key j is row j */
    int pg_row;               /* the table row of query row 0 (a per-row paged call runs one row) */
    int n;                    /* query rows */
    int h16;                  /* the cache holds f16 (ci_backend.kv_f16): rows 2 kv_stride halves apart */
    int n_slots;              /* the pool's threads (attn_item_rows' prefetch rule) */
    int kv_per_item;          /* attn_item_rows: kv heads an item */
} attn_ctx;

static inline int64_t attn_row(const attn_ctx *a, int t, int64_t j) {
    return a->pg ? ci_page_row(a->pg, a->pg_row + t, j) : j;
}

/* Value off (a head's first: g * hd) of cache row `row` of base (kc or vc), f32 or f16. */
static inline const void *attn_at(const attn_ctx *a, const float *base, int64_t row, int64_t off) {
    if (a->h16) return (const uint16_t *)base + row * 2 * a->kv_stride + off;
    return base + row * a->kv_stride + off;
}

/* The scores of nq query rows (x, a row stride xs apart) against the 4 keys kp (f32 or f16 rows:
 * f32_tile or h16_tile), times the scale, into s[row * ATTN_BLOCK + j + r] for the keys j + r < nj. */
static inline void attn_score_tile(const attn_ctx *a, const void *const kp[CPU_TILE_R], int nq, const float *x,
                                   int64_t xs, int j, int nj, float *s) {
    float tile[CPU_TILE_T * CPU_TILE_R];
    if (a->h16) a->k->h16_tile((const uint16_t *const *)kp, a->hd, nq, x, xs, tile);
    else a->k->f32_tile((const float *const *)kp, a->hd, nq, x, xs, tile);
    for (int q = 0; q < nq; q++)
        for (int r = 0; r < CPU_TILE_R && j + r < nj; r++) s[q * ATTN_BLOCK + j + r] = tile[q * CPU_TILE_R + r] * a->scale;
}

/* The scores of nq query rows (x, a row stride xs apart) against keys j0 .. j0+nj-1 of a kv head
 * (its values from ho in each row, row t's addressing) into s[row * ATTN_BLOCK + j]: one tile per
 * 4 keys (past nj the last key again, its scores dropped). */
static inline void attn_scores(const attn_ctx *a, int t, int64_t ho, int j0, int nj, int nq, const float *x,
                               int64_t xs, float *s) {
    for (int j = 0; j < nj; j += CPU_TILE_R) {
        const void *kp[CPU_TILE_R];
        for (int r = 0; r < CPU_TILE_R; r++) kp[r] = attn_at(a, a->kc, attn_row(a, t, j0 + (j + r < nj ? j + r : nj - 1)), ho);
        attn_score_tile(a, kp, nq, x, xs, j, nj, s);
    }
}

/* One block's online-softmax step for one (row, head): its nj scores sh become probabilities
 * against the running max *m (raised when the block's is larger, rescaling o and *l), their sum
 * added to *l. */
static inline void attn_softmax_step(const attn_ctx *a, float *sh, int nj, float *o, float *m, float *l) {
    float cm = a->k->vmax(sh, nj);
    if (cm > *m) {
        if (*l > 0.0f) { /* earlier blocks were weighted against a smaller max */
            float r = expf(*m - cm);
            *l *= r;
            a->k->scale_mul(o, o, NULL, r, a->hd);
        }
        *m = cm;
    }
    *l += a->k->exp_sum(sh, nj, *m);
}

/* o_q (+)= sum_j p_q[j] v_j for nq rows (o a stride os apart, p in s a row ATTN_BLOCK apart)
 * over keys j0 .. j0+n-1 of a kv head (from ho in each row, row t's addressing). Value rows are
 * contiguous within a page: one attn_wsum per page the keys span (one when pages are at least
 * ATTN_BLOCK rows, so the bits are the unpaged ones). */
static inline void attn_wsum_runs(const attn_ctx *a, int t, int64_t ho, int j0, int n, int nq, float *o, int64_t os,
                                  const float *s) {
    for (int j = 0; j < n;) {
        int run = n - j;
        if (a->pg) {
            int in_page = (1 << a->pg->blk_log2) - ((j0 + j) & ((1 << a->pg->blk_log2) - 1));
            run = run < in_page ? run : in_page;
        }
        const void *vr = attn_at(a, a->vc, attn_row(a, t, j0 + j), ho);
        if (a->h16) a->k->attn_wsum16(o, os, nq, s + j, ATTN_BLOCK, vr, 2 * (int64_t)a->kv_stride, run, a->hd);
        else a->k->attn_wsum(o, os, nq, s + j, ATTN_BLOCK, vr, a->kv_stride, run, a->hd);
        j += run;
    }
}

/* One query row and heads_per_item consecutive heads of one kv group. Keys go in blocks of
 * ATTN_BLOCK, and the item's heads are taken 4 at a time: the scores of 4 heads x 4 keys
 * are one f32_tile (each key vector loaded once for the 4 heads), and attn_wsum adds the
 * block's values into the 4 outputs loading each value vector once. So K and V are read
 * from memory once per group rather than once per head, and what is re-read stays in L2.
 * Per head, a running max m and sum l are rescaled when a block raises the max (online
 * softmax): every exponent is <= 0, and any context length works with a fixed scratch. */
static void attn_item(void *c, int64_t it, cpu_slot *slot) {
    attn_ctx *a = c;
    int hpi = a->heads_per_item, items_per_t = a->n_heads / hpi;
    int t = (int)(it / items_per_t), h0 = (int)(it % items_per_t) * hpi;
    int L = (a->pos ? a->pos[t] : a->pos0 + t) + 1, g = h0 / a->group, hd = a->hd;
    int64_t row0 = (int64_t)t * a->n_heads + h0; /* first q/out row */
    const int64_t ho = (int64_t)g * hd;           /* the kv head's first value in a cache row */
    float m[ATTN_MAX_HPI], l[ATTN_MAX_HPI];
    for (int h = 0; h < hpi; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
        memset(a->out + (row0 + h) * hd, 0, (size_t)hd * sizeof(float));
    }
    for (int j0 = 0; j0 < L; j0 += ATTN_BLOCK) {
        int nj = L - j0 < ATTN_BLOCK ? L - j0 : ATTN_BLOCK;
        for (int hs = 0; hs < hpi; hs += CPU_TILE_T) {
            int nq = hpi - hs < CPU_TILE_T ? hpi - hs : CPU_TILE_T;
            float *o = a->out + (row0 + hs) * hd, *s = slot->scores; /* s: [nq, ATTN_BLOCK] */
            attn_scores(a, t, ho, j0, nj, nq, a->q + (row0 + hs) * hd, hd, s);
            for (int h = 0; h < nq; h++) attn_softmax_step(a, s + h * ATTN_BLOCK, nj, o + h * hd, &m[hs + h], &l[hs + h]);
            attn_wsum_runs(a, t, ho, j0, nj, nq, o, hd, s);
        }
    }
    for (int h = 0; h < hpi; h++) {
        float *o = a->out + (row0 + h) * hd;
        a->k->scale_mul(o, o, NULL, 1.0f / l[h], hd);
    }
}

/* A prefill's attention by blocks of query rows: one item is CPU_TILE_T consecutive query rows
 * and one kv head's heads (fewer than 4: attn_run's rule), whose keys the rows address alike (no
 * per-row block tables). For each block of ATTN_BLOCK keys, every head of the group takes the
 * block's scores for the 4 rows in one f32_tile per 4 keys (x: the rows' queries of that head,
 * a row stride apart) and its values in one attn_wsum, so a block of keys and values is read
 * from memory once for 4 rows and all the group's heads (attn_item reads it once per row), and
 * stays in L2 while the heads go by. Each (row, head) sees the operations attn_item gives it,
 * in its order: its own key count per block (a row's keys past its position are never
 * read), the same score tiles (a dot does not depend on the tile's other rows), max, rescale,
 * exp_sum and wsum over its own keys (attn_wsum's per-row sums do not depend on nq): the same
 * bits. */
static void attn_item_qb(void *c, int64_t it, cpu_slot *slot) {
    attn_ctx *a = c;
    const int n_kv = a->n_heads / a->group, g = (int)(it % n_kv), t0 = (int)(it / n_kv) * CPU_TILE_T;
    const int nq = a->n - t0 < CPU_TILE_T ? a->n - t0 : CPU_TILE_T, hd = a->hd, G = a->group;
    const int64_t qs = (int64_t)a->n_heads * hd;   /* a query row's stride */
    const int64_t ho = (int64_t)g * hd;
    float m[ATTN_MAX_HPI][CPU_TILE_T], l[ATTN_MAX_HPI][CPU_TILE_T];
    int L[CPU_TILE_T], Lmax = 0;
    for (int q = 0; q < nq; q++) {
        L[q] = (a->pos ? a->pos[t0 + q] : a->pos0 + t0 + q) + 1;
        if (L[q] > Lmax) Lmax = L[q];
    }
    for (int hh = 0; hh < G; hh++)
        for (int q = 0; q < nq; q++) {
            m[hh][q] = -INFINITY;
            l[hh][q] = 0.0f;
            memset(a->out + (int64_t)t0 * qs + ((int64_t)g * G + hh) * hd + q * qs, 0, (size_t)hd * sizeof(float));
        }
    for (int j0 = 0; j0 < Lmax; j0 += ATTN_BLOCK) {
        const int nj = Lmax - j0 < ATTN_BLOCK ? Lmax - j0 : ATTN_BLOCK;
        int njq[CPU_TILE_T], full = 1;
        for (int q = 0; q < nq; q++) {
            njq[q] = L[q] - j0 < nj ? L[q] - j0 : nj;
            full &= njq[q] == nj;
        }
        for (int hh = 0; hh < G; hh++) {
            const int64_t h = (int64_t)g * G + hh;
            float *o = a->out + (int64_t)t0 * qs + h * hd, *s = slot->scores;   /* s: [nq, ATTN_BLOCK] */
            attn_scores(a, t0, ho, j0, nj, nq, a->q + (int64_t)t0 * qs + h * hd, qs, s);
            for (int q = 0; q < nq; q++)   /* a row whose keys ended in an earlier block has none here */
                if (njq[q] > 0) attn_softmax_step(a, s + q * ATTN_BLOCK, njq[q], o + q * qs, &m[hh][q], &l[hh][q]);
            /* all rows over the whole block at once, else row by row over its own keys */
            for (int q0 = 0; q0 < nq; q0 += full ? nq : 1)
                attn_wsum_runs(a, t0, ho, j0, full ? nj : njq[q0], full ? nq : 1, o + q0 * qs, qs, s + q0 * ATTN_BLOCK);
        }
    }
    for (int hh = 0; hh < G; hh++)
        for (int q = 0; q < nq; q++) {
            float *o = a->out + (int64_t)t0 * qs + ((int64_t)g * G + hh) * hd + q * qs;
            a->k->scale_mul(o, o, NULL, 1.0f / l[hh][q], hd);
        }
}

/* A few rows' attention (a decode step) by ranges of kv heads: one item is one query row and
 * every head of kv_per_item consecutive kv heads. For each block of ATTN_BLOCK keys it takes the
 * scores 4 keys at a time for all the range's heads (kv heads inner: the 4 keys' rows are read
 * front to back, one stream, where attn_item reads a head's slice of every row, a stride apart,
 * once per kv head), prefetching the same rows' values into L2, then each head's softmax step
 * and value sums as attn_item gives them. Each (row, head) sees attn_item's operations in its
 * order (a score does not depend on the tile's other rows, nor a value sum on nq): the same
 * bits. */
enum { ATTN_ROWS_MAX_H = 32 };   /* most heads an item of attn_item_rows holds */
static int attn_rows_on = 1;

static void attn_item_rows(void *c, int64_t it, cpu_slot *slot) {
    (void)slot;
    attn_ctx *a = c;
    const int n_kv = a->n_heads / a->group, G = a->group, hd = a->hd, kvr = a->kv_per_item;
    const int nr = (n_kv + kvr - 1) / kvr, t = (int)(it / nr), g0 = (int)(it % nr) * kvr;
    const int g1 = g0 + kvr < n_kv ? g0 + kvr : n_kv, nh = (g1 - g0) * G;
    const int L = (a->pos ? a->pos[t] : a->pos0 + t) + 1;
    const int64_t es = a->h16 ? 2 : 4, span = (int64_t)(g1 - g0) * hd * es;   /* the range's bytes in a row */
    const int vpf = a->n_slots == 1;   /* the block's values into L2 while its scores are taken: one thread only */
    _Alignas(64) float s[ATTN_ROWS_MAX_H * ATTN_BLOCK];
    float m[ATTN_ROWS_MAX_H], l[ATTN_ROWS_MAX_H];
    float *out = a->out + ((int64_t)t * a->n_heads + (int64_t)g0 * G) * hd;
    const float *q = a->q + ((int64_t)t * a->n_heads + (int64_t)g0 * G) * hd;
    for (int h = 0; h < nh; h++) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
    }
    memset(out, 0, (size_t)nh * hd * sizeof(float));
    for (int j0 = 0; j0 < L; j0 += ATTN_BLOCK) {
        const int nj = L - j0 < ATTN_BLOCK ? L - j0 : ATTN_BLOCK;
        for (int j = 0; j < nj; j += CPU_TILE_R) {
            int64_t rr[CPU_TILE_R];
            for (int r = 0; r < CPU_TILE_R; r++) {
                rr[r] = attn_row(a, t, j0 + (j + r < nj ? j + r : nj - 1));
                if (j0 + j + r + CPU_TILE_R < L) {   /* the next tile's keys */
                    const char *kp = attn_at(a, a->kc, attn_row(a, t, j0 + j + r + CPU_TILE_R), (int64_t)g0 * hd);
                    for (int64_t o = 0; o < span; o += 64) __builtin_prefetch(kp + o, 0, 3);
                }
                if (j + r < nj && vpf) {
                    const char *vp = attn_at(a, a->vc, rr[r], (int64_t)g0 * hd);
                    for (int64_t o = 0; o < span; o += 64) __builtin_prefetch(vp + o, 0, 2);
                }
            }
            for (int g = g0; g < g1; g++)
                for (int hs = 0; hs < G; hs += CPU_TILE_T) {
                    const int nq = G - hs < CPU_TILE_T ? G - hs : CPU_TILE_T, hh = (g - g0) * G + hs;
                    const void *kp[CPU_TILE_R];
                    for (int r = 0; r < CPU_TILE_R; r++) kp[r] = attn_at(a, a->kc, rr[r], (int64_t)g * hd);
                    attn_score_tile(a, kp, nq, q + (int64_t)hh * hd, hd, j, nj, s + hh * ATTN_BLOCK);
                }
        }
        for (int h = 0; h < nh; h++) attn_softmax_step(a, s + h * ATTN_BLOCK, nj, out + (int64_t)h * hd, &m[h], &l[h]);
        for (int g = g0; g < g1; g++)
            for (int hs = 0; hs < G; hs += CPU_TILE_T) {
                const int nq = G - hs < CPU_TILE_T ? G - hs : CPU_TILE_T, hh = (g - g0) * G + hs;
                attn_wsum_runs(a, t, (int64_t)g * hd, j0, nj, nq, out + (int64_t)hh * hd, hd, s + hh * ATTN_BLOCK);
            }
    }
    for (int h = 0; h < nh; h++) a->k->scale_mul(out + (int64_t)h * hd, out + (int64_t)h * hd, NULL, 1.0f / l[h], hd);
}

/* attention and attention_pos: one driver; keys = the longest row's key count (only the
 * decision to wake the pool depends on it, never a result). */
static void attn_run(cpu_backend *b, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                     const int32_t *pos, int64_t keys, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                     const ci_pages *pg, int pg_row, int h16) {
    if (n <= 0 || n_heads <= 0 || n_kv <= 0 || hd <= 0) return;
    attn_ctx a = { b->k, out, q, k, v, pos0, n_heads, n_heads / n_kv, hd, kv_stride, 1, scale, pos, pg, pg_row, n, h16,
                   (int)b->n_slots, 0 };
    if (a.group < 1) a.group = 1;
    /* A prefill whose rows share the key addressing and reach past one key block, with fewer
     * than 4 heads a kv head (attn_item's tiles then hold fewer than 4 rows): blocks of rows
     * (attn_item_qb) where that still gives every thread two items */
    const int64_t qb_items = (int64_t)(n + CPU_TILE_T - 1) / CPU_TILE_T * n_kv;
    if (n >= 2 * CPU_TILE_T && keys > ATTN_BLOCK && a.group < CPU_TILE_T && n_heads % n_kv == 0 &&
        !(pg && pg->per_row) && qb_items >= 2 * (int64_t)b->n_slots && attn_qb_on) {
        par_for(b, qb_items, attn_item_qb, &a, (int64_t)n * n_heads * keys * hd >= SMALL_WORK);
        return;
    }
    /* An f16 cache's rows that leave every thread an item of whole kv heads' ranges (a decode
     * step): by ranges of kv heads (attn_item_rows), at most ATTN_ROWS_MAX_H heads an item. Not
     * the f32 cache: there it measured level to 18% slower (bench/RESULTS.md) */
    if (attn_rows_on && h16 && n_heads % n_kv == 0 && a.group <= ATTN_ROWS_MAX_H) {
        const int want = (int)((b->n_slots + n - 1) / n);   /* ranges a row that give every thread one */
        int kvr = (n_kv + want - 1) / want;
        if (kvr * a.group > ATTN_ROWS_MAX_H) kvr = ATTN_ROWS_MAX_H / a.group;
        const int64_t rows_items = (int64_t)n * ((n_kv + kvr - 1) / kvr);
        if (rows_items >= b->n_slots && n < 2 * CPU_TILE_T) {
            a.kv_per_item = kvr;
            par_for(b, rows_items, attn_item_rows, &a, (int64_t)n * n_heads * keys * hd >= SMALL_WORK);
            return;
        }
    }
    /* Items are (query row, heads sharing a kv head). Sharing saves memory traffic, but
     * the pool needs enough items: take the largest divisor of the group that still
     * leaves two items per thread (decode with few kv heads falls back to one head). */
    for (int d = 2; d <= a.group && d <= ATTN_MAX_HPI; d++)
        if (a.group % d == 0 && (int64_t)n * n_heads / d >= 2 * (int64_t)b->n_slots) a.heads_per_item = d;
    int64_t items = (int64_t)n * n_heads / a.heads_per_item;
    par_for(b, items, attn_item, &a, (int64_t)n * n_heads * keys * hd >= SMALL_WORK);
}

static void cpu_attention(ci_backend *be, float *out, const float *q, const float *k, const float *v, int n,
                          int pos0, int n_heads, int n_kv, int hd, int kv_stride, float scale) {
    CI_FP_FLUSH_SCOPE();
    attn_run(cpu(be), out, q, k, v, n, pos0, NULL, (int64_t)pos0 + n, n_heads, n_kv, hd, kv_stride, scale, NULL, 0, 0);
}

/* The positions are host memory here, so the work estimate reads them; max_keys only
 * matters to a device sizing its launch. h16: the cache holds f16 (the GQA ops on a kv_f16
 * backend; MLA's latent cache is f32 always). */
static void attn_paged(ci_backend *be, float *out, const float *q, const float *k, const float *v, int n,
                       const int32_t *pos, int n_heads, int n_kv, int hd, int kv_stride, float scale, const ci_pages *pg,
                       int pg_row, int h16) {
    int64_t keys = 0;
    for (int t = 0; t < n; t++)
        if (pos[t] + 1 > keys) keys = pos[t] + 1;
    attn_run(cpu(be), out, q, k, v, n, 0, pos, keys, n_heads, n_kv, hd, kv_stride, scale, pg, pg_row, h16);
}

void cpu_attention_paged(ci_backend *be, float *out, const float *q, const float *k, const float *v, int n,
                         const int32_t *pos, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                         const ci_pages *pg, int pg_row) {
    attn_paged(be, out, q, k, v, n, pos, n_heads, n_kv, hd, kv_stride, scale, pg, pg_row, 0);
}

static void cpu_attention_pos(ci_backend *be, float *out, const float *q, const float *k, const float *v, int n,
                              const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride,
                              float scale) {
    CI_FP_FLUSH_SCOPE();
    (void)max_keys;
    attn_paged(be, out, q, k, v, n, pos, n_heads, n_kv, hd, kv_stride, scale, NULL, 0, be->kv_f16);
}

/* ---- elementwise ---------------------------------------------------------------------- */

#define EW_CHUNK (1 << 14)  /* floats per item: 64 KiB per operand, 16-float aligned */

typedef struct {
    const cpu_kernels *k;
    float *y;
    const float *x;
    int64_t count;
    int op;                 /* 0 add, 1 swiglu */
} ew_ctx;

static void ew_item(void *c, int64_t it, cpu_slot *slot) {
    (void)slot;
    ew_ctx *e = c;
    int64_t i0 = it * EW_CHUNK, n = min64(EW_CHUNK, e->count - i0);
    if (e->op == 0) e->k->add(e->y + i0, e->x + i0, n);
    else e->k->swiglu(e->y + i0, e->x + i0, n);
}

static void ew_run(cpu_backend *b, int op, float *y, const float *x, int64_t count) {
    if (count <= 0) return;
    if (count <= 2 * EW_CHUNK) { /* decode-sized: waking threads costs more than it saves */
        if (op == 0) b->k->add(y, x, count);
        else b->k->swiglu(y, x, count);
        return;
    }
    ew_ctx e = { b->k, y, x, count, op };
    par_for(b, ceil_div(count, EW_CHUNK), ew_item, &e, 1);
}

static void cpu_swiglu(ci_backend *be, float *g, const float *u, int64_t count) {
    CI_FP_FLUSH_SCOPE();
    ew_run(cpu(be), 1, g, u, count);
}
static void cpu_add(ci_backend *be, float *y, const float *x, int64_t count) {
    CI_FP_FLUSH_SCOPE();
    ew_run(cpu(be), 0, y, x, count);
}
static void cpu_clamp_gu(ci_backend *be, float *g, float *u, int64_t count, float L) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    for (int64_t i = 0; i < count; i++) {
        if (g[i] > L) g[i] = L;
        u[i] = u[i] > L ? L : u[i] < -L ? -L : u[i];
    }
}

/* ---- embed ---------------------------------------------------------------------------- */

typedef struct {
    const cpu_kernels *k;
    const cpu_qkernels *qk;
    float *out;
    const ci_mat *E;
    const int32_t *ids;
} embed_ctx;

static void embed_item(void *c, int64_t t, cpu_slot *slot) {
    (void)slot;
    embed_ctx *e = c;
    if (e->E->dtype == CI_U32) e->qk->row_f32(e->E, e->ids[t], 0, e->E->cols, e->out + t * e->E->cols);
    else e->k->row_f32(e->E, e->ids[t], 0, e->E->cols, e->out + t * e->E->cols);
}

static void cpu_embed(ci_backend *be, float *out, const ci_mat *E, const int32_t *ids, int n) {
    CI_FP_FLUSH_SCOPE();
    cpu_backend *b = cpu(be);
    if (n <= 0 || E->cols <= 0) return;
    embed_ctx e = { b->k, b->qk, out, E, ids };
    par_for(b, n, embed_item, &e, (int64_t)n * E->cols >= 4 * SMALL_WORK);
}

/* ---- memory: buffers are host memory ------------------------------------------------ */

static void *cpu_alloc(ci_backend *be, size_t bytes) {
    (void)be;
    /* aligned_alloc wants a multiple of the alignment; 0 bytes still gets a distinct buffer */
    size_t sz = bytes ? (bytes + 255) / 256 * 256 : 256;
    if (sz < bytes) return NULL;
    return aligned_alloc(256, sz);
}

static void cpu_buf_free(ci_backend *be, void *buf) {
    (void)be;
    free(buf);
}

static void cpu_memcpy(ci_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes && dst != src) memcpy(dst, src, bytes);
}

static void cpu_copy_2d(ci_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                        size_t height) {
    for (size_t i = 0; i < height; i++) cpu_memcpy(be, (char *)dst + i * dpitch, (const char *)src + i * spitch, width);
}

static void cpu_download(ci_backend *be, void *host_dst, const void *src, size_t bytes) {
    cpu_memcpy(be, host_dst, src, bytes);
}

static void cpu_upload(ci_backend *be, void *dst, const void *host_src, size_t bytes) {
    cpu_memcpy(be, dst, host_src, bytes);
}

/* The kernels read checkpoint bytes where they lie (mmap or owned copies). */
static const void *cpu_weight(ci_backend *be, const void *host, size_t bytes) {
    (void)be;
    (void)bytes;
    return host;
}
static const ci_qdesc *cpu_weight_q(ci_backend *be, const ci_qdesc *d, size_t param_bytes) {
    (void)be;
    (void)param_bytes;
    return d;
}

static int cpu_status(ci_backend *be) { return cpu(be)->failed; }
int cpu_failed(ci_backend *be) { return cpu(be)->failed; }
void **cpu_mla_slot(ci_backend *be) { return &cpu(be)->mla_tmp; }
void cpu_fail(ci_backend *be, const char *msg) {
    if (cpu(be)->failed) return;
    cpu(be)->failed = 1;
    snprintf(be->last_error, sizeof be->last_error, "%s", msg);
}

/* A collective's frame: a rank whose ops failed stops the others instead of leaving them
 * waiting (0: do not run it); a collective that failed (rc) fails the backend with the reason. */
static int comm_begin(ci_backend *be) {
    if (!cpu(be)->failed) return 1;
    ci_comm_abort(be->comm, be->rank, be->last_error);
    return 0;
}
static void comm_end(ci_backend *be, int rc) {
    if (!rc) return;
    char why[200], msg[240];
    ci_comm_error(be->comm, why, sizeof why);
    snprintf(msg, sizeof msg, "tensor parallel: %s", why);
    cpu_fail(be, msg);
}

static void cpu_all_reduce(ci_backend *be, float *x, int64_t count) {
    if (comm_begin(be)) comm_end(be, ci_comm_all_reduce(be->comm, be->rank, x, (size_t)count));
}

static void cpu_all_gather_rows(ci_backend *be, float *out, const float *in, int rows, int width) {
    if (comm_begin(be)) comm_end(be, ci_comm_all_gather_rows(be->comm, be->rank, out, in, rows, width));
}

void ci_backend_cpu_join(ci_backend *be, struct ci_comm *c, int rank) {
    be->comm = c;
    be->rank = rank;
    be->world = ci_comm_world(c);
    be->all_reduce = cpu_all_reduce;
    be->all_gather_rows = cpu_all_gather_rows;
}

static void cpu_moe_experts(ci_backend *be, float *out, const float *x, int n, const int32_t *sel, const float *w,
                            const ci_moe *m, int acc) {
    CI_FP_FLUSH_SCOPE();
    cpu_backend *b = cpu(be);
    if (b->failed) return;
    if (cpu_moe_experts_run(be, &b->moe_tmp, out, x, n, sel, w, m, acc)) {
        b->failed = 1;
        snprintf(be->last_error, sizeof be->last_error, "cpu: out of memory for the MoE scratch of %d tokens", n);
    }
}

/* ---- ops with positions in memory ------------------------------------------------------ */

/* kv_store; with pg, position pos[t] goes to its row of table row pg_row + t (per_row). to_f16
 * (a kernel set's, or NULL): the rows stored as the f16 cache's halves, row r at 2 r stride halves. */
static void kv_store_paged(float *cache, int stride, const float *src, int width, int n, const int32_t *pos,
                           const ci_pages *pg, int pg_row, void (*to_f16)(const float *, int64_t, uint16_t *)) {
    for (int t = 0; t < n; t++) {
        int64_t r = pg ? ci_page_row(pg, pg_row + t, pos[t]) : pos[t];
        if (to_f16) to_f16(src + (int64_t)t * width, width, (uint16_t *)cache + r * 2 * stride);
        else memcpy(cache + r * stride, src + (int64_t)t * width, (size_t)width * sizeof(float));
    }
}

static void cpu_kv_store(ci_backend *be, float *cache, int stride, const float *src, int width, int n,
                         const int32_t *pos) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    kv_store_paged(cache, stride, src, width, n, pos, NULL, 0, NULL);
}

int ci_argmax_f32(const float *x, int count) {
    int best = -1;
    for (int i = 0; i < count; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
    return best < 0 ? 0 : best;
}

static void cpu_argmax(ci_backend *be, int32_t *out, const float *x, int count) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    out[0] = ci_argmax_f32(x, count);
}

/* ---- fused ops: the unfused sequences, so the bits are theirs ------------------------- */

/* Matmuls of one x: a decode's (row items) share one pool pass (cpu_matmul_batch; each the
 * bits of cpu_matmul alone), so q / k / v wake the pool once instead of three times. */
static void cpu_matmul_n(ci_backend *be, int count, float *const *ys, const float *x, int n, const ci_mat *const *Ws) {
    CI_FP_FLUSH_SCOPE();
    enum { J = 16 };
    for (int i0 = 0; i0 < count; i0 += J) {
        cpu_mm_job jobs[J];
        int nj = 0;
        for (int i = i0; i < count && i < i0 + J; i++) jobs[nj++] = (cpu_mm_job){ ys[i], x, n, Ws[i] };
        cpu_matmul_batch(be, jobs, nj);
    }
}

/* gate and up of one x in one pool pass when they are row items (decode), as cpu_matmul_n */
static void matmul_gu(ci_backend *be, float *g, float *u, const float *x, int n, const ci_mat *Wg, const ci_mat *Wu) {
    const cpu_mm_job jobs[2] = { { g, x, n, Wg }, { u, x, n, Wu } };
    cpu_matmul_batch(be, jobs, 2);
}

static void cpu_matmul_acc(ci_backend *be, float *y, const float *x, int n, const ci_mat *W, float *tmp) {
    CI_FP_FLUSH_SCOPE();
    cpu_matmul(be, tmp, x, n, W);
    cpu_add(be, y, tmp, (int64_t)n * W->rows);
    poison(be, tmp, (size_t)n * (size_t)W->rows);
}

static void cpu_clamp_gu(ci_backend *be, float *g, float *u, int64_t count, float L);

static void cpu_matmul_swiglu_clamp(ci_backend *be, float *g, float *u, const float *x, int n, const ci_mat *Wg,
                                    const ci_mat *Wu, float limit) {
    CI_FP_FLUSH_SCOPE();
    matmul_gu(be, g, u, x, n, Wg, Wu);
    cpu_clamp_gu(be, g, u, (int64_t)n * Wg->rows, limit);
    cpu_swiglu(be, g, u, (int64_t)n * Wg->rows);
    poison(be, u, (size_t)n * (size_t)Wu->rows);
}

static void cpu_matmul_swiglu(ci_backend *be, float *g, float *u, const float *x, int n, const ci_mat *Wg,
                              const ci_mat *Wu) {
    CI_FP_FLUSH_SCOPE();
    matmul_gu(be, g, u, x, n, Wg, Wu);
    cpu_swiglu(be, g, u, (int64_t)n * Wg->rows);
    poison(be, u, (size_t)n * (size_t)Wu->rows);
}

static void cpu_norm_matmul_n(ci_backend *be, float *xn, const float *x, const float *norm_w, float eps, int count,
                              float *const *ys, int n, const ci_mat *const *Ws) {
    CI_FP_FLUSH_SCOPE();
    cpu_rmsnorm(be, xn, x, norm_w, n, (int)Ws[0]->cols, eps);
    cpu_matmul_n(be, count, ys, xn, n, Ws);
    poison(be, xn, (size_t)n * (size_t)Ws[0]->cols);
}

static void cpu_norm_matmul_swiglu(ci_backend *be, float *xn, const float *x, const float *norm_w, float eps, float *g,
                                   float *u, int n, const ci_mat *Wg, const ci_mat *Wu) {
    CI_FP_FLUSH_SCOPE();
    cpu_rmsnorm(be, xn, x, norm_w, n, (int)Wg->cols, eps);
    cpu_matmul_swiglu(be, g, u, xn, n, Wg, Wu);
    poison(be, xn, (size_t)n * (size_t)Wg->cols);
}

static void cpu_norm_matmul_keep(ci_backend *be, float *xn, float *y, const float *x, const float *norm_w, float eps,
                                 int n, const ci_mat *W) {
    CI_FP_FLUSH_SCOPE();
    cpu_rmsnorm(be, xn, x, norm_w, n, (int)W->cols, eps);
    cpu_matmul(be, y, xn, n, W);
}

static void qk_rope_store_paged(ci_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv,
                                int hd, const float *q_norm, const float *k_norm, float eps, int rot_dim,
                                const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style,
                                float *kc, float *vc, int kv_stride, const ci_pages *pg, int pg_row) {
    if (q_norm) cpu_rmsnorm(be, q, q, q_norm, n * n_heads, hd, eps);
    if (k_norm) cpu_rmsnorm(be, k, k, k_norm, n * n_kv, hd, eps);
    cpu_rope(be, q, n, n_heads, hd, 0, rot_dim, pos, inv_freq, mscale, style);
    cpu_rope(be, k, n, n_kv, hd, 0, rot_dim, pos, inv_freq, mscale, style);
    void (*h)(const float *, int64_t, uint16_t *) = be->kv_f16 ? cpu(be)->k->to_f16 : NULL;   /* the GQA cache's halves */
    kv_store_paged(kc, kv_stride, k, n_kv * hd, n, pos, pg, pg_row, h);
    kv_store_paged(vc, kv_stride, v, n_kv * hd, n, pos, pg, pg_row, h);
}

static void cpu_qk_rope_store(ci_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv, int hd,
                              const float *q_norm, const float *k_norm, float eps, int rot_dim, const int32_t *pos,
                              const float *inv_freq, float mscale, ci_rope_style style, float *kc, float *vc,
                              int kv_stride) {
    CI_FP_FLUSH_SCOPE();
    qk_rope_store_paged(be, q, k, v, n, n_heads, n_kv, hd, q_norm, k_norm, eps, rot_dim, pos, inv_freq, mscale, style,
                        kc, vc, kv_stride, NULL, 0);
}

/* qk_rope_store then attention_pos; a batch step's rows one by one (n = 1), each against its
 * own cache (kv_tab) or its own block table (per-row pages). */
static void cpu_rope_attend(ci_backend *be, float *out, float *q, float *k, const float *v, int n, int n_heads,
                            int n_kv, int hd, const float *q_norm, const float *k_norm, float eps, int rot_dim,
                            const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style, float *kc,
                            float *vc, float *const *kv_tab, const ci_pages *pages, int kv_stride, int max_keys,
                            float scale) {
    CI_FP_FLUSH_SCOPE();
    (void)max_keys;
    const size_t QD = (size_t)n_heads * hd, KD = (size_t)n_kv * hd;
    if (!kv_tab && !(pages && pages->per_row)) {
        qk_rope_store_paged(be, q, k, v, n, n_heads, n_kv, hd, q_norm, k_norm, eps, rot_dim, pos, inv_freq, mscale,
                            style, kc, vc, kv_stride, pages, 0);
        attn_paged(be, out, q, kc, vc, n, pos, n_heads, n_kv, hd, kv_stride, scale, pages, 0, be->kv_f16);
        poison(be, q, (size_t)n * QD);
        poison(be, k, (size_t)n * KD);
        return;
    }
    for (int t = 0; t < n; t++)
        qk_rope_store_paged(be, q + t * QD, k + t * KD, v + t * KD, 1, n_heads, n_kv, hd, q_norm, k_norm, eps, rot_dim,
                            pos + t, inv_freq, mscale, style, kv_tab ? kv_tab[2 * t] : kc,
                            kv_tab ? kv_tab[2 * t + 1] : vc, kv_stride, pages, t);
    for (int t = 0; t < n; t++)
        attn_paged(be, out + t * QD, q + t * QD, kv_tab ? kv_tab[2 * t] : kc, kv_tab ? kv_tab[2 * t + 1] : vc, 1, pos + t,
                   n_heads, n_kv, hd, kv_stride, scale, pages, t, be->kv_f16);
    poison(be, q, (size_t)n * QD);
    poison(be, k, (size_t)n * KD);
}

/* ---- construction --------------------------------------------------------------------- */

static const cpu_kernels *pick_kernels(ci_isa isa) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
    /* F16C is not a __builtin_cpu_supports name in every compiler; every AVX2 CPU has it,
     * so AVX2 + FMA stands for AVX2 + FMA + F16C. */
    int has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int hasbf16 = has512 && __builtin_cpu_supports("avx512bf16");
    switch (isa) {
    case CI_ISA_AUTO: return has512 ? &cpu_kernels_avx512 : has2 ? &cpu_kernels_avx2 : &cpu_kernels_scalar;
    case CI_ISA_AVX512BF16: return hasbf16 ? &cpu_kernels_avx512bf16 : NULL;
    case CI_ISA_AMXBF16: return hasbf16 && cpu_amx_usable() ? &cpu_kernels_amxbf16 : NULL;
    case CI_ISA_SCALAR: return &cpu_kernels_scalar;
    case CI_ISA_AVX2: return has2 ? &cpu_kernels_avx2 : NULL;
    case CI_ISA_AVX512: return has512 ? &cpu_kernels_avx512 : NULL;
    }
    return NULL;
#else
    return isa == CI_ISA_AUTO || isa == CI_ISA_SCALAR ? &cpu_kernels_scalar : NULL;
#endif
}

static const cpu_qkernels *pick_qkernels(const cpu_kernels *k) {
#if defined(__x86_64__)
    if (k == &cpu_kernels_avx512 || k == &cpu_kernels_avx512bf16 || k == &cpu_kernels_amxbf16) return &cpu_qkernels_avx512;
    if (k == &cpu_kernels_avx2) return &cpu_qkernels_avx2;
#endif
    (void)k;
    return &cpu_qkernels_scalar;
}

/* ---- the 16-bit decode prefetch rule, measured ---------------------------------------------
 *
 * On AMD CPUs a decode tile of short rows (up to 4 KiB) prefetches the next tile in byte order
 * (kernels_avx512.c). On the 2-vCPU Zen 5 development VM that was 15-35% faster than the per-row
 * distance on one host (2026-12-04, twentieth session) and 25-35% slower on another host of the
 * same CPU model (2026-12-04, twenty-sixth session: LFM2-8B-A1B dims decode 19-20 -> 25.6-27
 * tok/s with the rule off; bench/RESULTS.md). So a model that streams enough 16-bit weights
 * measures it once: bf16 matrices of 2048, 1024 and 512 columns (32 x 16 MiB, rotated: with 4 x
 * 16 MiB the copies came partly from the VM's cache and both rules read 35-38 GB/s, where the
 * model's weights read 20-24 with the rule and 27-34 without) decoded with and without the rule,
 * alternating, best of three (~0.7 s); a row length keeps the rule unless it is more than 5%
 * slower, and the rule goes to rows up to the longest length that keeps it (CINFER_CPU_TUNE_LOG
 * prints the rates to stderr). The 512-column rows (MoE experts' down projections: Qwen3.5's)
 * were added on 2026-12-05: on that host they read 23.5-23.8 GB/s with the rule and 17.9-19.3
 * without, where 1024 columns read 24-25 either way, so a tuner that measured only 1024 and 2048
 * took the rule away from them about one open in four (Qwen3.5-35B-A3B dims decode 15.6 tok/s
 * instead of 19-20). Prefetch only: no result depends on it. */
static int cpu_pf_tuned;   /* measured: later backends keep cpu_pf_next16 and cpu_seq16 */

static double tune_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The third way, measured beside the two (2026-12-05, twenty-ninth session): a one-token decode
 * of short rows read row after row (cpu_seq16, simd_template.h's seq_rows: one sequential stream,
 * no software prefetch; the tile's bits). On the Zen 5 VM that day, one thread, bf16 streamed from
 * DRAM (a throwaway kernel pair, GB/s): 512 columns 29-31.5 row after row against 19.7-22.5 in
 * tiles with the per-row prefetch, 1024 columns 28.5-30 against 25-29, but 2048 columns 29.6-29.8
 * against 34-35 and 3072-4096 columns 26.5-29 against 30-32. So each of the three row lengths times
 * all three ways; rows up to the longest length where row after row is fastest by 2% take it, and
 * the next-tile rule is chosen between the tile's two ways as before (it also serves the tiles that
 * have no row-after-row form: fp8, bf16 activations, more than one token). */
void ci_backend_cpu_tune(ci_backend *be, const void *mem, size_t len) {
    if (!be || be->is_device || (pf_next16_set && seq16_set) || cpu_pf_tuned || !cpu_amd) return;
    enum { COPIES = 32, MIB16 = 16 << 20 };
    const int next0 = cpu_pf_next16, seq0 = cpu_seq16;
    /* the caller's resident bytes (a model's weights: whatever they hold, bf16 of any value
     * streams at the same rate, and the outputs are dropped; 64-byte aligned from its 16 MiB
     * steps when mem is), else 512 MiB of our own, whose allocation and first touch cost more
     * than the timing (~1.4 s of page clearing in the development VM) */
    uint16_t *own = NULL;
    const char *buf = mem;
    if (!mem || len < (size_t)COPIES * MIB16 || ((uintptr_t)mem & 63)) {
        own = aligned_alloc(64, (size_t)COPIES * MIB16);
        if (own) memset(own, 0x3c, (size_t)COPIES * MIB16);   /* real pages, not the shared zero page */
        buf = (const char *)own;
    }
    float *x = calloc(2048, sizeof *x), *y = malloc((MIB16 / (2 * 512)) * sizeof *y);   /* a row each of the 512-column matrix */
    if (buf && x && y) {
        int keep[3], seq[3];
        const int log = getenv("CINFER_CPU_TUNE_LOG") != NULL;
        for (int c = 0; c < 3; c++) {
            const int64_t cols = 2048 >> c;
            ci_mat W = { .dtype = CI_BF16, .rows = MIB16 / (2 * cols), .cols = cols };
            double best[3] = { 1e30, 1e30, 1e30 };   /* tile with the per-row distance, tile with the next-tile rule, row after row */
            for (int round = 0; round < 3; round++)
                for (int way = 2; way >= 0; way--) {
                    cpu_pf_next16 = way == 1 ? 4096 : 0;
                    cpu_seq16 = way == 2 ? 4096 : 0;
                    double t = tune_now();
                    for (int k = 0; k < COPIES; k++) {
                        W.data = buf + (size_t)k * MIB16;
                        be->matmul(be, y, x, 1, &W);
                    }
                    t = tune_now() - t;
                    if (t < best[way]) best[way] = t;
                }
            keep[c] = best[1] <= 1.05 * best[0];
            seq[c] = 1.02 * best[2] < (best[0] < best[1] ? best[0] : best[1]);
            if (log)
                fprintf(stderr, "cpu tune: bf16 rows of %lld columns streamed at %.1f GB/s with the next-tile rule, %.1f without, "
                        "%.1f row after row\n", (long long)cols, COPIES * (double)MIB16 / best[1] / 1e9,
                        COPIES * (double)MIB16 / best[0] / 1e9, COPIES * (double)MIB16 / best[2] / 1e9);
        }
        /* each rule to rows up to the longest length that keeps it */
        cpu_pf_next16 = pf_next16_set ? next0 : keep[0] ? 4096 : keep[1] ? 2048 : keep[2] ? 1024 : 0;
        cpu_seq16 = seq16_set ? seq0 : seq[0] ? 4096 : seq[1] ? 2048 : seq[2] ? 1024 : 0;
        cpu_pf_tuned = 1;
    } else {   /* no memory for it: the defaults ci_backend_cpu_new set stay */
        cpu_pf_next16 = next0;
        cpu_seq16 = seq0;
    }
    free(own);
    free(x);
    free(y);
}

int ci_backend_cpu_next_tile_bytes(void) { return cpu_pf_next16; }
int ci_backend_cpu_seq_bytes(void) { return cpu_seq16; }

int ci_backend_cpu_amx_mlx(ci_backend *be) { return ci_backend_cpu_amx_mlx_act(be, 16); }

int ci_backend_cpu_amx_mlx_act(ci_backend *be, int act_bits) {
    cpu_backend *b = cpu(be);
#if defined(__x86_64__)
    __builtin_cpu_init();
    const char *pt = getenv("CINFER_CPU_MLX_PTILES");   /* the params copy, both forms below */
    if (b->qk == &cpu_qkernels_avx512 && __builtin_cpu_supports("avx512vnni")) {
        /* the tiles where the CPU grants them (CINFER_CPU_MLX_TILES=0: VNNI there too) */
        const char *mt = getenv("CINFER_CPU_MLX_TILES");
        const int tiles = cpu_amx_int8_usable() && !(mt && !strcmp(mt, "0"));
        b->amx_mlx = tiles ? 1 : 2;
        b->amx_ptiles = !(pt && !strcmp(pt, "0"));
        b->amx_act8 = act_bits == 8;
        snprintf(b->name_buf, sizeof b->name_buf, "%s-%s-mlx%s",
                 b->k == &cpu_kernels_avx512bf16 ? "cpu-avx512-bf16" : b->k == &cpu_kernels_amxbf16 ? "cpu-amx-bf16" : "cpu-avx512",
                 tiles ? "amx" : "vnni", b->amx_act8 ? "8" : "");
        b->base.name = b->name_buf;
        return 1;
    }
    if (b->qk == &cpu_qkernels_avx512 || b->qk == &cpu_qkernels_avx2) {   /* no VNNI: mlx_avx2.c's kernels */
        b->i16 = act_bits == 8 ? &cpu_mlx8kernels_avx2 : &cpu_mlxkernels_avx2;
        b->amx_ptiles = !(pt && !strcmp(pt, "0"));
        b->base.name = b->qk == &cpu_qkernels_avx2 ? (act_bits == 8 ? "cpu-avx2-mlx8" : "cpu-avx2-mlx")
                                                   : (act_bits == 8 ? "cpu-avx512-avx2-mlx8" : "cpu-avx512-avx2-mlx");
        return 1;
    }
#endif
    (void)b;
    return 0;
}

void ci_backend_cpu_kv_f16(ci_backend *be) { be->kv_f16 = 1; }

int ci_backend_cpu_int16_act(ci_backend *be) {
    cpu_backend *b = cpu(be);
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (b->qk == &cpu_qkernels_avx512 && __builtin_cpu_supports("avx512vnni")) {
        b->i16 = &cpu_i16kernels_avx512vnni;
        b->base.name = b->k == &cpu_kernels_avx512bf16 ? "cpu-avx512-bf16-int16"
                       : b->k == &cpu_kernels_amxbf16  ? "cpu-amx-bf16-int16"
                                                        : "cpu-avx512-int16";
        return 1;
    }
    if (b->qk == &cpu_qkernels_avx512 || b->qk == &cpu_qkernels_avx2) {   /* the AVX2 kernel needs no VNNI */
        b->i16 = &cpu_i16kernels_avx2;
        b->base.name = b->qk == &cpu_qkernels_avx2 ? "cpu-avx2-int16" : "cpu-avx512-int16";
        return 1;
    }
#endif
    (void)b;
    return 0;
}

static void cpu_free(ci_backend *be) {
    cpu_backend *b = cpu(be);
    if (!b) return;
    if (b->slots)
        for (int i = 0; i < b->n_slots; i++) {
            free(b->slots[i].pack);
            free(b->slots[i].qx);
            free(b->slots[i].qpack);
            free(b->slots[i].scores);
        }
    free(b->slots);
    cpu_moe_tmp_free(b->moe_tmp);
    cpu_mla_tmp_free(b->mla_tmp);
    cpu_amx_ptab_free(b->ptab);
    free(b->rope.cs);
    free(b->rope.sn);
    free(b->rope.pos);
    free(b->mm_x);
    ci_pool_free(b->base.pool);
    free(b);
}

/* The recurrent families' ops with their scratch arguments poisoned afterwards (poison): bcx
 * and the window of shortconv, causal_conv's window, ssd_scan's and deltanet's scratch, and
 * deltanet's mix / b / a ("scratch afterwards" in backend.h). */
static void shortconv_p(ci_backend *be, float *y, float *bcx, int n, int dim, int K, const float *taps,
                        const float *in_bias, const float *conv_bias, float *state, float *const *states,
                        float *scratch) {
    cpu_shortconv(be, y, bcx, n, dim, K, taps, in_bias, conv_bias, state, states, scratch);
    poison(be, bcx, (size_t)n * 3 * (size_t)dim);
    poison(be, scratch, (size_t)(K - 1 + n) * (size_t)dim);
}
static void causal_conv_p(ci_backend *be, float *y, const float *x, int n, int dim, int K, const float *taps,
                          float *state, float *const *states, int tab_step, float *scratch) {
    cpu_causal_conv(be, y, x, n, dim, K, taps, state, states, tab_step, scratch);
    poison(be, scratch, (size_t)(K - 1 + n) * (size_t)dim);
}
static void ssd_scan_p(ci_backend *be, float *y, const float *xbc, int xbc_stride, const float *dt, int dt_stride,
                       int n, const ci_ssd *s, float *state, float *const *states, int chunked, float *scratch) {
    cpu_ssd_scan(be, y, xbc, xbc_stride, dt, dt_stride, n, s, state, states, chunked, scratch);
    poison(be, scratch, ci_ssd_scratch_floats(n, s));
}
static void deltanet_p(ci_backend *be, float *z, float *mix, float *b, float *a, int n, const ci_deltanet *L,
                       float *S, float *const *states, int tab_step, int recurrent, float *scratch) {
    cpu_deltanet(be, z, mix, b, a, n, L, S, states, tab_step, recurrent, scratch);
    poison(be, mix, (size_t)n * (size_t)(2 * L->hk * L->dk + L->hv * L->dv));
    poison(be, b, (size_t)n * (size_t)L->hv);
    poison(be, a, (size_t)n * (size_t)L->hv);
    poison(be, scratch, ci_deltanet_scratch_floats(L, n));
}

ci_backend *ci_backend_cpu_new(int n_threads, ci_isa isa) {
    const cpu_kernels *k = pick_kernels(isa);
    if (!k) return NULL;
    cpu_init_tables();
    const char *nt = getenv("CINFER_CPU_PF_NEXT_TILE");
    int amd = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    amd = __builtin_cpu_is("amd");
#endif
    cpu_amd = amd;
    pf_next16_set = nt && (!strcmp(nt, "0") || !strcmp(nt, "1"));
    cpu_pf_next_tile = pf_next16_set ? nt[0] == '1' : amd;
    if (!cpu_pf_tuned || pf_next16_set) cpu_pf_next16 = cpu_pf_next_tile ? 4096 : 0;   /* a measurement stays */
    const char *sq = getenv("CINFER_CPU_SEQ");
    seq16_set = sq && (!strcmp(sq, "0") || !strcmp(sq, "1"));
    if (seq16_set) cpu_seq16 = sq[0] == '1' ? 4096 : 0;
    else if (!cpu_pf_tuned) cpu_seq16 = amd ? 2048 : 0;   /* a measurement stays */
    const char *aq = getenv("CINFER_CPU_ATTN_QB");
    attn_qb_on = !(aq && !strcmp(aq, "0"));
    const char *ar = getenv("CINFER_CPU_ATTN_ROWS");
    attn_rows_on = !(ar && !strcmp(ar, "0"));

    const char *b16 = getenv("CINFER_CPU_BT16_N");
    if (b16 && atoi(b16) >= 0 && atoi(b16) <= 4096) cpu_bt16_n = atoi(b16);
    const char *ps = getenv("CINFER_CPU_PAR_SHARED");
    par_shared = ps && !strcmp(ps, "1");
    const char *r8 = getenv("CINFER_CPU_ROWS8");
    cpu_rows8 = !(r8 && !strcmp(r8, "0"));
    const char *rs = getenv("CINFER_CPU_ROWS_N");
    const int rn = rs ? atoi(rs) : 0;
    if (rn >= CPU_TILE_T && rn <= 4096) cpu_rows_max_n = rn;
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->k = k;
    b->qk = pick_qkernels(k);
    b->base.name = k->name;
    b->base.pool = ci_pool_new(n_threads);
    if (!b->base.pool) goto fail;
    ci_pool_set_flush(b->base.pool, 1);   /* the workers' half of fpmode.h; each op's CI_FP_FLUSH_SCOPE the caller's */
    b->n_slots = ci_pool_size(b->base.pool);
    b->base.n_threads = b->n_slots;
    const char *pz = getenv("CINFER_CPU_POISON_SCRATCH");
    b->poison = pz && !strcmp(pz, "1");
    b->slots = calloc((size_t)b->n_slots, sizeof *b->slots);
    if (!b->slots) goto fail;
    for (int i = 0; i < b->n_slots; i++) {
        b->slots[i].pack = aligned_alloc(64, PACK_ROWS * KC * sizeof(float));
        b->slots[i].scores = aligned_alloc(64, CPU_TILE_T * ATTN_BLOCK * sizeof(float));
        b->slots[i].qx = aligned_alloc(64, CPU_TILE_T * KC * sizeof(float));
        b->slots[i].qpack = aligned_alloc(64, ITEM_ROWS * KC * sizeof(float));
        if (!b->slots[i].pack || !b->slots[i].scores || !b->slots[i].qx || !b->slots[i].qpack) goto fail;
    }
    b->base.matmul = cpu_matmul;
    b->base.rmsnorm = cpu_rmsnorm;
    b->base.rope = cpu_rope;
    b->base.attention = cpu_attention;
    b->base.swiglu = cpu_swiglu;
    b->base.clamp_gu = cpu_clamp_gu;
    b->base.embed = cpu_embed;
    b->base.add = cpu_add;
    b->base.matmul_xw = cpu_matmul_xw_any;   /* plain W: cpu_matmul_xw */
    b->base.free = cpu_free;
    b->base.alloc = cpu_alloc;
    b->base.buf_free = cpu_buf_free;
    b->base.upload = cpu_upload;
    b->base.download = cpu_download;
    b->base.copy = cpu_memcpy;
    b->base.copy_2d = cpu_copy_2d;
    b->base.weight = cpu_weight;
    b->base.weight_q = cpu_weight_q;
    b->base.kv_store = cpu_kv_store;
    b->base.attention_pos = cpu_attention_pos;
    b->base.matmul_n = cpu_matmul_n;
    b->base.matmul_acc = cpu_matmul_acc;
    b->base.matmul_swiglu = cpu_matmul_swiglu;
    b->base.matmul_swiglu_clamp = cpu_matmul_swiglu_clamp;
    b->base.norm_matmul_n = cpu_norm_matmul_n;
    b->base.norm_matmul_swiglu = cpu_norm_matmul_swiglu;
    b->base.norm_matmul_keep = cpu_norm_matmul_keep;
    b->base.qk_rope_store = cpu_qk_rope_store;
    b->base.rope_attend = cpu_rope_attend;
    b->base.argmax = cpu_argmax;
    b->base.status = cpu_status;
    b->base.moe_route = cpu_moe_route;
    b->base.moe_experts = cpu_moe_experts;
    b->base.rmsnorm_strided = cpu_rmsnorm_strided;
    b->base.mla_rope = cpu_mla_rope;
    b->base.head_norm_rope = cpu_head_norm_rope;
    b->base.layernorm = cpu_layernorm;
    b->base.mla_absorb_q = cpu_mla_absorb_q;
    b->base.mla_out_heads = cpu_mla_out_heads;
    b->base.kv_store_paged = cpu_kv_store_paged;
    b->base.mla_attend = cpu_mla_attend;
    b->base.dsa_attend = cpu_dsa_attend;
    b->base.shortconv = b->poison ? shortconv_p : cpu_shortconv;
    b->base.add_bias = cpu_add_bias;
    b->base.mamba_conv = cpu_mamba_conv;
    b->base.ssd_scan = b->poison ? ssd_scan_p : cpu_ssd_scan;
    b->base.gated_rmsnorm = cpu_gated_rmsnorm;
    b->base.relu2 = cpu_relu2;
    b->base.causal_conv = b->poison ? causal_conv_p : cpu_causal_conv;
    b->base.deltanet = b->poison ? deltanet_p : cpu_deltanet;
    b->base.deltanet_unfuse = cpu_deltanet_unfuse;
    b->base.split_halves = cpu_split_halves;
    b->base.sigmoid_mul = cpu_sigmoid_mul;
    b->base.sigmoid_gate_add = cpu_sigmoid_gate_add;
    b->base.hc_spread = cpu_hc_spread;
    b->base.hc_pre = cpu_hc_pre;
    b->base.hc_post = cpu_hc_post;
    b->base.hc_mix_pre = cpu_hc_mix_pre;
    b->base.v4_compress = cpu_v4_compress;
    b->base.v4_index = cpu_v4_index;
    b->base.v4_attend = cpu_v4_attend;
    b->base.matmul_groups = cpu_matmul_groups;
    /* graph_* stay NULL (nothing to capture), is_device 0, pool_free NULL: calloc'd */
    return &b->base;
fail:
    cpu_free(&b->base);
    return NULL;
}
