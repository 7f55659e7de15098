/* json.h — JSON through jansson, with the dialect Python writes.
 *
 * Python's json module writes the bare literals Infinity, -Infinity and NaN, which strict
 * JSON parsers refuse; transformers sometimes writes {"__float__": "Infinity"} instead.
 * cj_parse rewrites the bare literals (outside strings) into the strings "Infinity",
 * "-Infinity", "NaN" before parsing, and cj_number reads all three spellings. Files read
 * with cj_load_file (configs) also take integers too large for int64 as reals (tokenizer
 * configs write model_max_length = 1e30 as digits); cj_parse alone keeps jansson's refusal
 * (a safetensors header must not have such dims). */
#ifndef CI_JSON_H
#define CI_JSON_H
#include <jansson.h>
#include <stddef.h>

/* Parses len bytes of text. `what` names the source in errors (a file path). */
json_t *cj_parse(const char *text, size_t len, const char *what, char *err, size_t errlen);
/* cj_parse with the choice of reading integers of 19+ digits as reals. */
json_t *cj_parse_ex(const char *text, size_t len, const char *what, int big_ints_as_reals, char *err, size_t errlen);
/* Reads a whole file and parses it (big integers as reals). */
json_t *cj_load_file(const char *path, char *err, size_t errlen);
/* json_dumps that writes the strings "Infinity", "-Infinity" and "NaN" (values, not keys)
 * back as the bare literals cj_parse turned them from, as Python's json writes and reads
 * them (config.json files with time_step_limit [0.0, Infinity]). malloc'd, or NULL. */
char *cj_dumps(const json_t *root, size_t flags);
/* 1 if v is a number (or an Infinity/NaN spelling) and sets *out; 0 otherwise. */
int cj_number(const json_t *v, double *out);
/* Typed getters on an object: return 1 when the key is present with the right type,
 * 0 when absent or null, -1 when present with the wrong type. */
int cj_get_int(const json_t *obj, const char *key, long long *out);
int cj_get_num(const json_t *obj, const char *key, double *out);
int cj_get_bool(const json_t *obj, const char *key, int *out);
const char *cj_get_str(const json_t *obj, const char *key); /* NULL if absent/not a string */

#endif
