/* moe_cpu.c — the CPU backend's MoE ops (backend.h: moe_route, moe_experts), in host memory.
 *
 * Routing is a loop per token (a few hundred experts at most); the experts group the
 * (token, slot) entries by expert with a counting sort and run each active expert as one
 * batched matmul over its tokens through the backend's own matmul / swiglu, adding into the
 * output in expert order. A decode step (at most CPU_TILE_T tokens), and a prefill on an int16
 * backend (as_step), hands all active experts' gate and up matmuls to the pool at once, then
 * all their downs (cpu_matmul_batch): the same products, two pool passes instead of three per
 * expert. Scratch grows on demand and lives
 * with the backend. */
#include "cpu_kernels.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Indices of the k largest values of v[0..n) into out (ties: lower index first, as a
 * stable descending sort would give). k is small: selection by repeated scan. */
static void topk(const float *v, int n, int k, int *out) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= out[q] == i;
            if (taken) continue;
            if (best < 0 || v[i] > v[best]) best = i;
        }
        out[j] = best;
    }
}

static void route_softmax(const ci_moe *m, const float *lg, int *sel, float *w) {
    const int E = m->n_experts, K = m->top_k;
    float mx = lg[0];
    for (int e = 1; e < E; e++) if (lg[e] > mx) mx = lg[e];
    double sum = 0;
    float p[E];
    for (int e = 0; e < E; e++) { p[e] = expf(lg[e] - mx); sum += p[e]; }
    for (int e = 0; e < E; e++) p[e] = (float)(p[e] / sum);
    topk(p, E, K, sel);
    double s = 0;
    for (int k = 0; k < K; k++) { w[k] = p[sel[k]]; s += w[k]; }
    if (m->norm_topk_prob)
        for (int k = 0; k < K; k++) w[k] = (float)(w[k] / s);
    for (int k = 0; k < K; k++) w[k] *= m->routed_scaling;
}

/* sqrt(softplus(x)); softplus as torch computes it (x itself above 20) */
static float sqrt_softplus(float x) { return sqrtf(x > 20.0f ? x : log1pf(expf(x))); }

static void route_sigmoid(const ci_moe *m, const float *lg, int *sel, float *w, int id) {
    const int E = m->n_experts, K = m->top_k, G = m->n_group > 0 ? m->n_group : 1;
    float s[E], choice[E];
    for (int e = 0; e < E; e++) {
        s[e] = m->router == CI_ROUTE_SQRTSOFTPLUS ? sqrt_softplus(lg[e]) : 1.0f / (1.0f + expf(-lg[e]));
        choice[e] = s[e] + (m->bias ? m->bias[e] : 0.0f);
    }
    if (m->hash_ids) {   /* the experts are fixed by the token id; only the weights are learned */
        for (int k = 0; k < K; k++) sel[k] = m->hash_ids[(size_t)id * K + k];
        goto weights;
    }
    if (G > 1) {
        const int per = E / G;
        float gs[G];
        for (int g = 0; g < G; g++) {       /* group score: sum of its two best choices */
            int two[2];
            topk(choice + g * per, per, per >= 2 ? 2 : 1, two);
            gs[g] = choice[g * per + two[0]] + (per >= 2 ? choice[g * per + two[1]] : 0.0f);
        }
        int keep[G];
        topk(gs, G, m->topk_group, keep);
        for (int g = 0; g < G; g++) {
            int kept = 0;
            for (int q = 0; q < m->topk_group; q++) kept |= keep[q] == g;
            if (!kept)
                for (int i = 0; i < per; i++) choice[g * per + i] = -INFINITY;
        }
    }
    topk(choice, E, K, sel);
weights:;
    double sum = 0;
    for (int k = 0; k < K; k++) { w[k] = s[sel[k]]; sum += w[k]; }
    if (m->norm_topk_prob) {
        double eps = m->norm_eps > 0 ? (double)m->norm_eps : 1e-20;
        for (int k = 0; k < K; k++) w[k] = (float)(w[k] / (sum + eps));
    }
    for (int k = 0; k < K; k++) w[k] *= m->routed_scaling;
}

void cpu_moe_route(ci_backend *be, int32_t *sel, float *w, const float *logits, const int32_t *ids, int n,
                   const ci_moe *m) {
    CI_FP_FLUSH_SCOPE();
    (void)be;
    const int K = m->top_k;
    for (int t = 0; t < n; t++) {
        const float *lg = logits + (size_t)t * m->n_experts;
        int s[K];
        if (m->router == CI_ROUTE_SOFTMAX) route_softmax(m, lg, s, w + (size_t)t * K);
        else route_sigmoid(m, lg, s, w + (size_t)t * K, ids ? ids[t] : 0);
        for (int k = 0; k < K; k++) sel[(size_t)t * K + k] = s[k];
    }
}

/* DeepSeek V4's clamped SwiGLU inputs: g <= L, -L <= u <= L (then silu(g) · u as usual) */
static void clamp_gu(float *g, float *u, int64_t count, float L) {
    for (int64_t i = 0; i < count; i++) {
        if (g[i] > L) g[i] = L;
        u[i] = u[i] > L ? L : u[i] < -L ? -L : u[i];
    }
}

/* g[i] = relu(g[i])² */
static void relu2(float *g, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float v = g[i] > 0.0f ? g[i] : 0.0f;
        g[i] = v * v;
    }
}

/* grow-only scratch of one backend (moe_experts runs on the caller's thread) */
typedef struct {
    size_t cap_e, cap_nk, cap_act, cap_in;     /* elements each array of the class holds */
    int *count, *offset, *tok;                 /* [E + 1], [E + 1], [n·K] */
    float *tw, *xe, *g, *u, *ye, *res;         /* [n·K], [r, hidden], [r, inter] x2, [r, hidden] x2, where
                                                * r = n, or n·K for a decode step (every entry's rows at once) */
} moe_tmp;

void cpu_moe_tmp_free(void *tmp) {
    moe_tmp *s = tmp;
    if (!s) return;
    free(s->count); free(s->offset); free(s->tok); free(s->tw); free(s->xe); free(s->g); free(s->u); free(s->ye); free(s->res);
    free(s);
}

/* reallocs every array in ps to want elements of elem bytes when cap < want */
static int grow(size_t *cap, size_t want, size_t elem, void **ps[], int count) {
    if (*cap >= want) return 0;
    for (int i = 0; i < count; i++) {
        void *q = realloc(*ps[i], want * elem);
        if (!q) return -1;
        *ps[i] = q;
    }
    *cap = want;
    return 0;
}

/* Whether the experts of an n-token call run as a decode step's (experts_decode: every active
 * expert's gate and up in one pool pass, then every down): a decode step, and a prefill on an
 * int16 backend, whose matmuls are row items for any token count (cpu_i16_takes), up to
 * MOE_BATCH_BYTES of hidden-width rows (n·K of them) a scratch array. The products and the
 * order of the sums are those of the expert-by-expert loop, so the bits are too. */
#define MOE_BATCH_BYTES ((size_t)16 << 20)
static int as_step(ci_backend *be, const ci_moe *m, int n) {
    if (n <= CPU_TILE_T) return 1;
    const int e0 = m->e_hi > 0 ? m->e_lo : 0;   /* a held expert's views */
    return (size_t)n * (size_t)m->top_k * (size_t)m->hidden * sizeof(float) <= MOE_BATCH_BYTES &&
           cpu_i16_takes(be, &m->w_up[e0]) && cpu_i16_takes(be, &m->w_down[e0]);
}

static moe_tmp *moe_tmp_get(void **slot, const ci_moe *m, int n, int step) {
    const size_t r = step ? (size_t)n * m->top_k : (size_t)n;
    moe_tmp *s = *slot;
    if (!s && !(s = *slot = calloc(1, sizeof *s))) return NULL;
    void **e[] = { (void **)&s->count, (void **)&s->offset }, **nk[] = { (void **)&s->tok, (void **)&s->tw };
    void **act[] = { (void **)&s->g, (void **)&s->u }, **in[] = { (void **)&s->xe, (void **)&s->ye, (void **)&s->res };
    if (grow(&s->cap_e, (size_t)m->n_experts + 1, sizeof(int), e, 2) ||
        grow(&s->cap_nk, (size_t)n * m->top_k, sizeof(int) > sizeof(float) ? sizeof(int) : sizeof(float), nk, 2) ||
        grow(&s->cap_act, r * m->inter, sizeof(float), act, 2) ||
        grow(&s->cap_in, r * m->hidden, sizeof(float), in, 3))
        return NULL;
    return s;
}

enum { MAXJ = 128 };   /* jobs handed over at once: every active expert of a step when NK <= 64 */

/* Makes room for `need` more jobs (an expert's gate and up stay in one batch, sharing x's
 * preparation): runs the batch collected so far when they would not fit. */
static void jobs_room(ci_backend *be, cpu_mm_job *jobs, int *nj, int need) {
    if (*nj + need <= MAXJ) return;
    cpu_matmul_batch(be, jobs, *nj);
    *nj = 0;
}

/* The experts of a decode step, entries grouped by expert in s (offset, tok, tw): entry i's
 * rows of xe / g / u / ye are row i, so every active expert's matmuls go in one batch. */
static void experts_decode(ci_backend *be, moe_tmp *s, float *out, const float *x, int n, const ci_moe *m) {
    const int E = m->n_experts, X = m->hidden, I = m->inter, NK = s->offset[E];   /* the entries held here */
    cpu_mm_job jobs[MAXJ];
    int nj = 0;
    if (n > 1)   /* one token reads x itself */
        for (int i = 0; i < NK; i++) memcpy(s->xe + (size_t)i * X, x + (size_t)s->tok[i] * X, (size_t)X * sizeof(float));
    for (int e = 0; e < E; e++) {
        int o = s->offset[e], m_e = s->offset[e + 1] - o;
        if (!m_e) continue;
        jobs_room(be, jobs, &nj, 2);
        /* one token: x itself, so the batch prepares it once for every expert */
        const float *xe = n == 1 ? x : s->xe + (size_t)o * X;
        if (m->relu2) {
            jobs[nj++] = (cpu_mm_job){ s->g + (size_t)o * I, xe, m_e, &m->w_up[e] };
        } else {
            jobs[nj++] = (cpu_mm_job){ s->g + (size_t)o * I, xe, m_e, &m->w_gate[e] };
            jobs[nj++] = (cpu_mm_job){ s->u + (size_t)o * I, xe, m_e, &m->w_up[e] };
        }
    }
    cpu_matmul_batch(be, jobs, nj);
    if (m->relu2) {
        relu2(s->g, (int64_t)NK * I);
    } else {
        if (m->act_limit > 0) clamp_gu(s->g, s->u, (int64_t)NK * I, m->act_limit);
        be->swiglu(be, s->g, s->u, (int64_t)NK * I);
    }
    nj = 0;
    for (int e = 0; e < E; e++) {
        int o = s->offset[e], m_e = s->offset[e + 1] - o;
        if (!m_e) continue;
        jobs_room(be, jobs, &nj, 1);
        jobs[nj++] = (cpu_mm_job){ s->ye + (size_t)o * X, s->g + (size_t)o * I, m_e, &m->w_down[e] };
    }
    cpu_matmul_batch(be, jobs, nj);
    for (int i = 0; i < NK; i++) {   /* expert order, then token order: as the loop below */
        float *o = out + (size_t)s->tok[i] * X;
        const float *y = s->ye + (size_t)i * X;
        for (int h = 0; h < X; h++) o[h] += s->tw[i] * y[h];
    }
}

/* out[n, X] (+)= Σ_k w[t, k] · expert(x[t]); tmp_slot: the backend's scratch pointer */
int cpu_moe_experts_run(ci_backend *be, void **tmp_slot, float *dst, const float *x, int n, const int32_t *sel,
                        const float *w, const ci_moe *m, int acc) {
    const int E = m->n_experts, K = m->top_k, X = m->hidden, I = m->inter;
    const int step = as_step(be, m, n);
    moe_tmp *s = moe_tmp_get(tmp_slot, m, n, step);
    if (!s) return -1;
    float *out = acc ? s->res : dst;   /* acc: the sum is finished apart, then added */
    /* group the (token, slot) entries by expert: counting sort; expert parallel, only the
     * entries of the experts held here */
    const int lo = m->e_hi > 0 ? m->e_lo : 0, hi = m->e_hi > 0 ? m->e_hi : E;
    memset(s->count, 0, (size_t)(E + 1) * sizeof(int));
    for (int i = 0; i < n * K; i++) s->count[sel[i]] += sel[i] >= lo && sel[i] < hi;
    s->offset[0] = 0;
    for (int e = 0; e < E; e++) s->offset[e + 1] = s->offset[e] + s->count[e];
    memset(s->count, 0, (size_t)E * sizeof(int));
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++) {
            int e = sel[t * K + k];
            if (e < lo || e >= hi) continue;
            int at = s->offset[e] + s->count[e]++;
            s->tok[at] = t;
            s->tw[at] = w[t * K + k];
        }
    memset(out, 0, (size_t)n * X * sizeof(float));
    if (step) {
        experts_decode(be, s, out, x, n, m);
        if (acc) be->add(be, dst, out, (int64_t)n * X);
        return 0;   /* a matmul that failed has set the status itself */
    }
    for (int e = 0; e < E; e++) {
        int m_e = s->offset[e + 1] - s->offset[e];
        if (!m_e) continue;
        const int *tk = s->tok + s->offset[e];
        const float *tw = s->tw + s->offset[e];
        for (int i = 0; i < m_e; i++) memcpy(s->xe + (size_t)i * X, x + (size_t)tk[i] * X, (size_t)X * sizeof(float));
        if (m->relu2) {
            be->matmul(be, s->g, s->xe, m_e, &m->w_up[e]);  /* [m_e, I] */
            relu2(s->g, (int64_t)m_e * I);
        } else {
            be->matmul(be, s->g, s->xe, m_e, &m->w_gate[e]);    /* [m_e, I] */
            be->matmul(be, s->u, s->xe, m_e, &m->w_up[e]);
            if (m->act_limit > 0) clamp_gu(s->g, s->u, (int64_t)m_e * I, m->act_limit);
            be->swiglu(be, s->g, s->u, (int64_t)m_e * I);
        }
        be->matmul(be, s->ye, s->g, m_e, &m->w_down[e]);    /* [m_e, X] */
        for (int i = 0; i < m_e; i++) {
            float *o = out + (size_t)tk[i] * X;
            const float *y = s->ye + (size_t)i * X;
            for (int h = 0; h < X; h++) o[h] += tw[i] * y[h];
        }
    }
    if (acc) be->add(be, dst, out, (int64_t)n * X);
    return 0;
}
