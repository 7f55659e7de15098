/* qwen_hybrid_cache.c — Qwen3-Next / Qwen3.5 / Qwen3.5-MoE cache snapshots (prefix reuse; a
 * recurrent state cannot be trimmed like KV rows). The cache is backend memory
 * (qwen_hybrid_run.c): a snapshot copies it into a buffer of the same backend, a restore copies it back
 * (layer_snap.h).
 * The blob's layout is layer_snap.h's. */
#include "qwen_hybrid_internal.h"
#include "layer_snap.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

int qh_is_session(const ci_session *s) {
    return s && s->impl && s->m->family->ops->forward == qh_forward;
}

static void part(const ci_session *s, int l, layer_part *p) {
    const qh_model *d = s->m->impl;
    const qh_session *c = s->impl;
    const qh_layer *L = &d->layers[l];
    const int rows = !L->linear && !ci_session_pages_shared(s);   /* shared pool: the rows stay in its blocks */
    p->buf = L->linear ? c->state[l] : rows ? c->kv[l] : NULL;
    p->row_floats = rows ? qh_kv_floats(L, s->m->be) : 0;
    p->state_floats = L->linear ? qh_state_floats(L) : 0;
}

cache_snap *qh_snapshot(const ci_session *s, char *err, size_t errlen) {
    if (!qh_is_session(s)) {
        ci_err(err, errlen, "%s: not a gated-DeltaNet session", s ? s->m->family->name : "?");
        return NULL;
    }
    const qh_model *d = s->m->impl;
    return layer_snapshot(s, d->n_layers, part, ((const qh_session *)s->impl)->cache_pos, err, errlen);
}

int qh_session_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    if (!qh_is_session(s)) return ci_err(err, errlen, "%s: not a gated-DeltaNet session", s->m->family->name);
    const qh_model *d = s->m->impl;
    qh_session *c = s->impl;
    int pos;
    if (layer_restore(s, d->n_layers, part, snap, &pos, err, errlen)) return -1;
    c->cache_pos = pos;
    s->pos = pos;
    return 0;
}
