/* quant.h — MLX quantization (mlx-community checkpoints): the config.json block and the
 * packing of one quantized module, read from its tensors.
 *
 * config.json `quantization` (mlx-lm writes `quantization_config` as a copy; that one is
 * read when the first is absent, and also its legacy {"quant_method": "mxfp4"} form):
 *   {"group_size": 64, "bits": 4, "mode": "affine",            defaults for every module
 *    "model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},  a per-module override
 *    "lm_head": false}                                          a module left unquantized
 * A module is quantized iff `<path>.scales` exists (mlx-lm's loader rule); an override
 * object without "mode" means affine (MLX's to_quantized default), and its missing
 * group_size / bits take that mode's defaults (affine 64/4, mxfp4 32/4, mxfp8 32/8).
 *
 * Tensors of a quantized module `<path>` with logical weight [..., rows, cols]:
 *   <path>.weight  U32 [..., rows, cols * bits / 32]   little-endian bit stream per row
 *   <path>.scales  [..., rows, cols / group]           affine: F32/F16/BF16; mxfp: U8 (E8M0)
 *   <path>.biases  same as scales                      affine only
 * so bits, group and mode follow from the shapes and dtypes alone (q_infer); the config,
 * when it has a block, must agree (q_config_module). Invariant: a q_params that passed
 * q_params_valid is one MLX can produce: affine bits 2, 3, 4, 5, 6, 8 with groups 32, 64,
 * 128; mxfp4 = 4 bits, group 32; mxfp8 = 8 bits, group 32. */
#ifndef CI_QUANT_H
#define CI_QUANT_H
#include "../backend/backend.h"
#include <jansson.h>
#include <stddef.h>

typedef struct {
    ci_qmode mode;
    int bits, group;
} q_params;

typedef struct {
    int present;                 /* config.json has an MLX quantization block */
    q_params def;                /* its defaults */
    const json_t *obj;           /* borrowed from the config: the block (overrides are members) */
    const char *key;             /* "quantization" or "quantization_config", for messages */
} q_config;

/* What the config says about one module. */
typedef enum {
    Q_MOD_DEFAULT,               /* no entry: quantized iff its scales exist, with cfg->def */
    Q_MOD_PARAMS,                /* an override object: quantized with *out */
    Q_MOD_OFF                    /* false: not quantized */
} q_mod;

/* Reads the block from root (or text, a nested text_config). No block: present = 0, and 0
 * is returned. A malformed block (unknown mode, unsupported bits/group, an override that
 * is neither an object nor a boolean) is an error naming the key. */
int q_config_read(const json_t *root, const json_t *text, const char *path, q_config *out, char *err, size_t errlen);
/* The config's word on module `path` (exact module path, e.g. "model.layers.3.mlp.gate"). */
q_mod q_config_module(const q_config *qc, const char *path, q_params *out);

/* 1 if p is a combination MLX can produce. */
int q_params_valid(const q_params *p);
/* "affine 4-bit group 64" into buf; returns buf. */
const char *q_params_str(const q_params *p, char *buf, size_t n);
const char *q_mode_name(ci_qmode m);

/* The packing of a module from its tensors (scales / biases may come from a stacked
 * tensor: only their last dimension is read here; the binder checks the leading ones).
 * cols is the logical input width. biases NULL when absent. Returns 0, or -1 with a
 * message naming the tensor and what was expected. */
int q_infer(const ci_tensor *w, const ci_tensor *scales, const ci_tensor *biases, int64_t cols, q_params *out,
            char *err, size_t errlen);

#endif
