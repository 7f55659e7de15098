/* qwen_hybrid_cache.c — Qwen3-Next / Qwen3.5 / Qwen3.5-MoE cache snapshots (prefix reuse; a
 * recurrent state cannot be trimmed like KV rows). The cache is backend memory
 * (qwen_hybrid_run.c): a snapshot downloads it, a restore uploads it.
 *
 * A snapshot is a blob: a header (n_layers, then per layer the floats of one KV row and of
 * the DeltaNet state: the cache's shape), then per layer its KV rows [0, pos) or its state. */
#include "qwen_hybrid_internal.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

int qh_is_session(const ci_session *s) {
    return s && s->impl && s->m->family->ops->forward == qh_forward;
}

/* Bytes layer l keeps at position pos. */
static size_t layer_bytes(const qh_model *d, int l, int pos) {
    const qh_layer *L = &d->layers[l];
    return (L->linear ? qh_state_floats(L) : qh_kv_floats(L) * (size_t)pos) * sizeof(float);
}

/* The header of this model's cache: [1 + 2 n_layers] int32. */
static void snap_header(const qh_model *d, int32_t *h) {
    h[0] = d->n_layers;
    for (int l = 0; l < d->n_layers; l++) {
        const qh_layer *L = &d->layers[l];
        h[1 + 2 * l] = L->linear ? 0 : (int32_t)qh_kv_floats(L);
        h[2 + 2 * l] = L->linear ? (int32_t)qh_state_floats(L) : 0;
    }
}

static size_t snap_size(const qh_model *d, int pos) {
    size_t b = (1 + 2 * (size_t)d->n_layers) * sizeof(int32_t);
    for (int l = 0; l < d->n_layers; l++) b += layer_bytes(d, l, pos);
    return b;
}

cache_snap *qh_snapshot(const ci_session *s, char *err, size_t errlen) {
    if (!qh_is_session(s)) {
        ci_err(err, errlen, "%s: not a gated-DeltaNet session", s ? s->m->family->name : "?");
        return NULL;
    }
    const qh_model *d = s->m->impl;
    const qh_session *c = s->impl;
    ci_backend *be = s->m->be;
    cache_snap *snap = cache_snap_blob_new(c->cache_pos, snap_size(d, c->cache_pos));
    if (!snap) {
        ci_err(err, errlen, "%s: out of memory for a cache snapshot at position %d", s->m->family->name, s->pos);
        return NULL;
    }
    char *o = cache_snap_blob(snap, NULL);
    snap_header(d, (int32_t *)o);
    o += (1 + 2 * (size_t)d->n_layers) * sizeof(int32_t);
    for (int l = 0; l < d->n_layers; l++) {
        size_t bytes = layer_bytes(d, l, c->cache_pos);
        if (bytes) be->download(be, o, d->layers[l].linear ? c->state[l] : c->kv[l], bytes);
        o += bytes;
    }
    if (ci_backend_check(s->m, err, errlen)) {
        cache_snap_free(snap);
        return NULL;
    }
    return snap;
}

int qh_session_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    if (!qh_is_session(s)) return ci_err(err, errlen, "%s: not a gated-DeltaNet session", s->m->family->name);
    const qh_model *d = s->m->impl;
    qh_session *c = s->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    size_t bytes = 0, hb = (1 + 2 * (size_t)d->n_layers) * sizeof(int32_t);
    const char *blob = cache_snap_blob(snap, &bytes);
    const int pos = cache_snap_pos(snap);
    int32_t *h = malloc(hb);
    if (!h) return ci_err(err, errlen, "%s: out of memory", fam);
    snap_header(d, h);
    int same = blob && pos >= 0 && bytes >= hb && !memcmp(blob, h, hb) && bytes == snap_size(d, pos);
    free(h);
    if (!same) return ci_err(err, errlen, "%s: cache restore: the snapshot was taken from a cache of another shape", fam);
    if (pos > s->max_ctx)
        return ci_err(err, errlen, "%s: cache restore: snapshot at position %d exceeds the context of %d", fam, pos,
                      s->max_ctx);
    const char *q = blob + hb;
    for (int l = 0; l < d->n_layers; l++) {
        size_t b = layer_bytes(d, l, pos);
        if (b) be->upload(be, d->layers[l].linear ? c->state[l] : c->kv[l], q, b);
        q += b;
    }
    c->cache_pos = pos;
    s->pos = pos;
    return ci_backend_check(s->m, err, errlen);
}
