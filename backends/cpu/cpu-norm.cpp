// RMS_NORM and LAYER_NORM per row, in f32. Sums run in blocks of 256 elements over 32 partial
// sums, and block totals are added up afterwards: the rounding error grows with 8 + D/256 terms
// instead of D, which is as good as pairwise summation in practice and needs no double.
#include "cpu-common.h"
#include "cpu-convert.h"
#include "cpu-ops.h"

namespace ggx_cpu {

size_t norm_scratch_floats(const ggx_tensor * t) {
    size_t n = 0;
    for (int i = 1; i <= 2; i++)
        if (t->src[i] && t->src[i]->type != GGX_TYPE_F32) n += (size_t)t->ne[0];
    return n;
}

namespace {

// sum of (x[i] - c)^2 when sq, else sum of x[i].
float block_sum(const float * x, int64_t n, bool sq, float c) {
    const int64_t B = 256;
    float total = 0.0f;
    for (int64_t b0 = 0; b0 < n; b0 += B) {
        const int64_t b1 = std::min(n, b0 + B);
        int64_t i = b0;
        float s = 0.0f;
#ifdef GGX_CPU_AVX2
        const __m256 cv = _mm256_set1_ps(c);
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (; i + 32 <= b1; i += 32)
            GGX_UNROLL for (int j = 0; j < 4; j++) {
                const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * j), cv);
                acc[j] = sq ? _mm256_fmadd_ps(v, v, acc[j]) : _mm256_add_ps(acc[j], v);
            }
        s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#endif
        for (; i < b1; i++) {
            const float v = x[i] - c;
            s += sq ? v * v : v;
        }
        total += s;
    }
    return total;
}

// Weight/bias as f32: the tensor itself when f32, else converted into `scratch`.
const float * vec_f32(const ggx_tensor * t, float *& scratch) {
    if (!t) return nullptr;
    if (t->type == GGX_TYPE_F32) return (const float *)t->data;
    float * out = scratch;
    to_f32(t->type, t->data, out, t->ne[0]);
    scratch += t->ne[0];
    return out;
}

void norm_rows(const params & p, ggx_tensor * dst, bool layer) {
    const ggx_tensor * a = dst->src[0];
    const int64_t d = dst->ne[0];
    const float eps = dst->params.norm.eps;
    int64_t r0, r1;
    split_range(ggx_nrows(dst), p.ith, p.nth, &r0, &r1);
    if (r0 >= r1) return;
    float * scratch = p.scratch;
    const float * w = vec_f32(dst->src[1], scratch);
    const float * b = layer ? vec_f32(dst->src[2], scratch) : nullptr;
    for (int64_t r = r0; r < r1; r++) {
        const float * x = (const float *)row_ptr(a, r);
        float * y = (float *)row_ptr(dst, r);
        const float mean = layer ? block_sum(x, d, false, 0.0f) / (float)d : 0.0f;
        const float var = block_sum(x, d, true, mean) / (float)d;
        const float inv = 1.0f / std::sqrt(var + eps);
        for (int64_t i = 0; i < d; i++) {
            float v = (x[i] - mean) * inv;
            if (w) v *= w[i];
            if (b) v += b[i];
            y[i] = v;
        }
    }
}

}  // namespace

void op_rms_norm(const params & p, ggx_tensor * dst) { norm_rows(p, dst, false); }
void op_layer_norm(const params & p, ggx_tensor * dst) { norm_rows(p, dst, true); }

}  // namespace ggx_cpu
