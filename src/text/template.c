/* template.c — the chat-template front door: compile, render, and a model folder's template.
 *
 * Owns the public API of template.h: compiling source (lexer + parser of tpl_*.c, errors
 * prefixed with the template's name), rendering with JSON variables (converted to template
 * values, bound in the root scope, limits from tpl_opts), and the chat layer that mirrors
 * transformers: which template a model folder uses (chat_template.jinja over
 * tokenizer_config.json's chat_template; a list of named templates picks "tool_use" when
 * tools are given and it exists, else "default"), which special tokens become variables,
 * and how an OpenAI-style request maps onto messages / tools / add_generation_prompt /
 * chat_template_kwargs.
 *
 * Invariants: a compiled template is immutable and may be rendered from several threads at
 * once (each render has its own context); every error is one line naming the template and
 * line; the caller owns *out. */
#include "text/template.h"
#include "core/status.h"
#include "text/dsml.h"
#include "io/json.h"
#include "text/tpl_internal.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ compile */

int tpl_compile(const char *src, size_t len, const char *name, tpl_t **out, char *err, size_t errlen) {
    *out = NULL;
    tpl_t *t = calloc(1, sizeof *t);
    if (!t) return ci_err(err, errlen, "%s: out of memory", name);
    t->name = strdup(name ? name : "template");
    if (!t->name) { free(t); return ci_err(err, errlen, "out of memory"); }
    tok *toks;
    int ntoks;
    char msg[512];
    if (tpl_lex(&t->arena, src, len, &toks, &ntoks, msg, sizeof msg) ||
        tpl_parse(&t->arena, toks, ntoks, &t->body, &t->undef, &t->nundef, msg, sizeof msg)) {
        ci_err(err, errlen, "%s, %s", t->name, msg);
        tpl_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tpl_free(tpl_t *t) {
    if (!t) return;
    tarena_free(&t->arena);
    free(t->name);
    free(t);
}

/* ------------------------------------------------------------------ values from JSON */

static int json_to_tv(const json_t *j, tv *out, int depth) {
    if (depth > 1000) return -1;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        tdict *d = tdict_new();
        if (!d) return -1;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            tv kv = tv_cstr(k), vv;
            if (kv.t != TV_STR || json_to_tv(v, &vv, depth + 1)) { tv_decref(kv); tv_decref(tv_dict(d)); return -1; }
            if (tdict_set(d, kv, vv)) { tv_decref(tv_dict(d)); return -1; }
        }
        *out = tv_dict(d);
        return 0;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        tlist *l = tlist_new(n);
        if (!l) return -1;
        for (size_t i = 0; i < n; i++) {
            tv vv;
            if (json_to_tv(json_array_get(j, i), &vv, depth + 1)) { tv_decref(tv_list(l)); return -1; }
            tlist_push(l, vv);
        }
        *out = tv_list(l);
        return 0;
    }
    case JSON_STRING:
        *out = tv_str(json_string_value(j), json_string_length(j));
        return out->t == TV_STR ? 0 : -1;
    case JSON_INTEGER: *out = tv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = tv_float(json_real_value(j)); return 0;
    case JSON_TRUE: *out = tv_bool(1); return 0;
    case JSON_FALSE: *out = tv_bool(0); return 0;
    default: *out = tv_none(); return 0;
    }
}

/* ------------------------------------------------------------------ render */

/* One line: newlines in a message (raise_exception text) become spaces. */
static void one_line(char *s) {
    for (; *s; s++) if (*s == '\n' || *s == '\r') *s = ' ';
}

static int render_dict(const tpl_t *t, tdict *vars, const tpl_opts *o, char **out, size_t *out_len,
                       char *err, size_t errlen) {
    *out = NULL;
    if (out_len) *out_len = 0;
    tpl_opts d = {0};
    if (!o) o = &d;
    char msg[1024];
    msg[0] = 0;
    tbuf buf = {.limit = o->max_output ? o->max_output : (size_t)64 << 20};
    tscope root = {0};
    tctx c = {
        .t = t, .root = &root, .out = &buf, .err = msg, .errlen = sizeof msg,
        .max_depth = o->max_depth > 0 ? o->max_depth : 2000,
        .max_steps = o->max_steps ? o->max_steps : 50000000ULL,
        .max_output = buf.limit, .now = o->now,
    };
    int r = 0;
    for (size_t i = 0; i < vars->n && !r; i++) {
        if (vars->k[i].t != TV_STR) continue;
        r = tpl_scope_set(&c, &root, vars->k[i].u.s->s, tv_ref(vars->v[i]));
    }
    if (!r) r = tpl_bind_undef(&c, &root, t->undef, t->nundef);
    if (!r) r = tpl_exec(&c, &t->body);
    tpl_scope_free(&root);
    tpl_ctx_release(&c);
    if (r) {
        one_line(msg);
        tbuf_free(&buf);
        ci_err(err, errlen, "%s, line %d: %s", t->name, c.err_line, msg[0] ? msg : "render failed");
        return c.raised ? TPL_RAISED : -1;
    }
    if (!buf.p) { buf.p = calloc(1, 1); if (!buf.p) return ci_err(err, errlen, "%s: out of memory", t->name); }
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return 0;
}

int tpl_render(const tpl_t *t, const json_t *vars, const tpl_opts *opts, char **out, size_t *out_len,
               char *err, size_t errlen) {
    *out = NULL;
    if (vars && !json_is_object(vars)) return ci_err(err, errlen, "%s: variables must be a JSON object", t->name);
    tv d = tv_undef();
    if (vars) { if (json_to_tv(vars, &d, 0)) return ci_err(err, errlen, "%s: variables too deep or out of memory", t->name); }
    else { tdict *e = tdict_new(); if (!e) return ci_err(err, errlen, "out of memory"); d = tv_dict(e); }
    int r = render_dict(t, d.u.d, opts, out, out_len, err, errlen);
    tv_decref(d);
    return r;
}

/* ------------------------------------------------------------------ a model's chat template */

#define MAX_NAMED 16

struct tpl_chat {
    int n;
    char *names[MAX_NAMED];      /* NULL for the single unnamed template */
    tpl_t *t[MAX_NAMED];
    tdict *tokens;               /* bos_token, eos_token, ... as template values */
    char *dir;
    dsml_version native;         /* no template: DeepSeek V3.2 / V4's own encoder (dsml.h) */
};

void tpl_chat_free(tpl_chat *ch) {
    if (!ch) return;
    for (int i = 0; i < ch->n; i++) { free(ch->names[i]); tpl_free(ch->t[i]); }
    if (ch->tokens) tv_decref(tv_dict(ch->tokens));
    free(ch->dir);
    free(ch);
}

static char *read_file(const char *path, size_t *len, int *missing) {
    *missing = 0;
    FILE *f = fopen(path, "rb");
    if (!f) { *missing = errno == ENOENT; return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap) break;
        if (cap > ((size_t)256 << 20)) { free(buf); buf = NULL; break; }
        char *nb = realloc(buf, cap * 2);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb; cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) { free(buf); return NULL; }
    buf[n < cap ? n : cap - 1] = 0;
    *len = n;
    return buf;
}

static int add_template(tpl_chat *ch, const char *name, const char *src, size_t len, const char *where,
                        char *err, size_t errlen) {
    if (ch->n == MAX_NAMED) return ci_err(err, errlen, "%s: more than %d named chat templates", where, MAX_NAMED);
    char label[1200];
    if (name) snprintf(label, sizeof label, "%s (chat template '%s')", where, name);
    else snprintf(label, sizeof label, "%s", where);
    tpl_t *t;
    if (tpl_compile(src, len, label, &t, err, errlen)) return -1;
    ch->t[ch->n] = t;
    ch->names[ch->n] = name ? strdup(name) : NULL;
    ch->n++;
    if (name && !ch->names[ch->n - 1]) return ci_err(err, errlen, "out of memory");
    return 0;
}

/* The special-token variables: a string, or an AddedToken object {"content": ...}. */
static int load_tokens(tpl_chat *ch, const json_t *cfg, const char *path, char *err, size_t errlen) {
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token",
                                       "sep_token", "cls_token", "mask_token"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const json_t *v = cfg ? json_object_get(cfg, keys[i]) : NULL;
        if (!v || json_is_null(v)) continue;
        const char *s = NULL;
        size_t n = 0;
        if (json_is_string(v)) { s = json_string_value(v); n = json_string_length(v); }
        else if (json_is_object(v) && json_is_string(json_object_get(v, "content"))) {
            const json_t *cv = json_object_get(v, "content");
            s = json_string_value(cv); n = json_string_length(cv);
        } else return ci_err(err, errlen, "%s: %s must be a string or an object with \"content\"", path, keys[i]);
        tv k = tv_cstr(keys[i]), val = tv_str(s, n);
        if (k.t != TV_STR || val.t != TV_STR || tdict_set(ch->tokens, k, val)) return ci_err(err, errlen, "out of memory");
    }
    /* transformers' GemmaTokenizer has a mask token by default ("<mask>"); it reaches the
       template through special_tokens_map even when tokenizer_config.json does not name it */
    const char *cls = cfg ? cj_get_str(cfg, "tokenizer_class") : NULL;
    if (cls && (!strcmp(cls, "GemmaTokenizer") || !strcmp(cls, "GemmaTokenizerFast")) &&
        !json_object_get(cfg, "mask_token") && !tdict_get_cstr(ch->tokens, "mask_token")) {
        tv k = tv_cstr("mask_token"), val = tv_cstr("<mask>");
        if (k.t != TV_STR || val.t != TV_STR || tdict_set(ch->tokens, k, val)) return ci_err(err, errlen, "out of memory");
    }
    /* named extra tokens (Gemma 3: boi_token, eoi_token, image_token) join the map too;
       a list of extra tokens has no names and adds no variables */
    const json_t *extra = cfg ? json_object_get(cfg, "extra_special_tokens") : NULL;
    if (extra && json_is_object(extra)) {
        const char *name;
        json_t *v;
        json_object_foreach((json_t *)extra, name, v) {
            if (json_is_object(v)) v = json_object_get(v, "content");
            if (!json_is_string(v)) continue;
            tv k = tv_cstr(name), val = tv_str(json_string_value(v), json_string_length(v));
            if (k.t != TV_STR || val.t != TV_STR || tdict_set(ch->tokens, k, val)) return ci_err(err, errlen, "out of memory");
        }
    }
    return 0;
}

/* DeepSeek V3.2 and V4 checkpoints ship a Python encoder instead of a chat template: their
 * config.json's model_type selects the native one (dsml.h). DSML_NONE otherwise. */
static dsml_version native_encoder(const char *model_dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    json_error_t je;
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
    dsml_version v = dsml_for_model_type(json_is_object(cfg) ? cj_get_str(cfg, "model_type") : NULL);
    json_decref(cfg);
    return v;
}

int tpl_chat_load(const char *model_dir, tpl_chat **out, char *err, size_t errlen) {
    return tpl_chat_load_ex(model_dir, NULL, out, err, errlen);
}

int tpl_chat_load_ex(const char *model_dir, const char *template_path, tpl_chat **out, char *err, size_t errlen) {
    *out = NULL;
    tpl_chat *ch = calloc(1, sizeof *ch);
    if (!ch) return ci_err(err, errlen, "out of memory");
    ch->dir = strdup(model_dir);
    ch->tokens = tdict_new();
    json_t *cfg = NULL;
    char *src = NULL;
    if (!ch->dir || !ch->tokens) { ci_err(err, errlen, "out of memory"); goto fail; }
    char cfg_path[1100], jinja_path[1100];
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", model_dir);
    snprintf(jinja_path, sizeof jinja_path, "%s/chat_template.jinja", model_dir);
    struct stat st;
    if (stat(model_dir, &st) || !S_ISDIR(st.st_mode)) { ci_err(err, errlen, "%s: not a directory", model_dir); goto fail; }
    if (!stat(cfg_path, &st)) {
        /* not cj_load_file: tokenizer configs carry model_max_length = 1e30 as an integer,
           which jansson refuses unless big integers may become reals */
        json_error_t je;
        cfg = json_load_file(cfg_path, JSON_DECODE_INT_AS_REAL, &je);
        if (!cfg) { ci_err(err, errlen, "%s: invalid JSON at line %d column %d: %s", cfg_path, je.line, je.column, je.text); goto fail; }
        if (!json_is_object(cfg)) { ci_err(err, errlen, "%s: expected a JSON object", cfg_path); goto fail; }
    }
    if (load_tokens(ch, cfg, cfg_path, err, errlen)) goto fail;

    size_t len;
    int missing;
    if (template_path) {                          /* the caller's template instead of the folder's */
        src = read_file(template_path, &len, &missing);
        if (!src) { ci_err(err, errlen, "%s: cannot read the chat template: %s", template_path, strerror(errno)); goto fail; }
        if (add_template(ch, NULL, src, len, template_path, err, errlen)) goto fail;
        free(src);
        json_decref(cfg);
        *out = ch;
        return 0;
    }
    src = read_file(jinja_path, &len, &missing);
    if (src) {
        if (add_template(ch, NULL, src, len, jinja_path, err, errlen)) goto fail;
    } else if (!missing) {
        ci_err(err, errlen, "%s: cannot read: %s", jinja_path, strerror(errno));
        goto fail;
    } else {
        const json_t *ct = cfg ? json_object_get(cfg, "chat_template") : NULL;
        char where[1200];
        snprintf(where, sizeof where, "%s (chat_template)", cfg_path);
        if (ct && json_is_string(ct)) {
            if (add_template(ch, NULL, json_string_value(ct), json_string_length(ct), where, err, errlen)) goto fail;
        } else if (ct && json_is_array(ct)) {
            size_t i;
            json_t *e;
            json_array_foreach(ct, i, e) {
                const char *nm = cj_get_str(e, "name");
                const json_t *tt = json_object_get(e, "template");
                if (!nm || !json_is_string(tt)) {
                    ci_err(err, errlen, "%s: chat_template[%zu] must be {\"name\": ..., \"template\": ...}", cfg_path, i);
                    goto fail;
                }
                if (add_template(ch, nm, json_string_value(tt), json_string_length(tt), cfg_path, err, errlen)) goto fail;
            }
            if (!ch->n) { ci_err(err, errlen, "%s: chat_template is an empty list", cfg_path); goto fail; }
        } else if (ct && !json_is_null(ct)) {
            ci_err(err, errlen, "%s: chat_template must be a string or a list of {name, template}", cfg_path);
            goto fail;
        } else if (!(ch->native = native_encoder(model_dir))) {
            ci_err(err, errlen, "%s has no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json)", model_dir);
            goto fail;
        }
    }
    free(src);
    json_decref(cfg);
    *out = ch;
    return 0;
fail:
    free(src);
    json_decref(cfg);
    tpl_chat_free(ch);
    return -1;
}

static const tpl_t *pick_template(const tpl_chat *ch, int has_tools, char *err, size_t errlen) {
    if (ch->n == 1 && !ch->names[0]) return ch->t[0];
    if (has_tools)
        for (int i = 0; i < ch->n; i++) if (ch->names[i] && !strcmp(ch->names[i], "tool_use")) return ch->t[i];
    for (int i = 0; i < ch->n; i++) if (ch->names[i] && !strcmp(ch->names[i], "default")) return ch->t[i];
    ci_err(err, errlen, "%s: the chat templates have no 'default' entry", ch->dir);
    return NULL;
}

static int set_json(tdict *d, const char *key, const json_t *j) {
    tv k = tv_cstr(key), v;
    if (k.t != TV_STR) return -1;
    if (json_to_tv(j, &v, 0)) { tv_decref(k); return -1; }
    return tdict_set(d, k, v);
}

static int chat_render(const tpl_chat *ch, const tpl_t *t, const json_t *request, const tpl_opts *opts,
                       char **out, size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    if (!json_is_object(request)) return ci_err(err, errlen, "request: expected a JSON object");
    const json_t *msgs = json_object_get(request, "messages");
    if (!msgs) return ci_err(err, errlen, "request: missing \"messages\"");
    if (!json_is_array(msgs)) return ci_err(err, errlen, "request: \"messages\" must be a list, got %s",
                                            json_is_object(msgs) ? "an object" : json_is_string(msgs) ? "a string" : "another type");
    if (json_array_size(msgs) == 0) /* transformers' wording */
        return ci_err(err, errlen, "Cannot apply chat template to an empty conversation. Provide at least one message.");
    for (size_t i = 0; i < json_array_size(msgs); i++)
        if (!json_is_object(json_array_get(msgs, i)))
            return ci_err(err, errlen, "request: messages[%zu] must be an object", i);
    const json_t *tools = json_object_get(request, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return ci_err(err, errlen, "request: \"tools\" must be a list");
    if (tools && json_is_null(tools)) tools = NULL;
    const json_t *agp = json_object_get(request, "add_generation_prompt");
    if (agp && !json_is_boolean(agp) && !json_is_null(agp)) return ci_err(err, errlen, "request: \"add_generation_prompt\" must be true or false");
    const json_t *kw = json_object_get(request, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw)) return ci_err(err, errlen, "request: \"chat_template_kwargs\" must be an object");

    if (!t && ch->native) return dsml_render_request(ch->native, request, out, out_len, err, errlen);
    if (!t) t = pick_template(ch, tools != NULL, err, errlen);
    if (!t) return -1;
    tdict *vars = tdict_new();
    if (!vars) return ci_err(err, errlen, "out of memory");
    int bad = 0;
    /* the order transformers builds them in: special tokens, then the kwargs over them,
       then messages / tools / documents / add_generation_prompt */
    /* copies, not references: refcounts are not atomic, and a server renders one loaded
       tpl_chat from several threads at once (sharing them corrupted the heap) */
    for (size_t i = 0; i < ch->tokens->n && !bad; i++) {
        const tstr *ks = ch->tokens->k[i].u.s, *vs = ch->tokens->v[i].u.s;
        tv k = tv_str(ks->s, ks->len), v = tv_str(vs->s, vs->len);
        if (k.t != TV_STR || v.t != TV_STR) { tv_decref(k); tv_decref(v); bad = 1; break; }
        bad = tdict_set(vars, k, v);
    }
    if (kw && json_is_object(kw)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)kw, k, v) if (!bad) bad = set_json(vars, k, v);
    }
    if (!bad) bad = set_json(vars, "messages", msgs);
    if (!bad) bad = tools ? set_json(vars, "tools", tools) : tdict_set(vars, tv_cstr("tools"), tv_none());
    if (!bad) bad = tdict_set(vars, tv_cstr("documents"), tv_none());
    if (!bad) bad = tdict_set(vars, tv_cstr("add_generation_prompt"), tv_bool(agp && json_is_true(agp)));
    if (bad) { tv_decref(tv_dict(vars)); return ci_err(err, errlen, "request: too deeply nested or out of memory"); }
    int r = render_dict(t, vars, opts, out, out_len, err, errlen);
    tv_decref(tv_dict(vars));
    return r;
}

int tpl_chat_render(const tpl_chat *ch, const json_t *request, const tpl_opts *opts, char **out,
                    size_t *out_len, char *err, size_t errlen) {
    return chat_render(ch, NULL, request, opts, out, out_len, err, errlen);
}

int tpl_chat_render_with(const tpl_chat *ch, const tpl_t *t, const json_t *request, const tpl_opts *opts,
                         char **out, size_t *out_len, char *err, size_t errlen) {
    if (!t) { *out = NULL; return ci_err(err, errlen, "no template given"); }
    return chat_render(ch, t, request, opts, out, out_len, err, errlen);
}

int tpl_render_request(const char *model_dir, const char *template_path, const json_t *request, char **out,
                       size_t *out_len, char *err, size_t errlen) {
    tpl_chat *ch;
    *out = NULL;
    if (tpl_chat_load_ex(model_dir, template_path, &ch, err, errlen)) return -1;
    int r = tpl_chat_render(ch, request, NULL, out, out_len, err, errlen);
    tpl_chat_free(ch);
    return r;
}
