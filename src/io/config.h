/* config.h — config.json into hyper-parameters.
 *
 * cfg_load reads <dir>/config.json, descends into "text_config" when the checkpoint is a
 * VL/wrapper config, resolves model_type to its family through the registry (unknown
 * types are refused with the list of supported ones) and reads the hyper-parameters every
 * decoder has. Families read their own extra keys from cfg->text with the cfg_* getters,
 * which check type and range and name the key in errors.
 *
 * Both config dialects are read: the hub's (rope_theta + rope_scaling{type|rope_type})
 * and transformers 5's (rope_parameters{rope_type, rope_theta, ...}). mlx-lm's
 * `quantization` block is read and validated into cfg->quant (quant.h). */
#ifndef CI_CONFIG_H
#define CI_CONFIG_H
#include "quant.h"
#include <jansson.h>
#include <stdint.h>

struct ci_family;

typedef enum { CI_ROPE_DEFAULT, CI_ROPE_LINEAR, CI_ROPE_DYNAMIC, CI_ROPE_YARN, CI_ROPE_LLAMA3 } ci_rope_type;

typedef struct {
    ci_rope_type type;
    double theta;
    double factor;                   /* linear / dynamic / yarn / llama3 */
    double partial_rotary_factor;    /* fraction of head_dim rotated (1.0 = all) */
    long long original_max_pos;      /* yarn / llama3 */
    double low_freq_factor, high_freq_factor;           /* llama3 */
    double beta_fast, beta_slow, mscale, mscale_all_dim; /* yarn (0 = unset) */
    double attention_factor;         /* yarn; < 0 when unset (derived) */
    int truncate;                    /* yarn: floor/ceil the correction range (default 1) */
} ci_rope_cfg;

typedef struct ci_config {
    char path[4096];                 /* the config.json read */
    char model_type[64];
    const struct ci_family *family;
    json_t *root;                    /* owned */
    json_t *text;                    /* borrowed: text_config when nested, else root */

    /* What every decoder has. 0 when the family does not use it. */
    long long vocab_size, hidden_size, n_layers, n_heads, n_kv_heads, head_dim;
    long long intermediate_size, max_pos;
    double rms_eps;
    int tie_embeddings;
    ci_rope_cfg rope;
    int bos_id;                      /* -1 when absent */
    int eos_ids[16];
    int n_eos;
    q_config quant;                  /* MLX quantization block (quant.h); present = 0 when none */
} ci_config;

/* Reads and validates config.json in dir. On failure *cfg holds nothing to free. */
int cfg_load(const char *dir, ci_config *cfg, char *err, size_t errlen);
/* Parses a config from an in-memory JSON text (fuzzing, tests). */
int cfg_parse(const char *text, size_t len, const char *what, ci_config *cfg, char *err, size_t errlen);
void cfg_free(ci_config *cfg);

/* Getters on cfg->text. `req`: absent is an error. Range checked: value in [lo, hi].
 * Return 0 on success (out untouched when optional and absent), -1 with a message. */
int cfg_int(const ci_config *c, const char *key, int req, long long lo, long long hi, long long *out,
            char *err, size_t errlen);
int cfg_num(const ci_config *c, const char *key, int req, double lo, double hi, double *out,
            char *err, size_t errlen);
int cfg_bool(const ci_config *c, const char *key, int *out, char *err, size_t errlen);

/* Parses a rope parameter block (transformers 5 rope_parameters or hub rope_scaling merged
 * with top-level rope_theta / partial_rotary_factor) from object `obj`. */
int cfg_rope(const ci_config *c, const json_t *obj, ci_rope_cfg *out, char *err, size_t errlen);

#endif
