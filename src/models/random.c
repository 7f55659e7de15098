/* random.c — `cinfer make-random`: a checkpoint with a family's exact tensor list and
 * random values, from a config alone. The family's own load() runs in record mode (no
 * checkpoint) and lists every tensor it would bind; we write those with matrices ~
 * N(0, 1/fan_in), norms 1 +- 0.1 and biases 0. Real-size models for benchmarks without
 * downloads. */
#include "model.h"
#include "cinfer.h"
#include "../core/status.h"
#include "../gen/sampler.h"
#include "../io/json.h"
#include "../io/st_write.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const w_spec *specs;
    ci_dtype dtype;
    uint64_t seed;
} fill_ctx;

static int fill(void *vctx, int i, void *buf, size_t nbytes) {
    fill_ctx *c = vctx;
    const w_spec *s = &c->specs[i];
    uint64_t rng = c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xD1B54A32D192ED03ull + 1;
    if (s->kind == W_KIND_INDEX) {   /* row r: cols distinct entries in [0, range) */
        int32_t *o = buf;
        int64_t cols = s->shape[s->ndim - 1], range = s->range > 0 ? s->range : 1;
        for (size_t k = 0; k < nbytes / sizeof(int32_t); k++)
            o[k] = (int32_t)(((int64_t)(k / (size_t)cols) * 7 + (int64_t)(k % (size_t)cols)) % range);
        return 0;
    }
    size_t n = nbytes / ci_dtype_size(c->dtype);
    double fan_in = s->ndim >= 2 ? (double)s->shape[s->ndim - 1] : 1.0;
    double sd = 1.0 / sqrt(fan_in);
    for (size_t k = 0; k < n; k += 2) {
        double u1 = smp_uniform(&rng), u2 = smp_uniform(&rng);
        double r = sqrt(-2.0 * log(u1 + 1e-300)), a = 2 * M_PI * u2;
        double v[2] = { r * cos(a), r * sin(a) };
        for (int j = 0; j < 2 && k + (size_t)j < n; j++) {
            float x;
            if (s->kind == W_KIND_NORM) x = (float)(1.0 + 0.1 * (2 * smp_uniform(&rng) - 1));
            else if (s->kind == W_KIND_BIAS) x = 0.0f;
            else x = (float)(v[j] * sd);
            if (c->dtype == CI_F32) ((float *)buf)[k + (size_t)j] = x;
            else ((uint16_t *)buf)[k + (size_t)j] = ci_f32_to_bf16(x);
        }
    }
    return 0;
}

int ci_make_random(const char *config_path, const char *out_dir, const char *dtype, uint64_t seed, int layers,
                   char *err, size_t errlen) {
    ci_dtype dt;
    if (!strcmp(dtype, "bf16")) dt = CI_BF16;
    else if (!strcmp(dtype, "f32")) dt = CI_F32;
    else return ci_err(err, errlen, "make-random: --dtype must be bf16 or f32, got '%s'", dtype);
    json_t *root = cj_load_file(config_path, err, errlen);
    if (!root) return -1;
    int rc = -1;
    ci_model *m = NULL;
    st_wdesc *d = NULL;
    char *text = NULL;
    if (!json_is_object(root)) { ci_err(err, errlen, "%s: expected a JSON object", config_path); goto done; }
    if (layers > 0) {
        json_t *tc = json_object_get(root, "text_config");
        json_t *tgt = (tc && json_is_object(tc)) ? tc : root;
        json_object_set_new(tgt, "num_hidden_layers", json_integer(layers));
        /* per-layer type lists are cut to the first `layers` entries (hybrid families) */
        static const char *lists[] = { "layer_types", "layers_block_type", "mlp_layer_types" };
        for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
            json_t *a = json_object_get(tgt, lists[i]);
            while (a && json_is_array(a) && json_array_size(a) > (size_t)layers) json_array_remove(a, json_array_size(a) - 1);
        }
        const char *pat = cj_get_str(tgt, "hybrid_override_pattern");
        if (pat && strlen(pat) > (size_t)layers) {
            char *cut = strndup(pat, (size_t)layers);
            if (cut) json_object_set_new(tgt, "hybrid_override_pattern", json_string(cut));
            free(cut);
        }
    }
    text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    m = calloc(1, sizeof *m);
    if (!text || !m) { ci_err(err, errlen, "make-random: out of memory"); goto done; }
    if (cfg_parse(text, strlen(text), config_path, &m->cfg, err, errlen)) goto done;
    m->family = m->cfg.family;
    if (m->family->missing || !m->family->ops) {
        ci_err(err, errlen, "%s: %s", m->family->name, m->family->missing ? m->family->missing : "not implemented yet");
        goto done;
    }
    if (m->family->ops->load(m, err, errlen)) goto done;   /* record mode: m->st == NULL */
    if (mkdir(out_dir, 0755) && errno != EEXIST) { ci_err(err, errlen, "%s: cannot create: %s", out_dir, strerror(errno)); goto done; }
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0) { if (f) fclose(f); ci_err(err, errlen, "%s: cannot write", path); goto done; }
    if (fclose(f)) { ci_err(err, errlen, "%s: cannot write", path); goto done; }
    d = calloc((size_t)m->n_specs, sizeof *d);
    if (!d) { ci_err(err, errlen, "make-random: out of memory"); goto done; }
    for (int i = 0; i < m->n_specs; i++) {
        d[i].name = m->specs[i].name;
        d[i].dtype = m->specs[i].kind == W_KIND_INDEX ? CI_I32 : dt;
        d[i].ndim = m->specs[i].ndim;
        for (int k = 0; k < d[i].ndim; k++) d[i].shape[k] = m->specs[i].shape[k];
    }
    fill_ctx fc = { m->specs, dt, seed };
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    rc = st_write_file(path, d, m->n_specs, fill, &fc, err, errlen);
done:
    if (m) {
        if (m->impl) m->family->ops->unload(m);
        free(m->specs);
        cfg_free(&m->cfg);
        free(m);
    }
    free(d);
    free(text);
    json_decref(root);
    return rc;
}
