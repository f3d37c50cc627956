// CPU matmul over packed EXL2/GPTQ weights (implemented in cpu-qmatmul.cpp).
#pragma once

#include "ggx/ggx.h"

#ifdef __cplusplus
extern "C" {
#endif

// y[t*ldy + n] = sum_k x[t*ldx + k] * W[k][n] for t in [0, T), n in [0, N), where W is the
// dequantized matrix of `w` (type GGX_TYPE_EXL2 or GGX_TYPE_GPTQ, struct ggx_qmatrix in w->extra;
// original row order). Every thread ith in [0, nth) calls this once; the callee splits the
// columns among them itself.
void ggx_cpu_qmatmul(const struct ggx_tensor * w, const float * x, int64_t ldx, float * y, int64_t ldy,
                     int64_t T, int ith, int nth);
// Same contract, always the portable scalar code (tests compare the SIMD path against it).
void ggx_cpu_qmatmul_scalar(const struct ggx_tensor * w, const float * x, int64_t ldx, float * y, int64_t ldy,
                            int64_t T, int ith, int nth);

#ifdef __cplusplus
}
#endif
