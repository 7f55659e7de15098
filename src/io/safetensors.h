/* safetensors.h — mmap'd safetensors checkpoints, single file or sharded.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON header mapping tensor
 * name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte
 * after the header) plus an optional "__metadata__" object of strings, then the data.
 *
 * Invariants after a successful open: every tensor's [begin, end) lies inside its file's
 * data area, tensors of one file do not overlap, numel(shape) * dtype size == end - begin,
 * all dims are >= 0 and the products do not overflow, names are unique across the set.
 * Tensor data pointers stay valid until st_close. */
#ifndef CI_SAFETENSORS_H
#define CI_SAFETENSORS_H
#include "../core/tensor.h"
#include "cinfer.h"
#include <stddef.h>
#include <stdint.h>

/* Parses and validates one header (the JSON bytes, not the 8-byte prefix) against a data
 * area of data_len bytes. On success *out is a malloc'd array of *n tensors whose names are
 * malloc'd and whose data pointers are data_base + begin (data_base may be NULL when only
 * validating). fname is used in error messages. Free with st_free_tensors. */
int st_parse_header(const char *hdr, size_t hdr_len, const uint8_t *data_base, size_t data_len,
                    const char *fname, ci_tensor **out, int *n, char *err, size_t errlen);
void st_free_tensors(ci_tensor *t, int n);

typedef struct st_set st_set;

/* Opens a checkpoint directory: model.safetensors.index.json when present (every shard it
 * names must exist, and each tensor must be in the shard the index says), else
 * model.safetensors, else every *.safetensors file in the directory (sorted). */
int st_open_dir(const char *dir, st_set **out, char *err, size_t errlen);
/* Opens one file as a set. */
int st_open_file(const char *path, st_set **out, char *err, size_t errlen);
void st_close(st_set *s);

int st_count(const st_set *s);
const ci_tensor *st_get(const st_set *s, int i);          /* i in [0, st_count) */
const ci_tensor *st_find(const st_set *s, const char *name); /* NULL if absent; O(log n) */
int st_index_of(const st_set *s, const char *name);        /* -1 if absent */
const char *st_file_of(const st_set *s, int i);            /* path of the file holding tensor i */
size_t st_total_bytes(const st_set *s);                    /* sum of tensor bytes */

/* Reads every file of the set through its mapping once, shard by shard in chunks of 16 MiB
 * (the pages are then resident: a forward or an upload after it finds them in memory),
 * calling fn after each chunk: a file's last call has file_done == file_bytes, the very
 * last done == total. Does nothing (no call) when the files together are larger than the
 * machine's physical memory, where reading ahead would evict what it read. Returns nothing:
 * the reads are an optimisation, the forward reads (and faults) the same pages anyway. */
void st_read_ahead(const st_set *s, ci_progress_cb fn, void *ctx);

/* Replaces every file's mapping by an anonymous copy of its bytes, read with pread into
 * memory asked for as transparent huge pages, then made read-only; tensor data pointers
 * into a file move with it (aligned copies of misaligned tensors stay). Only when the
 * files together fit in budget bytes; returns 1 when all were copied, 0 when some or all
 * were left mapped (over budget, or the memory could not be had), -1 with err set when a
 * file cannot be read (the set stays usable: files already copied keep their copies, the
 * rest stay mapped). fn / ctx as for st_read_ahead (may be NULL).
 * Why: on some CPUs a decode step streams weights out of page-cache pages at half the rate
 * it reads anonymous memory (bench/RESULTS.md, "CPU on an AVX-512 EPYC (Zen 5)"). */
int st_make_resident(st_set *s, uint64_t budget, ci_progress_cb fn, void *ctx, char *err, size_t errlen);
/* The largest file's anonymous copy (st_make_resident) and its length in *len, or NULL (none
 * copied): memory whose pages are in RAM, to time reads on without allocating more. */
const void *st_resident_bytes(const st_set *s, uint64_t *len);
/* Bytes the set's files take (what st_make_resident copies). */
uint64_t st_file_bytes(const st_set *s);

#endif
