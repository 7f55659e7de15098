/* lfm2.c — the LFM2 family (model_type "lfm2") and the hybrid decoder it shares with
 * lfm2_moe (see lfm2.h). Shapes and formulas follow transformers 5's Lfm2ForCausalLM /
 * Lfm2MoeForCausalLM.
 *
 * Config, both dialects: transformers 5 (intermediate_size, layer_types, rope_parameters,
 * tie_word_embeddings) and the keys LiquidAI's hub checkpoints ship (block_ff_dim,
 * full_attn_idxs, tie_embedding). tie_embedding overrides tie_word_embeddings; both default
 * to tied. norm_eps defaults to 1e-5 and rope_theta to 1e6. The hub key "theta" is not
 * read: transformers 5 ignores it too (4.x read it), so a config with only "theta" runs at
 * the default 1e6, as it does there. lfm2's FF width, when block_auto_adjust_ff_dim:
 * ff = int(2·ff/3), then (unless block_ffn_dim_multiplier is null) int(multiplier·ff)
 * rounded up to block_multiple_of.
 *
 * Tensors (transformers' names): model.embed_tokens, model.layers.N.{operator_norm,
 * ffn_norm}, self_attn.{q,k,v,out}_proj + {q,k}_layernorm, conv.{in_proj, out_proj,
 * conv.weight [H, 1, K]}, feed_forward.{w1,w3,w2} (gate, up, down); MoE layers:
 * feed_forward.gate [E, H], feed_forward.expert_bias [E], experts as transformers saves
 * them (experts.E.{w1,w3,w2}) or fused (experts.gate_up_proj / down_proj) or mlx-stacked
 * (switch_mlp.*); model.embedding_norm (the final norm); lm_head unless tied.
 * mlx-lm's sanitize (mlx-community checkpoints): conv.conv.weight [H, K, 1] (w_conv reads
 * either), and for lfm2_moe every w1 / w3 / w2 renamed gate_proj / up_proj / down_proj (the
 * dense layers' too: a dense layer with feed_forward.gate_proj.weight is bound by those
 * names); any matrix may be MLX-quantized (weights.h), checked against config.json.
 *
 * Invariants: a session's cache position equals s->pos after every forward; at position 0
 * a forward first zeroes every conv state (ci_session_reset only rewinds s->pos). Prompts
 * run in chunks of at most `chunk` <= LFM2_UBATCH tokens; the decode path allocates nothing. */
#include "lfm2.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "../nn/attn_block.h"
#include "../nn/ffn_block.h"
#include "../nn/moe.h"
#include "../nn/rope.h"
#include "../nn/shortconv.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int is_attn, is_moe;
    float *op_norm;              /* [H] operator_norm */
    attn_block attn;             /* attention: q/k/v_proj, out_proj, q_layernorm / k_layernorm [hd] */
    shortconv conv;              /* conv layers */
    ffn_block ffn;               /* ffn_norm [H]; dense: w1 / w3 [ff, H] gate, up, w2 [H, ff] down */
    moe_block moe;               /* MoE FF (lfm2_moe past num_dense_layers): ffn.moe = &moe */
} lfm2_layer;

typedef struct {
    int H, n_layers, vocab, n_heads, n_kv, hd, ff, K;
    float eps, attn_scale;
    ci_mat embed;                /* [vocab, H] */
    ci_mat lm_head;              /* [vocab, H]; = embed when tied */
    float *final_norm;           /* [H] embedding_norm */
    lfm2_layer *layers;          /* [n_layers] */
    rope_table rope;
    ci_mat *expert_mats;         /* owned array behind every MoE layer's expert views */
    const moe_block *any_moe;    /* first MoE block (scratch sizing), or NULL */
    int any_conv;
    float **owned;
    int n_owned;
} lfm2_model;

typedef struct {
    ci_cache cache;              /* attention layer: rows [max_ctx, 2*n_kv*hd] (K then V);
                                  * conv layer: state [(K-1)*H] */
    int chunk;                   /* prefill tokens per pass, <= LFM2_UBATCH */
    float *x, *xn;               /* [UBATCH, H] */
    float *q;                    /* [UBATCH, n_heads*hd] */
    float *k, *v;                /* [UBATCH, n_kv*hd] this chunk's keys / values */
    float *att;                  /* [UBATCH, max(n_heads*hd, H)] */
    float *g, *u;                /* [UBATCH, ff] */
    float *last;                 /* [H] */
    int32_t *pos;                /* [UBATCH] */
    sc_scratch sc;
    moe_scratch moe;
} lfm2_session;

static int lfm2_is_family(const ci_family *f) { return f == &fam_lfm2 || f == &fam_lfm2_moe; }

/* ---- config ---------------------------------------------------------------------------- */

static int present(const json_t *obj, const char *key) {
    const json_t *v = obj ? json_object_get(obj, key) : NULL;
    return v && !json_is_null(v);
}

/* Which layers are attention: layer_types, else (lfm2) full_attn_idxs, else (lfm2) all. */
static int read_layer_types(const ci_config *c, const char *fam, int moe, unsigned char *attn, int L, char *err,
                            size_t errlen) {
    const json_t *lt = json_object_get(c->text, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != L)
            return ci_err(err, errlen, "%s: %s: layer_types must be a list of %d entries ('conv' or 'full_attention')",
                          c->path, fam, L);
        for (int l = 0; l < L; l++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)l));
            if (t && !strcmp(t, "full_attention")) attn[l] = 1;
            else if (t && !strcmp(t, "conv")) attn[l] = 0;
            else return ci_err(err, errlen, "%s: %s: layer_types[%d] is '%s', expected 'conv' or 'full_attention'",
                               c->path, fam, l, t ? t : "(not a string)");
        }
        return 0;
    }
    if (moe) return ci_err(err, errlen, "%s: %s: required key 'layer_types' is missing", c->path, fam);
    const json_t *fa = json_object_get(c->text, "full_attn_idxs");
    if (!fa || json_is_null(fa)) {
        for (int l = 0; l < L; l++) attn[l] = 1;
        return 0;
    }
    if (!json_is_array(fa)) return ci_err(err, errlen, "%s: %s: full_attn_idxs must be a list of layer indices", c->path, fam);
    memset(attn, 0, (size_t)L);
    size_t i;
    json_t *v;
    json_array_foreach(fa, i, v) {
        if (!json_is_integer(v)) return ci_err(err, errlen, "%s: %s: full_attn_idxs must be a list of layer indices", c->path, fam);
        long long idx = json_integer_value(v);
        if (idx >= 0 && idx < L) attn[idx] = 1;
    }
    return 0;
}

/* lfm2's FF width (Lfm2MLP): block_ff_dim / intermediate_size, auto-adjusted. */
static int read_ff_lfm2(const ci_config *c, const char *fam, long long *ff, char *err, size_t errlen) {
    long long f = 12288, mult_of = 256;
    int adjust = 1;
    double mult = 1.0;
    if (cfg_int(c, "intermediate_size", 0, 1, 1 << 22, &f, err, errlen) ||
        cfg_int(c, "block_ff_dim", 0, 1, 1 << 22, &f, err, errlen) ||
        cfg_int(c, "block_multiple_of", 0, 1, 1 << 20, &mult_of, err, errlen) ||
        cfg_bool(c, "block_auto_adjust_ff_dim", &adjust, err, errlen))
        return -1;
    const json_t *mj = json_object_get(c->text, "block_ffn_dim_multiplier");
    int has_mult = !mj || !json_is_null(mj);      /* null: no multiplier and no rounding */
    if (has_mult && cfg_num(c, "block_ffn_dim_multiplier", 0, 1e-6, 1e6, &mult, err, errlen)) return -1;
    if (adjust) {
        f = (long long)(2.0 * (double)f / 3.0);
        if (has_mult) {
            f = (long long)(mult * (double)f);
            f = mult_of * ((f + mult_of - 1) / mult_of);
        }
    }
    if (f < 1 || f > (1 << 22))
        return ci_err(err, errlen, "%s: %s: the adjusted feed-forward width %lld is out of range", c->path, fam, f);
    *ff = f;
    return 0;
}

/* The rope block (rope_parameters, nested per layer type or not, or rope_scaling) with
 * transformers' default theta for these families, 1e6, when no rope_theta is given. */
static int read_rope(const ci_config *c, ci_rope_cfg *rc, char *err, size_t errlen) {
    const json_t *rp = json_object_get(c->text, "rope_parameters");
    if (!rp || json_is_null(rp)) rp = json_object_get(c->text, "rope_scaling");
    if (rp && json_is_null(rp)) rp = NULL;
    const json_t *fa = rp && json_is_object(rp) ? json_object_get(rp, "full_attention") : NULL;
    if (fa && json_is_object(fa)) rp = fa;
    if (cfg_rope(c, rp, rc, err, errlen)) return -1;
    if (!present(rp, "rope_theta") && !present(c->text, "rope_theta")) rc->theta = 1e6;
    /* LFM2's default rope rotates the whole head whatever partial_rotary_factor says */
    if (rc->type == CI_ROPE_DEFAULT) rc->partial_rotary_factor = 1.0;
    return 0;
}

/* ---- load ------------------------------------------------------------------------------ */

/* The experts of one MoE layer: per expert as transformers saves them (w1 / w3 / w2), else
 * whatever w_experts knows (fused gate_up_proj, mlx switch_mlp, gate_proj/up_proj names). */
static void bind_experts(w_binder *b, moe_block *M, const char *pre) {
    char probe[512];
    snprintf(probe, sizeof probe, "%s.experts.0.w1.weight", pre);
    if (b->st && !st_find(b->st, probe)) {
        w_experts(b, M->w_gate, M->w_up, M->w_down, M->n_experts, M->top_k, M->inter, M->hidden, pre);
        return;
    }
    size_t before = b->decode_bytes;
    for (int e = 0; e < M->n_experts; e++) {
        w_mat(b, &M->w_gate[e], W_REQUIRED, M->inter, M->hidden, "%s.experts.%d.w1", pre, e);
        w_mat(b, &M->w_up[e], W_REQUIRED, M->inter, M->hidden, "%s.experts.%d.w3", pre, e);
        w_mat(b, &M->w_down[e], W_REQUIRED, M->hidden, M->inter, "%s.experts.%d.w2", pre, e);
    }
    if (!b->failed) b->decode_bytes = before + (b->decode_bytes - before) / (size_t)M->n_experts * (size_t)M->top_k;
}

int lfm2_load(ci_model *m, const lfm2_opts *o, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    lfm2_model *d = calloc(1, sizeof *d);
    if (!d) return ci_err(err, errlen, "%s: out of memory", fam);
    m->impl = d;
    d->H = (int)c->hidden_size;
    d->n_layers = (int)c->n_layers;
    d->vocab = (int)c->vocab_size;
    d->n_heads = c->n_heads ? (int)c->n_heads : 32;     /* the config classes' defaults */
    d->n_kv = c->n_kv_heads ? (int)c->n_kv_heads : 8;
    if (d->n_heads % d->n_kv)
        return ci_err(err, errlen, "%s: %s: num_attention_heads %d is not a multiple of num_key_value_heads %d", c->path,
                      fam, d->n_heads, d->n_kv);
    if (c->head_dim) d->hd = (int)c->head_dim;
    else {
        if (d->H % d->n_heads)
            return ci_err(err, errlen, "%s: %s: hidden_size %d is not a multiple of num_attention_heads %d", c->path, fam,
                          d->H, d->n_heads);
        d->hd = d->H / d->n_heads;
    }
    d->attn_scale = 1.0f / sqrtf((float)d->hd);
    double eps = 1e-5;
    long long K = 3, ff = 0;
    int conv_bias = 0;
    if (cfg_num(c, "norm_eps", 0, 0, 1, &eps, err, errlen) ||
        cfg_int(c, "conv_L_cache", 0, 1, 64, &K, err, errlen) || cfg_bool(c, "conv_bias", &conv_bias, err, errlen))
        return -1;
    d->eps = (float)eps;
    d->K = (int)K;
    int tie = 1;
    if (cfg_bool(c, "tie_word_embeddings", &tie, err, errlen) || cfg_bool(c, "tie_embedding", &tie, err, errlen))
        return -1;

    /* MoE hyper-parameters (Lfm2MoeConfig defaults) */
    long long E = 32, topk = 4, mff = 1792, n_dense = 2;
    double rsf = 1.0;
    int use_bias = 1, norm_topk = 1;
    if (o->moe) {
        ff = 7168;
        if (cfg_int(c, "intermediate_size", 0, 1, 1 << 22, &ff, err, errlen) ||
            cfg_int(c, "moe_intermediate_size", 0, 1, 1 << 22, &mff, err, errlen) ||
            cfg_int(c, "num_experts", 0, 1, 1 << 16, &E, err, errlen) ||
            cfg_int(c, "num_experts_per_tok", 0, 1, 1 << 16, &topk, err, errlen) ||
            cfg_int(c, "num_dense_layers", 0, 0, 1 << 16, &n_dense, err, errlen) ||
            cfg_num(c, "routed_scaling_factor", 0, 0, 1e6, &rsf, err, errlen) ||
            cfg_bool(c, "use_expert_bias", &use_bias, err, errlen) || cfg_bool(c, "norm_topk_prob", &norm_topk, err, errlen))
            return -1;
        if (topk > E)
            return ci_err(err, errlen, "%s: %s: num_experts_per_tok %lld exceeds num_experts %lld", c->path, fam, topk, E);
    } else if (read_ff_lfm2(c, fam, &ff, err, errlen)) {
        return -1;
    }
    d->ff = (int)ff;
    ci_rope_cfg rc;
    if (read_rope(c, &rc, err, errlen) || rope_init(&d->rope, &rc, d->hd, fam, err, errlen)) return -1;

    d->layers = calloc((size_t)d->n_layers, sizeof *d->layers);
    unsigned char *attn = calloc((size_t)d->n_layers, 1);
    if (!d->layers || !attn) { free(attn); return ci_err(err, errlen, "%s: out of memory", fam); }
    if (read_layer_types(c, fam, o->moe, attn, d->n_layers, err, errlen)) { free(attn); return -1; }
    int n_moe = 0;
    for (int l = 0; l < d->n_layers; l++) {
        d->layers[l].is_attn = attn[l];
        d->layers[l].is_moe = o->moe && l >= n_dense;
        n_moe += d->layers[l].is_moe;
        d->any_conv |= !attn[l];
    }
    free(attn);
    if (n_moe == d->n_layers) d->ff = 0;   /* no dense MLP: no tensor backs intermediate_size, scratch ignores it */
    if (n_moe) {
        if (w_check_experts(m->st, c->path, fam, "num_experts", E, n_moe, 3, err, errlen)) return -1;
        d->expert_mats = calloc((size_t)n_moe * (size_t)E * 3, sizeof(ci_mat));
        if (!d->expert_mats) return ci_err(err, errlen, "%s: out of memory", fam);
    }

    w_binder b;
    if (w_init(&b, m->st, fam, d->n_layers)) return ci_err(err, errlen, "%s", b.err);
    w_set_quant(&b, &c->quant);   /* mlx-community checkpoints: check packing against config.json */
    const int H = d->H;
    ci_mat *em = d->expert_mats;
    char pre[128];
    w_embed(&b, &d->embed, d->vocab, H, "model.embed_tokens");
    for (int l = 0; l < d->n_layers; l++) {
        lfm2_layer *L = &d->layers[l];
        w_vec(&b, &L->op_norm, W_REQUIRED, H, 0, W_KIND_NORM, "model.layers.%d.operator_norm.weight", l);
        if (L->is_attn) {
            attn_block *A = &L->attn;
            A->n_heads = d->n_heads; A->n_kv = d->n_kv; A->hd = d->hd; A->eps = d->eps; A->scale = d->attn_scale;
            attn_set_rope(A, &d->rope, CI_ROPE_NEOX);
            snprintf(pre, sizeof pre, "model.layers.%d.self_attn", l);
            attn_bind(&b, A, H, 1, pre, "out_proj", "q_layernorm", "k_layernorm", 0);
        } else {
            snprintf(pre, sizeof pre, "model.layers.%d.conv", l);
            sc_bind(&b, &L->conv, H, d->K, conv_bias, pre);
        }
        char norm[128];
        snprintf(norm, sizeof norm, "model.layers.%d.ffn_norm.weight", l);
        if (L->is_moe) {
            ffn_bind(&b, &L->ffn, H, d->ff, d->eps, norm, 0, NULL, NULL);
            L->ffn.moe = &L->moe;
            moe_block *M = &L->moe;
            M->n_experts = (int)E; M->top_k = (int)topk; M->hidden = H; M->inter = (int)mff;
            M->router = MOE_SIGMOID; M->norm_topk_prob = norm_topk; M->norm_eps = 1e-6f;
            M->routed_scaling = (float)rsf; M->n_group = M->topk_group = 1;
            M->w_gate = em; M->w_up = em + E; M->w_down = em + 2 * E;
            em += 3 * E;
            snprintf(pre, sizeof pre, "model.layers.%d.feed_forward", l);
            w_mat(&b, &M->gate, W_REQUIRED, E, H, "%s.gate", pre);
            if (use_bias) w_vec(&b, &M->bias, W_REQUIRED, E, 0, W_KIND_BIAS, "%s.expert_bias", pre);
            bind_experts(&b, M, pre);
            if (!d->any_moe) d->any_moe = M;
        } else {
            /* mlx-lm's lfm2_moe sanitize renames w1 / w3 / w2 to gate_proj / up_proj / down_proj */
            static const char *const names_lfm2[3] = { "w1", "w3", "w2" };
            char probe[160];
            snprintf(pre, sizeof pre, "model.layers.%d.feed_forward", l);
            snprintf(probe, sizeof probe, "%s.gate_proj.weight", pre);
            int mlx_names = o->moe && m->st && st_find(m->st, probe);
            ffn_bind(&b, &L->ffn, H, d->ff, d->eps, norm, 0, pre, mlx_names ? ffn_names_hf : names_lfm2);
        }
    }
    w_vec(&b, &d->final_norm, W_REQUIRED, H, 0, W_KIND_NORM, "model.embedding_norm.weight");
    w_head(&b, &d->lm_head, &d->embed, tie, d->vocab, H, "lm_head");
    int rc2 = ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen);
    return rc2;
}

void lfm2_unload(ci_model *m) {
    lfm2_model *d = m->impl;
    if (!d) return;
    if (d->layers)
        for (int l = 0; l < d->n_layers; l++) sc_free(&d->layers[l].conv);
    w_owned_free(d->owned, d->n_owned);
    rope_free(&d->rope);
    free(d->expert_mats);
    free(d->layers);
    free(d);
    m->impl = NULL;
}

size_t lfm2_cache_bytes_per_token(const ci_model *m) {
    const lfm2_model *d = m->impl;
    size_t b = 0;
    for (int l = 0; l < d->n_layers; l++)
        if (d->layers[l].is_attn) b += 2 * (size_t)d->n_kv * (size_t)d->hd * sizeof(float);
    return b;
}

/* ---- sessions -------------------------------------------------------------------------- */

int lfm2_session_init(ci_session *s, char *err, size_t errlen) {
    const lfm2_model *d = s->m->impl;
    const char *fam = s->m->family->name;
    lfm2_session *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    c->chunk = LFM2_UBATCH;
    const size_t QD = (size_t)d->n_heads * d->hd, KD = (size_t)d->n_kv * d->hd, UB = LFM2_UBATCH;
    cache_part *parts = calloc((size_t)d->n_layers, sizeof *parts);
    if (!parts) return ci_err(err, errlen, "%s: out of memory", fam);
    for (int l = 0; l < d->n_layers; l++) {
        if (d->layers[l].is_attn) parts[l].row_floats = 2 * KD;
        else parts[l].state_floats = (size_t)(d->K - 1) * (size_t)d->H;
    }
    int rc = cache_init(&c->cache, d->n_layers, parts, s->max_ctx, fam, err, errlen);
    free(parts);
    if (rc) return -1;
    size_t aw = QD > (size_t)d->H ? QD : (size_t)d->H;
    c->x = malloc(UB * d->H * sizeof(float));
    c->xn = malloc(UB * d->H * sizeof(float));
    c->q = malloc(UB * QD * sizeof(float));
    c->k = malloc(UB * KD * sizeof(float));
    c->v = malloc(UB * KD * sizeof(float));
    c->att = malloc(UB * aw * sizeof(float));
    c->g = malloc(UB * (size_t)(d->ff > 0 ? d->ff : 1) * sizeof(float));
    c->u = malloc(UB * (size_t)(d->ff > 0 ? d->ff : 1) * sizeof(float));
    c->last = malloc((size_t)d->H * sizeof(float));
    c->pos = malloc(UB * sizeof(int32_t));
    if (!c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->g || !c->u || !c->last || !c->pos)
        return ci_err(err, errlen, "%s: out of memory for a %d-token session", fam, s->max_ctx);
    const shortconv *sc0 = NULL;
    for (int l = 0; l < d->n_layers && !sc0; l++)
        if (!d->layers[l].is_attn) sc0 = &d->layers[l].conv;
    if ((sc0 && sc_scratch_init(&c->sc, sc0, LFM2_UBATCH)) ||
        (d->any_moe && moe_scratch_init(s->m->be, &c->moe, d->any_moe, LFM2_UBATCH)))
        return ci_err(err, errlen, "%s: out of memory for a %d-token session", fam, s->max_ctx);
    return 0;
}

void lfm2_session_free(ci_session *s) {
    lfm2_session *c = s->impl;
    if (!c) return;
    cache_free(&c->cache);
    free(c->x); free(c->xn); free(c->q); free(c->k); free(c->v); free(c->att);
    free(c->g); free(c->u); free(c->last); free(c->pos);
    sc_scratch_free(&c->sc);
    moe_scratch_free(s->m->be, &c->moe);
    free(c);
    s->impl = NULL;
}

/* ---- forward --------------------------------------------------------------------------- */

/* The attention block's buffers: the session's scratch and positions. */
static attn_bufs attn_scratch(const lfm2_session *c) { return (attn_bufs){ .q = c->q, .k = c->k, .v = c->v, .att = c->att, .xn = c->xn, .pos = c->pos }; }

/* The MLP block's buffers: its output (the down product or the MoE's) goes to att. */
static ffn_bufs ffn_scratch(lfm2_session *c) { return (ffn_bufs){ c->xn, c->g, c->u, c->att, &c->moe }; }

/* Layer l's [k | v] cache rows. */
static attn_cache layer_kv(const lfm2_model *d, const lfm2_session *c, int l) {
    return attn_cache_kv_rows(cache_rows(&c->cache, l), d->n_kv * d->hd, c->cache.max_ctx);
}

/* One chunk of n <= LFM2_UBATCH tokens at positions s->pos.. */
static void forward_chunk(ci_session *s, const int *tokens, int n, float *logits, int all_logits) {
    ci_model *m = s->m;
    const lfm2_model *d = m->impl;
    lfm2_session *c = s->impl;
    ci_backend *be = m->be;
    const int H = d->H, pos0 = s->pos;
    const attn_bufs ab = attn_scratch(c);
    const ffn_bufs fb = ffn_scratch(c);
    for (int t = 0; t < n; t++) c->pos[t] = pos0 + t;

    be->embed(be, c->x, &d->embed, tokens, n);
    CI_DUMP(m, "embed", -1, c->x, n, H);
    for (int l = 0; l < d->n_layers; l++) {
        const lfm2_layer *L = &d->layers[l];
        be->rmsnorm(be, c->xn, c->x, L->op_norm, n, H, d->eps);
        if (L->is_attn) {
            const attn_cache kv = layer_kv(d, c, l);
            attn_forward(be, &L->attn, &ab, &kv, 1, c->xn, NULL, 0, c->x, n);  /* x += out_proj(·) */
            CI_DUMP(m, "attn_out", l, c->xn, n, H);   /* the CPU's out_proj product (matmul_acc's scratch) */
        } else {
            sc_forward(be, &L->conv, &c->sc, cache_state(&c->cache, l), c->att, c->xn, n);
            CI_DUMP(m, "conv_out", l, c->att, n, H);
            be->add(be, c->x, c->att, (int64_t)n * H);
        }
        ffn_forward(be, &L->ffn, &fb, c->x, n);              /* x += mlp(ffn_norm(x)) or the MoE's */
        CI_DUMP(m, "layer_out", l, c->x, n, H);
    }
    ci_lm_head(be, logits, all_logits, c->x, n, H, d->final_norm, d->eps, &d->lm_head, c->xn, c->last);
    s->pos += n;
    c->cache.pos = s->pos;
}

int lfm2_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    const lfm2_model *d = s->m->impl;
    lfm2_session *c = s->impl;
    const char *fam = s->m->family->name;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen)) return -1;
    if (s->pos == 0) cache_reset(&c->cache);            /* a new sequence: conv states start at zero */
    else if (c->cache.pos != s->pos)
        return ci_err(err, errlen, "%s: session position %d and cache position %d disagree", fam, s->pos, c->cache.pos);
    ci_forward_chunks(s, tokens, n, logits, all_logits, d->vocab, c->chunk, forward_chunk);
    return 0;
}

/* ---- serving many sequences: one batched decode step --------------------------------------
 *
 * Row i belongs to session ss[i] at its position. The embedding, norms, attention
 * projections (RoPE at each row's own position), the MLP / MoE and the head run over all n
 * rows at once; each row's K/V go into its own cache rows and it attends to them alone, and
 * each row's short convolution runs as a one-token step on its own conv state (with ss[0]'s
 * scratch). Every op gives a row the bits it would alone, so the logits equal
 * forward(ss[i], &tokens[i], 1)'s. */
static void forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits) {
    ci_model *m = ss[0]->m;
    const lfm2_model *d = m->impl;
    lfm2_session *c = ss[0]->impl;
    ci_backend *be = m->be;
    const int H = d->H;
    const attn_bufs ab = attn_scratch(c);
    const ffn_bufs fb = ffn_scratch(c);
    attn_cache kvs[LFM2_UBATCH];
    for (int i = 0; i < n; i++) c->pos[i] = ss[i]->pos;
    be->embed(be, c->x, &d->embed, tokens, n);
    for (int l = 0; l < d->n_layers; l++) {
        const lfm2_layer *L = &d->layers[l];
        be->rmsnorm(be, c->xn, c->x, L->op_norm, n, H, d->eps);
        if (L->is_attn) {   /* row i's k / v into its own cache rows, and it attends to them alone */
            for (int i = 0; i < n; i++) kvs[i] = layer_kv(d, ss[i]->impl, l);
            attn_forward(be, &L->attn, &ab, kvs, n, c->xn, NULL, 0, c->x, n);
        } else {
            float *states[LFM2_UBATCH];
            for (int i = 0; i < n; i++) states[i] = cache_state(&((lfm2_session *)ss[i]->impl)->cache, l);
            sc_forward_rows(be, &L->conv, &c->sc, states, c->att, c->xn, n);
            be->add(be, c->x, c->att, (int64_t)n * H);
        }
        ffn_forward(be, &L->ffn, &fb, c->x, n);
    }
    ci_lm_head(be, logits, 1, c->x, n, H, d->final_norm, d->eps, &d->lm_head, c->xn, c->last);
    for (int i = 0; i < n; i++) {
        ss[i]->pos++;
        ((lfm2_session *)ss[i]->impl)->cache.pos = ss[i]->pos;
    }
}

int lfm2_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const lfm2_model *d = m->impl;
    const char *fam = m->family->name;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int i = 0; i < n; i++) {
        const lfm2_session *ci = ss[i]->impl;
        if (ss[i]->pos != 0 && ss[i]->pos != ci->cache.pos)
            return ci_err(err, errlen, "%s: sequence %d: session position %d and cache position %d disagree", fam, i,
                          ss[i]->pos, ci->cache.pos);
    }
    for (int i = 0; i < n; i++)   /* a new sequence: conv states start at zero, as lfm2_forward */
        if (ss[i]->pos == 0) cache_reset(&((lfm2_session *)ss[i]->impl)->cache);
    for (int off = 0; off < n; off += LFM2_UBATCH) {
        int k = n - off < LFM2_UBATCH ? n - off : LFM2_UBATCH;
        forward_rows(ss + off, tokens + off, k, logits + (size_t)off * d->vocab);
    }
    return 0;
}

/* ---- cache access ---------------------------------------------------------------------- */

static int check_session(const ci_session *s, char *err, size_t errlen) {
    if (!lfm2_is_family(s->m->family) || !s->impl)
        return ci_err(err, errlen, "%s: not an lfm2 / lfm2_moe session", s->m->family->name);
    return 0;
}

cache_snap *lfm2_snapshot(const ci_session *s, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return NULL;
    const lfm2_session *c = s->impl;
    cache_snap *snap = cache_snapshot(&c->cache);
    if (!snap) ci_err(err, errlen, "%s: out of memory for a cache snapshot at position %d", s->m->family->name, s->pos);
    return snap;
}

int lfm2_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return -1;
    lfm2_session *c = s->impl;
    if (cache_restore(&c->cache, snap, err, errlen)) {
        ci_err_prefix(err, errlen, "%s", s->m->family->name);
        return -1;
    }
    s->pos = c->cache.pos;
    return 0;
}

int lfm2_set_chunk(ci_session *s, int chunk, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return -1;
    if (chunk < 1 || chunk > LFM2_UBATCH)
        return ci_err(err, errlen, "%s: prefill chunk %d is outside 1..%d", s->m->family->name, chunk, LFM2_UBATCH);
    ((lfm2_session *)s->impl)->chunk = chunk;
    return 0;
}

/* ---- the lfm2 family ------------------------------------------------------------------- */

static int lfm2_family_load(ci_model *m, char *err, size_t errlen) {
    lfm2_opts o = { .moe = 0 };
    return lfm2_load(m, &o, err, errlen);
}

static const ci_family_ops lfm2_ops = {
    .load = lfm2_family_load, .unload = lfm2_unload,
    .session_init = lfm2_session_init, .session_free = lfm2_session_free,
    .forward = lfm2_forward, .cache_bytes_per_token = lfm2_cache_bytes_per_token,
    .snapshot = lfm2_snapshot, .restore = lfm2_restore, .forward_batch = lfm2_forward_batch,
};

const ci_family fam_lfm2 = { "lfm2", (const char *const[]){ "lfm2", NULL }, NULL, &lfm2_ops, 0 };
