/* deepseek_v4_config.c — DeepSeek V4's layer kinds (attention and MLP) and rope tables from
 * config.json, in both dialects (deepseek_v4.c says which). */
#include "deepseek_v4_internal.h"
#include "../core/status.h"
#include "../io/json.h"
#include <string.h>

static const char *const type_name[] = { "sliding_attention", "compressed_sparse_attention",
                                         "heavily_compressed_attention" };

int v4_layer_types(const ci_config *c, const char *fam, int n, int csa_rate, int hca_rate, int *type, int *ratio,
                       char *err, size_t errlen) {
    const json_t *lt = json_object_get(c->text, "layer_types");
    const json_t *cr = json_object_get(c->text, "compress_ratios");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) < n)
            return ci_err(err, errlen, "%s: %s: 'layer_types' must be a list of %d strings", c->path, fam, n);
        for (int l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)l));
            int k = -1;
            for (int i = 0; i < 3 && t; i++) if (!strcmp(t, type_name[i])) k = i;
            if (k < 0)
                return ci_err(err, errlen, "%s: %s: layer_types[%d] is '%s', expected sliding_attention, "
                              "compressed_sparse_attention or heavily_compressed_attention", c->path, fam, l,
                              t ? t : "(not a string)");
            type[l] = k;
        }
    } else if (cr && !json_is_null(cr)) {
        /* the hub dialect: one ratio per layer (0, 4 or 128), MTP layers' entries after them */
        if (!json_is_array(cr) || (int)json_array_size(cr) < n)
            return ci_err(err, errlen, "%s: %s: 'compress_ratios' must be a list of at least %d integers", c->path, fam, n);
        for (int l = 0; l < n; l++) {
            const json_t *v = json_array_get(cr, (size_t)l);
            long long r = json_is_integer(v) ? json_integer_value(v) : -1;
            if (r == 0) type[l] = L_SLIDING;
            else if (r == 4) type[l] = L_CSA;
            else if (r == 128) type[l] = L_HCA;
            else
                return ci_err(err, errlen, "%s: %s: compress_ratios[%d] must be 0, 4 or 128", c->path, fam, l);
        }
    } else {   /* transformers' default: two HCA layers, then CSA / HCA alternating */
        for (int l = 0; l < n; l++) type[l] = l < 2 ? L_HCA : ((l - 2) % 2 ? L_CSA : L_HCA);
    }
    for (int l = 0; l < n; l++) ratio[l] = type[l] == L_CSA ? csa_rate : type[l] == L_HCA ? hca_rate : 0;
    return 0;
}

int v4_mlp_types(const ci_config *c, const char *fam, int n, int *is_hash, char *err, size_t errlen) {
    const json_t *mt = json_object_get(c->text, "mlp_layer_types");
    if (mt && !json_is_null(mt)) {
        if (!json_is_array(mt) || (int)json_array_size(mt) < n)
            return ci_err(err, errlen, "%s: %s: 'mlp_layer_types' must be a list of %d strings", c->path, fam, n);
        for (int l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(mt, (size_t)l));
            if (!t || (strcmp(t, "hash_moe") && strcmp(t, "moe")))
                return ci_err(err, errlen, "%s: %s: mlp_layer_types[%d] is '%s', expected 'hash_moe' or 'moe'", c->path,
                              fam, l, t ? t : "(not a string)");
            is_hash[l] = !strcmp(t, "hash_moe");
        }
        return 0;
    }
    long long nh = 3;
    if (cfg_int(c, "num_hash_layers", 0, 0, 1 << 12, &nh, err, errlen)) return -1;
    for (int l = 0; l < n; l++) is_hash[l] = l < nh;
    return 0;
}

/* The two rope tables: "main" (sliding layers) and "compress" (CSA/HCA), from a nested
 * rope_parameters {main, compress} or from rope_theta / compress_rope_theta / rope_scaling. */
int v4_ropes(ci_model *m, v4_model *d, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    const json_t *rp = json_object_get(c->text, "rope_parameters");
    const json_t *rs = json_object_get(c->text, "rope_scaling");
    const json_t *pm = rp && json_is_object(rp) ? json_object_get(rp, "main") : NULL;
    const json_t *pc = rp && json_is_object(rp) ? json_object_get(rp, "compress") : NULL;
    ci_rope_cfg mr, cr;
    double ctheta = 160000.0;
    if (cfg_num(c, "compress_rope_theta", 0, 1.0, 1e12, &ctheta, err, errlen)) return -1;
    if (pm && json_is_object(pm) && pc && json_is_object(pc)) {
        if (cfg_rope(c, pm, &mr, err, errlen) || cfg_rope(c, pc, &cr, err, errlen)) return -1;
    } else {
        if (cfg_rope(c, NULL, &mr, err, errlen)) return -1;   /* rope_theta, no scaling */
        const json_t *blk = rs && !json_is_null(rs) ? rs : (rp && !json_is_null(rp) ? rp : NULL);
        if (cfg_rope(c, blk, &cr, err, errlen)) return -1;
        cr.theta = ctheta;
        if (cr.type == CI_ROPE_YARN && cr.attention_factor < 0) cr.attention_factor = 1.0;
    }
    if (mr.type != CI_ROPE_DEFAULT)
        return ci_err(err, errlen, "%s: %s: rope_parameters.main must be the default rope (sliding layers are not scaled)",
                      c->path, fam);
    mr.partial_rotary_factor = cr.partial_rotary_factor = 1.0;   /* the tables cover the R rope dims */
    if (cr.type == CI_ROPE_YARN && cr.attention_factor < 0) cr.attention_factor = 1.0;
    if (rope_init(&d->rope_main, &mr, d->R, fam, err, errlen) || rope_init(&d->rope_comp, &cr, d->R, fam, err, errlen))
        return -1;
    return 0;
}

