// Row reductions: SOFTMAX (with scale) and ARGMAX (ties to the lowest index). Threads take whole
// rows.
#include "cpu-common.h"
#include "cpu-ops.h"

#include <limits>

namespace ggx_cpu {

void op_softmax(const params & p, ggx_tensor * dst) {
    const ggx_tensor * a = dst->src[0];
    // scale 0 means "not given" (the parameter is optional), i.e. 1.
    const float s = dst->params.softmax.scale != 0.0f ? dst->params.softmax.scale : 1.0f;
    const int64_t n = dst->ne[0];
    int64_t r0, r1;
    split_range(ggx_nrows(dst), p.ith, p.nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float * x = (const float *)row_ptr(a, r);
        float * y = (float *)row_ptr(dst, r);
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; i++) {
            y[i] = x[i] * s;
            m = std::max(m, y[i]);
        }
        float sum = 0.0f;
#ifdef GGX_CPU_AVX2
        const __m256 mv = _mm256_set1_ps(m);
        __m256 acc = _mm256_setzero_ps();
        map8(y, y, n, [&](__m256 v) {
            const __m256 e = exp8(_mm256_sub_ps(v, mv));
            return e;
        });
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(y + i));
        sum = hsum(acc);
        for (; i < n; i++) sum += y[i];
#else
        for (int64_t i = 0; i < n; i++) sum += (y[i] = std::exp(y[i] - m));
#endif
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < n; i++) y[i] *= inv;
    }
}

void op_argmax(const params & p, ggx_tensor * dst) {
    const ggx_tensor * a = dst->src[0];
    const int64_t n = a->ne[0];
    int32_t * out = (int32_t *)dst->data;
    int64_t r0, r1;
    split_range(ggx_nrows(a), p.ith, p.nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const float * x = (const float *)row_ptr(a, r);
        // Pass 1: the maximum (NaN never wins); pass 2: its first index.
        float m = -std::numeric_limits<float>::infinity();
        int64_t i = 0;
#ifdef GGX_CPU_AVX2
        __m256 mv = _mm256_set1_ps(m);
        for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(_mm256_loadu_ps(x + i), mv);   // NaN in x yields mv
        m = hmax(mv);
#endif
        for (; i < n; i++)
            if (x[i] > m) m = x[i];
        int32_t best = 0;
        for (i = 0; i < n; i++)
            if (x[i] == m) {
                best = (int32_t)i;
                break;
            }
        out[r] = best;
    }
}

}  // namespace ggx_cpu
