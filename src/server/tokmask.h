/* tokmask.h — which tokens of a vocabulary keep a schema matcher (schema.h) alive: the
 * token mask of constrained decoding, made cheap.
 *
 * The token texts are laid out once as a trie in preorder (node i's subtree is nodes
 * (i, end[i]); its tokens are a contiguous run of a sorted token order), so a mask is one
 * pass over the nodes: a node's byte is fed to its parent's state, a refusal skips the
 * whole subtree, and shared prefixes are fed once. Inside a plain string body (no pattern),
 * a subtree whose every path is plain text (no quote, backslash or control byte, well-formed
 * UTF-8, no U+FFFD) is taken whole without walking it, when the string has room for its
 * longest token; in free text (tool calls with tool_choice auto), a subtree without the
 * marker's first byte likewise. Built once per server; masks are made by one thread at a
 * time (the scheduler's): the walk's scratch lives in the trie. */
#ifndef CI_SRV_TOKMASK_H
#define CI_SRV_TOKMASK_H
#include "schema.h"
#include <stdint.h>

typedef struct tm_trie tm_trie;

/* Token i < n has the text bytes[off[i], off[i + 1]); empty texts are left out. stop: the
 * byte that opens the free-text marker (sm_text_stop), or -1; subtrees without it are taken
 * whole in free text. 0 or -1 (no memory). */
int tm_build(const char *bytes, const uint32_t *off, int n, int stop, tm_trie **out);
void tm_free(tm_trie *t);
int tm_nodes(const tm_trie *t);
/* Tokens with a text in rank order (sorted by text: a subtree's tokens are a run, so a
 * mask is written with memset runs); *n ranks. Ids without a text have no rank. */
const int *tm_order(const tm_trie *t, int *n);
/* ok[q] = 1 (else 0) for every rank q whose token's whole text state s can take; ok has
 * tm_order's n entries. Returns how many. The matcher's arena is back where it was on
 * return. -1 on no memory. */
int tm_mask(const tm_trie *t, sm_matcher *m, const sm_state *s, uint8_t *ok);

#endif
