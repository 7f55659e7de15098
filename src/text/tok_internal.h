/* tok_internal.h — the tokenizer's internal types, shared by src/text/tok_*.c and tokenizer.c.
 *
 * Nothing here is public API. The pipeline mirrors tokenizer.json: a tree of normalizers
 * (tk_norm), of pre-tokenizers (tk_pre) and of decoders (tk_dec), the BPE model (tk_bpe)
 * and the added-token matcher. Strings are byte ranges (pointer + length), never assumed
 * NUL-terminated; every byte string that reaches a step is valid UTF-8, except inside the
 * decoder, where byte tokens may form invalid sequences until the final lossy conversion.
 * Allocation failures surface as -1 with a message, like every other error. */
#ifndef CI_TOK_INTERNAL_H
#define CI_TOK_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include "tokenizer.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- growable byte buffer ---- */
typedef struct { char *p; size_t n, cap; } tk_buf;
int tk_buf_reserve(tk_buf *b, size_t extra);
int tk_buf_put(tk_buf *b, const void *s, size_t n);
int tk_buf_putc(tk_buf *b, char c);
void tk_buf_free(tk_buf *b);

/* ---- UTF-8 ---- */
/* Length of the valid UTF-8 sequence starting at s (1..4), or 0 if invalid/truncated. */
size_t tk_utf8_len(const unsigned char *s, size_t n);
/* Decodes the (valid) sequence at s; *adv gets its length. */
uint32_t tk_utf8_dec(const unsigned char *s, size_t n, size_t *adv);
/* Appends code point c as UTF-8 (surrogates written as-is, WTF-8 style). */
int tk_utf8_put(tk_buf *b, uint32_t c);
/* Offset of the first invalid byte, or n if all valid. */
size_t tk_utf8_check(const unsigned char *s, size_t n);
/* Appends s to out replacing each maximal invalid subsequence with U+FFFD (Rust's
 * String::from_utf8_lossy). */
int tk_utf8_lossy(tk_buf *out, const unsigned char *s, size_t n);
int tk_is_whitespace(uint32_t c); /* Rust char::is_whitespace */

/* ---- string -> int map (keys copied into the map) ---- */
typedef struct { uint32_t off, len, hash; int32_t val; } tk_sm_ent;
typedef struct { tk_sm_ent *e; size_t cap, n; tk_buf keys; } tk_strmap;
int tk_sm_init(tk_strmap *m, size_t expect);
/* Inserts or overwrites. */
int tk_sm_put(tk_strmap *m, const char *k, size_t len, int val);
/* -1 when absent. */
int tk_sm_get(const tk_strmap *m, const char *k, size_t len);
void tk_sm_free(tk_strmap *m);
uint32_t tk_hash(const void *p, size_t n);

/* ---- (id, id) -> (rank, id) map for merges ---- */
typedef struct { uint64_t key; int32_t rank, id; } tk_pm_ent;
typedef struct { tk_pm_ent *e; size_t cap, n; } tk_pairmap;
int tk_pm_init(tk_pairmap *m, size_t expect);
int tk_pm_put(tk_pairmap *m, int a, int b, int rank, int id); /* keeps the first (lowest rank) */
const tk_pm_ent *tk_pm_get(const tk_pairmap *m, int a, int b);
void tk_pm_free(tk_pairmap *m);

/* ---- patterns: a literal string or a PCRE2 regex (UTF + UCP, JIT when available) ---- */
typedef struct {
    char *lit; size_t lit_len; /* when literal */
    pcre2_code *re;            /* when regex */
} tk_pattern;
/* Compiles json "pattern" {"String": s} or {"Regex": r}; what names it in errors. */
int tk_pattern_compile(tk_pattern *p, const char *s, size_t len, int is_regex, const char *what,
                       char *err, size_t errlen);
void tk_pattern_free(tk_pattern *p);
/* Finds the next match in s[0..n) at or after start. Returns 1 and sets [*ms, *me), 0 when
 * none, -1 on a regex error. md is a scratch match data (may be NULL for literals). */
int tk_pattern_find(const tk_pattern *p, const char *s, size_t n, size_t start, pcre2_match_data *md,
                    size_t *ms, size_t *me, char *err, size_t errlen);

/* ---- normalizers ---- */
enum { TN_SEQ, TN_NFC, TN_NFD, TN_NFKC, TN_NFKD, TN_LOWER, TN_REPLACE, TN_PREPEND, TN_STRIP,
       TN_STRIP_ACCENTS };
typedef struct tk_norm {
    int type;
    struct tk_norm *kids; int nkids;  /* TN_SEQ */
    tk_pattern pat;                   /* TN_REPLACE */
    char *str; size_t str_len;        /* TN_REPLACE content, TN_PREPEND text */
    int left, right;                  /* TN_STRIP */
} tk_norm;
/* Applies n to in[0..len), writing the result to out (cleared first). */
int tk_norm_apply(const tk_norm *n, const char *in, size_t len, tk_buf *out, pcre2_match_data *md,
                  char *err, size_t errlen);
void tk_norm_free(tk_norm *n);

/* ---- pre-tokenizers ---- */
enum { TP_SEQ, TP_SPLIT, TP_BYTELEVEL, TP_DIGITS, TP_METASPACE, TP_WHITESPACE_SPLIT, TP_PUNCT };
enum { TB_REMOVED, TB_ISOLATED, TB_MERGED_PREV, TB_MERGED_NEXT, TB_CONTIGUOUS };
enum { TS_ALWAYS, TS_FIRST, TS_NEVER };
typedef struct tk_pre {
    int type;
    struct tk_pre *kids; int nkids;   /* TP_SEQ */
    tk_pattern pat;                   /* TP_SPLIT (and ByteLevel's use_regex) */
    int behavior, invert;             /* TP_SPLIT, TP_PUNCT */
    int add_prefix_space, use_regex;  /* TP_BYTELEVEL */
    int individual;                   /* TP_DIGITS */
    char repl[8]; size_t repl_len;    /* TP_METASPACE replacement char */
    int prepend_scheme, split;        /* TP_METASPACE */
} tk_pre;
/* A list of pieces: byte ranges into text; first = the piece starts at the start of the
 * original input (Metaspace's prepend_scheme "first" needs it). */
typedef struct { size_t off, len; int first; } tk_span;
typedef struct { tk_buf text; tk_span *sp; size_t n, cap; } tk_pieces;
int tk_pieces_add(tk_pieces *p, size_t off, size_t len, int first);
void tk_pieces_free(tk_pieces *p);
/* Runs pre on the pieces in place. */
int tk_pre_apply(const tk_pre *pre, tk_pieces *p, pcre2_match_data *md, char *err, size_t errlen);
void tk_pre_free(tk_pre *p);

/* ---- BPE model ---- */
typedef struct {
    tk_strmap vocab;           /* piece -> id; raw bytes as keys when bytelevel */
    tk_pairmap merges;         /* (left id, right id) -> (rank, merged id) */
    int bytelevel;             /* symbols are bytes (vocab keys un-mapped from the GPT-2 alphabet) */
    int byte_id[256];          /* bytelevel: id of each byte; else the <0xNN> ids (-1 if absent) */
    int unk_id;                /* -1 when unk_token is null */
    int fuse_unk, byte_fallback, ignore_merges;
    char *cont_prefix; size_t cont_prefix_len;   /* continuing_subword_prefix ("" = none) */
    char *eow_suffix; size_t eow_suffix_len;     /* end_of_word_suffix */
    /* word cache: piece bytes -> ids, cleared when full; guarded by mu */
    pthread_mutex_t mu;
    tk_strmap cache;           /* value = offset into cache_ids; ids stored as [n, id...] */
    int *cache_ids; size_t cache_n, cache_cap;
} tk_bpe;
/* Appends the ids of one pre-token word to *ids (growing it). */
int tk_bpe_word(tk_bpe *m, const char *w, size_t n, int **ids, size_t *nids, size_t *cap,
                char *err, size_t errlen);
void tk_bpe_free(tk_bpe *m);

/* ---- decoders ---- */
enum { TD_SEQ, TD_BYTELEVEL, TD_METASPACE, TD_BYTEFALLBACK, TD_FUSE, TD_STRIP, TD_REPLACE };
typedef struct tk_dec {
    int type;
    struct tk_dec *kids; int nkids;
    tk_pattern pat; char *str; size_t str_len;   /* TD_REPLACE */
    uint32_t strip_c; int start, stop;           /* TD_STRIP */
    char repl[8]; size_t repl_len; int prepend_scheme;  /* TD_METASPACE */
} tk_dec;
void tk_dec_free(tk_dec *d);

/* ---- added tokens ---- */
typedef struct {
    int id;
    char *content; size_t len;        /* as written in the file */
    char *match; size_t match_len;    /* what is searched: content, normalized if `normalized` */
    int special, normalized, lstrip, rstrip, single_word;
} tk_added;
/* A byte trie over added-token strings, one per kind (raw text / normalized text). */
typedef struct { int32_t child, sibling, tok; uint8_t byte; } tk_trie_node;
typedef struct { tk_trie_node *nodes; size_t n, cap; int32_t root[256]; } tk_trie;

/* ---- post-processing ---- */
typedef struct { int *pre, npre, *post, npost; } tk_post;

struct tok_tokenizer {
    char path[512];            /* tokenizer.json path, for messages */
    int n_vocab;               /* id space: max id + 1 */
    char **piece; uint32_t *piece_len;   /* id -> piece string as in the file (NUL-terminated) */
    char *piece_mem;           /* one block holding every piece string */
    unsigned char *is_special; /* id -> 1 if special added token */
    unsigned char *is_added;   /* id -> 1 if added token */
    tk_norm *norm;             /* NULL = none */
    tk_pre *pre;               /* NULL = none */
    tk_dec *dec;               /* NULL = join with spaces */
    int byte_fallback_dec;     /* the decoder has a ByteFallback step (streaming holds byte runs) */
    tk_bpe bpe;
    tk_added *added; int n_added;
    tk_strmap added_map;       /* content -> index into added */
    tk_trie trie_raw, trie_norm;
    tk_post post;              /* ids added around the text when add_special */
    int bos_id, eos_id;
};

/* Decodes ids through the decoder chain (tok_decode without the id check). */
int tk_decode_ids(const tok_tokenizer *t, const int *ids, size_t n, int skip_special, tk_buf *out,
                  char *err, size_t errlen);

/* Byte-level alphabet (GPT-2): byte -> code point, and code point (< 324) -> byte or -1. */
uint32_t tk_byte_to_cp(unsigned char b);
int tk_cp_to_byte(uint32_t cp);

#endif
