/* cinfer — the command-line tool.
 *
 *   cinfer logits   --model DIR --tokens 1,2,3 --out FILE [--step] [--threads N]
 *     writes FILE only once every logit is computed (a temp file renamed over it)
 *   cinfer generate [--model DIR] (--prompt-ids 1,2,3 | --prompt TEXT | --chat MESSAGE)
 *                   [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]
 *                   [--repeat-penalty R] [--seed S] [--ids] [--stats] [--chat-template FILE]
 *     prints the generated text (streamed, complete UTF-8 only), or the ids with --ids;
 *     without --model it runs the embedded demo model (models/demo), as serve and chat do
 *   cinfer inspect  --model DIR      (opens the model on the CPU; says what a CUDA run needs)
 *   cinfer bench    --model DIR [--prompt-len N] [--gen N] [--depth N] [--batch N] [--reps N] [--threads N]
 *   cinfer make-random --config FILE --out DIR [--dtype bf16|f32|fp8|fp8-fp4] [--seed S] [--layers N] [--threads N]
 *   cinfer perplexity --model DIR --file F [--window N] [--max-tokens N]
 *   logits, generate, bench, perplexity (and chat, serve) also take --device cpu|cuda|auto
 *   and --no-graphs (apps/cmd_device.h).
 *   cinfer serve [--model DIR] [--port N] ...                   (apps/cmd_serve.c)
 *   cinfer chat [--model DIR] [--system TEXT] ...               (apps/cmd_chat.c)
 *   cinfer template --model DIR --request F.json                (apps/cmd_template.c)
 *   cinfer tokenize --model DIR --file F [--add-special]        (apps/cmd_text.c)
 *   cinfer detokenize --model DIR --ids 1,2,3 [--skip-special]  (apps/cmd_text.c)
 *
 * Bad flags, ids out of range and missing files end with one line on stderr and exit
 * status 1 (usage errors 2). */
#include "cinfer.h"
#include "cmd_chat.h"
#include "cmd_device.h"
#include "cmd_progress.h"
#include "cmd_serve.h"
#include "cmd_template.h"
#include "cmd_text.h"
#include "backend/backend.h"
#include "core/threads.h"
#include "models/probe.h"
#include "models/random.h"
#include "server/server.h"
#include "text/template.h"
#include "text/tokenizer.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *USAGE =
    "usage: cinfer <command> [options]\n"
    "  logits      --model DIR --tokens 1,2,3 --out FILE [--step] [--threads N]\n"
    "  generate    [--model DIR] (--prompt-ids 1,2,3 | --prompt TEXT | --chat MESSAGE) [--max-tokens N]\n"
    "              [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
    "              [--threads N] [--ids] [--stats] [--chat-template FILE]\n"
    "  inspect     --model DIR [--kv-f16]  (backend, cache bytes, and the device memory a CUDA run needs)\n"
    "  bench       --model DIR [--prompt-len N] [--gen N] [--depth N] [--batch N] [--reps N] [--threads N]\n"
    "  make-random --config FILE --out DIR [--dtype bf16|f32|fp8|fp8-fp4] [--seed S] [--layers N]\n"
    "              [--threads N]   (fill threads, default all CPUs; same file for any N)\n"
    "  perplexity  --model DIR --file F [--window N] [--max-tokens N] [--threads N]\n"
    "  serve       [--model DIR] [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N]\n"
    "              [--ctx N] [--prefix-cache-mb N] [--queue N] [--per-client N] [--max-body BYTES]\n"
    "              [--timeout S] [--threads N] [--name ID] [--chat-template FILE]\n"
    "              (OpenAI- and Anthropic-compatible HTTP server)\n"
    "  chat        [--model DIR] [--system TEXT] [--max-tokens N] [--temperature T] [--top-k K]\n"
    "              [--top-p P] [--min-p P] [--seed S] [--ctx N] [--threads N] [--chat-template FILE]\n"
    "              [--stats]  (a conversation: a user turn per line on stdin; /reset, /exit)\n"
    "  template    --model DIR --request F.json [--chat-template FILE]\n"
    "  tokenize    --model DIR --file F [--add-special]\n"
    "  detokenize  --model DIR --ids 1,2,3 [--skip-special]\n"
    "logits, generate, bench, perplexity, chat and serve also take:\n"
    "  --device cpu|cuda|auto   where the model runs (default cpu; auto: CUDA when a device is\n"
    "                           present and the family has a CUDA path, else the CPU)\n"
    "  --no-graphs              CUDA: run each decode step eagerly, no graph replay (debugging)\n"
    "  --mmap                   CPU: read the weights in place from the mapped files (page cache);\n"
    "                           by default a checkpoint within 80% of the available memory is\n"
    "                           copied into huge-page memory first (decode reads it ~2x faster on\n"
    "                           some CPUs)\n"
    "  --bf16-act               CPU with AVX512-BF16: bf16 weights dotted with the activations\n"
    "                           rounded to bf16 (about 2x prefill; logits within ~1e-2 of their\n"
    "                           largest magnitude of the default f32 path)\n"
    "  --int16-act              CPU with AVX2 or AVX-512: MLX 4- and 8-bit weights dotted with the\n"
    "                           activations rounded to int16 per 32 columns (faster 4-bit decode;\n"
    "                           logits within ~1e-3 of their largest magnitude of the f32 path)\n"
    "  --mlx-amx                CPU with AVX2 or AVX-512: MLX 4- and 8-bit weights with their codes exact\n"
    "                           and the activations rounded to int16 per 64 columns, on the AMX tiles\n"
    "                           (prompts) where the CPU has AMX-INT8, else on VNNI, else on AVX2, the\n"
    "                           same bits\n"
    "                           (~1.5-2x the default prefill, decode 0.9-1.7x it;\n"
    "                           logits within ~1e-3 of their largest magnitude of the f32 path;\n"
    "                           bf16 scales and biases held twice, once in the decode kernel's\n"
    "                           order where free memory allows, ~1/9 more memory:\n"
    "                           CINFER_CPU_MLX_PTILES=0 declines that;\n"
    "                           --int16-act, if also given, takes those weights first)\n"
    "  --mlx-amx8               --mlx-amx with the activations rounded to int8 per 64 columns\n"
    "                           (llama.cpp Q8_0's class of precision; prompts ~1.3x --mlx-amx)\n"
    "  --kv-f16                 CPU: the attention layers' K / V cache in f16 (not DeepSeek's MLA /\n"
    "                           DSA / V4 caches): half its memory and of what a decode step's\n"
    "                           attention reads; values past +-65504 clamped; logits within ~1e-3\n"
    "                           of their largest magnitude\n"
    "logits, generate, bench, perplexity, chat and serve also take:\n"
    "  --tp N                   CPU: the model split over N tensor-parallel ranks (threads of this\n"
    "                           process, --threads / N each; the multi-GPU path's sharding and\n"
    "                           collectives, checked on the CPU; logits within ~1e-6 of the whole\n"
    "                           model's)\n"
    "  --ep                     with --tp: routed experts whole, an even share per rank (expert\n"
    "                           parallel), instead of every expert's columns split\n";

static int die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cinfer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

/* ---- flags: --name value pairs and bare switches, each known to the command ---- */

typedef struct { const char *name; int has_value; const char *value; int seen; } flag;

static flag *find_flag(flag *f, const char *name) {
    for (; f->name; f++) if (!strcmp(f->name, name)) return f;
    return NULL;
}

static int parse_flags(const char *cmd, int argc, char **argv, flag *flags) {
    for (int i = 0; i < argc; i++) {
        flag *f = find_flag(flags, argv[i]);
        if (!f) return die(2, "%s: unknown option '%s' (see cinfer --help)", cmd, argv[i]);
        if (f->seen) return die(2, "%s: option %s given twice", cmd, argv[i]);
        f->seen = 1;
        if (f->has_value) {
            if (i + 1 >= argc) return die(2, "%s: option %s needs a value", cmd, argv[i]);
            f->value = argv[++i];
        }
    }
    return 0;
}

static const char *need(const char *cmd, flag *flags, const char *name, int *rc) {
    flag *f = find_flag(flags, name);
    if (!f->seen) { *rc = die(2, "%s: option %s is required", cmd, name); return NULL; }
    return f->value;
}

static int parse_long(const char *cmd, const char *name, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return die(2, "%s: %s expects an integer in [%lld, %lld], got '%s'", cmd, name, lo, hi, s);
    *out = v;
    return 0;
}

static int parse_double(const char *cmd, const char *name, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return die(2, "%s: %s expects a number in [%g, %g], got '%s'", cmd, name, lo, hi, s);
    *out = v;
    return 0;
}

/* "1,2,3" -> ids; every id must be a non-negative integer. */
static int parse_ids(const char *cmd, const char *name, const char *s, int **ids, int *n) {
    int cap = 16, k = 0;
    int *v = malloc((size_t)cap * sizeof *v);
    if (!v) return die(1, "out of memory");
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT_MAX) {
            free(v);
            return die(2, "%s: %s expects comma-separated token ids, bad entry at '%s'", cmd, name, p);
        }
        if (k == cap) {
            cap *= 2;
            int *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) { free(v); return die(1, "out of memory"); }
            v = nv;
        }
        v[k++] = (int)x;
        if (*end == 0) break;
        if (*end != ',') { free(v); return die(2, "%s: %s expects comma-separated token ids, bad entry at '%s'", cmd, name, end); }
        p = end + 1;
    }
    *ids = v;
    *n = k;
    return 0;
}

/* --device / --no-graphs / --mmap / --bf16-act / --int16-act / --mlx-amx(8) of a command whose flag table has them: into
 * *o. 0, or 2 with the usage error printed. */
static int device_opts(const char *cmd, flag *fl, ci_model_opts *o) {
    memset(o, 0, sizeof *o);
    flag *d = find_flag(fl, "--device");
    if (d->seen && cli_device(cmd, d->value, &o->device)) return 2;
    o->no_graphs = find_flag(fl, "--no-graphs")->seen;
    o->map_weights = find_flag(fl, "--mmap")->seen;
    o->bf16_act = find_flag(fl, "--bf16-act")->seen;
    o->int16_act = find_flag(fl, "--int16-act")->seen;
    o->mlx_amx = find_flag(fl, "--mlx-amx8")->seen ? 2 : find_flag(fl, "--mlx-amx")->seen;
    o->kv_f16 = find_flag(fl, "--kv-f16")->seen;
    flag *tp = find_flag(fl, "--tp"), *ep = find_flag(fl, "--ep");
    if (tp && tp->seen) {
        long long v;
        if (parse_long(cmd, "--tp", tp->value, 1, 64, &v)) return 2;
        o->tp = (int)v;
    }
    if (ep && ep->seen) {
        if (o->tp < 2) return die(2, "%s: --ep needs --tp N (N >= 2)", cmd);
        o->ep = 1;
    }
    return 0;
}

/* Opens dir with o's device choice and --threads, with the loading progress line on a
 * terminal (cmd_progress.h). dev NULL: the CPU, weights left mapped and not read ahead
 * (inspect reads no weights). */
static int open_model(const char *dir, const char *threads, const ci_model_opts *dev, ci_model **m) {
    ci_model_opts o;
    memset(&o, 0, sizeof o);
    o.map_weights = 1;   /* inspect: no copy of weights it does not read */
    if (dev) {
        o = *dev;
        cli_progress_attach(&o);
    }
    if (threads) {
        long long t;
        if (parse_long("model", "--threads", threads, 1, 1024, &t)) return 2;
        o.n_threads = (int)t;
    }
    char err[1024];
    if (ci_model_open(dir, &o, m, err, sizeof err)) return die(1, "%s", err);
    return 0;
}

static int check_ids(const ci_model *m, const int *ids, int n, const char *name) {
    ci_model_info info;
    ci_model_get_info(m, &info);
    for (int i = 0; i < n; i++)
        if (ids[i] >= info.vocab_size)
            return die(1, "%s: token id %d at index %d is outside the vocabulary [0, %d)", name, ids[i], i, info.vocab_size);
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The process's CPU time (all its threads): what a run cost, whatever else the machine ran. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- commands ---- */

/* logits --out: a regular file (or a new one) is written as FILE.tmp.PID beside it and
 * renamed over FILE only when every byte is out, so a forward, write or device failure
 * leaves no FILE (and an existing FILE as it was). A FIFO or device (/dev/stdout) is
 * opened after the forward and written directly: *f stays NULL and tmp "". 0, or 1 with
 * the error printed. */
static int out_open(const char *out, FILE **f, char *tmp, size_t tmpn) {
    struct stat st;
    *f = NULL;
    tmp[0] = 0;
    if (!stat(out, &st) && !S_ISREG(st.st_mode)) return 0;
    snprintf(tmp, tmpn, "%s.tmp.%ld", out, (long)getpid());
    if (!(*f = fopen(tmp, "wb"))) { tmp[0] = 0; return die(1, "%s: cannot create: %s", out, strerror(errno)); }
    return 0;
}

static int cmd_logits(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {"--tokens", 1, 0, 0}, {"--out", 1, 0, 0}, {"--step", 0, 0, 0},
                  {"--threads", 1, 0, 0}, {"--device", 1, 0, 0}, {"--no-graphs", 0, 0, 0}, {"--mmap", 0, 0, 0}, {"--bf16-act", 0, 0, 0}, {"--int16-act", 0, 0, 0}, {"--mlx-amx", 0, 0, 0}, {"--mlx-amx8", 0, 0, 0}, {"--kv-f16", 0, 0, 0}, {"--tp", 1, 0, 0}, {"--ep", 0, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("logits", argc, argv, fl);
    if (rc) return rc;
    const char *dir = need("logits", fl, "--model", &rc), *toks = need("logits", fl, "--tokens", &rc),
               *out = need("logits", fl, "--out", &rc);
    if (rc) return rc;
    ci_model_opts mo;
    if ((rc = device_opts("logits", fl, &mo))) return rc;
    int *ids, n;
    if ((rc = parse_ids("logits", "--tokens", toks, &ids, &n))) return rc;
    ci_model *m = NULL;
    ci_session *s = NULL;
    float *lg = NULL;
    FILE *f = NULL;
    char err[1024], tmp[4200] = "";
    if ((rc = open_model(dir, find_flag(fl, "--threads")->value, &mo, &m))) goto done;
    if ((rc = check_ids(m, ids, n, "--tokens"))) goto done;
    ci_model_info info;
    ci_model_get_info(m, &info);
    if (ci_session_new(m, n, &s, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    lg = malloc((size_t)n * info.vocab_size * sizeof *lg);
    if (!lg) { rc = die(1, "out of memory for %d x %d logits", n, info.vocab_size); goto done; }
    /* The temp file first: an unwritable --out is reported before the forward runs. */
    if ((rc = out_open(out, &f, tmp, sizeof tmp))) goto done;
    if (find_flag(fl, "--step")->seen) {
        for (int i = 0; i < n; i++)
            if (ci_forward(s, &ids[i], 1, lg + (size_t)i * info.vocab_size, 1, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    } else if (ci_forward(s, ids, n, lg, 1, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    if (!f && !(f = fopen(out, "wb"))) { rc = die(1, "%s: cannot create: %s", out, strerror(errno)); goto done; }
    size_t cnt = (size_t)n * info.vocab_size;
    if (fwrite(lg, sizeof *lg, cnt, f) != cnt) { rc = die(1, "%s: write failed: %s", out, strerror(errno)); goto done; }
    int cerr = fclose(f);
    f = NULL;
    if (cerr) { rc = die(1, "%s: write failed: %s", out, strerror(errno)); goto done; }
    if (tmp[0]) {
        if (rename(tmp, out)) { rc = die(1, "%s: cannot create: %s", out, strerror(errno)); goto done; }
        tmp[0] = 0;
    }
done:
    if (f) fclose(f);
    if (tmp[0]) unlink(tmp);
    free(lg);
    free(ids);
    ci_session_free(s);
    ci_model_free(m);
    return rc;
}

typedef struct {
    int first;                  /* --ids: no comma before the first id */
    tok_stream *stream;         /* text output: NULL with --ids */
    int n;                      /* tokens generated */
    char err[512];
} gen_out;

static int print_tok(void *ctx, int tok) {
    gen_out *o = ctx;
    o->n++;
    if (!o->stream) {
        printf("%s%d", o->first ? "" : ",", tok);
        o->first = 0;
    } else {
        const char *txt;
        size_t len;
        if (tok_stream_put(o->stream, tok, &txt, &len, o->err, sizeof o->err)) return 1;
        fwrite(txt, 1, len, stdout);
    }
    fflush(stdout);
    return 0;
}

/* The prompt's ids: --prompt-ids as given; --prompt text encoded with the model's special
 * tokens (BOS as the tokenizer config says); --chat a user message rendered through the
 * model's chat template (with the generation prompt) and encoded without adding specials,
 * as transformers' apply_chat_template does. */
static int prompt_ids(const char *dir, const char *tpl, tok_tokenizer *tk, const char *ids_arg, const char *prompt,
                      const char *chat, int **ids, int *n) {
    char err[1024];
    if (ids_arg) return parse_ids("generate", "--prompt-ids", ids_arg, ids, n);
    char *text = NULL;
    size_t tl = 0;
    int add_special = 1;
    if (chat) {
        json_t *req = json_pack("{s:[{s:s,s:s}],s:b}", "messages", "role", "user", "content", chat, "add_generation_prompt", 1);
        if (!req) return die(1, "generate: --chat: the message is not valid UTF-8");
        int rc = tpl_render_request(dir, tpl, req, &text, &tl, err, sizeof err);
        json_decref(req);
        if (rc) return die(1, "%s", err);
        add_special = 0;
    }
    size_t cnt = 0;
    int rc = tok_encode(tk, chat ? text : prompt, chat ? tl : strlen(prompt), add_special, ids, &cnt, err, sizeof err);
    free(text);
    if (rc) return die(1, "%s", err);
    if (cnt == 0) { free(*ids); *ids = NULL; return die(1, "generate: the prompt encodes to no tokens"); }
    *n = (int)cnt;
    return 0;
}

static int cmd_generate(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {"--prompt-ids", 1, 0, 0}, {"--prompt", 1, 0, 0}, {"--chat", 1, 0, 0},
                  {"--max-tokens", 1, 0, 0}, {"--temperature", 1, 0, 0}, {"--top-k", 1, 0, 0}, {"--top-p", 1, 0, 0},
                  {"--min-p", 1, 0, 0}, {"--repeat-penalty", 1, 0, 0}, {"--seed", 1, 0, 0}, {"--threads", 1, 0, 0},
                  {"--ids", 0, 0, 0}, {"--stats", 0, 0, 0}, {"--chat-template", 1, 0, 0}, {"--device", 1, 0, 0},
                  {"--no-graphs", 0, 0, 0}, {"--mmap", 0, 0, 0}, {"--bf16-act", 0, 0, 0}, {"--int16-act", 0, 0, 0}, {"--mlx-amx", 0, 0, 0}, {"--mlx-amx8", 0, 0, 0}, {"--kv-f16", 0, 0, 0}, {"--tp", 1, 0, 0}, {"--ep", 0, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("generate", argc, argv, fl);
    if (rc) return rc;
    /* no --model: the embedded demo model, as serve and chat */
    const char *dir = find_flag(fl, "--model")->value;
    char demo[PATH_MAX + 16];
    if (!dir) {
        if (srv_demo_dir(demo, sizeof demo))
            return die(1, "generate: no --model given and the demo model (models/demo) is not found");
        dir = demo;
    }
    ci_model_opts mo;
    if ((rc = device_opts("generate", fl, &mo))) return rc;
    const char *pids = find_flag(fl, "--prompt-ids")->value, *ptext = find_flag(fl, "--prompt")->value,
               *pchat = find_flag(fl, "--chat")->value;
    if ((pids != NULL) + (ptext != NULL) + (pchat != NULL) != 1)
        return die(2, "generate: give exactly one of --prompt-ids, --prompt or --chat");
    int want_ids = find_flag(fl, "--ids")->seen;
    ci_sampler_opts so;
    ci_sampler_defaults(&so);
    long long maxt = 64, v;
    double d;
    if (find_flag(fl, "--max-tokens")->seen && parse_long("generate", "--max-tokens", find_flag(fl, "--max-tokens")->value, 0, 1 << 24, &maxt)) return 2;
    if (find_flag(fl, "--temperature")->seen) { if (parse_double("generate", "--temperature", find_flag(fl, "--temperature")->value, 0, 100, &d)) return 2; so.temperature = (float)d; }
    if (find_flag(fl, "--top-k")->seen) { if (parse_long("generate", "--top-k", find_flag(fl, "--top-k")->value, 0, INT_MAX, &v)) return 2; so.top_k = (int)v; }
    if (find_flag(fl, "--top-p")->seen) { if (parse_double("generate", "--top-p", find_flag(fl, "--top-p")->value, 1e-9, 1, &d)) return 2; so.top_p = (float)d; }
    if (find_flag(fl, "--min-p")->seen) { if (parse_double("generate", "--min-p", find_flag(fl, "--min-p")->value, 0, 1, &d)) return 2; so.min_p = (float)d; }
    if (find_flag(fl, "--repeat-penalty")->seen) { if (parse_double("generate", "--repeat-penalty", find_flag(fl, "--repeat-penalty")->value, 1e-3, 100, &d)) return 2; so.repeat_penalty = (float)d; }
    if (find_flag(fl, "--seed")->seen) { if (parse_long("generate", "--seed", find_flag(fl, "--seed")->value, 0, LLONG_MAX, &v)) return 2; so.seed = (uint64_t)v; }
    char err[1024];
    tok_tokenizer *tk = NULL;
    if ((!want_ids || !pids) && tok_load(dir, &tk, err, sizeof err)) return die(1, "%s", err);
    int *ids = NULL, n = 0;
    if ((rc = prompt_ids(dir, find_flag(fl, "--chat-template")->value, tk, pids, ptext, pchat, &ids, &n))) { tok_free(tk); return rc; }
    ci_model *m = NULL;
    ci_session *s = NULL;
    int *out = NULL, n_out = 0;
    gen_out go = { 1, NULL, 0, "" };
    if ((rc = open_model(dir, find_flag(fl, "--threads")->value, &mo, &m))) goto done;
    if ((rc = check_ids(m, ids, n, "--prompt-ids"))) goto done;
    if (ci_session_new(m, n + (int)maxt, &s, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    out = malloc((size_t)(maxt + 1) * sizeof *out);
    if (!out) { rc = die(1, "out of memory"); goto done; }
    if (!want_ids) {
        go.stream = tok_stream_new(tk, 1);
        if (!go.stream) { rc = die(1, "out of memory"); goto done; }
    }
    double t0 = now();
    int grc = ci_generate(s, ids, n, (int)maxt, &so, out, &n_out, print_tok, &go, err, sizeof err);
    double dt = now() - t0;
    if (go.stream && !grc && !go.err[0]) {
        const char *txt;
        size_t len;
        if (!tok_stream_flush(go.stream, &txt, &len, go.err, sizeof go.err)) fwrite(txt, 1, len, stdout);
    }
    printf("\n");
    fflush(stdout);  /* the text line ends before any --stats line on stderr */
    if (grc) { rc = die(1, "%s", err); goto done; }
    if (go.err[0]) { rc = die(1, "%s", go.err); goto done; }
    if (find_flag(fl, "--stats")->seen) {
        ci_model_info info;
        ci_model_get_info(m, &info);
        fprintf(stderr, "cinfer: %d prompt tokens, %d generated in %.2f s (%.1f tok/s overall) on %s\n", n, go.n, dt,
                dt > 0 ? go.n / dt : 0.0, info.backend);
    }
done:
    tok_stream_free(go.stream);
    free(out);
    free(ids);
    ci_session_free(s);
    ci_model_free(m);
    tok_free(tk);
    return rc;
}

static void print_bytes(const char *label, double b) {
    const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int i = 0;
    while (b >= 1024 && i < 4) { b /= 1024; i++; }
    printf("%-24s %.2f %s\n", label, b, u[i]);
}

/* bytes in GiB, with two significant digits below 0.01 GiB (small test models). */
static const char *gib(char *buf, size_t n, double bytes) {
    double g = bytes / (1024.0 * 1024.0 * 1024.0);
    snprintf(buf, n, g >= 0.01 || g == 0 ? "%.2f" : "%.2g", g);
    return buf;
}

static int cmd_inspect(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {"--kv-f16", 0, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("inspect", argc, argv, fl);
    if (rc) return rc;
    const char *dir = need("inspect", fl, "--model", &rc);
    if (rc) return rc;
    ci_model *m;
    ci_model_opts io;   /* inspect's own: the mapped files (no copy of weights it does not read), the cache asked for */
    memset(&io, 0, sizeof io);
    io.map_weights = 1;
    io.kv_f16 = find_flag(fl, "--kv-f16")->seen;
    io.n_threads = 1;
    char oerr[1024];
    if (ci_model_open(dir, &io, &m, oerr, sizeof oerr)) return die(1, "%s", oerr);
    ci_model_info i;
    ci_model_get_info(m, &i);
    printf("%-24s %s\n", "family", i.family);
    printf("%-24s %s\n", "model_type", i.model_type);
    printf("%-24s %s\n", "backend", i.backend);
    printf("%-24s %d\n", "layers", i.n_layers);
    printf("%-24s %d\n", "hidden_size", i.hidden_size);
    printf("%-24s %d\n", "vocab_size", i.vocab_size);
    printf("%-24s %lld (%.3f B)\n", "parameters", (long long)i.n_params, i.n_params / 1e9);
    for (int d = 0; d < 16; d++)
        if (i.bytes_by_dtype[d]) {
            char label[64];
            snprintf(label, sizeof label, "bytes %s", ci_dtype_label(d));
            print_bytes(label, (double)i.bytes_by_dtype[d]);
        }
    printf("%-24s %zu\n", "kv_bytes_per_token", i.cache_bytes_per_token);
    static const struct { const char *label; long long n; } at[] = {
        { "cache_bytes_at_1k", 1000 }, { "cache_bytes_at_64k", 65536 }, { "cache_bytes_at_1m", 1048576 } };
    for (int k = 0; k < 3; k++) {
        size_t cb = ci_model_cache_bytes(m, at[k].n);
        char label[64];
        snprintf(label, sizeof label, "%s", at[k].label);
        printf("%-24s %zu (%.1f bytes/token)\n", label, cb, (double)cb / (double)at[k].n);
    }
    print_bytes("decode_weight_bytes", (double)i.decode_bytes);
    /* What a CUDA run needs on the device: the weights in their checkpoint dtypes, the cache
     * at the model's context and at 4k tokens, and an estimate of the session's scratch. */
    double wb = 0, scratch = (double)ci_model_scratch_estimate(m);
    for (int d = 0; d < 16; d++) wb += (double)i.bytes_by_dtype[d];
    long long ctxs[2] = { i.max_position, 4096 };
    for (int k = 0; k < 2; k++) {
        if (ctxs[k] <= 0 || (k == 1 && ctxs[0] == 4096)) continue;
        double cb = (double)ci_model_cache_bytes(m, ctxs[k]);
        char a[32], b[32], c[32], d[32];
        printf("%-24s %s GiB weights + %s GiB cache at %lld tokens + %s GiB scratch = %s GiB\n", "device memory:",
               gib(a, sizeof a, wb), gib(b, sizeof b, cb), ctxs[k], gib(c, sizeof c, scratch),
               gib(d, sizeof d, wb + cb + scratch));
    }
    ci_model_free(m);
    return 0;
}

/* ---- bench: prefill / decode speed and the bandwidth they imply ---- */

typedef struct { const uint64_t *buf; size_t n; int parts; int isa; uint64_t sum[64]; } bw_ctx;
/* Sum of a range with 4 independent 64-byte accumulators and a software prefetch, so the
 * loop is bound by memory, not by the adds. GCC vector extensions; the AVX-512 and AVX2
 * copies (chosen at run time) use the widest loads the CPU has, as the matmul kernels do:
 * a narrower probe under-reports what the kernels can reach. */
typedef uint64_t bw_v8 __attribute__((vector_size(64)));
#define BW_BODY                                                                           \
    bw_v8 acc[4] = {{0}};                                                                 \
    for (size_t k = a; k < b; k += 32) {                                                  \
        __builtin_prefetch(buf + k + 512);                                                \
        const bw_v8 *p = (const bw_v8 *)(buf + k);                                        \
        acc[0] += p[0]; acc[1] += p[1]; acc[2] += p[2]; acc[3] += p[3];                   \
    }                                                                                     \
    uint64_t s = 0;                                                                       \
    for (int j = 0; j < 4; j++) for (int q = 0; q < 8; q++) s += acc[j][q];               \
    return s;
static uint64_t bw_sum(const uint64_t *buf, size_t a, size_t b) { BW_BODY }
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static uint64_t bw_sum512(const uint64_t *buf, size_t a, size_t b) { BW_BODY }
__attribute__((target("avx2"))) static uint64_t bw_sum256(const uint64_t *buf, size_t a, size_t b) { BW_BODY }
#endif
static void bw_task(void *vctx, int i) {
    bw_ctx *c = vctx;
    size_t a = c->n * (size_t)i / (size_t)c->parts / 64 * 64, b = c->n * (size_t)(i + 1) / (size_t)c->parts / 64 * 64;
#if defined(__x86_64__)
    if (c->isa == 2) { c->sum[i] = bw_sum512(c->buf, a, b); return; }
    if (c->isa == 1) { c->sum[i] = bw_sum256(c->buf, a, b); return; }
#endif
    c->sum[i] = bw_sum(c->buf, a, b);
}

/* Read bandwidth of this machine: all threads sum a 2 GiB buffer, best of 5. */
static double measure_read_gbs(int threads) {
    size_t bytes = (size_t)2 << 30, n = bytes / 8;
    uint64_t *buf = aligned_alloc(64, bytes);
    if (!buf) return 0;
    for (size_t k = 0; k < n; k++) buf[k] = k;
    ci_pool *p = ci_pool_new(threads);
    bw_ctx c = { buf, n, 0, 0, {0} };
#if defined(__x86_64__)
    __builtin_cpu_init();
    c.isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
#endif
    c.parts = ci_pool_size(p) < 64 ? ci_pool_size(p) : 64;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        ci_pool_run(p, bw_task, &c, c.parts);
        double t = now() - t0;
        if (t < best) best = t;
    }
    uint64_t s = 0;
    for (int i = 0; i < c.parts; i++) s += c.sum[i];
    if (s == 42) printf(" ");  /* keep the sum alive */
    ci_pool_free(p);
    free(buf);
    return bytes / best / 1e9;
}

/* bench --batch: nb sessions of depth + prompt-len + gen tokens (one more on a device, for
 * the warm-up step), each prefilled untimed with the single sequence's context and prompt,
 * then gen timed steps of ci_forward_batch_argmax over all of them, each row fed its own
 * greedy token. On a device one untimed batched step runs first. *secs: the decode time. */
static int bench_batch(ci_model *m, const int *ids, long long pl, long long depth, long long gen, int nb, int on_dev,
                       double *secs) {
    char err[1024];
    int rc = 0;
    ci_session **ss = calloc((size_t)nb, sizeof *ss);
    int *tok = malloc((size_t)nb * sizeof *tok), *next = malloc((size_t)nb * sizeof *next);
    if (!ss || !tok || !next) { rc = die(1, "out of memory"); goto done; }
    int ctx = (int)(depth + pl + gen + (on_dev ? 1 : 0));
    for (int b = 0; b < nb; b++) {
        if (ci_session_new(m, ctx, &ss[b], err, sizeof err) ||
            (depth > 0 && ci_forward_argmax(ss[b], ids + pl, (int)depth, &tok[b], err, sizeof err)) ||
            ci_forward_argmax(ss[b], ids, (int)pl, &tok[b], err, sizeof err)) {
            rc = die(1, "%s", err);
            goto done;
        }
    }
    if (on_dev) {
        if (ci_forward_batch_argmax(ss, tok, nb, next, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
        memcpy(tok, next, (size_t)nb * sizeof *tok);
    }
    double t0 = now();
    for (long long k = 0; k < gen; k++) {
        if (ci_forward_batch_argmax(ss, tok, nb, next, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
        memcpy(tok, next, (size_t)nb * sizeof *tok);
    }
    *secs = now() - t0;
done:
    for (int b = 0; ss && b < nb; b++) ci_session_free(ss[b]);
    free(ss);
    free(tok);
    free(next);
    return rc;
}

/* The median of v[0, n) (n <= 100; the upper one of the two middle values when n is even). */
static double median_of(const double *v, int n) {
    double w[100];
    memcpy(w, v, (size_t)n * sizeof *w);
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && w[b - 1] > w[b]; b--) { double t = w[b]; w[b] = w[b - 1]; w[b - 1] = t; }
    return w[n / 2];
}

/* bench: one session of depth + prompt-len + gen tokens. --depth N random tokens are
 * prefilled first (untimed; decode at a long context, as llama-bench's -d), then
 * --prompt-len random tokens are timed as one prefill, then --gen decode steps, after an
 * untimed warm-up (the prefill and two steps in the same session, then reset: first-touch
 * page faults, library set-up and graph capture are not timed, as llama-bench's warm-up
 * run). On the CPU a decode step is ci_forward with the last row's logits fed the same token
 * each step (as it always was, so CPU numbers stay comparable). On a device it is greedy
 * ci_forward_argmax fed its own token (4 bytes come back per step, not the logits); the
 * device line is a device-to-device copy probe. --batch N then also times batched greedy
 * decode of N sequences (bench_batch) in the same run and prints its line and its ratio to
 * the single-sequence decode line. --reps N times the prefill and the decode N times (a reset
 * before each) and reports the median run. */
static int cmd_bench(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {"--prompt-len", 1, 0, 0}, {"--gen", 1, 0, 0}, {"--threads", 1, 0, 0},
                  {"--depth", 1, 0, 0}, {"--device", 1, 0, 0}, {"--no-graphs", 0, 0, 0}, {"--mmap", 0, 0, 0}, {"--bf16-act", 0, 0, 0}, {"--int16-act", 0, 0, 0}, {"--mlx-amx", 0, 0, 0}, {"--mlx-amx8", 0, 0, 0}, {"--kv-f16", 0, 0, 0}, {"--tp", 1, 0, 0}, {"--ep", 0, 0, 0}, {"--batch", 1, 0, 0},
                  {"--reps", 1, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("bench", argc, argv, fl);
    if (rc) return rc;
    const char *dir = need("bench", fl, "--model", &rc);
    if (rc) return rc;
    long long pl = 128, gen = 32, depth = 0, nb = 0, reps = 1;
    if (find_flag(fl, "--prompt-len")->seen && parse_long("bench", "--prompt-len", find_flag(fl, "--prompt-len")->value, 1, 1 << 20, &pl)) return 2;
    if (find_flag(fl, "--gen")->seen && parse_long("bench", "--gen", find_flag(fl, "--gen")->value, 1, 1 << 20, &gen)) return 2;
    if (find_flag(fl, "--depth")->seen && parse_long("bench", "--depth", find_flag(fl, "--depth")->value, 0, 1 << 24, &depth)) return 2;
    if (find_flag(fl, "--batch")->seen && parse_long("bench", "--batch", find_flag(fl, "--batch")->value, 1, 256, &nb)) return 2;
    if (find_flag(fl, "--reps")->seen && parse_long("bench", "--reps", find_flag(fl, "--reps")->value, 1, 100, &reps)) return 2;
    ci_model_opts mo;
    if ((rc = device_opts("bench", fl, &mo))) return rc;
    ci_model *m = NULL;
    ci_session *s = NULL;
    int *ids = NULL;
    float *lg = NULL;
    char err[1024];
    if ((rc = open_model(dir, find_flag(fl, "--threads")->value, &mo, &m))) return rc;
    ci_model_info i;
    ci_model_get_info(m, &i);
    int on_dev = !strncmp(i.backend, "cuda", 4);
    /* The prompt's ids come first from the generator (the same prompt as without --depth),
     * the context's after them. */
    ids = malloc((size_t)(pl + depth) * sizeof *ids);
    lg = malloc((size_t)i.vocab_size * sizeof *lg);
    if (!ids || !lg) { rc = die(1, "out of memory"); goto done; }
    uint64_t r = 12345;
    for (long long k = 0; k < pl + depth; k++) { r = r * 6364136223846793005ull + 1442695040888963407ull; ids[k] = (int)((r >> 33) % (uint64_t)i.vocab_size); }
    if (ci_session_new(m, (int)(depth + pl + gen), &s, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    int tok = ids[0], next;
    /* untimed warm-up, as llama-bench's: first-touch page faults of the session's scratch
     * and cache, library set-up and (device) graph capture */
    if (on_dev) {
        if (ci_forward_argmax(s, ids, (int)pl, &tok, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
        for (int k = 0; k < 2 && k < gen; k++)
            if (ci_forward_argmax(s, &tok, 1, &next, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
            else tok = next;
    } else {
        if (ci_forward(s, ids, (int)pl, lg, 0, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
        for (int k = 0; k < 2 && k < gen; k++)
            if (ci_forward(s, &tok, 1, lg, 0, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
        tok = ids[0];
    }
    /* reps runs of (reset, depth, timed prefill, timed decode); each line reports the run whose
     * tok/s is the median of the runs (a shared machine's noise comes and goes between them) */
    double rp[100], rd[100], rcp[100], rcd[100];
    for (int rep = 0; rep < reps; rep++) {
        ci_session_reset(s);
        if (depth > 0) {
            int drc = on_dev ? ci_forward_argmax(s, ids + pl, (int)depth, &next, err, sizeof err)
                             : ci_forward(s, ids + pl, (int)depth, lg, 0, err, sizeof err);
            if (drc) { rc = die(1, "%s", err); goto done; }
        }
        double t0 = now(), c0 = cpu_now();
        int prc = on_dev ? ci_forward_argmax(s, ids, (int)pl, &tok, err, sizeof err) : ci_forward(s, ids, (int)pl, lg, 0, err, sizeof err);
        if (prc) { rc = die(1, "%s", err); goto done; }
        rp[rep] = now() - t0;
        rcp[rep] = cpu_now() - c0;
        if (!on_dev) tok = ids[0];
        t0 = now();
        c0 = cpu_now();
        for (int k = 0; k < gen; k++) {
            if (on_dev) {
                if (ci_forward_argmax(s, &tok, 1, &next, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
                tok = next;
            } else if (ci_forward(s, &tok, 1, lg, 0, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
        }
        rd[rep] = now() - t0;
        rcd[rep] = cpu_now() - c0;
    }
    const double tp = median_of(rp, (int)reps), cp = median_of(rcp, (int)reps);
    const double td = median_of(rd, (int)reps), cd = median_of(rcd, (int)reps);
    double dec = gen / td;
    /* The probe's 2 GiB come after the session's memory is given back. */
    ci_session_free(s);
    s = NULL;
    double tb = 0;
    if (nb > 0 && (rc = bench_batch(m, ids, pl, depth, gen, (int)nb, on_dev, &tb))) goto done;
    double copy = on_dev ? ci_model_copy_gbs(m, err, sizeof err) : 0;
    printf("model        %s (%s, %.3f B params, backend %s)\n", dir, i.family, i.n_params / 1e9, i.backend);
    if (depth > 0)
        printf("prefill      %lld tokens in %.3f s = %.1f tok/s (context %lld..%lld)\n", pl, tp, pl / tp, depth, depth + pl);
    else
        printf("prefill      %lld tokens in %.3f s = %.1f tok/s\n", pl, tp, pl / tp);
    printf("decode       %lld tokens in %.3f s = %.2f tok/s (context %lld..%lld)\n", gen, td, dec, depth + pl,
           depth + pl + gen);
    if (nb > 0) {
        double bdec = (double)(nb * gen) / tb;
        printf("decode batch %lld tokens in %.3f s = %.2f tok/s (%lld sequences x %lld steps)\n", nb * gen, tb, bdec, nb,
               gen);
        printf("batch gain   %.2fx the single-sequence decode tok/s\n", bdec / dec);
    }
    if (reps > 1) {
        printf("reps         %lld runs, prefill tok/s", reps);
        for (int k = 0; k < reps; k++) printf(" %.1f", pl / rp[k]);
        printf(", decode tok/s");
        for (int k = 0; k < reps; k++) printf(" %.2f", gen / rd[k]);
        printf(" (the lines above: the medians)\n");
    }
    printf("weights/tok  %.1f MiB read per decoded token\n", i.decode_bytes / 1048576.0);
    double dgbs = i.decode_bytes * dec / 1e9;
    if (on_dev && copy > 0)
        printf("decode GB/s  %.2f (weights only; %.1f%% of the device copy bandwidth)\n", dgbs, 100.0 * dgbs / copy);
    else
        printf("decode GB/s  %.2f (weights only)\n", dgbs);
    if (on_dev) {
        fflush(stdout);
        if (copy <= 0) { rc = die(1, "bench: %s", err[0] ? err : "copy probe: no result"); goto done; }
        printf("device       %.2f GB/s device-to-device copy (2 x 1 GiB buffers, bytes read + written, best of 5 x 10 copies)\n", copy);
    } else {
        long long th = 0;
        if (find_flag(fl, "--threads")->seen) parse_long("bench", "--threads", find_flag(fl, "--threads")->value, 1, 1024, &th);
        /* on a shared machine, with one thread, tokens / CPU time is what an idle core gives */
        printf("cpu time     prefill %.3f s (%.1f tok/s), decode %.3f s (%.2f tok/s): the process's CPU time, all threads\n",
               cp, pl / cp, cd, gen / cd);
        const int nt = ci_backend_cpu_next_tile_bytes();
        if (nt) printf("prefetch     16-bit decode tiles of rows up to %d bytes prefetch the next tile\n", nt);
        else printf("prefetch     16-bit decode tiles prefetch each row ahead\n");
        const int sq = ci_backend_cpu_seq_bytes();
        if (sq) printf("row order    one-token decodes read 16-bit rows of up to %d bytes row after row\n", sq);
        printf("machine      %.2f GB/s read bandwidth (2 GiB summed by all threads with the widest loads, best of 5)\n", measure_read_gbs((int)th));
    }
done:
    free(ids);
    free(lg);
    ci_session_free(s);
    ci_model_free(m);
    return rc;
}

/* Perplexity of a text file: tokenized without added specials, scored in independent
 * windows of --window tokens (the first token of a window is not predicted), the first
 * --max-tokens tokens only. Prints "perplexity P over N tokens". */
static int cmd_perplexity(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {"--file", 1, 0, 0}, {"--window", 1, 0, 0}, {"--max-tokens", 1, 0, 0},
                  {"--threads", 1, 0, 0}, {"--device", 1, 0, 0}, {"--no-graphs", 0, 0, 0}, {"--mmap", 0, 0, 0}, {"--bf16-act", 0, 0, 0}, {"--int16-act", 0, 0, 0}, {"--mlx-amx", 0, 0, 0}, {"--mlx-amx8", 0, 0, 0}, {"--kv-f16", 0, 0, 0}, {"--tp", 1, 0, 0}, {"--ep", 0, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("perplexity", argc, argv, fl);
    if (rc) return rc;
    const char *dir = need("perplexity", fl, "--model", &rc), *file = need("perplexity", fl, "--file", &rc);
    if (rc) return rc;
    ci_model_opts mo;
    if ((rc = device_opts("perplexity", fl, &mo))) return rc;
    long long win = 256, maxn = 1LL << 30;
    if (find_flag(fl, "--window")->seen && parse_long("perplexity", "--window", find_flag(fl, "--window")->value, 2, 1 << 20, &win)) return 2;
    if (find_flag(fl, "--max-tokens")->seen && parse_long("perplexity", "--max-tokens", find_flag(fl, "--max-tokens")->value, 2, 1LL << 30, &maxn)) return 2;
    char err[1024];
    FILE *f = fopen(file, "rb");
    if (!f) return die(1, "%s: cannot open: %s", file, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 > cap) {
            char *nt = realloc(text, cap = cap * 2 + 65536);
            if (!nt) { free(text); fclose(f); return die(1, "out of memory"); }
            text = nt;
        }
        size_t r = fread(text + len, 1, cap - len, f);
        len += r;
        if (!r) break;
    }
    fclose(f);
    tok_tokenizer *tk = NULL;
    ci_model *m = NULL;
    ci_session *s = NULL;
    int *ids = NULL;
    size_t n = 0;
    float *lg = NULL;
    if (tok_load(dir, &tk, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    if (tok_encode(tk, text, len, 0, &ids, &n, err, sizeof err)) { rc = die(1, "%s: %s", file, err); goto done; }
    if ((long long)n > maxn) n = (size_t)maxn;
    if (n < 2) { rc = die(1, "%s: fewer than 2 tokens to score", file); goto done; }
    if ((rc = open_model(dir, find_flag(fl, "--threads")->value, &mo, &m))) goto done;
    if ((rc = check_ids(m, ids, (int)n, file))) goto done;
    ci_model_info info;
    ci_model_get_info(m, &info);
    if (ci_session_new(m, (int)win, &s, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    lg = malloc((size_t)win * info.vocab_size * sizeof *lg);
    if (!lg) { rc = die(1, "out of memory"); goto done; }
    double nll = 0;
    long long cnt = 0;
    for (size_t w = 0; w < n; w += (size_t)win) {
        int k = (int)(n - w < (size_t)win ? n - w : (size_t)win);
        ci_session_reset(s);
        if (ci_forward(s, ids + w, k, lg, 1, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
        for (int t = 0; t + 1 < k; t++) {
            const float *row = lg + (size_t)t * info.vocab_size;
            double mx = row[0], se = 0;
            for (int v = 1; v < info.vocab_size; v++) if (row[v] > mx) mx = row[v];
            for (int v = 0; v < info.vocab_size; v++) se += exp((double)row[v] - mx);
            nll -= (double)row[ids[w + (size_t)t + 1]] - mx - log(se);
            cnt++;
        }
    }
    printf("perplexity %.6f over %lld tokens\n", exp(nll / (double)cnt), cnt);
done:
    free(lg);
    free(ids);
    free(text);
    ci_session_free(s);
    ci_model_free(m);
    tok_free(tk);
    return rc;
}

static int cmd_make_random(int argc, char **argv) {
    flag fl[] = { {"--config", 1, 0, 0}, {"--out", 1, 0, 0}, {"--dtype", 1, 0, 0}, {"--seed", 1, 0, 0},
                  {"--layers", 1, 0, 0}, {"--threads", 1, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("make-random", argc, argv, fl);
    if (rc) return rc;
    const char *cfg = need("make-random", fl, "--config", &rc), *out = need("make-random", fl, "--out", &rc);
    if (rc) return rc;
    const char *dt = find_flag(fl, "--dtype")->seen ? find_flag(fl, "--dtype")->value : "bf16";
    long long seed = 0, layers = 0, threads = 0;
    if (find_flag(fl, "--seed")->seen && parse_long("make-random", "--seed", find_flag(fl, "--seed")->value, 0, LLONG_MAX, &seed)) return 2;
    if (find_flag(fl, "--layers")->seen && parse_long("make-random", "--layers", find_flag(fl, "--layers")->value, 1, 4096, &layers)) return 2;
    if (find_flag(fl, "--threads")->seen && parse_long("make-random", "--threads", find_flag(fl, "--threads")->value, 1, 1024, &threads)) return 2;
    char err[1024];
    if (ci_make_random_threads(cfg, out, dt, (uint64_t)seed, (int)layers, (int)threads, err, sizeof err)) return die(1, "%s", err);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return die(2, "no command given (logits, generate, inspect, bench, make-random); see cinfer --help");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, stdout);
        return 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "make-random")) return cmd_make_random(argc - 2, argv + 2);
    if (!strcmp(cmd, "perplexity")) return cmd_perplexity(argc - 2, argv + 2);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 2, argv + 2);
    if (!strcmp(cmd, "template")) return cmd_template(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 2, argv + 2);
    return die(2, "unknown command '%s' (logits, generate, inspect, bench, make-random, perplexity, serve, template, tokenize, detokenize)", cmd);
}
