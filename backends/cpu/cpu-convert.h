// Row conversions between f32 and the float storage types (f16, bf16) used by several kernels.
#pragma once

#include "ggx/ggx.h"

#include <cstdint>

namespace ggx_cpu {

// Whether t is one of the float storage types f32, f16, bf16.
bool is_float_type(enum ggx_type t);

// dst[i] = float(src[i]) for i < n; src of type f32, f16 or bf16 (exact conversions).
void to_f32(enum ggx_type type, const void * src, float * dst, int64_t n);
// dst[i] = src[i] rounded to `type` (f32, f16 or bf16; round to nearest even, subnormals kept).
void from_f32(enum ggx_type type, const float * src, void * dst, int64_t n);

}  // namespace ggx_cpu
