/* runner.h — the chunk loop every family on backend memory shares.
 *
 * A forward is cut into chunks of at most ub tokens. Per chunk the runner uploads the token
 * ids and positions, calls the family's ops (which only launch backend ops on the session's
 * buffers: nothing read back, nothing decided from a position), and brings back what the
 * caller asked for: every row's logits (all_logits: final norm + head over groups of
 * logit_rows rows), the last row's logits, or only the last row's argmax (4 bytes).
 *
 * A one-token step that wants the last row's logits or argmax is recorded as a graph on the
 * backend the second time it runs (the first runs eagerly, so ops that size scratch or build
 * tables on their first call do it outside a recording) and replayed from then on: a replay
 * computes the bits eager execution computes.
 */
#ifndef CINFER_RUNNER_H
#define CINFER_RUNNER_H

#include "model.h"

/* What the family's ops end with (ops' head argument). */
enum { CI_HEAD_NONE = 0, CI_HEAD_LAST, CI_HEAD_ARGMAX };

typedef struct ci_runner ci_runner;
/* The ops of one chunk of n <= ub tokens whose ids and positions are in r->ids / r->pos:
 * the layers, then for CI_HEAD_LAST the last row's logits into r->logits1, for
 * CI_HEAD_ARGMAX also their argmax into r->best. The hidden rows end in r->x. */
typedef void (*ci_ops_fn)(ci_session *s, int n, int head);
/* The ops of a batch step of n rows (ss[i] row i; ids, positions and tables uploaded), ending
 * in a head: into dev_logits ([n, vocab] backend memory) when given, else each row's argmax
 * into best (backend memory) when given, else the logits downloaded into logits (host).
 * Nothing read back but in that last form, so the first two can be recorded as graphs. */
typedef void (*ci_batch_ops_fn)(ci_session *const *ss, int n, float *logits, int32_t *best, float *dev_logits);
enum { CI_BATCH_GRAPHS = 64 };

struct ci_runner {
    int ub;                      /* tokens per chunk: the family's scratch rows */
    int vocab, dim;
    float eps;
    ci_ops_fn ops;
    /* set by the family after its placement: what the all-rows head reads */
    float *x, *xn;               /* backend [ub, dim]: the chunk's hidden rows, norm scratch */
    const float *final_norm;     /* backend [dim] */
    const ci_mat *head;          /* placed [vocab, dim] */
    /* owned (ci_runner_alloc / ci_runner_free) */
    int32_t *ids, *pos;          /* backend [ub]: a chunk's token ids and positions */
    int32_t *hpos;               /* host [ub]: positions to upload */
    float *logits1;              /* backend [vocab]: the last row's logits (fixed: graphs record it) */
    int32_t *best;               /* backend [1]: their argmax */
    float *logits_n;             /* backend [logit_rows, vocab]: all-rows groups, on first need */
    int logit_rows, max_group;   /* rows per group (0 until allocated); its cap */
    void *graph[2];              /* the recorded step: [0] CI_HEAD_LAST, [1] CI_HEAD_ARGMAX */
    int graph_failed[2];         /* recording failed once: that step stays eager */
    int graph_ran[2];            /* the step ran once eagerly (it is recorded on its next run) */
    float **tab, **htab;         /* a batch step's per-row cache / state pointers (backend, host), */
    size_t tab_count;            /* tab_count of them, allocated on first need */
    int32_t *ptab, *hptab;       /* a batch step's block tables side by side [ub, ptab_stride] */
    int ptab_stride;             /* (backend, host), grown on need */
    /* ci_runner_batch_step: recorded batch steps of n = 1 + i rows ([0]: argmax into best, [1]:
     * logits into blog), for the steps this runner's session serves with its scratch (ss[0]'s
     * for most families; DeepSeek V4: the longest context's), for rows of at most bgraph_keys
     * context; blog: [blog_rows, vocab] a device batch step's logits */
    void *bgraph[2][CI_BATCH_GRAPHS];
    int bgraph_failed[2][CI_BATCH_GRAPHS];
    int bgraph_keys[2][CI_BATCH_GRAPHS];
    float *blog;
    int blog_rows;
    /* a tensor-parallel rank whose head is split (parallel/shard.h shd_head_split): the head
     * holds vocab / world rows, its products go to lpart [max(ub, max_group), vocab / world] and
     * every rank's are gathered into the full rows */
    int head_split;
    float *lpart;
    /* host: the running chunk's last position + 1 while its ops run eagerly and are not
     * recorded (a chunk of n > 1 tokens), else 0: the families pass it to attention as a
     * bound on the rows' keys (attn_bufs.keys), by which a device sizes a prefill's launch */
    int keys;
};

/* Tokens per chunk (the scratch rows) of a session of a family whose CPU chunk is `base`: base
 * on the CPU; on a device up to CI_DEVICE_CHUNK, since a bigger chunk reads every weight (the
 * routed experts' above all: a chunk of 256 rows gives each expert a handful) fewer times
 * per prompt; clamped to the session's context and its caller's largest call (max_rows), never
 * below base (a batch step's groups of sequences are base rows). CINFER_DEVICE_CHUNK=N (an
 * integer in 1..CI_DEVICE_CHUNK) sets the device's chunk instead, to measure what it buys. */
enum { CI_DEVICE_CHUNK = 4096 };
int ci_runner_chunk_rows(const ci_session *s, int base);

/* Allocates the runner's buffers for chunks of ub tokens (max_group caps the rows of one
 * all-rows head group; 32 MiB of logits bound it too); sets *bad on failure like
 * ci_buf_alloc. Returns 0, or -1 when host memory ran out. */
int ci_runner_alloc(ci_runner *r, ci_backend *be, int ub, int vocab, int dim, float eps, int max_group,
                    ci_ops_fn ops, int *bad);
void ci_runner_free(ci_runner *r, ci_backend *be);

/* The logits group buffer, allocated the first time a caller wants many rows. */
int ci_runner_need_rows(ci_runner *r, const ci_model *m, char *err, size_t errlen);
/* The table of a batch step's per-row pointers (count entries in backend memory, r->tab,
 * and their host staging, r->htab), allocated the first time; count must not grow. */
int ci_runner_need_tab(ci_runner *r, const ci_model *m, size_t count, char *err, size_t errlen);

/* A batch step over paged sessions ss[0..n), one row each (n <= ub): each gets the block of
 * its next position (ci_session_pages_ready), their tables go side by side into r->ptab and
 * *pg addresses them (per_row). 1 when the tables' stride grew (the buffer moved: graphs
 * recorded with the old one must go), 0, or -1 with err. */
int ci_runner_batch_pages(ci_runner *r, ci_backend *be, ci_session *const *ss, int n, ci_pages *pg, char *err,
                          size_t errlen);

/* A batch step's start: the logits rows and a table of tab_count pointers (ci_runner_need_rows,
 * ci_runner_need_tab), the rows' positions into r->hpos, and each row's block table
 * (ci_runner_batch_pages into *pg). Its result (grew: 1, 0), or -1 with err. The family then
 * fills r->htab and calls ci_runner_batch_step. */
int ci_runner_batch_begin(ci_runner *r, ci_model *m, ci_session *const *ss, int n, size_t tab_count, ci_pages *pg,
                          char *err, size_t errlen);
/* A batch step of n <= ub rows: uploads the token ids, r->hpos and the first tab_used entries
 * of r->htab (grew: ci_runner_batch_begin moved the tables, so recorded steps go), then ops
 * into logits [n, vocab]
 * (host; a device's come through blog, one download) or, out_ids given, each row's argmax
 * through best (backend [n]) into out_ids. On a backend with graphs the device forms are
 * recorded per n (up to CI_BATCH_GRAPHS; again when a row's context outgrows the recorded
 * one) and replayed. */
void ci_runner_batch_step(ci_runner *r, ci_model *m, ci_session *const *ss, const int *tokens, int n, size_t tab_used,
                          float *logits, int32_t *best, int *out_ids, int grew, ci_batch_ops_fn ops);

/* The last row's head (the families' CI_HEAD_LAST / CI_HEAD_ARGMAX): the family writes the
 * head's product of its normed last row into ci_runner_head_dst (r->logits1, or a split head's
 * part), then ci_runner_head_end completes r->logits1 (the ranks' parts gathered) and, for
 * CI_HEAD_ARGMAX, leaves its argmax in r->best. */
float *ci_runner_head_dst(ci_runner *r);
void ci_runner_head_end(ci_runner *r, ci_backend *be, int head);

/* The head of all n rows at once into out ([n, vocab], backend memory): nothing read back,
 * so a batch step that ends here can be recorded (the caller downloads out). */
void ci_runner_head_into(ci_runner *r, ci_backend *be, int n, float *out);
/* Final norm of the n rows of r->x into r->xn, then the head over groups of r->logit_rows
 * rows: each group downloaded into logits [n, vocab] (host), or, when best is given, each
 * row's argmax left in best[row] (backend memory) and no logits come back. Needs
 * ci_runner_need_rows first. */
void ci_runner_head_rows(ci_runner *r, ci_backend *be, int n, float *logits, int32_t *best);

/* A whole forward through the session's cache: ci_forward_check, then chunks of at most ub
 * tokens; only the last chunk gets the head unless all_logits (each chunk then owns its
 * rows of logits). out_id (forward_argmax) takes the last row's argmax instead of logits.
 * s->pos advances by the tokens run. */
int ci_runner_forward(ci_runner *r, ci_session *s, const int *tokens, int n, float *logits, int all_logits,
                      int *out_id, char *err, size_t errlen);

#endif
