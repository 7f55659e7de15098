/* weights.c — see weights.h. */
#include "weights.h"
#include "../core/status.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int w_init(w_binder *b, st_set *st, const char *family, long long n_layers) {
    memset(b, 0, sizeof *b);
    b->st = st;
    b->family = family;
    b->n_layers = n_layers;
    if (st) {
        b->claimed = calloc((size_t)st_count(st) + 1, 1);
        if (!b->claimed) return ci_err(b->err, sizeof b->err, "%s: out of memory", family);
    }
    return 0;
}

static int fail(w_binder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(w_binder *b, const char *fmt, ...) {
    if (b->failed) return -1;
    b->failed = 1;
    int o = snprintf(b->err, sizeof b->err, "%s: ", b->family);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err + o, sizeof b->err - (size_t)o, fmt, ap);
    va_end(ap);
    return -1;
}

static int record(w_binder *b, const char *name, int ndim, const int64_t *shape, w_kind kind) {
    if (b->n_specs == b->cap_specs) {
        int nc = b->cap_specs ? b->cap_specs * 2 : 256;
        w_spec *ns = realloc(b->specs, (size_t)nc * sizeof *ns);
        if (!ns) return fail(b, "out of memory");
        b->specs = ns;
        b->cap_specs = nc;
    }
    w_spec *s = &b->specs[b->n_specs++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim;
    for (int i = 0; i < ndim; i++) s->shape[i] = shape[i];
    s->kind = kind;
    return 0;
}

/* Looks a tensor up, checks its shape and marks it claimed. NULL when absent. */
static const ci_tensor *lookup(w_binder *b, const char *name, int ndim, const int64_t *shape, int *bad) {
    *bad = 0;
    int i = st_index_of(b->st, name);
    if (i < 0) return NULL;
    const ci_tensor *t = st_get(b->st, i);
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == shape[d];
    if (!ok) {
        char want[128], got[128];
        fail(b, "tensor '%s' in %s has shape %s, expected %s", name, st_file_of(b->st, i),
             ci_shape_str(t->shape, t->ndim, got, sizeof got), ci_shape_str(shape, ndim, want, sizeof want));
        *bad = 1;
        return NULL;
    }
    b->claimed[i] = 1;
    return t;
}

static void account(w_binder *b, const ci_tensor *t) {
    b->n_params += ci_tensor_numel(t);
    b->bytes_by_dtype[t->dtype] += t->nbytes;
}

static int keep(w_binder *b, float *p);
static ci_mat stacked_view(const ci_tensor *t, int64_t e, int64_t row0, int64_t rows);
static int stacked_dtype_ok(w_binder *b, const ci_tensor *t);

void w_set_quant(w_binder *b, const q_config *q) { b->quant = q; }

/* ---- MLX-quantized modules ---------------------------------------------------------------
 *
 * "<base>.weight" U32 [lead..., rows, cols*bits/32], "<base>.scales" [lead..., rows,
 * cols/group], "<base>.biases" (affine). lead is E for stacked experts / MultiLinear heads
 * (n = E views), none for a plain module (n = 1 view). */
static int bind_quant(w_binder *b, ci_mat *outs, int64_t E, int64_t rows, int64_t cols, const char *base, int embed,
                      int stored_t) {
    char wn[512], sn[512], bn[512], why[1024], want_s[64], got_s[64];
    snprintf(wn, sizeof wn, "%s.weight", base);
    snprintf(sn, sizeof sn, "%s.scales", base);
    snprintf(bn, sizeof bn, "%s.biases", base);
    int wi = st_index_of(b->st, wn), si = st_index_of(b->st, sn), bi = st_index_of(b->st, bn);
    if (wi < 0) return fail(b, "required tensor '%s' is missing (its scales '%s' are present)", wn, sn);
    const ci_tensor *w = st_get(b->st, wi), *sc = st_get(b->st, si), *bs = bi >= 0 ? st_get(b->st, bi) : NULL;
    q_params p;
    if (q_infer(w, sc, bs, cols, &p, why, sizeof why)) return fail(b, "%s", why);
    if (b->quant && b->quant->present) {
        q_params want;
        q_mod md = q_config_module(b->quant, base, &want);
        if (md == Q_MOD_OFF)
            return fail(b, "tensor '%s' is quantized but config.json %s.\"%s\" is false (module not quantized)", wn,
                        b->quant->key, base);
        if (want.mode != p.mode || want.bits != p.bits || want.group != p.group)
            return fail(b, "tensor '%s' is packed as %s but config.json %s%s%s says %s", wn,
                        q_params_str(&p, got_s, sizeof got_s), b->quant->key, md == Q_MOD_PARAMS ? "." : "",
                        md == Q_MOD_PARAMS ? base : "", q_params_str(&want, want_s, sizeof want_s));
    }
    int nd = E ? 3 : 2, bad;
    int64_t shw[3] = { E, rows, cols * p.bits / 32 }, shs[3] = { E, rows, cols / p.group };
    if (!E) { shw[0] = rows; shw[1] = cols * p.bits / 32; shs[0] = rows; shs[1] = cols / p.group; }
    if (!lookup(b, wn, nd, shw, &bad) || !lookup(b, sn, nd, shs, &bad) || (bs && !lookup(b, bn, nd, shs, &bad)))
        return -1;   /* lookup recorded the shape error */
    ci_qdesc *d = calloc(1, sizeof *d);
    if (!d || keep(b, (float *)(void *)d)) return fail(b, "out of memory for '%s'", wn);
    d->mode = p.mode;
    d->bits = p.bits;
    d->group = p.group;
    d->scale_dtype = p.mode == CI_Q_AFFINE ? sc->dtype : CI_F8_E8M0;
    d->scales = sc->data;
    d->biases = bs ? bs->data : NULL;
    d->stored_t = stored_t;
    d->grid_rows = (E ? E : 1) * rows;
    size_t row_bytes = (size_t)(cols * p.bits / 8);
    int64_t n = E ? E : 1;
    for (int64_t e = 0; e < n; e++) {
        ci_mat *m = &outs[e];
        memset(m, 0, sizeof *m);
        m->data = (const char *)w->data + (size_t)(e * rows) * row_bytes;
        m->dtype = CI_U32;
        m->rows = rows;
        m->cols = cols;
        m->scale = d;
        m->scale_row0 = e * rows;
    }
    size_t total = w->nbytes + sc->nbytes + (bs ? bs->nbytes : 0);
    b->n_params += n * rows * cols;
    b->bytes_by_dtype[w->dtype] += w->nbytes;
    b->bytes_by_dtype[sc->dtype] += sc->nbytes + (bs ? bs->nbytes : 0);
    b->decode_bytes += embed ? total / (size_t)rows : total;
    return 1;
}

/* DeepSeek V4's FP4 weights (its routed experts): "<base>.weight" I8 (or U8) [rows, cols/2],
 * two E2M1 codes per byte, element 2j in the low nibble, and "<base>.scale" F8_E8M0 (or U8)
 * [rows, cols/32], one power-of-two scale per 32 inputs. That is exactly MLX's mxfp4 packing
 * (a little-endian stream of 4-bit codes, group 32, E8M0 scales), so it is bound as an mxfp4
 * view and computed by the same kernels. */
static int bind_fp4(w_binder *b, ci_mat *out, int64_t rows, int64_t cols, const char *base, int embed) {
    char wn[512], sn[512];
    snprintf(wn, sizeof wn, "%s.weight", base);
    snprintf(sn, sizeof sn, "%s.scale", base);
    if (cols % 32)
        return fail(b, "tensor '%s' is FP4 (I8 codes) but its %lld inputs are not a multiple of 32", wn, (long long)cols);
    int bad;
    int64_t shw[2] = { rows, cols / 2 }, shs[2] = { rows, cols / 32 };
    const ci_tensor *w = lookup(b, wn, 2, shw, &bad);
    if (bad) return -1;
    const ci_tensor *s = lookup(b, sn, 2, shs, &bad);
    if (bad) return -1;
    if (!s) return fail(b, "tensor '%s' is %s (FP4 codes) but '%s' (E8M0 scales [%lld, %lld]) is missing", wn,
                        ci_dtype_name(w->dtype), sn, (long long)rows, (long long)(cols / 32));
    if (s->dtype != CI_F8_E8M0 && s->dtype != CI_U8)
        return fail(b, "tensor '%s' has dtype %s, expected F8_E8M0 (or U8) scales for FP4 '%s'", sn,
                    ci_dtype_name(s->dtype), wn);
    ci_qdesc *d = calloc(1, sizeof *d);
    if (!d || keep(b, (float *)(void *)d)) return fail(b, "out of memory for '%s'", wn);
    d->mode = CI_Q_MXFP4;
    d->bits = 4;
    d->group = 32;
    d->scale_dtype = CI_F8_E8M0;
    d->scales = s->data;
    d->grid_rows = rows;
    out->data = w->data;
    out->dtype = CI_U32;
    out->scale = d;
    out->scale_row0 = 0;
    b->n_params += rows * cols;
    b->bytes_by_dtype[w->dtype] += w->nbytes;
    b->bytes_by_dtype[s->dtype] += s->nbytes;
    size_t total = w->nbytes + s->nbytes;
    b->decode_bytes += embed ? total / (size_t)rows : total;
    return 1;
}

static int bind_mat_into(w_binder *b, ci_mat *out, w_need need, int64_t rows, int64_t cols, const char *base, int embed) {
    memset(out, 0, sizeof *out);
    if (b->failed) return -1;
    char name[512];
    snprintf(name, sizeof name, "%s.weight", base);
    int64_t shape[2] = { rows, cols };
    out->rows = rows;
    out->cols = cols;
    if (!b->st) return record(b, name, 2, shape, embed ? W_KIND_EMBED : W_KIND_MATRIX) ? -1 : 1;
    int bad;
    char qname[512];
    snprintf(qname, sizeof qname, "%s.scales", base);
    if (st_find(b->st, qname)) return bind_quant(b, out, 0, rows, cols, base, embed, 0);
    const ci_tensor *t0 = st_find(b->st, name);
    if (t0 && (t0->dtype == CI_I8 || t0->dtype == CI_U8)) return bind_fp4(b, out, rows, cols, base, embed);
    const ci_tensor *t = lookup(b, name, 2, shape, &bad);
    if (bad) return -1;
    if (!t) {
        if (need == W_REQUIRED) return fail(b, "required tensor '%s' is missing from the checkpoint", name);
        return 0;
    }
    if (b->quant && b->quant->present) {
        q_params want;
        char ws[64];
        if (q_config_module(b->quant, base, &want) == Q_MOD_PARAMS)
            return fail(b, "config.json %s.\"%s\" quantizes this module (%s) but '%s' is missing", b->quant->key, base,
                        q_params_str(&want, ws, sizeof ws), qname);
    }
    out->data = t->data;
    out->dtype = t->dtype;
    account(b, t);
    switch (t->dtype) {
    case CI_F32: case CI_F16: case CI_BF16: break;
    case CI_F8_E4M3: {
        /* DeepSeek fp8: per 128x128 block scales, partial edge blocks. Hugging Face names
         * them "<base>.weight_scale_inv"; DeepSeek V4's original checkpoint "<base>.scale". */
        char sname[512];
        snprintf(sname, sizeof sname, "%s.weight_scale_inv", base);
        int64_t sshape[2] = { (rows + 127) / 128, (cols + 127) / 128 };
        const ci_tensor *s = lookup(b, sname, 2, sshape, &bad);
        if (bad) return -1;
        if (!s) {
            char alt[512];
            snprintf(alt, sizeof alt, "%s.scale", base);
            s = lookup(b, alt, 2, sshape, &bad);
            if (bad) return -1;
            if (!s) return fail(b, "tensor '%s' is F8_E4M3 but its block scales %lldx%lld ('%s' or '%s') are missing",
                                name, (long long)sshape[0], (long long)sshape[1], sname, alt);
            snprintf(sname, sizeof sname, "%s", alt);
        }
        if (s->dtype != CI_F32 && s->dtype != CI_BF16 && s->dtype != CI_F8_E8M0)
            return fail(b, "tensor '%s' has dtype %s, expected F32, BF16 or F8_E8M0", sname, ci_dtype_name(s->dtype));
        out->scale = s->data;
        out->scale_dtype = s->dtype;
        out->block = 128;
        account(b, s);
        if (!embed) b->decode_bytes += s->nbytes;
        break;
    }
    case CI_U32:
        return fail(b, "tensor '%s' is U32 (MLX packed codes) but '%s' is missing", name, qname);
    default:
        return fail(b, "tensor '%s' has dtype %s, expected F32, F16, BF16 or F8_E4M3", name, ci_dtype_name(t->dtype));
    }
    b->decode_bytes += embed ? (size_t)cols * ci_dtype_size(t->dtype) : t->nbytes;
    return 1;
}

/* A failed bind leaves out zeroed, never half set (a U32 dtype without its ci_qdesc, F8
 * without scales): loaders look at what they bound (dtype, rows) before w_finish. */
static int bind_mat(w_binder *b, ci_mat *out, w_need need, int64_t rows, int64_t cols, const char *base, int embed) {
    int r = bind_mat_into(b, out, need, rows, cols, base, embed);
    if (r < 0) memset(out, 0, sizeof *out);
    return r;
}

int w_multilinear(w_binder *b, ci_mat *heads, int n_heads, int64_t out_dims, int64_t in_dims, int for_xw,
                  const char *fmt, ...) {
    char base[480], name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, sizeof base, fmt, ap);
    va_end(ap);
    for (int h = 0; h < n_heads; h++) memset(&heads[h], 0, sizeof heads[h]);
    if (b->failed) return -1;
    snprintf(name, sizeof name, "%s.weight", base);
    int64_t shape[3] = { n_heads, out_dims, in_dims };
    if (!b->st) return record(b, name, 3, shape, W_KIND_MATRIX) ? -1 : 1;
    char sname[512];
    snprintf(sname, sizeof sname, "%s.scales", base);
    if (st_find(b->st, sname)) {
        if (bind_quant(b, heads, n_heads, out_dims, in_dims, base, 0, for_xw) < 0) return -1;
        if (for_xw)
            for (int h = 0; h < n_heads; h++) { heads[h].rows = in_dims; heads[h].cols = out_dims; }
        return 1;
    }
    int bad;
    const ci_tensor *t = lookup(b, name, 3, shape, &bad);
    if (bad) return -1;
    if (!t) return fail(b, "required tensor '%s' is missing from the checkpoint", name);
    if (!stacked_dtype_ok(b, t)) return -1;
    if (for_xw)
        return fail(b, "tensor '%s' is an unquantized MultiLinear read transposed (x·W): not supported yet", name);
    for (int h = 0; h < n_heads; h++) heads[h] = stacked_view(t, h, 0, out_dims);
    account(b, t);
    b->decode_bytes += t->nbytes;
    return 1;
}

int w_check_experts(const st_set *st, const char *cfg_path, const char *family, const char *key, long long n_experts,
                    long long n_layers, int mats, char *err, size_t errlen) {
    if (!st) return 0;
    unsigned long long need = (unsigned long long)n_experts * (unsigned long long)n_layers * (unsigned long long)mats;
    size_t have = st_total_bytes(st);
    if (need > have)
        return ci_err(err, errlen, "%s: %s: '%s' = %lld experts in %lld MoE layers need %llu expert matrices, more than the "
                      "checkpoint's %zu bytes of tensors hold", cfg_path, family, key, n_experts, n_layers, need, have);
    return 0;
}

ci_mat w_mat_rows(const ci_mat *W, int64_t r0, int64_t n) {
    ci_mat v = *W;
    v.rows = n;
    if (!W->data) return v;
    if (W->dtype == CI_U32) {
        const ci_qdesc *d = W->scale;
        v.data = (const char *)W->data + (size_t)r0 * (size_t)(W->cols * d->bits / 8);
        v.scale_row0 = W->scale_row0 + r0;
    } else {
        v.data = (const char *)W->data + (size_t)r0 * (size_t)W->cols * ci_dtype_size(W->dtype);
        if (W->dtype == CI_F8_E4M3) v.scale_row0 = W->scale_row0 + r0;
    }
    return v;
}

size_t w_mat_bytes(const ci_mat *W) {
    size_t n = (size_t)W->rows * (size_t)W->cols;
    if (W->dtype != CI_U32) return n * ci_dtype_size(W->dtype);
    const ci_qdesc *d = W->scale;
    size_t groups = n / (size_t)d->group, ss = d->mode == CI_Q_AFFINE ? ci_dtype_size(d->scale_dtype) : 1;
    return n * (size_t)d->bits / 8 + groups * ss * (d->biases ? 2 : 1);
}

int w_mat(w_binder *b, ci_mat *out, w_need need, int64_t rows, int64_t cols, const char *fmt, ...) {
    char base[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, sizeof base, fmt, ap);
    va_end(ap);
    return bind_mat(b, out, need, rows, cols, base, 0);
}

int w_embed(w_binder *b, ci_mat *out, int64_t rows, int64_t cols, const char *fmt, ...) {
    char base[480];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, sizeof base, fmt, ap);
    va_end(ap);
    return bind_mat(b, out, W_REQUIRED, rows, cols, base, 1);
}

static int keep(w_binder *b, float *p) {
    if (b->n_owned == b->cap_owned) {
        int nc = b->cap_owned ? b->cap_owned * 2 : 64;
        float **no = realloc(b->owned, (size_t)nc * sizeof *no);
        if (!no) { free(p); return fail(b, "out of memory"); }
        b->owned = no;
        b->cap_owned = nc;
    }
    b->owned[b->n_owned++] = p;
    return 0;
}

static int bind_arr(w_binder *b, float **out, w_need need, int ndim, const int64_t *shape, float add, w_kind kind,
                    const char *name) {
    *out = NULL;
    if (b->failed) return -1;
    int64_t len = 1;
    for (int i = 0; i < ndim; i++) len *= shape[i];
    const ci_tensor *t = NULL;
    if (!b->st) {
        if (record(b, name, ndim, shape, kind)) return -1;
    } else {
        int bad;
        t = lookup(b, name, ndim, shape, &bad);
        if (bad) return -1;
        if (!t) {
            if (need == W_REQUIRED) return fail(b, "required tensor '%s' is missing from the checkpoint", name);
            return 0;
        }
        if (t->dtype != CI_F32 && t->dtype != CI_F16 && t->dtype != CI_BF16)
            return fail(b, "tensor '%s' has dtype %s, expected F32, F16 or BF16", name, ci_dtype_name(t->dtype));
        account(b, t);
        b->decode_bytes += t->nbytes;
    }
    float *v = malloc((size_t)(len > 0 ? len : 1) * sizeof *v);
    if (!v) return fail(b, "out of memory for '%s'", name);
    for (int64_t i = 0; i < len; i++) {
        float x = 1.0f;  /* record mode: a neutral value */
        if (t) {
            if (t->dtype == CI_F32) memcpy(&x, (const char *)t->data + 4 * i, 4);
            else {
                uint16_t h;
                memcpy(&h, (const char *)t->data + 2 * i, 2);
                x = t->dtype == CI_BF16 ? ci_bf16_to_f32(h) : ci_f16_to_f32(h);
            }
        }
        v[i] = x + add;
    }
    if (keep(b, v)) return -1;
    *out = v;
    return 1;
}

int w_vec(w_binder *b, float **out, w_need need, int64_t len, float add, w_kind kind, const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[1] = { len };
    return bind_arr(b, out, need, 1, shape, add, kind, name);
}

int w_arr(w_binder *b, float **out, w_need need, int ndim, const int64_t *shape, const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return bind_arr(b, out, need, ndim, shape, 0.0f, ndim == 1 ? W_KIND_BIAS : W_KIND_MATRIX, name);
}

int w_itable(w_binder *b, int32_t **out, int64_t rows, int64_t cols, int64_t lo, int64_t hi, const char *fmt, ...) {
    *out = NULL;
    if (b->failed) return -1;
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[2] = { rows, cols };
    const ci_tensor *t = NULL;
    if (!b->st) {
        if (record(b, name, 2, shape, W_KIND_INDEX)) return -1;
        b->specs[b->n_specs - 1].range = hi;
    } else {
        int bad;
        t = lookup(b, name, 2, shape, &bad);
        if (bad) return -1;
        if (!t) return fail(b, "required tensor '%s' is missing from the checkpoint", name);
        if (t->dtype != CI_I32 && t->dtype != CI_I64)
            return fail(b, "tensor '%s' has dtype %s, expected I32 or I64", name, ci_dtype_name(t->dtype));
        account(b, t);
    }
    size_t n = (size_t)(rows * cols);
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return fail(b, "out of memory for '%s'", name);
    if (keep(b, (float *)(void *)v)) return -1;
    for (size_t i = 0; i < n; i++) {
        int64_t x = (int64_t)((int64_t)i % (cols > 0 ? cols : 1)) % (hi > lo ? hi - lo : 1) + lo;  /* record mode */
        if (t) {
            if (t->dtype == CI_I32) { int32_t y; memcpy(&y, (const char *)t->data + 4 * i, 4); x = y; }
            else memcpy(&x, (const char *)t->data + 8 * i, 8);
            if (x < lo || x >= hi) {
                *out = NULL;
                return fail(b, "tensor '%s' entry [%lld, %lld] is %lld, expected a value in [%lld, %lld)", name,
                            (long long)(i / (size_t)cols), (long long)(i % (size_t)cols), (long long)x, (long long)lo,
                            (long long)hi);
            }
        }
        v[i] = (int32_t)x;
    }
    *out = v;
    return 1;
}

/* A view of matrix e of a stacked [E, rows, cols] tensor, rows starting at row0. */
static ci_mat stacked_view(const ci_tensor *t, int64_t e, int64_t row0, int64_t rows) {
    ci_mat m = {0};
    size_t es = ci_dtype_size(t->dtype);
    m.dtype = t->dtype;
    m.rows = rows;
    m.cols = t->shape[2];
    m.data = (const char *)t->data + ((size_t)e * (size_t)t->shape[1] + (size_t)row0) * (size_t)t->shape[2] * es;
    return m;
}

static int stacked_dtype_ok(w_binder *b, const ci_tensor *t) {
    if (t->dtype == CI_F32 || t->dtype == CI_F16 || t->dtype == CI_BF16) return 1;
    fail(b, "tensor '%s' has dtype %s, expected F32, F16 or BF16", t->name, ci_dtype_name(t->dtype));
    return 0;
}

int w_experts(w_binder *b, ci_mat *gate, ci_mat *up, ci_mat *down, int n_exp, int top_k, int64_t I, int64_t H,
              const char *prefix) {
    if (b->failed) return -1;
    char n1[512], n2[512], n3[512];
    if (b->st) {
        /* fused: experts.gate_up_proj + experts.down_proj */
        snprintf(n1, sizeof n1, "%s.experts.gate_up_proj", prefix);
        snprintf(n2, sizeof n2, "%s.experts.down_proj", prefix);
        if (st_find(b->st, n1) || st_find(b->st, n2)) {
            int bad;
            int64_t s1[3] = { n_exp, 2 * I, H }, s2[3] = { n_exp, H, I };
            const ci_tensor *gu = lookup(b, n1, 3, s1, &bad);
            if (bad) return -1;
            if (!gu) return fail(b, "required tensor '%s' is missing (its pair '%s' is present)", n1, n2);
            const ci_tensor *dn = lookup(b, n2, 3, s2, &bad);
            if (bad) return -1;
            if (!dn) return fail(b, "required tensor '%s' is missing (its pair '%s' is present)", n2, n1);
            if (!stacked_dtype_ok(b, gu) || !stacked_dtype_ok(b, dn)) return -1;
            for (int e = 0; e < n_exp; e++) {
                gate[e] = stacked_view(gu, e, 0, I);
                up[e] = stacked_view(gu, e, I, I);
                down[e] = stacked_view(dn, e, 0, H);
            }
            account(b, gu);
            account(b, dn);
            b->decode_bytes += (gu->nbytes + dn->nbytes) / (size_t)n_exp * (size_t)top_k;
            return 1;
        }
        /* mlx-stacked: switch_mlp.{gate,up,down}_proj.weight */
        snprintf(n1, sizeof n1, "%s.switch_mlp.gate_proj.weight", prefix);
        if (st_find(b->st, n1)) {
            const char *parts[3] = { "gate_proj", "up_proj", "down_proj" };
            ci_mat *outs[3] = { gate, up, down };
            for (int p = 0; p < 3; p++) {
                snprintf(n3, sizeof n3, "%s.switch_mlp.%s.weight", prefix, parts[p]);
                int64_t sh[3] = { n_exp, p < 2 ? I : H, p < 2 ? H : I };
                char qb[480], qs[512];
                snprintf(qb, sizeof qb, "%s.switch_mlp.%s", prefix, parts[p]);
                snprintf(qs, sizeof qs, "%s.scales", qb);
                if (st_find(b->st, qs)) {   /* MLX QuantizedSwitchLinear: one packed stack */
                    size_t before = b->decode_bytes;
                    if (bind_quant(b, outs[p], n_exp, sh[1], sh[2], qb, 0, 0) < 0) return -1;
                    b->decode_bytes = before + (b->decode_bytes - before) / (size_t)n_exp * (size_t)top_k;
                    continue;
                }
                int bad;
                const ci_tensor *t = lookup(b, n3, 3, sh, &bad);
                if (bad) return -1;
                if (!t) return fail(b, "required tensor '%s' is missing", n3);
                if (!stacked_dtype_ok(b, t)) return -1;
                for (int e = 0; e < n_exp; e++) outs[p][e] = stacked_view(t, e, 0, sh[1]);
                account(b, t);
                b->decode_bytes += t->nbytes / (size_t)n_exp * (size_t)top_k;
            }
            return 1;
        }
    }
    /* per-expert (and record mode) */
    return w_experts_each(b, gate, up, down, n_exp, top_k, I, H, prefix, "gate_proj", "up_proj", "down_proj");
}

int w_experts_each(w_binder *b, ci_mat *gate, ci_mat *up, ci_mat *down, int n_exp, int top_k, int64_t I, int64_t H,
                   const char *prefix, const char *g, const char *u, const char *d) {
    if (b->failed) return -1;
    size_t before = b->decode_bytes;
    for (int e = 0; e < n_exp; e++) {
        w_mat(b, &gate[e], W_REQUIRED, I, H, "%s.experts.%d.%s", prefix, e, g);
        w_mat(b, &up[e], W_REQUIRED, I, H, "%s.experts.%d.%s", prefix, e, u);
        w_mat(b, &down[e], W_REQUIRED, H, I, "%s.experts.%d.%s", prefix, e, d);
    }
    if (b->failed) return -1;
    b->decode_bytes = before + (b->decode_bytes - before) / (size_t)n_exp * (size_t)top_k;
    return 1;
}

int w_stacked(w_binder *b, ci_mat *outs, w_need need, int n, int active, int64_t rows, int64_t cols, const char *fmt,
              ...) {
    char base[480], name[512], sname[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, sizeof base, fmt, ap);
    va_end(ap);
    for (int e = 0; e < n; e++) memset(&outs[e], 0, sizeof outs[e]);
    if (b->failed) return -1;
    snprintf(name, sizeof name, "%s.weight", base);
    int64_t shape[3] = { n, rows, cols };
    if (!b->st) return record(b, name, 3, shape, W_KIND_MATRIX) ? -1 : 1;
    snprintf(sname, sizeof sname, "%s.scales", base);
    if (st_find(b->st, sname)) {   /* MLX QuantizedSwitchLinear: one packed stack */
        size_t before = b->decode_bytes;
        if (bind_quant(b, outs, n, rows, cols, base, 0, 0) < 0) return -1;
        b->decode_bytes = before + (b->decode_bytes - before) / (size_t)n * (size_t)active;
        return 1;
    }
    int bad;
    const ci_tensor *t = lookup(b, name, 3, shape, &bad);
    if (bad) return -1;
    if (!t) {
        if (need == W_REQUIRED) return fail(b, "required tensor '%s' is missing from the checkpoint", name);
        return 0;
    }
    if (!stacked_dtype_ok(b, t)) return -1;
    for (int e = 0; e < n; e++) outs[e] = stacked_view(t, e, 0, rows);
    account(b, t);
    b->decode_bytes += t->nbytes / (size_t)n * (size_t)active;
    return 1;
}

int w_conv(w_binder *b, float **out, int64_t C, int64_t K, const char *fmt, ...) {
    *out = NULL;
    if (b->failed) return -1;
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const ci_tensor *t = NULL;
    if (!b->st) {
        int64_t shape[3] = { C, 1, K };
        if (record(b, name, 3, shape, W_KIND_MATRIX)) return -1;
    } else {
        int i = st_index_of(b->st, name);
        if (i < 0) return fail(b, "required tensor '%s' is missing from the checkpoint", name);
        t = st_get(b->st, i);
        int ok = (t->ndim == 3 && t->shape[0] == C && ((t->shape[1] == 1 && t->shape[2] == K) || (t->shape[1] == K && t->shape[2] == 1))) ||
                 (t->ndim == 2 && t->shape[0] == C && t->shape[1] == K);
        if (!ok) {
            char got[128];
            return fail(b, "tensor '%s' in %s has shape %s, expected [%lld, 1, %lld] (or [%lld, %lld, 1], [%lld, %lld])", name,
                        st_file_of(b->st, i), ci_shape_str(t->shape, t->ndim, got, sizeof got), (long long)C, (long long)K,
                        (long long)C, (long long)K, (long long)C, (long long)K);
        }
        if (t->dtype != CI_F32 && t->dtype != CI_F16 && t->dtype != CI_BF16)
            return fail(b, "tensor '%s' has dtype %s, expected F32, F16 or BF16", name, ci_dtype_name(t->dtype));
        b->claimed[i] = 1;
        account(b, t);
        b->decode_bytes += t->nbytes;
    }
    float *w = calloc((size_t)(C * K > 0 ? C * K : 1), sizeof *w);
    if (!w) return fail(b, "out of memory for '%s'", name);
    if (keep(b, w)) return -1;
    if (t)  /* every stored layout is the same C x K values, channel-major */
        for (int64_t c = 0; c < C; c++)
            for (int64_t k = 0; k < K; k++) {
                size_t i = (size_t)(c * K + k);
                float x;
                if (t->dtype == CI_F32) memcpy(&x, (const char *)t->data + 4 * i, 4);
                else {
                    uint16_t h;
                    memcpy(&h, (const char *)t->data + 2 * i, 2);
                    x = t->dtype == CI_BF16 ? ci_bf16_to_f32(h) : ci_f16_to_f32(h);
                }
                w[(size_t)(k * C + c)] = x;
            }
    *out = w;
    return 1;
}

int w_head(w_binder *b, ci_mat *head, const ci_mat *embed, int tied, int64_t rows, int64_t cols, const char *name) {
    if (!tied) return w_mat(b, head, W_REQUIRED, rows, cols, "%s", name);
    char stored[512];
    snprintf(stored, sizeof stored, "%s.weight", name);
    *head = *embed;
    w_claim(b, stored);
    if (b->st) b->decode_bytes += w_mat_bytes(embed);
    return b->failed ? -1 : 1;
}

void w_claim(w_binder *b, const char *name) {
    if (!b->st) return;
    int i = st_index_of(b->st, name);
    if (i >= 0) b->claimed[i] = 1;
}

int w_ignorable(const char *name, long long n_layers) {
    size_t n = strlen(name);
    const char *suffix = "rotary_emb.inv_freq";
    size_t sl = strlen(suffix);
    if (n >= sl && !strcmp(name + n - sl, suffix)) return 1;
    if (!strncmp(name, "mtp.", 4) || strstr(name, ".mtp.")) return 1;
    if (strstr(name, "visual.") || strstr(name, "vision_tower") || strstr(name, "vision_model") ||
        strstr(name, "multi_modal_projector") || strstr(name, "mm_projector"))
        return 1;
    /* MTP heads are stored as extra decoder layers past num_hidden_layers. */
    const char *l = strstr(name, "layers.");
    if (l) {
        char *end;
        long long idx = strtoll(l + 7, &end, 10);
        if (end != l + 7 && *end == '.' && idx >= n_layers) return 1;
    }
    return 0;
}

int w_finish(w_binder *b, char *err, size_t errlen) {
    if (!b->failed && b->st) {
        for (int i = 0; i < st_count(b->st); i++) {
            if (b->claimed[i]) continue;
            const ci_tensor *t = st_get(b->st, i);
            if (w_ignorable(t->name, b->n_layers)) continue;
            fail(b, "tensor '%s' in %s is not used by this family (unexpected tensor)", t->name, st_file_of(b->st, i));
            break;
        }
    }
    if (b->failed) return ci_err(err, errlen, "%s", b->err);
    return 0;
}

void w_done(w_binder *b) {
    free(b->claimed);
    free(b->specs);
    b->claimed = NULL;
    b->specs = NULL;
}

void w_owned_free(float **owned, int n) {
    for (int i = 0; i < n; i++) free(owned[i]);
    free(owned);
}
