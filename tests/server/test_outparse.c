/* test_outparse.c — reasoning and tool-call parsing of replies (src/server/outparse.h):
 * <think> splitting on final and growing text, and tool calls in the Hermes/Qwen, DeepSeek
 * V3 and DeepSeek V3.1 formats, plus texts that must not parse; how a template frames a call
 * (op_call_frame). */
#include "../unit/check.h"
#include "server/outparse.h"
#include <stdlib.h>
#include <string.h>

static void test_think_split(void) {
    op_think t;
    const char *a = "<think>\nplan it</think>\n\nThe answer.";
    op_think_split(a, strlen(a), 0, 1, &t);
    CHECK(t.r1 - t.r0 == strlen("\nplan it") && !memcmp(a + t.r0, "\nplan it", t.r1 - t.r0), "reasoning [%zu, %zu)", t.r0, t.r1);
    CHECK(!strcmp(a + t.c0, "The answer."), "content '%s'", a + t.c0);
    const char *b = "still thinking</thi";                          /* opened by the prompt, growing */
    op_think_split(b, strlen(b), 1, 0, &t);
    CHECK(t.r0 == 0 && t.r1 == strlen("still thinking") && t.safe == t.r1 && t.c0 == strlen(b), "held %zu %zu %zu", t.r1, t.safe, t.c0);
    op_think_split(b, strlen(b), 1, 1, &t);
    CHECK(t.r1 == strlen(b), "final text: all reasoning");
    const char *c = "Plain answer";
    op_think_split(c, strlen(c), 0, 0, &t);
    CHECK(t.r0 == t.r1 && t.c0 == 0 && t.safe == strlen(c), "no think: all content");
    op_think_split("<thi", 4, 0, 0, &t);
    CHECK(t.safe == 0, "a growing '<thi' is held");
    CHECK(op_prompt_opens_think("<|im_start|>assistant\n<think>\n", 29), "prompt opens think");
    CHECK(!op_prompt_opens_think("<|im_start|>assistant\n", 22), "prompt does not open think");
}

static const char *call_name(json_t *calls, size_t i) {
    return json_string_value(json_object_get(json_object_get(json_array_get(calls, i), "function"), "name"));
}
static const char *call_args(json_t *calls, size_t i) {
    return json_string_value(json_object_get(json_object_get(json_array_get(calls, i), "function"), "arguments"));
}

static void test_tool_calls(void) {
    const char *h = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    size_t hold, at = op_tool_start(h, 0, strlen(h), &hold);
    CHECK(at == strlen("Let me look.\n"), "hermes start %zu", at);
    json_t *c = op_tool_parse(h, at, strlen(h), "x");
    CHECK(c && json_array_size(c) == 2, "hermes: two calls");
    if (c && json_array_size(c) == 2) {
        CHECK(!strcmp(call_name(c, 0), "get_weather") && !strcmp(call_args(c, 0), "{\"city\":\"Paris\"}"), "call 0 %s %s", call_name(c, 0), call_args(c, 0));
        CHECK(!strcmp(call_name(c, 1), "now") && !strcmp(call_args(c, 1), "{}"), "call 1");
        CHECK(!strcmp(json_string_value(json_object_get(json_array_get(c, 0), "id")), "call_x_0"), "id");
    }
    json_decref(c);

    const char *d3 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```"
                     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    at = op_tool_start(d3, 0, strlen(d3), &hold);
    c = op_tool_parse(d3, at, strlen(d3), "y");
    CHECK(at == 0 && c && json_array_size(c) == 1 && !strcmp(call_name(c, 0), "get_weather") &&
          !strcmp(call_args(c, 0), "{\"city\":\"Oslo\"}"), "deepseek v3 call");
    json_decref(c);

    const char *d31 = "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"c\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    at = op_tool_start(d31, 0, strlen(d31), &hold);
    c = op_tool_parse(d31, at, strlen(d31), "z");
    CHECK(at == 2 && c && json_array_size(c) == 1 && !strcmp(call_name(c, 0), "search") && !strcmp(call_args(c, 0), "{\"q\":\"c\"}"),
          "deepseek v3.1 call");
    json_decref(c);

    const char *grow = "text <tool_ca";
    at = op_tool_start(grow, 0, strlen(grow), &hold);
    CHECK(at == strlen(grow) && hold == strlen("<tool_ca"), "a growing marker is held (%zu)", hold);
    const char *bad = "<tool_call>{not json}</tool_call>";
    CHECK(op_tool_parse(bad, 0, strlen(bad), "b") == NULL, "bad JSON does not parse");
    const char *noname = "<tool_call>{\"arguments\": {}}</tool_call>";
    CHECK(op_tool_parse(noname, 0, strlen(noname), "b") == NULL, "a call without a name does not parse");
    CHECK(op_tool_parse("plain", 0, 5, "b") == NULL, "plain text has no calls");
}

/* op_call_frame on renderings of an assistant turn calling fn(args) as the families'
 * templates write them (a Qwen-style system prompt that shows the format and lists the
 * tools first; DeepSeek V3 with calls-begin ahead of call-begin; V3.1), and texts without a
 * readable call. */
static void frame_case(const char *text, const char *want_open, const char *want_mid) {
    char *o = NULL, *m = NULL;
    int rc = op_call_frame(text, strlen(text), "probe_fn", "{\"a\": 0}", &o, &m);
    if (!want_open) {
        CHECK(rc == -1 && !o && !m, "a frame read off '%.60s'", text);
    } else {
        CHECK(rc == 0 && o && !strcmp(o, want_open) && (want_mid ? m && !strcmp(m, want_mid) : !m),
              "frame '%s' / '%s' (want '%s' / '%s')", o ? o : "(none)", m ? m : "(none)", want_open, want_mid ? want_mid : "(none)");
    }
    free(o);
    free(m);
}

static void test_call_frame(void) {
    frame_case("<|im_start|>system\n<tools>\n{\"name\": \"probe_fn\"}\n</tools>\nReturn calls within <tool_call></tool_call> "
               "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
               "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n"
               "{\"name\": \"probe_fn\", \"arguments\": {\"a\": 0}}\n</tool_call><|im_end|>\n",
               "<tool_call>\n{\"name\": \"", "\", \"arguments\": ");
    frame_case("<｜User｜>x<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>probe_fn\n```json\n"
               "{\"a\": 0}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>",
               "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n");
    frame_case("<｜Assistant｜></think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>probe_fn<｜tool▁sep｜>{\"a\": 0}"
               "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "<｜tool▁sep｜>");
    {   /* DSML: the opening is read, but no arguments text follows the name */
        const char *d = "<｜Assistant｜><｜DSML｜function_calls>\n<｜DSML｜invoke name=\"probe_fn\">\n<｜DSML｜parameter "
                        "name=\"a\" string=\"false\">0</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
        char *o = NULL, *m = NULL;
        CHECK(op_call_frame(d, strlen(d), "probe_fn", "{\"a\": 0}", &o, &m) == 0 && o && !m &&
                  !strcmp(o, "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\""),
              "dsml frame '%s' / %s", o ? o : "(none)", m ? m : "(none)");
        free(o);
        free(m);
    }
    {   /* DSML after "</think>\n\n" (as the V3.2 / V4 encoders write it): the blank line is part
         * of the opening; V4's <｜DSML｜tool_calls> block is read the same way */
        static const char *const blocks[] = {"function_calls", "tool_calls"};
        for (int b = 0; b < 2; b++) {
            char d[512];
            snprintf(d, sizeof d, "<｜Assistant｜></think>\n\n<｜DSML｜%s>\n<｜DSML｜invoke name=\"probe_fn\">\n<｜DSML｜parameter "
                     "name=\"a\" string=\"false\">0</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜%s><｜end▁of▁sentence｜>", blocks[b], blocks[b]);
            char want[128], *o = NULL, *m = NULL;
            snprintf(want, sizeof want, "\n\n<｜DSML｜%s>\n<｜DSML｜invoke name=\"", blocks[b]);
            CHECK(op_call_frame(d, strlen(d), "probe_fn", "{\"a\": 0}", &o, &m) == 0 && o && !m && !strcmp(o, want),
                  "dsml frame %s: '%s'", blocks[b], o ? o : "(none)");
            free(o);
            free(m);
        }
    }
    frame_case("<|assistant|>\nI would call probe_fn with {\"a\": 0}.<|end|>", NULL, NULL);   /* no call markers */
    frame_case("<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call> probe_fn {\"a\": 0}", NULL, NULL);
    /* arguments rendered other than as given: the opening (required) but no middle (named) */
    frame_case("<tool_call>\n{\"name\": \"probe_fn\", \"arguments\": {\"b\": 1}}\n</tool_call>", "<tool_call>\n{\"name\": \"", NULL);
}

/* DeepSeek V3.2's DSML calls: parameters with string="true" as they are, others as JSON;
 * an invoke without parameters; a growing marker held back; malformed blocks refused. */
static void test_dsml(void) {
    const char *t = "Let me check.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris, \"FR\"</｜DSML｜parameter>\n"
                    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
                    "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"unit\": \"C\"}</｜DSML｜parameter>\n"
                    "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"now\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>";
    size_t hold, at = op_tool_start(t, 0, strlen(t), &hold);
    CHECK(at == strlen("Let me check.\n\n"), "dsml start %zu", at);
    json_t *c = op_tool_parse(t, at, strlen(t), "x");
    CHECK(c && json_array_size(c) == 2, "two dsml calls");
    if (c && json_array_size(c) == 2) {
        CHECK(!strcmp(call_name(c, 0), "get_weather") && !strcmp(call_name(c, 1), "now"), "names");
        CHECK(!strcmp(call_args(c, 0), "{\"city\":\"Paris, \\\"FR\\\"\",\"days\":3,\"opts\":{\"unit\":\"C\"}}"), "args %s", call_args(c, 0));
        CHECK(!strcmp(call_args(c, 1), "{}"), "no parameters: {} (%s)", call_args(c, 1));
    }
    json_decref(c);
    /* DeepSeek V4: the same invokes in a <｜DSML｜tool_calls> block, which is also a tool start */
    const char *v4 = "Ok.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"n\" string=\"false\">[1, 2]"
                     "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    at = op_tool_start(v4, 0, strlen(v4), &hold);
    CHECK(at == strlen("Ok.\n\n"), "v4 dsml start %zu", at);
    c = op_tool_parse(v4, at, strlen(v4), "x");
    CHECK(c && json_array_size(c) == 1 && !strcmp(call_name(c, 0), "f") && !strcmp(call_args(c, 0), "{\"n\":[1,2]}"), "v4 call %s",
          c ? call_args(c, 0) : "(none)");
    json_decref(c);
    const char *g = "Sure <｜DSML｜func";
    at = op_tool_start(g, 0, strlen(g), &hold);
    CHECK(at == strlen(g) && hold == strlen("<｜DSML｜func"), "a growing DSML marker is held (%zu)", hold);
    const char *bad[] = {
        "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">1",
        "<｜DSML｜function_calls>\nplain words\n</｜DSML｜function_calls>",
        "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
    };
    for (int i = 0; i < 4; i++) {
        json_t *b = op_tool_parse(bad[i], 0, strlen(bad[i]), "x");
        CHECK(b == NULL, "malformed dsml %d parsed", i);
        json_decref(b);
    }
}

/* The Anthropic form of parsed calls: tool_use blocks with object inputs, the text before. */
static void test_tool_uses(void) {
    const char *h = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"now\", \"arguments\": \"not json\"}\n</tool_call>";
    size_t te;
    json_t *u = op_tool_uses(h, strlen(h), "msg_1", &te);
    CHECK(u && json_array_size(u) == 2, "two tool_use blocks");
    CHECK(te == strlen("Checking."), "text ends at %zu", te);
    if (u && json_array_size(u) == 2) {
        json_t *a = json_array_get(u, 0), *b = json_array_get(u, 1);
        CHECK(!strcmp(json_string_value(json_object_get(a, "type")), "tool_use") &&
                  !strcmp(json_string_value(json_object_get(a, "name")), "get_weather") &&
                  !strcmp(json_string_value(json_object_get(json_object_get(a, "input"), "city")), "Paris") &&
                  json_is_string(json_object_get(a, "id")),
              "first block");
        CHECK(!strcmp(json_string_value(json_object_get(b, "name")), "now") && json_is_object(json_object_get(b, "input")) &&
                  json_object_size(json_object_get(b, "input")) == 0,
              "arguments that are not an object give {}");
        CHECK(strcmp(json_string_value(json_object_get(a, "id")), json_string_value(json_object_get(b, "id"))), "distinct ids");
    }
    json_decref(u);
    const char *p = "No calls here.";
    CHECK(op_tool_uses(p, strlen(p), "msg_1", &te) == NULL && te == strlen(p), "plain text: no blocks");
}

int main(void) {
    TEST_RUN(test_think_split);
    TEST_RUN(test_tool_calls);
    TEST_RUN(test_call_frame);
    TEST_RUN(test_tool_uses);
    TEST_RUN(test_dsml);
    TEST_EXIT();
}
