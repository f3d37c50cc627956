// One GEMM entry for the backend: C (m x n, column-major, ld ldc, f32) = op(A) * B with A and B
// of one 16/32-bit float type, fp32 accumulation. cuBLAS (or hipBLAS) when available; a plain
// shared-memory tiled kernel otherwise (HIP builds without hipBLAS), correct but slow.
#pragma once

#include "common.cuh"

enum ggx_status ggx_cuda_gemm(ggx_cuda_ctx & ctx, bool trans_a, int m, int n, int k, const void * A, enum ggx_type type,
                              int lda, const void * B, int ldb, float * C, int ldc);
