// The tile step: the strip step's persistent frame (strip-step.h: one block per SM, several
// one-row GEMV stages with a grid-wide counter between them, each block owning whole output
// columns over the full K and applying the epilogue itself) around the tensor-core tile loop
// (tile-loop.cuh) instead of the fp16-pair strip loop, over the tile layout
// (ggx/ggx-tile-layout.h). Block b owns tiles tile0[b] .. tile0[b + 1] - 1 of every matrix
// (16 columns each; every tile of a matrix holds the same units, so equal counts are equal bytes),
// their units dealt to its warps by bytes; a warp's tile sums meet in shared memory.
//
// A stage: before its wait, each matrix's q_perm, chunk and unit descriptors start their copies
// into shared memory (cp.async: the copies do not hold the threads) and every warp loads its
// first unit's words; after the wait, x (RMS-normalised when
// asked, scaled by a power of two into fp16) is gathered through q_perm into each matrix's fragment
// order with its step and chunk sums, the warps walk their units, and the owners apply the
// epilogue. The warps' sums meet through shared-memory float atomics, so the last bits of an
// output may differ from run to run.
//
// Experimental (GGX_CUDA_STEP=tile): correct in test-cuda. A layer's o, gate/up, down and the
// next layer's q/k/v (a split stage) per launch, attention between launches: 401.1 t/s for
// llama3-8b at 4.0 bpw against the default path's 402.5 (run 115; 381.9 with q/k/v by the fused
// GEMV after the step, run 114), but behind it at 2.5 and 8.0 bpw and on llama3.2-1b (run 116).
// bench/NOTES-cuda-decode.md, "Session 18's findings".
// CUDA only (mma.sync).
#pragma once

#include "strip-step.h"
#include "tile-gemv.h"

#include "ggx/ggx.h"

#include <vector>

// A matrix as a stage of the tile step reads it (device memory).
struct ggx_tile_step_matrix {
    const uint4 *             words;
    const ggx_tile_unit_dev * units;
    const int4 *              chunks;      // (first step, steps, group, 0)
    const uint16_t *          scales;      // ggx::TileLayout::scales' order
    const int *               deal;        // [grid][warps + 1]: block b's warp w takes units deal[b][w] .. deal[b][w + 1] - 1
    const int *               deal_half;   // [grid][warps / 2 + 1]: the same units dealt to half the warps (a GLU stage gives
                                           // each half of a block one of its two matrices)
    const int *               tile0;       // [grid + 1]: block b owns tiles tile0[b] .. tile0[b + 1] - 1
    const uint16_t *          perm;        // [K]: quantized row k is x's row perm[k] (q_perm as uint16, a copy: it goes
                                           // to shared memory by cp.async); null: identity
    int K, Np, n_chunks, grid;
    int block0;                            // the first block of a launch working on it: 0, or in a split stage its
                                           // share's first (ggx_tile_stage::split); its deal's blocks follow
    int pair_hd, pair_half;                // column order (ggx_tile_src_col): 0, 0 natural
    int warps;                             // per block: 12 or 16 (ggx_tile_step_warps)
    int variants;                          // x variants to stage (ggx::tile_layout_variants; 0: all)
    int max_tiles;                         // most tiles of one block
    int max_units;                         // most units of one block
};

// Warps per block the kernel is built for: 16 (128 registers, where its frame spills ~200 bytes)
// or 12 (up to 168 registers, no spills); other values are 16.
inline int ggx_tile_step_warps(int w) { return w == 12 ? 12 : 16; }

// Block b's tiles and its warps' units for a grid of `grid` blocks of `warps` warps (host side,
// before the upload), and the most of each a block holds (what a stage's shared memory is sized by).
struct ggx_tile_step_plan {
    std::vector<int> tile0;   // [grid + 1]
    std::vector<int> deal;    // [grid][warps + 1] (global unit indices)
    int max_tiles = 0, max_units = 0;
};
ggx_tile_step_plan ggx_tile_step_deal(const ggx::TileLayout & L, int grid, int warps);

#define GGX_TILE_STAGE_MATS 3

// One GEMV stage: one matrix, or the two of a GLU (same N, so the same tiles per block), or a
// split stage: up to three matrices that read the same x (q, k, v), each on its own share of the
// blocks (m[i].block0 .. m[i].block0 + m[i].grid - 1, the shares covering the grid), each block
// staging x for its one matrix only. A split stage's outputs go to out[i]: f32 [N] (out_rows 0) or
// row pos[0] of a cache of out_rows rows of N (f32, f16 or bf16), a q or k matrix rotated
// (rope_mask bit i: its tile copy in RoPE pair order, ggx_tile_src_col, so that a block rotates
// its own tiles, with cos and sin computed before its wait).
struct ggx_tile_stage {
    ggx_tile_step_matrix m[GGX_TILE_STAGE_MATS];
    const float *        bias[GGX_TILE_STAGE_MATS];
    int                  n_mat;
    int                  split;
    void *               out[GGX_TILE_STAGE_MATS];
    int                  out_type[GGX_TILE_STAGE_MATS], out_rows[GGX_TILE_STAGE_MATS];
    int                  rope_mask;
    const int32_t *      pos;
    const float *        freq_div;
    ggx_params_rope      rope;
    const float *        x;          // f32 [K]
    int                  K, N;
    const void *         norm_w;     // RMS norm weights {K} or null
    int                  norm, norm_type;
    float                norm_eps;
    int                  epi, act;   // ggx_strip_epi; act: enum ggx_act for GLU
    float *              y;
    const float *        resid;
};

struct ggx_tile_step {
    ggx_tile_stage st[GGX_STRIP_MAX_STAGES];
    int            n_stages;
    int *          counter;          // zero before the launch; the kernel leaves it zero
    int            trace_stage;      // traced launches (GGX_CUDA_TRACE_STAGE): -1 stamps A, B, C at the first three stages'
                                     // ends; s + 100 m stamps stage s's phases instead: m = 0: past its wait, staged, loop
                                     // done; 1: past its wait, norm pass done, x staged (before the chunk sums); 2: loop
                                     // done, epilogue done, the next stage's static part done (before its wait)
};

// Dynamic shared memory of a stage, and of a whole step (the largest stage). A split stage's is
// one matrix's with the largest tables of its matrices, and cos and sin for 8 pairs per tile of
// the largest share when any matrix rotates.
size_t ggx_tile_stage_smem(const ggx_tile_stage & S);
size_t ggx_tile_step_smem(const ggx_tile_step & s);

// Runs the stages on `grid` blocks of m[0].warps warps (every matrix's deal made for that grid and
// warp count; at most one block per SM). The caller checks the shared memory against the device's limit. pdl and trace as
// ggx_cuda_strip_step's. HIP: cudaErrorNotSupported.
cudaError_t ggx_cuda_tile_step(const ggx_tile_step & s, int grid, cudaStream_t stream, bool pdl = false,
                               const struct ggx_trace_dev * trace = nullptr);

// One stage, one matrix, no norm, the stored x order (perm ignored): y = W xq for the Np columns
// (tests). counter: one int of device memory, zero.
cudaError_t ggx_cuda_tile_step_gemv(const ggx_tile_step_matrix & m, const float * xq, float * y, int * counter, cudaStream_t stream);
