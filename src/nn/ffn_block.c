/* ffn_block.c — see ffn_block.h. Only backend ops (and moe_forward): no activation byte is
 * touched here. */
#include "ffn_block.h"

const char *const ffn_names_hf[3] = { "gate_proj", "up_proj", "down_proj" };

int ffn_bind(w_binder *b, ffn_block *F, int64_t hidden, int64_t ff, float eps, const char *norm_name, float norm_add,
             const char *prefix, const char *const *names) {
    float *nw = NULL;
    if (norm_name) w_vec(b, &nw, W_REQUIRED, hidden, norm_add, W_KIND_NORM, "%s", norm_name);
    F->norm = nw;
    F->eps = eps;
    if (prefix) {
        if (!names) names = ffn_names_hf;
        w_mat(b, &F->wg, W_REQUIRED, ff, hidden, "%s.%s", prefix, names[0]);
        w_mat(b, &F->wu, W_REQUIRED, ff, hidden, "%s.%s", prefix, names[1]);
        w_mat(b, &F->wd, W_REQUIRED, hidden, ff, "%s.%s", prefix, names[2]);
    }
    return b->failed ? -1 : 1;
}

void ffn_forward(ci_backend *be, const ffn_block *F, const ffn_bufs *b, float *x, int n) {
    if (F->moe) {
        if (F->norm) moe_forward_add_norm(be, F->moe, b->moe, x, b->y, b->xn, F->norm, F->eps, n);
        else moe_forward_add(be, F->moe, b->moe, x, b->y, x, n);
        return;
    }
    if (F->norm) be->norm_matmul_swiglu(be, b->xn, x, F->norm, F->eps, b->g, b->u, n, &F->wg, &F->wu);
    else be->matmul_swiglu(be, b->g, b->u, x, n, &F->wg, &F->wu);
    ci_out_proj(be, x, b->g, n, &F->wd, 1, b->y, F->tp_part);   /* x += down's product */
}

int ffn_shard(ffn_block *F, moe_block *M, int ff, const shd_ctx *t, const char *what, char *err,
              size_t errlen) {
    if (M) return moe_shard(M, t, what, err, errlen);
    if (shd_mlp(&F->wg, &F->wu, &F->wd, &ff, t, what, err, errlen)) return -1;
    F->tp_part = shd_part(t->rank);
    return 0;
}
