/* dense.c — see dense.h. Shapes follow transformers' LlamaForCausalLM / Qwen3ForCausalLM.
 *
 * Activations are f32 [n, ·] for a chunk of n <= UBATCH tokens; prompts longer than that
 * run chunk by chunk through the same cache, so scratch is bounded and allocated once per
 * session. The decode path (n = 1) allocates nothing. */
#include "dense.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "../nn/moe.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UBATCH = 256 };

typedef struct {
    float *attn_norm;            /* [dim] input_layernorm */
    ci_mat wq;                   /* [n_heads*hd, dim] */
    ci_mat wk, wv;               /* [n_kv*hd, dim] */
    ci_mat wo;                   /* [dim, n_heads*hd] */
    float *q_norm, *k_norm;      /* [hd], Qwen3 only */
    float *ffn_norm;             /* [dim] post_attention_layernorm */
    ci_mat wg, wu;               /* [ff, dim] */
    ci_mat wd;                   /* [dim, ff] */
    int is_moe;                  /* Qwen3-MoE sparse layer: moe replaces wg/wu/wd */
    moe_block moe;
} dense_layer;

typedef struct {
    int dim, n_layers, n_heads, n_kv, hd, ff, vocab;
    float eps, attn_scale;
    dense_opts opts;
    ci_mat embed;                /* [vocab, dim] */
    ci_mat lm_head;              /* [vocab, dim]; = embed when tied */
    float *final_norm;           /* [dim] */
    dense_layer *layers;         /* [n_layers] */
    rope_table rope;
    float **owned;
    int n_owned;
    const moe_block *any_moe;    /* first MoE block (for scratch sizing), or NULL */
    ci_mat *expert_mats;         /* owned array behind every layer's expert views */
} dense_model;

/* Qwen3-MoE: which layers are sparse, and the router / expert hyper-parameters. */
static int read_moe(ci_model *m, dense_model *d, moe_block *proto, unsigned char *sparse, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    long long E = 0, K = 0, I = 0, step = 1;
    int norm = 0;
    /* transformers 5 writes num_local_experts, hub checkpoints num_experts */
    const char *ekey = json_object_get(c->text, "num_local_experts") ? "num_local_experts" : "num_experts";
    if (cfg_int(c, ekey, 1, 1, 1 << 16, &E, err, errlen) ||
        cfg_int(c, "num_experts_per_tok", 1, 1, 1 << 16, &K, err, errlen) ||
        cfg_int(c, "moe_intermediate_size", 1, 1, 1 << 20, &I, err, errlen) ||
        cfg_int(c, "decoder_sparse_step", 0, 1, 1 << 16, &step, err, errlen) ||
        cfg_bool(c, "norm_topk_prob", &norm, err, errlen))
        return -1;
    if (K > E) return ci_err(err, errlen, "%s: %s: num_experts_per_tok %lld exceeds num_experts %lld", c->path, m->family->name, K, E);
    memset(proto, 0, sizeof *proto);
    proto->n_experts = (int)E;
    proto->top_k = (int)K;
    proto->hidden = d->dim;
    proto->inter = (int)I;
    proto->router = MOE_SOFTMAX;
    proto->norm_topk_prob = norm;
    proto->routed_scaling = 1.0f;
    proto->n_group = proto->topk_group = 1;
    for (int l = 0; l < d->n_layers; l++) sparse[l] = (l + 1) % step == 0;
    const json_t *only = json_object_get(c->text, "mlp_only_layers");
    if (only && !json_is_null(only)) {
        if (!json_is_array(only)) return ci_err(err, errlen, "%s: %s: mlp_only_layers must be a list of layer indices", c->path, m->family->name);
        size_t i;
        json_t *v;
        json_array_foreach(only, i, v) {
            if (!json_is_integer(v)) return ci_err(err, errlen, "%s: %s: mlp_only_layers must be a list of layer indices", c->path, m->family->name);
            long long l = json_integer_value(v);
            if (l >= 0 && l < d->n_layers) sparse[l] = 0;
        }
    }
    return 0;
}

typedef struct {
    float *k, *v;                /* [n_layers][max_ctx][n_kv*hd] */
    float *x, *xn;               /* [UBATCH, dim] */
    float *q;                    /* [UBATCH, n_heads*hd] */
    float *att;                  /* [UBATCH, max(n_heads*hd, dim)] */
    float *g, *u;                /* [UBATCH, ff] */
    float *last;                 /* [dim] */
    int32_t *pos;                /* [UBATCH] */
    float *kb, *vb;              /* [UBATCH, n_kv*hd] k/v rows of a batched step (forward_batch) */
    moe_scratch moe;             /* when any layer is MoE */
} dense_cache;

int dense_load(ci_model *m, const dense_opts *o, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    dense_model *d = calloc(1, sizeof *d);
    if (!d) return ci_err(err, errlen, "%s: out of memory", fam);
    m->impl = d;
    d->opts = *o;
    d->dim = (int)c->hidden_size;
    d->n_layers = (int)c->n_layers;
    d->vocab = (int)c->vocab_size;
    d->ff = (int)c->intermediate_size;
    if (!c->n_heads) return ci_err(err, errlen, "%s: %s: required key 'num_attention_heads' is missing", c->path, fam);
    if (!d->ff) return ci_err(err, errlen, "%s: %s: required key 'intermediate_size' is missing", c->path, fam);
    d->n_heads = (int)c->n_heads;
    d->n_kv = c->n_kv_heads ? (int)c->n_kv_heads : d->n_heads;
    if (d->n_heads % d->n_kv)
        return ci_err(err, errlen, "%s: %s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                      c->path, fam, d->n_heads, d->n_kv);
    if (c->head_dim) d->hd = (int)c->head_dim;
    else {
        if (d->dim % d->n_heads)
            return ci_err(err, errlen, "%s: %s: hidden_size %d is not a multiple of num_attention_heads %d",
                          c->path, fam, d->dim, d->n_heads);
        d->hd = d->dim / d->n_heads;
    }
    d->eps = (float)c->rms_eps;
    d->attn_scale = 1.0f / sqrtf((float)d->hd);
    int bias = 0;
    if (cfg_bool(c, "attention_bias", &bias, err, errlen)) return -1;
    if (bias) return ci_err(err, errlen, "%s: %s: attention_bias=true is not implemented yet", c->path, fam);
    if (cfg_bool(c, "mlp_bias", &bias, err, errlen)) return -1;
    if (bias) return ci_err(err, errlen, "%s: %s: mlp_bias=true is not implemented yet", c->path, fam);
    const char *act = cj_get_str(c->text, "hidden_act");
    if (act && strcmp(act, "silu"))
        return ci_err(err, errlen, "%s: %s: hidden_act '%s' is not supported (silu)", c->path, fam, act);
    /* Qwen3 / Qwen3-MoE slide on layers from max_window_layers on, or those layer_types names */
    int swa = 0;
    if (cfg_bool(c, "use_sliding_window", &swa, err, errlen)) return -1;
    const json_t *win = json_object_get(c->text, "sliding_window"), *lt = json_object_get(c->text, "layer_types");
    if (swa && win && !json_is_null(win)) {
        long long from = 28;
        if (cfg_int(c, "max_window_layers", 0, 0, 1 << 16, &from, err, errlen)) return -1;
        for (int l = 0; l < d->n_layers; l++) {
            const char *t = json_is_array(lt) ? json_string_value(json_array_get(lt, (size_t)l)) : NULL;
            if (json_is_array(lt) ? t && !strcmp(t, "sliding_attention") : l >= from)
                return ci_err(err, errlen, "%s: %s: use_sliding_window=true (sliding attention on layer %d) is not implemented yet",
                              c->path, fam, l);
        }
    }
    if (rope_init(&d->rope, &c->rope, d->hd, fam, err, errlen)) return -1;
    d->layers = calloc((size_t)d->n_layers, sizeof *d->layers);
    if (!d->layers) return ci_err(err, errlen, "%s: out of memory", fam);

    moe_block proto;
    unsigned char *sparse = calloc((size_t)d->n_layers, 1);
    if (!sparse) return ci_err(err, errlen, "%s: out of memory", fam);
    int n_sparse = 0;
    if (o->moe) {
        if (read_moe(m, d, &proto, sparse, err, errlen)) { free(sparse); return -1; }
        for (int l = 0; l < d->n_layers; l++) n_sparse += sparse[l];
        if (n_sparse == d->n_layers) d->ff = 0; /* no dense MLP: no tensor backs intermediate_size, scratch ignores it */
        if (w_check_experts(m->st, c->path, fam, json_object_get(c->text, "num_local_experts") ? "num_local_experts" : "num_experts",
                            proto.n_experts, n_sparse, 3, err, errlen)) { free(sparse); return -1; }
        d->expert_mats = calloc((size_t)n_sparse * proto.n_experts * 3 + 1, sizeof(ci_mat));
        if (!d->expert_mats) { free(sparse); return ci_err(err, errlen, "%s: out of memory", fam); }
    }
    w_binder b;
    if (w_init(&b, m->st, fam, d->n_layers)) { free(sparse); return ci_err(err, errlen, "%s", b.err); }
    w_set_quant(&b, &c->quant);   /* mlx-community checkpoints: check packing against config.json */
    ci_mat *em = d->expert_mats;
    int D = d->dim, QD = d->n_heads * d->hd, KD = d->n_kv * d->hd;
    w_embed(&b, &d->embed, d->vocab, D, "model.embed_tokens");
    for (int l = 0; l < d->n_layers; l++) {
        dense_layer *L = &d->layers[l];
        w_vec(&b, &L->attn_norm, W_REQUIRED, D, 0, W_KIND_NORM, "model.layers.%d.input_layernorm.weight", l);
        w_mat(&b, &L->wq, W_REQUIRED, QD, D, "model.layers.%d.self_attn.q_proj", l);
        w_mat(&b, &L->wk, W_REQUIRED, KD, D, "model.layers.%d.self_attn.k_proj", l);
        w_mat(&b, &L->wv, W_REQUIRED, KD, D, "model.layers.%d.self_attn.v_proj", l);
        w_mat(&b, &L->wo, W_REQUIRED, D, QD, "model.layers.%d.self_attn.o_proj", l);
        if (o->qk_norm) {
            w_vec(&b, &L->q_norm, W_REQUIRED, d->hd, 0, W_KIND_NORM, "model.layers.%d.self_attn.q_norm.weight", l);
            w_vec(&b, &L->k_norm, W_REQUIRED, d->hd, 0, W_KIND_NORM, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        w_vec(&b, &L->ffn_norm, W_REQUIRED, D, 0, W_KIND_NORM, "model.layers.%d.post_attention_layernorm.weight", l);
        if (sparse[l]) {
            L->is_moe = 1;
            L->moe = proto;
            L->moe.w_gate = em;
            L->moe.w_up = em + proto.n_experts;
            L->moe.w_down = em + 2 * proto.n_experts;
            em += 3 * proto.n_experts;
            w_mat(&b, &L->moe.gate, W_REQUIRED, proto.n_experts, D, "model.layers.%d.mlp.gate", l);
            char pre[96];
            snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
            w_experts(&b, L->moe.w_gate, L->moe.w_up, L->moe.w_down, proto.n_experts, proto.top_k, proto.inter, D, pre);
            if (!d->any_moe) d->any_moe = &L->moe;
        } else {
            w_mat(&b, &L->wg, W_REQUIRED, d->ff, D, "model.layers.%d.mlp.gate_proj", l);
            w_mat(&b, &L->wu, W_REQUIRED, d->ff, D, "model.layers.%d.mlp.up_proj", l);
            w_mat(&b, &L->wd, W_REQUIRED, D, d->ff, "model.layers.%d.mlp.down_proj", l);
        }
    }
    free(sparse);
    w_vec(&b, &d->final_norm, W_REQUIRED, D, 0, W_KIND_NORM, "model.norm.weight");
    w_head(&b, &d->lm_head, &d->embed, c->tie_embeddings, d->vocab, D, "lm_head");
    int rc = ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen);
    return rc;
}

void dense_unload(ci_model *m) {
    dense_model *d = m->impl;
    if (!d) return;
    w_owned_free(d->owned, d->n_owned);
    rope_free(&d->rope);
    free(d->expert_mats);
    free(d->layers);
    free(d);
    m->impl = NULL;
}

size_t dense_cache_bytes_per_token(const ci_model *m) {
    const dense_model *d = m->impl;
    return (size_t)d->n_layers * 2 * (size_t)d->n_kv * (size_t)d->hd * sizeof(float);
}

int dense_session_init(ci_session *s, char *err, size_t errlen) {
    const dense_model *d = s->m->impl;
    dense_cache *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", s->m->family->name);
    s->impl = c;
    size_t kv = (size_t)d->n_layers * (size_t)s->max_ctx * (size_t)d->n_kv * (size_t)d->hd;
    c->k = malloc(kv * sizeof(float));
    c->v = malloc(kv * sizeof(float));
    c->x = malloc((size_t)UBATCH * d->dim * sizeof(float));
    c->xn = malloc((size_t)UBATCH * d->dim * sizeof(float));
    c->q = malloc((size_t)UBATCH * d->n_heads * d->hd * sizeof(float));
    int att_w = d->n_heads * d->hd > d->dim ? d->n_heads * d->hd : d->dim;  /* also the MoE output */
    c->att = malloc((size_t)UBATCH * att_w * sizeof(float));
    c->g = malloc((size_t)UBATCH * (d->ff ? d->ff : 1) * sizeof(float));
    c->u = malloc((size_t)UBATCH * (d->ff ? d->ff : 1) * sizeof(float));
    c->last = malloc((size_t)d->dim * sizeof(float));
    c->pos = malloc(UBATCH * sizeof(int32_t));
    c->kb = malloc((size_t)UBATCH * d->n_kv * d->hd * sizeof(float));
    c->vb = malloc((size_t)UBATCH * d->n_kv * d->hd * sizeof(float));
    if (d->any_moe && moe_scratch_init(&c->moe, d->any_moe, UBATCH))
        return ci_err(err, errlen, "%s: out of memory for MoE scratch", s->m->family->name);
    if (!c->k || !c->v || !c->x || !c->xn || !c->q || !c->att || !c->g || !c->u || !c->last || !c->pos || !c->kb || !c->vb)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache (%zu MiB)", s->m->family->name,
                      s->max_ctx, kv * 2 * sizeof(float) >> 20);
    return 0;
}

void dense_session_free(ci_session *s) {
    dense_cache *c = s->impl;
    if (!c) return;
    free(c->k); free(c->v); free(c->x); free(c->xn); free(c->q); free(c->att);
    free(c->g); free(c->u); free(c->last); free(c->pos); free(c->kb); free(c->vb);
    moe_scratch_free(&c->moe);
    free(c);
    s->impl = NULL;
}

/* One chunk of n <= UBATCH tokens at positions s->pos.. */
static void forward_chunk(ci_session *s, const int *tokens, int n, float *logits, int all_logits) {
    ci_model *m = s->m;
    const dense_model *d = m->impl;
    dense_cache *c = s->impl;
    ci_backend *be = m->be;
    const int D = d->dim, H = d->n_heads, KV = d->n_kv, hd = d->hd, KD = KV * hd;
    const int pos0 = s->pos;
    for (int t = 0; t < n; t++) c->pos[t] = pos0 + t;

    be->embed(be, c->x, &d->embed, tokens, n);
    CI_DUMP(m, "embed", -1, c->x, n, D);
    for (int l = 0; l < d->n_layers; l++) {
        const dense_layer *L = &d->layers[l];
        float *kc = c->k + (size_t)l * s->max_ctx * KD, *vc = c->v + (size_t)l * s->max_ctx * KD;
        float *k = kc + (size_t)pos0 * KD, *v = vc + (size_t)pos0 * KD;  /* this chunk's rows */

        be->rmsnorm(be, c->xn, c->x, L->attn_norm, n, D, d->eps);
        be->matmul(be, c->q, c->xn, n, &L->wq);          /* q [n, H*hd] */
        be->matmul(be, k, c->xn, n, &L->wk);             /* k [n, KV*hd], straight into the cache */
        be->matmul(be, v, c->xn, n, &L->wv);
        if (d->opts.qk_norm) {                           /* per-head RMSNorm over hd */
            be->rmsnorm(be, c->q, c->q, L->q_norm, n * H, hd, d->eps);
            be->rmsnorm(be, k, k, L->k_norm, n * KV, hd, d->eps);
        }
        be->rope(be, c->q, n, H, hd, 0, d->rope.rot_dim, c->pos, d->rope.inv_freq, d->rope.mscale, CI_ROPE_NEOX);
        be->rope(be, k, n, KV, hd, 0, d->rope.rot_dim, c->pos, d->rope.inv_freq, d->rope.mscale, CI_ROPE_NEOX);
        be->attention(be, c->att, c->q, kc, vc, n, pos0, H, KV, hd, KD, d->attn_scale);
        CI_DUMP(m, "attn", l, c->att, n, H * hd);
        be->matmul(be, c->xn, c->att, n, &L->wo);        /* [n, D] */
        be->add(be, c->x, c->xn, (int64_t)n * D);
        CI_DUMP(m, "after_attn", l, c->x, n, D);

        be->rmsnorm(be, c->xn, c->x, L->ffn_norm, n, D, d->eps);
        if (L->is_moe) {
            moe_forward(be, &L->moe, &c->moe, c->att, c->xn, n);  /* att reused as [n, D] output */
            be->add(be, c->x, c->att, (int64_t)n * D);
        } else {
            be->matmul(be, c->g, c->xn, n, &L->wg);      /* [n, ff] */
            be->matmul(be, c->u, c->xn, n, &L->wu);
            be->swiglu(be, c->g, c->u, (int64_t)n * d->ff);
            be->matmul(be, c->xn, c->g, n, &L->wd);      /* [n, D] */
            be->add(be, c->x, c->xn, (int64_t)n * D);
        }
        CI_DUMP(m, "layer_out", l, c->x, n, D);
    }
    ci_lm_head(be, logits, all_logits, c->x, n, D, d->final_norm, d->eps, &d->lm_head, c->xn, c->last);
    s->pos += n;
}

int dense_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    const dense_model *d = s->m->impl;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen)) return -1;
    ci_forward_chunks(s, tokens, n, logits, all_logits, d->vocab, UBATCH, forward_chunk);
    return 0;
}

/* ---- serving many sequences: batched decode step, cache rows out and in ------------------
 *
 * One decode step for n sequences: row i of every activation belongs to session ss[i] at
 * position ss[i]->pos. The projections, norms, RoPE (per-row positions) and the FFN / MoE
 * run over all n rows at once, so each weight matrix is read once per step instead of n
 * times; k and v rows land in the batch scratch, then each is copied into its own session's
 * cache, and attention runs per row against that session's cache. Scratch is ss[0]'s. */
static void forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits) {
    ci_model *m = ss[0]->m;
    const dense_model *d = m->impl;
    dense_cache *c = ss[0]->impl;
    ci_backend *be = m->be;
    const int D = d->dim, H = d->n_heads, KV = d->n_kv, hd = d->hd, KD = KV * hd, QD = H * hd;
    for (int i = 0; i < n; i++) c->pos[i] = ss[i]->pos;

    be->embed(be, c->x, &d->embed, tokens, n);
    for (int l = 0; l < d->n_layers; l++) {
        const dense_layer *L = &d->layers[l];
        be->rmsnorm(be, c->xn, c->x, L->attn_norm, n, D, d->eps);
        be->matmul(be, c->q, c->xn, n, &L->wq);          /* q [n, H*hd] */
        be->matmul(be, c->kb, c->xn, n, &L->wk);         /* k [n, KV*hd] */
        be->matmul(be, c->vb, c->xn, n, &L->wv);
        if (d->opts.qk_norm) {
            be->rmsnorm(be, c->q, c->q, L->q_norm, n * H, hd, d->eps);
            be->rmsnorm(be, c->kb, c->kb, L->k_norm, n * KV, hd, d->eps);
        }
        be->rope(be, c->q, n, H, hd, 0, d->rope.rot_dim, c->pos, d->rope.inv_freq, d->rope.mscale, CI_ROPE_NEOX);
        be->rope(be, c->kb, n, KV, hd, 0, d->rope.rot_dim, c->pos, d->rope.inv_freq, d->rope.mscale, CI_ROPE_NEOX);
        for (int i = 0; i < n; i++) {                    /* each row into its own cache, then attend */
            dense_cache *ci = ss[i]->impl;
            float *kc = ci->k + (size_t)l * ss[i]->max_ctx * KD, *vc = ci->v + (size_t)l * ss[i]->max_ctx * KD;
            memcpy(kc + (size_t)c->pos[i] * KD, c->kb + (size_t)i * KD, (size_t)KD * sizeof(float));
            memcpy(vc + (size_t)c->pos[i] * KD, c->vb + (size_t)i * KD, (size_t)KD * sizeof(float));
            be->attention(be, c->att + (size_t)i * QD, c->q + (size_t)i * QD, kc, vc, 1, c->pos[i], H, KV, hd, KD,
                          d->attn_scale);
        }
        be->matmul(be, c->xn, c->att, n, &L->wo);
        be->add(be, c->x, c->xn, (int64_t)n * D);

        be->rmsnorm(be, c->xn, c->x, L->ffn_norm, n, D, d->eps);
        if (L->is_moe) {
            moe_forward(be, &L->moe, &c->moe, c->att, c->xn, n);
            be->add(be, c->x, c->att, (int64_t)n * D);
        } else {
            be->matmul(be, c->g, c->xn, n, &L->wg);
            be->matmul(be, c->u, c->xn, n, &L->wu);
            be->swiglu(be, c->g, c->u, (int64_t)n * d->ff);
            be->matmul(be, c->xn, c->g, n, &L->wd);
            be->add(be, c->x, c->xn, (int64_t)n * D);
        }
    }
    be->rmsnorm(be, c->xn, c->x, d->final_norm, n, D, d->eps);
    be->matmul(be, logits, c->xn, n, &d->lm_head);
    for (int i = 0; i < n; i++) ss[i]->pos++;
}

int dense_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const dense_model *d = ss[0]->m->impl;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int off = 0; off < n; off += UBATCH) {
        int k = n - off < UBATCH ? n - off : UBATCH;
        forward_rows(ss + off, tokens + off, k, logits + (size_t)off * d->vocab);
    }
    return 0;
}

/* Position-major: for each position p < n, for each layer, K row then V row. Any prefix
 * of such a blob is the blob of that prefix. */
int dense_cache_export(const ci_session *s, int n, void *dst, char *err, size_t errlen) {
    const dense_model *d = s->m->impl;
    const dense_cache *c = s->impl;
    if (n < 0 || n > s->pos) return ci_err(err, errlen, "%s: cache export of %d rows, %d held", s->m->family->name, n, s->pos);
    size_t row = (size_t)d->n_kv * d->hd;
    float *o = dst;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < d->n_layers; l++) {
            size_t at = ((size_t)l * s->max_ctx + (size_t)p) * row;
            memcpy(o, c->k + at, row * sizeof(float)); o += row;
            memcpy(o, c->v + at, row * sizeof(float)); o += row;
        }
    return 0;
}

int dense_cache_import(ci_session *s, int n, const void *src, char *err, size_t errlen) {
    const dense_model *d = s->m->impl;
    dense_cache *c = s->impl;
    if (n < 0 || n > s->max_ctx) return ci_err(err, errlen, "%s: cache import of %d rows into a %d-token session", s->m->family->name, n, s->max_ctx);
    size_t row = (size_t)d->n_kv * d->hd;
    const float *q = src;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < d->n_layers; l++) {
            size_t at = ((size_t)l * s->max_ctx + (size_t)p) * row;
            memcpy(c->k + at, q, row * sizeof(float)); q += row;
            memcpy(c->v + at, q, row * sizeof(float)); q += row;
        }
    s->pos = n;
    return 0;
}
