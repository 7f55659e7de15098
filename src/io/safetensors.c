/* safetensors.c — reads safetensors checkpoints: one file, a sharded directory with
 * model.safetensors.index.json, or a directory of loose *.safetensors files.
 *
 * Owns: the read-only MAP_PRIVATE mapping of every file of a set, a malloc'd copy of every
 * tensor name, and the set's tensor table. Nothing is read through stdio and nothing is
 * copied out of the mapping: ci_tensor.data points straight into it — except a tensor whose
 * bytes do not start at a multiple of its element size (the format promises no alignment:
 * the data area begins at byte 8 + header length, which writers need not pad, and tensors
 * may sit at any offset). Such a tensor is copied once into an aligned buffer the set owns,
 * so kernels may read every tensor through pointers of its element type.
 *
 * Invariants after st_parse_header succeeds (and so for every file of an open set):
 *   - every tensor has a known dtype, 0..CI_MAX_DIMS dims, all >= 0;
 *   - the product of the non-zero dims times the dtype size fits in int64_t and size_t,
 *     so every partial product of a shape (a row size, a stride) is safe to compute even
 *     when another dim is 0;
 *   - 0 <= begin <= end <= data_len and end - begin == numel * dtype size == nbytes;
 *   - no two tensors of a file share a byte (empty tensors share none, so they may sit
 *     anywhere in the data area, even inside another tensor's range);
 *   - names are UTF-8 (possibly empty) without NUL bytes, unique, and the returned array
 *     is sorted by name (strcmp order).
 * For a set, additionally: names are unique across files, the table is sorted by name
 * (st_find is a binary search), and with an index every tensor sits in the shard the
 * index names and the index names no tensor that no shard holds.
 *
 * Errors: every failure frees what was built so far (one `goto fail` per function) and
 * writes one line naming the file and, where there is one, the tensor. */
#include "safetensors.h"
#include "../core/status.h"
#include "json.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header larger than this is treated as corrupt. The biggest real checkpoints (100k+
 * tensors) have headers of a few MiB. */
#define ST_MAX_HEADER ((uint64_t)100 << 20)

/* ---------------------------------------------------------------------------------------
 * Header parsing
 * ------------------------------------------------------------------------------------- */

/* One tensor's byte range, kept apart from ci_tensor so that ranges can be checked for
 * overlap even when the caller passed no data_base (validation only). */
typedef struct {
    uint64_t begin, end;
    int idx; /* index into the tensor array being built */
} st_span;

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int tensor_name_cmp(const void *a, const void *b) {
    return strcmp(((const ci_tensor *)a)->name, ((const ci_tensor *)b)->name);
}

/* Human name of a JSON value's type, for "expected X, got Y" messages. */
static const char *jtype(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Copies len bytes into a fresh NUL-terminated string. */
static char *dupn(const char *s, size_t len) {
    char *p = malloc(len + 1);
    if (p) { memcpy(p, s, len); p[len] = 0; }
    return p;
}

/* Validates "__metadata__": an object whose values are all strings. */
static int check_metadata(const json_t *m, const char *fname, char *err, size_t errlen) {
    if (!json_is_object(m))
        return ci_err(err, errlen, "%s: \"__metadata__\" must be an object of strings, got %s", fname, jtype(m));
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v)
        if (!json_is_string(v))
            return ci_err(err, errlen, "%s: \"__metadata__\" key '%s' must be a string, got %s", fname, k, jtype(v));
    return 0;
}

/* Parses one header entry `name: {dtype, shape, data_offsets}` into *t and *sp (t->name is
 * left for the caller). data_len bounds the offsets. */
static int parse_entry(const char *fname, const char *name, const json_t *e, size_t data_len,
                       ci_tensor *t, st_span *sp, char *err, size_t errlen) {
    if (!json_is_object(e))
        return ci_err(err, errlen, "%s: tensor '%s': entry must be an object, got %s", fname, name, jtype(e));
    const json_t *jd = NULL, *js = NULL, *jo = NULL;
    const char *k;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach((json_t *)e, k, klen, v) {
        if (klen == 5 && !memcmp(k, "dtype", 5)) jd = v;
        else if (klen == 5 && !memcmp(k, "shape", 5)) js = v;
        else if (klen == 12 && !memcmp(k, "data_offsets", 12)) jo = v;
        else return ci_err(err, errlen, "%s: tensor '%s': unknown key '%s' (expected dtype, shape, data_offsets)", fname, name, k);
    }
    if (!jd) return ci_err(err, errlen, "%s: tensor '%s': missing \"dtype\"", fname, name);
    if (!js) return ci_err(err, errlen, "%s: tensor '%s': missing \"shape\"", fname, name);
    if (!jo) return ci_err(err, errlen, "%s: tensor '%s': missing \"data_offsets\"", fname, name);

    /* dtype: a known spelling. A string with an embedded NUL would otherwise read as its
     * prefix ("F32\u0000x" as F32), so its length must match. */
    if (!json_is_string(jd))
        return ci_err(err, errlen, "%s: tensor '%s': \"dtype\" must be a string, got %s", fname, name, jtype(jd));
    const char *ds = json_string_value(jd);
    if (strlen(ds) != json_string_length(jd))
        return ci_err(err, errlen, "%s: tensor '%s': \"dtype\" contains a NUL byte", fname, name);
    if (ci_dtype_parse(ds, &t->dtype) != 0)
        return ci_err(err, errlen, "%s: tensor '%s': unknown dtype '%s'", fname, name, ds);
    const uint64_t esize = ci_dtype_size(t->dtype);

    /* shape: at most CI_MAX_DIMS non-negative integers. The product of the non-zero dims
     * (times the element size) must fit, so no partial product can overflow later. */
    if (!json_is_array(js))
        return ci_err(err, errlen, "%s: tensor '%s': \"shape\" must be an array of integers, got %s", fname, name, jtype(js));
    size_t nd = json_array_size(js);
    if (nd > CI_MAX_DIMS)
        return ci_err(err, errlen, "%s: tensor '%s': shape has %zu dims, at most %d are supported", fname, name, nd, CI_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t prod = esize; /* bytes of the non-zero dims */
    int has_zero = 0, overflow = 0;
    for (size_t i = 0; i < nd; i++) {
        const json_t *d = json_array_get(js, i);
        if (!json_is_integer(d))
            return ci_err(err, errlen, "%s: tensor '%s': shape[%zu] must be an integer, got %s", fname, name, i, jtype(d));
        json_int_t x = json_integer_value(d);
        if (x < 0)
            return ci_err(err, errlen, "%s: tensor '%s': shape[%zu] = %lld is negative", fname, name, i, (long long)x);
        t->shape[i] = (int64_t)x;
        if (x == 0) { has_zero = 1; continue; }
        if (prod > (uint64_t)INT64_MAX / (uint64_t)x) overflow = 1;
        else prod *= (uint64_t)x;
    }
    char sbuf[256];
    if (overflow || prod > (uint64_t)SIZE_MAX)
        return ci_err(err, errlen, "%s: tensor '%s': shape %s x %s overflows a 64-bit byte count", fname, name,
                      ci_shape_str(t->shape, t->ndim, sbuf, sizeof sbuf), ci_dtype_name(t->dtype));
    uint64_t nbytes = has_zero ? 0 : prod;

    /* data_offsets: [begin, end], integers, 0 <= begin <= end <= data_len. */
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return ci_err(err, errlen, "%s: tensor '%s': \"data_offsets\" must be [begin, end] integers", fname, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), en = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || en < 0)
        return ci_err(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] are negative", fname, name, (long long)b, (long long)en);
    if (en < b)
        return ci_err(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] end before they begin", fname, name, (long long)b, (long long)en);
    if ((uint64_t)en > (uint64_t)data_len)
        return ci_err(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] run past the end of the data area (%zu bytes)",
                      fname, name, (long long)b, (long long)en, data_len);
    if ((uint64_t)(en - b) != nbytes)
        return ci_err(err, errlen, "%s: tensor '%s': shape %s x %s needs %llu bytes but data_offsets span %llu", fname, name,
                      ci_shape_str(t->shape, t->ndim, sbuf, sizeof sbuf), ci_dtype_name(t->dtype),
                      (unsigned long long)nbytes, (unsigned long long)(en - b));
    t->nbytes = (size_t)nbytes;
    sp->begin = (uint64_t)b;
    sp->end = (uint64_t)en;
    return 0;
}

int st_parse_header(const char *hdr, size_t hdr_len, const uint8_t *data_base, size_t data_len,
                    const char *fname, ci_tensor **out, int *n, char *err, size_t errlen) {
    ci_tensor *t = NULL;
    st_span *sp = NULL;
    int cnt = 0;
    *out = NULL;
    *n = 0;
    json_t *root = cj_parse(hdr, hdr_len, fname, err, errlen); /* names fname on error */
    if (!root) goto fail;
    if (!json_is_object(root)) {
        ci_err(err, errlen, "%s: header must be a JSON object, got %s", fname, jtype(root));
        goto fail;
    }
    size_t cap = json_object_size(root);
    if (cap > (size_t)INT_MAX) {
        ci_err(err, errlen, "%s: header has %zu entries, too many", fname, cap);
        goto fail;
    }
    t = calloc(cap ? cap : 1, sizeof *t);
    sp = calloc(cap ? cap : 1, sizeof *sp);
    if (!t || !sp) {
        ci_err(err, errlen, "%s: out of memory for %zu tensors", fname, cap);
        goto fail;
    }

    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(root, key, klen, v) {
        /* Names are kept as C strings, so a NUL inside one would make two keys equal. */
        if (strlen(key) != klen) {
            ci_err(err, errlen, "%s: tensor '%s...': name contains a NUL byte", fname, key);
            goto fail;
        }
        if (!strcmp(key, "__metadata__")) {
            if (check_metadata(v, fname, err, errlen)) goto fail;
            continue;
        }
        if (parse_entry(fname, key, v, data_len, &t[cnt], &sp[cnt], err, errlen)) goto fail;
        if (!(t[cnt].name = dupn(key, klen))) {
            ci_err(err, errlen, "%s: tensor '%s': out of memory", fname, key);
            goto fail;
        }
        t[cnt].data = data_base ? data_base + sp[cnt].begin : NULL;
        sp[cnt].idx = cnt;
        cnt++;
    }

    /* Overlap: sorted by begin, a non-empty range must start at or after the furthest end
     * seen so far among non-empty ranges. Empty ranges hold no bytes and are skipped. */
    qsort(sp, (size_t)cnt, sizeof *sp, span_cmp);
    int far = -1; /* position in sp of the non-empty range reaching furthest */
    for (int i = 0; i < cnt; i++) {
        if (sp[i].begin == sp[i].end) continue;
        if (far >= 0 && sp[i].begin < sp[far].end) {
            const st_span *a = &sp[far], *b = &sp[i];
            ci_err(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' at [%llu, %llu]", fname,
                   t[b->idx].name, (unsigned long long)b->begin, (unsigned long long)b->end, t[a->idx].name,
                   (unsigned long long)a->begin, (unsigned long long)a->end);
            goto fail;
        }
        if (far < 0 || sp[i].end > sp[far].end) far = i;
    }

    /* Keys of one JSON object are unique (the parser rejects duplicates), so after the
     * sort no two neighbours are equal. */
    qsort(t, (size_t)cnt, sizeof *t, tensor_name_cmp);
    free(sp);
    json_decref(root);
    *out = t;
    *n = cnt;
    return 0;

fail:
    st_free_tensors(t, cnt);
    free(sp);
    json_decref(root); /* NULL-safe */
    return -1;
}

void st_free_tensors(ci_tensor *t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
}

/* ---------------------------------------------------------------------------------------
 * Files and sets
 * ------------------------------------------------------------------------------------- */

typedef struct {
    char *path;          /* as opened: the caller's path, or dir + "/" + shard name */
    char *shard;         /* the name the index uses for this file (index mode), else NULL */
    const uint8_t *map;  /* whole file, read-only: the file's mapping, or its anonymous copy */
    size_t map_len;      /* the file's size */
    size_t unmap_len;    /* what munmap takes (map_len, or the copy's rounded length) */
    int resident;        /* map is an anonymous copy (st_make_resident) */
} st_file;

struct st_set {
    ci_tensor *t;     /* [n] sorted by name; names owned here */
    int *file;        /* [n] index into files of the file holding t[i] */
    int n, cap;
    st_file *files;   /* [nfiles] */
    int nfiles, fcap;
    size_t total_bytes;
    void **copies;    /* [ncopies] aligned copies of misaligned tensors */
    int ncopies;
};

void st_close(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free((char *)s->t[i].name);
    free(s->t);
    free(s->file);
    for (int i = 0; i < s->nfiles; i++) {
        if (s->files[i].map) munmap((void *)s->files[i].map, s->files[i].unmap_len);
        free(s->files[i].path);
        free(s->files[i].shard);
    }
    free(s->files);
    for (int i = 0; i < s->ncopies; i++) free(s->copies[i]);
    free(s->copies);
    free(s);
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t o = a;
    if (a && dir[a - 1] != '/') p[o++] = '/';
    memcpy(p + o, name, b + 1);
    return p;
}

/* Maps path, checks the length prefix and parses the header; appends the file and its
 * tensors to s. On failure s is unchanged apart from capacity. `shard` (may be NULL) is
 * copied into the file record. */
static int set_add_file(st_set *s, const char *path, const char *shard, char *err, size_t errlen) {
    int fd = -1;
    void *map = MAP_FAILED;
    size_t size = 0;
    ci_tensor *t = NULL;
    int nt = 0;
    char *pcopy = NULL, *scopy = NULL;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { ci_err(err, errlen, "%s: cannot open: %s", path, strerror(errno)); goto fail; }
    struct stat st;
    if (fstat(fd, &st) != 0) { ci_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno)); goto fail; }
    if (!S_ISREG(st.st_mode)) { ci_err(err, errlen, "%s: not a regular file", path); goto fail; }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) { ci_err(err, errlen, "%s: file too large to map", path); goto fail; }
    size = (size_t)st.st_size;
    if (size < 8) {
        ci_err(err, errlen, "%s: file is %zu bytes, shorter than the 8-byte header length", path, size);
        goto fail;
    }
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) { ci_err(err, errlen, "%s: mmap of %zu bytes failed: %s", path, size, strerror(errno)); goto fail; }
    close(fd);
    fd = -1;

    const uint8_t *p = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i]; /* little-endian */
    if (hlen > ST_MAX_HEADER) {
        ci_err(err, errlen, "%s: header length %llu is larger than the %llu MiB limit (corrupt file?)", path,
               (unsigned long long)hlen, (unsigned long long)(ST_MAX_HEADER >> 20));
        goto fail;
    }
    if (hlen > size - 8) {
        ci_err(err, errlen, "%s: header length %llu runs past the end of the file (%zu bytes; truncated?)", path,
               (unsigned long long)hlen, size);
        goto fail;
    }
    if (st_parse_header((const char *)p + 8, (size_t)hlen, p + 8 + hlen, size - 8 - (size_t)hlen, path, &t, &nt, err, errlen))
        goto fail;

    /* Grow the set's arrays, then commit. */
    if (s->nfiles == s->fcap) {
        int nc = s->fcap ? s->fcap * 2 : 4;
        st_file *nf = realloc(s->files, (size_t)nc * sizeof *nf);
        if (!nf) { ci_err(err, errlen, "%s: out of memory", path); goto fail; }
        s->files = nf;
        s->fcap = nc;
    }
    if (nt > INT_MAX - s->n) { ci_err(err, errlen, "%s: too many tensors in the set", path); goto fail; }
    if (s->n + nt > s->cap) {
        int nc = s->cap ? s->cap : 64;
        while (nc < s->n + nt) nc = nc > INT_MAX / 2 ? INT_MAX : nc * 2;
        ci_tensor *ntab = realloc(s->t, (size_t)nc * sizeof *ntab);
        if (!ntab) { ci_err(err, errlen, "%s: out of memory", path); goto fail; }
        s->t = ntab;
        int *nfile = realloc(s->file, (size_t)nc * sizeof *nfile);
        if (!nfile) { ci_err(err, errlen, "%s: out of memory", path); goto fail; }
        s->file = nfile;
        s->cap = nc;
    }
    pcopy = dupn(path, strlen(path));
    scopy = shard ? dupn(shard, strlen(shard)) : NULL;
    if (!pcopy || (shard && !scopy)) { ci_err(err, errlen, "%s: out of memory", path); goto fail; }

    for (int i = 0; i < nt; i++) {   /* misaligned tensors: an aligned copy */
        size_t es = ci_dtype_size(t[i].dtype);
        if (!t[i].nbytes || es <= 1 || (uintptr_t)t[i].data % es == 0) continue;
        void **nc = realloc(s->copies, (size_t)(s->ncopies + 1) * sizeof *nc);
        void *c = nc ? malloc(t[i].nbytes) : NULL;
        if (nc) s->copies = nc;
        if (!c) { ci_err(err, errlen, "%s: out of memory copying misaligned tensor '%s'", path, t[i].name); goto fail; }
        memcpy(c, t[i].data, t[i].nbytes);
        s->copies[s->ncopies++] = c;
        t[i].data = c;
    }
    int fi = s->nfiles++;
    s->files[fi] = (st_file){ pcopy, scopy, map, size, size, 0 };
    for (int i = 0; i < nt; i++) {
        s->t[s->n] = t[i]; /* name ownership moves to the set */
        s->file[s->n] = fi;
        s->total_bytes += t[i].nbytes;
        s->n++;
    }
    free(t); /* the array only; names now live in s->t */
    return 0;

fail:
    if (fd >= 0) close(fd);
    if (map != MAP_FAILED) munmap(map, size);
    st_free_tensors(t, nt);
    free(pcopy);
    free(scopy);
    return -1;
}

/* Sorts the set's table by name and rejects names held by two files. */
typedef struct { ci_tensor t; int file; } st_entry;

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->t.name, ((const st_entry *)b)->t.name);
}

static int set_finish(st_set *s, char *err, size_t errlen) {
    if (s->n == 0) return 0;
    st_entry *e = malloc((size_t)s->n * sizeof *e);
    if (!e) return ci_err(err, errlen, "%s: out of memory sorting %d tensors", s->files[0].path, s->n);
    for (int i = 0; i < s->n; i++) e[i] = (st_entry){ s->t[i], s->file[i] };
    qsort(e, (size_t)s->n, sizeof *e, entry_cmp);
    for (int i = 0; i < s->n; i++) { s->t[i] = e[i].t; s->file[i] = e[i].file; }
    free(e);
    for (int i = 1; i < s->n; i++)
        if (!strcmp(s->t[i - 1].name, s->t[i].name))
            return ci_err(err, errlen, "%s: tensor '%s' is also in %s", s->files[s->file[i]].path, s->t[i].name,
                          s->files[s->file[i - 1]].path);
    return 0;
}

int st_open_file(const char *path, st_set **out, char *err, size_t errlen) {
    *out = NULL;
    st_set *s = calloc(1, sizeof *s);
    if (!s) return ci_err(err, errlen, "%s: out of memory", path);
    if (set_add_file(s, path, NULL, err, errlen)) goto fail;
    if (set_finish(s, err, errlen)) goto fail;
    *out = s;
    return 0;
fail:
    st_close(s);
    return -1;
}

/* ---- index mode ---------------------------------------------------------------------- */

/* One weight_map row; strings borrowed from the parsed index. */
typedef struct { const char *name, *shard; } st_wm;

static int wm_by_shard(const void *a, const void *b) {
    const st_wm *x = a, *y = b;
    int c = strcmp(x->shard, y->shard);
    return c ? c : strcmp(x->name, y->name);
}
static int wm_by_name(const void *a, const void *b) {
    return strcmp(((const st_wm *)a)->name, ((const st_wm *)b)->name);
}

/* A shard name must stay inside the checkpoint directory: relative, no ".." component. */
static int shard_name_ok(const char *s) {
    if (!*s || *s == '/') return 0;
    for (const char *p = s; *p;) {
        const char *q = strchr(p, '/');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        if (l == 2 && p[0] == '.' && p[1] == '.') return 0;
        if (!q) break;
        p = q + 1;
    }
    return 1;
}

static int open_index(st_set *s, const char *dir, const char *ipath, char *err, size_t errlen) {
    st_wm *wm = NULL;
    size_t nw = 0;
    char *spath = NULL;
    json_t *root = cj_load_file(ipath, err, errlen);
    if (!root) goto fail;
    const json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!map || !json_is_object(map)) {
        ci_err(err, errlen, "%s: expected an object with a \"weight_map\" object", ipath);
        goto fail;
    }
    nw = json_object_size(map);
    wm = malloc((nw ? nw : 1) * sizeof *wm);
    if (!wm) { ci_err(err, errlen, "%s: out of memory", ipath); goto fail; }
    size_t k = 0, klen;
    const char *key;
    json_t *v;
    json_object_keylen_foreach((json_t *)map, key, klen, v) {
        if (strlen(key) != klen) { ci_err(err, errlen, "%s: tensor '%s...': name contains a NUL byte", ipath, key); goto fail; }
        if (!json_is_string(v)) {
            ci_err(err, errlen, "%s: tensor '%s': shard must be a file name string, got %s", ipath, key, jtype(v));
            goto fail;
        }
        if (strlen(json_string_value(v)) != json_string_length(v) || !shard_name_ok(json_string_value(v))) {
            ci_err(err, errlen, "%s: tensor '%s': shard must be a relative file name inside the directory", ipath, key);
            goto fail;
        }
        wm[k++] = (st_wm){ key, json_string_value(v) };
    }

    /* Open every distinct shard once, in name order. */
    qsort(wm, nw, sizeof *wm, wm_by_shard);
    for (size_t i = 0; i < nw; i++) {
        if (i > 0 && !strcmp(wm[i].shard, wm[i - 1].shard)) continue;
        spath = path_join(dir, wm[i].shard);
        if (!spath) { ci_err(err, errlen, "%s: out of memory", ipath); goto fail; }
        struct stat st;
        if (stat(spath, &st) != 0) {
            ci_err(err, errlen, "%s: shard '%s' (holding tensor '%s') cannot be opened: %s", ipath, wm[i].shard,
                   wm[i].name, strerror(errno));
            goto fail;
        }
        if (set_add_file(s, spath, wm[i].shard, err, errlen)) goto fail;
        free(spath);
        spath = NULL;
    }
    if (set_finish(s, err, errlen)) goto fail;

    /* Both lists sorted by name: walk them together. */
    qsort(wm, nw, sizeof *wm, wm_by_name);
    size_t a = 0;
    int b = 0;
    while (a < nw || b < s->n) {
        int c = a >= nw ? 1 : b >= s->n ? -1 : strcmp(wm[a].name, s->t[b].name);
        if (c < 0) {
            ci_err(err, errlen, "%s: tensor '%s' is in the weight_map (shard '%s') but not in that shard", ipath,
                   wm[a].name, wm[a].shard);
            goto fail;
        }
        const st_file *f = &s->files[s->file[b]];
        if (c > 0) {
            ci_err(err, errlen, "%s: tensor '%s' is in shard '%s' but not in the weight_map", ipath, s->t[b].name, f->shard);
            goto fail;
        }
        if (strcmp(wm[a].shard, f->shard)) {
            ci_err(err, errlen, "%s: weight_map puts tensor '%s' in shard '%s' but it is in shard '%s'", ipath,
                   wm[a].name, wm[a].shard, f->shard);
            goto fail;
        }
        a++;
        b++;
    }
    free(wm);
    json_decref(root);
    return 0;
fail:
    free(spath);
    free(wm);
    json_decref(root);
    return -1;
}

/* ---- directory mode ------------------------------------------------------------------ */

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Every regular *.safetensors file of dir, opened in name order. */
static int open_loose(st_set *s, const char *dir, char *err, size_t errlen) {
    char **names = NULL;
    size_t nn = 0, cap = 0;
    char *p = NULL;
    DIR *d = opendir(dir);
    if (!d) { ci_err(err, errlen, "%s: cannot open directory: %s", dir, strerror(errno)); goto fail; }
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l <= 12 || strcmp(de->d_name + l - 12, ".safetensors")) continue;
        if (!(p = path_join(dir, de->d_name))) { ci_err(err, errlen, "%s: out of memory", dir); goto fail; }
        int reg = file_exists(p);
        free(p);
        p = NULL;
        if (!reg) continue;
        if (nn == cap) {
            cap = cap ? cap * 2 : 16;
            char **nb = realloc(names, cap * sizeof *nb);
            if (!nb) { ci_err(err, errlen, "%s: out of memory", dir); goto fail; }
            names = nb;
        }
        if (!(names[nn] = dupn(de->d_name, l))) { ci_err(err, errlen, "%s: out of memory", dir); goto fail; }
        nn++;
    }
    closedir(d);
    d = NULL;
    if (nn == 0) {
        ci_err(err, errlen, "%s: no model.safetensors.index.json, model.safetensors or *.safetensors file", dir);
        goto fail;
    }
    qsort(names, nn, sizeof *names, str_cmp);
    for (size_t i = 0; i < nn; i++) {
        if (!(p = path_join(dir, names[i]))) { ci_err(err, errlen, "%s: out of memory", dir); goto fail; }
        if (set_add_file(s, p, NULL, err, errlen)) goto fail;
        free(p);
        p = NULL;
    }
    if (set_finish(s, err, errlen)) goto fail;
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
    return 0;
fail:
    if (d) closedir(d);
    free(p);
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
    return -1;
}

int st_open_dir(const char *dir, st_set **out, char *err, size_t errlen) {
    *out = NULL;
    char *ipath = NULL, *single = NULL;
    st_set *s = calloc(1, sizeof *s);
    ipath = path_join(dir, "model.safetensors.index.json");
    single = path_join(dir, "model.safetensors");
    if (!s || !ipath || !single) { ci_err(err, errlen, "%s: out of memory", dir); goto fail; }
    if (file_exists(ipath)) {
        if (open_index(s, dir, ipath, err, errlen)) goto fail;
    } else if (file_exists(single)) {
        if (set_add_file(s, single, NULL, err, errlen) || set_finish(s, err, errlen)) goto fail;
    } else if (open_loose(s, dir, err, errlen)) {
        goto fail;
    }
    free(ipath);
    free(single);
    *out = s;
    return 0;
fail:
    free(ipath);
    free(single);
    st_close(s);
    return -1;
}

/* ---------------------------------------------------------------------------------------
 * Queries
 * ------------------------------------------------------------------------------------- */

int st_count(const st_set *s) { return s->n; }

const ci_tensor *st_get(const st_set *s, int i) { return (i >= 0 && i < s->n) ? &s->t[i] : NULL; }

int st_index_of(const st_set *s, const char *name) {
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(name, s->t[mid].name);
        if (c == 0) return mid;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return -1;
}

const ci_tensor *st_find(const st_set *s, const char *name) {
    int i = st_index_of(s, name);
    return i < 0 ? NULL : &s->t[i];
}

const char *st_file_of(const st_set *s, int i) {
    return (i >= 0 && i < s->n) ? s->files[s->file[i]].path : NULL;
}

size_t st_total_bytes(const st_set *s) { return s->total_bytes; }

/* ---- read-ahead with progress --------------------------------------------------------- */

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14; older kernels say EINVAL and pages are touched */
#endif

void st_read_ahead(const st_set *s, ci_progress_cb fn, void *ctx) {
    uint64_t total = 0;
    for (int i = 0; i < s->nfiles; i++) total += s->files[i].map_len;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0 && total > (uint64_t)pages * (uint64_t)psz) return;
    if (psz <= 0) psz = 4096;
    const size_t chunk = (size_t)16 << 20;   /* a multiple of any page size */
    int populate = 1;
    ci_load_progress p = { NULL, 0, s->nfiles, 0, 0, 0, total };
    for (int i = 0; i < s->nfiles; i++) {
        const st_file *f = &s->files[i];
        p.file = f->path;
        p.shard = i;
        p.file_done = 0;
        p.file_bytes = f->map_len;
        for (size_t off = 0; off < f->map_len; off += chunk) {
            size_t len = f->map_len - off < chunk ? f->map_len - off : chunk;
            const volatile uint8_t *b = (const volatile uint8_t *)f->map + off;
            if (!populate || madvise((void *)(uintptr_t)b, len, MADV_POPULATE_READ) != 0) {
                populate = 0;   /* unsupported here (or failed): touch one byte per page */
                for (size_t k = 0; k < len; k += (size_t)psz) (void)b[k];
            }
            p.file_done += len;
            p.done += len;
            if (fn) fn(ctx, &p);
        }
        if (!f->map_len && fn) fn(ctx, &p);
    }
}

/* ---- anonymous copies ------------------------------------------------------------------- */

#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif

uint64_t st_file_bytes(const st_set *s) {
    uint64_t total = 0;
    for (int i = 0; i < s->nfiles; i++) total += s->files[i].map_len;
    return total;
}

/* A private anonymous region of at least len bytes starting on a 2 MiB boundary (so the
 * kernel can back it with huge pages from its first byte), asked for as huge pages. NULL
 * when the memory cannot be had. *alloc_len: what munmap takes. */
static uint8_t *anon_alloc(size_t len, size_t *alloc_len) {
    const size_t huge = (size_t)2 << 20;
    size_t want = (len + huge - 1) / huge * huge;
    if (want < len || want + huge < want) return NULL;
    uint8_t *a = mmap(NULL, want + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return NULL;
    uintptr_t base = ((uintptr_t)a + huge - 1) / huge * huge;
    size_t head = base - (uintptr_t)a, tail = huge - head;
    if (head) munmap(a, head);
    if (tail) munmap((uint8_t *)base + want, tail);
    (void)madvise((void *)base, want, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
    *alloc_len = want;
    return (uint8_t *)base;
}

/* The whole of f's file into dst (pread in 16 MiB chunks, progress after each); 0, or -1 with err. */
static int read_file_into(const st_file *f, uint8_t *dst, ci_load_progress *p, ci_progress_cb fn, void *ctx,
                          char *err, size_t errlen) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { ci_err(err, errlen, "%s: cannot open: %s", f->path, strerror(errno)); return -1; }
    const size_t chunk = (size_t)16 << 20;
    size_t off = 0;
    while (off < f->map_len) {
        size_t len = f->map_len - off < chunk ? f->map_len - off : chunk;
        ssize_t got = pread(fd, dst + off, len, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            ci_err(err, errlen, "%s: read at byte %zu of %zu failed: %s", f->path, off, f->map_len,
                   got < 0 ? strerror(errno) : "the file is shorter than when it was opened");
            close(fd);
            return -1;
        }
        off += (size_t)got;
        p->file_done += (uint64_t)got;
        p->done += (uint64_t)got;
        if (fn) fn(ctx, p);
    }
    close(fd);
    if (!f->map_len && fn) fn(ctx, p);
    return 0;
}

int st_make_resident(st_set *s, uint64_t budget, ci_progress_cb fn, void *ctx, char *err, size_t errlen) {
    uint64_t total = st_file_bytes(s);
    if (total > budget) return 0;
    ci_load_progress p = { NULL, 0, s->nfiles, 0, 0, 0, total };
    int all = 1;
    for (int i = 0; i < s->nfiles; i++) {
        st_file *f = &s->files[i];
        p.file = f->path;
        p.shard = i;
        p.file_done = 0;
        p.file_bytes = f->map_len;
        size_t alloc_len = 0;
        uint8_t *a = f->map_len ? anon_alloc(f->map_len, &alloc_len) : NULL;
        if (!a) {   /* empty file, or no memory: this one stays mapped */
            all &= !f->map_len;
            p.done += f->map_len;
            if (fn) fn(ctx, &p);
            continue;
        }
        if (read_file_into(f, a, &p, fn, ctx, err, errlen)) {
            munmap(a, alloc_len);
            return -1;
        }
        mprotect(a, alloc_len, PROT_READ);
        const uint8_t *lo = f->map, *hi = f->map + f->map_len;
        for (int t = 0; t < s->n; t++) {
            const uint8_t *d = s->t[t].data;
            if (s->file[t] == i && d >= lo && d <= hi) s->t[t].data = (void *)(a + (d - lo));
        }
        munmap((void *)f->map, f->unmap_len);
        f->map = a;
        f->unmap_len = alloc_len;
        f->resident = 1;
    }
    return all;
}

const void *st_resident_bytes(const st_set *s, uint64_t *len) {
    const st_file *best = NULL;
    for (int i = 0; s && i < s->nfiles; i++)
        if (s->files[i].resident && (!best || s->files[i].map_len > best->map_len)) best = &s->files[i];
    *len = best ? best->map_len : 0;
    return best ? best->map : NULL;
}
