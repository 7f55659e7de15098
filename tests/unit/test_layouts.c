/* test_layouts.c — the same MoE checkpoint in the three expert layouts gives the same
 * logits. The qwen3_moe fixture (per-expert tensors, as transformers saves) is rewritten
 * here into the fused layout (experts.gate_up_proj [E, 2I, H] with gate rows first,
 * experts.down_proj [E, H, I]) and the mlx-stacked one (switch_mlp.{gate,up,down}_proj
 * [E, out, in]); each must match the fixture's transformers reference. A stacked tensor of
 * the wrong shape must fail naming it. */
#include "check.h"
#include "cinfer.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "io/st_write.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/status.h"

#define FX "tests/fixtures/qwen3_moe"

typedef struct {
    st_wdesc d[512];
    const void *src[512][64];   /* per output tensor: source blocks concatenated in order */
    size_t src_bytes[512][64];
    int n_src[512];
    char names[512][256];
    int n;
} plan;

static int fill(void *ctx, int i, void *buf, size_t nbytes) {
    plan *p = ctx;
    size_t o = 0;
    for (int k = 0; k < p->n_src[i]; k++) { memcpy((char *)buf + o, p->src[i][k], p->src_bytes[i][k]); o += p->src_bytes[i][k]; }
    return o == nbytes ? 0 : -1;
}

/* layout 1: fused, 2: mlx-stacked, 3: fused with a wrong down_proj shape */
static int rewrite(const char *out_dir, int layout, char *err, size_t errlen) {
    st_set *st;
    if (st_open_dir(FX, &st, err, errlen)) return -1;
    static plan p;
    memset(&p, 0, sizeof p);
    const int E = 8;
    for (int i = 0; i < st_count(st); i++) {
        const ci_tensor *t = st_get(st, i);
        const char *ex = strstr(t->name, ".mlp.experts.");
        if (!ex) {
            int k = p.n++;
            snprintf(p.names[k], sizeof p.names[k], "%s", t->name);
            p.d[k].name = p.names[k]; p.d[k].dtype = t->dtype; p.d[k].ndim = t->ndim;
            memcpy(p.d[k].shape, t->shape, sizeof t->shape);
            p.src[k][0] = t->data; p.src_bytes[k][0] = t->nbytes; p.n_src[k] = 1;
            continue;
        }
        int e;
        char proj[32];
        if (sscanf(ex, ".mlp.experts.%d.%31[a-z_]", &e, proj) != 2 || e != 0) continue;  /* handle once, at expert 0 */
        char pre[96];
        snprintf(pre, sizeof pre, "%.*s", (int)(ex - t->name), t->name);
        if (strcmp(proj, "gate_proj")) continue;
        char nm[256];
        const ci_tensor *g[8], *u[8], *dn[8];
        for (int q = 0; q < E; q++) {
            snprintf(nm, sizeof nm, "%s.mlp.experts.%d.gate_proj.weight", pre, q); g[q] = st_find(st, nm);
            snprintf(nm, sizeof nm, "%s.mlp.experts.%d.up_proj.weight", pre, q); u[q] = st_find(st, nm);
            snprintf(nm, sizeof nm, "%s.mlp.experts.%d.down_proj.weight", pre, q); dn[q] = st_find(st, nm);
        }
        int64_t I = g[0]->shape[0], H = g[0]->shape[1];
        if (layout == 2) {
            const ci_tensor **parts[3] = { g, u, dn };
            const char *pn[3] = { "gate_proj", "up_proj", "down_proj" };
            for (int q = 0; q < 3; q++) {
                int k = p.n++;
                snprintf(p.names[k], sizeof p.names[k], "%s.mlp.switch_mlp.%s.weight", pre, pn[q]);
                p.d[k].name = p.names[k]; p.d[k].dtype = g[0]->dtype; p.d[k].ndim = 3;
                p.d[k].shape[0] = E; p.d[k].shape[1] = parts[q][0]->shape[0]; p.d[k].shape[2] = parts[q][0]->shape[1];
                for (int x = 0; x < E; x++) { p.src[k][x] = parts[q][x]->data; p.src_bytes[k][x] = parts[q][x]->nbytes; }
                p.n_src[k] = E;
            }
        } else {
            int k = p.n++;
            snprintf(p.names[k], sizeof p.names[k], "%s.mlp.experts.gate_up_proj", pre);
            p.d[k].name = p.names[k]; p.d[k].dtype = g[0]->dtype; p.d[k].ndim = 3;
            p.d[k].shape[0] = E; p.d[k].shape[1] = 2 * I; p.d[k].shape[2] = H;
            for (int x = 0; x < E; x++) {
                p.src[k][2 * x] = g[x]->data; p.src_bytes[k][2 * x] = g[x]->nbytes;
                p.src[k][2 * x + 1] = u[x]->data; p.src_bytes[k][2 * x + 1] = u[x]->nbytes;
            }
            p.n_src[k] = 2 * E;
            k = p.n++;
            snprintf(p.names[k], sizeof p.names[k], "%s.mlp.experts.down_proj", pre);
            p.d[k].name = p.names[k]; p.d[k].dtype = g[0]->dtype; p.d[k].ndim = 3;
            p.d[k].shape[0] = E; p.d[k].shape[1] = H; p.d[k].shape[2] = I;
            for (int x = 0; x < E; x++) { p.src[k][x] = dn[x]->data; p.src_bytes[k][x] = dn[x]->nbytes; }
            p.n_src[k] = E;
            if (layout == 3) { p.d[k].shape[1] = I; p.d[k].shape[2] = H; }  /* transposed: same bytes, wrong shape */
        }
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    int rc = st_write_file(path, p.d, p.n, fill, &p, err, errlen);
    st_close(st);
    if (rc) return rc;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/", FX, out_dir);
    return system(cmd) == 0 ? 0 : ci_err(err, errlen, "copying config failed");
}

static double max_diff_vs_ref(const char *dir, char *err, size_t errlen) {
    json_t *ref = cj_load_file(FX "/ref.json", err, errlen);
    if (!ref) return INFINITY;
    const json_t *ta = json_object_get(ref, "tokens");
    int T = (int)json_array_size(ta), V = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    int *toks = malloc((size_t)T * sizeof *toks);
    for (int i = 0; i < T; i++) toks[i] = (int)json_integer_value(json_array_get(ta, i));
    float *want = malloc((size_t)T * V * sizeof *want), *got = malloc((size_t)T * V * sizeof *got);
    FILE *f = fopen(FX "/ref_logits.f32", "rb");
    size_t rd = f ? fread(want, sizeof *want, (size_t)T * V, f) : 0;
    if (f) fclose(f);
    double md = INFINITY;
    ci_model *m = NULL;
    ci_session *s = NULL;
    if (rd == (size_t)T * V && !ci_model_open(dir, NULL, &m, err, errlen) && !ci_session_new(m, T, &s, err, errlen) &&
        !ci_forward(s, toks, T, got, 1, err, errlen)) {
        md = 0;
        /* normalised to the parity bound: 1e-3 * max(1, max|ref|) */
        double mr = json_real_value(json_object_get(ref, "max_abs_ref"));
        for (size_t i = 0; i < (size_t)T * V; i++) md = fmax(md, fabs((double)got[i] - want[i]));
        md /= mr > 1 ? mr : 1;
    }
    ci_session_free(s);
    ci_model_free(m);
    free(toks); free(want); free(got);
    json_decref(ref);
    return md;
}

static char tmp[] = "/tmp/cinfer_layoutsXXXXXX";

static void test_fused(void) {
    char err[1024] = "", dir[600];
    snprintf(dir, sizeof dir, "%s/fused", tmp);
    mkdir(dir, 0755);
    CHECK(rewrite(dir, 1, err, sizeof err) == 0, "%s", err);
    double md = max_diff_vs_ref(dir, err, sizeof err);
    CHECK(md <= 1e-3, "fused layout: max|diff| %g (%s)", md, err);
}

static void test_mlx_stacked(void) {
    char err[1024] = "", dir[600];
    snprintf(dir, sizeof dir, "%s/mlx", tmp);
    mkdir(dir, 0755);
    CHECK(rewrite(dir, 2, err, sizeof err) == 0, "%s", err);
    double md = max_diff_vs_ref(dir, err, sizeof err);
    CHECK(md <= 1e-3, "mlx layout: max|diff| %g (%s)", md, err);
}

static void test_fused_wrong_shape(void) {
    char err[1024] = "", dir[600];
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    mkdir(dir, 0755);
    CHECK(rewrite(dir, 3, err, sizeof err) == 0, "%s", err);
    ci_model *m = NULL;
    CHECK(ci_model_open(dir, NULL, &m, err, sizeof err) != 0, "wrong fused shape accepted");
    CHECK_HAS(err, "qwen3_moe: tensor 'model.layers.0.mlp.experts.down_proj'");
    CHECK_HAS(err, "expected [8, 64, 32]");
    ci_model_free(m);
}

int main(void) {
    if (!mkdtemp(tmp)) return 1;
    TEST_RUN(test_fused);
    TEST_RUN(test_mlx_stacked);
    TEST_RUN(test_fused_wrong_shape);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd)) return 1;
    TEST_EXIT();
}
