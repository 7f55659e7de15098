/* cmd_serve.c — `cinfer serve`: parses the flags, starts the server (src/server/server.h),
 * prints one line with the address it listens on, and serves until SIGINT or SIGTERM.
 *
 *   cinfer serve [--model DIR] [--host 127.0.0.1] [--port 8080] [--api-key KEY]
 *                [--parallel N] [--ctx N] [--prefix-cache-mb N] [--queue N]
 *                [--max-body BYTES] [--threads N] [--name ID] [--timeout S] [--per-client N]
 *                [--chat-template FILE] [--device cpu|cuda|auto] [--no-graphs] [--mmap] [--bf16-act] [--int16-act] [--mlx-amx]
 *                [--mlx-amx8] [--kv-f16]
 *                [--gpu-memory F] [--kv-blocks N] [--prefill-chunk N]
 *
 * Families with paged caches (llama, qwen3, qwen3_moe) keep every slot's K / V rows in one
 * pool of blocks of 128 tokens (src/server/engine.h): --kv-blocks N sets its size; else on a
 * device it takes what keeps the server's use of device memory at --gpu-memory F of it
 * (default 0.9) after weights and the slots' scratch, and on the CPU parallel * ctx tokens'
 * worth. A request waits until its prompt fits the pool; running sequences take blocks as
 * they grow, preempting the newest when the pool is dry; one whose prompt + max_tokens never
 * can fit gets a 400. --prefill-chunk N: prompt tokens each sequence runs per step, a power of two
 * (default 256 on the CPU, 1024 on a device), so a long prompt delays others by one chunk.
 *
 * --prefix-cache-mb bounds the memory of cached prefixes beyond the slots (LRU): KV / MLA
 * rows, or for hybrid families snapshots of the recurrent state at chunk boundaries and turn
 * ends; 0 turns prefix reuse off altogether. Default 256, or for a hybrid on the block pool
 * room for two snapshots of its states per slot when that is more (a device's pool is sized
 * after it; the start-up line says how much). --per-client N caps the generations one client address
 * may have running or queued at once (more get 429 with Retry-After); none by default.
 * --chat-template FILE renders chats with that Jinja file instead of the model folder's
 * template (a model shipped without one, or a fixed one); a file that does not load is a
 * start-up error. --device / --no-graphs choose where the model runs (cmd_device.h); a
 * device that cannot be had is a start-up error. Without --model it serves the embedded demo model (models/demo of the source tree the
 * binary was built in). --port 0 takes any free port; the printed line tells which:
 *   "cinfer: serving demo on http://127.0.0.1:PORT"
 * Bad flags exit with status 2, a model or socket failure with 1, both with one line on
 * stderr. The signals are taken by sigwait in the main thread, so no handler runs inside
 * the server's threads. */
#include "cmd_serve.h"
#include "cmd_device.h"
#include "cmd_progress.h"
#include "server/server.h"
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage_err(const char *fmt, const char *a, const char *b) {
    fputs("cinfer: serve: ", stderr);
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 2;
}

static int int_arg(const char *name, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "cinfer: serve: %s expects an integer in [%lld, %lld], got '%s'\n", name, lo, hi, v);
        return 2;
    }
    *out = x;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    srv_opts o;
    memset(&o, 0, sizeof o);
    o.port = 8080;
    o.queue_max = -1;
    o.prefix_cache_mb = -1;
    static const char *const names[] = { "--model", "--host", "--port", "--api-key", "--parallel", "--ctx",
                                         "--prefix-cache-mb", "--queue", "--max-body", "--threads", "--name",
                                         "--timeout", "--per-client", "--chat-template", "--device", "--no-graphs",
                                         "--gpu-memory", "--kv-blocks", "--prefill-chunk", "--mmap", "--bf16-act", "--int16-act", "--tp",
                                         "--ep", "--mlx-amx", "--mlx-amx8", "--kv-f16", NULL };
    int seen[28] = { 0 };
    for (int i = 0; i < argc; i++) {
        int k = -1;
        for (int j = 0; names[j]; j++) if (!strcmp(argv[i], names[j])) k = j;
        if (k < 0) return usage_err("unknown option '%s'%s (see cinfer --help)", argv[i], "");
        if (seen[k]++) return usage_err("option %s given twice%s", argv[i], "");
        if (k == 15) { o.no_graphs = 1; continue; }             /* --no-graphs takes no value */
        if (k == 19) { o.map_weights = 1; continue; }           /* nor does --mmap */
        if (k == 20) { o.bf16_act = 1; continue; }              /* nor --bf16-act */
        if (k == 21) { o.int16_act = 1; continue; }              /* nor --int16-act */
        if (k == 23) { o.ep = 1; continue; }                     /* nor --ep */
        if (k == 24) { o.mlx_amx = o.mlx_amx ? o.mlx_amx : 1; continue; }   /* nor --mlx-amx */
        if (k == 25) { o.mlx_amx = 2; continue; }                /* nor --mlx-amx8 */
        if (k == 26) { o.kv_f16 = 1; continue; }                 /* nor --kv-f16 */
        if (i + 1 >= argc) return usage_err("option %s needs a value%s", argv[i], "");
        const char *v = argv[++i];
        long long x = 0;
        switch (k) {
        case 0: o.model_dir = v; break;
        case 1: o.host = v; break;
        case 2: if (int_arg("--port", v, 0, 65535, &x)) return 2; o.port = (int)x; break;
        case 3: o.api_key = v; break;
        case 4: if (int_arg("--parallel", v, 1, 256, &x)) return 2; o.parallel = (int)x; break;
        case 5: if (int_arg("--ctx", v, 2, 1 << 24, &x)) return 2; o.ctx = (int)x; break;
        case 6: if (int_arg("--prefix-cache-mb", v, 0, 1 << 30, &x)) return 2; o.prefix_cache_mb = x; break;
        case 7: if (int_arg("--queue", v, 0, 1 << 20, &x)) return 2; o.queue_max = (int)x; break;
        case 8: if (int_arg("--max-body", v, 1024, 1LL << 32, &x)) return 2; o.max_body = (size_t)x; break;
        case 9: if (int_arg("--threads", v, 1, 1024, &x)) return 2; o.threads = (int)x; break;
        case 10: o.model_id = v; break;
        case 11: if (int_arg("--timeout", v, 1, 86400, &x)) return 2; o.timeout_s = (int)x; break;
        case 12: if (int_arg("--per-client", v, 1, 1 << 20, &x)) return 2; o.per_client = (int)x; break;
        case 13: o.chat_template = v; break;
        case 14: if (cli_device("serve", v, &o.device)) return 2; break;
        case 16: {
            char *end;
            errno = 0;
            double f = strtod(v, &end);
            if (errno || end == v || *end || !(f > 0 && f <= 1))
                return usage_err("--gpu-memory expects a fraction in (0, 1], got '%s'%s", v, "");
            o.gpu_memory = f;
            break;
        }
        case 17: if (int_arg("--kv-blocks", v, 1, 1 << 30, &x)) return 2; o.kv_blocks = (int)x; break;
        case 18:
            if (int_arg("--prefill-chunk", v, 16, 1 << 16, &x)) return 2;
            if (x & (x - 1)) return usage_err("--prefill-chunk expects a power of two, got '%s'%s", v, "");
            o.prefill_chunk = (int)x;
            break;
        case 22: if (int_arg("--tp", v, 1, 64, &x)) return 2; o.tp = (int)x; break;
        }
    }
    if (o.ep && o.tp < 2) return usage_err("%s needs --tp N (N >= 2)%s", "--ep", "");
    /* Block the stop signals before any thread starts: every thread inherits the mask and
     * only sigwait below receives them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    ci_model_opts po;
    memset(&po, 0, sizeof po);
    cli_progress_attach(&po);
    o.progress = po.progress;
    o.progress_ctx = po.progress_ctx;
    char err[1024];
    srv *s = NULL;
    if (srv_start(&o, &s, err, sizeof err)) {
        fprintf(stderr, "cinfer: serve: %s\n", err);
        return 1;
    }
    char line[256];
    srv_cache_line(s, line, sizeof line);
    fprintf(stderr, "cinfer: serve: %s\n", line);
    fprintf(stderr, "cinfer: serving %s on http://%s:%d\n", srv_model_id(s), o.host ? o.host : "127.0.0.1", srv_port(s));
    fflush(stderr);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "cinfer: serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(s);
    return 0;
}
