/* moe.c — see moe.h. Routing and the routed experts are backend ops (moe_route,
 * moe_experts); the latent projections and the shared expert are matmuls around them. */
#include "moe.h"
#include "../core/status.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int moe_scratch_init(ci_backend *be, moe_scratch *s, const moe_block *m, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    size_t nk = (size_t)max_n * m->top_k, f = sizeof(float);
    s->logits = be->alloc(be, (size_t)max_n * m->n_experts * f);
    s->sel = be->alloc(be, nk * sizeof(int32_t));
    s->w = be->alloc(be, nk * f);
    int fail = !s->logits || !s->sel || !s->w;
    if (m->latent > 0) {
        s->xl = be->alloc(be, (size_t)max_n * m->latent * f);
        s->acc = be->alloc(be, (size_t)max_n * m->latent * f);
        fail |= !s->xl || !s->acc;
    }
    if (m->shared_inter > 0) {
        s->g = be->alloc(be, (size_t)max_n * m->shared_inter * f);
        s->u = be->alloc(be, (size_t)max_n * m->shared_inter * f);
        s->sg = be->alloc(be, (size_t)max_n * f);
        s->ye = be->alloc(be, (size_t)max_n * m->hidden * f);
        fail |= !s->g || !s->u || !s->sg || !s->ye;
    }
    if (fail) {
        moe_scratch_free(be, s);
        return -1;
    }
    return 0;
}

void moe_scratch_free(ci_backend *be, moe_scratch *s) {
    void *bufs[] = { s->logits, s->sel, s->w, s->xl, s->acc, s->g, s->u, s->sg, s->ye };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) be->buf_free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

/* the op-level description of m's routed experts (X: the width the experts read) */
static ci_moe moe_desc(const moe_block *m, int X) {
    return (ci_moe){ .n_experts = m->n_experts, .top_k = m->top_k, .hidden = X, .inter = m->inter,
                     .router = m->router == MOE_SOFTMAX ? CI_ROUTE_SOFTMAX
                               : m->router == MOE_SIGMOID ? CI_ROUTE_SIGMOID : CI_ROUTE_SQRTSOFTPLUS,
                     .norm_topk_prob = m->norm_topk_prob, .norm_eps = m->norm_eps,
                     .routed_scaling = m->routed_scaling, .n_group = m->n_group, .topk_group = m->topk_group,
                     .bias = m->bias, .hash_ids = m->hash_ids, .hash_vocab = m->hash_vocab,
                     .relu2 = m->act == MOE_ACT_RELU2, .act_limit = m->act_limit,
                     .w_gate = m->w_gate, .w_up = m->w_up, .w_down = m->w_down, .e_lo = m->e_lo, .e_hi = m->e_hi };
}

void moe_route(ci_backend *be, const moe_block *m, moe_scratch *s, const float *x, int n) {
    ci_moe d = moe_desc(m, m->latent > 0 ? m->latent : m->hidden);
    be->matmul(be, s->logits, x, n, &m->gate);             /* [n, E] */
    be->moe_route(be, s->sel, s->w, s->logits, s->ids, n, &d);
}

/* moe_route of xn = rmsnorm(x) * norm_w, which it writes (norm_matmul_keep: one launch on a device) */
static void route_norm(ci_backend *be, const moe_block *m, moe_scratch *s, float *xn, const float *x,
                       const float *norm_w, float eps, int n) {
    ci_moe d = moe_desc(m, m->latent > 0 ? m->latent : m->hidden);
    be->norm_matmul_keep(be, xn, s->logits, x, norm_w, eps, n, &m->gate);
    be->moe_route(be, s->sel, s->w, s->logits, s->ids, n, &d);
}

/* the routed experts' sum into out (out += it with acc, only without a latent projection) */
static void routed_experts(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, const float *x, int n,
                           int acc) {
    ci_moe d = moe_desc(m, m->latent > 0 ? m->latent : m->hidden);
    if (m->latent > 0) {
        be->matmul(be, s->xl, x, n, &m->fc1_latent);       /* [n, latent] */
        be->moe_experts(be, s->acc, s->xl, n, s->sel, s->w, &d, 0);
        be->matmul(be, out, s->acc, n, &m->fc2_latent);     /* [n, H] */
    } else {
        be->moe_experts(be, out, x, n, s->sel, s->w, &d, acc);
    }
}

/* The routing of xn = rmsnorm(x) * norm_w (written) and the routed experts' sum into out (out +=
 * it with acc, only without a latent projection): moe_norm_experts where the backend has it and
 * no latent projection sits between (one launch on a device at one token), else route_norm and
 * routed_experts. */
static void route_norm_experts(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, float *xn,
                               const float *x, const float *norm_w, float eps, int n, int acc) {
    if (be->moe_norm_experts && m->latent <= 0) {
        ci_moe d = moe_desc(m, m->hidden);
        be->moe_norm_experts(be, out, xn, s->logits, s->sel, s->w, x, norm_w, eps, s->ids, n, &m->gate, &d, acc);
        return;
    }
    route_norm(be, m, s, xn, x, norm_w, eps, n);
    routed_experts(be, m, s, out, xn, n, acc);
}

/* the shared expert (if any) added into out */
static void shared_expert(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, const float *x, int n);

static void forward_routed(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, const float *x, int n) {
    routed_experts(be, m, s, out, x, n, 0);
    shared_expert(be, m, s, out, x, n);
}

static void shared_expert(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, const float *x, int n) {
    const int H = m->hidden;
    if (m->shared_inter > 0) {
        const int SI = m->shared_inter;
        if (m->act == MOE_ACT_RELU2) {
            be->matmul(be, s->g, x, n, &m->sh_up);           /* [n, SI] */
            be->relu2(be, s->g, (int64_t)n * SI);
        } else if (m->act_limit > 0) {   /* DeepSeek V4's clamped SwiGLU: one launch on a device */
            be->matmul_swiglu_clamp(be, s->g, s->u, x, n, &m->sh_gate, &m->sh_up, m->act_limit);
        } else {
            be->matmul_swiglu(be, s->g, s->u, x, n, &m->sh_gate, &m->sh_up);   /* the two products and swiglu */
        }
        if (m->sh_router.rows) {   /* Qwen2-style gated shared expert */
            be->matmul(be, s->ye, s->g, n, &m->sh_down);     /* [n, H] */
            be->matmul(be, s->sg, x, n, &m->sh_router);
            be->sigmoid_gate_add(be, out, s->ye, s->sg, n, H);
        } else {   /* out += g · sh_downᵀ: the product then add's bits, one launch on a device */
            be->matmul_acc(be, out, s->g, n, &m->sh_down, s->ye);
        }
    }
}

void moe_forward(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, const float *x, int n) {
    moe_route(be, m, s, x, n);
    forward_routed(be, m, s, out, x, n);
}

void moe_forward_norm(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, float *xn, const float *x,
                      const float *norm_w, float eps, int n) {
    route_norm_experts(be, m, s, out, xn, x, norm_w, eps, n, 0);
    shared_expert(be, m, s, out, xn, n);
}

/* x += the routed experts of xn = rmsnorm(x) · norm_w and the shared expert sg / su / sd (SI wide;
 * sr: its σ gate row, NULL: ungated) in one backend call (moe_norm_experts with the shared expert), where the backend
 * takes it: 1; else 0, nothing done */
static int fold_shared(ci_backend *be, const moe_block *m, moe_scratch *s, float *x, float *xn, const float *norm_w,
                       float eps, int n, const ci_mat *sg, const ci_mat *su, const ci_mat *sd, const ci_mat *sr, int SI) {
    if (!be->moe_norm_experts || m->latent > 0 || m->tp_part || SI <= 0) return 0;
    ci_moe d = moe_desc(m, m->hidden);
    d.sh_gate = sg;
    d.sh_up = su;
    d.sh_down = sd;
    d.sh_router = sr;
    d.shared_inter = SI;
    return be->moe_norm_experts(be, x, xn, s->logits, s->sel, s->w, x, norm_w, eps, s->ids, n, &m->gate, &d, 1);
}

int moe_fold_shared_add_norm(ci_backend *be, const moe_block *m, moe_scratch *s, float *x, float *xn,
                             const float *norm_w, float eps, int n, const ci_mat *sg, const ci_mat *su,
                             const ci_mat *sd) {
    return m->shared_inter <= 0 && fold_shared(be, m, s, x, xn, norm_w, eps, n, sg, su, sd, NULL, (int)su->rows);
}

/* moe_forward_add (norm_w NULL: xn given) or moe_forward_add_norm */
static void forward_add(ci_backend *be, const moe_block *m, moe_scratch *s, float *x, float *y, float *xn,
                        const float *norm_w, float eps, int n) {
    const int64_t count = (int64_t)n * m->hidden;
    const int alone = m->latent <= 0 && m->shared_inter <= 0;   /* the routed sum added into x itself */
    float *out = alone ? x : y;
    const int acc = alone && m->tp_part != CI_TP_REST;
    /* the shared expert (gated or not) folded in where the backend can: x += routed + shared at once */
    if (norm_w && !alone &&
        fold_shared(be, m, s, x, xn, norm_w, eps, n, &m->sh_gate, &m->sh_up, &m->sh_down,
                    m->sh_router.rows ? &m->sh_router : NULL, m->shared_inter))
        return;
    if (norm_w) {
        route_norm_experts(be, m, s, out, xn, x, norm_w, eps, n, acc);
    } else {
        moe_route(be, m, s, xn, n);
        routed_experts(be, m, s, out, xn, n, acc);
    }
    if (!alone) {
        shared_expert(be, m, s, y, xn, n);
        if (m->tp_part == CI_TP_REST) be->copy(be, x, y, (size_t)count * sizeof(float));   /* its part alone */
        else be->add(be, x, y, count);
    }
    if (m->tp_part) be->all_reduce(be, x, count);
}

void moe_forward_add(ci_backend *be, const moe_block *m, moe_scratch *s, float *x, float *y, const float *xn, int n) {
    forward_add(be, m, s, x, y, (float *)xn, NULL, 0.0f, n);   /* xn only read */
}

void moe_forward_add_norm(ci_backend *be, const moe_block *m, moe_scratch *s, float *x, float *y, float *xn,
                          const float *norm_w, float eps, int n) {
    forward_add(be, m, s, x, y, xn, norm_w, eps, n);
}

int moe_shard(moe_block *M, const shd_ctx *t, const char *what, char *err, size_t errlen) {
    if (t->ep) {   /* whole experts, an even share per rank; the others' views emptied (nothing placed) */
        shd_range e;
        if (shd_split(M->n_experts, 1, t->world, t->rank, &e))
            return ci_err(err, errlen, "%s: %d routed experts do not split over %d ranks (the ranks must divide them)",
                          what, M->n_experts, t->world);
        for (int x = 0; x < M->n_experts; x++) {
            if (x >= e.lo && x < e.hi) continue;
            if (M->w_gate) M->w_gate[x] = (ci_mat){ 0 };
            M->w_up[x] = (ci_mat){ 0 };
            M->w_down[x] = (ci_mat){ 0 };
        }
        M->e_lo = (int)e.lo;
        M->e_hi = (int)e.hi;
    } else {
        int inter = M->inter;
        for (int e = 0; e < M->n_experts; e++) {
            inter = M->inter;
            if (shd_mlp(M->w_gate ? &M->w_gate[e] : NULL, &M->w_up[e], &M->w_down[e], &inter, t, what, err, errlen))
                return -1;
        }
        M->inter = inter;
    }
    if (M->shared_inter > 0 && shd_mlp(&M->sh_gate, &M->sh_up, &M->sh_down, &M->shared_inter, t, what, err, errlen))
        return -1;
    M->tp_part = shd_part(t->rank);
    return 0;
}
