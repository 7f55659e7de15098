/* tmpmodel.h — test helpers: a random checkpoint from a config text, through make-random
 * (the family's load() in record mode), in a fresh folder under /tmp; feeding tokens to a
 * session as one forward or one at a time. */
#ifndef CI_TEST_TMPMODEL_H
#define CI_TEST_TMPMODEL_H
#include "check.h"
#include "cinfer.h"
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Writes cfg to DIR/in.json, runs make-random (dtype, seed) into DIR and returns DIR, or NULL
 * with err set (make-random's message when the family refuses the config). */
static inline const char *tm_make_random(const char *cfg, const char *dtype, uint64_t seed, char *dir, size_t dn,
                                         char *err, size_t errlen) {
    snprintf(dir, dn, "/tmp/cinfer_test_XXXXXX");
    if (!mkdtemp(dir)) { snprintf(err, errlen, "mkdtemp failed"); return NULL; }
    char path[600];
    snprintf(path, sizeof path, "%s/in.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) { snprintf(err, errlen, "cannot write %s", path); return NULL; }
    fputs(cfg, f);
    fclose(f);
    if (ci_make_random(path, dir, dtype, seed, 0, err, errlen)) return NULL;
    return dir;
}

/* Copies tests/fixtures/<name>/{config.json,model.safetensors} into a fresh folder under
 * /tmp (returned in dir), for tests that damage a copy. 0 or -1. */
static inline int tm_copy_fixture(const char *name, char *dir, size_t dn) {
    snprintf(dir, dn, "/tmp/cinfer_test_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    const char *files[] = { "config.json", "model.safetensors" };
    for (int i = 0; i < 2; i++) {
        char a[600], b[600], buf[1 << 16];
        snprintf(a, sizeof a, "tests/fixtures/%s/%s", name, files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        FILE *fa = fopen(a, "rb"), *fb = fopen(b, "wb");
        int ok = fa && fb;
        size_t n;
        while (ok && (n = fread(buf, 1, sizeof buf, fa)) > 0) ok = fwrite(buf, 1, n, fb) == n;
        if (fa) fclose(fa);
        if (fb && fclose(fb)) ok = 0;
        if (!ok) return -1;
    }
    return 0;
}

/* Removes what tm_make_random (and the tests) put in dir, then dir. */
static inline void tm_rm_dir(const char *dir) {
    char p[600];
    const char *files[] = { "in.json", "config.json", "model.safetensors", "ref.json", "ref_logits.f32" };
    for (int i = 0; i < 5; i++) { snprintf(p, sizeof p, "%s/%s", dir, files[i]); unlink(p); }
    rmdir(dir);
}

/* The config must be refused with a message containing needle. */
static inline void tm_expect_load_error(const char *cfg, const char *needle) {
    char dir[64], err[1024] = "";
    CHECK(tm_make_random(cfg, "f32", 1, dir, sizeof dir, err, sizeof err) == NULL, "accepted: %s", cfg);
    CHECK_HAS(err, needle);
    tm_rm_dir(dir);
}

/* Feeds toks[0..n) from the session's position: as one forward (step = 0) or one token at a
 * time, all logits into out [n, V]. 0, or -1 with err set. */
static inline int tm_feed(ci_session *s, const int *toks, int n, int step, float *out, int V, char *err,
                          size_t errlen) {
    if (!step) return ci_forward(s, toks, n, out, 1, err, errlen);
    for (int t = 0; t < n; t++)
        if (ci_forward(s, &toks[t], 1, out + (size_t)t * V, 1, err, errlen)) return -1;
    return 0;
}

#endif
