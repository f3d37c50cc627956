// Quantized matrices on CUDA: EXL2 and GPTQ MUL_MAT reading the packed weights.
//
//   decode  (T <= GGX_CUDA_QGEMV_MAX_T): split-K GEMV, packed words streamed with 16-byte loads
//           (4 columns per thread), scales applied once per group piece, activations gathered
//           through q_perm into shared memory, partial sums added into the zeroed output.
//   prefill (T > GGX_CUDA_QGEMV_MAX_T): dequantize column slices to an fp16 scratch buffer
//           (bit-exact with the reference dequantizer), gather x through q_perm to fp16, and
//           multiply with cuBLAS GemmEx (fp16 inputs, fp32 accumulation and output).
#pragma once

#include "common.cuh"

#define GGX_CUDA_QGEMV_MAX_T 8

// Per-matrix tables in device memory (ggx_qmatrix::backend_extra). The rows are cut into slices of
// slice_rows (a multiple of 32, so a chunk boundary at every width); EXL2 slices are described by
// "pieces" (slice ∩ group) int4 {k0, qrow0, group << 4 | bits, rows}, slice s owning
// pieces[slice_first[s] .. slice_first[s + 1]).
struct ggx_cuda_qextra {
    int    slice_rows = 0;
    int    n_slices = 0;
    int4 * pieces = nullptr;
    int *  slice_first = nullptr;   // [n_slices + 1]
    int4 * groups = nullptr;        // per group {k0, qrow0, bits, rows} (EXL2 prefill)
    int    n_groups = 0;
};

// Builds the per-matrix tables (group walk, K slices) in device memory; sets backend_extra.
enum ggx_status ggx_cuda_qmatrix_prepare(ggx_cuda_ctx & ctx, struct ggx_tensor * t);
void            ggx_cuda_qmatrix_release(ggx_cuda_ctx & ctx, struct ggx_tensor * t);
bool            ggx_cuda_supports_qmatmul(const struct ggx_tensor * dst);
// Scratch bytes the prefill path needs for this node (0 for the GEMV path).
size_t          ggx_cuda_qmatmul_scratch(const ggx_cuda_ctx & ctx, const struct ggx_tensor * dst);
enum ggx_status ggx_cuda_op_qmatmul(ggx_cuda_ctx & ctx, struct ggx_tensor * dst);
