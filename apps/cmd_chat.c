/* cmd_chat.c — `cinfer chat`: a conversation on the terminal (or over a pipe).
 *
 *   cinfer chat [--model DIR] [--system TEXT] [--max-tokens N] [--temperature T] [--top-k K]
 *               [--top-p P] [--min-p P] [--seed S] [--ctx N] [--threads N]
 *               [--chat-template FILE] [--stats] [--device cpu|cuda|auto] [--no-graphs] [--mmap] [--bf16-act] [--int16-act] [--mlx-amx]
 *               [--mlx-amx8] [--kv-f16]
 *               [--tp N [--ep]]
 *
 * Each line on stdin is a user turn; the whole conversation goes through the model's chat
 * template and the reply streams to stdout (one line break after it). "/reset" starts a new
 * conversation, "/exit" (or end of input) leaves. Turns run through the serving engine
 * (src/server/engine.h) with one slot and its prefix store, so turn N+1 re-uses the cache
 * of turns 1..N (KV / latent rows, or the recurrent families' snapshots) and computes only
 * what is new. Greedy by default, as `generate`. --stats prints, per turn on stderr, the
 * prompt tokens, how many came from the cache, the speed and the backend that ran it
 * (--device: cmd_device.h). Without --model it talks to
 * the embedded demo model. Bad flags exit with 2, a model or template failure with 1, one
 * line on stderr each. */
#include "cmd_chat.h"
#include "cmd_device.h"
#include "cmd_progress.h"
#include "server/engine.h"
#include "server/server.h"
#include "text/template.h"
#include "text/tokenizer.h"
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int bad(const char *fmt, const char *a) {
    fputs("cinfer: chat: ", stderr);
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return 2;
}

static int num_arg(const char *name, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "cinfer: chat: %s expects a number in [%g, %g], got '%s'\n", name, lo, hi, v);
        return 2;
    }
    *out = x;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    ci_model *m;
    tok_tokenizer *tk;
    tpl_chat *ch;
    eng *e;
    int ctx;
} chat_state;

/* One turn: the conversation so far (ending with the user's message) into a reply, streamed
 * to stdout and appended to msgs. 0, or 1 with the error printed. */
static int turn(chat_state *c, json_t *msgs, const eng_params *base, int stats) {
    ci_model_info info;
    ci_model_get_info(c->m, &info);
    char err[1024];
    json_t *req = json_pack("{s:O,s:b}", "messages", msgs, "add_generation_prompt", 1);
    char *text = NULL;
    size_t tl = 0;
    int rc = req ? tpl_chat_render(c->ch, req, NULL, &text, &tl, err, sizeof err) : -1;
    json_decref(req);
    if (rc) { fprintf(stderr, "cinfer: chat: %s\n", req ? err : "out of memory"); return 1; }
    int *ids = NULL;
    size_t n = 0;
    rc = tok_encode(c->tk, text, tl, 0, &ids, &n, err, sizeof err);
    free(text);
    if (rc) { fprintf(stderr, "cinfer: chat: %s\n", err); return 1; }
    if ((int)n >= c->ctx) {
        fprintf(stderr, "cinfer: chat: the conversation is %zu tokens and the context %d; /reset or a larger --ctx\n", n, c->ctx);
        free(ids);
        return 1;
    }
    eng_params p = *base;
    p.prompt = ids;
    p.n_prompt = (int)n;
    if (p.max_tokens > c->ctx - (int)n) p.max_tokens = c->ctx - (int)n;
    eng_req *r = NULL;
    double t0 = now_s();
    rc = eng_submit(c->e, &p, &r, err, sizeof err);
    free(ids);
    if (rc) { fprintf(stderr, "cinfer: chat: %s\n", err); return 1; }
    tok_stream *ts = tok_stream_new(c->tk, 1);
    char *reply = NULL;
    size_t rl = 0;
    int got = 0, done = 0, first_at = -1, bad_text = 0;
    double t_first = 0;
    while (!done && ts) {
        eng_tok buf[64];
        int k = eng_read(r, got, buf, 64, 200, &done);
        for (int i = 0; i < k; i++) {
            const char *piece;
            size_t pl;
            if (tok_stream_put(ts, buf[i].id, &piece, &pl, err, sizeof err)) { bad_text = 1; continue; }
            fwrite(piece, 1, pl, stdout);
            char *nr = realloc(reply, rl + pl + 1);
            if (nr) { memcpy(nr + rl, piece, pl); rl += pl; nr[rl] = 0; reply = nr; }
        }
        if (k > 0 && first_at < 0) { first_at = got; t_first = now_s() - t0; }
        got += k;
        fflush(stdout);
    }
    if (ts) {
        const char *piece;
        size_t pl;
        if (!tok_stream_flush(ts, &piece, &pl, err, sizeof err) && pl) {
            fwrite(piece, 1, pl, stdout);
            char *nr = realloc(reply, rl + pl + 1);
            if (nr) { memcpy(nr + rl, piece, pl); rl += pl; nr[rl] = 0; reply = nr; }
        }
    }
    fputc('\n', stdout);
    fflush(stdout);
    eng_finish f = eng_req_finish(r, err, sizeof err);
    int cached = eng_req_cached(r);
    eng_release(r);
    tok_stream_free(ts);
    double dt = now_s() - t0;
    if (!ts || f == ENG_FIN_ERROR) {
        fprintf(stderr, "cinfer: chat: %s\n", ts ? err : "out of memory");
        free(reply);
        return 1;
    }
    if (bad_text) fprintf(stderr, "cinfer: chat: some tokens of the reply could not be decoded\n");
    json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", "assistant", "content", reply ? reply : "", rl));
    free(reply);
    if (stats)
        fprintf(stderr, "cinfer: %zu prompt tokens (%d from the cache), %d generated; first token %.3f s, %.1f tok/s after, on %s\n",
                n, cached, got, t_first, got > 1 && dt > t_first ? (got - 1) / (dt - t_first) : 0.0, info.backend);
    return 0;
}

int cmd_chat(int argc, char **argv) {
    static const char *const names[] = { "--model", "--system", "--max-tokens", "--temperature", "--top-k", "--top-p",
                                         "--min-p", "--seed", "--ctx", "--threads", "--chat-template", "--stats",
                                         "--device", "--no-graphs", "--mmap", "--bf16-act", "--int16-act", "--tp", "--ep",
                                         "--mlx-amx", "--mlx-amx8", "--kv-f16", NULL };
    const char *val[22] = { 0 };
    int seen[22] = { 0 };
    for (int i = 0; i < argc; i++) {
        int k = -1;
        for (int j = 0; names[j]; j++) if (!strcmp(argv[i], names[j])) k = j;
        if (k < 0) return bad("unknown option '%s' (see cinfer --help)", argv[i]);
        if (seen[k]++) return bad("option %s given twice", argv[i]);
        if (k == 11 || (k >= 13 && k != 17)) continue;          /* --stats, --no-graphs, --mmap, --bf16-act, --int16-act, --ep, --mlx-amx(8), --kv-f16: no value */
        if (i + 1 >= argc) return bad("option %s needs a value", argv[i]);
        val[k] = argv[++i];
    }
    eng_params base;
    memset(&base, 0, sizeof base);
    ci_sampler_defaults(&base.so);
    base.max_tokens = 512;
    base.top_logprobs = -1;
    double x;
    if (val[2]) { if (num_arg("--max-tokens", val[2], 1, 1 << 24, &x)) return 2; base.max_tokens = (int)x; }
    if (val[3]) { if (num_arg("--temperature", val[3], 0, 100, &x)) return 2; base.so.temperature = (float)x; }
    if (val[4]) { if (num_arg("--top-k", val[4], 0, INT_MAX, &x)) return 2; base.so.top_k = (int)x; }
    if (val[5]) { if (num_arg("--top-p", val[5], 1e-9, 1, &x)) return 2; base.so.top_p = (float)x; }
    if (val[6]) { if (num_arg("--min-p", val[6], 0, 1, &x)) return 2; base.so.min_p = (float)x; }
    if (val[7]) { if (num_arg("--seed", val[7], 0, 9007199254740992.0, &x)) return 2; base.so.seed = (uint64_t)x; }
    double ctx_arg = 0, threads = 0;
    if (val[8] && num_arg("--ctx", val[8], 2, 1 << 24, &ctx_arg)) return 2;
    if (val[9] && num_arg("--threads", val[9], 1, 1024, &threads)) return 2;
    ci_model_opts mo;
    memset(&mo, 0, sizeof mo);
    mo.n_threads = (int)threads;
    mo.no_graphs = seen[13] > 0;
    mo.map_weights = seen[14] > 0;
    mo.bf16_act = seen[15] > 0;
    mo.int16_act = seen[16] > 0;
    mo.mlx_amx = seen[20] ? 2 : seen[19] > 0;
    mo.kv_f16 = seen[21] > 0;
    if (val[17]) { if (num_arg("--tp", val[17], 1, 64, &x)) return 2; mo.tp = (int)x; }
    if (seen[18] && mo.tp < 2) return bad("%s needs --tp N (N >= 2)", "--ep");
    mo.ep = seen[18] > 0;
    if (val[12] && cli_device("chat", val[12], &mo.device)) return 2;
    cli_progress_attach(&mo);

    char dir[PATH_MAX + 16], err[1024];
    if (val[0]) snprintf(dir, sizeof dir, "%s", val[0]);
    else if (srv_demo_dir(dir, sizeof dir)) {
        fputs("cinfer: chat: no --model given and the demo model (models/demo) is not found\n", stderr);
        return 1;
    }
    chat_state c = { 0 };
    int rc = 1;
    json_t *msgs = json_array();
    char *line = NULL;
    size_t cap = 0;
    if (ci_model_open(dir, &mo, &c.m, err, sizeof err) || tok_load(dir, &c.tk, err, sizeof err) ||
        tpl_chat_load_ex(dir, val[10], &c.ch, err, sizeof err)) {
        fprintf(stderr, "cinfer: chat: %s\n", err);
        goto done;
    }
    ci_model_info info;
    ci_model_get_info(c.m, &info);
    c.ctx = ctx_arg > 0 ? (int)ctx_arg : info.max_position > 0 && info.max_position < 4096 ? (int)info.max_position : 4096;
    eng_opts eo = { 1, c.ctx, 1, (size_t)256 << 20, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
    if (eng_new(c.m, &eo, &c.e, err, sizeof err)) { fprintf(stderr, "cinfer: chat: %s\n", err); goto done; }
    if (val[1]) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", val[1]));
    int tty = isatty(0);
    for (;;) {
        if (tty) { fputs("> ", stderr); fflush(stderr); }
        ssize_t k = getline(&line, &cap, stdin);
        if (k < 0) break;
        while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r')) line[--k] = 0;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            json_array_clear(msgs);
            if (val[1]) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", val[1]));
            continue;
        }
        if (!k) continue;
        json_t *um = json_pack("{s:s,s:s%}", "role", "user", "content", line, (size_t)k);
        if (!um) { fputs("cinfer: chat: the line is not valid UTF-8\n", stderr); continue; }
        json_array_append_new(msgs, um);
        if (turn(&c, msgs, &base, seen[11])) {
            json_array_remove(msgs, json_array_size(msgs) - 1);   /* the turn did not happen */
            if (!tty) goto done;
        }
    }
    rc = 0;
done:
    free(line);
    json_decref(msgs);
    eng_free(c.e);
    tpl_chat_free(c.ch);
    tok_free(c.tk);
    ci_model_free(c.m);
    return rc;
}
