/* responses.h — the OpenAI Responses API (POST /v1/responses) as a view over chat completions.
 *
 * A Responses request is translated into a chat completions request (resp_prepare), which
 * api.c then prepares and runs exactly as /v1/chat/completions: same validation, template,
 * engine, reasoning split and tool-call parsing. What differs is the dialect on both ends:
 *   in:  input (a string, or items: messages with input_text / output_text parts,
 *        function_call and function_call_output items), instructions, function tools in
 *        the flat shape {type, name, description, parameters, strict}, tool_choice,
 *        max_output_tokens, text.format, previous_response_id;
 *   out: a response object whose output holds a reasoning item (the <think> text, as a
 *        summary), a message with one output_text part and function_call items; streamed
 *        as typed events (response.created ... response.completed), each with a
 *        sequence_number.
 * The view (resp_view) is what one response keeps between the two: the request's fields
 * the response repeats, the conversation so far (for the store) and the streaming state.
 *
 * The store keeps, per response id, the conversation that led to it and its output, as
 * chat messages (instructions excluded: they do not carry over). previous_response_id
 * continues that conversation. It is bounded by entries and bytes; the least recently used
 * entries go first. Thread-safe. */
#ifndef CI_SRV_RESPONSES_H
#define CI_SRV_RESPONSES_H
#include "srv_internal.h"

/* The server's store: at most this many responses and this many MiB of their text. */
enum { RESP_STORE_ENTRIES = 1024, RESP_STORE_MB = 64 };

typedef struct resp_store resp_store;
typedef struct resp_view resp_view;

resp_store *resp_store_new(size_t max_entries, size_t max_bytes);
void resp_store_free(resp_store *st);
/* Keeps a copy of conv (a JSON array of chat messages) under id, replacing an entry of the
 * same id; evicts the least recently used entries beyond the bounds. -1 when conv alone is
 * over the byte bound (nothing kept) or on no memory. */
int resp_store_put(resp_store *st, const char *id, const json_t *conv);
/* A new copy of what is stored under id (it becomes the most recently used), or NULL. */
json_t *resp_store_get(resp_store *st, const char *id);
void resp_store_usage(resp_store *st, size_t *entries, size_t *bytes);

/* The reply as the job in api.c holds it. */
typedef enum { RESP_RUNNING, RESP_STOP, RESP_LENGTH, RESP_ERROR } resp_finish;
typedef struct {
    const char *text;          /* the visible text so far (a forced opening included) */
    size_t len;
    int think_open;            /* the prompt ended inside <think> */
    int tools;                 /* tool calls are parsed out of the text */
    resp_finish finish;        /* RESP_RUNNING while more text may come */
    const char *err;           /* RESP_ERROR: why */
    int n_prompt, n_output, n_cached;
} resp_reply;

/* One server-sent event: the event name and its data object (stolen). */
typedef void (*resp_emit_fn)(void *ctx, const char *event, json_t *data);

/* The chat completions request of a Responses request (*chat, new) and its view (*view).
 * 0, or -1 with e filled (the field named as the Responses API names it). */
int resp_prepare(srv *s, const json_t *req, const char *id, long long created, json_t **chat, resp_view **view, srv_err *e);
/* An error from preparing the translated chat request, renamed into the Responses fields
 * (messages -> input, max_completion_tokens -> max_output_tokens, response_format ->
 * text.format), in its param and its message. */
void resp_error_names(srv_err *e);
void resp_view_free(resp_view *v);

/* The whole response object of a finished reply (stored first when the request asked). */
json_t *resp_body(resp_view *v, const resp_reply *r);
/* Streaming: the opening events; then, as the text grows, what is settled; then the rest and
 * the final event (response.completed, .incomplete or .failed). */
void resp_stream_start(resp_view *v, resp_emit_fn emit, void *ctx);
void resp_stream_progress(resp_view *v, const resp_reply *r, resp_emit_fn emit, void *ctx);
void resp_stream_end(resp_view *v, const resp_reply *r, resp_emit_fn emit, void *ctx);

#endif
