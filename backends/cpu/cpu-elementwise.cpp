// Element-wise ops: ADD and MUL (second operand same shape or one row broadcast), SCALE, SILU,
// GELU, GLU, SOFTCAP. All split the element grid evenly over threads (for_each_chunk).
#include "cpu-common.h"
#include "cpu-convert.h"
#include "cpu-ops.h"

namespace ggx_cpu {

size_t binary_scratch_floats(const ggx_tensor * t) {
    return t->src[1] && t->src[1]->type != GGX_TYPE_F32 ? (size_t)t->src[0]->ne[0] : 0;
}

namespace {

template <typename OP>
void binary(const params & p, ggx_tensor * dst, OP op) {
    const ggx_tensor * a = dst->src[0], * b = dst->src[1];
    const bool bcast = ggx_nrows(b) == 1 && ggx_nrows(a) != 1;
    const size_t tsb = ggx_type_size(b->type);
    for_each_chunk(ggx_nrows(dst), dst->ne[0], p.ith, p.nth, [&](int64_t r, int64_t c0, int64_t c1) {
        const float * ar = (const float *)row_ptr(a, r) + c0;
        const char * braw = row_ptr(b, bcast ? 0 : r) + (size_t)c0 * tsb;
        const float * br = (const float *)braw;
        if (b->type != GGX_TYPE_F32) {
            to_f32(b->type, braw, p.scratch, c1 - c0);
            br = p.scratch;
        }
        float * yr = (float *)row_ptr(dst, r) + c0;
        for (int64_t i = 0; i < c1 - c0; i++) yr[i] = op(ar[i], br[i]);
    });
}

// y = f(x) per element with an 8-lane f8 and a scalar f1 (used only without AVX2).
template <typename F8, typename F1>
void unary(const params & p, ggx_tensor * dst, F8 f8, F1 f1) {
    const ggx_tensor * a = dst->src[0];
    for_each_chunk(ggx_nrows(dst), dst->ne[0], p.ith, p.nth, [&](int64_t r, int64_t c0, int64_t c1) {
        const float * x = (const float *)row_ptr(a, r) + c0;
        float * y = (float *)row_ptr(dst, r) + c0;
#ifdef GGX_CPU_AVX2
        (void)f1;
        map8(y, x, c1 - c0, f8);
#else
        (void)f8;
        for (int64_t i = 0; i < c1 - c0; i++) y[i] = f1(x[i]);
#endif
    });
}

}  // namespace

void op_add(const params & p, ggx_tensor * dst) {
    binary(p, dst, [](float a, float b) { return a + b; });
}
void op_mul(const params & p, ggx_tensor * dst) {
    binary(p, dst, [](float a, float b) { return a * b; });
}

#ifdef GGX_CPU_AVX2
#define GGX_F8(body) [&](__m256 v) { return body; }
#else
#define GGX_F8(body) 0
#endif

void op_scale(const params & p, ggx_tensor * dst) {
    const float s = dst->params.scale.s;
    unary(p, dst, GGX_F8(_mm256_mul_ps(v, _mm256_set1_ps(s))), [&](float x) { return x * s; });
}
void op_silu(const params & p, ggx_tensor * dst) {
    unary(p, dst, GGX_F8(silu8(v)), silu1);
}
void op_gelu(const params & p, ggx_tensor * dst) {
    unary(p, dst, GGX_F8(gelu8(v)), gelu1);
}
void op_softcap(const params & p, ggx_tensor * dst) {
    const float cap = dst->params.softcap.cap, inv = 1.0f / cap;
    unary(p, dst, GGX_F8(_mm256_mul_ps(_mm256_set1_ps(cap), tanh8(_mm256_mul_ps(v, _mm256_set1_ps(inv))))),
          [&](float x) { return cap * tanh1(x * inv); });
}

void op_glu(const params & p, ggx_tensor * dst) {
    const ggx_tensor * gate = dst->src[0], * up = dst->src[1];
    const bool gelu = dst->params.glu.act == GGX_ACT_GELU;
    for_each_chunk(ggx_nrows(dst), dst->ne[0], p.ith, p.nth, [&](int64_t r, int64_t c0, int64_t c1) {
        const float * g = (const float *)row_ptr(gate, r) + c0;
        const float * u = (const float *)row_ptr(up, r) + c0;
        float * y = (float *)row_ptr(dst, r) + c0;
        const int64_t n = c1 - c0;
        int64_t i = 0;
#ifdef GGX_CPU_AVX2
        for (; i + 8 <= n; i += 8) {
            const __m256 gv = _mm256_loadu_ps(g + i);
            _mm256_storeu_ps(y + i, _mm256_mul_ps(gelu ? gelu8(gv) : silu8(gv), _mm256_loadu_ps(u + i)));
        }
        if (i < n) {
            float gb[8] = {0}, ub[8] = {0};
            memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
            memcpy(ub, u + i, (size_t)(n - i) * sizeof(float));
            const __m256 gv = _mm256_loadu_ps(gb);
            _mm256_storeu_ps(gb, _mm256_mul_ps(gelu ? gelu8(gv) : silu8(gv), _mm256_loadu_ps(ub)));
            memcpy(y + i, gb, (size_t)(n - i) * sizeof(float));
        }
#else
        for (; i < n; i++) y[i] = (gelu ? gelu1(g[i]) : silu1(g[i])) * u[i];
#endif
    });
}

}  // namespace ggx_cpu
