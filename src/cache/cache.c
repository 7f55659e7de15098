/* cache.c — see cache.h. */
#include "cache.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

struct cache_snap {
    int n_layers, pos;
    cache_part *parts;      /* copy, to check the shape at restore */
    float **rows;           /* [n_layers] -> [pos, row_floats] */
    float **state;
    size_t bytes;
    void *blob;             /* cache_snap_blob_new: the family's own bytes (n_layers = -1) */
    size_t blob_bytes;
    void *held;             /* cache_snap_hold: a buffer of held_bytes, released by release(ctx, .) */
    size_t held_bytes;
    void (*release)(void *ctx, void *buf);
    void *ctx;
};

int cache_init(ci_cache *c, int n_layers, const cache_part *parts, int max_ctx, const char *family, char *err,
               size_t errlen) {
    memset(c, 0, sizeof *c);
    c->n_layers = n_layers;
    c->max_ctx = max_ctx;
    c->parts = malloc((size_t)n_layers * sizeof *c->parts);
    c->rows = calloc((size_t)n_layers, sizeof *c->rows);
    c->state = calloc((size_t)n_layers, sizeof *c->state);
    if (!c->parts || !c->rows || !c->state) goto oom;
    memcpy(c->parts, parts, (size_t)n_layers * sizeof *parts);
    for (int l = 0; l < n_layers; l++) {
        if (parts[l].row_floats) {
            c->rows[l] = malloc(parts[l].row_floats * (size_t)max_ctx * sizeof(float));
            if (!c->rows[l]) goto oom;
        }
        if (parts[l].state_floats) {
            c->state[l] = calloc(parts[l].state_floats, sizeof(float));
            if (!c->state[l]) goto oom;
        }
    }
    return 0;
oom:
    cache_free(c);
    return ci_err(err, errlen, "%s: out of memory for a %d-token cache", family, max_ctx);
}

void cache_free(ci_cache *c) {
    for (int l = 0; l < c->n_layers; l++) {
        if (c->rows) free(c->rows[l]);
        if (c->state) free(c->state[l]);
    }
    free(c->rows);
    free(c->state);
    free(c->parts);
    memset(c, 0, sizeof *c);
}

void cache_reset(ci_cache *c) {
    c->pos = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->state[l]) memset(c->state[l], 0, c->parts[l].state_floats * sizeof(float));
}

size_t cache_bytes_per_token(const ci_cache *c) {
    size_t b = 0;
    for (int l = 0; l < c->n_layers; l++) b += c->parts[l].row_floats * sizeof(float);
    return b;
}

size_t cache_state_bytes(const ci_cache *c) {
    size_t b = 0;
    for (int l = 0; l < c->n_layers; l++) b += c->parts[l].state_floats * sizeof(float);
    return b;
}

void cache_snap_free(cache_snap *s) {
    if (!s) return;
    for (int l = 0; l < s->n_layers; l++) {
        if (s->rows) free(s->rows[l]);
        if (s->state) free(s->state[l]);
    }
    free(s->rows);
    free(s->state);
    free(s->parts);
    free(s->blob);
    if (s->held && s->release) s->release(s->ctx, s->held);
    free(s);
}

cache_snap *cache_snap_blob_new(int pos, size_t bytes) {
    cache_snap *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_layers = -1;
    s->pos = pos;
    s->bytes = s->blob_bytes = bytes;
    s->blob = calloc(1, bytes ? bytes : 1);
    if (!s->blob) { free(s); return NULL; }
    return s;
}

void *cache_snap_blob(const cache_snap *s, size_t *bytes) {
    if (bytes) *bytes = s->blob ? s->blob_bytes : 0;
    return s->blob;
}

void cache_snap_hold(cache_snap *s, void *buf, size_t bytes, void (*release)(void *ctx, void *buf), void *ctx) {
    if (s->held && s->release) s->release(s->ctx, s->held);
    s->bytes += bytes - (s->held ? s->held_bytes : 0);
    s->held = buf;
    s->held_bytes = bytes;
    s->release = release;
    s->ctx = ctx;
}

void *cache_snap_held(const cache_snap *s, size_t *bytes, void **ctx) {
    if (bytes) *bytes = s->held ? s->held_bytes : 0;
    if (ctx) *ctx = s->held ? s->ctx : NULL;
    return s->held;
}

cache_snap *cache_snapshot(const ci_cache *c) {
    cache_snap *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->n_layers = c->n_layers;
    s->pos = c->pos;
    s->parts = malloc((size_t)c->n_layers * sizeof *s->parts);
    s->rows = calloc((size_t)c->n_layers, sizeof *s->rows);
    s->state = calloc((size_t)c->n_layers, sizeof *s->state);
    if (!s->parts || !s->rows || !s->state) goto oom;
    memcpy(s->parts, c->parts, (size_t)c->n_layers * sizeof *s->parts);
    for (int l = 0; l < c->n_layers; l++) {
        size_t rb = c->parts[l].row_floats * (size_t)c->pos * sizeof(float);
        size_t sb = c->parts[l].state_floats * sizeof(float);
        if (rb) {
            if (!(s->rows[l] = malloc(rb))) goto oom;
            memcpy(s->rows[l], c->rows[l], rb);
        }
        if (sb) {
            if (!(s->state[l] = malloc(sb))) goto oom;
            memcpy(s->state[l], c->state[l], sb);
        }
        s->bytes += rb + sb;
    }
    return s;
oom:
    cache_snap_free(s);
    return NULL;
}

int cache_restore(ci_cache *c, const cache_snap *s, char *err, size_t errlen) {
    if (s->n_layers != c->n_layers || memcmp(s->parts, c->parts, (size_t)c->n_layers * sizeof *c->parts))
        return ci_err(err, errlen, "cache restore: the snapshot was taken from a cache of another shape");
    if (s->pos > c->max_ctx)
        return ci_err(err, errlen, "cache restore: snapshot at position %d exceeds the context of %d", s->pos, c->max_ctx);
    for (int l = 0; l < c->n_layers; l++) {
        size_t rb = c->parts[l].row_floats * (size_t)s->pos * sizeof(float);
        if (rb) memcpy(c->rows[l], s->rows[l], rb);
        if (c->parts[l].state_floats) memcpy(c->state[l], s->state[l], c->parts[l].state_floats * sizeof(float));
    }
    c->pos = s->pos;
    return 0;
}

int cache_snap_pos(const cache_snap *s) { return s->pos; }
size_t cache_snap_bytes(const cache_snap *s) { return s->bytes; }
