/* test_parity.c — every fixture in tests/fixtures/ against its transformers reference.
 *
 * For each fixture (made by tools/oracle/make_fixtures.py, float64 reference):
 *   prefill: logits of the whole prompt in one forward, max|Δ| <= 1e-3 * max(1, max|ref|)
 *   step:    the same tokens fed one at a time through the cache, same bound
 *   greedy:  ci_generate with temperature 0 gives exactly transformers' greedy ids
 * Each check runs with the best kernels of this CPU and with the portable scalar kernels.
 * bf16 fixtures store bf16 weights and the reference is computed from those exact weights,
 * so the same bound holds (the engine computes in f32 either way).
 * On a CPU with AVX512-BF16 each fixture also runs with ci_model_opts.bf16_act (bf16 weight
 * matrices dotted with x rounded to bf16: a lower precision, by choice): prefill and steps
 * within its own stated bound, 1e-2 * max(1, max|ref|) (measured worst: 4.4e-3 relative,
 * qwen3_bf16), and no greedy check (reference margins go down to ~0.06, within this
 * precision's error). f32 fixtures compute exactly as on the f32 path there. Where the CPU
 * has AMX-BF16 that run takes the AMX tiles (cpu-amx-bf16), and a second one the vdpbf16ps set
 * (CINFER_CPU_AMX=0), both under the same bound.
 * On a CPU with AVX-512 VNNI each MLX fixture also runs with ci_model_opts.int16_act (4- / 8-bit
 * matrices dotted with x rounded to int16 per 32 columns): prefill and steps within 2e-3 *
 * max(1, max|ref|) (measured worst: 9.2e-4 relative, mlx_nemotron_h_4bit; the f32 path's
 * worst there is ~4e-6), and greedy ids exactly transformers'.
 * On a CPU with AVX2 or AVX-512 VNNI each MLX fixture also runs with ci_model_opts.mlx_amx (4- / 8-bit
 * matrices as amx_mlx.c computes them, codes exact, x rounded to int16 per 64 columns: on AMX-INT8
 * tiles where the CPU has them, else on AVX-512 VNNI, else on AVX2: mlx_avx2.c), and where it has the tiles a second
 * time with CINFER_CPU_MLX_TILES=0 (VNNI there too): the default bound, 1e-3 * max(1, max|ref|),
 * and greedy ids exactly transformers'.
 * Every fixture but DeepSeek's (MLX ones too) also runs with ci_model_opts.kv_f16 (the
 * attention cache in f16), with the best kernels and the scalar ones (KV16_TOL below).
 * Every run has CINFER_CPU_POISON_SCRATCH=1: the fused ops' scratch arguments (backend.h: xn,
 * u, tmp, rope_attend's q / k) are NaN after the op, as a device leaves them undefined, so a
 * forward path that reads one (deepseek_v32's indexer once read q_a's normed rows from a fused
 * op's scratch: right on the CPU, wrong on the H200) fails here. */
#include "check.h"
#include "cinfer.h"
#include "io/json.h"
#include "backend/backend.h"
#include "models/registry.h"
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --mlx-amx8 (ci_model_opts.mlx_amx 2: x rounded to int8 per 64 columns for 4-bit matrices): the
 * dense MLX fixtures within 5e-2 * max(1, max|ref|) of transformers (measured worst 3.2e-2,
 * mlx_lfm2_4bit; mlx_llama_4bit 1.8e-2), no greedy check. Not the MoE fixtures: their routers' near
 * ties flip at this rounding (0.4-1.3 of 3.5-4 in the logits; llama.cpp's Q8_0 activations do the
 * same), so no bound there says anything; the kernel's own formula is test_determinism's. */
#define ACT8_TOL 5e-2
/* kv_f16 (the attention cache in f16, --kv-f16; every fixture but DeepSeek's, with the best
 * kernels and the scalar ones): prefill and steps within the default bound, 1e-3 * max(1,
 * max|ref|) (measured worst 5.6e-4 relative, lfm2_moe_fused; the f32 cache's ~3e-6), and greedy
 * ids exactly transformers'. */
#define KV16_TOL 1e-3

/* whether the fixture's config names routed experts */
static int fixture_is_moe(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, "\"num_experts\"") || strstr(buf, "\"n_routed_experts\"") || strstr(buf, "\"num_local_experts\"");
}

/* whether the fixture's family takes an f16 attention cache (its registry entry's kv_f16: every
 * family with GQA attention layers, their MLX checkpoints too; not DeepSeek's) */
static int fixture_kv_f16(const char *dir) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *c = cj_load_file(path, err, sizeof err);
    const char *mt = c ? json_string_value(json_object_get(c, "model_type")) : NULL;
    const ci_family *f = mt ? reg_find(mt) : NULL;
    int ok = f && f->kv_f16;
    json_decref(c);
    return ok;
}

static int read_ints(const json_t *a, int **out) {
    size_t n = json_array_size(a);
    *out = malloc((n + 1) * sizeof **out);
    for (size_t i = 0; i < n; i++) (*out)[i] = (int)json_integer_value(json_array_get(a, i));
    return (int)n;
}

static float *read_f32(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *v = malloc(n * sizeof *v);
    size_t r = fread(v, sizeof *v, n, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (r != n || extra) { free(v); return NULL; }
    return v;
}

static int n_fixtures;
static char diffs[256];  /* "prefill 1.2e-06 step 1.3e-06" of the last fixture run */

static void one_fixture(const char *dir, int isa, int bf16_act, int int16_act, int mlx_amx, int kv_f16) {
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *ref = cj_load_file(path, err, sizeof err);
    CHECK(ref != NULL, "%s", err);
    if (!ref) return;
    int *toks, *gp, *gids;
    int T = read_ints(json_object_get(ref, "tokens"), &toks);
    int NP = read_ints(json_object_get(ref, "greedy_prompt"), &gp);
    int NG = read_ints(json_object_get(ref, "greedy_ids"), &gids);
    int gmax = (int)json_integer_value(json_object_get(ref, "greedy_max_new"));
    int V = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    double maxref = json_real_value(json_object_get(ref, "max_abs_ref"));
    double tol = (mlx_amx == 2 ? ACT8_TOL : bf16_act ? 1e-2 : int16_act ? 2e-3 : kv_f16 ? KV16_TOL : 1e-3) *
                 (maxref > 1 ? maxref : 1);
    snprintf(path, sizeof path, "%s/ref_logits.f32", dir);
    float *want = read_f32(path, (size_t)T * V);
    CHECK(want != NULL, "%s: missing or wrong size", path);

    ci_model_opts o = { .isa = isa, .bf16_act = bf16_act, .int16_act = int16_act, .mlx_amx = mlx_amx, .kv_f16 = kv_f16 };
    ci_model *m = NULL;
    ci_session *s = NULL;
    float *got = malloc((size_t)T * V * sizeof *got);
    if (want && ci_model_open(dir, &o, &m, err, sizeof err)) CHECK(0, "%s: %s", dir, err);
    if (m && ci_session_new(m, T + gmax, &s, err, sizeof err)) CHECK(0, "%s: %s", dir, err);
    if (s) {
        /* mode 0: one prefill; 1: one token at a time; 2: prefill of the first half, then
         * single steps (catches cache-position bugs between the two paths) */
        static const char *mode_name[3] = { "prefill", "step", "half+step" };
        for (int mode = 0; mode < 3; mode++) {
            ci_session_reset(s);
            int rc = 0, first = mode == 0 ? T : mode == 1 ? 0 : T / 2;
            if (first) rc = ci_forward(s, toks, first, got, 1, err, sizeof err);
            for (int t = first; t < T && !rc; t++) rc = ci_forward(s, &toks[t], 1, got + (size_t)t * V, 1, err, sizeof err);
            CHECK(rc == 0, "%s: %s", dir, err);
            double md = 0;
            int at = 0;
            for (size_t i = 0; i < (size_t)T * V; i++) {
                double dd = fabs((double)got[i] - want[i]);
                if (!(dd <= md)) { md = dd; at = (int)i; }
            }
            size_t dl = strlen(diffs);
            snprintf(diffs + dl, sizeof diffs - dl, "%s%s %.2g", dl ? " " : "", mode_name[mode], md);
            CHECK(md <= tol, "%s isa=%d %s: max|diff| %.3g > %.3g at token %d id %d (got %g want %g)", dir, isa,
                  mode_name[mode], md, tol, at / V, at % V, got[at], want[at]);
        }
        ci_session_reset(s);
        if (bf16_act || mlx_amx == 2) goto done;
        ci_sampler_opts so;
        ci_sampler_defaults(&so);
        int *out = malloc((size_t)(gmax + 1) * sizeof *out), n_out = 0;
        int rc = ci_generate(s, gp, NP, gmax, &so, out, &n_out, NULL, NULL, err, sizeof err);
        CHECK(rc == 0, "%s: %s", dir, err);
        int same = n_out == NG;
        for (int i = 0; same && i < NG; i++) same = out[i] == gids[i];
        CHECK(same, "%s isa=%d: greedy ids differ from transformers (got %d ids, want %d; first: %d vs %d)", dir, isa,
              n_out, NG, n_out ? out[0] : -1, NG ? gids[0] : -1);
        free(out);
    }
done:
    ci_session_free(s);
    ci_model_free(m);
    free(got); free(want); free(toks); free(gp); free(gids);
    json_decref(ref);
}

static void test_fixtures(void) {
    ci_backend *probe = ci_backend_cpu_new(1, CI_ISA_AVX512BF16);   /* NULL: no AVX512-BF16 here */
    int bf16_cpu = probe != NULL;
    if (probe) probe->free(probe);
    else printf("NOTE no AVX512-BF16 on this CPU: the bf16-act runs are skipped\n");
    ci_backend *probe8 = ci_backend_cpu_new(1, CI_ISA_AUTO);
    int int8_cpu = probe8 && ci_backend_cpu_int16_act(probe8);
    if (probe8) probe8->free(probe8);
    if (!int8_cpu) printf("NOTE no AVX-512 VNNI on this CPU: the int16-act runs are skipped\n");
    ci_backend *probe_amx = ci_backend_cpu_new(1, CI_ISA_AMXBF16);   /* NULL: no AMX-BF16 here */
    int amx_cpu = probe_amx != NULL;
    if (probe_amx) probe_amx->free(probe_amx);
    ci_backend *probe_mlx = ci_backend_cpu_new(1, CI_ISA_AUTO);
    const int amx_mlx = probe_mlx && ci_backend_cpu_amx_mlx(probe_mlx);   /* AVX-512 VNNI or AVX2 */
    const int mlx_tiles = amx_mlx && strstr(probe_mlx->name, "amx-mlx") != NULL;   /* and AMX-INT8 */
    if (probe_mlx) probe_mlx->free(probe_mlx);
    DIR *d = opendir("tests/fixtures");
    CHECK(d != NULL, "tests/fixtures not found (run from the repository root)");
    if (!d) return;
    char *names[256];
    int n = 0;
    struct dirent *e;
    const char *only = getenv("CINFER_FIXTURE");   /* debugging: fixtures whose name contains it */
    while ((e = readdir(d)) && n < 256)
        if (e->d_name[0] != '.' && (!only || strstr(e->d_name, only))) names[n++] = strdup(e->d_name);
    closedir(d);
    for (int i = 0; i < n; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "tests/fixtures/%s", names[i]);
        /* one PASS/FAIL line per fixture and ISA: auto, scalar, bf16-act where the CPU has it (on
         * AMX tiles where it has those, and then again on vdpbf16ps: CINFER_CPU_AMX=0), and
         * int16-act for the MLX fixtures where the CPU has it */
        static const char *const run_name[10] = { "auto", "scalar", "bf16-act", "int16-act", "bf16-act vdpbf16ps", "mlx-amx",
                                                  "mlx-amx vnni", "mlx-amx8", "kv-f16", "kv-f16 scalar" };
        for (int run = 0; run < 10; run++) {
            if (run >= 8 && !fixture_kv_f16(dir)) continue;
            if ((run == 2 && !bf16_cpu) || (run == 3 && (!int8_cpu || strncmp(names[i], "mlx_", 4))) ||
                (run == 4 && !amx_cpu) || (run == 5 && (!amx_mlx || strncmp(names[i], "mlx_", 4))) ||
                (run == 6 && (!mlx_tiles || strncmp(names[i], "mlx_", 4))) ||
                (run == 7 && (!amx_mlx || strncmp(names[i], "mlx_", 4) || fixture_is_moe(dir))))
                continue;
            check_case_failed = 0;
            check_why[0] = 0;
            diffs[0] = 0;
            if (run == 4) setenv("CINFER_CPU_AMX", "0", 1);
            if (run == 6) setenv("CINFER_CPU_MLX_TILES", "0", 1);
            one_fixture(dir, run == 1 || run == 9 ? 1 /* scalar */ : 0 /* auto */, run == 2 || run == 4, run == 3,
                        run == 7 ? 2 : run >= 5 && run <= 6, run >= 8);
            if (run == 4) unsetenv("CINFER_CPU_AMX");
            if (run == 6) unsetenv("CINFER_CPU_MLX_TILES");
            if (check_case_failed) { printf("FAIL parity %s %s: %s\n", names[i], run_name[run], check_why); check_any_failed = 1; }
            else printf("PASS parity %s %s (max|diff| %s)\n", names[i], run_name[run], diffs);
            n_fixtures++;
        }
        free(names[i]);
    }
    check_case_failed = 0;
}

static void test_found_fixtures(void) {
    CHECK(n_fixtures >= 12 || getenv("CINFER_FIXTURE"), "only %d fixture runs", n_fixtures);
}

int main(void) {
    /* the CPU fills the fused ops' scratch outputs with NaN (cpu.c poison): a model that reads
     * one afterwards, which a device leaves unwritten, fails here as it would on the device */
    setenv("CINFER_CPU_POISON_SCRATCH", "1", 1);
    test_fixtures();
    TEST_RUN(test_found_fixtures);
    TEST_EXIT();
}
