/* api.c — the generation routes: OpenAI /v1/chat/completions and /v1/completions, and
 * Anthropic /v1/messages, streamed (server-sent events) or not; OpenAI /v1/responses runs
 * as a chat request whose request and reply responses.c translates.
 *
 * A request becomes a job: its body is validated field by field (an error names the
 * field), the prompt is rendered through the model's chat template and encoded, and the
 * engine runs it. The job then turns tokens into text: a streaming decoder (complete UTF-8
 * only), stop strings (text is held back while it could still become a stop string; a hit
 * cuts the text before it and cancels the sequence), logprobs, and the finish reason.
 * Streaming responses are produced by libmicrohttpd's content reader in the connection's
 * own thread, which blocks on the engine between events; a client that closes its socket
 * cancels its sequence within one wait slice (100 ms), streamed or not.
 *
 * Invariants: the engine reference of a job is released exactly once (job_free); every
 * path that leaves before the engine finished cancels first. */
#include "srv_internal.h"
#include "outparse.h"
#include "responses.h"
#include "api_schema.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../models/model.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_STOP = 16, WAIT_MS = 100, READ_BATCH = 64 };
typedef enum { K_CHAT, K_COMPLETION, K_MESSAGES, K_RESPONSES } job_kind;
enum { PH_START, PH_RUN, PH_DONE };

typedef struct {
    srv *s;
    job_kind kind;
    eng_req *r;
    int fd;
    int n_prompt, cached;
    int stream, include_usage;
    int logprobs;              /* -1 none; else alternatives per token */
    char id[64];
    long long created;
    tok_stream *ts;
    char *text;                /* visible text so far (cut at a stop string) */
    size_t len, cap, sent;     /* sent: bytes already streamed */
    char *stop[MAX_STOP];
    int n_stop;
    int stop_hit;
    const char *stop_str;
    int n_read, n_counted;     /* tokens read from the engine / counted as completion */
    int done;                  /* no more tokens will be taken */
    eng_finish fin;
    char err[256];
    json_t *lp;                /* logprob entries not yet sent (stream) or all (not) */
    int tools;                 /* chat: the request offers tools; tool calls are parsed out */
    int think_open;            /* chat: the prompt ends inside <think> */
    size_t sent_r;             /* chat: reasoning bytes already streamed */
    int tool_calls;            /* the reply ended in tool calls */
    char *out;                 /* SSE bytes ready for the socket */
    size_t olen, ocap, opos;
    int phase;
    char client[64];           /* the address holding one of its --per-client places, or "" */
    int *bias_id;              /* logit_bias, until submitted */
    float *bias;
    resp_view *rv;             /* K_RESPONSES: the request's Responses view (a chat job otherwise) */
} job;

/* ---- small helpers ------------------------------------------------------------------- */

int srv_fail(srv_err *e, int status, const char *param, const char *fmt, ...) {
    va_list ap;
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

const char *srv_json_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* Optional fields: 0 absent or null, 1 read, -1 wrong type or range (e filled). */
static int opt_num(const json_t *o, const char *k, double lo, double hi, double *out, srv_err *e) {
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return srv_fail(e, 400, k, "'%s' must be a number, got %s", k, srv_json_type(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return srv_fail(e, 400, k, "'%s' must be in [%g, %g], got %g", k, lo, hi, x);
    *out = x;
    return 1;
}

static int opt_int(const json_t *o, const char *k, long long lo, long long hi, long long *out, srv_err *e) {
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return srv_fail(e, 400, k, "'%s' must be an integer, got %s", k, srv_json_type(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return srv_fail(e, 400, k, "'%s' must be in [%lld, %lld], got %lld", k, lo, hi, x);
    *out = x;
    return 1;
}

static int opt_bool(const json_t *o, const char *k, int *out, srv_err *e) {
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return srv_fail(e, 400, k, "'%s' must be a boolean, got %s", k, srv_json_type(v));
    *out = json_is_true(v);
    return 1;
}

/* "model": absent is the served model; anything else must name it. */
static int check_model(srv *s, const json_t *req, srv_err *e) {
    const json_t *v = json_object_get(req, "model");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v)) return srv_fail(e, 400, "model", "'model' must be a string, got %s", srv_json_type(v));
    const char *m = json_string_value(v);
    if (strcmp(m, s->model_id) && strcmp(m, s->model_dir)) {
        e->code = "model_not_found";
        return srv_fail(e, 404, "model", "The model '%s' does not exist; this server serves '%s'", m, s->model_id);
    }
    return 0;
}

static void job_free(job *j) {
    if (!j) return;
    if (j->r) {
        if (!j->done || j->stop_hit) eng_cancel(j->r);
        eng_release(j->r);
    }
    srv_client_release(j->s, j->client);
    free(j->bias_id);
    free(j->bias);
    tok_stream_free(j->ts);
    free(j->text);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    json_decref(j->lp);
    free(j->out);
    resp_view_free(j->rv);
    free(j);
}

static int buf_add(char **b, size_t *len, size_t *cap, const char *p, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap * 2 : 256);
        while (c < *len + n + 1) c *= 2;
        char *nb = realloc(*b, c);
        if (!nb) return -1;
        *b = nb;
        *cap = c;
    }
    memcpy(*b + *len, p, n);
    *len += n;
    (*b)[*len] = 0;
    return 0;
}

/* ---- sampling parameters shared by the three dialects ------------------------------------ */

static int read_stop(job *j, const json_t *req, const char *key, srv_err *e) {
    const json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        if (!json_string_length(v)) return srv_fail(e, 400, key, "'%s' must not be an empty string", key);
        j->stop[j->n_stop++] = strdup(json_string_value(v));
        return 0;
    }
    if (!json_is_array(v)) return srv_fail(e, 400, key, "'%s' must be a string or an array of strings, got %s", key, srv_json_type(v));
    if (json_array_size(v) > MAX_STOP) return srv_fail(e, 400, key, "'%s' has %zu entries; at most %d", key, json_array_size(v), MAX_STOP);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x) || !json_string_length(x))
            return srv_fail(e, 400, key, "'%s[%zu]' must be a non-empty string", key, i);
        j->stop[j->n_stop++] = strdup(json_string_value(x));
    }
    for (int k = 0; k < j->n_stop; k++) if (!j->stop[k]) return srv_fail(e, 500, NULL, "out of memory");
    return 0;
}

/* temperature, top_p, top_k, min_p, seed, penalties; OpenAI ranges. */
static int read_sampling(const json_t *req, eng_params *p, double tmax, srv_err *e) {
    double d;
    long long v;
    int rc;
    ci_sampler_defaults(&p->so);
    p->so.temperature = 1.0f;
    p->so.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)p;
    if ((rc = opt_num(req, "temperature", 0, tmax, &d, e)) < 0) return -1;
    if (rc) p->so.temperature = (float)d;
    if ((rc = opt_num(req, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (rc) {
        if (d <= 0) return srv_fail(e, 400, "top_p", "'top_p' must be in (0, 1], got %g", d);
        p->so.top_p = (float)d;
    }
    if ((rc = opt_int(req, "top_k", -1, 1 << 30, &v, e)) < 0) return -1;
    if (rc) p->so.top_k = v < 0 ? 0 : (int)v;
    if ((rc = opt_num(req, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (rc) p->so.min_p = (float)d;
    if ((rc = opt_num(req, "repetition_penalty", 1e-3, 100, &d, e)) < 0) return -1;
    if (rc) p->so.repeat_penalty = (float)d;
    if ((rc = opt_num(req, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (rc) p->presence_penalty = (float)d;
    if ((rc = opt_num(req, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (rc) p->frequency_penalty = (float)d;
    const json_t *sv = json_object_get(req, "seed");
    if (sv && !json_is_null(sv)) {
        if (!json_is_integer(sv)) return srv_fail(e, 400, "seed", "'seed' must be an integer, got %s", srv_json_type(sv));
        p->so.seed = (uint64_t)json_integer_value(sv);
    }
    if ((rc = opt_bool(req, "ignore_eos", &p->ignore_eos, e)) < 0) return -1;
    return 0;
}

/* OpenAI tool_choice: "auto" (or absent), "none" (*no_tools: the tools are neither shown
 * nor parsed), "required" or {"type": "function", "function": {"name": N}}: *forced is what
 * the reply is made to start with (the template's call opening, with N), malloc'd. */
static int read_tool_choice(srv *s, const json_t *req, int *no_tools, char **forced, srv_err *e) {
    *no_tools = 0;
    *forced = NULL;
    const json_t *tc = json_object_get(req, "tool_choice"), *tools = json_object_get(req, "tools");
    if (!tc || json_is_null(tc)) return 0;
    size_t nt = json_is_array(tools) ? json_array_size(tools) : 0;
    const char *mode = json_string_value(tc);
    const char *name = NULL;
    if (mode) {
        if (!strcmp(mode, "auto")) return 0;
        if (!strcmp(mode, "none")) { *no_tools = 1; return 0; }
        if (strcmp(mode, "required"))
            return srv_fail(e, 400, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function, got \"%.40s\"", mode);
    } else {
        const json_t *f = json_object_get(tc, "function");
        name = json_string_value(json_object_get(f, "name"));
        const char *ty = json_string_value(json_object_get(tc, "type"));
        if (!json_is_object(tc) || !ty || strcmp(ty, "function") || !name)
            return srv_fail(e, 400, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (!nt) return srv_fail(e, 400, "tool_choice", "'tool_choice' %s needs 'tools'", name ? "naming a function" : "\"required\"");
    if (name) {
        size_t i;
        const json_t *t;
        int found = 0;
        json_array_foreach(tools, i, t) {
            const char *tn = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
            if (tn && !strcmp(tn, name)) found = 1;
        }
        if (!found) return srv_fail(e, 400, "tool_choice", "'tool_choice' names '%.60s', which is not among 'tools'", name);
    }
    if (!s->call_open)
        return srv_fail(e, 400, "tool_choice", "this model's chat template renders no tool call cinfer can read, so a call cannot be required; use \"auto\"");
    if (name && !s->call_mid)
        return srv_fail(e, 400, "tool_choice", "this model's chat template frames calls so that cinfer cannot start one of a given function; use \"required\" or \"auto\"");
    size_t lo = strlen(s->call_open), ln = name ? strlen(name) : 0, lm = name ? strlen(s->call_mid) : 0;
    char *f = malloc(lo + ln + lm + 1);
    if (!f) return srv_fail(e, 500, NULL, "out of memory");
    memcpy(f, s->call_open, lo);
    if (name) { memcpy(f + lo, name, ln); memcpy(f + lo + ln, s->call_mid, lm); }
    f[lo + ln + lm] = 0;
    *forced = f;
    return 0;
}

/* OpenAI response_format: {"type": "text"} or absent, {"type": "json_object"} (JSON mode,
 * *json = 1) or {"type": "json_schema", ...} (*g: the schema's grammar, api_schema.c). */
static int read_response_format(const json_t *req, int *json, jsc_grammar **g, srv_err *e) {
    *json = 0;
    *g = NULL;
    const json_t *rf = json_object_get(req, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    const char *ty = json_is_object(rf) ? cj_get_str(rf, "type") : NULL;
    if (!ty) return srv_fail(e, 400, "response_format", "'response_format' must be an object with a 'type'");
    if (!strcmp(ty, "text")) return 0;
    if (!strcmp(ty, "json_object")) { *json = 1; return 0; }
    if (!strcmp(ty, "json_schema")) return api_json_schema(rf, g, e);
    return srv_fail(e, 400, "response_format", "'response_format' type must be text, json_object or json_schema, got '%.40s'", ty);
}

/* OpenAI logit_bias: {"token id": bias in [-100, 100], ...} into p (arrays owned by j). */
static int read_logit_bias(srv *s, job *j, const json_t *req, eng_params *p, srv_err *e) {
    const json_t *lb = json_object_get(req, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb)) return srv_fail(e, 400, "logit_bias", "'logit_bias' must be an object of token id -> bias, got %s", srv_json_type(lb));
    size_t n = json_object_size(lb);
    if (n > 1024) return srv_fail(e, 400, "logit_bias", "'logit_bias' has %zu entries; at most 1024", n);
    if (!n) return 0;
    int V = tok_n_vocab(s->tk);
    if ((int)s->m->cfg.vocab_size < V) V = (int)s->m->cfg.vocab_size;
    j->bias_id = malloc(n * sizeof(int));
    j->bias = malloc(n * sizeof(float));
    if (!j->bias_id || !j->bias) return srv_fail(e, 500, NULL, "out of memory");
    const char *k;
    const json_t *v;
    int i = 0;
    json_object_foreach((json_t *)lb, k, v) {
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || id >= V)
            return srv_fail(e, 400, "logit_bias", "'logit_bias' key '%.40s' is not a token id in [0, %d)", k, V);
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
            return srv_fail(e, 400, "logit_bias", "'logit_bias' value for token %ld must be a number in [-100, 100]", id);
        j->bias_id[i] = (int)id;
        j->bias[i++] = (float)json_number_value(v);
    }
    p->bias_id = j->bias_id;
    p->bias = j->bias;
    p->n_bias = i;
    return 0;
}

/* max_tokens against the context: an explicit value that does not fit is an error; the
 * default is what is left of the context (capped by dflt when > 0). */
static int read_max_tokens(srv *s, const json_t *req, const char *k1, const char *k2, int n_prompt, int dflt, int required,
                           eng_params *p, srv_err *e) {
    int ctx = eng_ctx(s->e);
    if (n_prompt >= ctx) {
        e->code = "context_length_exceeded";
        return srv_fail(e, 400, "messages", "the prompt is %d tokens; this server's context is %d tokens", n_prompt, ctx);
    }
    long long v = 0;
    int rc = opt_int(req, k1, 1, 1 << 30, &v, e);
    const char *which = k1;
    if (rc == 0 && k2) { rc = opt_int(req, k2, 1, 1 << 30, &v, e); which = k2; }
    if (rc < 0) return -1;
    if (rc == 0 && required) return srv_fail(e, 400, k1, "'%s' is required", k1);
    if (rc) {
        if (n_prompt + v > ctx) {
            e->code = "context_length_exceeded";
            return srv_fail(e, 400, which, "'%s' %lld + the prompt's %d tokens exceed the context of %d tokens", which, v,
                            n_prompt, ctx);
        }
        p->max_tokens = (int)v;
    } else {
        p->max_tokens = ctx - n_prompt;
        if (dflt > 0 && p->max_tokens > dflt) p->max_tokens = dflt;
    }
    return 0;
}

/* ---- prompts ------------------------------------------------------------------------------ */

/* A message's content as one string: a string, or the text parts of an array joined by
 * newlines (OpenAI {"type":"text","text":...}; Anthropic the same). */
static int content_text(const json_t *c, const char *where, char **out, srv_err *e) {
    *out = NULL;
    if (!c || json_is_null(c)) { *out = strdup(""); return *out ? 0 : srv_fail(e, 500, NULL, "out of memory"); }
    if (json_is_string(c)) { *out = strdup(json_string_value(c)); return *out ? 0 : srv_fail(e, 500, NULL, "out of memory"); }
    if (!json_is_array(c)) return srv_fail(e, 400, where, "'%s' must be a string or an array of content parts, got %s", where, srv_json_type(c));
    char *b = NULL;
    size_t len = 0, cap = 0;
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *ty = json_is_object(part) ? cj_get_str(part, "type") : NULL;
        if (!ty) { free(b); return srv_fail(e, 400, where, "'%s[%zu]' must be an object with a 'type'", where, i); }
        if (strcmp(ty, "text")) { free(b); return srv_fail(e, 400, where, "'%s[%zu]': content type '%s' is not supported (text only)", where, i, ty); }
        const char *t = cj_get_str(part, "text");
        if (!t) { free(b); return srv_fail(e, 400, where, "'%s[%zu].text' must be a string", where, i); }
        if ((len && buf_add(&b, &len, &cap, "\n", 1)) || buf_add(&b, &len, &cap, t, strlen(t))) { free(b); return srv_fail(e, 500, NULL, "out of memory"); }
    }
    *out = b ? b : strdup("");
    return *out ? 0 : srv_fail(e, 500, NULL, "out of memory");
}

/* Messages normalised for the template: every field kept, content made a string. The
 * Anthropic dialect also takes a top-level system (string or text blocks). */
static json_t *norm_messages(const json_t *req, api_dialect d, srv_err *e) {
    const json_t *ms = json_object_get(req, "messages");
    if (!ms) { srv_fail(e, 400, "messages", "'messages' is required"); return NULL; }
    if (!json_is_array(ms)) { srv_fail(e, 400, "messages", "'messages' must be an array, got %s", srv_json_type(ms)); return NULL; }
    if (!json_array_size(ms)) { srv_fail(e, 400, "messages", "'messages' must not be empty"); return NULL; }
    json_t *out = json_array();
    if (d == API_ANTHROPIC) {
        const json_t *sys = json_object_get(req, "system");
        if (sys && !json_is_null(sys)) {
            char *t;
            if (content_text(sys, "system", &t, e)) { json_decref(out); return NULL; }
            json_array_append_new(out, json_pack("{s:s,s:s}", "role", "system", "content", t));
            free(t);
        }
    }
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu]", i);
        if (!json_is_object(m)) { srv_fail(e, 400, where, "'%s' must be an object, got %s", where, srv_json_type(m)); goto fail; }
        const json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) { srv_fail(e, 400, where, "'%s.role' must be a string", where); goto fail; }
        const char *r = json_string_value(role);
        int ok = d == API_ANTHROPIC ? !strcmp(r, "user") || !strcmp(r, "assistant")
                                    : !strcmp(r, "system") || !strcmp(r, "developer") || !strcmp(r, "user") ||
                                          !strcmp(r, "assistant") || !strcmp(r, "tool");
        if (!ok) { srv_fail(e, 400, where, "'%s.role' '%s' is not a valid role", where, r); goto fail; }
        const json_t *c = json_object_get(m, "content");
        if (!c && strcmp(r, "assistant")) { srv_fail(e, 400, where, "'%s.content' is required", where); goto fail; }
        char cw[80];
        snprintf(cw, sizeof cw, "%s.content", where);
        char *t;
        if (content_text(c, cw, &t, e)) goto fail;
        json_t *nm = json_deep_copy(m);
        json_object_set_new(nm, "content", json_string(t));
        if (!strcmp(r, "developer")) json_object_set_new(nm, "role", json_string("system"));
        free(t);
        json_array_append_new(out, nm);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* An Anthropic Messages request in the OpenAI chat form the templates take: system as the
 * first message; assistant tool_use blocks as tool_calls (arguments as JSON text); user
 * tool_result blocks as "tool" messages ahead of the user's own text; thinking blocks left
 * out; tools {name, description, input_schema} as functions; tool_choice auto / any / tool /
 * none as auto / required / a named function / none. A new object, or NULL with e filled. */
static json_t *anthropic_as_chat(const json_t *req, srv_err *e) {
    const json_t *ms = json_object_get(req, "messages");
    if (!ms) { srv_fail(e, 400, "messages", "'messages' is required"); return NULL; }
    if (!json_is_array(ms)) { srv_fail(e, 400, "messages", "'messages' must be an array, got %s", srv_json_type(ms)); return NULL; }
    if (!json_array_size(ms)) { srv_fail(e, 400, "messages", "'messages' must not be empty"); return NULL; }
    json_t *out = json_deep_copy(req), *msgs = json_array();
    json_object_del(out, "system");
    json_object_set_new(out, "messages", msgs);
    const json_t *sys = json_object_get(req, "system");
    if (sys && !json_is_null(sys)) {
        char *t;
        if (content_text(sys, "system", &t, e)) goto fail;
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", t));
        free(t);
    }
    size_t i;
    const json_t *m;
    json_array_foreach(ms, i, m) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu]", i);
        const char *r = json_is_object(m) ? cj_get_str(m, "role") : NULL;
        if (!r || (strcmp(r, "user") && strcmp(r, "assistant"))) {
            srv_fail(e, 400, where, "'%s' must be an object with role 'user' or 'assistant'", where);
            goto fail;
        }
        int asst = !strcmp(r, "assistant");
        const json_t *c = json_object_get(m, "content");
        if (!json_is_array(c)) {                       /* a string (or invalid: content_text says) */
            char cw[80], *t;
            snprintf(cw, sizeof cw, "%s.content", where);
            if (content_text(c, cw, &t, e)) goto fail;
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", r, "content", t));
            free(t);
            continue;
        }
        json_t *text = json_array(), *calls = json_array();
        size_t k;
        const json_t *b;
        json_array_foreach(c, k, b) {
            char bw[96];
            snprintf(bw, sizeof bw, "%s.content[%zu]", where, k);
            const char *ty = json_is_object(b) ? cj_get_str(b, "type") : NULL;
            if (!ty) { srv_fail(e, 400, bw, "'%s' must be an object with a 'type'", bw); goto fail_b; }
            if (!strcmp(ty, "text")) {
                json_array_append(text, (json_t *)b);
            } else if (asst && (!strcmp(ty, "thinking") || !strcmp(ty, "redacted_thinking"))) {
                continue;
            } else if (asst && !strcmp(ty, "tool_use")) {
                const char *id = cj_get_str(b, "id"), *name = cj_get_str(b, "name");
                const json_t *in = json_object_get(b, "input");
                if (!id || !name || (in && !json_is_object(in))) {
                    srv_fail(e, 400, bw, "'%s' (tool_use) needs a string 'id' and 'name' and an object 'input'", bw);
                    goto fail_b;
                }
                char *args = in ? json_dumps(in, JSON_COMPACT) : strdup("{}");
                if (!args) { srv_fail(e, 500, NULL, "out of memory"); goto fail_b; }
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function", "function",
                                                       "name", name, "arguments", args));
                free(args);
            } else if (!asst && !strcmp(ty, "tool_result")) {
                const char *id = cj_get_str(b, "tool_use_id");
                char cw[112], *t;
                snprintf(cw, sizeof cw, "%s.content", bw);
                if (!id) { srv_fail(e, 400, bw, "'%s' (tool_result) needs a string 'tool_use_id'", bw); goto fail_b; }
                if (content_text(json_object_get(b, "content"), cw, &t, e)) goto fail_b;
                json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", id, "content", t));
                free(t);
            } else {
                srv_fail(e, 400, bw, "'%s': content type '%s' is not supported in a%s message", bw, ty, asst ? "n assistant" : " user");
                goto fail_b;
            }
        }
        char cw[80], *t = NULL;
        snprintf(cw, sizeof cw, "%s.content", where);
        if (content_text(text, cw, &t, e)) goto fail_b;
        if (json_array_size(calls)) {
            json_array_append_new(msgs, json_pack("{s:s,s:s,s:O}", "role", r, "content", t, "tool_calls", calls));
        } else if (asst || json_array_size(text) || !k) {
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", r, "content", t));
        }
        free(t);
        json_decref(text);
        json_decref(calls);
        continue;
    fail_b:
        json_decref(text);
        json_decref(calls);
        goto fail;
    }
    const json_t *tools = json_object_get(req, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) { srv_fail(e, 400, "tools", "'tools' must be an array, got %s", srv_json_type(tools)); goto fail; }
        json_t *ot = json_array();
        const json_t *t;
        json_array_foreach(tools, i, t) {
            const char *name = json_is_object(t) ? cj_get_str(t, "name") : NULL;
            const json_t *schema = json_object_get(t, "input_schema"), *desc = json_object_get(t, "description");
            if (!name || !json_is_object(schema) || (desc && !json_is_string(desc))) {
                json_decref(ot);
                srv_fail(e, 400, "tools", "'tools[%zu]' needs a string 'name' and an object 'input_schema'", i);
                goto fail;
            }
            json_t *f = json_pack("{s:s}", "name", name);          /* OpenAI's key order, as templates print it */
            if (desc) json_object_set(f, "description", (json_t *)desc);
            json_object_set(f, "parameters", (json_t *)schema);
            json_array_append_new(ot, json_pack("{s:s,s:o}", "type", "function", "function", f));
        }
        json_object_set_new(out, "tools", ot);
    }
    const json_t *tc = json_object_get(req, "tool_choice");
    if (tc && !json_is_null(tc)) {
        const char *ty = json_is_object(tc) ? cj_get_str(tc, "type") : NULL, *name = json_is_object(tc) ? cj_get_str(tc, "name") : NULL;
        json_t *oc = NULL;
        if (ty && !strcmp(ty, "auto")) oc = json_string("auto");
        else if (ty && !strcmp(ty, "any")) oc = json_string("required");
        else if (ty && !strcmp(ty, "none")) oc = json_string("none");
        else if (ty && !strcmp(ty, "tool") && name) oc = json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", name);
        if (!oc) {
            srv_fail(e, 400, "tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}");
            goto fail;
        }
        json_object_set_new(out, "tool_choice", oc);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* The ids of t's first message alone (a system message, with t's tools and template kwargs,
 * no generation prompt) when its text starts text and its ids start ids[0, n), fewer than n;
 * else 0. */
static int system_end(srv *s, const json_t *t, const char *text, size_t len, const int *ids, int n) {
    const json_t *ms = json_object_get(t, "messages"), *m0 = json_array_get(ms, 0);
    const char *role = json_string_value(json_object_get(m0, "role"));
    if (json_array_size(ms) < 2 || !role || (strcmp(role, "system") && strcmp(role, "developer"))) return 0;
    json_t *t1 = json_pack("{s:[O],s:b}", "messages", m0, "add_generation_prompt", 0);
    if (!t1) return 0;
    const char *keys[] = { "tools", "chat_template_kwargs" };
    for (int i = 0; i < 2; i++)
        if (json_object_get(t, keys[i])) json_object_set(t1, keys[i], json_object_get(t, keys[i]));
    char *t1text = NULL, err[256];
    size_t t1len = 0, cnt = 0;
    int *t1ids = NULL, got = 0;
    if (!tpl_chat_render(s->ch, t1, NULL, &t1text, &t1len, err, sizeof err) && t1len < len && !memcmp(t1text, text, t1len) &&
        !tok_encode(s->tk, t1text, t1len, 0, &t1ids, &cnt, err, sizeof err) && cnt > 0 && (int)cnt < n &&
        !memcmp(t1ids, ids, cnt * sizeof(int)))
        got = (int)cnt;
    free(t1text);
    free(t1ids);
    json_decref(t1);
    return got;
}

int api_chat_prompt(srv *s, json_t *req, api_dialect d, int no_tools, const char *forced, int **ids, int *n,
                    int *opens_think, int *sys_end, srv_err *e) {
    *ids = NULL;
    *n = 0;
    if (opens_think) *opens_think = 0;
    if (sys_end) *sys_end = 0;
    if (!s->ch) return srv_fail(e, 400, "messages", "this model has no chat template (%s); use /v1/completions", s->ch_err);
    json_t *msgs = norm_messages(req, d, e);
    if (!msgs) return -1;
    json_t *t = json_pack("{s:o,s:b}", "messages", msgs, "add_generation_prompt", 1);
    const json_t *tools = json_object_get(req, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) { json_decref(t); return srv_fail(e, 400, "tools", "'tools' must be an array, got %s", srv_json_type(tools)); }
        if (json_array_size(tools) && !no_tools) json_object_set(t, "tools", (json_t *)tools);
    }
    const json_t *kw = json_object_get(req, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) { json_decref(t); return srv_fail(e, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object"); }
        json_object_set(t, "chat_template_kwargs", (json_t *)kw);
    }
    char *text = NULL, err[768];
    size_t len = 0;
    int rc = tpl_chat_render(s->ch, t, NULL, &text, &len, err, sizeof err);
    if (rc) { json_decref(t); return srv_fail(e, 400, "messages", "%s", err); }
    size_t cnt = 0;
    int ot = op_prompt_opens_think(text, len);
    if (opens_think) *opens_think = ot;
    if (forced) {
        size_t fl = strlen(forced), tl = ot ? strlen("</think>") : 0;
        char *nt = realloc(text, len + tl + fl + 1);
        if (!nt) { free(text); json_decref(t); return srv_fail(e, 500, NULL, "out of memory"); }
        text = nt;
        memcpy(text + len, "</think>", tl);
        memcpy(text + len + tl, forced, fl + 1);
        len += tl + fl;
    }
    rc = tok_encode(s->tk, text, len, 0, ids, &cnt, err, sizeof err);
    if (!rc && cnt && sys_end && s->e && eng_snapshots(s->e)) *sys_end = system_end(s, t, text, len, *ids, (int)cnt);
    json_decref(t);
    free(text);
    if (rc) return srv_fail(e, 400, "messages", "%s", err);
    if (!cnt) { free(*ids); *ids = NULL; return srv_fail(e, 400, "messages", "the messages render to an empty prompt"); }
    *n = (int)cnt;
    return 0;
}

/* /v1/completions prompt: a string, token ids, or a list holding one of either. */
static int completion_prompt(srv *s, const json_t *req, int **ids, int *n, srv_err *e) {
    const json_t *p = json_object_get(req, "prompt");
    *ids = NULL;
    if (!p) return srv_fail(e, 400, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        char err[512];
        size_t cnt = 0;
        if (tok_encode(s->tk, json_string_value(p), json_string_length(p), 1, ids, &cnt, err, sizeof err))
            return srv_fail(e, 400, "prompt", "%s", err);
        if (!cnt) { free(*ids); *ids = NULL; return srv_fail(e, 400, "prompt", "'prompt' encodes to no tokens"); }
        *n = (int)cnt;
        return 0;
    }
    if (!json_is_array(p)) return srv_fail(e, 400, "prompt", "'prompt' must be a string or an array of token ids, got %s", srv_json_type(p));
    size_t cnt = json_array_size(p);
    if (!cnt) return srv_fail(e, 400, "prompt", "'prompt' must not be empty");
    int V = tok_n_vocab(s->tk);
    if ((int)s->m->cfg.vocab_size < V) V = (int)s->m->cfg.vocab_size;
    *ids = malloc(cnt * sizeof(int));
    if (!*ids) return srv_fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < cnt; i++) {
        const json_t *x = json_array_get(p, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= V) {
            free(*ids);
            *ids = NULL;
            if (json_is_string(x)) return srv_fail(e, 400, "prompt", "'prompt' with several strings is not supported (one request per prompt)");
            return srv_fail(e, 400, "prompt", "'prompt[%zu]' must be a token id in [0, %d)", i, V);
        }
        (*ids)[i] = (int)json_integer_value(x);
    }
    *n = (int)cnt;
    return 0;
}

/* ---- turning tokens into text ------------------------------------------------------------ */

/* Appends decoded text; a stop string found in it cuts the text there. Returns 1 on a hit. */
static int text_add(job *j, const char *p, size_t n) {
    size_t old = j->len;
    if (buf_add(&j->text, &j->len, &j->cap, p, n)) return 0;
    size_t best = (size_t)-1;
    for (int k = 0; k < j->n_stop; k++) {
        size_t sl = strlen(j->stop[k]);
        size_t from = old >= sl ? old - sl + 1 : 0;
        if (j->len < sl) continue;
        for (size_t i = from; i + sl <= j->len; i++)
            if (!memcmp(j->text + i, j->stop[k], sl)) {
                if (i < best) { best = i; j->stop_str = j->stop[k]; }
                break;
            }
    }
    if (best == (size_t)-1) return 0;
    j->len = best;
    j->text[best] = 0;
    j->stop_hit = 1;
    return 1;
}

/* Bytes of text that can be sent now: all of it unless its tail could still grow into a
 * stop string. */
static size_t safe_end(const job *j) {
    if (j->done) return j->len;
    size_t hold = 0;
    for (int k = 0; k < j->n_stop; k++) {
        size_t sl = strlen(j->stop[k]);
        for (size_t m = sl - 1 < j->len ? sl - 1 : j->len; m > hold; m--)
            if (!memcmp(j->text + j->len - m, j->stop[k], m)) { hold = m; break; }
    }
    return j->len - hold;
}

static json_t *token_json(srv *s, int id, float lp, int with_bytes) {
    char *t = NULL, err[128];
    size_t len = 0;
    if (tok_decode(s->tk, &id, 1, 0, &t, &len, err, sizeof err)) { t = strdup(""); len = 0; }
    json_t *o = json_object();
    json_object_set_new(o, "token", json_stringn(t ? t : "", len));
    json_object_set_new(o, "logprob", json_real(isfinite(lp) ? lp : -9999.0));
    if (with_bytes) {
        json_t *b = json_array();
        for (size_t i = 0; i < len; i++) json_array_append_new(b, json_integer((unsigned char)t[i]));
        json_object_set_new(o, "bytes", b);
    }
    free(t);
    return o;
}

static void add_logprob(job *j, const eng_tok *t) {
    if (j->logprobs < 0) return;
    if (!j->lp) j->lp = json_array();
    json_t *o = token_json(j->s, t->id, t->logprob, 1);
    json_t *top = json_array();
    for (int k = 0; k < t->n_top; k++)
        if (t->top_id[k] >= 0) json_array_append_new(top, token_json(j->s, t->top_id[k], t->top_lp[k], 1));
    json_object_set_new(o, "top_logprobs", top);
    json_array_append_new(j->lp, o);
}

static int is_eos(const srv *s, int id) {
    for (int i = 0; i < s->m->cfg.n_eos; i++) if (id == s->m->cfg.eos_ids[i]) return 1;
    return 0;
}

/* Reads what the engine has (waiting up to wait_ms for something new). Sets j->done when
 * the sequence is over for this job: finished, or cut by a stop string. */
static void job_pump(job *j, int wait_ms) {
    eng_tok buf[READ_BATCH];
    int fin = 0;
    int n = eng_read(j->r, j->n_read, buf, READ_BATCH, wait_ms, &fin);
    char err[256];
    if ((n > 0 && j->n_read == 0) || fin) j->cached = eng_req_cached(j->r);
    for (int i = 0; i < n && !j->stop_hit; i++) {
        const char *p;
        size_t len;
        j->n_counted++;
        add_logprob(j, &buf[i]);
        if (j->tools && is_eos(j->s, buf[i].id)) continue;
        if (tok_stream_put(j->ts, buf[i].id, &p, &len, err, sizeof err)) continue;
        if (text_add(j, p, len)) eng_cancel(j->r);
    }
    j->n_read += n;
    if (j->stop_hit) { j->done = 1; return; }
    if (fin) {
        j->fin = eng_req_finish(j->r, j->err, sizeof j->err);
        const char *p;
        size_t len;
        if (!tok_stream_flush(j->ts, &p, &len, err, sizeof err) && len) text_add(j, p, len);
        j->done = 1;
    }
}

static const char *finish_reason(const job *j) {
    if (j->tool_calls) return j->kind == K_MESSAGES ? "tool_use" : "tool_calls";
    if (j->stop_hit || j->fin == ENG_FIN_EOS) return j->kind == K_MESSAGES ? (j->stop_hit ? "stop_sequence" : "end_turn") : "stop";
    if (j->fin == ENG_FIN_LENGTH) return j->kind == K_MESSAGES ? "max_tokens" : "length";
    return j->kind == K_MESSAGES ? "end_turn" : "stop";
}

static json_t *usage_json(const job *j) {
    if (j->kind == K_MESSAGES)
        return json_pack("{s:i,s:i,s:i}", "input_tokens", j->n_prompt, "output_tokens", j->n_counted,
                         "cache_read_input_tokens", j->cached);
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", j->n_prompt, "completion_tokens", j->n_counted,
                     "total_tokens", j->n_prompt + j->n_counted, "prompt_tokens_details", "cached_tokens", j->cached);
}

/* Completions-style logprobs {tokens, token_logprobs, top_logprobs, text_offset} from the
 * chat-style entries. */
static json_t *completion_logprobs(json_t *lp) {
    json_t *o = json_object(), *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i, off = 0;
    json_t *x;
    json_array_foreach(lp, i, x) {
        const char *t = cj_get_str(x, "token");
        json_array_append(toks, json_object_get(x, "token"));
        json_array_append(lps, json_object_get(x, "logprob"));
        json_t *m = json_object();
        size_t k;
        json_t *y;
        json_array_foreach(json_object_get(x, "top_logprobs"), k, y) json_object_set(m, cj_get_str(y, "token"), json_object_get(y, "logprob"));
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += t ? strlen(t) : 0;
    }
    json_object_set_new(o, "tokens", toks);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    return o;
}

/* ---- streaming --------------------------------------------------------------------------- */

static void sse(job *j, const char *event, json_t *obj) {
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!s) return;
    if (event) {
        buf_add(&j->out, &j->olen, &j->ocap, "event: ", 7);
        buf_add(&j->out, &j->olen, &j->ocap, event, strlen(event));
        buf_add(&j->out, &j->olen, &j->ocap, "\n", 1);
    }
    buf_add(&j->out, &j->olen, &j->ocap, "data: ", 6);
    buf_add(&j->out, &j->olen, &j->ocap, s, strlen(s));
    buf_add(&j->out, &j->olen, &j->ocap, "\n\n", 2);
    free(s);
}

/* K_RESPONSES: the reply as responses.c reads it, and its events written as SSE. */
static void job_reply(const job *j, resp_reply *r) {
    *r = (resp_reply){ j->text, j->len, j->think_open, j->tools, RESP_RUNNING, j->err, j->n_prompt, j->n_counted, j->cached };
    if (j->done)
        r->finish = j->fin == ENG_FIN_ERROR && !j->stop_hit ? RESP_ERROR : j->fin == ENG_FIN_LENGTH ? RESP_LENGTH : RESP_STOP;
}

static void resp_sse(void *j, const char *event, json_t *data) { sse(j, event, data); }

static json_t *openai_chunk(job *j, json_t *choice) {
    json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", j->id, "object",
                          j->kind == K_CHAT ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)j->created,
                          "model", j->s->model_id, "choices", choice);
    if (j->include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

/* One event carrying the text in [from, to) (and pending logprobs); finish may be NULL. */
static void emit_delta(job *j, size_t from, size_t to, const char *finish) {
    json_t *piece = json_stringn(j->text + from, to - from);
    if (j->kind == K_MESSAGES) {
        if (to > from)
            sse(j, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", 0,
                                                    "delta", "type", "text_delta", "text", piece));
        else json_decref(piece);
        return;
    }
    json_t *lp = json_null();
    if (j->lp && json_array_size(j->lp)) {
        lp = j->kind == K_CHAT ? json_pack("{s:O}", "content", j->lp) : completion_logprobs(j->lp);
        json_array_clear(j->lp);
    }
    json_t *choice;
    if (j->kind == K_CHAT) {
        json_t *delta = json_object();
        if (to > from || !finish) json_object_set_new(delta, "content", piece); else json_decref(piece);
        choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs", lp, "finish_reason",
                           finish ? json_string(finish) : json_null());
    } else {
        choice = json_pack("{s:o,s:i,s:o,s:o}", "text", piece, "index", 0, "logprobs", lp, "finish_reason",
                           finish ? json_string(finish) : json_null());
    }
    sse(j, NULL, openai_chunk(j, choice));
}

/* chat: one chunk with this delta (stolen), the pending logprobs and finish (may be NULL). */
static void emit_chat(job *j, json_t *delta, const char *finish) {
    json_t *lp = json_null();
    if (j->lp && json_array_size(j->lp)) {
        lp = json_pack("{s:O}", "content", j->lp);
        json_array_clear(j->lp);
    }
    json_t *choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs", lp, "finish_reason",
                               finish ? json_string(finish) : json_null());
    sse(j, NULL, openai_chunk(j, choice));
}

/* chat: the message of a finished reply: reasoning_content split from <think>, tool calls
 * parsed out of the content when the request offered tools. Sets j->tool_calls. */
static json_t *chat_message(job *j) {
    const char *t = j->text ? j->text : "";
    op_think th;
    op_think_split(t, j->len, j->think_open, 1, &th);
    json_t *msg = json_pack("{s:s}", "role", "assistant"), *calls = NULL;
    size_t c_to = j->len;
    if (j->tools) {
        size_t m = op_tool_start(t, th.c0, j->len, NULL);
        if (m < j->len && (calls = op_tool_parse(t, m, j->len, j->id))) {
            c_to = m;
            while (c_to > th.c0 && (t[c_to - 1] == ' ' || t[c_to - 1] == '\n')) c_to--;
        }
    }
    if (calls && c_to == th.c0) json_object_set_new(msg, "content", json_null());
    else json_object_set_new(msg, "content", json_stringn(t + th.c0, c_to - th.c0));
    if (th.r1 > th.r0) json_object_set_new(msg, "reasoning_content", json_stringn(t + th.r0, th.r1 - th.r0));
    if (calls) {
        json_object_set_new(msg, "tool_calls", calls);
        j->tool_calls = 1;
    }
    return msg;
}

/* chat: streams what is settled — reasoning, then content up to a tool-call block; when
 * the reply is done, the rest, with the tool calls parsed into one delta. */
static void chat_progress(job *j) {
    const char *t = j->text ? j->text : "";
    op_think th;
    op_think_split(t, j->len, j->think_open, j->done, &th);
    size_t lim = safe_end(j);
    if (th.safe < lim) lim = th.safe;
    size_t r_from = j->sent_r > th.r0 ? j->sent_r : th.r0, r_to = th.r1 < lim ? th.r1 : lim;
    if (r_to > r_from) {
        emit_chat(j, json_pack("{s:s%}", "reasoning_content", t + r_from, r_to - r_from), NULL);
        j->sent_r = r_to;
    }
    size_t c_from = j->sent > th.c0 ? j->sent : th.c0, c_to = lim;
    json_t *calls = NULL;
    if (j->tools && c_to > th.c0) {
        size_t hold, m = op_tool_start(t, th.c0, j->len, &hold);
        if (m < j->len) {
            if (j->done && (calls = op_tool_parse(t, m, j->len, j->id))) {
                while (m > c_from && (t[m - 1] == ' ' || t[m - 1] == '\n')) m--;
                c_to = m;
            } else if (!j->done) {
                c_to = m < c_to ? m : c_to;
            }
        } else if (!j->done && j->len - hold < c_to) {
            c_to = j->len - hold;
        }
    }
    if (c_to > c_from) {
        emit_chat(j, json_pack("{s:s%}", "content", t + c_from, c_to - c_from), NULL);
        j->sent = c_to;
    }
    if (calls) {
        size_t i;
        json_t *c;
        json_array_foreach(calls, i, c) json_object_set_new(c, "index", json_integer((json_int_t)i));
        emit_chat(j, json_pack("{s:o}", "tool_calls", calls), NULL);
        j->tool_calls = 1;
        j->sent = j->len;
    }
}

/* Anthropic: where the reply's text ends before a tool-call block, and the calls as
 * tool_use content blocks (NULL when the request has no tools or no block parses). */
static json_t *anthropic_tool_uses(job *j, size_t *text_end) {
    *text_end = j->len;
    if (!j->tools) return NULL;
    json_t *uses = op_tool_uses(j->text ? j->text : "", j->len, j->id, text_end);
    if (uses) j->tool_calls = 1;
    return uses;
}

/* Anthropic streaming: how much text may go out now (not a tool-call block that may be
 * forming, when the request has tools). */
static size_t anthropic_text_end(const job *j, size_t end) {
    if (!j->tools) return end;
    size_t hold, m = op_tool_start(j->text ? j->text : "", 0, j->len, &hold);
    if (m < end) return m;
    return j->len - hold < end ? j->len - hold : end;
}

static void emit_start(job *j) {
    if (j->kind == K_RESPONSES) {
        resp_stream_start(j->rv, resp_sse, j);
    } else if (j->kind == K_MESSAGES) {
        sse(j, "message_start", json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i,s:i}}}", "type", "message_start",
                                          "message", "id", j->id, "type", "message", "role", "assistant", "model",
                                          j->s->model_id, "content", "stop_reason", "stop_sequence", "usage",
                                          "input_tokens", j->n_prompt, "output_tokens", 0, "cache_read_input_tokens", j->cached));
        sse(j, "content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", 0,
                                                "content_block", "type", "text", "text", ""));
        sse(j, "ping", json_pack("{s:s}", "type", "ping"));
    } else if (j->kind == K_CHAT) {
        json_t *choice = json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", 0, "delta", "role", "assistant", "content", "",
                                   "logprobs", "finish_reason");
        sse(j, NULL, openai_chunk(j, choice));
    }
}

static void emit_end(job *j) {
    size_t end = j->len;
    if (j->kind == K_RESPONSES) {
        resp_reply r;
        job_reply(j, &r);
        resp_stream_end(j->rv, &r, resp_sse, j);
        return;
    }
    if (j->fin == ENG_FIN_ERROR && !j->stop_hit) {
        if (j->kind == K_MESSAGES)
            sse(j, "error", json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", "api_error", "message", j->err));
        else sse(j, NULL, json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", j->err, "type", "server_error", "param", "code"));
        return;
    }
    if (j->kind == K_MESSAGES) {
        size_t te;
        json_t *uses = anthropic_tool_uses(j, &te);
        if (te > j->sent) emit_delta(j, j->sent, te, NULL);
        sse(j, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", 0));
        size_t i;
        json_t *u;
        json_array_foreach(uses, i, u) {
            json_t *in = json_object_get(u, "input");
            char *args = json_dumps(in, JSON_COMPACT);
            json_object_set_new(u, "input", json_object());
            sse(j, "content_block_start", json_pack("{s:s,s:i,s:O}", "type", "content_block_start", "index", (int)i + 1,
                                                    "content_block", u));
            sse(j, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index", (int)i + 1,
                                                    "delta", "type", "input_json_delta", "partial_json", args ? args : "{}"));
            sse(j, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", (int)i + 1));
            free(args);
        }
        json_decref(uses);
        sse(j, "message_delta", json_pack("{s:s,s:{s:s,s:o},s:{s:i}}", "type", "message_delta", "delta", "stop_reason",
                                          finish_reason(j), "stop_sequence",
                                          j->stop_hit ? json_string(j->stop_str) : json_null(), "usage", "output_tokens",
                                          j->n_counted));
        sse(j, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    } else {
        if (j->kind == K_CHAT) {
            chat_progress(j);
            emit_chat(j, json_object(), finish_reason(j));
        } else {
            emit_delta(j, j->sent, end, finish_reason(j));
        }
        if (j->include_usage) {
            json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", j->id, "object",
                                  j->kind == K_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)j->created, "model", j->s->model_id, "choices", "usage", usage_json(j));
            sse(j, NULL, c);
        }
        buf_add(&j->out, &j->olen, &j->ocap, "data: [DONE]\n\n", 14);
    }
    if (j->kind != K_CHAT) j->sent = end;
}

/* Makes SSE bytes ready; -1 when the client is gone. */
static int stream_fill(job *j) {
    while (j->opos == j->olen && j->phase != PH_DONE) {
        j->olen = j->opos = 0;
        if (j->phase == PH_START) {
            emit_start(j);
            j->phase = PH_RUN;
            continue;
        }
        job_pump(j, WAIT_MS);
        if (srv_client_gone(j->fd)) return -1;
        if (j->done) {
            emit_end(j);
            j->phase = PH_DONE;
            break;
        }
        if (j->kind == K_CHAT) {
            chat_progress(j);
            continue;
        }
        if (j->kind == K_RESPONSES) {
            resp_reply r;
            job_reply(j, &r);
            resp_stream_progress(j->rv, &r, resp_sse, j);
            continue;
        }
        size_t end = safe_end(j);
        if (j->kind == K_MESSAGES) end = anthropic_text_end(j, end);
        if (end > j->sent || (j->lp && json_array_size(j->lp))) {
            emit_delta(j, j->sent, end, NULL);
            j->sent = end;
        }
    }
    return 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    job *j = cls;
    if (stream_fill(j)) {
        atomic_fetch_add(&j->s->n_disconnect, 1);
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    if (j->opos == j->olen) return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = j->olen - j->opos < max ? j->olen - j->opos : max;
    memcpy(buf, j->out + j->opos, n);
    j->opos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { job_free(cls); }

/* ---- the three routes ------------------------------------------------------------------ */

static job *job_new(srv *s, job_kind kind, struct MHD_Connection *c) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->s = s;
    j->kind = kind;
    j->logprobs = -1;
    j->created = (long long)time(NULL);
    long long seq = atomic_fetch_add(&s->n_seq, 1);
    snprintf(j->id, sizeof j->id, "%s%lld%06lld",
             kind == K_CHAT ? "chatcmpl-" : kind == K_MESSAGES ? "msg_" : kind == K_RESPONSES ? "resp_" : "cmpl-", j->created, seq);
    const union MHD_ConnectionInfo *ci = c ? MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
    j->fd = ci ? ci->connect_fd : -1;
    return j;
}

/* Submits and answers: a stream response, or waits and builds the whole body. */
static enum MHD_Result run_job(srv *s, struct MHD_Connection *c, job *j, eng_params *p, int *ids, api_dialect d) {
    srv_err e = { 0 };
    char err[512];
    /* With tools the added tokens that frame calls must come through (some are special);
     * the end-of-sequence ids are then left out by job_pump. */
    j->ts = tok_stream_new(s->tk, !j->tools);
    if (!j->ts) { free(ids); jsc_free(p->grammar); job_free(j); return MHD_NO; }
    p->prompt = ids;
    p->n_prompt = j->n_prompt;
    p->top_logprobs = j->logprobs;
    if (srv_client_take(s, c, j->client)) {
        free(ids);
        jsc_free(p->grammar);
        job_free(j);
        e.code = "rate_limit_exceeded";
        srv_fail(&e, 429, NULL, "this client already has %d generation%s running or queued (--per-client); retry when one ends",
                 s->o.per_client, s->o.per_client == 1 ? "" : "s");
        return srv_reply_err(s, c, d, &e);
    }
    int rc = eng_submit(s->e, p, &j->r, err, sizeof err);
    free(ids);
    if (rc == ENG_BUSY) {
        job_free(j);
        srv_fail(&e, 503, NULL, "the server is busy (all %d slots and the queue are taken); retry shortly", s->o.parallel);
        e.code = "server_busy";
        return srv_reply_err(s, c, d, &e);
    }
    if (rc) {
        job_free(j);
        srv_fail(&e, 400, NULL, "%s", err);
        return srv_reply_err(s, c, d, &e);
    }
    if (j->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j, stream_free);
        if (!resp) { job_free(j); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        srv_count_status(s, 200);
        enum MHD_Result r = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return r;
    }
    while (!j->done) {
        job_pump(j, WAIT_MS);
        if (!j->done && srv_client_gone(j->fd)) {
            atomic_fetch_add(&s->n_disconnect, 1);
            job_free(j);
            return MHD_NO;
        }
    }
    j->cached = eng_req_cached(j->r);
    if (j->fin == ENG_FIN_ERROR && !j->stop_hit) {
        srv_fail(&e, 500, NULL, "%s", j->err);
        job_free(j);
        return srv_reply_err(s, c, d, &e);
    }
    json_t *body;
    json_t *text = json_stringn(j->text ? j->text : "", j->len);
    if (j->kind == K_RESPONSES) {
        resp_reply r;
        json_decref(text);
        job_reply(j, &r);
        body = resp_body(j->rv, &r);
    } else if (j->kind == K_CHAT) {
        json_decref(text);
        json_t *msg = chat_message(j);
        json_t *lp = j->logprobs >= 0 ? json_pack("{s:O}", "content", j->lp ? j->lp : json_array()) : json_null();
        body = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:s}],s:o}", "id", j->id, "object", "chat.completion",
                         "created", (json_int_t)j->created, "model", s->model_id, "choices", "index", 0, "message", msg,
                         "logprobs", lp, "finish_reason", finish_reason(j), "usage", usage_json(j));
    } else if (j->kind == K_COMPLETION) {
        json_t *lp = j->logprobs >= 0 && j->lp ? completion_logprobs(j->lp) : json_null();
        body = json_pack("{s:s,s:s,s:I,s:s,s:[{s:o,s:i,s:o,s:s}],s:o}", "id", j->id, "object", "text_completion",
                         "created", (json_int_t)j->created, "model", s->model_id, "choices", "text", text, "index", 0,
                         "logprobs", lp, "finish_reason", finish_reason(j), "usage", usage_json(j));
    } else {
        size_t te;
        json_t *uses = anthropic_tool_uses(j, &te), *blocks = json_array();
        json_decref(text);
        if (te > 0 || !uses)
            json_array_append_new(blocks, json_pack("{s:s,s:s%}", "type", "text", "text", j->text ? j->text : "", te));
        if (uses) json_array_extend(blocks, uses);
        json_decref(uses);
        body = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", j->id, "type", "message", "role", "assistant",
                         "model", s->model_id, "content", blocks, "stop_reason", finish_reason(j),
                         "stop_sequence", j->stop_hit ? json_string(j->stop_str) : json_null(), "usage", usage_json(j));
    }
    job_free(j);
    return srv_reply_json(s, c, 200, body);
}

/* stream, stream_options.include_usage */
static int read_stream(job *j, const json_t *req, srv_err *e) {
    if (opt_bool(req, "stream", &j->stream, e) < 0) return -1;
    const json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return srv_fail(e, 400, "stream_options", "'stream_options' must be an object, got %s", srv_json_type(so));
        if (opt_bool(so, "include_usage", &j->include_usage, e) < 0) { snprintf(e->param, sizeof e->param, "stream_options.include_usage"); return -1; }
    }
    return 0;
}

static int read_n(const json_t *req, srv_err *e) {
    long long n = 1;
    if (opt_int(req, "n", 1, 128, &n, e) < 0) return -1;
    if (n != 1) return srv_fail(e, 400, "n", "'n' must be 1 (one choice per request), got %lld", n);
    return 0;
}

/* Each route's preparation: validation, the prompt ids and the engine parameters (the
 * reply's forced start, if any, already in j->text). 0, or -1 with e filled. */
static int prep_chat(srv *s, job *j, json_t *req, eng_params *p, int **ids, srv_err *e) {
    int n = 0, lpb = 0, no_tools = 0;
    long long top = 0;
    char *forced = NULL;
    if (check_model(s, req, e) || read_n(req, e) || read_stream(j, req, e) || read_sampling(req, p, 2, e) ||
        read_logit_bias(s, j, req, p, e) || read_stop(j, req, "stop", e) || opt_bool(req, "logprobs", &lpb, e) < 0 ||
        opt_int(req, "top_logprobs", 0, ENG_MAX_TOP, &top, e) < 0)
        return -1;
    if (top && !lpb) return srv_fail(e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    j->logprobs = lpb ? (int)top : -1;
    const json_t *tools = json_object_get(req, "tools");
    if (read_tool_choice(s, req, &no_tools, &forced, e) || read_response_format(req, &p->json_mode, &p->grammar, e)) {
        free(forced);
        return -1;
    }
    if ((p->json_mode || p->grammar) && forced) {
        free(forced);
        return srv_fail(e, 400, "response_format", "'response_format' %s cannot be combined with a tool_choice that requires a call",
                        p->json_mode ? "json_object" : "json_schema");
    }
    if (p->json_mode || p->grammar) {             /* JSON from the first token: no tool calls, no open <think> */
        no_tools = 1;
        p->grammar_ends = 1;
        if (!(forced = strdup(""))) return srv_fail(e, 500, NULL, "out of memory");
    }
    j->tools = json_is_array(tools) && json_array_size(tools) > 0 && !no_tools;
    if (j->tools && api_tool_grammar(s, req, &p->grammar, e)) { free(forced); return -1; }
    int prc = api_chat_prompt(s, req, API_OPENAI, no_tools, forced, ids, &n, &j->think_open, &p->snap_at, e);
    if (!prc && forced) {                         /* the reply starts with the forced text */
        if ((j->think_open && buf_add(&j->text, &j->len, &j->cap, "</think>", strlen("</think>"))) ||
            buf_add(&j->text, &j->len, &j->cap, forced, strlen(forced)))
            prc = srv_fail(e, 500, NULL, "out of memory");
    }
    free(forced);
    if (prc) return -1;
    j->n_prompt = n;
    return read_max_tokens(s, req, "max_completion_tokens", "max_tokens", n, 0, 0, p, e);
}

static int prep_completions(srv *s, job *j, json_t *req, eng_params *p, int **ids, srv_err *e) {
    int n = 0, echo = 0;
    long long lp = -1;
    if (check_model(s, req, e) || read_n(req, e) || read_stream(j, req, e) || read_sampling(req, p, 2, e) ||
        read_logit_bias(s, j, req, p, e) || read_stop(j, req, "stop", e) || opt_int(req, "logprobs", 0, ENG_MAX_TOP, &lp, e) < 0 ||
        opt_bool(req, "echo", &echo, e) < 0)
        return -1;
    if (echo) return srv_fail(e, 400, "echo", "'echo' is not supported");
    j->logprobs = (int)lp;
    if (completion_prompt(s, req, ids, &n, e)) return -1;
    j->n_prompt = n;
    return read_max_tokens(s, req, "max_tokens", NULL, n, 16, 0, p, e);
}

static int prep_messages(srv *s, job *j, json_t *req, eng_params *p, int **ids, srv_err *e) {
    int n = 0, no_tools = 0;
    json_t *conv = NULL;
    char *forced = NULL;
    if (check_model(s, req, e) || read_stream(j, req, e) || read_sampling(req, p, 1, e) ||
        read_stop(j, req, "stop_sequences", e) || !(conv = anthropic_as_chat(req, e)) ||
        read_tool_choice(s, conv, &no_tools, &forced, e)) {
        json_decref(conv);
        free(forced);
        return -1;
    }
    const json_t *tools = json_object_get(conv, "tools");
    j->tools = json_is_array(tools) && json_array_size(tools) > 0 && !no_tools;
    int prc = api_chat_prompt(s, conv, API_OPENAI, no_tools, forced, ids, &n, NULL, &p->snap_at, e);
    if (!prc && forced && buf_add(&j->text, &j->len, &j->cap, forced, strlen(forced))) prc = srv_fail(e, 500, NULL, "out of memory");
    json_decref(conv);
    free(forced);
    if (prc) return -1;
    j->n_prompt = n;
    return read_max_tokens(s, req, "max_tokens", NULL, n, 0, 1, p, e);
}

/* Responses: translated into a chat request (responses.c), then prepared as one; its
 * errors name the Responses fields. */
static int prep_responses(srv *s, job *j, json_t *req, eng_params *p, int **ids, srv_err *e) {
    json_t *chat = NULL;
    if (resp_prepare(s, req, j->id, j->created, &chat, &j->rv, e)) return -1;
    int rc = prep_chat(s, j, chat, p, ids, e);
    json_decref(chat);
    if (rc) resp_error_names(e);
    return rc;
}

typedef int (*prep_fn)(srv *, job *, json_t *, eng_params *, int **, srv_err *);

static enum MHD_Result route(srv *s, struct MHD_Connection *c, json_t *req, job_kind kind, prep_fn prep, api_dialect d) {
    srv_err e = { 0 };
    eng_params p = { 0 };
    int *ids = NULL;
    job *j = job_new(s, kind, c);
    if (!j) return MHD_NO;
    if (prep(s, j, req, &p, &ids, &e)) {
        free(ids);
        jsc_free(p.grammar);
        job_free(j);
        return srv_reply_err(s, c, d, &e);
    }
    return run_job(s, c, j, &p, ids, d);
}

enum MHD_Result api_chat(srv *s, struct MHD_Connection *c, json_t *req) {
    return route(s, c, req, K_CHAT, prep_chat, API_OPENAI);
}

enum MHD_Result api_completions(srv *s, struct MHD_Connection *c, json_t *req) {
    return route(s, c, req, K_COMPLETION, prep_completions, API_OPENAI);
}

enum MHD_Result api_messages(srv *s, struct MHD_Connection *c, json_t *req) {
    return route(s, c, req, K_MESSAGES, prep_messages, API_ANTHROPIC);
}

enum MHD_Result api_responses(srv *s, struct MHD_Connection *c, json_t *req) {
    return route(s, c, req, K_RESPONSES, prep_responses, API_OPENAI);
}

int api_prepare(srv *s, int which, json_t *req, int *n_prompt, char *err, size_t errlen) {
    static const job_kind kinds[4] = { K_CHAT, K_COMPLETION, K_MESSAGES, K_RESPONSES };
    static const prep_fn preps[4] = { prep_chat, prep_completions, prep_messages, prep_responses };
    if (which < 0 || which > 3) return -1;
    srv_err e = { 0 };
    eng_params p = { 0 };
    int *ids = NULL;
    job *j = job_new(s, kinds[which], NULL);
    if (!j) return 500;
    int rc = preps[which](s, j, req, &p, &ids, &e) ? (e.status ? e.status : 500) : 0;
    if (rc && err) snprintf(err, errlen, "%s", e.msg);
    if (!rc && n_prompt) *n_prompt = j->n_prompt;
    free(ids);
    jsc_free(p.grammar);
    job_free(j);
    return rc;
}
