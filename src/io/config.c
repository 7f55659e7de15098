/* config.c — see config.h. */
#include "config.h"
#include "json.h"
#include "../core/status.h"
#include "../models/registry.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The family's own name for messages (model_type aliases map to one family). */
static const char *cfg_family_name(const ci_config *c) { return c->family ? c->family->name : c->model_type; }

int cfg_int(const ci_config *c, const char *key, int req, long long lo, long long hi, long long *out,
            char *err, size_t errlen) {
    long long v;
    int r = cj_get_int(c->text, key, &v);
    if (r == 0) {
        if (req) return ci_err(err, errlen, "%s: %s: required key '%s' is missing", c->path, cfg_family_name(c), key);
        return 0;
    }
    if (r < 0) return ci_err(err, errlen, "%s: %s: key '%s' must be an integer", c->path, cfg_family_name(c), key);
    if (v < lo || v > hi)
        return ci_err(err, errlen, "%s: %s: key '%s' = %lld is out of range, expected %lld..%lld",
                      c->path, cfg_family_name(c), key, v, lo, hi);
    *out = v;
    return 0;
}

int cfg_num(const ci_config *c, const char *key, int req, double lo, double hi, double *out,
            char *err, size_t errlen) {
    double v;
    int r = cj_get_num(c->text, key, &v);
    if (r == 0) {
        if (req) return ci_err(err, errlen, "%s: %s: required key '%s' is missing", c->path, cfg_family_name(c), key);
        return 0;
    }
    if (r < 0) return ci_err(err, errlen, "%s: %s: key '%s' must be a number", c->path, cfg_family_name(c), key);
    if (!(v >= lo && v <= hi))
        return ci_err(err, errlen, "%s: %s: key '%s' = %g is out of range, expected %g..%g",
                      c->path, cfg_family_name(c), key, v, lo, hi);
    *out = v;
    return 0;
}

int cfg_bool(const ci_config *c, const char *key, int *out, char *err, size_t errlen) {
    int r = cj_get_bool(c->text, key, out);
    if (r < 0) return ci_err(err, errlen, "%s: %s: key '%s' must be true or false", c->path, cfg_family_name(c), key);
    return 0;
}

/* Reads an optional number from a rope block; wrong type is an error naming block.key. */
static int rope_num(const ci_config *c, const json_t *obj, const char *blk, const char *key, double *out,
                    char *err, size_t errlen) {
    int r = cj_get_num(obj, key, out);
    if (r < 0) return ci_err(err, errlen, "%s: %s: %s.%s must be a number", c->path, cfg_family_name(c), blk, key);
    return 0;
}

int cfg_rope(const ci_config *c, const json_t *obj, ci_rope_cfg *out, char *err, size_t errlen) {
    /* messages name the block as the file spells it */
    const char *blk = obj && obj == json_object_get(c->text, "rope_scaling") ? "rope_scaling" : "rope_parameters";
    memset(out, 0, sizeof *out);
    out->theta = 10000.0;
    out->factor = 1.0;
    out->partial_rotary_factor = 1.0;
    out->attention_factor = -1.0;
    out->truncate = 1;
    out->original_max_pos = c->max_pos;
    /* top-level keys first (hub dialect), then the block overrides */
    if (rope_num(c, c->text, "config", "rope_theta", &out->theta, err, errlen) ||
        rope_num(c, c->text, "config", "partial_rotary_factor", &out->partial_rotary_factor, err, errlen))
        return -1;
    long long omp;
    if (cj_get_int(c->text, "original_max_position_embeddings", &omp) == 1) out->original_max_pos = omp;
    if (obj && !json_is_null(obj)) {
        if (!json_is_object(obj))
            return ci_err(err, errlen, "%s: %s: %s must be an object", c->path, cfg_family_name(c), blk);
        const char *t = cj_get_str(obj, "rope_type");
        if (!t) t = cj_get_str(obj, "type");
        if (!t) t = "default";
        if (!strcmp(t, "default")) out->type = CI_ROPE_DEFAULT;
        else if (!strcmp(t, "linear")) out->type = CI_ROPE_LINEAR;
        else if (!strcmp(t, "dynamic")) out->type = CI_ROPE_DYNAMIC;
        else if (!strcmp(t, "yarn")) out->type = CI_ROPE_YARN;
        else if (!strcmp(t, "llama3")) out->type = CI_ROPE_LLAMA3;
        else return ci_err(err, errlen, "%s: %s: rope type '%s' is not supported (default, linear, dynamic, yarn, llama3)",
                           c->path, cfg_family_name(c), t);
        double omp_d = -1;
        if (rope_num(c, obj, blk, "rope_theta", &out->theta, err, errlen) ||
            rope_num(c, obj, blk, "partial_rotary_factor", &out->partial_rotary_factor, err, errlen) ||
            rope_num(c, obj, blk, "factor", &out->factor, err, errlen) ||
            rope_num(c, obj, blk, "low_freq_factor", &out->low_freq_factor, err, errlen) ||
            rope_num(c, obj, blk, "high_freq_factor", &out->high_freq_factor, err, errlen) ||
            rope_num(c, obj, blk, "beta_fast", &out->beta_fast, err, errlen) ||
            rope_num(c, obj, blk, "beta_slow", &out->beta_slow, err, errlen) ||
            rope_num(c, obj, blk, "mscale", &out->mscale, err, errlen) ||
            rope_num(c, obj, blk, "mscale_all_dim", &out->mscale_all_dim, err, errlen) ||
            rope_num(c, obj, blk, "attention_factor", &out->attention_factor, err, errlen) ||
            rope_num(c, obj, blk, "original_max_position_embeddings", &omp_d, err, errlen))
            return -1;
        if (isnan(omp_d) || omp_d > (double)(1LL << 32)) /* also keeps the conversion below defined */
            return ci_err(err, errlen, "%s: %s: %s.original_max_position_embeddings = %g is out of range, expected at most %lld",
                          c->path, cfg_family_name(c), blk, omp_d, 1LL << 32);
        if (omp_d > 0) out->original_max_pos = (long long)omp_d;
        int tr;
        if (cj_get_bool(obj, "truncate", &tr) == 1) out->truncate = tr;
        if (out->type == CI_ROPE_LLAMA3 && !(out->high_freq_factor > out->low_freq_factor && out->low_freq_factor > 0))
            return ci_err(err, errlen, "%s: %s: llama3 rope needs 0 < low_freq_factor < high_freq_factor", c->path, cfg_family_name(c));
        if (out->type != CI_ROPE_DEFAULT && !(out->factor > 0 && isfinite(out->factor)))
            return ci_err(err, errlen, "%s: %s: %s.factor must be a positive number", c->path, cfg_family_name(c), blk);
        if ((out->type == CI_ROPE_YARN || out->type == CI_ROPE_LLAMA3) && out->original_max_pos <= 0)
            return ci_err(err, errlen, "%s: %s: %s.original_max_position_embeddings must be positive", c->path, cfg_family_name(c), blk);
    }
    if (!(out->theta > 1.0 && isfinite(out->theta)))
        return ci_err(err, errlen, "%s: %s: rope_theta = %g, expected a finite value > 1", c->path, cfg_family_name(c), out->theta);
    if (!(out->partial_rotary_factor > 0 && out->partial_rotary_factor <= 1))
        return ci_err(err, errlen, "%s: %s: partial_rotary_factor = %g, expected (0, 1]", c->path, cfg_family_name(c),
                      out->partial_rotary_factor);
    return 0;
}

static int read_eos(ci_config *c, char *err, size_t errlen) {
    const json_t *e = json_object_get(c->text, "eos_token_id");
    if (!e || json_is_null(e)) e = json_object_get(c->root, "eos_token_id");
    c->n_eos = 0;
    if (!e || json_is_null(e)) return 0;
    if (json_is_integer(e)) { c->eos_ids[c->n_eos++] = (int)json_integer_value(e); }
    else if (json_is_array(e)) {
        size_t i; json_t *v;
        json_array_foreach(e, i, v) {
            if (!json_is_integer(v)) return ci_err(err, errlen, "%s: eos_token_id entries must be integers", c->path);
            if (c->n_eos < 16) c->eos_ids[c->n_eos++] = (int)json_integer_value(v);
        }
    } else return ci_err(err, errlen, "%s: eos_token_id must be an integer or a list of integers", c->path);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab_size)
            return ci_err(err, errlen, "%s: eos_token_id %d is outside the vocabulary [0, %lld)", c->path, c->eos_ids[i], c->vocab_size);
    return 0;
}

/* Length of a per-layer type list (transformers 5 omits num_hidden_layers from some saved
 * configs, e.g. Nemotron-H, deriving it from layers_block_type); 0 when there is none. */
static long long layer_list_len(const ci_config *c) {
    static const char *keys[] = { "layers_block_type", "layer_types" };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const json_t *v = json_object_get(c->text, keys[i]);
        if (v && json_is_array(v) && json_array_size(v) > 0) return (long long)json_array_size(v);
    }
    const char *pat = cj_get_str(c->text, "hybrid_override_pattern");
    return pat ? (long long)strlen(pat) : 0;
}

static int parse_root(ci_config *c, char *err, size_t errlen) {
    if (!json_is_object(c->root)) return ci_err(err, errlen, "%s: expected a JSON object", c->path);
    c->text = c->root;
    const char *mt = cj_get_str(c->root, "model_type");
    const json_t *tc = json_object_get(c->root, "text_config");
    /* VL wrappers nest the language model: prefer text_config's model_type when the outer
     * one is not a family we know, or when the inner one names a text family. */
    if (tc && json_is_object(tc)) {
        const char *imt = cj_get_str(tc, "model_type");
        if (imt && reg_find(imt)) { c->text = (json_t *)tc; mt = imt; }
        else if (!mt || !reg_find(mt)) { c->text = (json_t *)tc; if (imt) mt = imt; }
    }
    if (!mt) return ci_err(err, errlen, "%s: key 'model_type' is missing", c->path);
    snprintf(c->model_type, sizeof c->model_type, "%s", mt);
    c->family = reg_find(mt);
    if (!c->family) {
        char list[1024];
        reg_list(list, sizeof list);
        return ci_err(err, errlen, "%s: unknown model_type '%s'; supported: %s", c->path, mt, list);
    }
    /* The generic keys; ranges are what any real model of these families fits in. */
    c->max_pos = 4096;
    c->rms_eps = 1e-6;
    c->head_dim = 0;
    c->n_kv_heads = 0;
    c->intermediate_size = 0;
    if (cfg_int(c, "vocab_size", 1, 1, 1 << 24, &c->vocab_size, err, errlen) ||
        cfg_int(c, "hidden_size", 1, 1, 1 << 17, &c->hidden_size, err, errlen) ||
        cfg_int(c, "num_hidden_layers", !layer_list_len(c), 1, 4096, &c->n_layers, err, errlen) ||
        cfg_int(c, "num_attention_heads", 0, 1, 1 << 14, &c->n_heads, err, errlen) ||
        cfg_int(c, "num_key_value_heads", 0, 1, 1 << 14, &c->n_kv_heads, err, errlen) ||
        cfg_int(c, "head_dim", 0, 1, 1 << 14, &c->head_dim, err, errlen) ||
        cfg_int(c, "intermediate_size", 0, 1, 1 << 22, &c->intermediate_size, err, errlen) ||
        cfg_int(c, "max_position_embeddings", 0, 1, 1LL << 32, &c->max_pos, err, errlen))
        return -1;
    if (!c->n_layers) c->n_layers = layer_list_len(c);
    if (c->n_layers > 4096)
        return ci_err(err, errlen, "%s: %s: %lld layers in the layer-type list, expected at most 4096", c->path, cfg_family_name(c), c->n_layers);
    if (cfg_num(c, "rms_norm_eps", 0, 0, 1, &c->rms_eps, err, errlen)) return -1;
    if (cfg_num(c, "layer_norm_epsilon", 0, 0, 1, &c->rms_eps, err, errlen)) return -1;
    if (cfg_num(c, "norm_eps", 0, 0, 1, &c->rms_eps, err, errlen)) return -1;
    int tie = 0, tie_set = 0;
    if (cj_get_bool(c->text, "tie_word_embeddings", &tie) == 1 || cj_get_bool(c->root, "tie_word_embeddings", &tie) == 1 ||
        cj_get_bool(c->text, "tie_embedding", &tie) == 1)
        tie_set = 1;
    c->tie_embeddings = tie_set ? tie : 0;
    long long bos = -1;
    if (cj_get_int(c->text, "bos_token_id", &bos) != 1 && cj_get_int(c->root, "bos_token_id", &bos) != 1) bos = -1;
    c->bos_id = (bos >= 0 && bos < c->vocab_size) ? (int)bos : -1;
    if (read_eos(c, err, errlen)) return -1;
    const json_t *rp = json_object_get(c->text, "rope_parameters");
    if (!rp || json_is_null(rp)) rp = json_object_get(c->text, "rope_scaling");
    if (cfg_rope(c, rp, &c->rope, err, errlen)) return -1;
    if (q_config_read(c->root, c->text, c->path, &c->quant, err, errlen)) return -1;
    return 0;
}

int cfg_parse(const char *text, size_t len, const char *what, ci_config *cfg, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->path, sizeof cfg->path, "%s", what);
    cfg->root = cj_parse(text, len, what, err, errlen);
    if (!cfg->root) return -1;
    if (parse_root(cfg, err, errlen)) { cfg_free(cfg); return -1; }
    return 0;
}

int cfg_load(const char *dir, ci_config *cfg, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->path, sizeof cfg->path, "%s/config.json", dir);
    cfg->root = cj_load_file(cfg->path, err, errlen);
    if (!cfg->root) return -1;
    if (parse_root(cfg, err, errlen)) { cfg_free(cfg); return -1; }
    return 0;
}

void cfg_free(ci_config *cfg) {
    if (cfg->root) json_decref(cfg->root);
    cfg->root = cfg->text = NULL;
}
