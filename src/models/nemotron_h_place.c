/* nemotron_h_place.c — Nemotron-H's weights into backend memory (nn/place.h): every view
 * forward reads goes through be->weight once (the identity on the CPU); MLX-quantized views
 * keep their packed codes (ci_place_mat). */
#include "nemotron_h_internal.h"
#include "../core/status.h"
#include "../nn/place.h"
#include <stdlib.h>

/* An MoE layer: router, bias, shared expert and expert views (ci_place_moe), then the
 * latent projections moe_forward reads around them. */
static int place_moe(ci_backend *be, moe_block *dst, const moe_block *E, ci_mat *em) {
    return ci_place_moe(be, dst, E, em) || ci_place_mat(be, &dst->fc1_latent, &E->fc1_latent) ||
           ci_place_mat(be, &dst->fc2_latent, &E->fc2_latent);
}

int nh_shard(ci_model *m, nh_model *d, char *err, size_t errlen) {
    const int W = m->be->world, R = m->be->rank;
    const shd_ctx t = { W, R, m->ep, &d->kept };
    char what[160];
    int n_heads = d->n_heads, n_kv = d->n_kv;
    for (int l = 0; l < d->n_layers; l++) {
        nh_layer *L = &d->layers[l];
        snprintf(what, sizeof what, "%s: layer %d over %d ranks", m->family->name, l, W);
        if (L->kind == '*') {   /* the block's split on the layer's own views */
            attn_block A = { .n_heads = d->n_heads, .n_kv = d->n_kv, .hd = d->hd, .wq = L->wq, .wk = L->wk, .wv = L->wv,
                             .wo = L->wo };
            if (attn_shard(&A, &t, what, err, errlen)) return -1;
            L->wq = A.wq; L->wk = A.wk; L->wv = A.wv; L->wo = A.wo;
            n_heads = A.n_heads;
            n_kv = A.n_kv;
        } else if (L->kind == '-') {
            int ff = d->ff;
            if (shd_mlp(NULL, &L->up, &L->down, &ff, &t, what, err, errlen)) return -1;
        } else if (L->kind == 'E' && moe_shard(&L->moe, &t, what, err, errlen)) {
            return -1;
        } else if (L->kind == 'M' && mamba2_shard(&L->mamba, &t, what, err, errlen)) {
            return -1;
        }
    }
    if (d->any_mamba) d->state_floats = mamba2_conv_floats(d->any_mamba) + mamba2_ssm_floats(d->any_mamba);
    shd_head(&d->lm_head, d->vocab, &t);
    d->n_heads = n_heads;
    d->n_kv = n_kv;
    d->ff /= W;
    d->tp_part = shd_part(R);
    return 0;
}

int nh_place(ci_model *m, nh_model *d, char *err, size_t errlen) {
    ci_backend *be = m->be;
    const char *fam = m->family->name;
    if (be->is_device && (!be->mamba_conv || !be->ssd_scan || !be->gated_rmsnorm || !be->relu2 ||
                          (d->any_moe && (!be->moe_route || !be->moe_experts))))
        return ci_err(err, errlen, "%s: the %s backend lacks the Mamba2 or MoE ops; run it with --device cpu", fam,
                      be->name);
    d->dev = calloc(d->n_layers > 0 ? (size_t)d->n_layers : 1, sizeof *d->dev);
    size_t n_views = 0;
    for (int l = 0; l < d->n_layers; l++)
        n_views += d->layers[l].kind == 'E' ? 3 * (size_t)d->layers[l].moe.n_experts : 0;
    if (n_views) d->dev_expert_mats = calloc(n_views, sizeof(ci_mat));
    if (!d->dev || (n_views && !d->dev_expert_mats)) return ci_err(err, errlen, "%s: out of memory", fam);
    ci_mat *em = d->dev_expert_mats;
    int bad = ci_place_mat(be, &d->dev_embed, &d->embed) || ci_place_mat(be, &d->dev_head, &d->lm_head) ||
              ci_place_vec(be, &d->dev_norm_f, d->norm_f, d->H);
    d->any_moe = NULL;
    d->any_mamba = NULL;
    for (int l = 0; l < d->n_layers && !bad; l++) {
        const nh_layer *L = &d->layers[l];
        nh_placed *P = &d->dev[l];
        bad = ci_place_vec(be, &P->norm, L->norm, d->H);
        if (bad) break;
        switch (L->kind) {
        case 'M':
            bad = mamba2_place(be, &P->mamba, &L->mamba);
            if (!d->any_mamba) d->any_mamba = &P->mamba;
            break;
        case '*':
            P->attn = (attn_block){ .n_heads = d->n_heads, .n_kv = d->n_kv, .hd = d->hd, .eps = d->eps,
                                    .scale = d->attn_scale, .rot_dim = 0, .inv_freq = NULL, .mscale = 1.0f,
                                    .style = CI_ROPE_NEOX, .tp_part = d->tp_part };
            bad = ci_place_qkvo(be, &P->attn.wq, &P->attn.wk, &P->attn.wv, &P->attn.wo, &L->wq, &L->wk, &L->wv, &L->wo);
            break;
        case '-':
            bad = ci_place_mat(be, &P->up, &L->up) || ci_place_mat(be, &P->down, &L->down);
            break;
        default:
            bad = place_moe(be, &P->moe, &L->moe, em);
            em += 3 * L->moe.n_experts;
            if (!d->any_moe) d->any_moe = &P->moe;
        }
    }
    if (bad)
        return ci_err(err, errlen, "%s: %s: cannot place the weights in backend memory%s%s", fam, be->name,
                      be->last_error[0] ? ": " : "", be->last_error);
    return 0;
}
