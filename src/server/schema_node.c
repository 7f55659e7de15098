/* schema_node.c — the walk over a schema (schema_int.h jsc_node): one pass, depth first;
 * $ref targets are compiled once (a reference node per target, so recursion is a cycle of
 * nodes); allOf and the siblings of anyOf / oneOf are merged first (schema_merge.c); enum
 * and const values are kept when the rest of the schema accepts them (the matcher run as a
 * validator); type lists and anyOf / oneOf become unions. */
#include "schema_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- references, combinators, enums ------------------------------------------------------- */

const json_t *jsc_resolve(const json_t *doc, const char *ref) {
    if (ref[0] != '#') return NULL;
    const json_t *v = doc;
    const char *p = ref + 1;
    if (*p && *p != '/') return NULL;
    while (*p && v) {
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            if (*p == '~' && p[1] == '0') { seg[n++] = '~'; p += 2; }
            else if (*p == '~' && p[1] == '1') { seg[n++] = '/'; p += 2; }
            else seg[n++] = *p++;
        }
        seg[n] = 0;
        if (json_is_object(v)) v = json_object_get(v, seg);
        else if (json_is_array(v)) {
            char *end;
            long i = strtol(seg, &end, 10);
            v = *seg && !*end && i >= 0 ? json_array_get(v, (size_t)i) : NULL;
        } else v = NULL;
    }
    return v;
}

static int ref_node(jsc_ctx *c, const char *ref, int depth) {
    for (int i = 0; i < c->nrefs; i++) if (!strcmp(c->refs[i].ref, ref)) return c->refs[i].node;
    const json_t *t = jsc_resolve(c->doc, ref);
    if (!t) return jsc_fail(c, "'$ref' '%.80s' points to nothing in this schema (only local '#/...' references are supported)", ref);
    int id = jsc_new_node(c->g, SN_REF);
    if (id < 0) return jsc_fail(c, "schema too large");
    if (c->nrefs == c->caprefs) {
        int nc = c->caprefs ? c->caprefs * 2 : 8;
        jsc_ref *nr = realloc(c->refs, (size_t)nc * sizeof *nr);
        if (!nr) return jsc_fail(c, "out of memory");
        c->refs = nr;
        c->caprefs = nc;
    }
    c->refs[c->nrefs].ref = strdup(ref);
    if (!c->refs[c->nrefs].ref) return jsc_fail(c, "out of memory");
    c->refs[c->nrefs++].node = id;
    int k = jsc_node(c, t, depth + 1);
    if (k < 0) return -1;
    sn_node *nd = &c->g->nodes[id];
    if (!(nd->kids = malloc(sizeof *nd->kids))) return jsc_fail(c, "out of memory");
    nd->kids[0] = k;
    nd->nkids = 1;
    for (int x = k, hops = 0; c->g->nodes[x].kind == SN_REF; hops++) {
        if (x == id || hops > c->g->n || c->g->nodes[x].nkids == 0) return jsc_fail(c, "'$ref' '%.80s' refers to itself", ref);
        x = c->g->nodes[x].kids[0];
    }
    return id;
}

/* Does node `root` accept the whole text s? (the matcher as a validator) */
static int accepts(jsc_grammar *g, int root, const char *s, size_t n) {
    sm_matcher m;
    sm_state st;
    int save = g->root, ok = 0;
    g->root = root;
    if (!sm_init(&m, g, &st)) ok = sm_feed(&m, &st, s, n) == 0 && sm_complete(&m, &st);
    sm_release(&m);
    g->root = save;
    return ok;
}

static int has_constraints(const json_t *s, const char *skip1, const char *skip2) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (jsc_is_annotation(k) || !strcmp(k, skip1) || (skip2 && !strcmp(k, skip2))) continue;
        return 1;
    }
    return 0;
}

static json_t *without(const json_t *s, const char *k1, const char *k2) {
    json_t *r = json_copy((json_t *)s);
    if (r) { json_object_del(r, k1); if (k2) json_object_del(r, k2); }
    return r;
}

static int enum_node(jsc_ctx *c, const json_t *s, int depth) {
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en && (!json_is_array(en) || !json_array_size(en))) return jsc_fail(c, "'enum' must be a non-empty array");
    if (json_array_size(en) > 4096) return jsc_fail(c, "'enum' has more than 4096 values");
    int rest = c->g->any;
    if (has_constraints(s, "enum", "const")) {
        json_t *r = without(s, "enum", "const");
        if (!r) return jsc_fail(c, "out of memory");
        rest = jsc_node(c, r, depth + 1);
        json_decref(r);
        if (rest < 0) return -1;
    }
    size_t n = en ? json_array_size(en) : 1;
    char **lit = calloc(n, sizeof *lit);
    uint32_t *len = calloc(n, sizeof *len);
    int k = 0, id = -1;
    if (!lit || !len) { jsc_fail(c, "out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : cn;
        if (en && cn && !json_equal((json_t *)v, (json_t *)cn)) continue;
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!t) { jsc_fail(c, "out of memory"); goto done; }
        if (strlen(t) > 60000) { free(t); jsc_fail(c, "an '%s' value longer than 60000 bytes is not supported", en ? "enum" : "const"); goto done; }
        if (!accepts(c->g, rest, t, strlen(t))) { free(t); continue; }
        lit[k] = t;
        len[k++] = (uint32_t)strlen(t);
    }
    if (!k) { jsc_fail(c, "no value of '%s' is allowed by the rest of the schema", en ? "enum" : "const"); goto done; }
    id = jsc_lit_node(c->g, lit, len, k);
    if (id < 0) jsc_fail(c, "out of memory");
done:
    for (int i = 0; i < k; i++) free(lit[i]);
    free(lit);
    free(len);
    return id;
}

static int union_node(jsc_ctx *c, const json_t *s, const char *kw, int depth) {
    const json_t *alts = json_object_get(s, kw);
    if (!json_is_array(alts) || !json_array_size(alts)) return jsc_fail(c, "'%s' must be a non-empty array of schemas", kw);
    if (json_array_size(alts) > 64) return jsc_fail(c, "'%s' has more than 64 alternatives", kw);
    int kids[64], n = (int)json_array_size(alts);
    for (int i = 0; i < n; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", i);
        size_t at = jsc_push(c, kw, num);
        kids[i] = jsc_node(c, json_array_get(alts, (size_t)i), depth + 1);
        if (kids[i] < 0) return -1;
        c->path[at] = 0;
    }
    if (!strcmp(kw, "oneOf"))
        for (int i = 0; i < n; i++) for (int j = i + 1; j < n; j++)
            if (!jsc_disjoint(c->g, kids[i], kids[j]))
                return jsc_fail(c, "'oneOf' alternatives %d and %d may both match; only alternatives that differ by type, by a "
                                  "const / enum property or by a required key the other forbids are supported (anyOf is)", i, j);
    int id = n == 1 ? kids[0] : jsc_group(c->g, SN_UNION, kids, n);
    if (id < 0) return jsc_fail(c, "schema too large");
    c->g->nodes[id].loose = !json_object_get(s, "type");
    return id;
}

static unsigned infer_types(const json_t *s) {
    static const char *const ko[] = { "properties", "required", "additionalProperties", NULL },
                             *const ka[] = { "items", "prefixItems", "minItems", "maxItems", NULL },
                             *const ks[] = { "minLength", "maxLength", "pattern", "format", NULL },
                             *const kn[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL };
    const char *const *lists[4] = { ko, ka, ks, kn };
    const unsigned bits[4] = { T_OBJ, T_ARR, T_STR, T_NUM };
    unsigned t = 0;
    for (int l = 0; l < 4; l++)
        for (int i = 0; lists[l][i]; i++) if (json_object_get(s, lists[l][i])) t |= bits[l];
    return t;
}

int jsc_node(jsc_ctx *c, const json_t *s, int depth) {
    if (c->failed) return -1;
    if (depth > JSC_MAX_DEPTH) return jsc_fail(c, "schema nested deeper than %d levels", JSC_MAX_DEPTH);
    if (json_is_true(s)) return c->g->any;
    if (json_is_false(s)) return jsc_fail(c, "schema false matches nothing");
    if (!json_is_object(s)) return jsc_fail(c, "a schema must be an object or a boolean");
    if (jsc_check_keywords(c, s)) return -1;
    const json_t *ref = json_object_get(s, "$ref");
    if (ref && !json_is_string(ref)) return jsc_fail(c, "'$ref' must be a string");
    if (ref && !has_constraints(s, "$ref", NULL)) return ref_node(c, json_string_value(ref), depth);
    int has_any = json_object_get(s, "anyOf") != NULL, has_one = json_object_get(s, "oneOf") != NULL;
    if (has_any && has_one) return jsc_fail(c, "'anyOf' together with 'oneOf' is not supported");
    if (ref || json_object_get(s, "allOf") ||
        ((has_any || has_one) && has_constraints(s, has_any ? "anyOf" : "oneOf", NULL))) {
        json_t *f = jsc_flatten(c, s, depth);
        if (!f) return -1;
        int id = -1;
        const char *kw = json_object_get(f, "anyOf") ? "anyOf" : json_object_get(f, "oneOf") ? "oneOf" : NULL;
        if (kw && has_constraints(f, kw, NULL)) {
            /* siblings of anyOf / oneOf apply to every alternative: distribute them */
            json_t *base = without(f, kw, NULL), *alts = json_array(), *u = json_object();
            size_t i;
            const json_t *a;
            json_array_foreach(json_object_get(f, kw), i, a) {
                json_t *fa = jsc_flatten(c, a, depth + 1), *m = fa ? jsc_merge(c, base, fa) : NULL;
                json_decref(fa);
                if (!m) break;
                json_array_append_new(alts, m);
            }
            json_object_set_new(u, kw, alts);
            if (!c->failed) id = jsc_node(c, u, depth + 1);
            json_decref(base);
            json_decref(u);
        } else if (!c->failed) {
            id = jsc_node(c, f, depth + 1);
        }
        json_decref(f);
        return c->failed ? -1 : id;
    }
    if (has_any || has_one) return union_node(c, s, has_any ? "anyOf" : "oneOf", depth);
    if (json_object_get(s, "enum") || json_object_get(s, "const")) return enum_node(c, s, depth);
    unsigned t;
    if (jsc_type_bits(c, json_object_get(s, "type"), &t)) return -1;
    if (!json_object_get(s, "type")) {
        t = infer_types(s);
        if (!t) return c->g->any;
    }
    if (t & T_INT && t & T_NUM) t &= ~(unsigned)T_INT;
    int kids[7], n = 0;
    static char *const fl[2] = { "false", "true" };
    static const uint32_t fll[2] = { 5, 4 };
    for (unsigned b = 1; b <= T_INT; b <<= 1) {
        if (!(t & b)) continue;
        int id = b == T_NULL ? jsc_literal(c->g, "null", 4) : b == T_BOOL ? jsc_lit_node(c->g, fl, fll, 2)
               : b == T_OBJ ? jsc_object_node(c, s, depth) : b == T_ARR ? jsc_array_node(c, s, depth)
               : b == T_STR ? jsc_string_node(c, s) : jsc_number_node(c, s, b == T_INT);
        if (id < 0) return c->failed ? -1 : jsc_fail(c, "schema too large");
        kids[n++] = id;
    }
    int id = n == 1 ? kids[0] : jsc_group(c->g, SN_UNION, kids, n);
    if (id < 0) return jsc_fail(c, "schema too large");
    c->g->nodes[id].loose = !json_object_get(s, "type");
    return id;
}

int jsc_schema(jsc_grammar *g, const json_t *doc, const json_t *schema, const char *where, char *err, size_t errlen) {
    jsc_ctx c = { .g = g, .doc = doc, .where = where, .err = err, .errlen = errlen };
    int id = jsc_node(&c, schema, 0);
    for (int i = 0; i < c.nrefs; i++) free(c.refs[i].ref);
    free(c.refs);
    if (id < 0 && !c.failed) snprintf(err, errlen, "%s: cannot compile the schema", where);
    return c.failed ? -1 : id;
}

int jsc_compile(jsc_grammar *g, const json_t *schema, const char *where, char *err, size_t errlen) {
    int id = jsc_schema(g, schema, schema, where, err, errlen);
    if (id < 0) return -1;
    g->root = id;
    return 0;
}
