/* nemotron_h_cache.c — Nemotron-H session cache access: snapshots (prefix reuse; a Mamba2
 * state cannot be trimmed like KV rows), the scan form and the scan timer. The cache is
 * backend memory (nemotron_h_run.c): a snapshot downloads it, a restore uploads it. */
#include "nemotron_h_internal.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

static int is_session(const ci_session *s) { return s && s->m->family == &fam_nemotron_h && s->impl; }

/* ---- snapshots through download / upload -----------------------------------------------
 *
 * A snapshot is a blob: a header (n_layers, then per layer the floats of one KV row and of
 * the Mamba2 state: the cache's shape), then per layer its KV rows [0, pos) or its state. */

static void snap_header(const nh_model *d, int32_t *h) {
    h[0] = d->n_layers;
    for (int l = 0; l < d->n_layers; l++) {
        h[1 + 2 * l] = d->layers[l].kind == '*' ? (int32_t)nh_kv_floats(d) : 0;
        h[2 + 2 * l] = d->layers[l].kind == 'M' ? (int32_t)d->state_floats : 0;
    }
}

/* Bytes of layer l's part of a snapshot at pos, and the buffer they come from. */
static size_t part_bytes(const nh_model *d, const nh_session *c, int l, int pos, float **buf) {
    char k = d->layers[l].kind;
    *buf = k == '*' ? c->kv[l] : k == 'M' ? c->state[l] : NULL;
    return (k == '*' ? nh_kv_floats(d) * (size_t)pos : k == 'M' ? d->state_floats : 0) * sizeof(float);
}

static size_t snap_size(const nh_model *d, const nh_session *c, int pos) {
    size_t b = (1 + 2 * (size_t)d->n_layers) * sizeof(int32_t);
    float *buf;
    for (int l = 0; l < d->n_layers; l++) b += part_bytes(d, c, l, pos, &buf);
    return b;
}

cache_snap *nemh_snapshot(const ci_session *s, char *err, size_t errlen) {
    if (!is_session(s)) {
        ci_err(err, errlen, "nemotron_h: snapshot of a session of another family");
        return NULL;
    }
    const nh_model *d = s->m->impl;
    nh_session *c = s->impl;
    ci_backend *be = s->m->be;
    if (s->pos == 0) nh_reset_states(d, be, c);   /* a reset session: zero states at 0 */
    cache_snap *snap = cache_snap_blob_new(c->cache_pos, snap_size(d, c, c->cache_pos));
    if (!snap) {
        ci_err(err, errlen, "nemotron_h: out of memory for a cache snapshot at position %d", s->pos);
        return NULL;
    }
    char *o = cache_snap_blob(snap, NULL);
    snap_header(d, (int32_t *)o);
    o += (1 + 2 * (size_t)d->n_layers) * sizeof(int32_t);
    for (int l = 0; l < d->n_layers; l++) {
        float *buf;
        size_t bytes = part_bytes(d, c, l, c->cache_pos, &buf);
        if (bytes) be->download(be, o, buf, bytes);
        o += bytes;
    }
    if (ci_backend_check(s->m, err, errlen)) {
        cache_snap_free(snap);
        return NULL;
    }
    return snap;
}

int nemh_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    if (!is_session(s)) return ci_err(err, errlen, "nemotron_h: restore on a session of another family");
    const nh_model *d = s->m->impl;
    nh_session *c = s->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    size_t bytes = 0, hb = (1 + 2 * (size_t)d->n_layers) * sizeof(int32_t);
    const char *blob = snap ? cache_snap_blob(snap, &bytes) : NULL;
    const int pos = snap ? cache_snap_pos(snap) : -1;
    int32_t *h = malloc(hb);
    if (!h) return ci_err(err, errlen, "%s: out of memory", fam);
    snap_header(d, h);
    int same = blob && pos >= 0 && bytes >= hb && !memcmp(blob, h, hb) && bytes == snap_size(d, c, pos);
    free(h);
    if (!same) return ci_err(err, errlen, "%s: cache restore: the snapshot was taken from a cache of another shape", fam);
    if (pos > s->max_ctx)
        return ci_err(err, errlen, "%s: cache restore: snapshot at position %d exceeds the context of %d", fam, pos,
                      s->max_ctx);
    const char *q = blob + hb;
    for (int l = 0; l < d->n_layers; l++) {
        float *buf;
        size_t b = part_bytes(d, c, l, pos, &buf);
        if (b) be->upload(be, buf, q, b);
        q += b;
    }
    c->cache_pos = pos;
    s->pos = pos;
    return ci_backend_check(s->m, err, errlen);
}

/* ---- benchmarks: the scan form and its timer ------------------------------------------- */

double nemh_scan_seconds(ci_session *s) {
    if (!is_session(s)) return 0;
    nh_session *c = s->impl;
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
