// Quantized matrices (EXL2 and GPTQ 4-bit) as one ggx tensor.
//
// A tensor of type GGX_TYPE_EXL2 or GGX_TYPE_GPTQ has logical shape ne = {K, N} (K input features,
// N output features, as a Hugging Face weight [N, K]) and carries a struct ggx_qmatrix in
// tensor->extra. The descriptor itself is host memory; every pointer in it is backend memory
// (host for the CPU backend, device for CUDA). Layouts are exactly the on-disk ones described in
// docs/exl2-format.md, sections 2-5 (this header is included by CPU, CUDA and HIP code alike):
//
//   EXL2  q_weight    u32 [QR][Np]     packed codes; for each column the group's words form one
//                                      little-endian bit string, value j at bits j*b .. j*b+b-1
//         q_scale     u32 [G][Np/8]    4-bit scale code c of column n at bits 4*(n%8)
//         q_scale_max f16 [G]          M'_g = h(M_g * prescale/256)  (already multiplied at load)
//         q_groups    u16 [2G]         (bits, first packed row) per group, widths non-increasing
//         q_perm      i32 [K]          quantized row k reads activation x[q_perm[k]]
//     w[k][n] = h(v - 2^(b-1)) * h(h((c+1)^2) * M'_g)      (each product rounded to fp16)
//
//   GPTQ  q_weight    u32 [K/8][N]     4-bit, row k at bits 4*(k%8) of word row k/8 (rows already
//                                      sorted by group when g_idx was non-trivial)
//         qzeros      u32 [G][N/8]     zero code z (stored "zero - 1", GPTQ v1 convention)
//         scales      f16 [G][N]       per group/column scale (already multiplied by prescale)
//         q_perm      i32 [K] or NULL  sorted row s reads activation x[q_perm[s]]
//     w[s][n] = h(q - (z + 1)) * scales[s / group_size][n]
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GGX_QMATRIX_VERSION 1   // bump on any change of the layout below

// Bit widths in the order kernels walk them (groups are stored widest first).
#define GGX_EXL2_N_WIDTHS 6
static const int ggx_exl2_widths[GGX_EXL2_N_WIDTHS] = { 8, 6, 5, 4, 3, 2 };

struct ggx_qmatrix {
    int32_t K;            // input features (rows of W in y = x W)
    int32_t N;            // output features
    int32_t Np;           // N padded to a multiple of 32 (EXL2); == N for GPTQ
    int32_t n_groups;     // G
    int32_t qrows;        // QR: rows of q_weight
    // EXL2: number of quantized rows at each width, in ggx_exl2_widths order.
    int32_t rows_per_width[GGX_EXL2_N_WIDTHS];
    int32_t group_size;   // GPTQ group size (power of two); 0 for EXL2

    // Backend memory.
    uint32_t * q_weight;
    uint32_t * q_scale;       // EXL2
    uint16_t * q_scale_max;   // EXL2, fp16 bits
    uint16_t * q_groups;      // EXL2
    int32_t  * q_perm;        // may be NULL (identity)
    uint32_t * qzeros;        // GPTQ
    uint16_t * scales;        // GPTQ, fp16 bits

    // Host copy of q_groups (EXL2), kept by the loader; kernels on host-memory backends may use it.
    const uint16_t * groups_host;

    // Free for the backend that executes this matrix (set by qmatrix_prepare).
    void * backend_extra;
};

#ifdef __cplusplus
}
#endif
