/* test_template.c — chat templates against transformers, and the interpreter's own cases.
 *
 * Reference: tests/text/tpl_ref/<model>.json, made by tools/oracle/make_tpl_fixtures.py with
 * transformers' apply_chat_template(tokenize=False) for every conversation in
 * tests/text/conversations/. Every case the reference renders must come out byte-identical;
 * every case it refuses must be refused here too, and a template's own raise_exception
 * message must match. Templates come from the real tokenizer_config.json files in
 * .cache/tokenizers/<model>/ (scripts/fetch-tokenizers.sh); for models whose npm package
 * ships no chat template (llama2, gptoss) the official template is committed next to the
 * reference as tests/text/tpl_ref/<model>.chat_template.jinja. The reference's probe
 * template checks that the variables (special tokens, tools, documents, ...) are the ones
 * transformers passes. strftime_now is pinned to the reference's instant.
 *
 * Then unit cases of the interpreter: whitespace control, loops, scoping, namespaces,
 * macros and caller, filters, tests, slicing, Python printing, and hostile templates (deep
 * nesting, runaway recursion, huge output, endless loops) that must fail cleanly.
 *
 * Run from the repository root (tests/run.sh does). `test_template --ref DIR` reads the
 * reference from another folder (a local jinja2 emulation while iterating). */
#include "check.h"
#include "io/json.h"
#include "text/template.h"
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *REF_DIR = "tests/text/tpl_ref";
static const char *TPL_DIR = "tests/text/tpl_ref"; /* committed templates (llama2, gptoss) */
static const char *CONV_DIR = "tests/text/conversations";
static const char *TOK_DIR = ".cache/tokenizers";
static const long long REF_NOW = 1749995130; /* 2025-06-15 13:45:30 UTC, as the oracle pins it */

/* ------------------------------------------------------------------ helpers */

static char *render_src(const char *src, const char *vars_json, int *rc, char *err, size_t errlen) {
    tpl_t *t;
    char *out = NULL;
    size_t len;
    *rc = tpl_compile(src, strlen(src), "unit", &t, err, errlen);
    if (*rc) return NULL;
    json_t *vars = NULL;
    if (vars_json) {
        vars = cj_parse(vars_json, strlen(vars_json), "vars", err, errlen);
        if (!vars) { tpl_free(t); *rc = -9; return NULL; }
    }
    tpl_opts o = {.now = REF_NOW, .max_steps = 5000000}; /* a tenth of the default: hostile cases end sooner */
    *rc = tpl_render(t, vars, &o, &out, &len, err, errlen);
    json_decref(vars);
    tpl_free(t);
    return out;
}

/* EXPECT(template, vars-json or NULL, expected output) */
#define EXPECT(src, vars, want) do { \
    int rc_; char err_[1024] = ""; \
    char *got_ = render_src((src), (vars), &rc_, err_, sizeof err_); \
    CHECK(rc_ == 0 && got_ && !strcmp(got_, (want)), "template %s: want \"%s\", got %s%s%s (err: %s)", \
          #src, (want), got_ ? "\"" : "", got_ ? got_ : "nothing", got_ ? "\"" : "", err_); \
    free(got_); } while (0)

/* EXPECT_ERR(template, vars-json or NULL, substring of the error) */
#define EXPECT_ERR(src, vars, needle) do { \
    int rc_; char err_[1024] = ""; \
    char *got_ = render_src((src), (vars), &rc_, err_, sizeof err_); \
    CHECK(rc_ != 0, "template %s: expected an error, rendered \"%s\"", #src, got_ ? got_ : ""); \
    if (rc_ != 0) CHECK_HAS(err_, (needle)); \
    free(got_); } while (0)

static int exists(const char *p) { struct stat st; return stat(p, &st) == 0; }

/* A model folder for tpl_chat_load: the real tokenizer_config.json, plus the committed
 * chat_template.jinja when the package has none. Returns 0 and the folder in dir. */
static int make_model_dir(const char *model, char *dir, size_t n, char *why, size_t whylen) {
    char cfg[512], jinja[512], abs_cfg[2048], abs_jinja[2048], cwd[512];
    snprintf(cfg, sizeof cfg, "%s/%s/tokenizer_config.json", TOK_DIR, model);
    snprintf(jinja, sizeof jinja, "%s/%s.chat_template.jinja", TPL_DIR, model);
    if (!exists(cfg)) {
        snprintf(why, whylen, "%s is missing: run scripts/fetch-tokenizers.sh first", cfg);
        return -1;
    }
    if (!getcwd(cwd, sizeof cwd)) { snprintf(why, whylen, "getcwd failed"); return -1; }
    snprintf(dir, n, "/tmp/cinfer_tpl_XXXXXX");
    if (!mkdtemp(dir)) { snprintf(why, whylen, "mkdtemp failed"); return -1; }
    char link[1200];
    snprintf(abs_cfg, sizeof abs_cfg, "%s/%s", cwd, cfg);
    snprintf(link, sizeof link, "%s/tokenizer_config.json", dir);
    if (symlink(abs_cfg, link)) { snprintf(why, whylen, "symlink failed"); return -1; }
    char pkg_jinja[512];
    snprintf(pkg_jinja, sizeof pkg_jinja, "%s/%s/chat_template.jinja", TOK_DIR, model);
    const char *tj = exists(pkg_jinja) ? pkg_jinja : exists(jinja) ? jinja : NULL;
    if (tj) {
        snprintf(abs_jinja, sizeof abs_jinja, "%s/%s", cwd, tj);
        snprintf(link, sizeof link, "%s/chat_template.jinja", dir);
        if (symlink(abs_jinja, link)) { snprintf(why, whylen, "symlink failed"); return -1; }
    }
    return 0;
}

static void remove_model_dir(const char *dir) {
    char p[1100];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir); unlink(p);
    snprintf(p, sizeof p, "%s/chat_template.jinja", dir); unlink(p);
    rmdir(dir);
}

static void show_diff(const char *want, size_t wl, const char *got, size_t gl, char *buf, size_t n) {
    size_t i = 0;
    while (i < wl && i < gl && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    snprintf(buf, n, "first difference at byte %zu (want %zu bytes, got %zu): want ...%.*s... got ...%.*s...",
             i, wl, gl, (int)((wl - from) < 100 ? wl - from : 100), want + from,
             (int)((gl - from) < 100 ? gl - from : 100), got + from);
}

/* ------------------------------------------------------------------ against transformers */

static int check_model(const char *model) {
    char path[600], dir[600], why[600], err[2048];
    snprintf(path, sizeof path, "%s/%s.json", REF_DIR, model);
    json_t *ref = cj_load_file(path, err, sizeof err);
    CHECK(ref != NULL, "%s: %s (make it with tools/oracle/make_tpl_fixtures.py)", model, err);
    if (!ref) return 0;
    if (make_model_dir(model, dir, sizeof dir, why, sizeof why)) { CHECK(0, "%s", why); json_decref(ref); return 0; }
    tpl_chat *ch;
    int rc = tpl_chat_load(dir, &ch, err, sizeof err);
    CHECK(rc == 0, "%s: %s", model, err);
    if (rc) { remove_model_dir(dir); json_decref(ref); return 0; }
    tpl_opts o = {.now = REF_NOW};
    const json_t *cases = json_object_get(ref, "cases");
    int rendered = 0, refused = 0;

    DIR *dd = opendir(CONV_DIR);
    CHECK(dd != NULL, "cannot open %s", CONV_DIR);
    struct dirent *de;
    while (dd && (de = readdir(dd))) {
        size_t nl = strlen(de->d_name);
        if (nl < 6 || strcmp(de->d_name + nl - 5, ".json")) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(nl - 5), de->d_name);
        const json_t *want = json_object_get(cases, name);
        CHECK(want != NULL, "%s: no reference for conversation %s (re-run the oracle)", model, name);
        if (!want) continue;
        char cpath[600];
        snprintf(cpath, sizeof cpath, "%s/%s", CONV_DIR, de->d_name);
        json_t *req = cj_load_file(cpath, err, sizeof err);
        CHECK(req != NULL, "%s", err);
        if (!req) continue;
        char *out = NULL;
        size_t len = 0;
        err[0] = 0;
        rc = tpl_chat_render(ch, req, &o, &out, &len, err, sizeof err);
        const json_t *text = json_object_get(want, "text");
        if (text) {
            rendered++;
            CHECK(rc == 0, "%s/%s: transformers renders it, we fail: %s", model, name, err);
            if (rc == 0 && (len != json_string_length(text) || memcmp(out, json_string_value(text), len))) {
                char d[600];
                show_diff(json_string_value(text), json_string_length(text), out, len, d, sizeof d);
                CHECK(0, "%s/%s: %s", model, name, d);
            }
        } else {
            refused++;
            const char *etype = cj_get_str(want, "error_type");
            const char *emsg = cj_get_str(want, "error");
            CHECK(rc != 0, "%s/%s: transformers refuses it (%s: %s), we rendered %zu bytes", model, name,
                  etype ? etype : "?", emsg ? emsg : "?", len);
            if (rc != 0 && etype && !strcmp(etype, "TemplateError") && emsg) {
                CHECK(rc == TPL_RAISED, "%s/%s: expected the template's own refusal, got: %s", model, name, err);
                CHECK_HAS(err, emsg);
            }
            if (rc != 0 && etype && !strcmp(etype, "ValueError") && emsg) CHECK_HAS(err, emsg); /* transformers' own checks */
        }
        free(out);
        json_decref(req);
    }
    if (dd) closedir(dd);

    /* the probe: the variables the template sees, as transformers hands them over */
    const char *probe_src = cj_get_str(ref, "probe_template");
    const json_t *probe = json_object_get(ref, "probe");
    const json_t *probe_t = json_object_get(ref, "probe_with_tools");
    if (probe_src && probe) {
        tpl_t *pt;
        rc = tpl_compile(probe_src, strlen(probe_src), "probe", &pt, err, sizeof err);
        CHECK(rc == 0, "probe: %s", err);
        const char *reqs[2] = {"{\"messages\": [{\"role\": \"user\", \"content\": \"probe\"}], \"add_generation_prompt\": true}",
                               "{\"messages\": [{\"role\": \"user\", \"content\": \"probe\"}], \"add_generation_prompt\": true,"
                               " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}"};
        const json_t *wants[2] = {probe, probe_t};
        for (int k = 0; rc == 0 && k < 2; k++) {
            const json_t *pw = wants[k] ? json_object_get(wants[k], "text") : NULL;
            if (!pw) continue;
            json_t *req = cj_parse(reqs[k], strlen(reqs[k]), "probe request", err, sizeof err);
            char *out = NULL;
            size_t len = 0;
            int r2 = tpl_chat_render_with(ch, pt, req, &o, &out, &len, err, sizeof err);
            CHECK(r2 == 0 && len == json_string_length(pw) && !memcmp(out, json_string_value(pw), len),
                  "%s probe %d: want \"%s\", got \"%s\" %s", model, k, json_string_value(pw), out ? out : "", r2 ? err : "");
            free(out);
            json_decref(req);
        }
        if (rc == 0) tpl_free(pt);
    }
    CHECK(rendered >= 8, "%s: only %d conversations render (want at least 8)", model, rendered);
    tpl_chat_free(ch);
    remove_model_dir(dir);
    json_decref(ref);
    return rendered + refused;
}

static void test_deepseek_v3(void) { check_model("deepseek_v3"); }
static void test_qwen3(void) { check_model("qwen3"); }
static void test_llama3(void) { check_model("llama3"); }
static void test_llama2(void) { check_model("llama2"); }
static void test_gemma3(void) { check_model("gemma3"); }
static void test_gptoss(void) { check_model("gptoss"); }

/* ------------------------------------------------------------------ interpreter units */

static void test_whitespace_control(void) {
    EXPECT("a  {%- if true %} b {% endif -%}  c", NULL, "a b c");
    EXPECT("a\n  {% if true %}\n  x\n  {% endif %}\n  {# c #}\nb", NULL, "a\n  x\nb");        /* trim + lstrip */
    EXPECT("  {% if 1 %}A{% endif %}  {% if 1 %}B{% endif %}\n", NULL, "A  B");             /* lstrip only at line start */
    EXPECT("{% if 1 %}\n  {% if 1 %}C{% endif %}{% endif %}", NULL, "C");
    EXPECT("{{ 'a' }}\n  {% if 1 %}D{% endif %}", NULL, "a\nD");
    EXPECT("x {{- ' y ' -}} z", NULL, "x y z");
    EXPECT("  {%+ if 1 %}k{% endif %}", NULL, "  k");                                        /* + keeps the indent */
    EXPECT("{% if 1 +%}\nk{% endif %}", NULL, "\nk");                                         /* + keeps the newline */
    EXPECT("{% raw %}{{ x }}{% endraw %}|{%- raw -%}  {{y}}  {%- endraw -%}  |", NULL, "{{ x }}|{{y}}|");
    EXPECT("{#- c -#}  x  {#- c #} y", NULL, "x y");
    EXPECT("a\r\nb\rc\n", NULL, "a\nb\nc");                                                   /* newlines normalised, last dropped */
    EXPECT("{{ {'a': {'b': 1}}['a']['b'] }}", NULL, "1");                                    /* }} inside brackets is not the end */
}

static void test_loops(void) {
    EXPECT("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
           "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", NULL,
           "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
    EXPECT("{% for x in [1,2,3] %}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a','b') }}{% endfor %}", NULL, "2a13b2a");
    EXPECT("{% for x in [] %}a{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT("{% for x in u %}a{% else %}e{% endfor %}", NULL, "e");                            /* undefined iterates empty */
    EXPECT("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
           "{\"d\": {\"z\": 1, \"a\": 2}}", "z=1;a=2;za");                                              /* insertion order */
    EXPECT("{% for x in [1,2,3,4,5] if x is odd %}{{ x }}/{{ loop.index }}/{{ loop.length }} {% endfor %}", NULL, "1/1/3 3/2/3 5/3/3 ");
    EXPECT("{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% if x == 3 %}{% break %}{% endif %}{% endfor %}", NULL, "13");
    EXPECT("{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ loop.depth }}{% endfor %}{{ loop.index }}{% endfor %}", NULL, "1121111212");
    EXPECT("{% for c in 'héllo' %}[{{ c }}]{% endfor %}", NULL, "[h][é][l][l][o]");
    /* Jinja runs for-else unless an iteration reached the end of the body */
    EXPECT("{% for i in [1, 2] %}{{ i }}{% continue %}{% else %}E{% endfor %}", NULL, "12E");
    EXPECT("{% for i in [1, 2] %}{{ i }}{% break %}{% else %}E{% endfor %}", NULL, "1E");
    EXPECT("{% for i in [1, 2] %}{{ i }}{% if i == 1 %}{% continue %}{% endif %}{% else %}E{% endfor %}", NULL, "12");
    EXPECT_ERR("{% for x in none %}{% endfor %}", NULL, "'NoneType' object is not iterable");
}

static void test_scoping(void) {
    EXPECT("{% set x = 5 %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}[{{ x }}]{% endfor %}{{ x }}", NULL, "[5][1][5][2]5");
    EXPECT("{% if true %}{% set z = 1 %}{% endif %}{{ z }}", NULL, "1");
    EXPECT("{% set y = 3 %}{% macro m() %}{{ y }}{% endmacro %}{% set y = 4 %}{{ m() }}", NULL, "4");
    EXPECT("{% macro m() %}{% if y is not defined %}{% set y = 'd' %}{% endif %}{{ y }}{% endmacro %}{{ m() }}|{{ y }}", NULL, "d|");
    EXPECT("{% with a = 1 %}{{ a }}{% endwith %}[{{ a }}]", NULL, "1[]");
    /* Jinja's frames: a name a loop body sets later is a local that nested frames see as
       undefined until set, unless the body read it first or an outer frame knows it */
    EXPECT("{% for i in [1] %}[{{ n }}]{% set n = 2 %}{% endfor %}", "{\"n\": 7}", "[7]");
    EXPECT("{% for i in [1] %}{% for j in [1] %}[{{ n }}]{% endfor %}{% set n = 2 %}{% endfor %}", "{\"n\": 7}", "[]");
    EXPECT("{% for i in [1] %}{% for j in [1] %}[{{ n }}]{% endfor %}{% set n = -n %}{% endfor %}", "{\"n\": 7}", "[7]");
    EXPECT("{% for i in [1] %}{% for j in [1] %}[{{ n }}]{% endfor %}{% set n = 2 %}{% endfor %}{% if false %}{{ n }}{% endif %}",
           "{\"n\": 7}", "[7]");
    EXPECT("{% for i in [1] %}{% if false %}{% set n = 1 %}{% endif %}{% for j in [1] %}[{{ n }}]{% endfor %}{% endfor %}", "{\"n\": 7}", "[7]");
    EXPECT("{% for j in [1] %}[{{ n }}]{% endfor %}{% set n = 2 %}", "{\"n\": 7}", "[]");
    EXPECT("{% macro m() %}[{{ n }}]{% endmacro %}{{ m() }}{% set n = 2 %}{{ m() }}", "{\"n\": 7}", "[][2]");
    EXPECT("{% for i in [] %}{% else %}{% set x = 1 %}{{ x }}{% endfor %}[{{ x }}]", NULL, "1[]");     /* else is a frame */
    EXPECT("{% for i in [1] %}{% set x = 2 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 3 %}{{ m() }}{% endfor %}", NULL, "3");
    EXPECT("{% macro outer(a) %}{% macro inner() %}{{ a }}{% endmacro %}{{ inner() }}{% endmacro %}{{ outer(7) }}", NULL, "7");
    EXPECT("{% macro m(a, b=(b,)) %}{{ b }}{% endmacro %}{{ m(1) }}", "{\"b\": 5}", "(Undefined,)"); /* defaults see params */
}

static void test_namespace(void) {
    EXPECT("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }}|{{ ns.s }}", NULL, "6|0123");
    EXPECT("{% set ns = namespace(a=1) %}{{ ns }}|{{ ns.b }}|{{ ns['a'] }}", NULL, "<Namespace {'a': 1}>||1");
    EXPECT_ERR("{% set x = 1 %}{% set x.y = 2 %}", NULL, "non-namespace");
    EXPECT("{% set ns = namespace() %}{% set ns.me = ns %}ok", NULL, "ok");                   /* a cycle, freed cleanly */
}

static void test_macros(void) {
    EXPECT("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(b=5, a=3) }}|{{ m() }}", NULL, "12|35|2");
    EXPECT_ERR("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, "takes not more than 1 argument");
    EXPECT("{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}in{% endcall %}", NULL, "[in]");
    EXPECT("{% macro n(x) %}{{ caller(x * 2) }}{% endmacro %}{% call(y) n(4) %}y={{ y }}{% endcall %}", NULL, "y=8");
    EXPECT("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", NULL, "54321");
    EXPECT("{% macro t() %}abc{% endmacro %}{{ t()|length }}{% set s = t() %}{{ s is string }}", NULL, "3True");
}

static void test_filters(void) {
    EXPECT("{{ '  a  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ none|trim }}|{{ u|trim }}|", NULL, "a|a|None||");
    EXPECT("{{ d|tojson }}", "{\"d\": {\"a\": [1, 2.5, \"\\u00e9\\\"\\\\\\n\\u0001\"], \"b\": {}, \"c\": null, \"t\": true}}",
           "{\"a\": [1, 2.5, \"é\\\"\\\\\\n\\u0001\"], \"b\": {}, \"c\": null, \"t\": true}");
    EXPECT("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}", NULL, "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    EXPECT("{{ 'é😀'|tojson(true) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }}", NULL,
           "\"\\u00e9\\ud83d\\ude00\"|{\"a\":2,\"b\":1}");
    EXPECT("{{ [1, 2]|length }}{{ 'héllo'|length }}{{ {'a': 1}|count }}{{ u|length }}", NULL, "2510");
    EXPECT("{{ [1, 'a', none]|join(', ') }}|{{ [{'n': 'x'}, {'n': 'y'}]|join('-', attribute='n') }}", NULL, "1, a, None|x-y");
    EXPECT("{{ 'aBc'|upper }}{{ 'AbC'|lower }}{{ 'straße'|upper }}{{ 'hello wORLD'|title }}{{ 'aBC'|capitalize }}", NULL, "ABCabcSTRASSEHello WorldAbc");
    EXPECT("{{ 'a-b-c'|replace('-', '+') }}{{ 'a-b-c'|replace('-', '', 1) }}", NULL, "a+b+cab-c");
    EXPECT("{{ [3, 1, 2]|first }}{{ [3, 1, 2]|last }}{{ []|first is defined }}", NULL, "32False");
    EXPECT("{{ u|default('d') }}{{ none|default('d') }}{{ ''|default('d', true) }}", NULL, "dNoned");
    EXPECT("{{ 'ab'|list }}{{ {'a': 1}|items|list }}{{ 42|string ~ '!' }}{{ '3.7'|int }}{{ 'x'|int(7) }}", NULL, "['a', 'b'][('a', 1)]42!37");
    EXPECT("{{ [{'t': 'x', 'v': 1}, {'t': 'y', 'v': 2}]|selectattr('t', 'equalto', 'y')|map(attribute='v')|list }}", NULL, "[2]");
    EXPECT("{{ [{'t': 1}, {'u': 2}]|rejectattr('t', 'defined')|list }}{{ ['a', 'b']|map('upper')|join }}", NULL, "[{'u': 2}]AB");
    EXPECT("{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'a']|sort }}{{ ['b', 'A', 'a']|unique|list }}{{ {'b': 1, 'a': 2}|dictsort }}", NULL,
           "[1, 2, 3]['A', 'a', 'b']['b', 'A'][('a', 2), ('b', 1)]");
    EXPECT("{{ [{'x': 2, 'i': 0}, {'x': 1, 'i': 1}, {'x': 2, 'i': 2}]|sort(attribute='x', reverse=true)|map(attribute='i')|list }}", NULL,
           "[0, 2, 1]"); /* stable, also reversed */
    EXPECT("{{ 2.567|round(2) }}{{ 2.5|round }}{{ -3|abs }}{{ [1, 2, 3]|sum }}{{ [1, 2]|reverse|list }}", NULL, "2.572.036[2, 1]");
    EXPECT("{{ 7|round(1) }}{{ none|map(attribute='x')|list }}{{ {'a': 1}[['k']] is defined }}{{ 'a' % [] }}", NULL, "7[]Falsea");
    EXPECT_ERR("{{ 'a' % 11 }}", NULL, "not all arguments converted");
    EXPECT_ERR("{{ [[1], [1]]|unique|list }}", NULL, "unhashable");
    EXPECT_ERR("{{ u|int }}", NULL, "'u' is undefined");
    EXPECT("{% filter upper %}abc{{ 'd' }}{% endfilter %}|{% set y | trim %}  hi  {% endset %}[{{ y }}]", NULL, "ABCD|[hi]");
    EXPECT_ERR("{{ x|nosuchfilter }}", NULL, "no filter named 'nosuchfilter'");
}

static void test_tests(void) {
    EXPECT("{{ u is defined }}{{ u is undefined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"
           "{{ [] is sequence }}{{ 1 is sequence }}{{ 'a' is iterable }}{{ 1 is number }}{{ 1.5 is float }}", NULL,
           "FalseTrueTrueTrueTrueTrueFalseTrueTrueTrue");
    EXPECT("{{ 1 is equalto 1 }}{{ 1 is eq 2 }}{{ false is false }}{{ 0 is false }}{{ true is true }}{{ 3 is odd }}"
           "{{ 9 is divisibleby 3 }}{{ x is not defined }}{{ not x is defined }}", NULL,
           "TrueFalseTrueFalseTrueTrueTrueTrueTrue");
    EXPECT_ERR("{{ 1 is nosuchtest }}", NULL, "no test named");
}

static void test_expressions(void) {
    EXPECT("{{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }}", NULL, "3.5 -4 2 1024 0.5 7 9");
    EXPECT("{{ 'a' ~ 1 ~ none ~ [1] }}{{ 'ab' * 2 }}{{ [1] + [2] }}", NULL, "a1None[1]abab[1, 2]");
    EXPECT("{{ 1 < 2 < 3 }}{{ 1 < 3 < 2 }}{{ 'a' in 'cat' }}{{ 'x' not in ['x'] }}{{ 'k' in {'k': 1} }}", NULL, "TrueFalseTrueFalseTrue");
    EXPECT("{{ 0 or '' or 'z' }}{{ 1 and 2 }}{{ [] and 1 }}{{ 3 if 0 else 4 }}{{ 5 if 0 }}", NULL, "z2[]4");
    EXPECT("{{ messages|length - 1 }}", "{\"messages\": [1, 2, 3]}", "2");
    EXPECT("{{ 1 == 1.0 }}{{ true == 1 }}{{ [1] == (1,) }}{{ {'a': 1} == {'a': 1} }}", NULL, "TrueTrueFalseTrue");
    EXPECT("{{ 'it\\'s' }}|{{ \"a\\tb\\x41\\u00e9\\n\" }}|{{ 'a' 'b' }}|{{ 1_000 }}|{{ 0x1f }}", NULL, "it's|a\tbAé\n|ab|1000|31");
    EXPECT("{{ '%s-%d-%.2f' % ('a', 3, 3.14159) }}|{{ '{}-{x}'.format(1, x=2) }}", NULL, "a-3-3.14|1-2");
    EXPECT_ERR("{{ 'a' + 1 }}", NULL, "can only concatenate str");
    EXPECT_ERR("{{ 1 < 'a' }}", NULL, "not supported between instances");
    EXPECT_ERR("{{ 1 / 0 }}", NULL, "division by zero");
    EXPECT_ERR("{{ 9223372036854775807 + 1 }}", NULL, "integer overflow"); /* Python would go big; we stop */
}

static void test_slicing(void) {
    EXPECT("{{ [1,2,3][1:] }}{{ [1,2,3][:-1] }}{{ [1,2,3][::-1] }}{{ [1,2,3,4,5][1::2] }}{{ [1,2,3][-1] }}{{ [1,2][5] is defined }}", NULL,
           "[2, 3][1, 2][3, 2, 1][2, 4]3False");
    EXPECT("{{ 'héllo'[1] }}{{ 'héllo'[1:3] }}{{ 'héllo'[::-1] }}{{ 'abc'[5:] }}|", NULL, "éélolléh|");
    EXPECT_ERR("{{ [1][::0] }}", NULL, "slice step cannot be zero");
}

static void test_printing(void) {
    EXPECT("{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}{{ (1,) }}{{ () }}", NULL, "[1, 'a', None, True, 1.5, {'k': 'v'}](1,)()");
    EXPECT("{{ \"it's\" }}{{ [\"it's\", 'a\\nb', '\\x01é'] }}", NULL, "it's[\"it's\", 'a\\nb', '\\x01é']");
    EXPECT("{{ 1e16 }} {{ 1.5e16 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 0.1 + 0.2 }} {{ 100.0 }} {{ 2.0 ** 70 }}", NULL,
           "1e+16 1.5e+16 1e-05 0.0001 -0.0 0.30000000000000004 100.0 1.1805916207174113e+21");
    EXPECT("{{ d }}", "{\"d\": {\"t\": {\"utc\": \"x\", \"ok\": true, \"f\": 0.0}}}", "{'t': {'utc': 'x', 'ok': True, 'f': 0.0}}");
}

static void test_methods(void) {
    EXPECT("{{ '  a b  '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a b c'.split(' ', 1) }}{{ 'a b c'.rsplit(' ', 1) }}", NULL,
           "['a', 'b']['a', 'b', '', 'c']['a', 'b c']['a b', 'c']");
    EXPECT("{{ '\\n x \\n'.strip() }}|{{ '\\nx'.lstrip('\\n') }}|{{ 'x\\n'.rstrip() }}|{{ 'abc'.startswith(('z', 'a')) }}{{ 'abc'.endswith('bc') }}", NULL,
           "x|x|x|TrueTrue");
    EXPECT("{{ 'a</think>b'.split('</think>')[-1] }}{{ ', '.join(['a', 'b']) }}{{ 'Hi'.upper() }}{{ 'abcabc'.find('c') }}", NULL, "ba, bHI2");
    EXPECT("{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d.keys()|list }}{{ d.values()|list }}{{ d.items()|list }}",
           "{\"d\": {\"a\": 1}}", "1None5['a'][1][('a', 1)]");
    EXPECT("{{ d.items }}|{{ d['items'] }}", "{\"d\": {\"items\": 7}}", "<built-in function>|7");
    EXPECT("{{ l.append is defined }}{{ d.pop is defined }}", "{\"l\": [], \"d\": {\"pop\": 1}}", "FalseFalse");
}

static void test_undefined(void) {
    EXPECT("[{{ nope }}]{{ nope is defined }}{{ d.missing }}{{ n.attr }}{{ n.attr is defined }}", "{\"d\": {}, \"n\": null}", "[]FalseFalse");
    EXPECT_ERR("{{ nope.attr }}", NULL, "'nope' is undefined");
    EXPECT_ERR("{{ d.a.b }}", "{\"d\": {}}", "'dict object' has no attribute 'a'");
    EXPECT_ERR("{{ nope + 1 }}", NULL, "'nope' is undefined");
    EXPECT_ERR("{{ messages[0].role }}", "{\"messages\": []}", "has no element 0");
}

static void test_globals(void) {
    EXPECT("{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ dict(a=1) }}{{ strftime_now('%Y-%m-%d') }}", NULL,
           "[0, 1, 2][1, 3, 5]{'a': 1}2025-06-15");
    EXPECT_ERR("{{ range(200000)|length }}", NULL, "Range too big");
    int rc;
    char err[512];
    char *out = render_src("{{ raise_exception('No way: ' ~ 42) }}", NULL, &rc, err, sizeof err);
    CHECK(rc == TPL_RAISED && !out, "raise_exception should give TPL_RAISED, got %d", rc);
    CHECK_HAS(err, "No way: 42");
    CHECK_HAS(err, "line 1");
    free(out);
}

static void test_errors_name_template_and_line(void) {
    int rc;
    char err[512];
    char *out = render_src("line1\n{% if %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "a syntax error must fail");
    CHECK_HAS(err, "unit, line 2");
    out = render_src("{% for x in y %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0, "unclosed for must fail");
    CHECK_HAS(err, "endfor");
    out = render_src("{% endif %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0, "stray endif must fail");
    out = render_src("{{ 'unterminated }}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0, "unterminated string must fail");
    out = render_src("{% break %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0, "break outside a loop must fail");
    out = render_src("{% include 'x' %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0, "include must be refused");
    const char bad_utf8[] = {'a', (char)0xff, 'b', 0};
    out = render_src(bad_utf8, NULL, &rc, err, sizeof err);
    CHECK(rc != 0, "invalid UTF-8 must be refused");
    CHECK_HAS(err, "UTF-8");
}

static void test_hostile(void) {
    int rc;
    char err[512];
    /* 5000 nested parentheses / ifs / lists: an error, not a stack overflow */
    size_t n = 5000;
    char *src = malloc(n * 32 + 64);
    size_t o = 0;
    o += (size_t)sprintf(src + o, "{{ ");
    for (size_t i = 0; i < n; i++) src[o++] = '(';
    src[o++] = '1';
    for (size_t i = 0; i < n; i++) src[o++] = ')';
    o += (size_t)sprintf(src + o, " }}");
    src[o] = 0;
    char *out = render_src(src, NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "deep parentheses must fail cleanly");
    CHECK_HAS(err, "nested too deeply");
    o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)sprintf(src + o, "{%% if 1 %%}");
    for (size_t i = 0; i < n; i++) o += (size_t)sprintf(src + o, "{%% endif %%}");
    out = render_src(src, NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "deep ifs must fail cleanly");
    o = 0;
    o += (size_t)sprintf(src + o, "{{ ");
    for (size_t i = 0; i < n; i++) src[o++] = '[';
    for (size_t i = 0; i < n; i++) src[o++] = ']';
    o += (size_t)sprintf(src + o, " }}");
    src[o] = 0;
    out = render_src(src, NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "deep lists must fail cleanly");
    o = 0;
    o += (size_t)sprintf(src + o, "{{ x");
    for (size_t i = 0; i < n; i++) o += (size_t)sprintf(src + o, ".a");
    o += (size_t)sprintf(src + o, " }}");
    out = render_src(src, "{\"x\": {}}", &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "a long attribute chain on undefined must fail cleanly");
    free(src);
    /* runaway recursion, runaway loops, runaway output */
    out = render_src("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "infinite recursion must fail");
    CHECK_HAS(err, "recursion");
    out = render_src("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "an endless loop must hit the step limit");
    CHECK_HAS(err, "too long");
    out = render_src("{% set s = 'x' * 1000000 %}{% for a in range(100) %}{{ s }}{% endfor %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "100 MB of output must hit the output limit");
    CHECK_HAS(err, "limit");
    out = render_src("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "doubling a string 40 times must fail cleanly");
    /* values nested 100000 deep: built, compared, printed (refused) and freed without recursion */
    out = render_src("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                     "{{ ns.x == ns.x }}{{ ns.x is defined }}", NULL, &rc, err, sizeof err);
    CHECK(rc == 0 && out && !strcmp(out, "FalseTrue"), "deep values: %s", out ? out : err);
    free(out);
    out = render_src("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
                     NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "printing 100000 nested lists must fail cleanly");
    CHECK_HAS(err, "recursion");
    out = render_src("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}",
                     NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "tojson of 100000 nested lists must fail cleanly");
    EXPECT("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}", NULL, "<Namespace {'a': 1, 'me': <Namespace {...}>}>");
    out = render_src("{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ ('x' * 600) %}{% endfor %}", NULL, &rc, err, sizeof err);
    CHECK(rc != 0 && !out, "quadratic string building must hit the work budget");
    CHECK_HAS(err, "too long");
    /* big inputs stay fast: sort and unique of 100000 items */
    EXPECT("{{ range(100000)|reverse|sort|first }}{{ range(100000)|reverse|unique|list|length }}", NULL, "0100000");
}

static void test_chat_request_validation(void) {
    char dir[] = "/tmp/cinfer_tplreq_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char p[200];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(p, "w");
    fputs("{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"</s>\", \"pad_token\": null,"
          " \"chat_template\": [{\"name\": \"default\", \"template\": \"{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
          "{{ eos_token }}{{ pad_token is defined }}{{ tools is none }}{{ add_generation_prompt }}{{ extra }}\"},"
          " {\"name\": \"tool_use\", \"template\": \"TOOLS{{ tools|length }}\"}]}", f);
    fclose(f);
    tpl_chat *ch;
    char err[512];
    int rc = tpl_chat_load(dir, &ch, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc == 0) {
        const char *cases[][2] = {
            {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"chat_template_kwargs\": {\"extra\": \"!\"}}", "<s>hi</s>FalseTrueFalse!"},
            {"{\"messages\": [{\"role\": \"user\"}], \"tools\": [{\"type\": \"function\"}], \"add_generation_prompt\": true}", "TOOLS1"},
        };
        for (int i = 0; i < 2; i++) {
            json_t *req = cj_parse(cases[i][0], strlen(cases[i][0]), "req", err, sizeof err);
            char *out = NULL;
            size_t len;
            rc = tpl_chat_render(ch, req, NULL, &out, &len, err, sizeof err);
            CHECK(rc == 0 && !strcmp(out, cases[i][1]), "case %d: want %s got %s (%s)", i, cases[i][1], out ? out : "", err);
            free(out);
            json_decref(req);
        }
        const char *bad[][2] = {
            {"{\"messages\": {\"role\": \"user\"}}", "must be a list"},
            {"{\"nomessages\": []}", "missing \"messages\""},
            {"{\"messages\": [1]}", "messages[0] must be an object"},
            {"{\"messages\": [{\"role\": \"user\"}], \"tools\": 5}", "\"tools\" must be a list"},
            {"[]", "expected a JSON object"},
            {"{\"messages\": []}", "empty conversation"},
        };
        for (int i = 0; i < 6; i++) {
            json_t *req = cj_parse(bad[i][0], strlen(bad[i][0]), "req", err, sizeof err);
            char *out = NULL;
            size_t len;
            rc = tpl_chat_render(ch, req, NULL, &out, &len, err, sizeof err);
            CHECK(rc != 0 && !out, "bad request %d must fail", i);
            CHECK_HAS(err, bad[i][1]);
            json_decref(req);
        }
        tpl_chat_free(ch);
    }
    unlink(p);
    rc = tpl_chat_load(dir, &ch, err, sizeof err);
    CHECK(rc != 0, "a folder without a template must fail");
    CHECK_HAS(err, "no chat template");
    rmdir(dir);
    rc = tpl_chat_load("/nonexistent/dir", &ch, err, sizeof err);
    CHECK(rc != 0, "a missing folder must fail");
}

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++) if (!strcmp(argv[i], "--ref")) REF_DIR = argv[i + 1];
    TEST_RUN(test_deepseek_v3);
    TEST_RUN(test_qwen3);
    TEST_RUN(test_llama3);
    TEST_RUN(test_llama2);
    TEST_RUN(test_gemma3);
    TEST_RUN(test_gptoss);
    TEST_RUN(test_whitespace_control);
    TEST_RUN(test_loops);
    TEST_RUN(test_scoping);
    TEST_RUN(test_namespace);
    TEST_RUN(test_macros);
    TEST_RUN(test_filters);
    TEST_RUN(test_tests);
    TEST_RUN(test_expressions);
    TEST_RUN(test_slicing);
    TEST_RUN(test_printing);
    TEST_RUN(test_methods);
    TEST_RUN(test_undefined);
    TEST_RUN(test_globals);
    TEST_RUN(test_errors_name_template_and_line);
    TEST_RUN(test_hostile);
    TEST_RUN(test_chat_request_validation);
    TEST_EXIT();
}
