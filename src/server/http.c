/* http.c — the HTTP side of the server (server.h): libmicrohttpd daemon, routing,
 * authentication, request bodies, error replies, the small routes and /metrics.
 *
 * The daemon runs one thread per connection, so a handler may block while its request
 * generates (api.c). Bodies are collected up to the configured limit; a larger one (by its
 * Content-Length, or as it arrives) gets 413 and is not kept. The API key is compared in
 * constant time. Counters are atomics; nothing here holds a lock while waiting. */
#include "srv_internal.h"
#include "outparse.h"
#include "responses.h"
#include "web.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../models/model.h"
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
} conn_body;

/* ---- replies ------------------------------------------------------------------------------ */

void srv_count_status(srv *s, int status) {
    int k = status / 100;
    if (k >= 1 && k <= 5) atomic_fetch_add(&s->n_status[k], 1);
}

static enum MHD_Result reply(srv *s, struct MHD_Connection *c, int status, const char *type, char *text, size_t len,
                             const char *retry_after) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(text); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    srv_count_status(s, status);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result srv_reply_json(srv *s, struct MHD_Connection *c, int status, json_t *body) {
    char *t = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!t) return MHD_NO;
    return reply(s, c, status, "application/json", t, strlen(t), NULL);
}

static const char *openai_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "requests";
    case 503: return "server_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static const char *anthropic_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

enum MHD_Result srv_reply_err(srv *s, struct MHD_Connection *c, api_dialect d, const srv_err *e) {
    json_t *b;
    if (d == API_ANTHROPIC)
        b = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", anthropic_type(e->status), "message", e->msg);
    else
        b = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->msg, "type", openai_type(e->status), "param",
                      e->param[0] ? json_string(e->param) : json_null(), "code", e->code ? json_string(e->code) : json_null());
    char *t = b ? json_dumps(b, JSON_COMPACT) : NULL;
    json_decref(b);
    if (!t) return MHD_NO;
    return reply(s, c, e->status, "application/json", t, strlen(t), e->status == 503 || e->status == 429 ? "1" : NULL);
}

/* ---- the per-client limit (--per-client) ------------------------------------------------ */

int srv_client_take(srv *s, struct MHD_Connection *c, char addr[64]) {
    addr[0] = 0;
    if (s->o.per_client <= 0) return 0;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, addr, 64);
    else if (sa && sa->sa_family == AF_INET6) inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, addr, 64);
    if (!addr[0]) snprintf(addr, 64, "?");
    int rc = 0;
    pthread_mutex_lock(&s->cl_mu);
    int i = 0;
    while (i < s->n_cl && strcmp(s->cl[i].addr, addr)) i++;
    if (i == s->n_cl) {
        if (s->n_cl == s->cap_cl) {
            int cap = s->cap_cl ? 2 * s->cap_cl : 16;
            srv_client *n = realloc(s->cl, (size_t)cap * sizeof *n);
            if (!n) { rc = -1; goto out; }
            s->cl = n;
            s->cap_cl = cap;
        }
        snprintf(s->cl[i].addr, sizeof s->cl[i].addr, "%s", addr);
        s->cl[i].n = 0;
        s->n_cl++;
    }
    if (s->cl[i].n >= s->o.per_client) rc = -1;
    else s->cl[i].n++;
out:
    pthread_mutex_unlock(&s->cl_mu);
    if (rc) { addr[0] = 0; atomic_fetch_add(&s->n_limited, 1); }
    return rc;
}

void srv_client_release(srv *s, const char addr[64]) {
    if (!addr[0]) return;
    pthread_mutex_lock(&s->cl_mu);
    for (int i = 0; i < s->n_cl; i++)
        if (!strcmp(s->cl[i].addr, addr)) {
            /* an address with nothing in flight leaves the table (last entry moves in) */
            if (--s->cl[i].n <= 0) s->cl[i] = s->cl[--s->n_cl];
            break;
        }
    pthread_mutex_unlock(&s->cl_mu);
}

int srv_client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    if (p.revents & POLLIN) {
        char ch;
        ssize_t r = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
        return r == 0;
    }
    return 0;
}

/* ---- the small routes ------------------------------------------------------------------- */

static json_t *model_obj(srv *s) {
    return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", s->model_id, "object", "model", "created", (json_int_t)s->created,
                     "owned_by", "cinfer", "max_model_len", eng_ctx(s->e));
}

static enum MHD_Result route_tokenize(srv *s, struct MHD_Connection *c, json_t *req) {
    srv_err e = { 0 };
    int *ids = NULL;
    size_t n = 0;
    int add_special = 1;
    const json_t *as = json_object_get(req, "add_special");
    if (as && !json_is_null(as)) {
        if (!json_is_boolean(as)) { srv_fail(&e, 400, "add_special", "'add_special' must be a boolean"); return srv_reply_err(s, c, API_OPENAI, &e); }
        add_special = json_is_true(as);
    }
    if (json_object_get(req, "messages")) {
        int k = 0;
        if (api_chat_prompt(s, req, API_OPENAI, 0, NULL, &ids, &k, NULL, NULL, &e)) return srv_reply_err(s, c, API_OPENAI, &e);
        n = (size_t)k;
    } else {
        const char *key = json_object_get(req, "content") ? "content" : "prompt";
        const json_t *t = json_object_get(req, key);
        if (!json_is_string(t)) {
            srv_fail(&e, 400, key, "'content' (a string) or 'messages' is required");
            return srv_reply_err(s, c, API_OPENAI, &e);
        }
        char err[512];
        if (tok_encode(s->tk, json_string_value(t), json_string_length(t), add_special, &ids, &n, err, sizeof err)) {
            srv_fail(&e, 400, key, "%s", err);
            return srv_reply_err(s, c, API_OPENAI, &e);
        }
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    return srv_reply_json(s, c, 200, json_pack("{s:o,s:i}", "tokens", arr, "count", (int)n));
}

static enum MHD_Result route_detokenize(srv *s, struct MHD_Connection *c, json_t *req) {
    srv_err e = { 0 };
    const json_t *t = json_object_get(req, "tokens");
    if (!json_is_array(t)) { srv_fail(&e, 400, "tokens", "'tokens' must be an array of token ids"); return srv_reply_err(s, c, API_OPENAI, &e); }
    size_t n = json_array_size(t);
    int *ids = malloc((n ? n : 1) * sizeof(int)), V = tok_n_vocab(s->tk);
    if (!ids) return MHD_NO;
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_array_get(t, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= V) {
            free(ids);
            srv_fail(&e, 400, "tokens", "'tokens[%zu]' must be a token id in [0, %d)", i, V);
            return srv_reply_err(s, c, API_OPENAI, &e);
        }
        ids[i] = (int)json_integer_value(x);
    }
    char *text = NULL, err[512];
    size_t len = 0;
    int rc = tok_decode(s->tk, ids, n, 0, &text, &len, err, sizeof err);
    free(ids);
    if (rc) { srv_fail(&e, 400, "tokens", "%s", err); return srv_reply_err(s, c, API_OPENAI, &e); }
    json_t *b = json_pack("{s:o}", "content", json_stringn(text, len));
    free(text);
    return srv_reply_json(s, c, 200, b);
}

static const char *route_label[R_COUNT] = { "chat_completions", "completions", "messages", "responses", "tokenize",
                                            "detokenize", "models", "health", "metrics", "page", "other" };

static enum MHD_Result route_metrics(srv *s, struct MHD_Connection *c) {
    eng_stats st;
    eng_get_stats(s->e, &st);
    char *b = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&b, &len);
    if (!f) return MHD_NO;
    fprintf(f, "# HELP cinfer_requests_total HTTP requests by route.\n# TYPE cinfer_requests_total counter\n");
    for (int r = 0; r < R_COUNT; r++)
        fprintf(f, "cinfer_requests_total{route=\"%s\"} %lld\n", route_label[r], (long long)atomic_load(&s->n_route[r]));
    fprintf(f, "# HELP cinfer_responses_total HTTP responses by status class.\n# TYPE cinfer_responses_total counter\n");
    for (int k = 2; k <= 5; k++) fprintf(f, "cinfer_responses_total{class=\"%dxx\"} %lld\n", k, (long long)atomic_load(&s->n_status[k]));
    fprintf(f, "# HELP cinfer_client_disconnects_total Clients that left before their answer was complete.\n"
               "# TYPE cinfer_client_disconnects_total counter\ncinfer_client_disconnects_total %lld\n",
            (long long)atomic_load(&s->n_disconnect));
    fprintf(f, "# HELP cinfer_client_limited_total Requests refused because their client had --per-client generations in flight.\n"
               "# TYPE cinfer_client_limited_total counter\ncinfer_client_limited_total %lld\n",
            (long long)atomic_load(&s->n_limited));
    fprintf(f, "# HELP cinfer_generation_requests_total Sequences submitted to the engine.\n"
               "# TYPE cinfer_generation_requests_total counter\ncinfer_generation_requests_total %lld\n", st.requests);
    fprintf(f, "# HELP cinfer_prompt_tokens_total Prompt tokens of submitted sequences.\n"
               "# TYPE cinfer_prompt_tokens_total counter\ncinfer_prompt_tokens_total %lld\n", st.prompt_tokens);
    fprintf(f, "# HELP cinfer_generation_tokens_total Tokens generated.\n"
               "# TYPE cinfer_generation_tokens_total counter\ncinfer_generation_tokens_total %lld\n", st.gen_tokens);
    fprintf(f, "# HELP cinfer_prefix_cache_hit_tokens_total Prompt tokens taken from a cache instead of computed.\n"
               "# TYPE cinfer_prefix_cache_hit_tokens_total counter\ncinfer_prefix_cache_hit_tokens_total %lld\n",
            st.prefix_hit_tokens);
    fprintf(f, "# HELP cinfer_prefill_tokens_total Prompt tokens run through the model.\n"
               "# TYPE cinfer_prefill_tokens_total counter\ncinfer_prefill_tokens_total %lld\n", st.prefill_tokens);
    fprintf(f, "# HELP cinfer_first_token_seconds_total Engine time from a request's submission to its first token, summed.\n"
               "# TYPE cinfer_first_token_seconds_total counter\ncinfer_first_token_seconds_total %.6f\n", st.first_token_seconds);
    fprintf(f, "# HELP cinfer_queue_seconds_total Time from a request's submission to its admission to a slot, summed.\n"
               "# TYPE cinfer_queue_seconds_total counter\ncinfer_queue_seconds_total %.6f\n", st.queue_seconds);
    fprintf(f, "# HELP cinfer_admission_seconds_total Time admitting requests (prefix match, shared rows copied, blocks reserved), summed.\n"
               "# TYPE cinfer_admission_seconds_total counter\ncinfer_admission_seconds_total %.6f\n", st.admit_seconds);
    fprintf(f, "# HELP cinfer_admissions_total Requests admitted to a slot.\n"
               "# TYPE cinfer_admissions_total counter\ncinfer_admissions_total %lld\n", st.admissions);
    fprintf(f, "# HELP cinfer_first_tokens_total Requests that got their first token.\n"
               "# TYPE cinfer_first_tokens_total counter\ncinfer_first_tokens_total %lld\n", st.first_tokens);
    fprintf(f, "# HELP cinfer_prefill_calls_total Prefill calls (a prompt chunk each).\n"
               "# TYPE cinfer_prefill_calls_total counter\ncinfer_prefill_calls_total %lld\n", st.prefill_calls);
    fprintf(f, "# HELP cinfer_prefill_seconds_total Time spent in prefill.\n"
               "# TYPE cinfer_prefill_seconds_total counter\ncinfer_prefill_seconds_total %.6f\n", st.prefill_seconds);
    fprintf(f, "# HELP cinfer_decode_tokens_total Tokens fed by decode steps.\n"
               "# TYPE cinfer_decode_tokens_total counter\ncinfer_decode_tokens_total %lld\n", st.decode_tokens);
    fprintf(f, "# HELP cinfer_decode_steps_total Batched decode steps.\n"
               "# TYPE cinfer_decode_steps_total counter\ncinfer_decode_steps_total %lld\n", st.decode_steps);
    fprintf(f, "# HELP cinfer_decode_argmax_steps_total Decode steps whose rows were all greedy (the argmax taken "
               "by the backend, ids brought back instead of logits).\n"
               "# TYPE cinfer_decode_argmax_steps_total counter\ncinfer_decode_argmax_steps_total %lld\n",
            st.decode_argmax_steps);
    fprintf(f, "# HELP cinfer_decode_seconds_total Time spent in decode steps.\n"
               "# TYPE cinfer_decode_seconds_total counter\ncinfer_decode_seconds_total %.6f\n", st.decode_seconds);
    fprintf(f, "# HELP cinfer_prefill_tokens_per_second Prefill throughput since start.\n"
               "# TYPE cinfer_prefill_tokens_per_second gauge\ncinfer_prefill_tokens_per_second %.2f\n",
            st.prefill_seconds > 0 ? st.prefill_tokens / st.prefill_seconds : 0.0);
    fprintf(f, "# HELP cinfer_decode_tokens_per_second Decode throughput (all sequences) since start.\n"
               "# TYPE cinfer_decode_tokens_per_second gauge\ncinfer_decode_tokens_per_second %.2f\n",
            st.decode_seconds > 0 ? st.decode_tokens / st.decode_seconds : 0.0);
    fprintf(f, "# HELP cinfer_queue_depth Requests waiting for a slot.\n# TYPE cinfer_queue_depth gauge\ncinfer_queue_depth %d\n",
            st.queue_depth);
    fprintf(f, "# HELP cinfer_active_sequences Sequences in slots.\n# TYPE cinfer_active_sequences gauge\ncinfer_active_sequences %d\n",
            st.active);
    fprintf(f, "# HELP cinfer_slots Slots (--parallel).\n# TYPE cinfer_slots gauge\ncinfer_slots %d\n", st.parallel);
    fprintf(f, "# HELP cinfer_prefix_cache_bytes Bytes held by the prefix store.\n"
               "# TYPE cinfer_prefix_cache_bytes gauge\ncinfer_prefix_cache_bytes %zu\n", st.prefix_bytes);
    fprintf(f, "# HELP cinfer_prefix_cache_entries Sequences held by the prefix store.\n"
               "# TYPE cinfer_prefix_cache_entries gauge\ncinfer_prefix_cache_entries %d\n", st.prefix_entries);
    if (st.kv_blocks) {   /* the paged cache pool */
        fprintf(f, "# HELP cinfer_kv_blocks Blocks of the cache pool (%d tokens each).\n# TYPE cinfer_kv_blocks gauge\n"
                   "cinfer_kv_blocks %d\n", st.kv_block_tokens, st.kv_blocks);
        fprintf(f, "# HELP cinfer_kv_blocks_used Blocks held by running sequences.\n# TYPE cinfer_kv_blocks_used gauge\n"
                   "cinfer_kv_blocks_used %d\n", st.kv_blocks_used);
        fprintf(f, "# HELP cinfer_kv_blocks_cached Blocks nobody holds that keep a named prefix (LRU).\n"
                   "# TYPE cinfer_kv_blocks_cached gauge\ncinfer_kv_blocks_cached %d\n", st.kv_blocks_cached);
        fprintf(f, "# HELP cinfer_kv_block_lookups_total Full prompt blocks looked up in the pool.\n"
                   "# TYPE cinfer_kv_block_lookups_total counter\ncinfer_kv_block_lookups_total %lld\n", st.kv_block_lookups);
        fprintf(f, "# HELP cinfer_kv_block_hits_total Full prompt blocks found in the pool.\n"
                   "# TYPE cinfer_kv_block_hits_total counter\ncinfer_kv_block_hits_total %lld\n", st.kv_block_hits);
        fprintf(f, "# HELP cinfer_kv_block_evictions_total Cached blocks taken for new rows.\n"
                   "# TYPE cinfer_kv_block_evictions_total counter\ncinfer_kv_block_evictions_total %lld\n", st.kv_block_evictions);
        fprintf(f, "# HELP cinfer_kv_tail_hits_total Last blocks of ended sequences a prompt went on from (copied, or taken over when no block was free).\n"
                   "# TYPE cinfer_kv_tail_hits_total counter\ncinfer_kv_tail_hits_total %lld\n", st.kv_tail_hits);
        fprintf(f, "# HELP cinfer_kv_block_copies_total Named blocks whose shared rows a prompt copied into its own (copy on write).\n"
                   "# TYPE cinfer_kv_block_copies_total counter\ncinfer_kv_block_copies_total %lld\n", st.kv_block_copies);
        fprintf(f, "# HELP cinfer_kv_waits_total Requests that waited at the queue head for blocks.\n"
                   "# TYPE cinfer_kv_waits_total counter\ncinfer_kv_waits_total %lld\n", st.kv_waits);
        fprintf(f, "# HELP cinfer_preemptions_total Running requests sent back to the queue to free blocks.\n"
                   "# TYPE cinfer_preemptions_total counter\ncinfer_preemptions_total %lld\n", st.preemptions);
        fprintf(f, "# HELP cinfer_replay_tokens_total Generated ids a preempted request fed again as decode steps.\n"
                   "# TYPE cinfer_replay_tokens_total counter\ncinfer_replay_tokens_total %lld\n", st.replay_tokens);
        fprintf(f, "# HELP cinfer_kv_pool_bytes Bytes of the cache pool.\n# TYPE cinfer_kv_pool_bytes gauge\n"
                   "cinfer_kv_pool_bytes %zu\n", st.kv_pool_bytes);
    }
    if (st.dev_total) {
        fprintf(f, "# HELP cinfer_device_memory_bytes Device memory, total and free after start-up.\n"
                   "# TYPE cinfer_device_memory_bytes gauge\ncinfer_device_memory_bytes{kind=\"total\"} %zu\n"
                   "cinfer_device_memory_bytes{kind=\"free\"} %zu\n", st.dev_total, st.dev_free);
    }
    fprintf(f, "# HELP cinfer_decode_batch_rows Rows of the latest decode step.\n# TYPE cinfer_decode_batch_rows gauge\n"
               "cinfer_decode_batch_rows %d\n", st.last_batch);
    if (fclose(f)) { free(b); return MHD_NO; }
    return reply(s, c, 200, "text/plain; version=0.0.4", b, len, NULL);
}

/* ---- dispatch ------------------------------------------------------------------------- */

static int key_ok(const char *want, const char *got) {
    if (!got) return 0;
    size_t a = strlen(want), b = strlen(got);
    unsigned char d = a != b;
    for (size_t i = 0; i < a; i++) d |= (unsigned char)(want[i] ^ (i < b ? got[i] : 0));
    return d == 0;
}

static int authorized(srv *s, struct MHD_Connection *c) {
    if (!s->o.api_key || !s->o.api_key[0]) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) return key_ok(s->o.api_key, h + 7);
    return key_ok(s->o.api_key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"));
}

static srv_route find_route(const char *url, int *post) {
    static const struct { const char *path; srv_route r; int post; } t[] = {
        { "/v1/chat/completions", R_CHAT, 1 }, { "/chat/completions", R_CHAT, 1 }, { "/v1/completions", R_COMPLETIONS, 1 },
        { "/completions", R_COMPLETIONS, 1 }, { "/v1/messages", R_MESSAGES, 1 }, { "/v1/responses", R_RESPONSES, 1 },
        { "/responses", R_RESPONSES, 1 }, { "/tokenize", R_TOKENIZE, 1 },
        { "/detokenize", R_DETOKENIZE, 1 }, { "/v1/models", R_MODELS, 0 }, { "/models", R_MODELS, 0 },
        { "/health", R_HEALTH, 0 }, { "/metrics", R_METRICS, 0 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(url, t[i].path)) { *post = t[i].post; return t[i].r; }
    if (!strncmp(url, "/v1/models/", 11)) { *post = 0; return R_MODELS; }
    if (web_find(url)) { *post = 0; return R_PAGE; }
    return R_OTHER;
}

static enum MHD_Result dispatch(srv *s, struct MHD_Connection *c, const char *url, const char *method, conn_body *b) {
    int post = 0;
    srv_route r = find_route(url, &post);
    atomic_fetch_add(&s->n_route[r], 1);
    api_dialect d = r == R_MESSAGES ? API_ANTHROPIC : API_OPENAI;
    srv_err e = { 0 };
    if (r == R_OTHER) {
        srv_fail(&e, 404, NULL, "no route %s %s", method, url);
        return srv_reply_err(s, c, d, &e);
    }
    if (strcmp(method, post ? "POST" : "GET")) {
        srv_fail(&e, 405, NULL, "%s needs %s, got %s", url, post ? "POST" : "GET", method);
        return srv_reply_err(s, c, d, &e);
    }
    if (r == R_PAGE) return srv_reply_page(s, c, url);
    if (r != R_HEALTH && !authorized(s, c)) {
        e.code = "invalid_api_key";
        srv_fail(&e, 401, NULL, "missing or incorrect API key (send Authorization: Bearer KEY)");
        return srv_reply_err(s, c, d, &e);
    }
    if (b->too_big) {
        e.code = "request_too_large";
        srv_fail(&e, 413, NULL, "the request body exceeds the limit of %zu bytes", s->o.max_body);
        return srv_reply_err(s, c, d, &e);
    }
    switch (r) {
    case R_HEALTH: return srv_reply_json(s, c, 200, json_pack("{s:s}", "status", "ok"));
    case R_METRICS: return route_metrics(s, c);
    case R_MODELS:
        if (url[strlen("/v1/models")] == '/' || (url[1] == 'm' && url[strlen("/models")] == '/')) {
            const char *id = strrchr(url, '/') + 1;
            if (strcmp(id, s->model_id)) {
                e.code = "model_not_found";
                srv_fail(&e, 404, "model", "The model '%s' does not exist; this server serves '%s'", id, s->model_id);
                return srv_reply_err(s, c, d, &e);
            }
            return srv_reply_json(s, c, 200, model_obj(s));
        }
        return srv_reply_json(s, c, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_obj(s)));
    default: break;
    }
    if (!b->len) {
        srv_fail(&e, 400, NULL, "the request body is empty; a JSON object is expected");
        return srv_reply_err(s, c, d, &e);
    }
    json_error_t je;
    json_t *req = json_loadb(b->body, b->len, JSON_REJECT_DUPLICATES, &je);
    if (!req) {
        srv_fail(&e, 400, NULL, "malformed JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
        return srv_reply_err(s, c, d, &e);
    }
    if (!json_is_object(req)) {
        json_decref(req);
        srv_fail(&e, 400, NULL, "the request body must be a JSON object");
        return srv_reply_err(s, c, d, &e);
    }
    enum MHD_Result rc;
    switch (r) {
    case R_CHAT: rc = api_chat(s, c, req); break;
    case R_COMPLETIONS: rc = api_completions(s, c, req); break;
    case R_MESSAGES: rc = api_messages(s, c, req); break;
    case R_RESPONSES: rc = api_responses(s, c, req); break;
    case R_TOKENIZE: rc = route_tokenize(s, c, req); break;
    default: rc = route_detokenize(s, c, req); break;
    }
    json_decref(req);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = cls;
    conn_body *b = *con_cls;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b) return MHD_NO;
        *con_cls = b;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) b->too_big = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!b->too_big) {
            if (b->len + *upload_size > s->o.max_body) {
                b->too_big = 1;
                free(b->body);
                b->body = NULL;
                b->len = b->cap = 0;
            } else {
                if (b->len + *upload_size + 1 > b->cap) {
                    size_t cap = b->cap ? b->cap : 4096;
                    while (cap < b->len + *upload_size + 1) cap *= 2;
                    char *nb = realloc(b->body, cap);
                    if (!nb) return MHD_NO;
                    b->body = nb;
                    b->cap = cap;
                }
                memcpy(b->body + b->len, upload, *upload_size);
                b->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(s, c, url, method, b);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)c; (void)toe;
    conn_body *b = *con_cls;
    if (!b) return;
    free(b->body);
    free(b);
    *con_cls = NULL;
}

/* ---- start and stop ------------------------------------------------------------------ */

/* How the chat template frames a tool call (for tool_choice "required" or a named
 * function): its rendering of an assistant turn calling a probe function, with the content
 * null (as DeepSeek's templates want) or else empty. Left NULL when no call renders. */
static void probe_call_frame(srv *s) {
    static const char probe[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": null, "
        "\"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", \"function\": {\"name\": \"cinfer_probe_fn\", "
        "\"arguments\": \"{\\\"cinfer_probe_arg\\\": 0}\"}}]}], \"tools\": [{\"type\": \"function\", \"function\": "
        "{\"name\": \"cinfer_probe_fn\", \"description\": \"probe\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {}}}}], \"add_generation_prompt\": false}";
    if (!s->ch) return;
    for (int k = 0; k < 2; k++) {
        json_t *req = json_loads(probe, 0, NULL);
        if (!req) return;
        if (k == 1) json_object_set_new(json_array_get(json_object_get(req, "messages"), 1), "content", json_string(""));
        char *text = NULL, err[256];
        size_t len = 0;
        int rc = tpl_chat_render(s->ch, req, NULL, &text, &len, err, sizeof err);
        json_decref(req);
        if (!rc) rc = op_call_frame(text, len, "cinfer_probe_fn", "{\"cinfer_probe_arg\": 0}", &s->call_open, &s->call_mid);
        if (!rc && op_call_close(text, len, "{\"cinfer_probe_arg\": 0}", &s->call_close)) s->call_close = NULL;
        free(text);
        if (!rc) return;
    }
}

int srv_demo_dir(char *out, size_t n) {
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return -1;
    exe[k] = 0;
    for (int up = 0; up < 5; up++) {
        char *sl = strrchr(exe, '/');
        if (!sl) break;
        *sl = 0;
        char probe[PATH_MAX + 64];
        snprintf(probe, sizeof probe, "%s/models/demo/config.json", exe);
        if (access(probe, R_OK)) /* installed: PREFIX/bin/cinfer beside PREFIX/share/cinfer/models/demo */
            snprintf(probe, sizeof probe, "%s/share/cinfer/models/demo/config.json", exe);
        if (!access(probe, R_OK)) {
            size_t k2 = strlen(probe) - strlen("/config.json");
            if (k2 >= n) return -1;
            memcpy(out, probe, k2);
            out[k2] = 0;
            return 0;
        }
    }
    return -1;
}

int srv_start(const srv_opts *o, srv **out, char *err, size_t errlen) {
    *out = NULL;
    srv *s = calloc(1, sizeof *s);
    if (!s) return ci_err(err, errlen, "out of memory");
    s->o = *o;
    pthread_mutex_init(&s->cl_mu, NULL);
    if (s->o.parallel <= 0) s->o.parallel = 8;
    if (s->o.queue_max < 0) s->o.queue_max = 64;
    if (!s->o.max_body) s->o.max_body = 8u << 20;
    if (s->o.timeout_s <= 0) s->o.timeout_s = 60;
    if (!s->o.host) s->o.host = "127.0.0.1";
    if (o->model_dir) snprintf(s->model_dir, sizeof s->model_dir, "%s", o->model_dir);
    else if (srv_demo_dir(s->model_dir, sizeof s->model_dir)) {
        ci_err(err, errlen, "no --model given and the demo model (models/demo beside the executable's folders) is not found");
        goto fail;
    }
    size_t dl = strlen(s->model_dir);
    while (dl > 1 && s->model_dir[dl - 1] == '/') s->model_dir[--dl] = 0;
    const char *base = strrchr(s->model_dir, '/');
    snprintf(s->model_id, sizeof s->model_id, "%s", o->model_id ? o->model_id : base ? base + 1 : s->model_dir);
    s->created = (long long)time(NULL);
    ci_model_opts mo;
    memset(&mo, 0, sizeof mo);
    mo.n_threads = o->threads;
    mo.device = o->device;
    mo.no_graphs = o->no_graphs;
    mo.map_weights = o->map_weights;
    mo.bf16_act = o->bf16_act;
    mo.int16_act = o->int16_act;
    mo.mlx_amx = o->mlx_amx;
    mo.kv_f16 = o->kv_f16;
    mo.tp = o->tp;
    mo.ep = o->ep;
    mo.progress = o->progress;
    mo.progress_ctx = o->progress_ctx;
    if (ci_model_open(s->model_dir, &mo, &s->m, err, errlen)) goto fail;
    if (tok_load(s->model_dir, &s->tk, err, errlen)) goto fail;
    if (tpl_chat_load_ex(s->model_dir, o->chat_template, &s->ch, s->ch_err, sizeof s->ch_err)) {
        s->ch = NULL;
        if (o->chat_template) { ci_err(err, errlen, "--chat-template: %s", s->ch_err); goto fail; }
    }
    probe_call_frame(s);
    int tok_n = tok_n_vocab(s->tk);
    if ((int)s->m->cfg.vocab_size < tok_n) tok_n = (int)s->m->cfg.vocab_size;
    if (eng_token_texts(s->tk, tok_n, &s->tok_bytes, &s->tok_off)) s->tok_bytes = NULL, s->tok_off = NULL;
    int ctx = s->o.ctx;
    if (ctx <= 0) ctx = s->m->cfg.max_pos > 0 && s->m->cfg.max_pos < 4096 ? (int)s->m->cfg.max_pos : 4096;
    const size_t pfx = s->o.prefix_cache_mb < 0 ? ENG_PREFIX_AUTO : (size_t)s->o.prefix_cache_mb << 20;
    eng_opts eo = { s->o.parallel, ctx, s->o.queue_max, pfx, s->tok_bytes, s->tok_off, tok_n,
                    s->call_open ? (unsigned char)s->call_open[0] : -1, s->o.kv_blocks,
                    s->o.prefill_chunk > 0 ? s->o.prefill_chunk : s->m->be->is_device ? 1024 : 256,
                    s->o.gpu_memory > 0 ? s->o.gpu_memory : 0.9,
                    s->m->be->is_device,     /* replay_decode: a device's prefill and decode differ in the last bits */
                    0 };                     /* sample_threads: engine.h's rule */
    if (eng_new(s->m, &eo, &s->e, err, errlen)) goto fail;
    if (!(s->rs = resp_store_new(RESP_STORE_ENTRIES, (size_t)RESP_STORE_MB << 20))) { ci_err(err, errlen, "out of memory"); goto fail; }

    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)s->o.port);
    const char *host = strcmp(s->o.host, "localhost") ? s->o.host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        ci_err(err, errlen, "--host '%s' is not an IPv4 address", s->o.host);
        goto fail;
    }
    if (s->o.port < 0 || s->o.port > 65535) { ci_err(err, errlen, "--port %d is outside [0, 65535]", s->o.port); goto fail; }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC,
                            (uint16_t)s->o.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)s->o.timeout_s, MHD_OPTION_CONNECTION_LIMIT, (unsigned)512, MHD_OPTION_END);
    if (!s->d) { ci_err(err, errlen, "cannot listen on %s:%d (in use, or not allowed)", s->o.host, s->o.port); goto fail; }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_in bound;
    socklen_t bl = sizeof bound;
    if (di && !getsockname(di->listen_fd, (struct sockaddr *)&bound, &bl)) s->port = ntohs(bound.sin_port);
    else s->port = s->o.port;
    *out = s;
    return 0;
fail:
    srv_stop(s);
    return -1;
}

void srv_cache_line(srv *s, char *out, size_t n) {
    eng_stats st;
    eng_get_stats(s->e, &st);
    int k = st.kv_blocks
                ? snprintf(out, n, "cache pool of %d blocks of %d tokens (%d tokens, %.0f MiB)", st.kv_blocks,
                           st.kv_block_tokens, st.kv_blocks * st.kv_block_tokens, st.kv_pool_bytes / 1048576.0)
                : snprintf(out, n, "cache of %d tokens per slot, %d slots", st.ctx, st.parallel);
    if (st.snapshot_bytes && st.prefix_budget && k > 0 && (size_t)k < n)   /* a hybrid's states: the prefix store */
        k += snprintf(out + k, n - (size_t)k, "; prefix store %.0f MiB (snapshots of the states, %.1f %s each)",
                      st.prefix_budget / 1048576.0,
                      st.snapshot_bytes >= (1u << 20) ? st.snapshot_bytes / 1048576.0 : st.snapshot_bytes / 1024.0,
                      st.snapshot_bytes >= (1u << 20) ? "MiB" : "KiB");
    if (st.snapshot_bytes > st.prefix_budget && st.prefix_budget && k > 0 && (size_t)k < n)
        k += snprintf(out + k, n - (size_t)k, ", too small to hold one: no prefix reuse (raise --prefix-cache-mb)");
    if (st.dev_total && k > 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, "; device memory %.1f of %.1f GiB free", st.dev_free / 1073741824.0,
                 st.dev_total / 1073741824.0);
}

int srv_port(const srv *s) { return s->port; }
const char *srv_model_id(const srv *s) { return s->model_id; }

void srv_stop(srv *s) {
    if (!s) return;
    if (s->e) eng_stop(s->e);           /* waiting handlers and streams finish now */
    if (s->d) MHD_stop_daemon(s->d);
    eng_free(s->e);
    resp_store_free(s->rs);
    tpl_chat_free(s->ch);
    free(s->call_open);
    free(s->call_mid);
    free(s->call_close);
    free(s->tok_bytes);
    free(s->tok_off);
    tok_free(s->tk);
    ci_model_free(s->m);
    free(s->cl);
    pthread_mutex_destroy(&s->cl_mu);
    free(s);
}
