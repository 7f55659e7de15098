/* nemotron_h.h — what the NEMOTRON_H family offers beyond the family table: snapshots
 * of a session's hybrid cache (prefix reuse, tests) and the choice of
 * the prefill scan form (benchmarks). Every function checks that the session or model is
 * a nemotron_h one and refuses otherwise. */
#ifndef CI_NEMOTRON_H_H
#define CI_NEMOTRON_H_H
#include "model.h"
#include "../cache/cache.h"
#include "../nn/mamba2.h"

/* A copy of the session's whole cache (every Mamba2 state, KV rows [0, pos), pos), through
 * the backend's download (the serving op, registry.h). NULL with a message when s is not a
 * nemotron_h session or memory runs out. Free with cache_snap_free. */
cache_snap *nemh_snapshot(const ci_session *s, char *err, size_t errlen);
/* Puts a snapshot back (into this session or another of the same model, with max_ctx >= the
 * snapshot's position) and moves the session to its position. Only the cache's shape is
 * checked: a snapshot of another model with the same layer layout is not caught. */
int nemh_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen);
/* Seconds this session has spent in Mamba2 scans (all layers) since the last call; 0 when
 * s is not a nemotron_h session. For benchmarks. */
double nemh_scan_seconds(ci_session *s);
/* Prefill form of the Mamba2 scan for every later forward of m (default: chunked SSD). */
int nemh_set_scan(ci_model *m, mamba2_scan scan, char *err, size_t errlen);

#endif
