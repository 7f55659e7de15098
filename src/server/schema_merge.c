/* schema_merge.c — allOf as one schema, and the disjointness test of oneOf (schema_int.h).
 *
 * jsc_merge(a, b) is a schema that accepts what both accept, keyword by keyword: types
 * intersect, bounds tighten, required lists join, enums intersect, a property in both is
 * the allOf of its two schemas, and additionalProperties keeps its meaning per branch (a
 * key declared in one branch only must also pass the other's additionalProperties; false
 * there forbids it). Two different patterns, two anyOf / oneOf lists or two prefixItems
 * lists are refused rather than approximated. */
#include "schema_int.h"
#include <stdlib.h>
#include <string.h>

static const char *const tnames[] = { "null", "boolean", "object", "array", "string", "number", "integer" };

static unsigned types_of(const json_t *t) {
    if (!t) return T_ALL;
    unsigned b = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_is_array(t) ? json_array_get(t, i) : t);
        for (int j = 0; s && j < 7; j++) if (!strcmp(s, tnames[j])) b |= 1u << j;
    }
    return b;
}

static json_t *allof2(const json_t *x, const json_t *y) {
    if (json_is_true(x)) return json_incref((json_t *)y);
    if (json_is_true(y)) return json_incref((json_t *)x);
    return json_pack("{s:[O,O]}", "allOf", x, y);
}

/* properties / additionalProperties of both branches into out */
static int merge_props(jsc_ctx *c, const json_t *a, const json_t *b, json_t *out) {
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    const json_t *aa = json_object_get(a, "additionalProperties"), *ab = json_object_get(b, "additionalProperties");
    if (!pa && !pb && !aa && !ab) return 0;
    json_t *props = json_object();
    const json_t *sides[2] = { pa, pb };
    for (int side = 0; side < 2; side++) {
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)sides[side], k, v) {
            if (json_object_get(props, k)) continue;
            const json_t *sa = json_object_get(pa, k), *sb = json_object_get(pb, k);
            if (!sa) sa = aa ? aa : json_true();
            if (!sb) sb = ab ? ab : json_true();
            json_object_set_new(props, k, json_is_false(sa) || json_is_false(sb) ? json_false() : allof2(sa, sb));
        }
    }
    json_object_set_new(out, "properties", props);
    json_object_del(out, "additionalProperties");
    if ((aa && json_is_false(aa)) || (ab && json_is_false(ab))) json_object_set_new(out, "additionalProperties", json_false());
    else if (aa && ab) json_object_set_new(out, "additionalProperties", allof2(aa, ab));
    else if (aa || ab) json_object_set(out, "additionalProperties", (json_t *)(aa ? aa : ab));
    (void)c;
    return 0;
}

json_t *jsc_merge(jsc_ctx *c, const json_t *a, const json_t *b) {
    json_t *out = json_copy((json_t *)a);
    if (!out) { jsc_fail(c, "out of memory"); return NULL; }
    const char *k;
    const json_t *vb;
    json_object_foreach((json_t *)b, k, vb) {
        if (jsc_is_annotation(k) || !strcmp(k, "properties") || !strcmp(k, "additionalProperties")) continue;
        const json_t *va = json_object_get(out, k);
        if (!va) { json_object_set(out, k, (json_t *)vb); continue; }
        if (json_equal((json_t *)va, (json_t *)vb)) continue;
        if (!strcmp(k, "type")) {
            unsigned t = types_of(va) & types_of(vb);
            if ((types_of(va) & T_NUM) && (types_of(vb) & T_INT)) t |= T_INT;
            if ((types_of(vb) & T_NUM) && (types_of(va) & T_INT)) t |= T_INT;
            if (!t) { jsc_fail(c, "'allOf': the branches' 'type's have nothing in common"); goto fail; }
            json_t *arr = json_array();
            for (int j = 0; j < 7; j++) if (t & (1u << j)) json_array_append_new(arr, json_string(tnames[j]));
            json_object_set_new(out, k, arr);
        } else if (!strcmp(k, "required")) {
            json_t *r = json_copy((json_t *)va);
            size_t i;
            const json_t *x;
            json_array_foreach(vb, i, x) {
                size_t j;
                const json_t *y;
                int dup = 0;
                json_array_foreach(r, j, y) dup |= json_equal((json_t *)x, (json_t *)y);
                if (!dup) json_array_append(r, (json_t *)x);
            }
            json_object_set_new(out, k, r);
        } else if (!strcmp(k, "minLength") || !strcmp(k, "minItems") || !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum")) {
            if (json_is_number(va) && json_is_number(vb) && json_number_value(vb) > json_number_value(va)) json_object_set(out, k, (json_t *)vb);
        } else if (!strcmp(k, "maxLength") || !strcmp(k, "maxItems") || !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum")) {
            if (json_is_number(va) && json_is_number(vb) && json_number_value(vb) < json_number_value(va)) json_object_set(out, k, (json_t *)vb);
        } else if (!strcmp(k, "enum")) {
            json_t *r = json_array();
            size_t i, j;
            const json_t *x, *y;
            json_array_foreach(va, i, x) {
                int in = 0;
                json_array_foreach(vb, j, y) in |= json_equal((json_t *)x, (json_t *)y);
                if (in) json_array_append(r, (json_t *)x);
            }
            if (!json_array_size(r)) { json_decref(r); jsc_fail(c, "'allOf': the branches' 'enum's have no value in common"); goto fail; }
            json_object_set_new(out, k, r);
        } else if (!strcmp(k, "items")) {
            json_object_set_new(out, k, json_is_false(va) || json_is_false(vb) ? json_false() : allof2(va, vb));
        } else if (!strcmp(k, "const")) {
            jsc_fail(c, "'allOf': two different 'const' values");
            goto fail;
        } else {
            jsc_fail(c, "'allOf' with two different '%.40s' is not supported", k);
            goto fail;
        }
    }
    if (merge_props(c, a, b, out)) goto fail;
    return out;
fail:
    json_decref(out);
    return NULL;
}

json_t *jsc_flatten(jsc_ctx *c, const json_t *s, int depth) {
    if (depth > JSC_MAX_DEPTH) { jsc_fail(c, "schema nested deeper than %d levels (or a '$ref' cycle)", JSC_MAX_DEPTH); return NULL; }
    if (json_is_true(s)) return json_object();
    if (json_is_false(s)) { jsc_fail(c, "schema false matches nothing"); return NULL; }
    if (!json_is_object(s)) { jsc_fail(c, "a schema must be an object or a boolean"); return NULL; }
    json_t *r = json_copy((json_t *)s);
    if (!r) { jsc_fail(c, "out of memory"); return NULL; }
    json_t *ref = json_incref(json_object_get(r, "$ref")), *all = json_incref(json_object_get(r, "allOf"));
    json_object_del(r, "$ref");
    json_object_del(r, "allOf");
    if (ref) {
        const json_t *t = json_is_string(ref) ? jsc_resolve(c->doc, json_string_value(ref)) : NULL;
        if (!t) { jsc_fail(c, "'$ref' %.80s points to nothing in this schema", json_is_string(ref) ? json_string_value(ref) : "(not a string)"); goto fail; }
        json_t *ft = jsc_flatten(c, t, depth + 1), *m = ft ? jsc_merge(c, ft, r) : NULL;
        json_decref(ft);
        if (!m) goto fail;
        json_decref(r);
        r = m;
    }
    if (all) {
        if (!json_is_array(all) || !json_array_size(all)) { jsc_fail(c, "'allOf' must be a non-empty array of schemas"); goto fail; }
        size_t i;
        const json_t *b;
        json_array_foreach(all, i, b) {
            json_t *fb = jsc_flatten(c, b, depth + 1), *m = fb ? jsc_merge(c, r, fb) : NULL;
            json_decref(fb);
            if (!m) goto fail;
            json_decref(r);
            r = m;
        }
    }
    json_decref(ref);
    json_decref(all);
    return r;
fail:
    json_decref(ref);
    json_decref(all);
    json_decref(r);
    return NULL;
}

/* ---- oneOf: can two nodes match one value? ---------------------------------------------- */

static int follow(const jsc_grammar *g, int n) {
    for (int hops = 0; n >= 0 && g->nodes[n].kind == SN_REF && hops < 64; hops++) n = g->nodes[n].nkids ? g->nodes[n].kids[0] : -1;
    return n;
}

/* JSON type bits a node's values can have (number and integer count as one) */
static unsigned node_types(const jsc_grammar *g, int n, int depth) {
    n = follow(g, n);
    if (n < 0 || depth > 16) return T_ALL;
    const sn_node *nd = &g->nodes[n];
    switch (nd->kind) {
    case SN_LIT: {
        unsigned t = 0;
        for (int i = 0; i < nd->nlit; i++) {
            char ch = nd->lit[i][0];
            t |= ch == '{' ? T_OBJ : ch == '[' ? T_ARR : ch == '"' ? T_STR : ch == 't' || ch == 'f' ? T_BOOL : ch == 'n' ? T_NULL : T_NUM;
        }
        return t;
    }
    case SN_STR: return T_STR;
    case SN_NUM: return T_NUM;
    case SN_ARR: return T_ARR;
    case SN_OBJ: return T_OBJ;
    case SN_UNION: {
        unsigned t = 0;
        for (int i = 0; i < nd->nkids; i++) t |= node_types(g, nd->kids[i], depth + 1);
        return t;
    }
    default: return T_ALL;
    }
}

static int find_prop(const sn_node *o, const char *name, uint32_t len) {
    for (int i = 0; i < o->nprops; i++) if (o->props[i].len == len && !memcmp(o->props[i].name, name, len)) return i;
    return -1;
}

static int lits_disjoint(const sn_node *a, const sn_node *b) {
    for (int i = 0; i < a->nlit; i++)
        for (int j = 0; j < b->nlit; j++)
            if (a->llen[i] == b->llen[j] && !memcmp(a->lit[i], b->lit[j], a->llen[i])) return 0;
    return 1;
}

/* Every value node a generates is outside what node b accepts (by JSON type, literal sets,
 * or object keys: a key a always writes that b forbids or holds to other literals, a key b
 * requires that a never writes). */
static int excl(const jsc_grammar *g, int a, int b, int depth) {
    a = follow(g, a);
    b = follow(g, b);
    if (a < 0 || b < 0 || depth > 16) return 0;
    const sn_node *x = &g->nodes[a], *y = &g->nodes[b];
    if (x->kind == SN_UNION) {
        for (int i = 0; i < x->nkids; i++) if (!excl(g, x->kids[i], b, depth + 1)) return 0;
        return 1;
    }
    unsigned ga = node_types(g, a, 0), gb = node_types(g, b, 0);
    if (y->loose && (ga & ~gb)) return 0;            /* b takes any value of those types */
    if (y->kind == SN_UNION) {
        for (int i = 0; i < y->nkids; i++) if (!excl(g, a, y->kids[i], depth + 1)) return 0;
        return 1;
    }
    if (!(ga & gb)) return 1;
    if (x->kind == SN_LIT && y->kind == SN_LIT) return lits_disjoint(x, y);
    if (x->kind != SN_OBJ || y->kind != SN_OBJ) return 0;
    for (int i = 0; i < x->nprops; i++) {
        if (!(x->required >> i & 1)) continue;
        int j = find_prop(y, x->props[i].name, x->props[i].len);
        if (j < 0) { if (y->addl < 0) return 1; continue; }
        if (y->props[j].node < 0) return 1;
        int pa = follow(g, x->props[i].node), pb = follow(g, y->props[j].node);
        if (pa >= 0 && pb >= 0 && g->nodes[pa].kind == SN_LIT && g->nodes[pb].kind == SN_LIT && lits_disjoint(&g->nodes[pa], &g->nodes[pb]))
            return 1;
    }
    for (int j = 0; j < y->nprops; j++) {
        if (!(y->required >> j & 1)) continue;
        int i = find_prop(x, y->props[j].name, y->props[j].len);
        if ((i < 0 && x->addl < 0) || (i >= 0 && x->props[i].node < 0)) return 1;
    }
    return 0;
}

int jsc_disjoint(const jsc_grammar *g, int a, int b) { return excl(g, a, b, 0) && excl(g, b, a, 0); }
