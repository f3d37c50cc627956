// Activation functions shared by the element-wise kernels and the fused decode GEMV epilogue, so
// both compute the same bits.
#pragma once

#include "common.cuh"

static __device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
static __device__ __forceinline__ float gelu_f(float x) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
