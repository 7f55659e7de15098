/* ffn_block.h — the SwiGLU MLP block the families share: Llama / Qwen3 / Qwen3-MoE
 * (models/dense.c), LFM2 / LFM2-MoE (models/lfm2.c) and Qwen3-Next / Qwen3.5
 * (models/qwen_hybrid.c).
 *
 * For x [n, hidden], with xn = RMSNorm(x) (norm, eps) when the block has a norm, else x:
 *   g = silu(xn·wgᵀ) * (xn·wuᵀ) [n, ff]        (norm_matmul_swiglu, resp. matmul_swiglu)
 *   x += g·wdᵀ (the residual add)              (matmul_acc)
 * or, when the layer's MLP is a mixture of experts (moe set): xn as above, then
 *   x += moe(xn)                               (rmsnorm, moe_forward, add)
 * Written only on backend ops; the CPU backend's fused ops compose the unfused ones in this
 * order (rmsnorm, gate, up, swiglu, down, add), so a family moved onto the block keeps its
 * bits. The MoE branch is wiring around nn/moe.h, whose math is its own (host memory: CPU
 * only for now).
 *
 * This file owns the block's weight description (ffn_block), its per-call buffers
 * (ffn_bufs) and the binding of its tensors; the family owns the tensors' names, the
 * router / experts of a MoE layer and the scratch. */
#ifndef CI_FFN_BLOCK_H
#define CI_FFN_BLOCK_H
#include "../backend/backend.h"
#include "../io/weights.h"
#include "moe.h"

typedef struct {
    const float *norm;           /* [hidden] input RMSNorm weight (post_attention_layernorm,
                                  * ffn_norm), or NULL: x is used as it is */
    float eps;                   /* the norm's epsilon */
    ci_mat wg, wu;               /* [ff, hidden] gate_proj / up_proj (LFM2: w1 / w3) */
    ci_mat wd;                   /* [hidden, ff] down_proj (LFM2: w2) */
    const moe_block *moe;        /* NULL: the dense MLP above; else the layer's MLP is this
                                  * MoE (wg / wu / wd unused) */
    int tp_part;                 /* tensor parallel (backend.h CI_TP_*): a part of the dense MLP's
                                  * columns, down's product all-reduced (a MoE: its own tp_part) */
} ffn_block;

/* One call's buffers (backend memory, but for the MoE's host scratch). */
typedef struct {
    float *xn;                   /* [n, hidden] the normed input, when the block norms x */
    float *g, *u;                /* [n, ff] gate (then silu(gate)·up) and up products */
    float *y;                    /* [n, hidden] the branch's output before the residual add:
                                  * down's product (matmul_acc's tmp) or the MoE's output;
                                  * not xn (the MoE reads xn while it writes y) */
    moe_scratch *moe;            /* MoE layers: the experts' scratch; else unused */
} ffn_bufs;

/* The names transformers' LlamaMLP gives the three matrices. */
extern const char *const ffn_names_hf[3];   /* gate_proj, up_proj, down_proj */

/* Binds the input norm norm_name ([hidden], norm_add added to every element; NULL: no
 * norm) with epsilon eps and, when prefix is given, the dense matrices "<prefix>.<names[0]>"
 * (gate), ".<names[1]>" (up) and ".<names[2]>" (down), in that order; names NULL means
 * ffn_names_hf. A MoE layer passes prefix NULL and sets F->moe itself. Returns as w_mat. */
int ffn_bind(w_binder *b, ffn_block *F, int64_t hidden, int64_t ff, float eps, const char *norm_name, float norm_add,
             const char *prefix, const char *const *names);

/* x[n, hidden] += the block's MLP of x; b->y keeps the branch's output (for a dump). */
void ffn_forward(ci_backend *be, const ffn_block *F, const ffn_bufs *b, float *x, int n);

/* Tensor parallel (parallel/shard.h): rank R of W's part of the layer's MLP: M (the layer's
 * MoE, when it has one: moe_shard) or F's dense matrices of intermediate width ff (gate / up
 * rows, down's columns copied into keep) and F's tp_part. -1 with err when it does not split. */
int ffn_shard(ffn_block *F, moe_block *M, int ff, const shd_ctx *t, const char *what, char *err,
              size_t errlen);

#endif
