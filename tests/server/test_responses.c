/* test_responses.c — the Responses API translation (src/server/responses.h) on the demo
 * model's server, without generating: the store (LRU by entries and bytes), requests into
 * chat requests (input items, instructions, tools, tool_choice, text.format, the previous
 * conversation) and their 400s, and replies into output items and stream events (reasoning,
 * content, function calls; deltas equal to the final items; sequence numbers; the final
 * event per finish). */
#include "../unit/check.h"
#include "server/responses.h"
#include "io/json.h"
#include <stdlib.h>
#include <string.h>

static srv *S;

static json_t *J(const char *text) {
    json_t *v = json_loads(text, 0, NULL);
    if (!v) fprintf(stderr, "bad test JSON: %s\n", text);
    return v;
}

static void test_store_lru(void) {
    resp_store *st = resp_store_new(3, 1 << 20);
    json_t *conv = J("[{\"role\":\"user\",\"content\":\"hi\"}]");
    CHECK(!resp_store_put(st, "a", conv) && !resp_store_put(st, "b", conv) && !resp_store_put(st, "c", conv), "puts");
    json_t *g = resp_store_get(st, "a");                  /* a becomes the most recent */
    CHECK(g && json_equal(g, conv), "get returns the conversation");
    json_decref(g);
    CHECK(!resp_store_put(st, "d", conv), "put d");
    size_t n, bytes;
    resp_store_usage(st, &n, &bytes);
    CHECK(n == 3, "entries %zu", n);
    g = resp_store_get(st, "b");
    CHECK(!g, "the least recently used (b) was evicted");
    json_decref(g);
    g = resp_store_get(st, "a");
    CHECK(g != NULL, "a, used recently, stays");
    json_decref(g);
    json_t *conv2 = J("[{\"role\":\"user\",\"content\":\"other\"}]");
    CHECK(!resp_store_put(st, "a", conv2), "replace a");
    resp_store_usage(st, &n, &bytes);
    g = resp_store_get(st, "a");
    CHECK(n == 3 && g && json_equal(g, conv2), "same id replaces (n %zu)", n);
    json_decref(g);
    resp_store_free(st);

    /* the byte bound: entries of ~1 KiB in 4 KiB keep at most 3; one over the bound is refused */
    st = resp_store_new(100, 4096);
    char big[1100];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    json_t *bc = json_pack("[{s:s,s:s}]", "role", "user", "content", big);
    char id[16];
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof id, "r%d", i);
        CHECK(!resp_store_put(st, id, bc), "put %s", id);
    }
    resp_store_usage(st, &n, &bytes);
    CHECK(n == 3 && bytes <= 4096, "byte bound: %zu entries, %zu bytes", n, bytes);
    g = resp_store_get(st, "r9");
    CHECK(g != NULL, "the newest stays");
    json_decref(g);
    g = resp_store_get(st, "r0");
    CHECK(!g, "the oldest went");
    char huge[5000];
    memset(huge, 'y', sizeof huge - 1);
    huge[sizeof huge - 1] = 0;
    json_t *hc = json_pack("[{s:s,s:s}]", "role", "user", "content", huge);
    CHECK(resp_store_put(st, "huge", hc) == -1, "an entry over the byte bound is refused");
    resp_store_usage(st, &n, &bytes);
    CHECK(n == 3, "and evicts nothing (%zu)", n);
    json_decref(hc);
    json_decref(bc);
    json_decref(conv);
    json_decref(conv2);
    resp_store_free(st);
}

/* resp_prepare of text; returns the chat request (and *v), or NULL with *e. */
static json_t *prep(const char *text, resp_view **v, srv_err *e) {
    json_t *req = J(text), *chat = NULL;
    memset(e, 0, sizeof *e);
    *v = NULL;
    if (req && resp_prepare(S, req, "resp_test1", 1700000000, &chat, v, e)) chat = NULL;
    json_decref(req);
    return chat;
}

static void test_translate(void) {
    resp_view *v;
    srv_err e;
    json_t *c = prep("{\"input\":\"Hello\",\"instructions\":\"Be brief.\",\"max_output_tokens\":7,\"temperature\":0.5,\"stream\":true}", &v, &e);
    CHECK(c, "string input: %s", e.msg);
    if (c) {
        json_t *want = J("[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hello\"}]");
        CHECK(json_equal(json_object_get(c, "messages"), want), "instructions first, then the input");
        CHECK(json_integer_value(json_object_get(c, "max_completion_tokens")) == 7, "max_output_tokens");
        CHECK(json_real_value(json_object_get(c, "temperature")) == 0.5 && json_is_true(json_object_get(c, "stream")), "sampling, stream");
        json_decref(want);
    }
    json_decref(c);
    resp_view_free(v);

    c = prep("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Weather?\"},{\"type\":\"input_text\",\"text\":\"In Paris.\"}]},"
             "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]},"
             "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Checking.\"}]},"
             "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
             "{\"type\":\"function_call\",\"call_id\":\"call_2\",\"name\":\"now\",\"arguments\":\"{}\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"21 C\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"call_2\",\"output\":[{\"type\":\"input_text\",\"text\":\"noon\"}]},"
             "{\"role\":\"developer\",\"content\":\"Answer now.\"}],"
             "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":{\"type\":\"object\"},\"strict\":true},"
             "{\"type\":\"function\",\"name\":\"now\"}],\"tool_choice\":{\"type\":\"function\",\"name\":\"now\"},"
             "\"text\":{\"format\":{\"type\":\"json_object\"}}}", &v, &e);
    CHECK(c, "item input: %s", e.msg);
    if (c) {
        json_t *want = J("[{\"role\":\"user\",\"content\":\"Weather?\\nIn Paris.\"},"
                         "{\"role\":\"assistant\",\"content\":\"Checking.\",\"tool_calls\":["
                         "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
                         "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]},"
                         "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"21 C\"},"
                         "{\"role\":\"tool\",\"tool_call_id\":\"call_2\",\"content\":\"noon\"},"
                         "{\"role\":\"system\",\"content\":\"Answer now.\"}]");
        char *got = json_dumps(json_object_get(c, "messages"), JSON_COMPACT);
        CHECK(json_equal(json_object_get(c, "messages"), want), "items as chat messages: %s", got);
        free(got);
        json_decref(want);
        want = J("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":{\"type\":\"object\"}}},"
                 "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]");
        CHECK(json_equal(json_object_get(c, "tools"), want), "flat tools as chat functions");
        json_decref(want);
        want = J("{\"type\":\"function\",\"function\":{\"name\":\"now\"}}");
        CHECK(json_equal(json_object_get(c, "tool_choice"), want), "tool_choice as chat's");
        json_decref(want);
        CHECK(!strcmp(cj_get_str(json_object_get(c, "response_format"), "type"), "json_object"), "text.format json_object -> response_format");
    }
    json_decref(c);
    resp_view_free(v);

    /* json_schema: the one translation into response_format; chat's preparation answers */
    c = prep("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"pet\",\"schema\":{\"type\":\"object\"},\"strict\":true}}}", &v, &e);
    CHECK(c, "json_schema translates: %s", e.msg);
    if (c) {
        json_t *want = J("{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"pet\",\"schema\":{\"type\":\"object\"},\"strict\":true}}");
        CHECK(json_equal(json_object_get(c, "response_format"), want), "json_schema -> response_format.json_schema");
        json_decref(want);
    }
    json_decref(c);
    resp_view_free(v);
    json_t *req = J("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"pet\",\"schema\":{\"type\":\"object\"}}}}");
    char err[256] = "";
    int st = api_prepare(S, 3, req, NULL, err, sizeof err);
    json_t *req2 = J("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"pet\",\"schema\":{\"type\":\"object\"}}}}");
    char err2[256] = "";
    int st2 = api_prepare(S, 0, req2, NULL, err2, sizeof err2);
    CHECK(st == st2 && (st == 0 || strstr(err, "text.format")), "json_schema answers as chat does (%d '%s' vs %d '%s')", st, err, st2, err2);
    json_decref(req);
    json_decref(req2);

    struct { const char *req, *param, *has; } bad[] = {
        { "{}", "input", "'input' is required" },
        { "{\"input\":42}", "input", "string or an array" },
        { "{\"input\":[]}", "input", "must not be empty" },
        { "{\"input\":[\"hi\"]}", "input[0]", "must be an object" },
        { "{\"input\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "input[0]", "wizard" },
        { "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}", "input[0].content", "input_image" },
        { "{\"input\":[{\"role\":\"user\"}]}", "input[0]", "content" },
        { "{\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}", "input[0]", "call_id" },
        { "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]}", "input[0]", "output" },
        { "{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "input[0]", "item_reference" },
        { "{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]", "web_search" },
        { "{\"input\":\"x\",\"tools\":[{\"type\":\"function\"}]}", "tools[0]", "name" },
        { "{\"input\":\"x\",\"tools\":{}}", "tools", "array" },
        { "{\"input\":\"x\",\"tool_choice\":{\"type\":\"mcp\"}}", "tool_choice", "tool_choice" },
        { "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", "text.format", "yaml" },
        { "{\"input\":\"x\",\"text\":\"json\"}", "text", "object" },
        { "{\"input\":\"x\",\"instructions\":7}", "instructions", "string" },
        { "{\"input\":\"x\",\"max_output_tokens\":\"many\"}", "max_output_tokens", "integer" },
        { "{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", "at least 1" },
        { "{\"input\":\"x\",\"previous_response_id\":\"resp_missing\"}", "previous_response_id", "not found" },
        { "{\"input\":\"x\",\"store\":\"yes\"}", "store", "boolean" },
        { "{\"input\":\"x\",\"background\":true}", "background", "not supported" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = prep(bad[i].req, &v, &e);
        CHECK(!c && !v && e.status == 400 && !strcmp(e.param, bad[i].param) && strstr(e.msg, bad[i].has),
              "%s: status %d param '%s' msg '%s'", bad[i].req, e.status, e.param, e.msg);
        json_decref(c);
        resp_view_free(v);
    }
    srv_err re = { 0 };
    srv_fail(&re, 400, "max_completion_tokens", "'max_completion_tokens' 9 + the prompt's 3 tokens exceed the context");
    resp_error_names(&re);
    CHECK(!strcmp(re.param, "max_output_tokens") && !strncmp(re.msg, "'max_output_tokens' 9", 21), "renamed: %s / %s", re.param, re.msg);
    srv_fail(&re, 400, "messages", "the prompt is 5000 tokens");
    resp_error_names(&re);
    CHECK(!strcmp(re.param, "input"), "messages -> input");
}

/* Events collected from a stream. */
typedef struct {
    json_t *events;            /* [data...] */
    int bad_name;              /* an event whose SSE name differs from its type */
} sink;

static void collect(void *ctx, const char *event, json_t *data) {
    sink *k = ctx;
    if (strcmp(event, cj_get_str(data, "type"))) k->bad_name = 1;
    json_array_append_new(k->events, data);
}

/* Streams text growing one byte at a time, then ends it; the events in k. */
static void stream_text(const char *text, int think_open, int tools, resp_finish fin, sink *k, json_t **body) {
    resp_view *v;
    srv_err e;
    json_t *c = prep("{\"input\":\"x\"}", &v, &e);
    json_decref(c);
    k->events = json_array();
    k->bad_name = 0;
    if (!v) return;
    resp_reply r = { text, 0, think_open, tools, RESP_RUNNING, "engine failure", 10, 0, 2 };
    resp_stream_start(v, collect, k);
    size_t n = strlen(text);
    for (size_t i = 1; i <= n; i++) {
        r.len = i;
        r.n_output = (int)i;
        resp_stream_progress(v, &r, collect, k);
    }
    r.finish = fin;
    resp_stream_end(v, &r, collect, k);
    resp_view_free(v);
    c = prep("{\"input\":\"x\",\"store\":false}", &v, &e);  /* the same reply, not streamed */
    json_decref(c);
    *body = resp_body(v, &r);
    resp_view_free(v);
}

/* The concatenated "delta" of events of a type. */
static char *deltas(json_t *events, const char *type) {
    size_t i, len = 0;
    json_t *x;
    char *out = calloc(1, 1);
    json_array_foreach(events, i, x) {
        if (strcmp(cj_get_str(x, "type"), type)) continue;
        const char *d = cj_get_str(x, "delta");
        out = realloc(out, len + strlen(d) + 1);
        memcpy(out + len, d, strlen(d) + 1);
        len += strlen(d);
    }
    return out;
}

static char *types_of(json_t *events) {
    static char buf[4096];
    size_t i, o = 0;
    json_t *x;
    buf[0] = 0;
    json_array_foreach(events, i, x) {
        const char *t = cj_get_str(x, "type") + strlen("response.");
        if (o + strlen(t) + 2 < sizeof buf) o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? " " : "", t);
    }
    return buf;
}

static int seq_ok(json_t *events) {
    size_t i;
    json_t *x;
    json_array_foreach(events, i, x) if (json_integer_value(json_object_get(x, "sequence_number")) != (json_int_t)i) return 0;
    return 1;
}

static void test_stream_reasoning_and_calls(void) {
    const char *text = "<think>plan the call</think>\n\nLet me check.  \n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    sink k;
    json_t *body = NULL;
    stream_text(text, 0, 1, RESP_STOP, &k, &body);
    const char *want =
        "created in_progress output_item.added reasoning_summary_part.added reasoning_summary_text.delta"; /* then more deltas */
    char *ty = types_of(k.events);
    CHECK(!strncmp(ty, want, strlen(want)), "starts: %s", ty);
    const char *tail = "reasoning_summary_text.done reasoning_summary_part.done output_item.done output_item.added content_part.added";
    CHECK(strstr(ty, tail) != NULL, "reasoning closes before the message opens: %s", ty);
    const char *end = "output_text.done content_part.done output_item.done output_item.added function_call_arguments.delta "
                      "function_call_arguments.done output_item.done completed";
    CHECK(strlen(ty) > strlen(end) && !strcmp(ty + strlen(ty) - strlen(end), end), "ends: %s", ty);
    CHECK(seq_ok(k.events) && !k.bad_name, "sequence numbers 0.. in order, SSE names = types");
    char *r = deltas(k.events, "response.reasoning_summary_text.delta"), *c = deltas(k.events, "response.output_text.delta");
    CHECK(!strcmp(r, "plan the call"), "reasoning deltas '%s'", r);
    CHECK(!strcmp(c, "Let me check."), "content deltas '%s' (no call block, no blanks before it)", c);
    free(r);
    free(c);
    json_t *last = json_array_get(k.events, json_array_size(k.events) - 1);
    json_t *out = json_object_get(json_object_get(last, "response"), "output");
    CHECK(json_array_size(out) == 3, "three items");
    json_t *rs = json_array_get(out, 0), *msg = json_array_get(out, 1), *fc = json_array_get(out, 2);
    CHECK(!strcmp(cj_get_str(rs, "type"), "reasoning") &&
              !strcmp(cj_get_str(json_array_get(json_object_get(rs, "summary"), 0), "text"), "plan the call"), "reasoning item");
    CHECK(!strcmp(cj_get_str(msg, "type"), "message") && !strcmp(cj_get_str(msg, "status"), "completed") &&
              !strcmp(cj_get_str(json_array_get(json_object_get(msg, "content"), 0), "text"), "Let me check."), "message item");
    CHECK(!strcmp(cj_get_str(fc, "type"), "function_call") && !strcmp(cj_get_str(fc, "name"), "get_weather") &&
              !strcmp(cj_get_str(fc, "arguments"), "{\"city\":\"Paris\"}") && cj_get_str(fc, "call_id") && !strcmp(cj_get_str(fc, "status"), "completed"),
          "function_call item");
    CHECK(json_equal(out, json_object_get(body, "output")), "streamed output = the body's output");
    CHECK(!strcmp(cj_get_str(body, "status"), "completed") && json_integer_value(json_object_get(json_object_get(body, "usage"), "input_tokens")) == 10,
          "body status and usage");
    size_t i;
    json_t *x;
    int args_done = 0;
    json_array_foreach(k.events, i, x) if (!strcmp(cj_get_str(x, "type"), "response.function_call_arguments.done"))
        args_done = !strcmp(cj_get_str(x, "arguments"), "{\"city\":\"Paris\"}") && !strcmp(cj_get_str(x, "item_id"), cj_get_str(fc, "id"));
    CHECK(args_done, "function_call_arguments.done carries the arguments and the item id");
    json_decref(body);
    json_decref(k.events);

    /* the store: a stored response's conversation ends with its output as chat messages */
    resp_view *v;
    srv_err e;
    json_t *cr = prep("{\"input\":\"Weather?\",\"instructions\":\"not kept\"}", &v, &e);
    json_decref(cr);
    resp_reply rr = { text, strlen(text), 0, 1, RESP_STOP, NULL, 5, 9, 0 };
    json_decref(resp_body(v, &rr));
    resp_view_free(v);
    json_t *conv = resp_store_get(S->rs, "resp_test1");
    json_t *wconv = J("[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":\"Let me check.\",\"tool_calls\":"
                     "[{\"id\":\"call_test1_0\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]}]");
    char *got = conv ? json_dumps(conv, JSON_COMPACT) : NULL;
    CHECK(conv && json_equal(conv, wconv), "stored conversation: %s", got ? got : "(none)");
    free(got);
    json_decref(wconv);
    json_decref(conv);
    cr = prep("{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"call_test1_0\",\"output\":\"21 C\"}],\"previous_response_id\":\"resp_test1\",\"instructions\":\"New.\"}", &v, &e);
    CHECK(cr && json_array_size(json_object_get(cr, "messages")) == 4 &&
              !strcmp(cj_get_str(json_array_get(json_object_get(cr, "messages"), 0), "content"), "New.") &&
              !strcmp(cj_get_str(json_array_get(json_object_get(cr, "messages"), 3), "role"), "tool"),
          "previous_response_id: new instructions, the stored turns, then the input (%s)", e.msg);
    json_decref(cr);
    resp_view_free(v);
}

static void test_stream_plain(void) {
    sink k;
    json_t *body = NULL;
    stream_text("Hello there, friend. <tool_call> is only text here  ", 0, 0, RESP_LENGTH, &k, &body);
    char *c = deltas(k.events, "response.output_text.delta");
    CHECK(!strcmp(c, "Hello there, friend. <tool_call> is only text here  "), "without tools every byte streams: '%s'", c);
    free(c);
    json_t *last = json_array_get(k.events, json_array_size(k.events) - 1);
    CHECK(!strcmp(cj_get_str(last, "type"), "response.incomplete") &&
              !strcmp(cj_get_str(json_object_get(json_object_get(last, "response"), "incomplete_details"), "reason"), "max_output_tokens"),
          "a length cut ends with response.incomplete");
    CHECK(!strcmp(cj_get_str(body, "status"), "incomplete") &&
              !strcmp(cj_get_str(json_array_get(json_object_get(body, "output"), 0), "status"), "incomplete"), "incomplete body and message");
    CHECK(seq_ok(k.events), "sequence numbers");
    json_decref(body);
    json_decref(k.events);

    /* the prompt opened <think> and the reply never closed it: all reasoning, an empty message */
    stream_text("still thinking about it", 1, 0, RESP_STOP, &k, &body);
    char *r = deltas(k.events, "response.reasoning_summary_text.delta");
    CHECK(!strcmp(r, "still thinking about it"), "reasoning '%s'", r);
    free(r);
    json_t *out = json_object_get(body, "output");
    CHECK(json_array_size(out) == 2 && !strcmp(cj_get_str(json_array_get(out, 1), "type"), "message") &&
              !strcmp(cj_get_str(json_array_get(json_object_get(json_array_get(out, 1), "content"), 0), "text"), ""),
          "reasoning item, then an empty message");
    CHECK(strstr(types_of(k.events), "output_item.added content_part.added output_text.done") != NULL, "the empty message is opened and closed: %s",
          types_of(k.events));
    json_decref(body);
    json_decref(k.events);

    /* a tool block that does not parse stays text */
    stream_text("Sure <tool_call>{not json</tool_call>", 0, 1, RESP_STOP, &k, &body);
    c = deltas(k.events, "response.output_text.delta");
    CHECK(!strcmp(c, "Sure <tool_call>{not json</tool_call>"), "unparsed block as text: '%s'", c);
    free(c);
    CHECK(!strstr(types_of(k.events), "function_call"), "no function call events");
    json_decref(body);
    json_decref(k.events);

    stream_text("partial", 0, 0, RESP_ERROR, &k, &body);
    json_t *last2 = json_array_get(k.events, json_array_size(k.events) - 1);
    CHECK(!strcmp(cj_get_str(last2, "type"), "response.failed") &&
              !strcmp(cj_get_str(json_object_get(json_object_get(last2, "response"), "error"), "message"), "engine failure"),
          "an engine error ends with response.failed");
    json_decref(body);
    json_decref(k.events);
}

int main(void) {
    srv_opts o = { 0 };
    o.parallel = 1;
    o.ctx = 256;
    o.threads = 1;
    o.prefix_cache_mb = 0;
    char err[1024];
    if (srv_start(&o, &S, err, sizeof err)) {
        printf("FAIL test_responses: the demo model's server does not start: %s\n", err);
        return 1;
    }
    TEST_RUN(test_store_lru);
    TEST_RUN(test_translate);
    TEST_RUN(test_stream_reasoning_and_calls);
    TEST_RUN(test_stream_plain);
    srv_stop(S);
    TEST_EXIT();
}
