/* generate.c — prefill + decode loop with stop conditions (EOS, max tokens, callback).
 * Pure greedy sampling (smp_is_greedy) goes through ci_forward_argmax: the backend picks
 * the id with the sampler's own rule, and a device moves 4 bytes a step, not the logits.
 * ci_generate_text wraps it for library users: the model folder's tokenizer (loaded once,
 * kept in the model) encodes the prompt and a tok_stream turns ids into complete UTF-8. */
#include "sampler.h"
#include "../core/status.h"
#include "../models/model.h"
#include "../text/tokenizer.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int ci_generate(ci_session *s, const int *prompt, int n_prompt, int max_tokens, const ci_sampler_opts *so,
                int *out, int *n_out, ci_token_cb cb, void *cb_ctx, char *err, size_t errlen) {
    ci_model *m = s->m;
    const int V = (int)m->cfg.vocab_size;
    *n_out = 0;
    if (n_prompt <= 0) return ci_err(err, errlen, "generate: the prompt is empty");
    if (max_tokens < 0) return ci_err(err, errlen, "generate: max tokens must be >= 0, got %d", max_tokens);
    if (smp_check(so, err, errlen)) return -1;
    if (s->pos + n_prompt + max_tokens > s->max_ctx)
        return ci_err(err, errlen, "generate: prompt (%d) + max tokens (%d) exceed the context of %d",
                      n_prompt, max_tokens, s->max_ctx - s->pos);
    float *logits = malloc((size_t)V * sizeof *logits);
    int *hist = malloc((size_t)(n_prompt + max_tokens + 1) * sizeof *hist);
    smp_state smp;
    if (!logits || !hist || smp_init(&smp, so, V)) {
        free(logits); free(hist);
        return ci_err(err, errlen, "generate: out of memory");
    }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    int nh = n_prompt, rc = 0, greedy = smp_is_greedy(so), tok = 0;
    if (max_tokens > 0 && (greedy ? ci_forward_argmax(s, prompt, n_prompt, &tok, err, errlen)
                                  : ci_forward(s, prompt, n_prompt, logits, 0, err, errlen))) { rc = -1; goto done; }
    for (int i = 0; i < max_tokens; i++) {
        if (!greedy) tok = smp_sample(&smp, logits, hist, nh);
        out[(*n_out)++] = tok;
        hist[nh++] = tok;
        if (cb && cb(cb_ctx, tok)) break;
        int eos = 0;
        for (int e = 0; e < m->cfg.n_eos; e++) eos |= tok == m->cfg.eos_ids[e];
        if (eos || i + 1 == max_tokens) break;
        int next = tok;
        if (greedy ? ci_forward_argmax(s, &next, 1, &tok, err, errlen) : ci_forward(s, &next, 1, logits, 0, err, errlen)) {
            rc = -1;
            goto done;
        }
    }
done:
    smp_free(&smp);
    free(logits);
    free(hist);
    return rc;
}

typedef struct {
    tok_stream *stream;
    ci_text_cb cb;
    void *ctx;
    int stopped;                /* the caller's cb asked to stop */
    char err[512];              /* a decode failure (stops the generation) */
} text_sink;

static int put_text(void *ctx, int tok) {
    text_sink *t = ctx;
    const char *txt;
    size_t len;
    if (tok_stream_put(t->stream, tok, &txt, &len, t->err, sizeof t->err)) return 1;
    if (len && t->cb && t->cb(t->ctx, txt, len)) { t->stopped = 1; return 1; }
    return 0;
}

int ci_generate_text(ci_session *s, const char *prompt, int max_tokens, const ci_sampler_opts *so, ci_text_cb cb,
                     void *cb_ctx, int *n_out, char *err, size_t errlen) {
    ci_model *m = s->m;
    if (n_out) *n_out = 0;
    if (!prompt) return ci_err(err, errlen, "generate: no prompt");
    if (max_tokens < 0) return ci_err(err, errlen, "generate: max tokens must be >= 0, got %d", max_tokens);
    pthread_mutex_lock(&m->tk_mu);
    int rc = m->tk ? 0 : tok_load(m->dir, &m->tk, err, errlen);
    pthread_mutex_unlock(&m->tk_mu);
    if (rc) return -1;
    int *ids = NULL, *out = NULL, n = 0;
    size_t cnt = 0;
    text_sink t = { NULL, cb, cb_ctx, 0, "" };
    if (tok_encode(m->tk, prompt, strlen(prompt), 1, &ids, &cnt, err, errlen)) return -1;
    if (cnt == 0) { rc = ci_err(err, errlen, "generate: the prompt encodes to no tokens"); goto done; }
    if (cnt > (size_t)s->max_ctx) {   /* ci_generate says the rest; this keeps the count an int */
        rc = ci_err(err, errlen, "generate: prompt (%zu) exceeds the context of %d", cnt, s->max_ctx);
        goto done;
    }
    out = malloc(((size_t)max_tokens + 1) * sizeof *out);
    t.stream = tok_stream_new(m->tk, 1);
    if (!out || !t.stream) { rc = ci_err(err, errlen, "generate: out of memory"); goto done; }
    rc = ci_generate(s, ids, (int)cnt, max_tokens, so, out, &n, put_text, &t, err, errlen);
    if (n_out) *n_out = n;
    if (rc) goto done;
    if (t.err[0]) { rc = ci_err(err, errlen, "%s", t.err); goto done; }
    if (!t.stopped) {
        const char *txt;
        size_t len;
        if (tok_stream_flush(t.stream, &txt, &len, t.err, sizeof t.err)) { rc = ci_err(err, errlen, "%s", t.err); goto done; }
        if (len && cb) cb(cb_ctx, txt, len);
    }
done:
    tok_stream_free(t.stream);
    free(out);
    free(ids);
    return rc;
}
