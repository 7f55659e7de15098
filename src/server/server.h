/* server.h — `cinfer serve`: an OpenAI- and Anthropic-compatible HTTP server.
 *
 * srv_start loads the model, its tokenizer and chat template, starts the engine (engine.h)
 * and an HTTP daemon (libmicrohttpd, one thread per connection) bound to host:port, and
 * returns; srv_stop shuts both down and frees everything. Nothing here prints or exits.
 *
 * Routes: POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages
 * (Anthropic), /tokenize, /detokenize; GET /v1/models, /health, /metrics (Prometheus text),
 * / (the chat page and its files). Every route but /health and the page requires the API
 * key when one is set (Authorization: Bearer KEY, or x-api-key).
 * Errors are JSON in the caller's API dialect with the matching status: 400 bad request
 * (the message names the field), 401 bad key, 404 unknown model or route, 405 wrong
 * method, 413 body over the limit, 429 a client over its limit of concurrent generations
 * (--per-client; with Retry-After), 503 queue full (with Retry-After). */
#ifndef CI_SRV_SERVER_H
#define CI_SRV_SERVER_H
#include "cinfer.h"
#include <stddef.h>

typedef struct srv srv;

typedef struct {
    const char *model_dir;
    const char *model_id;      /* the name clients use; NULL: the folder's base name */
    const char *host;          /* IPv4 literal or "localhost"; NULL: 127.0.0.1 */
    int port;                  /* 0: any free port (srv_port tells which) */
    const char *api_key;       /* NULL or "": no key */
    int parallel;              /* sequences decoded together; <= 0: 8 */
    int ctx;                   /* tokens per sequence; <= 0: the model's max position, at most 4096 */
    int queue_max;             /* requests waiting beyond the slots; < 0: 64 */
    long long prefix_cache_mb; /* prefix store budget; < 0: engine.h ENG_PREFIX_AUTO; 0: no prefix reuse at all */
    size_t max_body;           /* request body limit in bytes; 0: 8 MiB */
    int threads;               /* compute threads; <= 0: all CPUs */
    int timeout_s;             /* idle connection timeout; <= 0: 60 */
    int per_client;            /* generations one client address may have running or queued; <= 0: no limit */
    const char *chat_template; /* a Jinja file used instead of the model folder's chat template, or NULL */
    int device;                /* ci_model_opts.device: 0 cpu, 1 cuda, 2 auto */
    int no_graphs;             /* ci_model_opts.no_graphs: CUDA graph replay off */
    int map_weights;           /* ci_model_opts.map_weights: the CPU reads the mapped files in place */
    int bf16_act;              /* ci_model_opts.bf16_act: bf16 dot products on AVX512-BF16 CPUs */
    int int16_act;              /* ci_model_opts.int16_act: int16 activations for 4- / 8-bit weights */
    int mlx_amx;                /* ci_model_opts.mlx_amx: MLX 4- / 8-bit weights on AMX tiles */
    int kv_f16;                 /* ci_model_opts.kv_f16: the attention cache in f16 */
    int tp, ep;                 /* ci_model_opts.tp / .ep: tensor-parallel ranks (CPU threads), expert parallel */
    double gpu_memory;         /* paged families on a device: the fraction of device memory the server may
                                * use, the cache pool taking what weights and scratch leave; <= 0: 0.9 */
    int kv_blocks;             /* paged families: the cache pool's blocks (overrides gpu_memory); <= 0: sized
                                * from gpu_memory on a device, parallel * ctx tokens' worth on the CPU */
    int prefill_chunk;         /* prompt tokens a sequence runs per step (a power of two); <= 0: 256 on the
                                * CPU, 1024 on a device */
    ci_progress_cb progress;   /* ci_model_opts.progress: checkpoint read-ahead with progress, or NULL */
    void *progress_ctx;
} srv_opts;

int srv_start(const srv_opts *o, srv **out, char *err, size_t errlen);
int srv_port(const srv *s);
/* One line on the cache: the paged pool (blocks, tokens, MiB, device memory) or the slots'. */
void srv_cache_line(srv *s, char *out, size_t n);
const char *srv_model_id(const srv *s);
void srv_stop(srv *s);
/* The embedded demo model's folder: models/demo (the source tree) or share/cinfer/models/demo
 * (`make install`) beside, or up to 4 folders above, the running executable's folder. 0, or
 * -1 when there is none. */
int srv_demo_dir(char *out, size_t n);

#endif
