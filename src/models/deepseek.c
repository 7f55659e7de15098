/* deepseek.c — the decoder shared by the DEEPSEEK_V3 and DEEPSEEK_V32 families (deepseek.h):
 * MLA attention (nn/mla.h) — or, with the V3.2 lightning indexer, DeepSeek Sparse Attention
 * (nn/dsa.h) — and DeepSeek MoE (nn/moe.h: sigmoid router with e_score_correction_bias and
 * grouped top-k, shared experts) after the dense SwiGLU layers.
 *
 * Owns: hyper-parameters (both config dialects: transformers 5 mlp_layer_types /
 * rope_parameters and the hub's first_k_dense_replace + moe_layer_freq / rope_scaling,
 * topk_method / scoring_func), the tensor list (HF names model.layers.N.self_attn.q_a_proj ...,
 * with the indexer's self_attn.indexer.{wq_b, wk, k_norm, weights_proj}; per-expert, fused or
 * mlx-stacked experts; fp8 E4M3 with weight_scale_inv 128x128 blocks; MLX-quantized matrices,
 * kv_b_proj included, whole or split by mlx-lm into embed_q / unembed_out; MTP layers
 * ignored), and the session: per layer the MLA latent cache [max_ctx, kv_lora + rope] and,
 * with the indexer, the indexer-key cache [max_ctx, index_head_dim]. Rows [0, pos) are valid;
 * a forward writes rows pos..pos+n-1. */
#include "model.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "deepseek.h"
#include "../nn/dsa.h"
#include "../nn/mla.h"
#include "../nn/moe.h"
#include "../nn/rope.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UBATCH = 256 };

typedef struct {
    float *attn_norm;            /* [H] input_layernorm */
    mla_layer attn;
    dsa_indexer idx;
    float *ffn_norm;             /* [H] post_attention_layernorm */
    int is_moe;
    ci_mat wg, wu, wd;           /* dense: [ff, H], [ff, H], [H, ff]; MoE: the shared experts */
    int has_shared;
    moe_block moe;
} ds_layer;

typedef struct {
    int H, n_layers, vocab, ff, shared_ff;
    int lat;                     /* kv_lora + rope: floats per latent-cache row */
    int indexed;                 /* V3.2: the lightning indexer and sparse attention */
    int kdim;                    /* index_head_dim: floats per indexer-key row (0 without) */
    float eps;
    ci_mat embed;                /* [vocab, H] */
    ci_mat lm_head;              /* [vocab, H] */
    float *final_norm;           /* [H] */
    ds_layer *layers;         /* [n_layers] */
    rope_table rope;             /* qk_rope_head_dim dims; shared by MLA and the indexer */
    ci_mat *expert_mats;         /* [n_moe_layers · 3 · E] expert views */
    const moe_block *any_moe;
    float **owned;
    int n_owned;
} ds_model;

typedef struct {
    float *lat_cache;            /* [n_layers][max_ctx][lat] */
    float *key_cache;            /* [n_layers][max_ctx][kdim] (indexed) */
    float *lat;                  /* [UBATCH, lat] latent rows of a batched step */
    float *x, *xn, *y;           /* [UBATCH, H] */
    float *g, *u;                /* [UBATCH, max(ff, shared_ff)] */
    float *last;                 /* [H] */
    int32_t *pos;                /* [UBATCH] */
    mla_scratch mla;
    dsa_scratch dsa;
    moe_scratch moe;
} ds_cache;

/* MoE or dense MLP per layer: mlp_layer_types ("dense" | "sparse") when the config has it,
 * else the hub rule idx >= first_k_dense_replace && idx % moe_layer_freq == 0. Fills is_moe. */
static int layer_kinds(const ci_config *c, const char *fam, int n_layers, long long first_dense, long long freq,
                       int *is_moe, char *err, size_t errlen) {
    const json_t *types = json_object_get(c->text, "mlp_layer_types");
    if (types && !json_is_null(types)) {
        if (!json_is_array(types) || (int)json_array_size(types) != n_layers)
            return ci_err(err, errlen, "%s: %s: 'mlp_layer_types' must be a list of %d strings", c->path, fam, n_layers);
        for (int l = 0; l < n_layers; l++) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            if (!t || (strcmp(t, "dense") && strcmp(t, "sparse")))
                return ci_err(err, errlen, "%s: %s: mlp_layer_types[%d] is '%s', expected 'dense' or 'sparse'", c->path,
                              fam, l, t ? t : "(not a string)");
            is_moe[l] = !strcmp(t, "sparse");
        }
        return 0;
    }
    for (int l = 0; l < n_layers; l++) is_moe[l] = l >= first_dense && l % freq == 0;
    return 0;
}

int ds_load(ci_model *m, int indexed, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    ds_model *d = calloc(1, sizeof *d);
    if (!d) return ci_err(err, errlen, "%s: out of memory", fam);
    m->impl = d;
    if (m->be && !m->be->matmul_xw)
        return ci_err(err, errlen, "%s: backend %s has no matmul_xw op (needed by MLA)", fam, m->be->name);
    d->H = (int)c->hidden_size;
    d->n_layers = (int)c->n_layers;
    d->vocab = (int)c->vocab_size;
    d->eps = (float)c->rms_eps;
    long long q_lora = 0, kv_lora, nope, rope, v, ff, mff, E, K, shared = 0, G = 1, TG = 1, first_dense = 0, freq = 1;
    long long ih = 0, id = 0, topk = 0;
    double rsf = 1.0;
    int norm = 0, bias = 0, interleave = 1, idx_interleave = 0;
    if (!c->n_heads) return ci_err(err, errlen, "%s: %s: required key 'num_attention_heads' is missing", c->path, fam);
    if (cfg_int(c, "q_lora_rank", 0, indexed ? 0 : 1, 1 << 16, &q_lora, err, errlen) ||
        cfg_int(c, "kv_lora_rank", 1, 1, 1 << 16, &kv_lora, err, errlen) ||
        cfg_int(c, "qk_nope_head_dim", 1, 1, 1 << 12, &nope, err, errlen) ||
        cfg_int(c, "qk_rope_head_dim", 1, 2, 1 << 12, &rope, err, errlen) ||
        cfg_int(c, "v_head_dim", 1, 1, 1 << 12, &v, err, errlen) ||
        cfg_int(c, "intermediate_size", 1, 1, 1 << 20, &ff, err, errlen) ||
        cfg_int(c, "moe_intermediate_size", 1, 1, 1 << 20, &mff, err, errlen) ||
        cfg_int(c, json_object_get(c->text, "n_routed_experts") ? "n_routed_experts" : "num_local_experts", 1, 1, 1 << 16,
                &E, err, errlen) ||
        cfg_int(c, "num_experts_per_tok", 1, 1, 1 << 16, &K, err, errlen) ||
        cfg_int(c, "n_shared_experts", 0, 0, 1 << 10, &shared, err, errlen) ||
        cfg_int(c, "n_group", 0, 1, 1 << 10, &G, err, errlen) ||
        cfg_int(c, "topk_group", 0, 1, 1 << 10, &TG, err, errlen) ||
        cfg_int(c, "first_k_dense_replace", 0, 0, 1 << 12, &first_dense, err, errlen) ||
        cfg_int(c, "moe_layer_freq", 0, 1, 1 << 12, &freq, err, errlen) ||
        cfg_num(c, "routed_scaling_factor", 0, 0, 1e6, &rsf, err, errlen) ||
        cfg_bool(c, "norm_topk_prob", &norm, err, errlen) || cfg_bool(c, "attention_bias", &bias, err, errlen) ||
        cfg_bool(c, "rope_interleave", &interleave, err, errlen))
        return -1;
    if (indexed && (cfg_int(c, "index_n_heads", 1, 1, 1 << 12, &ih, err, errlen) ||
                    cfg_int(c, "index_head_dim", 1, 2, 1 << 14, &id, err, errlen) ||
                    cfg_int(c, "index_topk", 1, 1, 1LL << 30, &topk, err, errlen) ||
                    cfg_bool(c, "indexer_rope_interleave", &idx_interleave, err, errlen)))
        return -1;
    if (indexed && !q_lora)
        return ci_err(err, errlen, "%s: %s: q_lora_rank is required (the DSA indexer reads the q latent)", c->path, fam);
    if (bias) return ci_err(err, errlen, "%s: %s: attention_bias=true is not implemented yet", c->path, fam);
    const char *sf = cj_get_str(c->text, "scoring_func"), *tm = cj_get_str(c->text, "topk_method");
    if (sf && strcmp(sf, "sigmoid"))
        return ci_err(err, errlen, "%s: %s: scoring_func '%s' is not supported (sigmoid)", c->path, fam, sf);
    if (tm && strcmp(tm, "noaux_tc"))
        return ci_err(err, errlen, "%s: %s: topk_method '%s' is not supported (noaux_tc)", c->path, fam, tm);
    if (!interleave) return ci_err(err, errlen, "%s: %s: rope_interleave=false is not implemented yet", c->path, fam);
    if (K > E || E % G || TG > G || (G > 1 && E / G < 2))
        return ci_err(err, errlen, "%s: %s: expert routing n_routed_experts=%lld num_experts_per_tok=%lld n_group=%lld topk_group=%lld is inconsistent",
                      c->path, fam, E, K, G, TG);
    if (indexed && id < rope)
        return ci_err(err, errlen, "%s: %s: index_head_dim %lld is smaller than qk_rope_head_dim %lld (the indexer rotates that many dims)",
                      c->path, fam, id, rope);
    d->ff = (int)ff;
    d->shared_ff = (int)(mff * shared);
    d->lat = (int)(kv_lora + rope);
    d->indexed = indexed;
    d->kdim = (int)id;
    if (rope_init(&d->rope, &c->rope, (int)rope, fam, err, errlen)) return -1;
    float scale = 1.0f / sqrtf((float)(nope + rope));
    if (c->rope.type != CI_ROPE_DEFAULT && c->rope.mscale_all_dim > 0 && c->rope.factor > 1) {
        double ms = 0.1 * c->rope.mscale_all_dim * log(c->rope.factor) + 1.0;
        scale = (float)(scale * ms * ms);
    }
    d->layers = calloc((size_t)d->n_layers, sizeof *d->layers);
    int *is_moe = calloc((size_t)d->n_layers + 1, sizeof *is_moe);
    if (!d->layers || !is_moe) { free(is_moe); return ci_err(err, errlen, "%s: out of memory", fam); }
    if (layer_kinds(c, fam, d->n_layers, first_dense, freq, is_moe, err, errlen)) { free(is_moe); return -1; }
    int n_moe = 0;
    for (int l = 0; l < d->n_layers; l++) n_moe += is_moe[l];
    if (n_moe == d->n_layers) d->ff = 0;   /* no dense MLP: no tensor backs intermediate_size, scratch ignores it */
    if (w_check_experts(m->st, c->path, fam, json_object_get(c->text, "n_routed_experts") ? "n_routed_experts" : "num_local_experts",
                        E, n_moe, 3, err, errlen)) { free(is_moe); return -1; }
    d->expert_mats = calloc((size_t)n_moe * (size_t)E * 3 + 1, sizeof(ci_mat));
    if (!d->expert_mats) { free(is_moe); return ci_err(err, errlen, "%s: out of memory", fam); }

    w_binder b;
    if (w_init(&b, m->st, fam, d->n_layers)) { free(is_moe); return ci_err(err, errlen, "%s", b.err); }
    w_set_quant(&b, &c->quant);   /* mlx-community checkpoints: check packing against config.json */
    const int H = d->H, Hh = (int)c->n_heads;
    ci_mat *em = d->expert_mats;
    w_embed(&b, &d->embed, d->vocab, H, "model.embed_tokens");
    for (int l = 0; l < d->n_layers; l++) {
        if (b.failed) break;   /* the first error stands; later layers would only allocate head views */
        ds_layer *L = &d->layers[l];
        mla_layer *A = &L->attn;
        dsa_indexer *I = &L->idx;
        A->n_heads = Hh; A->hidden = H; A->q_lora = (int)q_lora; A->kv_lora = (int)kv_lora;
        A->nope = (int)nope; A->rope = (int)rope; A->v = (int)v; A->scale = scale;
        int qd = (int)(nope + rope);
        w_vec(&b, &L->attn_norm, W_REQUIRED, H, 0, W_KIND_NORM, "model.layers.%d.input_layernorm.weight", l);
        if (q_lora) {
            w_mat(&b, &A->q_a, W_REQUIRED, q_lora, H, "model.layers.%d.self_attn.q_a_proj", l);
            w_vec(&b, &A->q_a_norm, W_REQUIRED, q_lora, 0, W_KIND_NORM, "model.layers.%d.self_attn.q_a_layernorm.weight", l);
            w_mat(&b, &A->q_b, W_REQUIRED, (int64_t)Hh * qd, q_lora, "model.layers.%d.self_attn.q_b_proj", l);
        } else {
            w_mat(&b, &A->q, W_REQUIRED, (int64_t)Hh * qd, H, "model.layers.%d.self_attn.q_proj", l);
        }
        w_mat(&b, &A->kv_a, W_REQUIRED, kv_lora + rope, H, "model.layers.%d.self_attn.kv_a_proj_with_mqa", l);
        w_vec(&b, &A->kv_a_norm, W_REQUIRED, kv_lora, 0, W_KIND_NORM, "model.layers.%d.self_attn.kv_a_layernorm.weight", l);
        char mlx_q[96];
        snprintf(mlx_q, sizeof mlx_q, "model.layers.%d.self_attn.embed_q.weight", l);
        if (m->st && st_find(m->st, mlx_q)) {
            /* mlx-lm's sanitize split kv_b_proj into MultiLinear embed_q [Hh, kv_lora, nope]
             * (W_UKᵀ per head, read by matmul_xw) and unembed_out [Hh, v, kv_lora] (W_UV). */
            A->w_uk = calloc((size_t)Hh, sizeof *A->w_uk);
            A->w_uv = calloc((size_t)Hh, sizeof *A->w_uv);
            if (!A->w_uk || !A->w_uv) { w_done(&b); free(is_moe); return ci_err(err, errlen, "%s: out of memory", fam); }
            w_multilinear(&b, A->w_uk, Hh, kv_lora, nope, 1, "model.layers.%d.self_attn.embed_q", l);
            w_multilinear(&b, A->w_uv, Hh, v, kv_lora, 0, "model.layers.%d.self_attn.unembed_out", l);
        } else {
            w_mat(&b, &A->kv_b, W_REQUIRED, (int64_t)Hh * (nope + v), kv_lora, "model.layers.%d.self_attn.kv_b_proj", l);
            if (mla_split_kv_b(A)) { w_done(&b); free(is_moe); return ci_err(err, errlen, "%s: out of memory", fam); }
            /* An MLX-quantized kv_b_proj (older mlx-community conversions keep it whole): its rows
             * are packed, so the per-head views are packed row views (w_mat_rows keeps each
             * head's place in the scale grid), not the element offsets mla_split_kv_b uses. */
            if (A->kv_b.dtype == CI_U32)
                for (int h = 0; h < Hh; h++) {
                    A->w_uk[h] = w_mat_rows(&A->kv_b, (int64_t)h * (nope + v), nope);
                    A->w_uv[h] = w_mat_rows(&A->kv_b, (int64_t)h * (nope + v) + nope, v);
                }
        }
        w_mat(&b, &A->o, W_REQUIRED, H, (int64_t)Hh * v, "model.layers.%d.self_attn.o_proj", l);
        /* the lightning indexer */
        if (indexed) {
        I->n_heads = (int)ih; I->head_dim = (int)id; I->rope_dim = (int)rope; I->topk = (int)topk;
        I->rope_style = idx_interleave ? CI_ROPE_INTERLEAVED : CI_ROPE_NEOX;
        I->w_scale = (float)(1.0 / sqrt((double)ih) / sqrt((double)id));
        w_mat(&b, &I->wq_b, W_REQUIRED, ih * id, q_lora, "model.layers.%d.self_attn.indexer.wq_b", l);
        w_mat(&b, &I->wk, W_REQUIRED, id, H, "model.layers.%d.self_attn.indexer.wk", l);
        w_vec(&b, &I->k_norm_w, W_REQUIRED, id, 0, W_KIND_NORM, "model.layers.%d.self_attn.indexer.k_norm.weight", l);
        w_vec(&b, &I->k_norm_b, W_REQUIRED, id, 0, W_KIND_BIAS, "model.layers.%d.self_attn.indexer.k_norm.bias", l);
        w_mat(&b, &I->weights_proj, W_REQUIRED, ih, H, "model.layers.%d.self_attn.indexer.weights_proj", l);
        }
        w_vec(&b, &L->ffn_norm, W_REQUIRED, H, 0, W_KIND_NORM, "model.layers.%d.post_attention_layernorm.weight", l);
        if (is_moe[l]) {
            moe_block *M = &L->moe;
            L->is_moe = 1;
            M->n_experts = (int)E; M->top_k = (int)K; M->hidden = H; M->inter = (int)mff;
            M->router = MOE_SIGMOID; M->norm_topk_prob = norm; M->routed_scaling = (float)rsf;
            M->n_group = (int)G; M->topk_group = (int)TG;
            M->w_gate = em; M->w_up = em + E; M->w_down = em + 2 * E;
            em += 3 * E;
            w_mat(&b, &M->gate, W_REQUIRED, E, H, "model.layers.%d.mlp.gate", l);
            w_vec(&b, &M->bias, W_REQUIRED, E, 0, W_KIND_BIAS, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
            char pre[96];
            snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
            w_experts(&b, M->w_gate, M->w_up, M->w_down, (int)E, (int)K, mff, H, pre);
            if (shared) {
                L->has_shared = 1;
                w_mat(&b, &L->wg, W_REQUIRED, d->shared_ff, H, "model.layers.%d.mlp.shared_experts.gate_proj", l);
                w_mat(&b, &L->wu, W_REQUIRED, d->shared_ff, H, "model.layers.%d.mlp.shared_experts.up_proj", l);
                w_mat(&b, &L->wd, W_REQUIRED, H, d->shared_ff, "model.layers.%d.mlp.shared_experts.down_proj", l);
            }
            if (!d->any_moe) d->any_moe = M;
        } else {
            w_mat(&b, &L->wg, W_REQUIRED, ff, H, "model.layers.%d.mlp.gate_proj", l);
            w_mat(&b, &L->wu, W_REQUIRED, ff, H, "model.layers.%d.mlp.up_proj", l);
            w_mat(&b, &L->wd, W_REQUIRED, H, ff, "model.layers.%d.mlp.down_proj", l);
        }
    }
    free(is_moe);
    w_vec(&b, &d->final_norm, W_REQUIRED, H, 0, W_KIND_NORM, "model.norm.weight");
    w_head(&b, &d->lm_head, &d->embed, c->tie_embeddings, d->vocab, H, "lm_head");
    int rc = ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen);
    return rc;
}

void ds_unload(ci_model *m) {
    ds_model *d = m->impl;
    if (!d) return;
    if (d->layers)
        for (int l = 0; l < d->n_layers; l++) mla_layer_free(&d->layers[l].attn);
    w_owned_free(d->owned, d->n_owned);
    rope_free(&d->rope);
    free(d->expert_mats);
    free(d->layers);
    free(d);
    m->impl = NULL;
}

size_t ds_cache_bytes_per_token(const ci_model *m) {
    const ds_model *d = m->impl;
    return (size_t)d->n_layers * (size_t)(d->lat + d->kdim) * sizeof(float);
}


int ds_session_init(ci_session *s, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    ds_cache *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", s->m->family->name);
    s->impl = c;
    const mla_layer *A = &d->layers[0].attn;
    size_t rows = (size_t)d->n_layers * (size_t)s->max_ctx;
    int wide = d->ff > d->shared_ff ? d->ff : d->shared_ff > 0 ? d->shared_ff : 1;
    c->lat_cache = malloc(rows * (size_t)d->lat * sizeof(float));
    c->key_cache = d->indexed ? malloc(rows * (size_t)d->kdim * sizeof(float)) : NULL;
    c->lat = malloc((size_t)UBATCH * d->lat * sizeof(float));
    c->x = malloc((size_t)UBATCH * d->H * sizeof(float));
    c->xn = malloc((size_t)UBATCH * d->H * sizeof(float));
    c->y = malloc((size_t)UBATCH * d->H * sizeof(float));
    c->g = malloc((size_t)UBATCH * wide * sizeof(float));
    c->u = malloc((size_t)UBATCH * wide * sizeof(float));
    c->last = malloc((size_t)d->H * sizeof(float));
    c->pos = malloc(UBATCH * sizeof(int32_t));
    if (!c->lat_cache || (d->indexed && !c->key_cache) || !c->lat || !c->x || !c->xn || !c->y || !c->g || !c->u ||
        !c->last || !c->pos || mla_scratch_init(&c->mla, A, UBATCH) ||
        (d->indexed && dsa_scratch_init(&c->dsa, &d->layers[0].idx, A, UBATCH, s->max_ctx)) ||
        (d->any_moe && moe_scratch_init(s->m->be, &c->moe, d->any_moe, UBATCH)))
        return ci_err(err, errlen, "%s: out of memory for a %d-token session", s->m->family->name, s->max_ctx);
    return 0;
}

void ds_session_free(ci_session *s) {
    ds_cache *c = s->impl;
    if (!c) return;
    free(c->lat_cache); free(c->key_cache); free(c->lat);
    free(c->x); free(c->xn); free(c->y); free(c->g); free(c->u); free(c->last); free(c->pos);
    mla_scratch_free(&c->mla);
    dsa_scratch_free(&c->dsa);
    moe_scratch_free(s->m->be, &c->moe);
    free(c);
    s->impl = NULL;
}

/* SwiGLU MLP: out[n, H] = wd(silu(wg x) * wu x), width f. */
static void mlp(ci_backend *be, ds_cache *c, const ds_layer *L, float *out, const float *x, int n, int f) {
    be->matmul(be, c->g, x, n, &L->wg);
    be->matmul(be, c->u, x, n, &L->wu);
    be->swiglu(be, c->g, c->u, (int64_t)n * f);
    be->matmul(be, out, c->g, n, &L->wd);
}

/* x[n, H] += the layer's FFN of rmsnorm(x): MoE (+ shared experts) or the dense MLP. */
static void ffn(ci_backend *be, const ds_model *d, ds_cache *c, const ds_layer *L, int n) {
    const int H = d->H;
    be->rmsnorm(be, c->xn, c->x, L->ffn_norm, n, H, d->eps);
    if (L->is_moe) {
        moe_forward(be, &L->moe, &c->moe, c->y, c->xn, n);
        be->add(be, c->x, c->y, (int64_t)n * H);
        if (L->has_shared) {
            mlp(be, c, L, c->y, c->xn, n, d->shared_ff);
            be->add(be, c->x, c->y, (int64_t)n * H);
        }
    } else {
        mlp(be, c, L, c->y, c->xn, n, d->ff);
        be->add(be, c->x, c->y, (int64_t)n * H);
    }
}

static void forward_chunk(ci_session *s, const int *tokens, int n, float *logits, int all_logits) {
    ci_model *m = s->m;
    const ds_model *d = m->impl;
    ds_cache *c = s->impl;
    ci_backend *be = m->be;
    const int H = d->H;
    const size_t lat_layer = (size_t)s->max_ctx * d->lat, key_layer = (size_t)s->max_ctx * d->kdim;
    for (int t = 0; t < n; t++) c->pos[t] = s->pos + t;
    be->embed(be, c->x, &d->embed, tokens, n);
    for (int l = 0; l < d->n_layers; l++) {
        const ds_layer *L = &d->layers[l];
        be->rmsnorm(be, c->xn, c->x, L->attn_norm, n, H, d->eps);
        if (d->indexed)
            dsa_forward(be, &L->attn, &L->idx, &d->rope, &c->mla, &c->dsa, c->lat_cache + (size_t)l * lat_layer,
                        c->key_cache + (size_t)l * key_layer, c->y, c->xn, c->pos, n, s->pos, d->eps);
        else
            mla_forward(be, &L->attn, &d->rope, &c->mla, c->lat_cache + (size_t)l * lat_layer, c->y, c->xn, c->pos, n,
                        s->pos, d->eps);
        CI_DUMP(m, "attn_out", l, c->y, n, H);
        be->add(be, c->x, c->y, (int64_t)n * H);
        ffn(be, d, c, L, n);
        CI_DUMP(m, "layer_out", l, c->x, n, H);
    }
    ci_lm_head(be, logits, all_logits, c->x, n, H, d->final_norm, d->eps, &d->lm_head, c->xn, c->last);
    s->pos += n;
}

int ds_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen)) return -1;
    ci_forward_chunks(s, tokens, n, logits, all_logits, d->vocab, UBATCH, forward_chunk);
    return 0;
}

/* ---- serving many sequences: batched decode step, cache rows out and in ------------------
 *
 * MLA for n rows that belong to n sessions (row i at position pos[i] of caches[i], this
 * layer's [max_ctx, kv_lora + rope]): the same steps as mla_forward (nn/mla.c), but the
 * latent rows are computed into the batch scratch and copied into each session's cache, and
 * attention runs per row against its own cache. Projections and the absorbed-query and
 * W_UV products still run over all n rows at once. */
static void mla_rows(ci_backend *be, const mla_layer *L, const rope_table *rt, mla_scratch *s, float *const *caches,
                     float *latb, float *out, const float *xn, const int32_t *pos, int n, float eps) {
    const int Hh = L->n_heads, lat = L->kv_lora + L->rope;
    mla_project(be, L, rt, s, latb, xn, pos, n, eps);                      /* latent rows [n, lat] */
    for (int t = 0; t < n; t++)
        memcpy(caches[t] + (size_t)pos[t] * lat, latb + (size_t)t * lat, (size_t)lat * sizeof(float));
    for (int t = 0; t < n; t++)
        be->attention(be, s->olat + (size_t)t * Hh * lat, s->qcat + (size_t)t * Hh * lat, caches[t], caches[t], 1, pos[t],
                      Hh, 1, lat, lat, L->scale);
    mla_output(be, L, s, out, n);
}

/* One decode step for n <= UBATCH sessions; scratch is ss[0]'s. */
static void forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits) {
    ci_model *m = ss[0]->m;
    const ds_model *d = m->impl;
    ds_cache *c = ss[0]->impl;
    ci_backend *be = m->be;
    const int H = d->H;
    const mla_layer *A0 = &d->layers[0].attn;
    const size_t lat = (size_t)(A0->kv_lora + A0->rope);
    float *caches[UBATCH];
    for (int i = 0; i < n; i++) c->pos[i] = ss[i]->pos;
    be->embed(be, c->x, &d->embed, tokens, n);
    for (int l = 0; l < d->n_layers; l++) {
        const ds_layer *L = &d->layers[l];
        for (int i = 0; i < n; i++) caches[i] = ((ds_cache *)ss[i]->impl)->lat_cache + (size_t)l * ss[i]->max_ctx * lat;
        be->rmsnorm(be, c->xn, c->x, L->attn_norm, n, H, d->eps);
        mla_rows(be, &L->attn, &d->rope, &c->mla, caches, c->lat, c->y, c->xn, c->pos, n, d->eps);
        be->add(be, c->x, c->y, (int64_t)n * H);
        ffn(be, d, c, L, n);
    }
    be->rmsnorm(be, c->xn, c->x, d->final_norm, n, H, d->eps);
    be->matmul(be, logits, c->xn, n, &d->lm_head);
    for (int i = 0; i < n; i++) ss[i]->pos++;
}

int ds_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const ds_model *d = m->impl;
    const char *fam = m->family->name;
    if (d->indexed) return ci_err(err, errlen, "%s: forward_batch is not implemented with the DSA indexer", fam);
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int off = 0; off < n; off += UBATCH) {
        int k = n - off < UBATCH ? n - off : UBATCH;
        forward_rows(ss + off, tokens + off, k, logits + (size_t)off * d->vocab);
    }
    return 0;
}

/* ---- cache rows out and in (prefix reuse in the server) ----------------------------------
 *
 * Both caches' row p depends only on tokens 0..p, so rows [0, n) can be copied out and back.
 * Blob layout, position-major (registry.h: a prefix of an export is the export of the
 * prefix): for each position, for each layer, its latent row [lat] then (indexed) its key
 * row [kdim]; n · cache_bytes_per_token bytes in all. */
int ds_cache_export(const ci_session *s, int n, void *dst, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    const ds_cache *c = s->impl;
    if (n < 0 || n > s->pos) return ci_err(err, errlen, "%s: cache export of %d rows, %d held", s->m->family->name, n, s->pos);
    float *o = dst;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < d->n_layers; l++) {
            size_t row = (size_t)l * s->max_ctx + (size_t)p;
            memcpy(o, c->lat_cache + row * d->lat, (size_t)d->lat * sizeof(float));
            o += d->lat;
            if (d->indexed) memcpy(o, c->key_cache + row * d->kdim, (size_t)d->kdim * sizeof(float));
            o += d->kdim;
        }
    return 0;
}

int ds_cache_import(ci_session *s, int n, const void *src, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    ds_cache *c = s->impl;
    if (n < 0 || n > s->max_ctx)
        return ci_err(err, errlen, "%s: cache import of %d rows into a %d-token session", s->m->family->name, n, s->max_ctx);
    const float *i = src;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < d->n_layers; l++) {
            size_t row = (size_t)l * s->max_ctx + (size_t)p;
            memcpy(c->lat_cache + row * d->lat, i, (size_t)d->lat * sizeof(float));
            i += d->lat;
            if (d->indexed) memcpy(c->key_cache + row * d->kdim, i, (size_t)d->kdim * sizeof(float));
            i += d->kdim;
        }
    s->pos = n;
    return 0;
}
