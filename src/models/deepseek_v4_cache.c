/* deepseek_v4_cache.c — DeepSeek V4's cache sizes and snapshots (prefix reuse in the server).
 * The cache is backend memory: snapshots move it through download / upload. */
#include "deepseek_v4_internal.h"
#include "../core/status.h"
#include "layer_snap.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- cache ----------------------------------------------------------------------------- */

/* Rows of a layer's window ring: the window, or the whole context when that is shorter
 * (sliding_window comes from config.json alone and may be far past any session), plus a
 * micro-batch. */
int v4_window_rows(const v4_model *d, long long max_ctx) { return d->W < max_ctx ? d->W : (int)max_ctx; }

/* Bytes a session of max_ctx tokens holds for its cache (ring + compressor states). */
static size_t cache_bytes(const v4_model *d, long long max_ctx) {
    size_t total = 0;
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        total += (size_t)(v4_window_rows(d, max_ctx) + V4_UBATCH) * d->D * sizeof(float);
        if (L->type != L_SLIDING) total += cmp_state_bytes(&L->comp, max_ctx);
        if (L->type == L_CSA) total += cmp_state_bytes(&L->icomp, max_ctx);
    }
    return total;
}

/* What one more token of context costs, in the long run: the compressed entries. */
size_t v4_cache_bytes_per_token(const ci_model *m) {
    const v4_model *d = m->impl;
    double per = 0;
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        if (L->type != L_SLIDING) per += (double)d->D * sizeof(float) / L->ratio;
        if (L->type == L_CSA) per += (double)d->Di * sizeof(float) / L->ratio;
    }
    return (size_t)ceil(per);
}

size_t v4_cache_bytes_at(const ci_model *m, long long n_tokens) { return cache_bytes(m->impl, n_tokens); }

/* ---- snapshots (prefix reuse in the server) ------------------------------------------------
 *
 * The cache at position P in two parts. The host blob: a header (magic, layers, P, whether the
 * entries are in it, whether the floats are held), then per compressor state its entry count
 * and whether it holds a previous window. The floats, in one buffer of the session's backend
 * that the snapshot holds (cache_snap_hold: taken and restored with the backend's copy, so on
 * a device they never cross to the host), or after the header in the blob when the backend has
 * no room: per layer the window rows of positions max(0, P-W+1) .. P-1 in order (two pieces of
 * the ring at most), and per compressor state the current window's P % ratio pending tokens
 * (kv, gate), the previous window's Ca series (overlap, when held) and its entries. A session
 * on the model's block pool keeps its entries in the blocks: its snapshot holds none, and a
 * restore needs its blocks to hold the snapshot's positions (ci_session_match first). */
enum { SNAP_MAGIC = 0x56345335, SNAP_HDR = 5 };   /* "5S4V" */

typedef struct {
    ci_backend *be;
    int32_t *h;                           /* the ints (NULL: only count) */
    size_t nh;
    char *dev;                            /* the floats: a backend buffer, */
    char *host;                           /* or host bytes, */
    size_t off;                           /* (NULL both: only count) */
    int writing;
} snap_io;

static void io_int(snap_io *b, int32_t *v) {
    if (b->h && b->writing) b->h[b->nh] = *v;
    else if (b->h) *v = b->h[b->nh];
    b->nh++;
}

/* n floats between the cache at x and the snapshot's floats */
static void io_f(snap_io *b, float *x, size_t n) {
    const size_t bytes = n * sizeof(float);
    if (bytes && b->writing && b->dev) b->be->copy(b->be, b->dev + b->off, x, bytes);
    else if (bytes && b->writing && b->host) b->be->download(b->be, b->host + b->off, x, bytes);
    else if (bytes && !b->writing && b->dev) b->be->copy(b->be, x, b->dev + b->off, bytes);
    else if (bytes && !b->writing && b->host) b->be->upload(b->be, x, b->host + b->off, bytes);
    b->off += bytes;
}

/* A compressor state at position P: its P / ratio entries, whether it holds a previous
 * window's Ca series (CSA past its first window), the pending tokens, that series, the
 * entries (ent: in the state; the layout of compressor.h). Reading, the ints are checked
 * against P first: -1 when they do not fit. */
static int io_cmp(snap_io *b, const cmp_block *k, float *st, int P, int max_ctx, int ent) {
    const int R = k->ratio, m = (1 + k->overlap) * k->d, pend = P % R;
    int32_t ne = P / R, has_prev = k->overlap && ne > 0;
    io_int(b, &ne);
    io_int(b, &has_prev);
    if (!b->writing && b->h && (ne != P / R || (ent && ne > cmp_state_cap(k, max_ctx)) || has_prev != (k->overlap && ne > 0)))
        return -1;
    io_f(b, st, (size_t)pend * m);
    io_f(b, st + (size_t)R * m, (size_t)pend * m);
    if (has_prev) {
        io_f(b, st + 2 * (size_t)R * m, (size_t)R * k->d);
        io_f(b, st + 2 * (size_t)R * m + (size_t)R * k->d, (size_t)R * k->d);
    }
    if (ent) io_f(b, st + ci_v4cmp_entries(&k->op), (size_t)ne * k->d);
    return 0;
}

/* Every layer after the header; -1 (reading) at the first layer that does not fit, *bad_layer. */
static int io_layers(snap_io *b, const v4_model *d, v4_cache *c, int P, int max_ctx, int ent, int *bad_layer) {
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        v4_lcache *lc = &c->lc[l];
        /* the window's rows: positions q0 .. P-1 at rows q % ring_rows, two pieces at most */
        const int q0 = P - d->W + 1 > 0 ? P - d->W + 1 : 0;
        for (int q = q0; q < P;) {
            const int r = q % c->ring_rows, run = c->ring_rows - r < P - q ? c->ring_rows - r : P - q;
            io_f(b, lc->ring + (size_t)r * d->D, (size_t)run * d->D);
            q += run;
        }
        if ((L->type != L_SLIDING && io_cmp(b, &L->comp, lc->cs, P, max_ctx, ent)) ||
            (L->type == L_CSA && io_cmp(b, &L->icomp, lc->is, P, max_ctx, ent))) {
            *bad_layer = l;
            return -1;
        }
    }
    return 0;
}

/* put the bytes at their most: a window's rows but one, ratio - 1 pending tokens, the
 * previous series, and (not pooled) every entry of the context; and the ints */
size_t v4_snapshot_bytes(const ci_model *m, int max_ctx, int pooled) {
    const v4_model *d = m->impl;
    const int W = v4_window_rows(d, max_ctx);
    size_t b = SNAP_HDR * sizeof(int32_t);
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        b += (size_t)(W > 1 ? W - 1 : 0) * d->D * sizeof(float);
        for (int j = 0; j < 2; j++) {
            if (L->type == L_SLIDING || (j && L->type != L_CSA)) continue;
            const cmp_block *k = j ? &L->icomp : &L->comp;
            const size_t R = (size_t)k->ratio, m2 = (size_t)(1 + k->overlap) * k->d;
            b += 2 * sizeof(int32_t) + 2 * (R - 1) * m2 * sizeof(float);
            if (k->overlap) b += 2 * R * k->d * sizeof(float);
            if (!pooled) b += (size_t)(max_ctx / k->ratio) * k->d * sizeof(float);
        }
    }
    return b;
}

cache_snap *v4_snapshot(const ci_session *s, char *err, size_t errlen) {
    const v4_model *d = s->m->impl;
    v4_cache *c = s->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    const int P = s->pos, ent = !c->shared;
    if (P != c->state_pos) {
        ci_err(err, errlen, "%s: snapshot of a session at position %d whose cache is at %d", fam, P, c->state_pos);
        return NULL;
    }
    int badl = 0;
    snap_io cnt = { .be = be, .writing = 1 };
    io_layers(&cnt, d, c, P, s->max_ctx, ent, &badl);
    const size_t hb = (SNAP_HDR + cnt.nh) * sizeof(int32_t), fb = cnt.off;
    char *dev = be->alloc(be, fb ? fb : 1);
    cache_snap *snap = cache_snap_blob_new(P, hb + (dev ? 0 : fb));
    if (!snap) {
        if (dev) be->buf_free(be, dev);
        ci_err(err, errlen, "%s: out of memory for a cache snapshot at position %d", fam, P);
        return NULL;
    }
    int32_t *h = cache_snap_blob(snap, NULL);
    h[0] = SNAP_MAGIC; h[1] = d->n_layers; h[2] = P; h[3] = ent; h[4] = dev != NULL;
    if (dev) snap_hold_buf(snap, be, dev, fb);
    snap_io w = { .be = be, .h = h + SNAP_HDR, .dev = dev, .host = dev ? NULL : (char *)(h + SNAP_HDR + cnt.nh), .writing = 1 };
    io_layers(&w, d, c, P, s->max_ctx, ent, &badl);
    if (ci_backend_check(s->m, err, errlen)) {
        cache_snap_free(snap);
        return NULL;
    }
    return snap;
}

int v4_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    const v4_model *d = s->m->impl;
    v4_cache *c = s->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    size_t len = 0, held_bytes = 0;
    void *owner = NULL;
    int32_t *h = snap ? cache_snap_blob(snap, &len) : NULL;
    const char *held = snap ? cache_snap_held(snap, &held_bytes, &owner) : NULL;
    const int P = snap ? cache_snap_pos(snap) : -1, ent = !c->shared;
    if (!h || len < SNAP_HDR * sizeof(int32_t) || h[0] != SNAP_MAGIC || h[1] != d->n_layers || h[2] != P ||
        h[4] != (held != NULL))
        return ci_err(err, errlen, "%s: cache restore: the snapshot is not one of this model's", fam);
    if (h[3] != ent)
        return ci_err(err, errlen, "%s: cache restore: the snapshot was taken from a cache of another shape (entries %s, "
                      "the session's %s)", fam, h[3] ? "in it" : "in a block pool", ent ? "its own" : "in the block pool");
    if (P < 0 || P > s->max_ctx)
        return ci_err(err, errlen, "%s: cache restore: snapshot at position %d exceeds the context of %d", fam, P, s->max_ctx);
    if (!ent && (int64_t)s->pages.n * KV_BLOCK < P)
        return ci_err(err, errlen, "%s: cache restore: the snapshot at position %d keeps no entries, and the session's "
                      "blocks hold %d positions (match its prefix first)", fam, P, s->pages.n * KV_BLOCK);
    /* the shape this session's cache gives at P: ints and floats as the snapshot's */
    int badl = -1;
    snap_io cnt = { .be = be, .writing = 1 };
    io_layers(&cnt, d, c, P, s->max_ctx, ent, &badl);
    const size_t hb = (SNAP_HDR + cnt.nh) * sizeof(int32_t);
    if (len != hb + (held ? 0 : cnt.off) || (held && held_bytes != cnt.off))
        return ci_err(err, errlen, "%s: cache restore: the snapshot was taken from a cache of another shape", fam);
    /* another backend's buffer comes through host memory, downloaded by its owner */
    char *tmp = NULL;
    if (held && owner != be && !(tmp = snap_foreign_copy(held, owner, cnt.off, fam, err, errlen))) return -1;
    snap_io r = { .be = be, .h = h + SNAP_HDR, .dev = held && !tmp ? (char *)held : NULL,
                  .host = tmp ? tmp : held ? NULL : (char *)(h + SNAP_HDR + cnt.nh), .writing = 0 };
    /* the ints first (nothing written), then the floats */
    snap_io chk = r;
    chk.dev = chk.host = NULL;
    if (io_layers(&chk, d, c, P, s->max_ctx, ent, &badl)) {
        free(tmp);
        return ci_err(err, errlen, "%s: cache restore: the snapshot's layer %d does not fit this session", fam, badl);
    }
    io_layers(&r, d, c, P, s->max_ctx, ent, &badl);
    free(tmp);
    if (ci_backend_check(s->m, err, errlen)) {
        c->state_pos = -1;   /* half restored: only a reset or another restore continues */
        return -1;
    }
    s->pos = c->state_pos = P;
    return 0;
}
