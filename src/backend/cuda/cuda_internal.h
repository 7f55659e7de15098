/* cuda_internal.h — what the CUDA backend's translation units share: the backend struct,
 * the error check, and the launchers each .cu file provides to cuda_backend.cu.
 *
 * Everything runs on one stream (cb->stream) so that ops are ordered and a decode step can
 * be captured as one graph. Launchers never synchronise and never allocate while a graph is
 * being recorded, except the grow-only scratch buffers (cb_scratch), which are sized on the
 * first eager call of a shape and only grow (capture runs in relaxed mode, where cudaMalloc
 * is allowed; a recorded graph keeps the buffer it was recorded with, so scratch is never
 * freed while the backend lives — old buffers go on a list freed at the end). */
#ifndef CI_CUDA_INTERNAL_H
#define CI_CUDA_INTERNAL_H
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "../backend.h"
}

struct cb_weight {           /* one uploaded host range */
    const void *host;
    void *dev;
    size_t bytes;
    int part;                /* dev lies inside another entry's allocation (weight_stack): not freed alone */
};

struct cb_scratch {          /* grow-only device scratch */
    void *p;
    size_t bytes;
};

struct cb_moe_tab;
struct cb_qmoe_tab;

struct cb_qd {               /* an MLX-quantized tensor's descriptor, placed (weight_q) */
    const ci_qdesc *host;
    ci_qdesc *dev;           /* host struct, its scales / biases in device memory */
    size_t param_bytes;
};

enum { CB_SIDE = 3 };      /* side streams: q / k / v (or gate / up) of one input side by side */

struct cuda_be {
    ci_backend base;         /* first: a ci_backend * is a cuda_be * */
    int device;
    int sm_count;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;           /* cuBLAS workspace (fixed, so captured GEMMs need no allocation) */
    /* side streams for a group's GEMMs of one input (gemm16_group): GEMM i > 0 on side[i - 1]
     * with its own handle and workspace (the same size as blas_ws: cuBLAS picks the same
     * algorithm, so the same bits), forked from and joined back into `stream` by events */
    cudaStream_t side[CB_SIDE];
    cublasHandle_t side_blas[CB_SIDE];
    void *side_ws[CB_SIDE];
    cudaEvent_t fork_ev, join_ev[CB_SIDE];
    cb_weight *weights;      /* sorted by host address */
    int n_weights, cap_weights;
    size_t weight_bytes;
    cb_qd *qds;              /* weight_q's copies, sorted by host address */
    int n_qds, cap_qds;
    struct cb_qmoe_tab *qmoe_tabs; /* quant.cu: MLX-quantized experts, one per MoE layer seen */
    void **retired;          /* scratch buffers replaced by bigger ones (a graph may still use them) */
    int n_retired, cap_retired;
    cb_scratch xconv;        /* activations converted to bf16 / f16 for a GEMM */
    cb_scratch stack_y;      /* one GEMM's rows over stacked weights (gemm16_group), before they are split */
    cb_scratch wdeq;         /* an fp8 weight widened to bf16 for one prefill GEMM, or a layer's
                              * fp8 experts widened for one grouped MoE GEMM (moe.cu) */
    cb_scratch attn_part;    /* split-K attention partials */
    cb_scratch attn_fpart;   /* attn_flash.cu: the key segments' partials of a split prefill */
    cb_scratch attn_h16;     /* attn_flash.cu: the f16 form's keys and values, [n_kv][keys][hd] each */
    cb_scratch hc_part;      /* hc_mix_pre's parts (v4.cu) */
    cb_scratch argmax_part;  /* argmax's per-block bests */
    cb_scratch moe_h;        /* moe.cu: the experts' activations [n·top_k, inter] */
    cb_scratch qf_cnt;       /* moe_fused_qt.cu: its tiles' arrival counts (zero at rest) */
    cb_scratch moe_work[6];  /* moe_gemm.cu: its own scratch (sorted entries, gathered rows, ...) */
    struct cb_moe_tab *moe_tabs; /* moe.cu: one per MoE layer seen (a list) */
    cb_scratch mla_work[3];  /* mla.cu, dsa.cu, v4.cu: attention partials, index scores, DSA selections */
    cb_scratch ssd_work;     /* mamba.cu: the chunked SSD's per-chunk dt, decays and states */
    cb_scratch dn_work;      /* deltanet.cu: the chunked form's per-chunk products of a window */
    int capturing;
    int failed;              /* sticky: last_error holds why */
    /* tuning switches, read once from the environment at start (for side-by-side runs of
     * one binary; the defaults are the measured best, see cuda_backend.cu):
     * CINFER_CUDA_PDL=0|1, CINFER_CUDA_NORM_FUSE=0|1, CINFER_CUDA_FP8_ROWS2=0|1, CINFER_CUDA_MLA_DECODE=0|1, CINFER_CUDA_MLA_COMB=0|32..1024, CINFER_CUDA_MLA_TC=0|1|2, CINFER_CUDA_MLA_CSLICE=0|1, CINFER_CUDA_MLA_TC_RUN=1..64, CINFER_CUDA_MLA_TC_MIN=0..,
     * CINFER_CUDA_MOE_PIPE=0|1, CINFER_CUDA_MOE_SPLIT=0|1, CINFER_CUDA_DSA_SELECT=0|1, CINFER_CUDA_DSA_SCORE=0|1,
 * CINFER_CUDA_ATTN_DECODE2=0|1, CINFER_CUDA_ROPE_FUSE=0|1, CINFER_CUDA_MOE_FUSE=0|1, CINFER_CUDA_MOE_FUSE_QT=0|1, CINFER_CUDA_GEMM_STREAMS=0|1, CINFER_CUDA_GEMM_STACK=0|1, CINFER_CUDA_FLASH2=0|1, CINFER_CUDA_FLASH_SPLIT=0|1, CINFER_CUDA_FLASH_LDM=0|1, CINFER_CUDA_FLASH_GQA=0|1, CINFER_CUDA_SSD_CHUNK=0|1, CINFER_CUDA_DN_CHUNK=0|1|N */
    int pdl;                 /* launch with programmatic dependent launch */
    int norm_fuse;           /* RMSNorm inside the GEMV (norm_matmul_*) */
    int fp8_rows2;           /* one-token fp8 GEMVs: two weight rows per warp (gemv.cu) */
    int mla_decode;          /* MLA attention of <= 4 rows: the per-warp decode kernel (mla.cu) */
    int mla_comb;            /* MLA attention's combine: columns a block, 0 the whole row (mla.cu) */
    int mla_cslice;          /* MLA attention's combine: the chunks sliced among 8 warps, 32 columns a block (mla.cu) */
    int mla_tc;              /* MLA attention on tensor cores (mla_tc.cu): 0 never, 1 rows <= 4, 2 any rows */
    int mla_tc_run;          /* its runs: at least this many 32-key tiles each */
    int mla_tc_min;          /* its decode rows (<= 4): only where max_keys is at least this */
    int moe_pipe;            /* routed experts' down at decode: two load buffers (moe.cu) */
    int moe_split;           /* routed experts' down at decode: a row over 4 warps (moe.cu) */
    int q_pair;              /* MLX-quantized GEMVs at batch 1: two rows per x load (quant.cu) */
    int dsa_select;          /* DSA top-k: radix select over the row's keys in shared memory (dsa.cu) */
    int dsa_score;           /* DSA index scores: four lanes per key, no per-head warp reduction (dsa.cu) */
    int flash2;              /* prefill attention with S, P and O in registers (attn_flash.cu) */
    int flash_split;         /* its keys in segments when the blocks are few (attn_flash.cu) */
    int flash_bk;            /* CINFER_CUDA_FLASH_BK=16|32: its key tile at head_dim 128 (attn_flash.cu) */
    int flash_ldm;           /* its tiles converted to f16 once and read by ldmatrix (attn_flash.cu) */
    int flash_gqa;           /* a block takes every head of a kv group (fewer positions each) (attn_flash.cu) */
    int flash_bq;            /* CINFER_CUDA_FLASH_BQ=64|128: its query rows a block; 0 (default): 128 on long key walks */
    int flash_segmin;        /* CINFER_CUDA_FLASH_SEGMIN: the fewest keys of a key segment (default 256) */
    int flash_h16;           /* CINFER_CUDA_FLASH_H16=0|3|4: the keys to f16 once a launch, then 3 / 4 f16 stages,
                              * always (3, 4) or never (0); unset (-1): 3 stages from FLASH_H16_ROWS rows (attn_flash.cu) */
    int gemm_streams;        /* a group's 16-bit GEMMs side by side on the side streams (cuda_backend.cu) */
    int gemm_stack;          /* a group's stacked 16-bit weights as one GEMM (gemv.cu cb_gemm16_stack) */
    int attn_decode2;        /* decode attention (<= 8 rows): attn_decode2_kernel, flash decoding (attn.cu) */
    int rope_fuse;           /* rope_attend's one-row steps: decode2 norms / rotates q and stores the new key itself */
    int moe_fuse;            /* moe_norm_experts at one row in one launch (moe_fused.cu) */
    int mla_prep;            /* mla_prepare at <= 4 rows in one launch (mla_heads.cu) */
    int moe_shared;          /* moe_norm_experts with a shared expert: folded into moe_fused's launch */
    int moe_fuse_qt;         /* moe_norm_experts of fp8 experts at one row in one launch (moe_fused_qt.cu) */
    int mf_early;            /* moe_fused: a shared expert's units before the routing, behind the barrier */
    int route_fuse;          /* moe_norm_experts' routing inside the quantized / fp8 experts' gate+up launch */
    unsigned *gbar;          /* device: moe_fused.cu's grid barrier counter, zeroed at start */
    int gemv1;               /* CINFER_CUDA_GEMV1=1..6: one-token GEMVs of <= 2048 columns (not the head) forced to
                              * one kernel shape; 7: the rules before the 1025..2048-column one (gemv.cu; an
                              * experiment knob, 0 = the measured rules) */
    int ssd_chunk;           /* Mamba2 prompts through the chunked SSD (mamba.cu) */
    int dn_chunk;            /* DeltaNet prompts of >= dn_chunk tokens in the chunked form, 0: never (deltanet.cu) */
    char name[300];
};

/* Records the first failure (sticky) as "CUDA: <what>: <cuda error string>". Returns 1 if
 * this or an earlier call failed. */
int cb_fail(cuda_be *cb, const char *what, cudaError_t e);
#define CB_CHECK(cb, what, call) cb_fail((cb), (what), (call))
/* After a launch: cudaGetLastError, recorded like cb_fail. */
int cb_launched(cuda_be *cb, const char *what);
/* A CUDA switch from the environment: "0" or "1", anything else (or unset) dflt. */
int cb_env_switch(const char *name, int dflt);
/* an integer tuning knob: the value of `name` when it is an integer in [lo, hi], else dflt */
int cb_env_int(const char *name, int dflt, int lo, int hi);
/* Device scratch of at least `bytes`, grown (never shrunk) on demand; NULL on failure. */
void *cb_scratch_get(cuda_be *cb, cb_scratch *s, size_t bytes);

/* Programmatic dependent launch: every kernel is launched with the PDL attribute and starts
 * with pdl_enter(): it waits there until the kernels before it have finished and their
 * writes are visible (griddepcontrol.wait), then lets the next kernel's blocks be scheduled
 * (launch_dependents), so a kernel's launch and prologue overlap the tail of the one before
 * instead of following it: decode steps are chains of short kernels. Nothing may read
 * global memory before pdl_enter(). */
#ifndef CB_PDL
#define CB_PDL 1          /* default of cuda_be.pdl (CINFER_CUDA_PDL) */
#endif
#ifndef CB_GEMM_STACK
/* q / k / v placed one after another (backend.h weight_stack) multiplied as one matrix when a
 * GEMM takes them (more than one row of 16-bit weights). cuBLAS on an H100 (2026-12-05,
 * bench/gemm_small_cuda.cu, Qwen3-8B dims): q, k, v one after another 39..46 us at 8..216
 * rows, one [6144, 4096] GEMM 23..28 us (k and v alone ~14 us each: a latency floor). Whole
 * model, H200, 12 layers: prefill of 124 rows after 1372 +4..6%, batched decode +0.5..2%. */
#define CB_GEMM_STACK 1   /* default of cuda_be.gemm_stack (CINFER_CUDA_GEMM_STACK) */
#endif
#ifndef CB_GEMM_STREAMS
/* The GEMMs of one input (q / k / v, gate / up; prefill chunks and batched steps of more than
 * one row of 16-bit weights) launched on side streams so that they run side by side: at a few
 * dozen rows each is a few dozen tiles, a fraction of the SMs. Measured on an H100 (2026-12-05,
 * Qwen3-8B dims 12 layers bf16, alternating, 2 rounds, bench/RESULTS.md): batched decode of 8
 * sequences 2,743 / 2,725 -> 2,905 / 2,884 tok/s, of 32 9,442 / 9,481 -> 9,715 / 9,838, of 64
 * level; prefill of 124..4096 rows level (cuBLAS's split-K forms already fill the SMs there). */
#define CB_GEMM_STREAMS 1 /* default of cuda_be.gemm_streams (CINFER_CUDA_GEMM_STREAMS) */
#endif
#ifndef CB_NORM_FUSE
/* RMSNorm inside the GEMV (norm_matmul_*). Measured on the H200 (2026-12-01,
 * bench/RESULTS.md, tests/gpu/tune.sh, alternating): Qwen3-0.6B decode 983-989 tok/s on
 * vs 926-936 off, with one weight row per warp (with two or four rows per warp it was a
 * wash: each block's RMS pass over x then delayed a longer weight stream). */
#define CB_NORM_FUSE 1    /* default of cuda_be.norm_fuse (CINFER_CUDA_NORM_FUSE) */
#endif
#ifndef CB_FP8_ROWS2
/* One-token fp8 GEMVs with two weight rows per warp (each x load serves both; fp8 reads four
 * x floats per weight byte, so a row per warp left them at 400-700 GB/s). Measured on the
 * H200 (2026-12-02, DeepSeek-V2-Lite dims, 3 layers, fp8, alternating): decode 2036 / 2063
 * tok/s on vs 1927 / 1934 off. */
#define CB_FP8_ROWS2 1    /* default of cuda_be.fp8_rows2 (CINFER_CUDA_FP8_ROWS2) */
#endif
#ifndef CB_MLA_DECODE
/* MLA attention of <= 4 query rows with n_heads x max_keys <= 128k through mla.cu's decode
 * kernel (a warp per run of keys, 2 heads per block) instead of the 16-head tiled one.
 * Measured on the H200 (2026-12-02, DeepSeek-V2-Lite dims, 3 layers, bf16, alternating):
 * decode 2332 / 2349 tok/s on vs 2166 / 2194 off at 512 tokens of context, 2132 / 2152 vs
 * 1861 / 1876 at 4096. */
#define CB_MLA_DECODE 1   /* default of cuda_be.mla_decode (CINFER_CUDA_MLA_DECODE) */
#endif
#ifndef CB_MLA_TC
/* MLA attention through mla_tc.cu's tensor-core kernel (16 heads a block, three-pass tf32
 * products) before mla.cu's CUDA-core kernels: 1 decode rows (<= 4) whose max_keys is at least
 * CB_MLA_TC_MIN, 2 also every longer chunk (prefill). Measured on an H100 (2026-12-07, ds14:
 * DeepSeek-V2-Lite dims + q_lora 1024, 14 layers bf16, alternating, bench/RESULTS.md): TC=0 /
 * tensor cores at every context / this default, decode after 4096 577 / 601 / 604-606 tok/s, after
 * 1024 633 / 634 / 633, after 512 649-651 / 642 / 652; prefill of 4096 10.8k / 15.0k / 15.0k, of
 * 512 24.7k / 27.8k / 27.8k. */
#define CB_MLA_TC 2       /* default of cuda_be.mla_tc (CINFER_CUDA_MLA_TC) */
#endif
#ifndef CB_MLA_TC_MIN
#define CB_MLA_TC_MIN 1024 /* default of cuda_be.mla_tc_min (CINFER_CUDA_MLA_TC_MIN) */
#endif
#ifndef CB_FLASH2
/* Prefill attention (head_dim 64 / 128 / 256) through attn_flash.cu's attn_flash_pipe_kernel
 * (scores, probabilities and output in registers, mma.sync) instead of attn.cu's
 * attn_flash_kernel (WMMA with S and O through shared memory). Measured: bench/RESULTS.md,
 * fourteenth session (the register form then staged its tiles as attn_flash2_kernel, replaced
 * in the twenty-first). */
#define CB_FLASH2 1       /* default of cuda_be.flash2 (CINFER_CUDA_FLASH2) */
#endif
#ifndef CB_FLASH_SPLIT
/* The pipelined prefill attention cuts the keys into segments (blocks of a segment each, then a
 * merge) when its (query tile, head) blocks number fewer than two an SM. Measured:
 * bench/RESULTS.md, twenty-first session. */
#define CB_FLASH_SPLIT 1  /* default of cuda_be.flash_split (CINFER_CUDA_FLASH_SPLIT) */
#endif
#ifndef CB_FLASH_LDM
/* The pipelined prefill attention's key tiles converted to f16 once a tile (all warps) and read
 * by ldmatrix, rather than converted per fragment and warp from the f32 stage (head_dim 64 /
 * 128). Measured equal (bench/RESULTS.md, twenty-first session): the tile loads bound it. */
#define CB_FLASH_LDM 1    /* default of cuda_be.flash_ldm (CINFER_CUDA_FLASH_LDM) */
#endif
#ifndef CB_FLASH_GQA
/* The pipelined prefill attention with a block per kv group (its G heads on 64 / G positions,
 * each K / V tile read once for G heads) rather than per head. Measured (bench/RESULTS.md,
 * twenty-first session): +10% at 344 rows after 1920 keys, +26% after 8192, level at depth 0. */
#define CB_FLASH_GQA 1    /* default of cuda_be.flash_gqa (CINFER_CUDA_FLASH_GQA) */
#endif
#ifndef CB_SSD_CHUNK
/* Mamba2 prompts (>= 32 tokens) through mamba.cu's chunked SSD instead of the token-by-token
 * scan. Measured: bench/RESULTS.md, fifteenth session. */
#define CB_SSD_CHUNK 1    /* default of cuda_be.ssd_chunk (CINFER_CUDA_SSD_CHUNK) */
#endif
#ifndef CB_DN_CHUNK
/* A DeltaNet prompt (one sequence) of at least this many tokens runs the chunked (UT
 * transform) form, shorter ones and decode steps the token-by-token recurrence.
 * CINFER_CUDA_DN_CHUNK=0: always the recurrence; =1: this default; =N >= 2: from N tokens on.
 * Not measured yet: an estimate (deltanet.cu) puts the break-even near two chunks, where the
 * chunked form's fixed cost (two launches per window, a 64-step triangular solve per head and
 * chunk, the first chunk's loads) meets the recurrence's ~0.2 us per token. */
#define CB_DN_CHUNK 128   /* default of cuda_be.dn_chunk (CINFER_CUDA_DN_CHUNK) */
#endif
#ifndef CB_MOE_PIPE
/* The routed experts' down kernel at decode with two load buffers. Measured on the H200
 * (2026-12-02, V2-Lite dims, 3 layers, alternating): fp8 2,192 / 2,191 tok/s on vs 2,160 /
 * 2,156 off; bf16 within noise (2,339 vs 2,327-2,336). */
#define CB_MOE_PIPE 1     /* default of cuda_be.moe_pipe (CINFER_CUDA_MOE_PIPE) */
#endif
#ifndef CB_MOE_SPLIT
/* The routed experts' down kernel at decode with each output row split over 4 warps
 * (moe.cu, down_kernel_split). Measured on the H200 (2026-12-02, DeepSeek-V2-Lite dims, 14
 * layers, bf16, decode after 512 tokens, alternating, 2 rounds): 610.8 / 611.4 tok/s on vs
 * 581.3 / 582.4 off (+5%). (Loading an expert's gate and up rows together in the gate+up
 * kernel, tried in the same run: 584.4 / 582.8, no gain, dropped.) */
#define CB_MOE_SPLIT 1    /* default of cuda_be.moe_split (CINFER_CUDA_MOE_SPLIT) */
#endif
#ifndef CB_Q_PAIR
/* MLX-quantized GEMVs of one token row with two weight rows per warp sharing each x chunk
 * (gate with up for the fused SwiGLU and the experts' gate+up; else rows 2w, 2w + 1): a 4-bit
 * row reads 8 x vectors per 16 bytes of codes. Same bits. Measured on the H200 (2026-12-02,
 * mlx4 Qwen3-30B-A3B dims, 12 layers, decode, alternating, 2 rounds) only with
 * CINFER_CUDA_Q_AFFINE_LOOP=0: 442.2 / 444.5 tok/s on vs 389.6 / 390.3 off; with the default
 * affine loop (463.9 / 461.1 without pairs) not measured together, so off until it is. */
#define CB_Q_PAIR 0       /* default of cuda_be.q_pair (CINFER_CUDA_Q_PAIR) */
#endif
#ifndef CB_DSA_SELECT
/* DSA's top-k of a row by an 8-bit radix select (at most four histogram passes) over its
 * keys staged in shared memory (rows of up to ~47k keys; longer ones from global memory in
 * each pass) instead of dsa_select_kernel's 34 passes over global memory. Same positions,
 * bit for bit (dsa.cu). Measured on the H200 (2026-12-02, V3.2 dims, 4 layers, decode after
 * 32768 tokens, alternating): 500 tok/s with it alone vs 409 with neither; with the score
 * kernel as well 920. */
#define CB_DSA_SELECT 1   /* default of cuda_be.dsa_select (CINFER_CUDA_DSA_SELECT) */
#endif
#ifndef CB_ATTN_DECODE2
/* Decode attention (<= 8 query rows, head_dim a multiple of 4 up to 256, 16-byte aligned rows)
 * through attn.cu's attn_decode2_kernel (flash decoding: a row's keys in about one wave of long
 * chunks, a warp's own online softmax) instead of attn_split_vec_kernel (32-key chunks, groups
 * <= 8) / attn_split_kernel (a thread per key row). Measured on the H200 (2026-12-02, decode,
 * alternating, 2 rounds, bench/RESULTS.md): Qwen3-30B-A3B dims 12 layers 604 / 609 tok/s on vs
 * 358 / 358 off after 32768 tokens, 803 / 805 vs 767 / 766 after 4096, 896 / 899 vs 862 / 866
 * after 512; LFM2-8B-A1B dims 1,446 / 1,445 vs 1,108 / 1,118 at 32k, 1,679 / 1,689 vs 1,665 /
 * 1,661 at 1k; Qwen3.5-35B-A3B dims 1,558 vs 1,294 at 32k, 1,707 vs 1,700 at 1k. */
#define CB_ATTN_DECODE2 1 /* default of cuda_be.attn_decode2 (CINFER_CUDA_ATTN_DECODE2) */
#endif
#ifndef CB_ROPE_FUSE
/* rope_attend's decode steps (one row, or rows each in its own cache) in one launch: the decode2
 * kernel norms and rotates the queries and stores the new key and value itself
 * (cb_rope_attend_fused, attn.cu d2_fuse) instead of qk_rope_store's launch before it; the same
 * bits (one arithmetic, hnr_finish: `cinfer logits --step` of five fixtures cmp-identical). H100,
 * 2026-12-06, decode after 512, alternating, 2 rounds: Qwen3-8B dims 12 layers 437.8 / 438.3 ->
 * 447.5 / 447.8 tok/s, Qwen3-30B-A3B dims 12 layers 841.6 / 842.0 -> 851.1 / 852.7 (after 4096
 * 775.5 -> 785.9). */
#define CB_ROPE_FUSE 1    /* default of cuda_be.rope_fuse (CINFER_CUDA_ROPE_FUSE) */
#endif
#ifndef CB_MOE_FUSE
/* a MoE block's routed part of one token row (norm, router, routing, experts) in one launch,
 * moe_fused.cu, instead of four; the same bits. H100, 2026-12-06, decode after 512, alternating,
 * two rounds: Qwen3-30B-A3B dims 12 layers 859.6 / 858.9 -> 871.0 / 875.0 tok/s, DeepSeek-V2-Lite
 * dims 14 layers 585.0 / 584.3 -> 593.5 / 593.0, Qwen3-30B-A3B after 4096 782.4 -> 802.6. */
#define CB_MOE_FUSE 1     /* default of cuda_be.moe_fuse (CINFER_CUDA_MOE_FUSE) */
#endif
#ifndef CB_MOE_SHARED
/* moe_norm_experts with a shared expert (DeepSeek's, Nemotron-H's, the σ-gated one of Qwen3-Next /
 * Qwen3.5-MoE) in moe_fused's launch (moe_fused.cu; an ungated one's down as the GEMV after it),
 * instead of moe_fused + the shared expert's launches (+ an add). Correct on an H100 (2026-12-07:
 * test_cuda_ops "moe_norm_experts shared" 16 / 0 against the CPU, GPU parity of the DeepSeek /
 * Nemotron-H / Qwen3-Next fixtures with it). Decode after 512, alternating, bench/RESULTS.md fiftieth
 * session: Qwen3.5-35B-A3B dims 8 layers 941.2 / 947.7 -> 976.6 / 976.4 tok/s, DeepSeek-V2-Lite dims
 * 14 layers 598.3 / 598.2 -> 613.5 / 614.0, Nemotron-3-Nano dims 12 layers 918.1 / 918.5 -> 930.1 /
 * 929.9 (the ungated ones' down in phase 3 had lost 6% / 13%). */
#define CB_MOE_SHARED 1   /* default of cuda_be.moe_shared (CINFER_CUDA_MOE_SHARED) */
#endif
#ifndef CB_MOE_FUSE_QT
/* moe_norm_experts of fp8 E4M3 experts (and an ungated fp8 shared expert: DeepSeek's) at one row in one
 * launch (moe_fused_qt.cu) instead of the router GEMV, the experts' pair and the shared expert's
 * two launches (+ an add); meant to give the same bits (test_cuda_ops "moe_norm_experts", "...
 * shared" check it with CINFER_CUDA_MOE_FUSE_QT=1). Off until it has run on a device: written in the
 * fifty-seventh session (2026-12-08), which was lent none; bench/device_runs/2026-12-08a-fusedqt.sh
 * is its first run (the op cases, memcheck, `logits --step` on / off, ds14f decode on / off). Flip
 * this and tests/gpu/test_cuda_ops.c's MOE_FUSE_QT_DEFAULT together. */
#define CB_MOE_FUSE_QT 0  /* default of cuda_be.moe_fuse_qt (CINFER_CUDA_MOE_FUSE_QT) */
#endif
#ifndef CB_MF_EARLY
/* moe_fused with a shared expert, its router rows a warp each (X <= 2048): the shared gate / up units
 * between a block's arrival at the first grid barrier and its wait (the barrier and the other blocks'
 * router tails hidden behind them), the routed units after the routing; the same bits (`logits
 * --step` of deepseek_v3, nemotron_h, qwen3_next, qwen3_5_moe_hub cmp-identical on / off). H100,
 * 2026-12-07, decode after 512, alternating: DeepSeek-V2-Lite dims 14 layers 615.6 / 617.7 -> 632.3 /
 * 635.3 tok/s, Qwen3.5-35B-A3B dims 8 layers 977.9 / 969.4 -> 996.2 / 994.5 (Nemotron-3-Nano dims,
 * four warps a router row: level, its form spilled; not taken there). */
#define CB_MF_EARLY 1     /* default of cuda_be.mf_early (CINFER_CUDA_MF_EARLY) */
#endif
#ifndef CB_MLA_PREP
/* mla_prepare at <= 4 rows in one launch (mla_heads.cu mla_prepare_kernel: the latent norm and
 * ropes, the absorbed queries, the latent store), instead of three; the same bits (test_cuda_ops
 * "mla_prepare" 34 / 0; `logits --step` of deepseek_v3, _nolora, _fp8, deepseek_v32 cmp-identical
 * on and off). An H100, 2026-12-07 (call zc): DeepSeek-V2-Lite dims (+ q_lora 1024) 14 layers bf16
 * decode 536.7, 536.9 -> 558.4, 557.4 tok/s (+3.8..4.0%). */
#define CB_MLA_PREP 1     /* default of cuda_be.mla_prep (CINFER_CUDA_MLA_PREP) */
#endif
#ifndef CB_ROUTE_FUSE
/* moe_norm_experts at 1..8 token rows whose experts the tensor-core decode pair takes (MLX 4- /
 * 8-bit, mxfp4, fp8): the routing done by every gate+up block for its token (route.cuh's
 * route_row, moe_route's bits), sel / w written by the kernel, instead of moe_route's launch
 * between the router and the experts (quant_mma_moe.cu). H100, 2026-12-06, decode after 512,
 * alternating: Qwen3-30B-A3B dims 12 layers mlx4 1,112.7 / 1,115.0 / 1,104.8 -> 1,143.8 / 1,141.2 /
 * 1,138.5 tok/s, DeepSeek-V2-Lite dims 14 layers fp8 676.3 / 672.9 -> 680.2 / 680.9. */
#define CB_ROUTE_FUSE 1   /* default of cuda_be.route_fuse (CINFER_CUDA_ROUTE_FUSE) */
#endif
#ifndef CB_DSA_SCORE
/* DSA's index scores with four lanes per key (each lane a fixed quarter of the key in
 * registers, queries broadcast from shared memory) instead of a warp per key with a 5-step
 * shuffle reduction per head; the same sums in the same order, bit for bit (dsa.cu).
 * Index head dims 16, 32, 64, 128 only (others keep the old kernel). Measured on the H200
 * (2026-12-02, V3.2 dims, 4 layers, after 32768 tokens): decode 583 tok/s alone vs 409 with
 * neither, 920 with both; prefill of the 32768 tokens 7,588 tok/s vs 2,896. */
#define CB_DSA_SCORE 1    /* default of cuda_be.dsa_score (CINFER_CUDA_DSA_SCORE) */
#endif
/* c[4] += A·B on tensor cores, one m16n8k16 tile (f16 operands, f32 accumulation) in the
 * fragment layouts of the PTX ISA: a0..a3 the rows (g, g+8) x columns (2t.., 2t+8..), b0 / b1
 * the columns (2t.., 2t+8..) of B's column g, c rows g / g+8, columns 2t, 2t+1 (g = lane / 4,
 * t = lane % 4). */
__device__ __forceinline__ void cb_mma_f16(float *c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                           unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* ldmatrix .x4 (four 8x8 b16 matrices; lanes 8i..8i + 7 give matrix i's row addresses, 16-byte
 * aligned) into r[0..3]; _t: each matrix transposed */
__device__ __forceinline__ void cb_ldsm4(unsigned *r, const void *smem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void cb_ldsm4_t(unsigned *r, const void *smem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

/* cp.async of 16 bytes global -> shared (L2 only); ok false: the 16 bytes are zero-filled, nothing
 * is read. Then commit the group / wait until at most N groups are in flight. */
__device__ __forceinline__ void cb_cp16(void *smem, const void *g, bool ok) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(ok ? 16 : 0) : "memory");
}
/* cp.async of 8 bytes global -> shared through L1 (8-byte aligned both) */
__device__ __forceinline__ void cb_cp8(void *smem, const void *g) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"((unsigned)__cvta_generic_to_shared(smem)), "l"(g)
                 : "memory");
}
__device__ __forceinline__ void cb_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cb_cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

__device__ __forceinline__ void pdl_enter() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* The sum of v over the block (blockDim.x a multiple of 32), every thread given it: a shuffle
 * tree in each warp, the warps' sums in lanes 0.. of every warp (0 past the last), a second tree.
 * sh: 32 T of shared memory. Threads that add 0 leave the bits of a block without them (a
 * warp of zeros adds exact zeros to nonnegative sums: mla_prepare's latent norm on 256 threads
 * gives mla_rope's on 128). */
template <class T> __device__ __forceinline__ T block_sum(T v, T *sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : (T)0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The threads of a norm's block over rows of dim floats (rmsnorm, rmsnorm_strided, layernorm,
 * head_norm_rope, mla_rope): its sums' order, so kernels that must give one another's bits take
 * it from here. */
static inline int rms_threads(int dim) { return dim >= 1024 ? 256 : dim >= 256 ? 128 : 32; }

/* Rope pair i of half (NEOX halves: i, i + half; else interleaved 2i, 2i + 1): its two offsets. */
__device__ __forceinline__ int2 rope_offs(int style, int i, int half) {
    return style == CI_ROPE_NEOX ? make_int2(i, i + half) : make_int2(2 * i, 2 * i + 1);
}

/* One rotated pair (rope_kernel's arithmetic): (a, b) -> (a co - b si, b co + a si). */
__device__ __forceinline__ float2 rope_rot(float a, float b, float co, float si) {
    return make_float2(a * co - b * si, b * co + a * si);
}

/* Rotary tables of position p: cs[i] = cos(p · inv_freq[i]) · mscale, sn the sines, i < half,
 * in double (the CPU's), a thread per entry (ops.cu's rope kernels, qk_rope_store, the decode
 * attention that takes qk_rope_store's work, attn.cu). */
__device__ __forceinline__ void rope_table(float *cs, float *sn, float p, const float *inv_freq, int half, float mscale) {
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        double a = (double)(p * inv_freq[i]);
        double c, s;
        sincos(a, &s, &c);
        cs[i] = (float)(c * mscale);
        sn[i] = (float)(s * mscale);
    }
}

/* One head's row as qk_rope_store makes it, by one warp: RMS-normed with w (when w is given),
 * then rotated over its first rot_dim dimensions (NEOX halves or interleaved pairs) by the
 * table cs / sn; put(i, value) for every dimension i. hnr_load first (the row's values, up to 8
 * a lane, lane + 32 j: all loads in flight before the caller's other work), then hnr_finish
 * (row: the warp's hd floats of shared memory). One arithmetic for every caller: the same bits. */
__device__ __forceinline__ void hnr_load(float (&vals)[8], const float *src, int hd, int lane, bool live) {
#pragma unroll
    for (int j = 0; j < 8; j++) vals[j] = live && lane + 32 * j < hd ? src[lane + 32 * j] : 0.0f;
}
template <class F>
__device__ __forceinline__ void hnr_finish(const float (&vals)[8], const float *src, float *row, int hd, const float *w,
                                           float eps, int rot_dim, const float *cs, const float *sn, int style,
                                           int lane, F put) {
    const int half = rot_dim / 2;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) s = fmaf(vals[j], vals[j], s);
    for (int i = lane + 256; i < hd; i += 32) { float a = src[i]; s = fmaf(a, a, s); } /* hd > 256 */
    float sc = 1.0f;
    if (w) {
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        sc = (float)(1.0 / sqrt((double)s / (double)hd + (double)eps));
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
        if (lane + 32 * j < hd) row[lane + 32 * j] = w ? vals[j] * sc * w[lane + 32 * j] : vals[j];
    for (int i = lane + 256; i < hd; i += 32) row[i] = w ? src[i] * sc * w[i] : src[i];
    __syncwarp();
    for (int i = lane; i < hd; i += 32) {
        float o;
        if (i < rot_dim) {
            int pi, partner;
            float sign;
            if (style == CI_ROPE_NEOX) {
                pi = i < half ? i : i - half;
                partner = i < half ? i + half : i - half;
                sign = i < half ? -1.0f : 1.0f;
            } else {
                pi = i >> 1;
                partner = i ^ 1;
                sign = (i & 1) ? 1.0f : -1.0f;
            }
            /* a' = a co - b si (first of the pair), b' = b co + a si (second) */
            o = row[i] * cs[pi] + sign * row[partner] * sn[pi];
        } else o = row[i];
        put(i, o);
    }
    __syncwarp();   /* row is free again */
}

/* Paged KV caches (backend.h ci_pages; rope_attend): kernels take the pages by value, tab
 * NULL when the cache is not paged. pg_table: query row t's block table (its own when
 * per_row, else the shared one), NULL when not paged; pg_row: the cache row of position p
 * through it, p itself without one (so an unpaged kernel computes the rows it always did). */
__device__ __forceinline__ const int32_t *pg_table(const ci_pages &pg, int t) {
    return pg.tab ? pg.tab + (pg.per_row ? (int64_t)t * pg.tab_stride : 0) : (const int32_t *)0;
}
__device__ __forceinline__ int64_t pg_row(const int32_t *tb, int lg, int p) {
    return tb ? ((int64_t)tb[p >> lg] << lg) | (p & ((1 << lg) - 1)) : (int64_t)p;
}
/* MLA attention (mla.cu, mla_tc.cu): the keys of row t, sparse (sel given and pos[t] + 1 > topk)
 * ones at sel[t, j], j < topk, else 0..pos[t]; and a run of keys past the row's context marked in
 * the partials [n, n_heads, n_runs, lat + 2] (m = -inf, l = 0: weight 0 in the combine) by
 * threads 0 .. nh - 1 */
__device__ __forceinline__ int mla_row_keys(const int32_t *pos, const int32_t *sel, int topk, int t) {
    const int L = pos[t] + 1;
    return sel && L > topk ? topk : L;
}
__device__ __forceinline__ void mla_part_empty(float *part, int t, int n_heads, int h0, int nh, int n_runs, int run,
                                               int lat) {
    if ((int)threadIdx.x < nh) {
        float *p = part + (((int64_t)t * n_heads + h0 + threadIdx.x) * n_runs + run) * (lat + 2);
        p[lat] = -INFINITY;
        p[lat + 1] = 0.0f;
    }
}
/* query row t's position: pos[t], or pos0 + t when the rows are consecutive (pos NULL) */
__device__ __forceinline__ int row_pos(const int32_t *pos, int pos0, int t) { return pos ? pos[t] : pos0 + t; }
/* pages by value for a launch: *pages, or all zeros (not paged) */
static inline ci_pages cb_pages(const ci_pages *pages) {
    ci_pages z = { 0, 0, 0, 0 };
    return pages ? *pages : z;
}

/* Prefill GEMMs round their operands to 16 bits. Weights stored in fewer bits (fp8 E4M3, FP4,
 * MLX codes) are widened to f16, and their activations converted to f16, not bf16: f16's 11
 * significant bits against bf16's 8. With bf16 operands three quantized fixtures missed their
 * prefill bounds on the H200 (deepseek_v4_fp8 max|diff| 0.55, bound 0.045; mlx_deepseek_v4_4bit
 * 0.77; mlx_qwen3_5_moe_4bit 0.145): the CPU path with its matmul inputs rounded to 8
 * significant bits reproduces that (0.55 / 0.94 / 0.14), with 11 bits it stays at 0.003-0.005
 * (2026-12-02, bench/RESULTS.md). 16-bit checkpoints keep their own type. f16 overflows at
 * 65504: conversions saturate there (f16_sat) instead of making inf; NaN stays NaN. */
__device__ __forceinline__ float f16_sat(float v) { return v > 65504.0f ? 65504.0f : v < -65504.0f ? -65504.0f : v; }

template <typename... KArgs, typename... Args>
static inline void cb_launch(cuda_be *cb, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cb->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = cb->pdl ? 1 : 0;
    cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

/* ---- launchers (gemv.cu) ----
 * Row-major y[n, W.rows] = x[n, W.cols] · Wᵀ for n <= CB_GEMV_MAX_N token rows, weights in
 * f32 / f16 / bf16 / fp8 E4M3 (block scales f32, bf16 or E8M0), in one launch:
 *   mode CB_STORE:  up to 4 matrices sharing cols (matmul_n), y[i] = x · W[i]ᵀ
 *   mode CB_ACC:    one matrix, y += x · Wᵀ
 *   mode CB_SWIGLU: W[0] = gate, W[1] = up (same rows): y = silu(x·W0ᵀ) * (x·W1ᵀ) */
enum { CB_GEMV_MAX_N = 8 };
enum { CB_STORE = 0, CB_ACC = 1, CB_SWIGLU = 2 };
/* norm_w (not for CB_ACC): x is first RMS-normed (eps) and scaled by norm_w, as rmsnorm();
 * xn_out (with norm_w): the first block also writes those normed rows there (norm_matmul_keep). */
void cb_gemv(cuda_be *cb, int mode, int count, float *const *ys, const float *x, int n, const ci_mat *const *Ws,
             const float *norm_w, float eps, float *xn_out = nullptr);
/* Whether cb_gemv takes this weight (dtype known and the layout one of its kernels reads). */
int cb_gemv_ok(const ci_mat *W);
/* The same products for any n through cuBLAS (f32: SGEMM in f32; f16 / bf16: activations
 * rounded to the weight's type, f32 accumulation and output; fp8: the weight times its
 * block scales widened to bf16 in scratch first, then as bf16). beta 0 or 1. Returns 0 if
 * it handled the call, -1 if the dtype has no GEMM path (the caller loops cb_gemv). */
int cb_gemm(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W, float beta);
/* cb_gemm's 16-bit form in two steps, for products of one input: cb_gemm16_input is the
 * scratch (cb->xconv) for x [n, W.cols] in W's 16-bit type (bf16 / f16: cb_gemm16_ok), which
 * the caller fills (cb_convert, cb_rmsnorm_16), then cb_gemm16 for each weight of that
 * dtype and cols: the bits of cb_gemm of the f32 rows. */
int cb_gemm16_ok(const ci_mat *W);
void *cb_gemm16_input(cuda_be *cb, int n, const ci_mat *W);
void cb_gemm16(cuda_be *cb, float *y, const void *xh, int n, const ci_mat *W, float beta);
/* Whether Ws[0..count) are 16-bit matrices of one dtype and width laid out one after another
 * (weight_stack placed them so), at most CB_STACK_MAX, each a multiple of 4 rows: then
 * cb_gemm16_stack multiplies them as one matrix (one cuBLAS GEMM into stack_y, then a kernel
 * that copies each part's columns to ys[i]); the bits are those of that one GEMM. */
enum { CB_STACK_MAX = 4 };
int cb_gemm16_stacked(const ci_mat *const *Ws, int count);
void cb_gemm16_stack(cuda_be *cb, int count, float *const *ys, const void *xh, int n, const ci_mat *const *Ws);
/* the same on another cuBLAS handle (one of the side streams') */
void cb_gemm16_on(cuda_be *cb, cublasHandle_t h, float *y, const void *xh, int n, const ci_mat *W, float beta);
/* y[n, W.cols] = x[n, W.rows] · W (W not transposed), any dtype cb_gemv_ok takes. */
void cb_matmul_xw_launch(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W);

/* ---- MLX-quantized weights (quant.cu, quant_moe.cu) ----
 * ci_mat dtype CI_U32 views placed with weight() / weight_q() (backend.h). cb_q_ok: whether
 * the kernels take W (mode, bits, group, a 4-byte aligned view). cb_q_matmul: y (+)= x · Wᵀ
 * (acc), GEMV on the packed codes for few rows, else W widened to bf16 in cb->wdeq and the
 * GEMM. cb_q_matmul_n: matmul_n (op CB_STORE) or matmul_swiglu (CB_SWIGLU: ys[0] = g, u
 * scratch) in one launch where it can; 0 if some W is not cb_q_ok (nothing done).
 * cb_q_matmul_xw: backend.h's matmul_xw. cb_q_norm_matmul_n: norm_matmul_n (CB_STORE) or
 * norm_matmul_swiglu (CB_SWIGLU) in one launch when the tensor-core GEMVs take it (4- / 8-bit
 * affine, <= CB_GEMV_MAX_N rows: quant_mma.cu), else 0 and nothing done. cb_q_embed: rows
 * ids[t] of E as f32. cb_q_moe_experts (quant_moe.cu): backend.h's moe_experts for a layer
 * whose experts are U32 views. */
int cb_q_ok(const ci_mat *W);
/* matmul_groups of 1..8 token rows in one launch (quant_mma.cu), when W's groups are consecutive
 * row ranges of one fp8 or MLX 4- / 8-bit matrix; 0 and nothing launched when not taken. */
int cb_qt_groups(cuda_be *cb, float *y, const float *x, int n, int groups, const ci_mat *W);
/* matmul_swiglu_clamp's one launch (quant_mma.cu) for fp8 (128 x 128 block scales) or MLX 4- / 8-bit /
 * mxfp4 gate and up of 1..8 token rows: g = silu(min(gate, limit)) · clamp(up, ±limit); 0 and
 * nothing launched when not taken. */
int cb_qt_swiglu_clamp(cuda_be *cb, float *g, const float *x, int n, const ci_mat *Wg, const ci_mat *Wu, float limit);
void cb_q_matmul(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W, int acc);
int cb_q_matmul_n(cuda_be *cb, int op, int count, float *const *ys, float *u, const float *x, int n,
                  const ci_mat *const *Ws);
void cb_q_matmul_xw(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W);
int cb_q_norm_matmul_n(cuda_be *cb, int op, int count, float *const *ys, const float *x, const float *norm_w, float eps,
                       int n, const ci_mat *const *Ws, float *xn_out = nullptr);
void cb_q_embed(cuda_be *cb, float *out, const ci_mat *E, const int32_t *ids, int n);
struct cb_route;   /* route.cuh */
/* rt (cb_moe_route_experts): the routing folded into the experts' launches, or 0 returned and nothing
 * launched; without it 1 (done, or the backend failed) */
int cb_q_moe_experts(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                     const ci_moe *m, int acc, const cb_route *rt = nullptr);
/* backend.h's weight_q (a descriptor's scales / biases placed with weight()); cb_quant_free
 * frees the descriptors and the expert tables (quant_moe.cu). */
const ci_qdesc *cb_weight_q(ci_backend *be, const ci_qdesc *d, size_t param_bytes);
void cb_quant_free(cuda_be *cb);

/* ---- launchers (ops.cu) ---- */
void cb_rmsnorm(cuda_be *cb, float *out, const float *x, const float *w, int n, int dim, float eps);
/* cb_rmsnorm's rows into out (f32; NULL: not written) and h (bf16 when to_bf16, else f16
 * saturated: cb_convert's bits of them), one launch */
void cb_rmsnorm_16(cuda_be *cb, float *out, void *h, int to_bf16, const float *x, const float *w, int n, int dim,
                   float eps);
void cb_rope(cuda_be *cb, float *x, int n, int n_heads, int head_dim, int rot_offset, int rot_dim,
             const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style);
void cb_head_norm_rope(cuda_be *cb, float *x, int n, int n_heads, int head_dim, const float *w, float eps,
                       int rot_offset, int rot_dim, const int32_t *pos, const float *inv_freq, float mscale,
                       ci_rope_style style);
void cb_mla_rope(cuda_be *cb, float *lat, float *q, const float *kv_norm, float eps, int n, int n_heads, int nope,
                 int rope, int kv_lora, const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style);
void cb_qk_rope_store(cuda_be *cb, float *q, float *k, const float *v, int n, int n_heads, int n_kv, int hd,
                      const float *q_norm, const float *k_norm, float eps, int rot_dim, const int32_t *pos,
                      const float *inv_freq, float mscale, ci_rope_style style, float *kc, float *vc, int kv_stride,
                      float *const *kv_tab, const ci_pages *pages);
void cb_kv_store(cuda_be *cb, float *cache, int stride, const float *src, int width, int n, const int32_t *pos);
void cb_swiglu(cuda_be *cb, float *g, const float *u, int64_t count);
void cb_clamp_gu(cuda_be *cb, float *g, float *u, int64_t count, float limit);
void cb_add(cuda_be *cb, float *y, const float *x, int64_t count);
void cb_embed(cuda_be *cb, float *out, const ci_mat *E, const int32_t *ids, int n);
void cb_argmax(cuda_be *cb, int32_t *out, const float *x, int count);
/* dst[i] = round(src[i]) as bf16 (to_bf16) or f16 */
void cb_convert(cuda_be *cb, void *dst, const float *src, int64_t count, int to_bf16);

/* ---- launchers (attn.cu) ----
 * Causal GQA attention, query row t attends keys 0..pos[t] (pos NULL: pos0 + t). kv_tab
 * (device, 2n pointers; NULL: k / v for every row): row t reads its own cache kv_tab[2t] /
 * kv_tab[2t + 1], always through the split-K kernels. pages (host struct, tables in device
 * memory; NULL: not paged): key position j is read at row pg_row(table of row t, j) of the
 * cache(s); per_row tables take the split-K kernels too (each row its own table). */
/* rope_attend in one launch where attn_decode2_kernel takes the call and every row's new key is the
 * only one it reads that is not yet in the cache (cuda_be.rope_fuse; attn.cu d2_fuse): 1 done, 0
 * nothing launched (the caller runs qk_rope_store and cb_attention) */
int cb_rope_attend_fused(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int n_heads,
                         int n_kv, int hd, const float *q_norm, const float *k_norm, float eps, int rot_dim,
                         const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style, float *kc,
                         float *vc, float *const *kv_tab, const ci_pages *pages, int kv_stride, int max_keys,
                         float scale);
void cb_attention(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                  const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                  float *const *kv_tab, const ci_pages *pages);
/* attn_flash.cu: prefill attention of one sequence's rows (n > 8, rows 16-byte aligned) for
 * head_dim 64 / 128 / 256, launched; 0 (nothing launched) for other head sizes */
int cb_attn_flash_pipe(cuda_be *cb, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                       const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride, float scale,
                       ci_pages pg);

/* ---- MoE (moe.cu, moe_gemm.cu) ----
 * One MoE layer's routed experts as device tables, built by moe.cu on the layer's first
 * eager call (keyed by ci_moe.w_up, kept for the backend's life). Every expert of a layer has
 * the same dtype, shape and scale layout (moe.cu checks). Per expert e and matrix (0 gate,
 * 1 up, 2 down): w[3 * e + m] = its data, scale[3 * e + m] its scale grid (fp8; NULL
 * otherwise) and srow0[3 * e + m] its first row in that grid (views of stacked experts). */
/* MLX-quantized gated experts (4 or 8 bits: affine, mxfp4, mxfp8) straight from their codes:
 * the grouped GEMM's B loader decodes each tile to f16 (the widening's values), so nothing is
 * widened into scratch. Tables as quant_moe.cu keeps them (device arrays [3E], i = 3e + j). */
struct cb_mg_quant {
    const void *const *codes, *const *scales, *const *biases;
    const int64_t *srow0;
    int E, I, X;
    int bits[3], mode[3], group[3], sd[3];   /* per kind: 0 gate, 1 up, 2 down; sd as cb_qm.sd */
    /* fp8 E4M3 experts (moe.cu) come the same way: bits 1, group = the scale grid's block (0:
     * no scales), sd as scale_elem's (0 f32, 1 bf16, 2 e8m0), biases NULL */
};
struct cb_moe_tab {
    const void *key;             /* ci_moe.w_up */
    int E, I, X;                 /* experts, inter (rows of gate / up), hidden (their cols) */
    ci_dtype dtype;              /* CI_F32, CI_F16, CI_BF16 or CI_F8_E4M3 */
    int relu2;                   /* no gate matrices (their entries are NULL) */
    int block, scale_dtype;      /* fp8: block size, 0 f32 / 1 bf16 / 2 e8m0; -1 no scales */
    const void **w;              /* device array [3E] */
    const void **scale;          /* device array [3E] */
    int64_t *srow0;              /* device array [3E] */
    int fp8_direct;              /* fp8: the grouped GEMM reads the codes (moe.cu moe_fp8_direct) */
    cb_mg_quant mgq;             /* ... through this description */
    cb_moe_tab *next;
};
/* moe.cu: every expert matrix of m (gate unless relu², up, down) at a 16-byte aligned address
 * (the grouped GEMM's code loaders) */
int cb_moe_aligned16(const ci_moe *m);
/* moe.cu: the table of m's 16-bit / f32 / fp8 experts (built on first use; NULL with the
 * backend failed when the experts are not uniform) */
const cb_moe_tab *cb_moe_table(cuda_be *cb, const ci_moe *m);
/* moe.cu: whether one row of these experts decodes through the GEMV form moe_fused.cu
 * reproduces (gate_up_kernel<L, true>, down_kernel_split<L, 2, 4>) */
int cb_moe_split2_form(cuda_be *cb, const ci_moe *m, const cb_moe_tab *tab, const float *x);
/* moe_fused.cu: backend.h moe_norm_experts in one launch when it can (1), else 0 (the caller
 * runs the three ops) */
int cb_moe_fused(cuda_be *cb, float *out, float *xn, float *logits, int32_t *sel, float *w, const float *x,
                 const float *norm_w, float eps, const int32_t *ids, int n, const ci_mat *W, const ci_moe *m, int acc);
/* moe.cu: whether moe_experts of 1..8 rows of these fp8 experts (x their input) take
 * quant_mma_moe.cu's tensor-core pair (its shape and alignment rules) */
int cb_moe_fp8_qt_form(const ci_moe *m, const cb_moe_tab *tab, const float *x);
/* moe_fused_qt.cu: moe_norm_experts in one launch for fp8 experts (and an ungated fp8 shared
 * expert) at one row, the composed ops' bits, when it can (1), else 0 */
int cb_moe_fused_qt(cuda_be *cb, float *out, float *xn, float *logits, int32_t *sel, float *w, const float *x,
                    const float *norm_w, float eps, const int32_t *ids, int n, const ci_mat *W, const ci_moe *m, int acc);
/* moe.cu: moe_route and moe_experts of n token rows in the experts' launches, the routing done by
 * their first kernel from the router's logits [n, E] (ids: the token ids hash routing reads),
 * sel / w written as moe_route writes them (cuda_be.route_fuse, quant_mma_moe.cu); 0 and nothing
 * launched when not taken (the caller runs the two ops). */
int cb_moe_route_experts(cuda_be *cb, float *out, const float *x, int n, const float *logits, const int32_t *ids,
                         int32_t *sel, float *w, const ci_moe *m, int acc);
/* moe.cu: sets the moe_route / moe_experts ops; frees the tables and MoE scratch. */
void cb_moe_ops(ci_backend *be);
void cb_moe_free(cuda_be *cb);
/* moe_gemm.cu: the routed experts of n (> CB_GEMV_MAX_N) token rows on tensor cores:
 * out[n, X] = Σ_k w[t, k] · expert_sel[t, k](x[t]), sel / w [n, top_k] in device memory,
 * no host synchronisation; gated (SwiGLU) or relu² experts (tab->relu2: no gate matrices).
 * cb_moe_grouped_ok says whether it takes the layer (dtype, widths, alignment); when it does
 * not, moe.cu runs its GEMV kernels over groups of rows. */
int cb_moe_grouped_ok(const ci_moe *m, const cb_moe_tab *tab);
/* Whether fp8 experts could take the grouped GEMM once widened to f16 (moe.cu widens them
 * into scratch for a prefill chunk: the same shape conditions as cb_moe_grouped_ok). */
int cb_moe_grouped_fp8_ok(const ci_moe *m, const cb_moe_tab *tab);
/* The shape conditions alone (quant_moe.cu widens MLX-quantized experts to an f16 table). */
int cb_moe_grouped_shape_ok(const ci_moe *m, const cb_moe_tab *tab);
int cb_moe_grouped_q_ok(const ci_moe *m, const cb_mg_quant *q);
void cb_moe_grouped_q(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                      const ci_moe *m, const cb_mg_quant *q);
void cb_moe_grouped(cuda_be *cb, float *out, const float *x, int n, const int32_t *sel, const float *w,
                    const ci_moe *m, const cb_moe_tab *tab);

/* ---- MLA / DSA (mla.cu, mla_heads.cu, dsa.cu) ----
 * The ops of backend.h's "MLA / DSA" section. The per-head W_UK / W_UV views must be evenly
 * spaced views of one tensor (as mla_split_kv_b makes them) in f32 / f16 / bf16 / fp8; the
 * latent rows at most 1024 floats (DeepSeek: 576). Anything else fails with last_error. */
void cb_rmsnorm_strided(cuda_be *cb, float *out, const float *x, const float *w, int n, int dim, int stride, float eps);
void cb_layernorm(cuda_be *cb, float *out, const float *x, const float *w, const float *b, int n, int dim, double eps);
/* backend.h mla_prepare: one launch (mla_heads.cu mla_prepare_kernel) at <= 4 rows when cb->mla_prep
 * and the W_UK views suit the vector kernels, else cb_mla_rope, cb_mla_absorb_q, cb_kv_store_paged. */
void cb_mla_prepare(cuda_be *cb, float *qcat, float *lat, float *q, const float *kv_norm, float eps, int n, int n_heads,
                    int nope, int rope, int kv_lora, const int32_t *pos, const float *inv_freq, float mscale,
                    ci_rope_style style, const ci_mat *w_uk, float *cache, float *const *tab, const ci_pages *pages);
void cb_mla_absorb_q(cuda_be *cb, float *qcat, const float *q, int n, int n_heads, int nope, int rope, int kv_lora,
                     const ci_mat *w_uk);
void cb_mla_out_heads(cuda_be *cb, float *o, const float *olat, int n, int n_heads, int kv_lora, int lat, int v,
                      const ci_mat *w_uv);
void cb_kv_store_paged(cuda_be *cb, float *cache, float *const *tab, int tab_step, int stride, const float *src,
                       int width, int n, const int32_t *pos, const ci_pages *pages);
void cb_mla_attend(cuda_be *cb, float *out, const float *qcat, const float *cache, float *const *tab, int tab_step,
                   int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale, const ci_pages *pages);
/* mla.cu's attention for dsa.cu: sel (device, [n, topk]) NULL, or the kept rows of each row
 * whose pos[t] + 1 > topk; keys bounds every row's key count (max_keys, or topk with sel). */
void cb_mla_attn_launch(cuda_be *cb, float *out, const float *qcat, const float *cache, float *const *tab,
                        int tab_step, int n, const int32_t *pos, const int32_t *sel, int topk, int keys, int n_heads,
                        int lat, float scale, const ci_pages *pages);
/* Sticky failure with "CUDA: msg" (the first one stands). */
void cb_fail_msg(cuda_be *cb, const char *msg);
/* mla.cu: the combine of n rows' n_chunks partial runs [n, n_heads, n_chunks, lat + 2] */
void cb_mla_combine_launch(cuda_be *cb, float *out, const float *part, int n, int n_heads, int lat, int n_chunks);
/* mla_tc.cu: MLA attention on tensor cores; 0 when it does not take the shape (nothing launched) */
int cb_mla_tc_launch(cuda_be *cb, float *out, const float *qcat, const float *cache, float *const *tab, int tab_step,
                     int n, const int32_t *pos, const int32_t *sel, int topk, int keys, int n_heads, int lat,
                     float scale, ci_pages pg);
/* Dynamic shared memory of `bytes` for kernel: 1 if it fits (above 48 KiB the kernel's limit
 * is raised once, *set remembering it), 0 if not (over 200 KiB, or the raise failed). */
template <typename K>
static inline int cb_smem_ok(cuda_be *cb, K kernel, size_t bytes, int *set) {
    if (bytes <= 48 * 1024) return 1;
    if (bytes > 200 * 1024) return 0;
    if (!*set) {
        if (CB_CHECK(cb, "shared memory", cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                               200 * 1024)))
            return 0;
        *set = 1;
    }
    return 1;
}
void cb_dsa_attend(cuda_be *cb, float *out, const float *qcat, const float *lat_cache, const float *key_cache,
                   float *const *tab, int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale,
                   const float *iq, const float *iw, float w_scale, int ih, int id, int topk, const ci_pages *pages);
/* The keys an indexer scores for row t: (tab ? tab[t · tab_step] : base) + off, id floats
 * each, (pos[t] + 1) / ratio of them (DSA: the indexer cache, ratio 1, key s at row
 * pg_row(s) when paged; V4's CSA indexer: the compressor state's entries). */
struct cb_keyrows {
    const float *base;
    float *const *tab;
    int tab_step, ratio;
    size_t off;
    ci_pages pg;                 /* paged keys (DSA's cache), or all zeros */
};
/* A lightning indexer's choice (dsa.cu), for DSA and V4: for every row with more keys than
 * topk, score(s) = Σ_h relu(q[t, h] · k_s) · ks · (iw[t, h] · w_scale) (h in order; NaN ->
 * -inf) into cb->mla_work[1], then the topk best positions ascending into sel[t · sel_stride
 * ..] (ties: the lowest positions); rows with at most topk keys get nothing (nsel NULL) or all
 * their positions and nsel[t] their count (else nsel[t] = topk). max_keys bounds every row's
 * key count. Returns 0 (recorded) when it could not be launched. */
int cb_index_select(cuda_be *cb, int32_t *sel, int sel_stride, int32_t *nsel, cb_keyrows kr, int n,
                    const int32_t *pos, int max_keys, const float *iq, const float *iw, float w_scale, float ks, int ih,
                    int id, int topk);
/* ---- LFM2's short convolution (conv.cu) ----
 * backend.h's shortconv (the device needs no window scratch: bcx is read, not changed) and
 * add_bias. states: NULL for a chunk of one sequence (state), else n device pointers. */
void cb_shortconv(cuda_be *cb, float *y, const float *bcx, int n, int dim, int K, const float *taps,
                  const float *in_bias, const float *conv_bias, float *state, float *const *states);
void cb_add_bias(cuda_be *cb, float *y, const float *bias, int n, int width);
/* ---- the gated DeltaNet and gated attention's gates (deltanet.cu) ----
 * backend.h's causal_conv (no window scratch: x is read in place), deltanet (the
 * recurrence or, for a prompt of >= cb->dn_chunk tokens and not `recurrent`, the chunked
 * form with its products in cb->dn_work; then the output gate; o: the op's scratch,
 * [n, hv*dv] then [n, hk]; a prompt of n > 1 tokens leaves q / k normed in mix and beta /
 * e^g (the chunked form: g) in b / a), deltanet_unfuse,
 * split_halves, sigmoid_mul and sigmoid_gate_add.
 * states: NULL for a chunk of one sequence (state), else pointers n rows, tab_step apart. */
void cb_causal_conv(cuda_be *cb, float *y, const float *x, int n, int dim, int K, const float *taps, float *state,
                    float *const *states, int tab_step);
void cb_deltanet(cuda_be *cb, float *z, float *mix, float *b, float *a, int n, const ci_deltanet *d, float *state,
                 float *const *states, int tab_step, int recurrent, float *o);
void cb_deltanet_unfuse(cuda_be *cb, float *mix, float *z, float *b, float *a, const float *qkvz, const float *ba,
                        int n, const ci_deltanet *d);
void cb_split_halves(cuda_be *cb, float *lo, float *hi, const float *x, int rows, int width);
void cb_sigmoid_mul(cuda_be *cb, float *y, const float *g, int64_t count);
void cb_sigmoid_gate_add(cuda_be *cb, float *y, const float *x, const float *g, int n, int width);

/* ---- Mamba2 (mamba.cu) ----
 * backend.h's mamba_conv, ssd_scan (d_state <= 256; a prompt asked for in the chunked form
 * runs the chunked SSD over cuda_be.ssd_work, else the recurrence in one kernel; the op's
 * scratch is unused), gated_rmsnorm and relu2. states: NULL for a chunk of one sequence
 * (state), else n device pointers. */
void cb_mamba_conv(cuda_be *cb, float *xbc, const float *in, int in_stride, int n, int dim, int K, const float *taps,
                   const float *bias, float *state, float *const *states);
void cb_ssd_scan(cuda_be *cb, float *y, const float *xbc, int xbc_stride, const float *dt, int dt_stride, int n,
                 const ci_ssd *s, float *state, float *const *states, int chunked);
void cb_gated_rmsnorm(cuda_be *cb, float *y, const float *z, int z_stride, const float *w, int n, int dim, int group,
                      float eps);
void cb_relu2(cuda_be *cb, float *g, int64_t count);

/* ---- DeepSeek V4 (v4.cu) ----
 * backend.h's hc_spread, hc_pre (hc <= 64), hc_post (no scratch: a thread holds a channel of
 * every stream), v4_compress, v4_index (scores in cb->mla_work[1], sized by max_entries; the
 * op's scratch unused), v4_attend (head_dim <= 1024; kbuf / sc unused). matmul_groups is
 * cuda_backend.cu's: cb_group_copy gathers a group's inputs (dir 0: dst [n, cols] from
 * src [n, groups·cols]) or scatters its outputs (dir 1), around the matmul op. */
void cb_hc_spread(cuda_be *cb, float *X, const float *x, int n, int hc, int dim);
void cb_hc_pre(cuda_be *cb, float *x, float *post, float *comb, float *mix, const float *X, int n, int hc, int dim,
               int iters, float eps, float norm_eps, const float *scale, const float *base);
/* mix = X · fnᵀ and hc_pre in two launches (fn f32, at most CB_GEMV_MAX_N rows, M <= 32): the
 * mix's parts and the rows' sums of squares over many blocks into cb->hc_part, then hc_pre
 * summing them in part order; 0 (nothing launched) when it does not take the call */
int cb_hc_mix_pre(cuda_be *cb, float *x, float *post, float *comb, float *mix, const float *X, int n, const ci_mat *fn,
                  int hc, int dim, int iters, float eps, float norm_eps, const float *scale, const float *base);
void cb_hc_post(cuda_be *cb, float *X, const float *y, const float *post, const float *comb, int n, int hc, int dim);
void cb_v4_compress(cuda_be *cb, float *state, float *const *states, int tab_step, const float *kv, const float *gate,
                    int n, const int32_t *pos, const ci_v4cmp *c);
void cb_v4_index(cuda_be *cb, int32_t *sel, int32_t *nsel, const float *iq, const float *iw, const float *state,
                 float *const *states, int tab_step, int n, const int32_t *pos, const ci_v4cmp *c, int ih, int topk,
                 int sel_stride, int max_entries, float *scratch);
void cb_v4_attend(cuda_be *cb, float *out, const float *q, const float *kv, int n, const int32_t *pos, float *ring,
                  int ring_rows, int window, const float *cstate, float *const *tab, int tab_step, const ci_v4cmp *c,
                  const int32_t *sel, const int32_t *nsel, int sel_stride, const float *sinks, int n_heads, int D,
                  int rot_dim, const float *inv_freq, float mscale);
void cb_group_copy(cuda_be *cb, float *dst, const float *src, int n, int groups, int g, int cols, int dir);

#endif
