/* moe.h — mixture-of-experts FFN: routers and SwiGLU experts, shared by every MoE family.
 *
 * Routers (all computed in f32 from router logits = x · gateᵀ):
 *   MOE_SOFTMAX  (Qwen3-MoE, Qwen3.5): p = softmax(logits); top-k of p; renormalised when
 *                norm_topk_prob.
 *   MOE_SIGMOID  (DeepSeek V3, LFM2-MoE, Nemotron-H): s = sigmoid(logits); choice = s + bias;
 *                with n_group > 1 the groups whose top-2 choice sum is among the best
 *                topk_group survive (others -inf); top-k on choice; weights = s at those
 *                experts (no bias), / (sum + norm_eps) when norm_topk_prob (norm_eps 0 means
 *                1e-20, DeepSeek's; LFM2-MoE sets 1e-6); × routed_scaling.
 *   MOE_SQRTSOFTPLUS (DeepSeek V4): s = sqrt(softplus(logits)); otherwise as MOE_SIGMOID
 *                (bias-corrected choice, no grouping; weights = s at the chosen experts,
 *                normalised when norm_topk_prob, × routed_scaling).
 *   Hash routing (DeepSeek V4's first layers): when hash_ids is set, the experts of token
 *                id are hash_ids[id · top_k ..] (scratch.ids gives the rows' token ids); the
 *                weights are still the router's scores s at those experts, as above.
 * Experts: out = Σ_k w_k · down_e(silu(gate_e x) · up_e x); with act_limit > 0 (DeepSeek
 * V4's swiglu_limit L) the activation is silu(min(g, L)) · clamp(u, -L, L), for the routed
 * and the shared expert alike. Tokens are grouped by expert and
 * each active expert runs one batched matmul over its tokens (not one per token).
 * Optional shared expert (Qwen2-MoE style: Qwen3-Next, Qwen3.5-MoE), when shared_inter > 0:
 * out += σ(x · sh_routerᵀ) · sh_down(silu(sh_gate x) · sh_up x); with sh_router.rows == 0
 * the shared expert is added ungated. Families with other shared experts (DeepSeek) leave
 * shared_inter at 0 and add theirs themselves.
 * Expert activation (act): MOE_ACT_SWIGLU (the default, zero) as above; MOE_ACT_RELU2
 * (Nemotron-H): expert(x) = down(relu(up x)²), shared likewise with sh_up / sh_down; the
 * gate matrices (w_gate, sh_gate) are not used and may be NULL / empty.
 * Latent experts (latent > 0, Nemotron-H): the router still reads x, but the experts run in
 * a latent space: routed = fc2_latent(Σ_k w_k · expert_e(fc1_latent x)), expert matrices
 * [inter, latent] / [latent, inter]; the shared expert reads x.
 * Expert matrices are ci_mat views in any checkpoint layout (per-expert, fused gate_up,
 * mlx-stacked), bound by w_experts; nothing is copied. */
#ifndef CI_MOE_H
#define CI_MOE_H
#include "../backend/backend.h"
#include "../parallel/shard.h"

typedef enum { MOE_SOFTMAX, MOE_SIGMOID, MOE_SQRTSOFTPLUS } moe_router;
typedef enum { MOE_ACT_SWIGLU = 0, MOE_ACT_RELU2 } moe_act;

typedef struct {
    int n_experts, top_k, hidden, inter;
    moe_router router;
    int norm_topk_prob;
    float norm_eps;              /* MOE_SIGMOID: added to the top-k sum when normalising; 0 = 1e-20 */
    float routed_scaling;        /* 1 when the family has none */
    int n_group, topk_group;     /* 1, 1: no grouping */
    ci_mat gate;                 /* [n_experts, hidden] router */
    float *bias;                 /* [n_experts] e_score_correction_bias, or NULL */
    ci_mat *w_gate, *w_up;       /* [n_experts] views, each [inter, hidden] */
    ci_mat *w_down;              /* [n_experts] views, each [hidden, inter] */
    int shared_inter;            /* 0: no shared expert */
    ci_mat sh_gate, sh_up;       /* [shared_inter, hidden] */
    ci_mat sh_down;              /* [hidden, shared_inter] */
    ci_mat sh_router;            /* [1, hidden] shared_expert_gate; rows == 0: ungated */
    moe_act act;                 /* MOE_ACT_SWIGLU (0) or MOE_ACT_RELU2 (no gate matrices) */
    int latent;                  /* 0: experts read x; else the width of their latent space */
    const int32_t *hash_ids;     /* [vocab, top_k] fixed expert choice per token id, or NULL */
    int hash_vocab;              /* rows of hash_ids */
    float act_limit;             /* > 0: clamped SwiGLU (see above) */
    ci_mat fc1_latent;           /* [latent, hidden] when latent */
    ci_mat fc2_latent;           /* [hidden, latent] when latent */
    int tp_part;                 /* tensor parallel (backend.h CI_TP_*): a part of every expert's (or,
                                  * e_hi > 0, a share of whole experts) and of the shared expert's
                                  * columns; moe_forward_add and moe_forward_add_norm all-reduce x
                                  * after adding this rank's part */
    int e_lo, e_hi;              /* expert parallel: this rank holds experts [e_lo, e_hi) (the others'
                                  * views empty); 0, 0: every expert */
} moe_block;

/* Scratch for up to max_n tokens, in backend memory; sized once per session. The routed
 * experts' own scratch belongs to the backend's moe_experts op. */
typedef struct {
    int max_n;
    float *logits;               /* [max_n, n_experts] */
    int32_t *sel;                /* [max_n, top_k] chosen experts */
    float *w;                    /* [max_n, top_k] their weights */
    float *g, *u;                /* [max_n, shared_inter] (shared expert) */
    float *sg;                   /* [max_n] shared-expert gate logits */
    float *ye;                   /* [max_n, hidden] shared-expert output */
    float *xl, *acc;             /* [max_n, latent] latent inputs and routed sum (latent only) */
    const int32_t *ids;          /* hash routing: the token ids of the n rows (backend memory), set by the caller */
} moe_scratch;

int moe_scratch_init(ci_backend *be, moe_scratch *s, const moe_block *m, int max_n);
void moe_scratch_free(ci_backend *be, moe_scratch *s);

/* Chooses experts for n tokens of x [n, hidden]: fills s->sel and s->w (moe_route op). */
void moe_route(ci_backend *be, const moe_block *m, moe_scratch *s, const float *x, int n);
/* out[n, hidden] = routed experts of x (out is overwritten), plus the shared expert when
 * shared_inter > 0 (all ops, but for the clamped SwiGLU of a shared expert with act_limit: a
 * host loop, a host-memory backend only; gated (sh_router.rows > 0) or not). */
void moe_forward(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, const float *x, int n);
/* moe_forward of xn = rmsnorm(x) · norm_w (eps), which it writes: the router's product takes the
 * norm (norm_matmul_keep: one launch on a device) */
void moe_forward_norm(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, float *xn, const float *x,
                      const float *norm_w, float eps, int n);
/* x[n, hidden] += moe_forward(xn): the routed sum added by the experts op itself when the
 * block has no shared expert and no latent space (the same bits as moe_forward into y and
 * add(x, y) on the CPU); y: [n, hidden] scratch for the other blocks. */
void moe_forward_add(ci_backend *be, const moe_block *m, moe_scratch *s, float *x, float *y, const float *xn, int n);
/* moe_forward_add of xn = rmsnorm(x) * norm_w (eps), which it writes ([n, hidden], not x):
 * the norm goes with the router's product (norm_matmul_keep: one launch on a device); the CPU's
 * bits are rmsnorm's then moe_forward_add's. */
void moe_forward_add_norm(ci_backend *be, const moe_block *m, moe_scratch *s, float *x, float *y, float *xn,
                          const float *norm_w, float eps, int n);
/* moe_forward_add_norm plus a family's own ungated SwiGLU shared expert beside the block
 * (DeepSeek's: gate / up sg, su [SI, hidden], down sd [hidden, SI]; the block itself without
 * one), x += both, in one backend call (moe_norm_experts with the shared expert: one launch on a
 * device at one row, the sum rounded once) where the backend takes it: 1. Else 0 with nothing
 * done: the caller runs moe_forward_add_norm and its shared expert. */
int moe_fold_shared_add_norm(ci_backend *be, const moe_block *m, moe_scratch *s, float *x, float *xn,
                             const float *norm_w, float eps, int n, const ci_mat *sg, const ci_mat *su,
                             const ci_mat *sd);

/* Tensor parallel (parallel/shard.h): t->ep, the rank keeps its even share of whole routed
 * experts (e_lo, e_hi; the others' views emptied, so nothing of them is placed); else every
 * routed expert's bound matrices are narrowed to the rank's part of their intermediate columns
 * (inter made the rank's). The shared expert's columns are split either way (shared_inter the
 * rank's), tp_part set; the router, the latent projections and the shared expert's gate stay
 * whole. -1 with err when a count or width does not split. */
int moe_shard(moe_block *M, const shd_ctx *t, const char *what, char *err, size_t errlen);

#endif
