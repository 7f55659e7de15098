/* schema_mask.c — the per-token cost of a structured-output mask (issue #21) on a real
 * vocabulary: the Qwen3 tokenizer (151,669 ids, fetched by scripts/fetch-tokenizers.sh).
 * Not part of the build; from the repository root after a CPU build (build-h here):
 *   gcc -O2 -Isrc -Iinclude bench/schema_mask.c build-h/libcinfer_core.a \
 *       $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lm -lpthread -o /tmp/schema_mask
 *   /tmp/schema_mask .cache/tokenizers/qwen3
 * For each case, a valid reply is encoded with the tokenizer and replayed token by token:
 * before each token, the mask over the whole vocabulary is made (tm_mask: the trie walk),
 * then the token is fed. Prints the trie's build time and size, and per case the mean,
 * median and worst mask time over the reply's tokens; "batch 16" is 16 masks, what one
 * decode step of 16 constrained sequences costs the scheduler thread. The last column is
 * the same mask made the naive way (each token's text fed alone from the state), for scale. */
#include "server/engine.h"
#include "server/schema.h"
#include "server/tokmask.h"
#include "text/tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

static const struct { const char *name, *schema, *reply; int tools; } cases[] = {
    { "object of strings/ints", "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
      "\"bio\":{\"type\":\"string\",\"maxLength\":400},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":5}},"
      "\"required\":[\"name\",\"age\",\"bio\",\"tags\"],\"additionalProperties\":false}",
      "{\"name\": \"Ada Lovelace\", \"age\": 36, \"bio\": \"English mathematician and writer, chiefly known for her work on Charles Babbage's proposed "
      "mechanical general-purpose computer, the Analytical Engine. She was the first to recognise that the machine had applications beyond pure "
      "calculation.\", \"tags\": [\"math\", \"computing\", \"poetry\"]}", 0 },
    { "formats + patterns", "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"at\":{\"type\":\"string\",\"format\":\"date-time\"},"
      "\"mail\":{\"type\":\"string\",\"format\":\"email\"},\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"}},\"required\":[\"id\",\"at\",\"mail\",\"code\"],"
      "\"additionalProperties\":false}",
      "{\"id\": \"123e4567-e89b-12d3-a456-426614174000\", \"at\": \"2024-05-31T23:59:59.5+02:00\", \"mail\": \"ada.lovelace@example.org\", \"code\": \"ABC-1234\"}", 0 },
    { "anyOf + enums + numbers", "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circle\"},"
      "\"r\":{\"type\":\"number\",\"minimum\":0,\"maximum\":100}},\"required\":[\"kind\",\"r\"],\"additionalProperties\":false},{\"type\":\"object\","
      "\"properties\":{\"kind\":{\"const\":\"rect\"},\"w\":{\"type\":\"number\"},\"h\":{\"type\":\"number\"},\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]}},"
      "\"required\":[\"kind\",\"w\",\"h\"],\"additionalProperties\":false}]}}",
      "[{\"kind\": \"circle\", \"r\": 2.5}, {\"kind\": \"rect\", \"w\": 3, \"h\": 4.25, \"color\": \"green\"}, {\"kind\": \"circle\", \"r\": 99}]", 0 },
    { "free text + strict tool call", "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},"
      "\"required\":[\"city\",\"days\"],\"additionalProperties\":false}",
      "Let me look that up for you. I will check the forecast for the next few days.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>", 1 },
};

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".cache/tokenizers/qwen3";
    char err[512];
    tok_tokenizer *tk;
    if (tok_load(dir, &tk, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    int V = tok_n_vocab(tk);
    char *bytes;
    uint32_t *off;
    double t0 = now();
    if (eng_token_texts(tk, V, &bytes, &off)) { fprintf(stderr, "token texts failed\n"); return 1; }
    double t1 = now();
    tm_trie *trie;
    if (tm_build(bytes, off, V, '<', &trie)) { fprintf(stderr, "trie failed\n"); return 1; }
    double t2 = now();
    printf("vocabulary %d ids, %u text bytes; token texts %.0f ms, trie %.0f ms (%d nodes)\n", V, off[V], (t1 - t0) * 1e3, (t2 - t1) * 1e3, tm_nodes(trie));
    uint8_t *allowed = malloc((size_t)V);
    int nr;
    const int *order = tm_order(trie, &nr);
    int *rank = malloc((size_t)V * sizeof *rank);
    for (int q = 0; q < nr; q++) rank[order[q]] = q;
    printf("%-30s %6s %9s %9s %9s %11s %9s\n", "case", "tokens", "mean ms", "median", "worst", "batch16 ms", "naive ms");
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        json_t *s = json_loads(cases[c].schema, 0, NULL);
        jsc_grammar *g = jsc_new();
        int root = s ? jsc_schema(g, s, s, "#", err, sizeof err) : -1;
        if (root < 0) { fprintf(stderr, "%s: %s\n", cases[c].name, err); return 1; }
        g->root = root;
        if (cases[c].tools) {
            const char *open = "<tool_call>\n{\"name\": \"";
            int parts[3] = { jsc_literal(g, "get_weather\", \"arguments\": ", 27), root, jsc_literal(g, "}\n</tool_call>", 14) };
            g->root = jsc_text(g, open, strlen(open), jsc_group(g, SN_SEQ, parts, 3));
        }
        int *ids;
        size_t n;
        if (tok_encode(tk, cases[c].reply, strlen(cases[c].reply), 0, &ids, &n, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        sm_matcher m;
        sm_state st;
        sm_init(&m, g, &st);
        double *ms = malloc(n * sizeof *ms), naive = 0;
        int nn = 0;
        for (size_t i = 0; i < n; i++) {
            double a = now();
            int cnt = tm_mask(trie, &m, &st, allowed);
            ms[i] = (now() - a) * 1e3;
            if (cnt < 0 || !allowed[rank[ids[i]]]) { fprintf(stderr, "%s: token %zu (id %d) not allowed\n", cases[c].name, i, ids[i]); return 1; }
            if (i % 8 == 0) {                          /* the naive mask, on every 8th token */
                a = now();
                uint32_t mk = sm_mark(&m);
                for (int t = 0; t < V; t++) {
                    sm_state x = st;
                    if (off[t + 1] > off[t]) sm_feed(&m, &x, bytes + off[t], off[t + 1] - off[t]);
                    sm_reset(&m, mk);
                }
                naive += (now() - a) * 1e3;
                nn++;
            }
            sm_feed(&m, &st, bytes + off[ids[i]], off[ids[i] + 1] - off[ids[i]]);
        }
        double sum = 0;
        for (size_t i = 0; i < n; i++) sum += ms[i];
        qsort(ms, n, sizeof *ms, cmpd);
        printf("%-30s %6zu %9.3f %9.3f %9.3f %11.2f %9.1f\n", cases[c].name, n, sum / n, ms[n / 2], ms[n - 1], 16 * sum / n, naive / nn);
        free(ms);
        free(ids);
        sm_release(&m);
        jsc_free(g);
        json_decref(s);
    }
    free(allowed);
    free(rank);
    tm_free(trie);
    free(bytes);
    free(off);
    tok_free(tk);
    return 0;
}
