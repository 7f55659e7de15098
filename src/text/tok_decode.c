/* tok_decode.c — decoders (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
 * Sequence) and the streaming decoder.
 *
 * Decoding follows Hugging Face's decode: every id becomes its piece string (added tokens
 * included, special ones dropped when asked), the decoder chain maps the list of strings
 * to a new list, and the result is their concatenation. With no decoder the pieces are
 * joined with spaces. ByteLevel turns pieces back into bytes and converts them lossily
 * (invalid runs -> U+FFFD), so the output is always valid UTF-8.
 *
 * Streaming keeps a window of ids: the previous token as context plus the new ones. Each
 * step decodes the window and hands out what extends the context's own text, unless the
 * text ends in U+FFFD (a UTF-8 sequence still incomplete), in which case it waits. Context
 * makes position-dependent decoders (Strip, Metaspace) behave as in a full decode. */
#include "tok_internal.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

typedef tk_pieces strlist; /* a list of strings: spans into one buffer */

static int sl_add(strlist *l, const char *s, size_t n) {
    size_t off = l->text.n;
    if (tk_buf_put(&l->text, s, n)) return -1;
    return tk_pieces_add(l, off, n, 0);
}

static void sl_free(strlist *l) { tk_pieces_free(l); }

static const char *sl_str(const strlist *l, size_t i) { return l->text.p + l->sp[i].off; }

static int oom(char *err, size_t errlen) { return ci_err(err, errlen, "tokenizer: out of memory decoding"); }

static int hex2(const char *s) {
    int v = 0;
    for (int i = 0; i < 2; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int dec_apply(const tk_dec *d, strlist *in, strlist *out, char *err, size_t errlen);

static int dec_bytelevel(strlist *in, strlist *out) {
    tk_buf bytes = { 0 };
    for (size_t i = 0; i < in->n; i++) {
        const unsigned char *s = (const unsigned char *)sl_str(in, i);
        size_t n = in->sp[i].len, start = bytes.n;
        int all = 1;
        for (size_t k = 0; k < n;) {
            size_t adv;
            uint32_t c = tk_utf8_dec(s + k, n - k, &adv);
            int b = tk_cp_to_byte(c);
            if (b < 0) { all = 0; break; }
            if (tk_buf_putc(&bytes, (char)b)) goto fail;
            k += adv;
        }
        if (!all) { bytes.n = start; if (tk_buf_put(&bytes, s, n)) goto fail; }
    }
    tk_buf lossy = { 0 };
    if (tk_utf8_lossy(&lossy, (const unsigned char *)bytes.p, bytes.n) || sl_add(out, lossy.p ? lossy.p : "", lossy.n)) {
        tk_buf_free(&lossy);
        goto fail;
    }
    tk_buf_free(&lossy);
    tk_buf_free(&bytes);
    return 0;
fail:
    tk_buf_free(&bytes);
    return -1;
}

static int dec_bytefallback(strlist *in, strlist *out) {
    tk_buf pend = { 0 };
    size_t npend = 0;
    int rc = -1;
    for (size_t i = 0; i <= in->n; i++) {
        const char *s = i < in->n ? sl_str(in, i) : NULL;
        size_t n = i < in->n ? in->sp[i].len : 0;
        int b = -1;
        if (s && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>') b = hex2(s + 3);
        if (b >= 0) { if (tk_buf_putc(&pend, (char)b)) goto done; npend++; continue; }
        if (npend) {
            if (tk_utf8_check((const unsigned char *)pend.p, pend.n) == pend.n) {
                if (sl_add(out, pend.p, pend.n)) goto done;
            } else {
                for (size_t k = 0; k < npend; k++) if (sl_add(out, "\xEF\xBF\xBD", 3)) goto done;
            }
            pend.n = 0; npend = 0;
        }
        if (s && sl_add(out, s, n)) goto done;
    }
    rc = 0;
done:
    tk_buf_free(&pend);
    return rc;
}

static int dec_fuse(strlist *in, strlist *out) {
    tk_buf all = { 0 };
    for (size_t i = 0; i < in->n; i++) if (tk_buf_put(&all, sl_str(in, i), in->sp[i].len)) { tk_buf_free(&all); return -1; }
    int rc = sl_add(out, all.p ? all.p : "", all.n);
    tk_buf_free(&all);
    return rc;
}

/* Start offsets of the characters of s, plus n at the end; returns the count. */
static size_t char_starts(const unsigned char *s, size_t n, size_t *pos) {
    size_t k = 0;
    for (size_t i = 0; i < n;) { pos[k++] = i; size_t l = tk_utf8_len(s + i, n - i); i += l ? l : 1; }
    pos[k] = n;
    return k;
}

static int dec_strip(const tk_dec *d, strlist *in, strlist *out) {
    for (size_t i = 0; i < in->n; i++) {
        const unsigned char *s = (const unsigned char *)sl_str(in, i);
        size_t n = in->sp[i].len;
        size_t *pos = malloc((n + 1) * sizeof *pos);
        if (!pos) return -1;
        size_t nc = char_starts(s, n, pos), a = 0, b = nc;
        for (int k = 0; k < d->start && a < nc; k++) {
            size_t adv;
            if (tk_utf8_dec(s + pos[a], n - pos[a], &adv) != d->strip_c) break;
            a++;
        }
        for (int k = 0; k < d->stop && b > a; k++) {
            size_t adv;
            if (tk_utf8_dec(s + pos[b - 1], n - pos[b - 1], &adv) != d->strip_c) break;
            b--;
        }
        int rc = sl_add(out, (const char *)s + pos[a], pos[b] - pos[a]);
        free(pos);
        if (rc) return -1;
    }
    return 0;
}

static int dec_replace(const tk_dec *d, strlist *in, strlist *out, char *err, size_t errlen) {
    tk_buf t = { 0 };
    pcre2_match_data *md = d->pat.re ? pcre2_match_data_create_from_pattern(d->pat.re, NULL) : NULL;
    int rc = -1;
    if (d->pat.re && !md) { oom(err, errlen); goto done; }
    for (size_t i = 0; i < in->n; i++) {
        const char *s = sl_str(in, i);
        size_t n = in->sp[i].len, pos = 0, ms, me;
        t.n = 0;
        for (;;) {
            int f = tk_pattern_find(&d->pat, s, n, pos, md, &ms, &me, err, errlen);
            if (f < 0) goto done;
            if (!f || me == ms) break;
            if (tk_buf_put(&t, s + pos, ms - pos) || tk_buf_put(&t, d->str, d->str_len)) { oom(err, errlen); goto done; }
            pos = me;
        }
        if (tk_buf_put(&t, s + pos, n - pos) || sl_add(out, t.p, t.n)) { oom(err, errlen); goto done; }
    }
    rc = 0;
done:
    if (md) pcre2_match_data_free(md);
    tk_buf_free(&t);
    return rc;
}

static int dec_metaspace(const tk_dec *d, strlist *in, strlist *out) {
    tk_buf t = { 0 };
    for (size_t i = 0; i < in->n; i++) {
        const char *s = sl_str(in, i);
        size_t n = in->sp[i].len;
        t.n = 0;
        for (size_t k = 0; k < n;) {
            if (d->repl_len && n - k >= d->repl_len && !memcmp(s + k, d->repl, d->repl_len)) {
                /* As Hugging Face: in the first token every marker is dropped when a prefix
                 * was prepended; elsewhere it is a space. */
                if (!(i == 0 && d->prepend_scheme != TS_NEVER) && tk_buf_putc(&t, ' ')) goto fail;
                k += d->repl_len;
            } else {
                if (tk_buf_putc(&t, s[k])) goto fail;
                k++;
            }
        }
        if (sl_add(out, t.p ? t.p : "", t.n)) goto fail;
    }
    tk_buf_free(&t);
    return 0;
fail:
    tk_buf_free(&t);
    return -1;
}

static int dec_apply(const tk_dec *d, strlist *in, strlist *out, char *err, size_t errlen) {
    switch (d->type) {
    case TD_SEQ: {
        strlist cur = *in, nxt = { 0 };
        memset(in, 0, sizeof *in);
        for (int i = 0; i < d->nkids; i++) {
            if (dec_apply(&d->kids[i], &cur, &nxt, err, errlen)) { sl_free(&cur); sl_free(&nxt); return -1; }
            sl_free(&cur);
            cur = nxt;
            memset(&nxt, 0, sizeof nxt);
        }
        *out = cur;
        return 0;
    }
    case TD_BYTELEVEL: return dec_bytelevel(in, out) ? oom(err, errlen) : 0;
    case TD_BYTEFALLBACK: return dec_bytefallback(in, out) ? oom(err, errlen) : 0;
    case TD_FUSE: return dec_fuse(in, out) ? oom(err, errlen) : 0;
    case TD_STRIP: return dec_strip(d, in, out) ? oom(err, errlen) : 0;
    case TD_REPLACE: return dec_replace(d, in, out, err, errlen);
    case TD_METASPACE: return dec_metaspace(d, in, out) ? oom(err, errlen) : 0;
    }
    return ci_err(err, errlen, "tokenizer: unknown decoder %d", d->type);
}

int tk_decode_ids(const tok_tokenizer *t, const int *ids, size_t n, int skip_special, tk_buf *out,
                  char *err, size_t errlen) {
    strlist in = { 0 }, res = { 0 };
    out->n = 0;
    if (tk_buf_reserve(out, 16)) return oom(err, errlen);
    out->p[0] = 0;
    for (size_t i = 0; i < n; i++) {
        int id = ids[i];
        if (id < 0 || id >= t->n_vocab || !t->piece[id])
            { sl_free(&in); return ci_err(err, errlen, "decode: token id %d is not in the vocabulary (0..%d)", id, t->n_vocab - 1); }
        if (skip_special && t->is_special[id]) continue;
        if (sl_add(&in, t->piece[id], t->piece_len[id])) { sl_free(&in); return oom(err, errlen); }
    }
    if (!t->dec) {
        for (size_t i = 0; i < in.n; i++)
            if ((i && tk_buf_putc(out, ' ')) || tk_buf_put(out, sl_str(&in, i), in.sp[i].len)) { sl_free(&in); return oom(err, errlen); }
        sl_free(&in);
        return 0;
    }
    int rc = dec_apply(t->dec, &in, &res, err, errlen);
    sl_free(&in);
    if (!rc)
        for (size_t i = 0; i < res.n; i++)
            if (tk_buf_put(out, sl_str(&res, i), res.sp[i].len)) { rc = oom(err, errlen); break; }
    sl_free(&res);
    return rc;
}

void tk_dec_free(tk_dec *d) {
    if (!d) return;
    for (int i = 0; i < d->nkids; i++) tk_dec_free(&d->kids[i]);
    free(d->kids);
    tk_pattern_free(&d->pat);
    free(d->str);
}

/* ---- public decode ---- */

int tok_decode(const tok_tokenizer *t, const int *ids, size_t n, int skip_special, char **text, size_t *len,
               char *err, size_t errlen) {
    tk_buf out = { 0 };
    if (tk_decode_ids(t, ids, n, skip_special, &out, err, errlen)) { tk_buf_free(&out); return -1; }
    *text = out.p;
    if (len) *len = out.n;
    return 0;
}

/* ---- streaming ---- */

struct tok_stream {
    const tok_tokenizer *t;
    int skip;
    int *ids; size_t n, cap;
    size_t prefix_index;   /* ids[0..prefix_index) are context whose text was handed out */
    size_t prefix_len;     /* byte length of decode(ids[0..prefix_index)) */
    tk_buf cur, out;
};

tok_stream *tok_stream_new(const tok_tokenizer *t, int skip_special) {
    tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->t = t;
    s->skip = skip_special;
    return s;
}

static int is_byte_piece(const char *p, size_t n) {
    return n == 6 && !memcmp(p, "<0x", 3) && p[5] == '>' && hex2(p + 3) >= 0;
}

static int ends_with_fffd(const tk_buf *b) { return b->n >= 3 && !memcmp(b->p + b->n - 3, "\xEF\xBF\xBD", 3); }

int tok_stream_put(tok_stream *s, int id, const char **text, size_t *len, char *err, size_t errlen) {
    *text = ""; *len = 0;
    if (id < 0 || id >= s->t->n_vocab || !s->t->piece[id])
        return ci_err(err, errlen, "decode: token id %d is not in the vocabulary (0..%d)", id, s->t->n_vocab - 1);
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        int *ni = realloc(s->ids, nc * sizeof *ni);
        if (!ni) return oom(err, errlen);
        s->ids = ni; s->cap = nc;
    }
    s->ids[s->n++] = id;
    /* ByteFallback decodes a run of <0xNN> tokens as a whole (all valid UTF-8, or one
     * U+FFFD per byte), so a run is held until it ends to match the full decode. */
    if (s->t->byte_fallback_dec && is_byte_piece(s->t->piece[id], s->t->piece_len[id])) return 0;
    if (tk_decode_ids(s->t, s->ids, s->n, s->skip, &s->cur, err, errlen)) return -1;
    if (s->cur.n <= s->prefix_len || ends_with_fffd(&s->cur)) return 0;
    s->out.n = 0;
    if (tk_buf_put(&s->out, s->cur.p + s->prefix_len, s->cur.n - s->prefix_len)) return oom(err, errlen);
    /* The window becomes the ids after the old context; they are the new context. */
    memmove(s->ids, s->ids + s->prefix_index, (s->n - s->prefix_index) * sizeof *s->ids);
    s->n -= s->prefix_index;
    if (tk_decode_ids(s->t, s->ids, s->n, s->skip, &s->cur, err, errlen)) return -1;
    s->prefix_len = s->cur.n;
    s->prefix_index = s->n;
    *text = s->out.p;
    *len = s->out.n;
    return 0;
}

int tok_stream_flush(tok_stream *s, const char **text, size_t *len, char *err, size_t errlen) {
    *text = ""; *len = 0;
    if (tk_decode_ids(s->t, s->ids, s->n, s->skip, &s->cur, err, errlen)) return -1;
    s->out.n = 0;
    if (s->cur.n > s->prefix_len && tk_buf_put(&s->out, s->cur.p + s->prefix_len, s->cur.n - s->prefix_len))
        return oom(err, errlen);
    s->n = 0;
    s->prefix_index = 0;
    s->prefix_len = 0;
    if (s->out.p) { *text = s->out.p; *len = s->out.n; }
    return 0;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->ids);
    tk_buf_free(&s->cur);
    tk_buf_free(&s->out);
    free(s);
}
