/* shard.h — which part of a model each tensor-parallel rank holds, and the weight views of
 * that part.
 *
 * The arithmetic (shd_split, shd_gqa, shd_experts) is family-free: a family's load asks it for
 * its rank's heads, channels, intermediate columns or experts and narrows its bound weights to
 * them with shd_rows (a view: rows [lo, hi), nothing copied) and shd_cols (columns [lo, hi),
 * copied into memory the caller frees: a rank reads, and a device then holds, only its part).
 * What is split, and where the ranks' parts meet again, is the blocks' business (src/nn):
 *   attention: query heads split evenly, key / value heads with them (split when the ranks
 *     divide them, else each rank holds the one its queries read); q/k/v rows, o_proj columns;
 *   MLP (dense, a routed expert, a shared expert): the intermediate width split; gate / up
 *     rows, down columns;
 *   every split block ends in an all-reduce of its output (backend.h all_reduce), the
 *     residual added by rank 0 only;
 *   replicated: embeddings, norms, routers, the head.
 * Errors name the family, the tensor or quantity, the rank count and what would divide. */
#ifndef CI_SHARD_H
#define CI_SHARD_H
#include "../backend/backend.h"
#include <stddef.h>
#include <stdint.h>

typedef struct { int64_t lo, hi; } shd_range;

/* Rank `rank` of `parts` takes [lo, hi) of n items in whole units of `unit` items (heads of
 * head_dim, fp8 blocks, ...): n / unit units split evenly. -1 when unit does not divide n or
 * parts does not divide the units (nothing is split unevenly). */
int shd_split(int64_t n, int64_t unit, int parts, int rank, shd_range *r);

/* Grouped-query attention over tp ranks: rank's query heads *q (an even split of n_heads) and
 * the key / value heads *kv they read (an even split of n_kv when tp divides it; one head
 * shared by tp / n_kv ranks when n_kv divides tp). -1 with err otherwise (what names the
 * family / layer in the message). */
int shd_gqa(int n_heads, int n_kv, int tp, int rank, shd_range *q, shd_range *kv, const char *what, char *err,
            size_t errlen);

/* Columns of a split matrix must start on a quantization block: fp8 block-scale columns
 * (W->block), MLX groups. The unit a split of W's columns (cols = 1) or rows (cols = 0)
 * must keep whole, given the unit the model asks for (heads of hd, 1 column). */
int64_t shd_unit(const ci_mat *W, int cols, int64_t unit);

/* W's rows [lo, hi) as a view into the same data (fp8 and MLX views move scale_row0); out may
 * be W, as for shd_cols. */
void shd_rows(const ci_mat *W, int64_t lo, int64_t hi, ci_mat *out);
/* The copies a rank's split columns live in, freed together (shd_kept_free). */
typedef struct { void **p; int n, cap; } shd_kept;
void shd_kept_free(shd_kept *k);
/* bytes of memory held by k (NULL when out of memory) */
void *shd_kept_alloc(shd_kept *k, size_t bytes);

/* W's columns [lo, hi) as a new [rows, hi - lo] matrix (fp8: its block-scale columns too),
 * kept in *keep. lo and hi on a block boundary (shd_unit). MLX-quantized matrices are refused
 * (-1, err): their column split is not written (MLX / FP4 packing). what names the tensor in errors. */
int shd_cols(const ci_mat *W, int64_t lo, int64_t hi, ci_mat *out, shd_kept *keep, const char *what, char *err,
             size_t errlen);

/* The rows of n segments of W (segs[i] = [lo, hi) each), in that order, as a new matrix kept
 * in keep (a block mixer's rank takes its channels of several projections stacked in one, as
 * DeltaNet's q | k | v). fp8: every segment on W's scale blocks, the grid's rows copied with
 * them. MLX / FP4 refused. what names the tensor in errors. */
int shd_rows_gather(const ci_mat *W, const shd_range *segs, int n, ci_mat *out, shd_kept *keep, const char *what,
                    char *err, size_t errlen);
/* The same columns of a host f32 matrix [rows, cols] (a conv's taps [K, channels]): a new
 * [rows, Σ seg lengths] kept in keep, or NULL when out of memory. */
float *shd_f32_cols(const float *src, int64_t rows, int64_t cols, const shd_range *segs, int n, shd_kept *keep);

/* The same rows of a host f32 matrix [rows, cols] (cols 1: segments of a vector, a conv's
 * bias): a new [Σ seg lengths, cols] kept in keep, or NULL when out of memory. */
float *shd_f32_rows(const float *src, int64_t cols, const shd_range *segs, int n, shd_kept *keep);

/* One rank's part of a split: rank of world, whether routed experts go whole to ranks (ep:
 * expert parallel) or have their columns split, and where split columns' copies are kept. */
typedef struct {
    int world, rank;
    int ep;
    shd_kept *keep;
} shd_ctx;

/* A SwiGLU (or relu², wg NULL) MLP's intermediate width *inter split over W ranks: rank R's
 * gate / up rows and down columns, *inter made its width. The split keeps down's column
 * blocks whole. -1 with err (naming what) when it cannot. */
int shd_mlp(ci_mat *wg, ci_mat *wu, ci_mat *wd, int *inter, const shd_ctx *t, const char *what, char *err,
            size_t errlen);

/* The head [vocab, hidden] is split by rows (each rank's logits gathered after, runner.h)
 * when the ranks divide the vocabulary; else every rank holds it whole. shd_head narrows a
 * bound head to rank t->rank's rows when it is split. */
static inline int shd_head_split(int64_t vocab, int world) { return world > 1 && vocab % world == 0; }
void shd_head(ci_mat *head, int64_t vocab, const shd_ctx *t);

/* The tp_part (backend.h CI_TP_*) of rank R's part of a split block. */
static inline int shd_part(int R) { return R ? CI_TP_REST : CI_TP_LEAD; }

#endif
