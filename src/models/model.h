/* model.h — the loaded model and a sequence's session, as the families see them.
 *
 * A ci_model owns its config, the mmap'd checkpoint, the backend and the family's weight
 * struct (impl). A ci_session is one sequence: its cache and scratch, sized at creation
 * (the decode path allocates nothing), and its position. */
#ifndef CI_MODEL_H
#define CI_MODEL_H
#include "../backend/backend.h"
#include "../io/config.h"
#include "../io/safetensors.h"
#include "../io/weights.h"
#include "registry.h"
#include <stdint.h>

typedef struct ci_model {
    char dir[4096];
    ci_config cfg;
    const ci_family *family;
    st_set *st;
    ci_backend *be;
    int owns_backend;
    void *impl;                 /* family weights + hyper-params */
    int64_t n_params;           /* elements in bound tensors (tied counted once) */
    size_t bytes_by_dtype[CI_DTYPE_COUNT];
    /* Bytes of weights a decode step reads (every matrix once, one embedding row). */
    size_t decode_bytes;
    /* Debug hook: called with named intermediates (e.g. "layer 3 attn_out"); NULL = off. */
    void (*dump)(void *ctx, const char *name, int layer, const float *x, int n, int dim);
    void *dump_ctx;
    /* make-random: the tensor list recorded by load() when st == NULL (owned). */
    w_spec *specs;
    int n_specs;
} ci_model;

typedef struct ci_session {
    ci_model *m;
    int max_ctx;                /* tokens the cache holds */
    int pos;                    /* tokens already in the cache */
    void *impl;                 /* family cache + scratch */
} ci_session;

#define CI_DUMP(m, name, layer, x, n, dim) \
    do { if ((m)->dump) (m)->dump((m)->dump_ctx, (name), (layer), (x), (n), (dim)); } while (0)

#endif
