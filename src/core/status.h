/* status.h — the one error convention of the library.
 *
 * Fallible functions return 0 on success and a negative value on failure, after writing
 * one human-readable line into a caller-owned buffer (err, errlen). The line names the
 * file, tensor or key and says what was expected and what was found. Nothing in the
 * library prints, exits or aborts on bad input. */
#ifndef CI_STATUS_H
#define CI_STATUS_H
#include <stddef.h>

/* Formats the message into err (if non-NULL) and returns -1, so callers can write
 * `return ci_err(err, errlen, "...", ...);`. */
int ci_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message in place: "<prefix>: <old message>". */
void ci_err_prefix(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
