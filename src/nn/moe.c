/* moe.c — see moe.h. */
#include "moe.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int moe_scratch_init(moe_scratch *s, const moe_block *m, int max_n) {
    memset(s, 0, sizeof *s);
    s->max_n = max_n;
    size_t nk = (size_t)max_n * m->top_k;
    s->logits = malloc((size_t)max_n * m->n_experts * sizeof(float));
    s->sel = malloc(nk * sizeof(int));
    s->w = malloc(nk * sizeof(float));
    s->count = malloc((size_t)(m->n_experts + 1) * sizeof(int));
    s->offset = malloc((size_t)(m->n_experts + 1) * sizeof(int));
    s->tok = malloc(nk * sizeof(int));
    s->tw = malloc(nk * sizeof(float));
    int width = m->latent > m->hidden ? m->latent : m->hidden;   /* expert input / output rows */
    s->xe = malloc((size_t)max_n * width * sizeof(float));
    int wide = m->shared_inter > m->inter ? m->shared_inter : m->inter;
    s->g = malloc((size_t)max_n * wide * sizeof(float));
    s->u = malloc((size_t)max_n * wide * sizeof(float));
    s->sg = malloc((size_t)max_n * sizeof(float));
    s->ye = malloc((size_t)max_n * width * sizeof(float));
    if (m->latent > 0) {
        s->xl = malloc((size_t)max_n * m->latent * sizeof(float));
        s->acc = malloc((size_t)max_n * m->latent * sizeof(float));
        if (!s->xl || !s->acc) { moe_scratch_free(s); return -1; }
    }
    if (!s->logits || !s->sel || !s->w || !s->count || !s->offset || !s->tok || !s->tw || !s->xe || !s->g || !s->u || !s->ye || !s->sg) {
        moe_scratch_free(s);
        return -1;
    }
    return 0;
}

void moe_scratch_free(moe_scratch *s) {
    free(s->logits); free(s->sel); free(s->w); free(s->count); free(s->offset);
    free(s->tok); free(s->tw); free(s->xe); free(s->g); free(s->u); free(s->ye); free(s->sg);
    free(s->xl); free(s->acc);
    memset(s, 0, sizeof *s);
}

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

static void route_softmax(const moe_block *m, const float *lg, int *sel, float *w) {
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

static void route_sigmoid(const moe_block *m, const float *lg, int *sel, float *w, int id) {
    const int E = m->n_experts, K = m->top_k, G = m->n_group > 0 ? m->n_group : 1;
    float s[E], choice[E];
    for (int e = 0; e < E; e++) {
        s[e] = m->router == MOE_SQRTSOFTPLUS ? sqrt_softplus(lg[e]) : 1.0f / (1.0f + expf(-lg[e]));
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

void moe_route(ci_backend *be, const moe_block *m, moe_scratch *s, const float *x, int n) {
    be->matmul(be, s->logits, x, n, &m->gate);             /* [n, E] */
    for (int t = 0; t < n; t++) {
        const float *lg = s->logits + (size_t)t * m->n_experts;
        int *sel = s->sel + (size_t)t * m->top_k;
        float *w = s->w + (size_t)t * m->top_k;
        if (m->router == MOE_SOFTMAX) route_softmax(m, lg, sel, w);
        else route_sigmoid(m, lg, sel, w, s->ids ? s->ids[t] : 0);
    }
}

/* DeepSeek V4's clamped SwiGLU inputs: g <= L, -L <= u <= L (then silu(g) · u as usual) */
static void clamp_gu(float *g, float *u, int64_t count, float L) {
    for (int64_t i = 0; i < count; i++) {
        if (g[i] > L) g[i] = L;
        u[i] = u[i] > L ? L : u[i] < -L ? -L : u[i];
    }
}

/* g[i] = relu(g[i])² (MOE_ACT_RELU2) */
static void relu2(float *g, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float v = g[i] > 0.0f ? g[i] : 0.0f;
        g[i] = v * v;
    }
}

void moe_forward(ci_backend *be, const moe_block *m, moe_scratch *s, float *out, const float *x, int n) {
    const int E = m->n_experts, K = m->top_k, H = m->hidden, I = m->inter;
    moe_route(be, m, s, x, n);
    /* the experts' input and the routed sum: x and out, or their latent-space stand-ins */
    const int X = m->latent > 0 ? m->latent : H;
    const float *xin = x;
    float *acc = out;
    if (m->latent > 0) {
        be->matmul(be, s->xl, x, n, &m->fc1_latent);       /* [n, latent] */
        xin = s->xl;
        acc = s->acc;
    }
    /* group the (token, slot) entries by expert: counting sort */
    memset(s->count, 0, (size_t)(E + 1) * sizeof(int));
    for (int i = 0; i < n * K; i++) s->count[s->sel[i]]++;
    s->offset[0] = 0;
    for (int e = 0; e < E; e++) s->offset[e + 1] = s->offset[e] + s->count[e];
    memset(s->count, 0, (size_t)E * sizeof(int));
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++) {
            int e = s->sel[t * K + k], at = s->offset[e] + s->count[e]++;
            s->tok[at] = t;
            s->tw[at] = s->w[t * K + k];
        }
    memset(acc, 0, (size_t)n * X * sizeof(float));
    for (int e = 0; e < E; e++) {
        int m_e = s->offset[e + 1] - s->offset[e];
        if (!m_e) continue;
        const int *tk = s->tok + s->offset[e];
        const float *tw = s->tw + s->offset[e];
        for (int i = 0; i < m_e; i++) memcpy(s->xe + (size_t)i * X, xin + (size_t)tk[i] * X, (size_t)X * sizeof(float));
        if (m->act == MOE_ACT_RELU2) {
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
            float *o = acc + (size_t)tk[i] * X;
            const float *y = s->ye + (size_t)i * X;
            for (int h = 0; h < X; h++) o[h] += tw[i] * y[h];
        }
    }
    if (m->latent > 0) be->matmul(be, out, s->acc, n, &m->fc2_latent);   /* [n, H] */
    if (m->shared_inter > 0) {
        const int SI = m->shared_inter;
        if (m->act == MOE_ACT_RELU2) {
            be->matmul(be, s->g, x, n, &m->sh_up);           /* [n, SI] */
            relu2(s->g, (int64_t)n * SI);
        } else {
            be->matmul(be, s->g, x, n, &m->sh_gate);         /* [n, SI] */
            be->matmul(be, s->u, x, n, &m->sh_up);
            if (m->act_limit > 0) clamp_gu(s->g, s->u, (int64_t)n * SI, m->act_limit);
            be->swiglu(be, s->g, s->u, (int64_t)n * SI);
        }
        be->matmul(be, s->ye, s->g, n, &m->sh_down);         /* [n, H] */
        if (m->sh_router.rows) be->matmul(be, s->sg, x, n, &m->sh_router);
        for (int t = 0; t < n; t++) {
            float gw = m->sh_router.rows ? 1.0f / (1.0f + expf(-s->sg[t])) : 1.0f;
            float *o = out + (size_t)t * H;
            const float *y = s->ye + (size_t)t * H;
            for (int h = 0; h < H; h++) o[h] += gw * y[h];
        }
    }
}
