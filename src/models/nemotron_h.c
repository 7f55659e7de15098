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
 * This file reads the config and binds the tensors; nemotron_h_place.c puts the weights in
 * backend memory, nemotron_h_run.c runs sessions on backend ops (a device backend runs
 * them as they are, MLX-quantized weights included), nemotron_h_cache.c snapshots.
 * Cache (backend memory, per session): attention layers keep K|V rows (2·n_kv·hd floats
 * per token), Mamba2 layers a fixed f32 state (conv window (K-1)·conv_dim, then SSM
 * Hm·P·N). A forward at position 0 starts from zeroed states.
 *
 * dt clamp: below at time_step_min in prefill and decode alike (transformers' prefill
 * path; see nn/mamba2.h); time_step_limit is read and checked but not applied, as
 * transformers 5 does not apply it either. */
#include "nemotron_h_internal.h"
#include "layer_snap.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "../nn/moe.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen)) return -1;
    if (d->any_mamba) d->state_floats = mamba2_conv_floats(d->any_mamba) + mamba2_ssm_floats(d->any_mamba);
    if (!m->st) return 0;   /* record mode: nothing to place */
    if (m->be->world > 1 && nh_shard(m, d, err, errlen)) return -1;
    return nh_place(m, d, err, errlen);
}

static void nh_unload(ci_model *m) {
    nh_model *d = m->impl;
    if (!d) return;
    ci_buf_release(m->be, d->pool_kv);
    w_owned_free(d->owned, d->n_owned);
    shd_kept_free(&d->kept);
    free(d->expert_mats);
    free(d->dev_expert_mats);
    free(d->dev);
    free(d->layers);
    free(d);
    m->impl = NULL;
}

static int nh_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen) {
    nh_model *d = m->impl;
    int n_attn = 0;
    for (int l = 0; l < d->n_layers; l++) n_attn += d->layers[l].kind == '*';
    return hyb_pool_init(m, n_blocks, nh_kv_floats(d, m->be), n_attn, &d->pool_kv, err, errlen);
}

static size_t nh_cache_bytes_per_token(const ci_model *m) {
    const nh_model *d = m->impl;
    size_t b = 0;
    for (int l = 0; l < d->n_layers; l++)
        if (d->layers[l].kind == '*') b += nh_kv_floats(d, m->be) * sizeof(float);
    return b;
}

static const ci_family_ops nh_ops = {
    .load = nh_load, .unload = nh_unload,
    .session_init = nh_session_init, .session_free = nh_session_free,
    .forward = nh_forward, .cache_bytes_per_token = nh_cache_bytes_per_token, .pool_init = nh_pool_init,
    .snapshot = nemh_snapshot, .restore = nemh_restore, .forward_batch = nh_forward_batch,
    .forward_argmax = nh_forward_argmax, .forward_batch_argmax = nh_forward_batch_argmax,
};

const ci_family fam_nemotron_h = { "nemotron_h", (const char *const[]){ "nemotron_h", NULL }, NULL, &nh_ops,
                                   CI_CUDA_YES, 1, 1 };
