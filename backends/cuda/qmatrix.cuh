// Quantized matrices on CUDA: EXL2 and GPTQ MUL_MAT reading the packed weights.
//
//   decode  (T <= GGX_CUDA_QGEMV_MAX_T): EXL2 runs as a GEMV job of qgemv.cu (fused with its
//           neighbours where fusion.cu finds them); GPTQ uses the split-K GEMV here (4 columns
//           per thread, 16-byte loads, partial sums added into the zeroed output).
//   prefill (T > GGX_CUDA_QGEMV_MAX_T): dequantize to an fp16 scratch matrix (bit-exact with the
//           reference dequantizer, rows put back in input order through q_perm), convert x to
//           fp16, and multiply with cuBLAS GemmEx (fp16 inputs, fp32 accumulation and output).
#pragma once

#include "common.cuh"
#include "decode-plan.h"   // ggx_cuda_qextra, GGX_CUDA_QGEMV_MAX_T

// Builds the per-matrix tables (group walk, K slices) in device memory; sets backend_extra.
enum ggx_status ggx_cuda_qmatrix_prepare(ggx_cuda_ctx & ctx, struct ggx_tensor * t);
void            ggx_cuda_qmatrix_release(ggx_cuda_ctx & ctx, struct ggx_tensor * t);
// An EXL2 matrix's q_groups ((bits, first packed row) per group) on the host: its host copy, or
// downloaded.
enum ggx_status ggx_cuda_exl2_host_groups(ggx_cuda_ctx & ctx, const ggx_qmatrix & q, std::vector<uint16_t> * groups);
bool            ggx_cuda_supports_qmatmul(const struct ggx_tensor * dst);
// Scratch bytes the prefill path needs for this node (0 for the GEMV path).
size_t          ggx_cuda_qmatmul_scratch(const ggx_cuda_ctx & ctx, const struct ggx_tensor * dst);
enum ggx_status ggx_cuda_op_qmatmul(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
