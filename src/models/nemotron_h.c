/* nemotron_h.c — the NEMOTRON_H family (model_type "nemotron_h"): a hybrid of Mamba2
 * layers (nn/mamba2.h), attention without RoPE, relu² MLPs and a relu² MoE with sigmoid
 * grouped routing and optional latent projections (nn/moe.h), as transformers 5
 * NemotronHForCausalLM computes it.
 *
 * One mixer per layer: x += mixer(rmsnorm(x)), the mixer chosen by the layer's kind:
 *   'M' Mamba2   '*' attention (GQA, no positional encoding)   '-' down(relu(up x)²)
 *   'E' MoE: fc2(Σ w·expert(fc1 x)) + shared(x), experts down(relu(up ·)²)
 * then norm_f and lm_head. Kinds come from layers_block_type (transformers 5 names
 * linear_attention / full_attention / mlp / moe, or the legacy mamba / attention) or from
 * the hub's hybrid_override_pattern string; when both are present the list wins, as in
 * transformers. num_hidden_layers must equal the number of kinds.
 *
 * Checkpoints: `backbone.` (hub) or `model.` (transformers' in-memory) prefix; experts per
 * expert (experts.E.{up,down}_proj.weight) or stacked (experts.up_proj [E, I, X],
 * experts.down_proj [E, X, I]); conv1d.weight [C, 1, K]; MTP layers (mtp.*) ignored.
 * mlx-community checkpoints (mlx-lm's sanitize): experts stacked as switch_mlp.fc1 (up) /
 * switch_mlp.fc2 (down), conv1d.weight [C, K, 1] (w_conv reads either form; nothing else
 * is transformed, so there is nothing to apply twice), any Linear / Embedding / stack
 * MLX-quantized (weights.h) and checked against config.json; the router (mlx-lm's MoEGate
 * is not a Linear) and e_score_correction_bias / A_log stay unquantized.
 *
 * Cache: one ci_cache per session; attention layers keep K|V rows (2·n_kv·hd floats per
 * token), Mamba2 layers a fixed state (conv window (K-1)·conv_dim, then SSM Hm·P·N); the
 * cache's pos follows the session's. A forward at position 0 starts from zeroed states.
 *
 * dt clamp: below at time_step_min in prefill and decode alike (transformers' prefill
 * path; see nn/mamba2.h); time_step_limit is read and checked but not applied, as
 * transformers 5 does not apply it either. */
#include "nemotron_h.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "../nn/moe.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UBATCH = 256 };

typedef struct {
    char kind;                   /* 'M', '*', '-', 'E' */
    float *norm;                 /* [H] pre-mixer RMSNorm */
    mamba2_layer mamba;          /* 'M' */
    ci_mat wq;                   /* '*': [n_heads*hd, H] */
    ci_mat wk, wv;               /* '*': [n_kv*hd, H] */
    ci_mat wo;                   /* '*': [H, n_heads*hd] */
    ci_mat up;                   /* '-': [ff, H] */
    ci_mat down;                 /* '-': [H, ff] */
    moe_block moe;               /* 'E' (relu² experts, shared expert inside) */
} nh_layer;

typedef struct {
    int H, n_layers, vocab, n_heads, n_kv, hd, ff;
    float eps, attn_scale;
    ci_mat embed;                /* [vocab, H] */
    ci_mat lm_head;              /* [vocab, H]; = embed when tied */
    float *norm_f;               /* [H] */
    nh_layer *layers;            /* [n_layers] */
    ci_mat *expert_mats;         /* owned array behind every MoE layer's up/down views */
    const moe_block *any_moe;    /* for scratch sizing, or NULL */
    const mamba2_layer *any_mamba;
    mamba2_scan scan;            /* prefill scan form */
    float **owned;               /* w_vec copies */
    int n_owned;
} nh_model;

typedef struct {
    ci_cache cache;              /* per layer: '*' K|V rows, 'M' conv + SSM state */
    float *x, *xn, *y;           /* [UBATCH, H] */
    float *q, *att;              /* [UBATCH, n_heads*hd] */
    float *k, *v;                /* [UBATCH, n_kv*hd] */
    float *g;                    /* [UBATCH, ff] */
    float *last;                 /* [H] */
    mamba2_scratch mamba;
    moe_scratch moe;
} nh_cache;

/* ---- config --------------------------------------------------------------------------- */

/* Optional integer under key, else under its legacy alias (mamba_n_groups, ...). */
static int cfg_int2(const ci_config *c, const char *key, const char *alias, long long lo, long long hi,
                    long long *out, char *err, size_t errlen) {
    if (alias && !json_object_get(c->text, key) && json_object_get(c->text, alias)) key = alias;
    return cfg_int(c, key, 0, lo, hi, out, err, errlen);
}

static int cfg_num2(const ci_config *c, const char *key, const char *alias, double lo, double hi, double *out,
                    char *err, size_t errlen) {
    if (alias && !json_object_get(c->text, key) && json_object_get(c->text, alias)) key = alias;
    return cfg_num(c, key, 0, lo, hi, out, err, errlen);
}

static int cfg_bool2(const ci_config *c, const char *key, const char *alias, int *out, char *err, size_t errlen) {
    if (alias && !json_object_get(c->text, key) && json_object_get(c->text, alias)) key = alias;
    return cfg_bool(c, key, out, err, errlen);
}

/* Layer kinds into kinds[n_layers]: layers_block_type / layer_types, else the pattern. */
static int read_kinds(const ci_config *c, const char *fam, char *kinds, int n_layers, char *err, size_t errlen) {
    const json_t *list = json_object_get(c->text, "layers_block_type");
    const char *lkey = "layers_block_type";
    if (!list || json_is_null(list)) { list = json_object_get(c->text, "layer_types"); lkey = "layer_types"; }
    if (list && !json_is_null(list)) {
        if (!json_is_array(list))
            return ci_err(err, errlen, "%s: %s: %s must be a list of layer types", c->path, fam, lkey);
        if ((int)json_array_size(list) != n_layers)
            return ci_err(err, errlen, "%s: %s: %s has %zu entries but num_hidden_layers is %d", c->path, fam, lkey,
                          json_array_size(list), n_layers);
        for (int l = 0; l < n_layers; l++) {
            const json_t *v = json_array_get(list, (size_t)l);
            const char *t = json_is_string(v) ? json_string_value(v) : "";
            if (!strcmp(t, "mamba") || !strcmp(t, "linear_attention")) kinds[l] = 'M';
            else if (!strcmp(t, "attention") || !strcmp(t, "full_attention")) kinds[l] = '*';
            else if (!strcmp(t, "mlp")) kinds[l] = '-';
            else if (!strcmp(t, "moe")) kinds[l] = 'E';
            else return ci_err(err, errlen, "%s: %s: %s[%d] = '%s' is not a layer type (mamba, linear_attention, attention, full_attention, mlp, moe)",
                               c->path, fam, lkey, l, t);
        }
        return 0;
    }
    const char *pat = cj_get_str(c->text, "hybrid_override_pattern");
    if (!pat)
        return ci_err(err, errlen, "%s: %s: neither layers_block_type nor hybrid_override_pattern is present", c->path, fam);
    if ((int)strlen(pat) != n_layers)
        return ci_err(err, errlen, "%s: %s: hybrid_override_pattern '%s' has %zu layers but num_hidden_layers is %d",
                      c->path, fam, pat, strlen(pat), n_layers);
    for (int l = 0; l < n_layers; l++) {
        if (!strchr("M*-E", pat[l]) || !pat[l])
            return ci_err(err, errlen, "%s: %s: hybrid_override_pattern has '%c' at %d; expected M, *, - or E",
                          c->path, fam, pat[l], l);
        kinds[l] = pat[l];
    }
    return 0;
}

/* time_step_limit: two numbers (Infinity and {"__float__": ...} spellings allowed). */
static int check_dt_limit(const ci_config *c, const char *fam, char *err, size_t errlen) {
    const char *key = json_object_get(c->text, "time_step_limit") ? "time_step_limit" : "mamba_dt_limit";
    const json_t *v = json_object_get(c->text, key);
    if (!v || json_is_null(v)) return 0;
    double lo, hi;
    if (!json_is_array(v) || json_array_size(v) != 2 || !cj_number(json_array_get(v, 0), &lo) ||
        !cj_number(json_array_get(v, 1), &hi) || isnan(lo) || isnan(hi) || lo > hi)
        return ci_err(err, errlen, "%s: %s: %s must be [low, high] with low <= high", c->path, fam, key);
    return 0;
}

/* ---- binding helpers the generic binder does not have --------------------------------- */

static int bind_fail(w_binder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bind_fail(w_binder *b, const char *fmt, ...) {
    if (b->failed) return -1;
    b->failed = 1;
    int o = snprintf(b->err, sizeof b->err, "%s: ", b->family);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err + o, sizeof b->err - (size_t)o, fmt, ap);
    va_end(ap);
    return -1;
}

/* A tensor of exactly this shape, claimed and counted; NULL (with a sticky error) when
 * absent, of another shape or of a dtype other than F32/F16/BF16. */
static const ci_tensor *take(w_binder *b, const char *name, int ndim, const int64_t *shape) {
    int i = st_index_of(b->st, name);
    if (i < 0) { bind_fail(b, "required tensor '%s' is missing from the checkpoint", name); return NULL; }
    const ci_tensor *t = st_get(b->st, i);
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == shape[d];
    if (!ok) {
        char want[128], got[128];
        bind_fail(b, "tensor '%s' in %s has shape %s, expected %s", name, st_file_of(b->st, i),
                  ci_shape_str(t->shape, t->ndim, got, sizeof got), ci_shape_str(shape, ndim, want, sizeof want));
        return NULL;
    }
    if (t->dtype != CI_F32 && t->dtype != CI_F16 && t->dtype != CI_BF16) {
        bind_fail(b, "tensor '%s' has dtype %s, expected F32, F16 or BF16", name, ci_dtype_name(t->dtype));
        return NULL;
    }
    b->claimed[i] = 1;
    b->n_params += ci_tensor_numel(t);
    b->bytes_by_dtype[t->dtype] += t->nbytes;
    return t;
}

/* relu² experts' up [I, X] and down [X, I] views: stacked experts.{up,down}_proj, mlx-lm's
 * stacks switch_mlp.fc1 (up) / switch_mlp.fc2 (down), quantized or not, or one tensor per
 * expert (record mode lists the per-expert names, as hub checkpoints ship). */
static int bind_experts(w_binder *b, ci_mat *up, ci_mat *down, int E, int top_k, int64_t I, int64_t X,
                        const char *pre) {
    if (b->failed) return -1;
    char n1[512], n2[512];
    snprintf(n1, sizeof n1, "%s.switch_mlp.fc1.weight", pre);
    snprintf(n2, sizeof n2, "%s.switch_mlp.fc2.weight", pre);
    if (b->st && (st_find(b->st, n1) || st_find(b->st, n2))) {
        w_stacked(b, up, W_REQUIRED, E, top_k, I, X, "%s.switch_mlp.fc1", pre);
        w_stacked(b, down, W_REQUIRED, E, top_k, X, I, "%s.switch_mlp.fc2", pre);
        return b->failed ? -1 : 1;
    }
    snprintf(n1, sizeof n1, "%s.experts.up_proj", pre);
    snprintf(n2, sizeof n2, "%s.experts.down_proj", pre);
    if (b->st && (st_find(b->st, n1) || st_find(b->st, n2))) {
        int64_t s1[3] = { E, I, X }, s2[3] = { E, X, I };
        const ci_tensor *tu = take(b, n1, 3, s1), *td = tu ? take(b, n2, 3, s2) : NULL;
        if (!tu || !td) return -1;
        size_t es = ci_dtype_size(tu->dtype), ed = ci_dtype_size(td->dtype);
        for (int e = 0; e < E; e++) {
            memset(&up[e], 0, sizeof up[e]);
            memset(&down[e], 0, sizeof down[e]);
            up[e].data = (const char *)tu->data + (size_t)e * (size_t)(I * X) * es;
            up[e].dtype = tu->dtype;
            up[e].rows = I;
            up[e].cols = X;
            down[e].data = (const char *)td->data + (size_t)e * (size_t)(X * I) * ed;
            down[e].dtype = td->dtype;
            down[e].rows = X;
            down[e].cols = I;
        }
        b->decode_bytes += (tu->nbytes + td->nbytes) / (size_t)E * (size_t)top_k;
        return 1;
    }
    size_t before = b->decode_bytes;
    for (int e = 0; e < E; e++) {
        w_mat(b, &up[e], W_REQUIRED, I, X, "%s.experts.%d.up_proj", pre, e);
        w_mat(b, &down[e], W_REQUIRED, X, I, "%s.experts.%d.down_proj", pre, e);
    }
    if (b->failed) return -1;
    b->decode_bytes = before + (b->decode_bytes - before) / (size_t)E * (size_t)top_k;
    return 1;
}

/* ---- load ----------------------------------------------------------------------------- */

static int nh_load(ci_model *m, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    nh_model *d = calloc(1, sizeof *d);
    if (!d) return ci_err(err, errlen, "%s: out of memory", fam);
    m->impl = d;
    d->H = (int)c->hidden_size;
    d->n_layers = (int)c->n_layers;
    d->vocab = (int)c->vocab_size;
    d->layers = calloc((size_t)d->n_layers, sizeof *d->layers);
    char *kinds = calloc((size_t)d->n_layers + 1, 1);
    if (!d->layers || !kinds) { free(kinds); return ci_err(err, errlen, "%s: out of memory", fam); }
    int rc = read_kinds(c, fam, kinds, d->n_layers, err, errlen);
    int n_m = 0, n_a = 0, n_f = 0, n_e = 0;
    for (int l = 0; l < d->n_layers; l++) {
        d->layers[l].kind = kinds[l];
        n_m += kinds[l] == 'M'; n_a += kinds[l] == '*'; n_f += kinds[l] == '-'; n_e += kinds[l] == 'E';
    }
    free(kinds);
    if (rc) return -1;

    /* hyper-parameters, with transformers' NemotronHConfig defaults */
    double eps = 1e-5;
    int use_bias = 0, mlp_bias = 0;
    if (cfg_num(c, "layer_norm_epsilon", 0, 0, 1, &eps, err, errlen) ||
        cfg_bool(c, "use_bias", &use_bias, err, errlen) || cfg_bool(c, "mlp_bias", &mlp_bias, err, errlen))
        return -1;
    d->eps = (float)eps;
    if (use_bias) return ci_err(err, errlen, "%s: %s: use_bias=true (in_proj/out_proj biases) is not implemented yet", c->path, fam);
    if (mlp_bias) return ci_err(err, errlen, "%s: %s: mlp_bias=true is not implemented yet", c->path, fam);
    if (n_f || n_e) {
        const char *act = cj_get_str(c->text, "mlp_hidden_act");
        if (act && strcmp(act, "relu2"))
            return ci_err(err, errlen, "%s: %s: mlp_hidden_act '%s' is not supported (relu2)", c->path, fam, act);
    }
    if (n_a) {
        long long ahd = 0;
        if (!c->n_heads) return ci_err(err, errlen, "%s: %s: required key 'num_attention_heads' is missing", c->path, fam);
        if (cfg_int(c, "attention_head_dim", 0, 1, 1 << 14, &ahd, err, errlen)) return -1;
        d->n_heads = (int)c->n_heads;
        d->n_kv = c->n_kv_heads ? (int)c->n_kv_heads : d->n_heads;
        d->hd = c->head_dim ? (int)c->head_dim : ahd ? (int)ahd : 128;   /* transformers' default head_dim */
        if (d->n_heads % d->n_kv)
            return ci_err(err, errlen, "%s: %s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                          c->path, fam, d->n_heads, d->n_kv);
        d->attn_scale = 1.0f / sqrtf((float)d->hd);
    }
    if (n_f) {
        d->ff = (int)c->intermediate_size;
        if (!d->ff) return ci_err(err, errlen, "%s: %s: required key 'intermediate_size' is missing", c->path, fam);
    }
    long long Hm = 0, P = 0, G = 8, N = 128, K = 4;
    double dt_min = 0.001;
    int conv_bias = 1;
    if (n_m) {
        if (cfg_int(c, "mamba_num_heads", 1, 1, 1 << 16, &Hm, err, errlen) ||
            cfg_int(c, "mamba_head_dim", 1, 1, 1 << 14, &P, err, errlen) ||
            cfg_int2(c, "n_groups", "mamba_n_groups", 1, 1 << 16, &G, err, errlen) ||
            cfg_int(c, "ssm_state_size", 0, 1, 1 << 14, &N, err, errlen) ||
            cfg_int2(c, "conv_kernel", "mamba_d_conv", 1, 64, &K, err, errlen) ||
            cfg_num2(c, "time_step_min", "mamba_dt_min", 0, 1e6, &dt_min, err, errlen) ||
            cfg_bool2(c, "use_conv_bias", "mamba_conv_bias", &conv_bias, err, errlen) ||
            check_dt_limit(c, fam, err, errlen))
            return -1;
        const char *act = cj_get_str(c->text, "mamba_hidden_act");
        if (act && strcmp(act, "silu") && strcmp(act, "swish"))
            return ci_err(err, errlen, "%s: %s: mamba_hidden_act '%s' is not supported (silu)", c->path, fam, act);
        if (Hm % G)
            return ci_err(err, errlen, "%s: %s: mamba_num_heads %lld is not a multiple of n_groups %lld", c->path, fam, Hm, G);
    }
    moe_block proto;
    memset(&proto, 0, sizeof proto);
    if (n_e) {
        long long E = 8, topk = 2, mi = 7688, si = 7688, ng = 1, tg = 1, lat = 0;
        int norm = 1;
        double rsf = 1.0;
        const char *ekey = json_object_get(c->text, "n_routed_experts") ? "n_routed_experts" : "num_local_experts";
        if (cfg_int(c, ekey, 0, 1, 1 << 16, &E, err, errlen) ||
            cfg_int(c, "num_experts_per_tok", 0, 1, 1 << 16, &topk, err, errlen) ||
            cfg_int(c, "moe_intermediate_size", 0, 1, 1 << 20, &mi, err, errlen) ||
            cfg_int(c, "moe_shared_expert_intermediate_size", 0, 1, 1 << 20, &si, err, errlen) ||
            cfg_int(c, "n_group", 0, 1, 1 << 10, &ng, err, errlen) ||
            cfg_int(c, "topk_group", 0, 1, 1 << 10, &tg, err, errlen) ||
            cfg_int(c, "moe_latent_size", 0, 1, 1 << 17, &lat, err, errlen) ||
            cfg_num(c, "routed_scaling_factor", 0, 0, 1e6, &rsf, err, errlen) ||
            cfg_bool(c, "norm_topk_prob", &norm, err, errlen))
            return -1;
        if (topk > E || E % ng || tg > ng || E / ng < 2)
            return ci_err(err, errlen, "%s: %s: expert routing n_routed_experts=%lld num_experts_per_tok=%lld n_group=%lld topk_group=%lld is inconsistent",
                          c->path, fam, E, topk, ng, tg);
        proto.n_experts = (int)E;
        proto.top_k = (int)topk;
        proto.hidden = d->H;
        proto.inter = (int)mi;
        proto.router = MOE_SIGMOID;
        proto.norm_topk_prob = norm;
        proto.routed_scaling = (float)rsf;
        proto.n_group = (int)ng;
        proto.topk_group = (int)tg;
        proto.shared_inter = (int)si;      /* transformers: width moe_shared_expert_intermediate_size */
        proto.act = MOE_ACT_RELU2;
        proto.latent = (int)lat;
        if (w_check_experts(m->st, c->path, fam, ekey, E, n_e, 2, err, errlen)) return -1;
        d->expert_mats = calloc((size_t)n_e * (size_t)E * 2 + 1, sizeof(ci_mat));
        if (!d->expert_mats) return ci_err(err, errlen, "%s: out of memory", fam);
    }

    /* tensors */
    const char *pre = "backbone";
    if (m->st && !st_find(m->st, "backbone.embeddings.weight") && st_find(m->st, "model.embeddings.weight")) pre = "model";
    w_binder b;
    if (w_init(&b, m->st, fam, d->n_layers)) return ci_err(err, errlen, "%s", b.err);
    w_set_quant(&b, &c->quant);   /* mlx-community checkpoints: check packing against config.json */
    const int H = d->H, QD = d->n_heads * d->hd, KD = d->n_kv * d->hd;
    ci_mat *em = d->expert_mats;
    w_embed(&b, &d->embed, d->vocab, H, "%s.embeddings", pre);
    for (int l = 0; l < d->n_layers; l++) {
        nh_layer *L = &d->layers[l];
        char lp[96];
        snprintf(lp, sizeof lp, "%s.layers.%d", pre, l);
        w_vec(&b, &L->norm, W_REQUIRED, H, 0, W_KIND_NORM, "%s.norm.weight", lp);
        if (L->kind == 'M') {
            mamba2_layer *M = &L->mamba;
            M->hidden = H; M->n_heads = (int)Hm; M->head_dim = (int)P; M->n_groups = (int)G;
            M->d_state = (int)N; M->d_conv = (int)K; M->inner = (int)(Hm * P);
            M->conv_dim = M->inner + 2 * (int)(G * N);
            M->eps = d->eps;
            M->dt_min = (float)dt_min;
            w_mat(&b, &M->in_proj, W_REQUIRED, M->inner + M->conv_dim + Hm, H, "%s.mixer.in_proj", lp);
            w_conv(&b, &M->conv_w, M->conv_dim, K, "%s.mixer.conv1d.weight", lp);  /* -> [K, C], owned by the binder */
            if (conv_bias) w_vec(&b, &M->conv_b, W_REQUIRED, M->conv_dim, 0, W_KIND_BIAS, "%s.mixer.conv1d.bias", lp);
            w_vec(&b, &M->dt_bias, W_REQUIRED, Hm, 0, W_KIND_BIAS, "%s.mixer.dt_bias", lp);
            w_vec(&b, &M->A, W_REQUIRED, Hm, 0, W_KIND_BIAS, "%s.mixer.A_log", lp);
            w_vec(&b, &M->D, W_REQUIRED, Hm, 0, W_KIND_NORM, "%s.mixer.D", lp);
            w_vec(&b, &M->norm_w, W_REQUIRED, M->inner, 0, W_KIND_NORM, "%s.mixer.norm.weight", lp);
            w_mat(&b, &M->out_proj, W_REQUIRED, H, M->inner, "%s.mixer.out_proj", lp);
            if (M->A) for (int h = 0; h < Hm; h++) M->A[h] = -expf(M->A[h]);   /* A = -exp(A_log) */
            if (!d->any_mamba) d->any_mamba = M;
        } else if (L->kind == '*') {
            w_mat(&b, &L->wq, W_REQUIRED, QD, H, "%s.mixer.q_proj", lp);
            w_mat(&b, &L->wk, W_REQUIRED, KD, H, "%s.mixer.k_proj", lp);
            w_mat(&b, &L->wv, W_REQUIRED, KD, H, "%s.mixer.v_proj", lp);
            w_mat(&b, &L->wo, W_REQUIRED, H, QD, "%s.mixer.o_proj", lp);
        } else if (L->kind == '-') {
            w_mat(&b, &L->up, W_REQUIRED, d->ff, H, "%s.mixer.up_proj", lp);
            w_mat(&b, &L->down, W_REQUIRED, H, d->ff, "%s.mixer.down_proj", lp);
        } else {
            moe_block *E = &L->moe;
            *E = proto;
            const int X = E->latent ? E->latent : H;
            E->w_up = em;
            E->w_down = em + E->n_experts;
            em += 2 * E->n_experts;
            char mp[128];
            snprintf(mp, sizeof mp, "%s.mixer", lp);
            w_mat(&b, &E->gate, W_REQUIRED, E->n_experts, H, "%s.gate", mp);
            w_vec(&b, &E->bias, W_REQUIRED, E->n_experts, 0, W_KIND_BIAS, "%s.gate.e_score_correction_bias", mp);
            bind_experts(&b, E->w_up, E->w_down, E->n_experts, E->top_k, E->inter, X, mp);
            w_mat(&b, &E->sh_up, W_REQUIRED, E->shared_inter, H, "%s.shared_experts.up_proj", mp);
            w_mat(&b, &E->sh_down, W_REQUIRED, H, E->shared_inter, "%s.shared_experts.down_proj", mp);
            if (E->latent) {
                w_mat(&b, &E->fc1_latent, W_REQUIRED, E->latent, H, "%s.fc1_latent_proj", mp);
                w_mat(&b, &E->fc2_latent, W_REQUIRED, H, E->latent, "%s.fc2_latent_proj", mp);
            }
            if (!d->any_moe) d->any_moe = E;
        }
    }
    w_vec(&b, &d->norm_f, W_REQUIRED, H, 0, W_KIND_NORM, "%s.norm_f.weight", pre);
    w_head(&b, &d->lm_head, &d->embed, c->tie_embeddings, d->vocab, H, "lm_head");
    rc = ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen);
    return rc;
}

static void nh_unload(ci_model *m) {
    nh_model *d = m->impl;
    if (!d) return;
    w_owned_free(d->owned, d->n_owned);
    free(d->expert_mats);
    free(d->layers);
    free(d);
    m->impl = NULL;
}

static size_t nh_cache_bytes_per_token(const ci_model *m) {
    const nh_model *d = m->impl;
    size_t b = 0;
    for (int l = 0; l < d->n_layers; l++)
        if (d->layers[l].kind == '*') b += 2 * (size_t)d->n_kv * (size_t)d->hd * sizeof(float);
    return b;
}

/* ---- sessions ------------------------------------------------------------------------- */

static void nh_session_free(ci_session *s) {
    nh_cache *c = s->impl;
    if (!c) return;
    cache_free(&c->cache);
    free(c->x); free(c->xn); free(c->y); free(c->q); free(c->att); free(c->k); free(c->v); free(c->g); free(c->last);
    mamba2_scratch_free(s->m->be, &c->mamba);
    moe_scratch_free(s->m->be, &c->moe);
    free(c);
    s->impl = NULL;
}

static int nh_session_init(ci_session *s, char *err, size_t errlen) {
    const nh_model *d = s->m->impl;
    const char *fam = s->m->family->name;
    nh_cache *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    cache_part *parts = calloc((size_t)d->n_layers, sizeof *parts);
    if (!parts) return ci_err(err, errlen, "%s: out of memory", fam);
    for (int l = 0; l < d->n_layers; l++) {
        const nh_layer *L = &d->layers[l];
        if (L->kind == '*') parts[l].row_floats = 2 * (size_t)d->n_kv * (size_t)d->hd;
        if (L->kind == 'M') parts[l].state_floats = mamba2_conv_floats(&L->mamba) + mamba2_ssm_floats(&L->mamba);
    }
    int rc = cache_init(&c->cache, d->n_layers, parts, s->max_ctx, fam, err, errlen);
    free(parts);
    if (rc) return -1;
    const size_t U = UBATCH, QD = (size_t)d->n_heads * d->hd, KD = (size_t)d->n_kv * d->hd;
    c->x = malloc(U * d->H * sizeof(float));
    c->xn = malloc(U * d->H * sizeof(float));
    c->y = malloc(U * d->H * sizeof(float));
    c->q = malloc((U * QD + 1) * sizeof(float));
    c->att = malloc((U * QD + 1) * sizeof(float));
    c->k = malloc((U * KD + 1) * sizeof(float));
    c->v = malloc((U * KD + 1) * sizeof(float));
    c->g = malloc((U * (size_t)d->ff + 1) * sizeof(float));
    c->last = malloc((size_t)d->H * sizeof(float));
    if (!c->x || !c->xn || !c->y || !c->q || !c->att || !c->k || !c->v || !c->g || !c->last ||
        (d->any_mamba && mamba2_scratch_init(s->m->be, &c->mamba, d->any_mamba, UBATCH)) ||
        (d->any_moe && moe_scratch_init(s->m->be, &c->moe, d->any_moe, UBATCH)))
        return ci_err(err, errlen, "%s: out of memory for a %d-token session", fam, s->max_ctx);
    return 0;
}

/* ---- forward -------------------------------------------------------------------------- */

static void relu2(float *g, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float v = g[i] > 0.0f ? g[i] : 0.0f;
        g[i] = v * v;
    }
}

/* One chunk of n <= UBATCH tokens at positions s->pos.. */
static void forward_chunk(ci_session *s, const int *tokens, int n, float *logits, int all_logits) {
    ci_model *m = s->m;
    const nh_model *d = m->impl;
    nh_cache *c = s->impl;
    ci_backend *be = m->be;
    const int H = d->H, KD = d->n_kv * d->hd;
    const int pos0 = s->pos;
    be->embed(be, c->x, &d->embed, tokens, n);
    for (int l = 0; l < d->n_layers; l++) {
        const nh_layer *L = &d->layers[l];
        be->rmsnorm(be, c->xn, c->x, L->norm, n, H, d->eps);
        switch (L->kind) {
        case 'M': {
            float *st = cache_state(&c->cache, l);
            mamba2_forward(be, &L->mamba, &c->mamba, st, st + mamba2_conv_floats(&L->mamba), c->y, c->xn, n, d->scan);
            break;
        }
        case '*': {
            float *rows = cache_rows(&c->cache, l);                 /* [max_ctx, K | V] */
            be->matmul(be, c->q, c->xn, n, &L->wq);
            be->matmul(be, c->k, c->xn, n, &L->wk);
            be->matmul(be, c->v, c->xn, n, &L->wv);
            for (int t = 0; t < n; t++) {
                float *r = rows + (size_t)(pos0 + t) * 2 * KD;
                memcpy(r, c->k + (size_t)t * KD, (size_t)KD * sizeof(float));
                memcpy(r + KD, c->v + (size_t)t * KD, (size_t)KD * sizeof(float));
            }
            be->attention(be, c->att, c->q, rows, rows + KD, n, pos0, d->n_heads, d->n_kv, d->hd, 2 * KD, d->attn_scale);
            be->matmul(be, c->y, c->att, n, &L->wo);
            break;
        }
        case '-':
            be->matmul(be, c->g, c->xn, n, &L->up);
            relu2(c->g, (int64_t)n * d->ff);
            be->matmul(be, c->y, c->g, n, &L->down);
            break;
        default:
            moe_forward(be, &L->moe, &c->moe, c->y, c->xn, n);     /* routed + shared */
            break;
        }
        CI_DUMP(m, "mixer_out", l, c->y, n, H);
        be->add(be, c->x, c->y, (int64_t)n * H);
        CI_DUMP(m, "layer_out", l, c->x, n, H);
    }
    if (logits) {
        if (all_logits) {
            be->rmsnorm(be, c->xn, c->x, d->norm_f, n, H, d->eps);
            be->matmul(be, logits, c->xn, n, &d->lm_head);
        } else {
            be->rmsnorm(be, c->last, c->x + (size_t)(n - 1) * H, d->norm_f, 1, H, d->eps);
            be->matmul(be, logits, c->last, 1, &d->lm_head);
        }
    }
    s->pos += n;
    c->cache.pos = s->pos;
}

static int nh_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    const nh_model *d = s->m->impl;
    nh_cache *c = s->impl;
    const char *fam = s->m->family->name;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen)) return -1;
    /* the recurrent state cannot be rewound: a new sequence (pos 0) starts from zero, any
     * other position must be where the cache is */
    if (s->pos == 0) cache_reset(&c->cache);
    else if (s->pos != c->cache.pos)
        return ci_err(err, errlen, "%s: the session is at position %d but its Mamba2 state is at %d (restore a snapshot to move back)",
                      fam, s->pos, c->cache.pos);
    ci_forward_chunks(s, tokens, n, logits, all_logits, d->vocab, UBATCH, forward_chunk);
    return 0;
}

/* ---- serving many sequences: one batched decode step --------------------------------------
 *
 * Row i belongs to session ss[i] at its position. The embedding, norms, attention
 * projections, relu² MLPs, MoE and head run over all n rows at once; each row's K/V go into
 * its own cache rows and it attends to them alone, and each row's Mamba2 layers run as a
 * one-token step on its own conv and SSM state (with ss[0]'s scratch). Every op gives a row
 * the bits it would alone, so the logits equal forward(ss[i], &tokens[i], 1)'s. */
static void forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits) {
    ci_model *m = ss[0]->m;
    const nh_model *d = m->impl;
    nh_cache *c = ss[0]->impl;
    ci_backend *be = m->be;
    const int H = d->H, KD = d->n_kv * d->hd, QD = d->n_heads * d->hd;
    be->embed(be, c->x, &d->embed, tokens, n);
    for (int l = 0; l < d->n_layers; l++) {
        const nh_layer *L = &d->layers[l];
        be->rmsnorm(be, c->xn, c->x, L->norm, n, H, d->eps);
        switch (L->kind) {
        case 'M': {
            float *conv[UBATCH], *ssm[UBATCH];
            for (int i = 0; i < n; i++) {
                conv[i] = cache_state(&((nh_cache *)ss[i]->impl)->cache, l);
                ssm[i] = conv[i] + mamba2_conv_floats(&L->mamba);
            }
            mamba2_forward_rows(be, &L->mamba, &c->mamba, conv, ssm, c->y, c->xn, n);
            break;
        }
        case '*':
            be->matmul(be, c->q, c->xn, n, &L->wq);
            be->matmul(be, c->k, c->xn, n, &L->wk);
            be->matmul(be, c->v, c->xn, n, &L->wv);
            for (int i = 0; i < n; i++) {
                float *rows = cache_rows(&((nh_cache *)ss[i]->impl)->cache, l);
                float *r = rows + (size_t)ss[i]->pos * 2 * KD;
                memcpy(r, c->k + (size_t)i * KD, (size_t)KD * sizeof(float));
                memcpy(r + KD, c->v + (size_t)i * KD, (size_t)KD * sizeof(float));
                be->attention(be, c->att + (size_t)i * QD, c->q + (size_t)i * QD, rows, rows + KD, 1, ss[i]->pos,
                              d->n_heads, d->n_kv, d->hd, 2 * KD, d->attn_scale);
            }
            be->matmul(be, c->y, c->att, n, &L->wo);
            break;
        case '-':
            be->matmul(be, c->g, c->xn, n, &L->up);
            relu2(c->g, (int64_t)n * d->ff);
            be->matmul(be, c->y, c->g, n, &L->down);
            break;
        default:
            moe_forward(be, &L->moe, &c->moe, c->y, c->xn, n);
            break;
        }
        be->add(be, c->x, c->y, (int64_t)n * H);
    }
    be->rmsnorm(be, c->xn, c->x, d->norm_f, n, H, d->eps);
    be->matmul(be, logits, c->xn, n, &d->lm_head);
    for (int i = 0; i < n; i++) {
        ss[i]->pos++;
        ((nh_cache *)ss[i]->impl)->cache.pos = ss[i]->pos;
    }
}

static int nh_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const nh_model *d = m->impl;
    const char *fam = m->family->name;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int i = 0; i < n; i++) {
        const nh_cache *ci = ss[i]->impl;
        if (ss[i]->pos != 0 && ss[i]->pos != ci->cache.pos)
            return ci_err(err, errlen, "%s: sequence %d is at position %d but its Mamba2 state is at %d (restore a snapshot to move back)",
                          fam, i, ss[i]->pos, ci->cache.pos);
    }
    for (int i = 0; i < n; i++)   /* a new sequence starts from zero state, as nh_forward */
        if (ss[i]->pos == 0) cache_reset(&((nh_cache *)ss[i]->impl)->cache);
    for (int off = 0; off < n; off += UBATCH) {
        int k = n - off < UBATCH ? n - off : UBATCH;
        forward_rows(ss + off, tokens + off, k, logits + (size_t)off * d->vocab);
    }
    return 0;
}

/* ---- family extras (nemotron_h.h) ----------------------------------------------------- */

extern const ci_family fam_nemotron_h;

ci_cache *nemh_cache(ci_session *s) {
    if (!s || s->m->family != &fam_nemotron_h || !s->impl) return NULL;
    nh_cache *c = s->impl;
    if (s->pos == 0) cache_reset(&c->cache);
    return &c->cache;
}

cache_snap *nemh_snapshot(const ci_session *s, char *err, size_t errlen) {
    if (!s || s->m->family != &fam_nemotron_h || !s->impl) {
        ci_err(err, errlen, "nemotron_h: snapshot of a session of another family");
        return NULL;
    }
    const nh_cache *c = s->impl;
    cache_snap *snap = cache_snapshot(&c->cache);
    if (!snap) ci_err(err, errlen, "nemotron_h: out of memory for a cache snapshot at position %d", s->pos);
    return snap;
}

int nemh_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    ci_cache *c = nemh_cache(s);
    if (!c) return ci_err(err, errlen, "nemotron_h: restore on a session of another family");
    if (cache_restore(c, snap, err, errlen)) return -1;
    s->pos = c->pos;
    return 0;
}

double nemh_scan_seconds(ci_session *s) {
    if (!s || s->m->family != &fam_nemotron_h || !s->impl) return 0;
    nh_cache *c = s->impl;
    double t = c->mamba.scan_seconds;
    c->mamba.scan_seconds = 0;
    return t;
}

int nemh_set_scan(ci_model *m, mamba2_scan scan, char *err, size_t errlen) {
    if (!m || m->family != &fam_nemotron_h || !m->impl) return ci_err(err, errlen, "nemotron_h: not a nemotron_h model");
    if (scan != MAMBA2_SCAN_CHUNKED && scan != MAMBA2_SCAN_RECURRENT)
        return ci_err(err, errlen, "nemotron_h: unknown scan form %d", (int)scan);
    ((nh_model *)m->impl)->scan = scan;
    return 0;
}

static const ci_family_ops nh_ops = {
    .load = nh_load, .unload = nh_unload,
    .session_init = nh_session_init, .session_free = nh_session_free,
    .forward = nh_forward, .cache_bytes_per_token = nh_cache_bytes_per_token,
    .snapshot = nemh_snapshot, .restore = nemh_restore, .forward_batch = nh_forward_batch,
};

const ci_family fam_nemotron_h = { "nemotron_h", (const char *const[]){ "nemotron_h", NULL }, NULL, &nh_ops, 0 };
