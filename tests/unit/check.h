/* check.h — the test harness for tests/unit/test_*.c.
 *
 * Each test case is a function; TEST_RUN(fn) runs it and prints "PASS name" or
 * "FAIL name: why". tests/run.sh counts those lines; a test binary that crashes or exits
 * non-zero counts as one more failure. CHECK(...) records a failure with the line and
 * continues; the binary exits 1 if any case failed. */
#ifndef CI_CHECK_H
#define CI_CHECK_H
#include <stdio.h>
#include <string.h>

static int check_case_failed, check_any_failed;
static char check_why[512];

#define CHECK(cond, ...) do { if (!(cond)) { \
    if (!check_case_failed) { int o_ = snprintf(check_why, sizeof check_why, "%s:%d: ", __FILE__, __LINE__); \
        snprintf(check_why + o_, sizeof check_why - (size_t)o_, __VA_ARGS__); } \
    check_case_failed = 1; } } while (0)

/* CHECK that s contains needle (error messages). */
#define CHECK_HAS(s, needle) CHECK(strstr((s), (needle)) != NULL, "expected \"%s\" in \"%s\"", (needle), (s))

#define TEST_RUN(fn) do { check_case_failed = 0; check_why[0] = 0; fn(); \
    if (check_case_failed) { printf("FAIL %s: %s\n", #fn, check_why); check_any_failed = 1; } \
    else { printf("PASS %s\n", #fn); } \
    fflush(stdout); } while (0)

#define TEST_EXIT() return check_any_failed ? 1 : 0

#endif
