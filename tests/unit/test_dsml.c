/* test_dsml.c — the native DeepSeek V3.2 / V4 prompt encoders against the official ones.
 *
 * Reference: tests/text/dsml_vectors.json, made by tools/oracle/make_dsml_vectors.py with
 * DeepSeek's own encoding_dsv32.py / encoding_dsv4.py (the file's "source" names them):
 *   encode  every prompt must come out byte-identical from dsml_encode;
 *   parse   every assistant turn the encoders write must parse back (src/server/outparse:
 *           reasoning split from </think>, DSML tool calls) to the reasoning, content and
 *           tool calls the official parse_message_from_completion_text returns;
 *   error   every input the official encoders refuse is refused, naming the field.
 * Then the request layer (tools moved onto the system message, chat_template_kwargs), the
 * model-folder selection in template.c (a template wins; model_type picks the encoder),
 * Python's number printing, and bad input. Run from the repository root (tests/run.sh does). */
#include "check.h"
#include "server/outparse.h"
#include "text/dsml.h"
#include "text/template.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *VECTORS = "tests/text/dsml_vectors.json";
static json_t *V;

static dsml_version ver(const json_t *x) {
    const char *e = json_string_value(json_object_get(x, "encoder"));
    return e && !strcmp(e, "v32") ? DSML_V32 : e && !strcmp(e, "v4") ? DSML_V4 : DSML_NONE;
}

static dsml_opts opts_of(const json_t *x) {
    dsml_opts o = {0};
    o.thinking = !strcmp(json_string_value(json_object_get(x, "thinking_mode")), "thinking");
    const json_t *d = json_object_get(x, "drop_thinking"), *b = json_object_get(x, "add_default_bos_token");
    o.drop_thinking = d ? json_is_true(d) : 1;
    o.add_bos = b ? json_is_true(b) : 1;
    o.reasoning_effort = json_string_value(json_object_get(x, "reasoning_effort"));
    return o;
}

/* Where two byte strings first differ, with a little context, for the failure line. */
static void where(const char *a, size_t al, const char *b, size_t bl, char *out, size_t n) {
    size_t i = 0;
    while (i < al && i < bl && a[i] == b[i]) i++;
    size_t s = i > 40 ? i - 40 : 0;
    snprintf(out, n, "differ at byte %zu of %zu/%zu: got '%.*s' want '%.*s'", i, al, bl, (int)((al - s) < 80 ? al - s : 80), a + s,
             (int)((bl - s) < 80 ? bl - s : 80), b + s);
}

static void test_encode_vectors(void) {
    const json_t *list = json_object_get(V, "encode");
    CHECK(json_array_size(list) >= 60, "only %zu encode vectors", json_array_size(list));
    size_t i, n32 = 0, n4 = 0;
    json_t *x;
    json_array_foreach(list, i, x) {
        dsml_opts o = opts_of(x);
        char *out = NULL, err[512];
        size_t len = 0;
        const json_t *want = json_object_get(x, "prompt");
        if (dsml_encode(ver(x), json_object_get(x, "messages"), &o, &out, &len, err, sizeof err)) {
            CHECK(0, "encode[%zu]: refused: %s", i, err);
            continue;
        }
        if (len != json_string_length(want) || memcmp(out, json_string_value(want), len)) {
            char d[400];
            where(out, len, json_string_value(want), json_string_length(want), d, sizeof d);
            CHECK(0, "encode[%zu] (%s, %s): %s", i, json_string_value(json_object_get(x, "encoder")),
                  json_string_value(json_object_get(x, "thinking_mode")), d);
        }
        if (ver(x) == DSML_V32) n32++; else n4++;
        free(out);
    }
    CHECK(n32 >= 20 && n4 >= 30, "vectors per encoder: %zu V3.2, %zu V4", n32, n4);
}

/* Arguments texts are compared as JSON values (the official parser writes `{"k": v}`,
 * cinfer compact JSON). */
static int same_json_text(const char *a, const char *b) {
    json_t *x = json_loads(a, JSON_DECODE_ANY, NULL), *y = json_loads(b, JSON_DECODE_ANY, NULL);
    int r = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return r;
}

static void test_parse_vectors(void) {
    static const char EOS[] = "<｜end▁of▁sentence｜>";
    const json_t *list = json_object_get(V, "parse");
    CHECK(json_array_size(list) >= 16, "only %zu parse vectors", json_array_size(list));
    size_t i, with_calls = 0;
    json_t *x;
    json_array_foreach(list, i, x) {
        const char *t = json_string_value(json_object_get(x, "text"));
        size_t len = strlen(t);
        /* the server never sees the EOS token's text: generation stops at it */
        if (len >= strlen(EOS) && !strcmp(t + len - strlen(EOS), EOS)) len -= strlen(EOS);
        int thinking = !strcmp(json_string_value(json_object_get(x, "thinking_mode")), "thinking");
        op_think th;
        op_think_split(t, len, thinking, 1, &th);   /* in thinking mode the prompt ended with <think> */
        const char *want_r = json_string_value(json_object_get(x, "reasoning_content"));
        CHECK(th.r1 - th.r0 == strlen(want_r) && !memcmp(t + th.r0, want_r, th.r1 - th.r0), "parse[%zu]: reasoning '%.*s' vs '%s'", i,
              (int)(th.r1 - th.r0), t + th.r0, want_r);
        size_t m = op_tool_start(t, th.c0, len, NULL), c_to = len;
        json_t *calls = m < len ? op_tool_parse(t, m, len, "t") : NULL;
        const json_t *want_calls = json_object_get(x, "tool_calls");
        if (calls) {
            c_to = m;
            while (c_to > th.c0 && (t[c_to - 1] == ' ' || t[c_to - 1] == '\n')) c_to--;
        }
        const char *want_c = json_string_value(json_object_get(x, "content"));
        CHECK(c_to - th.c0 == strlen(want_c) && !memcmp(t + th.c0, want_c, c_to - th.c0), "parse[%zu]: content '%.*s' vs '%s'", i,
              (int)(c_to - th.c0), t + th.c0, want_c);
        CHECK(json_array_size(calls) == json_array_size(want_calls), "parse[%zu]: %zu calls, want %zu", i, json_array_size(calls),
              json_array_size(want_calls));
        for (size_t k = 0; k < json_array_size(calls) && k < json_array_size(want_calls); k++) {
            const json_t *f = json_object_get(json_array_get(calls, k), "function"), *w = json_array_get(want_calls, k);
            const char *name = json_string_value(json_object_get(f, "name")), *args = json_string_value(json_object_get(f, "arguments"));
            CHECK(name && !strcmp(name, json_string_value(json_object_get(w, "name"))), "parse[%zu] call %zu: name %s", i, k, name);
            CHECK(args && same_json_text(args, json_string_value(json_object_get(w, "arguments"))), "parse[%zu] call %zu: arguments %s vs %s",
                  i, k, args, json_string_value(json_object_get(w, "arguments")));
        }
        if (json_array_size(want_calls)) with_calls++;
        json_decref(calls);
    }
    CHECK(with_calls >= 8, "only %zu parse vectors with tool calls", with_calls);
}

static void test_error_vectors(void) {
    const json_t *list = json_object_get(V, "error");
    CHECK(json_array_size(list) >= 10, "only %zu error vectors", json_array_size(list));
    size_t i;
    json_t *x;
    json_array_foreach(list, i, x) {
        dsml_opts o = opts_of(x);
        char *out = NULL, err[512] = "";
        int r = dsml_encode(ver(x), json_object_get(x, "messages"), &o, &out, NULL, err, sizeof err);
        const char *field = json_string_value(json_object_get(x, "field"));
        CHECK(r != 0 && !out, "error[%zu]: accepted (want a refusal naming %s)", i, field);
        CHECK(strstr(err, field) != NULL, "error[%zu]: '%s' does not name %s", i, err, field);
        CHECK(!strchr(err, '\n'), "error[%zu]: more than one line: %s", i, err);
        free(out);
    }
}

/* The vector whose encoder / mode match and whose first message is a system message with
 * tools and n_msgs messages in all. */
static const json_t *find_tools_vector(dsml_version v, const char *mode, size_t n_msgs) {
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(V, "encode"), i, x) {
        const json_t *m = json_object_get(x, "messages"), *m0 = json_array_get(m, 0);
        if (ver(x) == v && !strcmp(json_string_value(json_object_get(x, "thinking_mode")), mode) && json_array_size(m) == n_msgs &&
            json_object_get(m0, "tools") && !strcmp(json_string_value(json_object_get(m0, "role")), "system") &&
            json_is_true(json_object_get(x, "drop_thinking")) && !json_string_value(json_object_get(x, "reasoning_effort")))
            return x;
    }
    return NULL;
}

/* An OpenAI request (tools beside the messages, thinking in chat_template_kwargs) renders
 * as the encoder does with the tools on the system message. */
static void test_request_layer(void) {
    static const dsml_version vs[] = {DSML_V32, DSML_V4};
    int tried = 0;
    for (int k = 0; k < 2; k++)
        for (int think = 0; think < 2; think++) {
            const json_t *x = find_tools_vector(vs[k], think ? "thinking" : "chat", 10);
            CHECK(x != NULL, "no tools vector for %s %d", dsml_name(vs[k]), think);
            if (!x) continue;
            json_t *msgs = json_deep_copy(json_object_get(x, "messages"));
            json_t *m0 = json_array_get(msgs, 0), *tools = json_incref(json_object_get(m0, "tools"));
            json_object_del(m0, "tools");
            json_t *req = json_pack("{s:o,s:o,s:{s:b},s:b}", "messages", msgs, "tools", tools, "chat_template_kwargs", "thinking", think,
                                    "add_generation_prompt", 1);
            char *out = NULL, err[512];
            size_t len = 0;
            int r = dsml_render_request(vs[k], req, &out, &len, err, sizeof err);
            const json_t *want = json_object_get(x, "prompt");
            CHECK(!r && len == json_string_length(want) && !memcmp(out, json_string_value(want), len), "request %s thinking=%d: %s", dsml_name(vs[k]),
                  think, r ? err : "differs");
            free(out);
            json_decref(req);
            tried++;
        }
    CHECK(tried == 4, "%d request cases", tried);
    /* no system message: the tools come on an empty one in front */
    json_t *req = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi \"}, {\"type\": \"text\", \"text\": \"there\"}]}],"
                             " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]}", 0, NULL);
    char *out = NULL, err[512];
    CHECK(!dsml_render_request(DSML_V32, req, &out, NULL, err, sizeof err), "tools without system: %s", err);
    CHECK(out && !strncmp(out, "<｜begin▁of▁sentence｜>\n\n## Tools\n\n", strlen("<｜begin▁of▁sentence｜>\n\n## Tools\n\n")), "tools prompt starts '%.60s'", out ? out : "");
    CHECK(out && strstr(out, "{\"name\": \"f\", \"parameters\": {}}\n</functions>\n<｜User｜>Hi there<｜Assistant｜></think>"), "text parts joined, chat mode: %s", out ? out : "");
    free(out);
    out = NULL;
    json_object_set_new(req, "chat_template_kwargs", json_pack("{s:s}", "thinking_mode", "sometimes"));
    CHECK(dsml_render_request(DSML_V4, req, &out, NULL, err, sizeof err) && strstr(err, "thinking_mode"), "bad thinking_mode: %s", err);
    json_object_set_new(req, "chat_template_kwargs", json_pack("{s:s}", "reasoning_effort", "max"));
    CHECK(dsml_render_request(DSML_V32, req, &out, NULL, err, sizeof err) && strstr(err, "reasoning_effort"), "V3.2 reasoning_effort: %s", err);
    json_object_set_new(req, "chat_template_kwargs", json_pack("{s:b,s:s}", "enable_thinking", 1, "reasoning_effort", "max"));
    CHECK(!dsml_render_request(DSML_V4, req, &out, NULL, err, sizeof err) && strstr(out, "Reasoning Effort: Absolute maximum") &&
          strstr(out, "<｜Assistant｜><think>"), "V4 max effort, thinking: %s", out ? out : err);
    free(out);
    json_decref(req);
}

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (f) { fputs(s, f); fclose(f); }
}

/* A model folder: no template + model_type deepseek_v32 / v4 -> the native encoder; a
 * chat_template.jinja still wins; another family without a template is an error. */
static void test_model_folder(void) {
    char dir[] = "/tmp/cinfer_dsml_XXXXXX", cfg[64], jin[64], err[512];
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(jin, sizeof jin, "%s/chat_template.jinja", dir);
    json_t *req = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Q\"}],"
                             " \"chat_template_kwargs\": {\"thinking\": true}}", 0, NULL);
    static const struct { const char *mt, *want; } cases[] = {
        {"deepseek_v32", "<｜begin▁of▁sentence｜>S<｜User｜>Q<｜Assistant｜><think>"},
        {"deepseek_v3_2", "<｜begin▁of▁sentence｜>S<｜User｜>Q<｜Assistant｜><think>"},
        {"deepseek_v4", "<｜begin▁of▁sentence｜>S<｜User｜>Q<｜Assistant｜><think>"},
    };
    for (size_t i = 0; i < 3; i++) {
        char c[128];
        snprintf(c, sizeof c, "{\"model_type\": \"%s\"}", cases[i].mt);
        write_file(cfg, c);
        char *out = NULL;
        size_t len;
        int r = tpl_render_request(dir, NULL, req, &out, &len, err, sizeof err);
        CHECK(!r && !strcmp(out, cases[i].want), "%s: %s", cases[i].mt, r ? err : out);
        free(out);
    }
    /* the V4 encoder, not V3.2's: a tool call comes out as <｜DSML｜tool_calls> */
    json_t *treq = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"Q\"}, {\"role\": \"assistant\", \"content\": null,"
                              " \"tool_calls\": [{\"id\": \"a\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}}]}]}",
                              0, NULL);
    char *out = NULL;
    CHECK(!tpl_render_request(dir, NULL, treq, &out, NULL, err, sizeof err) && strstr(out, "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
          "<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>"), "V4 call: %s", out ? out : err);
    free(out);
    out = NULL;
    json_decref(treq);
    write_file(jin, "T:{{ messages[1].content }}");
    CHECK(!tpl_render_request(dir, NULL, req, &out, NULL, err, sizeof err) && !strcmp(out, "T:Q"), "template wins: %s", out ? out : err);
    free(out);
    out = NULL;
    unlink(jin);
    write_file(cfg, "{\"model_type\": \"llama\"}");
    CHECK(tpl_render_request(dir, NULL, req, &out, NULL, err, sizeof err) && strstr(err, "has no chat template"), "llama: %s", err);
    unlink(cfg);
    CHECK(tpl_render_request(dir, NULL, req, &out, NULL, err, sizeof err) && strstr(err, "has no chat template"), "no config: %s", err);
    free(out);
    json_decref(req);
    rmdir(dir);
}

/* json.dumps of numbers as Python prints them (repr of floats). */
static void test_py_json(void) {
    static const struct { const char *in, *want; } cases[] = {
        {"0.1", "0.1"}, {"1e16", "1e+16"}, {"1e15", "1000000000000000.0"}, {"1e-5", "1e-05"}, {"0.0001", "0.0001"},
        {"123456789.0", "123456789.0"}, {"-0.0", "-0.0"}, {"1e22", "1e+22"}, {"5e-324", "5e-324"},
        {"1.7976931348623157e308", "1.7976931348623157e+308"}, {"1234.5", "1234.5"}, {"-2.5e-7", "-2.5e-07"},
        {"12", "12"}, {"-9007199254740993", "-9007199254740993"},
        {"{\"a\": [1, 2.0, true, null], \"b\": {}}", "{\"a\": [1, 2.0, true, null], \"b\": {}}"},
        {"\"q\\\" \\\\ \\n\\t\\u0001 é 東\"", "\"q\\\" \\\\ \\n\\t\\u0001 é 東\""}, {"[]", "[]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *v = json_loads(cases[i].in, JSON_DECODE_ANY, NULL);
        char *s = v ? dsml_py_json(v) : NULL;
        CHECK(s && !strcmp(s, cases[i].want), "%s -> %s, want %s", cases[i].in, s ? s : "(null)", cases[i].want);
        free(s);
        json_decref(v);
    }
}

/* Bad input: one line naming the field, never a crash. */
static void test_bad_input(void) {
    static const struct { const char *msgs, *field; } cases[] = {
        {"[{\"role\": \"tool\", \"content\": \"x\"}]", "messages[0]"},
        {"[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"tool\", \"content\": \"x\"}]", "messages[1]"},
        {"[{\"content\": \"x\"}]", "messages[0].role"},
        {"[{\"role\": 7}]", "messages[0].role"},
        {"[{\"role\": \"user\", \"content\": [1]}]", "messages[0].content"},
        {"[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}]",
         "messages[1].tool_calls[0]"},
        {"[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": 5}]", "messages[1].tool_calls"},
        {"[{\"role\": \"system\", \"content\": \"x\", \"tools\": [{\"type\": \"function\"}]}]", "messages[0].tools[0]"},
        {"[{\"role\": \"system\", \"content\": \"x\", \"tools\": {\"a\": 1}}]", "messages[0].tools"},
        {"[7]", "messages[0]"},
        {"[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"reasoning_content\": \"r\", \"content\": {\"a\": 1}}]", "messages[1].content"},
        {"[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"reasoning_content\": 3, \"content\": \"y\"}]", "messages[1].reasoning_content"},
    };
    for (int v = 0; v < 2; v++)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            json_t *m = json_loads(cases[i].msgs, 0, NULL);
            dsml_opts o = {1, 1, 1, NULL};
            char *out = NULL, err[512] = "";
            int r = dsml_encode(v ? DSML_V4 : DSML_V32, m, &o, &out, NULL, err, sizeof err);
            CHECK(r != 0 && !out, "%s %s: accepted: %s", v ? "V4" : "V3.2", cases[i].msgs, out ? out : "");
            CHECK(strstr(err, cases[i].field) && !strchr(err, '\n'), "%s %s: '%s' does not name %s", v ? "V4" : "V3.2", cases[i].msgs, err,
                  cases[i].field);
            free(out);
            json_decref(m);
        }
    char *out = NULL, err[256];
    /* V4 merges both results into one user turn; the error still names the second one */
    json_t *tm = json_loads("[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": ["
                            "{\"id\": \"a\", \"function\": {\"name\": \"f\", \"arguments\": \"{}\"}}, {\"id\": \"b\", \"function\": {\"name\": \"f\", "
                            "\"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"a\", \"content\": \"ok\"}, {\"role\": \"tool\", "
                            "\"tool_call_id\": \"b\", \"content\": 5}]", 0, NULL);
    dsml_opts o = {0, 1, 1, NULL};
    CHECK(tm && dsml_encode(DSML_V4, tm, &o, &out, NULL, err, sizeof err) && strstr(err, "messages[3].content"), "merged result: %s", err);
    json_decref(tm);
    o = (dsml_opts){1, 1, 1, "low"};
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"x\"}]", 0, NULL);
    CHECK(dsml_encode(DSML_V4, m, &o, &out, NULL, err, sizeof err) && strstr(err, "reasoning_effort"), "effort low: %s", err);
    CHECK(dsml_encode(DSML_V32, json_object_get(m, "x"), &o, &out, NULL, err, sizeof err) && strstr(err, "messages"), "no list: %s", err);
    json_decref(m);
    /* deep nesting in a tool schema: refused, not a crash */
    char deep[2200];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "[{\"role\": \"system\", \"content\": \"\", \"tools\": [{\"function\": ");
    for (int d = 0; d < 500 && k < sizeof deep - 600; d++) deep[k++] = '[';
    size_t opened = k - strlen("[{\"role\": \"system\", \"content\": \"\", \"tools\": [{\"function\": ");
    for (size_t d = 0; d < opened; d++) deep[k++] = ']';
    k += (size_t)snprintf(deep + k, sizeof deep - k, "}]}]");
    m = json_loads(deep, 0, NULL);
    o.reasoning_effort = NULL;
    int r = m ? dsml_encode(DSML_V4, m, &o, &out, NULL, err, sizeof err) : -1;
    free(out);
    CHECK(m == NULL || r == 0 || strstr(err, "memory") || strstr(err, "deep"), "deep tools: %s", err);
    json_decref(m);
}

int main(void) {
    json_error_t je;
    V = json_load_file(VECTORS, 0, &je);
    if (!V) {
        printf("FAIL test_dsml: %s: %s (run from the repository root)\n", VECTORS, je.text);
        return 1;
    }
    TEST_RUN(test_encode_vectors);
    TEST_RUN(test_parse_vectors);
    TEST_RUN(test_error_vectors);
    TEST_RUN(test_request_layer);
    TEST_RUN(test_model_folder);
    TEST_RUN(test_py_json);
    TEST_RUN(test_bad_input);
    json_decref(V);
    TEST_EXIT();
}
