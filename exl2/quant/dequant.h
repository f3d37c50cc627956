// Scalar reference dequantizers: the oracle for every SIMD/GPU kernel and for the converter's
// reconstruction check. They follow docs/exl2-format.md sections 4.3, 4.7 and 5 literally and
// match ExLlamaV2's `reconstruct` bit for bit (tests/test-exl2-format.cpp checks this on every
// fixture layer). h(x) below is round-to-nearest-even fp16 keeping subnormals (ggx/fp16.h).
//
//   EXL2  M'_g  = h(M_g * float(prescale/256))
//         scale = h((c+1)^2 * M'_g)                  c: 4-bit scale code of (group, column)
//         W[q_perm[k]][n] = h((v - 2^(b-1)) * scale)  v: b-bit code of quantized row k
//   GPTQ  W[k][n] = h((q - (z+1)) * h(scales[g][n] * prescale)),  g = group of row k
//
// Inputs are the on-disk arrays (section 2 / 5), already copied to aligned memory. Outputs are
// fp16 bit patterns [K][N] in ORIGINAL input-row order (N, not the padded Np, columns).
#pragma once

#include "ggx/fp16.h"
#include "ggx/ggx-qmatrix.h"
#include "ggx/ggx.h"

#include <cstdint>

namespace exl2 {

// One EXL2 weight, exactly as the reference computes it. `mprime` is M'_g as fp16 bits.
static inline uint16_t exl2_dq_scale(uint32_t code, uint16_t mprime) {
    return ggx_f32_to_f16((float)((code + 1) * (code + 1)) * ggx_f16_to_f32(mprime));
}
static inline uint16_t exl2_dq_weight(uint32_t v, int bits, uint16_t scale) {
    return ggx_f32_to_f16((float)((int)v - (1 << (bits - 1))) * ggx_f16_to_f32(scale));
}
// M'_g from the stored q_scale_max and the layer's prescale.
static inline uint16_t exl2_prescale_max(uint16_t m, float prescale) {
    return ggx_f32_to_f16(ggx_f16_to_f32(m) * (prescale / 256.0f));
}

// The EXL2 tensors of one layer as stored (section 2). Np = N rounded up to 32.
struct Exl2Raw {
    int K = 0, N = 0, Np = 0, G = 0, QR = 0;
    const uint32_t * q_weight = nullptr;     // [QR][Np]
    const uint32_t * q_scale = nullptr;      // [G][Np/8]
    const uint16_t * q_scale_max = nullptr;  // [G] fp16, as stored (not prescaled)
    const uint16_t * q_groups = nullptr;     // [2G] (bits, first packed row)
    const int32_t *  q_invperm = nullptr;    // [K] original row -> quantized row
};
// out: fp16 [K][N]. Throws exl2::Error on a layout that cannot be walked (bad width, groups
// that do not end at QR, rows that do not add up to K, invperm not a permutation).
void exl2_dequant_ref(const Exl2Raw & t, float prescale, uint16_t * out);

// The GPTQ tensors of one layer as stored (section 5). Scales given as fp16 bits.
struct GptqRaw {
    int K = 0, N = 0, G = 0;
    const uint32_t * qweight = nullptr;  // [K/8][N]
    const uint32_t * qzeros = nullptr;   // [G][N/8]
    const uint16_t * scales = nullptr;   // [G][N] fp16
    const int32_t *  g_idx = nullptr;    // [K] or nullptr
};
// out: fp16 [K][N]. `v2`: checkpoint_format "gptq_v2" (each qzeros word minus 0x11111111,
// borrows included). Without g_idx (or with an all-zero one) row k is in group k / gs, gs the
// smallest power of two with gs*G >= K; otherwise in group g_idx[k].
void gptq_dequant_ref(const GptqRaw & t, bool v2, float prescale, uint16_t * out);
// Group size rule shared with the loader.
int gptq_group_size(int K, int G);

// Dequantizes a loaded matrix (the transformed layout of ggx/ggx-qmatrix.h: M' already
// prescaled, GPTQ rows sorted by group and zeros in v1 form) whose pointers are HOST memory,
// e.g. exl2::qlayer_host_view() or a CPU-backend tensor. out: fp16 [K][N], original row order.
// Equals the *_dequant_ref of the file the matrix was loaded from, bit for bit.
void qmatrix_dequant(const ggx_qmatrix & q, enum ggx_type type, uint16_t * out);

}  // namespace exl2
