/* model.c — ci_model_open and sessions: config, checkpoint, family dispatch, backend.
 *
 * The backend is chosen here (ci_model_opts.device): the CPU by default; CUDA only for a
 * family that sets `cuda` (registry.h), refused naming the family otherwise; auto takes
 * CUDA when the family has a path and a device starts, else the CPU. After a forward on a
 * device the backend's sticky status is checked, so a CUDA error mid-run is one line. */
#include "model.h"
#include "cinfer.h"
#include "../core/status.h"
#include "../parallel/comm.h"
#include "../parallel/group.h"
#include "../gen/sampler.h"
#include "../text/tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of memory the kernel says it can give without swapping (MemAvailable), 0 when unknown. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024;
}

/* Where the CPU reads the weights from (ci_model_opts.map_weights): a checkpoint within 80%
 * of the available memory is copied into anonymous huge-page memory (st_make_resident);
 * otherwise, or when asked to map, the files stay mapped and, with a progress callback,
 * are read ahead. A device backend uploads from the mapping and needs neither. */
static int weights_in(ci_model *m, const ci_model_opts *opts, char *err, size_t errlen) {
    ci_progress_cb fn = opts ? opts->progress : NULL;
    void *ctx = opts ? opts->progress_ctx : NULL;
    /* a tensor-parallel rank reads its part where the checkpoint lies: the ranks of a process
     * share the page cache instead of each copying the whole checkpoint */
    if (!m->be->is_device && !(opts && opts->map_weights) && m->be->world <= 1) {
        int r = st_make_resident(m->st, mem_available() / 5 * 4, fn, ctx, err, errlen);
        if (r) return r < 0 ? -1 : 0;
    }
    if (fn) st_read_ahead(m->st, fn, ctx);
    return 0;
}

/* The CPU backend opts ask for: its isa, with bf16_act (isa auto) the bf16 dot products
 * where the CPU has them (on AMX tiles where it has those, unless CINFER_CPU_AMX=0; else
 * vdpbf16ps), the f32 kernels elsewhere, with mlx_amx MLX 4- / 8-bit weights as amx_mlx.c
 * computes them (AVX-512 VNNI, on AMX tiles where the CPU has those; mlx_avx2.c on AVX2), and with int16_act the int16-activation kernels for 4- / 8-bit weights where
 * the CPU has them (before the tiles). */
static ci_backend *cpu_backend(const ci_model_opts *opts, int n_threads) {
    ci_isa isa = opts ? (ci_isa)opts->isa : CI_ISA_AUTO;
    ci_backend *be = NULL;
    const char *amx = getenv("CINFER_CPU_AMX");
    if (opts && opts->bf16_act && isa == CI_ISA_AUTO && !(amx && !strcmp(amx, "0")))
        be = ci_backend_cpu_new(n_threads, CI_ISA_AMXBF16);
    if (!be && opts && opts->bf16_act && isa == CI_ISA_AUTO) be = ci_backend_cpu_new(n_threads, CI_ISA_AVX512BF16);
    if (!be) be = ci_backend_cpu_new(n_threads, isa);
    if (be && opts && opts->mlx_amx) ci_backend_cpu_amx_mlx_act(be, opts->mlx_amx == 2 ? 8 : 16);
    if (be && opts && opts->int16_act) ci_backend_cpu_int16_act(be);
    if (be && opts && opts->kv_f16) ci_backend_cpu_kv_f16(be);
    return be;
}

int ci_model_open(const char *dir, const ci_model_opts *opts, ci_model **out, char *err, size_t errlen) {
    if (opts && opts->tp > 1) return ci_group_open(dir, opts, out, err, errlen);
    return ci_model_open_rank(dir, opts, NULL, 0, 0, out, err, errlen);
}

int ci_model_open_rank(const char *dir, const ci_model_opts *opts, ci_comm *comm, int rank, int ep, ci_model **out,
                       char *err, size_t errlen) {
    *out = NULL;
    ci_model *m = calloc(1, sizeof *m);
    if (!m) return ci_err(err, errlen, "out of memory");
    pthread_mutex_init(&m->tk_mu, NULL);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    if (cfg_load(dir, &m->cfg, err, errlen)) goto fail;
    m->family = m->cfg.family;
    if (m->family->missing || !m->family->ops) {
        ci_err(err, errlen, "%s: %s (model_type '%s' in %s)", m->family->name,
               m->family->missing ? m->family->missing : "not implemented yet", m->cfg.model_type, m->cfg.path);
        goto fail;
    }
    int device = opts ? opts->device : 0, n_threads = opts ? opts->n_threads : 0;
    if (device < 0 || device > 2) {
        ci_err(err, errlen, "device %d is not 0 (cpu), 1 (cuda) or 2 (auto)", device);
        goto fail;
    }
    if (device == 1 && !m->family->cuda) {
        ci_err(err, errlen, "%s: no CUDA path yet (model_type '%s' in %s); run it with --device cpu", m->family->name,
               m->cfg.model_type, m->cfg.path);
        goto fail;
    }
    if (device == 1 && m->family->cuda == CI_CUDA_UNVERIFIED && !ci_cuda_unverified_ok()) {
        ci_err(err, errlen,
               "%s: its CUDA path has not passed the GPU tests yet (model_type '%s' in %s); run it with --device cpu, "
               "or set CINFER_CUDA_UNVERIFIED=1 to try it", m->family->name, m->cfg.model_type, m->cfg.path);
        goto fail;
    }
    if (comm && (device != 0 || rank < 0 || rank >= ci_comm_world(comm))) {
        ci_err(err, errlen, "%s: rank %d of %d: tensor parallel runs on the CPU backend here (ranks as threads)",
               m->family->name, rank, ci_comm_world(comm));
        goto fail;
    }
    if (comm && ci_comm_world(comm) > 1 && !m->family->tp) {
        ci_err(err, errlen, "%s: tensor parallel is not written for this family yet (model_type '%s' in %s)",
               m->family->name, m->cfg.model_type, m->cfg.path);
        goto fail;
    }
    if (st_open_dir(dir, &m->st, err, errlen)) goto fail;
    if (device == 1) {
        m->be = ci_backend_cuda_new(0, n_threads, err, errlen);
        if (!m->be) goto fail;
    } else if (device == 2 && m->family->cuda == CI_CUDA_YES) {
        /* auto: no device (or no CUDA build) is not an error, the CPU serves */
        char ignored[256];
        m->be = ci_backend_cuda_new(0, n_threads, ignored, sizeof ignored);
    }
    if (!m->be) m->be = cpu_backend(opts, n_threads);
    if (!m->be) { ci_err(err, errlen, "cannot start the CPU backend (threads)"); goto fail; }
    if (opts && opts->kv_f16 && (m->be->is_device || !m->family->kv_f16)) {
        ci_err(err, errlen, "%s: the f16 attention cache (kv_f16, --kv-f16) is %s; run without it", m->family->name,
               m->be->is_device ? "not written for the CUDA backend yet (the CPU has it)"
                                : "not written for this family's cache yet (the MLA / DSA / V4 caches)");
        goto fail;
    }
    if (comm && ci_comm_world(comm) > 1) ci_backend_cpu_join(m->be, comm, rank);
    m->ep = ep;
    m->no_graphs = opts ? opts->no_graphs : 0;
    /* once the backend stands (a device that cannot start fails before any byte is read) */
    if (weights_in(m, opts, err, errlen)) goto fail;
    if (m->family->ops->load(m, err, errlen)) {
        if (device != 2 || !m->be->is_device) goto fail;
        /* auto: a checkpoint the device cannot run (weights in a format it has no kernels
         * for, or more than its memory holds) runs on the CPU instead */
        if (m->impl) m->family->ops->unload(m);
        m->impl = NULL;
        m->be->free(m->be);
        m->be = cpu_backend(opts, n_threads);
        if (!m->be) { ci_err(err, errlen, "cannot start the CPU backend (threads)"); goto fail; }
        if (weights_in(m, opts, err, errlen) || m->family->ops->load(m, err, errlen)) goto fail;
    }
    /* a CPU model that streams enough 16-bit weights to care: the backend measures its decode
     * rules, on the weights' own resident copy when there is one (no 512 MiB to allocate) */
    if (!m->be->is_device && m->bytes_by_dtype[CI_BF16] + m->bytes_by_dtype[CI_F16] >= ((size_t)1 << 30)) {
        uint64_t rl = 0;
        const void *rb = st_resident_bytes(m->st, &rl);
        ci_backend_cpu_tune(m->be, rb, (size_t)rl);
    }
    *out = m;
    return 0;
fail:
    ci_model_free(m);
    return -1;
}

void ci_model_free(ci_model *m) {
    if (!m) return;
    if (m->family && m->family->ops && m->impl) m->family->ops->unload(m);
    kvp_free(m->kv_pool);
    if (m->be) m->be->free(m->be);
    if (m->st) st_close(m->st);
    free(m->specs);
    cfg_free(&m->cfg);
    tok_free(m->tk);
    pthread_mutex_destroy(&m->tk_mu);
    free(m->host_logits);
    free(m);
}

#ifndef CINFER_VERSION
#error "CINFER_VERSION comes from project(VERSION) in CMakeLists.txt"
#endif
const char *ci_version(void) { return CINFER_VERSION; }

int ci_cuda_unverified_ok(void) {
    const char *v = getenv("CINFER_CUDA_UNVERIFIED");
    return v && !strcmp(v, "1");
}

const char *ci_dtype_label(int dtype) { return ci_dtype_name((ci_dtype)dtype); }

size_t ci_model_cache_bytes(const ci_model *m, long long n_tokens) {
    const ci_family_ops *o = m->family->ops;
    if (o->cache_bytes_at) return o->cache_bytes_at(m, n_tokens);
    return o->cache_bytes_per_token(m) * (size_t)n_tokens;
}

void ci_model_get_info(const ci_model *m, ci_model_info *info) {
    memset(info, 0, sizeof *info);
    info->family = m->family->name;
    info->model_type = m->cfg.model_type;
    info->backend = m->be ? m->be->name : "none";
    info->vocab_size = (int)m->cfg.vocab_size;
    info->n_layers = (int)m->cfg.n_layers;
    info->hidden_size = (int)m->cfg.hidden_size;
    info->bos_id = m->cfg.bos_id;
    info->eos_ids = m->cfg.eos_ids;
    info->n_eos = m->cfg.n_eos;
    info->n_params = m->n_params;
    for (int i = 0; i < CI_DTYPE_COUNT && i < 16; i++) info->bytes_by_dtype[i] = m->bytes_by_dtype[i];
    info->decode_bytes = m->decode_bytes;
    info->cache_bytes_per_token = m->family->ops->cache_bytes_per_token(m);
    info->max_position = m->cfg.max_pos;
}

int ci_session_new(ci_model *m, int max_ctx, ci_session **out, char *err, size_t errlen) {
    return ci_session_new_rows(m, max_ctx, 0, out, err, errlen);
}

int ci_session_new_rows(ci_model *m, int max_ctx, int max_rows, ci_session **out, char *err, size_t errlen) {
    *out = NULL;
    if (max_ctx <= 0) return ci_err(err, errlen, "%s: context length must be positive, got %d", m->family->name, max_ctx);
    ci_session *s = calloc(1, sizeof *s);
    if (!s) return ci_err(err, errlen, "out of memory");
    s->m = m;
    s->max_ctx = max_ctx;
    s->max_rows = max_rows > 0 ? max_rows : 0;
    if (m->family->ops->session_init(s, err, errlen)) { ci_session_free(s); return -1; }
    *out = s;
    return 0;
}

void ci_session_free(ci_session *s) {
    if (!s) return;
    if (s->impl) s->m->family->ops->session_free(s);
    free(s);
}

void ci_session_reset(ci_session *s) { s->pos = 0; }

/* ---- paged caches ----------------------------------------------------------------------- */

int ci_model_pageable(const ci_model *m) {
    const ci_family_ops *o = m->family->ops;
    return o->pool_init && (!o->pool_ok || o->pool_ok(m, NULL, 0));
}

int ci_model_kv_pool(ci_model *m, int n_blocks, char *err, size_t errlen) {
    if (!m->family->ops->pool_init) return ci_err(err, errlen, "%s: its cache is not paged", m->family->name);
    if (m->family->ops->pool_ok && !m->family->ops->pool_ok(m, err, errlen)) return -1;
    if (m->kv_pool) return ci_err(err, errlen, "%s: the model has a block pool already", m->family->name);
    if (n_blocks < 1) return ci_err(err, errlen, "%s: a block pool needs at least one block, got %d", m->family->name, n_blocks);
    if (m->family->ops->pool_init(m, n_blocks, err, errlen)) return -1;
    if (!(m->kv_pool = kvp_new(n_blocks, KV_BLOCK))) return ci_err(err, errlen, "%s: out of memory for the block pool", m->family->name);
    return 0;
}

int ci_pool_regions(ci_model *m, int n_blocks, const struct ci_pool_region *spec, int k, float **bufs, char *err,
                    size_t errlen) {
    int bad = 0;
    size_t total = 0;
    if (k < 0 || k > CI_POOL_REGIONS) return ci_err(err, errlen, "%s: %d pool regions (at most %d)", m->family->name, k, CI_POOL_REGIONS);
    memset(m->pool_rows, 0, sizeof m->pool_rows);
    for (int i = 0; i < k; i++) {
        const size_t bytes = ((size_t)n_blocks << spec[i].rows_log2) * spec[i].row_floats * (size_t)spec[i].layers * sizeof(float);
        bufs[i] = bytes ? ci_buf_alloc(m->be, bytes, &bad) : NULL;
        total += bytes;
    }
    if (!bad) {
        for (int i = 0; i < k; i++) {
            m->pool_rows[i] = spec[i];
            m->pool_rows[i].buf = bufs[i];
            if (!bufs[i]) m->pool_rows[i].layers = 0;
        }
        m->pool_blocks = n_blocks;
        return 0;
    }
    for (int i = 0; i < k; i++) {
        ci_buf_release(m->be, bufs[i]);
        bufs[i] = NULL;
    }
    return ci_err(err, errlen, "%s: out of memory for a pool of %d cache blocks (%zu MiB)%s%s", m->family->name, n_blocks,
                  total >> 20, m->be->last_error[0] ? ": " : "", m->be->last_error);
}

int ci_pool_buffers(ci_model *m, int n_blocks, float **a, size_t row_floats_a, int layers_a, float **b,
                    size_t row_floats_b, int layers_b, char *err, size_t errlen) {
    const struct ci_pool_region spec[2] = { { NULL, row_floats_a, layers_a, KV_BLOCK_LOG2 },
                                            { NULL, row_floats_b, layers_b, KV_BLOCK_LOG2 } };
    float *bufs[2] = { NULL, NULL };
    const int k = row_floats_b && layers_b ? 2 : 1;
    if (ci_pool_regions(m, n_blocks, spec, k, bufs, err, errlen)) return -1;
    *a = bufs[0];
    if (k == 2) *b = bufs[1];
    return 0;
}

size_t ci_model_kv_block_bytes(const ci_model *m) { return (size_t)KV_BLOCK * m->family->ops->cache_bytes_per_token(m); }

int ci_session_paged(const ci_session *s) { return s->pool != NULL; }

int ci_session_pages_init(ci_session *s, int *n_blocks, char *err, size_t errlen) {
    int cap = (int)(((int64_t)s->max_ctx + KV_BLOCK - 1) / KV_BLOCK), bad = 0;
    if (kvs_init(&s->pages, cap)) return ci_err(err, errlen, "%s: out of memory", s->m->family->name);
    s->pages_dev = ci_buf_alloc(s->m->be, (size_t)cap * sizeof(int32_t), &bad);
    if (bad) return ci_err(err, errlen, "%s: out of memory for a block table", s->m->family->name);
    if (s->m->kv_pool) s->pool = s->m->kv_pool;
    else {
        if (!(s->pool = kvp_new(cap, KV_BLOCK))) return ci_err(err, errlen, "%s: out of memory", s->m->family->name);
        s->own_pool = 1;
    }
    *n_blocks = kvp_blocks(s->pool);
    return 0;
}

void ci_session_pages_free(ci_session *s) {
    ci_buf_release(s->m->be, s->pages_dev);
    s->pages_dev = NULL;
    if (!s->pool) return;
    kvs_free(s->pool, &s->pages);
    if (s->own_pool) kvp_free(s->pool);
    s->pool = NULL;
    s->own_pool = 0;
}

int ci_session_pages_ready(ci_session *s, int tokens, char *err, size_t errlen) {
    if (tokens > s->max_ctx) return 0;   /* the forward's own check names it */
    if (ci_session_reserve(s, tokens, err, errlen)) return -1;
    if (s->pages.dirty) {
        /* an own pool serves one sequence from a stack of free blocks that hands out block 0
         * first and takes the last ones back first: block i holds positions [i blk, (i+1) blk),
         * so a chunk addresses its rows directly (ci_session_chunk_pages) */
        for (int i = 0; s->own_pool && i < s->pages.n; i++)
            if (s->pages.tab[i] != i)
                return ci_err(err, errlen, "%s: internal error: block %d of a session's own pool holds positions of block %d",
                              s->m->family->name, s->pages.tab[i], i);
        s->m->be->upload(s->m->be, s->pages_dev, s->pages.tab, (size_t)s->pages.n * sizeof(int32_t));
        s->pages.dirty = 0;
    }
    return 0;
}

const ci_pages *ci_session_chunk_pages(const ci_session *s, ci_pages *buf) {
    if (s->own_pool) return NULL;   /* its blocks are its positions' (ci_session_pages_ready checks) */
    *buf = (ci_pages){ s->pages_dev, s->pages.cap, 0, KV_BLOCK_LOG2 };
    return buf;
}

int64_t ci_session_page_row(const ci_session *s, int64_t p) {
    const ci_pages hp = { s->pages.tab, 0, 0, KV_BLOCK_LOG2 };
    return ci_page_row(&hp, 0, p);
}

int ci_session_reserve(ci_session *s, int tokens, char *err, size_t errlen) {
    if (!s->pool || kvs_reserve(s->pool, &s->pages, tokens) == 0) return 0;
    if (tokens > s->max_ctx)
        return ci_err(err, errlen, "%s: %d positions exceed the session's context of %d", s->m->family->name, tokens, s->max_ctx);
    kv_pool_stats st;
    kvp_stats(s->pool, &st);
    return ci_err(err, errlen, "%s: out of cache blocks: %d positions need %d more, %d of %d blocks are in use",
                  s->m->family->name, tokens, (tokens + KV_BLOCK - 1) / KV_BLOCK - s->pages.n, st.in_use, st.blocks);
}

int ci_session_truncate(ci_session *s, int tokens) {
    if (tokens > s->pos) tokens = s->pos;
    if (tokens < 0) tokens = 0;
    s->pos = s->pool ? kvs_truncate(s->pool, &s->pages, tokens) : tokens;
    return s->pos;
}

/* Copy on write: the first `rows` rows of block `from` into block `to`, every layer of the
 * model's pool (m->pool_rows): a region's layers in one strided copy (a chat turn's shared last
 * block: 2 calls on a device instead of 2 a layer). */
static void copy_block_rows(const ci_model *m, int from, int to, int rows) {
    for (int i = 0; i < CI_POOL_REGIONS; i++) {
        const struct ci_pool_region *r = &m->pool_rows[i];
        const size_t per = (size_t)1 << r->rows_log2, lrows = (size_t)m->pool_blocks * per, rf = r->row_floats;
        const size_t n = (size_t)rows >> (KV_BLOCK_LOG2 - r->rows_log2);   /* rows the first `rows` positions complete */
        if (!n || r->layers < 1) continue;
        float *dst = r->buf + (size_t)to * per * rf;
        const float *src = r->buf + (size_t)from * per * rf;
        const size_t pitch = lrows * rf * sizeof(float);
        m->be->copy_2d(m->be, dst, pitch, src, pitch, n * rf * sizeof(float), (size_t)r->layers);
    }
}

int ci_session_truncate_copy(ci_session *s, int tokens) {
    if (tokens > s->pos) tokens = s->pos;
    if (tokens < 0) tokens = 0;
    if (!s->pool || s->own_pool) return ci_session_truncate(s, tokens);
    int from, to;
    s->pos = kvs_truncate_copy(s->pool, &s->pages, tokens, &from, &to);
    if (from >= 0) copy_block_rows(s->m, from, to, s->pos % KV_BLOCK);
    return s->pos;
}

void ci_session_publish(ci_session *s, const int *toks, int n, int tail) {
    if (!s->pool || s->own_pool) return;   /* an own pool has nobody to share with */
    if (n > s->pos) n = s->pos;
    kvs_publish(s->pool, &s->pages, (const int32_t *)toks, n, tail);
}

int ci_session_match(ci_session *s, const int *toks, int n, int limit) {
    if (!s->pool || s->own_pool || s->pos || s->pages.n) return s->pos;
    if (limit > s->max_ctx) limit = s->max_ctx;
    int from, to;
    s->pos = kvs_match_copy(s->pool, &s->pages, (const int32_t *)toks, n, limit, &from, &to);
    if (from >= 0) copy_block_rows(s->m, from, to, s->pos % KV_BLOCK);
    return s->pos;
}
int ci_session_pos(const ci_session *s) { return s->pos; }

int ci_backend_check(const ci_model *m, char *err, size_t errlen) {
    ci_backend *be = m->be;
    if (!be || !be->status || !be->status(be)) return 0;
    return ci_err(err, errlen, "%s: %s: %s", m->family->name, be->name, be->last_error[0] ? be->last_error : "backend error");
}

int ci_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    if (s->m->family->ops->forward(s, tokens, n, logits, all_logits, err, errlen)) return -1;
    return ci_backend_check(s->m, err, errlen);
}

/* the model's host logits, room for count floats (grown when short; NULL when out of memory) */
static float *model_logits(ci_model *m, size_t count) {
    if (count <= m->host_logits_cap) return m->host_logits;
    float *p = malloc(count * sizeof *p);
    if (!p) return NULL;
    free(m->host_logits);
    m->host_logits = p;
    m->host_logits_cap = count;
    return p;
}

int ci_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    const ci_family_ops *o = s->m->family->ops;
    if (o->forward_argmax) {
        if (o->forward_argmax(s, tokens, n, out_id, err, errlen)) return -1;
        return ci_backend_check(s->m, err, errlen);
    }
    /* no device argmax: the logits come to the host and the sampler's greedy rule picks */
    const int V = (int)s->m->cfg.vocab_size;
    float *logits = model_logits(s->m, (size_t)V);
    if (!logits) return ci_err(err, errlen, "%s: out of memory", s->m->family->name);
    int rc = ci_forward(s, tokens, n, logits, 0, err, errlen);
    if (!rc) *out_id = smp_argmax(logits, V);
    return rc;
}

int ci_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen) {
    if (!ss || !tokens || !out_ids || n <= 0 || !ss[0])
        return ci_err(err, errlen, "forward_batch_argmax needs at least one sequence, its token and room for its id");
    ci_model *m = ss[0]->m;
    const ci_family_ops *o = m->family->ops;
    if (o->forward_batch_argmax) {
        if (o->forward_batch_argmax(ss, tokens, n, out_ids, err, errlen)) return -1;
        return ci_backend_check(m, err, errlen);
    }
    if (!o->forward_batch) return ci_err(err, errlen, "%s: no batched decode", m->family->name);
    /* no backend argmax: the n rows of logits come to the host, each picked by the sampler's
     * greedy rule */
    const size_t V = (size_t)m->cfg.vocab_size;
    float *logits = model_logits(m, (size_t)n * V);
    if (!logits) return ci_err(err, errlen, "%s: out of memory for %d rows of logits", m->family->name, n);
    int rc = o->forward_batch(ss, tokens, n, logits, err, errlen);
    if (!rc) rc = ci_backend_check(m, err, errlen);
    if (!rc)
        for (int i = 0; i < n; i++) out_ids[i] = smp_argmax(logits + (size_t)i * V, (int)V);
    return rc;
}

int ci_forward_check(const ci_session *s, const int *tokens, int n, int vocab, char *err, size_t errlen) {
    const char *fam = s->m->family->name;
    if (n <= 0) return ci_err(err, errlen, "%s: forward needs at least one token", fam);
    if (s->pos < 0 || s->pos + n > s->max_ctx)
        return ci_err(err, errlen, "%s: %d tokens at position %d exceed the context of %d", fam, n, s->pos, s->max_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return ci_err(err, errlen, "%s: token id %d at index %d is outside the vocabulary [0, %d)", fam, tokens[i], i, vocab);
    return 0;
}

void ci_forward_chunks(ci_session *s, const int *tokens, int n, float *logits, int all_logits, int vocab, int chunk,
                       ci_chunk_fn chunk_fn) {
    for (int off = 0; off < n; off += chunk) {
        int k = n - off < chunk ? n - off : chunk;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)off * (size_t)vocab;
        else if (logits && off + k == n) out = logits;
        chunk_fn(s, tokens + off, k, out, all_logits);
    }
}

void ci_lm_head(ci_backend *be, float *logits, int all_logits, const float *x, int n, int dim, const float *norm_w,
                float eps, const ci_mat *head, float *xn, float *last) {
    if (!logits) return;
    if (all_logits) {
        be->rmsnorm(be, xn, x, norm_w, n, dim, eps);
        be->matmul(be, logits, xn, n, head);
    } else {
        be->rmsnorm(be, last, x + (size_t)(n - 1) * (size_t)dim, norm_w, 1, dim, eps);
        be->matmul(be, logits, last, 1, head);
    }
}

int ci_bind_finish(w_binder *b, ci_model *m, float ***owned, int *n_owned, char *err, size_t errlen) {
    int rc = w_finish(b, err, errlen);
    *owned = b->owned;
    *n_owned = b->n_owned;
    m->n_params = b->n_params;
    memcpy(m->bytes_by_dtype, b->bytes_by_dtype, sizeof m->bytes_by_dtype);
    m->decode_bytes = b->decode_bytes;
    if (!m->st) { /* record mode: make-random reads the specs through the model */
        m->specs = b->specs;
        m->n_specs = b->n_specs;
        b->specs = NULL;
    }
    w_done(b);
    return rc;
}

int ci_batch_check(ci_session *const *ss, const int *tokens, int n, int vocab, char *err, size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const char *fam = m->family->name;
    for (int i = 0; i < n; i++) {
        if (ss[i]->m != m) return ci_err(err, errlen, "%s: forward_batch: sequence %d belongs to another model", fam, i);
        if (ss[i]->pos + 1 > ss[i]->max_ctx)
            return ci_err(err, errlen, "%s: sequence %d: position %d exceeds the context of %d", fam, i, ss[i]->pos,
                          ss[i]->max_ctx);
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return ci_err(err, errlen, "%s: token id %d of sequence %d is outside the vocabulary [0, %d)", fam, tokens[i],
                          i, vocab);
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i]) return ci_err(err, errlen, "%s: forward_batch: sequence %d appears twice", fam, i);
    }
    return 0;
}

void *ci_buf_alloc(ci_backend *be, size_t bytes, int *bad) {
    void *p = be->alloc(be, bytes ? bytes : 4);
    if (!p) *bad = 1;
    return p;
}

void ci_buf_release(ci_backend *be, void *p) {
    if (p) be->buf_free(be, p);
}

int ci_graphs_allowed(const ci_model *m) {
    const ci_backend *be = m->be;
    return be->graph_begin && be->graph_end && be->graph_launch && !m->no_graphs && !m->dump;
}

void ci_dump_buf(ci_model *m, const char *name, int layer, const float *x, int n, int dim) {
    if (!m->dump) return;
    if (!m->be->is_device) {
        m->dump(m->dump_ctx, name, layer, x, n, dim);
        return;
    }
    size_t bytes = (size_t)n * (size_t)dim * sizeof(float);
    float *h = malloc(bytes);
    if (!h) return;
    m->be->download(m->be, h, x, bytes);
    m->dump(m->dump_ctx, name, layer, h, n, dim);
    free(h);
}
