/* quant.c — see quant.h. */
#include "quant.h"
#include "../core/status.h"
#include "json.h"
#include <stdio.h>
#include <string.h>

const char *q_mode_name(ci_qmode m) {
    switch (m) {
    case CI_Q_AFFINE: return "affine";
    case CI_Q_MXFP4: return "mxfp4";
    case CI_Q_MXFP8: return "mxfp8";
    default: return "none";
    }
}

int q_params_valid(const q_params *p) {
    switch (p->mode) {
    case CI_Q_AFFINE:
        return (p->bits >= 2 && p->bits <= 8 && p->bits != 7) && (p->group == 32 || p->group == 64 || p->group == 128);
    case CI_Q_MXFP4: return p->bits == 4 && p->group == 32;
    case CI_Q_MXFP8: return p->bits == 8 && p->group == 32;
    default: return 0;
    }
}

const char *q_params_str(const q_params *p, char *buf, size_t n) {
    snprintf(buf, n, "%s %d-bit group %d", q_mode_name(p->mode), p->bits, p->group);
    return buf;
}

/* MLX's defaults for a mode (mlx.nn's _defaults_for_mode). */
static void mode_defaults(ci_qmode m, q_params *p) {
    p->mode = m;
    p->group = m == CI_Q_AFFINE ? 64 : 32;
    p->bits = m == CI_Q_MXFP8 ? 8 : 4;
}

/* {"group_size", "bits", "mode"} of obj into *p; mode absent = dflt_mode. `what` names the
 * object in messages ("quantization" or "quantization.<module>"). */
static int read_params(const json_t *obj, ci_qmode dflt_mode, const char *path, const char *what, q_params *p,
                       char *err, size_t errlen) {
    ci_qmode mode = dflt_mode;
    const json_t *mv = json_object_get(obj, "mode");
    if (mv && !json_is_null(mv)) {
        const char *ms = json_string_value(mv);
        if (!ms) return ci_err(err, errlen, "%s: %s.mode must be a string", path, what);
        if (!strcmp(ms, "affine")) mode = CI_Q_AFFINE;
        else if (!strcmp(ms, "mxfp4")) mode = CI_Q_MXFP4;
        else if (!strcmp(ms, "mxfp8")) mode = CI_Q_MXFP8;
        else return ci_err(err, errlen, "%s: %s.mode '%s' is not supported (affine, mxfp4, mxfp8)", path, what, ms);
    }
    mode_defaults(mode, p);
    long long v;
    int r = cj_get_int(obj, "group_size", &v);
    if (r < 0) return ci_err(err, errlen, "%s: %s.group_size must be an integer", path, what);
    if (r > 0) p->group = v > 0 && v < 1 << 20 ? (int)v : -1;
    r = cj_get_int(obj, "bits", &v);
    if (r < 0) return ci_err(err, errlen, "%s: %s.bits must be an integer", path, what);
    if (r > 0) p->bits = v > 0 && v < 64 ? (int)v : -1;
    if (!q_params_valid(p))
        return ci_err(err, errlen,
                      "%s: %s: %s with bits %d and group_size %d is not supported (affine: bits 2, 3, 4, 5, 6, 8 and "
                      "group_size 32, 64, 128; mxfp4: 4 bits, group 32; mxfp8: 8 bits, group 32)",
                      path, what, q_mode_name(p->mode), p->bits, p->group);
    return 0;
}

static int is_param_key(const char *k) {
    return !strcmp(k, "group_size") || !strcmp(k, "bits") || !strcmp(k, "mode") || !strcmp(k, "quant_method");
}

int q_config_read(const json_t *root, const json_t *text, const char *path, q_config *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const json_t *blk = NULL;
    const char *key = NULL;
    const json_t *where[2] = { root, text };
    for (int i = 0; i < 2 && !blk; i++) {
        if (!where[i] || !json_is_object(where[i])) continue;
        const json_t *q = json_object_get(where[i], "quantization");
        if (q && !json_is_null(q)) { blk = q; key = "quantization"; break; }
    }
    for (int i = 0; i < 2 && !blk; i++) {
        if (!where[i] || !json_is_object(where[i])) continue;
        const json_t *q = json_object_get(where[i], "quantization_config");
        if (!q || json_is_null(q) || !json_is_object(q)) continue;
        /* Other quantizers' configs (fp8 block scales, AWQ, GPTQ, ...) carry a quant_method:
         * those are not MLX packing, except the legacy mxfp4 one. */
        const char *qm = cj_get_str(q, "quant_method");
        if (qm && strcmp(qm, "mxfp4")) return 0;
        blk = q;
        key = "quantization_config";
    }
    if (!blk) return 0;
    if (!json_is_object(blk)) return ci_err(err, errlen, "%s: '%s' must be an object", path, key);
    const char *qm = cj_get_str(blk, "quant_method");
    if (read_params(blk, qm && !strcmp(qm, "mxfp4") ? CI_Q_MXFP4 : CI_Q_AFFINE, path, key, &out->def, err, errlen))
        return -1;
    /* Every member that is not a parameter is a module override: check them all now, so a
     * bad one is reported at load whether or not its module is bound. */
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)blk, k, v) {
        if (is_param_key(k)) continue;
        char what[512];
        snprintf(what, sizeof what, "%s.%s", key, k);
        if (json_is_boolean(v)) continue;
        if (!json_is_object(v))
            return ci_err(err, errlen, "%s: '%s' must be an object of quantization parameters or a boolean", path, what);
        q_params p;
        if (read_params(v, CI_Q_AFFINE, path, what, &p, err, errlen)) return -1;
    }
    out->present = 1;
    out->obj = blk;
    out->key = key;
    return 0;
}

q_mod q_config_module(const q_config *qc, const char *path, q_params *out) {
    if (qc && qc->present) *out = qc->def;
    else mode_defaults(CI_Q_AFFINE, out);
    if (!qc || !qc->present || is_param_key(path)) return Q_MOD_DEFAULT;
    const json_t *v = json_object_get(qc->obj, path);
    if (!v || json_is_null(v)) return Q_MOD_DEFAULT;
    if (json_is_boolean(v)) return json_is_true(v) ? Q_MOD_DEFAULT : Q_MOD_OFF;
    char err[8];  /* validated by q_config_read */
    if (read_params(v, CI_Q_AFFINE, "", "", out, err, sizeof err)) return Q_MOD_OFF;
    return Q_MOD_PARAMS;
}

int q_infer(const ci_tensor *w, const ci_tensor *scales, const ci_tensor *biases, int64_t cols, q_params *out,
            char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (w->dtype != CI_U32)
        return ci_err(err, errlen, "tensor '%s' has dtype %s, expected U32 (MLX packed codes: '%s' exists)", w->name,
                      ci_dtype_name(w->dtype), scales->name);
    if (w->ndim < 2 || scales->ndim != w->ndim)
        return ci_err(err, errlen, "tensor '%s' has %d dimensions and '%s' %d, expected the same number (>= 2)", w->name,
                      w->ndim, scales->name, scales->ndim);
    int64_t wc = w->shape[w->ndim - 1], sc = scales->shape[scales->ndim - 1];
    if (cols <= 0 || wc <= 0 || sc <= 0 || (wc * 32) % cols || cols % sc)
        return ci_err(err, errlen,
                      "tensor '%s' has %lld columns and '%s' %lld: no packing fits %lld input features "
                      "(expected cols*bits/32 words and cols/group_size scales)",
                      w->name, (long long)wc, scales->name, (long long)sc, (long long)cols);
    out->bits = (int)(wc * 32 / cols);
    out->group = (int)(cols / sc);
    if (biases) {
        out->mode = CI_Q_AFFINE;
        if (scales->dtype != CI_F32 && scales->dtype != CI_F16 && scales->dtype != CI_BF16)
            return ci_err(err, errlen, "tensor '%s' has dtype %s, expected F32, F16 or BF16 (affine scales)",
                          scales->name, ci_dtype_name(scales->dtype));
        int same = biases->dtype == scales->dtype && biases->ndim == scales->ndim;
        for (int d = 0; same && d < scales->ndim; d++) same = biases->shape[d] == scales->shape[d];
        if (!same) {
            char a[128], b[128];
            return ci_err(err, errlen, "tensor '%s' is %s %s, expected the dtype and shape of '%s' (%s %s)", biases->name,
                          ci_dtype_name(biases->dtype), ci_shape_str(biases->shape, biases->ndim, a, sizeof a),
                          scales->name, ci_dtype_name(scales->dtype),
                          ci_shape_str(scales->shape, scales->ndim, b, sizeof b));
        }
    } else {
        if (scales->dtype != CI_U8 && scales->dtype != CI_F8_E8M0)
            return ci_err(err, errlen,
                          "tensor '%s' has dtype %s and there are no biases: expected U8 E8M0 scales (mxfp4 / mxfp8), "
                          "or biases for affine quantization", scales->name, ci_dtype_name(scales->dtype));
        out->mode = out->bits == 8 ? CI_Q_MXFP8 : CI_Q_MXFP4;
        if (out->bits == 4 && out->group == 16)
            return ci_err(err, errlen, "tensor '%s' is nvfp4 (group 16, E4M3 scales): not supported (mxfp4, mxfp8, affine)",
                          w->name);
    }
    if (!q_params_valid(out)) {
        char buf[64];
        return ci_err(err, errlen, "tensor '%s' is packed as %s, which MLX does not produce", w->name,
                      q_params_str(out, buf, sizeof buf));
    }
    return 0;
}
