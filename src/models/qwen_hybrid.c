/* qwen_hybrid.c — see qwen_hybrid.h: hyper-parameters, tensors and their placement in
 * backend memory. Shapes follow transformers' Qwen3NextForCausalLM, Qwen3_5ForCausalLM and
 * Qwen3_5MoeForCausalLM (and their VL wrappers' language model). Sessions and forward are
 * qwen_hybrid_run.c, snapshots qwen_hybrid_cache.c. */
#include "qwen_hybrid_internal.h"
#include "layer_snap.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "../nn/place.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hyper-parameters ----------------------------------------------------------------- */

/* Layer kinds from layer_types, else full_attention_interval (default 4). */
static int read_layer_kinds(const ci_config *c, const char *fam, int n_layers, unsigned char *linear, char *err,
                            size_t errlen) {
    const json_t *lt = json_object_get(c->text, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) < n_layers)
            return ci_err(err, errlen, "%s: %s: layer_types must list at least num_hidden_layers (%d) entries", c->path,
                          fam, n_layers);
        for (int l = 0; l < n_layers; l++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)l));
            if (s && (!strcmp(s, "linear_attention") || !strcmp(s, "linear"))) linear[l] = 1;
            else if (s && (!strcmp(s, "full_attention") || !strcmp(s, "attention"))) linear[l] = 0;
            else
                return ci_err(err, errlen, "%s: %s: layer_types[%d] = '%s' is not linear_attention or full_attention",
                              c->path, fam, l, s ? s : "(not a string)");
        }
        return 0;
    }
    long long every = 4;
    if (cfg_int(c, "full_attention_interval", 0, 1, 1 << 16, &every, err, errlen)) return -1;
    for (int l = 0; l < n_layers; l++) linear[l] = (l + 1) % every != 0;
    return 0;
}

/* partial_rotary_factor defaults to 0.25 in these families (transformers' configs). */
static int has_partial_rotary(const ci_config *c) {
    if (json_object_get(c->text, "partial_rotary_factor")) return 1;
    const char *blk[2] = { "rope_parameters", "rope_scaling" };
    for (int i = 0; i < 2; i++) {
        const json_t *o = json_object_get(c->text, blk[i]);
        if (o && json_is_object(o) && json_object_get(o, "partial_rotary_factor")) return 1;
    }
    return 0;
}

/* Which MLP each layer has, and the MoE prototype. */
static int read_mlp(ci_model *m, qh_model *d, moe_block *proto, unsigned char *sparse, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    memset(proto, 0, sizeof *proto);
    if (d->opts.mlp == QH_MLP_DENSE) {
        if (!d->ff) return ci_err(err, errlen, "%s: %s: required key 'intermediate_size' is missing", c->path, fam);
        return 0;
    }
    long long E = 0, K = 0, I = 0, SI = 0, step = 1;
    int norm = 1;
    const char *ekey = json_object_get(c->text, "num_experts") ? "num_experts" : "num_local_experts";
    if (cfg_int(c, ekey, 1, 1, 1 << 16, &E, err, errlen) ||
        cfg_int(c, "num_experts_per_tok", 1, 1, 1 << 16, &K, err, errlen) ||
        cfg_int(c, "moe_intermediate_size", 1, 1, 1 << 20, &I, err, errlen) ||
        cfg_int(c, "shared_expert_intermediate_size", 1, 0, 1 << 20, &SI, err, errlen))
        return -1;
    if (K > E) return ci_err(err, errlen, "%s: %s: num_experts_per_tok %lld exceeds num_experts %lld", c->path, fam, K, E);
    proto->n_experts = (int)E;
    proto->top_k = (int)K;
    proto->hidden = d->D;
    proto->inter = (int)I;
    proto->router = MOE_SOFTMAX;
    proto->norm_topk_prob = 1;
    proto->routed_scaling = 1.0f;
    proto->n_group = proto->topk_group = 1;
    proto->shared_inter = (int)SI;
    if (d->opts.mlp == QH_MLP_MOE_ALL) {
        for (int l = 0; l < d->n_layers; l++) sparse[l] = 1;
        return 0;
    }
    if (cfg_int(c, "decoder_sparse_step", 0, 1, 1 << 16, &step, err, errlen) || cfg_bool(c, "norm_topk_prob", &norm, err, errlen))
        return -1;
    proto->norm_topk_prob = norm;
    for (int l = 0; l < d->n_layers; l++) sparse[l] = (l + 1) % step == 0;
    const json_t *only = json_object_get(c->text, "mlp_only_layers");
    if (only && !json_is_null(only)) {
        if (!json_is_array(only))
            return ci_err(err, errlen, "%s: %s: mlp_only_layers must be a list of layer indices", c->path, fam);
        size_t i;
        json_t *v;
        json_array_foreach(only, i, v) {
            if (!json_is_integer(v))
                return ci_err(err, errlen, "%s: %s: mlp_only_layers must be a list of layer indices", c->path, fam);
            long long l = json_integer_value(v);
            if (l >= 0 && l < d->n_layers) sparse[l] = 0;
        }
    }
    for (int l = 0; l < d->n_layers; l++)
        if (!sparse[l] && !d->ff)
            return ci_err(err, errlen, "%s: %s: layer %d is dense but 'intermediate_size' is missing", c->path, fam, l);
    return 0;
}

/* The name prefix of the language model's tensors, and of lm_head. */
static void find_prefix(const st_set *st, const char **pre, const char **head) {
    *pre = "model.";
    *head = "lm_head";
    if (!st) return;
    if (st_find(st, "model.language_model.embed_tokens.weight")) *pre = "model.language_model.";
    else if (st_find(st, "language_model.model.embed_tokens.weight")) {
        *pre = "language_model.model.";
        *head = "language_model.lm_head";
    }
}

/* Which form the checkpoint is in, decided once at load (never per tensor, so a shift is
 * applied to every (1+w) norm or to none).
 *   HF form: the (1+w) norms store w, every DeltaNet conv1d.weight is [C, 1, K].
 *   mlx-lm form (mlx-community): mlx-lm's sanitize (models/qwen3_next.py, qwen3_5.py) added
 *   1.0 to those norms and moved the conv weight to [C, K, 1] in the same pass, and saved
 *   the result; loading it again in mlx-lm does not shift again, because mlx-lm's own test
 *   is that every conv weight already ends in 1.
 * Rule: every DeltaNet conv weight [C, K, 1] with K > 1 -> mlx form (norms used as stored);
 * every one [C, 1, K] -> HF form (1 added at load); some of each -> refused, naming both
 * tensors. Where the shapes cannot tell (K == 1, or no DeltaNet layer), a config.json with
 * an MLX quantization block means mlx form (mlx-lm quantizes only models it has loaded,
 * i.e. sanitized), otherwise HF form. Sets *shift to the value to add (1 or 0). */
static int norm_shift(const ci_model *m, const char *pre, const unsigned char *linear, int n_layers, int K,
                      float *shift, char *err, size_t errlen) {
    *shift = 1.0f;
    if (!m->st) return 0;
    char hf_name[256] = "", mlx_name[256] = "";
    for (int l = 0; l < n_layers; l++) {
        if (!linear[l]) continue;
        char name[256];
        snprintf(name, sizeof name, "%slayers.%d.linear_attn.conv1d.weight", pre, l);
        const ci_tensor *t = st_find(m->st, name);
        if (!t || t->ndim != 3 || K == 1) continue;   /* w_conv reports missing / bad shapes */
        if (t->shape[1] == K && t->shape[2] == 1 && !mlx_name[0]) snprintf(mlx_name, sizeof mlx_name, "%s", name);
        if (t->shape[1] == 1 && t->shape[2] == K && !hf_name[0]) snprintf(hf_name, sizeof hf_name, "%s", name);
    }
    if (hf_name[0] && mlx_name[0])
        return ci_err(err, errlen, "%s: %s: conv weights in two layouts: '%s' is [C, 1, K] (HF form) but '%s' is [C, K, 1] "
                      "(mlx-lm form); cannot tell whether the (1+w) norms are already shifted", m->cfg.path,
                      m->family->name, hf_name, mlx_name);
    if (mlx_name[0] || (!hf_name[0] && m->cfg.quant.present)) *shift = 0.0f;
    return 0;
}

/* ---- load ----------------------------------------------------------------------------- */

/* A tensor-parallel rank (its backend joined a communicator of world > 1): the gated attention
 * layers' heads (each head's query and gate rows together), the DeltaNet layers' key heads (their
 * value heads, channels and state) and the MLPs' / experts' (and the shared expert's) columns
 * narrowed to its part (nn blocks' *_shard). */
static int shard_weights(ci_model *m, qh_model *d, char *err, size_t errlen) {
    const int W = m->be->world, R = m->be->rank;
    const shd_ctx t = { W, R, m->ep, &d->kept };
    char what[160];
    for (int l = 0; l < d->n_layers; l++) {
        qh_layer *L = &d->layers[l];
        snprintf(what, sizeof what, "%s: layer %d over %d ranks", m->family->name, l, W);
        if ((!L->linear && attn_shard(&L->ga.a, &t, what, err, errlen)) ||
            (L->linear && dn_shard(&L->dn, &t, what, err, errlen)) ||
            ffn_shard(&L->ffn, L->is_moe ? &L->moe : NULL, d->ff, &t, what, err, errlen))
            return -1;
    }
    shd_head(&d->lm_head, d->vocab, &t);
    if (d->ff) d->ff /= W;
    return 0;
}

int qh_load(ci_model *m, const qh_opts *o, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    qh_model *d = calloc(1, sizeof *d);
    if (!d) return ci_err(err, errlen, "%s: out of memory", fam);
    m->impl = d;
    d->opts = *o;
    d->mode = DN_AUTO;
    d->D = (int)c->hidden_size;
    d->n_layers = (int)c->n_layers;
    d->vocab = (int)c->vocab_size;
    d->ff = (int)c->intermediate_size;
    d->eps = (float)c->rms_eps;
    if (!c->n_heads) return ci_err(err, errlen, "%s: %s: required key 'num_attention_heads' is missing", c->path, fam);
    int Hh = (int)c->n_heads, KV = c->n_kv_heads ? (int)c->n_kv_heads : Hh;
    if (Hh % KV)
        return ci_err(err, errlen, "%s: %s: num_attention_heads %d is not a multiple of num_key_value_heads %d", c->path,
                      fam, Hh, KV);
    int hd = c->head_dim ? (int)c->head_dim : d->D / Hh;
    long long hk, hv, dk, dv, K = 4;
    if (cfg_int(c, "linear_num_key_heads", 1, 1, 1 << 12, &hk, err, errlen) ||
        cfg_int(c, "linear_num_value_heads", 1, 1, 1 << 12, &hv, err, errlen) ||
        cfg_int(c, "linear_key_head_dim", 1, 1, 1 << 12, &dk, err, errlen) ||
        cfg_int(c, "linear_value_head_dim", 1, 1, 1 << 12, &dv, err, errlen) ||
        cfg_int(c, "linear_conv_kernel_dim", 0, 1, 64, &K, err, errlen))
        return -1;
    if (hv % hk)
        return ci_err(err, errlen, "%s: %s: linear_num_value_heads %lld is not a multiple of linear_num_key_heads %lld",
                      c->path, fam, hv, hk);
    int flag = 0;
    if (cfg_bool(c, "attention_bias", &flag, err, errlen)) return -1;
    if (flag) return ci_err(err, errlen, "%s: %s: attention_bias=true is not implemented yet", c->path, fam);
    flag = 1;
    if (cfg_bool(c, "attn_output_gate", &flag, err, errlen)) return -1;
    if (!flag) return ci_err(err, errlen, "%s: %s: attn_output_gate=false is not supported", c->path, fam);
    const char *act = cj_get_str(c->text, "hidden_act");
    if (act && strcmp(act, "silu"))
        return ci_err(err, errlen, "%s: %s: hidden_act '%s' is not supported (silu)", c->path, fam, act);
    ci_rope_cfg rcfg = c->rope;
    if (!has_partial_rotary(c)) rcfg.partial_rotary_factor = 0.25;
    if (rope_init(&d->rope, &rcfg, hd, fam, err, errlen)) return -1;

    d->layers = calloc((size_t)d->n_layers, sizeof *d->layers);
    unsigned char *linear = calloc((size_t)d->n_layers, 1), *sparse = calloc((size_t)d->n_layers, 1);
    if (!d->layers || !linear || !sparse) { free(linear); free(sparse); return ci_err(err, errlen, "%s: out of memory", fam); }
    moe_block proto;
    int rc_ = read_layer_kinds(c, fam, d->n_layers, linear, err, errlen);
    if (!rc_) rc_ = read_mlp(m, d, &proto, sparse, err, errlen);
    int n_sparse = 0;
    for (int l = 0; l < d->n_layers; l++) n_sparse += sparse[l];
    if (n_sparse == d->n_layers) d->ff = 0;   /* no dense MLP: no tensor backs intermediate_size, scratch ignores it */
    if (!rc_ && n_sparse)
        rc_ = w_check_experts(m->st, c->path, fam, json_object_get(c->text, "num_experts") ? "num_experts" : "num_local_experts",
                              proto.n_experts, n_sparse, 3, err, errlen);
    if (!rc_ && n_sparse) {
        d->expert_mats = calloc((size_t)n_sparse * proto.n_experts * 3, sizeof(ci_mat));
        if (!d->expert_mats) rc_ = ci_err(err, errlen, "%s: out of memory", fam);
    }
    w_binder b;
    if (!rc_ && w_init(&b, m->st, fam, d->n_layers)) rc_ = ci_err(err, errlen, "%s", b.err);
    if (rc_) { free(linear); free(sparse); return -1; }

    const char *pre, *head;
    find_prefix(m->st, &pre, &head);
    float shift;
    if (norm_shift(m, pre, linear, d->n_layers, (int)K, &shift, err, errlen)) {
        w_done(&b); free(linear); free(sparse);
        return -1;
    }
    w_set_quant(&b, &c->quant);   /* mlx-community checkpoints: check packing against config.json */
    const int D = d->D;
    ci_mat *em = d->expert_mats;
    char base[256];
    w_embed(&b, &d->embed, d->vocab, D, "%sembed_tokens", pre);
    for (int l = 0; l < d->n_layers; l++) {
        qh_layer *L = &d->layers[l];
        L->linear = linear[l];
        w_vec(&b, &L->attn_norm, W_REQUIRED, D, shift, W_KIND_NORM, "%slayers.%d.input_layernorm.weight", pre, l);
        if (L->linear) {
            dn_layer *N = &L->dn;
            N->hidden = D; N->hk = (int)hk; N->hv = (int)hv; N->dk = (int)dk; N->dv = (int)dv; N->conv_k = (int)K;
            N->eps = d->eps;
            N->layout = o->layout;
            snprintf(base, sizeof base, "%slayers.%d.linear_attn", pre, l);
            dn_bind(&b, N, base);
            if (!d->any_dn) d->any_dn = N;
        } else {
            ga_layer *A = &L->ga;
            A->hidden = D; A->a.n_heads = Hh; A->a.n_kv = KV; A->a.hd = hd; A->a.eps = d->eps;
            A->a.scale = 1.0f / sqrtf((float)hd);
            attn_set_rope(&A->a, &d->rope, CI_ROPE_NEOX);
            snprintf(base, sizeof base, "%slayers.%d.self_attn", pre, l);
            ga_bind(&b, A, base, shift);
            if (!d->any_ga) d->any_ga = A;
        }
        char norm[256];
        snprintf(norm, sizeof norm, "%slayers.%d.post_attention_layernorm.weight", pre, l);
        snprintf(base, sizeof base, "%slayers.%d.mlp", pre, l);
        ffn_bind(&b, &L->ffn, D, d->ff, d->eps, norm, shift, sparse[l] ? NULL : base, NULL);
        if (sparse[l]) {
            moe_block *M = &L->moe;
            L->is_moe = 1;
            L->ffn.moe = M;
            *M = proto;
            M->w_gate = em;
            M->w_up = em + proto.n_experts;
            M->w_down = em + 2 * proto.n_experts;
            em += 3 * proto.n_experts;
            w_mat(&b, &M->gate, W_REQUIRED, proto.n_experts, D, "%s.gate", base);
            w_experts(&b, M->w_gate, M->w_up, M->w_down, proto.n_experts, proto.top_k, proto.inter, D, base);
            if (M->shared_inter) {
                w_mat(&b, &M->sh_gate, W_REQUIRED, M->shared_inter, D, "%s.shared_expert.gate_proj", base);
                w_mat(&b, &M->sh_up, W_REQUIRED, M->shared_inter, D, "%s.shared_expert.up_proj", base);
                w_mat(&b, &M->sh_down, W_REQUIRED, D, M->shared_inter, "%s.shared_expert.down_proj", base);
                w_mat(&b, &M->sh_router, W_REQUIRED, 1, D, "%s.shared_expert_gate", base);
            }
            if (!d->any_moe) d->any_moe = M;
        }
    }
    free(linear);
    free(sparse);
    w_vec(&b, &d->final_norm, W_REQUIRED, D, shift, W_KIND_NORM, "%snorm.weight", pre);
    w_head(&b, &d->lm_head, &d->embed, c->tie_embeddings, d->vocab, D, head);
    if (ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen)) return -1;
    if (!m->st) return 0;   /* record mode: nothing to place */
    if (m->be->world > 1 && shard_weights(m, d, err, errlen)) return -1;
    return qh_place(m, d, err, errlen);
}

/* ---- placement: every weight forward reads in backend memory --------------------------- */

int qh_place(ci_model *m, qh_model *d, char *err, size_t errlen) {
    ci_backend *be = m->be;
    const char *fam = m->family->name;
    if (be->is_device && (!be->causal_conv || !be->deltanet || !be->deltanet_unfuse || !be->split_halves ||
                          !be->sigmoid_mul || (d->any_moe && (!be->moe_route || !be->moe_experts || !be->sigmoid_gate_add))))
        return ci_err(err, errlen, "%s: the %s backend lacks the gated-DeltaNet or MoE ops; run it with --device cpu", fam,
                      be->name);
    d->dev = calloc(d->n_layers > 0 ? (size_t)d->n_layers : 1, sizeof *d->dev);
    size_t n_views = 0;
    for (int l = 0; l < d->n_layers; l++) n_views += d->layers[l].is_moe ? 3 * (size_t)d->layers[l].moe.n_experts : 0;
    if (n_views) d->dev_expert_mats = calloc(n_views, sizeof(ci_mat));
    if (!d->dev || (n_views && !d->dev_expert_mats)) return ci_err(err, errlen, "%s: out of memory", fam);
    ci_mat *em = d->dev_expert_mats;
    int bad = ci_place_mat(be, &d->dev_embed, &d->embed) || ci_place_mat(be, &d->dev_head, &d->lm_head) ||
              ci_place_vec(be, &d->dev_final_norm, d->final_norm, d->D) ||
              ci_place_vec(be, &d->dev_inv_freq, d->rope.inv_freq, d->rope.rot_dim / 2);
    for (int l = 0; l < d->n_layers && !bad; l++) {
        const qh_layer *L = &d->layers[l];
        qh_placed *P = &d->dev[l];
        bad = ci_place_vec(be, &P->attn_norm, L->attn_norm, d->D);
        if (!bad && L->linear) bad = dn_place(be, &P->dn, &L->dn);
        if (!bad && !L->linear) {
            const attn_block *A = &L->ga.a;
            P->ga = L->ga;
            P->ga.a.inv_freq = d->dev_inv_freq;
            bad = ci_place_vec(be, &P->ga.a.q_norm, A->q_norm, A->hd) || ci_place_vec(be, &P->ga.a.k_norm, A->k_norm, A->hd) ||
                  ci_place_qkvo(be, &P->ga.a.wq, &P->ga.a.wk, &P->ga.a.wv, &P->ga.a.wo, &A->wq, &A->wk, &A->wv, &A->wo);
        }
        if (!bad) bad = ci_place_ffn(be, &P->ffn, &L->ffn, d->D, &P->moe, L->is_moe ? &L->moe : NULL, &em);
    }
    if (bad)
        return ci_err(err, errlen, "%s: %s: cannot place the weights in backend memory%s%s", fam, be->name,
                      be->last_error[0] ? ": " : "", be->last_error);
    return 0;
}

void qh_unload(ci_model *m) {
    qh_model *d = m->impl;
    if (!d) return;
    ci_buf_release(m->be, d->pool_kv);
    if (d->layers)
        for (int l = 0; l < d->n_layers; l++) dn_layer_free(&d->layers[l].dn);
    w_owned_free(d->owned, d->n_owned);
    shd_kept_free(&d->kept);
    rope_free(&d->rope);
    free(d->expert_mats);
    free(d->dev_expert_mats);
    free(d->dev);
    free(d->layers);
    free(d);
    m->impl = NULL;
}

void qh_set_deltanet_mode(ci_model *m, dn_mode mode) {
    if (!m->impl || m->family->ops->forward != qh_forward) return;
    ((qh_model *)m->impl)->mode = mode;
}

int qh_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen) {
    qh_model *d = m->impl;
    size_t rf = 0;
    int n_attn = 0;
    for (int l = 0; l < d->n_layers; l++) {
        if (d->layers[l].linear) continue;
        if (n_attn++ && qh_kv_floats(&d->layers[l], m->be) != rf)
            return ci_err(err, errlen, "%s: a paged cache needs attention layers of one width (layer %d: %zu floats a row, not %zu)",
                          m->family->name, l, qh_kv_floats(&d->layers[l], m->be), rf);
        rf = qh_kv_floats(&d->layers[l], m->be);
    }
    return hyb_pool_init(m, n_blocks, rf, n_attn, &d->pool_kv, err, errlen);
}

size_t qh_cache_bytes_per_token(const ci_model *m) {
    const qh_model *d = m->impl;
    size_t b = 0;
    for (int l = 0; l < d->n_layers; l++)
        if (!d->layers[l].linear) b += ga_row_floats(&d->layers[l].ga, m->be) * sizeof(float);
    return b;
}

