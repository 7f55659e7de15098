/* tokenizer.c — loading tokenizer.json into the pipeline, and the encode path.
 *
 * Loading reads tokenizer.json with the in-place reader of tok_json.c (fast enough for a
 * 150k vocab well under the 300 ms budget), builds the vocab map, the merge map, the added
 * tokens and their tries, the normalizer / pre-tokenizer / decoder trees and the ids the
 * post-processor adds; then tokenizer_config.json and special_tokens_map.json (jansson)
 * for bos/eos and add_bos_token / add_eos_token. Anything the file asks for that is not
 * implemented is an error naming the key, never a silent approximation.
 *
 * In byte-level mode (a ByteLevel pre-tokenizer, the last step) the vocab map is keyed by
 * the raw bytes a token stands for rather than its GPT-2-alphabet spelling, so text goes
 * to BPE without being rewritten. Encoding: validate UTF-8; split the text on added tokens
 * that match raw text (leftmost-longest); normalize each gap; split it on added tokens that
 * match normalized text; pre-tokenize the rest; BPE each piece; add the post-processor ids. */
#include "tokenizer.h"
#include "tok_internal.h"
#include "tok_json.h"
#include "../core/status.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct {
    tok_tokenizer *t;
    const char *path;
    char *err; size_t errlen;
    char *piece_next;   /* free space in piece_mem after the vocab pieces */
} loader;

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static int lerr_oom(loader *L) { return ci_err(L->err, L->errlen, "%s: out of memory", L->path); }

/* Un-maps a GPT-2-alphabet string to bytes into out[0..cap); returns the byte count, or
 * -1 if a character is outside the alphabet or out is too small. */
static long unmap_bytelevel(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        int b;
        if (c < 0x80) { b = tk_cp_to_byte(c); i++; }
        else {
            size_t adv;
            b = tk_cp_to_byte(tk_utf8_dec((const unsigned char *)s + i, n - i, &adv));
            i += adv;
        }
        if (b < 0 || o >= cap) return -1;
        out[o++] = (char)b;
    }
    return (long)o;
}

/* Vocab id of a model piece spelled as in the file; -1 if none. */
static int vocab_lookup(const tok_tokenizer *t, const char *s, size_t n) {
    if (!t->bpe.bytelevel) return tk_sm_get(&t->bpe.vocab, s, n);
    char small[512];
    char *buf = n <= sizeof small ? small : malloc(n);
    if (!buf) return -1;
    long l = unmap_bytelevel(s, n, buf, n);
    int id = l < 0 ? -1 : tk_sm_get(&t->bpe.vocab, buf, (size_t)l);
    if (buf != small) free(buf);
    return id;
}

int tok_piece_to_id(const tok_tokenizer *t, const char *piece, size_t len) {
    int k = tk_sm_get(&t->added_map, piece, len);
    if (k >= 0) return t->added[k].id;
    int id = vocab_lookup(t, piece, len);
    if (id >= 0) return id;
    /* Pieces outside the byte-level alphabet are not in the map: scan. */
    for (int i = 0; i < t->n_vocab; i++)
        if (t->piece[i] && t->piece_len[i] == len && !memcmp(t->piece[i], piece, len)) return i;
    return -1;
}

/* ---- pattern / type helpers ---- */

static int get_type(loader *L, const tj_val *v, const char *where, const char **type) {
    size_t n;
    if (!v || v->type != TJ_OBJ) return ci_err(L->err, L->errlen, "%s: %s: expected an object", L->path, where);
    if (tj_str(v, "type", type, &n) != 1) return ci_err(L->err, L->errlen, "%s: %s: missing \"type\"", L->path, where);
    return 0;
}

static int get_pattern(loader *L, const tj_val *v, const char *where, tk_pattern *p) {
    const tj_val *pat = tj_get(v, "pattern");
    const char *s;
    size_t n;
    char what[600];
    snprintf(what, sizeof what, "%s: %s.pattern", L->path, where);
    if (!pat || pat->type != TJ_OBJ) return ci_err(L->err, L->errlen, "%s: expected {\"String\": ...} or {\"Regex\": ...}", what);
    if (tj_str(pat, "String", &s, &n) == 1) return tk_pattern_compile(p, s, n, 0, what, L->err, L->errlen);
    if (tj_str(pat, "Regex", &s, &n) == 1) return tk_pattern_compile(p, s, n, 1, what, L->err, L->errlen);
    return ci_err(L->err, L->errlen, "%s: expected {\"String\": ...} or {\"Regex\": ...}", what);
}

static int get_string(loader *L, const tj_val *v, const char *key, const char *where, char **out, size_t *len, int required) {
    const char *s;
    size_t n;
    int r = tj_str(v, key, &s, &n);
    if (r < 0 || (r == 0 && required))
        return ci_err(L->err, L->errlen, "%s: %s.%s: expected a string", L->path, where, key);
    if (r == 0) { *out = NULL; *len = 0; return 0; }
    if (!(*out = dupn(s, n))) return lerr_oom(L);
    *len = n;
    return 0;
}

static int get_flag(loader *L, const tj_val *v, const char *key, const char *where, int dflt, int *out) {
    int r = tj_bool(v, key, out);
    if (r < 0) return ci_err(L->err, L->errlen, "%s: %s.%s: expected true or false", L->path, where, key);
    if (r == 0) *out = dflt;
    return 0;
}

static int get_kids(loader *L, const tj_val *v, const char *key, const char *where, const tj_val **arr) {
    *arr = tj_get(v, key);
    if (!*arr || (*arr)->type != TJ_ARR) return ci_err(L->err, L->errlen, "%s: %s.%s: expected an array", L->path, where, key);
    return 0;
}

static int prepend_scheme(loader *L, const tj_val *v, const char *where, int *out) {
    const char *s;
    size_t n;
    int r = tj_str(v, "prepend_scheme", &s, &n);
    if (r == 1) {
        if (!strcmp(s, "always")) *out = TS_ALWAYS;
        else if (!strcmp(s, "first")) *out = TS_FIRST;
        else if (!strcmp(s, "never")) *out = TS_NEVER;
        else return ci_err(L->err, L->errlen, "%s: %s.prepend_scheme: unknown value '%s'", L->path, where, s);
        return 0;
    }
    int aps;
    if (get_flag(L, v, "add_prefix_space", where, 1, &aps)) return -1;
    *out = aps ? TS_ALWAYS : TS_NEVER;
    return 0;
}

static int get_replacement(loader *L, const tj_val *v, const char *where, char *repl, size_t *len) {
    const char *s;
    size_t n;
    if (tj_str(v, "replacement", &s, &n) != 1 || n == 0 || n >= 8 || tk_utf8_len((const unsigned char *)s, n) != n)
        return ci_err(L->err, L->errlen, "%s: %s.replacement: expected one character", L->path, where);
    memcpy(repl, s, n);
    *len = n;
    return 0;
}

/* ---- normalizers ---- */

static int parse_norm(loader *L, const tj_val *v, const char *where, tk_norm *n) {
    const char *type;
    memset(n, 0, sizeof *n);
    if (get_type(L, v, where, &type)) return -1;
    char sub[300];
    if (!strcmp(type, "Sequence")) {
        const tj_val *arr;
        n->type = TN_SEQ;
        if (get_kids(L, v, "normalizers", where, &arr)) return -1;
        if (arr->n && !(n->kids = calloc(arr->n, sizeof *n->kids))) return lerr_oom(L);
        for (uint32_t i = 0; i < arr->n; i++) {
            snprintf(sub, sizeof sub, "%s.normalizers[%u]", where, i);
            n->nkids = (int)i + 1;
            if (parse_norm(L, &arr->u.kids[i], sub, &n->kids[i])) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "NFC")) { n->type = TN_NFC; return 0; }
    if (!strcmp(type, "NFD")) { n->type = TN_NFD; return 0; }
    if (!strcmp(type, "NFKC")) { n->type = TN_NFKC; return 0; }
    if (!strcmp(type, "NFKD")) { n->type = TN_NFKD; return 0; }
    if (!strcmp(type, "Lowercase")) { n->type = TN_LOWER; return 0; }
    if (!strcmp(type, "StripAccents")) { n->type = TN_STRIP_ACCENTS; return 0; }
    if (!strcmp(type, "Strip")) {
        n->type = TN_STRIP;
        return get_flag(L, v, "strip_left", where, 1, &n->left) || get_flag(L, v, "strip_right", where, 1, &n->right) ? -1 : 0;
    }
    if (!strcmp(type, "Prepend")) { n->type = TN_PREPEND; return get_string(L, v, "prepend", where, &n->str, &n->str_len, 1); }
    if (!strcmp(type, "Replace")) {
        n->type = TN_REPLACE;
        if (get_pattern(L, v, where, &n->pat)) return -1;
        return get_string(L, v, "content", where, &n->str, &n->str_len, 1);
    }
    return ci_err(L->err, L->errlen, "%s: %s: normalizer type '%s' is not supported", L->path, where, type);
}

/* ---- pre-tokenizers ---- */

static int parse_behavior(loader *L, const tj_val *v, const char *where, int *out) {
    const char *s;
    size_t n;
    if (tj_str(v, "behavior", &s, &n) != 1) return ci_err(L->err, L->errlen, "%s: %s.behavior: expected a string", L->path, where);
    static const char *names[] = { "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous" };
    for (int i = 0; i < 5; i++) if (!strcmp(s, names[i])) { *out = i; return 0; }
    return ci_err(L->err, L->errlen, "%s: %s.behavior: unknown value '%s'", L->path, where, s);
}

static int parse_pre(loader *L, const tj_val *v, const char *where, tk_pre *p, int last) {
    const char *type;
    memset(p, 0, sizeof *p);
    if (get_type(L, v, where, &type)) return -1;
    char sub[300];
    if (!strcmp(type, "Sequence")) {
        const tj_val *arr;
        p->type = TP_SEQ;
        if (get_kids(L, v, "pretokenizers", where, &arr)) return -1;
        if (arr->n && !(p->kids = calloc(arr->n, sizeof *p->kids))) return lerr_oom(L);
        for (uint32_t i = 0; i < arr->n; i++) {
            snprintf(sub, sizeof sub, "%s.pretokenizers[%u]", where, i);
            p->nkids = (int)i + 1;
            if (parse_pre(L, &arr->u.kids[i], sub, &p->kids[i], last && i + 1 == arr->n)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        p->type = TP_SPLIT;
        if (get_pattern(L, v, where, &p->pat) || parse_behavior(L, v, where, &p->behavior)) return -1;
        return get_flag(L, v, "invert", where, 0, &p->invert);
    }
    if (!strcmp(type, "ByteLevel")) {
        p->type = TP_BYTELEVEL;
        if (!last) return ci_err(L->err, L->errlen, "%s: %s: a ByteLevel pre-tokenizer is supported only as the last step", L->path, where);
        if (get_flag(L, v, "add_prefix_space", where, 1, &p->add_prefix_space) ||
            get_flag(L, v, "use_regex", where, 1, &p->use_regex)) return -1;
        L->t->bpe.bytelevel = 1;
        if (p->use_regex)
            return tk_pattern_compile(&p->pat, GPT2_REGEX, strlen(GPT2_REGEX), 1, "ByteLevel regex", L->err, L->errlen);
        return 0;
    }
    if (!strcmp(type, "Digits")) {
        p->type = TP_DIGITS;
        return get_flag(L, v, "individual_digits", where, 0, &p->individual);
    }
    if (!strcmp(type, "Metaspace")) {
        p->type = TP_METASPACE;
        if (get_replacement(L, v, where, p->repl, &p->repl_len) || prepend_scheme(L, v, where, &p->prepend_scheme)) return -1;
        return get_flag(L, v, "split", where, 1, &p->split);
    }
    if (!strcmp(type, "WhitespaceSplit")) { p->type = TP_WHITESPACE_SPLIT; return 0; }
    if (!strcmp(type, "Whitespace")) {
        /* \w+|[^\w\s]+ kept, the rest removed */
        p->type = TP_SPLIT;
        p->behavior = TB_REMOVED;
        p->invert = 1;
        return tk_pattern_compile(&p->pat, "\\w+|[^\\w\\s]+", 12, 1, "Whitespace regex", L->err, L->errlen);
    }
    return ci_err(L->err, L->errlen, "%s: %s: pre-tokenizer type '%s' is not supported", L->path, where, type);
}

/* ---- decoders ---- */

static int parse_dec(loader *L, const tj_val *v, const char *where, tk_dec *d) {
    const char *type;
    memset(d, 0, sizeof *d);
    if (get_type(L, v, where, &type)) return -1;
    char sub[300];
    if (!strcmp(type, "Sequence")) {
        const tj_val *arr;
        d->type = TD_SEQ;
        if (get_kids(L, v, "decoders", where, &arr)) return -1;
        if (arr->n && !(d->kids = calloc(arr->n, sizeof *d->kids))) return lerr_oom(L);
        for (uint32_t i = 0; i < arr->n; i++) {
            snprintf(sub, sizeof sub, "%s.decoders[%u]", where, i);
            d->nkids = (int)i + 1;
            if (parse_dec(L, &arr->u.kids[i], sub, &d->kids[i])) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) { d->type = TD_BYTELEVEL; return 0; }
    if (!strcmp(type, "ByteFallback")) { d->type = TD_BYTEFALLBACK; L->t->byte_fallback_dec = 1; return 0; }
    if (!strcmp(type, "Fuse")) { d->type = TD_FUSE; return 0; }
    if (!strcmp(type, "Metaspace")) {
        d->type = TD_METASPACE;
        return get_replacement(L, v, where, d->repl, &d->repl_len) || prepend_scheme(L, v, where, &d->prepend_scheme) ? -1 : 0;
    }
    if (!strcmp(type, "Strip")) {
        const char *s;
        size_t n, adv;
        long long a, b;
        d->type = TD_STRIP;
        if (tj_str(v, "content", &s, &n) != 1 || !n || tk_utf8_len((const unsigned char *)s, n) != n)
            return ci_err(L->err, L->errlen, "%s: %s.content: expected one character", L->path, where);
        d->strip_c = tk_utf8_dec((const unsigned char *)s, n, &adv);
        if (tj_int(v, "start", &a) != 1 || tj_int(v, "stop", &b) != 1 || a < 0 || b < 0 || a > 1000000 || b > 1000000)
            return ci_err(L->err, L->errlen, "%s: %s: expected integer start and stop >= 0", L->path, where);
        d->start = (int)a;
        d->stop = (int)b;
        return 0;
    }
    if (!strcmp(type, "Replace")) {
        d->type = TD_REPLACE;
        if (get_pattern(L, v, where, &d->pat)) return -1;
        return get_string(L, v, "content", where, &d->str, &d->str_len, 1);
    }
    return ci_err(L->err, L->errlen, "%s: %s: decoder type '%s' is not supported", L->path, where, type);
}

/* ---- post-processor ---- */

static int ids_append(int **arr, int *n, int id) {
    int *na = realloc(*arr, (size_t)(*n + 1) * sizeof *na);
    if (!na) return -1;
    na[(*n)++] = id;
    *arr = na;
    return 0;
}

static int parse_post(loader *L, const tj_val *v, const char *where, tk_post *post) {
    const char *type;
    char sub[300];
    if (get_type(L, v, where, &type)) return -1;
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        const tj_val *arr;
        if (get_kids(L, v, "processors", where, &arr)) return -1;
        for (uint32_t i = 0; i < arr->n; i++) {
            snprintf(sub, sizeof sub, "%s.processors[%u]", where, i);
            if (parse_post(L, &arr->u.kids[i], sub, post)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        const tj_val *cls = tj_get(v, "cls"), *sep = tj_get(v, "sep");
        if (!cls || cls->type != TJ_ARR || cls->n != 2 || cls->u.kids[1].type != TJ_NUM ||
            !sep || sep->type != TJ_ARR || sep->n != 2 || sep->u.kids[1].type != TJ_NUM)
            return ci_err(L->err, L->errlen, "%s: %s: expected cls and sep as [token, id]", L->path, where);
        if (ids_append(&post->pre, &post->npre, (int)cls->u.kids[1].u.num) ||
            ids_append(&post->post, &post->npost, (int)sep->u.kids[1].u.num)) return lerr_oom(L);
        return 0;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        const tj_val *single, *specials = tj_get(v, "special_tokens");
        if (get_kids(L, v, "single", where, &single)) return -1;
        int seen_seq = 0;
        for (uint32_t i = 0; i < single->n; i++) {
            const tj_val *it = &single->u.kids[i], *st = tj_get(it, "SpecialToken");
            if (tj_get(it, "Sequence")) { seen_seq = 1; continue; }
            const char *name;
            size_t nl;
            if (!st || tj_str(st, "id", &name, &nl) != 1)
                return ci_err(L->err, L->errlen, "%s: %s.single[%u]: expected SpecialToken or Sequence", L->path, where, i);
            const tj_val *spec = tj_get(specials, name), *ids = tj_get(spec, "ids");
            if (!ids || ids->type != TJ_ARR)
                return ci_err(L->err, L->errlen, "%s: %s.special_tokens: no ids for '%s'", L->path, where, name);
            for (uint32_t k = 0; k < ids->n; k++) {
                if (ids->u.kids[k].type != TJ_NUM) return ci_err(L->err, L->errlen, "%s: %s.special_tokens.%s.ids: expected integers", L->path, where, name);
                int id = (int)ids->u.kids[k].u.num;
                if (seen_seq ? ids_append(&post->post, &post->npost, id) : ids_append(&post->pre, &post->npre, id)) return lerr_oom(L);
            }
        }
        return 0;
    }
    return ci_err(L->err, L->errlen, "%s: %s: post-processor type '%s' is not supported", L->path, where, type);
}

/* ---- model ---- */

static int parse_model(loader *L, const tj_val *m, const tj_val *added) {
    tok_tokenizer *t = L->t;
    tk_bpe *b = &t->bpe;
    const char *type;
    size_t n;
    if (!m || m->type != TJ_OBJ) return ci_err(L->err, L->errlen, "%s: model: expected an object", L->path);
    if (tj_str(m, "type", &type, &n) == 1 && strcmp(type, "BPE"))
        return ci_err(L->err, L->errlen, "%s: model.type '%s' is not supported (BPE only)", L->path, type);
    const tj_val *vocab = tj_get(m, "vocab"), *merges = tj_get(m, "merges");
    if (!vocab || vocab->type != TJ_OBJ) return ci_err(L->err, L->errlen, "%s: model.vocab: expected an object", L->path);
    if (!merges || merges->type != TJ_ARR) return ci_err(L->err, L->errlen, "%s: model.merges: expected an array", L->path);
    double dp;
    const tj_val *dv = tj_get(m, "dropout");
    if (dv && dv->type == TJ_NUM && (dp = dv->u.num) > 0)
        return ci_err(L->err, L->errlen, "%s: model.dropout %g: BPE dropout is not supported", L->path, dp);
    if (get_flag(L, m, "fuse_unk", "model", 0, &b->fuse_unk) || get_flag(L, m, "byte_fallback", "model", 0, &b->byte_fallback) ||
        get_flag(L, m, "ignore_merges", "model", 0, &b->ignore_merges)) return -1;
    if (get_string(L, m, "continuing_subword_prefix", "model", &b->cont_prefix, &b->cont_prefix_len, 0) ||
        get_string(L, m, "end_of_word_suffix", "model", &b->eow_suffix, &b->eow_suffix_len, 0)) return -1;
    if (b->cont_prefix_len > 64 || b->eow_suffix_len > 64)
        return ci_err(L->err, L->errlen, "%s: model: continuing_subword_prefix / end_of_word_suffix longer than 64 bytes", L->path);
    if (b->bytelevel && (b->cont_prefix_len || b->eow_suffix_len))
        return ci_err(L->err, L->errlen, "%s: model: continuing_subword_prefix / end_of_word_suffix with ByteLevel is not supported", L->path);

    /* id space: vocab ids and added-token ids */
    long long maxid = -1;
    for (uint32_t i = 0; i < vocab->n; i++) {
        const tj_val *e = &vocab->u.kids[i];
        if (e->type != TJ_NUM || e->u.num < 0 || e->u.num > 16777216 || e->u.num != (double)(long long)e->u.num)
            return ci_err(L->err, L->errlen, "%s: model.vocab[\"%.*s\"]: expected an id in [0, 2^24]", L->path, (int)e->key_len, e->key);
        if ((long long)e->u.num > maxid) maxid = (long long)e->u.num;
    }
    for (uint32_t i = 0; added && i < added->n; i++) {
        long long id;
        if (tj_int(&added->u.kids[i], "id", &id) != 1 || id < 0 || id > 16777216)
            return ci_err(L->err, L->errlen, "%s: added_tokens[%u].id: expected an id in [0, 2^24]", L->path, i);
        if (id > maxid) maxid = id;
    }
    if (maxid < 0) return ci_err(L->err, L->errlen, "%s: model.vocab is empty", L->path);
    t->n_vocab = (int)maxid + 1;
    t->piece = calloc((size_t)t->n_vocab, sizeof *t->piece);
    t->piece_len = calloc((size_t)t->n_vocab, sizeof *t->piece_len);
    t->is_special = calloc((size_t)t->n_vocab, 1);
    t->is_added = calloc((size_t)t->n_vocab, 1);
    if (!t->piece || !t->piece_len || !t->is_special || !t->is_added) return lerr_oom(L);
    if (tk_sm_init(&b->vocab, vocab->n) || tk_pm_init(&b->merges, merges->n)) return lerr_oom(L);

    /* Pieces: one block for all strings. */
    size_t total = 0;
    for (uint32_t i = 0; i < vocab->n; i++) total += vocab->u.kids[i].key_len + 1;
    for (uint32_t i = 0; added && i < added->n; i++) {
        const char *s;
        size_t l;
        if (tj_str(&added->u.kids[i], "content", &s, &l) == 1) total += l + 1;
    }
    char *mem = malloc(total + 1);
    if (!mem) return lerr_oom(L);
    t->piece_mem = mem;
    L->piece_next = mem;
    tk_buf raw = { 0 };
    for (uint32_t i = 0; i < vocab->n; i++) {
        const tj_val *e = &vocab->u.kids[i];
        int id = (int)e->u.num;
        memcpy(mem, e->key, e->key_len);
        mem[e->key_len] = 0;
        t->piece[id] = mem;
        t->piece_len[id] = e->key_len;
        mem += e->key_len + 1;
        L->piece_next = mem;
        if (b->bytelevel) {
            if (tk_buf_reserve(&raw, e->key_len)) return lerr_oom(L);
            long rl = unmap_bytelevel(e->key, e->key_len, raw.p, e->key_len);
            if (rl < 0) continue; /* outside the alphabet: BPE never builds it */
            if (tk_sm_put(&b->vocab, raw.p, (size_t)rl, id)) { tk_buf_free(&raw); return lerr_oom(L); }
        } else if (tk_sm_put(&b->vocab, e->key, e->key_len, id)) return lerr_oom(L);
    }

    /* Merges: "a b" strings or ["a", "b"] pairs; rank = position. */
    tk_buf ab = { 0 };
    int rc = 0;
    for (uint32_t i = 0; i < merges->n && !rc; i++) {
        const tj_val *e = &merges->u.kids[i];
        const char *a, *bb;
        size_t al, bl;
        if (e->type == TJ_STR) {
            const char *sp = memchr(e->u.s, ' ', e->n);
            if (!sp) { rc = ci_err(L->err, L->errlen, "%s: model.merges[%u]: expected \"a b\"", L->path, i); break; }
            a = e->u.s; al = (size_t)(sp - a); bb = sp + 1; bl = e->n - al - 1;
        } else if (e->type == TJ_ARR && e->n == 2 && e->u.kids[0].type == TJ_STR && e->u.kids[1].type == TJ_STR) {
            a = e->u.kids[0].u.s; al = e->u.kids[0].n; bb = e->u.kids[1].u.s; bl = e->u.kids[1].n;
        } else { rc = ci_err(L->err, L->errlen, "%s: model.merges[%u]: expected \"a b\" or [a, b]", L->path, i); break; }
        int ia = vocab_lookup(t, a, al), ib = vocab_lookup(t, bb, bl);
        ab.n = 0;
        size_t skip = b->cont_prefix_len && bl >= b->cont_prefix_len && !memcmp(bb, b->cont_prefix, b->cont_prefix_len) ? b->cont_prefix_len : 0;
        if (tk_buf_put(&ab, a, al) || tk_buf_put(&ab, bb + skip, bl - skip)) { rc = lerr_oom(L); break; }
        int iab = vocab_lookup(t, ab.p, ab.n);
        if (ia < 0 || ib < 0 || iab < 0) {
            rc = ci_err(L->err, L->errlen, "%s: model.merges[%u] '%.*s' + '%.*s': %s not in the vocab", L->path, i,
                        (int)al, a, (int)bl, bb, ia < 0 ? "left part" : ib < 0 ? "right part" : "merged token");
            break;
        }
        if (tk_pm_put(&b->merges, ia, ib, (int)i, iab)) rc = lerr_oom(L);
    }
    tk_buf_free(&ab);
    tk_buf_free(&raw);
    if (rc) return -1;

    for (int k = 0; k < 256; k++) {
        if (b->bytelevel) {
            char c = (char)k;
            b->byte_id[k] = tk_sm_get(&b->vocab, &c, 1);
        } else {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", k);
            b->byte_id[k] = b->byte_fallback ? tk_sm_get(&b->vocab, name, 6) : -1;
        }
    }
    b->unk_id = -1;
    const char *unk;
    if (tj_str(m, "unk_token", &unk, &n) == 1) {
        b->unk_id = vocab_lookup(t, unk, n);
        if (b->unk_id < 0) return ci_err(L->err, L->errlen, "%s: model.unk_token '%s' is not in the vocab", L->path, unk);
    }
    return 0;
}

/* ---- added tokens ---- */

static int trie_add(tk_trie *tr, const char *s, size_t n, int tok) {
    int32_t parent = -1; /* -1: the root table, indexed by the first byte */
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)s[i];
        int32_t k = parent < 0 ? tr->root[c] : tr->nodes[parent].child, prev = -1;
        while (k >= 0 && tr->nodes[k].byte != c) { prev = k; k = tr->nodes[k].sibling; }
        if (k < 0) {
            if (tr->n == tr->cap) {
                size_t nc = tr->cap ? tr->cap * 2 : 256;
                tk_trie_node *nn = realloc(tr->nodes, nc * sizeof *nn);
                if (!nn) return -1;
                tr->nodes = nn; tr->cap = nc;
            }
            k = (int32_t)tr->n++;
            tr->nodes[k] = (tk_trie_node){ -1, -1, -1, c };
            if (parent < 0) tr->root[c] = k;
            else if (prev < 0) tr->nodes[parent].child = k;
            else tr->nodes[prev].sibling = k;
        }
        if (i + 1 == n) { if (tr->nodes[k].tok < 0) tr->nodes[k].tok = tok; return 0; }
        parent = k;
    }
    return 0;
}

/* Longest added token (index) matching s at its start; its length in *len. -1 if none. */
static int trie_longest(const tk_trie *tr, const char *s, size_t n, size_t *len) {
    if (!n) return -1;
    int32_t k = tr->root[(unsigned char)s[0]];
    int best = -1;
    size_t i = 0;
    while (k >= 0) {
        const tk_trie_node *nd = &tr->nodes[k];
        if (nd->tok >= 0) { best = nd->tok; *len = i + 1; }
        if (++i >= n) break;
        k = nd->child;
        while (k >= 0 && tr->nodes[k].byte != (uint8_t)s[i]) k = tr->nodes[k].sibling;
    }
    return best;
}

static int parse_added(loader *L, const tj_val *added, pcre2_match_data *md) {
    tok_tokenizer *t = L->t;
    for (int k = 0; k < 256; k++) t->trie_raw.root[k] = t->trie_norm.root[k] = -1;
    if (tk_sm_init(&t->added_map, added ? added->n : 1)) return lerr_oom(L);
    if (!added) return 0;
    t->added = calloc(added->n ? added->n : 1, sizeof *t->added);
    if (!t->added) return lerr_oom(L);
    char *mem = L->piece_next; /* added-token contents follow the vocab pieces */
    tk_buf nb = { 0 };
    for (uint32_t i = 0; i < added->n; i++) {
        const tj_val *e = &added->u.kids[i];
        tk_added *a = &t->added[i];
        const char *s;
        size_t n;
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%u]", i);
        long long id;
        tj_int(e, "id", &id);
        if (tj_str(e, "content", &s, &n) != 1 || !n) { tk_buf_free(&nb); return ci_err(L->err, L->errlen, "%s: %s.content: expected a non-empty string", L->path, where); }
        if (tk_utf8_check((const unsigned char *)s, n) != n) { tk_buf_free(&nb); return ci_err(L->err, L->errlen, "%s: %s.content: invalid UTF-8", L->path, where); }
        a->id = (int)id;
        memcpy(mem, s, n);
        mem[n] = 0;
        a->content = mem;
        a->len = n;
        mem += n + 1;
        if (get_flag(L, e, "special", where, 0, &a->special) || get_flag(L, e, "normalized", where, !a->special, &a->normalized) ||
            get_flag(L, e, "lstrip", where, 0, &a->lstrip) || get_flag(L, e, "rstrip", where, 0, &a->rstrip) ||
            get_flag(L, e, "single_word", where, 0, &a->single_word)) { tk_buf_free(&nb); return -1; }
        t->piece[a->id] = a->content;
        t->piece_len[a->id] = (uint32_t)n;
        t->is_added[a->id] = 1;
        t->is_special[a->id] = (unsigned char)a->special;
        if (tk_sm_put(&t->added_map, s, n, (int)i)) { tk_buf_free(&nb); return lerr_oom(L); }
        a->match = a->content;
        a->match_len = n;
        if (a->normalized && t->norm) {
            if (tk_norm_apply(t->norm, s, n, &nb, md, L->err, L->errlen)) { tk_buf_free(&nb); return -1; }
            if (!(a->match = dupn(nb.p ? nb.p : "", nb.n))) { tk_buf_free(&nb); return lerr_oom(L); }
            a->match_len = nb.n;
        }
        t->n_added = (int)i + 1;
        if (trie_add(a->normalized ? &t->trie_norm : &t->trie_raw, a->match, a->match_len, (int)i)) { tk_buf_free(&nb); return lerr_oom(L); }
    }
    tk_buf_free(&nb);
    return 0;
}

/* ---- tokenizer_config.json / special_tokens_map.json ----
 * Read with the same in-place reader: these files hold integers such as
 * model_max_length = 1e30 that jansson refuses. */

static int read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen);

static int token_content(const tj_val *cfg, const char *key, const char **s) {
    const tj_val *v = tj_get(cfg, key);
    size_t n;
    if (!v || v->type == TJ_NULL) return 0;
    if (v->type == TJ_STR) { *s = v->u.s; return 1; }
    if (v->type == TJ_OBJ && tj_str(v, "content", s, &n) == 1) return 1;
    return -1;
}

static int resolve_token(loader *L, const char *file, const char *key, const char *content, int *out) {
    int id = tok_piece_to_id(L->t, content, strlen(content));
    if (id < 0) return ci_err(L->err, L->errlen, "%s: %s '%s' is not a token of tokenizer.json", file, key, content);
    *out = id;
    return 0;
}

static int config_file(loader *L, const char *path, int is_config) {
    tok_tokenizer *t = L->t;
    char *buf = NULL;
    size_t len = 0;
    if (read_file(path, &buf, &len, L->err, L->errlen)) return -1;
    tj_doc *doc = tj_parse(buf, len, path, L->err, L->errlen);
    int rc = -1;
    if (!doc) goto done;
    const tj_val *cfg = tj_root(doc);
    if (cfg->type != TJ_OBJ) { ci_err(L->err, L->errlen, "%s: expected a JSON object", path); goto done; }
    const char *b = NULL, *e = NULL;
    int rb = token_content(cfg, "bos_token", &b), re = token_content(cfg, "eos_token", &e);
    if (rb < 0 || re < 0) { ci_err(L->err, L->errlen, "%s: %s: expected a string or {\"content\": ...}", path, rb < 0 ? "bos_token" : "eos_token"); goto done; }
    if (rb > 0 && t->bos_id < 0 && resolve_token(L, path, "bos_token", b, &t->bos_id)) goto done;
    if (re > 0 && t->eos_id < 0 && resolve_token(L, path, "eos_token", e, &t->eos_id)) goto done;
    if (is_config) {
        int ab = 0, ae = 0;
        int hb = tj_bool(cfg, "add_bos_token", &ab), he = tj_bool(cfg, "add_eos_token", &ae);
        if (hb < 0 || he < 0) { ci_err(L->err, L->errlen, "%s: %s: expected true or false", path, hb < 0 ? "add_bos_token" : "add_eos_token"); goto done; }
        if (hb > 0 || he > 0) {
            /* transformers 4's fast tokenizers rebuild the post-processor from these flags */
            free(t->post.pre); free(t->post.post);
            memset(&t->post, 0, sizeof t->post);
            if (ab) {
                if (t->bos_id < 0) { ci_err(L->err, L->errlen, "%s: add_bos_token is true but bos_token is not set", path); goto done; }
                if (ids_append(&t->post.pre, &t->post.npre, t->bos_id)) { lerr_oom(L); goto done; }
            }
            if (ae) {
                if (t->eos_id < 0) { ci_err(L->err, L->errlen, "%s: add_eos_token is true but eos_token is not set", path); goto done; }
                if (ids_append(&t->post.post, &t->post.npost, t->eos_id)) { lerr_oom(L); goto done; }
            }
        }
    }
    rc = 0;
done:
    tj_free(doc);
    free(buf);
    return rc;
}

static int load_config(loader *L, const char *dir) {
    char path[600];
    const char *files[2] = { "tokenizer_config.json", "special_tokens_map.json" };
    for (int f = 0; f < 2; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        FILE *fp = fopen(path, "rb");
        if (!fp) continue;
        fclose(fp);
        if (config_file(L, path, f == 0)) return -1;
    }
    return 0;
}

/* ---- load ---- */

static int read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ci_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) || ftell(f) < 0) { fclose(f); return ci_err(err, errlen, "%s: cannot seek", path); }
    long sz = ftell(f);
    rewind(f);
    *buf = malloc((size_t)sz + 1);
    if (!*buf) { fclose(f); return ci_err(err, errlen, "%s: out of memory (%ld bytes)", path, sz); }
    *len = fread(*buf, 1, (size_t)sz, f);
    int bad = ferror(f) || *len != (size_t)sz;
    fclose(f);
    if (bad) { free(*buf); *buf = NULL; return ci_err(err, errlen, "%s: read error", path); }
    return 0;
}

int tok_load(const char *dir, tok_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return ci_err(err, errlen, "%s: out of memory", dir);
    pthread_mutex_init(&t->bpe.mu, NULL);
    t->bos_id = t->eos_id = -1;
    snprintf(t->path, sizeof t->path, "%s/tokenizer.json", dir);
    loader L = { t, t->path, err, errlen, NULL };
    char *buf = NULL;
    size_t len = 0;
    tj_doc *doc = NULL;
    pcre2_match_data *md = pcre2_match_data_create(64, NULL);
    if (!md) { ci_err(err, errlen, "%s: out of memory", t->path); goto fail; }
    if (read_file(t->path, &buf, &len, err, errlen)) goto fail;
    if (!(doc = tj_parse(buf, len, t->path, err, errlen))) goto fail;
    const tj_val *root = tj_root(doc), *v;
    if (root->type != TJ_OBJ) { ci_err(err, errlen, "%s: expected a JSON object", t->path); goto fail; }
    /* The pre-tokenizer first: it decides byte-level mode, which keys the vocab. */
    if ((v = tj_get(root, "pre_tokenizer")) && v->type != TJ_NULL) {
        if (!(t->pre = calloc(1, sizeof *t->pre))) { lerr_oom(&L); goto fail; }
        if (parse_pre(&L, v, "pre_tokenizer", t->pre, 1)) goto fail;
    }
    if ((v = tj_get(root, "normalizer")) && v->type != TJ_NULL) {
        if (!(t->norm = calloc(1, sizeof *t->norm))) { lerr_oom(&L); goto fail; }
        if (parse_norm(&L, v, "normalizer", t->norm)) goto fail;
    }
    if ((v = tj_get(root, "decoder")) && v->type != TJ_NULL) {
        if (!(t->dec = calloc(1, sizeof *t->dec))) { lerr_oom(&L); goto fail; }
        if (parse_dec(&L, v, "decoder", t->dec)) goto fail;
    }
    const tj_val *added = tj_get(root, "added_tokens");
    if (added && added->type == TJ_NULL) added = NULL;
    if (added && added->type != TJ_ARR) { ci_err(err, errlen, "%s: added_tokens: expected an array", t->path); goto fail; }
    if (parse_model(&L, tj_get(root, "model"), added)) goto fail;
    if (parse_added(&L, added, md)) goto fail;
    if ((v = tj_get(root, "post_processor")) && v->type != TJ_NULL && parse_post(&L, v, "post_processor", &t->post)) goto fail;
    for (int i = 0; i < t->post.npre + t->post.npost; i++) {
        int id = i < t->post.npre ? t->post.pre[i] : t->post.post[i - t->post.npre];
        if (id < 0 || id >= t->n_vocab) { ci_err(err, errlen, "%s: post_processor: token id %d out of range", t->path, id); goto fail; }
    }
    tj_free(doc);
    doc = NULL;
    free(buf);
    buf = NULL;
    if (load_config(&L, dir)) goto fail;
    pcre2_match_data_free(md);
    *out = t;
    return 0;
fail:
    if (md) pcre2_match_data_free(md);
    tj_free(doc);
    free(buf);
    tok_free(t);
    return -1;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_added; i++) if (t->added[i].match != t->added[i].content) free(t->added[i].match);
    free(t->added);
    tk_sm_free(&t->added_map);
    free(t->trie_raw.nodes);
    free(t->trie_norm.nodes);
    tk_norm_free(t->norm); free(t->norm);
    tk_pre_free(t->pre); free(t->pre);
    tk_dec_free(t->dec); free(t->dec);
    tk_bpe_free(&t->bpe);
    pthread_mutex_destroy(&t->bpe.mu);
    free(t->post.pre);
    free(t->post.post);
    free(t->piece);
    free(t->piece_len);
    free(t->is_special);
    free(t->is_added);
    free(t->piece_mem);
    free(t);
}

/* ---- encode ---- */

typedef struct {
    tok_tokenizer *t;
    int *ids; size_t n, cap;
    pcre2_match_data *md;
    tk_buf norm;
    tk_pieces pieces;
    char *err; size_t errlen;
} encoder;

static int push(encoder *E, int id) {
    if (E->n == E->cap) {
        size_t nc = E->cap ? E->cap * 2 : 64;
        int *ni = realloc(E->ids, nc * sizeof *ni);
        if (!ni) return ci_err(E->err, E->errlen, "tokenizer: out of memory");
        E->ids = ni; E->cap = nc;
    }
    E->ids[E->n++] = id;
    return 0;
}

/* Pre-tokenizes and BPE-encodes s (normalized text without added tokens). */
static int encode_plain(encoder *E, const char *s, size_t n, int first) {
    tok_tokenizer *t = E->t;
    if (!n) return 0;
    tk_pieces *p = &E->pieces;
    p->n = 0;
    p->text.n = 0;
    if (tk_buf_put(&p->text, s, n) || tk_pieces_add(p, 0, n, first)) return ci_err(E->err, E->errlen, "tokenizer: out of memory");
    if (t->pre && tk_pre_apply(t->pre, p, E->md, E->err, E->errlen)) return -1;
    for (size_t i = 0; i < p->n; i++)
        if (tk_bpe_word(&t->bpe, p->text.p + p->sp[i].off, p->sp[i].len, &E->ids, &E->n, &E->cap, E->err, E->errlen)) return -1;
    return 0;
}

static int is_word_char(uint32_t c) {
    if (c == '_') return 1;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

static uint32_t char_before(const char *s, size_t i) {
    size_t k = i - 1, adv;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    return tk_utf8_dec((const unsigned char *)s + k, i - k, &adv);
}

/* Splits s on added tokens of trie tr; gaps go to fn(E, gap, len, first). */
typedef int (*gap_fn)(encoder *E, const char *s, size_t n, int first);

static int split_added(encoder *E, const tk_trie *tr, const char *s, size_t n, int first, gap_fn fn) {
    tok_tokenizer *t = E->t;
    size_t gap = 0, i = 0;
    while (i < n) {
        size_t ml = 0;
        int k = tr->n ? trie_longest(tr, s + i, n - i, &ml) : -1;
        if (k < 0) { i++; continue; }
        const tk_added *a = &t->added[k];
        size_t ms = i, me = i + ml, adv;
        if (a->single_word) {
            int ok = (ms == 0 || !is_word_char(char_before(s, ms))) &&
                     (me == n || !is_word_char(tk_utf8_dec((const unsigned char *)s + me, n - me, &adv)));
            if (!ok) { i++; continue; }
        }
        if (a->lstrip)
            while (ms > gap && tk_is_whitespace(char_before(s, ms))) {
                size_t k2 = ms - 1;
                while (k2 > gap && ((unsigned char)s[k2] & 0xC0) == 0x80) k2--;
                ms = k2;
            }
        if (a->rstrip)
            while (me < n) {
                uint32_t c = tk_utf8_dec((const unsigned char *)s + me, n - me, &adv);
                if (!tk_is_whitespace(c)) break;
                me += adv;
            }
        if (fn(E, s + gap, ms - gap, first && gap == 0)) return -1;
        if (push(E, a->id)) return -1;
        gap = i = me;
    }
    return fn(E, s + gap, n - gap, first && gap == 0);
}

static int encode_normalized_gap(encoder *E, const char *s, size_t n, int first) {
    return encode_plain(E, s, n, first);
}

static int encode_raw_gap(encoder *E, const char *s, size_t n, int first) {
    tok_tokenizer *t = E->t;
    if (!n) return 0;
    if (!t->norm) return split_added(E, &t->trie_norm, s, n, first, encode_normalized_gap);
    tk_buf nb = { 0 };
    int rc = tk_norm_apply(t->norm, s, n, &nb, E->md, E->err, E->errlen);
    if (!rc) rc = split_added(E, &t->trie_norm, nb.p ? nb.p : "", nb.n, first, encode_normalized_gap);
    tk_buf_free(&nb);
    return rc;
}

int tok_encode(tok_tokenizer *t, const char *text, size_t len, int add_special, int **ids, size_t *n,
               char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    size_t bad = tk_utf8_check((const unsigned char *)text, len);
    if (bad != len)
        return ci_err(err, errlen, "tokenize: input is not valid UTF-8 (byte 0x%02X at offset %zu)", (unsigned char)text[bad], bad);
    encoder E = { .t = t, .err = err, .errlen = errlen };
    E.md = pcre2_match_data_create(64, NULL);
    int rc = -1;
    if (!E.md) { ci_err(err, errlen, "tokenizer: out of memory"); goto done; }
    if (add_special) for (int i = 0; i < t->post.npre; i++) if (push(&E, t->post.pre[i])) goto done;
    if (split_added(&E, &t->trie_raw, text, len, 1, encode_raw_gap)) goto done;
    if (add_special) for (int i = 0; i < t->post.npost; i++) if (push(&E, t->post.post[i])) goto done;
    rc = 0;
done:
    if (E.md) pcre2_match_data_free(E.md);
    tk_buf_free(&E.norm);
    tk_pieces_free(&E.pieces);
    if (rc) { free(E.ids); return -1; }
    if (!E.ids) E.ids = malloc(sizeof(int)); /* a valid pointer even for no ids */
    if (!E.ids) return ci_err(err, errlen, "tokenizer: out of memory");
    *ids = E.ids;
    *n = E.n;
    return 0;
}

/* ---- accessors ---- */

int tok_n_vocab(const tok_tokenizer *t) { return t->n_vocab; }

const char *tok_id_to_piece(const tok_tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || !t->piece[id]) return NULL;
    if (len) *len = t->piece_len[id];
    return t->piece[id];
}

int tok_is_special(const tok_tokenizer *t, int id) { return id >= 0 && id < t->n_vocab && t->is_special[id]; }
int tok_bos_id(const tok_tokenizer *t) { return t->bos_id; }
int tok_eos_id(const tok_tokenizer *t) { return t->eos_id; }
