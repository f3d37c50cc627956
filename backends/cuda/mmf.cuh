// MUL_MAT with plain weights W {K, N} (f32/f16/bf16; row n of the HF weight is contiguous).
//   T <= GGX_CUDA_MMF_GEMV_MAX_T: warp-per-output GEMV with 16-byte weight loads, fp32 sums.
//   larger T: cuBLAS GemmEx (activations converted to the weight type in scratch, fp32 output).
#pragma once

#include "common.cuh"

#define GGX_CUDA_MMF_GEMV_MAX_T 8

bool            ggx_cuda_supports_mmf(const struct ggx_tensor * dst);
size_t          ggx_cuda_mmf_scratch(const struct ggx_tensor * dst);
enum ggx_status ggx_cuda_op_mmf(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
