/* place.c — see place.h. */
#include "place.h"

/* Bytes of W's fp8 block-scale grid that its rows reach (views past row 0 of the grid
 * through scale_row0 included); 0 when it has none. */
static size_t scale_bytes(const ci_mat *W) {
    if (W->dtype != CI_F8_E4M3 || !W->scale || W->block <= 0) return 0;
    int64_t rb = (W->scale_row0 + W->rows + W->block - 1) / W->block, cb = (W->cols + W->block - 1) / W->block;
    return (size_t)rb * (size_t)cb * ci_dtype_size(W->scale_dtype);
}

int ci_place_mat(ci_backend *be, ci_mat *dst, const ci_mat *W) {
    *dst = *W;
    if (!W->data || W->dtype == CI_U32) return 0;   /* MLX codes: the CPU reads them where they lie */
    dst->data = be->weight(be, W->data, (size_t)W->rows * (size_t)W->cols * ci_dtype_size(W->dtype));
    if (!dst->data) return -1;
    size_t sb = scale_bytes(W);
    if (sb && !(dst->scale = be->weight(be, W->scale, sb))) return -1;
    return 0;
}

int ci_place_vec(ci_backend *be, const float **dst, const float *v, int64_t len) {
    *dst = v && len > 0 ? be->weight(be, v, (size_t)len * sizeof(float)) : v;
    return v && len > 0 && !*dst ? -1 : 0;
}

int ci_place_moe(ci_backend *be, moe_block *dst, const moe_block *M, ci_mat *em) {
    *dst = *M;
    const int E = M->n_experts;
    dst->w_gate = em;
    dst->w_up = em + E;
    dst->w_down = em + 2 * E;
    const float *bias = NULL;
    int bad = ci_place_mat(be, &dst->gate, &M->gate) || ci_place_vec(be, &bias, M->bias, E) ||
              ci_place_mat(be, &dst->sh_gate, &M->sh_gate) || ci_place_mat(be, &dst->sh_up, &M->sh_up) ||
              ci_place_mat(be, &dst->sh_down, &M->sh_down) || ci_place_mat(be, &dst->sh_router, &M->sh_router);
    dst->bias = (float *)bias;
    if (!M->w_gate) dst->w_gate = NULL;   /* relu² experts: no gate matrices */
    for (int e = 0; e < E && !bad; e++)
        bad = (M->w_gate && ci_place_mat(be, &em[e], &M->w_gate[e])) || ci_place_mat(be, &em[E + e], &M->w_up[e]) ||
              ci_place_mat(be, &em[2 * E + e], &M->w_down[e]);
    return bad ? -1 : 0;
}

int ci_place_ffn(ci_backend *be, ffn_block *dst, const ffn_block *F, int64_t hidden, moe_block *moe,
                 const moe_block *M, ci_mat **em) {
    *dst = *F;
    if (ci_place_vec(be, &dst->norm, F->norm, hidden)) return -1;
    if (!M)
        return ci_place_mat(be, &dst->wg, &F->wg) || ci_place_mat(be, &dst->wu, &F->wu) ||
               ci_place_mat(be, &dst->wd, &F->wd) ? -1 : 0;
    if (ci_place_moe(be, moe, M, *em)) return -1;
    *em += 3 * M->n_experts;
    dst->moe = moe;
    return 0;
}
