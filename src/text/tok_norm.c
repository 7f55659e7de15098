/* tok_norm.c — normalizers: NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, Replace, Prepend,
 * Strip, StripAccents and Sequence, applied to a whole string (the tokenizer needs no
 * offsets). Input and output are valid UTF-8. A Sequence ping-pongs between the output
 * buffer and one scratch buffer. Prepend, like Hugging Face's, leaves an empty string empty. */
#include "tok_internal.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int oom(char *err, size_t errlen) { return ci_err(err, errlen, "tokenizer: out of memory normalizing"); }

static int unicode_form(int type, const char *in, size_t len, tk_buf *out, char *err, size_t errlen) {
    int opt = UTF8PROC_STABLE;
    switch (type) {
    case TN_NFC: opt |= UTF8PROC_COMPOSE; break;
    case TN_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case TN_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    if (!len) return 0;
    /* Pure ASCII is invariant under every normalization form. */
    size_t i = 0;
    while (i < len && (unsigned char)in[i] < 0x80) i++;
    if (i == len) return tk_buf_put(out, in, len) ? oom(err, errlen) : 0;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)in, (utf8proc_ssize_t)len, &dst, (utf8proc_option_t)opt);
    if (r < 0) { free(dst); return ci_err(err, errlen, "tokenizer: Unicode normalization failed: %s", utf8proc_errmsg(r)); }
    int rc = tk_buf_put(out, dst, (size_t)r);
    free(dst);
    return rc ? oom(err, errlen) : 0;
}

static int is_cased_letter(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* Rust's str::to_lowercase: simple mappings plus U+0130 -> "i\u0307" and final sigma. */
static int lowercase(const char *in, size_t len, tk_buf *out) {
    const unsigned char *s = (const unsigned char *)in;
    uint32_t prev = 0;
    for (size_t i = 0; i < len;) {
        size_t adv;
        uint32_t c = tk_utf8_dec(s + i, len - i, &adv);
        int rc;
        if (c == 0x130) rc = tk_buf_put(out, "i\xCC\x87", 3);
        else if (c == 0x3A3) {
            uint32_t next = 0;
            if (i + adv < len) { size_t a2; next = tk_utf8_dec(s + i + adv, len - i - adv, &a2); }
            int final = prev && is_cased_letter(prev) && !(next && is_cased_letter(next));
            rc = tk_utf8_put(out, final ? 0x3C2 : 0x3C3);
        } else rc = tk_utf8_put(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)c));
        if (rc) return -1;
        prev = c;
        i += adv;
    }
    return 0;
}

static int strip_accents(const char *in, size_t len, tk_buf *out) {
    const unsigned char *s = (const unsigned char *)in;
    for (size_t i = 0; i < len;) {
        size_t adv;
        uint32_t c = tk_utf8_dec(s + i, len - i, &adv);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
        if (k != UTF8PROC_CATEGORY_MN && k != UTF8PROC_CATEGORY_MC && k != UTF8PROC_CATEGORY_ME)
            if (tk_buf_put(out, s + i, adv)) return -1;
        i += adv;
    }
    return 0;
}

static int strip_ws(const char *in, size_t len, int left, int right, tk_buf *out) {
    const unsigned char *s = (const unsigned char *)in;
    size_t a = 0, b = len;
    if (left)
        while (a < b) { size_t adv; uint32_t c = tk_utf8_dec(s + a, b - a, &adv); if (!tk_is_whitespace(c)) break; a += adv; }
    if (right)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && (s[k] & 0xC0) == 0x80) k--;
            size_t adv;
            uint32_t c = tk_utf8_dec(s + k, b - k, &adv);
            if (!tk_is_whitespace(c)) break;
            b = k;
        }
    return tk_buf_put(out, s + a, b - a);
}

static int replace(const tk_norm *n, const char *in, size_t len, tk_buf *out, pcre2_match_data *md,
                   char *err, size_t errlen) {
    size_t pos = 0, ms, me;
    for (;;) {
        int f = tk_pattern_find(&n->pat, in, len, pos, md, &ms, &me, err, errlen);
        if (f < 0) return -1;
        if (!f) break;
        if (tk_buf_put(out, in + pos, ms - pos) || tk_buf_put(out, n->str, n->str_len)) return oom(err, errlen);
        if (me == ms) { /* empty match: copy one character and move on */
            if (ms >= len) { pos = len; break; }
            size_t l = tk_utf8_len((const unsigned char *)in + ms, len - ms);
            if (!l) l = 1;
            if (tk_buf_put(out, in + ms, l)) return oom(err, errlen);
            me = ms + l;
        }
        pos = me;
    }
    return tk_buf_put(out, in + pos, len - pos) ? oom(err, errlen) : 0;
}

int tk_norm_apply(const tk_norm *n, const char *in, size_t len, tk_buf *out, pcre2_match_data *md,
                  char *err, size_t errlen) {
    out->n = 0;
    if (tk_buf_reserve(out, len)) return oom(err, errlen);
    out->p[0] = 0;
    switch (n->type) {
    case TN_SEQ: {
        if (tk_buf_put(out, in, len)) return oom(err, errlen);
        tk_buf tmp = { 0 };
        for (int i = 0; i < n->nkids; i++) {
            if (tk_norm_apply(&n->kids[i], out->p, out->n, &tmp, md, err, errlen)) { tk_buf_free(&tmp); return -1; }
            tk_buf sw = *out; *out = tmp; tmp = sw;
        }
        tk_buf_free(&tmp);
        return 0;
    }
    case TN_NFC: case TN_NFD: case TN_NFKC: case TN_NFKD:
        return unicode_form(n->type, in, len, out, err, errlen);
    case TN_LOWER: return lowercase(in, len, out) ? oom(err, errlen) : 0;
    case TN_STRIP_ACCENTS: return strip_accents(in, len, out) ? oom(err, errlen) : 0;
    case TN_STRIP: return strip_ws(in, len, n->left, n->right, out) ? oom(err, errlen) : 0;
    case TN_PREPEND:
        if (len && tk_buf_put(out, n->str, n->str_len)) return oom(err, errlen);
        return tk_buf_put(out, in, len) ? oom(err, errlen) : 0;
    case TN_REPLACE: return replace(n, in, len, out, md, err, errlen);
    }
    return ci_err(err, errlen, "tokenizer: unknown normalizer %d", n->type);
}

void tk_norm_free(tk_norm *n) {
    if (!n) return;
    for (int i = 0; i < n->nkids; i++) tk_norm_free(&n->kids[i]);
    free(n->kids);
    tk_pattern_free(&n->pat);
    free(n->str);
}
