/* place.h — weights into backend memory for the families (dense, DeepSeek, ...):
 * every view a forward reads goes through be->weight once (the identity on the CPU; a
 * device copies the bytes once, in their checkpoint dtype).
 *
 * ci_place_mat: dst = W with its data and, fp8, its block-scale grid placed (the grid rows
 * the view reaches through scale_row0 included); an MLX-quantized view (CI_U32): its packed
 * rows with weight(), its descriptor (scales, biases) with weight_q(). ci_place_vec: an f32
 * vector of len floats (NULL stays NULL). Both return -1 when the backend is out of memory
 * (be->last_error). */
#ifndef CI_PLACE_H
#define CI_PLACE_H
#include "../backend/backend.h"
#include "ffn_block.h"
#include "moe.h"

int ci_place_mat(ci_backend *be, ci_mat *dst, const ci_mat *W);
int ci_place_vec(ci_backend *be, const float **dst, const float *v, int64_t len);
/* count matrices of one input (q / k / v): when they are all 16-bit of one dtype and width
 * (no block scales) and the backend has weight_stack, placed one after another in one
 * allocation (a device multiplies them as one matrix); else each with ci_place_mat. */
int ci_place_stack(ci_backend *be, int count, ci_mat *const *dst, const ci_mat *const *W);
/* An attention layer's q / k / v (stacked, ci_place_stack) and its output projection. */
int ci_place_qkvo(ci_backend *be, ci_mat *dq, ci_mat *dk, ci_mat *dv, ci_mat *dout, const ci_mat *q, const ci_mat *k,
                  const ci_mat *v, const ci_mat *o);
/* n per-head views (MLA's W_UK / W_UV): MLX-quantized views evenly spaced in one tensor
 * (MultiLinear heads) are placed as one range, so the placed views stay evenly spaced (the
 * device's MLA kernels index heads by that step); anything else view by view. */
int ci_place_heads(ci_backend *be, ci_mat *dst, const ci_mat *V, int n);
/* dst = M with its router, choice bias, shared expert (when it has one) and every expert view
 * placed; the placed views go to em[3 * n_experts] (gate, up, down, each [n_experts], as
 * dst's w_* point; w_gate stays NULL when M's is: relu² experts). */
int ci_place_moe(ci_backend *be, moe_block *dst, const moe_block *M, ci_mat *em);
/* dst = F with its norm ([hidden] or NULL) placed and either its dense MLP's gate / up /
 * down (M NULL) or, an MoE layer, M placed into moe (ci_place_moe with views at *em, which
 * advances past them) and dst->moe = moe. */
int ci_place_ffn(ci_backend *be, ffn_block *dst, const ffn_block *F, int64_t hidden, moe_block *moe,
                 const moe_block *M, ci_mat **em);

#endif
