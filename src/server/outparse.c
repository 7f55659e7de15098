/* outparse.c — see outparse.h. Byte-level scanning; markers are UTF-8 literals. */
#include "outparse.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";
static const char HERMES_OPEN[] = "<tool_call>", HERMES_CLOSE[] = "</tool_call>";
static const char DS_CALLS_BEGIN[] = "<｜tool▁calls▁begin｜>", DS_CALLS_END[] = "<｜tool▁calls▁end｜>";
static const char DS_CALL_BEGIN[] = "<｜tool▁call▁begin｜>", DS_CALL_END[] = "<｜tool▁call▁end｜>";
static const char DS_SEP[] = "<｜tool▁sep｜>";
/* DeepSeek V3.2's DSML: <｜DSML｜function_calls> <｜DSML｜invoke name="N"> <｜DSML｜parameter
 * name="k" string="true|false">v</｜DSML｜parameter> ... </｜DSML｜invoke> </｜DSML｜function_calls> */
static const char DSML_CALLS[] = "<｜DSML｜function_calls>", DSML_CALLS_END[] = "</｜DSML｜function_calls>";
/* DeepSeek V4 writes the same invokes inside <｜DSML｜tool_calls> ... </｜DSML｜tool_calls> */
static const char DSML_TCALLS[] = "<｜DSML｜tool_calls>", DSML_TCALLS_END[] = "</｜DSML｜tool_calls>";
static const char DSML_INVOKE[] = "<｜DSML｜invoke name=\"", DSML_INVOKE_END[] = "</｜DSML｜invoke>";
static const char DSML_PARAM[] = "<｜DSML｜parameter name=\"", DSML_PARAM_END[] = "</｜DSML｜parameter>";

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static int starts(const char *t, size_t p, size_t len, const char *lit) {
    size_t n = strlen(lit);
    return len - p >= n && !memcmp(t + p, lit, n);
}

static size_t find(const char *t, size_t from, size_t len, const char *lit) {
    size_t n = strlen(lit);
    for (size_t i = from; i + n <= len; i++)
        if (!memcmp(t + i, lit, n)) return i;
    return len;
}

/* Longest suffix of t[from, len) that is a proper prefix of lit. */
static size_t partial(const char *t, size_t from, size_t len, const char *lit) {
    size_t n = strlen(lit), best = 0;
    for (size_t k = 1; k < n && k <= len - from; k++)
        if (!memcmp(t + len - k, lit, k)) best = k;
    return best;
}

int op_prompt_opens_think(const char *prompt, size_t len) {
    while (len && is_ws(prompt[len - 1])) len--;
    size_t n = strlen(THINK_OPEN);
    return len >= n && !memcmp(prompt + len - n, THINK_OPEN, n);
}

void op_think_split(const char *text, size_t len, int opened, int final, op_think *out) {
    size_t w = 0, p = 0;
    while (w < len && is_ws(text[w])) w++;
    if (starts(text, w, len, THINK_OPEN)) {
        p = w + strlen(THINK_OPEN);
    } else if (!opened) {
        if (!final && len - w < strlen(THINK_OPEN) && !memcmp(text + w, THINK_OPEN, len - w)) {
            *out = (op_think){ 0, 0, len, 0 };       /* might still become "<think>" */
            return;
        }
        *out = (op_think){ 0, 0, 0, len };           /* no reasoning: all content */
        return;
    }
    size_t e = find(text, p, len, THINK_CLOSE);
    if (e < len) {
        size_t c = e + strlen(THINK_CLOSE);
        while (c < len && (text[c] == '\n' || text[c] == '\r')) c++;
        *out = (op_think){ p, e, c, len };
        return;
    }
    size_t hold = final ? 0 : partial(text, p, len, THINK_CLOSE);
    *out = (op_think){ p, len - hold, len, len - hold };
}

size_t op_tool_start(const char *text, size_t from, size_t len, size_t *hold) {
    static const char *const marks[] = { HERMES_OPEN, DS_CALLS_BEGIN, DS_CALL_BEGIN, DSML_CALLS, DSML_TCALLS };
    size_t best = len, h = 0;
    for (int i = 0; i < 5; i++) {
        size_t at = find(text, from, len, marks[i]);
        if (at < best) best = at;
    }
    if (best == len)
        for (int i = 0; i < 5; i++) {
            size_t k = partial(text, from, len, marks[i]);
            if (k > h) h = k;
        }
    if (hold) *hold = h;
    return best;
}

/* arguments as JSON text: objects and arrays compact, strings as they are (they hold JSON
 * already, as OpenAI sends them), absent as "{}". NULL when not valid. */
static json_t *args_text(const json_t *a) {
    if (!a || json_is_null(a)) return json_string("{}");
    if (json_is_string(a)) return json_copy((json_t *)a);
    char *s = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return NULL;
    json_t *r = json_string(s);
    free(s);
    return r;
}

static json_t *call_obj(const char *id_prefix, int k, const char *name, size_t name_len, json_t *args) {
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d", id_prefix, k);
    json_t *fn = json_object();
    json_object_set_new(fn, "name", json_stringn(name, name_len));
    json_object_set_new(fn, "arguments", args);
    return json_pack("{s:s,s:s,s:o}", "id", id, "type", "function", "function", fn);
}

static size_t trim_end(const char *t, size_t a, size_t b) {
    while (b > a && is_ws(t[b - 1])) b--;
    return b;
}

/* One DSML block from p (just past its opening tag) up to end_tag into calls; the position
 * after it, or len + 1 when it does not parse. Parameters become the arguments object:
 * string="true" values as they are, others as JSON (kept as strings when they are not JSON). */
static size_t dsml_block(const char *text, size_t p, size_t len, const char *end_tag, const char *id_prefix, int *k,
                         json_t *calls) {
    size_t end = find(text, p, len, end_tag);
    for (;;) {
        while (p < end && is_ws(text[p])) p++;
        if (p >= end) break;
        if (!starts(text, p, end, DSML_INVOKE)) return len + 1;
        size_t n0 = p + strlen(DSML_INVOKE), n1 = find(text, n0, end, "\">");
        size_t ie = find(text, n1, end, DSML_INVOKE_END);
        if (n1 >= end || n1 == n0 || ie >= end) return len + 1;
        json_t *args = json_object();
        size_t q = n1 + 2;
        for (;;) {
            while (q < ie && is_ws(text[q])) q++;
            if (q >= ie) break;
            if (!starts(text, q, ie, DSML_PARAM)) { json_decref(args); return len + 1; }
            size_t k0 = q + strlen(DSML_PARAM), k1 = find(text, k0, ie, "\"");
            if (k1 >= ie) { json_decref(args); return len + 1; }
            size_t v0;
            int is_str;
            if (starts(text, k1, ie, "\" string=\"true\">")) { is_str = 1; v0 = k1 + strlen("\" string=\"true\">"); }
            else if (starts(text, k1, ie, "\" string=\"false\">")) { is_str = 0; v0 = k1 + strlen("\" string=\"false\">"); }
            else { json_decref(args); return len + 1; }
            size_t v1 = find(text, v0, ie, DSML_PARAM_END);
            if (v1 >= ie) { json_decref(args); return len + 1; }
            json_t *v = is_str ? NULL : json_loadb(text + v0, v1 - v0, JSON_DECODE_ANY, NULL);
            if (!v) v = json_stringn(text + v0, v1 - v0);
            char *key = strndup(text + k0, k1 - k0);
            if (!key || !v) { free(key); json_decref(v); json_decref(args); return len + 1; }
            json_object_set_new(args, key, v);
            free(key);
            q = v1 + strlen(DSML_PARAM_END);
        }
        json_t *at = args_text(args);
        json_decref(args);
        if (!at) return len + 1;
        json_array_append_new(calls, call_obj(id_prefix, (*k)++, text + n0, n1 - n0, at));
        p = ie + strlen(DSML_INVOKE_END);
    }
    return end < len ? end + strlen(end_tag) : len;
}

json_t *op_tool_parse(const char *text, size_t start, size_t len, const char *id_prefix) {
    json_t *calls = json_array();
    size_t p = start;
    int k = 0;
    for (;;) {
        while (p < len && is_ws(text[p])) p++;
        if (p >= len) break;
        if (starts(text, p, len, HERMES_OPEN)) {
            p += strlen(HERMES_OPEN);
            size_t e = find(text, p, len, HERMES_CLOSE);
            json_t *o = json_loadb(text + p, trim_end(text, p, e) - p, JSON_DECODE_ANY, NULL);
            const char *name = json_is_object(o) ? json_string_value(json_object_get(o, "name")) : NULL;
            json_t *args = NULL;
            if (name) {
                const json_t *a = json_object_get(o, "arguments");
                args = args_text(a ? a : json_object_get(o, "parameters"));
            }
            if (!name || !args) { json_decref(o); json_decref(args); goto fail; }
            json_array_append_new(calls, call_obj(id_prefix, k++, name, strlen(name), args));
            json_decref(o);
            p = e < len ? e + strlen(HERMES_CLOSE) : len;
        } else if (starts(text, p, len, DSML_CALLS) || starts(text, p, len, DSML_TCALLS)) {
            int v4 = starts(text, p, len, DSML_TCALLS);
            p = dsml_block(text, p + strlen(v4 ? DSML_TCALLS : DSML_CALLS), len, v4 ? DSML_TCALLS_END : DSML_CALLS_END,
                           id_prefix, &k, calls);
            if (p > len) goto fail;
        } else if (starts(text, p, len, DS_CALLS_BEGIN)) {
            p += strlen(DS_CALLS_BEGIN);
        } else if (starts(text, p, len, DS_CALLS_END)) {
            p += strlen(DS_CALLS_END);
        } else if (starts(text, p, len, DS_CALL_BEGIN)) {
            p += strlen(DS_CALL_BEGIN);
            size_t s = find(text, p, len, DS_SEP);
            if (s == len) goto fail;
            size_t h0 = p, h1 = s;
            p = s + strlen(DS_SEP);
            size_t e = find(text, p, len, DS_CALL_END);
            size_t name0, name1, a0, a1;
            if (h1 - h0 == 8 && !memcmp(text + h0, "function", 8)) {     /* V3: name, then a json fence */
                name0 = p;
                name1 = find(text, p, e, "\n");
                size_t f = find(text, name1, e, "```");
                if (f == e) goto fail;
                a0 = f + 3;
                if (starts(text, a0, e, "json")) a0 += 4;
                a1 = find(text, a0, e, "```");
            } else {                                                       /* V3.1: name<sep>args */
                name0 = h0;
                name1 = h1;
                a0 = p;
                a1 = e;
            }
            while (a0 < a1 && is_ws(text[a0])) a0++;
            a1 = trim_end(text, a0, a1);
            while (name0 < name1 && is_ws(text[name0])) name0++;
            name1 = trim_end(text, name0, name1);
            json_t *a = json_loadb(text + a0, a1 - a0, JSON_DECODE_ANY, NULL);
            json_t *args = a ? args_text(a) : NULL;
            json_decref(a);
            if (!args || name1 == name0) { json_decref(args); goto fail; }
            json_array_append_new(calls, call_obj(id_prefix, k++, text + name0, name1 - name0, args));
            p = e < len ? e + strlen(DS_CALL_END) : len;
        } else {
            break;                                   /* trailing text after the calls is dropped */
        }
    }
    if (!json_array_size(calls)) goto fail;
    return calls;
fail:
    json_decref(calls);
    return NULL;
}

json_t *op_tool_uses(const char *text, size_t len, const char *id_prefix, size_t *text_end) {
    *text_end = len;
    size_t m = op_tool_start(text, 0, len, NULL);
    json_t *calls = m < len ? op_tool_parse(text, m, len, id_prefix) : NULL;
    if (!calls) return NULL;
    while (m > 0 && is_ws(text[m - 1])) m--;
    *text_end = m;
    json_t *uses = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const json_t *f = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(f, "arguments"));
        json_t *in = args ? json_loads(args, 0, NULL) : NULL;
        if (!json_is_object(in)) { json_decref(in); in = json_object(); }
        json_array_append_new(uses, json_pack("{s:s,s:O,s:O,s:o}", "type", "tool_use", "id", json_object_get(c, "id"), "name",
                                              json_object_get(f, "name"), "input", in));
    }
    json_decref(calls);
    return uses;
}

int op_call_frame(const char *text, size_t len, const char *name, const char *args, char **open, char **mid) {
    static const char *const marks[] = { HERMES_OPEN, DS_CALLS_BEGIN, DS_CALL_BEGIN };
    *open = *mid = NULL;
    /* the call is the last mention of the name (a system prompt may describe the format and
     * list the tools before it); its block starts at the last marker before the name, or at
     * a marker right before that one (DeepSeek's calls-begin ahead of call-begin) */
    size_t n0 = len, m = len, hold;
    for (size_t at = find(text, 0, len, name); at < len; at = find(text, at + 1, len, name)) n0 = at;
    if (n0 >= len) return -1;
    for (size_t at = op_tool_start(text, 0, n0, &hold); at < n0; at = op_tool_start(text, at + 1, n0, &hold)) m = at;
    if (m >= n0) return -1;
    for (int again = 1; again;) {
        again = 0;
        size_t e = m;
        while (e > 0 && is_ws(text[e - 1])) e--;
        for (int i = 0; i < 3; i++) {
            size_t ml = strlen(marks[i]);
            if (e >= ml && !memcmp(text + e - ml, marks[i], ml)) { m = e - ml; again = 1; break; }
        }
    }
    /* DeepSeek V3.2 / V4 write their DSML block after a blank line ("</think>\n\n<｜DSML｜...");
     * the opening keeps it, so a forced call reads as the encoders write one */
    if (starts(text, m, len, DSML_CALLS) || starts(text, m, len, DSML_TCALLS))
        while (m > 0 && text[m - 1] == '\n') m--;
    size_t n1 = n0 + strlen(name), a0 = find(text, n1, len, args);
    json_t *calls = op_tool_parse(text, m, len, "probe");
    const char *got = calls ? json_string_value(json_object_get(json_object_get(json_array_get(calls, 0), "function"), "name")) : NULL;
    int ok = got && !strcmp(got, name) && json_array_size(calls) == 1;
    json_decref(calls);
    if (!ok) return -1;
    *open = strndup(text + m, n0 - m);
    *mid = a0 < len ? strndup(text + n1, a0 - n1) : NULL;   /* DSML writes no arguments text */
    if (!*open || (a0 < len && !*mid)) { free(*open); free(*mid); *open = *mid = NULL; return -1; }
    return 0;
}

int op_call_close(const char *text, size_t len, const char *args, char **close) {
    static const char *const ends[] = { HERMES_CLOSE, DS_CALL_END, DSML_INVOKE_END };
    static const char *const more[] = { DS_CALLS_END, DSML_CALLS_END };
    *close = NULL;
    size_t a = len, al = strlen(args);
    for (size_t at = find(text, 0, len, args); at < len; at = find(text, at + 1, len, args)) a = at;
    if (a >= len) return -1;
    size_t p = a + al, e = (size_t)-1;
    for (int i = 0; i < 3; i++) {
        size_t at = find(text, p, len, ends[i]);
        if (at < len && at + strlen(ends[i]) < e) e = at + strlen(ends[i]);
    }
    if (e == (size_t)-1) return -1;
    for (int again = 1; again && e < len;) {
        again = 0;
        size_t q = e;
        while (q < len && is_ws(text[q])) q++;
        for (int i = 0; i < 2; i++)
            if (starts(text, q, len, more[i])) { e = q + strlen(more[i]); again = 1; break; }
    }
    if (!(*close = strndup(text + p, e - p))) return -1;
    return 0;
}
