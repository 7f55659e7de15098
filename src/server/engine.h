/* engine.h — the serving engine: one scheduler thread that owns the model and its sessions.
 *
 * Requests (token prompts with sampling parameters) are submitted from any thread and
 * queued; the scheduler admits them into slots (one ci_session each, --parallel of them)
 * between steps, prefills them in chunks, and decodes every active slot together with one
 * forward_batch per step (families without it run their slots one by one). Generated tokens
 * are published to the request as they come; readers wait on the request.
 *
 * Paged caches (families with a block pool, model.h): the slots share one pool of
 * kv_blocks blocks instead of holding ctx tokens each. A request is admitted when the
 * blocks of its prompt and first token can be reserved with a block to spare for each
 * running sequence, else it waits at the head of the queue; running sequences take a block
 * when their next position needs one, and when the pool is dry the most recently admitted
 * one is preempted: it lets its blocks go and returns to the head of the queue with its
 * generated ids appended to its own prompt, recomputed at its next admission, keeping its
 * sampler and penalty / JSON / grammar state (its reader only sees a pause). How they are
 * recomputed (eng_opts.replay_decode): off, all of it is prefilled, exact where the
 * backend's prefill and decode give the same bits (the CPU's do: its tokens are those of an
 * uninterrupted run); on, only its own prompt is prefilled (in the chunks of its first
 * admission, from where the pool gives its blocks back; nothing when the pool gives back
 * more than the prompt) and its generated ids are fed again as decode steps, batched with
 * the others and teacher-forced: nothing is sampled or published from them, its sampler,
 * penalties and JSON / grammar state stay where they are, and the last one's logits give its
 * next token. Its cache then holds the bits an uninterrupted run's had (a batched decode
 * step's rows are those of a lone one) on a backend whose prefill and decode differ in the
 * last bits (CUDA: GEMMs and prefill attention against GEMVs and flash decoding), at one
 * decode step per replayed id (with prefix reuse on, those past the last full block the
 * pool still had: < KV_BLOCK; a block another sequence named first comes back with that
 * sequence's bits). One that could never fit the pool (prompt + max_tokens) is refused at
 * submit. Prefix reuse goes through the pool: full blocks are named by their tokens as
 * prompts are prefilled and when a request ends (kv_pages.h); an ended request's slot lets
 * all its blocks go (the named ones stay cached, LRU, until the pool needs them), and a new
 * request takes the named blocks of its prompt's longest full-block prefix, whichever slot
 * made them (the partial last block of a turn is recomputed: < KV_BLOCK tokens). The
 * host prefix store below is not used; an idle engine holds no block.
 *
 * Prefix reuse: a slot keeps its cache after its request ends. A new request goes to the
 * idle slot whose held tokens share the longest prefix with its prompt, or, when a prefix
 * store entry (prefix.h) matches longer, to the least recently used idle slot with that
 * entry loaded. Families with cache_export/import can cut a cache back to any prefix: the
 * store keeps rows, and any prefix of them is reused. Families with recurrent state
 * (snapshot/restore: the hybrids) reuse a slot only when its whole sequence is a prefix of
 * the prompt, and the store keeps snapshots of whole caches, taken while prefilling (at
 * every multiple of SNAP_EVERY tokens and at the end of the prompt) and when a slot's
 * sequence is about to be overwritten (the end of its request): the longest snapshot whose
 * tokens start the prompt is restored. Both kinds count against prefix_cache_bytes. The
 * last prompt token is always run, so the first output has fresh logits.
 *
 * Determinism: each request samples with its own seeded generator and its own penalty
 * state, and forward_batch gives each row what a lone forward would (the CPU matmul sums
 * every row in one order whatever the batch, src/backend/cpu/cpu_kernels.h), so the same
 * request and seed give the same tokens alone or beside others.
 *
 * Lifetime: a request has two references, the submitter's (eng_release) and the engine's
 * (dropped when it finishes); eng_cancel may be called at any time before release. */
#ifndef CI_SRV_ENGINE_H
#define CI_SRV_ENGINE_H
#include "cinfer.h"
#include <stddef.h>
#include <stdint.h>
#include "../text/tokenizer.h"
#include "schema.h"

#define ENG_MAX_TOP 20
#define ENG_BUSY 1

typedef struct eng eng;
typedef struct eng_req eng_req;

#define ENG_PREFIX_AUTO ((size_t)-1)
enum { ENG_PREFIX_DEFAULT_MB = 256 };

typedef struct {
    int parallel;              /* slots: sequences decoded together */
    int ctx;                   /* tokens per slot */
    int queue_max;             /* requests waiting for a slot; one more is refused (ENG_BUSY) */
    size_t prefix_cache_bytes; /* prefix store budget; 0 turns prefix reuse off (slots too); ENG_PREFIX_AUTO:
                                * ENG_PREFIX_DEFAULT_MB, or, for a hybrid on the block pool (its store holds
                                * snapshots of its states, each as big as all its recurrent layers' states),
                                * room for two snapshots per slot when that is more (on a device the pool
                                * is sized after it) */
    const char *tok_bytes;     /* JSON mode: token i < tok_n has the text tok_bytes[tok_off[i], tok_off[i + 1]) */
    const uint32_t *tok_off;   /* [tok_n + 1]; empty text: never chosen in JSON mode (but EOS); NULL: no JSON mode */
    int tok_n;                 /* ids with a text (the tokenizer's; the model's vocabulary may be larger) */
    int text_stop;             /* the first byte of the tool-call marker (free text fast path, tokmask.h), or -1 */
    int kv_blocks;             /* families with paged caches (model.h): the slots share one pool of this many
                                * blocks of KV_BLOCK tokens; <= 0: parallel * ctx tokens' worth. Others ignore it */
    int prefill_chunk;         /* prompt tokens a slot runs per step (a power of two; <= 0: 256) */
    double mem_fraction;       /* kv_blocks <= 0 on a device (be->mem_info): the pool takes what keeps the
                                * device's use at this fraction of its memory after the slots' scratch
                                * (0 < f <= 1; <= 0: parallel * ctx tokens' worth, as on the CPU) */
    int replay_decode;         /* paged: a preempted request's generated ids are fed again as decode steps at
                                * its next admission, not prefilled ("Paged caches" above). The rule: on
                                * where the backend's prefill and decode bits differ (a device backend,
                                * ci_backend.is_device: the server does so), off where they are the same
                                * (the CPU: the prefill is exact and faster), and always for a hybrid (its
                                * recurrent layers' chunked prefill differs from their steps). Others ignore it */
    int sample_threads;        /* threads that draw a decode step's sampled rows (each row its own request's
                                * sampler and scratch: the same draws in any order); <= 0: on a device up to
                                * 16 (the host waits on the device anyway; a draw at a 152k vocabulary is
                                * ~2 ms), 1 on the CPU (the model's pool has the cores) */
} eng_opts;

typedef struct {
    const int *prompt;         /* copied at submit */
    int n_prompt;              /* >= 1 */
    int max_tokens;            /* >= 1; prompt + max_tokens <= ctx */
    ci_sampler_opts so;
    float presence_penalty;    /* OpenAI: subtracted once from every id generated so far */
    float frequency_penalty;   /* OpenAI: subtracted per occurrence */
    int top_logprobs;          /* -1: no logprobs; else 0..ENG_MAX_TOP alternatives per token */
    int ignore_eos;
    const int *bias_id;        /* OpenAI logit_bias: bias[i] added to the logit of bias_id[i]; copied at submit */
    const float *bias;
    int n_bias;
    int json_mode;             /* the reply is a JSON object: only tokens that keep it one (jsonfsm.h); it ends
                                * (ENG_FIN_EOS) when the object closes, ignore_eos or not */
    jsc_grammar *grammar;       /* or NULL: only tokens the grammar's matcher takes (schema.h), EOS only where it
                                * is complete; eng_submit takes it over (freed with the request, also on failure) */
    int grammar_ends;          /* the reply ends (ENG_FIN_EOS) as soon as the grammar is complete (a JSON schema);
                                * else EOS decides (free text with tool calls) */
    int snap_at;               /* a prompt position (the end of a chat's system message, which later chats share)
                                * where a family whose prefix reuse needs snapshots (eng_snapshots) takes one,
                                * its prefill chunk ending there; 0: none */
} eng_params;

typedef struct {
    int id;
    float logprob;             /* log-softmax of the model's raw logits */
    int n_top;
    int top_id[ENG_MAX_TOP];
    float top_lp[ENG_MAX_TOP];
} eng_tok;

typedef enum { ENG_FIN_NONE = 0, ENG_FIN_EOS, ENG_FIN_LENGTH, ENG_FIN_CANCEL, ENG_FIN_ERROR } eng_finish;

typedef struct {
    long long requests, prompt_tokens, gen_tokens, prefix_hit_tokens;
    long long prefill_tokens, prefill_calls, decode_tokens, decode_steps;
    long long decode_argmax_steps;    /* decode steps whose rows were all greedy: the backend's argmax, ids only back */
    long long pool_draws;             /* sampled rows drawn by the sampling threads (eng_opts.sample_threads) */
    double prefill_seconds, decode_seconds;
    long long first_tokens;           /* requests that got their first token */
    double first_token_seconds;       /* summed over them: submit to the first token's publish (the engine's
                                       * side of the time to first token; the rest is HTTP and the client) */
    long long admissions;             /* requests admitted to a slot (a preempted one's return not counted) */
    double queue_seconds;             /* summed over them: submit to the admission's start (queue wait, the
                                       * engine thread's wake-up) */
    double admit_seconds;             /* summed over them: the admission itself (slot choice, prefix match,
                                       * copies of shared blocks' rows, block reservation, state restores) */
    int queue_depth, active, parallel, ctx;
    size_t prefix_bytes;
    size_t prefix_budget;      /* the store's budget (eng_opts.prefix_cache_bytes as resolved) */
    size_t snapshot_bytes;     /* a hybrid on the block pool: one snapshot of its states; else 0 */
    int prefix_entries;
    int kv_blocks, kv_block_tokens;   /* the shared pool (0 blocks: the family's caches are not paged) */
    int kv_blocks_used, kv_blocks_cached;
    long long kv_block_lookups, kv_block_hits;   /* admitted prompts' full blocks before their last token, those reused */
    long long kv_block_evictions;
    long long kv_tail_hits;      /* last blocks of ended sequences a prompt went on from (kv_pages.h) */
    long long kv_block_copies;   /* full blocks whose shared start a prompt copied (kv_pages.h copy on write) */
    long long kv_waits;               /* requests that waited at the queue head for blocks */
    long long preemptions;            /* running requests sent back to the queue to free blocks */
    long long replay_tokens;          /* generated ids fed again as decode steps (eng_opts.replay_decode) */
    int last_batch;                   /* rows of the latest decode step */
    size_t kv_pool_bytes;             /* the pool's rows (backend memory) */
    size_t dev_total, dev_free;       /* device memory at start-up, after the pool and slots (0: CPU) */
} eng_stats;

int eng_new(ci_model *m, const eng_opts *o, eng **out, char *err, size_t errlen);
/* The token texts of eng_opts for JSON mode: each of the first V ids as it reads after
 * another token (decode "a" + id minus decode "a"); special tokens get none; a token with
 * part of a UTF-8 character reads as U+FFFD, which JSON takes exactly where it takes that
 * character. 0 with *bytes / *off malloc'd, or -1. */
int eng_token_texts(tok_tokenizer *tk, int V, char **bytes, uint32_t **off);
/* Stops the scheduler; requests still queued or running finish with ENG_FIN_ERROR, and
 * later submits are refused. Requests stay readable until eng_free. */
void eng_stop(eng *e);
void eng_free(eng *e);
int eng_ctx(const eng *e);

/* 0 and *out on success; ENG_BUSY when the queue is full; -1 with err otherwise. */
int eng_submit(eng *e, const eng_params *p, eng_req **out, char *err, size_t errlen);
/* Copies tokens [from, from + max) that exist into out and returns how many; when none
 * is there yet and the request runs, waits up to timeout_ms first. *done = 1 once the
 * request has finished and every token was read. */
int eng_read(eng_req *r, int from, eng_tok *out, int max, int timeout_ms, int *done);
eng_finish eng_req_finish(eng_req *r, char *err, size_t errlen);
int eng_req_cached(eng_req *r);           /* prompt tokens taken from a cache */
void eng_cancel(eng_req *r);
void eng_release(eng_req *r);
void eng_get_stats(eng *e, eng_stats *s);
/* 1 when the engine's prefix reuse goes through snapshots (hybrids, DeepSeek V4): worth an
 * eng_params.snap_at. */
int eng_snapshots(const eng *e);

#endif
