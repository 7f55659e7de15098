/* prefix.h — the prefix cache: cache contents of token sequences that no slot holds any more.
 *
 * Each entry is a token sequence and a blob with the cache of its positions [0, n), of one
 * of two kinds:
 *  - rows (a family's cache_export, registry.h: KV / MLA latent rows, position-major):
 *    any prefix of the entry is usable, rows [0, m) being the blob's first bytes;
 *  - a snapshot (a family's snapshot op: recurrent state + rows at exactly n tokens,
 *    hybrid families): usable only whole, by a prompt that starts with all n tokens.
 * Lookup returns the entry giving the longest usable prefix of a prompt (a linear scan over
 * the entries: they are few, each one a conversation or a chunk boundary of one). Memory
 * is bounded by a byte budget: inserting evicts the least recently used entries until the
 * new one fits; an entry bigger than the whole budget is refused. A rows entry whose tokens
 * are a prefix of a newer rows entry's is dropped (the newer one covers it); snapshots at
 * shorter prefixes stay (a prompt may diverge after them). Not thread-safe: the engine calls
 * it under its lock. */
#ifndef CI_SRV_PREFIX_H
#define CI_SRV_PREFIX_H
#include <stddef.h>
#include <stdint.h>

typedef struct pfx_store pfx_store;

typedef enum { PFX_ROWS = 0, PFX_SNAPSHOT = 1 } pfx_kind;

/* free_blob releases an entry's blob (free() for rows, cache_snap_free for snapshots). */
pfx_store *pfx_new(size_t budget_bytes, void (*free_blob)(void *));   /* NULL when out of memory */
void pfx_free(pfx_store *p);
/* The entry giving the longest prefix of toks[0..n) usable for a prompt that may take at
 * most `limit` cached tokens: its index, or -1 when none gives one; *match = that length
 * (<= limit; a snapshot entry only matches whole). */
int pfx_lookup(pfx_store *p, const int *toks, int n, int limit, int *match);
/* The blob of entry i; marks it recently used. */
const void *pfx_blob(pfx_store *p, int i);
/* 1 when an entry already gives all of toks[0..n) (a rows entry holding them, or a
 * snapshot of exactly them). */
int pfx_covers(pfx_store *p, const int *toks, int n);
/* Adds toks[0..n) with its blob of the given kind; takes ownership of blob (freed on
 * refusal too); `bytes` is what the blob costs. Returns 1 when stored, 0 when refused (too
 * big for the budget or out of memory). */
int pfx_insert(pfx_store *p, const int *toks, int n, pfx_kind kind, void *blob, size_t bytes);
size_t pfx_bytes(const pfx_store *p);
size_t pfx_budget(const pfx_store *p);
int pfx_count(const pfx_store *p);

#endif
