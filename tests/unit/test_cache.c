/* test_cache.c — hybrid cache: layout, reset, snapshot and restore. */
#include "check.h"
#include "cache/cache.h"

static void test_snapshot_restore(void) {
    char err[256];
    cache_part parts[3] = { { 8, 0 }, { 0, 5 }, { 4, 3 } };
    ci_cache a, b;
    CHECK(cache_init(&a, 3, parts, 16, "t", err, sizeof err) == 0, "%s", err);
    CHECK(cache_init(&b, 3, parts, 16, "t", err, sizeof err) == 0, "%s", err);
    CHECK(cache_bytes_per_token(&a) == 12 * sizeof(float) && cache_state_bytes(&a) == 8 * sizeof(float), "sizes");
    for (int p = 0; p < 6; p++) for (int i = 0; i < 8; i++) cache_rows(&a, 0)[p * 8 + i] = (float)(p * 100 + i);
    for (int i = 0; i < 5; i++) cache_state(&a, 1)[i] = (float)(7 + i);
    for (int i = 0; i < 3; i++) cache_state(&a, 2)[i] = (float)(-i);
    a.pos = 6;
    cache_snap *s = cache_snapshot(&a);
    CHECK(s && cache_snap_pos(s) == 6 && cache_snap_bytes(s) == (6 * 12 + 8) * sizeof(float), "snapshot");
    /* the original moves on; the snapshot does not */
    cache_state(&a, 1)[0] = 999;
    cache_rows(&a, 0)[0] = 999;
    a.pos = 9;
    CHECK(cache_restore(&b, s, err, sizeof err) == 0, "%s", err);
    CHECK(b.pos == 6 && cache_rows(&b, 0)[5 * 8 + 7] == 507 && cache_state(&b, 1)[0] == 7 && cache_state(&b, 2)[2] == -2, "restored");
    CHECK(cache_restore(&a, s, err, sizeof err) == 0 && a.pos == 6 && cache_state(&a, 1)[0] == 7 && cache_rows(&a, 0)[0] == 0, "rewind");
    cache_reset(&a);
    CHECK(a.pos == 0 && cache_state(&a, 1)[4] == 0, "reset");
    cache_part other[3] = { { 8, 0 }, { 0, 6 }, { 4, 3 } };
    ci_cache c;
    CHECK(cache_init(&c, 3, other, 16, "t", err, sizeof err) == 0, "%s", err);
    CHECK(cache_restore(&c, s, err, sizeof err) != 0, "shape mismatch accepted");
    CHECK_HAS(err, "another shape");
    ci_cache small;
    CHECK(cache_init(&small, 3, parts, 4, "t", err, sizeof err) == 0, "%s", err);
    CHECK(cache_restore(&small, s, err, sizeof err) != 0, "too small accepted");
    CHECK_HAS(err, "exceeds the context");
    cache_snap_free(s);
    cache_free(&a); cache_free(&b); cache_free(&c); cache_free(&small);
}

int main(void) {
    TEST_RUN(test_snapshot_restore);
    TEST_EXIT();
}
