// The balanced form of a one-row decode GEMV (qgemv.cu), as plain integer arithmetic that the
// kernel and host code (and host-only tests) share.
//
// The classic form gives each block one (column tile, K-slice) of a matrix, so a job runs
// tiles x slices blocks: the gate/up job of llama3-8b is 56 tiles x 2 slices = 112 blocks on a
// 132-SM H200, and 20 SMs idle through the longest GEMV of the layer. The balanced form lays a
// matrix's work out as one line of units (unit u of tile t is u + t * units, a unit being a fine
// slice of 32 rows, or a pair of them with the paired tables) and gives block b of B the units
// [b U / B, (b + 1) U / B), U = tiles x units, cut into W consecutive runs for its warp groups.
// With B >= tiles a block covers at most one tile's worth, so it touches at most two tiles: it
// adds its groups' sums per tile in shared memory and leaves one partial per tile touched, and the
// last block of a tile to arrive adds the tile's partials in block order (deterministic).
#pragma once

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define GGX_BAL_FN __host__ __device__ inline
#else
#define GGX_BAL_FN inline
#endif

// First unit of block b of B over U units.
GGX_BAL_FN int64_t ggx_bal_start(int64_t b, int64_t U, int64_t B) { return b * U / B; }

// The block whose units hold unit x: the largest b with ggx_bal_start(b) <= x (needs U >= B, so
// that no block is empty).
GGX_BAL_FN int64_t ggx_bal_block_of(int64_t x, int64_t U, int64_t B) { return ((x + 1) * B + U - 1) / U - 1; }

// The blocks that touch tile t (units per tile `units`): the first, and how many.
GGX_BAL_FN void ggx_bal_tile_blocks(int64_t t, int64_t units, int64_t U, int64_t B, int64_t * first, int64_t * count) {
    const int64_t lo = ggx_bal_block_of(t * units, U, B);
    const int64_t hi = ggx_bal_block_of((t + 1) * units - 1, U, B);
    *first = lo;
    *count = hi - lo + 1;
}

// Warp group g of W in block b: its run of units starts in tile *tile at unit *u0 and ends before
// unit *u1 of it (*u1 == *u0: no units); when it goes on into tile *tile + 1, it takes that
// tile's units [0, *u_next) (else *u_next is 0). The block's tiles are *tile0 and, with *n_tiles
// 2, *tile0 + 1; a group's run starts in one of them.
GGX_BAL_FN void ggx_bal_group_run(int64_t b, int g, int W, int64_t units, int64_t U, int64_t B, int * tile0, int * n_tiles,
                                  int * tile, int * u0, int * u1, int * u_next) {
    const int64_t sb = ggx_bal_start(b, U, B), se = ggx_bal_start(b + 1, U, B);
    const int64_t g0 = sb + g * (se - sb) / W, g1 = sb + (g + 1) * (se - sb) / W;
    *tile0 = (int)(sb / units);
    *n_tiles = (int)((se - 1) / units) - *tile0 + 1;
    const int64_t t = g0 / units;
    *tile = (int)t;
    *u0 = (int)(g0 - t * units);
    *u1 = (int)(g1 - t * units < units ? g1 - t * units : units);
    *u_next = (int)(g1 > (t + 1) * units ? g1 - (t + 1) * units : 0);
}
