/* generate.c — prefill + decode loop with stop conditions (EOS, max tokens, callback).
 * Pure greedy sampling (smp_is_greedy) goes through ci_forward_argmax: the backend picks
 * the id with the sampler's own rule, and a device moves 4 bytes a step, not the logits. */
#include "sampler.h"
#include "../core/status.h"
#include "../models/model.h"
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
