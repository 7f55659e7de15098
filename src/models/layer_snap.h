/* layer_snap.h — what the hybrid families (lfm2, qwen_hybrid, nemotron_h) share of their
 * caches: the attention layers' rows on the block pool, and snapshots of a session's
 * per-layer cache for prefix reuse (a recurrent state cannot be trimmed like KV rows).
 *
 * Rows: the attention layers keep [k | v] rows in one buffer of the pool's layout
 * (model.h paged caches): every attention layer's lrows rows (lrows = the pool's blocks *
 * KV_BLOCK) one layer after the other, position p of a session at row
 * ci_session_page_row(s, p) of each layer. The buffer is the model's pool (hyb_pool_init,
 * the family's pool_init) or, for a session opened without one, the session's own (its
 * positions' rows addressed directly: position p at row p).
 *
 * Snapshots: each layer keeps, in backend memory, KV rows (row_floats per position: rows
 * [0, pos) are saved), a fixed state (state_floats: saved whole) or nothing. A session on
 * the model's shared pool gives its attention layers as keeping nothing (row_floats 0): the
 * rows stay in the pool's blocks, and a restore needs the session to hold blocks for the
 * snapshot's positions (ci_session_match first).
 *
 * A snapshot is a host blob, a header of 1 + 2 n_layers int32 (n_layers, then per layer its
 * row floats and its state floats: the cache's shape), and the layers' bytes (per layer its
 * rows or its state, in layer order) in one buffer of the session's backend that the snapshot
 * holds (cache_snap_hold): taken and restored with the backend's copy, so on a device they
 * never cross to the host. When the backend has no room for that buffer the bytes follow the
 * header in the blob instead (downloaded, uploaded back). A restore checks the header and the
 * size against the session's cache; a snapshot held by another backend (another model's)
 * comes back through host memory. */
#ifndef CI_LAYER_SNAP_H
#define CI_LAYER_SNAP_H
#include "model.h"
#include "../cache/cache.h"
#include <stddef.h>

typedef struct {
    float *buf;            /* the layer's backend buffer (NULL: it keeps nothing) */
    size_t row_floats;     /* a KV layer: floats per position; else 0 */
    size_t state_floats;   /* a recurrent layer: floats of its state; else 0 */
} layer_part;

/* The model's pool of n_blocks blocks in *pool: n_attn attention layers of [k | v] rows of
 * row_floats each (every attention layer of a hybrid is as wide). 0, or -1. */
int hyb_pool_init(ci_model *m, int n_blocks, size_t row_floats, int n_attn, float **pool, char *err, size_t errlen);
/* For session_init: the block table, and *base = the rows (model_pool, or an own buffer for a
 * session without a model pool), *lrows = rows per layer. 0, or -1 with err. */
int hyb_rows_init(ci_session *s, float *model_pool, float **base, int64_t *lrows, char *err, size_t errlen);
/* For session_free: an own buffer released, the table freed. */
void hyb_rows_free(ci_session *s, float *base);

/* A snapshot's bytes in backend memory (layer_snap's and DeepSeek V4's): snap takes buf (bytes
 * of be's memory) and releases it with be when freed. */
void snap_hold_buf(cache_snap *snap, ci_backend *be, void *buf, size_t bytes);
/* For a restore into be of a snapshot whose bytes another backend holds (owner, another
 * model's): a host copy of them (owner's download; free it), or NULL with err (fam: the
 * family that says it). */
char *snap_foreign_copy(const void *held, void *owner, size_t bytes, const char *fam, char *err, size_t errlen);

/* layer l of session s */
typedef void (*layer_part_fn)(const ci_session *s, int l, layer_part *out);

/* The cache of s at position pos (its family's n_layers layers). NULL with err set on failure. */
cache_snap *layer_snapshot(const ci_session *s, int n_layers, layer_part_fn part, int pos, char *err, size_t errlen);
/* Uploads snap into s's cache when its shape is this cache's and its position fits s's context;
 * *pos is set to the snapshot's position. 0, or -1 with err naming the family and the mismatch. */
int layer_restore(ci_session *s, int n_layers, layer_part_fn part, const cache_snap *snap, int *pos, char *err,
                  size_t errlen);

#endif
