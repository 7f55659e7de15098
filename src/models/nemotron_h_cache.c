/* nemotron_h_cache.c — Nemotron-H session cache access: snapshots (prefix reuse; a Mamba2
 * state cannot be trimmed like KV rows), the scan form and the scan timer. The cache is
 * backend memory (nemotron_h_run.c): a snapshot copies it into a buffer of the same backend, a restore copies it back
 * (layer_snap.h). */
#include "nemotron_h_internal.h"
#include "layer_snap.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

static int is_session(const ci_session *s) { return s && s->m->family == &fam_nemotron_h && s->impl; }

/* ---- snapshots by backend copies (layer_snap.h) ------------------------------ */

static void part(const ci_session *s, int l, layer_part *p) {
    const nh_model *d = s->m->impl;
    const nh_session *c = s->impl;
    const char k = d->layers[l].kind;
    const int rows = k == '*' && !ci_session_pages_shared(s);   /* shared pool: the rows stay in its blocks */
    p->buf = rows ? c->kv[l] : k == 'M' ? c->state[l] : NULL;
    p->row_floats = rows ? nh_kv_floats(d, s->m->be) : 0;
    p->state_floats = k == 'M' ? d->state_floats : 0;
}

cache_snap *nemh_snapshot(const ci_session *s, char *err, size_t errlen) {
    if (!is_session(s)) {
        ci_err(err, errlen, "nemotron_h: snapshot of a session of another family");
        return NULL;
    }
    const nh_model *d = s->m->impl;
    nh_session *c = s->impl;
    ci_backend *be = s->m->be;
    if (s->pos == 0) nh_reset_states(d, be, c);   /* a reset session: zero states at 0 */
    return layer_snapshot(s, d->n_layers, part, c->cache_pos, err, errlen);
}

int nemh_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    if (!is_session(s)) return ci_err(err, errlen, "nemotron_h: restore on a session of another family");
    const nh_model *d = s->m->impl;
    nh_session *c = s->impl;
    int pos;
    if (layer_restore(s, d->n_layers, part, snap, &pos, err, errlen)) return -1;
    c->cache_pos = pos;
    s->pos = pos;
    return 0;
}

/* ---- benchmarks: the scan form and its timer ------------------------------------------- */

double nemh_scan_seconds(ci_session *s) {
    if (!is_session(s)) return 0;
    nh_session *c = s->impl;
    double t = c->mamba.scan_seconds;
    c->mamba.scan_seconds = 0;
    return t;
}

int nemh_set_scan(ci_model *m, mamba2_scan scan, char *err, size_t errlen) {
    if (!m || m->family != &fam_nemotron_h || !m->impl) return ci_err(err, errlen, "nemotron_h: not a nemotron_h model");
    if (scan != MAMBA2_SCAN_CHUNKED && scan != MAMBA2_SCAN_RECURRENT)
        return ci_err(err, errlen, "nemotron_h: unknown scan form %d", (int)scan);
    ((nh_model *)m->impl)->scan = scan;
    return 0;
}
