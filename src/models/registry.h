/* registry.h — model_type strings to families.
 *
 * Every model_type a checkpoint ships maps to its own family value (DESIGN.md table). A
 * family whose forward path is not written yet is still registered, with `missing` saying
 * what is missing, so that loading it fails naming the real family. */
#ifndef CI_REGISTRY_H
#define CI_REGISTRY_H
#include <stddef.h>

struct ci_model;
struct ci_session;

typedef struct ci_family_ops {
    /* Reads the family's hyper-parameters from m->cfg and binds every tensor (w_* API). */
    int (*load)(struct ci_model *m, char *err, size_t errlen);
    void (*unload)(struct ci_model *m);
    /* Allocates the per-sequence cache and scratch for s->max_ctx tokens. */
    int (*session_init)(struct ci_session *s, char *err, size_t errlen);
    void (*session_free)(struct ci_session *s);
    /* Runs n tokens at positions s->pos.. through the model and advances s->pos.
     * logits: [n, vocab] when all_logits, else [vocab] for the last token; may be NULL. */
    int (*forward)(struct ci_session *s, const int *tokens, int n, float *logits, int all_logits,
                   char *err, size_t errlen);
    /* Bytes of cache one token of context costs (all layers). */
    size_t (*cache_bytes_per_token)(const struct ci_model *m);
} ci_family_ops;

typedef struct ci_family {
    const char *name;                 /* the family's own name, used in every message */
    const char *const *model_types;   /* NULL-terminated */
    const char *missing;              /* NULL when implemented; else what is not implemented yet */
    const ci_family_ops *ops;
} ci_family;

const ci_family *reg_find(const char *model_type);
/* Comma-separated list of every registered model_type. */
void reg_list(char *buf, size_t n);

extern const ci_family fam_llama, fam_qwen3, fam_qwen3_moe, fam_deepseek_v3, fam_deepseek_v32, fam_deepseek_v4,
    fam_qwen3_next, fam_qwen3_5, fam_qwen3_5_moe, fam_lfm2, fam_lfm2_moe, fam_nemotron_h;

#endif
