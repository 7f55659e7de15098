/* compressor.c — see compressor.h. */
#include "compressor.h"

void cmp_set_rope(cmp_block *c, const rope_table *rt, float eps) {
    c->op = (ci_v4cmp){ .ratio = c->ratio, .d = c->d, .overlap = c->overlap, .ape = c->ape, .norm = c->norm,
                        .eps = eps, .inv_freq = rt->inv_freq, .mscale = rt->mscale, .rot_dim = rt->rot_dim };
}

int cmp_state_cap(const cmp_block *c, long long max_ctx) { return (int)(max_ctx / c->ratio + 1); }

size_t cmp_state_bytes(const cmp_block *c, long long max_ctx) {
    ci_v4cmp k = { .ratio = c->ratio, .d = c->d, .overlap = c->overlap };
    return ci_v4cmp_state_floats(&k, cmp_state_cap(c, max_ctx)) * sizeof(float);
}

void cmp_project_norm(ci_backend *be, int nc, const cmp_block *const *cs, float *xn, const float *x,
                      const float *norm_w, float eps, int n, float *const *pkv, float *const *pgate) {
    float *ys[4];
    const ci_mat *ws[4];
    for (int i = 0; i < nc && i < 2; i++) {
        ys[2 * i] = pkv[i];
        ys[2 * i + 1] = pgate[i];
        ws[2 * i] = &cs[i]->kv;
        ws[2 * i + 1] = &cs[i]->gate;
    }
    be->norm_matmul_n(be, xn, x, norm_w, eps, 2 * (nc < 2 ? nc : 2), ys, n, ws);
}

void cmp_push(ci_backend *be, const ci_v4cmp *op, float *state, float *const *states, int tab_step, const float *pkv,
              const float *pgate, int n, const int32_t *pos) {
    be->v4_compress(be, state, states, tab_step, pkv, pgate, n, pos, op);
}

ci_v4cmp cmp_op(const cmp_block *c, float *ent, const ci_pages *pg) {
    ci_v4cmp op = c->op;
    if (!pg || !pg->tab) return op;
    int lr = 0;
    while ((1 << lr) < c->ratio) lr++;
    op.ent = ent;
    op.ent_pages = *pg;
    op.ent_pages.blk_log2 = pg->blk_log2 - lr;
    return op;
}
