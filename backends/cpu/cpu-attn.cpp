// ATTN: causal attention of f32 queries over an f32/f16/bf16 KV cache, one pass with an online
// softmax.
//
//   q   {hd, H, T} f32          out {hd, H, T} f32
//   K,V {hd, Hkv, C}            query (t, h) reads kv head h / (H / Hkv), keys j in [j0, P],
//                               P = pos[t] (pos[T-1] for every t when non_causal),
//                               j0 = 0, or P - window + 1 when window > 0
//   s_j = scale * q.k_j, then cap * tanh(s_j / cap) when softcap != 0; out = softmax(s) . V
//
// Work items are (token, kv head, chunk of the query heads sharing it). The heads are split into
// chunks only when there are fewer items than threads (decode with few kv heads). Keys go in
// blocks of 64: scores of the block for all heads of the item, one rescale of each head's running
// max/sum/accumulator, then the V accumulation. K and V are read in their storage type (8 values
// converted per load) and each loaded vector serves every head of a group of up to 8 (GQA reuse),
// so K and V stream once per item with no conversion buffer.
#include "cpu-common.h"
#include "cpu-ops.h"

#include <limits>

namespace ggx_cpu {

static const int64_t k_block = 64;

size_t attn_scratch_floats(const ggx_tensor * t) {
    const int64_t hd = t->src[0]->ne[0];
    const int64_t G = t->src[0]->ne[1] / t->src[1]->ne[1];
    return (size_t)(G * k_block + G * hd + 2 * G);
}

namespace {

struct attn_args {
    const ggx_tensor * q, * k, * v;
    ggx_tensor * out;
    int64_t hd, G, n_slots;
    float scale, softcap;
    int32_t window;
};

// s[g * k_block + j] = scale * q[g] . k_j for j < n, NG heads at once. Register budget: NG * NK
// accumulators (NK keys per step keep enough FMA chains in flight when NG is small).
template <typename CT, int NG>
void scores(const float * const * q, const char * kbase, size_t kstride, int64_t n, int64_t hd, float scale, float * s) {
    constexpr int NK = NG >= 8 ? 1 : NG >= 4 ? 2 : 4;
    int64_t j = 0;
    for (; j < n; j += NK) {
        const int nk = (int)std::min<int64_t>(NK, n - j);
        const CT * k[NK];
        GGX_UNROLL for (int u = 0; u < NK; u++) k[u] = (const CT *)(kbase + (size_t)(j + std::min(u, nk - 1)) * kstride);
        float sum[NK][NG];
        int64_t d = 0;
#ifdef GGX_CPU_AVX2
        __m256 acc[NK][NG];
        GGX_UNROLL for (int u = 0; u < NK; u++)
            GGX_UNROLL for (int g = 0; g < NG; g++) acc[u][g] = _mm256_setzero_ps();
        for (; d + 8 <= hd; d += 8) {
            GGX_UNROLL for (int u = 0; u < NK; u++) {
                const __m256 kv = load8(k[u] + d);
                GGX_UNROLL for (int g = 0; g < NG; g++) acc[u][g] = _mm256_fmadd_ps(_mm256_loadu_ps(q[g] + d), kv, acc[u][g]);
            }
        }
        GGX_UNROLL for (int u = 0; u < NK; u++)
            GGX_UNROLL for (int g = 0; g < NG; g++) sum[u][g] = hsum(acc[u][g]);
#else
        GGX_UNROLL for (int u = 0; u < NK; u++)
            GGX_UNROLL for (int g = 0; g < NG; g++) sum[u][g] = 0.0f;
#endif
        for (; d < hd; d++)
            GGX_UNROLL for (int u = 0; u < NK; u++) {
                const float kv = elem<CT>::load(k[u] + d);
                GGX_UNROLL for (int g = 0; g < NG; g++) sum[u][g] += q[g][d] * kv;
            }
        for (int u = 0; u < nk; u++)
            GGX_UNROLL for (int g = 0; g < NG; g++) s[g * k_block + j + u] = sum[u][g] * scale;
    }
}

// acc[g][0..hd) += sum_j w[g * k_block + j] * v_j for j < n, NG heads at once, ND 8-wide column
// chunks per pass over the block's rows (NG * ND accumulators).
template <typename CT, int NG>
void accumulate(float * const * acc, const float * w, const char * vbase, size_t vstride, int64_t n, int64_t hd) {
    int64_t d = 0;
#ifdef GGX_CPU_AVX2
    constexpr int ND = NG >= 8 ? 1 : NG >= 4 ? 2 : 4;
    for (; d + 8 * ND <= hd; d += 8 * ND) {
        __m256 a[NG][ND];
        GGX_UNROLL for (int g = 0; g < NG; g++)
            GGX_UNROLL for (int c = 0; c < ND; c++) a[g][c] = _mm256_loadu_ps(acc[g] + d + 8 * c);
        for (int64_t j = 0; j < n; j++) {
            const CT * v = (const CT *)(vbase + (size_t)j * vstride) + d;
            GGX_UNROLL for (int c = 0; c < ND; c++) {
                const __m256 vv = load8(v + 8 * c);
                GGX_UNROLL for (int g = 0; g < NG; g++)
                    a[g][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + g * k_block + j), vv, a[g][c]);
            }
        }
        GGX_UNROLL for (int g = 0; g < NG; g++)
            GGX_UNROLL for (int c = 0; c < ND; c++) _mm256_storeu_ps(acc[g] + d + 8 * c, a[g][c]);
    }
    for (; d + 8 <= hd; d += 8) {
        __m256 a[NG];
        GGX_UNROLL for (int g = 0; g < NG; g++) a[g] = _mm256_loadu_ps(acc[g] + d);
        for (int64_t j = 0; j < n; j++) {
            const __m256 vv = load8((const CT *)(vbase + (size_t)j * vstride) + d);
            GGX_UNROLL for (int g = 0; g < NG; g++) a[g] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + g * k_block + j), vv, a[g]);
        }
        GGX_UNROLL for (int g = 0; g < NG; g++) _mm256_storeu_ps(acc[g] + d, a[g]);
    }
#endif
    for (; d < hd; d++)
        GGX_UNROLL for (int g = 0; g < NG; g++) {
            float a = acc[g][d];
            for (int64_t j = 0; j < n; j++) a += w[g * k_block + j] * elem<CT>::load((const CT *)(vbase + (size_t)j * vstride) + d);
            acc[g][d] = a;
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

// Heads [g, g + NG) of the item from `first` on: function tables per group width.
template <typename CT>
struct kernels {
    static void scores_n(int ng, const float * const * q, const char * kb, size_t ks, int64_t n, int64_t hd, float sc, float * s) {
        switch (ng) {
            case 8: scores<CT, 8>(q, kb, ks, n, hd, sc, s); break;
            case 4: scores<CT, 4>(q, kb, ks, n, hd, sc, s); break;
            case 2: scores<CT, 2>(q, kb, ks, n, hd, sc, s); break;
            default: scores<CT, 1>(q, kb, ks, n, hd, sc, s); break;
        }
    }
    static void accumulate_n(int ng, float * const * acc, const float * w, const char * vb, size_t vs, int64_t n, int64_t hd) {
        switch (ng) {
            case 8: accumulate<CT, 8>(acc, w, vb, vs, n, hd); break;
            case 4: accumulate<CT, 4>(acc, w, vb, vs, n, hd); break;
            case 2: accumulate<CT, 2>(acc, w, vb, vs, n, hd); break;
            default: accumulate<CT, 1>(acc, w, vb, vs, n, hd); break;
        }
    }
};

// Asks for n rows of `bytes` each (stride apart) to be brought into cache. Rows of one kv head are
// Hkv * hd elements apart, a stride the hardware prefetchers follow poorly; the scores of a block
// then run while its V rows arrive, and the accumulation while the next block's K rows arrive.
void prefetch_rows(const char * base, size_t stride, int64_t n, size_t bytes) {
    for (int64_t j = 0; j < n; j++)
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(base + (size_t)j * stride + b);
}

// Largest supported group width (8, 4, 2, 1) not above `left`.
int group_width(int64_t left) { return left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1; }

template <typename CT>
void attend(const params & p, const attn_args & a, int64_t t, int64_t hk, int64_t g0, int64_t g1, int32_t P) {
    const int64_t hd = a.hd, ng = g1 - g0;
    float * s = p.scratch;              // [ng][k_block]
    float * acc = s + a.G * k_block;    // [ng][hd]
    float * m = acc + a.G * hd;         // [ng]
    float * l = m + a.G;                // [ng]
    const int64_t h0 = hk * a.G + g0;
    const float * q[8];
    float * accp[8];
    for (int64_t g = 0; g < ng; g++) {
        m[g] = -std::numeric_limits<float>::infinity();
        l[g] = 0.0f;
        memset(acc + g * hd, 0, (size_t)hd * sizeof(float));
    }
    const char * kb = (const char *)a.k->data + (size_t)hk * a.k->nb[1];
    const char * vb = (const char *)a.v->data + (size_t)hk * a.v->nb[1];
    const size_t ks = a.k->nb[2], vs = a.v->nb[2];
    const int64_t j0 = a.window > 0 ? std::max<int64_t>(0, (int64_t)P - a.window + 1) : 0, j1 = (int64_t)P + 1;
    const size_t row_bytes = (size_t)hd * sizeof(CT);
    for (int64_t jb = j0; jb < j1; jb += k_block) {
        const int64_t n = std::min(k_block, j1 - jb);
        prefetch_rows(vb + (size_t)jb * vs, vs, n, row_bytes);
        for (int64_t g = 0; g < ng;) {
            const int w = group_width(ng - g);
            for (int u = 0; u < w; u++)
                q[u] = (const float *)((const char *)a.q->data + (size_t)(h0 + g + u) * a.q->nb[1] + (size_t)t * a.q->nb[2]);
            kernels<CT>::scores_n(w, q, kb + (size_t)jb * ks, ks, n, hd, a.scale, s + g * k_block);
            g += w;
        }
        for (int64_t g = 0; g < ng; g++) {
            float * sg = s + g * k_block;
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
        if (jb + k_block < j1) prefetch_rows(kb + (size_t)(jb + k_block) * ks, ks, std::min(k_block, j1 - jb - k_block), row_bytes);
        for (int64_t g = 0; g < ng;) {
            const int w = group_width(ng - g);
            for (int u = 0; u < w; u++) accp[u] = acc + (g + u) * hd;
            kernels<CT>::accumulate_n(w, accp, s + g * k_block, vb + (size_t)jb * vs, vs, n, hd);
            g += w;
        }
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
        switch (a.k->type) {
            case GGX_TYPE_F16: attend<f16_t>(p, a, t, hk, g0, g1, P); break;
            case GGX_TYPE_BF16: attend<bf16_t>(p, a, t, hk, g0, g1, P); break;
            default: attend<float>(p, a, t, hk, g0, g1, P); break;
        }
    }
}

}  // namespace ggx_cpu
