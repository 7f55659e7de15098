/* srv_internal.h — what the server's files share: the server object, replies and errors.
 *
 * http.c owns the daemon, routing, authentication, bodies, the small routes and metrics;
 * api.c owns the generation routes (OpenAI chat and completions, Anthropic messages):
 * request validation, prompts, streaming and the response bodies; responses.c turns the
 * Responses API into chat requests and chat replies into responses; web.c is the chat page. The srv object is
 * immutable after srv_start except its counters (atomics), so connection threads share it
 * without locks. */
#ifndef CI_SRV_INTERNAL_H
#define CI_SRV_INTERNAL_H
#include "engine.h"
#include "server.h"
#include "../text/template.h"
#include "../text/tokenizer.h"
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

typedef enum { API_OPENAI, API_ANTHROPIC } api_dialect;
typedef enum { R_CHAT, R_COMPLETIONS, R_MESSAGES, R_RESPONSES, R_TOKENIZE, R_DETOKENIZE, R_MODELS, R_HEALTH, R_METRICS, R_PAGE, R_OTHER,
               R_COUNT } srv_route;

/* One client address and how many of its generations are running or queued. */
typedef struct {
    char addr[64];
    int n;
} srv_client;

struct srv {
    srv_opts o;
    char model_id[4096];
    char model_dir[4096];
    ci_model *m;
    tok_tokenizer *tk;
    tpl_chat *ch;              /* NULL when the model folder has no chat template */
    char ch_err[512];          /* why ch is NULL */
    char *call_open, *call_mid; /* how the template frames a tool call (outparse.h op_call_frame), or NULL */
    char *call_close;          /* what closes a call after its arguments (op_call_close), or NULL */
    char *tok_bytes;           /* every token's text in context, for JSON mode (token_texts in http.c) */
    uint32_t *tok_off;         /* [V + 1], or NULL */
    eng *e;
    struct resp_store *rs;     /* responses kept for previous_response_id (responses.h) */
    struct MHD_Daemon *d;
    int port;
    long long created;         /* unix time of start */
    atomic_llong n_route[R_COUNT];
    atomic_llong n_status[6];  /* by class: [2] = 2xx ... [5] = 5xx */
    atomic_llong n_disconnect; /* clients that left before their answer */
    atomic_llong n_seq;        /* ids of responses */
    atomic_llong n_limited;    /* requests refused with 429 (--per-client) */
    pthread_mutex_t cl_mu;     /* guards the per-client counts below */
    srv_client *cl;            /* addresses with generations in flight (--per-client) */
    int n_cl, cap_cl;
};

/* A request error: status, the field at fault (or NULL) and a message. */
typedef struct {
    int status;
    const char *code;          /* OpenAI error code, or NULL */
    char param[96];
    char msg[768];
} srv_err;

int srv_fail(srv_err *e, int status, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* "an object", "an array", "a string", "a number", "a boolean" or "null": v's JSON type as
 * the 400 messages name it ("'x' must be ..., got a string"). */
const char *srv_json_type(const json_t *v);

/* Queue a reply; json bodies are stolen (decref'd). */
enum MHD_Result srv_reply_json(srv *s, struct MHD_Connection *c, int status, json_t *body);
enum MHD_Result srv_reply_err(srv *s, struct MHD_Connection *c, api_dialect d, const srv_err *e);
/* web.c: GET / and the chat page's files (src/server/web/, compiled in; web.h). */
enum MHD_Result srv_reply_page(srv *s, struct MHD_Connection *c, const char *url);
void srv_count_status(srv *s, int status);
/* --per-client: takes one of the client's generation places (0), or -1 when it has
 * per_client already (or on no memory); addr gets the client's address for the release.
 * Always 0 with no limit set (addr is then ""). */
int srv_client_take(srv *s, struct MHD_Connection *c, char addr[64]);
void srv_client_release(srv *s, const char addr[64]);
/* 1 when the client of fd has closed its side of the connection. */
int srv_client_gone(int fd);

/* api.c: the generation routes; req is the parsed body (borrowed). */
enum MHD_Result api_chat(srv *s, struct MHD_Connection *c, json_t *req);
enum MHD_Result api_completions(srv *s, struct MHD_Connection *c, json_t *req);
enum MHD_Result api_messages(srv *s, struct MHD_Connection *c, json_t *req);
enum MHD_Result api_responses(srv *s, struct MHD_Connection *c, json_t *req);
/* For tests and fuzzing: everything route `which` (0 chat, 1 completions, 2 messages, 3
 * responses) does
 * with a request before it reaches the engine (validation, the prompt, the parameters),
 * without running it. 0 (and *n_prompt), or the HTTP status of the refusal (err says why). */
int api_prepare(srv *s, int which, json_t *req, int *n_prompt, char *err, size_t errlen);
/* The prompt ids of a chat request's messages (validated); 0 or -1 with e filled.
 * *opens_think (may be NULL): the rendered prompt ends inside <think>. no_tools: render
 * without the request's tools; forced (or NULL): text the reply is made to start with,
 * appended to the prompt (after a "</think>" when the prompt opens one). *sys_end (may be
 * NULL; looked for only when the engine's prefix reuse goes through snapshots): the ids of
 * the system message alone as the template renders it (with the tools), when they are a
 * shorter prefix of the prompt's; else 0. */
int api_chat_prompt(srv *s, json_t *req, api_dialect d, int no_tools, const char *forced, int **ids, int *n,
                    int *opens_think, int *sys_end, srv_err *e);

#endif
