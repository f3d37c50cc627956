// f32 <-> f16/bf16 row conversion. The F16C instructions round to nearest even and keep
// subnormals, so they agree bit for bit with the scalar reference in ggx/fp16.h.
#include "cpu-convert.h"

#include "cpu-common.h"

namespace ggx_cpu {

bool is_float_type(ggx_type t) { return t == GGX_TYPE_F32 || t == GGX_TYPE_F16 || t == GGX_TYPE_BF16; }

void to_f32(ggx_type type, const void * src, float * dst, int64_t n) {
    int64_t i = 0;
    switch (type) {
        case GGX_TYPE_F32:
            if (dst != src) memmove(dst, src, (size_t)n * sizeof(float));
            return;
        case GGX_TYPE_F16: {
            const f16_t * s = (const f16_t *)src;
#ifdef GGX_CPU_AVX2
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(s + i));
#endif
            for (; i < n; i++) dst[i] = elem<f16_t>::load(s + i);
            return;
        }
        case GGX_TYPE_BF16: {
            const bf16_t * s = (const bf16_t *)src;
#ifdef GGX_CPU_AVX2
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(s + i));
#endif
            for (; i < n; i++) dst[i] = elem<bf16_t>::load(s + i);
            return;
        }
        default:
            return;   // callers check types in supports_op
    }
}

void from_f32(ggx_type type, const float * src, void * dst, int64_t n) {
    int64_t i = 0;
    switch (type) {
        case GGX_TYPE_F32:
            if (dst != src) memmove(dst, src, (size_t)n * sizeof(float));
            return;
        case GGX_TYPE_F16: {
            uint16_t * d = (uint16_t *)dst;
#ifdef GGX_CPU_AVX2
            for (; i + 8 <= n; i += 8)
                _mm_storeu_si128((__m128i *)(d + i),
                                 _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
            for (; i < n; i++) d[i] = ggx_f32_to_f16(src[i]);
            return;
        }
        case GGX_TYPE_BF16: {
            uint16_t * d = (uint16_t *)dst;
            for (; i < n; i++) d[i] = ggx_f32_to_bf16(src[i]);
            return;
        }
        default:
            return;
    }
}

}  // namespace ggx_cpu
