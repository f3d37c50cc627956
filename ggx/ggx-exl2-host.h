// What the host-side weight layouts (ggx-strip-layout.h, ggx-tile-layout.h) read from an EXL2
// ggx_qmatrix with host pointers: its groups, checked; one code; one column scale in fp16. ggx
// never includes exl2, so these restate docs/exl2-format.md sections 3-4.
#pragma once

#include "fp16.h"
#include "ggx-qmatrix.h"

#include <cstdint>
#include <string>
#include <vector>

// Code j of a group of `bits` starting at packed row qrow0, in column n of q_weight (Np columns):
// bits j b .. j b + b - 1 of the column's bit string over the group's rows, the low part in the
// earlier word. Host and device (a backend's layout gather runs it on the GPU).
GGX_HD uint32_t ggx_exl2_code(const uint32_t * q_weight, int Np, int bits, int qrow0, int j, int n) {
    const int bit = j * bits;
    const uint32_t * w = q_weight + (size_t)(qrow0 + bit / 32) * Np + n;
    uint64_t v = w[0] >> (bit % 32);
    if (bit % 32 + bits > 32) v |= (uint64_t)w[Np] << (32 - bit % 32);
    return (uint32_t)v & ((1u << bits) - 1);
}

namespace ggx {

// One group: width, first packed row, first quantized row, rows.
struct Exl2Group {
    int bits, qrow0, row0, n_rows;
};

// The groups of q (groups_host), checked: known widths, non-increasing, whole packed rows, rows a
// multiple of row_multiple (and starting at one), covering K. False with *why on the first defect.
bool exl2_groups(const ggx_qmatrix & q, int row_multiple, std::vector<Exl2Group> * out, std::string * why);

// Code j (0 .. n_rows - 1) of group g in column n: bits j b .. j b + b - 1 of the column's bit
// string over the group's packed rows (q_weight on the host).
uint32_t exl2_code(const ggx_qmatrix & q, const Exl2Group & g, int j, int n);

// The fp16 scales of every group and column, [n_groups][Np]: h(h((c + 1)^2) * M'_g), rounded
// as the reference dequantizer (exl2/quant/dequant.h) rounds them (q_scale and q_scale_max on
// the host).
std::vector<uint16_t> exl2_scales_f16(const ggx_qmatrix & q);

// Position of a width in ggx_exl2_widths (8 first, 2 last), -1 if it is none.
int exl2_width_rank(int bits);

}  // namespace ggx
