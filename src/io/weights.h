/* weights.h — binding checkpoint tensors to family structs, once, at load.
 *
 * A family's load() asks for each tensor by name with the exact shape it expects:
 * w_mat for matrices (which may be F32/F16/BF16, or F8_E4M3 with a weight_scale_inv
 * block grid), w_vec for 1-D parameters (converted to an owned f32 copy, they are small).
 * Errors are sticky: the first failure is recorded and later calls do nothing, so load()
 * reads as a plain list of tensors and checks once at the end with w_finish, which also
 * fails on any tensor nobody claimed (beyond the known-ignorable: MTP layers, vision
 * towers, rotary_emb.inv_freq), naming the tensor and the family.
 *
 * With st == NULL the binder runs in record mode: nothing is read, every request is
 * recorded as a spec (name, shape, kind) so `cinfer make-random` can write a checkpoint
 * with the family's exact tensor list from a config alone.
 *
 * DeepSeek V4's original checkpoint: fp8 block scales may be named "<name>.scale" (F8_E8M0)
 * instead of "<name>.weight_scale_inv", and a matrix whose weight is I8/U8 [rows, cols/2]
 * is FP4 (E2M1 pairs) with "<name>.scale" E8M0 per 32 inputs, bound as an mxfp4 view.
 *
 * MLX-quantized modules (mlx-community checkpoints, quant.h): whenever "<name>.scales"
 * exists, w_mat / w_embed / w_experts bind "<name>.weight" (U32 codes), ".scales" and
 * ".biases" as one quantized ci_mat (dtype CI_U32, a ci_qdesc owned with the w_vec copies),
 * with bits / group / mode read from the tensors' shapes and checked against the config's
 * block when the family passed it with w_set_quant. Stacked experts and MultiLinear heads
 * are views into one tensor, nothing is copied or dequantized. */
#ifndef CI_WEIGHTS_H
#define CI_WEIGHTS_H
#include "../backend/backend.h"
#include "quant.h"
#include "safetensors.h"
#include <stdarg.h>

typedef enum { W_REQUIRED = 1, W_OPTIONAL = 0 } w_need;
typedef enum { W_KIND_MATRIX, W_KIND_EMBED, W_KIND_NORM, W_KIND_BIAS, W_KIND_INDEX } w_kind;

typedef struct {
    char name[256];
    int ndim;
    int64_t shape[4];
    w_kind kind;
    int64_t range;              /* W_KIND_INDEX: entries lie in [0, range) */
} w_spec;

typedef struct w_binder {
    st_set *st;                 /* NULL: record mode */
    const char *family;         /* for messages */
    const char *prefix;         /* prepended to every name ("model." is part of the names) */
    long long n_layers;         /* layers >= this index are MTP heads: ignorable */
    unsigned char *claimed;     /* per tensor of st */
    int failed;
    char err[1024];
    int64_t n_params;
    size_t bytes_by_dtype[CI_DTYPE_COUNT];
    size_t decode_bytes;
    w_spec *specs;              /* record mode */
    int n_specs, cap_specs;
    float **owned;              /* w_vec copies (and ci_qdesc records), freed by w_owned_free */
    int n_owned, cap_owned;
    const q_config *quant;      /* the config's MLX quantization block, or NULL (w_set_quant) */
} w_binder;

int w_init(w_binder *b, st_set *st, const char *family, long long n_layers);
/* Binds "<name>.weight" [rows, cols] (and "<name>.weight_scale_inv" for fp8). Returns 1 if
 * bound, 0 if optional and absent (out zeroed), -1 on error (sticky). */
int w_mat(w_binder *b, ci_mat *out, w_need need, int64_t rows, int64_t cols, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Same for an embedding table [vocab, dim] (read one row per token, not counted whole in
 * decode bytes). */
int w_embed(w_binder *b, ci_mat *out, int64_t rows, int64_t cols, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Binds a 1-D tensor of `len` elements named exactly fmt (include ".weight"), into an owned
 * f32 copy. add is added to every element (0 for plain weights). Returns as w_mat. */
int w_vec(w_binder *b, float **out, w_need need, int64_t len, float add, w_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Binds a small tensor of exactly `shape` (ndim <= 4) named exactly fmt into an owned f32
 * copy (row-major), e.g. DeepSeek V4's mHC mappings and compressor position biases. */
int w_arr(w_binder *b, float **out, w_need need, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* Binds an integer table [rows, cols] (I32 or I64) into an owned int32 copy, every entry
 * checked to lie in [lo, hi) (a bad entry fails naming the tensor, the index and the value).
 * Record mode lists it as W_KIND_INDEX (make-random fills valid distinct values per row). */
int w_itable(w_binder *b, int32_t **out, int64_t rows, int64_t cols, int64_t lo, int64_t hi, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
/* Binds n_exp experts' SwiGLU matrices from whichever layout the checkpoint has:
 *   per-expert  <prefix>.experts.<e>.{gate,up,down}_proj.weight (fp8 scales allowed)
 *   fused       <prefix>.experts.gate_up_proj [E, 2I, H] (gate rows first),
 *               <prefix>.experts.down_proj [E, H, I]
 *   mlx-stacked <prefix>.switch_mlp.{gate,up,down}_proj.weight [E, out, in]
 * gate/up/down receive n_exp views ([I, H], [I, H], [H, I]) into the mapped tensors;
 * nothing is copied. Decode bytes count top_k experts' worth (the active ones). Record
 * mode lists the per-expert names. Returns 1 or -1 (sticky). */
int w_experts(w_binder *b, ci_mat *gate, ci_mat *up, ci_mat *down, int n_exp, int top_k, int64_t I, int64_t H,
              const char *prefix);
/* Per-expert matrices only, under any part names: "<prefix>.experts.<e>.<g|u|d>.weight"
 * (DeepSeek V4's original checkpoint: w1 / w3 / w2). Decode bytes as w_experts. */
int w_experts_each(w_binder *b, ci_mat *gate, ci_mat *up, ci_mat *down, int n_exp, int top_k, int64_t I, int64_t H,
                   const char *prefix, const char *g, const char *u, const char *d);
/* Checks quantized modules against config.json's `quantization` block from now on (the
 * per-module bits / group / mode, and `false` entries). Without it, the packing is taken
 * from the tensors alone. q must outlive the binder. */
void w_set_quant(w_binder *b, const q_config *q);
/* MLX MultiLinear "<name>.weight" [n_heads, out_dims, in_dims] (DeepSeek's embed_q /
 * unembed_out), quantized or not, as n_heads views [out_dims, in_dims] for matmul. With
 * for_xw, the views are instead the transposes [in_dims, out_dims] that matmul_xw reads as
 * x·W (MLA's W_UK): such views must only go to matmul_xw, and only a quantized tensor can
 * be viewed so (an unquantized one is refused with a message). Returns as w_mat. */
int w_multilinear(w_binder *b, ci_mat *heads, int n_heads, int64_t out_dims, int64_t in_dims, int for_xw,
                  const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A stacked "<name>.weight" [n, rows, cols] (MLX SwitchLinear experts, e.g. Nemotron-H's
 * switch_mlp.fc1 / fc2), quantized ("<name>.scales" present: one packed stack) or F32 / F16 /
 * BF16, as n views [rows, cols] into the mapped tensor; nothing is copied. Decode bytes
 * count `active` of the n matrices (the top-k experts a token reads). Record mode lists
 * the [n, rows, cols] tensor. Returns 1, 0 if optional and absent, or -1 (sticky). */
int w_stacked(w_binder *b, ci_mat *outs, w_need need, int n, int active, int64_t rows, int64_t cols, const char *fmt,
              ...) __attribute__((format(printf, 8, 9)));
/* Rows [r0, r0 + n) of W as a view, for every dtype (fp8 and quantized views keep their
 * place in the scale grid through scale_row0). */
ci_mat w_mat_rows(const ci_mat *W, int64_t r0, int64_t n);
/* Bytes of W's weights as stored (packed codes + scales + biases when quantized). */
size_t w_mat_bytes(const ci_mat *W);
/* Binds a depthwise conv weight of C channels and K taps, as HF checkpoints store it
 * ([C, 1, K]) or after mlx-lm's sanitize ([C, K, 1]) or squeezed ([C, K]), into an owned
 * f32 copy transposed to [K, C] (tap-major: a conv step then reads contiguous channels).
 * The copy is freed with the other w_vec copies. Record mode lists [C, 1, K]. */
int w_conv(w_binder *b, float **out, int64_t C, int64_t K, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The output head: with tied embeddings the embedding itself (a stored "<name>.weight" is
 * claimed and ignored, as transformers does; the head's bytes count in decode bytes, it is
 * read whole every token), else the matrix "<name>.weight" [rows, cols]. Returns as w_mat. */
int w_head(w_binder *b, ci_mat *head, const ci_mat *embed, int tied, int64_t rows, int64_t cols, const char *name);
/* Marks an existing tensor as used without binding (e.g. lm_head when tied). */
void w_claim(w_binder *b, const char *name);
/* Checks that every tensor was claimed or is ignorable; copies the sticky error. */
int w_finish(w_binder *b, char *err, size_t errlen);
/* Frees the binder's bookkeeping (not the owned vectors, see w_owned_*). */
void w_done(w_binder *b);
/* The owned f32 copies made by w_vec, to be freed with the model. */
void w_owned_free(float **owned, int n);

/* Refuses an expert count the checkpoint cannot hold, before a loader allocates views for
 * every expert of every MoE layer: each expert matrix takes at least one byte of tensor
 * data, so n_layers x n_experts x mats matrices need that many bytes. Those numbers come
 * from config.json alone (n_experts up to 2^16, layers up to 4096). No-op in record mode
 * (st == NULL). Returns 0, or -1 with a message naming cfg_path and key. */
int w_check_experts(const st_set *st, const char *cfg_path, const char *family, const char *key, long long n_experts,
                    long long n_layers, int mats, char *err, size_t errlen);

/* 1 if a tensor name belongs to something that is not the language model. */
int w_ignorable(const char *name, long long n_layers);

#endif
