/* prefix.h — the prefix cache: cache rows of token sequences that no slot holds any more.
 *
 * Each entry is a token sequence and the cache rows of its positions [0, n) as one blob
 * (a family's cache_export, registry.h). Lookup returns the entry sharing the longest token
 * prefix with a prompt (a linear scan over the entries: they are few, each one whole
 * conversation). Memory is bounded by a byte budget: inserting evicts the least recently
 * used entries until the new one fits; an entry bigger than the whole budget is refused.
 * An entry whose tokens are a prefix of a newer entry's is dropped (the newer one covers
 * it). Not thread-safe: the engine calls it under its lock. */
#ifndef CI_SRV_PREFIX_H
#define CI_SRV_PREFIX_H
#include <stddef.h>
#include <stdint.h>

typedef struct pfx_store pfx_store;

pfx_store *pfx_new(size_t budget_bytes);   /* NULL when out of memory */
void pfx_free(pfx_store *p);
/* The entry with the longest common prefix with toks[0..n): its index, or -1 when none
 * shares a token; *match = the common length. */
int pfx_lookup(pfx_store *p, const int *toks, int n, int *match);
/* The rows blob of entry i; marks it recently used. */
const void *pfx_blob(pfx_store *p, int i);
/* 1 when some entry already holds all of toks[0..n). */
int pfx_covers(pfx_store *p, const int *toks, int n);
/* Adds toks[0..n) with its rows; takes ownership of blob (freed on refusal too). Returns 1
 * when stored, 0 when refused (too big for the budget or out of memory). */
int pfx_insert(pfx_store *p, const int *toks, int n, void *blob, size_t bytes);
size_t pfx_bytes(const pfx_store *p);
int pfx_count(const pfx_store *p);

#endif
