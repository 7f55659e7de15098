/* test_schema.c — the JSON Schema compiler and matcher (src/server/schema.h), its regex
 * subset (sregex.h) and the token mask (tokmask.h): every keyword accepts what it should
 * and refuses at the right byte, recursion through $ref, unsupported keywords and bad
 * schemas are errors naming the keyword, random walks over accepted bytes never reach a
 * dead end and end in JSON that jansson parses, and the trie mask equals feeding every
 * token alone. */
#include "../unit/check.h"
#include "server/schema.h"
#include "server/tokmask.h"
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static jsc_grammar *compile(const char *schema, char *err, size_t errlen) {
    json_error_t je;
    json_t *s = json_loads(schema, JSON_DECODE_ANY, &je);
    if (!s) { snprintf(err, errlen, "bad test JSON: %s", je.text); return NULL; }
    jsc_grammar *g = jsc_new();
    if (jsc_compile(g, s, "schema", err, errlen)) { jsc_free(g); g = NULL; }
    json_decref(s);
    return g;
}

/* 1 whole text accepted, 0 refused somewhere or incomplete; -1 schema error */
static int accepts(const char *schema, const char *text) {
    char err[512];
    jsc_grammar *g = compile(schema, err, sizeof err);
    if (!g) { printf("  schema error: %s\n", err); return -1; }
    sm_matcher m;
    sm_state s;
    int ok = !sm_init(&m, g, &s) && !sm_feed(&m, &s, text, strlen(text)) && sm_complete(&m, &s);
    sm_release(&m);
    jsc_free(g);
    return ok;
}

static int accepts_g(jsc_grammar *g, const char *text) {
    sm_matcher m;
    sm_state s;
    int ok = !sm_init(&m, g, &s) && !sm_feed(&m, &s, text, strlen(text)) && sm_complete(&m, &s);
    sm_release(&m);
    return ok;
}

/* bytes of text accepted before the first refusal (strlen when none) */
static size_t accepted_len(const char *schema, const char *text) {
    char err[512];
    jsc_grammar *g = compile(schema, err, sizeof err);
    if (!g) return (size_t)-1;
    sm_matcher m;
    sm_state s;
    size_t k = 0, n = strlen(text);
    sm_init(&m, g, &s);
    while (k < n && !sm_feed_byte(&m, &s, (unsigned char)text[k])) k++;
    sm_release(&m);
    jsc_free(g);
    return k;
}

#define YES(sch, txt) CHECK(accepts(sch, txt) == 1, "should accept %s under %s", txt, sch)
#define NO(sch, txt) CHECK(accepts(sch, txt) == 0, "should refuse %s under %s", txt, sch)

static void test_types(void) {
    YES("{\"type\":\"string\"}", "\"hi \\\"x\\\" \\u00e9\\ud83d\\ude00 é\"");
    NO("{\"type\":\"string\"}", "12");
    YES("{\"type\":\"integer\"}", "-42");
    NO("{\"type\":\"integer\"}", "4.5");
    NO("{\"type\":\"integer\"}", "012");
    YES("{\"type\":\"number\"}", "-0.125");
    NO("{\"type\":\"number\"}", "1e5");                     /* no exponents (documented subset) */
    YES("{\"type\":\"boolean\"}", "false");
    YES("{\"type\":\"null\"}", " null ");
    YES("{\"type\":[\"string\",\"null\"]}", "null");
    YES("{\"type\":[\"string\",\"null\"]}", "\"x\"");
    NO("{\"type\":[\"string\",\"null\"]}", "1");
    YES("{\"type\":[\"integer\",\"number\"]}", "1.5");
    YES("true", "{\"any\":[1,\"x\",null,{\"d\":[]}]}");
    YES("{}", "[true, false]");
    NO("{\"type\":\"string\"}", "\"\xEF\xBF\xBD\"");           /* U+FFFD: token texts use it for partial characters */
}

static void test_objects(void) {
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"ab\":{\"type\":\"string\"}},"
                    "\"required\":[\"a\"],\"additionalProperties\":false}";
    YES(s, "{\"a\":1}");
    YES(s, "{\"ab\":\"x\",\"a\":2}");                         /* any order */
    YES(s, "{ \"a\" : 1 , \"ab\" : \"\" }");
    NO(s, "{}");                                             /* a is required */
    NO(s, "{\"ab\":\"x\"}");
    NO(s, "{\"a\":1,\"a\":2}");                              /* no duplicates */
    NO(s, "{\"b\":1}");
    NO(s, "{\"a\":\"1\"}");
    CHECK(accepted_len(s, "{\"a\":1,\"c\"") == 8, "unknown key refused at its first byte: %zu", accepted_len(s, "{\"a\":1,\"c\""));
    CHECK(accepted_len(s, "{\"a\":1,\"ab\":\"\",") == 14, "no comma once every key is used: %zu", accepted_len(s, "{\"a\":1,\"ab\":\"\","));
    CHECK(accepted_len(s, "{\"ab\":\"x\"}") == 9, "the object cannot close before a required key: %zu", accepted_len(s, "{\"ab\":\"x\"}"));
    const char *o = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}";
    YES(o, "{\"zz\":true,\"a\":3}");
    NO(o, "{\"zz\":3}");
    NO(o, "{\"a\":true}");                                   /* a declared key takes its own schema */
    YES("{\"type\":\"object\"}", "{\"x\":[1,{\"y\":null}]}");
    YES("{\"properties\":{\"k\":false}}", "{\"j\":1}");
    NO("{\"properties\":{\"k\":false}}", "{\"k\":1}");
    YES("{\"type\":\"object\",\"required\":[\"n\"]}", "{\"n\":0}");   /* required but undeclared: an additional key */
    NO("{\"type\":\"object\",\"required\":[\"n\"]}", "{}");
}

static void test_enum_const(void) {
    const char *s = "{\"enum\":[\"red\",\"green\",1,10,null,{\"a\":[1]}]}";
    YES(s, "\"red\"");
    YES(s, "10");
    YES(s, "1");
    YES(s, "{\"a\":[1]}");
    NO(s, "\"blue\"");
    NO(s, "11");
    YES("{\"const\":\"x\"}", "\"x\"");
    NO("{\"const\":\"x\"}", "\"y\"");
    YES("{\"type\":\"string\",\"enum\":[\"a\",1]}", "\"a\"");
    NO("{\"type\":\"string\",\"enum\":[\"a\",1]}", "1");      /* filtered by the rest of the schema */
    YES("{\"type\":\"object\",\"properties\":{\"t\":{\"enum\":[1,2]}}}", "{\"t\":2}");
}

static void test_arrays(void) {
    const char *s = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}";
    YES(s, "[1,2]");
    YES(s, "[1, 2, 3]");
    NO(s, "[1]");
    NO(s, "[1,2,3,4]");
    NO(s, "[1,\"x\"]");
    CHECK(accepted_len(s, "[1]") == 2, "']' refused below minItems: %zu", accepted_len(s, "[1]"));
    const char *t = "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],\"items\":false}";
    YES(t, "[\"a\",true]");
    YES(t, "[\"a\"]");
    NO(t, "[\"a\",true,1]");
    NO(t, "[true]");
    YES("{\"type\":\"array\",\"prefixItems\":[{\"const\":0}],\"items\":{\"type\":\"string\"}}", "[0,\"x\",\"y\"]");
    YES("{\"type\":\"array\"}", "[]");
}

static void test_strings(void) {
    const char *s = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    YES(s, "\"ab\"");
    YES(s, "\"日本語\"");                                   /* code points, not bytes */
    YES(s, "\"\\n\\t\"");                                     /* escapes count once */
    NO(s, "\"a\"");
    NO(s, "\"abcd\"");
    const char *p = "{\"type\":\"string\",\"pattern\":\"^[A-Z][a-z]+-[0-9]{2,3}$\"}";
    YES(p, "\"Abc-12\"");
    YES(p, "\"Xy-999\"");
    NO(p, "\"abc-12\"");
    NO(p, "\"Abc-1\"");
    NO(p, "\"Abc-1234\"");
    YES("{\"type\":\"string\",\"pattern\":\"cat|dog\"}", "\"a dog here\"");   /* unanchored: a search */
    NO("{\"type\":\"string\",\"pattern\":\"cat|dog\"}", "\"a bird\"");
    YES("{\"type\":\"string\",\"pattern\":\"^a.c$\"}", "\"aéc\"");
    YES("{\"type\":\"string\",\"pattern\":\"^(\\\\d+|x)(\\\\.\\\\d+)?$\"}", "\"12.5\"");
    YES("{\"type\":\"string\",\"pattern\":\"^[^,]*$\",\"maxLength\":4}", "\"a b\"");
    NO("{\"type\":\"string\",\"pattern\":\"^[^,]*$\"}", "\"a,b\"");
    /* a pattern with length bounds: no prefix that cannot finish within them */
    const char *pl = "{\"type\":\"string\",\"pattern\":\"^a+b$\",\"maxLength\":3}";
    CHECK(accepted_len(pl, "\"aaa") == 3, "no third 'a' when 'b' must still fit: %zu", accepted_len(pl, "\"aaa"));
    YES(pl, "\"aab\"");
    /* lengths a pattern can only take in steps: ^(aa)+$ in 3..5 characters is "aaaa" */
    const char *pe = "{\"type\":\"string\",\"pattern\":\"^(aa)+$\",\"minLength\":3,\"maxLength\":5}";
    YES(pe, "\"aaaa\"");
    CHECK(accepted_len(pe, "\"aa\"") == 3, "no close at 2 characters, no dead end after them: %zu", accepted_len(pe, "\"aa\""));
    CHECK(accepted_len(pe, "\"aaaaa") == 5, "no fifth a (odd): %zu", accepted_len(pe, "\"aaaaa"));
    YES("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-28\"");
    NO("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-30\"");
    NO("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-13-01\"");
    YES("{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-05-31T23:59:59.5+02:00\"");
    YES("{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-05-31T00:00:00Z\"");
    NO("{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-05-31 00:00:00Z\"");
    YES("{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"");
    NO("{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-42661417400\"");
    YES("{\"type\":\"string\",\"format\":\"email\"}", "\"a.b+c@ex-ample.co\"");
    NO("{\"type\":\"string\",\"format\":\"email\"}", "\"a..b@example.com\"");
    NO("{\"type\":\"string\",\"format\":\"email\"}", "\"ab@example\"");
    NO("{\"type\":\"string\",\"pattern\":\"^x$\"}", "\"\\u0078\"");   /* \u escapes are not taken under a pattern */
}

static void test_numbers(void) {
    const char *s = "{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}";
    YES(s, "-5");
    YES(s, "0");
    YES(s, "120");
    NO(s, "121");
    NO(s, "-6");
    CHECK(accepted_len(s, "130") == 2, "no third digit past 120: %zu", accepted_len(s, "130"));
    CHECK(accepted_len(s, "-7") == 1, "'-7' refused at the 7: %zu", accepted_len(s, "-7"));
    CHECK(accepted_len(s, "200") == 2, "'20' cannot grow past 120: %zu", accepted_len(s, "200"));
    const char *x = "{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}";
    YES(x, "0.5");
    YES(x, "0.999");
    NO(x, "0");
    NO(x, "1");
    NO(x, "1.0");
    YES("{\"type\":\"integer\",\"minimum\":99,\"maximum\":99}", "99");
    YES("{\"type\":\"number\",\"minimum\":2.5,\"maximum\":2.5}", "2.5");
    NO("{\"type\":\"number\",\"minimum\":2.5,\"maximum\":2.5}", "2.50001");
    YES("{\"type\":\"integer\",\"exclusiveMinimum\":1.5}", "2");
    NO("{\"type\":\"integer\",\"exclusiveMinimum\":2}", "2");
}

static void test_combinators(void) {
    const char *a = "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},\"r\":{\"type\":\"number\"}},"
                    "\"required\":[\"kind\",\"r\"],\"additionalProperties\":false},"
                    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"rect\"},\"w\":{\"type\":\"number\"},\"h\":{\"type\":\"number\"}},"
                    "\"required\":[\"kind\",\"w\",\"h\"],\"additionalProperties\":false}]}";
    YES(a, "{\"kind\":\"circle\",\"r\":2}");
    YES(a, "{\"kind\":\"rect\",\"w\":2,\"h\":3}");
    YES(a, "{\"w\":2,\"kind\":\"rect\",\"h\":3}");
    NO(a, "{\"kind\":\"circle\",\"w\":2}");
    NO(a, "{\"kind\":\"rect\",\"r\":2}");
    char one[2048];
    snprintf(one, sizeof one, "{\"oneOf\":%s}", strchr(a, '['));
    one[strlen(one) - 1] = 0;                                   /* drop the extra } */
    YES(one, "{\"kind\":\"circle\",\"r\":2}");
    YES("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "7");
    /* tagged by a key one side requires and the other forbids */
    YES("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"a\"],\"additionalProperties\":false},"
        "{\"type\":\"object\",\"properties\":{\"b\":{}},\"required\":[\"b\"],\"additionalProperties\":false}]}", "{\"b\":1}");
    const char *all = "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0}},\"required\":[\"a\"]},"
                      "{\"properties\":{\"a\":{\"maximum\":5},\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}";
    YES(all, "{\"a\":3,\"b\":\"x\"}");
    NO(all, "{\"a\":6,\"b\":\"x\"}");
    NO(all, "{\"a\":3}");
    /* allOf with additionalProperties false in one branch: keys of the other are forbidden */
    const char *af = "{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},{\"properties\":{\"b\":{}}}]}";
    YES(af, "{\"a\":1}");
    NO(af, "{\"b\":1}");
    /* siblings of anyOf apply to each alternative */
    const char *sib = "{\"type\":\"object\",\"required\":[\"id\"],\"properties\":{\"id\":{\"type\":\"integer\"}},"
                      "\"anyOf\":[{\"required\":[\"x\"]},{\"required\":[\"y\"]}]}";
    YES(sib, "{\"id\":1,\"y\":2}");
    NO(sib, "{\"id\":1}");
    NO(sib, "{\"x\":1}");
}

static void test_refs(void) {
    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],"
                       "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    YES(tree, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[{\"v\":4,\"kids\":[]}]}]}");
    NO(tree, "{\"v\":1,\"kids\":[{\"w\":2}]}");
    const char *root = "{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},\"required\":[\"next\"]}";
    YES(root, "{\"next\":{\"next\":{\"next\":null}}}");
    NO(root, "{\"next\":{}}");
    YES("{\"definitions\":{\"s\":{\"type\":\"string\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/s\"}}", "[\"a\"]");
    /* $ref with sibling constraints: both apply */
    YES("{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/n\",\"minimum\":3}", "4");
    NO("{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/n\",\"minimum\":3}", "2");
}

static void expect_error(const char *schema, const char *needle) {
    char err[512] = "";
    jsc_grammar *g = compile(schema, err, sizeof err);
    CHECK(!g, "schema %s compiled; wanted an error with '%s'", schema, needle);
    jsc_free(g);
    if (!g) {
        CHECK(strstr(err, needle) != NULL, "error for %s: '%s' lacks '%s'", schema, err, needle);
        CHECK(!strchr(err, '\n'), "error is one line: %s", err);
    }
}

static void test_errors(void) {
    expect_error("{\"type\":\"string\",\"not\":{}}", "unsupported keyword 'not'");
    expect_error("{\"properties\":{\"a\":{\"multipleOf\":2}}}", "unsupported keyword 'multipleOf' at schema/properties/a");
    expect_error("{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties'");
    expect_error("{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems'");
    expect_error("{\"if\":{},\"then\":{}}", "unsupported keyword 'if'");
    expect_error("{\"type\":\"strin\"}", "'type'");
    expect_error("{\"type\":\"string\",\"format\":\"ipv4\"}", "'format' 'ipv4'");
    expect_error("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround");
    expect_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences");
    expect_error("{\"type\":\"string\",\"pattern\":\"a^b\"}", "anchor");
    expect_error("{\"type\":\"string\",\"pattern\":\"[a\"}", "unterminated");
    expect_error("{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "'minLength'");
    expect_error("{\"type\":\"string\",\"pattern\":\"^(aaa)+$\",\"minLength\":4,\"maxLength\":5}", "no string of 4..5 characters");
    expect_error("{\"type\":\"integer\",\"minimum\":5,\"maximum\":2}", "'minimum'");
    expect_error("{\"$ref\":\"#/$defs/missing\"}", "points to nothing");
    expect_error("{\"$ref\":\"http://x/y.json\"}", "points to nothing");
    expect_error("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "refers to itself");
    expect_error("{\"oneOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"required\":[\"a\"]}]}", "'oneOf' alternatives 0 and 1");
    /* without "type" a schema takes every value its keywords do not constrain: these overlap */
    expect_error("{\"oneOf\":[{\"exclusiveMaximum\":7,\"required\":[]},{\"items\":false}]}", "'oneOf' alternatives 0 and 1");
    expect_error("{\"oneOf\":[{\"type\":\"string\"},{\"minimum\":3}]}", "'oneOf' alternatives 0 and 1");
    expect_error("{\"enum\":[1,2],\"type\":\"string\"}", "no value of 'enum'");
    expect_error("{\"type\":\"object\",\"required\":[\"a\"],\"additionalProperties\":false}", "'required' names 'a'");
    expect_error("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "nothing in common");
    expect_error("{\"type\":\"array\",\"items\":[{}]}", "'prefixItems'");
    expect_error("[1]", "must be an object or a boolean");
    expect_error("false", "matches nothing");
    /* hostile patterns: an automaton that explodes, a repeat of a repeat */
    expect_error("{\"type\":\"string\",\"pattern\":\"(a|b|c|d|e|f|g|h)*a(a|b|c|d|e|f|g|h){12}\"}", "too complex");
    expect_error("{\"type\":\"string\",\"pattern\":\"((a{1000}){1000})\"}", "too large");
    /* hostile depth: nested 200 levels */
    char deep[4096] = "";
    for (int i = 0; i < 200; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 200; i++) strcat(deep, "}");
    expect_error(deep, "nested deeper than 64");
}

/* Random walks: at each step pick one of the bytes the matcher takes; it must always have
 * one (or be complete), and a complete text must be JSON. */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static unsigned rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (unsigned)(rng >> 11); }

static void walk(const char *schema, int runs) {
    char err[512];
    jsc_grammar *g = compile(schema, err, sizeof err);
    CHECK(g != NULL, "compile %s: %s", schema, err);
    if (!g) return;
    int complete = 0;
    for (int r = 0; r < runs; r++) {
        sm_matcher m;
        sm_state s;
        char text[1200];
        int n = 0;
        sm_init(&m, g, &s);
        for (;;) {
            if (sm_complete(&m, &s) && (n > 900 || rnd() % 4 == 0)) {
                complete++;
                json_t *j = json_loadb(text, (size_t)n, JSON_DECODE_ANY, NULL);
                CHECK(j != NULL, "walk gave no JSON: %.*s", n, text);
                json_decref(j);
                break;
            }
            if (n >= 1100) break;
            unsigned char ok[256];
            int k = 0;
            for (int c = 0; c < 256; c++) {
                sm_state t;
                uint32_t mk = sm_mark(&m);
                if (!sm_next(&m, &s, (unsigned char)c, &t)) ok[k++] = (unsigned char)c;
                sm_reset(&m, mk);
            }
            if (!k) { CHECK(sm_complete(&m, &s), "dead end after %.*s under %s", n, text, schema); break; }
            /* prefer structure over long strings so walks finish */
            unsigned char c = ok[rnd() % (unsigned)k];
            for (int q = 0; q < k; q++) if (strchr("\"]},", ok[q]) && rnd() % 3 == 0) c = ok[q];
            text[n++] = (char)c;
            sm_feed_byte(&m, &s, c);
        }
        sm_release(&m);
    }
    CHECK(complete > runs / 4, "only %d of %d walks completed under %s", complete, runs, schema);
    jsc_free(g);
}

static void test_no_dead_ends(void) {
    walk("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":250},\"b\":{\"type\":\"string\",\"pattern\":\"^[a-c]{1,3}x?$\"},"
         "\"c\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":2}},\"required\":[\"a\",\"b\",\"c\"],\"additionalProperties\":false}", 60);
    walk("{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}", 60);
    walk("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"a\"},\"x\":{\"type\":\"number\",\"minimum\":0.5,\"maximum\":0.75}},\"required\":[\"t\",\"x\"],\"additionalProperties\":false},"
         "{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"b\"},\"y\":{\"type\":\"string\",\"format\":\"date\"}},\"required\":[\"t\",\"y\"],\"additionalProperties\":false}]}", 60);
    walk("{\"type\":\"string\",\"minLength\":3,\"maxLength\":5,\"pattern\":\"^[a-z]*[0-9]?$\"}", 60);
    walk("{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"^(ab|é)+$\",\"minLength\":3,\"maxLength\":6},\"maxItems\":3}", 60);
    walk("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"at\":{\"type\":\"string\",\"format\":\"date-time\"},\"mail\":{\"type\":\"string\",\"format\":\"email\"}},\"required\":[\"id\",\"at\",\"mail\"],\"additionalProperties\":false}", 40);
    walk("{\"type\":\"array\",\"prefixItems\":[{\"enum\":[\"x\",\"xy\",12,{\"z\":1}]},{\"type\":\"null\"}],\"minItems\":2,\"items\":false}", 40);
}

/* tm_mask by token id (ranks mapped back); tokens without text stay 0 */
static int mask_ids(const tm_trie *t, sm_matcher *m, const sm_state *s, uint8_t *by_id, int n) {
    uint8_t ok[64];
    int nr;
    const int *order = tm_order(t, &nr);
    int cnt = tm_mask(t, m, s, ok);
    memset(by_id, 0, (size_t)n);
    for (int q = 0; q < nr; q++) by_id[order[q]] = ok[q];
    return cnt;
}

/* The trie mask equals feeding each token alone. */
static void test_mask(void) {
    static const char *toks[] = { "{", "}", "\"", "\"a", "\":", "a", "ab", "abc", ":", ",", " ", "1", "12", "-", "true", "\"}",
                                  "é", "\xC3", "\xA9", "\xEF\xBF\xBD", "\\n", "\\", "\"name", "name", "\":\"", "x\"", "[", "]", "",
                                  "\n", "  ", "2024", "-01", "null", "<", "<t", "<tc>", "c>", "tc", "x<tc>{", "</tc>", "hello" };
    int n = (int)(sizeof toks / sizeof *toks);
    char bytes[512];
    uint32_t off[64];
    off[0] = 0;
    for (int i = 0; i < n; i++) { memcpy(bytes + off[i], toks[i], strlen(toks[i])); off[i + 1] = off[i] + (uint32_t)strlen(toks[i]); }
    tm_trie *t = NULL;
    CHECK(tm_build(bytes, off, n, '<', &t) == 0, "tm_build");
    if (!t) return;
    const char *schemas[] = { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":4},\"name\":{\"type\":\"integer\"}}}",
                              "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"date\"}}", "{}",
                              "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"^[a-z]*(x|-1)$\",\"maxLength\":5}}}" };
    const char *texts[] = { "", "{", "{\"a\":\"", "{\"a\":\"ab", "{\"name\":1", "[", "[\"20", "[\"2024-0", "{\"a\":\"é", "{\"a\":\"a" };
    int cases = 0;
    for (int si = 0; si < 4; si++) {
        char err[256];
        jsc_grammar *g = compile(schemas[si], err, sizeof err);
        CHECK(g != NULL, "%s", err);
        if (!g) continue;
        for (size_t ti = 0; ti < sizeof texts / sizeof *texts; ti++) {
            sm_matcher m;
            sm_state s;
            sm_init(&m, g, &s);
            if (sm_feed(&m, &s, texts[ti], strlen(texts[ti]))) { sm_release(&m); continue; }
            uint8_t allowed[64];
            uint32_t mk = sm_mark(&m);
            int cnt = mask_ids(t, &m, &s, allowed, n);
            CHECK(sm_mark(&m) == mk, "the arena is back after the mask");
            int want = 0;
            for (int i = 0; i < n; i++) {
                sm_state c = s;
                int ok = off[i + 1] > off[i] && !sm_feed(&m, &c, bytes + off[i], off[i + 1] - off[i]);
                sm_reset(&m, mk);
                want += ok;
                CHECK(allowed[i] == ok, "schema %d after '%s': token '%s' mask %d, alone %d", si, texts[ti], toks[i], allowed[i], ok);
            }
            CHECK(cnt == want, "count %d vs %d", cnt, want);
            cases++;
            sm_release(&m);
        }
        jsc_free(g);
    }
    /* free text with a marker: tool calls under tool_choice auto */
    {
        char err[256];
        jsc_grammar *g = compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":false}", err, sizeof err);
        int seq[2] = { g->root, jsc_literal(g, "</tc>", 5) }, call = jsc_group(g, SN_SEQ, seq, 2);
        g->root = jsc_text(g, "<tc>", 4, call);
        const char *tt[] = { "", "hel", "x <t", "<tc>", "<tc>{\"a\"", "<tc>{\"a\":1}</t", "<tc>{}</tc> and <<t" };
        for (size_t ti = 0; ti < sizeof tt / sizeof *tt; ti++) {
            sm_matcher m;
            sm_state s;
            sm_init(&m, g, &s);
            CHECK(!sm_feed(&m, &s, tt[ti], strlen(tt[ti])), "text '%s' taken", tt[ti]);
            uint8_t allowed[64];
            uint32_t mk = sm_mark(&m);
            mask_ids(t, &m, &s, allowed, n);
            for (int i = 0; i < n; i++) {
                sm_state c = s;
                int ok = off[i + 1] > off[i] && !sm_feed(&m, &c, bytes + off[i], off[i + 1] - off[i]);
                sm_reset(&m, mk);
                CHECK(allowed[i] == ok, "text '%s': token '%s' mask %d, alone %d", tt[ti], toks[i], allowed[i], ok);
            }
            cases++;
            sm_release(&m);
        }
        CHECK(accepts_g(g, "hi <tc>{\"a\":1}</tc> bye <tc>{}</tc>") == 1, "text with two calls");
        CHECK(accepts_g(g, "hi <tc>{\"b\":1}") == 0, "a call's arguments follow the schema");
        CHECK(accepts_g(g, "hi <tc>{\"a\":1}") == 0, "a call must close before the end");
        CHECK(accepts_g(g, "<t<tc>{}</tc>") == 1, "a marker after a false start");
        jsc_free(g);
    }
    CHECK(cases >= 19, "%d cases ran", cases);
    tm_free(t);
}

int main(void) {
    TEST_RUN(test_types);
    TEST_RUN(test_objects);
    TEST_RUN(test_enum_const);
    TEST_RUN(test_arrays);
    TEST_RUN(test_strings);
    TEST_RUN(test_numbers);
    TEST_RUN(test_combinators);
    TEST_RUN(test_refs);
    TEST_RUN(test_errors);
    TEST_RUN(test_no_dead_ends);
    TEST_RUN(test_mask);
    TEST_EXIT();
}
