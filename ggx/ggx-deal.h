// Contiguous runs of items of near-equal weight: how the host layouts (ggx-strip-layout.h,
// ggx-tile-layout.h) deal their units to warps.
#pragma once

#include <cstdint>

namespace ggx {

// Items u0 .. u1 - 1 (weight(u) each) cut into n_parts contiguous runs: part p ends at the first
// item whose middle passes (p + 1) / n_parts of the total weight, so that no part exceeds the mean
// by more than one item. out[0 .. n_parts]: part p takes out[p] .. out[p + 1] - 1.
template <typename Weight> void deal_by_weight(int u0, int u1, int n_parts, Weight weight, int * out) {
    uint64_t total = 0;
    for (int u = u0; u < u1; u++) total += weight(u);
    int u = u0;
    uint64_t done = 0;
    out[0] = u0;
    for (int p = 0; p < n_parts; p++) {
        const uint64_t goal = total * (p + 1) / n_parts;
        while (u < u1 && done + weight(u) / 2 < goal) done += weight(u++);
        out[p + 1] = p + 1 == n_parts ? u1 : u;
    }
}

}  // namespace ggx
