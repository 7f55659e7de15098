/* api_schema.c — structured outputs on the chat route: response_format json_schema, and
 * tools declared "strict": true, as a grammar the engine decodes under (schema.h).
 *
 * A json_schema reply is the schema's value and nothing else; the reply ends when the
 * value is complete. With strict tools the reply stays free text, but each tool call that
 * starts (the chat template's call opening, outparse.h op_call_frame) must be one of the
 * offered functions with arguments valid for its parameters (any JSON object for a tool
 * that is not strict), then the template's call closing; with tool_choice "required" or a
 * named function the reply starts inside that call. Errors name the field and, for a
 * schema, the keyword and its place (schema.c). */
#include "api_schema.h"
#include "../io/json.h"
#include <stdlib.h>
#include <string.h>

int api_json_schema(const json_t *rf, jsc_grammar **g, srv_err *e) {
    *g = NULL;
    const json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return srv_fail(e, 400, "response_format", "'response_format' json_schema needs a 'json_schema' object with 'name' and 'schema'");
    const json_t *name = json_object_get(js, "name"), *schema = json_object_get(js, "schema"), *strict = json_object_get(js, "strict");
    if (name && !json_is_string(name)) return srv_fail(e, 400, "response_format", "'response_format.json_schema.name' must be a string");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return srv_fail(e, 400, "response_format", "'response_format.json_schema.strict' must be a boolean");
    if (!schema || (!json_is_object(schema) && !json_is_boolean(schema)))
        return srv_fail(e, 400, "response_format", "'response_format.json_schema.schema' must be a JSON Schema object");
    char err[600];
    *g = jsc_new();
    if (!*g) return srv_fail(e, 500, NULL, "out of memory");
    if (jsc_compile(*g, schema, "#", err, sizeof err)) {
        jsc_free(*g);
        *g = NULL;
        return srv_fail(e, 400, "response_format", "'response_format.json_schema.schema': %s", err);
    }
    return 0;
}

/* The node of one call: name + mid, the arguments, the closing. */
static int call_node(srv *s, jsc_grammar *g, const json_t *fn, size_t i, int with_name, srv_err *e) {
    const char *name = json_string_value(json_object_get(fn, "name"));
    const json_t *params = json_object_get(fn, "parameters");
    int strict = json_is_true(json_object_get(fn, "strict")), args = g->any_obj;
    if (strict && params) {
        char err[600], where[64];
        snprintf(where, sizeof where, "#");
        if (!json_is_object(params)) return srv_fail(e, 400, "tools", "'tools[%zu].function.parameters' must be a JSON Schema object", i);
        args = jsc_schema(g, params, params, where, err, sizeof err);
        if (args < 0) return srv_fail(e, 400, "tools", "'tools[%zu].function.parameters': %s", i, err);
    }
    int parts[3], n = 0;
    if (with_name) {
        size_t ln = strlen(name), lm = strlen(s->call_mid);
        char *lead = malloc(ln + lm + 1);
        if (!lead) return srv_fail(e, 500, NULL, "out of memory");
        memcpy(lead, name, ln);
        memcpy(lead + ln, s->call_mid, lm + 1);
        parts[n++] = jsc_literal(g, lead, ln + lm);
        free(lead);
    }
    parts[n++] = args;
    parts[n++] = jsc_literal(g, s->call_close, strlen(s->call_close));
    for (int k = 0; k < n; k++) if (parts[k] < 0) return srv_fail(e, 500, NULL, "out of memory");
    int id = jsc_group(g, SN_SEQ, parts, n);
    return id < 0 ? srv_fail(e, 500, NULL, "out of memory") : id;
}

int api_tool_grammar(srv *s, const json_t *req, jsc_grammar **g, srv_err *e) {
    *g = NULL;
    const json_t *tools = json_object_get(req, "tools"), *tc = json_object_get(req, "tool_choice");
    size_t i, nt = json_is_array(tools) ? json_array_size(tools) : 0;
    const json_t *t;
    int any_strict = 0;
    json_array_foreach(tools, i, t) {
        const json_t *st = json_object_get(json_object_get(t, "function"), "strict");
        if (st && !json_is_boolean(st) && !json_is_null(st)) return srv_fail(e, 400, "tools", "'tools[%zu].function.strict' must be a boolean", i);
        any_strict |= json_is_true(st);
    }
    if (!any_strict || !nt) return 0;                  /* nothing to hold: calls are parsed as before */
    json_array_foreach(tools, i, t) {
        const char *nm = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (!nm || !*nm) return srv_fail(e, 400, "tools", "'tools[%zu].function.name' must be a non-empty string (a strict tool is among them)", i);
        for (const char *q = nm; *q; q++)
            if ((unsigned char)*q < 0x20 || *q == '"' || *q == '\\')
                return srv_fail(e, 400, "tools", "'tools[%zu].function.name' has a quote, backslash or control character", i);
    }
    if (!s->call_open || !s->call_mid || !s->call_close)
        return srv_fail(e, 400, "tools", "'strict' tools need a chat template whose tool calls cinfer can frame (name, then JSON arguments); this model's cannot");
    if (nt > 64) return srv_fail(e, 400, "tools", "at most 64 tools with 'strict' ones among them");
    const char *mode = json_string_value(tc), *named = mode ? NULL : json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
    *g = jsc_new();
    if (!*g) return srv_fail(e, 500, NULL, "out of memory");
    int kids[64], n = 0, lead = -1;
    json_array_foreach(tools, i, t) {
        const json_t *fn = json_object_get(t, "function");
        int id = call_node(s, *g, fn, i, 1, e);
        if (id < 0) goto fail;
        kids[n++] = id;
        if (named && !strcmp(named, json_string_value(json_object_get(fn, "name"))) && lead < 0) {
            lead = call_node(s, *g, fn, i, 0, e);          /* the reply starts after the name */
            if (lead < 0) goto fail;
        }
    }
    int calls = n == 1 ? kids[0] : jsc_group(*g, SN_UNION, kids, n);
    int text = calls < 0 ? -1 : jsc_text(*g, s->call_open, strlen(s->call_open), calls);
    if (text < 0) { srv_fail(e, 500, NULL, "out of memory"); goto fail; }
    int first = named ? lead : mode && !strcmp(mode, "required") ? calls : -1;
    if (first >= 0) {
        int seq[2] = { first, text };
        (*g)->root = jsc_group(*g, SN_SEQ, seq, 2);
        if ((*g)->root < 0) { srv_fail(e, 500, NULL, "out of memory"); goto fail; }
    } else {
        (*g)->root = text;
    }
    return 0;
fail:
    jsc_free(*g);
    *g = NULL;
    return -1;
}
