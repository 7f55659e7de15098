/* cache.h — one sequence's cache for hybrid models: per layer, what that layer needs.
 *
 * A layer's cache is made of two parts, either of which may be empty:
 *   rows  : per-token state, max_ctx rows of row_floats (attention K and V, MLA latent);
 *           row p belongs to position p and stays valid while p < pos.
 *   state : fixed-size state overwritten as tokens pass (conv windows: the last K-1
 *           inputs; DeltaNet S [Hv, Dv, Dk]; Mamba2 S [Hm, P, N]; all f32).
 * Families describe their layers with cache_part specs at session creation; the forward
 * path addresses the buffers through cache_rows / cache_state.
 *
 * Recurrent state cannot be trimmed like KV, so prefix reuse goes through snapshots:
 * cache_snapshot copies the fixed state of every layer plus rows [0, pos) and pos;
 * cache_restore puts them back into a cache of the same shape (same specs, max_ctx at
 * least pos). A snapshot is self-contained: the cache may be freed before it. */
#ifndef CI_CACHE_H
#define CI_CACHE_H
#include <stddef.h>

typedef struct {
    size_t row_floats;      /* per-token floats (0: none) */
    size_t state_floats;    /* fixed-state floats (0: none) */
} cache_part;

typedef struct {
    int n_layers, max_ctx, pos;
    cache_part *parts;      /* [n_layers] */
    float **rows;           /* [n_layers] -> [max_ctx, row_floats] or NULL */
    float **state;          /* [n_layers] -> [state_floats] or NULL (zeroed at init and reset) */
} ci_cache;

typedef struct cache_snap cache_snap;

int cache_init(ci_cache *c, int n_layers, const cache_part *parts, int max_ctx, const char *family, char *err,
               size_t errlen);
void cache_free(ci_cache *c);
/* Forget the sequence: pos = 0 and every fixed state zeroed. */
void cache_reset(ci_cache *c);
static inline float *cache_rows(const ci_cache *c, int layer) { return c->rows[layer]; }
static inline float *cache_state(const ci_cache *c, int layer) { return c->state[layer]; }
/* Bytes one token of context costs (rows only) and the fixed bytes (state only). */
size_t cache_bytes_per_token(const ci_cache *c);
size_t cache_state_bytes(const ci_cache *c);

cache_snap *cache_snapshot(const ci_cache *c);        /* NULL when out of memory */
int cache_restore(ci_cache *c, const cache_snap *s, char *err, size_t errlen);
int cache_snap_pos(const cache_snap *s);
size_t cache_snap_bytes(const cache_snap *s);
void cache_snap_free(cache_snap *s);
/* Snapshots of caches that are not a ci_cache (DeepSeek V4's window rings and compressor
 * states): one zeroed blob of `bytes` at position pos, written and read by the family
 * (cache_snap_blob: the blob and its size; NULL for a ci_cache snapshot). cache_restore
 * refuses a blob snapshot; cache_snap_pos / _bytes / _free work on both kinds. */
cache_snap *cache_snap_blob_new(int pos, size_t bytes);
void *cache_snap_blob(const cache_snap *s, size_t *bytes);
/* A buffer outside host memory (a backend's: a device snapshot's bytes stay on the device) that
 * snapshot s owns from now on, at most one: cache_snap_free releases it with release(ctx, buf);
 * cache_snap_bytes counts its bytes. cache_snap_held returns it (NULL: none) and its size and
 * ctx (the owner, so a reader can tell whose memory it is). */
void cache_snap_hold(cache_snap *s, void *buf, size_t bytes, void (*release)(void *ctx, void *buf), void *ctx);
void *cache_snap_held(const cache_snap *s, size_t *bytes, void **ctx);

#endif
