/* nemotron_h.h — what the NEMOTRON_H family offers beyond the family table: access to a
 * session's hybrid cache (snapshot / restore for prefix reuse, tests) and the choice of
 * the prefill scan form (benchmarks). Every function checks that the session or model is
 * a nemotron_h one and refuses otherwise. */
#ifndef CI_NEMOTRON_H_H
#define CI_NEMOTRON_H_H
#include "model.h"
#include "../cache/cache.h"
#include "../nn/mamba2.h"

/* The session's cache (KV rows of the attention layers, conv + SSM state of the Mamba2
 * layers), its pos in step with the session (a session at position 0, e.g. after
 * ci_session_reset, gets zeroed states first); NULL when s is not a nemotron_h session. */
ci_cache *nemh_cache(ci_session *s);
/* Puts a snapshot taken with cache_snapshot(nemh_cache(s)) back and moves the session to
 * its position. */
int nemh_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen);
/* A snapshot of the session's cache at its position (the serving op, registry.h). */
cache_snap *nemh_snapshot(const ci_session *s, char *err, size_t errlen);
/* Seconds this session has spent in Mamba2 scans (all layers) since the last call; 0 when
 * s is not a nemotron_h session. For benchmarks. */
double nemh_scan_seconds(ci_session *s);
/* Prefill form of the Mamba2 scan for every later forward of m (default: chunked SSD). */
int nemh_set_scan(ci_model *m, mamba2_scan scan, char *err, size_t errlen);

#endif
