/* lfm2.c — the LFM2 (lfm2): short-conv + attention hybrid.
 * Registered so that loading names this family; the forward path is not written yet. */
#include "registry.h"

const ci_family fam_lfm2 = { "lfm2", (const char *const[]){ "lfm2", NULL },
                            "short-conv layers not implemented yet", NULL };
