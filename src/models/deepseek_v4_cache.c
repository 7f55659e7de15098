/* deepseek_v4_cache.c — DeepSeek V4's cache sizes and snapshots (prefix reuse in the server).
 * The cache is backend memory: snapshots move it through download / upload. */
#include "deepseek_v4_internal.h"
#include "../core/status.h"
#include <math.h>
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
 * The cache at position P as one blob: a header (magic, layers, P, whether the entries are in
 * it), then per layer the window rows of positions max(0, P-W+1) .. P-1 in order, and per
 * compressor state its entry count, whether it holds a previous window, the current window's
 * P % ratio pending tokens (kv, gate), the previous window's Ca series (overlap, when held)
 * and its entries. A session on the model's block pool keeps its entries in the blocks: its
 * snapshot holds none, and a restore needs its blocks to hold the snapshot's positions
 * (ci_session_match first). */
enum { SNAP_MAGIC = 0x56345334 };   /* "4S4V" */

typedef struct {
    ci_backend *be;
    uint8_t *p;                           /* NULL: only count */
    const uint8_t *q;                     /* reading */
    size_t off, len;
    int bad;
} blob_io;

static void bput(blob_io *b, const void *src, size_t n) {
    if (b->p) memcpy(b->p + b->off, src, n);
    b->off += n;
}

static void bget(blob_io *b, void *dst, size_t n) {
    if (b->bad || n > b->len - b->off) { b->bad = 1; return; }
    memcpy(dst, b->q + b->off, n);
    b->off += n;
}

/* The same for bytes in backend memory. */
static void bput_dev(blob_io *b, const float *src, size_t n) {
    if (b->p && n) b->be->download(b->be, b->p + b->off, src, n);
    b->off += n;
}

static void bget_dev(blob_io *b, float *dst, size_t n) {
    if (b->bad || n > b->len - b->off) { b->bad = 1; return; }
    if (n) b->be->upload(b->be, dst, b->q + b->off, n);
    b->off += n;
}

/* A compressor state at position P: its P / ratio entries, whether it holds a previous
 * window's Ca series (CSA past its first window), the pending tokens, that series, the
 * entries (the layout of compressor.h). */
static void put_cmp(blob_io *b, const cmp_block *k, const float *st, int P, int ent) {
    const int R = k->ratio, m = (1 + k->overlap) * k->d, pend = P % R, ne = P / R, has_prev = k->overlap && ne > 0;
    int32_t hdr[2] = { ne, has_prev };
    bput(b, hdr, sizeof hdr);
    bput_dev(b, st, (size_t)pend * m * sizeof(float));
    bput_dev(b, st + (size_t)R * m, (size_t)pend * m * sizeof(float));
    if (has_prev) {
        bput_dev(b, st + 2 * (size_t)R * m, (size_t)R * k->d * sizeof(float));
        bput_dev(b, st + 2 * (size_t)R * m + (size_t)R * k->d, (size_t)R * k->d * sizeof(float));
    }
    if (ent) bput_dev(b, st + ci_v4cmp_entries(&k->op), (size_t)ne * k->d * sizeof(float));
}

static int get_cmp(blob_io *b, const cmp_block *k, float *st, int P, int max_ctx, int ent) {
    const int R = k->ratio, m = (1 + k->overlap) * k->d, pend = P % R;
    int32_t hdr[2] = { -1, -1 };
    bget(b, hdr, sizeof hdr);
    if (b->bad || hdr[0] != P / R || (ent && hdr[0] > cmp_state_cap(k, max_ctx)) || hdr[1] != (k->overlap && hdr[0] > 0))
        return -1;
    bget_dev(b, st, (size_t)pend * m * sizeof(float));
    bget_dev(b, st + (size_t)R * m, (size_t)pend * m * sizeof(float));
    if (hdr[1]) {
        bget_dev(b, st + 2 * (size_t)R * m, (size_t)R * k->d * sizeof(float));
        bget_dev(b, st + 2 * (size_t)R * m + (size_t)R * k->d, (size_t)R * k->d * sizeof(float));
    }
    if (ent) bget_dev(b, st + ci_v4cmp_entries(&k->op), (size_t)hdr[0] * k->d * sizeof(float));
    return b->bad ? -1 : 0;
}

static void put_all(blob_io *b, const v4_model *d, const v4_cache *c, int P) {
    const int ent = !c->shared;
    int32_t hdr[4] = { SNAP_MAGIC, d->n_layers, P, ent };
    bput(b, hdr, sizeof hdr);
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        const v4_lcache *lc = &c->lc[l];
        for (int q = P - d->W + 1 > 0 ? P - d->W + 1 : 0; q < P; q++)
            bput_dev(b, lc->ring + (size_t)(q % c->ring_rows) * d->D, (size_t)d->D * sizeof(float));
        if (L->type != L_SLIDING) put_cmp(b, &L->comp, lc->cs, P, ent);
        if (L->type == L_CSA) put_cmp(b, &L->icomp, lc->is, P, ent);
    }
}

/* put_all's bytes at their most: a window's rows but one, ratio - 1 pending tokens, the
 * previous series, and (not pooled) every entry of the context */
size_t v4_snapshot_bytes(const ci_model *m, int max_ctx, int pooled) {
    const v4_model *d = m->impl;
    const int W = v4_window_rows(d, max_ctx);
    size_t b = 4 * sizeof(int32_t);
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
    const v4_cache *c = s->impl;
    if (s->pos != c->state_pos) {
        ci_err(err, errlen, "%s: snapshot of a session at position %d whose cache is at %d", s->m->family->name, s->pos,
               c->state_pos);
        return NULL;
    }
    blob_io cnt = { .be = s->m->be };
    put_all(&cnt, d, c, s->pos);
    cache_snap *snap = cache_snap_blob_new(s->pos, cnt.off);
    if (!snap) {
        ci_err(err, errlen, "%s: out of memory for a cache snapshot at position %d", s->m->family->name, s->pos);
        return NULL;
    }
    blob_io w = { .be = s->m->be, .p = cache_snap_blob(snap, NULL) };
    put_all(&w, d, c, s->pos);
    return snap;
}

int v4_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    const v4_model *d = s->m->impl;
    v4_cache *c = s->impl;
    const char *fam = s->m->family->name;
    size_t len = 0;
    const uint8_t *q = cache_snap_blob(snap, &len);
    int P = cache_snap_pos(snap);
    int32_t hdr[4] = { 0 };
    blob_io b = { .be = s->m->be, .q = q, .len = len };
    const int ent = !c->shared;
    if (q) bget(&b, hdr, sizeof hdr);
    if (!q || b.bad || hdr[0] != SNAP_MAGIC || hdr[1] != d->n_layers || hdr[2] != P)
        return ci_err(err, errlen, "%s: cache restore: the snapshot is not one of this model's", fam);
    if (hdr[3] != ent)
        return ci_err(err, errlen, "%s: cache restore: the snapshot was taken from a cache of another shape (entries %s, "
                      "the session's %s)", fam, hdr[3] ? "in it" : "in a block pool", ent ? "its own" : "in the block pool");
    if (P < 0 || P > s->max_ctx)
        return ci_err(err, errlen, "%s: cache restore: snapshot at position %d exceeds the context of %d", fam, P, s->max_ctx);
    if (!ent && (int64_t)s->pages.n * KV_BLOCK < P)
        return ci_err(err, errlen, "%s: cache restore: the snapshot at position %d keeps no entries, and the session's "
                      "blocks hold %d positions (match its prefix first)", fam, P, s->pages.n * KV_BLOCK);
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        v4_lcache *lc = &c->lc[l];
        for (int t = P - d->W + 1 > 0 ? P - d->W + 1 : 0; t < P; t++)
            bget_dev(&b, lc->ring + (size_t)(t % c->ring_rows) * d->D, (size_t)d->D * sizeof(float));
        if ((L->type != L_SLIDING && get_cmp(&b, &L->comp, lc->cs, P, s->max_ctx, ent)) ||
            (L->type == L_CSA && get_cmp(&b, &L->icomp, lc->is, P, s->max_ctx, ent)) || b.bad) {
            c->state_pos = -1;   /* half restored: only a reset or another restore continues */
            return ci_err(err, errlen, "%s: cache restore: the snapshot's layer %d does not fit this session", fam, l);
        }
    }
    if (b.off != len) {
        c->state_pos = -1;
        return ci_err(err, errlen, "%s: cache restore: %zu bytes of the snapshot left over", fam, len - b.off);
    }
    s->pos = c->state_pos = P;
    return 0;
}

