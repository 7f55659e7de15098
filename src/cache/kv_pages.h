/* kv_pages.h — the block allocator of a paged cache (the host's bookkeeping; the rows live in
 * backend memory, addressed through backend.h's ci_pages).
 *
 * A pool has n_blocks blocks of blk positions each (a power of two), shared by every
 * sequence of a model. A sequence holds a block table: the ids of the blocks of its
 * positions [0, blk), [blk, 2 blk), ... Blocks are reference-counted and in one of three
 * states:
 *   in use : ref > 0 (a table holds it);
 *   cached : ref == 0 but published (below): its rows stay, and it sits on an LRU list;
 *   free   : ref == 0 and not published.
 * Publishing names a full block by what it holds: the block before it in the sequence (its
 * id and generation) and its blk token ids, so a name is exact, never a hash guess (the
 * hash only picks the bucket). A sequence starting with the same tokens takes the published
 * blocks (kvs_match: ref + 1) instead of computing them; a published block is never written
 * again (its holders are past it; truncation drops a block it would cut into). A sequence's
 * last, partly filled block may be published too (kvs_publish's tail): named by its parent
 * and the tokens it holds so far, it is not shared but taken over: a sequence whose tokens go
 * on from the same full blocks and then share its tokens (all of them, all its own, or at
 * least half of the block's) takes it when nobody holds it (kvs_match), unnamed from then on,
 * and writes its own rows after the ones it shares; a holder that writes on past them only
 * writes rows the name does not cover, and a full block's name replaces a tail's. A
 * sequence that shares only the start of a full block copies it instead, and a caller that
 * can copy rows copies a last block rather than take it over, so it stays for others (copy
 * on write: kvs_match_copy and kvs_truncate_copy give the sequence a new block in its place,
 * whose rows the caller copies from the named one). Allocation
 * takes a free block, else evicts the least recently used cached one (its generation moves
 * on, so names made under it stop matching). Not thread-safe: the engine calls it under
 * its lock. */
#ifndef CI_KV_PAGES_H
#define CI_KV_PAGES_H
#include <stddef.h>
#include <stdint.h>

enum { KV_BLOCK_LOG2 = 7, KV_BLOCK = 1 << KV_BLOCK_LOG2 }; /* positions per block (the CPU's attention block) */

typedef struct kv_pool kv_pool;

typedef struct {
    int32_t *tab;           /* [cap] block ids of positions [0, n * blk) */
    int n, cap;
    int dirty;              /* tab changed since the backend's copy was written (the holder clears it) */
} kv_seq;

typedef struct {
    int blocks, blk, in_use, cached, free;
    long long match_lookups, match_hits;   /* kvs_match: blocks asked for, blocks found */
    long long evictions;
    long long tail_hits;                   /* kvs_match: last blocks taken over (or copied) */
    long long copies;                      /* kvs_match_copy: blocks' shared rows copied */
} kv_pool_stats;

/* NULL when out of memory or blk is not a power of two >= 1, n_blocks < 1. */
kv_pool *kvp_new(int n_blocks, int blk);
void kvp_free(kv_pool *p);
int kvp_blk(const kv_pool *p);
int kvp_blocks(const kv_pool *p);
/* Blocks an allocation can still get: free + cached. */
int kvp_available(const kv_pool *p);
void kvp_stats(const kv_pool *p, kv_pool_stats *s);

/* cap: the most blocks the sequence may hold (its context / blk, rounded up). 0 or -1. */
int kvs_init(kv_seq *s, int cap);
void kvs_free(kv_pool *p, kv_seq *s);        /* drops every block, frees the table */
/* Blocks for positions [0, tokens): allocates what is missing. 0, or -1 (nothing taken)
 * when the pool cannot give them or tokens exceeds the table. */
int kvs_reserve(kv_pool *p, kv_seq *s, int tokens);
/* Keeps the blocks of positions [0, tokens) and drops the rest; a kept last block that is
 * partly cut and published or shared is dropped too (it must not be written). Returns the
 * positions still held: tokens, or less (a multiple of blk). */
int kvs_truncate(kv_pool *p, kv_seq *s, int tokens);
/* kvs_truncate, but such a last block is copied rather than dropped when the pool has a
 * block to give: the sequence holds a new block in its place (copy on write), and *from /
 * *to are the old block and the new one, whose rows of positions [tokens - tokens % blk,
 * tokens) the caller copies (both -1 when nothing is to copy). */
int kvs_truncate_copy(kv_pool *p, kv_seq *s, int tokens, int *from, int *to);
/* Publishes the full blocks of positions [0, n) that the sequence holds, toks[0, n) being
 * its tokens; a block already published is left as it is. A block whose name another
 * block already has is not published (the first keeps it), and the names of the blocks
 * after it are made under that other block, so a walk of the names reaches them. tail: the partly filled block of
 * positions [n - n % blk, n) too (when the sequence alone holds it and its parent is named). */
void kvs_publish(kv_pool *p, kv_seq *s, const int32_t *toks, int n, int tail);
/* On an empty sequence (n == 0): takes the published blocks that hold toks' first full
 * blocks, in order, as long as they match and at most `limit` positions, then of the
 * published last blocks after them that nobody holds, the one that shares most of toks' next
 * tokens (within limit; all of the block's, all of toks', or at least half of the block's).
 * Returns the positions covered. */
int kvs_match(kv_pool *p, kv_seq *s, const int32_t *toks, int n, int limit);
/* kvs_match for a caller that copies rows: the last block it would take over, or a full
 * published block after the matched ones that shares more of toks' next tokens (at least
 * blk / 8 of them), is copied instead (copy on write: the named block stays for others): a
 * new block in its place, *from / *to that block and the new one, whose rows of the shared
 * positions the caller copies (both -1 when nothing is to copy). With no block to give, a
 * last block is taken over as kvs_match does. */
int kvs_match_copy(kv_pool *p, kv_seq *s, const int32_t *toks, int n, int limit, int *from, int *to);
/* Positions of toks[0, n) that kvs_match would give, without taking anything. */
int kvp_probe(const kv_pool *p, const int32_t *toks, int n, int limit);

#endif
