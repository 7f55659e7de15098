/* st_write.c — see st_write.h. */
#include "st_write.h"
#include "../core/status.h"
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int st_write_file(const char *path, const st_wdesc *d, int n, st_fill_fn fill, void *ctx, char *err, size_t errlen) {
    json_t *h = json_object();
    size_t off = 0, maxb = 0;
    for (int i = 0; i < n; i++) {
        size_t nb = ci_dtype_size(d[i].dtype);
        json_t *shape = json_array();
        for (int k = 0; k < d[i].ndim; k++) { nb *= (size_t)d[i].shape[k]; json_array_append_new(shape, json_integer(d[i].shape[k])); }
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(ci_dtype_name(d[i].dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", json_pack("[I, I]", (json_int_t)off, (json_int_t)(off + nb)));
        json_object_set_new(h, d[i].name, e);
        off += nb;
        if (nb > maxb) maxb = nb;
    }
    char *txt = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (!txt) return ci_err(err, errlen, "%s: out of memory writing the header", path);
    size_t hl = strlen(txt), pad = (8 - hl % 8) % 8;  /* keep the data 8-byte aligned */
    FILE *f = fopen(path, "wb");
    void *buf = NULL;
    int rc = -1;
    if (!f) { ci_err(err, errlen, "%s: cannot create: %s", path, strerror(errno)); goto done; }
    uint64_t hl8 = hl + pad;
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)(hl8 >> (8 * k));
    if (fwrite(le, 1, 8, f) != 8 || fwrite(txt, 1, hl, f) != hl || fwrite("        ", 1, pad, f) != pad) goto werr;
    buf = malloc(maxb ? maxb : 1);
    if (!buf) { ci_err(err, errlen, "%s: out of memory (%zu bytes)", path, maxb); goto done; }
    for (int i = 0; i < n; i++) {
        size_t nb = ci_dtype_size(d[i].dtype);
        for (int k = 0; k < d[i].ndim; k++) nb *= (size_t)d[i].shape[k];
        if (fill(ctx, i, buf, nb)) { ci_err(err, errlen, "%s: cannot fill tensor '%s'", path, d[i].name); goto done; }
        if (fwrite(buf, 1, nb, f) != nb) goto werr;
    }
    if (fclose(f)) { f = NULL; goto werr; }
    f = NULL;
    rc = 0;
    goto done;
werr:
    ci_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
done:
    if (f) fclose(f);
    free(buf);
    free(txt);
    return rc;
}
