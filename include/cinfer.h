/* cinfer.h — the public C API.
 *
 * Open a model folder (config.json + *.safetensors), make sessions (one sequence each,
 * with its own cache), run tokens through them, or generate. Every fallible call returns 0
 * on success and a negative value on failure, with one line in the caller's err buffer
 * that names the file, tensor or key at fault. The library never exits or aborts.
 *
 * As a shared library (libcinfer.so, `make install`; `pkg-config --cflags --libs cinfer`)
 * it exports exactly the functions declared here, each marked CI_API; everything else in
 * the engine is hidden. The shortest program: ci_model_open, ci_session_new,
 * ci_generate_text with a callback that prints each piece, ci_session_free, ci_model_free
 * (examples/generate.c). */
#ifndef CINFER_H
#define CINFER_H
#include <stddef.h>
#include <stdint.h>

/* Marks the exported API: the library is built with -fvisibility=hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define CI_API __attribute__((visibility("default")))
#else
#define CI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ci_model ci_model;
typedef struct ci_session ci_session;

/* The library's version, "MAJOR.MINOR.PATCH" (the soname carries MAJOR). */
CI_API const char *ci_version(void);

/* What ci_model_opts.progress is told while a checkpoint is read. */
typedef struct {
    const char *file;           /* path of the shard being read */
    int shard, n_shards;        /* 0-based index of that shard, and how many there are */
    uint64_t file_done, file_bytes;  /* bytes of this shard read so far, of its size */
    uint64_t done, total;       /* bytes of all shards read so far, of their sum */
} ci_load_progress;
typedef void (*ci_progress_cb)(void *ctx, const ci_load_progress *p);

typedef struct {
    int n_threads;          /* <= 0: all online CPUs */
    int isa;                /* 0 auto, 1 scalar, 2 avx2, 3 avx512, 4 avx512 + bf16 dot products (for tests) */
    int device;             /* 0 cpu (so zeroed opts keep the CPU), 1 cuda (device 0; fails
                             * naming the family when it has no CUDA path, or the reason
                             * when there is no usable device), 2 auto (CUDA when the family
                             * has a CUDA path and a device starts, else the CPU) */
    int no_graphs;          /* 1: never capture / replay decode steps as device graphs (eager
                             * execution, for tests comparing the two) */
    ci_progress_cb progress;  /* NULL (the default): the shards stay mapped and are read
                             * lazily, page by page, as the first forwards touch them. Set:
                             * ci_model_open reads every shard through once before binding
                             * (so the first forward finds the weights resident) and calls
                             * progress after each chunk of 16 MiB, with done == total
                             * last. Skipped (no calls) when the checkpoint is larger than
                             * the machine's memory: reading it ahead would only evict it. */
    void *progress_ctx;     /* passed to progress */
    int map_weights;        /* 0 (the default): on the CPU backend, a checkpoint that fits in
                             * 80% of the memory available is copied into anonymous (huge
                             * page) memory and read from there (progress is called as for
                             * the read-ahead); 1: the CPU reads the mapped files in place
                             * (page cache), as a checkpoint too big to copy always is */
    int bf16_act;           /* 1: on a CPU with AVX512-BF16 (and isa auto), bf16 weight
                             * matrices are dotted with the activations rounded to bf16
                             * (vdpbf16ps; f32 products and sums), about twice the prefill
                             * speed; logits then differ from the f32 path by up to ~1e-2 of
                             * their largest magnitude (bench/RESULTS.md). Other CPUs and
                             * other dtypes compute as without it. 0: f32 activations. */
    int int16_act;          /* 1: on an AVX2 or AVX-512 CPU (isa not scalar), MLX
                             * affine 4- and 8-bit matrices are dotted with the activations
                             * rounded to int16 per 32 columns (vpdpwssd or vpmaddwd; exact integer sums,
                             * f32 scaling: x within 2^-16 of its block's largest magnitude),
                             * for 4-bit decode nearer the memory bandwidth; logits then differ
                             * from the exact path by up to ~1e-3 of their largest magnitude
                             * (bench/RESULTS.md). Other CPUs and formats compute as without
                             * it. 0: f32 activations. */
    int tp;                 /* > 1: the model split over tp tensor-parallel ranks (src/parallel/group.h):
                             * on the CPU the ranks are threads of this process, n_threads / tp pool
                             * threads each; logits are the whole model's within rounding (~1e-6 of
                             * the largest: the ranks' partial sums are added in another order).
                             * Sessions, forwards and batch steps (no paged pools, cache export or
                             * snapshots yet); the CPU only. 0 or 1: the whole model. */
    int ep;                 /* with tp > 1: routed experts placed whole, an even share per rank
                             * (expert parallel), instead of every expert's columns split */
    int mlx_amx;            /* 1: on a CPU with AVX-512 VNNI, MLX affine 4- and 8-bit matrices
                             * (groups of a multiple of 32) as src/backend/cpu/amx_mlx.c computes
                             * them: on the AMX-INT8 tiles (4 tokens and more; Sapphire Rapids and
                             * later) and AVX-512 VNNI (fewer), or on VNNI alone where the CPU has
                             * no AMX-INT8 (the same bits; CINFER_CPU_MLX_TILES=0 forces it): codes exact,
                             * activations rounded to int16 per 64 columns (32 for groups of 32),
                             * exact integer code sums, f32 scaling (src/backend/cpu/amx_mlx.c);
                             * the same bits at any token count; the MLX fixtures' logits within
                             * ~4e-3 of transformers' (f32 path: ~1e-5), greedy ids the same.
                             * Faster prefill, decode near the default (bench/RESULTS.md);
                             * int16_act, if also set, takes those matrices first. Other CPUs
                             * compute as without it.
                             * 2: the same with the activations rounded to int8 per block
                             * (d = max|x| / 127; llama.cpp Q8_0's class of precision): half the
                             * integer products of a prompt, the same bits at any token count. */
    int kv_f16;             /* 1: the attention layers' K / V cache held as IEEE f16 on the CPU (values
                             * clamped to +-65504, rounded to nearest even; products and sums in f32 as
                             * before): half the cache's memory and of the bytes a decode step's
                             * attention reads, logits within ~1e-3 of their largest magnitude of the
                             * f32 cache's (bench/RESULTS.md). Every family with GQA attention layers
                             * takes it (llama, qwen3, qwen3_moe, lfm2, lfm2_moe, qwen3_5, qwen3_5_moe,
                             * qwen3_next, nemotron_h); the DeepSeek families (MLA / DSA / V4 caches) and
                             * the CUDA backend refuse it. 0: f32. */
} ci_model_opts;

CI_API int ci_model_open(const char *dir, const ci_model_opts *opts, ci_model **out, char *err, size_t errlen);
CI_API void ci_model_free(ci_model *m);

typedef struct {
    const char *family;         /* "llama", "qwen3", ... */
    const char *model_type;     /* as config.json spells it */
    const char *backend;        /* "cpu-avx512", ... */
    int vocab_size, n_layers, hidden_size;
    int bos_id;                 /* -1 when none */
    const int *eos_ids;
    int n_eos;
    int64_t n_params;
    size_t bytes_by_dtype[16];  /* indexed by dtype: F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E8M0, I8, U8, I16, I32, I64, U32, BOOL, F64 */
    size_t decode_bytes;        /* weight bytes one decode step reads */
    size_t cache_bytes_per_token;
    long long max_position;
} ci_model_info;
CI_API void ci_model_get_info(const ci_model *m, ci_model_info *info);
/* Bytes of cache a session holding n_tokens of context keeps (all layers). */
CI_API size_t ci_model_cache_bytes(const ci_model *m, long long n_tokens);
CI_API const char *ci_dtype_label(int dtype);   /* "BF16" */

/* A model may have many sessions, but its forwards (ci_forward*, ci_generate*) run one at a
 * time: the backend's and the model's step scratch are shared by its sessions (the server's
 * scheduler thread drives them all). Call them from one thread, or serialise them. */
CI_API int ci_session_new(ci_model *m, int max_ctx, ci_session **out, char *err, size_t errlen);
CI_API void ci_session_free(ci_session *s);
CI_API void ci_session_reset(ci_session *s);   /* forget the sequence; cache reused */
CI_API int ci_session_pos(const ci_session *s);

/* Runs n tokens through the session at its current position. logits: [n, vocab] floats
 * when all_logits, else [vocab] for the last token; NULL to skip the head. */
CI_API int ci_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
/* Runs n tokens like ci_forward, then *out_id = the argmax of the last token's logits (the
 * first index on ties; NaN is never chosen over a number): greedy decoding. A device backend
 * takes the argmax on the device and moves 4 bytes instead of the logits. */
CI_API int ci_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen);
/* One greedy decode step for n distinct sessions of one model at once: tokens[i] runs at
 * ss[i]'s position (which advances by one) and out_ids[i] = the argmax of its logits (same
 * rule as ci_forward_argmax). The weights are read once for all n rows; a device backend
 * takes the argmaxes on the device and moves n ids instead of the logits. Fails naming the
 * family when it has no batched decode; a session given twice, a full session or an id
 * outside the vocabulary is refused before anything runs. */
CI_API int ci_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen);

typedef struct {
    float temperature;      /* 0: greedy */
    int top_k;              /* 0: off */
    float top_p;            /* 1: off */
    float min_p;            /* 0: off */
    float repeat_penalty;   /* 1: off (CTRL-style: logits > 0 divided, < 0 multiplied) */
    int repeat_last_n;      /* window of previous tokens the penalty sees; 0 = all */
    uint64_t seed;
} ci_sampler_opts;
CI_API void ci_sampler_defaults(ci_sampler_opts *o);

/* Called for each generated token; return non-zero to stop. */
typedef int (*ci_token_cb)(void *ctx, int token);

/* Prefills prompt (as one batch) then samples up to max_tokens tokens, stopping after an
 * EOS token (which is included in out). out has room for max_tokens ids. */
CI_API int ci_generate(ci_session *s, const int *prompt, int n_prompt, int max_tokens, const ci_sampler_opts *so,
                int *out, int *n_out, ci_token_cb cb, void *cb_ctx, char *err, size_t errlen);

/* Called with each piece of generated text (complete UTF-8 only, not NUL-terminated; a
 * token may give no piece, or a piece may hold several tokens' text); non-zero stops. */
typedef int (*ci_text_cb)(void *ctx, const char *text, size_t len);

/* Text in, text out: encodes prompt with the tokenizer of the model's folder
 * (tokenizer.json, loaded on the first call and kept with the model; special tokens such as
 * BOS added as its tokenizer_config.json says, as `cinfer generate --prompt` does), then
 * runs ci_generate (the session's max_ctx must hold the prompt and max_tokens) and streams
 * the decoded text through cb, special tokens (EOS) left out. *n_out (may be NULL) gets the
 * number of tokens generated. */
CI_API int ci_generate_text(ci_session *s, const char *prompt, int max_tokens, const ci_sampler_opts *so, ci_text_cb cb,
                            void *cb_ctx, int *n_out, char *err, size_t errlen);

/* Writes a random-weight checkpoint for the config at config_path into out_dir, with the
 * family's exact tensor names and shapes. dtype: "bf16", "f32", "fp8" or "fp8-fp4"; layers > 0
 * overrides num_hidden_layers. Tensors are filled on every online CPU; the file depends only
 * on the config, dtype, seed and layers. */
CI_API int ci_make_random(const char *config_path, const char *out_dir, const char *dtype, uint64_t seed, int layers,
                   char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
