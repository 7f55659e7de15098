/* random.c — `cinfer make-random`: a checkpoint with a family's exact tensor list and
 * random values, from a config alone. The family's own load() runs in record mode (no
 * checkpoint) and lists every tensor it would bind; we write those with matrices ~
 * N(0, 1/fan_in), norms 1 +- 0.1 and biases 0. Real-size models for benchmarks without
 * downloads. Tensors are filled on several threads at once (st_write_file_par); each tensor's
 * values come from its own RNG stream seeded by (seed, index), so the file does not depend
 * on the thread count. */
#include "random.h"
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

/* What each written tensor holds: a spec's values in the checkpoint dtype, or (--dtype fp8 /
 * fp8-fp4, DeepSeek's formats) a spec's fp8 codes / FP4 code pairs and their E8M0 scales. */
typedef enum { R_VALUES, R_FP8, R_FP8_SCALE, R_FP4, R_FP4_SCALE } r_role;

typedef struct {
    const w_spec *specs;
    const int *spec_of;        /* [written tensor] -> spec */
    const r_role *role;        /* [written tensor] */
    ci_dtype dtype;
    uint64_t seed;
} fill_ctx;

/* f32 -> F8_E4M3 (fn: no infinities, max 448), round to nearest even */
static uint8_t to_e4m3(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (isnan(a)) return 0x7f;
    if (a >= 448.0f) return sign | 0x7e;
    int e;
    frexpf(a, &e);                       /* a = f · 2^e, f in [0.5, 1) */
    int E = e - 1 + 7;
    if (E <= 0) {                         /* subnormal: m/8 · 2^-6 */
        int m = (int)lrintf(a / 0x1p-9f);
        return sign | (uint8_t)(m >= 8 ? 0x08 : m);
    }
    int m = (int)lrintf((a / ldexpf(1.0f, e - 1) - 1.0f) * 8.0f);
    if (m == 8) { m = 0; E++; }
    if (E > 15 || (E == 15 && m > 6)) return sign | 0x7e;
    return sign | (uint8_t)(E << 3) | (uint8_t)m;
}

/* f32 -> the nearest E2M1 code (sign bit 3) */
static uint8_t to_e2m1(float x) {
    static const float mag[8] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6 };
    float a = fabsf(x);
    int best = 0;
    for (int k = 1; k < 8; k++) if (fabsf(a - mag[k]) < fabsf(a - mag[best])) best = k;
    return (uint8_t)(best | (signbit(x) ? 8 : 0));
}

/* The power-of-two scale exponent for values ~ N(0, sd²) coded with max magnitude qmax. */
static int scale_exp(double sd, double qmax) { return (int)ceil(log2(4.0 * sd / qmax)); }

/* Fills written tensor i of a quantized role: fp8 / FP4 codes or their block scales. */
static int fill_quant(const fill_ctx *c, int i, void *buf, size_t nbytes) {
    const w_spec *s = &c->specs[c->spec_of[i]];
    uint64_t rng = c->seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xD1B54A32D192ED03ull + 1;
    double sd = 1.0 / sqrt((double)s->shape[s->ndim - 1]);
    uint8_t *o = buf;
    switch (c->role[i]) {
    case R_FP8_SCALE: memset(o, 127 + scale_exp(sd, 448.0), nbytes); return 0;
    case R_FP4_SCALE: memset(o, 127 + scale_exp(sd, 6.0), nbytes); return 0;
    case R_FP8: case R_FP4: {
        int fp8 = c->role[i] == R_FP8;
        float inv = (float)ldexp(1.0, -scale_exp(sd, fp8 ? 448.0 : 6.0));
        size_t n = fp8 ? nbytes : nbytes * 2;
        for (size_t k = 0; k < n; k += 2) {
            double u1 = smp_uniform(&rng), u2 = smp_uniform(&rng);
            double r = sqrt(-2.0 * log(u1 + 1e-300)), a = 2 * M_PI * u2;
            float v0 = (float)(r * cos(a) * sd) * inv, v1 = (float)(r * sin(a) * sd) * inv;
            if (fp8) {
                o[k] = to_e4m3(v0);
                if (k + 1 < n) o[k + 1] = to_e4m3(v1);
            } else {
                o[k / 2] = (uint8_t)(to_e2m1(v0) | (to_e2m1(v1) << 4));
            }
        }
        return 0;
    }
    default: return -1;
    }
}

/* Fills written tensor i (thread-safe: reads only the context). */
static int fill(void *vctx, int i, void *buf, size_t nbytes) {
    fill_ctx *c = vctx;
    if (c->role[i] != R_VALUES) return fill_quant(c, i, buf, nbytes);
    const w_spec *s = &c->specs[c->spec_of[i]];
    i = c->spec_of[i];
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

/* Which written form a spec takes under --dtype fp8 (quant 1) / fp8-fp4 (quant 2): DeepSeek's
 * checkpoints keep embeddings, the head, routers and the V4 compressor / indexer projections
 * in bf16; every other 2-D matrix is fp8, and with fp8-fp4 the routed experts are FP4. */
static int quant_role(const w_spec *sp, int quant) {
    size_t n = strlen(sp->name);
    if (sp->kind != W_KIND_MATRIX || sp->ndim != 2 || n < 8 || strcmp(sp->name + n - 7, ".weight")) return R_VALUES;
    if (strstr(sp->name, "embed") || strstr(sp->name, "lm_head") || strstr(sp->name, "compressor") ||
        strstr(sp->name, ".gate.weight") || strstr(sp->name, "router"))
        return R_VALUES;
    int expert = strstr(sp->name, ".experts.") && !strstr(sp->name, "shared_experts");
    if (quant == 2 && expert && sp->shape[1] % 32 == 0) return R_FP4;
    return R_FP8;
}

/* The public entry: every online CPU fills. */
int ci_make_random(const char *config_path, const char *out_dir, const char *dtype, uint64_t seed, int layers,
                   char *err, size_t errlen) {
    return ci_make_random_threads(config_path, out_dir, dtype, seed, layers, 0, err, errlen);
}

/* See random.h: the config's tensor list (record-mode load), config.json and the filled
 * model.safetensors. */
int ci_make_random_threads(const char *config_path, const char *out_dir, const char *dtype, uint64_t seed, int layers,
                           int n_threads, char *err, size_t errlen) {
    ci_dtype dt;
    int quant = 0;   /* 1: fp8 matrices, 2: fp8 matrices + FP4 routed experts */
    if (!strcmp(dtype, "bf16")) dt = CI_BF16;
    else if (!strcmp(dtype, "f32")) dt = CI_F32;
    else if (!strcmp(dtype, "fp8")) { dt = CI_BF16; quant = 1; }
    else if (!strcmp(dtype, "fp8-fp4")) { dt = CI_BF16; quant = 2; }
    else return ci_err(err, errlen, "make-random: --dtype must be bf16, f32, fp8 or fp8-fp4, got '%s'", dtype);
    json_t *root = cj_load_file(config_path, err, errlen);
    if (!root) return -1;
    int rc = -1;
    ci_model *m = NULL;
    st_wdesc *d = NULL;
    char *text = NULL, **names = NULL;
    int *spec_of = NULL, n_names = 0;
    r_role *role = NULL;
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
    text = cj_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);   /* Infinity / NaN bare, as Python writes them */
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
    int cap = 2 * m->n_specs + 1, nd = 0;   /* a quantized matrix adds its scales */
    d = calloc((size_t)cap, sizeof *d);
    spec_of = calloc((size_t)cap, sizeof *spec_of);
    role = calloc((size_t)cap, sizeof *role);
    names = calloc((size_t)cap, sizeof *names);
    if (!d || !spec_of || !role || !names) { ci_err(err, errlen, "make-random: out of memory"); goto done; }
    n_names = cap;
    for (int i = 0; i < m->n_specs; i++) {
        const w_spec *sp = &m->specs[i];
        int q = quant ? quant_role(sp, quant) : R_VALUES;
        d[nd].name = sp->name;
        d[nd].dtype = sp->kind == W_KIND_INDEX ? CI_I32 : dt;
        d[nd].ndim = sp->ndim;
        for (int k = 0; k < sp->ndim; k++) d[nd].shape[k] = sp->shape[k];
        spec_of[nd] = i;
        role[nd] = (r_role)q;
        if (q == R_VALUES) { nd++; continue; }
        int64_t rows = sp->shape[0], cols = sp->shape[1];
        size_t bl = strlen(sp->name) - strlen(".weight");
        names[nd] = malloc(bl + 32);
        if (!names[nd]) { ci_err(err, errlen, "make-random: out of memory"); goto done; }
        if (q == R_FP8) {
            d[nd].dtype = CI_F8_E4M3;
            snprintf(names[nd], bl + 32, "%.*s.weight_scale_inv", (int)bl, sp->name);
            nd++;
            d[nd].shape[0] = (rows + 127) / 128;
            d[nd].shape[1] = (cols + 127) / 128;
            role[nd] = R_FP8_SCALE;
        } else {
            d[nd].dtype = CI_I8;
            d[nd].shape[1] = cols / 2;
            snprintf(names[nd], bl + 32, "%.*s.scale", (int)bl, sp->name);
            nd++;
            d[nd].shape[0] = rows;
            d[nd].shape[1] = cols / 32;
            role[nd] = R_FP4_SCALE;
        }
        d[nd].name = names[nd - 1];
        d[nd].dtype = CI_F8_E8M0;
        d[nd].ndim = 2;
        spec_of[nd] = i;
        nd++;
    }
    fill_ctx fc = { m->specs, spec_of, role, dt, seed };
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    rc = st_write_file_par(path, d, nd, fill, &fc, n_threads, err, errlen);
done:
    if (m) {
        if (m->impl) m->family->ops->unload(m);
        free(m->specs);
        cfg_free(&m->cfg);
        free(m);
    }
    if (names)
        for (int i = 0; i < n_names; i++) free(names[i]);
    free(names);
    free(spec_of);
    free(role);
    free(d);
    free(text);
    json_decref(root);
    return rc;
}
