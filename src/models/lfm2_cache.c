/* lfm2_cache.c — LFM2 / LFM2-MoE session cache access: snapshots (prefix reuse; a conv
 * state cannot be trimmed like KV rows) and the prefill chunk. The cache is backend memory
 * (lfm2_run.c): a snapshot copies it into a buffer of the same backend, a restore copies it back
 * (layer_snap.h). */
#include "lfm2_internal.h"
#include "layer_snap.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

static int lfm2_is_family(const ci_family *f) { return f == &fam_lfm2 || f == &fam_lfm2_moe; }

/* ---- cache access: snapshots by backend copies (layer_snap.h) ------------------ */

static int check_session(const ci_session *s, char *err, size_t errlen) {
    if (!lfm2_is_family(s->m->family) || !s->impl)
        return ci_err(err, errlen, "%s: not an lfm2 / lfm2_moe session", s->m->family->name);
    return 0;
}

static void part(const ci_session *s, int l, layer_part *p) {
    const lfm2_model *d = s->m->impl;
    const lfm2_session *c = s->impl;
    const int attn = d->layers[l].is_attn, rows = attn && !ci_session_pages_shared(s);   /* shared pool: rows in its blocks */
    p->buf = attn ? (rows ? c->kv[l] : NULL) : c->state[l];
    p->row_floats = rows ? lfm2_kv_floats(d, s->m->be) : 0;
    p->state_floats = attn ? 0 : lfm2_state_floats(d);
}

cache_snap *lfm2_snapshot(const ci_session *s, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return NULL;
    const lfm2_model *d = s->m->impl;
    return layer_snapshot(s, d->n_layers, part, ((const lfm2_session *)s->impl)->cache_pos, err, errlen);
}

int lfm2_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return -1;
    const lfm2_model *d = s->m->impl;
    lfm2_session *c = s->impl;
    int pos;
    if (layer_restore(s, d->n_layers, part, snap, &pos, err, errlen)) return -1;
    c->cache_pos = pos;
    s->pos = pos;
    return 0;
}

int lfm2_set_chunk(ci_session *s, int chunk, char *err, size_t errlen) {
    if (check_session(s, err, errlen)) return -1;
    lfm2_session *c = s->impl;
    if (chunk < 1 || chunk > c->rows)
        return ci_err(err, errlen, "%s: prefill chunk %d is outside 1..%d", s->m->family->name, chunk, c->rows);
    c->run.ub = chunk;   /* the runner's buffers hold c->rows rows */
    return 0;
}
