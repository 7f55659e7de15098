/* backend.h — the op table every forward pass is written against.
 *
 * Model code (src/models, src/nn) calls these ops and knows nothing of SIMD or devices;
 * a backend (cpu/ now, cuda/ later) implements them. All activations are f32, row-major.
 * Weights are ci_mat views that stay in their checkpoint dtype: kernels convert in
 * registers and accumulate in f32.
 *
 * Conventions: n = number of token rows in the batch; a "matrix" weight W has shape
 * [rows=out_features, cols=in_features] as PyTorch's nn.Linear stores it, and
 * matmul computes y[n, rows] = x[n, cols] · Wᵀ. */
#ifndef CI_BACKEND_H
#define CI_BACKEND_H
#include "../core/tensor.h"
#include "../core/threads.h"
#include <stdint.h>

/* MLX quantization modes (src/io/quant.h reads them from config.json). */
typedef enum { CI_Q_NONE = 0, CI_Q_AFFINE, CI_Q_MXFP4, CI_Q_MXFP8 } ci_qmode;

/* How an MLX-quantized tensor is packed (one per checkpoint tensor, owned by the model).
 * Codes are `bits` wide, one little-endian bit stream per row (element c of a row is bits
 * [c*bits, c*bits + bits) of it); every `group` columns share a scale (and, affine, a bias):
 *   affine: w = scale * q + bias     (q unsigned; scale_dtype F32, F16 or BF16)
 *   mxfp4:  w = scale * e2m1(q),  mxfp8: w = scale * e4m3(q)    (scale_dtype F8_E8M0) */
typedef struct ci_qdesc {
    ci_qmode mode;
    int bits, group;        /* affine: bits 2..8, group 32/64/128; mxfp: 4 or 8, group 32 */
    ci_dtype scale_dtype;
    const void *scales;     /* [tensor rows, cols / group] (all rows of the tensor, stacked
                             * experts or heads included) */
    const void *biases;     /* affine: same shape and dtype as scales; else NULL */
    int stored_t;           /* matmul_xw only: the views hold Wᵀ [cols, rows] as MLX's
                             * MultiLinear stores W_UK, so x·W is a matmul with the stored rows */
    int64_t grid_rows;      /* rows of the scale grid (the whole tensor: stacked experts or heads
                             * included), so a device places it once; 0 = unknown (each view's
                             * reach, scale_row0 + its stored rows, is placed) */
} ci_qdesc;

/* A 2-D weight view. fp8 weights carry a block-scale grid:
 * w[r][c] = fp8(data[r][c]) * scale[r / block][c / block].
 * dtype CI_U32 is an MLX-quantized view: data is its first packed row (rows are
 * cols * bits / 8 bytes apart), scale points to the tensor's ci_qdesc, and scale_row0 is
 * the view's first row in the descriptor's scale grid (views move data and scale_row0). */
typedef struct {
    const void *data;       /* [rows, cols], borrowed */
    ci_dtype dtype;         /* CI_F32, CI_F16, CI_BF16, CI_F8_E4M3, CI_U32 (MLX-quantized) */
    int64_t rows, cols;
    const void *scale;      /* fp8: [ceil(rows/block), ceil(cols/block)]; U32: const ci_qdesc * */
    ci_dtype scale_dtype;   /* CI_F32, CI_BF16 or CI_F8_E8M0 */
    int block;              /* 128 for DeepSeek fp8 */
    int64_t scale_row0;     /* fp8 row views (MLA's per-head W_UK/W_UV): row of the view's
                             * first row in the scale grid, so row r uses scale row
                             * (scale_row0 + r) / block. 0 for whole tensors. */
} ci_mat;

typedef enum { CI_ROPE_NEOX = 0, /* rotate halves: (x[i], x[i+d/2]) */
               CI_ROPE_INTERLEAVED = 1 /* rotate pairs: (x[2i], x[2i+1]) */ } ci_rope_style;

/* A routed-experts layer as the MoE ops see it (nn/moe.h states the math; its moe_forward
 * fills one of these per call). Every pointer is backend memory: the expert views' data,
 * bias and hash_ids are placed with weight(). A device backend may key tables it builds
 * from the views by the address of w_up (stable for a model's life). */
/* A paged KV cache's addressing (rope_attend): the cache arrays kc / vc are a pool of blocks
 * of 2^blk_log2 rows each, and position p of a sequence is row
 *   (tab[p >> blk_log2] << blk_log2) + (p & (2^blk_log2 - 1))
 * of them, where tab is that sequence's block table (block ids, backend memory). Row t of a
 * call uses tab + t * tab_stride when per_row (a decode step of n sequences, one row each),
 * else tab for every row (a chunk of one sequence). Tables are read on the backend, so a
 * recorded step serves any later table contents. */
typedef struct ci_pages {
    const int32_t *tab;
    int tab_stride;              /* entries per sequence's table */
    int per_row;
    int blk_log2;
} ci_pages;
static inline int64_t ci_page_row(const ci_pages *pg, int t, int64_t p) {
    const int32_t *tb = pg->tab + (pg->per_row ? (int64_t)t * pg->tab_stride : 0);
    return ((int64_t)tb[p >> pg->blk_log2] << pg->blk_log2) | (p & ((1 << pg->blk_log2) - 1));
}

typedef enum { CI_ROUTE_SOFTMAX = 0, CI_ROUTE_SIGMOID, CI_ROUTE_SQRTSOFTPLUS } ci_route;
typedef struct ci_moe {
    int n_experts, top_k;
    int hidden, inter;           /* experts read x [n, hidden] (the latent width for latent MoE) */
    ci_route router;
    int norm_topk_prob;
    float norm_eps;              /* sigmoid / sqrtsoftplus: added to the top-k sum; 0 = 1e-20 */
    float routed_scaling;        /* 1 when the family has none */
    int n_group, topk_group;     /* 1, 1: no grouping (sigmoid only) */
    const float *bias;           /* [n_experts] choice bias (e_score_correction_bias) or NULL */
    const int32_t *hash_ids;     /* [hash_vocab, top_k] experts per token id, or NULL */
    int hash_vocab;
    int relu2;                   /* expert = down(relu(up x)²); w_gate unused (may be NULL) */
    float act_limit;             /* > 0: silu(min(g, L)) · clamp(u, -L, L) */
    const ci_mat *w_gate, *w_up; /* [n_experts] views, each [inter, hidden] */
    const ci_mat *w_down;        /* [n_experts] views, each [hidden, inter] */
    /* a shared expert to fold into moe_norm_experts (sh_down NULL: none): gate / up
     * [shared_inter, hidden], down [hidden, shared_inter], the routed experts' activation, added
     * with weight 1, or with sh_router ([1, hidden]; NULL: ungated) σ(xn · sh_routerᵀ) (Qwen2-MoE
     * style: Qwen3-Next, Qwen3.5-MoE) */
    const ci_mat *sh_gate, *sh_up, *sh_down, *sh_router;
    int shared_inter;
    int e_lo, e_hi;              /* expert parallel (e_hi > 0): only experts [e_lo, e_hi) are held here
                                  * (the other views are empty) and run; tokens routed elsewhere add
                                  * nothing to out (the ranks' outputs are summed after). 0, 0: all.
                                  * The CPU's moe_experts honours it (no device joins ranks yet). */
} ci_moe;

/* One Mamba2 layer's scan as the ssd_scan op sees it (nn/mamba2.h states the math); the
 * vectors are backend memory, placed with weight(). Heads of one group are adjacent: head h
 * reads B / C group h / (n_heads / n_groups). */
typedef struct ci_ssd {
    int n_heads, head_dim;       /* Hm, P */
    int n_groups, d_state;       /* G (divides Hm), N */
    float dt_min;                /* dt = max(softplus(raw + dt_bias), dt_min) */
    const float *dt_bias;        /* [Hm] */
    const float *A;              /* [Hm] = -exp(A_log) */
    const float *D;              /* [Hm] skip */
} ci_ssd;

/* Tokens per chunk of the CPU's chunked SSD, and the floats of ssd_scan's scratch for up to
 * n rows (each part rounded to 64 floats). */
enum { CI_SSD_CHUNK = 64 };
static inline size_t ci_ssd_scratch_floats(int n, const ci_ssd *s) {
    const size_t L = CI_SSD_CHUNK, G = (size_t)s->n_groups, N = (size_t)s->d_state, Hm = (size_t)s->n_heads,
                 HP = Hm * (size_t)s->head_dim;
    const size_t parts[] = { (size_t)(n > 0 ? n : 1) * Hm, G * L * N, G * L * N, G * N * L, G * L * L, L * HP,
                             HP * L, Hm * L, HP * N };
    size_t f = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) f += (parts[i] + 63) / 64 * 64;
    return f;
}

/* A gated-DeltaNet layer as the deltanet ops see it (nn/deltanet.h). Vectors are backend
 * memory (placed with weight()). */
typedef struct ci_deltanet {
    int hk, hv, dk, dv;          /* key heads, value heads (a multiple of hk), head dims */
    const float *neg_A;          /* [hv] -exp(A_log) */
    const float *dt_bias;        /* [hv] */
    const float *norm_w;         /* [dv] the output RMSNorm's weight */
    float eps;                   /* its epsilon */
} ci_deltanet;

/* Chunk length of the CPU's chunked DeltaNet form, and the floats of the deltanet op's
 * scratch for up to max_n rows: o [max_n, hv*dv], then the CPU's products of one (head,
 * chunk) or a device's [max_n, hk] k.q. */
enum { CI_DN_CHUNK = 64 };
static inline size_t ci_deltanet_scratch_floats(const ci_deltanet *d, int max_n) {
    const size_t C = CI_DN_CHUNK, dk = (size_t)d->dk, dv = (size_t)d->dv;
    return (size_t)max_n * ((size_t)d->hv * dv + (size_t)d->hk) + 2 * C * dk + 4 * C * C + 3 * dk * C + 3 * dv * C +
           C * dk + 2 * C * dv + dv * dk + 4 * C + (size_t)d->hv + 64;
}

/* DeepSeek V4's KV compressor as the v4 ops see it (nn/compressor.h states the math); the
 * vectors are backend memory. A compressor state is one backend buffer of
 * ci_v4cmp_state_floats floats: the current window's tokens pend_kv and pend_gate (gate +
 * ape) [ratio, m·d] each (m = 1 + overlap), the last complete window's Ca series prev_kv and
 * prev_gate [ratio, d] each, then the entries [cap, d] from ci_v4cmp_entries(). Entry counts
 * follow from positions: after the token at p, the state holds (p + 1) / ratio entries. */
typedef struct ci_v4cmp {
    int ratio, d, overlap;       /* tokens per entry, entry width, CSA's two series (1) or HCA (0) */
    const float *ape;            /* [ratio, m·d] position bias of the gate */
    const float *norm;           /* [d] the entries' RMSNorm weight */
    float eps;
    const float *inv_freq;       /* [rot_dim / 2] the entries' rope (last rot_dim dims, interleaved) */
    float mscale;
    int rot_dim;
    /* Where the entries are: ent NULL, in the state after its ci_v4cmp_entries(c) floats, entry
     * k at k · d; else on a paged cache's block pool (a server's sessions): entry k of row t's
     * sequence is row ci_page_row(&ent_pages, t, k) of ent, d floats each, ent_pages.blk_log2
     * counting entries (a block of 2^KV_BLOCK_LOG2 positions holds 2^blk_log2 = that / ratio of
     * them, ratio a power of two). The state then holds only its first ci_v4cmp_entries floats. */
    float *ent;
    ci_pages ent_pages;
} ci_v4cmp;

static inline size_t ci_v4cmp_entries(const ci_v4cmp *c) {
    return 2 * (size_t)c->ratio * (size_t)(1 + c->overlap) * (size_t)c->d + 2 * (size_t)c->ratio * (size_t)c->d;
}
static inline size_t ci_v4cmp_state_floats(const ci_v4cmp *c, int cap) {
    return ci_v4cmp_entries(c) + (size_t)cap * (size_t)c->d;
}
/* Entry k of row t (whose state is st) as ci_v4cmp's ent says. */
static inline float *ci_v4cmp_entry(const ci_v4cmp *c, float *st, int t, int64_t k) {
    if (c->ent) return c->ent + ci_page_row(&c->ent_pages, t, k) * c->d;
    return st + ci_v4cmp_entries(c) + k * c->d;
}

/* Compressed entries the CPU's v4_index scores per matmul, and the floats of its scratch
 * for an indexer of ih heads of id dims over at most max_entries entries (entries on a
 * block pool are gathered a matmul's worth at a time: the same products as in place). */
enum { CI_V4_IDX_BLOCK = 4096 };
static inline size_t ci_v4_index_scratch_floats(int ih, int id, int max_entries) {
    return ((size_t)ih + (size_t)id) * CI_V4_IDX_BLOCK + 2 * (size_t)(max_entries > 0 ? max_entries : 1);
}

typedef struct ci_backend {
    const char *name;       /* "cpu-avx512", "cpu-avx2", "cpu-scalar" */
    ci_pool *pool;
    int n_threads;

    /* y[n, W.rows] = x[n, W.cols] · Wᵀ */
    void (*matmul)(struct ci_backend *be, float *y, const float *x, int n, const ci_mat *W);
    /* y[n, W.cols] = x[n, W.rows] · W (W not transposed: MLA's absorbed W_UKᵀ q). */
    void (*matmul_xw)(struct ci_backend *be, float *y, const float *x, int n, const ci_mat *W);
    /* out[n, dim] = x / rms(x) * w (w may be NULL: no weight); out may alias x */
    void (*rmsnorm)(struct ci_backend *be, float *out, const float *x, const float *w, int n, int dim, float eps);
    /* In place on x[n, n_heads, head_dim]: rotate the first rot_dim dims of each head
     * (rot_offset: first rotated dim inside the head; usually 0), angle = pos[t] * inv_freq[i],
     * cos/sin multiplied by mscale. inv_freq has rot_dim/2 entries. */
    void (*rope)(struct ci_backend *be, float *x, int n, int n_heads, int head_dim, int rot_offset, int rot_dim,
                 const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style);
    /* Causal GQA attention for n query rows at positions pos0..pos0+n-1.
     * q[n, n_heads*hd]; k/v caches [>= pos0+n, n_kv*hd] with row stride kv_stride floats;
     * out[n, n_heads*hd]; query t attends keys 0..pos0+t. scale multiplies q·k. */
    void (*attention)(struct ci_backend *be, float *out, const float *q, const float *k, const float *v,
                      int n, int pos0, int n_heads, int n_kv, int hd, int kv_stride, float scale);
    /* g[i] = silu(g[i]) * u[i] for i < count */
    void (*swiglu)(struct ci_backend *be, float *g, const float *u, int64_t count);
    /* The clamped SwiGLU's inputs (DeepSeek V4), before swiglu: g[i] = min(g[i], limit), u[i] =
     * min(max(u[i], -limit), limit) for i < count (exact on every backend). */
    void (*clamp_gu)(struct ci_backend *be, float *g, float *u, int64_t count, float limit);
    /* out[n, E.cols] = rows ids[t] of E converted to f32. Ids are validated by the caller. */
    void (*embed)(struct ci_backend *be, float *out, const ci_mat *E, const int32_t *ids, int n);
    /* y[i] += x[i] */
    void (*add)(struct ci_backend *be, float *y, const float *x, int64_t count);
    void (*free)(struct ci_backend *be);

    /* ---- memory: the backend owns every weight, activation, scratch and cache buffer ----
     * A buffer is an opaque address in the backend's memory (host memory for the CPU,
     * device memory for CUDA): model code passes it, and addresses inside it, to ops, and
     * never reads or writes its bytes. alloc returns NULL when out of memory (the device's
     * free / needed bytes are then in last_error); buffers are 256-byte aligned. */
    void *(*alloc)(struct ci_backend *be, size_t bytes);
    void (*buf_free)(struct ci_backend *be, void *buf);
    /* Host <-> backend and backend -> backend byte copies. upload/copy are ordered with the
     * ops around them; download returns when the bytes are in host memory. */
    void (*upload)(struct ci_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(struct ci_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(struct ci_backend *be, void *dst, const void *src, size_t bytes);
    /* `height` copies of `width` bytes, the i-th from src + i·spitch to dst + i·dpitch, ordered
     * like copy (a block's rows in every layer of a pool region: one call, not one per layer). */
    void (*copy_2d)(struct ci_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                    size_t height);
    /* Weights: returns the backend's copy of `bytes` bytes of host memory `host` (an mmap'd
     * tensor, a block-scale grid or an owned f32 vector), copied once in its own dtype and
     * kept until the backend is freed; the same host address gives the same copy (a tied
     * head shares the embedding). CPU: host itself. NULL when out of memory. */
    const void *(*weight)(struct ci_backend *be, const void *host, size_t bytes);
    /* MLX-quantized weights: the backend's copy of descriptor d, its scales (and biases)
     * placed with weight() for the first param_bytes bytes of each (the grid rows the views
     * reach); the packed codes themselves are placed with weight() like any data. Kept until
     * the backend is freed; the same d gives the same copy (grown when a later call reaches
     * further). CPU: d itself. NULL when out of memory. */
    const ci_qdesc *(*weight_q)(struct ci_backend *be, const ci_qdesc *d, size_t param_bytes);
    /* Weights one after another: as weight() for each of host[0..count) (bytes[i] each),
     * the copies laid out in that order in one allocation, so that matrices of one input
     * (q / k / v) can be multiplied as one (CUDA: one GEMM where cuBLAS would take three).
     * A range placed before keeps its copy (the group then is not one allocation). Returns
     * 0, or -1 with last_error. NULL (CPU): the caller places each with weight(). */
    int (*weight_stack)(struct ci_backend *be, int count, const void *const *host, const size_t *bytes,
                        const void **out);

    /* ---- ops whose positions live in backend memory (graph-capturable decode) ----------
     * kv_store: for t < n, cache row pos[t] (rows `stride` floats apart) gets src row t:
     * cache[pos[t] * stride + i] = src[t * width + i] for i < width. */
    void (*kv_store)(struct ci_backend *be, float *cache, int stride, const float *src, int width, int n,
                     const int32_t *pos);
    /* Causal GQA attention like attention(), but query row t attends keys 0..pos[t]
     * (pos in backend memory). max_keys bounds every pos[t] + 1 (the cache's rows): a
     * device backend sizes its launch by it, so one captured step serves any position. */
    void (*attention_pos)(struct ci_backend *be, float *out, const float *q, const float *k, const float *v,
                          int n, const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride,
                          float scale);
    /* ---- fused ops (a device backend runs each as one pass; the CPU composes the ops
     * above in the same order, so its bits are those of the unfused sequence) ------------
     * matmul_n: ys[i][n, Ws[i]->rows] = x · Ws[i]ᵀ for i < count (<= 4; same cols): the
     * q / k / v projections of one input in one launch. */
    void (*matmul_n)(struct ci_backend *be, int count, float *const *ys, const float *x, int n,
                     const ci_mat *const *Ws);
    /* y[n, W.rows] += x · Wᵀ (o_proj / down_proj with the residual add). tmp: [n, W.rows]
     * scratch the CPU computes the product in (then add(y, tmp)); a device may ignore it. */
    void (*matmul_acc)(struct ci_backend *be, float *y, const float *x, int n, const ci_mat *W, float *tmp);
    /* g[n, Wg.rows] = silu(x · Wgᵀ) * (x · Wuᵀ); u: [n, Wu.rows] scratch (the CPU's up
     * product; a device may leave it untouched). */
    void (*matmul_swiglu)(struct ci_backend *be, float *g, float *u, const float *x, int n, const ci_mat *Wg,
                          const ci_mat *Wu);
    /* g[n, Wg.rows] = silu(min(x · Wgᵀ, limit)) * clamp(x · Wuᵀ, ±limit) (DeepSeek V4's clamped
     * SwiGLU, limit > 0); u scratch [n, Wu.rows]: the bits of matmul_n of the two, clamp_gu,
     * swiglu (the CPU composes them; a device may take all in the products' launch). */
    void (*matmul_swiglu_clamp)(struct ci_backend *be, float *g, float *u, const float *x, int n, const ci_mat *Wg,
                                const ci_mat *Wu, float limit);
    /* The block input's RMSNorm fused into the projections that read it: xn[n, cols] =
     * rmsnorm(x) * norm_w (eps), then matmul_n(count, ys, xn, n, Ws), resp.
     * matmul_swiglu(g, u, xn, n, Wg, Wu). xn is scratch: a device may compute the norm on
     * the fly and never write it, so its contents are undefined afterwards. */
    void (*norm_matmul_n)(struct ci_backend *be, float *xn, const float *x, const float *norm_w, float eps, int count,
                          float *const *ys, int n, const ci_mat *const *Ws);
    void (*norm_matmul_swiglu)(struct ci_backend *be, float *xn, const float *x, const float *norm_w, float eps,
                               float *g, float *u, int n, const ci_mat *Wg, const ci_mat *Wu);
    /* norm_matmul_keep: xn[n, W.cols] = rmsnorm(x) * norm_w (eps), written (xn must not alias
     * x), and y = xn · Wᵀ: the MoE block's router, whose normed rows the experts read next. The
     * CPU's bits are rmsnorm's then matmul's; a device may take the norm in the product's own
     * pass (one launch) and write xn from it. */
    void (*norm_matmul_keep)(struct ci_backend *be, float *xn, float *y, const float *x, const float *norm_w,
                             float eps, int n, const ci_mat *W);
    /* The attention block between the projections and attention(): for t < n, per head
     * RMSNorm of q[t] (n_heads heads) and k[t] (n_kv heads) when q_norm / k_norm are given
     * (weights [hd], eps), rope (rot_dim dims from dim 0, pos[t], inv_freq, mscale, style)
     * on both, q in place; then k[t] and v[t] go to cache rows pos[t] of kc / vc (rows
     * kv_stride floats apart). k is left normed and rotated. Same order as rmsnorm(q),
     * rmsnorm(k), rope(q), rope(k), kv_store(k), kv_store(v). */
    void (*qk_rope_store)(struct ci_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv,
                          int hd, const float *q_norm, const float *k_norm, float eps, int rot_dim,
                          const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style, float *kc,
                          float *vc, int kv_stride);
    /* The attention core of a step: qk_rope_store, then attention_pos over the same
     * cache(s) into out, in one pass where a device can. kv_tab NULL: the n rows share the
     * cache kc / vc. Else a decode step of n sequences, one row each, each with its own cache:
     * kv_tab is a backend buffer of 2n pointers, row t's K cache kv_tab[2t] and V cache
     * kv_tab[2t + 1] (each a backend buffer's address plus a multiple of 4 floats; kc / vc
     * unused), and each row's bits are those of the two ops on that row alone. pages (host
     * struct, or NULL): the cache is paged (ci_pages above; kc / vc, or kv_tab's per-row
     * arrays, are pools of blocks), position p read and written at its table's row instead
     * of row p; the bits are
     * those of an unpaged cache holding the same rows (the CPU needs blocks of at least its
     * attention block, 128 rows, for that). max_keys bounds every pos[t] + 1. q and k are
     * scratch afterwards (a device may leave them as they came). */
    void (*rope_attend)(struct ci_backend *be, float *out, float *q, float *k, const float *v, int n, int n_heads,
                        int n_kv, int hd, const float *q_norm, const float *k_norm, float eps, int rot_dim,
                        const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style, float *kc,
                        float *vc, float *const *kv_tab, const ci_pages *pages, int kv_stride, int max_keys,
                        float scale);
    /* out[0] = the index of the largest of x[0, count) (the first one on ties; NaN is never
     * chosen over a number), as int32 in backend memory. */
    void (*argmax)(struct ci_backend *be, int32_t *out, const float *x, int count);

    /* ---- MoE: the router's choice and the routed experts, expert ids in backend memory ----
     * moe_route: from router logits[n, n_experts] (and, for hash routing, the rows' token ids
     * ids[n], each < hash_vocab; else ids may be NULL), sel[n, top_k] (int32) and w[n, top_k]
     * by the rules of nn/moe.h. Ties keep the lower expert index (a stable descending sort).
     * moe_experts: out[n, hidden] = Σ_k w[t, k] · expert_sel[t, k](x[t]); with acc, out += that
     * sum (the residual add fused; the CPU adds its finished sum with add()).
     * The CPU runs each active expert as one batched matmul over its tokens, in expert order,
     * and adds into out in that order; a device adds in an order of its own, fixed per shape
     * (same inputs, same bits). */
    void (*moe_route)(struct ci_backend *be, int32_t *sel, float *w, const float *logits, const int32_t *ids, int n,
                      const ci_moe *m);
    void (*moe_experts)(struct ci_backend *be, float *out, const float *x, int n, const int32_t *sel, const float *w,
                        const ci_moe *m, int acc);
    /* Optional (NULL: the three ops it stands for): a MoE block's router, routing and routed
     * experts in one call, norm_matmul_keep(xn, logits, x, norm_w, eps, n, W), moe_route(sel, w,
     * logits, ids, n, m), moe_experts(out, xn, n, sel, w, m, acc), with their outputs and bits
     * (out may be x with acc). A device may take it in one launch where it can (CUDA: one token
     * row, 16-bit or f32 router and experts) and the three ops elsewhere; returns 1.
     * With m->sh_down (a shared expert to fold in): out = (acc ? out : 0) + the routed sum + the
     * shared expert's output (times σ(xn · sh_routerᵀ) where m->sh_router is given), in one pass of its own order (not the composed ops' bits: the sum
     * is rounded once), where it can; where it cannot, it does nothing and returns 0 (the caller
     * composes). */
    int (*moe_norm_experts)(struct ci_backend *be, float *out, float *xn, float *logits, int32_t *sel, float *w,
                             const float *x, const float *norm_w, float eps, const int32_t *ids, int n,
                             const ci_mat *W, const ci_moe *m, int acc);

    /* ---- MLA / DSA: DeepSeek's latent attention (nn/mla.h) and sparse attention (nn/dsa.h)
     * lat = kv_lora + rope floats per latent-cache row; Hh query heads. Positions, cache
     * tables and the indexer's inputs live in backend memory; nothing is decided on the host.
     * rmsnorm_strided: rmsnorm() of n rows `stride` floats apart (out may alias x): the
     * latent part of kv_a's rows. Per row the bits of rmsnorm(n = 1). */
    void (*rmsnorm_strided)(struct ci_backend *be, float *out, const float *x, const float *w, int n, int dim,
                            int stride, float eps);
    /* mla_rope: the latent rows lat [n, kv_lora + rope] and the queries q [n, Hh, nope + rope]
     * of one MLA step made ready, as one op (one launch on a device): rmsnorm_strided(lat, lat,
     * kv_norm, n, kv_lora, kv_lora + rope, eps), then rope(lat, n, 1, kv_lora + rope, kv_lora,
     * rope, ...) and rope(q, n, Hh, nope + rope, nope, rope, ...) with pos / inv_freq / mscale /
     * style; the bits of those three ops (the CPU composes them). */
    void (*mla_rope)(struct ci_backend *be, float *lat, float *q, const float *kv_norm, float eps, int n, int n_heads,
                     int nope, int rope, int kv_lora, const int32_t *pos, const float *inv_freq, float mscale,
                     ci_rope_style style);
    /* head_norm_rope: in place on x[n, n_heads, head_dim]: every head RMS-normed (weight w
     * [head_dim] or NULL, eps), then rope as rope() (rot_dim dims from rot_offset, pos[t],
     * inv_freq, mscale, style): the bits of rmsnorm(x, x, w, n·n_heads, head_dim, eps) then
     * rope (the CPU composes them; DeepSeek V4's q heads and shared K = V row). */
    void (*head_norm_rope)(struct ci_backend *be, float *x, int n, int n_heads, int head_dim, const float *w, float eps,
                           int rot_offset, int rot_dim, const int32_t *pos, const float *inv_freq, float mscale,
                           ci_rope_style style);
    /* out[n, dim] = (x - mean) / sqrt(var + eps) * w + b per row, mean and variance in double
     * (the indexer's k_norm); out may alias x. */
    void (*layernorm)(struct ci_backend *be, float *out, const float *x, const float *w, const float *b, int n, int dim,
                      double eps);
    /* The absorbed queries: q [n, Hh, nope + rope] -> qcat [n, Hh, lat] with
     * qcat[t, h] = [ q_nope[t, h] · W_UK[h]  (matmul_xw: [kv_lora])  ‖  q_pe[t, h] ].
     * w_uk: host array of Hh views [nope, kv_lora] (data in backend memory). */
    void (*mla_absorb_q)(struct ci_backend *be, float *qcat, const float *q, int n, int n_heads, int nope, int rope,
                         int kv_lora, const ci_mat *w_uk);
    /* mla_prepare (optional: NULL where nn/mla.c composes the ops it stands for): mla_rope(lat,
     * q, kv_norm, ...), mla_absorb_q(qcat, q, ..., w_uk), then, where cache or tab is given,
     * kv_store_paged(cache, tab, 1, kv_lora + rope, lat, kv_lora + rope, n, pos, pages): the bits
     * of those ops, one launch on a device at a few rows (a decode step). */
    void (*mla_prepare)(struct ci_backend *be, float *qcat, float *lat, float *q, const float *kv_norm, float eps, int n,
                        int n_heads, int nope, int rope, int kv_lora, const int32_t *pos, const float *inv_freq,
                        float mscale, ci_rope_style style, const ci_mat *w_uk, float *cache, float *const *tab,
                        const ci_pages *pages);
    /* The value heads: o[t, h, 0..v) = olat[t, h, 0..kv_lora) · W_UV[h]ᵀ (olat rows lat floats
     * per head); w_uv: host array of Hh views [v, kv_lora]. */
    void (*mla_out_heads)(struct ci_backend *be, float *o, const float *olat, int n, int n_heads, int kv_lora, int lat,
                          int v, const ci_mat *w_uv);
    /* The latent (and indexer-key) caches may be paged (pages: backend.h ci_pages, or NULL):
     * position p of query row t is then row ci_page_row(pages, t, p) of its cache, else row p.
     * kv_store_paged: row t of src [n, width] goes to position pos[t] of its cache, `cache`
     * (tab NULL: one sequence) or tab[t * tab_step] (backend memory: a batch step's per-row
     * caches, a buffer's address plus a multiple of 4 floats); rows `stride` floats apart. */
    void (*kv_store_paged)(struct ci_backend *be, float *cache, float *const *tab, int tab_step, int stride,
                           const float *src, int width, int n, const int32_t *pos, const ci_pages *pages);
    /* MLA attention over the latent cache: query row t (qcat[t] [Hh, lat]) attends positions
     * 0..pos[t]; K = V = the latent row (all lat floats): out[t, h] = softmax(scale · qcat[t, h]
     * · rowsᵀ) · rows, out [n, Hh, lat]. cache rows are lat floats apart; tab NULL: one shared
     * cache, else row t reads its own cache tab[t * tab_step] (a batch step). max_keys bounds
     * every pos[t] + 1. pages as above. The bits of attention_pos(n_kv = 1, hd = lat) per row. */
    void (*mla_attend)(struct ci_backend *be, float *out, const float *qcat, const float *cache, float *const *tab,
                       int tab_step, int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale,
                       const ci_pages *pages);
    /* DeepSeek Sparse Attention for n query rows: a row whose context pos[t] + 1 fits in topk
     * attends all of it (mla_attend); else the lightning index scores its keys s <= pos[t],
     *   score[s] = Σ_h (iw[t, h] · w_scale) · relu(iq[t, h] · key_cache[s])   (h in order; NaN -> -inf)
     * (iq [n, ih, id], iw [n, ih], key rows id floats apart), keeps the topk best (ties: the
     * lower position; ci_topk_positions) and attends over those latent rows only, in
     * ascending position order. tab NULL: shared caches; else row t's latent and key caches
     * are tab[2t] and tab[2t + 1]. Both caches are paged alike (pages as above: the same
     * position, the same row in each). out / qcat as mla_attend. */
    void (*dsa_attend)(struct ci_backend *be, float *out, const float *qcat, const float *lat_cache,
                       const float *key_cache, float *const *tab, int n, const int32_t *pos, int max_keys, int n_heads,
                       int lat, float scale, const float *iq, const float *iw, float w_scale, int ih, int id, int topk,
                       const ci_pages *pages);
    /* ---- LFM2's gated short convolution (nn/shortconv.h states the math) ----------------
     * shortconv: bcx [n, 3*dim] is in_proj's output, rows B | C | X (in_bias [3*dim], when
     * given, is added to it first: the CPU adds it into bcx, which is scratch afterwards).
     * With bx = B ⊙ X, row t's output y[t] = C[t] ⊙ (conv_bias + Σ_k taps[k] ⊙ win[t + k]),
     * k = 0..K-1 in that order (taps [K, dim]; conv_bias [dim] or NULL: the sum starts at 0),
     * where win is the K-1 rows of a conv state [K-1, dim] (oldest first) followed by the
     * rows' bx. states NULL: the n rows are consecutive tokens of one sequence and the
     * state is `state`. Else a decode step of n sequences, one row each: states is a backend
     * buffer of n pointers, row t's state states[t] (state unused), and row t's window is
     * that state then its own bx alone. Every state is left holding the last K-1 rows of its
     * window. scratch: [K-1 + n, dim] floats the CPU builds a window in (a device may leave
     * it untouched). y must not alias bcx.
     * add_bias: y[t * width + i] += bias[i] for t < n, i < width (out_proj's bias). */
    void (*shortconv)(struct ci_backend *be, float *y, float *bcx, int n, int dim, int K, const float *taps,
                      const float *in_bias, const float *conv_bias, float *state, float *const *states,
                      float *scratch);
    void (*add_bias)(struct ci_backend *be, float *y, const float *bias, int n, int width);

    /* ---- Mamba2 (nn/mamba2.h states the math) -------------------------------------------
     * mamba_conv: the causal depthwise conv of xBC with SiLU. in: n rows of `dim` inputs,
     * rows in_stride floats apart (in_proj's output at the xBC offset). Row t's output
     * xbc[t] (rows dim floats apart) = silu(bias + Σ_k taps[k] ⊙ win[t + k]), k = 0..K-1 in
     * that order (taps [K, dim]; bias [dim] or NULL: the sum starts at 0), where win is the
     * K-1 rows of a state [K-1, dim] (oldest first) followed by the rows' inputs. states
     * NULL: the n rows are consecutive tokens of one sequence and the state is `state`.
     * Else a decode step of n sequences, one row each: states is a backend buffer of n
     * pointers, row t's window is the state states[t] then its own input alone. Every state
     * is left holding the last K-1 rows of its window. xbc must not alias in.
     * ssd_scan: y[n, Hm*P] (rows Hm*P floats apart) = the selective scan of the rows: x
     * [Hm, P], B [G, N], C [G, N] at the start of xbc's rows (xbc_stride floats apart), raw
     * dt [Hm] at the start of dt's rows (dt_stride apart); per row and head
     *   dt = max(softplus(raw + dt_bias), dt_min)   (softplus(v) = v above 20, else log1p(e^v))
     *   S_h ← e^{dt·A_h} S_h + dt x_h ⊗ B_g,   y_h = S_h C_g + D_h x_h     (S_h [P, N], f32)
     * state [Hm, P, N] and states (a table as mamba_conv's) as mamba_conv; every state is
     * left after its rows. chunked (states NULL, n > 1 only): the chunked SSD form (equal up
     * to rounding; the CPU's prefill form: decay factors below e^-60 count as 0), else the
     * recurrence token by token. scratch: ci_ssd_scratch_floats(n, s) floats (a device may
     * leave it untouched).
     * gated_rmsnorm: in place on y[n, dim]: v = y ⊙ silu(z) (z rows z_stride floats apart),
     * then per group of `group` channels v / sqrt(mean(v²) + eps) ⊙ w (w [dim]).
     * relu2: g[i] = max(g[i], 0)² for i < count (relu² MLPs). */
    void (*mamba_conv)(struct ci_backend *be, float *xbc, const float *in, int in_stride, int n, int dim, int K,
                       const float *taps, const float *bias, float *state, float *const *states);
    void (*ssd_scan)(struct ci_backend *be, float *y, const float *xbc, int xbc_stride, const float *dt,
                     int dt_stride, int n, const ci_ssd *s, float *state, float *const *states, int chunked,
                     float *scratch);
    void (*gated_rmsnorm)(struct ci_backend *be, float *y, const float *z, int z_stride, const float *w, int n,
                          int dim, int group, float eps);
    void (*relu2)(struct ci_backend *be, float *g, int64_t count);
    /* ---- the gated DeltaNet of Qwen3-Next / Qwen3.5 (nn/deltanet.h states the math) ------
     * causal_conv: y[t] = silu(Σ_k taps[k] ⊙ win[t + k]), k = 0..K-1 in that order (taps
     * [K, dim], no bias), where win is the K-1 rows of a conv state [K-1, dim] (oldest first)
     * followed by the rows of x [n, dim]. states NULL: the n rows are consecutive tokens of
     * one sequence whose state is `state`; else a decode step of n sequences, one row each,
     * row t's state states[t * tab_step] (a backend buffer of pointers; state unused). Every
     * state is left holding the last K-1 rows of its window. scratch: [K-1 + n, dim] floats
     * the CPU builds a window in (a device may leave it untouched). y must not alias x. */
    void (*causal_conv)(struct ci_backend *be, float *y, const float *x, int n, int dim, int K, const float *taps,
                        float *state, float *const *states, int tab_step, float *scratch);
    /* deltanet: the DeltaNet core and its output gate for n rows (ci_deltanet: dims and the
     * per-head constants, in backend memory). mix [n, 2*hk*dk + hv*dv] holds each row's
     * q | k | v after the conv, b / a [n, hv] the raw beta / decay projections: per row, q and
     * k are L2-normalised per key head (q also by dk^-0.5), beta = sigmoid(b), g = neg_A ·
     * softplus(a + dt_bias), and value head h (key head h / (hv/hk)) advances its state
     * S [dv, dk] (f32): S <- e^g S; S <- S + beta (v - S k) kᵀ; o = S q. Then
     * z[t, h] <- silu(z[t, h]) ⊙ (rmsnorm(o[t, h]) · norm_w) (over dv, eps). mix, b and a are
     * scratch afterwards. S of a chunk of one sequence: state (hv consecutive [dv, dk]
     * blocks), states NULL; a decode step of n sequences: row t's at states[t * tab_step].
     * recurrent: the CPU runs every token through the recurrence (its prompt form is
     * otherwise chunked; both agree up to f32 rounding). scratch: ci_deltanet_scratch_floats
     * floats of backend memory (o [n, hv*dv] first, then the CPU's chunk products). */
    void (*deltanet)(struct ci_backend *be, float *z, float *mix, float *b, float *a, int n,
                     const struct ci_deltanet *d, float *state, float *const *states, int tab_step, int recurrent,
                     float *scratch);
    /* deltanet_unfuse: Qwen3-Next's fused projections back in Qwen3.5's order: qkvz [n,
     * 2*hk*dk + 2*hv*dv] grouped per key head g as [q_g (dk) | k_g (dk) | v_g (r*dv) | z_g
     * (r*dv)] (r = hv/hk) and ba [n, 2*hv] as [b_g (r) | a_g (r)] go to mix [n, 2*hk*dk +
     * hv*dv] (q | k | v), z [n, hv*dv], b and a [n, hv]. */
    void (*deltanet_unfuse)(struct ci_backend *be, float *mix, float *z, float *b, float *a, const float *qkvz,
                            const float *ba, int n, const struct ci_deltanet *d);
    /* The output gate of gated attention: split_halves: x [rows, 2*width] -> lo = its first
     * width floats per row, hi = the second, each [rows, width]. sigmoid_mul: y[i] *=
     * 1 / (1 + e^-g[i]) for i < count. */
    void (*split_halves)(struct ci_backend *be, float *lo, float *hi, const float *x, int rows, int width);
    void (*sigmoid_mul)(struct ci_backend *be, float *y, const float *g, int64_t count);
    /* The gated shared expert of Qwen2-style MoE (nn/moe.h): y[t, i] += sigmoid(g[t]) · x[t, i]
     * for t < n, i < width (g NULL: the factor is 1). */
    void (*sigmoid_gate_add)(struct ci_backend *be, float *y, const float *x, const float *g, int n, int width);

    /* ---- DeepSeek V4 (models/deepseek_v4.c, nn/hc.h, nn/compressor.h state the math) ----
     * hc_spread: X[t, j] = x[t] for j < hc (X [n, hc, dim], x [n, dim]): the streams at the
     * embedding.
     * hc_pre: one hyper-connection mapping of the streams X [n, hc, dim]. mix [n, M] holds
     * X · fnᵀ (a matmul) and is scaled in place by each row's rsqrt(mean(X[t]²) + norm_eps)
     * (sum of squares in double); then pre = σ(mix · scale[0] + base) + eps and
     * x[t] = Σ_j pre[j] X[t, j] (x [n, dim]). post non-NULL (M = (2 + hc)·hc): also post [n, hc]
     * = 2σ(mix · scale[1] + base) and comb [n, hc, hc] = the row softmax of the comb logits +
     * eps, Sinkhorn-normalised iters times (nn/hc.h). post NULL: the head mapping (M = hc).
     * hc_post: X[t, k] <- post[t, k] · y[t] + Σ_j comb[t, j, k] · X[t, j] (y [n, dim]);
     * tmp: [hc, dim] scratch (a device may leave it untouched). */
    void (*hc_spread)(struct ci_backend *be, float *X, const float *x, int n, int hc, int dim);
    void (*hc_pre)(struct ci_backend *be, float *x, float *post, float *comb, float *mix, const float *X, int n,
                   int hc, int dim, int iters, float eps, float norm_eps, const float *scale, const float *base);
    void (*hc_post)(struct ci_backend *be, float *X, const float *y, const float *post, const float *comb, int n,
                    int hc, int dim, float *tmp);
    /* hc_mix_pre: mix = X · fnᵀ (fn [M, hc·dim], the matmul's bits on the CPU), then hc_pre of it
     * (same arguments): one op, so a device may take the mix's few long rows in parts over many
     * blocks with each row's sum of squares in the same pass (v4.cu), not one block a mix row. */
    void (*hc_mix_pre)(struct ci_backend *be, float *x, float *post, float *comb, float *mix, const float *X, int n,
                       const ci_mat *fn, int hc, int dim, int iters, float eps, float norm_eps, const float *scale,
                       const float *base);
    /* v4_compress: n rows' compressor projections kv, gate [n, m·d] enter, in row order, the
     * compressor state of their sequence at positions pos[t]: slot pos % ratio of the
     * window gets kv and gate + ape; the row that completes window w (slot ratio - 1)
     * appends entry w: per channel the softmax over the window's gates (CSA: window w-1's Ca
     * slots first, when w > 0, then window w's Cb slots; sums in double) of its kv values,
     * then rmsnorm · norm and rope at position w · ratio; CSA keeps window w's Ca series for
     * entry w+1. states NULL: the rows are consecutive tokens of one sequence whose state is
     * `state`; else row t's state is states[t * tab_step] (a decode step of n sequences). */
    void (*v4_compress)(struct ci_backend *be, float *state, float *const *states, int tab_step, const float *kv,
                        const float *gate, int n, const int32_t *pos, const ci_v4cmp *c);
    /* v4_index: the CSA indexer's choice for row t at position p = pos[t] over its indexer
     * state's vis = (p + 1) / ratio entries (c: the indexer's compressor, id = c->d): all
     * of them when vis <= topk, else the topk best by
     *   score(s) = Σ_h relu(iq[t, h] · entry_s) · id^-½ · iw[t, h] · ih^-½   (h in order)
     * (ci_topk_positions; ties to the lower entry), ascending into sel[t * sel_stride ..],
     * their count into nsel[t]. iq [n, ih, id] (roped), iw [n, ih] the raw weights_proj
     * output. state / states / tab_step as v4_compress. max_entries bounds every row's vis
     * (a device sizes its launch by it). scratch: ci_v4_index_scratch_floats(ih, max_entries)
     * floats (a device may leave it untouched). */
    void (*v4_index)(struct ci_backend *be, int32_t *sel, int32_t *nsel, const float *iq, const float *iw,
                     const float *state, float *const *states, int tab_step, int n, const int32_t *pos,
                     const ci_v4cmp *c, int ih, int topk, int sel_stride, int max_entries, float *scratch);
    /* v4_attend: DeepSeek V4's attention core for n rows. First every row's kv [n, D] goes to
     * row pos[t] % ring_rows of its window ring (rows D floats apart). Then row t (position p)
     * attends, with its Hh query heads q[t] [Hh, D], the keys (K = V): the ring rows of
     * positions max(0, p - window + 1) .. p in order, then, with a compressor c (NULL:
     * sliding-only), its entries from the compressor state: sel non-NULL (CSA) the nsel[t]
     * entries sel[t * sel_stride ..], else (HCA) the first (p + 1) / c->ratio. Per head
     * softmax(q·k · D^-½) with the sink logit sinks[h] in the denominator, out = Σ p k; then
     * rope at angle -p on each head's last rot_dim dims (interleaved) of out [n, Hh, D].
     * tab NULL: one sequence's ring and cstate; else row t's ring is tab[t * tab_step] and
     * its compressor state tab[t * tab_step + 1]. kbuf [max keys, D] and sc [Hh, max keys]:
     * scratch (a device may leave them untouched). */
    void (*v4_attend)(struct ci_backend *be, float *out, const float *q, const float *kv, int n, const int32_t *pos,
                      float *ring, int ring_rows, int window, const float *cstate, float *const *tab, int tab_step,
                      const ci_v4cmp *c, const int32_t *sel, const int32_t *nsel, int sel_stride, const float *sinks,
                      int n_heads, int D, int rot_dim, const float *inv_freq, float mscale, float *kbuf, float *sc);
    /* matmul_groups: y[n, groups · W[0].rows] where group g's W[g].rows columns are
     * x[:, g·cols .. (g+1)·cols) · W[g]ᵀ (cols = W[0].cols; x [n, groups · cols]). W: host array
     * of `groups` views. xg [n, cols] and yg [n, W[0].rows]: scratch the CPU gathers a group's
     * inputs and computes its product in (a device may leave them untouched). */
    void (*matmul_groups)(struct ci_backend *be, float *y, const float *x, int n, int groups, const ci_mat *W,
                          float *xg, float *yg);

    /* ---- optional (NULL on the CPU): record the ops of one step and replay them --------
     * graph_begin starts recording the ops that follow (they are not run); graph_end stops
     * and returns a handle (NULL on failure: run the ops eagerly instead); graph_launch runs
     * a recorded step again on the buffers it was recorded with (values read at run time:
     * positions and ids that changed are seen). Replay gives the bits eager execution gives. */
    int (*graph_begin)(struct ci_backend *be);
    void *(*graph_end)(struct ci_backend *be);
    void (*graph_launch)(struct ci_backend *be, void *graph);
    void (*graph_free)(struct ci_backend *be, void *graph);
    /* Sticky error state: 0 while every op so far has worked; else a message in last_error
     * (a CUDA error mid-run, device memory exhausted). The CPU never sets it. */
    int (*status)(struct ci_backend *be);
    /* Device memory now: free and total bytes (0 when it cannot tell). NULL on the CPU. */
    void (*mem_info)(struct ci_backend *be, size_t *free_bytes, size_t *total_bytes);
    char last_error[256];
    int is_device;          /* 1 when buffers are not host memory (CUDA) */
    /* CUDA: the loader (cuda_loader.c) gives the backend a CPU pool and this function to
     * free it with; the backend's free() calls it. NULL on the CPU (free() frees its own). */
    void (*pool_free)(ci_pool *pool);
    size_t mem_free, mem_total;  /* device memory at creation (bytes); 0 on the CPU */

    /* ---- tensor parallel: the ranks of one model meet here (src/parallel/comm.h) --------
     * NULL until the backend joins a communicator (ci_backend_cpu_join: the ranks are threads
     * of this process). all_reduce: x[count] <- the sum over the ranks of their x, in rank
     * order (every rank gets the same bits). It fails (status) when the communicator was
     * aborted, and a backend already failed aborts it, so no rank waits for one that stopped. */
    void (*all_reduce)(struct ci_backend *be, float *x, int64_t count);
    /* all_gather_rows: out [rows, world * width] gets, per row, every rank's row of in [rows,
     * width] side by side in rank order (a split head's logits). Fails as all_reduce. */
    void (*all_gather_rows)(struct ci_backend *be, float *out, const float *in, int rows, int width);
    struct ci_comm *comm;
    int rank, world;        /* this backend's rank of world (0, 0 without a communicator) */

    /* 1: the GQA attention cache (what qk_rope_store, attention_pos and rope_attend read and
     * write; not kv_store's, attention()'s, nor the MLA / DSA / V4 ops' caches, which stay f32)
     * holds IEEE f16 values, two to a float slot: a row of w values takes ci_kv_slots(be, w)
     * floats, and kv_stride, kv_tab's addresses, the caller's buffer sizes and offsets count float
     * slots as before (a row's value i is half i from the row's start). Stored values are x
     * clamped to [-65504, 65504] (NaN kept), rounded to nearest even; products and sums stay f32,
     * the bits of the f32 cache holding those values. Set by ci_backend_cpu_kv_f16; 0 elsewhere. */
    int kv_f16;
} ci_backend;

/* Float slots a GQA cache row of w values takes on be (ci_backend.kv_f16). */
static inline int ci_kv_slots(const ci_backend *be, int w) { return be->kv_f16 ? (w + 1) / 2 : w; }

/* How a block of a tensor-parallel model ends (the src/nn blocks' tp_part): CI_TP_WHOLE, the
 * block is whole on this rank (no collective); CI_TP_LEAD / CI_TP_REST, it holds a part on rank 0
 * / another rank: its output is all-reduced over the ranks, the residual added on rank 0 only. */
enum { CI_TP_WHOLE = 0, CI_TP_LEAD = 1, CI_TP_REST = 2 };

/* A block's output projection, whole or split (tp_part): y = x · Wᵀ, or with acc y += x · Wᵀ
 * (matmul_acc, tmp its scratch), where a split block's rank other than 0 writes its part alone
 * so that the residual is added once; then, split, the ranks' ys all-reduced. */
static inline void ci_out_proj(ci_backend *be, float *y, const float *x, int n, const ci_mat *W, int acc, float *tmp,
                               int tp_part) {
    if (acc && tp_part != CI_TP_REST) be->matmul_acc(be, y, x, n, W, tmp);
    else be->matmul(be, y, x, n, W);
    if (tp_part) be->all_reduce(be, y, (int64_t)n * W->rows);
}

typedef enum { CI_ISA_AUTO = 0, CI_ISA_SCALAR, CI_ISA_AVX2, CI_ISA_AVX512, CI_ISA_AVX512BF16, CI_ISA_AMXBF16 } ci_isa;

/* CPU backend with n_threads workers (<= 0: all online CPUs). isa picks the kernels;
 * AUTO takes the best the CPU supports at run time, all in f32; CI_ISA_AVX512BF16 (asked for
 * only: ci_model_opts.bf16_act) is AVX-512 with bf16 weights dotted with x rounded to bf16,
 * on CPUs with AVX512-BF16; CI_ISA_AMXBF16 (bf16_act's first choice) the same precision on Intel
 * AMX tiles, in its own summation order (src/backend/cpu/amx_bf16.c), on CPUs with AMX-BF16
 * whose kernel grants the process the tiles. NULL on failure (an ISA the CPU lacks). */
ci_backend *ci_backend_cpu_new(int n_threads, ci_isa isa);

/* Measures, once per process, which way a decode streams short 16-bit rows fastest on this
 * machine (cpu.c says why; ~1 s, 512 MiB streamed 27 times): the next-tile prefetch rule or the
 * per-row distance in 4-row tiles, or row after row; and keeps it: ci_model_open calls it for a
 * CPU model with at least 1 GiB of 16-bit weights. Does nothing on non-AMD CPUs, with both
 * CINFER_CPU_PF_NEXT_TILE and CINFER_CPU_SEQ set (one set: that one stands), or after a first
 * measurement. It streams mem (len bytes, e.g. the model's resident weights; only read) when
 * len >= 512 MiB, else a buffer of its own. Memory order only: results unchanged. */
void ci_backend_cpu_tune(ci_backend *be, const void *mem, size_t len);
/* The longest 16-bit row in bytes whose decode tiles prefetch the next tile (0: none). */
int ci_backend_cpu_next_tile_bytes(void);
/* The longest 16-bit row in bytes that a one-token decode reads row after row (0: none). */
int ci_backend_cpu_seq_bytes(void);

/* Joins a CPU backend to communicator c as rank `rank` (0 <= rank < ci_comm_world(c)): sets
 * all_reduce, comm, rank and world. */
void ci_backend_cpu_join(ci_backend *be, struct ci_comm *c, int rank);

/* A CPU backend's MLX affine 4- and 8-bit matrices dotted with the activations rounded to
 * int16 per block of 32 columns (ci_model_opts.int16_act; what it computes is stated in
 * src/backend/cpu/quant_i16_avx512.c). Takes effect on an AVX-512 backend (vpdpwssd where
 * the CPU has VNNI, else the AVX2 kernel) or an AVX2 one (vpmaddwd): returns 1 and the
 * backend's name gains "-int16"; on the scalar backend returns 0 and it computes as before.
 * Call before the first op. */
int ci_backend_cpu_int16_act(ci_backend *be);

/* A CPU backend's MLX affine 4- and 8-bit matrices (groups of a multiple of 32 columns) as
 * src/backend/cpu/amx_mlx.c computes them (ci_model_opts.mlx_amx: codes exact, activations rounded
 * to int16 per block, exact integer sums). Takes effect on an AVX-512 backend of a CPU with
 * AVX512-VNNI: returns 1 and the backend's name gains "-amx-mlx" where the CPU also has AMX-INT8
 * and its kernel grants the tiles (4 tokens and more on the tiles), else "-vnni-mlx" (everything
 * on VNNI: the same bits; CINFER_CPU_MLX_TILES=0 asks for this form on an AMX CPU too); on an
 * AVX2 backend, or an AVX-512 one without VNNI, src/backend/cpu/mlx_avx2.c computes the same
 * formula to the bit (vpmaddubsw / vpmaddwd) and the name becomes "cpu-avx2-mlx" (or
 * "cpu-avx512-avx2-mlx"); on the scalar backend returns 0 and it computes as before. The
 * int16-activation kernels, when also
 * asked for, take the formats they take first. Call before the first op. */
int ci_backend_cpu_amx_mlx(ci_backend *be);
/* The same with the activations rounded to act_bits: 16 (ci_backend_cpu_amx_mlx) or 8 (x̂ = x / d
 * rounded to [-127, 127] per block, d = max|x| / 127: llama.cpp's Q8_0 class of precision, half
 * the integer products of a prompt's tokens form; ci_model_opts.mlx_amx 2, --mlx-amx8): the name
 * then ends in "-mlx8". */
int ci_backend_cpu_amx_mlx_act(ci_backend *be, int act_bits);
/* A CPU backend's GQA attention cache in f16 (ci_backend.kv_f16; ci_model_opts.kv_f16, --kv-f16):
 * half the cache's memory and of the bytes a decode step's attention reads. Call before the
 * first op and before any cache is sized. */
void ci_backend_cpu_kv_f16(ci_backend *be);

/* The CUDA backend on device `device` (src/backend/cuda_loader.c loads libcinfer_cuda.so
 * from beside the executable at run time, so a machine without the driver or the toolkit
 * runs the CPU engine alone). NULL with a one-line reason in err when there is no usable
 * device, no CUDA build, or no driver. n_threads: the CPU pool it keeps for host-side work. */
ci_backend *ci_backend_cuda_new(int device, int n_threads, char *err, size_t errlen);

/* The argmax rule of every backend's argmax op, on host memory: the index of the largest of
 * x[0, count) (the first one on ties; NaN never chosen over a number; 0 when all are NaN).
 * The greedy sampler (smp_argmax) uses it too, so device and host picks agree. */
int ci_argmax_f32(const float *x, int count);

/* The DSA selection rule of every backend's dsa_attend, on host memory: the topk best of
 * score[0, L) (higher score first; ties to the lower position; the caller maps NaN to -inf),
 * written ascending to sel[0, k), k = min(topk, L) returned; sel must hold L entries. */
int ci_topk_positions(const float *score, int L, int topk, int32_t *sel);

/* One f32 element of a weight (slow path; tools and tests). */
float ci_mat_get(const ci_mat *W, int64_t r, int64_t c);

#endif
