/* compressor.h — DeepSeek V4's KV compressor (CSA / HCA layers and the CSA indexer's keys).
 *
 * Every `ratio` consecutive tokens (a window; window w holds positions w·ratio ..
 * w·ratio + ratio - 1) become one compressed entry of `d` floats. Per token the compressor
 * projects kv = W_kv x and gate = W_gate x + ape[position % ratio] (m·d values each).
 *   HCA (m = 1): entry_w[c] = Σ_s softmax_s(gate[s][c]) · kv[s][c] over the window's tokens.
 *   CSA (m = 2, overlapping): each token carries two series, Ca = [0, d) and Cb = [d, 2d);
 *     entry_w[c] is the softmax-weighted sum over 2·ratio slots: window w-1's Ca values then
 *     window w's Cb values (window 0 has no predecessor: those slots weigh 0).
 * Then entry = rmsnorm(entry) · norm and RoPE (interleaved pairs, the last rot_dim dims) at
 * position w·ratio. Entry w exists once its window's last token has been seen, and query
 * position p may use entries w < (p + 1) / ratio.
 *
 * The state carried between forwards (and so between decode steps): the current window's
 * projected tokens, the last complete window's Ca series (CSA), and the entries so far. */
#ifndef CI_COMPRESSOR_H
#define CI_COMPRESSOR_H
#include "../backend/backend.h"
#include "rope.h"

typedef struct {
    int ratio, d, overlap;       /* overlap: 1 for CSA (two series), 0 for HCA */
    ci_mat kv, gate;             /* [(1+overlap)·d, hidden] */
    float *ape;                  /* [ratio, (1+overlap)·d] */
    float *norm;                 /* [d] */
} cmp_block;

typedef struct {
    float *pend_kv, *pend_gate;  /* [ratio, m·d]: the current window's tokens (gate + ape) */
    float *prev_kv, *prev_gate;  /* [ratio, d]: the last complete window's Ca (overlap) */
    int has_prev;
    float *entries;              /* [cap, d] */
    int n, cap;
} cmp_state;

int cmp_state_init(cmp_state *s, const cmp_block *c, int max_ctx);
void cmp_state_free(cmp_state *s);
void cmp_state_reset(cmp_state *s);
/* Bytes a state holds for a max_ctx-token session (what cmp_state_init allocates). */
size_t cmp_state_bytes(const cmp_block *c, long long max_ctx);

/* Tokens enter in two steps, so rows of different sequences can share the projections:
 * cmp_project computes n rows' projections (pkv, pgate [n, m·d]); cmp_push feeds one row
 * (kv, gate: its m·d values) at position p into the state s of its own sequence and appends
 * the entry of the window it completes. */
void cmp_project(ci_backend *be, const cmp_block *c, const float *xn, int n, float *pkv, float *pgate);
void cmp_push(ci_backend *be, const cmp_block *c, cmp_state *s, const float *kv, const float *gate, int p,
              const rope_table *rt, float eps);

#endif
