// A one-row EXL2 GEMV whose dot products run on tensor cores (mma.sync m16n8k16, fp16 inputs,
// fp32 sums), over the tile layout (ggx/ggx-tile-layout.h): the candidate for the decode loop
// after session 14 found the fp16-pair loops issue-bound (bench/NOTES-cuda-decode.md). A
// stand-alone launch for one matrix, for its test and for timing.
//
// A launch stages x once per block: scaled by a power of two (x_scale_exponent) into fp16, in
// each 16-row step's fragment order (lane t of a B column reads x[2t], x[2t + 1] and x[2t + 8],
// x[2t + 9] / V), for V = 1, 4 and 16, each followed by 512 zero halves; and per chunk the sums
// S and T_V of those fp16 values, which the epilogue needs to take the bias 1024 and the zero
// point out. Each warp then walks its dealt units (tile-major, contiguous), the next unit's words
// and first scales loaded while one multiplies, the width's code unrolled over the unit's steps
// (full units of 2-, 4- and 8-step chunks with their chunk changes at compile time). A unit's
// chunks take turns at B's 8 columns, so one epilogue per unit turns D into the columns' sums;
// when the warp's tile changes, they go into y by atomicAdd.
//
// First run in session 15 (runs 93-97): correct at every width; 75 us per llama3-8b layer at
// 4.0 bpw as seven launches since session 16 (run 104), against 88 for the strip GEMV
// (bench/NOTES-cuda-decode.md). Its warp loop (tile-loop.cuh) is also the tile step's
// (tile-step.h). The CUDA build only (sm_80+); the HIP build returns cudaErrorNotSupported.
#pragma once

#if defined(GGX_USE_HIP)
#include "backends/hip/hip-compat.h"
#else
#include <cuda_runtime.h>
#endif

#include "ggx/ggx-tile-layout.h"

#include <cstdint>
#include <vector>

#define GGX_TILE_WARPS 16

// A unit as the kernel reads it (one uint4).
struct ggx_tile_unit_dev {
    uint32_t offset;                  // first uint4 index of its words ([index][32 lanes])
    uint16_t tile, step0, chunk0;
    uint8_t  n_steps;                 // 1 .. 32
    uint8_t  bits_n_uint4;            // bits | n_uint4 << 4 (n_uint4 1 .. 8)
    uint32_t chunk_starts;
};
static_assert(sizeof(ggx_tile_unit_dev) == 16, "one uint4 per unit");

// The layout's units and chunks as the kernel reads them; false when a field does not fit (more
// than 65535 tiles, steps or chunks).
bool ggx_tile_units(const ggx::TileLayout & L, std::vector<ggx_tile_unit_dev> * units, std::vector<int4> * chunks);

// Per step of the layout: (bits, first packed row, first quantized row of its group, 0), what the
// gather needs to find a step's codes in q_weight.
std::vector<int4> ggx_tile_step_info(const ggx::TileLayout & L);

// The layout's words (tile_layout_n_uint4(L) x 32 uint4) written on the device from q_weight
// (device memory, [QR][Np]) through ggx_tile_word, as the host builder writes them: the host
// builds the units, chunks and scales without the words (milliseconds), this the words.
// step_info: ggx_tile_step_info on the device; units: ggx_tile_units on the device; pair_hd,
// pair_half: the layout's column order (ggx_tile_src_col).
cudaError_t ggx_cuda_tile_gather(const uint32_t * q_weight, int Np, const int4 * step_info, const ggx_tile_unit_dev * units, int n_units,
                                 size_t n_uint4, uint4 * words, cudaStream_t stream, int pair_hd = 0, int pair_half = 0);

struct ggx_tile_matrix {
    const uint4 *             words;
    const ggx_tile_unit_dev * units;
    const int4 *              chunks;   // (first step, steps, group, 0)
    const uint16_t *          scales;   // fp16 [G][Np] (ggx::TileLayout::scales' order)
    const int *               deal;     // [grid * GGX_TILE_WARPS + 1] (ggx::tile_layout_deal)
    int K, Np, n_chunks;
    int max_block_units;                // most units of one block's warps (their descriptors go to shared memory)
    int variants;                       // x variants to stage (ggx::tile_layout_variants; 0: all)
    int prefetch;                       // units ahead whose words a warp asks L2 for (0: none; a measurement knob)
};

// A layout (with its words) copied to fresh device memory as a matrix for launches of `grid`
// blocks (the deal made for them). cudaErrorInvalidValue when the layout does not fit the unit
// descriptors (ggx_tile_units); on any error nothing stays allocated.
cudaError_t ggx_cuda_tile_upload(const ggx::TileLayout & L, int grid, ggx_tile_matrix * m);
// Frees what ggx_cuda_tile_upload allocated (null pointers are skipped).
void        ggx_cuda_tile_free(const ggx_tile_matrix & m);

// Dynamic shared memory of a launch of m.
size_t ggx_tile_gemv_smem(const ggx_tile_matrix & m);

// y[0 .. Np) += W xq, xq in quantized row order (f32, 16-byte aligned); y zeroed by the caller (the warps' sums
// meet by atomicAdd, so the last bits may differ from run to run). grid: the blocks the deal was
// made for (GGX_TILE_WARPS warps each). The caller checks the shared memory against the device.
cudaError_t ggx_cuda_tile_gemv(const ggx_tile_matrix & m, const float * xq, float * y, int grid, cudaStream_t stream);
