/* model.h — the loaded model and a sequence's session, as the families see them.
 *
 * A ci_model owns its config, the mmap'd checkpoint, the backend and the family's weight
 * struct (impl). A ci_session is one sequence: its cache and scratch, sized at creation
 * (the decode path allocates nothing), and its position. Families written against the
 * backend's memory boundary (dense.c: llama, qwen3, qwen3_moe) take that cache and scratch
 * from be->alloc and place their weights with be->weight, so a device can hold them; the
 * others still use host memory and run on the CPU backend only (ci_family.cuda = 0). */
#ifndef CI_MODEL_H
#define CI_MODEL_H
#include "../backend/backend.h"
#include "../io/config.h"
#include "../io/safetensors.h"
#include "../io/weights.h"
#include "registry.h"
#include "../cache/kv_pages.h"
#include <pthread.h>
#include <stdint.h>

struct tok_tokenizer;

typedef struct ci_model {
    char dir[4096];
    ci_config cfg;
    const ci_family *family;
    st_set *st;
    ci_backend *be;             /* CPU, or CUDA for a family with `cuda` (ci_model_opts.device) */
    int owns_backend;
    int no_graphs;              /* ci_model_opts.no_graphs: decode steps run eagerly */
    void *impl;                 /* family weights + hyper-params */
    int64_t n_params;           /* elements in bound tensors (tied counted once) */
    size_t bytes_by_dtype[CI_DTYPE_COUNT];
    /* Bytes of weights a decode step reads (every matrix once, one embedding row). */
    size_t decode_bytes;
    /* Debug hook: called with named intermediates (e.g. "layer 3 attn_out"); NULL = off. */
    void (*dump)(void *ctx, const char *name, int layer, const float *x, int n, int dim);
    void *dump_ctx;
    /* make-random: the tensor list recorded by load() when st == NULL (owned). */
    w_spec *specs;
    int n_specs;
    /* ci_generate_text: the folder's tokenizer, loaded on first use under tk_mu (owned). */
    struct tok_tokenizer *tk;
    pthread_mutex_t tk_mu;
    /* A paged family's shared block pool (ci_model_kv_pool; owned), or NULL: each session
     * then has a pool of its own, sized for its context. */
    kv_pool *kv_pool;
    /* Its rows in backend memory as the family's pool_init allocated them (ci_pool_regions):
     * up to CI_POOL_REGIONS buffers of `layers` regions of n_blocks * 2^rows_log2 rows of
     * `row_floats` each (rows_log2 KV_BLOCK_LOG2: a row a position; less: a row per
     * 2^(KV_BLOCK_LOG2 - rows_log2) positions, DeepSeek V4's compressed entries) (the family
     * owns and frees them). */
    struct ci_pool_region { float *buf; size_t row_floats; int layers, rows_log2; } pool_rows[4];
    int pool_blocks;
    /* [host_logits_cap] floats: ci_forward_argmax / ci_forward_batch_argmax's logits for a family
     * without an argmax op, kept so a decode step does not allocate (grown on demand; one user
     * at a time, as the backend's scratch: the model's forwards run on one thread) */
    float *host_logits;
    size_t host_logits_cap;
    int ep;                     /* a tensor-parallel rank (ci_model_open_rank): routed experts placed
                                 * whole across the ranks (1) or every expert's columns split (0) */
} ci_model;

typedef struct ci_session {
    ci_model *m;
    int max_ctx;                /* tokens the cache holds */
    int pos;                    /* tokens already in the cache */
    int max_rows;               /* ci_session_new_rows: the most tokens one call will pass (0: any), so
                                 * a family may size its scratch by it (dense.c does) */
    void *impl;                 /* family cache + scratch */
    /* Paged families (ops->pool_init): the block table of the sequence and the pool it draws
     * from (the model's shared one, or own_pool: one sized for max_ctx, freed with it). */
    kv_seq pages;
    kv_pool *pool;
    int own_pool;
    int32_t *pages_dev;         /* [pages.cap] the table's backend copy (kernels read it) */
} ci_session;

/* ci_model_open for rank `rank` of communicator comm (src/parallel/comm.h; NULL: the whole
 * model, as ci_model_open): the CPU backend joins comm before the family's load, which then
 * keeps only this rank's part of the weights (a family without `tp` is refused, naming itself):
 * attention heads and MLP columns split (parallel/shard.h), and routed experts either placed
 * whole, an even share of them per rank (ep = 1: expert parallel), or each split by columns
 * (ep = 0). The ranks are threads of this process: each opens its own model and runs the same
 * calls; every rank's logits are the same bits. The CPU only (device in opts must be 0). */
struct ci_comm;
int ci_model_open_rank(const char *dir, const ci_model_opts *opts, struct ci_comm *comm, int rank, int ep,
                       ci_model **out, char *err, size_t errlen);

/* ---- paged caches (registry.h pool_init; kv_pages.h) ----------------------------------
 * ci_model_kv_pool: gives the model one pool of n_blocks blocks that every session created
 * afterwards draws from (sessions already open keep their own). The rest act on one
 * session of a paged family (ci_session_paged), keeping s->pos consistent with the blocks:
 * reserve: blocks for positions [0, tokens) (0, or -1 with err: the pool is short);
 * truncate: s->pos = the positions kept of [0, min(tokens, pos)) (a shared or published
 *   block cut into is dropped: fewer than asked, a multiple of the block);
 * publish: names the full blocks of the first n positions (toks: the sequence's tokens)
 *   so other sequences can take them; tail: the partly filled last block too (kv_pages.h:
 *   copied, or taken over, never shared, by a later match; for a session about to let its
 *   blocks go);
 * match: on an emptied session (pos 0, no blocks), takes the published blocks holding the
 *   longest full-block prefix of toks[0, n), then copies the shared rows of a published tail
 *   after them or of a full one that shares more into a block of its own (copy on write,
 *   kv_pages.h kvs_match_copy; a tail is taken over when no block is free), at most limit
 *   positions; s->pos = that. */
int ci_model_kv_pool(ci_model *m, int n_blocks, char *err, size_t errlen);
/* 1 when ci_model_kv_pool can give m a pool: its family pages (pool_init) and m's cache fits
 * the blocks (pool_ok). */
int ci_model_pageable(const ci_model *m);
/* ci_session_new for a caller that never passes more than max_rows tokens to one forward
 * (nor more than max_rows sequences to one forward_batch): the server's slots. */
int ci_session_new_rows(ci_model *m, int max_ctx, int max_rows, ci_session **out, char *err, size_t errlen);
size_t ci_model_kv_block_bytes(const ci_model *m);
/* For a family's pool_init: the pool's two buffers, each of layers regions of n_blocks *
 * KV_BLOCK rows of row_floats floats (layers_b 0: no second one, *b stays as it is), both or
 * neither: 0, or -1 with one line naming the blocks and MiB. Recorded in m->pool_rows. */
int ci_pool_buffers(ci_model *m, int n_blocks, float **a, size_t row_floats_a, int layers_a, float **b,
                    size_t row_floats_b, int layers_b, char *err, size_t errlen);
/* The general form: k <= CI_POOL_REGIONS regions as spec says (its buf ignored; a region of 0
 * layers or floats gets no buffer), their buffers into bufs[i] (NULL for an empty one); all
 * or none: 0, or -1 with one line naming the blocks and MiB. Recorded in m->pool_rows. */
enum { CI_POOL_REGIONS = 4 };
int ci_pool_regions(ci_model *m, int n_blocks, const struct ci_pool_region *spec, int k, float **bufs, char *err,
                    size_t errlen);
int ci_session_paged(const ci_session *s);
/* 1 when s draws from the model's shared pool (its rows through its table), 0 for an own
 * pool or an unpaged session */
static inline int ci_session_pages_shared(const ci_session *s) { return s->pool && !s->own_pool; }
int ci_session_reserve(ci_session *s, int tokens, char *err, size_t errlen);
int ci_session_truncate(ci_session *s, int tokens);
/* ci_session_truncate, but a shared or published block cut into is copied into a block of
 * the session's own (the rows it keeps, every layer; copy on write) when the pool has one:
 * tokens kept, or fewer when it has none. */
int ci_session_truncate_copy(ci_session *s, int tokens);
void ci_session_publish(ci_session *s, const int *toks, int n, int tail);
int ci_session_match(ci_session *s, const int *toks, int n, int limit);
/* For a family's session_init / session_free: the table (and its backend copy) and, without
 * a model pool, an own pool of ceil(max_ctx / KV_BLOCK) blocks (*n_blocks: the pool's blocks
 * either way). */
int ci_session_pages_init(ci_session *s, int *n_blocks, char *err, size_t errlen);
void ci_session_pages_free(ci_session *s);
/* For a family's forward: blocks for positions [0, tokens) and the table's backend copy up
 * to date (0, or -1 with err: the pool is short). tokens past max_ctx are left to the
 * forward's own check. */
int ci_session_pages_ready(ci_session *s, int tokens, char *err, size_t errlen);
/* The addressing of a chunk of s: every row through its table (in *buf, returned), or NULL
 * when s has a pool of its own (its blocks are its positions': position p is row p). */
const ci_pages *ci_session_chunk_pages(const ci_session *s, ci_pages *buf);
/* The pool row of position p of s (host side: exports and imports). */
int64_t ci_session_page_row(const ci_session *s, int64_t p);

/* Shared by every family's forward (model.c):
 * ci_forward_check: n > 0, room for n more tokens in the session, every id in [0, vocab).
 * ci_forward_chunks: runs chunk_fn over pieces of at most `chunk` tokens, each with the
 *   logits rows it owns ([k, vocab] when all_logits, else only the last piece gets logits).
 * ci_lm_head: final RMSNorm + head for all n rows (xn scratch [n, dim]) or the last one
 *   (last scratch [dim]). */
/* Ends a family's load(): w_finish, then hands the binder's results to the model (owned
 * f32 copies into *owned / *n_owned for the family to free with w_owned_free; counts;
 * in record mode the tensor specs for make-random) and releases the binder. */
int ci_bind_finish(w_binder *b, ci_model *m, float ***owned, int *n_owned, char *err, size_t errlen);
/* 1 when CINFER_CUDA_UNVERIFIED=1 asks for CUDA paths that have not passed the GPU suite yet
 * (a family flagged CI_CUDA_UNVERIFIED); the suite sets it. */
int ci_cuda_unverified_ok(void);
/* The backend's sticky status (backend.h) as one error line naming the family and the
 * backend; 0 while every op so far has worked (always on the CPU). */
int ci_backend_check(const ci_model *m, char *err, size_t errlen);
typedef void (*ci_chunk_fn)(ci_session *s, const int *tokens, int n, float *logits, int all_logits);
int ci_forward_check(const ci_session *s, const int *tokens, int n, int vocab, char *err, size_t errlen);
/* The checks every forward_batch (registry.h) starts with: n > 0, one model, room for one
 * more token in each session, every id in [0, vocab), no session twice. */
int ci_batch_check(ci_session *const *ss, const int *tokens, int n, int vocab, char *err, size_t errlen);
void ci_forward_chunks(ci_session *s, const int *tokens, int n, float *logits, int all_logits, int vocab, int chunk,
                       ci_chunk_fn chunk_fn);
void ci_lm_head(ci_backend *be, float *logits, int all_logits, const float *x, int n, int dim, const float *norm_w,
                float eps, const ci_mat *head, float *xn, float *last);

/* Backend buffers of a session: ci_buf_alloc sets *bad when the backend is out of memory
 * (0 bytes asks for 4, so an empty buffer is not mistaken for a failure); ci_buf_release
 * takes NULL. ci_graphs_allowed: whether a decode step may be recorded and replayed (the
 * backend has graphs, --no-graphs is off, no intermediates are being dumped). */
void *ci_buf_alloc(ci_backend *be, size_t bytes, int *bad);
void ci_buf_release(ci_backend *be, void *p);
int ci_graphs_allowed(const ci_model *m);
/* Debug dumps (ci_model.dump) of n rows of dim floats at x, backend memory: downloaded
 * first on a device backend; nothing when no dump is set. */
void ci_dump_buf(ci_model *m, const char *name, int layer, const float *x, int n, int dim);

#define CI_DUMP(m, name, layer, x, n, dim) \
    do { if ((m)->dump) (m)->dump((m)->dump_ctx, (name), (layer), (x), (n), (dim)); } while (0)

#endif
