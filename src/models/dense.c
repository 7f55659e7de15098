/* dense.c — see dense.h. Shapes follow transformers' LlamaForCausalLM / Qwen3ForCausalLM.
 *
 * Activations are f32 [n, ·] for a chunk of n <= ub tokens (UBATCH_DEVICE below); prompts longer than that
 * run chunk by chunk through the same cache, so scratch is bounded and allocated once per
 * session (in backend memory, see dense.h). The decode path (n = 1) allocates nothing
 * after its first step (which may capture a graph). */
#include "dense.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "../nn/attn_block.h"
#include "../nn/ffn_block.h"
#include "../nn/moe.h"
#include "../nn/place.h"
#include "../parallel/shard.h"
#include "runner.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens per chunk: 256 on the CPU (scratch stays in cache); 4096 on a device, where a
 * chunk's matmuls are tensor-core GEMMs that want many rows (each chunk re-reads every
 * weight). A session's chunk is clamped to its context, but never below UBATCH. */
enum { UBATCH = 256, UBATCH_DEVICE = 4096 };

typedef struct {
    float *attn_norm;            /* [dim] input_layernorm */
    attn_block attn;             /* self_attn: q/k/v/o_proj [.., dim], q_norm / k_norm [hd] (Qwen3 only) */
    ffn_block ffn;               /* post_attention_layernorm [dim]; mlp: gate/up_proj [ff, dim], down_proj [dim, ff] */
    int is_moe;                  /* Qwen3-MoE sparse layer: ffn.moe = &moe replaces ffn's matrices */
    moe_block moe;
} dense_layer;

/* One layer's weights in backend memory. */
typedef struct {
    const float *attn_norm;
    attn_block attn;             /* its weights, norms and rope table placed */
    ffn_block ffn;               /* its norm and dense matrices placed (ffn.moe = &moe when sparse) */
    moe_block moe;               /* sparse layers: router and expert views placed */
} dense_placed;

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
    ci_mat *dev_expert_mats;     /* the same views placed (behind dev[l].moe) */
    shd_kept kept;               /* a tensor-parallel rank's copies of its split columns */
    /* What forward reads: the weights above as the backend placed them (be->weight; the
     * same addresses on the CPU). The bound host views stay for record mode and tests. */
    dense_placed *dev;           /* [n_layers] */
    ci_mat dev_embed, dev_head;
    const float *dev_final_norm, *dev_inv_freq;
    float *pool_k, *pool_v;      /* the model's shared block pool (ci_model_kv_pool), or NULL:
                                  * [n_layers][blocks * KV_BLOCK][n_kv*hd] each */
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

/* A tensor-parallel rank (its backend joined a communicator of world > 1): every layer's
 * bound views narrowed to its part (parallel/shard.h: its query heads and the key / value heads
 * they read, its columns of the MLP and of every expert; the copies of split columns kept in
 * d->kept), the dims the session sizes its buffers by made local. Embedding, norms, routers and
 * the head stay whole. */
static int shard_weights(ci_model *m, dense_model *d, char *err, size_t errlen) {
    const int W = m->be->world, R = m->be->rank;
    const shd_ctx t = { W, R, m->ep, &d->kept };
    const char *fam = m->family->name;
    char what[160];
    for (int l = 0; l < d->n_layers; l++) {
        dense_layer *L = &d->layers[l];
        snprintf(what, sizeof what, "%s: model.layers.%d over %d ranks", fam, l, W);
        if (attn_shard(&L->attn, &t, what, err, errlen) ||
            ffn_shard(&L->ffn, L->is_moe ? &L->moe : NULL, d->ff, &t, what, err, errlen))
            return -1;
    }
    shd_head(&d->lm_head, d->vocab, &t);
    d->n_heads = d->layers[0].attn.n_heads;
    d->n_kv = d->layers[0].attn.n_kv;
    if (d->ff) d->ff /= W;
    return 0;
}

/* After binding: every weight forward reads goes through be->weight (identity on the CPU). */
static int place_weights(ci_model *m, dense_model *d, char *err, size_t errlen) {
    ci_backend *be = m->be;
    const char *fam = m->family->name;
    d->dev = calloc(d->n_layers > 0 ? (size_t)d->n_layers : 1, sizeof *d->dev);
    size_t n_views = 0;
    for (int l = 0; l < d->n_layers; l++) n_views += d->layers[l].is_moe ? 3 * (size_t)d->layers[l].moe.n_experts : 0;
    if (n_views) d->dev_expert_mats = calloc(n_views, sizeof(ci_mat));
    if (!d->dev || (n_views && !d->dev_expert_mats)) return ci_err(err, errlen, "%s: out of memory", fam);
    ci_mat *em = d->dev_expert_mats;
    int bad = ci_place_mat(be, &d->dev_embed, &d->embed) || ci_place_mat(be, &d->dev_head, &d->lm_head) ||
              ci_place_vec(be, &d->dev_final_norm, d->final_norm, d->dim) ||
              ci_place_vec(be, &d->dev_inv_freq, d->rope.inv_freq, d->rope.rot_dim / 2);
    for (int l = 0; l < d->n_layers && !bad; l++) {
        const dense_layer *L = &d->layers[l];
        dense_placed *P = &d->dev[l];
        const attn_block *A = &L->attn;
        P->attn = *A;
        P->attn.inv_freq = d->dev_inv_freq;
        bad = ci_place_vec(be, &P->attn_norm, L->attn_norm, d->dim) ||
              ci_place_vec(be, &P->attn.q_norm, A->q_norm, d->hd) || ci_place_vec(be, &P->attn.k_norm, A->k_norm, d->hd) ||
              ci_place_qkvo(be, &P->attn.wq, &P->attn.wk, &P->attn.wv, &P->attn.wo, &A->wq, &A->wk, &A->wv, &A->wo);
        if (!bad) bad = ci_place_ffn(be, &P->ffn, &L->ffn, d->dim, &P->moe, L->is_moe ? &L->moe : NULL, &em);
    }
    if (bad)
        return ci_err(err, errlen, "%s: %s: cannot place the weights in backend memory%s%s", fam, be->name,
                      be->last_error[0] ? ": " : "", be->last_error);
    return 0;
}

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
    int D = d->dim;
    char pre[96];
    w_embed(&b, &d->embed, d->vocab, D, "model.embed_tokens");
    for (int l = 0; l < d->n_layers; l++) {
        dense_layer *L = &d->layers[l];
        w_vec(&b, &L->attn_norm, W_REQUIRED, D, 0, W_KIND_NORM, "model.layers.%d.input_layernorm.weight", l);
        attn_block *A = &L->attn;
        A->n_heads = d->n_heads; A->n_kv = d->n_kv; A->hd = d->hd; A->eps = d->eps; A->scale = d->attn_scale;
        attn_set_rope(A, &d->rope, CI_ROPE_NEOX);
        snprintf(pre, sizeof pre, "model.layers.%d.self_attn", l);
        attn_bind(&b, A, D, 1, pre, "o_proj", o->qk_norm ? "q_norm" : NULL, o->qk_norm ? "k_norm" : NULL, 0);
        char norm[96];
        snprintf(norm, sizeof norm, "model.layers.%d.post_attention_layernorm.weight", l);
        snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
        ffn_bind(&b, &L->ffn, D, d->ff, d->eps, norm, 0, sparse[l] ? NULL : pre, NULL);
        if (sparse[l]) {
            L->is_moe = 1;
            L->ffn.moe = &L->moe;
            L->moe = proto;
            L->moe.w_gate = em;
            L->moe.w_up = em + proto.n_experts;
            L->moe.w_down = em + 2 * proto.n_experts;
            em += 3 * proto.n_experts;
            w_mat(&b, &L->moe.gate, W_REQUIRED, proto.n_experts, D, "%s.gate", pre);
            w_experts(&b, L->moe.w_gate, L->moe.w_up, L->moe.w_down, proto.n_experts, proto.top_k, proto.inter, D, pre);
            if (!d->any_moe) d->any_moe = &L->moe;
        }
    }
    free(sparse);
    w_vec(&b, &d->final_norm, W_REQUIRED, D, 0, W_KIND_NORM, "model.norm.weight");
    w_head(&b, &d->lm_head, &d->embed, c->tie_embeddings, d->vocab, D, "lm_head");
    if (ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen)) return -1;
    if (!m->st) return 0;   /* record mode: nothing to place */
    if (m->be->world > 1 && shard_weights(m, d, err, errlen)) return -1;
    return place_weights(m, d, err, errlen);
}

void dense_unload(ci_model *m) {
    dense_model *d = m->impl;
    if (!d) return;
    ci_buf_release(m->be, d->pool_k);
    ci_buf_release(m->be, d->pool_v);
    w_owned_free(d->owned, d->n_owned);
    shd_kept_free(&d->kept);
    rope_free(&d->rope);
    free(d->expert_mats);
    free(d->dev_expert_mats);
    free(d->layers);
    free(d->dev);
    free(d);
    m->impl = NULL;
}

/* Float slots of one K (or V) cache row: n_kv*hd values, f16 two to a slot on a kv_f16 backend. */
static size_t kv_slots(const dense_model *d, const ci_backend *be) {
    return (size_t)ci_kv_slots(be, d->n_kv * d->hd);
}

size_t dense_cache_bytes_per_token(const ci_model *m) {
    const dense_model *d = m->impl;
    return (size_t)d->n_layers * 2 * kv_slots(d, m->be) * sizeof(float);
}

/* ---- the session: every buffer in backend memory ------------------------------------------
 *
 * Model code holds these addresses and passes them (and addresses inside them) to ops; it
 * never reads or writes their bytes. Per chunk the host uploads the token ids and positions,
 * runs ops, and downloads the logits (or 4 bytes of argmax). */

typedef struct {
    float *k, *v;                /* the block pool's rows: [n_layers][lrows][kvs], position p of
                                  * layer l at row ci_page_row(p) of layer l (s->pages); the
                                  * model's shared pool or the session's own (own_kv) */
    int64_t lrows;               /* rows per layer: the pool's blocks * KV_BLOCK */
    int own_kv;
    int kvs;                     /* float slots of a K / V row (kv_slots: n_kv*hd, or half in f16) */
    ci_pages bpg;                /* a batch step's (ci_runner_batch_pages: a table per row) */
    float *x, *xn;               /* [ub, dim] */
    float *q;                    /* [ub, n_heads*hd] */
    float *att;                  /* [ub, max(n_heads*hd, dim)] */
    float *g, *u;                /* [ub, ff] */
    float *kb, *vb;              /* [ub, n_kv*hd] a chunk's k / v rows before the cache */
    float *last;                 /* [dim] the last row, final-normed */
    ci_runner run;               /* the chunk loop: ids / positions, head buffers, decode graphs;
                                  * run.ub is this session's chunk (UBATCH above: its scratch rows) */
    attn_cache *hkv;             /* [ub] host memory: a batch step's per-row layer caches */
    int32_t *best_n;             /* [ub] per-row argmax of a forward_batch_argmax step */
    moe_scratch moe;             /* when any layer is MoE (host memory: CPU only) */
} dense_cache;

static void chunk_ops(ci_session *s, int n, int head);

/* The shared pool's rows (ci_model_kv_pool): n_blocks blocks of every layer. */
int dense_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen) {
    dense_model *d = m->impl;
    const size_t kvw = kv_slots(d, m->be);
    return ci_pool_buffers(m, n_blocks, &d->pool_k, kvw, d->n_layers, &d->pool_v, kvw, d->n_layers, err, errlen);
}

int dense_session_init(ci_session *s, char *err, size_t errlen) {
    const dense_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    dense_cache *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", s->m->family->name);
    s->impl = c;
    int n_blocks = 0;
    if (ci_session_pages_init(s, &n_blocks, err, errlen)) return -1;
    c->lrows = (int64_t)n_blocks * KV_BLOCK;
    c->kvs = (int)kv_slots(d, be);
    size_t kv = (size_t)d->n_layers * (size_t)c->lrows * (size_t)c->kvs, f = sizeof(float);
    int ub = be->is_device ? UBATCH_DEVICE : UBATCH;
    if (ub > s->max_ctx) ub = s->max_ctx > UBATCH ? s->max_ctx : UBATCH;
    if (s->max_rows > 0 && ub > s->max_rows) ub = s->max_rows;   /* the caller's largest call */
    int bad = 0;
    c->hkv = malloc((size_t)ub * sizeof(attn_cache));
    if (!c->hkv || ci_runner_alloc(&c->run, be, ub, d->vocab, d->dim, d->eps, UBATCH, chunk_ops, &bad))
        return ci_err(err, errlen, "%s: out of memory", s->m->family->name);
    size_t U = (size_t)ub, att_w = (size_t)(d->n_heads * d->hd > d->dim ? d->n_heads * d->hd : d->dim); /* also the MoE output */
    size_t ff = (size_t)(d->ff ? d->ff : 1), KD = (size_t)d->n_kv * d->hd;
    if (s->own_pool) {
        c->k = ci_buf_alloc(be, kv * f, &bad);
        c->v = ci_buf_alloc(be, kv * f, &bad);
        c->own_kv = 1;
    } else {
        c->k = d->pool_k;
        c->v = d->pool_v;
    }
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache (%zu MiB)%s%s", s->m->family->name, s->max_ctx,
                      kv * 2 * f >> 20, be->last_error[0] ? ": " : "", be->last_error);
    c->x = ci_buf_alloc(be, U * d->dim * f, &bad);
    c->xn = ci_buf_alloc(be, U * d->dim * f, &bad);
    c->q = ci_buf_alloc(be, U * d->n_heads * d->hd * f, &bad);
    c->att = ci_buf_alloc(be, U * att_w * f, &bad);
    c->g = ci_buf_alloc(be, U * ff * f, &bad);
    c->u = ci_buf_alloc(be, U * ff * f, &bad);
    c->kb = ci_buf_alloc(be, U * KD * f, &bad);
    c->vb = ci_buf_alloc(be, U * KD * f, &bad);
    c->last = ci_buf_alloc(be, (size_t)d->dim * f, &bad);
    c->best_n = ci_buf_alloc(be, U * sizeof(int32_t), &bad);
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for the session's scratch%s%s", s->m->family->name,
                      be->last_error[0] ? ": " : "", be->last_error);
    c->run.x = c->x;
    c->run.xn = c->xn;
    c->run.final_norm = d->dev_final_norm;
    c->run.head = &d->dev_head;
    if (d->any_moe && moe_scratch_init(s->m->be, &c->moe, d->any_moe, ub))
        return ci_err(err, errlen, "%s: out of memory for MoE scratch", s->m->family->name);
    return 0;
}

void dense_session_free(ci_session *s) {
    dense_cache *c = s->impl;
    if (!c) return;
    ci_backend *be = s->m->be;
    ci_runner_free(&c->run, be);
    if (c->own_kv) {
        ci_buf_release(be, c->k);
        ci_buf_release(be, c->v);
    }
    float *bufs[] = { c->x, c->xn, c->q, c->att, c->g, c->u, c->kb, c->vb, c->last };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ci_buf_release(be, bufs[i]);
    ci_buf_release(be, c->best_n);
    ci_session_pages_free(s);
    moe_scratch_free(s->m->be, &c->moe);
    free(c->hkv);
    free(c);
    s->impl = NULL;
}

/* The MLP block's buffers: the output / product goes to att (free after the attention's
 * dump; [ub, max(n_heads*hd, dim)]), the MoE's scratch is the session's. */
static ffn_bufs ffn_scratch(dense_cache *c) { return (ffn_bufs){ c->xn, c->g, c->u, c->att, &c->moe }; }

/* Layer l's K / V rows of a session with cache c (its pool's layer l; positions through
 * the session's table). */
static attn_cache layer_cache(const dense_cache *c, int max_ctx, int l) {
    size_t at = (size_t)l * (size_t)c->lrows * (size_t)c->kvs;
    return (attn_cache){ c->k + at, c->v + at, c->kvs, max_ctx };
}

/* The backend offset of position p of layer l in s (host side: exports and imports). */
static size_t row_at(const ci_session *s, int l, int p) {
    const dense_cache *c = s->impl;
    return ((size_t)l * (size_t)c->lrows + (size_t)ci_session_page_row(s, p)) * (size_t)c->kvs;
}

/* One chunk of n <= c->run.ub tokens whose ids and positions are in c->run.ids / c->run.pos: only ops
 * on the session's buffers, nothing read back and nothing decided from a position, so the
 * same calls can be recorded once as a graph and replayed at any later position. head:
 * CI_HEAD_LAST leaves the last row's logits in c->run.logits1, CI_HEAD_ARGMAX also their argmax in
 * c->run.best. */
static void chunk_ops(ci_session *s, int n, int head) {
    ci_model *m = s->m;
    const dense_model *d = m->impl;
    dense_cache *c = s->impl;
    ci_backend *be = m->be;
    const int D = d->dim;
    const ffn_bufs fb = ffn_scratch(c);
    ci_pages pbuf;
    const ci_pages *pg = ci_session_chunk_pages(s, &pbuf);   /* every row through the session's table */

    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    ci_dump_buf(m, "embed", -1, c->x, n, D);
    for (int l = 0; l < d->n_layers; l++) {
        const dense_placed *P = &d->dev[l];
        const attn_cache kv = layer_cache(c, s->max_ctx, l);
        const attn_bufs ab = { .q = c->q, .k = c->kb, .v = c->vb, .att = c->att, .xn = c->xn, .pos = c->run.pos,
                               .pages = pg, .keys = c->run.keys };
        /* x += o_proj(attention(rmsnorm(x))): Qwen3's q / k norms, RoPE at c->run.pos, k / v into cache rows c->run.pos */
        attn_forward(be, &P->attn, &ab, &kv, 1, c->x, P->attn_norm, d->eps, c->x, n);
        ci_dump_buf(m, "attn", l, c->att, n, d->n_heads * d->hd);
        ci_dump_buf(m, "after_attn", l, c->x, n, D);
        ffn_forward(be, &P->ffn, &fb, c->x, n);   /* x += mlp(rmsnorm(x)) or the MoE's */
        ci_dump_buf(m, "layer_out", l, c->x, n, D);
    }
    if (head == CI_HEAD_NONE) return;
    const ci_mat *head_w = &d->dev_head;
    float *const dst[1] = { ci_runner_head_dst(&c->run) };
    be->norm_matmul_n(be, c->last, c->x + (size_t)(n - 1) * D, d->dev_final_norm, d->eps, 1, dst, 1, &head_w);
    ci_runner_head_end(&c->run, be, head);
}

int dense_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    if (n > 0 && ci_session_pages_ready(s, s->pos + n, err, errlen)) return -1;
    return ci_runner_forward(&((dense_cache *)s->impl)->run, s, tokens, n, logits, all_logits, NULL, err, errlen);
}

int dense_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    if (n > 0 && ci_session_pages_ready(s, s->pos + n, err, errlen)) return -1;
    return ci_runner_forward(&((dense_cache *)s->impl)->run, s, tokens, n, NULL, 0, out_id, err, errlen);
}

/* ---- serving many sequences: batched decode step, cache rows out and in ------------------
 *
 * One decode step for n sequences: row i of every activation belongs to session ss[i] at
 * position ss[i]->pos. The projections, norms and the FFN / MoE run over all n rows at
 * once, so each weight matrix is read once per step instead of n times; per row,
 * qk_rope_store writes its k / v into its own session's cache at its position (pos buffer
 * + i) and attention_pos runs against that cache. Scratch is ss[0]'s. The head either
 * brings the n rows of logits back (logits), or takes each row's argmax on the backend and
 * brings back only those n int32 ids (out_ids: forward_batch_argmax). */
/* The ops of a batch step of n rows whose ids, positions and cache table are uploaded:
 * nothing read back when the head goes to best (argmax) or to dev_logits (the logits in
 * backend memory), so those forms can be recorded as a graph per n. */
static void batch_ops(ci_session *const *ss, int n, float *logits, int32_t *best, float *dev_logits) {
    ci_model *m = ss[0]->m;
    const dense_model *d = m->impl;
    dense_cache *c = ss[0]->impl;
    ci_backend *be = m->be;
    const ffn_bufs fb = ffn_scratch(c);
    attn_cache *kvs = c->hkv;
    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    for (int l = 0; l < d->n_layers; l++) {
        const dense_placed *P = &d->dev[l];
        const attn_bufs ab = { .q = c->q, .k = c->kb, .v = c->vb, .att = c->att, .xn = c->xn, .pos = c->run.pos,
                               .kv_tab = c->run.tab + (size_t)l * 2 * n, .pages = &c->bpg };
        for (int i = 0; i < n; i++) kvs[i] = layer_cache(ss[i]->impl, ss[i]->max_ctx, l);
        attn_forward(be, &P->attn, &ab, kvs, n, c->x, P->attn_norm, d->eps, c->x, n);  /* row i: its own cache */
        ffn_forward(be, &P->ffn, &fb, c->x, n);
    }
    if (dev_logits) ci_runner_head_into(&c->run, be, n, dev_logits);
    else ci_runner_head_rows(&c->run, be, n, logits, best);
}

static int forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                        size_t errlen) {
    ci_model *m = ss[0]->m;
    const dense_model *d = m->impl;
    dense_cache *c = ss[0]->impl;
    const size_t count = (size_t)d->n_layers * 2 * (size_t)c->run.ub;
    /* each row's block for its position, the rows' tables side by side; a wider table than
     * before moved the buffer, and its address is in the recorded graphs */
    const int grew = ci_runner_batch_begin(&c->run, m, ss, n, count, &c->bpg, err, errlen);
    if (grew < 0) return -1;
    for (int l = 0; l < d->n_layers; l++)
        for (int i = 0; i < n; i++) {
            attn_cache kv = layer_cache(ss[i]->impl, ss[i]->max_ctx, l);
            c->run.htab[(size_t)l * 2 * n + 2 * i] = kv.k;
            c->run.htab[(size_t)l * 2 * n + 2 * i + 1] = kv.v;
        }
    ci_runner_batch_step(&c->run, m, ss, tokens, n, (size_t)d->n_layers * 2 * n, logits, c->best_n, out_ids, grew, batch_ops);
    for (int i = 0; i < n; i++) ss[i]->pos++;
    return ci_backend_check(m, err, errlen);
}

/* Groups of at most ss[0]'s chunk of rows (its scratch), each through forward_rows. */
static int batch_all(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                     size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const dense_model *d = ss[0]->m->impl;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    const int ub = ((const dense_cache *)ss[0]->impl)->run.ub;
    for (int off = 0; off < n; off += ub) {
        int k = n - off < ub ? n - off : ub;
        if (forward_rows(ss + off, tokens + off, k, logits ? logits + (size_t)off * d->vocab : NULL,
                         out_ids ? out_ids + off : NULL, err, errlen))
            return -1;
    }
    return 0;
}

int dense_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, logits, NULL, err, errlen);
}

int dense_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, NULL, out_ids, err, errlen);
}

/* Position-major: for each position p < n, for each layer, K row then V row. Any prefix
 * of such a blob is the blob of that prefix. Rows move one by one between the cache
 * ([layer][pos] in backend memory) and the blob. */
int dense_cache_export(const ci_session *s, int n, void *dst, char *err, size_t errlen) {
    const dense_model *d = s->m->impl;
    const dense_cache *c = s->impl;
    ci_backend *be = s->m->be;
    if (n < 0 || n > s->pos) return ci_err(err, errlen, "%s: cache export of %d rows, %d held", s->m->family->name, n, s->pos);
    size_t row = (size_t)c->kvs;
    float *o = dst;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < d->n_layers; l++) {
            size_t at = row_at(s, l, p);
            be->download(be, o, c->k + at, row * sizeof(float)); o += row;
            be->download(be, o, c->v + at, row * sizeof(float)); o += row;
        }
    return ci_backend_check(s->m, err, errlen);
}

int dense_cache_import(ci_session *s, int n, const void *src, char *err, size_t errlen) {
    const dense_model *d = s->m->impl;
    dense_cache *c = s->impl;
    ci_backend *be = s->m->be;
    if (n < 0 || n > s->max_ctx) return ci_err(err, errlen, "%s: cache import of %d rows into a %d-token session", s->m->family->name, n, s->max_ctx);
    size_t row = (size_t)c->kvs;
    const float *q = src;
    ci_session_truncate(s, 0);   /* fresh blocks: a held one may be shared */
    if (ci_session_pages_ready(s, n, err, errlen)) return -1;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < d->n_layers; l++) {
            size_t at = row_at(s, l, p);
            be->upload(be, c->k + at, q, row * sizeof(float)); q += row;
            be->upload(be, c->v + at, q, row * sizeof(float)); q += row;
        }
    s->pos = n;
    return ci_backend_check(s->m, err, errlen);
}
