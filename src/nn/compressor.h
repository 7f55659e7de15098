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
 * projected tokens, the last complete window's Ca series (CSA), and the entries so far, in
 * one backend buffer laid out as backend.h's ci_v4cmp says; the backend's v4_compress feeds
 * it. Its entry count follows from the position: (P / ratio) entries at position P. */
#ifndef CI_COMPRESSOR_H
#define CI_COMPRESSOR_H
#include "../backend/backend.h"
#include "rope.h"

typedef struct {
    int ratio, d, overlap;       /* overlap: 1 for CSA (two series), 0 for HCA */
    ci_mat kv, gate;             /* [(1+overlap)·d, hidden] */
    float *ape;                  /* [ratio, (1+overlap)·d] */
    float *norm;                 /* [d] */
    ci_v4cmp op;                 /* what the ops read (set by cmp_set_rope) */
} cmp_block;

/* Fills c->op from the block and the rope of its entries (eps: the entries' RMSNorm). */
void cmp_set_rope(cmp_block *c, const rope_table *rt, float eps);
/* Entries a state of a max_ctx-token session holds, and its floats. */
int cmp_state_cap(const cmp_block *c, long long max_ctx);
size_t cmp_state_bytes(const cmp_block *c, long long max_ctx);
/* The projections of n rows (pkv[i], pgate[i] [n, m·d]) of nc (1 or 2) compressors reading the
 * same rows xn = rmsnorm(x) · norm_w (eps): their kv and gate products in one norm_matmul_n (one
 * launch on a device; xn scratch). Then cmp_push: each row into its sequence's state: state (the
 * rows are consecutive tokens of one sequence) or states[t * tab_step] (one row per sequence),
 * at positions pos (backend memory), op a compressor's (cmp_op). */
void cmp_project_norm(ci_backend *be, int nc, const cmp_block *const *cs, float *xn, const float *x,
                      const float *norm_w, float eps, int n, float *const *pkv, float *const *pgate);
void cmp_push(ci_backend *be, const ci_v4cmp *op, float *state, float *const *states, int tab_step, const float *pkv,
              const float *pgate, int n, const int32_t *pos);
/* What the ops read of c: c->op, with its entries on a block pool when pg is a call's block
 * tables in positions (backend.h ci_v4cmp ent: region ent; pg NULL or pg->tab NULL: the entries
 * stay in the states). c->ratio must then be a power of two up to 2^pg->blk_log2. */
ci_v4cmp cmp_op(const cmp_block *c, float *ent, const ci_pages *pg);
#endif
