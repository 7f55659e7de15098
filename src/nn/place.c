/* place.c — see place.h. */
#include "place.h"
#include <stddef.h>
#include <stdio.h>

/* Bytes of W's fp8 block-scale grid that its rows reach (views past row 0 of the grid
 * through scale_row0 included); 0 when it has none. */
static size_t scale_bytes(const ci_mat *W) {
    if (W->dtype != CI_F8_E4M3 || !W->scale || W->block <= 0) return 0;
    int64_t rb = (W->scale_row0 + W->rows + W->block - 1) / W->block, cb = (W->cols + W->block - 1) / W->block;
    return (size_t)rb * (size_t)cb * ci_dtype_size(W->scale_dtype);
}

/* An MLX-quantized view: stored rows / cols (a stored-transposed MultiLinear view holds
 * Wᵀ), the bytes of its packed rows, and the scale-grid bytes its descriptor must place. */
static void q_geom(const ci_mat *W, int64_t *sr, size_t *row_bytes, size_t *param_bytes) {
    const ci_qdesc *d = W->scale;
    int64_t r = d->stored_t ? W->cols : W->rows, c = d->stored_t ? W->rows : W->cols;
    int64_t reach = W->scale_row0 + r > d->grid_rows ? W->scale_row0 + r : d->grid_rows;
    *sr = r;
    *row_bytes = (size_t)c * (size_t)d->bits / 8;
    *param_bytes = (size_t)reach * (size_t)(c / d->group) * ci_dtype_size(d->scale_dtype);
}

/* The view's codes (code_bytes from its first row; 0: its own rows) and its descriptor. */
static int place_q(ci_backend *be, ci_mat *dst, const ci_mat *W, size_t code_bytes) {
    int64_t sr;
    size_t rb, pb;
    q_geom(W, &sr, &rb, &pb);
    if (!be->weight_q) {
        snprintf(be->last_error, sizeof be->last_error, "backend %s cannot hold MLX-quantized weights", be->name);
        return -1;
    }
    dst->data = be->weight(be, W->data, code_bytes ? code_bytes : (size_t)sr * rb);
    dst->scale = dst->data ? be->weight_q(be, W->scale, pb) : NULL;
    return dst->data && dst->scale ? 0 : -1;
}

int ci_place_heads(ci_backend *be, ci_mat *dst, const ci_mat *V, int n) {
    int even = n > 0 && V[0].data && V[0].dtype == CI_U32;
    ptrdiff_t step = n > 1 ? (const char *)V[1].data - (const char *)V[0].data : 0;
    for (int h = 1; h < n && even; h++)
        even = V[h].dtype == CI_U32 && V[h].scale == V[0].scale && V[h].rows == V[0].rows && V[h].cols == V[0].cols &&
               (const char *)V[h].data - (const char *)V[0].data == h * step;
    if (!even || step < 0) {
        for (int h = 0; h < n; h++)
            if (ci_place_mat(be, &dst[h], &V[h])) return -1;
        return 0;
    }
    int64_t sr;
    size_t rb, pb;
    q_geom(&V[n - 1], &sr, &rb, &pb);
    ci_mat whole = V[n - 1];   /* its reach covers every head's scale rows */
    whole.data = V[0].data;
    ci_mat placed;
    if (place_q(be, &placed, &whole, (size_t)step * (size_t)(n - 1) + (size_t)sr * rb)) return -1;
    for (int h = 0; h < n; h++) {
        dst[h] = V[h];
        dst[h].data = (const char *)placed.data + (size_t)h * (size_t)step;
        dst[h].scale = placed.scale;
    }
    return 0;
}

int ci_place_mat(ci_backend *be, ci_mat *dst, const ci_mat *W) {
    *dst = *W;
    if (!W->data) return 0;
    if (W->dtype == CI_U32) return place_q(be, dst, W, 0);   /* MLX codes and their scales, as they are */
    dst->data = be->weight(be, W->data, (size_t)W->rows * (size_t)W->cols * ci_dtype_size(W->dtype));
    if (!dst->data) return -1;
    size_t sb = scale_bytes(W);
    if (sb && !(dst->scale = be->weight(be, W->scale, sb))) return -1;
    return 0;
}

int ci_place_stack(ci_backend *be, int count, ci_mat *const *dst, const ci_mat *const *W) {
    int same = be->weight_stack && count > 1 && count <= 8;
    for (int i = 0; i < count && same; i++)
        same = W[i]->data && (W[i]->dtype == CI_BF16 || W[i]->dtype == CI_F16) && W[i]->dtype == W[0]->dtype &&
               W[i]->cols == W[0]->cols && W[i]->rows > 0 && !W[i]->scale;
    if (!same) {
        for (int i = 0; i < count; i++)
            if (ci_place_mat(be, dst[i], W[i])) return -1;
        return 0;
    }
    const void *host[8], *out[8];
    size_t bytes[8];
    for (int i = 0; i < count; i++) {
        host[i] = W[i]->data;
        bytes[i] = (size_t)W[i]->rows * (size_t)W[i]->cols * ci_dtype_size(W[i]->dtype);
    }
    if (be->weight_stack(be, count, host, bytes, out)) return -1;
    for (int i = 0; i < count; i++) {
        *dst[i] = *W[i];
        dst[i]->data = out[i];
    }
    return 0;
}

int ci_place_qkvo(ci_backend *be, ci_mat *dq, ci_mat *dk, ci_mat *dv, ci_mat *dout, const ci_mat *q, const ci_mat *k,
                  const ci_mat *v, const ci_mat *o) {
    ci_mat *const dst[3] = { dq, dk, dv };
    const ci_mat *const src[3] = { q, k, v };
    return ci_place_stack(be, 3, dst, src) || ci_place_mat(be, dout, o) ? -1 : 0;
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
