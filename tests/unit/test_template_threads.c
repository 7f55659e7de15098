/* test_template_threads.c — one loaded chat template rendered from several threads at
 * once, as `cinfer serve` does from its connection threads: every render must equal the
 * single-threaded one, and freeing afterwards must be clean. (Sharing the special-token
 * values between renders raced on their non-atomic refcounts and corrupted the heap.) */
#include "check.h"
#include "text/template.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 4, RENDERS = 3000 };

static tpl_chat *ch;
static json_t *req;
static char *want;
static int mismatches;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < RENDERS; i++) {
        char *out = NULL, err[256];
        size_t len = 0;
        int rc = tpl_chat_render(ch, req, NULL, &out, &len, err, sizeof err);
        if (rc || !out || strcmp(out, want)) {
            pthread_mutex_lock(&mu);
            mismatches++;
            pthread_mutex_unlock(&mu);
        }
        free(out);
    }
    return NULL;
}

static void test_concurrent_renders(void) {
    char err[512];
    const char *dir = "models/demo";   /* bos_token is a variable of its template */
    CHECK(tpl_chat_load(dir, &ch, err, sizeof err) == 0, "%s", err);
    if (!ch) return;
    req = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                     " {\"role\": \"user\", \"content\": \"hello\"}], \"add_generation_prompt\": true}", 0, NULL);
    size_t len;
    CHECK(tpl_chat_render(ch, req, NULL, &want, &len, err, sizeof err) == 0, "%s", err);
    CHECK(want && strstr(want, "<|bos|>") == want, "rendered: %s", want ? want : "(null)");
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    CHECK(mismatches == 0, "%d of %d concurrent renders differed", mismatches, THREADS * RENDERS);
    free(want);
    json_decref(req);
    tpl_chat_free(ch);
}

int main(void) {
    TEST_RUN(test_concurrent_renders);
    TEST_EXIT();
}
