/* check.h — the test harness for tests/unit/test_*.c.
 *
 * Each test case is a function; TEST_RUN(fn) runs it and prints "PASS name" or
 * "FAIL name: why". tests/run.sh counts those lines; a test binary that crashes or exits
 * non-zero counts as one more failure. CHECK(...) records a failure with the line and
 * continues; the binary exits 1 if any case failed. */
#ifndef CI_CHECK_H
#define CI_CHECK_H
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int check_case_failed, check_any_failed;
static char check_why[2048];

static void check_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check_fail(const char *file, int line, const char *fmt, ...) {
    if (check_case_failed) return;
    check_case_failed = 1;
    int o = snprintf(check_why, sizeof check_why, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(check_why + o, sizeof check_why - (size_t)o, fmt, ap);
    va_end(ap);
}

#define CHECK(cond, ...) do { if (!(cond)) check_fail(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* CHECK that s contains needle (error messages). */
#define CHECK_HAS(s, needle) CHECK(strstr((s), (needle)) != NULL, "expected \"%s\" in \"%s\"", (needle), (s))

#define TEST_RUN(fn) do { check_case_failed = 0; check_why[0] = 0; fn(); \
    if (check_case_failed) { printf("FAIL %s: %s\n", #fn, check_why); check_any_failed = 1; } \
    else { printf("PASS %s\n", #fn); } \
    fflush(stdout); } while (0)

#define TEST_EXIT() return check_any_failed ? 1 : 0

#endif
