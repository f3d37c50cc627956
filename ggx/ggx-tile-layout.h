// The tile layout of an EXL2 matrix: its codes in the order in which an m16n8k16 tensor-core tile
// takes them as its A operand, for a one-row GEMV whose dot products run on tensor cores
// (bench/NOTES-cuda-decode.md, session 14: the fp16-pair loop is issue-bound at ~2.35
// instructions per weight; this one's steps take ~0.9). Host code, tested without a GPU
// (tests/test-tile-layout.cpp emulates the tile product); the register recipes below are
// GGX_HD so that device code shares them. backends/cuda/tile-gemv.h multiplies with it and
// gathers it on the GPU (both tested on the H200 since session 15); bench/probes/mma-tile.cu
// measures the loop on uniform widths. No decode path uses the layout yet.
//
// A tile is 16 output columns, a step 16 quantized rows. For each (tile, step), lane l of a warp
// (g = l / 4, t = l % 4) holds the 8 codes of its A-fragment registers r = 0..3:
//   r = 0: column 16 tile + g,     rows 2t, 2t + 1 of the step  (low, high fp16 of the register)
//   r = 1: column 16 tile + g + 8, rows 2t, 2t + 1
//   r = 2: column 16 tile + g,     rows 2t + 8, 2t + 9
//   r = 3: column 16 tile + g + 8, rows 2t + 8, 2t + 9
// A code of b bits is cut into planes of 8, 4, 2 or 1 bits (8; 6 = 4 + 2 << 4; 5 = 4 + 1 << 4; 4;
// 3 = 2 + 1 << 2; 2). Each plane's fields sit in 32-bit words such that one mask-and-or with
// 0x64006400 (at 8 bits, a byte permute with 0x64) yields each register as the two fp16 values
// 1024 + f v, f a power of two that depends only on the plane and r (ggx_tile_factor), so no field
// needs its own shift:
//   8 bits: 2 words per step: (r0, r1) then (r2, r3), each register's two bytes low first; f = 1
//   4 bits: 1 word per step: r at bits 4r (low) and 4r + 16 (high); r = 2, 3 read after >> 8, masks
//           0x000f000f (r even) and 0x00f000f0 (r odd): f = 1, 16, 1, 16
//   2 bits: 2 steps per word, the second 8 bits higher: r at bits 2r and 2r + 16: f = 1, 4, 16, 64
//   1 bit:  4 steps per word, step i 4 (i % 4) bits higher: r at bits r and r + 16: f = 1, 2, 4, 8
// A tensor core then sums (1024 + f v) x: the product's rows g + 8 carry the factor H = f(r1) /
// f(r0), and its second k-half the factor V = f(r2) / f(r0), which x's staging divides out (x's
// rows 8-15 of each step divided by V, exact). Per plane and group, with S = sum of x and
// T = sum of x as staged (second halves / V): rows g give sum v x = c - 1024 T, rows g + 8
// (c - 1024 T) / H; the code's sum is the planes' sums times 2^shift, less 2^(b-1) S.
//
// Chunks and units: each group is cut into chunks of at most ggx_tile_chunk_steps (the same for
// every tile);
// a chunk is what one set of tensor-core sums covers before its bias, zero point and scale are
// applied (with the chunk's sums of x, computed once per x). A unit packs consecutive chunks of
// one width into at most ggx_tile_max_steps steps (so a unit of small groups still loads whole
// uint4; its chunk_starts bits say where the kernel applies a chunk's epilogue). Each lane's words of a unit
// are its planes' words, plane 1 starting where a full unit's plane 0 ends (ggx_tile_plane_base:
// a constant per width, so that a kernel unrolled over the steps indexes registers statically;
// only a short unit of a two-plane width wastes words), padded to whole uint4, stored
// [uint4 index][32 lanes] so that a warp's load of one index is 512 contiguous bytes. Units run
// tile by tile, then by rows.
#pragma once

#include "fp16.h"
#include "ggx-exl2-host.h"
#include "ggx-qmatrix.h"

#include <cstdint>
#include <string>
#include <vector>

// Planes of a width: how many, and each one's bits and shift within the code.
GGX_HD constexpr int ggx_tile_n_planes(int bits) { return bits == 6 || bits == 5 || bits == 3 ? 2 : 1; }
GGX_HD constexpr int ggx_tile_plane_bits(int bits, int p) {
    return p == 0 ? (bits == 8 ? 8 : bits >= 4 ? 4 : 2) : bits - (bits >= 4 ? 4 : 2);
}
GGX_HD constexpr int ggx_tile_plane_shift(int bits, int p) { return p == 0 ? 0 : bits >= 4 ? 4 : 2; }

// Words of one lane for n_steps steps of a plane (whole words).
GGX_HD constexpr int ggx_tile_plane_words(int plane_bits, int n_steps) { return (n_steps * plane_bits + 3) / 4; }

// uint4 a lane holds of one unit (the kernels' word buffers: two of them per warp, double
// buffered), and the most steps of a unit of each width within them. 4 (the default): 8 bits 8
// steps, 6 bits 10, 5 bits 12, 4 bits 16, 3 bits 20, 2 bits 32, i.e. 2 KB per warp at every
// width; the tile step's frame around two buffers of 8 did not fit in 128 registers (session 16).
// 8: 16 steps at every width (4 KB per warp at 8 bits, 1 KB at 2), the layout measured in runs
// 96-101. Units of 32 steps at 4 bits and 8 uint4 measured slower (run 98: spills). At compile
// time, the same for the layout builder and the kernels.
#ifndef GGX_TILE_UNIT_UINT4
#define GGX_TILE_UNIT_UINT4 4
#endif
GGX_HD constexpr int ggx_tile_max_steps(int bits) {
    return GGX_TILE_UNIT_UINT4 == 8 ? 16 : bits == 8 ? 8 : bits == 6 ? 10 : bits == 5 ? 12 : bits == 4 ? 16 : bits == 3 ? 20 : 32;
}
// Most steps of a chunk of a width: 16 (a tensor-core sum over 256 rows stays exact enough, and
// one group's scale), at most a unit's.
GGX_HD constexpr int ggx_tile_chunk_steps(int bits) { return ggx_tile_max_steps(bits) < 16 ? ggx_tile_max_steps(bits) : 16; }

// First word of plane p among a lane's words of a unit (fixed per width: plane 0 at 0, plane 1
// after a full unit's plane 0), and the words a unit of n_steps steps takes (plane 1's end).
GGX_HD constexpr int ggx_tile_plane_base(int bits, int p) {
    return p == 0 ? 0 : ggx_tile_plane_words(ggx_tile_plane_bits(bits, 0), ggx_tile_max_steps(bits));
}
GGX_HD constexpr int ggx_tile_unit_words(int bits, int n_steps) {
    const int last = ggx_tile_n_planes(bits) - 1;
    return ggx_tile_plane_base(bits, last) + ggx_tile_plane_words(ggx_tile_plane_bits(bits, last), n_steps);
}

// The factor f of register r of a plane (1024 + f v).
GGX_HD constexpr int ggx_tile_factor(int plane_bits, int r) {
    switch (plane_bits) {
        case 8: return 1;
        case 4: return r % 2 ? 16 : 1;
        case 2: return 1 << (2 * r);
        default: return 1 << r;
    }
}

// The x variant a plane reads: V = f(r2) / f(r0) divides each step's second k-half of x as staged
// (variant 0, 1, 2 for V = 1, 4, 16: planes of 8 and 4 bits, 1 bit, 2 bits).
GGX_HD constexpr int ggx_tile_variant(int plane_bits) {
    return ggx_tile_factor(plane_bits, 2) / ggx_tile_factor(plane_bits, 0) == 16 ? 2
         : ggx_tile_factor(plane_bits, 2) / ggx_tile_factor(plane_bits, 0) == 4  ? 1
                                                                                 : 0;
}

// Where register r of step i (0-based within the unit) of a plane comes from among that plane's
// words of the lane: the word, a right shift and the mask of the fields (8 bits: the low two bytes
// after the shift, one to each half).
struct ggx_tile_src {
    int      word, shift;
    uint32_t mask;
};
GGX_HD constexpr ggx_tile_src ggx_tile_reg_src(int plane_bits, int i, int r) {
    switch (plane_bits) {
        case 8: return {2 * i + r / 2, 16 * (r % 2), 0xffffu};
        case 4: return {i, r >= 2 ? 8 : 0, r % 2 ? 0x00f000f0u : 0x000f000fu};
        case 2: return {i / 2, 8 * (i % 2), 0x00030003u << (2 * r)};
        default: return {i / 4, 4 * (i % 4), 0x00010001u << r};
    }
}

// Register r of step i of a plane, from that plane's words of the lane: two fp16 1024 + f v.
GGX_HD uint32_t ggx_tile_reg(int plane_bits, const uint32_t * pw, int i, int r) {
    const ggx_tile_src s = ggx_tile_reg_src(plane_bits, i, r);
    const uint32_t w = pw[s.word] >> s.shift;
    if (plane_bits == 8) return (w & 0xffu) | (w & 0xff00u) << 8 | 0x64006400u;
    return (w & s.mask) | 0x64006400u;
}

// Where register r's value e (0: low, 1: high) of step i sits in a plane's words of the lane:
// the inverse of ggx_tile_reg (the layout builder writes through it).
GGX_HD void ggx_tile_field_pos(int plane_bits, int i, int r, int e, int * word, int * bit) {
    switch (plane_bits) {
        case 8: *word = 2 * i + r / 2; *bit = 16 * (r % 2) + 8 * e; break;
        case 4: *word = i; *bit = 4 * (r % 2) + 8 * (r / 2) + 16 * e; break;
        case 2: *word = i / 2; *bit = 8 * (i % 2) + 2 * r + 16 * e; break;
        default: *word = i / 4; *bit = 4 * (i % 4) + r + 16 * e; break;
    }
}

// Quantized row (within the step) and column (within the tile) of register r's value e in lane l.
GGX_HD constexpr int ggx_tile_row(int lane, int r, int e) { return 2 * (lane % 4) + 8 * (r / 2) + e; }
GGX_HD constexpr int ggx_tile_col(int lane, int r) { return lane / 4 + 8 * (r % 2); }

// Word j of one lane's words of a unit of `bits` and n_steps steps: every field that the recipes
// read from that word, its code from code_of(i, r, e) (the lane's code for step i of the unit,
// register r, half e). Zero past the unit's words. The host builder and a backend's gather on the GPU both
// write the words through this, so they agree by construction.
template <typename CodeOf> GGX_HD uint32_t ggx_tile_word(int bits, int n_steps, int j, CodeOf code_of) {
    const int p = ggx_tile_n_planes(bits) > 1 && j >= ggx_tile_plane_base(bits, 1) ? 1 : 0;
    const int pb = ggx_tile_plane_bits(bits, p), wj = j - ggx_tile_plane_base(bits, p);
    if (wj >= ggx_tile_plane_words(pb, n_steps)) return 0;
    const int per_word = pb == 8 ? 1 : 4 / pb;   // steps sharing a word (8 bits: half a step per word)
    const int i0 = pb == 8 ? wj / 2 : wj * per_word;
    uint32_t w = 0;
    for (int i = i0; i < i0 + per_word && i < n_steps; i++)
        for (int r = 0; r < 4; r++)
            for (int e = 0; e < 2; e++) {
                int word, bit;
                ggx_tile_field_pos(pb, i, r, e, &word, &bit);
                if (word == wj) w |= (code_of(i, r, e) >> ggx_tile_plane_shift(bits, p) & ((1u << pb) - 1)) << bit;
            }
    return w;
}

// Column order. Natural: layout column n is the matrix's column n. RoPE pairs (hd > 0, for a q or
// k projection whose heads of hd columns rotate pairs (d, d + half), d < half, "rotate_half"):
// within each head, tile j < half / 8 holds the pairs d = 8 j .. 8 j + 7 as its columns g
// (the first of the pair) and g + 8 (the second), which are the two columns a lane of the tile
// loop holds; the tiles past 2 half keep the head's remaining columns in order. So a block that
// owns a tile can rotate its outputs without its neighbours' (the tile step's q/k stage).
GGX_HD constexpr int ggx_tile_src_col(int n, int hd, int half) {
    return hd <= 0 || n % hd >= 2 * half ? n : n - n % hd + 8 * (n % hd / 16) + (n % 16 < 8 ? n % 16 : half + n % 16 - 8);
}

namespace ggx {

// Steps step0 .. step0 + n_steps - 1 of group `group`.
struct TileChunk {
    int step0, n_steps, group;
};

struct TileUnit {
    uint32_t offset;         // first uint4 index of the unit in TileLayout::words ([index][32 lanes] uint4)
    uint32_t tile;           // columns 16 tile .. 16 tile + 15
    uint32_t step0;          // first step: quantized rows 16 step0 ..
    uint32_t chunk0;         // its first chunk (TileLayout::chunks)
    uint32_t chunk_starts;   // bit i: step i starts a chunk (bit 0 always)
    uint8_t  n_steps;        // 1 .. ggx_tile_max_steps(bits), one width
    uint8_t  bits;
    uint8_t  n_uint4;        // uint4 per lane
};

struct TileLayout {
    int K = 0, Np = 0, n_tiles = 0;
    int pair_hd = 0, pair_half = 0;     // column order (ggx_tile_src_col): 0, 0 natural
    std::vector<TileUnit> units;        // tile by tile, then rows
    std::vector<int>      tile_unit0;   // [n_tiles + 1]: tile t's units
    std::vector<uint32_t> words;        // 4 per (uint4 index, lane)
    std::vector<Exl2Group> groups;      // the matrix's groups (for a gather of the words elsewhere)
    std::vector<int32_t>  step_group;   // [K / 16] group of each step
    std::vector<TileChunk> chunks;      // in row order
    std::vector<uint8_t>  group_bits;   // [G]
    std::vector<uint16_t> scales;       // fp16 [G][Np], each tile's 16 in lane order (tile_scale_index)
};

// Where column n's scale of group g sits in TileLayout::scales: row g (Np apart), and within the
// row each tile's 16 as the pairs (column 16 tile + j, 16 tile + j + 8), j = 0..7, so that lane
// (g, t) of a warp loads the two scales it applies (columns g and g + 8) as one 32-bit word. As
// two 16-bit loads, the byte permute that joined them waited for both right after they were
// issued: the largest stall of the tile GEMV (run 99's profile).
inline size_t tile_scale_index(int Np, int g, int n) { return (size_t)g * Np + 16 * (n / 16) + 2 * (n % 8) + (n % 16) / 8; }

// Whether q can take the tile layout (groups of whole 16-row steps); if not, *why names the reason.
bool tile_layout_supported(const ggx_qmatrix & q, std::string * why = nullptr);

// Whether a matrix of N columns (Np stored) takes the RoPE pair order of heads of hd columns
// rotating pairs (d, d + half): whole tiles per head and per 8 pairs (hd a multiple of 16, half
// of 8, at least 8, 2 half <= hd), whole heads, no padding.
inline bool tile_pair_order_ok(int N, int Np, int hd, int half) {
    return hd > 0 && hd % 16 == 0 && half >= 8 && half % 8 == 0 && 2 * half <= hd && N == Np && N % hd == 0;
}

// Builds the layout from an EXL2 matrix with host pointers (q_scale, q_scale_max, groups_host;
// q_weight when copy_words). False, with *why, when it is not supported. Without copy_words the
// words are left empty (a backend gathers them on its device through ggx_tile_word: the host
// decodes code by code: 0.47 s for a 4096 x 14336 matrix on one core here, ~8 ns a code, about a
// minute for an 8B model; without the words, 7 ms).
// pair_hd > 0: the RoPE pair order of heads of pair_hd columns rotating pairs (d, d + pair_half)
// (ggx_tile_src_col), where tile_pair_order_ok holds.
bool tile_layout_build(const ggx_qmatrix & q, TileLayout * out, std::string * why = nullptr, bool copy_words = true, int pair_hd = 0,
                       int pair_half = 0);

// The matrix column that layout column n holds.
inline int tile_src_col(const TileLayout & L, int n) { return ggx_tile_src_col(n, L.pair_hd, L.pair_half); }

// The x variants the layout's planes read (bit v: ggx_tile_variant v), so that a kernel stages
// only those (at 4.0 bpw, one of three: the synthetic mix is uniform 4-bit).
int tile_layout_variants(const TileLayout & L);

// All units dealt to n_warps warps in contiguous runs of near-equal bytes (ggx-deal.h):
// [n_warps + 1], warp w takes units r[w] .. r[w + 1] - 1. Empty when n_warps < 1.
std::vector<int> tile_layout_deal(const TileLayout & L, int n_warps);

// uint4 per lane of all units (the words take 32 x 16 bytes per uint4 index).
inline size_t tile_layout_n_uint4(const TileLayout & L) {
    return L.units.empty() ? 0 : (size_t)L.units.back().offset + L.units.back().n_uint4;
}

// Word j of lane l of unit u (j < 4 n_uint4).
inline uint32_t tile_word(const TileLayout & L, const TileUnit & u, int lane, int j) {
    return L.words[(((size_t)u.offset + j / 4) * 32 + lane) * 4 + j % 4];
}

}  // namespace ggx
