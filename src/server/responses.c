/* responses.c — the Responses API dialect (responses.h): the request translated into a chat
 * completions request, the reply rendered as output items and typed stream events, and the
 * store behind previous_response_id.
 *
 * Invariants: streamed deltas concatenate to exactly the text of the final items (content
 * is held back while it might still turn out to be the start of a tool-call block or the
 * blanks before one); every event carries the next sequence_number, from 0; output items
 * are numbered in the order they open (reasoning, message, function calls), which is their
 * order in the final response. */
#include "responses.h"
#include "outparse.h"
#include "../io/json.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ITEMS = 4096, MAX_TOOLS = 512 };

/* ---- the store ------------------------------------------------------------------------------ */

typedef struct st_entry {
    char *id;
    char *conv;                /* the messages as compact JSON text */
    size_t bytes;
    struct st_entry *prev, *next;
} st_entry;

struct resp_store {
    pthread_mutex_t mu;
    size_t max_entries, max_bytes;
    size_t n, bytes;
    st_entry *head, *tail;     /* most recently used first */
};

resp_store *resp_store_new(size_t max_entries, size_t max_bytes) {
    resp_store *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    pthread_mutex_init(&st->mu, NULL);
    st->max_entries = max_entries;
    st->max_bytes = max_bytes;
    return st;
}

static void st_unlink(resp_store *st, st_entry *e) {
    if (e->prev) e->prev->next = e->next; else st->head = e->next;
    if (e->next) e->next->prev = e->prev; else st->tail = e->prev;
    e->prev = e->next = NULL;
}

static void st_push_front(resp_store *st, st_entry *e) {
    e->prev = NULL;
    e->next = st->head;
    if (st->head) st->head->prev = e; else st->tail = e;
    st->head = e;
}

static void st_drop(resp_store *st, st_entry *e) {
    st_unlink(st, e);
    st->n--;
    st->bytes -= e->bytes;
    free(e->id);
    free(e->conv);
    free(e);
}

static st_entry *st_find(resp_store *st, const char *id) {
    for (st_entry *e = st->head; e; e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

void resp_store_free(resp_store *st) {
    if (!st) return;
    while (st->head) st_drop(st, st->head);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

int resp_store_put(resp_store *st, const char *id, const json_t *conv) {
    char *text = json_dumps(conv, JSON_COMPACT);
    st_entry *e = calloc(1, sizeof *e);
    if (!text || !e || !(e->id = strdup(id))) { free(text); if (e) free(e->id); free(e); return -1; }
    e->conv = text;
    e->bytes = strlen(text) + strlen(id) + sizeof *e;
    if (e->bytes > st->max_bytes || !st->max_entries) { free(e->id); free(e->conv); free(e); return -1; }
    pthread_mutex_lock(&st->mu);
    st_entry *old = st_find(st, id);
    if (old) st_drop(st, old);
    while (st->tail && (st->n + 1 > st->max_entries || st->bytes + e->bytes > st->max_bytes)) st_drop(st, st->tail);
    st_push_front(st, e);
    st->n++;
    st->bytes += e->bytes;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

json_t *resp_store_get(resp_store *st, const char *id) {
    json_t *conv = NULL;
    pthread_mutex_lock(&st->mu);
    st_entry *e = st_find(st, id);
    if (e) {
        st_unlink(st, e);
        st_push_front(st, e);
        conv = json_loads(e->conv, 0, NULL);
    }
    pthread_mutex_unlock(&st->mu);
    return conv;
}

void resp_store_usage(resp_store *st, size_t *entries, size_t *bytes) {
    pthread_mutex_lock(&st->mu);
    *entries = st->n;
    *bytes = st->bytes;
    pthread_mutex_unlock(&st->mu);
}

/* ---- the view ------------------------------------------------------------------------------- */

struct resp_view {
    srv *s;
    char id[64];
    long long created;
    json_t *echo;              /* the response fields that repeat the request */
    json_t *conv;              /* the conversation without instructions (for the store) */
    int store;
    int stored;                /* resp_finish ran */
    /* streaming */
    int seq;                   /* next sequence_number */
    int n_items;               /* output items opened */
    int r_index, m_index;      /* output_index of the reasoning item / message, -1: not open */
    int r_closed;
    size_t sent_r, sent_c;     /* text offsets already streamed as reasoning / content */
};

static int present(const json_t *v) { return v && !json_is_null(v); }

void resp_view_free(resp_view *v) {
    if (!v) return;
    json_decref(v->echo);
    json_decref(v->conv);
    free(v);
}

/* ---- the request -------------------------------------------------------------------------- */

/* Content as one string: a string, or text parts (input_text / output_text / text, and an
 * assistant's refusal) joined by newlines; where names the field in errors. */
static json_t *parts_text(const json_t *c, const char *where, srv_err *e) {
    if (json_is_string(c)) return json_copy((json_t *)c);
    if (!json_is_array(c)) {
        srv_fail(e, 400, where, "'%s' must be a string or an array of content parts, got %s", where, srv_json_type(c));
        return NULL;
    }
    json_t *out = json_string("");
    char *b = NULL;
    size_t len = 0, cap = 0, i;
    const json_t *p;
    json_array_foreach(c, i, p) {
        const char *ty = json_is_object(p) ? cj_get_str(p, "type") : NULL;
        const char *t = json_is_object(p) ? cj_get_str(p, "text") : NULL;
        if (ty && !strcmp(ty, "refusal")) t = cj_get_str(p, "refusal");
        if (!ty) { srv_fail(e, 400, where, "'%s[%zu]' must be an object with a 'type'", where, i); goto fail; }
        if (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text") && strcmp(ty, "refusal")) {
            srv_fail(e, 400, where, "'%s[%zu]': content type '%.40s' is not supported (text only)", where, i, ty);
            goto fail;
        }
        if (!t) { srv_fail(e, 400, where, "'%s[%zu].text' must be a string", where, i); goto fail; }
        size_t tl = strlen(t);
        if (len + tl + 2 > cap) {                      /* doubling: many small parts stay linear */
            size_t nc = cap ? cap : 256;
            while (nc < len + tl + 2) nc *= 2;
            char *nb = realloc(b, nc);
            if (!nb) { srv_fail(e, 500, NULL, "out of memory"); goto fail; }
            b = nb;
            cap = nc;
        }
        if (len) b[len++] = '\n';
        memcpy(b + len, t, tl);
        len += tl;
    }
    json_decref(out);
    out = json_stringn(b ? b : "", len);
    free(b);
    return out;
fail:
    free(b);
    json_decref(out);
    return NULL;
}

/* A required string field of an input item. */
static const char *item_str(const json_t *it, const char *k, const char *where, srv_err *e) {
    const char *v = cj_get_str(it, k);
    if (!v) srv_fail(e, 400, where, "'%s.%s' must be a string", where, k);
    return v;
}

/* The assistant message that function calls at the end of msgs attach to: the last message
 * when it is the assistant's, else a new one. */
static json_t *calls_of_last(json_t *msgs) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = last ? cj_get_str(last, "role") : NULL;
    if (!role || strcmp(role, "assistant")) {
        last = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
        json_array_append_new(msgs, last);
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (!calls) {
        calls = json_array();
        json_object_set_new(last, "tool_calls", calls);
    }
    return calls;
}

/* input (a string or a list of items) appended to msgs as chat messages. */
static int input_messages(const json_t *input, json_t *msgs, srv_err *e) {
    if (!present(input)) return srv_fail(e, 400, "input", "'input' is required");
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input)) return srv_fail(e, 400, "input", "'input' must be a string or an array of items, got %s", srv_json_type(input));
    if (!json_array_size(input)) return srv_fail(e, 400, "input", "'input' must not be empty");
    if (json_array_size(input) > MAX_ITEMS) return srv_fail(e, 400, "input", "'input' has %zu items; at most %d", json_array_size(input), MAX_ITEMS);
    size_t i;
    const json_t *it;
    json_array_foreach(input, i, it) {
        char where[48];
        snprintf(where, sizeof where, "input[%zu]", i);
        if (!json_is_object(it)) return srv_fail(e, 400, where, "'%s' must be an object, got %s", where, srv_json_type(it));
        const json_t *tv = json_object_get(it, "type");
        if (present(tv) && !json_is_string(tv)) return srv_fail(e, 400, where, "'%s.type' must be a string", where);
        const char *ty = present(tv) ? json_string_value(tv) : "message";
        if (!strcmp(ty, "message")) {
            const char *role = item_str(it, "role", where, e);
            if (!role) return -1;
            if (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer"))
                return srv_fail(e, 400, where, "'%s.role' '%.40s' is not one of user, assistant, system, developer", where, role);
            char cw[64];
            snprintf(cw, sizeof cw, "%s.content", where);
            const json_t *c = json_object_get(it, "content");
            if (!c) return srv_fail(e, 400, where, "'%s' is required", cw);
            json_t *text = parts_text(c, cw, e);
            if (!text) return -1;
            json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", !strcmp(role, "developer") ? "system" : role, "content", text));
        } else if (!strcmp(ty, "function_call")) {
            const char *call_id = item_str(it, "call_id", where, e), *name = call_id ? item_str(it, "name", where, e) : NULL;
            const char *args = name ? item_str(it, "arguments", where, e) : NULL;
            if (!args) return -1;
            json_array_append_new(calls_of_last(msgs), json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", call_id, "type", "function",
                                                                  "function", "name", name, "arguments", args));
        } else if (!strcmp(ty, "function_call_output")) {
            const char *call_id = item_str(it, "call_id", where, e);
            if (!call_id) return -1;
            char ow[64];
            snprintf(ow, sizeof ow, "%s.output", where);
            const json_t *o = json_object_get(it, "output");
            if (!o) return srv_fail(e, 400, where, "'%s' is required", ow);
            json_t *text = parts_text(o, ow, e);
            if (!text) return -1;
            json_array_append_new(msgs, json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_call_id", call_id, "content", text));
        } else if (!strcmp(ty, "reasoning")) {
            continue;                                  /* earlier reasoning is not shown to the model again */
        } else {
            return srv_fail(e, 400, where, "'%s.type' '%.40s' is not supported (message, function_call, function_call_output, reasoning)",
                            where, ty);
        }
    }
    return 0;
}

/* Function tools in the flat Responses shape, as chat completions' {type, function}. */
static json_t *chat_tools(const json_t *tools, srv_err *e) {
    if (!json_is_array(tools)) { srv_fail(e, 400, "tools", "'tools' must be an array, got %s", srv_json_type(tools)); return NULL; }
    if (json_array_size(tools) > MAX_TOOLS) { srv_fail(e, 400, "tools", "'tools' has %zu entries; at most %d", json_array_size(tools), MAX_TOOLS); return NULL; }
    json_t *out = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        char where[48];
        snprintf(where, sizeof where, "tools[%zu]", i);
        const char *ty = json_is_object(t) ? cj_get_str(t, "type") : NULL;
        if (!ty) { srv_fail(e, 400, where, "'%s' must be an object with a 'type'", where); goto fail; }
        if (strcmp(ty, "function")) {
            srv_fail(e, 400, where, "'%s.type' '%.40s' is not supported (function tools only)", where, ty);
            goto fail;
        }
        const char *name = cj_get_str(t, "name");
        const json_t *desc = json_object_get(t, "description"), *params = json_object_get(t, "parameters"),
                     *strict = json_object_get(t, "strict");
        if (!name || !*name) { srv_fail(e, 400, where, "'%s.name' must be a non-empty string", where); goto fail; }
        if (present(desc) && !json_is_string(desc)) { srv_fail(e, 400, where, "'%s.description' must be a string", where); goto fail; }
        if (present(params) && !json_is_object(params)) { srv_fail(e, 400, where, "'%s.parameters' must be an object", where); goto fail; }
        if (present(strict) && !json_is_boolean(strict)) { srv_fail(e, 400, where, "'%s.strict' must be a boolean", where); goto fail; }
        json_t *f = json_pack("{s:s}", "name", name);   /* chat completions' key order, as templates print it */
        if (present(desc)) json_object_set(f, "description", (json_t *)desc);
        json_object_set_new(f, "parameters", present(params) ? json_copy((json_t *)params) : json_pack("{s:s,s:{}}", "type", "object", "properties"));
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", f));
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* tool_choice: "none" / "auto" / "required" as they are; {type: "function", name} as chat's
 * {type: "function", function: {name}}. Chat's preparation checks the rest. */
static json_t *chat_tool_choice(const json_t *tc, srv_err *e) {
    if (json_is_string(tc)) return json_copy((json_t *)tc);
    const char *ty = json_is_object(tc) ? cj_get_str(tc, "type") : NULL, *name = json_is_object(tc) ? cj_get_str(tc, "name") : NULL;
    if (ty && !strcmp(ty, "function") && name) return json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", name);
    srv_fail(e, 400, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}");
    return NULL;
}

/* text.format into chat's response_format, the one place where the two meet: text (the
 * default), json_object (JSON mode) and json_schema ({type, name, schema, description,
 * strict} becomes response_format {type: "json_schema", json_schema: {...}}); chat's
 * preparation decides what it supports. */
static int text_format(const json_t *text, json_t *chat, srv_err *e) {
    if (!present(text)) return 0;
    if (!json_is_object(text)) return srv_fail(e, 400, "text", "'text' must be an object, got %s", srv_json_type(text));
    const json_t *f = json_object_get(text, "format");
    if (!present(f)) return 0;
    const char *ty = json_is_object(f) ? cj_get_str(f, "type") : NULL;
    if (!ty) return srv_fail(e, 400, "text.format", "'text.format' must be an object with a 'type'");
    if (!strcmp(ty, "text")) return 0;
    if (!strcmp(ty, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (!strcmp(ty, "json_schema")) {
        json_t *js = json_object();
        static const char *const keys[] = { "name", "schema", "description", "strict" };
        for (int k = 0; k < 4; k++) {
            const json_t *v = json_object_get(f, keys[k]);
            if (v) json_object_set(js, keys[k], (json_t *)v);
        }
        json_object_set_new(chat, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
        return 0;
    }
    return srv_fail(e, 400, "text.format", "'text.format' type must be text, json_object or json_schema, got '%.40s'", ty);
}

/* An optional field of JSON type t (JSON_TRUE stands for either boolean): 0 absent or null,
 * 1 present, -1 of another type (e filled). */
static int opt_typed(const json_t *req, const char *k, json_type t, const char *what, srv_err *e) {
    const json_t *v = json_object_get(req, k);
    if (!present(v)) return 0;
    if (json_typeof(v) == t || (t == JSON_TRUE && json_is_boolean(v))) return 1;
    return srv_fail(e, 400, k, "'%s' must be %s, got %s", k, what, srv_json_type(v));
}

int resp_prepare(srv *s, const json_t *req, const char *id, long long created, json_t **chat, resp_view **view, srv_err *e) {
    *chat = NULL;
    *view = NULL;
    resp_view *v = calloc(1, sizeof *v);
    json_t *c = json_object(), *msgs = json_array(), *conv = NULL;
    if (!v || !c || !msgs) { srv_fail(e, 500, NULL, "out of memory"); goto fail; }
    v->s = s;
    snprintf(v->id, sizeof v->id, "%s", id);
    v->created = created;
    v->r_index = v->m_index = -1;
    v->store = 1;
    if (opt_typed(req, "instructions", JSON_STRING, "a string", e) < 0 || opt_typed(req, "previous_response_id", JSON_STRING, "a string", e) < 0 ||
        opt_typed(req, "store", JSON_TRUE, "a boolean", e) < 0 || opt_typed(req, "metadata", JSON_OBJECT, "an object", e) < 0 ||
        opt_typed(req, "parallel_tool_calls", JSON_TRUE, "a boolean", e) < 0 || opt_typed(req, "reasoning", JSON_OBJECT, "an object", e) < 0 ||
        opt_typed(req, "user", JSON_STRING, "a string", e) < 0 || opt_typed(req, "truncation", JSON_STRING, "a string", e) < 0 ||
        opt_typed(req, "background", JSON_TRUE, "a boolean", e) < 0)
        goto fail;
    if (json_is_true(json_object_get(req, "background"))) {
        srv_fail(e, 400, "background", "'background' responses are not supported; use stream or wait for the reply");
        goto fail;
    }
    const char *trunc = cj_get_str(req, "truncation");
    if (trunc && strcmp(trunc, "auto") && strcmp(trunc, "disabled")) {
        srv_fail(e, 400, "truncation", "'truncation' must be \"auto\" or \"disabled\", got \"%.40s\"", trunc);
        goto fail;
    }
    if (json_is_false(json_object_get(req, "store"))) v->store = 0;
    const json_t *mot = json_object_get(req, "max_output_tokens");
    if (present(mot) && !json_is_integer(mot)) {
        srv_fail(e, 400, "max_output_tokens", "'max_output_tokens' must be an integer, got %s", srv_json_type(mot));
        goto fail;
    }
    if (present(mot) && json_integer_value(mot) < 1) {
        srv_fail(e, 400, "max_output_tokens", "'max_output_tokens' must be at least 1, got %lld", (long long)json_integer_value(mot));
        goto fail;
    }

    /* the conversation: a previous response's, then this input */
    const char *prev = cj_get_str(req, "previous_response_id");
    if (prev) {
        conv = s->rs ? resp_store_get(s->rs, prev) : NULL;
        if (!conv) {
            e->code = "previous_response_not_found";
            srv_fail(e, 400, "previous_response_id",
                     "Previous response with id '%.80s' not found (this server keeps recent responses in memory only; "
                     "it may have been evicted, or stored with store: false)", prev);
            goto fail;
        }
    } else {
        conv = json_array();
    }
    if (input_messages(json_object_get(req, "input"), conv, e)) goto fail;
    const char *instr = cj_get_str(req, "instructions");
    if (instr) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", instr));
    json_array_extend(msgs, conv);

    /* the chat completions request */
    static const char *const same[] = { "model", "temperature", "top_p", "seed", "stream", "chat_template_kwargs" };
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
        const json_t *x = json_object_get(req, same[k]);
        if (x) json_object_set(c, same[k], (json_t *)x);
    }
    json_object_set(c, "messages", msgs);
    if (present(mot)) json_object_set(c, "max_completion_tokens", (json_t *)mot);
    const json_t *tools = json_object_get(req, "tools"), *tc = json_object_get(req, "tool_choice");
    if (present(tools)) {
        json_t *ct = chat_tools(tools, e);
        if (!ct) goto fail;
        json_object_set_new(c, "tools", ct);
    }
    if (present(tc)) {
        json_t *ctc = chat_tool_choice(tc, e);
        if (!ctc) goto fail;
        json_object_set_new(c, "tool_choice", ctc);
    }
    if (text_format(json_object_get(req, "text"), c, e)) goto fail;

    /* what the response repeats */
    const json_t *x;
    v->echo = json_object();
    json_object_set_new(v->echo, "instructions", instr ? json_string(instr) : json_null());
    json_object_set_new(v->echo, "max_output_tokens", present(mot) ? json_copy((json_t *)mot) : json_null());
    json_object_set_new(v->echo, "model", json_string(s->model_id));
    x = json_object_get(req, "parallel_tool_calls");
    json_object_set_new(v->echo, "parallel_tool_calls", json_boolean(!present(x) || json_is_true(x)));
    json_object_set_new(v->echo, "previous_response_id", prev ? json_string(prev) : json_null());
    x = json_object_get(req, "reasoning");
    json_object_set_new(v->echo, "reasoning", present(x) ? json_copy((json_t *)x) : json_pack("{s:n,s:n}", "effort", "summary"));
    json_object_set_new(v->echo, "store", json_boolean(v->store));
    x = json_object_get(req, "temperature");
    json_object_set_new(v->echo, "temperature", json_is_number(x) ? json_copy((json_t *)x) : json_real(1.0));
    x = json_object_get(req, "text");
    json_object_set_new(v->echo, "text", json_is_object(x) && json_is_object(json_object_get(x, "format")) ? json_copy((json_t *)x)
                                                                                                        : json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(v->echo, "tool_choice", present(tc) ? json_copy((json_t *)tc) : json_string("auto"));
    json_object_set_new(v->echo, "tools", present(tools) ? json_copy((json_t *)tools) : json_array());
    x = json_object_get(req, "top_p");
    json_object_set_new(v->echo, "top_p", json_is_number(x) ? json_copy((json_t *)x) : json_real(1.0));
    json_object_set_new(v->echo, "truncation", json_string(trunc ? trunc : "disabled"));
    x = json_object_get(req, "user");
    json_object_set_new(v->echo, "user", json_is_string(x) ? json_copy((json_t *)x) : json_null());
    x = json_object_get(req, "metadata");
    json_object_set_new(v->echo, "metadata", json_is_object(x) ? json_copy((json_t *)x) : json_object());
    v->conv = conv;
    json_decref(msgs);
    *chat = c;
    *view = v;
    return 0;
fail:
    json_decref(conv);
    json_decref(msgs);
    json_decref(c);
    resp_view_free(v);
    return -1;
}

/* Replaces every "from" in buf (NUL-terminated, of size n) by "to", as far as it fits. */
static void replace_all(char *buf, size_t n, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    char *p = buf;
    while ((p = strstr(p, from))) {
        size_t rest = strlen(p + fl);
        if ((size_t)(p - buf) + tl + rest + 1 > n) return;
        memmove(p + tl, p + fl, rest + 1);
        memcpy(p, to, tl);
        p += tl;
    }
}

void resp_error_names(srv_err *e) {
    static const char *const names[][2] = {
        { "max_completion_tokens", "max_output_tokens" }, { "response_format", "text.format" }, { "messages", "input" },
    };
    for (int k = 0; k < 3; k++) {
        size_t fl = strlen(names[k][0]);
        if (!strncmp(e->param, names[k][0], fl)) {
            char p[sizeof e->param];
            snprintf(p, sizeof p, "%s%s", names[k][1], e->param + fl);
            snprintf(e->param, sizeof e->param, "%s", p);
        }
        char from[48], to[48];
        snprintf(from, sizeof from, "'%s", names[k][0]);
        snprintf(to, sizeof to, "'%s", names[k][1]);
        replace_all(e->msg, sizeof e->msg, from, to);
    }
}

/* ---- the reply --------------------------------------------------------------------------- */

/* A finished reply's parts: reasoning [r0, r1), content [c0, c1), the tool calls (chat's
 * shape, or NULL). */
typedef struct {
    size_t r0, r1, c0, c1;
    json_t *calls;
} reply_parts;

static int is_blank(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static void final_parts(const resp_view *v, const resp_reply *r, reply_parts *p) {
    const char *t = r->text ? r->text : "";
    op_think th;
    op_think_split(t, r->len, r->think_open, 1, &th);
    p->r0 = th.r0;
    p->r1 = th.r1;
    p->c0 = th.c0;
    p->c1 = r->len;
    p->calls = NULL;
    if (r->tools) {
        size_t m = op_tool_start(t, th.c0, r->len, NULL);
        if (m < r->len && (p->calls = op_tool_parse(t, m, r->len, v->id + 5))) {
            p->c1 = m;
            while (p->c1 > p->c0 && is_blank(t[p->c1 - 1])) p->c1--;
        }
    }
}

static const char *item_status(const resp_reply *r) { return r->finish == RESP_LENGTH ? "incomplete" : "completed"; }

static json_t *reasoning_item(const resp_view *v, const char *text, size_t n) {
    json_t *sum = json_array();
    if (text) json_array_append_new(sum, json_pack("{s:s,s:s%}", "type", "summary_text", "text", text, n));
    return json_pack("{s:s,s:s+,s:o}", "type", "reasoning", "id", "rs_", v->id + 5, "summary", sum);
}

static json_t *text_part(const char *text, size_t n) {
    return json_pack("{s:s,s:s%,s:[],s:[]}", "type", "output_text", "text", text, n, "annotations", "logprobs");
}

static json_t *message_item(const resp_view *v, const char *status, json_t *content) {
    return json_pack("{s:s,s:s+,s:s,s:s,s:o}", "type", "message", "id", "msg_", v->id + 5, "status", status, "role", "assistant",
                     "content", content);
}

/* The k-th call (chat's {id, type, function: {name, arguments}}) as a function_call item. */
static json_t *call_item(const resp_view *v, const json_t *call, int k, const char *status, int with_args) {
    const json_t *f = json_object_get(call, "function");
    char id[96];
    snprintf(id, sizeof id, "fc_%s_%d", v->id + 5, k);
    return json_pack("{s:s,s:s,s:O,s:O,s:s,s:s}", "type", "function_call", "id", id, "call_id", json_object_get(call, "id"), "name",
                     json_object_get(f, "name"), "arguments", with_args ? json_string_value(json_object_get(f, "arguments")) : "",
                     "status", status);
}

/* The output items of a finished reply, in order: reasoning, message, calls. */
static json_t *output_items(const resp_view *v, const resp_reply *r, const reply_parts *p) {
    const char *t = r->text ? r->text : "";
    json_t *out = json_array();
    if (p->r1 > p->r0) json_array_append_new(out, reasoning_item(v, t + p->r0, p->r1 - p->r0));
    if (p->c1 > p->c0 || !p->calls)
        json_array_append_new(out, message_item(v, item_status(r), json_pack("[o]", text_part(t + p->c0, p->c1 - p->c0))));
    size_t i;
    const json_t *c;
    json_array_foreach(p->calls, i, c) json_array_append_new(out, call_item(v, c, (int)i, "completed", 1));
    return out;
}

static json_t *usage(const resp_view *v, const resp_reply *r, const reply_parts *p) {
    int rt = 0;
    if (p->r1 > p->r0) {                               /* the reasoning's length in tokens, re-encoded */
        int *ids = NULL;
        size_t n = 0;
        char err[128];
        if (!tok_encode(v->s->tk, r->text + p->r0, p->r1 - p->r0, 0, &ids, &n, err, sizeof err)) rt = (int)n;
        free(ids);
        if (rt > r->n_output) rt = r->n_output;
    }
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", r->n_prompt, "input_tokens_details", "cached_tokens",
                     r->n_cached, "output_tokens", r->n_output, "output_tokens_details", "reasoning_tokens", rt, "total_tokens",
                     r->n_prompt + r->n_output);
}

/* The response object: status, output (stolen), usage (stolen, or NULL for null). */
static json_t *response_obj(const resp_view *v, const char *status, json_t *output, json_t *use, json_t *error, json_t *incomplete) {
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:b,s:o,s:o}", "id", v->id, "object", "response", "created_at", (json_int_t)v->created,
                          "status", status, "background", 0, "error", error ? error : json_null(), "incomplete_details",
                          incomplete ? incomplete : json_null());
    json_object_update(o, v->echo);
    json_object_set_new(o, "output", output);
    json_object_set_new(o, "usage", use ? use : json_null());
    return o;
}

/* The final response object of a finished reply; stores its conversation once. */
static json_t *finish(resp_view *v, const resp_reply *r, const reply_parts *p) {
    if (r->finish == RESP_ERROR) {
        return response_obj(v, "failed", json_array(), NULL,
                            json_pack("{s:s,s:s}", "code", "server_error", "message", r->err ? r->err : "generation failed"), NULL);
    }
    const char *t = r->text ? r->text : "";
    if (v->store && !v->stored && v->s->rs) {
        json_t *m = json_pack("{s:s,s:s%}", "role", "assistant", "content", t + p->c0, p->c1 - p->c0);
        if (p->calls) json_object_set(m, "tool_calls", p->calls);
        json_array_append_new(v->conv, m);
        resp_store_put(v->s->rs, v->id, v->conv);
        v->stored = 1;
    }
    int inc = r->finish == RESP_LENGTH;
    return response_obj(v, inc ? "incomplete" : "completed", output_items(v, r, p), usage(v, r, p), NULL,
                        inc ? json_pack("{s:s}", "reason", "max_output_tokens") : NULL);
}

json_t *resp_body(resp_view *v, const resp_reply *r) {
    reply_parts p;
    final_parts(v, r, &p);
    json_t *o = finish(v, r, &p);
    json_decref(p.calls);
    return o;
}

/* ---- streaming --------------------------------------------------------------------------- */

/* One event: its type and sequence_number first, then data's fields (data is stolen). */
static void ev(resp_view *v, resp_emit_fn emit, void *ctx, const char *type, json_t *data) {
    json_t *o = json_pack("{s:s,s:i}", "type", type, "sequence_number", v->seq++);
    json_object_update(o, data);
    json_decref(data);
    emit(ctx, type, o);
}

static void ev_item(resp_view *v, resp_emit_fn emit, void *ctx, const char *type, int index, json_t *item) {
    ev(v, emit, ctx, type, json_pack("{s:i,s:o}", "output_index", index, "item", item));
}

void resp_stream_start(resp_view *v, resp_emit_fn emit, void *ctx) {
    ev(v, emit, ctx, "response.created", json_pack("{s:o}", "response", response_obj(v, "in_progress", json_array(), NULL, NULL, NULL)));
    ev(v, emit, ctx, "response.in_progress", json_pack("{s:o}", "response", response_obj(v, "in_progress", json_array(), NULL, NULL, NULL)));
}

static void reasoning_delta(resp_view *v, const char *t, size_t from, size_t to, resp_emit_fn emit, void *ctx) {
    if (to <= from) return;
    char rid[80];
    snprintf(rid, sizeof rid, "rs_%s", v->id + 5);
    if (v->r_index < 0) {
        v->r_index = v->n_items++;
        ev_item(v, emit, ctx, "response.output_item.added", v->r_index, reasoning_item(v, NULL, 0));
        ev(v, emit, ctx, "response.reasoning_summary_part.added",
           json_pack("{s:s,s:i,s:i,s:{s:s,s:s}}", "item_id", rid, "output_index", v->r_index, "summary_index", 0, "part", "type",
                     "summary_text", "text", ""));
    }
    ev(v, emit, ctx, "response.reasoning_summary_text.delta",
       json_pack("{s:s,s:i,s:i,s:s%}", "item_id", rid, "output_index", v->r_index, "summary_index", 0, "delta", t + from, to - from));
    v->sent_r = to;
}

static void reasoning_close(resp_view *v, const char *t, size_t r0, size_t r1, resp_emit_fn emit, void *ctx) {
    if (v->r_index < 0 || v->r_closed) return;
    char rid[80];
    snprintf(rid, sizeof rid, "rs_%s", v->id + 5);
    ev(v, emit, ctx, "response.reasoning_summary_text.done",
       json_pack("{s:s,s:i,s:i,s:s%}", "item_id", rid, "output_index", v->r_index, "summary_index", 0, "text", t + r0, r1 - r0));
    ev(v, emit, ctx, "response.reasoning_summary_part.done",
       json_pack("{s:s,s:i,s:i,s:{s:s,s:s%}}", "item_id", rid, "output_index", v->r_index, "summary_index", 0, "part", "type",
                 "summary_text", "text", t + r0, r1 - r0));
    ev_item(v, emit, ctx, "response.output_item.done", v->r_index, reasoning_item(v, t + r0, r1 - r0));
    v->r_closed = 1;
}

static void content_delta(resp_view *v, const char *t, size_t from, size_t to, int open_empty, resp_emit_fn emit, void *ctx) {
    if (to <= from && !(open_empty && v->m_index < 0)) return;
    char mid[80];
    snprintf(mid, sizeof mid, "msg_%s", v->id + 5);
    if (v->m_index < 0) {
        v->m_index = v->n_items++;
        ev_item(v, emit, ctx, "response.output_item.added", v->m_index, message_item(v, "in_progress", json_array()));
        ev(v, emit, ctx, "response.content_part.added",
           json_pack("{s:s,s:i,s:i,s:o}", "item_id", mid, "output_index", v->m_index, "content_index", 0, "part", text_part("", 0)));
    }
    if (to > from)
        ev(v, emit, ctx, "response.output_text.delta",
           json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", mid, "output_index", v->m_index, "content_index", 0, "delta", t + from,
                     to - from, "logprobs"));
    if (to > v->sent_c) v->sent_c = to;
}

void resp_stream_progress(resp_view *v, const resp_reply *r, resp_emit_fn emit, void *ctx) {
    const char *t = r->text ? r->text : "";
    op_think th;
    op_think_split(t, r->len, r->think_open, 0, &th);
    size_t r_to = th.r1 < th.safe ? th.r1 : th.safe;
    reasoning_delta(v, t, v->sent_r > th.r0 ? v->sent_r : th.r0, r_to, emit, ctx);
    if (th.c0 >= r->len) return;                       /* no content yet (or still reasoning) */
    reasoning_close(v, t, th.r0, th.r1, emit, ctx);
    size_t from = v->sent_c > th.c0 ? v->sent_c : th.c0, to = th.safe;
    if (r->tools) {                                    /* not what may become a call block, nor the blanks before it */
        size_t hold, m = op_tool_start(t, th.c0, r->len, &hold);
        if (m < to) to = m;
        if (r->len - hold < to) to = r->len - hold;
        while (to > from && is_blank(t[to - 1])) to--;
    }
    content_delta(v, t, from, to, 0, emit, ctx);
}

void resp_stream_end(resp_view *v, const resp_reply *r, resp_emit_fn emit, void *ctx) {
    const char *t = r->text ? r->text : "";
    if (r->finish == RESP_ERROR) {
        ev(v, emit, ctx, "response.failed", json_pack("{s:o}", "response", finish(v, r, NULL)));
        return;
    }
    reply_parts p;
    final_parts(v, r, &p);
    reasoning_delta(v, t, v->sent_r > p.r0 ? v->sent_r : p.r0, p.r1, emit, ctx);
    reasoning_close(v, t, p.r0, p.r1, emit, ctx);
    content_delta(v, t, v->sent_c > p.c0 ? v->sent_c : p.c0, p.c1, !p.calls, emit, ctx);
    if (v->m_index >= 0) {
        char mid[80];
        snprintf(mid, sizeof mid, "msg_%s", v->id + 5);
        ev(v, emit, ctx, "response.output_text.done",
           json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", mid, "output_index", v->m_index, "content_index", 0, "text", t + p.c0,
                     p.c1 - p.c0, "logprobs"));
        ev(v, emit, ctx, "response.content_part.done",
           json_pack("{s:s,s:i,s:i,s:o}", "item_id", mid, "output_index", v->m_index, "content_index", 0, "part",
                     text_part(t + p.c0, p.c1 - p.c0)));
        ev_item(v, emit, ctx, "response.output_item.done", v->m_index,
                message_item(v, item_status(r), json_pack("[o]", text_part(t + p.c0, p.c1 - p.c0))));
    }
    size_t i;
    const json_t *c;
    json_array_foreach(p.calls, i, c) {
        int k = v->n_items++;
        json_t *item = call_item(v, c, (int)i, "in_progress", 0);
        const char *args = json_string_value(json_object_get(json_object_get(c, "function"), "arguments"));
        char fid[96];
        snprintf(fid, sizeof fid, "%s", json_string_value(json_object_get(item, "id")));
        ev_item(v, emit, ctx, "response.output_item.added", k, item);
        ev(v, emit, ctx, "response.function_call_arguments.delta",
           json_pack("{s:s,s:i,s:s}", "item_id", fid, "output_index", k, "delta", args ? args : ""));
        ev(v, emit, ctx, "response.function_call_arguments.done",
           json_pack("{s:s,s:i,s:O,s:s}", "item_id", fid, "output_index", k, "name", json_object_get(json_object_get(c, "function"), "name"),
                     "arguments", args ? args : ""));
        ev_item(v, emit, ctx, "response.output_item.done", k, call_item(v, c, (int)i, "completed", 1));
    }
    json_t *o = finish(v, r, &p);
    ev(v, emit, ctx, r->finish == RESP_LENGTH ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", o));
    json_decref(p.calls);
}
