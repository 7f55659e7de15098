/* registry.h — model_type strings to families.
 *
 * Every model_type a checkpoint ships maps to its own family value (DESIGN.md table). A
 * family whose forward path is not written yet is still registered, with `missing` saying
 * what is missing, so that loading it fails naming the real family. A family whose forward
 * is written against the backend's memory boundary (buffers from alloc, no host access
 * between ops) sets `cuda`; the others refuse --device cuda naming themselves. */
#ifndef CI_REGISTRY_H
#define CI_REGISTRY_H
#include <stddef.h>

struct ci_model;
struct ci_session;
struct cache_snap;

typedef struct ci_family_ops {
    /* Reads the family's hyper-parameters from m->cfg and binds every tensor (w_* API). */
    int (*load)(struct ci_model *m, char *err, size_t errlen);
    void (*unload)(struct ci_model *m);
    /* Allocates the per-sequence cache and scratch for s->max_ctx tokens. */
    int (*session_init)(struct ci_session *s, char *err, size_t errlen);
    void (*session_free)(struct ci_session *s);
    /* Runs n tokens at positions s->pos.. through the model and advances s->pos.
     * logits: [n, vocab] when all_logits, else [vocab] for the last token; may be NULL. */
    int (*forward)(struct ci_session *s, const int *tokens, int n, float *logits, int all_logits,
                   char *err, size_t errlen);
    /* Bytes of cache one token of context costs (all layers). */
    size_t (*cache_bytes_per_token)(const struct ci_model *m);

    /* Optional ops for serving many sequences (src/server); NULL when a family lacks them.
     *
     * forward_batch: one decode step for n distinct sessions of this model at once: token
     * tokens[i] runs at position ss[i]->pos of ss[i], which advances by one. logits: [n, vocab].
     * The matmuls run over the n rows together (weights read once per step); attention and
     * the cache stay per sequence. Each row's result is the one forward(ss[i], &tokens[i], 1)
     * would give whenever the backend's matmul is row-independent. Scratch is one session's,
     * one whose scratch fits every row (sessions may differ in max_ctx). */
    int (*forward_batch)(struct ci_session *const *ss, const int *tokens, int n, float *logits,
                         char *err, size_t errlen);
    /* For caches whose rows at position p depend only on tokens 0..p (KV, MLA latent):
     * cache_export copies the rows of positions [0, n) of every layer out of s into dst
     * (n * cache_bytes_per_token bytes, position-major: the first m * cache_bytes_per_token
     * bytes are the export of [0, m)); cache_import writes such rows into s and sets
     * s->pos = n. A family that has them also allows s->pos to be lowered to any value
     * (later rows are then ignored and overwritten), which is what prefix reuse needs. */
    int (*cache_export)(const struct ci_session *s, int n, void *dst, char *err, size_t errlen);
    int (*cache_import)(struct ci_session *s, int n, const void *src, char *err, size_t errlen);
    /* Optional: bytes a session holding n_tokens of context keeps for its cache, for caches
     * that are not n · cache_bytes_per_token (DeepSeek V4: a fixed sliding window plus
     * compressed entries). NULL: n_tokens · cache_bytes_per_token. */
    size_t (*cache_bytes_at)(const struct ci_model *m, long long n_tokens);
    /* For caches with recurrent state (src/cache: hybrid families), which cannot be cut
     * back: snapshot copies the whole cache at s->pos (fixed state + rows [0, pos); NULL
     * and err when out of memory); restore puts one back into a session of the same model
     * (max_ctx >= its position) and sets s->pos to it. Prefix reuse goes through them. */
    struct cache_snap *(*snapshot)(const struct ci_session *s, char *err, size_t errlen);
    int (*restore)(struct ci_session *s, const struct cache_snap *snap, char *err, size_t errlen);
    /* Optional greedy step: forward(s, tokens, n, ...) for the last token's logits, then
     * *out_id = their argmax (first index on ties, NaN never chosen over a number) taken by
     * the backend, so a device moves 4 bytes instead of the logits. NULL: ci_forward_argmax
     * runs forward and takes the argmax on the host with the same rule. */
    int (*forward_argmax)(struct ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen);
    /* Optional batched greedy step: forward_batch(ss, tokens, n, ...), then out_ids[i] = the
     * argmax of row i's logits (same rule as forward_argmax) taken by the backend, so a device
     * moves n int32 ids instead of n rows of logits. NULL: ci_forward_batch_argmax runs
     * forward_batch and takes each row's argmax on the host. */
    int (*forward_batch_argmax)(struct ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err,
                                size_t errlen);
    /* Optional, for families whose caches are paged (model.h ci_session_paged): allocates
     * the rows of a shared pool of n_blocks blocks (KV_BLOCK positions each, every layer)
     * in backend memory; unload frees them. Sessions created afterwards use it. */
    int (*pool_init)(struct ci_model *m, int n_blocks, char *err, size_t errlen);
    /* Optional: 0, with the reason in why, when this model's cache cannot be paged although
     * its family's can (DeepSeek V4 with a compression ratio that is not a power of two up to
     * KV_BLOCK): pool_init would refuse it; a server keeps a cache a slot instead. */
    int (*pool_ok)(const struct ci_model *m, char *why, size_t whylen);
    /* Optional: the most bytes snapshot gives for a session of max_ctx tokens (pooled: one on
     * the model's block pool), for caches whose snapshots grow with the position (DeepSeek V4:
     * the window's rows, the pending tokens); NULL: a snapshot is as big at any position. */
    size_t (*snapshot_bytes)(const struct ci_model *m, int max_ctx, int pooled);
} ci_family_ops;

enum { CI_CUDA_NONE = 0, CI_CUDA_YES = 1, CI_CUDA_UNVERIFIED = 2 };

typedef struct ci_family {
    const char *name;                 /* the family's own name, used in every message */
    const char *const *model_types;   /* NULL-terminated */
    const char *missing;              /* NULL when implemented; else what is not implemented yet */
    const ci_family_ops *ops;
    int cuda;                         /* CI_CUDA_NONE, CI_CUDA_YES (runs on the CUDA backend), or
                                       * CI_CUDA_UNVERIFIED: its CUDA path is written but has not
                                       * passed the GPU suite yet, so --device cuda refuses it unless
                                       * CINFER_CUDA_UNVERIFIED=1 (the GPU tests set it) and
                                       * --device auto keeps it on the CPU */
    int tp;                           /* 1: its load splits the weights over the ranks of a backend
                                       * that joined a communicator (src/parallel); 0: refused */
    int kv_f16;                       /* 1: its attention caches are sized with ci_kv_slots, so a
                                       * kv_f16 backend (ci_model_opts.kv_f16) holds them in f16;
                                       * 0: the option is refused */
} ci_family;

const ci_family *reg_find(const char *model_type);
/* Comma-separated list of every registered model_type. */
void reg_list(char *buf, size_t n);

extern const ci_family fam_llama, fam_qwen3, fam_qwen3_moe, fam_deepseek_v3, fam_deepseek_v32, fam_deepseek_v4,
    fam_qwen3_next, fam_qwen3_5, fam_qwen3_5_moe, fam_lfm2, fam_lfm2_moe, fam_nemotron_h;

#endif
