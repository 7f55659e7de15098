/* hc.h — DeepSeek V4's manifold-constrained hyper-connections (mHC).
 *
 * The residual is hc parallel streams X [hc, dim] per token. Around each sub-block (attention,
 * MoE) a mapping computed from the streams themselves (all in f32):
 *   mix  = (flat · fnᵀ) · rsqrt(mean(flat²) + norm_eps)        flat = X as [hc·dim]
 *          → pre logits [hc] ‖ post logits [hc] ‖ comb logits [hc, hc]
 *   pre  = σ(mix_pre · scale[0] + base[0:hc]) + eps
 *   post = 2 σ(mix_post · scale[1] + base[hc:2hc])
 *   comb = softmax over each row of (mix_comb · scale[2] + base[2hc:]) + eps, then divided by
 *          its column sums (+ eps), then iters-1 times rows then columns again (Sinkhorn)
 *   x    = Σ_j pre[j] X[j]                                        the sub-block's input
 *   X'[k] = post[k] · block(x) + Σ_j comb[j][k] X[j]              the new streams
 * The model's end collapses the streams once more (hc_head): pre = σ(mix · scale + base) +
 * eps with a head mapping of hc outputs, x = Σ_j pre[j] X[j].
 * All of it runs as backend ops (matmul, then hc_pre / hc_post: backend.h); buffers are
 * backend memory. */
#ifndef CI_HC_H
#define CI_HC_H
#include "../backend/backend.h"

typedef struct {
    int hc, dim, iters;          /* iters: hc_sinkhorn_iters (head mappings: unused) */
    float eps, norm_eps;         /* hc_eps, rms_norm_eps */
    ci_mat fn;                   /* [(2+hc)·hc, hc·dim] (head: [hc, hc·dim]) */
    float *base;                 /* [(2+hc)·hc] (head: [hc]) */
    float *scale;                /* [3] (head: [1]) */
} hc_map;

/* For n tokens of streams X [n, hc, dim]: x [n, dim] the collapsed input, post [n, hc] and
 * comb [n, hc, hc] for hc_expand. mix is scratch [n, (2+hc)·hc]. */
void hc_collapse(ci_backend *be, const hc_map *h, const float *X, int n, float *mix, float *post, float *comb, float *x);
/* X [n, hc, dim] ← post ⊗ y + combᵀ X, y [n, dim] the sub-block's output; tmp [hc·dim]. */
void hc_expand(ci_backend *be, const hc_map *h, float *X, const float *y, const float *post, const float *comb, int n, float *tmp);
/* The final collapse: x [n, dim] from X with a head mapping; mix scratch [n, hc]. */
void hc_head(ci_backend *be, const hc_map *h, const float *X, int n, float *mix, float *x);

#endif
