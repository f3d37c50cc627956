// ATTN: causal attention of f32 queries over an f32/f16/bf16 KV cache, one pass with an online
// softmax.
//
//   q   {hd, H, T} f32          out {hd, H, T} f32
//   K,V {hd, Hkv, C}            query (t, h) reads kv head h / (H / Hkv), keys j in [j0, pos[t]],
//                               j0 = 0, or pos[t] - window + 1 when window > 0
//   s_j = scale * q.k_j, then cap * tanh(s_j / cap) when softcap != 0; out = softmax(s) . V
//
// Work items are (token, kv head, chunk of the query heads sharing it): each K/V row is loaded
// once per item and used for every query head of the chunk (GQA reuse). The heads are split into
// chunks only when there are fewer items than threads (decode with few kv heads). Keys go in
// blocks of 64: the block's scores are computed, the running max/sum and accumulators of each
// head are rescaled once per block, and then V is accumulated, so K and V each stream once.
#include "cpu-common.h"
#include "cpu-convert.h"
#include "cpu-ops.h"

#include <limits>

namespace ggx_cpu {

static const int64_t k_block = 64;

size_t attn_scratch_floats(const ggx_tensor * t) {
    const int64_t hd = t->src[0]->ne[0];
    const int64_t G = t->src[0]->ne[1] / t->src[1]->ne[1];
    return (size_t)(2 * k_block * hd + G * k_block + G * hd + 2 * G);
}

namespace {

float dot(const float * a, const float * b, int64_t n) {
    int64_t i = 0;
    float s = 0.0f;
#ifdef GGX_CPU_AVX2
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    s = hsum(_mm256_add_ps(a0, a1));
#endif
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

// acc[0..n) += sum_j w[j] * v[j][0..n) over nv rows.
void accumulate(float * acc, const float * w, const float * const * v, int64_t nv, int64_t n) {
    int64_t d = 0;
#ifdef GGX_CPU_AVX2
    for (; d + 32 <= n; d += 32) {
        __m256 a[4];
        for (int u = 0; u < 4; u++) a[u] = _mm256_loadu_ps(acc + d + 8 * u);
        for (int64_t j = 0; j < nv; j++) {
            const __m256 wj = _mm256_set1_ps(w[j]);
            for (int u = 0; u < 4; u++) a[u] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v[j] + d + 8 * u), a[u]);
        }
        for (int u = 0; u < 4; u++) _mm256_storeu_ps(acc + d + 8 * u, a[u]);
    }
    for (; d + 8 <= n; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        for (int64_t j = 0; j < nv; j++) a = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(v[j] + d), a);
        _mm256_storeu_ps(acc + d, a);
    }
#endif
    for (; d < n; d++) {
        float a = acc[d];
        for (int64_t j = 0; j < nv; j++) a += w[j] * v[j][d];
        acc[d] = a;
    }
}

void exp_shifted(float * s, int64_t n, float m) {
#ifdef GGX_CPU_AVX2
    const __m256 mv = _mm256_set1_ps(m);
    map8(s, s, n, [&](__m256 v) { return exp8(_mm256_sub_ps(v, mv)); });
#else
    for (int64_t j = 0; j < n; j++) s[j] = std::exp(s[j] - m);
#endif
}

void softcap_inplace(float * s, int64_t n, float cap) {
    const float inv = 1.0f / cap;
#ifdef GGX_CPU_AVX2
    const __m256 cv = _mm256_set1_ps(cap), iv = _mm256_set1_ps(inv);
    map8(s, s, n, [&](__m256 v) { return _mm256_mul_ps(cv, tanh8(_mm256_mul_ps(v, iv))); });
#else
    for (int64_t j = 0; j < n; j++) s[j] = cap * tanh1(s[j] * inv);
#endif
}

struct attn_args {
    const ggx_tensor * q, * k, * v;
    ggx_tensor * out;
    int64_t hd, G, n_slots;
    float scale, softcap;
    int32_t window;
};

// Rows [jb, jb + n) of cache c for kv head hk as f32 row pointers (converted into buf if needed).
void cache_rows(const ggx_tensor * c, int64_t hk, int64_t jb, int64_t n, int64_t hd, float * buf, const float ** rows) {
    for (int64_t j = 0; j < n; j++) {
        const char * src = (const char *)c->data + (size_t)hk * c->nb[1] + (size_t)(jb + j) * c->nb[2];
        if (c->type == GGX_TYPE_F32) {
            rows[j] = (const float *)src;
        } else {
            to_f32(c->type, src, buf + j * hd, hd);
            rows[j] = buf + j * hd;
        }
    }
}

void attend(const params & p, const attn_args & a, int64_t t, int64_t hk, int64_t g0, int64_t g1, int32_t P) {
    const int64_t hd = a.hd, ng = g1 - g0;
    float * kbuf = p.scratch;
    float * vbuf = kbuf + k_block * hd;
    float * s = vbuf + k_block * hd;    // [ng][k_block]
    float * acc = s + a.G * k_block;    // [ng][hd]
    float * m = acc + a.G * hd;         // [ng]
    float * l = m + a.G;                // [ng]
    const float * rows[k_block];
    const int64_t h0 = hk * a.G + g0;
    for (int64_t g = 0; g < ng; g++) {
        m[g] = -std::numeric_limits<float>::infinity();
        l[g] = 0.0f;
        memset(acc + g * hd, 0, (size_t)hd * sizeof(float));
    }
    const int64_t j0 = a.window > 0 ? std::max<int64_t>(0, (int64_t)P - a.window + 1) : 0, j1 = (int64_t)P + 1;
    for (int64_t jb = j0; jb < j1; jb += k_block) {
        const int64_t n = std::min(k_block, j1 - jb);
        cache_rows(a.k, hk, jb, n, hd, kbuf, rows);
        for (int64_t g = 0; g < ng; g++) {
            const float * qv = (const float *)((const char *)a.q->data + (size_t)(h0 + g) * a.q->nb[1] + (size_t)t * a.q->nb[2]);
            float * sg = s + g * k_block;
            for (int64_t j = 0; j < n; j++) sg[j] = dot(qv, rows[j], hd) * a.scale;
            if (a.softcap != 0.0f) softcap_inplace(sg, n, a.softcap);
            float bm = sg[0];
            for (int64_t j = 1; j < n; j++) bm = std::max(bm, sg[j]);
            const float mn = std::max(m[g], bm);
            if (mn > m[g]) {
                const float corr = std::exp(m[g] - mn);   // 0 on the first block
                l[g] *= corr;
                for (int64_t d = 0; d < hd; d++) acc[g * hd + d] *= corr;
                m[g] = mn;
            }
            exp_shifted(sg, n, mn);
            for (int64_t j = 0; j < n; j++) l[g] += sg[j];
        }
        cache_rows(a.v, hk, jb, n, hd, vbuf, rows);
        for (int64_t g = 0; g < ng; g++) accumulate(acc + g * hd, s + g * k_block, rows, n, hd);
    }
    for (int64_t g = 0; g < ng; g++) {
        float * o = (float *)((char *)a.out->data + (size_t)(h0 + g) * a.out->nb[1] + (size_t)t * a.out->nb[2]);
        const float inv = 1.0f / l[g];
        for (int64_t d = 0; d < hd; d++) o[d] = acc[g * hd + d] * inv;
    }
}

}  // namespace

void op_attn(const params & p, ggx_tensor * dst) {
    attn_args a;
    a.q = dst->src[0];
    a.k = dst->src[1];
    a.v = dst->src[2];
    a.out = dst;
    a.hd = a.q->ne[0];
    const int64_t H = a.q->ne[1], T = a.q->ne[2], Hkv = a.k->ne[1];
    a.G = H / Hkv;
    a.n_slots = a.k->ne[2];
    a.scale = dst->params.attn.scale;
    a.softcap = dst->params.attn.softcap;
    a.window = dst->params.attn.window;
    const int32_t * pos = (const int32_t *)dst->src[3]->data;

    // Split the query heads of a kv head only as far as needed to give every thread an item.
    int64_t n_split = 1;
    while (T * Hkv * n_split < p.nth && n_split < a.G) n_split++;
    const int64_t per = (a.G + n_split - 1) / n_split;
    const int64_t n_items = T * Hkv * n_split;
    for (int64_t it = p.ith; it < n_items; it += p.nth) {   // interleaved: causal rows differ in cost
        const int64_t t = it / (Hkv * n_split), rem = it % (Hkv * n_split);
        const int64_t hk = rem / n_split, g0 = (rem % n_split) * per, g1 = std::min(a.G, g0 + per);
        if (g0 >= g1) continue;
        const int32_t P = dst->params.attn.non_causal ? pos[T - 1] : pos[t];
        if (P < 0 || P >= a.n_slots) {
            report_error(p, "attn '%s': position %d of token %lld is outside the cache of %lld slots", dst->name, P,
                         (long long)t, (long long)a.n_slots);
            for (int64_t h = hk * a.G + g0; h < hk * a.G + g1; h++)
                memset((char *)dst->data + (size_t)h * dst->nb[1] + (size_t)t * dst->nb[2], 0, (size_t)a.hd * sizeof(float));
            continue;
        }
        attend(p, a, t, hk, g0, g1, P);
    }
}

}  // namespace ggx_cpu
