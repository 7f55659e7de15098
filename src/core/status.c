/* status.c — formatting of error lines (see status.h). */
#include "status.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ci_err(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void ci_err_prefix(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    char pre[512], old[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(old, sizeof old, "%s", err);
    snprintf(err, errlen, "%s: %s", pre, old);
}
