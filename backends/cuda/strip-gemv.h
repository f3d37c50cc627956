// A one-row EXL2 GEMV over the strip layout (exl2/quant/strip-layout.h): the inner part of the
// planned persistent decode-step kernel (bench/NOTES-cuda-decode.md), as a kernel of its own so
// that its layout, width loops and numerics are checked against the CPU before the persistent
// frame is built around it. Work in progress: not called by the backend, and not yet run on a GPU
// (session 12 had no device time left): its test-cuda case is skipped unless asked for.
//
// One block of GGX_STRIP_GEMV_WARPS warps per strip. Each warp walks its dealt units (contiguous,
// by bytes); lane l of a unit multiplies slice slice0 + l of the unit's quad (4 columns) with x
// in fp16 pairs (exl2-unpack.cuh's piece_dot), applies the slice's group scales in fp32 and keeps
// the quad's sums in registers until the warp's quad changes; then one warp reduction and 4
// shared-memory adds. The block's owners write the strip's columns.
#pragma once

#if defined(GGX_USE_HIP)
#include "backends/hip/hip-compat.h"
#else
#include <cuda_runtime.h>
#endif

#include <cstdint>

#define GGX_STRIP_GEMV_WARPS 16

// One unit (exl2::StripUnit's fields): word rows offset .. offset + bits * lanes - 1 (uint4),
// [bits][lanes].
struct ggx_strip_unit {
    uint32_t offset, quad, slice0;
    uint32_t bits_lanes;   // bits | lanes << 8
};

// A matrix in the strip layout, in device memory.
struct ggx_strip_matrix {
    const uint4 *          words;
    const ggx_strip_unit * units;
    const int *            deal;          // [n_strips][GGX_STRIP_GEMV_WARPS + 1] unit ranges per warp
    const uint16_t *       scales;        // fp16 [G][Np]
    const int *            slice_group;   // [K / 32]
    int K, Np, n_strips;
    int max_quads;                        // quads of the widest strip
};

// y[n] = sum_k W_q[k][n] xq[k] for n < Np, W_q in quantized row order and xq the activations
// gathered into that order (x[q_perm[k]]). fp32 in and out; sums in fp16 pairs per 32-row slice
// after an exact power-of-two scaling of x, as the decode GEMV does.
cudaError_t ggx_cuda_strip_gemv(const ggx_strip_matrix & m, const float * xq, float * y, cudaStream_t stream);
