/* tok_pretok.c — pre-tokenizers: Split (literal or regex, five behaviors, invert),
 * ByteLevel (add_prefix_space, use_regex), Digits, Metaspace, WhitespaceSplit, Sequence.
 *
 * A step turns every piece into sub-pieces, as Hugging Face's PreTokenizedString::split:
 * the pattern yields a list of (range, is_match) covering the piece, the behavior merges
 * or drops ranges, and empty pieces are dropped. Steps that only split keep the text
 * buffer and rewrite the span list; steps that change text (Metaspace, ByteLevel's prefix
 * space) write a new buffer. In byte-level mode the tokenizer keys its vocab by raw bytes,
 * so ByteLevel never rewrites bytes into the GPT-2 alphabet here. */
#include "tok_internal.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct { size_t s, e; int m; } tk_mt;
typedef struct { tk_mt *v; size_t n, cap; } tk_mts;

static int mt_add(tk_mts *m, size_t s, size_t e, int is_match) {
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 64;
        tk_mt *nv = realloc(m->v, nc * sizeof *nv);
        if (!nv) return -1;
        m->v = nv; m->cap = nc;
    }
    m->v[m->n++] = (tk_mt){ s, e, is_match };
    return 0;
}

int tk_pieces_add(tk_pieces *p, size_t off, size_t len, int first) {
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 64;
        tk_span *ns = realloc(p->sp, nc * sizeof *ns);
        if (!ns) return -1;
        p->sp = ns; p->cap = nc;
    }
    p->sp[p->n++] = (tk_span){ off, len, first };
    return 0;
}

void tk_pieces_free(tk_pieces *p) {
    tk_buf_free(&p->text);
    free(p->sp);
    memset(p, 0, sizeof *p);
}

static int oom(char *err, size_t errlen) { return ci_err(err, errlen, "tokenizer: out of memory pre-tokenizing"); }

/* ---- match lists ---- */

static int find_pattern(const tk_pattern *pat, const char *s, size_t n, pcre2_match_data *md, tk_mts *m,
                        char *err, size_t errlen) {
    size_t prev = 0, pos = 0, ms, me;
    while (pos <= n) {
        int f = tk_pattern_find(pat, s, n, pos, md, &ms, &me, err, errlen);
        if (f < 0) return -1;
        if (!f) break;
        if (prev != ms && mt_add(m, prev, ms, 0)) return oom(err, errlen);
        if (mt_add(m, ms, me, 1)) return oom(err, errlen);
        prev = me;
        if (me == ms) { /* empty match: step over one character */
            if (me >= n) break;
            size_t l = tk_utf8_len((const unsigned char *)s + me, n - me);
            pos = me + (l ? l : 1);
        } else pos = me;
    }
    if (prev != n && mt_add(m, prev, n, 0)) return oom(err, errlen);
    return 0;
}

/* A character predicate: every matching character is a match of its own. */
typedef int (*char_pred)(uint32_t c, const void *arg);

static int find_chars(char_pred pred, const void *arg, const char *s, size_t n, tk_mts *m) {
    size_t last = 0;
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t c = tk_utf8_dec((const unsigned char *)s + i, n - i, &adv);
        if (pred(c, arg)) {
            if (last < i && mt_add(m, last, i, 0)) return -1;
            if (mt_add(m, i, i + adv, 1)) return -1;
            last = i + adv;
        }
        i += adv;
    }
    if (last < n && mt_add(m, last, n, 0)) return -1;
    return 0;
}

/* Applies a behavior to the match list in place; result ranges have m = 0. */
static void apply_behavior(tk_mts *m, int behavior, int invert) {
    if (invert) for (size_t i = 0; i < m->n; i++) m->v[i].m = !m->v[i].m;
    size_t o = 0;
    int prev_match = 0;
    switch (behavior) {
    case TB_ISOLATED:
        return;
    case TB_REMOVED:
        for (size_t i = 0; i < m->n; i++) if (!m->v[i].m) m->v[o++] = m->v[i];
        m->n = o;
        return;
    case TB_MERGED_PREV:
        for (size_t i = 0; i < m->n; i++) {
            tk_mt t = m->v[i];
            if (t.m && !prev_match && o > 0) m->v[o - 1].e = t.e;
            else m->v[o++] = t;
            prev_match = t.m;
        }
        m->n = o;
        return;
    case TB_CONTIGUOUS:
        for (size_t i = 0; i < m->n; i++) {
            tk_mt t = m->v[i];
            if (i > 0 && t.m == prev_match && o > 0) m->v[o - 1].e = t.e;
            else m->v[o++] = t;
            prev_match = t.m;
        }
        m->n = o;
        return;
    case TB_MERGED_NEXT: {
        /* Walk backwards: a match not preceded (in reverse order) by a match joins the
         * range after it. Built reversed into the tail, then moved to the front. */
        size_t w = m->n;
        for (size_t k = m->n; k-- > 0;) {
            tk_mt t = m->v[k];
            if (t.m && !prev_match && w < m->n) m->v[w].s = t.s;
            else m->v[--w] = t;
            prev_match = t.m;
        }
        memmove(m->v, m->v + w, (m->n - w) * sizeof *m->v);
        m->n -= w;
        return;
    }
    }
}

/* Rewrites the spans of p: each span is replaced by the ranges fn yields. */
typedef int (*matcher)(const tk_pre *pre, const char *s, size_t n, pcre2_match_data *md, tk_mts *m,
                       char *err, size_t errlen);

static int split_pieces(const tk_pre *pre, tk_pieces *p, matcher fn, int behavior, int invert,
                        pcre2_match_data *md, char *err, size_t errlen) {
    tk_mts m = { 0 };
    tk_span *out = NULL;
    size_t nout = 0, cap = 0;
    int rc = -1;
    for (size_t i = 0; i < p->n; i++) {
        tk_span sp = p->sp[i];
        m.n = 0;
        if (fn(pre, p->text.p + sp.off, sp.len, md, &m, err, errlen)) goto done;
        apply_behavior(&m, behavior, invert);
        for (size_t k = 0; k < m.n; k++) {
            if (m.v[k].e <= m.v[k].s) continue;
            if (nout == cap) {
                size_t nc = cap ? cap * 2 : 64;
                while (nc < nout + 1) nc *= 2;
                tk_span *ns = realloc(out, nc * sizeof *ns);
                if (!ns) { oom(err, errlen); goto done; }
                out = ns; cap = nc;
            }
            out[nout++] = (tk_span){ sp.off + m.v[k].s, m.v[k].e - m.v[k].s, sp.first && m.v[k].s == 0 };
        }
    }
    free(p->sp);
    p->sp = out; p->n = nout; p->cap = cap;
    out = NULL;
    rc = 0;
done:
    free(out);
    free(m.v);
    return rc;
}

/* ---- the steps ---- */

static int m_split(const tk_pre *pre, const char *s, size_t n, pcre2_match_data *md, tk_mts *m, char *err, size_t errlen) {
    return find_pattern(&pre->pat, s, n, md, m, err, errlen);
}

static int is_numeric(uint32_t c, const void *arg) {
    (void)arg;
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

static int m_digits(const tk_pre *pre, const char *s, size_t n, pcre2_match_data *md, tk_mts *m, char *err, size_t errlen) {
    (void)pre; (void)md;
    return find_chars(is_numeric, NULL, s, n, m) ? oom(err, errlen) : 0;
}

static int is_ws(uint32_t c, const void *arg) { (void)arg; return tk_is_whitespace(c); }

static int m_ws(const tk_pre *pre, const char *s, size_t n, pcre2_match_data *md, tk_mts *m, char *err, size_t errlen) {
    (void)pre; (void)md;
    return find_chars(is_ws, NULL, s, n, m) ? oom(err, errlen) : 0;
}

static int is_repl(uint32_t c, const void *arg) { return c == *(const uint32_t *)arg; }

static int m_metaspace(const tk_pre *pre, const char *s, size_t n, pcre2_match_data *md, tk_mts *m, char *err, size_t errlen) {
    (void)md;
    size_t adv;
    uint32_t r = tk_utf8_dec((const unsigned char *)pre->repl, pre->repl_len, &adv);
    return find_chars(is_repl, &r, s, n, m) ? oom(err, errlen) : 0;
}

/* Rewrites text: for each piece, optional prefix + piece with ' ' replaced (repl != NULL). */
static int rewrite(tk_pieces *p, const tk_pre *pre, char *err, size_t errlen) {
    tk_buf nt = { 0 };
    if (tk_buf_reserve(&nt, p->text.n + p->n * 4)) return oom(err, errlen);
    for (size_t i = 0; i < p->n; i++) {
        tk_span *sp = &p->sp[i];
        const char *s = p->text.p + sp->off;
        size_t off = nt.n;
        if (pre->type == TP_BYTELEVEL) {
            if ((sp->len == 0 || s[0] != ' ') && tk_buf_putc(&nt, ' ')) goto fail;
            if (tk_buf_put(&nt, s, sp->len)) goto fail;
        } else { /* metaspace: spaces become the marker; maybe prepend one */
            int starts = (sp->len && s[0] == ' ') ||
                         (sp->len >= pre->repl_len && !memcmp(s, pre->repl, pre->repl_len));
            int prepend = pre->prepend_scheme == TS_ALWAYS ? !starts
                        : pre->prepend_scheme == TS_FIRST ? (!starts && sp->first) : 0;
            if (prepend && tk_buf_put(&nt, pre->repl, pre->repl_len)) goto fail;
            for (size_t k = 0; k < sp->len; k++) {
                if (s[k] == ' ') { if (tk_buf_put(&nt, pre->repl, pre->repl_len)) goto fail; }
                else if (tk_buf_putc(&nt, s[k])) goto fail;
            }
        }
        sp->off = off;
        sp->len = nt.n - off;
    }
    tk_buf_free(&p->text);
    p->text = nt;
    return 0;
fail:
    tk_buf_free(&nt);
    return oom(err, errlen);
}

int tk_pre_apply(const tk_pre *pre, tk_pieces *p, pcre2_match_data *md, char *err, size_t errlen) {
    switch (pre->type) {
    case TP_SEQ:
        for (int i = 0; i < pre->nkids; i++)
            if (tk_pre_apply(&pre->kids[i], p, md, err, errlen)) return -1;
        return 0;
    case TP_SPLIT:
        return split_pieces(pre, p, m_split, pre->behavior, pre->invert, md, err, errlen);
    case TP_BYTELEVEL:
        if (pre->add_prefix_space && rewrite(p, pre, err, errlen)) return -1;
        if (pre->use_regex) return split_pieces(pre, p, m_split, TB_ISOLATED, 0, md, err, errlen);
        return 0;
    case TP_DIGITS:
        return split_pieces(pre, p, m_digits, pre->individual ? TB_ISOLATED : TB_CONTIGUOUS, 0, md, err, errlen);
    case TP_WHITESPACE_SPLIT:
        return split_pieces(pre, p, m_ws, TB_REMOVED, 0, md, err, errlen);
    case TP_METASPACE:
        if (rewrite(p, pre, err, errlen)) return -1;
        if (pre->split) return split_pieces(pre, p, m_metaspace, TB_MERGED_NEXT, 0, md, err, errlen);
        return 0;
    }
    return ci_err(err, errlen, "tokenizer: unknown pre-tokenizer %d", pre->type);
}

void tk_pre_free(tk_pre *p) {
    if (!p) return;
    for (int i = 0; i < p->nkids; i++) tk_pre_free(&p->kids[i]);
    free(p->kids);
    tk_pattern_free(&p->pat);
}
