/* lfm2_cache.c — LFM2 / LFM2-MoE session cache access: snapshots (prefix reuse; a conv
 * state cannot be trimmed like KV rows) and the prefill chunk. The cache is backend memory
 * (lfm2_run.c): a snapshot downloads it, a restore uploads it. */
#include "lfm2_internal.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

static int lfm2_is_family(const ci_family *f) { return f == &fam_lfm2 || f == &fam_lfm2_moe; }

/* ---- cache access: snapshots through download / upload ---------------------------------
 *
 * A snapshot is a blob: a header (n_layers, then per layer the floats of one KV row and of
 * the conv state: the cache's shape), then per layer its KV rows [0, pos) and its state. */

static int check_session(const ci_session *s, char *err, size_t errlen) {
    if (!lfm2_is_family(s->m->family) || !s->impl)
        return ci_err(err, errlen, "%s: not an lfm2 / lfm2_moe session", s->m->family->name);
    return 0;
}

/* The header of this model's cache: [1 + 2 n_layers] int32. */
static void snap_header(const lfm2_model *d, int32_t *h) {
    h[0] = d->n_layers;
    for (int l = 0; l < d->n_layers; l++) {
        h[1 + 2 * l] = d->layers[l].is_attn ? (int32_t)lfm2_kv_floats(d) : 0;
        h[2 + 2 * l] = d->layers[l].is_attn ? 0 : (int32_t)lfm2_state_floats(d);
    }
}

static size_t snap_size(const lfm2_model *d, int pos) {
    size_t b = (1 + 2 * (size_t)d->n_layers) * sizeof(int32_t);
    for (int l = 0; l < d->n_layers; l++)
        b += (d->layers[l].is_attn ? lfm2_kv_floats(d) * (size_t)pos : lfm2_state_floats(d)) * sizeof(float);
    return b;
}

cache_snap *lfm2_snapshot(const ci_session *s, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return NULL;
    const lfm2_model *d = s->m->impl;
    const lfm2_session *c = s->impl;
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
        size_t bytes = (d->layers[l].is_attn ? lfm2_kv_floats(d) * (size_t)c->cache_pos : lfm2_state_floats(d)) * sizeof(float);
        if (bytes) be->download(be, o, d->layers[l].is_attn ? c->kv[l] : c->state[l], bytes);
        o += bytes;
    }
    if (ci_backend_check(s->m, err, errlen)) {
        cache_snap_free(snap);
        return NULL;
    }
    return snap;
}

int lfm2_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return -1;
    const lfm2_model *d = s->m->impl;
    lfm2_session *c = s->impl;
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
        size_t b = (d->layers[l].is_attn ? lfm2_kv_floats(d) * (size_t)pos : lfm2_state_floats(d)) * sizeof(float);
        if (b) be->upload(be, d->layers[l].is_attn ? c->kv[l] : c->state[l], q, b);
        q += b;
    }
    c->cache_pos = pos;
    s->pos = pos;
    return ci_backend_check(s->m, err, errlen);
}

int lfm2_set_chunk(ci_session *s, int chunk, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return -1;
    if (chunk < 1 || chunk > LFM2_UBATCH)
        return ci_err(err, errlen, "%s: prefill chunk %d is outside 1..%d", s->m->family->name, chunk, LFM2_UBATCH);
    ((lfm2_session *)s->impl)->run.ub = chunk;   /* the runner's buffers hold LFM2_UBATCH rows */
    return 0;
}
