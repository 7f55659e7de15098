/* dsml.c — DeepSeek V3.2 / V4 prompt encoders (see dsml.h).
 *
 * Each encoder follows the official one step by step: V3.2 renders message by message
 * (a tool result looks back for the assistant turn that called it); V4 first merges tool
 * results (and consecutive user texts) into user turns, orders the results as the calls
 * were, then renders. Python's semantics where they show in the output are kept: a value's
 * truth (an empty list or string is false), str.format of None ("None"), json.dumps with
 * ensure_ascii=False (dsml_py_json), dict order (jansson keeps insertion order).
 *
 * Invariants: the input is never modified (merges and drops work on copies); every
 * refusal is one line naming the field as the caller wrote it ("messages[2].tool_calls[0]
 * .function.arguments"); output is built in one growing buffer. */
#include "text/dsml.h"
#include "core/status.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char BOS[] = "<｜begin▁of▁sentence｜>", EOS[] = "<｜end▁of▁sentence｜>";
static const char THINK[] = "<think>", THINK_END[] = "</think>";
static const char USER[] = "<｜User｜>", ASSISTANT[] = "<｜Assistant｜>";
static const char REMINDER[] = "<｜latest_reminder｜>";
static const char DSML[] = "｜DSML｜";

/* The tools section of the system prompt. {D} = the DSML token, {S} / {E} = <think> /
 * </think>, {T} = the tool schemas, one JSON object a line. Written from the format the
 * encoders produce; tests/text/dsml_vectors.json pins them byte for byte. */
static const char *const TOOLS_V32 =
    "## Tools\n\n"
    "You have access to a set of tools you can use to answer the user's question.\n"
    "You can invoke functions by writing a \"<{D}function_calls>\" block like the following as part of your reply to the user:\n"
    "<{D}function_calls>\n"
    "<{D}invoke name=\"$FUNCTION_NAME\">\n"
    "<{D}parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{D}parameter>\n"
    "...\n"
    "</{D}invoke>\n"
    "<{D}invoke name=\"$FUNCTION_NAME2\">\n"
    "...\n"
    "</{D}invoke>\n"
    "</{D}function_calls>\n\n"
    "String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects "
    "should use JSON format. The \"string\" attribute should be set to \"true\" for string type parameters and \"false\" "
    "for other types (numbers, booleans, arrays, objects).\n\n"
    "If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking "
    "block. Here is an example:\n\n"
    "<{D}function_calls>\n"
    "...\n"
    "</{D}function_calls>\n\n"
    "<function_results>\n"
    "...\n"
    "</function_results>\n\n"
    "{S}...thinking about results{E}\n\n"
    "Here are the functions available in JSONSchema format:\n"
    "<functions>\n"
    "{T}\n"
    "</functions>\n";

static const char *const TOOLS_V4 =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "
    "\"<{D}tool_calls>\" block like the following:\n\n"
    "<{D}tool_calls>\n"
    "<{D}invoke name=\"$TOOL_NAME\">\n"
    "<{D}parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{D}parameter>\n"
    "...\n"
    "</{D}invoke>\n"
    "<{D}invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</{D}invoke>\n"
    "</{D}tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, "
    "arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by {S}), you MUST output your complete reasoning inside {S}...{E} BEFORE "
    "any tool calls or final response.\n\n"
    "Otherwise, output directly after {E} with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n"
    "{T}\n\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

static const char RESPONSE_FORMAT[] = "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

static const char EFFORT_MAX[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

static const char *const TASKS[][2] = {
    {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
    {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"},
};

/* ------------------------------------------------------------------ output buffer */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} dbuf;

static void put(dbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(dbuf *b, const char *s) { put(b, s, strlen(s)); }
static void putj(dbuf *b, const json_t *s) { put(b, json_string_value(s), json_string_length(s)); }

/* ------------------------------------------------------------------ Python's json.dumps */

/* repr(float): the shortest digits that read back to x; exponent form when the decimal
 * point would sit more than 16 places right or 4 left of the first digit. */
static void py_float(dbuf *b, double x) {
    if (x == 0) { puts_(b, signbit(x) ? "-0.0" : "0.0"); return; }
    if (isnan(x)) { puts_(b, "NaN"); return; }
    if (isinf(x)) { puts_(b, x < 0 ? "-Infinity" : "Infinity"); return; }
    char s[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(s, sizeof s, "%.*e", p - 1, x);
        if (strtod(s, NULL) == x) break;
    }
    char dig[32];
    int nd = 0, neg = 0;
    const char *q = s;
    if (*q == '-') { neg = 1; q++; }
    for (; *q && *q != 'e'; q++) if (*q >= '0' && *q <= '9' && nd < 31) dig[nd++] = *q;
    dig[nd] = 0;
    int e = *q == 'e' ? atoi(q + 1) : 0, decpt = e + 1;
    char o[96];
    int k = 0;
    if (neg) o[k++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            o[k++] = '0'; o[k++] = '.';
            for (int i = 0; i < -decpt; i++) o[k++] = '0';
            for (int i = 0; i < nd; i++) o[k++] = dig[i];
        } else if (decpt >= nd) {
            for (int i = 0; i < nd; i++) o[k++] = dig[i];
            for (int i = nd; i < decpt; i++) o[k++] = '0';
            o[k++] = '.'; o[k++] = '0';
        } else {
            for (int i = 0; i < nd; i++) { if (i == decpt) o[k++] = '.'; o[k++] = dig[i]; }
        }
        o[k] = 0;
    } else {
        o[k++] = dig[0];
        if (nd > 1) { o[k++] = '.'; for (int i = 1; i < nd; i++) o[k++] = dig[i]; }
        o[k] = 0;
        snprintf(o + k, sizeof o - (size_t)k, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    }
    puts_(b, o);
}

static void py_str(dbuf *b, const char *s, size_t n) {
    put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) { snprintf(u, sizeof u, "\\u%04x", c); esc = u; }
        }
        if (!esc) continue;
        put(b, s + run, i - run);
        puts_(b, esc);
        run = i + 1;
    }
    put(b, s + run, n - run);
    put(b, "\"", 1);
}

static void py_json(dbuf *b, const json_t *v, int depth) {
    if (depth > 200) { b->oom = 1; return; }   /* jansson's own parse depth is lower */
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        int first = 1;
        put(b, "{", 1);
        json_object_foreach((json_t *)v, k, x) {
            if (!first) put(b, ", ", 2);
            first = 0;
            py_str(b, k, strlen(k));
            put(b, ": ", 2);
            py_json(b, x, depth + 1);
        }
        put(b, "}", 1);
        break;
    }
    case JSON_ARRAY:
        put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) put(b, ", ", 2);
            py_json(b, json_array_get(v, i), depth + 1);
        }
        put(b, "]", 1);
        break;
    case JSON_STRING: py_str(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: {
        char s[32];
        snprintf(s, sizeof s, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        puts_(b, s);
        break;
    }
    case JSON_REAL: py_float(b, json_real_value(v)); break;
    case JSON_TRUE: puts_(b, "true"); break;
    case JSON_FALSE: puts_(b, "false"); break;
    default: puts_(b, "null"); break;
    }
}

char *dsml_py_json(const json_t *v) {
    dbuf b = {0};
    py_json(&b, v, 0);
    if (b.oom) { free(b.p); return NULL; }
    return b.p ? b.p : strdup("");
}

/* ------------------------------------------------------------------ Python-isms */

/* bool(value) */
static int truthy(const json_t *v) {
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return 1;
    default: return 0;
    }
}

static const char *role_of(const json_t *m) { return json_string_value(json_object_get(m, "role")); }
static int role_is(const json_t *m, const char *r) { const char *s = role_of(m); return s && !strcmp(s, r); }

typedef struct {
    dbuf *b;
    char *err;
    size_t errlen;
} ctx;

/* "{x}".format(x=value) for a text field: a string as it is, None (or absent) as "None";
 * other types (Python would print their repr) are refused. */
static int fmt_text(ctx *c, const json_t *v, const char *field, int idx) {
    if (!v || json_is_null(v)) { puts_(c->b, "None"); return 0; }
    if (!json_is_string(v)) return ci_err(c->err, c->errlen, "messages[%d].%s must be a string", idx, field);
    putj(c->b, v);
    return 0;
}

/* `value or ""` for a text field. */
static int or_empty(ctx *c, const json_t *v, const char *field, int idx) {
    if (!truthy(v)) return 0;
    if (!json_is_string(v)) return ci_err(c->err, c->errlen, "messages[%d].%s must be a string", idx, field);
    putj(c->b, v);
    return 0;
}

/* Appends a template with {D}, {S}, {E} and {T} filled in. */
static void fill(dbuf *b, const char *tpl, const char *tools) {
    for (const char *p = tpl; *p;) {
        if (p[0] == '{' && p[1] && p[2] == '}' && strchr("DSET", p[1])) {
            puts_(b, p[1] == 'D' ? DSML : p[1] == 'S' ? THINK : p[1] == 'E' ? THINK_END : tools);
            p += 3;
        } else {
            const char *q = strchr(p + 1, '{');
            size_t n = q ? (size_t)(q - p) : strlen(p);
            put(b, p, n);
            p += n;
        }
    }
}

/* "\n\n" + the tools section (the messages' tools: [{"type": "function", "function": {...}}]). */
static int render_tools(ctx *c, dsml_version v, const json_t *tools, int idx) {
    if (!json_is_array(tools)) return ci_err(c->err, c->errlen, "messages[%d].tools must be a list", idx);
    dbuf sch = {0};
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *f = json_object_get(json_array_get(tools, i), "function");
        if (!f) { free(sch.p); return ci_err(c->err, c->errlen, "messages[%d].tools[%zu] needs a \"function\"", idx, i); }
        if (i) put(&sch, "\n", 1);
        py_json(&sch, f, 0);
    }
    if (sch.oom) { free(sch.p); return ci_err(c->err, c->errlen, "out of memory"); }
    puts_(c->b, "\n\n");
    fill(c->b, v == DSML_V32 ? TOOLS_V32 : TOOLS_V4, sch.p ? sch.p : "");
    free(sch.p);
    return 0;
}

static void render_format(ctx *c, const json_t *rf) {
    puts_(c->b, "\n\n");
    puts_(c->b, RESPONSE_FORMAT);
    py_json(c->b, rf, 0);
}

/* One call's parameters, one line each. V3.2 parses the arguments text (it must hold a
 * JSON object); V4 falls back to {"arguments": <what was given>} when it is no JSON text. */
static int render_args(ctx *c, dsml_version v, const json_t *args, int idx, size_t k) {
    json_t *obj = NULL;
    if (json_is_string(args)) obj = json_loadb(json_string_value(args), json_string_length(args), JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!obj && v == DSML_V32)
        return ci_err(c->err, c->errlen, "messages[%d].tool_calls[%zu].function.arguments must be JSON text of an object", idx, k);
    if (!obj) obj = json_pack("{s:O}", "arguments", (json_t *)args);
    if (!json_is_object(obj)) {
        json_decref(obj);
        return ci_err(c->err, c->errlen, "messages[%d].tool_calls[%zu].function.arguments must be a JSON object", idx, k);
    }
    const char *key;
    json_t *x;
    int first = 1;
    json_object_foreach(obj, key, x) {
        if (!first) puts_(c->b, "\n");
        first = 0;
        puts_(c->b, "<");
        puts_(c->b, DSML);
        puts_(c->b, "parameter name=\"");
        puts_(c->b, key);
        puts_(c->b, json_is_string(x) ? "\" string=\"true\">" : "\" string=\"false\">");
        if (json_is_string(x)) putj(c->b, x);
        else py_json(c->b, x, 0);
        puts_(c->b, "</");
        puts_(c->b, DSML);
        puts_(c->b, "parameter>");
    }
    json_decref(obj);
    return 0;
}

/* "\n\n<DSML block>" of an assistant turn's tool_calls. */
static int render_calls(ctx *c, dsml_version v, const json_t *calls, int idx) {
    if (!json_is_array(calls)) return ci_err(c->err, c->errlen, "messages[%d].tool_calls must be a list", idx);
    const char *block = v == DSML_V32 ? "function_calls>" : "tool_calls>";
    puts_(c->b, "\n\n<");
    puts_(c->b, DSML);
    puts_(c->b, block);
    puts_(c->b, "\n");
    for (size_t k = 0; k < json_array_size(calls); k++) {
        const json_t *f = json_object_get(json_array_get(calls, k), "function");
        const json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if (!json_is_object(f) || !name || !args)
            return ci_err(c->err, c->errlen, "messages[%d].tool_calls[%zu] needs a \"function\" with \"name\" and \"arguments\"", idx, k);
        if (k) puts_(c->b, "\n");
        puts_(c->b, "<");
        puts_(c->b, DSML);
        puts_(c->b, "invoke name=\"");
        if (json_is_null(name)) puts_(c->b, "None");
        else if (json_is_string(name)) putj(c->b, name);
        else return ci_err(c->err, c->errlen, "messages[%d].tool_calls[%zu].function.name must be a string", idx, k);
        puts_(c->b, "\">\n");
        if (render_args(c, v, args, idx, k)) return -1;
        puts_(c->b, "\n</");
        puts_(c->b, DSML);
        puts_(c->b, "invoke>");
    }
    puts_(c->b, "\n</");
    puts_(c->b, DSML);
    puts_(c->b, block);
    return 0;
}

static int last_user(const json_t *msgs) {
    for (size_t i = json_array_size(msgs); i-- > 0;) {
        const json_t *m = json_array_get(msgs, i);
        if (role_is(m, "user") || role_is(m, "developer")) return (int)i;
    }
    return -1;
}

/* Every tool result must answer an assistant turn that made calls. V3.2 needs that turn
 * right before its results (its encoder counts back over them); V4 lets other turns that are
 * neither user nor assistant (a latest_reminder, a system note) sit in between. V4's own
 * encoder would turn an orphan result into a user turn: refused here. */
static int check_tool_results(ctx *c, const json_t *msgs, int adjacent) {
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        if (!role_is(json_array_get(msgs, i), "tool")) continue;
        size_t j = i;
        while (j > 0) {
            const json_t *p = json_array_get(msgs, j - 1);
            if (role_is(p, "tool") || (!adjacent && !role_is(p, "user") && !role_is(p, "assistant"))) j--;
            else break;
        }
        const json_t *a = j > 0 ? json_array_get(msgs, j - 1) : NULL;
        if (!a || !role_is(a, "assistant") || !truthy(json_object_get(a, "tool_calls")))
            return ci_err(c->err, c->errlen, "messages[%zu]: a tool result with no assistant tool call before it", i);
    }
    return 0;
}

/* ------------------------------------------------------------------ V3.2 */

static int v32_message(ctx *c, const json_t *msgs, int i, const dsml_opts *o) {
    const json_t *m = json_array_get(msgs, (size_t)i);
    const char *role = role_of(m);
    int lu = last_user(msgs);
    const json_t *content = json_object_get(m, "content"), *tools = json_object_get(m, "tools");
    const json_t *rf = json_object_get(m, "response_format"), *calls = json_object_get(m, "tool_calls");
    if (!role) return ci_err(c->err, c->errlen, "messages[%d].role: missing or not a string", i);
    if (!strcmp(role, "system")) {
        if (or_empty(c, content, "content", i)) return -1;
        if (truthy(tools) && render_tools(c, DSML_V32, tools, i)) return -1;
        if (truthy(rf)) render_format(c, rf);
    } else if (!strcmp(role, "developer") || !strcmp(role, "user")) {
        int dev = role[0] == 'd';
        puts_(c->b, USER);
        if (dev) {
            if (!truthy(content)) return ci_err(c->err, c->errlen, "messages[%d].content: a developer message needs content", i);
            if (!json_is_string(content)) return ci_err(c->err, c->errlen, "messages[%d].content must be a string", i);
            if (truthy(tools) && render_tools(c, DSML_V32, tools, i)) return -1;
            if (truthy(rf)) render_format(c, rf);
            puts_(c->b, "\n\n# The user's message is: ");
            putj(c->b, content);
        } else if (fmt_text(c, content, "content", i)) return -1;
        puts_(c->b, ASSISTANT);
        puts_(c->b, i == lu && o->thinking ? THINK : THINK_END);
    } else if (!strcmp(role, "tool")) {
        int a = i - 1;
        while (a >= 0 && role_is(json_array_get(msgs, (size_t)a), "tool")) a--;
        const json_t *am = a >= 0 ? json_array_get(msgs, (size_t)a) : NULL;
        const json_t *acalls = am ? json_object_get(am, "tool_calls") : NULL;
        size_t order = (size_t)(i - a);
        if (!am || !role_is(am, "assistant") || !truthy(acalls) || !json_is_array(acalls))
            return ci_err(c->err, c->errlen, "messages[%d]: a tool result with no assistant tool call before it", i);
        if (json_array_size(acalls) < order)
            return ci_err(c->err, c->errlen, "messages[%d]: more tool results than the %zu tool call(s) of messages[%d]", i,
                          json_array_size(acalls), a);
        if (order == 1) puts_(c->b, "\n\n<function_results>");
        puts_(c->b, "\n<result>");
        if (fmt_text(c, content, "content", i)) return -1;
        puts_(c->b, "</result>");
        if (order == json_array_size(acalls)) {
            puts_(c->b, "\n</function_results>\n\n");
            puts_(c->b, i >= lu && o->thinking ? THINK : THINK_END);
        }
    } else if (!strcmp(role, "assistant")) {
        const json_t *rc = json_object_get(m, "reasoning_content");
        dbuf calls_txt = {0}, *keep = c->b;
        if (truthy(calls)) {
            c->b = &calls_txt;
            int r = render_calls(c, DSML_V32, calls, i);
            c->b = keep;
            if (r) { free(calls_txt.p); return -1; }
        }
        if (o->thinking && i > lu) {
            if (!truthy(rc) && !truthy(calls)) {
                free(calls_txt.p);
                return ci_err(c->err, c->errlen, "messages[%d]: in thinking mode an assistant turn after the last user message needs reasoning_content or tool_calls", i);
            }
            if (or_empty(c, rc, "reasoning_content", i)) { free(calls_txt.p); return -1; }
            puts_(c->b, THINK_END);
        }
        int r = or_empty(c, content, "content", i);
        if (!r && calls_txt.p) put(c->b, calls_txt.p, calls_txt.n);
        free(calls_txt.p);
        if (r) return -1;
        if (calls_txt.oom) return ci_err(c->err, c->errlen, "out of memory");
        puts_(c->b, EOS);
    } else {
        return ci_err(c->err, c->errlen, "messages[%d].role: unknown role '%s' (system, user, assistant, tool, developer)", i, role);
    }
    return 0;
}

static int encode_v32(ctx *c, const json_t *messages, const dsml_opts *o) {
    if (check_tool_results(c, messages, 1)) return -1;
    json_t *full = json_array();
    if (!full) return ci_err(c->err, c->errlen, "out of memory");
    int lu = last_user(messages), r = 0;
    /* drop_thinking_messages: earlier assistant turns lose their reasoning */
    for (size_t i = 0; i < json_array_size(messages) && !r; i++) {
        json_t *m = json_array_get(messages, i);
        if (!(o->thinking && o->drop_thinking) || (int)i >= lu || role_is(m, "user") || role_is(m, "system") || role_is(m, "tool")) {
            json_array_append(full, m);
        } else if (role_is(m, "assistant")) {
            json_t *cp = json_copy(m);
            json_object_del(cp, "reasoning_content");
            json_array_append_new(full, cp);
        } else {
            /* the official encoder drops it and then renders past the end of its list */
            r = ci_err(c->err, c->errlen, "messages[%zu]: a %s message before the last user message cannot be encoded in thinking mode",
                       i, role_of(m) ? role_of(m) : "role-less");
        }
    }
    if (!r && o->add_bos) puts_(c->b, BOS);
    for (size_t i = 0; i < json_array_size(full) && !r; i++) r = v32_message(c, full, (int)i, o);
    json_decref(full);
    return r;
}

/* ------------------------------------------------------------------ V4 */

/* Each content block remembers the message it came from, for errors (never printed). */
#define AT_KEY "cinfer_message_index"

typedef struct {
    json_t *msgs;   /* the merged list */
    int *orig;      /* each merged message's index in the caller's list (for errors) */
} v4list;

/* merge_tool_messages: tool results (and user texts that follow them or another user
 * text) join the user turn before them as content blocks. */
static int v4_merge(ctx *c, const json_t *in, v4list *L) {
    L->msgs = json_array();
    L->orig = calloc(json_array_size(in) + 1, sizeof(int));
    if (!L->msgs || !L->orig) return ci_err(c->err, c->errlen, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(in); i++) {
        const json_t *m = json_array_get(in, i);
        json_t *last = n ? json_array_get(L->msgs, n - 1) : NULL;
        int last_user_blocks = last && role_is(last, "user") && json_object_get(last, "content_blocks");
        if (role_is(m, "tool")) {
            const json_t *id = json_object_get(m, "tool_call_id"), *ct = json_object_get(m, "content");
            json_t *blk = json_object();
            if (!blk) return ci_err(c->err, c->errlen, "out of memory");
            json_object_set_new(blk, "type", json_string("tool_result"));
            json_object_set_new(blk, "tool_use_id", id ? json_deep_copy(id) : json_string(""));
            json_object_set_new(blk, "content", ct ? json_deep_copy(ct) : json_string(""));
            json_object_set_new(blk, AT_KEY, json_integer((json_int_t)i));
            if (last_user_blocks) json_array_append_new(json_object_get(last, "content_blocks"), blk);
            else {
                json_t *nm = json_object();
                if (nm) {
                    json_object_set_new(nm, "role", json_string("user"));
                    json_object_set_new(nm, "content_blocks", json_pack("[o]", blk));
                } else json_decref(blk);
                json_array_append_new(L->msgs, nm);
                L->orig[n++] = (int)i;
            }
        } else if (role_is(m, "user")) {
            const json_t *ct = json_object_get(m, "content"), *lt = last ? json_object_get(last, "task") : NULL;
            json_t *blk = json_object();
            if (!blk) return ci_err(c->err, c->errlen, "out of memory");
            json_object_set_new(blk, "type", json_string("text"));
            json_object_set_new(blk, "text", ct ? json_deep_copy(ct) : json_string(""));
            json_object_set_new(blk, AT_KEY, json_integer((json_int_t)i));
            if (last_user_blocks && (!lt || json_is_null(lt))) {
                json_array_append_new(json_object_get(last, "content_blocks"), blk);
            } else {
                json_t *nm = json_object();
                if (nm) {
                    static const char *const keep[] = {"task", "wo_eos", "mask"};
                    json_object_set_new(nm, "role", json_string("user"));
                    json_object_set_new(nm, "content", ct ? json_deep_copy(ct) : json_string(""));
                    json_object_set_new(nm, "content_blocks", json_pack("[o]", blk));
                    for (int k = 0; k < 3; k++) {
                        json_t *x = json_object_get(m, keep[k]);
                        if (x) json_object_set_new(nm, keep[k], json_deep_copy(x));
                    }
                } else json_decref(blk);
                json_array_append_new(L->msgs, nm);
                L->orig[n++] = (int)i;
            }
        } else {
            json_array_append_new(L->msgs, json_deep_copy(m));
            L->orig[n++] = (int)i;
        }
        if (json_array_size(L->msgs) != n) return ci_err(c->err, c->errlen, "out of memory");
    }
    return 0;
}

/* sort_tool_results_by_call_order: the results of a user turn in the order of the last
 * assistant turn's calls (by id; unknown ids rank 0; stable). */
static int v4_sort_results(json_t *msgs) {
    const json_t *calls = NULL;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        if (role_is(m, "assistant") && truthy(json_object_get(m, "tool_calls")) && json_is_array(json_object_get(m, "tool_calls"))) {
            calls = json_object_get(m, "tool_calls");
            continue;
        }
        json_t *blocks = json_object_get(m, "content_blocks");
        if (!role_is(m, "user") || !calls || !json_is_array(blocks)) continue;
        size_t nb = json_array_size(blocks), nt = 0;
        size_t *pos = malloc(nb * sizeof *pos + 1);
        json_t **tb = malloc(nb * sizeof *tb + 1);
        long *rank = malloc(nb * sizeof *rank + 1);
        if (!pos || !tb || !rank) { free(pos); free(tb); free(rank); return -1; }
        for (size_t k = 0; k < nb; k++) {
            json_t *b = json_array_get(blocks, k);
            const char *ty = json_string_value(json_object_get(b, "type"));
            if (!ty || strcmp(ty, "tool_result")) continue;
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            rank[nt] = 0;
            for (size_t q = 0; id && q < json_array_size(calls); q++) {
                const json_t *tc = json_array_get(calls, q);
                const char *cid = json_string_value(json_object_get(tc, "id"));
                if (!cid || !*cid) cid = json_string_value(json_object_get(json_object_get(tc, "function"), "id"));
                if (cid && *cid && !strcmp(cid, id)) rank[nt] = (long)q;   /* the last call with that id wins, as a dict would */
            }
            pos[nt] = k;
            tb[nt++] = json_incref(b);
        }
        int any_id = 0;
        for (size_t q = 0; q < json_array_size(calls); q++) {
            const json_t *tc = json_array_get(calls, q);
            const char *cid = json_string_value(json_object_get(tc, "id"));
            if (!cid || !*cid) cid = json_string_value(json_object_get(json_object_get(tc, "function"), "id"));
            if (cid && *cid) any_id = 1;
        }
        if (nt > 1 && any_id) {
            for (size_t a = 1; a < nt; a++)              /* insertion sort: stable */
                for (size_t z = a; z > 0 && rank[z - 1] > rank[z]; z--) {
                    long r = rank[z]; rank[z] = rank[z - 1]; rank[z - 1] = r;
                    json_t *t = tb[z]; tb[z] = tb[z - 1]; tb[z - 1] = t;
                }
            for (size_t k = 0; k < nt; k++) json_array_set(blocks, pos[k], tb[k]);
        }
        for (size_t k = 0; k < nt; k++) json_decref(tb[k]);
        free(pos);
        free(tb);
        free(rank);
    }
    return 0;
}

/* The text of a user turn's content blocks, "\n\n" between blocks. */
static int v4_blocks(ctx *c, const json_t *blocks, int turn) {
    for (size_t k = 0; k < json_array_size(blocks); k++) {
        const json_t *b = json_array_get(blocks, k);
        const json_t *at = json_object_get(b, AT_KEY);
        int idx = json_is_integer(at) ? (int)json_integer_value(at) : turn;   /* the message the block came from */
        if (k) puts_(c->b, "\n\n");
        const char *ty = json_string_value(json_object_get(b, "type"));
        if (ty && !strcmp(ty, "text")) {
            const json_t *t = json_object_get(b, "text");
            if (t && !json_is_string(t)) return ci_err(c->err, c->errlen, "messages[%d].content must be a string", idx);
            if (t) putj(c->b, t);
        } else if (ty && !strcmp(ty, "tool_result")) {
            const json_t *ct = json_object_get(b, "content");
            puts_(c->b, "<tool_result>");
            if (json_is_array(ct)) {
                for (size_t q = 0; q < json_array_size(ct); q++) {
                    const json_t *p = json_array_get(ct, q);
                    if (!json_is_object(p)) return ci_err(c->err, c->errlen, "messages[%d].content[%zu] must be an object", idx, q);
                    if (q) puts_(c->b, "\n\n");
                    const char *pt = json_string_value(json_object_get(p, "type"));
                    if (pt && !strcmp(pt, "text")) {
                        const json_t *t = json_object_get(p, "text");
                        if (t && !json_is_string(t)) return ci_err(c->err, c->errlen, "messages[%d].content[%zu].text must be a string", idx, q);
                        if (t) putj(c->b, t);
                    } else {
                        puts_(c->b, "[Unsupported ");
                        puts_(c->b, pt ? pt : "None");
                        puts_(c->b, "]");
                    }
                }
            } else if (fmt_text(c, ct, "content", idx)) return -1;
            puts_(c->b, "</tool_result>");
        } else {
            puts_(c->b, "[Unsupported ");
            puts_(c->b, ty ? ty : "None");
            puts_(c->b, "]");
        }
    }
    return 0;
}

static int v4_message(ctx *c, const json_t *msgs, const int *orig, int i, int drop, const dsml_opts *o) {
    const json_t *m = json_array_get(msgs, (size_t)i);
    const char *role = role_of(m);
    int lu = last_user(msgs), at = orig[i];
    size_t n = json_array_size(msgs);
    const json_t *content = json_object_get(m, "content"), *tools = json_object_get(m, "tools");
    const json_t *rf = json_object_get(m, "response_format"), *calls = json_object_get(m, "tool_calls");
    if (i == 0 && o->thinking && o->reasoning_effort && !strcmp(o->reasoning_effort, "max")) puts_(c->b, EFFORT_MAX);
    if (!role) return ci_err(c->err, c->errlen, "messages[%d].role: missing or not a string", at);
    if (!strcmp(role, "system")) {
        if (or_empty(c, content, "content", at)) return -1;
        if (truthy(tools) && render_tools(c, DSML_V4, tools, at)) return -1;
        if (truthy(rf)) render_format(c, rf);
    } else if (!strcmp(role, "developer")) {
        if (!truthy(content)) return ci_err(c->err, c->errlen, "messages[%d].content: a developer message needs content", at);
        if (!json_is_string(content)) return ci_err(c->err, c->errlen, "messages[%d].content must be a string", at);
        puts_(c->b, USER);
        putj(c->b, content);
        if (truthy(tools) && render_tools(c, DSML_V4, tools, at)) return -1;
        if (truthy(rf)) render_format(c, rf);
    } else if (!strcmp(role, "user")) {
        puts_(c->b, USER);
        const json_t *blocks = json_object_get(m, "content_blocks");
        if (truthy(blocks)) { if (v4_blocks(c, blocks, at)) return -1; }
        else if (or_empty(c, content, "content", at)) return -1;
    } else if (!strcmp(role, "latest_reminder")) {
        puts_(c->b, REMINDER);
        if (fmt_text(c, content, "content", at)) return -1;
    } else if (!strcmp(role, "assistant")) {
        const json_t *rc = json_object_get(m, "reasoning_content");
        const json_t *prev_task = i > 0 ? json_object_get(json_array_get(msgs, (size_t)i - 1), "task") : NULL;
        dbuf calls_txt = {0}, *keep = c->b;
        if (truthy(calls)) {
            c->b = &calls_txt;
            int r = render_calls(c, DSML_V4, calls, at);
            c->b = keep;
            if (r) { free(calls_txt.p); return -1; }
        }
        int r = 0;
        if (o->thinking && (!prev_task || json_is_null(prev_task)) && (!drop || i > lu)) {
            r = or_empty(c, rc, "reasoning_content", at);
            puts_(c->b, THINK_END);
        }
        if (!r) r = or_empty(c, content, "content", at);
        if (!r && calls_txt.p) put(c->b, calls_txt.p, calls_txt.n);
        free(calls_txt.p);
        if (r) return -1;
        if (calls_txt.oom) return ci_err(c->err, c->errlen, "out of memory");
        if (!truthy(json_object_get(m, "wo_eos"))) puts_(c->b, EOS);
    } else {
        return ci_err(c->err, c->errlen, "messages[%d].role: unknown role '%s' (system, user, assistant, tool, developer, latest_reminder)",
                      at, role);
    }
    /* what follows the turn: nothing when another non-assistant turn comes next */
    if ((size_t)i + 1 < n) {
        const json_t *nx = json_array_get(msgs, (size_t)i + 1);
        if (!role_is(nx, "assistant") && !role_is(nx, "latest_reminder")) return 0;
    }
    const json_t *task = json_object_get(m, "task");
    if (task && !json_is_null(task)) {
        const char *t = json_string_value(task), *tok = NULL;
        for (size_t k = 0; t && k < sizeof TASKS / sizeof *TASKS; k++) if (!strcmp(t, TASKS[k][0])) tok = TASKS[k][1];
        if (!tok) return ci_err(c->err, c->errlen, "messages[%d].task: unknown task (action, query, authority, domain, title, read_url)", at);
        if (strcmp(t, "action")) puts_(c->b, tok);
        else {
            puts_(c->b, ASSISTANT);
            puts_(c->b, o->thinking ? THINK : THINK_END);
            puts_(c->b, tok);
        }
    } else if (!strcmp(role, "user") || !strcmp(role, "developer")) {
        puts_(c->b, ASSISTANT);
        puts_(c->b, o->thinking && (!drop || i >= lu) ? THINK : THINK_END);
    }
    return 0;
}

static int encode_v4(ctx *c, const json_t *messages, const dsml_opts *o) {
    if (o->reasoning_effort && strcmp(o->reasoning_effort, "max") && strcmp(o->reasoning_effort, "high"))
        return ci_err(c->err, c->errlen, "reasoning_effort: expected \"max\" or \"high\", got \"%s\"", o->reasoning_effort);
    if (check_tool_results(c, messages, 0)) return -1;
    v4list L = {0};
    int r = v4_merge(c, messages, &L);
    if (!r) {
        if (v4_sort_results(L.msgs)) r = ci_err(c->err, c->errlen, "out of memory");
        int drop = o->drop_thinking;
        for (size_t i = 0; !r && i < json_array_size(L.msgs); i++)
            if (truthy(json_object_get(json_array_get(L.msgs, i), "tools"))) drop = 0;
        if (!r && o->thinking && drop) {        /* _drop_thinking_messages */
            int lu = last_user(L.msgs);
            json_t *kept = json_array();
            size_t k = 0;
            for (size_t i = 0; kept && i < json_array_size(L.msgs); i++) {
                json_t *m = json_array_get(L.msgs, i);
                const char *ro = role_of(m);
                int keep = ro && (!strcmp(ro, "user") || !strcmp(ro, "system") || !strcmp(ro, "tool") ||
                                  !strcmp(ro, "latest_reminder") || !strcmp(ro, "direct_search_results"));
                if (keep || (int)i >= lu) json_array_append(kept, m);
                else if (ro && !strcmp(ro, "assistant")) {
                    json_t *cp = json_copy(m);
                    json_object_del(cp, "reasoning_content");
                    json_array_append_new(kept, cp);
                } else continue;                 /* developer and other roles: dropped */
                L.orig[k++] = L.orig[i];
            }
            if (!kept) r = ci_err(c->err, c->errlen, "out of memory");
            else { json_decref(L.msgs); L.msgs = kept; }
        }
        if (!r && o->add_bos) puts_(c->b, BOS);
        for (size_t i = 0; !r && i < json_array_size(L.msgs); i++) r = v4_message(c, L.msgs, L.orig, (int)i, drop, o);
    }
    json_decref(L.msgs);
    free(L.orig);
    return r;
}

/* ------------------------------------------------------------------ entry points */

dsml_version dsml_for_model_type(const char *mt) {
    if (!mt) return DSML_NONE;
    if (!strcmp(mt, "deepseek_v32") || !strcmp(mt, "deepseek_v3_2")) return DSML_V32;
    if (!strcmp(mt, "deepseek_v4")) return DSML_V4;
    return DSML_NONE;
}

const char *dsml_name(dsml_version v) { return v == DSML_V32 ? "DeepSeek-V3.2" : v == DSML_V4 ? "DeepSeek-V4" : "none"; }

int dsml_encode(dsml_version v, const json_t *messages, const dsml_opts *o, char **out, size_t *out_len,
                char *err, size_t errlen) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (v != DSML_V32 && v != DSML_V4) return ci_err(err, errlen, "no DeepSeek encoder for this model");
    if (!json_is_array(messages)) return ci_err(err, errlen, "messages must be a list");
    for (size_t i = 0; i < json_array_size(messages); i++)
        if (!json_is_object(json_array_get(messages, i))) return ci_err(err, errlen, "messages[%zu] must be an object", i);
    dbuf b = {0};
    ctx c = {&b, err, errlen};
    int r = v == DSML_V32 ? encode_v32(&c, messages, o) : encode_v4(&c, messages, o);
    if (!r && b.oom) r = ci_err(err, errlen, "out of memory");
    if (r) { free(b.p); return -1; }
    if (!b.p) { b.p = calloc(1, 1); if (!b.p) return ci_err(err, errlen, "out of memory"); }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return 0;
}

/* A content given as a list of text parts (OpenAI's [{"type": "text", "text": ...}]) is
 * one string for the encoders (parts joined without separator). NULL: leave it. */
static json_t *joined_text(const json_t *ct) {
    if (!json_is_array(ct)) return NULL;
    dbuf b = {0};
    for (size_t i = 0; i < json_array_size(ct); i++) {
        const json_t *p = json_array_get(ct, i), *t = json_object_get(p, "text");
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (!ty || strcmp(ty, "text") || !json_is_string(t)) { free(b.p); return NULL; }
        putj(&b, t);
    }
    json_t *s = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.n);
    free(b.p);
    return s;
}

int dsml_render_request(dsml_version v, const json_t *request, char **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    const json_t *msgs = json_object_get(request, "messages"), *tools = json_object_get(request, "tools");
    const json_t *kw = json_object_get(request, "chat_template_kwargs");
    if (!json_is_array(msgs)) return ci_err(err, errlen, "request: \"messages\" must be a list");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return ci_err(err, errlen, "request: \"tools\" must be a list");
    dsml_opts o = {0, 1, 1, NULL};
    if (json_is_object(kw)) {
        const json_t *x;
        if ((x = json_object_get(kw, "thinking")) || (x = json_object_get(kw, "enable_thinking"))) {
            if (!json_is_boolean(x) && !json_is_null(x)) return ci_err(err, errlen, "chat_template_kwargs.thinking must be true or false");
            o.thinking = json_is_true(x);
        }
        if ((x = json_object_get(kw, "thinking_mode"))) {
            const char *s = json_string_value(x);
            if (!s || (strcmp(s, "thinking") && strcmp(s, "chat")))
                return ci_err(err, errlen, "chat_template_kwargs.thinking_mode must be \"thinking\" or \"chat\"");
            o.thinking = !strcmp(s, "thinking");
        }
        if ((x = json_object_get(kw, "drop_thinking"))) {
            if (!json_is_boolean(x)) return ci_err(err, errlen, "chat_template_kwargs.drop_thinking must be true or false");
            o.drop_thinking = json_is_true(x);
        }
        if ((x = json_object_get(kw, "reasoning_effort")) && !json_is_null(x)) {
            if (!json_is_string(x)) return ci_err(err, errlen, "chat_template_kwargs.reasoning_effort must be a string");
            if (v != DSML_V4) return ci_err(err, errlen, "chat_template_kwargs.reasoning_effort: %s has no reasoning effort", dsml_name(v));
            o.reasoning_effort = json_string_value(x);
        }
    }
    json_t *m = json_array();
    if (!m) return ci_err(err, errlen, "out of memory");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *x = json_array_get(msgs, i);
        json_t *joined = json_is_object(x) && !role_is(x, "tool") ? joined_text(json_object_get(x, "content")) : NULL;
        if (joined) {
            x = json_copy(x);
            json_object_set_new(x, "content", joined);
            json_array_append_new(m, x);
        } else {
            json_array_append(m, x);
        }
    }
    if (json_array_size(tools)) {
        json_t *first = json_array_get(m, 0);
        if (first && json_is_object(first) && (role_is(first, "system") || role_is(first, "developer"))) {
            json_t *cp = json_copy(first);
            json_object_set(cp, "tools", (json_t *)tools);
            json_array_set_new(m, 0, cp);
        } else {
            json_array_insert_new(m, 0, json_pack("{s:s,s:s,s:O}", "role", "system", "content", "", "tools", (json_t *)tools));
        }
    }
    char e2[768];
    int r = dsml_encode(v, m, &o, out, out_len, e2, sizeof e2);
    json_decref(m);
    if (r) return ci_err(err, errlen, "%s prompt: %s", dsml_name(v), e2);
    return 0;
}
