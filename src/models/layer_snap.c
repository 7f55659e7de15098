/* layer_snap.c — hybrid caches: attention rows on the block pool, snapshots (layer_snap.h). */
#include "layer_snap.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

int hyb_pool_init(ci_model *m, int n_blocks, size_t row_floats, int n_attn, float **pool, char *err, size_t errlen) {
    return ci_pool_buffers(m, n_blocks, pool, row_floats, n_attn, NULL, 0, 0, err, errlen);
}

int hyb_rows_init(ci_session *s, float *model_pool, float **base, int64_t *lrows, char *err, size_t errlen) {
    int n_blocks = 0, bad = 0;
    *base = NULL;
    if (ci_session_pages_init(s, &n_blocks, err, errlen)) return -1;
    *lrows = (int64_t)n_blocks * KV_BLOCK;
    if (!s->own_pool) {
        *base = model_pool;
        return 0;
    }
    const size_t bytes = (size_t)n_blocks * ci_model_kv_block_bytes(s->m);
    if (bytes) *base = ci_buf_alloc(s->m->be, bytes, &bad);
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache (%zu MiB)%s%s", s->m->family->name, s->max_ctx,
                      bytes >> 20, s->m->be->last_error[0] ? ": " : "", s->m->be->last_error);
    return 0;
}

void hyb_rows_free(ci_session *s, float *base) {
    if (s->own_pool) ci_buf_release(s->m->be, base);
    ci_session_pages_free(s);
}

static size_t part_bytes(const layer_part *p, int pos) {
    return (p->row_floats * (size_t)pos + p->state_floats) * sizeof(float);
}

/* the header ([1 + 2 n] int32) and the layers' bytes at pos */
static size_t shape(const ci_session *s, int n, layer_part_fn part, int pos, int32_t *h) {
    size_t b = 0;
    h[0] = n;
    for (int l = 0; l < n; l++) {
        layer_part p;
        part(s, l, &p);
        h[1 + 2 * l] = (int32_t)p.row_floats;
        h[2 + 2 * l] = (int32_t)p.state_floats;
        b += part_bytes(&p, pos);
    }
    return b;
}

static void release_buf(void *ctx, void *buf) {
    ci_backend *be = ctx;
    be->buf_free(be, buf);
}

void snap_hold_buf(cache_snap *snap, ci_backend *be, void *buf, size_t bytes) {
    cache_snap_hold(snap, buf, bytes, release_buf, be);
}

char *snap_foreign_copy(const void *held, void *owner, size_t bytes, const char *fam, char *err, size_t errlen) {
    ci_backend *ob = owner;
    char *tmp = malloc(bytes ? bytes : 1);
    if (!tmp) {
        ci_err(err, errlen, "%s: out of memory", fam);
        return NULL;
    }
    ob->download(ob, tmp, held, bytes);
    if (ob->status && ob->status(ob)) {
        free(tmp);
        ci_err(err, errlen, "%s: cache restore: %s: %s", fam, ob->name, ob->last_error);
        return NULL;
    }
    return tmp;
}

cache_snap *layer_snapshot(const ci_session *s, int n_layers, layer_part_fn part, int pos, char *err, size_t errlen) {
    ci_backend *be = s->m->be;
    const size_t hb = (1 + 2 * (size_t)n_layers) * sizeof(int32_t);
    int32_t *h = malloc(hb);
    const size_t data = h ? shape(s, n_layers, part, pos, h) : 0;
    char *dev = h ? be->alloc(be, data ? data : 1) : NULL;
    cache_snap *snap = h ? cache_snap_blob_new(pos, hb + (dev ? 0 : data)) : NULL;
    if (!snap) {
        free(h);
        if (dev) be->buf_free(be, dev);
        ci_err(err, errlen, "%s: out of memory for a cache snapshot at position %d", s->m->family->name, s->pos);
        return NULL;
    }
    char *o = cache_snap_blob(snap, NULL);
    memcpy(o, h, hb);
    free(h);
    if (dev) snap_hold_buf(snap, be, dev, data);
    o = dev ? dev : o + hb;
    for (int l = 0; l < n_layers; l++) {
        layer_part p;
        part(s, l, &p);
        const size_t bytes = part_bytes(&p, pos);
        if (bytes && dev) be->copy(be, o, p.buf, bytes);
        else if (bytes) be->download(be, o, p.buf, bytes);
        o += bytes;
    }
    if (ci_backend_check(s->m, err, errlen)) {
        cache_snap_free(snap);
        return NULL;
    }
    return snap;
}

int layer_restore(ci_session *s, int n_layers, layer_part_fn part, const cache_snap *snap, int *pos, char *err,
                  size_t errlen) {
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    size_t bytes = 0, held_bytes = 0;
    void *owner = NULL;
    const size_t hb = (1 + 2 * (size_t)n_layers) * sizeof(int32_t);
    const char *blob = snap ? cache_snap_blob(snap, &bytes) : NULL;
    const char *held = snap ? cache_snap_held(snap, &held_bytes, &owner) : NULL;
    const int at = snap ? cache_snap_pos(snap) : -1;
    int32_t *h = malloc(hb);
    if (!h) return ci_err(err, errlen, "%s: out of memory", fam);
    const size_t want = shape(s, n_layers, part, at > 0 ? at : 0, h);
    const int same = blob && at >= 0 && bytes >= hb && !memcmp(blob, h, hb) &&
                     (held ? bytes == hb && held_bytes == want : bytes == hb + want);
    free(h);
    if (!same) return ci_err(err, errlen, "%s: cache restore: the snapshot was taken from a cache of another shape", fam);
    if (at > s->max_ctx)
        return ci_err(err, errlen, "%s: cache restore: snapshot at position %d exceeds the context of %d", fam, at,
                      s->max_ctx);
    /* on the model's pool the rows are the blocks' (matched before); an own pool's blocks
     * follow the restored position */
    if (s->pool && !s->own_pool && (int64_t)s->pages.n * KV_BLOCK < at)
        return ci_err(err, errlen, "%s: cache restore: the snapshot at position %d keeps no rows, and the session's blocks "
                      "hold %d positions (match its prefix first)", fam, at, s->pages.n * KV_BLOCK);
    if (s->own_pool && ci_session_reserve(s, at, err, errlen)) return -1;
    /* another backend's buffer comes through host memory, downloaded by its owner */
    char *tmp = NULL;
    if (held && owner != be && !(tmp = snap_foreign_copy(held, owner, want, fam, err, errlen))) return -1;
    const char *q = tmp ? tmp : held ? held : blob + hb;
    for (int l = 0; l < n_layers; l++) {
        layer_part p;
        part(s, l, &p);
        const size_t b = part_bytes(&p, at);
        if (b && held && !tmp) be->copy(be, p.buf, q, b);
        else if (b) be->upload(be, p.buf, q, b);
        q += b;
    }
    free(tmp);
    *pos = at;
    return ci_backend_check(s->m, err, errlen);
}
