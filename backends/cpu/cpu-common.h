// Internal helpers shared by the CPU kernels: work splitting, row addressing, 8-wide loads of
// f32/f16/bf16, and a vectorised exp. Not part of any public interface.
#pragma once

#include "ggx/fp16.h"
#include "ggx/ggx.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GGX_CPU_AVX2 1
#include <immintrin.h>
#endif

// Full unrolling of a short constant-trip loop over register arrays (accumulator tiles). GCC does
// not do it at -O2 by itself, and the arrays then live on the stack.
#define GGX_UNROLL _Pragma("GCC unroll 8")

namespace ggx_cpu {

// Even split of [0, n) into nth parts; part ith is [*i0, *i1).
static inline void split_range(int64_t n, int ith, int nth, int64_t * i0, int64_t * i1) {
    *i0 = n * ith / nth;
    *i1 = n * (ith + 1) / nth;
}

// Address of row r of t, rows being numbered over dims 1..3 (row-major over ne[1], ne[2], ne[3]).
static inline char * row_ptr(const ggx_tensor * t, int64_t r) {
    const int64_t i1 = r % t->ne[1];
    const int64_t i2 = (r / t->ne[1]) % t->ne[2];
    const int64_t i3 = r / (t->ne[1] * t->ne[2]);
    return (char *)t->data + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
}

// Whether all rows of t sit at one fixed stride (so row r is data + r * nb[1]).
static inline bool rows_uniform(const ggx_tensor * t) {
    return (t->ne[2] == 1 || t->nb[2] == t->nb[1] * (size_t)t->ne[1]) &&
           (t->ne[3] == 1 || t->nb[3] == t->nb[2] * (size_t)t->ne[2]);
}

// Calls fn(row, c0, c1) for this thread's share of an nrows x ncols element grid. The grid is cut
// into nth near-equal element ranges on 16-float boundaries (so that two threads rarely write one
// cache line), and small grids use fewer threads: a split below ~2k elements costs more in cache
// traffic than it saves.
template <typename F>
static inline void for_each_chunk(int64_t nrows, int64_t ncols, int ith, int nth, F fn) {
    const int64_t total = nrows * ncols;
    const int64_t min_chunk = 2048;
    const int64_t n_used = std::max<int64_t>(1, std::min<int64_t>(nth, (total + min_chunk - 1) / min_chunk));
    if (ith >= n_used) return;
    const int64_t blocks = (total + 15) / 16;
    int64_t e0 = blocks * ith / n_used * 16, e1 = blocks * (ith + 1) / n_used * 16;
    e1 = std::min(e1, total);
    while (e0 < e1) {
        const int64_t r = e0 / ncols, c0 = e0 % ncols;
        const int64_t c1 = std::min(ncols, c0 + (e1 - e0));
        fn(r, c0, c1);
        e0 += c1 - c0;
    }
}

// ---- element conversion --------------------------------------------------------------------
template <typename T> struct elem;
template <> struct elem<float> {
    static float load(const float * p) { return *p; }
};
struct f16_t { uint16_t bits; };
struct bf16_t { uint16_t bits; };
template <> struct elem<f16_t> {
    static float load(const f16_t * p) { return ggx_f16_to_f32(p->bits); }
};
template <> struct elem<bf16_t> {
    static float load(const bf16_t * p) { return ggx_bf16_to_f32(p->bits); }
};

#ifdef GGX_CPU_AVX2
static inline __m256 load8(const float * p) { return _mm256_loadu_ps(p); }
static inline __m256 load8(const f16_t * p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 load8(const bf16_t * p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// e^x for 8 floats, relative error about 2 ulp over the whole range, correct 0 / inf / NaN.
// x = n ln2 + r with |r| <= ln2/2 (ln2 split in a 15-bit head, so n*head is exact, and a tail);
// e^r by its Taylor series to degree 7 (truncation < 6e-9 relative); 2^n applied as two factors
// 2^(n/2) so that n in [-150, 128] never leaves the normal exponent range before the last multiply.
static inline __m256 exp8(__m256 x) {
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#endif  // GGX_CPU_AVX2

// ---- activations ------------------------------------------------------------------------------
// gelu uses 0.5 * (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e^(-2u)): no cancellation for any x.
// tanh uses sign(y) * (1 - e) / (1 + e) with e = e^(-2|y|): absolute error of a few ulp of 1,
// which is what softcapping needs (values near 0 lose relative, not absolute, accuracy).
static const float k_gelu_a = 0.7978845608028654f;   // sqrt(2 / pi)
static const float k_gelu_b = 0.044715f;

static inline float silu1(float x) { return x / (1.0f + std::exp(-x)); }
static inline float gelu1(float x) {
    const float u = k_gelu_a * (x + k_gelu_b * x * x * x);
    return x / (1.0f + std::exp(-2.0f * u));
}
static inline float tanh1(float y) {
    const float e = std::exp(-2.0f * std::fabs(y));
    return std::copysign((1.0f - e) / (1.0f + e), y);
}

#ifdef GGX_CPU_AVX2
static inline __m256 silu8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
static inline __m256 gelu8(__m256 x) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(k_gelu_a), _mm256_fmadd_ps(_mm256_set1_ps(k_gelu_b), x3, x));
    const __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u))));
}
static inline __m256 tanh8(__m256 y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ay = _mm256_andnot_ps(sign, y);
    const __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), ay));
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    return _mm256_or_ps(t, _mm256_and_ps(sign, y));
}
#endif

#ifdef GGX_CPU_AVX2
// Applies f8 to x[0..n) into y[0..n) (x == y allowed), 8 lanes at a time; the tail goes through a
// padded copy so that every element sees the same arithmetic.
template <typename F8>
static inline void map8(float * y, const float * x, int64_t n, F8 f8) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float buf[8] = {0};
        memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(buf, f8(_mm256_loadu_ps(buf)));
        memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));
    }
}
#endif

}  // namespace ggx_cpu
