/* tok_json.h — a small, fast JSON reader for tokenizer.json.
 *
 * jansson takes ~220 ms on a 150k-vocab tokenizer.json and ~730 ms on Gemma 3's 33 MB
 * file, over the load budget, so the tokenizer parses its one big file itself: in place
 * (strings are unescaped inside the caller's buffer, which must outlive the tree) into
 * nodes allocated from one arena. Objects keep their keys in file order; lookups are
 * linear, which is fine for the small objects of the pipeline (vocab and merges are only
 * iterated). Everything else (tokenizer_config.json) goes through src/io/json.h. */
#ifndef CI_TOK_JSON_H
#define CI_TOK_JSON_H
#include <stddef.h>
#include <stdint.h>

enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ };

typedef struct tj_val tj_val;
struct tj_val {
    uint8_t type;
    uint32_t n;             /* TJ_STR: byte length; TJ_ARR / TJ_OBJ: number of children */
    const char *key;        /* when a member of an object (not NUL-terminated) */
    uint32_t key_len;
    union { const char *s; double num; tj_val *kids; } u;
};

typedef struct tj_doc tj_doc;
/* Parses buf[0..len) in place; buf[len] must be writable (a NUL is stored there).
 * what names the file in errors. NULL on error. */
tj_doc *tj_parse(char *buf, size_t len, const char *what, char *err, size_t errlen);
const tj_val *tj_root(const tj_doc *d);
void tj_free(tj_doc *d);

/* Member of an object by key; NULL if v is not an object or has no such key. */
const tj_val *tj_get(const tj_val *v, const char *key);
/* Helpers: 1 and the value when present with the type, 0 when absent or null,
 * -1 when present with another type. */
int tj_str(const tj_val *obj, const char *key, const char **s, size_t *len);
int tj_bool(const tj_val *obj, const char *key, int *out);
int tj_int(const tj_val *obj, const char *key, long long *out);

#endif
