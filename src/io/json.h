/* json.h — JSON through jansson, with the dialect Python writes.
 *
 * Python's json module writes the bare literals Infinity, -Infinity and NaN, which strict
 * JSON parsers refuse; transformers sometimes writes {"__float__": "Infinity"} instead.
 * cj_parse rewrites the bare literals (outside strings) into the strings "Infinity",
 * "-Infinity", "NaN" before parsing, and cj_number reads all three spellings. */
#ifndef CI_JSON_H
#define CI_JSON_H
#include <jansson.h>
#include <stddef.h>

/* Parses len bytes of text. `what` names the source in errors (a file path). */
json_t *cj_parse(const char *text, size_t len, const char *what, char *err, size_t errlen);
/* Reads a whole file and parses it. */
json_t *cj_load_file(const char *path, char *err, size_t errlen);
/* 1 if v is a number (or an Infinity/NaN spelling) and sets *out; 0 otherwise. */
int cj_number(const json_t *v, double *out);
/* Typed getters on an object: return 1 when the key is present with the right type,
 * 0 when absent or null, -1 when present with the wrong type. */
int cj_get_int(const json_t *obj, const char *key, long long *out);
int cj_get_num(const json_t *obj, const char *key, double *out);
int cj_get_bool(const json_t *obj, const char *key, int *out);
const char *cj_get_str(const json_t *obj, const char *key); /* NULL if absent/not a string */

#endif
